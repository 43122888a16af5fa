"""Kernel benchmark results for notebooks, for any family (quant, gemm, attention): live or recorded.

    s = summarize("quant")          # on a CUDA machine: a small live run; elsewhere: outputs/kernels/quant.json
    print(s.banner)                 # says which, and for recorded results where/when/how they were measured
    print(format_table(s))          # kernel, shape, time, GB/s, fraction of copy bandwidth, speedup vs anchor
    print(format_goals(s, GOALS))   # each goal, the measured value, met or not
    plot_bars(s, "fraction_of_copy_bw")

A recorded timing is never presented as measured here, and nothing is made up: every number shown comes from
the JSON written by `python -m fp8lab.kernels.bench <family>` (schema in harness.py) or from the live run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from fp8lab import provenance

from . import harness

OUTPUTS = harness.REPO / "outputs" / "kernels"
COLUMNS = ("kernel", "shape", "time_us", "gbps", "fraction_of_copy_bw", "speedup", "anchor")


@dataclass
class Summary:
    """What a notebook shows: where the numbers come from (`source`, `banner`, `provenance`) and the rows."""

    family: str
    source: str                     # "recorded" or "live"
    banner: str
    provenance: dict
    ceilings: dict
    table: list
    checks: dict = field(default_factory=dict)
    notes: dict = field(default_factory=dict)
    sass: dict = field(default_factory=dict)
    path: str = ""


def _commit(prov: dict) -> str:
    """The recorded commit; when the device copy had no git checkout, the tree's HEAD noted after the run."""
    c = prov.get("git_commit", "?")
    extra = prov.get("added_after_fetch", {})
    if c in ("unknown", "?") and extra.get("git_head_of_tree"):
        return f"{extra['git_head_of_tree']} (noted after the run; sources' sha256 in the JSON provenance)"
    return c


def _state(prov: dict) -> str:
    """'clean', 'DIRTY tree' or 'tree state unknown': what fp8lab.provenance.describe says of the record."""
    from fp8lab.provenance import describe

    line = describe(prov)
    return next((w for w in ("clean", "DIRTY tree", "tree state unknown") if f"({w})" in line), "tree state unknown")


def _rel(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(harness.REPO))
    except ValueError:
        return str(path)


def _banner(source: str, prov: dict, path: Path) -> str:
    what = ("LIVE results, measured just now on this machine (small shapes)" if source == "live" else
            "RECORDED results: measured earlier on another machine, read from the repository, not measured here")
    f = provenance.flat(prov)
    lines = [what,
             f"  device : {f.get('device') or '?'}  (torch {f.get('torch') or '?'}, CuPy {f.get('cupy') or '?'}, "
             f"CUDA {f.get('cuda') or '?'})",
             f"  commit : {' '.join(_commit(prov).split())} ({_state(prov)})",
             f"  date   : {prov.get('date', '?')}",
             f"  command: {prov.get('command', '?')}",
             f"  file   : {_rel(path)}"]
    return "\n".join(lines)


def with_vs_compile(rows: list[dict]) -> list[dict]:
    """Quantization-kernel rows (a Summary's table; load_and_summarize adds it) with `speedup_vs_compile` added: the time of
    the torch.compile anchor of the same work, timed in the same run, over the row's own time (> 1: the row is
    faster). The compile anchor is the row named like the row's eager anchor with 'torch eager' -> 'torch.compile'.
    None for the anchors themselves and where the run compiled no such anchor (a live notebook run skips
    torch.compile). Rounded to two decimals, as the tables print it. The rows are updated in place and returned.

        with_vs_compile([{"kernel": "q", "time_us": 50.0, "anchor": "torch eager x"},
                         {"kernel": "torch.compile x", "time_us": 100.0, "anchor": "torch eager x"}])[0]["speedup_vs_compile"] -> 2.0
    """
    by_name = {r.get("kernel"): r for r in rows}
    for r in rows:
        a = str(r.get("anchor") or "")
        c = by_name.get(a.replace("torch eager", "torch.compile", 1)) if a.startswith("torch eager") else None
        ok = (c is not None and not str(r.get("kernel", "")).startswith(("torch", "copy")) and c.get("time_us")
              and r.get("time_us"))
        r["speedup_vs_compile"] = round(c["time_us"] / r["time_us"], 2) if ok else None
    return rows



def load_and_summarize(path: str | Path, live: bool = False, family: str | None = None) -> Summary:
    """Read a benchmark JSON (harness schema) into a Summary; `live` says whether it was measured just now. Each
    row also gets its ratio to the torch.compile anchor of the same run (with_vs_compile)."""
    path = Path(path)
    d = harness.load_json(path)
    prov = d.get("provenance", {})
    source = "live" if live else "recorded"
    return Summary(family=family or path.stem, source=source, banner=_banner(source, prov, path), provenance=prov,
                   ceilings=d.get("ceilings", {}), table=with_vs_compile(list(d.get("results", []))),
                   checks=d.get("checks", {}),
                   notes=d.get("notes", {}), sass=d.get("sass", {}), path=str(path))


