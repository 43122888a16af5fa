"""The decode layer (fp8lab.kernels.decode_layer): its float64 reference, the torch baseline, the byte count, and on
the GPU every variant validated stage by stage (outputs poisoned) and replayed in a CUDA graph.

CPU part: the reference equals an independent float64 layer up to the bf16 roundings it models; the torch bf16
baseline (the same code the benchmark times) runs on the CPU and passes its own validation; the ceiling's bytes
agree with fp8lab.bandwidth's whole-model count; bad arguments fail before any CUDA call.
"""

import pytest
import torch

from fp8lab.kernels import cuda_available
from fp8lab.kernels import decode_layer as DL

TINY = DL.LayerShape(hidden=256, heads=4, kv_heads=2, head_dim=64, intermediate=512, eps=1e-5, theta=10000.0)


def gpu(test):
    return pytest.mark.gpu(pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device")(test))


def test_shape_from_the_llama3_config():
    s = DL.LayerShape.from_config()
    assert (s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate) == (4096, 32, 8, 128, 14336)
    assert s.qkv_rows == 6144 and s.theta == 500000.0 and s.eps == 1e-5


def _plain_layer(x, W, g1, g2, s, k, v, context, cs):
    """An independent float64 layer with NO intermediate rounding (torch's own rms_norm and SDPA)."""
    F = torch.nn.functional
    B = x.shape[0]
    pos = torch.full((B,), context - 1)
    xn = F.rms_norm(x.double(), (s.hidden,), g1.double(), s.eps)
    qkv = xn @ W["qkv"].T
    Hq, Hk, D = s.heads, s.kv_heads, s.head_dim
    q = DL.rope64(qkv[:, : Hq * D].reshape(B, Hq, D), cs, pos)
    kn = DL.rope64(qkv[:, Hq * D:(Hq + Hk) * D].reshape(B, Hk, D), cs, pos)
    vn = qkv[:, (Hq + Hk) * D:].reshape(B, Hk, D)
    k, v = k[:, :, :context].double().clone(), v[:, :, :context].double().clone()
    k[:, :, -1], v[:, :, -1] = kn, vn
    a = F.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True).reshape(B, -1)
    h = x.double() + a @ W["o"].T
    hn = F.rms_norm(h, (s.hidden,), g2.double(), s.eps)
    m = F.silu(hn @ W["gate"].T) * (hn @ W["up"].T)
    return {"attn": a, "h": h, "out": h + m @ W["down"].T}


@pytest.mark.parametrize("fused", [False, True])
def test_reference_is_the_plain_layer_up_to_bf16_roundings(fused):
    torch.manual_seed(0)
    master = DL.make_master(TINY, device="cpu")
    B, ctx = 3, 37
    x = torch.randn(B, TINY.hidden).to(torch.bfloat16)
    k = torch.randn(B, TINY.kv_heads, ctx, TINY.head_dim).to(torch.bfloat16)
    v = torch.randn_like(k)
    cs = DL.rope_table(TINY, ctx, "cpu")
    W = {n: master[n].double() for n in ("qkv", "o", "gate", "up", "down")}
    ref = DL.reference(x, W, master["g1"], master["g2"], TINY, cache_k=k, cache_v=v, k_scale=None, v_scale=None,
                       context=ctx, cs=cs, fused=fused)
    plain = _plain_layer(x, W, master["g1"], master["g2"], TINY, k, v, ctx, cs)
    for stage in ("attn", "h", "out"):
        e = DL.rel_rms(ref[stage], plain[stage])
        assert 1e-5 < e < 2.0 ** -7, (stage, e)  # bf16 roundings (~2**-9 each), not zero and not more


