"""How a Linear input gets its scale -- static, dynamic or delayed -- and which of these a server can really do.

Weights are quantized once, offline. Activations arrive at run time, so their scale is either fixed beforehand or
computed from data the kernel has when it runs:

    static      amax calibrated on held-out windows, frozen:  scale = amax / fmt.max; larger values saturate
    dynamic     amax of the tensor being quantized, per tensor, per token (row), or per 1 x 128 group of a token
    delayed     amax HISTORY of earlier forwards (TransformerEngine's recipe, fp8lab.scaling.DelayedScaling):
                scale = max(last h amaxes) / fmt.max; the current tensor's amax is recorded after it is cast

**What is causal, precisely.** A perplexity run scores every position of a window in one forward: position t
predicts token t+1 from tokens <= t. A scale is *causal* if the numbers at position t depend only on tokens <= t.
  * per-token and 1 x 128-group dynamic scales: each token's scale comes from that token alone. Causal, at prefill
    and at decode.
  * static and delayed scales: fixed before the forward (calibration windows, earlier forwards). Causal. (The
    delayed history here is primed with the calibration windows, so the first test window already has one.)
  * per-tensor dynamic over the forward: the scale is the max over *all* positions of the window, so position t
    is quantized with a scale that saw tokens t+1, t+2, ... -- including the token it is scored on. For scoring
    it is an oracle (a small one: one number per tensor leaks). For a server it is causal at decode (one token per
    forward: it *is* per-token) and for a prompt prefill (the whole prompt is known; the first generated token
    depends only on it), but then it depends on how the prompt was chunked and on other requests in the batch.
  * NVFP4 activations: the 16-element block scales are per token (causal); the FP32 global scale is dynamic per
    tensor in `fake_quant` (oracle for scoring) or calibrated (`nvfp4_static_global`, causal, what deployments do).

Transforms (`outliers` protocol: `transform(model) -> undo`) that install quantizers on every Linear input:

    undo = StaticInputQuant(stats.static_amax(), "e4m3")(model)     # frozen per-Linear scales
    undo = DelayedInputQuant(stats.amax, history_len=16)(model)     # history primed from calibration forwards
    static_transform("e4m3")        # the same, calibrating on held-out text first (what the sweep's recipes use)
"""
from __future__ import annotations

import torch
from torch import nn

from . import formats as _f
from .calibration import static_fake_quant
from .outliers import InputMap, calibrated, install_input_maps, linear_modules
from .scaling import DelayedScaling, QuantSpec, dequantize, fake_quant

__all__ = ["nvfp4_static_global", "StaticInputQuant", "DelayedInputQuant", "static_transform", "delayed_transform",
           "STRATEGIES", "RECIPE_TRANSFORMS", "recipe_transform"]

_NVFP4 = QuantSpec("e2m1", "nvfp4")

#: the activation-scaling strategies of notebook 11: name -> (act slot or transform kind, causal?, description)
STRATEGIES = {
    "static": ("static", True, "per-tensor scale calibrated on held-out windows, then frozen"),
    "dynamic-tensor": (QuantSpec("e4m3", "tensor"), False,
                       "per-tensor scale from the current forward (scoring: sees later tokens -- an oracle)"),
    "dynamic-token": (QuantSpec("e4m3", "token"), True, "one scale per token, from that token"),
    "dynamic-group128": (QuantSpec("e4m3", "group", group_size=128), True,
                         "one scale per 1 x 128 group of each token (DeepSeek-V3's activations)"),
    "delayed": ("delayed", True, "per-tensor scale from the max of the last 16 forwards' amax (primed on "
                "the calibration windows)"),
}


def nvfp4_static_global(x: torch.Tensor, amax: float) -> torch.Tensor:
    """NVFP4 fake-quant with a *given* global amax (a calibrated FP32 global scale) instead of the tensor's own.

    Built from fp8lab.scaling's one NVFP4 rule: x is clamped to +-amax and a row holding `amax` is appended, so
    the tensor's amax -- and hence the global scale amax / (448 * 6) -- is exactly the calibrated one; the row is
    dropped afterwards (blocks never span rows). Clamping first is what the static scale does anyway: a block
    whose max exceeds amax gets its E4M3 block scale saturated at 448, i.e. the same s = amax / 6, and the
    element saturates at 6 * s = amax.
    """
    if not amax > 0:
        return fake_quant(x, _NVFP4)
    K = x.shape[-1]
    rows = x.float().clamp(-amax, amax).reshape(-1, K)
    extra = torch.zeros(1, K)
    extra[0, 0] = amax
    y = fake_quant(torch.cat([rows, extra]), _NVFP4)[:-1]
    return y.reshape(x.shape).to(x.dtype)


def _static_fn(fmt: str, amax: float):
    if fmt == "nvfp4":
        return lambda x: nvfp4_static_global(x, amax)
    f = _f.get(fmt)
    scale = torch.tensor(amax / f.max if amax > 0 else 1.0, dtype=torch.float32)
    return lambda x: static_fake_quant(x, scale, fmt)


