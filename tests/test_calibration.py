"""KV calibration: observers, frozen scales, the drift experiment's bookkeeping, and the hook on a tiny model."""
import numpy as np
import pytest
import torch

from fp8lab import calibration as cal
from fp8lab import kv_drift
from fp8lab.formats import E4M3


def kv(b=1, h=2, s=10, d=4, seed=0, scale=1.0):
    return torch.randn(b, h, s, d, generator=torch.Generator().manual_seed(seed)) * scale


def test_static_fake_quant_saturates_above_the_frozen_scale():
    y = cal.static_fake_quant(torch.tensor([1.0, 900.0, -1e4]), torch.tensor(1.0))
    assert y.tolist() == [1.0, 448.0, -448.0]
    x = kv()
    s = x.abs().max() / 448
    assert torch.equal(cal.static_fake_quant(x, s), E4M3.round(x / s) * s)


def test_dynamic_is_per_token_and_head():
    x = kv(s=3)
    x[0, 0, 1] *= 1000                       # one huge token: only its own row's scale changes
    y = cal.dynamic_fake_quant(x)
    rel = ((y - x).abs() / x.abs().clamp_min(1e-12)).max()
    assert rel < 2 ** -4 + 1e-6              # every row scaled to its own max: E4M3 relative error <= 2**-4


@pytest.mark.parametrize("gran,shape", [("tensor", ()), ("head", (1, 2, 1, 1)), ("channel", (1, 2, 1, 4))])
def test_observer_sees_only_the_first_n_tokens(gran, shape):
    obs = cal.KVObserver(n_tokens=6, granularity=gran)
    x = kv(s=4)
    late = kv(s=4, seed=1) * 100            # tokens 6.. are huge; only 2 of them fall inside the first 6
    obs.observe(0, "key", x)
    obs.observe(0, "key", late)              # positions 4..7: only 4 and 5 count
    obs.observe(0, "key", late * 10)         # positions 8..: ignored
    obs.observe(0, "value", x)
    both = torch.cat([x, late[:, :, :2]], dim=2)
    ref = cal._reduce_amax(both, gran)
    assert torch.equal(obs.k_amax[0], ref) and obs.k_amax[0].shape == shape
    sc = obs.scales("e4m3")
    assert torch.allclose(sc.k[0], ref / 448) and "6 tokens" in sc.label


def test_observer_errors():
    with pytest.raises(ValueError, match="valid: tensor, head, channel"):
        cal.KVObserver(4, "row")
    with pytest.raises(ValueError):
        cal.KVObserver(0)
    with pytest.raises(RuntimeError, match="nothing observed"):
        cal.KVObserver(4).scales()
    with pytest.raises(KeyError, match="layer 3"):
        cal.StaticKVScales.uncalibrated(2).quantize(kv(), 3, "key")


def test_buckets_and_summary():
    assert kv_drift.buckets_for(2048) == [(1, 64), (64, 256), (256, 1024), (1024, 2048)]
    assert kv_drift.buckets_for(300) == [(1, 64), (64, 256), (256, 300)]
    rng = np.random.default_rng(0)
    base = rng.uniform(1, 5, size=(6, 299))
    worse = base.copy()
    worse[:, 255:] += 0.1                    # damage only at positions >= 256
    rows = kv_drift.summarize({"baseline": base, "x": worse}, 300, n_boot=200)
    by = {(r["config"], r["pos_lo"]): r for r in rows}
    assert by[("x", 1)]["delta_pct"] == 0 and by[("x", 64)]["ci95_high"] == 0
    r = by[("x", 256)]
    assert r["delta_pct"] == pytest.approx((np.exp(0.1) - 1) * 100) and r["ci95_low"] > 0 and r["n"] == 6
    table = kv_drift.format_table(rows)
    assert "pos 256-300" in table and "baseline (ppl)" in table and table.count("\n") == 2


# ---- through the real attention hook, on a tiny random Llama ------------------------------------------------
from tests.test_recipes import tiny_llama  # noqa: E402
from fp8lab import recipes  # noqa: E402


def test_observe_and_static_kv_on_a_model():
    model = tiny_llama()
    ids = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model(ids).logits
    obs = cal.KVObserver(n_tokens=16)
    with cal.observe_kv(model, obs), torch.no_grad():
        same = model(ids).logits
    assert torch.equal(same, ref)                                # observing changes nothing
    assert sorted(obs.k_amax) == [0, 1] and sorted(obs.v_amax) == [0, 1]
    assert all(v == 16 for v in obs.seen.values())
    scales = obs.scales("e4m3")
    with cal.static_kv(model, scales), torch.no_grad():
        q = model(ids).logits
    assert not torch.equal(q, ref) and torch.allclose(q, ref, atol=0.5)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref)               # removed: bit-identical again
    assert model.config._attn_implementation == "sdpa"


def test_static_scale_is_what_the_attention_reads():
    """Capture the keys inside the hook: they equal static_fake_quant(rope(k), frozen scale)."""
    model = tiny_llama()
    ids = torch.randint(0, 256, (1, 24), generator=torch.Generator().manual_seed(1))
    obs = cal.KVObserver(n_tokens=8)
    with cal.observe_kv(model, obs), torch.no_grad():
        model(ids)
    seen = {}
    scales = obs.scales()
    make = lambda layer, which: (lambda x: seen.setdefault((layer, which), (x.clone(), scales.quantize(x, layer, which)))[1])
    with recipes.install_kv_functions(model, make), torch.no_grad():
        model(ids)
    k_raw, k_q = seen[(0, "key")]
    assert torch.equal(k_q, cal.static_fake_quant(k_raw, scales.k[0]))
    # tokens after the first 8 may exceed the calibrated amax: those saturate at +-448 * scale
    assert float(k_q.abs().max()) <= 448 * float(scales.k[0]) * (1 + 1e-6)


def test_calibrated_recipes_apply_and_remove():
    model = tiny_llama()
    ids = torch.randint(0, 256, (2, 300), generator=torch.Generator().manual_seed(2))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        ref = model(ids).logits
    for name in ("e4m3-kv-uncal", "e4m3-kv-cal256"):
        with recipes.applied(model, name), torch.no_grad():
            out = model(ids).logits
        assert not torch.equal(out, ref)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_online_calibration_freezes_after_n_tokens():
    oc = cal.OnlineKVCalibration(n_tokens=4)
    f = oc.make(0, "key")
    small = torch.ones(1, 1, 4, 2)
    big = torch.full((1, 1, 4, 2), 100.0)
    assert torch.equal(f(small), small)          # scale from these 4 tokens: 1/448, exact
    assert float(f(big).max()) == 1.0            # frozen: 100 saturates at 448 * (1/448)


def test_kv_drift_runs_on_a_tiny_model():
    model = tiny_llama()
    windows = torch.randint(0, 256, (3, 80), generator=torch.Generator().manual_seed(3))
    nll = kv_drift.run(model, windows, ("baseline", "e4m3-uncal", "e4m3-cal16", "e4m3-dyn",
                                        "e5m2-uncal", "e4m3-cal256-channel"), progress=False)
    assert all(a.shape == (3, 79) for a in nll.values())
    rows = kv_drift.summarize(nll, 80, n_boot=100)
    assert {r["config"] for r in rows} >= {"e4m3-cal16", "e4m3-dyn"}
    with pytest.raises(ValueError, match="valid: baseline"):
        kv_drift.kv_context(model, "e4m3-cal", windows[:1])


def test_kv_drift_cli_errors(capsys):
    assert kv_drift.main(["--configs", "fp6"]) == 2
    assert "valid: baseline" in capsys.readouterr().err
