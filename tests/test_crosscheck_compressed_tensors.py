"""fp8lab.scaling against compressed-tensors 0.20.0 (the library llm-compressor writes checkpoints with and
vLLM reads them through), codes and scales compared bit for bit.

compressed-tensors' rules, read from its installed source:
  * scales: quantization.utils.helpers.calculate_qparams (FP8: amax / 448, in the input's dtype; a zero scale
    is replaced by the scale dtype's eps) and generate_gparam (NVFP4 global = 448 * 6 / amax, a divisor);
    compute_dynamic_scales_and_zp for dynamic tensor / token / group activations;
    quantization.utils.mxfp_utils.generate_mx_scales for MX E8M0 scales
  * codes: quantization.lifecycle.forward.quantize (x / scale, or x / (scale / global), clamp, cast/round)

Weights are reduced to per-group min/max exactly as an observer would (the reduction is not a convention);
every scale and code comes from the library's functions. Equal conventions are asserted equal on tensors of
several distributions; differences are PINNED with each side's rule stated (list in fp8lab/export.py).
"""
import warnings

import pytest
import torch

from fp8lab import formats as F
from fp8lab import scaling as S

warnings.filterwarnings("ignore")
from compressed_tensors.compressors.mx_utils import compress_mx_scale  # noqa: E402
from compressed_tensors.quantization import QuantizationArgs  # noqa: E402
from compressed_tensors.quantization.lifecycle.forward import quantize  # noqa: E402
from compressed_tensors.quantization.utils import (  # noqa: E402
    calculate_qparams,
    compute_dynamic_scales_and_zp,
    generate_gparam,
)
from torchao.prototype.mx_formats.config import ScaleCalculationMode  # noqa: E402
from torchao.prototype.mx_formats.mx_tensor import to_mx  # noqa: E402

from tests.test_crosscheck_torchao import DISTS  # noqa: E402  (the same tensors for both libraries)


def fp8_args(**kw):
    return QuantizationArgs(num_bits=8, type="float", symmetric=True, **kw)


NVFP4 = QuantizationArgs(num_bits=4, type="float", symmetric=True, strategy="tensor_group", group_size=16,
                         scale_dtype=torch.float8_e4m3fn)


def ct_fp8(x, args, amin, amax):
    """(scale, uint8 codes) the library computes from per-group min/max."""
    scale, zp = calculate_qparams(amin, amax, args)
    return scale, quantize(x, scale, zp, args, dtype=torch.float8_e4m3fn).view(torch.uint8)


def ct_nvfp4(x):
    """(global scale G, E4M3 block scale codes, E2M1 codes) with the library's observer-free math."""
    G = generate_gparam(x.min(), x.max())
    xb = x.reshape(x.shape[0], -1, 16)
    s, zp = calculate_qparams(xb.amin(-1), xb.amax(-1), NVFP4, global_scale=G)
    v = quantize(x, s, zp, NVFP4, global_scale=G)       # E2M1 values (exact) in float
    return G, F.E4M3.encode(s), F.E2M1.encode(v)


def lab(x, *a, **kw):
    return S.quantize(x, S.QuantSpec(*a, **kw))


# ---- FP8 weights: tensor, channel, block --------------------------------------------------------------------
@pytest.mark.parametrize("dist", list(DISTS))
def test_fp8_tensor_matches(dist):
    x = DISTS[dist]
    s, codes = ct_fp8(x, fp8_args(strategy="tensor"), x.min(), x.max())
    q = lab(x, "e4m3", "tensor")
    assert s.view(torch.int32) == q.scale.view(torch.int32)
    assert torch.equal(codes, q.codes)


@pytest.mark.parametrize("dist", list(DISTS))
def test_fp8_channel_matches(dist):
    x = DISTS[dist]
    s, codes = ct_fp8(x, fp8_args(strategy="channel"), x.amin(1, keepdim=True), x.amax(1, keepdim=True))
    q = lab(x, "e4m3", "channel", axis=0)
    assert torch.equal(s.reshape(-1), q.scale)            # [N, 1] in the checkpoint, [N] in fp8lab
    assert torch.equal(codes, q.codes)


