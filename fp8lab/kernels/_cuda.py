"""Compile the `.cu` files beside this module for the running device's own arch (NVRTC through CuPy), or for any
listed arch without a GPU (NVRTC through ctypes, fp8lab/kernels/nvrtc.py) with exactly the same options.

    mod = load_module("quant.cu")             # on an H200: compiled for sm_90; gemm_w8a8_wgmma.cu for sm_90a
    k = mod.get_function("quant_group_bf16_e4m3_hw")
    cubin, log = compile_for("gemm_w8a8.cu", 121)   # no GPU needed: the cubin a GB10 would run

On a machine without CuPy or without a CUDA device, `load_module` raises `NoCudaDevice` with a plain message;
importing fp8lab.kernels never fails.

Why the arch matters: a kernel compiled for an older virtual arch runs through the driver's PTX JIT and uses
none of the chip's own instructions. Each source declares in sources.py whether it needs the arch-specific
target (sm_90a, sm_120a, sm_121a: wgmma, the block-scaled FP4 MMA), and where it builds at all.

The options, exactly (`nvrtc_options`): ours -- --std=c++17, --gpu-architecture, -I<this folder>, and the -D
defines (format constants from fp8lab.formats through reference.cuda_defines(), plus the source's instantiation
lists) -- then what CuPy 14 appends to every NVRTC compile (cupy/cuda/compiler.py, _compile_with_cache_cuda and
_compile_using_nvrtc_no_warning): -ftz=true, -arch=sm_<device cc> and --device-as-default-execution-space. With
both an `sm_90a` and an `sm_90` architecture option NVRTC builds for sm_90a (checked: the wgmma kernels compile).
CuPy also adds include folders for its own headers, which these sources never include. No --use_fast_math: the
rounding kernels must be bit-exact against the CPU reference; -ftz=true flushes subnormals in C++ float
arithmetic, so kernels that must keep subnormals write the critical steps in PTX without .ftz (ptx.cuh f_*).
"""
from __future__ import annotations

import contextlib
import functools
from pathlib import Path

from fp8lab import store

from . import sources as _sources

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


def device_cc() -> int:
    """The running device's compute capability as an int: 90 on an H200, 121 on a GB10."""
    return int(_cupy().cuda.Device().compute_capability)


def device_arch(filename: str | None = None) -> str:
    """The NVRTC arch for this device: 'sm_90' on an H200, or the target `filename` declares ('sm_90a' for wgmma)."""
    cc = device_cc()
    return _sources.get(filename).target(cc) if filename else f"sm_{cc}"


def source_defines(filename: str) -> tuple[str, ...]:
    """The -D defines of a source: the format constants (reference.cuda_defines) and its instantiation lists."""
    from .reference import cuda_defines

    return cuda_defines() + _sources.get(filename).instantiation_defines()


def compile_options(filename: str, arch: str) -> tuple[str, ...]:
    """What load_module passes to CuPy for `filename` compiled for `arch` ('sm_90a', ...)."""
    return ("--std=c++17", f"--gpu-architecture={arch}", f"-I{KERNEL_DIR}") + tuple(f"-D{d}" for d in source_defines(filename))


def cupy_appended_options(cc: int) -> tuple[str, ...]:
    """What CuPy 14's NVRTC path appends after our options on a device of compute capability `cc`."""
    return ("-ftz=true", f"-arch=sm_{cc}", "--device-as-default-execution-space")


def nvrtc_options(filename: str, cc: int) -> tuple[str, ...]:
    """The complete NVRTC option list that compiles `filename` on a device of compute capability `cc`."""
    return compile_options(filename, _sources.get(filename).target(cc)) + cupy_appended_options(cc)


