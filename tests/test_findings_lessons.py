"""fp8lab.findings' sentences for notebooks 10-13, on synthetic rows (each says what the rows say, and changes
when they change)."""
from fp8lab import findings as F
from fp8lab.kernels import report


def _acc_rows():
    rows = []
    for k in (128, 512, 2048):
        rows.append(dict(dist="gaussian", K=k, variant="trunc", rel_err_acc=1e-4 * k / 128, rel_err_total=4e-2,
                         shrink=0.9e-4 * k / 128))
        rows.append(dict(dist="gaussian", K=k, variant="promote", rel_err_acc=1e-4, rel_err_total=4e-2, shrink=1e-5))
    return rows


def test_accumulation_slopes_and_bias():
    s = F.accumulation_findings(_acc_rows())
    assert "slope 1.00" in s[0] and "in proportion to K" in s[0]
    assert "slope 0.00" in s[1] and "flat" in s[1]
    assert "16×" in s[2]
    b = F.accumulation_bias_findings(_acc_rows(), "trunc")
    assert "90%" in b[0] and "K = 2048" in b[1]
    assert F.accumulation_bias_findings(_acc_rows(), "nope")[0].startswith("`nope` is not")
    assert abs(F.per_unit_factor([10, 11, 12], [4, 2, 1]) - 0.5) < 1e-12


def test_fast_accum_findings():
    rec = {"settings": {"dists": ["gaussian"]},
           "speed": [dict(K=256, fast_accum=False, median_us=2.0, min_us=1.9, max_us=2.1),
                     dict(K=256, fast_accum=True, median_us=1.0, min_us=0.9, max_us=1.1),
                     dict(K=1024, fast_accum=False, median_us=4.0, min_us=3.0, max_us=5.0),
                     dict(K=1024, fast_accum=True, median_us=3.9, min_us=3.0, max_us=5.0)],
           "error": [dict(K=256, dist="gaussian", fast_accum=True, rel_err=1e-4),
                     dict(K=1024, dist="gaussian", fast_accum=True, rel_err=4e-4)]}
    s = F.fast_accum_findings(rec)
    assert "most at K = 256 (2.00×)" in s[0] and "separate at 1 of 2" in s[0]
    assert any("in proportion to K" in x for x in s)


def test_fast_accum_findings_say_how_far_the_model_is_from_the_gpu():
    rec = {"provenance": {"device": "NVIDIA H200"}, "settings": {"dists": []},
           "speed": [dict(K=256, fast_accum=False, median_us=2.0, min_us=1.9, max_us=2.1),
                     dict(K=256, fast_accum=True, median_us=1.0, min_us=0.9, max_us=1.1)], "error": [],
           "sim_check": [dict(K=256, dist="gaussian", gpu_fast_accum_true=2e-4, sim_toward_zero_fast=1.9e-4),
                         dict(K=1024, dist="gaussian", gpu_fast_accum_true=5e-4, sim_toward_zero_fast=8e-4),
                         dict(K=256, dist="positive", gpu_fast_accum_true=2e-3, sim_toward_zero_fast=2e-4)]}
    s = F.fast_accum_findings(rec)
    assert s[0].startswith("On the NVIDIA H200, fast accumulation")
    assert "gaussian inputs, on the tile" in s[1] and "0.62–1.05×" in s[1] and "within a factor of 2" in s[1]
    assert "positive inputs, on the tile" in s[2] and "10.00×" in s[2] and "not for the size" in s[2]


def test_quant_anchors_vs_compile_from_the_same_run():
    rows = [dict(kernel="fp8 group128 hw bf16", time_us=95.0, anchor="torch eager group128 bf16", speedup=16.0,
                 fraction_of_copy_bw=0.91),
            dict(kernel="torch eager group128 bf16", time_us=1520.0, anchor="", fraction_of_copy_bw=0.06),
            dict(kernel="torch.compile group128 bf16", time_us=104.5, anchor="torch eager group128 bf16",
                 fraction_of_copy_bw=0.84),
            dict(kernel="fp8 group128 hw f32", time_us=142.0, anchor="torch eager group128 f32", fraction_of_copy_bw=0.99),
            dict(kernel="torch.compile group128 f32", time_us=138.0, anchor="torch eager group128 f32",
                 fraction_of_copy_bw=1.02),
            dict(kernel="fp8 block128x128 hw bf16", time_us=110.0, anchor="torch eager block128 bf16")]
    report.with_vs_compile(rows)
    assert [r["speedup_vs_compile"] for r in rows] == [1.1, None, None, 0.97, None, None]
    s = F.quant_anchors_sentence(rows)
    assert "only 1.10× torch.compile" in s and "0.97× torch.compile (the compiler's kernel is the faster one" in s
    assert "1 row(s) exceed 1.0 of copy bandwidth (torch.compile group128 f32)" in s and "nan" not in s
    live = report.with_vs_compile([dict(r) for r in rows if not r["kernel"].startswith("torch.compile")])
    s = F.quant_anchors_sentence(live)                # a live run skips torch.compile: said, not nan
    assert "timed no torch.compile anchor" in s and "nan" not in s


