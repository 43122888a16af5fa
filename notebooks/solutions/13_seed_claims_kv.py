"""Worked answers to notebook 13's exercises (4-bit KV caches, FP8-KV prefill, the GB10 serving numbers): the
quantizers of fp8lab.kv_quant on synthetic K/V, the committed kv_bits run when this checkout has it, and the
serving arithmetic of fp8lab.serving_claims.

    python notebooks/solutions/13_seed_claims_kv.py
"""
import torch

from fp8lab import findings, kv_bits, serving_claims
from fp8lab import kv_quant as kq
from fp8lab import notebook as nb
from fp8lab.recipes import RECIPES

METHODS = ("nvfp4", "nvfp4-rot", "turbo4-gauss", "turbo4")


def _rel(a, b) -> float:
    return float(((a - b).norm(dim=-1) / a.norm(dim=-1)).mean())


def exercise_1() -> dict:
    """Separate the two ingredients. `nvfp4-rot` rotates but keeps NVFP4's grid; `turbo4-gauss` rotates and uses a
    data-free N(0, 1) codebook; `turbo4` rotates and fits the codebook on calibration keys. With no outlier the four
    are close. With a strong outlier channel, rotating alone does not beat NVFP4 (NVFP4 gives the outlier's block its
    own scale; after rotation every block looks alike), the Gaussian codebook gains little (it assumes a shape the rotated
    data no longer has), and the *fitted* codebook gains most: the gain comes from rotation and fitting together. The
    calibration keys are the first half of the tokens; the error is measured on the second half."""
    g = torch.Generator().manual_seed(0)
    out = {}
    for outlier in (1, 20):
        k = torch.randn(1, 2, 2048, 64, generator=g)
        k[..., 5] *= outlier
        cal = kq.KVCalibration(64, groups=(32,))
        cal.observe(0, "key", k[:, :, :1024])
        p = cal.fit()
        t = k[:, :, 1024:]
        out[f"outlier x{outlier}"] = {m: round(_rel(t, kq.KV4Plan(m, p).quantizer(0, "key")(t)), 4) for m in METHODS}
    return out


def exercise_2() -> dict:
    """Scale bytes per element: NVFP4 stores one 8-bit scale per 16 values (0.5 bit per element); turbo4 one fp16 RMS
    per group of 32 (also 0.5 bit), turbo4-g64 one per 64 (0.25 bit) — at head_dim 64 the 64-group is the whole head.
    A method with fewer scale bits must win back the coarser scale with a better codebook to stay ahead at equal
    *total* bits: compare the methods at the same bits, never at the same element width alone."""
    return {f"head_dim {d}": {m: kq.bits_per_element(m, d) for m in ("nvfp4", "turbo4", "turbo4-g64")}
            for d in (64, 128)}


def exercise_3() -> dict:
    """Read the committed kv_bits run: the layers its sensitivity windows ranked highest, against the first and last
    layers, and the perplexity of keeping the data's pick against keeping the ends (paired over windows, with its
    interval). An interval that includes zero means this run cannot say which rule is better, whatever the overlap.
    Without a recorded run the answer says how to make it."""
    run = nb.OUTPUTS / "kv_bits"
    if not (run / "summary.json").is_file():
        return {"recorded": False, "make it": "python -m fp8lab.kv_bits --record"}
    res = kv_bits.load(run)
    out = {"provenance": nb.provenance_line(res["provenance"])}
    for claim, verdict, ev in kv_bits.verdicts(res):
        if "first and last" in claim:
            out[claim] = f"{verdict}: {ev}"
    t = kv_bits.pooled(res, "nvfp4-sens4", "nvfp4-hp2")
    out["nvfp4-sens4 vs nvfp4-hp2"] = "not in this run" if t is None else findings.ci(*t)
    return out


def exercise_4() -> dict:
    """At a long context the KV cache is read for every token too, so bytes per token rise and the ceiling falls.
    For these MoE models with few full-attention layers (and fixed-size linear-attention state) the drop is small,
    so the verdict of the claim nearest its ceiling does not change between an empty cache and an 8k one — the
    weights dominate the bytes."""
    rows = serving_claims.claims_table(context=8192)
    rows = [r for r in rows if r.get("ceiling_tok_s")]
    r = min(rows, key=lambda r: abs(r["fraction_of_ceiling"] - 1))
    return {"claim": r["id"], "claimed tok/s": r["tokens_per_s"], "ceiling, empty cache": round(r["ceiling_tok_s"], 1),
            "ceiling, 8k context": round(r["ceiling_tok_s_ctx"], 1),
            "over the ceiling, empty cache": r["tokens_per_s"] > r["ceiling_tok_s"],
            "over the ceiling, 8k context": r["tokens_per_s"] > r["ceiling_tok_s_ctx"]}


def exercise_5() -> dict:
    """Each is causal: a token's K/V are stored from that token alone plus per-layer constants (NVFP4's global scale,
    the codebook, the rotation's signs). In the sweep the constants are fitted on the first tokens the model sees
    and then frozen (see each recipe's description), so nothing later in a window influences an earlier position."""
    names = ("nvfp4-kv", "nvfp4-kv-hp2", "turbo4-kv", "turbo4-kv-gauss")
    return {n: f"{findings.causal_label(RECIPES[n].causal)}: {RECIPES[n].description}" for n in names if n in RECIPES}


if __name__ == "__main__":
    nb.run_exercises(globals())
