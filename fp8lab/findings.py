"""Sentences about committed results, computed from the result files, so that no page states a number (or a
conclusion) that its own tables contradict.

A notebook's markdown explains *mechanisms* ("a scale frozen after 16 tokens under-estimates later maxima");
what the committed run *shows* is rendered by these functions from the rows, every delta with its interval,
every recipe with its causal/oracle label. The README's results block is rendered from the same functions
(tools/render_docs.py), so the README and the notebooks cannot disagree either.

    >>> ci(1.07, 0.69, 1.47)
    '+1.07 % [+0.69, +1.47]'
    >>> kv_drift_findings(rows)            # rows of outputs/kv_drift/kv_drift.csv
    ['`e4m3-dyn` (causal) has the smallest change in 3 of 4 position buckets; ...', ...]

Every function takes rows or DataFrames already read (fp8lab.notebook.results_frame, kv_drift.read_csv,
the kernel JSONs) and returns strings; none reads a file or prints, so each is tested on synthetic rows.
"""
from __future__ import annotations

import math
import re
import statistics

__all__ = ["ci", "excludes_zero", "few_units_note", "recipe_label", "causal_label", "sweep_delta", "step_sentence",
           "cheapest_causal", "mc_reading", "granularity_note", "kv_causal_from", "kv_drift_findings", "kv_long_findings",
           "kv_sweep_findings", "kv_config_causality", "ratio_range", "expected_by_chance",
           "latest_kernels", "kernel_roofline_points", "quant_anchors_sentence",
           "accumulation_findings", "accumulation_bias_findings", "per_unit_factor", "fast_accum_findings",
           "nvfp4_kv_kernel_verdict", "prefill_fp8_verdict", "serving_claim_verdicts", "fp4_sass_verdict",
           "outlier_structure_findings", "scaling_findings", "taming_findings", "sqnr_findings",
           "control_findings", "rho_sentence", "rank_of", "sensitivity_findings", "frontier_findings"]


def ci(d: float, lo: float, hi: float, unit: str = "%", digits: int = 2) -> str:
    """ci(1.07, 0.69, 1.47) -> '+1.07 % [+0.69, +1.47]'; unit 'pp' for accuracy points."""
    return f"{d:+.{digits}f} {unit} [{lo:+.{digits}f}, {hi:+.{digits}f}]"


def excludes_zero(lo: float, hi: float) -> bool:
    return lo > 0 or hi < 0


def few_units_note(n: int, unit: str = "windows") -> str:
    """What a percentile-bootstrap bracket over n units (stats.paired_bootstrap_ci) is worth when n is small; '' for
    n >= 8. With 2 units every resample mixes the same two values, so the bracket is their range; with a few more it
    cannot reach beyond the values seen and covers less than its nominal 95 %.

        few_units_note(2) -> 'With 2 windows a bootstrap can only mix the two windows' values: ...'
    """
    if n >= 8:
        return ""
    if n <= 2:
        return (f"With {n} {unit} a bootstrap can only mix the two {unit}' values: each bracket is their range, not a "
                f"95 % interval, and an order read from these numbers is as noisy as two samples.")
    return (f"With {n} {unit} a percentile bootstrap cannot reach beyond the values of the {unit} it has: its brackets "
            f"cover less than their nominal 95 %; read them as the spread of {n} {unit}, and a verdict resting on "
            "them as provisional.")


def expected_by_chance(n_intervals: int, level: float = 0.95) -> float:
    """How many of n independent 95 % intervals exclude zero when nothing changed: n * 0.05."""
    return n_intervals * (1 - level)


def causal_label(causal) -> str:
    """'causal' / 'ORACLE' / 'causal?' from a recipe's flag or the CSV's causal column ('True'/'False')."""
    s = str(causal)
    return "causal" if s == "True" else "ORACLE" if s == "False" else "causality unknown"


def recipe_label(name: str) -> str:
    """'`e4m3-wa` (ORACLE)' from the recipe table: every recipe a page names says what it is."""
    from fp8lab.recipes import RECIPES

    r = RECIPES.get(name)
    return f"`{name}` ({causal_label(r.causal) if r else 'not a recipe of this lab'})"


# ---- the sweep ----------------------------------------------------------------------------------------------
def sweep_delta(df, recipe: str, task: str = "ppl", metric: str = "ppl"):
    """The row of one recipe x task x metric of a results frame as a dict, or None when it is not there."""
    t = df[(df.recipe == recipe) & (df.task == task) & (df.metric == metric)]
    if t.empty:
        return None
    return t.sort_values("n").iloc[-1].to_dict()


def _describe_row(r: dict) -> str:
    unit = r.get("delta_unit") or ("%" if str(r.get("task", "")).startswith("ppl") else "pp")
    s = ci(float(r["delta_pct"]), float(r["ci95_low"]), float(r["ci95_high"]), unit)
    changed = r.get("changed")
    if changed is not None and str(changed) not in ("", "nan", "<NA>"):
        s += f", {int(changed)} of {int(r['n'])} changed ({r.get('ci_method', '')})"
    return s


def step_sentence(label: str, c: dict | None, a: str = "", b: str = "") -> str:
    """One paired comparison (fp8lab.results.compare's dict) as a sentence with its verdict.

    step_sentence("+ KV cache", {"delta": 1.1, "ci95_low": .6, "ci95_high": 1.6, "unit": "%", "n": 12})
    -> '+ KV cache: +1.10 % [+0.60, +1.60] over 12 windows: resolved (the interval excludes zero).'"""
    who = f" ({recipe_label(a)} vs {recipe_label(b)})" if a and b else ""
    if c is None:
        return f"{label}{who}: not in this run."
    what = "windows" if c.get("unit", "%") == "%" else "questions"
    verdict = ("resolved (the interval excludes zero)" if excludes_zero(c["ci95_low"], c["ci95_high"])
               else "not resolved at this n (the interval includes zero)")
    return f"{label}{who}: {ci(c['delta'], c['ci95_low'], c['ci95_high'], c.get('unit', '%'))} over {c['n']} {what}: {verdict}."


def cheapest_causal(df, recipes, task: str = "ppl", metric: str = "ppl") -> str:
    """Which causal recipe of `recipes` costs least on `task`, and whether its cost is resolved."""
    rows = [sweep_delta(df, r, task, metric) for r in recipes if r != "baseline"]
    rows = [r for r in rows if r is not None and str(r.get("causal")) == "True"]
    if not rows:
        return "No causal recipe of this list is in the run."
    best = min(rows, key=lambda r: float(r["delta_pct"]))
    res = "a cost the windows resolve" if excludes_zero(float(best["ci95_low"]), float(best["ci95_high"])) \
        else "not distinguishable from the baseline at this n"
    what = "perplexity" if (task.startswith("ppl") and metric == "ppl") else f"{task} {metric}"
    return (f"The cheapest causal recipe on {what} is {recipe_label(best['recipe'])}: "
            f"{_describe_row(best)}, {res}.")


def mc_reading(df, task: str = "arc_easy") -> list[str]:
    """What a multiple-choice column can say at its n: intervals excluding zero against what chance gives,
    interval widths, how many questions changed, and which intervals are exact."""
    mc = df[(df.task == task) & (df.recipe != "baseline")]
    if mc.empty:
        return [f"{task}: not in this run."]
    n = int(mc.n.max())
    out = []
    excl = mc[(mc.ci95_low > 0) | (mc.ci95_high < 0)]
    names = ", ".join(f"{recipe_label(r.recipe)} {r.metric} {r.delta_pct:+.1f} pp" for r in excl.itertuples())
    out.append(f"{task}, n = {n} questions: {len(excl)} of {len(mc)} recipe × metric intervals exclude zero "
               f"({names or 'none'}); about {expected_by_chance(len(mc)):.1f} would by chance alone at 95 % if no "
               "recipe changed anything.")
    w = mc.ci95_high - mc.ci95_low
    out.append(f"The 95 % intervals are {w.min():.1f} to {w.max():.1f} points wide: a change smaller than that "
               "cannot be seen with this many questions.")
    if "changed" in mc and mc.changed.notna().any():
        acc = mc[mc.metric == "acc"]
        ch = ", ".join(f"`{r.recipe}` {int(r.changed)}" for r in acc.itertuples() if not _isna(r.changed))
        exact = mc[mc.get("ci_method", "").astype(str).str.startswith("exact")] if "ci_method" in mc else mc.iloc[:0]
        out.append(f"Questions that changed answer (acc): {ch}. {len(exact)} of {len(mc)} intervals are exact "
                   "(few questions changed), the rest paired bootstrap.")
    return out


#: seed 003, "FP8 quality, recipe by recipe": its wikitext perplexity change against its bf16 baseline, as printed
#: (%, Qwen2.5, 8,192 tokens, no intervals). The seed's numbers, quoted, not the lab's.
SEED003_PPL_DELTA = {"e4m3-w": 0.8, "e4m3-wa": 1.8, "e4m3-wakv": 6.0, "e5m2-w": 2.9,
                     "e4m3-w-noscale": 2.9, "e4m3-wa-noscale": 2.7}


def seed003_table(df):
    """Seed 003's printed perplexity deltas beside the lab's (results frame `df`: the ppl rows, delta with its 95 %
    interval) for the seed's recipes the run holds, each labelled causal or ORACLE, with both rankings (1 = least
    damage). A DataFrame indexed by recipe, every column aligned by recipe; empty where the run holds none of them."""
    import pandas as pd

    from fp8lab import recipes

    ours = df[(df.task == "ppl") & (df.metric == "ppl")].set_index("recipe")
    both = [r for r in SEED003_PPL_DELTA if r in ours.index]
    seed = pd.Series({r: SEED003_PPL_DELTA[r] for r in both}, dtype=float)
    return pd.DataFrame({
        "causal": pd.Series({r: causal_label(recipes.get_recipe(r).causal) for r in both}, dtype=object),
        "seed 003 (Qwen2.5, wikitext)": seed.map("{:+.1f}%".format),
        "fp8lab (SmolLM2 Q4_1, BoolQ)": pd.Series(
            {r: f"{ours.delta_pct[r]:+.2f}% [{ours.ci95_low[r]:+.2f}, {ours.ci95_high[r]:+.2f}]" for r in both},
            dtype=object),
        "our rank (1 = least damage)": ours.delta_pct[both].rank(method="min").astype(int),   # ties: the same rank
        "seed rank": seed.rank(method="min").astype(int),
    }, index=both)


def seed003_noscale_step(df) -> float | None:
    """What seed 003's table implies for adding unscaled activations to unscaled weights (its e4m3-wa-noscale minus
    its e4m3-w-noscale, points, no interval), where the run holds both recipes; else None."""
    have = set(df[(df.task == "ppl") & (df.metric == "ppl")].recipe)
    if not {"e4m3-wa-noscale", "e4m3-w-noscale"} <= have:
        return None
    return SEED003_PPL_DELTA["e4m3-wa-noscale"] - SEED003_PPL_DELTA["e4m3-w-noscale"]


def paired_steps_table(compared: dict, steps=None):
    """results.paired_steps' comparisons as a table, one row per step of `steps` (default results.PAIRED_STEPS) the
    run holds: what the step changes, both recipes (labelled causal / ORACLE), the perplexity change with its 95 %
    interval and the number of windows. An empty DataFrame where the run holds none."""
    import pandas as pd

    from fp8lab.results import PAIRED_STEPS

    rows = [{"step": what, "recipe": recipe_label(a), "vs": recipe_label(b),
             "ppl change (%)": f"{c['delta']:+.2f}", "95% CI": f"[{c['ci95_low']:+.2f}, {c['ci95_high']:+.2f}]",
             "n windows": c["n"]}
            for a, b, what in (PAIRED_STEPS if steps is None else steps) if (c := compared.get((a, b)))]
    return pd.DataFrame(rows).set_index("step") if rows else pd.DataFrame()


#: the steps notebook 02's reading sentences walk through: (label, (recipe, compared with))
READING_CHAIN = (("+ E4M3 Linear inputs, per-token (causal)", ("e4m3-wa-tok", "e4m3-w")),
                 ("+ E4M3 KV cache, per-token (causal)", ("e4m3-wakv-tok", "e4m3-wa-tok")),
                 ("E5M2 instead of E4M3 weights", ("e5m2-w", "e4m3-w")),
                 ("dropping the weight scale", ("e4m3-w-noscale", "e4m3-w")),
                 ("dropping the weight and input scales", ("e4m3-wa-noscale", "e4m3-wa-tok")),
                 ("the oracle's per-tensor inputs instead of per-token", ("e4m3-wa", "e4m3-wa-tok")))


#: the step seed 003's table implies without an interval (seed003_noscale_step): (recipe, compared with)
NOSCALE_STEP = ("e4m3-wa-noscale", "e4m3-w-noscale")


def sweep_reading_lines(df, compared: dict, seed_step: float | None, recipes, noscale: dict | None = None) -> list[str]:
    """Notebook 02's reading of a sweep, one sentence per line: the cheapest causal recipe of `recipes`, each step
    of READING_CHAIN with its interval and verdict (from `compared`: results.paired_steps' {(a, b): compare's dict}),
    and, where seed 003's table implies a step without an interval (`seed_step`, seed003_noscale_step), that step as
    measured here (`noscale`: results.compare over NOSCALE_STEP) beside the seed's number."""
    lines = [cheapest_causal(df, recipes)]
    lines += [step_sentence(label, compared.get(ab), *ab) for label, ab in READING_CHAIN]
    if seed_step is not None:
        lines.append(step_sentence("adding unscaled activations to unscaled weights", noscale, *NOSCALE_STEP)
                     + f" The seed printed {seed_step:+.1f} points for the same step, without an interval: whether "
                       "that was a gain or noise cannot be told.")
    return lines


def ppl_width_line(df) -> str:
    """How wide the perplexity intervals of a sweep are (against the baseline, % of its perplexity) at its n."""
    pp = df[(df.task == "ppl") & (df.metric == "ppl") & (df.recipe != "baseline")]
    if pp.empty:
        return "Perplexity: not in this run."
    w = pp.ci95_high - pp.ci95_low
    return (f"Perplexity, n = {int(pp.n.max())} windows: interval widths {w.min():.2f} to {w.max():.2f} % (of a "
            f"{pp.baseline.iloc[0]:.2f} baseline)")


def _isna(v) -> bool:
    try:
        return v is None or (isinstance(v, float) and math.isnan(v)) or str(v) in ("<NA>", "nan", "")
    except TypeError:
        return False


def granularity_note(main, more) -> str:
    """01's INT8-vs-E4M3 sentence: which granularities the committed weight rows compare, from the recipes."""
    from fp8lab.recipes import get_recipe

    def spec(name):
        w = get_recipe(name).weight
        return f"{w.fmt.upper()} with one scale per {'output channel' if w.granularity == 'channel' else w.granularity}"

    parts = []
    for df, name in ((more, "int8-w"), (main, "e4m3-w")):
        r = sweep_delta(df, name) if df is not None else None
        if r is not None:
            parts.append(f"{recipe_label(name)}, {spec(name)}: perplexity {_describe_row(r)}")
    if len(parts) < 2:
        return ("The committed sweep does not hold both the INT8 and the E4M3 weight rows (not recorded yet): "
                "nothing to compare here.")
    return ("On the lab's model (its weights are 4-bit GGUF, dequantized: the baseline is already a quantized model) "
            "the committed rows compare **different granularities**: " + "; ".join(parts) + ". That is a "
            "comparison of granularities as much as of grids: it does not show a floating grid losing to INT8 at "
            "the same granularity. The weight-level cell below makes the same-granularity comparison on the model.")


# ---- the KV cache ---------------------------------------------------------------------------------------------
#: how each kv_drift configuration stands (every one is causal from position N on; see fp8lab.kv_drift)
def kv_config_causality(config: str) -> str:
    """'causal: fixed scale 1.0' etc. for a kv_drift configuration (every one is causal from position N on)."""
    if config == "baseline":
        return "the model's own cache"
    if config.startswith("e4m3-cal"):
        n = kv_causal_from(config)
        return f"causal after position {n}: scales fitted on the first {n} tokens, then frozen"
    if config.endswith("-uncal"):
        return "causal: fixed scale 1.0"
    if config.endswith("-dyn"):
        return "causal: a scale per token and head, from that token alone"
    return "causality not stated"


def kv_causal_from(config: str) -> int:
    """The first position bucket start (`pos_lo`) at which a kv_drift configuration is causal: N for one calibrated
    on the first N tokens (a bucket starting before N is rounded with scales that saw later tokens), else 0."""
    if config.startswith("e4m3-cal"):
        return int(config[len("e4m3-cal"):].split("-")[0])
    return 0


def _bucket(r) -> str:
    return f"{r['pos_lo']}–{r['pos_hi']}"


def _below(r: dict, s: dict) -> bool:
    """Whether row r's 95 % interval lies entirely below row s's (the two do not overlap, r the lower)."""
    return r["ci95_high"] < s["ci95_low"]


