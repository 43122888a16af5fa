"""4-bit KV quantizers: NVFP4 with a frozen global scale equals fp8lab.scaling's NVFP4, the rotated codebook
quantizer round-trips and beats NVFP4 where theory says it should, every method is causal, kept layers are
untouched, and the recipes apply and remove cleanly."""
import math

import pytest
import torch

from fp8lab import formats as F
from fp8lab import kv_quant as kq
from fp8lab import recipes as R
from fp8lab import scaling
from tests.test_recipes import tiny_llama


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _rel(x, y):
    """Mean per-vector relative error ||x - y|| / ||x|| over [.., D] vectors."""
    return float(((x - y).norm(dim=-1) / x.norm(dim=-1)).mean())


def _calibrated(x, groups=(32, 64)):
    cal = kq.KVCalibration(x.shape[-1], groups=groups)
    cal.observe(0, "key", x)
    return cal.fit("test")


# ---- NVFP4 with a frozen global scale -----------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 3, 50, 64), (2, 2, 7, 32), (4, 16)])
def test_nvfp4_kv_equals_scaling_nvfp4_on_the_same_blocks(shape):
    """With amax = the tensor's own amax the frozen quantizer IS fp8lab.scaling's NVFP4, bit for bit."""
    x = torch.randn(*shape, generator=_gen(1)) * torch.logspace(-2, 1, shape[-1])
    ref = scaling.quantize(x, scaling.QuantSpec("e2m1", "nvfp4"))
    got = kq.nvfp4_quantize(x, x.abs().max())
    assert torch.equal(got.codes, ref.codes)
    assert torch.equal(got.scale_codes, ref.scale_codes)
    assert torch.equal(got.global_scale, ref.global_scale)
    assert torch.equal(scaling.dequantize(got), scaling.dequantize(ref))
    assert torch.equal(kq.nvfp4_fake_quant(x, x.abs().max()), scaling.fake_quant(x, scaling.QuantSpec("e2m1", "nvfp4")))


def test_nvfp4_kv_frozen_scale_matches_the_kernel_rule_beyond_the_calibrated_range():
    """Spec, written out the way a kernel with a frozen global g = amax/(6*448) computes it: block scale
    E4M3(bamax/6/g) saturating at 448, elements E2M1(x / (scale*g)) saturating at 6. Values above the
    calibration amax clip at +-amax."""
    amax = torch.tensor(3.0)
    x = torch.randn(3, 8, 64, generator=_gen(2)) * 2
    x[0, 0, :16] *= 10                                  # a block far above the calibrated range
    g = amax / torch.tensor(448.0 * 6.0)
    blocks = x.abs().reshape(3, 8, 4, 16).amax(-1)
    sc = F.E4M3.encode(blocks / torch.tensor(6.0) / g, saturate=True)
    s = (F.E4M3.decode(sc) * g).repeat_interleave(16, -1)
    codes = F.E2M1.encode(x / s, saturate=True)
    got = kq.nvfp4_quantize(x, amax)
    assert torch.equal(got.scale_codes, sc)
    assert torch.equal(got.codes, codes)
    deq = kq.nvfp4_fake_quant(x, amax)
    assert float(deq.abs().max()) <= float(amax) * (1 + 1e-6)          # saturated at the frozen range
    assert math.isclose(float(deq[0, 0, :16].abs().max()), 3.0, rel_tol=1e-6)


def test_nvfp4_kv_rejects_bad_input():
    with pytest.raises(ValueError, match="NaN or Inf"):
        kq.nvfp4_quantize(torch.tensor([[1.0, float("nan")]]), 1.0)
    with pytest.raises(ValueError, match="amax"):
        kq.nvfp4_quantize(torch.ones(2, 16), float("inf"))
    with pytest.raises(ValueError, match="amax"):
        kq.nvfp4_quantize(torch.ones(2, 16), torch.ones(2))


# ---- codebooks --------------------------------------------------------------------------------------------
def test_gaussian_codebook_matches_max_1960():
    """Lloyd–Max levels of N(0, 1) for 16 levels (Max, 'Quantizing for minimum distortion', 1960, table I)."""
    table = [0.1284, 0.3881, 0.6568, 0.9424, 1.2562, 1.6181, 2.0690, 2.7326]
    lv = kq.gaussian_codebook()
    assert torch.allclose(lv[8:], torch.tensor(table, dtype=torch.float64), atol=2e-4)
    assert torch.equal(lv, -lv.flip(0))


def test_lloyd_max_fits_samples():
    assert torch.allclose(kq.lloyd_max(torch.tensor([-1.0, -1, 1, 1] * 10), 2), torch.tensor([-1.0, 1.0], dtype=torch.float64))
    z = torch.randn(200_000, generator=_gen(3))
    assert torch.allclose(kq.lloyd_max(z), kq.gaussian_codebook(), atol=0.03)      # samples of N(0,1) -> Max's levels
    # on Laplace data a fitted codebook has a lower MSE than the Gaussian one (what fitting buys)
    lap = torch.distributions.Laplace(0.0, 1 / math.sqrt(2)).sample((100_000,))
    def mse(levels, v):
        lv = levels.float()
        idx = torch.bucketize(v, (lv[1:] + lv[:-1]) / 2)
        return float((lv[idx] - v).pow(2).mean())
    assert mse(kq.lloyd_max(lap), lap) < 0.93 * mse(kq.gaussian_codebook(), lap)
    with pytest.raises(ValueError, match="at least 16 samples"):
        kq.lloyd_max(torch.randn(5))


