"""The sweep's results table: its columns, what makes a row unique, and a validated reader.

One row per model x recipe x task x metric x settings. A row's *identity* is every setting that changes one
of its numbers, so that a run with `--seed 1` (or another `--seq-len`, `--limit`, device, ...) into the same
folder adds rows beside seed 0's instead of overwriting or being confused with them:

    key(row) -> ("smollm2-135m", "b179c9523d0e6a0f", "e4m3-w", "ppl", "t8192", "512", "0", "", "cpu", "2000")
                 model           model_sha256        recipe    task   size     seq_len seed batch device n_boot

`size` is t<tokens> for perplexity and n<limit> (or n<all>) for multiple choice; seq_len only applies to
perplexity and batch_size only to multiple choice (perplexity windows always run one at a time).

The per-item files the rows are computed from live under `per_item/<model>-<sha12>/<cell>/<recipe>.json`,
where <cell> spells the same identity: `ppl-t8192-L512-s0-cpu`, `arc_easy-n40-b1-s0-cpu`.

Every row is computed from per-item files (`Cell`), never stored alone: a rerun rebuilds rows from the
cells it reuses, so the table always matches the statistics code. `compare` pairs any two recipes' cells.

Both the sweep (which writes the table) and the plots (which only read it) import this module; neither
imports the other.
"""
from __future__ import annotations

from pathlib import Path

from fp8lab.cli import UsageError  # noqa: F401 - a request the results cannot answer: one line, exit code 2
from fp8lab.store import DamagedFile, atomic_write_json, read_json, read_rows

__all__ = ["CSV_FIELDS", "KEY_FIELDS", "LEGACY_FIELDS", "PPL_TASKS", "key", "read_results", "cell_tag",
           "size_tag", "LegacyTable", "Cell", "rows_for", "delta_table", "compare", "PAIRED_STEPS", "paired_steps",
           "UsageError"]

PPL_TASKS = ("ppl", "ppl_lambada", "ppl_wikitext")
CSV_FIELDS = ["model", "model_sha256", "recipe", "causal", "task", "metric", "value", "baseline", "delta_pct",
              "ci95_low", "ci95_high", "ci_method", "changed", "delta_unit", "n", "size", "seq_len", "seed",
              "batch_size", "device", "n_boot", "seconds", "model_note"]
KEY_FIELDS = ("model", "model_sha256", "recipe", "task", "size", "seq_len", "seed", "batch_size", "device",
              "n_boot")
#: the columns of results.csv files written before rows carried causal / device / interval method
LEGACY_FIELDS = ["model", "model_sha256", "recipe", "task", "metric", "value", "baseline", "delta_pct",
                 "ci95_low", "ci95_high", "delta_unit", "n", "size", "seq_len", "seed", "seconds", "model_note"]


class LegacyTable(DamagedFile):
    """A results.csv in the older layout: readable for figures, never extended by a new run."""


def key(row: dict) -> tuple:
    return tuple(str(row.get(k, "")) for k in KEY_FIELDS)


def size_tag(task: str, tokens: int, limit: int | None) -> str:
    return f"t{tokens}" if task in PPL_TASKS else f"n{limit or 'all'}"


def cell_tag(task: str, size: str, seq_len, seed, batch_size, device: str) -> str:
    """The per-item folder name of one task under one set of settings (see the module docstring)."""
    if task in PPL_TASKS:
        return f"{task}-{size}-L{seq_len}-s{seed}-{device}"
    return f"{task}-{size}-b{batch_size}-s{seed}-{device}"


def read_results(path, allow_legacy: bool = False) -> list[dict]:
    """All rows of a results.csv, validated: header, row widths, a complete last line.

    [] when the file does not exist. `DamagedFile` when it cannot be trusted; `LegacyTable` (a DamagedFile)
    for the older column layout unless `allow_legacy`, in which case its rows are returned with the new
    columns filled in where they can be known (causal from the recipe table, device "cpu", the rest "")."""
    p = Path(path)
    if not p.is_file():
        return []
    first = p.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0].strip()
    if first.split(",") == LEGACY_FIELDS:
        if not allow_legacy:
            raise LegacyTable(f"{p} has the columns of an older fp8lab (no causal / device / ci_method): "
                              "a new run cannot extend it; rerun with --fresh to replace it (it stays in git "
                              "if committed), or use another --out")
        rows = read_rows(p, fieldnames=LEGACY_FIELDS)
        from fp8lab.recipes import RECIPES
        for r in rows:
            rec = RECIPES.get(r["recipe"])
            r.update(causal=str(rec.causal) if rec else "", ci_method="paired bootstrap", changed="",
                     batch_size="" if r["task"] in PPL_TASKS else "1", device="cpu", n_boot="2000")
        return rows
    return read_rows(p, fieldnames=CSV_FIELDS)


