"""The bytes-quality frontier: how few bytes per decode step can a model read for how much perplexity?

Every part of the model (each decoder layer's Linears, lm_head, the KV cache) can be stored in its own format.
For an assignment of formats to parts this module computes the bytes one decode step reads, picks mixed
assignments under a byte budget from the sensitivity map, evaluates them, and plots them with the uniform
recipes on the same axes:

    python -m fp8lab.sensitivity --model smollm2-135m --windows 64 --out runs/sens
    python -m fp8lab.frontier --model smollm2-135m --sensitivity runs/sens --budget 0.35,0.45,0.6 \\
        --windows 64 --out runs/frontier --plot
    -> runs/frontier/frontier.csv, frontier.png (x: bytes per step, with the H200 / GB10 tokens/s ceiling
       it implies on the top axes; y: perplexity change with its 95 % paired interval)

**Bytes.** From the model's own parameter shapes: each Linear in its format through fp8lab.bandwidth's storage
table (`FORMATS[fmt].matrix_bytes`: elements + scales), lm_head likewise (read whole every step), the input
embedding one bf16 row per sequence (a tied table read as lm_head in bf16 is not counted twice), norms and biases
in bf16, the KV cache at `fp8lab.bandwidth.kv_bytes_per_token` x batch x context (KV_DTYPES: bf16, fp8, nvfp4).
fp8lab.bandwidth gives one format for all Linears; this per-part sum equals its `bytes_per_decode_step(...,
policy="linear")` for a uniform assignment (tested). Defaults: batch 1 and context 512, the window length the
quality is measured on. The tokens/s ceiling is bandwidth / bytes: an upper bound that a 135M model at batch 1
does not approach (kernel launches dominate); it shows how the formats move the memory roof.

**The mixed assignments are greedy** (not optimal): start with everything as loaded; repeatedly make the one
move (a part to a smaller format) with the least predicted perplexity cost per byte saved, where the predicted
cost is the part's one-at-a-time delta from the sensitivity map (clipped at 0); stop at the budget. The
prediction assumes the deltas add up; the measured delta of each mixed recipe says whether they do. NVIDIA
ModelOpt's AutoQuantize searches the same trade-off (with a gradient-based score); here every step is open.

Budgets: a number <= 1 is a fraction of the all-bf16 bytes per step; `120MB`, `0.2GB` or a plain number > 1
are bytes (MB = 1e6).
"""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fp8lab.cli import OneLineParser, UsageError, fail, parse, split_list
from fp8lab.sensitivity import (FORMATS as SENS_FORMATS, Part, add_cluster_args, check_cluster_args, data_spec,
                                model_parts, resolve_out)

__all__ = ["Inventory", "inventory", "decode_bytes", "assignment_desc", "greedy_path", "plan", "parse_budget",
           "UNIFORM", "CSV_FIELDS", "plot_frontier", "main"]

CSV_FIELDS = ["model", "model_sha256", "point", "kind", "budget", "bytes_per_step", "bf16_bytes_per_step",
              "ceilings", "predicted_delta_pct", "ppl", "baseline_ppl", "delta_pct", "ci95_low", "ci95_high", "n",
              "seq_len", "batch", "context", "assignment", "model_note"]

# (name, decoder Linears, lm_head, KV): the uniform recipes drawn next to the mixed ones
UNIFORM = [("fp8 weights", "fp8_tensor", "bf16", "bf16"),
           ("fp8 weights + fp8 KV", "fp8_tensor", "bf16", "fp8"),
           ("fp8 everything", "fp8_tensor", "fp8_tensor", "fp8"),
           ("nvfp4 weights", "nvfp4", "bf16", "bf16"),
           ("nvfp4 weights + fp8 KV", "nvfp4", "bf16", "fp8"),
           ("nvfp4 everything", "nvfp4", "nvfp4", "nvfp4")]


@dataclass
class Inventory:
    """What a decode step reads, from the model's own parameters."""
    linears: list            # (name, rows, cols) of every Linear inside the decoder layers
    lm_head: tuple           # (rows, cols)
    hidden: int
    tied: bool
    other_params: int        # norms, biases, anything not a Linear weight or the embedding (kept bf16)
    kv_elems_per_token: int  # K + V elements one token adds, all layers (fp8lab.bandwidth)

    @classmethod
    def of(cls, model) -> "Inventory":
        return inventory(model)


