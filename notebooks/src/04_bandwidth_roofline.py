PATH = "notebooks/04_bandwidth_roofline.ipynb"
CELLS = [
("md", r"""
# 04 · Bandwidth math and the roofline

**The big idea.** A decode step reads every weight once and the whole KV cache of every sequence in the batch, and
does about 2 FLOPs (a multiply and an add) per weight per sequence. Memory delivers a few TB/s; tensor cores deliver
hundreds of TFLOP/s. So decode waits on memory, and its ceiling is simply
`tokens/s per sequence = bandwidth / bytes read per step`. Fewer bytes per weight (FP8, NVFP4) raise that ceiling.

**The key insight.** A format only shrinks the tensors it converts. FP8 checkpoints keep embeddings, `lm_head` and
norms in BF16, and the KV cache is a separate switch. At long context and large batch the cache *is* the traffic,
so FP8 weights alone move the ceiling far less than "half the bytes" suggests — and once the batch is large enough,
decode stops being memory-bound and bytes stop mattering at all.

**What we can and cannot measure here.** Everything below is arithmetic from a model's `config.json`
(`fp8lab.bandwidth`) and a GPU table (`fp8lab.gpus`): datasheet numbers (dense, i.e. NVIDIA's "with sparsity" figures
halved) labelled `spec`, and the lab's own H200 reference run labelled `measured`, read from a committed file with
its date and device. No kernel is timed in this notebook; the kernels measured on the H200 (notebooks 06–08) are
read from their committed files and drawn on the same roofline. Nothing here writes to `outputs/`.
"""),
("code", r"""
from fp8lab import bandwidth as bw, findings, gpus
from fp8lab import notebook as nb

LLAMA3 = nb.REPO / "tests/data/llama3_8b_config.json"      # the public Llama-3-8B config.json values
SMOL = nb.REPO / "tests/data/smollm2_135m_config.json"      # a tiny model: SmolLM2-135M
print(gpus.format_gpu_table())
"""),
("md", r"""
## Where the measured ceilings come from

The `H200-measured` row is read from `outputs/reference/` (one run on the lab's H200, with its date and device). Each
kernel benchmark also measured its own anchors in the same run; the table below puts them side by side, so a
reader can see how much the same card's copy bandwidth and GEMM rates moved between runs.
"""),
("code", r"""
import json
H = gpus.get_gpu("H200-measured")
print(f"H200-measured: {H.label}; from {H.citation}")
print(f"  {H.notes}\n")
ref = json.loads(gpus.H200_REFERENCE.read_text())
provs = []
rows = [("reference file", nb.rel(gpus.H200_REFERENCE), ref.get("copy_TBps"), ref.get("bf16_gemm_TFLOPs"),
         ref.get("fp8_scaled_mm_tensorwise_TFLOPs"))]
for fam, key_copy in (("gemm", "copy_gbps"), ("attention", "copy_gbps"), ("quant", "copy_gbps_2GiB")):
    K = nb.recorded("kernels", f"{fam}.json", prov=None, quiet=True)
    if K:
        d = json.loads((K / f"{fam}.json").read_text())
        c = d.get("ceilings", {})
        provs.append(f"  {fam}.json: {nb.provenance_line(d)}")
        rows.append((f"{fam} run", str(d.get("provenance", {}).get("date", "?"))[:10],
                     (c.get(key_copy) or 0) / 1e3 or None, c.get("bf16_gemm_tflops_8192"),
                     c.get("fp8_scaled_mm_tensorwise_tflops_8192")))
    else:
        rows.append((f"{fam} run", "not recorded yet", None, None, None))
f = lambda v, s: ("-" if v is None else format(v, s)).rjust(int(s.split(".")[0]))
print(f"{'source':16s} {'file / date':44s} {'copy TB/s':>9s} {'bf16 TFLOP/s':>12s} {'fp8 TFLOP/s':>11s}")
for name, where, cp, b16, f8 in rows:
    print(f"{name:16s} {where:44s} {f(cp, '9.2f')} {f(b16, '12.0f')} {f(f8, '11.0f')}")
print("\ncopy = device-to-device copy (bytes read + written); GEMMs at 8192^3: cuBLAS bf16, torch._scaled_mm FP8 tensorwise")
print("\n".join(["the runs:"] + provs))
"""),
("md", r"""
## Seed 003's table, recomputed

Seed 003 §3 printed the weights, the KV cache and the bytes read per decode step of Llama-3-8B at 8k context and batch
32, in bf16 and FP8 (its numbers are in the `seed` columns below). Its conventions, found by matching the numbers:
GB = 10⁹ bytes; *every* parameter in FP8 (embeddings included); the KV cache in the same dtype as the weights,
counted at the full 8k for all 32 sequences; the whole embedding table counted as read every step.
"""),
("code", r"""
s3 = bw.seed003_check(LLAMA3)
print(bw.format_seed003(s3))
S = {r["quantity"]: r for r in s3}
w, kv, rd = S["weights"], S["kv_cache"], S["read_per_step"]
nb.md(f'''**Reading it.** Weights and KV cache match the seed to one decimal: 32 layers × 2 (K and V) × 8 KV heads × 128
× 2 bytes × 8192 tokens × 32 sequences is {kv["ours_bf16_GB"]:.2f} GB. The BF16 read per step does not: ours is
{w["ours_bf16_GB"]:.2f} + {kv["ours_bf16_GB"]:.2f} = {rd["ours_bf16_GB"]:.2f} GB, which rounds to {rd["ours_bf16_GB"]:.1f};
the seed's {rd["seed_bf16_GB"]:.1f} is its two *rounded* numbers added ({w["seed_bf16_GB"]:.1f} + {kv["seed_bf16_GB"]:.1f}
= {w["seed_bf16_GB"] + kv["seed_bf16_GB"]:.1f}). A small slip, but the kind that tells you a table was typed rather than
computed.''')
"""),
("md", r"""
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
gain = {}
for kv in ("bf16", "fp8"):
    step = r["bytes_per_decode_step_by_kv"][kv]
    gain[kv] = base / step["fp8_tensor"]
    print(f"KV {kv:>4}: FP8 weights read {step['fp8_tensor'] / 1e9:5.2f} GB per step -> ceiling x{gain[kv]:.2f} "
          f"vs all-BF16 ({base / 1e9:.2f} GB)")
cb = r["compute_bound_from_batch"]
nb.md(f'''**Reading it.** At batch 32 × 8k the KV cache is most of the traffic: FP8 *weights* with a BF16 cache raise the
ceiling by {gain["bf16"]:.2f}×, FP8 weights *and* an FP8 cache by {gain["fp8"]:.2f}×. The last column of the big
table is the other half of the story: the batch at which decode stops being memory-bound. With no context (weights
only) it is the ridge point — {r["ridge_flops_per_byte"]["bf16"]:.0f} FLOP/byte for BF16 on this GPU, reached at batch
{cb["bf16"]["weights_only"]}. At 8k context it is {"*never*" if cb["bf16"]["at_context"] is None else cb["bf16"]["at_context"]}:
every extra sequence brings its own KV cache, whose attention does only a few FLOPs per byte read, so decode stays
memory-bound at any batch.''')
"""),
("md", r"""
## Seed 000's "122B class" weights in NVFP4 and FP8

Seed 000 gave the weights of a model of the 122B class in NVFP4 and in FP8 (its claims are the `claimed`
fields below). NVFP4 is 4.5 bits per value (4-bit E2M1 plus one E4M3 byte per 16 values).
"""),
("code", r"""
c = bw.seed000_check()
print(f"claimed: NVFP4 {c['claimed_nvfp4_bytes'] / 1e9:.0f} GB, FP8 {c['claimed_fp8_bytes'] / 1e9:.0f} GB")
print(f"122e9 parameters, all in the format:  FP8 {c['all_fp8_bytes'] / 1e9:.1f} GB   NVFP4 {c['all_nvfp4_bytes'] / 1e9:.3f} GB"
      f"   (FP8 / NVFP4 = {c['fp8_over_nvfp4']:.2f}x)")
print(f"the claimed NVFP4 size implies {c['bf16_params_implied_by_claim'] / 1e9:.2f}e9 parameters left in BF16; "
      f"the same split in FP8 weighs {c['fp8_bytes_same_bf16_split'] / 1e9:.1f} GB, not {c['claimed_fp8_bytes'] / 1e9:.0f}")
nb.md(f'''**Reading it.** FP8 is {c["fp8_over_nvfp4"]:.2f}× NVFP4, not 2×. The seed's FP8 figure is
{c["claimed_fp8_bytes"] / c["claimed_nvfp4_bytes"]:.1f} × its NVFP4 figure; neither follows from 122·10⁹ parameters all in the
format ({c["all_fp8_bytes"] / 1e9:.1f} and {c["all_nvfp4_bytes"] / 1e9:.1f} GB), although the NVFP4 size is plausible if
about {c["bf16_params_implied_by_claim"] / 1e9:.0f} billion parameters stay BF16. The conclusion survives — FP8 weights alone
nearly fill a GB10's {gpus.get_gpu("GB10").memory_GB:.0f} GB, NVFP4 leaves room — but the arithmetic behind it does not.''')
"""),
("md", r"""
## The roofline, with the kernels the lab measured

Hollow markers are *ceilings* computed here (decode at several batches with and without an 8k context, one 8k-token
prefill); they sit on the roof by construction. Stars are **measured**, read from committed files: the GEMM benchmark
(`outputs/kernels/gemm.json`: the fastest version of each of our GEMVs — FP8 with block scales, NVFP4 — and cuBLAS
bf16 at the largest decode shape for one and sixteen tokens; our fastest W8A8 kernel and cuBLAS bf16 at every number
of tokens timed on the largest prefill shape) and the decode-layer benchmark (`outputs/kernels/layer.json`: one
whole Llama-3-8B layer at decode, timed as one CUDA graph, in bf16, with `torch._scaled_mm`, and the fastest of the
lab's FP8 and of its NVFP4 variants at each batch); the banner of each names the GPU that recorded it.
Intensity = FLOPs / bytes the kernel (or the layer) moved, height = its measured rate. A star far below the roof is a
kernel that does not reach the hardware's limit.
"""),
("code", r"""
G = nb.recorded("kernels", "gemm.json", prov=None)
points = []
if G:
    gemm = json.loads((G / "gemm.json").read_text())
    # one star per kernel: kernel_roofline_points leaves out the PDL launches (the same kernels overlapping a neighbour)
    points = findings.kernel_roofline_points(gemm)
from fp8lab.kernels import layer_report as lr
LY = nb.recorded("kernels", "layer.json", prov=None)
# the whole layer: the fastest variant of each kind (bf16, scaled_mm, fp8, nvfp4) at each batch, at a 1k context
layer_points = findings.layer_roofline_stars(lr.load(LY / "layer.json"), context=lr.GOAL_POINT[1]) if LY else []
points = points + layer_points
fig, data = bw.roofline_figure(LLAMA3, measured_points=points,
                               command="notebooks/04_bandwidth_roofline.ipynb: bw.roofline_figure(LLAMA3)")
nb.show(fig)
meas = gpus.get_gpu("H200-measured")
# share of the measured H200's roof above each star: the memory roof for decode, the GEMM rate for prefill
points = findings.share_of_measured_roof(points, meas)
print(findings.format_roofline_points(points))
"""),
("code", r"""
dec_roof = [p["of_roof"] for p in points if p["family"] == "decode"]
pre_roof = [p["of_roof"] for p in points if p["family"] == "prefill"]
lay = {f'{p["kernel"]} B={p["batch"]}': p for p in points if p["family"] == "layer"}   # one entry per variant and batch
nb.md(f'''**Reading it.** Decode with no context walks up the memory roof as the batch grows and meets the compute roof at
batch {cb["bf16"]["weights_only"]} for BF16 and {cb["fp8_tensor"]["weights_only"]} for FP8 (table above): FP8 doubles both the
FLOPs per byte of a sequence and, on paper, the roof. A format computed in BF16 (NVFP4 on Hopper) gets there sooner
({cb["nvfp4"]["weights_only"]}). With an 8k context the points barely move: the KV cache holds intensity near the attention's
few FLOPs per byte. Prefill sits far to the right, deep in the compute-bound region. The dashed roofs are the lab's
measured H200: {meas.bandwidth_TBps:.2f} TB/s of copy bandwidth and {100 * meas.tflops["bf16"] / gpus.get_gpu("H200").tflops["bf16"]:.0f} % (BF16) and
{100 * meas.tflops["fp8"] / gpus.get_gpu("H200").tflops["fp8"]:.0f} % (FP8) of the datasheet's dense GEMM rates. The measured
decode stars sit at decode's low intensity and reach {findings.ratio_range(dec_roof)} of the measured memory roof there (a
pure read can beat the copy test the roof comes from); the prefill stars reach {findings.ratio_range(pre_roof)} of the
measured roof above them (the GEMM rate of their format, or the memory roof where few tokens leave the intensity
below the ridge).''' + (f''' The whole decode layer sits at the same low intensity and reaches
{findings.ratio_range([p["of_roof"] for p in lay.values()])} of the measured memory roof ({", ".join(f"{k} {p['of_roof']:.2f}" for k, p in lay.items())}):
what separates a whole layer from one large GEMV is its small matrices, its launches and the kernels that move few
bytes (notebook 07 breaks the layer down, kernel by kernel).''' if lay else "") if points else "No measured kernel points: outputs/kernels/gemm.json is not recorded yet.")
"""),
("md", r"""
## When FP8 will not help (seed 003's list, with numbers)

### 1. Prefill is compute-bound
"""),
("code", r"""
P = {}
for gpu in ("H200", "H200-measured"):
    for fmt in ("bf16", "fp8_tensor"):
        p = P[(gpu, fmt)] = bw.prefill_point(LLAMA3, fmt, tokens=8192, gpu=gpu)
        print(f"{gpu:<14} {fmt:<11} intensity {p['intensity']:8.0f} FLOP/B  ridge {p['ridge']:5.0f}  "
              f"compute {p['time_compute_s'] * 1e3:6.1f} ms  memory {p['time_memory_s'] * 1e3:5.2f} ms")
gt = bw.gain_table(LLAMA3, batch=1, context=8192)
pre = [g["prefill_gain"] for g in gt if g["gpu"] in ("H200", "H200-measured") and g["format"].startswith("fp8") and g["prefill_gain"]]
nb.md(f'''**Reading it.** An 8k-token prompt does thousands of FLOPs per byte: memory time is a rounding error next to
compute time, so halving the bytes does nothing here. Seed 003 stops there — but on a GPU *with* FP8 tensor cores the
FLOP rate itself doubles on paper, and the lab's H200 reference run measured {meas.tflops["fp8"]:.0f} vs
{meas.tflops["bf16"]:.0f} TFLOP/s ({meas.tflops["fp8"] / meas.tflops["bf16"]:.2f}×) for the GEMMs. With attention still in BF16,
FP8 prefill comes out {findings.ratio_range(pre)}× faster on these ceilings (table in §3). "FP8 will not help prefill" is
true of the bandwidth argument, not of FP8.''')
"""),
("md", r"""
### 2. Tiny models are overhead-bound
"""),
("code", r"""
OB = {}
for name, cfg in (("SmolLM2-135M", SMOL), ("Llama-3-8B", LLAMA3)):
    for fmt, b in bw.overhead_budget(cfg, "H200", batch=1, context=0).items():
        OB[(name, fmt)] = b
        print(f"{name:<13} {fmt:<11} step at the ceiling {b['step_us']:8.1f} us   per layer {b['per_layer_us']:6.2f} us"
              f"   per kernel (7/layer, assumed) {b['per_kernel_us']:6.2f} us")
small_k = [OB[k]["per_kernel_us"] for k in OB if k[0] == "SmolLM2-135M"]
big_k = [OB[k]["per_kernel_us"] for k in OB if k[0] == "Llama-3-8B"]
nb.md(f'''**Reading it.** At the bandwidth ceiling SmolLM2-135M's whole decode step takes
{min(OB[k]["step_us"] for k in OB if k[0] == "SmolLM2-135M"):.0f}–{max(OB[k]["step_us"] for k in OB if k[0] == "SmolLM2-135M"):.0f} µs:
{min(small_k):.2f}–{max(small_k):.2f} µs per kernel. Launching a CUDA kernel costs microseconds (a typical figure, *not*
measured here), so the step is set by launches and synchronisation, not bytes; FP8 halves a number that no longer
matters (CUDA graphs and kernel fusion are what help). For Llama-3-8B each kernel has {min(big_k):.0f}–{max(big_k):.0f} µs
of memory traffic to hide behind, and bytes matter again.''')
"""),
("md", r"""
### 3. No FP8 units
"""),
("code", r"""
print(bw.format_gain_table(gt))
nvp = [g["prefill_gain"] for g in gt if g["format"] == "nvfp4" and g["gpu"].startswith("H200")]
nb.md(f'''**Reading it.** A format the GPU has no tensor cores for (MXFP8 and NVFP4 on Hopper) is dequantized to BF16 inside
the GEMM: prefill gains nothing ({findings.ratio_range(nvp)}× here, and less in reality because the dequantization itself is
not modelled). But single-sequence decode still reads fewer bytes — that is what weight-only kernels such as Marlin
W4A16/W8A16 are for — so "you pay the conversion and get nothing back" holds for the compute-bound side only.
`H200-measured` uses the lab's measured rates: block-scaled FP8 GEMMs ({meas.tflops["fp8_block"]:.0f} TFLOP/s) gain less
than per-tensor ones ({meas.tflops["fp8"]:.0f}).''')
"""),
("md", r"""
## The same model on a GB10 (spec, not measured)

Decode ceilings depend only on the bytes per step and the bandwidth, so the same table on a GB10 (LPDDR5x memory
shared with the CPU) is arithmetic too — the lab has run nothing on a GB10, and every GB10 number below says so.
"""),
("code", r"""
print(bw.format_decode_ceilings(bw.decode_ceilings(LLAMA3, batch=1, context=8192)))
"""),
("md", r"""
## Exercises

Worked answers: `notebooks/solutions/04_bandwidth_roofline.py`.

1. `python -m fp8lab.bandwidth tests/data/llama3_8b_config.json --batch 32 --context 8192 --kv-dtype fp8 --gpu B200`:
   how much does an FP8 cache raise the B200's ceiling at this batch and context?
2. A MoE config (`num_local_experts`): at batch 1 only k of E experts are read. How fast does the read grow with
   the batch (`bandwidth.distinct_expert_fraction`)?
3. `--policy all --embedding-read table` reproduces seed 003's conventions: how far is it from the defaults at
   batch 1?
4. Put the attention kernel's recorded times on the roofline: how many FLOPs and bytes does one decode step of the
   benchmark's attention (8 sequences, 32 query heads over 8 KV heads, head dim 128) do at 32k context?
5. The measured decode layer (`outputs/kernels/layer.json`): put its tokens/s (32 layers, nothing else) beside the
   ceiling `fp8lab.bandwidth` gives the whole model at batch 1 and 1k context on the measured H200. What share of the
   whole model's bytes per step do the 32 layers account for, and what does the rest consist of?
"""),
]
