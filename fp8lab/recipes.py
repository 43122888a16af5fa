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
from fp8lab.kv_quant import kv4_slot
from fp8lab.scaling import QuantSpec, fake_quant

__all__ = ["Recipe", "KVFunctions", "install_kv_functions", "RECIPES", "ALIASES", "RecipeError", "get_recipe", "apply_recipe", "remove_recipe",
           "applied", "list_recipes", "kv_fake_quant"]

@dataclass(frozen=True)
class KVFunctions:
    """A key/value slot given as per-layer functions, for static (calibrated) KV scales.

    `new()` is called once each time the recipe is applied and returns `make(layer_idx, "key"|"value")`,
    which returns the function applied to that layer's keys or values ([batch, kv_heads, seq, head_dim]).
    Fresh state per application: a calibrated recipe re-calibrates every time it is applied.
    """

    new: Callable
    label: str = ""


Slot = Union[QuantSpec, str, KVFunctions, None]   # a QuantSpec, "bf16", KVFunctions, or None (leave alone)


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

def _online(n_tokens: int, granularity: str = "tensor", fmt: str = "e4m3") -> KVFunctions:
    from fp8lab.calibration import OnlineKVCalibration
    return KVFunctions(lambda: OnlineKVCalibration(n_tokens, granularity, fmt).make,
                       f"{fmt} calibrated on {n_tokens} tokens per {granularity}")


def _unit_scale(fmt: str = "e4m3") -> KVFunctions:
    from fp8lab.calibration import static_fake_quant
    one = torch.tensor(1.0)
    return KVFunctions(lambda: (lambda layer, which: (lambda x: static_fake_quant(x, one, fmt))), f"{fmt} scale 1.0")


_UNCAL, _CAL256 = _unit_scale("e4m3"), _online(256)

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
    # Static KV scales (fp8lab.calibration): what a serving engine actually stores the cache with.
    Recipe("e4m3-kv-uncal", "E4M3 keys and values with k_scale = v_scale = 1.0 (vLLM's default without "
           "checkpoint scales)", key=_UNCAL, value=_UNCAL),
    Recipe("e4m3-kv-cal256", "E4M3 keys and values, per-layer scales from max |K|, |V| over the first 256 "
           "tokens the model sees, then frozen (online calibration)", key=_CAL256, value=_CAL256),
    # ---- 4-bit KV caches (fp8lab.kv_quant; measured by `python -m fp8lab.kv_bits`) ----------------------------
    # Causal: each token's codes depend on that token alone; the per-layer constants (NVFP4's global scale,
    # turbo4's codebook) come from the first 256 tokens the model sees, then freeze (a calibration pass, as in
    # e4m3-kv-cal256). 4.5 bits per element each: NVFP4 4 + 8/16, turbo4 4 + 16/32.
    Recipe("nvfp4-kv", "NVFP4 keys and values (causal): E2M1 in 16-blocks along head_dim, E4M3 block scales, "
           "global scale frozen after 256 tokens; 4.5 bits/element",
           key=KVFunctions(*kv4_slot("nvfp4")), value=KVFunctions(*kv4_slot("nvfp4"))),
    *(Recipe(f"nvfp4-kv-hp{n}", f"nvfp4-kv, but the first and last {n} layers' K/V stay in high precision "
             f"(seed 002's --kv-high-precision-layers {n}; causal)",
             key=KVFunctions(*kv4_slot("nvfp4", keep_ends=n)), value=KVFunctions(*kv4_slot("nvfp4", keep_ends=n)))
      for n in (1, 2, 4)),
    Recipe("turbo4-kv", "K/V rotated by a randomised Hadamard transform, 16-level Lloyd-Max codebook fitted on "
           "256 tokens, fp16 RMS per 32 coordinates (causal); 4.5 bits/element",
           key=KVFunctions(*kv4_slot("turbo4")), value=KVFunctions(*kv4_slot("turbo4"))),
    Recipe("turbo4-kv-gauss", "turbo4-kv with the Lloyd-Max levels of a standard normal: no calibration at all "
           "(causal); 4.5 bits/element",
           key=KVFunctions(*kv4_slot("turbo4-gauss")), value=KVFunctions(*kv4_slot("turbo4-gauss"))),
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
def _quantizer(slot: Slot) -> Callable[[torch.Tensor], torch.Tensor]:
    if slot == "bf16":
        return bf16_round
    if isinstance(slot, QuantSpec):
        return lambda x: fake_quant(x, slot)
    raise RecipeError(f"bad recipe slot {slot!r}")


def kv_fake_quant(x: torch.Tensor, spec: Slot) -> torch.Tensor:
    """Fake-quantize a key or value tensor laid out as attention reads it: [batch, kv_heads, seq, head_dim].

    "channel" means one scale per (kv head, dim) pair over every token and sequence: the tensor is viewed as
    [heads*dim, batch*seq] and scaled per row (axis 0).
    """
    if callable(spec) and not isinstance(spec, (QuantSpec, str)):
        return spec(x)          # a per-layer function installed from a KVFunctions slot
    if isinstance(spec, QuantSpec) and spec.granularity == "channel":
        b, h, s, d = x.shape
        rows = x.permute(1, 3, 0, 2).reshape(h * d, b * s)
        q = fake_quant(rows, spec)
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
                makers = {id(sl): sl.new() for sl in (recipe.key, recipe.value) if isinstance(sl, KVFunctions)}

                def resolve(slot, m, which):
                    if isinstance(slot, KVFunctions):
                        return makers[id(slot)](int(getattr(m, "layer_idx", 0) or 0), which)
                    return slot

                for m in mods:
                    cfg = m.config
                    if id(cfg) not in seen:
                        seen.add(id(cfg))
                        inner = cfg._attn_implementation or "eager"
                        if inner.startswith(_KV_PREFIX):
                            raise RecipeError("a KV wrapper is already installed on this model")
                        st.attn.append((cfg, inner))
                        cfg._attn_implementation = _ensure_kv_wrapper(inner)
                    m._fp8lab_kv = {"key": resolve(recipe.key, m, "key"), "value": resolve(recipe.value, m, "value"),
                                    "capture": None}
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


@contextmanager
def install_kv_functions(model: nn.Module, make: Callable):
    """Run the attention with `make(layer_idx, "key"|"value")(x)` applied to the keys (after RoPE) and values.

    The hook of the KV recipes, open to any function: fp8lab.calibration uses it to observe max |K|, |V|
    and to apply frozen scales.
    """
    fn = KVFunctions(lambda: make, "custom KV functions")
    with applied(model, Recipe("kv-functions", "per-layer functions on the keys and values", key=fn, value=fn)):
        yield model
