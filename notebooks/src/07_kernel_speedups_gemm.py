PATH = "notebooks/07_kernel_speedups_gemm.ipynb"
CELLS = [
("md", r"""
# 07 · Kernel speedups, part 2: FP8 and NVFP4 weights inside the matrix multiply

**The big idea.** A decode step multiplies a handful of token vectors by every weight matrix once. With M ≤ 16 tokens
there are 2·M FLOPs per weight, far below the ridge point where an H200 stops waiting on memory (notebook 04): the time
is the weight bytes over the bandwidth. E4M3 weights are half the bytes of bf16 and NVFP4 (4-bit E2M1 + one E4M3
scale per 16) is 0.5625 bytes per weight, so a GEMV that widens them *in registers* — never writing a bf16 copy —
can at best be as much faster than cuBLAS' bf16 GEMV as it reads fewer bytes (2 / 0.5625 for NVFP4). Prefill (M = 4096) is the opposite: compute-bound, so bytes do not matter and
only the FP8 tensor cores help — seed 001's W8A8 GEMM with 1×128 activation scales, 128×128 weight scales and an
FP32 promotion per 128-wide k-block.

**The key insight.** Two of them. (1) In decode the ceiling is the *read bandwidth*, and a strong library already runs
at it: the question is how close a custom kernel gets, not whether FP8 "is faster". (2) An instruction's **label is not
the kernel the chip runs**: `mma.sync…e4m3` compiles on Hopper, but ptxas turns it into fp16 conversions plus ordinary
HMMA — the disassembly says so, and the timings agree. Hopper's FP8 tensor-core path is `wgmma` (SASS `QGMMA`).

**What we can and cannot measure here.** This notebook runs on a CPU: it *reads* the results recorded on an H200 by
`python -m fp8lab.kernels.bench gemm` (`outputs/kernels/gemm.json`, with the SASS evidence in
`outputs/kernels/gemm_sass.txt`) and `python -m fp8lab.kernels.bench layer` (`outputs/kernels/layer.json`), and shows
their provenance; a file not recorded yet says so and its cells show nothing. It never invents a timing. Where the
same benchmarks, or the lab's probes of one question, were run on an H100, their records (`outputs/kernels/h100/`)
are read in their own cells, each under a banner naming its GPU, and compared only within their own run. On a GPU
machine the same commands re-measure everything.

**Versions.** Every GEMV version is the same arithmetic under the same tests, with a different way of keeping bytes
in flight. Versions 1 and 2 are named `gemv_…` (`_v2` for the second); from version 3 on a kernel is named by its
version and configuration (`gemv3_…`, `gemv4_…`, `gemv5_…`, `gemv6_…`). Version 3 packs the weights once, at load
time, into the order the lanes consume them and streams them over a persistent grid, with the bytes in flight held in
registers; version 4 streams the same packing through a shared-memory ring that the bulk copy engine fills, so the
bytes in flight cost shared memory instead of registers; version 5 gives each CTA one such ring over neighbouring
row groups at the same k, so that its warps share one slice of the activations in L1; version 6 (its own section
below) narrows the activations to FP8 and multiplies on Hopper's FP8 tensor cores. Every version is kept and timed
side by side
in the same run, as llm.c does, so what each change bought is a measurement, not a memory. The last section puts the
kernels together: one Llama-3-8B decode layer, timed as one CUDA graph, against the bandwidth ceiling of its bytes.
"""),
("code", r"""
import json
from fp8lab import findings, gpus
from fp8lab import notebook as nb
from fp8lab.kernels import bench_gemm as bg, gemm_report
from fp8lab.kernels import cuda_available
G = nb.recorded("kernels", "gemm.json", prov=None)
data = bg.load(G / "gemm.json") if G else None
if data:
    print("\n".join(gemm_report.provenance_lines(data)))
print("CUDA device here:", cuda_available(), "-> showing the recorded results" if not cuda_available() else "")
from fp8lab.kernels import gemv_fp8, gemv_nvfp4, gemv_v3
for mod in (gemv_fp8, gemv_nvfp4):
    lines = [l.strip() for l in (mod.__doc__ or "").splitlines() if l.strip().startswith("version=")]
    print(f"\n{mod.__name__}:\n  " + "\n  ".join(lines or ["(one version)"]))
print(f"\n{gemv_v3.__name__} (version 3 of both):\n  " + (gemv_v3.__doc__ or "").splitlines()[0])
"""),
("md", r"""
## Ceilings measured in the same run

Every ratio below compares kernels timed in the same process, minutes apart, on the same card: a device-to-device copy
(bytes read + written), cuBLAS bf16 and `torch._scaled_mm` FP8 at 8192³. Timings are medians of CUDA-graph replays
(at least 16 calls per graph, weight copies rotated so that together they are several times the L2 cache:
`harness.sets_for_l2`), so the numbers are HBM, not cache and not Python overhead.
"""),
("code", r"""
if data:
    for k, v in data.get("ceilings", {}).items():
        print(f"{k:40s} {v:.1f}" if isinstance(v, float) else f"{k:40s} {v}")
    smoke = {k: v.get("ok") for k, v in (data.get("smoke") or {}).items()}
    print("\nsmoke tests:", smoke or "none in this run (every kernel is validated on poisoned outputs before it is timed)")
    print("GPU tests (pytest) in this run:", data.get("pytest") or "run apart (record.sh: outputs/kernels/gpu_tests*.log)")
"""),
("md", r"""
## Decode: every version beside the anchors

Time per call (µs, median of interleaved rounds) at each decode shape and number of tokens M: cuBLAS' bf16 GEMV,
`torch._scaled_mm` with a tensorwise FP8 scale (what a user would pick for FP8 weights, padded to the M it accepts),
and each version of the lab's W8A16 (per-channel and 128×128 block scales) and NVFP4 GEMVs. A dash is a version the
run did not time at that point. The last column is the best of our FP8 kernels against `_scaled_mm` (above 1: ours
is faster).
"""),
("code", r"""
if data:
    vt = gemm_report.decode_versions(data)
    print(bg.format_rows([{k: v for k, v in r.items() if not k.startswith("nvfp4")} for r in vt]))
    print()
    print(bg.format_rows([{k: v for k, v in r.items() if k in ("N", "K", "M", "bf16 cuBLAS") or k.startswith("nvfp4")}
                          for r in vt]))
    for text in findings.gemv_version_sentences(data):   # v3 vs v1, v4 vs v3, best FP8 vs _scaled_mm
        nb.md(text)
"""),
("code", r"""
if data:
    nb.show(bg.plot_decode(data))
"""),
("md", r"""
## The goals, as measured

The lab set targets for these kernels against anchors timed in the same run. A decode goal holds only if it holds
at *every* shape whose FP8 weights are at least 32 MiB, so each line shows the **worst** shape (the best of our
kernels there); `per shape` lists them all. The first lines compare the lab's reference file
(`outputs/reference/`, an earlier H200 run) with the same anchors timed in this run: where an anchor
already reads at the memory roof, a target of "faster than it" asks for more bandwidth than the card has.
"""),
("code", r"""
if data:
    ref = json.loads(gpus.H200_REFERENCE.read_text()).get("gemv", {})
    dec = [r for r in data["results"] if r.get("family") == "decode"]
    # the largest shape both the reference file and this run hold (the reference file has fewer shapes)
    both = {(r["N"], r["K"]) for r in dec if f"{r['N']}x{r['K']}_bf16_GBps" in ref}
    big = max(both or {(r["N"], r["K"]) for r in dec}, key=lambda nk: nk[0] * nk[1])
    pick = lambda k, M: next((r for r in dec if r["kernel"].startswith(k) and r["M"] == M and (r["N"], r["K"]) == big), {})
    key = f"{big[0]}x{big[1]}"
    b16, f16 = pick("bf16_cublas", 1), pick("scaled_mm_tensorwise", 16)
    print(f"{key}: cuBLAS bf16 GEMV M=1   reference file {ref.get(key + '_bf16_GBps', float('nan')):7.0f} GB/s   this run {b16.get('gbps', float('nan')):7.0f} GB/s")
    print(f"{key}: _scaled_mm FP8 M=16    reference file {ref.get(key + '_fp8_M16_GBps_weightbytes', float('nan')):7.0f} GB/s   this run {f16.get('gbps', float('nan')):7.0f} GB/s")
    print(f"copy bandwidth in this run: {data['ceilings'].get('copy_gbps', float('nan')):.0f} GB/s\n")
    print("\n".join(gemm_report.decode_goal_lines(data)))    # the prefill goals: below
"""),
("md", r"""
The same decode recording run on an H100 (`outputs/kernels/h100/gemm_decode.json`, where one was recorded), read the
same way. The goals are set for the H200 and are decided there; this run is shown as a second GPU's reading: its
ratios compare kernels timed in the same rounds on one GPU, never across GPUs, and its provenance says whether it
timed the sources in this tree (`sources_match_this_tree`).
"""),
("code", r"""
H1d = nb.recorded("kernels/h100", "gemm_decode.json", prov=None, quiet=True)
h100_dec = bg.load(H1d / "gemm_decode.json") if H1d else None
if h100_dec:
    print("\n".join(gemm_report.provenance_lines(h100_dec)))
    print("\n".join(gemm_report.decode_goal_lines(h100_dec, per_shape=False)))
else:
    print("(no H100 decode run recorded)")
"""),
("md", r"""
### Why a goal is missed where it is

For each missed decode goal, at its worst shape: the weight bytes the kernel reads (`MB`), its time and its read rate
(`GB/s`), the anchor's rate on the same shape, the floor of those bytes at the run's copy bandwidth (`floor_us`), the
time spent above that floor (`over_floor_us`) and the time at which the goal would hold (`goal_us`). What the time
above the floor is made of — the arithmetic, the activation loads, the launch, or the way the weight bytes are
fetched — is measured, by taking each away, in "Where a GEMV's time goes" below.
"""),
("code", r"""
if data:
    why = gemm_report.goal_reasons(data)
    print(bg.format_rows(why, ["worst shape", "kernel", "MB", "time_us", "GB/s", "anchor", "anchor_us", "anchor GB/s",
                               "floor_us", "over_floor_us", "goal_us"]) if why else "every decode goal with a measurement is met")
    lines = []
    for r in why:
        lines.append(f"* **{r['goal']}** — {r['kernel']} at {r['worst shape']}: {r['time_us']:.1f} µs for {r['MB']:.0f} MB, "
                     f"{r['GB/s']:.0f} GB/s against the anchor's {r['anchor GB/s']:.0f} GB/s; "
                     f"{r['over_floor_us']:.1f} µs above the copy-bandwidth floor of its bytes "
                     f"({100 * r['over_floor_us'] / r['time_us']:.0f} % of its time); the goal needs {r['goal_us']:.1f} µs.")
    if lines:
        nb.md("\n".join(lines))
"""),
("md", r"""
What the columns point at (the mechanisms; the numbers are above):

* **A fixed cost per call weighs most on the smallest shapes.** Every call spends some microseconds that do not
  scale with the bytes: the grid ramping up until every SM has loads in flight, the last units draining while other
  SMs idle, and, for the version 3 kernels, the split rows finished from a workspace. At a shape whose bytes take a
  few tens of microseconds at copy bandwidth, those microseconds are a large share of the time. Shape matters as well
  as size: few output rows over a long K leave few tiles to spread over the SMs, so the split
  rows and their fix-up grow; the table above names the worst shape of each goal, and the fit below separates the
  fixed part from the streaming rate.
* **The anchor reads faster than a copy.** A device-to-device copy reads and writes every byte; `_scaled_mm` and
  cuBLAS only read, so their `GB/s` can exceed the copy figure. A goal of "faster than `_scaled_mm`" asks our kernel
  to read as well as NVIDIA's best reader on the same bytes.
* **NVFP4 does more work per byte.** NVFP4 reads 0.5625 bytes per weight, but widening two 4-bit codes costs about
  as many integer instructions as widening two 8-bit ones, and on Hopper every weight goes through the CUDA cores
  before a bf16 MMA (no FP4 tensor core here: notebook 09). Halving the bytes halves the time only while that work
  hides under the loads: compare the `GB/s` of the NVFP4 rows with the FP8 ones, and see "Where a GEMV's time goes"
  below for how much of it hides, measured.
* **More tokens (M = 8, 16) mean more MMAs per weight byte.** The weights are widened once per tile and multiplied
  for every token, so the arithmetic per byte grows with M while the bytes do not.
"""),
("md", r"""
### The fixed cost and the streaming rate, fitted

The first bullet can be measured rather than described: over the run's decode shapes, each kernel's time is fitted
by a straight line, time = `fixed_us` + weight bytes / `rate_TBps` (least squares; `r2` says how straight the points
lie). `fixed_us` is what a call pays whatever its size — launch, ramp-up, the tail, a split's fix-up; `rate_TBps` is
how fast it reads once running. Two kernels can miss a goal for different reasons: one starts slowly, the other
streams slowly. A fit over a handful of shapes is a summary, not a law: read it beside the per-shape times above. A
negative `fixed_us` is no negative cost: it says the kernel reads the larger shapes *faster* per byte than the
smaller ones (the line's slope is fitted to them), so the straight line crosses below zero at zero bytes.
"""),
("code", r"""
for rec in (d for d in (data, h100_dec) if d):   # the H200's run, then the H100's where one is recorded
    dev = (rec.get("provenance") or {}).get("device", "recorded GPU")
    for M in (1, 16):
        fit = gemm_report.fixed_cost_fit(rec, M)
        print(f"{dev}, M = {M}")
        print(bg.format_rows(fit, ["kernel", "shapes", "fixed_us", "rate_TBps", "r2"]) if fit else "  (fewer than 3 shapes)")
        if M == 1 and findings.fixed_cost_sentence(fit, dev):
            nb.md(findings.fixed_cost_sentence(fit, dev))
"""),
("md", r"""
## Decode against the memory roof

`roofline_us` = max(bytes / read bandwidth, FLOPs / bf16 rate), both measured in this run; `of_roofline` is the share
of that floor a kernel reaches. The read bandwidth is **the best measured in the run** — the copy test or the fastest
decode kernel, whichever read faster (printed below) — so `of_roofline` is relative to that run's best, not to a
datasheet, and a kernel at 1.0 *is* the best reader of the run. `x_vs_*` > 1 means our kernel is faster.
"""),
("code", r"""
if data:
    cols = ["kernel", "M", "N", "K", "time_us", "GB/s", "x_vs_bf16", "x_vs_scaled_mm_tensorwise", "roofline_us", "of_roofline"]
    rows = bg.decode_table(data)
    dec = [r for r in data["results"] if r.get("family") == "decode" and r.get("gbps")]
    best = max(dec, key=lambda r: r["gbps"], default=None)
    copy = data.get("ceilings", {}).get("copy_gbps") or 0
    src = "the copy test" if best is None or copy >= best["gbps"] else f"{best['kernel']} at {best['shape']}"
    print(f"memory roof of this run: {max(copy, best['gbps'] if best else 0):.0f} GB/s ({src}); copy test {copy:.0f} GB/s\n")
    shapes = sorted({(r["N"], r["K"]) for r in rows}, key=lambda s: s[0] * s[1])
    for N, K in (shapes[-1:] if nb.small() else shapes):
        print(f"--- N={N} K={K}")
        print(bg.format_rows([r for r in rows if (r["N"], r["K"]) == (N, K)], cols))
"""),
("md", r"""
Reading the table: at the largest shape the W8A16 GEMV widens weights in registers (`e4m3 → bf16` by bit moves and one exact bf16×2¹²⁰ multiply) and feeds `mma.sync` bf16 with 16 weight rows
as the MMA's M. Its time is set by how close it streams to the read roof; where cuBLASLt's FP8 GEMM with a tensorwise scale reaches
that roof (compare its `of_roofline`), no kernel reading the same bytes can beat it by more than the gap left.
NVFP4 reads 0.5625 bytes per weight, but widening two 4-bit values costs about as many integer instructions as
widening two 8-bit ones, so at half the bytes the arithmetic has half the time to hide in. An `of_roofline` well
under 1 for the NVFP4 rows says the kernel does not reach the roof; it does not say why. The next section measures
why, by taking the arithmetic away.
"""),
("md", r"""
## Where a GEMV's time goes: take the arithmetic away

A kernel that streams bytes can be held back by its loads (too few bytes in flight, a slow start, a ragged end) or by
the work it does on each byte (here: widening E4M3 or E2M1 to bf16, scaling, the MMAs). Reading the profile guesses
at which; removing the work measures it. The decode gap run (`python -m fp8lab.kernels.bench gemm --only decode_gap`,
`gemm_decode.bench_decode_gap`) compiles copies of version 3 from patched sources in which only the arithmetic on
each weight word changes — the loads, the split over warps and the epilogue stay — and times them beside the shipped
kernel and the anchors, interleaved:

* `no_mul`: the exact bf16×2 multiplies after the bit moves (FP8: × 2¹²⁰; NVFP4: the block scale) left out;
* `min_widen` (FP8): the widening cut to two integer operations per four codes, the floor of any bit-move widening;
* `no_mma`: the MMAs replaced by cheap XORs of their operands (the widening still done);
* `loads_only`: no widening, no scale, no MMA — only the loads;
* `empty`: the same grid launched with nothing to do (every warp returns at once) — the launch alone;
* `no_x_loads`: the arithmetic kept, the *activation* loads removed (at `M = 16` a lane loads twice as many activation
  bytes, from L1 / L2, as weight bytes).

These copies compute wrong numbers on purpose: they are timed, never validated (the shipped kernel beside them is).
`saves` is the share of the shipped kernel's time a cut removes; the SASS opcode counts of every copy are recorded
with the run, so what was removed is checked, not assumed (`tests/test_kernels_sass.py` checks the same on the CPU).
"""),
("code", r"""
# every recorded decode gap run: the H200's (outputs/kernels/) and the H100's (outputs/kernels/h100/)
dgap_runs = gemm_report.recorded_runs("decode_gap.json")
for dg in dgap_runs:
    print("\n".join(gemm_report.provenance_lines(dg)))
    drows = gemm_report.decode_gap(dg)
    shapes = sorted({(r["N"], r["K"]) for r in drows}, key=lambda s: s[0] * s[1])
    for N, K in (shapes[-1:] if nb.small() else shapes):
        print(f"--- N={N} K={K}")
        print(bg.format_rows([r for r in drows if (r["N"], r["K"]) == (N, K)],
                             ["format", "M", "variant", "time_us", "x_scaled_mm", "saves"]))
    print("SASS of every copy (whole functions):")
    print(bg.format_rows(gemm_report.decode_gap_sass_rows(dg)))
    nb.md(findings.decode_gap_sentence(drows, (dg.get("provenance") or {}).get("device")))
if not dgap_runs:
    print("(no decode gap run recorded yet: python -m fp8lab.kernels.bench gemm --only decode_gap --no-smoke "
          "--no-pytest --out outputs/kernels/decode_gap.json on a GPU)")
"""),
("md", r"""
Reading it: a copy that did *no* arithmetic and still ran no faster than the shipped kernel says the arithmetic hides
under the loads, whatever the profile's instruction counts suggest; then a cheaper widening (or an FP8 tensor core,
notebook 09) cannot buy more than that share, and the lever is how the bytes arrive. Where a cut saves a large share,
that stage is worth attacking — and `no_x_loads` separates the work from the *other* bytes a lane loads. A run is one
GPU's answer: the H200 reads faster than the H100 of the same generation, so the same arithmetic has less time to
hide in there; the reading holds for the GPU named above it.
"""),
("md", r"""
## Where a GEMV's time goes, warp by warp

The decode gap run takes work away and times what is left; this one watches the shipped kernel run. An instrumented
copy of version 3 (`fp8lab/kernels/gemv_timeline.py`, compiled from patched sources with `gemv_timeline.cuh`) has
each warp read the GPU-wide nanosecond clock (`%globaltimer`) four times — when it starts, when its first unit of
weights has been multiplied (so its first bytes have arrived), when its last unit has been multiplied, and when it
ends (after the store, or the stream-K fix-up that finishes a row group split between warps) — and write the stamps
with the SM it ran on. The copy is validated against the float64 reference like the kernel and timed beside it, so
what the clock reads cost is measured (`stamps_cost`), not assumed. Then one call's stamps are read back
(`python -m fp8lab.kernels.bench gemm --only decode_timeline`, `outputs/kernels/*/decode_timeline.json`).

What this can show: when the warps started, how long the pipeline took to fill, how long each warp took to stream
its share of the bytes, and how many warps were still running at each moment of the call. What it cannot: why one
warp streams slower than another (which memory channel, which SM's queue), and the cost of work between the stamps
— the gap run above measures that. One call is one sample; the clock's step (recorded as `resolution_ns`) bounds
what a stamp can resolve.
"""),
("code", r"""
dtl_runs = gemm_report.recorded_runs("decode_timeline.json")
for dt in dtl_runs:
    print("\n".join(gemm_report.provenance_lines(dt)))
    trows = gemm_report.decode_timeline(dt)
    print(bg.format_rows(trows, ["format", "M", "N", "K", "time_us", "x_scaled_mm", "stamps_cost", "warps",
                                 "first_unit_us", "stream_min_us", "stream_us", "stream_max_us", "finish_us",
                                 "span_us", "idle_share"]))
    nb.show(gemm_report.plot_decode_timeline(trows))
    nb.md(findings.decode_timeline_sentence(trows, (dt.get("provenance") or {}).get("device")))
if not dtl_runs:
    print("(no decode timeline recorded yet: python -m fp8lab.kernels.bench gemm --only decode_timeline --no-smoke "
          "--no-pytest --out outputs/kernels/decode_timeline.json on a GPU)")
"""),
("md", r"""
Reading it: a split that gives every warp the same bytes does not give it the same time. Where the curve leaves 1
well before the end, the fast warps are done and the call waits for the slow ones while fewer and fewer loads are in
flight. The obvious remedy, handing the work out while the kernel runs (a warp claims its next piece from a counter),
was built and timed on the H100 (`tools/gpu/decode_notes.md`; not a committed result): each piece's claim and
fix-up cost its warp more than the balance bought, and it was slower at every shape. The same notes show the stream-K
fix-up's fence dropping the SM's L1 — every warp's cached activations — at each split group. The fix-up now pays
that only where it must: every contributor counts itself in with a *release* add (no invalidation), and only the
last one to arrive runs the *acquire* fence before it reads the others' slots (the same pair as the attention
kernel's split merge: notebook 08 shows its SASS). A cache hint alone (reading the slots through L2) would order
nothing.
"""),
("md", r"""
## More bytes in flight?

The fits above put all or part of version 3's miss in its fixed cost (the sentence under each GPU's fit says which),
and the timeline shows each warp's first unit arriving microseconds after the launch. A natural guess: too few bytes in flight at the start. At M ≤ 8 the default holds
C·P KiB of weights per warp in registers (C chunks of 1 KiB per unit, P units ahead); with whole row groups per warp
(one warp per 16 rows of output) the lab's decode shapes leave only a handful of warps per SM, far fewer bytes in
flight than a plain read of the same buffer keeps (`tools/gpu/stream_probe.cu`). `tools/gpu/inflight_probe.py` tests the guess: it compiles version 3 with deeper pipelines beside the default
(more units or larger units in flight per warp; `ptxas -v` first, so that none of the timed ones spills), and the
default's pipeline in CTAs of one warp (the default's CTAs of four warps put 8 warps on some SMs and 4 on others when
whole row groups do not fill the grid; one-warp CTAs let the block scheduler spread them evenly). Every config is
validated against the float64 reference on poisoned outputs, then timed beside the default and the anchors in
interleaved rounds of CUDA graphs; `x_default` > 1 means faster than the default config's better split in the same
rounds. The summary compares like for like: only the split (whole groups or stream-K) the default ran best with at
each shape. What it cannot show: the H200, where the defaults were tuned (the recorded run is an H100's); how these
configs behave inside the decode layer.
"""),
("code", r"""
inf_runs = gemm_report.recorded_runs("inflight_probe.json")
for inf in inf_runs:
    print("\n".join(gemm_report.provenance_lines(inf)))
    irows = gemm_report.inflight_table(inf)
    isum = gemm_report.inflight_summary(irows)
    print(bg.format_rows(isum))
    N0, K0 = max({(r["N"], r["K"]) for r in irows if r["split"] == r["default_split"] == "whole"}, default=(None, None))
    if N0 and not nb.small():
        print(f"--- N={N0} K={K0}, every config")
        print(bg.format_rows([r for r in irows if (r["N"], r["K"]) == (N0, K0)],
                             ["format", "M", "C", "P", "KiB_per_warp", "WPC", "split", "time_us", "x_scaled_mm",
                              "x_bf16", "x_default"]))
    nb.md(findings.inflight_sentence(isum, gemm_report.inflight_defaults(irows),
                                     (inf.get("provenance") or {}).get("device")))
if not inf_runs:
    print("(no in-flight run recorded yet: python3 tools/gpu/inflight_probe.py outputs/kernels/inflight_probe.json 1 8 "
          "on a GPU)")
"""),
("md", r"""
Reading it: if deeper pipelines run at or below the default's speed, the fixed cost is not a shortage of bytes in
flight — the pipeline fill is the memory system delivering the first bytes to every warp at once, and more requests
queue behind the same bandwidth. Where one-warp CTAs gain, part of the tail was SMs holding more warps than others.
Version 3's default rule now launches its whole row groups in one-warp CTAs (`gemv_v3.ONE_WARP_CTAS`; a config
with a 5th element is launched as given, so the probe's `default` rows are the four-warp CTAs); each call's
`grid` and `warps` are kept in the decode record's JSON).
A config faster at one shape and slower at another is what a per-shape tuning table (as serving engines keep per
GPU) would pick up; the lab's defaults stay one rule per format and M.

Things to try: run the probe on another GPU and compare its summary; add a (C, P) to its `DEEP` list after reading
`ptxas -v` for it (`fp8lab.kernels._cuda.compile_for("gemv_v3.cu", 90, ptxas_verbose=True)` with the list extended).
"""),
("md", r"""
### Warps in step, or staggered?

A second guess about the slow start: with whole row groups per warp, every warp walks its group from the first unit,
in step with all the others, so the first requests of every warp lie at one regular stride in memory and could
crowd some memory channels while the pipeline fills. `tools/gpu/stagger_probe.py` tests it with a patched copy of
version 3 whose warp *w* starts at unit *w* mod (units per group) and wraps around — the same bytes, the same
arithmetic, summed in another order (so validated against the float64 reference, not bit-compared) — timed beside
the default in the same grid and rounds. `stagger_vs_default` > 1 would mean the lockstep start costs time.
"""),
("code", r"""
nb.show_recorded(gemm_report.probe_reports("stagger_probe.json", gemm_report.stagger_table, findings.stagger_sentence),
                 bg.format_rows, "(no stagger run recorded yet: python3 tools/gpu/stagger_probe.py "
                                 "outputs/kernels/stagger_probe.json 1 8 on a GPU)")
"""),
("md", r"""
Reading it: when the staggered copy is slower, warps in step are an *advantage* — the warps of one SM read the same
slice of the activations at the same time (one brings it into L1, the others hit), and neighbouring warps' requests
arrive together. If the copy loses more for NVFP4, which loads more activation bytes per weight byte, that fits the
first half of that reading. Either way the slow start is not the lockstep: what is left is the memory system
delivering every warp's first bytes at once, and the launch itself.

To separate the two halves, the probe has a mode (`FP8LAB_PROBE_NO_X=1`) that cuts both copies' activation loads
(values made from addresses instead: wrong numbers by design, so timed and not validated). With no activations to
share, any stagger penalty left belongs to the weight requests themselves. Each run's banner names its GPU: where
the run with activations and the run without them come from different GPUs, each is read on its own, and setting
one beside the other compares two machines as well as two modes.
"""),
("code", r"""
nb.show_recorded(gemm_report.probe_reports("stagger_probe_nox.json", lambda d: gemm_report.stagger_table(d, no_x=True),
                                          findings.stagger_nox_sentence),
                 bg.format_rows, "(no run without activation loads recorded yet: FP8LAB_PROBE_NO_X=1 python3 "
                                 "tools/gpu/stagger_probe.py outputs/kernels/stagger_probe_nox.json 1 on a GPU)")
"""),
("md", r"""
### Split-K in whole segments

Where N is small the default cuts all the units evenly over the resident warps at any unit boundary (stream-K): the
warps start at scattered k, and a group is split wherever the cut falls. The other classic split gives each row
group S equal K segments and each warp whole segments (split-K; the lab's version 1 splits K this way). Version 3
takes it as a config (`(C, P, WPC, CPS, S)`, S ≥ 2 dividing the units per group; `gemv_v3.streamk_plan` checks on the
CPU that the fix-up counts exactly the warps holding each group). `tools/gpu/segments_probe.py` times every S that
gives 4 to 16 segments per SM, in CTAs of four warps and of one, beside the default, validated first, interleaved.
`x_default` > 1: faster than the stream-K default in the same rounds. What it cannot show: other GPUs, and the shapes
where the default already takes whole row groups (nothing is split there).
"""),
("code", r"""
nb.show_recorded(gemm_report.probe_reports("segments_probe.json",
                                          lambda d: gemm_report.segments_best(gemm_report.segments_table(d)),
                                          findings.segments_sentence),
                 bg.format_rows, "(no segments run recorded yet: python3 tools/gpu/segments_probe.py "
                                 "outputs/kernels/segments_probe.json 1 16 on a GPU)")
"""),
("md", r"""
Reading it: a split that wins at one shape and loses at the next is a tuning-table entry, not a rule; serving engines
keep such tables per GPU and shape. Things to try: add an S to a shape by hand (`gemv_v3.prepare(x, p, config=(4, 2,
4, 4, 8))`) and time it with `fp8lab.kernels.harness.graph_time_us`.
"""),
("md", r"""
### Version 6: narrow the activations instead of widening the weights

Versions 1–5 widen every FP8 weight to bf16 in registers before `mma.sync`: a few instructions per 16-byte word, on
every byte of the matrix. `_scaled_mm` does none of that: cuBLASLt copies the weights to shared memory (TMA) and the
FP8 tensor cores (`wgmma`) read them there. Hopper's FP8 `wgmma` needs *both* operands in FP8, so version 6
(`fp8lab.kernels.gemv_v6`) turns the few bf16 activations into FP8 instead, without losing their precision: per token
and 128-wide k-block, a power-of-two scale 2**e (the MX "ceil" rule of `fp8lab.scaling`, so nothing saturates), then
two E4M3 terms, `hi = e4m3(x / 2**e)` and `lo = e4m3(16 (x / 2**e - hi))`. The tensor cores multiply both rows
(one m64nNk32 `wgmma` per 32 k, N = 2 per token) and the promotion adds `hi + lo / 16`. A bf16 has 8 significant
bits and each term holds 4, so the split is exact unless a value sits so far below its group's largest that `lo`
goes subnormal; the table's `split_error` is what it moved y, measured. The weights never pass through a register.

Two ways to call it, timed side by side: a small split kernel followed by the GEMV (PDL-launched, so its weight
copies start while the split runs), and the split fused into the GEMV's consumer warpgroup. The GEMV itself runs one
CTA per whole tile where there are enough tiles, and stream-K otherwise. The comparison is deliberately strict:
version 6 is timed from bf16 activations, `_scaled_mm` from activations already in FP8.
What it cannot show: the H200 unless a run there is recorded (each GPU's run is read on its own), and what fusing
the split into the previous kernel (RMSNorm) would save inside a decode layer.
"""),
("code", r"""
nb.show_recorded(gemm_report.probe_reports("v6_probe.json", gemm_report.v6_table, findings.v6_sentence),
                 bg.format_rows, "(no version-6 run recorded yet: python3 tools/gpu/v6_probe.py <shapes> 1,16 default "
                                 "outputs/kernels/v6_probe.json on a GPU)")
"""),
("md", r"""
Reading it: `v6` is the two-kernel call, `v6_lo`–`v6_hi` its ratio by the quartiles, `v6_best` the fastest grid timed,
`split_us` the split kernel alone, `gemv_only` (where the run timed it) the default's GEMV alone on a split made
beforehand.

**The configurations, swept.** A tuning run (`tools/gpu/v6_probe.py … split`) times the two-kernel call at several
(MH, ST, G) configurations per point — MH 64-row sub-tiles per stage, ST stages in flight, G = 0 one CTA per whole
tile or G ≥ 1 stream-K over G CTAs per SM — beside the default, interleaved, each validated first. `gain` is the
fastest configuration's speed over the default's (medians), `gain_lo` the same with the quartiles taken against it
(above 1: the two are apart). Fewer stages leave each CTA less shared memory, so more CTAs fit on an SM at once with
the same bytes in flight; whether that pays is the run's to say.
"""),
("code", r"""
nb.show_recorded(gemm_report.probe_reports("v6_tune.json", gemm_report.v6_configs, findings.v6_tune_sentence),
                 lambda rows: bg.format_rows([{k: v for k, v in r.items() if k != "configs"} for r in rows]),
                 "(no version-6 tuning run recorded yet: python3 tools/gpu/v6_probe.py <shapes> 1,16 "
                 "default,1:2:0,2:3:0,2:4:1 outputs/kernels/v6_tune.json split on a GPU)")
"""),
("md", r"""
The default rule (`gemv_v6.default_config`) is left as it is until a run on the H200 says what it should be there;
the sweep above is one GPU's reading. Things to try: `gemv_v6.split_values(x) - x` on your own activations (where
is the split not exact?); `gemv_v6.prepare(x, w, s, config=(1, 2, 0))` against the default at your own shapes; time
`fused=True` at M = 1 and 16 and count how often each CTA re-splits the same group.
"""),
("md", r"""
## Prefill: the W8A8 block-scaled GEMM, step by step

Prefill is compute-bound, and on the H200 only `wgmma` multiplies FP8 on the tensor cores. The lab's block-scaled
W8A8 GEMM (1×128 activation scales, 128×128 weight scales, FP32 promotion per 128-wide k-block, as DeepGEMM does)
climbed one change at a time; every rung is kept and timed in the same run, each validated against the float64
reference first. The climb at one shape: what each change bought over the rung before (`x_prev_rung`), where it
stands against `torch._scaled_mm` blockwise (cuBLASLt, the same arithmetic) and bf16 cuBLAS, and what the SASS and
the driver say about it (QGMMA instructions, TMA loads, registers, spills, shared memory).
"""),
("code", r"""
if data:
    climb = gemm_report.prefill_climb(data)
    print(bg.format_rows(climb) if climb else "(no prefill climb in this run)")
    twin = gemm_report.same_kernel_twice(data)
    if twin:
        names = ", ".join(f"`{k}`" for k in twin["kernels"])
        nb.md(f"The noise floor of this run: `{twin['twin']}` ran the very kernel, grid and schedule of {names}, each "
              f"timed separately in the same interleaved rounds: " + ", ".join(f"{t:.0f}" for t in twin["tflops"]) +
              f" TFLOP/s, up to {100 * twin['apart']:.1f} % apart. A rung that moved the rate by less than that "
              "bought nothing this run can show.")
"""),
("md", r"""
The rungs, in plain words: `wgmma_ws` loads tiles with `cp.async` from a producer warpgroup; the `tma` rungs load
them with the Tensor Memory Accelerator (one thread issues a whole tile copy, an `mbarrier` says when it landed),
then split the math over two consumer warpgroups (`setmaxnreg` moves registers from the producer to them), then keep
a persistent grid that walks the tiles in a grouped order (neighbouring tiles share A or B in L2), then pair CTAs in
a cluster so one L2 read of B feeds two SMs (multicast), then use wider tiles (more FLOPs per byte pulled from L2),
then let a second producer warp copy each k-block's scales into shared memory beside its tiles (so the consumers'
loop holds no global load, only `LDS`), then write the bf16 tile through shared memory with one TMA store per box
(the consumers hand it off and start the next tile), then cut the tiles of a mostly idle last wave along K (each
piece on its own SM; the last piece to finish adds the others' fp32 partial sums and stores the tile — at the climb's
shape the last wave is nearly full, so nothing is cut there: the rung runs the same kernel as the one before it, and
what separates their rates is the run's noise, read in the noise-floor line above).
The side branch (`_p`, from `_d`) keeps 128 × 128 tiles but
gives each consumer two partial-sum buffers, so the next k-block's MMAs run while the previous one is promoted; the
default uses it where 256-wide tiles would leave SMs idle. A rung that bought nothing, or lost, is shown as measured.

## The remaining gap

Against the best FP8 rate measured in the same run at each shape with M ≥ 2048 (ours or `_scaled_mm`, or the run's
tensorwise 8192³ rate, whichever is higher), and against NVIDIA's datasheet figure for dense FP8 (a spec, labelled).
"""),
("code", r"""
if data:
    gap = gemm_report.prefill_gap(data)
    print(bg.format_rows(gap) if gap else "(no prefill shape with M >= 2048 in this run)")
    print()
    print("\n".join(gemm_report.prefill_goal_lines(data)))
    if gap:
        nb.md("At the prefill shapes with M ≥ 2048 the default TMA kernel reaches "
              f"{findings.ratio_range([r['of_best'] for r in gap])} of the best FP8 rate this run saw there, and "
              f"{findings.ratio_range([r['of_spec'] for r in gap])} of the datasheet's dense FP8 figure (a spec, not a measurement).")
"""),
("code", r"""
if data:
    nb.show(bg.plot_prefill(data))
    print(bg.format_rows(bg.prefill_table(data, min_m=2048)))
"""),
("md", r"""
The same prefill grid recorded on an H100 (`outputs/kernels/h100/gemm_prefill.json`, where one was recorded): the
same kernels and anchors, every variant settled before it was timed (see *The order a kernel is timed in* below).
The goals are the H200's; an H100 has the same SM count and clocks, so its ratios are a second reading of the same
kernels, not a substitute for the H200's.
"""),
("code", r"""
H1 = nb.recorded("kernels/h100", "gemm_prefill.json", prov=None, quiet=True)
h100 = bg.load(H1 / "gemm_prefill.json") if H1 else None
if h100:
    print("\n".join(gemm_report.provenance_lines(h100)))
    rows = sorted(gemm_report.prefill_table(h100, kernels=("wgmma_tma",), min_m=gemm_report.PREFILL_GOAL_MIN_M),
                  key=lambda r: (r["N"], r["K"], r["M"]))
    print(bg.format_rows(rows))
    print("\n".join(gemm_report.prefill_goal_lines(h100)))
    if findings.prefill_grid_sentence(h100):
        nb.md(findings.prefill_grid_sentence(h100))
else:
    print("(no H100 prefill grid recorded)")
"""),
("md", r"""
One run's verdict at a shape is one sample. The same grid was recorded more than once on each GPU (the other runs
are kept in `outputs/kernels/repeats/` and `outputs/kernels/h100/repeats/`, each with its provenance): per shape, the
ratio in each run (the committed run first), the median over runs and how far the runs lie apart (`spread` = max / min − 1). A goal read on
the medians is less at the mercy of one run's clocks than any single run; a shape where one run met the goal and
another did not has no verdict a single run could give. `median interval` is the median's distribution-free
interval from the runs' order statistics (`fp8lab.stats.median_interval`; with few runs, the lowest to the highest),
followed by the probability that it covers the median, whatever the runs' distribution: a goal is met or missed
beyond the runs' noise only where the whole interval lies on one side of it.
"""),
("code", r"""
for folder in gemm_report.RECORD_FOLDERS:   # the H200's records, then the H100's
    reps = gemm_report.repeat_runs("gemm_prefill.json", folder)
    rep_rows = gemm_report.prefill_repeats(reps, min_m=gemm_report.PREFILL_GOAL_MIN_M)
    if len(reps) > 1 and rep_rows:
        print("\n".join(gemm_report.run_line(d) for d in reps))
        print(bg.format_rows(gemm_report.repeats_table(rep_rows)))
        nb.md(findings.prefill_repeats_sentence(rep_rows, (reps[0].get("provenance") or {}).get("device")))
    else:
        print(f"({folder.name}: at most one prefill grid recorded, no repeats to compare)")
"""),
("md", r"""
Where the rest of the gap goes (the mechanisms; the climb table shows which rungs moved the rate): the FP32
promotion per 128-wide k-block is work `_scaled_mm` tensorwise does not do at all (one scale for the whole matrix),
and it sits on the consumer warpgroups between two `wgmma` batches; a wider tile amortises it over more FLOPs.
cuBLASLt's blockwise kernel does the same promotion and is the fair comparison, which is why the goals are written
against it. Multicast pays only where L2 bandwidth, not the math, is the limit: the climb shows whether it did here.
`wave_busy` is arithmetic, not a measurement: a persistent grid of P CTA pairs runs T tiles in ceil(T / P) waves, and
where the last wave is partly empty the whole GEMM pays for it. A shape whose `wave_busy` is well under 1 loses that
fraction whatever the kernel does inside a tile. The default cuts the last wave's tiles along K when that wave is at
most half full and the cut pays for its fix-up (`split_plan`: at most four pieces per tile; a cut wave is modelled as
1 / S of a wave plus a fixed cost, `SPLIT_FIXUP_KB` k-blocks, fitted on this GPU), and `wave_busy` counts such a
wave as 1 / S of one; a last wave between half and fully busy is left whole — evening it out needs the finer-grained
division of stream-K proper, which the lab's kernel does not do.
"""),
("md", r"""
### The promotion, measured by leaving it out

A stage's cost is the time it takes away. The gap run (`python -m fp8lab.kernels.bench gemm --only gap`) times the
default's full-grid configuration as it is, the same kernel compiled with the promotion cut to one FFMA per k-block
(`-no_promote`: it computes wrong numbers by design, so it is timed but never validated), and the same kernel with
its two consumer warpgroups staggered (`_sg1`: the second starts a k-block behind the first once per CTA; `_sg2`: at
every tile), and two other tilings: `_w192` (`128 × 192` tiles, one `m64n192` batch per k-block, so one wait and
one promotion instead of two) and `_w224` (`128 × 224` tiles, an `n128` and an `n96` sub-tile: `224` divides
`N = 3584, 7168, 14336`, so at some shapes, e.g. `2048 × 3584`, these tiles fill the last wave where 256-wide ones
leave it ragged; at others they leave it emptier) — the same
arithmetic, checked bit for bit — beside `_scaled_mm` blockwise and tensorwise, interleaved.
If the two consumers promoted at the same moments and left the tensor cores idle, staggering them would win back
the promotion's share; if the cost is the FFMAs themselves competing with the MMAs for the warp schedulers and the
register file, staggering buys nothing. A run that also holds `-promote_twice` (the promotion done twice: twice the
FFMAs, the same waits) tells the last two apart: a second copy that adds about what the first costs means the cost
grows with the FFMAs; one that adds little means it is a fixed wait per k-block.

A run that also holds `+…` variants edits the machine code itself. Each instruction carries scheduling hints that ptxas writes beside the
opcode (`fp8lab.kernels.sass.control` reads them): a stall count, a *yield* bit (whether the warp scheduler may
switch to another warp after this instruction) and *reuse* flags (keep an operand in a small cache for the next
instruction, saving a register-file read; a warp switch would lose it). DeepGEMM rewrites these bits on its
promotion FFMAs so that the other warpgroup's MMAs get scheduled in between. `sass.edit_control` does the same to the
cubin (`+ffma_yield_all`: every promotion FFMA may yield and drops its reuse flag; `+ffma_yield_none`: none
yields; `+ffma_no_reuse`: no reuse flags), loaded through `_cuda.edited_binary`; `+as_compiled` is the unedited
cubin loaded the same way, the control the edits are read against. The opcodes do not change, so each edited
kernel must return the unedited kernel's bits (checked on poisoned outputs); what changes is when the warps are scheduled
and, where reuse flags go, how often the register file is read. The edits are read against `+as_compiled`, and
`+as_compiled` against `k` (the same machine code, loaded two ways) says how much two identical kernels differ in
one run: the noise of these comparisons.

Each run below stands on its own: its `sources` line says whether it timed the kernel sources of this tree. A run
that timed older sources (an earlier kernel, and possibly the timing before the settle step described in the next
section) is that code's reading; compare two GPUs' shares only where both runs timed the same sources.
"""),
("code", r"""
# every recorded gap run: the H200's (outputs/kernels/) and the H100's (outputs/kernels/h100/); each compares
# variants timed in the same rounds on one GPU, so each stands on its own
gap_runs = gemm_report.recorded_runs("prefill_gap.json")
for gapd in gap_runs:
    print("\n".join(gemm_report.provenance_lines(gapd)))
    print(f"k = {gemm_report.gap_kernel(gapd)}; 'x blk': the ratio to _scaled_mm blockwise of the same run (> 1: faster)")
    rows = gemm_report.leave_one_out(gapd)
    print(bg.format_rows([{c: v for c, v in r.items() if not c.endswith("share")} for r in rows]))
    print("\nshare: the fraction of k's time a variant saves (1 - t_variant / t_k; negative: it costs time); "
          "a '+' edit's share is against k+as_compiled")
    print(bg.format_rows([{c: v for c, v in r.items() if c == "shape" or c.endswith("share")} for r in rows]))
    nb.md(findings.gap_sentence(gapd))
    if findings.other_kernels_sentence(rows):
        nb.md(findings.other_kernels_sentence(rows))
if not gap_runs:
    print("(no gap run recorded yet: python -m fp8lab.kernels.bench gemm --only gap --no-smoke --no-pytest "
          "--out outputs/kernels/prefill_gap.json on a GPU)")
"""),
("md", r"""
### The order a kernel is timed in

Two identical kernels should time alike; in one interleaved run they did not. The likely reason is power
(`nvidia-smi`, read by hand between those runs and not committed, showed a draw at the card's power limit and
clocks well under the boost clock): a
prefill GEMM holds an H100 or H200 at its power limit, and the GPU then sets its clock from how much power it has
been drawing, so a kernel timed straight after a hungrier one would start at a lower clock, one timed after a
lighter one at a higher clock. Interleaving (A B C, B C A, …) moves where a round starts, but apart from the variant
that opens a round, each variant follows the same neighbour in every round. The order run (`--only order`, in the
gap file) times one kernel under several names, each straight after a different neighbour (the rounds rotate by
whole neighbour-and-copy pairs, so that holds in every round), first unsettled and then with every variant run
alone for a while before it is timed (`harness.graph_time_us(settle_ms=…)`). The spread among the copies is what
the order alone does to a timing. Every prefill GEMM timing the lab records now is settled this way
(`gemm_prefill.SETTLE_MS`; a run whose sources line says they differ from this tree may predate it); what remains
after settling is the noise any ratio in this notebook carries.
"""),
("code", r"""
for gapd in gap_runs:
    rows = gemm_report.order_effect(gapd)
    if rows:
        print((gapd.get("provenance") or {}).get("device"), "-- the same kernel, after each neighbour (us):")
        print(bg.format_rows(rows))
        nb.md(findings.order_sentence(rows))
if not any(gemm_report.order_effect(g) for g in gap_runs):
    print("(no order run recorded yet: python -m fp8lab.kernels.bench gemm --only gap,order --no-smoke --no-pytest "
          "--out outputs/kernels/prefill_gap.json on a GPU)")
"""),
("md", r"""
## The label versus the kernel: SASS evidence

Opcode counts from `cuobjdump --dump-sass` of each kernel (compiled with nvcc from the same source NVRTC compiles).
`QGMMA` is Hopper's FP8 warpgroup MMA; `HMMA.16816.F32` is the fp16 tensor-core MMA; `F2FP…E4M3.UNPACK_B` converts a
pair of e4m3 values to fp16.
"""),
("code", r"""
if data:
    print(bg.format_rows(bg.sass_table(data)))
    S = nb.recorded("kernels", "gemm_sass.txt", prov=None, quiet=True)
    if S:
        sass = (S / "gemm_sass.txt").read_text().split("\n== ")
        print("\n== " + next((b for b in sass if b.startswith("w8a8_mma_fp8")), "(w8a8_mma_fp8 not in the file)")[:900])
"""),
("md", r"""
`w8a8_mma_fp8` asks for `mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32`. On sm_89/sm_120/sm_121 that is one
native FP8 MMA. On sm_90 there is no such instruction: ptxas emits `F2FP.F16.E4M3.UNPACK_B` conversions and
`HMMA.16816.F32` fp16 MMAs — an emulation. The `wgmma` kernels' SASS shows `QGMMA.64x128x32.F32.E4M3.E4M3`. A kernel
"uses FP8 tensor cores" only if the disassembly says so; the timings, rendered below from the same file, agree.
"""),
("code", r"""
if data:
    text = findings.emulated_mma_sentence(data)
    if text:
        nb.md(text)
    else:
        print("(the emulated mma.sync kernel was not timed in this run: the SASS above is the evidence)")
"""),
("md", r"""
## One decode layer, end to end

The kernels above, put together: one Llama-3-8B-shaped transformer layer at decode (RMSNorm, QKV projection, RoPE and
the KV-cache append, FP8-KV attention, O projection, the gated MLP), timed as **one CUDA graph**, in bf16 (cuBLAS and
torch SDPA), with `torch._scaled_mm` FP8 (the off-the-shelf path), with the lab's FP8 GEMVs (W8A16) and with its
NVFP4 GEMVs (W4A16), both on an FP8 cache. The ceiling of each row is its own bytes (weights, cache read, activations)
over the copy bandwidth measured in the same run: `of_ceiling` = ceiling / time. At batch 1 a layer's FP8 weights
take only tens of microseconds to read, so a few microseconds per launch matter: the `fused` variants do what serving
engines do (gate and up in one pass, SiLU·mul fused into the down projection's input, the residual add into the
epilogue, `norm`: RMSNorm into the next GEMV's activation load), and `pdl` launches each kernel with programmatic
dependent launch so it starts loading weights while the previous one finishes.
"""),
("code", r"""
from fp8lab.kernels import layer_report as lr
LY = nb.recorded("kernels", "layer.json", prov=None)
layer = lr.load(LY / "layer.json") if LY else None
if layer:
    print(lr.format_rows(lr.layer_table(layer)))
"""),
("code", r"""
if layer:
    nb.show(lr.plot_layer(layer))
    text = findings.layer_kinds_sentence(lr.layer_table(layer), lr.GOAL_POINT)
    if text:
        nb.md(text)
"""),
("md", r"""
### The layer goals, and where the time goes

The lab's targets at batch 1, context 1k (each line names its threshold): FP8 and NVFP4 against bf16, and each close to
the ceiling of its bytes. A missed goal says by how much, and the per-kernel breakdown of the same variant (each
kernel timed alone) says where the time goes.
"""),
("code", r"""
if layer:
    print("\n".join(lr.goal_lines(layer)))
    print()
    print(lr.format_rows(lr.breakdown_table(layer)))
    print()
    print(lr.pdl_sentence(layer))
"""),
("md", r"""
The same layer recorded on an H100 (`outputs/kernels/h100/layer.json`, where one was recorded), read the same way:
the goals are the H200's and are decided there; the H100 run may time newer kernels (its banner names the commit and
whether the sources still match this tree), each against the anchors and the copy bandwidth of its own run.
"""),
("code", r"""
LH = nb.recorded("kernels/h100", "layer.json", prov=None, quiet=True)
h100_layer = lr.load(LH / "layer.json") if LH else None
if h100_layer:
    print("\n".join(gemm_report.provenance_lines(h100_layer)))
    print("\n".join(lr.goal_lines(h100_layer)))
    print(lr.pdl_sentence(h100_layer))
else:
    print("(no H100 layer run recorded)")
"""),
("code", r"""
probes = lr.load_attention_probes(LH)
if probes:
    for p in probes:
        print("\n".join(gemm_report.provenance_lines(p)))
    launch_rows = lr.attention_launch_rows(*probes)
    print(lr.format_rows(launch_rows))
    print(lr.attention_launch_sentence(launch_rows))
else:
    print("(no layer-attention probe recorded)")
"""),
("md", r"""
Reading the breakdown (the mechanisms): the GEMVs of a layer are small — the QKV and O projections of one layer are
a few megabytes, where the fixed cost per call seen in the decode table above is a large share — so a layer's
GEMVs read at a lower fraction of copy bandwidth than one big matrix does. The kernels that are not GEMVs (norms, RoPE
with the cache append, the attention and its split merge) move few bytes and cost launch-sized times each; fusing
removes some of them and PDL overlaps the rest, which is what the fused and `pdl` rows buy at short contexts. PDL is
not free everywhere: the PDL lines above (`layer_report.pdl_effect`, time with PDL over time without, per point) count
the points where it cost time and name them. One reading, not yet separated: where one long attention kernel dominates
the layer, a neighbour's early start shares the GPU with its stream. `tools/gpu/layer_attn_probe.py` asked which edge
costs (each launched without PDL in turn, with the attention in both of its configurations): on an H100 it was the
attention's own PDL launch, so the PDL layers of this tree launch the attention plainly (`decode_layer.PDL_ATTENTION`;
the probe's summary above). A layer recording whose sources line says `decode_layer.py` differs from this tree timed
the PDL layers as they were then (the attention launched with PDL too), so its PDL lines and an H100 recording of this
tree's layers compare two versions of the layer as well as two GPUs. NVFP4 gains less than
its bytes promise for the same reasons as its GEMV (its arithmetic and its activation loads, measured in the decode
gap section above).
"""),
("md", r"""
## Accuracy gate (seed 001): W8A8 against W8A16

Same FP8 weights (128×128 scales); W8A16 keeps the activations in bf16, W8A8 quantizes them to E4M3 per 1×128 group.
`math_w8a8_fp64` is the exact W8A8 arithmetic in float64; the kernels must match it (they do, to bf16 rounding).
"""),
("code", r"""
if data:
    gate = bg.gate_table(data)
    for r in gate:
        r["cosine"] = f"{r['cosine']:.6f}"   # 3 significant digits would print 1
    print(bg.format_rows(gate))
"""),
("md", r"""
**Finding.** The seed's gate (a cosine threshold *and* a relative-RMS threshold, in the column name above) can fail
on Gaussian activations for the *arithmetic itself*, not for any kernel: the W8A8 − W8A16 difference is the
activations' E4M3 rounding noise. On outlier-heavy activations each group's largest value lands exactly on ±448 and
dominates the norm. What E4M3's rounding alone does to each kind of input, computed now:
"""),
("code", r"""
import torch
from fp8lab import metrics
from fp8lab.scaling import QuantSpec, fake_quant
spec = QuantSpec("e4m3", "group", group_size=128)
rel = lambda x: float(torch.linalg.vector_norm(fake_quant(x, spec) - x) / torch.linalg.vector_norm(x))
# eight independent draws of 256 x 1024 N(0, 1) activations: the spread says how much one draw can be trusted
errs = [rel(torch.randn(256, 1024, generator=torch.Generator().manual_seed(s))) for s in range(8)]
print(f"E4M3, 1x128 groups, relative RMS error on N(0, 1) activations: {100 * min(errs):.3f}..{100 * max(errs):.3f} % "
      f"over {len(errs)} draws")
if data:
    by = {}
    for r in bg.gate_table(data):
        by.setdefault(r["inputs"], []).append(r)
    for kind, rs in by.items():
        print(f"{kind:9s} cosine {min(r['cosine'] for r in rs):.6f}..{max(r['cosine'] for r in rs):.6f}   "
              f"rel RMS {100 * min(r['rel_rms'] for r in rs):.2f}..{100 * max(r['rel_rms'] for r in rs):.2f} %   "
              f"gate passed: {sorted({bool(list(r.values())[-1]) for r in rs})}")
"""),
("md", r"""
`tests/test_kernels_gemm.py` pins both facts: the kernels match the exact W8A8 arithmetic, and the gate's verdict is
the arithmetic's.

## Exercises

Worked answers: `notebooks/solutions/07_kernel_speedups_gemm.py` (the CPU parts run in the tests).

1. From the recorded run: for each decode shape and M, which kernel is fastest, and by how much does the newest
   version of each of our kernels beat (or trail) its first version?
2. Why can no kernel reading the same FP8 bytes beat `_scaled_mm` tensorwise at M = 16 by a wide margin? Compute
   the time floor of the largest decode shape from its bytes and the run's memory roof (`gemm_report.roofline_us`).
3. Re-pack NVFP4 nibbles offline so that pairs come out in k order (Marlin does this): which instructions per pair
   does it remove, and how much time could that buy at most? (The decode gap section's `no_mul` and `loads_only`
   rows bound it.)
4. Compare `sass_counts` for your own kernel: grep `HMMA|QGMMA|HGMMA|F2FP` before believing a label
   (`python -m fp8lab.kernels.sass --source gemm_w8a8.cu --arch sm_90` runs on a CPU).
5. On a GPU: `python -m fp8lab.kernels.bench gemm --only decode` and compare with the recorded run.
6. From the recorded decode layer: how many microseconds does each step of fusion (fused, PDL, norm folded in) save
   at batch 1, and how much of the remaining time above the ceiling do the GEMVs account for?
7. For each recorded prefill shape with M ≥ 2048: how many tiles and waves does the default run, what does
   `gemm_w8a8.split_plan` cut, and do the shapes with the emptiest last wave sit lowest against `_scaled_mm`
   blockwise? Which ones would stream-K proper (an even split of all the work, not only the last wave) still help?
8. Read the scheduling hints ptxas wrote on the promotion (on a CPU): `python -m fp8lab.kernels.sass --source
   gemm_w8a8_tma.cu --arch sm_90 --kernel w8a8_tma_n256_w2_s3_c2_e1_ss --control`. Which FFMAs carry a reuse flag,
   which may yield, and why can one FFMA not do both? On a GPU, add an edit of your own to
   `gemm_prefill.CONTROL_EDITS` (say, a yield on every fourth FFMA: `sass.edit_control` takes any selection) and run
   `python -m fp8lab.kernels.bench gemm --only gap`.
"""),
]
