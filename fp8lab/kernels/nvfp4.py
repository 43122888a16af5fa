"""NVFP4 on the GPU: E2M1 codes packed two per byte, an E4M3 scale per 16 elements, an fp32 global scale.

Bit-exact against `fp8lab.scaling.quantize(x, QuantSpec("e2m1", "nvfp4"))`:

    q = quantize(x_bf16_cuda)                       # q.packed [..., ceil(K/2)] uint8, q.scale_codes [..., ceil(K/16)]
    scaling.pack_nibbles(ref.codes) == q.packed     # element 2i in the LOW nibble of byte i, 2i+1 in the HIGH
    x_hat = dequantize(q)                           # (E2M1 value * E4M3 scale value) * global scale

Nibble order, once more, because kernels disagree across libraries: byte i of a row holds element 2i in bits
0..3 and element 2i+1 in bits 4..7 (scaling.pack_nibbles; the order torch's float4_e2m1fn_x2 and the
NVFP4 checkpoints on the Hub use). An odd K leaves the last high nibble 0.

The E2M1 conversion (`e2m1=`): sm_90 has no E2M1 instruction, so on an H200 it runs in software; sm_100a,
sm_120a and sm_121a (the GB10) have one, cvt.rn.satfinite.e2m1x2.f32, which nvfp4_hw.cu uses:
  "auto"       the default: "cvt" where the device has the instruction (fp8lab.kernels.native), else "bits"
  "cvt"        the hardware instruction (sm_100a / sm_120a / sm_121a only; nvfp4_hw.cu), NaN canonicalized to 0
  "bits"       arithmetic: RNE on the fp32 bit pattern; in the kernel's fast path the FPU rounds (a magic
               add sized from the exponent bits): fewest instructions of the three software ones
  "branchless" seed 002's seven compares, with `>` at the four ties whose lower neighbour is even (RNE)
  "branchy"    a naive if/else chain
The three software conversions are bit-identical (checked over all 2**32 fp32 inputs on the GPU); "cvt" is the
same function by NVIDIA's documentation (CUDA's cuda_fp4.hpp), checked exhaustively only on a GB10
(`check_e2m1_cvt`). `scale_cvt` picks cvt.rn.satfinite.e4m3x2.f32 ("hw", the default) or the software E4M3
rounding ("sw") for the block scales ("cvt" always uses "hw").

`global_amax`: a 0-d float32 CUDA tensor with the tensor's amax (a calibrated value, as vLLM's
scaled_fp4_quant takes a global scale): one pass over x. By default it is measured first (two passes).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from . import quant as _q
from ._cuda import _cupy, load_module

__all__ = ["NVFP4", "quantize", "dequantize", "E2M1_VARIANTS", "E2M1_HW"]

E2M1_VARIANTS = ("bits", "branchless", "branchy")  # software: every arch
E2M1_HW = "cvt"                                    # the hardware instruction: sources.E2M1_CVT_ARCHS only
_VARIANT_ID = {"branchless": 0, "branchy": 1, "bits": 2}
THREADS = 256


class NVFP4(NamedTuple):
    """packed [..., ceil(K/2)] uint8; scale_codes [..., ceil(K/16)] uint8 (E4M3); global_scale 0-d float32; k = K."""

    packed: torch.Tensor
    scale_codes: torch.Tensor
    global_scale: torch.Tensor
    k: int


def _mod(e2m1: str = "bits"):
    return load_module("nvfp4_hw.cu" if e2m1 == E2M1_HW else "nvfp4.cu")


def resolve_e2m1(e2m1: str) -> str:
    """"auto" -> the variant for this device (native.choose); "cvt" where the device lacks it -> ValueError."""
    from . import native, sources
    from ._cuda import device_cc

    if e2m1 == "auto":
        return native.choose("nvfp4_quant")
    if e2m1 == E2M1_HW and device_cc() not in sources.E2M1_CVT_ARCHS:
        raise ValueError(f"e2m1='cvt' needs the hardware E2M1 conversion (sm_{'/sm_'.join(map(str, sources.E2M1_CVT_ARCHS))}); "
                         f"this device is sm_{device_cc()}: use 'auto' or a software variant")
    return e2m1


def quantize(x, global_amax=None, e2m1: str = "auto", scale_cvt: str = "hw", nonfinite: str = "raise",
             out=None) -> NVFP4:
    """Quantize the last dim of `x` (bf16 or fp32, any shape with >= 1 dim) to NVFP4. See the module doc.

    out=(packed, scale_codes, global_scale) fills given tensors (the tests poison them first).
    """
    tag = _q._in_tag(x)
    _q._check_choice("e2m1", e2m1, E2M1_VARIANTS + (E2M1_HW, "auto"))
    _q._check_choice("scale_cvt", scale_cvt, _q.CVTS)
    _q._check_choice("nonfinite", nonfinite, ("raise", "propagate"))
    if len(x.shape) < 1:
        raise ValueError("NVFP4 quantization needs a tensor of at least 1 dim")
    if global_amax is not None and (not isinstance(global_amax, torch.Tensor) or global_amax.dtype != torch.float32
                                    or global_amax.numel() != 1):
        raise TypeError("global_amax must be a one-element float32 tensor on the GPU")
    K = int(x.shape[-1])
    lead = tuple(x.shape[:-1])
    R = math.prod(lead)
    nb, kb = -(-K // 16), -(-K // 2)
    if R * max(K, 1) >= 2**32:
        raise ValueError("tensor too large for one launch (elements must stay below 2**32)")
    cp, x, xp, stream = _q._device_setup(x)
    e2m1 = resolve_e2m1(e2m1)
    p_out, s_out, g_out = out if out is not None else (None, None, None)
    packed = _q._empty((*lead, kb), torch.uint8, x, p_out)
    sc = _q._empty((*lead, nb), torch.uint8, x, s_out)
    gs = _q._empty((), torch.float32, x, g_out)
    if R == 0 or K == 0:  # the reference: an empty tensor has global scale 1.0 and no codes
        gs.fill_(1.0)
        return NVFP4(packed, sc, gs, K)
    if global_amax is None:
        global_amax = _q.amax(x, nonfinite="propagate")
    flags = _q._flags(x, nonfinite)
    args = (xp, _q._ptr(global_amax), _q._ptr(packed), _q._ptr(sc), _q._ptr(gs), _q._ptr(flags), cp.int32(R), cp.int32(K))
    if e2m1 == E2M1_HW:  # nvfp4_hw.cu: block scales by the E4M3 instruction, whatever scale_cvt says
        if K % 16 == 0 and x.data_ptr() % 16 == 0:
            k = _mod(e2m1).get_function(f"nvfp4_quant_{tag}_cvt_hw")
            k((max(1, -(-(R * nb) // (THREADS * 2))),), (THREADS,), args, stream=stream)
        else:
            k = _mod(e2m1).get_function(f"nvfp4_quant_scalar_{tag}_cvt")
            k((max(1, -(-(R * nb) // THREADS)),), (THREADS,), args, stream=stream)
    elif K % 16 == 0 and x.data_ptr() % 16 == 0:  # one thread per two 16-element blocks
        k = _mod().get_function(f"nvfp4_quant_{tag}_{e2m1}_{scale_cvt}")
        k((max(1, -(-(R * nb) // (THREADS * 2))),), (THREADS,), args, stream=stream)  # NVFP4_NU = 2 blocks/thread
    else:
        k = _mod().get_function(f"nvfp4_quant_scalar_{tag}")
        k((max(1, -(-(R * nb) // THREADS)),), (THREADS,),
          args + (cp.int32(_VARIANT_ID[e2m1]), cp.int32(scale_cvt == "hw")), stream=stream)
    _q._raise_if_flagged(flags, nonfinite)
    return NVFP4(packed, sc, gs, K)


def dequantize(q: NVFP4, out_dtype=torch.float32, out=None) -> torch.Tensor:
    """(E2M1 value * E4M3 block-scale value) * global scale, left to right like scaling.dequantize."""
    if not isinstance(q, NVFP4):
        raise TypeError("dequantize takes the NVFP4 tuple that quantize returns")
    if out_dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"out_dtype must be torch.float32 or torch.bfloat16, got {out_dtype}")
    K = int(q.k)
    lead = tuple(q.packed.shape[:-1])
    if tuple(q.scale_codes.shape) != (*lead, -(-K // 16)) or q.packed.shape[-1] != -(-K // 2):
        raise ValueError("packed / scale_codes shapes do not match k")
    cp = _cupy()
    if not q.packed.is_cuda:
        raise TypeError("NVFP4 tensors must be on the GPU")
    R = math.prod(lead)
    res = _q._empty((*lead, K), out_dtype, q.packed, out)
    if R == 0 or K == 0:
        return res
    packed, sc, gs = q.packed.contiguous(), q.scale_codes.contiguous(), q.global_scale.reshape(())
    stream = cp.cuda.ExternalStream(torch.cuda.current_stream(packed.device).cuda_stream)
    k = _mod().get_function("nvfp4_dequant_" + ("f32" if out_dtype == torch.float32 else "bf16"))
    # vector path: 4 chunks of 8 elements per thread (D4_NL); otherwise one element per thread
    grid = max(1, -(-(R * (K // 8)) // (THREADS * 4))) if K % 16 == 0 else max(1, -(-(R * K) // THREADS))
    k((grid,), (THREADS,),
      (_q._ptr(packed), _q._ptr(sc), _q._ptr(gs), _q._ptr(res), cp.int32(R), cp.int32(K)), stream=stream)
    return res


# ---- checks and microbenchmark (tests, bench_quant) ---------------------------------------------------------
def check_e2m1_variants() -> dict:
    """All 2**32 fp32 patterns through the three E2M1 conversions and their fast-path forms (finite inputs)."""
    cp = _cupy()
    out = cp.zeros(4, dtype=cp.uint32)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    _mod().get_function("check_e2m1_variants")((sms * 16,), (THREADS,), (out,))
    o = out.get()
    return {"bits_vs_branchless": int(o[0]), "branchy_vs_branchless": int(o[1]), "first": int(o[2]),
            "fast_path_forms_mismatches": int(o[3])}


def e2m1_encode_elementwise(x, variant: str = "bits") -> torch.Tensor:
    """formats.E2M1.encode(x, saturate=True) on the GPU with one of the conversions (float32 CUDA in);
    "cvt" is the hardware instruction with NaN canonicalized to 0 (sm_100a / sm_120a / sm_121a only)."""
    _q._check_choice("variant", variant, E2M1_VARIANTS + (E2M1_HW,))
    cp, x, xp, stream = _q._device_setup(x)
    variant = resolve_e2m1(variant)
    out = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    n = x.numel()
    if n and variant == E2M1_HW:
        _mod(variant).get_function("e2m1_encode_cvt_elementwise")((max(1, -(-n // THREADS)),), (THREADS,),
            (xp, _q._ptr(out), cp.int64(n)), stream=stream)
    elif n:
        _mod().get_function("e2m1_encode_elementwise")((max(1, -(-n // THREADS)),), (THREADS,),
            (xp, _q._ptr(out), cp.int64(n), cp.int32(_VARIANT_ID[variant])), stream=stream)
    return out


def check_e2m1_cvt() -> dict:
    """All 2**32 fp32 patterns through cvt.rn.satfinite.e2m1x2.f32 against the software e2m1_bits (a GB10 / sm_100a
    device only): mismatches over non-NaN inputs, x2 halves that differ, and the raw byte the instruction gives
    for +NaN / -NaN (the documented answer is 0x77: +6 in both nibbles; the lab stores 0)."""
    resolve_e2m1(E2M1_HW)
    cp = _cupy()
    out = cp.zeros(5, dtype=cp.uint32)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    _mod(E2M1_HW).get_function("check_e2m1_cvt")((sms * 16,), (THREADS,), (out,))
    o = out.get()
    return {"mismatches": int(o[0]), "hi_lo_differ": int(o[1]), "first": int(o[2]),
            "pos_nan_byte": int(o[3]), "neg_nan_byte": int(o[4])}


def e2m1_chain_launcher(variant: str, iters: int, blocks: int, threads: int = THREADS):
    """A zero-argument callable that launches the dependent-chain microbenchmark (variant or "baseline")."""
    if variant not in E2M1_VARIANTS + ("baseline", E2M1_HW):
        raise ValueError(f"unknown variant {variant!r}")
    cp = _cupy()
    out = torch.empty(blocks * threads, dtype=torch.int32, device="cuda")
    k = _mod(resolve_e2m1(variant) if variant == E2M1_HW else "bits").get_function(f"e2m1_chain_{variant}")
    stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    args = (_q._ptr(out), cp.int32(iters))
    return lambda: k((blocks,), (threads,), args, stream=stream)
