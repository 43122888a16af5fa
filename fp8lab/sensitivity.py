"""The sensitivity map: quantize ONE part of a model at a time and measure what perplexity pays for it.

A part is a set of tensors a serving engine could store in another format on its own:

    layer07     every Linear of decoder layer 7 (q/k/v/o + gate/up/down)
    q_proj      the q_proj of every layer (likewise k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)
    lm_head     the output projection (tied to the embedding in SmolLM2 and Gemma-3: quantizing it unties it,
                the input embedding stays as loaded)
    kv          the KV cache of every layer (keys after RoPE, values), dynamic per-layer scales
    layer07.q_proj   one Linear of one layer ("--parts grid": layers x types, a finer map)

Each part is quantized to each format (`--formats e4m3,nvfp4`; e4m3 = E4M3 with one scale per tensor, what
`e4m3-w` / `e4m3-kv` do; nvfp4 = E2M1 in 16-blocks with E4M3 scales, for weights and for the cache along
head_dim), everything else stays as loaded. Every cell is scored on the same token windows as the baseline, so the
delta is paired (fp8lab.stats), with its 95 % interval:

    python -m fp8lab.sensitivity --model smollm2-135m --windows 64 --out runs/sens --plot   (--record: outputs/)
    -> runs/sens/sensitivity.csv (part, format, delta % [ci]), runs/sens/sensitivity.png (the heat map)

The cells run through fp8lab.distributed (a local Dask cluster by default, `--scheduler` for yours, `--workers 0`
for one process); a rerun computes only the cells it does not have.

Why one part at a time: the map says where the bits matter (first and last layers? down_proj? the cache?), and
it is what a mixed-precision search ranks (fp8lab.frontier). Summing one-at-a-time deltas assumes they add up; the
frontier measures whether they do.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from fp8lab.cli import OneLineParser, UsageError, fail, parse, split_list
from fp8lab.parts import KV_SPECS, WEIGHT_SPECS, build_recipe  # noqa: F401  (re-exported: the parts API)

__all__ = ["WEIGHT_SPECS", "KV_SPECS", "FORMATS", "Part", "model_parts", "part_desc", "build_recipe",
           "sensitivity_cells", "sensitivity_rows", "read_sensitivity", "plot_heatmap", "main", "CSV_FIELDS"]

# The names on the command line: (weight storage, KV storage or None where the lab has no such cache format)
FORMATS = {"e4m3": ("fp8_tensor", "fp8"), "nvfp4": ("nvfp4", "nvfp4"), "mxfp8": ("mxfp8", None),
           "mxfp4": ("mxfp4", None), "int8": ("int8_channel", None), "e4m3-block": ("fp8_block128", None)}
PART_GROUPS = ("layers", "types", "lm_head", "kv", "grid")
CSV_FIELDS = ["model", "model_sha256", "part", "kind", "format", "ppl", "baseline_ppl", "delta_pct", "ci95_low",
              "ci95_high", "n", "seq_len", "seconds", "device", "model_note"]


class Part:
    """A named set of tensors: Linear-name regexes, and/or lm_head, and/or the KV cache (of some layers)."""

    def __init__(self, name: str, kind: str, regex: str | None = None, lm_head: bool = False,
                 kv_layers: list | None = None, kv: bool = False):
        self.name, self.kind, self.regex, self.lm_head, self.kv, self.kv_layers = \
            name, kind, regex, lm_head, kv, kv_layers

    def __repr__(self):
        return f"Part({self.name!r})"


def _layer_types(model) -> tuple[int, list[str]]:
    """(number of decoder layers, the Linear names inside a layer in module order: q_proj, k_proj, ...)."""
    layers, types = set(), []
    for n, m in model.named_modules():
        hit = re.search(r"\.layers\.(\d+)\.(?:.*\.)?([^.]+)$", n)
        if hit and type(m).__name__ == "Linear":
            layers.add(int(hit.group(1)))
            if hit.group(2) not in types:
                types.append(hit.group(2))
    if not layers:
        raise ValueError(f"{type(model).__name__}: no Linear inside '.layers.<i>.' found")
    return max(layers) + 1, types


def model_parts(model, groups=("layers", "types", "lm_head", "kv")) -> list[Part]:
    """The parts of a decoder LM, in a stable order. groups: layers, types, lm_head, kv, grid."""
    n_layers, types = _layer_types(model)
    w = len(str(n_layers - 1))
    parts = []
    for g in groups:
        if g == "layers":
            parts += [Part(f"layer{i:0{w}d}", "layer", rf"\.layers\.{i}\.") for i in range(n_layers)]
        elif g == "types":
            parts += [Part(t, "type", rf"\.layers\.\d+\.(?:.*\.)?{t}$") for t in types]
        elif g == "lm_head":
            parts.append(Part("lm_head", "lm_head", lm_head=True))
        elif g == "kv":
            parts.append(Part("kv", "kv", kv=True))
        elif g == "grid":
            parts += [Part(f"layer{i:0{w}d}.{t}", "grid", rf"\.layers\.{i}\.(?:.*\.)?{t}$")
                      for i in range(n_layers) for t in types]
        else:
            raise ValueError(f"unknown part group {g!r}; valid: layers, types, lm_head, kv, grid")
    return parts


def part_desc(part: Part, fmt: str) -> dict | None:
    """The recipe description (JSON) that quantizes only `part` to `fmt`; None if there is no such cell."""
    wfmt, kvfmt = FORMATS[fmt]
    if part.kv:
        return None if kvfmt is None else {"kv": kvfmt, **({"kv_layers": part.kv_layers} if part.kv_layers else {})}
    if part.lm_head:
        return {"lm_head": wfmt}
    return {"weights": [[part.regex, wfmt]]}


# ---- cells and rows ---------------------------------------------------------------------------------------
def data_spec(n_windows: int, seq_len: int, seed: int = 0, corpus: str = "boolq") -> dict:
    return {"corpus": corpus, "seq_len": int(seq_len), "n_windows": int(n_windows), "seed": int(seed)}


def sensitivity_cells(model_ref: str, parts: list[Part], formats: list[str], data: dict):
    from fp8lab.distributed import Cell
    cells = [Cell("baseline", model_ref, {"weights": []}, data, {"part": "-", "kind": "baseline", "format": "-"})]
    for fmt in formats:
        for p in parts:
            d = part_desc(p, fmt)
            if d is not None:
                cells.append(Cell(f"{p.name}-{fmt}", model_ref, d, data, {"part": p.name, "kind": p.kind,
                                                                          "format": fmt}))
    return cells


def sensitivity_rows(cells, results: dict, model: str, note: str, n_boot: int = 2000, seed: int = 0) -> list[dict]:
    import numpy as np
    from fp8lab import stats
    from fp8lab.distributed import paired_ppl_delta
    base = results["baseline"]
    bppl = stats.ppl(np.asarray(base["nll"]), np.asarray(base["ntok"]))
    rows = []
    for c in cells:
        if c.key == "baseline":
            continue
        r = results[c.key]
        d, lo, hi, n = paired_ppl_delta(r, base, n_boot=n_boot, seed=seed)
        rows.append(dict(model=model, model_sha256=str(base["model_sha256"])[:16], part=c.meta["part"],
                         kind=c.meta["kind"], format=c.meta["format"],
                         ppl=f"{stats.ppl(np.asarray(r['nll']), np.asarray(r['ntok'])):.6g}",
                         baseline_ppl=f"{bppl:.6g}", delta_pct=f"{d:.6g}", ci95_low=f"{lo:.6g}",
                         ci95_high=f"{hi:.6g}", n=n, seq_len=c.data["seq_len"], seconds=r.get("seconds", ""),
                         device=r.get("device", ""), model_note=note))
    return rows


def read_sensitivity(path) -> dict:
    """{(part, format): (delta %, ci low, ci high)} from a sensitivity.csv (or the folder holding it)."""
    from fp8lab.store import read_rows
    path = Path(path) / "sensitivity.csv" if Path(path).is_dir() else Path(path)
    rows = read_rows(path, CSV_FIELDS)
    if not rows:
        raise FileNotFoundError(f"{path}: no sensitivity rows (run python -m fp8lab.sensitivity first)")
    return {(r["part"], r["format"]): (float(r["delta_pct"]), float(r["ci95_low"]), float(r["ci95_high"]))
            for r in rows}


# ---- the heat map -------------------------------------------------------------------------------------------
def plot_heatmap(csv_path, out_png):
    """Two heat maps on one figure: formats x decoder layers, and formats x (Linear types, lm_head, KV).

    Colour: the perplexity delta (symmetric-log scale, so 0.05 % and 30 % are both readable); the number in
    a cell is the delta; a cell whose 95 % interval includes 0 is hatched (no detectable change at this n)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import SymLogNorm
    from fp8lab.store import read_rows, save_figure

    rows = read_rows(csv_path, CSV_FIELDS)
    if not rows:
        raise FileNotFoundError(f"{csv_path}: no rows to plot")
    fmts = list(dict.fromkeys(r["format"] for r in rows))
    groups = [("decoder layer (all its Linears)", [r for r in rows if r["kind"] == "layer"]),
              ("one part in every layer", [r for r in rows if r["kind"] in ("type", "lm_head", "kv")])]
    groups = [(t, g) for t, g in groups if g]
    vmax = max(abs(float(r["delta_pct"])) for r in rows)
    norm = SymLogNorm(linthresh=0.05, vmin=-vmax, vmax=vmax)
    widths = [len(dict.fromkeys(r["part"] for r in g)) for _, g in groups]
    fig, axes = plt.subplots(1, len(groups), figsize=(max(10, 0.45 * sum(widths) + 4), 1.1 * len(fmts) + 3.2),
                             gridspec_kw={"width_ratios": widths}, squeeze=False)
    for ax, (title, g) in zip(axes[0], groups):
        parts = list(dict.fromkeys(r["part"] for r in g))
        M = np.full((len(fmts), len(parts)), np.nan)
        sig = np.zeros_like(M, dtype=bool)
        for r in g:
            i, j = fmts.index(r["format"]), parts.index(r["part"])
            M[i, j] = float(r["delta_pct"])
            sig[i, j] = float(r["ci95_low"]) > 0 or float(r["ci95_high"]) < 0
        im = ax.imshow(M, cmap="RdBu_r", norm=norm, aspect="auto")
        for i in range(len(fmts)):
            for j in range(len(parts)):
                if np.isnan(M[i, j]):
                    continue
                ax.text(j, i, f"{M[i, j]:.2g}", ha="center", va="center", fontsize=7,
                        color="white" if abs(M[i, j]) > 0.3 * vmax else "black")
                if not sig[i, j]:
                    ax.add_patch(plt.Rectangle((j - .5, i - .5), 1, 1, fill=False, hatch="///", lw=0,
                                               edgecolor="#777777"))
        ax.set_xticks(range(len(parts)))
        ax.set_xticklabels([p.replace("layer", "") if p.startswith("layer") else p for p in parts],
                           rotation=90 if len(parts) > 12 else 45,
                           ha="center" if len(parts) > 12 else "right", fontsize=8)
        ax.set_yticks(range(len(fmts)))
        ax.set_yticklabels(fmts)
        ax.set_title(title, fontsize=10)
    fig.colorbar(im, ax=axes[0].tolist(), label="perplexity change vs baseline (%)", shrink=0.8)
    r0 = rows[0]
    fig.suptitle(f"Sensitivity map, {r0['model']}: one part quantized at a time, {r0['n']} windows x "
                 f"{r0['seq_len']} tokens; hatched = 95% interval includes 0", fontsize=10)
    fig.text(0.01, 0.01, f"{r0['model']}: {r0['model_note']}", fontsize=7, color="#444444")
    save_figure(fig, out_png, bbox_inches="tight")
    plt.close(fig)
    return Path(out_png)


