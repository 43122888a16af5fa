"""The KV hook: run a function on the keys and values exactly where the attention reads them.

What an FP8 KV cache holds are the keys AFTER RoPE and the values, after the cache update. transformers >= 5
calls attention through `ALL_ATTENTION_FUNCTIONS[config._attn_implementation]` with `key`/`value` already
rotated and concatenated with the cache. We register one wrapper per inner implementation
("fp8lab_kv_sdpa", "fp8lab_kv_eager") that applies per-layer functions to key/value and then calls the
original function, and switch the config to it. The mask function is registered under the same name, so
masks are built exactly as for the inner implementation.

    >>> make = lambda layer, which: (lambda x: x.round())          # any [B, H, S, D] -> [B, H, S, D]
    >>> with kv_functions(model, make):
    ...     model(ids)                       # every layer's attention reads rounded keys and values
    >>> # here the model is back as it was: attention implementation restored, state removed

Both fp8lab.recipes (the sweep's KV recipes) and fp8lab.calibration (observers, frozen scales) hook here;
this module knows nothing of formats or scales, so neither of them has to import the other for it.

Per attention module the installed state is `module._fp8lab_kv = {"key": f or None, "value": g or None,
"capture": None}`; set "capture" to a list to read back what the attention really saw (the tests do).
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

from torch import nn

__all__ = ["KVHookError", "KVInstall", "install", "uninstall", "kv_functions", "attention_modules"]

PREFIX = "fp8lab_kv_"


class KVHookError(ValueError):
    """The model has no attention modules to hook, or a hook is already installed."""


def _ensure_wrapper(inner: str) -> str:
    """Register (once per process) the wrapper around attention implementation `inner`; return its name."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    name = PREFIX + inner
    if name in ALL_ATTENTION_FUNCTIONS._global_mapping:
        return name
    if inner == "eager":
        inner_fn = None      # eager is the module's own default, looked up per call (see below)
    elif inner in ALL_ATTENTION_FUNCTIONS._global_mapping:
        inner_fn = ALL_ATTENTION_FUNCTIONS._global_mapping[inner]
    else:
        raise KVHookError(f"cannot wrap attention implementation {inner!r} for KV quantization")

    def attention(module, query, key, value, attention_mask, **kwargs):
        st = getattr(module, "_fp8lab_kv", None)
        if st is not None:
            key = st["key"](key) if st["key"] is not None else key
            value = st["value"](value) if st["value"] is not None else value
            if st.get("capture") is not None:
                st["capture"].append((key.detach().clone(), value.detach().clone()))
        fn = inner_fn
        if fn is None:    # the eager function lives in the model's own modeling file
            fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward")
        return fn(module, query, key, value, attention_mask, **kwargs)

    ALL_ATTENTION_FUNCTIONS.register(name, attention)
    mask_fn = ALL_MASK_ATTENTION_FUNCTIONS._global_mapping.get(inner)
    if mask_fn is not None:
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, mask_fn)
    return name


def attention_modules(model: nn.Module) -> list:
    """Modules that call the attention interface: they have k_proj and v_proj and a config."""
    return [m for m in model.modules() if hasattr(m, "k_proj") and hasattr(m, "v_proj") and hasattr(m, "config")]


@dataclass
class KVInstall:
    """What `install` changed, so that `uninstall` can put it back."""

    attn: list = field(default_factory=list)        # (config, original implementation name)
    modules: list = field(default_factory=list)


def install(model: nn.Module, make: Callable) -> KVInstall:
    """Apply `make(layer_idx, "key"|"value")` (a function, or None to leave that tensor alone) in every layer.

    `make` is called once per layer and tensor, here; the functions it returns run on every forward."""
    mods = attention_modules(model)
    if not mods:
        raise KVHookError(f"{type(model).__name__}: found no attention modules with k_proj/v_proj")
    st = KVInstall()
    seen = set()
    try:
        for m in mods:
            cfg = m.config
            if id(cfg) not in seen:
                seen.add(id(cfg))
                inner = cfg._attn_implementation or "eager"
                if inner.startswith(PREFIX):
                    raise KVHookError("a KV hook is already installed on this model")
                st.attn.append((cfg, inner))
                cfg._attn_implementation = _ensure_wrapper(inner)
            layer = int(getattr(m, "layer_idx", 0) or 0)
            m._fp8lab_kv = {"key": make(layer, "key"), "value": make(layer, "value"), "capture": None}
            st.modules.append(m)
        # the top-level config decides how masks are built; keep it in step with the layers'
        top = model.config
        if id(top) not in seen:
            inner = top._attn_implementation or "eager"
            st.attn.append((top, inner))
            top._attn_implementation = _ensure_wrapper(inner)
    except Exception:
        uninstall(st)
        raise
    return st


def uninstall(st: KVInstall) -> None:
    for cfg, inner in reversed(st.attn):
        cfg._attn_implementation = inner
    for m in st.modules:
        if hasattr(m, "_fp8lab_kv"):
            del m._fp8lab_kv
    st.attn.clear()
    st.modules.clear()


@contextmanager
def kv_functions(model: nn.Module, make: Callable):
    """`install` for the duration of a `with` block."""
    st = install(model, make)
    try:
        yield model
    finally:
        uninstall(st)