def test_few_units_note():
    assert F.few_units_note(16) == "" and F.few_units_note(8) == ""
    assert "their range" in F.few_units_note(2, "sensitivity windows") and "2 sensitivity windows" in F.few_units_note(2, "sensitivity windows")
    assert "less than their nominal 95 %" in F.few_units_note(4)


def test_kernel_and_serving_verdicts():
    g = [dict(goal="nvfp4_vs_bf16", context=32768, head_dim=128, threshold=3.0, measured=3.1, met=True)]
    assert F.nvfp4_kv_kernel_verdict(g)[1].startswith("confirmed")
    assert "on the NVIDIA H200" in F.nvfp4_kv_kernel_verdict(g, "NVIDIA H200")[1]
    assert F.nvfp4_kv_kernel_verdict([])[1].startswith("untestable")
    vt = [dict(layout="paged16", context=32768, head_dim=128, best_nvfp4_vs_best_bf16=9.9),
          dict(layout="contiguous", context=32768, head_dim=128, best_nvfp4_vs_best_bf16=2.17)]
    ev = F.nvfp4_kv_kernel_verdict(g, versions=vt)[2]
    assert ev.startswith("the same decode kernel on NVFP4 K/V is 3.10× its bf16 speed at context 32768")
    assert ev.endswith("against the fastest bf16 kernel of the run (any version, or torch SDPA) it is 2.17×")
    assert "fastest bf16" not in F.nvfp4_kv_kernel_verdict(g)[2]           # no versions table: the same-kernel ratio only
    rows = [dict(context=32768, chunk=c, fp8_over_bf16=r, valid=True) for c, r in ((16, 0.9), (512, 1.3), (4096, 1.4))]
    assert F.prefill_fp8_verdict(rows)[1].startswith("confirmed")
    assert "on the NVIDIA H100" in F.prefill_fp8_verdict(rows, "NVIDIA H100")[1]
    rows = [dict(r, fp8_over_bf16=0.8) for r in rows]
    assert F.prefill_fp8_verdict(rows)[1].startswith("contradicted")
    claim = dict(seed="002", tokens_per_s=131.0, id="x", ceiling_tok_s=110.0, fraction_of_ceiling=131 / 110,
                 bandwidth_GBps=273.0, bytes_per_token=2.48e9, weights="nvfp4",
                 acceptance_needed={1: {"acceptance": 0.46}, 2: {"acceptance": None}})
    v = F.serving_claim_verdicts([claim, dict(seed="002", tokens_per_s=29.6, id="y", verdict="untestable", relation="r")])
    assert "needs speculative decoding" in v[0][1] and "acceptance ≥ 0.46" in v[0][2] and "impossible" in v[0][2]
    assert v[1][1] == "untestable here"
    jobs = [{"job": "E2M1 encode (NVFP4 quantizer)", "sm_121": "F2FP.SATFINITE.E2M1.F32.PACK_AB"},
            {"job": "W4A4 NVFP4 GEMM (block-scaled FP4 MMA)", "sm_121": "OMMA.SF.16864"}]
    assert F.fp4_sass_verdict(jobs)[1].startswith("contradicted")
    jobs = [dict(j, sm_121="software (no E2M1 instruction) (portable)") for j in jobs]
    assert F.fp4_sass_verdict(jobs)[1].startswith("not contradicted")