# ---- per-item files: the cells every row is computed from ---------------------------------------------
class Cell:
    """One recipe x task under one set of settings, and the file its per-item results live in."""

    def __init__(self, out: Path, lm, plan: dict, recipe: str, task: str):
        self.recipe, self.task = recipe, task
        self.size = size_tag(task, plan["tokens"], plan["limit"])
        ppl = task in PPL_TASKS
        self.identity = dict(model=lm.name, model_sha256=(lm.file_sha256 or "nohash")[:16], recipe=recipe,
                             task=task, size=self.size, seq_len=str(plan["seq_len"]) if ppl else "",
                             seed=str(plan["seed"]), batch_size="" if ppl else str(plan["batch_size"]),
                             device=plan["device"].split(":")[0])
        tag = cell_tag(task, self.size, plan["seq_len"], plan["seed"], plan["batch_size"],
                       self.identity["device"])
        self.path = out / "per_item" / f"{lm.name}-{(lm.file_sha256 or 'nohash')[:12]}" / tag / f"{recipe}.json"

    def label(self) -> str:
        return f"{self.recipe}/{self.task}"

    def load(self, fingerprint: str) -> dict | None:
        """The stored items if the file is there; `DamagedFile` if it is not whole, or not from these
        settings and data (the sweep then recomputes the cell with a one-line warning)."""
        if not self.path.is_file():
            return None
        d = read_json(self.path, required=("identity", "fingerprint", "seconds"))
        if d["identity"] != self.identity:
            raise DamagedFile(f"{self.path}: made with other settings {d['identity']}")
        if d["fingerprint"] != fingerprint:
            raise DamagedFile(f"{self.path}: scored other windows/questions than this run's")
        try:
            _check_items(d, self.task)
        except DamagedFile as e:
            raise DamagedFile(f"{self.path}: {e}") from None
        return d

    def save(self, items: dict) -> None:
        atomic_write_json(self.path, {"identity": self.identity, **items}, indent=None)


def _check_items(d: dict, task: str) -> None:
    import math
    if task in PPL_TASKS:
        for k in ("nll", "ntok", "nbytes"):
            if not isinstance(d.get(k), list) or not d[k]:
                raise DamagedFile(f"missing or empty {k!r}")
        if not len(d["nll"]) == len(d["ntok"]) == len(d["nbytes"]):
            raise DamagedFile("nll/ntok/nbytes lengths differ")
        if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in d["nll"]):
            raise DamagedFile("non-finite NLL")
    else:
        m = d.get("metrics")
        if not isinstance(m, dict) or not m or not all(isinstance(v, dict) and v for v in m.values()):
            raise DamagedFile("missing per-question metrics")
        if not all(x in (0, 1, 0.0, 1.0) for v in m.values() for x in v.values()):
            raise DamagedFile("per-question scores are not 0/1")


# ---- rows: computed from the per-item files, never stored alone ---------------------------------------------------------------------------------------------
def _fmt(x: float) -> str:
    return f"{x:.6g}"


