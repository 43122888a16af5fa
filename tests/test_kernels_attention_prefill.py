"""Chunked-prefill attention over a bf16 / FP8 KV cache (fp8lab/kernels/attention_prefill.*).

CPU: the float64 reference against torch SDPA with torch's own lower-right causal mask, the mask semantics (a
one-token chunk is a decode step), the napkin math's invariants, argument checks before any CUDA call.
GPU: the kernel against the float64 reference, output poisoned (NaN), slots past the chunk poisoned: bf16 and FP8
(per-tensor and per-head scales), D = 64 / 128, 4 and 8 warps, GQA packing on and off, GQA groups, odd chunk and
prefix lengths, every split path (the merge of fully masked splits included).
"""
import functools
import math
import zlib

import pytest
import torch

from fp8lab.kernels import attention_fp8kv as att
from fp8lab.kernels import attention_prefill as pf
from fp8lab.kernels import cuda_available, tolerances
from fp8lab.kernels import reference as REF


def GPU(test):
    return pytest.mark.gpu(pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device (run on the GPU machine)")(test))


TOL = tolerances.attention("prefill", 4096)


def assert_close(out, ref, vmax, what=""):
    TOL.check(out, ref.double(), vmax, what)


@functools.lru_cache(maxsize=None)  # one case serves every block shape / packing (tests never modify the inputs)
def case(B=2, Hq=8, Hk=2, Mq=37, Lc=100, D=128, kind="bf16", per_head=False, dist="normal", extra=7, seed=0):
    """q, caches with Lc + Mq real tokens and `extra` poisoned slots after them, the float64 reference, max |V|."""
    gen = torch.Generator().manual_seed(seed)
    Lkv = Lc + Mq + extra
    q = torch.randn(B, Hq, Mq, D, generator=gen).to(torch.bfloat16)
    k = torch.randn(B, Hk, Lkv, D, generator=gen)
    v = torch.randn(B, Hk, Lkv, D, generator=gen)
    if dist == "outlier":
        for ch in att.OUTLIER_CHANNELS:
            k[..., ch % D] *= 20.0
    kw = {}
    if kind == "fp8":
        kc, ks = REF.quantize_kv(k, "head" if per_head else "tensor")
        vc, vs = REF.quantize_kv(v, "head" if per_head else "tensor")
        kw = dict(k_scale=ks, v_scale=vs)
        poison = 0x7F
    else:
        kc, vc = k.to(torch.bfloat16), v.to(torch.bfloat16)
        poison = float("nan")
    ref = pf.reference_prefill_attention(q, kc, vc, Lc, kw.get("k_scale"), kw.get("v_scale"))
    vmax = att.dequantize_cache(vc, kw.get("v_scale"))[:, :, : Lc + Mq].abs().max().item()
    kc[:, :, Lc + Mq:] = poison  # never read: past the chunk's last token
    vc[:, :, Lc + Mq:] = poison
    return dict(q=q, k_cache=kc, v_cache=vc, prefix_len=Lc, **kw), ref, vmax


# ---- CPU -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("Mq,Lc", [(1, 50), (16, 0), (20, 33)])
def test_reference_is_sdpa_with_lower_right_causal_mask(Mq, Lc):
    from torch.nn.attention.bias import causal_lower_right

    gen = torch.Generator().manual_seed(Mq)
    B, Hq, Hk, D = 2, 4, 2, 64
    q = torch.randn(B, Hq, Mq, D, generator=gen).to(torch.bfloat16)
    k = torch.randn(B, Hk, Lc + Mq, D, generator=gen)
    v = torch.randn(B, Hk, Lc + Mq, D, generator=gen)
    ref = pf.reference_prefill_attention(q, k, v, Lc)
    kr, vr = k.double().repeat_interleave(2, 1), v.double().repeat_interleave(2, 1)
    mask = causal_lower_right(Mq, Lc + Mq).to_dense()
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), kr, vr, attn_mask=mask)
    torch.testing.assert_close(ref, want, rtol=1e-10, atol=1e-10)


