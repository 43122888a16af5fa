PATH = "notebooks/01_number_formats.ipynb"
CELLS = [
("md", r"""
# 01 · Number formats and the underflow probe

**The big idea.** An 8-bit float (FP8) keeps a sign, a few exponent bits and a few mantissa bits. E4M3 spends its
bits on precision (3 mantissa bits, range ±448), E5M2 on range (2 mantissa bits, range ±57344). NVFP4's elements
are 4-bit E2M1 numbers — only `{0, 0.5, 1, 1.5, 2, 3, 4, 6}` — and live or die by their per-16 scales.

**The key insight.** A format is a fixed *window* of magnitudes. Values below the window are not approximated, they
are erased. A scale factor slides the tensor into the window first. That is why every production "FP8 recipe" is
really an FP8-plus-scaling recipe.

**What we can measure here.** Everything in this notebook is exact arithmetic on the CPU: rounding is checked bit for
bit against `ml_dtypes` and PyTorch's own casts (`tests/test_formats.py`: every bf16 and fp16 bit pattern, every
code, 10⁶ random floats and every tie, with no mismatch allowed). **What we cannot:** speed. That needs a GPU
(notebooks 06, 07). Nothing here is written to `outputs/`: every number below is computed as the notebook runs,
except the two perplexity rows of the committed sweep that one cell reads from `outputs/`.
"""),
("code", r"""
import numpy as np
import torch
from fp8lab import formats, probe, grids, metrics
from fp8lab import notebook as nb
from fp8lab.formats import E4M3, E5M2, E2M1, E8M0
from fp8lab.scaling import QuantSpec, fake_quant
SMALL = nb.small()          # FP8LAB_SMALL=1 (the tests): smaller tensors, same cells
for f in (E4M3, E5M2, E2M1, E8M0):
    print(f)
"""),
("md", r"""
## One description, every format

Each format above is one `FloatFormat(exp_bits, man_bits, bias, special)`; the value table, max, min normal and min
subnormal are derived from those four fields. Rounding is round-to-nearest-**even**: at an exact midpoint the even
code wins. A few values to build intuition:
"""),
("code", r"""
for x in (3e-4, 0.3, 1.0625, 300.0, 1000.0):
    print(f"{x:>8}:  E4M3 -> {E4M3.round(x):<10g} E5M2 -> {E5M2.round(x):<10g} E2M1 -> {E2M1.round(x):g}")
print("E2M1 grid:", E2M1.table()[:8].tolist())
print("saturate=False (ml_dtypes):", E4M3.round(1000.0, saturate=False), E5M2.round(1e6, saturate=False))
"""),
("md", r"""
## The underflow probe (seed 003 §2), extended to E5M2, NVFP4 and MXFP4

Two tensors of normally distributed activations: *typical* (σ = 1.0) and *small* (σ = 3·10⁻⁴). Each is rounded with
the scale factor **off** (plain rounding in the element format) and **on** (the format's production scaling:
per-tensor amax for E4M3/E5M2, 16-element E4M3 block scales × an FP32 global scale for NVFP4, 32-element E8M0 scales
for MXFP4). Computed now; the sentences under the table are rendered from it.
"""),
("code", r"""
rows = probe.underflow_probe()
print(probe.format_table(rows))
P = {(r["tensor"].split()[0], r["format"], r["scale"]): r for r in rows}
pct = lambda k, f="mean_rel_err": 100 * P[k][f] if f == "mean_rel_err" else P[k][f]
nb.md(f'''**Reading it.** Without a scale, the small tensor is erased in E4M3: {pct(('small', 'e4m3', 'off'), 'flushed_pct'):.1f} %
of its values flush to zero (E4M3's smallest subnormal is 2⁻⁹ = {E4M3.min_subnormal:.5f}; everything below half of it
rounds to 0) and the mean relative error is {pct(('small', 'e4m3', 'off')):.1f} %. With a per-tensor scale the *same*
tensor has {pct(('small', 'e4m3', 'on')):.2f} % error against {pct(('typical', 'e4m3', 'on')):.2f} % for the typical one:
scaling makes the error independent of magnitude. E5M2 survives unscaled (its smallest subnormal is
{E5M2.min_subnormal:.2e}) at {pct(('small', 'e5m2', 'off')) / pct(('small', 'e4m3', 'on')):.1f}× E4M3's scaled error:
one mantissa bit fewer accounts for {pct(('small', 'e5m2', 'on')) / pct(('small', 'e4m3', 'on')):.1f}× (E5M2 with a
scale), the rest comes from its subnormal range: {pct(('small', 'e5m2', 'off'), 'flushed_pct'):.1f} % of the values
still flush to zero and more keep fewer mantissa bits. E2M1 cannot represent anything below 0.5: unscaled, it flushes
{pct(('typical', 'nvfp4', 'off'), 'flushed_pct'):.1f} % of even the *typical* tensor; with NVFP4's block scales its
error is still {pct(('typical', 'nvfp4', 'on')) / pct(('typical', 'e4m3', 'on')):.1f}× E4M3's.''')
"""),
("md", r"""
Seed 003 printed the four E4M3 rows for its own sample. Its numbers are quoted in the code below (they are the
seed's, not ours) beside this run's: the pattern is what to compare, since the exact percentages depend on the sample
and on whether "mean relative error" counts flushed elements (here it does).
"""),
("code", r"""
SEED003_E4M3_PROBE = {("typical", "off"): 2.18, ("typical", "on"): 2.17,      # seed 003 §2, as printed (%)
                      ("small", "off"): 100.00, ("small", "on"): 2.12}
for (t, s), seed in SEED003_E4M3_PROBE.items():
    print(f"{t:8s} scale {s:3s}  seed 003: {seed:6.2f} %   this run: {pct((t, 'e4m3', s)):6.2f} %")
"""),
("md", r"""
## The windows, drawn

Every representable positive value of each format on one log axis, with the two probe tensors' magnitudes marked:
the small tensor sits below E4M3's and E2M1's windows unless a scale moves it up.
"""),
("code", r"""
nb.show(grids.grid_figure())
"""),
("md", r"""
## Seed 002's branchless E2M1 conversion, tested

Seed 002 converts a float to E2M1 with seven compares against the midpoints between neighbouring levels, using `>=`
everywhere. Round-to-nearest-even says an exact midpoint goes to the neighbour with the *even* code. At 0.25, 1.25, 2.5
and 5.0 the even neighbour is the lower one, so those compares must be strict. The seed's sketch rounds those four ties
away from zero; the fixed version is bit-identical to RNE over every bf16/fp16 pattern and 10⁶ random floats
(`tests/test_formats.py`).
"""),
("code", r"""
ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=np.float32)
dec = lambda c: E2M1.decode(torch.from_numpy(c)).tolist()
print("tie      ", ties.tolist())
print("seed (>=)", dec(formats.e2m1_branchless_seed(ties)))
print("fixed    ", dec(formats.e2m1_branchless(ties)))
print("RNE      ", E2M1.round(torch.from_numpy(ties)).tolist())
"""),
("md", r"""
## Granularity: how many values share one scale

One outlier channel is enough to show why the industry moved from per-tensor to per-channel, per-group and block
scales. Below, a weight-like tensor (N(0, 0.02²), 256×1024) with one input column 50× larger than the rest, quantized
every way the lab knows. SQNR in dB (higher is better; every +6 dB is one more bit of effective precision). The
granularity column says how many values share a scale.
"""),
("code", r"""
g = torch.Generator().manual_seed(0)
w = torch.randn(256, 1024, generator=g) * 0.02
w[:, 7] *= 50                                     # an outlier input channel
specs = {
    "E4M3 no scale":        QuantSpec("e4m3", "none"),
    "E4M3 per-tensor":      QuantSpec("e4m3", "tensor"),
    "E4M3 per-channel":     QuantSpec("e4m3", "channel", axis=0),
    "INT8 per-channel":     QuantSpec("int8", "channel", axis=0),
    "E4M3 1x128 groups":    QuantSpec("e4m3", "group", group_size=128),
    "E4M3 128x128 blocks":  QuantSpec("e4m3", "block"),
    "E5M2 per-tensor":      QuantSpec("e5m2", "tensor"),
    "NVFP4 (16, E4M3)":     QuantSpec("e2m1", "nvfp4"),
    "MXFP4 (32, E8M0)":     QuantSpec("e2m1", "mx"),
    "MXFP8 E4M3 (32, E8M0)": QuantSpec("e4m3", "mx"),
}
G = {}
for name, spec in specs.items():
    y = fake_quant(w, spec)
    G[name] = (metrics.sqnr_db(w, y), metrics.flushed_pct(w, y))
    print(f"{name:24s} SQNR {G[name][0]:6.1f} dB   flushed {G[name][1]:5.1f} %")
"""),
("code", r"""
e4c, i8c, e4t = G["E4M3 per-channel"], G["INT8 per-channel"], G["E4M3 per-tensor"]
nb.md(f'''**Reading it.** The outlier column carries most of the energy, so SQNR here mostly measures how well the
*outliers* are stored; per-channel and 1×128 scales put each row's largest element — the outlier — exactly on 448.
The "flushed" column is the other half: **at the same granularity** (one scale per output row), INT8's uniform grid,
whose step is set by the outlier, flushes {i8c[1]:.1f} % of this tensor's ordinary weights against {e4c[1]:.1f} % for
E4M3 (SQNR {i8c[0]:.1f} vs {e4c[0]:.1f} dB). That is the case for a floating grid on *outlier-heavy* tensors — and it
is a statement about this synthetic tensor, at one granularity.''')
"""),
("md", r"""
### The same question on the lab's model

The committed sweep has one INT8 weight recipe and one E4M3 weight recipe, and they do not share a granularity. The
recipe table says which is which; the sentence below is rendered from the committed results files.
"""),
("code", r"""
from fp8lab import findings
main = nb.recorded("", "results.csv")
more = nb.recorded("sweep_more", "results.csv")
nb.md(findings.granularity_note(nb.results_frame(main / "results.csv") if main else None,
                                nb.results_frame(more / "results.csv") if more else None))
"""),
("md", r"""
At the weight level the same-granularity comparison is cheap: load the model's weights and measure SQNR for E4M3
per tensor, E4M3 per channel and INT8 per channel on a few of its Linear layers (the model's weights are 4-bit GGUF
(Q4_1) dequantized to float32, so they already sit on a coarse grid; see notebook 12 for a control with FP32 weights).
"""),
("code", r"""
from fp8lab import models
lm = models.load_model(verbose=False)
layers = lm.model.model.layers
picks = [("layers.0.self_attn.q_proj", layers[0].self_attn.q_proj)]
if not SMALL:
    picks += [(f"layers.{len(layers) // 2}.mlp.down_proj", layers[len(layers) // 2].mlp.down_proj),
              (f"layers.{len(layers) - 1}.self_attn.o_proj", layers[-1].self_attn.o_proj)]
print(f"{'Linear':32s} {'E4M3 per-tensor':>16s} {'E4M3 per-channel':>17s} {'INT8 per-channel':>17s}   (SQNR dB)")
S = {}
for name, lin in picks:
    W = lin.weight.detach().float()
    S[name] = [metrics.sqnr_db(W, fake_quant(W, QuantSpec(*a, **k))) for a, k in
               ((("e4m3", "tensor"), {}), (("e4m3", "channel"), {"axis": 0}), (("int8", "channel"), {"axis": 0}))]
    print(f"{name:32s} {S[name][0]:16.1f} {S[name][1]:17.1f} {S[name][2]:17.1f}")
int8_wins = sum(s[2] > s[1] for s in S.values())
chan_wins = sum(s[1] > s[0] for s in S.values())
grid_gain = [s[2] - s[1] for s in S.values()]                 # INT8 vs E4M3, both per channel (dB)
gran_gain = [s[1] - s[0] for s in S.values()]                 # E4M3 per channel vs per tensor (dB)
nb.md(f'''**Reading it.** At the same granularity (per channel), INT8 has the higher SQNR on {int8_wins} of {len(S)}
Linear(s) here ({min(grid_gain):+.1f} to {max(grid_gain):+.1f} dB), and per-channel E4M3 beats per-tensor E4M3 on
{chan_wins} of {len(S)} ({min(gran_gain):+.1f} to {max(gran_gain):+.1f} dB). Without an outlier column a weight row's
values spread over its range, where INT8's evenly spaced levels can resolve them more finely than E4M3's 3 mantissa
bits, and E4M3's relative error hardly depends on where its scale puts the row. Which grid wins, and how much the
granularity matters, depends on the tensor's distribution: compare the synthetic outlier tensor above.''')
print("model note:", lm.model_note)
"""),
("md", r"""
## Format anatomy: what the bits mean

**The big idea.** Every number in this notebook comes from four fields — exponent bits, mantissa bits, bias, and a
rule for the all-ones exponent. The rule is where the formats really differ: IEEE-style E5M2 spends its top exponent
on Inf and NaN; E4M3 "fn" keeps it finite and gives up only one code pair to NaN; the "fnuz" variants (AMD's and
Graphcore's FP8) move the bias by one, keep every exponent finite and make the would-be negative zero the only NaN.

**The key insight.** The largest value of a format is not a design constant but a consequence of that rule. The table
and sentences below are computed from `fp8lab.formats`, which is checked bit for bit against `ml_dtypes` for every
code of every format here.
"""),
("code", r"""
from fp8lab import anatomy
from fp8lab.formats import E4M3FNUZ, E5M2FNUZ
print(anatomy.format_table(anatomy.format_rows()))
print()
for f in (E4M3, E5M2, E4M3FNUZ, E2M1):
    print(anatomy.why_max(f), "\n")
for r in anatomy.top_codes(E4M3, 2):
    print(f"  {r['code']}  {r['bits']}  {r['value']:>6}  {r['meaning']}")
"""),
("md", r"""
## The MX shared scale, and why MXFP8 scored below per-tensor E4M3 above

The OCP MX rule gives each block of 32 one power-of-two scale, 2^(floor(log2 amax) − emax), where emax is the exponent
of the element format's largest value (8 for E4M3: 448 = 1.75·2⁸). Dividing by it puts the block's amax somewhere in
[2^emax, 2^(emax+1)) — for E4M3, anywhere in [256, 512). E4M3 ends at 448, so every block whose amax lands in
(448, 512) **saturates** its largest values. Since a power of two never changes a mantissa, a block scale buys no
extra precision over one scale per tensor for a tensor like this; the saturated top values are pure loss. Other rules
exist (`scale_rule="rceil"` rounds the exponent up so nothing saturates, as cuBLAS and TransformerEngine do; torchao
offers "ceil" and "even" too), and fp32 scales per 32 values (`"group"`, `group_size=32`) put every block's amax
exactly on 448. Measured on a Gaussian tensor:
"""),
("code", r"""
g = torch.Generator().manual_seed(0)
x = torch.randn(64 if SMALL else 256, 1024, generator=g)
m = anatomy.mx_scale_anatomy(x, "e4m3")
print(f"blocks whose amax lands above 448 (floor rule): {100 * m['frac_blocks_over_max']:.1f} %  "
      f"(log2(512/448) = {100 * np.log2(512 / 448):.1f} % if mantissas were log-uniform)")
print(f"elements saturated: {100 * m['frac_elements_saturated']:.2f} %, carrying "
      f"{100 * m['saturated_error_share']:.0f} % of the squared error (mean relative error {100 * m['saturated_rel_err']:.1f} %)")
for k in ("sqnr_tensor", "sqnr_mx_floor", "sqnr_mx_rceil", "sqnr_group32_fp32"):
    print(f"  {k:18s} {m[k]:6.2f} dB")
"""),
("md", r"""
## NVFP4's two levels

NVFP4 stacks two scales: an fp32 **global** scale per tensor, amax / (6·448), and an **E4M3 block scale** per 16
values, amax_block / 6 / global. The global scale exists so that the largest block scale lands on E4M3's 448 and the
others use its full range. But the block scale is itself rounded to E4M3's 3 mantissa bits: a block whose scale rounds
down pushes its max above 6 (it saturates), one whose scale rounds up uses less of E2M1's grid. Against a counterfactual
with exact fp32 block scales, that rounding costs:
"""),
("code", r"""
n = anatomy.nvfp4_levels(x)
print(f"global scale {n['global_scale']:.4g}; E4M3 block scale / exact fp32 block scale in "
      f"[{n['ratio_min']:.4f}, {n['ratio_max']:.4f}], mean |ratio - 1| = {100 * n['mean_abs_scale_rounding']:.2f} %, "
      f"{100 * n['frac_rounded_down']:.0f} % of blocks rounded down")
print(f"SQNR with E4M3 block scales {n['sqnr_e4m3_scales']:.2f} dB, with fp32 block scales {n['sqnr_fp32_scales']:.2f} dB")
nb.show(anatomy.anatomy_figure(x))
"""),
("md", r"""
**Reading it.** Left: under the floor rule the block maxima spread over [256, 512); the shaded part is what
saturates. Right: the E4M3 block scale is within half an E4M3 step (±1/16) of the exact one, and because E2M1's own
rounding error is so much larger, the second level of rounding costs little — the NVFP4 error budget is the 4-bit
element, not its scale.

## Exercises

Worked answers: `notebooks/solutions/01_number_formats.py` (each `exercise_N()` runs in seconds; the tests run them).

1. Move the outlier from a column (`w[:, 7]`) to a row (`w[7, :]`): which granularities pull ahead now — for E4M3,
   and for INT8? Measure the SQNR of the ordinary values alone, not only of the whole tensor.
2. `QuantSpec("e2m1", "mx", scale_rule="ceil")`: the round-up E8M0 rule never saturates. Is it better or worse than
   the floor rule on the Gaussian tensor, and why?
3. Change the probe's small magnitude from `3e-4` to `3e-3`: at what magnitude does unscaled E4M3 stop flushing?
4. `formats.E8M0.encode(torch.tensor([0.0]), saturate=False)`: why is a zero scale NaN, and what does the lab do
   instead when a block is all zeros?
5. `anatomy.mx_scale_anatomy(x, "e2m1")`: MXFP4's top is 6 = 1.5·2², so blocks landing in (6, 8) saturate. Is the
   share larger or smaller than for E4M3?
6. `E4M3FNUZ.round(250.0)` vs `E4M3.round(250.0)`, and the same at `0.009`: what did moving the bias by one buy, and
   what did it cost?
"""),
]
