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
  over a window of 2¹⁴·⁸ (its normal range; subnormals stretch it to 2¹⁷·⁸ with fewer bits), INT8's uniform grid
  does not, and NVFP4's 16-element blocks already give each small group its own scale.

And one rule about honesty: a scale that looks at values the server would not have yet is an **oracle**.

**What we can measure here.** Exactly on the CPU (fake quantization): the statistics of every Linear input on real
text, the quality (perplexity on the lab's BoolQ windows, with paired intervals) of each scaling strategy and each
transform. **What we cannot:** speed (a transform costs a Hadamard or a division per token on a GPU; notebooks 06–07
measure kernels), a bf16 checkpoint — *the model's weights are 4-bit GGUF (Q4_1) dequantized to float32: the baseline is
already a quantized model* — and models larger than 135M parameters, where massive activations are known to be
larger still.

The committed results come from `python -m fp8lab.outlier_study --record` (into `outputs/outliers/`: `stats.json`,
`scaling.csv`, `taming.csv`, the per-window NLLs in `per_window/`, and `provenance.json` with one record per part);
each section prints its provenance, or one "not recorded yet" line and falls back to the live slice or skips. The
cells that compute live run on one short held-out window. Every sentence about what the run *shows* is rendered from
those files; the markdown explains mechanisms and what to look for.
"""),
("code", r"""
from fp8lab import notebook as nb
import torch
from fp8lab import data, findings, models, outliers as O, outlier_study as S
from fp8lab.store import read_json
SMALL = nb.small()          # the tests set FP8LAB_SMALL=1: one short window
lm = models.load_model(verbose=False)
print(lm.model_note)        # the baseline is already a quantized (4-bit) model
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
OUT = nb.recorded_part("outliers", "stats", "stats.json", "provenance.json")
stats = read_json(OUT / "stats.json") if OUT else None
if stats is None:
    print("showing the live window instead")
    stats = {"rows": live_rows, "threshold": O.E4M3_AT_SCALE_1,
             "settings": {"calibration": f"1 x {seq} tokens (live)", "model_note": lm.model_note}}
nb.show(S.plot_structure(stats))
for line in findings.outlier_structure_findings(stats["rows"], stats["threshold"]):
    print("-", line)
"""),
("md", r"""
**What to look for.** Two patterns, which need different cures:

* inputs whose large values sit in the **same channels on every token** — a high channel ratio with a token ratio
  near 1, and the same top-channel index from layer to layer (the residual stream carries its large channels through
  the whole network; the RMSNorm outputs feeding q/k/v and gate/up inherit them);
* inputs with a few **huge tokens** — a token ratio far above 1, and one position standing out in `top positions`.
  These are the "massive activations" known from large models; if they are the only values above 448, only they
  force a per-tensor scale up.

The lines under the figure say which kind each input is on this run.

The heat maps show one window of each kind (|x| on a log colour scale, max-pooled to fit the screen):
"""),
("code", r"""
if "examples" not in stats:   # live: the same two examples from the window above
    stats["examples"] = S.examples(S.Setup(lm, test, None, cal, {}, {"stats": live}), live_rows)
nb.show(S.plot_heatmaps(stats))
"""),
("md", r"""
## 2 · What a transform does to the distribution

For the same two inputs: the distribution of log₂(|x| / max|x|) — how far below the tensor's own maximum each value
sits — as it is, after SmoothQuant (α = 0.5) and after a randomized Hadamard rotation. The dashed line is where E4M3
with a per-tensor scale leaves its normal range (2⁻⁶/448 of the max: below it, fewer mantissa bits); the dotted line
is INT8's smallest step (1/127 of the max: below half of it, a value becomes 0).
"""),
("code", r"""
nb.show(S.plot_histograms(stats))
print(S.format_sqnr(stats))
print()
for line in findings.sqnr_findings(stats):
    print("-", line)
"""),
("md", r"""
**What to look for.** On a channel-structured input a transform should lift the bulk of the values towards the
maximum: the maximum was set by a few channels, and after SmoothQuant or a rotation it is not. On a token-structured
input they differ: SmoothQuant shrinks the channels that are large on the massive token (they dominate its
calibration statistics), while a rotation spreads the massive token over its own channels — the token stays far above
every other token, and only a per-token scale gives it its own.

Two signal-to-noise numbers per case, because they answer different questions: the tensor-wide SQNR is dominated by
the largest values (a few massive elements carry most of the energy), the median over tokens says what a *typical*
token keeps. The mechanisms behind the columns:

* **E4M3 per tensor**: its exponent gives small values the same relative precision as large ones as long as they stay
  above the dashed line; a transform can only rescue the few that fell below it.
* **INT8 per tensor**: its uniform grid spends its levels on the gap between bulk and outliers, so closing the gap is
  where a transform can matter most; a near-Gaussian (rotated) tensor suits a uniform grid.
* **NVFP4**: its 16-element blocks already give an outlier channel a scale of its own; spreading the outlier over all
  channels makes every block look alike and can remove that advantage.

The lines under the table give each change in dB on this run.
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
| static | max \|x\| over the held-out calibration windows, then frozen; larger values saturate | yes |
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
SC = nb.recorded_part("outliers", "scaling", "scaling.csv", "provenance.json")
sc = S.read_csv(SC / "scaling.csv") if SC else None
if sc is not None:
    print(f"n = {sc[0]['n']} windows of {sc[0]['seq_len']} tokens; {lm.model_note}\n")
    print(S.format_rows(sc))
    nb.show(S.plot_quality(sc, "W8A8 E4M3: how the activation scale is chosen", lm.model_note))
"""),
("md", r"""
Every row is a perplexity change against the unquantized baseline (itself a 4-bit model) on the same windows, with
its 95 % paired bootstrap interval; `vs ref` isolates the activations: the same row against E4M3 weights alone. Read
the activation column first (the weights are the same in every row), and read a difference between two strategies
from the head-to-head lines below, which pair them on the same windows.

**What to look for.** Finer scales should cost least where a few positions carry the massive values: every per-tensor
strategy must stretch its scale over them, a per-token or 1×128 scale gives them their own. The per-tensor *oracle*
sees every position of the window, but if the largest value it could learn from the future is one that every window
(calibration windows included) contains at the same place, it has nothing to gain over a frozen scale. Delayed scaling
keeps a history of maxima: it earns its keep where the range drifts (training, where TransformerEngine uses it), not
over a stationary stream of text.
"""),
("code", r"""
if sc is not None:
    pairs = {}
    if (SC / "per_window").is_dir():   # two strategies against each other, paired on the same windows
        for a, b in (("e4m3-wa-dyn-token", "e4m3-wa-dyn-group128"),
                     ("e4m3-wa-dyn-token", "e4m3-wa-dyn-tensor"), ("e4m3-wa-dyn-token", "e4m3-wa-static"),
                     ("e4m3-wa-static", "e4m3-wa-dyn-tensor"), ("e4m3-wa-delayed", "e4m3-wa-static")):
            try:
                pairs[(a, b)] = S.paired(SC, a, b)
            except (OSError, ValueError) as e:
                print(f"{a} vs {b}: not comparable here ({e})")
    for line in findings.scaling_findings(sc, pairs):
        print("-", line)
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
TM = nb.recorded_part("outliers", "taming", "taming.csv", "provenance.json")
tm = S.read_csv(TM / "taming.csv") if TM else None
if tm is not None:
    print(f"n = {tm[0]['n']} windows of {tm[0]['seq_len']} tokens; {lm.model_note}\n")
    print(S.format_rows(tm))
    nb.show(S.plot_quality(tm, "Taming outliers before static per-tensor W8A8 / W4A4 NVFP4", lm.model_note))
"""),
("code", r"""
if tm is not None:
    for line in findings.taming_findings(tm):
        print("-", line)
"""),
("md", r"""
**How to read the two tables together.** The statistics say *where* the outliers are; the quality tables say whether
a format cares. A transform can only help where the format was hurt by the spread between outliers and bulk: compare
each format's no-transform row with its weight-only cost and with the per-token row of part 3 (which removes token
outliers without any transform). Where a transform's interval against `ref` includes zero, this run cannot tell it from
doing nothing.

