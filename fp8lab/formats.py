"""Number formats: one `FloatFormat` description drives E4M3, E5M2, E2M1, E8M0 and the fnuz FP8s; plus bf16 and INT8.

A format is sign | exponent | mantissa with a bias, plus a rule for what the all-ones exponent means.
Everything else (the value table, max, min normal, min subnormal, rounding, the GPU constants) is derived:

    E4M3.max            -> 448.0        # S.1111.110: the all-ones exponent is still finite in "fn" formats
    E4M3.min_normal     -> 0.015625     # 2**-6
    E4M3.min_subnormal  -> 0.001953125  # 2**-9
    E4M3.emax           -> 8            # 448 = 1.75 * 2**8: the exponent of the largest value
    E4M3.round(3e-4)    -> 0.0          # below 2**-10 (half of 2**-9): flushed
    E4M3.round(0.3)     -> 0.3125       # 1.25 * 2**-2, the nearest of 0.28125 / 0.3125
    E5M2.round(0.3)     -> 0.3125       # same here, but E5M2 has only 2 mantissa bits
    E2M1.table()[:8]    -> [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    E4M3FNUZ.max        -> 240.0        # bias 8, one NaN (0x80, the would-be -0), no negative zero

Rounding is round-to-nearest-even (RNE) on the code: at an exact midpoint between two representable
values the one whose code is even wins (E2M1: 0.25 -> 0.0, 0.75 -> 1.0, 2.5 -> 2.0, 5.0 -> 4.0).

Overflow is explicit:
  * `saturate=True` (the default; what hardware `cvt...satfinite`, torchao and TransformerEngine do)
    clamps finite overflow and +-Inf to +-max and keeps NaN as NaN (where the format has a NaN).
  * `saturate=False` matches ml_dtypes' casts: E4M3 overflow -> NaN, E5M2 overflow -> Inf,
    E2M1 (no Inf, no NaN) -> +-6 and NaN -> 0, E8M0 and the fnuz formats overflow -> NaN.

E8M0 (the MX scale format) is unsigned, has no zero and no mantissa: values 2**(c-127), c = 0..254, 0xFF is NaN.
Our rule, shared with ml_dtypes and torch for positive finite inputs: the nearest power of two in linear
value, an exact midpoint (1.5 * 2**k) rounds up. Where they differ:
  * zero: ml_dtypes gives NaN, torch gives code 0 (2**-127). We give NaN with saturate=False (ml_dtypes)
    and code 0 with saturate=True (a scale must never be NaN because its block is zero). Positive values
    below 2**-127 go to code 0 in all three; float32 subnormals above 2**-127 go to code 1 in all three
    (the libraries round on the bits, so the midpoint there sits at 2**-127, not at 1.5 * 2**-127).
  * negative inputs: ml_dtypes gives NaN, torch takes |x|. We give NaN (a negative scale is a bug upstream).

Any device: tables and constants follow the input's device, and every step is exact (compares, bit
operations, division by powers of two, torch's own float8 cast), so a CUDA tensor gets the CPU's codes bit
for bit (tests/test_scaling_cuda.py). Inputs are converted to float32 first (float64 input is rounded once).

Independent implementations agree exhaustively (tests/test_formats.py): `encode` finds the code by comparing
the input with the exact midpoints of the value table (the reference); `encode_fast` is the saturating encode
used on model tensors (torch's float8 cast after clamping, or seed 002's compares for E2M1); `round`
computes the value with bit arithmetic, or with torch's float8 cast after clamping to +-max.

`cuda_defines()` exports every constant a kernel needs (max, its bits, NaN codes, E2M1 midpoints...) so the
GPU side compiles against this one description instead of a second table.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

__all__ = [
    "FloatFormat", "IntFormat", "E4M3", "E5M2", "E2M1", "E8M0", "E4M3FNUZ", "E5M2FNUZ", "INT8", "FORMATS", "get",
    "bf16_round", "e2m1_branchless_seed", "e2m1_branchless", "e2m1_midpoints", "cuda_defines",
    "cuda_define_options", "cuda_header", "NVFP4_BLOCK", "MX_BLOCK", "NVFP4_GLOBAL_DIV", "pow2_f32", "floor_log2_f32",
]

_SPECIALS = ("ieee", "fn", "fnuz", "none", "nan_only")


def _as_f32(x) -> torch.Tensor:
    """Accept a torch tensor, NumPy array, list or Python number; return a float32 tensor (no copy if possible)."""
    if isinstance(x, torch.Tensor):
        if not x.is_floating_point():
            raise TypeError(f"expected a floating-point tensor, got dtype {x.dtype}")
        return x.float()
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"expected numbers, got an array of dtype {arr.dtype}")
    return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))


def _scalar_out(x, y: torch.Tensor):
    """Python number in, Python number out (so docstring examples read naturally)."""
    return float(y) if isinstance(x, (int, float)) else y


def _f32_bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def pow2_f32(e: torch.Tensor) -> torch.Tensor:
    """2**e as float32, built from the bits (exact on every device), for integer e in [-149, 127].

    pow2_f32(torch.tensor([0, -127, 127])) -> [1.0, 5.877e-39 (subnormal), 1.701e+38]
    """
    e = e.to(torch.int32)
    normal = (e + 127).clamp(min=1, max=254) << 23
    sub = torch.ones_like(e) << (e + 149).clamp(min=0, max=22)   # 2**e = 2**(e+149) * 2**-149 below 2**-126
    return torch.where(e >= -126, normal, sub).view(torch.float32)


def floor_log2_f32(a: torch.Tensor) -> torch.Tensor:
    """floor(log2 |a|) from the float32 exponent field (int32); float32 subnormals and 0 give -127, Inf/NaN 128."""
    return ((a.float().contiguous().view(torch.int32) >> 23) & 0xFF) - 127


_DEVICE_CACHE: dict = {}


def _on(device, key, build) -> torch.Tensor:
    """A constant tensor built once on the CPU and cached per device (tables follow the input's device)."""
    k = (key, torch.device(device))
    t = _DEVICE_CACHE.get(k)
    if t is None:
        t = _DEVICE_CACHE[k] = build().to(device)
    return t


@dataclass(frozen=True)
class FloatFormat:
    """A small floating-point format: sign (optional) | `exp_bits` exponent | `man_bits` mantissa, `bias`.

    `special` says what the all-ones exponent field means:
      "ieee" -- Inf when the mantissa is 0, NaN otherwise (E5M2);
      "fn"   -- finite, except the single all-ones code S.1111.111 which is NaN (E4M3 "fn": no Inf);
      "fnuz" -- every code finite except 0x80 (the would-be negative zero), the only NaN; no Inf, no -0
                (E4M3FNUZ / E5M2FNUZ: AMD's and Graphcore's FP8);
      "none" -- finite, no Inf, no NaN (E2M1);
      "nan_only" -- the all-ones code is NaN, all others finite powers of two (E8M0, unsigned, no zero).
    """

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    special: str
    signed: bool = True

    def __post_init__(self):
        if self.special not in _SPECIALS:
            raise ValueError(f"unknown special-value rule {self.special!r}; valid: {', '.join(_SPECIALS)}")
        if self.special == "fnuz" and not self.signed:
            raise ValueError("fnuz formats are signed (their NaN is the negative-zero code)")

    # ---- derived description -------------------------------------------------------------
    @property
    def bits(self) -> int:
        return int(self.signed) + self.exp_bits + self.man_bits

    @property
    def has_inf(self) -> bool:
        return self.special == "ieee"

    @property
    def has_nan(self) -> bool:
        return self.special in ("ieee", "fn", "fnuz", "nan_only")

    @property
    def has_zero(self) -> bool:
        return self.special != "nan_only"

    @property
    def has_negative_zero(self) -> bool:
        return self.signed and self.special != "fnuz"

    @property
    def sign_bit(self) -> int:
        """The sign bit's mask (0x80 for FP8, 0x8 for E2M1, 0 for unsigned E8M0)."""
        return 1 << (self.bits - 1) if self.signed else 0

    @property
    def magnitude_mask(self) -> int:
        """The bits below the sign (0x7F for FP8, 0x7 for E2M1, 0xFF for E8M0)."""
        return (1 << (self.exp_bits + self.man_bits)) - 1

    def _value_of(self, code: int) -> float:
        """Decode one code with plain Python arithmetic (float64): the definition of the format."""
        sign_bit = self.sign_bit
        neg = bool(code & sign_bit)
        mag = code & self.magnitude_mask
        e = mag >> self.man_bits
        m = mag & ((1 << self.man_bits) - 1)
        e_max = (1 << self.exp_bits) - 1
        if self.special == "fnuz" and neg and mag == 0:
            return math.nan                                              # 0x80: the only NaN
        if self.special == "ieee" and e == e_max:
            v = math.inf if m == 0 else math.nan
        elif self.special == "fn" and e == e_max and m == (1 << self.man_bits) - 1:
            v = math.nan
        elif self.special == "nan_only" and e == e_max:
            v = math.nan
        elif self.special == "nan_only":
            v = 2.0 ** (e - self.bias)  # no implicit 1.mantissa, no subnormals: a pure exponent
        elif e == 0:
            v = (m / (1 << self.man_bits)) * 2.0 ** (1 - self.bias)  # subnormal
        else:
            v = (1 + m / (1 << self.man_bits)) * 2.0 ** (e - self.bias)
        return -v if neg else v

    @cached_property
    def _table64(self) -> np.ndarray:
        return np.array([self._value_of(c) for c in range(1 << self.bits)], dtype=np.float64)

    def table(self, device=None) -> torch.Tensor:
        """All 2**bits decoded values, indexed by code (float32, a fresh copy). E4M3.table()[0x7E] -> 448.0."""
        t = torch.from_numpy(self._table64.astype(np.float32))
        return t if device is None else t.to(device)

    def _table_on(self, device) -> torch.Tensor:
        return _on(device, (self.name, "table"), lambda: torch.from_numpy(self._table64.astype(np.float32)))

    @cached_property
    def _positive(self) -> tuple[np.ndarray, np.ndarray]:
        """Non-negative finite values in code order (they are increasing) and their codes."""
        t = self._table64
        n_mag = 1 << (self.exp_bits + self.man_bits)
        codes = np.arange(n_mag)
        vals = t[:n_mag]
        keep = np.isfinite(vals)
        return vals[keep], codes[keep]

    @property
    def max(self) -> float:
        return float(self._positive[0][-1])

    @property
    def emax(self) -> int:
        """floor(log2(max)): the exponent of the largest value (E4M3 8, E5M2 15, E2M1 2, E4M3FNUZ 7, E8M0 127).

        The OCP MX rule uses it: shared scale 2**(floor(log2 amax) - emax) puts amax in [2**emax, 2**(emax+1)).
        """
        return math.frexp(self.max)[1] - 1

    @property
    def emin(self) -> int:
        """The exponent of the smallest normal value (1 - bias; E8M0: -127)."""
        return 1 - self.bias if self.special != "nan_only" else -self.bias

    @property
    def min_normal(self) -> float:
        return 2.0 ** self.emin

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (1 - self.bias - self.man_bits) if self.special != "nan_only" else 2.0 ** (-self.bias)

    @property
    def nan_code(self) -> int | None:
        """The NaN code this lab produces (E4M3 0x7F, E5M2 0x7E, fnuz 0x80, E8M0 0xFF); None if no NaN.

        ml_dtypes produces the same codes (up to the sign bit for E4M3/E5M2)."""
        if self.special == "fn":
            return (1 << (self.bits - 1)) - 1                     # S.1111.111
        if self.special == "ieee":                                # all-ones exponent, quiet bit set
            return (((1 << self.exp_bits) - 1) << self.man_bits) | (1 << (self.man_bits - 1))
        if self.special == "fnuz":
            return self.sign_bit                                  # 0x80, the would-be negative zero
        if self.special == "nan_only":
            return (1 << self.bits) - 1                           # 0xFF
        return None

    @property
    def nan_codes(self) -> list[int]:
        """Every code that decodes to NaN (E4M3: [0x7F, 0xFF]; E5M2: 6 codes; fnuz: [0x80]; E2M1: [])."""
        return [c for c, v in enumerate(self._table64) if math.isnan(v)]

    @property
    def inf_code(self) -> int | None:
        """The +Inf code (E5M2 0x7C); None for formats without infinities."""
        return ((1 << self.exp_bits) - 1) << self.man_bits if self.has_inf else None

    @property
    def max_code(self) -> int:
        return int(self._positive[1][-1])

    def anatomy(self) -> dict:
        """The fields and what they give, as one row (the notebook prints these as a table).

        E4M3.anatomy()["max"] -> 448.0 ; E4M3.anatomy()["nan_codes"] -> "0x7F, 0xFF"
        """
        finite = int(np.isfinite(self._table64).sum())
        return {
            "format": self.name, "bits": self.bits, "sign": int(self.signed), "exp_bits": self.exp_bits,
            "man_bits": self.man_bits, "bias": self.bias, "special": self.special, "emax": self.emax,
            "max": self.max, "min_normal": self.min_normal, "min_subnormal": self.min_subnormal,
            "finite_codes": finite, "nan_codes": ", ".join(f"0x{c:02X}" for c in self.nan_codes) or "none",
            "inf_codes": ", ".join(f"0x{c:02X}" for c in (self.inf_code, self.inf_code | self.sign_bit)) if self.has_inf
            else "none", "negative_zero": self.has_negative_zero,
        }

    def __repr__(self) -> str:
        return (f"FloatFormat({self.name}: E{self.exp_bits}M{self.man_bits} bias {self.bias}, {self.special}, "
                f"max {self.max:g}, min normal {self.min_normal:g}, min subnormal {self.min_subnormal:g})")

    # ---- encode / decode (the reference) -------------------------------------------------------
    def _mids(self) -> np.ndarray:
        """Midpoints between neighbouring magnitudes plus one virtual midpoint past max (exact in float32:
        every value has <= 4 significant bits, a midpoint <= 5)."""
        vals = self._positive[0]
        mids = (vals[:-1] + vals[1:]) / 2
        top = vals[-1] + (vals[-1] - vals[-2]) / 2 if self.special != "nan_only" else vals[-1] * 1.5
        out = np.concatenate([mids, [top]])
        assert np.array_equal(out.astype(np.float32).astype(np.float64), out)  # exact in float32
        return out.astype(np.float32)

    def encode(self, x, saturate: bool = True) -> torch.Tensor:
        """Round float32 values to the nearest code (RNE on the code); return uint8 codes of the same shape.

        E4M3.encode(torch.tensor([1.0, 448.0, 500.0]), saturate=False) -> [0x38, 0x7E, 0x7F (NaN)]
        E4M3.encode(torch.tensor([1.0, 448.0, 500.0]))                 -> [0x38, 0x7E, 0x7E (448)]
        """
        xf = _as_f32(x)
        dev = xf.device
        a = xf.abs().contiguous()
        vals, _ = self._positive
        mids = _on(dev, (self.name, "mids"), lambda: torch.from_numpy(self._mids()))
        codes = _on(dev, (self.name, "pos_codes"), lambda: torch.from_numpy(self._positive[1].astype(np.int64)))
        lo = torch.searchsorted(mids, a, right=False)  # number of midpoints < a
        hi = torch.searchsorted(mids, a, right=True)   # number of midpoints <= a
        tie = lo != hi
        if self.special == "nan_only":
            idx = hi  # E8M0: ties go up (ml_dtypes and torch agree)
        else:
            idx = torch.where(tie & (lo % 2 == 1), hi, lo)  # tie: the even code (index == code here)
        overflow = idx >= len(vals)
        out = codes[idx.clamp(max=len(vals) - 1)]
        nan_in = torch.isnan(xf)
        too_big = overflow | torch.isinf(xf)
        if saturate or self.special == "none":   # "none": nothing but saturation exists (ml_dtypes does the same)
            out = out.masked_fill(too_big, self.max_code)
        elif self.special == "ieee":
            out = out.masked_fill(too_big, self.inf_code)
        else:  # fn, fnuz, nan_only: overflow is NaN
            out = out.masked_fill(too_big, self.nan_code)
        if self.signed:
            sign = torch.signbit(xf) & ~nan_in
            if not self.has_negative_zero:
                sign &= out != 0                 # fnuz: -0.0 and tiny negatives are +0 (0x80 is NaN)
            out = out | (sign.long() << (self.bits - 1))
        if self.special == "nan_only":
            # Positive values below 2**-127 already went to code 0 (the nearest). Zero has no code:
            # NaN like ml_dtypes, or code 0 when saturating. Negative values are always NaN.
            # float32 SUBNORMAL inputs (< 2**-126) round like every other value: to the nearest power of two,
            # the tie 1.5 * 2**-127 up (ml_dtypes >= 0.7 does the same). torch's cast rounds them on the float32
            # bits instead, so for it the rounding point is 2**-127 itself (tests/test_formats.py pins both).
            zero = xf == 0
            neg = (xf < 0) | (torch.signbit(xf) & ~zero & ~nan_in)
            out = out.masked_fill(zero, 0 if saturate else self.nan_code)
            out = out.masked_fill(neg, self.nan_code)
        out = out.masked_fill(nan_in, self.nan_code if self.has_nan else 0)  # E2M1 has no NaN: +0 (documented)
        return out.to(torch.uint8)

    def encode_fast(self, x) -> torch.Tensor:
        """encode(x, saturate=True), bit for bit (tests/test_formats.py, every bf16/fp16 pattern and 10**6 floats),
        fast enough for model- and benchmark-sized tensors on any device.

        E4M3/E5M2 and the fnuz formats: torch's float8 cast after clamping to +-max (the cast is RNE with
        subnormals; the clamp makes it saturate), NaN mapped to `nan_code`. E2M1: seed 002's seven compares
        with the RNE fix (`e2m1_midpoints`). Other formats: the reference.
        """
        xf = _as_f32(x)
        if self.name in _TORCH_FP8:
            c = xf.clamp(-self.max, self.max).to(_TORCH_FP8[self.name]).view(torch.uint8)
            return c.masked_fill(torch.isnan(xf), self.nan_code)
        if self is E2M1:
            # the seven compares in one op: bucketize counts the boundaries strictly below |x|; an inclusive
            # midpoint (>=) becomes a strict one at the float32 just below it
            mids = _on(xf.device, ("e2m1", "strict_mids"), _e2m1_strict_mids)
            idx = torch.bucketize(xf.abs().contiguous(), mids, out_int32=True).to(torch.uint8)
            out = idx | (torch.signbit(xf).to(torch.uint8) << 3)
            return out.masked_fill(torch.isnan(xf), 0)  # no NaN in E2M1: +0, as encode
        return self.encode(xf, saturate=True)

    def decode(self, codes) -> torch.Tensor:
        """uint8 codes -> float32 values through the value table, on the codes' device. E4M3.decode(0x38) -> 1.0."""
        c = codes if isinstance(codes, torch.Tensor) else torch.as_tensor(np.asarray(codes))
        if c.dtype not in (torch.uint8, torch.int16, torch.int32, torch.int64):
            raise TypeError(f"codes must be an integer tensor (uint8), got {c.dtype}")
        if c.numel() and (int(c.min()) < 0 or int(c.max()) >= (1 << self.bits)):
            raise ValueError(f"{self.name} codes must lie in [0, {(1 << self.bits) - 1}]")
        return self._table_on(c.device)[c.long()]

    # ---- round (fast path: arithmetic, no table) ----------------------------------------------
    def round(self, x, saturate: bool = True):
        """decode(encode(x)) computed arithmetically: the binade from the exponent bits, RNE on the scaled mantissa.

        E4M3.round(3e-4) -> 0.0        # below 2**-10: flushed
        E4M3.round(1000.0) -> 448.0    # saturated
        E2M1.round(2.5) -> 2.0         # tie to even
        """
        if self.special == "nan_only":
            return _scalar_out(x, self.decode(self.encode(x, saturate)))
        xf = _as_f32(x)
        if saturate and self.name in _TORCH_FP8:
            # torch's float8 cast is RNE with subnormals, the same rounding; it differs only on overflow,
            # which clamping to +-max first turns into saturation. ~5x faster than the arithmetic below
            # (it matters: the sweep rounds every Linear input on every forward). NaN stays NaN.
            y = xf.clamp(-self.max, self.max).to(_TORCH_FP8[self.name]).to(torch.float32)
            return _scalar_out(x, y)
        e = floor_log2_f32(xf).clamp(min=1 - self.bias)     # binade exponent; subnormals share the lowest
        quantum = pow2_f32(e - self.man_bits)                # a power of two: the division below is exact
        y = torch.round(xf / quantum) * quantum              # torch.round is round-half-to-even
        mx = self.max
        too_big = (y.abs() > mx) | torch.isinf(xf)
        if saturate or self.special == "none":
            y = torch.where(too_big, torch.copysign(torch.full_like(xf, mx), xf), y)
        elif self.special == "ieee":
            y = torch.where(too_big, torch.copysign(torch.full_like(xf, math.inf), xf), y)
        else:  # fn, fnuz: overflow is NaN
            y = y.masked_fill(too_big, math.nan)
        if not self.has_negative_zero:
            y = torch.where(y == 0, torch.zeros_like(y), y)
        if not self.has_nan:
            y = y.masked_fill(torch.isnan(xf), 0.0)
        return _scalar_out(x, y)


@dataclass(frozen=True)
class IntFormat:
    """Symmetric signed integer: codes in [-qmax, qmax] (INT8: -127..127; -128 unused so the grid is symmetric).

    INT8.round(3.6) -> 4.0; INT8.round(2.5) -> 2.0 (half to even); INT8.round(300.0) -> 127.0
    """

    name: str
    bits: int

    @property
    def max(self) -> float:
        return float((1 << (self.bits - 1)) - 1)

    @property
    def min_subnormal(self) -> float:
        return 1.0

    def encode(self, x, saturate: bool = True) -> torch.Tensor:
        xf = _as_f32(x)
        if torch.isnan(xf).any():
            raise ValueError(f"{self.name} has no NaN: input holds {int(torch.isnan(xf).sum())} NaN values")
        return torch.clamp(torch.round(xf), -self.max, self.max).to(torch.int8)

    def encode_fast(self, x) -> torch.Tensor:
        return self.encode(x)

    def decode(self, codes) -> torch.Tensor:
        return torch.as_tensor(codes).float()

    def round(self, x, saturate: bool = True):
        xf = _as_f32(x)
        y = torch.clamp(torch.round(xf), -self.max, self.max)
        return _scalar_out(x, torch.where(torch.isnan(xf), xf, y))


E4M3 = FloatFormat("e4m3", exp_bits=4, man_bits=3, bias=7, special="fn")
E5M2 = FloatFormat("e5m2", exp_bits=5, man_bits=2, bias=15, special="ieee")
E2M1 = FloatFormat("e2m1", exp_bits=2, man_bits=1, bias=1, special="none")
E8M0 = FloatFormat("e8m0", exp_bits=8, man_bits=0, bias=127, special="nan_only", signed=False)
E4M3FNUZ = FloatFormat("e4m3fnuz", exp_bits=4, man_bits=3, bias=8, special="fnuz")
E5M2FNUZ = FloatFormat("e5m2fnuz", exp_bits=5, man_bits=2, bias=16, special="fnuz")
INT8 = IntFormat("int8", bits=8)

FORMATS = {f.name: f for f in (E4M3, E5M2, E2M1, E8M0, E4M3FNUZ, E5M2FNUZ, INT8)}
_TORCH_FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2,
              "e4m3fnuz": torch.float8_e4m3fnuz, "e5m2fnuz": torch.float8_e5m2fnuz}

