"""Worked answers to notebook 01's exercises (number formats, the underflow probe, granularity, MX and NVFP4 scales).

    python notebooks/solutions/01_number_formats.py
"""
import math

import torch

from fp8lab import anatomy, metrics, probe
from fp8lab.formats import E4M3, E4M3FNUZ, E8M0
from fp8lab.scaling import QuantSpec, fake_quant, quantize

GPU_ONLY: set = set()

SPECS = {
    "E4M3 per-tensor": QuantSpec("e4m3", "tensor"),
    "E4M3 per-channel": QuantSpec("e4m3", "channel", axis=0),
    "INT8 per-channel": QuantSpec("int8", "channel", axis=0),
    "E4M3 1x128 groups": QuantSpec("e4m3", "group", group_size=128),
    "E4M3 128x128 blocks": QuantSpec("e4m3", "block"),
}


def _weights(outlier: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(256, 1024, generator=g) * 0.02
    if outlier == "column":
        w[:, 7] *= 50
    else:
        w[7, :] *= 50
    return w


def exercise_1() -> dict:
    """An outlier *row* instead of a column: granularity matters for the uniform grid, hardly for the floating one.

    E4M3 is a floating grid: a scale only has to keep the tensor inside its window, and inside it the relative
    error is the same at every magnitude, so the ordinary values get the same SQNR whichever granularity is used
    (with an outlier column, per-channel and 1x128 scores rise only because each row's outlier lands exactly on
    448). INT8 is a uniform grid: its step is the scale. With an outlier column every row's step is set by the
    outlier and the ordinary weights flush; with an outlier row, per-channel INT8 gives every ordinary row its own
    fine step and beats every E4M3 variant. Which granularity pays depends on the grid and on where the outlier is."""
    out, ordinary = {}, {}
    for where in ("column", "row"):
        w = _weights(where)
        keep = torch.ones(w.shape[0], dtype=torch.bool)
        keep[7] = False                                      # the ordinary rows (the outlier row is 7)
        cols = torch.arange(w.shape[1]) != 7                 # the ordinary columns
        out[where], ordinary[where] = {}, {}
        for k, s in SPECS.items():
            y = fake_quant(w, s)
            out[where][k] = round(metrics.sqnr_db(w, y), 1)
            ordinary[where][k] = round(metrics.sqnr_db(w[keep][:, cols], y[keep][:, cols]), 1)
    spread = {where: round(max(v for k, v in ordinary[where].items() if k.startswith("E4M3"))
                           - min(v for k, v in ordinary[where].items() if k.startswith("E4M3")), 1)
              for where in ordinary}
    return {"SQNR dB, outlier column": out["column"], "SQNR dB, outlier row": out["row"],
            "ordinary values' SQNR dB, outlier column": ordinary["column"],
            "ordinary values' SQNR dB, outlier row": ordinary["row"],
            "E4M3: spread over granularities of the ordinary values' SQNR (dB)": spread,
            "INT8 per-channel minus best E4M3, outlier row (dB)": round(
                out["row"]["INT8 per-channel"] - max(v for k, v in out["row"].items() if k.startswith("E4M3")), 1)}


def exercise_2() -> dict:
    """MXFP4 with the round-up ("ceil") E8M0 rule against the OCP floor rule, on Gaussian data.

    The floor rule lets a block's amax land anywhere in [4, 8) after scaling, above E2M1's top value 6 for part of
    that octave: those values saturate. The ceil rule rounds the scale up so that amax / scale never exceeds 6:
    nothing saturates, but many blocks then use only the coarse lower part of the grid. Which costs more is
    measured here (rceil, which rounds the exponent of amax / 6 up, is the cuBLAS / TransformerEngine rule)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 1024, generator=g)
    res = {rule: round(metrics.sqnr_db(x, fake_quant(x, QuantSpec("e2m1", "mx", scale_rule=rule))), 2)
           for rule in ("floor", "ceil", "rceil")}
    return {"SQNR dB by scale rule": res, "better on this tensor": max(res, key=res.get)}


def exercise_3() -> dict:
    """At what magnitude does unscaled E4M3 stop flushing? Never entirely: sweep the probe's small magnitude.

    E4M3's smallest subnormal is 2**-9; values below half of it (2**-10) round to zero. A N(0, sigma) tensor always
    has values near zero, so it flushes the fraction P(|x| < 2**-10) = erf(2**-10 / (sigma * sqrt(2))): large at
    sigma ~ 3e-4, falling roughly as 1/sigma, never exactly zero. The measured fractions follow the formula."""
    mags = [3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 1.0]
    flushed, predicted = {}, {}
    for m in mags:
        x = probe.probe_tensor(m)
        flushed[m] = round(metrics.flushed_pct(x, fake_quant(x, QuantSpec("e4m3", "none"))), 2)
        predicted[m] = round(100 * math.erf(2.0 ** -10 / (m * math.sqrt(2))), 2)
    return {"% flushed by magnitude (sigma)": flushed, "% predicted, erf(2**-10 / (sigma sqrt 2))": predicted,
            "first magnitude flushing < 1 %": next((m for m in mags if flushed[m] < 1.0), None)}


def exercise_4() -> dict:
    """A zero scale in E8M0: the format has no zero (it is 2**(e - 127) for e = 0..254, code 255 is NaN).

    Encoding 0.0 without saturation gives the NaN code; a NaN scale would decode the whole block to NaN. The lab
    never asks for it: an all-zero block gets the smallest power of two (code 0, 2**-127), so its elements (all
    zero) decode to zero — `scaling.quantize` on an all-zero MX block shows it."""
    code = int(E8M0.encode(torch.tensor([0.0]), saturate=False)[0])
    q = quantize(torch.zeros(2, 32), QuantSpec("e2m1", "mx"))
    scales = q.scale.flatten().tolist()
    return {"E8M0 code for 0.0 (saturate=False)": code, "is the NaN code": code == 255,
            "scale the lab gives an all-zero block": scales[0], "equals 2**-127": math.isclose(scales[0], 2.0 ** -127)}


def exercise_5() -> dict:
    """MXFP4's saturating share against MXFP8's, under the floor rule.

    A block's amax lands uniformly-in-log in [2**emax, 2**(emax+1)); it saturates above the format's max. For E4M3
    that is (448, 512): log2(512/448) of the octave. For E2M1 (max 6 = 1.5 * 2**2) it is (6, 8): log2(8/6), about
    twice as large a share, and each saturated value loses more (E2M1's step near the top is 2)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 1024, generator=g)
    m4, m8 = anatomy.mx_scale_anatomy(x, "e2m1"), anatomy.mx_scale_anatomy(x, "e4m3")
    return {"MXFP4 blocks above max (%)": round(100 * m4["frac_blocks_over_max"], 1),
            "MXFP8 blocks above max (%)": round(100 * m8["frac_blocks_over_max"], 1),
            "log-uniform prediction E2M1 (%)": round(100 * math.log2(8 / 6), 1),
            "log-uniform prediction E4M3 (%)": round(100 * math.log2(512 / 448), 1)}


def exercise_6() -> dict:
    """E4M3FNUZ against E4M3 (fn): moving the bias by one.

    FNUZ's bias is 8 instead of 7: every exponent means half as much, so the largest value drops (240 instead of
    448: 250 saturates) and the smallest subnormal halves (2**-10 instead of 2**-9: small values such as 0.009
    are represented with a finer step). The top exponent's codes are all finite, and the negative-zero code is NaN."""
    return {"E4M3.round(250)": float(E4M3.round(250.0)), "E4M3FNUZ.round(250)": float(E4M3FNUZ.round(250.0)),
            "E4M3.round(0.009)": float(E4M3.round(0.009)), "E4M3FNUZ.round(0.009)": float(E4M3FNUZ.round(0.009)),
            "max": (E4M3.max, E4M3FNUZ.max), "min subnormal": (E4M3.min_subnormal, E4M3FNUZ.min_subnormal)}


if __name__ == "__main__":
    from fp8lab.notebook import run_exercises

    run_exercises(globals())