@functools.lru_cache(maxsize=None)
def compile_for(filename: str, cc: int, ptxas_verbose: bool = False) -> tuple[bytes, str]:
    """(cubin, log) of `filename` as a device of compute capability `cc` would run it; no GPU needed.

    ptxas_verbose adds -Xptxas=-v (registers, spills, shared memory per kernel in the log); that flag changes
    no code. Raises ValueError where the source does not build for that arch (sources.py says why).
    """
    from . import nvrtc

    opts = nvrtc_options(filename, cc) + (("-Xptxas=-v",) if ptxas_verbose else ())
    return nvrtc.compile_cubin((KERNEL_DIR / filename).read_text(), opts, name=filename)


@functools.lru_cache(maxsize=None)
def smem_limits(device: int | None = None) -> tuple[int, int]:
    """(shared memory one block may opt in to, shared memory per SM) of this device, in bytes: 232448 and 233472
    on an H100 / H200, 101376 and 102400 on sm_120 / sm_121 (the GB10) and sm_89."""
    dev = _cupy().cuda.Device(device)
    a = dev.attributes
    return int(a["MaxSharedMemoryPerBlockOptin"]), int(a["MaxSharedMemoryPerMultiprocessor"])


def allow_dynamic_smem(fn, smem: int) -> None:
    """Let `fn` (a CuPy kernel) launch with `smem` bytes of dynamic shared memory. The limit belongs to the kernel,
    not to one launch: it is only ever raised, so preparing a smaller launch of the same kernel later does not break
    a larger one prepared earlier (as assigning it each time did). More than the device allows: a one-line error."""
    optin = smem_limits()[0]
    if smem > optin:
        raise ValueError(f"{smem} bytes of shared memory per block: this device allows {optin} "
                         f"(sm_{device_cc()}); pick a smaller configuration")
    if smem > 48 * 1024 and smem > fn.max_dynamic_shared_size_bytes:
        fn.max_dynamic_shared_size_bytes = smem


def headers_stamp() -> str:
    """A comment naming the hash of every shared header (*.cuh) of this folder. CuPy's on-disk cache is keyed by
    the source text and the options, not by what the source includes: appended to the source, the stamp makes an
    edited header compile afresh instead of loading a stale cubin."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted(KERNEL_DIR.glob("*.cuh")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return f"\n// fp8lab headers {h.hexdigest()[:16]}\n"


@contextlib.contextmanager
def patched_sources(patches: dict):
    """Compile from a copy of this folder's .cu / .cuh files with text replacements applied, for the duration of
    the block: {filename: [(old, new), ...]}; every `old` must occur (ValueError otherwise: a patch that no longer
    applies is an error, not a silent no-op). Kernels loaded inside stay usable after the block; the caches are
    cleared on the way in and out, so nothing compiled from the copy is handed out afterwards. The copy lives in a
    folder named by the patches (under the temporary directory, rewritten each time), so CuPy's compile cache, keyed
    by source text and options, serves the same patched kernel again without recompiling; a file is rewritten only
    when its text changed, through a temporary file and a rename, so a reader never sees half of one.
    Not for concurrent use: the folder is process-wide state, so no other thread may compile while the block runs;
    fp8lab.kernels.sass.kernels keeps its own cache (call it outside the block, or use compile_for directly).

    The leave-one-out timings (gemm_prefill.bench_gap) use it: a stage's cost is the time it takes away."""
    import hashlib
    import tempfile

    global KERNEL_DIR
    orig = KERNEL_DIR
    d = Path(tempfile.gettempdir()) / ("fp8lab_patched_" + hashlib.sha256(repr(sorted(patches.items())).encode()).hexdigest()[:12])
    d.mkdir(exist_ok=True)
    texts = {f.name: f.read_text() for f in orig.iterdir() if f.suffix in (".cu", ".cuh")}
    for fname, subs in patches.items():
        if fname not in texts:
            raise ValueError(f"patch names {fname!r}, which is not a kernel source of {orig}")
        for old, new in subs:
            if old not in texts[fname]:
                raise ValueError(f"patch does not apply to {fname}: {old[:60]!r} not found")
            texts[fname] = texts[fname].replace(old, new)
    for name, text in texts.items():
        f = d / name
        if not f.exists() or f.read_text() != text:
            store.atomic_write_text(f, text)
    KERNEL_DIR = d
    load_module.cache_clear()
    compile_for.cache_clear()
    try:
        yield d
    finally:
        KERNEL_DIR = orig
        load_module.cache_clear()
        compile_for.cache_clear()


