"""fp8lab.findings (sentences rendered from result rows) and fp8lab.notebook (what every notebook needs)."""
import json

import pandas as pd
import pytest

from fp8lab import findings
from fp8lab import notebook as nb


def _kv_rows(table: dict, n=8):
    """{config: [(delta, lo, hi), ...per bucket]} -> kv_drift.csv-like rows over 1-64, 64-256, 256-1024."""
    bks = [(1, 64), (64, 256), (256, 1024)]
    rows = [dict(config="baseline", pos_lo=a, pos_hi=b, ppl=20.0, baseline_ppl=20.0, delta_pct=0.0, ci95_low=0.0,
                 ci95_high=0.0, n=n) for a, b in bks]
    for c, vals in table.items():
        for (a, b), (d, lo, hi) in zip(bks, vals):
            rows.append(dict(config=c, pos_lo=a, pos_hi=b, ppl=20.0, baseline_ppl=20.0, delta_pct=d, ci95_low=lo,
                             ci95_high=hi, n=n))
    return rows


def test_ci_and_zero():
    assert findings.ci(1.07, 0.694, 1.466) == "+1.07 % [+0.69, +1.47]"
    assert findings.ci(-2.5, -7.5, 0.0, "pp") == "-2.50 pp [-7.50, +0.00]"
    assert findings.excludes_zero(0.1, 2) and findings.excludes_zero(-2, -0.1) and not findings.excludes_zero(-1, 1)


def test_recipe_labels_come_from_the_recipe_table():
    assert findings.recipe_label("e4m3-wa") == "`e4m3-wa` (ORACLE)"
    assert findings.recipe_label("e4m3-wa-tok") == "`e4m3-wa-tok` (causal)"
    assert findings.causal_label("True") == "causal" and findings.causal_label("False") == "ORACLE"


def test_kv_drift_findings_name_the_winner_the_drift_and_the_collapse():
    rows = _kv_rows({"e4m3-uncal": [(0.9, 0.1, 1.7), (1.0, 0.5, 1.5), (0.9, 0.6, 1.2)],
                     "e4m3-cal16": [(0.1, -0.5, 0.7), (0.8, 0.4, 1.2), (1.9, 1.5, 2.3)],
                     "e4m3-dyn": [(0.0, -0.4, 0.4), (0.1, -0.2, 0.4), (0.3, 0.1, 0.5)],
                     "e4m3-cal256-channel": [(0.1, -0.5, 0.7), (0.9, 0.3, 1.5), (30.0, 26.0, 33.0)]})
    text = "\n".join(findings.kv_drift_findings(rows))
    assert "`e4m3-dyn` (causal: a scale per token and head, from that token alone) has the smallest change among the " \
           "configurations causal there in 3 of 3 position buckets (1–64, 64–256, 256–1024); its interval lies entirely " \
           "below the runner-up's in 1 of them (the others: a ranking of point estimates" in text
    assert "`e4m3-cal16`: +0.10 → +0.80 → +1.90 % over the buckets: it rises in every bucket; the last bucket's " \
           "interval lies entirely above the first's" in text
    assert "`e4m3-cal256-channel` collapses: up to +30.00 % [+26.00, +33.00]" in text
    assert "12 intervals in the table: about 0.6 would exclude zero by chance" in text


