"""fp8lab.scaling against NVIDIA ModelOpt 0.47.0 (nvidia-modelopt, the library whose export is the NVFP4
checkpoint layout TensorRT-LLM and vLLM read), codes and scales compared bit for bit.

ModelOpt's rules, read from its installed source (modelopt/torch/quantization/qtensor/):
  * NVFP4QTensor.quantize: weights_scaling_factor_2 = amax / (6 * 448) (the global scale, stored as
    `weight_scale_2`); per-block scale = block amax / (6 * global), a zero one replaced by 1.0, clamped to
    [2**-9, 448] and cast to E4M3 (_cast_per_block_scale_to_fp8); elements x / (block scale * global), cast to
    E2M1 by a bounds search with ties to even. fp8lab's scale_rule="modelopt" is this rule.
  * FP8QTensor.quantize (per tensor): scale = amax / 448, codes = float8(x / scale).
  * MXFP8QTensor: E8M0 exponent ceil(log2(amax / 448)) in float32 (the same formula as torchao's RCEIL).

Same tensors as tests/test_crosscheck_torchao.py. Equal conventions are asserted equal on every distribution;
where fp8lab's default differs, the test PINS it with each side's rule stated (list in fp8lab/export.py).
"""
import warnings

import pytest
import torch

from fp8lab import formats as F
from fp8lab import scaling as S

warnings.filterwarnings("ignore")
from modelopt.torch.quantization.qtensor import FP8QTensor, MXFP8QTensor, NVFP4QTensor  # noqa: E402

from tests.test_crosscheck_torchao import DISTS  # noqa: E402  (the same tensors for every library)


def mo_nvfp4(x):
    """(global scale, E4M3 block scale codes, unpacked E2M1 codes) from NVFP4QTensor.quantize."""
    q, sc, gs = NVFP4QTensor.quantize(x.clone(), 16)   # (it takes |x| in place: give it a copy)
    return gs, sc.view(torch.uint8), S.unpack_nibbles(q._quantized_data)


def lab(x, *a, **kw):
    return S.quantize(x, S.QuantSpec(*a, **kw))


@pytest.mark.parametrize("dist", list(DISTS))
def test_nvfp4_modelopt_rule_matches(dist):
    """NVFP4QTensor and fp8lab's scale_rule="modelopt": global scale, block scale codes and element codes
    bit-equal on every distribution (zero blocks: 1.0; blocks below 2**-9 next to a spike: 2**-9)."""
    x = DISTS[dist]
    gs, sc, codes = mo_nvfp4(x)
    q = lab(x, "e2m1", "nvfp4", scale_rule="modelopt")
    assert gs.view(torch.int32) == q.global_scale.view(torch.int32)
    assert torch.equal(sc, q.scale_codes)
    assert torch.equal(codes, q.codes)


def test_nvfp4_modelopt_packing_is_fp8lab_packing():
    """ModelOpt packs element 2i in the low nibble (the order the export writes): its packed bytes equal
    fp8lab.scaling.pack_nibbles of the same codes."""
    x = DISTS["normal"]
    q, _, _ = NVFP4QTensor.quantize(x.clone(), 16)
    assert torch.equal(q._quantized_data, S.pack_nibbles(lab(x, "e2m1", "nvfp4", scale_rule="modelopt").codes))


@pytest.mark.parametrize("dist", ["normal", "uniform", "laplace", "huge"])
def test_nvfp4_lab_default_matches_modelopt_off_the_edges(dist):
    """fp8lab's default ("lab") equals ModelOpt wherever no block is zero or below 2**-9 and no product
    6 * global rounds the block scale across an E4M3 midpoint (none on these)."""
    x = DISTS[dist]
    gs, sc, codes = mo_nvfp4(x)
    q = lab(x, "e2m1", "nvfp4")
    assert gs.view(torch.int32) == q.global_scale.view(torch.int32)
    assert torch.equal(sc, q.scale_codes) and torch.equal(codes, q.codes)


