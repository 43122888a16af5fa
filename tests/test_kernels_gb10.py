"""The GB10-native path (sm_120a / sm_121a): its CPU references, checked three ways.

CPU (runs everywhere):
  * the hardware E2M1 conversion's documented semantics (a NumPy port of CUDA 13.0 cuda_fp4.hpp's
    __nv_cvt_double_to_fp4, the software twin of cvt.rn.satfinite.e2m1x2.f32) equal fp8lab.formats.E2M1.encode on
    every bf16 pattern, every midpoint +- ulps and the specials -- except NaN, which the instruction maps to +6 and
    the lab to 0 (mma_reference.e2m1_cvt models both);
  * the block-scaled MMA reference (mma_reference) equals float64 dequantize-then-matmul where it should (exact
    rounding), its per-block rounding equals a plain float32 loop, and its roundings stay within the fp32 bound;
  * the W4A4 reference quantizes activations through fp8lab.scaling; the kernels' fragment and scale addressing
    (swizzle, ldmatrix, lanes) delivers the operand layout PTX / CUTLASS document for m16n8k64 e2m1;
  * argument errors come before any CUDA call; native.choose picks by arch.
H200 (@pytest.mark.gpu): the references against what the PORTABLE kernels compute where the arithmetic is the
same -- the W4A4 emulation kernel (the native kernel's skeleton and registers, software MMA) bit for bit against the
"per_block" reference, end to end from bf16 activations through the GPU quantizer; the E2M1 model against the
portable GPU conversion.
GB10 (@pytest.mark.gpu, skipped unless the device is sm_120 / sm_121; never run by this lab, which had no GB10):
the native kernels themselves -- exhaustive cvt check, hardware quantizer bit-exact, hardware-decode GEMV, OMMA GEMM
within `omma_tolerance`, the 3-stage QMMA W8A8.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fp8lab import formats, scaling
from fp8lab.kernels import cuda_available, gemm_w4a4, mma_reference as MR, native, sources

GPU = cuda_available()


def _cc():
    from fp8lab.kernels._cuda import device_cc

    return device_cc() if GPU else None


gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA device (runs on the lent GPU)")
gb10 = pytest.mark.skipif(not GPU or _cc() not in sources.MMA_NVF4_ARCHS,
                          reason="needs an sm_120 / sm_121 device (a GB10); none was available to this lab")


# =====================================================================================================
# the hardware E2M1 conversion
def _f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def _probe_inputs(seed=0, n_random=100_000):
    """Every bf16 pattern as fp32, random fp32 patterns, E2M1's midpoints and its max +- 2 ulps, both signs."""
    rng = np.random.default_rng(seed)
    bf = np.arange(2**16, dtype=np.uint32) << np.uint32(16)
    rnd = rng.integers(0, 2**32, n_random, dtype=np.uint64).astype(np.uint32)
    t = np.unique(formats.E2M1.table().numpy().astype(np.float64))
    t = t[np.isfinite(t) & (t >= 0)]
    pts = np.concatenate([(t[:-1] + t[1:]) / 2, t, [7.0, 1e30, 2.0**-130]]).astype(np.float32).view(np.uint32)
    around = np.concatenate([pts + np.uint32(d) for d in (0, 1, 2)] + [pts - np.uint32(d) for d in (1, 2)])
    allbits = np.concatenate([bf, rnd, around, around | np.uint32(0x80000000),
                              np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001], np.uint32)])
    return _f32(allbits)