def test_kv_long_findings_compare_the_static_caches():
    rows = _kv_rows({"e4m3-uncal": [(0.1, -0.5, 0.7), (1.8, 1.4, 2.2), (1.6, 1.4, 1.9)],
                     "e4m3-cal256": [(0.1, -0.5, 0.7), (1.9, 1.3, 2.3), (1.5, 1.1, 1.9)],
                     "e4m3-dyn": [(0.1, -0.5, 0.7), (0.5, 0.2, 0.9), (0.6, 0.3, 0.8)]})
    text = "\n".join(findings.kv_long_findings(rows, short_hi=64))
    assert "`e4m3-uncal`: +0.10 to +0.10 % up to position 64 (intervals within [-0.50, +0.70]), +1.60 to +1.80 % " \
           "beyond (within [+1.40, +2.20]): every later interval lies entirely above every earlier one." in text
    assert "`e4m3-dyn`: +0.10 to +0.10 % up to position 64 (intervals within [-0.50, +0.70]), +0.50 to +0.60 % " \
           "beyond (within [+0.20, +0.90]): the later intervals do not all lie above the earlier ones, so 8 windows do " \
           "not show a rise past position 64." in text
    assert "overlapping intervals in 1 of the 1 buckets where the calibrated one is causal" in text


def test_kv_drift_findings_rank_only_causal_configurations_and_mark_oracle_buckets():
    """A configuration calibrated on the first N tokens is an oracle in buckets that start before N: it is not ranked
    there, even with the lowest point estimate, and its trend line says which buckets are oracle."""
    rows = _kv_rows({"e4m3-uncal": [(0.9, 0.1, 1.7), (1.0, 0.5, 1.5), (0.9, 0.6, 1.2)],
                     "e4m3-cal256": [(-2.0, -2.5, -1.5), (0.1, -0.3, 0.5), (0.2, 0.1, 0.3)]})
    assert findings.kv_causal_from("e4m3-cal256") == 256 and findings.kv_causal_from("e4m3-cal16-channel") == 16
    assert findings.kv_causal_from("e4m3-uncal") == 0 == findings.kv_causal_from("e4m3-dyn")
    text = "\n".join(findings.kv_drift_findings(rows))
    assert "`e4m3-uncal` (causal: fixed scale 1.0) has the smallest change among the configurations causal there in 2 " \
           "of 3 position buckets (1–64, 64–256)" in text
    assert "has the smallest change among the configurations causal there in 1 of 3 position buckets (256–1024); its " \
           "interval lies entirely below the runner-up's in 1 of them." in text
    assert "(the first 2 buckets start before position 256: there some tokens are rounded with scales fitted on later " \
           "ones, an oracle)." in text
    assert "`e4m3-cal256` is lower in 1 of the 1 buckets where both are causal; its interval lies entirely below " \
           "`e4m3-uncal`'s in 1 and entirely above in 0." in text


def _sweep_frame():
    return pd.DataFrame([
        dict(recipe="baseline", causal="True", task="ppl", metric="ppl", delta_pct=0.0, ci95_low=0.0, ci95_high=0.0, n=12, delta_unit="%"),
        dict(recipe="e4m3-w", causal="True", task="ppl", metric="ppl", delta_pct=1.1, ci95_low=0.6, ci95_high=1.6, n=12, delta_unit="%"),
        dict(recipe="e4m3-wa", causal="False", task="ppl", metric="ppl", delta_pct=0.5, ci95_low=0.1, ci95_high=0.9, n=12, delta_unit="%"),
        dict(recipe="e4m3-w", causal="True", task="arc_easy", metric="acc", delta_pct=0.0, ci95_low=-7.2, ci95_high=7.2,
             n=40, delta_unit="pp", changed=0, ci_method="exact: rule of three (0 of 40 changed)"),
        dict(recipe="e5m2-w", causal="True", task="arc_easy", metric="acc", delta_pct=-10.0, ci95_low=-20.0, ci95_high=-2.5,
             n=40, delta_unit="pp", changed=12, ci_method="paired bootstrap"),
    ])


def test_cheapest_causal_skips_oracles():
    s = findings.cheapest_causal(_sweep_frame(), ["baseline", "e4m3-w", "e4m3-wa"])
    assert s.startswith("The cheapest causal recipe on perplexity is `e4m3-w` (causal): +1.10 % [+0.60, +1.60]")