# Block sizes and the NVFP4 global-scale divisor: the scaling rules and the kernels read them from here.
NVFP4_BLOCK = 16                      # E2M1 elements per E4M3 block scale
MX_BLOCK = 32                         # elements per E8M0 scale (OCP MX v1.0)
NVFP4_GLOBAL_DIV = E4M3.max * E2M1.max  # 2688 = 448 * 6: global = amax / 2688 lets a block scale reach 448


def get(name: str):
    """formats.get("e4m3") is formats.E4M3. Unknown names raise a ValueError that lists the valid ones."""
    if not isinstance(name, str):
        raise TypeError(f"a format is named by a string, got {type(name).__name__}")
    key = name.lower().replace("_", "").replace("fp8", "").replace("float8", "").strip("-")
    aliases = {"e4m3fn": "e4m3", "e8m0fnu": "e8m0", "e2m1fn": "e2m1", "fp4": "e2m1", "float4e2m1fn": "e2m1"}
    key = aliases.get(key, key)
    if key not in FORMATS:
        raise ValueError(f"unknown format {name!r}; valid: {', '.join(FORMATS)}")
    return FORMATS[key]


# ---- bf16 ---------------------------------------------------------------------------------------
def bf16_round(x) -> torch.Tensor:
    """float32 -> bf16 round-to-nearest-even, returned as float32 (bit-exact with torch's .to(bfloat16)).

    bf16_round(1.00390625) -> 1.0        # 1 + 2**-8 is a tie between 1.0 and 1.0078125: even mantissa wins
    The bit trick: add 0x7FFF plus the lowest kept bit, then drop the low 16 bits; NaN stays a quiet NaN.
    """
    xf = _as_f32(x).contiguous()
    b = xf.view(torch.int32).long() & 0xFFFFFFFF
    lsb = (b >> 16) & 1
    r = ((b + 0x7FFF + lsb) >> 16) << 16
    nan = torch.isnan(xf)
    r = torch.where(nan, (b | 0x00400000) & 0xFFFF0000, r)
    r = torch.where(r >= 2**31, r - 2**32, r).to(torch.int32)
    return _scalar_out(x, r.view(torch.float32))


