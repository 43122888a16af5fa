"""Launch a CuPy-compiled kernel through the driver's cuLaunchKernelEx, with programmatic dependent launch (PDL).

    launch(fn, grid, block, args, smem, stream, pdl=True)     # fn: cupy RawKernel from _cuda.load_module(...)
    resident_ctas(fn, threads)                                 # CTAs of this kernel one SM holds at once

Why: at decode batch 1 a Llama-3-8B layer's FP8 weights take ~55 us to read, split over 4-7 kernels, and each
kernel boundary costs about a microsecond (drain, launch, ramp-up). With PDL a kernel may start while the previous
one in the stream finishes: its CTAs issue their weight loads (which depend on nothing earlier) and only then
wait (PTX griddepcontrol.wait, ptx.cuh pdl_wait) for the previous kernel's outputs. TensorRT-LLM and vLLM launch
their decode kernels this way on Hopper. CuPy's own launch has no launch attributes, so this calls the driver
through ctypes; it is captured into CUDA graphs like any launch on the capturing stream (the graph records a
programmatic edge).

The kernel params are marshalled from what CuPy takes (CuPy arrays -> device pointers, numpy int32 / float32
scalars). Anything unexpected raises; callers fall back to a plain launch and say so.
"""
from __future__ import annotations

import ctypes
import functools

CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


class _AttrValue(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64), ("i", ctypes.c_int)]


class _Attr(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _AttrValue)]


class _Config(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_Attr)), ("numAttrs", ctypes.c_uint)]


@functools.lru_cache(maxsize=None)
def _driver():
    lib = ctypes.CDLL("libcuda.so.1")
    f = lib.cuLaunchKernelEx
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.POINTER(_Config), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    return lib


def function_pointer(fn) -> int:
    """The CUfunction handle of a CuPy RawKernel (loaded on first use)."""
    k = getattr(fn, "kernel", None)
    ptr = getattr(k, "ptr", None) if k is not None else getattr(fn, "ptr", None)
    if not ptr:
        raise RuntimeError(f"no CUfunction handle on {type(fn).__name__}")
    return int(ptr)


def _param(a):
    import numpy as np

    data = getattr(a, "data", None)
    if data is not None and hasattr(data, "ptr"):
        return ctypes.c_void_p(int(data.ptr))
    if isinstance(a, np.integer) and a.dtype == np.int32:
        return ctypes.c_int32(int(a))
    if isinstance(a, np.integer) and a.dtype == np.uint64:  # a pointer-sized value (a null pointer argument)
        return ctypes.c_uint64(int(a))
    if isinstance(a, np.floating) and a.dtype == np.float32:
        return ctypes.c_float(float(a))
    raise TypeError(f"cannot marshal a kernel argument of type {type(a).__name__}")


def launch(fn, grid, block, args, smem: int, stream: int, pdl: bool = True) -> None:
    """cuLaunchKernelEx(fn<<<grid, block, smem, stream>>>(*args)), with the PDL attribute if `pdl`."""
    vals = [_param(a) for a in args]
    params = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
    g = tuple(grid) + (1,) * (3 - len(grid))
    b = tuple(block) + (1,) * (3 - len(block))
    attr = _Attr()
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.i = 1
    cfg = _Config(*g, *b, int(smem), ctypes.c_void_p(int(stream)), ctypes.pointer(attr) if pdl else None,
                  1 if pdl else 0)
    rc = _driver().cuLaunchKernelEx(ctypes.byref(cfg), ctypes.c_void_p(function_pointer(fn)), params, None)
    if rc != 0:
        raise RuntimeError(f"cuLaunchKernelEx failed with CUresult {rc}")


def resident_ctas(fn, threads: int, smem: int = 0, regs_per_sm: int = 65536, max_warps: int = 64,
                  max_ctas: int = 32) -> int:
    """CTAs of `threads` threads one SM holds at once, from the kernel's register count (allocated per warp in units
    of 256) and shared memory (the device's per-SM amount, 228 KiB on sm_90; 1 KiB reserved per CTA).

    A stream-K grid must fit at once: a CTA that waits for a free SM starts late and its range ends late."""
    try:
        regs = int(fn.attributes["num_regs"])
    except Exception:
        regs = 128
    warps = -(-threads // 32)
    per_warp = -(-regs * 32 // 256) * 256
    n = min(max_ctas, max_warps // warps, regs_per_sm // (per_warp * warps))
    if smem:
        from ._cuda import smem_limits

        n = min(n, smem_limits()[1] // (smem + 1024))
    return max(1, n)
