"""Chunked-prefill attention over a bf16 or FP8 (E4M3) KV cache (attention_prefill.cu).

    out = prefill_attention(q, k_cache, v_cache, prefix_len)                               # bf16 cache
    out = prefill_attention(q, k_cache, v_cache, prefix_len, k_scale=ks, v_scale=vs)        # FP8 cache

    q            bf16 [B, Hq, Mq, D]        the chunk's Mq query tokens, D in (64, 128)
    k/v cache    [B, Hk, Lkv, D]            bf16, or E4M3 codes (uint8 / float8_e4m3fn) with k/v_scale (per tensor or
                                            per KV head): the prefix_len cached tokens, then the chunk's own Mq tokens
    out          bf16 [B, Hq, Mq, D]        query token t (absolute position prefix_len + t) sees keys 0 .. prefix_len + t

This is what a serving engine runs for each chunk of a long prompt (vLLM's chunked prefill): the chunk attends to
everything cached before it and causally to itself. torch's `is_causal=True` aligns the mask to the top-left corner
when Mq != Lkv (query t sees keys 0..t), which is NOT this; `torch.nn.attention.bias.causal_lower_right` is.

A worked example: prefix_len = 2, Mq = 1, one head, keys k0, k1, k2 (the last is the chunk's own token): the query
sees all three (2 + 0 = key 2), softmax over q.k0, q.k1, q.k2 -- the same as one decode step.

Why FP8 can stop paying here: the chunk reads the cache once per block of queries, but does 4 * Mq * Hq * D FLOPs per
cached token. Past a few hundred query rows per KV head the kernel is bound by tensor-core math, not bytes, so halving
the bytes saves ~nothing, while widening every FP8 tile to f16 (CUDA cores and shared memory) is pure extra work.
`napkin(...)` prints the numbers; bench_prefill_attn measures where the two cross.
"""
from __future__ import annotations

import math

import torch

from . import _cuda
from . import attention_fp8kv as att
from .attention_fp8kv import AttentionArgError

HEAD_DIMS = (64, 128)
BN = 64  # keys per tile (attention_prefill.cu)
#: (kv, head_dim, warps per block, PACK query heads per block): -DFP8LAB_ATTN_PREFILL=PREFILL(...)...
KERNELS = frozenset({(kv, D, nw, pk) for kv in ("bf16", "fp8") for D in HEAD_DIMS for nw in (4, 8) for pk in (1, 4)})
DEFAULT_WARPS = 4
DEFAULT_PACK = 1


def cuda_defines() -> tuple[str, ...]:
    from .sources import instances

    return (instances("FP8LAB_ATTN_PREFILL", "PREFILL", KERNELS),)


def smem_bytes(kv: str, D: int) -> int:
    """Dynamic shared memory of a block: bf16 two buffers of K and V; FP8 widened K, V + two staging buffers each.

    smem_bytes("bf16", 128) -> 65536;  smem_bytes("fp8", 128) -> 65536
    """
    tile16, tile8 = BN * D * 2, BN * D
    return 2 * tile16 + 4 * tile8 if kv == "fp8" else 4 * tile16


def kernel_name(kv: str, D: int, nw: int, pack: int) -> str:
    return f"prefill_{kv}_d{D}_w{nw}_p{pack}"