def test_reference_fp8_cache_is_the_dequantized_cache():
    """An E4M3 cache with per-head scales: the reference attends over decode(code) * scale, and the new token's
    K/V are rounded to E4M3 exactly as the rope_append kernel does (fp32 divide, round to nearest even, saturate)."""
    torch.manual_seed(1)
    master = DL.make_master(TINY, device="cpu")
    B, ctx = 2, 20
    x = torch.randn(B, TINY.hidden).to(torch.bfloat16)
    kc = torch.randint(0, 0x7E, (B, TINY.kv_heads, ctx, TINY.head_dim), dtype=torch.uint8)
    vc = torch.randint(0, 0x7E, kc.shape, dtype=torch.uint8)
    ks, vs = torch.tensor([0.01, 0.02]), torch.tensor([0.03, 0.04])
    cs = DL.rope_table(TINY, ctx, "cpu")
    W = {n: master[n].double() for n in ("qkv", "o", "gate", "up", "down")}
    ref = DL.reference(x, W, master["g1"], master["g2"], TINY, cache_k=kc, cache_v=vc, k_scale=ks, v_scale=vs,
                       context=ctx, cs=cs, fused=True)
    from fp8lab.formats import E4M3
    kd = E4M3.decode(kc).double() * ks.double().reshape(1, -1, 1, 1)
    vd = E4M3.decode(vc).double() * vs.double().reshape(1, -1, 1, 1)
    plain = _plain_layer(x, W, master["g1"], master["g2"], TINY, kd, vd, ctx, cs)
    # the new token's K/V go through E4M3 (3 mantissa bits) in the reference only: a few % on attention
    assert DL.rel_rms(ref["attn"], plain["attn"]) < 0.1
    assert DL.rel_rms(ref["out"] - ref["h"], plain["out"] - plain["h"]) < 0.1


@pytest.mark.parametrize("variant", ["bf16", "scaled_mm"])
def test_torch_baseline_runs_and_validates_on_the_cpu(variant):
    """The torch baselines the benchmark times (F.rms_norm, F.linear or per-tensor FP8 + torch._scaled_mm, RoPE in
    torch ops, SDPA) against the reference; _scaled_mm's stages are checked on their own inputs (teacher forcing)."""
    torch.manual_seed(2)
    layer = DL.DecodeLayer(TINY, DL.make_master(TINY, device="cpu"), variant, batch=2, context=33, max_context=40)
    ok, err = layer.validate()
    assert ok, err
    assert set(err) == {"attn", "h", "a", "out"}


def test_sums_are_checked_within_their_own_rounding():
    """h = bf16(x + O attn) is checked on its O part. At a long context the attention output averages over many values,
    the O part falls far under x, and one bf16 ulp of the sum is a large error on it: torch's own bf16 layer measured
    0.02-0.03 there (on the H200, 8k-32k tokens) and used to "fail" a flat 2**-6. sum_tolerance counts the storage's
    rounding: the baseline passes at 8k tokens, a 10 %-wrong O part fails at every context, and where the ulps are
    small the tolerance is STAGE_REL_RMS's order."""
    assert DL.bf16_ulp(torch.tensor([1.0, 3.0, -0.75, 0.0])).tolist() == [2.0**-7, 2.0**-6, 2.0**-8, 0.0]
    assert DL.sum_tolerance(torch.ones(4), torch.ones(4)) == pytest.approx((2.0**-12 + 2.0**-13) ** 0.5)
    assert DL.sum_tolerance(torch.ones(4), torch.zeros(4)) == DL.STAGE_REL_RMS
    torch.manual_seed(3)
    master = DL.make_master(TINY, device="cpu")
    for ctx in (33, 8192):
        layer = DL.DecodeLayer(TINY, master, "bf16", batch=2, context=ctx, max_context=ctx + 4)
        ok, err = layer.validate()
        assert ok, (ctx, err, layer.tolerance)
        assert layer.tolerance["attn"] == DL.STAGE_REL_RMS and layer.tolerance["h"] < 0.1
        ref = layer.reference()
        x = layer.x.double()
        wrong = dict(ref, h=DL._bf(x + 0.9 * (ref["h"] - x)))  # the O projection 10 % short
        ok, err = layer.validate(ref=wrong)
        assert not ok and err["h"] > layer.tolerance["h"], (ctx, err, layer.tolerance)


