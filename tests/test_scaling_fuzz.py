"""The numerics policy holds for every granularity: named regressions and property-based fuzzing of the API.

Regressions (each failed before the policy was made to hold everywhere):
  all-Inf NVFP4 / MX blocks under nonfinite="propagate"; the MX round-up rules and a finite 3e38; E8M0 as an
  element format; non-integer sizes; sizes larger than the tensor (no allocation); DelayedScaling's margin;
  float64 values beyond float32's range.

Fuzz (hypothesis): QuantSpec's arguments, then quantize / dequantize / fake_quant over shapes, dtypes, sizes and
values with specials. Every call gives either a documented result or a clear ValueError / TypeError, never another
exception; results are checked against the policy (finite where the input is finite, NaN only where documented,
fake_quant == dequantize(quantize)). About 5,000 cases (the sum of max_examples below) in ~15 s on 2 cores.
"""
import os
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from fp8lab import formats
from fp8lab.formats import E2M1, E4M3, E5M2
from fp8lab.scaling import (GRANULARITIES, MX_RULES, NVFP4_RULES, DelayedScaling, QuantSpec, dequantize,
                            fake_quant, quantize)

INF, NAN = float("inf"), float("nan")
ROOT = Path(__file__).resolve().parents[1]


# ---- named regressions ---------------------------------------------------------------------------------
def test_regression_nvfp4_all_inf_block_propagates_to_max():
    """+-Inf saturates to +-fmt.max x the block's scale; a block of only Inf gets the scale nearest 1."""
    x = torch.tensor([[INF] * 8 + [-INF] * 8 + [1.0] * 16])
    q = quantize(x, QuantSpec("e2m1", "nvfp4", nonfinite="propagate"))
    d = dequantize(q)
    assert bool(torch.isfinite(d).all())
    s = q.scale[0, 0]          # global 1/2688: 1/global = 2688 saturates the E4M3 block scale at 448 -> s = 1/6
    assert float(s) > 0 and torch.equal(d[0, :8], torch.full((8,), 6.0) * s) and torch.equal(d[0, 8:16], -d[0, :8])
    assert float(d[0, 0]) == 1.0                                  # 6 * (448 / 2688): the tensor's finite amax
    # a tensor of nothing but +-Inf: global 1.0, block scale 1.0 -> +-6 = +-E2M1.max
    d2 = dequantize(quantize(torch.tensor([[INF, -INF] * 8]), QuantSpec("e2m1", "nvfp4", nonfinite="propagate")))
    assert d2[0].tolist() == [6.0, -6.0] * 8


@pytest.mark.parametrize("fmt", ["e2m1", "e4m3", "e5m2"])
def test_regression_mx_all_inf_block_propagates_to_max(fmt):
    x = torch.tensor([[INF] * 16 + [-INF] * 16 + [0.5] * 32])
    q = quantize(x, QuantSpec(fmt, "mx", nonfinite="propagate"))
    d = dequantize(q)
    f = formats.get(fmt)
    assert int(q.scale_codes[0, 0]) == 127                        # 2**0: the neutral scale
    assert d[0, :32].tolist() == [f.max] * 16 + [-f.max] * 16     # +-fmt.max, as FP8 does


@pytest.mark.parametrize("rule", MX_RULES)
@pytest.mark.parametrize("fmt", ["e2m1", "e4m3", "e5m2"])
@pytest.mark.parametrize("big", [3e38, 3.4028234663852886e38])
def test_regression_mx_rules_keep_3e38_finite(rule, fmt, big):
    """A finite block near float32's max must dequantize finite under every rule (the cap 127 - emax)."""
    x = torch.tensor([[big] + [1.0] * 31, [-big] + [1.0] * 31])
    q = quantize(x, QuantSpec(fmt, "mx", scale_rule=rule))
    d = dequantize(q)
    assert bool(torch.isfinite(d).all()), d[:, 0]
    assert float(d[0, 0]) >= 0.5 * big and float(d[1, 0]) == -float(d[0, 0])   # saturated, not flushed or Inf


def test_regression_e8m0_elements_refused():
    for gran in ("none", "tensor", "channel", "group", "block"):
        with pytest.raises(ValueError, match="scale format"):
            QuantSpec("e8m0", gran)


@pytest.mark.parametrize("kw", [dict(group_size=1.9), dict(group_size=2.0), dict(group_size=True),
                                dict(group_size="128"), dict(block=(1.5, 2)), dict(block=(128,)),
                                dict(block=(0, 128)), dict(axis=0.5), dict(group_size=-1)])
def test_regression_non_integer_sizes_refused(kw):
    with pytest.raises(ValueError, match="integer|pair"):
        QuantSpec("e4m3", "group", **kw)