def test_one_token_chunk_is_a_decode_step():
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 8, 1, 64, generator=gen).to(torch.bfloat16)
    k = torch.randn(2, 2, 40, 64, generator=gen)
    v = torch.randn(2, 2, 40, 64, generator=gen)
    ref = pf.reference_prefill_attention(q, k, v, 39)
    dec = att.reference_decode_attention(q[:, :, 0], k, v)
    torch.testing.assert_close(ref[:, :, 0].float(), dec, rtol=1e-5, atol=1e-6)


def test_reference_rows_subset():
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(1, 4, 30, 64, generator=gen).to(torch.bfloat16)
    k = torch.randn(1, 2, 80, 64, generator=gen)
    full = pf.reference_prefill_attention(q, k, k, 50)
    some = pf.reference_prefill_attention(q, k, k, 50, rows=[0, 7, 29])
    # float64 either way; the BLAS may block a 3-row product differently from a 30-row one (CPU-dependent), so
    # the rows agree to float64 rounding, not bit for bit
    torch.testing.assert_close(some[:, :, [0, 7, 29]], full[:, :, [0, 7, 29]], rtol=1e-12, atol=1e-12)
    assert torch.isnan(some[:, :, 1]).all()


def test_napkin_math():
    a = pf.napkin(512, 32768)
    assert a["flops"] == pytest.approx(4 * 32 * 512 * (32768 + 256.5) * 128)
    assert a["bytes_fp8"] * 2 == a["bytes_bf16"] and a["flops_per_byte_fp8"] == 2 * a["flops_per_byte_bf16"]
    assert a["bound_bf16"] == "math" and pf.napkin(1, 32768)["bound_bf16"] == "memory"
    # every block of bm rows widens the tiles it reads: conversions per flop ~ 1 / bm, whatever the packing ...
    assert pf.napkin(512, 32768, pack=4)["conversions"] == pytest.approx(a["conversions"])
    assert pf.napkin(512, 32768, bm=128)["conversions"] * 2 == pytest.approx(a["conversions"])
    # ... except for chunks shorter than a block, where packing the G heads fills the rows
    assert pf.napkin(16, 32768, pack=4)["conversions"] * 4 == pytest.approx(pf.napkin(16, 32768)["conversions"])
    # conversions per FP8 byte grow with the chunk: more blocks widen the same cache
    assert pf.napkin(8192, 32768)["conversions_per_fp8_byte"] > a["conversions_per_fp8_byte"]


def test_plan_splits():
    assert pf.plan_splits(256, 40000) == (1, 40000)
    S, n = pf.plan_splits(32, 40000)
    assert S == 8 and n % pf.BN == 0 and S * n >= 40000 and (S - 1) * n < 40000


def _good(**over):
    kw = dict(q=torch.zeros(1, 8, 16, 128, dtype=torch.bfloat16), k_cache=torch.zeros(1, 2, 64, 128, dtype=torch.uint8),
              v_cache=torch.zeros(1, 2, 64, 128, dtype=torch.uint8), prefix_len=40, k_scale=1.0, v_scale=1.0)
    kw.update(over)
    return kw


BAD = [
    ("q 3-D", dict(q=torch.zeros(1, 8, 128, dtype=torch.bfloat16)), r"4-D \[B, Hq, Mq, D\]"),
    ("head_dim 96", dict(q=torch.zeros(1, 8, 16, 96, dtype=torch.bfloat16)), "head_dim must be one of"),
    ("cache float32", dict(k_cache=torch.zeros(1, 2, 64, 128), v_cache=torch.zeros(1, 2, 64, 128)), "E4M3 codes"),
    ("cache too short", dict(prefix_len=49), "write the chunk's"),
    ("negative prefix", dict(prefix_len=-1), "prefix_len must be"),
    ("prefix float", dict(prefix_len=4.0), "prefix_len must be"),
    ("missing scale", dict(k_scale=None), "needs k_scale"),
    ("bf16 with scale", dict(k_cache=torch.zeros(1, 2, 64, 128, dtype=torch.bfloat16),
                             v_cache=torch.zeros(1, 2, 64, 128, dtype=torch.bfloat16)), "takes no k_scale"),
    ("Hq not a multiple", dict(q=torch.zeros(1, 7, 16, 128, dtype=torch.bfloat16)), "multiple of n_kv_heads"),
    ("pack not compiled", dict(pack=3), "no compiled kernel"),
    ("warps not compiled", dict(nw=2), "no compiled kernel"),
    ("batch mismatch", dict(q=torch.zeros(2, 8, 16, 128, dtype=torch.bfloat16)), "the cache must be"),
]


