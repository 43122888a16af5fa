"""Worked answers to notebook 11's exercises (activation outliers): small synthetic activations and weights with the
lab's own quantizers (fp8lab.scaling), SmoothQuant factors (fp8lab.outliers) and rotations (fp8lab.hadamard). Each
answer names the command that asks the same question of the model.

    python notebooks/solutions/11_activation_outliers.py
"""
import torch

from fp8lab import findings
from fp8lab import notebook as nb
from fp8lab import outliers as O
from fp8lab.hadamard import RandomHadamard
from fp8lab.metrics import relative_error
from fp8lab.recipes import RECIPES
from fp8lab.scaling import QuantSpec, fake_quant

T, K, N = 256, 256, 128


def _acts(channel_outliers=(3, 77), scale=40.0, token_outlier=None, seed=0, k=K):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, k, generator=g)
    for c in channel_outliers:
        x[:, c] *= scale
    if token_outlier is not None:
        x[token_outlier] *= 20.0
    w = torch.randn(N, k, generator=g) * 0.05
    return x, w


def _w8a8(x, w, fmt="int8", act="tensor"):
    """Relative error of x Wᵀ with weights and inputs fake-quantized (per-tensor weights; `act` granularity inputs)."""
    ref = x.double() @ w.double().T
    y = fake_quant(x, QuantSpec(fmt, act)).double() @ fake_quant(w, QuantSpec(fmt, "tensor")).double().T
    return relative_error(ref, y)


def exercise_1() -> dict:
    """SmoothQuant divides input channel j by s_j = max|X_j|^α / max|W_j|^(1-α) and multiplies weight column j by it:
    α = 0 leaves the activation outliers in place, α = 1 moves all of them into the weights. The error of x Wᵀ is
    smallest in between — where neither side's per-tensor scale is set by a few channels. For INT8 (uniform grid)
    the curve is steep and the best α is far better than none; for E4M3 the curve is flat, since its exponent already
    gives small values their relative precision. The best α depends on the tensor; the paper's 0.5 is a default."""
    x, w = _acts()
    out = {}
    for fmt in ("int8", "e4m3"):
        errs = {}
        for a in (0.0, 0.25, 0.5, 0.75, 1.0):
            s = O.smoothing_factors(x.abs().amax(0), [w], alpha=a)
            errs[a] = _w8a8(x / s, w * s, fmt)
        best = min(errs, key=errs.get)
        out[fmt] = {f"alpha={a:g}": f"{e:.2e}" for a, e in errs.items()}
        out[f"{fmt} best alpha"] = best
    out["without smoothing (int8)"] = f"{_w8a8(x, w, 'int8'):.2e}"
    return out


def exercise_2() -> dict:
    """A static scale frozen on calibration data maps the calibration maximum to 448; a later value above it
    saturates at 448·scale, and the error of that element is the whole excess. If the test batch's maximum is twice
    the calibration one, every value above the old maximum is clipped; a dynamic per-token scale never clips (it
    sees each token's own maximum) at the price of one scale per token. Frozen scales transfer only as far as the
    range does."""
    x_cal, _ = _acts(seed=1)
    x_test, _ = _acts(seed=2)
    x_test[10, 3] = 2 * x_cal.abs().max()                  # one later value above anything calibrated
    scale = float(x_cal.abs().max()) / 448.0
    q_static = (x_test / scale).clamp(-448, 448).to(torch.float8_e4m3fn).float() * scale   # frozen scale, saturating
    q_token = fake_quant(x_test, QuantSpec("e4m3", "token"))
    return {"values above the calibrated maximum": int((x_test.abs() > x_cal.abs().max()).sum()),
            "static scale: relative error": f"{relative_error(x_test, q_static):.2e}",
            "dynamic per token: relative error": f"{relative_error(x_test, q_token):.2e}",
            "on the model": "python -m fp8lab.outlier_study --parts scaling --calib sciq --out runs/outliers"}


def exercise_3() -> dict:
    """With 576 channels (the model's width) the block-diagonal rotation mixes channels only inside blocks of 64 (the
    largest power of two dividing 576): two outliers in the first block spread over those 64 channels only, so that
    block keeps maxima far above the rest and the per-tensor INT8 scale stays set by it, while the full (Kronecker)
    rotation spreads them over all 576 and brings the max/median of the channel maxima near 1. Compare the two rows:
    mixing inside a block is enough only when the outliers are spread over the blocks."""
    k = 576
    x, w = _acts(channel_outliers=(3, 5), k=k)               # both outliers in the first block
    c0 = x.abs().amax(0)
    out = {"as is: chan max/median": round(float(c0.max() / c0.median()), 1),
           "as is: int8 W8A8 error": f"{_w8a8(x, w):.2e}"}
    for kind in ("kronecker", "block"):
        r = RandomHadamard(k, seed=0, kind=kind)
        xr, wr = r(x), r(w)
        c = xr.abs().amax(0)
        out[f"{kind}: chan max/median"] = round(float(c.max() / c.median()), 1)
        out[f"{kind}: int8 W8A8 error"] = f"{_w8a8(xr, wr):.2e}"
    return out


def exercise_4() -> dict:
    """A rotation cures channel outliers, a per-token scale cures token outliers; an input with both needs both.
    With INT8 (a uniform grid, where the spread between bulk and outliers costs levels) per tensor is worst, each cure
    alone helps, and rotation + per token is lowest: the rotation removes the channel outliers inside every token,
    the per-token scale gives the huge token its own scale. With E4M3 the four stay close (its exponent already gives
    small values their relative precision): the cures matter for the grid that needs them."""
    x, w = _acts(token_outlier=0)
    r = RandomHadamard(K, seed=0)
    xr, wr = r(x), r(w)
    out = {}
    for fmt in ("int8", "e4m3"):
        out[fmt] = {"per tensor": f"{_w8a8(x, w, fmt, 'tensor'):.2e}",
                    "rotation + per tensor": f"{_w8a8(xr, wr, fmt, 'tensor'):.2e}",
                    "per token": f"{_w8a8(x, w, fmt, 'token'):.2e}",
                    "rotation + per token": f"{_w8a8(xr, wr, fmt, 'token'):.2e}"}
    return out


def exercise_5() -> dict:
    """Every one is causal: static and delayed scales are fixed before the tokens arrive (calibrated on SciQ support
    text, a corpus no lab task scores, so any task can be scored), the rotation and SmoothQuant factors are fixed
    offline, and per-token scales use each token alone. The recipe table says so for each."""
    names = ("e4m3-wa-static", "e4m3-wa-delayed", "e4m3-wa-static-smoothquant", "e4m3-wa-static-hadamard",
             "nvfp4-wa-static", "nvfp4-wa-static-hadamard", "e4m3-wa-tok")
    return {n: f"{findings.causal_label(RECIPES[n].causal)}: {RECIPES[n].description}" for n in names if n in RECIPES}


if __name__ == "__main__":
    nb.run_exercises(globals())