def _nv_cvt_double_to_fp4(x: np.ndarray) -> np.ndarray:
    """CUDA 13.0 cuda_fp4.hpp __nv_cvt_double_to_fp4(x, __NV_E2M1, cudaRoundNearest), ported line by line to NumPy:
    the documented semantics of cvt.rn.satfinite.e2m1x2.f32 (the header issues that instruction where it exists and
    this code elsewhere). float64 bits; RNE on the mantissa; NaN -> +MAXNORM."""
    xb = np.asarray(x, dtype=np.float64).view(np.uint64)
    sign = ((xb >> np.uint64(63)) << np.uint64(3)).astype(np.uint8)
    exp = (((xb >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64) - 1023 + 1)
    mant = ((xb >> np.uint64(53 - 2)) & np.uint64(1)).astype(np.int64)
    absx = xb & np.uint64(0x7FFFFFFFFFFFFFFF)
    half_ulp = np.uint64(1) << np.uint64(53 - 2 - 1)
    res = np.zeros(xb.shape, dtype=np.int64)
    normal = (absx >= np.uint64(0x3FF0000000000000)) & (absx <= np.uint64(0x4018000000000000))
    rnd = xb & ((half_ulp << np.uint64(1)) - np.uint64(1))
    rn = (exp << 1) | mant
    up = (rnd > half_ulp) | ((rnd == half_ulp) & (mant == 1))
    res = np.where(normal, rn + up, res)
    den = (absx > np.uint64(0x3FD0000000000000)) & (absx < np.uint64(0x3FF0000000000000))
    shift = np.clip(1 - exp, 0, 60).astype(np.uint64)
    m = (mant | 2).astype(np.uint64)
    r = (m >> shift).astype(np.int64)
    rbits = (xb | (np.uint64(1) << np.uint64(52))) & ((half_ulp << (shift + np.uint64(1))) - np.uint64(1))
    up = (rbits > (half_ulp << shift)) | ((rbits == (half_ulp << shift)) & ((r & 1) == 1))
    res = np.where(den, r + up, res)
    over = absx > np.uint64(0x4018000000000000)
    res = np.where(over, 7, res)
    sign = np.where(over & (absx > np.uint64(0x7FF0000000000000)), 0, sign)  # NaN -> positive MAXNORM
    return (res | sign).astype(np.uint8)


def test_documented_cvt_semantics_are_the_labs_e2m1_except_nan():
    x = _probe_inputs()
    with np.errstate(invalid="ignore"):  # the signalling NaN among the inputs
        nv = _nv_cvt_double_to_fp4(x.astype(np.float64))
    lab = formats.E2M1.encode(torch.from_numpy(x), saturate=True).numpy()
    nan = np.isnan(x)
    bad = np.flatnonzero((nv != lab) & ~nan)
    assert bad.size == 0, f"first mismatches: x={x[bad[:5]]} Yours(formats)={lab[bad[:5]]} Spec(cuda_fp4)={nv[bad[:5]]}"
    assert set(nv[nan].tolist()) == {0x7} and set(lab[nan].tolist()) == {0x0}  # the one difference
    # and mma_reference's model of both
    xt = torch.from_numpy(x)
    assert np.array_equal(MR.e2m1_cvt(xt).numpy(), nv)
    assert np.array_equal(MR.e2m1_cvt(xt, nan="lab").numpy(), lab)


def test_e2m1_cvt_worked_example():
    x = torch.tensor([2.5, -7.0, float("inf"), -0.1, float("nan"), 0.75, 0.25, 5.0])
    assert MR.e2m1_cvt(x).tolist() == [0x4, 0xF, 0x7, 0x8, 0x7, 0x2, 0x0, 0x6]
    with pytest.raises(ValueError, match="nan must be"):
        MR.e2m1_cvt(x, nan="zero")


# =====================================================================================================
# the block-scaled MMA reference
def _random_operands(M, N, K, seed, scale_lo=1, scale_hi=0x7E):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(0, 16, (M, K), generator=g, dtype=torch.int32).to(torch.uint8)
    b = torch.randint(0, 16, (N, K), generator=g, dtype=torch.int32).to(torch.uint8)
    sa = torch.randint(scale_lo, scale_hi + 1, (M, K // 16), generator=g, dtype=torch.int32).to(torch.uint8)
    sb = torch.randint(scale_lo, scale_hi + 1, (N, K // 16), generator=g, dtype=torch.int32).to(torch.uint8)
    return a, sa, b, sb


def _dequant64(codes, sc):
    v = formats.E2M1.table().double()[codes.long()]
    return v * formats.E4M3.table().double()[sc.long()].repeat_interleave(16, 1)


def test_exact_rounding_is_dequantize_then_matmul():
    """One rounding of the exact sum: float64 dequantize-then-matmul (exact at this size) rounded once to fp32."""
    a, sa, b, sb = _random_operands(8, 16, 256, seed=1)
    ref = (_dequant64(a, sa) @ _dequant64(b, sb).T).float()
    got = MR.block_scaled_mma(a, sa, b, sb, rounding="exact")
    assert torch.equal(got, ref)


def test_per_block_rounding_is_a_float32_loop():
    """acc = fp32(acc + P_b), block by block in k order: an independent float32 loop gives the same bits."""
    a, sa, b, sb = _random_operands(8, 16, 512, seed=2)
    acc = torch.zeros(8, 16)
    for blk in range(512 // 16):
        s = slice(16 * blk, 16 * blk + 16)
        acc = acc + (_dequant64(a[:, s], sa[:, blk:blk + 1]) @ _dequant64(b[:, s], sb[:, blk:blk + 1]).T).float()
    assert torch.equal(MR.block_scaled_mma(a, sa, b, sb, rounding="per_block"), acc)


@pytest.mark.parametrize("rounding", ["per_block", "per_instruction"])
def test_roundings_differ_by_at_most_fp32_accumulation(rounding):
    a, sa, b, sb = _random_operands(16, 8, 1024, seed=3, scale_lo=0x30, scale_hi=0x50)
    exact = (_dequant64(a, sa) @ _dequant64(b, sb).T)
    terms = _dequant64(a, sa).abs() @ _dequant64(b, sb).abs().T
    got = MR.block_scaled_mma(a, sa, b, sb, rounding=rounding).double()
    from fp8lab.kernels import tolerances

    assert bool(((got - exact).abs() <= tolerances.gamma(1024 // 16) * terms).all())


def test_rounding_to_fp32_is_to_nearest_even():
    c = torch.tensor([2**24 + 1, 2**24 + 3, -(2**24 + 1), 2**25 + 2, 2**25 + 6], dtype=torch.int64)
    assert MR._rn32(c).tolist() == [x * MR.UNIT for x in (2**24, 2**24 + 4, -(2**24), 2**25, 2**25 + 8)]


def test_mma_worked_example_and_errors():
    full = lambda shape, v: torch.full(shape, v, dtype=torch.uint8)  # noqa: E731
    assert MR.block_scaled_mma(full((1, 16), 2), full((1, 1), 0x40), full((1, 16), 1), full((1, 1), 0x28)).tolist() == [[4.0]]
    with pytest.raises(ValueError, match="NaN scale"):
        MR.block_scaled_mma(full((1, 16), 2), full((1, 1), 0x7F), full((1, 16), 1), full((1, 1), 0x28))
    with pytest.raises(ValueError, match="multiple of 16"):
        MR.block_scaled_mma(full((1, 8), 2), full((1, 1), 0x38), full((1, 8), 1), full((1, 1), 0x38))
    with pytest.raises(ValueError, match="rounding must be"):
        MR.block_scaled_mma(full((1, 16), 2), full((1, 1), 0x38), full((1, 16), 1), full((1, 1), 0x38), rounding="fast")


def test_w4a4_worked_example():
    """gemm_w4a4's docstring: activations 1.0, weights 0.5, scale codes 1.0, global scales 1, K = 256 -> 128."""
    one = lambda shape, v: torch.full(shape, v, dtype=torch.uint8)  # noqa: E731
    g1 = torch.tensor(1.0)
    qa = (scaling.pack_nibbles(one((2, 256), 0x2)), one((2, 16), 0x38), g1)
    qw = (scaling.pack_nibbles(one((128, 256), 0x1)), one((128, 16), 0x38), g1)
    y = MR.w4a4_reference(qa, qw)
    assert y.dtype == torch.bfloat16 and bool((y == 128.0).all())


def test_w4a4_end_to_end_quantizes_through_scaling():
    g = torch.Generator().manual_seed(4)
    x = (torch.randn(5, 512, generator=g) * 3).bfloat16()
    qw = scaling.quantize_nvfp4(torch.randn(128, 512, generator=g) * 0.02)
    q = scaling.quantize(x, scaling.QuantSpec("e2m1", "nvfp4", nonfinite="propagate"))
    qa = (scaling.pack_nibbles(q.codes), q.scale_codes, q.global_scale)
    y = MR.w4a4_end_to_end(x, qw)
    assert torch.equal(y, MR.w4a4_reference(qa, qw))
    # and it approximates the dequantized product: within the fp32 accumulation bound of the exact value
    ref = MR.dequant_matmul(qa, qw)
    t = MR.omma_tolerance(512)
    assert t.worst(y.double(), ref, MR.abs_terms(qa, qw)) <= 1


# =====================================================================================================
# the kernels' fragment and scale addressing, modelled on the CPU
def _swz(r, c):  # gemm_w8a8_common.cuh swz(): 16-byte chunk c of row r
    return r * 128 + ((c ^ (r & 7)) << 4)


def _ldmatrix_x4(smem, addr_of_lane):
    """ldmatrix.sync.aligned.m8n8.x4.b16: lanes 8j..8j+7 give the row addresses of matrix j; register j of lane l is
    the 4 bytes at (matrix j, row l // 4, bytes 4 (l % 4) ..)."""
    rows = [addr_of_lane(l) for l in range(32)]
    return [[int.from_bytes(bytes(smem[rows[8 * j + l // 4] + 4 * (l % 4): rows[8 * j + l // 4] + 4 * (l % 4) + 4]), "little")
             for j in range(4)] for l in range(32)]


def test_fragment_addressing_delivers_the_m16n8k64_layout():
    """gemm_w4a4_common.cuh's ldmatrix addressing on a swizzled stage, against the documented operand layout
    (CUTLASS SM120_16x8x64_TN ALayout / BLayout; ptx_sm120a.cuh): a0 = row g, k 8t..8t+7; a1 = row g+8; a2, a3 = +32
    in k; b0 = col g, k 8t..; b1 = +32. Nibble e of a register = element 8t + e (+32)."""
    rng = np.random.default_rng(5)
    tile = rng.integers(0, 256, (128, 128), dtype=np.uint8)  # packed rows: 256 elements per row per stage
    smem = np.zeros(128 * 128, np.uint8)
    for r in range(128):
        for c in range(8):
            smem[_swz(r, c): _swz(r, c) + 16] = tile[r, 16 * c: 16 * c + 16]
    codes = np.stack([tile & 0xF, tile >> 4], -1).reshape(128, 256)  # element 2i low nibble

    def nib(word, e):
        return (word >> (4 * e)) & 0xF

    for wm, i, ks in ((0, 0, 0), (1, 3, 2), (0, 2, 3)):
        a = _ldmatrix_x4(smem, lambda l: _swz(wm * 64 + 16 * i + (l & 7) + ((l >> 3) & 1) * 8, 2 * ks + (l >> 4)))
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            for reg, (dr, dk) in enumerate(((0, 0), (8, 0), (0, 32), (8, 32))):
                row = wm * 64 + 16 * i + g + dr
                want = [codes[row, 64 * ks + 8 * t + dk + e] for e in range(8)]
                assert [nib(a[lane][reg], e) for e in range(8)] == want, (wm, i, ks, lane, reg)
    for wn, jj, ks in ((0, 0, 0), (3, 1, 1)):
        q = _ldmatrix_x4(smem, lambda l: _swz(wn * 32 + 16 * jj + (l & 7) + (l >> 4) * 8, 2 * ks + ((l >> 3) & 1)))
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            for reg, (dn, dk) in enumerate(((0, 0), (0, 32), (8, 0), (8, 32))):  # b[2jj][0], b[2jj][1], b[2jj+1][..]
                col = wn * 32 + 16 * jj + g + dn
                assert [nib(q[lane][reg], e) for e in range(8)] == [codes[col, 64 * ks + 8 * t + dk + e] for e in range(8)]


def test_scale_registers_are_where_the_mma_reads_them():
    """Lane l holds row (l // 4) + 8 (l % 2)'s codes for A and col l // 4's for B (byte j = k-block j of the step).
    With thread-id 0 or 1 the MMA reads A row m from lane 4 (m % 8) + 2 tid + m // 8 and B col n from lane 4 n + tid
    (CUTLASS SFALayout / SFBLayout; ptxas accepts thread-id-a 0..1, thread-id-b 0..3): those lanes hold exactly
    that row's / col's codes, whatever thread-id."""
    held_a = {l: (l >> 2) + 8 * (l & 1) for l in range(32)}   # gemm_w4a4_common.cuh: sfa row
    held_b = {l: l >> 2 for l in range(32)}                   # sfb col
    for tid in (0, 1):
        assert all(held_a[4 * (m % 8) + 2 * tid + m // 8] == m for m in range(16))
    for tid in range(4):
        assert all(held_b[4 * n + tid] == n for n in range(8))
    # the emulation's shuffles fetch rows g, g+8 and cols 2t, 2t+1 from lanes 4g, 4g+1, 8t, 8t+4
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        assert (held_a[4 * g], held_a[4 * g + 1], held_b[8 * t], held_b[8 * t + 4]) == (g, g + 8, 2 * t, 2 * t + 1)


# =====================================================================================================
# selection and arguments
def test_native_choose_by_arch():
    assert [native.choose("nvfp4_quant", c) for c in (89, 90, 100, 120, 121)] == ["bits", "bits", "cvt", "cvt", "cvt"]
    assert [native.choose("gemm_w4a4", c) for c in (89, 90, 100, 120, 121)] == ["emu", "emu", "emu", "omma", "omma"]
    assert [native.choose("gemv_nvfp4", c) for c in (90, 121)] == ["v2", "hw"]
    assert native.choose("gemm_w8a8", 90, 232448) == "wgmma_ws"
    assert native.choose("gemm_w8a8", 121, 101376) == "mma_fp8_s3" and native.choose("gemm_w8a8", 89, 101376) == "mma_fp8_s3"
    assert {r["variant"] for r in native.table() if r["arch"] == "sm_121"} == {"cvt", "hw", "omma", "mma_fp8_s3"}
    with pytest.raises(KeyError, match="unknown kernel family"):
        native.choose("gemm_w2a2", 90)
    for f in ("nvfp4_hw.cu", "gemv_nvfp4_hw.cu", "gemm_w4a4.cu"):
        s = sources.get(f)
        assert all(s.target(c).endswith("a") for c in s.only) and not s.builds_for(90)


def test_hw_gemv_configs():
    import re

    from fp8lab.kernels import gemv_nvfp4_hw as H

    d = dict(x.split("=", 1) for x in H.cuda_defines())
    assert {tuple(map(int, m.split(","))) for m in re.findall(r"GEMV_NVFP4_HW\(([\d,]+)\)", d["FP8LAB_GEMV_NVFP4_HW"])} == H.KERNELS_HW
    for M in (1, 8, 9, 16):
        NT = 1 if M <= 8 else 2
        for N, K in [(4096, 4096), (14336, 4096), (28672, 8192), (272, 256)]:
            assert H.valid_config(*H.default_config(M, N, K)[:2], NT, H.default_config(M, N, K)[2], K), (M, N, K)


def _q(shape_packed, shape_sc, device="cpu"):
    return (torch.zeros(shape_packed, dtype=torch.uint8, device=device), torch.zeros(shape_sc, dtype=torch.uint8, device=device),
            torch.ones((), dtype=torch.float32, device=device))


@pytest.mark.parametrize("call,exc,msg", [
    (lambda: gemm_w4a4.check_args(_q((4, 64), (4, 8)), _q((128, 64), (128, 8))), ValueError, "multiple of 256"),
    (lambda: gemm_w4a4.check_args(_q((4, 128), (4, 16)), _q((100, 128), (100, 16))), ValueError, "multiple of 128"),
    (lambda: gemm_w4a4.check_args(_q((4, 128), (4, 16)), _q((128, 256), (128, 32))), ValueError, "K = 256 but"),
    (lambda: gemm_w4a4.check_args(_q((4, 128), (4, 8)), _q((128, 128), (128, 16))), ValueError, "scale codes must"),
    (lambda: gemm_w4a4.check_args(_q((4, 128), (4, 16)), _q((128, 128), (128, 16)), kernel="fast"), ValueError, "unknown kernel"),
    (lambda: gemm_w4a4.check_args((1, 2), _q((128, 128), (128, 16))), TypeError, "NVFP4 tuple"),
    (lambda: gemm_w4a4.check_args(_q((4, 128), (4, 16)), _q((128, 128), (128, 16))), TypeError, "on the GPU"),
    (lambda: gemm_w4a4.gemm_w4a4(torch.zeros(4), _q((128, 128), (128, 16))), ValueError, "2-D"),
])
def test_w4a4_bad_arguments_raise_before_cuda(call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


# =====================================================================================================
# H200: the references against the portable kernels
def _x(M, K, seed, kind="normal"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g)
    if kind == "heavy":
        x = x * torch.exp(2 * torch.randn(M, K, generator=g))
    return x.bfloat16()


def _amax(x):
    return x.float().abs().max().reshape(()).cuda()


def _qw(N, K, seed):
    g = torch.Generator().manual_seed(seed)
    packed, sc, gs = scaling.quantize_nvfp4(torch.randn(N, K, generator=g) * 0.02)
    return packed.cuda(), sc.cuda(), gs.float().reshape(()).cuda()


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,kind", [(1, 128, 256, "normal"), (100, 256, 512, "heavy"), (128, 128, 1024, "normal"),
                                        (300, 384, 768, "heavy")])
def test_w4a4_emulation_equals_the_reference_bit_for_bit(M, N, K, kind):
    """The native kernel's skeleton with a software MMA, on this GPU, against mma_reference's per-block rounding."""
    from fp8lab.kernels import nvfp4

    x = _x(M, K, seed=M + K, kind=kind).cuda()
    qa = nvfp4.quantize(x, global_amax=_amax(x), nonfinite="propagate")  # the portable GPU quantizer (= scaling)
    qw = _qw(N, K, seed=N)
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    y = gemm_w4a4.gemm_w4a4_q(qa, qw, kernel="emu", out=out).cpu()
    ref = MR.w4a4_reference(qa, qw, rounding="per_block")
    bad = (y.float() != ref.float()).nonzero()
    assert bad.numel() == 0, (f"{bad.shape[0]} of {M * N} differ; first {bad[0].tolist()}: "
                              f"Yours {y[tuple(bad[0])].item()!r} Spec {ref[tuple(bad[0])].item()!r}")


@gpu
@pytest.mark.gpu
def test_w4a4_emulation_end_to_end_from_bf16():
    """x bf16 -> NVFP4 on the GPU (dynamic global amax) -> the emulation GEMM, against quantize-on-the-CPU through
    fp8lab.scaling -> the reference: the same bits. And close to the dequantized float64 product."""
    x, qw = _x(64, 1024, seed=6, kind="heavy"), _qw(256, 1024, seed=7)
    y = gemm_w4a4.gemm_w4a4(x.cuda(), qw, kernel="emu", e2m1="auto").cpu()
    assert torch.equal(y, MR.w4a4_end_to_end(x, qw))
    qa = MR.quantize_activations(x)
    assert MR.omma_tolerance(1024).worst(y.double(), MR.dequant_matmul(qa, qw), MR.abs_terms(qa, qw)) <= 1


@gpu
@pytest.mark.gpu
def test_e2m1_model_equals_the_portable_gpu_conversion():
    from fp8lab.kernels import nvfp4

    x = torch.from_numpy(_probe_inputs(seed=8))
    got = nvfp4.e2m1_encode_elementwise(x.cuda(), "bits").cpu()
    assert torch.equal(got, MR.e2m1_cvt(x, nan="lab"))


@gpu
@pytest.mark.gpu
def test_native_variants_not_offered_where_absent():
    from fp8lab.kernels import nvfp4

    if _cc() in sources.E2M1_CVT_ARCHS:
        pytest.skip("this device has the E2M1 conversion")
    with pytest.raises(ValueError, match="needs the hardware E2M1 conversion"):
        nvfp4.quantize(torch.randn(4, 32, device="cuda"), e2m1="cvt")
    assert nvfp4.resolve_e2m1("auto") == "bits" and native.choose("gemm_w4a4") == "emu"  # auto = portable here


# =====================================================================================================
# GB10 (sm_120 / sm_121): the native kernels themselves. Never run by this lab (no GB10).
@gb10
@pytest.mark.gpu
def test_gb10_e2m1_instruction_is_the_documented_function():
    from fp8lab.kernels import nvfp4

    r = nvfp4.check_e2m1_cvt()
    print(f"cvt.rn.satfinite.e2m1x2.f32 on NaN: {r['pos_nan_byte']:#04x} / {r['neg_nan_byte']:#04x} (documented 0x77)")
    assert r["mismatches"] == 0 and r["hi_lo_differ"] == 0, r
    x = torch.from_numpy(_probe_inputs(seed=9))
    assert torch.equal(nvfp4.e2m1_encode_elementwise(x.cuda(), "cvt").cpu(), MR.e2m1_cvt(x, nan="lab"))


@gb10
@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 16), (3, 64), (2, 33), (16, 256), (7, 4096)])
@pytest.mark.parametrize("nonfinite", [False, True])
def test_gb10_hardware_quantizer_is_bit_exact(shape, nonfinite):
    from fp8lab.kernels import nvfp4

    g = torch.Generator().manual_seed(shape[-1])
    x = torch.randn(shape, generator=g) * torch.exp(2 * torch.randn(shape, generator=g))
    if nonfinite:
        x.view(-1)[:: 7] = float("inf")
        x.view(-1)[3:: 11] = float("nan")
    ref = scaling.quantize(x.bfloat16(), scaling.QuantSpec("e2m1", "nvfp4", nonfinite="propagate"))
    q = nvfp4.quantize(x.bfloat16().cuda(), e2m1="cvt", nonfinite="propagate")
    assert torch.equal(q.packed.cpu(), scaling.pack_nibbles(ref.codes))
    assert torch.equal(q.scale_codes.cpu(), ref.scale_codes)


@gb10
@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 9, 16])
def test_gb10_hardware_decode_gemv(M):
    from fp8lab.kernels import gemv_nvfp4, gemv_nvfp4_hw, tolerances

    N, K = 1024, 2048
    g = torch.Generator().manual_seed(M)
    packed, sc = gemv_nvfp4.random_nvfp4(N, K, device="cpu", generator=g)
    x = torch.randn(M, K, generator=g).bfloat16()
    y = gemv_nvfp4_hw.gemv_nvfp4_hw(x.cuda(), packed.cuda(), sc.cuda(), 0.5).cpu()
    ref = gemv_nvfp4.reference(x, packed, sc, 0.5)
    terms = x.double().abs() @ gemv_nvfp4.dequant_weight(packed, sc, 0.5).abs().T
    assert tolerances.matmul("gemv_nvfp4", K).worst(y, ref, terms) <= 1


@gb10
@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K", [(1, 128, 256), (200, 256, 2048)])
def test_gb10_omma_gemm_within_tolerance(M, N, K):
    """The native OMMA GEMM against the reference: within omma_tolerance if the tensor core accumulates in fp32.
    A failure here by a small factor means fewer internal bits (then promote partial sums, as DeepGEMM does)."""
    x = _x(M, K, seed=K).cuda()
    qw = _qw(N, K, seed=N)
    y = gemm_w4a4.gemm_w4a4(x, qw, kernel="omma").cpu()
    qa = MR.quantize_activations(x.cpu())
    ref = MR.w4a4_reference(qa, qw, rounding="per_block").double()
    exact = MR.dequant_matmul(qa, qw)
    worst = MR.omma_tolerance(K).worst(y.double(), exact, MR.abs_terms(qa, qw))
    print(f"OMMA vs exact: worst/bound {worst:.3f}; identical to per-block reference: {torch.equal(y.double(), ref)}")
    assert worst <= 1


@gb10
@pytest.mark.gpu
def test_gb10_qmma_w8a8():
    from fp8lab.kernels import gemm_w8a8 as G, reference as REF, tolerances

    x, w = G.test_inputs(200, 256, 1024, device="cpu")
    a, sa = REF.quantize_group(x.float(), 128)
    b, sb = REF.quantize_block(w, 128)
    kernel = native.choose("gemm_w8a8")
    y = G.gemm_w8a8(a.cuda(), sa.cuda(), b.cuda(), sb.cuda(), kernel=kernel).cpu()
    ref = G.reference(a, sa, b, sb)
    terms = (G.decode_e4m3(a).abs() * sa.double().repeat_interleave(128, 1)) @ (
        G.decode_e4m3(b).abs() * sb.double().repeat_interleave(128, 0).repeat_interleave(128, 1)).T
    assert tolerances.matmul(kernel, 1024).worst(y, ref, terms) <= 1
    assert math.isfinite(float(y.float().abs().max()))
