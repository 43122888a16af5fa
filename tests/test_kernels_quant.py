"""GPU quantization kernels (fp8lab/kernels/quant.*, nvfp4.*) against the CPU reference, bit for bit.

CPU part (runs everywhere): argument errors come before any CUDA call; the wrappers raise NoCudaDevice
without a GPU; a NumPy mirror of the bit tricks in quant_common.cuh equals fp8lab.formats exhaustively on
bf16 inputs (the algorithm is checked here, its CUDA spelling on the GPU); the benchmark registry and the
report helper work on recorded results.

GPU part (@pytest.mark.gpu, skipped without a device): codes and scales compared as raw bits with
fp8lab.scaling.quantize on several distributions (normal; heavy-tailed with outliers; tiny values near
underflow, including fp32 subnormals that take the kernels' slow path; NaN/Inf with nonfinite="propagate"),
odd shapes (K not a multiple of 8/16/128, one row, 3-D, empty), outputs poisoned before each run; the
hardware and software conversions over all 2**32 fp32 inputs.
"""
from __future__ import annotations

import json
import zlib

import numpy as np
import pytest
import torch

from fp8lab import formats
from fp8lab.kernels import NoCudaDevice, cuda_available
from fp8lab.kernels import nvfp4 as k4
from fp8lab.kernels import quant as kq

GPU = cuda_available()
gpu = [pytest.mark.gpu, pytest.mark.skipif(not GPU, reason="needs a CUDA device (runs on the lent GPU)")]


def _gpu(f):
    for m in gpu:
        f = m(f)
    return f


# =====================================================================================================
# CPU: argument validation happens before any CUDA call
BAD_CALLS = [
    (lambda: kq.quantize_group(torch.zeros(4, 128, dtype=torch.float16)), TypeError, "bfloat16 or float32"),
    (lambda: kq.quantize_group(torch.zeros(4, 128, dtype=torch.int32)), TypeError, "bfloat16 or float32"),
    (lambda: kq.quantize_group(np.zeros((4, 128), np.float32)), TypeError, "torch tensor or a CuPy array"),
    (lambda: kq.quantize_group(torch.zeros(4, 128), group_size=100), ValueError, "power of two"),
    (lambda: kq.quantize_group(torch.zeros(4, 128), group_size=8), ValueError, "power of two"),
    (lambda: kq.quantize_group(torch.zeros(4, 128), fmt="e3m4"), ValueError, "fmt must be one of"),
    (lambda: kq.quantize_group(torch.zeros(4, 128), cvt="fast"), ValueError, "cvt must be one of"),
    (lambda: kq.quantize_group(torch.zeros(4, 128), scale_layout="col"), ValueError, "scale_layout"),
    (lambda: kq.quantize_group(torch.zeros(4, 128), nonfinite="ignore"), ValueError, "nonfinite"),
    (lambda: kq.quantize_group(torch.tensor(1.0)), ValueError, "at least 1 dims"),
    (lambda: kq.quantize_block(torch.zeros(128)), ValueError, "at least 2 dims"),
    (lambda: kq.quantize_block(torch.zeros(128, 128), block=64), ValueError, "128 x 128"),
    (lambda: kq.quantize_tensor(torch.zeros(8), amax_t=1.0), TypeError, "amax_t"),
    (lambda: kq.dequantize(torch.zeros(4, 128), torch.ones(4, 1)), TypeError, "uint8"),
    (lambda: kq.dequantize(torch.zeros(4, 128, dtype=torch.uint8), torch.ones(4, 2)), ValueError, "group scales"),
    (lambda: kq.dequantize(torch.zeros(4, 128, dtype=torch.uint8), torch.ones(4, 1), out_dtype=torch.float16),
     TypeError, "out_dtype"),
    (lambda: k4.quantize(torch.zeros(4, 32, dtype=torch.float64)), TypeError, "bfloat16 or float32"),
    (lambda: k4.quantize(torch.zeros(4, 32), e2m1="lut"), ValueError, "e2m1 must be one of"),
    (lambda: k4.quantize(torch.zeros(4, 32), scale_cvt="x"), ValueError, "scale_cvt"),
    (lambda: k4.quantize(torch.tensor(1.0)), ValueError, "at least 1 dim"),
    (lambda: k4.quantize(torch.zeros(4, 32), global_amax=3.0), TypeError, "global_amax"),
    (lambda: k4.dequantize((1, 2, 3)), TypeError, "NVFP4 tuple"),
]