@pytest.mark.parametrize("name,over,msg", BAD, ids=[b[0] for b in BAD])
def test_bad_arguments_raise_before_cuda(name, over, msg):
    with pytest.raises(ValueError, match=msg):
        pf.prefill_attention(**_good(**over))


def test_cpu_tensors_get_a_clear_error():
    with pytest.raises(ValueError, match="runs on CUDA tensors"):
        pf.prefill_attention(**_good())


# ---- GPU ---------------------------------------------------------------------------------------------------------
def run_kernel(kw, **launch):
    dev = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    out = torch.full(kw["q"].shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    pf.prefill_attention(**dev, out=out, **launch)
    torch.cuda.synchronize()
    return out.cpu()


@GPU
@pytest.mark.parametrize("kind", ["bf16", "fp8"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("nw", [4, 8])
@pytest.mark.parametrize("pack", [1, "gqa"])
@pytest.mark.parametrize("Mq,Lc", [(1, 300), (37, 0), (130, 517)], ids=["decode-like", "no-prefix", "odd"])
def test_kernel_matches_reference(kind, D, nw, pack, Mq, Lc):
    kw, ref, vmax = case(B=2, Hq=8, Hk=2, Mq=Mq, Lc=Lc, D=D, kind=kind, dist="outlier",
                         seed=zlib.crc32(repr((kind, D, Mq, Lc)).encode()) % 1000)
    assert_close(run_kernel(kw, nw=nw, pack=pack), ref, vmax, f"{kind} D={D} nw={nw} pack={pack} Mq={Mq} Lc={Lc}")


@GPU
@pytest.mark.parametrize("kind", ["bf16", "fp8"])
@pytest.mark.parametrize("num_splits", [1, 2, 5, 1000])
@pytest.mark.parametrize("pack", [1, "gqa"])
def test_every_split_count(kind, num_splits, pack):
    """Splits of the key range merged by decode_reduce; with 1000, splits of one tile: for the chunk's early rows the
    last splits hold only masked keys (max -inf, sum 0), which the merge must weigh 0."""
    kw, ref, vmax = case(B=2, Hq=8, Hk=2, Mq=70, Lc=400, kind=kind, per_head=True, seed=num_splits)
    assert_close(run_kernel(kw, num_splits=num_splits, pack=pack), ref, vmax, f"{kind} S={num_splits} pack={pack}")


@GPU
@pytest.mark.parametrize("kind", ["bf16", "fp8"])
@pytest.mark.parametrize("Hq,Hk,pack", [(4, 4, 1), (8, 4, 1), (16, 4, "gqa"), (32, 4, 1), (32, 2, 1)],
                         ids=["G1", "G2", "G4packed", "G8", "G16"])
def test_group_sizes(kind, Hq, Hk, pack):
    kw, ref, vmax = case(B=1, Hq=Hq, Hk=Hk, Mq=45, Lc=213, kind=kind, seed=Hq * 10 + Hk)
    assert_close(run_kernel(kw, pack=pack), ref, vmax, f"{kind} Hq={Hq} Hk={Hk} pack={pack}")


@GPU
def test_fp8_and_bf16_agree_on_the_same_values():
    """Power-of-two scales make decode(code) * scale exact in bf16: both paths see the same K and V."""
    gen = torch.Generator().manual_seed(9)
    B, Hq, Hk, Mq, Lc, D = 1, 8, 2, 200, 900, 128
    k = torch.randn(B, Hk, Lc + Mq, D, generator=gen)
    v = torch.randn(B, Hk, Lc + Mq, D, generator=gen)
    kc, _ = REF.quantize_kv(k)
    vc, _ = REF.quantize_kv(v)
    kb = att.dequantize_cache(kc, 2.0**-5).to(torch.bfloat16)
    vb = att.dequantize_cache(vc, 2.0**-6).to(torch.bfloat16)
    q = torch.randn(B, Hq, Mq, D, generator=gen).to(torch.bfloat16)
    ref = pf.reference_prefill_attention(q, kb, vb, Lc)
    vmax = vb.float().abs().max().item()
    assert_close(run_kernel(dict(q=q, k_cache=kc, v_cache=vc, prefix_len=Lc, k_scale=2.0**-5, v_scale=2.0**-6)), ref, vmax, "fp8")
    assert_close(run_kernel(dict(q=q, k_cache=kb, v_cache=vb, prefix_len=Lc)), ref, vmax, "bf16")


# ---- the benchmark's validation reference and report functions (CPU, synthetic records) -----------------------------
def test_bench_reference_rows_match_the_float64_reference():
    from fp8lab.kernels import bench_prefill_attn as bp

    kw, ref, _ = case(B=1, Hq=8, Hk=2, Mq=33, Lc=70, D=64, kind="fp8", extra=0, seed=5)
    got = bp.reference_rows(kw["q"], kw["k_cache"], kw["v_cache"], 70, [0, 16, 32], kw["k_scale"], kw["v_scale"])
    for t, r in got.items():
        torch.testing.assert_close(r.double(), ref[0, :, t], rtol=1e-4, atol=1e-5)
    ok, detail = bp.check(ref.float(), got)
    assert ok and detail["rel_rms_err"] < 1e-5


def _prefill_records():
    recs = []
    for Lc in (32768, 131072):
        for Mq, r8 in ((16, 0.6), (512, 0.95), (2048, 1.1), (8192, 1.3)):
            b16 = 1000.0 * Mq / 512 * Lc / 32768
            nap = pf.napkin(Mq, Lc)
            for kv, t in (("bf16", b16), ("fp8", b16 * r8)):
                recs.append(dict(kernel=f"ours_{kv}kv[w4]", kv=kv, variant="w4", chunk=Mq, context=Lc, time_us=t,
                                 tflops=1.0, valid=True, napkin=nap))
            recs.append(dict(kernel="torch_sdpa[gqa,lower_right]", kv="bf16", variant="torch", chunk=Mq, context=Lc,
                             time_us=b16 * 0.8, tflops=1.0, valid=True))
    return {"provenance": {"device": "X", "date": "2000-01-01"}, "ceilings": {"copy_gbps": 4000.0, "mma_tflops_cublas": 600.0},
            "results": recs}


def test_prefill_report_functions():
    from fp8lab.kernels import bench_prefill_attn as bp

    data = _prefill_records()
    rows = bp.summary_rows(data)
    assert len(rows) == 8 and rows[0]["fp8_over_bf16"] == pytest.approx(0.6)
    c = bp.crossover(data)
    assert [x["context"] for x in c] == [32768, 131072]
    assert 512 < c[0]["crossover_chunk"] < 2048 and c[0]["below"] == [16, 512] and c[0]["above"] == [2048, 8192]
    text = bp.format_summary(data)
    assert "8192" in text and "1.30x" in text
    assert "FLOP/B" in bp.format_napkin(data) and "FLOPs" in bp.format_napkin()
    reading = bp.seed004_reading(data)
    assert "1.32x" in reading and "1.30x" in reading and "cannot" in reading
    bp.plot_ratio(data)
    assert bp.flops_of(1, 10) == 4.0 * 32 * 128 * 11