def test_mc_reading_counts_changes_and_exact_intervals():
    text = "\n".join(findings.mc_reading(_sweep_frame()))
    assert "1 of 2 recipe × metric intervals exclude zero (`e5m2-w` (causal) acc -10.0 pp)" in text
    assert "`e4m3-w` 0, `e5m2-w` 12" in text and "1 of 2 intervals are exact" in text


def test_step_sentence():
    c = {"delta": 1.1, "ci95_low": 0.6, "ci95_high": 1.6, "unit": "%", "n": 12}
    assert findings.step_sentence("+ KV", c) == "+ KV: +1.10 % [+0.60, +1.60] over 12 windows: resolved (the interval excludes zero)."
    assert findings.step_sentence("+ KV", None, "e4m3-wakv-tok", "e4m3-wa-tok").endswith("not in this run.")


def test_latest_kernels_and_roofline_points():
    assert findings.latest_kernels(["gemv_a", "gemv_a_v2", "gemv_b", "gemv_a_v3"]) == ["gemv_a_v3", "gemv_b"]
    data = {"results": [
        dict(kernel="bf16_cublas (torch F.linear)", family="decode", M=1, N=8, K=8, flops=128, bytes=128, time_us=1.0, tflops=1.0),
        dict(kernel="gemv_x", family="decode", M=1, N=8, K=8, flops=128, bytes=64, time_us=1.0, tflops=2.0),
        dict(kernel="gemv_x_v2", family="decode", M=1, N=8, K=8, flops=128, bytes=64, time_us=0.5, tflops=4.0)]}
    pts = findings.kernel_roofline_points(data, Ms=(1,))
    assert [p["kernel"] for p in pts] == ["bf16_cublas", "gemv_x_v2"] and pts[1]["intensity"] == 2.0
    # a newer version that is slower does not replace the faster older one
    data["results"].append(dict(kernel="gemv_x_v3", family="decode", M=1, N=8, K=8, flops=128, bytes=64, time_us=0.8,
                                tflops=2.5))
    assert [p["kernel"] for p in findings.kernel_roofline_points(data, Ms=(1,))] == ["bf16_cublas", "gemv_x_v2"]
    # a PDL launch of a kernel (the same kernel overlapping its neighbour) adds no second star, even when faster
    data["results"].append(dict(kernel="gemv_x_v2", family="decode", M=1, N=8, K=8, flops=128, bytes=64, time_us=0.4,
                                tflops=5.0, pdl=True))
    pts = findings.kernel_roofline_points(data, Ms=(1,))
    assert [p["kernel"] for p in pts] == ["bf16_cublas", "gemv_x_v2"] and pts[1]["tflops"] == 4.0


def test_roofline_points_count_every_version_of_a_kernel_as_one():
    """The packed versions are named by their configuration (gemv3_fp8b_..., gemv4_fp8b_...), not `_vN`: they are
    versions of the same FP8 block kernel, so one star holds the fastest of them; the per-channel kernels (named
    `fp8c` from version 3 on) are skipped like gemv_fp8_channel."""
    rec = lambda k, tf: dict(kernel=k, family="decode", M=1, N=8, K=8, flops=128, bytes=64, time_us=128 / tf / 1e6,  # noqa: E731
                             tflops=tf)
    data = {"results": [rec("gemv_fp8_block_v2", 3.0), rec("gemv3_fp8b_r1_nt1_c4_p2_e0_n0", 4.0),
                        rec("gemv4_fp8b_r1_nt1_c2_d4_e0_n0", 3.5), rec("gemv3_fp8c_r1_nt1_c4_p2_e0_n0", 9.0),
                        rec("gemv_fp8_channel_v2", 9.0), rec("gemv_nvfp4_v2", 5.0), rec("gemv3_nvfp4_r1_nt1_c2_p2_e0_n0", 6.0)]}
    assert [p["kernel"] for p in findings.kernel_roofline_points(data, Ms=(1,))] == [
        "gemv3_fp8b_r1_nt1_c4_p2_e0_n0", "gemv3_nvfp4_r1_nt1_c2_p2_e0_n0"]


