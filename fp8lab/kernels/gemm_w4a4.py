"""W4A4 NVFP4 GEMM: NVFP4 activations (quantized on the fly, 1 x 16 blocks with E4M3 scales) x NVFP4 weights.

    y = gemm_w4a4(x, qw)                 # x bf16 [M, K] (quantized here by fp8lab.kernels.nvfp4.quantize), qw the
                                         # weights' (packed [N, K/2], scale codes [N, K/16], global scale) -> y bf16
    y = gemm_w4a4_q(qa, qw)              # activations already NVFP4: (packed [M, K/2], scale codes, global scale)

    y[m, n] = (gsa * gsw) * sum over 16-blocks b of sa[m, b] sw[n, b] sum_{k in b} e2m1(a[m, k]) e2m1(w[n, k])

Kernels (`kernel=`), one skeleton (gemm_w4a4_common.cuh), checked against fp8lab.kernels.mma_reference:
    "omma"  mma.sync m16n8k64 kind::mxf4nvf4 block_scale scale_vec::4X ue4m3 -- the GB10's FP4 tensor-core
            instruction (OMMA.SF): scales consumed by the tensor core. sm_120a / sm_121a only.
    "emu"   the same fragments through two f16 mma.sync per 16-block and an FP32 promotion: any arch; bit-exact
            against mma_reference's "per_block" rounding (checked on the H200).
    "auto"  "omma" where the device has it, "emu" elsewhere (fp8lab.kernels.native).
Requirements: K % 256 == 0, N % 128 == 0, any M >= 1; packed rows 16-byte aligned (K % 256 == 0 gives it).
The activations' global scale comes from their amax (two passes over x) or from a calibrated `act_global_amax`.
Worked example (K = 256, one scale block per 16): activations all 1.0, weights all 0.5, every scale code 0x38 (1.0),
global scales 1 -> y = 256 * 0.5 = 128.0.
"""
from __future__ import annotations

import math

import torch

from . import _cuda, mma_reference
from .gemm_w8a8 import check_mnk
from .gemv_fp8 import Launch

BM = BN = 128
KSTEP = 256                     # elements of K per pipeline stage (128 packed bytes)
STAGES = 2                      # gemm_w4a4_common.cuh W4_STAGES
STAGE_BYTES = 2 * 128 * 128 + 2 * 128 * 16
SMEM = STAGES * STAGE_BYTES + 1024
KERNELS = {"omma": ("gemm_w4a4.cu", "w4a4_omma"), "emu": ("gemm_w4a4_emu.cu", "w4a4_emu")}


def _nvfp4(q, name):
    if not isinstance(q, (tuple, list)) or len(q) < 3:
        raise TypeError(f"{name} must be an NVFP4 tuple (packed, scale_codes, global_scale), got {type(q).__name__}")
    packed = _cuda.byte_codes(q[0], f"{name} packed", "packed E2M1 nibbles")
    sc = _cuda.byte_codes(q[1], f"{name} scale codes", "E4M3 scale codes")
    gs = q[2]
    if not isinstance(gs, torch.Tensor) or gs.dtype != torch.float32 or gs.numel() != 1:
        raise TypeError(f"{name} global scale must be a one-element float32 tensor")
    return packed, sc, gs


def check_args(qa, qw, kernel: str = "auto") -> tuple[int, int, int]:
    """Validate before any CUDA call; returns (M, N, K)."""
    if kernel not in (*KERNELS, "auto"):
        raise ValueError(f"unknown kernel {kernel!r}; valid: {', '.join((*KERNELS, 'auto'))}")
    a, sa, gsa = _nvfp4(qa, "activations")
    w, sw, gsw = _nvfp4(qw, "weights")
    if a.dim() != 2 or w.dim() != 2:
        raise ValueError(f"packed activations and weights must be 2-D, got {tuple(a.shape)} and {tuple(w.shape)}")
    M, K = a.shape[0], 2 * a.shape[1]
    N = w.shape[0]
    if 2 * w.shape[1] != K:
        raise ValueError(f"activations have K = {K} but weights have K = {2 * w.shape[1]}")
    check_mnk(M, N, K, KSTEP, ": the kernels read 256-element k-steps", BN, " (the kernels' N tile)")
    for name, s, want in (("activation scale codes", sa, (M, K // 16)), ("weight scale codes", sw, (N, K // 16))):
        if tuple(s.shape) != want:
            raise ValueError(f"{name} must have shape {want}, got {tuple(s.shape)}")
    for name, t in (("activations", a), ("activation scales", sa), ("weights", w), ("weight scales", sw),
                    ("activation global scale", gsa), ("weight global scale", gsw)):
        if not t.is_cuda:
            raise TypeError(f"{name} must be on the GPU, got {t.device}")
    return M, N, K


def prepare(qa, qw, *, kernel: str = "auto", out=None) -> Launch:
    """Validate and convert once; returns a Launch computing y (see `gemm_w4a4_q`)."""
    M, N, K = check_args(qa, qw, kernel)
    if kernel == "auto":
        from . import native

        kernel = native.choose("gemm_w4a4")
    a, sa, gsa = (t.contiguous() for t in _nvfp4(qa, "activations"))
    w, sw, gsw = (t.contiguous() for t in _nvfp4(qw, "weights"))
    if out is None:
        out = torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
    elif out.shape != (M, N) or out.dtype != torch.bfloat16 or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous bf16 tensor of shape {(M, N)}")
    src, name = KERNELS[kernel]
    cp = _cuda._cupy()
    fn = _cuda.load_module(src).get_function(name)
    fn.max_dynamic_shared_size_bytes = SMEM
    args = tuple(_cuda.as_cupy(t) for t in (a, sa, gsa.reshape(1), w, sw, gsw.reshape(1), out)) + (
        cp.int32(M), cp.int32(N), cp.int32(K))
    return Launch(fn, (math.ceil(M / BM), N // BN), (256,), args, SMEM, out)


def gemm_w4a4_q(qa, qw, *, kernel: str = "auto", out=None) -> torch.Tensor:
    """y[M, N] bf16 from NVFP4 activations and NVFP4 weights (see module doc)."""
    return prepare(qa, qw, kernel=kernel, out=out)()


def gemm_w4a4(x: torch.Tensor, qw, *, act_global_amax=None, kernel: str = "auto", e2m1: str = "auto",
              out=None) -> torch.Tensor:
    """y = x @ dequant(W)^T with x quantized to NVFP4 first (fp8lab.kernels.nvfp4.quantize: 1 x 16 blocks, E4M3
    scales, the hardware E2M1 conversion where the device has it), then the W4A4 GEMM."""
    from . import nvfp4

    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"x must be a 2-D tensor [M, K], got {getattr(x, 'shape', type(x).__name__)}")
    qa = nvfp4.quantize(x, global_amax=act_global_amax, e2m1=e2m1, nonfinite="propagate")
    return gemm_w4a4_q(qa, qw, kernel=kernel, out=out)


reference = mma_reference.w4a4_reference  # (qa, qw, rounding="per_block") -> bf16, on the CPU