def test_layer_bytes_agree_with_the_bandwidth_model():
    from fp8lab import bandwidth as bw

    s = bw.model_shape(str(DL.CONFIG))
    for variant, fmt, kv in (("bf16", "bf16", "bf16"), ("nvfp4_fused", "nvfp4", "fp8"), ("scaled_mm", "fp8_tensor", "bf16")):
        b = DL.layer_bytes(variant, 8, 8192)
        whole = bw.bytes_per_decode_step(s, fmt, kv, 8, 8192)
        outside = bw.FORMATS["bf16"].matrix_bytes(128256, 4096) * (1 + 8 / 128256) + 4096 * 2  # lm_head, 8 rows, norm
        assert abs((whole - outside) / 32 - (b["weights"] + b["kv"])) / b["total"] < 1e-3, variant
    b = DL.layer_bytes("fp8_fused", 1, 1024)
    assert 218e6 < b["weights"] < 219e6 and b["kv"] == 2 * 8 * 128 * 1024
    assert DL.ceiling_us(2.2e8, 4235) == pytest.approx(51.95, abs=0.01)


def test_bad_arguments():
    with pytest.raises(ValueError, match="variant"):
        DL.describe("int4")
    with pytest.raises(ValueError, match="batch"):
        DL.check_point(33, 10)
    with pytest.raises(ValueError, match="context"):
        DL.check_point(1, 0)
    with pytest.raises(ValueError, match="exceeds"):
        DL.check_point(1, 100, max_context=50)
    for v in DL.VARIANTS:
        assert DL.describe(v)


# ---- GPU: every variant, stage by stage ------------------------------------------------------------------------
SMALL = DL.LayerShape(hidden=512, heads=8, kv_heads=2, head_dim=64, intermediate=1024, eps=1e-5, theta=500000.0)


@gpu
@pytest.mark.parametrize("variant", DL.VARIANTS)
@pytest.mark.parametrize("batch,context", [(1, 40), (3, 300), (17, 64), (32, 129)])
def test_every_variant_validates(variant, batch, context):
    layer = DL.DecodeLayer(SMALL, DL.make_master(SMALL, seed=batch), variant, batch=batch, context=context,
                           max_context=context + 7)
    ok, err = layer.validate()
    assert ok, err


@gpu
@pytest.mark.parametrize("pdl_attention", [False, True])
def test_pdl_layers_launch_the_attention_as_pdl_attention_says(pdl_attention, monkeypatch):
    """The *_pdl layers launch the attention plainly (DL.PDL_ATTENTION = False, the layer-attention probe's reading);
    the PDL launch of the attention (it waits for rope_append inside) stays correct where it is asked for."""
    from fp8lab.kernels import attention_fp8kv as AF

    monkeypatch.setattr(DL, "PDL_ATTENTION", pdl_attention)
    for variant in ("fp8_fused_pdl", "nvfp4_fused_norm_pdl"):
        layer = DL.DecodeLayer(SMALL, DL.make_master(SMALL, seed=5), variant, batch=3, context=300, max_context=307)
        attn = [s for s in layer.steps if isinstance(s, AF.Launch)]
        assert len(attn) == 1 and attn[0].pdl_main is (pdl_attention and attn[0].info["version"] == 3)
        ok, err = layer.validate()
        assert ok, (variant, err)


@gpu
@pytest.mark.parametrize("variant", ["fp8_fused", "nvfp4_fused_pdl", "fp8"])
def test_llama_shape_and_graph_replay(variant):
    """The real Llama-3-8B layer at batch 1, 1k context: validated, then captured in a CUDA graph; the replay gives
    the same bits as the eager step (the lab kernels are deterministic)."""
    shape = DL.LayerShape.from_config()
    layer = DL.DecodeLayer(shape, DL.make_master(shape), variant, batch=1, context=1024)
    ok, err = layer.validate()
    assert ok, err
    eager = layer.out.clone()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        layer.step()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        layer.step()
    layer.out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(eager.view(torch.int16), layer.out.view(torch.int16))


