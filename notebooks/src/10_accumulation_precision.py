PATH = "notebooks/10_accumulation_precision.ipynb"
CELLS = [
("md", r"""
# 10 · Accumulation precision: where the products of an FP8 GEMM are summed

**The big idea.** A format is only half of a low-precision matrix multiply. Every output of `C = A Bᵀ` is a dot
product of length K — for a 7B-class model K is 4,096 to 16,384 — so every output is a sum of thousands of products.
The products of two E4M3 numbers are exact (at most 8 significant bits), but the running sum has to live somewhere,
in some number of bits. On Hopper's FP8 tensor cores it does not live in full FP32: DeepSeek-V3 reports a
limited accumulator, and public measurements describe one that **truncates** (the published figures are quoted in
the first code cell, beside the model this notebook uses).

**The key insight.** A truncating accumulator makes the *same* small error, in the same direction, at every addition:
the error of the sum can grow with K instead of averaging out. The cure is not a better format but a better place to
add: every 128 elements of K, take the tensor core's partial sum out, multiply it by its scales, and add it to an
FP32 register (DeepSeek-V3's N_C = 128, and the lab's W8A8 kernel in notebook 07). The same move is what makes
fine-grained scales possible at all: a scale that changes along K **cannot be pulled out of the sum**.

**What we can measure here.** On the CPU: an exact simulation of a limited-precision accumulator
(`fp8lab.accumulation`), its error against float64 for growing K, and the worked algebra of scales. Everything in
the first half is computed live (exact arithmetic: nothing recorded, nothing timed). **What we cannot:** what a real
tensor core does, or how fast. Those come from `torch._scaled_mm` with `use_fast_accum` off and on, recorded on a GPU
by `python -m fp8lab.accumulation --gpu` into `outputs/accumulation/scaled_mm_fast_accum.json`, shown at the end with
its provenance — or one "not recorded yet" line where this checkout has no GPU record. No model is involved: the
operands are random matrices, so nothing here depends on the lab's 4-bit default model.
"""),
("code", r"""
import torch
from fp8lab import accumulation as acc, findings
from fp8lab import notebook as nb
from fp8lab.metrics import relative_error
SMALL = nb.small()          # the tests set FP8LAB_SMALL=1: fewer and shorter sums

# what the published sources say (quoted, not measured here), beside the model's settings
PUBLISHED = {"DeepSeek-V3: FP8 tensor-core accumulation keeps": "around 14 bits",
             "public measurements of Hopper's FP8 accumulator": "e8m13 (13 stored fraction bits), truncating",
             "DeepSeek-V3: promotion interval N_C": 128}
for k, v in PUBLISHED.items():
    print(f"{k:52s} {v}")
print(f"{'this notebook: significant bits of the model accumulator':52s} {acc.HOPPER_ACC_BITS}")
"""),
("md", r"""
## Swamping, in one line

An accumulator with `b` significant bits represents the integers exactly only up to 2ᵇ. Past that, adding a product
smaller than half a unit in the last place changes nothing (rounding to nearest) — and with truncation, even a
product *just under a whole unit* is lost. A long dot product is exactly this situation: the running sum grows and
each new product is small next to it. The cell adds one, one and a half, and just under two to 2ᵇ with the model's `b`:
"""),
("code", r"""
b = acc.HOPPER_ACC_BITS
x = torch.tensor([2.0 ** b], dtype=torch.float64)
for add in (1.0, 1.5, 1.99):
    near = acc.round_to_bits(x + add, b, "nearest").item() - x.item()
    trunc = acc.round_to_bits(x + add, b, "toward_zero").item() - x.item()
    print(f"2**{b} + {add:<5}  ->  kept {near:g} (round to nearest)   kept {trunc:g} (truncate)")
"""),
("md", r"""
## The model

`acc.accumulate(qa, qb, ...)` multiplies FP8 values and sums them the way the tensor core is described to, with its
assumptions stated (module docstring):

1. inputs are FP8 values; every product is exact;
2. the hardware adds a **chunk** of 32 products at once, exactly (one FP8 `wgmma` k-step), then rounds the running
   sum to `acc_bits` significant bits (`acc.HOPPER_ACC_BITS`, printed above) — toward zero (what public
   measurements describe) or to nearest (for comparison);
3. **promotion**: every 128 k the partial sum is multiplied by its scales and added to an FP32 register;
4. **fast accumulation** (no promotion): the limited accumulator runs through all of K; per-tensor scales are applied
   once at the end. `use_fast_accum=True` in `torch._scaled_mm`.

With `acc_bits=24` and rounding to nearest the same code is plain FP32 accumulation; the tests check it against a
sequential float32 sum, bit for bit, and the full-precision case against float64.

The experiment: random A (M×K) and B (N×K), quantized to E4M3 with the lab's scale rule, multiplied under each variant.
The error is `‖C − C₆₄‖ / ‖C₆₄‖` where `C₆₄` is the float64 product **of the same FP8 values**: what is left is the
accumulation alone. Two input distributions: Gaussian (products of both signs) and positive (|Gaussian|: every product
adds, the sum only grows — the worst case for a truncating sum).
"""),
("code", r"""
ks = (128, 512, 2048) if SMALL else (128, 512, 2048, 8192, 16384)
mn = 32 if SMALL else 64
rows = acc.error_vs_k(ks, m=mn, n=mn)
print(f"M = N = {mn}, chunk 32, {acc.HOPPER_ACC_BITS}-bit accumulator; relative error against float64 on the same FP8 inputs\n")
print(acc.format_error_table(rows))
"""),
("code", r"""
nb.show(acc.plot_error_vs_k(rows))
"""),
("md", r"""
## Reading it

What to look for, and why:

* **A truncating accumulator without promotion.** Each addition can lose up to one unit in the last place, always
  toward zero, so the losses add up instead of cancelling; and the longer the sum, the larger the unit it is rounded
  to. Expect its error to grow with K.
* **The same accumulator rounding to nearest** errs about as often up as down: its error should grow more slowly.
  Rounding mode matters as much as the bit count.
* **Promotion every 128** means the limited accumulator only ever sums 128 products (4 chunks), so its relative error
  is that of a 128-long sum whatever K is; the FP32 additions of the partial sums are far more precise. Expect a
  flat line; the DeepSeek-V3 row (1×128 activation groups, 128×128 weight blocks, promotion) should sit on it.
* **FP32 accumulation** is the floor.

What this run shows (slopes of the log-log lines above, from the rows):
"""),
("code", r"""
for dist in ("gaussian", "positive"):
    print(f"{dist} inputs:")
    for s in findings.accumulation_findings(rows, dist):
        print("  -", s)
"""),
("md", r"""
How much of this reaches a model's output depends on how the GEMM error compares with the FP8 rounding of the inputs
themselves (notebook 01: with 3 mantissa bits every input carries rounding noise, which partly averages over K).
`rel_err_total` in `rows` measures against the unquantized inputs, and `shrink` is the part of the accumulation error
that is a uniform bias toward zero (`1 − ⟨C, C₆₄⟩ / ⟨C₆₄, C₆₄⟩`): every output slightly too small, in the same
direction. Input rounding noise is random and partly averages out over the next layers; a bias does not.
"""),
("code", r"""
print("against the UNQUANTIZED inputs (accumulation + the FP8 rounding of A and B):")
print(acc.format_error_table([r for r in rows if r["dist"] == "gaussian"], key="rel_err_total"))
print("\nshrink: the part of the accumulation error that is a uniform bias toward zero:")
print(acc.format_error_table([r for r in rows if r["dist"] == "gaussian"], key="shrink"))
truncating = next(v for v in acc.VARIANTS if "truncating" in v)
print()
for s in findings.accumulation_bias_findings(rows, truncating):
    print(f"{truncating}, gaussian: {s}")
"""),
("md", r"""
Where the accumulator's error is a large share of the total, the accumulator matters at that K; where its shrink is
most of its error, what it adds is a bias. K is largest in training (a weight-gradient GEMM sums over every token of
the batch), which is where DeepSeek-V3 met it and why it promotes.

## The two knobs: accumulator bits and chunk size

At one K, the error of fast accumulation as the accumulator keeps more bits (`acc_bits=24` is FP32), and as the
hardware adds more products exactly before each rounding.
"""),
("code", r"""
K = 2048 if SMALL else 8192
a, b_ = acc.operands(32, 32, K)
qa, sa, qb, sb = acc.quantize_operands(a, b_)
exact = qa.double() @ qb.double().T
bits = (10, 12, 14, 16, 20, 24)
by_bits = [relative_error(exact, acc.accumulate(qa, qb, acc_bits=n, promote_every=None)) for n in bits]
print(f"K = {K}: relative error of the truncating accumulator without promotion")
for n, e in zip(bits, by_bits):
    print(f"  acc_bits = {n:2d}:  {e:.2e}")
chunks = (8, 32, 128)
by_chunk = [relative_error(exact, acc.accumulate(qa, qb, chunk=c, promote_every=None)) for c in chunks]
for c, e in zip(chunks, by_chunk):
    print(f"  chunk = {c:3d}:    {e:.2e}   ({K // c} roundings per output)")
f_bit = findings.per_unit_factor(bits[:-1], by_bits[:-1])
nb.md(f"Here each extra accumulator bit multiplies the error by **{f_bit:.2f}** on average (from {bits[0]} to "
      f"{bits[-2]} bits; one bit halves the unit in the last place), and going from chunks of {chunks[0]} to "
      f"{chunks[-1]} products changes the error by a factor **{by_chunk[-1] / by_chunk[0]:.2f}** "
      f"({K // chunks[0]} → {K // chunks[-1]} roundings per output).")
"""),
("md", r"""
Both are properties of the hardware, not choices a kernel can make — the kernel's only lever is *where* it stops the
tensor core and promotes.

## Why a scale that varies along K cannot be pulled out of the sum

With one scale per tensor, `a_k = s_a·q_k` and `b_k = s_b·r_k`, so

  C = Σₖ a_k b_k = s_a s_b · Σₖ q_k r_k

— the tensor core sums the codes, and a single multiply in the epilogue applies the scales. The same holds for a scale
per **row of A** (per token) or per **row of B** (per output channel): they do not depend on k, so they also factor out.

With a scale per 1×128 **group along K** (DeepSeek-V3's activations) or per 128×128 block (its weights), `s_a` depends
on which group k falls in:

  C = Σ_g s_a,g s_b,g · (Σ_{k in g} q_k r_k)

Each group's partial sum must be finished, multiplied by *its* scales, and only then added. A worked example with
K = 4 in two groups of 2 (values chosen so that every one is exact in E4M3 after its group's scale, so only the order
of operations matters):
"""),
("code", r"""
ex = acc.scale_factoring_example()
print("a            ", [round(v, 4) for v in ex["a"]], "  (b = 1, 1, 1, 1)")
print("group scales ", [f"{v:.4g}" for v in ex["scales"]])
print("E4M3 codes   ", ex["codes"])
print("group sums of codes", ex["partials"])
print(f"exact sum                                {ex['exact']:.4f}")
print(f"scale each group's partial, then add     {ex['per_group_then_add']:.4f}")
for k, v in ex["codes_summed_then_scaled"].items():
    print(f"sum all codes, then {k:24s} {v:.4f}")
top = max(abs(c) for c in ex["codes"])
nb.md(f"A code of {top:g} in the first group is worth {top * ex['scales'][0]:.4g}; the same code in the second "
      f"group is worth {top * ex['scales'][1]:.4g}. Summing the codes first adds numbers that live on different "
      "scales, and no single scale afterwards can undo it.")
"""),
("md", r"""
This is why:

* fine-grained scales go **along K in blocks of 128** that match the promotion interval: the kernel already stops the
  tensor core every 128 k to promote, so applying that block's scales there is free — the promotion *is* the
  dequantization;
* per-token and per-channel scales (along M and N) need no promotion at all: they are an epilogue multiply, which is why
  `torch._scaled_mm` with row-wise scales may use fast accumulation, and a block-scaled GEMM cannot skip the per-block
  step even if it wanted to;
* the lab's W8A8 kernel (notebook 07) multiplies each 128-wide k-block on the FP8 tensor cores, then does
  `acc_fp32 += partial · s_a[m, kb] · s_b[nb, kb]` on the CUDA cores: fine-grained scales and the accuracy fix in one
  step.

## The real thing: `torch._scaled_mm` with fast accumulation off and on (recorded on a GPU)

`python -m fp8lab.accumulation --gpu` times E4M3 × E4M3 GEMMs (per-tensor scales, bf16 output; CUDA graphs, several
interleaved rounds, median and min–max) and measures their error against float64 at growing K (fp32 output). On a
tile of the same inputs it also replays this notebook's CPU model, so the model can be checked against the hardware.
This notebook never times anything on a CPU: it reads the recorded file.
"""),
("code", r"""
folder = nb.recorded("accumulation", "scaled_mm_fast_accum.json")
rec = acc.load_gpu_record(folder / "scaled_mm_fast_accum.json") if folder else None
if rec is not None:
    s = rec["settings"]
    print(f"{s['fmt']}, M = N = {s['M']}, {s['rounds']} interleaved rounds; error on the first {s['ref_rows']} rows\n")
    print(acc.summarize_gpu(rec))
"""),
("code", r"""
if rec is not None:
    nb.show(acc.plot_gpu(rec))
"""),
("md", r"""
**How to read the recorded run.** The speed panel answers "what does fast accumulation buy?": the ratio of the two
medians at each K, next to the spread of the rounds (a difference inside the min–max bars is not a difference). The
error panel answers "what does it cost?": if the fast-accumulation error climbs with K while the other stays flat, the
hardware has the *mechanism* of the model above (a limited accumulator, no promotion). Whether it has the model's
*size* of error is a separate question: the last table puts the GPU's error on a tile next to the CPU models' on the
same numbers, and the lines above it say by what factor the GPU differs from the truncating model. "Closest" only
ranks the two models: one that is off by a large factor is the lesser miss, not a description of this hardware.
"""),
("code", r"""
if rec is not None:
    for s in findings.fast_accum_findings(rec):
        print("-", s)
    print()
    for r in acc.sim_verdict(rec):
        print(f"K={r['K']:6d} {r['dist']:9s} GPU fast accum {r['gpu_fast_on']:.2e} (off {r['gpu_fast_off']:.2e}) | "
              f"model truncating {r['sim_toward_zero_fast']:.2e}, nearest {r['sim_nearest_fast']:.2e} "
              f"-> closest: {r['closest_model']}")
"""),
("md", r"""
## Exercises

Worked answers: `notebooks/solutions/10_accumulation_precision.py` (they run on the CPU in the tests).

1. The published figure is approximate (first code cell). Rerun the fast-accumulation error at one K with `acc_bits` one below and
   one above the model's value: how sensitive is the growth with K to the exact bit count?
2. Fewer promotions are cheaper for a kernel. With `promote_every=128`, `256` and `512`, where does the error start to
   grow with K again?
3. Give A one outlier channel (`a[:, 0] *= 100`). Does per-tensor fast accumulation suffer more against the
   *unquantized* inputs, and do 1×128 / 128×128 block scales with promotion help? Which error is it — the
   accumulator's or the inputs' rounding?
4. From the recorded GPU run: at which K does fast accumulation gain the most speed, do the rounds' ranges separate
   there, and what does it cost in error at that K?
"""),
]