def inventory(model) -> Inventory:
    from torch import nn
    from fp8lab import bandwidth as bw
    head = model.get_output_embeddings()
    emb = model.get_input_embeddings()
    tied = head is not None and head.weight is emb.weight
    linears, counted = [], {id(emb.weight)}
    for n, m in model.named_modules():
        if isinstance(m, nn.Linear) and m is not head:
            linears.append((n, m.weight.shape[0], m.weight.shape[1]))
            counted.add(id(m.weight))
    counted.add(id(head.weight))
    other = sum(p.numel() for p in model.parameters() if id(p) not in counted)
    kv = bw.model_shape(model.config.to_dict()).kv_elems_per_token
    return Inventory(linears, tuple(head.weight.shape), emb.weight.shape[1], tied, other, kv)


def _linear_format(name: str, assignment: dict, parts: list[Part]) -> str:
    import re
    for p in parts:
        if p.regex and re.search(p.regex, name):
            return assignment.get(p.name, "bf16")
    return "bf16"


def decode_bytes(inv: Inventory, assignment: dict, parts: list[Part], batch: int = 1, context: int = 512) -> float:
    """Bytes one decode step of `batch` sequences at `context` tokens reads under `assignment` {part: format}.

    Weight formats are fp8lab.bandwidth.FORMATS names; the KV part takes KV_DTYPES names. A Linear no part
    covers, and any part not in `assignment`, counts as bf16."""
    from fp8lab.bandwidth import FORMATS, KV_DTYPES
    total = 0.0
    for name, r, c in inv.linears:
        total += FORMATS[_linear_format(name, assignment, parts)].matrix_bytes(r, c)
    head_fmt = next((assignment.get(p.name, "bf16") for p in parts if p.lm_head), "bf16")
    total += FORMATS[head_fmt].matrix_bytes(*inv.lm_head)
    if not (inv.tied and head_fmt == "bf16"):          # the input embedding: one bf16 row per sequence
        total += min(batch, inv.lm_head[0]) * inv.hidden * 2
    total += inv.other_params * 2
    kv_fmt = next((assignment.get(p.name, "bf16") for p in parts if p.kv), "bf16")
    total += inv.kv_elems_per_token * KV_DTYPES[kv_fmt] * batch * context
    return total


def assignment_desc(assignment: dict, parts: list[Part]) -> dict:
    """The parts description fp8lab.sensitivity.build_recipe turns into a Recipe."""
    d: dict = {"weights": [[p.regex, assignment[p.name]] for p in parts
                           if p.regex and assignment.get(p.name, "bf16") != "bf16"]}
    for p in parts:
        if p.lm_head and assignment.get(p.name, "bf16") != "bf16":
            d["lm_head"] = assignment[p.name]
        if p.kv and assignment.get(p.name, "bf16") != "bf16":
            d["kv"] = assignment[p.name]
    return d


def _short(assignment: dict, parts: list[Part]) -> str:
    """'layer00-07:fp8_tensor layer08:nvfp4 ... lm_head:bf16 kv:fp8' (runs of equal formats collapsed)."""
    out, run = [], []
    for p in parts:
        f = assignment.get(p.name, "bf16")
        if run and run[-1][1] == f and p.kind == "layer" and run[-1][0].kind == "layer":
            run.append((p, f))
            continue
        if run:
            out.append(run)
        run = [(p, f)]
    out.append(run)
    txt = []
    for r in out:
        name = r[0][0].name if len(r) == 1 else f"{r[0][0].name}-{r[-1][0].name.replace('layer', '')}"
        txt.append(f"{name}:{r[0][1]}")
    return " ".join(txt)


