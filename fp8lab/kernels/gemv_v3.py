"""Decode GEMV, version 3 (gemv_v3.cu): packed weights streamed evenly over a persistent grid, fused epilogues.

    pw = pack_fp8(codes, scale)                    # once, at load time (E4M3 [N, K] + per-channel [N] or 128x128 scales)
    pw = pack_nvfp4(w_packed, scale_codes, gs)     # NVFP4 (E2M1 nibbles [N, K/2], E4M3 scales [N, K/16], global)
    y = gemv_v3(x, pw)                             # x bf16 [M, K], M = 1..32  ->  y bf16 [M, N]
    y = gemv_v3(x, pw, epilogue="residual", residual=h)      # y = h + x . W^T        (decode layer: O, down)
    pw = pack_fp8(codes_gate_up, scale, interleave="gate_up")  # [2I, K]: gate rows, then up rows
    a = gemv_v3(x, pw, epilogue="silu_mul")                  # a = silu(x . Wg^T) * (x . Wu^T), [M, I]

Worked example (what the kernel computes, checked against `reference` in the tests):
    codes [[0x38, 0xB8]] (= [[1.0, -1.0]]), per-channel scale [0.5], x [[3.0, 1.0]]  ->  y = 0.5 * (3 - 1) = [[1.0]]

Why pack (Marlin, Machete and TensorRT-LLM repack their weights the same way, once): the kernel's loads and bit
moves decide whether a decode GEMV reaches the memory limit. Packed, 16 rows x 64 k (FP8) or x 128 k (NVFP4) are one
1 KiB chunk in the order the lanes consume it: each warp load reads 512 contiguous bytes, the whole matrix is one
linear stream, the activations need no permutation, and FP8 widening costs 5 integer ops per 4 codes instead of
about 8 (gemv_v3.cu says how). The packed bytes are the same bytes (plus zero padding to whole tiles): nothing is
rounded again; `unpack_fp8` / `unpack_nvfp4` give the originals back (tested).

Work split (stream-K): the matrix is U units (C chunks of R 16-row tiles); warp w of the persistent grid takes
units [floor(w U / Wt), floor((w + 1) U / Wt)), so every warp streams the same bytes, whatever N / 16 is. A row
group split between warps is finished by the last one to arrive, from a workspace, summing in slot order: the
result does not depend on timing (bit-reproducible). `warp_ranges` and `streamk_plan` are the same arithmetic in
Python. At M <= 8 where the row groups fit the resident warps (`whole_groups_pays`) the ranges are whole row groups
instead (gran = units per group), and nothing is split.

Config (C, P, WPC, CPS[, split]): C chunks per unit, P units of loads in flight per warp (version 4: D ring slots),
WPC warps per CTA, CPS CTAs per SM; split = 1 / 0 forces whole row groups / stream-K (default: by N), S >= 2 split-K
in S segments per row group (S divides the units per group; each warp takes whole segments, and each group is
finished by the fix-up from its segments' warps). Where the rule picks whole groups (no 5th element; version 3, no
fused norm) they run in one-warp CTAs, WPC x CPS per SM (`ONE_WARP_CTAS`); a 5-element config is launched as given.
The compiled kernels (format, R, NT, C, P, epilogue) are KERNELS; R (16-row tiles per unit) is fixed at packing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import _cuda
from . import reference as reference_values
from .sources import GEMV_PACKED_VERSIONS, instances

MAX_M = 32
FORMATS = ("fp8c", "fp8b", "nvfp4")       # FP8 per-channel, FP8 128x128 blocks, NVFP4
EPILOGUES = {"store": 0, "residual": 1, "silu_mul": 2}
CHUNK_K = {"fp8c": 64, "fp8b": 64, "nvfp4": 128}
K_ALIGN = {"fp8c": 256, "fp8b": 256, "nvfp4": 512}    # K is padded to whole units of the largest compiled C
_FMT_ID = {"fp8c": 0, "fp8b": 1, "nvfp4": 2}

# compiled (format, R, NT, C, P, epilogue, norm): the GEMV sweep configs, then what the decode layer uses (norm = 1:
# RMSNorm of the activations fused into the kernel, decode layer variants *_fused_norm_pdl)
_GEMV = [(1, 1, 2, 2), (1, 1, 2, 3), (1, 1, 2, 4), (1, 1, 4, 2), (1, 2, 2, 2), (1, 2, 2, 3), (2, 2, 2, 2), (2, 1, 2, 2)]
_GEMV4 = [(1, 1, 2, 2), (1, 1, 2, 3), (1, 1, 1, 4), (1, 1, 4, 2), (1, 2, 2, 2), (1, 2, 2, 3), (2, 2, 2, 2), (2, 1, 2, 2)]
KERNELS = (
    {("fp8c", *c, "store", 0) for c in _GEMV} | {("fp8b", *c, "store", 0) for c in _GEMV}
    | {("nvfp4", *c, "store", 0) for c in _GEMV4}
    | {(f, 1, 1, 2, 3, e, 0) for f in ("fp8c", "nvfp4") for e in ("residual", "silu_mul")}
    | {(f, 1, 2, 2, 2, e, 0) for f in ("fp8c", "nvfp4") for e in ("store", "residual", "silu_mul")}
    | {(f, 2, 4, 2, 2, e, 0) for f in ("fp8c", "nvfp4") for e in ("store", "residual", "silu_mul")}
    | {(f, 1, nt, 2, p, e, 1) for f in ("fp8c", "nvfp4") for nt, p in ((1, 3), (2, 2)) for e in ("store", "silu_mul")}
    # the M <= 8 defaults (DEFAULT_CONFIG) with every epilogue, and the fused norm where it exists (not residual)
    | {(f, 1, 1, C, P, e, n) for f, (C, P) in (("fp8c", (4, 2)), ("nvfp4", (2, 2))) for e in EPILOGUES for n in (0, 1)
       if not (n and e == "residual")}
)


#: version 4 (gemv_v4.cu): (format, R, NT, C, D, epilogue, norm) -- D: ring slots (units in flight) per warp
KERNELS4 = (
    {(f, 1, nt, C, D, "store", 0) for f in FORMATS for nt in (1, 2) for C, D in ((2, 4), (2, 8), (4, 4))}
    | {(f, 2, 4, 2, 4, "store", 0) for f in FORMATS}
)
#: version 5 (gemv_v5.cu): (format, R, NT, C, D, epilogue, norm) -- one ring per CTA of D stages of WPC units (C R KiB
#: each, one per warp, from neighbouring row groups at the same k): stages of 8-32 KB at 4-8 warps
KERNELS5 = (
    {(f, 1, nt, C, D, "store", 0) for f in FORMATS for nt in (1, 2) for C, D in ((2, 4), (4, 2), (4, 3), (2, 6))}
    | {(f, 2, 4, 2, 3, "store", 0) for f in FORMATS}
)
VERSIONS = GEMV_PACKED_VERSIONS   # gemv_v3.cu (P units in registers), gemv_v4.cu (D ring slots per warp), gemv_v5.cu
#                                   (one ring per CTA, its warps on neighbouring row groups)
TABLES = {3: KERNELS, 4: KERNELS4, 5: KERNELS5}


def _defines(version: int, table) -> tuple[str, ...]:
    return (instances(f"FP8LAB_GEMV_V{version}", f"GEMV{version}", {(_FMT_ID[f], R, NT, C, P, EPILOGUES[e], n)
                                                                   for f, R, NT, C, P, e, n in table}),)


def cuda_defines() -> tuple[str, ...]:
    """The instantiation list as the -D define gemv_v3.cu expects: GEMV3(fmt id, R, NT, C, P, epilogue id, norm)..."""
    return _defines(3, KERNELS)


def cuda_defines4() -> tuple[str, ...]:
    """Version 4's instantiation list: GEMV4(fmt id, R, NT, C, D, epilogue id, norm)..."""
    return _defines(4, KERNELS4)


