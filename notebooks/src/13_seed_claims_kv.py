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
"baseline" is already a quantized model.*
"""),
("code", r"""
import os, glob, json, logging, warnings
warnings.filterwarnings("ignore"); logging.disable(logging.WARNING)     # library chatter, not results
from pathlib import Path
import torch
from transformers.utils import logging as hf_logging
hf_logging.disable_progress_bar()
from fp8lab import hadamard, kv_bits, kv_quant as kq, provenance
SMALL = os.environ.get("FP8LAB_SMALL") == "1"
RUN = Path("../outputs/kv_bits")          # the committed run (read only: this notebook never writes outputs/)
torch.manual_seed(0)
"""),
("md", r"""
## 1 · Two 4-bit caches at the same bit budget

Bits per stored element, counting the scale bytes (the per-layer constants — NVFP4's fp32 global scale, the
16-level codebook, the rotation's signs — are a few hundred bytes per layer, nothing per element):
"""),
("code", r"""
for m in ("e4m3-uncal", "e4m3-dyn", "nvfp4", "turbo4", "turbo4-g64"):
    print(f"{m:12s} {kq.bits_per_element(m, 64):5.2f} bits/element   ({kv_bits._causal_note(m)})")
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
g = torch.Generator().manual_seed(0)
rel = lambda a, b: float(((a - b).norm(dim=-1) / a.norm(dim=-1)).mean())
print(f"{'outlier x':>10s} {'nvfp4':>8s} {'turbo4':>8s} {'turbo4-gauss':>13s}   (mean per-token relative error, 4.5 bits each)")
for outlier in (1, 5, 20, 50):
    k = torch.randn(1, 2, 2048, 64, generator=g); k[..., 5] *= outlier
    cal = kq.KVCalibration(64, groups=(32,)); cal.observe(0, "key", k[:, :, :1024]); p = cal.fit()
    t = k[:, :, 1024:]
    e = {m: rel(t, kq.KV4Plan(m, p).quantizer(0, "key")(t)) for m in ("nvfp4", "turbo4", "turbo4-gauss")}
    print(f"{outlier:>10d} {e['nvfp4']:8.4f} {e['turbo4']:8.4f} {e['turbo4-gauss']:13.4f}")
"""),
("md", r"""
On Gaussian vectors the three are close: NVFP4's grid with a scale per 16 values is already a good 4-bit quantizer.
With one channel much larger than the rest, NVFP4's block that holds it takes its scale from the outlier and rounds
its 15 neighbours coarsely, while the rotation spreads the outlier over all 64 coordinates and the *fitted* codebook
learns the two-humped shape this leaves. The Gaussian codebook does not: its levels assume a shape the data no longer
has. So the seed's claim has a mechanism — it needs outlier channels. Does the lab's model have them?

### On the model, live: one short window
"""),
("code", r"""
from fp8lab import data, models, recipes
from fp8lab.calibration import dynamic_fake_quant
lm = models.load_model(verbose=False)
n_tok = 192 if SMALL else 1024
text = data.load_corpus("boolq").text
ids = lm.tokenizer(text[:40000], return_tensors="pt")["input_ids"]
cal_ids, test_ids = ids[:, :n_tok], ids[:, n_tok:2 * n_tok]       # calibrate on one stretch, measure on the next
cal = kq.KVCalibration(64, groups=(32,))
with recipes.install_kv_functions(lm.model, cal.make), torch.no_grad():
    lm.model(cal_ids)
params = cal.fit("live")
kv = {}
with recipes.install_kv_functions(lm.model, lambda l, w: (lambda t: kv.setdefault((l, w), t.clone()))), torch.no_grad():
    lm.model(test_ids)
norms = kv_bits.rmsnorm_stats(lm.model)
print(f"{n_tok} calibration + {n_tok} test tokens; mean per-token relative error of the keys, every 5th layer")
print(f"{'layer':>5s} {'e4m3-dyn':>9s} {'nvfp4':>7s} {'turbo4':>7s}   {'max|gamma| attn norm':>20s}")
for l in range(0, lm.model.config.num_hidden_layers, 5):
    k = kv[(l, "key")]
    e = [rel(k, dynamic_fake_quant(k))] + [rel(k, kq.KV4Plan(m, params).quantizer(l, "key")(k)) for m in ("nvfp4", "turbo4")]
    print(f"{l:5d} {e[0]:9.4f} {e[1]:7.4f} {e[2]:7.4f}   {norms[l]['attn_norm_max']:20.3f}")
"""),
("md", r"""
## 2 · The committed run: error by layer, sensitivity by layer, perplexity by position

`python -m fp8lab.kv_bits` does it all with one model load, every token in one role only: calibration windows fit
the frozen constants; separate *sensitivity* windows store one layer's K/V in NVFP4 at a time (30 configurations)
to rank the layers; the *test* windows, at the model's full 8,192-token context, give the per-token K/V error of
every method in every layer (during the baseline forward) and the perplexity of every configuration by position,
with 95 % paired bootstrap intervals over windows (`fp8lab.kv_drift`'s buckets). `nvfp4-sens4` keeps the four layers
the sensitivity windows ranked highest; `nvfp4-hp2` keeps the first and last two — the same count.
"""),
("code", r"""
try:
    res = kv_bits.load(RUN)
except FileNotFoundError:
    res = None
    print(f"{RUN} is not in this checkout yet. Make it with:\n"
          "  python -m fp8lab.kv_bits --windows 6 --seq-len 8192 --cal-windows 4 --cal-len 2048 "
          "--sens-windows 8 --sens-len 2048 --record")
if res:
    s = res["summary"]
    print(provenance.describe(res["provenance"]))
    print(f"{s['test_windows']} test windows x {s['seq_len']} tokens; calibration {s['cal_windows']} x {s['cal_len']}; "
          f"sensitivity {s['sens_windows']} x {s['sens_len']}; {s['wall_s']:.0f} s; {s['model_note']}")
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
    g = [float(r["attn_norm_max"]) for r in res["layers"]]
    print(f"attention-norm |gamma|: largest {max(g):.3f} (layer {g.index(max(g))}), smallest layer max {min(g):.3f}; "
          f"final norm max {s['final_norm_abs']['max']:.3f}; K outlier ratio up to "
          f"{max(float(r['key_outlier_ratio']) for r in res['layers']):.1f}")
    fig = kv_bits.plot_errors(res["errors"], res["layers"], s["model_note"])
"""),
("md", r"""
### Which layers are sensitive?
"""),
("code", r"""
if res and res["sensitivity"]:
    top = sorted(res["sensitivity"], key=lambda r: -r["kl_mean"])[:6]
    print("most sensitive layers (mean KL per token, nats; ppl change %, both with 95 % CI over windows):")
    for r in top:
        print(f"  layer {r['layer']:2d}: KL {r['kl_mean']:.5f} [{r['kl_ci95_low']:.5f}, {r['kl_ci95_high']:.5f}]   "
              f"ppl {r['delta_pct']:+.3f} % [{r['ci95_low']:+.3f}, {r['ci95_high']:+.3f}]")
    print("picked for nvfp4-sens*:", s["sens_picked"])
    fig = kv_bits.plot_sensitivity(res["sensitivity"], s["model_note"])
"""),
("md", r"""
### Perplexity by position up to 8k

Change against the baseline cache per position bucket (95 % paired CI over the test windows). FP8 rows are the
reference points from notebook 03; every 4-bit row spends 4.5 bits per element in its quantized layers.
"""),
("code", r"""
if res:
    print(kv_bits.kv_drift.format_table(res["ppl"]))
    fig = kv_bits.kv_drift.plot(res["ppl"], note=s["model_note"])
    fig.suptitle("4-bit and FP8 KV caches: perplexity change by position in the context", fontsize=14)
"""),
("md", r"""
Head-to-head comparisons, paired on the same windows (the reference is the second configuration, not the baseline):
"""),
("code", r"""
if res:
    for a, b in (("turbo4", "nvfp4"), ("nvfp4-hp1", "nvfp4"), ("nvfp4-hp2", "nvfp4"), ("nvfp4-hp4", "nvfp4"),
                 ("nvfp4-sens4", "nvfp4-hp2"), ("nvfp4", "e4m3-dyn")):
        t = kv_bits.pooled(res, a, b)
        if t:
            print(f"{a:12s} vs {b:10s} all positions: {t[0]:+6.2f} % [{t[1]:+.2f}, {t[2]:+.2f}]")
"""),
("md", r"""
## 3 · Seed 002: an NVFP4-KV decode attention kernel (GPU)

The seed's NVFP4 cache is read by an attention kernel that dequantizes at the MMA boundary. The lab's FP8-KV kernel
(notebook 08) is the template; an NVFP4-KV version reads 4.5 instead of 16 bits per element, so a memory-bound decode
could approach 16 / 4.5 = 3.56× the same kernel on BF16. The numbers below are read from a recorded GPU run.
"""),
("code", r"""
def recorded(*words, show=True):
    files = [f for f in sorted(glob.glob("../outputs/kernels/*.json")) if all(w in Path(f).name for w in words)]
    for f in files if show else []:
        d = json.load(open(f))
        print(Path(f).name, "|", provenance.describe(d.get("provenance", {})))
        print("   goal:", d.get("goal", "(none recorded)"))
    return files
if not recorded("nvfp4", "attention") and not recorded("nvfp4kv"):
    print("NVFP4-KV attention kernel: recorded on a GPU run: not yet")
"""),
("md", r"""
## 4 · Seed 004: FP8 KV made long-context prefill slower (GPU)

Seed 004 reports a 250K-token document taking 45 s to first token with an FP8 KV cache against 34 s with BF16.
Prefill attention is compute-bound, not bandwidth-bound: a chunk of many queries reuses each cached K/V many times,
so halving the bytes buys little, while converting FP8 to BF16 on CUDA cores (Hopper has no FP8 attention path
here) costs work per element. The lab's chunked-prefill measurement (chunks of 512–8192 queries against 32k–256k
cached tokens, BF16 vs FP8 KV, beside torch SDPA) is recorded on a GPU:
"""),
("code", r"""
if not recorded("prefill"):
    print("long-context prefill with FP8 KV: recorded on a GPU run: not yet")
"""),
("md", r"""
## 5 · Seeds 000 and 002: the GB10 serving numbers against the bandwidth ceiling

A decode step reads every active weight once; at 273 GB/s that sets a tokens-per-second ceiling for one token per
weight read. A claim above it can only come from speculative decoding (MTP), which needs an acceptance rate the
table states. The table comes from `fp8lab.serving_claims` (the published configurations, bytes per token):
"""),
("code", r"""
try:
    from fp8lab import serving_claims
except ImportError:
    serving_claims = None
    print("fp8lab.serving_claims is not in this checkout: the GB10 table is not available here")
if serving_claims is not None:
    try:
        print(serving_claims.format_claims(serving_claims.claims_table()))
    except Exception as e:          # an interface that moved: say so in one line rather than fail the notebook
        print(f"fp8lab.serving_claims could not build its table here: {type(e).__name__}: {e}")
"""),
("md", r"""
## 6 · The claims, marked

Each verdict below is computed from the files above: "confirmed here" or "contradicted here" only where the 95 %
interval of the deciding number excludes no effect; GPU-only claims stay open until a recorded run exists.
"""),
("code", r"""
rows = []
if res:
    rows += kv_bits.verdicts(res)
    g = max(float(r["attn_norm_max"]) for r in res["layers"])
    rows.append(("seed 000's condition: 'on models with large RMSNorm weights'", "untestable here",
                 f"the seed does not say how large; this model's attention-norm |gamma| reach {g:.3f} and its final "
                 f"norm's {s['final_norm_abs']['max']:.3f} (RMSNorm weights start at 1.0). Whether turbo4's margin "
                 "grows with large weights needs a model that has them"))
else:
    rows.append(("4-bit KV claims (seeds 000, 002)", "untestable until outputs/kv_bits exists", "run the command in section 2"))
rows.append(("seed 002: NVFP4-KV attention kernel", "recorded" if recorded("nvfp4", "attention", show=False) else "untestable here (GPU): not yet recorded", "section 3"))
rows.append(("seed 004: FP8 KV slows long-context prefill", "recorded" if recorded("prefill", show=False) else "untestable here (GPU): not yet recorded", "section 4"))
rows.append(("seeds 000/002: GB10 serving numbers", "see section 5" if serving_claims else "not yet in this checkout", "section 5"))
for claim, verdict, evidence in rows:
    print(f"- {claim}\n    -> {verdict.upper()}\n       {evidence}")
"""),
("md", r"""
## Things to try

- `python -m fp8lab.kv_bits --configs baseline,nvfp4,nvfp4-rot,turbo4,turbo4-gauss,turbo4-g64 --sens-windows 0`:
  the ablations — is it the rotation or the fitted codebook that helps, and what does 0.25 bit of scale buy?
- `--configs baseline,nvfp4,nvfp4-sens2,nvfp4-sens8,nvfp4-hp1,nvfp4-hp4`: how many layers must stay in high
  precision, and does the data's pick keep beating the first/last rule?
- Point `--model` at a model with large RMSNorm weights (or a `k_norm`, as Qwen3 has) where a hub is reachable:
  does turbo4's margin over NVFP4 grow with the outlier ratio, as the synthetic example in section 1 suggests?
- The sweep has the same caches as recipes (`nvfp4-kv`, `nvfp4-kv-hp2`, `turbo4-kv`, `turbo4-kv-gauss`); there the
  constants freeze after the first 256 tokens the model sees.
"""),
]
