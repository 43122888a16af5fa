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

    python -m fp8lab.kv_drift --windows 8 --seq-len 2048          # writes outputs/kv_drift/
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .store import read_rows, write_rows
from .calibration import KVObserver, StaticKVScales, dynamic_kv, observe_kv, static_kv
from .stats import paired_bootstrap_ci

CAL_TOKENS = (16, 64, 256, 1024)
CONFIGS = ("baseline", "e4m3-uncal", *(f"e4m3-cal{n}" for n in CAL_TOKENS), "e4m3-dyn", "e5m2-uncal",
           "e4m3-cal256-channel")


def buckets_for(seq_len: int) -> list[tuple[int, int]]:
    """Position buckets, roughly logarithmic: [1,64), [64,256), [256,1024), [1024,2048), ... up to seq_len."""
    edges = [1, 64, 256, 1024]
    while edges[-1] * 2 <= seq_len:
        edges.append(edges[-1] * 2)
    edges = [e for e in edges if e < seq_len] + [seq_len]
    return list(zip(edges[:-1], edges[1:]))


def token_nll(model, ids: torch.Tensor) -> np.ndarray:
    """NLL of each predicted token of one window [1, L] -> [L-1] (position p predicts token p+1)."""
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[0, :-1].float()
        return F.cross_entropy(logits, ids[0, 1:], reduction="none").double().numpy()


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
        rest = config[len("e4m3-cal"):]
        n, gran = (int(rest.split("-")[0]), "channel") if rest.endswith("-channel") else (int(rest), "tensor")
        obs = KVObserver(n, gran)
        with observe_kv(model, obs), torch.no_grad():
            model(input_ids=ids[:, :n], use_cache=False)      # the calibration pass: the first n tokens
        return static_kv(model, obs.scales("e4m3"))
    raise ValueError(f"unknown KV configuration {config!r}; valid: {', '.join(CONFIGS)}")


def run(model, windows: torch.Tensor, configs=CONFIGS, progress: bool = True) -> dict[str, np.ndarray]:
    """Per-token NLL [n_windows, L-1] for every configuration, on the same windows."""
    from tqdm.auto import tqdm

    out = {}
    for cfg in configs:
        rows = []
        for i in tqdm(range(len(windows)), desc=cfg, disable=not progress, leave=False):
            ids = windows[i:i + 1]
            with kv_context(model, cfg, ids):
                rows.append(token_nll(model, ids))
        out[cfg] = np.stack(rows)
        if not np.all(np.isfinite(out[cfg])):
            raise FloatingPointError(f"{cfg}: non-finite NLL")
    return out


def summarize(nll: dict[str, np.ndarray], seq_len: int, n_boot: int = 2000) -> list[dict]:
    """One row per configuration x position bucket: ppl, delta % vs baseline with a 95 % paired CI, n windows."""
    base = nll["baseline"]
    rows = []
    for cfg, a in nll.items():
        for lo, hi in buckets_for(seq_len):
            sl = slice(lo - 1, hi - 1)           # predictions for positions lo..hi-1
            r, b = a[:, sl].sum(1), base[:, sl].sum(1)
            ntok = np.full(len(r), a[:, sl].shape[1], np.float64)
            stat = lambda x, y, n: (np.exp((np.sum(x, -1) - np.sum(y, -1)) / np.sum(n, -1)) - 1) * 100
            delta = float(stat(r, b, ntok))
            ci = (0.0, 0.0) if cfg == "baseline" else paired_bootstrap_ci(stat, (r, b, ntok), n_boot=n_boot)
            rows.append({"config": cfg, "pos_lo": lo, "pos_hi": hi,
                         "ppl": math.exp(r.sum() / ntok.sum()), "baseline_ppl": math.exp(b.sum() / ntok.sum()),
                         "delta_pct": delta, "ci95_low": ci[0], "ci95_high": ci[1], "n": len(r)})
    return rows