# ---- command line -------------------------------------------------------------------------------------------
def resolve_out(arg, record: bool, sub: str) -> Path:
    """runs/<sub> by default; outputs/<sub> (the committed reference) only with --record (fp8lab.store.out_folder)."""
    from fp8lab.store import REFERENCE, out_folder
    try:
        p = out_folder(arg, Path("runs") / sub, record=record, record_default=REFERENCE / sub)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if record:
        from fp8lab.provenance import git_state
        if git_state().get("dirty") is not False:
            print(f"WARNING: recording reference results into {p} from a tree that is not a clean commit",
                  file=sys.stderr)
    return p


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    from fp8lab.distributed import default_workers, max_per_host
    p.add_argument("--workers", type=int, default=None, help="local Dask worker processes (default: one per "
                   f"GPU, else 2 on a CPU; here {default_workers()}); 0 = no Dask, one process; at most 4 per "
                   f"core (here {max_per_host()})")
    p.add_argument("--scheduler", default=None, help="address of a running Dask scheduler (tcp://host:8786): "
                   "use its workers instead of a local cluster")
    p.add_argument("--threads", type=int, default=1, help="torch threads per worker (default 1; at most 4 per "
                   f"core of this machine, here {max_per_host()})")
    p.add_argument("--device", default="auto", help="auto (worker i -> cuda:i mod n_gpus, else cpu), cpu, cuda:0 "
                   "(checked here; with --scheduler, on the workers)")


