"""Paired bootstrap intervals for "recipe minus baseline" on the same windows / questions.

Pairing is the point: both models saw the very same text windows and questions, so we resample the
*units* (a window, a question) with replacement and recompute the whole statistic on both sides with the
same indices. The between-unit spread (some windows are just hard) cancels; only the recipe's effect and
its unit-to-unit inconsistency remain. That makes a 0.3 % perplexity change on 16 windows resolvable,
while an unpaired interval on the same data would be several percent wide.

    >>> nll_b = np.array([100., 200., 300.]); ntok = np.array([100, 100, 100])
    >>> ppl_delta_pct(nll_b * 1.01, nll_b, ntok)      # 1 % more NLL: exp((606 - 600) / 300) - 1
    2.0201...                                           # -> +2.02 % perplexity
    >>> paired_bootstrap_ci(ppl_delta_pct, (nll_b, nll_b, ntok))   # identical inputs
    (0.0, 0.0)

Percentile intervals (2.5th, 97.5th) from `n_boot` resamples with a fixed seed, so reruns reproduce.

When few answers change, the bootstrap is not to be trusted. On 40 questions where no answer changes
between recipe and baseline, every resample gives 0 and the interval is "+0.00 [+0.00, +0.00]": it reads
as certainty, while 40 unchanged questions only say that changes are rare, not that there are none. Only
the items that changed (the *discordant pairs*) carry information about an accuracy delta, so
`acc_delta_with_ci` reports how many changed and, below `EXACT_BELOW` of them, an exact interval instead:

    >>> acc_delta_with_ci(a_same, a_same)           # 40 questions, none changed
    AccDelta(delta=0.0, low=-7.21, high=7.21, changed=0, improved=0, worsened=0, n=40,
             method='exact: rule of three (0 of 40 changed)')   # 1 - 0.05**(1/40) = 7.2 % ~ 3/40
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

__all__ = ["ppl", "bpb", "ppl_delta_pct", "bpb_delta_pct", "acc_delta_pp", "paired_bootstrap_ci",
           "delta_with_ci", "clopper_pearson", "rule_of_three", "exact_acc_delta", "acc_delta_with_ci",
           "AccDelta", "EXACT_BELOW", "median_interval"]

#: below this many changed items an accuracy delta gets the exact interval, not the bootstrap
EXACT_BELOW = 10


def ppl(nll: np.ndarray, ntok: np.ndarray) -> float:
    """Token perplexity of a set of windows: exp(total NLL / total predicted tokens) (ratio of sums)."""
    return float(math.exp(np.sum(nll) / np.sum(ntok)))


def bpb(nll: np.ndarray, nbytes: np.ndarray) -> float:
    """Bits per UTF-8 byte: total NLL in nats / ln 2 / total bytes. Tokenizer-independent."""
    return float(np.sum(nll) / math.log(2) / np.sum(nbytes))


# Delta statistics. Each takes (recipe, baseline, extra) arrays indexed by unit, works on the leading axis
# so that the bootstrap can pass a [n_boot, n] matrix of resampled rows at once.
def ppl_delta_pct(nll_r, nll_b, ntok):
    """Relative change of perplexity in %: (ppl_r / ppl_b - 1) * 100 = (exp(dNLL / N) - 1) * 100."""
    return (np.exp((np.sum(nll_r, -1) - np.sum(nll_b, -1)) / np.sum(ntok, -1)) - 1.0) * 100.0


def bpb_delta_pct(nll_r, nll_b, nbytes):
    """Relative change of bits per byte in % (the byte count is the same for both, so it cancels)."""
    return (np.sum(nll_r, -1) / np.sum(nll_b, -1) - 1.0) * 100.0


def acc_delta_pp(a_r, a_b, _unused=None):
    """Change of accuracy in percentage points: (mean correct_r - mean correct_b) * 100."""
    return (np.mean(a_r, -1) - np.mean(a_b, -1)) * 100.0


def paired_bootstrap_ci(stat: Callable, arrays: Sequence[np.ndarray], n_boot: int = 2000, seed: int = 0,
                        level: float = 0.95, chunk: int = 250) -> tuple[float, float]:
    """Percentile interval of stat(*arrays) under resampling the units (shared indices across arrays)."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    n = len(arrays[0])
    if n < 2:
        raise ValueError(f"n = {n} unit(s): too few for an interval (every resample would be the same)")
    if any(len(a) != n for a in arrays):
        raise ValueError(f"paired arrays must have equal length, got {[len(a) for a in arrays]}")
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, n_boot, chunk):       # chunks keep [n_boot, n] index matrices small for MMLU
        idx = rng.integers(0, n, size=(min(chunk, n_boot - start), n))
        out.append(stat(*[a[idx] for a in arrays]))
    boots = np.concatenate(out)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(boots, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def delta_with_ci(stat: Callable, arrays: Sequence[np.ndarray], n_boot: int = 2000, seed: int = 0):
    """(point estimate, ci_low, ci_high) of a paired statistic."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    point = float(stat(*arrays))
    lo, hi = paired_bootstrap_ci(stat, arrays, n_boot=n_boot, seed=seed)
    return point, lo, hi


# ---- exact intervals for paired 0/1 outcomes ------------------------------------------------------------
def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) two-sided interval for a binomial proportion, k successes of n.

    clopper_pearson(5, 10) -> (0.1871, 0.8129);  clopper_pearson(0, 10) -> (0.0, 0.3085)
    Its bounds are beta quantiles: lower = Beta(k, n-k+1).ppf(a/2), upper = Beta(k+1, n-k).ppf(1-a/2).
    Conservative: it covers the true proportion at least `level` of the time, for every proportion.
    """
    from scipy.stats import beta

    if not (0 <= k <= n) or n < 1:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    a = 1.0 - level
    lo = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def rule_of_three(n: int, level: float = 0.95) -> float:
    """Upper bound on a rate when 0 of n events were seen: 1 - (1-level)**(1/n), about 3/n at 95 %.

    rule_of_three(40) -> 0.0721 (3/40 = 0.075). It is the exact one-sided Clopper-Pearson bound for 0 of n."""
    if n < 1:
        raise ValueError("n must be >= 1")
    return 1.0 - (1.0 - level) ** (1.0 / n)


def median_interval(xs, level: float = 0.95) -> tuple[float, float, float]:
    """(low, high, coverage): a distribution-free interval for the median of whatever produced the values `xs`
    (independent runs of one benchmark), from their order statistics. [x_(k), x_(n+1-k)] covers the median with
    probability 1 - 2 P(Binomial(n, 1/2) <= k - 1), whatever the distribution; k is the largest with coverage >=
    `level`. Where even [min, max] covers less (n <= 5 at 95 %), that is returned with its smaller coverage: few runs
    cannot pin a median down, and the coverage says how little they do.

    median_interval([3, 1, 2, 5, 4, 6]) -> (1.0, 6.0, 0.96875);  median_interval([1.0, 2.0]) -> (1.0, 2.0, 0.5)"""
    v = sorted(float(x) for x in xs)
    n = len(v)
    if n == 0:
        raise ValueError("median_interval needs at least one value")

    def coverage(k):   # 1 - 2 P(Bin(n, 1/2) <= k - 1)
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2.0**n

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= level:
        k += 1
    return v[k - 1], v[n - k], coverage(k)


@dataclass(frozen=True)
class AccDelta:
    """An accuracy change in percentage points with its interval and what it rests on."""

    delta: float        # (mean recipe - mean baseline) * 100
    low: float
    high: float
    changed: int        # discordant pairs: items scored differently by the two
    improved: int       # recipe right, baseline wrong
    worsened: int       # recipe wrong, baseline right
    n: int
    method: str         # "paired bootstrap" or "exact: ..."


def exact_acc_delta(a_r, a_b, level: float = 0.95) -> AccDelta:
    """Exact interval for a paired accuracy change from its discordant pairs.

    An item either improved (recipe right, baseline wrong), worsened, or did not change, so
    delta = (improved - worsened) / n. Each of the two rates gets a Clopper-Pearson interval at level
    1 - (1-level)/2 (Bonferroni: both hold together with probability >= level), and
        low = improved_low - worsened_high,   high = improved_high - worsened_low.
    When nothing changed, |delta| <= the change rate, bounded by the rule of three: +-(1 - 0.05**(1/n)).
    Conservative by construction: a wide interval on few changes is the honest answer.

    exact_acc_delta([1, 1, 0, 0] * 10, [1, 1, 0, 0] * 10) -> delta 0, [-7.21, +7.21], changed 0, n 40
    """
    a_r, a_b = np.asarray(a_r, np.float64), np.asarray(a_b, np.float64)
    if a_r.shape != a_b.shape or a_r.ndim != 1 or len(a_r) == 0:
        raise ValueError(f"need two equal-length 1-d 0/1 arrays, got shapes {a_r.shape}, {a_b.shape}")
    if not np.all(np.isin(a_r, (0.0, 1.0)) & np.isin(a_b, (0.0, 1.0))):
        raise ValueError("exact intervals need 0/1 outcomes")
    n = len(a_r)
    up, down = int(np.sum((a_r == 1) & (a_b == 0))), int(np.sum((a_r == 0) & (a_b == 1)))
    d = (up - down) / n * 100.0
    if up + down == 0:
        q = rule_of_three(n, level)
        return AccDelta(d, -q * 100.0, q * 100.0, 0, 0, 0, n, f"exact: rule of three (0 of {n} changed)")
    each = 1.0 - (1.0 - level) / 2.0
    u_lo, u_hi = clopper_pearson(up, n, each)
    w_lo, w_hi = clopper_pearson(down, n, each)
    return AccDelta(d, (u_lo - w_hi) * 100.0, (u_hi - w_lo) * 100.0, up + down, up, down, n,
                    f"exact: Clopper-Pearson on {up} improved / {down} worsened of {n}")


def acc_delta_with_ci(a_r, a_b, n_boot: int = 2000, seed: int = 0, exact_below: int = EXACT_BELOW) -> AccDelta:
    """The accuracy change with the interval that suits it: exact below `exact_below` changed items,
    the paired bootstrap above (where its distribution is smooth and it is the narrower honest answer)."""
    ex = exact_acc_delta(a_r, a_b)
    if ex.changed < exact_below:
        return ex
    d, lo, hi = delta_with_ci(acc_delta_pp, (a_r, a_b), n_boot=n_boot, seed=seed)
    return AccDelta(d, lo, hi, ex.changed, ex.improved, ex.worsened, ex.n, "paired bootstrap")
