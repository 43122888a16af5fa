"""GPU kernels: CuPy raw kernels (NVRTC) over `.cu` sources that sit beside their Python wrappers.

Importable anywhere; calling a kernel on a machine without a CUDA device raises `NoCudaDevice`. Every kernel
compiles without a GPU too (`_cuda.compile_for`, `sass`), for sm_89, sm_90, sm_120 and sm_121.
Every kernel is checked against the CPU reference in `fp8lab.formats` / `fp8lab.scaling` (through
`reference`: bit for bit for rounding, within `tolerances` for matmuls) before it is timed.
"""
from ._cuda import NoCudaDevice, compile_for, cuda_available, device_arch, load_module

__all__ = ["NoCudaDevice", "compile_for", "cuda_available", "device_arch", "load_module"]