def rows_for(cell: Cell, items: dict, base: dict, lm, plan: dict, seconds: float) -> list[dict]:
    import numpy as np
    from fp8lab import stats
    from fp8lab.recipes import get_recipe
    common = dict(cell.identity, causal=get_recipe(cell.recipe).causal,
                  n_boot=plan["n_boot"], seconds=f"{seconds:.1f}", model_note=lm.model_note)
    is_base = cell.recipe == "baseline"
    rows = []
    if cell.task in PPL_TASKS:
        from fp8lab.evaluate import PplItems
        r, b = PplItems.from_json(items), PplItems.from_json(base)
        for metric, val, stat, extra in (("ppl", stats.ppl, stats.ppl_delta_pct, r.ntok),
                                         ("bpb", stats.bpb, stats.bpb_delta_pct, r.nbytes)):
            vr = val(r.nll, extra)
            vb = val(b.nll, b.ntok if metric == "ppl" else b.nbytes)
            if is_base:
                d, lo, hi, how = 0.0, 0.0, 0.0, "baseline (itself)"
            else:
                d, lo, hi = stats.delta_with_ci(stat, (r.nll, b.nll, extra), n_boot=plan["n_boot"], seed=plan["seed"])
                how = "paired bootstrap"
            rows.append(dict(common, metric=metric, value=_fmt(vr), baseline=_fmt(vb), delta_pct=_fmt(d),
                             ci95_low=_fmt(lo), ci95_high=_fmt(hi), ci_method=how, changed="",
                             delta_unit="%", n=len(r.nll)))
        return rows
    for metric in items["metrics"]:
        keys = sorted(base["metrics"][metric])
        if sorted(items["metrics"][metric]) != keys:
            raise DamagedFile(f"{cell.path}: its questions differ from the baseline's")
        a = np.array([items["metrics"][metric][k] for k in keys])
        bb = np.array([base["metrics"][metric][k] for k in keys])
        if is_base:
            res = stats.AccDelta(0.0, 0.0, 0.0, 0, 0, 0, len(keys), "baseline (itself)")
        else:
            res = stats.acc_delta_with_ci(a, bb, n_boot=plan["n_boot"], seed=plan["seed"])
        rows.append(dict(common, metric=metric, value=_fmt(a.mean()), baseline=_fmt(bb.mean()),
                         delta_pct=_fmt(res.delta), ci95_low=_fmt(res.low), ci95_high=_fmt(res.high),
                         ci_method=res.method, changed=res.changed, delta_unit="pp", n=len(keys)))
    return rows


def delta_table(df, task: str, metric: str, order=None):
    """One task x metric of a results CSV (as a pandas DataFrame) as a readable table, indexed by recipe.

    delta_table(pd.read_csv("outputs/results.csv"), "arc_easy", "acc") ->
        recipe   arc_easy acc  delta (pp)  95% CI            n   changed  causal  interval
        e5m2-w   0.6           +0.00       [-7.22, +7.22]    40  0        yes     exact: rule of three (0 of 40 changed)
    """
    import pandas as pd
    t = df[(df.task == task) & (df.metric == metric)].set_index("recipe")
    if t.empty:
        raise UsageError(f"no rows for task {task!r}, metric {metric!r}")
    unit = t.delta_unit.iloc[0]
    base = t.index == "baseline"
    out = pd.DataFrame({f"{task} {metric}": t.value.round(4),
                        f"delta ({unit})": ["(baseline)" if b else f"{d:+.2f}" for b, d in zip(base, t.delta_pct)],
                        "95% CI": ["" if b else f"[{lo:+.2f}, {hi:+.2f}]"
                                   for b, lo, hi in zip(base, t.ci95_low, t.ci95_high)],
                        "n": t.n}, index=t.index)
    if "changed" in t and task not in PPL_TASKS:
        out["changed"] = ["" if (b or pd.isna(c) or c == "") else int(c) for b, c in zip(base, t.changed)]
    if "causal" in t:
        out["causal"] = [("yes" if str(c) == "True" else "ORACLE" if str(c) == "False" else "") for c in t.causal]
    if "ci_method" in t:
        out["interval"] = ["" if b else m for b, m in zip(base, t.ci_method)]
    return out.reindex([r for r in order if r in out.index]) if order is not None else out


def _per_item_pairs(out: Path, task: str, recipe: str, against: str, select: dict | None):
    """Folders under <out>/per_item holding `task` for both recipes, filtered by identity fields."""
    found = []
    for p in sorted(Path(out).glob(f"per_item/*/{task}-*/{recipe}.json")):
        q = p.with_name(f"{against}.json")
        if not q.is_file():
            continue
        a, b = read_json(p), read_json(q)
        ident = a.get("identity", {})
        if select and any(str(ident.get(k)) != str(v) for k, v in select.items()):
            continue
        found.append((p.parent, a, b))
    return found


