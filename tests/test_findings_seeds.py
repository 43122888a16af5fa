"""The readings of notebooks 12 (beyond one model) and 13 (the seeds' KV-cache claims), computed in the package: each
on small synthetic rows shaped like the committed files (outputs/control, outputs/sensitivity, outputs/frontier,
outputs/kv_bits, the kernel records), checked on its rendered words and numbers, and on what it gives where the data
is missing."""
import json

import pytest
import torch

from fp8lab import findings, frontier, kv_bits, serving_claims
from fp8lab import notebook as nb
from fp8lab.distributed import tiny_causal_lm
from fp8lab.kernels import bench_prefill_attn
from fp8lab.kv_quant import bits_per_element
from fp8lab.sensitivity import model_parts
from tests.test_kernels_attention import _decode_records
from tests.test_kernels_attention_prefill import _prefill_records
from tests.test_recipes import tiny_llama

NOTE = "weights are 4-bit GGUF (Q4_1) dequantized to float32"


# ---- notebook 12: the FP32 control ----------------------------------------------------------------------------
def _control_rows():
    """control.csv-like rows (strings, as store.read_rows gives them): two recipes, three metrics each, in the order
    control.run_control writes them."""
    rows = []
    for recipe, (mrr, lo, hi, top1, cos) in (("bf16-w", (0.0, 0.0, 0.0, 0.0, 5.27e-06)),
                                            ("nvfp4-w", (-0.5, -1.25, 0.25, -0.4, 0.0213))):
        for metric, d, a, b in (("top1", top1, top1, top1), ("mrr", mrr, lo, hi), ("query_cos_loss", cos, cos, cos)):
            rows.append(dict(recipe=recipe, metric=metric, value=str(0.9 + d), baseline="0.938554", delta=str(d),
                             ci95_low=str(a), ci95_high=str(b), n_queries="500", n_passages="490"))
    return rows


def _sqnr_rows(extra: bool = False):
    """sqnr.csv-like rows: three Linears per recipe (and, with `extra`, a recipe the control does not run)."""
    recipes = (("bf16-w", (55.0, 56.0, 57.0)), ("nvfp4-w", (20.0, 20.5, 21.5)))
    recipes += (("not-a-control-recipe", (1.0,)),) if extra else ()
    return [dict(recipe=r, sqnr_db=str(v)) for r, vs in recipes for v in vs]


def test_control_n_line():
    assert findings.control_n_line(_control_rows()) == "n = 500 questions, 490 passages; FP32 MRR 0.9386"
    no_mrr = [r for r in _control_rows() if r["metric"] != "mrr"]
    assert findings.control_n_line(no_mrr) is None and findings.control_n_line([]) is None


def test_control_table_orders_formats_and_formats_the_cells():
    t = findings.control_table(_control_rows(), _sqnr_rows())
    assert list(t.index) == ["bf16-w", "nvfp4-w"]                # CONTROL_RECIPES' order
    assert list(t.columns) == ["median weight SQNR (dB)", "1 - cos (queries)", "MRR change x100", "95% CI",
                               "top-1 change (pp)"]
    row = t.loc["nvfp4-w"]
    assert row["median weight SQNR (dB)"] == 20.5 and row["1 - cos (queries)"] == "2.13e-02"
    assert row["MRR change x100"] == "-0.50" and row["top-1 change (pp)"] == "-0.40"
    assert t.loc["bf16-w", "median weight SQNR (dB)"] == 56.0 and t.loc["bf16-w", "95% CI"] == "[+0.00, +0.00]"
    assert row["95% CI"] == "[-1.25, +0.25]"