def cuda_defines5() -> tuple[str, ...]:
    """Version 5's instantiation list: GEMV5(fmt id, R, NT, C, D, epilogue id, norm)..."""
    return _defines(5, KERNELS5)


def kernel_name(fmt: str, R: int, NT: int, C: int, P: int, epilogue: str, norm: int = 0, version: int = 3) -> str:
    """gemv3_..._p{P}_... (version 3: P units in registers) or gemv{4,5}_..._d{D}_... (D ring slots per warp / stages
    per CTA)."""
    ring = "p" if version == 3 else "d"
    return f"gemv{version}_{fmt}_r{R}_nt{NT}_c{C}_{ring}{P}_e{EPILOGUES[epilogue]}_n{norm}"


def n_tiles(M: int) -> int:
    """Token tiles of 8 (the MMA's N): M <= 8 -> 1, <= 16 -> 2, <= 32 -> 4."""
    if not 1 <= M <= MAX_M:
        raise ValueError(f"gemv_v3 takes M = 1..{MAX_M} tokens, got M = {M}")
    return 1 if M <= 8 else 2 if M <= 16 else 4


# ---- packing --------------------------------------------------------------------------------------------------
@dataclass
class Packed:
    """A packed weight matrix. `data`: the byte stream; `scales`: FP8 channel [Np] fp32 / FP8 block float2
    [G, Kp/128, R] / NVFP4 scale-code stream; `gscale`: NVFP4 global scale (1-element fp32 tensor)."""

    fmt: str
    data: torch.Tensor
    scales: torch.Tensor
    gscale: torch.Tensor | None
    N: int            # logical rows (output columns; for interleave="gate_up" the 2I rows of gate + up)
    K: int
    Np: int           # packed rows (whole groups of 16 R)
    Kp: int           # packed k (whole units)
    R: int
    interleave: str | None = None

    @property
    def groups(self) -> int:
        return self.Np // (16 * self.R)

    @property
    def nout(self) -> int:
        """Output columns of the plain / residual epilogue (N), or of silu_mul (I = N / 2)."""
        return self.N // 2 if self.interleave == "gate_up" else self.N

    def weight_bytes(self) -> int:
        """Bytes the kernel streams per call (packed data + scales; zero padding included)."""
        return self.data.numel() + self.scales.numel() * self.scales.element_size()


def _row_order(N: int, R: int, interleave: str | None) -> torch.Tensor:
    """Source row of every packed row (-1: padding). gate_up: tiles of [gate 8q..8q+7, up 8q..8q+7]."""
    if interleave is None:
        Np = math.ceil(N / (16 * R)) * 16 * R
        src = torch.arange(Np)
        return torch.where(src < N, src, torch.full_like(src, -1))
    if interleave != "gate_up":
        raise ValueError(f"interleave must be None or 'gate_up', got {interleave!r}")
    if N % 2:
        raise ValueError(f"interleave='gate_up' needs [2I, K] weights (gate rows, then up rows); got N = {N}")
    I = N // 2
    q = math.ceil(I / 8)
    j = torch.arange(q * 8).reshape(q, 8)
    gate = torch.where(j < I, j, torch.full_like(j, -1))
    up = torch.where(j < I, j + I, torch.full_like(j, -1))
    src = torch.stack([gate, up], 1).reshape(-1)  # [q, 2, 8] -> rows
    Np = math.ceil(src.numel() / (16 * R)) * 16 * R
    return torch.cat([src, torch.full((Np - src.numel(),), -1, dtype=src.dtype)])


def _gather_rows(t: torch.Tensor, src: torch.Tensor, fill=0) -> torch.Tensor:
    """t[src] with rows where src < 0 set to `fill`."""
    idx = src.clamp_min(0).to(t.device)
    out = t[idx]
    out[(src < 0).to(t.device)] = fill
    return out


def _pad_k(t: torch.Tensor, Kp: int) -> torch.Tensor:
    if t.shape[1] == Kp:
        return t
    out = torch.zeros((t.shape[0], Kp), dtype=t.dtype, device=t.device)
    out[:, : t.shape[1]] = t
    return out


def scramble_e4m3(e0, e1, e2, e3) -> torch.Tensor:
    """Four E4M3 code tensors (int64) -> the 32-bit words gemv_v3.cu widens with 1 + 4 integer ops (as int64).

    scramble_e4m3(*[torch.tensor([0x38])] * 4) -> tensor([0x038B0380 | ...])   (see widen_e4m3_words for the inverse)
    """
    w = ((e0 & 0x80) << 8) | ((e0 & 0x7F) << 4) | ((e1 & 0x80) << 24) | ((e1 & 0x7F) << 20)
    w = w | ((e2 >> 7) << 11) | (e2 & 0xF) | (((e2 >> 4) & 7) << 12)
    w = w | ((e3 >> 7) << 27) | ((e3 & 0xF) << 16) | (((e3 >> 4) & 7) << 28)
    return w


