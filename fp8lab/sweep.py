"""The recipe quality sweep: `python -m fp8lab.sweep [--plot]`.

Seed 003's table (what FP8 does to a model's weights, activations and KV cache, and what scale factors are
for), measured on a real model offline, every delta with its 95 % interval and its n.

    python -m fp8lab.sweep --list-recipes                   # every recipe: causal or oracle, and why
    python -m fp8lab.sweep --plot                           # the default sweep into runs/default (= make sweep)
    python -m fp8lab.sweep --recipes baseline,e4m3-kv-tok --tasks ppl --tokens 16384 --out runs/kv
    python -m fp8lab.sweep --redraw --out runs/kv           # only redraw the figures from runs/kv/results.csv
    python -m fp8lab.sweep --record --fresh --plot          # re-record the committed reference (make record)
    python -m fp8lab.sweep --device cuda                    # the same code on a GPU (identical fake-quant math)

Where results go. A run writes into --out (default runs/default, git-ignored). The lab's committed reference
results under outputs/ are written only with --record. A folder is locked for the whole run: a second sweep
into the same folder is refused at once with the holder's pid and command (it never waits and never mixes
its rows with the first one's): run it afterwards, or give it another --out.

What a run writes: <out>/results.csv (one row per model x recipe x task x metric x settings), <out>/per_item/
(per-window NLL and per-question 0/1 that rows and later comparisons pair against), <out>/provenance.json,
<out>/sweep.log (a successful run appends its log; a failed one writes sweep.failed.log instead, unless
it failed before writing anything into a folder it created: then nothing is left) and with
--plot <out>/sweep.png + <out>/sweep_<task>.png. Every file is written atomically.

Reuse. A cell (recipe x task under one set of settings: model hash, tokens or limit, seq-len, seed, batch
size, device) whose per-item file is already in <out> is reused, not recomputed; the run says which cells
it computed and which it reused. A damaged file is recomputed with a one-line warning.

Units: ppl and bpb deltas are relative changes in % ((recipe / baseline - 1) * 100); accuracy deltas are in
percentage points. `delta_unit` says which; ci95_low/high are in the same unit, `ci_method` says how the
interval was made (paired bootstrap, or exact where few questions changed: `changed` counts them).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

from fp8lab import cli
from fp8lab import provenance as _prov
from fp8lab.results import (CSV_FIELDS, KEY_FIELDS, PPL_TASKS, Cell, LegacyTable, UsageError, compare, delta_table,
                            key, read_results, rows_for)
from fp8lab.store import (LOCK_NAME, REFERENCE, DamagedFile, FolderBusy, FolderLock, atomic_write_json,
                          atomic_write_text, out_folder, read_json, write_rows)

__all__ = ["main", "TASKS", "DEFAULTS", "FULL", "CSV_FIELDS", "KEY_FIELDS", "read_csv", "compare",
           "delta_table", "estimate_seconds", "estimate", "UsageError", "DEFAULT_OUT"]

TASKS = ("ppl", "ppl_lambada", "ppl_wikitext", "mmlu", "hellaswag", "arc_easy", "piqa")
DEFAULTS = dict(recipes=["baseline", "e4m3-w", "e4m3-wa", "e4m3-wa-tok", "e4m3-wakv", "e4m3-wakv-tok", "e5m2-w",
                         "e4m3-w-noscale", "e4m3-wa-noscale"],
                tasks=["ppl", "arc_easy"], tokens=6144, seq_len=512, limit=40)
# The default is sized for `make sweep` to finish within 10 minutes on a 2-core CPU: seed 003's seven recipes
# plus the causal (-tok) counterparts of its two oracle rows, 12 windows of 512 tokens and 40 ARC-Easy
# questions (see estimate_seconds; the committed 7-recipe, 16-window run took 499 s on a shared machine).
FULL = dict(tasks=["ppl", "ppl_lambada", "mmlu", "hellaswag", "arc_easy", "piqa"], tokens=32768, limit=1000)
REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = Path("runs") / "default"
#: a plan estimated above this asks for confirmation (or --yes)
CONFIRM_ABOVE_S = 30 * 60
#: rough cost on the lab's 2-core CPU (the committed default run: 16 x 512-token windows in ~30-42 s per
#: recipe, 40 ARC-Easy questions in ~30 s); MMLU is 5-shot (long prompts), HellaSwag scores 4 endings
SECONDS_PER_TOKEN = 0.0045
SECONDS_PER_QUESTION = {"mmlu": 3.0, "hellaswag": 1.5, "arc_easy": 0.75, "piqa": 0.5}
MC_QUESTIONS = {"mmlu": 14042, "hellaswag": 10042, "arc_easy": 570, "piqa": 1838}
log = logging.getLogger("fp8lab.sweep")


read_csv = read_results


# ---- arguments ------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message):          # one line on stderr, exit 2 (argparse prints the usage block too)
        self.exit(2, f"error: {message} (see python -m fp8lab.sweep --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m fp8lab.sweep", description=__doc__.split("\n\n")[1],
                epilog="\n\n".join(__doc__.split("\n\n")[2:6]), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="offline name (smollm2-135m [default], gemma3-270m), "
                   "a local transformers folder, or a hub id (with --online)")
    p.add_argument("--recipes", default=None, help="comma-separated recipe names (see --list-recipes)")
    p.add_argument("--tasks", default=None, help=f"comma-separated, from: {', '.join(TASKS)}")
    p.add_argument("--tokens", type=int, default=None, help="perplexity tokens per corpus "
                   f"(default {DEFAULTS['tokens']}, --full {FULL['tokens']}); windows = tokens // seq-len, >= 2")
    p.add_argument("--seq-len", type=int, default=None, help=f"perplexity window length (default "
                   f"{DEFAULTS['seq_len']}; at most the model's context)")
    p.add_argument("--limit", type=int, default=None, help="questions per multiple-choice task, a seeded "
                   f"random sample (default {DEFAULTS['limit']}, --full {FULL['limit']}; 0 = all, asks first)")
    p.add_argument("--seed", type=int, default=0, help="seed for window / question sampling and the bootstrap")
    p.add_argument("--batch-size", type=int, default=1, help="lm-eval batch size (1: a dynamic per-tensor "
                   "scale never spans several questions)")
    p.add_argument("--boot", type=int, default=2000, help="bootstrap resamples (100 .. 100000)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]: the same fake-quant code on a "
                   "GPU, float32 matmuls without TF32")
    p.add_argument("--out", default=None, help=f"output folder (default {DEFAULT_OUT}, git-ignored; "
                   "locked for the whole run: a second sweep into it is refused at once)")
    p.add_argument("--record", action="store_true", help="write the committed reference results in outputs/ "
                   "(the default --out then); without it nothing under outputs/ is ever written")
    p.add_argument("--fresh", action="store_true", help="start <out> afresh: its results.csv, per_item/, "
                   "provenance.json, sweep.log and figures are removed first (nothing is reused)")
    p.add_argument("--plot", action="store_true", help="also draw the figures from the results")
    p.add_argument("--redraw", action="store_true", help="only redraw the figures from <out>/results.csv "
                   "(no model, nothing computed)")
    p.add_argument("--list-recipes", action="store_true", help="print the recipes and exit")
    p.add_argument("--full", action="store_true", help="all recipes, all offline tasks, bigger samples (hours)")
    p.add_argument("--yes", action="store_true", help=f"start a run estimated above {CONFIRM_ABOVE_S // 60} "
                   "minutes without asking")
    p.add_argument("--online", action="store_true", help="allow the model / dataset hub (wikitext, hub ids)")
    p.add_argument("--bench-overhead", action="store_true",
                   help="time fake-quant forwards against plain ones; writes <out>/fakequant_overhead.json")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def _check_device(dev: str) -> str:
    from fp8lab.evaluate import check_device
    try:
        return check_device(dev)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _resolve(args) -> dict:
    """Turn arguments into a validated plan; raises UsageError with a one-line reason."""
    from fp8lab.recipes import RECIPES, get_recipe
    if args.recipes is not None:
        names = cli.split_list(args.recipes, "--recipes")
        bad = [r for r in names if r not in RECIPES and r not in ("fp32", "none")]
        if bad or not names:
            raise UsageError(f"unknown recipe(s) {', '.join(bad) or '(none given)'}; valid: {', '.join(RECIPES)}")
        recipes = [get_recipe(r).name for r in names]
    else:
        recipes = list(RECIPES) if args.full else list(DEFAULTS["recipes"])
    if args.tasks is not None:
        tasks = cli.split_list(args.tasks, "--tasks")
        bad = [t for t in tasks if t not in TASKS]
        if bad or not tasks:
            raise UsageError(f"unknown task(s) {', '.join(bad) or '(none given)'}; valid: {', '.join(TASKS)}")
    else:
        tasks = list(FULL["tasks"] if args.full else DEFAULTS["tasks"])
    if "ppl_wikitext" in tasks and not args.online:
        raise UsageError("task ppl_wikitext needs a dataset hub: add --online (or use ppl / ppl_lambada)")
    tokens = args.tokens if args.tokens is not None else (FULL if args.full else DEFAULTS)["tokens"]
    seq_len = args.seq_len if args.seq_len is not None else DEFAULTS["seq_len"]
    limit = args.limit if args.limit is not None else (FULL if args.full else DEFAULTS)["limit"]
    if seq_len < 8:
        raise UsageError(f"--seq-len must be >= 8, got {seq_len}")
    if tokens < seq_len:
        raise UsageError(f"need --tokens >= --seq-len, got {tokens} and {seq_len}")
    if any(t in PPL_TASKS for t in tasks) and tokens // seq_len < 2:
        raise UsageError(f"n is too small for an interval: --tokens {tokens} / --seq-len {seq_len} gives 1 "
                         f"window; an interval needs at least 2 (e.g. --tokens {2 * seq_len})")
    if limit < 0:
        raise UsageError(f"--limit must be >= 0 (0 = every question), got {limit}")
    if limit == 1 and any(t not in PPL_TASKS for t in tasks):
        raise UsageError("n is too small for an interval: --limit 1 scores one question; use 2 or more")
    if not 100 <= args.boot <= 100_000:
        raise UsageError(f"--boot must be in 100 .. 100000, got {args.boot}")
    if not 1 <= args.batch_size <= 1024:
        raise UsageError(f"--batch-size must be in 1 .. 1024, got {args.batch_size}")
    if not 0 <= args.seed < 2 ** 32:
        raise UsageError(f"--seed must be in 0 .. 2**32-1, got {args.seed}")
    recipes = ["baseline"] + [r for r in dict.fromkeys(recipes) if r != "baseline"]
    return dict(recipes=recipes, tasks=list(dict.fromkeys(tasks)), tokens=tokens, seq_len=seq_len,
                limit=limit or None, seed=args.seed, batch_size=args.batch_size, n_boot=args.boot,
                device=args.device)


def estimate_seconds(plan: dict, cells=None) -> float:
    """A rough wall time for the plan's cells on the lab's 2-core CPU (a GPU is much faster).

    estimate_seconds(<the default plan>) -> ~530 s;  --tasks mmlu --limit 0 with 9 recipes -> ~105 h"""
    cells = cells if cells is not None else [(r, t) for r in plan["recipes"] for t in plan["tasks"]]
    total = 10.0                                                    # model load, data, lm-eval tasks
    for _, t in cells:
        if t in PPL_TASKS:
            total += SECONDS_PER_TOKEN * (plan["tokens"] // plan["seq_len"]) * plan["seq_len"]
        else:
            n = min(plan["limit"] or MC_QUESTIONS[t], MC_QUESTIONS[t])
            total += SECONDS_PER_QUESTION[t] * n
    return total


def estimate(argv: list[str]) -> tuple[float, str]:
    """(seconds, "about 3 min") a command line would take on the lab's 2-core CPU, without running anything.

    estimate(["--recipes", "baseline,e4m3-w", "--tasks", "ppl"]) -> (~65.0, "65 s"). For a notebook to say how
    long a run takes before it starts; raises UsageError for arguments the sweep would refuse."""
    secs = estimate_seconds(_resolve(_parser().parse_args(argv)))
    return secs, _human(secs)


def _human(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def _confirm(plan: dict, args) -> None:
    est = estimate_seconds(plan)
    if est <= CONFIRM_ABOVE_S or args.yes:
        return
    n_mc = {t: min(plan["limit"] or MC_QUESTIONS[t], MC_QUESTIONS[t]) for t in plan["tasks"] if t not in PPL_TASKS}
    what = ", ".join(f"{t}: {n:,} questions" for t, n in n_mc.items())
    msg = (f"this run is estimated at about {_human(est)} on a 2-core CPU ({len(plan['recipes'])} recipes x "
           f"{len(plan['tasks'])} tasks{'; ' + what if what else ''})")
    if sys.stdin is not None and sys.stdin.isatty() and sys.stdout.isatty():
        ans = input(f"{msg}. Start it? [y/N] ").strip().lower()
        if ans in ("y", "yes"):
            return
        raise UsageError("not started (answer was not 'y')")
    raise UsageError(f"{msg}; pass --yes to start it, or a smaller --limit / --tokens")


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
        t0 = time.time()
        if self.task in PPL_TASKS:
            it = evaluate.eval_ppl(lm.model, self.windows, self.nbytes, desc=f"{label} windows", progress=progress)
            out = {"fingerprint": self.fingerprint, **it.to_json()}
        else:
            mc = evaluate.eval_mc(lm.model, lm.tokenizer, self.task, self.samples, batch_size=batch_size,
                                  progress=progress)
            out = {"fingerprint": self.fingerprint, "metrics": mc}
        out["seconds"] = round(time.time() - t0, 2)
        return out


# ---- the run ------------------------------------------------------------------------------------------
def _progress_mode(quiet: bool) -> tuple[bool, bool]:
    """(outer bar, inner bars). A terminal gets both levels, labelled; a notebook only the outer one (its
    output cannot move the cursor up, nested bars would print raw escape codes); a file or pipe none
    (the log lines say what finished)."""
    if quiet:
        return False, False
    tty = sys.stderr is not None and hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
    notebook = "ipykernel" in sys.modules
    return (tty or notebook), tty


def _read_table(csv_path: Path) -> list[dict]:
    try:
        return read_results(csv_path)
    except LegacyTable as e:
        raise UsageError(str(e)) from None
    except DamagedFile as e:
        keep = csv_path.with_name(f"{csv_path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        os.replace(csv_path, keep)
        log.warning("WARNING: %s; kept it as %s and rebuilding this run's rows from per_item/", e, keep.name)
        return []


def run_sweep(plan: dict, args, out: Path, prov: dict) -> dict:
    """Compute (or reuse) every cell of the plan into `out`; returns a summary. The caller holds the lock."""
    import torch
    from tqdm import tqdm          # plain text bars: a notebook renders them too (no widget package needed)
    from fp8lab import models, recipes as R

    csv_path = out / "results.csv"
    outer, inner = _progress_mode(args.quiet)
    if not inner:
        import datasets
        import transformers
        datasets.disable_progress_bars()
        transformers.utils.logging.disable_progress_bar()
    t_start = time.time()
    log.info("sweep: recipes=%s tasks=%s tokens=%d seq_len=%d limit=%s seed=%d device=%s -> %s",
             ",".join(plan["recipes"]), ",".join(plan["tasks"]), plan["tokens"], plan["seq_len"], plan["limit"],
             plan["seed"], plan["device"], out)
    if any(t not in PPL_TASKS for t in plan["tasks"]):
        from fp8lab.evaluate import check_mc_backend
        check_mc_backend()                      # fail before loading anything
    rows = _read_table(csv_path)
    lm = models.load_model(args.model)
    ctx = getattr(lm.model.config, "max_position_embeddings", None)
    if ctx and any(t in PPL_TASKS for t in plan["tasks"]) and plan["seq_len"] > ctx:
        raise UsageError(f"--seq-len {plan['seq_len']} is beyond {lm.name}'s context of {ctx} tokens")
    if plan["device"] != "cpu":
        torch.backends.cuda.matmul.allow_tf32 = False     # float32 means float32: the CPU's arithmetic
        torch.backends.cudnn.allow_tf32 = False
        lm.model.to(plan["device"])
    log.info("model %s (%s) sha256 %s loaded in %.1fs on %s; NOTE: %s", lm.name, lm.source, lm.file_sha256[:16],
             lm.load_seconds, plan["device"], lm.model_note)
    torch.manual_seed(plan["seed"])

    tdata = {}
    for t in plan["tasks"]:
        tdata[t] = _TaskData(t, lm, plan)
        log.info("data %s", tdata[t].desc)
    cells = {(r, t): Cell(out, lm, plan, r, t) for r in plan["recipes"] for t in plan["tasks"]}
    have = {}
    for rt, c in cells.items():
        try:
            have[rt] = c.load(tdata[rt[1]].fingerprint)
        except DamagedFile as e:
            log.warning("WARNING: %s; recomputing %s", e, c.label())
            have[rt] = None
    reused = [rt for rt, d in have.items() if d is not None]
    todo = [rt for rt, d in have.items() if d is None]
    if todo:
        log.info("to compute: %d cells (about %s on a 2-core CPU); reusing %d already in %s",
                 len(todo), _human(estimate_seconds(plan, todo)), len(reused), out)

    mine: set = set()          # the keys of this plan's rows (the figures of this run draw only those)

    def upsert(rt):
        nonlocal rows
        r, t = rt
        new = rows_for(cells[rt], have[rt], have[("baseline", t)], lm, plan, float(have[rt]["seconds"]))
        ks = {key(x) for x in new}
        mine.update(ks)
        at = next((i for i, x in enumerate(rows) if key(x) in ks), len(rows))   # in place: a stable table
        rest = [x for x in rows if key(x) not in ks]
        rows = rest[:at] + new + rest[at:]
        return new

    computed = []
    # Baseline items first (every delta pairs against them), then one recipe at a time: a recipe is applied
    # once and kept for all its tasks, so weights are quantized once per recipe.
    bar = tqdm(total=len(todo), desc="cells (recipe x task)", disable=not outer, unit="cell", position=0)
    by_recipe: dict[str, list[str]] = {}
    for r, t in todo:
        by_recipe.setdefault(r, []).append(t)
    for t in plan["tasks"]:
        if ("baseline", t) in todo:
            have[("baseline", t)] = tdata[t].evaluate(lm, plan["batch_size"], inner, f"baseline/{t}")
            cells[("baseline", t)].save(have[("baseline", t)])
            computed.append(("baseline", t))
            bar.update(1)
            log.info("baseline %s evaluated in %.1fs", t, have[("baseline", t)]["seconds"])
    for rt in [x for x in cells if x not in todo] + [("baseline", t) for t in by_recipe.pop("baseline", [])]:
        try:
            upsert(rt)
        except DamagedFile as e:            # a reused file whose questions no longer pair: recompute it
            log.warning("WARNING: %s; recomputing %s", e, cells[rt].label())
            have[rt] = None
            by_recipe.setdefault(rt[0], []).append(rt[1])
    write_rows(rows, csv_path, CSV_FIELDS)
    for rname, rtasks in by_recipe.items():
        t0 = time.time()
        R.apply_recipe(lm.model, R.get_recipe(rname))
        t_apply = time.time() - t0
        try:
            for t in rtasks:
                items = tdata[t].evaluate(lm, plan["batch_size"], inner, f"{rname}/{t}")
                items["seconds"] = round(items["seconds"] + t_apply / len(rtasks), 2)
                cells[(rname, t)].save(items)
                have[(rname, t)] = items
                new = upsert((rname, t))
                write_rows(rows, csv_path, CSV_FIELDS)
                computed.append((rname, t))
                bar.update(1)
                for nr in new:
                    log.info("%-18s %-10s %-8s %10s (baseline %s)  delta %+.3f %s [%+.3f, %+.3f]  n=%s%s  %.1fs",
                             rname, t, nr["metric"], nr["value"], nr["baseline"], float(nr["delta_pct"]),
                             nr["delta_unit"], float(nr["ci95_low"]), float(nr["ci95_high"]), nr["n"],
                             f" changed={nr['changed']} ({nr['ci_method']})" if nr["changed"] != "" else "",
                             items["seconds"])
        finally:
            R.remove_recipe(lm.model)
    bar.close()

    wall = time.time() - t_start
    prov = dict(prov)
    prev = None
    prov_path = out / "provenance.json"
    if prov_path.is_file():
        try:
            prev = read_json(prov_path)
        except DamagedFile as e:
            log.warning("WARNING: %s; its run history is not carried over", e)
    prov.update(
        wall_seconds=round(wall, 1),
        model={"name": lm.name, "source": lm.source, "sha256": lm.file_sha256, "cache_dir": lm.cache_dir,
               "load_seconds": round(lm.load_seconds, 1)},
        model_note=lm.model_note,
        settings={**plan},
        data_files={t: d.files for t, d in tdata.items()},
        cells_computed=[f"{r}/{t}" for r, t in computed], cells_reused=[f"{r}/{t}" for r, t in reused],
        notes=["CPU shared with other jobs while this ran: wall times are indicative, not benchmarks."
               if plan["device"] == "cpu" else f"computed on {plan['device']}",
               "Dynamic scales (activations, KV) are computed per forward; perplexity windows run one at a "
               "time, lm-eval requests with --batch-size.",
               "Recipes marked causal=False are oracles: their scales see every token of the window."])
    if prev:
        history = prev.pop("previous_runs", [])
        history.append({k: prev.get(k) for k in ("date", "command", "git_commit", "dirty", "wall_seconds",
                                                 "cells_computed", "cells_reused", "settings")})
        prov["previous_runs"] = history[-20:]
    atomic_write_json(prov_path, prov)
    return dict(csv=csv_path, computed=computed, reused=reused, wall=wall, keys=mine)


# ---- logging: the log of a run reaches <out>/sweep.log only if the run succeeds --------------------------
class _RunLog:
    def __init__(self, out: Path, quiet: bool):
        self.out = out
        self.part = out / f".sweep.{os.getpid()}.log.part"
        log.setLevel(logging.INFO)
        log.propagate = False
        for h in list(log.handlers):
            log.removeHandler(h)
            h.close()
        self.fh = logging.FileHandler(self.part)
        self.fh.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S"))
        log.addHandler(self.fh)
        sh = logging.StreamHandler(sys.stdout)
        sh.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(sh)

    def finish(self, ok: bool, keep_failed: bool = True) -> Path | None:
        """Where the log went: sweep.log (ok), sweep.failed.log, or None (a failed log not kept)."""
        log.removeHandler(self.fh)
        self.fh.close()
        if not ok and not keep_failed:
            self.part.unlink(missing_ok=True)
            return None
        text = self.part.read_text(encoding="utf-8") if self.part.is_file() else ""
        if ok:
            target = self.out / "sweep.log"
            old = target.read_text(encoding="utf-8") if target.is_file() else ""
            atomic_write_text(target, old + text)
            self.part.unlink(missing_ok=True)
        else:
            target = self.out / "sweep.failed.log"     # git-ignored; a failed run never touches sweep.log
            os.replace(self.part, target)
        return target


def _clear(out: Path) -> None:
    """--fresh: remove what a sweep writes into `out` (only those names; other files stay)."""
    import shutil
    for name in ("results.csv", "provenance.json", "sweep.log", "sweep.failed.log"):
        (out / name).unlink(missing_ok=True)
    for p in out.glob("sweep*.png"):
        p.unlink()
    shutil.rmtree(out / "per_item", ignore_errors=True)


def _summary(res: dict, out: Path) -> str:
    c, r = res["computed"], res["reused"]
    lines = []
    if c:
        lines.append(f"computed {len(c)} cell(s) in {res['wall']:.0f} s: " + ", ".join(f"{a}/{b}" for a, b in c))
    else:
        lines.append(f"nothing computed: every cell of this plan was already in {out}")
    if r:
        lines.append(f"reused {len(r)} cell(s) already in {out}/per_item: " + ", ".join(f"{a}/{b}" for a, b in r))
        lines.append(f"  (to recompute them, delete {out}/per_item or choose another --out)")
    lines.append(f"results: {res['csv']}")
    return "\n".join(lines)


def _check_redraw(out: Path) -> Path:
    """<out>/results.csv, or UsageError when there is none to draw from (checked before anything is created)."""
    csv_path = out / "results.csv"
    if not csv_path.is_file():
        raise UsageError(f"{csv_path} does not exist: run the sweep first (python -m fp8lab.sweep --plot"
                         f"{' --out ' + str(out) if out != DEFAULT_OUT else ''})")
    return csv_path


def _redraw(out: Path, only=None) -> list[Path]:
    from fp8lab import plots
    csv_path = _check_redraw(out)
    try:
        return plots.plot_sweep(csv_path, out, only=only)
    except plots.NothingToPlot as e:
        raise UsageError(f"{e}: run the sweep into {out} first") from None
    except DamagedFile as e:
        raise UsageError(f"{e}; rerun the sweep into {out} to rebuild it") from None


def _wrote_nothing(out: Path, runlog: "_RunLog") -> bool:
    """True when `out` holds only the lock and this run's log: the run failed before writing anything."""
    try:
        return {p.name for p in out.iterdir()} <= {LOCK_NAME, runlog.part.name}
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(argv)
    command = " ".join(["python -m fp8lab.sweep", *argv])
    try:
        if args.list_recipes:
            from fp8lab.recipes import list_recipes
            print(list_recipes())
            return 0
        try:
            out = out_folder(args.out, DEFAULT_OUT, record=args.record, record_default=REFERENCE)
        except ValueError as e:
            raise UsageError(str(e)) from None
        if not args.online:
            # before datasets / transformers read them: nothing in a default run may touch a hub
            os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if args.redraw:
            _check_redraw(out)                        # a folder that does not exist is refused, not created
            with FolderLock(out, command):
                paths = _redraw(out)
            for p in paths:
                print(p)
            print(f"redrew {len(paths)} figure(s) from {out / 'results.csv'}; nothing was computed "
                  f"(to compute: python -m fp8lab.sweep --plot{'' if out == DEFAULT_OUT else ' --out ' + str(out)})")
            return 0
        plan = _resolve(args)
        plan["device"] = _check_device(args.device)
        if args.bench_overhead:
            from fp8lab import overhead
            with FolderLock(out, command):
                return overhead.main(plan, args.model, out, command,
                                     recipes=plan["recipes"] if args.recipes else None)
        from fp8lab import models
        if any(t in PPL_TASKS for t in plan["tasks"]):
            models.check_seq_len(args.model, plan["seq_len"])   # from the config alone: no weights loaded yet
        if not args.fresh:
            try:
                read_results(out / "results.csv")             # an older layout is refused before any work
            except LegacyTable as e:
                raise UsageError(str(e)) from None
            except DamagedFile:
                pass                                          # kept aside and rebuilt by the run, with a warning
        _confirm(plan, args)
        import torch  # noqa: F401  (so that provenance records torch's threads)
        prov = _prov.provenance(command, cuda=plan["device"] != "cpu", settings=plan)
        if args.record and not _prov.is_clean(prov):
            print(f"WARNING: recording reference results from a tree that is not a clean commit "
                  f"({_prov.describe(prov)}); the lab commits only results from clean commits", file=sys.stderr)
        with FolderLock(out, command) as lock:
            if args.fresh:
                _clear(out)
            runlog = _RunLog(out, args.quiet)
            ok, expected = False, False
            try:
                res = run_sweep(plan, args, out, prov)
                if args.plot:
                    for p in _redraw(out, only=res["keys"]):
                        log.info("figure %s", p)
                log.info("%s", _summary(res, out))
                ok = True
            except (UsageError, *_clear_errors()):
                expected = True                    # one line below, no traceback, no pointer to the log
                raise
            finally:
                where = runlog.finish(ok, keep_failed=ok or not (lock.created and _wrote_nothing(out, runlog)))
                if not ok and not expected and where is not None:
                    print(f"the log of this failed run is in {where} ({out / 'sweep.log'} is unchanged)",
                          file=sys.stderr)
        return 0
    except FolderBusy as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: the cells finished so far are kept and will be reused", file=sys.stderr)
        return 130
    except _clear_errors() as e:  # our own clear errors: one message, exit 2, no traceback
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2


def _clear_errors() -> tuple:
    """The library's own errors whose message is the whole story (bad model name, missing data, ...)."""
    from fp8lab.data import DataError
    from fp8lab.models import ModelError
    from fp8lab.recipes import RecipeError
    return (ModelError, DataError, RecipeError)


if __name__ == "__main__":
    sys.exit(main())