def test_control_table_keeps_each_interval_beside_its_own_recipe():
    """control.csv lists the recipes in the order the control ran them, not alphabetically: each recipe's interval
    must stay on its own row (a plain list would be laid out by position in the table's sorted index)."""
    rows = []
    for recipe, lo, hi in (("nvfp4-w", -1.25, 0.25), ("e5m2-w", -0.28, 0.71), ("bf16-w", -0.01, 0.02)):
        for metric, d, a, b in (("top1", 0.0, 0.0, 0.0), ("mrr", (lo + hi) / 2, lo, hi), ("query_cos_loss", 1e-3, 1e-3, 1e-3)):
            rows.append(dict(recipe=recipe, metric=metric, value="0.9", baseline="0.9", delta=str(d), ci95_low=str(a),
                             ci95_high=str(b), n_queries="500", n_passages="490"))
    sq = [dict(recipe=r, sqnr_db="30") for r in ("nvfp4-w", "e5m2-w", "bf16-w")]
    t = findings.control_table(rows, sq)
    assert t.loc["e5m2-w", "95% CI"] == "[-0.28, +0.71]" and t.loc["nvfp4-w", "95% CI"] == "[-1.25, +0.25]"
    assert t.loc["bf16-w", "95% CI"] == "[-0.01, +0.02]" and t.loc["e5m2-w", "MRR change x100"] == "+0.21"


def test_control_rho_lines_and_comparison_table():
    cmp = {"n_formats": 6, "spearman_cos_loss_vs_lm_ppl": {"rho": 1.0, "ci95_low": 0.9, "ci95_high": 1.0}}
    assert findings.control_rho_lines(cmp) == [
        "MiniLM cosine loss vs LM perplexity change: Spearman ρ = +1.00 [+0.90, +1.00] over 6 formats: the orderings "
        "agree (the interval lies above zero)."]                  # the MRR key is missing: left out
    assert findings.control_rho_lines({"n_formats": 0}) == []
    ctab = [dict(recipe=r, minilm_median_sqnr_db="1", minilm_cos_loss=c, minilm_mrr_delta="0", lm_ppl_delta_pct=p,
                 lm_ci95_low="0", lm_ci95_high="1", lm_n_windows="16", lm_source="x")
            for r, c, p in (("int8-w", "0.0003", "0.05"), ("nvfp4-w", "0.02", "28.2"), ("mxfp4-w", "0.03", "70.5"))]
    t = findings.control_comparison_table(ctab)
    assert list(t.columns) == ["recipe", "minilm_median_sqnr_db", "minilm_cos_loss", "minilm_mrr_delta",
                               "lm_ppl_delta_pct", "lm_ci95_low", "lm_ci95_high", "lm_n_windows"]
    assert list(t.recipe) == ["int8-w", "nvfp4-w", "mxfp4-w"]
    s = findings.nvfp4_rank_sentence(ctab)
    assert s.startswith("`nvfp4-w` ranks **2 of 3** by cosine loss on MiniLM's FP32 weights (one rounding) and "
                        "**2 of 3** by perplexity change on the 4-bit LM")
    ctab[2]["lm_ppl_delta_pct"] = "-1"                           # mxfp4-w now the cheapest on the LM
    assert "and **3 of 3** by perplexity change" in findings.nvfp4_rank_sentence(ctab)
    assert "ranks **None of 2**" in findings.nvfp4_rank_sentence(ctab[:1] + ctab[2:])   # not in the rows


def test_sqnr_lm_table_and_gap_sentence():
    lm = [dict(r, model="smollm2-135m", model_note=NOTE) for r in _sqnr_rows(extra=True)]
    lm = [dict(r, sqnr_db=str(float(r["sqnr_db"]) + (1.9 if r["recipe"] == "bf16-w" else -0.7))) for r in lm]
    t = findings.sqnr_lm_table(lm, _sqnr_rows(extra=True))
    assert list(t.columns) == ["MiniLM, FP32 weights (dB)", "smollm2-135m, 4-bit weights (dB)"]
    assert list(t.index) == ["bf16-w", "nvfp4-w"]                # a recipe the control does not run: dropped
    assert t.loc["bf16-w"].tolist() == pytest.approx([56.0, 57.9])
    assert findings.sqnr_gap_sentence(t) == ("4-bit LM minus FP32 MiniLM, median SQNR per format: -0.7 to +1.9 dB "
                                             "over 2 formats (largest gap: `bf16-w` +1.9 dB)")
    only_lm = [dict(r, recipe="e5m2-w") for r in lm]             # no format measured on both models
    assert findings.sqnr_gap_sentence(findings.sqnr_lm_table(only_lm, _sqnr_rows())) is None


