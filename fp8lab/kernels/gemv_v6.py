"""W8A16 decode GEMV, version 6: bf16 activations as two E4M3 terms, FP8 weights multiplied in shared memory (gemv_v6.cu).

    y = gemv_v6(x, w, scale)      # x bf16 [M, K] (M = 1..16), w e4m3 [N, K], y bf16 [M, N]; scale [N] or 128x128 blocks

Versions 1-5 (gemv_fp8.py, gemv_v3.py) widen each FP8 weight to bf16 in registers. Version 6 does the opposite: it
narrows the (few) activations instead, so the weights can stay FP8 all the way into Hopper's FP8 tensor cores (wgmma
reads them from shared memory, where TMA copied them; no instruction touches a weight byte). To keep bf16's precision,
each activation becomes two E4M3 numbers per 128-wide k-block:

    s = amax / 448 (fp8lab.scaling's rule),  q = x / s,  hi = e4m3(q),  lo = e4m3(16 (q - hi)),  x ~= s (hi + lo / 16)

Worked example (one 128-element group whose amax is 448, so s = 1): x = 3.3 -> q = 3.3, hi = 3.25 (E4M3 steps are
0.25 in [2, 4)), q - hi = 0.05 -> lo = e4m3(0.8) = 0.8125, hi + lo / 16 = 3.30078: the 8 significant bits of a bf16.

    x8, sx = split_reference(x)          # [NB, K] uint8 (row 2m = hi of token m, 2m + 1 = lo), fp32 [M, K / 128]
    split_values(x)                      # float64 [M, K]: s (hi + lo / 16), what the tensor cores multiply
    reference(x, w, scale)               # float64 y of the split activations (the kernel's answer up to fp32 sums)

The kernel is checked against `reference` with tolerances.matmul("wgmma", K); how far the split moves y from the exact
W8A16 answer (gemv_fp8.reference) is measured, not assumed (`split_error`).
Limits: sm_90a only (wgmma); K % 128 == 0; N % 64 == 0 (N % 128 for 128-row tiles).
"""
from __future__ import annotations

import torch

from . import _cuda
from . import gemv_fp8 as F8
from . import reference as reference_values

#: compiled (block scales 0/1, NB activation rows, MH m64 sub-tiles per stage, ST stages)
KERNELS = {(bl, nb, mh, st) for bl in (0, 1) for nb in (8, 16, 32) for (mh, st) in ((1, 4), (1, 8), (2, 4), (2, 6), (2, 8))}
THREADS = 160  # one consumer warpgroup + one producer warp


def cuda_defines() -> tuple[str, ...]:
    from .sources import instances

    return (instances("FP8LAB_GEMV_V6", "GEMV6", KERNELS),)


def rows_for(M: int) -> int:
    """NB, the activation rows the MMA multiplies: two per token, padded to 8, 16 or 32."""
    return 8 if M <= 4 else 16 if M <= 8 else 32


def kernel_name(block: bool, nb: int, mh: int, st: int) -> str:
    return f"gemv6_{int(block)}_n{nb}_m{mh}_s{st}"


def smem_bytes(nb: int, mh: int, st: int) -> int:
    return st * (mh * 64 * 128 + nb * 128) + 1024  # + the 1024-byte alignment slack