def summarize(family: str, live: bool | None = None, timeout: int = 900, extra_args=("--small", "--no-compile")) -> Summary:
    """Live (a small run of the family's benchmark in a subprocess) where a CUDA device exists and FP8LAB_LIVE
    is not "0"; otherwise the recorded outputs/kernels/<family>.json."""
    if live is None:
        from ._cuda import cuda_available

        live = cuda_available() and os.environ.get("FP8LAB_LIVE", "1") != "0"
    if not live:
        return load_and_summarize(OUTPUTS / f"{family}.json", live=False, family=family)
    out = Path(tempfile.mkdtemp(prefix=f"fp8lab_{family}_")) / f"{family}.json"
    subprocess.run([sys.executable, "-m", "fp8lab.kernels.bench", family, "--out", str(out), *extra_args],
                   cwd=harness.REPO, check=True, timeout=timeout)
    return load_and_summarize(out, live=True, family=family)


def fixed_plus_stream(points) -> dict | None:
    """time = fixed + bytes / rate, fitted by least squares to (MB, us) points: the one fit of the decode reports
    (gemm_report.fixed_cost_fit, bench_attention.fixed_cost_fit). None for fewer than 3 points.

    `fixed_us`: the part of a call that does not grow with the bytes (launches, ramp-up, the tail, a merge);
    `rate_TBps`: the streaming rate once running (None if the times do not grow with the bytes); `r2`: how well a
    straight line explains the times.

        fixed_plus_stream([(100, 30.0), (200, 55.0), (400, 105.0)]) -> {"fixed_us": 5.0, "rate_TBps": 4.0, "r2": 1.0, ...}
    """
    import numpy as np

    pts = list(points)
    if len(pts) < 3:
        return None
    x, y = np.array(pts, dtype=float).T
    (fixed, slope), *_ = np.linalg.lstsq(np.vstack([np.ones_like(x), x]).T, y, rcond=None)
    pred = fixed + slope * x
    ss = float(((y - y.mean()) ** 2).sum())
    return {"points": len(pts), "fixed_us": float(fixed), "rate_TBps": float(1 / slope) if slope > 0 else None,
            "r2": 1 - float(((y - pred) ** 2).sum()) / ss if ss > 0 else None}


def _fmt(v, spec: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def _table(head: list[str], cells: list[list[str]]) -> str:
    """Header and cells as aligned text: the first column left-aligned, the others right-aligned."""
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(head)]
    line = lambda vals: "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(vals, widths)))
    return "\n".join([line(head), "-" * (sum(widths) + 2 * (len(widths) - 1))] + [line(c) for c in cells])


def format_table(s: Summary, columns=COLUMNS, where=None) -> str:
    """A plain-text table of the rows (optionally those for which where(row) is true)."""
    rows = [r for r in s.table if where is None or where(r)]
    specs = {"time_us": ".1f", "gbps": ".0f", "fraction_of_copy_bw": ".2f", "speedup": ".2f", "tflops": ".1f"}
    cells = [[_fmt(r.get(c), specs.get(c, "")) for c in columns] for r in rows]
    return _table([c.replace("fraction_of_copy_bw", "x copy bw") for c in columns], cells)


def format_columns(rows: list[dict], columns: dict) -> str:
    """Rows as a plain-text table, one column per header of `columns` (header -> (key, format spec)): numbers
    right-aligned, a missing value '-' in line with its column. Ratios are printed bare (the header says what they
    are), so a missing one cannot come out as '-x' glued to its neighbour.

        format_columns(bench_attention.summary_rows(data), bench_attention.SUMMARY_COLUMNS)   # format_summary
    """
    cells = [[_fmt(r.get(k), spec) for k, spec in columns.values()] for r in rows]
    return _table(list(columns), cells) if rows else "(no rows)"


def find(s: Summary, kernel: str) -> dict | None:
    """The row whose kernel name equals `kernel` (None if that kernel was not measured)."""
    return next((r for r in s.table if r.get("kernel") == kernel), None)


def goal_repeats(runs: list[dict], goals) -> list[dict]:
    """One recording repeated (runs: loaded files, one GPU) read goal by goal: `goals(data)` -> that file's goal rows
    (dicts with goal, what, context, threshold, measured, met; e.g. bench_attention.goals_table). Per (goal, context),
    in the order of the first run's rows: each run's value ('measured_runs', run order; a run that did not measure it
    is left out), their median, min and max, how many runs met the threshold ('met_runs' of 'runs'), and 'met_median':
    the threshold read on the median (None where no run measured it), and the median's distribution-free interval
    ('median_lo', 'median_hi', 'median_coverage': stats.median_interval; None where no run measured it). The median over
    runs is the verdict a single run cannot give where the runs disagree; its interval says whether the runs decide."""
    from fp8lab.stats import median_interval

    from .harness import quartiles

    per: dict = {}
    for d in runs:
        for g in goals(d):
            row = per.setdefault((g["goal"], g["context"]), {"goal": g["goal"], "what": g["what"], "context": g["context"],
                                                             "threshold": g["threshold"], "measured_runs": [], "met_runs": 0})
            if g.get("measured") is not None and g.get("met") is not None:
                row["measured_runs"].append(g["measured"])
                row["met_runs"] += bool(g["met"])
    out = []
    for row in per.values():
        xs = row["measured_runs"]
        med = quartiles(xs)[1] if xs else None
        lo, hi, cov = median_interval(xs) if xs else (None, None, None)
        row.update(runs=len(xs), median=med, min=min(xs) if xs else None, max=max(xs) if xs else None,
                   met_median=None if med is None else bool(med >= row["threshold"]),
                   median_lo=lo, median_hi=hi, median_coverage=cov)
        out.append(row)
    return out


