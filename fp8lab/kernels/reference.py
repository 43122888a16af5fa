"""The one place the kernel wrappers, tests and benches get codes, scales and format constants from.

Every function here calls fp8lab.scaling / fp8lab.formats (the CPU reference: the lab's one format description
and one scale rule) and moves the result to the input's device, so what a kernel is checked against, and what
a benchmark feeds it, is bit for bit the reference's answer:

    codes, scale = quantize_weight_channel(w)          # E4M3 [N, K] uint8, fp32 [N]   (scaling "channel", axis 0)
    codes, scales = quantize_group(x, 128)             # E4M3 [M, K], fp32 [M, ceil(K/128)]  (vLLM 1x128 groups)
    codes, scales = quantize_block(w, 128)             # E4M3 [N, K], fp32 [ceil(N/128), ceil(K/128)] (DeepSeek)
    packed, sc, gs = quantize_nvfp4(w)                 # [N, ceil(K/2)] nibbles (element 2i low), E4M3 [N, ceil(K/16)], 0-d
    codes, scale = quantize_kv(k_cache, "head")        # E4M3 cache + fp32 per KV head ("tensor", "head", "token")
    cuda_defines()                                     # ('FP8LAB_E4M3_MAN_BITS=3', ..., 'FP8LAB_E2M1_MIDS=0x3e800000u,...')

Worked example: quantize_weight_channel(torch.tensor([[1.0, -448.0], [0.5, 0.25]]))
    -> codes [[0x38, 0xFE], [0x7E, 0x76]], scale [1.0, 0.5 / 448]   (each row's amax maps to 448)

Why on the CPU: the reference is exact there (its table-driven encoder and the IEEE division of `amax / 448`,
which torch on CUDA would turn into a multiply by the reciprocal). The price is a host round trip, seconds for
benchmark-sized tensors (about 75 ns per element on two cores).
"""
from __future__ import annotations

import numpy as np
import torch

from fp8lab import formats, scaling
from fp8lab.scaling import QuantSpec

__all__ = ["cuda_defines", "decode", "e2m1_midpoints", "quantize_weight_channel", "quantize_group",
           "quantize_block", "quantize_nvfp4", "quantize_kv"]


# ---- format constants for the GPU side ---------------------------------------------------------------------
def _f32_bits(v: float) -> int:
    return int(np.array(v, dtype=np.float32).view(np.uint32))


def _f32_literal(v: float) -> str:
    """An exact C float literal: 448.0 -> '0x1.c000000000000p+8f'."""
    return float(np.float32(v)).hex() + "f"


def e2m1_midpoints() -> list[tuple[float, bool]]:
    """The 7 midpoints of E2M1's magnitude grid and whether a tie there rounds DOWN, asked of formats.E2M1.

    e2m1_midpoints()[:2] -> [(0.25, True), (0.75, False)]   # RNE: 0.25 -> 0 (code 0 even), 0.75 -> 1.0 (code 2)
    """
    vals = formats.E2M1.table()[:8].double()
    mids = ((vals[:-1] + vals[1:]) / 2).tolist()
    codes = formats.E2M1.encode(torch.tensor(mids, dtype=torch.float32)).tolist()
    return [(m, c == i) for i, (m, c) in enumerate(zip(mids, codes))]