def read_csv(path) -> list[dict]:
    rows = read_rows(path)
    for r in rows:
        for k in ("pos_lo", "pos_hi", "n"):
            r[k] = int(r[k])
        for k in ("ppl", "baseline_ppl", "delta_pct", "ci95_low", "ci95_high"):
            r[k] = float(r[k])
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
    otherwise flatten the differences that matter).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    cfgs = [c for c in dict.fromkeys(r["config"] for r in rows) if c != "baseline"]
    fig, axes = plt.subplots(1, 2, figsize=(15, 5.8))
    small = [c for c in cfgs if max(abs(r["ci95_high"]) for r in rows if r["config"] == c) < 10]
    for ax, show in zip(axes, (cfgs, small)):
        for j, c in enumerate(cfgs):
            if c not in show:
                continue
            rr = [r for r in rows if r["config"] == c]
            x = np.array([math.sqrt(r["pos_lo"] * r["pos_hi"]) for r in rr]) * (1 + 0.04 * (j - len(cfgs) / 2))
            y = np.array([r["delta_pct"] for r in rr])
            err = np.array([[r["delta_pct"] - r["ci95_low"] for r in rr], [r["ci95_high"] - r["delta_pct"] for r in rr]])
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=c, color=f"C{j}")
        ax.axhline(0, color="black", lw=1)
        ax.set_xscale("log", base=2)
        buckets = list(dict.fromkeys((r["pos_lo"], r["pos_hi"]) for r in rows))
        ax.set_xticks([math.sqrt(lo * hi) for lo, hi in buckets], [f"{lo}-{hi}" for lo, hi in buckets], fontsize=10)
        ax.set_xlabel("token positions (bucket)", fontsize=13)
        ax.set_ylabel("perplexity change vs baseline KV (%)", fontsize=12)
        ax.legend(fontsize=9, ncol=2)
    n = rows[0]["n"]
    axes[0].set_title(f"every configuration (95 % paired CI, n = {n} windows)", fontsize=12)
    axes[1].set_title("zoom: configurations within +-10 %", fontsize=12)
    fig.suptitle("FP8 KV cache: perplexity change by position in the context", fontsize=14)
    if note:
        fig.text(0.01, 0.01, note, fontsize=9, color="dimgray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    return fig


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fp8lab.kv_drift", description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="HF id or path (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--corpus", default="ppl", help="ppl (BoolQ passages) or ppl_lambada")
    p.add_argument("--windows", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--out", default="outputs/kv_drift")
    p.add_argument("--plot", action="store_true", help="only redraw the figure from <out>/kv_drift.csv")
    a = p.parse_args(argv)
    out = Path(a.out)
    configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    bad = [c for c in configs if c not in CONFIGS]
    if bad:
        print(f"error: unknown KV configuration(s) {bad}; valid: {', '.join(CONFIGS)}", file=sys.stderr)
        return 2
    if "baseline" not in configs:
        configs = ["baseline"] + configs
    if a.plot:
        rows = read_csv(out / "kv_drift.csv")
        prov = json.loads((out / "provenance.json").read_text()) if (out / "provenance.json").exists() else {}
        plot(rows, out / "kv_drift.png", prov.get("model_note", ""))
        print(f"redrew {out / 'kv_drift.png'}")
        return 0
    from . import data, models
    from .provenance import git_state

    t0 = time.time()
    lm = models.load_model(a.model)
    corpus = data.load_corpus(data.PPL_CORPORA.get(a.corpus, a.corpus))
    windows, _ = data.token_windows(lm.tokenizer, corpus.text, a.seq_len, a.windows)
    nll = run(lm.model, windows, configs)
    rows = summarize(nll, a.seq_len)
    write_rows(rows, out / "kv_drift.csv")
    note = lm.model_note
    prov = {"command": "python -m fp8lab.kv_drift " + " ".join(argv if argv is not None else sys.argv[1:]),
            "git_commit": git_state()["git_commit"], "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "model": lm.name, "model_source": lm.source, "model_sha256": lm.file_sha256, "model_note": note,
            "corpus": corpus.name, "corpus_files": corpus.files, "windows": a.windows, "seq_len": a.seq_len,
            "configs": configs, "wall_s": round(time.time() - t0, 1), "torch": torch.__version__,
            "device": "cpu", "threads": torch.get_num_threads(),
            "calibration": "per window: a forward over its first N tokens records max |K|, |V| per layer; frozen"}
    (out / "provenance.json").write_text(json.dumps(prov, indent=1) + "\n")
    plot(rows, out / "kv_drift.png", note)
    for r in rows:
        if r["config"] != "baseline":
            print(f"{r['config']:22s} pos {r['pos_lo']:>5}-{r['pos_hi']:<5} ppl {r['ppl']:8.3f}  "
                  f"delta {r['delta_pct']:+6.2f} %  [{r['ci95_low']:+.2f}, {r['ci95_high']:+.2f}]  n={r['n']}")
    print(f"wrote {out}/kv_drift.csv, kv_drift.png, provenance.json in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
