"""The representable grids of E4M3, E5M2 and E2M1, as data and as one log-axis figure.

    positive_grid("e2m1") -> [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]      # 7 nonzero magnitudes
    len(positive_grid("e4m3")) -> 126                                 # 2**-9 .. 448
    len(positive_grid("e5m2")) -> 123                                 # 2**-16 .. 57344

The figure shows why the scale factor exists: each format covers a fixed window of magnitudes, and a
tensor living at 3e-4 sits below E4M3's and E2M1's windows unless it is scaled up into them.
"""
from __future__ import annotations

import numpy as np

from . import formats
from .store import save_figure


def positive_grid(name: str) -> np.ndarray:
    """Positive finite values of a format, ascending."""
    t = formats.get(name).table().numpy().astype(np.float64)
    return np.unique(t[np.isfinite(t) & (t > 0)])


def grid_figure(names=("e4m3", "e5m2", "e2m1"), marks=None, path=None):
    """Dots at every representable magnitude per format on a log axis; optional vertical marks {label: value}.

    pyplot without choosing a backend: in a notebook the figure shows inline (forcing Agg here hid it), on a
    machine without a display matplotlib falls back to Agg by itself. `path` also saves it, atomically."""
    import matplotlib.pyplot as plt

    marks = marks if marks is not None else {"typical activation ~1.0": 1.0, "small activation ~3e-4": 3e-4}
    fig, ax = plt.subplots(figsize=(11, 3.2))
    for i, n in enumerate(names):
        g = positive_grid(n)
        f = formats.get(n)
        ax.scatter(g, np.full_like(g, i), s=10, marker="|", linewidths=1.2)
        ax.text(g[-1] * 1.6, i, f"{n.upper()}  [{f.min_subnormal:.3g}, {f.max:g}]", va="center", fontsize=11)
    for label, v in marks.items():
        ax.axvline(v, color="crimson" if v < 1e-2 else "gray", ls="--", lw=1)
        ax.text(v, len(names) - 0.45, label, rotation=0, ha="center", fontsize=10, color="crimson" if v < 1e-2 else "dimgray")
    ax.set_xscale("log", base=2)
    ax.set_yticks(range(len(names)), [n.upper() for n in names], fontsize=12)
    ax.set_ylim(-0.6, len(names) - 0.2)
    ax.set_xlim(2.0 ** -18, 2.0 ** 22)
    ax.set_xlabel("magnitude (log2 axis)", fontsize=12)
    ax.set_title("Representable positive values: each format is a fixed window", fontsize=13)
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path, dpi=120)
    return fig