# ---- the branchless E2M1 conversion of seed 002 ------------------------------------------------
def e2m1_midpoints() -> list[tuple[float, bool]]:
    """(midpoint, strict) for the seven midpoints between neighbouring E2M1 magnitudes, from E2M1's table.

    RNE: at a midpoint the even code wins, so the compare must be strict (>) where the LOWER neighbour has the
    even code and inclusive (>=) where the upper one does:
    e2m1_midpoints() -> [(0.25, True), (0.75, False), (1.25, True), (1.75, False), (2.5, True), (3.5, False), (5.0, True)]
    """
    vals, codes = E2M1._positive
    return [(float((vals[i] + vals[i + 1]) / 2), bool(codes[i] % 2 == 0)) for i in range(len(vals) - 1)]


def _e2m1_strict_mids() -> torch.Tensor:
    """e2m1_midpoints() as strict thresholds (float32): m itself where the compare is >, else nextafter(m, 0)."""
    m = np.array([t for t, _ in e2m1_midpoints()], dtype=np.float32)
    below = np.nextafter(m, np.float32(0))
    return torch.from_numpy(np.where([s for _, s in e2m1_midpoints()], m, below).astype(np.float32))


def _e2m1_compare(x, strict_mask) -> np.ndarray:
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    mag = bits & np.uint32(0x7FFFFFFF)
    sign = (bits >> np.uint32(31)) << np.uint32(3)
    idx = np.zeros(bits.shape, dtype=np.uint32)
    mids = np.array([m for m, _ in e2m1_midpoints()], dtype=np.float32).view(np.uint32)
    for t, strict in zip(mids, strict_mask):
        idx += (mag > t) if strict else (mag >= t)
    return (sign | idx).astype(np.uint8)