def greedy_path(parts: list[Part], options: dict, cost: dict, bytes_fn) -> list[tuple[dict, float, float]]:
    """The greedy sequence of assignments from all-bf16 down to the smallest one the options allow.

    options {part: [formats]}, cost {(part, format): predicted delta %} (clipped at 0; bf16 costs 0),
    bytes_fn(assignment) -> bytes. Returns [(assignment, bytes, predicted delta %), ...], bytes decreasing."""
    a = {p.name: "bf16" for p in parts}
    c = lambda p, f: 0.0 if f == "bf16" else max(cost[(p, f)], 0.0)
    b = bytes_fn(a)
    path = [(dict(a), b, 0.0)]
    while True:
        best = None
        for p in parts:
            for f in options.get(p.name, []):
                if f == a[p.name]:
                    continue
                new = {**a, p.name: f}
                saved = b - bytes_fn(new)
                if saved <= 0:
                    continue
                score = (c(p.name, f) - c(p.name, a[p.name])) / saved
                if best is None or (score, -saved) < best[0]:
                    best = ((score, -saved), new)
        if best is None:
            return path
        a = best[1]
        b = bytes_fn(a)
        path.append((dict(a), b, sum(c(k, v) for k, v in a.items())))


def parse_budget(text: str, bf16_bytes: float) -> list[float]:
    out = []
    for tok in split_list(text, "--budget"):
        t = tok.upper()
        try:
            if t.endswith("GB"):
                v = float(t[:-2]) * 1e9
            elif t.endswith("MB"):
                v = float(t[:-2]) * 1e6
            else:
                v = float(t)
                v = v * bf16_bytes if v <= 1 else v
        except ValueError:
            raise UsageError(f"bad budget {tok!r}: give a fraction (0.4), bytes (1.2e8) or 120MB / 0.2GB") from None
        if not (v > 0 and math.isfinite(v)):
            raise UsageError(f"bad budget {tok!r}: must be positive")
        out.append(v)
    return out


def plan(model, sens: dict, budgets: list[float], batch: int = 1, context: int = 512,
         formats=("e4m3", "nvfp4")):
    """Parts (layers + lm_head + kv), the greedy path and, per budget, the chosen mixed assignment.

    sens: {(part, format name as in the sensitivity run): (delta, lo, hi)}. Returns a dict with parts,
    inventory, bf16 bytes, path, and picks [(budget, assignment, bytes, predicted)] (None where infeasible)."""
    parts = model_parts(model, ("layers", "lm_head", "kv"))
    inv = inventory(model)
    options, cost = {}, {}
    for p in parts:
        for f in formats:
            wfmt, kvfmt = SENS_FORMATS[f]
            store = kvfmt if p.kv else wfmt
            if store is None or (p.name, f) not in sens:
                continue
            options.setdefault(p.name, []).append(store)
            cost[(p.name, store)] = sens[(p.name, f)][0]
    missing = [p.name for p in parts if p.name not in options]
    if missing:
        raise UsageError(f"the sensitivity map has no rows for part(s) {', '.join(missing[:6])}"
                         f"{' ...' if len(missing) > 6 else ''}: run fp8lab.sensitivity with --parts "
                         "layers,lm_head,kv (and the same model) first")
    bytes_fn = lambda a: decode_bytes(inv, a, parts, batch, context)
    path = greedy_path(parts, options, cost, bytes_fn)
    picks = []
    for B in budgets:
        hit = next(((a, b, pr) for a, b, pr in path if b <= B), None)
        picks.append((B, *hit) if hit else (B, None, None, None))
    return dict(parts=parts, inventory=inv, bf16=path[0][1], path=path, picks=picks, bytes_fn=bytes_fn)


def ceilings(specs: list[str]) -> dict:
    """{"H200": TB/s, ...} from names in fp8lab.gpus or NAME=TBps (a finite bandwidth > 0)."""
    from fp8lab.gpus import get_gpu
    out = {}
    for s in specs:
        name, eq, val = s.partition("=")
        if not name.strip():
            raise UsageError(f"--gpu {s!r}: give a name in fp8lab.gpus or NAME=TBps")
        try:
            out[name] = float(val) if eq else get_gpu(name).bandwidth_TBps
        except ValueError as e:
            raise UsageError(f"--gpu {s!r}: {e}") from None
        if not (math.isfinite(out[name]) and out[name] > 0):
            raise UsageError(f"--gpu {s!r}: the bandwidth must be a finite number of TB/s > 0")
    return out


