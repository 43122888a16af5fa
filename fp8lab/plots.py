"""Figures of the sweep, drawn from results.csv only (so drawing never recomputes anything).

One panel per task and metric (accuracy and length-normalized accuracy side by side where the task has
both): each recipe's change against the baseline as a bar with its 95 % interval, sorted, with the zero
line; the absolute value (perplexity, accuracy in %) on the top axis, so the baseline reads in the same
units; n in the panel title; the model note in the footer. Sized for a slide.

    >>> plot_sweep("runs/default/results.csv", "runs/default")
    [PosixPath('runs/default/sweep.png'), PosixPath('runs/default/sweep_ppl.png'), ...]

Colour says what the interval says: red = reliably worse than the baseline, blue = reliably better,
grey = the interval includes zero (no detectable change at this n). Hatched bars are oracle recipes (their
scales see future tokens; see fp8lab.recipes); "k changed" beside a multiple-choice bar counts the
questions the recipe answered differently, the only ones that carry information. A legend below the panels
says all of this, and never covers a bar.
"""
from __future__ import annotations

import math
import textwrap
from collections import defaultdict
from pathlib import Path

from fp8lab.results import KEY_FIELDS, key, read_results
from fp8lab.store import DamagedFile, save_figure

__all__ = ["plot_sweep", "PANEL_METRICS", "TASK_TITLES", "title_for", "NothingToPlot"]

PANEL_METRICS = {"ppl": ("ppl",), "ppl_lambada": ("ppl",), "ppl_wikitext": ("ppl",), "mmlu": ("acc",),
                 "hellaswag": ("acc", "acc_norm"), "arc_easy": ("acc", "acc_norm"), "piqa": ("acc", "acc_norm")}
TASK_TITLES = {"ppl": "perplexity, BoolQ passages", "ppl_lambada": "perplexity, LAMBADA passages",
               "ppl_wikitext": "perplexity, wikitext-2", "mmlu": "MMLU (5-shot)", "hellaswag": "HellaSwag",
               "arc_easy": "ARC-Easy", "piqa": "PIQA"}
METRIC_TITLES = {"ppl": "", "acc": "accuracy", "acc_norm": "acc_norm (length-normalized)"}
ORDER = list(PANEL_METRICS)
_RED, _BLUE, _GREY = "#c0392b", "#2e6fb7", "#9a9a9a"
_FAMILY = {"e4m3": "FP8", "e5m2": "FP8", "nvfp4": "NVFP4", "mxfp4": "MXFP4", "int8": "INT8", "bf16": "BF16"}


#: the numeric columns a panel draws from: each must be a finite number in every row drawn
NUMERIC_FIELDS = ("baseline", "delta_pct", "ci95_low", "ci95_high")


class NothingToPlot(ValueError):
    """The results hold no rows to draw (an empty table, or none of the requested rows)."""


def _checked(csv_path, numbered: list) -> list[dict]:
    """The rows a panel draws, each checked: `DamagedFile` naming the file, line and column of a value that is
    not a finite number (the sweep never writes one: every interval it stores is finite), or of an n that is
    not a positive count. `numbered`: (line, row) pairs."""
    out = []
    for line, r in numbered:
        if r.get("metric") not in PANEL_METRICS.get(r.get("task"), ()):
            continue
        for col in NUMERIC_FIELDS:
            try:
                ok = math.isfinite(float(r[col]))
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise DamagedFile(f"{csv_path}: line {line}, column {col}: {r[col]!r} is not a finite number")
        if not str(r["n"]).isdigit() or int(r["n"]) < 1:
            raise DamagedFile(f"{csv_path}: line {line}, column n: {r['n']!r} is not a positive count")
        out.append(r)
    return out


def title_for(recipes) -> str:
    """What the recipes are, for a figure title: title_for(["e4m3-w", "nvfp4-w"]) -> "FP8 and NVFP4 recipes"."""
    from fp8lab.recipes import RECIPES, recipe_formats
    fams = []
    for r in recipes:
        if r in RECIPES:
            for f in recipe_formats(r):
                fam = _FAMILY.get(f, f.upper())
                if fam not in fams:
                    fams.append(fam)
    if not fams:
        return "Recipes"
    return (", ".join(fams[:-1]) + " and " + fams[-1] if len(fams) > 1 else fams[0]) + " recipes"


