"""4-bit KV caches: NVFP4 keys/values, and a Hadamard-rotated scalar quantizer with a fitted codebook ("turbo").

Keys (after RoPE) and values arrive as the attention reads them, [batch, kv_heads, seq, head_dim]. Every method
here quantizes each token's vector on its own — its stored bits depend on that token alone and on per-layer
constants frozen before serving — so a serving engine can write each token into the cache when it is produced:
all methods are **causal**. What is frozen, and from what:

    nvfp4        E2M1 elements in 16-element blocks along head_dim, one E4M3 scale per block (computed from the
                 block itself), times a per-layer fp32 global scale amax_cal / (6 * 448), where amax_cal is the
                 max |K| (or |V|) over *calibration* windows. NVFP4's usual global scale, the amax of the tensor
                 being quantized, would be an oracle here: over a whole window it sees every future token.
    turbo4       rotate each vector with a randomised Walsh–Hadamard transform (fp8lab.hadamard), cut the
                 rotated vector into groups of 32, store each group's RMS in fp16 and each coordinate / RMS as
                 the index of the nearest of 16 levels. The levels are fitted ONCE by Lloyd–Max to the rotated,
                 normalised coordinates of calibration windows, per layer and K/V (TurboQuant's idea: after a
                 random rotation every coordinate has nearly the same known distribution, so one scalar codebook
                 fits all of them). Dequantize: level * RMS, then rotate back.
    turbo4-gauss the same with the Lloyd–Max levels of a standard normal (no data at all: TurboQuant's choice)
    turbo4-g64   one fp16 RMS per 64 coordinates (the whole head vector here): fewer scale bits
    nvfp4-rot    the ablation: rotate, then NVFP4 (is it the rotation or the codebook that helps?)

Bits per stored element (D = head_dim; `bits_per_element`):

    nvfp4      4 (E2M1) + 8/16 (E4M3 block scale)                    = 4.5   (+ 32 bits per layer: nothing per element)
    turbo4     4 (codebook index) + 16/32 (fp16 RMS per 32 coords)    = 4.5   (+ 16 fp32 levels per layer)
    turbo4-g64 4 + 16/64                                              = 4.25
    e4m3 dynamic per token and head: 8 + 32/D; e4m3 with scale 1.0: 8

Why the scale is the group's norm (RMS), not its max: with a max scale the largest coordinate is always exactly
+-1 and the codebook has to fit a distribution with a point mass at the edge; with the norm the normalised
coordinates of a random rotation are close to N(0, 1) whatever the vector was, and Lloyd–Max places 16 levels
for that shape (no level is spent on the rare extreme coordinate, which is clipped to the outermost level).

    >>> cal = KVCalibration(head_dim=64)
    >>> cal.observe(layer, "key", k)              # for every layer, K and V, over calibration windows
    >>> params = cal.fit()                        # frozen: amax per layer, codebooks per layer
    >>> plan = KV4Plan("turbo4", params, keep_ends=2)     # first and last 2 layers stay in high precision
    >>> k_hat = plan.make(layer, "key")(k)        # what the attention reads from a turbo4 cache

NVFP4 goes through fp8lab.scaling (the one copy of the NVFP4 scale rule and of E2M1); this module only decides
which amax the global scale comes from (`nvfp4_quantize`).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import torch

from . import formats, scaling
from .hadamard import RandomHadamard

__all__ = ["METHODS", "bits_per_element", "nvfp4_quantize", "nvfp4_fake_quant", "lloyd_max", "gaussian_codebook",
           "TurboQuantizer", "KVCalibration", "KV4Params", "KV4Plan", "OnlineKV4", "kv4_slot"]

METHODS = ("nvfp4", "nvfp4-rot", "turbo4", "turbo4-gauss", "turbo4-g64")
NVFP4_SPEC = scaling.QuantSpec("e2m1", "nvfp4")
_FP16_MAX = 65504.0


def bits_per_element(method: str, head_dim: int = 64) -> float:
    """Stored bits per K/V element, scale bytes included (per-layer constants are not per element)."""
    if method in ("nvfp4", "nvfp4-rot"):
        return 4 + 8 / 16
    if method in ("turbo4", "turbo4-gauss"):
        return 4 + 16 / min(32, head_dim)
    if method == "turbo4-g64":
        return 4 + 16 / min(64, head_dim)
    if method == "e4m3-dyn":
        return 8 + 32 / head_dim
    if method == "e4m3-uncal":
        return 8.0
    if method == "baseline":
        return 16.0          # what a bf16 cache would store (the lab computes in float32)
    raise ValueError(f"unknown KV method {method!r}; valid: {', '.join(METHODS)}, e4m3-dyn, e4m3-uncal, baseline")


# ---- NVFP4 with a frozen global scale ----------------------------------------------------------------------
def nvfp4_quantize(x: torch.Tensor, amax) -> scaling.Quantized:
    """NVFP4 of x (16-blocks along the last dim) with the global scale frozen at amax / (6 * 448).

    fp8lab.scaling's NVFP4 rule with a calibrated `global_amax` (scaling.quantize_nvfp4): each block's E4M3 scale
    comes from that block alone, so each token's codes depend on that token alone. A block above the calibrated
    range saturates: its scale at E4M3's 448 (decoded: 448 * global = amax / 6) and its elements at E2M1's 6,
    i.e. at +-amax. Returns a Quantized of x's shape (unpacked codes, float32 scales, E4M3 scale codes, global).
    """
    a = torch.as_tensor(amax, dtype=torch.float32)
    if a.numel() != 1 or not bool(torch.isfinite(a).all()) or float(a) < 0:
        raise ValueError(f"amax must be one finite non-negative number, got {amax}")
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"need a tensor with a non-empty last dimension, got shape {tuple(x.shape)}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("K/V hold NaN or Inf values: refusing to quantize them")
    packed, sc, gs = scaling.quantize_nvfp4(x.detach(), global_amax=a.reshape(()))
    codes = scaling.unpack_nibbles(packed, x.shape[-1])
    return scaling.Quantized(codes, formats.E4M3.decode(sc) * gs, NVFP4_SPEC, tuple(x.shape), scale_codes=sc,
                             global_scale=gs)


def nvfp4_fake_quant(x: torch.Tensor, amax) -> torch.Tensor:
    """What the attention reads from an NVFP4 cache with a frozen global scale (x's dtype and shape)."""
    return scaling.dequantize(nvfp4_quantize(x, amax)).to(x.dtype)


# ---- codebooks -------------------------------------------------------------------------------------------
def lloyd_max(samples: torch.Tensor, n_levels: int = 16, iters: int = 300, symmetric: bool = True,
              tol: float = 1e-7, init: torch.Tensor | None = None) -> torch.Tensor:
    """The `n_levels` reconstruction levels minimising the mean squared error on `samples` (1-D k-means).

    Lloyd's iteration: thresholds at the midpoints of adjacent levels, each level moves to the mean of its cell.
    `symmetric=True` fits the mirrored sample set (x and -x), so the levels come out symmetric about 0 — the
    rotated coordinates are symmetric by construction (random signs), and every sample then counts twice.
    Exact on the sorted samples (cumulative sums, no histogram). Starts from the samples' quantiles, or from
    `init` (a nearby codebook converges in a few iterations). Stops when no level moves by more than
    tol * max|sample|. Returns sorted float64 levels.

    lloyd_max(torch.tensor([-1., -1, 1, 1]), 2) -> [-1, 1]
    """
    s = torch.as_tensor(samples).detach().double().flatten().cpu()
    s = s[torch.isfinite(s)]
    if n_levels < 2:
        raise ValueError("need at least 2 levels")
    if s.numel() < n_levels:
        raise ValueError(f"need at least {n_levels} samples to fit {n_levels} levels, got {s.numel()}")
    if symmetric:
        s = torch.cat([s, -s])
    s, _ = torch.sort(s)
    cs = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(s, 0)])
    if init is not None:
        lv = torch.sort(torch.as_tensor(init, dtype=torch.float64).flatten()).values
        if lv.numel() != n_levels:
            raise ValueError(f"init has {lv.numel()} levels, expected {n_levels}")
    else:
        lv = s[((torch.arange(n_levels, dtype=torch.float64) + 0.5) / n_levels * s.numel()).long()]   # quantiles
    eps = tol * max(1.0, float(s[-1].abs()), float(s[0].abs()))
    for _ in range(iters):
        edges = torch.cat([torch.tensor([0]), torch.searchsorted(s, (lv[1:] + lv[:-1]) / 2), torch.tensor([s.numel()])])
        cnt = (edges[1:] - edges[:-1]).double()
        new = torch.where(cnt > 0, (cs[edges[1:]] - cs[edges[:-1]]) / cnt.clamp(min=1), lv)
        done = float((new - lv).abs().max()) < eps
        lv = torch.sort(new).values
        if done:
            break
    if symmetric:
        lv = (lv - lv.flip(0)) / 2          # remove the last ulp of asymmetry from floating-point sums
    return lv


