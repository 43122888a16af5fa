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
bit against `ml_dtypes` and PyTorch's own casts (`tests/test_formats.py`: 0 mismatches over every bf16 and fp16 bit
pattern, every code, 10⁶ random floats and every tie). **What we cannot:** speed. That needs a GPU (notebooks 06, 07).
"""),
("code", r"""
import os
import torch
from fp8lab import formats, probe, grids, metrics
from fp8lab.formats import E4M3, E5M2, E2M1, E8M0
from fp8lab.scaling import QuantSpec, fake_quant
SMALL = os.environ.get("FP8LAB_SMALL") == "1"   # the tests set this; nothing here is slow anyway
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

Two tensors of 4,096 normally distributed activations: *typical* (σ = 1.0) and *small* (σ = 3·10⁻⁴). Each is rounded
with the scale factor **off** (plain rounding in the element format) and **on** (the format's production scaling:
per-tensor amax for E4M3/E5M2, 16-element E4M3 block scales × an FP32 global scale for NVFP4, 32-element E8M0 scales
for MXFP4). The numbers below are computed now and also written to `outputs/probe.csv`.
"""),
("code", r"""
rows = probe.underflow_probe()
print(probe.format_table(rows))
if not SMALL:
    probe.write_csv(rows, "../outputs/probe.csv")
"""),
("md", r"""
**Reading it.** Without a scale, almost all of the small tensor comes back as zeros in E4M3 — its smallest subnormal
is 2⁻⁹ ≈ 0.00195, so everything below 2⁻¹⁰ rounds to 0 and the mean relative error is ~100 %. The only survivors are
the few samples in the tails (|x| ≥ 2⁻¹⁰). With a per-tensor scale the *same* tensor has exactly the error of the
typical one: scaling makes the error independent of magnitude. E5M2 survives unscaled (its window reaches 1.5·10⁻⁵) at
about twice E4M3's error (one mantissa bit fewer). E2M1 cannot represent anything below 0.5, so unscaled FP4 destroys
even typical activations; its block scales are not optional, and even with them a 4-bit element costs several times
the error of E4M3.

Seed 003 reported 2.18 % / 2.17 % / 100 % / 2.12 % for its four E4M3 rows on its own sample; the pattern is the same here
(the exact percentages depend on the sample, and on whether "mean relative error" counts flushed elements — here it does).

## The windows, drawn
"""),
("code", r"""
fig = grids.grid_figure(path=None if SMALL else "../outputs/format_grids.png")
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
import numpy as np
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
scales. Below, a 256×1024 weight-like tensor with one column 50× larger than the rest, quantized every way the lab
knows. SQNR in dB (higher is better; every +6 dB is one more bit of effective precision).
"""),
("code", r"""
g = torch.Generator().manual_seed(0)
w = torch.randn(256, 1024, generator=g) * 0.02
w[:, 7] *= 50                                     # an outlier input channel
specs = {
    "E4M3 no scale":        QuantSpec("e4m3", "none"),
    "E4M3 per-tensor":      QuantSpec("e4m3", "tensor"),
    "E4M3 per-channel":     QuantSpec("e4m3", "channel", axis=0),
    "E4M3 1x128 groups":    QuantSpec("e4m3", "group", group_size=128),
    "E4M3 128x128 blocks":  QuantSpec("e4m3", "block"),
    "E5M2 per-tensor":      QuantSpec("e5m2", "tensor"),
    "INT8 per-channel":     QuantSpec("int8", "channel", axis=0),
    "NVFP4 (16, E4M3)":     QuantSpec("e2m1", "nvfp4"),
    "MXFP4 (32, E8M0)":     QuantSpec("e2m1", "mx"),
    "MXFP8 E4M3 (32, E8M0)": QuantSpec("e4m3", "mx"),
}
for name, spec in specs.items():
    y = fake_quant(w, spec)
    print(f"{name:24s} SQNR {metrics.sqnr_db(w, y):6.1f} dB   flushed {metrics.flushed_pct(w, y):5.1f} %")
"""),
("md", r"""
**Reading it.** The outlier column carries most of the energy, so SQNR here mostly measures how well the *outliers*
are stored. Per-channel and 1×128 scales win because each row's largest element — the outlier — maps exactly onto 448,
which E4M3 represents exactly; 128×128 blocks share one scale across 128 rows and behave like per-tensor. The "flushed"
column tells the other half of the story: unscaled E4M3 flushes the smallest weights, and INT8's *uniform* grid, whose
step is set by the outlier, flushes far more of them even with per-channel scales. That is the case for a floating grid
on outlier-heavy tensors. The 4-bit formats pay in both columns; NVFP4's finer blocks and E4M3 scales beat MXFP4's
power-of-two scales on 32 elements.

## Things to try
- Move the outlier from a column (`w[:, 7]`) to a row (`w[7, :]`) and watch per-channel and per-group scaling pull ahead.
- `QuantSpec("e2m1", "mx", scale_rule="ceil")`: the round-up E8M0 rule never saturates; is it better or worse here?
- Change the probe's small magnitude from 3e-4 to 3e-3: at what magnitude does unscaled E4M3 stop flushing?
- `formats.E8M0.encode(torch.tensor([0.0]), saturate=False)`: why is a zero scale NaN, and what does the lab do instead?
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
fig = anatomy.anatomy_figure(x, path=None if SMALL else "../outputs/format_anatomy.png")
"""),
("md", r"""
**Reading it.** Left: under the floor rule the block maxima spread over [256, 512); the shaded part is what
saturates. Right: the E4M3 block scale is within half an E4M3 step (±1/16) of the exact one, and because E2M1's own
rounding error is so much larger, the second level of rounding costs little — the NVFP4 error budget is the 4-bit
element, not its scale.

## Things to try
- `anatomy.mx_scale_anatomy(x, "e2m1")`: MXFP4's top is 6 = 1.5·2², so blocks landing in (6, 8) saturate. Is the
  share larger or smaller than for E4M3, and why?
- Shrink one row (`x[0] *= 1e-5`) and quantize with `QuantSpec("e2m1", "nvfp4")` and with `scale_rule="torchao"`:
  that row's block scales fall among E4M3's subnormals, which torchao clamps to 2⁻⁶. What happens to its error?
- `E4M3FNUZ.round(250.0)` vs `E4M3.round(250.0)`, and `E4M3FNUZ.round(0.009)` vs `E4M3.round(0.009)`: what did
  moving the bias by one buy, and what did it cost?
"""),
]