def check_args(q, k_cache, v_cache, prefix_len, k_scale=None, v_scale=None, *, nw=DEFAULT_WARPS, pack=DEFAULT_PACK,
               check_values: bool = True) -> dict:
    """Shapes, dtypes, lengths and scales (AttentionArgError, before any CUDA call). Returns the sizes."""
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        _cuda.require_tensor(t, name, AttentionArgError)
    _cuda.bf16_tensor(q, "q", 4, "[B, Hq, Mq, D]", AttentionArgError)
    B, Hq, Mq, D = q.shape
    if D not in HEAD_DIMS:
        raise AttentionArgError(f"head_dim must be one of {HEAD_DIMS}, got {D}")
    if Mq < 1:
        raise AttentionArgError("the chunk must hold at least one query token")
    kinds = set()
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        kinds.add(att.cache_kind(name, t))
        if t.dim() != 4 or not t.is_contiguous():
            raise AttentionArgError(f"{name} must be a contiguous [B, Hk, Lkv, D] tensor, got {tuple(t.shape)}")
    if len(kinds) != 1:
        raise AttentionArgError("k_cache and v_cache must have the same element type")
    if tuple(k_cache.shape) != tuple(v_cache.shape):
        raise AttentionArgError(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} must have the same shape")
    Bk, Hk, Lkv, Dk = k_cache.shape
    if Bk != B or Dk != D:
        raise AttentionArgError(f"the cache must be [B={B}, Hk, Lkv, D={D}], got {tuple(k_cache.shape)}")
    if Hk < 1 or Hq % Hk:
        raise AttentionArgError(f"n_q_heads ({Hq}) must be a multiple of n_kv_heads ({Hk})")
    if isinstance(prefix_len, bool) or not isinstance(prefix_len, int) or prefix_len < 0:
        raise AttentionArgError(f"prefix_len must be an int >= 0, got {prefix_len!r}")
    if prefix_len + Mq > Lkv:
        raise AttentionArgError(f"the cache holds {Lkv} tokens but prefix_len + Mq = {prefix_len + Mq}: write the chunk's "
                                "K/V into the cache first")
    kv = kinds.pop()
    if kv == "fp8":
        if k_scale is None or v_scale is None:
            raise AttentionArgError("an FP8 cache needs k_scale and v_scale (pass 1.0 for unscaled codes)")
        att._scale_values(k_scale, Hk, "k_scale", check_values)
        att._scale_values(v_scale, Hk, "v_scale", check_values)
    elif k_scale is not None or v_scale is not None:
        raise AttentionArgError("a bf16 cache takes no k_scale/v_scale")
    G = Hq // Hk
    pk = G if pack == "gqa" else pack
    if (kv, D, nw, pk) not in KERNELS:
        raise AttentionArgError(f"no compiled kernel for {kv} D={D} warps={nw} pack={pack!r} (G={G}); "
                                f"compiled (kv, D, warps, pack): {sorted(KERNELS)}")
    if pk not in (1, G):
        raise AttentionArgError(f"pack must be 1 or the group size G={G} ('gqa'), got {pack!r}")
    devs = {t.device for t in (q, k_cache, v_cache)}
    if len(devs) != 1:
        raise AttentionArgError("q and the caches must be on one device")
    return dict(B=B, Hq=Hq, Hk=Hk, Mq=Mq, D=D, Lkv=Lkv, G=G, kv=kv, nw=nw, pack=pk)


