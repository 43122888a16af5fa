"""GPU kernels: CuPy raw kernels (NVRTC) over `.cu` sources that sit beside their Python wrappers.

Importable anywhere; calling a kernel on a machine without a CUDA device raises `NoCudaDevice`.
Every kernel is checked against the CPU reference in `fp8lab.formats` / `fp8lab.scaling`
(bit for bit for rounding, within a stated tolerance for matmuls) before it is timed.
"""
from ._cuda import NoCudaDevice, cuda_available, device_arch, load_module

__all__ = ["NoCudaDevice", "cuda_available", "device_arch", "load_module"]
