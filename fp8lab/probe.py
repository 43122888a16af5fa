"""The underflow probe (seed 003 §2): why every FP8 recipe is really an FP8-plus-scaling recipe.

Round a tensor of typical activations (~1.0) and one of small activations (~3e-4), with the scale factor
off and on, and count the damage. E4M3's smallest subnormal is 2**-9 = 0.00195, so anything below
2**-10 = 0.000977 rounds to zero: without a scale the small tensor ceases to exist.

    rows = underflow_probe(formats=("e4m3",))      # n=4096, seed 0
    # tensor          format  scale  mean rel err  flushed
    # typical (~1.0)  e4m3    off     2.40 %        0.1 %   (the few |x| < 2**-10 in a normal sample)
    # typical (~1.0)  e4m3    on      2.28 %        0.0 %
    # small (~3e-4)   e4m3    off    99.96 %       99.8 %   (only the largest |x| >= 2**-10 survive)
    # small (~3e-4)   e4m3    on      2.28 %        0.0 %   (the same tensor, scaled: identical error)

"scale on" means the format's production scaling: per-tensor amax for E4M3/E5M2, 16-element E4M3 block
scales plus a global scale for NVFP4, 32-element E8M0 power-of-two scales for MXFP4. "scale off" means
plain rounding in the element format (E2M1's grid is {0, .5, 1, 1.5, 2, 3, 4, 6}: even ~1.0 suffers).
"""
from __future__ import annotations

from pathlib import Path

import torch

from . import metrics
from .store import write_rows
from .scaling import QuantSpec, fake_quant

# name -> (spec without scale, spec with the format's production scaling)
PROBE_FORMATS = {
    "e4m3": (QuantSpec("e4m3", "none"), QuantSpec("e4m3", "tensor")),
    "e5m2": (QuantSpec("e5m2", "none"), QuantSpec("e5m2", "tensor")),
    "nvfp4": (QuantSpec("e2m1", "none"), QuantSpec("e2m1", "nvfp4")),
    "mxfp4": (QuantSpec("e2m1", "none"), QuantSpec("e2m1", "mx")),
}
TENSORS = {"typical (~1.0)": 1.0, "small (~3e-4)": 3e-4}


def probe_tensor(magnitude: float, n: int = 4096, seed: int = 0) -> torch.Tensor:
    """n activations drawn N(0, 1) and multiplied by `magnitude` (shape [n // 64, 64] so blocks make sense)."""
    if n <= 0 or n % 64:
        raise ValueError("n must be a positive multiple of 64")
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n // 64, 64, generator=g) * magnitude


def underflow_probe(formats=tuple(PROBE_FORMATS), n: int = 4096, seed: int = 0) -> list[dict]:
    """One row per tensor x format x scale (off/on): mean relative error, % flushed to zero, SQNR."""
    unknown = [f for f in formats if f not in PROBE_FORMATS]
    if unknown:
        raise ValueError(f"unknown probe format(s) {unknown}; valid: {', '.join(PROBE_FORMATS)}")
    rows = []
    for tname, mag in TENSORS.items():
        x = probe_tensor(mag, n, seed)
        for f in formats:
            for label, spec in zip(("off", "on"), PROBE_FORMATS[f]):
                y = fake_quant(x, spec)
                rows.append({
                    "tensor": tname, "format": f, "scale": label,
                    "mean_rel_err": metrics.mean_relative_error(x, y),
                    "flushed_pct": metrics.flushed_pct(x, y),
                    "sqnr_db": metrics.sqnr_db(x, y),
                    "n": x.numel(),
                })
    return rows


def write_csv(rows: list[dict], path) -> Path:
    """Write probe rows to CSV (outputs/probe.csv)."""
    return write_rows(rows, path)


def format_table(rows: list[dict]) -> str:
    """Plain-text table in seed 003's layout (percentages)."""
    lines = [f"{'tensor':16s} {'format':6s} {'scale':5s} {'mean rel err':>12s} {'flushed':>8s} {'SQNR dB':>8s}"]
    for r in rows:
        lines.append(f"{r['tensor']:16s} {r['format']:6s} {r['scale']:5s} {100 * r['mean_rel_err']:11.2f}% "
                     f"{r['flushed_pct']:7.1f}% {r['sqnr_db']:8.1f}")
    return "\n".join(lines)
