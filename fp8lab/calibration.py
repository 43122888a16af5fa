"""KV-cache scale calibration: the static scales an FP8 KV cache is stored with, and where they come from.

An FP8 KV cache stores k_code = encode(k / k_scale) and reads k = decode(k_code) * k_scale. Serving engines
fix k_scale before decoding starts. Three ways to get it (seed 000, seed 004):

  * uncalibrated   k_scale = v_scale = 1.0 -- vLLM's default when a checkpoint ships no k_scale/v_scale
                   (seed 004 found none in 22 checkpoints). Keys/values are rounded as they are.
  * calibrated(N)  the online max |K| and max |V| over the first N tokens, per layer (per tensor, per kv
                   head, or per channel), frozen afterwards: scale = amax / fmt.max. A later token larger
                   than anything seen in the first N saturates at +-fmt.max * scale.
  * dynamic        a fresh scale for every token (per token, per head): the reference a static scale
                   cannot beat.

    obs = KVObserver(n_tokens=256, granularity="tensor")
    with observe_kv(model, obs):
        model(calibration_ids)                   # records max |K|, max |V| of the first 256 tokens
    scales = obs.scales("e4m3")                  # StaticKVScales: one k and v scale per layer
    with static_kv(model, scales):               # the attention now reads E4M3 K/V with those frozen scales
        model(ids)

Keys are observed and quantized where the attention reads them: after RoPE, after the cache update
(fp8lab.kv_hook, the same hook as the sweep's KV recipes in fp8lab.recipes).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from . import formats as _f
from .kv_hook import kv_functions
from .scaling import QuantSpec, fake_quant

GRANULARITIES = ("tensor", "head", "channel")


def _reduce_amax(x: torch.Tensor, granularity: str) -> torch.Tensor:
    """max |x| of a [B, H, S, D] tensor, kept as a broadcastable shape: [] / [1,H,1,1] / [1,H,1,D]."""
    a = x.detach().float().abs()
    if granularity == "tensor":
        return a.amax()
    if granularity == "head":
        return a.amax(dim=(0, 2, 3), keepdim=True)
    return a.amax(dim=(0, 2), keepdim=True)


@dataclass
class StaticKVScales:
    """Frozen per-layer scales: k[layer], v[layer] are tensors broadcastable to [B, H, S, D]."""

    fmt: str
    k: dict = field(default_factory=dict)
    v: dict = field(default_factory=dict)
    label: str = ""

    @classmethod
    def uncalibrated(cls, n_layers: int, fmt: str = "e4m3") -> "StaticKVScales":
        one = torch.tensor(1.0)
        return cls(fmt, {i: one for i in range(n_layers)}, {i: one for i in range(n_layers)}, "uncalibrated (scale 1.0)")

    def quantize(self, x: torch.Tensor, layer: int, which: str) -> torch.Tensor:
        """Fake-quantize with the frozen scale: round(x / s) * s, saturating at +-fmt.max * s."""
        table = self.k if which == "key" else self.v
        if layer not in table:
            raise KeyError(f"no {which} scale for layer {layer}: calibrated layers are {sorted(table)}")
        return static_fake_quant(x, table[layer], self.fmt)


def static_fake_quant(x: torch.Tensor, scale: torch.Tensor, fmt: str = "e4m3") -> torch.Tensor:
    """decode(encode(x / scale)) * scale with a given (frozen) scale; out-of-range values saturate.

    static_fake_quant(torch.tensor([1.0, 900.0]), torch.tensor(1.0)) -> [1.0, 448.0]   # 900 saturates
    """
    f = _f.get(fmt)
    s = scale.to(x.device, torch.float32)
    return (f.round(x.float() / s, saturate=True) * s).to(x.dtype)


def dynamic_fake_quant(x: torch.Tensor, fmt: str = "e4m3") -> torch.Tensor:
    """Per-token, per-head scales (one amax per [b, h, s] row of D values): the dynamic reference.

    This is `fake_quant` at "token" granularity (the last dimension is head_dim), the same call the sweep's
    `e4m3-kv-tok` recipe makes: one scale rule in the lab, fp8lab.scaling's."""
    return fake_quant(x, QuantSpec(fmt, "token"))


