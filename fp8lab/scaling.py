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
    "mx"       OCP MX: 32-blocks along K, E8M0 power-of-two scales                        -> [..., M, ceil(K/32)]
A partial last group (K not a multiple of the group) uses the elements that exist. A group or block larger
than the tensor along its axis is the whole axis (the same result; nothing is allocated for the padding).

The arithmetic is fixed so that GPU kernels can equal it bit for bit (fp32 throughout, IEEE division of two
tensors on the input's device -- never a multiply by a reciprocal, which is what CUDA torch does when it
divides by a Python number or a CPU scalar):
  FP8/INT8:  scale = amax / fmt.max (`scale_from_amax`); a group whose scale is not > 0 (all zeros, or
             underflow) gets scale 1.0; codes = encode(x / scale), saturating.
  NVFP4:     global = amax_tensor / 2688 (448 * 6; 1.0 if not > 0); per block bs = amax_block / 6 / global,
             stored as the E4M3 code sc = E4M3.encode(bs); elements E2M1.encode(x / (decode(sc) * global)).
             This is NVIDIA ModelOpt's and torchao's global scale; `scale_rule` selects their block-scale
             arithmetic where it differs (NVFP4_RULES below).
  MX:        E8M0 exponent e per 32-block, by `scale_rule` (MX_RULES below; default "floor", the OCP rule
             floor(log2 amax) - emax of the element format); elements encode(x / 2**e).