def test_regression_huge_sizes_do_not_allocate():
    """group_size=2**28 on a 4x5 tensor used to pad to 2**28 columns (GBs). Run under a 1 GiB address-space cap."""
    code = textwrap.dedent("""
        import resource, torch
        torch.set_num_threads(1)
        from fp8lab.scaling import QuantSpec, quantize, dequantize, fake_quant
        vm = int(open('/proc/self/status').read().split('VmSize:')[1].split()[0]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), resource.RLIM_INFINITY))
        x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
        for kw, same in ((dict(granularity="group", group_size=2**28), dict(granularity="group", group_size=5)),
                         (dict(granularity="group", group_size=10**30), dict(granularity="token")),
                         (dict(granularity="block", block=(2**28, 2**40)), dict(granularity="tensor"))):
            a, b = QuantSpec("e4m3", **kw), QuantSpec("e4m3", **same)
            assert torch.equal(dequantize(quantize(x, a)), dequantize(quantize(x, b))), kw
            assert torch.equal(fake_quant(x, a), fake_quant(x, b)), kw
        print("OK")
    """)
    if not Path("/proc/self/status").exists():
        pytest.skip("needs Linux /proc to cap the address space")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stderr[-2000:]


def test_regression_delayed_scaling_margin_never_gives_inf():
    with pytest.raises(ValueError, match="margin must be an integer in"):
        DelayedScaling("e4m3", margin=200)
    with pytest.raises(ValueError, match="margin must be an integer"):
        DelayedScaling("e4m3", margin=1.5)
    ds = DelayedScaling("e4m3", margin=100)
    with pytest.raises(ValueError, match="overflows float32"):
        ds.quantize(torch.full((4,), 1e10))
    ds = DelayedScaling("e4m3", margin=-127)
    with pytest.raises(ValueError, match="underflows"):
        ds.quantize(torch.full((4,), 1e-30))


@pytest.mark.parametrize("nonfinite", ["raise", "propagate"])
def test_regression_float64_beyond_float32_is_not_called_inf(nonfinite):
    x = torch.tensor([1e300, 1.0, -1e39], dtype=torch.float64)
    with pytest.raises(ValueError, match="2 finite values beyond float32's range") as e:
        quantize(x, QuantSpec("e4m3", "tensor", nonfinite=nonfinite))
    assert "Inf" not in str(e.value)
    with pytest.raises(ValueError, match="beyond float32's range"):
        fake_quant(x, QuantSpec("e4m3", "tensor", nonfinite=nonfinite))
    # inside float32's range float64 is simply rounded to float32 first (and a real Inf is still an Inf)
    assert fake_quant(torch.tensor([3e38, 1.0], dtype=torch.float64), QuantSpec("e4m3", "tensor")).dtype == torch.float64
    with pytest.raises(ValueError, match="0 NaN and 1 Inf"):
        quantize(torch.tensor([INF, 1.0], dtype=torch.float64), QuantSpec("e4m3", "tensor"))


# ---- property-based fuzzing -------------------------------------------------------------------------------
SIZES = st.one_of(st.integers(-2, 40), st.integers(2**20, 2**62), st.floats(-2, 200), st.just(float("nan")),
                  st.booleans(), st.none(), st.just("16"))
SPEC_KW = st.fixed_dictionaries({}, optional={
    "fmt": st.sampled_from(["e4m3", "e5m2", "e2m1", "int8", "e4m3fnuz", "e5m2fnuz", "e8m0", "fp6", "", "E4M3"]),
    "granularity": st.sampled_from(list(GRANULARITIES) + ["rows", "delayed"]),
    "axis": st.one_of(st.integers(-4, 4), st.floats(-1, 1)),
    "group_size": SIZES,
    "block": st.one_of(st.tuples(SIZES, SIZES), st.lists(st.integers(1, 300), max_size=3), SIZES),
    "scale_rule": st.sampled_from([None, *MX_RULES, *NVFP4_RULES, "bogus"]),
    "nonfinite": st.sampled_from(["raise", "propagate", "ignore"]),
})


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SPEC_KW)
def test_fuzz_quantspec_valid_or_clear_error(kw):
    try:
        spec = QuantSpec(**kw)
    except ValueError:
        return
    assert isinstance(spec.group_size, int) and spec.group_size >= 1
    assert len(spec.block) == 2 and all(isinstance(b, int) and b >= 1 for b in spec.block)
    assert spec.format is not formats.E8M0


def valid_specs():
    fmts = st.sampled_from(["e4m3", "e5m2", "e2m1", "int8", "e4m3fnuz", "e5m2fnuz"])
    sizes = st.one_of(st.integers(1, 70), st.integers(2**20, 2**62))

    def build(fmt, gran, axis, gs, b0, b1, rule, nonfinite):
        if gran == "nvfp4":
            fmt = "e2m1"
        if gran == "mx" and fmt not in ("e2m1", "e4m3", "e5m2"):
            fmt = "e4m3"
        rule = rule if gran in ("mx", "nvfp4") else None
        if gran == "mx" and rule not in MX_RULES:
            rule = "floor"
        if gran == "nvfp4" and rule not in NVFP4_RULES:
            rule = "lab"
        return QuantSpec(fmt, gran, axis=axis, group_size=gs, block=(b0, b1), scale_rule=rule, nonfinite=nonfinite)

    return st.builds(build, fmts, st.sampled_from(GRANULARITIES), st.integers(-3, 3), sizes, sizes, sizes,
                     st.sampled_from([*MX_RULES, *NVFP4_RULES]), st.sampled_from(["raise", "propagate"]))


