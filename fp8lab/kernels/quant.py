"""FP8 (E4M3 / E5M2) quantization on the GPU: per-tensor, 1 x G groups, 128 x 128 blocks; and dequantization.

Bit-exact against the CPU reference `fp8lab.scaling.quantize` (codes and scales compared as raw bits), for
bf16 and fp32 inputs of any shape. Torch CUDA tensors in and out (CuPy arrays accepted too):

    codes, scales = quantize_group(x_bf16_cuda, group_size=128)          # vLLM per_token_group_quant_fp8
    codes.view(torch.float8_e4m3fn)                                       # same bytes torch's fp8 dtype uses
    x = torch.tensor([[1.0, -2.0, 448.0, 0.0] * 32], device="cuda")       # one group of 128, amax 448
    quantize_group(x)  ->  codes [[0x38, 0xC0, 0x7E, 0x00, ...]], scales [[1.0]]

Scales are dequant multipliers (x ~ decode(code) * scale), the `weight_scale_inv` convention.
`scale_layout="kmajor"` stores the 1 x G scales with the token index contiguous (column-major), what
cuBLASLt's VEC128 block-scaled GEMM wants; the returned tensor has the same logical shape either way.

`cvt="hw"` converts with the sm_89+ instruction `cvt.rn.satfinite.e4m3x2.f32`, `cvt="sw"` with the
software RNE of quant_common.cuh; both are bit-identical (checked over all 2**32 fp32 inputs on the GPU).

Non-finite inputs follow the reference's policy: `nonfinite="propagate"` (amax ignores NaN/Inf, Inf saturates,
NaN -> NaN code) costs nothing; `nonfinite="raise"` (the reference's default) reads a device flag after the
launch (one synchronization) and raises ValueError. Serving code passes "propagate".

Argument errors (dtype, shape, options) are raised before any CUDA call, so they are testable on a CPU.
"""
from __future__ import annotations

import math

import torch

from ._cuda import NoCudaDevice, _cupy, load_module  # noqa: F401 (NoCudaDevice re-exported for callers)

__all__ = ["amax", "quantize_tensor", "quantize_group", "quantize_block", "dequantize", "fastdiv_magic",
           "FP8_FORMATS", "CVTS"]

FP8_FORMATS = ("e4m3", "e5m2")
CVTS = ("hw", "sw")
THREADS = 256


# ---- argument checks (no CUDA here) -----------------------------------------------------------------------
def _in_tag(x) -> str:
    """'bf16' or 'f32' for a torch tensor or CuPy array; TypeError for anything else."""
    if isinstance(x, torch.Tensor):
        if x.dtype == torch.bfloat16:
            return "bf16"
        if x.dtype == torch.float32:
            return "f32"
        raise TypeError(f"FP8 quantization kernels take bfloat16 or float32 input, got {x.dtype}")
    dt = getattr(x, "dtype", None)
    if type(x).__module__.startswith("cupy") and dt is not None:
        if str(dt) == "float32":
            return "f32"
        raise TypeError(f"CuPy input must be float32 (CuPy has no bfloat16), got {dt}")
    raise TypeError(f"expected a torch tensor or a CuPy array, got {type(x).__name__}")


def _check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")


def _check_common(x, fmt: str, cvt: str, nonfinite: str, min_dim: int) -> str:
    tag = _in_tag(x)
    _check_choice("fmt", fmt, FP8_FORMATS)
    _check_choice("cvt", cvt, CVTS)
    _check_choice("nonfinite", nonfinite, ("raise", "propagate"))
    if len(x.shape) < min_dim:
        raise ValueError(f"this granularity needs a tensor of at least {min_dim} dims, got shape {tuple(x.shape)}")
    return tag