def test_timeline_sentence_names_a_negative_stamp_cost_as_noise():
    row = dict(format="fp8c", M=1, N=4096, K=4096, stamps_cost=-0.04, last_start_us=0.2, first_unit_us=3.0,
               stream_min_us=8.0, stream_max_us=12.0, idle_share=0.15, span_us=20.0, mean_end_us=18.0, finish_us=1.0)
    text = findings.decode_timeline_sentence([row, {**row, "stamps_cost": 0.09}], "H200")
    assert "cost -4 to 9 % of a call; below zero: the stamped copy ran the faster, within the rounds' noise)" in text
    assert "below zero" not in findings.decode_timeline_sentence([{**row, "stamps_cost": 0.02}])


def _att(kernel, layout, t, q1, q3, **kw):
    return dict(kernel=kernel, layout=layout, head_dim=128, context=32768, time_us=t, valid=True,
                spread_us={"q1": q1, "q3": q3}, **kw)


def test_paged_vs_contiguous_counts_only_what_the_quartiles_separate():
    data = {"results": [_att("a", "contiguous", 100.0, 99.0, 101.0), _att("a", "paged16", 95.0, 94.0, 96.0),
                        _att("b", "contiguous", 100.0, 99.0, 101.0), _att("b", "paged16", 100.5, 100.0, 101.0),
                        _att("c", "contiguous", 100.0, 99.0, 100.0), _att("c", "paged16", 103.0, 102.0, 104.0),
                        _att("torch", "contiguous", 90.0, 89.0, 91.0)]}
    text = findings.paged_vs_contiguous_sentence(data)
    assert text == ("In this run (paged16 at 32k, D = 128), the paged cache against the contiguous one, kernel by "
                    "kernel: faster for 1 of 3 kernels (paged / contiguous time 0.95); slower for `c` (x1.030); "
                    "within the quartiles for 1.")
    assert findings.paged_vs_contiguous_sentence({"results": data["results"][:1]}) == ""


def test_prefill_kv_sentence_calls_no_point_faster_inside_the_spread():
    def r(kv, ctx, chunk, t, q1, q3):
        return dict(kernel=f"ours_{kv}kv[w4]", kv=kv, variant="w4", context=ctx, chunk=chunk, time_us=t,
                    spread_us={"q1": q1, "q3": q3})
    data = {"results": [r("bf16", 32768, 16, 65.7, 58.0, 68.3), r("fp8", 32768, 16, 65.5, 59.7, 66.7),
                        r("bf16", 32768, 64, 125.0, 124.9, 125.1), r("fp8", 32768, 64, 164.0, 163.9, 164.1)]}
    text = findings.prefill_kv_sentence(data)
    assert text.startswith("Counting a point only where the two quartile ranges lie apart, FP8 KV is slower at 1 of 2 "
                           "(context, chunk) points and faster at none; at 1 the two lie within each other's quartiles "
                           "(32k, chunk 16: x1.00). The slowdown reaches 1.31× at chunk 64 (context 32k)")
    assert "crosses 1" not in text      # the only point below 1 is inside the spread: no crossover to report
    data["results"][1] = r("fp8", 32768, 16, 40.0, 39.0, 41.0)
    assert "faster at 1" in findings.prefill_kv_sentence(data) and "crosses 1" in findings.prefill_kv_sentence(data)


def test_recorded_default_sentence_names_a_default_this_tree_no_longer_launches():
    from fp8lab.kernels import attention_fp8kv as att

    base = dict(version=3, default=True, fmt="fp8cvt", head_dim=128, B=8, n_q_heads=32, n_kv_heads=8, layout="contiguous")
    short, long = (dict(base, context=L, config=list(att.v3_default("fp8cvt", 128, "g8", 8, 8, L))) for L in (16384, 32768))
    assert findings.recorded_default_sentence({"results": [short, long]}) == ""
    old = tuple(att.V3_DEFAULTS[("fp8cvt", 128, "g8")])
    assert old != tuple(long["config"])      # the size rule picks another configuration at 32k
    text = findings.recorded_default_sentence({"results": [short, dict(long, config=list(old))]})
    assert f"fp8cvt at D = 128, 32k: {old} recorded, {tuple(long['config'])} in this tree" in text