def e2m1_branchless_seed(x) -> np.ndarray:
    """Seed 002's 7-compare conversion exactly as written: `>=` at every midpoint.

    It rounds the ties 0.25, 1.25, 2.5 and 5.0 AWAY from zero (0.5, 1.5, 3, 6), not to even. NaN and Inf
    compare above every threshold and saturate to +-6.
    e2m1_branchless_seed(2.5) -> 0x5 (3.0)   # RNE says 0x4 (2.0)
    """
    return _e2m1_compare(x, [False] * 7)


def e2m1_branchless(x) -> np.ndarray:
    """The same 7 compares with `>` at the four midpoints whose lower neighbour is even: bit-identical to RNE.

    e2m1_branchless(2.5) -> 0x4 (2.0); e2m1_branchless(-0.75) -> 0xA (-1.0); e2m1_branchless(100.) -> 0x7 (6.0)
    Saturating: +-Inf -> +-6, and NaN -> 0x7 or 0xF (a NaN's magnitude bits exceed every threshold).
    """
    return _e2m1_compare(x, [s for _, s in e2m1_midpoints()])


# ---- constants for the GPU side ------------------------------------------------------------------
def _hexf(v: float) -> str:
    """An exact float32 C literal in hex: 448.0 -> '0x1.cp+8f', -0.5 -> '-0x1p-1f', 2**-127 -> '0x1p-127f'."""
    sign = "-" if math.copysign(1.0, v) < 0 else ""
    v = abs(float(np.float32(v)))
    if v == 0:
        return sign + "0.0f"
    _, e = math.frexp(v)            # v = m * 2**e, 0.5 <= m < 1
    frac = (v / 2.0 ** (e - 1)).hex().split(".")[1].split("p")[0].rstrip("0")   # mantissa in [1, 2)
    return f"{sign}0x1{'.' + frac if frac else ''}p{e - 1:+d}f"


