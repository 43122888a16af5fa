"""fp8lab.scaling: every granularity against a slow, obviously-correct loop; edge-case tables; bad input."""
import math

import numpy as np
import pytest
import torch

from fp8lab import formats
from fp8lab.formats import E2M1, E4M3
from fp8lab.metrics import sqnr_db
from fp8lab.scaling import (MX_RULES, NVFP4_RULES, DelayedScaling, QuantSpec, dequantize, fake_quant,
                            mx_scale_exponent, pack_nibbles, quantize, unpack_nibbles)


def rand(*shape, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * scale


# ---- slow references: loops over groups, written from the definitions ------------------------------
def ref_fp8_groups(x, fmt, groups):
    """groups: list of index tuples (slices) sharing one scale."""
    out = torch.empty_like(x)
    for sl in groups:
        v = x[sl]
        amax = v.abs().max() if v.numel() else torch.tensor(0.0)
        s = amax / fmt.max
        s = s if s > 0 else torch.tensor(1.0)
        out[sl] = fmt.round(v / s) * s
    return out


def slices_group(M, K, G):
    return [(i, slice(k, min(k + G, K))) for i in range(M) for k in range(0, K, G)]


def slices_block(M, K, B0, B1):
    return [(slice(i, min(i + B0, M)), slice(k, min(k + B1, K))) for i in range(0, M, B0) for k in range(0, K, B1)]


@pytest.mark.parametrize("M,K", [(1, 1), (3, 130), (257, 255), (128, 256)])
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_granularities_match_loops(M, K, fmt):
    f = formats.get(fmt)
    x = rand(M, K, seed=M * K)
    cases = {
        "tensor": [(slice(None), slice(None))],
        "channel": [(i, slice(None)) for i in range(M)],
        "token": [(i, slice(None)) for i in range(M)],
        "group": slices_group(M, K, 128),
        "block": slices_block(M, K, 128, 128),
    }
    for gran, groups in cases.items():
        spec = QuantSpec(fmt, gran, axis=0)
        got = dequantize(quantize(x, spec))
        assert torch.equal(got, ref_fp8_groups(x, f, groups)), gran
        assert torch.equal(fake_quant(x, spec), got), gran


def test_channel_any_axis():
    x = rand(4, 5, 6)
    for ax in (0, 1, 2, -1):
        q = quantize(x, QuantSpec("e4m3", "channel", axis=ax))
        assert q.scale.shape == (x.shape[ax],)
        dims = [d for d in range(3) if d != ax % 3]
        assert torch.allclose(q.scale, x.abs().amax(dim=dims) / 448)


def ref_nvfp4(x):
    """NVFP4 from the definition, one block at a time."""
    gs = x.abs().max() / (448.0 * 6.0)
    gs = gs if gs > 0 else torch.tensor(1.0)
    out = torch.empty_like(x)
    codes_sc = []
    for i in range(x.shape[0]):
        for k in range(0, x.shape[1], 16):
            v = x[i, k:k + 16]
            bs = v.abs().max() / 6.0 / gs
            sc = E4M3.encode(bs.reshape(1))
            s = E4M3.decode(sc)[0] * gs
            c = E2M1.encode(v / s) if s > 0 else torch.zeros(v.shape, dtype=torch.uint8)
            out[i, k:k + 16] = E2M1.decode(c) * E4M3.decode(sc)[0] * gs
            codes_sc.append(int(sc))
    return out, codes_sc


@pytest.mark.parametrize("M,K", [(2, 16), (3, 40), (5, 257)])
def test_nvfp4_matches_loop(M, K):
    x = rand(M, K, seed=K)
    q = quantize(x, QuantSpec("e2m1", "nvfp4"))
    ref, sc = ref_nvfp4(x)
    assert torch.equal(dequantize(q), ref)
    assert q.scale_codes.flatten().tolist() == sc
    assert q.scale_codes.shape == (M, math.ceil(K / 16)) and q.global_scale.dim() == 0


def mx_exponent_reference(amax: float, f, rule: str) -> int:
    """The MX scale exponent from each rule's written definition, in Python float64 (independent of scaling.py)."""
    if amax == 0:
        return -127
    m, ex = math.frexp(amax)                      # amax = m * 2**ex, 0.5 <= m < 1
    if rule == "floor":                           # OCP: floor(log2 amax) - emax
        e = ex - 1 - f.emax
    elif rule == "ceil":                          # torchao CEIL: ceil(log2 amax) - emax
        e = (ex - 1 if m == 0.5 else ex) - f.emax
    elif rule == "even":                          # torchao EVEN: amax rounded (half up) to man_bits, then floor
        e = ex - 1 + (2 * m >= 2 - 2.0 ** -(f.man_bits + 1)) - f.emax
    else:                                         # rceil: ceil(log2(fp32(amax / max)))
        d = float(np.float32(amax) / np.float32(f.max))
        md, ed = math.frexp(d)
        e = ed - 1 if md == 0.5 else ed
    return max(-127, min(e, 127 - f.emax))


@pytest.mark.parametrize("rule", MX_RULES)
@pytest.mark.parametrize("fmt", ["e2m1", "e4m3", "e5m2"])
def test_mx_matches_rule_definitions(rule, fmt):
    f = formats.get(fmt)
    x = rand(4, 70, seed=7, scale=3.0)
    x[3, 32:64] = f.max * 2.0 ** torch.arange(-16, 16).float()   # amax exactly max * 2**k: the RCEIL boundary
    x[2, :32] = 1.75 * 2.0 ** torch.arange(32).float() / 2**20      # mantissa 1.75: the EVEN carry
    q = quantize(x, QuantSpec(fmt, "mx", scale_rule=rule))
    d = dequantize(q)
    for i in range(4):
        for b, k in enumerate(range(0, 70, 32)):
            v = x[i, k:k + 32]
            e = mx_exponent_reference(float(v.abs().max()), f, rule)
            assert int(q.scale_codes[i, b]) == e + 127, (i, b)
            assert torch.equal(d[i, k:k + 32], f.round(v / 2.0 ** e) * 2.0 ** e)
    amax = torch.nn.functional.pad(x.abs(), (0, 26)).reshape(4, 3, 32).amax(-1)
    if rule in ("ceil", "rceil"):  # the round-up rules keep every block under fmt.max (up to fp32 rounding)
        assert bool((amax / q.scale <= f.max * (1 + 2**-23)).all())
    if rule == "floor":            # the OCP rule leaves amax / scale in [2**emax, 2**(emax+1)): above max -> saturates
        r = amax / q.scale
        assert bool(((r >= 2.0 ** f.emax) & (r < 2.0 ** (f.emax + 1))).all())


def test_mx_scale_exponent_docstring():
    a = torch.tensor([1.0, 500.0, 0.0])
    assert mx_scale_exponent(a, "e4m3").tolist() == [-8, 0, -127]
    assert mx_scale_exponent(a, "e4m3", "rceil").tolist() == [-8, 1, -127]
    with pytest.raises(ValueError, match="valid: floor, rceil"):
        mx_scale_exponent(a, "e4m3", "round")


# Edge cases (each row commented): (spec, input, what must hold)
def _all_zero_finite(q):
    return bool(torch.isfinite(q.scale).all()) and bool((dequantize(q) == 0).all())


EDGE = [
    (QuantSpec("e4m3", "tensor"), torch.zeros(4, 4), _all_zero_finite),     # all zeros: finite scale 1.0, zeros back
    (QuantSpec("e4m3", "group"), torch.zeros(2, 200), _all_zero_finite),    # all-zero groups, partial last group
    (QuantSpec("e4m3", "block"), torch.zeros(3, 5), _all_zero_finite),      # blocks larger than the tensor
    (QuantSpec("e2m1", "nvfp4"), torch.zeros(2, 17), _all_zero_finite),     # NVFP4 of zeros: global scale 1.0
    (QuantSpec("e2m1", "mx"), torch.zeros(1, 33), lambda q: int(q.scale_codes.max()) == 0 and _all_zero_finite(q)),  # E8M0 2**-127
    (QuantSpec("e4m3", "tensor"), torch.full((8,), 1e-40),                  # denormal amax: scale underflows? still finite
     lambda q: bool(torch.isfinite(dequantize(q)).all())),
    (QuantSpec("e4m3", "tensor"), torch.tensor([448.0 * 1e6, 1.0]),         # huge amax: the small value flushes, big one exact
     lambda q: dequantize(q)[0] == 448.0 * 1e6 and dequantize(q)[1] == 0),
    (QuantSpec("e4m3", "group", group_size=3), torch.arange(7.0).reshape(1, 7),  # odd group size, 3 groups (3+3+1)
     lambda q: q.scale.shape == (1, 3)),
    (QuantSpec("e2m1", "nvfp4"), torch.tensor([[6.0] + [0.0] * 15]),        # the block max comes back to within
     lambda q: abs(float(dequantize(q)[0, 0]) - 6.0) <= 6.0 * 2**-23),        # fp32 rounding of 6/(448*6)*448
]


@pytest.mark.parametrize("spec,x,check", EDGE)
def test_edge_cases(spec, x, check):
    assert check(quantize(x, spec))


@pytest.mark.parametrize("spec", [QuantSpec("e4m3", g) for g in ("tensor", "token", "group", "block", "none")]
                         + [QuantSpec("e2m1", "nvfp4"), QuantSpec("e2m1", "mx"), QuantSpec("int8", "channel")])
def test_empty_tensors(spec):
    x = torch.empty(0, 256)
    q = quantize(x, spec)
    assert q.codes.shape == (0, 256) and dequantize(q).shape == (0, 256)
    assert fake_quant(x, spec).shape == (0, 256)


@pytest.mark.parametrize("spec", [QuantSpec("e4m3", "tensor"), QuantSpec("e2m1", "nvfp4"), QuantSpec("e4m3", "group")])
def test_nonfinite_raise_by_default(spec):
    x = rand(2, 32)
    x[0, 3] = float("nan")
    x[1, 0] = float("inf")
    with pytest.raises(ValueError, match="1 NaN and 1 Inf"):
        quantize(x, spec)


def test_nonfinite_propagate_policy():
    x = rand(2, 32)
    x[0, 3], x[1, 0] = float("nan"), float("inf")
    q = quantize(x, QuantSpec("e4m3", "tensor", nonfinite="propagate"))
    d = dequantize(q)
    assert math.isnan(d[0, 3]) and d[1, 0] == 448 * q.scale                   # NaN kept, Inf saturated
    assert torch.isclose(q.scale, x[torch.isfinite(x)].abs().max() / 448)    # amax ignores them
    qn = quantize(x, QuantSpec("e2m1", "nvfp4", nonfinite="propagate"))
    dn = dequantize(qn)
    assert bool(torch.isnan(dn[0, :16]).all()) and bool(torch.isfinite(dn[0, 16:]).all())  # the NaN's block only
    assert int(qn.scale_codes[0, 0]) == E4M3.nan_code
    qm = quantize(x, QuantSpec("e2m1", "mx", nonfinite="propagate"))
    assert int(qm.scale_codes[0, 0]) == 0xFF and bool(torch.isnan(dequantize(qm)[0]).all())


BAD = [
    (lambda: quantize(torch.arange(4), QuantSpec()), TypeError, "floating"),                # integer tensor
    (lambda: quantize([1.0, 2.0], QuantSpec()), TypeError, "torch.Tensor"),                # not a tensor
    (lambda: quantize(torch.ones(4), QuantSpec("e4m3", "block")), ValueError, "at least 2"),  # 1-D into 2-D blocks
    (lambda: quantize(torch.ones(4), QuantSpec("e4m3", "channel", axis=3)), ValueError, "axis"),
    (lambda: QuantSpec("e4m3", "nvfp4"), ValueError, "e2m1"),                             # NVFP4 of E4M3 elements
    (lambda: QuantSpec("e4m3", "rows"), ValueError, "valid: none, tensor"),               # unknown granularity
    (lambda: QuantSpec("fp6"), ValueError, "valid: e4m3"),                                # unknown format
    (lambda: QuantSpec("e4m3", "group", group_size=0), ValueError, "positive"),
    (lambda: pack_nibbles(torch.tensor([16], dtype=torch.uint8)), ValueError, "4-bit"),
    (lambda: pack_nibbles(torch.tensor([1.0])), TypeError, "uint8"),
]


@pytest.mark.parametrize("call,exc,msg", BAD)
def test_bad_input(call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


def test_dtypes_in_and_out():
    x = rand(4, 256).to(torch.bfloat16)
    for spec in (QuantSpec("e4m3", "group"), QuantSpec("e2m1", "nvfp4")):
        y = fake_quant(x, spec)
        assert y.dtype == torch.bfloat16 and y.shape == x.shape
        assert torch.equal(quantize(x, spec).codes, quantize(x.float(), spec).codes)


def test_pack_unpack_nibbles():
    c = torch.tensor([0x1, 0x7, 0xA], dtype=torch.uint8)
    assert pack_nibbles(c).tolist() == [0x71, 0x0A]                    # element 2i in the low nibble
    codes = torch.randint(0, 16, (5, 33), dtype=torch.uint8)
    assert torch.equal(unpack_nibbles(pack_nibbles(codes), 33), codes)


def test_sqnr_ordering_matches_format_precision():
    """More mantissa bits and finer scales -> higher SQNR (torchao uses dB thresholds the same way)."""
    x = rand(64, 512, seed=3)
    s = {name: sqnr_db(x, fake_quant(x, spec)) for name, spec in {
        "int8-channel": QuantSpec("int8", "channel"), "e4m3-group": QuantSpec("e4m3", "group"),
        "e5m2-group": QuantSpec("e5m2", "group"), "nvfp4": QuantSpec("e2m1", "nvfp4"),
        "mxfp4": QuantSpec("e2m1", "mx")}.items()}
    assert s["int8-channel"] > s["e4m3-group"] > s["e5m2-group"] > s["nvfp4"] > s["mxfp4"]
    assert 29 < s["e4m3-group"] < 33 and s["nvfp4"] > 18


def test_delayed_scaling_uses_history():
    ds = DelayedScaling("e4m3", history_len=2)
    q1 = ds.quantize(torch.ones(4))                         # first call: own amax
    assert torch.isclose(q1.scale, torch.tensor(1 / 448))
    q2 = ds.quantize(torch.full((4,), 10.0))                # stale scale from history: 10 saturates to 448*scale = 1
    assert torch.equal(dequantize(q2), torch.ones(4))
    q3 = ds.quantize(torch.ones(4))                         # history now holds 10: scale 10/448
    assert torch.isclose(q3.scale, torch.tensor(10 / 448))
    ds.quantize(torch.ones(4))
    ds.quantize(torch.ones(4))                              # 10 fell out of the 2-long history
    assert torch.isclose(ds.scale, torch.tensor(1 / 448))


_DISTS = {"normal": lambda g: torch.randn(3, 50, 256, generator=g),
          "tiny": lambda g: torch.randn(3, 50, 256, generator=g) * 3e-4,          # under E4M3's floor
          "outliers": lambda g: torch.randn(3, 50, 256, generator=g) * torch.where(
              torch.rand(3, 50, 256, generator=g) < 0.01, 300.0, 1.0),
          "zeros_rows": lambda g: torch.randn(3, 50, 256, generator=g) * (torch.arange(50) % 7 != 0)[None, :, None]}


@pytest.mark.parametrize("dist", list(_DISTS))
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("gran,kw", [("none", {}), ("tensor", {}), ("token", {}), ("group", {}),
                                     ("group", {"group_size": 100}), ("channel", {"axis": 0}),
                                     ("channel", {"axis": -1})])
def test_fake_quant_fast_path_equals_quantize_dequantize(dist, fmt, gran, kw):
    """The fast path (round(x / s) * s, no codes) against quantize (codes) + dequantize (the value table)."""
    x = _DISTS[dist](torch.Generator().manual_seed(3))
    spec = QuantSpec(fmt, gran, **kw)
    fast, ref = fake_quant(x, spec), dequantize(quantize(x, spec))
    assert torch.equal(fast, ref)
    assert torch.equal(torch.signbit(fast), torch.signbit(ref))


@pytest.mark.parametrize("gran", ["none", "tensor", "token", "group", "channel"])
def test_fake_quant_fast_path_refuses_nonfinite(gran):
    x = torch.ones(4, 8)
    x[1, 2] = float("nan")
    with pytest.raises(ValueError, match="1 NaN and 0 Inf"):
        fake_quant(x, QuantSpec("e4m3", gran))


def test_delayed_scaling_margin_leaves_headroom():
    """TransformerEngine's margin: scale = amax * 2**margin / fmt.max, so values up to 2**margin x the recorded
    amax still fit (here 3.5 after a step of ones), where margin 0 saturates them to the old amax."""
    for margin, expect in ((0, 1.0), (2, 3.5)):
        ds = DelayedScaling("e4m3", history_len=4, margin=margin)
        q1 = ds.quantize(torch.ones(4))
        assert torch.equal(q1.scale, torch.tensor(2.0 ** margin) / torch.tensor(448.0))
        d = dequantize(ds.quantize(torch.full((4,), 3.5)))            # the stale scale of step 1
        assert torch.equal(d, E4M3.round(torch.full((4,), 3.5) / q1.scale) * q1.scale)
        assert float(d[0]) == pytest.approx(expect, rel=0.07)         # 3.5 -> 384/448*4 = 3.43 with margin 2
    ds = DelayedScaling("e4m3", margin=-1)                            # negative margin: amax / 2 -> top values clip
    d = dequantize(ds.quantize(torch.tensor([1.0, 0.25])))
    assert d.tolist() == [0.5, 0.25]
    assert DelayedScaling("e4m3").quantize(torch.zeros(3)).scale.item() == 1.0


# ---- NVFP4 conventions: each rule against a loop written from its library's definition ------------------
def ref_nvfp4_rule(x, rule):
    gs = x.abs().max() / torch.tensor(2688.0)
    gs = gs if gs > 0 else torch.tensor(1.0)
    codes, scs = torch.zeros(x.shape, dtype=torch.uint8), []
    for i in range(x.shape[0]):
        for k in range(0, x.shape[1], 16):
            v = x[i, k:k + 16]
            bamax = v.abs().max()
            if rule == "modelopt":                            # per_block_amax / (6 * weights_scaling_factor_2)
                bs = bamax / (torch.tensor(6.0) * gs)
                bs = bs if bs != 0 else torch.tensor(1.0)
                bs = bs.clamp(min=2.0 ** -9, max=448.0)       # modelopt 0.47 _cast_per_block_scale_to_fp8
            else:
                bs = bamax / torch.tensor(6.0) / gs
                if rule == "torchao":                         # clamp(min=E4M3_EPS = finfo(e4m3fn).tiny, max=448)
                    bs = bs.clamp(min=2.0 ** -6, max=448.0)
            sc = E4M3.encode(bs.reshape(1))
            sv = E4M3.decode(sc)[0]
            if rule == "torchao":                             # x * ((1 / global) / scale)
                q = v * ((torch.tensor(1.0) / gs) / sv)
            else:
                q = v / (sv * gs) if sv * gs > 0 else torch.zeros_like(v)
            codes[i, k:k + 16] = E2M1.encode(q) if sv * gs > 0 else 0
            scs.append(int(sc))
    return codes, scs, gs


@pytest.mark.parametrize("rule", NVFP4_RULES)
@pytest.mark.parametrize("scale", [1.0, 1e-4, 300.0])
def test_nvfp4_rules_match_loops(rule, scale):
    x = rand(6, 64, seed=11, scale=scale)
    x[1] *= 1e-4                                   # tiny blocks: E4M3 subnormal (lab) vs 2**-6 clamp (torchao)
    x[3, :16] *= 1e-7                              # a block below 2**-10: code 0 (lab) vs 2**-9 clamp (modelopt)
    x[2, :16] = 0                                  # a zero block: code 0 (lab, torchao clamps) vs 1.0 (modelopt)
    q = quantize(x, QuantSpec("e2m1", "nvfp4", scale_rule=rule))
    codes, scs, gs = ref_nvfp4_rule(x, rule)
    assert torch.equal(q.codes, codes) and q.scale_codes.flatten().tolist() == scs and torch.equal(q.global_scale, gs)


def test_nvfp4_rules_differ_where_documented():
    x = rand(4, 64, seed=5)
    x[0, :16] = 0
    x[1] *= 1e-5                                   # block scales ~3e-3: E4M3 subnormals (2**-9 .. 7 * 2**-9)
    x[2, :16] *= 1e-7                              # a block scale below 2**-10: rounds to 0 unless clamped
    q = {r: quantize(x, QuantSpec("e2m1", "nvfp4", scale_rule=r)) for r in NVFP4_RULES}
    assert [int(q[r].scale_codes[2, 0]) for r in NVFP4_RULES] == [0, 0x08, 0x01]   # lab, torchao, modelopt
    assert int(q["lab"].scale_codes[0, 0]) == 0 and int(q["modelopt"].scale_codes[0, 0]) == 0x38
    assert int(q["torchao"].scale_codes[0, 0]) == 0x08               # 2**-6, E4M3's smallest normal
    assert int(q["lab"].scale_codes[1].max()) < 0x08 <= int(q["torchao"].scale_codes[1].min())
    with pytest.raises(ValueError, match="valid: lab, torchao, modelopt"):
        QuantSpec("e2m1", "nvfp4", scale_rule="floor")
    with pytest.raises(ValueError, match="mx' or 'nvfp4' only"):
        QuantSpec("e4m3", "tensor", scale_rule="floor")


# ---- the public helpers kernels and calibration call -------------------------------------------------------
def test_helpers_equal_quantize():
    from fp8lab import scaling as S
    w = rand(200, 300, seed=2) * 0.02
    c, s = S.quantize_weight_channel(w)
    q = quantize(w, QuantSpec("e4m3", "channel", axis=0))
    assert torch.equal(c, q.codes) and torch.equal(s, q.scale) and s.shape == (200,)
    c, s = S.quantize_group(w, 128)
    assert s.shape == (200, 3) and torch.equal(c, quantize(w, QuantSpec("e4m3", "group", group_size=128)).codes)
    c, s = S.quantize_block(w)
    assert s.shape == (2, 3) and torch.equal(s, quantize(w, QuantSpec("e4m3", "block")).scale)
    packed, sc, gs = S.quantize_nvfp4(w)
    qn = quantize(w, QuantSpec("e2m1", "nvfp4"))
    assert torch.equal(packed, pack_nibbles(qn.codes)) and torch.equal(sc, qn.scale_codes) and torch.equal(gs, qn.global_scale)
    assert packed.shape == (200, 150) and sc.shape == (200, 19)
    c, sc = S.quantize_mx(w, "e2m1", "rceil")
    assert sc.shape == (200, 10) and torch.equal(sc, quantize(w, QuantSpec("e2m1", "mx", scale_rule="rceil")).scale_codes)
    kv = rand(2, 4, 9, 16, seed=3)
    for gran, shape in (("tensor", ()), ("head", (4,)), ("token", (2, 4, 9))):
        c, s = S.quantize_kv(kv, gran)
        assert c.shape == kv.shape and s.shape == shape
    assert torch.equal(S.quantize_kv(kv, "token")[1], quantize(kv, QuantSpec("e4m3", "token")).scale)
    with pytest.raises(ValueError, match="valid: tensor, head, token"):
        S.quantize_kv(kv, "channel")
    with pytest.raises(ValueError, match=r"\[B, H, S, D\]"):
        S.quantize_kv(kv[0], "tensor")


def test_nvfp4_static_global_amax():
    from fp8lab import scaling as S
    w = rand(4, 32, seed=9)
    amax = float(w.abs().max())
    p1, s1, g1 = S.quantize_nvfp4(w)
    p2, s2, g2 = S.quantize_nvfp4(w, global_amax=amax)
    assert torch.equal(p1, p2) and torch.equal(s1, s2) and torch.equal(g1, g2)
    _, s3, g3 = S.quantize_nvfp4(w, global_amax=4 * amax)            # a calibrated amax 4x larger: smaller codes
    assert float(g3) == pytest.approx(4 * float(g1)) and int(s3.max()) < int(s1.max())
    for bad in (float("nan"), -1.0, [1.0, 2.0]):
        with pytest.raises(ValueError, match="global_amax"):
            S.quantize_nvfp4(w, global_amax=bad)


def test_scale_from_amax_and_global_scale():
    from fp8lab import scaling as S
    assert S.scale_from_amax(torch.tensor([448.0, 0.0, 1e-45]), "e4m3").tolist() == [1.0, 1.0, 1.0]
    assert torch.equal(S.scale_from_amax(torch.tensor(2.0), "e4m3"), torch.tensor(2.0) / torch.tensor(448.0))
    assert float(S.nvfp4_global_scale(torch.tensor(2688.0))) == 1.0
    assert float(S.nvfp4_global_scale(torch.tensor(0.0))) == 1.0


@pytest.mark.parametrize("fmt", ["int8", "e4m3", "e5m2", "e4m3fnuz"])
def test_amax_at_float32_max_dequantizes_finite(fmt):
    """amax = float32's largest value: amax / fmt.max rounds so that fmt.max * scale overflows for INT8 (a
    hypothesis fuzz example); the scale is then one ulp smaller and the largest code dequantizes to a finite value
    (saturated, within an ulp or so of the input). Other amax keep amax / fmt.max exactly."""
    from fp8lab import scaling as S

    big = torch.finfo(torch.float32).max
    x = torch.tensor([big, -big, 1.0])
    for gran in ("tensor", "channel"):
        d = dequantize(quantize(x.reshape(1, 3), QuantSpec(fmt, gran)))
        assert bool(torch.isfinite(d).all()), (fmt, gran, d)
        assert float(d[0, 0]) >= big * (1 - 2**-20) and float(d[0, 1]) == -float(d[0, 0])
    m = torch.tensor(S._f.get(fmt).max, dtype=torch.float32)
    s = S.scale_from_amax(torch.tensor(big), fmt)
    assert bool(torch.isfinite(s * m)) and s <= torch.tensor(big) / m
    for a in (1.0, 3e38, 3.3e38):   # away from the edge: the rule unchanged
        assert torch.equal(S.scale_from_amax(torch.tensor(a), fmt), torch.tensor(a) / m)


@pytest.mark.parametrize("fmt", ["e4m3fnuz", "e5m2fnuz"])
@pytest.mark.parametrize("gran", ["none", "tensor", "token", "group", "channel"])
def test_fnuz_granularities(fmt, gran):
    x = _DISTS["outliers"](torch.Generator().manual_seed(1))
    spec = QuantSpec(fmt, gran)
    q = quantize(x, spec)
    assert torch.equal(fake_quant(x, spec), dequantize(q))
    assert not bool((q.codes == 0x80).any())                          # no negative zero: 0x80 is the NaN
    if gran != "none":
        assert bool((dequantize(q).abs().amax() <= x.abs().amax()))
