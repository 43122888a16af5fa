"""CPU references of exactly what the GB10-native kernels compute: the hardware E2M1 conversion, the block-scaled
tensor-core MMA (mma.sync ... kind::mxf4nvf4.block_scale.scale_vec::4X ... ue4m3, SASS OMMA.SF), and the W4A4 NVFP4
GEMM end to end. Codes and scales come from fp8lab.scaling (never a second copy of the rule); values from
fp8lab.formats' tables.

    codes = e2m1_cvt(x)                          # what cvt.rn.satfinite.e2m1x2.f32 gives: NaN -> 0x7 (+6)
    codes = e2m1_cvt(x, nan="lab")               # what the lab's kernels store: formats.E2M1.encode (NaN -> 0)
    d = block_scaled_mma(a, sa, b, sb)           # a [M, K] E2M1 codes, sa [M, K/16] E4M3 codes, b [N, K], sb [N, K/16]
    y = w4a4_reference(qa, qw)                   # NVFP4 activations x NVFP4 weights -> bf16 [M, N]
    y = w4a4_end_to_end(x, qw)                   # x bf16: quantized 1x16 by scaling.quantize_nvfp4, then the GEMM

The block-scaled MMA (PTX ISA 9.0, "Block Scaling for mma.sync"): D = (A * scale_A)(B * scale_B) + C, one scale
per 16 elements of K for each operand, so

    D[m, n] = C[m, n] + sum over 16-blocks b of  sa[m, b] * sb[n, b] * S_b[m, n],   S_b = sum_{k in b} a[m, k] b[n, k]

Every term is exact in a few bits: an E2M1 product is a multiple of 1/4 with |.| <= 36, so S_b is a multiple of
1/4 below 576; an E4M3 value is a multiple of 2**-9 below 448, so sa * sb is a multiple of 2**-18; each term
P_b = sa * sb * S_b is an integer multiple of UNIT = 2**-20 below 2**27. This module therefore adds terms as exact
integers (int64 counts of UNIT) and rounds to fp32 only where a rounding is modelled:

    rounding="exact"            one rounding of the whole sum (the ideal)
    rounding="per_block"        acc = fp32(acc + P_b) block by block in k order: what gemm_w4a4_emu.cu computes
                                (two f16 tensor-core MMAs give S_b exactly; one FFMA adds P_b); bit-exact on any GPU
    rounding="per_instruction"  d = fp32(c + P_4i + ... + P_4i+3) once per m16n8k64 instruction, chained along K:
                                the lab's ASSUMED model of the native OMMA

What is assumed about the hardware, and why: NVIDIA documents the operation, not its internal rounding. The model
takes the products and the four block sums of one instruction as exact (the terms need at most 20 significant bits,
so any internal format of at least fp32 width holds them) and one round-to-nearest to fp32 per instruction. If the
tensor core keeps fewer bits inside an instruction (Hopper's FP8 wgmma keeps ~14, DeepSeek-V3 report sec. 3.3.2),
the GB10 test's tolerance (`omma_tolerance`, a few fp32 roundings per instruction) will fail -- which is how the
assumption gets checked, on a GB10, by tests/test_kernels_gb10.py. No GB10 was available to this lab.

The hardware E2M1 conversion (CUDA 13.0 cuda_fp4.hpp, which issues cvt.rn.satfinite.e2m1x2.f32 and documents the
same function in software): round to nearest even, |x| > 6 and +-Inf saturate to +-6, -0 and tiny negatives keep
their sign (0x8), NaN -> +6. fp8lab.formats.E2M1.encode(saturate=True) is the same function except NaN -> 0.
"""
from __future__ import annotations

import math

import torch

from fp8lab import formats, scaling

from . import tolerances

UNIT = 2.0**-20       # every block-scaled term is an integer multiple of this
_MAX_COUNT = 2**53    # counts stay exact in float64 below this (so the one rounding to fp32 is the only one)
ROUNDINGS = ("exact", "per_block", "per_instruction")