@functools.lru_cache(maxsize=8)
def _gaussian_levels(n_levels: int, iters: int) -> tuple:
    lv = torch.linspace(-2.5, 2.5, n_levels, dtype=torch.float64)
    inf = torch.tensor([math.inf], dtype=torch.float64)
    for _ in range(iters):
        t = torch.cat([-inf, (lv[1:] + lv[:-1]) / 2, inf])
        pdf = torch.exp(-t * t / 2) / math.sqrt(2 * math.pi)
        cdf = torch.special.ndtr(t)
        new = (pdf[:-1] - pdf[1:]) / (cdf[1:] - cdf[:-1])
        converged = float((new - lv).abs().max()) < 1e-13
        lv = new
        if converged:
            break
    return tuple(((lv - lv.flip(0)) / 2).tolist())


def gaussian_codebook(n_levels: int = 16, iters: int = 5000) -> torch.Tensor:
    """Lloyd–Max levels for a standard normal, from the density itself (no samples).

    The centroid of N(0, 1) on [a, b] is (phi(a) - phi(b)) / (Phi(b) - Phi(a)). For 16 levels the outermost is
    +-2.733 and the innermost +-0.128 (Max, 1960).
    """
    return torch.tensor(_gaussian_levels(int(n_levels), int(iters)), dtype=torch.float64)


