"""The activation lessons, measured on the model (notebook 11): where the large values are, how activation scales
are chosen, and whether SmoothQuant or a Hadamard rotation tames the outliers.

    python -m fp8lab.outlier_study                       # all three parts -> runs/outliers/ (git-ignored)
    python -m fp8lab.outlier_study --parts stats         # only the statistics (~minutes)
    python -m fp8lab.outlier_study --record              # the committed reference results -> outputs/outliers/

Three parts, all on the lab's default model (SmolLM2-135M-Instruct, whose weights are 4-bit GGUF Q4_1
dequantized: the baseline is already a quantized model) and BoolQ text:

  stats    every Linear input on the calibration windows: max |x| per channel and per token, elements > 448,
           channel- vs token-structure; for two example inputs a heat map, log2 histograms before/after SmoothQuant
           and a rotation, and the quantization SQNR of each (stats.json)
  scaling  W8A8 E4M3 (weights per tensor) with every activation-scaling strategy of fp8lab.activation_scaling:
           static, dynamic per tensor / token / 1x128 group, delayed (scaling.csv)
  taming   static per-tensor W8A8 E4M3 and INT8, and W4A4 NVFP4 (static global scale), each without a transform,
           with SmoothQuant (alpha sweep for E4M3) and with a Hadamard rotation (taming.csv)

The test windows are the sweep's (16 x 512 BoolQ tokens, seed 0), so the baseline perplexity equals the one in
outputs/results.csv. Calibration uses 8 other BoolQ windows (checked disjoint from the test windows). Every delta is
against the baseline with a 95 % paired bootstrap interval over the windows, and against a reference row of the same
part (`ref`: the weight-only row for scaling, the same format without a transform for taming). Per-window NLLs are
kept in <out>/per_window/ and reused by a rerun with the same settings; <out>/provenance.json has one record per
part.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import outliers as O
from .activation_scaling import DelayedInputQuant, StaticInputQuant
from .hadamard import RandomHadamard
from .recipes import Recipe, applied
from .scaling import QuantSpec, fake_quant

__all__ = ["Setup", "setup", "Config", "scaling_configs", "taming_configs", "build_recipe", "run_stats", "run_quality",
           "examples", "exactness", "merge_rows", "paired", "read_csv", "format_rows", "format_sqnr", "plot_structure", "plot_heatmaps",
           "plot_histograms", "plot_quality", "main"]

PARTS = ("stats", "scaling", "taming")
CSV_FIELDS = ["part", "config", "fmt", "transform", "act_scaling", "causal", "description", "ppl", "baseline_ppl",
              "delta_pct", "ci95_low", "ci95_high", "ref", "delta_vs_ref_pct", "ref_ci95_low", "ref_ci95_high", "n",
              "seq_len", "seconds"]
_W = {"e4m3": QuantSpec("e4m3", "tensor"), "int8": QuantSpec("int8", "tensor"), "nvfp4": QuantSpec("e2m1", "nvfp4")}


@dataclass
class Setup:
    lm: object                      # fp8lab.models.LoadedModel
    test: torch.Tensor              # [n, L] test windows (the sweep's)
    nbytes: torch.Tensor
    cal: torch.Tensor               # [n_cal, L] held-out calibration windows
    settings: dict
    cache: dict = field(default_factory=dict)

    @property
    def model(self):
        return self.lm.model

    def stats(self) -> O.InputStats:
        """Baseline statistics of every Linear input on the calibration windows (computed once)."""
        if "stats" not in self.cache:
            self.cache["stats"] = O.calibrate(self.model, windows=self.cal, keep_tokens=True)
        return self.cache["stats"]

    def rotated_amax(self) -> dict[str, float]:
        """Per-Linear max of the rotated inputs on the calibration windows (a calibration pass with the rotation)."""
        if "rot_amax" not in self.cache:
            undo = O.HadamardRotation(seed=0)(self.model)
            try:
                self.cache["rot_amax"] = O.calibrate(self.model, windows=self.cal).static_amax()
            finally:
                undo()
        return self.cache["rot_amax"]


def setup(model_name=None, n_windows: int = 16, seq_len: int = 512, n_cal: int = 8, calib: str = "boolq") -> Setup:
    from . import data, models

    lm = models.load_model(model_name, verbose=False)
    text = data.load_corpus("boolq").text
    test, nbytes = data.token_windows(lm.tokenizer, text, seq_len, n_windows, seed=0)
    cal = O.calibration_windows(lm.tokenizer, n_cal, seq_len, calib, exclude=test if calib == "boolq" else None)
    settings = {"model": lm.name, "model_sha256": lm.file_sha256[:16], "model_note": lm.model_note,
                "corpus": "boolq", "n_windows": n_windows, "seq_len": seq_len, "seed": 0,
                "calibration": f"{n_cal} x {seq_len} tokens of {calib} ({'BoolQ windows disjoint from the test windows' if calib == 'boolq' else 'SciQ support passages'})",
                "n_cal": n_cal, "calib": calib}
    return Setup(lm, test, nbytes, cal, settings)


# ---- configurations ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Config:
    name: str
    part: str
    fmt: str
    transform: str            # none | smoothquant | hadamard
    act_scaling: str          # weight-only | static | dynamic-tensor | dynamic-token | dynamic-group128 | delayed
    causal: bool
    description: str
    alpha: float = 0.5
    ref: str = "baseline"


def scaling_configs() -> list[Config]:
    d = "E4M3 weights per tensor"
    return [
        Config("e4m3-w", "scaling", "e4m3", "none", "weight-only", True, f"{d}; Linear inputs unquantized"),
        Config("e4m3-wa-static", "scaling", "e4m3", "none", "static", True,
               f"{d}; inputs per tensor, scale calibrated on the held-out windows, frozen", ref="e4m3-w"),
        Config("e4m3-wa-dyn-tensor", "scaling", "e4m3", "none", "dynamic-tensor", False,
               f"{d}; inputs per tensor, scale from the whole window (sees later tokens: an oracle)", ref="e4m3-w"),
        Config("e4m3-wa-dyn-token", "scaling", "e4m3", "none", "dynamic-token", True,
               f"{d}; one input scale per token", ref="e4m3-w"),
        Config("e4m3-wa-dyn-group128", "scaling", "e4m3", "none", "dynamic-group128", True,
               f"{d}; one input scale per 1x128 group of each token", ref="e4m3-w"),
        Config("e4m3-wa-delayed", "scaling", "e4m3", "none", "delayed", True,
               f"{d}; inputs per tensor, scale = max amax of the last 16 forwards (primed on the calibration windows)",
               ref="e4m3-w"),
    ]


TAMING_FORMATS = ("e4m3", "int8", "nvfp4")


def taming_configs(alphas=(0.25, 0.5, 0.75), formats=TAMING_FORMATS) -> list[Config]:
    out = []
    what = {"e4m3": "W8A8 E4M3 per tensor, static input scales", "int8": "W8A8 INT8 per tensor, static input scales",
            "nvfp4": "W4A4 NVFP4 (16-blocks, calibrated FP32 global input scale)"}
    for fmt in formats:
        base = f"{fmt}-wa-static"
        out.append(Config(base, "taming", fmt, "none", "static", True, what[fmt], ref=base))
        for a in (alphas if fmt == "e4m3" else (0.5,)):
            out.append(Config(f"{base}+sq{a:g}", "taming", fmt, "smoothquant", "static", True,
                              f"{what[fmt]}, after SmoothQuant alpha={a:g}", alpha=a, ref=base))
        out.append(Config(f"{base}+hadamard", "taming", fmt, "hadamard", "static", True,
                          f"{what[fmt]}, after a randomized Hadamard rotation", ref=base))
    return out


_DYN = {"dynamic-tensor": QuantSpec("e4m3", "tensor"), "dynamic-token": QuantSpec("e4m3", "token"),
        "dynamic-group128": QuantSpec("e4m3", "group", group_size=128)}


def build_recipe(cfg: Config, su: Setup) -> Recipe:
    """The recipe (weights, input slot or installed quantizer, transform) of one configuration."""
    weight = _W[cfg.fmt]
    if cfg.act_scaling == "weight-only":
        return Recipe(cfg.name, cfg.description, weight)
    if cfg.act_scaling in _DYN:
        return Recipe(cfg.name, cfg.description, weight, _DYN[cfg.act_scaling])
    st = su.stats()
    qfmt = "nvfp4" if cfg.fmt == "nvfp4" else cfg.fmt
    if cfg.act_scaling == "delayed":
        return Recipe(cfg.name, cfg.description, weight, transform=DelayedInputQuant(st.amax, cfg.fmt, 16))
    if cfg.transform == "none":
        return Recipe(cfg.name, cfg.description, weight, transform=StaticInputQuant(st.static_amax(), qfmt))
    if cfg.transform == "smoothquant":
        sq = O.SmoothQuant(st.chan_amax, cfg.alpha)
        sq.compute(su.model)
        amax = sq.smoothed_amax(st.static_amax())
        return Recipe(cfg.name, cfg.description, weight, transform=O.chain(sq, StaticInputQuant(amax, qfmt)))
    if cfg.transform == "hadamard":
        return Recipe(cfg.name, cfg.description, weight,
                      transform=O.chain(O.HadamardRotation(seed=0), StaticInputQuant(su.rotated_amax(), qfmt)))
    raise ValueError(f"no recipe for {cfg}")


# ---- running --------------------------------------------------------------------------------------------------
def _fingerprint(su: Setup, cfg: Config | None) -> str:
    what = {k: getattr(cfg, k) for k in ("name", "fmt", "transform", "act_scaling", "alpha")} if cfg else {}
    key = json.dumps({k: su.settings[k] for k in ("model_sha256", "n_windows", "seq_len", "seed", "n_cal", "calib")}
                     | what, sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _per_window(su: Setup, cfg: Config | None, out: Path | None, progress: bool):
    """Per-window NLL of one configuration (None = the baseline), from <out>/per_window/ when already computed."""
    from .evaluate import PplItems, eval_ppl
    from .store import DamagedFile, atomic_write_json, read_json

    name = cfg.name if cfg else "baseline"
    fp = _fingerprint(su, cfg)
    path = out / "per_window" / f"{name}.json" if out else None
    if path is not None and path.is_file():
        try:
            d = read_json(path, required=("fingerprint", "items", "seconds"))
            if d["fingerprint"] == fp:
                return PplItems.from_json(d["items"]), d["seconds"]
        except DamagedFile as e:
            print(f"[outlier_study] recomputing {name}: {e}", file=sys.stderr)
    t0 = time.time()
    if cfg is None:
        items = eval_ppl(su.model, su.test, su.nbytes, desc=name, progress=progress)
    else:
        recipe = build_recipe(cfg, su)
        with applied(su.model, recipe):
            items = eval_ppl(su.model, su.test, su.nbytes, desc=name, progress=progress)
    secs = round(time.time() - t0, 1)
    if path is not None:
        atomic_write_json(path, {"fingerprint": fp, "config": name, "items": items.to_json(), "seconds": secs})
    return items, secs


def run_quality(su: Setup, configs: list[Config], out: Path | None = None, progress: bool = True,
                n_boot: int = 2000) -> list[dict]:
    """Evaluate every configuration on the test windows; rows with paired deltas vs the baseline and vs `ref`."""
    from . import stats

    base, _ = _per_window(su, None, out, progress)
    items = {}
    rows = []
    for cfg in configs:
        it, secs = _per_window(su, cfg, out, progress)
        items[cfg.name] = it
        d, lo, hi = stats.delta_with_ci(stats.ppl_delta_pct, (it.nll, base.nll, it.ntok), n_boot=n_boot)
        row = {"part": cfg.part, "config": cfg.name, "fmt": cfg.fmt, "transform": cfg.transform,
               "act_scaling": cfg.act_scaling, "causal": "causal" if cfg.causal else "oracle",
               "description": cfg.description, "ppl": stats.ppl(it.nll, it.ntok),
               "baseline_ppl": stats.ppl(base.nll, base.ntok), "delta_pct": d, "ci95_low": lo, "ci95_high": hi,
               "ref": cfg.ref, "n": len(it.nll), "seq_len": su.settings["seq_len"], "seconds": secs}
        if cfg.ref != cfg.name and cfg.ref in items:
            r = items[cfg.ref]
            row["delta_vs_ref_pct"], row["ref_ci95_low"], row["ref_ci95_high"] = stats.delta_with_ci(
                stats.ppl_delta_pct, (it.nll, r.nll, it.ntok), n_boot=n_boot)
        rows.append(row)
        if progress:
            print(f"{cfg.name:28s} ppl {row['ppl']:8.3f}  {d:+7.2f} % [{lo:+.2f}, {hi:+.2f}]"
                  + (f"  vs {cfg.ref}: {row['delta_vs_ref_pct']:+.2f} % [{row['ref_ci95_low']:+.2f}, "
                     f"{row['ref_ci95_high']:+.2f}]" if "delta_vs_ref_pct" in row else ""), flush=True)
    return rows


def _pool(a: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Max-pool |a| [T, K] to about [rows, cols] (a heat map small enough for JSON; the max survives pooling)."""
    T, K = a.shape
    rt, ck = max(1, T // rows), max(1, K // cols)
    a = a[: T - T % rt, : K - K % ck]
    return a.reshape(T // rt, rt, K // ck, ck).amax(dim=(1, 3))


_SQNR_SPECS = (("e4m3 per tensor", QuantSpec("e4m3", "tensor")), ("int8 per tensor", QuantSpec("int8", "tensor")),
               ("nvfp4", QuantSpec("e2m1", "nvfp4")), ("e4m3 per token", QuantSpec("e4m3", "token")))


def _median_token_sqnr(x: torch.Tensor, q: torch.Tensor) -> float:
    """Median over tokens (rows) of each token's SQNR in dB: what a typical token keeps. The tensor-wide SQNR is
    dominated by its largest values and hides what happens to everything else."""
    sig = x.double().pow(2).sum(-1)
    err = (x.double() - q.double()).pow(2).sum(-1)
    db = 10 * torch.log10(sig.clamp(min=1e-300) / err.clamp(min=1e-300))
    return float(db.median())


def format_sqnr(stats: dict) -> str:
    """The examples' SQNR table: tensor-wide / median per token, for each version and format."""
    lines = []
    for e in stats["examples"]:
        fmts = list(next(iter(e["sqnr_db"].values())))
        lines.append(f"{e['label']}: layer {e['layer']} {e['kind']} input {e['shape']} -- SQNR dB, tensor-wide / "
                     f"median token")
        lines.append(f"  {'':18s}" + "".join(f"{f:>22s}" for f in fmts))
        for v in e["sqnr_db"]:
            lines.append(f"  {v:18s}" + "".join(
                f"{e['sqnr_db'][v][f]:>12.1f} / {e['sqnr_db_token_median'][v][f]:<7.1f}" for f in fmts))
    return "\n".join(lines)


def examples(su: Setup, rows: list[dict], window: int = 0) -> list[dict]:
    """Two example inputs: the most token-structured one (largest tok_ratio) and the most channel-structured one
    whose tokens look alike (largest chan_ratio with tok_ratio < 3). For each: a pooled heat map of |x| on one
    calibration window, log2(|x| / max) histograms before and after SmoothQuant (alpha 0.5) and the rotation, and
    the SQNR of per-tensor E4M3 / INT8 and of NVFP4 quantization of each version."""
    from .metrics import sqnr_db

    tok = max(rows, key=lambda r: r.get("tok_ratio", 0))
    flat = [r for r in rows if r is not tok and r.get("tok_ratio", 99) < 3] or [r for r in rows if r is not tok]
    chan = max(flat, key=lambda r: r["chan_ratio"])
    picked = [("token-structured", tok), ("channel-structured", chan)]
    xs = O.capture_inputs(su.model, su.cal[window:window + 1], [r["name"] for _, r in picked])
    mods = O.linear_modules(su.model)
    st = su.stats()
    out = []
    for label, r in picked:
        x = xs[r["name"]][0].float()                                       # [T, K]
        s = O.smoothing_factors(st.chan_amax[r["name"]], [mods[n].weight for n in r["members"]], 0.5)
        versions = {"as is": x, "SmoothQuant 0.5": x / s, "Hadamard": RandomHadamard(x.shape[-1], 0)(x)}
        hist, sq, sq_tok = {}, {}, {}
        for v, t in versions.items():
            hist[v] = O.log2_histogram(t)
            sq[v], sq_tok[v] = {}, {}
            for f, spec in _SQNR_SPECS:
                q = fake_quant(t, spec)
                sq[v][f] = sqnr_db(t, q)
                sq_tok[v][f] = _median_token_sqnr(t, q)
        hm = _pool(x.abs(), 128, 192)
        out.append({"label": label, "name": r["name"], "members": r["members"], "layer": r["layer"],
                    "kind": r["kind"], "window": window, "shape": list(x.shape),
                    "heatmap": [[float(f"{v:.4g}") for v in row] for row in hm.tolist()],
                    "histograms": hist, "sqnr_db": sq, "sqnr_db_token_median": sq_tok})
    return out


@torch.no_grad()
def exactness(su: Setup, window: int = 0) -> dict:
    """Each transform alone (no quantization) on one window: max |logit change| / max |logit|. Float rounding only."""
    ids = su.cal[window:window + 1]
    ref = su.model(input_ids=ids, use_cache=False).logits
    out = {}
    for name, t in (("SmoothQuant 0.5", O.SmoothQuant(su.stats().chan_amax, 0.5)), ("Hadamard", O.HadamardRotation(0))):
        undo = t(su.model)
        try:
            y = su.model(input_ids=ids, use_cache=False).logits
        finally:
            undo()
        out[name] = float((y - ref).abs().max() / ref.abs().max())
    return out


def run_stats(su: Setup) -> dict:
    st = su.stats()
    groups = O.input_groups(su.model)
    rows = O.summarize(st, groups)
    return {"settings": su.settings, "threshold": O.E4M3_AT_SCALE_1, "rows": rows,
            "examples": examples(su, rows), "exactness": exactness(su)}


# ---- reading and showing --------------------------------------------------------------------------------------------
def merge_rows(old: list[dict], new: list[dict], formats) -> list[dict]:
    """Taming rows of a run over `formats` merged into an earlier table: the earlier rows of other formats are kept,
    in format order."""
    rows = [r for r in old if r["fmt"] not in formats] + list(new)
    return sorted(rows, key=lambda r: TAMING_FORMATS.index(r["fmt"]))   # stable: keeps the order inside a format


def paired(out, a: str, b: str, n_boot: int = 2000) -> tuple[float, float, float]:
    """Perplexity change of configuration `a` against `b` in %, with its 95 % paired interval, from the per-window
    NLLs in <out>/per_window/ (both scored on the same windows)."""
    from . import stats
    from .evaluate import PplItems
    from .store import read_json

    ia, ib = (PplItems.from_json(read_json(Path(out) / "per_window" / f"{n}.json", required=("items",))["items"])
              for n in (a, b))
    if len(ia.nll) != len(ib.nll) or not np.array_equal(ia.ntok, ib.ntok):
        raise ValueError(f"{a} and {b} were not scored on the same windows")
    return stats.delta_with_ci(stats.ppl_delta_pct, (ia.nll, ib.nll, ia.ntok), n_boot=n_boot)


def read_csv(path) -> list[dict]:
    from .store import read_rows

    rows = read_rows(path, CSV_FIELDS)
    for r in rows:
        for k in ("ppl", "baseline_ppl", "delta_pct", "ci95_low", "ci95_high", "delta_vs_ref_pct", "ref_ci95_low",
                  "ref_ci95_high", "seconds"):
            r[k] = float(r[k]) if r[k] not in ("", None) else None
        for k in ("n", "seq_len"):
            r[k] = int(r[k])
    return rows


def format_rows(rows: list[dict]) -> str:
    """Plain-text table: config, causal, ppl, delta vs baseline [CI], delta vs the reference row [CI]."""
    lines = [f"{'config':28s} {'causal':7s} {'ppl':>8s} {'vs baseline, % [95% CI]':>26s}   {'vs ref, % [95% CI]':>26s}  ref"]
    for r in rows:
        ref = (f"{r['delta_vs_ref_pct']:+7.2f} [{r['ref_ci95_low']:+.2f}, {r['ref_ci95_high']:+.2f}]"
               if r.get("delta_vs_ref_pct") is not None else "")
        lines.append(f"{r['config']:28s} {r['causal']:7s} {r['ppl']:8.3f} "
                     f"{r['delta_pct']:+9.2f} [{r['ci95_low']:+.2f}, {r['ci95_high']:+.2f}]".ljust(73)
                     + f"   {ref:>26s}  {r['ref'] if ref else ''}")
    return "\n".join(lines)


def _plt():
    # no matplotlib.use("Agg") here: it would stop a notebook from showing the figure (matplotlib picks Agg by
    # itself on a machine without a display)
    import matplotlib.pyplot as plt
    return plt


def plot_structure(stats: dict):
    """Per layer and input kind: max |x| (with E4M3's 448), and how much the top channel / top token stands out."""
    plt = _plt()
    rows = stats["rows"]
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    for j, k in enumerate(kinds):
        rr = sorted((r for r in rows if r["kind"] == k), key=lambda r: r["layer"])
        x = [r["layer"] for r in rr]
        axes[0].plot(x, [r["amax"] for r in rr], "o-", ms=3, color=f"C{j}", label=k)
        axes[1].plot(x, [r["chan_ratio"] for r in rr], "o-", ms=3, color=f"C{j}", label=k)
        axes[2].plot(x, [r.get("tok_ratio", float("nan")) for r in rr], "o-", ms=3, color=f"C{j}", label=k)
    axes[0].axhline(stats["threshold"], color="black", ls="--", lw=1, label="448 (E4M3 max at scale 1)")
    for ax, t in zip(axes, ("largest |x| of the input", "channel structure: max / median of per-channel max",
                            "token structure: max / median of per-token max")):
        ax.set_yscale("log")
        ax.set_xlabel("layer")
        ax.set_title(t, fontsize=11)
        ax.legend(fontsize=8)
    fig.suptitle(f"Linear inputs on {stats['settings']['calibration']}", fontsize=12)
    fig.text(0.01, 0.01, stats["settings"]["model_note"], fontsize=8, color="dimgray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def plot_heatmaps(stats: dict):
    plt = _plt()
    from matplotlib.colors import LogNorm

    ex = stats["examples"]
    fig, axes = plt.subplots(1, len(ex), figsize=(7.5 * len(ex), 4.8))
    for ax, e in zip(np.atleast_1d(axes), ex):
        hm = np.asarray(e["heatmap"])
        im = ax.imshow(hm, aspect="auto", norm=LogNorm(vmin=max(hm.max() * 1e-4, 1e-6), vmax=hm.max()), cmap="magma",
                       interpolation="nearest", extent=(0, e["shape"][1], e["shape"][0], 0))
        ax.set_xlabel("channel")
        ax.set_ylabel("token position")
        ax.set_title(f"{e['label']}: layer {e['layer']} {e['kind']} input, |x| (max-pooled)", fontsize=10)
        fig.colorbar(im, ax=ax)
    fig.tight_layout()
    return fig


def plot_histograms(stats: dict):
    """log2(|x| / max|x|) per example input, as is / after SmoothQuant / after the rotation; the dashed lines are
    where E4M3 per tensor leaves its normal range (2**-6 / 448 of the max) and INT8's smallest step (1/127)."""
    plt = _plt()
    ex = stats["examples"]
    fig, axes = plt.subplots(1, len(ex), figsize=(7.5 * len(ex), 4.5))
    for ax, e in zip(np.atleast_1d(axes), ex):
        for j, (v, h) in enumerate(e["histograms"].items()):
            edges = np.asarray(h["edges"])
            c = np.asarray(h["counts"], float)
            ax.step(edges[:-1], c / c.sum(), where="post", color=f"C{j}", label=f"{v} (max {h['amax']:.3g})")
        ax.axvline(math.log2(2 ** -6 / 448), color="gray", ls="--", lw=1)
        ax.axvline(math.log2(1 / 127), color="gray", ls=":", lw=1)
        ax.set_xlabel("log2(|x| / max |x|)")
        ax.set_ylabel("fraction of elements")
        ax.set_title(f"{e['label']}: layer {e['layer']} {e['kind']} input", fontsize=10)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_quality(rows: list[dict], title: str = "", note: str = ""):
    """Perplexity change vs baseline with 95 % paired intervals, one bar per configuration."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.5))
    y = np.arange(len(rows))[::-1]
    d = np.array([r["delta_pct"] for r in rows])
    err = np.array([[r["delta_pct"] - r["ci95_low"] for r in rows], [r["ci95_high"] - r["delta_pct"] for r in rows]])
    colors = ["C3" if r["causal"] == "oracle" else "C0" for r in rows]
    ax.barh(y, d, xerr=err, color=colors, capsize=3)
    ax.set_yticks(y, [f"{r['config']}{' (oracle)' if r['causal'] == 'oracle' else ''}" for r in rows], fontsize=9)
    ax.axvline(0, color="black", lw=1)
    ax.set_xlabel("perplexity change vs baseline (%), 95 % paired bootstrap CI")
    if any(v > 50 for v in d):
        ax.set_xscale("symlog", linthresh=10)
    ax.set_title(title, fontsize=11)
    if note:
        fig.text(0.01, 0.005, note, fontsize=8, color="dimgray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


# ---- CLI ---------------------------------------------------------------------------------------------------------
DEFAULT_OUT = Path("runs") / "outliers"


def main(argv=None) -> int:
    from .cli import OneLineParser, UsageError, fail, parse, split_list

    p = OneLineParser(prog="python -m fp8lab.outlier_study", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None, help=f"output folder (default {DEFAULT_OUT}, git-ignored; "
                   "outputs/outliers only with --record)")
    p.add_argument("--record", action="store_true", help="write the committed reference (default --out then "
                   "outputs/outliers); without it nothing under outputs/ is written")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, from: {', '.join(PARTS)}")
    p.add_argument("--model", default=None, help="default: the embedded SmolLM2-135M-Instruct")
    p.add_argument("--windows", type=int, default=16, help="test windows (default 16, the sweep's)")
    p.add_argument("--seq-len", type=int, default=512, help="tokens per window (16 .. the model's context)")
    p.add_argument("--cal-windows", type=int, default=8, help="held-out calibration windows (default 8)")
    p.add_argument("--calib", default="boolq", help="calibration text: boolq (held-out windows) or sciq")
    p.add_argument("--alphas", default="0.25,0.5,0.75", help="SmoothQuant alphas for E4M3 (taming)")
    p.add_argument("--formats", default=",".join(TAMING_FORMATS),
                   help="taming formats, from: e4m3,int8,nvfp4 (NVFP4 input quantization is the slowest)")
    p.add_argument("--online", action="store_true", help="allow the model hub (hub ids)")
    p.add_argument("--quiet", action="store_true")
    argv = sys.argv[1:] if argv is None else argv
    a, status = parse(p, argv)
    if a is None:
        return status
    try:
        parts = split_list(a.parts, "--parts")
        formats = split_list(a.formats, "--formats")
        alphas = split_list(a.alphas, "--alphas")
    except UsageError as e:
        return fail(str(e))
    bad = [x for x in parts if x not in PARTS]
    try:
        alphas = tuple(float(x) for x in alphas)
    except ValueError:
        alphas = ()
    if bad:
        return fail(f"unknown part(s) {bad}; valid: {', '.join(PARTS)}")
    if any(f not in TAMING_FORMATS for f in formats):
        return fail(f"--formats must be a comma-separated subset of {','.join(TAMING_FORMATS)}, got {a.formats!r}")
    if not alphas or any(not 0 <= x <= 1 for x in alphas):
        return fail(f"--alphas must be comma-separated numbers in [0, 1], got {a.alphas!r}")
    if a.windows < 2 or a.cal_windows < 1 or a.seq_len < 16 or a.calib not in ("boolq", "sciq"):
        return fail("need --windows >= 2, --cal-windows >= 1, --seq-len >= 16, --calib boolq|sciq")
    from . import data, models
    from .provenance import git_state, provenance
    from .store import (REFERENCE, FolderBusy, FolderLock, atomic_write_json, out_folder, read_json, save_figure,
                        write_rows)

    try:
        out = out_folder(a.out, DEFAULT_OUT, record=a.record, record_default=REFERENCE / "outliers")
    except ValueError as e:
        return fail(str(e))
    if not a.online:            # before datasets / transformers read them: no hub lookups
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        models.check_seq_len(a.model, a.seq_len)        # from the config alone: no weights loaded yet
    except UsageError as e:
        return fail(str(e))
    cmd = "python -m fp8lab.outlier_study " + " ".join(argv)
    try:
        lock = FolderLock(out, cmd).__enter__()
    except FolderBusy as e:
        return fail(str(e))
    try:
        t0, git0 = time.time(), git_state()       # the tree as the run starts (its per-window files dirty it later)
        su = setup(a.model, a.windows, a.seq_len, a.cal_windows, a.calib)
        provs = read_json(out / "provenance.json") if (out / "provenance.json").is_file() else {}
        note = su.settings["model_note"]
        for part in parts:
            tp = time.time()
            if part == "stats":
                res = run_stats(su)
                atomic_write_json(out / "stats.json", res, indent=None)
                for name, fig in (("structure", plot_structure(res)), ("heatmaps", plot_heatmaps(res)),
                                  ("histograms", plot_histograms(res))):
                    save_figure(fig, out / f"{name}.png")
                    _plt().close(fig)
                over = [r for r in res["rows"] if r["n_over_448"]]
                print(f"stats: {len(res['rows'])} inputs; {len(over)} hold values > 448: "
                      + ", ".join(f"layer {r['layer']} {r['kind']} (max {r['amax']:.0f})" for r in over))
            else:
                cfgs = scaling_configs() if part == "scaling" else taming_configs(alphas, formats)
                rows = run_quality(su, cfgs, out, progress=not a.quiet)
                if part == "taming" and (out / "taming.csv").is_file():   # keep the other formats' rows
                    rows = merge_rows(read_csv(out / "taming.csv"), rows, formats)
                write_rows(rows, out / f"{part}.csv", CSV_FIELDS)
                title = {"scaling": "W8A8 E4M3: how the activation scale is chosen",
                         "taming": "Taming outliers before static per-tensor W8A8 / W4A4 NVFP4"}[part]
                fig = plot_quality(rows, title, note)
                save_figure(fig, out / f"{part}.png")
                _plt().close(fig)
                print(format_rows(rows))
            key = part if part != "taming" or formats == list(TAMING_FORMATS) else f"taming:{','.join(formats)}"
            provs[key] = provenance(cmd, git=git0, wall_s=round(time.time() - tp, 1), **su.settings)
            atomic_write_json(out / "provenance.json", provs)
        print(f"wrote {', '.join(parts)} to {out} in {time.time() - t0:.0f} s")
    except (data.DataError, models.ModelError) as e:
        return fail(str(e))
    finally:
        lock.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
