"""Does an FP8 KV cache drift at long context, and does calibration fix it? (seed 000's claims, tested)

For each KV configuration we run the same text windows and record the next-token NLL at every position,
then report perplexity per position bucket with a 95 % paired bootstrap interval (over windows) of the
change against the baseline cache. Configurations (see fp8lab.calibration):

    baseline              K/V as the model computes them (float32; the weights are dequantized 4-bit GGUF)
    e4m3-uncal            E4M3, scale 1.0 (vLLM's default without checkpoint scales)
    e4m3-cal{N}           E4M3, per-layer scales from max |K|, |V| over the first N tokens of the same
                          sequence (a short calibration forward), frozen for the rest: N in 16/64/256/1024
    e4m3-dyn              E4M3, a fresh scale per token and head (the reference)
    e5m2-uncal            E5M2 (range instead of precision), scale 1.0
    e4m3-cal256-channel   E4M3, frozen per-(head, dim) channel scales from 256 tokens (KIVI: K outliers
                          sit in fixed channels)

Every configuration here is causal from position N on: a calibrated scale is frozen after the first N
tokens; inside those N tokens it was fitted on their own future (like a server calibrating on a prompt).

    python -m fp8lab.kv_drift --windows 8 --seq-len 2048          # writes runs/kv_drift/<settings>/
    python -m fp8lab.kv_drift --windows 8 --seq-len 2048 --record # re-records the committed outputs/kv_drift/

A run writes kv_drift.csv, kv_drift.png and provenance.json (atomically) into a folder it locks for the whole
run: a second run into the same folder is refused at once, naming the holder. The default folder's name
holds the settings, so runs with other settings never overwrite each other; a folder already holding a run
with other settings is refused.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .calibration import KVObserver, StaticKVScales, dynamic_kv, observe_kv, static_kv
from .cli import UsageError, split_list
from .stats import paired_bootstrap_ci
from .store import REFERENCE, DamagedFile, FolderBusy, FolderLock, atomic_write_json, out_folder, read_json, read_rows, \
    save_figure, write_rows

CAL_TOKENS = (16, 64, 256, 1024)
CONFIGS = ("baseline", "e4m3-uncal", *(f"e4m3-cal{n}" for n in CAL_TOKENS), "e4m3-dyn", "e5m2-uncal",
           "e4m3-cal256-channel")
CSV_FIELDS = ["config", "pos_lo", "pos_hi", "ppl", "baseline_ppl", "delta_pct", "ci95_low", "ci95_high", "n"]
CORPORA = ("ppl", "ppl_lambada")
DEFAULT_OUT = Path("runs") / "kv_drift"


def calibration_tokens(config: str) -> int:
    """How many leading tokens a configuration calibrates on (0 for none): "e4m3-cal256-channel" -> 256."""
    if config.startswith("e4m3-cal"):
        return int(config[len("e4m3-cal"):].split("-")[0])
    return 0


def buckets_for(seq_len: int) -> list[tuple[int, int]]:
    """Position buckets, roughly logarithmic: [1,64), [64,256), [256,1024), [1024,2048), ... up to seq_len."""
    edges = [1, 64, 256, 1024]
    while edges[-1] * 2 <= seq_len:
        edges.append(edges[-1] * 2)
    edges = [e for e in edges if e < seq_len] + [seq_len]
    return list(zip(edges[:-1], edges[1:]))


def token_nll(model, ids: torch.Tensor) -> np.ndarray:
    """NLL of each predicted token of one window [1, L] -> [L-1] (position p predicts token p+1).

    The window goes to the model's device; the NLLs come back to the CPU as float64."""
    ids = ids.to(next(model.parameters()).device)
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[0, :-1].float()
        return F.cross_entropy(logits, ids[0, 1:], reduction="none").double().cpu().numpy()


def _n_layers(model) -> int:
    return int(model.config.num_hidden_layers)


