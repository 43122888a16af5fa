"""One Llama-3-8B-shaped transformer layer at decode, end to end, in bf16, FP8 and NVFP4 (decode_layer.cu, gemv_v3.cu,
attention_fp8kv.cu), against the torch versions a user would write, and against the bandwidth ceiling of its bytes.

    shape = LayerShape.from_config()                       # tests/data/llama3_8b_config.json: H 4096, 32/8 heads, I 14336
    master = make_master(shape, device="cuda")             # random bf16 weights (the "checkpoint"), 1/sqrt(fan-in) scale
    layer = DecodeLayer(shape, master, "fp8_fused", batch=1, context=1024)
    layer.step()                                           # one decode step on torch's current stream (graph-capturable)
    layer.validate()                                       # (ok, {stage: relative RMS error}) against `reference`

One step: x -> RMSNorm -> QKV -> RoPE (q, k) + append k, v to the cache at position context-1 -> attention over
`context` tokens -> O projection + x -> RMSNorm -> gate, up -> SiLU(gate) * up -> down projection + residual.

Variants (VARIANTS; what each one runs, kernel by kernel, is `describe(variant)`):
    bf16             torch: F.rms_norm, F.linear (cuBLAS) for q, k, v, o, gate, up, down (HF's separate projections),
                     RoPE in torch ops, SDPA over a bf16 cache -- the baseline
    scaled_mm        torch FP8 off the shelf: E4M3 weights with one scale per tensor, activations quantized per tensor
                     at every call (amax, scale, cast), torch._scaled_mm; bf16 cache + SDPA (torch has no FP8-KV decode)
    fp8 / nvfp4      the lab's kernels, unfused: v3 GEMVs (W8A16 per channel / W4A16 NVFP4), FP8-KV attention,
                     RMSNorm, RoPE+append, SiLU*mul and residual adds as their own small kernels
    *_fused          what serving engines fuse: gate and up in ONE pass over the interleaved weight with SiLU*mul in
                     its epilogue, the residual adds in the O and down projections' epilogues (RMSNorm stays a tiny
                     prologue kernel, RoPE+append too)
    *_fused_pdl      the same, launched with programmatic dependent launch (each kernel's weight loads start while
                     the previous kernel finishes; launch_ex.py), except the attention (PDL_ATTENTION)
    *_fused_norm_pdl and both RMSNorms inside the QKV and gate|up GEMVs (each CTA normalizes the activations once into
                     shared memory: two launches fewer; batch <= 16, larger batches keep the norm kernel)

Batch > 16 (batch 32): the v3 GEMV takes up to 32 tokens in one pass (four 8-token MMA tiles per 16 weight rows,
packed with R = 2), so the weights are still read ONCE per step; splitting into two 16-token passes would read
them twice.

`reference` computes the same quantized arithmetic in float64 (attention in float32 per sequence, as the attention
module's reference), rounding to bf16 (or E4M3) wherever the variant stores a tensor; `validate` compares every
tensor the variant materializes (QKV, attention output, h - x, the MLP activation, out - h) by relative RMS error.
`ceiling` counts the bytes of one step with fp8lab.bandwidth (weights + KV read + activations) and divides by a
bandwidth: the time no implementation of this layer beats by much.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from . import harness

CONFIG = harness.REPO / "tests" / "data" / "llama3_8b_config.json"
VARIANTS = ("bf16", "scaled_mm", "fp8", "fp8_fused", "fp8_fused_pdl", "fp8_fused_norm_pdl",
            "nvfp4", "nvfp4_fused", "nvfp4_fused_pdl", "nvfp4_fused_norm_pdl")
#: relative RMS error a stage may have against the float64 reference: bf16 roundings (2**-9 each) through a few
#: stages and E4M3 KV rounding stay well under it; a wrong tile, scale or k order is orders of magnitude above.
STAGE_REL_RMS = 2.0 ** -6
#: launch the attention itself with PDL in the *_pdl variants (it would wait for rope_append inside)? No: in the H100
#: layer-attention probe (tools/gpu/layer_attn_probe.py, outputs/kernels/h100/layer_attn_probe*.json; 7 (batch,
#: context) points x FP8 / NVFP4, the attention in the size rule's configuration) the plain launch was faster beyond
#: the quartiles in 11 of 14 cases, from batch 1 at 1k to batch 32 at 32k (most, 5-10 %, at batch 32 with the long-cache
#: configuration), tied in one and slower in two (batch 8, 1k: 1.2-1.4 %). The kernels after it keep PDL.
PDL_ATTENTION = False
def bf16_ulp(v: torch.Tensor) -> torch.Tensor:
    """float64 spacing of bf16 numbers at each |v| (8 significant bits: 2**(floor(log2 |v|) - 7)); 0 where v is 0.

    bf16_ulp(torch.tensor([1.0, 3.0, 0.0])) -> [2**-7, 2**-6, 0]
    """
    v = v.double()
    _, e = torch.frexp(v)  # v = m 2**e, 0.5 <= |m| < 1
    return torch.where(v != 0, torch.ldexp(torch.ones_like(v), e - 8), torch.zeros_like(v))


def sum_tolerance(full, part) -> float:
    """The relative tolerance of a stage stored as bf16(base + part) and checked on its part (h = x + O attn: the O
    projection's part; out = h + MLP: the MLP's part).

    A variant whose part is off by STAGE_REL_RMS |part_i| per element: where the ulp of the stored sum is small against
    that, the check sees the error itself; where it is large (at long contexts the attention output averages over many
    values and shrinks, so the O part of h falls far under the residual x), the two bf16 sums land on the same value
    except where the error carries one across a rounding boundary, with probability |error_i| / ulp_i, and then
    differ by a whole ulp. Expected square: sum_i STAGE_REL_RMS |part_i| ulp_i. The tolerance is the root of both
    terms over |part|: STAGE_REL_RMS when the ulps are small, more when one ulp of the sum is a large error on the part
    (measured before this rule: torch's own bf16 layer at 8k-32k tokens, 0.02-0.03 of the O part, "failed" at 2**-6).
    A part wrong by 10 % still fails at a part 60x under the residual (tests/test_decode_layer.py).

    sum_tolerance(torch.ones(4), torch.ones(4)) -> 0.0191...   # sqrt(2**-12 + 2**-6 x 2**-7)
    """
    full, part = full.double(), part.double()
    n2 = float(part.pow(2).sum())
    if n2 == 0.0:
        return STAGE_REL_RMS
    flips = STAGE_REL_RMS * float((bf16_ulp(full) * part.abs()).sum()) / n2
    return math.sqrt(STAGE_REL_RMS ** 2 + flips)


@dataclass(frozen=True)
class LayerShape:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float
    theta: float

    @classmethod
    def from_config(cls, cfg=CONFIG) -> "LayerShape":
        """A HF config.json (path or dict): LayerShape.from_config() -> Llama-3-8B's H 4096, 32/8 heads, I 14336."""
        if not isinstance(cfg, dict):
            cfg = json.loads(Path(cfg).read_text())
        H, nh = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        return cls(H, nh, int(cfg.get("num_key_value_heads", nh)), int(cfg.get("head_dim", H // nh)),
                   int(cfg["intermediate_size"]), float(cfg.get("rms_norm_eps", 1e-5)), float(cfg.get("rope_theta", 1e4)))

    @property
    def qkv_rows(self) -> int:
        return (self.heads + 2 * self.kv_heads) * self.head_dim


def describe(variant: str) -> list[str]:
    """The kernels one step of `variant` launches, in order."""
    check_variant(variant)
    if variant in ("bf16", "scaled_mm"):
        lin = "F.linear (cuBLAS bf16)" if variant == "bf16" else "quantize x per tensor + torch._scaled_mm"
        return ["F.rms_norm", f"q, k, v: 3 x {lin}", "RoPE (torch ops) + cache write (index_put)",
                "F.scaled_dot_product_attention (bf16 cache)", f"o: {lin}", "+ residual", "F.rms_norm",
                f"gate, up: 2 x {lin}", "F.silu(gate) * up", f"down: {lin}", "+ residual"]
    fmt = "W8A16 FP8 per-channel" if variant.startswith("fp8") else "W4A16 NVFP4"
    out = ["rmsnorm_bf16", f"QKV: gemv_v3 {fmt}", "rope_append_fp8 (RoPE, E4M3 K/V appended)",
           "decode_attention FP8 KV (the default version and merge)"]
    if "_norm" in variant:
        out = [f"QKV: gemv_v3 {fmt} with the RMSNorm fused (activations normalized per CTA in shared memory)",
               "rope_append_fp8 (RoPE, E4M3 K/V appended)", "decode_attention FP8 KV (the default version and merge)",
               f"O: gemv_v3 {fmt} + residual epilogue",
               f"gate|up interleaved: ONE gemv_v3 {fmt} pass, RMSNorm fused, SiLU*mul epilogue",
               f"down: gemv_v3 {fmt} + residual epilogue", "(lab kernels launched with programmatic dependent launch, the attention plainly)"]
    elif "_fused" in variant:
        out += [f"O: gemv_v3 {fmt} + residual epilogue", "rmsnorm_bf16",
                f"gate|up interleaved: ONE gemv_v3 {fmt} pass, SiLU*mul epilogue", f"down: gemv_v3 {fmt} + residual epilogue"]
        if variant.endswith("_pdl"):
            out.append("(lab kernels launched with programmatic dependent launch, the attention plainly)")
    else:
        out += [f"O: gemv_v3 {fmt}", "add_bf16", "rmsnorm_bf16", f"gate: gemv_v3 {fmt}", f"up: gemv_v3 {fmt}",
                "silu_mul_bf16", f"down: gemv_v3 {fmt}", "add_bf16"]
    return out


def check_variant(v: str) -> None:
    if v not in VARIANTS:
        raise ValueError(f"unknown decode-layer variant {v!r}; valid: {', '.join(VARIANTS)}")


def check_point(batch: int, context: int, max_context: int | None = None) -> None:
    """batch 1..32 (the v3 GEMV's token limit), context >= 1."""
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 32:
        raise ValueError(f"batch must be an integer in 1..32 (one GEMV pass), got {batch!r}")
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise ValueError(f"context must be a positive integer, got {context!r}")
    if max_context is not None and context > max_context:
        raise ValueError(f"context {context} exceeds the cache's {max_context} positions")


# ---- weights ----------------------------------------------------------------------------------------------------
def make_master(shape: LayerShape, device="cuda", seed: int = 0) -> dict:
    """Random bf16 weights with std 1/sqrt(fan-in) (every stage's output O(1) for O(1) inputs), norms 1 + 0.1 N(0,1)."""
    g = torch.Generator(device=device).manual_seed(seed)
    H, I = shape.hidden, shape.intermediate

    def w(rows, cols):
        return (torch.randn(rows, cols, generator=g, device=device) / math.sqrt(cols)).to(torch.bfloat16)
    return {"qkv": w(shape.qkv_rows, H), "o": w(H, H), "gate": w(I, H), "up": w(I, H), "down": w(H, I),
            "g1": (1 + 0.1 * torch.randn(H, generator=g, device=device)).to(torch.bfloat16),
            "g2": (1 + 0.1 * torch.randn(H, generator=g, device=device)).to(torch.bfloat16)}


def rope_table(shape: LayerShape, positions: int, device) -> torch.Tensor:
    """[positions, D/2, 2] fp32 (cos, sin) of pos * theta**(-2i/D), computed in float64 then rounded."""
    half = shape.head_dim // 2
    inv = shape.theta ** (-torch.arange(half, dtype=torch.float64) * 2 / shape.head_dim)
    ang = torch.arange(positions, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.stack([ang.cos(), ang.sin()], -1).float().to(device).contiguous()


def _bf(t: torch.Tensor) -> torch.Tensor:
    """Round to bf16 (through float32, as a kernel's fp32 result is rounded) and back to float64."""
    return t.float().to(torch.bfloat16).double()


# ---- the reference (float64; attention float32 per sequence) --------------------------------------------------------
def rmsnorm64(x, w, eps):
    x = x.double()
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w.double()


def rope64(t, cs, pos):
    """t [B, heads, D] float64; cs [P, D/2, 2]; pos [B] -> rotated (rotate-half form)."""
    half = t.shape[-1] // 2
    c = cs[pos.long(), :, 0].double()[:, None, :]
    s = cs[pos.long(), :, 1].double()[:, None, :]
    x1, x2 = t[..., :half], t[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def reference(x, W: dict, g1, g2, shape: LayerShape, *, cache_k, cache_v, k_scale, v_scale, context: int, cs,
              fused: bool, act=None, rope_bf16=False, given: dict | None = None) -> dict:
    """float64 stages of one step: {"qkv", "attn", "h", "a", "out"} (bf16-rounded where the variant stores them).

    W: float64 dequantized weights {"qkv", "o", "gate", "up", "down"} ([rows, cols]); cache_k/v [B, Hk, >= context, D]
    as stored (E4M3 codes with k_scale/v_scale per KV head, or bf16; position context-1 is written by the step);
    act: None (bf16 activations) or a function bf16 x -> float64 dequantized activations (scaled_mm's per-tensor
    quantization); fused: the GEMV outputs feed the residual / SiLU*mul in fp32 (True) or as bf16 tensors (False);
    rope_bf16: RoPE computed in bf16 torch ops (the torch baselines) rather than fp32;
    given: stage tensors of the variant ({"attn", "h", "a"}) fed to the next stage in place of the reference's own
    (teacher forcing). Needed where activations are quantized with a dynamic per-tensor scale: that scale is the
    amax of the whole tensor, so a 1e-3 difference upstream moves every element's rounding grid and a chained
    reference disagrees by the full E4M3 rounding noise (~3 %) even when each stage is exact."""
    given = given or {}
    from fp8lab.formats import E4M3

    B, H = x.shape
    Hq, Hk, D = shape.heads, shape.kv_heads, shape.head_dim
    pos = torch.full((B,), context - 1, dtype=torch.long, device=x.device)

    def lin(xb, w):
        return (act(xb) if act is not None else xb.double()) @ w.T

    st = {}
    xn = _bf(rmsnorm64(x, g1, shape.eps))
    qkv = _bf(lin(xn, W["qkv"]))
    st["qkv"] = qkv
    q = qkv[:, : Hq * D].reshape(B, Hq, D)
    k = qkv[:, Hq * D: (Hq + Hk) * D].reshape(B, Hk, D)
    v = qkv[:, (Hq + Hk) * D:].reshape(B, Hk, D)
    if rope_bf16:
        q_rot, k_rot = _rope_torch(q.to(torch.bfloat16), k.to(torch.bfloat16), cs, pos)
        q_rot, k_rot = q_rot.double(), k_rot.double()
    else:
        q_rot, k_rot = _bf(rope64(q, cs, pos)), _bf(rope64(k, cs, pos))
    fp8 = cache_k.dtype in (torch.uint8, torch.float8_e4m3fn)
    if fp8:
        ks = k_scale.double().reshape(1, Hk, 1)
        vs = v_scale.double().reshape(1, Hk, 1)
        k_new = E4M3.decode(E4M3.encode((k_rot.float() / k_scale.reshape(1, Hk, 1)))).double() * ks
        v_new = E4M3.decode(E4M3.encode((v.float() / v_scale.reshape(1, Hk, 1)))).double() * vs
    else:
        k_new, v_new = k_rot, v
    attn = torch.empty(B, Hq, D, dtype=torch.float64, device=x.device)
    G = Hq // Hk
    for b in range(B):  # per sequence in float32 (memory), like attention_fp8kv.reference_decode_attention
        if fp8:
            kb = E4M3.decode(cache_k[b, :, :context].view(torch.uint8)).float() * k_scale.reshape(Hk, 1, 1)
            vb = E4M3.decode(cache_v[b, :, :context].view(torch.uint8)).float() * v_scale.reshape(Hk, 1, 1)
        else:
            kb, vb = cache_k[b, :, :context].float(), cache_v[b, :, :context].float()
        kb[:, context - 1], vb[:, context - 1] = k_new[b].float(), v_new[b].float()
        kb, vb = kb.repeat_interleave(G, 0), vb.repeat_interleave(G, 0)
        s = (q_rot[b].float()[:, None, :] @ kb.transpose(1, 2)) / math.sqrt(D)  # [Hq, 1, L]
        attn[b] = (torch.softmax(s.double(), -1).float() @ vb)[:, 0].double()
    attn = _bf(attn).reshape(B, H)
    st["attn"] = attn
    o = lin(given["attn"].double() if "attn" in given else attn, W["o"])
    h = _bf(x.double() + (o if fused else _bf(o)))
    st["h"] = h
    if "h" in given:
        h = given["h"].double()
    hn = _bf(rmsnorm64(h, g2, shape.eps))
    gl, ul = lin(hn, W["gate"]), lin(hn, W["up"])
    if not fused:
        gl, ul = _bf(gl), _bf(ul)
    a = _bf(gl * torch.sigmoid(gl) * ul)
    st["a"] = a
    d = lin(given["a"].double() if "a" in given else a, W["down"])
    st["out"] = _bf(h + (d if fused else _bf(d)))
    return st


def _rope_torch(q, k, cs, pos):
    """RoPE as a torch user writes it (HF's rotate_half, in the tensors' dtype): q [B, Hq, D], k [B, Hk, D]."""
    c = cs[pos.long(), :, 0].to(q.dtype)
    s = cs[pos.long(), :, 1].to(q.dtype)
    c, s = torch.cat([c, c], -1)[:, None, :], torch.cat([s, s], -1)[:, None, :]

    def rot(t):
        half = t.shape[-1] // 2
        return torch.cat([-t[..., half:], t[..., :half]], -1)
    return q * c + rot(q) * s, k * c + rot(k) * s


def rope_grid(B: int, shape: "LayerShape", threads: int = 256) -> tuple[int, int]:
    """rope_append's grid: B sequences x enough blocks of `threads` for one item each (a q or k rotation pair, or a v
    element) -- decode_layer.cu.

    rope_grid(1, Llama-3-8B) -> (1, 14)   # (32 + 8) x 64 pairs + 8 x 128 v elements = 3584 items
    """
    items = (shape.heads + shape.kv_heads) * (shape.head_dim // 2) + shape.kv_heads * shape.head_dim
    return (B, -(-items // threads))


def rel_rms(y, ref) -> float:
    """||y - ref|| / ||ref|| (float64); NaN or Inf in y gives inf."""
    y = y.double()
    if not bool(torch.isfinite(y).all()):
        return math.inf
    return float((y - ref).norm() / ref.norm().clamp_min(1e-300))


# ---- the layer --------------------------------------------------------------------------------------------------
class DecodeLayer:
    """One variant of the layer at one (batch, context), every buffer allocated once: `step()` only launches.

    Inputs are random (x ~ N(0, 1); a KV cache of N(0, 1) values, FP8 with per-head scales from its amax).
    Attributes after a step: .out (bf16 [B, H]) and the stage tensors `stages()` names."""

    def __init__(self, shape: LayerShape, master: dict, variant: str, batch: int, context: int, *,
                 max_context: int | None = None, seed: int = 1, gemv_config: dict | None = None,
                 weight_cache: dict | None = None):
        check_variant(variant)
        check_point(batch, context, max_context)
        self.shape, self.variant, self.B, self.context = shape, variant, batch, context
        self.L = max_context or context
        self.fused = "_fused" in variant
        self.tolerance = None  # per stage, set by validate()
        self.pdl = variant.endswith("_pdl")
        self.norm_in_gemv = "_norm" in variant and batch <= 16
        self.fmt = "bf16" if variant == "bf16" else "scaled_mm" if variant == "scaled_mm" else variant.split("_")[0]
        dev = master["qkv"].device
        self.device = dev
        g = torch.Generator(device=dev).manual_seed(seed)
        H, Hk, D = shape.hidden, shape.kv_heads, shape.head_dim
        self.x = torch.randn(batch, H, generator=g, device=dev).to(torch.bfloat16)
        self.g1, self.g2 = master["g1"], master["g2"]
        self.cs = rope_table(shape, self.L, dev)
        self.pos = torch.full((batch,), context - 1, dtype=torch.int32, device=dev)
        kv_fp8 = self.fmt in ("fp8", "nvfp4")
        # packed / converted weights (and their float64 dequantization) shared by layers of the same format; the KV
        # cache shared by layers of the same cache type and size (each step writes only position context-1, and
        # `reference` replaces that slot with its own value, so sharing changes no result)
        self._wcache = weight_cache if weight_cache is not None else {}
        ckey = ("cache", kv_fp8, batch, Hk, self.L, D)
        if ckey not in self._wcache:
            self._wcache[ckey] = _make_cache(batch, Hk, self.L, D, kv_fp8, g, dev)
        self.cache_k, self.cache_v, self.k_scale, self.v_scale = self._wcache[ckey]
        self.R = 2 if batch > 16 else 1
        if self.fmt in ("bf16", "scaled_mm"):
            self._init_torch(master)
        else:
            self._init_lab(master, gemv_config or {})

    # -- torch baselines --
    def _init_torch(self, master):
        s = self.shape
        Hq, Hk, D = s.heads, s.kv_heads, s.head_dim
        rows = {"q": (0, Hq * D), "k": (Hq * D, (Hq + Hk) * D), "v": ((Hq + Hk) * D, (Hq + 2 * Hk) * D)}
        W = {n: master["qkv"][a:b] for n, (a, b) in rows.items()}
        W.update({n: master[n] for n in ("o", "gate", "up", "down")})
        if self.fmt == "bf16":
            if "bf16" not in self._wcache:
                self._wcache["bf16"] = {n: w.contiguous() for n, w in W.items()}
            self.W = self._wcache["bf16"]
            self.linear = lambda x, n: torch.nn.functional.linear(x, self.W[n])
        else:
            if "scaled_mm" not in self._wcache:
                Wq, Ws = {}, {}
                for n, w in W.items():
                    sw = (w.float().abs().amax() / 448.0).reshape(())
                    Wq[n], Ws[n] = (w.float() / sw).to(torch.float8_e4m3fn), sw
                self._wcache["scaled_mm"] = (Wq, Ws)
            self.Wq, self.Ws = self._wcache["scaled_mm"]
            self.linear = lambda x, n: _scaled_mm_linear(x, self.Wq[n], self.Ws[n])
        self.attn = torch.empty(self.B, s.hidden, dtype=torch.bfloat16, device=self.device)

    def _step_torch(self):
        s, B = self.shape, self.B
        Hq, Hk, D = s.heads, s.kv_heads, s.head_dim
        F = torch.nn.functional
        xn = F.rms_norm(self.x, (s.hidden,), self.g1, s.eps)
        q = self.linear(xn, "q").reshape(B, Hq, D)
        k = self.linear(xn, "k").reshape(B, Hk, D)
        v = self.linear(xn, "v").reshape(B, Hk, D)
        q, k = _rope_torch(q, k, self.cs, self.pos)
        bi = torch.arange(B, device=self.device)
        self.cache_k[bi, :, self.context - 1] = k
        self.cache_v[bi, :, self.context - 1] = v
        a = F.scaled_dot_product_attention(q[:, :, None], self.cache_k[:, :, : self.context],
                                           self.cache_v[:, :, : self.context], enable_gqa=True)
        self.attn.copy_(a.reshape(B, s.hidden))
        self.h = self.x + self.linear(self.attn, "o")
        hn = F.rms_norm(self.h, (s.hidden,), self.g2, s.eps)
        self.a = F.silu(self.linear(hn, "gate")) * self.linear(hn, "up")
        self.out = self.h + self.linear(self.a, "down")
        return self.out

    # -- the lab's kernels --
    def _init_lab(self, master, gemv_config):
        from . import _cuda
        from . import gemv_v3 as V3
        from . import reference as REF
        from .attention_fp8kv import prepare as attention_prepare

        s, B, dev = self.shape, self.B, self.device
        H, I = s.hidden, s.intermediate
        R = self.R
        fp8 = self.fmt == "fp8"

        def pack(w, interleave=None):
            if fp8:
                codes, sc = REF.quantize_weight_channel(w.float())
                return V3.pack_fp8(codes, sc, R=R, interleave=interleave)
            packed, sc, gs = REF.quantize_nvfp4(w.float())
            return V3.pack_nvfp4(packed, sc, gs, R=R, interleave=interleave)
        key = (self.fmt, R, self.fused)
        if key not in self._wcache:
            P = {"qkv": pack(master["qkv"]), "o": pack(master["o"]), "down": pack(master["down"])}
            if self.fused:
                P["gate_up"] = pack(torch.cat([master["gate"], master["up"]]), "gate_up")
            else:
                P["gate"], P["up"] = pack(master["gate"]), pack(master["up"])
            self._wcache[key] = P
        self.P = self._wcache[key]
        bf = dict(dtype=torch.bfloat16, device=dev)
        self.xn, self.hn = torch.empty(B, H, **bf), torch.empty(B, H, **bf)
        self.qkv = torch.empty(B, s.qkv_rows, **bf)
        self.q = torch.empty(B, s.heads, s.head_dim, **bf)
        self.attn3 = torch.empty(B, s.heads, s.head_dim, **bf)
        self.attn = self.attn3.view(B, H)
        self.h, self.out, self.a = torch.empty(B, H, **bf), torch.empty(B, H, **bf), torch.empty(B, I, **bf)
        cfg = gemv_config

        def gemv(x, name, out, epilogue="store", residual=None, norm=None):
            return V3.prepare(x, self.P[name], out=out, epilogue=epilogue, residual=residual, pdl=self.pdl,
                              config=cfg.get(name), norm=norm)
        mod = _cuda.load_module("decode_layer.cu")
        cp = _cuda._cupy()
        A = _cuda.as_cupy
        seq = torch.full((B,), self.context, dtype=torch.int32, device=dev)
        self._keep = [seq]
        self.steps = []  # (callable) in order

        def small(name, grid, args):
            fn = mod.get_function(name)
            self.steps.append(_SmallLaunch(fn, grid, (256,), args, self.pdl))

        if self.norm_in_gemv:
            self.steps.append(gemv(self.x, "qkv", self.qkv, norm=(self.g1, s.eps)))
        else:
            small("rmsnorm_bf16", (B,), (A(self.x), A(self.g1), A(self.xn), cp.int32(H), cp.float32(s.eps)))
            self.steps.append(gemv(self.xn, "qkv", self.qkv))
        small("rope_append_fp8", rope_grid(B, s), (A(self.qkv), A(self.pos), A(self.cs), A(self.q), A(self.cache_k), A(self.cache_v),
                                        A(self.k_scale), A(self.v_scale), cp.int32(s.heads), cp.int32(s.kv_heads),
                                        cp.int32(s.head_dim), cp.int32(self.L)))
        attn = attention_prepare(self.q, self.cache_k, self.cache_v, seq, k_scale=self.k_scale, v_scale=self.v_scale,
                                 out=self.attn3, check_values=False, max_seq_len=self.context)
        # version 3 can wait for rope_append before reading (PDL_ATTENTION says whether the layer asks it to)
        attn.pdl_main = self.pdl and PDL_ATTENTION and attn.info["version"] == 3
        self.steps.append(attn)
        n_el = lambda t: t.numel()  # noqa: E731
        ew_grid = lambda n: (max(1, min(1024, -(-n // 2048))),)  # noqa: E731  8 elements x 256 threads per CTA
        if self.fused:
            self.steps.append(gemv(self.attn, "o", self.h, "residual", self.x))
            if self.norm_in_gemv:
                self.steps.append(gemv(self.h, "gate_up", self.a, "silu_mul", norm=(self.g2, s.eps)))
            else:
                small("rmsnorm_bf16", (B,), (A(self.h), A(self.g2), A(self.hn), cp.int32(H), cp.float32(s.eps)))
                self.steps.append(gemv(self.hn, "gate_up", self.a, "silu_mul"))
            self.steps.append(gemv(self.a, "down", self.out, "residual", self.h))
        else:
            self.o = torch.empty(B, H, **bf)
            self.g, self.u, self.d = torch.empty(B, I, **bf), torch.empty(B, I, **bf), torch.empty(B, H, **bf)
            self.steps.append(gemv(self.attn, "o", self.o))
            small("add_bf16", ew_grid(n_el(self.h)), (A(self.x), A(self.o), A(self.h), cp.int32(n_el(self.h))))
            small("rmsnorm_bf16", (B,), (A(self.h), A(self.g2), A(self.hn), cp.int32(H), cp.float32(s.eps)))
            self.steps.append(gemv(self.hn, "gate", self.g))
            self.steps.append(gemv(self.hn, "up", self.u))
            small("silu_mul_bf16", ew_grid(n_el(self.a)), (A(self.g), A(self.u), A(self.a), cp.int32(n_el(self.a))))
            self.steps.append(gemv(self.a, "down", self.d))
            small("add_bf16", ew_grid(n_el(self.out)), (A(self.h), A(self.d), A(self.out), cp.int32(n_el(self.out))))

    def step(self):
        """One decode step on torch's current stream (no host sync, no allocation for the lab variants)."""
        if self.fmt in ("bf16", "scaled_mm"):
            return self._step_torch()
        for s in self.steps:
            s()
        return self.out

    # -- checking and counting --
    def dequantized_weights(self) -> dict:
        """float64 weights as the variant multiplies them, {"qkv", "o", "gate", "up", "down"} (cached per format)."""
        key = ("float64", self.fmt, self.R, self.fused)
        if key not in self._wcache:
            self._wcache[key] = self._dequantized_weights()
        return self._wcache[key]

    def _dequantized_weights(self) -> dict:
        from . import gemv_v3 as V3

        if self.fmt == "bf16":
            W = {n: w.double() for n, w in self.W.items()}
        elif self.fmt == "scaled_mm":
            W = {n: self.Wq[n].float().double() * self.Ws[n].double() for n in self.Wq}
        else:
            W = {n: V3.dequant(p) for n, p in self.P.items()}
            if "gate_up" in W:
                gu = W.pop("gate_up")
                W["gate"], W["up"] = gu[: self.shape.intermediate], gu[self.shape.intermediate:]
            return W
        W["qkv"] = torch.cat([W.pop("q"), W.pop("k"), W.pop("v")])
        return W

    def reference(self, given: dict | None = None) -> dict:
        act = _scaled_mm_act if self.fmt == "scaled_mm" else None
        return reference(self.x, self.dequantized_weights(), self.g1, self.g2, self.shape, cache_k=self.cache_k,
                         cache_v=self.cache_v, k_scale=self.k_scale, v_scale=self.v_scale, context=self.context,
                         cs=self.cs, fused=self.fused, act=act, rope_bf16=self.fmt in ("bf16", "scaled_mm"),
                         given=given)

    def stages(self) -> dict:
        """The tensors this variant materializes, comparable with `reference`'s stages."""
        st = {"attn": self.attn, "h": self.h, "a": self.a, "out": self.out}
        if self.fmt not in ("bf16", "scaled_mm"):
            st["qkv"] = self.qkv
        return st

    def validate(self, ref: dict | None = None) -> tuple[bool, dict]:
        """Poison the outputs, run one step, compare every stage: (all within tolerance, {stage: rel RMS}).

        The tolerances (self.tolerance after the call): STAGE_REL_RMS, and for h and out -- checked on the part their
        step adds to a bf16 sum -- sum_tolerance."""
        for t in self._poisonable():
            t.fill_(float("nan"))
        self.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        got = self.stages()
        forced = self.fmt == "scaled_mm"      # dynamic per-tensor activation scales: see reference(given=...)
        ref = ref or self.reference(given=got if forced else None)
        err, tol = {}, {}
        for k in got:
            y, r = got[k].double(), ref[k]
            tol[k] = STAGE_REL_RMS
            if k == "h":
                y, r = y - self.x.double(), r - self.x.double()    # the O projection's part
                tol[k] = sum_tolerance(ref["h"], r)
            elif k == "out":
                y, r = y - got["h"].double(), r - (got["h"].double() if forced else ref["h"])  # the MLP's part
                tol[k] = sum_tolerance(ref["out"], r)
            err[k] = rel_rms(y, r)
        self.tolerance = tol
        return all(err[k] <= tol[k] for k in err), err

    def _poisonable(self):
        if self.fmt in ("bf16", "scaled_mm"):
            return [self.attn]
        return [self.qkv, self.q, self.attn3, self.h, self.a, self.out]

    def weight_bytes(self) -> int:
        """Bytes of weights one step streams, as stored (packed data + scales; norm weights in bf16)."""
        norms = 2 * self.shape.hidden * 2
        if self.fmt == "bf16":
            return sum(w.numel() * 2 for w in self.W.values()) + norms
        if self.fmt == "scaled_mm":
            return sum(w.numel() for w in self.Wq.values()) + 4 * len(self.Wq) + norms
        return sum(p.weight_bytes() + (4 if p.gscale is not None else 0) for p in self.P.values()) + norms


class _SmallLaunch:
    def __init__(self, fn, grid, block, args, pdl):
        self.fn, self.grid, self.block, self.args, self.pdl = fn, grid, block, args, pdl

    def __call__(self):
        from . import _cuda

        stream = torch.cuda.current_stream().cuda_stream
        if self.pdl:
            from . import launch_ex

            launch_ex.launch(self.fn, self.grid, self.block, self.args, 0, stream, pdl=True)
        else:
            cp = _cuda._cupy()
            with cp.cuda.ExternalStream(stream):
                self.fn(self.grid, self.block, self.args)


def _make_cache(B, Hk, L, D, fp8, g, dev):
    """A cache of N(0, 1) values: bf16, or E4M3 codes with per-head scales amax / 448 (amax of 4 sigma: 4 / 448)."""
    kc = torch.empty(B, Hk, L, D, dtype=torch.uint8 if fp8 else torch.bfloat16, device=dev)
    vc = torch.empty_like(kc)
    ks = vs = None
    if fp8:
        ks = torch.full((Hk,), 4.0 / 448, device=dev)
        vs = torch.full((Hk,), 4.0 / 448, device=dev)
    for c in (kc, vc):
        for b in range(B):  # one sequence at a time: bounded temporaries at 32k context
            vals = torch.randn(Hk, L, D, generator=g, device=dev)
            if fp8:
                c[b] = (vals.clamp(-4, 4) / (4.0 / 448)).to(torch.float8_e4m3fn).view(torch.uint8)
            else:
                c[b] = vals.to(torch.bfloat16)
    return kc, vc, ks, vs


def _scaled_mm_act(x: torch.Tensor):
    """Per-tensor E4M3 activations as _scaled_mm_linear makes them, dequantized to float64."""
    xq, sx = _quantize_per_tensor(x)
    return xq.float().double() * sx.double()


def _quantize_per_tensor(x):
    sx = (x.float().abs().amax() / 448.0).clamp_min(1e-12)
    return (x.float() / sx).to(torch.float8_e4m3fn), sx


def _scaled_mm_linear(x, wq, sw):
    """What a torch user calls for an FP8 linear: quantize x per tensor (dynamic), torch._scaled_mm, bf16 out."""
    xq, sx = _quantize_per_tensor(x)
    return torch._scaled_mm(xq, wq.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16)


# ---- the ceiling ---------------------------------------------------------------------------------------------------
def layer_bytes(variant: str, batch: int, context: int, config=CONFIG) -> dict:
    """Bytes one decode step of one layer must move, by fp8lab.bandwidth: weights in the variant's format (scales
    included), the KV cache read (batch x context tokens), and the activations each kernel boundary writes and
    reads once (x, the normed inputs, QKV, q, attention output, h, the MLP activation, out).

    layer_bytes("fp8_fused", 1, 1024)["total"] -> ~2.20e8   (218 MB of FP8 weights + 2.1 MB of FP8 KV)"""
    from fp8lab import bandwidth as bw

    check_variant(variant)
    s = bw.model_shape(json.loads(Path(config).read_text()) if not isinstance(config, dict) else config)
    fmt = {"bf16": "bf16", "scaled_mm": "fp8_tensor", "fp8": bw.WeightFormat("fp8_channel", 8, "channel", 32),
           "nvfp4": "nvfp4"}[variant.split("_")[0] if variant != "scaled_mm" else "scaled_mm"]
    f = fmt if isinstance(fmt, bw.WeightFormat) else bw.FORMATS[fmt]
    L = s.n_layers
    weights = 0
    for t in s.tensors:
        if t.role in ("attention", "mlp") and t.count % L == 0:
            weights += f.matrix_bytes(t.rows, t.cols) * t.count // L
        elif t.role == "norm" and t.count % L == 0:
            weights += bw.FORMATS["bf16"].matrix_bytes(t.rows, t.cols) * t.count // L
    kv_dtype = "bf16" if variant in ("bf16", "scaled_mm") else "fp8"
    kv = bw.kv_cache_bytes(s, kv_dtype, batch, context) / L
    shape = LayerShape.from_config(config)
    H, I, qkv = shape.hidden, shape.intermediate, shape.qkv_rows
    act = 2 * batch * 2 * (4 * H + qkv + H + I + H)  # written once + read once, bf16
    return {"weights": weights, "kv": kv, "activations": act, "total": weights + kv + act}


def ceiling_us(nbytes: float, gbps: float) -> float:
    """Bytes over a bandwidth in GB/s, in microseconds: ceiling_us(2.2e8, 4235) -> 51.9."""
    return nbytes / (gbps * 1e3)