def test_control_live_table_keeps_mrr_and_cosine_rows():
    rows = [dict(r, value=float(r["value"]), seconds=1.0, model_note="x") for r in _control_rows()]
    t = findings.control_live_table(rows)
    assert set(t.metric) == {"mrr", "query_cos_loss"} and len(t) == 4
    assert list(t.columns) == ["recipe", "metric", "value", "delta", "ci95_low", "ci95_high", "n_queries", "n_passages"]
    assert findings.control_live_table([dict(rows[0])]).empty   # a top-1 row only: nothing to show


# ---- notebook 12: the sensitivity map, the frontier, the run sizes -----------------------------------------------
def _sens_rows():
    rows = []
    for fmt, parts in (("e4m3", (("lm_head", "lm_head", 2.0, 1.7, 2.4), ("kv", "kv", 0.5, -0.1, 0.8),
                                 ("layer00", "layer", 0.1, -0.2, 0.3))),
                       ("nvfp4", (("kv", "kv", 7.0, 5.9, 8.0), ("lm_head", "lm_head", 8.5, 7.6, 9.4)))):
        for part, kind, d, lo, hi in parts:
            rows.append(dict(model="smollm2-135m", part=part, kind=kind, format=fmt, delta_pct=str(d),
                             ci95_low=str(lo), ci95_high=str(hi), n="32", seq_len="512", model_note=NOTE))
    return rows


def test_sensitivity_n_line():
    assert findings.sensitivity_n_line(_sens_rows()) == f"n = 32 windows x 512 tokens; {NOTE}"
    assert findings.sensitivity_n_line([]) is None


def test_sensitivity_top_parts_labels_the_kv_part_and_marks_significance():
    t = findings.sensitivity_top_parts(_sens_rows(), top=2)
    assert list(t.columns) == ["format", "part", "label", "delta_pct", "ci95_low", "ci95_high", "significant"]
    assert list(zip(t.format, t.part)) == [("nvfp4", "lm_head"), ("nvfp4", "kv"), ("e4m3", "lm_head"), ("e4m3", "kv")]
    assert list(t.label) == ["causal", "ORACLE (scale over the window)"] * 2
    assert list(t.significant) == [True, True, True, False]      # e4m3 kv's interval includes zero
    assert t.delta_pct.tolist() == [8.5, 7.0, 2.0, 0.5]


def test_sensitivity_live_table_keeps_the_values_as_written():
    t = findings.sensitivity_live_table(_sens_rows()[:2])
    assert list(t.columns) == ["part", "label", "format", "delta_pct", "ci95_low", "ci95_high", "n", "seq_len"]
    assert list(t.label) == ["causal", "ORACLE (scale over the window)"] and t.delta_pct.tolist() == ["2.0", "0.5"]


def _frontier_rows():
    ceil = json.dumps({"H200": 4.8, "GB10": 0.273})
    pts = (("bf16 (as loaded)", "baseline", 280e6, "layer00-29:bf16 lm_head:bf16 kv:bf16"),
           ("fp8 weights + fp8 KV", "uniform", 168.76e6, "layer00-29:fp8_tensor lm_head:bf16 kv:fp8"),
           ("mixed <= 60%", "mixed", 146.79e6, "layer00-29:fp8_tensor lm_head:fp8_tensor"))
    return [dict(point=p, kind=k, bytes_per_step=str(b), ceilings=ceil, assignment=a, predicted_delta_pct="3.1",
                 delta_pct="2.8", ci95_low="2.1", ci95_high="3.6", n="32", seq_len="512", batch="1", context="512",
                 model_note=NOTE) for p, k, b, a in pts]


def test_frontier_n_line_and_table():
    rows = _frontier_rows()
    assert findings.frontier_n_line(rows) == "batch 1, context 512; n = 32 windows x 512"
    assert findings.frontier_n_line([]) is None
    t = findings.frontier_table(rows)
    assert list(t.columns) == ["point", "kind", "label", "MB/step", "H200 tok/s ceiling", "GB10 tok/s ceiling",
                               "predicted_delta_pct", "delta_pct", "ci95_low", "ci95_high"]
    assert list(t.label) == ["causal", "ORACLE (KV scale over the window)", "causal"]
    assert t["MB/step"].tolist() == [280.0, 168.76, 146.79]
    assert t["H200 tok/s ceiling"].tolist() == [round(4.8e12 / b) for b in (280e6, 168.76e6, 146.79e6)]
    assert t["GB10 tok/s ceiling"].iloc[0] == 975.0