def test_outlier_and_quality_findings():
    rows = [dict(kind="qkv", layer=i, chan_ratio=30.0, tok_ratio=1.2, top_channels=[7, 1], n_over_448=0, amax=50.0)
            for i in range(3)]
    rows.append(dict(kind="down", layer=1, chan_ratio=3.0, tok_ratio=40.0, top_channels=[5], n_over_448=4,
                     amax=900.0, top_positions=[0, 3]))
    s = F.outlier_structure_findings(rows)
    assert "channel-structured" in s[0] and "channel 7 is the largest in 3 of 3" in s[0]
    assert "token-structured" in s[1] and "position 0" in s[2]
    sc = [dict(config="e4m3-w", causal="True", act_scaling="weight-only", delta_pct=1.0, ci95_low=0.5, ci95_high=1.5,
               delta_vs_ref_pct=None, n=16, seq_len=512),
          dict(config="tok", causal="True", act_scaling="dynamic-token", delta_pct=2.0, ci95_low=1.0, ci95_high=3.0,
               delta_vs_ref_pct=0.5, ref_ci95_low=-0.1, ref_ci95_high=1.1, n=16, seq_len=512),
          dict(config="orc", causal="False", act_scaling="dynamic-tensor", delta_pct=3.0, ci95_low=2.0, ci95_high=4.0,
               delta_vs_ref_pct=1.5, ref_ci95_low=1.0, ref_ci95_high=2.0, n=16, seq_len=512)]
    s = F.scaling_findings(sc, {("tok", "orc"): (-1.0, -1.5, -0.5)})
    assert "`tok` (causal)" in s[0] and "`orc` (ORACLE)" in s[0] and "includes zero" in s[1]
    assert "resolved" in s[-1]
    for r in sc:                                   # outlier_study writes the column as causal / oracle
        r["causal"] = {"True": "causal", "False": "oracle"}[r["causal"]]
    s = F.scaling_findings(sc)
    assert "`orc` (ORACLE)" in s[0] and "`tok` has the smallest point estimate" in s[1]
    assert "not a ranking" in s[0]                   # [-0.1, 1.1] and [1.0, 2.0] overlap
    assert "not a ranking" not in F.scaling_findings([dict(r, ref_ci95_low=1.2) if r["config"] == "orc" else r
                                                      for r in sc])[0]
    sc.append(dict(sc[1], config="grp", delta_vs_ref_pct=0.7, ref_ci95_low=0.1, ref_ci95_high=1.3))
    s = F.scaling_findings(sc)                       # a causal runner-up whose interval overlaps: no ranking
    assert "not a ranking" in s[0] and "No paired comparison with the causal runner-up `grp`" in s[1]
    assert "does not tell the two apart" in F.scaling_findings(sc, {("grp", "tok"): (0.2, -0.3, 0.7)})[1]
    assert "cheapest causal one here" in F.scaling_findings(sc, {("tok", "grp"): (-0.2, -0.4, -0.1)})[1]
    assert "cheapest causal one here" in F.scaling_findings(sc, {("grp", "tok"): (0.2, 0.1, 0.4)})[1]
    tm = [dict(fmt="int8", transform="none", config="int8", delta_pct=5.0, ci95_low=4.0, ci95_high=6.0, causal="causal"),
          dict(fmt="int8", transform="hadamard", config="int8+h", causal="causal", delta_pct=2.0, ci95_low=1.0, ci95_high=3.0,
               delta_vs_ref_pct=-3.0, ref_ci95_low=-4.0, ref_ci95_high=-2.0)]
    assert "(lower, resolved)" in F.taming_findings(tm)[0]


def test_beyond_one_model_findings():
    assert "agree" in F.rho_sentence("x", {"rho": 0.9, "ci95_low": 0.5, "ci95_high": 1.0}, 8)
    assert "not resolved" in F.rho_sentence("x", {"rho": 0.2, "ci95_low": -0.5, "ci95_high": 0.8}, 8)
    assert F.rank_of([{"recipe": "a", "v": "2"}, {"recipe": "b", "v": "1"}], "a", "v") == (2, 2)
    sens = [dict(format="e4m3", part=p, delta_pct=d, ci95_low=d - 0.1, ci95_high=d + 0.1, n=8, seq_len=512)
            for p, d in (("kv", 1.0), ("lm_head", 0.05))]
    s = F.sensitivity_findings(sens)
    assert s[0].index("`kv`") < s[0].index("`lm_head`") and "1 of 2 intervals exclude zero" in s[0]
    fr = [dict(point="bf16 (as loaded)", kind="baseline", bytes_per_step="200", delta_pct="0", ci95_low="0", ci95_high="0"),
          dict(point="fp8 weights", kind="uniform", bytes_per_step="100", delta_pct="2", ci95_low="1.5", ci95_high="2.5"),
          dict(point="mix", kind="mixed", bytes_per_step="90", delta_pct="1", ci95_low="0.5", ci95_high="1.2",
               predicted_delta_pct="0.8")]
    s = F.frontier_findings(fr)
    assert len(s) == 1 and "`mix`" in s[0]  # the baseline is neither a uniform recipe nor a mixed point
    assert "`fp8 weights`" in s[0] and "inside the measured interval" in s[0]
    c = [dict(recipe="int8-w", metric="mrr", delta="0.1", ci95_low="-0.2", ci95_high="0.4", n_queries=100)]
    sq = [dict(recipe="int8-w", sqnr_db="40"), dict(recipe="nvfp4-w", sqnr_db="20")]
    s = F.control_findings(c, sq)
    assert s[0].index("int8-w") < s[0].index("nvfp4-w") and "0 of 1 intervals" in s[1]