def fastdiv_magic(d: int) -> tuple[int, int]:
    """(m, l) with n // d == (n * m) >> (32 + l) for every 0 <= n < 2**31 (quant_common.cuh fastdiv).

    fastdiv_magic(56) -> (m, 6) with m = ceil(2**38 / 56); 1000 // 56 == (1000 * m) >> 38 == 17
    """
    if d < 1:
        raise ValueError("divisor must be >= 1")
    l = (d - 1).bit_length()  # ceil(log2 d)
    m = -(-(1 << (32 + l)) // d)
    return m, l


# ---- torch <-> CuPy plumbing ----------------------------------------------------------------------------
def _ptr(t: torch.Tensor):
    """A kernel pointer argument: the tensor's device address as a 64-bit scalar (no DLPack round trip, and
    it also works for the permuted K-major scale view, whose storage is dense)."""
    import numpy as np

    return np.uint64(t.data_ptr())


def _device_setup(x):
    """Check the device, return (cupy module, contiguous torch x, x's pointer, the torch stream for CuPy)."""
    cp = _cupy()  # NoCudaDevice on a machine without one
    if isinstance(x, torch.Tensor) and not x.is_cuda:
        raise TypeError(f"expected a CUDA tensor, got one on {x.device} (move it with .cuda())")
    if not isinstance(x, torch.Tensor):  # CuPy array -> torch view (zero copy)
        x = torch.from_dlpack(x)
    x = x.contiguous()
    stream = cp.cuda.ExternalStream(torch.cuda.current_stream(x.device).cuda_stream)
    return cp, x, _ptr(x), stream


def _empty(shape, dtype, like: torch.Tensor, out=None, fill=None):
    if out is not None:
        if tuple(out.shape) != tuple(shape) or out.dtype != dtype or out.device != like.device:
            raise ValueError(f"out tensor must be {dtype} of shape {tuple(shape)} on {like.device}, "
                             f"got {out.dtype} {tuple(out.shape)} on {out.device}")
        return out
    return torch.empty(shape, dtype=dtype, device=like.device)


_SCRATCH_FLAGS: dict = {}


def _flags(x: torch.Tensor, nonfinite: str = "raise") -> torch.Tensor:
    """The kernels' nonfinite flag. "raise": a fresh zeroed int32 that is read back after the launch.
    "propagate": nobody reads it, so one scratch buffer per device is reused (no memset kernel per call)."""
    if nonfinite == "propagate":
        key = x.device
        if key not in _SCRATCH_FLAGS:
            _SCRATCH_FLAGS[key] = torch.zeros(1, dtype=torch.int32, device=x.device)
        return _SCRATCH_FLAGS[key]
    return torch.zeros(1, dtype=torch.int32, device=x.device)


def _raise_if_flagged(flags: torch.Tensor, nonfinite: str) -> None:
    if nonfinite == "raise" and int(flags.item()) != 0:
        raise ValueError("input holds NaN or Inf values; pass nonfinite='propagate' to quantize them by the "
                         "documented policy (amax ignores them, Inf saturates, NaN -> NaN code)")


def _mod():
    return load_module("quant.cu")


def _blocks(n: int, per_block: int) -> int:
    return max(1, -(-n // per_block))


# ---- kernels -------------------------------------------------------------------------------------------------
def amax(x, nonfinite: str = "propagate", out=None):
    """Finite amax of the whole tensor as a 0-d float32 CUDA tensor (NaN/Inf ignored). `out`: a 0-d f32 to fill."""
    tag = _in_tag(x)
    _check_choice("nonfinite", nonfinite, ("raise", "propagate"))
    cp, x, xc, stream = _device_setup(x)
    res = _empty((), torch.float32, x, out)
    res.zero_()
    flags = _flags(x, nonfinite)
    n = x.numel()
    if n:
        k = _mod().get_function(f"amax_{tag}")
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        grid = min(_blocks(n, THREADS * 32), sms * 8)  # each thread loops with 4 x 16-byte loads in flight
        k((grid,), (THREADS,), (xc, cp.int64(n), _ptr(res), _ptr(flags)),
          stream=stream)
    _raise_if_flagged(flags, nonfinite)
    return res


def quantize_tensor(x, fmt: str = "e4m3", amax_t=None, cvt: str = "hw", nonfinite: str = "raise", out=None):
    """Per-tensor FP8: (codes uint8 of x's shape, scale 0-d float32).

    `amax_t`: a 0-d float32 CUDA tensor holding a precomputed amax (a calibrated / delayed-scaling value); by
    default it is measured first (a second pass over x). Values above a given amax saturate.
    """
    tag = _check_common(x, fmt, cvt, nonfinite, 0)
    if amax_t is not None and (not isinstance(amax_t, torch.Tensor) or amax_t.dtype != torch.float32 or amax_t.numel() != 1):
        raise TypeError("amax_t must be a one-element float32 tensor on the GPU")
    cp, x, xc, stream = _device_setup(x)
    codes_out, scale_out = out if out is not None else (None, None)
    codes = _empty(x.shape, torch.uint8, x, codes_out)
    scale = _empty((), torch.float32, x, scale_out)
    flags = _flags(x, nonfinite)
    n = x.numel()
    if amax_t is None:
        amax_t = amax(x, nonfinite="propagate")
    if n == 0:
        scale.fill_(1.0)
        return codes, scale
    per_block = THREADS * 2 * (8 if tag == "bf16" else 4)  # TENSOR_NL chunks of 16 bytes per thread
    k = _mod().get_function(f"quant_tensor_{tag}_{fmt}_{cvt}")
    k((_blocks(n, per_block),), (THREADS,),
      (xc, cp.int64(n), _ptr(amax_t), _ptr(codes.view(-1)), _ptr(scale), _ptr(flags)),
      stream=stream)
    _raise_if_flagged(flags, nonfinite)
    return codes, scale


def quantize_group(x, group_size: int = 128, fmt: str = "e4m3", scale_layout: str = "row", cvt: str = "hw",
                   nonfinite: str = "raise", out=None):
    """1 x group_size groups along the last dim: (codes uint8 of x's shape, scales float32 [..., ceil(K/G)]).

    group_size: a power of two in [16, 512]. scale_layout "row" (contiguous) or "kmajor" (token index
    contiguous: strides (.., 1, R)). `out=(codes, scales)` fills given tensors (scales in the chosen layout).
    """
    tag = _check_common(x, fmt, cvt, nonfinite, 1)
    _check_choice("scale_layout", scale_layout, ("row", "kmajor"))
    G = int(group_size)
    if G < 16 or G > 512 or G & (G - 1):
        raise ValueError(f"group_size must be a power of two in [16, 512], got {group_size}")
    K = int(x.shape[-1])
    lead = tuple(x.shape[:-1])
    R = math.prod(lead)
    ng = -(-K // G)
    if R * ng * (G // 16) >= 2**31:
        raise ValueError("tensor too large for one launch (rows * groups * lanes must stay below 2**31)")
    cp, x, xc, stream = _device_setup(x)
    codes_out, scales_out = out if out is not None else (None, None)
    codes = _empty(x.shape, torch.uint8, x, codes_out)
    if scales_out is not None:
        scales = _empty((*lead, ng), torch.float32, x, scales_out)
    elif scale_layout == "row":
        scales = torch.empty((*lead, ng), dtype=torch.float32, device=x.device)
    else:  # [ng, *lead] allocated, viewed as [*lead, ng]: token index contiguous
        scales = torch.empty((ng, *lead), dtype=torch.float32, device=x.device).permute(*range(1, len(lead) + 1), 0)
    if R == 0 or K == 0:
        return codes, scales
    s2 = scales.reshape(R, ng)  # a view for both layouts
    if s2.data_ptr() != scales.data_ptr() or (s2.stride() != (ng, 1) and s2.stride() != (1, R) and R > 1 and ng > 1):
        raise ValueError("scales must be row-major or K-major over the flattened leading dims")
    s_row, s_grp = s2.stride()
    vec = 8 if tag == "bf16" else 4
    vecok = int(K % vec == 0 and x.data_ptr() % 16 == 0)
    log2L = (G // 16).bit_length() - 1
    m, l = fastdiv_magic(ng)
    flags = _flags(x, nonfinite)
    k = _mod().get_function(f"quant_group_{tag}_{fmt}_{cvt}")
    ng_per_thread = 2 if tag == "bf16" else 1  # the kernel's NG: groups per bf16 thread
    nslots = -(-(R * ng) // ng_per_thread)
    nthreads = nslots * (G // 16)
    k((_blocks(nthreads, THREADS),), (THREADS,),
      (xc, _ptr(codes.view(-1)), _ptr(scales), _ptr(flags), cp.int32(R), cp.int32(K), cp.int32(G),
       cp.int32(log2L), cp.int64(s_row), cp.int64(s_grp), cp.uint64(m), cp.int32(l), cp.int32(vecok),
       cp.uint32(nslots)), stream=stream)
    _raise_if_flagged(flags, nonfinite)
    return codes, scales


def quantize_block(x, block: int = 128, fmt: str = "e4m3", cvt: str = "hw", nonfinite: str = "raise", out=None):
    """128 x 128 tiles over the last two dims: (codes uint8 of x's shape, scales float32 [..., ceil(M/128), ceil(K/128)])."""
    tag = _check_common(x, fmt, cvt, nonfinite, 2)
    if int(block) != 128:
        raise ValueError(f"only 128 x 128 blocks are implemented (the weight_scale_inv convention), got {block}")
    M, K = int(x.shape[-2]), int(x.shape[-1])
    lead = tuple(x.shape[:-2])
    B = math.prod(lead)
    ntm, ntk = -(-M // 128), -(-K // 128)
    if ntm > 65535 or B > 65535:
        raise ValueError("too many 128-row tiles or batch entries for one launch (grid y/z limit 65535)")
    cp, x, xc, stream = _device_setup(x)
    codes_out, scales_out = out if out is not None else (None, None)
    codes = _empty(x.shape, torch.uint8, x, codes_out)
    scales = _empty((*lead, ntm, ntk), torch.float32, x, scales_out)
    if not scales.is_contiguous():
        raise ValueError("block scales must be contiguous")
    if B == 0 or M == 0 or K == 0:
        return codes, scales
    vec = 8 if tag == "bf16" else 4
    vecok = int(K % vec == 0 and x.data_ptr() % 16 == 0)
    flags = _flags(x, nonfinite)
    k = _mod().get_function(f"quant_block_{tag}_{fmt}_{cvt}")
    k((ntk, ntm, B), (THREADS,),
      (xc, _ptr(codes.view(-1)), _ptr(scales.view(-1)), _ptr(flags), cp.int32(M), cp.int32(K), cp.int32(vecok)),
      stream=stream)
    _raise_if_flagged(flags, nonfinite)
    return codes, scales


def dequantize(codes, scale, granularity: str = "group", fmt: str = "e4m3", group_size: int = 128,
               out_dtype=torch.float32, out=None):
    """decode(code) * scale for the three granularities above (float32 exact like scaling.dequantize, or bf16 RNE)."""
    if not isinstance(codes, torch.Tensor) or codes.dtype != torch.uint8:
        raise TypeError(f"codes must be a uint8 torch tensor, got {getattr(codes, 'dtype', type(codes).__name__)}")
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32:
        raise TypeError("scale must be a float32 torch tensor")
    _check_choice("granularity", granularity, ("tensor", "group", "block"))
    _check_choice("fmt", fmt, FP8_FORMATS)
    if out_dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"out_dtype must be torch.float32 or torch.bfloat16, got {out_dtype}")
    K = int(codes.shape[-1]) if codes.dim() else 1
    R = codes.numel() // max(1, K)
    if granularity == "tensor":
        if scale.numel() != 1:
            raise ValueError("per-tensor dequantization takes a one-element scale")
        Mb, shm, shk, sb, sm, sk = 1, 0, 0, 0, 0, 0
    elif granularity == "group":
        G = int(group_size)
        if G < 16 or G & (G - 1):
            raise ValueError(f"group_size must be a power of two >= 16, got {group_size}")
        ng = -(-K // G)
        if tuple(scale.shape) != (*codes.shape[:-1], ng):
            raise ValueError(f"group scales must have shape {(*codes.shape[:-1], ng)}, got {tuple(scale.shape)}")
        Mb, shm, shk, sb = max(R, 1), 0, G.bit_length() - 1, 0
    else:
        if codes.dim() < 2:
            raise ValueError("block dequantization needs at least 2 dims")
        M = int(codes.shape[-2])
        exp = (*codes.shape[:-2], -(-M // 128), -(-K // 128))
        if tuple(scale.shape) != exp:
            raise ValueError(f"block scales must have shape {exp}, got {tuple(scale.shape)}")
        Mb, shm, shk = max(M, 1), 7, 7
    cp = _cupy()
    if not codes.is_cuda or not scale.is_cuda:
        raise TypeError("codes and scale must be CUDA tensors")
    codes = codes.contiguous()
    if granularity == "group":
        s2 = scale.reshape(R, -(-K // int(group_size))) if R else scale
        sm, sk = (s2.stride() if R else (0, 0))
        scale_c = s2
    elif granularity == "block":
        scale_c = scale.contiguous()
        ntm, ntk = scale_c.shape[-2], scale_c.shape[-1]
        sb, sm, sk = ntm * ntk, ntk, 1
    else:
        scale_c = scale.reshape(1)
    res = _empty(codes.shape, out_dtype, codes, out)
    if codes.numel() == 0:
        return res
    stream = cp.cuda.ExternalStream(torch.cuda.current_stream(codes.device).cuda_stream)
    k = _mod().get_function(f"dequant_{fmt}_{'f32' if out_dtype == torch.float32 else 'bf16'}")
    # vector path: DQ_NL (4) chunks of 8 codes per thread; otherwise one element per thread
    if R * K >= 2**34:
        raise ValueError("tensor too large for one launch (R * K / 8 must stay below 2**31)")
    grid = _blocks(R * (K // 8), THREADS * 4) if K % 8 == 0 else _blocks(R * K, THREADS)
    dk, lk = fastdiv_magic(max(1, K // 8))
    dmb, lmb = fastdiv_magic(Mb)
    k((grid,), (THREADS,),
      (_ptr(codes.view(-1)), _ptr(scale_c), _ptr(res.view(-1)), cp.int64(R), cp.int32(K), cp.int64(Mb),
       cp.int32(shm), cp.int32(shk), cp.int64(sb), cp.int64(sm), cp.int64(sk), cp.uint64(dk), cp.int32(lk),
       cp.uint64(dmb), cp.int32(lmb)), stream=stream)
    return res


# ---- checks used by the tests and the benchmark (not part of the quantization API) ---------------------------
def check_hw_vs_sw(fmt: str = "e4m3") -> dict:
    """Run every fp32 bit pattern (2**32) through cvt.rn.satfinite and the software RNE; count disagreements.

    Returns {"mismatches": non-NaN inputs where they differ, "hi_lo_differ": inputs whose two result bytes differ,
    "first": (input bits, hw << 8 | sw) of one mismatch, "nan_bytes": raw bytes the hardware gives for NaN,
    "fpu_fast_path_mismatches": the software fast path's conversion vs the full one, on |x| <= max (1 + 2**-20)}.
    """
    _check_choice("fmt", fmt, FP8_FORMATS)
    cp = _cupy()
    out = cp.zeros(5, dtype=cp.uint32)
    nan_seen = cp.zeros(8, dtype=cp.uint32)
    k = _mod().get_function(f"check_fp8_hw_vs_sw_{fmt}")
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    k((sms * 16,), (THREADS,), (out, nan_seen))
    o, bits = out.get(), nan_seen.get()
    nan_bytes = [b for b in range(256) if (int(bits[b >> 5]) >> (b & 31)) & 1]
    return {"mismatches": int(o[0]), "hi_lo_differ": int(o[1]), "first": (int(o[2]), int(o[3])), "nan_bytes": nan_bytes,
            "fpu_fast_path_mismatches": int(o[4])}


def encode_elementwise(x, fmt: str = "e4m3", cvt: str = "sw") -> torch.Tensor:
    """formats.E4M3/E5M2.encode(x, saturate=True) on the GPU, element by element (float32 CUDA tensor in)."""
    _check_choice("fmt", fmt, FP8_FORMATS)
    _check_choice("cvt", cvt, CVTS)
    cp, x, xp, stream = _device_setup(x)
    if x.dtype != torch.float32:
        raise TypeError("encode_elementwise takes float32")
    out = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    n = x.numel()
    if n:
        _mod().get_function("encode_fp8_elementwise")((_blocks(n, THREADS),), (THREADS,),
            (xp, _ptr(out), cp.int64(n), cp.int32(FP8_FORMATS.index(fmt)), cp.int32(cvt == "hw")), stream=stream)
    return out


def div_check(x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(div_by_scale(x, s), x / s) elementwise on the GPU (float32 CUDA tensors of one shape)."""
    cp, x, xp, stream = _device_setup(x)
    s = s.contiguous()
    fast, ieee = torch.empty_like(x), torch.empty_like(x)
    n = x.numel()
    _mod().get_function("div_check")((_blocks(n, THREADS),), (THREADS,),
        (xp, _ptr(s), _ptr(fast), _ptr(ieee), cp.int64(n)), stream=stream)
    return fast, ieee
