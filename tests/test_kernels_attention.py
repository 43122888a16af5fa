"""Decode attention over an FP8 / bf16 KV cache (attention_fp8kv.*, versions 1 and 2) and over an NVFP4 KV cache
(attention_nvfp4kv.*).

CPU: the references (vs a float64 softmax written out by hand; NVFP4 decoded through fp8lab.scaling), the paged
gather, the cache quantizers, the split plans, and argument checks that must fire before any CUDA call.
GPU (skipped without CUDA): every kernel vs the reference on fresh random inputs of several distributions,
contiguous and paged (shuffled pages), odd lengths, B = 1..8, GQA groups 1..16, D = 64 / 128, every split path,
every compiled version-2 configuration, output poisoned first.
"""
import functools
import math
import re
import zlib

import pytest
import torch

from fp8lab import formats
from fp8lab.kernels import cuda_available
from fp8lab.kernels import attention_fp8kv as att
from fp8lab.kernels import reference as REF
from fp8lab.kernels import tolerances

def GPU(test):
    """A GPU test: marked `gpu` (pytest -m gpu selects it) and skipped where there is no CUDA device."""
    return pytest.mark.gpu(pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device (run on the GPU machine)")(test))

# Tolerances: fp8lab.kernels.tolerances.attention (one table, the bench uses it too); every context here is
# <= L_MAX tokens, and the bound grows with L, so the table at L_MAX covers them all.
L_MAX = 4096
TOL = {kind: tolerances.attention(kind, L_MAX) for kind in ("fp8", "bf16")}


def assert_close(out, ref, vmax, kind, what=""):
    return TOL[kind].check(out, ref, vmax, what, dtype=torch.float32)


# ---- inputs ---------------------------------------------------------------------------------------------------
OUTLIER_CHANNELS = att.OUTLIER_CHANNELS  # KIVI: a few key channels carry most of the magnitude


def make_kv(B, Hk, L, D, dist, gen):
    """float32 K, V [B, Hk, L, D] from one of: normal, outlier (keys x20 in a few channels), codes (see below)."""
    k = torch.randn(B, Hk, L, D, generator=gen)
    v = torch.randn(B, Hk, L, D, generator=gen)
    if dist == "outlier":
        for ch in OUTLIER_CHANNELS:
            k[..., ch % D] *= 20.0
    elif dist == "wide":  # heavy tails: values spread over many binades (exercises E4M3 subnormals)
        k = k * torch.exp(2.0 * torch.randn(B, Hk, L, D, generator=gen))
        v = v * torch.exp(2.0 * torch.randn(B, Hk, L, D, generator=gen))
    return k, v


@functools.lru_cache(maxsize=None)  # the same inputs serve every kernel version (tests never modify them)
def case(B=3, Hq=8, Hk=2, D=128, lens=(1, 37, 300), dist="normal", kind="fp8", per_head=False, layout="contig",
         page=16, seed=0):
    """Random inputs + the reference. Returns a dict of kernel kwargs, the reference output and max|V|."""
    gen = torch.Generator().manual_seed(seed)
    L = max(lens) + 5  # allocated length > every sequence: the tail must be ignored
    q = torch.randn(B, Hq, D, generator=gen).to(torch.bfloat16)
    k, v = make_kv(B, Hk, L, D, dist, gen)
    if kind == "fp8":
        kc, ks = REF.quantize_kv(k, "head" if per_head else "tensor")
        vc, vs = REF.quantize_kv(v, "head" if per_head else "tensor")
        poison, kw = 0x7F, dict(k_scale=ks, v_scale=vs)  # 0x7F: an E4M3 NaN code
    else:
        kc, vc = k.to(torch.bfloat16), v.to(torch.bfloat16)
        poison, kw = float("nan"), {}
    for b, n in enumerate(lens):  # poison every slot past each sequence's end: it must never be read
        kc[b, :, n:] = poison
        vc[b, :, n:] = poison
    ref = att.reference_decode_attention(q, kc, vc, kw.get("k_scale"), kw.get("v_scale"), seq_lens=list(lens))
    vd = att.dequantize_cache(vc, kw.get("v_scale"))
    vmax = max(vd[b, :, :n].abs().max().item() for b, n in enumerate(lens))  # valid slots only (the rest is NaN)
    if layout != "contig":  # the same shuffled page order for K and V (two generators, one seed)
        pk = dict(extra_pages=3, pad_blocks=2, poison=poison)
        kc, bt = att.to_paged(kc, page, lens, generator=torch.Generator().manual_seed(seed + 1), **pk)
        vc, bt_v = att.to_paged(vc, page, lens, generator=torch.Generator().manual_seed(seed + 1), **pk)
        assert torch.equal(bt, bt_v)
        kw["block_table"] = bt
    return dict(q=q, k_cache=kc, v_cache=vc, seq_lens=list(lens), **kw), ref, vmax


# ---- CPU: the reference ------------------------------------------------------------------------------------------
def naive_attention(q, k, v, lens, sm):
    """float64, written out: scores, max-subtracted exp, normalize, weighted sum (GQA by integer division)."""
    B, Hq, D = q.shape
    Hk = k.shape[1]
    out = torch.zeros(B, Hq, D, dtype=torch.float64)
    for b in range(B):
        for i in range(Hq):
            h = i // (Hq // Hk)
            s = (k[b, h, : lens[b]].double() @ q[b, i].double()) * sm
            w = torch.exp(s - s.max())
            out[b, i] = (w / w.sum()) @ v[b, h, : lens[b]].double()
    return out


@pytest.mark.parametrize("G", [1, 4])
def test_reference_matches_naive_softmax(G):
    gen = torch.Generator().manual_seed(1)
    B, Hk, L, D = 3, 2, 40, 64
    q = torch.randn(B, Hk * G, D, generator=gen).to(torch.bfloat16)
    k, v = make_kv(B, Hk, L, D, "outlier", gen)
    kc, ks = REF.quantize_kv(k)
    vc, vs = REF.quantize_kv(v, "head")
    lens = [1, 17, 40]
    ref = att.reference_decode_attention(q, kc, vc, ks, vs, seq_lens=lens)
    kd = formats.E4M3.decode(kc) * ks
    vd = formats.E4M3.decode(vc) * vs.reshape(1, -1, 1, 1)
    want = naive_attention(q, kd, vd, lens, 1 / math.sqrt(D))
    torch.testing.assert_close(ref.double(), want, rtol=1e-5, atol=1e-6)
    # L = 1: the output is exactly that token's V
    torch.testing.assert_close(ref[0], vd[0, torch.arange(Hk * G) // G, 0], rtol=1e-6, atol=1e-7)


def test_docstring_example():
    """The worked example in attention_fp8kv's docstring: every output dim is 0.75."""
    q = torch.ones(1, 1, 64, dtype=torch.bfloat16)
    kc = torch.full((1, 1, 2, 64), 0x38, dtype=torch.uint8)
    vc = torch.full((1, 1, 2, 64), 0x38, dtype=torch.uint8)
    vc[0, 0, 1] = 0x40
    ref = att.reference_decode_attention(q, kc, vc, 0.5, 0.5)
    assert torch.allclose(ref, torch.full((1, 1, 64), 0.75))


@pytest.mark.parametrize("page", [16, 64])
def test_paged_gather_roundtrip_and_reference(page):
    gen = torch.Generator().manual_seed(2)
    B, Hk, L, D = 4, 2, 150, 64
    lens = [1, 16, 65, 150]  # 1 token; exactly one 16-page; not multiples of the page
    x = torch.randn(B, Hk, L, D, generator=gen)
    pool, bt = att.to_paged(x, page, lens, extra_pages=2, pad_blocks=1, poison=float("nan"), generator=gen)
    assert bt.dtype == torch.int32 and (bt[:, -1] == -1).all()
    g = att.gather_pages(pool, bt, lens)
    for b, n in enumerate(lens):
        assert torch.equal(g[b, :, :n], x[b, :, :n])
        assert (g[b, :, n:] == 0).all()
    q = torch.randn(B, 2 * Hk, D, generator=gen).to(torch.bfloat16)
    a = att.reference_decode_attention(q, x, x, seq_lens=lens)
    p = att.reference_decode_attention(q, pool, pool, seq_lens=lens, block_table=bt)
    assert torch.isfinite(p).all()  # the poisoned slots and pages were never read
    torch.testing.assert_close(a, p, rtol=0, atol=0)


def test_plan_splits():
    assert att.plan_splits(32768, 8, 8) == (16, 2048)  # one wave: 1024 warps <= 132 SMs x 8
    assert att.plan_splits(100, 8, 8) == (1, 112)
    S, n = att.plan_splits(1000, 1, 1, sms=132, warps_per_sm=8)
    assert n % att.TILE == 0 and S * n >= 1000 and (S - 1) * n < 1000


@pytest.mark.parametrize("L,B,Hk,bps", [(32768, 8, 8, 4), (32768, 8, 8, 3), (131072, 8, 8, 4), (100, 8, 8, 4),
                                        (5000, 1, 1, 3), (16384, 64, 8, 4)])
def test_plan_splits_v2_fills_one_wave_of_blocks(L, B, Hk, bps):
    S, n = att.plan_splits_v2(L, B, Hk, sms=132, blocks_per_sm=bps)
    assert n % att.TILE == 0 and S * n >= L and (S - 1) * n < L
    blocks = B * Hk * -(-S // att.WARPS_PER_BLOCK_V2)
    assert blocks <= max(132 * bps, B * Hk)  # one wave (or one block per pair when the pairs alone overfill it)
    assert att.plan_splits_v2(32768, 8, 8, 132, 4) == (32, 1024) and att.plan_splits_v2(32768, 8, 8, 132, 3) == (24, 1376)


def test_plan_splits_v3_merged():
    """Version 3 merging inside the kernel: splits of >= V3_MIN_TILES_MERGED tiles, at most V3_MAX_SPLITS_MERGED per
    (sequence, kv head); at long context the same wave of blocks as version 2's plan."""
    assert att.plan_splits_v3_merged(1024, 1, 8, 132, 4) == (64, 16)       # one tile per split
    assert att.plan_splits_v3_merged(8192, 1, 8, 132, 4) == (att.V3_MAX_SPLITS_MERGED, 64)   # 264 would fit: capped
    for L, B, Hk in ((16384, 8, 8), (32768, 8, 8), (131072, 8, 8)):
        assert att.plan_splits_v3_merged(L, B, Hk, 132, 4) == att.plan_splits_v2(L, B, Hk, 132, 4)
    for L in (1, 15, 17, 100, 999, 5000, 70000):
        S, n = att.plan_splits_v3_merged(L, 1, 1, 132, 4)
        assert n % att.TILE == 0 and S * n >= L and (S - 1) * n < L and S <= att.V3_MAX_SPLITS_MERGED
        assert n // att.TILE >= att.V3_MIN_TILES_MERGED


def test_v2_config_lists():
    """Every default is compiled, smem of every compiled config fits a block, names are what the .cu builds."""
    for key, cfg in att.V2_DEFAULTS.items():
        assert key + cfg in att.V2_KERNELS
    for f, D, g, nsub, ns, rot, minb in att.V2_KERNELS:
        assert f in att.V2_FMTS and D in att.HEAD_DIMS and g in ("g8", "g16") and ns >= 2 and rot in (0, 1)
        assert att.v2_smem(f, D, nsub, ns) <= 227 * 1024
    assert att.v2_smem("fp8cvt", 128, 1, 3) == 49152 and att.v2_tile_bytes("nvfp4", 128) == 2304
    assert att.v2_kernel_name("fp8cvt", 128, "g8", (1, 3, 1, 4)) == "decode_v2_fp8cvt_d128_g8_n1_s3_r1_b4"


def test_v3_default_follows_the_cache_size():
    """Version 3's default for long caches (V3_LONG_DEFAULTS from V3_LONG_ROWS rows of B x Hk x tokens on; pages that
    hold two tiles), the short default below; every default of either table is compiled; check_ring_config applies
    the rule only when it knows the planned length and no config was asked for."""
    key = ("fp8cvt", 128, "g8")
    short, long_ = att.V3_DEFAULTS[key], att.V3_LONG_DEFAULTS[key]
    assert short != long_
    for k, cfg in list(att.V3_DEFAULTS.items()) + list(att.V3_LONG_DEFAULTS.items()):
        assert k + cfg in att.V3_KERNELS
    rows = att.V3_LONG_ROWS
    assert att.v3_default(*key, 8, 8, rows // 64) == long_ and att.v3_default(*key, 8, 8, rows // 64 - 1) == short
    assert att.v3_default(*key, 1, 8, rows // 8) == long_ and att.v3_default(*key, 1, 8, 8192) == short
    assert att.v3_default(*key, 8, 8, 131072) == long_
    assert att.v3_default(*key, 8, 8, 131072, 16) == short                        # one tile per page
    assert att.v3_default(*key, 8, 8, 131072, 32) == long_ and att.v3_default(*key, 8, 8, 131072, 48) == short
    for other in (("bf16", 128, "g8"), ("fp8cvt", 64, "g8"), ("fp8cvt", 128, "g16"), ("nvfp4", 128, "g8")):
        assert att.v3_default(*other, 64, 8, 131072) == att.V3_DEFAULTS[other]
    p = att.Problem(B=8, Hq=32, Hk=8, D=128, fp8=True, paged=False, page=32768, max_blocks=1, n_pages=8)
    assert att.check_ring_config("fp8cvt", p, None, version=3) == short                # no planned length: the table
    assert att.check_ring_config("fp8cvt", p, None, version=3, max_len=32768) == long_
    assert att.check_ring_config("fp8cvt", p, None, version=3, max_len=16384) == short
    assert att.check_ring_config("fp8cvt", p, short, version=3, max_len=32768) == short  # an asked-for config stays
    assert att.check_ring_config("bf16", p, None, version=3, max_len=32768) == att.V3_DEFAULTS[("bf16", 128, "g8")]
    pg = att.Problem(B=8, Hq=32, Hk=8, D=128, fp8=True, paged=True, page=16, max_blocks=2048, n_pages=9)
    assert att.check_ring_config("fp8cvt", pg, None, version=3, max_len=32768) == short


# ---- CPU: argument checks fire before any CUDA call ------------------------------------------------------------
def _good(**over):
    B, Hq, Hk, L, D = 2, 8, 2, 32, 128
    kw = dict(q=torch.zeros(B, Hq, D, dtype=torch.bfloat16), k_cache=torch.zeros(B, Hk, L, D, dtype=torch.uint8),
              v_cache=torch.zeros(B, Hk, L, D, dtype=torch.uint8), seq_lens=[3, 32], k_scale=1.0, v_scale=1.0)
    kw.update(over)
    return kw


BAD_ARGS = [
    ("q float32", dict(q=torch.zeros(2, 8, 128)), "q must be bfloat16"),
    ("head_dim 96", dict(q=torch.zeros(2, 8, 96, dtype=torch.bfloat16), k_cache=torch.zeros(2, 2, 32, 96, dtype=torch.uint8),
                         v_cache=torch.zeros(2, 2, 32, 96, dtype=torch.uint8)), "head_dim must be one of"),
    ("Hq not a multiple of Hk", dict(q=torch.zeros(2, 7, 128, dtype=torch.bfloat16)), "multiple of n_kv_heads"),
    ("group of 32", dict(q=torch.zeros(2, 64, 128, dtype=torch.bfloat16)), "at most 16"),
    ("cache float32", dict(k_cache=torch.zeros(2, 2, 32, 128), v_cache=torch.zeros(2, 2, 32, 128)), "E4M3 codes"),
    ("k fp8, v bf16", dict(v_cache=torch.zeros(2, 2, 32, 128, dtype=torch.bfloat16)), "same element type"),
    ("seq_len 0", dict(seq_lens=[0, 5]), r"seq_lens\[0\] = 0"),
    ("seq_len > L", dict(seq_lens=[3, 33]), r"seq_lens\[1\] = 33"),
    ("missing scale", dict(k_scale=None), "needs k_scale and v_scale"),
    ("negative scale", dict(v_scale=-1.0), "finite and > 0"),
    ("scale of 3 heads", dict(k_scale=torch.ones(3)), "per KV head"),
    ("bf16 with scale", dict(k_cache=torch.zeros(2, 2, 32, 128, dtype=torch.bfloat16),
                             v_cache=torch.zeros(2, 2, 32, 128, dtype=torch.bfloat16)), "takes no k_scale"),
    ("paged, page 8", dict(k_cache=torch.zeros(10, 2, 8, 128, dtype=torch.uint8), v_cache=torch.zeros(10, 2, 8, 128, dtype=torch.uint8),
                           block_table=torch.zeros(2, 4, dtype=torch.int32)), "multiple of 16"),
    ("block table out of range", dict(k_cache=torch.zeros(4, 2, 16, 128, dtype=torch.uint8),
                                      v_cache=torch.zeros(4, 2, 16, 128, dtype=torch.uint8),
                                      block_table=torch.tensor([[0, -1], [1, 4]], dtype=torch.int32), seq_lens=[3, 32]),
     "points outside the pool"),
    ("block table float", dict(block_table=torch.zeros(2, 2)), "int32"),
    ("unknown conversion", dict(conv="lut"), "conv must be one of"),
    ("unknown P.V layout", dict(pv="vc"), "pv must be one of"),
    ("paged, no seq_lens", dict(block_table=torch.zeros(2, 2, dtype=torch.int32), seq_lens=None), "needs seq_lens"),
    ("unknown version", dict(version=4), "version must be one of"),
    ("version 2 with vb", dict(version=2, pv="vb"), "only the 'va'"),
    ("config for version 1", dict(version=1, config=(1, 3, 1, 4)), "config applies to versions 2 and 3"),
    ("version 3 with vb", dict(version=3, pv="vb"), "only the 'va'"),
    ("a version-2 config for version 3", dict(version=3, config=(1, 3, 1, 4)), "config must be a tuple \\(NS, COPY, MINB\\)"),
    ("an uncompiled version-3 config", dict(version=3, config=(5, 0, 1)), "version-3 config .* is not compiled"),
]


@pytest.mark.parametrize("name,over,msg", BAD_ARGS, ids=[b[0] for b in BAD_ARGS])
def test_bad_arguments_raise_before_cuda(name, over, msg):
    kw = _good(**over)  # ("bf16 with scale": the scales from _good stay, and that is the error)
    with pytest.raises(ValueError, match=msg):
        att.decode_attention(**kw)


def test_unused_block_table_entries_are_not_checked():
    """-1 past a sequence's pages is fine (vLLM pads block tables); only the pages in use must exist."""
    kw = _good(k_cache=torch.zeros(4, 2, 16, 128, dtype=torch.uint8), v_cache=torch.zeros(4, 2, 16, 128, dtype=torch.uint8),
               block_table=torch.tensor([[0, -1], [1, 3]], dtype=torch.int32), seq_lens=[3, 32])
    p = att.check_args(kw["q"], kw["k_cache"], kw["v_cache"], kw["seq_lens"], kw["block_table"], 1.0, 1.0)
    assert p.paged and p.page == 16 and p.G == 4


def test_cache_error_table_orders_the_formats():
    """bf16 cache error < FP8 cache error, on both key distributions (the notebook's numerics table)."""
    rows = att.cache_error_table(L=64, D=64, B=1, Hq=4, Hk=2)
    for keys in ("normal", "outlier x20"):
        e = {r["cache"]: r["rel_rms_err"] for r in rows if r["keys"] == keys}
        assert 0 < e["bf16"] < e["fp8 e4m3, per-tensor scale"]


def test_bench_summary_helpers_read_the_schema():
    """The notebook helpers on a hand-made payload (a format check, not a measurement)."""
    from fp8lab.kernels import bench_attention as ba

    mk = lambda kernel, t, **kw: dict(kernel=kernel, time_us=t, layout="contiguous", head_dim=128, context=32768, **kw)
    data = {"provenance": {"device": "X", "date": "2000-01-01"}, "ceilings": {"copy_gbps": 1.0}, "results": [
        mk("ours_fp8kv[cvt,va]", 1.0, default=True, speedup=2.0, speedup_vs_torch=3.0, fraction_of_copy_bw=0.5),
        mk("ours_fp8kv[bit,va]", 1.5, default=False, speedup=1.3),
        mk("ours_bf16kv[va]", 2.0, default=True, speedup=1.5, fraction_of_copy_bw=0.6),
        mk("ours_bf16kv[vb]", 2.5, default=False, speedup=1.2),
        mk("torch_sdpa[default=flash]", 3.0)]}
    rows = ba.summary_rows(data)
    assert len(rows) == 1 and rows[0]["speedup_vs_bf16"] == 2.0 and rows[0]["torch_us"] == 3.0
    assert "32768" in ba.format_summary(data)
    assert ba.goal_met(data) == (2.0, True)
    ba.plot_speedup(data)


def test_cpu_tensors_get_a_clear_error():
    with pytest.raises(ValueError, match="runs on CUDA tensors"):
        att.decode_attention(**_good())


# ---- GPU: the kernel against the reference ----------------------------------------------------------------------
def run_kernel(kw, conv="cvt", num_splits=None, pv=att.DEFAULT_PV, version=None, config=None, merge=None):
    """Move the inputs to the GPU, poison the output (NaN), run, return the output on the CPU."""
    if version == 3 and not att.v3_available():
        pytest.skip("version 3 needs the bulk copy engine (sm_90 and later)")
    dev = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    out = torch.full(kw["q"].shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    fp8 = kw["k_cache"].dtype == torch.uint8
    att.decode_attention(**dev, conv=conv if fp8 else att.DEFAULT_CONV, num_splits=num_splits, pv=pv, out=out,
                         version=version, config=config, merge=merge)
    torch.cuda.synchronize()
    return out.cpu()


KINDS = [("fp8", "cvt"), ("fp8", "bit"), ("bf16", None)]
LAYOUTS = [("contig", 0), ("paged", 16), ("paged", 64)]
IMPLS = [(1, "va"), (1, "vb"), (2, "va"), (3, "va")]  # (version, P.V layout): versions 2 and 3 have only "va"
IMPL_IDS = ["v1va", "v1vb", "v2", "v3"]


@GPU
@pytest.mark.parametrize("version,pv", IMPLS, ids=IMPL_IDS)
@pytest.mark.parametrize("kind,conv", KINDS, ids=["fp8cvt", "fp8bit", "bf16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("layout,page", LAYOUTS, ids=["contig", "page16", "page64"])
@pytest.mark.parametrize("dist", ["normal", "outlier"])
def test_kernel_matches_reference(kind, conv, D, layout, page, dist, version, pv):
    # lengths: 1 token, a partial first tile, a page boundary +1, odd long ones (not multiples of 16/64/splits)
    kw, ref, vmax = case(B=5, Hq=8, Hk=2, D=D, lens=(1, 13, 65, 777, 1500), dist=dist, kind=kind,
                         layout=layout, page=page or 16, seed=zlib.crc32(repr((kind, conv, D, layout, page, dist)).encode()) % 1000)
    assert_close(run_kernel(kw, conv, pv=pv, version=version), ref, vmax, kind,
                 f"v{version} {kind}/{conv}/{pv} D={D} {layout}{page} {dist}")


@GPU
@pytest.mark.parametrize("version,pv", IMPLS, ids=IMPL_IDS)
@pytest.mark.parametrize("kind,conv", KINDS, ids=["fp8cvt", "fp8bit", "bf16"])
@pytest.mark.parametrize("num_splits", [1, 2, 7, 1000])
def test_every_split_count(kind, conv, num_splits, version, pv):
    """S = 1 writes bf16 directly; S > 1 goes through the reduce kernel; 1000 -> one 16-token tile per split."""
    kw, ref, vmax = case(B=4, Hq=16, Hk=4, D=128, lens=(1, 16, 17, 2049), kind=kind, seed=num_splits)
    assert_close(run_kernel(kw, conv, num_splits, pv, version=version), ref, vmax, kind, f"v{version} {kind}/{pv} S={num_splits}")


@GPU
@pytest.mark.parametrize("version,pv", IMPLS, ids=IMPL_IDS)
@pytest.mark.parametrize("kind,conv", KINDS, ids=["fp8cvt", "fp8bit", "bf16"])
@pytest.mark.parametrize("Hq,Hk", [(4, 4), (8, 4), (32, 8), (64, 8), (80, 8), (128, 8)],
                         ids=["G1", "G2", "G4", "G8", "G10", "G16"])
def test_group_sizes(kind, conv, Hq, Hk, version, pv):
    """G > 8 uses the MMA's rows 8..15 too (the g16 kernels; "va" then runs a second n-tile of heads)."""
    kw, ref, vmax = case(B=2, Hq=Hq, Hk=Hk, D=128, lens=(100, 333), kind=kind, dist="outlier", seed=Hq)
    assert_close(run_kernel(kw, conv, pv=pv, version=version), ref, vmax, kind, f"v{version} {kind}/{pv} Hq={Hq} Hk={Hk}")


@GPU
@pytest.mark.parametrize("version", att.VERSIONS)
@pytest.mark.parametrize("B", [1, 2, 8])
@pytest.mark.parametrize("conv", ["cvt", "bit"])
def test_batch_sizes_random_lengths_per_head_scales(B, conv, version):
    gen = torch.Generator().manual_seed(B)
    lens = tuple(int(x) for x in torch.randint(1, 1200, (B,), generator=gen))
    kw, ref, vmax = case(B=B, Hq=32, Hk=8, D=128, lens=lens, per_head=True, layout="paged", page=16, seed=B)
    assert_close(run_kernel(kw, conv, version=version), ref, vmax, "fp8", f"v{version} B={B} lens={lens}")


V2_CONFIGS = sorted(att.V2_KERNELS)


@GPU
@pytest.mark.parametrize("cfg", V2_CONFIGS, ids=["_".join(map(str, c)) for c in V2_CONFIGS])
def test_every_compiled_v2_config(cfg):
    """Each instantiation (NSUB tiles per step, ring depth, rotation, register cap): pages of 16 so that a 2-tile step
    straddles pages, lengths that end inside a step, more splits than fit one wave and just one split."""
    fmt, D, g, nsub, ns, rot, minb = cfg
    kind, conv = ("bf16", "cvt") if fmt == "bf16" else ("fp8", fmt[3:])
    Hq, Hk = (24, 2) if g == "g16" else (8, 2)
    kw, ref, vmax = case(B=4, Hq=Hq, Hk=Hk, D=D, lens=(1, 31, 999, 2000), kind=kind, dist="outlier", layout="paged",
                         page=16, seed=zlib.crc32(repr(cfg).encode()) % 1000)
    for S in (None, 1, 37):
        assert_close(run_kernel(kw, conv, S, version=2, config=cfg[3:]), ref, vmax, kind, f"{cfg} S={S}")


V3_CONFIGS = sorted(k for k in att.V3_KERNELS if k[0] != "nvfp4")  # NVFP4's: test_kernels_attention_nvfp4.py


@GPU
@pytest.mark.parametrize("cfg", V3_CONFIGS, ids=["_".join(map(str, c)) for c in V3_CONFIGS])
def test_every_compiled_v3_config(cfg):
    """Each version-3 instantiation (ring depth, copy per row, per tile or per two tiles, register cap): pages of 16
    (a two-tile stage spans two pages) and 64, a
    contiguous cache whose length is not a multiple of 16, lengths that end inside a tile after full tiles went through
    the same ring stage (copies stop at the last valid row: case() puts NaN codes past every sequence's end, so a copy
    that read past it shows in the output), one split and many. The zero-fill of V rows past the end:
    test_v3_zero_fills_v_rows_past_the_end. Both merges of the splits: inside the kernel (num_splits=37 asks for 32-35
    splits of whole tiles here: 8-9 blocks per (sequence, kv head), most of them past a short sequence's end, with
    nothing to do but join the merge) and by the reduce kernel."""
    fmt, D, g, ns, copy, minb = cfg
    kind, conv = ("bf16", "cvt") if fmt == "bf16" else ("fp8", fmt[3:])
    Hq, Hk = (24, 2) if g == "g16" else (8, 2)
    for layout, page, lens in (("paged", 16, (1, 31, 999, 2000)), ("paged", 64, (17, 64, 65, 1100)),
                               ("contig", 0, (5, 333, 1001, 1001))):
        kw, ref, vmax = case(B=4, Hq=Hq, Hk=Hk, D=D, lens=lens, kind=kind, dist="outlier", layout=layout, page=page or 16,
                             seed=zlib.crc32(repr((cfg, layout, page)).encode()) % 1000)
        for S in (None, 1, 37):
            for merge in (True, False):
                assert_close(run_kernel(kw, conv, S, version=3, config=cfg[3:], merge=merge), ref, vmax, kind,
                             f"{cfg} {layout}{page} S={S} merge={merge}")


@GPU
@pytest.mark.parametrize("S", [None, 8, 37])
def test_v3_in_kernel_merge_repeats_and_replays(S):
    """The in-kernel merge counts each (sequence, kv head)'s blocks as they finish and the last one sets its counter
    back to 0: the same prepared launch, called again and again and replayed in a CUDA graph, gives the same output
    each time (a counter left behind would make a later call merge early, with partials missing). One Launch object,
    its output poisoned before every call."""
    if not att.v3_available():
        pytest.skip("version 3 needs the bulk copy engine (sm_90 and later)")
    kw, ref, vmax = case(B=4, Hq=32, Hk=8, D=128, lens=(1, 700, 3000, 4096), kind="fp8", dist="outlier", seed=5)
    dev = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    out = torch.empty(kw["q"].shape, dtype=torch.bfloat16, device="cuda")
    fn = att.prepare(**dev, num_splits=S, out=out, version=3, merge=True)
    assert fn.info["merge"] == "kernel" and fn.info["num_splits"] > 4
    for i in range(3):
        out.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        assert_close(out.cpu(), ref, vmax, "fp8", f"call {i} S={S}")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()  # warm-up on the capture stream
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            fn()
    torch.cuda.synchronize()
    for i in range(3):
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert_close(out.cpu(), ref, vmax, "fp8", f"graph replay {i} S={S}")


@GPU
@pytest.mark.parametrize("merge", [True, False])
def test_v3_merge_of_one_token_with_a_very_negative_score(merge):
    """A sequence of one token whose score is far below 0 (its max m ~ -3e4 in log2 units) beside a long one, split 32
    ways: the blocks past the short sequence's end hold no token, and their partials must weigh nothing in its merge.
    (The first in-kernel merge stored such a block's max as 0, which outweighed the real -3e4: 0 / 0.) The output is
    that token's V row."""
    B, Hq, Hk, D, L = 2, 8, 2, 128, 2000
    gen = torch.Generator().manual_seed(11)
    q = torch.ones(B, Hq, D).to(torch.bfloat16)
    kc = torch.randint(0, 0x70, (B, Hk, L, D), generator=gen, dtype=torch.uint8)
    vc = torch.randint(0, 0x70, (B, Hk, L, D), generator=gen, dtype=torch.uint8)
    kc[0, :, 0] = 0xFE                                   # -448: with k_scale 4, q.k = -448 x 4 x 128 before 1/sqrt(D)
    kw = dict(q=q, k_cache=kc, v_cache=vc, seq_lens=[1, L], k_scale=4.0, v_scale=0.5)
    ref = att.reference_decode_attention(q, kc, vc, 4.0, 0.5, seq_lens=[1, L])
    assert torch.allclose(ref[0].double(), att.dequantize_cache(vc[0:1, :, 0:1], 0.5)[0, :, 0].repeat_interleave(Hq // Hk, 0).double())
    assert_close(run_kernel(kw, "cvt", 37, version=3, merge=merge), ref, 448 * 0.5, "fp8", f"merge={merge}")


@GPU
def test_v3_launch_picks_the_long_cache_default():
    """prepare() plans the default by the cache's size (attention_fp8kv.v3_default): a contiguous FP8 cache of
    V3_LONG_ROWS rows gets the long configuration, a shorter one and a pool of 16-token pages the short one (a pool of
    one page that every block-table entry points at: the planned length is the table's capacity); the long launch
    runs and returns the output of an all-zero cache (every weight equal, every V row 0)."""
    if not att.v3_available():
        pytest.skip("version 3 needs sm_90+")
    key = ("fp8cvt", 128, "g8")
    B, Hk, D = 8, 8, 128
    L = att.V3_LONG_ROWS // (B * Hk)
    q = torch.randn(B, 4 * Hk, D, device="cuda").to(torch.bfloat16)
    for length, want in ((L, att.V3_LONG_DEFAULTS[key]), (L // 2, att.V3_DEFAULTS[key])):
        kc = torch.zeros(B, Hk, length, D, dtype=torch.uint8, device="cuda")
        launch = att.prepare(q, kc, kc, k_scale=1.0, v_scale=1.0)
        assert launch.info["config"] == want, (length, launch.info["config"])
        if length == L:
            out = launch()
            torch.cuda.synchronize()
            assert torch.equal(out, torch.zeros_like(out))
        del kc
    pool = torch.zeros(1, Hk, 16, D, dtype=torch.uint8, device="cuda")
    bt = torch.zeros(B, L // 16, dtype=torch.int32, device="cuda")
    lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
    launch = att.prepare(q, pool, pool, lens, block_table=bt, k_scale=1.0, v_scale=1.0, check_values=False)
    assert launch.info["config"] == att.V3_DEFAULTS[key]


def test_merge_is_a_version_3_choice():
    """merge= selects version 3's merge; asked of another version it is a one-line error before any CUDA call."""
    kw, _, _ = case(B=1, Hq=8, Hk=2, D=64, lens=(40,), kind="fp8", seed=1)
    for version in (1, 2):
        with pytest.raises(att.AttentionArgError, match="merge applies to version 3 only"):
            att.prepare(**kw, version=version, merge=True)


@GPU
@pytest.mark.parametrize("D,config", [(64, None), (128, None), (128, (2, 2, 3)), (128, (3, 2, 2))],
                         ids=["d64", "d128", "d128_c2_223", "d128_c2_322"])
def test_v3_zero_fills_v_rows_past_the_end(D, config):
    """Version 3 copies only a tile's valid rows; the V rows past a sequence's end must be zeroed by the lanes, because
    the ring's stale bytes could be NaN codes (NaN x P = 0 is NaN). First a throwaway launch over a cache of NaN codes
    with every sequence at the full length (B x Hk x splits warps: the rings of every SM hold NaN codes afterwards),
    then short sequences, each a single partial tile per warp, through the same kernel: the output must match the
    reference. (This relies on the next launch's rings landing on the same shared memory, which the hardware does in
    practice; it can miss a bug, not invent one.)"""
    if not att.v3_available():
        pytest.skip("version 3 needs the bulk copy engine (sm_90 and later)")
    B, Hq, Hk, L = 8, 32, 8, 4096
    nan = torch.full((B, Hk, L, D), 0x7F, dtype=torch.uint8, device="cuda")
    q = torch.randn(B, Hq, D, device="cuda").to(torch.bfloat16)
    att.decode_attention(q, nan, nan, [L] * B, k_scale=1.0, v_scale=1.0, version=3, config=config)
    torch.cuda.synchronize()
    # one partial tile per warp; for two-tile stages (COPY 2) also partial second tiles and a full first one
    lens = (1, 3, 5, 7, 9, 11, 13, 15) if config is None or config[1] != 2 else (1, 15, 17, 23, 31, 33, 9, 30)
    kw, ref, vmax = case(B=B, Hq=Hq, Hk=Hk, D=D, lens=lens, kind="fp8", seed=D)
    for S in (None, 1):  # one split per sequence: a two-tile stage then holds a full first tile and a partial second
        assert_close(run_kernel(kw, "cvt", S, version=3, config=config), ref, vmax, "fp8",
                     f"v3 partial tiles after NaN rings D={D} config={config} S={S}")


@GPU
@pytest.mark.parametrize("version", att.VERSIONS)
@pytest.mark.parametrize("conv", ["cvt", "bit"])
@pytest.mark.parametrize("D", [64, 128])
def test_every_e4m3_code(conv, D, version):
    """Codes drawn uniformly over all 254 finite E4M3 codes (subnormals, +-448): the conversions are exact."""
    gen = torch.Generator().manual_seed(D)
    B, Hk, L = 2, 2, 508
    codes = torch.randint(0, 254, (2, B, Hk, L, D), generator=gen)
    codes = torch.where(codes >= 0x7F, codes + 1, codes).to(torch.uint8)  # skip 0x7F (NaN); 0xFF is out of range
    q = (0.05 * torch.randn(B, 4 * Hk, D, generator=gen)).to(torch.bfloat16)  # small q: 448-sized keys, sane logits
    kw = dict(q=q, k_cache=codes[0], v_cache=codes[1], seq_lens=[L, 301], k_scale=0.01, v_scale=2.0)
    ref = att.reference_decode_attention(q, codes[0], codes[1], 0.01, 2.0, seq_lens=[L, 301])
    assert_close(run_kernel(kw, conv, version=version), ref, 448 * 2.0, "fp8", f"v{version} all codes {conv} D={D}")


@GPU
def test_fp8_and_bf16_kernels_agree_on_the_same_values():
    """Same design, two element types: with scales that are powers of two, decode(code) * scale is exact in
    bf16, so the FP8 and bf16 kernels see identical K and V; they differ only in P's rounding (f16 vs bf16)."""
    gen = torch.Generator().manual_seed(7)
    B, Hq, Hk, L, D = 3, 32, 8, 900, 128
    k, v = make_kv(B, Hk, L, D, "outlier", gen)
    kc, _ = REF.quantize_kv(k)
    vc, _ = REF.quantize_kv(v)
    ks, vs = 2.0**-5, 2.0**-7
    q = torch.randn(B, Hq, D, generator=gen).to(torch.bfloat16)
    lens = [900, 1, 457]
    kb = att.dequantize_cache(kc, ks).to(torch.bfloat16)
    vb = att.dequantize_cache(vc, vs).to(torch.bfloat16)
    assert torch.equal(kb.float(), att.dequantize_cache(kc, ks))  # exact
    ref = att.reference_decode_attention(q, kb, vb, seq_lens=lens)
    vmax = vb.float().abs().max().item()
    for version in att.VERSIONS:
        for conv in ("cvt", "bit"):
            o8 = run_kernel(dict(q=q, k_cache=kc, v_cache=vc, seq_lens=lens, k_scale=ks, v_scale=vs), conv, version=version)
            assert_close(o8, ref, vmax, "fp8", f"v{version} fp8 kernel ({conv}) on exact-in-bf16 values")
        o16 = run_kernel(dict(q=q, k_cache=kb, v_cache=vb, seq_lens=lens), version=version)
        assert_close(o16, ref, vmax, "bf16", f"v{version} bf16 kernel on the same values")


# ---- the benchmark's report functions on the current schema (synthetic records: a format check) ---------------------
def _decode_records():
    from fp8lab.kernels import bench_attention as ba

    recs = []
    for L in ba.CONTEXTS:
        t = L / 32768
        base = dict(layout="contiguous", head_dim=128, context=L, valid=True)
        recs += [dict(kernel="v2_fp8kv[cvt]", fmt="fp8cvt", version=2, default=True, time_us=140 * t, speedup=1.9,
                      speedup_vs_torch=1.7, fraction_of_copy_bw=0.91, **base),
                 dict(kernel="v2_bf16kv", fmt="bf16", version=2, default=True, time_us=266 * t, speedup=0.9,
                      fraction_of_copy_bw=0.96, **base),
                 dict(kernel="v2_nvfp4kv", fmt="nvfp4", version=2, default=True, time_us=85 * t, speedup=3.1,
                      anchor_time_us=263.5 * t, fraction_of_copy_bw=0.84, **base),
                 dict(kernel="v1_fp8kv[cvt]", fmt="fp8cvt", version=1, default=False, time_us=146 * t, speedup=1.79,
                      fraction_of_copy_bw=0.87, **base),
                 dict(kernel="v1_bf16kv", fmt="bf16", version=1, default=False, time_us=262 * t, **base),
                 dict(kernel="torch_sdpa[default=cudnn]", fmt="torch", time_us=238 * t, **base)]
    recs.append(dict(kernel="v2_fp8kv[cvt]{2,2,1,3}", fmt="fp8cvt", version=2, default=False, sweep=True, time_us=150.0,
                     config=[2, 2, 1, 3], num_splits=24, speedup=1.8, layout="contiguous", head_dim=128, context=32768))
    return {"provenance": {"device": "X", "date": "2000-01-01"}, "ceilings": {"copy_gbps": 4200.0}, "results": recs}


def test_merge_comparison_pairs_the_two_merges_of_a_run():
    from fp8lab.kernels import bench_attention as ba

    base = dict(version=3, head_dim=128, layout="contiguous", valid=True)
    res = [dict(kernel="v3_fp8kv[cvt]", fmt="fp8cvt", default=True, merge="kernel", context=16384, time_us=70.0,
                spread_us={"q1": 69.9, "q3": 70.2}, **base),
           dict(kernel="v3_fp8kv[cvt]{reduce}", fmt="fp8cvt", default=False, sweep=True, merge="reduce", context=16384,
                time_us=71.5, **base),
           dict(kernel="v3_fp8kv[cvt]{2,1,4}", fmt="fp8cvt", default=False, sweep=True, merge="kernel", context=16384,
                time_us=60.0, config=[2, 1, 4], **base),                       # a sweep row: not the default, not paired
           dict(kernel="v3_bf16kv", fmt="bf16", default=True, merge="kernel", context=32768, time_us=250.0, **base)]
    rows = ba.merge_comparison({"results": res})
    assert len(rows) == 1 and rows[0]["fmt"] == "fp8cvt" and rows[0]["context"] == 16384
    assert rows[0]["kernel_us"] == 70.0 and rows[0]["saved_us"] == pytest.approx(1.5)
    assert rows[0]["spread_us"]["kernel"] == [69.9, 70.2] and rows[0]["spread_us"]["reduce"] == [None, None]
    assert rows[0]["separated"] is None
    res[1]["spread_us"] = {"q1": 70.1, "q3": 71.9}                             # overlaps the default's [69.9, 70.2]
    assert ba.merge_comparison({"results": res})[0]["separated"] is False
    assert "quartiles overlap" in ba.format_merge_comparison({"results": res})
    res[1]["spread_us"] = {"q1": 71.2, "q3": 71.9}
    assert ba.merge_comparison({"results": res})[0]["separated"] is True
    assert "1.5 us" in ba.format_merge_comparison({"results": res})
    assert ba.merge_comparison({"results": res[3:]}) == [] and "no version-3" in ba.format_merge_comparison({})


def test_sweep_vs_default_names_the_fastest_configuration_and_the_default():
    from fp8lab.kernels import bench_attention as ba

    base = dict(fmt="fp8cvt", version=3, valid=True)
    res = [dict(kernel="v3_fp8kv[cvt]", default=True, config=[2, 1, 4], time_us=133.0, **base),
           dict(kernel="v3_fp8kv[cvt]{2,2,3}", default=False, sweep=True, config=[2, 2, 3], time_us=129.0, **base),
           dict(kernel="v3_fp8kv[cvt]{9,9,9}", default=False, sweep=True, config=[9, 9, 9], time_us=50.0,
                fmt="fp8cvt", version=3, valid=False)]                      # an invalid row never wins
    best, default = ba.sweep_vs_default({"results": res}, "fp8cvt", 3)
    assert best["config"] == [2, 2, 3] and default["config"] == [2, 1, 4]
    assert ba.sweep_vs_default({"results": []}, "fp8cvt", 3) == (None, None)


def test_default_rule_rows_pair_the_default_with_the_choice_it_did_not_make():
    from fp8lab.kernels import bench_attention as ba

    base = dict(fmt="fp8cvt", version=3, valid=True, head_dim=128, layout="contiguous")
    res = [dict(kernel="v3_fp8kv[cvt]", default=True, config=[2, 1, 4], time_us=69.0, context=16384,
                spread_us={"q1": 68.9, "q3": 69.2}, **base),
           dict(kernel="v3_fp8kv[cvt]{2,2,3}", default=False, sweep=True, alt_default=True, config=[2, 2, 3],
                time_us=72.0, context=16384, spread_us={"q1": 71.8, "q3": 72.1}, **base),
           dict(kernel="v3_fp8kv[cvt]", default=True, config=[2, 2, 3], time_us=129.0, context=32768,
                spread_us={"q1": 128.0, "q3": 131.0}, **base),
           dict(kernel="v3_fp8kv[cvt]{2,1,4}", default=False, sweep=True, alt_default=True, config=[2, 1, 4],
                time_us=130.0, context=32768, spread_us={"q1": 129.5, "q3": 135.0}, **base),
           dict(kernel="v3_fp8kv[cvt]{2,1,4}", default=False, sweep=True, alt_default=True, config=[2, 1, 4],
                time_us=500.0, context=131072, **base),                            # no default row at 128k: left out
           dict(kernel="v3_fp8kv[cvt]{reduce}", default=False, sweep=True, config=[2, 2, 3], time_us=1.0,
                context=32768, merge="reduce", **base)]                            # not an alternative default
    rows = ba.default_rule_rows({"results": res})
    assert [(r["context"], r["default_config"], r["other_config"]) for r in rows] == \
        [(16384, (2, 1, 4), (2, 2, 3)), (32768, (2, 2, 3), (2, 1, 4))]
    assert rows[0]["other_over_default"] == pytest.approx(72 / 69) and rows[0]["separated"] is True
    assert rows[1]["separated"] is False
    del res[1]["spread_us"]
    assert ba.default_rule_rows({"results": res})[0]["separated"] is None
    assert "1.043" in ba.format_default_rule({"results": res})
    assert ba.default_rule_rows({"results": []}) == [] and "predates" in ba.format_default_rule({})
    from fp8lab import findings

    res[3]["time_us"] = 128.0                                                  # the rule's pick now the slower at 32k
    text = findings.default_rule_sentence(ba.default_rule_rows({"results": res}), "H200")
    assert "On the H200" in text and "faster of the two at 1 of 2 problems (0 with the quartile ranges apart)" in text
    assert "faster at 32k ((2, 1, 4) took 0.992x the default's time, within the quartiles)" in text
    assert findings.default_rule_sentence([]) == ""


@pytest.mark.parametrize("sweep", [False, True])
def test_contenders_time_the_choice_the_size_rule_did_not_make(monkeypatch, sweep):
    """At every problem the bench times version 3's default and, beside it, the configuration v3_default did not pick
    (alt_default); a sweep excludes the picked default from its configuration rows and marks the other one. Version 3
    is made to look available (the list is built on the CPU; nothing launches)."""
    from fp8lab.kernels import bench_attention as ba

    monkeypatch.setattr(att, "v3_available", lambda device=None: True)
    monkeypatch.setattr(att, "default_version", lambda device: 3)
    key = ("fp8cvt", 128, "g8")
    short, long_ = att.V3_DEFAULTS[key], att.V3_LONG_DEFAULTS[key]
    L_long = att.V3_LONG_ROWS // (ba.B * ba.HK)
    for L, page, picked, other in ((L_long, None, long_, short), (L_long // 2, None, short, long_), (L_long, 16, short, long_)):
        cs = ba.contenders(128, sweep, L, page)
        alts = [c for c in cs if c.get("alt_default")]
        assert [(c["fmt"], tuple(c["config"])) for c in alts] == [("fp8cvt", other)], (L, page)
        assert alts[0]["sweep"] and not alts[0]["default"]
        assert not any(c["fmt"] == "fp8cvt" and c["version"] == 3 and c.get("config") is not None
                       and tuple(c["config"]) == picked for c in cs)       # the default itself runs as config None
        assert len({c["name"] for c in cs}) == len(cs)
    assert not [c for c in ba.contenders(64, sweep, L_long) if c.get("alt_default")]   # no rule at D = 64


def test_a_sweep_over_several_contexts_is_read_one_context_at_a_time():
    from fp8lab.kernels import bench_attention as ba

    base = dict(fmt="fp8cvt", version=3, valid=True, head_dim=128)
    res = [dict(kernel="v3_fp8kv[cvt]", default=True, config=[2, 1, 4], time_us=69.0, context=16384,
                shape="B8 Hq32 Hk8 L16384 D128", **base),
           dict(kernel="v3_fp8kv[cvt]{2,2,3}", default=False, sweep=True, config=[2, 2, 3], time_us=72.0,
                context=16384, shape="B8 Hq32 Hk8 L16384 D128", **base),
           dict(kernel="v3_fp8kv[cvt]", default=True, config=[2, 2, 3], time_us=129.0, context=32768,
                shape="B8 Hq32 Hk8 L32768 D128", **base),
           dict(kernel="v3_fp8kv[cvt]{2,1,4}", default=False, sweep=True, config=[2, 1, 4], time_us=134.0,
                context=32768, shape="B8 Hq32 Hk8 L32768 D128", **base)]
    data = {"results": res}
    assert ba.sweep_context(data) == 32768 and ba.sweep_context(data, 16384) == 16384
    assert ba.sweep_context({"results": res[:2]}) == 16384 and ba.sweep_context({"results": []}) is None
    assert ba.sweep_best(data, "fp8cvt", 3)["time_us"] == 129.0                  # at 32k, not the faster 16k rows
    best, dflt = ba.sweep_vs_default(data, "fp8cvt", 3, context=16384)
    assert best["time_us"] == 69.0 and dflt["config"] == [2, 1, 4]
    text = ba.format_sweep(data)
    assert "L16384" in text and "L32768" in text and text.index("L16384") < text.index("L32768")
    assert "L32768" not in ba.format_sweep({"results": res[2:]})                # one context: no section titles


def test_the_sweep_table_prints_no_ratio_for_its_denominators():
    from fp8lab.kernels import bench_attention as ba

    rows = [dict(kernel="v3_fp8kv[cvt]", fmt="fp8cvt", version=3, config=[2, 2, 3], time_us=70.0, speedup=1.83),
            dict(kernel="v3_bf16", fmt="bf16", version=3, config=[2, 2, 3], time_us=128.0, speedup=1.0),
            dict(kernel="torch_sdpa_bf16", fmt="torch", time_us=130.0)]
    lines = ba.format_sweep({"results": rows}).splitlines()
    fp8, bf16, torch_row = (next(l for l in lines if l.startswith(k)) for k in ("v3_fp8kv", "v3_bf16", "torch_sdpa"))
    assert fp8.split()[-1] == "1.83"
    assert bf16.split()[-1] == "-" and torch_row.split()[-1] == "-"       # the denominators, not a 0.00 ratio


def test_bench_report_functions_current_schema():
    from fp8lab.kernels import bench_attention as ba

    data = _decode_records()
    rows = ba.summary_rows(data)
    assert len(rows) == 3 and all(r["version"] == 2 for r in rows)  # the sweep row is not a summary row
    r32 = next(r for r in rows if r["context"] == 32768)
    assert r32["fp8_us"] == 140 and r32["nvfp4_vs_bf16"] == 3.1 and r32["fp8_v1_us"] == 146 and r32["torch_us"] == 238
    assert r32["nvfp4_twin_us"] == 263.5                 # the base of nvfp4/twin, shown beside it
    head, row32 = ba.format_summary(data).splitlines()[0], next(l for l in ba.format_summary(data).splitlines() if " 32768 " in l)
    cols = dict(zip(re.split(r"\s{2,}", head.strip()), row32.split()))
    assert cols["nvfp4 twin us"] == "263.5" and cols["nvfp4/twin"] == "3.10" and "nvfp4/bf16" not in head
    g = ba.goals_table(data)
    assert {x["goal"] for x in g} == {"fp8_vs_bf16", "fp8_vs_torch", "fp8_xcopy", "nvfp4_vs_bf16"}
    assert all(x["met"] for x in g if x["goal"] in ("fp8_vs_bf16", "fp8_xcopy", "nvfp4_vs_bf16"))
    assert not any(x["met"] for x in g if x["goal"] == "fp8_vs_torch")
    assert "NOT met" in ba.format_goals(data) and "131072" in ba.format_summary(data)
    assert "(2, 2, 1, 3)" in ba.format_sweep(data)
    assert ba.goal_met(data) == (1.9, True)
    ba.plot_speedup(data)
    ba.plot_bandwidth(data)


def test_bench_reference_matches_the_cpu_reference():
    from fp8lab.kernels import bench_attention as ba

    kw, ref, _ = case(B=2, Hq=8, Hk=2, D=64, lens=(40, 40), kind="fp8", seed=3)
    kc, vc = kw["k_cache"][:, :, :40].contiguous(), kw["v_cache"][:, :, :40].contiguous()
    got = ba.reference(kw["q"], kc, vc, kw["k_scale"], kw["v_scale"], rows=(0, 1))
    for b in (0, 1):
        torch.testing.assert_close(got[b], ref[b], rtol=1e-5, atol=1e-6)
