PATH = "notebooks/03_kv_cache_calibration.ipynb"
CELLS = [
("md", r"""
# 03 · The FP8 KV cache: calibration and long-context drift

**The big idea.** At long context and large batch the KV cache *is* the memory: for Llama-3-8B at 8k context and
batch 32 it is twice the weights (notebook 04). Storing keys and values in FP8 halves it. But an FP8 cache needs a
scale per layer (or head, or channel), fixed *before* decoding starts, and the checkpoints seed 004 inspected ship
none — so vLLM uses 1.0.

**Three claims from the seeds, tested here:**
1. seed 000: "without calibration, long-context FP8 KV drifts; with a 256-token calibration pass it matches BF16 to
   within measurement noise";
2. seed 003: the KV cache is the costliest of the FP8 recipes (+6 % perplexity on its model);
3. seed 003's suggestion: per-channel key scales should recover most of that loss (keys have fixed outlier channels).

**What we can measure here.** Quality, exactly, on the CPU: the attention reads keys (after RoPE) and values
rounded to E4M3/E5M2 with the chosen scales (`fp8lab.calibration`, hooked where the sweep's KV recipes hook).
Per-token losses on the same windows for every configuration give paired intervals per position bucket.
**What we cannot:** the model's full 8,192-token context on 2 CPU cores (we use 2,048-token windows; see the
provenance), and speed — the FP8-KV attention kernel's H200 timings are recorded in notebook 08 and summarized
at the end.

*The model's weights are 4-bit GGUF (Q4_1) dequantized to float32: "baseline" is already a quantized model.*
"""),
("code", r"""
import os, json
import torch
from fp8lab import calibration, kv_drift, models
SMALL = os.environ.get("FP8LAB_SMALL") == "1"
"""),
("md", r"""
## Calibration, live: what max |K| and max |V| look like per layer

An observer watches the keys and values the attention reads during the first N tokens and keeps the running max.
Frozen, `scale = amax / 448`. Below: the first 64 tokens of a BoolQ passage through the embedded model.
"""),
("code", r"""
from fp8lab import data
lm = models.load_model()
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
print(f"with scale 1.0, E4M3 keeps values in [2**-9, 448]: keys fit (max {max(k):.1f}); values below "
      f"2**-6 = 0.0156 fall in E4M3's subnormals and lose precision")
"""),
("md", r"""
## The experiment (committed run)

`python -m fp8lab.kv_drift --windows 8 --seq-len 2048` ran every configuration on the same eight 2,048-token windows
of BoolQ passages. `e4m3-cal{N}` calibrates on the first N tokens of each window (a short forward, like a server's
calibration pass over the first tokens it serves) and freezes the per-layer scales for the whole window. The table
gives the perplexity change against the baseline cache per position bucket, with its 95 % paired bootstrap interval
over windows.
"""),
("code", r"""
rows = kv_drift.read_csv("../outputs/kv_drift/kv_drift.csv")
prov = json.load(open("../outputs/kv_drift/provenance.json"))
print(f"{prov['command']}  |  commit {prov['git_commit'][:12]}  |  {prov['date']}  |  {prov['wall_s']} s on {prov['device']}")
print(kv_drift.format_table(rows))
"""),
("code", r"""
fig = kv_drift.plot(rows, note=prov["model_note"])
"""),
("md", "READING_PLACEHOLDER"),
("md", r"""
## Speed: what the FP8 cache buys in the attention kernel (recorded on an H200)

Halving the bytes of the cache can at most halve the time of a memory-bound decode attention. The lab's own kernel
reads E4M3 K/V with the calibrated scales and is compared with the same kernel on a bf16 cache and with torch's SDPA,
in the same run (details and the design in notebook 08). These are recorded numbers, never re-timed on a CPU:
"""),
("code", r"""
from fp8lab.kernels import bench_attention
att = bench_attention.load("../outputs/kernels/attention.json")
print(bench_attention.format_provenance(att))
print(bench_attention.format_summary(att))
"""),
("md", r"""
## Things to try
- `python -m fp8lab.kv_drift --seq-len 4096 --windows 4`: push further into the model's 8k context (about 4× the CPU
  time per window).
- `python -m fp8lab.sweep --recipes e4m3-kv-uncal,e4m3-kv-cal256 --tasks ppl,arc_easy`: the calibrated cache inside
  the main sweep (online calibration: the scale freezes after the first 256 tokens the model ever sees).
- Calibrate on a different text than you evaluate (a code snippet, then prose): does a frozen scale transfer?
- Per-channel scales for keys only, per-token for values (KIVI's split): write it as a `calibration.StaticKVScales`
  with channel-shaped `k` tensors and scalar `v` tensors.
"""),
]