def kv_context(model, config: str, ids: torch.Tensor):
    """The context manager that puts `model`'s attention into KV configuration `config` for window `ids`."""
    if config == "baseline":
        return contextlib.nullcontext()
    if config in ("e4m3-uncal", "e5m2-uncal"):
        return static_kv(model, StaticKVScales.uncalibrated(_n_layers(model), config[:4]))
    if config == "e4m3-dyn":
        return dynamic_kv(model, "e4m3")
    if config in CONFIGS and config.startswith("e4m3-cal"):
        n, gran = calibration_tokens(config), ("channel" if config.endswith("-channel") else "tensor")
        obs = KVObserver(n, gran)
        with observe_kv(model, obs), torch.no_grad():
            dev = next(model.parameters()).device
            model(input_ids=ids[:, :n].to(dev), use_cache=False)      # the calibration pass: the first n tokens
        return static_kv(model, obs.scales("e4m3"))
    raise ValueError(f"unknown KV configuration {config!r}; valid: {', '.join(CONFIGS)}")


def run(model, windows: torch.Tensor, configs=CONFIGS, progress: bool = True) -> dict[str, np.ndarray]:
    """Per-token NLL [n_windows, L-1] for every configuration, on the same windows.

    One labelled bar over configurations (the windows of the current one in its label), only where a
    terminal or a notebook shows it: written to a file, tqdm's cursor codes would be noise."""
    from tqdm import tqdm          # plain text bars: a notebook renders them too (no widget package needed)

    out = {}
    tty = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
    bar = tqdm(total=len(configs) * len(windows), desc="KV configurations x windows", unit="window",
               disable=not (progress and (tty or "ipykernel" in sys.modules)))
    for cfg in configs:
        rows = []
        bar.set_postfix_str(cfg)
        for i in range(len(windows)):
            ids = windows[i:i + 1]
            with kv_context(model, cfg, ids):
                rows.append(token_nll(model, ids))
            bar.update(1)
        out[cfg] = np.stack(rows)
        if not np.all(np.isfinite(out[cfg])):
            raise FloatingPointError(f"{cfg}: non-finite NLL")
    bar.close()
    return out


def summarize(nll: dict[str, np.ndarray], seq_len: int, n_boot: int = 2000, seed: int = 0) -> list[dict]:
    """One row per configuration x position bucket: ppl, delta % vs baseline with a 95 % paired CI, n windows.

    Needs at least 2 windows: with one, every resample is the same window and the "interval" has zero width."""
    base = nll["baseline"]
    if len(base) < 2:
        raise ValueError(f"n = {len(base)} window(s) is too small for an interval; use at least 2")
    rows = []
    for cfg, a in nll.items():
        for lo, hi in buckets_for(seq_len):
            sl = slice(lo - 1, hi - 1)           # predictions for positions lo..hi-1
            r, b = a[:, sl].sum(1), base[:, sl].sum(1)
            ntok = np.full(len(r), a[:, sl].shape[1], np.float64)
            stat = lambda x, y, n: (np.exp((np.sum(x, -1) - np.sum(y, -1)) / np.sum(n, -1)) - 1) * 100
            delta = float(stat(r, b, ntok))
            ci = (0.0, 0.0) if cfg == "baseline" else paired_bootstrap_ci(stat, (r, b, ntok), n_boot=n_boot, seed=seed)
            rows.append({"config": cfg, "pos_lo": lo, "pos_hi": hi,
                         "ppl": math.exp(r.sum() / ntok.sum()), "baseline_ppl": math.exp(b.sum() / ntok.sum()),
                         "delta_pct": delta, "ci95_low": ci[0], "ci95_high": ci[1], "n": len(r)})
    return rows


def read_csv(path) -> list[dict]:
    """The rows of a kv_drift.csv with numbers as numbers; `DamagedFile` if it cannot be trusted."""
    rows = read_rows(path)
    if not rows:
        raise DamagedFile(f"{path}: no rows (missing or empty)")
    missing = [k for k in CSV_FIELDS if k not in rows[0]]
    if missing:
        raise DamagedFile(f"{path}: missing column(s) {missing}")
    try:
        for r in rows:
            for k in ("pos_lo", "pos_hi", "n"):
                r[k] = int(r[k])
            for k in ("ppl", "baseline_ppl", "delta_pct", "ci95_low", "ci95_high"):
                r[k] = float(r[k])
    except ValueError as e:
        raise DamagedFile(f"{path}: {e}") from None
    return rows


