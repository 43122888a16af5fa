"""Decode attention over an NVFP4 KV cache, contiguous or paged, GQA (attention_nvfp4kv.cu).

    kc = quantize_kv_nvfp4(k)                      # k: [B, Hk, L, D] -> NVFP4Cache (packed, scales, global_scale)
    vc = quantize_kv_nvfp4(v, "head")              # one global scale per KV head
    out = decode_attention_nvfp4(q, kc, vc, seq_lens)                      # contiguous
    out = decode_attention_nvfp4(q, kp, vp, seq_lens, block_table=bt)      # paged: kp = to_paged_nvfp4(kc, 16, ...)

    q              bf16 [B, Hq, D], D in (64, 128); query head i reads KV head i // (Hq // Hk)
    NVFP4Cache     packed  uint8 [B | n_pages, Hk, L | P, D/2]   E2M1 codes, element 2i in the LOW nibble of byte i
                   scales  uint8 [B | n_pages, Hk, L | P, D/16]  E4M3 block-scale codes (or torch.float8_e4m3fn)
                   global_scale fp32, 1 value or one per KV head
    out            bf16 [B, Hq, D]

The numbers are fp8lab.scaling's NVFP4 (the lab's one scale rule): value = e2m1(code) * e4m3(scale code) * global.
A worked example, one block of 16 keys' dims: codes 0x2 (1.0) with scale code 0x38 (1.0) and global 0.5 is 0.5 in
every dim; `dequantize_nvfp4_cache` gives exactly that, and `reference_decode_attention_nvfp4` does the attention
in float64 on those values: the truth the kernel is tested against.

Bytes: D/2 + D/16 per token row instead of 2 D for bf16, so the ideal speedup over the same kernel on a bf16 cache
is 2 / 0.5625 = 3.56x at long context. The kernel widens nibbles to bf16 in registers just before each MMA (the
design and the fragment layouts: attention_decode.cuh). Two versions: 2 (attention_nvfp4kv.cu, per-lane cp.async
ring; the default, measured faster here) and 3 (attention_decode_v3.cu, sm_90+: the bulk copy engine fills the ring).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import attention_fp8kv as att
from .attention_fp8kv import AttentionArgError, Problem

HEAD_DIMS = att.HEAD_DIMS
#: (format, head_dim, group kind, NSUB, NS, ROT, MINB): attention_decode.cuh's DECODE_V2; one list, the .cu has no other
DEFAULTS = {
    ("nvfp4", 128, "g8"): (2, 3, 1, 3), ("nvfp4", 128, "g16"): (1, 4, 1, 3),
    ("nvfp4", 64, "g8"): (1, 4, 1, 4), ("nvfp4", 64, "g16"): (1, 4, 1, 4),
}
#: (2, 3, 1, 3) became the D = 128, G <= 8 default from the recorded sweeps (outputs/kernels/attention_sweep.json):
#: one softmax update per two tiles pays for NVFP4, whose tiles carry the most arithmetic per byte
SWEEP = {("nvfp4", 128, "g8"): [(1, 4, 1, 4), (1, 6, 1, 4), (2, 4, 1, 3)]}
#: version 2 stays the NVFP4 default: version 3's bulk copies (attention_decode_v3.cu) were measured slower on an
#: NVFP4 cache (the sweep at 32k, D = 128): its time goes to widening nibbles, not to moving bytes, and version 3 has
#: no multi-tile softmax step
DEFAULT_VERSION = 2
KERNELS = frozenset({k + cfg for k, cfg in DEFAULTS.items()} | {k + cfg for k, cfgs in SWEEP.items() for cfg in cfgs})
BYTES_PER_ELEMENT = 0.5 + 1 / 16   # E2M1 nibble + an E4M3 scale per 16 elements (the global scale is per tensor/head)


def cuda_defines() -> tuple[str, ...]:
    from .sources import instances

    return (instances("FP8LAB_ATTN_NVFP4", "DECODE_V2", KERNELS),)


@dataclass(frozen=True)
class NVFP4Cache:
    """An NVFP4 K or V cache (or paged pool): what the kernel reads."""

    packed: torch.Tensor        # uint8 [N, Hk, L, D/2]
    scales: torch.Tensor        # uint8 (E4M3 codes) [N, Hk, L, D/16]
    global_scale: torch.Tensor  # fp32 [] or [Hk]

    @property
    def head_dim(self) -> int:
        return 2 * self.packed.shape[-1]

    def to(self, device) -> "NVFP4Cache":
        return NVFP4Cache(self.packed.to(device), self.scales.to(device), self.global_scale.to(device))

    def nbytes(self) -> int:
        return self.packed.numel() + self.scales.numel()


# ---- quantize / dequantize: fp8lab.scaling ----------------------------------------------------------------------
def quantize_kv_nvfp4(x: torch.Tensor, granularity: str = "tensor", global_amax=None) -> NVFP4Cache:
    """[B, Hk, L, D] float -> NVFP4Cache through fp8lab.scaling.quantize_nvfp4 (16-element blocks along D).

    granularity "tensor": one global scale (amax / 2688 of the whole tensor, or of `global_amax`);
    "head": one per KV head (each head's own amax, or global_amax[h]). A calibrated `global_amax` is how a serving
    engine would choose it causally (the KV recipes in fp8lab.kv_quant do so); the default sees the whole tensor.
    """
    from fp8lab import scaling

    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise AttentionArgError(f"a KV cache is [B, Hk, L, D], got {getattr(x, 'shape', type(x).__name__)}")
    if x.shape[-1] % 16:
        raise AttentionArgError(f"NVFP4 needs head_dim a multiple of 16 (blocks of 16), got {x.shape[-1]}")
    if granularity == "tensor":
        ga = None if global_amax is None else torch.as_tensor(global_amax, dtype=torch.float32).reshape(())
        packed, sc, gs = scaling.quantize_nvfp4(x.detach(), global_amax=ga, nonfinite="propagate")
        return NVFP4Cache(packed, sc, gs.float().reshape(()))
    if granularity == "head":
        parts = []
        for h in range(x.shape[1]):
            ga = None if global_amax is None else torch.as_tensor(global_amax, dtype=torch.float32).reshape(-1)[h]
            parts.append(scaling.quantize_nvfp4(x[:, h].detach(), global_amax=ga, nonfinite="propagate"))
        return NVFP4Cache(torch.stack([p[0] for p in parts], 1), torch.stack([p[1] for p in parts], 1),
                          torch.stack([p[2].float().reshape(()) for p in parts]))
    raise AttentionArgError(f"granularity must be 'tensor' or 'head', got {granularity!r}")


def dequantize_nvfp4_cache(c: NVFP4Cache) -> torch.Tensor:
    """float32 [N, Hk, L, D] values of an NVFP4 cache, decoded by fp8lab.scaling.dequantize (the lab's NVFP4), on the
    cache's device (scaling is bit-exact on CUDA as on the CPU).

    dequantize_nvfp4_cache(NVFP4Cache(tensor([[[[0x22]*8]]]), tensor([[[[0x38]]]]), tensor(0.5))) -> 0.5 everywhere
    """
    from fp8lab import scaling

    D = c.head_dim
    codes = scaling.unpack_nibbles(c.packed, D)
    sc = c.scales.view(torch.uint8) if c.scales.dtype == torch.float8_e4m3fn else c.scales
    gs = c.global_scale.detach().float().to(codes.device).reshape(-1)
    spec = scaling.QuantSpec("e2m1", "nvfp4")

    def deq(codes_, sc_, g):
        q = scaling.Quantized(codes_, torch.ones((), device=codes_.device), spec, tuple(codes_.shape), scale_codes=sc_,
                              global_scale=g.reshape(()))
        return scaling.dequantize(q)

    if gs.numel() == 1:
        return deq(codes, sc, gs[0])
    return torch.stack([deq(codes[:, h], sc[:, h], gs[h]) for h in range(codes.shape[1])], 1)


def to_paged_nvfp4(c: NVFP4Cache, page_size: int, seq_lens=None, *, extra_pages: int = 0, pad_blocks: int = 0,
                   poison: bool = False, seed: int = 0) -> tuple[NVFP4Cache, torch.Tensor]:
    """Contiguous NVFP4Cache -> (paged NVFP4Cache, block_table): attention_fp8kv.to_paged on the nibbles and on the
    scale codes with one shuffled page order. poison=True fills unused slots with 0x77 nibbles (6.0) and the E4M3
    NaN scale code 0x7F, so a kernel that reads them shows it."""
    kw = dict(extra_pages=extra_pages, pad_blocks=pad_blocks)
    p, bt = att.to_paged(c.packed, page_size, seq_lens, poison=0x77 if poison else None,
                         generator=torch.Generator().manual_seed(seed), **kw)
    s, bt2 = att.to_paged(c.scales, page_size, seq_lens, poison=0x7F if poison else None,
                          generator=torch.Generator().manual_seed(seed), **kw)
    assert torch.equal(bt, bt2)
    return NVFP4Cache(p, s, c.global_scale), bt


# ---- argument checks (CPU only: no CUDA call before they pass) ---------------------------------------------------
def _u8(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


def check_args(q, k_cache, v_cache, seq_lens=None, block_table=None, *, check_values: bool = True) -> Problem:
    """Validate shapes, dtypes, lengths, page indices and global scales; AttentionArgError (a ValueError) if bad."""
    if not isinstance(q, torch.Tensor) or q.dtype != torch.bfloat16 or q.dim() != 3:
        raise AttentionArgError(f"q must be a bf16 tensor [B, Hq, D], got {getattr(q, 'dtype', type(q).__name__)} "
                                f"{tuple(getattr(q, 'shape', ()))}")
    B, Hq, D = q.shape
    if D not in HEAD_DIMS:
        raise AttentionArgError(f"head_dim must be one of {HEAD_DIMS}, got {D}")
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(c, NVFP4Cache):
            raise AttentionArgError(f"{name} must be an NVFP4Cache (quantize_kv_nvfp4), got {type(c).__name__}")
        if c.packed.dtype != torch.uint8 or _u8(c.scales).dtype != torch.uint8:
            raise AttentionArgError(f"{name}: packed must be uint8 nibbles and scales uint8 / float8_e4m3fn E4M3 codes")
        if c.packed.dim() != 4 or c.scales.dim() != 4:
            raise AttentionArgError(f"{name}: packed and scales must be 4-D [N, Hk, L, D/2] and [N, Hk, L, D/16]")
        if c.packed.shape[-1] * 2 != D or c.scales.shape[-1] * 16 != D or c.packed.shape[:3] != c.scales.shape[:3]:
            raise AttentionArgError(f"{name}: head_dim {D} needs packed [..., {D // 2}] and scales [..., {D // 16}] over the "
                                    f"same [N, Hk, L]; got {tuple(c.packed.shape)} and {tuple(c.scales.shape)}")
        if not (c.packed.is_contiguous() and c.scales.is_contiguous()):
            raise AttentionArgError(f"{name}: packed and scales must be contiguous")
        if not isinstance(c.global_scale, torch.Tensor) or not c.global_scale.dtype.is_floating_point:
            raise AttentionArgError(f"{name}: global_scale must be a float tensor")
    if tuple(k_cache.packed.shape) != tuple(v_cache.packed.shape):
        raise AttentionArgError(f"k_cache {tuple(k_cache.packed.shape)} and v_cache {tuple(v_cache.packed.shape)} differ")
    N0, Hk, P, _ = k_cache.packed.shape
    if Hk < 1 or Hq % Hk:
        raise AttentionArgError(f"n_q_heads ({Hq}) must be a multiple of n_kv_heads ({Hk})")
    if Hq // Hk > att.MAX_GROUP:
        raise AttentionArgError(f"at most {att.MAX_GROUP} query heads per KV head (the MMA has 16 rows), got {Hq // Hk}")
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        g = c.global_scale
        if g.numel() not in (1, Hk):
            raise AttentionArgError(f"{name}: global_scale must be per tensor (1 value) or per KV head ({Hk}), got {tuple(g.shape)}")
        if check_values:
            for val in g.detach().float().cpu().reshape(-1).tolist():
                if not (math.isfinite(val) and val > 0):
                    raise AttentionArgError(f"{name}: global_scale must be finite and > 0, got {val}")
    devs = {t.device for t in (q, k_cache.packed, k_cache.scales, v_cache.packed, v_cache.scales)}
    if len(devs) != 1:
        raise AttentionArgError(f"q and the caches must be on one device, got {sorted(map(str, devs))}")
    paged = block_table is not None
    if paged:
        att.check_paged(block_table, seq_lens, B, P)
        max_blocks, cap = block_table.shape[1], block_table.shape[1] * P
    else:
        if N0 != B:
            raise AttentionArgError(f"contiguous cache must be [B={B}, Hk, L, D/2], got batch {N0}")
        max_blocks, cap = 1, P
    if seq_lens is not None and (check_values or not isinstance(seq_lens, torch.Tensor)):
        att.check_lens(seq_lens, block_table if paged and check_values else None, B, cap, P, N0)
    return Problem(B, Hq, Hk, D, False, paged, P, max_blocks, N0)


# ---- the launch ----------------------------------------------------------------------------------------------
VERSIONS = (2, 3)


def prepare(q, k_cache: NVFP4Cache, v_cache: NVFP4Cache, seq_lens=None, *, block_table=None,
            softmax_scale: float | None = None, num_splits: int | None = None, config: tuple | None = None,
            out: torch.Tensor | None = None, check_values: bool = True, max_seq_len: int | None = None,
            version: int | None = None, merge: bool | None = None) -> att.Launch:
    """Validate (before any CUDA call), plan the splits, convert arguments; returns a Launch (call it to run).

    version: 2 (attention_nvfp4kv.cu: config (NSUB, NS, ROT, MINB) from KERNELS / DEFAULTS) or 3 (attention_decode_v3.cu,
    sm_90+: config (NS, COPY, MINB) from attention_fp8kv.V3_KERNELS / V3_DEFAULTS); None: DEFAULT_VERSION.
    merge (version 3 only): the splits merged inside the kernel or (False) by the reduce kernel; None: V3_MERGE."""
    p = check_args(q, k_cache, v_cache, seq_lens, block_table, check_values=check_values)
    if version is None:
        version = DEFAULT_VERSION
    if version not in VERSIONS:
        raise AttentionArgError(f"version must be one of {VERSIONS}, got {version!r}")
    att.check_merge(merge, version)
    lists = (KERNELS, DEFAULTS) if version == 2 else (att.V3_KERNELS, att.V3_DEFAULTS)
    att.check_ring_config("nvfp4", p, config, *lists, version=version)
    if q.device.type != "cuda":
        raise AttentionArgError(f"decode_attention_nvfp4 runs on CUDA tensors (got {q.device}); "
                                "reference_decode_attention_nvfp4 is the CPU version")
    if version == 3:
        att.require_v3(q.device, "version 2")
    dev = q.device
    lens_t, max_len, bt, ks, vs, stride = att._finish_args(p, q, dev, seq_lens, block_table, max_seq_len, check_values,
                                                           k_cache.global_scale, v_cache.global_scale)
    sm = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(p.D)
    out = att._out_tensor(p, out, dev)
    tensors = dict(q=q, k=k_cache.packed, v=v_cache.packed, ksc=_u8(k_cache.scales), vsc=_u8(v_cache.scales))
    source = "attention_nvfp4kv.cu" if version == 2 else att.RING[3]["source"]
    return att.launch_ring(source, "nvfp4", p, tensors, lens_t, max_len, bt, ks, vs, stride, sm, out,
                         config=config, num_splits=num_splits, compiled=lists[0], defaults=lists[1], version=version,
                         merge=merge)


def decode_attention_nvfp4(q, k_cache: NVFP4Cache, v_cache: NVFP4Cache, seq_lens=None, *, block_table=None,
                           softmax_scale: float | None = None, num_splits: int | None = None, config: tuple | None = None,
                           out: torch.Tensor | None = None, version: int | None = None,
                           merge: bool | None = None) -> torch.Tensor:
    """bf16 [B, Hq, D] decode attention over an NVFP4 KV cache on the GPU. See the module docstring."""
    return prepare(q, k_cache, v_cache, seq_lens, block_table=block_table, softmax_scale=softmax_scale,
                   num_splits=num_splits, config=config, out=out, version=version, merge=merge)()


# ---- the CPU reference: scaling's NVFP4 decode, then attention in float64 ------------------------------------------
def attention_f64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens, softmax_scale: float | None = None) -> torch.Tensor:
    """float64 [B, Hq, D]: scores, max-subtracted exp, normalize, weighted sum; query head i reads KV head i // G."""
    B, Hq, D = q.shape
    Hk = k.shape[1]
    sm = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    out = torch.zeros(B, Hq, D, dtype=torch.float64)
    qd = q.detach().cpu().double()
    for b, n in enumerate(lens):
        kb = k[b, :, :n].double().repeat_interleave(Hq // Hk, 0)  # [Hq, n, D]
        vb = v[b, :, :n].double().repeat_interleave(Hq // Hk, 0)
        s = torch.einsum("hd,hnd->hn", qd[b], kb) * sm
        w = torch.exp(s - s.amax(-1, keepdim=True))
        out[b] = torch.einsum("hn,hnd->hd", w / w.sum(-1, keepdim=True), vb)
    return out


def reference_decode_attention_nvfp4(q, k_cache: NVFP4Cache, v_cache: NVFP4Cache, seq_lens=None, *, block_table=None,
                                     softmax_scale: float | None = None) -> torch.Tensor:
    """float64 [B, Hq, D] on the CPU: dequantize through fp8lab.scaling (on the cache's device, bit-exact anywhere),
    gather pages, attention in float64 on the CPU."""
    k = dequantize_nvfp4_cache(k_cache).cpu()
    v = dequantize_nvfp4_cache(v_cache).cpu()
    B = q.shape[0]
    if block_table is not None:
        k = att.gather_pages(k, block_table.cpu(), seq_lens)
        v = att.gather_pages(v, block_table.cpu(), seq_lens)
    lens = [k.shape[2]] * B if seq_lens is None else att._as_int_list(seq_lens, "seq_lens")
    return attention_f64(q, k, v, lens, softmax_scale)
