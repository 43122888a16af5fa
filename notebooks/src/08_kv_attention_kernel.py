PATH = "notebooks/08_kv_attention_kernel.ipynb"
CELLS = [
("md", r"""
# 08 · An FP8 KV-cache decode attention kernel

**The big idea.** In a decode step every sequence reads its *whole* KV cache once to produce one token, and does
only a few FLOPs per byte it reads. At long context the cache is most of the memory traffic, so the time of the step
is roughly `cache bytes / memory bandwidth`. An E4M3 cache is half the bytes of a bf16 cache, so the attention could
be up to twice as fast — *if* the kernel's extra work per byte (widening FP8 to something the math units take) hides
under the memory time.

**The key insight.** Seed 004 reports vLLM serving *slower* with an FP8 KV cache than with bf16 at long context on
Hopper for some head sizes. Halving bytes only pays when the kernel is still bandwidth-bound after the conversion;
each FP8 byte carries twice the arithmetic of a bf16 byte. So we build both from one kernel — the same code,
templated on the element type — and measure the FP8 speedup against *the same design*, plus torch's own bf16 SDPA.

**What we can and cannot measure here.** The numerics below run on this CPU (the reference implementation).
Timings need a GPU: they are *recorded* (the lab's H200 in `outputs/kernels/`, an H100 in `outputs/kernels/h100/`),
each with its provenance naming the GPU, and only read here — this notebook never times anything on a CPU.
"""),
("code", r"""
from fp8lab import findings
from fp8lab import notebook as nb
from fp8lab.kernels import attention_fp8kv as att, bench_attention as ba, report

SMALL = nb.small()          # the tests set this: a smaller numerics example
"""),
("md", r"""
## The kernel's design (`fp8lab/kernels/attention_fp8kv.cu`)

* **One warp per (sequence, KV head, split of the context).** All `G = n_q / n_kv` query heads of a group ride in
  that warp, so each K/V byte is read from memory once, not G times. Long contexts are split (flash-decoding):
  every warp keeps an online softmax over its split in fp32, writes `(max, sum, unnormalized output)`, and a second
  small kernel merges the splits. The number of splits is rounded *down* to one wave of resident warps, so that
  no last partial wave of warps runs alone after the others have finished.
* **Tensor cores, registers only.** Per 16-token tile, `S = Q·Kᵀ` and then `Oᵀ += Vᵀ·Pᵀ` are `mma.sync.m16n8k16`
  with fp32 accumulation; the 16 MMA rows of the first are the query heads (G ≤ 16). Computing the *transposed*
  output lets S's accumulators serve as Pᵀ's operand exactly as they sit in registers, and with G ≤ 8 it needs half
  the accumulator registers of the FlashAttention-2 orientation `O += P·V` (kept as the `vb` variant).
* **No transposes, no shared memory.** Each lane loads 16-byte pieces of K and V rows directly from global memory.
  A dot product does not care about the order of its terms, so we *declare* that the dims a lane holds are the
  k-slots the MMA wants from it, and load Q with the same permutation; the same freedom orders tokens and output dims.
* **FP8 → f16 in registers, exactly.** Every E4M3 value is an f16, converted either by the `cvt.rn.f16x2.e4m3x2`
  instruction or by a bit move (the 7 exponent+mantissa bits slid into f16 give `value × 2⁻⁸`; the `2⁸` is folded
  into the scales). Q gets a per-head power-of-two prescale into f16; P is kept in `[0, 2¹⁵]` so f16's subnormals
  never flush it. The bf16 cache runs the same code with bf16 MMAs.
* **Paged cache.** A contiguous cache `[B, Hk, L, D]` *is* a paged pool with one page of L tokens per sequence, so
  one code path serves both; pages must be multiples of 16 tokens so that a tile never straddles two pages.
* **Fed deep enough.** A rotation of register tiles keeps loads running ahead: 4 tiles for FP8 at D = 128, 2 for
  bf16 — the deepest each fits without spills. An FP8 tile is half the bytes, so FP8
  needs more tiles in flight for the same bandwidth, and the registers it saves are what pays for them.

## Numerics: what an FP8 cache does to the attention output

`reference_decode_attention` (pure torch, CPU) dequantizes with `fp8lab.formats`, gathers pages, and runs float32
SDPA; the GPU kernel is tested against it (`tests/test_kernels_attention.py`). Here it compares *formats*: the output
with a bf16 cache and with E4M3 caches (vLLM's scale convention `k = decode(code) · k_scale`, scale = amax / 448)
against an fp32 cache, for normal keys and for keys with a few outlier channels scaled up (KIVI's observation; the
factor is in `attention_fp8kv.cache_error_table`).
"""),
("code", r"""
# one draw of q, K, V per seed; the table shows the first, the sentence the spread over all of them
tables = [att.cache_error_table(L=256 if SMALL else 1024, seed=s) for s in range(3 if SMALL else 8)]
print(att.format_error_table(tables[0]))
nb.md(findings.cache_error_sentence(tables))
"""),
("md", r"""
**Reading it.** Outlier key channels hurt through the logits: E4M3 keeps the same *relative* precision at every
magnitude inside its window, so the outlier channels carry rounding errors as many times larger as they are, into
every `q·k`, and the softmax amplifies logit errors. Per-head scales do not help when every head has the outlier
channels — and for a floating-point cache, per-channel key scales do not either: the ordinary channels were not
short of precision. Per-channel scales (KIVI's argument) pay off for *integer* caches, whose step is the scale;
exercise 1 measures both grids.

## Recorded timings (H200)

Read from `outputs/kernels/attention.json`; the banner says where, when and how they were measured. B = 8 sequences,
32 query heads over 8 KV heads, every sequence at the same context; CUDA-graph replays over cache copies several times
the L2, so the numbers are HBM, not cache and not Python overhead. `fp8/bf16` is our FP8 kernel against the same
kernel on a bf16 cache; `fp8/torch` is against torch SDPA (bf16, `enable_gqa=True`, the backend torch picks — named
in the full table); `xcopy` is the fraction of device-to-device copy bandwidth measured in the same run.

**Fractions of copy bandwidth above 1.0.** A device-to-device copy reads *and* writes every byte; the attention
kernel only reads (its output is a few kilobytes). On HBM a pure read stream runs a little faster than the
read-write mix of a copy (no turnarounds between reads and writes), so a kernel that reads well can exceed the copy's
bytes per second: `xcopy` above 1.0 means "reads faster than a copy moves bytes", not an error. The lines below name
the rows where that happened.
"""),
("code", r"""
A = nb.recorded("kernels", "attention.json", prov=None)
if A:
    data = ba.load(A / "attention.json")
    s = report.load_and_summarize(A / "attention.json", family="attention")
    print(s.banner)
    print()
    print(ba.format_provenance(data))
    print()
    print(ba.format_summary(data))
    print("\n" + findings.attention_goal_line(data))
else:
    data = None
    print("No recorded attention results: run `python -m fp8lab.kernels.bench attention` on a GPU. "
          "Nothing is shown rather than a number that was not measured.")
"""),
("code", r"""
if data is not None:
    nb.show(ba.plot_speedup(data))
"""),
("code", r"""
if data is not None:  # every row: both FP8 conversions, our bf16, each torch backend that accepted the inputs
    print(report.format_table(s, columns=("kernel", "shape", "time_us", "gbps", "fraction_of_copy_bw", "speedup", "anchor")))
    for n in data.get("notes", []):
        print("note:", n)
    print("\n" + findings.copy_bandwidth_above_one(s.table))
"""),
("md", r"""
**Reading it.** What to look for: at short context the step is short and the launches and the split merge are a
large share of it; at long context the FP8 speedup over the same kernel on bf16 settles short of the ideal factor of
two when the FP8 kernel reaches a smaller fraction of copy bandwidth than the bf16 one (compare the two `xcopy`
columns): with half the bytes per tile, the same per-tile work (MMAs, softmax, the widening) weighs twice as much
per byte. The numbers, from the recorded run:
"""),
("code", r"""
if data is not None:
    nb.md(findings.attention_context_bullets(data))
"""),
("md", r"""
Two things to read with care:
* **Against torch.** Compare our bf16 kernel's `xcopy` with the row of torch's pick (the backend is named in the
  table; FlashAttention forced is its own row). Where both run near copy bandwidth, "FP8 vs torch" is close to "FP8
  vs our bf16"; where our bf16 kernel reads well below it, the FP8/bf16 ratio flatters the FP8 kernel and the
  FP8/torch ratio is the honest one. The same holds for any row at D = 64.
* **Paged vs contiguous.** The paged rows read the same cache from 16-token pages in shuffled order. Where they run
  *faster* than the contiguous cache (the line below counts it, kernel by kernel), one reading: in the contiguous
  layout every warp streams its own region and concurrent reads sit a power-of-two stride apart; shuffled pages
  spread them. That is a hypothesis, not a measurement of DRAM channels.
"""),
("code", r"""
paged = findings.paged_vs_contiguous_sentence(data) if data is not None else ""
if paged:
    nb.md(paged)
"""),
("md", r"""
## Three versions, side by side

The design above is **version 1** (`attention_fp8kv.cu`, kept as it was measured: llm.c's habit). Two more versions
were written to close the gap between the FP8 kernel's fraction of copy bandwidth and the bf16 one's:

* **Version 2** (`attention_decode.cuh`, instantiated by `attention_decode_v2.cu`) keeps the tiles in flight in a
  per-warp shared-memory ring that every lane fills with 16-byte `cp.async` copies instead of registers (fewer
  registers per warp, so more warps per SM), shares one softmax update over several tiles and rotates the order in which
  warps visit their tiles.
* **Version 3** (`attention_decode_v3.cu`, the default for FP8 and bf16 caches on sm_90 and later) keeps version 2's
  ring and arithmetic and
  changes only how the bytes arrive: the **bulk copy engine** (`cp.async.bulk`) moves a tile's 16 K rows and 16 V
  rows as two contiguous runs, counted in on one mbarrier per ring stage, so a tile costs the warp two copy
  instructions instead of a few hundred address and copy instructions. Nsight Compute on versions 1 and 2 had shown
  the L2 busier than the DRAM for the same bytes (an exploratory profile, `tools/gpu/ncu_attn.py`; not a committed
  result); the copy engine asks the L2 for whole lines. A copy per *row*
  (into padded rows that the shared loads read without bank conflicts) is compiled too and measured in the sweep
  below: the copy instruction takes uniform operands, so ptxas turns 32 lanes' copies into a 32-pass loop. Which
  costs more, that loop or the bank conflicts of unpadded rows, is what the sweep answers.

Each version is timed in the same run, so whether a new version is faster is a measurement. `fp8 v3/v1` and
`bf16 v3/v1` are time ratios (**above 1: version 3 is slower**). The last two columns are the comparison a user makes:
the fastest FP8 (or NVFP4) kernel of the run against the fastest bf16 kernel of the run, whoever wrote it (any of our
versions, or torch SDPA).
"""),
("code", r"""
if data is not None:
    print(ba.format_versions(data))
    for text in findings.attention_version_sentences(data):
        nb.md(text)
"""),
("md", r"""
**The sweep that chose version 3's configuration** (`outputs/kernels/attention_sweep.json`: every compiled
configuration at 16k and 32k, D = 128 (recordings before the size rule below: 32k only), validated then timed in
interleaved rounds). A version-3 configuration is `(NS ring stages, COPY, MINB blocks per SM)`; COPY 1 is a copy per
tile's K and V, COPY 0 a copy per row, COPY 2 a copy per two tiles (so each bulk copy moves twice the rows).
"""),
("code", r"""
SW = nb.recorded("kernels", "attention_sweep.json", prov=None)
if SW:
    sweep = ba.load(SW / "attention_sweep.json")
    print(ba.format_sweep(sweep))
    for text in findings.attention_sweep_sentences(sweep):
        nb.md(text)
else:
    print("No recorded sweep: run `python -m fp8lab.kernels.bench attention --sweep` on a GPU.")
"""),
("md", r"""
**A default that depends on the cache's size.** Two tiles per bulk copy (COPY 2) move each stage's K and V rows in
copies twice as large; with fewer, longer splits per wave it also starts fewer warps. Which of the two wins depends on
how much cache there is to stream, so version 3's FP8 default (D = 128, groups of up to 8 query heads) follows a rule:
`attention_fp8kv.v3_default` picks the long-cache configuration from a cache size on (rows = batch × KV heads ×
tokens; paged caches only where a page holds two tiles). A rule measured once could be the noise of one run, so every
recording times the configuration the rule did *not* pick beside the default, at every context, in the same
interleaved rounds: the table below is that check (time ratio other / default: above 1, the rule chose well;
"apart": the two rows' quartile ranges do not overlap).
"""),
("code", r"""
print(findings.v3_default_rule_line())
if data is not None:
    print(ba.format_default_rule(data))
    nb.md(findings.default_rule_reading(data))
"""),
("code", r"""
if data is not None:
    nb.show(ba.plot_bandwidth(data))
"""),
("md", r"""
**Reading it (the mechanisms).** A decode attention kernel at long context is a stream: its time is the cache bytes
over the rate at which its warps keep loads in flight. Version 2 moved those bytes from registers to a shared-memory
ring: more warps fit, but each byte now makes two trips (global to shared, shared to registers), and every lane
spends instructions on addresses and copies of 16 bytes. Version 3 keeps the two trips and hands the first one to
the copy engine: what is left per tile is the arithmetic and the shared loads. Compare the versions' `xcopy` in the
figure: that fraction, not the FP8/bf16 ratio of one version, says whether a kernel reads at the memory limit.
At short context a fixed cost remains (the launches, the ramp of the first tiles, the split merge); it is a larger
share of a shorter step, so the fraction of copy bandwidth should grow with the context: compare the rows of the
summary table above.

## An NVFP4 cache

The NVFP4 kernel reads 4-bit E2M1 codes plus one E4M3 scale per 16 values (0.5625 bytes per element against bf16's
2, so at most 2 / 0.5625 times faster) and widens them to f16 in registers before the same MMAs. The lab's target is
written against the same kernel on bf16 at 32k (below). Its row in each table above is `nvfp4`; its error against an
fp32 cache is measured in notebook 13 (the seed claims about KV caches).

## The goals, as measured

The lab's targets for decode attention at long context (D = 128, contiguous): FP8 against the same kernel on bf16,
against torch SDPA and against copy bandwidth, and NVFP4 against bf16; each line gives the threshold, the measured
value and the verdict. A context the run did not measure says so.
"""),
("code", r"""
if data is not None:
    print(ba.format_goals(data))
    missed = findings.missed_goals_sentence(ba.goals_table(data))
    if missed:
        nb.md(missed)
"""),
("md", r"""
One run's verdict is one sample. The H200 run above was not the only one: earlier recordings of the same benchmark
are kept in `outputs/kernels/repeats/` (each with its provenance, and the digest of the kernel sources it timed: only
runs of the same code as the committed one are read together). Each goal read over all of them: every run's value (the committed run first),
the median, and in how many runs it was met. Where the runs disagree, the median is the verdict; where it sits a
hair from the threshold, the kernel is at the goal, not past it.
"""),
("code", r"""
from fp8lab.kernels import gemm_report
reps = gemm_report.repeat_runs("attention.json", gemm_report.RECORD_FOLDERS[0])
same, other = gemm_report.same_sources(reps)
if reps:
    print("\n".join(gemm_report.run_line(d) for d in reps))
if other:
    print(f"{len(other)} of these {len(reps)} runs timed other kernel sources than the committed run "
          "(another default, another kernel): left out of the reading below")
if len(same) > 1:
    GR = report.goal_repeats(same, ba.goals_table)
    print(report.format_goal_repeats(GR))
    nb.md(findings.goal_repeats_sentence(GR, (same[0].get("provenance") or {}).get("device")))
else:
    print("(one H200 attention run of the committed sources: no repeats to compare yet)")
"""),
("md", r"""
The same attention recording run on an H100 (`outputs/kernels/h100/attention.json`, where one was recorded), read the
same way. The goals are set for the H200 and decided there; this run is shown because it may time a newer kernel than
the H200 run above (each banner names the commit it measured) beside its own anchors: its ratios compare kernels
timed in the same rounds on one GPU, never across GPUs.
"""),
("code", r"""
AH = nb.recorded("kernels/h100", "attention.json", prov=None, quiet=True)
h100_att = ba.load(AH / "attention.json") if AH else None
if h100_att:
    print(ba.format_provenance(h100_att))
    print()
    print(ba.format_goals(h100_att))
    if ba.default_rule_rows(h100_att):
        print()
        print(ba.format_default_rule(h100_att))
        nb.md(findings.default_rule_sentence(ba.default_rule_rows(h100_att), h100_att["provenance"].get("device"))
              + " The rule's threshold was set from H200 sweeps; a GPU with other bandwidth per SM can prefer the "
              "other side of it.")
else:
    print("(no H100 attention run recorded)")
"""),
("md", r"""
**Why a short context misses.** Each kernel's time over the recorded contexts is fitted as
`fixed + cache bytes / rate` (`ba.fixed_cost_fit`, three points per kernel, so `r2` says little beyond "a line
fits"): the fixed part is what a call costs regardless of the context (the launches, the first tiles' latency, the
split merge), the rate is how fast the kernel streams once running. `fixed share` is that fixed part's share of the
shortest context's time, and `xcopy w/o fixed` the fraction of copy bandwidth the kernel would read there without it.
A negative fixed part means the kernel streams longer caches faster per byte than short ones, so the fitted line
crosses below zero at zero bytes; it is not a negative cost.
"""),
("code", r"""
if data is not None:
    print(ba.format_fixed_cost(data))
    fixed = findings.attention_fixed_cost_sentence(data)
    if fixed:
        nb.md(fixed)
"""),
("md", r"""
**One piece of the fixed cost: merging the splits.** A long sequence is cut into splits that run on different warps;
each split leaves a partial softmax (its max, its sum and its unnormalized output) and a merge combines them. Versions
1 and 2 launch a second kernel for the merge, which can start only once the whole first grid has drained. Version 3
merges inside the kernel: the 4 warps of a block combine their partials in shared memory, and the last block of each
(sequence, kv head) to finish -- counted by an atomic counter -- combines the blocks' partials and writes the output.
Both merges run in every recording (the `{reduce}` rows), so the saving is measured, not assumed:
"""),
("code", r"""
if data is not None:
    print(ba.format_merge_comparison(data))
    merged = findings.merge_in_kernel_sentence(data)
    if merged:
        nb.md(merged)
"""),
("md", r"""
**What the counter's fences cost in instructions.** The last block to arrive must see every other block's partial.
In the GPU's memory model that takes two halves: each block *releases* its partial when it counts itself in, and the
block that draws the last count *acquires* before it reads. A cache hint such as `ld.global.cg` (read through L2) is
only a hint: it orders nothing. The CUDA sample `threadFenceReduction` uses `__threadfence()` before every block's
atomic, and a second one in the last block. Read the SASS before trusting that it is cheap:
each `__threadfence()` compiles to `MEMBAR.SC.GPU` (a sequentially consistent fence) plus `CCTL.IVALL`, which throws
away the whole SM's L1 cache, also for the other blocks running there. Version 3 instead orders a block's stores with its
barrier and lets thread 0 count the arrival with a *release* atomic (`MEMBAR.ALL.GPU`, no invalidation); only the last
block's thread 0 runs the acquire (`fence.acq_rel.gpu`: `MEMBAR.ALL.GPU` + `CCTL.IVALL`) and hands it to its block
through the barrier. Both forms, compiled here for sm_90 (no GPU needed; the table says what the instructions are,
not what they cost in time):
"""),
("code", r"""
from fp8lab.kernels.gemm_report import format_rows

try:
    print(format_rows(att.merge_fence_sass(90)))
except Exception as e:  # no NVRTC / cuobjdump on this machine: pip install -r requirements.txt
    print(f"(the SASS could not be produced here: {type(e).__name__}: {str(e).splitlines()[0][:160]})")
"""),
("md", r"""
## Chunked prefill: where an FP8 cache stops paying

Seed 004 saw a long document's first token come *later* with an FP8 KV cache than with a bf16 one. In prefill, a
chunk of query tokens attends to the whole cached prefix: every K/V byte is used by every query of the chunk, so the
FLOPs per cache byte grow with the chunk size, and past the H200's balance point (its tensor-core rate over its
memory bandwidth) the kernel is compute-bound. Halving the bytes then saves no time, and the FP8 → f16 widening —
done on the CUDA cores, because Hopper has no FP8 attention path in this kernel — is extra work on a kernel that is
already limited by work. The lab's chunked-prefill kernel (`attention_prefill.cu`) runs on a bf16 and an FP8 cache;
`fp8/bf16` is a time ratio (**above 1: FP8 is slower**), `flop/B fp8` the FLOPs per FP8 cache byte and `cvt/B` the
conversions per FP8 byte.
"""),
("code", r"""
from fp8lab.kernels import bench_prefill_attn as bpa
PA = nb.recorded("kernels", "prefill_attention.json", prov=None)
pre = bpa.load(PA / "prefill_attention.json") if PA else None
if pre:
    print(bpa.format_summary(pre))
    print()
    print(bpa.format_napkin(pre))
"""),
("code", r"""
if pre:
    nb.show(bpa.plot_ratio(pre))
    nb.md(findings.prefill_kv_sentence(pre))
    print(bpa.seed004_reading(pre))
"""),
("md", r"""
**Reading it (the mechanism).** At a small chunk the kernel streams the cache, which is where an FP8 cache could save time; as the
chunk grows, each FP8 byte feeds more FLOPs and the tensor cores become the limit. Every block of query rows widens
each K/V tile it reads again, so the conversions grow with the chunk just as the FLOPs do (`cvt/B`). From there the FP8 kernel does the bf16 kernel's
work *plus* the conversions, and the bytes it saved were never the bottleneck. Look at `bf16 TF/s` against
`fp8 TF/s`: where they differ at large chunks, the difference is the conversion work. What the kernel measurement
cannot say about seed 004 is printed above with the reading.
"""),
("md", r"""

## Exercises

Worked answers: `notebooks/solutions/08_kv_attention_kernel.py` (the CPU parts run in the tests).

1. Per-channel key scales: add a `[Hk, D]` scale to `quantize_kv`, fold it into Q (it multiplies `q·k` dim by dim),
   and rerun the error table on outlier keys, for an E4M3 and for an INT8 cache. The kernel needs no change — why?
   And why does the answer depend on the grid?
2. The kernel rounds P to f16 (FP8 path) or bf16 (bf16 path) before the second MMA. Emulate both in the reference and
   see which error dominates.
3. Seed 004 saw the slowdown at head size 256. What would change in the register budget of this kernel at D = 256
   (count the output accumulators per lane)?
4. From the recorded run: at which context does the FP8 kernel reach its highest fraction of copy bandwidth, and how
   does its speedup over bf16 follow it?
5. On a GPU: `python -m fp8lab.kernels.bench attention --contexts 1024,32768` and compare `cvt` against `bit`.
6. From the recorded chunked-prefill run: at each context, at which FLOPs per FP8 cache byte does FP8 stop paying,
   and how does that compare with the H200's balance point (the run's bf16 matmul rate over its copy bandwidth)?
"""),
]