VALUES = st.one_of(
    st.floats(-1e4, 1e4, width=32),
    st.floats(-2.0**-10, 2.0**-10, width=32),                              # subnormal-range and flushed values
    st.sampled_from([0.0, -0.0, INF, -INF, NAN, 448.0, 464.0, 2.5, 5.0, 3e38, -3.4e38, 1e-45, 2.0 ** -127]),
    st.floats(allow_nan=True, allow_infinity=True),                # float64: 1e300 included
)


@st.composite
def tensors(draw):
    """A tensor of <= 2,500 elements: a seeded random body at a drawn magnitude (2**-140 .. 2**130, so float32
    subnormals, E4M3's flush zone and float64 beyond float32 all occur), with drawn special values written in."""
    shape = draw(st.lists(st.integers(0, 40), max_size=3).filter(lambda s: int(np.prod(s)) <= 2500))
    dtype = draw(st.sampled_from([torch.float32, torch.float32, torch.bfloat16, torch.float16, torch.float64,
                                  torch.int32]))
    if dtype == torch.int32:
        return torch.zeros(shape, dtype=torch.int32)
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    body = {"normal": torch.randn, "uniform": torch.rand}[draw(st.sampled_from(["normal", "uniform"]))]
    t = body(shape, generator=g, dtype=torch.float64) * 2.0 ** draw(st.integers(-140, 130))
    if t.numel():
        flat = t.view(-1)
        for i, v in draw(st.lists(st.tuples(st.integers(0, t.numel() - 1), VALUES), max_size=8)):
            flat[i] = v
    return t.to(dtype)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


@settings(max_examples=2500, deadline=timedelta(seconds=10), suppress_health_check=[HealthCheck.too_slow,
                                                                                     HealthCheck.data_too_large])
@given(valid_specs(), tensors())
def test_fuzz_quantize_documented_result_or_clear_error(spec, x):
    try:
        q = quantize(x, spec)
    except (ValueError, TypeError):
        with pytest.raises((ValueError, TypeError)):   # fake_quant refuses the same input
            fake_quant(x, spec)
        return
    d = dequantize(q)
    assert q.codes.shape == x.shape and d.shape == x.shape and d.dtype == torch.float32
    assert q.codes.dtype == (torch.int8 if spec.fmt == "int8" else torch.uint8)
    xf = x.float()
    nan_in, inf_in = torch.isnan(xf), torch.isinf(xf)
    assert not bool(torch.isinf(d).any())                          # nothing dequantizes to Inf: saturation
    if spec.nonfinite == "raise" or not bool((nan_in | inf_in).any()):
        assert bool(torch.isfinite(d).all())                       # finite in -> finite out
        assert bool(torch.isfinite(q.scale).all())
        # NVFP4: a block scale below E4M3's half-smallest-subnormal rounds to code 0 (the block flushes)
        assert bool((q.scale >= 0).all()) if spec.granularity == "nvfp4" else bool((q.scale > 0).all())
    elif spec.granularity in ("nvfp4", "mx") and x.numel():        # NaN only in blocks that held a NaN
        L = spec.block_len
        pad = (-x.shape[-1]) % L
        blk = torch.nn.functional.pad(nan_in.float(), (0, pad)).reshape(*x.shape[:-1], -1, L).any(-1)
        allowed = blk.repeat_interleave(L, -1)[..., : x.shape[-1]]
        assert not bool((torch.isnan(d) & ~allowed).any())
    else:                                                          # FP8 / INT8 / E2M1: NaN exactly where NaN was
        has_nan = spec.format.has_nan if hasattr(spec.format, "has_nan") else False
        assert torch.equal(torch.isnan(d), nan_in & has_nan)
    if spec.granularity == "nvfp4" and x.numel():
        assert q.global_scale.dim() == 0 and bool(torch.isfinite(q.global_scale)) and float(q.global_scale) > 0
    y = fake_quant(x, spec)
    assert y.dtype == x.dtype and _same(y.float(), d.to(x.dtype).float())


@settings(max_examples=1000, deadline=timedelta(seconds=10), suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([E4M3, E5M2, E2M1, formats.E8M0, formats.E4M3FNUZ, formats.E5M2FNUZ]),
       st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=64), st.booleans())
def test_fuzz_formats_any_bits(fmt, words, saturate):
    """Any float32 bit pattern: encode / encode_fast / round / decode agree and never raise."""
    x = torch.from_numpy(np.array(words, dtype=np.uint32).view(np.float32))
    c = fmt.encode(x, saturate=saturate)
    r = fmt.round(x, saturate=saturate)
    assert _same(r, fmt.decode(c))
    if saturate:
        assert torch.equal(fmt.encode_fast(x), c)
        assert not bool(torch.isinf(r).any())