def widen_e4m3_words(w):
    """CPU model (numpy uint32) of the kernel's v3_e4m3x4 before its 2**120 multiply: (A, B) bf16x2 bits, each half
    the E4M3 value times 2**-120. A = (e0, e1), B = (e2, e3). tests/test_kernels_gemm.py checks every code."""
    import numpy as np

    w = np.asarray(w, dtype=np.uint32)
    a = w & np.uint32(0x87F087F0)
    b = ((w & np.uint32(0x080F080F)) << np.uint32(4)) | ((w >> np.uint32(4)) & np.uint32(0x07000700))
    return a, b


def _to_bytes(words64: torch.Tensor) -> torch.Tensor:
    """int64 tensor of 32-bit words -> their little-endian bytes, flat uint8."""
    w = words64.to(torch.int64)
    w = torch.where(w >= 2**31, w - 2**32, w).to(torch.int32).contiguous()
    return w.view(torch.uint8).reshape(-1)


def pack_fp8(codes: torch.Tensor, scale: torch.Tensor, *, R: int = 1, interleave: str | None = None) -> Packed:
    """E4M3 weights [N, K] with per-channel [N] or 128x128 block [ceil(N/128), ceil(K/128)] fp32 scales -> Packed.

    Any N and K: rows are padded to whole 16 R-row groups and k to a multiple of 256 with zero codes (zero
    weights; the kernel pads x with zeros to match). Runs on the tensors' device."""
    codes = _cuda.byte_codes(codes, "codes")
    if codes.dim() != 2:
        raise ValueError(f"codes must be 2-D [N, K], got shape {tuple(codes.shape)}")
    if R not in (1, 2):
        raise ValueError(f"R (16-row tiles per unit) must be 1 or 2, got {R}")
    N, K = codes.shape
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32:
        raise TypeError(f"scale must be a float32 tensor, got {getattr(scale, 'dtype', type(scale).__name__)}")
    if scale.dim() == 1 or (scale.dim() == 2 and scale.shape == (N, 1)):
        fmt = "fp8c"
        if scale.numel() != N:
            raise ValueError(f"per-channel scale must have N = {N} entries, got shape {tuple(scale.shape)}")
    elif scale.dim() == 2:
        fmt = "fp8b"
        want = (math.ceil(N / 128), math.ceil(K / 128))
        if tuple(scale.shape) != want:
            raise ValueError(f"128x128 block scales for [{N}, {K}] must have shape {want}, got {tuple(scale.shape)}")
        if interleave == "gate_up" and (N // 2) % 8:
            raise ValueError("gate_up interleave with block scales needs I % 8 == 0 (8-row groups inside a 128-row block)")
    else:
        raise ValueError(f"scale must be [N] or [ceil(N/128), ceil(K/128)], got shape {tuple(scale.shape)}")
    src = _row_order(N, R, interleave)
    Np, Kp = src.numel(), math.ceil(K / K_ALIGN["fp8c"]) * K_ALIGN["fp8c"]
    w = _pad_k(_gather_rows(codes, src), Kp).to(torch.int64)
    G, CH = Np // (16 * R), Kp // 64
    e = w.reshape(G, R, 2, 8, CH, 4, 4, 4)            # [group][r][h][g][chunk][t][step][byte]
    words = scramble_e4m3(e[..., 0], e[..., 1], e[..., 2], e[..., 3])  # [G, R, 2, 8, CH, 4, 4]
    data = _to_bytes(words.permute(0, 4, 1, 2, 3, 5, 6))  # [group][chunk][r][h][lane = (g, t)][step]
    if fmt == "fp8c":
        scales = _gather_rows(scale.reshape(-1), src, 0.0).contiguous()
    else:
        KB = Kp // 128
        blk = torch.zeros((scale.shape[0], KB), dtype=torch.float32, device=scale.device)
        blk[:, : scale.shape[1]] = scale
        first = src.reshape(G, R, 2, 8)[..., 0]          # first source row of each 8-row half
        sc = blk[(first.clamp_min(0) // 128).to(scale.device)]   # [G, R, 2, KB]
        sc[(first < 0).to(scale.device)] = 0.0
        scales = sc.permute(0, 3, 1, 2).contiguous().reshape(-1)  # [group][kb][r][half]
    return Packed(fmt, data, scales, None, N, K, Np, Kp, R, interleave)


def pack_nvfp4(w_packed: torch.Tensor, scale_codes: torch.Tensor, global_scale, *, R: int = 1,
               interleave: str | None = None) -> Packed:
    """NVFP4 weights (E2M1 nibbles [N, K/2], element 2i low; E4M3 scale codes [N, K/16]; fp32 global) -> Packed.

    Any N; K % 16 == 0 (whole NVFP4 blocks). Padding: zero nibbles with zero scale codes (value 0)."""
    from fp8lab.scaling import unpack_nibbles

    w_packed = _cuda.byte_codes(w_packed, "w_packed", "packed E2M1 nibbles")
    scale_codes = _cuda.byte_codes(scale_codes, "scale_codes", "E4M3 scale codes")
    if w_packed.dim() != 2:
        raise ValueError(f"w_packed must be 2-D [N, K/2], got shape {tuple(w_packed.shape)}")
    if R not in (1, 2):
        raise ValueError(f"R (16-row tiles per unit) must be 1 or 2, got {R}")
    N, K = w_packed.shape[0], 2 * w_packed.shape[1]
    if K % 16:
        raise ValueError(f"K = {K} must be a multiple of 16 (whole NVFP4 blocks)")
    if tuple(scale_codes.shape) != (N, K // 16):
        raise ValueError(f"scale_codes for [{N}, {K}] must have shape {(N, K // 16)}, got {tuple(scale_codes.shape)}")
    gs = torch.as_tensor(global_scale, dtype=torch.float32).reshape(-1)
    if gs.numel() != 1:
        raise ValueError("global_scale must be one value")
    src = _row_order(N, R, interleave)
    Np, Kp = src.numel(), math.ceil(K / K_ALIGN["nvfp4"]) * K_ALIGN["nvfp4"]
    nib = _pad_k(_gather_rows(unpack_nibbles(w_packed), src), Kp).to(torch.int64)
    G, CH = Np // (16 * R), Kp // 128
    # lane t's half q of a chunk is the 16-block t + 4q (k = 64q + 16t + 4s + e, s the step in the half): a warp's activation load then
    # reads, per token row, four 16-byte pieces of ONE 128-byte line (gemv_v3.cu's header, point 2)
    n = nib.reshape(G, R, 2, 8, CH, 2, 4, 4, 4).permute(0, 1, 2, 3, 4, 6, 5, 7, 8).reshape(G, R, 2, 8, CH, 4, 8, 4)
    # n: [group][r][h][g][chunk][t][step = 4q + s][k in step]
    # word nibbles 0..7 = (g,k0) (g8,k0) (g,k2) (g8,k2) (g,k1) (g8,k1) (g,k3) (g8,k3): e2m1x8_to_bf16 -> a0 a1 a2 a3
    order = [(0, 0), (1, 0), (0, 2), (1, 2), (0, 1), (1, 1), (0, 3), (1, 3)]
    words = sum(n[:, :, h, :, :, :, :, e] << (4 * i) for i, (h, e) in enumerate(order))  # [G, R, 8, CH, 4, 8]
    words = words.reshape(G, R, 8, CH, 4, 2, 4)          # step -> (half q, step in half)
    data = _to_bytes(words.permute(0, 3, 1, 5, 2, 4, 6))  # [group][chunk][r][q][lane = (g, t)][step]
    KS = Kp // 16
    sc = torch.zeros((N, KS), dtype=torch.uint8, device=scale_codes.device)
    sc[:, : K // 16] = scale_codes
    sc = _gather_rows(sc, src).reshape(G, R, 2, 8, CH, 2, 4)  # [group][r][h][g][chunk][half q][t]: block t + 4q
    scales = sc.permute(0, 4, 1, 3, 6, 5, 2).contiguous().reshape(-1)  # [group][chunk][r][g][t][q][h]
    return Packed("nvfp4", data, scales, gs.to(w_packed.device), N, K, Np, Kp, R, interleave)


def unpack_fp8(p: Packed) -> torch.Tensor:
    """The E4M3 codes [N, K] (source row order) back from a packed FP8 matrix: the inverse of pack_fp8's byte moves."""
    w = p.data.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    G, CH, R = p.groups, p.Kp // 64, p.R
    w = w.reshape(G, CH, R, 2, 8, 4, 4).permute(0, 2, 3, 4, 1, 5, 6)  # [G, R, h, g, CH, t, step]
    e0 = ((w >> 8) & 0x80) | ((w >> 4) & 0x7F)
    e1 = ((w >> 24) & 0x80) | ((w >> 20) & 0x7F)
    e2 = (((w >> 11) & 1) << 7) | (w & 0xF) | (((w >> 12) & 7) << 4)
    e3 = (((w >> 27) & 1) << 7) | ((w >> 16) & 0xF) | (((w >> 28) & 7) << 4)
    codes = torch.stack([e0, e1, e2, e3], -1).reshape(p.Np, p.Kp).to(torch.uint8)
    return _unorder(codes, p)[:, : p.K]


def unpack_nvfp4(p: Packed) -> tuple[torch.Tensor, torch.Tensor]:
    """(nibbles [N, K] uint8, scale codes [N, K/16]) back from a packed NVFP4 matrix (source row order)."""
    w = p.data.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    G, CH, R = p.groups, p.Kp // 128, p.R
    w = w.reshape(G, CH, R, 2, 8, 4, 4).permute(0, 2, 4, 1, 5, 3, 6).reshape(G, R, 8, CH, 4, 8)
    order = [(0, 0), (1, 0), (0, 2), (1, 2), (0, 1), (1, 1), (0, 3), (1, 3)]
    nib = torch.zeros((G, R, 2, 8, CH, 4, 8, 4), dtype=torch.int64, device=w.device)
    for i, (h, e) in enumerate(order):
        nib[:, :, h, :, :, :, :, e] = (w >> (4 * i)) & 0xF
    # [..][t][q][s][e] -> [..][q][t][s][e]: k = 64q + 16t + 4s + e (pack_nvfp4's k order)
    nib = nib.reshape(G, R, 2, 8, CH, 4, 2, 4, 4).permute(0, 1, 2, 3, 4, 6, 5, 7, 8)
    nib = _unorder(nib.reshape(p.Np, p.Kp).to(torch.uint8), p)[:, : p.K]
    sc = p.scales.reshape(G, CH, R, 8, 4, 2, 2).permute(0, 2, 6, 3, 1, 5, 4).reshape(p.Np, p.Kp // 16)
    return nib, _unorder(sc, p)[:, : p.K // 16]


def _unorder(t: torch.Tensor, p: Packed) -> torch.Tensor:
    src = _row_order(p.N, p.R, p.interleave).to(t.device)
    out = torch.zeros((p.N, t.shape[1]), dtype=t.dtype, device=t.device)
    keep = src >= 0
    out[src[keep]] = t[keep]
    return out


# ---- the work split (the kernel's arithmetic, in Python) ------------------------------------------------------
def warp_ranges(U: int, Wt: int, gran: int = 1) -> list[tuple[int, int]]:
    """Each warp's units [u0, u1): the kernels' v3_range. gran = 1: stream-K (any unit boundary); gran = KU (units
    per row group): whole groups, one or more per warp, some warps idle (u0 == u1) when Wt exceeds the groups.

    warp_ranges(12, 5) -> [(0, 2), (2, 4), (4, 7), (7, 9), (9, 12)];  warp_ranges(12, 5, gran=4) -> [(0, 0), (0, 4), (4, 4), (4, 8), (8, 12)]"""
    NG = U // gran
    return [(w * NG // Wt * gran, (w + 1) * NG // Wt * gran) for w in range(Wt)]


def streamk_plan(G: int, KU: int, Wt: int, gran: int = 1) -> dict:
    """Warp ranges of a split into grains of `gran` units (1: stream-K; KU / S: S segments per row group): warp w
    gets grains [w NG // Wt, (w + 1) NG // Wt), NG = G * KU / gran, U = G * KU units.

    streamk_plan(3, 4, 5) -> {'U': 12, 'units_per_warp': (2, 3), 'smax': 2, 'split_groups': 3, ...}
    streamk_plan(3, 4, 6, gran=2) -> {'U': 12, 'units_per_warp': (2, 2), 'smax': 2, 'split_groups': 3, ...}
    `smax`: the most warps any row group is split between (the workspace's slots per group); `contributors`: that
    count per group, by the kernel's v3_owner formula."""
    U = G * KU
    if gran < 1 or U % gran:
        raise ValueError(f"grains of {gran} units must tile the {U} units")
    NG = U // gran
    if not 1 <= Wt <= NG:
        raise ValueError(f"need 1 <= warps ({Wt}) <= grains ({NG}): an empty warp would stall a split group")
    starts = [u0 for u0, _ in warp_ranges(U, Wt, gran)] + [U]

    def owner(u):  # the kernel's v3_owner
        return ((u // gran + 1) * Wt - 1) // NG
    contrib = [owner(g * KU + KU - 1) - owner(g * KU) + 1 for g in range(G)]
    sizes = {starts[w + 1] - starts[w] for w in range(Wt)}
    return {"U": U, "units_per_warp": (min(sizes), max(sizes)), "smax": max(contrib),
            "split_groups": sum(c > 1 for c in contrib), "starts": starts, "contributors": contrib}


#: whole row groups per warp (no stream-K split) from this many groups per SM. Chosen from exploratory H200 tuning
#: runs at M = 1 (bench gemm --tune 3,4; not committed results), where whole groups beat the split at 18944 x 3584
#: (~9 groups per SM) and 14336 x 4096 (~6.8): the split's fix-up (fence, atomic, workspace reads) sits at the end of
#: every warp. At M = 16 (two MMAs per step) the split's extra warps won at every shape; the recorded decode run
#: (outputs/kernels/gemm.json) times the defaults this rule picks.
WHOLE_MIN_GROUPS_PER_SM = 6


#: The default's whole-group calls (version 3, no fused norm) launch one-warp CTAs: on an H100 (outputs/kernels/h100/
#: inflight_probe.json, notebook 07 "More bytes in flight?") the default's (C, P) in one-warp CTAs ran 1.01x (FP8) and
#: 1.02x (NVFP4, 1.01-1.04x) the four-warp CTAs' speed at every whole-group case (medians of interleaved rounds).
ONE_WARP_CTAS = True


def whole_groups_pays(G: int, sms: int, resident_warps: int, NT: int = 1) -> bool:
    """The split rule when the config does not say: whole row groups per warp (one each, no group split, no fix-up
    at the kernel's end) where M <= 8 and there are enough groups to give every SM several warps but no more than
    the resident warps (beyond that some warps would get two groups and the rest wait for them); stream-K otherwise.
    whole_groups_pays(1184, 132, 2112) -> True;  whole_groups_pays(1792, 132, 1584) -> False"""
    return NT == 1 and WHOLE_MIN_GROUPS_PER_SM * sms <= G <= resident_warps


def smax_bound(G: int, KU: int, Wt: int) -> int:
    """An upper bound of streamk_plan's smax without the loop: ranges hold >= q = U // Wt units."""
    q = (G * KU) // Wt
    return KU // q + 2


# ---- launching ---------------------------------------------------------------------------------------------------
DEFAULT_CONFIG = {  # (C, P, WPC, CPS) by format and token tiles; chosen by H200 sweeps (tools/gpu/decode.sh; the
    # M <= 8 ones by the tuning run with whole-group ranges, bench gemm --tune 3,4, 2026-12-02)
    ("fp8", 1): (4, 2, 4, 4), ("fp8", 2): (2, 2, 4, 4), ("fp8", 4): (2, 2, 4, 2),
    ("nvfp4", 1): (2, 2, 4, 4), ("nvfp4", 2): (2, 2, 4, 4), ("nvfp4", 4): (2, 2, 4, 2),
}


#: version 4: (C, D, WPC, CPS) -- D ring slots of one unit per warp; CPS is capped by what fits (shared memory)
DEFAULT_CONFIG4 = {("fp8", 1): (2, 4, 8, 4), ("fp8", 2): (2, 4, 8, 4), ("fp8", 4): (2, 4, 4, 4),
                   ("nvfp4", 1): (2, 4, 8, 4), ("nvfp4", 2): (2, 4, 8, 4), ("nvfp4", 4): (2, 4, 4, 4)}
#: version 5: (C, D, WPC, CPS) -- D stages of WPC units per CTA; CPS is capped by what fits (shared memory)
#: (tools/gpu/v5_probe.py, exploratory H200 runs at 18944x3584, 3584x18944, 28672x8192, M = 1 and 16: (2, 4, 8, 3) was
#: within 4 % of the best version-5 config everywhere)
DEFAULT_CONFIG5 = {("fp8", 1): (2, 4, 8, 3), ("fp8", 2): (2, 4, 8, 3), ("fp8", 4): (2, 3, 4, 4),
                   ("nvfp4", 1): (2, 4, 8, 3), ("nvfp4", 2): (2, 4, 8, 3), ("nvfp4", 4): (2, 3, 4, 4)}
DEFAULTS = {3: DEFAULT_CONFIG, 4: DEFAULT_CONFIG4, 5: DEFAULT_CONFIG5}


def default_config(fmt: str, M: int, R: int = 1, version: int = 3) -> tuple[int, int, int, int]:
    """(C, P, WPC, CPS) for this format and M (version 4: (C, D, WPC, CPS)). The table is by format and M only:
    an R = 2 packing at M <= 8 has no compiled default (pass a config; gemv_v3.KERNELS lists them)."""
    table = DEFAULTS[version]
    C, P, wpc, cps = table[("nvfp4" if fmt == "nvfp4" else "fp8", n_tiles(M))]
    return C, P, wpc, cps


def ring_bytes(fmt: str, R: int, C: int, D: int, wpc: int, version: int = 4) -> int:
    """Dynamic shared memory per CTA. Version 4: WPC warps x D slots of one unit (+ NVFP4 scale codes), and one 8-byte
    mbarrier per slot. Version 5: 128 bytes of barriers and D stages of WPC units.
    ring_bytes("fp8c", 1, 2, 4, 8) -> 65792;  ring_bytes("fp8c", 1, 4, 3, 8, version=5) -> 98432"""
    unit = C * R * 1024 + (C * R * 128 if fmt == "nvfp4" else 0)
    if version == 4:
        return wpc * D * (unit + 8)
    return 128 + D * wpc * unit


def sm_count(device=None) -> int:
    return torch.cuda.get_device_properties(device or torch.cuda.current_device()).multi_processor_count


class Launch:
    """A prepared call: arguments converted and the workspace allocated once; a call is one kernel launch on
    torch's current stream (capturable in a CUDA graph). pdl=True launches with programmatic dependent launch."""

    def __init__(self, fn, grid, block, args, out, info, pdl=False, keep=(), smem=0):
        self.fn, self.grid, self.block, self.args, self.out, self.info, self.pdl = fn, grid, block, args, out, info, pdl
        self._keep, self.smem = keep, smem

    def __call__(self) -> torch.Tensor:
        stream = torch.cuda.current_stream().cuda_stream
        if self.pdl:
            from . import launch_ex

            launch_ex.launch(self.fn, self.grid, self.block, self.args, self.smem, stream, pdl=True)
        else:
            cp = _cuda._cupy()
            with cp.cuda.ExternalStream(stream):
                self.fn(self.grid, self.block, self.args, shared_mem=self.smem)
        return self.out


def check_x(x, K: int) -> int:
    _cuda.bf16_tensor(x, "x", 2, "[M, K]")
    if x.shape[1] != K:
        raise ValueError(f"x must be [M, K = {K}], got shape {tuple(x.shape)}")
    n_tiles(x.shape[0])
    return x.shape[0]


def prepare(x: torch.Tensor, p: Packed, *, config: tuple | None = None, epilogue: str = "store",
            residual: torch.Tensor | None = None, out: torch.Tensor | None = None, pdl: bool = False,
            norm: tuple | None = None, sms: int | None = None, version: int = 3) -> Launch:
    """Validate (before any CUDA call), pick the config, allocate the workspace; returns a Launch computing y.

    version 3 (gemv_v3.cu): config (C, P, WPC, CPS), P units in flight per warp in registers; version 4
    (gemv_v4.cu, sm_90+): config (C, D, WPC, CPS), D units per warp in a shared-memory ring the bulk copy engine
    fills. Same packing, same arithmetic, same bits.

    norm = (gamma bf16 [K], eps): y = RMSNorm(x) . W^T with the normalization done inside the kernel, once per CTA
    (bf16(x * rsqrt(mean(x^2) + eps) * gamma), decode_layer.cu's arithmetic); M <= 16."""
    if not isinstance(p, Packed):
        raise TypeError(f"weights must be a gemv_v3.Packed (pack_fp8 / pack_nvfp4), got {type(p).__name__}")
    M = check_x(x, p.K)
    NT = n_tiles(M)
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue must be one of {sorted(EPILOGUES)}, got {epilogue!r}")
    if (epilogue == "silu_mul") != (p.interleave == "gate_up"):
        raise ValueError("epilogue='silu_mul' goes with weights packed with interleave='gate_up' (and only with them)")
    nout = p.nout
    if epilogue == "residual":
        if not isinstance(residual, torch.Tensor) or residual.dtype != torch.bfloat16 or tuple(residual.shape) != (M, nout):
            raise ValueError(f"epilogue='residual' needs a bf16 residual of shape {(M, nout)}")
    elif residual is not None:
        raise ValueError("a residual is only read by epilogue='residual'")
    if version not in VERSIONS:
        raise ValueError(f"version must be one of {VERSIONS}, got {version!r}")
    cfg = tuple(config) if config is not None else default_config(p.fmt, M, p.R, version)
    if len(cfg) not in (4, 5):
        raise ValueError(f"config is (C, P, WPC, CPS) or (C, P, WPC, CPS, split), got {cfg}")
    C, P, wpc, cps = cfg[:4]
    seg = cfg[4] if len(cfg) == 5 else None   # 0 stream-K, 1 whole row groups, S >= 2 split-K in S segments
    if not (seg is None or (isinstance(seg, int) and seg >= 0)) or (version == 5 and seg not in (None, 0, 1)):
        raise ValueError(f"config's 5th element is 0 (stream-K), 1 (whole row groups per warp) or S >= 2 (S segments "
                         f"per row group; versions 3 and 4), got {seg!r}")
    whole = None if seg is None else seg == 1
    if not (1 <= wpc <= 8 and cps >= 1):
        raise ValueError(f"config: 1..8 warps per CTA (the kernels' launch bound is 256 threads) and >= 1 CTA per SM, "
                         f"got WPC = {wpc}, CPS = {cps}")
    smem = 0
    if norm is not None:
        gamma, eps = norm
        if not isinstance(gamma, torch.Tensor) or gamma.dtype != torch.bfloat16 or tuple(gamma.shape) != (p.K,):
            raise ValueError(f"norm=(gamma, eps) needs a bf16 gamma of shape ({p.K},)")
        if p.K % 8 or M > 16:
            raise ValueError(f"the fused RMSNorm needs K % 8 == 0 and M <= 16 (shared memory), got K = {p.K}, M = {M}")
        smem = M * (p.Kp + 8) * 2
        if smem > 64 * 1024:
            wpc = max(wpc, 8)  # one or two CTAs per SM fit: make them 8 warps each
    key = (p.fmt, p.R, NT, C, P, epilogue, 1 if norm is not None else 0)
    if key not in TABLES[version]:
        what, table = ("P", "KERNELS") if version == 3 else ("D", f"KERNELS{version}")
        raise ValueError(f"not compiled: (format, R, NT, C, {what}, epilogue, norm) = {key}; see gemv_v3.{table}")
    if p.Kp % (CHUNK_K[p.fmt] * C):
        raise ValueError(f"K padded to {p.Kp} is not a whole number of {C}-chunk units")
    if seg is not None and seg >= 2 and (p.Kp // (CHUNK_K[p.fmt] * C)) % seg:
        raise ValueError(f"{seg} segments per row group must divide its {p.Kp // (CHUNK_K[p.fmt] * C)} units "
                         f"(K padded to {p.Kp}, {CHUNK_K[p.fmt] * C} k per unit)")
    for name, t in (("x", x), ("weights", p.data)):
        if not t.is_cuda:
            raise TypeError(f"{name} must be on a CUDA device, got {t.device}")
    if x.data_ptr() % 16 and x.is_contiguous():
        raise ValueError("x must start on a 16-byte boundary (a view at an odd offset?); pass a copy")
    if out is None:
        out = torch.empty((M, nout), dtype=torch.bfloat16, device=x.device)
    elif out.shape != (M, nout) or out.dtype != torch.bfloat16 or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous bf16 tensor of shape {(M, nout)}")
    xk = x.contiguous()
    if p.Kp != p.K:  # zero columns to match the zero-padded weights (an extra copy, only for odd K)
        xk = torch.nn.functional.pad(xk, (0, p.Kp - p.K))
    G, KU = p.groups, p.Kp // (CHUNK_K[p.fmt] * C)
    U = G * KU
    sms = sms or sm_count(x.device)
    wpc = max(1, min(wpc, U))
    if seg is not None and seg >= 2:
        wpc = min(wpc, G * seg)   # every warp must hold a segment (v3_owner)
    if version >= 4:  # the ring (versions 4 and 5 have no fused norm: not compiled); allow_dynamic_smem checks it fits
        smem = ring_bytes(p.fmt, p.R, C, P, wpc, version)
    cp = _cuda._cupy()
    fn = _cuda.load_module(f"gemv_v{version}.cu").get_function(kernel_name(*key, version=version))
    from .launch_ex import resident_ctas

    _cuda.allow_dynamic_smem(fn, smem)
    cps = min(cps, resident_ctas(fn, 32 * (wpc + 1 if version == 5 else wpc), smem))   # the whole grid resident at once (stream-K: no late CTAs)
    if version == 5:  # the work is split over CTAs, in bands of WPC row groups (one per warp): stream-K unless told
        whole, NB = whole or 0, -(-G // wpc)
        gran, grid = (KU, max(1, min(sms * cps, NB))) if whole else (1, max(1, min(sms * cps, NB * KU)))
        Wt = grid
    else:
        if whole is None:  # a 4-element config: the rule picks the split, and for whole groups the CTA shape
            whole = whole_groups_pays(G, sms, sms * cps * wpc, NT)
            if whole and ONE_WARP_CTAS and version == 3 and norm is None and wpc > 1:
                # one-warp CTAs, as many per SM as the config's warps: the block scheduler then deals the groups out
                # one warp at a time (14336 x 4096 on 132 SMs: 6 or 7 per SM, not 8 on some SMs and 4 on others)
                wpc, cps = 1, min(cps * wpc, resident_ctas(fn, 32, smem))
        if seg is not None and seg >= 2:  # grains of one segment, every warp >= 1 (Wt <= G S: v3_owner needs it)
            gran, grid = KU // seg, max(1, min(sms * cps, G * seg // wpc))
        elif whole:  # units per grain: whole row groups, one per warp where they fit (a few warps idle, spread evenly)
            gran, grid = KU, max(1, min(sms * cps, -(-G // wpc)))
        else:      # any unit (stream-K): every warp gets >= 1 unit
            gran, grid = 1, max(1, min(sms * cps, U // wpc))
        Wt = grid * wpc
    if seg is not None and seg >= 2:
        smax = seg   # a group's S segments lie in at most S warps' ranges
    else:
        smax = 1 if whole else smax_bound(-(-G // wpc) if version == 5 else G, KU, Wt)
    # the stream-K workspace: smax slots of R*NT*4*32 fp32 partial sums per row group (a few MB at most)
    ws = torch.empty(G * smax * p.R * NT * 4 * 32, dtype=torch.float32, device=x.device)
    cnt = torch.zeros(G, dtype=torch.int32, device=x.device)
    cs = {"fp8c": p.scales, "nvfp4": p.gscale, "fp8b": ws[:1]}[p.fmt]   # per-channel scales / global scale / unused
    S = ws[:1] if p.fmt == "fp8c" else p.scales                          # block scales / NVFP4 scale codes / unused
    res = residual.contiguous() if residual is not None else out
    g = norm[0].contiguous() if norm is not None else out
    keep = (p.data, S, cs, xk, out, res, ws, cnt, g)
    a = [_cuda.as_cupy(t) for t in keep]
    args = (*a[:8], cp.int32(M), cp.int32(nout), cp.int32(p.Kp), cp.int32(KU), cp.int32(U), cp.int32(smax), a[8],
            cp.float32(norm[1] if norm is not None else 0.0), cp.int32(p.K), cp.int32(gran))
    info = {"kernel": kernel_name(*key, version=version), "version": version, "config": (C, P, wpc, cps), "grid": grid,
            "warps": Wt, "units": U, "whole_groups": bool(whole), "segments": seg if seg and seg >= 2 else None,
            "bytes_per_unit": C * p.R * 1024, "smax": smax,
            "weight_bytes": p.weight_bytes(), "smem": smem}
    threads = 32 * (wpc + 1 if version == 5 else wpc)   # version 5: WPC MMA warps + one producer warp
    return Launch(fn, (grid,), (threads,), args, out, info, pdl=pdl, keep=keep, smem=smem)


def gemv_v3(x: torch.Tensor, p: Packed, **kw) -> torch.Tensor:
    """y = x . dequant(W)^T (or the chosen epilogue of it) in bf16. See the module docstring."""
    return prepare(x, p, **kw)()


# ---- the CPU model of the kernel (numpy) ------------------------------------------------------------------
def _bf16_values(bits):
    """uint32 bf16 bit patterns (one per element) -> float64 numpy values."""
    import numpy as np

    return torch.from_numpy(bits.astype(np.int32)).to(torch.int16).view(torch.bfloat16).double().numpy()

def emulate(x, p: Packed):
    """CPU model (numpy, float64) of gemv_v3.cu's dataflow on a Packed matrix, lane by lane: which packed word each
    lane reads, the widening (widen_e4m3_words / gemv_nvfp4.e2m1x8_to_bf16_bits), which activations it pairs them
    with, the m16n8k16 fragment map (a0: row g, k 2t..2t+1; a1: row g+8; a2, a3: k + 8; b0: k 2t..2t+1 of column g;
    b1: k + 8), block promotion and the output scales. Equal to `reference` to rounding (tests): the packing, the
    k order and the fragment map agree before any GPU runs. Small shapes only (a Python loop per lane)."""
    import numpy as np

    from .gemv_nvfp4 import e2m1x8_to_bf16_bits

    M = x.shape[0]
    NT = n_tiles(M)
    xd = np.zeros((NT * 8, p.Kp))
    xd[:M, :p.K] = x.double().cpu().numpy()
    xd[M:] = xd[0]  # tokens past M read token 0
    data, G, R = p.data.cpu().numpy(), p.groups, p.R
    y = np.zeros((NT * 8, p.Np))
    e4 = reference_values.decode("e4m3", torch.arange(256, dtype=torch.uint8)).numpy()
    if p.fmt != "nvfp4":
        CH = p.Kp // 64
        words = data.view(np.uint32).reshape(G, CH, R, 2, 32, 4)  # [grp][chunk][r][h][lane][step word]
        for grp in range(G):
            for r in range(R):
                acc = np.zeros((16, NT * 8))
                part = np.zeros((16, NT * 8))
                for ch in range(CH):
                    for s in range(4):
                        A, B = np.zeros((16, 16)), np.zeros((16, NT * 8))
                        for lane in range(32):
                            g, t = lane // 4, lane % 4
                            a01, a23 = widen_e4m3_words(words[grp, ch, r, :, lane, s])  # h = 0 (row g), 1 (row g+8)
                            for h in range(2):
                                lo = _bf16_values(np.array([a01[h] & 0xFFFF, a01[h] >> 16])) * 2.0**120
                                hi = _bf16_values(np.array([a23[h] & 0xFFFF, a23[h] >> 16])) * 2.0**120
                                A[g + 8 * h, 2 * t:2 * t + 2] = lo          # a0 / a1
                                A[g + 8 * h, 2 * t + 8:2 * t + 10] = hi     # a2 / a3
                            for nt in range(NT):
                                k = ch * 64 + 16 * t + 4 * s
                                B[2 * t:2 * t + 2, nt * 8 + g] = xd[nt * 8 + g, k:k + 2]       # b0
                                B[2 * t + 8:2 * t + 10, nt * 8 + g] = xd[nt * 8 + g, k + 2:k + 4]  # b1
                        part += A @ B  # mma.sync m16n8k16 (fp32 there, float64 here)
                    if p.fmt == "fp8b" and ch % 2 == 1:
                        sc = p.scales.cpu().numpy().reshape(G, p.Kp // 128, R, 2)[grp, ch // 2, r]
                        acc[:8] += part[:8] * sc[0]
                        acc[8:] += part[8:] * sc[1]
                        part[:] = 0
                    elif p.fmt == "fp8c":
                        acc += part
                        part[:] = 0
                rows = (grp * R + r) * 16 + np.arange(16)
                if p.fmt == "fp8c":
                    acc = acc * p.scales.cpu().numpy()[rows][:, None]
                y[:, rows] = acc.T
    else:
        CH = p.Kp // 128
        words = data.view(np.uint32).reshape(G, CH, R, 2, 32, 4)  # [grp][chunk][r][q][lane][word]
        scw = p.scales.cpu().numpy().reshape(G, CH, R, 32, 4)            # [grp][chunk][r][lane][byte]
        gs = float(p.gscale.reshape(()))
        for grp in range(G):
            for r in range(R):
                acc = np.zeros((16, NT * 8))
                for ch in range(CH):
                    for st in range(8):
                        q, s4 = st // 4, st % 4
                        A, B = np.zeros((16, 16)), np.zeros((16, NT * 8))
                        for lane in range(32):
                            g, t = lane // 4, lane % 4
                            pw = e2m1x8_to_bf16_bits(np.array([words[grp, ch, r, q, lane, s4]], np.uint32))
                            vals = [_bf16_values(np.array([v[0] & 0xFFFF, v[0] >> 16])) * 2.0**126 for v in pw]
                            sg, s8 = e4[scw[grp, ch, r, lane, 2 * q]], e4[scw[grp, ch, r, lane, 2 * q + 1]]
                            A[g, 2 * t:2 * t + 2], A[g + 8, 2 * t:2 * t + 2] = vals[0] * sg, vals[1] * s8
                            A[g, 2 * t + 8:2 * t + 10], A[g + 8, 2 * t + 8:2 * t + 10] = vals[2] * sg, vals[3] * s8
                            for nt in range(NT):
                                k = ch * 128 + 64 * q + 16 * t + 4 * s4
                                B[2 * t:2 * t + 2, nt * 8 + g] = xd[nt * 8 + g, k:k + 2]
                                B[2 * t + 8:2 * t + 10, nt * 8 + g] = xd[nt * 8 + g, k + 2:k + 4]
                        acc += A @ B
                rows = (grp * R + r) * 16 + np.arange(16)
                y[:, rows] = acc.T * gs
    src = _row_order(p.N, p.R, p.interleave).numpy()
    out, keep = np.zeros((M, p.N)), src >= 0
    out[:, src[keep]] = y[:M, keep]
    return out


# ---- references (float64, any device) ----------------------------------------------------------------------------
def dequant(p_or_codes, scale=None) -> torch.Tensor:
    """float64 [N, K] weights of a Packed matrix (through unpack: also checks the packing), source row order."""
    p = p_or_codes
    if p.fmt == "nvfp4":
        nib, sc = unpack_nvfp4(p)
        v = reference_values.decode("e2m1", nib)
        s = reference_values.decode("e4m3", sc).repeat_interleave(16, dim=1)
        return v * s * float(p.gscale.reshape(()))
    codes = unpack_fp8(p)
    v = reference_values.decode("e4m3", codes)
    scales = p.scales.double()
    if p.fmt == "fp8c":
        src = _row_order(p.N, p.R, p.interleave).to(scales.device)
        s = torch.zeros(p.N, dtype=torch.float64, device=scales.device)
        s[src[src >= 0]] = scales[src >= 0]
        return v * s.reshape(-1, 1)
    G, KB = p.groups, p.Kp // 128
    sc = scales.reshape(G, KB, p.R, 2).permute(0, 2, 3, 1)  # [G, R, half, KB]
    rows = sc.unsqueeze(3).expand(G, p.R, 2, 8, KB).reshape(p.Np, KB).repeat_interleave(128, 1)
    return v * _unorder(rows, p)[:, : p.K]


def rmsnorm_bf16_reference(x: torch.Tensor, gamma: torch.Tensor, eps: float) -> torch.Tensor:
    """The fused RMSNorm's activations: bf16(x * rsqrt(mean(x^2) + eps) * gamma), in float64 then rounded."""
    xd = x.double()
    y = xd / torch.sqrt((xd * xd).mean(-1, keepdim=True) + eps) * gamma.double()
    return y.float().to(torch.bfloat16)


def reference(x: torch.Tensor, p: Packed, epilogue: str = "store", residual=None, norm=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(float64 reference, sum |x w| terms for the tolerance) of what gemv_v3 computes.

    store: x W^T; residual: + residual; silu_mul: silu(x Wg^T) * (x Wu^T) (its terms bound the product's error);
    norm = (gamma, eps): x replaced by its bf16 RMSNorm first."""
    wd = dequant(p).to(x.device)
    if norm is not None:
        x = rmsnorm_bf16_reference(x, *norm)
    xd = x.double()
    y, terms = xd @ wd.T, xd.abs() @ wd.abs().T
    if epilogue == "residual":
        return y + residual.double(), terms
    if epilogue == "silu_mul":
        I = p.N // 2
        g, u = y[:, :I], y[:, I:]
        tg, tu = terms[:, :I], terms[:, I:]
        sg = g * torch.sigmoid(g)
        # d(silu(g) u) <= |u| |dg| (|silu'| <= 1.1) + |silu(g)| |du|: the terms of each factor, weighted
        return sg * u, 1.1 * u.abs() * tg + sg.abs() * tu + tg * tu
    return y, terms
