"""4-bit KV caches on a real model: per-token K/V error by layer, perplexity by position, sensitivity by layer.

    python -m fp8lab.kv_bits --windows 6 --seq-len 8192 --sens-windows 8 --sens-len 2048   # -> runs/kv_bits/

Seeds 000 and 002 claim that an NVFP4 KV cache works if the first and last layers stay in high precision
(`--kv-high-precision-layers N`), and that a Hadamard-rotated 4-bit cache ("turbo4") has a lower per-token error
than NVFP4 at the same bits. One model load, four steps, every token in one role only:

 1. windows     the corpus is cut into disjoint windows of --seq-len tokens; a seeded choice gives the test windows
                and a few more, which are cut into the calibration windows (--cal-windows x --cal-len) and the
                sensitivity windows (--sens-windows x --sens-len).
 2. calibrate   one forward per calibration window records max |K|, |V| per layer (NVFP4's frozen global scale)
                and the rotated coordinates that turbo4's Lloyd–Max codebooks are fitted to (fp8lab.kv_quant).
 3. sensitivity NVFP4 K/V in ONE layer at a time on the sensitivity windows: perplexity change and mean KL
                divergence from the baseline's next-token distribution per layer, each with a 95 % interval over
                windows. The K layers with the largest KL give `nvfp4-sens{K}` (K layers kept in high precision,
                chosen on data the test windows never saw) to set against `nvfp4-hp{K/2}`.
 4. test        per-token NLL of every configuration on the test windows, perplexity by position bucket with
                paired intervals (fp8lab.kv_drift's buckets and bootstrap); during the baseline forward each
                layer's K/V are quantized by every method and the per-token relative error ||x - x^|| / ||x||
                recorded, with the K/V outlier statistics and the model's RMSNorm weights beside them.

Configurations (all causal: every method stores each token from that token alone plus per-layer constants fixed
on calibration windows before the test windows are read):

    baseline       K/V as the model computes them (float32; the default model's weights are 4-bit GGUF)
    e4m3-uncal     FP8 E4M3, scale 1.0 (vLLM's default without checkpoint scales): 8 bits/element
    e4m3-dyn       FP8 E4M3, one scale per token and head: 8 + 32/head_dim bits/element
    nvfp4          NVFP4 (fp8lab.kv_quant): 4.5 bits/element
    nvfp4-hp{N}    NVFP4, first and last N layers untouched (seed 002's rule)
    nvfp4-sens{K}  NVFP4, the K layers the sensitivity step ranked highest untouched
    nvfp4-rot      rotation + NVFP4 (ablation)
    turbo4         rotation + calibrated 16-level codebook, fp16 RMS per 32 coordinates: 4.5 bits/element
    turbo4-gauss   the same with the standard normal's codebook (no calibration)
    turbo4-g64     one RMS per 64 coordinates: 4.25 bits/element

Writes to --out (default runs/kv_bits, git-ignored; outputs/kv_bits only with --record) under a FolderLock,
every file atomically (fp8lab.store):
ppl_by_position.csv, ppl_compare.csv, nll_by_bucket.csv, kv_error_by_layer.csv, sensitivity.csv, layers.csv,
summary.json, provenance.json and three figures. `--plot` only redraws the figures from those files.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch

from . import kv_drift, store
from . import kv_quant as kq
from .cli import UsageError, split_list
from .stats import delta_with_ci, paired_bootstrap_ci, ppl_delta_pct

FP8_CONFIGS = ("baseline", "e4m3-uncal", "e4m3-dyn")
DEFAULT_CONFIGS = ("baseline", "e4m3-uncal", "e4m3-dyn", "nvfp4", "nvfp4-hp1", "nvfp4-hp2", "nvfp4-hp4",
                   "nvfp4-sens4", "turbo4")
ERROR_METHODS = ("e4m3-uncal", "e4m3-dyn", "nvfp4", "nvfp4-rot", "turbo4", "turbo4-gauss", "turbo4-g64")
COMPARISONS = (("turbo4", "nvfp4"), ("nvfp4-hp1", "nvfp4"), ("nvfp4-hp2", "nvfp4"), ("nvfp4-hp4", "nvfp4"),
               ("nvfp4", "e4m3-dyn"))
_CFG = re.compile(r"^(nvfp4|nvfp4-rot|turbo4|turbo4-gauss|turbo4-g64)(?:-(hp|sens|L)(\d+))?$")


# ---- configurations ------------------------------------------------------------------------------------
def parse_config(name: str) -> tuple[str, str | None, int | None]:
    """'nvfp4-hp2' -> ('nvfp4', 'hp', 2); 'e4m3-dyn' -> ('e4m3-dyn', None, None). UsageError if unknown."""
    if name in FP8_CONFIGS:
        return name, None, None
    m = _CFG.match(name)
    if not m:
        raise UsageError(f"unknown KV configuration {name!r}; valid: {', '.join(FP8_CONFIGS)}, "
                         f"{', '.join(kq.METHODS)}, and nvfp4-hp<N>, nvfp4-sens<K>, nvfp4-L<layer>")
    method, kind, n = m.group(1), m.group(2), m.group(3)
    return method, kind, (int(n) if n is not None else None)


def make_plan(name: str, params: kq.KV4Params, n_layers: int, ranking: list[int] | None = None) -> kq.KV4Plan:
    """The per-layer plan of a 4-bit configuration name (see the module docstring)."""
    method, kind, n = parse_config(name)
    if kind is None:
        return kq.KV4Plan(method, params, n_layers=n_layers)
    if kind == "hp":
        if 2 * n >= n_layers:
            raise UsageError(f"{name}: keeping the first and last {n} of {n_layers} layers leaves nothing to quantize")
        return kq.KV4Plan(method, params, keep_ends=n, n_layers=n_layers)
    if kind == "sens":
        if ranking is None:
            raise UsageError(f"{name} needs the sensitivity step (--sens-windows > 0)")
        if not 0 < n < n_layers:
            raise UsageError(f"{name}: K must be between 1 and {n_layers - 1}")
        return kq.KV4Plan(method, params, keep=ranking[:n], n_layers=n_layers)
    if not 0 <= n < n_layers:
        raise UsageError(f"{name}: layer {n} does not exist (the model has {n_layers})")
    return kq.KV4Plan(method, params, keep=[i for i in range(n_layers) if i != n], n_layers=n_layers)


def kv_config(model, name: str, ids: torch.Tensor, params, n_layers: int, ranking=None):
    """The context manager that makes the attention read K/V as configuration `name` stores them."""
    if name in FP8_CONFIGS:
        return kv_drift.kv_context(model, name, ids)
    from .recipes import install_kv_functions

    return install_kv_functions(model, make_plan(name, params, n_layers, ranking).make)


# ---- windows --------------------------------------------------------------------------------------------
def split_windows(tokenizer, text: str, seq_len: int, n_test: int, cal: tuple[int, int], sens: tuple[int, int],
                  seed: int = 0):
    """(test [n_test, seq_len], cal [n, cal_len], sens [n, sens_len]): disjoint windows of one corpus.

    fp8lab.data.token_windows draws n_test + extra disjoint windows of seq_len; the extra ones (drawn in a
    seeded random order, so they are spread over the corpus) are cut into the shorter calibration and
    sensitivity windows. A tokenizer that starts every text with BOS gets BOS in front of each short window.
    """
    from . import data

    def per_long(length):                  # short windows one long window yields
        return (seq_len - bos_len) // (length - bos_len)

    bos = getattr(tokenizer, "bos_token_id", None)
    probe = tokenizer("a")["input_ids"]
    bos_len = 1 if bos is not None and probe and probe[0] == bos else 0
    need = [(n, length) for n, length in (cal, sens) if n > 0]
    extra = sum(math.ceil(n / per_long(length)) for n, length in need)
    win, _ = data.token_windows(tokenizer, text, seq_len, n_test + extra, seed=seed)
    order = torch.randperm(len(win), generator=torch.Generator().manual_seed(seed)).tolist()
    test = win[sorted(order[:n_test])]
    spare = [win[i] for i in order[n_test:]]
    out = []
    for n, length in (cal, sens):
        rows = []
        while len(rows) < n:
            w = spare.pop(0)
            body = w[bos_len:]
            for j in range(per_long(length)):
                chunk = body[j * (length - bos_len):(j + 1) * (length - bos_len)]
                rows.append(torch.cat([w[:bos_len], chunk]))
        out.append(torch.stack(rows[:n]) if n else torch.empty(0, length, dtype=torch.long))
    return test, out[0], out[1]


# ---- calibration, errors, sensitivity ------------------------------------------------------------------
def calibrate(model, windows: torch.Tensor, head_dim: int, seed: int = 0, groups=(32, 64)) -> kq.KV4Params:
    """Fit the frozen per-layer constants (kv_quant.KVCalibration) on the calibration windows."""
    from .recipes import install_kv_functions

    cal = kq.KVCalibration(head_dim, groups=groups, seed=seed)
    with install_kv_functions(model, cal.make), torch.no_grad():
        for i in range(len(windows)):
            model(input_ids=windows[i:i + 1], use_cache=False)
    return cal.fit(f"{len(windows)} calibration windows x {windows.shape[1]} tokens")


def error_quantizers(params: kq.KV4Params, n_layers: int, methods=ERROR_METHODS) -> dict:
    """{(layer, which): {method: function}} for the per-token error measurement."""
    from .calibration import dynamic_fake_quant, static_fake_quant

    one = torch.tensor(1.0)
    plans = {m: kq.KV4Plan(m, params, n_layers=n_layers) for m in methods if m in kq.METHODS}
    out = {}
    for layer in range(n_layers):
        for which in ("key", "value"):
            fs = {}
            for m in methods:
                if m == "e4m3-dyn":
                    fs[m] = lambda x: dynamic_fake_quant(x, "e4m3")
                elif m == "e4m3-uncal":
                    fs[m] = lambda x: static_fake_quant(x, one, "e4m3")
                else:
                    fs[m] = plans[m].quantizer(layer, which)
            out[(layer, which)] = fs
    return out


class ErrorRecorder:
    """A KV function set that leaves K/V alone and records, per layer, every method's per-token error.

    acc[(layer, which, method)] = [sum of per-vector relative errors, vectors, sum ||x - x^||^2, sum ||x||^2]
    stats[(layer, which)]       = running max |x|, max channel-amax / median channel-amax (outlier ratio), and
                                  the share of elements above the calibration amax (where NVFP4's frozen scale clips)
    """

    def __init__(self, quantizers: dict, params: kq.KV4Params):
        self.q, self.params = quantizers, params
        self.acc: dict = {}
        self.stats: dict = {}

    def make(self, layer: int, which: str):
        def f(x: torch.Tensor) -> torch.Tensor:
            xd = x.detach().float()
            norm = xd.norm(dim=-1)
            ok = norm > 0
            for m, q in self.q[(layer, which)].items():
                e = (xd - q(xd).float()).norm(dim=-1)
                a = self.acc.setdefault((layer, which, m), [0.0, 0, 0.0, 0.0])
                a[0] += float((e[ok] / norm[ok]).sum())
                a[1] += int(ok.sum())
                a[2] += float(e.pow(2).sum())
                a[3] += float(norm.pow(2).sum())
            ch = xd.abs().amax(dim=(0, 2))                        # [kv_heads, head_dim]
            ratio = float((ch.amax(-1) / ch.median(-1).values.clamp(min=1e-30)).max())
            over = float((xd.abs() > self.params.amax[(layer, which)]).float().mean())
            s = self.stats.setdefault((layer, which), {"amax": 0.0, "outlier_ratio": 0.0, "over_cal_amax": []})
            s["amax"] = max(s["amax"], float(xd.abs().max()))
            s["outlier_ratio"] = max(s["outlier_ratio"], ratio)
            s["over_cal_amax"].append(over)
            return x

        return f

    def take(self) -> dict:
        """The accumulated sums of this window (and reset them)."""
        acc, self.acc = self.acc, {}
        return acc


def window_nll(model, ids, ctx) -> np.ndarray:
    with ctx:
        return kv_drift.token_nll(model, ids)


def _logprobs(model, ids: torch.Tensor) -> torch.Tensor:
    """log-softmax of the next-token logits of one window [1, L] -> [L-1, vocab] (float32)."""
    with torch.no_grad():
        return torch.log_softmax(model(input_ids=ids, use_cache=False).logits[0, :-1].float(), dim=-1)


def _nll_kl(lp_base: torch.Tensor, lp: torch.Tensor, targets: torch.Tensor, chunk: int = 512) -> tuple[float, float]:
    """(sum of NLL under lp, mean per-token KL(base || lp) in nats), in chunks of positions to bound memory."""
    nll = float(-lp.gather(1, targets[:, None]).sum())
    kl = 0.0
    for a in range(0, lp.shape[0], chunk):
        b_, q = lp_base[a:a + chunk], lp[a:a + chunk]
        kl += float((b_.exp() * (b_ - q)).sum())
    return nll, kl / lp.shape[0]


def sensitivity(model, windows, params, n_layers, progress=print, n_boot=2000, part=None) -> list[dict]:
    """NVFP4 K/V in one layer at a time, every other layer untouched, on each sensitivity window.

    Per layer: the perplexity change vs baseline and the mean per-token KL divergence of the next-token
    distribution from the baseline's, each with a 95 % interval over windows. The KL is what the ranking uses:
    it is >= 0 for every token, so it does not average away in sign noise the way a perplexity change of a few
    tenths of a percent does (to first order the expected NLL increase IS the KL).
    """
    W = len(windows)
    nll = np.zeros((n_layers + 1, W))           # last row: baseline
    kl = np.zeros((n_layers, W))
    t0 = time.time()
    for i in range(W):
        ids = windows[i:i + 1]
        done = part.load(f"sens-{i}") if part is not None else None
        if done is not None:
            nll[:, i], kl[:, i] = done
            continue
        tgt = ids[0, 1:]
        lp_b = _logprobs(model, ids)
        nll[n_layers, i] = float(-lp_b.gather(1, tgt[:, None]).sum())
        for layer in range(n_layers):
            with kv_config(model, f"nvfp4-L{layer}", ids, params, n_layers):
                lp = _logprobs(model, ids)
            nll[layer, i], kl[layer, i] = _nll_kl(lp_b, lp, tgt)
            del lp
        if part is not None:
            part.save(f"sens-{i}", (nll[:, i].copy(), kl[:, i].copy()))
        progress(f"  sensitivity window {i + 1}/{W}: {n_layers + 1} forwards of {ids.shape[1]} tokens "
                 f"({time.time() - t0:.0f} s)")
    ntok = np.full(W, windows.shape[1] - 1, np.float64)
    rows = []
    for layer in range(n_layers):
        d, lo, hi = delta_with_ci(ppl_delta_pct, (nll[layer], nll[n_layers], ntok), n_boot=n_boot)
        k_lo, k_hi = paired_bootstrap_ci(lambda x: np.mean(x, -1), (kl[layer],), n_boot=n_boot)
        rows.append({"layer": layer, "delta_pct": d, "ci95_low": lo, "ci95_high": hi, "kl_mean": float(kl[layer].mean()),
                     "kl_ci95_low": k_lo, "kl_ci95_high": k_hi, "n": W, "seq_len": int(windows.shape[1])})
    return rows


def ranking_of(sens_rows: list[dict]) -> list[int]:
    """Layers from most to least sensitive, by the mean KL divergence (the perplexity change where absent)."""
    key = "kl_mean" if "kl_mean" in sens_rows[0] else "delta_pct"
    return [int(r["layer"]) for r in sorted(sens_rows, key=lambda r: -float(r[key]))]


# ---- summaries ------------------------------------------------------------------------------------------
def error_rows(per_window: list[dict], methods, n_layers: int, head_dim: int = 64, n_boot: int = 2000) -> list[dict]:
    """Per (layer, K/V, method): mean per-token relative error with a 95 % CI over windows, and SQNR."""
    rows = []
    for layer in range(n_layers):
        for which in ("key", "value"):
            for m in methods:
                acc = np.array([w[(layer, which, m)] for w in per_window], dtype=np.float64)   # [W, 4]
                mean = acc[:, 0].sum() / acc[:, 1].sum()
                lo, hi = paired_bootstrap_ci(lambda s, n: np.sum(s, -1) / np.sum(n, -1), (acc[:, 0], acc[:, 1]),
                                             n_boot=n_boot)
                rows.append({"layer": layer, "kind": which, "method": m, "bits": kq.bits_per_element(m, head_dim),
                             "mean_rel_err": mean, "ci95_low": lo,
                             "ci95_high": hi, "sqnr_db": 10 * math.log10(acc[:, 3].sum() / max(acc[:, 2].sum(), 1e-300)),
                             "n_windows": len(per_window), "n_vectors": int(acc[:, 1].sum())})
    return rows


def error_ratio(per_window: list[dict], a: str, b: str, n_layers: int, layers=None, kinds=("key", "value"),
                n_boot: int = 2000) -> tuple[float, float, float]:
    """Mean per-token error of method a / method b over the given layers and kinds, paired CI over windows."""
    layers = range(n_layers) if layers is None else layers
    keys = [(l, k) for l in layers for k in kinds]
    sa = np.array([[w[(l, k, a)][0] for l, k in keys] for w in per_window]).sum(1)
    sb = np.array([[w[(l, k, b)][0] for l, k in keys] for w in per_window]).sum(1)
    return delta_with_ci(lambda x, y: np.sum(x, -1) / np.sum(y, -1), (sa, sb), n_boot=n_boot)


def rmsnorm_stats(model) -> list[dict]:
    """Per layer: |gamma| of the RMSNorm in front of attention (it scales what k_proj/v_proj read) and of the one
    in front of the MLP (and of a k_norm where the model has one). Large gammas in a few channels are one way a
    model gets outlier channels in its K/V."""
    rows = []
    layers = getattr(getattr(model, "model", model), "layers", [])
    for i, blk in enumerate(layers):
        r = {"layer": i}
        for tag, name in (("attn_norm", "input_layernorm"), ("mlp_norm", "post_attention_layernorm")):
            w = getattr(blk, name, None)
            if w is not None and getattr(w, "weight", None) is not None:
                g = w.weight.detach().float().abs()
                r.update({f"{tag}_mean": float(g.mean()), f"{tag}_max": float(g.max()),
                          f"{tag}_p99": float(torch.quantile(g, 0.99))})
        k_norm = getattr(getattr(blk, "self_attn", None), "k_norm", None)
        if k_norm is not None and getattr(k_norm, "weight", None) is not None:
            r["k_norm_max"] = float(k_norm.weight.detach().float().abs().max())
        rows.append(r)
    return rows


def bucket_rows(nll: dict, seq_len: int) -> list[dict]:
    """Per (config, window, bucket): the NLL sum and token count — enough for any paired re-analysis."""
    out = []
    for cfg, a in nll.items():
        for lo, hi in kv_drift.buckets_for(seq_len):
            for w in range(a.shape[0]):
                out.append({"config": cfg, "window": w, "pos_lo": lo, "pos_hi": hi,
                            "nll_sum": float(a[w, lo - 1:hi - 1].sum()), "n_tokens": hi - lo})
    return out


def compare_rows(nll: dict, seq_len: int, pairs=COMPARISONS, n_boot: int = 2000) -> list[dict]:
    """Config a against config b (not the baseline), per position bucket, paired over windows."""
    rows = []
    for a, b in pairs:
        if a in nll and b in nll:
            for r in kv_drift.summarize({"baseline": nll[b], a: nll[a]}, seq_len, n_boot):
                if r["config"] == a:
                    r = dict(r, reference=b)
                    r["reference_ppl"] = r.pop("baseline_ppl")
                    rows.append(r)
    return rows


# ---- the run ----------------------------------------------------------------------------------------------
class _Partial:
    """Finished stages of an interrupted run, kept in <out>/.partial/ and reused when the settings match."""

    def __init__(self, out: Path, settings: dict):
        self.dir = out / ".partial"
        self.settings = settings
        self.reused: list[str] = []
        prev = self.dir / "settings.json"
        ok = False
        if prev.is_file():
            try:
                ok = store.read_json(prev) == json.loads(json.dumps(settings))
            except store.DamagedFile:
                ok = False
        if not ok and self.dir.is_dir():
            for f in self.dir.iterdir():
                f.unlink()
        store.atomic_write_json(prev, settings)

    def load(self, name: str):
        p = self.dir / f"{name}.pt"
        if not p.is_file():
            return None
        try:
            obj = torch.load(io.BytesIO(p.read_bytes()), weights_only=False)
        except Exception:           # a damaged piece is recomputed, never trusted
            return None
        self.reused.append(name)
        return obj

    def save(self, name: str, obj) -> None:
        buf = io.BytesIO()
        torch.save(obj, buf)
        store.atomic_write_bytes(self.dir / f"{name}.pt", buf.getvalue())

    def clear(self) -> None:
        if self.dir.is_dir():
            for f in self.dir.iterdir():
                f.unlink()
            self.dir.rmdir()


def run(lm, args, out: Path, say=print) -> dict:
    """Steps 1-4 of the module docstring; writes every file into `out`; returns the summary dict."""
    from . import data, provenance

    model, cfg = lm.model, lm.model.config
    n_layers = int(cfg.num_hidden_layers)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    configs = args.configs
    for c in configs:                               # validated against the model before any forward
        if c not in FP8_CONFIGS:
            method, kind, n = parse_config(c)
            if kind == "hp" and 2 * n >= n_layers:
                raise UsageError(f"{c}: keeping the first and last {n} of {n_layers} layers leaves nothing to quantize")
            if kind == "sens" and not (args.sens_windows > 0 and 0 < n < n_layers):
                raise UsageError(f"{c} needs --sens-windows > 0 and K in 1..{n_layers - 1}")
            if kind == "L" and not 0 <= n < n_layers:
                raise UsageError(f"{c}: the model has {n_layers} layers")
    max_pos = int(getattr(cfg, "max_position_embeddings", args.seq_len))
    if args.seq_len > max_pos:
        raise UsageError(f"--seq-len {args.seq_len} exceeds the model's context of {max_pos} tokens")
    if head_dim % 16:
        raise UsageError(f"head_dim {head_dim} is not a multiple of 16: NVFP4's blocks do not fit")

    t_start = time.time()
    times = {}
    corpus = data.load_corpus(data.PPL_CORPORA.get(args.corpus, args.corpus))
    test, calw, sensw = split_windows(lm.tokenizer, corpus.text, args.seq_len, args.windows,
                                      (args.cal_windows, args.cal_len), (args.sens_windows, args.sens_len), args.seed)
    settings = {k: v for k, v in vars(args).items() if k not in ("plot", "threads", "out_path", "record")}
    settings["out"] = str(out)
    settings.update(model_sha256=lm.file_sha256, model=lm.name)
    part = _Partial(out, settings)

    t = time.time()
    params = part.load("calibration")
    if params is None:
        params = calibrate(model, calw, head_dim, seed=args.seed)
        part.save("calibration", params)
    times["calibrate_s"] = round(time.time() - t, 1)
    say(f"calibrated on {len(calw)} x {calw.shape[1]} tokens in {times['calibrate_s']} s")

    sens_rows, ranking = [], None
    if args.sens_windows > 0:
        t = time.time()
        sens_rows = part.load("sensitivity")
        if sens_rows is None:
            say(f"sensitivity: NVFP4 in one layer at a time, {len(sensw)} windows x {sensw.shape[1]} tokens")
            sens_rows = sensitivity(model, sensw, params, n_layers, say, args.n_boot, part)
            part.save("sensitivity", sens_rows)
        ranking = ranking_of(sens_rows)
        times["sensitivity_s"] = round(time.time() - t, 1)
        store.write_rows(sens_rows, out / "sensitivity.csv")

    t = time.time()
    err_methods = [m for m in ERROR_METHODS]
    quantizers = error_quantizers(params, n_layers, err_methods)
    nll: dict = {}
    per_window_err: list = []
    layer_stats: dict = {}
    for cfg_name in configs:
        rows = []
        for i in range(len(test)):
            ids = test[i:i + 1]
            cached = part.load(f"nll-{cfg_name}-{i}")
            if cached is not None:
                a, werr, wstats = cached
            else:
                t1 = time.time()
                werr, wstats = None, None
                if cfg_name == "baseline":
                    from .recipes import install_kv_functions

                    rec = ErrorRecorder(quantizers, params)
                    a = window_nll(model, ids, install_kv_functions(model, rec.make))
                    werr, wstats = rec.take(), rec.stats
                else:
                    a = window_nll(model, ids, kv_config(model, cfg_name, ids, params, n_layers, ranking))
                if not np.all(np.isfinite(a)):
                    raise FloatingPointError(f"{cfg_name}: non-finite NLL in window {i}")
                part.save(f"nll-{cfg_name}-{i}", (a, werr, wstats))
                say(f"  {cfg_name:14s} window {i + 1}/{len(test)}: ppl {math.exp(a.mean()):.3f}  "
                    f"({time.time() - t1:.0f} s; {time.time() - t_start:.0f} s total)")
            rows.append(a)
            if werr is not None:
                per_window_err.append(werr)
                for k, s in wstats.items():
                    acc = layer_stats.setdefault(k, {"amax": 0.0, "outlier_ratio": 0.0, "over_cal_amax": []})
                    acc["amax"] = max(acc["amax"], s["amax"])
                    acc["outlier_ratio"] = max(acc["outlier_ratio"], s["outlier_ratio"])
                    acc["over_cal_amax"] += s["over_cal_amax"]
        nll[cfg_name] = np.stack(rows)
    times["test_s"] = round(time.time() - t, 1)

    # ---- write -----------------------------------------------------------------------------------------
    ppl_rows = kv_drift.summarize(nll, args.seq_len, args.n_boot)
    for r in ppl_rows:
        r["bits"] = _bits(r["config"], head_dim)
    store.write_rows(ppl_rows, out / "ppl_by_position.csv")
    pairs = list(COMPARISONS) + [(f"nvfp4-sens{k}", f"nvfp4-hp{k // 2}") for k in _sens_ks(configs) if k % 2 == 0]
    cmp = compare_rows(nll, args.seq_len, pairs, n_boot=args.n_boot)
    if cmp:
        store.write_rows(cmp, out / "ppl_compare.csv")
    store.write_rows(bucket_rows(nll, args.seq_len), out / "nll_by_bucket.csv")
    err_rows = error_rows(per_window_err, err_methods, n_layers, head_dim, args.n_boot)
    store.write_rows(err_rows, out / "kv_error_by_layer.csv")
    norms = rmsnorm_stats(model)
    lrows = []
    for layer in range(n_layers):
        r = {"layer": layer, **{k: v for k, v in norms[layer].items() if k != "layer"}}
        for which in ("key", "value"):
            s = layer_stats[(layer, which)]
            r[f"{which}_amax"] = s["amax"]
            r[f"{which}_cal_amax"] = params.amax[(layer, which)]
            r[f"{which}_outlier_ratio"] = s["outlier_ratio"]
            r[f"{which}_over_cal_amax_pct"] = 100 * float(np.mean(s["over_cal_amax"]))
        lrows.append(r)
    store.write_rows(lrows, out / "layers.csv")

    ratios = {}
    for a_, b_ in (("turbo4", "nvfp4"), ("turbo4-gauss", "nvfp4"), ("turbo4-g64", "nvfp4"), ("nvfp4-rot", "nvfp4")):
        for kinds in (("key", "value"), ("key",), ("value",)):
            ratios[f"{a_}/{b_}:{'+'.join(kinds)}"] = error_ratio(per_window_err, a_, b_, n_layers, kinds=kinds,
                                                                 n_boot=args.n_boot)
    per_layer_wins = {}
    for which in ("key", "value"):
        wins = []
        for layer in range(n_layers):
            _, lo, hi = error_ratio(per_window_err, "turbo4", "nvfp4", n_layers, layers=[layer], kinds=(which,),
                                    n_boot=max(200, args.n_boot // 10))
            wins.append("lower" if hi < 1 else "higher" if lo > 1 else "tie")
        per_layer_wins[which] = wins
    final = getattr(getattr(model, "model", model), "norm", None)
    summary = {
        "final_norm_abs": ({"mean": float(final.weight.detach().abs().mean()), "max": float(final.weight.detach().abs().max())}
                           if getattr(final, "weight", None) is not None else None),
        "model": lm.name, "model_note": lm.model_note, "n_layers": n_layers, "head_dim": head_dim,
        "kv_heads": int(getattr(cfg, "num_key_value_heads", cfg.num_attention_heads)),
        "test_windows": len(test), "seq_len": args.seq_len, "cal_windows": len(calw), "cal_len": int(calw.shape[1]),
        "sens_windows": len(sensw), "sens_len": int(sensw.shape[1]) if len(sensw) else 0,
        "configs": list(configs), "bits_per_element": {c: _bits(c, head_dim) for c in configs},
        "error_bits_per_element": {m: _bits(m, head_dim) for m in err_methods},
        "error_ratio": {k: {"ratio": v[0], "ci95_low": v[1], "ci95_high": v[2]} for k, v in ratios.items()},
        "turbo4_vs_nvfp4_by_layer": per_layer_wins,
        "sensitivity_ranking": ranking,
        "sens_picked": {f"nvfp4-sens{k}": sorted(ranking[:k]) for k in _sens_ks(configs)} if ranking else {},
        "calibration": params.to_json(), "times": times,
        "causal": {c: _causal_note(c) for c in configs},
    }
    summary["wall_s"] = round(time.time() - t_start, 1)
    store.atomic_write_json(out / "summary.json", summary)
    prov = provenance.provenance(args.command, git=getattr(args, "git0", None), model=lm.name, model_source=lm.source, model_sha256=lm.file_sha256,
                                 model_note=lm.model_note, corpus=corpus.name, corpus_files=corpus.files,
                                 settings=settings, wall_s=summary["wall_s"], stage_s=times,
                                 resumed_pieces=part.reused,
                                 threads=torch.get_num_threads())
    store.atomic_write_json(out / "provenance.json", prov)
    draw(out, prov)
    part.clear()
    return summary


def _sens_ks(configs) -> list[int]:
    return [parse_config(c)[2] for c in configs if c not in FP8_CONFIGS and parse_config(c)[1] == "sens"]


def _bits(config: str, head_dim: int) -> float:
    if config in FP8_CONFIGS:
        return kq.bits_per_element(config, head_dim)
    return kq.bits_per_element(parse_config(config)[0], head_dim)     # kept layers add nothing per 4-bit layer


def _causal_note(config: str) -> str:
    if config == "baseline":
        return "causal: no quantization"
    if config == "e4m3-uncal":
        return "causal: a constant scale (1.0)"
    if config == "e4m3-dyn":
        return "causal: each token's scale from that token's own vector (per head)"
    method, kind, _ = parse_config(config)
    base = {"nvfp4": "block scales from each token's 16-element blocks; global scale frozen from calibration windows",
            "nvfp4-rot": "fixed rotation; NVFP4 as nvfp4 on the rotated vector",
            "turbo4": "fixed rotation and codebook (calibration windows); RMS from each token's own 32 coordinates",
            "turbo4-gauss": "fixed rotation and data-free codebook; RMS from each token's own 32 coordinates",
            "turbo4-g64": "fixed rotation and codebook (calibration windows); RMS from each token's own vector"}[method]
    extra = {"hp": "; kept layers fixed in advance", "sens": "; kept layers chosen on separate sensitivity windows",
             "L": "; one layer quantized"}.get(kind, "")
    return "causal: " + base + extra


# ---- figures ----------------------------------------------------------------------------------------------
def draw(out: Path, prov: dict | None = None) -> list[Path]:
    """Redraw the three figures from the CSV files in `out`."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    note = (prov or {}).get("model_note", "")
    written = []
    ppl = kv_drift.read_csv(out / "ppl_by_position.csv") if (out / "ppl_by_position.csv").is_file() else []
    if ppl:
        fig = kv_drift.plot(ppl, note=note)
        fig.suptitle("4-bit and FP8 KV caches: perplexity change by position in the context", fontsize=14)
        written.append(store.save_figure(fig, out / "ppl_by_position.png"))
        plt.close(fig)
    err = store.read_rows(out / "kv_error_by_layer.csv")
    if err:
        fig = plot_errors(err, store.read_rows(out / "layers.csv"), note)
        written.append(store.save_figure(fig, out / "kv_error_by_layer.png"))
        plt.close(fig)
    sens = store.read_rows(out / "sensitivity.csv")
    if sens:
        fig = plot_sensitivity(sens, note)
        written.append(store.save_figure(fig, out / "sensitivity.png"))
        plt.close(fig)
    return written


def plot_errors(err_rows: list[dict], layer_rows: list[dict], note: str = ""):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 5))
    methods = list(dict.fromkeys(r["method"] for r in err_rows))
    for ax, which in zip(axes[:2], ("key", "value")):
        for j, m in enumerate(methods):
            rr = [r for r in err_rows if r["kind"] == which and r["method"] == m]
            x = [int(r["layer"]) for r in rr]
            y = [float(r["mean_rel_err"]) for r in rr]
            ax.plot(x, y, marker="o", ms=3, label=m, color=f"C{j}")
        ax.set_yscale("log")
        ax.set_xlabel("layer")
        ax.set_ylabel("mean per-token relative error ||x - x^|| / ||x||")
        ax.set_title(f"{which}s")
        ax.legend(fontsize=8, ncol=2)
    ax = axes[2]
    if layer_rows:
        x = [int(r["layer"]) for r in layer_rows]
        if "attn_norm_max" in layer_rows[0]:
            ax.plot(x, [float(r["attn_norm_max"]) for r in layer_rows], marker="o", ms=3, label="max |gamma| (attn norm)")
            ax.plot(x, [float(r["attn_norm_mean"]) for r in layer_rows], marker="o", ms=3, label="mean |gamma| (attn norm)")
        ax.plot(x, [float(r["key_outlier_ratio"]) for r in layer_rows], marker="s", ms=3, label="K outlier ratio")
        ax.plot(x, [float(r["value_outlier_ratio"]) for r in layer_rows], marker="s", ms=3, label="V outlier ratio")
        ax.set_yscale("log")
        ax.set_xlabel("layer")
        ax.set_title("RMSNorm weights and K/V channel outliers\n(outlier ratio: max / median of per-channel max |x|)")
        ax.legend(fontsize=8)
    fig.suptitle("Per-token K/V error by layer (baseline K/V of the test windows, each layer quantized on its own)")
    if note:
        fig.text(0.01, 0.01, note, fontsize=9, color="dimgray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def plot_sensitivity(sens_rows: list[dict], note: str = ""):
    import matplotlib.pyplot as plt

    x = np.array([int(r["layer"]) for r in sens_rows])
    n = len(x)
    colors = ["C3" if (i < 2 or i >= n - 2) else "C0" for i in x]
    panels = [("kl_mean", "kl_ci95_low", "kl_ci95_high", "mean KL(baseline || quantized) per token (nats)")] \
        if "kl_mean" in sens_rows[0] else []
    panels.append(("delta_pct", "ci95_low", "ci95_high", "perplexity change vs baseline (%)"))
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 3.6 * len(panels)), sharex=True, squeeze=False)
    for ax, (k, klo, khi, label) in zip(axes[:, 0], panels):
        y = np.array([float(r[k]) for r in sens_rows])
        lo = np.array([float(r[klo]) for r in sens_rows])
        hi = np.array([float(r[khi]) for r in sens_rows])
        ax.bar(x, y, color=colors, alpha=0.8)
        ax.errorbar(x, y, yerr=[y - lo, hi - y], fmt="none", ecolor="black", capsize=2, lw=1)
        ax.axhline(0, color="black", lw=0.8)
        ax.set_ylabel(label, fontsize=9)
    axes[-1, 0].set_xlabel("layer whose K/V alone is stored in NVFP4 (red: the first and last two)")
    axes[0, 0].set_title(f"Sensitivity by layer: NVFP4 K/V in one layer at a time (95 % CI over n = "
                         f"{sens_rows[0]['n']} windows x {sens_rows[0]['seq_len']} tokens)")
    if note:
        fig.text(0.01, 0.005, note, fontsize=9, color="dimgray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


# ---- reading results back (the notebook) -------------------------------------------------------------------
def load(out) -> dict:
    """Everything a reader needs from a finished run folder (FileNotFoundError / store.DamagedFile otherwise)."""
    out = Path(out)
    if not (out / "summary.json").is_file():
        raise FileNotFoundError(f"{out}/summary.json: no finished kv_bits run there")
    res = {"dir": str(out), "summary": store.read_json(out / "summary.json", required=("error_ratio", "configs")),
           "provenance": store.read_json(out / "provenance.json", required=("command",)),
           "ppl": kv_drift.read_csv(out / "ppl_by_position.csv"),
           "errors": store.read_rows(out / "kv_error_by_layer.csv"),
           "layers": store.read_rows(out / "layers.csv"),
           "sensitivity": store.read_rows(out / "sensitivity.csv"),
           "compare": store.read_rows(out / "ppl_compare.csv"),
           "buckets": store.read_rows(out / "nll_by_bucket.csv")}
    for r in res["compare"]:
        for k in ("delta_pct", "ci95_low", "ci95_high", "ppl", "reference_ppl"):
            r[k] = float(r[k])
        for k in ("pos_lo", "pos_hi", "n"):
            r[k] = int(r[k])
    for r in res["sensitivity"]:
        for k in ("delta_pct", "ci95_low", "ci95_high", "kl_mean", "kl_ci95_low", "kl_ci95_high"):
            r[k] = float(r[k])
        r["layer"], r["n"] = int(r["layer"]), int(r["n"])
    return res


def pooled(res: dict, a: str, b: str = "baseline", lo: int = 1, hi: int | None = None, n_boot: int = 2000):
    """Perplexity change (%) of config a against config b over positions [lo, hi), paired over windows, with its
    95 % CI — from nll_by_bucket.csv (bucket edges only). None if either config is missing."""
    hi = hi or 1 << 62

    def sums(cfg):
        w = {}
        for r in res["buckets"]:
            if r["config"] == cfg and int(r["pos_lo"]) >= lo and int(r["pos_hi"]) <= hi:
                acc = w.setdefault(int(r["window"]), [0.0, 0])
                acc[0] += float(r["nll_sum"])
                acc[1] += int(r["n_tokens"])
        return np.array([w[i][0] for i in sorted(w)]), np.array([w[i][1] for i in sorted(w)], np.float64)

    xa, n = sums(a)
    xb, _ = sums(b)
    if not len(xa) or len(xa) != len(xb):
        return None
    return delta_with_ci(ppl_delta_pct, (xa, xb, n), n_boot=n_boot)


def _fmt(t, unit=" %"):
    return "n/a" if t is None else f"{t[0]:+.2f}{unit} [{t[1]:+.2f}, {t[2]:+.2f}]"


def _sign(t):
    return None if t is None else ("lower" if t[2] < 0 else "higher" if t[1] > 0 else "unresolved")


def verdicts(res: dict) -> list[tuple[str, str, str]]:
    """(claim, verdict, evidence) for the 4-bit KV claims, computed from a run's files (no typed numbers).

    A claim is "confirmed here" / "contradicted here" when the 95 % interval of the deciding statistic excludes
    the null (ratio 1, or a 0 % perplexity change), and "not resolved here" when it does not.
    """
    s = res["summary"]
    n = s["n_layers"]
    out = []

    # seed 000: turbo4 < NVFP4 per-token error at the same bits
    r = s["error_ratio"]["turbo4/nvfp4:key+value"]
    v = "confirmed here" if r["ci95_high"] < 1 else "contradicted here" if r["ci95_low"] > 1 else "not resolved here"
    wins = s["turbo4_vs_nvfp4_by_layer"]
    n_lower = sum(w == "lower" for ws in wins.values() for w in ws)
    n_higher = sum(w == "higher" for ws in wins.values() for w in ws)
    ev = (f"mean per-token error turbo4 / NVFP4 = {r['ratio']:.3f} [{r['ci95_low']:.3f}, {r['ci95_high']:.3f}] at "
          f"{s['error_bits_per_element']['turbo4']} vs {s['error_bits_per_element']['nvfp4']} bits/element; lower in "
          f"{n_lower}, higher in {n_higher} of {2 * n} layer K/V tensors (95 % CI per tensor)")
    g = s["error_ratio"].get("turbo4-gauss/nvfp4:key+value")
    if g:
        ev += f"; with the data-free Gaussian codebook {g['ratio']:.3f} [{g['ci95_low']:.3f}, {g['ci95_high']:.3f}]"
    ppl = pooled(res, "turbo4", "nvfp4")
    if ppl is not None:
        ev += f"; perplexity turbo4 vs NVFP4 over all positions {_fmt(ppl)}"
    out.append(("seed 000: turbo4 gives a lower per-token error than NVFP4 at the same bits", v, ev))

    # seed 002: first/last N layers in high precision
    hp = {c: pooled(res, c, "nvfp4") for c in s["configs"] if c.startswith("nvfp4-hp")}
    base = pooled(res, "nvfp4", "baseline")
    if hp and base is not None:
        helped = [c for c, t in hp.items() if t is not None and t[2] < 0]
        hurt = [c for c, t in hp.items() if t is not None and t[1] > 0]
        v = ("contradicted here" if hurt else "confirmed here" if len(helped) == len(hp)
             else f"partly: resolved for {', '.join(helped)} only" if helped else "not resolved here")
        ev = f"NVFP4 K/V vs baseline {_fmt(base)}; " + "; ".join(f"{c} vs nvfp4 {_fmt(t)}" for c, t in hp.items())
        out.append(("seed 002: keeping the first/last N layers' KV in high precision reduces NVFP4's cost", v, ev))

    picked = s.get("sens_picked") or {}
    for k_name, layers in picked.items():
        k = len(layers)
        ends = sorted(set(range(k // 2)) | set(range(n - k // 2, n)))
        overlap = sorted(set(ends) & set(layers))
        v = ("confirmed here" if overlap == ends else "contradicted here" if not overlap else "partly (overlap)")
        ev = (f"the {k} most sensitive layers on separate windows: {layers}; the first/last {k // 2}: {ends}; "
              f"overlap {overlap}")
        ref = f"nvfp4-hp{k // 2}"
        t = pooled(res, k_name, ref)
        if t is not None:
            ev += f"; {k_name} vs {ref} over all positions {_fmt(t)} ({_sign(t)} with the data pick)"
        out.append((f"seed 002: the first and last layers are the most sensitive ({k} layers)", v, ev))
    return out


# ---- live slices (notebook 13) -----------------------------------------------------------------------------
def mean_rel_error(x: torch.Tensor, xq: torch.Tensor) -> float:
    """The per-token relative error this module reports for a K/V cache: the mean over vectors of
    ||x - x^|| / ||x||, each vector along the last dimension (head_dim)."""
    return float(((x - xq).norm(dim=-1) / x.norm(dim=-1)).mean())


def outlier_channel_errors(outliers=(1, 5, 20, 50), methods=("nvfp4", "turbo4", "turbo4-gauss"), seed: int = 0,
                           channel: int = 5, tokens: int = 2048, head_dim: int = 64) -> list[dict]:
    """The rotation's mechanism on seeded synthetic keys: for each factor in `outliers`, Gaussian keys [1, 2 heads,
    tokens, head_dim] whose channel `channel` is multiplied by that factor; the first half of the tokens calibrates
    the frozen constants (kv_quant.KVCalibration, groups of 32), the second half is quantized by each method.

    [{"outlier": factor, method: mean per-token relative error (mean_rel_error), ...}] in the order of `outliers`:
    with a large outlier channel NVFP4's block scale follows the outlier while the rotation spreads it over every
    coordinate, where a fitted codebook can follow the shape it leaves."""
    g = torch.Generator().manual_seed(seed)
    half = tokens // 2
    rows = []
    for outlier in outliers:
        k = torch.randn(1, 2, tokens, head_dim, generator=g)
        k[..., channel] *= outlier
        cal = kq.KVCalibration(head_dim, groups=(32,))
        cal.observe(0, "key", k[:, :, :half])
        p = cal.fit()
        t = k[:, :, half:]
        rows.append({"outlier": outlier,
                     **{m: mean_rel_error(t, kq.KV4Plan(m, p).quantizer(0, "key")(t)) for m in methods}})
    return rows


def live_key_errors(model, ids: torch.Tensor, n_tok: int, every: int = 5, methods=("nvfp4", "turbo4"),
                    head_dim: int | None = None) -> list[dict]:
    """One short live window on a real model: the first `n_tok` tokens of `ids` [1, >= 2 n_tok] calibrate the frozen
    constants (kv_quant.KVCalibration, groups of 32, one forward), the next `n_tok` are run once with every layer's
    K/V captured as the model computes them; the keys of every `every`-th layer are then quantized on their own.

    [{"layer", "e4m3-dyn" (a scale per token and head), method: ... (each a mean per-token relative error,
    mean_rel_error), "attn_norm_max": max |gamma| of the layer's attention-input RMSNorm (rmsnorm_stats)}]."""
    from .calibration import dynamic_fake_quant
    from .recipes import install_kv_functions

    cfg = model.config
    head_dim = head_dim or getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    cal_ids, test_ids = ids[:, :n_tok], ids[:, n_tok:2 * n_tok]       # calibrate on one stretch, measure on the next
    cal = kq.KVCalibration(head_dim, groups=(32,))
    with install_kv_functions(model, cal.make), torch.no_grad():
        model(cal_ids)
    params = cal.fit("live")
    kv = {}

    def capture(layer, which):              # the K/V of the test stretch, as the model computes them
        return lambda t: kv.setdefault((layer, which), t.clone())

    with install_kv_functions(model, capture), torch.no_grad():
        model(test_ids)
    norms = rmsnorm_stats(model)
    rows = []
    for layer in range(0, cfg.num_hidden_layers, every):
        k = kv[(layer, "key")]
        r = {"layer": layer, "e4m3-dyn": mean_rel_error(k, dynamic_fake_quant(k))}
        r.update({m: mean_rel_error(k, kq.KV4Plan(m, params).quantizer(layer, "key")(k)) for m in methods})
        r["attn_norm_max"] = norms[layer].get("attn_norm_max")
        rows.append(r)
    return rows


# ---- CLI --------------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message):          # one line on stderr, exit 2
        self.exit(2, f"error: {message} (see python -m fp8lab.kv_bits --help)\n")


DEFAULT_OUT = Path("runs") / "kv_bits"
MAX_THREADS = os.cpu_count() or 1              # more torch threads than CPUs only slows a run down


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m fp8lab.kv_bits", description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="offline name or path (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--corpus", default="ppl", help=f"{' or '.join(kv_drift.CORPORA)} (BoolQ or LAMBADA passages)")
    p.add_argument("--windows", type=int, default=6, help="test windows (>= 2: the unit of every interval)")
    p.add_argument("--seq-len", type=int, default=8192, help="tokens per test window (default: SmolLM2's context)")
    p.add_argument("--cal-windows", type=int, default=4, help="calibration windows")
    p.add_argument("--cal-len", type=int, default=2048, help="tokens per calibration window")
    p.add_argument("--sens-windows", type=int, default=8, help="sensitivity windows (0 skips the per-layer step)")
    p.add_argument("--sens-len", type=int, default=2048, help="tokens per sensitivity window")
    p.add_argument("--configs", default=",".join(DEFAULT_CONFIGS), help="comma-separated configurations (module doc)")
    p.add_argument("--seed", type=int, default=0, help="seed of the window choice, the rotation and the bootstrap")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (>= 100)")
    p.add_argument("--threads", type=int, default=min(2, MAX_THREADS),
                   help=f"torch CPU threads, 1 .. {MAX_THREADS} (this machine's CPU count; on a machine shared "
                   "with other jobs, 1 can be much faster than 2)")
    p.add_argument("--out", default=None, help=f"output folder (default {DEFAULT_OUT}, git-ignored; locked for the "
                   "whole run; an interrupted run resumes from <out>/.partial when rerun with the same settings)")
    p.add_argument("--record", action="store_true", help="write the committed reference (default --out then "
                   "outputs/kv_bits); without it nothing under outputs/ is written")
    p.add_argument("--plot", "--redraw", dest="plot", action="store_true",
                   help="only redraw the figures from <out>/*.csv (no model)")
    return p


def _validate(a) -> None:
    if a.corpus not in kv_drift.CORPORA:
        raise UsageError(f"unknown --corpus {a.corpus!r}; valid: {', '.join(kv_drift.CORPORA)}")
    if a.windows < 2:
        raise UsageError("--windows must be >= 2 (the windows are the units of the paired intervals)")
    if a.seq_len < 128:
        raise UsageError("--seq-len must be >= 128")
    if a.cal_windows < 1 or not 16 <= a.cal_len <= a.seq_len:
        raise UsageError("need --cal-windows >= 1 and 16 <= --cal-len <= --seq-len")
    if a.sens_windows < 0 or a.sens_windows == 1 or (a.sens_windows and not 16 <= a.sens_len <= a.seq_len):
        raise UsageError("need --sens-windows 0 (skip) or >= 2, and 16 <= --sens-len <= --seq-len")
    if a.n_boot < 100:
        raise UsageError("--n-boot must be >= 100")
    if not 1 <= a.threads <= MAX_THREADS:
        raise UsageError(f"--threads must be in 1 .. {MAX_THREADS} (this machine's CPU count), got {a.threads}")
    for c in a.configs:
        parse_config(c)
    if any(c != "baseline" and c not in FP8_CONFIGS and parse_config(c)[1] == "sens" for c in a.configs) \
            and a.sens_windows == 0:
        raise UsageError("nvfp4-sens<K> configurations need the sensitivity step (--sens-windows >= 2)")
    from . import models
    models.check_seq_len(a.model, a.seq_len)      # the last check: it reads the model's config (no weights)
    try:
        a.out_path = store.out_folder(a.out, DEFAULT_OUT, record=a.record, record_default=store.REFERENCE / "kv_bits")
    except ValueError as e:
        raise UsageError(str(e)) from None


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = _parser()
    a = p.parse_args(argv)
    a.command = "python -m fp8lab.kv_bits " + " ".join(argv)
    try:
        a.configs = list(dict.fromkeys(split_list(a.configs, "--configs")))
        a.configs = ["baseline"] + [c for c in a.configs if c != "baseline"]
        _validate(a)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = a.out_path
    if a.plot:
        if not (out / "kv_error_by_layer.csv").is_file():
            print(f"error: {out}/kv_error_by_layer.csv not found: nothing to redraw", file=sys.stderr)
            return 2
        prov = store.read_json(out / "provenance.json") if (out / "provenance.json").is_file() else {}
        for f in draw(out, prov):
            print(f"redrew {f}")
        return 0
    from . import data, models

    os.environ.setdefault("HF_HUB_OFFLINE", "1")            # offline like the sweep: no hub lookups
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        from .provenance import git_state
        a.git0 = git_state()                      # the tree as the run starts (its .partial files dirty it later)
        with store.FolderLock(out, a.command):
            torch.set_num_threads(a.threads)
            lm = models.load_model(a.model)
            torch.manual_seed(a.seed)
            summary = run(lm, a, out, say=lambda s: print(s, flush=True))
    except (UsageError, store.FolderBusy, store.DamagedFile, models.ModelError, data.DataError) as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    res = load(out)
    print(kv_drift.format_table(res["ppl"]))
    for claim, verdict, evidence in verdicts(res):
        print(f"{claim}: {verdict.upper()} -- {evidence}")
    print(f"wrote {out}/ in {summary['wall_s']:.0f} s ({lm.model_note})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
