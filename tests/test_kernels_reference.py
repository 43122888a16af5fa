"""fp8lab.kernels.reference (where kernels get codes, scales and format constants) and fp8lab.kernels.tolerances.

The quantizers are fp8lab.scaling itself; what is tested here is what this module adds: the worked examples, the
shapes and devices it promises, and that every compile-time define it generates says what fp8lab.formats says.
"""
import numpy as np
import pytest
import torch

from fp8lab import formats
from fp8lab.kernels import reference as REF
from fp8lab.kernels import tolerances


def _defines():
    return dict(d.split("=", 1) for d in REF.cuda_defines())


def test_worked_example_channel():
    codes, s = REF.quantize_weight_channel(torch.tensor([[1.0, -448.0], [0.5, 0.25]]))
    assert codes.tolist() == [[0x38, 0xFE], [0x7E, 0x76]]
    assert s.dtype == torch.float32 and s.tolist() == [1.0, float(np.float32(0.5) / np.float32(448.0))]


def test_shapes_of_every_quantizer():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 384, generator=g)
    assert [t.shape for t in REF.quantize_group(x, 128)] == [(200, 384), (200, 3)]
    assert [t.shape for t in REF.quantize_block(x, 128)] == [(200, 384), (2, 3)]
    p, sc, gs = REF.quantize_nvfp4(x[:, :33])
    assert p.shape == (200, 17) and sc.shape == (200, 3) and gs.shape == () and gs.dtype == torch.float32
    kv = torch.randn(2, 3, 20, 64, generator=g)
    assert REF.quantize_kv(kv)[1].shape == ()
    assert REF.quantize_kv(kv, "head")[1].shape == (3,)
    assert REF.quantize_kv(kv, "token")[1].shape == (2, 3, 20)
    with pytest.raises(ValueError, match="granularity"):
        REF.quantize_kv(kv, "channel")


def test_defines_say_what_formats_says():
    d = _defines()
    for f in (formats.E4M3, formats.E5M2, formats.E2M1):
        n = f"FP8LAB_{f.name.upper()}"
        assert int(d[f"{n}_MAN_BITS"]) == f.man_bits and int(d[f"{n}_BIAS"]) == f.bias
        assert float.fromhex(d[f"{n}_MAX"].rstrip("f")) == f.max
        bits = int(d[f"{n}_MAX_BITS"].rstrip("u"), 16)
        assert np.array(bits, dtype=np.uint32).view(np.float32) == f.max
    assert int(d["FP8LAB_E4M3_NAN_CODE"].rstrip("u"), 16) == 0x7F and int(d["FP8LAB_E5M2_NAN_CODE"].rstrip("u"), 16) == 0x7E
    assert float.fromhex(d["FP8LAB_NVFP4_GLOBAL_DIV"].rstrip("f")) == 448.0 * 6.0
    assert np.float32(float.fromhex(d["FP8LAB_E2M1_RCP_MAX"].rstrip("f"))) == np.float32(1) / np.float32(6)


def test_e2m1_midpoints_and_tie_rule():
    """The midpoints on the GPU are the reference's; at each one the reference picks the even code (RNE)."""
    d = _defines()
    mids = [np.array(int(b.rstrip("u"), 16), dtype=np.uint32).view(np.float32) for b in d["FP8LAB_E2M1_MIDS"].split(",")]
    assert mids == [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    ties_down = int(d["FP8LAB_E2M1_TIES_DOWN"].rstrip("u"), 16)
    for i, m in enumerate(mids):
        code = int(formats.E2M1.encode(torch.tensor([float(m)]))[0])
        assert code % 2 == 0 and bool(ties_down >> i & 1) == (code == i)


def test_decode_follows_the_table():
    assert REF.decode("e4m3", torch.tensor([0x38, 0x01, 0xFE], dtype=torch.uint8)).tolist() == [1.0, 2.0**-9, -448.0]
    assert REF.decode("e2m1", torch.tensor([0x1, 0x7, 0xA], dtype=torch.uint8)).tolist() == [0.5, 6.0, -1.0]


def test_matmul_tolerance_grows_with_K():
    """The accumulation term is gamma_n of the roundings on a chain (Higham): 2**-13 was right at K = 2048 only."""
    assert tolerances.matmul("gemv_fp8", 2048, split_k=0).acc == pytest.approx(tolerances.gamma(2048 + 16))
    small, big = tolerances.matmul("gemv_fp8", 2048).acc, tolerances.matmul("gemv_fp8", 14336).acc
    assert 2**-13 < small < 2**-12.9 and 2**-10.3 < big < 2**-10.1
    assert tolerances.matmul("wgmma_ws", 14336).acc < 2**-10.9   # promotion keeps wgmma's error from growing
    with pytest.raises(KeyError):
        tolerances.matmul("tcgen05", 1024)


def test_tolerance_worst_flags_nan_and_excess():
    t = tolerances.Tolerance(2**-8, 0.0)
    ref = torch.tensor([1.0, 2.0], dtype=torch.float64)
    terms = ref.abs()
    assert t.worst(torch.tensor([1.0, 2.0]), ref, terms) == 0.0
    assert t.worst(torch.tensor([1.0 + 2**-9, 2.0]), ref, terms) == pytest.approx(0.5)
    assert t.worst(torch.tensor([float("nan"), 2.0]), ref, terms) == float("inf")
    assert t.worst(torch.tensor([1.1, 2.0]), ref, terms) == float("inf")