# ---- the split (CPU or GPU; the kernel is checked against it bit for bit) ------------------------------------------
def split_reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x8 uint8 [NB, K], sx fp32 [M, K / 128]): hi = quantize_group(x, 128) (the lab's scale rule, on x's device),
    lo = e4m3(16 (x / s - hi)); rows 2M .. NB - 1 are zero."""
    from fp8lab.formats import E4M3

    M, K = x.shape
    if K % 128:
        raise ValueError(f"K = {K} is not a multiple of 128: the split works in 128-wide k-blocks")
    hi, sx = reference_values.quantize_group(x, 128)
    q = x.float() / sx.repeat_interleave(128, dim=1)
    r = q - E4M3.table().float().to(x.device)[hi.long()]
    lo = E4M3.encode(r * 16.0)
    x8 = torch.zeros(rows_for(M), K, dtype=torch.uint8, device=x.device)
    x8[0:2 * M:2], x8[1:2 * M:2] = hi, lo
    return x8, sx.float()


def split_values(x: torch.Tensor) -> torch.Tensor:
    """float64 [M, K]: the activations the tensor cores see, s (hi + lo / 16)."""
    x8, sx = split_reference(x)
    M = x.shape[0]
    v = F8.decode_e4m3(x8[0:2 * M:2]) + F8.decode_e4m3(x8[1:2 * M:2]) / 16.0
    return v * sx.double().repeat_interleave(128, dim=1)


def reference(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """float64 y = split_values(x) @ dequant(w)^T: what version 6 computes before its fp32 sums and bf16 output."""
    return split_values(x) @ F8.dequant_weight(w, scale).T


def split_error(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> dict:
    """How far the split moves y from the exact W8A16 answer, in units of sum_k |x_k w_k| (float64, on x's device):
    {"max": worst element, "rms": root mean square}. Compare: one bf16 rounding of every x_k is up to 2**-9."""
    wd = F8.dequant_weight(w, scale)
    d = (split_values(x) - x.double()) @ wd.T
    terms = x.double().abs() @ wd.abs().T
    rel = d.abs() / terms.clamp_min(1e-300)
    return {"max": float(rel.max()), "rms": float(rel.pow(2).mean().sqrt())}


# ---- the launch ---------------------------------------------------------------------------------------------------
def default_config(M: int, N: int) -> tuple[int, int]:
    """(MH, ST): 128-row tiles with 4 stages where N allows, else 64-row tiles with 8."""
    return (2, 4) if N % 128 == 0 else (1, 8)


class Launch:
    """split + GEMV on torch's current stream (capturable in a CUDA graph); `gemv_only()` launches the GEMV alone
    (on the split activations of the last call)."""

    def __init__(self, split, gemv, out):
        self.split, self.gemv, self.out = split, gemv, out

    def __call__(self) -> torch.Tensor:
        cp = _cuda._cupy()
        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            self.split[0](*self.split[1:])
            self.gemv[0](*self.gemv[1:])
        return self.out

    def gemv_only(self) -> torch.Tensor:
        cp = _cuda._cupy()
        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            self.gemv[0](*self.gemv[1:])
        return self.out


def check_config(config, M: int, N: int, mode: str) -> tuple[int, int]:
    have = sorted({k[2:] for k in KERNELS})
    if not (isinstance(config, tuple) and len(config) == 2 and (mode == "block", rows_for(M), *config) in KERNELS):
        raise ValueError(f"version 6 config (MH, ST) = {config} is not compiled; compiled: {have}")
    mh = config[0]
    if N % (64 * mh):
        raise ValueError(f"N = {N} is not a multiple of {64 * mh}: MH = {mh} takes {64 * mh}-row tiles")
    return config


def prepare(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor, *, config: tuple | None = None,
            out: torch.Tensor | None = None, grid: int | None = None) -> Launch:
    """Validate, allocate the split buffers and the stream-K workspace, encode the tensor maps; returns a Launch."""
    from . import launch_ex, tma

    mode, M, N, K = F8.check_args(x, w, scale)
    if _cuda.device_cc() != 90:
        raise RuntimeError(f"version 6 needs sm_90a (wgmma); this GPU is sm_{_cuda.device_cc()}")
    mh, st = check_config(config or default_config(M, N), M, N, mode)
    nb, KB = rows_for(M), K // 128
    w = F8._fp8_codes(w, "w").contiguous()
    x = x.contiguous()
    if out is None:
        out = torch.empty((M, N), dtype=torch.bfloat16, device=x.device)
    elif out.shape != (M, N) or out.dtype != torch.bfloat16 or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous bf16 tensor of shape {(M, N)}")
    x8 = torch.zeros(nb, K, dtype=torch.uint8, device=x.device)
    sx = torch.empty(M, KB, dtype=torch.float32, device=x.device)
    tma.check_device()
    cp = _cuda._cupy()
    mod = _cuda.load_module("gemv_v6.cu")
    fsplit = mod.get_function("gemv6_split")
    fn = mod.get_function(kernel_name(mode == "block", nb, mh, st))
    smem = smem_bytes(nb, mh, st)
    fn.max_dynamic_shared_size_bytes = smem
    T = N // (64 * mh)
    U = T * KB
    # at most one CTA per unit: then every CTA's range is non-empty, and a tile's pieces are exactly the CTAs from
    # the owner of its first unit to the owner of its last (the fix-up counts that many arrivals)
    P = min(grid or tma.sm_count() * launch_ex.resident_ctas(fn, THREADS, smem), U)
    owner = lambda u: ((u + 1) * P - 1) // U  # noqa: E731  (the kernel's v6_owner)
    maxp = max(owner(t * KB + KB - 1) - owner(t * KB) + 1 for t in range(T))
    NA = mh * (nb // 8) * 2
    ws = torch.empty(max(1, T * maxp * NA * 128 if maxp > 1 else 1), dtype=torch.float32, device=x.device)
    cnt = torch.zeros(T, dtype=torch.int32, device=x.device)
    mW, mX = tma.map_2d(N, K, 1, 64 * mh, 128), tma.map_2d(nb, K, 1, nb, 128)
    dW, dX = (tma.kernel_arg(tma.encode(m, t.data_ptr())) for m, t in ((mW, w), (mX, x8)))
    split = (fsplit, (KB, M), (128,), (_cuda.as_cupy(x), _cuda.as_cupy(x8), _cuda.as_cupy(sx), cp.int32(M), cp.int32(K)))
    gemv = (lambda *a: fn(*a, shared_mem=smem), (P,), (THREADS,),
            (dW, dX, _cuda.as_cupy(sx), _cuda.as_cupy(scale.contiguous()), _cuda.as_cupy(out), cp.int32(M), cp.int32(N),
             cp.int32(K), _cuda.as_cupy(ws), _cuda.as_cupy(cnt), cp.int32(maxp)))
    launch = Launch(split, gemv, out)
    launch.keep = (x, w, scale, x8, sx, ws, cnt)  # the maps hold raw addresses
    launch.x8, launch.sx = x8, sx
    launch.info = {"grid": P, "tiles": T, "units": U, "maxp": maxp, "smem": smem, "config": (mh, st), "nb": nb,
                   "kernel": kernel_name(mode == "block", nb, mh, st)}
    return launch


def gemv_v6(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor, *, config: tuple | None = None,
            out: torch.Tensor | None = None) -> torch.Tensor:
    """y[M, N] = x @ dequant(w)^T through the split activations (see the module doc)."""
    return prepare(x, w, scale, config=config, out=out)()


def weight_bytes(N: int, K: int) -> int:
    return N * K


__all__ = ["gemv_v6", "prepare", "split_reference", "split_values", "reference", "split_error", "KERNELS",
           "rows_for", "default_config"]