def test_decode_bytes_lines_uniform_recipes_and_greedy_plan():
    m = tiny_causal_lm()
    parts = model_parts(m, ("layers", "lm_head", "kv"))
    inv = frontier.inventory(m)
    bf16 = frontier.decode_bytes(inv, {}, parts)
    lines = findings.decode_bytes_lines(m)
    assert lines[0] == f"{'bf16 (as loaded)':<24} {bf16 / 1e6:7.2f} MB per decode step"
    label, w, head, kv = frontier.UNIFORM[-1]
    a = {p.name: (kv if p.kv else head if p.lm_head else w) for p in parts}
    mb = frontier.decode_bytes(inv, a, parts) / 1e6
    assert lines[len(frontier.UNIFORM)] == f"{label:<24} {mb:7.2f} MB per decode step"
    assert lines[-1] == ("greedy plan: needs the committed sensitivity map with every layer, lm_head and kv "
                         "(not recorded yet)")                    # no sensitivity map: no plan
    assert len(lines) == len(frontier.UNIFORM) + 2
    sens = {(p.name, f): (d * (2 if p.kv else 1), 0.0, 1.0) for p in parts for f, d in (("e4m3", 0.1), ("nvfp4", 2.0))}
    plan = findings.decode_bytes_lines(m, sens, budgets=(0.5,))
    assert plan[:len(frontier.UNIFORM) + 1] == lines[:len(frontier.UNIFORM) + 1]
    greedy = plan[len(frontier.UNIFORM) + 1:]
    assert len(greedy) == 1 and greedy[0].startswith("greedy under 50% of bf16: ")
    mb = float(greedy[0].split(": ")[1].split(" MB")[0])
    assert mb <= 0.5 * bf16 / 1e6 + 0.005 and ", predicted +" in greedy[0]


def test_run_size_line():
    prov = {"git_commit": "f9b95eae09d9aaaa", "git_dirty": False, "date": "2026-12-01", "command": "python -m x",
            "wall_seconds": 93.1, "settings": {"pairs": 500}}
    assert findings.run_size_line("control", prov) == (f"{'control':<26} n/size {'500':<8} wall 93.1 s\n    "
                                                       f"{nb.provenance_line(prov)}")
    assert findings.run_size_line("control", dict(prov, settings={"n_windows": 32, "pairs": 500})).startswith(
        f"{'control':<26} n/size 32       wall")                  # windows first
    bare = findings.run_size_line("gemma3", {"command": "c"})
    assert bare.startswith(f"{'gemma3':<26} n/size all      wall ? s\n    ")
    assert findings.run_size_line("frontier/x", None) == f"{'frontier/x':<26} not recorded yet"


# ---- notebook 13: the seeds' claims, the synthetic and live slices ----------------------------------------------
def test_seed_kv_claims_quote_the_package_constants():
    c = findings.seed_kv_claims()
    assert list(c) == ["seed 000 (turbo KV)", "seed 002 (NVFP4 KV)", "seed 004 (FP8 KV prefill)",
                       "seeds 000/002 (GB10 serving)", "seed 002 (SM121)"]
    s = bench_prefill_attn.SEED004
    assert c["seed 004 (FP8 KV prefill)"] == (f"{s['context']}-token document: first token after {s['ttft_fp8_s']:g} s "
                                              f"with FP8 KV vs {s['ttft_bf16_s']:g} s with BF16 KV")
    rates = c["seeds 000/002 (GB10 serving)"].split(", ")
    assert rates == [f"{x['tokens_per_s']:g} tok/s" for x in serving_claims.CLAIMS] and len(rates) > 1
    assert "--kv-high-precision-layers N" in c["seed 002 (NVFP4 KV)"]


def test_kv_bits_lines():
    lines = findings.kv_bits_lines(("e4m3-dyn", "nvfp4"), head_dim=64)
    assert lines == ["e4m3-dyn      8.50 bits/element   (causal: each token's scale from that token's own vector "
                     "(per head))",
                     "nvfp4         4.50 bits/element   (causal: block scales from each token's 16-element blocks; "
                     "global scale frozen from calibration windows)"]
    assert findings.kv_bits_lines(("e4m3-dyn",), head_dim=128)[0].startswith("e4m3-dyn      8.25 bits/element")
    assert findings.kv_bits_lines(()) == []


