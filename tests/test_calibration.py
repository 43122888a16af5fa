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
