"""NVRTC without a GPU: compile CUDA C++ to a cubin for any arch, the way CuPy does on the device.

    cubin, log = compile_cubin(source_text, ("--std=c++17", "--gpu-architecture=sm_90a", ...), name="quant.cu")
    version() -> (13, 0)

NVRTC is a plain library (libnvrtc.so, from the PyPI package `nvidia-cuda-nvrtc`, or a CUDA toolkit); it needs
no driver and no device, so CPU CI compiles exactly what the GPU machine compiles. Called through ctypes, with
the library found by `cuda.pathfinder` where it is installed, else in the nvidia wheel folders or /usr/local/cuda.
Raises NvrtcUnavailable with a one-line reason where no libnvrtc exists, CompileError with the log on failure.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
import sys
import threading


class NvrtcUnavailable(RuntimeError):
    """No libnvrtc on this machine (pip install nvidia-cuda-nvrtc)."""


class CompileError(RuntimeError):
    """NVRTC refused the source; the message holds its log."""


def _candidates() -> list[str]:
    out = []
    for p in sys.path:
        out += sorted(glob.glob(os.path.join(p, "nvidia", "cu1*", "lib", "libnvrtc.so.*")), reverse=True)
        out += sorted(glob.glob(os.path.join(p, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so.*")), reverse=True)
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            out += sorted(glob.glob(os.path.join(root, "lib64", "libnvrtc.so*")), reverse=True)
    return [p for p in out if "builtins" not in p and ".alt." not in p]


def _load(path: str) -> ctypes.CDLL:
    # NVRTC dlopens libnvrtc-builtins from its own folder at the first compile: load it first, globally, so it is
    # found whatever the loader's search path (and before two threads compile at once).
    for b in sorted(glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so.*"))):
        if ".alt." not in b:
            try:
                ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
                break
            except OSError:
                pass
    return ctypes.CDLL(path)


_LOCK = threading.Lock()


@functools.lru_cache(maxsize=None)
def _lib() -> ctypes.CDLL:
    with _LOCK:
        paths = []
        try:  # cuda.pathfinder knows every layout NVIDIA ships (wheels, conda, toolkits)
            from cuda.pathfinder import load_nvidia_dynamic_lib

            paths.append(load_nvidia_dynamic_lib("nvrtc").abs_path)
        except Exception:
            pass
        for path in paths + _candidates():
            try:
                return _load(path)
            except OSError:
                continue
    raise NvrtcUnavailable("no libnvrtc found: pip install nvidia-cuda-nvrtc (requirements.txt lists it)")


def available() -> bool:
    try:
        _lib()
        return True
    except NvrtcUnavailable:
        return False


def version() -> tuple[int, int]:
    lib = _lib()
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def compile_cubin(source: str, options, name: str = "kernel.cu") -> tuple[bytes, str]:
    """(cubin, compiler log) of `source` compiled with `options` (a sequence of str, as NVRTC takes them)."""
    lib = _lib()
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None) != 0:
        raise CompileError(f"nvrtcCreateProgram failed for {name}")
    try:
        opts = [o.encode() for o in options]
        rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        n = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        if rc != 0:
            raise CompileError(f"NVRTC could not compile {name} ({' '.join(o for o in options if o.startswith('--gpu'))}):\n{log}")
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(n))
        cubin = ctypes.create_string_buffer(n.value)
        if lib.nvrtcGetCUBIN(prog, cubin) != 0:
            raise CompileError(f"{name}: NVRTC produced no cubin (a compute_XX target gives PTX only)")
        return cubin.raw, log
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