def scale_from_amax(amax: torch.Tensor, fmt: str = "e4m3") -> torch.Tensor:
    """A frozen scale from an observed max: amax / fmt.max, and 1.0 where that is not > 0.

    fp8lab.scaling's rule (an all-zero group keeps scale 1), applied to an amax seen earlier."""
    # a divisor on amax's own device: on CUDA a CPU 0-d divisor becomes a multiply by its reciprocal
    s = amax.float() / torch.tensor(_f.get(fmt).max, dtype=torch.float32, device=amax.device)
    return torch.where(s > 0, s, torch.ones_like(s))


class KVObserver:
    """Online max |K| and max |V| over the first `n_tokens` positions of each layer, then frozen."""

    def __init__(self, n_tokens: int, granularity: str = "tensor"):
        if n_tokens < 1:
            raise ValueError("n_tokens must be >= 1")
        if granularity not in GRANULARITIES:
            raise ValueError(f"unknown granularity {granularity!r}; valid: {', '.join(GRANULARITIES)}")
        self.n_tokens, self.granularity = int(n_tokens), granularity
        self.k_amax: dict[int, torch.Tensor] = {}
        self.v_amax: dict[int, torch.Tensor] = {}
        self.seen: dict[tuple, int] = {}

    def observe(self, layer: int, which: str, x: torch.Tensor) -> torch.Tensor:
        """Record x ([B, H, S, D]) if this layer has seen fewer than n_tokens positions; return x unchanged."""
        done = self.seen.get((layer, which), 0)
        take = min(self.n_tokens - done, x.shape[2])
        if take > 0:
            a = _reduce_amax(x[:, :, :take], self.granularity)
            store = self.k_amax if which == "key" else self.v_amax
            store[layer] = torch.maximum(store[layer], a) if layer in store else a
            self.seen[(layer, which)] = done + take
        return x

    def scales(self, fmt: str = "e4m3") -> StaticKVScales:
        if not self.k_amax:
            raise RuntimeError("nothing observed: run the model inside observe_kv(model, observer) first")
        return StaticKVScales(fmt, {i: scale_from_amax(a, fmt) for i, a in self.k_amax.items()},
                              {i: scale_from_amax(a, fmt) for i, a in self.v_amax.items()},
                              f"calibrated on {self.n_tokens} tokens, per {self.granularity}")


class OnlineKVCalibration:
    """Seed 000's `--fp8-kv-calibration-tokens N`: observe the first N tokens the model ever sees, then freeze.

    `make(layer, which)` returns the function for one layer's keys or values. Until a layer has seen N
    positions its scale comes from what it has seen so far (within one full-window forward the first call
    already covers positions 0..N-1); afterwards the scale is frozen for every later sequence.
    """

    def __init__(self, n_tokens: int, granularity: str = "tensor", fmt: str = "e4m3"):
        self.observer = KVObserver(n_tokens, granularity)
        self.fmt = fmt

    def make(self, layer: int, which: str):
        def apply(x: torch.Tensor) -> torch.Tensor:
            self.observer.observe(layer, which, x)
            store = self.observer.k_amax if which == "key" else self.observer.v_amax
            return static_fake_quant(x, scale_from_amax(store[layer], self.fmt), self.fmt)

        return apply


_kv_functions = kv_functions      # the attention hook (fp8lab.kv_hook), shared with the sweep's KV recipes


@contextmanager
def observe_kv(model, observer: KVObserver):
    """Run the model inside this context to let `observer` see the keys (after RoPE) and values."""
    with _kv_functions(model, lambda layer, which: (lambda x: observer.observe(layer, which, x))):
        yield observer


@contextmanager
def static_kv(model, scales: StaticKVScales):
    """The attention reads K/V fake-quantized with frozen per-layer scales (an FP8 cache with static scales)."""
    with _kv_functions(model, lambda layer, which: (lambda x: scales.quantize(x, layer, which))):
        yield model


@contextmanager
def dynamic_kv(model, fmt: str = "e4m3"):
    """The attention reads K/V fake-quantized with per-token, per-head scales."""
    with _kv_functions(model, lambda layer, which: (lambda x: dynamic_fake_quant(x, fmt))):
        yield model