def cuda_defines() -> dict[str, str]:
    """Every format constant a kernel needs, as `#define` name -> value (exact literals), from FloatFormat.

    cuda_defines()["FP8LAB_E4M3_MAX"]       -> "0x1.cp+8f"   (448.0f, exact)
    cuda_defines()["FP8LAB_E4M3_MAX_BITS"]  -> "0x43E00000u" (its float32 bit pattern: the saturation bound)
    cuda_defines()["FP8LAB_E2M1_MID4"]      -> "0x1.4p+1f"   (2.5, the fifth midpoint), "..._STRICT" -> "1"
    cuda_defines()["FP8LAB_NVFP4_GLOBAL_DIV"] -> "0x1.5p+11f" (2688 = 448 * 6)
    Pass them to NVRTC as -D options (`cuda_define_options()`), or include `cuda_header()`.
    """
    d: dict[str, str] = {"FP8LAB_FORMATS_DEFINED": "1"}
    for f in (E4M3, E5M2, E2M1, E8M0, E4M3FNUZ, E5M2FNUZ):
        p = f"FP8LAB_{f.name.upper()}"
        d[f"{p}_EXP_BITS"] = str(f.exp_bits)
        d[f"{p}_MAN_BITS"] = str(f.man_bits)
        d[f"{p}_BIAS"] = str(f.bias)
        d[f"{p}_EMAX"] = str(f.emax)
        d[f"{p}_MAX"] = _hexf(f.max)
        d[f"{p}_MAX_BITS"] = f"0x{_f32_bits(f.max):08X}u"
        d[f"{p}_MAX_CODE"] = f"0x{f.max_code:02X}u"
        d[f"{p}_MIN_NORMAL"] = _hexf(f.min_normal)
        d[f"{p}_MIN_SUBNORMAL"] = _hexf(f.min_subnormal)
        d[f"{p}_MAG_MASK"] = f"0x{f.magnitude_mask:02X}u"
        d[f"{p}_SIGN_BIT"] = f"0x{f.sign_bit:02X}u"
        if f.nan_code is not None:
            d[f"{p}_NAN_CODE"] = f"0x{f.nan_code:02X}u"
        if f.inf_code is not None:
            d[f"{p}_INF_CODE"] = f"0x{f.inf_code:02X}u"
        if f.special != "nan_only":
            # decode by bit placement: (mag << (23 - MB)) as float32 bits is value * 2**-(127 - B); one exact multiply
            d[f"{p}_DECODE_SHIFT"] = str(23 - f.man_bits)
            d[f"{p}_DECODE_MUL"] = _hexf(2.0 ** (127 - f.bias))
    for i, (m, strict) in enumerate(e2m1_midpoints()):
        d[f"FP8LAB_E2M1_MID{i}"] = _hexf(m)
        d[f"FP8LAB_E2M1_MID{i}_BITS"] = f"0x{_f32_bits(m):08X}u"
        d[f"FP8LAB_E2M1_MID{i}_STRICT"] = str(int(strict))
    mids = e2m1_midpoints()
    # the same midpoints as one list, and a bit mask of which ties round down (the kernels' formats.cuh uses these)
    d["FP8LAB_E2M1_MIDS"] = ",".join(f"0x{_f32_bits(m):08X}u" for m, _ in mids)
    d["FP8LAB_E2M1_TIES_DOWN"] = f"0x{sum(1 << i for i, (_, s) in enumerate(mids) if s):02X}u"
    d["FP8LAB_E2M1_RCP_MAX"] = _hexf(np.float32(1.0) / np.float32(E2M1.max))   # RN(1/6) in float32
    d["FP8LAB_E2M1_VALUES"] = "{" + ",".join(_hexf(v) for v in E2M1._table64.astype(np.float32)) + "}"
    d["FP8LAB_NVFP4_BLOCK"] = str(NVFP4_BLOCK)
    d["FP8LAB_NVFP4_GLOBAL_DIV"] = _hexf(NVFP4_GLOBAL_DIV)
    d["FP8LAB_MX_BLOCK"] = str(MX_BLOCK)
    return d


def cuda_define_options() -> tuple[str, ...]:
    """cuda_defines() as ('NAME=VALUE', ...): the `defines` argument of kernels._cuda.load_module (hashable)."""
    return tuple(f"{k}={v}" for k, v in cuda_defines().items())


def cuda_header() -> str:
    """cuda_defines() as a header text (`#pragma once` + one #define per line), for a generated .cuh."""
    lines = ["// Generated by fp8lab.formats.cuda_header(): the format constants, from FloatFormat. Do not edit.",
             "#pragma once"]
    lines += [f"#define {k} {v}" for k, v in cuda_defines().items()]
    return "\n".join(lines) + "\n"