def kv_drift_findings(rows: list[dict], collapse_pct: float = 10.0) -> list[str]:
    """What a kv_drift.csv shows, bucket by bucket: which configuration loses least, which drift, which
    collapse, how the calibrated cache compares with scale 1.0 and E5M2 with E4M3."""
    cfgs = [c for c in dict.fromkeys(r["config"] for r in rows) if c != "baseline"]
    buckets = list(dict.fromkeys((r["pos_lo"], r["pos_hi"]) for r in rows))
    at = {(r["config"], (r["pos_lo"], r["pos_hi"])): r for r in rows}
    out = []
    winners, apart = {}, {}
    for b in buckets:                               # ranked among the configurations causal in the bucket only
        ranked = sorted((c for c in cfgs if (c, b) in at and b[0] >= kv_causal_from(c)),
                        key=lambda c: at[(c, b)]["delta_pct"])
        if not ranked:
            continue
        winners.setdefault(ranked[0], []).append(b)
        if len(ranked) > 1:
            apart[b] = _below(at[(ranked[0], b)], at[(ranked[1], b)])
    for c, bs in sorted(winners.items(), key=lambda kv: -len(kv[1])):
        sep = sum(apart.get(b, False) for b in bs)
        out.append(f"`{c}` ({kv_config_causality(c)}) has the smallest change among the configurations causal there in "
                   f"{len(bs)} of {len(buckets)} position buckets ({', '.join(f'{lo}–{hi}' for lo, hi in bs)}); its interval "
                   f"lies entirely below the runner-up's in {sep} of them" + (" (the others: a ranking of point estimates "
                   "that this many windows cannot resolve)." if sep < len(bs) else "."))
    for c in cfgs:
        rs = [at[(c, b)] for b in buckets if (c, b) in at]
        if len(rs) < 2:
            continue
        first, last = rs[0], rs[-1]
        peak = max(rs, key=lambda r: r["delta_pct"])
        if peak["delta_pct"] > collapse_pct:
            out.append(f"`{c}` collapses: up to {ci(peak['delta_pct'], peak['ci95_low'], peak['ci95_high'])} at "
                       f"positions {_bucket(peak)} (first bucket {ci(first['delta_pct'], first['ci95_low'], first['ci95_high'])}).")
            continue
        ds = [r["delta_pct"] for r in rs]
        steps = "rises in every bucket" if all(b > a for a, b in zip(ds, ds[1:])) else \
            "falls in every bucket" if all(b < a for a, b in zip(ds, ds[1:])) else "is not monotone"
        above = _below(first, last)
        n_excl = sum(excludes_zero(r["ci95_low"], r["ci95_high"]) for r in rs)
        n0 = kv_causal_from(c)
        oracle = [r for r in rs if r["pos_lo"] < n0]
        out.append(f"`{c}`: {' → '.join(f'{d:+.2f}' for d in ds)} % over the buckets: it {steps}; the last bucket's "
                   f"interval lies {'entirely above' if above else 'not entirely above'} the first's; its interval "
                   f"excludes zero in {n_excl} of {len(rs)} buckets" + (
                       f" (the first {len(oracle)} {'bucket starts' if len(oracle) == 1 else 'buckets start'} before "
                       f"position {n0}: there some tokens are rounded with scales fitted on later ones, an oracle)."
                       if oracle else "."))
    for a, b, what in (("e4m3-cal256", "e4m3-uncal", "the 256-token calibrated cache vs scale 1.0"),
                       ("e5m2-uncal", "e4m3-uncal", "E5M2 vs E4M3, both at scale 1.0")):
        if a in cfgs and b in cfgs:                 # in the buckets where both are causal
            both = [bk for bk in buckets if (a, bk) in at and (b, bk) in at
                    and bk[0] >= max(kv_causal_from(a), kv_causal_from(b))]
            lower = [bk for bk in both if at[(a, bk)]["delta_pct"] < at[(b, bk)]["delta_pct"]]
            clear = [bk for bk in both if _below(at[(a, bk)], at[(b, bk)])]
            worse = [bk for bk in both if _below(at[(b, bk)], at[(a, bk)])]
            out.append(f"{what}: `{a}` is lower in {len(lower)} of the {len(both)} buckets where both are causal; its "
                       f"interval lies entirely below `{b}`'s in {len(clear)} and entirely above in {len(worse)}.")
    n_int = sum(1 for c in cfgs for b in buckets if (c, b) in at)
    out.append(f"{n_int} intervals in the table: about {expected_by_chance(n_int):.1f} would exclude zero by chance "
               f"alone; n = {rows[0]['n']} windows per interval.")
    return out


def kv_long_findings(rows: list[dict], short_hi: int = 2048) -> list[str]:
    """The long-context run: each configuration's bucket deltas before and after `short_hi` tokens, and whether
    the two static caches (scale 1.0, calibrated on 256 tokens) can be told apart."""
    cfgs = [c for c in dict.fromkeys(r["config"] for r in rows) if c != "baseline"]
    out = []
    rng = lambda xs: f"{min(r['delta_pct'] for r in xs):+.2f} to {max(r['delta_pct'] for r in xs):+.2f} %"
    span = lambda xs: f"[{min(r['ci95_low'] for r in xs):+.2f}, {max(r['ci95_high'] for r in xs):+.2f}]"
    for c in cfgs:
        rs = [r for r in rows if r["config"] == c]
        early = [r for r in rs if r["pos_hi"] <= short_hi]
        late = [r for r in rs if r["pos_lo"] >= short_hi]
        if late and early:
            above = min(r["ci95_low"] for r in late) > max(r["ci95_high"] for r in early)
            out.append(f"`{c}`: {rng(early)} up to position {short_hi} (intervals within {span(early)}), {rng(late)} "
                       f"beyond (within {span(late)}): "
                       + ("every later interval lies entirely above every earlier one." if above else "the later "
                          f"intervals do not all lie above the earlier ones, so {rows[0]['n']} windows do not show a "
                          f"rise past position {short_hi}."))
        elif late:
            out.append(f"`{c}`: {rng(late)} beyond position {short_hi} (intervals within {span(late)}).")
    if {"e4m3-uncal", "e4m3-cal256"} <= set(cfgs):
        at = {(r["config"], (r["pos_lo"], r["pos_hi"])): r for r in rows}
        bs = [(r["pos_lo"], r["pos_hi"]) for r in rows
              if r["config"] == "e4m3-uncal" and r["pos_lo"] >= kv_causal_from("e4m3-cal256")]
        pairs = [(at[("e4m3-cal256", b)], at[("e4m3-uncal", b)]) for b in bs if ("e4m3-cal256", b) in at]
        overlap = sum(1 for c, u in pairs if not (_below(c, u) or _below(u, c)))
        out.append(f"The two static caches (scale 1.0 and calibrated on 256 tokens) have overlapping intervals in "
                   f"{overlap} of the {len(bs)} buckets where the calibrated one is causal: in those, this many windows "
                   "cannot tell calibration from scale 1.0.")
    out.append(f"n = {rows[0]['n']} windows: with so few, the bootstrap interval is optimistic (it cannot show "
               "the tails of the window-to-window spread).")
    return out


def kv_sweep_findings(df, e5_vs_e4: dict | None = None) -> list[str]:
    """The KV recipes of a sweep (perplexity): each with its causal/oracle label and interval, the cheapest
    causal one, and E5M2 against E4M3 -- paired when `e5_vs_e4` (fp8lab.results.compare's dict for the two rows
    named) is given; a ratio of two costs only where the cheaper one's interval excludes zero."""
    kv = df[(df.task == "ppl") & (df.metric == "ppl") & df.recipe.str.contains("kv")]
    if kv.empty:
        return ["No KV recipe in this run."]
    out = [cheapest_causal(df, list(kv.recipe))]
    e4, e5 = sweep_delta(df, "e4m3-kv-tok") or sweep_delta(df, "e4m3-kv"), sweep_delta(df, "e5m2-kv-tok") or sweep_delta(df, "e5m2-kv")
    if e4 is not None and e5 is not None:
        s = (f"E5M2 against E4M3 with the same scales: {recipe_label(e5['recipe'])} {_describe_row(e5)} vs "
             f"{recipe_label(e4['recipe'])} {_describe_row(e4)}")
        if e5_vs_e4 is not None:
            out.append(f"{s}; {step_sentence('paired, E5M2 against E4M3', e5_vs_e4)}")
        else:
            out.append(s + (f" ({e5['delta_pct'] / e4['delta_pct']:.1f}× the cost)." if float(e4["ci95_low"]) > 0 else "."))
    oracles = [r for r in kv.itertuples() if str(r.causal) == "False"]
    if oracles:
        out.append("Oracle rows (" + ", ".join(f"`{r.recipe}`" for r in oracles) + ") take the scale over the whole "
                   "window, future tokens included: not a cache a server can run, and not a bound on one either "
                   "(one scale per window is coarser than one per token).")
    return out


# ---- kernels ------------------------------------------------------------------------------------------------
def ratio_range(values, digits: int = 1) -> str:
    """'2.8–3.9' from a list of ratios (`digits` decimals, default one); '2.8' when they agree; '-' when empty."""
    vs = [v for v in values if v is not None and v == v]
    if not vs:
        return "-"
    lo, hi = f"{min(vs):.{digits}f}", f"{max(vs):.{digits}f}"
    return lo if lo == hi else f"{lo}–{hi}"


def quant_anchors_sentence(rows: list[dict]) -> str:
    """Notebook 06's reading of the quantization run against its two anchors (torch eager and torch.compile, both
    timed in the same run): the FP8 1x128 group quantizer (bf16 and fp32 input), the best NVFP4 quantizer with a
    given global amax, and the rows above copy bandwidth. Rows of fp8lab.kernels.report's Summary.table (with their
    `speedup_vs_compile`); a missing kernel or anchor is said, not rendered as nan."""
    find = {r.get("kernel"): r for r in rows}
    g16, g32, c16 = (find.get(k) or {} for k in ("fp8 group128 hw bf16", "fp8 group128 hw f32",
                                                 "torch.compile group128 bf16"))
    f = lambda r, k, spec: "not recorded" if r.get(k) is None else format(r[k], spec)  # noqa: E731
    if not g16:
        return "This run has no FP8 1×128 group quantizer row (`fp8 group128 hw bf16`)."
    s = (f"**Against both anchors.** The FP8 1×128 group quantizer (bf16 input, hardware conversion) reaches "
         f"{f(g16, 'fraction_of_copy_bw', '.2f')} of copy bandwidth: {f(g16, 'speedup', '.1f')}× torch eager")
    if c16 and g16.get("speedup_vs_compile") is not None:
        s += (f", but only {g16['speedup_vs_compile']:.2f}× torch.compile, which itself reaches "
              f"{f(c16, 'fraction_of_copy_bw', '.2f')} of copy bandwidth. Against eager torch any fused kernel looks "
              "spectacular; the honest comparison for a hand-written kernel is the compiler's.")
    else:
        s += ("; this run timed no torch.compile anchor (a live run skips it), so the comparison that matters for a "
              "hand-written kernel, the compiler's, is not available here.")
    if g32:
        s += f" With fp32 input the same kernel reaches {f(g32, 'fraction_of_copy_bw', '.2f')}"
        v = g32.get("speedup_vs_compile")
        s += ("." if v is None else f", {v:.2f}× torch.compile" + (" (the compiler's kernel is the faster one there)."
                                                                     if v < 1 else "."))
    n4 = [r for r in rows if str(r.get("kernel", "")).startswith("nvfp4") and "given amax" in r["kernel"]
          and r.get("fraction_of_copy_bw") is not None]
    if n4:
        b = max(n4, key=lambda r: r["fraction_of_copy_bw"])
        s += f" The best NVFP4 quantizer reaches {b['fraction_of_copy_bw']:.2f} ({b['kernel']})"
        s += (f", {b['speedup_vs_compile']:.1f}× torch.compile." if b.get("speedup_vs_compile") is not None else ".")
    above = [r["kernel"] for r in rows if (r.get("fraction_of_copy_bw") or 0) > 1.0]
    if above:
        s += (f" {len(above)} row(s) exceed 1.0 of copy bandwidth ({', '.join(above)}): a copy reads *and* writes "
              "every byte, while a quantizer writes fewer bytes than it reads, and reads stream slightly faster than "
              "the read-write mix of a copy.")
    return s


def gap_sentence(data: dict, kernel: str | None = None) -> str:
    """What a prefill gap run (fp8lab.kernels.gemm_report.leave_one_out) says, in one paragraph rendered from its
    numbers: the promotion's share of the kernel's time at the shapes where it was left out, the kernel's and the
    promotion-free variant's ratios to _scaled_mm blockwise; what a second copy of the promotion adds against what
    leaving it out saves (>= 0.7 of it at every shape: a cost that grows with the FFMAs; <= 0.4: a fixed wait per
    k-block); the run's noise where it holds one (the same machine code loaded two ways: |as_compiled share|) and
    whether the promotion's share stands above it; the time staggering the consumers saved (under the noise, or 2 %,
    everywhere: nothing; a slowdown is said as one); and what rewriting the promotion FFMAs' control bits saved (_edit_sentence)."""
    from fp8lab.kernels.gemm_report import gap_kernel, leave_one_out

    kernel = kernel or gap_kernel(data)
    rows = [r for r in leave_one_out(data, kernel) if "no_promote share" in r]
    if not kernel or not rows:
        return "This gap run holds no timing of a kernel with its promotion left out."
    share, x_k, x_np = ([r[c] for r in rows if c in r] for c in ("no_promote share", "k x blk", "k-no_promote x blk"))
    dev = (data.get("provenance") or {}).get("device") or "recorded GPU"
    n = len(rows)
    text = (f"On the {dev}, at {n} shape{'s' if n != 1 else ''}, the promotion takes "
            f"{ratio_range([100 * s for s in share], 0)} % of `{kernel}`'s time")
    if x_k and x_np:
        text += (f": it runs {ratio_range(x_k, 2)}x `_scaled_mm` blockwise, and with the promotion left out "
                 f"{ratio_range(x_np, 2)}x")
    text += "."
    # the run's own noise where it measured one: the same machine code loaded two ways (k+as_compiled against k)
    same = [abs(r["as_compiled share"]) for r in rows if "as_compiled share" in r]
    noise = max(same) if same else None
    if noise is not None:
        text += (f" In this run the same machine code, loaded two ways, differed by up to {100 * noise:.0f} %: "
                 + ("the promotion's share is beyond that at every shape." if min(share) > noise else
                    "a share within that is not separated from the noise."))
    thr = max(0.02, noise or 0.0)
    # a second copy of the promotion: does its cost grow with the FFMAs, or is it a fixed wait per k-block?
    twice = [(-r["promote_twice share"], r["no_promote share"]) for r in rows if "promote_twice share" in r]
    ratio = [a / b for a, b in twice if b >= 0.02]  # a promotion that costs under 2 % gives no ratio worth reading
    if ratio:
        text += (f" Doing the promotion twice added {ratio_range([100 * a for a, _ in twice], 0)} % to the kernel's "
                 f"time, {ratio_range(ratio, 1)} times what leaving it out saved: ")
        text += ("its cost grows with the FFMAs themselves (they take issue slots and register-file bandwidth from the "
                 "MMAs), not a fixed wait per k-block." if min(ratio) >= 0.7 else
                 "most of its cost is a fixed wait per k-block, not the FFMA work." if max(ratio) <= 0.4 else
                 "its cost is partly the FFMA work and partly a fixed wait per k-block.")
    # the time a stagger saved at each shape (its share: 1 - t_staggered / t_k), against the promotion's share there
    saved = [(r[f"sg{i} share"], r["no_promote share"], r["shape"]) for r in rows for i in (1, 2)
             if f"sg{i} share" in r]
    if saved:
        best = max(saved, key=lambda x: x[0])
        worst = min(x[0] for x in saved)
        span = (f"{100 * worst:.0f} %" if f"{worst:.2f}" == f"{best[0]:.2f}"
                else f"between {100 * worst:.0f} % and {100 * best[0]:.0f} %")
        text += f" Staggering the two consumers saved {span} of the kernel's time"
        if best[0] < thr and worst > -thr:
            text += (": nothing beyond the noise, so the cost is not the two consumers promoting at the same "
                     "moments.")
        elif best[0] < thr:
            text += ": it won nothing anywhere and lost time at some shapes, so it is no way to hide the promotion."
        else:
            text += (f", at best {100 * best[0]:.0f} % at {best[2]}, where the promotion costs {100 * best[1]:.0f} %: "
                     "at most a part of the promotion's cost is the two consumers promoting at the same moments.")
    text += _edit_sentence(rows)
    return text


def _pct_range(shares) -> str:
    """Shares as whole percents: '2–7', '3' where they agree, '-3 to 5' where the low end is negative (a dash would
    read as a minus sign); a share that rounds to zero is '0', never '-0'."""
    lo, hi = round(100 * min(shares)), round(100 * max(shares))
    return f"{lo}" if lo == hi else f"{lo} to {hi}" if lo < 0 else f"{lo}–{hi}"


#: the packed GEMVs' formats (gemm_report's "fp8c" / "nvfp4" rows) as the sentences name them
_GEMV_FORMAT_NAMES = {"fp8c": "FP8 (per-channel)", "fp8b": "FP8 (128x128 blocks)", "nvfp4": "NVFP4"}


def inflight_sentence(summary: list[dict], defaults: dict, device: str | None = None) -> str:
    """What an in-flight run says (summary: fp8lab.kernels.gemm_report.inflight_summary; defaults: {format: the
    default config's (C, P)}, gemm_report.inflight_defaults), rendered from its numbers, per format: the configs holding
    more bytes in flight per warp than the default, as the range of their median ratios to the default (like for like:
    the split the default ran best with) and the best single case; then the default config in one-warp CTAs."""
    names = _GEMV_FORMAT_NAMES
    if not summary:
        return "This run holds no timing of version 3 at other pipeline depths."
    parts = []
    for fmt in sorted({s["format"] for s in summary}):
        cp = defaults.get(fmt)
        d = cp[0] * cp[1] if cp else None
        deeper = [s for s in summary if s["format"] == fmt and d is not None and s["KiB_per_warp"] > d]
        text = f"{names.get(fmt, fmt)}: "
        if deeper:
            kibs = sorted({s["KiB_per_warp"] for s in deeper})
            text += (f"{' or '.join(str(k) for k in kibs)} KiB of weights in flight per warp (the default holds {d}) ran "
                     f"{ratio_range([s['x_default_median'] for s in deeper], 2)}x the default's speed in the median "
                     f"over the cases, {ratio_range([s['x_default_max'] for s in deeper], 2)}x at best")
        else:
            text += "no deeper pipeline was timed"
        one = [s for s in summary if s["format"] == fmt and s["WPC"] == 1 and cp and (s["C"], s["P"]) == tuple(cp)]
        if one:
            text += (f"; the default's pipeline in CTAs of one warp (whole row groups spread evenly over the SMs) "
                     f"{ratio_range([s['x_default_median'] for s in one], 2)}x in the median, "
                     f"{ratio_range([s['x_default_min'] for s in one] + [s['x_default_max'] for s in one], 2)}x "
                     f"over the cases")
        parts.append(text)
    return (f"On the {device or 'recorded GPU'}, against version 3's default config timed in the same rounds: "
            + "; ".join(parts) + ".")


def _format_ranges(rows: list[dict], key: str) -> list[tuple[str, str]]:
    """(format's name, ratio_range of rows[key] to 2 decimals) per GEMV format in rows, in format order."""
    return [(_GEMV_FORMAT_NAMES.get(f, f), ratio_range([r[key] for r in rows if r["format"] == f], 2))
            for f in sorted({r["format"] for r in rows})]


def stagger_sentence(rows: list[dict], device: str | None = None) -> str:
    """What a stagger run says (rows: fp8lab.kernels.gemm_report.stagger_table), rendered from its numbers: per format,
    the range of t(default) / t(staggered start) over its shapes, M and grids, and the reading (lockstep helps,
    staggering helps, or it depends)."""
    if not rows:
        return "This run holds no timing of version 3 with staggered starts."
    parts = [f"{name} {rng}x the default's speed" for name, rng in _format_ranges(rows, "stagger_vs_default")]
    allv = [r["stagger_vs_default"] for r in rows]
    n = len({(r["N"], r["K"]) for r in rows})
    text = (f"On the {device or 'recorded GPU'}, at {n} shape{'s' if n != 1 else ''} with whole row groups per warp, "
            f"starting each warp at a different unit of its group ran " + "; ".join(parts) + ". ")
    if max(allv) < 1:
        text += ("Slower at every point: warps walking k in step with each other is not what slows the ramp; it helps, "
                 "so the shipped order stays.")
    elif min(allv) > 1:
        text += "Faster at every point: warps in step contend at the start, and a staggered order is worth shipping."
    else:
        text += "Faster at some points and slower at others: the start order is not the lever by itself."
    return text