# ---- the benchmark's CLI and the report functions (CPU) -----------------------------------------------------------
@pytest.mark.parametrize("argv,msg", [(["--batch", "0"], "batch must be in 1..32"), (["--batch", "1,x"], "integers"),
                                      (["--context", "0"], "context"), (["--variants", "bf16,int4"], "unknown variant"),
                                      (["--rounds", "0"], "rounds")])
def test_bench_layer_rejects_bad_arguments_before_any_cuda_call(argv, msg, capsys):
    from fp8lab.kernels import bench_layer

    with pytest.raises(SystemExit) as e:
        bench_layer.main(argv)
    assert e.value.code == 2 and msg in capsys.readouterr().err


def _fake_layer_results():
    rows = []
    for v, t in (("bf16", 120.0), ("scaled_mm", 90.0), ("fp8", 70.0), ("fp8_fused", 62.0), ("nvfp4_fused", 41.0)):
        lb = DL.layer_bytes(v, 1, 1024)
        c = DL.ceiling_us(lb["total"], 4235)
        rows.append({"kernel": f"layer_{v}", "family": "layer", "variant": v, "batch": 1, "context": 1024,
                     "time_us": t, "spread_us": {"q1": t - 0.1, "q3": t + 0.1}, "speedup": None if v == "bf16" else 120.0 / t,
                     "bytes": lb["total"], "ceiling_us_copy": c, "of_ceiling": c / t, "tokens_per_s": 1 / (32 * t * 1e-6),
                     "ceiling_tokens_per_s": 1 / (32 * c * 1e-6), "intensity": 2.0, "tflops": 0.1, "gbps": lb["total"] / t / 1e3})
    bd = [{"i": 0, "kernel": "rmsnorm_bf16", "time_us": 2.0, "bytes": 0, "floor_us": None, "fraction_of_copy": None},
          {"i": 1, "kernel": "gemv3_fp8c_r1_nt1_c2_p3_e0_n0", "time_us": 7.0, "bytes": 25e6, "floor_us": 5.9,
           "fraction_of_copy": 0.84}]
    return {"results": rows, "breakdown": {"fp8_fused B=1 ctx=1024": bd}}


def test_layer_report_functions():
    from fp8lab.kernels import layer_report as LR

    data = _fake_layer_results()
    rows = LR.layer_table(data)
    assert len(rows) == 5 and rows[0]["variant"] == "bf16"
    g = {x["goal"].split(" layer")[0] + (" ceiling" if "ceiling" in x["goal"] else ""): x for x in LR.layer_goals(data)}
    assert g["FP8"]["met"] is True and g["FP8"]["variant"] == "fp8_fused"          # 120 / 62 = 1.94 >= 1.8
    assert g["NVFP4"]["met"] is True                                               # 120 / 41 = 2.93 >= 2.8
    assert g["FP8 ceiling"]["met"] is False and "short" in g["FP8 ceiling"]["miss"]
    assert "GEMVs alone take 7.0 us" in g["FP8 ceiling"]["why"]
    pts = LR.layer_roofline_points(data)
    assert {p["variant"] for p in pts} == {"bf16", "scaled_mm", "fp8", "fp8_fused", "nvfp4_fused"}
    assert LR.format_rows(LR.goal_table(data)).count("\n") == 5
    lines = LR.goal_lines(data)
    assert sum(ln.startswith(("met", "NOT met", "not measured")) for ln in lines) == 4
    assert any(ln.strip().startswith("why:  the GEMVs alone take 7.0 us") for ln in lines)
    import matplotlib
    matplotlib.use("Agg")
    LR.plot_layer(data)


