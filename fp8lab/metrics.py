"""The same error metrics everywhere, so every table in the lab compares.

    x     = torch.tensor([1.0, 2.0, 3e-4])
    x_hat = torch.tensor([1.0, 2.0, 0.0])        # E4M3 without a scale: the small value is flushed
    relative_error(x, x_hat)  -> 1.34e-4        # ||x - x_hat|| / ||x||: the norm hides the lost element
    mean_relative_error(x, x_hat) -> 0.3333     # mean |x - x_hat| / |x| over nonzero x: it does not
    sqnr_db(x, x_hat)         -> 77.4           # 10 log10(||x||^2 / ||x - x_hat||^2)
    flushed_pct(x, x_hat)     -> 33.33          # nonzero inputs that became exactly 0
    saturated_pct(x_hat, 448) -> 0.0            # outputs at +-max
    cosine(x, x_hat)          -> 1.0
"""
from __future__ import annotations

import math

import torch


def _pair(x, x_hat):
    x = torch.as_tensor(x).double().flatten()
    y = torch.as_tensor(x_hat).double().flatten()
    if x.shape != y.shape:
        raise ValueError(f"shapes differ: {tuple(x.shape)} vs {tuple(y.shape)}")
    if x.numel() == 0:
        raise ValueError("metrics of an empty tensor are undefined")
    return x, y


def relative_error(x, x_hat) -> float:
    """||x - x_hat|| / ||x|| (0 when both are zero, inf when only x is)."""
    x, y = _pair(x, x_hat)
    num, den = (x - y).norm().item(), x.norm().item()
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return num / den


def mean_relative_error(x, x_hat) -> float:
    """Mean of |x - x_hat| / |x| over the nonzero elements of x (seed 003's probe metric)."""
    x, y = _pair(x, x_hat)
    nz = x != 0
    if not bool(nz.any()):
        return 0.0
    return ((x[nz] - y[nz]).abs() / x[nz].abs()).mean().item()


def sqnr_db(x, x_hat) -> float:
    """Signal-to-quantization-noise ratio in dB; inf for an exact match (torchao's SQNR)."""
    x, y = _pair(x, x_hat)
    noise = (x - y).pow(2).sum().item()
    sig = x.pow(2).sum().item()
    if noise == 0:
        return math.inf
    if sig == 0:
        return -math.inf
    return 10 * math.log10(sig / noise)


def flushed_pct(x, x_hat) -> float:
    """Percent of the nonzero inputs that came back as exactly zero."""
    x, y = _pair(x, x_hat)
    nz = x != 0
    if not bool(nz.any()):
        return 0.0
    return 100.0 * ((y == 0) & nz).sum().item() / nz.sum().item()


def saturated_pct(x_hat, fmt_max: float, scale=1.0) -> float:
    """Percent of outputs sitting at +-fmt_max * scale (clipped by saturation)."""
    y = torch.as_tensor(x_hat).double().flatten()
    if y.numel() == 0:
        raise ValueError("metrics of an empty tensor are undefined")
    lim = (torch.as_tensor(scale).double() * fmt_max).flatten()
    lim = lim if lim.numel() in (1, y.numel()) else lim.max()
    return 100.0 * (y.abs() >= lim).sum().item() / y.numel()


def cosine(x, x_hat) -> float:
    """Cosine similarity of the flattened tensors (seed 001's gate: >= 0.999)."""
    x, y = _pair(x, x_hat)
    den = x.norm().item() * y.norm().item()
    if den == 0:
        return 1.0 if bool(torch.equal(x, y)) else 0.0
    return (x @ y).item() / den
