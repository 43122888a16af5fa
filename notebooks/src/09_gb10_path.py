PATH = "notebooks/09_gb10_path.ipynb"
CELLS = [
("md", r"""
# 09 · The GB10 path: what the machine code says, and what it cannot say

**The big idea.** Seed 002 says the GB10 (DGX Spark, `sm_121`) "does not expose the relevant MMA or
conversion instructions", so NVFP4 must be converted in software and multiplied as bf16. A claim about instructions
is a claim about machine code, and machine code can be read without the chip: compile each kernel for each
architecture with the compiler every lab machine has (NVRTC, with CuPy's exact options; its version is printed
below, read from the summary), disassemble it, and
look at what does the work. That is what this notebook shows, for sm_89 (Ada), sm_90a (Hopper), sm_100 (B200),
sm_120a (Blackwell GeForce / RTX PRO) and sm_121a (the GB10).

**The key insight.** The instructions exist — for the *arch-specific* target. `cvt.rn.satfinite.e2m1x2.f32` (two
floats to two E2M1 codes), `cvt.rn.f16x2.e2m1x2` (back) and the block-scaled FP4 tensor-core MMA
(`mma.sync … kind::mxf4nvf4.block_scale.scale_vec::4X … ue4m3`, SASS `OMMA.SF`) all assemble for `sm_121a`, and ptxas
refuses every one of them for the plain `sm_121` target. A binary built for `sm_121` — no `a` — cannot contain them,
so a stack built that way would indeed find them missing: a plausible origin of the seed's claim. The MMA also reads
NVFP4's E4M3 block scales itself: a W4A4 GEMM needs no dequantization on the CUDA cores at all.

**What we can and cannot measure here.** Compiling proves the instructions exist in the GB10's instruction set and
shows what a kernel's inner loop is made of. It does not prove the chip executes them at any particular rate: there
is no GB10 here, and no GB10 timing anywhere in this lab. The arithmetic is checked another way — CPU references of
exactly what each native kernel computes, checked against the portable kernels on an H200 where the arithmetic is the
same (`tests/test_kernels_gb10.py`). Everything below is read from `outputs/kernels/sass/summary.json`, written by
`python -m fp8lab.kernels.sass --summary --record` (into `outputs/kernels/sass/`).
"""),
("code", r"""
from fp8lab.kernels import gb10_report as gr, native
s = gr.load()          # the committed SASS summary (a live compile of a few kernels if none is committed)
print(gr.describe(s))
"""),
("md", r"""
## Which instruction does which job, on which chip

One block per job; in each, the SASS instruction that does the work on that architecture, read from the compiled
kernel. Where the GB10-native source does not build, the portable kernel's machine code is shown, marked
*(portable)*: "software" means the E2M1 conversion is ordinary integer and float arithmetic.
"""),
("code", r"""
print(gr.format_jobs(gr.jobs(s), s))
"""),
("md", r"""
Reading it. Hopper (sm_90a) has no E2M1 instruction and no FP4 tensor core: NVFP4 is converted in software there,
which is what notebook 06 times. `mma.sync … e4m3` compiles on sm_90a and sm_100 too, but the listing shows how:
`F2FP.F16.E4M3.UNPACK_B` conversions feeding ordinary `HMMA` — an emulation; Hopper's FP8 tensor cores are `wgmma`
(`QGMMA`), and the B200's are `tcgen05` (not used by this lab). On sm_89, sm_120a and sm_121a the same `mma.sync` is a
native `QMMA`. The GB10 rows — sm_121a — carry the E2M1 conversions (`F2FP…E2M1`) and the block-scaled FP4 MMA
(`OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X`). The W8A8 kernel on the GB10 is the 3-stage variant: NVIDIA's Blackwell
tuning guide gives the `sm_12x` parts (like `sm_89`) far less shared memory per block than Hopper, less than the
4-stage kernel needs (the limit is in `fp8lab.kernels.native.choose`).

## The `a` suffix, proven by compiling

The same source compiled for the plain target, and for the B200's arch-specific one: ptxas' own words. Then one GB10
kernel compiled live, so the table above is not taken on trust.
"""),
("code", r"""
for src, target in [("gemm_w4a4.cu", "sm_121"), ("nvfp4_hw.cu", "sm_121"), ("gemm_w4a4.cu", "sm_100a"), ("gemm_w4a4.cu", "sm_90a")]:
    print(f"{src:14s} for {target:8s}: {gr.refusal(src, target)}")
live = gr.live_listing("gemm_w4a4.cu", 121, "w4a4_omma")
print("\nlive compile, w4a4_omma for", live.get("target"), "->", live.get("matrix_forms", live.get("error")))
for line in live.get("lines", []):
    print("   ", line)
"""),
("md", r"""
## How the block-scaled MMA consumes NVFP4's scales

`mma.sync.m16n8k64 … kind::mxf4nvf4.block_scale.scale_vec::4X … ue4m3` multiplies a 16×64 block of E2M1 activations by
a 64×8 block of E2M1 weights. Its operands are the packed nibbles exactly as NVFP4 stores them (eight consecutive
elements per 32-bit register, element 2i in the low nibble), and two more registers: four E4M3 scale codes for the
activation row a lane speaks for, four for the weight column — byte `j` scales elements `16j … 16j+15`, which is
NVFP4's 1×16 block. The tensor core forms `(a·sa)(w·sw)` itself. So the inner loop of the W4A4 kernel is loads and
MMAs: no nibble is widened and no scale is multiplied on the CUDA cores; the per-tensor global scales are one multiply
in the epilogue. Its portable twin runs the *same* loads and registers through ordinary f16 MMAs, widening every
nibble and applying the scales in FP32 per 16-block — that is the work the OMMA removes. The GEMV pair shows the
other side: decoding E2M1 with `cvt.rn.f16x2.e2m1x2` is not free when the MMA runs in bf16 (f16 → bf16 has no
instruction), and the W8A8 QMMA kernel still promotes its partial sums per 128-wide block in FP32, as seed 001 asks.
"""),
("code", r"""
print(gr.format_loops(gr.loops(s, "sm_121")))
"""),
("md", r"""
## What was compiled and checked, and what was not run

| what | where | how |
|---|---|---|
| every kernel, every tested arch (sm_89, sm_90a, sm_120a, sm_121a) | CPU CI | `tests/test_kernels_sass.py`: compiles, disassembles, asserts `OMMA.SF…E2M1`, `F2FP…E2M1` only where asked, `QMMA` (not an `F2FP`+`HMMA` emulation), `QGMMA`; and that ptxas refuses the native sources for sm_89, sm_90a, plain sm_120/sm_121, and the MMA for sm_100a |
| the hardware E2M1 conversion's semantics | CPU CI | NVIDIA's documented function (the CUDA toolkit's `cuda_fp4.hpp`) equals `fp8lab.formats.E2M1.encode` on every bf16 pattern and every tie — except NaN (+6 there, 0 in the lab: the kernels canonicalize it) |
| the block-scaled MMA and W4A4 references | CPU CI | `fp8lab.kernels.mma_reference` against float64 dequantize-then-matmul; activations quantized through `fp8lab.scaling` |
| the W4A4 skeleton, fragments, scale registers, epilogue | H200 (`-m gpu`) | the portable emulation kernel, bit for bit against the reference's per-block rounding |
| the native kernels on a GB10 | **not run** | `tests/test_kernels_gb10.py` holds their GPU tests; they skip on anything but sm_120 / sm_121 |
| any GB10 timing | **not run** | none exists in this lab |

Which variant each job uses, by architecture (the kernels' `"auto"` choice):
"""),
("code", r"""
rows = native.table()
archs = sorted({r["arch"] for r in rows}, key=lambda a: int(a[3:]))
print(f"{'job':14s}" + "".join(f"{a:>12s}" for a in archs))
for fam in dict.fromkeys(r["family"] for r in rows):
    print(f"{fam:14s}" + "".join(f"{r['variant']:>12s}" for a in archs for r in rows if r["family"] == fam and r["arch"] == a))
"""),
("md", r"""
## The GB10 in the bandwidth numbers

Whatever the instructions, a single decode stream reads every weight once per token, so the ceiling is memory
bandwidth over bytes per token. The GB10's LPDDR5x (NVIDIA's published figure, labelled *spec, not measured*) is a
small fraction of an H200's HBM, so the bytes per token of the format matter even more there: in this ceiling,
NVFP4's 0.5625 bytes per weight is the only lever; what the FP4 tensor cores add in practice is not measured here (no
GB10 has run these kernels). The model is seed 002's Qwen3.5-35B-A3B (config in
`fp8lab/model_configs/`); the H200 rows show the datasheet and the lab's own measured bandwidth.
"""),
("code", r"""
from fp8lab import bandwidth
rows = bandwidth.decode_ceilings(gr.REPO / "fp8lab/model_configs/qwen3.5-35b-a3b.json")
print(bandwidth.format_decode_ceilings(rows))
"""),
("md", r"""
## Exercises

Worked answers: `notebooks/solutions/09_gb10_path.py` (the CPU parts run in the tests).

1. On a GB10 (or any sm_120 / sm_121 card): `python -m pytest -m gpu tests/test_kernels_gb10.py`. The exhaustive
   E2M1 check prints what the instruction really does with NaN; the OMMA test says whether the tensor core
   accumulates with fp32 precision (if it fails by a small factor, promote partial sums every few k-steps, as
   DeepGEMM does on Hopper). Then time `gemm_w4a4` (`kernel="omma"`) against `kernel="emu"`.
2. Compile a native source for the plain target yourself (`gb10_report.refusal`): which targets refuse which
   source, in ptxas' own words?
3. Put the decode speeds seed 002 quotes for this model next to the ceiling printed above (one token per weight
   read). Speculative decoding (the seed's MTP) verifies several tokens per read: how many accepted tokens per step
   would the seed's numbers need (`fp8lab.serving_claims`)?
4. `python -m fp8lab.kernels.sass --source gemm_w4a4.cu --arch sm_121 --kernel w4a4_omma` prints the whole listing:
   find the `OMMA` that consumes the scales, and count the instructions of the inner loop against its portable
   twin's (`gb10_report.loops`).
"""),
]
