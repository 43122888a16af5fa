"""Recipes: which tensors of a transformers causal LM go through which format, at which granularity.

A recipe has up to four slots, each a `QuantSpec` from fp8lab.scaling (or "bf16" for plain bf16 rounding):

    weight  every nn.Linear weight, quantized once when the recipe is applied (static, like a checkpoint)
    act     the input of every nn.Linear, quantized on every call (dynamic scale, like a serving engine)
    key     the keys the attention reads: AFTER RoPE, after the cache update, i.e. what an FP8 KV cache holds
    value   the values the attention reads

lm_head and the token embeddings are left alone unless `include_lm_head` / `include_embeddings` are set.

Parts of a model (the sensitivity map and mixed-precision assignments): `weight_map` is an ordered tuple of
(regex, slot) pairs; the first regex that matches a Linear's qualified name (re.search) gives that Linear's
weight slot instead of `weight` (None: leave it alone). `kv_layers` limits the KV slots to those layer indices.

    >>> Recipe("l3-e4m3", "layer 3 only", weight_map=((r"[.]layers[.]3[.]", _E4T),))   # one layer's Linears
    >>> Recipe("kv-l0", "layer 0's cache only", key=_E4T, value=_E4T, kv_layers=(0,))

    >>> with applied(model, get_recipe("e4m3-wakv-tok")):
    ...     logits = model(ids).logits           # fake-quantized forward
    >>> # here the model is bit-identical to before: original Parameters and attention restored, hooks gone
    >>> get_recipe("e4m3-wakv").causal, get_recipe("e4m3-wakv").why
    (False, 'oracle: one activation scale per Linear input over the whole window (future tokens included)')

Causal or oracle. Perplexity scores every position of a window in one forward. A scale computed from the
whole forward -- per tensor or per channel over all tokens -- lets position 10 be rounded with a scale that
already knows the maximum of position 400: no decoder generating token by token can do that. Such recipes
are **oracles**: a reference, not a method -- and not a bound either (one scale over the window is coarser
than one per token, so an oracle can cost more than its causal counterpart). A recipe is **causal** (a serving
engine could run it) when every scale is fixed before the tokens arrive (weights; a calibrated-then-frozen KV
scale; scale 1.0) or is computed from one token alone (dynamic per-token / per-group scales along the hidden or
head dimension).
`Recipe.causal` and `Recipe.why` are derived from the slots by `causality()`, so they cannot drift from
what the recipe does; each oracle recipe has a causal counterpart (`-tok`: per-token scales).

How the pieces are attached, and why:
  * weights: each Linear's `weight` attribute is pointed at a new Parameter holding fake_quant(W); the
    original Parameter object is kept and put back on removal (so nothing is copied back and bits cannot
    drift, and a weight tied to the embedding stays tied).
  * activations: a forward pre-hook on each Linear. q/k/v (and gate/up) read the same tensor; the hook
    remembers the last input object and reuses its result, so a per-tensor scale is not computed 3 times.
  * KV: fp8lab.kv_hook runs a function on key/value where the attention reads them (after RoPE).

KV granularity: "tensor" = one dynamic scale per layer per forward over all heads and tokens (an oracle
for a calibrated static per-layer scale: it always fits this forward's max); "channel" = one scale per
(kv head, head dim) channel over all tokens (K outliers are channel-structured; also an oracle);
"token" = one scale per (token, kv head) over head_dim (causal: vLLM-style dynamic per-token KV).

Dynamic scales see the whole forward batch: with batched lm-eval requests (right-padded, sorted by length)
one per-tensor scale covers every sequence of the batch, as in a serving engine that batches requests.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Union

import torch
from torch import nn

from fp8lab import kv_hook
from fp8lab.calibration import OnlineKVCalibration, static_fake_quant
from fp8lab.formats import bf16_round
from fp8lab.kv_quant import kv4_slot
from fp8lab.scaling import QuantSpec, fake_quant

__all__ = ["Recipe", "KVFunctions", "install_kv_functions", "RECIPES", "ALIASES", "RecipeError", "get_recipe",
           "apply_recipe", "remove_recipe", "applied", "list_recipes", "kv_fake_quant", "causality",
           "recipe_formats", "SEED003_RECIPES", "CAUSAL_COUNTERPART"]


@dataclass(frozen=True)
class KVFunctions:
    """A key/value slot given as per-layer functions, for static (calibrated) KV scales.

    `new()` is called once each time the recipe is applied and returns `make(layer_idx, "key"|"value")`,
    which returns the function applied to that layer's keys or values ([batch, kv_heads, seq, head_dim]).
    Fresh state per application: a calibrated recipe re-calibrates every time it is applied.
    `causal` must be declared (the functions are opaque): None reads as "not declared", i.e. not causal.
    """

    new: Callable
    label: str = ""
    causal: bool | None = None
    why: str = ""
    fmt: str = ""


Slot = Union[QuantSpec, str, KVFunctions, None]   # a QuantSpec, "bf16", KVFunctions, or None (leave alone)


class RecipeError(ValueError):
    """Unknown recipe name or a recipe that does not fit the model."""


# Granularities whose scale is computed along the last (hidden / head) dimension of ONE token: causal.
_PER_TOKEN = ("none", "token", "group", "nvfp4", "mx")


_NAMES = {"act": "Linear inputs", "key": "keys", "value": "values"}


def _slot_causality(slot: Slot, where: str) -> tuple[bool, str]:
    """(causal, reason) of one slot; reasons of the same kind are merged by `causality`."""
    if slot == "bf16":
        return True, "bf16 rounding, no scale"
    if isinstance(slot, KVFunctions):
        if slot.causal is None:
            return False, f"{_NAMES[where]}: causality not declared ({slot.label or 'custom functions'})"
        return bool(slot.causal), slot.why or slot.label
    if not isinstance(slot, QuantSpec):
        raise RecipeError(f"bad recipe slot {slot!r}")
    g = slot.granularity
    if where == "weight":
        return True, "weights are quantized once, before any token is seen"
    if g == "none":
        return True, "no scales: each value is rounded on its own"
    if g in _PER_TOKEN:
        return True, f"{'per-token' if g == 'token' else g} scales from each token alone for %s"
    what = {"act": "activation scale per Linear input", "key": "key scale", "value": "value scale"}[where]
    span = {"tensor": "over the whole window", "channel": "per channel over every token of the window",
            "block": "per block spanning several tokens"}.get(g, f"({g}) over several tokens")
    return False, f"oracle: one {what} {span} (future tokens included)"


def causality(recipe: "Recipe") -> tuple[bool, str]:
    """(causal, one-line reason) from a recipe's slots: an oracle if any slot's scale spans tokens.

    causality(get_recipe("e4m3-wakv-tok")) -> (True, "static weights; per-token scales from each token alone
    for Linear inputs, keys, values")"""
    slots = [(w, s) for w, s in (("weight", recipe.weight), ("act", recipe.act), ("key", recipe.key),
                                 ("value", recipe.value)) if s is not None]
    if not slots:
        return True, "nothing is quantized"
    res = [(w, *_slot_causality(s, w)) for w, s in slots]
    oracle = [why for _, ok, why in res if not ok]
    if oracle:
        return False, oracle[0]
    merged: dict[str, list[str]] = {}
    for w, _, why in res:
        merged.setdefault(why, []).append(_NAMES.get(w, w))
    whys = [why % ", ".join(ws) if "%s" in why else why for why, ws in merged.items()]
    if len(whys) > 1 and whys[0].startswith("weights"):
        whys[0] = "static weights"
    return True, "; ".join(whys)


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
    weight_map: tuple = ()                  # ((regex over the Linear's name, slot), ...): first match wins
    kv_layers: tuple | None = None          # layer indices whose keys/values are quantized; None = all
    # transform(model) -> undo: installed before anything is quantized (SmoothQuant, a rotation, static input
    # scales; fp8lab.outliers / fp8lab.activation_scaling), undone after everything else is removed
    transform: Callable | None = field(default=None, compare=False)
    causal: bool = field(default=None, compare=False)    # derived from the slots (see `causality`)
    why: str = field(default="", compare=False)          # the one-line reason

    def __post_init__(self):
        c, why = causality(self)
        object.__setattr__(self, "causal", c)
        object.__setattr__(self, "why", why)

    @property
    def is_baseline(self) -> bool:
        return (self.weight is None and not self.weight_map and self.act is None and self.key is None
                and self.value is None and self.transform is None)

    def weight_slot(self, linear_name: str) -> Slot:
        """The weight slot of the Linear called `linear_name`: the first matching `weight_map` entry, else `weight`."""
        for pattern, slot in self.weight_map:
            if re.search(pattern, linear_name):
                return slot
        return self.weight


def _S(fmt, gran, **kw) -> QuantSpec:
    return QuantSpec(fmt=fmt, granularity=gran, **kw)


_E4T, _E5T, _E4TOK, _E5TOK = _S("e4m3", "tensor"), _S("e5m2", "tensor"), _S("e4m3", "token"), _S("e5m2", "token")
_E4N = _S("e4m3", "none")


def _online(n_tokens: int, granularity: str = "tensor", fmt: str = "e4m3") -> KVFunctions:
    return KVFunctions(lambda: OnlineKVCalibration(n_tokens, granularity, fmt).make,
                       f"{fmt} calibrated on {n_tokens} tokens per {granularity}", causal=True,
                       why=f"KV scales calibrated on the first {n_tokens} tokens, then frozen", fmt=fmt)


def _unit_scale(fmt: str = "e4m3") -> KVFunctions:
    one = torch.tensor(1.0)
    return KVFunctions(lambda: (lambda layer, which: (lambda x: static_fake_quant(x, one, fmt))),
                       f"{fmt} scale 1.0", causal=True, why="fixed KV scale 1.0", fmt=fmt)


_UNCAL, _CAL256, _CAL256CH = _unit_scale("e4m3"), _online(256), _online(256, "channel")

RECIPES: dict[str, Recipe] = {r.name: r for r in [
    Recipe("baseline", "the model as loaded, float32 compute; every delta is against this"),
    Recipe("bf16", "weights and Linear inputs rounded to bf16 (RNE), float32 accumulate", "bf16", "bf16"),
    Recipe("e4m3-w", "E4M3 weights, one scale per weight tensor", _E4T),
    Recipe("e4m3-wa", "E4M3 weights + Linear inputs, per-tensor scales (dynamic for inputs)", _E4T, _E4T),
    Recipe("e4m3-wa-tok", "E4M3 weights (per tensor) + Linear inputs with dynamic per-token scales", _E4T, _E4TOK),
    Recipe("e4m3-wakv", "e4m3-wa + E4M3 keys (after RoPE) and values, per-tensor dynamic scales",
           _E4T, _E4T, _E4T, _E4T),
    Recipe("e4m3-wakv-tok", "e4m3-wa-tok + E4M3 keys (after RoPE) and values, dynamic per-token-and-head "
           "scales", _E4T, _E4TOK, _E4TOK, _E4TOK),
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
    Recipe("e4m3-kv-tok", "E4M3 keys and values only, dynamic per-token-and-head scales", key=_E4TOK,
           value=_E4TOK),
    Recipe("e5m2-kv", "E5M2 keys (after RoPE) and values only, per-tensor dynamic scale per layer",
           key=_E5T, value=_E5T),
    Recipe("e5m2-kv-tok", "E5M2 keys and values only, dynamic per-token-and-head scales", key=_E5TOK,
           value=_E5TOK),
    Recipe("int8-w", "INT8 weights, symmetric, one scale per output channel", _S("int8", "channel", axis=0)),
    # Static KV scales (fp8lab.calibration): what a serving engine actually stores the cache with.
    Recipe("e4m3-kv-uncal", "E4M3 keys and values with k_scale = v_scale = 1.0 (vLLM's default without "
           "checkpoint scales)", key=_UNCAL, value=_UNCAL),
    Recipe("e4m3-kv-cal256", "E4M3 keys and values, per-layer scales from max |K|, |V| over the first 256 "
           "tokens the model sees, then frozen (online calibration)", key=_CAL256, value=_CAL256),
    Recipe("e4m3-kv-cal256-channel", "E4M3 keys and values, per-(kv head, dim) channel scales from the first "
           "256 tokens the model sees, then frozen", key=_CAL256CH, value=_CAL256CH),
    # ---- 4-bit KV caches (fp8lab.kv_quant; measured by `python -m fp8lab.kv_bits`) ----------------------------
    # Causal: each token's codes depend on that token alone; the per-layer constants (NVFP4's global scale,
    # turbo4's codebook) come from the first 256 tokens the model sees, then freeze (a calibration pass, as in
    # e4m3-kv-cal256). 4.5 bits per element each: NVFP4 4 + 8/16, turbo4 4 + 16/32.
    Recipe("nvfp4-kv", "NVFP4 keys and values: E2M1 in 16-blocks along head_dim, E4M3 block scales, global "
           "scale frozen after 256 tokens; 4.5 bits/element",
           key=KVFunctions(**kv4_slot("nvfp4")), value=KVFunctions(**kv4_slot("nvfp4"))),
    *(Recipe(f"nvfp4-kv-hp{n}", f"nvfp4-kv, but the K/V of the first {n} and the last {n} layers stay in high "
             f"precision (seed 002's --kv-high-precision-layers {n})",
             key=KVFunctions(**kv4_slot("nvfp4", keep_ends=n)), value=KVFunctions(**kv4_slot("nvfp4", keep_ends=n)))
      for n in (1, 2, 4)),
    Recipe("turbo4-kv", "K/V rotated by a randomised Hadamard transform, 16-level Lloyd-Max codebook fitted on "
           "256 tokens, fp16 RMS per 32 coordinates; 4.5 bits/element",
           key=KVFunctions(**kv4_slot("turbo4")), value=KVFunctions(**kv4_slot("turbo4"))),
    Recipe("turbo4-kv-gauss", "turbo4-kv with the Lloyd-Max levels of a standard normal: no calibration at all; "
           "4.5 bits/element",
           key=KVFunctions(**kv4_slot("turbo4-gauss")), value=KVFunctions(**kv4_slot("turbo4-gauss"))),
]}


# ---- activation scaling and outliers (fp8lab.activation_scaling, fp8lab.outliers; notebook 11) ------------------
# Calibrated transforms run when the recipe is applied, on 8 x 512 tokens of SciQ support passages: a corpus no lab
# task scores, so the scales never see the text they are scored on.
def _act_transform(kind: str, fmt: str = "e4m3"):
    def transform(model):
        from fp8lab.activation_scaling import recipe_transform
        return recipe_transform(kind, fmt)(model)
    return transform


_NV4 = _S("e2m1", "nvfp4")
RECIPES.update({r.name: r for r in [
    Recipe("e4m3-wa-static", "E4M3 weights per tensor + Linear inputs with static per-tensor scales calibrated "
           "on held-out SciQ text, then frozen (causal)", _E4T, transform=_act_transform("static")),
    Recipe("e4m3-wa-delayed", "E4M3 weights per tensor + Linear inputs with delayed scaling: max amax of the last "
           "16 forwards, primed on held-out SciQ text (causal)", _E4T, transform=_act_transform("delayed")),
    Recipe("e4m3-wa-static-smoothquant", "e4m3-wa-static after SmoothQuant (alpha 0.5 on the q/k/v, gate/up and "
           "down inputs, calibrated on held-out SciQ text) (causal)", _E4T,
           transform=_act_transform("smoothquant+static")),
    Recipe("e4m3-wa-static-hadamard", "e4m3-wa-static after a randomized Hadamard rotation of every Linear input "
           "and weight (causal)", _E4T, transform=_act_transform("hadamard+static")),
    Recipe("nvfp4-wa-static", "NVFP4 weights + NVFP4 Linear inputs: dynamic 16-blocks, FP32 global scale "
           "calibrated on held-out SciQ text (causal)", _NV4, transform=_act_transform("static", "nvfp4")),
    Recipe("nvfp4-wa-static-hadamard", "nvfp4-wa-static after a randomized Hadamard rotation of every Linear "
           "input and weight (causal)", _NV4, transform=_act_transform("hadamard+static", "nvfp4")),
]})
ALIASES = {"fp32": "baseline", "none": "baseline"}
SEED003_RECIPES = ["baseline", "e4m3-w", "e4m3-wa", "e4m3-wakv", "e5m2-w", "e4m3-w-noscale",
                   "e4m3-wa-noscale"]
#: each oracle recipe and the causal recipe that answers the same question
CAUSAL_COUNTERPART = {"e4m3-wa": "e4m3-wa-tok", "e4m3-wakv": "e4m3-wakv-tok", "e4m3-kv": "e4m3-kv-tok",
                      "e4m3-kv-perchannel": "e4m3-kv-cal256-channel", "e5m2-kv": "e5m2-kv-tok"}


def get_recipe(name: str) -> Recipe:
    key = ALIASES.get(name, name)
    if key not in RECIPES:
        raise RecipeError(f"unknown recipe {name!r}; valid: {', '.join(RECIPES)}")
    return RECIPES[key]


def list_recipes() -> str:
    """One line per recipe: name, causal or ORACLE, description, and (in brackets) why it is causal or not.

    e4m3-wa      ORACLE  E4M3 weights + Linear inputs, per-tensor scales (dynamic for inputs) [oracle: one ...]
    """
    w = max(map(len, RECIPES))
    return "\n".join(f"{r.name:<{w}}  {'causal' if r.causal else 'ORACLE':<6}  {r.description} [{r.why}]"
                     for r in RECIPES.values())


def recipe_formats(name: str) -> list[str]:
    """The element formats a recipe stores tensors in: recipe_formats("w8a8-block") -> ["e4m3"]."""
    r = get_recipe(name)
    out = []
    for s in (r.weight, r.act, r.key, r.value):
        f = s.fmt if isinstance(s, QuantSpec) else ("bf16" if s == "bf16" else getattr(s, "fmt", "") or None)
        if isinstance(s, QuantSpec) and s.granularity in ("nvfp4", "mx"):
            f = ("nvfp4" if s.granularity == "nvfp4" else "mx" + s.fmt.replace("e2m1", "fp4"))
        if f and f not in out:
            out.append(f)
    return out


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
    [heads*dim, batch*seq] and scaled per row (axis 0). "token" is one scale per (batch, kv head, token) row
    over head_dim: the last dimension, as `fake_quant` defines it.
    """
    if isinstance(spec, QuantSpec) and spec.granularity == "channel":
        b, h, s, d = x.shape
        rows = x.permute(1, 3, 0, 2).reshape(h * d, b * s)
        q = fake_quant(rows, spec)
        return q.reshape(h, d, b, s).permute(2, 0, 3, 1).contiguous()
    return _quantizer(spec)(x)


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
    weights: list          # (module, original Parameter)
    handles: list
    act_hook: object
    kv: kv_hook.KVInstall | None = None
    undo_transform: object = None


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
    st = _Applied(recipe, [], [], None)
    try:
        with torch.no_grad():
            if recipe.transform is not None:
                st.undo_transform = recipe.transform(model)
            if recipe.weight is not None or recipe.weight_map:
                targets = [(recipe.weight_slot(n), m) for n, m in _linears(model, recipe)]
                if recipe.include_embeddings:
                    targets.append((recipe.weight, model.get_input_embeddings()))
                for slot, m in targets:
                    if slot is None:
                        continue
                    orig = m.weight
                    m.weight = nn.Parameter(_quantizer(slot)(orig.detach()).to(orig.dtype), requires_grad=False)
                    st.weights.append((m, orig))
            if recipe.act is not None:
                st.act_hook = _ActHook(_quantizer(recipe.act))
                for _, m in _linears(model, recipe):
                    st.handles.append(m.register_forward_pre_hook(st.act_hook))
                # the cache of the last input must not outlive a forward (frees memory, no stale reuse)
                st.handles.append(model.register_forward_hook(lambda *a: st.act_hook.clear()))
            if recipe.key is not None or recipe.value is not None:
                makers = {id(sl): sl.new() for sl in (recipe.key, recipe.value) if isinstance(sl, KVFunctions)}

                def make(layer, which):
                    slot = recipe.key if which == "key" else recipe.value
                    if slot is None:
                        return None
                    if isinstance(slot, KVFunctions):
                        return makers[id(slot)](layer, which)
                    return lambda x: kv_fake_quant(x, slot)

                if recipe.kv_layers is not None:
                    have = {int(getattr(m, "layer_idx", 0) or 0) for m in kv_hook.attention_modules(model)}
                    if not set(recipe.kv_layers) <= have:
                        raise RecipeError(f"kv_layers {sorted(set(recipe.kv_layers) - have)} not among the "
                                          f"model's attention layers {sorted(have)}")
                    inner_make = make

                    def make(layer, which):         # noqa: F811 - the same, for the chosen layers only
                        return inner_make(layer, which) if layer in recipe.kv_layers else None

                try:
                    st.kv = kv_hook.install(model, make)
                except kv_hook.KVHookError as e:
                    raise RecipeError(str(e)) from None
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
    if st.kv is not None:
        kv_hook.uninstall(st.kv)
    if st.act_hook is not None:
        st.act_hook.clear()
    if st.undo_transform is not None:
        st.undo_transform()
        st.undo_transform = None


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


#: the hook of the KV recipes, open to any function (kept here for callers that found it in this module)
install_kv_functions = kv_hook.kv_functions