def fixed_cost_sentence(fit: list[dict], device: str | None = None) -> str:
    """What gemm_report.fixed_cost_fit says at M = 1 (its rows), rendered from its numbers: FP8 version 3's fixed cost
    against `_scaled_mm` tensorwise's, its streaming rate as a share of that one's, and where the gap is (the fixed
    cost, the rate, or both). '' where either kernel is missing from the fit."""
    by = {r["kernel"]: r for r in fit}
    ours, anchor = by.get("fp8 channel v3"), by.get("scaled_mm_tensorwise")
    if not (ours and anchor and ours["rate_TBps"] and anchor["rate_TBps"]):
        return ""
    slower_start, slower_rate = ours["fixed_us"] > anchor["fixed_us"], ours["rate_TBps"] < anchor["rate_TBps"]
    verdict = ("both gaps count." if slower_start and slower_rate
               else "the gap is in " + ("the fixed cost." if slower_start else "the rate."))
    return (f"On the {device or 'recorded GPU'}, at M = 1, FP8 version 3 pays {ours['fixed_us'] - anchor['fixed_us']:+.1f} "
            f"µs of fixed cost against `_scaled_mm` tensorwise and streams at {ours['rate_TBps'] / anchor['rate_TBps']:.2f} "
            f"of its rate: {verdict}")


def stagger_nox_sentence(rows: list[dict], device: str | None = None) -> str:
    """What a stagger run with the activation loads cut says (rows: gemm_report.stagger_table(data, no_x=True)):
    whether the staggered start still costs time when no warp reads activations, rendered from its ratios."""
    if not rows:
        return "This run holds no timing of the staggered start without activation loads."
    parts = [f"{name} {rng}x" for name, rng in _format_ranges(rows, "stagger_vs_default")]
    allv = [r["stagger_vs_default"] for r in rows]
    text = (f"On the {device or 'recorded GPU'}, with both copies' activation loads cut (weights only), the staggered "
            f"start ran " + "; ".join(parts) + " the in-step default's speed. ")
    if max(allv) < 1:
        text += ("It loses with no activation loads at all, so on this GPU at least part of the advantage of walking k "
                 "in step lies in how the weight requests reach memory, not in warps sharing activations in L1.")
    elif min(allv) >= 1:
        text += "Without activations the stagger costs nothing: the in-step advantage was the shared activations."
    else:
        text += "Mixed: part of the in-step advantage is the shared activations, part is not."
    return text


def segments_sentence(best: list[dict], device: str | None = None) -> str:
    """What a segments run says (best: gemm_report.segments_best), rendered from its numbers: per format and M, how
    many shapes some segment split beat the default's stream-K by 2 % or more, and the range of the best ratios."""
    names = _GEMV_FORMAT_NAMES
    if not best:
        return "This run holds no timing of a split in whole segments."
    parts = []
    for f, M in sorted({(b["format"], b["M"]) for b in best}):
        bs = [b for b in best if (b["format"], b["M"]) == (f, M)]
        wins = [b for b in bs if b["best_x_default"] >= 1.02]
        parts.append(f"{names.get(f, f)} M = {M}: the best split ran {ratio_range([b['best_x_default'] for b in bs], 2)}x "
                     f"the default, at least 2 % faster at {len(wins)} of {len(bs)} shape{'s' if len(bs) != 1 else ''}")
    allw = [b for b in best if b["best_x_default"] >= 1.02]
    text = (f"On the {device or 'recorded GPU'}, against version 3's stream-K default timed in the same rounds: "
            + "; ".join(parts) + ". ")
    if not allw:
        text += "No segment split pays here: stream-K stays the default."
    elif len(allw) == len(best):
        text += "Some segment split pays at every shape timed; which S does is listed above."
    else:
        text += ("A segment split pays at some shapes and not at others, and the S that wins changes with the shape: "
                 "a per-shape table could pick it, one rule cannot; the default stays stream-K.")
    return text


def decode_gap_sentence(rows: list[dict], device: str | None = None) -> str:
    """What a decode gap run says (rows: fp8lab.kernels.gemm_report.decode_gap), rendered from its numbers: per format
    and M, the share of version 3's time that cutting ALL its arithmetic saved ('loads_only') and the ratios to
    `_scaled_mm` tensorwise of the shipped kernel and of its loads alone; then the reading per format: under 10 %
    everywhere, the loads (not the arithmetic) set the time; 25 % or more everywhere, the arithmetic is the lever;
    else both count (where it costs most is named); what not loading the activations saved ('no_x_loads'); and what
    an empty launch of the same grid takes ('empty', in µs and as a share of the kernel's time).
    A cut copy slower than the full kernel (share below -2 %) is said as such: ptxas schedules the cut code differently,
    so a share near zero reads 'not the limit', not an exact cost."""
    names = _GEMV_FORMAT_NAMES
    lo = [r for r in rows if r["variant"] == "loads_only" and r.get("saves") is not None]
    if not lo:
        return "This run holds no timing of version 3 with its arithmetic cut away."
    parts, shares = [], []
    for fmt in sorted({r["format"] for r in lo}):
        for M in sorted({r["M"] for r in lo if r["format"] == fmt}):
            sel = [r for r in lo if r["format"] == fmt and r["M"] == M]
            full = [r for r in rows if r["format"] == fmt and r["M"] == M and r["variant"] == "full"]
            sv = [r["saves"] for r in sel]
            shares += sv
            parts.append(f"{names.get(fmt, fmt)} at M = {M}: {_pct_range(sv)} % "
                         f"(the kernel {ratio_range([r['x_scaled_mm'] for r in full], 2)}x `_scaled_mm` tensorwise, "
                         f"its loads alone {ratio_range([r['x_scaled_mm'] for r in sel], 2)}x)")
    n = len({(r["N"], r["K"]) for r in lo})
    text = (f"On the {device or 'recorded GPU'}, at {n} shape{'s' if n != 1 else ''}, cutting all of version 3's "
            f"arithmetic (no widening, no scale, no MMA; the same loads) saved " + "; ".join(parts) + ".")
    for fmt in sorted({r["format"] for r in lo}):
        sv = [r["saves"] for r in lo if r["format"] == fmt]
        text += f" {names.get(fmt, fmt)}: "
        if max(sv) < 0.10:
            text += ("the arithmetic is not what holds it back on this GPU; even a kernel that did none would gain at "
                     "most that much with these loads, so how the bytes are fetched (how many are in flight, the split "
                     "over warps, the tail) is the lever, not a cheaper widening.")
        elif min(sv) >= 0.25:
            text += "the arithmetic costs a large share everywhere: fewer instructions per weight byte is the lever."
        else:
            worst = max((r for r in lo if r["format"] == fmt), key=lambda r: r["saves"])
            text += (f"the arithmetic costs part of the time (most at M = {worst['M']}, {100 * worst['saves']:.0f} % at "
                     f"{worst['N']}x{worst['K']}) and the loads the rest.")
    nx = [r for r in rows if r["variant"] == "no_x_loads" and r.get("saves") is not None]
    if nx:
        text += " Not loading the activations at all (the arithmetic kept) saved " + "; ".join(
            f"{names.get(f, f)} at M = {M}: {_pct_range([r['saves'] for r in nx if (r['format'], r['M']) == (f, M)])} %"
            for f, M in sorted({(r["format"], r["M"]) for r in nx})) + "."
    em = [r for r in rows if r["variant"] == "empty" and r.get("saves") is not None]
    if em:
        text += (f" The same grid launched with nothing to do (every warp returns at once) took "
                 f"{ratio_range([r['time_us'] for r in em], 1)} µs, {_pct_range([1 - r['saves'] for r in em])} % of the "
                 f"kernel's time: the launch's share of what a call costs.")
    neg = [v for v in shares if v < -0.02]
    if neg:
        text += (f" At {len(neg)} of these points the cut copy ran slower than the full kernel (by up to "
                 f"{-100 * min(neg):.0f} %): cutting code changes how ptxas schedules the loads, so a share near zero "
                 f"reads 'not the limit', not an exact cost.")
    return text


def decode_timeline_sentence(rows: list[dict], device: str | None = None) -> str:
    """What a decode timeline run says (rows: fp8lab.kernels.gemm_report.decode_timeline), rendered from its numbers:
    what the clock reads cost, how close together the warps started, how long the first unit took to arrive, how far
    apart the warps' streaming times were (the widest point named), the share of warp-time spent ended within a call
    (the tail) and how long the end took; then the reading: equal bytes per warp are not equal time."""
    if not rows:
        return "This run holds no stamped call of version 3."
    n = len({(r["N"], r["K"]) for r in rows})
    cost = [r["stamps_cost"] for r in rows if r.get("stamps_cost") is not None]
    names = _GEMV_FORMAT_NAMES
    widest = max(rows, key=lambda r: r["stream_max_us"] / max(r["stream_min_us"], 1e-9))
    noise = ("; below zero: the stamped copy ran the faster, within the rounds' noise"
             if cost and round(100 * min(cost)) < 0 else "")
    text = (f"On the {device or 'recorded GPU'}, one call of version 3 read warp by warp at {n} shape"
            f"{'s' if n != 1 else ''} (M = {', '.join(str(m) for m in sorted({r['M'] for r in rows}))}; the four clock "
            f"reads per warp cost {_pct_range(cost) if cost else '-'} % of a call{noise}): every warp started within "
            f"{max(r['last_start_us'] for r in rows):.1f} µs of the first. A warp's first unit was multiplied "
            f"{ratio_range([r['first_unit_us'] for r in rows], 1)} µs after it started (median over the warps): every "
            f"warp asks for its first units at once, and the memory serves that queue before any warp computes. Then the "
            f"warps streamed their equal shares of the bytes for very different times: at "
            f"{names.get(widest['format'], widest['format'])}, M = "
            f"{widest['M']}, {widest['N']}x{widest['K']} between {widest['stream_min_us']:.1f} and "
            f"{widest['stream_max_us']:.1f} µs. So they did not end together: within a call, "
            f"{_pct_range([r['idle_share'] for r in rows])} % of the warps' time was spent after they had ended, while "
            f"the slowest ones finished the call (the tail in the figure), and a call lasted "
            f"{ratio_range([r['span_us'] / r['mean_end_us'] for r in rows], 2)}x its warps' mean end. The end itself "
            f"(the store, or the stream-K fix-up) took {ratio_range([r['finish_us'] for r in rows], 1)} µs (median).")
    bs = [r["between_sm_share"] for r in rows if r.get("between_sm_share") is not None]
    if bs:
        text += (f" The SM a warp ran on accounted for {_pct_range(bs)} % of the spread of the streaming times "
                 + ("(mostly the warps' SMs: a split weighted per SM could even it out)." if min(bs) >= 0.5 else
                    "(mostly not the SM: the slow warps are spread over the SMs, and only work handed out as the warps "
                    "run could even it out)." if max(bs) < 0.5 else "(at some points mostly, at others not)."))
        kinds = {w: [r for r in rows if r.get("whole_groups") is w and r.get("between_sm_share") is not None]
                 for w in (True, False)}
        if all(kinds.values()):
            text += " By the split: " + "; ".join(
                f"{what} {_pct_range([r['idle_share'] for r in kinds[w]])} % of the warps' time ended, the SM "
                f"{_pct_range([r['between_sm_share'] for r in kinds[w]])} % of the spread"
                for w, what in ((True, "whole row groups per warp (no fix-up):"), (False, "the stream-K split:"))) + "."
    if max(r["idle_share"] for r in rows) >= 0.10:
        text += (" Equal bytes per warp are not equal time: the fill at the start and the tail at the end are where "
                 "these calls lose to a perfectly balanced stream.")
    else:
        text += " The warps ended close together: the tail is not where these calls lose time."
    return text


def other_kernels_sentence(rows: list[dict]) -> str:
    """A gap run's kernels of the same arithmetic that are not the examined kernel's own variants (in
    gemm_report.leave_one_out rows: every '<name> x blk' column but k's and the anchors'), each with the range of
    its ratios to _scaled_mm blockwise; '' where the run has none."""
    names = dict.fromkeys(c[:-len(" x blk")] for r in rows for c in r if c.endswith(" x blk"))
    names = [n for n in names if n != "k" and not n.startswith(("k-", "k_", "k+", "scaled_mm"))]
    if not names:
        return ""
    parts = [f"`{n}` {ratio_range([r[f'{n} x blk'] for r in rows if f'{n} x blk' in r], 2)}x" for n in names]
    return ("The other kernels of the same arithmetic in this run, against `_scaled_mm` blockwise: " + "; ".join(parts)
            + " (the examined kernel's own range is above).")


def prefill_grid_sentence(data: dict) -> str:
    """The default prefill kernel's ratios to _scaled_mm blockwise over a run's shapes with M >= PREFILL_GOAL_MIN_M,
    and at how many it reached PREFILL_GOAL; '' where the run has none."""
    from fp8lab.kernels.gemm_report import PREFILL_GOAL, PREFILL_GOAL_MIN_M, prefill_table

    xs = [r["x_vs_blockwise"] for r in prefill_table(data, kernels=("wgmma_tma",), min_m=PREFILL_GOAL_MIN_M)
          if r["x_vs_blockwise"]]
    if not xs:
        return ""
    dev = (data.get("provenance") or {}).get("device") or "recorded GPU"
    return (f"On the {dev} the default ran {ratio_range(xs, 2)}x `_scaled_mm` blockwise over the {len(xs)} shapes "
            f"with M ≥ {PREFILL_GOAL_MIN_M}, at least {PREFILL_GOAL}x at {sum(x >= PREFILL_GOAL for x in xs)} of them.")


def prefill_repeats_sentence(rows: list[dict], device: str | None = None) -> str:
    """What repeated recordings of one prefill grid say (rows: gemm_report.prefill_repeats): how far each shape's ratio
    to _scaled_mm blockwise moved from run to run, the goal read on each shape's median over the runs, and whether
    the misses of a single run sit inside that movement. '' where no shape was recorded twice."""
    from fp8lab.kernels.gemm_report import PREFILL_GOAL
    from fp8lab.kernels.harness import quartiles

    rows = [r for r in rows if r["runs"] >= 2]
    if not rows:
        return ""
    n = max(r["runs"] for r in rows)
    med = [r["x_median"] for r in rows]
    worst = min(rows, key=lambda r: r["x_median"])
    text = (f"The same grid recorded {n} times on the {device or 'recorded GPU'}"
            + ("" if all(r["same_launch"] for r in rows) else " (not every shape launched the same configuration each time)")
            + f": from run to run a shape's ratio moved by {ratio_range([100 * r['spread'] for r in rows], 0)} % "
            f"(median {100 * quartiles([r['spread'] for r in rows])[1]:.0f} %). On each shape's median over the runs the "
            f"default ran {ratio_range(med, 2)}x `_scaled_mm` blockwise, at least {PREFILL_GOAL}x at "
            f"{sum(x >= PREFILL_GOAL for x in med)} of the {len(rows)} shapes (worst {worst['x_median']:.3f} at "
            f"{worst['M']}x{worst['N']}x{worst['K']}).")
    flips = [r for r in rows if r["x_min"] < PREFILL_GOAL <= r["x_max"]]
    if flips:
        text += (f" At {len(flips)} shape{'s' if len(flips) != 1 else ''} one run met {PREFILL_GOAL}x and another did "
                 f"not: there, a single run's verdict is the run's noise, not the kernel's.")
    return text + interval_verdicts([(f"{r['M']}x{r['N']}x{r['K']}", r["median_lo"], r["median_hi"], r["median_coverage"],
                                      PREFILL_GOAL) for r in rows], "shape")


def interval_verdicts(items, noun: str) -> str:
    """One sentence on goals read through each median's distribution-free interval (items: (name, low, high,
    coverage, goal), stats.median_interval): how many intervals lie wholly at or above their goal (met beyond the
    runs' noise), wholly below it (missed beyond it, named) and across it (the runs cannot decide). '' for none."""
    if not items:
        return ""
    cov = min(c for _, _, _, c, _ in items)
    if cov < 0.9:   # [min, max] of so few runs covers the median too rarely to call anything beyond their noise
        return (f" With this few runs even the widest distribution-free interval of a median (the lowest to the highest "
                f"run) covers it with only {100 * cov:.0f} % probability: no {noun} can be called met or missed beyond the "
                f"runs' noise; more runs, not a verdict, are what is missing.")
    met = [n for n, lo, _, _, g in items if lo >= g]
    miss = [n for n, _, hi, _, g in items if hi < g]
    open_ = len(items) - len(met) - len(miss)
    s = "s" if len(items) != 1 else ""
    return (f" Read through each median's distribution-free interval (the runs' order statistics, covering the median "
            f"with at least {100 * cov:.0f} % probability): of the {len(items)} {noun}{s}, {len(met)} met the goal beyond "
            f"the runs' noise, {len(miss)} missed it beyond it" + (f" ({', '.join(miss)})" if miss else "")
            + f", and at {open_} the interval spans the goal: these runs cannot decide there.")


def goal_repeats_sentence(rows: list[dict], device: str | None = None) -> str:
    """What repeated recordings say about goals (rows: kernels.report.goal_repeats): how many runs there are, the
    goals met on the median over runs and those missed (with the median and the threshold), and the goals whose
    verdict flips from one run to the next. '' where no goal was measured twice."""
    rows = [r for r in rows if r["runs"] >= 2]
    if not rows:
        return ""
    n = max(r["runs"] for r in rows)
    name = lambda r: f"{r['what'].split(' (')[0]} at {r['context'] // 1024}k"  # noqa: E731
    met = [r for r in rows if r["met_median"]]
    miss = [r for r in rows if not r["met_median"]]
    text = (f"Read over the {n} recordings on the {device or 'recorded GPU'}, on each goal's median: "
            f"{len(met)} of the {len(rows)} goals met")
    if miss:
        text += "; missed: " + "; ".join(f"{name(r)} ({r['median']:.3f} against {r['threshold']})" for r in miss)
    text += "."
    flips = [r for r in rows if 0 < r["met_runs"] < r["runs"]]
    if flips:
        text += (" Met in some runs and not in others: " + "; ".join(f"{name(r)} ({r['met_runs']} of {r['runs']}, "
                                                                       f"{ratio_range(r['measured_runs'], 3)})" for r in flips)
                 + ". There a single run's verdict is that run's noise; the kernel sits at the goal, not past it.")
    return text + interval_verdicts([(name(r), r["median_lo"], r["median_hi"], r["median_coverage"], r["threshold"])
                                     for r in rows], "goal")


def default_rule_sentence(rows: list[dict], device: str | None = None) -> str:
    """What a recording says about a size-dependent default (rows: bench_attention.default_rule_rows): at how many of
    its problems the configuration the rule picked ran faster than the one it did not, at how many the two rows'
    quartile ranges lie apart, and where the rule picked the slower one (with the time ratio). '' without rows."""
    if not rows:
        return ""
    name = lambda r: f"{r['context'] // 1024}k{'' if r['layout'] == 'contiguous' else ' ' + r['layout']}"  # noqa: E731
    won = [r for r in rows if r["other_over_default"] > 1]
    apart = [r for r in won if r["separated"]]
    lost = [r for r in rows if r["other_over_default"] <= 1]
    text = (f"On the {device or 'recorded GPU'} the default the size rule picked was the faster of the two at "
            f"{len(won)} of {len(rows)} problems ({len(apart)} with the quartile ranges apart)")
    if lost:
        text += ("; the other configuration was faster at " + "; ".join(
            f"{name(r)} ({r['other_config']} took {r['other_over_default']:.3f}x the default's time"
            f"{', within the quartiles' if r['separated'] is False else ''})" for r in lost))
    return text + "."


