"""The report helpers notebooks 07 and 08 read recorded kernel results through (CPU, synthetic records)."""
from fp8lab.kernels import bench_attention as ba
from fp8lab.kernels import gemm_report as gr


def _dec(kernel, M, N, K, t, wbytes, **kw):
    return {"family": "decode", "kernel": kernel, "M": M, "N": N, "K": K, "shape": f"M={M} N={N} K={K}",
            "time_us": t, "bytes": wbytes, "flops": 2 * M * N * K, "weight_bytes": wbytes, **kw}


def _gemm():
    N, K = 28672, 8192
    res = [_dec("bf16_cublas (torch F.linear)", 1, N, K, 100.0, 2 * N * K),
           _dec("scaled_mm_tensorwise (torch._scaled_mm)", 1, N, K, 50.0, N * K),
           _dec("gemv_fp8_channel", 1, N, K, 70.0, N * K, speedup_vs_scaled_mm_tensorwise=50 / 70),
           _dec("gemv_fp8_channel_v3", 1, N, K, 60.0, N * K, speedup_vs_scaled_mm_tensorwise=50 / 60,
                weight_fraction_of_copy=N * K / 60e-6 / 4e12)]
    return {"results": res, "ceilings": {"copy_gbps": 4000.0}}


def test_decode_versions_puts_each_version_beside_the_anchors():
    rows = gr.decode_versions(_gemm())
    assert len(rows) == 1
    r = rows[0]
    assert (r["bf16 cuBLAS"], r["_scaled_mm tw"], r["fp8 channel v1"], r["fp8 channel v3"]) == (100.0, 50.0, 70.0, 60.0)
    assert r["fp8 channel v2"] is None and r["nvfp4 v3"] is None
    assert abs(r["best fp8 / _scaled_mm"] - 50 / 60) < 1e-12


def test_version_four_records_and_speedups_between_versions():
    """Version 4 records (named by configuration, gemv4_...) land in their own column and count in the FP8 family;
    version_speedups is time(old) / time(new) where both ran."""
    data = _gemm()
    N, K = 28672, 8192
    data["results"].append(_dec("gemv4_fp8c_r1_nt1_c2_d4_e0_n0", 1, N, K, 75.0, N * K,
                                speedup_vs_scaled_mm_tensorwise=50 / 75))
    r = gr.decode_versions(data)[0]
    assert r["fp8 channel v4"] == 75.0 and r["nvfp4 v4"] is None
    sp = gr.version_speedups([r], 3, 4)
    assert set(sp) == {"fp8 channel"} and abs(sp["fp8 channel"][0] - 60 / 75) < 1e-12
    assert abs(gr.version_speedups([r], 1, 3)["fp8 channel"][0] - 70 / 60) < 1e-12
    assert gr._in_family(data["results"][-1], gr.W8A16_KERNELS)