def _select(rows: list[dict]) -> dict:
    """{model: {(task, metric): rows of one setting}}; for a task run at several settings, the largest n."""
    groups: dict = defaultdict(list)
    for r in rows:
        if r["metric"] in PANEL_METRICS.get(r["task"], ()):
            ident = tuple(str(r.get(k, "")) for k in KEY_FIELDS if k not in ("recipe",))
            groups[(ident, r["metric"])].append(r)
    best: dict = {}
    for (ident, metric), g in groups.items():
        model, task = g[0]["model"], g[0]["task"]
        score = (max(int(x["n"]) for x in g), len(g))
        if (model, task, metric) not in best or score > best[(model, task, metric)][0]:
            best[(model, task, metric)] = (score, g)
    out: dict = defaultdict(dict)
    for (model, task, metric), (_, g) in best.items():
        out[model][(task, metric)] = g
    return out


def _is_oracle(r: dict) -> bool:
    return str(r.get("causal", "")) == "False"


def _panel(ax, task: str, metric: str, rows: list[dict]) -> None:
    rs = [r for r in rows if r["recipe"] != "baseline"]
    higher_is_worse = task.startswith("ppl")
    rs.sort(key=lambda r: float(r["delta_pct"]), reverse=not higher_is_worse)   # best at the top
    base = float(rows[0]["baseline"])
    span = max([abs(float(r["ci95_low"])) for r in rs] + [abs(float(r["ci95_high"])) for r in rs] + [1e-9])
    for i, r in enumerate(rs):
        d, lo, hi = float(r["delta_pct"]), float(r["ci95_low"]), float(r["ci95_high"])
        worse = (lo > 0) if higher_is_worse else (hi < 0)
        better = (hi < 0) if higher_is_worse else (lo > 0)
        c = _RED if worse else _BLUE if better else _GREY
        ax.barh(i, d, height=0.62, color=c, alpha=0.85, edgecolor="black" if _is_oracle(r) else c,
                hatch="//" if _is_oracle(r) else None, lw=0.8)
        ax.errorbar(d, i, xerr=[[d - lo], [hi - d]], fmt="none", ecolor="black", capsize=5, lw=1.8)
        if str(r.get("changed", "")) != "":
            ax.text(hi + 0.02 * span, i, f"{r['changed']} changed", va="center", fontsize=10, color="#333333")
    ax.axvline(0.0, color="black", lw=1.2)
    ax.set_yticks(range(len(rs)))
    ax.set_yticklabels([r["recipe"] + (" (oracle)" if _is_oracle(r) else "") for r in rs], fontsize=13)
    ax.set_ylim(len(rs) - 0.4, -0.6)
    lows = [float(r["ci95_low"]) for r in rs] + [0.0]
    highs = [float(r["ci95_high"]) for r in rs] + [0.0]
    # only the side that has data: a single slightly negative interval must not halve the useful width
    ax.set_xlim(min(lows) - 0.15 * span if min(lows) < 0 else -0.05 * span,
                max(highs) + 0.3 * span if max(highs) > 0 else 0.05 * span)
    ax.tick_params(axis="x", labelsize=12)
    ax.grid(axis="x", alpha=0.3)
    n = rows[0]["n"]
    if task.startswith("ppl"):
        ax.set_xlabel("perplexity change vs baseline (%)", fontsize=13)
        top = ax.secondary_xaxis("top", functions=(lambda d: base * (1 + d / 100), lambda v: (v / base - 1) * 100))
        top.set_xlabel(f"perplexity (baseline {base:.4g} at 0)", fontsize=11)
        what = f"{n} windows x {rows[0]['seq_len']} tokens"
        ttl = f"{TASK_TITLES.get(task, task)}"
    else:
        ax.set_xlabel("accuracy change vs baseline (percentage points)", fontsize=13)
        top = ax.secondary_xaxis("top", functions=(lambda d: base * 100 + d, lambda v: v - base * 100))
        top.set_xlabel(f"{metric} (%), baseline {base * 100:.1f} % at 0", fontsize=11)
        what = f"n = {n} questions"
        ttl = f"{TASK_TITLES.get(task, task)} {METRIC_TITLES.get(metric, metric)}"
    top.tick_params(labelsize=10)
    ax.set_title(f"{ttl}\n{what}", fontsize=14)


