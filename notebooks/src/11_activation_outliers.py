PATH = "notebooks/11_activation_outliers.ipynb"
CELLS = [
("md", r"""
# 11 · Activations: where the large values are, how their scales are chosen, and how to tame them

**The big idea.** Weights are quantized once, offline, by whoever ships the checkpoint. Activations — the inputs of
every Linear layer — are quantized on every forward, and they are not well-behaved: a few *channels* carry values many
times larger than the rest, and on a few *tokens* some values explode further. A per-tensor scale is set by the single
largest value, so everything else is squeezed towards the bottom of the format's window.

**The key insight.** There are two different kinds of outliers and three different cures:

* **channel outliers** (the same channels on every token) are fixed by anything that treats channels separately:
  SmoothQuant moves them into the weights (`W x = (W·diag(s))·(x/s)`), a Hadamard rotation spreads each channel over
  all of them (`W x = (W Rᵀ)(R x)`);
* **token outliers** (one token, huge everywhere) are fixed by a scale per token — and *not* by a rotation, which only
  spreads the token's size over its own channels;
* the **format** decides how much any of this matters: E4M3's exponent gives every value the same relative precision
  over a window of 2¹⁷·⁸, INT8's uniform grid does not, and NVFP4's 16-element blocks already give each small group
  its own scale.

And one rule about honesty: a scale that looks at values the server would not have yet is an **oracle**.

**What we can measure here.** Exactly on the CPU (fake quantization): the statistics of every Linear input on real
text, the quality (perplexity on the lab's BoolQ windows, with paired intervals) of each scaling strategy and each
transform. **What we cannot:** speed (a transform costs a Hadamard or a division per token on a GPU; notebooks 06–07
measure kernels), a bf16 checkpoint — *the model's weights are 4-bit GGUF (Q4_1) dequantized to float32: the baseline is
already a quantized model* — and models larger than 135M parameters, where massive activations are known to be
larger still.

The quality results come from `python -m fp8lab.outlier_study --out outputs/outliers` (committed with its provenance);
the cells that compute live run on a short slice.
"""),
("code", r"""
import logging, warnings
logging.disable(logging.WARNING); warnings.filterwarnings("ignore")   # library import chatter, not results
import transformers; transformers.utils.logging.disable_progress_bar()
import os
from pathlib import Path
import torch
from fp8lab import data, models, outliers as O, outlier_study as S
from fp8lab.provenance import describe
from fp8lab.store import read_json
SMALL = os.environ.get("FP8LAB_SMALL") == "1"   # the tests set this: one short window
REPO = Path.cwd().parent if Path.cwd().name == "notebooks" else Path.cwd()
OUT = REPO / "outputs/outliers"
lm = models.load_model(verbose=False)
print(lm.model_note)
"""),
("md", r"""
## 1 · Where the large values are

A hook on every Linear records its input: the largest |x| per channel (over tokens) and per token (over channels), and
how many elements exceed 448, E4M3's largest value at scale 1. Linears that read the same tensor (q/k/v; gate/up) share
one row. Live, on one held-out BoolQ window (disjoint from the windows the quality numbers are scored on):
"""),
("code", r"""
seq = 128 if SMALL else 512
test, _ = data.token_windows(lm.tokenizer, data.load_corpus("boolq").text, 512, 16)   # the scored windows
cal = O.calibration_windows(lm.tokenizer, 1, 512, "boolq", exclude=test)[:, :seq]    # a held-out one
live = O.calibrate(lm.model, windows=cal, keep_tokens=True)
live_rows = O.summarize(live, O.input_groups(lm.model))
print(f"{len(live_rows)} Linear inputs, {sum(r['n_over_448'] for r in live_rows)} elements above 448 at scale 1\n")
print(f"{'layer':>5} {'input':8s} {'max |x|':>9} {'> 448':>6} {'chan max/median':>16} {'tok max/median':>15}"
      f"  top channels      top positions")
for r in sorted(live_rows, key=lambda r: -r["amax"])[:10]:
    print(f"{r['layer']:>5} {r['kind']:8s} {r['amax']:9.1f} {r['n_over_448']:>6} {r['chan_ratio']:>16.1f} "
          f"{r['tok_ratio']:>15.1f}  {str(r['top_channels'][:3]):17s} {r['top_positions'][:3]}")
"""),
("md", r"""
The committed run does the same over all calibration windows (`outputs/outliers/stats.json`): per layer, the largest
value of each input kind, and two ratios. *Channel structure* is how far the largest per-channel maximum stands above
the median channel; *token structure* the same over tokens. An input whose outliers sit in fixed channels has a high
channel ratio and a token ratio near 1 (every token has them); an input with a few huge tokens has both high.
"""),
("code", r"""
stats = read_json(OUT / "stats.json") if (OUT / "stats.json").is_file() else None
prov = read_json(OUT / "provenance.json") if (OUT / "provenance.json").is_file() else {}
if stats is None:
    print("outputs/outliers/stats.json is not recorded yet: showing the live window instead.\n"
          "Make it with: python -m fp8lab.outlier_study --parts stats --out outputs/outliers")
    stats = {"rows": live_rows, "threshold": O.E4M3_AT_SCALE_1,
             "settings": {"calibration": f"1 x {seq} tokens (live)", "model_note": lm.model_note}}
else:
    print(describe(prov["stats"]))
fig = S.plot_structure(stats)
"""),
("md", r"""
**Reading it.** Two patterns, in different places:

* the inputs of q/k/v and of gate/up — the RMSNorm outputs of the residual stream — are **channel-structured**: their
  channel ratio is high in every layer and their token ratio stays near 1. The top-channel indices printed above repeat
  from layer to layer: the residual stream carries the same few large channels through the whole network, and every
  token has them;
* the inputs of down_proj (the MLP's SiLU(gate)·up) hold the largest values, and in a few layers they are
  **token-structured**: one position of the window is far above every other (see `top positions`). These are the
  "massive activations" of large models, here at 135M parameters, and the only values above 448.

The heat maps show one window of each kind (|x| on a log colour scale, max-pooled to fit the screen):
"""),
("code", r"""
if "examples" in stats:
    fig = S.plot_heatmaps(stats)
else:   # live: the same two examples from the window above
    stats["examples"] = S.examples(S.Setup(lm, test, None, cal, {}, {"stats": live}), live_rows)
    fig = S.plot_heatmaps(stats)
"""),
("md", r"""
## 2 · What a transform does to the distribution

For the same two inputs: the distribution of log₂(|x| / max|x|) — how far below the tensor's own maximum each value
sits — as it is, after SmoothQuant (α = 0.5) and after a randomized Hadamard rotation. The dashed line is where E4M3
with a per-tensor scale leaves its normal range (2⁻⁶/448 of the max: below it, fewer mantissa bits); the dotted line
is INT8's smallest step (1/127 of the max: below half of it, a value becomes 0).
"""),
("code", r"""
fig = S.plot_histograms(stats)
print(S.format_sqnr(stats))
"""),
("md", r"""
**Reading it.** On the channel-structured input, both transforms lift the bulk of the values towards the maximum: the
maximum was set by a few channels, and now it is not. On the token-structured input they differ: SmoothQuant shrinks
the channels that are large on the massive token (they dominate its calibration statistics), while a rotation spreads
the massive token over its own channels — the token stays far above every other token.

Two signal-to-noise numbers per case, because they answer different questions: the tensor-wide SQNR is dominated by
the largest values (a few massive elements carry most of the energy), the median over tokens says what a *typical*
token keeps. Read the columns:

* **E4M3 per tensor hardly moves.** Its exponent gives small values the same relative precision as large ones as long
  as they stay above the dashed line; a transform only rescues the few that fell below it.
* **INT8 per tensor is where the transforms matter** — on the channel-structured input. Its uniform grid spends its
  levels on the gap between bulk and outliers; SmoothQuant closes part of the gap and the rotation closes it so well
  that rotated INT8 overtakes E4M3 (a near-Gaussian tensor suits a uniform grid). On the token-structured input the
  typical token keeps almost nothing with or without a transform: one token sets the scale, and no per-channel trick
  changes that. Only a per-token scale does (last column, for E4M3).
* **NVFP4 does not need them.** Its 16-element blocks give an outlier channel a scale of its own; spreading the outlier
  over all channels makes every block look alike and removes that advantage.
Each transform is exact in real arithmetic: on a window, the model's logits change only by float rounding.
"""),
("code", r"""
if "exactness" in stats:
    ex = stats["exactness"]
else:
    ex = S.exactness(S.Setup(lm, test, None, cal, {}, {"stats": live}))
for k, v in ex.items():
    print(f"{k:16s} max |logit change| / max |logit| = {v:.1e}   (no quantization)")
"""),
("md", r"""
## 3 · How the activation scale is chosen, and what is causal

W8A8 E4M3 with per-tensor weights and the input scale chosen five ways (`fp8lab.activation_scaling`):

| strategy | scale of a Linear input | causal? |
|---|---|---|
| static | max \|x\| over 8 held-out calibration windows, then frozen; larger values saturate | yes |
| dynamic per tensor | max \|x\| of this forward's whole input | **oracle** for scoring (below) |
| dynamic per token | max \|x\| of each token | yes |
| dynamic 1×128 groups | max \|x\| of each 128-channel group of each token (DeepSeek-V3) | yes |
| delayed | max of the last 16 forwards' maxima (TransformerEngine's amax history), primed on the calibration windows | yes |

*Causal* means the numbers at position t depend only on tokens up to t. A perplexity run scores all positions of a
window in one forward, so a per-tensor scale computed from that forward has seen every later position — including the
token being predicted. That is an oracle, even if a small one (one number per tensor leaks). A server does the causal
versions of it: at decode each forward holds one token (the per-tensor scale *is* the per-token scale), and for a
prompt prefill the whole prompt is known anyway. Per-token and per-group scales are causal everywhere; static and
delayed scales are fixed before the tokens arrive.
"""),
("code", r"""
if (OUT / "scaling.csv").is_file():
    sc = S.read_csv(OUT / "scaling.csv")
    print(describe(prov["scaling"]), "\n")
    print(S.format_rows(sc))
    fig = S.plot_quality(sc, "W8A8 E4M3: how the activation scale is chosen", lm.model_note)
else:
    sc = None
    print("not recorded yet: python -m fp8lab.outlier_study --parts scaling --out outputs/outliers")
"""),
("md", r"""
Every row is a perplexity change against the unquantized baseline on the same 16 windows, with its 95 % paired bootstrap
interval; `vs ref` isolates the activations: the same row against E4M3 weights alone. Read the activation column
first (the weights are the same in every row), and read a difference between two strategies only where their
intervals against the weight-only row do not overlap.
"""),
("code", r"""
if sc is not None:
    act = sorted((r for r in sc if r.get("delta_vs_ref_pct") is not None), key=lambda r: r["delta_vs_ref_pct"])
    print("activation cost, smallest first (vs E4M3 weights alone):")
    for r in act:
        print(f"  {r['config']:24s} {r['causal']:7s} {r['delta_vs_ref_pct']:+6.2f} % "
              f"[{r['ref_ci95_low']:+.2f}, {r['ref_ci95_high']:+.2f}]")
    if (OUT / "per_window").is_dir():   # two strategies against each other, paired on the same windows
        print("\nhead to head (paired on the same windows):")
        for a, b in (("e4m3-wa-dyn-token", "e4m3-wa-dyn-tensor"), ("e4m3-wa-dyn-token", "e4m3-wa-static"),
                     ("e4m3-wa-static", "e4m3-wa-dyn-tensor"), ("e4m3-wa-delayed", "e4m3-wa-static")):
            d, lo, hi = S.paired(OUT, a, b)
            print(f"  {a:22s} vs {b:22s} {d:+6.2f} % [{lo:+.2f}, {hi:+.2f}]  "
                  f"{'resolved' if lo > 0 or hi < 0 else 'not resolved: the interval includes 0'}")
"""),
("md", r"""
**Reading it.** Look first at the size of the activation column next to the weight-only row: quantizing every Linear
input to E4M3 costs about as much again as quantizing the weights, whatever the strategy. Then at the order, with the
head-to-head lines for what 16 windows can and cannot resolve:

* **finer scales cost least** — in the point estimates; of the head-to-head lines, per-token against the per-tensor
  oracle is the one to check for resolution. On this model the massive activations sit at the first position of every window in a
  few down_proj inputs (section 1; it happens although the windows start mid-text, with no BOS token — the model makes
  its first position an "attention sink"). Every per-tensor strategy must stretch its scale over that one token; a
  per-token or 1×128 scale gives it its own;
* **the oracle buys nothing.** The dynamic per-tensor scale sees every position of the window, yet it is not better
  than a scale frozen on other text: the largest value it could learn from the future is the same first-position value
  that every window, calibration windows included, contains;
* **delayed scaling tracks static scaling** for the same reason: its amax history is a history of that one value. A
  history earns its keep where the range drifts (training, where TransformerEngine uses it), not over a stationary
  stream of text.
"""),
("md", r"""
## 4 · Taming the outliers: SmoothQuant and a Hadamard rotation, by format

Static per-tensor input scales (causal), per-tensor weights, three formats: W8A8 E4M3, W8A8 INT8 (SmoothQuant's own
setting) and W4A4 NVFP4 (16-element blocks, E4M3 block scales, a calibrated FP32 global input scale). Each without a
transform, after SmoothQuant (an α sweep for E4M3) and after a randomized Hadamard rotation of every Linear input and
weight. SmoothQuant's factors and every static scale are calibrated on the held-out windows only; `vs ref` compares
each row with the same format without a transform.
"""),
("code", r"""
if (OUT / "taming.csv").is_file():
    tm = S.read_csv(OUT / "taming.csv")
    for k in (k for k in prov if k.startswith("taming")):
        print(k, "|", describe(prov[k]))
    print()
    print(S.format_rows(tm))
    fig = S.plot_quality(tm, "Taming outliers before static per-tensor W8A8 / W4A4 NVFP4", lm.model_note)
else:
    tm = None
    print("not recorded yet: python -m fp8lab.outlier_study --parts taming --out outputs/outliers")
"""),
("code", r"""
if tm is not None:
    for fmt in ("e4m3", "int8", "nvfp4"):
        rows = [r for r in tm if r["fmt"] == fmt]
        base = next(r for r in rows if r["transform"] == "none")
        best = min(rows, key=lambda r: r["delta_pct"])
        print(f"{fmt:6s} no transform {base['delta_pct']:+8.2f} %   best: {best['config']} {best['delta_pct']:+8.2f} % "
              f"[{best['ci95_low']:+.2f}, {best['ci95_high']:+.2f}]")
"""),
("md", r"""
**How to read the two tables together.** The statistics say *where* the outliers are; the quality tables say whether
a format cares. A transform can only help where the format was hurt by the spread between outliers and bulk: compare
each format's no-transform row with its weight-only cost and with the per-token row of part 3 (which removes token
outliers without any transform). Where a transform's interval against `ref` includes zero, this run cannot tell it from
doing nothing.

Two caveats specific to this model. Its weights are already 4-bit (Q4_1): SmoothQuant multiplies weight columns by
s and the rotation mixes them, so both change what the second quantization (to E4M3, INT8 or NVFP4) rounds — and the
NVFP4 rows re-quantize 4-bit weights onto another 4-bit grid (README: that compounds two roundings). And the massive
activations sit on one position of each window: a static per-tensor scale must cover them, which is the situation
per-token scales were made for.

## Things to try

* `python -m fp8lab.outlier_study --parts taming --alphas 0.1,0.3,0.5,0.7,0.9`: where is SmoothQuant's best α for
  E4M3, and is it the paper's 0.5?
* `--calib sciq`: calibrate on science text and score on Wikipedia passages. Do frozen scales transfer?
* `O.HadamardRotation(kind="block")`: the block-diagonal rotation (blocks of 64 for 576 channels) against the full
  Kronecker one — is mixing inside 64 channels enough?
* Per-token scales *after* a rotation (`Recipe(..., act=QuantSpec("e4m3", "token"), transform=O.HadamardRotation())`):
  the two cures combined, one per kind of outlier.
* The sweep's recipes (`python -m fp8lab.sweep --list-recipes`): `e4m3-wa-static`, `e4m3-wa-delayed`,
  `e4m3-wa-static-smoothquant`, `e4m3-wa-static-hadamard`, `nvfp4-wa-static`, `nvfp4-wa-static-hadamard`,
  `e4m3-wa-tok` run the same ideas through the main sweep (calibrated on SciQ text, so any task can be scored).
"""),
]