def test_pdl_effect_pairs_each_fused_layer_with_its_pdl_twin():
    """pdl_effect: time with PDL over time without, per format and point; the sentence counts only quartile-apart
    differences as savings or costs."""
    from fp8lab.kernels import layer_report as LR

    def row(v, B, ctx, t, q=0.5):
        return {"kernel": f"layer_{v}", "family": "layer", "variant": v, "batch": B, "context": ctx, "time_us": t,
                "spread_us": {"q1": t - q, "q3": t + q}}
    data = {"results": [row("fp8_fused", 1, 1024, 100.0), row("fp8_fused_pdl", 1, 1024, 95.0),       # saved, apart
                        row("fp8_fused", 32, 32768, 800.0), row("fp8_fused_pdl", 32, 32768, 880.0),   # cost, apart
                        row("nvfp4_fused", 1, 1024, 70.0), row("nvfp4_fused_pdl", 1, 1024, 70.4),     # overlap
                        row("nvfp4_fused", 8, 1024, 80.0), row("fp8", 1, 1024, 120.0)]}               # no twin
    rows = {(r["format"], r["batch"], r["context"]): r for r in LR.pdl_effect(data)}
    assert set(rows) == {("fp8", 1, 1024), ("fp8", 32, 32768), ("nvfp4", 1, 1024)}
    assert rows[("fp8", 1, 1024)]["pdl_over_plain"] == 0.95 and rows[("fp8", 1, 1024)]["apart"] is True
    assert rows[("fp8", 32, 32768)]["pdl_over_plain"] == 1.1
    assert rows[("nvfp4", 1, 1024)]["apart"] is False
    s = LR.pdl_sentence(data)
    assert s.startswith("PDL (time with / without, fused layers) saved time at 1 of 3 points")
    assert "cost time at 1: fp8 B=32 32k (x1.100)" in s and s.endswith("1 within the quartile ranges.")
    assert LR.pdl_sentence({"results": [row("fp8_fused", 1, 1024, 100.0)]}).startswith("No fused layer")


def test_attention_launch_rows_pair_pdl_and_plain_in_the_rules_configuration():
    from fp8lab.kernels import layer_report as LR

    def row(B, ctx, v, cfg, t, rule=True):
        return {"batch": B, "context": ctx, "variant": v, "attn_config": list(cfg), "is_rule": rule, "time_us": t,
                "q1": t - 0.5, "q3": t + 0.5}
    probe = {"rows": [row(32, 32768, "fp8_fused_pdl", (2, 2, 3), 950.0), row(32, 32768, "fp8_fused_pdl attn plain", (2, 2, 3), 855.0),
                      row(32, 32768, "fp8_fused_pdl", (2, 1, 4), 850.0, rule=False),          # not the rule's: skipped
                      row(32, 32768, "fp8_fused_pdl attn plain", (2, 1, 4), 849.0, rule=False),
                      row(8, 1024, "fp8_fused_pdl", (2, 1, 4), 100.0), row(8, 1024, "fp8_fused_pdl attn plain", (2, 1, 4), 101.2),
                      row(1, 1024, "nvfp4_fused_pdl", (2, 1, 4), 80.0), row(1, 1024, "nvfp4_fused_pdl attn plain", (2, 1, 4), 80.3),
                      row(1, 1024, "fp8_fused", (2, 1, 4), 110.0)]}                           # no PDL: skipped
    rows = LR.attention_launch_rows(probe, {"rows": []})
    assert [(r["batch"], r["variant"]) for r in rows] == [(1, "nvfp4_fused_pdl"), (8, "fp8_fused_pdl"), (32, "fp8_fused_pdl")]
    assert rows[2]["plain_over_pdl"] == 0.9 and rows[2]["apart"] and not rows[0]["apart"]
    s = LR.attention_launch_sentence(rows)
    assert s == ("Launching the attention plainly instead of with PDL: faster in 1 of 3 cases (time x0.900 to x0.900), "
                 "slower in 1 (fp8_fused_pdl B=8 1k x1.012), within the quartiles in 1.")
    assert LR.attention_launch_sentence([]) == "No layer-attention probe recorded."


