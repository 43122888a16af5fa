"""Decode attention over an FP8 (E4M3) or bf16 KV cache, contiguous or paged: three kernel versions.

    out = decode_attention(q, k_cache, v_cache, seq_lens, k_scale=ks, v_scale=vs)          # contiguous
    out = decode_attention(q, k_pool, v_pool, seq_lens, block_table=bt, k_scale=ks, v_scale=vs)  # paged
    out = decode_attention(q, k_cache, v_cache, seq_lens, k_scale=ks, v_scale=vs, version=1)   # the first kernel

    version 1 (attention_fp8kv.cu): each warp keeps its next tiles in flight in registers (pv "va" or "vb").
    version 2 (attention_decode_v2.cu; design in attention_decode.cuh): the tiles in flight live in a
              shared-memory ring per warp instead, so a warp needs half the registers and twice the warps fit on an
              SM; `config` = (NSUB tiles per softmax step, NS ring stages, ROT rotated visiting order, MINB blocks per
              SM) picks a compiled configuration (V2_KERNELS; default V2_DEFAULTS). The NVFP4 cache uses the same
              kernel: attention_nvfp4kv.py.
    version 3 (attention_decode_v3.cu, the default on sm_90+): version 2's ring and arithmetic, filled by the bulk copy engine
              (whole K and V rows per copy, one mbarrier per stage) instead of per-lane cp.async; `config` = (NS ring
              stages, COPY 0: a copy per row into padded rows / 1: a copy per tile, MINB blocks per SM)
              (V3_KERNELS; default V3_DEFAULTS, or V3_LONG_DEFAULTS for long caches: v3_default).

    q            bf16 [B, Hq, D]            one query token per sequence, D in (64, 128)
    k/v cache    [B, Hk, L, D]              contiguous, or
    k/v pool     [n_pages, Hk, P, D]        paged, with block_table int32 [B, max_blocks] of page indices
                 uint8 E4M3 codes (or torch.float8_e4m3fn), or bf16 (the same kernel, other element type)
    seq_lens     [B] ints, 1 <= seq_lens[b] <= L (contiguous) or <= max_blocks * P (paged)
    k/v_scale    fp32 per tensor (a float or a 1-element tensor) or per KV head ([Hk]); FP8 only
    out          bf16 [B, Hq, D];  query head i uses KV head i // (Hq // Hk)  (torch's enable_gqa)

The numbers (vLLM's convention): k_real = E4M3.decode(code) * k_scale. A worked example, one sequence,
one head, D = 64, two tokens with k codes 0x38 (= 1.0) in every dim, v codes 0x38 / 0x40 (1.0 / 2.0) in
every dim, k_scale = v_scale = 0.5, q = 1: both scores are 64 * 0.5 / 8 = 4, so the weights are 1/2, 1/2 and
every output dim is 0.5 * (0.5 * 1 + 0.5 * 2) = 0.75.

The cache must be finite: E4M3 NaN codes (0x7F / 0xFF), which a saturating encoder never writes, come out
as NaN with conv="cvt" and as +-480 with conv="bit". Slots past a sequence's end are never read.

`reference_decode_attention` is the CPU truth the kernel is tested against: dequantize with fp8lab.formats,
gather the pages, then torch's scaled_dot_product_attention in float32 on each sequence.

Why FP8 can be ~2x faster: one decode step reads the whole cache once, a few FLOPs per byte, so the time is
the bytes over memory bandwidth, and E4M3 halves the bytes. The work the kernel adds per byte (widening
E4M3 to f16) must stay cheaper than the memory time saved, which is why it uses the tensor cores for both
products and converts in registers (see the headers of attention_fp8kv.cu and attention_decode.cuh).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import _cuda
from .reference import quantize_kv

HEAD_DIMS = (64, 128)
TILE = 16          # tokens per warp step; a paged pool's page size must be a multiple of it
MAX_GROUP = 16     # query heads per KV head that the 16-row MMA can hold
FP8_CONVS = ("cvt", "bit")   # E4M3 -> f16 by the cvt.rn.f16x2.e4m3x2 instruction, or by a bit move
DEFAULT_CONV = "cvt"
PV_LAYOUTS = ("va", "vb")    # V as the A operand of the P.V MMA (O^T = V^T P^T), or as its B operand (O = P V)
DEFAULT_PV = "va"


class AttentionArgError(ValueError):
    """Bad arguments to decode_attention, found before any CUDA call."""


@dataclass(frozen=True)
class Problem:
    """What check_args learned: sizes, the cache kind and layout."""

    B: int
    Hq: int
    Hk: int
    D: int
    fp8: bool
    paged: bool
    page: int          # tokens per page (contiguous: the cache's L, one page per sequence)
    max_blocks: int
    n_pages: int

    @property
    def G(self) -> int:
        return self.Hq // self.Hk


# ---- argument checks (CPU only: no CUDA call before they pass) -------------------------------------------
def _codes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


def _as_int_list(x, name: str) -> list[int]:
    if isinstance(x, torch.Tensor):
        if x.dtype.is_floating_point or x.dtype == torch.bool:
            raise AttentionArgError(f"{name} must hold integers, got {x.dtype}")
        return [int(v) for v in x.detach().cpu().reshape(-1).tolist()]
    try:
        return [int(v) for v in x]
    except TypeError:
        raise AttentionArgError(f"{name} must be a sequence of ints or an int tensor, got {type(x).__name__}") from None


def _scale_values(s, Hk: int, name: str, check_values: bool) -> None:
    if isinstance(s, (int, float)):
        vals = [float(s)]
    elif isinstance(s, torch.Tensor):
        if s.numel() not in (1, Hk):
            raise AttentionArgError(f"{name} must be per tensor (1 value) or per KV head ({Hk} values), got shape {tuple(s.shape)}")
        if not s.dtype.is_floating_point:
            raise AttentionArgError(f"{name} must be a float tensor, got {s.dtype}")
        vals = s.detach().float().cpu().reshape(-1).tolist() if check_values else []
    else:
        raise AttentionArgError(f"{name} must be a float or a float tensor, got {type(s).__name__}")
    for v in vals:
        if not (math.isfinite(v) and v > 0):
            raise AttentionArgError(f"{name} must be finite and > 0 (a dequant multiplier), got {v}")


def _splits(plan, max_len: int, num_splits, p, dev):
    """(S, split_len, part_o, part_ml): the split count (plan(SM count) when num_splits is None, both versions'
    planners) and the fp32 partials the splits write, [B, Hq, S, D] and [B, Hq, S, 2] (a dummy when S == 1)."""
    if num_splits is None:
        S, split_len = plan(torch.cuda.get_device_properties(dev).multi_processor_count)
    else:
        S, split_len = _split_len_for(max_len, num_splits)
    if S > 1:
        part_o = torch.empty((p.B, p.Hq, S, p.D), dtype=torch.float32, device=dev)
        part_ml = torch.empty((p.B, p.Hq, S, 2), dtype=torch.float32, device=dev)
    else:
        part_o = part_ml = torch.empty(4, dtype=torch.float32, device=dev)  # unused
    return S, split_len, part_o, part_ml


def cache_kind(name: str, t) -> str:
    """'fp8' (E4M3 codes as uint8 or float8_e4m3fn) or 'bf16'; AttentionArgError for any other element type."""
    if t.dtype in (torch.uint8, torch.float8_e4m3fn):
        return "fp8"
    if t.dtype == torch.bfloat16:
        return "bf16"
    raise AttentionArgError(f"{name} must hold E4M3 codes (uint8 / float8_e4m3fn) or bf16, got {t.dtype}")


def check_lens(seq_lens, block_table, B: int, cap: int, P: int, n_pages: int) -> None:
    """B sequence lengths in [1, cap] (cap: the tokens a sequence's cache holds); with a block table (paged, values
    checked), every page a sequence uses inside the pool of n_pages pages. Every decode cache format."""
    lens = _as_int_list(seq_lens, "seq_lens")
    if len(lens) != B:
        raise AttentionArgError(f"seq_lens must have B={B} entries, got {len(lens)}")
    bad = [(b, n) for b, n in enumerate(lens) if not 1 <= n <= cap]
    if bad:
        b, n = bad[0]
        raise AttentionArgError(f"seq_lens[{b}] = {n} is outside [1, {cap}] (the cache holds {cap} tokens per sequence)")
    if block_table is not None:
        bt = block_table.detach().cpu()
        for b, n in enumerate(lens):
            used = bt[b, : -(-n // P)]
            if used.numel() and (int(used.min()) < 0 or int(used.max()) >= n_pages):
                raise AttentionArgError(
                    f"block_table[{b}] points outside the pool of {n_pages} pages: "
                    f"entries {used.tolist()[:8]}{'...' if used.numel() > 8 else ''}")


def check_paged(block_table, seq_lens, B: int, P: int) -> None:
    """The paged layout's own rules (every decode cache format): an int block table [B, max_blocks], pages of a
    multiple of TILE tokens, and seq_lens given. Raises AttentionArgError (one line) otherwise."""
    if not isinstance(block_table, torch.Tensor) or block_table.dtype not in (torch.int32, torch.int64):
        raise AttentionArgError("block_table must be an int32 tensor [B, max_blocks]")
    if block_table.dim() != 2 or block_table.shape[0] != B:
        raise AttentionArgError(f"block_table must be [B={B}, max_blocks], got shape {tuple(block_table.shape)}")
    if P % TILE:
        raise AttentionArgError(f"page size must be a multiple of {TILE} tokens (a tile never straddles pages), got {P}")
    if seq_lens is None:
        raise AttentionArgError("a paged cache needs seq_lens")


def check_args(q, k_cache, v_cache, seq_lens=None, block_table=None, k_scale=None, v_scale=None,
               *, check_values: bool = True) -> Problem:
    """Validate shapes, dtypes and (with check_values) the lengths, page indices and scales.

    Raises AttentionArgError (a ValueError) with a plain message. check_values=False skips the checks that
    need the values on the host (a device sync for CUDA tensors); the benchmark uses it after one checked call.
    """
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        _cuda.require_tensor(t, name, AttentionArgError)
    _cuda.bf16_tensor(q, "q", 3, "[B, Hq, D] (one query token per sequence)", AttentionArgError)
    B, Hq, D = q.shape
    if D not in HEAD_DIMS:
        raise AttentionArgError(f"head_dim must be one of {HEAD_DIMS}, got {D}")
    kinds = []
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        kinds.append(cache_kind(name, t))
        if t.dim() != 4:
            raise AttentionArgError(f"{name} must be 4-D ([B, Hk, L, D] or [n_pages, Hk, P, D]), got shape {tuple(t.shape)}")
        if not t.is_contiguous():
            raise AttentionArgError(f"{name} must be contiguous")
    if kinds[0] != kinds[1]:
        raise AttentionArgError(f"k_cache and v_cache must have the same element type, got {k_cache.dtype} and {v_cache.dtype}")
    if tuple(k_cache.shape) != tuple(v_cache.shape):
        raise AttentionArgError(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} must have the same shape")
    fp8 = kinds[0] == "fp8"
    N0, Hk, P, Dk = k_cache.shape
    if Dk != D:
        raise AttentionArgError(f"q has head_dim {D} but the cache has {Dk}")
    if Hk < 1 or Hq % Hk:
        raise AttentionArgError(f"n_q_heads ({Hq}) must be a multiple of n_kv_heads ({Hk})")
    if Hq // Hk > MAX_GROUP:
        raise AttentionArgError(f"at most {MAX_GROUP} query heads per KV head (the MMA has 16 rows), got {Hq // Hk}")
    devs = {t.device for t in (q, k_cache, v_cache)}
    if len(devs) != 1:
        raise AttentionArgError(f"q, k_cache and v_cache must be on one device, got {sorted(map(str, devs))}")

    paged = block_table is not None
    if paged:
        check_paged(block_table, seq_lens, B, P)
        max_blocks, n_pages, cap = block_table.shape[1], N0, block_table.shape[1] * P
    else:
        if N0 != B:
            raise AttentionArgError(f"contiguous cache must be [B={B}, Hk, L, D], got batch {N0}")
        max_blocks, n_pages, cap = 1, B, P

    if seq_lens is not None and (check_values or not isinstance(seq_lens, torch.Tensor)):
        check_lens(seq_lens, block_table if paged and check_values else None, B, cap, P, n_pages)
    elif seq_lens is not None:
        if seq_lens.numel() != B:
            raise AttentionArgError(f"seq_lens must have B={B} entries, got {seq_lens.numel()}")

    if fp8:
        if k_scale is None or v_scale is None:
            raise AttentionArgError("an FP8 cache needs k_scale and v_scale (k_real = decode(code) * k_scale); "
                                    "pass 1.0 for unscaled codes")
        _scale_values(k_scale, Hk, "k_scale", check_values)
        _scale_values(v_scale, Hk, "v_scale", check_values)
    elif k_scale is not None or v_scale is not None:
        raise AttentionArgError("a bf16 cache takes no k_scale/v_scale (they would be silently ignored)")
    return Problem(B, Hq, Hk, D, fp8, paged, P, max_blocks, n_pages)


# ---- version 2: the compiled configurations -------------------------------------------------------------------
VERSIONS = (1, 2, 3)
#: version 3 unless pv="vb" is asked for (only version 1 has that layout) or the GPU predates sm_90 (version 2 then);
#: the measured choice: outputs/kernels/attention.json (the sweep at 32k, D = 128, and every recorded shape)
DEFAULT_VERSION = 3
#: the versions whose tiles in flight live in a shared-memory ring (one launch function, launch_ring)
RING_VERSIONS = (2, 3)
#: version 3 merges the splits inside the kernel (the last block of each (sequence, kv head) to finish, no second
#: launch) unless merge=False asks for the split reduce kernel (decode_reduce) that versions 1 and 2 launch
V3_MERGE = True
#: version 3 with the splits merged inside the kernel: splits of >= 1 tile (the planner's min_tiles; 4 with the reduce
#: kernel, whose cost grows with the split count), at most 128 per (sequence, kv head) (the last block merges one
#: partial per block of 4). Measured on the decode layer (tools/gpu/min_tiles_probe.py): ~3.5 us faster at batch 1,
#: 1k tokens, and 1-2 us at batch 8; 256 splits at batch 1, 8k tokens were ~1 us slower than 128 (the cap).
V3_MIN_TILES_MERGED = 1
V3_MAX_SPLITS_MERGED = 128
V3_SOURCE = "attention_decode_v3.cu"


def v3_available(device=None) -> bool:
    """Whether version 3 runs on this CUDA device: its source builds for the device's arch (sources.py: the bulk copy
    engine, sm_90 and later). The one rule the launch, the defaults, the bench and the tests ask."""
    from .sources import get

    dev = torch.device("cuda" if device is None else device)
    if dev.type != "cuda":
        return False
    major, minor = torch.cuda.get_device_capability(dev)
    return get(V3_SOURCE).builds_for(10 * major + minor)


def require_v3(device, instead: str) -> None:
    """AttentionArgError (one line) where version 3 cannot run; `instead` names what to use."""
    if not v3_available(device):
        cc = ".".join(map(str, torch.cuda.get_device_capability(device)))
        raise AttentionArgError(f"version 3 needs the bulk copy engine (sm_90 and later); this GPU is {cc}: use {instead}")


WARPS_PER_BLOCK_V2 = 4
V2_FMTS = ("bf16", "fp8cvt", "fp8bit")
#: (format, head_dim, group kind, NSUB tiles per softmax step, NS ring stages, ROT rotated order, MINB blocks/SM)
#: passed to NVRTC as -DFP8LAB_ATTN_V2=DECODE_V2(...)... for attention_decode_v2.cu: one list, the .cu has no other.
V2_DEFAULTS = {
    ("fp8cvt", 128, "g8"): (1, 3, 1, 4), ("fp8bit", 128, "g8"): (1, 3, 1, 4), ("bf16", 128, "g8"): (1, 2, 1, 3),
    ("fp8cvt", 128, "g16"): (1, 3, 1, 3), ("fp8bit", 128, "g16"): (1, 3, 1, 3), ("bf16", 128, "g16"): (1, 2, 1, 2),
    ("fp8cvt", 64, "g8"): (1, 4, 1, 4), ("fp8bit", 64, "g8"): (1, 4, 1, 4), ("bf16", 64, "g8"): (1, 3, 1, 4),
    ("fp8cvt", 64, "g16"): (1, 4, 1, 4), ("fp8bit", 64, "g16"): (1, 4, 1, 4), ("bf16", 64, "g16"): (1, 3, 1, 4),
}
#: the tuning sweep's extra candidates (head_dim 128, G <= 8: the benchmark's shape)
V2_SWEEP = {
    ("fp8cvt", 128, "g8"): [(1, 3, 0, 4), (1, 4, 1, 3), (2, 2, 1, 3), (2, 3, 1, 3)],
    ("fp8bit", 128, "g8"): [(2, 2, 1, 3)],
    ("bf16", 128, "g8"): [(1, 3, 1, 2), (2, 2, 1, 2)],
}
V2_KERNELS = frozenset({(f, D, g) + cfg for (f, D, g), cfg in V2_DEFAULTS.items()}
                       | {(f, D, g) + cfg for (f, D, g), cfgs in V2_SWEEP.items() for cfg in cfgs})


def cuda_defines() -> tuple[str, ...]:
    """The version-2 instantiation list for attention_decode_v2.cu (sources.py names this function)."""
    from .sources import instances

    return (instances("FP8LAB_ATTN_V2", "DECODE_V2", V2_KERNELS),)


def v2_tile_bytes(fmt: str, D: int) -> int:
    """Shared-memory bytes of one 16-token tile (K and V; NVFP4 adds its scale rows): attention_decode.cuh Geo."""
    if fmt == "nvfp4":
        return 2 * 16 * (D // 2) + 2 * D
    return 2 * 16 * D * (2 if fmt == "bf16" else 1)


def v2_smem(fmt: str, D: int, nsub: int, ns: int, warps: int = WARPS_PER_BLOCK_V2) -> int:
    """Dynamic shared memory of one version-2 block: a ring of ns stages of nsub tiles per warp.

    v2_smem("fp8cvt", 128, 1, 3) -> 49152   # 4 warps x 3 stages x 4096 bytes
    """
    return warps * ns * nsub * v2_tile_bytes(fmt, D)


def v2_kernel_name(fmt: str, D: int, g: str, cfg: tuple) -> str:
    nsub, ns, rot, minb = cfg
    return f"decode_v2_{fmt}_d{D}_{g}_n{nsub}_s{ns}_r{rot}_b{minb}"


# ---- version 3: the compiled configurations -------------------------------------------------------------------
V3_FMTS = V2_FMTS + ("nvfp4",)  # attention_nvfp4kv.py launches the NVFP4 kernels from the same list
#: (format, head_dim, group kind, NS ring stages, COPY (0: one bulk copy per row into padded rows, 1: one per tile's K
#: and V into unpadded rows, 2: one per two tiles' K and V -- per page they lie in), MINB blocks/SM), passed as
#: -DFP8LAB_ATTN_V3=DECODE_V3(...)... for attention_decode_v3.cu
#: FP8 D = 128: (2, 1, 4) -- 16 warps per SM of two stages each, 32 splits at the benchmark's shape -- replaced (4, 1, 3)
#: once the splits merged inside the kernel: ~3 us faster at 16k and within ~1 % at 32k and 128k in the exploratory
#: probe runs (tools/gpu/attn_probe.py); the recorded sweeps at 32k (attention_sweep.json) have had (4, 1, 3) ~1.5 %
#: faster there, and (2, 2, 3) faster still: the choice is open, see ATTENTION_NOTES.md
V3_DEFAULTS = {
    ("fp8cvt", 128, "g8"): (2, 1, 4), ("fp8bit", 128, "g8"): (2, 1, 4), ("bf16", 128, "g8"): (2, 1, 3),
    ("fp8cvt", 128, "g16"): (3, 1, 3), ("fp8bit", 128, "g16"): (3, 1, 3), ("bf16", 128, "g16"): (2, 1, 2),
    ("fp8cvt", 64, "g8"): (4, 1, 4), ("fp8bit", 64, "g8"): (4, 1, 4), ("bf16", 64, "g8"): (3, 1, 4),
    ("fp8cvt", 64, "g16"): (4, 1, 4), ("fp8bit", 64, "g16"): (4, 1, 4), ("bf16", 64, "g16"): (3, 1, 4),
    ("nvfp4", 128, "g8"): (6, 1, 4), ("nvfp4", 128, "g16"): (6, 1, 3),
    ("nvfp4", 64, "g8"): (6, 1, 4), ("nvfp4", 64, "g16"): (6, 1, 4),
}
#: the tuning sweep's extra candidates (head_dim 128, G <= 8: the benchmark's shape). COPY = 0 (a copy per row) is
#: kept as measured: the bulk copy takes uniform operands, so 32 lanes' copies become a 32-pass loop in the SASS.
#: COPY = 2 (two tiles per stage: 4 KB copies of FP8 rows instead of 2 KB) tests whether larger copies stream faster
#: (tools/gpu/stream_probe.py: 2 KB bulk copies were at the edge of the read rate, 4 KB and up were not).
V3_SWEEP = {
    ("fp8cvt", 128, "g8"): [(3, 0, 4), (4, 1, 3), (3, 1, 4), (5, 1, 2), (2, 2, 3), (3, 2, 2)],
    ("bf16", 128, "g8"): [(2, 0, 3), (3, 1, 2)],
    ("nvfp4", 128, "g8"): [(4, 1, 4), (8, 1, 3), (4, 1, 3)],
}
#: long caches: where a problem's cache holds >= V3_LONG_ROWS rows (B x Hk x tokens planned for), these configurations
#: replace V3_DEFAULTS (v3_default). COPY = 2 moves each stage's K and V in 4 KB copies instead of 2 KB; in every
#: recorded H200 sweep at 32k (attention_sweep.json, repeats/attention_sweep_*.json) (2, 2, 3) was the fastest FP8
#: configuration, ahead of (2, 1, 4); at 16k the probe of ATTENTION_NOTES.md had (2, 1, 4) ahead (24 longer splits
#: against 32, one wave either way). The bench times the other choice beside the default at every context (the
#: "alternative default" rows, bench_attention.default_rule_rows), so each recording re-checks the rule. A paged cache
#: whose pages hold fewer than two tiles keeps V3_DEFAULTS: its copies would be no larger.
V3_LONG_DEFAULTS = {("fp8cvt", 128, "g8"): (2, 2, 3)}
V3_LONG_ROWS = 8 * 8 * 32768
V3_KERNELS = frozenset({(f, D, g) + cfg for (f, D, g), cfg in V3_DEFAULTS.items()}
                       | {(f, D, g) + cfg for (f, D, g), cfg in V3_LONG_DEFAULTS.items()}
                       | {(f, D, g) + cfg for (f, D, g), cfgs in V3_SWEEP.items() for cfg in cfgs})


def v3_default(fmt: str, D: int, g: str, B: int, Hk: int, max_len: int, page: int | None = None) -> tuple:
    """Version 3's default configuration for a problem: V3_LONG_DEFAULTS[(fmt, D, g)] where the cache holds at least
    V3_LONG_ROWS rows (B x Hk x max_len) and, paged, its pages hold whole pairs of tiles; else V3_DEFAULTS[(fmt, D, g)].
    page: tokens per page of a paged cache (None: contiguous).

    v3_default("fp8cvt", 128, "g8", 8, 8, 32768)      -> (2, 2, 3)
    v3_default("fp8cvt", 128, "g8", 8, 8, 16384)      -> (2, 1, 4)
    v3_default("fp8cvt", 128, "g8", 8, 8, 32768, 16)  -> (2, 1, 4)   # 16-token pages: one tile per page
    v3_default("bf16", 128, "g8", 8, 8, 32768)        -> (2, 1, 3)
    """
    key = (fmt, D, g)
    if (key in V3_LONG_DEFAULTS and B * Hk * max_len >= V3_LONG_ROWS
            and (page is None or page % (2 * TILE) == 0)):
        return V3_LONG_DEFAULTS[key]
    return V3_DEFAULTS[key]


def cuda_defines_v3() -> tuple[str, ...]:
    """The version-3 instantiation list for attention_decode_v3.cu (sources.py names this function)."""
    from .sources import instances

    return (instances("FP8LAB_ATTN_V3", "DECODE_V3", V3_KERNELS),)


def v3_stage_bytes(fmt: str, D: int, copy: int) -> int:
    """Shared-memory bytes of one version-3 stage: 16 K rows and 16 V rows, padded by 16 bytes each when copy == 0
    (attention_decode_v3.cu Geo3).

    v3_stage_bytes("fp8cvt", 128, 0) -> 4608   # 32 rows x (128 + 16)
    v3_stage_bytes("fp8cvt", 128, 2) -> 8192   # two tiles per stage (COPY 2)
    """
    if fmt not in V3_FMTS:
        raise AttentionArgError(f"version 3 reads the caches {V3_FMTS}, not {fmt!r}")
    if copy == 2:
        return 2 * v2_tile_bytes(fmt, D)  # two tiles' K and V rows, unpadded
    return v2_tile_bytes(fmt, D) + (32 * 16 if copy == 0 else 0)  # version 2's tile, rows padded by 16 bytes (COPY 0)


def v3_merge_bytes(D: int, warps: int = WARPS_PER_BLOCK_V2) -> int:
    """Shared memory of version 3's in-kernel merge (over the rings after the loop): each warp's O, max and sum for up
    to 16 query heads (attention_decode_v3.cu Geo3::MERGE).

    v3_merge_bytes(128) -> 33280   # 4 warps x 16 rows x (128 + 2) floats
    """
    return warps * 16 * (D + 2) * 4


def v3_smem(fmt: str, D: int, ns: int, copy: int, warps: int = WARPS_PER_BLOCK_V2) -> int:
    """Dynamic shared memory of one version-3 block: a ring of ns stages per warp (the merge's area when larger), then
    one 8-byte mbarrier per stage (attention_decode_v3.cu bars_offset).

    v3_smem("fp8cvt", 128, 3, 0) -> 55392   # 4 warps x 3 x 4608 + 4 x 3 x 8
    v3_smem("fp8cvt", 128, 2, 1) -> 33344   # the merge's 33280 > 4 x 2 x 4096, + 4 x 2 x 8
    """
    return max(warps * ns * v3_stage_bytes(fmt, D, copy), v3_merge_bytes(D, warps)) + warps * ns * 8


def v3_kernel_name(fmt: str, D: int, g: str, cfg: tuple) -> str:
    ns, copy, minb = cfg
    return f"decode_v3_{fmt}_d{D}_{g}_s{ns}_c{copy}_b{minb}"


#: version 3's merge counter as it was before the release add: __threadfence() before every block's arrival and again
#: in the last block (each MEMBAR.SC.GPU + CCTL.IVALL), as a text patch of V3_SOURCE (_cuda.patched_sources) for
#: comparisons: the plain atomicAdd in place of the release add, and the __threadfence() in place of the acquire
THREADFENCE_MERGE_PATCH = {V3_SOURCE: [
    ("    __syncthreads();\n    if (threadIdx.x == 0) {\n        const int old = arrive_release(merge_cnt + (size_t)b * Hk + h);",
     "    __threadfence();\n    __syncthreads();\n    if (threadIdx.x == 0) {\n"
     "        const int old = atomicAdd(merge_cnt + (size_t)b * Hk + h, 1);"),
    ("            acquire_after_arrival();", "            ;"),
    ("    if (!last) return;\n", "    if (!last) return;\n    __threadfence();\n")]}


def merge_fence_sass(cc: int = 90, fmt: str = "fp8cvt", D: int = 128, g: str = "g8") -> list[dict]:
    """The fences and atomics of version 3's in-kernel merge in the SASS (compiled here, no GPU needed) of the default
    kernel for (fmt, D, g): as shipped (a barrier, then thread 0's release add; the last block's thread 0 then
    acquires) and with the __threadfence() pair it replaced (THREADFENCE_MERGE_PATCH). CCTL.IVALL is the fences'
    invalidation of the SM's L1 (not the SYNCS.CCTL.IVALL an mbarrier wait compiles to on sm_120)."""
    from . import sass

    if (fmt, D, g) not in V3_DEFAULTS:
        raise ValueError(f"no version 3 default kernel for {(fmt, D, g)}; one of {sorted(V3_DEFAULTS)}")
    name = v3_kernel_name(fmt, D, g, V3_DEFAULTS[(fmt, D, g)])
    rows = []
    for label, patch in (("release add, last block acquires (shipped)", None),
                         ("__threadfence() x 2 (before)", THREADFENCE_MERGE_PATCH)):
        if patch is None:
            k = sass.kernels(V3_SOURCE, cc)[name]
        else:
            with _cuda.patched_sources(patch):
                k = sass.parse(sass.disassemble(_cuda.compile_for(V3_SOURCE, cc)[0]))[name]
        rows.append({"merge counter": label, **{op: len(k.at(op)) for op in
                                                ("MEMBAR.SC.GPU", "MEMBAR.ALL.GPU", "CCTL.IVALL", "ATOMG")},
                     "kernel": name, "sm": cc})
    return rows


#: what the ring versions differ in: source, configuration lists, kernel name, shared memory, the config's fields
RING = {
    2: dict(source="attention_decode_v2.cu", compiled=lambda: V2_KERNELS, defaults=lambda: V2_DEFAULTS,
            name=v2_kernel_name, smem=lambda fmt, D, cfg: v2_smem(fmt, D, cfg[0], cfg[1]), fields="(NSUB, NS, ROT, MINB)"),
    3: dict(source=V3_SOURCE, compiled=lambda: V3_KERNELS, defaults=lambda: V3_DEFAULTS,
            name=v3_kernel_name, smem=lambda fmt, D, cfg: v3_smem(fmt, D, cfg[0], cfg[1]), fields="(NS, COPY, MINB)"),
}


# ---- splits --------------------------------------------------------------------------------------------
def plan_splits(max_len: int, B: int, Hk: int, sms: int = 132, warps_per_sm: int = 8, min_tiles: int = 4) -> tuple[int, int]:
    """(num_splits, split_len): enough warps to fill the GPU once, each with >= min_tiles tiles of 16 tokens.

    plan_splits(32768, 8, 8) -> (16, 2048)   # 64 (sequence, kv head) pairs x 16 splits = 1024 warps <= 132 x 8
    plan_splits(100, 8, 8)   -> (1, 112)     # too short to split: one warp per pair, no reduce kernel

    Rounded DOWN to one wave: 17 splits here would be 1088 warps, and the 32 that do not fit would run
    alone afterwards, nearly doubling the time (measured: the first H200 run used ceil and lost that).
    """
    tiles = -(-max_len // TILE)
    want = (sms * warps_per_sm) // max(1, B * Hk)
    S = max(1, min(want, tiles // min_tiles))
    split_len = -(-tiles // S) * TILE
    return -(-max_len // split_len), split_len


def plan_splits_v2(max_len: int, B: int, Hk: int, sms: int = 132, blocks_per_sm: int = 4,
                   warps_per_block: int = WARPS_PER_BLOCK_V2, min_tiles: int = 4) -> tuple[int, int]:
    """Version 2's plan: whole BLOCKS of warps fill the GPU once (a block is what the scheduler places).

    plan_splits_v2(32768, 8, 8, 132, 4) -> (32, 1024)   # 8 blocks of 4 warps per pair: 512 blocks <= 132 x 4
    plan_splits_v2(32768, 8, 8, 132, 3) -> (24, 1376)   # 6 blocks per pair: 384 blocks <= 396

    Counting warps instead (plan_splits) would give 33 splits = 9 blocks per pair = 576 blocks > 528: a second
    wave for 48 blocks.
    """
    tiles = -(-max_len // TILE)
    per_pair = max(1, (sms * blocks_per_sm) // max(1, B * Hk))
    S = max(1, min(per_pair * warps_per_block, tiles // min_tiles))
    split_len = -(-tiles // S) * TILE
    return -(-max_len // split_len), split_len


def plan_splits_v3_merged(max_len: int, B: int, Hk: int, sms: int = 132, blocks_per_sm: int = 4) -> tuple[int, int]:
    """Version 3 with the splits merged inside the kernel: version 2's plan with splits of >= V3_MIN_TILES_MERGED tiles,
    at most V3_MAX_SPLITS_MERGED per (sequence, kv head).

    plan_splits_v3_merged(1024, 1, 8, 132, 4)   -> (64, 16)    # one tile per split: 16 blocks per pair
    plan_splits_v3_merged(8192, 1, 8, 132, 4)   -> (128, 64)   # 264 fit, capped at 128
    plan_splits_v3_merged(16384, 8, 8, 132, 4)  -> (32, 512)   # long context: one wave of blocks, as version 2's
    """
    S, split_len = plan_splits_v2(max_len, B, Hk, sms, blocks_per_sm, min_tiles=V3_MIN_TILES_MERGED)
    if S > V3_MAX_SPLITS_MERGED:
        S, split_len = _split_len_for(max_len, V3_MAX_SPLITS_MERGED)
    return S, split_len


def _split_len_for(max_len: int, num_splits: int) -> tuple[int, int]:
    tiles = -(-max_len // TILE)
    S = max(1, min(int(num_splits), tiles))
    split_len = -(-tiles // S) * TILE
    return -(-max_len // split_len), split_len


# ---- the launch ------------------------------------------------------------------------------------------
def kernel_name(p: Problem, conv: str, pv: str = DEFAULT_PV) -> str:
    kind = f"fp8{conv}" if p.fp8 else "bf16"
    return f"decode_attn_{kind}_d{p.D}_{'g16' if p.G > 8 else 'g8'}_{pv}"


class Launch:
    """A prepared decode step: arguments converted once, so a call only launches (1 or 2 kernels).

    Calls go to torch's current stream, so they order with torch work and can be captured in a CUDA graph.
    """

    def __init__(self, main, main_grid, main_args, reduce, reduce_grid, reduce_block, reduce_args, out, info,
                 main_block=(32,), smem=0, pdl_reduce=False):
        self.main, self.main_grid, self.main_args = main, main_grid, main_args
        self.reduce, self.reduce_grid, self.reduce_block, self.reduce_args = reduce, reduce_grid, reduce_block, reduce_args
        self.out, self.info, self.main_block, self.smem = out, info, main_block, smem
        self.pdl_reduce = pdl_reduce  # launch the merge with programmatic dependent launch (version 3, sm_90+)
        # launch the main kernel so too (version 3 only: its kernel waits before its first read); set by a caller whose
        # previous kernel lets dependents start early (the decode layer's PDL variants)
        self.pdl_main = False

    def __call__(self) -> torch.Tensor:
        cp = _cuda._cupy()
        stream = torch.cuda.current_stream().cuda_stream
        with cp.cuda.ExternalStream(stream):
            if self.pdl_main:
                from .launch_ex import launch

                if self.info.get("version") != 3:
                    raise AttentionArgError("only version 3 waits for the previous kernel: pdl_main needs version 3")
                launch(self.main, self.main_grid, self.main_block, self.main_args, self.smem, stream, pdl=True)
            elif self.smem:
                self.main(self.main_grid, self.main_block, self.main_args, shared_mem=self.smem)
            else:
                self.main(self.main_grid, self.main_block, self.main_args)
            if self.reduce is not None:
                if self.pdl_reduce:
                    from .launch_ex import launch

                    launch(self.reduce, self.reduce_grid, self.reduce_block, self.reduce_args, 0, stream, pdl=True)
                else:
                    self.reduce(self.reduce_grid, self.reduce_block, self.reduce_args)
        return self.out


def _scale_tensor(s, Hk: int, device) -> tuple[torch.Tensor, int]:
    if s is None:
        s = 1.0
    t = torch.as_tensor(s, dtype=torch.float32).reshape(-1).to(device)
    return t.contiguous(), (1 if t.numel() == Hk and Hk > 1 else 0)


def _warps_per_sm(fn) -> int:
    """Resident warps per SM from the kernel's register count (65536 registers, allocated per warp in 256s)."""
    try:
        regs = int(fn.attributes["num_regs"])
    except Exception:
        return 8
    per_warp = -(-regs * 32 // 256) * 256
    return max(1, min(64, 65536 // per_warp))


def blocks_per_sm(fn, smem: int, warps_per_block: int) -> int:
    """Resident blocks per SM: the least of the register file, shared memory and the 64-warp limit
    (launch_ex.resident_ctas, the one residency rule of the package's persistent grids).

    blocks_per_sm(fn with 128 registers, 49152, 4) -> 4   # 65536 / (128 x 128); 4 x 49 KB fits in 228 KB
    """
    from .launch_ex import resident_ctas

    return resident_ctas(fn, 32 * warps_per_block, smem)


def _finish_args(p, q, dev, seq_lens, block_table, max_seq_len, check_values, k_scale, v_scale):
    """seq_lens on the device, the planning length, the block table, the scale tensors (both versions, all formats)."""
    cap = p.max_blocks * p.page
    if seq_lens is None:  # contiguous only (check_args insists for paged): every sequence is the full L
        lens_t = torch.full((p.B,), p.page, dtype=torch.int32, device=dev)
        max_len = p.page
    else:
        lens_t = torch.as_tensor(seq_lens).to(device=dev, dtype=torch.int32).contiguous()
        if max_seq_len is not None:
            max_len = min(int(max_seq_len), cap)
        elif isinstance(seq_lens, torch.Tensor) and seq_lens.is_cuda and not check_values:
            max_len = cap  # no host copy: plan for the capacity (splits past a sequence's end exit at once)
        else:
            max_len = max(_as_int_list(seq_lens, "seq_lens"))
    if p.paged:
        bt = block_table.to(device=dev, dtype=torch.int32).contiguous()
    else:
        bt = torch.arange(p.B, dtype=torch.int32, device=dev).reshape(p.B, 1)
    ks, stride = _scale_tensor(k_scale, p.Hk, dev)
    vs, _ = _scale_tensor(v_scale, p.Hk, dev)
    if ks.numel() != vs.numel():  # one per tensor, the other per head: broadcast both to [Hk]
        ks, vs, stride = ks.expand(p.Hk).contiguous(), vs.expand(p.Hk).contiguous(), 1
    return lens_t, max_len, bt, ks, vs, stride


def _out_tensor(p, out, dev):
    if out is None:
        return torch.empty((p.B, p.Hq, p.D), dtype=torch.bfloat16, device=dev)
    if out.shape != (p.B, p.Hq, p.D) or out.dtype != torch.bfloat16 or not out.is_contiguous() or out.device != dev:
        raise AttentionArgError(f"out must be a contiguous bf16 tensor of shape {(p.B, p.Hq, p.D)} on {dev}")
    return out


def launch_ring(source: str, fmt: str, p, tensors: dict, lens_t, max_len: int, bt, ks, vs, stride: int, sm: float,
              out, config=None, num_splits=None, compiled=None, defaults=None, version: int = 2,
              merge: bool | None = None) -> Launch:
    """The launch of the ring versions (2 and 3) for any format (attention_nvfp4kv.py uses it too).

    tensors: q, k, v (byte views of the pools) and, for NVFP4, ksc / vsc (scale-code pools); p: a Problem-like
    object (B, Hq, Hk, D, G, page, max_blocks). config: the version's tuple (RING[version]["fields"]) or None for the
    default; compiled / defaults: the source's configuration lists (None: this module's, of that version).
    merge (version 3): the splits merged inside the kernel (None: V3_MERGE) or by the reduce kernel.
    """
    check_merge(merge, version)
    merge = V3_MERGE if merge is None else bool(merge)
    ring = RING[version]
    g = "g16" if p.G > 8 else "g8"
    cfg = check_ring_config(fmt, p, config, compiled, defaults, version, max_len=max_len)
    if version == 3:  # the bulk copy engine moves 16-byte-aligned runs: every pool's rows start on 16 bytes
        for name in ("k", "v"):
            if tensors[name].data_ptr() % 16:
                raise AttentionArgError(f"version 3 needs the {name} cache 16-byte aligned (a view with a storage "
                                        f"offset is not); pass .clone() or use version 2")
    dev = tensors["q"].device
    cp = _cuda._cupy()
    mod = _cuda.load_module(source)
    name = ring["name"](fmt, p.D, g, cfg)
    main = mod.get_function(name)
    smem = ring["smem"](fmt, p.D, cfg)
    _cuda.allow_dynamic_smem(main, smem)
    bps = blocks_per_sm(main, smem, WARPS_PER_BLOCK_V2)
    if version == 3 and merge:
        plan = lambda sms: plan_splits_v3_merged(max_len, p.B, p.Hk, sms, bps)  # noqa: E731
    else:
        plan = lambda sms: plan_splits_v2(max_len, p.B, p.Hk, sms, bps)  # noqa: E731
    S, split_len, part_o, part_ml = _splits(plan, max_len, num_splits, p, dev)
    dummy = tensors["k"]  # scale pools of a format without them: never read
    keep = (tensors["q"].contiguous(), tensors["k"], tensors["v"], tensors.get("ksc", dummy), tensors.get("vsc", dummy),
            bt, lens_t, ks, vs, out, part_o, part_ml)
    a = [_cuda.as_cupy(t) for t in keep]
    main_args = (a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], cp.int32(stride), cp.float32(sm),
                 cp.int32(p.max_blocks), cp.int32(p.page), cp.int32(p.Hk), cp.int32(p.G), cp.int32(S), cp.int32(split_len),
                 a[9], a[10], a[11])
    merged = version == 3 and merge and S > 1
    if version == 3:  # the merge's arrival counters, one per (sequence, kv head), zero between calls; or a null pointer
        counters = torch.zeros(p.B * p.Hk, dtype=torch.int32, device=dev) if merged else None
        keep = keep + (counters,)
        main_args = main_args + ((_cuda.as_cupy(counters),) if merged else (cp.uint64(0),))
    reduce = reduce_args = None
    if S > 1 and not merged:
        reduce = mod.get_function("decode_reduce")
        reduce_args = (a[10], a[11], a[6], cp.int32(p.Hq), cp.int32(S), cp.int32(split_len), cp.int32(p.D), a[9])
    wpb = WARPS_PER_BLOCK_V2
    info = dict(kernel=name, version=version, config=cfg, num_splits=S, split_len=split_len, smem=smem, problem=p,
                merge="kernel" if merged else ("reduce" if S > 1 else "none"), _keep=keep)
    return Launch(main, (-(-S // wpb), p.Hk, p.B), main_args, reduce, (p.Hq, p.B), (p.D // 4,), reduce_args, out, info,
                  main_block=(32 * wpb,), smem=smem, pdl_reduce=version == 3)


def check_merge(merge, version: int) -> None:
    """merge= is version 3's choice (the splits merged in the kernel or by the reduce kernel): a one-line
    AttentionArgError when another version is asked for it (both preparers call this before any CUDA call)."""
    if merge is not None and version != 3:
        raise AttentionArgError(f"merge applies to version 3 only (version {version} launches the reduce kernel)")


def default_version(device) -> int:
    """DEFAULT_VERSION where the GPU has what it needs (version 3: sm_90+), else version 2; for a CPU tensor
    DEFAULT_VERSION (prepare refuses CPU tensors with its own message)."""
    dev = torch.device(device)
    if DEFAULT_VERSION == 3 and dev.type == "cuda" and not v3_available(dev):
        return 2
    return DEFAULT_VERSION


def check_ring_config(fmt: str, p, config, compiled=None, defaults=None, version: int = 2,
                      max_len: int | None = None) -> tuple:
    """The config of a ring version (2 or 3) to run (config, or the default), raising AttentionArgError if it is not
    compiled. compiled / defaults: the caller's lists (None: this module's lists of that version; attention_nvfp4kv
    passes its own). max_len: the planned length; given, version 3's default follows v3_default (long caches)."""
    ring = RING[version]
    compiled_all = ring["compiled"]() if compiled is None else compiled
    defaults = ring["defaults"]() if defaults is None else defaults
    g = "g16" if p.G > 8 else "g8"
    compiled = {k[3:] for k in compiled_all if k[:3] == (fmt, p.D, g)}
    try:
        cfg = tuple(int(x) for x in config) if config is not None else defaults[(fmt, p.D, g)]
        if config is None and version == 3 and max_len is not None and (fmt, p.D, g) in V3_LONG_DEFAULTS:
            cfg = v3_default(fmt, p.D, g, p.B, p.Hk, max_len, p.page if p.paged else None)
    except (TypeError, ValueError):
        raise AttentionArgError(f"config must be a tuple {ring['fields']}, got {config!r}") from None
    except KeyError:
        raise AttentionArgError(f"version {version} has no kernel for {fmt} D={p.D} {g}") from None
    if len(cfg) != ring["fields"].count(",") + 1:
        raise AttentionArgError(f"config must be a tuple {ring['fields']} for version {version}, got {config!r}")
    if cfg not in compiled:
        raise AttentionArgError(f"version-{version} config {cfg} is not compiled for {fmt} D={p.D} {g}; "
                                f"compiled: {sorted(compiled)}")
    return cfg


def prepare(q, k_cache, v_cache, seq_lens=None, *, block_table=None, k_scale=None, v_scale=None,
            softmax_scale: float | None = None, num_splits: int | None = None, conv: str = DEFAULT_CONV,
            pv: str = DEFAULT_PV, out: torch.Tensor | None = None, check_values: bool = True,
            max_seq_len: int | None = None, version: int | None = None, config: tuple | None = None,
            merge: bool | None = None) -> Launch:
    """Validate (before any CUDA call), pick the version and the splits, convert arguments; returns a Launch.

    version None: default_version(q.device), except that pv="vb" (a layout only version 1 has) selects version 1.
    config: version 2's (NSUB, NS, ROT, MINB) or version 3's (NS, COPY, MINB) (None: the version's default);
    version 1 takes none. merge (version 3 only): True merges the splits inside the kernel, False launches the
    reduce kernel (None: V3_MERGE).
    """
    p = check_args(q, k_cache, v_cache, seq_lens, block_table, k_scale, v_scale, check_values=check_values)
    if p.fp8 and conv not in FP8_CONVS:
        raise AttentionArgError(f"conv must be one of {FP8_CONVS}, got {conv!r}")
    if pv not in PV_LAYOUTS:
        raise AttentionArgError(f"pv must be one of {PV_LAYOUTS}, got {pv!r}")
    if version is None:
        version = 1 if pv == "vb" else default_version(q.device)
    if version not in VERSIONS:
        raise AttentionArgError(f"version must be one of {VERSIONS}, got {version!r}")
    if version in RING_VERSIONS and pv != "va":
        raise AttentionArgError(f"version {version} has only the 'va' P.V layout (V as the A operand); use version=1 "
                                "for 'vb'")
    if version == 1 and config is not None:
        raise AttentionArgError("config applies to versions 2 and 3 only")
    check_merge(merge, version)
    if version in RING_VERSIONS:
        check_ring_config(f"fp8{conv}" if p.fp8 else "bf16", p, config, version=version)
    if q.device.type != "cuda":
        raise AttentionArgError(f"decode_attention runs on CUDA tensors (got {q.device}); "
                                "reference_decode_attention is the CPU version")
    if version == 3:
        require_v3(q.device, "version 1 or 2")
    dev = q.device
    lens_t, max_len, bt, ks, vs, stride = _finish_args(p, q, dev, seq_lens, block_table, max_seq_len, check_values,
                                                       k_scale, v_scale)
    sm = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(p.D)
    out = _out_tensor(p, out, dev)
    kc = _codes(k_cache) if p.fp8 else k_cache
    vc = _codes(v_cache) if p.fp8 else v_cache
    if version in RING_VERSIONS:
        fmt = f"fp8{conv}" if p.fp8 else "bf16"
        return launch_ring(RING[version]["source"], fmt, p, dict(q=q, k=kc, v=vc), lens_t, max_len, bt, ks, vs, stride, sm,
                         out, config=config, num_splits=num_splits, version=version, merge=merge)

    cp = _cuda._cupy()
    mod = _cuda.load_module("attention_fp8kv.cu")
    main = mod.get_function(kernel_name(p, conv, pv))
    S, split_len, part_o, part_ml = _splits(
        lambda sms: plan_splits(max_len, p.B, p.Hk, sms=sms, warps_per_sm=_warps_per_sm(main)), max_len, num_splits, p, dev)
    keep = (q.contiguous(), kc, vc, bt, lens_t, ks, vs, out, part_o, part_ml)
    a = [_cuda.as_cupy(t) for t in keep]
    main_args = (a[0], a[1], a[2], a[3], a[4], a[5], a[6], cp.int32(stride), cp.float32(sm), cp.int32(p.max_blocks),
                 cp.int32(p.page), cp.int32(p.Hk), cp.int32(p.G), cp.int32(S), cp.int32(split_len), a[7], a[8], a[9])
    reduce = reduce_args = None
    if S > 1:
        reduce = mod.get_function("decode_reduce")
        reduce_args = (a[8], a[9], a[4], cp.int32(p.Hq), cp.int32(S), cp.int32(split_len), cp.int32(p.D), a[7])
    info = dict(kernel=kernel_name(p, conv, pv), version=1, config=None, num_splits=S, split_len=split_len, smem=0,
                problem=p, _keep=keep)
    return Launch(main, (S, p.Hk, p.B), main_args, reduce, (p.Hq, p.B), (p.D // 4,), reduce_args, out, info)


def decode_attention(q, k_cache, v_cache, seq_lens=None, *, block_table=None, k_scale=None, v_scale=None,
                     softmax_scale: float | None = None, num_splits: int | None = None, conv: str = DEFAULT_CONV,
                     pv: str = DEFAULT_PV, out: torch.Tensor | None = None, version: int | None = None,
                     config: tuple | None = None, merge: bool | None = None) -> torch.Tensor:
    """bf16 [B, Hq, D] decode attention over an FP8 or bf16 KV cache on the GPU. See the module docstring."""
    return prepare(q, k_cache, v_cache, seq_lens, block_table=block_table, k_scale=k_scale, v_scale=v_scale,
                   softmax_scale=softmax_scale, num_splits=num_splits, conv=conv, pv=pv, out=out, version=version,
                   config=config, merge=merge)()


# ---- the CPU reference and its helpers (pure torch, any device) ------------------------------------------
def dequantize_cache(cache: torch.Tensor, scale=None) -> torch.Tensor:
    """float32 values of a cache: E4M3.decode(codes) * scale (per tensor, or per KV head along dim 1), or bf16 -> f32.

    dequantize_cache(torch.tensor([[[[0x38, 0xB8]]]], dtype=torch.uint8), 0.5) -> [[[[0.5, -0.5]]]]
    """
    from fp8lab import formats

    if cache.dtype in (torch.uint8, torch.float8_e4m3fn):
        x = formats.E4M3.decode(_codes(cache).cpu()).to(cache.device)
        s = torch.as_tensor(1.0 if scale is None else scale, dtype=torch.float32).to(cache.device).reshape(-1)
        if s.numel() > 1:
            s = s.reshape(1, -1, 1, 1)
        return x * s
    return cache.float()


def gather_pages(pool: torch.Tensor, block_table: torch.Tensor, seq_lens) -> torch.Tensor:
    """Paged pool [n_pages, Hk, P, D] -> contiguous [B, Hk, max(seq_lens), D]; slots past a sequence's end are 0.

    Token t of sequence b lives at pool[block_table[b, t // P], :, t % P]. Only the pages a sequence uses
    are read, so unused block-table entries may hold anything (vLLM pads with garbage; we test with -1).
    """
    lens = _as_int_list(seq_lens, "seq_lens")
    _, Hk, P, D = pool.shape
    out = torch.zeros((len(lens), Hk, max(lens), D), dtype=pool.dtype, device=pool.device)
    for b, n in enumerate(lens):
        pages = block_table[b, : -(-n // P)].long().to(pool.device)
        seq = pool[pages].permute(1, 0, 2, 3).reshape(Hk, -1, D)  # [Hk, n_used * P, D]
        out[b, :, :n] = seq[:, :n]
    return out


def to_paged(cache: torch.Tensor, page_size: int, seq_lens=None, *, extra_pages: int = 0, pad_blocks: int = 0,
             poison=None, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Contiguous [B, Hk, L, D] -> (pool [n_pages, Hk, P, D], block_table int32 [B, max_blocks]) in shuffled page order.

    Slots past each sequence's end, `extra_pages` unused pages and `pad_blocks` trailing block-table entries (-1)
    are filled with `poison` (a value of the cache's dtype) so that a kernel that reads them shows it.
    """
    B, Hk, L, D = cache.shape
    lens = [L] * B if seq_lens is None else _as_int_list(seq_lens, "seq_lens")
    need = [-(-n // page_size) for n in lens]
    n_pages = sum(need) + extra_pages
    perm = torch.randperm(n_pages, generator=generator)
    pool = torch.empty((n_pages, Hk, page_size, D), dtype=cache.dtype, device=cache.device)
    if poison is not None:
        pool.fill_(poison)
    else:
        pool.zero_()
    max_blocks = max(need) + pad_blocks
    bt = torch.full((B, max_blocks), -1, dtype=torch.int32)
    k = 0
    for b, n in enumerate(lens):
        for j in range(need[b]):
            pg = int(perm[k])
            k += 1
            bt[b, j] = pg
            lo, hi = j * page_size, min(n, (j + 1) * page_size)
            pool[pg, :, : hi - lo] = cache[b, :, lo:hi]
    return pool, bt.to(cache.device)


def reference_decode_attention(q, k_cache, v_cache, k_scale=None, v_scale=None, *, seq_lens=None, block_table=None,
                               softmax_scale: float | None = None) -> torch.Tensor:
    """float32 [B, Hq, D] on the CPU: dequantize (fp8lab.formats), gather pages, SDPA in float32 per sequence.

    Same arguments as decode_attention. GQA as torch's enable_gqa: query head i reads KV head i // G.
    """
    q = q.detach().cpu()
    k_cache, v_cache = k_cache.detach().cpu(), v_cache.detach().cpu()
    B, Hq, D = q.shape
    k = dequantize_cache(k_cache, None if k_scale is None else torch.as_tensor(k_scale).cpu())
    v = dequantize_cache(v_cache, None if v_scale is None else torch.as_tensor(v_scale).cpu())
    if block_table is not None:
        k = gather_pages(k, block_table.cpu(), seq_lens)
        v = gather_pages(v, block_table.cpu(), seq_lens)
    lens = [k.shape[2]] * B if seq_lens is None else _as_int_list(seq_lens, "seq_lens")
    sm = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    out = torch.empty((B, Hq, D), dtype=torch.float32)
    for b, n in enumerate(lens):
        o = torch.nn.functional.scaled_dot_product_attention(
            q[b].float()[None, :, None, :], k[b : b + 1, :, :n], v[b : b + 1, :, :n], scale=sm, enable_gqa=True)
        out[b] = o[0, :, 0]
    return out


# ---- numerics of the cache formats (CPU, for the notebook) ----------------------------------------------------
OUTLIER_CHANNELS = (3, 17, 40, 61)  # KIVI: a few key channels carry most of the magnitude


def cache_error_table(L: int = 512, D: int = 128, B: int = 2, Hq: int = 8, Hk: int = 2, seed: int = 0) -> list[dict]:
    """Attention output error of a bf16 cache and of FP8 caches (per-tensor / per-head scales) vs an fp32 cache.

    All through reference_decode_attention (CPU), so this is the format's error, not a kernel's. Keys come as
    N(0, 1) or with KIVI-style outlier channels (x20); values are N(0, 1); q is N(0, 1) in bf16.
    """
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hq, D, generator=gen).to(torch.bfloat16)
    rows = []
    for keys in ("normal", "outlier x20"):
        k = torch.randn(B, Hk, L, D, generator=gen)
        v = torch.randn(B, Hk, L, D, generator=gen)
        if keys != "normal":
            for ch in OUTLIER_CHANNELS:
                k[..., ch % D] *= 20.0
        exact = reference_decode_attention(q, k, v)
        caches = {"bf16": (k.to(torch.bfloat16), v.to(torch.bfloat16), None, None, 2)}
        for name, per_head in (("fp8 e4m3, per-tensor scale", False), ("fp8 e4m3, per-head scale", True)):
            kc, ks = quantize_kv(k, "head" if per_head else "tensor")
            vc, vs = quantize_kv(v, "head" if per_head else "tensor")
            caches[name] = (kc, vc, ks, vs, 1)
        for name, (kc, vc, ks, vs, nbytes) in caches.items():
            out = reference_decode_attention(q, kc, vc, ks, vs)
            d = out - exact
            rows.append(dict(keys=keys, cache=name, bytes_per_token=2 * Hk * D * nbytes,
                             max_abs_err=float(d.abs().max()),
                             rel_rms_err=float(torch.linalg.vector_norm(d) / torch.linalg.vector_norm(exact)),
                             out_rms=float(exact.pow(2).mean().sqrt())))
    return rows


def format_error_table(rows: list[dict]) -> str:
    hdr = f"{'keys':12s} {'cache':28s} {'bytes/token':>11s} {'max |err|':>10s} {'rel RMS err':>11s}"
    lines = [hdr, "-" * len(hdr)]
    for r in rows:
        lines.append(f"{r['keys']:12s} {r['cache']:28s} {r['bytes_per_token']:>11d} {r['max_abs_err']:>10.2e} "
                     f"{r['rel_rms_err']:>11.2e}")
    return "\n".join(lines)
