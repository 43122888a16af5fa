"""Decode attention over an NVFP4 KV cache (fp8lab/kernels/attention_nvfp4kv.*).

CPU: the cache quantizer and decoder are fp8lab.scaling's NVFP4 (checked against a hand decode), the float64
reference against an independent softmax, the paged layout, argument checks before any CUDA call.
GPU: the kernel against the float64 reference on the values scaling decodes, output poisoned (NaN) first:
contiguous and paged (shuffled pages, poisoned unused slots), odd lengths, GQA groups 1..16, D = 64 / 128,
per-tensor and per-head global scales, every split path, every compiled configuration, every E2M1 code with
E4M3 block scales over their whole range (subnormal scale codes included).
"""
import math
import zlib

import pytest
import torch

from fp8lab import formats, scaling
from fp8lab.kernels import attention_fp8kv as att
from fp8lab.kernels import attention_nvfp4kv as nv
from fp8lab.kernels import cuda_available, tolerances


def GPU(test):
    return pytest.mark.gpu(pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device (run on the GPU machine)")(test))


L_MAX = 4096
TOL = tolerances.attention("nvfp4", L_MAX)


def assert_close(out, ref, vmax, what=""):
    TOL.check(out, ref.double(), vmax, what)


def make_kv(B, Hk, L, D, dist, gen):
    k = torch.randn(B, Hk, L, D, generator=gen)
    v = torch.randn(B, Hk, L, D, generator=gen)
    if dist == "outlier":
        for ch in att.OUTLIER_CHANNELS:
            k[..., ch % D] *= 20.0
    elif dist == "wide":  # many binades: small blocks get E4M3-subnormal block scales
        k = k * torch.exp(2.0 * torch.randn(B, Hk, L, D, generator=gen))
        v = v * torch.exp(2.0 * torch.randn(B, Hk, L, D, generator=gen))
    return k, v


def poison_tail(c: nv.NVFP4Cache, lens) -> nv.NVFP4Cache:
    """Slots past each sequence's end: 0x77 nibbles (6.0) and the E4M3 NaN scale code: a kernel that reads them shows it."""
    p, s = c.packed.clone(), c.scales.clone()
    for b, n in enumerate(lens):
        p[b, :, n:] = 0x77
        s[b, :, n:] = formats.E4M3.nan_code
    return nv.NVFP4Cache(p, s, c.global_scale)


def case(B=3, Hq=8, Hk=2, D=128, lens=(1, 37, 300), dist="normal", per_head=False, layout="contig", page=16, seed=0,
         device=None):
    """Inputs drawn on the CPU; quantized (and decoded for the reference) by fp8lab.scaling on `device` -- the GPU in
    GPU tests: scaling is bit-exact there and much faster; the float64 attention itself runs on the CPU."""
    device = device or ("cuda" if cuda_available() else "cpu")
    gen = torch.Generator().manual_seed(seed)
    L = max(lens) + 5
    q = torch.randn(B, Hq, D, generator=gen).to(torch.bfloat16)
    k, v = make_kv(B, Hk, L, D, dist, gen)
    kc = nv.quantize_kv_nvfp4(k.to(device), "head" if per_head else "tensor")
    vc = nv.quantize_kv_nvfp4(v.to(device), "head" if per_head else "tensor")
    ref = nv.reference_decode_attention_nvfp4(q, kc, vc, list(lens))
    vd = nv.dequantize_nvfp4_cache(vc).cpu()
    vmax = max(vd[b, :, :n].abs().max().item() for b, n in enumerate(lens))
    kc, vc = poison_tail(kc, lens), poison_tail(vc, lens)
    kw = dict(q=q, k_cache=kc, v_cache=vc, seq_lens=list(lens))
    if layout != "contig":
        kp, bt = nv.to_paged_nvfp4(kc, page, lens, extra_pages=3, pad_blocks=2, poison=True, seed=seed + 1)
        vp, bt2 = nv.to_paged_nvfp4(vc, page, lens, extra_pages=3, pad_blocks=2, poison=True, seed=seed + 1)
        assert torch.equal(bt, bt2)
        kw.update(k_cache=kp, v_cache=vp, block_table=bt)
    return kw, ref, vmax


# ---- CPU -------------------------------------------------------------------------------------------------------
def test_quantize_is_scalings_nvfp4_and_decodes_by_hand():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 32, generator=gen)
    c = nv.quantize_kv_nvfp4(x)
    packed, sc, gs = scaling.quantize_nvfp4(x)
    assert torch.equal(c.packed, packed) and torch.equal(c.scales, sc) and torch.equal(c.global_scale, gs.float().reshape(()))
    # by hand: nibble table x E4M3 scale x global
    codes = torch.stack([c.packed & 0xF, c.packed >> 4], -1).reshape(2, 3, 5, 32)
    want = formats.E2M1.table()[codes.long()] * formats.E4M3.table()[c.scales.long()].repeat_interleave(16, -1) * c.global_scale
    torch.testing.assert_close(nv.dequantize_nvfp4_cache(c), want, rtol=0, atol=0)
    assert (nv.dequantize_nvfp4_cache(c) - x).abs().max() < 0.6 * x.abs().max()  # 4-bit: coarse but bounded


