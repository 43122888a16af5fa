"""W8A8 block-scaled prefill GEMM (seed 001): E4M3 activations with 1x128 scales x E4M3 weights with 128x128 scales.

    c = gemm_w8a8(a, sa, b, sb)        # a [M, K] e4m3, sa [M, K/128] fp32 (any strides),
                                       # b [N, K] e4m3, sb [N/128, K/128] fp32  ->  c [M, N] bf16

    c[m, n] = sum_kb sa[m, kb] * sb[n // 128, kb] * sum_{k in kb} e4m3(a[m, k]) * e4m3(b[n, k])

Worked example (K = 128, one k-block): a row of 128 codes 0x38 (1.0) with sa = 0.5, b row of 0x40 (2.0)
with sb = 0.25 -> c = 0.5 * 0.25 * (128 * 1 * 2) = 32.0

Kernels (`kernel=`), one arithmetic, checked against `reference`:
    "wgmma_ws"  wgmma m64n128k32 e4m3 (sm_90a), warp-specialized cp.async producer + 2 math warpgroups
    "wgmma_256" the same wgmma core, all threads load, kept in step by __syncthreads, 256x128 tile
    "wgmma_pipe" the same with a 128x128 tile and 6 stages
    "wgmma"     the same with 4 stages (the simple one, the correctness anchor)
    "mma_fp8"   mma.sync.m16n8k32 e4m3 -- native on sm_89/sm_120/sm_121, EMULATED by ptxas on sm_90
    "mma_fp8_s3" the same with 3 stages (97 KB of shared memory): the one that fits sm_89 / sm_12x's 99 KB per
                block, so the GB10's QMMA path (fp8lab.kernels.native.choose("gemm_w8a8"))
    "mma_bf16"  the same structure with fragments widened to bf16 and mma.sync.m16n8k16 bf16
FP32 promotion per 128-wide k-block in every kernel (partial sums in their own registers, then
acc += part * (sa * sb), DeepGEMM's fix for Hopper's ~14-bit FP8 accumulation inside a wgmma).

Inputs come from fp8lab.kernels.reference: quantize_group(x, 128) (1x128 activation scales) and
quantize_block(w, 128) (128x128 weight scales), fp8lab.scaling's contract bit for bit.
"""
from __future__ import annotations

import math
import os

import torch

from . import _cuda
from .gemv_fp8 import Launch, _fp8_codes, decode_e4m3

BM = BN = BK = 128
# name -> (source file, function, threads, stages, block-tile rows). The wgmma source builds only for sm_90a
# (sources.py); load_module picks the target.
KERNELS = {
    "wgmma_ws": ("gemm_w8a8_wgmma.cu", "w8a8_wgmma_ws", 384, 6, 128),
    "wgmma_256": ("gemm_w8a8_wgmma.cu", "w8a8_wgmma_256", 256, 4, 256),
    "wgmma_pipe": ("gemm_w8a8_wgmma.cu", "w8a8_wgmma_pipe", 256, 6, 128),
    "wgmma": ("gemm_w8a8_wgmma.cu", "w8a8_wgmma", 256, 4, 128),
    "mma_fp8": ("gemm_w8a8.cu", "w8a8_mma_fp8", 256, 4, 128),
    "mma_fp8_s3": ("gemm_w8a8.cu", "w8a8_mma_fp8_s3", 256, 3, 128),  # 97 KB: fits sm_89 / sm_120 / sm_121 (GB10)
    "mma_bf16": ("gemm_w8a8.cu", "w8a8_mma_bf16", 256, 4, 128),
}


