"""Worked answers to notebook 02's exercises (the recipe sweep), read from the committed runs under outputs/.

The notebook's commands recompute these at full size (minutes each on a CPU); the answers here read the lab's
committed runs, which used the same code, and say "not recorded" where a run is missing.

    python notebooks/solutions/02_recipe_sweep.py
"""
from fp8lab import findings, recipes, stats, sweep
from fp8lab import notebook as nb

GPU_ONLY: set = set()


def _frame(folder: str):
    base = nb.recorded(folder, "results.csv", quiet=True)
    return nb.results_frame(base / "results.csv") if base else None


def _rows(df, names):
    out = {}
    for n in names:
        r = findings.sweep_delta(df, n) if df is not None else None
        out[n] = "not recorded" if r is None else (f"{findings.causal_label(recipes.get_recipe(n).causal)}: "
                                                   + findings.ci(r["delta_pct"], r["ci95_low"], r["ci95_high"]))
    return out


def exercise_1() -> dict:
    """The KV cache on its own: which KV recipes are causal, and does E5M2's range pay off in the cache?

    The per-tensor (`e4m3-kv`, `e5m2-kv`) and per-channel KV recipes take one scale over the whole window: oracles.
    The `-tok` recipes (one scale per token and head), scale 1.0 and the calibrated-then-frozen cache are causal.
    E5M2 gives up a mantissa bit for range the cache does not need here: its row costs several times E4M3's."""
    df = _frame("sweep_more")
    names = ["e4m3-kv-tok", "e4m3-kv", "e4m3-kv-uncal", "e4m3-kv-cal256", "e4m3-kv-perchannel", "e5m2-kv-tok", "e5m2-kv"]
    return {"perplexity change vs baseline": _rows(df, names),
            "findings": findings.kv_sweep_findings(df) if df is not None else "not recorded"}


def exercise_2() -> dict:
    """Below 8 bits: NVFP4 and MXFP4 weights against INT8 and E4M3, on a baseline that is already 4-bit.

    The model's weights come from a Q4_1 GGUF file (16 levels per 32-block, asymmetric): a 4-bit recipe rounds
    values that already sit on a 4-bit grid onto a *different* 4-bit grid, compounding two roundings. The rows
    measure that second rounding, which overstates what NVFP4 does to an original bf16 checkpoint (notebook 12
    repeats the comparison on FP32 weights)."""
    more, main = _frame("sweep_more"), _frame("")
    out = _rows(more, ["int8-w", "nvfp4-w", "mxfp4-w"])
    out.update(_rows(main, ["e4m3-w"]))
    return {"perplexity change vs baseline": out}


def exercise_3() -> dict:
    """Any two recipes, paired: what the KV cache costs on top of W+A (causal per-token scales).

    Both recipes scored the same windows, so the window-to-window difficulty cancels in the paired difference. The
    difference of two baseline-relative intervals would add both recipes' spreads; the paired interval is narrower."""
    base = nb.recorded("", "results.csv", quiet=True)
    if base is None:
        return {"answer": "not recorded"}
    try:
        c = sweep.compare(base, "ppl", "e4m3-wakv-tok", "e4m3-wa-tok")
    except sweep.UsageError as e:
        return {"answer": f"not in the committed run ({e})"}
    df = nb.results_frame(base / "results.csv")
    a, b = findings.sweep_delta(df, "e4m3-wakv-tok"), findings.sweep_delta(df, "e4m3-wa-tok")
    unpaired = (a["ci95_high"] - a["ci95_low"]) + (b["ci95_high"] - b["ci95_low"])
    return {"paired: KV on top of W+A": findings.step_sentence("+ KV cache", c, "e4m3-wakv-tok", "e4m3-wa-tok"),
            "paired interval width (%)": round(c["ci95_high"] - c["ci95_low"], 3),
            "sum of the two baseline-relative widths (%)": round(unpaired, 3)}


def exercise_4() -> dict:
    """An exact interval by hand: n questions, none changed answer.

    When no question changes, every bootstrap resample gives 0 and the bootstrap interval has zero width. The
    rule of three bounds the change rate instead: with 0 of n changed, the rate is below 1 - 0.05**(1/n) (about
    3/n) with 95 % confidence, so the accuracy delta lies within plus or minus that many points."""
    df = _frame("")
    n = int(df[df.task == "arc_easy"].n.max()) if df is not None and (df.task == "arc_easy").any() else 40
    q = stats.rule_of_three(n)
    ex = stats.exact_acc_delta([1, 0] * (n // 2), [1, 0] * (n // 2))
    return {"n": n, "rule of three bound (points)": round(100 * q, 2), "3/n (points)": round(300 / n, 2),
            "exact_acc_delta with nothing changed": f"[{ex.low:+.2f}, {ex.high:+.2f}] ({ex.method})"}


def exercise_5() -> dict:
    """The DeepSeek-style recipe: is `w8a8-block` causal, and what does it cost next to per-token inputs?

    Its weights are static (128x128 blocks) and its activations get one scale per 1x128 group *of one token*: no
    scale spans tokens, so it is causal, like `e4m3-wa-tok` (one scale per token)."""
    r = recipes.get_recipe("w8a8-block")
    out = {"w8a8-block causal": r.causal, "why": r.why}
    out.update(_rows(_frame("sweep_more"), ["w8a8-block"]))
    out.update(_rows(_frame(""), ["e4m3-wa-tok"]))
    return out


def exercise_6() -> dict:
    """Longer context, another corpus, another model: what each command costs before you start it.

    `sweep.estimate` reads the plan without running anything (the lab's 2-core CPU; a shared machine is slower)."""
    cmds = {"longer context": ["--seq-len", "1024", "--tokens", "16384", "--tasks", "ppl"],
            "LAMBADA passages": ["--tasks", "ppl_lambada"]}
    return {k: sweep.estimate(v)[1] for k, v in cmds.items()}


if __name__ == "__main__":
    nb.run_exercises(globals())