def test_nvfp4_pinned_zero_and_tiny_blocks():
    """PINNED (default rule). A zero block: ModelOpt stores block scale 1.0 (code 0x38), fp8lab's default code 0
    (decode(0) = 0 says "nothing here"). A block whose scale is below E4M3's smallest subnormal (2**-9, here
    next to a 1e6 spike): ModelOpt clamps it to 2**-9 (code 0x01) and keeps its elements; fp8lab's default
    rounds the scale to 0 and the block to zeros -- what its E4M3 block scale can hold. Elements agree
    wherever the block scales agree."""
    x = DISTS["zeros_and_spike"]
    gs, sc, codes = mo_nvfp4(x)
    q = lab(x, "e2m1", "nvfp4")
    zero = x.abs().reshape(x.shape[0], -1, 16).amax(-1) == 0
    assert bool(zero.any()) and bool((sc[zero] == 0x38).all()) and bool((q.scale_codes[zero] == 0).all())
    tiny = ~zero & (q.scale_codes == 0)
    assert bool(tiny.any()) and bool((sc[tiny] == 0x01).all())
    same = (sc == q.scale_codes).repeat_interleave(16, dim=-1)
    assert torch.equal(codes[same], q.codes[same])


def test_nvfp4_pinned_rounded_product():
    """PINNED (default rule). ModelOpt divides the block amax by the float32 product 6 * global, fp8lab's default
    divides twice, (amax / 6) / global. At an E4M3 midpoint they part: tensor amax 896 gives global = fl(1/3)
    and fl(6 * global) = 2.0 exactly, so for block amax 0.044921875 ModelOpt's block scale is 0.0224609375,
    the exact midpoint of codes 0x0B and 0x0C -> 0x0C (even); fp8lab's (0.044921875 / 6) / fl(1/3) =
    0.02246093563... lies just below it -> 0x0B. Why fp8lab's default: the two divisions its kernels do;
    scale_rule="modelopt" gives ModelOpt's code."""
    x = torch.zeros(2, 16)
    x[0, 0], x[1, 0] = 896.0, 0.044921875
    gs, sc, _ = mo_nvfp4(x)
    assert int(sc[1, 0]) == 0x0C and int(lab(x, "e2m1", "nvfp4").scale_codes[1, 0]) == 0x0B
    assert torch.equal(sc, lab(x, "e2m1", "nvfp4", scale_rule="modelopt").scale_codes)


@pytest.mark.parametrize("dist", list(DISTS))
def test_fp8_per_tensor_matches(dist):
    """FP8QTensor per tensor: scale = amax / 448, codes = float8(x / scale): the same as fp8lab's per-tensor
    E4M3 (scale and codes bit-equal); ModelOpt FP8 checkpoints carry this `weight_scale`."""
    x = DISTS[dist]
    qt, scale = FP8QTensor.quantize(x, None)
    q = lab(x, "e4m3", "tensor")
    assert torch.equal(scale.reshape(()), q.scale)
    assert torch.equal(qt._quantized_data.view(torch.uint8), q.codes)


@pytest.mark.parametrize("dist", ["normal", "uniform", "lognormal", "laplace", "zeros_and_spike", "huge"])
def test_mxfp8_matches_fp8lab_rceil(dist):
    """MXFP8QTensor: E8M0 exponent ceil(log2(amax / 448)), the RCEIL rule; equal to fp8lab's "rceil" on these
    (its float32 log2 misses a round-up one ulp above 448 * 2**j: pinned for torchao, same formula)."""
    x = DISTS[dist]
    sc = MXFP8QTensor.get_weights_scaling_factor(x)
    q = lab(x, "e4m3", "mx", scale_rule="rceil")
    assert torch.equal(sc.view(torch.uint8).reshape(q.scale_codes.shape), q.scale_codes)
    assert not torch.equal(q.scale_codes, lab(x, "e4m3", "mx").scale_codes)   # and not the OCP floor
    assert F.E8M0.decode(q.scale_codes).min() > 0
