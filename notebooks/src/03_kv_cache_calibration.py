PATH = "notebooks/03_kv_cache_calibration.ipynb"
CELLS = [
("md", r"""
# 03 · The FP8 KV cache: calibration and long-context drift

**The big idea.** At long context and large batch the KV cache *is* the memory: for Llama-3-8B at 8k context and
batch 32 it is about twice the weights (notebook 04 computes it). Storing keys and values in FP8 halves it. But an FP8
cache needs a scale per layer (or head, or channel), fixed *before* decoding starts, and the checkpoints seed 004
inspected ship none — so vLLM uses 1.0.

**Three claims from the seeds, tested here:**
1. seed 000: "without calibration, long-context FP8 KV drifts; with a 256-token calibration pass it matches BF16 to
   within measurement noise";
2. seed 003: the KV cache is the costliest of the FP8 recipes;
3. seed 003's suggestion: per-channel key scales should recover most of that loss (keys have fixed outlier channels).

**What we can measure here.** Quality, exactly, on the CPU: the attention reads keys (after RoPE) and values
rounded to E4M3/E5M2 with the chosen scales (`fp8lab.calibration`, hooked where the sweep's KV recipes hook).
Per-token losses on the same windows for every configuration give paired intervals per position bucket. Two
committed runs: the main one on 2,048-token windows with every configuration, and a smaller one at the model's
full 8,192-token context with four configurations (the CPU time per window grows faster than the window, so it has
fewer windows; its provenance prints its size and wall time). **What we cannot:** speed — the FP8-KV attention kernel's
H200 timings are recorded in notebook 08 and summarized at the end.

**Causal or oracle.** Every configuration of the drift experiment is *causal* from position N on: a calibrated
scale is fitted on the first N tokens of the window, then frozen (inside those N tokens it saw its own future, like a
server calibrating on a prompt); scale 1.0 and per-token scales never see the future. In the sweep's KV recipes, the
dynamic per-tensor and per-channel scales are **oracles** (one scale over the whole window); their causal
counterparts are the `-tok` recipes. Each table says which is which.

*The model's weights are 4-bit GGUF (Q4_1) dequantized to float32: "baseline" is already a quantized model.*
"""),
("code", r"""
import json
import torch
from IPython.display import display
from fp8lab import calibration, data, findings, kv_drift, models
from fp8lab import notebook as nb
from fp8lab.formats import E4M3
SMALL = nb.small()
"""),
("md", r"""
## Calibration, live: what max |K| and max |V| look like per layer

An observer watches the keys and values the attention reads during the first N tokens and keeps the running max.
Frozen, `scale = amax / 448`. Below: the first tokens of a BoolQ passage through the embedded model.
"""),
("code", r"""
lm = models.load_model(verbose=False)
text = data.load_corpus("boolq").text
ids = lm.tokenizer(text[:4000], return_tensors="pt")["input_ids"][:, :128]
obs = calibration.KVObserver(n_tokens=64, granularity="tensor")
with calibration.observe_kv(lm.model, obs), torch.no_grad():
    lm.model(ids)
k = [float(obs.k_amax[i]) for i in sorted(obs.k_amax)]
v = [float(obs.v_amax[i]) for i in sorted(obs.v_amax)]
print("layer:     " + " ".join(f"{i:5d}" for i in range(0, len(k), 3)))
print("max |K|:   " + " ".join(f"{k[i]:5.1f}" for i in range(0, len(k), 3)))
print("max |V|:   " + " ".join(f"{v[i]:5.2f}" for i in range(0, len(v), 3)))
nb.md(f'''Over the {len(k)} layers, max |K| lies between **{min(k):.2f} and {max(k):.2f}** and max |V| between
**{min(v):.2f} and {max(v):.2f}**, on these {obs.n_tokens} tokens. With scale 1.0, E4M3 keeps magnitudes in
[2⁻⁹, 448] and has its full 3-bit mantissa from 2⁻⁶ = {E4M3.min_normal:.4f} up: {"nothing here reaches 448, so nothing saturates" if max(max(k), max(v)) < E4M3.max else "some values exceed 448 and saturate"};
values smaller than 2⁻⁶ (the small entries of each head, not the maxima) fall into the subnormals and lose
precision. A model whose keys exceed 448, or whose values sit near 10⁻³, would behave differently: that is what the
seeds could not tell apart, and why a lab measures per model.''')
"""),
("md", r"""
## The experiment (committed run, `outputs/kv_drift/`)

`python -m fp8lab.kv_drift --windows 8 --seq-len 2048 --record` runs every configuration on the same windows of
BoolQ passages. `e4m3-cal{N}` calibrates on the first N tokens of each window (a short forward, like a server's
calibration pass over the first tokens it serves) and freezes the per-layer scales for the whole window. The table
gives the perplexity change against the baseline cache per position bucket, with its 95 % paired bootstrap interval
over windows; the causal column says from where on each configuration is causal.
"""),
("code", r"""
D = nb.recorded("kv_drift", "kv_drift.csv")
if D:
    rows = kv_drift.read_csv(D / "kv_drift.csv")
    prov = json.loads((D / "provenance.json").read_text()) if (D / "provenance.json").is_file() else {}
    print(f"n = {rows[0]['n']} windows x {prov.get('seq_len', '?')} tokens; wall {prov.get('wall_s', '?')} s")
    print(kv_drift.format_table(rows))
    print()
    for c in dict.fromkeys(r["config"] for r in rows):
        print(f"{c:22s} {findings.kv_config_causality(c)}")
"""),
("code", r"""
if D:
    nb.show(kv_drift.plot(rows, note=prov.get("model_note", "")))
"""),
("md", r"""
## Reading it

What to look for, and why it would happen:

* **Claim 1, "without calibration it drifts; calibrated on 256 tokens it matches BF16 within noise".** If scale
  1.0 is harmless for this model (the calibration cell above says whether anything reaches 448), the uncalibrated
  cache costs the same at every position, and calibrating cannot help: a calibrated scale only changes *which*
  values are subnormal.
* **Calibration frozen too early.** A scale fitted on 16 tokens under-estimates the maxima later tokens reach;
  those saturate, so the cost grows with position. More calibration tokens flatten the curve.
* **Frozen per-channel scales.** A scale per (head, dim) channel fitted on 256 tokens is tight; a later token that
  exceeds its own channel's max saturates hard. Finer static scales over-fit the calibration window (seed 003's
  per-channel suggestion is about *dynamic* scales).
* **Dynamic per-token scales** fit every token exactly: the reference any static scheme gives up against.
* **E5M2** trades a mantissa bit for range the cache may not need.

What the committed run shows (rendered from `outputs/kv_drift/kv_drift.csv`):
"""),
("code", r"""
if D:
    nb.md("\n".join(f"* {s}" for s in findings.kv_drift_findings(rows)))
"""),
("md", r"""
## Further into the context: the model's full 8,192 tokens (committed run, `outputs/kv_drift_8k/`)

Four configurations (scale 1.0, calibrated on 256 tokens, dynamic per-token, and the baseline) on fewer windows:
read the trend, not the third digit.
"""),
("code", r"""
D8 = nb.recorded("kv_drift_8k", "kv_drift.csv")
if D8:
    rows8 = kv_drift.read_csv(D8 / "kv_drift.csv")
    prov8 = json.loads((D8 / "provenance.json").read_text()) if (D8 / "provenance.json").is_file() else {}
    print(f"n = {rows8[0]['n']} windows x {prov8.get('seq_len', '?')} tokens; wall {prov8.get('wall_s', '?')} s")
    print(kv_drift.format_table(rows8))
    nb.show(kv_drift.plot(rows8, note=prov8.get("model_note", "")))
    nb.md("\n".join(f"* {s}" for s in findings.kv_long_findings(rows8)))
"""),
("md", r"""
Whether a static FP8 scale has a position-dependent cost at long context, and whether calibrating on 256 tokens
removes it, is exactly what the bullets above answer for this model. A longer run (more windows) is the first thing
to try on a GPU machine: `python -m fp8lab.kv_drift --seq-len 8192 --windows 16 --device cuda`.

## The KV recipes inside the sweep (committed run, `outputs/sweep_more/`)

The same question through the main sweep's recipes, on the sweep's shorter windows: dynamic per-tensor and
per-channel scales recomputed every forward (**oracles**: one scale over the whole window), the causal per-token
scales (`-tok`), and the static ones (`e4m3-kv-uncal`; `e4m3-kv-cal256`, frozen after the first 256 tokens the
model ever sees).
"""),
("code", r"""
from fp8lab import sweep
M = nb.recorded("sweep_more", "results.csv")
if M:
    more = nb.results_frame(M / "results.csv")
    kv = more[(more.task == "ppl") & (more.metric == "ppl") & more.recipe.str.contains("kv|baseline")]
    display(sweep.delta_table(more, "ppl", "ppl", order=list(dict.fromkeys(kv.recipe))))
    nb.md("\n".join(f"* {s}" for s in findings.kv_sweep_findings(
        more, e5_vs_e4=sweep.compare(M, "ppl", "e5m2-kv-tok", "e4m3-kv-tok"))))
"""),
("md", r"""
### Claims 2 and 3, paired

Claim 2 asks whether the KV cache is the costliest step of the recipe table; claim 3 whether per-channel key scales
recover most of the cache's loss. Both are paired comparisons on the same windows (`sweep.compare` on the committed
`outputs/per_item/` and `outputs/sweep_more/per_item/`), rendered here with their intervals:
"""),
("code", r"""
R = nb.recorded("", "results.csv")
pairs = []
if R:
    pairs += [("Claim 2: the E4M3 KV cache on top of causal W+A", R, ("e4m3-wakv-tok", "e4m3-wa-tok")),
              ("for scale: the Linear inputs on top of the weights", R, ("e4m3-wa-tok", "e4m3-w")),
              ("for scale: the weights alone", R, ("e4m3-w", "baseline"))]
if M:
    pairs += [("Claim 3: per-channel against per-tensor KV scales, both oracles", M, ("e4m3-kv-perchannel", "e4m3-kv")),
              ("Claim 3, causal: frozen per-channel against frozen per-layer scales (256 tokens)", M,
               ("e4m3-kv-cal256-channel", "e4m3-kv-cal256"))]
nb.md("\n".join(f"* {findings.step_sentence(label, sweep.compare(F, 'ppl', *ab), *ab)}" for label, F, ab in pairs))
"""),
("md", r"""
## Speed: what the FP8 cache buys in the attention kernel (recorded on an H200)

Halving the bytes of the cache can at most halve the time of a memory-bound decode attention. The lab's own kernel
reads E4M3 K/V with the calibrated scales and is compared with the same kernel on a bf16 cache and with torch's SDPA,
in the same run (details and the design in notebook 08). These are recorded numbers, never re-timed on a CPU:
"""),
("code", r"""
from fp8lab.kernels import bench_attention
A = nb.recorded("kernels", "attention.json")
if A:
    att = bench_attention.load(A / "attention.json")
    print(bench_attention.format_summary(att))
"""),
("md", r"""
## Exercises

Worked answers: `notebooks/solutions/03_kv_cache_calibration.py` (the tests run each on a tiny slice).

1. Calibrate on a different text than you evaluate (a code snippet, then prose): does a frozen scale transfer?
   (`calibration.KVObserver` on one text, `calibration.static_kv` on the other.)
2. Per-channel scales for keys only, one scale per layer for values (KIVI's split): build it as a
   `calibration.StaticKVScales` with channel-shaped `k` tensors and scalar `v` tensors, and measure it.
3. Which of the sweep's KV recipes are oracles, and what is each one's causal counterpart
   (`recipes.CAUSAL_COUNTERPART`)?
4. `python -m fp8lab.kv_drift --seq-len 4096 --windows 4`: push further into the model's context (the CPU time
   per window grows faster than the window); `--configs baseline,e4m3-uncal,e4m3-dyn` keeps it short.
"""),
]
