"""Figures of the sweep, drawn from results.csv only (so `--plot` never recomputes anything).

One panel per task: each recipe's change against the baseline with its 95 % paired-bootstrap interval,
sorted, with the zero line; n in the panel title; the model note in the footer. Sized for a slide.

    >>> plot_sweep("outputs/results.csv", "outputs")
    [PosixPath('outputs/sweep.png'), PosixPath('outputs/sweep_ppl.png'), PosixPath('outputs/sweep_arc_easy.png')]

Colour says what the interval says: red = reliably worse than the baseline, blue = reliably better,
grey = the interval includes zero (no detectable change at this n).
"""
from __future__ import annotations

import textwrap
from collections import defaultdict
from pathlib import Path

__all__ = ["plot_sweep", "PRIMARY_METRIC", "TASK_TITLES"]

PRIMARY_METRIC = {"ppl": "ppl", "ppl_lambada": "ppl", "ppl_wikitext": "ppl", "mmlu": "acc",
                  "hellaswag": "acc_norm", "arc_easy": "acc", "piqa": "acc"}
TASK_TITLES = {"ppl": "perplexity, BoolQ passages", "ppl_lambada": "perplexity, LAMBADA passages",
               "ppl_wikitext": "perplexity, wikitext-2", "mmlu": "MMLU (5-shot) accuracy",
               "hellaswag": "HellaSwag acc_norm", "arc_easy": "ARC-Easy accuracy", "piqa": "PIQA accuracy"}
ORDER = list(PRIMARY_METRIC)
_RED, _BLUE, _GREY = "#c0392b", "#2e6fb7", "#8c8c8c"


def _select(rows: list[dict]) -> dict:
    """{model: {task: [rows of the primary metric, one size]}}; for a task run at several sizes, the largest."""
    out: dict = defaultdict(dict)
    groups: dict = defaultdict(list)
    for r in rows:
        if r["metric"] == PRIMARY_METRIC.get(r["task"]):
            groups[(r["model"], r["task"], r["size"], r.get("seq_len", ""), r.get("seed", ""))].append(r)
    best: dict = {}
    for (model, task, *_), g in groups.items():
        score = (max(int(x["n"]) for x in g), len(g))
        if (model, task) not in best or score > best[(model, task)][0]:
            best[(model, task)] = (score, g)
    for (model, task), (_, g) in best.items():
        out[model][task] = g
    return out


def _panel(ax, task: str, rows: list[dict]) -> None:
    rs = [r for r in rows if r["recipe"] != "baseline"]
    higher_is_worse = task.startswith("ppl")
    rs.sort(key=lambda r: float(r["delta_pct"]), reverse=not higher_is_worse)  # best at the top
    y = list(range(len(rs)))
    for i, r in enumerate(rs):
        d, lo, hi = float(r["delta_pct"]), float(r["ci95_low"]), float(r["ci95_high"])
        worse = (lo > 0) if higher_is_worse else (hi < 0)
        better = (hi < 0) if higher_is_worse else (lo > 0)
        c = _RED if worse else _BLUE if better else _GREY
        ax.errorbar(d, i, xerr=[[d - lo], [hi - d]], fmt="o", color=c, ms=9, capsize=6, lw=2.5)
    ax.axvline(0.0, color="black", lw=1.2)
    ax.set_yticks(y)
    ax.set_yticklabels([r["recipe"] for r in rs], fontsize=15)
    ax.invert_yaxis()
    unit = rows[0]["delta_unit"]
    ax.set_xlabel("change vs baseline (%)" if unit == "%" else "change vs baseline (percentage points)",
                  fontsize=14)
    ax.tick_params(axis="x", labelsize=13)
    base = rows[0]["baseline"]
    n = rows[0]["n"]
    what = f"{n} windows x {rows[0]['seq_len']} tok" if task.startswith("ppl") else f"n = {n} questions"
    ax.set_title(f"{TASK_TITLES.get(task, task)}\nbaseline {float(base):.4g}, {what}", fontsize=15)
    ax.grid(axis="x", alpha=0.3)


def _footer(fig, model: str, note: str) -> None:
    text = f"{model}: {note}. Bars: 95% paired bootstrap interval over windows / questions."
    width = int(fig.get_figwidth() * 10)          # ~10 characters per inch at 11 pt
    fig.text(0.01, 0.01, "\n".join(textwrap.wrap(text, width)), fontsize=11, ha="left", va="bottom",
             color="#444444")


def plot_sweep(csv_path: str | Path, out_dir: str | Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from fp8lab.sweep import read_csv

    rows = read_csv(csv_path)
    if not rows:
        raise ValueError(f"{csv_path} holds no rows to plot")
    out_dir = Path(out_dir)
    sel = _select(rows)
    paths = []
    many = len(sel) > 1
    for model, tasks in sel.items():
        prefix = f"sweep_{model}" if many else "sweep"
        note = next(iter(tasks.values()))[0].get("model_note", "")
        order = sorted(tasks, key=lambda t: ORDER.index(t) if t in ORDER else 99)
        n_rec = max(len(tasks[t]) for t in order)
        height = 1.6 + 0.55 * n_rec
        fig, axes = plt.subplots(1, len(order), figsize=(7.5 * len(order), height + 1.2), squeeze=False)
        for ax, t in zip(axes[0], order):
            _panel(ax, t, tasks[t])
        fig.suptitle(f"FP8 recipes vs baseline: {model}", fontsize=18, y=0.995)
        _footer(fig, model, note)
        fig.tight_layout(rect=(0, 0.06 + 0.25 / height, 1, 0.97))
        p = out_dir / f"{prefix}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
        for t in order:
            fig, ax = plt.subplots(figsize=(9.5, height + 1.2))
            _panel(ax, t, tasks[t])
            _footer(fig, model, note)
            fig.tight_layout(rect=(0, 0.08 + 0.3 / height, 1, 1))
            p = out_dir / f"{prefix}_{t}.png"
            fig.savefig(p, dpi=110)
            plt.close(fig)
            paths.append(p)
    return paths
