"""Format anatomy: what the bits of each format mean, and what the MX and NVFP4 scale rules do to a tensor.

Everything here is computed from `formats.FloatFormat` and `scaling`, so the notebook prints numbers, never types them:

    why_max(E4M3)  -> "E4M3: the all-ones exponent (field 15) stays finite ... top code 0x7E = S.1111.110 = 1.75 * 2**8
                       = 448. 1.875 * 2**8 = 480 would be code 0x7F, which is NaN ..."
    top_codes(E4M3, 2) -> [{code: 0x7D, bits: "0.1111.101", value: 416.0, ...}, {code: 0x7E, ..., value: 448.0},
                           {code: 0x7F, bits: "0.1111.111", value: nan, meaning: "NaN (would be 480)"}]
    mx_scale_anatomy(x)   # per 32-block: where amax lands under the OCP floor rule, how much saturates, SQNR vs per-tensor
    nvfp4_levels(x)       # the global scale, the E4M3 block scales, and the error that rounding the block scale adds

Why MXFP8 scores below per-tensor E4M3 on typical tensors (measured by `mx_scale_anatomy`, not asserted): E4M3's
relative precision is the same in every binade, so a power-of-two scale per 32 values buys no precision over one
scale per tensor. What it changes is where each block's amax lands: the OCP rule 2**(floor(log2 amax) - 8) puts it
anywhere in [256, 512), and the blocks landing above 448 (about log2(512/448) = 19 % of them, for log-uniform
mantissas) saturate their largest values by up to 12.5 %. Those few elements carry a large share of the error energy.
The round-up rule ("rceil") never saturates and scores like per-tensor; fp32 scales per 32 ("group") put every
block's amax exactly on 448 and score higher than both.
"""
from __future__ import annotations

import math

import torch

from . import formats as _f
from . import metrics
from .scaling import QuantSpec, dequantize, fake_quant, quantize

__all__ = ["format_rows", "format_table", "top_codes", "why_max", "mx_scale_anatomy", "nvfp4_levels",
           "anatomy_figure", "ANATOMY_FORMATS"]

ANATOMY_FORMATS = (_f.E4M3, _f.E5M2, _f.E4M3FNUZ, _f.E5M2FNUZ, _f.E2M1, _f.E8M0)
_COLUMNS = ("format", "bits", "exp_bits", "man_bits", "bias", "special", "emax", "max", "min_normal",
            "min_subnormal", "finite_codes", "nan_codes", "inf_codes", "negative_zero")


def format_rows(fmts=ANATOMY_FORMATS) -> list[dict]:
    """One `FloatFormat.anatomy()` row per format."""
    return [f.anatomy() for f in fmts]


def format_table(rows: list[dict]) -> str:
    """The rows as a fixed-width text table (numbers with %g)."""
    cells = [[(f"{r[c]:g}" if isinstance(r[c], float) else str(r[c])) for c in _COLUMNS] for r in rows]
    width = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(_COLUMNS)]
    line = lambda vals: "  ".join(v.rjust(w) for v, w in zip(vals, width))  # noqa: E731
    return "\n".join([line(_COLUMNS)] + [line(row) for row in cells])


def _bits(fmt, code: int) -> str:
    """'S.EEEE.MMM' for a code (E8M0: the 8 exponent bits)."""
    b = format(code, f"0{fmt.bits}b")
    s = int(fmt.signed)
    parts = ([b[:s]] if s else []) + [b[s:s + fmt.exp_bits]] + ([b[s + fmt.exp_bits:]] if fmt.man_bits else [])
    return ".".join(parts)


def _as_if_finite(fmt, code: int) -> float:
    """The value a positive code would have if its exponent field were an ordinary one."""
    e = (code & fmt.magnitude_mask) >> fmt.man_bits
    m = code & ((1 << fmt.man_bits) - 1)
    if fmt.special == "nan_only":
        return 2.0 ** (e - fmt.bias)
    return (1 + m / (1 << fmt.man_bits)) * 2.0 ** (e - fmt.bias) if e else m / (1 << fmt.man_bits) * 2.0 ** (1 - fmt.bias)


def top_codes(fmt, n: int = 3) -> list[dict]:
    """The n largest positive finite codes and the codes above them (NaN / Inf), with their bits and meaning."""
    t = fmt._table64
    rows = []
    for c in range(max(0, fmt.max_code - n + 1), fmt.magnitude_mask + 1):
        v = float(t[c])
        if math.isnan(v):
            meaning = f"NaN (would be {_as_if_finite(fmt, c):g})"
        elif math.isinf(v):
            meaning = "+Inf"
        else:
            meaning = "max" if c == fmt.max_code else "finite"
        rows.append({"code": f"0x{c:02X}", "bits": _bits(fmt, c), "value": v, "meaning": meaning})
    if fmt.special == "fnuz":
        rows.append({"code": f"0x{fmt.nan_code:02X}", "bits": _bits(fmt, fmt.nan_code), "value": math.nan,
                     "meaning": "NaN (the would-be -0: no negative zero)"})
    return rows