def format_goal_repeats(rows: list[dict]) -> str:
    """goal_repeats rows as text: the goal, the context, each run's value, the median, runs met, verdict on the median."""
    lines = [f"{'goal':44s} {'context':>7s} {'runs (run order)':24s} {'median':>6s} {'goal':>5s} {'met in':>7s}  on the median"]
    for r in rows:
        runs = " ".join(f"{x:.3f}" for x in r["measured_runs"]) or "-"
        med = "-" if r["median"] is None else f"{r['median']:.3f}"
        verdict = "not measured" if r["met_median"] is None else ("met" if r["met_median"] else "NOT met")
        lines.append(f"{r['what'].split(' (')[0][:44]:44s} {r['context'] // 1024:>6d}k {runs[:24]:24s} {med:>6s} {r['threshold']:>5} "
                     f"{r['met_runs']:>3d} of {r['runs']}  {verdict}")
    return "\n".join(lines)


def format_goals(s: Summary, goals) -> str:
    """goals: iterable of (label, kernel name, metric key, threshold). Prints measured vs goal, met or not."""
    out = []
    for label, kernel, key, thr in goals:
        r = find(s, kernel)
        v = None if r is None else r.get(key)
        status = "not measured" if v is None else ("met" if v >= thr else "NOT met")
        out.append(f"{label:58s} goal >= {thr:<5g} measured {_fmt(v, '.2f'):>6s}   {status}")
    return "\n".join(out)


def format_checks(s: Summary) -> str:
    """The correctness checks recorded with the timings (exhaustive conversions, validation before timing)."""
    return "\n".join(f"{k:44s} {json.dumps(v)}" for k, v in s.checks.items()) or "(no checks recorded)"


def format_sass(s: Summary) -> str:
    """Instruction counts per kernel from the SASS summary recorded by the benchmark (nvcc + cuobjdump)."""
    if not s.sass or "status" in s.sass:
        return f"(no SASS summary: {s.sass.get('status', 'not recorded') if s.sass else 'not recorded'})"
    lines = []
    for k, v in s.sass.items():
        if isinstance(v, dict):
            top = ", ".join(f"{op} {n}" for op, n in list(v.get("top", {}).items())[:8])
            lines.append(f"{k:34s} {v.get('instructions', '?'):5} instr  BRA {v.get('BRA', 0):3}  MUFU {v.get('MUFU', 0):3}  "
                         f"FCHK {v.get('FCHK', 0):3}  F2FP {v.get('F2FP', 0):3} | {top}")
        else:
            lines.append(f"{k:34s} {v}")
    return "\n".join(lines)


def plot_bars(s: Summary, metric: str = "fraction_of_copy_bw", where=None, ax=None, title: str | None = None):
    """Horizontal bars of one metric per kernel (rows without the metric are skipped). Returns the axes."""
    import matplotlib.pyplot as plt

    rows = [r for r in s.table if r.get(metric) is not None and (where is None or where(r))]
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.32 * max(3, len(rows)) + 1))
    names = [f"{r['kernel']} {r.get('shape', '')}"[:60] for r in rows]
    vals = [r[metric] for r in rows]
    anchor = [r["kernel"].startswith(("torch", "copy")) for r in rows]
    ax.barh(range(len(rows)), vals, color=["tab:gray" if a else "tab:blue" for a in anchor])
    ax.set_yticks(range(len(rows)), names, fontsize=8)
    ax.invert_yaxis()
    if metric == "fraction_of_copy_bw" or metric.startswith("speedup"):
        ax.axvline(1.0, color="k", lw=0.8, ls="--")
    from matplotlib.patches import Patch

    handles = [Patch(color="tab:blue", label="the lab's kernels")]
    if any(anchor):
        handles.append(Patch(color="tab:gray", label="anchors measured in the same run (torch eager, torch.compile, copy)"))
    # below the axes and their label (half an inch down), where it cannot cover a bar
    h_in = ax.figure.get_size_inches()[1] * ax.get_position().height
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.5 / h_in), ncol=len(handles), fontsize=8,
              frameon=False)
    ax.set_xlabel(metric.replace("_", " "))
    src = "recorded" if s.source == "recorded" else "live"
    ax.set_title(title or f"{s.family}: {metric} ({src}, {s.provenance.get('device', '?')})", fontsize=9)
    return ax