class StaticInputQuant:
    """Quantize every Linear input with a frozen per-Linear scale from `amax` (name -> float): fmt e4m3, e5m2, int8
    (scale = amax / fmt.max, saturating) or nvfp4 (calibrated global scale, dynamic 16-blocks)."""

    def __init__(self, amax: dict[str, float], fmt: str = "e4m3"):
        if fmt != "nvfp4":
            _f.get(fmt)
        self.amax, self.fmt = amax, fmt

    def __call__(self, model: nn.Module):
        mods = linear_modules(model)
        missing = [n for n in mods if n not in self.amax]
        if missing:
            raise KeyError(f"no calibrated amax for {missing[:3]}: calibrate on this model first")
        by_value: dict[float, InputMap] = {}     # q/k/v read one tensor with one amax: one hook, one quantization
        maps = {}
        for n in mods:
            a = float(self.amax[n])
            if a not in by_value:
                by_value[a] = InputMap(_static_fn(self.fmt, a))
            maps[n] = by_value[a]
        return install_input_maps(model, maps)


def _delayed_fn(ds: DelayedScaling, fmt: str):
    """x -> fake-quantized x with `ds`'s scale, then x's amax appended to `ds`'s history.

    The same numbers as dequantize(ds.quantize(x)) (tests/test_outliers.py checks it bit for bit over several steps)
    without materializing codes: DelayedScaling.quantize encodes through the exact reference path, which costs
    more than the forward itself when it runs on all 211 Linear inputs. An empty history uses the class itself.
    """
    def fn(x: torch.Tensor) -> torch.Tensor:
        if not ds.history:
            return dequantize(ds.quantize(x)).to(x.dtype)
        y = static_fake_quant(x, ds.scale, fmt)
        ds.history = (ds.history + [float(x.detach().float().abs().max())])[-ds.history_len:]
        return y
    return fn


class DelayedInputQuant:
    """Quantize every Linear input per tensor with `fp8lab.scaling.DelayedScaling`, history primed from `history`
    (name -> list of per-forward amax, e.g. `InputStats.amax` of the calibration windows)."""

    def __init__(self, history: dict[str, list[float]], fmt: str = "e4m3", history_len: int = 16,
                 algo: str = "max"):
        self.history, self.fmt, self.history_len, self.algo = history, fmt, history_len, algo
        self.scalers: dict[str, DelayedScaling] = {}

    def __call__(self, model: nn.Module):
        maps = {}
        for n in linear_modules(model):
            ds = DelayedScaling(self.fmt, history_len=self.history_len, algo=self.algo)
            ds.history = [float(v) for v in self.history.get(n, [])][-self.history_len:]
            self.scalers[n] = ds
            maps[n] = InputMap(_delayed_fn(ds, self.fmt))
        return install_input_maps(model, maps)


def static_transform(fmt: str = "e4m3", n_windows: int = 8, seq_len: int = 512, source: str = "sciq"):
    """Calibrate on held-out windows (with whatever is installed before it, e.g. SmoothQuant), then freeze."""
    return calibrated(lambda st: StaticInputQuant(st.static_amax(), fmt), n_windows, seq_len, source)


def delayed_transform(fmt: str = "e4m3", history_len: int = 16, n_windows: int = 8, seq_len: int = 512,
                      source: str = "sciq"):
    """Prime a delayed-scaling history per Linear on held-out windows, then keep updating it forward by forward."""
    return calibrated(lambda st: DelayedInputQuant(st.amax, fmt, history_len), n_windows, seq_len, source)


#: the transforms `fp8lab.recipes` names (each calibrates on held-out SciQ text when the recipe is applied)
RECIPE_TRANSFORMS = ("static", "delayed", "smoothquant+static", "hadamard+static")


def recipe_transform(kind: str, fmt: str = "e4m3", alpha: float = 0.5, n_windows: int = 8, seq_len: int = 512,
                     source: str = "sciq"):
    """The transform of one of the sweep's recipes (`RECIPE_TRANSFORMS`), calibrated on held-out windows.

    "smoothquant+static": SmoothQuant (alpha) calibrated first, then static scales calibrated on the smoothed
    inputs. "hadamard+static": the rotation, then static scales calibrated on the rotated inputs.
    """
    from .outliers import HadamardRotation, SmoothQuant, chain

    cal = dict(n_windows=n_windows, seq_len=seq_len, source=source)
    if kind == "static":
        return static_transform(fmt, **cal)
    if kind == "delayed":
        return delayed_transform(fmt, n_windows=n_windows, seq_len=seq_len, source=source)
    if kind == "smoothquant+static":
        return chain(calibrated(lambda st: SmoothQuant(st.chan_amax, alpha), **cal), static_transform(fmt, **cal))
    if kind == "hadamard+static":
        return chain(HadamardRotation(seed=0), static_transform(fmt, **cal))
    raise ValueError(f"unknown recipe transform {kind!r}; valid: {', '.join(RECIPE_TRANSFORMS)}")