def _legend_and_footer(fig, model: str, note: str, any_oracle: bool, any_mc: bool) -> float:
    """Legend and footer below the panels; returns the figure fraction they take (for tight_layout)."""
    from matplotlib.patches import Patch
    handles = [Patch(color=_RED, label="reliably worse (interval above/below zero)"),
               Patch(color=_BLUE, label="reliably better"),
               Patch(color=_GREY, label="interval includes zero: no detectable change")]
    if any_oracle:
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//",
                             label="oracle: its scales see future tokens (not deployable)"))
    fig.legend(handles=handles, loc="lower center", ncol=2 if len(handles) > 3 else 3, fontsize=11,
               frameon=False, bbox_to_anchor=(0.5, 0.0))
    how = ("95 % intervals: paired bootstrap over windows / questions; exact (Clopper-Pearson on the questions "
           "that changed, or the rule of three when none did) where fewer than 10 questions changed."
           if any_mc else "95 % intervals: paired bootstrap over windows.")
    text = f"{model}: {note}. {how}"
    width = int(fig.get_figwidth() * 11)
    wrapped = "\n".join(textwrap.wrap(text, width))
    fig.text(0.01, 0.01 + 0.3 / fig.get_figheight() * (2 if len(handles) > 3 else 1), wrapped, fontsize=10,
             ha="left", va="bottom", color="#444444")
    lines = wrapped.count("\n") + 1 + (2 if len(handles) > 3 else 1)
    return min(0.45, (0.3 + 0.2 * lines) / fig.get_figheight())


def _figure(panels: list, model: str, note: str, title: str | None, width_per: float = 7.5):
    from matplotlib.figure import Figure
    n_rec = max(len(g) for _, g in panels)
    height = 2.4 + 0.5 * n_rec
    fig = Figure(figsize=(max(width_per * len(panels), 11.0), height + 2.2))   # wide enough for legend and title
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, ((task, metric), g) in zip(axes, panels):
        _panel(ax, task, metric, g)
    any_oracle = any(_is_oracle(r) for _, g in panels for r in g)
    any_mc = any(not t.startswith("ppl") for (t, _), _ in panels)
    bottom = _legend_and_footer(fig, model, note, any_oracle, any_mc)
    if title:
        fig.suptitle("\n".join(textwrap.wrap(title, int(fig.get_figwidth() * 6))), fontsize=17)
    fig.tight_layout(rect=(0, bottom, 1, 0.97 if title else 1))
    return fig


def plot_sweep(csv_path: str | Path, out_dir: str | Path, only=None) -> list[Path]:
    """Draw sweep.png (every panel) and sweep_<task>.png from a results CSV; returns the paths written.

    `only`: a set of row keys (fp8lab.results.key) to draw, e.g. the rows of the run that just finished."""
    numbered = list(enumerate(read_results(csv_path, allow_legacy=True), start=2))   # line 1 is the header
    if only is not None:
        numbered = [(i, r) for i, r in numbered if key(r) in only]
    if not numbered:
        raise NothingToPlot(f"{csv_path} holds no rows to plot")
    rows = _checked(csv_path, numbered)
    out_dir = Path(out_dir)
    sel = _select(rows)
    paths = []
    many = len(sel) > 1
    for model, panels in sel.items():
        prefix = f"sweep_{model}" if many else "sweep"
        note = next(iter(panels.values()))[0].get("model_note", "")
        order = sorted(panels, key=lambda tm: (ORDER.index(tm[0]) if tm[0] in ORDER else 99, tm[1]))
        recipes = sorted({r["recipe"] for g in panels.values() for r in g})
        title = f"{title_for(recipes)} vs baseline: {model}"
        fig = _figure([(tm, panels[tm]) for tm in order], model, note, title)
        paths.append(save_figure(fig, out_dir / f"{prefix}.png"))
        for task in dict.fromkeys(t for t, _ in order):
            mine = [(tm, panels[tm]) for tm in order if tm[0] == task]
            fig = _figure(mine, model, note, None, width_per=9.5)
            paths.append(save_figure(fig, out_dir / f"{prefix}_{task}.png"))
    return paths