# ---- the figure ---------------------------------------------------------------------------------------
def plot_frontier(csv_path, out_png):
    """Bytes per decode step (x) against the perplexity change (y) with 95 % intervals; uniform = squares,
    greedy mixed = circles (hollow: the greedy's additive prediction); tokens/s ceilings on the top axes."""
    import json
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from fp8lab.store import read_rows, save_figure
    rows = read_rows(csv_path, CSV_FIELDS)
    if not rows:
        raise FileNotFoundError(f"{csv_path}: no rows to plot")
    fig, ax = plt.subplots(figsize=(10, 6.4))
    for kind, marker, color in (("baseline", "D", "black"), ("uniform", "s", "#2e6fb7"), ("mixed", "o", "#c0392b")):
        rs = [r for r in rows if r["kind"] == kind]
        for r in rs:
            x = float(r["bytes_per_step"]) / 1e6
            d, lo, hi = (float(r[k]) for k in ("delta_pct", "ci95_low", "ci95_high"))
            ax.errorbar(x, d, yerr=[[d - lo], [hi - d]], fmt=marker, color=color, ms=8, capsize=4,
                        label=kind if r is rs[0] else None)
            if kind == "mixed" and r["predicted_delta_pct"]:
                ax.plot(x, float(r["predicted_delta_pct"]), marker, mfc="none", color=color, ms=8,
                        label="mixed: greedy's additive prediction" if r is rs[0] else None)
            ax.annotate(r["point"], (x, d), textcoords="offset points", xytext=(6, 4), fontsize=7)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_yscale("symlog", linthresh=1.0)
    from matplotlib.ticker import FuncFormatter
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("bytes read per decode step (MB, 1e6)")
    ax.set_ylabel("perplexity change vs baseline (%), 95% paired CI")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    ceil = json.loads(rows[0]["ceilings"]) if rows[0]["ceilings"] else {}
    for i, (gpu, tbps) in enumerate(ceil.items()):
        f = lambda mb, t=tbps: t * 1e12 / (np.maximum(mb, 1e-9) * 1e6)
        sec = ax.secondary_xaxis(1.0 + 0.11 * i, functions=(f, f))
        sec.set_xlabel(f"{gpu} ceiling, tokens/s per sequence ({tbps:g} TB/s / bytes)", fontsize=8)
        sec.tick_params(labelsize=7)
    r0 = rows[0]
    fig.text(0.01, 0.01, f"{r0['model']}: {r0['model_note']}. {r0['n']} windows x {r0['seq_len']} tokens; "
             f"batch {r0['batch']}, context {r0['context']}. Mixed = greedy from the sensitivity map.",
             fontsize=7, color="#444444", wrap=True)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    save_figure(fig, out_png, bbox_inches="tight")
    plt.close(fig)
    return Path(out_png)


# ---- command line ---------------------------------------------------------------------------------------------
def _parser():
    p = OneLineParser(prog="python -m fp8lab.frontier", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--sensitivity", default=None, help="a sensitivity run folder (or its sensitivity.csv) of "
                   "the same model, with parts layers, lm_head and kv (default runs/sensitivity/<model>, or "
                   "outputs/sensitivity/<model> with --record)")
    p.add_argument("--budget", default="0.3,0.35,0.4,0.5,0.6", help="comma-separated byte budgets per decode "
                   "step: fractions of all-bf16 (<= 1), bytes, or 120MB / 0.2GB")
    p.add_argument("--formats", default="e4m3,nvfp4", help="formats the greedy may use (as in the sensitivity run)")
    p.add_argument("--windows", type=int, default=64, help="BoolQ windows (default 64; at least 2)")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=1, help="sequences per decode step (bytes)")
    p.add_argument("--context", type=int, default=512, help="tokens in each sequence's KV cache (bytes; at most "
                   "2**31 - 1, as fp8lab.bandwidth)")
    p.add_argument("--gpu", action="append", default=None, help="ceiling to show: a name in fp8lab.gpus or "
                   "NAME=TBps; repeatable (default H200 and GB10)")
    p.add_argument("--no-uniform", action="store_true", help="evaluate only the mixed assignments")
    p.add_argument("--bytes-only", action="store_true", help="print bytes and the greedy picks; evaluate nothing")
    p.add_argument("--boot", type=int, default=2000)
    p.add_argument("--out", default=None, help="output folder (default runs/frontier/<model>, or "
                   "outputs/frontier/<model> with --record)")
    p.add_argument("--record", action="store_true", help="write the committed reference results under outputs/")
    p.add_argument("--plot", action="store_true")
    add_cluster_args(p)
    return p