# ---- fp8lab.notebook ---------------------------------------------------------------------------------------
def test_recorded_says_not_recorded(capsys):
    assert nb.recorded("no_such_folder", "x.csv") is None
    assert "not recorded yet: outputs/no_such_folder/x.csv" in capsys.readouterr().out


def test_recorded_prints_commit_and_tree_state(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(nb, "OUTPUTS", tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "r.csv").write_text("a\n1\n")
    (tmp_path / "run" / "provenance.json").write_text(json.dumps(
        {"git_commit": "0123456789abcdef0123", "dirty": True, "date": "2026-12-01T00:00:00", "command": "x", "device": "cpu"}))
    assert nb.recorded("run", "r.csv") == tmp_path / "run"
    out = capsys.readouterr().out
    assert "commit 0123456789ab (DIRTY tree)" in out


def test_recorded_says_whether_a_kernel_record_timed_this_tree(tmp_path, monkeypatch, capsys):
    from fp8lab.kernels import harness

    monkeypatch.setattr(nb, "OUTPUTS", tmp_path)
    (tmp_path / "k").mkdir()
    dig = harness.source_digest(("ptx.cuh",))
    prov = {"git_commit": "abcdef0123456789", "dirty": False, "date": "2026-12-01", "command": "x", "device": "GPU"}
    for name, d in (("same.json", dig), ("old.json", {"ptx.cuh": "0" * 12})):
        (tmp_path / "k" / name).write_text(json.dumps({"provenance": prov, "sources_sha256_12": d, "results": []}))
    nb.recorded("k", "same.json", prov=None)
    assert "sources: the kernel sources of this tree" in capsys.readouterr().out
    nb.recorded("k", "old.json", prov=None)
    out = capsys.readouterr().out
    assert "sources: differ from this tree: ptx.cuh (changed since abcdef0" in out and "git diff abcdef0" in out
    (tmp_path / "k" / "plain.json").write_text(json.dumps({"provenance": prov, "results": []}))
    nb.recorded("k", "plain.json", prov=None)
    assert "sources:" not in capsys.readouterr().out       # a record without a digest: the one provenance line


def test_provenance_line_reads_nested_records_and_collapses_whitespace():
    line = nb.provenance_line({"provenance": {"git_commit": "HEAD\nunknown", "date": "2026-11-29", "command": "c"}})
    assert "\n" not in line and "tree state unknown" in line


def test_scratch_is_git_ignored_runs():
    p = nb.scratch("test_findings")
    assert p.is_dir() and p.relative_to(nb.REPO).parts[0] == "runs"


def test_results_frame_reads_both_layouts():
    df = nb.results_frame(nb.OUTPUTS / "results.csv")
    if df.empty:
        pytest.skip("outputs/results.csv is not recorded")
    assert {"causal", "changed", "ci_method"} <= set(df.columns)
    assert df.delta_pct.dtype.kind == "f"


def test_cache_error_sentence_reports_the_spread_over_draws():
    def table(b16, f8, f8_out):
        return [{"keys": "normal", "cache": "bf16", "rel_rms_err": b16},
                {"keys": "normal", "cache": "fp8 e4m3, per-tensor scale", "rel_rms_err": f8},
                {"keys": "outlier x20", "cache": "fp8 e4m3, per-tensor scale", "rel_rms_err": f8_out}]
    tables = [table(1.0, r, 3 * r) for r in (10.0, 12.0, 14.0, 16.0, 18.0, 20.0)]
    s = findings.cache_error_sentence(tables)
    # 6 draws: the median 15 with the interval [10, 20] (coverage 1 - 2/64 = 97 %); the outlier ratio is 3 in every draw
    assert "Over 6 independent draws" in s and "**15.0×** [10.0, 20.0] (97 % interval for the median) bf16's" in s
    assert "**3.0×** [3.0, 3.0]" in s
    assert findings.cache_error_sentence([]) == "These tables hold no E4M3 and bf16 rows to compare."


def _kv_sweep_frame(e4_lo):
    return pd.DataFrame([
        dict(recipe="baseline", causal="True", task="ppl", metric="ppl", delta_pct=0.0, ci95_low=0.0, ci95_high=0.0, n=12, delta_unit="%"),
        dict(recipe="e4m3-kv-tok", causal="True", task="ppl", metric="ppl", delta_pct=0.3, ci95_low=e4_lo, ci95_high=0.7, n=12, delta_unit="%"),
        dict(recipe="e5m2-kv-tok", causal="True", task="ppl", metric="ppl", delta_pct=1.8, ci95_low=1.2, ci95_high=2.4, n=12, delta_unit="%"),
        dict(recipe="e4m3-kv", causal="False", task="ppl", metric="ppl", delta_pct=0.8, ci95_low=0.4, ci95_high=1.2, n=12, delta_unit="%"),
    ])


def test_kv_sweep_findings_no_ratio_of_an_unresolved_cost_and_paired_when_given():
    text = "\n".join(findings.kv_sweep_findings(_kv_sweep_frame(-0.1)))
    assert "× the cost" not in text                              # E4M3's cost includes zero: no ratio
    assert "× the cost" in "\n".join(findings.kv_sweep_findings(_kv_sweep_frame(0.1)))
    c = {"delta": 1.4, "ci95_low": 0.7, "ci95_high": 2.3, "unit": "%", "n": 12}
    text = "\n".join(findings.kv_sweep_findings(_kv_sweep_frame(-0.1), e5_vs_e4=c))
    assert "paired, E5M2 against E4M3: +1.40 % [+0.70, +2.30] over 12 windows: resolved" in text
    assert "not a bound" in text and "a bound on what" not in text


def test_layer_stars_keep_the_fastest_variant_of_each_kind_per_batch():
    row = lambda v, B, t, ctx=1024: dict(family="layer", variant=v, batch=B, context=ctx, time_us=t,  # noqa: E731
                                         intensity=1.0 * B, tflops=1.0 / t, gbps=1.0)
    layer = {"results": [row("bf16", 1, 100.0), row("fp8", 1, 70.0), row("fp8_fused", 1, 60.0),
                         row("fp8_fused_pdl", 1, 65.0), row("scaled_mm", 1, 58.0), row("fp8", 8, 80.0),
                         row("fp8_fused", 8, 90.0), row("fp8_fused", 1, 10.0, ctx=8192)]}
    stars = findings.layer_roofline_stars(layer, context=1024)
    assert sorted((p["kernel"], p["batch"]) for p in stars) == [
        ("bf16", 1), ("fp8", 8), ("fp8_fused", 1), ("scaled_mm", 1)]       # the 8k row is another context
    assert all(p["family"] == "layer" and p["name"].startswith("layer ") for p in stars)


def test_share_of_measured_roof_and_its_table():
    from fp8lab import gpus

    g = gpus.get_gpu("H200-measured")
    pts = [{"name": "gemv M=1", "kernel": "gemv3_fp8b", "family": "decode", "intensity": 2.0,
            "tflops": g.bandwidth_TBps},                                   # half the memory roof at 2 FLOP/B
           {"name": "a long prefill kernel name that is wider than the rest", "kernel": "w8a8_wgmma_tma",
            "family": "prefill", "intensity": 1e4, "tflops": g.tflops["fp8"] / 2},
           {"name": "layer fp8 B=1", "kernel": "scaled_mm", "family": "layer", "intensity": 1e4,
            "tflops": g.tflops["bf16"]}]                                   # a layer is held to the bf16 rate
    out = findings.share_of_measured_roof(pts, g)
    assert [round(p["of_roof"], 6) for p in out] == [0.5, 0.5, 1.0] and "of_roof" not in pts[0]
    lines = findings.format_roofline_points(out).splitlines()
    assert len({ln.index("FLOP/B") for ln in lines}) == 1                  # the columns line up whatever the names
    assert lines[0].endswith("0.50 of the measured roof") and findings.format_roofline_points([]) == "(no measured points)"


def test_emulated_mma_sentence_compares_at_the_shapes_where_both_ran():
    pre = lambda k, sh, tf: dict(kernel=k, family="prefill", shape=sh, tflops=tf)  # noqa: E731
    data = {"results": [pre("w8a8_mma_fp8", "A", 200.0), pre("w8a8_mma_bf16", "A", 100.0),
                        pre("w8a8_wgmma_tma", "A", 800.0), pre("w8a8_wgmma_v1", "A", 600.0),
                        pre("w8a8_wgmma_tma", "B", 900.0)],             # B: no mma.sync kernel timed there
            "sass_counts": {"w8a8_mma_fp8": {"F2FP": 64}}}
    text = findings.emulated_mma_sentence(data)
    assert "runs at 200 TFLOP/s with 64 `F2FP`" in text and "it is 2.0× the hand-written bf16" in text
    assert "**4.0× faster** than it at the prefill shape of this run" in text       # the fastest wgmma, at A only
    assert findings.emulated_mma_sentence({"results": data["results"][2:]}) is None


def test_layer_kinds_sentence_names_the_fastest_of_each_kind():
    row = lambda v, x, t, c=0.5, B=1, ctx=1024: dict(variant=v, batch=B, context=ctx, x_vs_bf16=x,  # noqa: E731
                                                     time_us=t, of_ceiling=c)
    table = [row("bf16", 1.0, 120.0, 0.5), row("fp8", 1.5, 80.0), row("fp8_fused", 1.7, 70.0, 0.58),
             row("nvfp4_fused", 2.1, 57.0, 0.42), row("fp8_fused", 9.9, 1.0, B=8)]
    text = findings.layer_kinds_sentence(table, (1, 1024))
    assert text.startswith("At batch 1, context 1k the bf16 layer takes 120 µs (0.50 of its ceiling).")
    assert "fp8 (fp8_fused) 1.70× bf16, 0.58 of its ceiling; nvfp4 (nvfp4_fused) 2.10×" in text
    assert "scaled_mm" not in text and "9.90" not in text                # not timed here; another batch
    assert findings.layer_kinds_sentence(table[1:], (1, 1024)) is None    # no bf16 layer: no sentence


def _ppl_frame(rows):
    """A results frame with the columns notebook 02 reads: (recipe, delta %, low, high, causal) ppl rows."""
    import pandas as pd

    base = [dict(recipe="baseline", task="ppl", metric="ppl", n=12, delta_pct=0.0, ci95_low=0.0, ci95_high=0.0,
                 causal=True, baseline=19.0, delta_unit="%")]
    return pd.DataFrame(base + [dict(recipe=r, task="ppl", metric="ppl", n=12, delta_pct=d, ci95_low=lo, ci95_high=hi,
                                     causal=c, baseline=19.0, delta_unit="%") for r, d, lo, hi, c in rows])


def test_seed003_table_keeps_each_value_beside_its_recipe():
    # rows in an order unlike SEED003_PPL_DELTA's: every column must still line up by recipe
    df = _ppl_frame([("e5m2-w", 3.0, 2.5, 3.5, True), ("e4m3-wa", 0.9, 0.5, 1.3, False),
                       ("e4m3-w", 0.2, 0.1, 0.3, True)])
    t = findings.seed003_table(df)
    assert list(t.index) == ["e4m3-w", "e4m3-wa", "e5m2-w"]                     # the seed's order, held rows only
    assert t.loc["e5m2-w", "fp8lab (SmolLM2 Q4_1, BoolQ)"] == "+3.00% [+2.50, +3.50]"
    assert t.loc["e5m2-w", "seed 003 (Qwen2.5, wikitext)"] == "+2.9%" and t.loc["e5m2-w", "our rank (1 = least damage)"] == 3
    assert t.loc["e4m3-wa", "causal"] == findings.causal_label(False) and t.loc["e4m3-w", "seed rank"] == 1
    assert findings.seed003_noscale_step(df) is None
    tie = findings.seed003_table(_ppl_frame([("e4m3-w", 0.5, 0.1, 0.9, True), ("e5m2-w", 0.5, 0.2, 0.8, True),
                                             ("e4m3-wa", 0.9, 0.5, 1.3, False)]))
    assert list(tie["our rank (1 = least damage)"]) == [1, 3, 1]            # a tie shares the better rank, as the seed's
    both = _ppl_frame([("e4m3-w-noscale", 1.0, 0.5, 1.5, True), ("e4m3-wa-noscale", 0.9, 0.4, 1.4, True)])
    assert findings.seed003_noscale_step(both) == pytest.approx(-0.2)
    assert findings.ppl_width_line(df) == "Perplexity, n = 12 windows: interval widths 0.20 to 1.00 % (of a 19.00 baseline)"
    assert findings.ppl_width_line(df.iloc[:0]) == "Perplexity: not in this run."


def test_paired_steps_and_the_reading_sentences(monkeypatch):
    from fp8lab import results, sweep

    calls = []

    def fake_compare(folder, task, a, b):
        calls.append((a, b))
        return dict(delta=1.0 if a.startswith("e4m3-wakv") else -0.1, ci95_low=0.5 if a.startswith("e4m3-wakv") else -0.4,
                    ci95_high=1.5 if a.startswith("e4m3-wakv") else 0.2, unit="%", n=12)

    monkeypatch.setattr(sweep, "compare", fake_compare)
    monkeypatch.setattr(results, "compare", fake_compare)     # results.paired_steps reads the per-item files
    df = _ppl_frame([(r, 0.5, 0.1, 0.9, "-tok" in r) for r in ("e4m3-w", "e4m3-wa-tok", "e4m3-wakv-tok")])
    C, missing = results.paired_steps("runs/x", df)
    table = findings.paired_steps_table(C)
    assert list(table.index) == ["+ E4M3 Linear inputs, per-token scales (causal)", "+ E4M3 KV cache, per-token scales (causal)"]
    assert table.iloc[1]["ppl change (%)"] == "+1.00" and table.iloc[1]["95% CI"] == "[+0.50, +1.50]"
    assert set(C) == {("e4m3-wa-tok", "e4m3-w"), ("e4m3-wakv-tok", "e4m3-wa-tok")} and len(missing) == 7
    assert "e5m2-w vs e4m3-w: not in this run" in missing
    lines = findings.sweep_reading_lines(df, C, None, ["baseline", "e4m3-w", "e4m3-wa-tok"])
    assert len(lines) == 1 + len(findings.READING_CHAIN)
    assert "+ E4M3 KV cache, per-token (causal)" in lines[2] and "resolved (the interval excludes zero)" in lines[2]
    assert "not resolved" in lines[1] and lines[3].endswith("not in this run.")
    more = findings.sweep_reading_lines(df, C, -0.2, [], sweep.compare("runs/x", "ppl", *findings.NOSCALE_STEP))
    assert more[-1].endswith("The seed printed -0.2 points for the same step, without an interval: whether that was a "
                             "gain or noise cannot be told.") and calls[-1] == ("e4m3-wa-noscale", "e4m3-w-noscale")
    empty = findings.paired_steps_table(results.paired_steps("runs/x", df.iloc[:1])[0])
    assert empty.empty
