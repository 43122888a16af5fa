"""The NVFP4 decode GEMV with the hardware E2M1 decode (cvt.rn.f16x2.e2m1x2): sm_100a / sm_120a / sm_121a only.

    y = gemv_nvfp4_hw(x, w_packed, scale_codes, global_scale)      # same arguments and contract as gemv_nvfp4
    y = gemv_nvfp4_auto(x, w_packed, scale_codes, global_scale)    # this one where the device has the instruction,
                                                                   # gemv_nvfp4 version 2 elsewhere (native.choose)

Same arithmetic as gemv_nvfp4 version 2 (every weight is e2m1 * e4m3 * 2**-8 exactly in bf16, fp32 accumulation,
the global scale on the fp32 result), so it is checked against the same reference (`gemv_nvfp4.reference`) with
the same tolerance; only the order of the k products inside an MMA differs (pairs of consecutive elements here,
(i, i+4) there). gemv_nvfp4_hw.cu says how a nibble becomes a bf16. Config (R, S, C): R 16-row tiles per warp,
S warps per block splitting K, C 64-byte chunks per row per iteration (K % (128 C) == 0); no cp.async ring.
No GB10 was available: this kernel is compiled and its SASS checked in CPU CI; its GPU test runs on sm_120/121 only.
"""
from __future__ import annotations

import math

import torch

from . import _cuda
from . import gemv_nvfp4 as _v2
from .gemv_fp8 import Launch

KERNELS_HW = {(1, 1, 2), (2, 1, 2), (1, 2, 2), (2, 2, 2), (1, 1, 4)}  # compiled (R, NT, C)
_SMEM_LIMIT = 48 * 1024


def cuda_defines() -> tuple[str, ...]:
    """KERNELS_HW as the -D instantiation list gemv_nvfp4_hw.cu expands (sources.py passes it)."""
    from .sources import instances

    return (instances("FP8LAB_GEMV_NVFP4_HW", "GEMV_NVFP4_HW", KERNELS_HW),)


def valid_config(R: int, S: int, NT: int, C: int, K: int | None = None) -> bool:
    return ((R, NT, C) in KERNELS_HW and S in (1, 2, 4, 8) and S * R * NT * 512 <= _SMEM_LIMIT
            and (K is None or K % (128 * C) == 0))


def default_config(M: int, N: int, K: int) -> tuple[int, int, int]:
    """(R, S, C): version 2's tuned (R, S, C) on the H200 (gemv_nvfp4.default_config_v2), its ring dropped.
    Not tuned on a GB10 (none was available).

    default_config(1, 28672, 8192) -> (1, 4, 2)
    """
    R, S, C, _ = _v2.default_config_v2(M, N, K)
    return R, S, C


def prepare(x, w_packed, scale_codes, global_scale, *, config=None, out=None) -> Launch:
    """Validate (gemv_nvfp4.check_args), pick the config, convert arguments; returns a Launch computing y."""
    M, N, K = _v2.check_args(x, w_packed, scale_codes, global_scale)
    w_packed = _cuda.byte_codes(w_packed, "w_packed", "packed E2M1 nibbles")
    scale_codes = _cuda.byte_codes(scale_codes, "scale_codes", "E4M3 scale codes")
    NT = 1 if M <= 8 else 2
    R, S, C = config if config is not None else default_config(M, N, K)
    if not valid_config(R, S, NT, C, K):
        raise ValueError(f"invalid config R={R}, S={S}, C={C} for M={M}, K={K} (compiled (R, NT, C): "
                         f"{sorted(KERNELS_HW)}; S in 1, 2, 4, 8)")
    gs, out = _v2.scale_and_out(x, global_scale, M, N, out)
    cp = _cuda._cupy()
    fn = _cuda.load_module("gemv_nvfp4_hw.cu").get_function(f"gemv_nvfp4_hw_r{R}_nt{NT}_c{C}")
    args = (_cuda.as_cupy(w_packed), _cuda.as_cupy(scale_codes), _cuda.as_cupy(gs), _cuda.as_cupy(x.contiguous()),
            _cuda.as_cupy(out), cp.int32(M), cp.int32(N), cp.int32(K))
    return Launch(fn, (math.ceil(N / (16 * R)),), (32 * S,), args, S * R * NT * 512, out)


def gemv_nvfp4_hw(x, w_packed, scale_codes, global_scale, *, config=None, out=None) -> torch.Tensor:
    """y[M, N] = x @ dequant(W)^T in bf16, nibbles decoded by the hardware instruction (see module doc)."""
    return prepare(x, w_packed, scale_codes, global_scale, config=config, out=out)()


def gemv_nvfp4_auto(x, w_packed, scale_codes, global_scale, *, out=None) -> torch.Tensor:
    """The hardware-decode GEMV where the device has cvt.rn.f16x2.e2m1x2, gemv_nvfp4 (version 2) elsewhere."""
    from . import native

    if native.choose("gemv_nvfp4") == "hw":
        return gemv_nvfp4_hw(x, w_packed, scale_codes, global_scale, out=out)
    return _v2.gemv_nvfp4(x, w_packed, scale_codes, global_scale, out=out)
