"""W8A16 decode GEMV, version 6: bf16 activations as two E4M3 terms, FP8 weights multiplied in shared memory (gemv_v6.cu).

    y = gemv_v6(x, w, scale)      # x bf16 [M, K] (M = 1..16), w e4m3 [N, K], y bf16 [M, N]; scale [N] or 128x128 blocks

Versions 1-5 (gemv_fp8.py, gemv_v3.py) widen each FP8 weight to bf16 in registers. Version 6 does the opposite: it
narrows the (few) activations instead, so the weights can stay FP8 all the way into Hopper's FP8 tensor cores (wgmma
reads them from shared memory, where TMA copied them; no instruction touches a weight byte). To keep bf16's precision,
each activation becomes two E4M3 numbers per 128-wide k-block:

    e = ceil(log2 amax) - 8 (fp8lab.scaling.mx_scale_exponent, rule "ceil": a power of two, so x / 2**e is exact and
    never above 256),  q = x / 2**e,  hi = e4m3(q),  lo = e4m3(16 (q - hi)),  x ~= 2**e (hi + lo / 16)

Worked example (one 128-element group whose amax is 256, so 2**e = 1): x = 3.3 (bf16 3.296875) -> hi = 3.25 (E4M3
steps are 0.25 in [2, 4)), 16 (q - hi) = 0.75 -> lo = 0.75 (exact), hi + lo / 16 = 3.296875: every bit of the bf16.

    x8, sx = split_reference(x)          # [NB, K] uint8 (row 2m = hi of token m, 2m + 1 = lo), fp32 2**e [M, K / 128]
    split_values(x)                      # float64 [M, K]: s (hi + lo / 16), what the tensor cores multiply
    reference(x, w, scale)               # float64 y of the split activations (the kernel's answer up to fp32 sums)

Because the scale is a power of two and q - hi is exact, hi + lo / 16 holds all 8 significant bits of a bf16 whenever
lo is a normal E4M3 number: the split is exact except for values far below their group's largest (subnormal terms).
The kernel is checked against `reference` with tolerances.matmul("wgmma", K); how far the split moves y from the
exact W8A16 answer (gemv_fp8.reference) is measured, not assumed (`split_error`).

Two ways to run it, both kept and timed: the split as its own small kernel (gemv6_split) followed by the GEMV, or
fused into the GEMV's consumer warpgroup (prepare(..., fused=True)); fused_default picks per call.
Limits: sm_90a only (wgmma); K % 128 == 0; N % 64 == 0 (N % 128 for 128-row tiles).
"""
from __future__ import annotations

import ctypes

import torch

from . import _cuda
from . import gemv_fp8 as F8

#: compiled (block scales 0/1, NB activation rows, MH m64 sub-tiles per stage, ST stages)
KERNELS = {(bl, nb, mh, st, fx) for bl in (0, 1) for nb in (8, 16, 32)
           for (mh, st) in ((1, 2), (1, 3), (1, 4), (1, 8), (2, 2), (2, 3), (2, 4), (2, 6), (2, 8)) for fx in (0, 1)}
THREADS = 160  # one consumer warpgroup + one producer warp


def cuda_defines() -> tuple[str, ...]:
    from .sources import instances

    return (instances("FP8LAB_GEMV_V6", "GEMV6", KERNELS),)


def rows_for(M: int) -> int:
    """NB, the activation rows the MMA multiplies: two per token, padded to 8, 16 or 32."""
    return 8 if M <= 4 else 16 if M <= 8 else 32


def kernel_name(block: bool, nb: int, mh: int, st: int, fused: bool = True) -> str:
    return f"gemv6_{int(block)}_n{nb}_m{mh}_s{st}_x{int(fused)}"


def smem_bytes(nb: int, mh: int, st: int) -> int:
    return st * (mh * 64 * 128 + nb * 128) + 1024  # + the 1024-byte alignment slack