# ---- the rotated codebook quantizer ----------------------------------------------------------------------
def test_turbo_round_trip_and_storage():
    x = torch.randn(2, 3, 10, 64, generator=_gen(4))
    q = kq.TurboQuantizer(64, kq.gaussian_codebook(), group=32)
    codes, rms = q.quantize(x)
    assert codes.dtype == torch.uint8 and codes.shape == x.shape and int(codes.max()) <= 15
    assert rms.dtype == torch.float16 and rms.shape == (2, 3, 10, 2)
    assert torch.equal(q.dequantize(codes, rms), q(x))
    assert q.bits_per_element == 4.5
    assert 0.05 < _rel(x, q(x)) < 0.12                  # 16 Lloyd–Max levels: ~9-10 % relative RMS error
    # a zero vector stays zero; bf16 in, bf16 out
    assert torch.equal(q(torch.zeros(1, 64)), torch.zeros(1, 64))
    assert q(x.bfloat16()).dtype == torch.bfloat16


def test_bits_per_element_are_equal_where_claimed():
    assert kq.bits_per_element("nvfp4") == kq.bits_per_element("turbo4") == 4.5
    assert kq.bits_per_element("turbo4-g64", 64) == 4.25
    assert kq.bits_per_element("e4m3-dyn", 64) == 8.5
    with pytest.raises(ValueError, match="valid"):
        kq.bits_per_element("fp3")


@pytest.mark.parametrize("outlier,turbo_wins_by", [(1.0, None), (20.0, 0.05), (50.0, 0.10)])
def test_rotation_beats_nvfp4_on_an_outlier_channel(outlier, turbo_wins_by):
    """Gaussian vectors, one channel scaled by `outlier`. NVFP4's block holding the outlier takes its scale from
    it and rounds its 15 neighbours coarsely; the rotation spreads the outlier over all 64 coordinates and the
    fitted codebook learns the resulting (bimodal) shape. Without an outlier the two are within a few %."""
    x = torch.randn(1, 2, 4096, 64, generator=_gen(5))
    x[..., 5] *= outlier
    params = _calibrated(x[:, :, :2048])                 # fit on the first half, measure on the second
    test = x[:, :, 2048:]
    e_nv = _rel(test, kq.KV4Plan("nvfp4", params).quantizer(0, "key")(test))
    e_tq = _rel(test, kq.KV4Plan("turbo4", params).quantizer(0, "key")(test))
    if turbo_wins_by is None:
        assert abs(e_tq / e_nv - 1) < 0.05, (e_tq, e_nv)
    else:
        assert e_tq < (1 - turbo_wins_by) * e_nv, (e_tq, e_nv)


# ---- causality ----------------------------------------------------------------------------------------------
def _future_changed(x, t):
    y = x.clone()
    y[:, :, t + 1:] = torch.randn(y[:, :, t + 1:].shape, generator=_gen(9)) * 50     # wild future tokens
    return y


@pytest.mark.parametrize("method", kq.METHODS)
def test_every_method_is_causal(method):
    """Perturbing tokens after position t must not change any quantized value at positions <= t."""
    x = torch.randn(1, 3, 40, 64, generator=_gen(6))
    params = _calibrated(torch.randn(1, 3, 64, 64, generator=_gen(7)))      # calibration: other data
    f = kq.KV4Plan(method, params, n_layers=1).make(0, "key")
    t = 17
    a, b = f(x), f(_future_changed(x, t))
    assert torch.equal(a[:, :, :t + 1], b[:, :, :t + 1])
    assert not torch.equal(a[:, :, t + 1:], b[:, :, t + 1:])


def test_the_plain_nvfp4_global_scale_would_be_an_oracle():
    """Why the global scale is frozen: NVFP4's usual global scale (the amax of the whole window) lets a
    future token change how past tokens are stored."""
    x = torch.randn(1, 3, 40, 64, generator=_gen(6))
    spec = scaling.QuantSpec("e2m1", "nvfp4")
    t = 17
    a, b = scaling.fake_quant(x, spec), scaling.fake_quant(_future_changed(x, t), spec)
    assert not torch.equal(a[:, :, :t + 1], b[:, :, :t + 1])