def order_sentence(rows: list[dict]) -> str:
    """What the order run (gemm_report.order_effect rows) says, in one paragraph rendered from its numbers: how far
    the same kernel's time spread when only its predecessor changed, unsettled and settled, and what that does to
    its ratio against _scaled_mm blockwise; whether settling narrowed the spread, compared shape by shape (over the
    shapes timed both ways); and, for a run whose rounds rotated by one timer (rotation "timer"), that a copy opening
    a round followed the previous round's last timer. '' where there is no order run."""
    if not rows:
        return ""
    by = {}
    for r in rows:
        by.setdefault(r["settle_ms"] > 0, []).append(r)
    parts = []
    for settled in (False, True):
        rs = by.get(settled)
        if not rs:
            continue
        spread = ratio_range([100 * r["spread"] for r in rs], 0)
        x = [v for r in rs for v in (r.get("x blk lo"), r.get("x blk hi")) if v is not None]
        k = max(len([c for c in r if c.startswith("after ")]) for r in rs)
        what = (f"after running alone for {rs[0]['settle_ms']:g} ms first" if settled else "timed straight after it")
        text = f"{what}, its time spread by {spread} % over the {k} neighbour{'s' if k != 1 else ''}"
        if x:
            text += f" (from {min(x):.2f}x to {max(x):.2f}x `_scaled_mm` blockwise)"
        parts.append(text)
    n = len({r["shape"] for r in rows})
    out = (f"The same machine code, timed after different kernels in interleaved runs at {n} "
           f"shape{'s' if n != 1 else ''}: " + "; ".join(parts) + ".")
    un = {r["shape"]: r["spread"] for r in by.get(False, [])}
    se = {r["shape"]: r["spread"] for r in by.get(True, [])}
    both = [sh for sh in un if sh in se]
    if both:
        narrowed = [sh for sh in both if se[sh] < un[sh]]
        if len(narrowed) == len(both):
            out += (" Settling narrowed the spread at every shape timed both ways: on a GPU held at its power limit, "
                    "what ran just before a kernel sets the clock it starts at, so every prefill GEMM timing of the "
                    "lab is settled before it is timed.")
        else:
            out += (f" Settling narrowed the spread at {len(narrowed)} of the {len(both)} shapes timed both ways: the "
                    "order is not the whole of this noise.")
    if any(r.get("rotation", "timer") == "timer" for r in rows):
        out += (" (In this run the rounds rotated by one timer, so a copy that opened a round followed the previous "
                "round's last timer instead of its neighbour.)")
    return out


#: what each control-bit edit of the gap run (gemm_prefill.CONTROL_EDITS, every key but "as_compiled") does, in a
#: few words (a test keeps the keys equal)
_EDIT_WORDS = {"ffma_yield_all": "letting every promotion FFMA yield (and dropping its reuse flag)",
               "ffma_yield_none": "letting none yield", "ffma_no_reuse": "dropping every reuse flag"}


def _edit_sentence(rows: list) -> str:
    """The control-bit edits of a gap run, read against the unedited cubin loaded the same way (leave_one_out's
    '<edit> share' = 1 - t_edit / t_as_compiled), '' where the run has none. The noise of these comparisons is the
    same machine code loaded two ways: |as_compiled share| (its time against k's), at least 2 %. An edit is said to
    have lost (or saved) time only where every shape's share is beyond that noise; otherwise its range is given."""
    base = [r for r in rows if "as_compiled share" in r]
    if not base:
        return ""
    noise = max([0.02] + [abs(r["as_compiled share"]) for r in base])
    parts, lost_all, won = [], True, False
    for e, words in _EDIT_WORDS.items():
        saved = [r[f"{e} share"] for r in base if f"{e} share" in r]
        if not saved:
            continue
        lo, hi = min(saved), max(saved)
        span = f"{100 * lo:+.0f} %" if f"{100 * lo:+.0f}" == f"{100 * hi:+.0f}" else f"{100 * lo:+.0f} to {100 * hi:+.0f} %"
        lost_all = lost_all and hi < -noise
        won = won or lo > noise
        parts.append(f"{words} lost {ratio_range([-100 * x for x in saved], 0)} %" if hi < -noise else
                     f"{words} saved {ratio_range([100 * x for x in saved], 0)} %" if lo > noise else
                     f"{words} changed the time by {span} (+: faster), within the noise"
                     if max(abs(lo), abs(hi)) <= noise else f"{words} changed the time by {span} (+: faster)")
    if not parts:
        return ""
    verdict = (" Every rewrite lost time at every shape, beyond that noise: ptxas's own mix of hints was the fastest "
               "of those tried." if lost_all else "" if won else " No rewrite won time beyond that noise.")
    return (" Rewriting the control bits of the promotion's FFMAs in the binary (the same bits computed, checked), "
            f"against the unedited binary loaded the same way (which itself differed from the package's own load of "
            f"the same machine code by up to {100 * noise:.0f} %, the noise of these comparisons): "
            + "; ".join(parts) + "." + verdict)


def latest_kernels(names) -> list[str]:
    """The newest version of each kernel in a run (fp8lab.kernels.gemm_report.newest_versions):
    latest_kernels(["gemv_fp8_block", "gemv_fp8_block_v2", "gemv_nvfp4"]) -> ["gemv_fp8_block_v2", "gemv_nvfp4"]."""
    from fp8lab.kernels.gemm_report import newest_versions

    return newest_versions(names)


def kernel_roofline_points(data: dict, Ms=(1, 16), ours_prefix=("gemv", "w8a8"), anchors=("bf16_cublas",),
                           skip=("channel",)) -> list[dict]:
    """Measured points for a roofline from a recorded GEMM benchmark (harness schema): the fastest version of each of
    our kernels and the anchors, at the largest decode shape for each M in `Ms`, and at every M timed on the largest
    prefill (N, K) (our fastest prefill kernel there). A decode kernel's versions are one kernel, whatever their
    names: gemv_fp8_block, gemv_fp8_block_v2 and the packed versions named by configuration (gemv3_fp8b_..., gemv4_...)
    all count as "fp8 block" (gemm_report's version labels); `skip` leaves out the kernels whose name or label holds
    one of its words (by default the per-channel FP8 ones, so that FP8 is one star).

    intensity = FLOPs / bytes the kernel moves, tflops = its measured rate: where it sits under the roofs."""
    from fp8lab.kernels.gemm_report import _version_label

    res = [r for r in data.get("results", []) if r.get("flops") and r.get("bytes") and r.get("time_us")
           and not r.get("pdl")]   # a PDL launch is the same kernel overlapping its neighbour: one point per kernel
    family = lambda r: (_version_label(r) or "").rsplit(" v", 1)[0] or re.sub(r"_v\d+$", "", r["kernel"])  # noqa: E731
    out = []
    for fam, sel in (("decode", Ms), ("prefill", (None,))):
        rs = [r for r in res if r.get("family") == fam]
        for M in sel:
            rm = [r for r in rs if M is None or r.get("M") == M]
            if not rm:
                continue
            top = max(((r.get("N"), r.get("K")) for r in rm), key=lambda nk: (nk[0] or 0) * (nk[1] or 0))
            rm = [r for r in rm if (r.get("N"), r.get("K")) == top]
            mine = [r for r in rm if r["kernel"].startswith(ours_prefix)
                    and not any(k in r["kernel"] or k in (_version_label(r) or "") for k in skip)]
            if fam == "prefill":  # the fastest of our prefill kernels, not every variant
                ours = [max(mine, key=lambda r: r.get("tflops") or 0)["kernel"]] if mine else []
            else:                 # per kernel, its fastest version (a newer version is not always a faster one)
                fastest: dict = {}
                for r in mine:
                    base = family(r)
                    if base not in fastest or (r.get("tflops") or 0) > (fastest[base].get("tflops") or 0):
                        fastest[base] = r
                ours = [r["kernel"] for r in fastest.values()]
            for r in rm:
                short = r["kernel"].split(" (")[0]
                if r["kernel"] in ours or short in anchors:
                    out.append({"name": f"{short} {r.get('shape', '')}", "intensity": r["flops"] / r["bytes"],
                                "tflops": r.get("tflops") or r["flops"] / (r["time_us"] * 1e6), "kernel": short,
                                "family": fam, "M": r.get("M")})
    return out


def layer_roofline_stars(layer: dict, context: int) -> list[dict]:
    """The whole-layer points for the roofline: of a recorded decode-layer run (layer_report.load), the fastest variant
    of each kind at each batch, at one context. A variant's kind is its name up to the first '_' (fp8, fp8_fused and
    fp8_fused_pdl are one kind: fp8), so each format is one star per batch, whichever fusion won."""
    from fp8lab.kernels import layer_report as lr

    pts = lr.layer_roofline_points(layer, context=context)
    kind = lambda p: p["variant"].split("_")[0]  # noqa: E731
    best: dict = {}
    for p in pts:
        k = (kind(p), p["batch"])
        if k not in best or p["time_us"] < best[k]["time_us"]:
            best[k] = p
    return [{**p, "name": f"layer {p['name']}", "kernel": p["variant"], "family": "layer"}
            for p in pts if best[(kind(p), p["batch"])] is p]


def share_of_measured_roof(points: list[dict], gpu) -> list[dict]:
    """Each roofline point with `of_roof`: its measured rate over the roof above it on `gpu` (a fp8lab.gpus entry),
    min(GEMM rate, bandwidth x intensity). The GEMM rate is the FP8 one for our W8A8 and for torch._scaled_mm kernels
    (they multiply in FP8), bf16 for the rest; a whole layer mixes kernels, so it is held to the bf16 rate (at decode
    intensity the memory roof is the lower one either way)."""
    out = []
    for p in points:
        fp8 = p["kernel"].startswith(("w8a8", "scaled_mm")) and p.get("family") != "layer"
        rate = gpu.tflops["fp8" if fp8 else "bf16"]
        out.append({**p, "of_roof": p["tflops"] / min(rate, gpu.bandwidth_TBps * p["intensity"])})
    return out


def format_roofline_points(points: list[dict]) -> str:
    """The roofline's measured points as a table, one per line, the name column as wide as the longest name."""
    if not points:
        return "(no measured points)"
    w = max(len(p["name"]) for p in points)
    return "\n".join(f"measured  {p['name']:{w}s} {p['intensity']:8.1f} FLOP/B  {p['tflops']:8.1f} TFLOP/s"
                     + (f"  {p['of_roof']:.2f} of the measured roof" if "of_roof" in p else "") for p in points)


def emulated_mma_sentence(data: dict) -> str | None:
    """Notebook 07's reading of the emulated FP8 mma.sync kernel (w8a8_mma_fp8: on sm_90 ptxas turns its e4m3
    mma.sync into F2FP conversions and fp16 HMMAs) from a recorded GEMM run: its rate, its F2FP count, how it compares
    with the hand-written bf16 version of the same kernel and how much faster the fastest wgmma kernel is, at the
    prefill shapes where both were timed. None where the run did not time it."""
    pre = [r for r in data.get("results", []) if r.get("family") == "prefill" and r.get("tflops")]
    shapes = list(dict.fromkeys(r["shape"] for r in pre))
    T = {(r["kernel"], r["shape"]): r["tflops"] for r in pre}
    wg = {sh: max((T[(k, sh)] for k, s2 in T if s2 == sh and k.startswith("w8a8_wgmma")), default=None) for sh in shapes}
    slow = [wg[sh] / T[("w8a8_mma_fp8", sh)] for sh in shapes if wg[sh] and ("w8a8_mma_fp8", sh) in T]
    f2b = [T[("w8a8_mma_fp8", sh)] / T[("w8a8_mma_bf16", sh)] for sh in shapes
           if ("w8a8_mma_fp8", sh) in T and ("w8a8_mma_bf16", sh) in T]
    mma = [T[("w8a8_mma_fp8", sh)] for sh in shapes if ("w8a8_mma_fp8", sh) in T]
    if not (mma and slow and f2b):
        return None
    f2fp = (data.get("sass_counts") or {}).get("w8a8_mma_fp8", {}).get("F2FP")
    where = "the prefill shape" if len(slow) == 1 else f"the {len(slow)} prefill shapes"
    return (f"The emulated `mma.sync` kernel runs at {ratio_range(mma, 0)} TFLOP/s with {f2fp} `F2FP` conversions in "
            f"its SASS; it is {ratio_range(f2b)}× the hand-written bf16 version of the same kernel (its conversion is "
            f"one instruction per pair instead of shifts, masks and a multiply), and the fastest `wgmma` kernel is "
            f"**{ratio_range(slow)}× faster** than it at {where} of this run where both were timed.")


def layer_kinds_sentence(table: list[dict], point: tuple) -> str | None:
    """Notebook 07's reading of the decode-layer table (layer_report.layer_table rows) at one (batch, context): the
    bf16 layer's time and share of its ceiling, then the fastest variant of each kind (fp8, nvfp4, scaled_mm) as
    x bf16 and share of its own ceiling. None where bf16 or every other kind is missing at that point."""
    at = [r for r in table if (r["batch"], r["context"]) == tuple(point)]
    b16 = next((r for r in at if r["variant"] == "bf16"), None)
    best = {fam: max((r for r in at if r["variant"].startswith(fam) and r["x_vs_bf16"]), key=lambda r: r["x_vs_bf16"],
                     default=None) for fam in ("fp8", "nvfp4", "scaled_mm")}
    parts = [f"{fam} ({r['variant']}) {r['x_vs_bf16']:.2f}× bf16, {r['of_ceiling']:.2f} of its ceiling"
             for fam, r in best.items() if r]
    if not (b16 and parts):
        return None
    return (f"At batch {point[0]}, context {point[1] // 1024}k the bf16 layer takes {b16['time_us']:.0f} µs "
            f"({b16['of_ceiling']:.2f} of its ceiling). The fastest of each kind: " + "; ".join(parts) + ".")


def _spread_verdict(ratio: float, apart: bool | None) -> str:
    """'faster' (ratio = time / the reference's time below 1), 'slower', or 'even' where the ratio is 1 or
    bench_attention.quartiles_apart found the two quartile ranges overlapping (False); where a record has no spread
    (None) the medians decide."""
    return "even" if ratio == 1 or apart is False else "faster" if ratio < 1 else "slower"


def version_verdicts(data: dict, old: int, new: int) -> dict:
    """Version `new` against version `old` of each of our decode kernels, at every decode point where both ran (the
    fastest plain-launch record of each version there, gemm_report.best_version_records): {"points": how many (kernel,
    point) pairs, "faster" / "slower": [(label, N, K, M, time old / time new)] where the two records' quartile ranges
    lie apart (a record without a spread counts by its median), "even": the same where they overlap}. A ratio of
    medians alone would call a point "faster" that the rounds' spread cannot tell apart.

        version_verdicts(data, 3, 4) -> {"points": 72, "faster": [("fp8 block", 28672, 8192, 1, 1.008), ...], ...}
    """
    from fp8lab.kernels.bench_attention import quartiles_apart
    from fp8lab.kernels.gemm_report import best_version_records

    best = best_version_records(data)
    out: dict = {"points": 0, "faster": [], "slower": [], "even": []}
    for (label, N, K, M), a in sorted(best.items(), key=lambda kv: (kv[0][1] * kv[0][2], kv[0][3], kv[0][0])):
        fam, v = label.rsplit(" v", 1)
        b = best.get((f"{fam} v{new}", N, K, M))
        if int(v) != old or b is None:
            continue
        out["points"] += 1
        out[_spread_verdict(b["time_us"] / a["time_us"], quartiles_apart(a, b))].append(
            (fam, N, K, M, a["time_us"] / b["time_us"]))
    return out


def best_fp8_vs_scaled_mm_verdicts(data: dict) -> dict:
    """The best of our FP8 GEMVs against torch._scaled_mm tensorwise at every decode point of a recorded GEMM run
    (plain launches): at each (N, K, M), the FP8 record (per-channel or block, any version) with the highest same-run
    speedup over _scaled_mm, held against the _scaled_mm record of the same run. {"points": how many, "faster" /
    "slower": [(N, K, M, speedup)] where the two records' quartile ranges lie apart (by the medians where a record
    has no spread), "even": where they overlap}. The median ratio alone would count a point inside the rounds'
    spread as a win or a loss."""
    from fp8lab.kernels.bench_attention import quartiles_apart
    from fp8lab.kernels.gemm_report import _plain_decode, _version_label

    dec = _plain_decode(data)
    out: dict = {"points": 0, "faster": [], "slower": [], "even": []}
    for N, K, M in sorted({(r["N"], r["K"], r["M"]) for r in dec}, key=lambda k: (k[0] * k[1], k[2])):
        at = [r for r in dec if (r["N"], r["K"], r["M"]) == (N, K, M)]
        fp8 = [r for r in at if (_version_label(r) or "").startswith("fp8") and r.get("speedup_vs_scaled_mm_tensorwise")]
        anchors = [r for r in at if r["kernel"].startswith("scaled_mm_tensorwise")]
        if not (fp8 and anchors):
            continue
        best = max(fp8, key=lambda r: r["speedup_vs_scaled_mm_tensorwise"])
        anchor = next((a for a in anchors if a.get("run") == best.get("run")), anchors[0])
        x = best["speedup_vs_scaled_mm_tensorwise"]
        out["points"] += 1
        out[_spread_verdict(1 / x, quartiles_apart(best, anchor))].append((N, K, M, x))
    return out


def gemv_version_sentences(data: dict) -> list[str]:
    """Notebook 07's readings of a recorded GEMM run's decode versions (gemm_report.decode_versions): version 3
    against version 1 of each kernel, version 4 against version 3 (faster / slower counted where the quartile ranges
    lie apart, version_verdicts), and the best FP8 GEMV against torch._scaled_mm tensorwise (counted the same way,
    best_fp8_vs_scaled_mm_verdicts). A comparison the run cannot make is left out."""
    from fp8lab.kernels import gemm_report

    vt = gemm_report.decode_versions(data)
    out = []
    gain = gemm_report.version_speedups(vt, 1, 3)
    if gain:
        out.append("Against its first version, version 3 is " + "; ".join(
            f"{label} {ratio_range(g)}×" for label, g in gain.items()) +
            " as fast (time of v1 over time of v3, at the points where both were timed).")
    v4 = gemm_report.version_speedups(vt, 3, 4)
    if v4:
        vv = version_verdicts(data, 3, 4)
        n4, f4, e4 = vv["points"], len(vv["faster"]), len(vv["even"])
        out.append("Version 4 (the shared-memory ring) against version 3 (registers), the fastest record of each at "
                   "each point: " + "; ".join(f"{label} {ratio_range(g)}×" for label, g in v4.items()) +
                   " as fast (time of v3 over time of v4; below 1, version 4 is slower). " +
                   f"With the quartile ranges apart, version 4 is faster at {f4 or 'none'} of the {n4} points and "
                   f"slower at {len(vv['slower'])}" + (f"; at {e4} the two are within each other's quartiles" if e4 else "")
                   + (": in this run, freeing the registers did not buy bandwidth." if not f4 else
                      ": in this run, freeing the registers bought little." if f4 < n4 / 2 else
                      ": in this run, freeing the registers bought bandwidth at most points."))
    best = [r["best fp8 / _scaled_mm"] for r in vt if r["best fp8 / _scaled_mm"]]
    if best:
        bv = best_fp8_vs_scaled_mm_verdicts(data)
        nf, ns, ne = len(bv["faster"]), len(bv["slower"]), len(bv["even"])
        out.append(f"The best FP8 GEMV of the run is {ratio_range(best)}× as fast as `_scaled_mm` tensorwise across "
                   f"the decode points. With the quartile ranges apart, it is faster at {nf or 'none'} of the "
                   f"{bv['points']} points and slower at {ns}" +
                   (f"; at {ne} the two are within each other's quartiles." if ne else "."))
    return out