def test_mean_rel_error():
    x = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
    assert kv_bits.mean_rel_error(x, torch.tensor([[3.0, 0.0], [1.0, 0.0]])) == pytest.approx(0.4)   # (0.8 + 0) / 2


def test_outlier_channel_errors_show_the_rotation_mechanism():
    rows = kv_bits.outlier_channel_errors(outliers=(1, 50), tokens=256)
    assert [r["outlier"] for r in rows] == [1, 50] and set(rows[0]) == {"outlier", "nvfp4", "turbo4", "turbo4-gauss"}
    assert all(0.01 < r[m] < 0.2 for r in rows for m in ("nvfp4", "turbo4", "turbo4-gauss"))
    assert rows[1]["turbo4"] < 0.9 * rows[1]["nvfp4"]            # a large outlier channel: the fitted codebook wins
    assert rows == kv_bits.outlier_channel_errors(outliers=(1, 50), tokens=256)          # seeded
    assert rows != kv_bits.outlier_channel_errors(outliers=(1, 50), tokens=256, seed=1)
    assert kv_bits.outlier_channel_errors(outliers=()) == []


def test_outlier_rotation_sentence_reads_the_largest_outlier():
    rows = [dict(outlier=50, nvfp4=0.08, turbo4=0.0656, **{"turbo4-gauss": 0.0872}),
            dict(outlier=1, nvfp4=0.095, turbo4=0.093, **{"turbo4-gauss": 0.094})]
    assert findings.outlier_rotation_sentence(rows) == (
        "With the largest outlier (×50) turbo4's error is **0.82×** NVFP4's and the Gaussian codebook's **1.09×** "
        "(same bits; seeded synthetic keys).")
    assert findings.outlier_rotation_sentence([]) is None


def test_live_key_errors_on_a_tiny_llama():
    m = tiny_llama()                                     # 2 layers, head_dim 32
    ids = torch.randint(0, 256, (1, 64), generator=torch.Generator().manual_seed(0))
    rows = kv_bits.live_key_errors(m, ids, 24, every=1)
    assert [r["layer"] for r in rows] == [0, 1]
    assert set(rows[0]) == {"layer", "e4m3-dyn", "nvfp4", "turbo4", "attn_norm_max"}
    for r in rows:
        assert 0 < r["e4m3-dyn"] < r["nvfp4"] < 0.5 and 0 < r["turbo4"] < 0.5         # 8 bits beat 4.5
        assert r["attn_norm_max"] == kv_bits.rmsnorm_stats(m)[r["layer"]]["attn_norm_max"]
    assert [r["layer"] for r in kv_bits.live_key_errors(m, ids, 24, every=5)] == [0]
    assert rows == kv_bits.live_key_errors(m, ids, 24, every=1)  # deterministic, and no hook left behind
    assert sum(len(x._forward_pre_hooks) + len(x._forward_hooks) for x in m.modules()) == 0


# ---- notebook 13: the committed 4-bit KV run -----------------------------------------------------------------------
def _layers():
    return [dict(layer=str(i), attn_norm_max=str(g), key_outlier_ratio=str(k))
            for i, (g, k) in enumerate(((0.314, 3.0), (1.172, 7.24), (0.5, 2.0)))]


def test_kv_norms_line():
    assert findings.kv_norms_line(_layers(), {"final_norm_abs": {"max": 3.3444}}) == (
        "attention-norm |gamma|: largest 1.172 (layer 1), smallest layer max 0.314; final norm max 3.344; "
        "K outlier ratio up to 7.2")
    assert findings.kv_norms_line([], {"final_norm_abs": {"max": 1.0}}) is None