#: {filename: edit}: while edited_binary is active, load_module loads edit(cubin) for that source
_BINARY_EDITS: dict = {}


@contextlib.contextmanager
def edited_binary(filename: str, edit):
    """Load `filename` from an edited cubin for the duration of the block: load_module compiles it with compile_for
    (the options CuPy would use, for this device) and loads edit(cubin) (a function bytes -> bytes; sass.edit_control
    rewrites control bits). Kernels loaded inside stay usable after the block; load_module's cache is cleared on the
    way in and out, so nothing edited is handed out afterwards. Not for concurrent use (process-wide state).

    The control-bit experiments of the prefill gap run (gemm_prefill.CONTROL_EDITS) use it. Nesting two blocks on
    the same source is an error (the inner one would end the outer one's edit)."""
    if filename in _BINARY_EDITS:
        raise ValueError(f"{filename} is already loaded from an edited cubin: one edit at a time")
    _BINARY_EDITS[filename] = edit
    load_module.cache_clear()
    try:
        yield
    finally:
        _BINARY_EDITS.pop(filename, None)
        load_module.cache_clear()


def _load_edited(filename: str, edit):
    import hashlib
    import tempfile

    cubin = edit(compile_for(filename, device_cc())[0])
    path = Path(tempfile.gettempdir()) / f"fp8lab_edited_{hashlib.sha256(cubin).hexdigest()[:16]}.cubin"
    if not path.is_file() or path.read_bytes() != cubin:  # a file left there is used only if it holds these bytes
        store.atomic_write_bytes(path, cubin)
    return _cupy().RawModule(path=str(path))


@functools.lru_cache(maxsize=None)
def load_module(filename: str):
    """Compile `fp8lab/kernels/<filename>` with NVRTC for this device and return a `cupy.RawModule`."""
    cp = _cupy()
    if filename in _BINARY_EDITS:
        return _load_edited(filename, _BINARY_EDITS[filename])
    src = (KERNEL_DIR / filename).read_text() + headers_stamp()
    opts = compile_options(filename, device_arch(filename))
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


def require_tensor(t, name: str, error: type[Exception] = TypeError):
    """`t` must be a torch.Tensor: a one-line `error` naming the argument otherwise."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise error(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def bf16_tensor(t, name: str, ndim: int, layout: str, error: type[Exception] | None = None):
    """`t` must be a bfloat16 torch.Tensor with `ndim` dimensions (`layout` names them for the message: "[M, K]").

    One-line errors before any CUDA call: TypeError for the type and the dtype and ValueError for the dimensions, or
    `error` for all three (the attention wrappers raise their own ValueError subclass)."""
    import torch

    require_tensor(t, name, error or TypeError)
    if t.dtype != torch.bfloat16:
        raise (error or TypeError)(f"{name} must be bfloat16, got {t.dtype}")
    if t.dim() != ndim:
        raise (error or ValueError)(f"{name} must be {ndim}-D {layout}, got shape {tuple(t.shape)}")
    return t


def byte_codes(t, name: str, what: str = "E4M3 codes"):
    """A tensor of 8-bit codes as uint8, viewing torch.float8_e4m3fn in place; a clear TypeError otherwise.

    Every kernel wrapper that takes stored bytes (E4M3 weights, E4M3 scales, packed E2M1 nibbles) checks them
    here, on the CPU, before any CUDA call.
    """
    import torch

    require_tensor(t, name)
    if t.dtype == torch.float8_e4m3fn:
        return t.view(torch.uint8)
    if t.dtype != torch.uint8:
        raise TypeError(f"{name} must hold {what} as uint8 or torch.float8_e4m3fn, got {t.dtype}")
    return t
