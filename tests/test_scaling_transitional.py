"""TRANSITIONAL: the public scaling helpers reproduce the private copies in the kernel wrappers and calibration, bit
for bit, so those copies can be deleted and their callers switched to fp8lab.scaling.

Delete this whole file together with the copies. Each test skips once its copy is gone (so the two branches merge in
either order).

    old copy                                      -> the one contract
    kernels.gemv_fp8.quantize_weight_channel(w)   -> scaling.quantize_weight_channel(w)
    kernels.gemv_nvfp4.quantize_nvfp4(w)          -> scaling.quantize_nvfp4(w)
    kernels.gemv_nvfp4.encode_e2m1(v)             -> formats.E2M1.encode_fast(v)
    kernels.gemm_w8a8.quantize_act_1x128(x)       -> scaling.quantize_group(x, 128)
    kernels.gemm_w8a8.quantize_weight_128x128(w)  -> scaling.quantize_block(w, (128, 128))
    kernels.gemm_w8a8._e4m3(v), ._scale(amax)     -> formats.E4M3.encode_fast(v), scaling.scale_from_amax(amax, "e4m3")
    kernels.attention_fp8kv.quantize_kv(x, per_head) -> scaling.quantize_kv(x, "head" if per_head else "tensor")
    calibration.dynamic_fake_quant(x, fmt)        -> scaling.fake_quant(x, QuantSpec(fmt, "token"))
"""
import importlib

import pytest
import torch

from fp8lab import formats, scaling
from fp8lab.scaling import QuantSpec


def old(module: str, name: str):
    fn = getattr(importlib.import_module(module), name, None)
    if fn is None:
        pytest.skip(f"{module}.{name} is gone (deleted in favour of fp8lab.scaling): delete this test")
    return fn


def inputs(shape, seed=0):
    """Normal, tiny, huge, outlier-heavy, with zero rows and exact ties; bf16 too."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    out = {"normal": x, "tiny": x * 3e-4, "huge": x * 1e30, "subnormal": x * 1e-39,
           "outliers": x * torch.where(torch.rand(shape, generator=g) < 0.01, 300.0, 1.0)}
    z = x.clone()
    z.view(-1, shape[-1])[::3] = 0
    out["zero_rows"] = z
    t = torch.tensor([0.25, 0.75, 1.25, 2.5, 5.0, 464.0, 448.0, -3 * 2 ** -10])
    out["ties"] = t[torch.randint(0, len(t), shape, generator=g)]
    out["bf16"] = x.to(torch.bfloat16)
    return out


def same(a, b) -> bool:
    """Same dtype, shape and raw bits."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point():
        bits = {8: torch.int64, 4: torch.int32, 2: torch.int16}[a.element_size()]
        return torch.equal(a.contiguous().view(bits), b.contiguous().view(bits))
    return torch.equal(a, b)


def test_gemv_fp8_quantize_weight_channel():  # transitional
    fn = old("fp8lab.kernels.gemv_fp8", "quantize_weight_channel")
    for name, w in inputs((96, 256)).items():
        c0, s0 = fn(w)
        c1, s1 = scaling.quantize_weight_channel(w)
        assert same(c0, c1) and same(s0, s1), name


def test_gemv_nvfp4_quantize_nvfp4_and_encode_e2m1():  # transitional
    fn = old("fp8lab.kernels.gemv_nvfp4", "quantize_nvfp4")
    enc = old("fp8lab.kernels.gemv_nvfp4", "encode_e2m1")
    for name, w in inputs((64, 256), seed=1).items():
        p0, sc0, g0 = fn(w)
        p1, sc1, g1 = scaling.quantize_nvfp4(w)
        assert same(p0, p1) and same(sc0, sc1) and same(g0, g1), name
        v = w.float() * 7
        assert same(enc(v), formats.E2M1.encode_fast(v)), name


def test_gemm_w8a8_quantizers():  # transitional
    act = old("fp8lab.kernels.gemm_w8a8", "quantize_act_1x128")
    wq = old("fp8lab.kernels.gemm_w8a8", "quantize_weight_128x128")
    for name, x in inputs((130, 300), seed=2).items():
        c0, s0 = act(x)
        c1, s1 = scaling.quantize_group(x, 128)
        assert same(c0, c1) and same(s0, s1), name
        c0, s0 = wq(x)
        c1, s1 = scaling.quantize_block(x, (128, 128))
        assert same(c0, c1) and same(s0, s1), name


def test_attention_quantize_kv():  # transitional
    fn = old("fp8lab.kernels.attention_fp8kv", "quantize_kv")
    for name, x in inputs((2, 4, 33, 64), seed=3).items():
        for per_head in (False, True):
            c0, s0 = fn(x, per_head)
            c1, s1 = scaling.quantize_kv(x, "head" if per_head else "tensor")
            assert same(c0, c1) and same(s0, s1), (name, per_head)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_calibration_dynamic_fake_quant(fmt):  # transitional
    fn = old("fp8lab.calibration", "dynamic_fake_quant")
    for name, x in inputs((2, 3, 17, 64), seed=4).items():
        a, b = fn(x, fmt), scaling.fake_quant(x, QuantSpec(fmt, "token"))
        assert a.dtype == b.dtype and torch.equal(a, b) and torch.equal(torch.signbit(a), torch.signbit(b)), name