@pytest.mark.parametrize("dist", list(DISTS))
@pytest.mark.parametrize("shape", [(64, 256), (80, 200)])     # (80, 200): partial blocks on both sides
def test_fp8_block_matches(dist, shape):
    """128x128-style blocks (here 32x128); compressed-tensors pads a partial block with zeros, fp8lab takes the
    amax of the elements that exist: the same scale."""
    x = DISTS[dist][: shape[0], : shape[1]].contiguous() if shape[0] <= 64 else \
        torch.cat([DISTS[dist], DISTS[dist][:16]])[:, : shape[1]].contiguous()
    b0, b1 = 32, 128
    n, k = x.shape
    pad = torch.nn.functional.pad(x, (0, (-k) % b1, 0, (-n) % b0))
    xb = pad.reshape(pad.shape[0] // b0, b0, pad.shape[1] // b1, b1)
    s, codes = ct_fp8(x, fp8_args(strategy="block", block_structure=[b0, b1]), xb.amin((1, 3)), xb.amax((1, 3)))
    q = lab(x, "e4m3", "block", block=(b0, b1))
    assert torch.equal(s, q.scale)
    assert torch.equal(codes, q.codes)


# ---- FP8 dynamic activations: tensor, token, group ------------------------------------------------------
@pytest.mark.parametrize("dist", list(DISTS))
@pytest.mark.parametrize("strategy", ["tensor", "token", "group"])
def test_fp8_dynamic_activations_match(dist, strategy):
    """compute_dynamic_scales_and_zp (what vLLM-style dynamic activation quantization computes at run time)
    against fp8lab's tensor / token / 1x128 group scales, on a [batch, tokens, hidden] activation."""
    x = DISTS[dist].reshape(4, 16, 256)
    args = fp8_args(strategy=strategy, dynamic=True, group_size=128 if strategy == "group" else None)
    s, zp = compute_dynamic_scales_and_zp(x, args, None)
    codes = quantize(x, s, zp, args, dtype=torch.float8_e4m3fn).view(torch.uint8)
    q = lab(x, "e4m3", strategy, group_size=128)
    assert torch.equal(s.reshape(-1), q.scale.reshape(-1))
    assert torch.equal(codes, q.codes)


def test_fp8_pinned_zero_tensor_scale():
    """PINNED. An all-zero tensor or channel: compressed-tensors replaces the zero scale by float32 eps
    (1.19e-07); fp8lab uses 1.0. Codes are zero either way; fp8lab's 1.0 cannot be mistaken for a real
    (tiny) amax when a checkpoint is audited or re-scaled."""
    x = torch.zeros(4, 32)
    x[1] = torch.linspace(-1, 1, 32)
    s, codes = ct_fp8(x, fp8_args(strategy="channel"), x.amin(1, keepdim=True), x.amax(1, keepdim=True))
    q = lab(x, "e4m3", "channel", axis=0)
    assert float(s[0]) == torch.finfo(torch.float32).eps and float(q.scale[0]) == 1.0
    assert torch.equal(codes, q.codes)
    assert float(s[1]) == float(q.scale[1])


def test_fp8_pinned_bf16_input_scale_dtype():
    """PINNED. compressed-tensors computes a bf16 weight's scale in bf16 (amax / 448 rounded to 8 significant
    bits; llm-compressor then stores a BF16 weight_scale); fp8lab computes every scale in float32. On bf16
    input the two scales differ and so can the codes; asserted: CT's scale == bf16(amax / 448)."""
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(64, 64, generator=g) * 0.05).to(torch.bfloat16)
    s, _ = ct_fp8(x, fp8_args(strategy="channel"), x.amin(1, keepdim=True), x.amax(1, keepdim=True))
    q = lab(x, "e4m3", "channel", axis=0)
    assert s.dtype == torch.bfloat16 and q.scale.dtype == torch.float32
    amax = x.float().abs().amax(1)
    assert torch.equal(s.reshape(-1), (amax.to(torch.bfloat16) / torch.tensor(448.0, dtype=torch.bfloat16)))
    assert not torch.equal(s.reshape(-1).float(), q.scale)


# ---- NVFP4 ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dist", ["normal", "uniform", "lognormal", "laplace", "tiny", "huge"])
def test_nvfp4_matches(dist):
    """compressed-tensors: G = 2688 / amax (stored as weight_global_scale, a divisor; computed as
    `2688.0 / tensor`, which torch evaluates as reciprocal(amax) * 2688 -- two roundings), block scale
    E4M3(G * amax_blk / 6), elements E2M1(x / (scale / G)). fp8lab: global = amax / 2688 (a multiplier, one
    rounding), block scale E4M3(amax_blk / 6 / global), elements E2M1(x / (scale * global)). Different
    arithmetic, the same codes on all of these (exceptions pinned below)."""
    x = DISTS[dist]
    G, sc, codes = ct_nvfp4(x)
    q = lab(x, "e2m1", "nvfp4")
    assert torch.equal(G, (x.abs().max().reciprocal() * 2688.0).reshape(1))
    assert torch.equal(sc.reshape(q.scale_codes.shape), q.scale_codes)
    assert torch.equal(codes, q.codes)