@pytest.mark.parametrize("method", ["nvfp4", "turbo4"])
def test_online_recipe_form_freezes_then_is_causal(method):
    online = kq.OnlineKV4(method, n_tokens=16)
    f = online.make(0, "value")
    x = torch.randn(1, 2, 16, 32, generator=_gen(8))
    f(x)                                               # the calibration pass: 16 positions, then frozen
    amax = online.params.amax[(0, "value")]
    y = torch.randn(1, 2, 30, 32, generator=_gen(10))
    t = 9
    a, b = f(y), f(_future_changed(y, t))
    assert torch.equal(a[:, :, :t + 1], b[:, :, :t + 1])
    assert online.params.amax[(0, "value")] == amax     # frozen: the wild values did not move it


# ---- high-precision layers --------------------------------------------------------------------------------
def test_kept_layers_are_untouched():
    params = kq.KV4Params(head_dim=32, amax={(i, w): 1.0 for i in range(6) for w in ("key", "value")})
    plan = kq.KV4Plan("nvfp4", params, keep_ends=2, n_layers=6)
    assert plan.kept_layers() == {0, 1, 4, 5}
    x = torch.randn(1, 2, 5, 32)
    for layer in range(6):
        y = plan.make(layer, "key")(x)
        assert (y is x) == (layer in {0, 1, 4, 5})
    # without n_layers, "the last N" comes from the layers make() has seen
    lazy = kq.KV4Plan("nvfp4", params, keep_ends=1)
    fs = [lazy.make(i, "value") for i in range(6)]
    assert lazy.kept_layers() == {0, 5} and fs[5](x) is x and fs[3](x) is not x
    assert kq.KV4Plan("nvfp4", params, keep=[3], n_layers=6).kept_layers() == {3}


def test_kept_layers_see_bit_identical_kv_in_a_model():
    """Through the real attention hook on a 4-layer Llama with the first and last layer kept: what the attention
    reads in a kept layer is bit for bit what that layer computed (layer 0, upstream of every quantized layer,
    is also bit-identical to the baseline); the middle layers are quantized."""
    base = tiny_llama()
    model = type(base)(type(base.config)(**{**base.config.to_dict(), "num_hidden_layers": 4})).eval()
    ids = torch.randint(0, 256, (1, 48), generator=_gen(11))
    cal = kq.KVCalibration(32)
    with R.install_kv_functions(model, cal.make), torch.no_grad():
        model(ids)
    params = cal.fit()
    plan = kq.KV4Plan("nvfp4", params, keep_ends=1, n_layers=4)
    seen = {}

    def mk(layer, which):
        f = plan.make(layer, which)
        return lambda x: seen.setdefault((layer, which), (x.clone(), f(x)))[1]

    with R.install_kv_functions(model, mk), torch.no_grad():
        model(ids)
    assert len(seen) == 8
    for (layer, which), (raw, read) in seen.items():
        assert torch.equal(raw, read) == (layer in (0, 3)), (layer, which)
    base_seen = {}
    with R.install_kv_functions(model, lambda l, w: (lambda x: base_seen.setdefault((l, w), x.clone()))), torch.no_grad():
        model(ids)
    assert torch.equal(base_seen[(0, "key")], seen[(0, "key")][1])
    assert torch.equal(base_seen[(0, "value")], seen[(0, "value")][1])


# ---- recipes -----------------------------------------------------------------------------------------------
KV4_RECIPES = [n for n in R.RECIPES if n.startswith(("nvfp4-kv", "turbo4-kv"))]


def test_the_4bit_kv_recipes_exist():
    assert {"nvfp4-kv", "nvfp4-kv-hp1", "nvfp4-kv-hp2", "nvfp4-kv-hp4", "turbo4-kv"} <= set(KV4_RECIPES)


@pytest.mark.parametrize("name", KV4_RECIPES)
def test_4bit_kv_recipes_apply_and_remove_on_a_10_layer_model(name):
    base = tiny_llama()     # 10 layers: -hp4 keeps 8 of them and still quantizes two
    model = type(base)(type(base.config)(**{**base.config.to_dict(), "num_hidden_layers": 10})).eval()
    ids = torch.randint(0, 256, (2, 40), generator=_gen(12))
    with torch.no_grad():
        ref = model(ids).logits
        with R.applied(model, name):
            q1 = model(ids).logits
            q2 = model(ids).logits                     # frozen after the first forward: same result again
        after = model(ids).logits
    assert torch.equal(after, ref)
    assert not torch.equal(q1, ref)
    assert torch.equal(q1, q2)
    assert torch.isfinite(q1).all()


@pytest.mark.parametrize("method", kq.METHODS)
def test_quantized_kv_comes_back_in_the_ordinary_layout(method):
    """Keys arrive as a transposed view ([B, S, H, D] storage); what we hand the attention must have head_dim
    contiguous: a strided result (the FWHT's internal [D, vectors] layout) made SDPA several times slower."""
    x = torch.randn(1, 40, 3, 64, generator=_gen(13)).transpose(1, 2)
    params = _calibrated(torch.randn(1, 3, 64, 64, generator=_gen(14)))
    y = kq.KV4Plan(method, params, n_layers=1).make(0, "key")(x)
    assert y.shape == x.shape and y.stride()[-1] == 1 and y.is_contiguous()
