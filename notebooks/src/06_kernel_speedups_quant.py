PATH = "notebooks/06_kernel_speedups_quant.ipynb"
CELLS = [
("md", r"""
# 06 · Kernel speedups, part 1: quantizing to FP8 and NVFP4 at memory speed

**The big idea.** Every FP8 serving stack quantizes activations at every layer: read a bf16 tensor, find each
group's largest magnitude, divide, round, write one byte per element plus the scales. No arithmetic intensity to
speak of, so the speed limit is bandwidth: the best such kernel moves its bytes as fast as a plain copy of the same
number of bytes. "Fraction of copy bandwidth" is the score here, measured against a copy in the same run.

**The key insight.** Being right and being fast pull in the same direction once you count instructions. The
contract (fp8lab.scaling) says `code = encode(x / scale)` with an IEEE division; CUDA's `/` costs a reciprocal, five
FMAs, a check and a branch *per element*, which is enough to make a memory-bound kernel compute-bound. Computing the
reciprocal once per group and correcting twice (Markstein) gives the same bits in five FMAs. The conversion itself
is the other cost: E4M3 has a hardware instruction on Hopper (`cvt.rn.satfinite.e4m3x2.f32`), E2M1 does not (sm_90
has no E2M1 conversion), so on the H200 NVFP4 pays for a software conversion in the hot loop. The GB10 of seed 002
does have one, whatever the seed says: `cvt.rn.satfinite.e2m1x2.f32` compiles for sm_121a (and sm_120a, sm_100a),
though not for the plain sm_121 target; notebook 09 shows the machine code.

**What we can and cannot measure here.** Speed needs a GPU. On a machine with one, the cells below run the
benchmark live at a small size; everywhere else they show the numbers recorded on an H200, clearly labelled with
where, when and how they were measured. Nothing below is typed in: every figure is read from
`outputs/kernels/quant.json`. Bit-exactness was checked on the GPU before anything was timed (see the checks).
Two anchors, both timed in the same run: **torch eager** (the arithmetic written with torch ops, as most code does
it) and **torch.compile** of the same function (what a fused, generated kernel achieves with no hand-written CUDA).
"""),
("code", r"""
from fp8lab import findings, notebook as nb
from fp8lab.kernels import report, bench_quant
s = None
if nb.recorded("kernels", "quant.json", prov=None):
    s = report.summarize("quant")        # live on a CUDA machine, else the recorded H200 run
    print(s.banner)
    print(f"record : {nb.provenance_line(s.provenance)}")
    print(f"\ncopy bandwidth measured in that run (2 GiB, read + write): {s.ceilings.get('copy_gbps_2GiB', float('nan')):.0f} GB/s")
"""),
("md", r"""
## Every kernel, its anchor, and the copy of the same bytes

`x copy bw` = our GB/s over the GB/s of a device-to-device copy of the same number of bytes (read + write), timed in
the same run; bytes counted are input read + codes written + scales written. `speedup` is over torch eager (the
anchor named in the last column); `vs compile` is over `torch.compile` of the same function, where the run compiled
one. Rows starting with `torch` and `copy` are the anchors themselves.
"""),
("code", r"""
COLS = ("kernel", "time_us", "gbps", "fraction_of_copy_bw", "speedup", "speedup_vs_compile", "anchor")
if s:
    print(report.format_table(s, columns=COLS, where=lambda r: r.get("gbps")).replace("speedup_vs_compile", "vs compile"))
"""),
("md", r"""
## The lab's targets for these kernels
"""),
("code", r"""
if s:
    print(report.format_goals(s, bench_quant.GOALS))
"""),
("code", r"""
import matplotlib.pyplot as plt
if s:
    fig, (a, b) = plt.subplots(1, 2, figsize=(15, 8), gridspec_kw={"width_ratios": [3, 2]})
    report.plot_bars(s, "fraction_of_copy_bw", where=lambda r: r.get("gbps") and not r["kernel"].startswith("copy"),
                     ax=a, title="fraction of copy bandwidth (1.0 = a copy of the same bytes)")
    report.plot_bars(s, "speedup_vs_compile", ax=b, title="time of torch.compile / time of ours (> 1: ours faster)")
    b.set_yticklabels([t.get_text().split(" [")[0] for t in b.get_yticklabels()])
    fig.tight_layout()
    nb.show(fig)
"""),
("code", r"""
if s:
    nb.md(findings.quant_anchors_sentence(s.table))
"""),
("md", r"""
## E2M1 in software: branchless vs branchy vs arithmetic

Three bit-identical conversions (checked over all 2³² fp32 inputs on the GPU): seed 002's seven compares with the
round-to-nearest-even tie rule (**branchless**), a naive if/else chain (**branchy**), and **bits**, which lets the
FPU do the rounding (add a power of two sized from the exponent, subtract it again). In the quantization kernel the
conversion is most of the work, so the three show up directly in its time. The dependent-chain microbenchmark
(`e2m1 chain ...`: each thread converts a value derived from its previous code, so nothing can be hoisted or
merged) isolates the conversion; `speedup` there is over the branchy chain.
"""),
("code", r"""
if s:
    print(report.format_table(s, columns=("kernel", "time_us", "gbps", "fraction_of_copy_bw", "speedup", "anchor"),
                              where=lambda r: "e2m1" in r["kernel"] or r["kernel"].startswith("nvfp4")))
"""),
("md", r"""
What the compiler made of them (nvcc for sm_90 with CuPy's `-ftz=true`, disassembled with cuobjdump on the H200):
instruction counts per kernel, with branches (`BRA`), special-function ops (`MUFU`, the reciprocal) and the
hardware FP8 conversions (`F2FP`). The branchy chain keeps real branches for the first compares and if-converts
the rest; the branchless one becomes a chain of compares and conditional increments.
"""),
("code", r"""
if s:
    print(report.format_sass(s))
"""),
("md", r"""
## The checks recorded with the timings

Exhaustive: every fp32 bit pattern through the hardware and software E4M3/E5M2 conversions and the three E2M1
conversions (and their fast-path forms). Before timing, each kernel's output on the benchmarked tensor was compared
bit for bit with torch's path (written with true divisions), and on a slice with the CPU contract. Two findings are
recorded here too: torch's CUDA division by a Python scalar (`amax / 448.0`) multiplies by the reciprocal, so the
usual way of writing this in torch disagrees with the IEEE contract in many group scales; and `torch.compile`'s
version disagrees with eager torch.
"""),
("code", r"""
if s:
    print(report.format_checks(s))
"""),
("md", r"""
## Reading it

* **Correctness came first, and it needed three fixes that no CPU test could see.** CuPy compiles every kernel with
  `-ftz=true`, which flushes subnormal inputs and results; every float operation that can meet a subnormal now goes
  through PTX without `.ftz`. A Markstein correction written `q + (x - s*q)*y` turns `-0` into `+0`; written
  `q - (s*q - x)*y` it keeps the sign. And torch's scalar division is not a division.
* **FP8 with the hardware conversion** approaches copy speed; for bf16 input, which brings half the bytes per
  element, the same work per element is harder to hide, and the row-major / K-major pair (identical kernels but for
  the scale address) shows how much two timings of the same work can differ on this machine.
* **NVFP4** is compute-bound: the E2M1 conversion is most of the work. The line below checks, from the recorded
  run, whether the three conversions' kernel times come in the order of their SASS instruction counts. The dynamic
  version pays a second pass over the input for the global amax; serving stacks pass a calibrated global scale
  instead (the "given amax" rows).
"""),
("code", r"""
if s:
    names = ("bits", "branchless", "branchy")
    t = {n: (report.find(s, f"nvfp4 {n} scale-sw (given amax)") or {}).get("time_us") for n in names}
    c = {n: (s.sass.get(f"nvfp4_quant_bf16_{n}_sw") or {}).get("instructions") for n in names}
    if all(t.values()) and all(c.values()):
        same = sorted(names, key=t.get) == sorted(names, key=c.get)
        print("time (us):   ", {n: round(t[n], 1) for n in names})
        print("instructions:", c)
        print("same order:", same)
    else:
        print("the recorded run lacks the NVFP4 timings or SASS counts for this comparison")
"""),
("md", r"""
## Exercises

Worked answers: `notebooks/solutions/06_kernel_speedups_quant.py` (the CPU parts run in the tests; the GPU parts
need a CUDA device and are skipped elsewhere).

1. From the recorded run: which kernel is furthest below copy bandwidth, and is it the hardware or the software
   conversion that costs more there?
2. `fp8lab.kernels.quant.quantize_group(x, cvt="sw")` vs `cvt="hw"` on your own tensor (GPU): same bytes, different
   speed. On the CPU, check the contract they both implement: `scaling.quantize` with a 1×128 group.
3. Replace `div_by_scale` in `fp8lab/kernels/quant_common.cuh` with a plain `/` and read the SASS
   (`python -m fp8lab.kernels.sass`): where do the `FCHK` and `MUFU.RCP` per element come from?
4. Write the branchy E2M1 chain as a table lookup and time it with the chain microbenchmark
   (`fp8lab.kernels.nvfp4.e2m1_chain_launcher`, GPU).
5. On a GPU: `python -m fp8lab.kernels.bench quant --small` and compare with the recorded run.
"""),
]