def test_kv_sensitive_layer_lines_rank_by_kl():
    sens = [dict(layer=i, kl_mean=kl, kl_ci95_low=kl / 2, kl_ci95_high=kl * 2, delta_pct=d, ci95_low=d - 0.3,
                 ci95_high=d + 0.3, n=4) for i, kl, d in ((0, 0.001, 0.1), (1, 0.01, 0.082), (2, 0.005, 0.755),
                                                           (3, 0.0001, -0.2))]
    lines = findings.kv_sensitive_layer_lines(sens, top=2)
    assert lines == ["most sensitive layers (mean KL per token, nats; ppl change %, both with 95 % CI over windows):",
                     "  layer  1: KL 0.01000 [0.00500, 0.02000]   ppl +0.082 % [-0.218, +0.382]",
                     "  layer  2: KL 0.00500 [0.00250, 0.01000]   ppl +0.755 % [+0.455, +1.055]"]
    assert len(findings.kv_sensitive_layer_lines(sens)) == 5    # fewer layers than `top`: all of them
    assert findings.kv_sensitive_layer_lines([]) == []


def _buckets(per_token: dict, windows: int = 6, n_tokens: int = 100):
    """nll_by_bucket.csv-like rows: one bucket per window and configuration, mean NLL per token from `per_token`
    ({config: [value per window]})."""
    return [dict(config=c, window=str(w), pos_lo="1", pos_hi="2048", nll_sum=str(v[w] * n_tokens),
                 n_tokens=str(n_tokens)) for c, v in per_token.items() for w in range(windows)]


def test_kv_head_to_head_lines_say_whether_the_interval_resolves():
    base = [3.0, 3.1, 2.9, 3.05, 2.95, 3.0]
    res = {"buckets": _buckets({"nvfp4": base,
                                "turbo4": [v - 0.1 for v in base],                          # lower in every window
                                "nvfp4-hp1": [v + (0.02 if i % 2 else -0.02) for i, v in enumerate(base)]})}
    lines = findings.kv_head_to_head_lines(res)
    assert len(lines) == 2                                        # the other pairs are not in this run
    t = kv_bits.pooled(res, "turbo4", "nvfp4")
    assert t[0] == pytest.approx(-9.516, abs=1e-3)
    assert lines[0] == f"{'turbo4':12s} vs {'nvfp4':10s} all positions: {findings.ci(*t)}  resolved"
    assert lines[0].startswith("turbo4       vs nvfp4      all positions: -9.52 % [")
    assert lines[1].startswith("nvfp4-hp1    vs nvfp4      all positions: ")
    assert lines[1].endswith("  not resolved: the interval includes zero")
    assert findings.kv_head_to_head_lines({"buckets": []}) == []


# ---- notebook 13: the GPU records and the SASS summary -----------------------------------------------------------
def test_nvfp4_byte_bound_line():
    assert findings.nvfp4_byte_bound_line(128) == ("byte-ratio bound for NVFP4 vs BF16 K/V: 3.56x (4.50 bits per "
                                                   "element at D = 128)")
    b = bits_per_element("nvfp4", 64)
    assert findings.nvfp4_byte_bound_line(64).endswith(f"({b:.2f} bits per element at D = 64)")


def test_prefill_crossover_lines():
    assert findings.prefill_crossover_lines(_prefill_records()) == [
        "context 32768: FP8 faster at chunks [16, 512], slower at [2048, 8192]",
        "context 131072: FP8 faster at chunks [16, 512], slower at [2048, 8192]"]
    slow = _prefill_records()
    for r in slow["results"]:
        if r.get("kv") == "fp8":
            r["time_us"] *= 10                                   # FP8 slower everywhere
    assert findings.prefill_crossover_lines(slow)[0] == ("context 32768: FP8 faster at chunks none, slower at "
                                                         "[16, 512, 2048, 8192]")
    assert findings.prefill_crossover_lines({"results": []}) == []
    spread = _prefill_records()                                   # quartiles: the 16-token point overlaps at 32k
    for r in spread["results"]:
        t = r["time_us"]
        wide = r["context"] == 32768 and r["chunk"] == 16 and r.get("variant") == "w4"
        r["spread_us"] = {"q1": t * (0.5 if wide else 0.99), "q3": t * (1.5 if wide else 1.01)}
    assert findings.prefill_crossover_lines(spread) == [
        "context 32768: FP8 faster at chunks [512], slower at [2048, 8192], within the quartiles at [16]",
        "context 131072: FP8 faster at chunks [16, 512], slower at [2048, 8192]"]
    pts = findings.prefill_kv_points(spread)
    assert len(pts) == 8 and sum(p["verdict"] == "even" for p in pts) == 1 and pts[0]["apart"] is False