# ---- accumulation precision (notebook 10) ---------------------------------------------------------------------
def _loglog_slope(xs, ys) -> float:
    """Least-squares slope of log(y) against log(x): 1 = grows like K, 0.5 = like sqrt(K), 0 = flat."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(max(y, 1e-300)) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    den = sum((a - mx) ** 2 for a in lx)
    return float("nan") if den == 0 else sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / den


def _growth_word(slope: float) -> str:
    if slope != slope:
        return "cannot be told from one K"
    if slope > 0.75:
        return "grows about in proportion to K"
    if slope > 0.3:
        return "grows about like √K"
    if slope > 0.1:
        return "grows slowly with K"
    return "stays about flat with K"


def accumulation_findings(rows: list[dict], dist: str = "gaussian", key: str = "rel_err_acc") -> list[str]:
    """What fp8lab.accumulation.error_vs_k's rows show for one input distribution: how each variant's error
    grows with K (log-log slope), and how far the largest-K errors sit from each other."""
    rs = [r for r in rows if r["dist"] == dist]
    if not rs:
        return [f"no {dist} rows in this run."]
    ks = sorted({r["K"] for r in rs})
    at = {(r["variant"], r["K"]): r[key] for r in rs}
    out = []
    for v in dict.fromkeys(r["variant"] for r in rs):
        xs = [k for k in ks if (v, k) in at]
        sl = _loglog_slope(xs, [at[(v, k)] for k in xs]) if len(xs) > 1 else float("nan")
        out.append(f"{v}: {at[(v, xs[0])]:.1e} at K = {xs[0]} → {at[(v, xs[-1])]:.1e} at K = {xs[-1]}; log-log slope "
                   f"{sl:.2f}: it {_growth_word(sl)}.")
    k = ks[-1]
    vals = {v: at[(v, k)] for v in dict.fromkeys(r["variant"] for r in rs) if (v, k) in at}
    if len(vals) > 1:
        lo, hi = min(vals, key=vals.get), max(vals, key=vals.get)
        if vals[lo] > 0:
            out.append(f"At K = {k} the largest error ({hi}) is {vals[hi] / vals[lo]:.0f}× the smallest ({lo}): "
                       f"{math.log10(vals[hi] / vals[lo]):.1f} orders of magnitude.")
    return out


def accumulation_bias_findings(rows: list[dict], variant: str, dist: str = "gaussian") -> list[str]:
    """For one variant: the accumulation error against the total error (FP8 inputs included), and the part of
    the accumulation error that is a uniform shrink toward zero, at the smallest and the largest K."""
    rs = sorted((r for r in rows if r["dist"] == dist and r["variant"] == variant), key=lambda r: r["K"])
    if not rs:
        return [f"`{variant}` is not in this run."]
    out = []
    for r in (rs[0], rs[-1]) if len(rs) > 1 else rs:
        share = r["rel_err_acc"] / r["rel_err_total"] if r["rel_err_total"] else float("nan")
        bias = r["shrink"] / r["rel_err_acc"] if r["rel_err_acc"] else float("nan")
        out.append(f"K = {r['K']}: accumulation error {r['rel_err_acc']:.1e} against a total of {r['rel_err_total']:.1e} "
                   f"({share:.1%} of it); the uniform shrink is {r['shrink']:.1e}, {bias:.0%} of the accumulation error.")
    return out


def per_unit_factor(xs, ys) -> float:
    """The average factor by which y changes per unit step of x (geometric): per_unit_factor([10, 12], [4, 1]) = 0.5."""
    return math.exp(_loglog_slope_lin(xs, ys))


def _loglog_slope_lin(xs, ys) -> float:
    ly = [math.log(max(y, 1e-300)) for y in ys]
    mx, my = sum(xs) / len(xs), sum(ly) / len(ly)
    den = sum((a - mx) ** 2 for a in xs)
    return float("nan") if den == 0 else sum((a - mx) * (b - my) for a, b in zip(xs, ly)) / den


def fast_accum_findings(rec: dict, device: str | None = None) -> list[str]:
    """What a recorded `python -m fp8lab.accumulation --gpu` run shows: the speed ratio of fast accumulation at
    each K (and whether the rounds' min–max ranges separate) on `device` (default: the record's provenance), how
    each setting's error grows with K, and, per input distribution, how far the GPU's fast-accumulation error on the
    tile is from the truncating CPU model's (a factor outside 0.5–2 at some K: the model describes the direction,
    not the size)."""
    device = device or (rec.get("provenance") or {}).get("device")
    sp = {(r["K"], r["fast_accum"]): r for r in rec.get("speed", [])}
    ks = sorted({k for k, _ in sp})
    out = []
    ratios, separated = [], []
    for k in ks:
        off, on = sp.get((k, False)), sp.get((k, True))
        if off and on:
            ratios.append((k, off["median_us"] / on["median_us"]))
            separated.append(on["max_us"] < off["min_us"] or off["max_us"] < on["min_us"])
    if ratios:
        best = max(ratios, key=lambda t: t[1])
        out.append(f"{'On the ' + device + ', f' if device else 'F'}ast accumulation is "
                   f"{ratio_range([r for _, r in ratios])}× the speed of the promoted path "
                   f"(median time off / on) over K = {ks[0]}…{ks[-1]}, most at K = {best[0]} ({best[1]:.2f}×); the "
                   f"rounds' min–max ranges separate at {sum(separated)} of {len(separated)} K values.")
    for d in rec.get("settings", {}).get("dists", []):
        for f in (False, True):
            es = sorted((r for r in rec.get("error", []) if r["dist"] == d and r["fast_accum"] == f),
                        key=lambda r: r["K"])
            if len(es) > 1:
                sl = _loglog_slope([r["K"] for r in es], [r["rel_err"] for r in es])
                out.append(f"{d} inputs, use_fast_accum={f}: error {es[0]['rel_err']:.1e} at K = {es[0]['K']} → "
                           f"{es[-1]['rel_err']:.1e} at K = {es[-1]['K']} (log-log slope {sl:.2f}: it {_growth_word(sl)}).")
    for d in dict.fromkeys(r["dist"] for r in rec.get("sim_check", [])):
        rs = sorted((r for r in rec["sim_check"] if r["dist"] == d and r.get("sim_toward_zero_fast")),
                    key=lambda r: r["K"])
        if not rs:
            continue
        f = [r["gpu_fast_accum_true"] / r["sim_toward_zero_fast"] for r in rs]
        match = all(0.5 <= x <= 2 for x in f)
        out.append(f"{d} inputs, on the tile: the GPU's fast-accumulation error is {ratio_range(f, 2)}× the truncating "
                   f"model's over K = {rs[0]['K']}…{rs[-1]['K']}: "
                   + ("within a factor of 2 at every K." if match else
                      "outside a factor of 2 at some K: the model, as configured, does not reproduce the size of this "
                      "hardware's error; read it for the mechanism (an error that grows with K without promotion), "
                      "not for the size."))
    return out


# ---- the seeds' remaining claims (notebook 13) -------------------------------------------------------------------
def nvfp4_kv_kernel_verdict(goals: list[dict], device: str | None = None,
                            versions: list[dict] | None = None) -> tuple[str, str, str]:
    """(claim, verdict, evidence) for seed 002's NVFP4-KV decode attention kernel, from
    fp8lab.kernels.bench_attention.goals_table(data) (measured speedup of the same kernel on NVFP4 vs bf16 K/V);
    `device`: the GPU of the recording (its provenance), named in the verdict. With `versions`
    (bench_attention.versions_table(data)) the evidence also gives the ratio a user sees at the same point: the fastest
    NVFP4 kernel against the fastest bf16 kernel of the run (any version, or torch SDPA). The same-kernel ratio can
    flatter a format whose kernel's bf16 twin is slow."""
    claim = "seed 002: an attention kernel can read NVFP4 K/V and dequantize at the MMA boundary (and gain from it)"
    g = [r for r in goals if r.get("goal") == "nvfp4_vs_bf16" and r.get("measured") is not None]
    if not g:
        return claim, "untestable here: no NVFP4-KV measurement in the recorded file", "section 3"
    r = max(g, key=lambda r: r["context"])
    m = float(r["measured"])
    bound = 16 / 4.5
    verdict = (f"confirmed here (on the {device or 'recording GPU'})" if r.get("met") is not None and m > 1
               else "contradicted here" if r.get("met") is not None and m <= 1 else "not validated in this run")
    ev = (f"the same decode kernel on NVFP4 K/V is {m:.2f}× its bf16 speed at context {r['context']}, D = "
          f"{r['head_dim']} (byte ratio bound {bound:.2f}×; the lab's goal ≥ {r['threshold']}: "
          f"{'met' if r.get('met') else 'NOT met' if r.get('met') is False else 'not measured'})")
    best = next((v["best_nvfp4_vs_best_bf16"] for v in versions or [] if v.get("best_nvfp4_vs_best_bf16")
                 and (v.get("layout"), v.get("context"), v.get("head_dim")) == ("contiguous", r["context"], r["head_dim"])),
                None)
    if best:
        ev += f"; against the fastest bf16 kernel of the run (any version, or torch SDPA) it is {best:.2f}×"
    return claim, verdict, ev


def prefill_fp8_verdict(rows: list[dict], device: str | None = None) -> tuple[str, str, str]:
    """(claim, verdict, evidence) for seed 004 (FP8 KV made long-context prefill slower), from
    fp8lab.kernels.bench_prefill_attn.summary_rows(data): FP8 / bf16 time of the same chunked-prefill kernel;
    `device`: the GPU of the recording (its provenance), named in the verdict."""
    claim = "seed 004: an FP8 KV cache makes long-context prefill slower than a BF16 one"
    rows = [r for r in rows if r.get("valid", True)]
    if not rows:
        return claim, "untestable here: no valid prefill measurement in the recorded file", "section 4"
    big = [r for r in rows if r["chunk"] >= 512] or rows
    slower = [r for r in big if r["fp8_over_bf16"] > 1]
    ratios = ratio_range([r["fp8_over_bf16"] for r in big])
    verdict = (f"confirmed here (mechanism, in the lab's kernel on the {device or 'recording GPU'})" if len(slower) == len(big)
               else "contradicted here (in the lab's kernel)" if not slower else "partly: slower at some chunks only")
    ev = (f"FP8 / bf16 time of the same chunked-prefill kernel at chunks ≥ {min(r['chunk'] for r in big)} queries: "
          f"{ratios}× over {len(big)} (context, chunk) points, slower with FP8 at {len(slower)}; contexts "
          f"{sorted({r['context'] for r in big})}. Not the seed's engine, model or context: a mechanism, not a replay")
    return claim, verdict, ev


def serving_claim_verdicts(rows: list[dict]) -> list[tuple[str, str, str]]:
    """(claim, verdict, evidence) per GB10 serving number, from fp8lab.serving_claims.claims_table(): the lab has no
    GB10, so every one is untestable here; the evidence says whether it exceeds the one-token-per-weight-read
    ceiling and the acceptance rate MTP would need."""
    out = []
    for r in rows:
        claim = f"seed {r['seed']}: {r['tokens_per_s']:g} tok/s on GB10 ({r['id']})"
        if r.get("ceiling_tok_s") is None:
            out.append((claim, "untestable here", f"{r.get('verdict')}: {r.get('relation')}"))
            continue
        acc = r.get("acceptance_needed") or {}
        a = "; ".join(f"{n} draft{'s' if int(n) > 1 else ''}: acceptance ≥ {v['acceptance']:.2f}"
                      if v.get("acceptance") is not None else f"{n} drafts: impossible" for n, v in acc.items())
        over = r["fraction_of_ceiling"] > 1
        out.append((claim, "untestable here (no GB10); " + ("needs speculative decoding" if over
                                                           else "possible without it"),
                    f"ceiling {r['ceiling_tok_s']:.1f} tok/s at {r['bandwidth_GBps']:.0f} GB/s (spec) for "
                    f"{r['bytes_per_token'] / 1e9:.2f} GB per token ({r['weights']}); the claim is "
                    f"{r['fraction_of_ceiling']:.0%} of it. With MTP: {a or 'n/a'}"))
    return out


def fp4_sass_verdict(job_rows: list[dict], arch: str = "sm_121") -> tuple[str, str, str]:
    """(claim, verdict, evidence) for seed 002's "SM121 does not expose the MMA or conversion instructions" from
    fp8lab.kernels.gb10_report.jobs(summary): what the compiled machine code for that arch contains."""
    claim = "seed 002: SM121 does not expose the FP4 MMA or E2M1 conversion instructions"
    cells = {r["job"]: r.get(arch, "not compiled here") for r in job_rows}
    native = {j: c for j, c in cells.items() if ("E2M1" in j or "FP4" in j) and "(portable)" not in c
              and ("E2M1" in c or "OMMA" in c)}
    if not any(("E2M1" in j or "FP4" in j) for j in cells):
        return claim, "untestable here: no SASS summary", "notebook 09"
    verdict = "contradicted here (by compiling, not by running)" if native else "not contradicted by this summary"
    ev = "; ".join(f"{j}: {c}" for j, c in cells.items() if "E2M1" in j or "FP4" in j)
    return claim, verdict, f"{arch} machine code: {ev}. Compiling proves the instructions exist for the arch-specific " \
                           "target; it does not time them (no GB10 here)"


def seed_kv_claims() -> dict:
    """The seeds' claims this lab checks about the KV cache and its serving numbers, quoted as the seeds state them
    (what they say, not what the lab measured): {who: claim}. Seed 004's numbers come from
    fp8lab.kernels.bench_prefill_attn.SEED004, the GB10 rates from fp8lab.serving_claims.CLAIMS."""
    from fp8lab import serving_claims
    from fp8lab.kernels.bench_prefill_attn import SEED004

    return {
        "seed 000 (turbo KV)": "turbo4 gives measurably lower per-token error than NVFP4 on models with large RMSNorm "
                               "weights",
        "seed 002 (NVFP4 KV)": "--kv-cache-dtype nvfp4; --kv-high-precision-layers N keeps the first and last N "
                               "layers in BF16 because they are the most sensitive; the attention kernel dequantizes "
                               "at the MMA boundary",
        "seed 004 (FP8 KV prefill)": f"{SEED004['context']}-token document: first token after "
                                     f"{SEED004['ttft_fp8_s']:g} s with FP8 KV vs {SEED004['ttft_bf16_s']:g} s with "
                                     "BF16 KV",
        "seeds 000/002 (GB10 serving)": ", ".join(f"{c['tokens_per_s']:g} tok/s" for c in serving_claims.CLAIMS),
        "seed 002 (SM121)": "does not expose the relevant MMA or conversion instructions for FP4",
    }


def kv_bits_lines(methods=("e4m3-uncal", "e4m3-dyn", "nvfp4", "turbo4", "turbo4-g64"), head_dim: int = 64) -> list[str]:
    """Bits per stored element of each K/V method at `head_dim`, scale bytes counted (kv_quant.bits_per_element; the
    per-layer constants add nothing per element), each with what makes it causal (kv_bits' note)."""
    from fp8lab import kv_bits
    from fp8lab.kv_quant import bits_per_element

    return [f"{m:12s} {bits_per_element(m, head_dim):5.2f} bits/element   ({kv_bits._causal_note(m)})" for m in methods]


def outlier_rotation_sentence(rows: list[dict]) -> str | None:
    """kv_bits.outlier_channel_errors' rows read at their largest outlier: turbo4's and the Gaussian codebook's
    per-token error as multiples of NVFP4's, at the same bits. None without rows."""
    if not rows:
        return None
    r = max(rows, key=lambda r: r["outlier"])
    return (f"With the largest outlier (×{r['outlier']}) turbo4's error is **{r['turbo4'] / r['nvfp4']:.2f}×** NVFP4's "
            f"and the Gaussian codebook's **{r['turbo4-gauss'] / r['nvfp4']:.2f}×** (same bits; seeded synthetic "
            "keys).")


def kv_norms_line(layers: list[dict], summary: dict) -> str | None:
    """What the seed's condition ("large RMSNorm weights") meets in a kv_bits run (layers.csv rows, summary.json):
    the largest attention-norm |gamma| and its layer, the smallest of the layers' maxima, the final norm's largest
    |gamma|, and the largest K outlier ratio (max / median channel). None without layer rows."""
    if not layers:
        return None
    g = [float(r["attn_norm_max"]) for r in layers]
    return (f"attention-norm |gamma|: largest {max(g):.3f} (layer {g.index(max(g))}), smallest layer max {min(g):.3f}; "
            f"final norm max {summary['final_norm_abs']['max']:.3f}; K outlier ratio up to "
            f"{max(float(r['key_outlier_ratio']) for r in layers):.1f}")


def kv_sensitive_layer_lines(sens: list[dict], top: int = 6) -> list[str]:
    """The `top` layers whose K/V alone in NVFP4 move the next-token distribution most (kv_bits.load's sensitivity
    rows, by mean KL per token), each with its KL and perplexity change and their 95 % intervals over windows, under
    a header line. Empty without rows."""
    if not sens:
        return []
    rows = sorted(sens, key=lambda r: -r["kl_mean"])[:top]
    return ["most sensitive layers (mean KL per token, nats; ppl change %, both with 95 % CI over windows):"] + [
        f"  layer {r['layer']:2d}: KL {r['kl_mean']:.5f} [{r['kl_ci95_low']:.5f}, {r['kl_ci95_high']:.5f}]   "
        f"ppl {r['delta_pct']:+.3f} % [{r['ci95_low']:+.3f}, {r['ci95_high']:+.3f}]" for r in rows]


#: the paired head-to-head comparisons of the 4-bit KV run (configuration, reference)
KV_HEAD_TO_HEAD = (("turbo4", "nvfp4"), ("nvfp4-hp1", "nvfp4"), ("nvfp4-hp2", "nvfp4"), ("nvfp4-hp4", "nvfp4"),
                   ("nvfp4-sens4", "nvfp4-hp2"), ("nvfp4", "e4m3-dyn"))


def kv_head_to_head_lines(res: dict, pairs=KV_HEAD_TO_HEAD) -> list[str]:
    """Each configuration against its reference (not the baseline) over all positions, paired on the same windows
    (kv_bits.pooled on kv_bits.load's result), with whether the interval resolves a difference. A pair the run does
    not hold is left out."""
    from fp8lab import kv_bits

    out = []
    for a, b in pairs:
        t = kv_bits.pooled(res, a, b)
        if t:
            out.append(f"{a:12s} vs {b:10s} all positions: {ci(*t)}  "
                       f"{'resolved' if excludes_zero(t[1], t[2]) else 'not resolved: the interval includes zero'}")
    return out