def check_cluster_args(args) -> None:
    """UsageError unless --workers, --threads, --scheduler and --device can work (before any model loads)."""
    from fp8lab.distributed import check_scheduler, max_per_host
    top = max_per_host()
    if args.workers is not None and not 0 <= args.workers <= top:
        raise UsageError(f"--workers {args.workers}: give 0 (one process) to {top} (4 per core here)")
    if not 1 <= args.threads <= top:
        raise UsageError(f"--threads {args.threads}: give 1 to {top} (4 per core here)")
    if args.scheduler is not None:
        try:
            check_scheduler(args.scheduler)
        except ValueError as e:
            raise UsageError(str(e)) from None
    elif args.device != "auto":      # a remote cluster's workers check their own devices
        from fp8lab.evaluate import check_device
        try:
            check_device(args.device)
        except ValueError as e:
            raise UsageError(str(e)) from None


def _parser():
    p = OneLineParser(prog="python -m fp8lab.sensitivity", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m", help="offline name (smollm2-135m, gemma3-270m) or folder")
    p.add_argument("--formats", default="e4m3,nvfp4", help=f"comma-separated, from: {', '.join(FORMATS)}")
    p.add_argument("--parts", default="layers,types,lm_head,kv", help=f"groups: {', '.join(PART_GROUPS)}")
    p.add_argument("--windows", type=int, default=64, help="BoolQ windows (default 64; at least 2, the intervals "
                   "resample them)")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--boot", type=int, default=2000)
    p.add_argument("--out", default=None, help="output folder (cells/, sensitivity.csv, provenance.json); default "
                   "runs/sensitivity/<model>, or outputs/sensitivity/<model> with --record")
    p.add_argument("--record", action="store_true", help="write the committed reference results under outputs/ "
                   "(without it nothing under outputs/ is written)")
    p.add_argument("--plot", action="store_true", help="draw <out>/sensitivity.png")
    add_cluster_args(p)
    return p


def load_for_parts(model_ref: str):
    """The model, its name, sha and note, for the driver (parts, bytes); 'tiny-llama' for tests."""
    if model_ref == "tiny-llama":
        from fp8lab.distributed import tiny_causal_lm
        return tiny_causal_lm(), "tiny-llama", "tiny-llama", "a 2-layer random Llama (a test model, no meaning)"
    from fp8lab.models import load_model
    lm = load_model(model_ref, verbose=True)
    return lm.model, lm.name, lm.file_sha256, lm.model_note


def main(argv=None) -> int:
    import os
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    args, status = parse(_parser(), argv)
    if args is None:
        return status
    try:
        fmts = split_list(args.formats, "--formats")
        bad = [f for f in fmts if f not in FORMATS]
        if bad:
            raise UsageError(f"unknown format(s) {bad}; valid: {', '.join(FORMATS)}")
        groups = split_list(args.parts, "--parts")
        bad = [g for g in groups if g not in PART_GROUPS]
        if bad:
            raise UsageError(f"unknown part group(s) {bad}; valid: {', '.join(PART_GROUPS)}")
        if args.windows < 2 or args.seq_len < 8 or args.boot < 100:
            raise UsageError("need --windows >= 2 (an interval resamples them), --seq-len >= 8, --boot >= 100")
        check_cluster_args(args)
        out = resolve_out(args.out, args.record, f"sensitivity/{args.model}")
        from fp8lab.distributed import default_workers, run_cells
        from fp8lab.provenance import git_state, provenance
        from fp8lab.store import FolderLock, atomic_write_json, write_rows
        t0, git0 = time.time(), git_state()       # the tree as the run starts (its cell files dirty it later)
        model, name, sha, note = load_for_parts(args.model)
        try:
            parts = model_parts(model, groups)
        except ValueError as e:
            raise UsageError(str(e)) from None
        del model
        data = data_spec(args.windows, args.seq_len, args.seed,
                         corpus="random" if args.model == "tiny-llama" else "boolq")
        cells = sensitivity_cells(args.model, parts, fmts, data)
        print(f"{name}: {len(cells)} cells ({len(parts)} parts x {len(fmts)} formats + baseline), "
              f"{args.windows} windows x {args.seq_len} tokens")
        command = " ".join(["python -m fp8lab.sensitivity", *(argv if argv is not None else sys.argv[1:])])
        workers = default_workers() if args.workers is None else args.workers
        results = run_cells(cells, out, scheduler=args.scheduler, workers=workers, threads=args.threads,
                            device=args.device, command=command)
        rows = sensitivity_rows(cells, results, name, note, n_boot=args.boot, seed=args.seed)
        with FolderLock(out, command):
            write_rows(rows, out / "sensitivity.csv", CSV_FIELDS)
            atomic_write_json(out / "provenance.json", provenance(
                command, git=git0, wall_seconds=round(time.time() - t0, 1), model={"name": name, "sha256": sha},
                model_note=note, settings={**data, "formats": fmts, "parts": groups, "n_boot": args.boot,
                                           "workers": workers, "scheduler": args.scheduler, "threads": args.threads},
                cells=len(cells), cell_seconds=round(sum(float(r.get("seconds", 0)) for r in results.values()), 1)))
            if args.plot:
                print(plot_heatmap(out / "sensitivity.csv", out / "sensitivity.png"))
        worst = sorted(rows, key=lambda r: -float(r["delta_pct"]))[:5]
        print("largest deltas: " + "; ".join(f"{r['part']}/{r['format']} {float(r['delta_pct']):+.3f}% "
                                            f"[{float(r['ci95_low']):+.3f}, {float(r['ci95_high']):+.3f}]"
                                            for r in worst))
        print(f"wrote {out / 'sensitivity.csv'} ({len(rows)} rows) in {time.time() - t0:.0f}s")
        return 0
    except UsageError as e:
        return fail(str(e))
    except Exception as e:
        from fp8lab.data import DataError
        from fp8lab.distributed import DistributedError
        from fp8lab.models import ModelError
        from fp8lab.recipes import RecipeError
        from fp8lab.store import FolderBusy
        if isinstance(e, (ModelError, DataError, RecipeError, DistributedError, FolderBusy)):
            return fail(str(e))
        raise


if __name__ == "__main__":
    from fp8lab.cli import run
    run(main)
