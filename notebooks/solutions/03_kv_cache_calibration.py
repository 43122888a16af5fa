"""Worked answers to notebook 03's exercises (the FP8 KV cache: calibration and drift). Exercises 1, 2 and 4 run the
model on short windows (seconds to a minute on a CPU); the notebook's commands are the full-size versions.

    python notebooks/solutions/03_kv_cache_calibration.py
"""
import functools

import torch

from fp8lab import calibration, data, kv_drift, models, recipes
from fp8lab import notebook as nb
from fp8lab.calibration import StaticKVScales, scale_from_amax

GPU_ONLY: set = set()
L = 128          # tokens per window here: enough to show the effect, short enough for a test

CODE = '''def quantize(x, scale):
    codes = torch.round(x / scale).clamp(-448, 448)
    return codes * scale
for layer in model.layers:
    out = layer(out)
''' * 8


@functools.lru_cache(maxsize=1)
def _lm():
    return models.load_model(verbose=False)


def _ids(text: str, n: int = L) -> torch.Tensor:
    return _lm().tokenizer(text, return_tensors="pt")["input_ids"][:, :n]


def _ppl(ids, scales=None) -> float:
    import contextlib

    model = _lm().model
    ctx = calibration.static_kv(model, scales) if scales is not None else contextlib.nullcontext()
    with ctx:
        nll = kv_drift.token_nll(model, ids)
    return float(torch.tensor(nll).mean().exp())


def _calibrate(ids, granularity="tensor") -> calibration.KVObserver:
    obs = calibration.KVObserver(ids.shape[1], granularity)
    with calibration.observe_kv(_lm().model, obs), torch.no_grad():
        _lm().model(ids)
    return obs


def exercise_1() -> dict:
    """Does a frozen scale transfer? Calibrate on code, evaluate on prose (and on prose itself, for reference).

    A per-layer scale is amax / 448: it only decides which values fall below E4M3's normal range (2**-6 * scale)
    and whether any saturate. Scales from code and from prose differ per layer; what matters is whether the prose's
    keys and values exceed the code's maxima (they saturate) — the perplexity change below says how much it cost."""
    prose = _ids(data.load_corpus("boolq").text[:6000])
    code = _ids(CODE)
    base = _ppl(prose)
    res = {}
    for name, src in (("calibrated on prose", prose), ("calibrated on code", code)):
        res[name] = round(100 * (_ppl(prose, _calibrate(src).scales("e4m3")) / base - 1), 3)
    res["scale 1.0"] = round(100 * (_ppl(prose, StaticKVScales.uncalibrated(_lm().model.config.num_hidden_layers)) / base - 1), 3)
    return {"perplexity change on prose (%), one window": res, "tokens": prose.shape[1],
            "note": "one short window: a direction, not an interval (kv_drift gives intervals over windows)"}


def exercise_2() -> dict:
    """KIVI's split: per-channel scales for keys, one scale per layer for values, frozen after calibration.

    Keys carry outliers in fixed channels, so a per-channel key scale keeps the ordinary channels' precision;
    values have no such structure. The StaticKVScales below holds [1, H, 1, D]-shaped key scales (broadcast over
    batch and tokens) and scalar value scales."""
    prose = _ids(data.load_corpus("boolq").text[:6000])
    per_ch, per_t = _calibrate(prose[:, :64], "channel"), _calibrate(prose[:, :64], "tensor")
    kivi = StaticKVScales("e4m3", {i: scale_from_amax(a) for i, a in per_ch.k_amax.items()},
                          {i: scale_from_amax(a) for i, a in per_t.v_amax.items()}, "keys per channel, values per layer")
    base = _ppl(prose)
    return {"key scale shape (layer 0)": tuple(kivi.k[0].shape), "value scale shape (layer 0)": tuple(kivi.v[0].shape),
            "KIVI split, change (%)": round(100 * (_ppl(prose, kivi) / base - 1), 3),
            "both per layer, change (%)": round(100 * (_ppl(prose, per_t.scales("e4m3")) / base - 1), 3),
            "calibrated on": "the window's first 64 tokens, evaluated on all of it"}


def exercise_3() -> dict:
    """Which KV recipes are oracles, and what is each one's causal counterpart?

    An oracle's scale spans the whole window (per tensor, or per channel over every token); its counterpart uses
    one scale per token and head (or calibrated-then-frozen scales), which a server can run."""
    kv = [r for r in recipes.RECIPES.values() if r.key is not None]
    return {r.name: ("causal" if r.causal else f"ORACLE -> {recipes.CAUSAL_COUNTERPART.get(r.name, '(none listed)')}")
            for r in kv}


def exercise_4() -> dict:
    """Push further into the context: what `python -m fp8lab.kv_drift --seq-len 4096 --windows 4` computes, here
    on two short windows (the CLI reloads the model; this reuses the one loaded above).

    The full command costs minutes per configuration on a CPU, and the attention's share of the time grows with
    the window. The rows below have the CLI's format: a perplexity change per position bucket, with its interval."""
    lm = _lm()
    windows, _ = data.token_windows(lm.tokenizer, data.load_corpus("boolq").text, 64, 2, seed=0)
    nll = kv_drift.run(lm.model, windows, ("baseline", "e4m3-uncal", "e4m3-dyn"), progress=False)
    rows = kv_drift.summarize(nll, 64, n_boot=200)
    return {"table": "\n" + kv_drift.format_table(rows), "full command": "python -m fp8lab.kv_drift --seq-len 4096 --windows 4"}


if __name__ == "__main__":
    nb.run_exercises(globals())