# ---- the rotated-codebook quantizer ----------------------------------------------------------------------
def _unit_rms(yg: torch.Tensor) -> torch.Tensor:
    """[..., groups, g] -> each group divided by its RMS (all-zero groups stay zero)."""
    rms = yg.pow(2).mean(-1, keepdim=True).sqrt()
    return torch.where(rms > 0, yg / torch.where(rms > 0, rms, torch.ones_like(rms)), torch.zeros_like(yg))


class TurboQuantizer:
    """Rotate (randomised FWHT along head_dim), per-group RMS in fp16, 16-level codebook index per coordinate.

    q = TurboQuantizer(64, gaussian_codebook(), group=32)
    codes, rms = q.quantize(x)         # uint8 codes [..., 64] (4 bits each), fp16 RMS [..., 2]
    x_hat = q.dequantize(codes, rms)   # levels[codes] * rms, rotated back
    q(x)                               # the same in one call (fake quantization)
    """

    def __init__(self, head_dim: int, levels: torch.Tensor, group: int = 32, seed: int = 0):
        levels = torch.as_tensor(levels, dtype=torch.float64).flatten()
        if levels.numel() != 16 or not bool((levels[1:] > levels[:-1]).all()):
            raise ValueError("a 4-bit codebook needs 16 strictly increasing levels")
        group = min(int(group), int(head_dim))
        if group < 1 or head_dim % group:
            raise ValueError(f"head_dim {head_dim} is not a multiple of the scale group {group}")
        self.head_dim, self.group, self.seed = int(head_dim), group, int(seed)
        self.rot = RandomHadamard(head_dim, seed=seed)
        self.levels = levels.float()
        self.mids = ((levels[1:] + levels[:-1]) / 2).float()

    @property
    def bits_per_element(self) -> float:
        return 4 + 16 / self.group

    def _groups(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.head_dim:
            raise ValueError(f"expected head_dim {self.head_dim}, got shape {tuple(x.shape)}")
        y = self.rot(x.detach().float())
        return y.reshape(*y.shape[:-1], self.head_dim // self.group, self.group)

    def normalized(self, x: torch.Tensor) -> torch.Tensor:
        """The rotated coordinates divided by their group's RMS: what the codebook is fitted to."""
        return _unit_rms(self._groups(x))

    def quantize(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        yg = self._groups(x)
        rms = yg.pow(2).mean(-1).sqrt().clamp(max=_FP16_MAX).half()       # the stored scale, fp16
        r = rms.float().unsqueeze(-1)
        u = torch.where(r > 0, yg / torch.where(r > 0, r, torch.ones_like(r)), torch.zeros_like(yg))
        codes = torch.bucketize(u.contiguous(), self.mids.to(u.device)).to(torch.uint8)
        return codes.reshape(*x.shape), rms

    def dequantize(self, codes: torch.Tensor, rms: torch.Tensor) -> torch.Tensor:
        v = self.levels.to(codes.device)[codes.long()]
        v = v.reshape(*v.shape[:-1], self.head_dim // self.group, self.group) * rms.float().unsqueeze(-1)
        return self.rot.inverse(v.reshape(*codes.shape))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not bool(torch.isfinite(x).all()):
            raise ValueError("K/V hold NaN or Inf values: refusing to quantize them")
        return self.dequantize(*self.quantize(x)).to(x.dtype)


# ---- calibration: what is frozen before serving ----------------------------------------------------------
@dataclass
class KV4Params:
    """The per-layer constants of the 4-bit caches, fitted once on calibration windows.

    amax[(layer, which)]            max |x| over the calibration K (or V): NVFP4's frozen global scale / (6*448)
    rot_amax[(layer, which)]        the same after the rotation (for nvfp4-rot)
    codebooks[(group, layer, which)] 16 Lloyd–Max levels of the rotated, group-RMS-normalised coordinates
    """

    head_dim: int
    seed: int = 0
    amax: dict = field(default_factory=dict)
    rot_amax: dict = field(default_factory=dict)
    codebooks: dict = field(default_factory=dict)
    n_tokens: dict = field(default_factory=dict)
    source: str = ""

    def to_json(self) -> dict:
        key = lambda k: ":".join(map(str, k))
        return {"head_dim": self.head_dim, "seed": self.seed, "source": self.source,
                "amax": {key(k): float(v) for k, v in sorted(self.amax.items())},
                "rot_amax": {key(k): float(v) for k, v in sorted(self.rot_amax.items())},
                "codebooks": {key(k): [round(float(x), 6) for x in v] for k, v in sorted(self.codebooks.items())},
                "n_tokens": {key(k): int(v) for k, v in sorted(self.n_tokens.items())}}


class KVCalibration:
    """Watch K/V of calibration windows; `fit()` returns the frozen KV4Params.

    Keeps the running max |x| (plain and rotated) per (layer, which) and a seeded random subsample of the
    rotated, group-normalised coordinates (`max_samples` per call and group, at most `max_fit_samples` pooled)
    for Lloyd–Max.
    """

    def __init__(self, head_dim: int, groups=(32, 64), seed: int = 0, max_samples: int = 50_000,
                 max_fit_samples: int = 100_000):
        self.head_dim, self.seed, self.max_samples = int(head_dim), int(seed), int(max_samples)
        self.max_fit_samples = int(max_fit_samples)
        groups = sorted({min(int(g), self.head_dim) for g in groups})
        self.rot = RandomHadamard(head_dim, seed=seed)
        self.groups = tuple(groups)
        self.params = KV4Params(self.head_dim, self.seed)
        self.samples: dict = {}
        self._gen = torch.Generator().manual_seed(seed)

    def observe(self, layer: int, which: str, x: torch.Tensor) -> torch.Tensor:
        """Record x ([..., head_dim]); return it unchanged (usable as a KV function)."""
        if which not in ("key", "value"):
            raise ValueError(f"which must be 'key' or 'value', got {which!r}")
        xd = x.detach().float()
        k = (int(layer), which)
        p = self.params
        p.amax[k] = max(p.amax.get(k, 0.0), float(xd.abs().max()))
        y = self.rot(xd)
        p.rot_amax[k] = max(p.rot_amax.get(k, 0.0), float(y.abs().max()))
        p.n_tokens[k] = p.n_tokens.get(k, 0) + xd.numel() // self.head_dim
        for g in self.groups:
            u = _unit_rms(y.reshape(*y.shape[:-1], self.head_dim // g, g)).flatten()
            if u.numel() > self.max_samples:
                u = u[torch.randint(0, u.numel(), (self.max_samples,), generator=self._gen)]
            self.samples.setdefault((g, *k), []).append(u.cpu())
        return x

    def make(self, layer: int, which: str):
        """A KV function that observes (for recipes.install_kv_functions)."""
        return lambda x: self.observe(layer, which, x)

    def pooled(self, key) -> torch.Tensor:
        """The samples of one (group, layer, which), at most max_fit_samples (a seeded subsample)."""
        u = torch.cat(self.samples[key])
        if u.numel() > self.max_fit_samples:
            u = u[torch.randint(0, u.numel(), (self.max_fit_samples,), generator=self._gen)]
        return u

    def fit(self, source: str = "") -> KV4Params:
        if not self.samples:
            raise RuntimeError("nothing observed: run calibration windows through observe() first")
        for k in self.samples:
            self.params.codebooks[k] = lloyd_max(self.pooled(k), 16, init=gaussian_codebook()).float()
        self.params.source = source
        return self.params


# ---- per-layer plans: which method for which layer ------------------------------------------------------
def _quantizer_for(method: str, params: KV4Params, layer: int, which: str, _cache: dict):
    k = (layer, which)
    if method == "nvfp4":
        a = params.amax[k]
        return lambda x: nvfp4_fake_quant(x, a)
    if method == "nvfp4-rot":
        rot, a = RandomHadamard(params.head_dim, seed=params.seed), params.rot_amax[k]
        return lambda x: rot.inverse(nvfp4_fake_quant(rot(x.float()), a)).to(x.dtype)
    if method in ("turbo4", "turbo4-gauss", "turbo4-g64"):
        g = 64 if method == "turbo4-g64" else 32
        if method == "turbo4-gauss":
            levels = _cache.setdefault("gauss", gaussian_codebook())
        else:
            ck = (min(g, params.head_dim), *k)
            if ck not in params.codebooks:
                raise KeyError(f"no turbo codebook for scale group {ck[0]}, layer {layer} {which}: calibrate with "
                               f"KVCalibration(groups=(..., {ck[0]})) over this layer")
            levels = params.codebooks[ck]
        return TurboQuantizer(params.head_dim, levels, group=g, seed=params.seed)
    raise ValueError(f"unknown 4-bit KV method {method!r}; valid: {', '.join(METHODS)}")


class KV4Plan:
    """One 4-bit method for every layer except those kept in high precision.

    keep        explicit layer indices whose K/V are left untouched (bit-identical to the baseline)
    keep_ends   seed 002's `--kv-high-precision-layers N`: the first N and the last N layers are kept
    n_layers    needed to find "the last N"; when None it is taken from the layers `make` has been called for
                (fp8lab.recipes calls make for every attention layer when a recipe is applied, before any
                forward, so by the first call every layer is known)

    make(layer, which) -> the function applied to that layer's keys or values.
    """

    def __init__(self, method: str, params: KV4Params | None, keep=(), keep_ends: int = 0, n_layers: int | None = None):
        if method not in METHODS:
            raise ValueError(f"unknown 4-bit KV method {method!r}; valid: {', '.join(METHODS)}")
        if keep_ends < 0:
            raise ValueError("keep_ends must be >= 0")
        self.method, self.params = method, params
        self.keep, self.keep_ends, self.n_layers = frozenset(int(i) for i in keep), int(keep_ends), n_layers
        self.seen: set[int] = set()
        self._cache: dict = {}

    def kept_layers(self) -> frozenset:
        n = self.n_layers if self.n_layers is not None else (max(self.seen) + 1 if self.seen else 0)
        ends = set(range(min(self.keep_ends, n))) | set(range(max(n - self.keep_ends, 0), n))
        return self.keep | ends

    def quantizer(self, layer: int, which: str):
        """The bare quantizer of one layer (ignores `keep`): for error measurements."""
        if self.params is None:
            raise RuntimeError("this plan has no calibration parameters yet")
        return _quantizer_for(self.method, self.params, int(layer), which, self._cache)

    def make(self, layer: int, which: str):
        layer = int(layer)
        self.seen.add(layer)
        state: dict = {}

        def apply(x: torch.Tensor) -> torch.Tensor:
            if layer in self.kept_layers():
                return x                                   # high precision: the very tensor, untouched
            if "q" not in state:
                state["q"] = self.quantizer(layer, which)
            return state["q"](x)

        return apply


class OnlineKV4(KV4Plan):
    """The recipe form for the sweep: the per-layer constants are fitted on the first `n_tokens` the model sees.

    Like seed 000's `--fp8-kv-calibration-tokens N`: until a layer has seen N positions its constants come from
    what it has seen so far (within the first forward: its positions 0..N-1), then they freeze for every later
    sequence. `turbo4-gauss` needs no calibration at all (its codebook is that of a standard normal).
    """

    def __init__(self, method: str, n_tokens: int = 256, keep_ends: int = 0):
        super().__init__(method, None, keep_ends=keep_ends)
        if n_tokens < 1:
            raise ValueError("n_tokens must be >= 1")
        self.n_tokens = int(n_tokens)
        self.cal: KVCalibration | None = None
        self.positions: dict = {}          # (layer, which) -> positions observed so far
        self.frozen: dict = {}             # (layer, which) -> its quantizer, fixed for good

    def _calibrate(self, layer: int, which: str, x: torch.Tensor) -> None:
        k = (layer, which)
        if self.cal is None:        # fit only the codebooks this method reads
            groups = {"turbo4": (32,), "turbo4-g64": (64,)}.get(self.method, ())
            self.cal = KVCalibration(x.shape[-1], groups=groups)
            self.params = self.cal.params
        if self.method == "turbo4-gauss":
            self.positions[k] = self.n_tokens
            return
        take = min(self.n_tokens - self.positions.get(k, 0), x.shape[2])
        if take > 0:
            self.cal.observe(layer, which, x[:, :, :take])
            self.positions[k] = self.positions.get(k, 0) + take
            if self.method in ("turbo4", "turbo4-g64"):
                for g in self.cal.groups:
                    self.params.codebooks[(g, *k)] = lloyd_max(self.cal.pooled((g, *k)), 16,
                                                               init=gaussian_codebook()).float()

    def make(self, layer: int, which: str):
        layer = int(layer)
        self.seen.add(layer)
        k = (layer, which)

        def apply(x: torch.Tensor) -> torch.Tensor:
            if layer in self.kept_layers():
                return x
            if k in self.frozen:
                return self.frozen[k](x)
            self._calibrate(layer, which, x)
            q = _quantizer_for(self.method, self.params, layer, which, self._cache)
            if self.positions.get(k, 0) >= self.n_tokens:
                self.frozen[k] = q
                for g in self.cal.groups:
                    self.cal.samples.pop((g, *k), None)
            return q(x)

        return apply


def kv4_slot(method: str, n_tokens: int = 256, keep_ends: int = 0) -> dict:
    """The fields of a `fp8lab.recipes.KVFunctions` slot (`KVFunctions(**kv4_slot("nvfp4"))`): a fresh OnlineKV4
    each time a recipe is applied, its label, and its causality (declared: the functions are opaque to recipes)."""
    if method not in METHODS:
        raise ValueError(f"unknown 4-bit KV method {method!r}; valid: {', '.join(METHODS)}")
    label = f"{method}, constants frozen after {n_tokens} tokens" + (f", first/last {keep_ends} layers kept" if keep_ends else "")
    why = ("each token stored from its own values; " +
           ("a fixed codebook (no calibration)" if method == "turbo4-gauss"
            else f"per-layer constants calibrated on the first {n_tokens} tokens, then frozen"))
    return {"new": lambda: OnlineKV4(method, n_tokens, keep_ends).make, "label": label, "causal": True, "why": why,
            "fmt": "nvfp4" if method.startswith("nvfp4") else method}