def nvfp4_byte_bound_line(head_dim: int = 128) -> str:
    """How much faster an NVFP4 K/V cache could make a memory-bound decode step than a BF16 one: the byte ratio
    16 / NVFP4's bits per element (scales counted) at `head_dim`."""
    from fp8lab.kv_quant import bits_per_element

    b = bits_per_element("nvfp4", head_dim)
    return f"byte-ratio bound for NVFP4 vs BF16 K/V: {16 / b:.2f}x ({b:.2f} bits per element at D = {head_dim})"


def prefill_crossover_lines(data: dict, variant: str = "w4") -> list[str]:
    """Per context of a chunked-prefill recording: the chunks at which the FP8 cache was faster than bf16, those at
    which it was slower, each counted only where the two records' quartile ranges lie apart (prefill_kv_points; by
    the medians where a record has no spread), and those the spread cannot decide ('none' where there are none)."""
    pts = prefill_kv_points(data, variant)
    out = []
    for L in sorted({r["context"] for r in pts}):
        at = sorted((r for r in pts if r["context"] == L), key=lambda r: r["chunk"])
        chunks = {v: [r["chunk"] for r in at if r["verdict"] == v] for v in ("faster", "slower", "even")}
        out.append(f"context {L}: FP8 faster at chunks {chunks['faster'] or 'none'}, slower at "
                   f"{chunks['slower'] or 'none'}" + (f", within the quartiles at {chunks['even']}" if chunks["even"] else ""))
    return out


def fp4_sass_text(summary: dict) -> str:
    """The FP4 jobs (E2M1 conversion, FP4 MMA) of a SASS summary (gb10_report.jobs), one block per job with the
    instruction each architecture's machine code uses for it."""
    from fp8lab.kernels import gb10_report

    return gb10_report.format_jobs([r for r in gb10_report.jobs(summary) if "E2M1" in r["job"] or "FP4" in r["job"]],
                                   summary)


def rmsnorm_condition_verdict(res: dict) -> tuple[str, str, str]:
    """(claim, verdict, evidence) for seed 000's condition "on models with large RMSNorm weights" against a kv_bits
    run (kv_bits.load): untestable here, since the seed gives no size; the evidence states how large this model's
    attention-norm and final-norm weights are."""
    g = max(float(r["attn_norm_max"]) for r in res["layers"])
    return ("seed 000's condition: 'on models with large RMSNorm weights'", "untestable here",
            f"the seed does not say how large; this model's attention-norm |gamma| reach {g:.3f} and its final "
            f"norm's {res['summary']['final_norm_abs']['max']:.3f} (RMSNorm weights start at 1.0). Whether turbo4's "
            "margin grows with large weights needs a model that has them")


def seed_kv_verdicts(res: dict | None, att: dict | None, pf: dict | None, claims: list[dict],
                     sass: dict | None) -> list[tuple[str, str, str]]:
    """Every KV-cache and serving claim of the seeds as (claim, verdict, evidence), each read from its result: the
    4-bit KV run (kv_bits.verdicts and rmsnorm_condition_verdict), the decode-attention recording
    (nvfp4_kv_kernel_verdict), the chunked-prefill recording (prefill_fp8_verdict), the GB10 arithmetic
    (serving_claim_verdicts over serving_claims.claims_table) and the SASS summary (fp4_sass_verdict). A result
    not recorded (None) leaves its claim untestable here, saying where it would come from."""
    from fp8lab import kv_bits
    from fp8lab.kernels import bench_attention, bench_prefill_attn, gb10_report

    rows = []
    if res:
        rows += kv_bits.verdicts(res)
        rows.append(rmsnorm_condition_verdict(res))
    else:
        rows.append(("4-bit KV claims (seeds 000, 002)", "untestable here until outputs/kv_bits is recorded",
                     "python -m fp8lab.kv_bits --record"))
    rows.append(nvfp4_kv_kernel_verdict(bench_attention.goals_table(att), (att.get("provenance") or {}).get("device"),
                                        bench_attention.versions_table(att))
                if att else ("seed 002: NVFP4-KV attention kernel", "untestable here: not recorded yet", "section 3"))
    rows.append(prefill_fp8_verdict(bench_prefill_attn.summary_rows(pf), (pf.get("provenance") or {}).get("device"))
                if pf else ("seed 004: FP8 KV slows long-context prefill", "untestable here: not recorded yet",
                            "section 4"))
    rows += serving_claim_verdicts(claims)
    rows.append(fp4_sass_verdict(gb10_report.jobs(sass)) if sass else
                ("seed 002: SM121 has no FP4 MMA / E2M1 conversion", "untestable here: SASS summary not recorded yet",
                 "notebook 09"))
    return rows


# ---- activations and their outliers (notebook 11) ------------------------------------------------------------------
def outlier_structure_findings(rows: list[dict], threshold: float = 448.0) -> list[str]:
    """What fp8lab.outliers.summarize rows show: per input kind, the median channel and token ratios over layers
    (which kind of outlier it has), where the values above `threshold` are, whether the same channels top every layer,
    and at which positions the largest tokens sit."""
    from collections import Counter
    from statistics import median

    out = []
    for kind in dict.fromkeys(r["kind"] for r in rows):
        rs = [r for r in rows if r["kind"] == kind]
        cr = median(r["chan_ratio"] for r in rs)
        tr = [r["tok_ratio"] for r in rs if r.get("tok_ratio") is not None]
        tr_s = f"{median(tr):.1f}" if tr else "-"
        shape = ("channel-structured (large channels on every token)" if tr and cr > 2 * median(tr)
                 else "token-structured (a few tokens far above the rest)" if tr and median(tr) > 2 * cr
                 else "neither clearly")
        top = Counter(r["top_channels"][0] for r in rs if r.get("top_channels"))
        ch, n_ch = top.most_common(1)[0] if top else (None, 0)
        out.append(f"`{kind}` inputs over {len(rs)} layers: median channel ratio {cr:.1f}, median token ratio {tr_s} → "
                   f"{shape}; channel {ch} is the largest in {n_ch} of {len(rs)} layers.")
    over = [r for r in rows if r.get("n_over_448")]
    if over:
        pos = Counter(r["top_positions"][0] for r in over if r.get("top_positions"))
        p, n_p = pos.most_common(1)[0] if pos else (None, 0)
        out.append(f"Values above {threshold:g} (E4M3's maximum at scale 1): in {len(over)} of {len(rows)} inputs ("
                   + ", ".join(f"layer {r['layer']} `{r['kind']}` max {r['amax']:.0f}" for r in over[:6])
                   + (", …" if len(over) > 6 else "") + f"); in {n_p} of them the largest token is at position {p}.")
    else:
        out.append(f"No value above {threshold:g} in these inputs.")
    return out


def _is_causal(v) -> bool | None:
    """True / False / None from a causal column written either way ('True'/'False' or 'causal'/'oracle')."""
    s = str(v).strip().lower()
    return True if s in ("true", "causal") else False if s in ("false", "oracle") else None


def _label(v) -> str:
    c = _is_causal(v)
    return "causal" if c else "ORACLE" if c is False else "causality unknown"


def _quality_row(r: dict) -> str:
    return (f"`{r['config']}` ({_label(r['causal'])}) {ci(r['delta_vs_ref_pct'], r['ref_ci95_low'], r['ref_ci95_high'])}"
            if r.get("delta_vs_ref_pct") is not None else f"`{r['config']}` ({_label(r['causal'])})")


def scaling_findings(rows: list[dict], pairs: dict | None = None) -> list[str]:
    """outlier_study's scaling.csv: the activation cost of each strategy (against its weight-only reference), in
    the order of the point estimates, and whether those intervals overlap (then the order is not a ranking); the
    causal strategy with the smallest point estimate, and whether a paired comparison with the causal runner-up
    (in `pairs`, either order) separates them; head-to-head paired comparisons {(a, b): (d, lo, hi)}."""
    act = sorted((r for r in rows if r.get("delta_vs_ref_pct") is not None), key=lambda r: r["delta_vs_ref_pct"])
    if not act:
        return ["No activation-scaling row in this run."]
    overlap = any(b["ref_ci95_low"] <= a["ref_ci95_high"] for a, b in zip(act, act[1:]))
    out = ["Activation cost against E4M3 weights alone, by point estimate: " + "; ".join(_quality_row(r) for r in act)
           + (". Neighbouring intervals overlap, so this order is not a ranking: a difference between two strategies "
              "is read from the paired lines below." if overlap else ".")]
    pairs = pairs or {}
    causal = [r for r in act if _is_causal(r["causal"])]
    if causal:
        b = causal[0]
        res = ("excludes zero: a cost this run resolves" if excludes_zero(b['ref_ci95_low'], b['ref_ci95_high'])
               else "includes zero: not distinguishable from the weights alone at this n")
        s = f"Among causal strategies `{b['config']}` has the smallest point estimate; its interval against the weights alone {res}."
        if len(causal) > 1:
            r2 = causal[1]["config"]
            t = pairs.get((b["config"], r2))
            if t is None and (r2, b["config"]) in pairs:
                d, lo, hi = pairs[(r2, b["config"])]
                t = (-d, -hi, -lo)      # b against a: the signs flip (used for the verdict only, not printed)
            if t is None:
                s += (f" No paired comparison with the causal runner-up `{r2}` is given: this run does not say which of "
                      "the two costs less.")
            elif t[2] < 0:
                s += f" Paired with the causal runner-up `{r2}`, its interval lies below zero: the cheapest causal one here."
            elif t[1] > 0:
                s += (f" Paired with the causal runner-up `{r2}`, its interval lies above zero: the order of the point "
                      "estimates does not hold.")
            else:
                s += (f" Paired with the causal runner-up `{r2}` the interval includes zero: this run does not tell the "
                      "two apart.")
        out.append(s)
    w = [r for r in rows if r.get("delta_vs_ref_pct") is None and r.get("act_scaling") == "weight-only"]
    if w:
        r = w[0]
        out.append(f"The weights alone (`{r['config']}`) cost {ci(r['delta_pct'], r['ci95_low'], r['ci95_high'])} "
                   f"against the baseline (n = {r['n']} windows of {r['seq_len']} tokens).")
    for (a, b), t in pairs.items():
        out.append(step_sentence(f"`{a}` vs `{b}`", {"delta": t[0], "ci95_low": t[1], "ci95_high": t[2],
                                                      "n": act[0]["n"]}))
    return out


def taming_findings(rows: list[dict]) -> list[str]:
    """outlier_study's taming.csv: per format, the cost without a transform and what each transform changes against
    it (paired interval, resolved or not)."""
    out = []
    for fmt in dict.fromkeys(r["fmt"] for r in rows):
        rs = [r for r in rows if r["fmt"] == fmt]
        base = next((r for r in rs if r["transform"] == "none"), None)
        if base is None:
            continue
        parts = []
        for r in rs:
            if r is base or r.get("delta_vs_ref_pct") is None:
                continue
            lo, hi = r["ref_ci95_low"], r["ref_ci95_high"]
            verdict = "lower, resolved" if hi < 0 else "higher, resolved" if lo > 0 else "not resolved"
            parts.append(f"`{r['config']}` ({_label(r['causal'])}) {ci(r['delta_vs_ref_pct'], lo, hi)} ({verdict})")
        out.append(f"{fmt.upper()}: no transform {ci(base['delta_pct'], base['ci95_low'], base['ci95_high'])} vs baseline; "
                   "against it: " + ("; ".join(parts) or "no transform row") + ".")
    return out or ["No taming row in this run."]


def sqnr_findings(stats: dict) -> list[str]:
    """outlier_study's example SQNR table as sentences: per example input and format, what each transform changes
    (tensor-wide and median-token SQNR, in dB) against the input as it is."""
    out = []
    for e in stats.get("examples", []):
        versions = list(e["sqnr_db"])
        if len(versions) < 2:
            continue
        v0 = versions[0]
        for f in e["sqnr_db"][v0]:
            ch = ", ".join(f"{v} {e['sqnr_db'][v][f] - e['sqnr_db'][v0][f]:+.1f} / "
                           f"{e['sqnr_db_token_median'][v][f] - e['sqnr_db_token_median'][v0][f]:+.1f} dB"
                           for v in versions[1:])
            out.append(f"{e['label']} (layer {e['layer']} {e['kind']}), {f}: {e['sqnr_db'][v0][f]:.1f} / "
                       f"{e['sqnr_db_token_median'][v0][f]:.1f} dB as it is; {ch} (tensor-wide / median token).")
    return out


# ---- beyond one model (notebook 12) ----------------------------------------------------------------------------
def control_findings(rows: list[dict], sqnr_rows: list[dict]) -> list[str]:
    """The FP32 control (control.csv, sqnr.csv rows): formats ordered by median weight SQNR, and how many MRR /
    top-1 intervals exclude zero at this many queries."""
    from statistics import median

    by = {}
    for r in sqnr_rows:
        by.setdefault(r["recipe"], []).append(float(r["sqnr_db"]))
    med = sorted(((median(v), k) for k, v in by.items()), reverse=True)
    out = ["Median weight SQNR on FP32 weights, highest first: " + ", ".join(f"`{k}` {m:.1f} dB" for m, k in med) + "."]
    for metric in ("mrr", "top1"):
        rs = [r for r in rows if r["metric"] == metric]
        if not rs:
            continue
        ex = [r for r in rs if excludes_zero(float(r["ci95_low"]), float(r["ci95_high"]))]
        names = ", ".join(f"`{r['recipe']}` {ci(float(r['delta']), float(r['ci95_low']), float(r['ci95_high']), '')}"
                          for r in ex) or "none"
        out.append(f"{metric}: {len(ex)} of {len(rs)} intervals exclude zero over n = {rs[0]['n_queries']} questions "
                   f"({names}); about {expected_by_chance(len(rs)):.1f} would by chance.")
    return out


def rho_sentence(label: str, s: dict, n: int) -> str:
    """A Spearman rho with its interval as a verdict: the orderings agree, disagree, or cannot be told apart."""
    if s.get("rho") is None:
        return f"{label}: undefined (no spread in one of the orderings)."
    lo, hi = s["ci95_low"], s["ci95_high"]
    verdict = ("the orderings agree (the interval lies above zero)" if lo > 0 else
               "the orderings are opposed (the interval lies below zero)" if hi < 0 else
               "not resolved: the interval includes zero")
    return f"{label}: Spearman ρ = {s['rho']:+.2f} [{lo:+.2f}, {hi:+.2f}] over {n} formats: {verdict}."


def rank_of(table: list[dict], recipe: str, key: str, reverse: bool = False):
    """(rank from 1, out of) of `recipe` when the rows are sorted by `key` (ascending: least cost first)."""
    rs = [r for r in table if r.get(key) not in (None, "", "nan")]
    rs = sorted(rs, key=lambda r: float(r[key]), reverse=reverse)
    names = [r["recipe"] for r in rs]
    return (names.index(recipe) + 1, len(names)) if recipe in names else (None, len(names))


def sensitivity_findings(rows: list[dict], top: int = 3) -> list[str]:
    """A sensitivity.csv: per format, the costliest parts with their intervals, and how many intervals exclude zero
    against what chance alone would give."""
    out = []
    for fmt in dict.fromkeys(r["format"] for r in rows):
        rs = sorted((r for r in rows if r["format"] == fmt), key=lambda r: -float(r["delta_pct"]))
        ex = sum(excludes_zero(float(r["ci95_low"]), float(r["ci95_high"])) for r in rs)
        out.append(f"{fmt}: costliest " + "; ".join(f"`{r['part']}` {ci(float(r['delta_pct']), float(r['ci95_low']), float(r['ci95_high']))}"
                                                    for r in rs[:top])
                   + f". {ex} of {len(rs)} intervals exclude zero (about {expected_by_chance(len(rs)):.1f} by chance); "
                   f"n = {rs[0]['n']} windows of {rs[0]['seq_len']} tokens.")
    return out


def frontier_findings(rows: list[dict]) -> list[str]:
    """A frontier.csv: for each mixed point, the uniform points it beats (fewer bytes and a lower perplexity delta
    whose interval lies below theirs) and whether its measured delta matches the greedy prediction."""
    f = lambda r, k: float(r[k])  # noqa: E731
    uni = [r for r in rows if r["kind"] == "uniform"]
    mixed = [r for r in rows if r["kind"] not in ("uniform", "baseline")]
    out = []
    for m in mixed:
        beats = [u["point"] for u in uni if f(m, "bytes_per_step") <= f(u, "bytes_per_step") and f(m, "ci95_high") < f(u, "ci95_low")]
        pred = m.get("predicted_delta_pct")
        pr = ""
        if pred not in (None, ""):
            inside = f(m, "ci95_low") <= float(pred) <= f(m, "ci95_high")
            pr = f"; predicted {float(pred):+.2f} %, {'inside' if inside else 'outside'} the measured interval"
        out.append(f"`{m['point']}`: {f(m, 'bytes_per_step') / 1e6:.2f} MB/step, "
                   f"{ci(f(m, 'delta_pct'), f(m, 'ci95_low'), f(m, 'ci95_high'))}{pr}; clearly better at no more bytes than: "
                   f"{', '.join(f'`{b}`' for b in beats) or 'no uniform point'}.")
    return out or ["No mixed point in this run."]


def v6_sentence(rows: list[dict], device: str | None = None) -> str:
    """What a version-6 run says (rows: fp8lab.kernels.gemm_report.v6_table), rendered from its numbers: per M the range
    of version 6 (split kernel + GEMV) and of version 3 against `_scaled_mm` tensorwise in the same rounds, where
    version 6 beat version 3, what fusing the split did, and how far the split moved y."""
    if not rows:
        return "This run holds no timing of version 6."
    parts = []
    for M in sorted({r["M"] for r in rows}):
        rs = [r for r in rows if r["M"] == M]
        v3 = [r["v3"] for r in rs if r["v3"] is not None]
        parts.append(f"at M = {M} version 6 ran {ratio_range([r['v6'] for r in rs], 3)}x `_scaled_mm` tensorwise"
                     + (f" (version 3: {ratio_range(v3, 3)}x)" if v3 else ""))
    n = len({(r["N"], r["K"]) for r in rows})
    both = [r for r in rows if r["v3"] is not None]
    wins = [r for r in both if r["v6"] > r["v3"]]
    met = [r for r in rows if r["v6_lo"] >= 1.0]
    text = (f"On the {device or 'recorded GPU'}, over {n} shape{'s' if n != 1 else ''} (the split kernel and the GEMV "
            f"timed as one call, bf16 activations in, against `_scaled_mm` with activations already in FP8): "
            + "; ".join(parts) + f". Version 6 was the faster of the two at {len(wins)} of {len(both)} points, and at "
            f"least as fast as `_scaled_mm` (by the quartiles) at {len(met)} of {len(rows)}. ")
    fused = [r["v6_fused"] for r in rows if r["v6_fused"] is not None]
    if fused:
        slower = sum(1 for r in rows if r["v6_fused"] is not None and r["v6_fused"] < r["v6"])
        text += (f"Fusing the split into the GEMV ran {ratio_range(fused, 3)}x `_scaled_mm`, slower than the two-kernel "
                 f"call at {slower} of {len(fused)} points (a plausible reading, not separated by this run: every CTA "
                 f"re-splits the groups it reads, on its consumer warpgroup's path between two units). ")
    alone = [r for r in rows if r.get("gemv_only") is not None]
    for M in sorted({r["M"] for r in alone}):
        rs = [r for r in alone if r["M"] == M]
        text += (f"At M = {M} the default's GEMV alone, launched plainly on a split made beforehand (close to what the "
                 f"call would cost where the kernel producing the activations writes them split; in the two-kernel call "
                 f"the GEMV is launched with PDL behind the split), ran {ratio_range([r['gemv_only'] for r in rs], 3)}x "
                 f"`_scaled_mm` (faster than the two-kernel call at {sum(r['gemv_only'] > r['v6'] for r in rs)} of "
                 f"{len(rs)} shapes, and at least as fast as `_scaled_mm` at {sum(r['gemv_only'] >= 1 for r in rs)}). ")
    errs = [r["split_error"] for r in rows if r["split_error"] is not None]
    if errs:
        text += (f"The split moved y from the exact W8A16 answer by at most {max(errs):.1e} of sum |x w| "
                 f"(one bf16 rounding of x can move it by up to {2.0**-9:.1e}).")
    return text


