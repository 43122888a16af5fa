"""Recipes: which tensors of a transformers causal LM go through which format, at which granularity.

A recipe has up to four slots, each a `QuantSpec` from fp8lab.scaling (or "bf16" for plain bf16 rounding):

    weight  every nn.Linear weight, quantized once when the recipe is applied (static, like a checkpoint)
    act     the input of every nn.Linear, quantized on every call (dynamic scale, like a serving engine)
    key     the keys the attention reads: AFTER RoPE, after the cache update, i.e. what an FP8 KV cache holds
    value   the values the attention reads

lm_head and the token embeddings are left alone unless `include_lm_head` / `include_embeddings` are set.

    >>> with applied(model, get_recipe("e4m3-wakv")):
    ...     logits = model(ids).logits           # fake-quantized forward
    >>> # here the model is bit-identical to before: original Parameters and attention restored, hooks gone

How the pieces are attached, and why:
  * weights: each Linear's `weight` attribute is pointed at a new Parameter holding fake_quant(W); the
    original Parameter object is kept and put back on removal (so nothing is copied back and bits cannot
    drift, and a weight tied to the embedding stays tied).
  * activations: a forward pre-hook on each Linear. q/k/v (and gate/up) read the same tensor; the hook
    remembers the last input object and reuses its result, so a per-tensor scale is not computed 3 times.
  * KV: transformers >= 5 calls attention through `ALL_ATTENTION_FUNCTIONS[config._attn_implementation]`
    with `key`/`value` already rotated by RoPE and concatenated with the cache. We register one wrapper
    per inner implementation ("fp8lab_kv_sdpa", "fp8lab_kv_eager") that fake-quantizes key/value and then
    calls the original function, and switch the config to it. The mask function is registered under the
    same name so masks are built exactly as for the inner implementation.

KV granularity: "tensor" = one dynamic scale per layer per forward over all heads and tokens (an oracle
for a calibrated static per-layer scale: it always fits this forward's max); "channel" = one scale per
(kv head, head dim) channel over all tokens (K outliers are channel-structured).

Dynamic scales see the whole forward batch: with batched lm-eval requests (right-padded, sorted by length)
one per-tensor scale covers every sequence of the batch, as in a serving engine that batches requests.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Union

import torch
from torch import nn

from fp8lab.formats import bf16_round
from fp8lab.scaling import QuantSpec, fake_quant

__all__ = ["Recipe", "RECIPES", "ALIASES", "RecipeError", "get_recipe", "apply_recipe", "remove_recipe",
           "applied", "list_recipes", "kv_fake_quant", "fast_fake_quant"]

Slot = Union[QuantSpec, str, None]     # a QuantSpec, "bf16", or None (leave alone)


class RecipeError(ValueError):
    """Unknown recipe name or a recipe that does not fit the model."""


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    weight: Slot = None
    act: Slot = None
    key: Slot = None
    value: Slot = None
    include_lm_head: bool = False
    include_embeddings: bool = False

    @property
    def is_baseline(self) -> bool:
        return self.weight is None and self.act is None and self.key is None and self.value is None


def _S(fmt, gran, **kw) -> QuantSpec:
    return QuantSpec(fmt=fmt, granularity=gran, **kw)


_E4T, _E5T = _S("e4m3", "tensor"), _S("e5m2", "tensor")
_E4N = _S("e4m3", "none")

RECIPES: dict[str, Recipe] = {r.name: r for r in [
    Recipe("baseline", "the model as loaded, float32 compute; every delta is against this"),
    Recipe("bf16", "weights and Linear inputs rounded to bf16 (RNE), float32 accumulate", "bf16", "bf16"),
    Recipe("e4m3-w", "E4M3 weights, one scale per weight tensor", _E4T),
    Recipe("e4m3-wa", "E4M3 weights + Linear inputs, per-tensor scales (dynamic for inputs)", _E4T, _E4T),
    Recipe("e4m3-wakv", "e4m3-wa + E4M3 keys (after RoPE) and values, per-tensor dynamic scales",
           _E4T, _E4T, _E4T, _E4T),
    Recipe("e5m2-w", "E5M2 weights, one scale per weight tensor", _E5T),
    Recipe("e4m3-w-noscale", "E4M3 weights rounded as-is, no scale (values below 2**-10 flush to 0)", _E4N),
    Recipe("e4m3-wa-noscale", "E4M3 weights + Linear inputs rounded as-is, no scales", _E4N, _E4N),
    Recipe("nvfp4-w", "NVFP4 weights: E2M1 in blocks of 16, E4M3 block scales, fp32 global scale",
           _S("e2m1", "nvfp4")),
    Recipe("mxfp4-w", "MXFP4 weights: E2M1 in blocks of 32, E8M0 power-of-two scales (OCP floor rule)",
           _S("e2m1", "mx", scale_rule="floor")),
    Recipe("w8a8-block", "E4M3 weights in 128x128 blocks + E4M3 inputs in 1x128 groups (DeepSeek-style)",
           _S("e4m3", "block", block=(128, 128)), _S("e4m3", "group", group_size=128)),
    Recipe("e4m3-kv", "E4M3 keys (after RoPE) and values only, per-tensor dynamic scale per layer",
           key=_E4T, value=_E4T),
    Recipe("e4m3-kv-perchannel", "E4M3 keys and values only, one scale per (kv head, dim) channel",
           key=_S("e4m3", "channel", axis=0), value=_S("e4m3", "channel", axis=0)),
    Recipe("e5m2-kv", "E5M2 keys (after RoPE) and values only, per-tensor dynamic scale per layer",
           key=_E5T, value=_E5T),
    Recipe("int8-w", "INT8 weights, symmetric, one scale per output channel", _S("int8", "channel", axis=0)),
]}
ALIASES = {"fp32": "baseline", "none": "baseline"}
SEED003_RECIPES = ["baseline", "e4m3-w", "e4m3-wa", "e4m3-wakv", "e5m2-w", "e4m3-w-noscale",
                   "e4m3-wa-noscale"]


def get_recipe(name: str) -> Recipe:
    key = ALIASES.get(name, name)
    if key not in RECIPES:
        raise RecipeError(f"unknown recipe {name!r}; valid: {', '.join(RECIPES)}")
    return RECIPES[key]


def list_recipes() -> str:
    w = max(map(len, RECIPES))
    return "\n".join(f"{r.name:<{w}}  {r.description}" for r in RECIPES.values())


# ---- the tensor-level operations ------------------------------------------------------------------------
_TORCH_FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
_FAST = ("none", "tensor", "channel", "token", "group")


def fast_fake_quant(x: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """scaling.fake_quant, bit for bit, ~5x faster for FP8 with none/tensor/channel/token/group scales.

    Why: a Linear input is fake-quantized on every forward, and scaling.fake_quant's arithmetic rounding
    (frexp/ldexp, ~10 passes) costs about as much as the matmul itself on a CPU. torch's own float8 cast
    is round-to-nearest-even with subnormals, i.e. the same rounding; it differs only on overflow (NaN for
    E4M3, Inf for E5M2), so we clamp to +-fmt.max first, which is what `saturate=True` does. The scale rule is
    scaling's: s = amax / fmt.max in fp32, 1.0 where that is not > 0, then round(x / s) * s.
    tests/test_recipes.py checks equality with scaling.fake_quant on several distributions; anything else
    (INT8, E2M1, block/nvfp4/mx scales, non-float32 input) goes to scaling.fake_quant itself.

    Non-finite input raises, as scaling's default does: a NaN or Inf makes the amax non-finite, so the check
    costs one scalar comparison.
    """
    g = spec.granularity
    if spec.fmt not in _TORCH_FP8 or g not in _FAST or x.dtype != torch.float32 or x.numel() == 0:
        return fake_quant(x, spec)
    fmax = spec.format.max
    dt = _TORCH_FP8[spec.fmt]
    a = x.abs()
    if g == "none":
        if not torch.isfinite(a.amax()):
            raise ValueError("fake_quant input holds NaN or Inf values")
        return x.clamp(-fmax, fmax).to(dt).to(torch.float32)
    if g == "tensor":
        amax = a.amax()
    elif g == "token":
        amax = a.amax(dim=-1, keepdim=True)
    elif g == "channel":   # one scale per index along `axis`
        ax = spec.axis % x.dim()
        dims = [d for d in range(x.dim()) if d != ax]
        amax = a.amax(dim=dims, keepdim=True) if dims else a
    else:  # group: 1 x G along the last dim; a partial last group uses the elements that exist
        G, K = spec.block_len, x.shape[-1]
        pad = (-K) % G
        ag = torch.nn.functional.pad(a, (0, pad)) if pad else a
        amax = ag.reshape(*ag.shape[:-1], -1, G).amax(dim=-1).repeat_interleave(G, dim=-1)[..., :K]
    if not bool(torch.isfinite(amax).all()):
        raise ValueError("fake_quant input holds NaN or Inf values")
    s = amax / torch.tensor(fmax, dtype=torch.float32)
    s = torch.where(s > 0, s, torch.ones_like(s))
    return (x / s).clamp(-fmax, fmax).to(dt).to(torch.float32) * s


def _quantizer(slot: Slot) -> Callable[[torch.Tensor], torch.Tensor]:
    if slot == "bf16":
        return bf16_round
    if isinstance(slot, QuantSpec):
        return lambda x: fast_fake_quant(x, slot)
    raise RecipeError(f"bad recipe slot {slot!r}")


def kv_fake_quant(x: torch.Tensor, spec: Slot) -> torch.Tensor:
    """Fake-quantize a key or value tensor laid out as attention reads it: [batch, kv_heads, seq, head_dim].

    "channel" means one scale per (kv head, dim) pair over every token and sequence: the tensor is viewed as
    [heads*dim, batch*seq] and scaled per row (axis 0).
    """
    if isinstance(spec, QuantSpec) and spec.granularity == "channel":
        b, h, s, d = x.shape
        rows = x.permute(1, 3, 0, 2).reshape(h * d, b * s)
        q = fast_fake_quant(rows, spec)
        return q.reshape(h, d, b, s).permute(2, 0, 3, 1).contiguous()
    return _quantizer(spec)(x)


# ---- the KV hook: a wrapper registered in transformers' attention interface ---------------------------
_KV_PREFIX = "fp8lab_kv_"


def _ensure_kv_wrapper(inner: str) -> str:
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    name = _KV_PREFIX + inner
    if name in ALL_ATTENTION_FUNCTIONS._global_mapping:
        return name
    if inner == "eager":
        inner_fn = None      # eager is the module's own default, looked up per call (see below)
    elif inner in ALL_ATTENTION_FUNCTIONS._global_mapping:
        inner_fn = ALL_ATTENTION_FUNCTIONS._global_mapping[inner]
    else:
        raise RecipeError(f"cannot wrap attention implementation {inner!r} for KV quantization")

    def attention(module, query, key, value, attention_mask, **kwargs):
        st = getattr(module, "_fp8lab_kv", None)
        if st is not None:
            key = kv_fake_quant(key, st["key"]) if st["key"] is not None else key
            value = kv_fake_quant(value, st["value"]) if st["value"] is not None else value
            if st.get("capture") is not None:       # tests read back what the attention really saw
                st["capture"].append((key.detach().clone(), value.detach().clone()))
        fn = inner_fn
        if fn is None:    # the eager function lives in the model's own modeling file
            import sys
            fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward")
        return fn(module, query, key, value, attention_mask, **kwargs)

    ALL_ATTENTION_FUNCTIONS.register(name, attention)
    mask_fn = ALL_MASK_ATTENTION_FUNCTIONS._global_mapping.get(inner)
    if mask_fn is not None:
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, mask_fn)
    return name


def _attention_modules(model: nn.Module):
    """Modules that call the attention interface: they have k_proj and v_proj and a config."""
    return [m for m in model.modules() if hasattr(m, "k_proj") and hasattr(m, "v_proj")
            and hasattr(m, "config")]


# ---- apply / remove -------------------------------------------------------------------------------------
class _ActHook:
    def __init__(self, q):
        self.q = q
        self.last_in = None
        self.last_ver = None
        self.last_out = None

    def __call__(self, module, args):
        x = args[0]
        # q/k/v (and gate/up) receive the very same tensor: quantize it once. Holding a reference to it
        # keeps its id from being reused; _version changes if anyone modified it in place.
        if x is self.last_in and x._version == self.last_ver:
            y = self.last_out
        else:
            y = self.q(x)
            self.last_in, self.last_ver, self.last_out = x, x._version, y
        return (y,) + tuple(args[1:])

    def clear(self):
        self.last_in = self.last_out = None


@dataclass
class _Applied:
    recipe: Recipe
    weights: list          # (module, attr, original Parameter)
    handles: list
    act_hook: object
    attn: list             # (config, original implementation name)
    kv_modules: list


def _linears(model: nn.Module, recipe: Recipe):
    out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            if m is out_emb and not recipe.include_lm_head:
                continue
            yield name, m


def apply_recipe(model: nn.Module, recipe: Recipe | str) -> _Applied:
    """Fake-quantize `model` in place according to `recipe`; returns the handle `remove_recipe` needs."""
    recipe = get_recipe(recipe) if isinstance(recipe, str) else recipe
    if getattr(model, "_fp8lab_applied", None) is not None:
        raise RecipeError(f"recipe {model._fp8lab_applied.recipe.name!r} is already applied; remove it first")
    st = _Applied(recipe, [], [], None, [], [])
    try:
        with torch.no_grad():
            if recipe.weight is not None:
                qw = _quantizer(recipe.weight)
                targets = [m for _, m in _linears(model, recipe)]
                if recipe.include_embeddings:
                    targets.append(model.get_input_embeddings())
                for m in targets:
                    orig = m.weight
                    m.weight = nn.Parameter(qw(orig.detach()).to(orig.dtype), requires_grad=False)
                    st.weights.append((m, orig))
            if recipe.act is not None:
                st.act_hook = _ActHook(_quantizer(recipe.act))
                for _, m in _linears(model, recipe):
                    st.handles.append(m.register_forward_pre_hook(st.act_hook))
                # the cache of the last input must not outlive a forward (frees memory, no stale reuse)
                st.handles.append(model.register_forward_hook(lambda *a: st.act_hook.clear()))
            if recipe.key is not None or recipe.value is not None:
                mods = _attention_modules(model)
                if not mods:
                    raise RecipeError(f"{type(model).__name__}: found no attention modules with k_proj/v_proj")
                seen = set()
                for m in mods:
                    cfg = m.config
                    if id(cfg) not in seen:
                        seen.add(id(cfg))
                        inner = cfg._attn_implementation or "eager"
                        if inner.startswith(_KV_PREFIX):
                            raise RecipeError("a KV wrapper is already installed on this model")
                        st.attn.append((cfg, inner))
                        cfg._attn_implementation = _ensure_kv_wrapper(inner)
                    m._fp8lab_kv = {"key": recipe.key, "value": recipe.value, "capture": None}
                    st.kv_modules.append(m)
                # the top-level config decides how masks are built; keep it in step with the layers'
                top = model.config
                if id(top) not in seen:
                    inner = top._attn_implementation or "eager"
                    st.attn.append((top, inner))
                    top._attn_implementation = _ensure_kv_wrapper(inner)
    except Exception:
        _undo(st)
        raise
    model._fp8lab_applied = st
    return st


def _undo(st: _Applied):
    for h in st.handles:
        h.remove()
    for m, orig in reversed(st.weights):
        m.weight = orig
    for cfg, inner in reversed(st.attn):
        cfg._attn_implementation = inner
    for m in st.kv_modules:
        if hasattr(m, "_fp8lab_kv"):
            del m._fp8lab_kv
    if st.act_hook is not None:
        st.act_hook.clear()


def remove_recipe(model: nn.Module) -> None:
    """Undo `apply_recipe`: original Parameter objects back, hooks removed, attention implementation restored."""
    st = getattr(model, "_fp8lab_applied", None)
    if st is None:
        return
    _undo(st)
    model._fp8lab_applied = None


@contextmanager
def applied(model: nn.Module, recipe: Recipe | str):
    apply_recipe(model, recipe)
    try:
        yield model
    finally:
        remove_recipe(model)