def check_args(a, sa, b, sb, kernel: str = "wgmma_ws") -> tuple[int, int, int]:
    """Validate shapes/dtypes before any CUDA call; returns (M, N, K)."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; valid: {', '.join(KERNELS)}")
    a, b = _fp8_codes(a, "a"), _fp8_codes(b, "b")
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"a and b must be 2-D ([M, K] and [N, K]), got {tuple(a.shape)} and {tuple(b.shape)}")
    M, K = a.shape
    N, Kb = b.shape
    if K != Kb:
        raise ValueError(f"a has K = {K} but b has K = {Kb}")
    if K % BK:
        raise ValueError(f"K = {K} is not a multiple of 128: 1x128 and 128x128 scales need whole k-blocks")
    if N % BN:
        raise ValueError(f"N = {N} is not a multiple of 128 (the 128x128 weight-scale blocks and the kernel's N tile)")
    if M < 1:
        raise ValueError("M must be >= 1")
    for name, s, want in (("sa", sa, (M, K // BK)), ("sb", sb, (N // BN, K // BK))):
        if not isinstance(s, torch.Tensor) or s.dtype != torch.float32:
            raise TypeError(f"{name} must be a float32 tensor, got {getattr(s, 'dtype', type(s).__name__)}")
        if tuple(s.shape) != want:
            raise ValueError(f"{name} must have shape {want}, got {tuple(s.shape)}")
    for name, t in (("a", a), ("sa", sa), ("b", b), ("sb", sb)):
        if not t.is_cuda:
            raise TypeError(f"{name} must be a CUDA tensor, got one on {t.device}")
    return M, N, K


def prepare(a, sa, b, sb, *, kernel: str = "wgmma_ws", out=None) -> Launch:
    """Validate and convert arguments once; returns a Launch computing c (see `gemm_w8a8`)."""
    M, N, K = check_args(a, sa, b, sb, kernel)
    a, b = _fp8_codes(a, "a").contiguous(), _fp8_codes(b, "b").contiguous()
    sb = sb.contiguous()
    if out is None:
        out = torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
    elif out.shape != (M, N) or out.dtype != torch.bfloat16 or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous bf16 tensor of shape {(M, N)}")
    src, name, threads, stages, bm = KERNELS[kernel]
    cp = _cuda._cupy()
    fn = _cuda.load_module(src).get_function(name)
    smem = stages * (bm + BN) * BK + 1024  # + slack to align the tiles to 1024 bytes (128B swizzle atoms)
    fn.max_dynamic_shared_size_bytes = smem
    # sa is read as sa[m * sa_sm + kb * sa_sk] (element strides): row- or column-major, no copy.
    args = (_cuda.as_cupy(a), _sa_arg(sa), cp.int64(sa.stride(0)), cp.int64(sa.stride(1)), _cuda.as_cupy(b),
            _cuda.as_cupy(sb), _cuda.as_cupy(out), cp.int32(M), cp.int32(N), cp.int32(K))
    return Launch(fn, (math.ceil(M / bm), N // BN), (threads,), args, smem, out)


def gemm_w8a8(a, sa, b, sb, *, kernel: str = "wgmma_ws", out=None) -> torch.Tensor:
    """c[M, N] bf16 = block-scaled FP8 GEMM (see module doc). `sa` may be row- or column-major."""
    return prepare(a, sa, b, sb, kernel=kernel, out=out)()


def _sa_arg(sa: torch.Tensor):
    """The raw storage of sa as a flat CuPy array (strides are passed separately, so no copy is made)."""
    cp = _cuda._cupy()
    n = (sa.shape[0] - 1) * sa.stride(0) + (sa.shape[1] - 1) * sa.stride(1) + 1
    flat = torch.as_strided(sa, (n,), (1,))
    return cp.from_dlpack(flat)


# ---- references (float64) ------------------------------------------------------------------------------
def reference(a, sa, b, sb) -> torch.Tensor:
    """float64 c = (decode(a) * sa) @ (decode(b) * sb)^T -- dequantize, then multiply exactly."""
    a, b = _fp8_codes(a, "a"), _fp8_codes(b, "b")
    M, K = a.shape
    N = b.shape[0]
    ad = decode_e4m3(a) * sa.double().repeat_interleave(BK, dim=1)[:, :K]
    bd = decode_e4m3(b) * sb.double().repeat_interleave(BN, 0)[:N].repeat_interleave(BK, 1)[:, :K]
    return ad @ bd.T


def reference_blockwise(a, sa, b, sb) -> torch.Tensor:
    """float64, written the way the kernels compute: per k-block partial products, scaled and summed.

    Mathematically identical to `reference` (scales are constant inside a block); the CPU test checks it.
    """
    a, b = _fp8_codes(a, "a"), _fp8_codes(b, "b")
    M, K = a.shape
    N = b.shape[0]
    ad, bd = decode_e4m3(a), decode_e4m3(b)
    sbn = sb.double().repeat_interleave(BN, 0)[:N]  # [N, KB]
    c = torch.zeros(M, N, dtype=torch.float64, device=a.device)
    for kb in range(K // BK):
        part = ad[:, kb * BK:(kb + 1) * BK] @ bd[:, kb * BK:(kb + 1) * BK].T
        c += part * sa.double()[:, kb:kb + 1] * sbn[:, kb][None, :]
    return c


def w8a16_reference(x: torch.Tensor, b, sb) -> torch.Tensor:
    """The W8A16 answer seed 001 gates against: bf16 activations (unquantized) times the dequantized weights."""
    b = _fp8_codes(b, "b")
    N, K = b.shape
    bd = decode_e4m3(b) * sb.double().repeat_interleave(BN, 0)[:N].repeat_interleave(BK, 1)[:, :K]
    return x.to(torch.bfloat16).double() @ bd.T


def accuracy_gate(y: torch.Tensor, ref: torch.Tensor) -> dict:
    """Seed 001's gate: cosine >= 0.999 and relative RMS <= 2 % (against the W8A16 reference)."""
    y, ref = y.double().flatten(), ref.double().flatten()
    cos = float(torch.dot(y, ref) / (y.norm() * ref.norm()))
    rel_rms = float((y - ref).norm() / ref.norm())
    return {"cosine": cos, "rel_rms": rel_rms, "passed": bool(cos >= 0.999 and rel_rms <= 0.02)}


def test_inputs(M: int, N: int, K: int, kind: str = "random", device="cuda", seed: int = 0):
    """Realistic activations and weights: 'random' (N(0,1) activations, N(0, 0.02) weights) or
    'outliers' (heavy-tailed t(3) activations with 1 % of channels x 50, the LLM.int8() pattern)."""
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(M, K, device=device, generator=g)
    if kind == "outliers":
        chi = torch.randn(M, K, 3, device=device, generator=g).pow(2).sum(-1) / 3
        x = x / chi.sqrt()  # Student t with 3 degrees of freedom
        ch = torch.randperm(K, device=device, generator=g)[: max(1, K // 100)]
        x[:, ch] *= 50.0
    elif kind != "random":
        raise ValueError(f"unknown input kind {kind!r}: 'random' or 'outliers'")
    w = torch.randn(N, K, device=device, generator=g) * 0.02
    return x.to(torch.bfloat16), w


def skipped_kernels() -> set:
    """Kernels a device run marked as failing its smoke test (FP8LAB_SKIP_KERNELS=a,b): not timed or tested."""
    return {k for k in os.environ.get("FP8LAB_SKIP_KERNELS", "").split(",") if k}