MX_RULES (`QuantSpec(..., "mx", scale_rule=...)`), amax = the block's largest |x|, emax = fmt.emax:
    "floor"  e = floor(log2 amax) - emax               OCP MX v1.0 and torchao FLOOR (the default: the spec).
             amax / 2**e lands in [2**emax, 2**(emax+1)), above fmt.max when amax's mantissa exceeds fmt's
             largest (E4M3: 1.75): those top values saturate (anatomy.mx_scale_anatomy measures how often).
    "rceil"  e = ceil(log2(amax / fmt.max)), amax / fmt.max in fp32 (IEEE division): cuBLAS / TransformerEngine
             / torchao RCEIL: the smallest power of two that keeps the block unsaturated.
    "ceil"   e = ceil(log2 amax) - emax                torchao CEIL: never saturates, wastes up to one binade.
    "even"   e = floor(log2(round(amax to fmt's mantissa bits))) - emax      torchao EVEN.
  Every rule gives e in [-127, 127 - emax]: the cap keeps fmt.max * 2**e a finite float32 (the floor rule never
  reaches it; "rceil"/"ceil"/"even" would put a block with amax near 3.4e38 at 2**(128 - emax), where the
  element 4.0 * 2**126 dequantizes to Inf; capped, such a block saturates like the floor rule instead).
  amax == 0 gives e = -127 (code 0). torchao's eager RCEIL computes ceil(log2(.)) with torch.log2, which can
  miss a round-up when amax / fmt.max sits a few ulps above a power of two; we round up on the bits (as the
  hardware `cvt.rp.satfinite.ue8m0x2.f32` does).

NVFP4_RULES (`QuantSpec("e2m1", "nvfp4", scale_rule=...)`), g = global scale, bamax = block amax:
    "lab"      bs = (bamax / 6) / g, E4M3 subnormal block scales kept, zero -> code 0; x / (decode(sc) * g).
               The default: two IEEE divisions, every E4M3 code usable, and what the lab's kernels compute.
    "torchao"  torchao nvfp4_quantize with a per-tensor scale: bs = (bamax / 6) / g clamped to [2**-6, 448]
               (E4M3's smallest NORMAL), elements x * ((1 / g) / decode(sc)) -- a reciprocal, then a multiply.
    "modelopt" ModelOpt NVFP4QTensor (nvidia-modelopt 0.47.0): bs = bamax / (6 * g) (one division by a
               rounded product); a zero bs becomes 1.0 (code 0x38), then bs is clamped to [2**-9, 448] (E4M3's
               smallest subnormal: a tiny block keeps code 0x01 instead of 0); elements x / (decode(sc) * g).
  All three use g = amax / 2688, which is also what ModelOpt stores as `weight_scale_2` and torchao's
  per_tensor_amax_to_scale returns. A block whose scale code is 0 gets element codes 0 under every rule.

Non-finite input: `nonfinite="raise"` (default) refuses NaN/Inf with a ValueError that counts them.
`nonfinite="propagate"`: amax ignores NaN/Inf; +-Inf saturates to +-fmt.max x the group's scale; NaN keeps
the format's NaN code (FP8; INT8 and E2M1 have none: 0), and an NVFP4 or MX block holding a NaN gets the NaN
scale code, so the whole block decodes to NaN. A group whose finite values are all zero gets scale 1.0
(FP8/INT8); an NVFP4 or MX block holding +-Inf and no finite nonzero value likewise gets scale ~1 (MX 2**0,
NVFP4 the E4M3 code nearest 1 / global, saturating), so its Inf decodes to +-fmt.max, as in FP8.

Input dtypes: float32, bfloat16, float16, float64. The lab's arithmetic is float32 (like the kernels), so
float64 is rounded to float32 first; a FINITE float64 value beyond float32's range (|x| > 3.4e38) cannot be
represented and is refused with a ValueError (it is not an Inf, and it is not silently made one).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from . import formats as _f

GRANULARITIES = ("none", "tensor", "channel", "token", "group", "block", "nvfp4", "mx")
MX_RULES = ("floor", "rceil", "ceil", "even")
NVFP4_RULES = ("lab", "torchao", "modelopt")
_DEFAULT_RULE = {"mx": "floor", "nvfp4": "lab"}
_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_F32_MAX = 3.4028234663852886e38   # float32's largest finite value, (2 - 2**-23) * 2**127
_F32_EMAX = 127


def _as_int(value, what: str, minimum: int = 1) -> int:
    """A size must be an integer (Python or NumPy, not bool) >= minimum; 1.9 is refused, not truncated."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{what} must be an integer, got {value!r} ({type(value).__name__})")
    if int(value) < minimum:
        raise ValueError(f"{what} must be a positive integer (>= {minimum}), got {value}")
    return int(value)


@dataclass(frozen=True)
class QuantSpec:
    """What to quantize to and how scales are shared.

    QuantSpec("e4m3", "group", group_size=128)    # vLLM per_token_group_quant_fp8
    QuantSpec("e4m3", "block", block=(128, 128))  # DeepSeek weight_scale_inv
    QuantSpec("e2m1", "nvfp4")                    # NVFP4 (scale_rule "lab"; or "torchao", "modelopt")
    QuantSpec("e2m1", "mx", scale_rule="floor")   # MXFP4, OCP rule (or "rceil", "ceil", "even")
    QuantSpec("int8", "channel", axis=0)          # per-output-channel INT8 weights

    `scale_rule` applies to "mx" and "nvfp4" only (None: the lab's default, "floor" / "lab").
    Every spec that can be built is valid: unknown names, E8M0 elements, non-integer or non-positive sizes
    raise ValueError here, before any tensor is touched.
    """

    fmt: str = "e4m3"
    granularity: str = "tensor"
    axis: int = 0
    group_size: int = 128
    block: tuple = (128, 128)
    scale_rule: str | None = None
    nonfinite: str = "raise"

    def __post_init__(self):
        if not isinstance(self.fmt, str):
            raise ValueError(f"fmt must be a format name such as 'e4m3', got {self.fmt!r}")
        fmt = _f.get(self.fmt)  # raises with the valid names
        if fmt is _f.E8M0:
            raise ValueError("e8m0 is a scale format (unsigned powers of two, no zero, no sign): it cannot hold "
                             "elements; use it through granularity='mx' with e2m1, e4m3 or e5m2 elements")
        if not isinstance(self.granularity, str) or self.granularity not in GRANULARITIES:
            raise ValueError(f"unknown granularity {self.granularity!r}; valid: {', '.join(GRANULARITIES)}")
        if self.granularity == "nvfp4" and fmt is not _f.E2M1:
            raise ValueError("nvfp4 granularity needs fmt='e2m1' (E2M1 elements, E4M3 block scales)")
        if self.granularity == "mx" and fmt not in (_f.E2M1, _f.E4M3, _f.E5M2):
            raise ValueError("mx granularity needs fmt e2m1, e4m3 or e5m2 (the OCP MX element formats)")
        if self.scale_rule is not None:
            valid = {"mx": MX_RULES, "nvfp4": NVFP4_RULES}.get(self.granularity)
            if valid is None:
                raise ValueError(f"scale_rule applies to granularity 'mx' or 'nvfp4' only, not {self.granularity!r}")
            if self.scale_rule not in valid:
                raise ValueError(f"unknown {self.granularity} scale_rule {self.scale_rule!r}; valid: {', '.join(valid)}")
        if self.nonfinite not in ("raise", "propagate"):
            raise ValueError(f"nonfinite must be 'raise' or 'propagate', got {self.nonfinite!r}")
        if isinstance(self.axis, bool) or not isinstance(self.axis, numbers.Integral):
            raise ValueError(f"axis must be an integer, got {self.axis!r}")
        object.__setattr__(self, "axis", int(self.axis))
        object.__setattr__(self, "group_size", _as_int(self.group_size, "group_size"))
        if not isinstance(self.block, (tuple, list)) or len(self.block) != 2:
            raise ValueError(f"block must be a pair of positive integers (B0, B1), got {self.block!r}")
        object.__setattr__(self, "block", tuple(_as_int(b, "block sizes") for b in self.block))

    @property
    def format(self):
        return _f.get(self.fmt)

    @property
    def rule(self) -> str | None:
        """The scale rule in force: scale_rule, or the lab's default for mx ("floor") / nvfp4 ("lab")."""
        return self.scale_rule if self.scale_rule is not None else _DEFAULT_RULE.get(self.granularity)

    @property
    def block_len(self) -> int:
        """Elements per scale along the last dim for the grouped granularities."""
        return {"group": self.group_size, "nvfp4": _f.NVFP4_BLOCK, "mx": _f.MX_BLOCK}.get(self.granularity, 0)


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
def _const(v: float, like: torch.Tensor) -> torch.Tensor:
    """A float32 0-d tensor on `like`'s device: dividing by it is an IEEE division on every device."""
    return torch.tensor(v, dtype=torch.float32, device=like.device)


def _tensor(v) -> torch.Tensor:
    """float32 view of a tensor (kept on its device), or a new tensor from a Python number / list."""
    return v.float() if isinstance(v, torch.Tensor) else torch.tensor(v, dtype=torch.float32)


def _check_shape(x: torch.Tensor, spec: QuantSpec) -> None:
    """Type, dtype and dimensions (no pass over the values)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"quantize expects a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"quantize expects a floating tensor (float32/bf16/fp16/float64), got {x.dtype}")
    need_2d = spec.granularity == "block"
    need_1d = spec.granularity in ("token", "group", "nvfp4", "mx")
    if (need_2d and x.dim() < 2) or (need_1d and x.dim() < 1):
        raise ValueError(f"granularity {spec.granularity!r} needs a tensor of at least {2 if need_2d else 1} dims, got shape {tuple(x.shape)}")
    if spec.granularity == "channel" and not (-x.dim() <= spec.axis < x.dim()):
        raise ValueError(f"axis {spec.axis} is out of range for shape {tuple(x.shape)}")


def _check_input(x: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    _check_shape(x, spec)
    xf = x.float()
    if x.dtype == torch.float64:
        beyond = torch.isinf(xf) & torch.isfinite(x)
        if bool(beyond.any()):
            raise ValueError(f"float64 input holds {int(beyond.sum())} finite values beyond float32's range "
                             f"(|x| > {_F32_MAX:.4g}); the lab quantizes in float32: divide the tensor by a "
                             "power of two first")
    if spec.nonfinite == "raise" and not bool(torch.isfinite(xf).all()):   # one pass; count only on failure
        bad = ~torch.isfinite(xf)
        if bool(bad.any()):
            n_nan = int(torch.isnan(xf).sum())
            raise ValueError(f"input holds {n_nan} NaN and {int(bad.sum()) - n_nan} Inf values; "
                             "pass QuantSpec(..., nonfinite='propagate') to quantize them by the documented policy")
    return xf


def _finite_abs(xf: torch.Tensor, spec: QuantSpec | None = None) -> torch.Tensor:
    """|x| with NaN/Inf read as 0. Under nonfinite="raise" `_check_input` has already refused them: plain |x|."""
    a = xf.abs()
    if spec is not None and spec.nonfinite == "raise":
        return a
    return torch.where(torch.isfinite(a), a, torch.zeros_like(a))


def scale_from_amax(amax: torch.Tensor, fmt) -> torch.Tensor:
    """THE FP8/INT8 scale rule: amax / fmt.max in float32, on amax's device (IEEE division); 1.0 where not > 0.

    scale_from_amax(torch.tensor([448.0, 0.0, 1e-45]), "e4m3") -> [1.0, 1.0, 1.0]   # zero and underflow -> 1
    scale_from_amax(torch.tensor(2.0), "e4m3")                 -> 0.0044642859 (2 / 448 in float32)
    Where fmt.max * scale would round past float32's largest value (amax within an ulp or so of it), the scale is one
    ulp smaller, so that no code dequantizes to Inf.
    """
    fmt = _f.get(fmt) if isinstance(fmt, str) else fmt
    a = _tensor(amax)
    m = _const(fmt.max, a)
    s = a / m
    # amax within rounding of float32's largest value: fmt.max * s can round past it, and the largest code would
    # dequantize to Inf. One ulp less keeps every code finite (x / s still saturates); no other amax changes.
    s = torch.where(torch.isinf(s * m), torch.nextafter(s, torch.zeros_like(s)), s)
    return torch.where(s > 0, s, torch.ones_like(s))


def _pad_last(x: torch.Tensor, mult: int) -> torch.Tensor:
    pad = (-x.shape[-1]) % mult
    return F.pad(x, (0, pad)) if pad else x


def _grouped(x: torch.Tensor, g: int) -> torch.Tensor:
    """[..., K] -> [..., ceil(K/g), g], zero padded (zeros never raise an amax). g must be <= max(K, 1)."""
    xp = _pad_last(x, g)
    return xp.reshape(*xp.shape[:-1], xp.shape[-1] // g, g)


def _eff(size: int, n: int) -> int:
    """A group/block size clamped to the axis length: a group larger than the axis is the whole axis."""
    return max(1, min(size, n))


def _spread(s: torch.Tensor, g: int, n: int, dim: int = -1) -> torch.Tensor:
    """Per-group values -> per-element along `dim` (length n)."""
    return s.repeat_interleave(g, dim=dim).narrow(dim, 0, n)


def _encode(fmt, x: torch.Tensor) -> torch.Tensor:
    """Encode with saturation; for INT8 keep NaN out of the integer cast (propagate: NaN -> 0)."""
    if isinstance(fmt, _f.IntFormat):
        return fmt.encode(torch.nan_to_num(x, nan=0.0))
    return fmt.encode_fast(x)


def _has_nan_blocks(xf: torch.Tensor, g: int) -> torch.Tensor:
    return torch.isnan(_grouped(xf, g)).any(dim=-1)


def _inf_only_blocks(xf: torch.Tensor, bamax: torch.Tensor, g: int) -> torch.Tensor:
    """Blocks holding +-Inf but no finite nonzero value (their scale cannot come from the data)."""
    return torch.isinf(_grouped(xf, g)).any(dim=-1) & (bamax == 0)


# ---- quantize --------------------------------------------------------------------------------------
def quantize(x: torch.Tensor, spec: QuantSpec) -> Quantized:
    """Quantize `x` under `spec`; returns codes, scales and what dequantization needs (see module doc).

    q = quantize(torch.tensor([[1.0, -2.0, 448.0, 0.0]]), QuantSpec("e4m3", "tensor"))
    q.scale -> 1.0 ; q.codes -> [[0x38, 0xC0, 0x7E, 0x00]]
    """
    if not isinstance(spec, QuantSpec):
        raise TypeError(f"spec must be a QuantSpec, got {type(spec).__name__}")
    xf = _check_input(x, spec)
    fmt = spec.format
    g = spec.granularity
    if xf.numel() == 0:
        return _empty(xf, spec)

    if g == "none":
        return Quantized(_encode(fmt, xf), _const(1.0, xf), spec, tuple(x.shape))

    a = _finite_abs(xf, spec)
    if g == "tensor":
        scale = scale_from_amax(a.max(), fmt)
        return Quantized(_encode(fmt, xf / scale), scale, spec, tuple(x.shape))
    if g == "channel":
        ax = spec.axis % xf.dim()
        dims = [d for d in range(xf.dim()) if d != ax]
        amax = a.amax(dim=dims) if dims else a
        scale = scale_from_amax(amax, fmt)
        shape = [1] * xf.dim()
        shape[ax] = -1
        return Quantized(_encode(fmt, xf / scale.reshape(shape)), scale, spec, tuple(x.shape))
    if g == "token":
        scale = scale_from_amax(a.amax(dim=-1), fmt)
        return Quantized(_encode(fmt, xf / scale.unsqueeze(-1)), scale, spec, tuple(x.shape))
    if g == "block":
        M, K = xf.shape[-2:]
        b0, b1 = _eff(spec.block[0], M), _eff(spec.block[1], K)
        pm, pk = (-M) % b0, (-K) % b1
        ap = F.pad(a, (0, pk, 0, pm))
        tiles = ap.reshape(*ap.shape[:-2], (M + pm) // b0, b0, (K + pk) // b1, b1)
        scale = scale_from_amax(tiles.amax(dim=(-3, -1)), fmt)
        full = _spread(_spread(scale, b0, M, -2), b1, K, -1)
        return Quantized(_encode(fmt, xf / full), scale, spec, tuple(x.shape))
    if g == "group":
        K = xf.shape[-1]
        G = _eff(spec.group_size, K)
        scale = scale_from_amax(_grouped(a, G).amax(dim=-1), fmt)
        return Quantized(_encode(fmt, xf / _spread(scale, G, K)), scale, spec, tuple(x.shape))
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
    dev = xf.device
    dtype = torch.int8 if isinstance(spec.format, _f.IntFormat) else torch.uint8
    scale = torch.ones(sshape, device=dev) if sshape else _const(1.0, xf)
    sc = torch.zeros(sshape, dtype=torch.uint8, device=dev) if g in ("nvfp4", "mx") else None
    gs = _const(1.0, xf) if g == "nvfp4" else None
    return Quantized(torch.empty(xf.shape, dtype=dtype, device=dev), scale, spec, tuple(xf.shape), sc, gs)


def nvfp4_global_scale(amax: torch.Tensor) -> torch.Tensor:
    """NVFP4's fp32 per-tensor scale: amax / 2688 (= 448 * 6), 1.0 if not > 0 (ModelOpt's `weight_scale_2`,
    torchao's per_tensor_amax_to_scale). 2688 lets the largest block scale, amax / 6 / global, reach 448.

    nvfp4_global_scale(torch.tensor(2688.0)) -> 1.0
    """
    a = _tensor(amax)
    gs = a / _const(_f.NVFP4_GLOBAL_DIV, a)
    return torch.where(gs > 0, gs, torch.ones_like(gs))


def _quantize_nvfp4(xf, a, spec, gamax: torch.Tensor | None = None) -> Quantized:
    K = xf.shape[-1]
    rule = spec.rule
    B = _f.NVFP4_BLOCK
    gs = nvfp4_global_scale(a.max() if gamax is None else gamax)
    bamax = _grouped(a, B).amax(dim=-1)
    six = _const(_f.E2M1.max, xf)
    if rule == "modelopt":
        bs = bamax / (six * gs)                           # one division by the rounded product 6 * global
        bs = torch.where(bs == 0, torch.ones_like(bs), bs)
        bs = bs.clamp(min=_f.E4M3.min_subnormal, max=_f.E4M3.max)   # ModelOpt's _cast_per_block_scale_to_fp8
    else:
        bs = bamax / six / gs                             # two fp32 divisions, in this order
        if rule == "torchao":
            bs = bs.clamp(min=_f.E4M3.min_normal)         # torchao clamps to E4M3's smallest normal, 2**-6
    if spec.nonfinite == "propagate":                     # Inf-only block: scale ~1 (the code nearest 1/global)
        bs = torch.where(_inf_only_blocks(xf, bamax, B), torch.ones_like(gs) / gs, bs)
    sc = _f.E4M3.encode_fast(bs)
    if spec.nonfinite == "propagate":
        sc = sc.masked_fill(_has_nan_blocks(xf, B), _f.E4M3.nan_code)
    sdec = _f.E4M3.decode(sc)
    s = sdec * gs                                         # effective per-block dequant multiplier
    full = _spread(s, B, K)
    if rule == "torchao":
        r = _spread(torch.ones_like(gs) / gs / sdec, B, K)   # (1 / global) / scale, then a multiply
        q = xf * r
    else:
        q = xf / full
    codes = _f.E2M1.encode_fast(q)                        # (x / 0 in a zero-scale block is overwritten next)
    codes = codes.masked_fill(full == 0, 0)               # a zero block scale: codes 0 (NaN scale: kept)
    return Quantized(codes, s, spec, tuple(xf.shape), scale_codes=sc, global_scale=gs)


def mx_scale_exponent(amax: torch.Tensor, fmt, rule: str = "floor") -> torch.Tensor:
    """The E8M0 exponent e (int32) of MX blocks with these amax values (finite, >= 0), by `rule` (MX_RULES).

    mx_scale_exponent(torch.tensor([1.0, 500.0, 0.0]), "e4m3")          -> [-8, 0, -127]   # floor(log2) - 8
    mx_scale_exponent(torch.tensor([1.0, 500.0, 0.0]), "e4m3", "rceil") -> [-8, 1, -127]   # 500/448 > 1: round up
    """
    fmt = _f.get(fmt) if isinstance(fmt, str) else fmt
    if rule not in MX_RULES:
        raise ValueError(f"unknown MX scale rule {rule!r}; valid: {', '.join(MX_RULES)}")
    a = _tensor(amax).contiguous()
    bits = a.view(torch.int32)
    if rule == "floor":
        e = _f.floor_log2_f32(a) - fmt.emax
    elif rule == "ceil":
        e = _f.floor_log2_f32(a) + ((bits & 0x7FFFFF) != 0).to(torch.int32) - fmt.emax
    elif rule == "even":  # round amax to fmt's mantissa width on the bits (carry may bump the exponent)
        r = (bits + (1 << (22 - fmt.man_bits))) & 0x7F800000       # amax >= 0: keep the exponent only
        e = _f.floor_log2_f32(r.view(torch.float32)) - fmt.emax
    else:  # rceil: descale = amax / max (IEEE, fp32), rounded UP to a power of two on its bits (E8M0 is
        d = (a / _const(fmt.max, a)).contiguous().view(torch.int32)     # float32's exponent field, same bias)
        E, m = (d >> 23) & 0xFF, d & 0x7FFFFF
        code = torch.where(E == 0, (m > 0x400000).to(torch.int32), E + (m != 0).to(torch.int32))
        e = code - _f.E8M0.bias
    # E8M0 holds 2**-127 .. 2**127; the cap keeps fmt.max * 2**e below float32's 2**128
    return e.clamp(-_f.E8M0.bias, _F32_EMAX - fmt.emax).to(torch.int32)


def _quantize_mx(xf, a, spec) -> Quantized:
    fmt = spec.format
    K = xf.shape[-1]
    B = _f.MX_BLOCK
    bamax = _grouped(a, B).amax(dim=-1)
    e = mx_scale_exponent(bamax, fmt, spec.rule)
    if spec.nonfinite == "propagate":                     # Inf-only block: scale 2**0, so Inf -> +-fmt.max
        e = e.masked_fill(_inf_only_blocks(xf, bamax, B), 0)
    sc = (e + _f.E8M0.bias).to(torch.uint8)
    if spec.nonfinite == "propagate":
        sc = sc.masked_fill(_has_nan_blocks(xf, B), _f.E8M0.nan_code)
    s = _f.E8M0.decode(sc)
    codes = _encode(fmt, xf / _spread(s, B, K))          # division by a power of two: exact
    return Quantized(codes, s, spec, tuple(xf.shape), scale_codes=sc)


# ---- dequantize ------------------------------------------------------------------------------------
def dequantize(q: Quantized) -> torch.Tensor:
    """Inverse of `quantize` (up to rounding): float32 of the original shape, on the codes' device."""
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
    M, K = vals.shape[-2] if vals.dim() > 1 else 1, vals.shape[-1]
    if g == "block":
        b0, b1 = _eff(spec.block[0], M), _eff(spec.block[1], K)
        return vals * _spread(_spread(q.scale, b0, M, -2), b1, K, -1)
    if g == "nvfp4":
        # decode(code) * decode(scale code) * global, left to right (as a kernel would)
        return vals * _spread(_f.E4M3.decode(q.scale_codes), _f.NVFP4_BLOCK, K) * q.global_scale
    G = _eff(spec.block_len, K)
    return vals * _spread(q.scale, G, K)


def fake_quant(x: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """dequantize(quantize(x)) in x's dtype and shape: what a model sees when a tensor is stored in `spec`.

    Fast path for the FP8 granularities none/tensor/channel/token/group (no codes materialized, one amax
    pass, non-finite input detected from the amax): round(x / scale) * scale with the same scale rule.
    The sweep calls this on every Linear input of every forward, so it must cost less than the matmul.
    """
    if not isinstance(spec, QuantSpec):
        raise TypeError(f"spec must be a QuantSpec, got {type(spec).__name__}")
    g = spec.granularity
    fast = (g in ("none", "tensor", "channel", "token", "group") and not isinstance(spec.format, _f.IntFormat)
            and spec.format.special != "none")
    if (not fast or spec.nonfinite != "raise" or not isinstance(x, torch.Tensor)
            or x.dtype not in (torch.float32, torch.float16, torch.bfloat16)):
        return dequantize(quantize(x, spec)).to(x.dtype)
    _check_shape(x, spec)
    if x.numel() == 0:
        return x.clone()
    fmt = spec.format
    xf = x.float()
    a = xf.abs()
    if g in ("none", "tensor"):
        amax = a.amax()
    elif g == "token":
        amax = a.amax(dim=-1, keepdim=True)
    elif g == "channel":
        ax = spec.axis % xf.dim()
        dims = [d for d in range(xf.dim()) if d != ax]
        amax = a.amax(dim=dims, keepdim=True) if dims else a
    else:  # group: 1 x G along the last dim; a partial last group uses the elements that exist
        K = xf.shape[-1]
        G = _eff(spec.group_size, K)
        amax = _grouped(a, G).amax(dim=-1, keepdim=True)           # [..., ceil(K/G), 1]
    if not bool(torch.isfinite(amax).all()):
        _check_input(x, spec)  # raises with the NaN / Inf counts
    if g == "none":
        return fmt.round(xf).to(x.dtype)
    s = scale_from_amax(amax, fmt)
    if g == "group":  # scale each group in place (a view when K % G == 0): no K-wide scale tensor
        xg = _grouped(xf, G)
        return (fmt.round(xg / s) * s).reshape(*xg.shape[:-2], -1)[..., :K].to(x.dtype)
    return (fmt.round(xf / s) * s).to(x.dtype)


# ---- the helpers kernels and calibration call (one contract, any device) ----------------------------------
def quantize_weight_channel(w: torch.Tensor, fmt: str = "e4m3", nonfinite: str = "raise"):
    """Per-output-channel weights [N, K] -> (codes uint8 [N, K], scale fp32 [N]): scale = amax_row / fmt.max.

    quantize_weight_channel(torch.tensor([[1.0, -2.0], [0.0, 0.0]])) -> codes [[0x76, 0xFE], [0, 0]], scale [2/448, 1.0]
    """
    q = quantize(w, QuantSpec(fmt, "channel", axis=0, nonfinite=nonfinite))
    return q.codes, q.scale


def quantize_group(x: torch.Tensor, group_size: int = 128, fmt: str = "e4m3", nonfinite: str = "raise"):
    """1 x G groups along the last dim -> (codes [..., K], scale fp32 [..., ceil(K/G)]): vLLM per_token_group_quant_fp8."""
    q = quantize(x, QuantSpec(fmt, "group", group_size=group_size, nonfinite=nonfinite))
    return q.codes, q.scale


def quantize_block(w: torch.Tensor, block=(128, 128), fmt: str = "e4m3", nonfinite: str = "raise"):
    """B0 x B1 tiles -> (codes [..., N, K], scale fp32 [..., ceil(N/B0), ceil(K/B1)]): DeepSeek weight_scale_inv."""
    q = quantize(w, QuantSpec(fmt, "block", block=tuple(block), nonfinite=nonfinite))
    return q.codes, q.scale


def quantize_nvfp4(w: torch.Tensor, global_amax: torch.Tensor | float | None = None, scale_rule: str = "lab",
                   nonfinite: str = "raise"):
    """NVFP4 -> (packed nibbles uint8 [..., ceil(K/2)], E4M3 block-scale codes uint8 [..., ceil(K/16)], global fp32 0-d).

    Element 2i sits in the LOW nibble of byte i (`pack_nibbles`). `global_amax` (a calibrated amax; default:
    this tensor's finite amax) gives global = global_amax / 2688. Dequantize: e2m1 * e4m3(sc) * global.
    """
    spec = QuantSpec("e2m1", "nvfp4", scale_rule=scale_rule, nonfinite=nonfinite)
    xf = _check_input(w, spec)
    if xf.numel() == 0:
        q = _empty(xf, spec)
    else:
        ga = None
        if global_amax is not None:
            ga = (global_amax.to(xf.device) if isinstance(global_amax, torch.Tensor)
                  else torch.tensor(global_amax, device=xf.device)).float()
            if ga.numel() != 1 or not bool(torch.isfinite(ga).all()) or float(ga) < 0:
                raise ValueError(f"global_amax must be one finite value >= 0, got {global_amax!r}")
            ga = ga.reshape(())
        q = _quantize_nvfp4(xf, _finite_abs(xf, spec), spec, ga)
    return pack_nibbles(q.codes), q.scale_codes, q.global_scale


def quantize_mx(x: torch.Tensor, fmt: str = "e4m3", scale_rule: str = "floor", nonfinite: str = "raise"):
    """OCP MX -> (element codes uint8 [..., K] (E2M1 unpacked: pack with `pack_nibbles`), E8M0 codes [..., ceil(K/32)])."""
    q = quantize(x, QuantSpec(fmt, "mx", scale_rule=scale_rule, nonfinite=nonfinite))
    return q.codes, q.scale_codes


KV_GRANULARITIES = ("tensor", "head", "token")


def quantize_kv(x: torch.Tensor, granularity: str = "tensor", fmt: str = "e4m3", nonfinite: str = "raise"):
    """A K or V cache [B, H, S, D] -> (codes uint8 [B, H, S, D], scale fp32):

        "tensor"  one scale                                  -> scale []
        "head"    one per KV head (dim 1; vLLM per-head)     -> scale [H]
        "token"   one per (b, h, s) row of D (dynamic)       -> scale [B, H, S]
    """
    if granularity not in KV_GRANULARITIES:
        raise ValueError(f"unknown KV granularity {granularity!r}; valid: {', '.join(KV_GRANULARITIES)}")
    if isinstance(x, torch.Tensor) and x.dim() != 4:
        raise ValueError(f"a KV cache is [B, H, S, D], got shape {tuple(x.shape)}")
    gran = {"tensor": "tensor", "head": "channel", "token": "token"}[granularity]
    q = quantize(x, QuantSpec(fmt, gran, axis=1, nonfinite=nonfinite))
    return q.codes, q.scale


# ---- nibble packing ----------------------------------------------------------------------------------
def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """[..., K] E2M1 codes (0..15) -> [..., ceil(K/2)] bytes: element 2i in the LOW nibble, 2i+1 in the HIGH.

    pack_nibbles(tensor([0x1, 0x7, 0xA])) -> tensor([0x71, 0x0A])   # odd K: the last high nibble is 0
    """
    if not isinstance(codes, torch.Tensor) or codes.dtype != torch.uint8:
        raise TypeError(f"pack_nibbles expects uint8 codes, got {getattr(codes, 'dtype', type(codes).__name__)}")
    if codes.dim() == 0:
        raise ValueError("pack_nibbles expects at least one dimension")
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
    scale = max(history) * 2**margin / fmt.max  (algo "max"), or the most recent amax (algo "most_recent").

    `margin` (an integer in [-127, 127]) is TransformerEngine's: it multiplies amax by 2**margin, i.e. it
    leaves 2**margin of headroom above the recorded amax (TE divides its quant multiplier fmt.max / amax by
    2**margin; this lab stores the inverse, the dequant multiplier). A margin whose scale overflows float32
    (or underflows to 0 for a nonzero amax) raises ValueError when the scale is formed, never an Inf scale.
    The scale is computed on the CPU from Python floats and moved to the tensor's device: same bits everywhere.
    """

    def __init__(self, fmt: str = "e4m3", history_len: int = 16, algo: str = "max", margin: int = 0):
        if algo not in ("max", "most_recent"):
            raise ValueError("algo must be 'max' or 'most_recent'")
        self.history_len = _as_int(history_len, "history_len")
        if isinstance(margin, bool) or not isinstance(margin, numbers.Integral) or not -127 <= int(margin) <= 127:
            raise ValueError(f"margin must be an integer in [-127, 127] (scale = amax * 2**margin / fmt.max), "
                             f"got {margin!r}")
        self.spec = QuantSpec(fmt, "tensor")
        self.algo, self.margin = algo, int(margin)
        self.history: list[float] = []

    def _scale_of(self, amax: float) -> torch.Tensor:
        """amax * 2**margin / fmt.max in float32 (CPU); 1.0 for amax == 0; ValueError if it leaves float32."""
        cpu = torch.device("cpu")
        if amax == 0:
            return torch.tensor(1.0, device=cpu)
        top = math.ldexp(amax, self.margin)                    # exact in float64 for |margin| <= 127
        if top > _F32_MAX:
            raise ValueError(f"DelayedScaling: amax {amax:.4g} * 2**{self.margin} overflows float32; lower margin")
        s = (torch.tensor(top, dtype=torch.float32, device=cpu)
             / torch.tensor(self.spec.format.max, dtype=torch.float32, device=cpu))
        if not float(s) > 0:
            raise ValueError(f"DelayedScaling: amax {amax:.4g} * 2**{self.margin} / {self.spec.format.max:g} "
                             "underflows float32 to 0; raise margin")
        return s

    @property
    def scale(self) -> torch.Tensor | None:
        if not self.history:
            return None
        amax = max(self.history) if self.algo == "max" else self.history[-1]
        return self._scale_of(amax)

    def quantize(self, x: torch.Tensor) -> Quantized:
        xf = _check_input(x, self.spec)
        amax = float(_finite_abs(xf).max()) if xf.numel() else 0.0
        scale = (self.scale if self.history else self._scale_of(amax)).to(xf.device)
        self.history = (self.history + [amax])[-self.history_len:]
        return Quantized(_encode(self.spec.format, xf / scale), scale, self.spec, tuple(x.shape))