def plan_splits(n_blocks: int, kv_len: int, sms: int = 132, blocks_per_sm: int = 2, min_tiles: int = 4) -> tuple[int, int]:
    """(num_splits, split_len) for the key range: split only when the chunk's blocks would not fill one wave.

    plan_splits(256, 40000) -> (1, 40000)      # 256 blocks (e.g. 512 queries x 32 heads / 64): one wave already
    plan_splits(32, 40000)  -> (8, 5056)       # 32 blocks (16 queries x 32 heads, GQA-packed... ): 8 splits -> 256
    """
    slots = sms * blocks_per_sm
    if n_blocks >= slots // 2:
        return 1, kv_len
    tiles = -(-kv_len // BN)
    S = max(1, min(slots // max(1, n_blocks), tiles // min_tiles))
    split_len = -(-tiles // S) * BN
    return -(-kv_len // split_len), split_len


def prepare(q, k_cache, v_cache, prefix_len: int, *, k_scale=None, v_scale=None, softmax_scale: float | None = None,
            num_splits: int | None = None, nw: int = DEFAULT_WARPS, pack=DEFAULT_PACK, out: torch.Tensor | None = None,
            check_values: bool = True) -> att.Launch:
    """Validate (before any CUDA call), plan, convert arguments; returns a Launch (call it to run)."""
    a = check_args(q, k_cache, v_cache, prefix_len, k_scale, v_scale, nw=nw, pack=pack, check_values=check_values)
    if q.device.type != "cuda":
        raise AttentionArgError(f"prefill_attention runs on CUDA tensors (got {q.device}); "
                                "reference_prefill_attention is the CPU version")
    B, Hq, Hk, Mq, D, Lkv, pk = a["B"], a["Hq"], a["Hk"], a["Mq"], a["D"], a["Lkv"], a["pack"]
    dev = q.device
    ks, stride = att._scale_tensor(k_scale, Hk, dev)
    vs, _ = att._scale_tensor(v_scale, Hk, dev)
    if ks.numel() != vs.numel():
        ks, vs, stride = ks.expand(Hk).contiguous(), vs.expand(Hk).contiguous(), 1
    sm = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(D)
    if out is None:
        out = torch.empty((B, Hq, Mq, D), dtype=torch.bfloat16, device=dev)
    elif out.shape != (B, Hq, Mq, D) or out.dtype != torch.bfloat16 or not out.is_contiguous() or out.device != dev:
        raise AttentionArgError(f"out must be a contiguous bf16 tensor of shape {(B, Hq, Mq, D)} on {dev}")
    cp = _cuda._cupy()
    mod = _cuda.load_module("attention_prefill.cu")
    name = kernel_name(a["kv"], D, nw, pk)
    fn = mod.get_function(name)
    smem = smem_bytes(a["kv"], D)
    _cuda.allow_dynamic_smem(fn, smem)
    BM = 16 * nw
    grid_x = -(-Mq * pk // BM)
    n_blocks = grid_x * (Hq // pk) * B
    kv_len = prefix_len + Mq
    if num_splits is None:
        sms = torch.cuda.get_device_properties(dev).multi_processor_count
        S, split_len = plan_splits(n_blocks, kv_len, sms, att.blocks_per_sm(fn, smem, nw))
    else:
        tiles = -(-kv_len // BN)
        S0 = max(1, min(int(num_splits), tiles))
        split_len = -(-tiles // S0) * BN
        S = -(-kv_len // split_len)
    if S > 1:
        part_o = torch.empty((B, Hq, Mq, S, D), dtype=torch.float32, device=dev)
        part_ml = torch.empty((B, Hq, Mq, S, 2), dtype=torch.float32, device=dev)
    else:
        part_o = part_ml = torch.empty(4, dtype=torch.float32, device=dev)
    kc = k_cache.view(torch.uint8) if k_cache.dtype == torch.float8_e4m3fn else k_cache
    vc = v_cache.view(torch.uint8) if v_cache.dtype == torch.float8_e4m3fn else v_cache
    lens = torch.full((B,), kv_len, dtype=torch.int32, device=dev)
    keep = (q.contiguous(), kc, vc, ks, vs, out, part_o, part_ml, lens)
    c = [_cuda.as_cupy(t) for t in keep]
    args = (c[0], c[1], c[2], c[3], c[4], cp.int32(stride), cp.float32(sm), cp.int32(Hq), cp.int32(Hk), cp.int32(Mq),
            cp.int32(prefix_len), cp.int32(Lkv), cp.int32(S), cp.int32(split_len), c[5], c[6], c[7])
    reduce = reduce_args = None
    if S > 1:
        reduce = mod.get_function("decode_reduce")
        reduce_args = (c[6], c[7], c[8], cp.int32(Hq * Mq), cp.int32(S), cp.int32(split_len), cp.int32(D), c[5])
    info = dict(kernel=name, num_splits=S, split_len=split_len, smem=smem, blocks=n_blocks * S, _keep=keep, **a)
    return att.Launch(fn, (grid_x, Hq // pk, B * S), args, reduce, (Hq * Mq, B), (D // 4,), reduce_args, out, info,
                      main_block=(32 * nw,), smem=smem)


def prefill_attention(q, k_cache, v_cache, prefix_len: int, *, k_scale=None, v_scale=None,
                      softmax_scale: float | None = None, num_splits: int | None = None, nw: int = DEFAULT_WARPS,
                      pack=DEFAULT_PACK, out: torch.Tensor | None = None) -> torch.Tensor:
    """bf16 [B, Hq, Mq, D]: the chunk's attention over the cache (module docstring). pack="gqa" puts the G query
    heads of a KV head in one block (rows = tokens x heads): for chunks shorter than a block (16 * nw rows) it fills
    rows that would be empty; nw = 8 doubles the rows per block, halving the loads and FP8 widenings per flop."""
    return prepare(q, k_cache, v_cache, prefix_len, k_scale=k_scale, v_scale=v_scale, softmax_scale=softmax_scale,
                   num_splits=num_splits, nw=nw, pack=pack, out=out)()


# ---- the CPU reference (float64) ----------------------------------------------------------------------------------
def reference_prefill_attention(q, k_cache, v_cache, prefix_len: int, k_scale=None, v_scale=None, *,
                                softmax_scale: float | None = None, rows=None) -> torch.Tensor:
    """float64 [B, Hq, Mq, D] on the CPU: dequantize (fp8lab.formats via attention_fp8kv.dequantize_cache), causal
    lower-right mask (query t sees keys 0 .. prefix_len + t), softmax and the weighted sum in float64.
    rows: optional list of query tokens to compute (the others are NaN) -- for large problems."""
    q = q.detach().cpu()
    B, Hq, Mq, D = q.shape
    k = att.dequantize_cache(k_cache.detach().cpu(), None if k_scale is None else torch.as_tensor(k_scale).cpu()).double()
    v = att.dequantize_cache(v_cache.detach().cpu(), None if v_scale is None else torch.as_tensor(v_scale).cpu()).double()
    Hk = k.shape[1]
    sm = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    toks = list(range(Mq)) if rows is None else list(rows)
    out = torch.full((B, Hq, Mq, D), float("nan"), dtype=torch.float64)
    kv_len = prefix_len + max(toks) + 1
    for b in range(B):
        kb = k[b, :, :kv_len].repeat_interleave(Hq // Hk, 0)  # [Hq, n, D]
        vb = v[b, :, :kv_len].repeat_interleave(Hq // Hk, 0)
        qt = q[b][:, toks].double()                          # [Hq, T, D]
        s = torch.einsum("htd,hnd->htn", qt, kb) * sm
        lim = torch.tensor([prefix_len + t for t in toks]).reshape(1, -1, 1)
        s = s.masked_fill(torch.arange(kv_len).reshape(1, 1, -1) > lim, float("-inf"))
        w = torch.softmax(s, dim=-1)
        out[b][:, toks] = torch.einsum("htn,hnd->htd", w, vb)
    return out


# ---- the napkin math: when does an FP8 cache stop paying in prefill? -------------------------------------------------
def napkin(Mq: int, Lc: int, Hq: int = 32, Hk: int = 8, D: int = 128, *, B: int = 1, bm: int = 64, pack: int = 1,
           mma_tflops: float = 660.0, hbm_gbps: float = 4300.0, cvt_per_clk_sm: float = 16.0, sms: int = 132,
           clock_ghz: float = 1.98) -> dict:
    """The arithmetic of one chunk: FLOPs, cache bytes, FLOPs per byte, conversions per byte and per FLOP, and the
    times each ceiling allows. The rates are leads, not measurements (mma.sync peak, copy bandwidth, the F2FP
    conversion rate per SM) -- bench_prefill_attn puts the measured times beside them.

    Every block of `bm` rows reads the K/V tiles of its keys and (FP8) widens each once, so every cached element is
    widened once per block that reads it: G * ceil(Mq / bm) times (pack 1), ceil(G * Mq / bm) times (pack = G).
    Conversions per flop are ~1 / (2 bm): the FP8 cost grows with the chunk exactly as the flops do, while the bytes
    saved stay those of one pass over the cache.
    """
    kv_len = Lc + Mq
    G = Hq // Hk
    avg_keys = Lc + (Mq + 1) / 2                      # causal: query t sees Lc + t + 1 keys
    flops = 4.0 * B * Hq * Mq * avg_keys * D           # QK^T and PV, 2 flops per multiply-add each
    bytes_bf16 = 2.0 * B * Hk * kv_len * D * 2         # K and V read once from HBM (the best case: L2 shares the rest)
    bytes_fp8 = bytes_bf16 / 2
    rows_per_kv_head = Mq * G                          # query rows that read each KV head's tiles
    widenings = math.ceil(rows_per_kv_head / bm) if pack > 1 else G * math.ceil(Mq / bm)
    conversions = 2.0 * B * Hk * avg_keys * D * widenings  # elements widened (each KV element once per block that reads it)
    t_mma = flops / (mma_tflops * 1e12)
    t_bytes16, t_bytes8 = bytes_bf16 / (hbm_gbps * 1e9), bytes_fp8 / (hbm_gbps * 1e9)
    t_cvt = (conversions / 2) / (cvt_per_clk_sm * sms * clock_ghz * 1e9)  # one cvt makes 2 f16
    return dict(Mq=Mq, Lc=Lc, flops=flops, bytes_bf16=bytes_bf16, bytes_fp8=bytes_fp8,
                flops_per_byte_bf16=flops / bytes_bf16, flops_per_byte_fp8=flops / bytes_fp8,
                conversions=conversions, conversions_per_fp8_byte=conversions / bytes_fp8,
                conversions_per_kflop=1e3 * conversions / flops,
                t_mma_us=1e6 * t_mma, t_hbm_bf16_us=1e6 * t_bytes16, t_hbm_fp8_us=1e6 * t_bytes8, t_cvt_us=1e6 * t_cvt,
                bound_bf16="math" if t_mma > t_bytes16 else "memory",
                fp8_saves_us=1e6 * max(0.0, max(t_mma, t_bytes16) - max(t_mma, t_bytes8)),
                fp8_costs_us=1e6 * t_cvt)