def v6_tune_sentence(rows: list[dict], device: str | None = None) -> str:
    """What a version-6 tuning run says (rows: fp8lab.kernels.gemm_report.v6_configs), rendered from its numbers: at
    how many points the default configuration was the fastest timed, and where another one beat it with the quartile
    ranges apart (gain_lo > 1), which one, by how much, and at which shapes."""
    if not rows:
        return "This run holds no version-6 tuning."
    n_cfg = len({c for r in rows for c in r["configs"]})
    won = [r for r in rows if r["best"] != "default" and (r.get("gain_lo") or 0) > 1]
    text = (f"On the {device or 'recorded GPU'}, {n_cfg} configurations of the split+GEMV call at {len(rows)} points: "
            f"the default was the fastest, or not beaten beyond the quartiles, at {len(rows) - len(won)} of "
            f"{len(rows)}.")
    if won:
        by: dict = {}
        for r in won:
            by.setdefault(r["best"], []).append(r)
        parts = [f"`{cfg}` at " + ", ".join(f"{r['N']}x{r['K']} M = {r['M']}" for r in rs)
                 + f" ({ratio_range([r['gain'] for r in rs], 3)}x the default's speed)" for cfg, rs in by.items()]
        text += " Where another was faster with the quartiles apart: " + "; ".join(parts) + "."
    return text


def _part_label(kind: str) -> str:
    """A sensitivity part's label: its KV part takes its scale over the whole window (an oracle), a weight part is
    quantized offline (causal)."""
    return "ORACLE (scale over the window)" if kind == "kv" else "causal"


def control_n_line(rows: list[dict]) -> str | None:
    """The FP32 control's size (control.csv rows): questions, distinct passages, and the FP32 model's MRR (the
    baseline of the first MRR row). None where the rows hold no MRR."""
    mrr = [r for r in rows if r["metric"] == "mrr"]
    if not mrr:
        return None
    return (f"n = {rows[0]['n_queries']} questions, {rows[0]['n_passages']} passages; FP32 MRR "
            f"{float(mrr[0]['baseline']):.4f}")


def control_table(rows: list[dict], sqnr_rows: list[dict]):
    """The FP32 control as one table (a DataFrame, one row per weight recipe in control.CONTROL_RECIPES' order, rows
    with nothing measured left out): median weight SQNR over MiniLM's Linears (sqnr.csv), how far the question
    embeddings move (1 - cos), the MRR change x100 with its 95 % interval, and the top-1 change in points
    (control.csv)."""
    import pandas as pd

    from fp8lab import control

    c = pd.DataFrame(rows)
    for k in ("value", "delta", "ci95_low", "ci95_high"):
        c[k] = c[k].astype(float)
    sq = pd.DataFrame(sqnr_rows).astype({"sqnr_db": float})
    wide = c.pivot(index="recipe", columns="metric", values="delta")
    mrr = c[c.metric == "mrr"].set_index("recipe")
    return pd.DataFrame({
        "median weight SQNR (dB)": sq.groupby("recipe").sqnr_db.median().round(1),
        "1 - cos (queries)": wide["query_cos_loss"].map("{:.2e}".format),
        "MRR change x100": mrr.delta.map("{:+.2f}".format),
        # a Series indexed by recipe, like the other columns: a plain list would be placed by position in the
        # DataFrame's (sorted) index, not by recipe, and put one recipe's interval beside another's change
        "95% CI": pd.Series([f"[{lo:+.2f}, {hi:+.2f}]" for lo, hi in zip(mrr.ci95_low, mrr.ci95_high)], index=mrr.index),
        "top-1 change (pp)": wide["top1"].map("{:+.2f}".format)}).reindex(control.CONTROL_RECIPES).dropna(how="all")


#: the two orderings of the control compared with the 4-bit LM's (keys of comparison.json, with what each compares)
CONTROL_RHOS = (("spearman_cos_loss_vs_lm_ppl", "MiniLM cosine loss vs LM perplexity change"),
                ("spearman_mrr_loss_vs_lm_ppl", "MiniLM MRR loss vs LM perplexity change"))


def control_rho_lines(cmp: dict) -> list[str]:
    """comparison.json (control.compare_with_lm) as sentences: for MiniLM's cosine loss and its MRR loss, whether
    the ordering of the formats agrees with their ordering by the 4-bit LM's perplexity change (rho_sentence). A
    key the file lacks is left out."""
    return [rho_sentence(label, cmp[k], cmp["n_formats"]) for k, label in CONTROL_RHOS if k in cmp]


def control_comparison_table(rows: list[dict]):
    """comparison.csv as a DataFrame of the columns a reader compares: per format MiniLM's median SQNR, cosine loss
    and MRR change beside the 4-bit LM's perplexity change with its interval and number of windows."""
    import pandas as pd

    return pd.DataFrame(rows)[["recipe", "minilm_median_sqnr_db", "minilm_cos_loss", "minilm_mrr_delta",
                               "lm_ppl_delta_pct", "lm_ci95_low", "lm_ci95_high", "lm_n_windows"]]


def nvfp4_rank_sentence(rows: list[dict], recipe: str = "nvfp4-w") -> str:
    """Where `recipe` ranks (rank_of, least cost first) by cosine loss on MiniLM's FP32 weights (one rounding) and by
    perplexity change on the 4-bit LM (two roundings), from comparison.csv rows; a rank the rows cannot give reads
    None."""
    a, n = rank_of(rows, recipe, "minilm_cos_loss")
    b, m = rank_of(rows, recipe, "lm_ppl_delta_pct")
    return (f"`{recipe}` ranks **{a} of {n}** by cosine loss on MiniLM's FP32 weights (one rounding) and "
            f"**{b} of {m}** by perplexity change on the 4-bit LM (its baseline is already 4-bit, so this row "
            "compounds two roundings).")


def sqnr_lm_table(lm_rows: list[dict], sqnr_rows: list[dict]):
    """Median weight SQNR per format on MiniLM's FP32 weights (sqnr.csv) beside the same on the 4-bit LM's own weights
    (sqnr_lm.csv, its column named after the LM): a DataFrame in control.CONTROL_RECIPES' order, keeping the formats
    measured on both."""
    import pandas as pd

    from fp8lab import control

    lmq = pd.DataFrame(lm_rows).astype({"sqnr_db": float})
    mq = pd.DataFrame(sqnr_rows).astype({"sqnr_db": float})
    both = pd.DataFrame({"MiniLM, FP32 weights (dB)": mq.groupby("recipe").sqnr_db.median(),
                         f"{lmq.model.iloc[0]}, 4-bit weights (dB)": lmq.groupby("recipe").sqnr_db.median()})
    return both.reindex(control.CONTROL_RECIPES).dropna(how="any")


def sqnr_gap_sentence(table) -> str | None:
    """How far a second rounding moves SQNR (sqnr_lm_table: the 4-bit LM's column minus MiniLM's, per format): the
    range over the formats and the largest gap. None where no format is in both columns."""
    d = table.iloc[:, 1] - table.iloc[:, 0]
    if d.empty:
        return None
    big = d.abs().idxmax()
    return (f"4-bit LM minus FP32 MiniLM, median SQNR per format: {d.min():+.1f} to {d.max():+.1f} dB over "
            f"{len(d)} formats (largest gap: `{big}` {d[big]:+.1f} dB)")


def control_live_table(rows: list[dict]):
    """A live control slice (control.run_control's rows) as a DataFrame of its MRR and query-cosine rows, with the
    value, the change against FP32, its interval and the counts."""
    import pandas as pd

    live = pd.DataFrame(rows)
    return live[live.metric.isin(["mrr", "query_cos_loss"])][["recipe", "metric", "value", "delta", "ci95_low",
                                                              "ci95_high", "n_queries", "n_passages"]]


def sensitivity_n_line(rows: list[dict]) -> str | None:
    """A sensitivity map's size (sensitivity.csv rows): windows x tokens and the model's note. None without rows."""
    if not rows:
        return None
    r = rows[0]
    return f"n = {r['n']} windows x {r['seq_len']} tokens; {r['model_note']}"


def sensitivity_top_parts(rows: list[dict], top: int = 5):
    """The `top` costliest parts per format of a sensitivity map (sensitivity.csv rows), costliest first, as a
    DataFrame: each part's causal / ORACLE label (the KV part's scale is taken over the window), its perplexity change
    with the interval, and whether the interval excludes zero ("significant")."""
    import pandas as pd

    s = pd.DataFrame(rows)
    for k in ("delta_pct", "ci95_low", "ci95_high"):
        s[k] = s[k].astype(float)
    s["significant"] = (s.ci95_low > 0) | (s.ci95_high < 0)
    s["label"] = [_part_label(k) for k in s.kind]
    return s.sort_values("delta_pct", ascending=False).groupby("format").head(top)[
        ["format", "part", "label", "delta_pct", "ci95_low", "ci95_high", "significant"]]


def sensitivity_live_table(rows: list[dict]):
    """A live sensitivity slice (sensitivity.csv rows, as written) as a DataFrame: part, causal / ORACLE label,
    format, perplexity change with its interval, windows and tokens."""
    import pandas as pd

    s = pd.DataFrame(rows)
    s["label"] = [_part_label(k) for k in s.kind]
    return s[["part", "label", "format", "delta_pct", "ci95_low", "ci95_high", "n", "seq_len"]]


def _frontier_label(assignment: str) -> str:
    """'causal' for a frontier point whose KV cache stays as loaded, else the KV part's oracle label."""
    return "causal" if "kv:bf16" in assignment or "kv:" not in assignment else "ORACLE (KV scale over the window)"


def frontier_n_line(rows: list[dict]) -> str | None:
    """A frontier run's setting (frontier.csv rows): batch, context, windows x tokens. None without rows."""
    if not rows:
        return None
    r = rows[0]
    return f"batch {r['batch']}, context {r['context']}; n = {r['n']} windows x {r['seq_len']}"


def frontier_table(rows: list[dict]):
    """A frontier run (frontier.csv rows) as a DataFrame: per point its kind, causal / ORACLE label, MB read per
    decode step, the tokens/s ceiling on each GPU of the run (bandwidth / bytes per step: arithmetic, not a timing),
    the greedy prediction and the measured perplexity change with its interval."""
    import json

    import pandas as pd

    f = pd.DataFrame(rows)
    f["MB/step"] = (f.bytes_per_step.astype(float) / 1e6).round(2)
    f["label"] = [_frontier_label(a) for a in f.assignment]
    for gpu, tbps in json.loads(f.ceilings.iloc[0]).items():
        f[f"{gpu} tok/s ceiling"] = (tbps * 1e12 / f.bytes_per_step.astype(float)).round(0)
    return f[["point", "kind", "label", "MB/step", *[c for c in f.columns if c.endswith("ceiling")],
              "predicted_delta_pct", "delta_pct", "ci95_low", "ci95_high"]]


def decode_bytes_lines(model, sens: dict | None = None, budgets=(0.35, 0.5), batch: int = 1,
                       context: int = 512) -> list[str]:
    """What one decode step reads (frontier.decode_bytes over the model's layers, lm_head and KV cache at `batch`
    and `context`): the model as loaded, each of frontier.UNIFORM's recipes, and, from a sensitivity map (`sens`,
    sensitivity.read_sensitivity), the greedy plan (frontier.plan) under each budget, a fraction of the bytes as
    loaded, with its bytes, predicted perplexity change and assignment. Without a map, one line says what the plan
    needs."""
    from fp8lab import frontier, sensitivity

    parts = sensitivity.model_parts(model, ("layers", "lm_head", "kv"))
    inv = frontier.inventory(model)
    bf16 = frontier.decode_bytes(inv, {}, parts, batch, context)
    out = [f"{'bf16 (as loaded)':<24} {bf16 / 1e6:7.2f} MB per decode step"]
    for label, w, head, kv in frontier.UNIFORM:
        a = {p.name: (kv if p.kv else head if p.lm_head else w) for p in parts}
        out.append(f"{label:<24} {frontier.decode_bytes(inv, a, parts, batch, context) / 1e6:7.2f} MB per decode step")
    if sens is None:
        out.append("greedy plan: needs the committed sensitivity map with every layer, lm_head and kv "
                   "(not recorded yet)")
        return out
    pl = frontier.plan(model, sens, [f * bf16 for f in budgets], batch, context)
    for (B, a, b, pred) in pl["picks"]:
        if a is not None:
            out.append(f"greedy under {B / bf16:.0%} of bf16: {b / 1e6:.2f} MB, predicted {pred:+.2f} %: "
                       f"{frontier._short(a, parts)}")
    return out


def run_size_line(folder: str, prov: dict | None) -> str:
    """One committed run's size and wall time from its provenance.json (its settings' windows, pairs or tokens, else
    'all'), with its provenance line (commit, device, date, command); 'not recorded yet' without a provenance."""
    if prov is None:
        return f"{folder:<26} not recorded yet"
    from fp8lab.notebook import provenance_line

    st = prov.get("settings", {})
    n = st.get("n_windows") or st.get("pairs") or st.get("tokens") or "all"
    return f"{folder:<26} n/size {n!s:<8} wall {prov.get('wall_seconds', '?')} s\n    {provenance_line(prov)}"


# ---- FP8 KV cache numerics (notebook 08) ------------------------------------------------------------------------
def cache_error_sentence(tables: list[list[dict]]) -> str:
    """What the cache-format error tables say (tables: one fp8lab.kernels.attention_fp8kv.cache_error_table per seed,
    each an independent draw of q, K and V), rendered with the spread over the draws: the E4M3 (per-tensor scale)
    output error over bf16's on normal keys, and the E4M3 error with outlier key channels over that on normal keys,
    each as the median over the seeds with its distribution-free interval (stats.median_interval)."""
    from fp8lab.stats import median_interval

    fp8, b16, out = "fp8 e4m3, per-tensor scale", "bf16", "outlier x20"
    ratios = {"fp8_over_bf16": [], "outlier_over_normal": []}
    for rows in tables:
        e = {(r["keys"], r["cache"]): r["rel_rms_err"] for r in rows}
        if ("normal", fp8) in e and ("normal", b16) in e and (out, fp8) in e:
            ratios["fp8_over_bf16"].append(e[("normal", fp8)] / e[("normal", b16)])
            ratios["outlier_over_normal"].append(e[(out, fp8)] / e[("normal", fp8)])
    n = len(ratios["fp8_over_bf16"])
    if not n:
        return "These tables hold no E4M3 and bf16 rows to compare."

    def med(xs, digits):
        m = statistics.median(xs)
        lo, hi, cov = median_interval(xs)
        return f"**{m:.{digits}f}×** [{lo:.{digits}f}, {hi:.{digits}f}] ({100 * cov:.0f} % interval for the median)"
    return (f"Over {n} independent draw{'s' if n != 1 else ''} of q, K and V: with well-behaved keys an E4M3 cache "
            f"costs an output error {med(ratios['fp8_over_bf16'], 1)} bf16's, at half the bytes. With outlier key "
            f"channels the E4M3 error is {med(ratios['outlier_over_normal'], 1)} that of normal keys.")


# ---- decode and prefill attention (notebook 08) ------------------------------------------------------------------
def paged_vs_contiguous_sentence(data: dict) -> str:
    """What an attention recording says about its paged cache (bench_attention: shuffled pages) against the
    contiguous one: per kernel timed on both at the same context and head dim, paged time / contiguous time, counted
    as faster or slower only where the two records' quartile ranges lie apart (by the medians where a record has no
    spread). '' where the run timed no kernel on both layouts."""
    from fp8lab.kernels.bench_attention import quartiles_apart

    res = [r for r in data.get("results", []) if not r.get("sweep") and r.get("valid", True) and r.get("layout")]
    contig = {(r["kernel"], r.get("head_dim"), r.get("context")): r for r in res if r["layout"] == "contiguous"}
    pairs = [(r, contig[(r["kernel"], r.get("head_dim"), r.get("context"))]) for r in res
             if r["layout"] != "contiguous" and (r["kernel"], r.get("head_dim"), r.get("context")) in contig]
    if not pairs:
        return ""
    rows = [(p["kernel"], p["time_us"] / c["time_us"]) for p, c in pairs]
    verdict = [_spread_verdict(x, quartiles_apart(p, c)) for (_, x), (p, c) in zip(rows, pairs)]
    faster = [x for x, v in zip(rows, verdict) if v == "faster"]
    slower = [x for x, v in zip(rows, verdict) if v == "slower"]
    even = verdict.count("even")
    where = sorted({(p["layout"], p.get("head_dim"), p.get("context")) for p, _ in pairs})
    at = "; ".join(f"{lay} at {L // 1024}k, D = {D}" for lay, D, L in where)
    text = (f"In this run ({at}), the paged cache against the contiguous one, kernel by kernel: faster for "
            f"{len(faster)} of {len(rows)} kernels")
    if faster:
        text += f" (paged / contiguous time {ratio_range([x[1] for x in faster], 2)})"
    if slower:
        text += "; slower for " + ", ".join(f"`{k}` (x{x:.3f})" for k, x in slower)
    if even:
        text += f"; within the quartiles for {even}"
    return text + "."


def prefill_kv_points(data: dict, variant: str = "w4") -> list[dict]:
    """Each (context, chunk) point of a chunked-prefill attention recording timed on both caches
    (bench_prefill_attn.summary_rows) with `apart` (whether the bf16 and FP8 records' quartile ranges lie apart;
    None without spreads) and `verdict`: 'faster' / 'slower' for FP8 only where they lie apart, else 'even'."""
    from fp8lab.kernels import bench_prefill_attn as bpa
    from fp8lab.kernels.bench_attention import quartiles_apart

    res = data.get("results", [])

    def rec(r, kv):
        return next((x for x in res if (x.get("context"), x.get("chunk")) == (r["context"], r["chunk"])
                     and x.get("kv") == kv and x.get("variant") == variant), None)
    rows = []
    for r in bpa.summary_rows(data, variant):
        apart = quartiles_apart(rec(r, "bf16"), rec(r, "fp8"))
        rows.append({**r, "apart": apart, "verdict": _spread_verdict(r["fp8_over_bf16"], apart)})
    return rows