# ---- the split (CPU or GPU; the kernel is checked against it bit for bit) ------------------------------------------
def split_reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x8 uint8 [NB, K], sx fp32 [M, K / 128]) on x's device: per 128-wide group, e = scaling.mx_scale_exponent(amax,
    E4M3, "ceil") of the group's finite amax, q = x / 2**e (exact), hi = e4m3(q), lo = e4m3(16 (q - hi)); row 2m of
    x8 holds token m's hi codes, row 2m + 1 its lo codes, rows 2M .. NB - 1 are zero; sx = 2**e."""
    from fp8lab import scaling
    from fp8lab.formats import E4M3, E8M0

    M, K = x.shape
    if K % 128:
        raise ValueError(f"K = {K} is not a multiple of 128: the split works in 128-wide k-blocks")
    xf = x.float()
    amax = torch.where(torch.isfinite(xf), xf.abs(), torch.zeros_like(xf)).view(M, K // 128, 128).amax(dim=-1)
    e = scaling.mx_scale_exponent(amax, E4M3, "ceil")
    sx = E8M0.decode((e + E8M0.bias).to(torch.uint8)).float().to(x.device)
    q = xf * torch.exp2(-e.float()).repeat_interleave(128, dim=1)        # exact: powers of two
    hi = E4M3.encode(q)
    lo = E4M3.encode((q - E4M3.table().float().to(x.device)[hi.long()]) * 16.0)
    x8 = torch.zeros(rows_for(M), K, dtype=torch.uint8, device=x.device)
    x8[0:2 * M:2], x8[1:2 * M:2] = hi, lo
    return x8, sx


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
def default_config(M: int, N: int, sms: int = 132) -> tuple[int, int, int]:
    """(MH, ST, G): whole 64-row tiles, one CTA each (G = 0: no tile is cut, no fix-up) where there are enough of them
    to fill the GPU (N / 64 >= 1.5 SMs); otherwise 128-row tiles cut stream-K over one CTA per SM (G = 1).

        default_config(1, 14336) -> (1, 4, 0)     default_config(1, 4096) -> (2, 4, 1)
    """
    return (1, 4, 0) if N % 64 == 0 and N // 64 >= 1.5 * sms else (2, 4, 1)


def grid_plan(T: int, KB: int, grid: int) -> tuple[int, int]:
    """(P, maxp): the CTAs launched for T tiles of KB units on `grid` CTAs, and the most pieces a tile is cut into (the
    fix-up's slots per tile). P = min(grid, T KB): at most one CTA per unit, so every CTA's range [c U / P, (c + 1) U / P)
    is non-empty and a tile's pieces are exactly the CTAs from the owner of its first unit to the owner of its last
    (the kernel's fix-up counts that many arrivals). The ranges and owners are gemv_v3.streamk_plan's (grains of one
    unit, the CTAs as its warps).

        grid_plan(112, 32, 132) -> (132, 3)     grid_plan(224, 32, 224) -> (224, 1)   # one CTA per whole tile
    """
    from .gemv_v3 import streamk_plan

    P = min(grid, T * KB)
    return P, streamk_plan(T, KB, P)["smax"]


def fused_default(M: int, G: int) -> bool:
    """Split inside the GEMV where that work is small: a stream-K grid (G >= 1: about one CTA per SM, so each group is
    split by few CTAs) and at most 4 tokens (one group per consumer warp). Elsewhere the split kernel goes first.
    (In the H100 probe the fused call beat the two-kernel one only at the stream-K shapes at M = 1.)

        fused_default(1, 1) -> True     fused_default(16, 1) -> False     fused_default(1, 0) -> False
    """
    return G >= 1 and M <= 4


def _launch_ex(fn_ptr: int, grid: int, block: int, params, smem: int, stream: int, pdl: bool) -> None:
    """cuLaunchKernelEx with prebuilt params (launch_ex's structures; the TMA maps go by value as 128-byte buffers,
    which launch_ex.launch's marshalling does not take: teaching it would change a source the recorded GEMM and GEMV
    runs are digested against, gemm_report.SOURCES)."""
    from . import launch_ex

    attr = launch_ex._Attr()
    attr.id = launch_ex.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.i = 1
    cfg = launch_ex._Config(grid, 1, 1, block, 1, 1, int(smem), ctypes.c_void_p(int(stream)),
                            ctypes.pointer(attr) if pdl else None, 1 if pdl else 0)
    rc = launch_ex._driver().cuLaunchKernelEx(ctypes.byref(cfg), ctypes.c_void_p(fn_ptr), params, None)
    if rc != 0:
        raise RuntimeError(f"cuLaunchKernelEx failed with CUresult {rc}")


class Launch:
    """The GEMV (fused: one kernel) or split + GEMV on torch's current stream (capturable in a CUDA graph). The GEMV is
    launched with programmatic dependent launch (pdl=True): its CTAs start while the previous kernel (the split)
    finishes and copy weights until they need its output. gemv_only() launches the GEMV alone, split_only() the
    split kernel alone."""

    def __init__(self, split, fused, fn_ptr, grid, params, smem, out, pdl=True):
        self.split, self.fused, self.fn_ptr, self.grid, self.params = split, fused, fn_ptr, grid, params
        self.smem, self.out, self.pdl = smem, out, pdl

    def split_only(self) -> torch.Tensor:
        """The split kernel alone (x8, sx: what the unfused GEMV reads; a fused launch does not need it)."""
        cp = _cuda._cupy()
        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            self.split[0](*self.split[1:])
        return self.out

    def gemv_only(self, pdl: bool | None = None) -> torch.Tensor:
        _launch_ex(self.fn_ptr, self.grid, THREADS, self.params[0], self.smem, torch.cuda.current_stream().cuda_stream,
                   self.pdl if pdl is None else pdl)
        return self.out

    def __call__(self) -> torch.Tensor:
        if not self.fused:
            self.split_only()
        return self.gemv_only()


def check_config(config, M: int, N: int, mode: str) -> tuple[int, int, int]:
    have = sorted({k[2:4] for k in KERNELS})
    if not (isinstance(config, tuple) and len(config) == 3 and (mode == "block", rows_for(M), *config[:2], 1) in KERNELS
            and isinstance(config[2], int) and 0 <= config[2] <= 8):
        raise ValueError(f"version 6 config (MH, ST, G) = {config}: (MH, ST) must be compiled ({have}) and G = 0 (a "
                         f"CTA per tile) or 1..8 (stream-K over G CTAs per SM)")
    mh = config[0]
    if N % (64 * mh):
        raise ValueError(f"N = {N} is not a multiple of {64 * mh}: MH = {mh} takes {64 * mh}-row tiles")
    return config


def prepare(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor, *, config: tuple | None = None,
            out: torch.Tensor | None = None, grid: int | None = None, pdl: bool = True, fused: bool | None = None) -> Launch:
    """Validate, allocate the split buffers and the stream-K workspace, encode the tensor maps; returns a Launch.
    config (MH, ST, G), default default_config; grid: the number of CTAs (overrides G). fused=False: gemv6_split
    first, then the GEMV reads its output by TMA (two kernels, the second PDL-launched); fused=True: the GEMV splits x
    itself, one unit ahead (one kernel; every CTA splits every k-block it reads, so the work grows with the CTA count
    and the tokens: tools/gpu/v6_probe.py times both); None: fused_default."""
    from . import launch_ex, tma

    mode, M, N, K = F8.check_args(x, w, scale)
    if _cuda.device_cc() != 90:
        raise RuntimeError(f"version 6 needs sm_90a (wgmma); this GPU is sm_{_cuda.device_cc()}")
    sms = tma.sm_count()
    mh, st, G = check_config(config or default_config(M, N, sms), M, N, mode)
    if fused is None:
        fused = fused_default(M, G)
    nb, KB = rows_for(M), K // 128
    w = F8._fp8_codes(w, "w").contiguous()
    x, scale = x.contiguous(), scale.contiguous()
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
    fn = mod.get_function(kernel_name(mode == "block", nb, mh, st, fused))
    smem = smem_bytes(nb, mh, st)
    fn.max_dynamic_shared_size_bytes = smem
    T = N // (64 * mh)
    U = T * KB
    if grid is None:
        grid = T if G == 0 else sms * min(G, launch_ex.resident_ctas(fn, THREADS, smem))
    P, maxp = grid_plan(T, KB, grid)
    NA = mh * (nb // 8) * 2
    ws = torch.empty(max(1, T * maxp * NA * 128 if maxp > 1 else 1), dtype=torch.float32, device=x.device)
    cnt = torch.zeros(T, dtype=torch.int32, device=x.device)
    mW, mX = tma.map_2d(N, K, 1, 64 * mh, 128), tma.map_2d(nb, K, 1, nb, 128)
    descs = [(ctypes.c_ubyte * tma.DESC_BYTES).from_buffer_copy(tma.encode(m, t.data_ptr())) for m, t in
             ((mW, w), (mX, x8))]
    vals = descs + [ctypes.c_void_p(t.data_ptr()) for t in (x, sx, scale, out)] + \
        [ctypes.c_int32(v) for v in (M, N, K)] + [ctypes.c_void_p(t.data_ptr()) for t in (ws, cnt)] + [ctypes.c_int32(maxp)]
    params = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
    split = (fsplit, (KB, -(-M // 4)), (128,), (_cuda.as_cupy(x), _cuda.as_cupy(x8), _cuda.as_cupy(sx), cp.int32(M),
                                                 cp.int32(K)))
    launch = Launch(split, fused, launch_ex.function_pointer(fn), P, (params, vals), smem, out, pdl)
    launch.keep = (x, w, scale, x8, sx, ws, cnt)  # the maps and params hold raw addresses
    launch.x8, launch.sx = x8, sx
    launch.info = {"grid": P, "tiles": T, "units": U, "maxp": maxp, "smem": smem, "config": (mh, st, G), "nb": nb,
                   "fused": fused, "kernel": kernel_name(mode == "block", nb, mh, st, fused)}
    return launch


def gemv_v6(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor, *, config: tuple | None = None,
            out: torch.Tensor | None = None) -> torch.Tensor:
    """y[M, N] = x @ dequant(w)^T through the split activations (see the module doc)."""
    return prepare(x, w, scale, config=config, out=out)()


__all__ = ["gemv_v6", "prepare", "split_reference", "split_values", "reference", "split_error", "KERNELS",
           "rows_for", "default_config", "fused_default", "grid_plan"]