def _sass_summary():
    """A SASS summary compiled for sm_121 only, holding the native E2M1 quantizer and nothing else."""
    k = {"f2fp_forms": ["F2FP.SATFINITE.E2M1.F32.PACK_AB"], "matrix_forms": [], "target": "sm_121a"}
    return {"kernels": {"sm_121": {"nvfp4_quant_bf16_cvt_hw": k}}, "not_built": {"sm_121": {}}}


def test_fp4_sass_text_shows_the_fp4_jobs_only():
    text = findings.fp4_sass_text(_sass_summary())
    assert text.splitlines() == ["E2M1 encode (NVFP4 quantizer)", "  sm_121a  F2FP.SATFINITE.E2M1.F32.PACK_AB",
                                 "E2M1 decode (NVFP4 GEMV)", "  sm_121a  not compiled here",
                                 "W4A4 NVFP4 GEMM (block-scaled FP4 MMA)", "  sm_121a  not compiled here"]
    assert "W8A8" not in text


# ---- notebook 13: the verdicts -------------------------------------------------------------------------------------
def _kv_res():
    """A minimal kv_bits.load result: the error ratio, no head-to-head configuration, three layers."""
    return {"summary": {"n_layers": 3, "configs": ["baseline", "nvfp4", "turbo4"], "sens_picked": {},
                        "error_ratio": {"turbo4/nvfp4:key+value": {"ratio": 0.979, "ci95_low": 0.978,
                                                                   "ci95_high": 0.98}},
                        "turbo4_vs_nvfp4_by_layer": {"key": ["lower", "lower", "higher"]},
                        "error_bits_per_element": {"turbo4": 4.5, "nvfp4": 4.5},
                        "final_norm_abs": {"max": 3.3444}},
            "layers": _layers(), "buckets": []}


def test_rmsnorm_condition_verdict():
    claim, verdict, ev = findings.rmsnorm_condition_verdict(_kv_res())
    assert claim == "seed 000's condition: 'on models with large RMSNorm weights'" and verdict == "untestable here"
    assert "attention-norm |gamma| reach 1.172 and its final norm's 3.344 (RMSNorm weights start at 1.0)" in ev


def test_seed_kv_verdicts_without_records_leave_every_claim_untestable():
    rows = findings.seed_kv_verdicts(None, None, None, [], None)
    assert [r[0] for r in rows] == ["4-bit KV claims (seeds 000, 002)", "seed 002: NVFP4-KV attention kernel",
                                    "seed 004: FP8 KV slows long-context prefill",
                                    "seed 002: SM121 has no FP4 MMA / E2M1 conversion"]
    assert all(r[1].startswith("untestable here") for r in rows)
    assert rows[0][2] == "python -m fp8lab.kv_bits --record" and rows[3][2] == "notebook 09"


def test_seed_kv_verdicts_read_every_record():
    claim = dict(seed="002", tokens_per_s=29.6, id="y", verdict="untestable", relation="r")
    rows = findings.seed_kv_verdicts(_kv_res(), _decode_records(), _prefill_records(), [claim], _sass_summary())
    by = {r[0]: r for r in rows}
    assert len(rows) == 6
    t = by["seed 000: turbo4 gives a lower per-token error than NVFP4 at the same bits"]
    assert t[1] == "confirmed here" and "lower in 2, higher in 1 of 6 layer K/V tensors" in t[2]
    assert rows[1][0] == "seed 000's condition: 'on models with large RMSNorm weights'"
    k = by["seed 002: an attention kernel can read NVFP4 K/V and dequantize at the MMA boundary (and gain from it)"]
    assert k[1] == "confirmed here (on the X)" and "3.10× its bf16 speed at context 32768" in k[2]
    p = by["seed 004: an FP8 KV cache makes long-context prefill slower than a BF16 one"]
    assert p[1] == "partly: slower at some chunks only" and "slower with FP8 at 4" in p[2]
    assert by["seed 002: 29.6 tok/s on GB10 (y)"][1] == "untestable here"
    s = by["seed 002: SM121 does not expose the FP4 MMA or E2M1 conversion instructions"]
    assert s[1] == "contradicted here (by compiling, not by running)"
    assert "E2M1 encode (NVFP4 quantizer): F2FP.SATFINITE.E2M1.F32.PACK_AB" in s[2]