def cuda_defines() -> tuple[str, ...]:
    """'NAME=VALUE' compile-time defines of every format constant the kernels use (formats.cuh), from FloatFormat."""
    out = ["FP8LAB_FORMATS_DEFINED=1"]
    for f in (formats.E4M3, formats.E5M2, formats.E2M1):
        n = f"FP8LAB_{f.name.upper()}"
        out += [f"{n}_EXP_BITS={f.exp_bits}", f"{n}_MAN_BITS={f.man_bits}", f"{n}_BIAS={f.bias}",
                f"{n}_MAX={_f32_literal(f.max)}", f"{n}_MAX_BITS={_f32_bits(f.max):#010x}u"]
        if f.nan_code is not None:
            out.append(f"{n}_NAN_CODE={f.nan_code:#04x}u")
    mids = e2m1_midpoints()
    out.append("FP8LAB_E2M1_MIDS=" + ",".join(f"{_f32_bits(m):#010x}u" for m, _ in mids))
    out.append(f"FP8LAB_E2M1_TIES_DOWN={sum(1 << i for i, (_, down) in enumerate(mids) if down):#04x}u")
    # NVFP4 (scaling's rule): global scale = amax / (E4M3 max * E2M1 max); block scale = block amax / E2M1 max / global
    out.append(f"FP8LAB_NVFP4_GLOBAL_DIV={_f32_literal(formats.E4M3.max * formats.E2M1.max)}")
    out.append(f"FP8LAB_E2M1_RCP_MAX={_f32_literal(np.float32(1.0) / np.float32(formats.E2M1.max))}")  # RN(1/6)
    return tuple(out)


# ---- decoding (float64 values, on the codes' device) ------------------------------------------------------------
def decode(fmt: str, codes: torch.Tensor) -> torch.Tensor:
    """float64 values of uint8 codes through the format's table: decode("e4m3", tensor([0x38])) -> [1.0]."""
    return formats.get(fmt).table().double().to(codes.device)[codes.long()]


# ---- quantizers -------------------------------------------------------------------------------------------------
def _ref(x: torch.Tensor, spec: QuantSpec):
    return scaling.quantize(x.detach().float().cpu(), spec)


def quantize_weight_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel E4M3: (codes uint8 [N, K], scale fp32 [N]); scale = amax / 448 (1.0 if not > 0)."""
    q = _ref(w, QuantSpec("e4m3", "channel", axis=0, nonfinite="propagate"))
    return q.codes.to(w.device), q.scale.float().to(w.device)


def quantize_group(x: torch.Tensor, group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """1 x group_size E4M3 groups along the last dim: (codes of x's shape, scales [..., ceil(K/G)])."""
    q = _ref(x, QuantSpec("e4m3", "group", group_size=group_size, nonfinite="propagate"))
    return q.codes.to(x.device), q.scale.float().to(x.device)


def quantize_block(w: torch.Tensor, block: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """block x block E4M3 tiles over the last two dims: (codes, scales [..., ceil(N/b), ceil(K/b)])."""
    q = _ref(w, QuantSpec("e4m3", "block", block=(block, block), nonfinite="propagate"))
    return q.codes.to(w.device), q.scale.float().to(w.device)


def quantize_nvfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """NVFP4 along the last dim: (packed nibbles [..., ceil(K/2)], E4M3 scale codes [..., ceil(K/16)], global 0-d)."""
    q = _ref(w, QuantSpec("e2m1", "nvfp4", nonfinite="propagate"))
    return (scaling.pack_nibbles(q.codes).to(w.device), q.scale_codes.to(w.device),
            q.global_scale.float().reshape(()).to(w.device))


def quantize_kv(x: torch.Tensor, granularity: str = "tensor") -> tuple[torch.Tensor, torch.Tensor]:
    """E4M3 codes and fp32 scales of a K or V cache [B|n_pages, Hk, L, D].

    granularity "tensor": one scale (0-d); "head": one per KV head ([Hk], scaling "channel" on axis 1);
    "token": one per (entry, head, token) ([B, Hk, L], scaling "token": the amax of each D-vector).
    """
    spec = {"tensor": QuantSpec("e4m3", "tensor", nonfinite="propagate"),
            "head": QuantSpec("e4m3", "channel", axis=1, nonfinite="propagate"),
            "token": QuantSpec("e4m3", "token", nonfinite="propagate")}
    if granularity not in spec:
        raise ValueError(f"granularity must be one of {', '.join(spec)}; got {granularity!r}")
    q = _ref(x, spec[granularity])
    return q.codes.to(x.device), q.scale.float().to(x.device)
