"""Tensor maps for Hopper's bulk tensor copy engine (TMA), made on the host and handed to a kernel by value.

    p = map_2d(rows=4096, cols=7168, elem_bytes=1, box_rows=128, box_cols=128, swizzle=128)   # plain Python: checked
    p.global_dim, p.global_strides, p.box_dim       # -> (7168, 4096), (7168,), (128, 128)   (innermost first)
    desc = encode(p, ptr)                           # 128 bytes from the driver's cuTensorMapEncodeTiled
    arg = kernel_arg(desc)                          # what CuPy's RawKernel passes as a __grid_constant__ TmaDesc

A CUtensorMap is an opaque 128-byte, 64-byte-aligned struct that the driver fills (cuTensorMapEncodeTiled): the base
address, the sizes and byte strides of each dimension, the box the copy engine moves per instruction, the shared-
memory swizzle, the L2 fetch size and the out-of-range fill. The kernel gets it as a `const __grid_constant__`
parameter, so the copy engine reads it from the parameter space and no device copy is needed.

Two ways to each step, the second a fallback that `check_device()` selects if the first does not work here:
  * encoding: the driver through ctypes (libcuda.so.1: present wherever a GPU is), or `cuda.bindings.driver`;
  * passing: a one-element numpy array of 128 raw bytes (CuPy passes a size-1 numpy array by value, copying its
    bytes: CuPy 14 `_pointer` -> CNumpyArray), or a `cupy.cuda.function.CPointer` to the bytes.
`check_device()` runs the two probe kernels of gemm_w8a8_tma.cu once per process: the parameter comes back byte
for byte, and a TMA load of a known tile comes back equal to it (so the map's sizes, strides and swizzle are right).

The layout rules this module checks before calling the driver (the driver's documentation of
cuTensorMapEncodeTiled): base address 16-byte aligned; every stride a multiple of 16 bytes and < 2**40; every size
in 1..2**32; box sizes in 1..256 with box_cols * elem_bytes a multiple of 16; with a swizzle of S bytes the box row
(box_cols * elem_bytes) must be <= S. And ours: the swizzle the wgmma descriptors assume is 128B (tma.cuh).
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

#: CUtensorMapDataType / CUtensorMapSwizzle / CUtensorMapL2promotion values (cuda.h; cuda.bindings agrees: tested)
DTYPE = {1: 0, 2: 1}          # element bytes -> CU_TENSOR_MAP_DATA_TYPE_UINT8 (0) / UINT16 (1); raw bits either way
SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}
L2_PROMOTION = {0: 0, 64: 1, 128: 2, 256: 3}
DESC_BYTES = 128


class TmaError(ValueError):
    """A tensor map the copy engine cannot take (the message says which rule)."""


@dataclass(frozen=True)
class Map2D:
    """A row-major 2-D tensor seen by the copy engine: dimension 0 is the contiguous one (columns)."""

    rows: int
    cols: int
    elem_bytes: int
    row_stride_bytes: int
    box_rows: int
    box_cols: int
    swizzle: int = 128
    l2_promotion: int = 256

    @property
    def global_dim(self) -> tuple[int, int]:
        return (self.cols, self.rows)

    @property
    def global_strides(self) -> tuple[int]:
        return (self.row_stride_bytes,)   # rank - 1 strides: dimension 0's stride is the element size

    @property
    def box_dim(self) -> tuple[int, int]:
        return (self.box_cols, self.box_rows)

    @property
    def box_bytes(self) -> int:
        """What one copy delivers (and counts on the mbarrier), whatever part of the box lies outside the tensor."""
        return self.box_rows * self.box_cols * self.elem_bytes


def map_2d(rows: int, cols: int, elem_bytes: int, box_rows: int, box_cols: int, swizzle: int = 128,
           row_stride_bytes: int | None = None, l2_promotion: int = 256) -> Map2D:
    """Check the driver's rules and ours; return the parameters of a 2-D map (row-major, rows x cols elements).

    map_2d(4096, 7168, 1, 128, 128)      -> A of a W8A8 GEMM: 128 x 128-byte boxes, 128B swizzle
    map_2d(100, 200, 1, 128, 128)        -> TmaError: the row stride (200 bytes) is not a multiple of 16
    """
    stride = cols * elem_bytes if row_stride_bytes is None else row_stride_bytes
    m = Map2D(rows, cols, elem_bytes, stride, box_rows, box_cols, swizzle, l2_promotion)
    if elem_bytes not in DTYPE:
        raise TmaError(f"element size {elem_bytes} bytes: this lab maps 1-byte (e4m3) and 2-byte (bf16) tensors")
    if swizzle not in SWIZZLE:
        raise TmaError(f"swizzle must be one of {sorted(SWIZZLE)} bytes, got {swizzle}")
    if l2_promotion not in L2_PROMOTION:
        raise TmaError(f"L2 promotion must be one of {sorted(L2_PROMOTION)} bytes, got {l2_promotion}")
    for name, v in (("rows", rows), ("cols", cols)):
        if not 1 <= v <= 2**32:
            raise TmaError(f"{name} = {v}: every size must be in 1..2**32")
    if stride % 16 or not 0 < stride < 2**40:
        raise TmaError(f"the row stride ({stride} bytes) is not a multiple of 16 below 2**40: "
                       f"TMA needs 16-byte-aligned rows (cols * {elem_bytes} % 16 == 0)")
    if stride < cols * elem_bytes:
        raise TmaError(f"row stride {stride} bytes is shorter than a row ({cols * elem_bytes} bytes)")
    for name, v in (("box_rows", box_rows), ("box_cols", box_cols)):
        if not 1 <= v <= 256:
            raise TmaError(f"{name} = {v}: a box side is 1..256 elements")
    if (box_cols * elem_bytes) % 16:
        raise TmaError(f"a box row is {box_cols * elem_bytes} bytes: it must be a multiple of 16")
    if swizzle and box_cols * elem_bytes > swizzle:
        raise TmaError(f"a box row of {box_cols * elem_bytes} bytes does not fit the {swizzle}B swizzle span")
    return m


# ---- encoding (the driver) ---------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _libcuda():
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise TmaError(f"no CUDA driver library here (libcuda.so.1: {e}); tensor maps need a GPU machine") from None


def encode_ctypes(m: Map2D, ptr: int) -> bytes:
    """cuTensorMapEncodeTiled through ctypes on libcuda.so.1: 128 bytes."""
    if ptr % 16:
        raise TmaError(f"the tensor's address {ptr:#x} is not 16-byte aligned (TMA needs it)")
    lib = _libcuda()
    fn = lib.cuTensorMapEncodeTiled
    fn.restype = ctypes.c_int
    buf = ctypes.create_string_buffer(DESC_BYTES + 64)  # the map must be 64-byte aligned
    addr = (ctypes.addressof(buf) + 63) & ~63
    u64x2, u32x2 = ctypes.c_uint64 * 2, ctypes.c_uint32 * 2
    rc = fn(ctypes.c_void_p(addr), ctypes.c_int(DTYPE[m.elem_bytes]), ctypes.c_uint32(2), ctypes.c_void_p(ptr),
            u64x2(*m.global_dim), (ctypes.c_uint64 * 1)(*m.global_strides), u32x2(*m.box_dim), u32x2(1, 1),
            ctypes.c_int(0), ctypes.c_int(SWIZZLE[m.swizzle]), ctypes.c_int(L2_PROMOTION[m.l2_promotion]),
            ctypes.c_int(0))
    if rc != 0:
        raise TmaError(f"cuTensorMapEncodeTiled returned CUresult {rc} for {m}")
    return ctypes.string_at(addr, DESC_BYTES)


def encode_bindings(m: Map2D, ptr: int) -> bytes:
    """The same through cuda.bindings.driver (cuda-python), where it is installed."""
    import struct

    from cuda.bindings import driver as d

    dt = d.CUtensorMapDataType(DTYPE[m.elem_bytes])
    err, tm = d.cuTensorMapEncodeTiled(dt, 2, ptr, list(m.global_dim), list(m.global_strides), list(m.box_dim), [1, 1],
                                       d.CUtensorMapInterleave(0), d.CUtensorMapSwizzle(SWIZZLE[m.swizzle]),
                                       d.CUtensorMapL2promotion(L2_PROMOTION[m.l2_promotion]),
                                       d.CUtensorMapFloatOOBfill(0))
    if err != d.CUresult.CUDA_SUCCESS:
        raise TmaError(f"cuTensorMapEncodeTiled (cuda.bindings) returned {err} for {m}")
    return struct.pack("<16Q", *[int(x) for x in tm.opaque])


_STATE = {"encode": "ctypes", "pass": "numpy", "checked": None}


def encode(m: Map2D, ptr: int) -> bytes:
    """128 bytes of CUtensorMap for the tensor at device address `ptr`, by the encoder check_device() chose."""
    return encode_bindings(m, ptr) if _STATE["encode"] == "bindings" else encode_ctypes(m, ptr)


# ---- passing it to a kernel --------------------------------------------------------------------------------
class _Pinned:
    """Keeps the bytes a CPointer points at alive for as long as the launch arguments live."""

    def __init__(self, desc: bytes):
        self.buf = ctypes.create_string_buffer(desc, DESC_BYTES)

    def arg(self):
        from cupy.cuda.function import CPointer

        return CPointer(ctypes.addressof(self.buf))


def kernel_arg(desc: bytes, how: str | None = None):
    """A kernel argument that CuPy passes BY VALUE as the 128-byte struct (how: 'numpy' or 'cpointer')."""
    import numpy as np

    if len(desc) != DESC_BYTES:
        raise TmaError(f"a tensor map is {DESC_BYTES} bytes, got {len(desc)}")
    how = how or _STATE["pass"]
    if how == "numpy":
        return np.frombuffer(bytearray(desc), dtype=np.dtype((np.void, DESC_BYTES)))  # shape (1,), 128 raw bytes
    if how == "cpointer":
        p = _Pinned(desc)
        a = p.arg()
        _KEEP.append(p)  # launch arguments are long-lived (prepared launches); keep the bytes with them
        if len(_KEEP) > 4096:
            del _KEEP[:2048]
        return a
    raise ValueError(f"unknown passing mechanism {how!r}: 'numpy' or 'cpointer'")


_KEEP: list = []


# ---- the device checks --------------------------------------------------------------------------------------
def check_device(verbose: bool = False) -> dict:
    """Once per process, on the GPU: choose an encoder and a passing mechanism that work, proved by the probes.

    Returns {"encode": ..., "pass": ..., "bindings_equal": bool | None, "copy_ok": bool}; raises TmaError if no
    combination round-trips (the TMA kernels cannot run here)."""
    if _STATE["checked"] is not None:
        return _STATE["checked"]
    import torch

    from . import _cuda

    cp = _cuda._cupy()
    mod = _cuda.load_module("gemm_w8a8_tma.cu")
    probe = mod.get_function("tma_param_probe")
    src = torch.randint(0, 256, (200, 384), dtype=torch.uint8, device="cuda")  # 200 rows: the box at row 128 is partial
    m = map_2d(200, 384, 1, 128, 128)
    report: dict = {"errors": []}
    encoders = []
    for name, f in (("ctypes", encode_ctypes), ("bindings", encode_bindings)):
        try:
            encoders.append((name, f(m, src.data_ptr())))
        except Exception as e:  # noqa: BLE001 - recorded, the other one may work
            report["errors"].append(f"encode {name}: {type(e).__name__}: {e}"[:300])
    if not encoders:
        raise TmaError("no tensor-map encoder works here: " + " | ".join(report["errors"]))
    report["bindings_equal"] = (encoders[0][1] == encoders[1][1]) if len(encoders) == 2 else None
    enc_name, desc = encoders[0]
    out = torch.zeros(16, dtype=torch.int64, device="cuda")
    chosen = None
    for how in ("numpy", "cpointer"):
        try:
            out.zero_()
            with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
                probe((1,), (32,), (kernel_arg(desc, how), _cuda.as_cupy(out)))
            torch.cuda.synchronize()
            if out.cpu().numpy().tobytes() == desc:
                chosen = how
                break
            report["errors"].append(f"pass {how}: the parameter came back different")
        except Exception as e:  # noqa: BLE001
            report["errors"].append(f"pass {how}: {type(e).__name__}: {e}"[:300])
    if chosen is None:
        raise TmaError("no way to pass a 128-byte tensor map by value works here: " + " | ".join(report["errors"]))
    _STATE.update(encode=enc_name, **{"pass": chosen})
    # a real TMA load through the map: rows 128..199 of the source, 56 rows of zeros past the end
    copy = mod.get_function("tma_copy_probe")
    copy.max_dynamic_shared_size_bytes = 128 * 128 + 1024
    got = torch.full((128, 128), 0xA5, dtype=torch.uint8, device="cuda")
    with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
        copy((1,), (128,), (kernel_arg(desc), _cuda.as_cupy(got), cp.int32(128), cp.int32(128), cp.int32(128)),
             shared_mem=128 * 128 + 1024)
    torch.cuda.synchronize()
    want = torch.zeros(128, 128, dtype=torch.uint8, device="cuda")
    want[:72] = src[128:200, 128:256]
    report["copy_ok"] = bool(torch.equal(got, want))
    report.update(encode=enc_name, **{"pass": chosen})
    if not report["copy_ok"]:
        raise TmaError(f"a TMA load through the encoded map did not return the tile ({report})")
    _STATE["checked"] = report
    if verbose:
        print("tma.check_device:", report, flush=True)
    return report


@functools.lru_cache(maxsize=None)
def sm_count() -> int:
    from . import _cuda

    return int(_cuda._cupy().cuda.Device().attributes["MultiProcessorCount"])


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                ("numAttrs", ctypes.c_uint)]


def max_active_clusters(function_ptr: int, cluster: int, threads: int, smem: int) -> int | None:
    """How many clusters of this kernel fit on the device at once (cuOccupancyMaxActiveClusters), None if unknown.

    A persistent grid larger than this would run its last clusters after the first ones finish (a second wave)."""
    try:
        cfg = _LaunchConfig(cluster * sm_count(), 1, 1, threads, 1, 1, smem, None, None, 0)
        n = ctypes.c_int(0)
        rc = _libcuda().cuOccupancyMaxActiveClusters(ctypes.byref(n), ctypes.c_void_p(function_ptr), ctypes.byref(cfg))
        return int(n.value) if rc == 0 and n.value > 0 else None
    except Exception:  # noqa: BLE001 - an old driver: the caller falls back to SMs / cluster
        return None
