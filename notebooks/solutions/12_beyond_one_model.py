"""Worked answers to notebook 12's exercises (beyond one 4-bit model): the byte arithmetic of fp8lab.frontier on the
lab's model, weight rounding with fp8lab.scaling, the committed sweep's intervals, and a tiny sensitivity slice.

    python notebooks/solutions/12_beyond_one_model.py
"""
import math

import torch

from fp8lab import findings, frontier, sensitivity
from fp8lab import notebook as nb
from fp8lab.metrics import sqnr_db
from fp8lab.scaling import QuantSpec, fake_quant


def exercise_1() -> dict:
    """Bytes per decode step = weights (read once per step whatever the batch) + the KV cache of every sequence in
    the batch at its context. At batch 1 and 512 tokens the weights are nearly everything, so the greedy saves bytes
    on weights; at batch 32 and 8k the KV cache is most of the bytes, so quantizing the cache buys the most bytes and
    the greedy turns to it first (if its sensitivity allows). Uniform "fp8 weights" barely moves the long-context
    step; "fp8 weights + fp8 KV" halves most of it."""
    from fp8lab.models import load_model

    lm = load_model("smollm2-135m", verbose=False)
    parts = sensitivity.model_parts(lm.model, ("layers", "lm_head", "kv"))
    inv = frontier.inventory(lm.model)
    out = {}
    for batch, ctx in ((1, 512), (32, 8192)):
        bf16 = frontier.decode_bytes(inv, {}, parts, batch=batch, context=ctx)
        kv_only = frontier.decode_bytes(inv, {p.name: "fp8" for p in parts if p.kv}, parts, batch=batch, context=ctx)
        row = {"bf16 MB/step": round(bf16 / 1e6, 2), "KV share of bf16 bytes": f"{2 * (bf16 - kv_only) / bf16:.0%}"}
        for label, w, head, kv in frontier.UNIFORM:
            a = {p.name: (kv if p.kv else head if p.lm_head else w) for p in parts}
            row[label] = round(frontier.decode_bytes(inv, a, parts, batch=batch, context=ctx) / 1e6, 2)
        out[f"batch {batch}, context {ctx}"] = row
    return out


def _q41(w: torch.Tensor) -> torch.Tensor:
    """A Q4_1-like grid: per 32-block along rows, 16 levels from the block's min to its max (asymmetric)."""
    b = w.reshape(-1, 32)
    lo, hi = b.min(1, keepdim=True).values, b.max(1, keepdim=True).values
    step = (hi - lo).clamp(min=1e-12) / 15
    return (torch.round((b - lo) / step) * step + lo).reshape(w.shape)


def exercise_2() -> dict:
    """Measure each format's SQNR against the tensor it was given, on Gaussian weights and on the same weights first put
    on a 16-level grid per 32-block. Compare the two columns: where they agree, the second rounding adds as much
    noise on 4-bit weights as on FP32 ones, so a 4-bit LM's weight-format rows are not distorted at the level of the
    weights; what they do compound is the error against the *original* checkpoint (first rounding + second), which
    is why the FP32 control is needed to say what a format does to weights that were never quantized."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(256, 512, generator=g) * 0.02
    w4 = _q41(w)
    specs = {"e4m3 per channel": QuantSpec("e4m3", "channel", axis=0), "int8 per channel": QuantSpec("int8", "channel", axis=0),
             "nvfp4": QuantSpec("e2m1", "nvfp4")}
    return {k: {"on FP32 weights (dB)": round(float(sqnr_db(w, fake_quant(w, s))), 1),
                "on 4-bit-grid weights (dB)": round(float(sqnr_db(w4, fake_quant(w4, s))), 1)} for k, s in specs.items()}


def exercise_3() -> dict:
    """A paired bootstrap interval's width shrinks like 1/√n (the windows are independent), so halving it takes four
    times the windows: n_needed = n · (width / target)². Read off the committed sweep's E4M3-weight row."""
    csv = nb.OUTPUTS / "results.csv"
    if not csv.is_file():
        return {"recorded": False, "make it": "make sweep"}
    df = nb.results_frame(csv)
    r = findings.sweep_delta(df, "e4m3-w")
    if r is None:
        return {"recorded": False, "why": "no e4m3-w row in outputs/results.csv"}
    width = r["ci95_high"] - r["ci95_low"]
    n = int(r["n"])
    return {"e4m3-w": findings.ci(r["delta_pct"], r["ci95_low"], r["ci95_high"]), "n windows": n,
            "interval width (points of %)": round(width, 2),
            "windows for half the width": int(math.ceil(n * 4)),
            "provenance": nb.provenance_line(nb.OUTPUTS / "provenance.json") if (nb.OUTPUTS / "provenance.json").is_file() else "?"}


def exercise_4() -> dict:
    """The grid has one cell per (layer, Linear type): every Linear of every layer on its own, for each format —
    several times the cells of the default map, each needing enough windows for its interval to resolve. The answer
    lists the cells and the command; the full map is hours on a CPU, minutes on a GPU (`--workers <n_gpus>`). Read
    its cells only where the interval excludes zero, and count how many would by chance."""
    from fp8lab.models import load_model

    lm = load_model("smollm2-135m", verbose=False)
    grid = sensitivity.model_parts(lm.model, ("grid",))
    return {"cells in the grid": len(grid), "first cells": [p.name for p in grid[:7]],
            "command": "python -m fp8lab.sensitivity --parts grid --formats nvfp4 --windows 64 --out runs/sens_grid"}


if __name__ == "__main__":
    nb.run_exercises(globals())
