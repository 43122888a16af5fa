"""Scale factors: every granularity the industry uses, behind one `quantize` / `dequantize` pair.

A scale maps a tensor's range into the format's window before rounding and back after:

    x_hat = decode(encode(x / scale)) * scale,      scale = amax / fmt.max   (per group)

    x = [[3e-4, -1e-4, 2e-4]]                         # small activations
    E4M3.round(x)                     -> [[0, 0, 0]]  # all below 2**-10: flushed
    fake_quant(x, QuantSpec("e4m3", "tensor"))
                                      -> [[3.0e-4, -9.64e-5, 1.93e-4]]  # scale 6.7e-7 lifts them into range

Granularities (`QuantSpec.granularity`) and the shape of `Quantized.scale` for x of shape [..., M, K]:
    "none"     no scale factor (scale 1): plain rounding, seed 003's "no scale" recipes   -> []
    "tensor"   one amax for the whole tensor (per-tensor `weight_scale`)                  -> []
    "channel"  one per index along `axis` (per-output-channel weights: axis=0)            -> [x.shape[axis]]
    "token"    one per row of the last dimension (per-token activations)                  -> [..., M]
    "group"    1 x group_size along the last dim (seed 001's 1x128 activation scales)     -> [..., M, ceil(K/G)]
    "block"    B0 x B1 tiles over the last two dims (128x128 `weight_scale_inv`)          -> [..., ceil(M/B0), ceil(K/B1)]
    "nvfp4"    E2M1 elements, 16-blocks along K, E4M3 block scales x an fp32 global scale -> [..., M, ceil(K/16)]
    "mx"       OCP MX: 32-blocks along K, E8M0 power-of-two scales (floor or ceil rule)  -> [..., M, ceil(K/32)]

The arithmetic is fixed so that GPU kernels can equal it bit for bit (fp32 throughout, IEEE division):
  FP8/INT8:  scale = amax / fmt.max; a group whose scale is not > 0 (all zeros, or underflow) gets scale 1.0.
  NVFP4:     global = amax_tensor / (448 * 6) (1.0 if not > 0); per block bs = amax_block / 6 / global,
             stored as E4M3 code sc = E4M3.encode(bs); elements E2M1.encode(x / (decode(sc) * global)).
  MX:        e = floor(log2 amax) - emax_elem (OCP "floor"), or the smallest e with amax / 2**e <= fmt.max
             ("ceil", never saturates); e in [-127, 127]; amax == 0 -> e = -127; elements encode(x / 2**e).
A partial last group (K not a multiple of the group) uses the elements that exist.

Non-finite input: `nonfinite="raise"` (default) refuses NaN/Inf with a ValueError that counts them.
`nonfinite="propagate"`: amax ignores NaN/Inf, Inf saturates to +-max, NaN keeps the format's NaN code
(FP8); an NVFP4 or MX block holding a NaN gets the NaN scale code, so the whole block decodes to NaN.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F

from . import formats as _f

GRANULARITIES = ("none", "tensor", "channel", "token", "group", "block", "nvfp4", "mx")
_EMAX = {"e4m3": 8, "e5m2": 15, "e2m1": 2, "int8": 6}  # exponent of the largest normal: 448=1.75*2**8 etc.
_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


@dataclass(frozen=True)
class QuantSpec:
    """What to quantize to and how scales are shared.

    QuantSpec("e4m3", "group", group_size=128)    # vLLM per_token_group_quant_fp8
    QuantSpec("e4m3", "block", block=(128, 128))  # DeepSeek weight_scale_inv
    QuantSpec("e2m1", "nvfp4")                    # NVFP4
    QuantSpec("e2m1", "mx", scale_rule="floor")   # MXFP4
    QuantSpec("int8", "channel", axis=0)          # per-output-channel INT8 weights
    """

    fmt: str = "e4m3"
    granularity: str = "tensor"
    axis: int = 0
    group_size: int = 128
    block: tuple = (128, 128)
    scale_rule: str = "floor"
    nonfinite: str = "raise"

    def __post_init__(self):
        _f.get(self.fmt)  # raises with the valid names
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"unknown granularity {self.granularity!r}; valid: {', '.join(GRANULARITIES)}")
        if self.granularity == "nvfp4" and _f.get(self.fmt) is not _f.E2M1:
            raise ValueError("nvfp4 granularity needs fmt='e2m1' (E2M1 elements, E4M3 block scales)")
        if self.granularity == "mx" and _f.get(self.fmt) not in (_f.E2M1, _f.E4M3, _f.E5M2):
            raise ValueError("mx granularity needs fmt e2m1, e4m3 or e5m2")
        if self.scale_rule not in ("floor", "ceil"):
            raise ValueError("scale_rule must be 'floor' (OCP) or 'ceil'")
        if self.nonfinite not in ("raise", "propagate"):
            raise ValueError("nonfinite must be 'raise' or 'propagate'")
        if int(self.group_size) < 1 or any(int(b) < 1 for b in self.block) or len(self.block) != 2:
            raise ValueError("group_size and block sizes must be positive integers")

    @property
    def format(self):
        return _f.get(self.fmt)

    @property
    def block_len(self) -> int:
        """Elements per scale along the last dim for the grouped granularities."""
        return {"group": int(self.group_size), "nvfp4": 16, "mx": 32}.get(self.granularity, 0)


@dataclass
class Quantized:
    """The result of `quantize`: enough to dequantize, and to hand to a kernel.

    codes        uint8 (int8 for INT8) of x's shape; E2M1 codes unpacked, one per byte (pack with `pack_nibbles`)
    scale        float32 dequant multipliers, shaped per granularity (module docstring)
    scale_codes  uint8 stored scale codes: E4M3 for nvfp4, E8M0 for mx; None otherwise
    global_scale 0-d float32 (nvfp4) or None
    """

    codes: torch.Tensor
    scale: torch.Tensor
    spec: QuantSpec
    shape: tuple
    scale_codes: torch.Tensor | None = None
    global_scale: torch.Tensor | None = None
    extra: dict = field(default_factory=dict)

    def dequantize(self) -> torch.Tensor:
        return dequantize(self)


# ---- helpers ---------------------------------------------------------------------------------------
def _check_input(x: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"quantize expects a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"quantize expects a floating tensor (float32/bf16/fp16), got {x.dtype}")
    need_2d = spec.granularity == "block"
    need_1d = spec.granularity in ("token", "group", "nvfp4", "mx")
    if (need_2d and x.dim() < 2) or (need_1d and x.dim() < 1):
        raise ValueError(f"granularity {spec.granularity!r} needs a tensor of at least {2 if need_2d else 1} dims, got shape {tuple(x.shape)}")
    if spec.granularity == "channel" and not (-x.dim() <= spec.axis < x.dim()):
        raise ValueError(f"axis {spec.axis} is out of range for shape {tuple(x.shape)}")
    xf = x.float()
    bad = ~torch.isfinite(xf)
    if spec.nonfinite == "raise" and bool(bad.any()):
        n_nan = int(torch.isnan(xf).sum())
        raise ValueError(f"input holds {n_nan} NaN and {int(bad.sum()) - n_nan} Inf values; "
                         "pass QuantSpec(..., nonfinite='propagate') to quantize them by the documented policy")
    return xf


def _finite_abs(xf: torch.Tensor) -> torch.Tensor:
    a = xf.abs()
    return torch.where(torch.isfinite(a), a, torch.zeros_like(a))


def _fp_scale(amax: torch.Tensor, fmax: float) -> torch.Tensor:
    """scale = amax / fmax (fp32); 1.0 where that is not > 0 (all-zero group or underflow)."""
    s = amax.float() / torch.tensor(fmax, dtype=torch.float32)
    return torch.where(s > 0, s, torch.ones_like(s))


def _pad_last(x: torch.Tensor, mult: int) -> torch.Tensor:
    pad = (-x.shape[-1]) % mult
    return F.pad(x, (0, pad)) if pad else x


def _grouped(x: torch.Tensor, g: int) -> torch.Tensor:
    """[..., K] -> [..., ceil(K/g), g], zero padded (zeros never raise an amax)."""
    xp = _pad_last(x, g)
    return xp.reshape(*xp.shape[:-1], xp.shape[-1] // g, g)


def _encode(fmt, x: torch.Tensor) -> torch.Tensor:
    """Encode with saturation; for INT8 keep NaN out of the integer cast (propagate: NaN -> 0)."""
    if isinstance(fmt, _f.IntFormat):
        return fmt.encode(torch.nan_to_num(x, nan=0.0))
    return fmt.encode(x, saturate=True)


def _frexp_exp(a: torch.Tensor) -> torch.Tensor:
    """floor(log2(a)) for a > 0, exact (from the float's exponent, no log2 rounding)."""
    _, e = torch.frexp(a)
    return (e - 1).to(torch.int32)


# ---- quantize --------------------------------------------------------------------------------------
def quantize(x: torch.Tensor, spec: QuantSpec) -> Quantized:
    """Quantize `x` under `spec`; returns codes, scales and what dequantization needs (see module doc).

    q = quantize(torch.tensor([[1.0, -2.0, 448.0, 0.0]]), QuantSpec("e4m3", "tensor"))
    q.scale -> 1.0 ; q.codes -> [[0x38, 0xC0, 0x7E, 0x00]]
    """
    xf = _check_input(x, spec)
    fmt = spec.format
    g = spec.granularity
    if xf.numel() == 0:
        return _empty(xf, spec)

    if g == "none":
        return Quantized(_encode(fmt, xf), torch.tensor(1.0), spec, tuple(x.shape))

    a = _finite_abs(xf)
    if g == "tensor":
        scale = _fp_scale(a.max(), fmt.max)
        return Quantized(_encode(fmt, xf / scale), scale, spec, tuple(x.shape))
    if g == "channel":
        ax = spec.axis % xf.dim()
        dims = [d for d in range(xf.dim()) if d != ax]
        amax = a.amax(dim=dims) if dims else a
        scale = _fp_scale(amax, fmt.max)
        shape = [1] * xf.dim()
        shape[ax] = -1
        return Quantized(_encode(fmt, xf / scale.reshape(shape)), scale, spec, tuple(x.shape))
    if g == "token":
        scale = _fp_scale(a.amax(dim=-1), fmt.max)
        return Quantized(_encode(fmt, xf / scale.unsqueeze(-1)), scale, spec, tuple(x.shape))
    if g == "block":
        b0, b1 = (int(b) for b in spec.block)
        M, K = xf.shape[-2:]
        pm, pk = (-M) % b0, (-K) % b1
        ap = F.pad(a, (0, pk, 0, pm))
        lead = ap.shape[:-2]
        tiles = ap.reshape(*lead, (M + pm) // b0, b0, (K + pk) // b1, b1)
        scale = _fp_scale(tiles.amax(dim=(-3, -1)), fmt.max)
        full = scale.repeat_interleave(b0, dim=-2).repeat_interleave(b1, dim=-1)[..., :M, :K]
        return Quantized(_encode(fmt, xf / full), scale, spec, tuple(x.shape))
    if g == "group":
        G = spec.block_len
        K = xf.shape[-1]
        scale = _fp_scale(_grouped(a, G).amax(dim=-1), fmt.max)
        full = scale.repeat_interleave(G, dim=-1)[..., :K]
        return Quantized(_encode(fmt, xf / full), scale, spec, tuple(x.shape))
    if g == "nvfp4":
        return _quantize_nvfp4(xf, a, spec)
    if g == "mx":
        return _quantize_mx(xf, a, spec)
    raise AssertionError(g)  # pragma: no cover - QuantSpec validated the name


def _empty(xf: torch.Tensor, spec: QuantSpec) -> Quantized:
    """Empty in, empty out: codes of the same (empty) shape and scales of the matching empty shape."""
    g, L = spec.granularity, spec.block_len
    if g in ("group", "nvfp4", "mx"):
        sshape = (*xf.shape[:-1], -(-xf.shape[-1] // L))
    elif g == "token":
        sshape = xf.shape[:-1]
    elif g == "block":
        sshape = (*xf.shape[:-2], -(-xf.shape[-2] // spec.block[0]), -(-xf.shape[-1] // spec.block[1]))
    elif g == "channel":
        sshape = (xf.shape[spec.axis % xf.dim()],)
    else:
        sshape = ()
    dtype = torch.int8 if isinstance(spec.format, _f.IntFormat) else torch.uint8
    scale = torch.ones(sshape) if sshape else torch.tensor(1.0)
    sc = torch.zeros(sshape, dtype=torch.uint8) if g in ("nvfp4", "mx") else None
    gs = torch.tensor(1.0) if g == "nvfp4" else None
    return Quantized(torch.empty(xf.shape, dtype=dtype), scale, spec, tuple(xf.shape), sc, gs)


def _quantize_nvfp4(xf, a, spec) -> Quantized:
    K = xf.shape[-1]
    gamax = a.max()
    gs = gamax / torch.tensor(448.0 * 6.0)
    gs = torch.where(gs > 0, gs, torch.ones_like(gs))
    blocks = _grouped(a, 16)
    bamax = blocks.amax(dim=-1)
    bs = bamax / torch.tensor(6.0) / gs                   # two fp32 divisions, in this order
    sc = _f.E4M3.encode(bs, saturate=True)
    if spec.nonfinite == "propagate":
        has_nan = torch.isnan(_grouped(xf, 16)).any(dim=-1)
        sc = torch.where(has_nan, torch.tensor(_f.E4M3.nan_code, dtype=torch.uint8), sc)
    s = _f.E4M3.decode(sc) * gs                           # effective per-block dequant multiplier
    full = s.repeat_interleave(16, dim=-1)[..., :K]
    with torch.no_grad():
        codes = _f.E2M1.encode(torch.where(full > 0, xf / full, torch.zeros_like(xf)), saturate=True)
    codes = torch.where((full > 0) | torch.isnan(full), codes, torch.zeros_like(codes))
    return Quantized(codes, s, spec, tuple(xf.shape), scale_codes=sc, global_scale=gs)


def _quantize_mx(xf, a, spec) -> Quantized:
    fmt = spec.format
    K = xf.shape[-1]
    bamax = _grouped(a, 32).amax(dim=-1)
    pos = bamax > 0
    safe = torch.where(pos, bamax, torch.ones_like(bamax))
    if spec.scale_rule == "floor":
        e = _frexp_exp(safe) - _EMAX[fmt.name]
    else:  # smallest e with amax / 2**e <= fmt.max
        e = _frexp_exp(safe) - _EMAX[fmt.name]
        over = (safe / torch.ldexp(torch.ones_like(safe), e)) > fmt.max
        e = e + over.to(torch.int32)
    e = torch.where(pos, e, torch.full_like(e, -127)).clamp(-127, 127)
    sc = (e + 127).to(torch.uint8)
    if spec.nonfinite == "propagate":
        has_nan = torch.isnan(_grouped(xf, 32)).any(dim=-1)
        sc = torch.where(has_nan, torch.tensor(0xFF, dtype=torch.uint8), sc)
    s = _f.E8M0.decode(sc)
    full = s.repeat_interleave(32, dim=-1)[..., :K]
    codes = _encode(fmt, xf / full)
    return Quantized(codes, s, spec, tuple(xf.shape), scale_codes=sc)


# ---- dequantize ------------------------------------------------------------------------------------
def dequantize(q: Quantized) -> torch.Tensor:
    """Inverse of `quantize` (up to rounding): float32 of the original shape."""
    spec, fmt = q.spec, q.spec.format
    vals = fmt.decode(q.codes) if not isinstance(fmt, _f.IntFormat) else q.codes.float()
    g = spec.granularity
    if vals.numel() == 0:
        return vals.reshape(q.shape)
    if g in ("none", "tensor"):
        return vals * q.scale
    if g == "channel":
        shape = [1] * vals.dim()
        shape[spec.axis % vals.dim()] = -1
        return vals * q.scale.reshape(shape)
    if g == "token":
        return vals * q.scale.unsqueeze(-1)
    if g == "block":
        M, K = vals.shape[-2:]
        b0, b1 = spec.block
        return vals * q.scale.repeat_interleave(b0, dim=-2).repeat_interleave(b1, dim=-1)[..., :M, :K]
    if g == "nvfp4":
        # decode(code) * decode(scale code) * global, left to right (as a kernel would)
        bsc = _f.E4M3.decode(q.scale_codes).repeat_interleave(16, dim=-1)[..., : vals.shape[-1]]
        return vals * bsc * q.global_scale
    L = spec.block_len
    return vals * q.scale.repeat_interleave(L, dim=-1)[..., : vals.shape[-1]]


def fake_quant(x: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """dequantize(quantize(x)) in x's dtype and shape: what a model sees when a tensor is stored in `spec`.

    Fast path for the FP8 granularities none/tensor/channel/token/group (no codes materialized, one amax
    pass, non-finite input detected from the amax): round(x / scale) * scale with the same scale rule.
    The sweep calls this on every Linear input of every forward, so it must cost less than the matmul.
    """
    g = spec.granularity
    fast = g in ("none", "tensor", "channel", "token", "group") and not isinstance(spec.format, _f.IntFormat) \
        and spec.format.special != "none"
    if not fast or spec.nonfinite != "raise" or not isinstance(x, torch.Tensor) or x.dtype not in _FLOAT_DTYPES:
        return dequantize(quantize(x, spec)).to(x.dtype) if isinstance(x, torch.Tensor) else quantize(x, spec)
    if x.numel() == 0:
        return x.clone()
    if g == "channel" and not (-x.dim() <= spec.axis < x.dim()):
        _check_input(x, spec)  # raises the axis error
    fmt = spec.format
    xf = x.float()
    a = xf.abs()
    if g == "none":
        amax = a.amax()
    elif g == "tensor":
        amax = a.amax()
    elif g == "token":
        amax = a.amax(dim=-1, keepdim=True)
    elif g == "channel":
        ax = spec.axis % xf.dim()
        dims = [d for d in range(xf.dim()) if d != ax]
        amax = a.amax(dim=dims, keepdim=True) if dims else a
    else:  # group: 1 x G along the last dim; a partial last group uses the elements that exist
        G, K = spec.block_len, xf.shape[-1]
        amax = _grouped(a, G).amax(dim=-1, keepdim=True)           # [..., ceil(K/G), 1]
    if not bool(torch.isfinite(amax).all()):
        _check_input(x, spec)  # raises with the NaN / Inf counts
    if g == "none":
        return fmt.round(xf).to(x.dtype)
    s = _fp_scale(amax, fmt.max)
    if g == "group":  # scale each group in place (a view when K % G == 0): no K-wide scale tensor
        xg = _grouped(xf, G)
        return (fmt.round(xg / s) * s).reshape(*xg.shape[:-2], -1)[..., :K].to(x.dtype)
    return (fmt.round(xf / s) * s).to(x.dtype)


# ---- nibble packing ----------------------------------------------------------------------------------
def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """[..., K] E2M1 codes (0..15) -> [..., ceil(K/2)] bytes: element 2i in the LOW nibble, 2i+1 in the HIGH.

    pack_nibbles(tensor([0x1, 0x7, 0xA])) -> tensor([0x71, 0x0A])   # odd K: the last high nibble is 0
    """
    if codes.dtype != torch.uint8:
        raise TypeError(f"pack_nibbles expects uint8 codes, got {codes.dtype}")
    if codes.numel() and int(codes.max()) > 15:
        raise ValueError("pack_nibbles expects 4-bit codes (0..15)")
    c = _pad_last(codes, 2)
    return (c[..., 0::2] | (c[..., 1::2] << 4)).to(torch.uint8)


def unpack_nibbles(packed: torch.Tensor, k: int | None = None) -> torch.Tensor:
    """Inverse of pack_nibbles; `k` trims an odd last element."""
    if packed.dtype != torch.uint8:
        raise TypeError(f"unpack_nibbles expects uint8, got {packed.dtype}")
    out = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(*packed.shape[:-1], -1)
    return out[..., :k] if k is not None else out


# ---- delayed scaling (TransformerEngine style) --------------------------------------------------------
class DelayedScaling:
    """Scale from an amax HISTORY of earlier steps, not from the tensor being cast (TransformerEngine's recipe).

    ds = DelayedScaling("e4m3", history_len=4)
    ds.quantize(x1)   # first call: no history yet, uses x1's own amax, then records it
    ds.quantize(x2)   # uses max(amax history) -- x2 is cast with a stale scale; values above it saturate
    scale = max(history) / fmt.max * 2**-margin  (algo "max"), or the most recent amax (algo "most_recent").
    """

    def __init__(self, fmt: str = "e4m3", history_len: int = 16, algo: str = "max", margin: int = 0):
        if algo not in ("max", "most_recent"):
            raise ValueError("algo must be 'max' or 'most_recent'")
        if history_len < 1:
            raise ValueError("history_len must be >= 1")
        self.spec = QuantSpec(fmt, "tensor")
        self.history_len, self.algo, self.margin = history_len, algo, margin
        self.history: list[float] = []

    @property
    def scale(self) -> torch.Tensor | None:
        if not self.history:
            return None
        amax = max(self.history) if self.algo == "max" else self.history[-1]
        return _fp_scale(torch.tensor(amax * 2.0 ** self.margin), self.spec.format.max)

    def quantize(self, x: torch.Tensor) -> Quantized:
        xf = _check_input(x, self.spec)
        amax = float(_finite_abs(xf).max()) if xf.numel() else 0.0
        fmax = self.spec.format.max
        scale = self.scale if self.history else _fp_scale(torch.tensor(amax * 2.0 ** self.margin), fmax)
        self.history = (self.history + [amax])[-self.history_len:]
        return Quantized(_encode(self.spec.format, xf / scale), scale, self.spec, tuple(x.shape))