def test_version_verdicts_count_only_what_the_quartiles_separate():
    """A newer version is called faster (or slower) at a point only where the two records' quartile ranges lie apart;
    a median a hair lower inside the spread is a tie."""
    from fp8lab import findings

    N, K = 28672, 8192
    sp = lambda q1, q3: {"spread_us": {"q1": q1, "q3": q3}}  # noqa: E731
    res = [_dec("gemv3_fp8c_r1_nt1_c4_p2_e0_n0", 1, N, K, 60.0, N * K, **sp(59.8, 60.2)),
           _dec("gemv4_fp8c_r1_nt1_c2_d4_e0_n0", 1, N, K, 59.9, N * K, **sp(59.7, 60.1)),     # inside the spread
           _dec("gemv3_nvfp4_r1_nt1_c2_p2_e0_n0", 1, N, K, 40.0, N * K // 2, **sp(39.9, 40.1)),
           _dec("gemv4_nvfp4_r1_nt1_c2_d4_e0_n0", 1, N, K, 38.0, N * K // 2, **sp(37.9, 38.1)),  # apart: faster
           _dec("gemv3_fp8b_r1_nt1_c4_p2_e0_n0", 16, N, K, 70.0, N * K, **sp(69.9, 70.1)),
           _dec("gemv4_fp8b_r1_nt1_c2_d4_e0_n0", 16, N, K, 80.0, N * K, **sp(79.9, 80.1)),    # apart: slower
           _dec("gemv4_fp8b_r1_nt1_c2_d4_e0_n0", 16, N, K, 50.0, N * K, pdl=True)]             # PDL: left out
    v = findings.version_verdicts({"results": res}, 3, 4)
    assert v["points"] == 3 and [x[0] for x in v["faster"]] == ["nvfp4"] and [x[0] for x in v["slower"]] == ["fp8 block"]
    assert [x[0] for x in v["even"]] == ["fp8 channel"] and abs(v["faster"][0][4] - 40 / 38) < 1e-12


def test_best_fp8_against_scaled_mm_counts_only_what_the_quartiles_separate():
    """At each decode point the best FP8 record (highest same-run speedup) is held against the _scaled_mm record of
    its run: a ratio above 1 inside the spread is a tie, not a win."""
    from fp8lab import findings

    N, K = 28672, 8192
    sp = lambda q1, q3: {"spread_us": {"q1": q1, "q3": q3}}  # noqa: E731
    res = []
    for M, t_sm, q_sm, t_ours, q_ours in ((1, 50.0, (49.9, 50.1), 49.8, (49.7, 50.0)),     # 1.004x, overlapping
                                          (8, 60.0, (59.9, 60.1), 55.0, (54.9, 55.1)),     # apart: faster
                                          (16, 60.0, (59.9, 60.1), 70.0, (69.9, 70.1))):   # apart: slower
        res += [_dec("scaled_mm_tensorwise (torch._scaled_mm)", M, N, K, t_sm, N * K, run=0, **sp(*q_sm)),
                _dec("gemv3_fp8b_r1_nt1_c4_p2_e0_n0", M, N, K, t_ours, N * K, run=0,
                     speedup_vs_scaled_mm_tensorwise=t_sm / t_ours, **sp(*q_ours)),
                _dec("gemv3_fp8c_r1_nt1_c4_p2_e0_n0", M, N, K, t_ours + 5, N * K, run=0,
                     speedup_vs_scaled_mm_tensorwise=t_sm / (t_ours + 5), **sp(*q_ours))]
    res.append(_dec("gemv3_nvfp4_r1_nt1_c2_p2_e0_n0", 1, N, K, 30.0, N * K // 2, run=0,
                    speedup_vs_scaled_mm_tensorwise=50 / 30))                         # NVFP4 is not an FP8 GEMV
    data = {"results": res}
    v = findings.best_fp8_vs_scaled_mm_verdicts(data)
    assert v["points"] == 3 and [x[2] for x in v["even"]] == [1]
    assert [x[2] for x in v["faster"]] == [8] and [x[2] for x in v["slower"]] == [16]
    text = findings.gemv_version_sentences(data)[-1]
    assert "faster at 1 of the 3 points and slower at 1; at 1 the two are within each other's quartiles." in text
    assert findings.best_fp8_vs_scaled_mm_verdicts({"results": res[-1:]})["points"] == 0
    first = findings.gemv_version_sentences(_gemm())          # version 1 and version 3 of the per-channel GEMV
    assert first[0].startswith("Against its first version, version 3 is fp8 channel 1.2× as fast")
    assert first[-1].endswith("faster at none of the 1 points and slower at 1.")   # no spreads: the medians decide


def test_attention_tables_keep_a_missing_value_in_its_column():
    """The paged row has no torch time: format_columns prints '-' in line with the column, no '-x' glued to it."""
    from fp8lab.kernels import report

    rows = [dict(layout="contiguous", head_dim=128, context=32768, fp8_us=134.0, bf16_us=244.7, torch_us=237.7,
                 speedup_vs_bf16=1.826, speedup_vs_torch=1.774),
            dict(layout="paged16", head_dim=128, context=32768, fp8_us=129.1, bf16_us=243.8, torch_us=None,
                 speedup_vs_bf16=1.889, speedup_vs_torch=None)]
    text = report.format_columns(rows, ba.SUMMARY_COLUMNS)
    lines = text.splitlines()
    assert "-x" not in text and len({len(line) for line in lines}) == 1        # every line as wide as the header
    head, paged = lines[0], lines[3]
    for col in ("torch us", "fp8/torch"):
        end = head.index(col) + len(col)
        assert paged[end - 1] == "-" and paged[end - 2] == " "                 # right-aligned under its header
    assert "1.83" in lines[2] and report.format_columns([], ba.SUMMARY_COLUMNS) == "(no rows)"


def test_fixed_cost_fit_recovers_a_known_line():
    """Records timed exactly as 5 us + bytes at 4 TB/s (ours as a version label, an anchor by name) give back 5 us and
    4 TB/s with r2 = 1; a slower, PDL or other-M record does not enter; two shapes are too few for a fit."""
    res = []
    for N, K in ((4096, 4096), (14336, 4096), (28672, 8192)):
        wb = N * K
        res += [_dec("gemv3_fp8c_r1_nt1_c4_p2_e0_n0", 1, N, K, 5 + wb / 4e6, wb),
                _dec("gemv3_fp8c_r1_nt1_c2_p3_e0_n0", 1, N, K, 9 + wb / 4e6, wb),      # a slower config: not the best
                _dec("gemv3_fp8c_r1_nt1_c4_p2_e0_n0", 1, N, K, 1.0, wb, pdl=True),     # PDL: left out
                _dec("gemv3_fp8c_r1_nt1_c4_p2_e0_n0", 16, N, K, 1.0, wb),              # other M
                _dec("scaled_mm_tensorwise (torch._scaled_mm)", 1, N, K, 2 + wb / 5e6, wb)]
    res.append(_dec("gemv_nvfp4_v2", 1, 4096, 4096, 3.0, 4096 * 4096 // 2))
    res.append(_dec("gemv_nvfp4_v2", 1, 14336, 4096, 4.0, 14336 * 4096 // 2))
    rows = {r["kernel"]: r for r in gr.fixed_cost_fit({"results": res}, M=1)}
    assert set(rows) == {"fp8 channel v3", "scaled_mm_tensorwise"}
    f = rows["fp8 channel v3"]
    assert abs(f["fixed_us"] - 5) < 1e-6 and abs(f["rate_TBps"] - 4) < 1e-6 and abs(f["r2"] - 1) < 1e-9 and f["shapes"] == 3
    assert abs(rows["scaled_mm_tensorwise"]["fixed_us"] - 2) < 1e-6 and abs(rows["scaled_mm_tensorwise"]["rate_TBps"] - 5) < 1e-6


def test_goal_reasons_explain_a_missed_goal_from_the_run():
    why = {r["goal"]: r for r in gr.goal_reasons(_gemm())}
    g = next(r for k, r in why.items() if k.startswith("W8A16 M=1 >= 1.0x"))
    assert g["kernel"] == "gemv_fp8_channel_v3" and g["worst shape"] == "28672x8192 M=1"
    assert abs(g["floor_us"] - 28672 * 8192 / 4000.0 / 1e3) < 1e-9
    assert abs(g["over_floor_us"] - (60.0 - g["floor_us"])) < 1e-9
    assert abs(g["goal_us"] - 50.0) < 1e-9          # the time at which it would match _scaled_mm
    assert g["anchor_us"] == 50.0


def _att(kernel, fmt, version, t, default=True, **kw):
    return {"kernel": kernel, "fmt": fmt, "version": version, "default": default, "sweep": False, "time_us": t,
            "layout": "contiguous", "head_dim": 128, "context": 32768, "valid": True, **kw}


def test_attention_versions_compare_best_with_best():
    data = {"results": [_att("v1_bf16kv", "bf16", 1, 260.0, default=False), _att("v2_bf16kv", "bf16", 2, 370.0),
                        _att("v1_fp8kv[cvt]", "fp8cvt", 1, 150.0, default=False), _att("v2_fp8kv[cvt]", "fp8cvt", 2, 190.0),
                        _att("v2_nvfp4kv", "nvfp4", 2, 120.0),
                        {"kernel": "torch_sdpa[default=cudnn]", "time_us": 240.0, "layout": "contiguous", "head_dim": 128,
                         "context": 32768}]}
    r = ba.versions_table(data)[0]
    assert abs(r["v2_over_v1_fp8"] - 190 / 150) < 1e-12 and r["v2_over_v1_fp8"] > 1     # version 2 slower
    assert abs(r["best_fp8_vs_best_bf16"] - 240 / 150) < 1e-12                         # torch is the best bf16
    assert abs(r["best_nvfp4_vs_best_bf16"] - 240 / 120) < 1e-12
    assert r["fp8_v3"] is None and r["v3_over_v1_fp8"] is None                          # no version 3 in this run
    assert "1.27" in ba.format_versions(data)                                           # v2/v1 = 190/150
    # version 3 beside them: its FP8 row becomes the best FP8 kernel, and the v3/v1 column shows it
    data["results"] += [_att("v3_fp8kv[cvt]", "fp8cvt", 3, 125.0), _att("v3_bf16kv", "bf16", 3, 250.0)]
    r = ba.versions_table(data)[0]
    assert abs(r["v3_over_v1_fp8"] - 125 / 150) < 1e-12 and abs(r["best_fp8_vs_best_bf16"] - 240 / 125) < 1e-12
    assert "0.83" in ba.format_versions(data) and "0.96" in ba.format_versions(data)   # 125/150, 250/260


def test_attention_versions_of_a_one_version_recording():
    legacy = {"results": [{"kernel": "ours_fp8kv[cvt,pv]", "time_us": 1.0, "default": True}]}
    assert ba.versions_table(legacy) == [] and "one version" in ba.format_versions(legacy)


def test_attention_fixed_cost_fit_on_a_known_line():
    """t = 8 + MB / 4 (us, i.e. 4 TB/s): the fit recovers both terms; at the shortest context the fixed part is its
    share of the time, and the kernel would read at xcopy * t / (t - 8) without it."""
    recs = []
    for L, mb in ((16384, 200.0), (32768, 400.0), (131072, 1600.0)):
        t = 8 + mb / 4
        recs.append(_att("v3_fp8kv[cvt]", "fp8cvt", 3, t, context=L, bytes=mb * 1e6, fraction_of_copy_bw=mb / t / 4.2))
    recs.append(_att("v3_fp8kv[cvt]{2,1,4}", "fp8cvt", 3, 1.0, context=16384, bytes=1e6, sweep=True))  # left out
    rows = ba.fixed_cost_fit({"results": recs})
    assert [r["kernel"] for r in rows] == ["v3_fp8kv[cvt]"]
    r = rows[0]
    assert abs(r["fixed_us"] - 8) < 1e-9 and abs(r["rate_TBps"] - 4) < 1e-9 and abs(r["r2"] - 1) < 1e-12
    assert r["shortest"] == 16384 and abs(r["fixed_share"] - 8 / 58) < 1e-12
    assert abs(r["xcopy_without_fixed"] - 4 / 4.2) < 1e-12   # 200 MB in 50 us = 4 TB/s
    assert "v3_fp8kv[cvt]" in ba.format_fixed_cost({"results": recs})
    ours, tch = ba.fixed_cost_default_vs_torch({"results": recs})
    assert ours["kernel"] == "v3_fp8kv[cvt]" and tch is None                  # no torch row in this run
    recs += [_att("torch_sdpa[default=cudnn]", "torch", None, 4 + mb / 5, context=L, bytes=mb * 1e6 * 2,
                  fraction_of_copy_bw=0.9) for L, mb in ((16384, 200.0), (32768, 400.0), (131072, 1600.0))]
    ours, tch = ba.fixed_cost_default_vs_torch({"results": recs})
    assert ours["kernel"] == "v3_fp8kv[cvt]" and tch["kernel"] == "torch_sdpa[default=cudnn]"
    assert abs(tch["fixed_us"] - 4) < 1e-9 and abs(tch["rate_TBps"] - 10) < 1e-9


def test_attention_sweep_best_picks_per_version_and_copy_mode():
    recs = [_att("v3_fp8kv[cvt]", "fp8cvt", 3, 130.0, config=[4, 1, 3]),
            _att("v3_fp8kv[cvt]{3,0,4}", "fp8cvt", 3, 170.0, config=[3, 0, 4], sweep=True),
            _att("v3_fp8kv[cvt]{2,1,4}", "fp8cvt", 3, 120.0, config=[2, 1, 4], sweep=True, valid=False),  # invalid
            _att("v2_nvfp4kv", "nvfp4", 2, 109.0, config=[2, 3, 1, 3])]
    d = {"results": recs}
    assert ba.sweep_best(d, "fp8cvt", 3, copy=1)["time_us"] == 130.0
    assert ba.sweep_best(d, "fp8cvt", 3, copy=0)["time_us"] == 170.0
    assert ba.sweep_best(d, "fp8cvt", 3)["time_us"] == 130.0
    assert ba.sweep_best(d, "nvfp4", 3) is None and ba.sweep_best(d, "nvfp4", 2)["time_us"] == 109.0


def _goal_rows(values):
    """A goals(data) stand-in: one file's goal rows from {(goal, context): measured} (met read on the threshold 1.0)."""
    return [{"goal": g, "what": f"{g} (detail)", "context": L, "threshold": 1.0, "measured": v,
             "met": None if v is None else v >= 1.0} for (g, L), v in values.items()]


def test_goal_repeats_reads_each_goal_on_its_median_over_runs():
    from fp8lab import findings
    from fp8lab.kernels import report

    runs = [{("a", 16384): 0.98, ("a", 32768): 1.02, ("b", 16384): 1.10},
            {("a", 16384): 1.01, ("a", 32768): 1.04, ("b", 16384): None},
            {("a", 16384): 0.97, ("a", 32768): 0.99, ("b", 16384): 1.20}]
    rows = report.goal_repeats(runs, _goal_rows)
    by = {(r["goal"], r["context"]): r for r in rows}
    a16, a32, b16 = by[("a", 16384)], by[("a", 32768)], by[("b", 16384)]
    assert a16["measured_runs"] == [0.98, 1.01, 0.97] and a16["median"] == 0.98 and a16["met_runs"] == 1
    assert a16["met_median"] is False and (a16["min"], a16["max"]) == (0.97, 1.01)
    assert a32["median"] == 1.02 and a32["met_median"] is True and a32["met_runs"] == 2 and a32["runs"] == 3
    assert b16["runs"] == 2 and b16["measured_runs"] == [1.10, 1.20] and b16["met_runs"] == 2   # the run without it left out
    text = report.format_goal_repeats(rows)
    assert "0.980 1.010 0.970" in text and "NOT met" in text and "(detail)" not in text
    s = findings.goal_repeats_sentence(rows, "H200")
    assert "3 recordings on the H200" in s and "2 of the 3 goals met" in s and "a at 16k (0.980 against 1.0)" in s
    assert "a at 16k (1 of 3" in s and "a at 32k (2 of 3" in s and "b at 16k (" not in s
    assert findings.goal_repeats_sentence(report.goal_repeats(runs[:1], _goal_rows)) == ""
    assert (a16["median_lo"], a16["median_hi"], a16["median_coverage"]) == (0.97, 1.01, 0.75)
    assert "only 50 % probability: no goal can be called met or missed" in s   # the fewest runs (two, b) set it


def test_repeat_runs_takes_only_repeats_of_the_named_file(tmp_path, monkeypatch):
    """attention_sweep_<commit>.json sits beside attention_<commit>.json in repeats/: it is not a repeat of
    attention.json; <stem>_<commit>_runN.json is."""
    import json

    def write(path, commit, date):
        path.write_text(json.dumps({"provenance": {"git_commit": commit, "date": date, "dirty": False}, "results": []}))

    (tmp_path / "repeats").mkdir()
    write(tmp_path / "attention.json", "c" * 40, "2026-12-03")
    write(tmp_path / "repeats" / "attention_aaaaaaa.json", "a" * 40, "2026-12-01")
    write(tmp_path / "repeats" / "attention_bbbbbbb_run2.json", "b" * 40, "2026-12-02")
    write(tmp_path / "repeats" / "attention_sweep_aaaaaaa.json", "d" * 40, "2026-12-04")
    write(tmp_path / "repeats" / "attention_notes.json", "e" * 40, "2026-12-05")
    monkeypatch.setattr(gr, "recorded_runs", lambda name, folders: [gr.load(folders[0] / name)])
    runs = gr.repeat_runs("attention.json", tmp_path)
    assert [r["provenance"]["git_commit"][0] for r in runs] == ["c", "b", "a"]


def test_same_sources_keeps_the_runs_of_the_first_runs_code():
    from fp8lab.kernels import gemm_report

    a, b = {"x.cu": "aaa"}, {"x.cu": "bbb"}
    runs = [dict(n=0, sources_sha256_12=a), dict(n=1, sources_sha256_12=b), dict(n=2, sources_sha256_12=a), dict(n=3)]
    same, other = gemm_report.same_sources(runs)
    assert [d["n"] for d in same] == [0, 2] and [d["n"] for d in other] == [1, 3]
    same, other = gemm_report.same_sources([dict(n=0), dict(n=1)])          # no digest: only the first is read
    assert [d["n"] for d in same] == [0] and [d["n"] for d in other] == [1]
    assert gemm_report.same_sources([]) == ([], [])