def main(argv=None) -> int:
    import json
    import os
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    args, status = parse(_parser(), argv)
    if args is None:
        return status
    try:
        from fp8lab.bandwidth import check_batch_context
        from fp8lab.sensitivity import load_for_parts, read_sensitivity
        try:
            check_batch_context(args.batch, args.context)
        except ValueError as e:
            raise UsageError(f"--batch / --context: {e}") from None
        if args.windows < 2 or args.boot < 100:
            raise UsageError("need --windows >= 2 (an interval resamples them), --boot >= 100")
        check_cluster_args(args)
        parse_budget(args.budget, 1.0)            # its syntax, before the model loads
        out = None if args.bytes_only else resolve_out(args.out, args.record, f"frontier/{args.model}")
        fmts = split_list(args.formats, "--formats")
        bad = [f for f in fmts if f not in SENS_FORMATS]
        if bad:
            raise UsageError(f"unknown format(s) {bad}; valid: {', '.join(SENS_FORMATS)}")
        gpus = ceilings(args.gpu or ["H200", "GB10"])
        from fp8lab.store import REFERENCE
        sp = Path(args.sensitivity) if args.sensitivity else \
            (REFERENCE if args.record else Path("runs")) / "sensitivity" / args.model
        sp = sp / "sensitivity.csv" if sp.is_dir() else sp
        if not sp.is_file():
            raise UsageError(f"{sp}: no sensitivity.csv (run python -m fp8lab.sensitivity --out ... first)")
        sens = read_sensitivity(sp)
        from fp8lab.provenance import git_state
        t0, git0 = time.time(), git_state()       # the tree as the run starts (its cell files dirty it later)
        model, name, sha, note = load_for_parts(args.model)
        pl = plan(model, sens, [1.0], args.batch, args.context, fmts)
        budgets = parse_budget(args.budget, pl["bf16"])
        pl = plan(model, sens, budgets, args.batch, args.context, fmts)
        del model
        parts, bytes_fn, bf16 = pl["parts"], pl["bytes_fn"], pl["bf16"]
        print(f"{name}: all-bf16 {bf16 / 1e6:.2f} MB per decode step (batch {args.batch}, context {args.context}); "
              f"greedy path of {len(pl['path'])} assignments down to {pl['path'][-1][1] / 1e6:.2f} MB")
        points = []     # (key, name, kind, budget, assignment, predicted)
        if not args.no_uniform:
            for label, w, head, kv in UNIFORM:
                a = {pp.name: (kv if pp.kv else head if pp.lm_head else w) for pp in parts}
                points.append(("uniform-" + label.replace(" ", "_").replace("+", "plus"), label, "uniform", "", a, ""))
        for B, a, b, pred in pl["picks"]:
            if a is None:
                print(f"budget {B / 1e6:.2f} MB: below the smallest assignment the formats allow "
                      f"({pl['path'][-1][1] / 1e6:.2f} MB); skipped")
                continue
            tag = f"{B / bf16:.3f}"
            points.append((f"mixed-{tag}", f"mixed <= {B / bf16:.0%}", "mixed", f"{B:.0f}", a, f"{pred:.6g}"))
        seen, unique = set(), []
        for pt in points:          # a budget whose greedy pick equals an earlier point is that point
            sig = tuple(sorted(pt[4].items()))
            if sig in seen:
                print(f"  {pt[1]}: same assignment as an earlier point; not evaluated twice")
                continue
            seen.add(sig)
            unique.append(pt)
        points = unique
        for key, label, kind, B, a, pred in points:
            print(f"  {label:<28} {bytes_fn(a) / 1e6:8.2f} MB  " + "  ".join(
                f"{g} {t * 1e12 / bytes_fn(a):,.0f} tok/s" for g, t in gpus.items()) +
                  (f"  predicted {float(pred):+.2f}%" if pred != "" else "") + f"  {_short(a, parts)}")
        if args.bytes_only:
            return 0
        from fp8lab import stats
        from fp8lab.distributed import Cell, default_workers, paired_ppl_delta, run_cells
        from fp8lab.provenance import provenance
        from fp8lab.store import FolderLock, atomic_write_json, write_rows
        import numpy as np
        data = data_spec(args.windows, args.seq_len, args.seed,
                         corpus="random" if args.model == "tiny-llama" else "boolq")
        cells = [Cell("baseline", args.model, {"weights": []}, data)]
        cells += [Cell(key, args.model, assignment_desc(a, parts), data) for key, *_, a, _ in points]
        command = " ".join(["python -m fp8lab.frontier", *(argv if argv is not None else sys.argv[1:])])
        workers = default_workers() if args.workers is None else args.workers
        res = run_cells(cells, out, scheduler=args.scheduler, workers=workers, threads=args.threads,
                        device=args.device, command=command)
        base = res["baseline"]
        bppl = stats.ppl(np.asarray(base["nll"]), np.asarray(base["ntok"]))
        common = dict(model=name, model_sha256=sha[:16], bf16_bytes_per_step=f"{bf16:.0f}",
                      ceilings=json.dumps(gpus), seq_len=args.seq_len, batch=args.batch, context=args.context,
                      baseline_ppl=f"{bppl:.6g}", model_note=note)
        rows = [dict(common, point="bf16 (as loaded)", kind="baseline", budget="", bytes_per_step=f"{bf16:.0f}",
                     predicted_delta_pct="", ppl=f"{bppl:.6g}", delta_pct="0", ci95_low="0", ci95_high="0",
                     n=len(base["nll"]), assignment=_short({}, parts))]
        for key, label, kind, B, a, pred in points:
            r = res[key]
            d, lo, hi, n = paired_ppl_delta(r, base, n_boot=args.boot, seed=args.seed)
            rows.append(dict(common, point=label, kind=kind, budget=B, bytes_per_step=f"{bytes_fn(a):.0f}",
                             predicted_delta_pct=pred, ppl=f"{stats.ppl(np.asarray(r['nll']), np.asarray(r['ntok'])):.6g}",
                             delta_pct=f"{d:.6g}", ci95_low=f"{lo:.6g}", ci95_high=f"{hi:.6g}", n=n,
                             assignment=_short(a, parts)))
            print(f"  {label:<28} {bytes_fn(a) / 1e6:8.2f} MB  ppl {d:+.3f}% [{lo:+.3f}, {hi:+.3f}]"
                  + (f"  (predicted {float(pred):+.3f}%)" if pred != "" else ""))
        with FolderLock(out, command):
            write_rows(rows, out / "frontier.csv", CSV_FIELDS)
            atomic_write_json(out / "provenance.json", provenance(
                command, git=git0, wall_seconds=round(time.time() - t0, 1), model={"name": name, "sha256": sha},
                model_note=note, sensitivity_csv=str(sp), settings={**data, "batch": args.batch,
                "context": args.context, "formats": fmts, "budgets_bytes": budgets, "ceilings_TBps": gpus,
                "workers": workers, "scheduler": args.scheduler, "n_boot": args.boot},
                greedy="greedy: least predicted delta per byte saved, one part at a time (not an optimal search)",
                bytes_note="per-part sum over the model's parameter shapes with fp8lab.bandwidth.FORMATS / KV_DTYPES"))
            if args.plot:
                print(plot_frontier(out / "frontier.csv", out / "frontier.png"))
        print(f"wrote {out / 'frontier.csv'} ({len(rows)} points) in {time.time() - t0:.0f}s")
        return 0
    except UsageError as e:
        return fail(str(e))
    except Exception as e:
        from fp8lab.data import DataError
        from fp8lab.distributed import DistributedError
        from fp8lab.models import ModelError
        from fp8lab.recipes import RecipeError
        from fp8lab.store import DamagedFile, FolderBusy
        if isinstance(e, (ModelError, DataError, RecipeError, DistributedError, FolderBusy, DamagedFile,
                          FileNotFoundError)):
            return fail(str(e))
        raise


if __name__ == "__main__":
    from fp8lab.cli import run
    run(main)