@pytest.mark.parametrize("call,exc,msg", BAD_CALLS)
def test_bad_arguments_raise_before_cuda(call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


@pytest.mark.skipif(GPU, reason="checks the CPU-only behaviour")
@pytest.mark.parametrize("call", [
    lambda: kq.quantize_group(torch.randn(4, 128)),
    lambda: kq.quantize_tensor(torch.randn(4, 128).bfloat16()),
    lambda: kq.quantize_block(torch.randn(128, 128)),
    lambda: kq.amax(torch.randn(10)),
    lambda: k4.quantize(torch.randn(4, 32)),
])
def test_no_gpu_raises_no_cuda_device(call):
    with pytest.raises(NoCudaDevice, match="CUDA"):
        call()


@pytest.mark.parametrize("d", [1, 2, 3, 7, 8, 56, 1000, 65537, 2**30 + 1])
def test_fastdiv_magic_exact(d):
    m, l = kq.fastdiv_magic(d)
    rng = np.random.default_rng(d)
    ns = [0, 1, d - 1, d, d + 1, 2**31 - 1] + [int(v) for v in rng.integers(0, 2**31, 2000)]
    assert all(n // d == (n * m) >> (32 + l) for n in ns if n >= 0)


# ---- a NumPy mirror of quant_common.cuh's bit tricks, checked against fp8lab.formats ----------------------
def _f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def _u32(f):
    return np.asarray(f, dtype=np.float32).view(np.uint32)


def _mirror_fp8(q, mb, bias, maxbits, nancode):
    """fp8_encode_sw<MB, B, MAXBITS, NANCODE> in NumPy (uint32 wrap-around arithmetic, float32 RNE adds)."""
    b = _u32(q)
    a = b & np.uint32(0x7FFFFFFF)
    a_s = np.minimum(a, np.uint32(maxbits))
    lsb = (a_s >> np.uint32(23 - mb)) & np.uint32(1)
    with np.errstate(over="ignore"):
        n = (a_s + np.uint32((1 << (22 - mb)) - 1) + lsb - np.uint32((127 - bias) << 23)) >> np.uint32(23 - mb)
        C = _f32(np.uint32((127 + 24 - bias - mb) << 23))
        s = _u32(_f32(a_s) + C) - _u32(C)
    code = np.where(a_s < np.uint32((127 + 1 - bias) << 23), s, n) | ((b >> np.uint32(24)) & np.uint32(0x80))
    return np.where(a > np.uint32(0x7F800000), np.uint32(nancode), code).astype(np.uint8)


def _mirror_e2m1_bits(x):
    b = _u32(x)
    a = np.minimum(b & np.uint32(0x7FFFFFFF), np.uint32(0x40C00000))
    with np.errstate(over="ignore"):
        n = (a + np.uint32(0x1FFFFF) + ((a >> np.uint32(22)) & np.uint32(1)) - np.uint32(126 << 23)) >> np.uint32(22)
        s = _u32(_f32(a) + np.float32(2.0**22)) - np.uint32(0x4A800000)
    idx = np.where(a < np.uint32(0x3F800000), s, n) | ((b >> np.uint32(28)) & np.uint32(8))
    return np.where((b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000), np.uint32(0), idx).astype(np.uint8)


def _probe_inputs(n_random=200_000, seed=0):
    """Every bf16 bit pattern (as fp32), random fp32 bit patterns, and each format's midpoints +- 1 ulp."""
    rng = np.random.default_rng(seed)
    bf = (np.arange(2**16, dtype=np.uint32) << np.uint32(16))
    rnd = rng.integers(0, 2**32, n_random, dtype=np.uint64).astype(np.uint32)
    mids = []
    for f in (formats.E4M3, formats.E5M2, formats.E2M1):
        t = f.table().numpy().astype(np.float64)
        t = np.unique(t[np.isfinite(t) & (t >= 0)])
        m = ((t[:-1] + t[1:]) / 2).astype(np.float32)
        top = np.float32(t[-1] + (t[-1] - t[-2]) / 2)
        mids.append(np.concatenate([m, [top, np.float32(t[-1])]]))
    m = _u32(np.concatenate(mids))
    around = np.concatenate([m + np.uint32(d) for d in (0, 1, 2)] + [m - np.uint32(d) for d in (1, 2)])
    allbits = np.concatenate([bf, rnd, around, around | np.uint32(0x80000000)])
    return _f32(allbits)


@pytest.mark.parametrize("fmt,mb,bias,maxbits,nan", [(formats.E4M3, 3, 7, 0x43E00000, 0x7F),
                                                     (formats.E5M2, 2, 15, 0x47600000, 0x7E)])
def test_numpy_mirror_of_fp8_rounding(fmt, mb, bias, maxbits, nan):
    x = _probe_inputs()
    ref = fmt.encode(torch.from_numpy(x), saturate=True).numpy()
    got = _mirror_fp8(x, mb, bias, maxbits, nan)
    bad = np.flatnonzero(got != ref)
    assert bad.size == 0, f"first mismatches: x={x[bad[:5]]} yours={got[bad[:5]]} spec={ref[bad[:5]]}"


def test_numpy_mirror_of_e2m1_bits():
    x = _probe_inputs()
    ref = formats.E2M1.encode(torch.from_numpy(x), saturate=True).numpy()
    got = _mirror_e2m1_bits(x)
    bad = np.flatnonzero(got != ref)
    assert bad.size == 0, f"first mismatches: x={x[bad[:5]]} yours={got[bad[:5]]} spec={ref[bad[:5]]}"
    # and the RNE-fixed seed compares agree too (formats.e2m1_branchless, NaN aside: it has no NaN rule)
    fin = np.isfinite(x)
    assert np.array_equal(formats.e2m1_branchless(x[fin]), ref[fin])


def test_numpy_mirror_of_decodes():
    """The decode tricks: code bits placed in an fp32 and one exact multiply by a power of two."""
    c = np.arange(256, dtype=np.uint32)
    e4 = _f32(((c & 0x80) << 24) | ((c & 0x7F) << 20)) * np.float32(2.0**120)
    e4 = np.where((c & 0x7F) == 0x7F, np.nan, e4)
    np.testing.assert_array_equal(e4, formats.E4M3.table().numpy())
    e5 = _f32(((c & 0x80) << 24) | ((c & 0x7F) << 21)) * np.float32(2.0**112)
    e5 = np.where((c & 0x7F) > 0x7C, np.nan, np.where((c & 0x7F) == 0x7C, np.copysign(np.inf, e5), e5))
    np.testing.assert_array_equal(e5, formats.E5M2.table().numpy())
    c4 = np.arange(16, dtype=np.uint32)
    e2 = _f32(((c4 & 8) << 28) | ((c4 & 7) << 22)) * np.float32(2.0**126)
    np.testing.assert_array_equal(e2, formats.E2M1.table().numpy())


def test_bench_registry_and_report(tmp_path):
    from fp8lab.kernels import bench, report

    assert "quant" in bench.FAMILIES
    with pytest.raises(SystemExit):
        bench.main(["nosuchfamily"])
    rec = {"provenance": {"git_commit": "abc", "device": "NVIDIA H200", "date": "2026-11-29T00:00:00+00:00",
                          "command": "python -m fp8lab.kernels.bench quant"},
           "ceilings": {"copy_gbps": 4000.0},
           "results": [{"kernel": "k", "shape": "[2, 3]", "dtype": "bf16", "time_us": 10.0, "gbps": 3600.0,
                        "anchor": "torch eager", "anchor_time_us": 30.0, "speedup": 3.0, "fraction_of_copy_bw": 0.9}]}
    p = tmp_path / "quant.json"
    p.write_text(json.dumps(rec))
    s = report.load_and_summarize(p, live=False)
    assert s.source == "recorded" and s.table[0]["speedup"] == 3.0
    assert "RECORDED" in s.banner and "NVIDIA H200" in s.banner and "abc" in s.banner
    assert "(torch ?, CuPy ?, CUDA ?)" in s.banner  # the flat record names none of them
    # fp8lab.provenance's schema nests the versions (packages, machine): the banner reads them there too
    rec["provenance"].update(packages={"torch": "2.11.0", "cupy-cuda13x": "14.2.0"}, machine={"cuda": "13.0"})
    p.write_text(json.dumps(rec))
    assert "(torch 2.11.0, CuPy 14.2.0, CUDA 13.0)" in report.load_and_summarize(p, live=False).banner


# =====================================================================================================
# GPU
from fp8lab.scaling import QuantSpec, pack_nibbles, quantize as ref_quantize  # noqa: E402


def _dist(name: str, shape, seed: int) -> torch.Tensor:
    """float32 CPU inputs of one distribution (the caller casts to bf16)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    n = x.numel()
    if n == 0:
        return x
    if name == "heavy":       # log-normal magnitudes plus a few huge outliers
        x = x * torch.exp(2 * torch.randn(shape, generator=g))
        idx = torch.randint(0, max(n, 1), (max(1, n // 200),), generator=g)
        x.view(-1)[idx] *= 1e4
    elif name == "tiny":      # values far below their group's max (flushed), and whole groups of fp32 subnormals
        x = x * torch.where(torch.rand(shape, generator=g) < 0.9, 1e-6, 1.0)
        if x.dim() and x.shape[-1] >= 2:
            x[..., : x.shape[-1] // 2] = torch.randn(x[..., : x.shape[-1] // 2].shape, generator=g) * 1e-39
        if x.dim() >= 2 and x.shape[0] >= 2:
            x[1] = torch.randn(x[1].shape, generator=g) * 1e-25  # groups with amax < 2**-60: IEEE-division path
    elif name == "nonfinite":
        flat = x.view(-1)
        for v, frac in ((float("nan"), 0.01), (float("inf"), 0.005), (float("-inf"), 0.005)):
            idx = torch.randint(0, max(n, 1), (max(1, int(n * frac)),), generator=g)
            flat[idx] = v
    return x


def _seed(*parts) -> int:
    """A seed that is the same in every process (Python's hash() of a str is randomized per run)."""
    return zlib.crc32(repr(parts).encode())


def _bits32(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32).cpu()


def _assert_same_bytes(got: torch.Tensor, ref: torch.Tensor, what: str):
    got = got.cpu()
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    bad = (got != ref).nonzero()
    assert bad.numel() == 0, (f"{what}: {bad.shape[0]} mismatches; first at {bad[:3].tolist()}: "
                              f"Yours {got[tuple(bad[0])]!r} Spec {ref[tuple(bad[0])]!r}")


def _assert_same_f32(got: torch.Tensor, ref: torch.Tensor, what: str):
    assert tuple(got.shape) == tuple(ref.shape), f"{what}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    g, r = _bits32(got.float()), _bits32(ref.float())
    nan_both = torch.isnan(got.float().cpu()) & torch.isnan(ref.float())
    bad = ((g != r) & ~nan_both).nonzero()
    assert bad.numel() == 0, (f"{what}: {bad.shape[0]} mismatches; first at {bad[:3].tolist()}: "
                              f"Yours {got.float().cpu()[tuple(bad[0])].item()!r} Spec {ref.float()[tuple(bad[0])].item()!r}")


DISTS = ["normal", "heavy", "tiny", "nonfinite"]
DTYPES = [torch.bfloat16, torch.float32]


@_gpu
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_hw_conversion_equals_software_on_all_fp32(fmt):
    r = kq.check_hw_vs_sw(fmt)
    print(f"{fmt}: hardware NaN bytes {[hex(b) for b in r['nan_bytes']]}")
    assert r["mismatches"] == 0, f"cvt.rn.satfinite vs software: {r}"
    assert r["hi_lo_differ"] == 0, f"the two halves of the x2 result differ: {r}"
    assert r["fpu_fast_path_mismatches"] == 0, f"the software fast path's FPU-rounding conversion: {r}"


@_gpu
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("cvt", ["sw", "hw"])
def test_elementwise_fp8_encode_equals_formats(fmt, cvt):
    x = torch.from_numpy(_probe_inputs(seed=1))
    got = kq.encode_elementwise(x.cuda(), fmt, cvt).cpu()
    _assert_same_bytes(got, formats.get(fmt).encode(x, saturate=True), f"{fmt} {cvt}")


@_gpu
def test_e2m1_variants_agree_on_all_fp32():
    r = k4.check_e2m1_variants()
    assert r["bits_vs_branchless"] == 0 and r["branchy_vs_branchless"] == 0, r
    assert r["fast_path_forms_mismatches"] == 0, r


@_gpu
@pytest.mark.parametrize("variant", k4.E2M1_VARIANTS)
def test_elementwise_e2m1_equals_formats(variant):
    x = torch.from_numpy(_probe_inputs(seed=2))
    got = k4.e2m1_encode_elementwise(x.cuda(), variant).cpu()
    _assert_same_bytes(got, formats.E2M1.encode(x, saturate=True), f"e2m1 {variant}")


@_gpu
def test_division_by_scale_is_ieee():
    """div_by_scale (reciprocal once, two Markstein corrections) vs x / s, on adversarial pairs."""
    g = torch.Generator().manual_seed(3)
    n = 1 << 22
    amax = torch.exp2(torch.empty(n).uniform_(-60, 100, generator=g)) * (1 + torch.rand(n, generator=g))
    amax[: n // 4] = torch.exp2(torch.randint(-60, 100, (n // 4,), generator=g).float()) * (2 - 2.0**-23)  # 1/s near a binade edge
    s = amax / 448.0
    x = amax * (torch.rand(n, generator=g) * 2 - 1)
    x[n // 2: n // 2 + n // 8] *= torch.exp2(-torch.randint(0, 60, (n // 8,), generator=g).float())
    fast, ieee = kq.div_check(x.cuda(), s.cuda())
    fast, ieee = fast.cpu(), ieee.cpu()
    # With s >= 2**-69 the remainder can only be subnormal (inexact) for |x| < 2**-102, i.e. |x / s| < 2**-33:
    # far below 2**-17, the smallest rounding boundary of any target format, so such quotients become +-0 codes
    # whichever neighbour the division returns (the sign is checked below for all of them).
    relevant = ieee.abs() >= 2.0**-30
    bad = ((_bits32(fast) != _bits32(ieee)) & relevant).nonzero()
    assert bad.numel() == 0, f"{bad.numel()} differ, e.g. x={x[bad[0]].item()!r} s={s[bad[0]].item()!r}"
    assert torch.equal(torch.signbit(fast), torch.signbit(ieee))


GROUP_SHAPES = [(1, 128), (3, 200), (5, 256), (2, 3, 136), (7, 1000), (4, 100), (0, 128), (6, 7)]


@_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("shape", GROUP_SHAPES)
def test_group_quant_bit_exact(dtype, dist, shape):
    """Every format x conversion x scale layout on one input (one CPU reference per format)."""
    x = _dist(dist, shape, seed=_seed(str(dtype), dist, shape)).to(dtype)
    lead, ng = shape[:-1], -(-shape[-1] // 128)
    for fmt in ("e4m3", "e5m2"):
        ref = ref_quantize(x, QuantSpec(fmt, "group", group_size=128, nonfinite="propagate"))
        for cvt in ("hw", "sw"):
            for layout in ("row", "kmajor"):
                what = f"{fmt} {cvt} {layout}"
                codes = torch.full(shape, 0xAB, dtype=torch.uint8, device="cuda")
                if layout == "row":
                    scales = torch.full((*lead, ng), float("nan"), device="cuda")
                else:
                    scales = torch.full((ng, *lead), float("nan"), device="cuda").permute(*range(1, len(lead) + 1), 0)
                c, s = kq.quantize_group(x.cuda(), 128, fmt, layout, cvt, nonfinite="propagate", out=(codes, scales))
                _assert_same_bytes(c, ref.codes, f"codes ({what})")
                _assert_same_f32(s, ref.scale, f"scales ({what})")
                if layout == "kmajor" and len(lead) == 1 and lead[0] > 1 and ng > 1:
                    assert s.stride() == (1, lead[0])
        c2, s2 = kq.quantize_group(x.cuda(), 128, fmt, "kmajor", nonfinite="propagate")
        _assert_same_f32(s2, ref.scale, f"scales ({fmt} kmajor, allocated)")


@_gpu
@pytest.mark.parametrize("G", [16, 32, 64, 256])
def test_group_sizes(G):
    x = _dist("heavy", (9, 3 * G + 16), seed=G).bfloat16()
    ref = ref_quantize(x, QuantSpec("e4m3", "group", group_size=G, nonfinite="propagate"))
    c, s = kq.quantize_group(x.cuda(), G, nonfinite="propagate")
    _assert_same_bytes(c, ref.codes, "codes")
    _assert_same_f32(s, ref.scale, "scales")


@_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("shape", [(128, 128), (130, 260), (2, 129, 64), (1, 7), (0, 128), (300, 8)])
def test_block_quant_bit_exact(dtype, dist, shape):
    x = _dist(dist, shape, seed=_seed(str(dtype), dist, shape)).to(dtype)
    ntm, ntk = -(-shape[-2] // 128), -(-shape[-1] // 128)
    for fmt in ("e4m3", "e5m2"):
        ref = ref_quantize(x, QuantSpec(fmt, "block", block=(128, 128), nonfinite="propagate"))
        for cvt in ("hw", "sw"):
            codes = torch.full(shape, 0xAB, dtype=torch.uint8, device="cuda")
            scales = torch.full((*shape[:-2], ntm, ntk), float("nan"), device="cuda")
            c, s = kq.quantize_block(x.cuda(), fmt=fmt, cvt=cvt, nonfinite="propagate", out=(codes, scales))
            _assert_same_bytes(c, ref.codes, f"codes {fmt} {cvt}")
            _assert_same_f32(s, ref.scale, f"scales {fmt} {cvt}")


@_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("shape", [(1,), (1000,), (3, 333), (64, 128), (0,)])
def test_tensor_quant_bit_exact(dtype, dist, shape):
    x = _dist(dist, shape, seed=_seed(str(dtype), dist, shape)).to(dtype)
    for fmt in ("e4m3", "e5m2"):
        ref = ref_quantize(x, QuantSpec(fmt, "tensor", nonfinite="propagate"))
        for cvt in ("hw", "sw"):
            codes = torch.full(shape, 0xAB, dtype=torch.uint8, device="cuda")
            scale = torch.full((), float("nan"), device="cuda")
            c, s = kq.quantize_tensor(x.cuda(), fmt, cvt=cvt, nonfinite="propagate", out=(codes, scale))
            _assert_same_bytes(c, ref.codes, f"codes {fmt} {cvt}")
            _assert_same_f32(s, ref.scale, f"scale {fmt} {cvt}")


@_gpu
def test_tensor_quant_with_given_amax_saturates():
    x = _dist("heavy", (50, 64), seed=5)
    a = torch.tensor(0.5)  # far below the true amax: most large values saturate
    c, s = kq.quantize_tensor(x.cuda(), "e4m3", amax_t=a.cuda(), nonfinite="propagate")
    scale = a / 448.0
    _assert_same_bytes(c, formats.E4M3.encode(x / scale, saturate=True), "codes")
    _assert_same_f32(s, scale, "scale")


@_gpu
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_dequant_bit_exact(fmt, out_dtype):
    from fp8lab.scaling import dequantize as ref_dequantize

    x = _dist("nonfinite", (130, 264), seed=7).bfloat16()
    for gran, spec, call in (
        ("group", QuantSpec(fmt, "group", nonfinite="propagate"), lambda xc: kq.quantize_group(xc, fmt=fmt, nonfinite="propagate")),
        ("block", QuantSpec(fmt, "block", nonfinite="propagate"), lambda xc: kq.quantize_block(xc, fmt=fmt, nonfinite="propagate")),
        ("tensor", QuantSpec(fmt, "tensor", nonfinite="propagate"), lambda xc: kq.quantize_tensor(xc, fmt, nonfinite="propagate")),
    ):
        ref = ref_dequantize(ref_quantize(x, spec))
        c, s = call(x.cuda())
        out = torch.full(x.shape, float("nan"), device="cuda").to(out_dtype)
        got = kq.dequantize(c, s, gran, fmt, out_dtype=out_dtype, out=out)
        _assert_same_f32(got.float(), ref.to(out_dtype).float(), f"dequant {gran}")
    # K not a multiple of 8: the scalar path
    x = _dist("normal", (3, 13), seed=8)
    q = ref_quantize(x, QuantSpec(fmt, "group", nonfinite="propagate"))
    c, s = kq.quantize_group(x.cuda(), fmt=fmt)
    _assert_same_f32(kq.dequantize(c, s, "group", fmt), ref_dequantize(q), "dequant K=13")


@_gpu
def test_nonfinite_raise_and_cupy_input():
    import cupy

    x = torch.randn(4, 256)
    x[2, 5] = float("nan")
    with pytest.raises(ValueError, match="NaN or Inf"):
        kq.quantize_group(x.cuda())
    with pytest.raises(ValueError, match="NaN or Inf"):
        k4.quantize(x.cuda())
    y = torch.randn(4, 256)
    c, s = kq.quantize_group(cupy.asarray(y.numpy()))  # CuPy float32 accepted
    ref = ref_quantize(y, QuantSpec("e4m3", "group"))
    _assert_same_bytes(c, ref.codes, "codes from CuPy input")
    with pytest.raises(TypeError, match="CUDA tensor"):
        kq.quantize_group(torch.randn(4, 256))  # a CPU tensor on a GPU machine


NVFP4_SHAPES = [(1, 16), (3, 64), (4, 40), (2, 33), (2, 3, 48), (0, 16), (5, 1), (16, 256), (7, 4096)]


@_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("shape", NVFP4_SHAPES)
def test_nvfp4_quant_bit_exact(dtype, dist, shape):
    """Every E2M1 conversion x block-scale conversion on one input, against one CPU reference."""
    x = _dist(dist, shape, seed=_seed(str(dtype), dist, shape)).to(dtype)
    ref = ref_quantize(x, QuantSpec("e2m1", "nvfp4", nonfinite="propagate"))
    ref_packed = pack_nibbles(ref.codes)
    lead, K = shape[:-1], shape[-1]
    for e2m1 in k4.E2M1_VARIANTS:
        for scale_cvt in ("sw", "hw"):
            what = f"{e2m1} scale-{scale_cvt}"
            out = (torch.full((*lead, -(-K // 2)), 0xAB, dtype=torch.uint8, device="cuda"),
                   torch.full((*lead, -(-K // 16)), 0xAB, dtype=torch.uint8, device="cuda"),
                   torch.full((), float("nan"), device="cuda"))
            q = k4.quantize(x.cuda(), e2m1=e2m1, scale_cvt=scale_cvt, nonfinite="propagate", out=out)
            _assert_same_bytes(q.packed, ref_packed, f"packed codes ({what})")
            _assert_same_bytes(q.scale_codes, ref.scale_codes, f"scale codes ({what})")
            _assert_same_f32(q.global_scale, ref.global_scale, f"global scale ({what})")


@_gpu
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(130, 256), (3, 40), (2, 33)])
def test_nvfp4_dequant_and_given_global_amax(out_dtype, shape):
    from fp8lab.scaling import dequantize as ref_dequantize

    x = _dist("nonfinite", shape, seed=11).bfloat16()
    ref = ref_quantize(x, QuantSpec("e2m1", "nvfp4", nonfinite="propagate"))
    xf = x.float()
    gamax = torch.where(torch.isfinite(xf), xf.abs(), torch.zeros_like(xf)).max().reshape(())
    q = k4.quantize(x.cuda(), global_amax=gamax.cuda(), nonfinite="propagate")  # one pass, same result
    _assert_same_bytes(q.packed, pack_nibbles(ref.codes), "packed codes (given amax)")
    got = k4.dequantize(q, out_dtype=out_dtype)
    _assert_same_f32(got.float(), ref_dequantize(ref).to(out_dtype).float(), "nvfp4 dequant")