def format_table(rows: list[dict]) -> str:
    """Plain-text table: one line per configuration, one column per position bucket (delta % [95 % CI])."""
    buckets = list(dict.fromkeys((r["pos_lo"], r["pos_hi"]) for r in rows))
    head = f"{'config':22s}" + "".join(f"{f'pos {lo}-{hi}':>24s}" for lo, hi in buckets)
    lines = [head]
    for c in dict.fromkeys(r["config"] for r in rows):
        cells = {(r["pos_lo"], r["pos_hi"]): r for r in rows if r["config"] == c}
        if c == "baseline":
            lines.append(f"{'baseline (ppl)':22s}" + "".join(f"{cells[b]['ppl']:>24.3f}" for b in buckets))
            continue
        lines.append(f"{c:22s}" + "".join(
            f"{cells[b]['delta_pct']:+7.2f} [{cells[b]['ci95_low']:+.2f},{cells[b]['ci95_high']:+.2f}]".rjust(24)
            for b in buckets))
    return "\n".join(lines)


def plot(rows: list[dict], path=None, note: str = ""):
    """Perplexity change vs position bucket, one line per KV configuration, with 95 % interval bars.

    Two panels: every configuration, and a zoom on those within +-10 % (a collapsing configuration would
    otherwise flatten the differences that matter). Buckets are evenly spaced categories, labelled
    "1024-2048" on one line each: on a log axis the 8k run's labels ran into each other. The legend sits
    below the panels, where it cannot cover a point. Uses pyplot without choosing a backend, so the figure
    shows inline in a notebook; `path` saves it (atomically) as well.
    """
    import matplotlib.pyplot as plt

    cfgs = [c for c in dict.fromkeys(r["config"] for r in rows) if c != "baseline"]
    buckets = list(dict.fromkeys((r["pos_lo"], r["pos_hi"]) for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(15, 6.6))
    small = [c for c in cfgs if max(abs(r["ci95_high"]) for r in rows if r["config"] == c) < 10]
    handles = {}
    for ax, show in zip(axes, (cfgs, small)):
        for j, c in enumerate(cfgs):
            if c not in show:
                continue
            rr = {(r["pos_lo"], r["pos_hi"]): r for r in rows if r["config"] == c}
            xs = [i + 0.06 * (j - (len(cfgs) - 1) / 2) for i, b in enumerate(buckets) if b in rr]
            y = np.array([rr[b]["delta_pct"] for b in buckets if b in rr])
            err = np.array([[rr[b]["delta_pct"] - rr[b]["ci95_low"] for b in buckets if b in rr],
                            [rr[b]["ci95_high"] - rr[b]["delta_pct"] for b in buckets if b in rr]])
            handles[c] = ax.errorbar(xs, y, yerr=err, marker="o", capsize=3, label=c, color=f"C{j}")
        ax.axhline(0, color="black", lw=1)
        ax.set_xticks(range(len(buckets)), [f"{lo}-{hi}" for lo, hi in buckets], fontsize=10,
                      rotation=30 if len(buckets) > 5 else 0, ha="right" if len(buckets) > 5 else "center")
        ax.set_xlim(-0.5, len(buckets) - 0.5)
        ax.set_xlabel("token positions (bucket)", fontsize=13)
        ax.set_ylabel("perplexity change vs baseline KV (%)", fontsize=12)
        ax.grid(axis="y", alpha=0.3)
    n = rows[0]["n"]
    axes[0].set_title(f"every configuration (95 % paired CI, n = {n} windows)", fontsize=12)
    axes[1].set_title("zoom: configurations within +-10 %", fontsize=12)
    fig.suptitle("FP8 KV cache: perplexity change by position in the context", fontsize=14)
    ncol = min(len(handles), 5) or 1
    fig.legend([handles[c] for c in cfgs if c in handles], [c for c in cfgs if c in handles], loc="lower center",
               ncol=ncol, fontsize=10, frameon=False, bbox_to_anchor=(0.5, 0.045))
    if note:
        fig.text(0.01, 0.01, note, fontsize=9, color="dimgray")
    legend_rows = -(-len(handles) // ncol)
    fig.tight_layout(rect=(0, 0.06 + 0.045 * legend_rows, 1, 1))
    if path is not None:
        save_figure(fig, path)
    return fig


class _Parser(argparse.ArgumentParser):
    def error(self, message):          # one line on stderr, exit 2
        self.exit(2, f"error: {message} (see python -m fp8lab.kv_drift --help)\n")


def _parser():
    p = _Parser(prog="python -m fp8lab.kv_drift", description=__doc__.split("\n")[0],
                epilog="\n\n".join(__doc__.split("\n\n")[2:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="offline name or path (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--corpus", default="ppl", help=f"{' or '.join(CORPORA)} (BoolQ or LAMBADA passages)")
    p.add_argument("--windows", type=int, default=8, help="windows (>= 2: the interval is over windows)")
    p.add_argument("--seq-len", type=int, default=2048, help="tokens per window (16 .. the model's context)")
    p.add_argument("--seed", type=int, default=0, help="seed for the window choice and the bootstrap")
    p.add_argument("--boot", type=int, default=2000, help="bootstrap resamples (100 .. 100000)")
    p.add_argument("--configs", default=None, help=f"comma-separated, from: {', '.join(CONFIGS)} (default: all "
                   "whose calibration fits in the window)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    p.add_argument("--out", default=None, help=f"output folder (default {DEFAULT_OUT}/<settings>, git-ignored; "
                   "locked for the whole run: a second run into it is refused at once)")
    p.add_argument("--record", action="store_true", help="write the committed reference (default --out then "
                   "outputs/kv_drift); without it nothing under outputs/ is written")
    p.add_argument("--redraw", "--plot", dest="redraw", action="store_true",
                   help="only redraw <out>/kv_drift.png from <out>/kv_drift.csv (no model)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _plan(a) -> dict:
    """Validate every argument up front; UsageError with a one-line reason."""
    if a.corpus not in CORPORA:
        raise UsageError(f"unknown --corpus {a.corpus!r}; valid: {', '.join(CORPORA)}")
    if a.windows < 2:
        raise UsageError(f"--windows {a.windows}: n is too small for an interval; use at least 2")
    if a.seq_len < 16:
        raise UsageError(f"--seq-len must be >= 16, got {a.seq_len}")
    if not 0 <= a.seed < 2 ** 32:
        raise UsageError(f"--seed must be in 0 .. 2**32-1, got {a.seed}")
    if not 100 <= a.boot <= 100_000:
        raise UsageError(f"--boot must be in 100 .. 100000, got {a.boot}")
    if a.configs is None:
        configs = [c for c in CONFIGS if calibration_tokens(c) < a.seq_len]
    else:
        configs = [c.strip() for c in a.configs.split(",") if c.strip()]
        bad = [c for c in configs if c not in CONFIGS]
        if bad or not configs:
            raise UsageError(f"unknown KV configuration(s) {', '.join(bad) or '(none given)'}; valid: {', '.join(CONFIGS)}")
        split_list(a.configs, "--configs")              # a doubled or trailing comma is a typo
        long = [c for c in configs if calibration_tokens(c) >= a.seq_len]
        if long:
            raise UsageError(f"{', '.join(long)} calibrate(s) on at least --seq-len {a.seq_len} tokens: nothing "
                             "would be left after calibration; use a longer --seq-len")
    if "baseline" not in configs:
        configs = ["baseline"] + configs
    return dict(corpus=a.corpus, windows=a.windows, seq_len=a.seq_len, seed=a.seed, n_boot=a.boot,
                configs=list(dict.fromkeys(configs)), device=a.device, model=a.model or "smollm2-135m")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = _parser().parse_args(argv)
    command = " ".join(["python -m fp8lab.kv_drift", *argv])
    from .data import DataError
    from .models import ModelError
    import os
    os.environ.setdefault("HF_HUB_OFFLINE", "1")            # offline like the sweep: no hub lookups
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        return _main(a, command)
    except (UsageError, FolderBusy, DataError, ModelError, DamagedFile) as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2


def _main(a, command: str) -> int:
    from . import data, models
    from .evaluate import check_device
    from .provenance import provenance

    plan = _plan(a)
    try:
        plan["device"] = check_device(a.device)
    except ValueError as e:
        raise UsageError(str(e)) from None
    tag = f"{Path(plan['model']).name}-{plan['corpus']}-L{plan['seq_len']}-w{plan['windows']}-s{plan['seed']}"
    if plan["device"] != "cpu":
        tag += "-" + plan["device"].replace(":", "")
    try:
        out = out_folder(a.out, DEFAULT_OUT / tag, record=a.record, record_default=REFERENCE / "kv_drift")
    except ValueError as e:
        raise UsageError(str(e)) from None
    if a.redraw:
        rows = read_csv(out / "kv_drift.csv")
        prov = _read_prov(out)
        with FolderLock(out, command):
            plot(rows, out / "kv_drift.png", prov.get("model_note", "") if prov else "")
        print(f"redrew {out / 'kv_drift.png'} from {out / 'kv_drift.csv'}; nothing was computed")
        return 0
    models.check_seq_len(a.model, plan["seq_len"])
    prov = provenance(command, cuda=plan["device"] != "cpu", settings=plan)     # before anything is written
    with FolderLock(out, command):
        old = _read_prov(out)
        if old and old.get("settings") and old["settings"] != plan:
            diff = {k: old["settings"].get(k) for k in plan if old["settings"].get(k) != plan[k]}
            raise UsageError(f"{out} holds a kv_drift run with other settings {diff}; choose another --out "
                             "(the default folder's name holds the settings)")
        t0 = time.time()
        if a.quiet or not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
            import transformers
            transformers.utils.logging.disable_progress_bar()
        lm = models.load_model(a.model)
        ctx = getattr(lm.model.config, "max_position_embeddings", None)
        if ctx and plan["seq_len"] > ctx:
            raise UsageError(f"--seq-len {plan['seq_len']} is beyond {lm.name}'s context of {ctx} tokens")
        if plan["device"] != "cpu":
            torch.backends.cuda.matmul.allow_tf32 = False
            lm.model.to(plan["device"])
        corpus = data.load_corpus(data.PPL_CORPORA[plan["corpus"]])
        windows, _ = data.token_windows(lm.tokenizer, corpus.text, plan["seq_len"], plan["windows"], seed=plan["seed"])
        nll = run(lm.model, windows, plan["configs"], progress=not a.quiet)
        rows = summarize(nll, plan["seq_len"], n_boot=plan["n_boot"], seed=plan["seed"])
        write_rows(rows, out / "kv_drift.csv", CSV_FIELDS)
        note = lm.model_note
        prov.update(model=lm.name, model_source=lm.source, model_sha256=lm.file_sha256, model_note=note,
                    corpus=corpus.name, corpus_files=corpus.files, windows=plan["windows"], seq_len=plan["seq_len"],
                    configs=plan["configs"], wall_s=round(time.time() - t0, 1),
                    calibration="per window: a forward over its first N tokens records max |K|, |V| per layer; "
                                "frozen for the whole window (positions < N were scaled with their own future)")
        atomic_write_json(out / "provenance.json", prov)
        plot(rows, out / "kv_drift.png", note)
        import matplotlib.pyplot as plt
        plt.close("all")
    for r in rows:
        if r["config"] != "baseline":
            print(f"{r['config']:22s} pos {r['pos_lo']:>5}-{r['pos_hi']:<5} ppl {r['ppl']:8.3f}  "
                  f"delta {r['delta_pct']:+6.2f} %  [{r['ci95_low']:+.2f}, {r['ci95_high']:+.2f}]  n={r['n']}")
    print(f"wrote {out}/kv_drift.csv, kv_drift.png, provenance.json in {time.time() - t0:.0f} s")
    return 0


def _read_prov(out: Path) -> dict | None:
    p = out / "provenance.json"
    if not p.is_file():
        return None
    try:
        return read_json(p)
    except DamagedFile as e:
        print(f"WARNING: {e}; ignoring it", file=sys.stderr)
        return None


if __name__ == "__main__":
    sys.exit(main())
