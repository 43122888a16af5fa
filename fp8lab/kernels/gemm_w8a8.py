"""W8A8 block-scaled prefill GEMM (seed 001): E4M3 activations with 1x128 scales x E4M3 weights with 128x128 scales.

    c = gemm_w8a8(a, sa, b, sb)        # a [M, K] e4m3, sa [M, K/128] fp32 (any strides),
                                       # b [N, K] e4m3, sb [N/128, K/128] fp32  ->  c [M, N] bf16

    c[m, n] = sum_kb sa[m, kb] * sb[n // 128, kb] * sum_{k in kb} e4m3(a[m, k]) * e4m3(b[n, k])

Worked example (K = 128, one k-block): a row of 128 codes 0x38 (1.0) with sa = 0.5, b row of 0x40 (2.0)
with sb = 0.25 -> c = 0.5 * 0.25 * (128 * 1 * 2) = 32.0

Kernels (`kernel=`), one arithmetic, checked against `reference`:
    "wgmma_tma" version C (gemm_w8a8_tma.cu, sm_90a): TMA loads, mbarrier pipeline, producer thread + consumer
                warpgroups (setmaxnreg), persistent grouped tile order, 2-CTA multicast, 128x256 tiles; the
                configuration per shape from `tma_default` (the ladder of simpler versions: TMA_LADDER)
    "wgmma_tma_a" .. "wgmma_tma_d", ... the rungs and tuning variants of version C (TMA_KERNELS)
    "wgmma_ws"  wgmma m64n128k32 e4m3 (sm_90a), warp-specialized cp.async producer + 2 math warpgroups
    "wgmma_256" the same wgmma core, all threads load, kept in step by __syncthreads, 256x128 tile
    "wgmma_pipe" the same with a 128x128 tile and 6 stages
    "wgmma"     the same with 4 stages (the simple one, the correctness anchor)
    "mma_fp8"   mma.sync.m16n8k32 e4m3 -- native on sm_89/sm_120/sm_121, EMULATED by ptxas on sm_90
    "mma_fp8_s3" the same with 3 stages (97 KB of shared memory): the one that fits sm_89 / sm_12x's 99 KB per
                block, so the GB10's QMMA path (fp8lab.kernels.native.choose("gemm_w8a8"))
    "mma_bf16"  the same structure with fragments widened to bf16 and mma.sync.m16n8k16 bf16
FP32 promotion per 128-wide k-block in every kernel (partial sums in their own registers, then
acc += part * (sa * sb), DeepGEMM's fix for Hopper's ~14-bit FP8 accumulation inside a wgmma).

Inputs come from fp8lab.kernels.reference: quantize_group(x, 128) (1x128 activation scales) and
quantize_block(w, 128) (128x128 weight scales), fp8lab.scaling's contract bit for bit.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace

import torch

from . import _cuda
from .gemv_fp8 import Launch, _fp8_codes, decode_e4m3

BM = BN = BK = 128
# name -> (source file, function, threads, stages, block-tile rows). The wgmma source builds only for sm_90a
# (sources.py); load_module picks the target.
KERNELS = {
    "wgmma_ws": ("gemm_w8a8_wgmma.cu", "w8a8_wgmma_ws", 384, 6, 128),
    "wgmma_256": ("gemm_w8a8_wgmma.cu", "w8a8_wgmma_256", 256, 4, 256),
    "wgmma_pipe": ("gemm_w8a8_wgmma.cu", "w8a8_wgmma_pipe", 256, 6, 128),
    "wgmma": ("gemm_w8a8_wgmma.cu", "w8a8_wgmma", 256, 4, 128),
    "mma_fp8": ("gemm_w8a8.cu", "w8a8_mma_fp8", 256, 4, 128),
    "mma_fp8_s3": ("gemm_w8a8.cu", "w8a8_mma_fp8_s3", 256, 3, 128),  # 97 KB: fits sm_89 / sm_120 / sm_121 (GB10)
    "mma_bf16": ("gemm_w8a8.cu", "w8a8_mma_bf16", 256, 4, 128),
}


def check_mnk(M: int, N: int, K: int, k_mult: int, k_why: str, n_mult: int, n_why: str) -> None:
    """The GEMM kernels' shape rules: K a multiple of k_mult, N of n_mult, M >= 1; ValueError (one line, saying why).

        check_mnk(1, 256, 100, 128, ": whole k-blocks", 128, "")  -> ValueError: K = 100 is not a multiple of 128: whole k-blocks
    """
    if K % k_mult:
        raise ValueError(f"K = {K} is not a multiple of {k_mult}{k_why}")
    if N % n_mult:
        raise ValueError(f"N = {N} is not a multiple of {n_mult}{n_why}")
    if M < 1:
        raise ValueError("M must be >= 1")


def check_args(a, sa, b, sb, kernel: str = "wgmma_ws") -> tuple[int, int, int]:
    """Validate shapes/dtypes before any CUDA call; returns (M, N, K).

    The cp.async / mma.sync kernels need N % 128 == 0 and K % 128 == 0; the TMA kernels take N % 8 == 0 and
    K % 16 == 0 (16-byte rows for the copy engine) with a partial last k-block and n-tile."""
    if kernel not in KERNELS and kernel not in TMA_KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; valid: {', '.join([*KERNELS, *TMA_KERNELS])}")
    a, b = _fp8_codes(a, "a"), _fp8_codes(b, "b")
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"a and b must be 2-D ([M, K] and [N, K]), got {tuple(a.shape)} and {tuple(b.shape)}")
    M, K = a.shape
    N, Kb = b.shape
    if K != Kb:
        raise ValueError(f"a has K = {K} but b has K = {Kb}")
    if kernel in TMA_KERNELS:
        check_mnk(M, N, K, 16, ": the TMA kernels read 16-byte-aligned rows", 8, ": the TMA kernels write 16-byte-aligned bf16 rows")
    else:
        check_mnk(M, N, K, BK, ": 1x128 and 128x128 scales need whole k-blocks", BN,
                  " (the 128x128 weight-scale blocks and the kernel's N tile)")
    for name, s, want in (("sa", sa, (M, -(-K // BK))), ("sb", sb, (-(-N // BN), -(-K // BK)))):
        if not isinstance(s, torch.Tensor) or s.dtype != torch.float32:
            raise TypeError(f"{name} must be a float32 tensor, got {getattr(s, 'dtype', type(s).__name__)}")
        if tuple(s.shape) != want:
            raise ValueError(f"{name} must have shape {want}, got {tuple(s.shape)}")
    for name, t in (("a", a), ("sa", sa), ("b", b), ("sb", sb)):
        if not t.is_cuda:
            raise TypeError(f"{name} must be a CUDA tensor, got one on {t.device}")
    return M, N, K


def prepare(a, sa, b, sb, *, kernel: str = "wgmma_ws", out=None, config: "TmaConfig | None" = None) -> Launch:
    """Validate and convert arguments once; returns a Launch computing c (see `gemm_w8a8`).

    config: for the TMA kernels, a TmaConfig overriding the named one (tuning sweeps)."""
    M, N, K = check_args(a, sa, b, sb, kernel)
    if kernel in TMA_KERNELS:
        return _prepare_tma(a, sa, b, sb, M, N, K, config or TMA_KERNELS[kernel] or tma_default(M, N, K), out)
    a, b = _fp8_codes(a, "a").contiguous(), _fp8_codes(b, "b").contiguous()
    sb = sb.contiguous()
    if out is None:
        out = torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
    elif out.shape != (M, N) or out.dtype != torch.bfloat16 or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous bf16 tensor of shape {(M, N)}")
    src, name, threads, stages, bm = KERNELS[kernel]
    cp = _cuda._cupy()
    fn = _cuda.load_module(src).get_function(name)
    smem = stages * (bm + BN) * BK + 1024  # + slack to align the tiles to 1024 bytes (128B swizzle atoms)
    fn.max_dynamic_shared_size_bytes = smem
    # sa is read as sa[m * sa_sm + kb * sa_sk] (element strides): row- or column-major, no copy.
    args = (_cuda.as_cupy(a), _sa_arg(sa), cp.int64(sa.stride(0)), cp.int64(sa.stride(1)), _cuda.as_cupy(b),
            _cuda.as_cupy(sb), _cuda.as_cupy(out), cp.int32(M), cp.int32(N), cp.int32(K))
    return Launch(fn, (math.ceil(M / bm), N // BN), (threads,), args, smem, out)


def gemm_w8a8(a, sa, b, sb, *, kernel: str = "wgmma_ws", out=None, config=None) -> torch.Tensor:
    """c[M, N] bf16 = block-scaled FP8 GEMM (see module doc). `sa` may be row- or column-major."""
    return prepare(a, sa, b, sb, kernel=kernel, out=out, config=config)()


# ---- version C: TMA, warp specialization, persistent grouped tiles, 2-CTA multicast (gemm_w8a8_tma.cu) ----------
SMEM_LIMIT = 232448  # sm_90's opt-in shared memory per block (227 KB), static + dynamic
STATIC_SMEM = 1024   # the kernel's static shared memory as ptxas reports it (barriers, padded by the 1024 alignment)
SCALE_SLOT = 128 * 4 + 16  # scales = 1: one stage's sa (128 rows) and sb (<= 3 n128 blocks, padded to 16 bytes)


@dataclass(frozen=True)
class TmaConfig:
    """One configuration of version C. Compiled: (bn, nwg, stages, cluster, epi); chosen at launch: persistent, group.

    bn       block-tile columns: 128, 256 (two n128 halves per consumer warpgroup, each issued and promoted on its
             own), or 192 (one m64n192 batch per consumer warpgroup and k-block: one wait, one promotion; its columns
             span two weight-scale blocks; nwg 2, scales 1), or 224 (an n128 and an n96 sub-tile per consumer
             warpgroup, each spanning up to two weight-scale blocks; nwg 2, scales 1, epi 0: its waves are fuller
             than 256-wide ones at some shapes, e.g. 2048x3584, and emptier at others); the block tile has 128 rows
    nwg      consumer warpgroups: 1 (it runs both m64 halves) or 2 (one each, with setmaxnreg 40 / 232)
    stages   shared-memory pipeline depth (k-blocks of 128 loaded ahead)
    cluster  1, or 2: CTA pairs on adjacent m-blocks of one n-block, each loading half of B and multicasting it
    epi      0: bf16 stores from registers; 1: through shared memory and a TMA store
    pipe     0: each k-block is issued, waited for, then promoted; 1 (bn 128, nwg 2 only): two partial-sum buffers,
             k-block kb + 1 is issued before kb is promoted (wgmma.wait_group 1)
    scales   0: the consumers load each k-block's scales from global memory (__ldg, one k-block ahead); 1: a scale
             warp of the producer warpgroup copies them (cp.async) into a 528-byte slot beside each stage, landing
             on the stage's `full` barrier
    split    0: every tile whole; n >= 2: where the last wave of the persistent grid would leave SMs idle, its tiles
             are cut along K into up to n pieces run at once (split_plan), the last piece to finish adding the
             others' fp32 partial sums from a workspace (the sum of two partials rounds differently from one
             running sum: results agree with the unsplit kernel within fp32 reassociation, not bit for bit)
             -1: the stream-K tail (streamk_tail): the waves that fill the grid run whole tiles, and the k-blocks of
             the rest, laid end to end, are cut into one equal range per CTA (cluster), so every unit ends at once;
             a tile shared by several ranges is finished by the last of its pieces, as above
    stagger  0: both consumer warpgroups start at once; 1 / 2 (nwg 2, pipe 0, scales 1): the second issues its first
             k-block of the CTA (1) or of every work item (2) only when the first one's MMAs have finished, so each
             promotes while the other's MMAs run (the same arithmetic: the same bits as stagger 0)
    persistent  one CTA (cluster) per SM walking the tiles, or one per tile
    group    m-units (of `cluster` m-blocks) per group of the tile order; 0: chosen per shape (group_size)
    grid     persistent grid size in clusters (0: as many as fit at once); the tests shrink it so that each CTA
             walks several tiles (the pipeline's phases carry across tiles)

    TmaConfig(256, 2, 4, 2).function -> 'w8a8_tma_n256_w2_s4_c2_e0', .threads -> 384, .smem -> 197632
    """

    bn: int = 256
    nwg: int = 2
    stages: int = 4
    cluster: int = 2
    epi: int = 0
    persistent: bool = True
    group: int = 0
    grid: int = 0
    pipe: int = 0
    scales: int = 0
    split: int = 0
    stagger: int = 0

    @property
    def compiled(self) -> tuple:
        """The instantiation's macro arguments (the stagger only in its own family)."""
        return (self.bn, self.nwg, self.stages, self.cluster, self.epi) + ((self.stagger,) if self.stagger else ())

    @property
    def function(self) -> str:
        return ("w8a8_tma_n{}_w{}_s{}_c{}_e{}".format(*self.compiled[:5]) + ("_ss" if self.scales else "")
                + ("_p2" if self.pipe else "") + (f"_sg{self.stagger}" if self.stagger else ""))

    @property
    def family(self) -> str:
        """The .cu macro that instantiates it: W8A8_TMA, W8A8_TMA_P (pipe), W8A8_TMA_S (scales), W8A8_TMA_PS,
        W8A8_TMA_SG (scales, staggered consumers)."""
        if self.stagger:
            return "W8A8_TMA_SG"
        return "W8A8_TMA" + ("_" + "P" * self.pipe + "S" * self.scales if self.pipe or self.scales else "")

    @property
    def acc_regs(self) -> int:
        """Accumulators per consumer thread (what a split tile's workspace slot holds): 64 per n128 sub-tile (the n96
        half of a 224-wide tile keeps the full 64), 96 for the one m64n192 sub-tile of bn = 192."""
        return self.mh * (self.bn // 2 if self.bn == 192 else 64 * -(-self.bn // 128))

    @property
    def threads(self) -> int:
        return 128 * (self.nwg + 1)

    @property
    def mh(self) -> int:
        """m64 sub-tiles per consumer warpgroup."""
        return 2 if self.nwg == 1 else 1

    @property
    def smem(self) -> int:
        """Dynamic shared memory: the stages, the C staging tiles (epi = 1), the scale slots (scales = 1), 1 KB to
        align to the 128B swizzle atom."""
        c_tiles = self.nwg * self.mh * 64 * self.bn * 2 if self.epi else 0
        slots = self.stages * SCALE_SLOT if self.scales else 0
        return self.stages * (BM + self.bn) * BK + c_tiles + slots + 1024

    def check(self) -> "TmaConfig":
        if self.bn not in (128, 192, 224, 256) or self.nwg not in (1, 2) or self.cluster not in (1, 2) or self.epi not in (0, 1):
            raise ValueError(f"invalid TMA config {self}: bn 128|192|224|256, nwg 1|2, cluster 1|2, epi 0|1")
        if self.bn == 224 and (self.nwg != 2 or self.pipe or not self.scales or self.stagger or self.epi):
            raise ValueError(f"{self}: bn = 224 needs nwg 2, scales 1, pipe 0, stagger 0, epi 0 (a 64-column TMA store "
                             "box would cross the tile's edge)")
        if self.bn == 192 and (self.nwg != 2 or self.pipe or not self.scales or self.stagger):
            raise ValueError(f"{self}: bn = 192 needs nwg 2, scales 1, pipe 0, stagger 0 (96 + 96 registers per thread)")
        if -(-self.bn // 128) * self.mh > 2:
            raise ValueError(f"{self}: one consumer warpgroup with bn = 256 needs 256 accumulators per thread")
        if self.stages < 2 or self.smem + STATIC_SMEM > SMEM_LIMIT:
            raise ValueError(f"{self}: {self.stages} stages need {self.smem} + {STATIC_SMEM} bytes of shared memory "
                             f"(limit {SMEM_LIMIT})")
        if self.pipe not in (0, 1) or (self.pipe and (self.bn, self.nwg) != (128, 2)):
            raise ValueError(f"{self}: pipe 0|1, and pipe = 1 needs bn 128 and nwg 2 (64 + 2 x 64 accumulators)")
        if self.scales not in (0, 1):
            raise ValueError(f"{self}: scales 0|1")
        if self.split < -1 or self.split == 1 or (self.split and (not self.persistent or self.nwg != 2)):
            raise ValueError(f"{self}: split is 0 (off), the most pieces per tile (>= 2) or -1 (stream-K tail), for "
                             "persistent grids with two consumer warpgroups only")
        if self.stagger not in (0, 1, 2) or (self.stagger and (self.nwg != 2 or self.pipe or not self.scales)):
            raise ValueError(f"{self}: stagger 0|1|2, and a stagger needs two consumer warpgroups, pipe 0, scales 1")
        if self.group < 0 or self.grid < 0:
            raise ValueError(f"group and grid must be >= 0, got {self.group}, {self.grid}")
        return self


#: the climb, one change per rung (each validated and timed on its own: gemm_prefill.LADDER)
TMA_LADDER = {
    "wgmma_tma_a": TmaConfig(128, 1, 6, 1, 0, persistent=False),  # TMA + mbarrier pipeline, 1 consumer warpgroup
    "wgmma_tma_b": TmaConfig(128, 2, 6, 1, 0, persistent=False),  # + 2 consumer warpgroups, setmaxnreg
    "wgmma_tma_c": TmaConfig(128, 2, 6, 1, 0, persistent=True),   # + persistent grid, grouped tile order
    "wgmma_tma_d": TmaConfig(128, 2, 6, 2, 0, persistent=True),   # + 2-CTA clusters, B multicast
    "wgmma_tma_e": TmaConfig(256, 2, 4, 2, 0, persistent=True),   # + 128 x 256 block tiles
    # + scales staged in shared memory by a producer warp (no global load in the consumers' loop)
    "wgmma_tma_e_ss": TmaConfig(256, 2, 4, 2, 0, persistent=True, scales=1),
    # + the bf16 tile out through shared memory by TMA store (3 stages: the C tiles take the fourth's room)
    "wgmma_tma_e_ss_tmastore": TmaConfig(256, 2, 3, 2, 1, persistent=True, scales=1),
    # + the last wave's tiles cut along K where it would leave SMs idle (split_plan)
    "wgmma_tma_e_ss_tmastore_split": TmaConfig(256, 2, 3, 2, 1, persistent=True, scales=1, split=4),
}
#: tuning variants beside the ladder (tile N, stages, cluster, epilogue)
TMA_VARIANTS = {
    "wgmma_tma_c256": TmaConfig(256, 2, 4, 1, 0, persistent=True),
    "wgmma_tma_e_tmastore": TmaConfig(256, 2, 3, 2, 1, persistent=True),
    "wgmma_tma_d_tmastore": TmaConfig(128, 2, 6, 2, 1, persistent=True),
    "wgmma_tma_d7": TmaConfig(128, 2, 7, 2, 0, persistent=True),
    # version D: two partial-sum buffers, the promotion of k-block kb under the MMAs of kb + 1
    "wgmma_tma_p": TmaConfig(128, 2, 6, 2, 0, persistent=True, pipe=1),
    "wgmma_tma_p1": TmaConfig(128, 2, 6, 1, 0, persistent=True, pipe=1),
    "wgmma_tma_p7": TmaConfig(128, 2, 7, 2, 0, persistent=True, pipe=1),
    "wgmma_tma_p_tmastore": TmaConfig(128, 2, 6, 2, 1, persistent=True, pipe=1),
    "wgmma_tma_p_tmastore_split": TmaConfig(128, 2, 6, 2, 1, persistent=True, pipe=1, split=4),
    # one m-block (M <= 128): no pair to cluster; the few tiles cut along K
    "wgmma_tma_c_split": TmaConfig(128, 2, 6, 1, 0, persistent=True, split=4),
    "wgmma_tma_c256_split": TmaConfig(256, 2, 4, 1, 0, persistent=True, split=4),
    # scales staged in shared memory on 128 x 128 tiles
    "wgmma_tma_ss": TmaConfig(128, 2, 6, 2, 0, persistent=True, scales=1),
    "wgmma_tma_pss": TmaConfig(128, 2, 6, 2, 0, persistent=True, pipe=1, scales=1),
    "wgmma_tma_pss_tmastore": TmaConfig(128, 2, 5, 2, 1, persistent=True, pipe=1, scales=1),
    # the second consumer warpgroup starts a k-block behind the first (once per CTA: sg1, every work item: sg2), so
    # one promotes while the other's MMAs run instead of both at once
    "wgmma_tma_e_ss_tmastore_sg1": TmaConfig(256, 2, 3, 2, 1, persistent=True, scales=1, stagger=1),
    "wgmma_tma_e_ss_tmastore_sg2": TmaConfig(256, 2, 3, 2, 1, persistent=True, scales=1, stagger=2),
    "wgmma_tma_e_ss_tmastore_split_sg2": TmaConfig(256, 2, 3, 2, 1, persistent=True, scales=1, split=4, stagger=2),
    # 128 x 192 tiles: one m64n192 batch, one wait and one promotion per consumer warpgroup and k-block (4 stages
    # beside the C tiles); slower than the 128 x 256 tiles (the gap run times it: gemm_prefill.GAP_KERNELS)
    "wgmma_tma_w192_ss_tmastore": TmaConfig(192, 2, 4, 2, 1, persistent=True, scales=1),
    # 128 x 224 tiles: n128 + n96 sub-tiles, bf16 stored from registers, 5 stages; slower than 128 x 256 (the gap run
    # times it: gemm_prefill.GAP_KERNELS)
    "wgmma_tma_w224_ss_s5": TmaConfig(224, 2, 5, 2, 0, persistent=True, scales=1),
}
#: every named TMA kernel; "wgmma_tma" (None) picks its configuration per shape (tma_default)
TMA_KERNELS: dict = {"wgmma_tma": None, **TMA_LADDER, **TMA_VARIANTS}
#: what the .cu instantiates, per kernel family (macro): sources.py passes each list as -DFP8LAB_<macro>=<macro>(...)...
TMA_FAMILIES = ("W8A8_TMA", "W8A8_TMA_P", "W8A8_TMA_S", "W8A8_TMA_PS", "W8A8_TMA_SG")
TMA_COMPILED = {f: sorted({c.compiled for c in TMA_KERNELS.values() if c is not None and c.family == f})
                for f in TMA_FAMILIES}
TMA_CONFIGS, TMA_PIPE_CONFIGS = TMA_COMPILED["W8A8_TMA"], TMA_COMPILED["W8A8_TMA_P"]


def tma_cuda_defines() -> tuple[str, ...]:
    """The compiled TMA configurations as the -D instantiation lists of gemm_w8a8_tma.cu (one list: no drift)."""
    from .sources import instances

    return tuple(instances("FP8LAB_" + f, f, TMA_COMPILED[f]) for f in TMA_FAMILIES)


def tile_counts(M: int, N: int, cfg: TmaConfig) -> tuple[int, int]:
    """(m-units, n-blocks): a unit is `cluster` m-blocks of 128 rows. tile_counts(4096, 7168, TmaConfig()) -> (16, 28)"""
    return -(-(-(-M // BM)) // cfg.cluster), -(-N // cfg.bn)


def group_size(M: int, N: int, cfg: TmaConfig, units: int) -> int:
    """m-units per group of the tile order (DeepGEMM's rule): the `units` tiles running at once span `g` units of
    A rows and ceil(units / g) blocks of B columns; pick g in {1, 2, 4, 8, 16} with the fewest rows in flight.

    group_size(4096, 7168, TmaConfig(), 66) -> 8   (8 x 256 rows of A, 9 x 256 columns of B)"""
    mu, _ = tile_counts(M, N, cfg)
    best = None
    for g in (1, 2, 4, 8, 16):
        if g > mu and g > 1:
            break
        rows = g * cfg.cluster * BM + -(-units // g) * cfg.bn
        if best is None or rows < best[0]:
            best = (rows, g)
    return best[1]


#: what cutting a wave along K costs, in k-blocks of one tile's time: the partials' round trip through L2, the
#: fences, and twice the CTAs streaming A and B at once. Fitted on the H200 (gemm_prefill --tune, 128 x 256 tiles at
#: M = 512 and 2048: a cut wave took about 1 / S of a wave plus 16 k-blocks).
SPLIT_FIXUP_KB = 16


def cut_wave_time(S: int, KB: int) -> float:
    """The modelled time of a wave whose tiles are cut into S pieces along K, in waves: 1 / S + SPLIT_FIXUP_KB / KB."""
    return 1 / S + SPLIT_FIXUP_KB / KB


def split_plan(T: int, P: int, KB: int, most: int, min_kb: int = 4) -> tuple[int, int]:
    """(F, S): of T tiles on P CTAs (clusters), the first F run whole and the remaining T - F (the last wave) in S
    pieces along K, each of at least `min_kb` k-blocks; (T, 1) where nothing is gained: the last wave more than half
    full, K too short to cut, or the cut wave's time (1 / S of a wave + SPLIT_FIXUP_KB k-blocks) not under 0.9 of it.

    split_plan(224, 66, 56, 4) -> (198, 2)   # 4 waves of 66, the last holding 26 tiles: 3 waves + 52 half tiles
    split_plan(32, 66, 112, 4) -> (0, 2)     # one wave, half empty: every tile in two
    split_plan(448, 66, 56, 4) -> (448, 1)   # the last wave holds 52 of 66: left whole
    split_plan(32, 66, 32, 4) -> (32, 1)     # 16 k-blocks a piece: the fix-up eats the gain"""
    if most < 2 or T <= 0 or P <= 0:
        return T, 1
    waves = -(-T // P)
    F = (waves - 1) * P
    S = min(P // (T - F), most, KB // min_kb)
    if S < 2 or cut_wave_time(S, KB) >= 0.9:
        return T, 1
    return F, S


def streamk_tail(T: int, P: int, KB: int, min_kb: int = 4) -> tuple[int, int]:
    """(F, -slots): of T tiles on P CTAs (clusters), the F = (waves - 1) P of the full waves run whole, and the k-blocks
    of the last T - F tiles, laid end to end, are cut into P equal ranges, one per CTA; `slots` is the most ranges
    (pieces) any of those tiles is shared by, the workspace slots per tile. (T, 1) where there is no tail to balance
    (the last wave is full), a range would hold fewer than `min_kb` k-blocks (a tile's pieces must be consecutive
    CTAs: no empty range between them), or the kernel's 32-bit segment arithmetic would overflow.

    streamk_tail(112, 66, 148) -> (66, -3)   # 2048x3584x18944 on 66 pairs: 46 tiles' 6808 k-blocks, 103 or 104 each
    streamk_tail(132, 66, 56) -> (132, 1)    # two full waves"""
    waves = -(-T // P) if P > 0 else 0
    F = (waves - 1) * P
    if T <= 0 or P <= 0 or T - F == P or (T - F) * KB < min_kb * P or (T - F) * KB * P >= 2**31:
        return T, 1
    return F, -max(seg[-1] for seg in streamk_segments(T, F, P, KB))


def streamk_segments(T: int, F: int, P: int, KB: int) -> list[tuple]:
    """The stream-K tail's non-empty segments as gemm_w8a8_tma.cu's work_item makes them: (CTA c, tile t, k-block
    range [kb0, kb1), piece, np: the pieces of tile t), in item order (layer by layer, CTA by CTA)."""
    TK = (T - F) * KB
    owner = lambda g: ((g + 1) * P - 1) // TK  # noqa: E731 - the kernel's streamk_owner
    layers = (-(-TK // P) - 1) // KB + 2
    out = []
    for j in range(layers * P):
        l, c = divmod(j, P)
        g0, g1 = c * TK // P, (c + 1) * TK // P
        tr = g0 // KB + l
        lo, hi = max(g0, tr * KB), min(g1, (tr + 1) * KB)
        if lo >= hi:
            continue
        first = owner(tr * KB)
        out.append((c, F + tr, lo - tr * KB, hi - tr * KB, c - first, owner(tr * KB + KB - 1) - first + 1))
    return out


def max_units(cfg: TmaConfig, fn=None) -> int:
    """Clusters (or CTAs) of this config that fit on the device at once: the persistent grid."""
    from . import tma

    if cfg.cluster == 1:
        return tma.sm_count()
    n = tma.max_active_clusters(fn.kernel.ptr, cfg.cluster, cfg.threads, cfg.smem) if fn is not None else None
    return n or tma.sm_count() // cfg.cluster


def tma_default(M: int, N: int, K: int, units: dict | None = None) -> TmaConfig:
    """The configuration "wgmma_tma" runs at this shape.

    Rule (measured on the H200, outputs/kernels/gemm.json): in 2-CTA clusters (M > 128), 128 x 256 tiles with the
    scales staged in shared memory and the TMA-store epilogue where the grid is full, the 128 x 128 tiles of version D
    (two partial-sum buffers) where 256-wide tiles would leave SMs idle; at M <= 128 (one m-block: no pair to
    cluster) 128 x 128 tiles, one CTA each (they beat 128 x 256 at all three M = 128 shapes tried); every one with a
    mostly idle last wave cut along K (split_plan). The choice weighs the waves each takes (a cut wave counts
    1 / S + SPLIT_FIXUP_KB / KB) against the per-tile speed: 128 x 128 tiles ran at ~0.82 of the 128 x 256 rate per
    FLOP at 4096 x 7168 x 7168 (more bytes per FLOP from L2, as many promotions).
    `units`: {(bn, cluster): how many fit at once} (default 132 SMs, 66 pairs)."""
    units = units or {}
    v = TMA_VARIANTS
    cands = ((TMA_LADDER["wgmma_tma_e_ss_tmastore_split"], 1.0), (v["wgmma_tma_p_tmastore_split"], 0.82)) if M > BM \
        else ((v["wgmma_tma_c_split"], 1.0),)
    best = None
    for cfg, per_tile in cands:
        mu, nb = tile_counts(M, N, cfg)
        P = units.get((cfg.bn, cfg.cluster), 132 // cfg.cluster)
        T, KB = mu * nb, -(-K // BK)
        F, S = split_plan(T, P, KB, cfg.split)
        waves = F / P + cut_wave_time(S, KB) if S > 1 else -(-T // P)
        speed = T / (waves * P) * per_tile  # busy fraction of the waves x relative speed of a full wave
        if best is None or speed > best[0] + 1e-9:
            best = (speed, cfg)
    return best[1]


def _prepare_tma(a, sa, b, sb, M, N, K, cfg: TmaConfig, out) -> Launch:
    from . import tma

    cfg.check()
    a, b = _fp8_codes(a, "a").contiguous(), _fp8_codes(b, "b").contiguous()
    a = a if a.data_ptr() % 16 == 0 else a.clone()  # the copy engine needs 16-byte-aligned base addresses
    b = b if b.data_ptr() % 16 == 0 else b.clone()
    sb = sb.contiguous()
    if out is None:
        out = torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
    elif out.shape != (M, N) or out.dtype != torch.bfloat16 or not out.is_contiguous() or out.data_ptr() % 16:
        raise ValueError(f"out must be a contiguous, 16-byte-aligned bf16 tensor of shape {(M, N)}")
    tma.check_device()
    cp = _cuda._cupy()
    fn = _cuda.load_module("gemm_w8a8_tma.cu").get_function(cfg.function)
    fn.max_dynamic_shared_size_bytes = cfg.smem
    maps = (tma.map_2d(M, K, 1, BM, BK), tma.map_2d(N, K, 1, cfg.bn // cfg.cluster, BK),
            tma.map_2d(M, N, 2, 64 * cfg.mh, 64))
    descs = [tma.kernel_arg(tma.encode(m, t.data_ptr())) for m, t in zip(maps, (a, b, out))]
    mu, nb = tile_counts(M, N, cfg)
    most = cfg.grid or _max_units_cached(cfg, fn)
    if not cfg.persistent:
        F, S = mu * nb, 1
    elif cfg.split < 0:
        F, S = streamk_tail(mu * nb, most, -(-K // BK))
    else:
        F, S = split_plan(mu * nb, most, -(-K // BK), cfg.split)
    # persistent: no more units than work items (whole tiles + pieces; a stream-K tail uses every unit); one per tile
    # otherwise
    units = (min(F + (mu * nb - F) * S, most) if S > 0 else most) if cfg.persistent else mu * nb
    group = min(cfg.group or group_size(M, N, cfg, units), mu)
    # the split tiles' partial sums (one slot per piece, CTA and consumer warpgroup) and their arrival counters
    # (none unsplit: F = T); a one-element placeholder keeps the pointers valid
    slots = (mu * nb - F) * cfg.cluster * cfg.nwg
    acc_regs = cfg.acc_regs
    ws = torch.empty(max(1, slots * abs(S) * acc_regs * 128), dtype=torch.float32, device=a.device)
    cnt = torch.zeros(max(1, slots), dtype=torch.int32, device=a.device)
    args = (*descs, _sa_arg(sa), cp.int64(sa.stride(0)), cp.int64(sa.stride(1)), _cuda.as_cupy(sb),
            _cuda.as_cupy(out), cp.int32(M), cp.int32(N), cp.int32(K), cp.int32(group), cp.int32(F), cp.int32(S),
            _cuda.as_cupy(ws), _cuda.as_cupy(cnt))
    launch = Launch(fn, (units * cfg.cluster,), (cfg.threads,), args, cfg.smem, out)
    launch.keep = (a, b, sa, sb, ws, cnt)  # the maps hold raw addresses: keep the tensors alive with the launch
    launch.config, launch.grid_units, launch.group, launch.split = cfg, units, group, (F, S)
    return launch


_UNITS: dict = {}


def _max_units_cached(cfg: TmaConfig, fn) -> int:
    key = cfg.compiled
    if key not in _UNITS:
        _UNITS[key] = max_units(cfg, fn)
    return _UNITS[key]


def _sa_arg(sa: torch.Tensor):
    """The raw storage of sa as a flat CuPy array (strides are passed separately, so no copy is made)."""
    cp = _cuda._cupy()
    n = (sa.shape[0] - 1) * sa.stride(0) + (sa.shape[1] - 1) * sa.stride(1) + 1
    flat = torch.as_strided(sa, (n,), (1,))
    return cp.from_dlpack(flat)


# ---- references (float64) ------------------------------------------------------------------------------
def reference(a, sa, b, sb) -> torch.Tensor:
    """float64 c = (decode(a) * sa) @ (decode(b) * sb)^T -- dequantize, then multiply exactly."""
    a, b = _fp8_codes(a, "a"), _fp8_codes(b, "b")
    M, K = a.shape
    N = b.shape[0]
    ad = decode_e4m3(a) * sa.double().repeat_interleave(BK, dim=1)[:, :K]
    bd = decode_e4m3(b) * sb.double().repeat_interleave(BN, 0)[:N].repeat_interleave(BK, 1)[:, :K]
    return ad @ bd.T


def reference_blockwise(a, sa, b, sb) -> torch.Tensor:
    """float64, written the way the kernels compute: per k-block partial products, scaled and summed.

    Mathematically identical to `reference` (scales are constant inside a block); the CPU test checks it.
    """
    a, b = _fp8_codes(a, "a"), _fp8_codes(b, "b")
    M, K = a.shape
    N = b.shape[0]
    ad, bd = decode_e4m3(a), decode_e4m3(b)
    sbn = sb.double().repeat_interleave(BN, 0)[:N]  # [N, KB]
    c = torch.zeros(M, N, dtype=torch.float64, device=a.device)
    for kb in range(K // BK):
        part = ad[:, kb * BK:(kb + 1) * BK] @ bd[:, kb * BK:(kb + 1) * BK].T
        c += part * sa.double()[:, kb:kb + 1] * sbn[:, kb][None, :]
    return c


def w8a16_reference(x: torch.Tensor, b, sb) -> torch.Tensor:
    """The W8A16 answer seed 001 gates against: bf16 activations (unquantized) times the dequantized weights."""
    b = _fp8_codes(b, "b")
    N, K = b.shape
    bd = decode_e4m3(b) * sb.double().repeat_interleave(BN, 0)[:N].repeat_interleave(BK, 1)[:, :K]
    return x.to(torch.bfloat16).double() @ bd.T


def accuracy_gate(y: torch.Tensor, ref: torch.Tensor) -> dict:
    """Seed 001's gate: cosine >= 0.999 and relative RMS <= 2 % (against the W8A16 reference)."""
    y, ref = y.double().flatten(), ref.double().flatten()
    cos = float(torch.dot(y, ref) / (y.norm() * ref.norm()))
    rel_rms = float((y - ref).norm() / ref.norm())
    return {"cosine": cos, "rel_rms": rel_rms, "passed": bool(cos >= 0.999 and rel_rms <= 0.02)}


def test_inputs(M: int, N: int, K: int, kind: str = "random", device="cuda", seed: int = 0):
    """Realistic activations and weights: 'random' (N(0,1) activations, N(0, 0.02) weights) or
    'outliers' (heavy-tailed t(3) activations with 1 % of channels x 50, the LLM.int8() pattern)."""
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(M, K, device=device, generator=g)
    if kind == "outliers":
        chi = torch.randn(M, K, 3, device=device, generator=g).pow(2).sum(-1) / 3
        x = x / chi.sqrt()  # Student t with 3 degrees of freedom
        ch = torch.randperm(K, device=device, generator=g)[: max(1, K // 100)]
        x[:, ch] *= 50.0
    elif kind != "random":
        raise ValueError(f"unknown input kind {kind!r}: 'random' or 'outliers'")
    w = torch.randn(N, K, device=device, generator=g) * 0.02
    return x.to(torch.bfloat16), w


def skipped_kernels() -> set:
    """Kernels a device run marked as failing its smoke test (FP8LAB_SKIP_KERNELS=a,b): not timed or tested."""
    return {k for k in os.environ.get("FP8LAB_SKIP_KERNELS", "").split(",") if k}