def compare(out: str | Path, task: str, recipe: str, against: str, metric: str | None = None,
            n_boot: int = 2000, seed: int = 0, select: dict | None = None) -> dict:
    """Paired delta of one recipe against ANY other (not only the baseline), from <out>/per_item files.

    compare("outputs", "ppl", "e4m3-wakv-tok", "e4m3-wa-tok") -> what the KV cache adds on top of W+A, with
    its interval: the same windows were scored under both recipes, so the pairing still holds. Where the
    folder holds runs with several settings, `select` picks one: select={"seed": "1", "seq_len": "1024"}.
    For accuracy the result also says how many questions changed and how the interval was made.
    """
    import numpy as np
    from fp8lab import stats
    from fp8lab.evaluate import PplItems
    metric = metric or ("ppl" if task in PPL_TASKS else "acc")
    found = _per_item_pairs(Path(out), task, recipe, against, select)
    if len(found) != 1:
        what = "; ".join(f"{w.name}" for w, _, _ in found) or "none"
        raise UsageError(f"need exactly one per_item folder holding {task} for both {recipe} and {against} under "
                         f"{out}, found {len(found)} ({what}); pass select={{...}} to choose by seed, seq_len, ...")
    (where, a, b), = found
    if a["fingerprint"] != b["fingerprint"]:
        raise UsageError(f"{where}: {recipe} and {against} were scored on different windows/questions")
    if task in PPL_TASKS:
        ra, rb = PplItems.from_json(a), PplItems.from_json(b)
        stat, extra = ((stats.ppl_delta_pct, ra.ntok) if metric == "ppl" else (stats.bpb_delta_pct, ra.nbytes))
        d, lo, hi = stats.delta_with_ci(stat, (ra.nll, rb.nll, extra), n_boot=n_boot, seed=seed)
        return dict(delta=d, ci95_low=lo, ci95_high=hi, unit="%", n=len(ra.nll), method="paired bootstrap",
                    changed=None, folder=str(where))
    keys = sorted(b["metrics"][metric])
    xa = np.array([a["metrics"][metric][k] for k in keys])
    xb = np.array([b["metrics"][metric][k] for k in keys])
    r = stats.acc_delta_with_ci(xa, xb, n_boot=n_boot, seed=seed)
    return dict(delta=r.delta, ci95_low=r.low, ci95_high=r.high, unit="pp", n=len(keys), method=r.method,
                changed=r.changed, folder=str(where))


#: the paired steps notebook 02 walks through: (recipe, the recipe it is compared with, what the step adds or changes)
PAIRED_STEPS = (("e4m3-wa-tok", "e4m3-w", "+ E4M3 Linear inputs, per-token scales (causal)"),
                ("e4m3-wakv-tok", "e4m3-wa-tok", "+ E4M3 KV cache, per-token scales (causal)"),
                ("e4m3-wa", "e4m3-w", "+ E4M3 Linear inputs, per-tensor scales (oracle)"),
                ("e4m3-wakv", "e4m3-wa", "+ E4M3 KV cache, per-tensor scales (oracle)"),
                ("e5m2-w", "e4m3-w", "E5M2 instead of E4M3 weights"),
                ("e4m3-w-noscale", "e4m3-w", "drop the weight scale"),
                ("e4m3-wa-noscale", "e4m3-wa-tok", "drop the weight and input scales (vs causal per-token inputs)"),
                ("e4m3-wa", "e4m3-wa-tok", "oracle per-tensor inputs vs causal per-token inputs"),
                ("e4m3-wakv", "e4m3-wakv-tok", "oracle per-tensor W+A+KV vs causal per-token W+A+KV"))


def paired_steps(out, df, steps=PAIRED_STEPS) -> tuple[dict, list[str]]:
    """Each step of `steps` as a paired perplexity comparison on the same windows (compare over the per-item files
    under `out`, whose results frame is `df`): ({(a, b): compare's dict} for the steps the run holds,
    ["a vs b: not in this run", ...] for the others). findings.paired_steps_table lays them out."""
    have, C, missing = set(df.recipe), {}, []
    for a, b, _ in steps:
        if {a, b} <= have:
            C[(a, b)] = compare(out, "ppl", a, b)
        else:
            missing.append(f"{a} vs {b}: not in this run")
    return C, missing
