"""W4A16 NVFP4 decode GEMV / skinny GEMM: E2M1 nibbles + E4M3 block scales widened in registers (gemv_nvfp4.cu).

    y = gemv_nvfp4(x, w_packed, scale_codes, global_scale)
        x bf16 [M, K] (M = 1..16); w_packed uint8 [N, K/2] (element 2i in the low nibble, as
        fp8lab.scaling.pack_nibbles); scale_codes E4M3 [N, K/16]; global_scale fp32 (0-d tensor or float)

    w[n, k] = e2m1(nibble) * e4m3(scale_codes[n, k // 16]) * global_scale   (dequantize's order)

Worked example: nibbles [0x2, 0xA] (= [1.0, -1.0]) with scale code 0x38 (1.0) and global 0.25, x = [[4, 2]]
    -> y = 0.25 * (4 - 2) = [[0.5]]

Bytes per weight: 0.5 + 1/16 = 0.5625, against 2 for bf16: the memory-bound ideal is 3.56x (Marlin's
3.87x counts 4-bit weights with 128-wide fp16 groups). Limits: K % 256 == 0 (one iteration reads 256 k).
"""
from __future__ import annotations

import math

import torch

from . import _cuda
from .gemv_fp8 import Launch, check_activations, decode_e4m3, default_config

_SMEM_LIMIT = 48 * 1024
KERNELS_RNP = {(1, 1, 0), (2, 1, 0), (1, 2, 0), (2, 2, 0), (1, 1, 1), (2, 1, 1)}  # compiled (R, NT, PF)