def _pow(v: float) -> str:
    """448.0 -> '1.75 * 2**8' (mantissa times a power of two)."""
    m, e = math.frexp(v)
    return f"{2 * m:g} * 2**{e - 1}"


def why_max(fmt) -> str:
    """Why the format's largest value is what it is, with the numbers computed from its fields."""
    top_e = (1 << fmt.exp_bits) - 1
    mx = fmt.max
    head = f"{fmt.name.upper()}: max = {mx:g} = {_pow(mx)}, top code 0x{fmt.max_code:02X} = {_bits(fmt, fmt.max_code)}."
    if fmt.special == "fn":
        nan = fmt.nan_code
        ieee_max = (2 - 2.0 ** -fmt.man_bits) * 2.0 ** (top_e - 1 - fmt.bias)
        return (f"{head} The all-ones exponent (field {top_e}) stays finite; only its all-ones mantissa, code "
                f"0x{nan:02X} = {_bits(fmt, nan)}, is NaN. {_pow(_as_if_finite(fmt, nan))} = "
                f"{_as_if_finite(fmt, nan):g} would need that NaN code, so the top finite value is {mx:g}. An IEEE-style "
                f"{fmt.name.upper()} (field {top_e} for Inf/NaN) would stop at {_pow(ieee_max)} = {ieee_max:g}: "
                f"giving up infinities buys a whole binade.")
    if fmt.special == "ieee":
        return (f"{head} Like IEEE floats, exponent field {top_e} holds Inf (mantissa 0) and NaN "
                f"({len(fmt.nan_codes)} codes), so the top finite value is in field {top_e - 1}. The range (min "
                f"subnormal {fmt.min_subnormal:g}) is what gradients need; the price is one mantissa bit.")
    if fmt.special == "fnuz":
        sib = next(f for f in (_f.E4M3, _f.E5M2) if (f.exp_bits, f.man_bits) == (fmt.exp_bits, fmt.man_bits))
        return (f"{head} Every exponent field is finite and the only NaN is 0x{fmt.nan_code:02X}, the code that would "
                f"be -0: no Inf, no negative zero (AMD's and Graphcore's FP8). Against {sib.name.upper()} "
                f"({sib.special}, bias {sib.bias}): bias {fmt.bias} moves the smallest normal from {sib.min_normal:g} "
                f"to {fmt.min_normal:g}, and the top from {sib.max:g} to {mx:g}"
                f"{' (the all-ones exponent, reserved in IEEE style, is finite here)' if sib.special == 'ieee' else ''}.")
    if fmt.special == "none":
        return (f"{head} No Inf and no NaN: all {1 << fmt.bits} codes are numbers, so even the all-ones exponent "
                f"field {top_e} is finite; overflow can only saturate.")
    return (f"{head} Unsigned powers of two 2**(c - {fmt.bias}): code 0xFF is NaN, there is no zero. It is a scale "
            f"format, never an element format.")


# ---- MX: the shared power-of-two scale --------------------------------------------------------------------
def _blocks(x: torch.Tensor, L: int) -> torch.Tensor:
    x = x.float()
    pad = (-x.shape[-1]) % L
    return torch.nn.functional.pad(x, (0, pad)).reshape(*x.shape[:-1], -1, L)


def mx_scale_anatomy(x: torch.Tensor, fmt: str = "e4m3") -> dict:
    """What the OCP floor rule does to the top of the range, measured on x (blocks of 32 along the last dim).

    Returns: landing  (per-block amax / 2**e: in [2**emax, 2**(emax+1)) under the floor rule; above fmt.max saturates),
             frac_blocks_over_max, frac_elements_saturated, saturated_error_share (their share of the squared error),
             saturated_rel_err (mean relative error of the saturated elements), and SQNR in dB of: per-tensor
             scaling, MX floor (OCP), MX rceil (round up: never saturates), fp32 scales per 32 ("group" of 32).
    """
    f = _f.get(fmt)
    q = quantize(x, QuantSpec(fmt, "mx"))
    d = dequantize(q)
    xb = _blocks(x, 32)
    amax = xb.abs().amax(-1)
    s = q.scale
    landing = amax / s
    nz = amax > 0
    ratio = (xb.abs() / s.unsqueeze(-1)).reshape(*x.shape[:-1], -1)[..., : x.shape[-1]]
    sat = ratio > f.max
    err = (x.float() - d) ** 2
    sq = lambda spec: metrics.sqnr_db(x, fake_quant(x.float(), spec))  # noqa: E731
    return {
        "format": fmt, "emax": f.emax, "max": f.max, "blocks": int(nz.sum()),
        "landing": landing[nz].flatten(),
        "frac_blocks_over_max": float((landing[nz] > f.max).float().mean()),
        "frac_elements_saturated": float(sat.float().mean()),
        "saturated_error_share": float(err[sat].sum() / err.sum()) if float(err.sum()) > 0 else 0.0,
        "saturated_rel_err": float(((x.float() - d).abs() / x.float().abs())[sat].mean()) if bool(sat.any()) else 0.0,
        "sqnr_tensor": sq(QuantSpec(fmt, "tensor")),
        "sqnr_mx_floor": metrics.sqnr_db(x, d),
        "sqnr_mx_rceil": sq(QuantSpec(fmt, "mx", scale_rule="rceil")),
        "sqnr_group32_fp32": sq(QuantSpec(fmt, "group", group_size=32)),
    }


