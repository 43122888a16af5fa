PATH = "notebooks/04_bandwidth_roofline.ipynb"
CELLS = [
("md", r"""
# 04 · Bandwidth math and the roofline

**The big idea.** A decode step reads every weight once and the whole KV cache of every sequence in the batch, and
does about 2 FLOPs per weight per sequence. Memory delivers a few TB/s; tensor cores deliver hundreds of TFLOP/s. So
decode waits on memory, and its ceiling is simply `tokens/s per sequence = bandwidth / bytes read per step`. Fewer
bytes per weight (FP8, NVFP4) raise that ceiling.

**The key insight.** A format only shrinks the tensors it converts. FP8 checkpoints keep embeddings, `lm_head` and
norms in BF16, and the KV cache is a separate switch. At long context and large batch the cache *is* the traffic,
so FP8 weights alone move the ceiling far less than "half the bytes" suggests — and once the batch is large enough,
decode stops being memory-bound and bytes stop mattering at all.

**What we can and cannot measure here.** Everything below is arithmetic from a model's `config.json`
(`fp8lab.bandwidth`) and a GPU table (`fp8lab.gpus`): datasheet numbers (dense, i.e. NVIDIA's "with sparsity" figures
halved) labelled `spec`, and the lab's own H200 reference run labelled `measured`. No kernel is timed in this notebook;
the kernel notebooks add measured points to the same roofline (`roofline_figure(measured_points=...)`).
"""),
("code", r"""
import os, tempfile
from pathlib import Path
import matplotlib.pyplot as plt
from IPython.display import Image, display
from fp8lab import bandwidth as bw
from fp8lab.gpus import format_gpu_table

ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "fp8lab").is_dir())
LLAMA3 = ROOT / "tests/data/llama3_8b_config.json"      # the public Llama-3-8B config.json values
SMOL = ROOT / "tests/data/smollm2_135m_config.json"      # a tiny model: SmolLM2-135M
SMALL = os.environ.get("FP8LAB_SMALL") == "1"            # tests: write to a temp dir, not outputs/
OUT = Path(tempfile.mkdtemp()) if SMALL else ROOT / "outputs/bandwidth"
print(format_gpu_table())
"""),
("md", r"""
## Seed 003's table, recomputed

Seed 003 §3: *"Llama-3-8B at 8k context, batch 32: weights 16.1 / 8.0 GB, KV cache 34.4 / 17.2 GB, read per decode
step 50.5 / 25.2 GB (bf16 / FP8)."* Its conventions, found by matching the numbers: GB = 10⁹ bytes; *every* parameter
in FP8 (embeddings included); the KV cache in the same dtype as the weights, counted at the full 8k for all 32
sequences; the whole embedding table counted as read every step.
"""),
("code", r"""
print(bw.format_seed003(bw.seed003_check(LLAMA3)))
"""),
("md", r"""
**Reading it.** Weights and KV cache match the seed to the digit: 32 layers × 2 (K and V) × 8 KV heads × 128 × 2 bytes
× 8192 tokens × 32 sequences is exactly 34.36 GB. The BF16 read-per-step does not: 16.06 + 34.36 = 50.42 GB, which
rounds to 50.4; the seed's 50.5 is its two *rounded* numbers added (16.1 + 34.4). A small slip, but the kind that
tells you a table was typed rather than computed.

The seed's conventions are napkin conventions. Real FP8 checkpoints leave embeddings, `lm_head` and norms in BF16
(`policy="linear"`), and decode gathers one embedding row per sequence rather than reading the table
(`embedding_read="rows"`). The package defaults are these; the full table for the seed's workload on an H200:
"""),
("code", r"""
r = bw.analyze(LLAMA3, batch=32, context=8192, gpu="H200")
print(bw.format_table(r))
"""),
("code", r"""
base = r["bytes_per_decode_step_by_kv"]["bf16"]["bf16"]
for kv in ("bf16", "fp8"):
    step = r["bytes_per_decode_step_by_kv"][kv]
    print(f"KV {kv:>4}: FP8 weights read {step['fp8_tensor'] / 1e9:5.2f} GB per step -> ceiling x{base / step['fp8_tensor']:.2f} "
          f"vs all-BF16 ({base / 1e9:.2f} GB)")
"""),
("md", r"""
**Reading it.** At batch 32 × 8k the KV cache is most of the traffic, so FP8 *weights* with a BF16 cache raise the
ceiling by far less than 2×; FP8 weights *and* an FP8 cache get close to it. The last column of the big table is
the other half of the story: the batch at which decode stops being memory-bound. With no context (weights only) it
is the ridge point — about 206 FLOP/byte for BF16 on an H200, i.e. batch ≈ 207. At 8k context it is *never*: every
extra sequence brings its own KV cache, whose attention does only a few FLOPs per byte read, so decode stays
memory-bound at any batch.

## Seed 000's "122B class: 76 GB NVFP4 vs 152 GB FP8"
"""),
("code", r"""
c = bw.seed000_check()
print(f"122e9 parameters, all in the format:  FP8 {c['all_fp8_bytes'] / 1e9:.1f} GB   NVFP4 {c['all_nvfp4_bytes'] / 1e9:.3f} GB"
      f"   (FP8 / NVFP4 = {c['fp8_over_nvfp4']:.2f}x)")
print(f"76 GB NVFP4 implies {c['bf16_params_implied_by_claim'] / 1e9:.2f}e9 parameters left in BF16; "
      f"the same split in FP8 weighs {c['fp8_bytes_same_bf16_split'] / 1e9:.1f} GB, not {c['claimed_fp8_bytes'] / 1e9:.0f}")
"""),
("md", r"""
**Reading it.** NVFP4 is 4.5 bits per value (4-bit E2M1 plus one E4M3 byte per 16), so FP8 is 1.78× NVFP4, not 2×.
The seed's 152 GB is 2 × 76 GB; neither number follows from 122·10⁹ parameters (122.0 and 68.6 GB), although 76 GB
is plausible if about five billion parameters stay BF16. The conclusion survives — FP8 weights alone nearly fill a
128 GB GB10, NVFP4 leaves room — but the arithmetic behind it does not.

## The roofline

Hollow markers are *ceilings* computed here (decode at several batches with and without an 8k context, one 8k-token
prefill); they sit on the roof by construction. Measured kernels will appear as filled stars. The figure and its data
are written by `bw.roofline_figure` to `outputs/bandwidth/` (with provenance) and shown from there.
"""),
("code", r"""
fig, data = bw.roofline_figure(LLAMA3, out_png=OUT / "roofline_h200.png", out_json=OUT / "llama3_8b.json",
                               command="notebooks/04_bandwidth_roofline.ipynb: bw.roofline_figure(LLAMA3)")
plt.close(fig)
display(Image(filename=str(OUT / "roofline_h200.png")))
"""),
("md", r"""
**Reading it.** Decode with no context walks up the memory roof as the batch grows and meets the compute roof at
about the same batch for BF16 and FP8 (207 and 221 in the table above): FP8 doubles both the FLOPs per byte of a
sequence and, on paper, the roof. A format computed in BF16 (NVFP4 on Hopper) gets there sooner (69). With an 8k context the points barely move: the
KV cache holds intensity near the attention's few FLOPs per byte. Prefill sits far to the right, deep in the
compute-bound region. The dashed roofs are the lab's measured H200: lower bandwidth and 67–75 % of the datasheet's
dense GEMM rate.

## When FP8 will not help (seed 003's list, with numbers)

### 1. Prefill is compute-bound
"""),
("code", r"""
for gpu in ("H200", "H200-measured"):
    for fmt in ("bf16", "fp8_tensor"):
        p = bw.prefill_point(LLAMA3, fmt, tokens=8192, gpu=gpu)
        print(f"{gpu:<14} {fmt:<11} intensity {p['intensity']:8.0f} FLOP/B  ridge {p['ridge']:5.0f}  "
              f"compute {p['time_compute_s'] * 1e3:6.1f} ms  memory {p['time_memory_s'] * 1e3:5.2f} ms")
"""),
("md", r"""
**Reading it.** An 8k-token prompt does thousands of FLOPs per byte: memory time is a rounding error next to compute
time, so halving the bytes does nothing here. Seed 003 stops there — but on a GPU *with* FP8 tensor cores the FLOP
rate itself doubles on paper, and the lab's H200 run measured 1320 vs 745 TFLOP/s (1.77×) for the GEMMs. With
attention still in BF16, FP8 prefill comes out 1.4–1.8× faster on these ceilings (table in §3). "FP8 will not help prefill" is true of
the bandwidth argument, not of FP8.

### 2. Tiny models are overhead-bound
"""),
("code", r"""
for name, cfg in (("SmolLM2-135M", SMOL), ("Llama-3-8B", LLAMA3)):
    for fmt, b in bw.overhead_budget(cfg, "H200", batch=1, context=0).items():
        print(f"{name:<13} {fmt:<11} step at the ceiling {b['step_us']:8.1f} us   per layer {b['per_layer_us']:6.2f} us"
              f"   per kernel (7/layer, assumed) {b['per_kernel_us']:6.2f} us")
"""),
("md", r"""
**Reading it.** At the bandwidth ceiling a 135M-parameter model's whole decode step takes tens of microseconds: a
fraction of a microsecond per kernel. Launching a CUDA kernel costs microseconds (a typical figure, *not* measured
here), so the step is set by launches and synchronisation, not bytes; FP8 halves a number that no longer matters
(CUDA graphs and kernel fusion are what help). For an 8B model each kernel has ~7–14 µs of memory traffic to hide
behind, and bytes matter again.

### 3. No FP8 units
"""),
("code", r"""
print(bw.format_gain_table(bw.gain_table(LLAMA3, batch=1, context=8192)))
"""),
("md", r"""
**Reading it.** A format the GPU has no tensor cores for (MXFP8 and NVFP4 on Hopper) is dequantized to BF16 inside
the GEMM: prefill gains nothing (1.00 here, and less in reality because the dequantization itself is not modelled).
But single-sequence decode still reads fewer bytes — that is what weight-only kernels such as Marlin W4A16/W8A16 are
for — so "you pay the conversion and get nothing back" holds for the compute-bound side only. `H200-measured` uses
the lab's measured rates: block-scaled FP8 GEMMs (1129 TFLOP/s) gain less than per-tensor ones (1320).

## Things to try
- `python -m fp8lab.bandwidth tests/data/llama3_8b_config.json --batch 32 --context 8192 --kv-dtype fp8 --gpu B200`
- A MoE config (`num_local_experts`): at batch 1 only k of E experts are read; how fast does the read grow with batch?
- `--policy all --embedding-read table` reproduces the seed's conventions; how far is it from the defaults at batch 1?
- Feed the kernel notebooks' measured GEMV/GEMM results to `roofline_figure(measured_points=[...])`.
"""),
]