def test_load_attention_probes_reads_those_present(tmp_path):
    import json

    from fp8lab.kernels import layer_report as LR

    assert LR.load_attention_probes(None) == [] and LR.load_attention_probes(tmp_path) == []
    rec = {"provenance": {"device": "test"}, "results": [], "rows": [{"batch": 1}]}   # a recorded probe's shape
    (tmp_path / "layer_attn_probe_short.json").write_text(json.dumps(rec))
    assert LR.load_attention_probes(tmp_path) == [rec]


def test_layer_bench_goals_read_the_runs_breakdown():
    """The goals a layer run stores say why a ceiling goal is missed from the same run's breakdown (a run once stored
    them without it: "no per-kernel breakdown recorded" beside a recorded breakdown)."""
    from types import SimpleNamespace

    from fp8lab.kernels import bench_layer as BL
    from fp8lab.kernels import layer_report as LR

    data = _fake_layer_results()
    g = {x["goal"]: x for x in BL.goals_of(SimpleNamespace(results=data["results"], extra={"breakdown": data["breakdown"]}))}
    miss = next(x for k, x in g.items() if k.startswith("FP8") and "ceiling" in k)
    assert miss["met"] is False and "GEMVs alone take 7.0 us" in miss["why"]
    bare = BL.goals_of(SimpleNamespace(results=data["results"], extra={}))
    assert any(x.get("why") == "no per-kernel breakdown recorded for this variant" for x in bare)
    # the table recomputes from results and breakdown, whatever goals a record stored
    stale = dict(data, goals=bare)
    assert any("GEMVs alone take 7.0 us" in (r["why"] or "") for r in LR.goal_table(stale))


def test_gemm_goals_over_every_big_shape():
    from fp8lab.kernels import gemm_report as GR

    res = []
    for (N, K), sp, fr in (((28672, 8192), 1.10, 0.95), ((18944, 3584), 0.97, 0.86), ((4096, 4096), 0.5, 0.5)):
        for M in (1, 16):
            res.append({"kernel": "gemv_fp8_channel_v3", "family": "decode", "M": M, "N": N, "K": K, "speedup": 2.0,
                        "speedup_vs_scaled_mm_tensorwise": sp, "weight_fraction_of_copy": fr})
    goals = {g["goal"]: g for g in GR.goals({"results": res})}
    g = next(v for k, v in goals.items() if k.startswith("W8A16 M=1 >= 1.0x"))
    assert g["measured"] == 0.97 and g["shape"] == "18944x3584" and g["met"] is False  # 4096x4096 is under 32 MiB
    assert set(g["per_shape"]) == {"28672x8192", "18944x3584"}


def test_launch_ex_marshals_every_argument_kind_the_kernels_take():
    """cuLaunchKernelEx gets each argument as a pointer to its bytes: int32, float32, a device pointer, and a uint64 (the
    null pointer of version-3 attention's merge counters when no merge runs). Anything else: a one-line TypeError."""
    import ctypes

    import numpy as np

    from fp8lab.kernels import launch_ex

    class Dev:  # what CuPy arrays look like to the marshaller: .data.ptr
        class data:
            ptr = 0x1000

    assert isinstance(launch_ex._param(np.int32(7)), ctypes.c_int32) and launch_ex._param(np.int32(7)).value == 7
    assert launch_ex._param(np.float32(0.5)).value == 0.5
    assert launch_ex._param(np.uint64(0)).value == 0 and ctypes.sizeof(launch_ex._param(np.uint64(0))) == 8
    assert launch_ex._param(Dev()).value == 0x1000
    with pytest.raises(TypeError, match="cannot marshal"):
        launch_ex._param(1.5)