# ---- the hardware E2M1 conversion ------------------------------------------------------------------------------
def e2m1_cvt(x: torch.Tensor, nan: str = "hardware") -> torch.Tensor:
    """E2M1 codes of float32 x as cvt.rn.satfinite.e2m1x2.f32 gives them (nan="hardware": NaN -> 0x7) or as the lab's
    kernels store them (nan="lab": NaN -> 0, which is formats.E2M1.encode(x, saturate=True) exactly).

    e2m1_cvt(torch.tensor([2.5, -7.0, float("inf"), -0.1, float("nan")])) -> [0x4, 0xF, 0x7, 0x8, 0x7]
    """
    if nan not in ("hardware", "lab"):
        raise ValueError(f"nan must be 'hardware' or 'lab', got {nan!r}")
    x = x.float()
    codes = formats.E2M1.encode(x, saturate=True)
    if nan == "hardware":
        codes = torch.where(torch.isnan(x), torch.full_like(codes, 0x7), codes)
    return codes


# ---- the block-scaled MMA -------------------------------------------------------------------------------------
def _values(fmt: str, codes: torch.Tensor) -> torch.Tensor:
    return formats.get(fmt).table().double()[codes.long().cpu()]


def block_terms(a: torch.Tensor, sa: torch.Tensor, b: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
    """int64 [K/16, M, N]: P_b / UNIT, exact. a [M, K], b [N, K] E2M1 codes (uint8, 0..15, unpacked); sa [M, K/16],
    sb [N, K/16] E4M3 codes. Raises ValueError on a NaN scale code (a NaN block has no finite term)."""
    M, K = a.shape
    N = b.shape[0]
    if K % formats.NVFP4_BLOCK or b.shape[1] != K:
        raise ValueError(f"a [M, K] and b [N, K] need the same K, a multiple of 16; got {tuple(a.shape)}, {tuple(b.shape)}")
    nb = K // formats.NVFP4_BLOCK
    if tuple(sa.shape) != (M, nb) or tuple(sb.shape) != (N, nb):
        raise ValueError(f"scale codes must be [M, K/16] and [N, K/16]: got {tuple(sa.shape)}, {tuple(sb.shape)}")
    va, vb = _values("e2m1", a), _values("e2m1", b)
    da, db = _values("e4m3", sa), _values("e4m3", sb)
    if bool(torch.isnan(da).any()) or bool(torch.isnan(db).any()):
        raise ValueError("a NaN scale code (0x7F / 0xFF): the block-scaled MMA reference needs finite scales")
    B = formats.NVFP4_BLOCK
    s4 = torch.einsum("mbk,nbk->bmn", va.reshape(M, nb, B), vb.reshape(N, nb, B)) * 4      # integers, |.| < 2**12
    sab = (da.T[:, :, None] * db.T[:, None, :]) * 2.0**18                                   # integers, < 2**36
    return s4.round().to(torch.int64) * sab.round().to(torch.int64)


def _rn32(count: torch.Tensor) -> torch.Tensor:
    """fp32 nearest (ties to even) to count * UNIT: int64 -> float64 is exact below 2**53, float64 -> float32 rounds once."""
    if count.numel() and int(count.abs().max()) >= _MAX_COUNT:
        raise OverflowError("partial sum beyond 2**33: outside the range this exact reference handles")
    return (count.double() * UNIT).float()


def _count(acc32: torch.Tensor) -> torch.Tensor:
    """An fp32 partial sum back to its exact UNIT count (every partial sum is a multiple of UNIT)."""
    return (acc32.double() / UNIT).round().to(torch.int64)


def accumulate(terms: torch.Tensor, rounding: str = "per_instruction", c: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 [M, N] = c + sum of the terms (int64 [nblocks, M, N] from `block_terms`), rounded as `rounding` says."""
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {', '.join(ROUNDINGS)}, got {rounding!r}")
    nb = terms.shape[0]
    acc = torch.zeros(terms.shape[1:], dtype=torch.float32) if c is None else c.float().cpu().clone()
    if rounding == "exact":
        return _rn32(_count(acc) + terms.sum(0))
    step = 1 if rounding == "per_block" else 4  # one m16n8k64 instruction consumes four 16-blocks
    for i in range(0, nb, step):
        acc = _rn32(_count(acc) + terms[i:i + step].sum(0))
    return acc


def block_scaled_mma(a, sa, b, sb, c=None, rounding: str = "per_instruction") -> torch.Tensor:
    """fp32 D = C + (A * scale_A)(B * scale_B) over all of K (chained m16n8k64 steps). See the module doc.

    One 16-block, a = 1.0 (code 0x2) everywhere with scale 2.0 (0x40), b = 0.5 (0x1) with scale 0.25 (0x28):
    block_scaled_mma(full((1, 16), 2), full((1, 1), 0x40), full((1, 16), 1), full((1, 1), 0x28)) -> [[4.0]]
    """
    return accumulate(block_terms(a, sa, b, sb), rounding, c)


# ---- the W4A4 NVFP4 GEMM ----------------------------------------------------------------------------------------
def _unpacked(q) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(packed, scale_codes, global_scale[, k]) -> (codes [R, K] uint8, scale codes, global scale 0-d fp32), on the CPU."""
    packed, sc, gs = q[0], q[1], q[2]
    codes = scaling.unpack_nibbles(packed.cpu())
    if len(q) > 3:
        codes = codes[..., : int(q[3])]
    return codes, sc.cpu(), gs.detach().float().cpu().reshape(())


def w4a4_reference(qa, qw, rounding: str = "per_block", out_dtype=torch.bfloat16) -> torch.Tensor:
    """y[M, N] = fp32(acc * fp32(gsa * gsw)) in `out_dtype` (bf16 by default: the kernels' output), acc the block-scaled
    MMA over all of K with `rounding`. qa, qw: (packed, scale_codes, global_scale) tuples, as scaling.quantize_nvfp4
    and fp8lab.kernels.nvfp4.quantize return them (element 2i in the low nibble)."""
    a, sa, gsa = _unpacked(qa)
    w, sw, gsw = _unpacked(qw)
    acc = block_scaled_mma(a, sa, w, sw, rounding=rounding)
    alpha = gsa * gsw  # fp32 x fp32, one rounding, as the kernels' epilogue
    return (acc * alpha).to(out_dtype)


def quantize_activations(x: torch.Tensor, global_amax=None):
    """NVFP4 activations, 1 x 16 blocks with E4M3 scales: fp8lab.scaling.quantize_nvfp4 (the lab's rule), NaN/Inf
    propagated as the kernels do. Returns (packed, scale codes, global scale)."""
    return scaling.quantize_nvfp4(x.detach().cpu(), global_amax=global_amax, nonfinite="propagate")


def w4a4_end_to_end(x: torch.Tensor, qw, global_amax=None, rounding: str = "per_block") -> torch.Tensor:
    """The W4A4 path from bf16 activations: quantize x (`quantize_activations`), then `w4a4_reference`."""
    return w4a4_reference(quantize_activations(x, global_amax), qw, rounding)


def dequant_matmul(qa, qw) -> torch.Tensor:
    """float64 [M, N] = dequantize(qa) @ dequantize(qw)^T with fp8lab.scaling's dequantization values: the
    mathematical result the W4A4 GEMM approximates (no fp32 rounding anywhere)."""
    a, sa, gsa = _unpacked(qa)
    w, sw, gsw = _unpacked(qw)
    B = formats.NVFP4_BLOCK
    da = _values("e2m1", a) * _values("e4m3", sa).repeat_interleave(B, 1)[:, : a.shape[1]]
    dw = _values("e2m1", w) * _values("e4m3", sw).repeat_interleave(B, 1)[:, : w.shape[1]]
    return (da @ dw.T) * (gsa.double() * gsw.double())


def abs_terms(qa, qw) -> torch.Tensor:
    """float64 [M, N] = sum_k |a_k sa| |w_k sw| * |gsa gsw|: what the fp32 accumulation error scales with."""
    a, sa, gsa = _unpacked(qa)
    w, sw, gsw = _unpacked(qw)
    B = formats.NVFP4_BLOCK
    da = (_values("e2m1", a) * _values("e4m3", sa).repeat_interleave(B, 1)[:, : a.shape[1]]).abs()
    dw = (_values("e2m1", w) * _values("e4m3", sw).repeat_interleave(B, 1)[:, : w.shape[1]]).abs()
    return (da @ dw.T) * abs(float(gsa) * float(gsw))


def omma_tolerance(K: int) -> tolerances.Tolerance:
    """The bound a native OMMA result must meet against `w4a4_reference(..., "per_block")` on a GB10: the bf16 output
    rounding (2**-8 of |ref|) plus fp32 roundings for both models' additions (per block and per instruction) and
    the epilogue. Tight on purpose: an OMMA that accumulates with fewer bits than fp32 fails it (see module doc)."""
    nb = math.ceil(K / formats.NVFP4_BLOCK)
    return tolerances.Tolerance(2.0**-8, tolerances.gamma(2 * nb + 4),
                                f"bf16 output; fp32 sums of {nb} block terms, per block and per instruction")