def test_nvfp4_pinned_global_scale_formula():
    """PINNED. Block scale at an exact E4M3 tie: amax 18816 (global 7 exactly), block amax 2.21484375 ->
    fp8lab 2.21484375 / 6 / 7 = 0.052734375, the midpoint of 0x15 and 0x16 -> 0x16 (even); compressed-tensors
    multiplies by G = fl(fl(1 / 18816) * 2688) = 0.14285713 (below 1/7) and lands under the tie -> 0x15."""
    x = torch.zeros(1, 32)
    x[0, 0], x[0, 16] = 18816.0, 2.21484375
    G, sc, _ = ct_nvfp4(x)
    q = lab(x, "e2m1", "nvfp4")
    assert float(G) < 1 / 7 < float(torch.tensor(1.0) / q.global_scale)
    assert int(q.scale_codes[0, 1]) == 0x16 and int(sc.reshape(-1)[1]) == 0x15


def test_nvfp4_pinned_element_tie():
    """PINNED. Element at an exact E2M1 tie: global 7, block scale 1, x = 0.75 * 7 -> fp8lab 0.75 exactly ->
    1.0 (code 2, even); compressed-tensors divides by scale / G = 1 / 0.14285713 = 7.0000005 -> 0.5 (code 1)."""
    x = torch.zeros(1, 32)
    x[0, 0], x[0, 16], x[0, 17] = 7 * 2688.0, 6.0 * 7, 0.75 * 7
    _, sc, codes = ct_nvfp4(x)
    q = lab(x, "e2m1", "nvfp4")
    assert torch.equal(sc.reshape(-1), q.scale_codes.reshape(-1))
    assert int(q.codes[0, 17]) == 2 and int(codes[0, 17]) == 1


def test_nvfp4_pinned_zero_and_underflowed_blocks():
    """PINNED. A block whose scale is 0 (all-zero block, or one whose scale underflows E4M3 next to a huge
    value elsewhere): compressed-tensors stores scale 0.125 (its eps for an FP8 scale dtype, code 0x20) and
    quantizes the block with it; fp8lab stores code 0 and zero elements. Here: rows 2.. are all zero."""
    x = torch.zeros(4, 32)
    x[0, 0], x[1, 3] = 1e6, 0.5                         # row 1's scale underflows next to 1e6
    _, sc, codes = ct_nvfp4(x)
    q = lab(x, "e2m1", "nvfp4")
    sc = sc.reshape(q.scale_codes.shape)
    assert int(q.scale_codes[2, 0]) == 0 and int(sc[2, 0]) == 0x20
    assert int(q.scale_codes[1, 0]) == 0 and int(sc[1, 0]) == 0x20
    assert int(q.codes[1].max()) == 0


# ---- MX scales ------------------------------------------------------------------------------------------
def ct_mx_codes(x, fmt):
    args = QuantizationArgs(num_bits=4 if fmt == "e2m1" else 8, type="float", symmetric=True, strategy="group",
                            group_size=32, scale_dtype=torch.uint8)
    xb = x.reshape(x.shape[0], -1, 32)
    s, _ = calculate_qparams(xb.amin(-1), xb.amax(-1), args)
    return compress_mx_scale(s, torch.uint8)


@pytest.mark.parametrize("fmt", ["e2m1", "e4m3"])
@pytest.mark.parametrize("dist", ["normal", "uniform", "lognormal", "zeros_and_spike"])
def test_mx_scale_pinned(fmt, dist):
    """PINNED. compressed-tensors' MX scale rounds amax to E2M1's 1 mantissa bit before floor(log2) (for MXFP8
    too: generate_mx_scales uses FP4's mantissa width unless num_bits == 6), i.e. code = OCP floor + 1 when
    amax's significand is >= 1.75. fp8lab's default is OCP's floor. For MXFP4 this equals torchao's EVEN;
    for MXFP8 it does not (torchao EVEN rounds at E4M3's 3 bits). Zero blocks: code 0 in both."""
    x = DISTS[dist]
    ct = ct_mx_codes(x, fmt).long()
    floor = lab(x, fmt, "mx", scale_rule="floor").scale_codes.long()
    a = x.abs().reshape(x.shape[0], -1, 32).amax(-1)
    m, _ = torch.frexp(a)
    up = (a > 0) & (m * 2 >= 1.75)
    assert torch.equal(ct, floor + up.long())
    even = to_mx(x.contiguous(), torch.float4_e2m1fn_x2 if fmt == "e2m1" else torch.float8_e4m3fn, 32,
                 scaling_mode=ScaleCalculationMode.EVEN)[0].view(torch.uint8).long()
    assert torch.equal(ct, even) == (fmt == "e2m1")
