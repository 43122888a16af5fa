"""Compile `.cu` files beside this module with NVRTC (through CuPy) for the running device's own arch.

    mod = load_module("quant.cu")            # compiled for e.g. sm_90 on an H200
    k = mod.get_function("quant_e4m3_group128")

On a machine without CuPy or without a CUDA device, `load_module` raises `NoCudaDevice` with a
plain message; importing fp8lab.kernels never fails.

Why the arch matters: a kernel compiled for an older virtual arch runs through the driver's PTX JIT and
uses none of the chip's own instructions. We compile for `sm_XY` of the device (sm_89, sm_90, sm_120,
sm_121) and for `sm_90a` only where a kernel asks for it (wgmma / setmaxnreg need the `a` target).
"""
from __future__ import annotations

import functools
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent


class NoCudaDevice(RuntimeError):
    """Raised when a GPU kernel is called where there is no CUDA device (or no CuPy)."""


def _cupy():
    try:
        import cupy  # noqa: F401
    except Exception as e:  # ImportError, or CUDA libraries missing
        raise NoCudaDevice(
            f"fp8lab.kernels needs CuPy and a CUDA device; CuPy is not importable here ({e.__class__.__name__}: {e}). "
            "On a CPU-only machine the notebooks show the recorded results under outputs/kernels/."
        ) from None
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        raise NoCudaDevice(f"no CUDA device: {e}") from None
    if n == 0:
        raise NoCudaDevice("no CUDA device: cudaGetDeviceCount() returned 0")
    return cupy


def cuda_available() -> bool:
    """True where CuPy imports and sees at least one CUDA device."""
    try:
        _cupy()
        return True
    except NoCudaDevice:
        return False


def device_arch(arch_specific: bool = False) -> str:
    """The running device's arch as NVRTC wants it: 'sm_90' on an H200; 'sm_90a' with arch_specific=True.

    The `a` suffix unlocks arch-specific instructions (wgmma on sm_90a); code built for it runs only on
    that exact arch, which is why it is opt-in per kernel.
    """
    cp = _cupy()
    arch = f"sm_{cp.cuda.Device().compute_capability}"  # CuPy gives '90' on an H200, '121' on a GB10
    if arch_specific and arch in ("sm_90", "sm_100", "sm_101", "sm_120", "sm_121"):
        arch += "a"
    return arch


@functools.lru_cache(maxsize=None)
def load_module(filename: str, arch_specific: bool = False, defines: tuple = ()):
    """Compile `fp8lab/kernels/<filename>` with NVRTC for this device and return a `cupy.RawModule`.

    `defines` is a tuple of 'NAME=VALUE' strings passed as -D options (hashable, so modules are cached).
    """
    cp = _cupy()
    src = (KERNEL_DIR / filename).read_text()
    arch = device_arch(arch_specific)
    # No --use_fast_math: the rounding kernels must be bit-exact against the CPU reference. Note that CuPy
    # itself appends -ftz=true to every NVRTC compile (cupy/cuda/compiler.py): C++ float arithmetic here
    # flushes subnormals. Kernels that must keep subnormals write the critical steps in PTX without .ftz.
    opts = ("--std=c++17", f"--gpu-architecture={arch}", f"-I{KERNEL_DIR}") + tuple(f"-D{d}" for d in defines)
    return cp.RawModule(code=src, options=opts, backend="nvrtc", name_expressions=None)


def as_cupy(t):
    """Zero-copy view of a torch CUDA tensor (or a CuPy array) as a CuPy array, via DLPack."""
    cp = _cupy()
    if isinstance(t, cp.ndarray):
        return t
    try:
        import torch
    except ImportError:  # pragma: no cover
        torch = None
    if torch is not None and isinstance(t, torch.Tensor):
        if not t.is_cuda:
            raise TypeError(f"expected a CUDA tensor, got one on {t.device}")
        if t.dtype in (torch.bfloat16,) or str(t.dtype).startswith("torch.float8"):
            # CuPy has no bf16/fp8 dtypes: view the bits as integers of the same width.
            t = t.view(torch.uint16 if t.element_size() == 2 else torch.uint8)
        return cp.from_dlpack(t.contiguous())
    raise TypeError(f"expected a torch CUDA tensor or a CuPy array, got {type(t).__name__}")


def byte_codes(t, name: str, what: str = "E4M3 codes"):
    """A tensor of 8-bit codes as uint8, viewing torch.float8_e4m3fn in place; a clear TypeError otherwise.

    Every kernel wrapper that takes stored bytes (E4M3 weights, E4M3 scales, packed E2M1 nibbles) checks them
    here, on the CPU, before any CUDA call.
    """
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype == torch.float8_e4m3fn:
        return t.view(torch.uint8)
    if t.dtype != torch.uint8:
        raise TypeError(f"{name} must hold {what} as uint8 or torch.float8_e4m3fn, got {t.dtype}")
    return t