def _u8(t, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype == torch.float8_e4m3fn:
        return t.view(torch.uint8)
    if t.dtype != torch.uint8:
        raise TypeError(f"{name} must be uint8, got {t.dtype}")
    return t


def check_args(x, w_packed, scale_codes, global_scale) -> tuple[int, int, int]:
    """Validate before any CUDA call; returns (M, N, K)."""
    w_packed = _u8(w_packed, "w_packed")
    scale_codes = _u8(scale_codes, "scale_codes")
    if w_packed.dim() != 2:
        raise ValueError(f"w_packed must be 2-D [N, K/2], got shape {tuple(w_packed.shape)}")
    N, KH = w_packed.shape
    K = 2 * KH
    M, _ = check_activations(x, K)
    if K % 256:
        raise ValueError(f"K = {K} is not a multiple of 256: the kernel reads 256-wide k-blocks (16 NVFP4 scale blocks)")
    if tuple(scale_codes.shape) != (N, K // 16):
        raise ValueError(f"scale_codes for w [{N}, {K}] must have shape {(N, K // 16)}, got {tuple(scale_codes.shape)}")
    if isinstance(global_scale, torch.Tensor):
        if global_scale.numel() != 1 or global_scale.dtype != torch.float32:
            raise ValueError("global_scale must be one float32 value")
    elif not isinstance(global_scale, (int, float)):
        raise TypeError(f"global_scale must be a float or a 1-element float32 tensor, got {type(global_scale).__name__}")
    for name, t in (("x", x), ("w_packed", w_packed), ("scale_codes", scale_codes)):
        if not t.is_cuda:
            raise TypeError(f"{name} must be a CUDA tensor, got one on {t.device}")
    return M, N, K


def valid_config(R: int, S: int, NT: int, PF: int = 0) -> bool:
    return (R, NT, PF) in KERNELS_RNP and S in (1, 2, 4, 8, 16) and S * R * NT * 512 <= _SMEM_LIMIT


def prepare(x, w_packed, scale_codes, global_scale, *, config=None, out=None) -> Launch:
    """Validate, pick (R, S), convert arguments; returns a Launch computing y (see `gemv_nvfp4`)."""
    M, N, K = check_args(x, w_packed, scale_codes, global_scale)
    w_packed, scale_codes = _u8(w_packed, "w_packed"), _u8(scale_codes, "scale_codes")
    NT = 1 if M <= 8 else 2
    R, S, *pf = config if config is not None else default_config(M, N, K, kblock=256)
    PF = pf[0] if pf else 0
    R = min(R, 2)
    if not valid_config(R, S, NT, PF):
        raise ValueError(f"invalid config R={R}, S={S}, PF={PF} for M={M}")
    if not isinstance(global_scale, torch.Tensor):
        global_scale = torch.tensor([float(global_scale)], dtype=torch.float32, device=x.device)
    gs = global_scale.reshape(1).to(device=x.device, dtype=torch.float32).contiguous()
    if out is None:
        out = torch.empty((M, N), dtype=torch.bfloat16, device=x.device)
    elif out.shape != (M, N) or out.dtype != torch.bfloat16 or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous bf16 tensor of shape {(M, N)}")
    cp = _cuda._cupy()
    fn = _cuda.load_module("gemv_nvfp4.cu").get_function(f"gemv_nvfp4_r{R}_nt{NT}_pf{PF}")
    args = (_cuda.as_cupy(w_packed), _cuda.as_cupy(scale_codes), _cuda.as_cupy(gs), _cuda.as_cupy(x.contiguous()),
            _cuda.as_cupy(out), cp.int32(M), cp.int32(N), cp.int32(K))
    return Launch(fn, (math.ceil(N / (16 * R)),), (32 * S,), args, S * R * NT * 4 * 32 * 4, out)


def gemv_nvfp4(x, w_packed, scale_codes, global_scale, *, config=None, out=None) -> torch.Tensor:
    """y[M, N] = x @ dequant(W)^T in bf16, NVFP4 weights dequantized in registers. See module doc."""
    return prepare(x, w_packed, scale_codes, global_scale, config=config, out=out)()


# ---- references and quantization (any device) ---------------------------------------------------------
def decode_e2m1(codes: torch.Tensor) -> torch.Tensor:
    from fp8lab import formats

    return formats.E2M1.table().double().to(codes.device)[codes.long()]


def unpack(w_packed: torch.Tensor) -> torch.Tensor:
    """[N, K/2] bytes -> [N, K] nibble codes (element 2i = low nibble)."""
    return torch.stack([w_packed & 0xF, w_packed >> 4], dim=-1).reshape(w_packed.shape[0], -1)


def dequant_weight(w_packed, scale_codes, global_scale) -> torch.Tensor:
    """float64 [N, K]: e2m1 * e4m3(scale) * global, as fp8lab.scaling.dequantize."""
    v = decode_e2m1(unpack(_u8(w_packed, "w_packed")))
    s = decode_e4m3(_u8(scale_codes, "scale_codes")).repeat_interleave(16, dim=1)
    g = global_scale.double().reshape(()) if isinstance(global_scale, torch.Tensor) else float(global_scale)
    return v * s * g


def reference(x, w_packed, scale_codes, global_scale) -> torch.Tensor:
    return x.double() @ dequant_weight(w_packed, scale_codes, global_scale).to(x.device).T


_E2M1_MIDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_E2M1_STRICT = (True, False, True, False, True, False, True)  # RNE: '>' where the lower neighbour is even


def encode_e2m1(v: torch.Tensor) -> torch.Tensor:
    """float32 -> E2M1 codes, RNE and saturating (fp8lab.formats.e2m1_branchless in torch, any device)."""
    mag = v.abs()
    idx = torch.zeros(v.shape, dtype=torch.uint8, device=v.device)
    for t, strict in zip(_E2M1_MIDS, _E2M1_STRICT):
        idx += (mag > t) if strict else (mag >= t)
    return idx | (torch.signbit(v).to(torch.uint8) << 3)


def quantize_nvfp4(w: torch.Tensor):
    """fp8lab.scaling's NVFP4 contract on any device -> (packed [N, K/2], scale codes [N, K/16], global 0-d).

    global = amax / (448*6) (1 if not > 0); bs = block_amax / 6 / global; sc = e4m3(bs);
    codes = e2m1(w / (e4m3(sc) * global)) where that scale is > 0, else 0.
    """
    wf = w.float()
    N, K = wf.shape
    a = wf.abs()
    gs = a.max() / torch.tensor(448.0 * 6.0, device=w.device)
    gs = torch.where(gs > 0, gs, torch.ones_like(gs))
    bamax = a.reshape(N, K // 16, 16).amax(dim=-1)
    bs = bamax / torch.tensor(6.0, device=w.device) / gs
    sc = bs.clamp(max=448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    s = sc.view(torch.float8_e4m3fn).float() * gs
    full = s.repeat_interleave(16, dim=1)
    codes = encode_e2m1(torch.where(full > 0, wf / full, torch.zeros_like(wf)))
    codes = torch.where(full > 0, codes, torch.zeros_like(codes))
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
    return packed, sc, gs


def random_nvfp4(N: int, K: int, device="cuda", generator=None):
    """Uniform random nibbles (all 16 codes) and finite E4M3 scale codes in [2**-9, 448]: every path exercised."""
    packed = torch.randint(0, 256, (N, K // 2), dtype=torch.int32, device=device, generator=generator).to(torch.uint8)
    sc = torch.randint(1, 0x7F, (N, K // 16), dtype=torch.int32, device=device, generator=generator).to(torch.uint8)
    return packed, sc