Two caveats specific to this model. Its weights are already 4-bit (Q4_1): SmoothQuant multiplies weight columns by
s and the rotation mixes them, so both change what the second quantization (to E4M3, INT8 or NVFP4) rounds — and the
NVFP4 rows re-quantize 4-bit weights onto another 4-bit grid (README: that compounds two roundings). And where the massive
activations sit on one position of each window (section 1 prints where they are on this run), a static per-tensor
scale must cover them, which is the situation per-token scales were made for.

## Exercises

Worked answers: `notebooks/solutions/11_activation_outliers.py` (small synthetic tensors, seconds on a CPU; the full
runs are the commands in each answer).

1. SmoothQuant's α: on a tensor with a few outlier channels, sweep α and find where the W8A8 error of `x Wᵀ` is
   smallest, for INT8 and for E4M3. Is it the paper's 0.5? (On the model: `python -m fp8lab.outlier_study --parts
   taming --alphas 0.1,0.3,0.5,0.7,0.9 --out runs/outliers`.)
2. Do frozen scales transfer? Calibrate a static per-tensor scale on one batch and apply it to a batch whose maximum
   is larger: how many values saturate, and what does it cost against a dynamic per-token scale? (On the model:
   `--calib sciq`.)
3. Mixing inside a block is enough? Compare the block-diagonal rotation (`kind="block"`) with the full Kronecker one
   on an input whose outlier channels sit in one block.
4. Two cures for two kinds of outlier: on an input with both a channel outlier and a token outlier, compare E4M3 per
   tensor, per tensor after a rotation, per token, and per token after a rotation.
5. The same ideas run through the main sweep as recipes: which of `e4m3-wa-static`, `e4m3-wa-delayed`,
   `e4m3-wa-static-smoothquant`, `e4m3-wa-static-hadamard`, `nvfp4-wa-static`, `nvfp4-wa-static-hadamard`,
   `e4m3-wa-tok` are causal, and on what are they calibrated?
"""),
]