def prefill_kv_sentence(data: dict, variant: str = "w4") -> str:
    """What a chunked-prefill attention recording (bench_prefill_attn) says about an FP8 cache against bf16: at how
    many (context, chunk) points FP8 was slower and at how many faster, each counted only where the two records'
    quartile ranges lie apart (by the medians where a record has no spread), the points the spread cannot decide, the
    largest slowdown, and where FP8 / bf16 crosses 1 (bench_prefill_attn.crossover) at a context where FP8 was
    faster beyond the spread somewhere."""
    from fp8lab.kernels import bench_prefill_attn as bpa

    rows = prefill_kv_points(data, variant)
    if not rows:
        return "This run holds no (context, chunk) point timed on both caches."
    by = {v: [r for r in rows if r["verdict"] == v] for v in ("slower", "faster", "even")}
    slower, faster, even = by["slower"], by["faster"], by["even"]
    pt = lambda r: f"{r['context'] // 1024}k, chunk {r['chunk']}: x{r['fp8_over_bf16']:.2f}"  # noqa: E731
    spread = any(r["apart"] is not None for r in rows)
    text = (("Counting a point only where the two quartile ranges lie apart, " if spread else "")
            + f"FP8 KV is slower at {len(slower)} of {len(rows)} (context, chunk) points and faster at "
            f"{len(faster) or 'none'}")
    if even:
        text += f"; at {len(even)} the two lie within each other's quartiles ({'; '.join(pt(r) for r in even)})"
    if slower:
        worst = max(slower, key=lambda r: r["fp8_over_bf16"])
        text += (f". The slowdown reaches {worst['fp8_over_bf16']:.2f}× at chunk {worst['chunk']} "
                 f"(context {worst['context'] // 1024}k)")
    ctx_faster = {r["context"] for r in faster}
    cx = [c for c in bpa.crossover(data, variant) if c["crossover_chunk"] and c["context"] in ctx_faster]
    if cx:
        text += ". It crosses 1 at a chunk of about " + ", ".join(
            f"{c['crossover_chunk']:.0f} tokens at {c['context'] // 1024}k" for c in cx)
    return text + "."


def recorded_default_sentence(data: dict) -> str:
    """Where an attention recording's version-3 default configuration is not the one this tree's size rule
    (attention_fp8kv.v3_default) picks for the same problem: per format, head dim and layout, the contexts, the
    configuration recorded and the one launched now. '' where every recorded default is this tree's (or the run
    records none). The record's rows, and any goal read from them, time the configuration it recorded."""
    from fp8lab.kernels import attention_fp8kv as att

    diff: dict = {}
    for r in data.get("results", []):
        if r.get("version") != 3 or not r.get("default") or r.get("sweep") or not r.get("config"):
            continue
        if not all(r.get(k) for k in ("fmt", "head_dim", "B", "n_q_heads", "n_kv_heads", "context")):
            continue
        g = "g16" if r["n_q_heads"] // r["n_kv_heads"] > 8 else "g8"
        if (r["fmt"], r["head_dim"], g) not in att.V3_DEFAULTS:
            continue
        layout = r.get("layout") or "contiguous"
        page = int(layout[len("paged"):]) if layout.startswith("paged") and layout[len("paged"):].isdigit() else None
        now = tuple(att.v3_default(r["fmt"], r["head_dim"], g, r["B"], r["n_kv_heads"], r["context"], page))
        was = tuple(r["config"])
        if now != was:
            diff.setdefault((r["fmt"], r["head_dim"], layout, was, now), []).append(r["context"])
    if not diff:
        return ""
    ks = lambda cs: ", ".join(f"{c // 1024}k" for c in sorted(cs))  # noqa: E731
    parts = [f"{fmt} at D = {D}{'' if lay == 'contiguous' else ', ' + lay}, {ks(cs)}: {was} recorded, {now} in this tree"
             for (fmt, D, lay, was, now), cs in diff.items()]
    return ("This recording's version-3 default is not this tree's everywhere (" + "; ".join(parts) + "): there its "
            "rows, and the goal lines read from them, time the configuration it recorded, not the one this tree "
            "launches.")


def attention_goal_line(data: dict) -> str:
    """The decode-attention recording's headline target (bench_attention.GOAL: the FP8 kernel against the same kernel
    on a bf16 cache at 32k context, D = 128) as one line: the threshold, the measured speedup (None where the run has
    no valid row there) and the verdict."""
    from fp8lab.kernels import bench_attention as ba

    speed, met = ba.goal_met(data)
    return (f"goal: {ba.GOAL[0]} >= {ba.GOAL[1]}x -> measured {speed if speed is None else round(speed, 2)}: "
            f"{'met' if met else 'not met'}")


def copy_bandwidth_above_one(rows: list[dict]) -> str:
    """The rows of a kernel recording's table (fp8lab.kernels.report's Summary.table) that read faster than the
    device-to-device copy moves bytes (fraction_of_copy_bw above 1.0: a read-only stream can beat the read-write mix
    of a copy), counted, then one per line with kernel, shape and fraction."""
    above = [r for r in rows if (r.get("fraction_of_copy_bw") or 0) > 1.0]
    return f"rows above 1.0 of copy bandwidth: {len(above)}" + "".join(
        f"\n  {r['kernel']:28s} {r.get('shape', ''):28s} {r['fraction_of_copy_bw']:.3f}" for r in above)


def attention_context_bullets(data: dict) -> str:
    """Markdown bullets reading a decode-attention recording at D = 128, contiguous cache: at short context (up to
    4k) the FP8 step's time and its speedup over the same kernel on bf16; at long context (16k and more) the speedup
    over the same kernel on bf16 and over torch SDPA, and both kernels' fractions of copy bandwidth; the lab's
    headline target (bench_attention.GOAL) with its measured value and verdict; and, where the recording's version-3
    default is not this tree's (recorded_default_sentence), that note. A context band the run did not time gets no
    bullet; the target's bullet is always there ('-', not measured, where the run has no valid 32k row)."""
    from fp8lab.kernels import bench_attention as ba

    sr = [r for r in ba.summary_rows(data) if r["layout"] == "contiguous" and r["head_dim"] == 128]
    short = [r for r in sr if r["context"] <= 4096]
    long_ = [r for r in sr if r["context"] >= 16384]
    g, met = ba.goal_met(data)

    def ks(rs):
        return ", ".join(f"{r['context'] // 1024}k" for r in rs)
    bullets = []
    if short:
        bullets.append(f"* Short context ({ks(short)}): the FP8 step takes "
                       f"{min(r['fp8_us'] for r in short):.0f}–{max(r['fp8_us'] for r in short):.0f} µs, "
                       f"{ratio_range([r['speedup_vs_bf16'] for r in short])}× faster than bf16 (the same kernel).")
    if long_:
        bullets.append(f"* At {ks(long_)} context: "
                       f"{ratio_range([r['speedup_vs_bf16'] for r in long_])}× faster than the same kernel on bf16 and "
                       f"{ratio_range([r['speedup_vs_torch'] for r in long_ if r['speedup_vs_torch']])}× faster than "
                       f"torch SDPA; FP8 reaches {ratio_range([r['fp8_frac_copy'] for r in long_])} of copy bandwidth, "
                       f"bf16 {ratio_range([r['bf16_frac_copy'] for r in long_ if r['bf16_frac_copy']])}.")
    verdict = "not measured" if met is None else "met" if met else "not met"
    bullets.append(f"* The lab's target ({ba.GOAL[0]}, at least {ba.GOAL[1]}×): measured "
                   f"{'-' if g is None else f'{g:.2f}×'}, {verdict}.")
    stale = recorded_default_sentence(data)
    if stale:
        bullets.append("* " + stale)
    return "\n".join(bullets)


def _faster_word(time_ratios) -> str:
    """'slower' where every time ratio (new / old) is above 1, 'faster' where every one is below 1, else 'sometimes
    faster, sometimes slower'."""
    return ("slower" if min(time_ratios) > 1 else "faster" if max(time_ratios) < 1
            else "sometimes faster, sometimes slower")


def attention_version_sentences(data: dict) -> list[str]:
    """What a decode-attention recording says about the kernel's three versions (bench_attention.versions_table):
    whether versions 2 and 3 are faster or slower than version 1 on an FP8 cache (and on a bf16 one, where timed), as
    time ratios vN / v1 at D = 128, contiguous; how fast the fastest FP8 and NVFP4 kernels of the run are against the
    fastest bf16 kernel of the run, whoever wrote it; and version 3 against version 1 on FP8 at every other head dim.
    Empty where the recording holds one version only."""
    from fp8lab.kernels import bench_attention as ba

    table = ba.versions_table(data)
    vt = [r for r in table if r["layout"] == "contiguous" and r["head_dim"] == 128]
    out = []
    for v in (2, 3):
        f8 = [r[f"v{v}_over_v1_fp8"] for r in vt if r[f"v{v}_over_v1_fp8"]]
        b16 = [r[f"v{v}_over_v1_bf16"] for r in vt if r[f"v{v}_over_v1_bf16"]]
        if f8:
            out.append(f"In this run version {v} is **{_faster_word(f8)}** than version 1 on an FP8 cache (time v{v} / "
                       f"v1 = {ratio_range(f8)} at D = 128, contiguous)"
                       + (f", and {_faster_word(b16)} on a bf16 cache ({ratio_range(b16)})." if b16 else "."))
    best = [r["best_fp8_vs_best_bf16"] for r in vt if r["best_fp8_vs_best_bf16"]]
    if best:
        out.append("A goal written as *FP8 over bf16, the same kernel* can be met for the wrong reason, by a version "
                   "whose bf16 twin is slow. Against the fastest bf16 kernel of the run, the fastest "
                   f"FP8 kernel is {ratio_range(best)}× as fast, the NVFP4 kernel "
                   f"{ratio_range([r['best_nvfp4_vs_best_bf16'] for r in vt if r['best_nvfp4_vs_best_bf16']])}×.")
    for D in sorted({r["head_dim"] for r in table} - {128}):
        o = [r["v3_over_v1_fp8"] for r in table if r["head_dim"] == D and r["v3_over_v1_fp8"]]
        if o:
            out.append(f"At D = {D}, version 3 is {_faster_word(o)} than version 1 on an FP8 cache "
                       f"(time v3 / v1 = {ratio_range(o)}).")
    return out


def attention_sweep_sentences(sweep: dict) -> list[str]:
    """What a decode-attention sweep (every compiled configuration, bench_attention --sweep) says about version 3:
    the best copy-per-tile configuration against the best copy-per-row one on an FP8 cache (fraction of copy
    bandwidth and time ratio: whether the copy loop of a copy per row costs more than the bank conflicts its padded
    rows avoid); at every context of the sweep, whether the default was the fastest FP8 configuration or by how much
    another one beat it; and on an NVFP4 cache, the best version-3 configuration against the best version-2 one, with
    the NVFP4 default version (attention_nvfp4kv.DEFAULT_VERSION). Each sentence only where the sweep timed what it
    compares."""
    from fp8lab.kernels import attention_nvfp4kv as nv
    from fp8lab.kernels import bench_attention as ba

    out = []
    b0, b1 = ba.sweep_best(sweep, "fp8cvt", 3, copy=0), ba.sweep_best(sweep, "fp8cvt", 3, copy=1)
    if b0 and b1:
        out.append(f"Version 3 on an FP8 cache: the best copy-per-tile configuration {tuple(b1['config'])} reads at "
                   f"{b1['fraction_of_copy_bw']:.2f} of copy bandwidth, the best copy-per-row one "
                   f"{tuple(b0['config'])} at {b0['fraction_of_copy_bw']:.2f} ({b0['time_us'] / b1['time_us']:.2f}× "
                   "the time): "
                   + ("the copy loop costs more than the bank conflicts it avoids." if b0["time_us"] > b1["time_us"]
                      else "here the padded rows pay for their copy loop."))
    said = []
    for L in sorted({r["context"] for r in sweep.get("results", []) if r.get("context")}):
        best, dflt = ba.sweep_vs_default(sweep, "fp8cvt", 3, context=L)
        if not (best and dflt):
            continue
        if tuple(best["config"]) == tuple(dflt["config"]):
            said.append(f"at {L // 1024}k the default {tuple(dflt['config'])} is the fastest FP8 configuration")
        else:
            said.append(f"at {L // 1024}k the fastest FP8 configuration is {tuple(best['config'])}, "
                        f"{dflt['time_us'] / best['time_us']:.3f}× as fast as the default {tuple(dflt['config'])}")
    if said:
        out.append("In this sweep " + "; ".join(said) + ". A configuration becomes a default only once it has been "
                   "measured at every context the lab records, not at one; where the best one depends on the cache's "
                   "size, the default does too (the rule below).")
    b2, b3 = ba.sweep_best(sweep, "nvfp4", 2), ba.sweep_best(sweep, "nvfp4", 3)
    if b2 and b3:
        ratio = b3["time_us"] / b2["time_us"]
        out.append(f"On an NVFP4 cache the best version-3 configuration takes {ratio:.2f}× the time of the best "
                   f"version-2 one {tuple(b2['config'])} ({b3['fraction_of_copy_bw']:.2f} against "
                   f"{b2['fraction_of_copy_bw']:.2f} of copy bandwidth)" + (
                       ": the copy engine does not help there. An NVFP4 tile is 0.5625 bytes per element and every "
                       "pair of nibbles is widened by integer bit moves, so its time goes to arithmetic rather than to "
                       f"moving bytes; version 2's best configuration updates the softmax once per {b2['config'][0]} "
                       "tile(s), which version 3 cannot." if ratio > 1 else ".")
                   + f" The NVFP4 default is version {nv.DEFAULT_VERSION}.")
    return out


def v3_default_rule_line() -> str:
    """This tree's size rule for version 3's default (attention_fp8kv.v3_default) as one line: per (format, head dim,
    group) that has a long-cache configuration, the short-cache default below the threshold in rows (batch x KV
    heads x tokens) and the long-cache one from there on."""
    from fp8lab.kernels import attention_fp8kv as att

    return "the rule: " + str({k: f"{att.V3_DEFAULTS[k]} below {att.V3_LONG_ROWS} rows, {v} from there on"
                               for k, v in att.V3_LONG_DEFAULTS.items()})


def default_rule_reading(data: dict) -> str:
    """A decode-attention recording's check of the size rule (default_rule_sentence over bench_attention.
    default_rule_rows, on the recording's device); a recording made before the rule timed no alternative beside the
    default, and then the sentence says which default it timed: the one launched when it was recorded where that is
    not this tree's (recorded_default_sentence, stated after the lab's target), else the one this tree's rule picks."""
    from fp8lab.kernels import bench_attention as ba

    return (default_rule_sentence(ba.default_rule_rows(data), (data.get("provenance") or {}).get("device"))
            or "This recording holds no timing of the rule's other choice: it timed one default at every context, "
            + ("the one launched when it was recorded (the note after the lab's target, above, says where that is "
               "not this tree's)." if recorded_default_sentence(data) else "the one this tree's rule picks."))


def missed_goals_sentence(goals: list[dict]) -> str | None:
    """The decode-attention targets a run missed (bench_attention.goals_table rows whose verdict is False, not the
    ones it did not measure), each with its context, measured value and threshold. None where none was missed."""
    miss = [g for g in goals if g["met"] is False]
    if not miss:
        return None
    return "Missed: " + "; ".join(f"{g['what']} at {g['context'] // 1024}k, {g['measured']:.2f} against "
                                  f"{g['threshold']}" for g in miss) + "."


def attention_fixed_cost_sentence(data: dict) -> str | None:
    """Our default FP8 decode kernel against torch's pick in the fit time = fixed + cache bytes / rate
    (bench_attention.fixed_cost_default_vs_torch, D = 128, contiguous): each one's fixed part per call and streaming
    rate, the fixed part's share of our shortest context's step and the fraction of copy bandwidth the kernel would
    read there without it, and why a fixed cost (and a slower stream) weighs on the ratio to torch. None where either
    fit is missing."""
    from fp8lab.kernels import bench_attention as ba

    f, t = ba.fixed_cost_default_vs_torch(data)
    if not (f and t):
        return None
    return (f"Our default FP8 kernel pays **{f['fixed_us']:.1f} µs** per call whatever the context and streams at "
            f"**{f['rate_TBps']:.2f} TB/s**; torch's pick pays {t['fixed_us']:.1f} µs and streams its bf16 cache at "
            f"{t['rate_TBps']:.2f} TB/s. At {f['shortest'] // 1024}k the fixed part is {f['fixed_share']:.0%} of our "
            f"FP8 step; without it the kernel would read at {f['xcopy_without_fixed']:.2f} of copy bandwidth there. "
            "A fixed cost paid on half the bytes weighs twice as much in the ratio to torch" +
            (", and a stream slower than torch's leaves less than the factor of two that the bytes promise."
             if f["rate_TBps"] and t["rate_TBps"] and f["rate_TBps"] < t["rate_TBps"] else "."))


def merge_in_kernel_sentence(data: dict) -> str | None:
    """What merging the splits inside version 3's kernel saves per call against the second (reduce) launch, timed in
    the same run (bench_attention.merge_comparison), counted where the two rows' quartile ranges lie apart; the
    comparisons within the spread; the default FP8 kernel's fitted fixed part (attention_fixed_cost_sentence's fit);
    and, where that fixed part is within 1.5 µs of torch's while our stream is slower, that the stream rate, not the
    per-call overhead, separates the two at short context. None where no comparison lies apart."""
    from fp8lab.kernels import bench_attention as ba

    mc = ba.merge_comparison(data)
    sep = [r for r in mc if r["separated"]]
    if not sep:
        return None
    sv = [r["saved_us"] for r in sep]
    rest = [r for r in mc if not r["separated"]]
    f, t = ba.fixed_cost_default_vs_torch(data)
    gap = (f["fixed_us"] - t["fixed_us"]) if f and t else None
    what = (f"saves {min(sv):.1f} to {max(sv):.1f} µs" if min(sv) > 0
            else f"changes the call time by {-max(sv):+.1f} to {-min(sv):+.1f} µs")
    return (f"Where the two rows' quartiles do not overlap, merging inside the kernel {what} per call in this run" +
            (f" ({len(rest)} comparison(s) fall within the rounds' spread)" if rest else "") +
            (f"; the fixed part fitted above is {f['fixed_us']:.1f} µs." if f else ".") + (
                (" With it, our fixed part equals torch's to 0.1 µs" if abs(gap) < 0.05 else
                 f" With it, our fixed part is within {abs(gap):.1f} µs of torch's") + ", so what separates the two at "
                f"short context is the stream rate ({f['rate_TBps']:.2f} against {t['rate_TBps']:.2f} TB/s), not the "
                "per-call overhead." if gap is not None and abs(gap) < 1.5 and f["rate_TBps"] < t["rate_TBps"]
                else ""))
