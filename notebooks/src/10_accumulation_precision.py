PATH = "notebooks/10_accumulation_precision.ipynb"
CELLS = [
("md", r"""
# 10 · Accumulation precision: where the products of an FP8 GEMM are summed

**The big idea.** A format is only half of a low-precision matrix multiply. Every output of `C = A Bᵀ` is a dot
product of length K — for a 7B-class model K is 4,096 to 16,384 — so every output is a sum of thousands of products.
The products of two E4M3 numbers are exact (at most 8 significant bits), but the running sum has to live somewhere,
in some number of bits. On Hopper's FP8 tensor cores it does not live in full FP32: DeepSeek-V3 reports that the
accumulator keeps "around 14 bits", and public measurements describe an e8m13 accumulator that **truncates**.

**The key insight.** A truncating accumulator makes the *same* small error, in the same direction, at every addition:
the error of the sum grows with K and does not average out. The cure is not a better format but a better place to
add: every 128 elements of K, take the tensor core's partial sum out, multiply it by its scales, and add it to an
FP32 register (DeepSeek-V3's N_C = 128, and the lab's W8A8 kernel in notebook 07). The same move is what makes
fine-grained scales possible at all: a scale that changes along K **cannot be pulled out of the sum**.

**What we can measure here.** On the CPU: an exact simulation of a limited-precision accumulator
(`fp8lab.accumulation`), its error against float64 for growing K, and the worked algebra of scales. **What we
cannot:** what a real tensor core does, or how fast. Those come from `torch._scaled_mm` with `use_fast_accum` off and
on, recorded on a GPU by `python -m fp8lab.accumulation --gpu` (`outputs/accumulation/`), shown at the end with its
provenance — or "not recorded yet" where this checkout has no GPU record.
"""),
("code", r"""
import logging, warnings
logging.disable(logging.WARNING); warnings.filterwarnings("ignore")   # library import chatter, not results
import os
from pathlib import Path
import torch
from fp8lab import accumulation as acc
from fp8lab.provenance import describe
SMALL = os.environ.get("FP8LAB_SMALL") == "1"   # the tests set this: fewer and shorter sums
REPO = Path.cwd().parent if Path.cwd().name == "notebooks" else Path.cwd()
"""),
("md", r"""
## Swamping, in one line

An accumulator with 14 significant bits represents the integers exactly only up to 2¹⁴ = 16,384. Past that, adding a
product smaller than half a unit in the last place changes nothing (rounding to nearest) — and with truncation, even a
product *just under a whole unit* is lost. A long dot product is exactly this situation: the running sum grows and
each new product is small next to it.
"""),
("code", r"""
x = torch.tensor([2.0 ** 14], dtype=torch.float64)
for add in (1.0, 1.5, 1.99):
    near = acc.round_to_bits(x + add, 14, "nearest").item() - x.item()
    trunc = acc.round_to_bits(x + add, 14, "toward_zero").item() - x.item()
    print(f"2**14 + {add:<5}  ->  kept {near:g} (round to nearest)   kept {trunc:g} (truncate)")
"""),
("md", r"""
## The model

`acc.accumulate(qa, qb, ...)` multiplies FP8 values and sums them the way the tensor core is described to, with its
assumptions stated (module docstring):

1. inputs are FP8 values; every product is exact;
2. the hardware adds a **chunk** of 32 products at once, exactly (one FP8 `wgmma` k-step), then rounds the running
   sum to **14 significant bits** — toward zero (what public measurements describe) or to nearest (for comparison);
3. **promotion**: every 128 k the partial sum is multiplied by its scales and added to an FP32 register;
4. **fast accumulation** (no promotion): the limited accumulator runs through all of K; per-tensor scales are applied
   once at the end. `use_fast_accum=True` in `torch._scaled_mm`.

With 24 bits and rounding to nearest the same code is plain FP32 accumulation; the tests check it against a
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
print(f"M = N = {mn}, chunk 32, 14-bit accumulator; relative error against float64 on the same FP8 inputs\n")
print(acc.format_error_table(rows))
"""),
("code", r"""
fig = acc.plot_error_vs_k(rows)
"""),
("md", r"""
## Reading it

* **Truncating fast accumulation grows with K, about linearly.** Each addition loses up to one unit in the last of 14
  bits, always toward zero, so the losses add up instead of cancelling. Doubling K doubles the number of additions
  *and* the size of the sum they are made on.
* **Had it rounded to nearest**, the same accumulator would err about as often up as down: the error would grow only
  like √K. Rounding mode matters as much as the bit count.
* **Promotion every 128 flattens the curve.** The 14-bit accumulator now only ever sums 128 products (4 chunks), so
  its relative error is that of a 128-long sum whatever K is; the FP32 additions of the partial sums cost nothing
  visible. The DeepSeek-V3 row (1×128 activation groups, 128×128 weight blocks, promotion) sits on the same line.
* **FP32 accumulation** is the floor: several orders of magnitude below all the others.
* Gaussian and positive inputs look alike here because truncation shrinks the magnitude of the running sum whatever
  its sign. A rounding-to-nearest accumulator is where the input distribution would matter more.

How much of this reaches a model's output depends on how the GEMM error compares with the FP8 rounding of the inputs
themselves (notebook 01: a few percent per element, but it averages over K). `rel_err_total` in `rows` measures
against the unquantized inputs: print it to see which error dominates at each K.
"""),
("code", r"""
print("against the UNQUANTIZED inputs (accumulation + the FP8 rounding of A and B):")
print(acc.format_error_table([r for r in rows if r["dist"] == "gaussian"], key="rel_err_total"))
print("\nshrink: the part of the accumulation error that is a uniform bias toward zero (1 - <C, C64> / <C64, C64>):")
print(acc.format_error_table([r for r in rows if r["dist"] == "gaussian"], key="shrink"))
"""),
("md", r"""
Two things to take from these tables. **At these sizes the FP8 rounding of the inputs dominates the total error**: with
3 mantissa bits every input carries a few percent of noise, and every variant's total sits near that level; only the
truncating accumulator at the longest sums adds visibly on top. **But the accumulator's error is a different kind of
error**: the shrink row shows that the truncating accumulator's error is, almost all of it, a uniform bias — every output
comes out slightly too small, in the same direction. Input rounding noise is random and partly averages out over the
next layers; a bias does not. It grows with K, and K is largest in training (a weight-gradient GEMM sums over every
token of the batch), which is where DeepSeek-V3 met it and why it promotes.
"""),
("md", r"""
## The two knobs: accumulator bits and chunk size

At one K, the error of fast accumulation as the accumulator keeps more bits (14 is the Hopper figure; 24 is FP32),
and as the hardware adds more products exactly before each rounding.
"""),
("code", r"""
K = 2048 if SMALL else 8192
a, b = acc.operands(32, 32, K)
qa, sa, qb, sb = acc.quantize_operands(a, b)
exact = qa.double() @ qb.double().T
from fp8lab.metrics import relative_error
print(f"K = {K}: relative error of the 14-bit truncating accumulator without promotion")
for bits in (10, 12, 14, 16, 20, 24):
    e = relative_error(exact, acc.accumulate(qa, qb, acc_bits=bits, promote_every=None))
    print(f"  acc_bits = {bits:2d}:  {e:.2e}")
for chunk in (8, 32, 128):
    e = relative_error(exact, acc.accumulate(qa, qb, chunk=chunk, promote_every=None))
    print(f"  chunk = {chunk:3d}:    {e:.2e}   ({K // chunk} roundings per output)")
"""),
("md", r"""
Each extra bit halves the error (the unit in the last place halves); a larger chunk means fewer roundings, so the
error falls in proportion. Both are properties of the hardware, not choices a kernel can make — the kernel's only
lever is *where* it stops the tensor core and promotes.

## Why a scale that varies along K cannot be pulled out of the sum

With one scale per tensor, `a_k = s_a·q_k` and `b_k = s_b·r_k`, so

  C = Σₖ a_k b_k = s_a s_b · Σₖ q_k r_k

— the tensor core sums the codes, and a single multiply in the epilogue applies the scales. The same holds for a scale
per **row of A** (per token) or per **row of B** (per output channel): they do not depend on k, so they also factor out.

With a scale per 1×128 **group along K** (DeepSeek-V3's activations) or per 128×128 block (its weights), `s_a` depends
on which group k falls in:

  C = Σ_g s_a,g s_b,g · (Σ_{k in g} q_k r_k)

Each group's partial sum must be finished, multiplied by *its* scales, and only then added. A worked example with K = 4
in two groups of 2 (values chosen so that every one is exact in E4M3 after its group's scale, so only the order of
operations matters):
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
"""),
("md", r"""
Summing the codes first adds numbers that live on different scales (448 of the first group is worth 0.03; 448 of the
second is worth 500), and no single scale afterwards can undo it. This is why:

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

`python -m fp8lab.accumulation --gpu` times E4M3 × E4M3 GEMMs (per-tensor scales, M = N = 4096, bf16 output; CUDA
graphs, several interleaved rounds, median and min–max) and measures their error against float64 at growing K (fp32
output). On a tile of the same inputs it also replays this notebook's CPU model, so the model can be checked against
the hardware. This notebook never times anything on a CPU: it reads the recorded file.
"""),
("code", r"""
rec = acc.load_gpu_record(REPO / "outputs/accumulation/scaled_mm_fast_accum.json")
if rec is None:
    print("not recorded yet: outputs/accumulation/scaled_mm_fast_accum.json is not in this checkout.\n"
          "On a CUDA machine: python -m fp8lab.accumulation --gpu   (about a minute on an H200)")
else:
    print(describe(rec["provenance"]))
    print(rec["provenance"].get("device"), "\n")
    print(acc.summarize_gpu(rec))
"""),
("code", r"""
if rec is not None:
    fig = acc.plot_gpu(rec)
"""),
("md", r"""
**How to read the recorded run.** The speed panel answers "what does fast accumulation buy?": the ratio of the two
medians at each K, next to the spread of the rounds (a difference inside the min–max bars is not a difference). The
error panel answers "what does it cost?": if the fast-accumulation error climbs with K while the other stays flat, the
hardware behaves like the truncating model above; the table below puts the GPU's error on a tile next to the CPU
models' on the same numbers and names the closest one.
"""),
("code", r"""
if rec is not None:
    for r in acc.sim_verdict(rec):
        print(f"K={r['K']:6d} {r['dist']:9s} GPU fast accum {r['gpu_fast_on']:.2e} (off {r['gpu_fast_off']:.2e}) | "
              f"model truncating {r['sim_toward_zero_fast']:.2e}, nearest {r['sim_nearest_fast']:.2e} "
              f"-> closest: {r['closest_model']}")
else:
    print("not recorded yet")
"""),
("md", r"""
## Things to try

* `acc.accumulate(..., acc_bits=13)` or `acc_bits=15`: how sensitive is the verdict to the exact bit count? The public
  figure is "about 14".
* `promote_every=256` or `512`: fewer promotions are cheaper for a kernel; where does the error start to grow?
* Inputs with an outlier channel (`a[:, 0] *= 100`): does per-tensor fast accumulation suffer more, and do 1×128
  groups help?
* On a GPU, `python -m fp8lab.accumulation --gpu --ks 512,4096,32768 --mn 8192`: does the speed difference depend on
  the shape?
"""),
]