# ---- NVFP4: two levels, and the rounding of the block scale ------------------------------------------------
def nvfp4_levels(x: torch.Tensor) -> dict:
    """NVFP4's two scale levels on x, and the error that storing the block scale in E4M3 adds (measured).

    global      = amax / (448 * 6)            (fp32; so the largest block scale lands on E4M3's 448)
    block scale = E4M3(amax_block / 6 / global)  -> effective s = decode(code) * global
    ideal       = amax_block / 6               (what an fp32 block scale would be: the block max maps onto 6 exactly)
    Returns the global scale, scale_ratio (s / ideal per block: < 1 means the block max lands above 6 and saturates,
    > 1 means the block uses less than E2M1's full range), its spread, the fraction of blocks rounded down, of blocks
    whose E4M3 scale is subnormal or zero, and SQNR (dB) with E4M3 block scales (NVFP4) vs fp32 block scales: the
    difference is the cost of rounding the block scale itself.
    """
    q = quantize(x, QuantSpec("e2m1", "nvfp4"))
    d = dequantize(q)
    xb = _blocks(x, 16)
    ideal = xb.abs().amax(-1) / 6.0
    nz = ideal > 0
    ratio = q.scale[nz] / ideal[nz]
    safe = torch.where(nz, ideal, torch.ones_like(ideal)).unsqueeze(-1)
    exact = (_f.E2M1.round(xb / safe) * safe).reshape(*x.shape[:-1], -1)[..., : x.shape[-1]]  # fp32 block scales
    codes = q.scale_codes[nz]
    return {
        "global_scale": float(q.global_scale), "blocks": int(nz.sum()), "scale_ratio": ratio,
        "ratio_min": float(ratio.min()), "ratio_max": float(ratio.max()),
        "mean_abs_scale_rounding": float((ratio - 1).abs().mean()),
        "frac_rounded_down": float((ratio < 1).float().mean()),
        "frac_subnormal_scale": float(((codes > 0) & (codes < 8)).float().mean()),
        "frac_zero_scale": float((codes == 0).float().mean()),
        "sqnr_e4m3_scales": metrics.sqnr_db(x, d),
        "sqnr_fp32_scales": metrics.sqnr_db(x, exact),
    }


def anatomy_figure(x: torch.Tensor, path=None):
    """Two panels: where MXFP8 block maxima land under the OCP floor rule (the saturating region shaded), and the
    NVFP4 block-scale rounding ratio. Saved through fp8lab.store when `path` is given.

    pyplot without choosing a backend (as grids.grid_figure): switching to Agg here hid the figure in notebooks;
    a machine without a display falls back to Agg by itself."""
    import matplotlib.pyplot as plt

    mx = mx_scale_anatomy(x, "e4m3")
    nv = nvfp4_levels(x)
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 3.8))
    lo, hi = 2.0 ** mx["emax"], 2.0 ** (mx["emax"] + 1)
    a.hist(mx["landing"].numpy(), bins=64, range=(lo, hi), color="steelblue")
    a.axvspan(mx["max"], hi, color="crimson", alpha=0.15, label=f"above {mx['max']:g}: saturates")
    a.axvline(mx["max"], color="crimson", lw=1)
    a.set_xlabel("block amax / shared scale (OCP floor rule)")
    a.set_ylabel("32-blocks")
    a.set_title(f"MXFP8 E4M3: {100 * mx['frac_blocks_over_max']:.1f} % of blocks land above {mx['max']:g}")
    a.legend(loc="upper left", fontsize=9)
    b.hist(nv["scale_ratio"].numpy(), bins=64, color="darkorange")
    b.axvline(1.0, color="k", lw=1)
    b.set_xlabel("E4M3 block scale / exact fp32 block scale")
    b.set_ylabel("16-blocks")
    b.set_title(f"NVFP4: block scale rounding costs {nv['sqnr_fp32_scales'] - nv['sqnr_e4m3_scales']:.2f} dB")
    fig.tight_layout()
    if path is not None:
        from .store import save_figure

        save_figure(fig, path)
    return fig