def test_per_head_global_scales():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 7, 64, generator=gen) * torch.tensor([1.0, 100.0, 0.01]).reshape(1, 3, 1, 1)
    c = nv.quantize_kv_nvfp4(x, "head")
    assert c.global_scale.shape == (3,)
    for h in range(3):
        _, _, gs = scaling.quantize_nvfp4(x[:, h])
        assert float(c.global_scale[h]) == float(gs)
    d = nv.dequantize_nvfp4_cache(c)
    for h in range(3):  # each head's error scales with its own magnitude
        assert (d[:, h] - x[:, h]).abs().max() <= 0.6 * x[:, h].abs().max()


def test_docstring_example():
    c = nv.NVFP4Cache(torch.full((1, 1, 1, 8), 0x22, dtype=torch.uint8), torch.full((1, 1, 1, 1), 0x38, dtype=torch.uint8),
                      torch.tensor(0.5))
    assert torch.equal(nv.dequantize_nvfp4_cache(c), torch.full((1, 1, 1, 16), 0.5))


@pytest.mark.parametrize("G", [1, 4])
def test_reference_matches_float64_sdpa(G):
    gen = torch.Generator().manual_seed(2)
    B, Hk, L, D = 3, 2, 40, 64
    q = torch.randn(B, Hk * G, D, generator=gen).to(torch.bfloat16)
    k, v = make_kv(B, Hk, L, D, "outlier", gen)
    kc, vc = nv.quantize_kv_nvfp4(k), nv.quantize_kv_nvfp4(v, "head")
    lens = [1, 17, 40]
    ref = nv.reference_decode_attention_nvfp4(q, kc, vc, lens)
    assert ref.dtype == torch.float64
    kd, vd = nv.dequantize_nvfp4_cache(kc).double(), nv.dequantize_nvfp4_cache(vc).double()
    for b, n in enumerate(lens):
        o = torch.nn.functional.scaled_dot_product_attention(q[b].double()[None, :, None], kd[b:b + 1, :, :n],
                                                             vd[b:b + 1, :, :n], enable_gqa=True)[0, :, 0]
        torch.testing.assert_close(ref[b], o, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("page", [16, 64])
def test_paged_roundtrip(page):
    gen = torch.Generator().manual_seed(3)
    lens = [1, 16, 65, 150]
    c = nv.quantize_kv_nvfp4(torch.randn(4, 2, 150, 128, generator=gen))
    pc, bt = nv.to_paged_nvfp4(c, page, lens, extra_pages=2, pad_blocks=1, poison=True, seed=5)
    assert pc.packed.shape[2] == page and (bt[:, -1] == -1).all()
    d, pd = nv.dequantize_nvfp4_cache(c), nv.dequantize_nvfp4_cache(pc)
    g = att.gather_pages(pd, bt, lens)
    for b, n in enumerate(lens):
        assert torch.equal(g[b, :, :n], d[b, :, :n])
    q = torch.randn(4, 4, 128, generator=gen).to(torch.bfloat16)
    a = nv.reference_decode_attention_nvfp4(q, c, c, lens)
    p = nv.reference_decode_attention_nvfp4(q, pc, pc, lens, block_table=bt)
    assert torch.isfinite(p).all()
    torch.testing.assert_close(a, p, rtol=0, atol=0)


def _good(**over):
    B, Hq, Hk, L, D = 2, 8, 2, 32, 128
    c = nv.NVFP4Cache(torch.zeros(B, Hk, L, D // 2, dtype=torch.uint8), torch.full((B, Hk, L, D // 16), 0x38, dtype=torch.uint8),
                      torch.tensor(1.0))
    kw = dict(q=torch.zeros(B, Hq, D, dtype=torch.bfloat16), k_cache=c, v_cache=c, seq_lens=[3, 32])
    kw.update(over)
    return kw


def _cache(shape_p, shape_s, gs=1.0, dtype=torch.uint8):
    return nv.NVFP4Cache(torch.zeros(shape_p, dtype=dtype), torch.zeros(shape_s, dtype=torch.uint8), torch.as_tensor(gs))


BAD = [
    ("q float32", dict(q=torch.zeros(2, 8, 128)), "bf16"),
    ("head_dim 96", dict(q=torch.zeros(2, 8, 96, dtype=torch.bfloat16)), "head_dim must be one of"),
    ("not an NVFP4Cache", dict(k_cache=torch.zeros(2, 2, 32, 64, dtype=torch.uint8)), "must be an NVFP4Cache"),
    ("scales of the wrong width", dict(k_cache=_cache((2, 2, 32, 64), (2, 2, 32, 4))), "head_dim 128 needs"),
    ("packed int8", dict(k_cache=_cache((2, 2, 32, 64), (2, 2, 32, 8), dtype=torch.int8)), "uint8"),
    ("k and v differ", dict(v_cache=_cache((2, 2, 16, 64), (2, 2, 16, 8))), "differ"),
    ("global scale 0", dict(v_cache=_cache((2, 2, 32, 64), (2, 2, 32, 8), gs=0.0)), "finite and > 0"),
    ("global scale of 3 heads", dict(k_cache=_cache((2, 2, 32, 64), (2, 2, 32, 8), gs=[1.0, 1.0, 1.0])), "per KV head"),
    ("Hq not a multiple", dict(q=torch.zeros(2, 7, 128, dtype=torch.bfloat16)), "multiple of n_kv_heads"),
    ("seq_len 0", dict(seq_lens=[0, 4]), r"seq_lens\[0\] = 0"),
    ("seq_len > L", dict(seq_lens=[3, 33]), r"seq_lens\[1\] = 33"),
    ("paged, page 8", dict(k_cache=_cache((6, 2, 8, 64), (6, 2, 8, 8)), v_cache=_cache((6, 2, 8, 64), (6, 2, 8, 8)),
                           block_table=torch.zeros(2, 4, dtype=torch.int32)), "multiple of 16"),
    ("block table outside the pool", dict(k_cache=_cache((3, 2, 16, 64), (3, 2, 16, 8)), v_cache=_cache((3, 2, 16, 64), (3, 2, 16, 8)),
                                          block_table=torch.tensor([[0, -1], [1, 3]], dtype=torch.int32), seq_lens=[3, 32]),
     "outside the pool"),
    ("unknown config", dict(config=(3, 3, 3, 3)), "is not compiled"),
    ("unknown version", dict(version=1), "version must be one of"),
    ("a version-3 config for version 2", dict(version=2, config=(6, 1, 4)), r"config must be a tuple \(NSUB, NS, ROT, MINB\)"),
]


@pytest.mark.parametrize("name,over,msg", BAD, ids=[b[0] for b in BAD])
def test_bad_arguments_raise_before_cuda(name, over, msg):
    kw = _good(**over)
    with pytest.raises(ValueError, match=msg or "runs on CUDA tensors"):  # a CPU q: the CUDA check comes after all others
        nv.decode_attention_nvfp4(**kw)


def test_config_lists():
    for key, cfg in nv.DEFAULTS.items():
        assert key + cfg in nv.KERNELS
    for f, D, g, nsub, ns, rot, minb in nv.KERNELS:
        assert f == "nvfp4" and att.v2_smem(f, D, nsub, ns) <= 227 * 1024
    assert nv.BYTES_PER_ELEMENT * 128 == 64 + 8  # 64 bytes of nibbles + 8 scale bytes per 128 dims (K or V)


def test_quantize_rejects_bad_input():
    with pytest.raises(ValueError, match="multiple of 16"):
        nv.quantize_kv_nvfp4(torch.zeros(1, 1, 4, 24))
    with pytest.raises(ValueError, match="granularity"):
        nv.quantize_kv_nvfp4(torch.zeros(1, 1, 4, 32), "token")


# ---- GPU ---------------------------------------------------------------------------------------------------------
def run_kernel(kw, num_splits=None, config=None, version=None, merge=None):
    if version == 3 and not att.v3_available():
        pytest.skip("version 3 needs the bulk copy engine (sm_90 and later)")
    dev = {k: (v.to("cuda") if isinstance(v, (torch.Tensor, nv.NVFP4Cache)) else v) for k, v in kw.items()}
    out = torch.full(kw["q"].shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    nv.decode_attention_nvfp4(**dev, num_splits=num_splits, config=config, out=out, version=version, merge=merge)
    torch.cuda.synchronize()
    return out.cpu()


@GPU
@pytest.mark.parametrize("version", nv.VERSIONS)
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("layout,page", [("contig", 0), ("paged", 16), ("paged", 64)], ids=["contig", "page16", "page64"])
@pytest.mark.parametrize("dist", ["normal", "outlier", "wide"])
@pytest.mark.parametrize("per_head", [False, True], ids=["gtensor", "ghead"])
def test_kernel_matches_reference(D, layout, page, dist, per_head, version):
    kw, ref, vmax = case(B=5, Hq=8, Hk=2, D=D, lens=(1, 13, 65, 333, 1001), dist=dist, per_head=per_head, layout=layout,
                         page=page or 16, seed=zlib.crc32(repr((D, layout, page, dist, per_head)).encode()) % 1000)
    assert_close(run_kernel(kw, version=version), ref, vmax, f"v{version} D={D} {layout}{page} {dist} per_head={per_head}")


@GPU
@pytest.mark.parametrize("version", nv.VERSIONS)
@pytest.mark.parametrize("num_splits", [1, 2, 7, 1000])
def test_every_split_count(num_splits, version):
    kw, ref, vmax = case(B=4, Hq=16, Hk=4, D=128, lens=(1, 16, 17, 2049), seed=num_splits)
    assert_close(run_kernel(kw, num_splits, version=version), ref, vmax, f"v{version} S={num_splits}")


@GPU
@pytest.mark.parametrize("version", nv.VERSIONS)
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("Hq,Hk", [(4, 4), (8, 4), (32, 8), (64, 8), (80, 8), (128, 8)],
                         ids=["G1", "G2", "G4", "G8", "G10", "G16"])
def test_group_sizes(Hq, Hk, D, version):
    kw, ref, vmax = case(B=2, Hq=Hq, Hk=Hk, D=D, lens=(100, 333), dist="outlier", layout="paged", page=16, seed=Hq + D)
    assert_close(run_kernel(kw, version=version), ref, vmax, f"v{version} Hq={Hq} Hk={Hk} D={D}")


V3_CONFIGS = sorted(k for k in att.V3_KERNELS if k[0] == "nvfp4")


@GPU
@pytest.mark.parametrize("cfg", V3_CONFIGS, ids=["_".join(map(str, c)) for c in V3_CONFIGS])
def test_every_compiled_v3_config(cfg):
    """Version 3's NVFP4 instantiations: pages of 16 (whole tiles: the scale rows by the copy engine), and a contiguous
    cache of an odd length, so that some tiles' scale rows start 8 bytes off a 16-byte boundary (the lanes copy those)
    and the last tiles are partial (zeros past the end, NaN codes beyond in the cache). Both merges of the splits: in
    the kernel and by the reduce kernel."""
    _, D, g, *rest = cfg
    Hq, Hk = (24, 2) if g == "g16" else (8, 2)
    for layout, lens in (("paged", (1, 31, 999, 1500)), ("contig", (7, 499, 1000, 1000))):
        kw, ref, vmax = case(B=4, Hq=Hq, Hk=Hk, D=D, lens=lens, dist="outlier", layout=layout, page=16,
                             seed=zlib.crc32(repr((cfg, layout)).encode()) % 1000)
        for S in (None, 1, 37):
            for merge in (True, False):
                assert_close(run_kernel(kw, S, config=tuple(rest), version=3, merge=merge), ref, vmax,
                             f"{cfg} {layout} S={S} merge={merge}")


CONFIGS = sorted(nv.KERNELS)


@GPU
@pytest.mark.parametrize("cfg", CONFIGS, ids=["_".join(map(str, c)) for c in CONFIGS])
def test_every_compiled_config(cfg):
    _, D, g, *rest = cfg
    Hq, Hk = (24, 2) if g == "g16" else (8, 2)
    kw, ref, vmax = case(B=4, Hq=Hq, Hk=Hk, D=D, lens=(1, 31, 999, 1500), dist="outlier", layout="paged", page=16,
                         seed=zlib.crc32(repr(cfg).encode()) % 1000)
    for S in (None, 1, 37):
        assert_close(run_kernel(kw, S, config=tuple(rest), version=2), ref, vmax, f"{cfg} S={S}")


@GPU
@pytest.mark.parametrize("version", nv.VERSIONS)
@pytest.mark.parametrize("D", [64, 128])
def test_every_e2m1_code_and_scale_code(D, version):
    """Nibbles uniform over all 16 codes, block-scale codes over every finite E4M3 code 0x00..0x7E (zero, the
    subnormals, 448): the widening (e2m1 * e4m3 * 2**-8 in bf16) must be exact for all of them."""
    gen = torch.Generator().manual_seed(D)
    B, Hk, L = 2, 2, 509
    packed = torch.randint(0, 256, (2, B, Hk, L, D // 2), generator=gen).to(torch.uint8)
    scales = torch.randint(0, 0x7F, (2, B, Hk, L, D // 16), generator=gen).to(torch.uint8)
    kc = nv.NVFP4Cache(packed[0], scales[0], torch.tensor(1e-3))
    vc = nv.NVFP4Cache(packed[1], scales[1], torch.tensor([0.5, 2.0]))
    q = (0.05 * torch.randn(B, 4 * Hk, D, generator=gen)).to(torch.bfloat16)
    lens = [L, 301]
    ref = nv.reference_decode_attention_nvfp4(q, kc, vc, lens)
    vmax = nv.dequantize_nvfp4_cache(vc).abs().max().item()
    assert_close(run_kernel(dict(q=q, k_cache=kc, v_cache=vc, seq_lens=lens), version=version), ref, vmax,
                 f"v{version} all codes D={D}")


@GPU
def test_agrees_with_the_bf16_kernel_on_the_same_values():
    """NVFP4 values times a power-of-two global are exact in bf16: the NVFP4 kernel and the bf16-cache kernel see the
    same K and V and must agree within the bf16 tolerance of the reference."""
    gen = torch.Generator().manual_seed(11)
    B, Hq, Hk, L, D = 3, 32, 8, 900, 128
    k, v = make_kv(B, Hk, L, D, "outlier", gen)
    kc, vc = nv.quantize_kv_nvfp4(k.cuda()), nv.quantize_kv_nvfp4(v.cuda())
    kc = nv.NVFP4Cache(kc.packed, kc.scales, torch.tensor(2.0**-3))
    vc = nv.NVFP4Cache(vc.packed, vc.scales, torch.tensor(2.0**-5))
    kb, vb = nv.dequantize_nvfp4_cache(kc).to(torch.bfloat16), nv.dequantize_nvfp4_cache(vc).to(torch.bfloat16)
    assert torch.equal(kb.float(), nv.dequantize_nvfp4_cache(kc))
    kb, vb = kb.cpu(), vb.cpu()
    q = torch.randn(B, Hq, D, generator=gen).to(torch.bfloat16)
    lens = [900, 1, 457]
    ref = nv.reference_decode_attention_nvfp4(q, kc, vc, lens)
    vmax = vb.float().abs().max().item()
    assert_close(run_kernel(dict(q=q, k_cache=kc, v_cache=vc, seq_lens=lens)), ref, vmax, "nvfp4 kernel")
    out = torch.full((B, Hq, D), float("nan"), dtype=torch.bfloat16, device="cuda")
    att.decode_attention(q.cuda(), kb.cuda(), vb.cuda(), lens, out=out)
    assert_close(out.cpu(), ref, vmax, "bf16 kernel on the same values")


def test_bench_reference_decodes_nvfp4_like_scaling():
    """bench_attention's GPU-side NVFP4 decode (formats' tables) equals scaling's decode, and its float32 SDPA check
    agrees with the float64 reference."""
    from fp8lab.kernels import bench_attention as ba

    gen = torch.Generator().manual_seed(6)
    B, Hq, Hk, L, D = 2, 8, 2, 50, 64
    k, v = make_kv(B, Hk, L, D, "outlier", gen)
    kc, vc = nv.quantize_kv_nvfp4(k), nv.quantize_kv_nvfp4(v, "head")
    for c in (kc, vc):
        full = nv.dequantize_nvfp4_cache(c)
        for b in range(B):
            torch.testing.assert_close(ba._nvfp4_values(c, b), full[b], rtol=0, atol=0)
    q = torch.randn(B, Hq, D, generator=gen).to(torch.bfloat16)
    ref = nv.reference_decode_attention_nvfp4(q, kc, vc)
    got = ba.reference(q, kc, vc, rows=(0, 1), nvfp4=True)
    for b in (0, 1):
        torch.testing.assert_close(got[b].double(), ref[b], rtol=1e-4, atol=1e-5)
    assert ba.errors({b: ref[b].float() for b in (0, 1)}, got)["valid"]
