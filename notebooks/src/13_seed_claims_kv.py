PATH = "notebooks/13_seed_claims_kv.ipynb"
CELLS = [
("md", r"""
# 13 · The seeds' last claims: 4-bit KV caches, FP8 KV at long-context prefill, GB10 serving numbers

**The big idea.** After the weights, the KV cache is what a long-context server reads for every generated token.
FP8 halves it (notebook 03); a 4-bit cache would quarter it. Two seeds describe how to get away with 4 bits:

* seed 002 stores K/V as **NVFP4** (E2M1 values in 16-element blocks, one E4M3 scale per block) and keeps the
  **first and last N layers in BF16** (`--kv-high-precision-layers N`) "because they are the most sensitive";
* seed 000's **"turbo"** caches rotate each K/V vector with a Walsh–Hadamard transform, then quantize with "an
  optimally placed codebook", and claim that "turbo4 gives measurably lower per-token error than NVFP4 on models
  with large RMSNorm weights" at the same bit count.

**The key insight.** Four bits leave 16 levels. What matters is *where* the levels sit relative to the numbers:
NVFP4 moves a fixed grid (0, 0.5, 1, 1.5, 2, 3, 4, 6) with a scale per 16 values; the rotated quantizer first makes
every coordinate look alike (a random rotation spreads an outlier channel over all of them), so that one codebook,
fitted once to that shape, serves every coordinate. Both are **causal** here — each token is stored from that token
alone plus per-layer constants fixed before serving — and both spend **4.5 bits per element**, scale bytes included.

**What we can measure here (CPU).** The exact numbers a 4-bit cache would hand the attention (fake quantization),
hence per-token K/V error and perplexity by position on the lab's model up to its 8k context, with paired
intervals, and which layers are sensitive. **What we cannot:** speed. The NVFP4-KV attention kernel and the
long-context prefill measurement need a GPU run (their sections below read the recorded files when they exist),
and the GB10 numbers are about hardware the lab does not have (they are checked against the bandwidth ceiling).

*The lab's model is SmolLM2-135M-Instruct, whose weights are 4-bit GGUF (Q4_1) dequantized to float32: the
"baseline" is already a quantized model.* Every claim below is quoted from its seed in a code cell (the seeds' numbers
beside the lab's), and marked **confirmed / contradicted / untestable here** in section 6 by code that reads the
results — never by hand.

What this notebook reads (each section prints its provenance, or one "not recorded yet" line and skips):
`outputs/kv_bits/` (`python -m fp8lab.kv_bits --record`, CPU), `outputs/kernels/attention.json` and
`outputs/kernels/prefill_attention.json` (GPU runs of `python -m fp8lab.kernels.bench attention` and
`… prefill_attn`), `outputs/kernels/sass/summary.json` (notebook 09's SASS summary); the GB10 table is arithmetic from
published configurations (`fp8lab.serving_claims`), computed live.
"""),
("code", r"""
import torch
from fp8lab import notebook as nb
from fp8lab import findings, hadamard, kv_bits, serving_claims
from fp8lab.kernels import bench_attention, bench_prefill_attn, gb10_report
SMALL = nb.small()          # the tests set FP8LAB_SMALL=1: a shorter live window
torch.manual_seed(0)

# the seeds' claims, quoted (what they say, not what the lab measured)
SEED_CLAIMS = findings.seed_kv_claims()
for k, v in SEED_CLAIMS.items():
    print(f"{k:30s} {v}")
"""),
("md", r"""
## 1 · Two 4-bit caches at the same bit budget

Bits per stored element, counting the scale bytes (the per-layer constants — NVFP4's fp32 global scale, the
16-level codebook, the rotation's signs — are a few hundred bytes per layer, nothing per element):
"""),
("code", r"""
for line in findings.kv_bits_lines(("e4m3-uncal", "e4m3-dyn", "nvfp4", "turbo4", "turbo4-g64"), head_dim=64):
    print(line)
"""),
("md", r"""
**NVFP4's global scale, chosen causally.** NVFP4 multiplies each block's E4M3 scale by one fp32 global scale,
normally `amax / (6 · 448)` of the tensor being quantized. For a KV cache "the tensor" is the whole window: its max
includes tokens that have not been generated yet, so that rule is an **oracle**. The lab freezes the global scale
per layer from max |K|, |V| over *calibration windows* (as TensorRT-LLM's static KV scales do); a later token
above that max saturates at it. The block scales still come from each token's own 16 numbers.

**The rotated quantizer ("turbo4").** Each K/V vector (per head, along head_dim = 64) is multiplied by a randomised
Hadamard matrix (random signs, then the fast Walsh–Hadamard transform: orthogonal, so norms and q·k survive). The
rotated vector is cut into groups of 32; each group stores its RMS in fp16 (16 bits / 32 = 0.5 bit per element, the
same overhead as NVFP4's 8-bit scale per 16) and each coordinate / RMS as the index of the nearest of 16 levels. The
levels are fitted once by Lloyd–Max to calibration data (`turbo4`), or taken from a standard normal with no data
at all (`turbo4-gauss`, TurboQuant's own choice). Why the RMS and not the max: after a random rotation the
normalised coordinates are close to N(0, 1) whatever the vector was, so one codebook fits; a max scale would put a
point mass at ±1 that the codebook has to spend a level on.

### The rotation, live: one outlier channel
"""),
("code", r"""
x = torch.zeros(64); x[5] = 8.0
print("one outlier, rotated by H/sqrt(64):", hadamard.fwht(x)[:6].tolist(), "...  norm kept:", float(hadamard.fwht(x).norm()))
# seeded Gaussian keys, channel 5 multiplied by each factor; half the tokens calibrate, the other half are measured
errs = kv_bits.outlier_channel_errors(outliers=(1, 5, 20, 50), seed=0)
print(f"{'outlier x':>10s} {'nvfp4':>8s} {'turbo4':>8s} {'turbo4-gauss':>13s}   (mean per-token relative error, 4.5 bits each)")
for e in errs:
    print(f"{e['outlier']:>10d} {e['nvfp4']:8.4f} {e['turbo4']:8.4f} {e['turbo4-gauss']:13.4f}")
nb.md(findings.outlier_rotation_sentence(errs))
"""),
("md", r"""
The mechanism to look for: on Gaussian vectors NVFP4's grid with a scale per 16 values is already a good 4-bit
quantizer, so the three should be close. With one channel much larger than the rest, NVFP4's block that holds it
takes its scale from the outlier and rounds the other values of its block coarsely, while the rotation spreads the
outlier over all 64 coordinates and a *fitted* codebook can learn the two-humped shape this leaves; a Gaussian
codebook assumes a shape the data no longer has. So the seed's claim has a mechanism — it needs outlier channels.
Does the lab's model have them?

### On the model, live: one short window
"""),
("code", r"""
from fp8lab import data, models
lm = models.load_model(verbose=False)
n_tok = 192 if SMALL else 1024
text = data.load_corpus("boolq").text
ids = lm.tokenizer(text[:40000], return_tensors="pt")["input_ids"]
live = kv_bits.live_key_errors(lm.model, ids, n_tok, every=5)     # calibrate on one stretch, measure on the next
print(f"{n_tok} calibration + {n_tok} test tokens; mean per-token relative error of the keys, every 5th layer")
print(f"{'layer':>5s} {'e4m3-dyn':>9s} {'nvfp4':>7s} {'turbo4':>7s}   {'max|gamma| attn norm':>20s}")
for r in live:
    print(f"{r['layer']:5d} {r['e4m3-dyn']:9.4f} {r['nvfp4']:7.4f} {r['turbo4']:7.4f}   {r['attn_norm_max']:20.3f}")
"""),
("md", r"""
## 2 · The committed run: error by layer, sensitivity by layer, perplexity by position

`python -m fp8lab.kv_bits --record` does it all with one model load, every token in one role only: calibration
windows fit the frozen constants; separate *sensitivity* windows store one layer's K/V in NVFP4 at a time (one
configuration per layer) to rank the layers; the *test* windows (by default at the model's full 8k context; the
committed run's length is printed below) give the per-token K/V error of every method in every layer (during the
baseline forward) and the perplexity of every configuration by position, with 95 % paired bootstrap intervals over windows (`fp8lab.kv_drift`'s buckets). `nvfp4-sens4` keeps the four layers
the sensitivity windows ranked highest; `nvfp4-hp2` keeps the first and last two — the same count. Every configuration
is causal (constants frozen before the test windows, each token stored from itself). The run's own n (windows and
tokens) is printed from its summary: it may have been recorded with fewer windows than the defaults.
"""),
("code", r"""
run = nb.recorded("kv_bits", "summary.json", "ppl_by_position.csv", "kv_error_by_layer.csv", "layers.csv",
                  "sensitivity.csv", "ppl_compare.csv", "nll_by_bucket.csv")
res = kv_bits.load(run) if run else None      # not recorded: python -m fp8lab.kv_bits --record
if res:
    s = res["summary"]
    print(f"{s['test_windows']} test windows x {s['seq_len']} tokens; calibration {s['cal_windows']} x {s['cal_len']}; "
          f"sensitivity {s['sens_windows']} x {s['sens_len']}; {s['wall_s']:.0f} s; {s['model_note']}")
    print(findings.few_units_note(s["test_windows"], "test windows"))
"""),
("md", r"""
### Per-token K/V error by layer, beside the RMSNorm weights

Each layer's K and V from the baseline forward of the test windows, quantized by each method on its own: the mean
over tokens and heads of ‖x − x̂‖ / ‖x‖, and the ratio turbo4 / NVFP4 pooled over layers with its interval over
windows. The right panel shows what the seed's condition is about: the attention-input RMSNorm weights |γ| of each
layer, and how far the largest K/V channel sits above the median one (the outlier ratio).
"""),
("code", r"""
if res:
    for k, v in s["error_ratio"].items():
        print(f"error ratio {k:32s} {v['ratio']:.4f}  [{v['ci95_low']:.4f}, {v['ci95_high']:.4f}]")
    print(findings.kv_norms_line(res["layers"], s))
    nb.show(kv_bits.plot_errors(res["errors"], res["layers"], s["model_note"]))
"""),
("md", r"""
### Which layers are sensitive?
"""),
("code", r"""
if res and res["sensitivity"]:
    for line in findings.kv_sensitive_layer_lines(res["sensitivity"], top=6):
        print(line)
    print("picked for nvfp4-sens*:", s["sens_picked"])
    print(findings.few_units_note(res["sensitivity"][0]["n"], "sensitivity windows"))
    nb.show(kv_bits.plot_sensitivity(res["sensitivity"], s["model_note"]))
"""),
("md", r"""
### Perplexity by position, up to the run's window length

Change against the baseline cache per position bucket (95 % paired CI over the test windows). FP8 rows are the
reference points from notebook 03; every 4-bit row spends 4.5 bits per element in its quantized layers.
"""),
("code", r"""
if res:
    print(kv_bits.kv_drift.format_table(res["ppl"]))
    fig = kv_bits.kv_drift.plot(res["ppl"], note=s["model_note"])
    fig.suptitle("4-bit and FP8 KV caches: perplexity change by position in the context", fontsize=14)
    nb.show(fig)
"""),
("md", r"""
Head-to-head comparisons, paired on the same windows (the reference is the second configuration, not the baseline):
"""),
("code", r"""
if res:
    for line in findings.kv_head_to_head_lines(res):
        print(line)
"""),
("md", r"""
## 3 · Seed 002: an NVFP4-KV decode attention kernel (GPU)

The seed's NVFP4 cache is read by an attention kernel that dequantizes at the MMA boundary. The lab's FP8-KV kernel
(notebook 08) is the template; an NVFP4-KV version reads 4.5 instead of 16 bits per element, so a memory-bound decode
could approach the byte ratio (16 / 4.5) times the same kernel on BF16. The numbers below are read from a recorded
GPU run of `python -m fp8lab.kernels.bench attention` (`outputs/kernels/attention.json`).
"""),
("code", r"""
att_dir = nb.recorded("kernels", "attention.json")
att = bench_attention.load(att_dir / "attention.json") if att_dir else None
print(findings.nvfp4_byte_bound_line(head_dim=128))
if att:
    print(bench_attention.format_goals(att))
"""),
("md", r"""
## 4 · Seed 004: FP8 KV made long-context prefill slower (GPU)

Seed 004's numbers are quoted in the first code cell. Prefill attention is compute-bound, not bandwidth-bound: a chunk
of many queries reuses each cached K/V many times, so halving the bytes buys little, while converting FP8 to BF16 on
CUDA cores (Hopper has no FP8 attention path here) costs work per element. The lab's chunked-prefill measurement (BF16
vs FP8 KV for chunks of query tokens against a long cached prefix, beside torch SDPA) is recorded on a GPU by
`python -m fp8lab.kernels.bench prefill_attn` (`outputs/kernels/prefill_attention.json`); the contexts and chunks it
covers are printed with it.
"""),
("code", r"""
pf_dir = nb.recorded("kernels", "prefill_attention.json")
pf = bench_prefill_attn.load(pf_dir / "prefill_attention.json") if pf_dir else None
if pf:
    print(bench_prefill_attn.format_summary(pf))
    print()
    print(bench_prefill_attn.format_napkin(pf))
    for line in findings.prefill_crossover_lines(pf):
        print(line)
    print()
    print(bench_prefill_attn.seed004_reading(pf))
"""),
("code", r"""
if pf:
    nb.show(bench_prefill_attn.plot_ratio(pf))
"""),
("md", r"""
## 5 · Seeds 000 and 002: the GB10 serving numbers against the bandwidth ceiling

A decode step reads every active weight once; at the GB10's specified bandwidth (`fp8lab.gpus`, a spec, not a
measurement) that sets a tokens-per-second ceiling for one token per weight read. A claim above it can only come
from speculative decoding (MTP), which needs an acceptance rate the table states. The table is arithmetic from the
published configurations committed under `fp8lab/model_configs/` (`fp8lab.serving_claims`), computed here:
"""),
("code", r"""
claims = serving_claims.claims_table()
print(serving_claims.format_claims(claims))
"""),
("md", r"""
And seed 002's statement about SM121's instructions, against the machine code notebook 09 reads (compiled, not run):
"""),
("code", r"""
sass_dir = nb.recorded("kernels/sass", "summary.json")
sass = gb10_report.load(sass_dir / "summary.json", live_if_missing=False) if sass_dir else None
if sass:
    print(findings.fp4_sass_text(sass))
"""),
("md", r"""
## 6 · The claims, marked

Each verdict below is computed from the files above. For the quality claims, "confirmed here" or "contradicted
here" only where the 95 % interval of the deciding number excludes no effect (where a step of the run has few
windows, a caveat printed under its summary says how to read those intervals). Two kinds of verdict rest on no interval: the
sensitive-layer claim compares the *set* of layers picked by point estimate with the first and last ones (the paired
interval printed beside it is the test of whether the pick matters), and the kernel claims read one recorded
run on the GPU named in them. GPU-only claims stay open until a recorded run exists.
"""),
("code", r"""
for claim, verdict, evidence in findings.seed_kv_verdicts(res, att, pf, claims, sass):
    print(f"- {claim}\n    -> {verdict.upper()}\n       {evidence}")
"""),
("md", r"""
## Exercises

Worked answers: `notebooks/solutions/13_seed_claims_kv.py` (they run on the CPU in the tests).

1. The ablation: on synthetic keys with one outlier channel, is it the rotation or the fitted codebook that makes
   `turbo4` beat NVFP4? Compare `nvfp4`, `nvfp4-rot` (rotation, NVFP4 grid), `turbo4-gauss` (rotation, data-free
   codebook) and `turbo4`.
2. What do the group sizes cost? Compute the bits per element of `turbo4` and `turbo4-g64` at head_dim 64 and 128,
   and of `nvfp4`; which spends less on scales, and what would it have to win back?
3. From the committed run: is "first and last" the right rule for this model? Compare the layers the sensitivity
   windows picked with the first/last ones, and read the paired interval of `nvfp4-sens4` against `nvfp4-hp2`.
4. For the GB10 claim closest to its ceiling, how much does the ceiling drop at an 8k context (the KV cache joins the
   bytes per token), and does the verdict change?
5. The sweep has the same caches as recipes (`nvfp4-kv`, `nvfp4-kv-hp2`, `turbo4-kv`, `turbo4-kv-gauss`): are they
   causal, and when do their constants freeze?
"""),
]
