"""The one place the kernel wrappers, tests and benches get codes, scales and format constants from.

Every function here is fp8lab.scaling / fp8lab.formats (the lab's one format description and one scale rule),
run on the input's own device: scaling is bit-exact on CUDA as on the CPU (tables follow the device, IEEE
division of tensor by tensor, never a reciprocal multiply), so what a kernel is checked against, and what a
benchmark feeds it, is bit for bit the reference's answer without a host round trip. Non-finite inputs follow
scaling's "propagate" policy here (a kernel sees them too; the tests check both agree).

    codes, scale = quantize_weight_channel(w)          # E4M3 [N, K] uint8, fp32 [N]   (scaling "channel", axis 0)
    codes, scales = quantize_group(x, 128)             # E4M3 [M, K], fp32 [M, ceil(K/128)]  (vLLM 1x128 groups)
    codes, scales = quantize_block(w, 128)             # E4M3 [N, K], fp32 [ceil(N/128), ceil(K/128)] (DeepSeek)
    packed, sc, gs = quantize_nvfp4(w)                 # [N, ceil(K/2)] nibbles (element 2i low), E4M3 [N, ceil(K/16)], 0-d
    codes, scale = quantize_kv(k_cache, "head")        # E4M3 cache + fp32 per KV head ("tensor", "head", "token")
    cuda_defines()                                     # ('FP8LAB_FORMATS_DEFINED=1', 'FP8LAB_E4M3_EXP_BITS=4', ...)

Worked example: quantize_weight_channel(torch.tensor([[1.0, -448.0], [0.5, 0.25]]))
    -> codes [[0x38, 0xFE], [0x7E, 0x76]], scale [1.0, 0.5 / 448]   (each row's amax maps to 448)
"""
from __future__ import annotations

import torch

from fp8lab import formats, scaling

__all__ = ["cuda_defines", "decode", "e2m1_midpoints", "quantize_weight_channel", "quantize_group",
           "quantize_block", "quantize_nvfp4", "quantize_kv"]

e2m1_midpoints = formats.e2m1_midpoints   # [(0.25, True), (0.75, False), ...]: midpoint, tie rounds down


def cuda_defines() -> tuple[str, ...]:
    """'NAME=VALUE' compile-time defines of every format constant the kernels use (formats.cuh): formats.cuda_defines."""
    return formats.cuda_define_options()


# ---- decoding (float64 values, on the codes' device) ------------------------------------------------------------
def decode(fmt: str, codes: torch.Tensor) -> torch.Tensor:
    """float64 values of uint8 codes through the format's table: decode("e4m3", tensor([0x38])) -> [1.0]."""
    return formats.get(fmt).table().double().to(codes.device)[codes.long()]


# ---- quantizers: scaling's public helpers, on the input's device, non-finite values propagated ----------------
_P = "propagate"


def quantize_weight_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel E4M3: (codes uint8 [N, K], scale fp32 [N]); scale = amax / 448 (1.0 if not > 0)."""
    codes, scale = scaling.quantize_weight_channel(w.detach(), "e4m3", nonfinite=_P)
    return codes, scale.float()


def quantize_group(x: torch.Tensor, group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """1 x group_size E4M3 groups along the last dim: (codes of x's shape, scales [..., ceil(K/G)])."""
    codes, scale = scaling.quantize_group(x.detach(), group_size, "e4m3", nonfinite=_P)
    return codes, scale.float()


def quantize_block(w: torch.Tensor, block: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """block x block E4M3 tiles over the last two dims: (codes, scales [..., ceil(N/b), ceil(K/b)])."""
    codes, scale = scaling.quantize_block(w.detach(), (block, block), "e4m3", nonfinite=_P)
    return codes, scale.float()


def quantize_nvfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """NVFP4 along the last dim: (packed nibbles [..., ceil(K/2)], E4M3 scale codes [..., ceil(K/16)], global 0-d)."""
    packed, sc, gs = scaling.quantize_nvfp4(w.detach(), nonfinite=_P)
    return packed, sc, gs.float().reshape(())


def quantize_kv(x: torch.Tensor, granularity: str = "tensor") -> tuple[torch.Tensor, torch.Tensor]:
    """E4M3 codes and fp32 scales of a K or V cache [B|n_pages, Hk, L, D].

    granularity "tensor": one scale (0-d); "head": one per KV head ([Hk]); "token": one per (entry, head, token)
    ([B, Hk, L]: the amax of each D-vector).
    """
    codes, scale = scaling.quantize_kv(x.detach(), granularity, "e4m3", nonfinite=_P)
    return codes, scale.float()
