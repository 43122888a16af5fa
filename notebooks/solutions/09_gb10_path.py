"""Worked answers to notebook 09's exercises (the GB10 path), from the committed SASS summary and live compiles.

    python notebooks/solutions/09_gb10_path.py

Nothing here runs on a GB10 or claims a GB10 timing: the CPU answers compile, disassemble and do arithmetic.
"""
from fp8lab import notebook as nb

GPU_ONLY = {"exercise_1"}


def exercise_1() -> dict:
    """Run the GB10-native kernels' GPU tests (needs an sm_120 / sm_121 device; on any other GPU they skip).

    On a GB10 the tests check the native kernels against the CPU references of their arithmetic: the hardware
    E2M1 conversion against fp8lab.formats.E2M1 on every bf16 pattern, and the OMMA W4A4 GEMM against the
    block-scaled MMA reference. On an H200 they skip, which is the honest answer there."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                        "tests/test_kernels_gb10.py"], cwd=nb.REPO, capture_output=True, text=True)
    return {"exit code": r.returncode, "last line": (r.stdout.strip().splitlines() or ["(no output)"])[-1]}


def exercise_2() -> dict:
    """Which targets refuse which native source, in ptxas' own words (a compile on this CPU, no GPU).

    The native instructions exist only in the arch-specific targets: `sm_121` (no `a`) refuses the block-scaled
    FP4 MMA and the E2M1 conversion, `sm_100a` accepts the conversion but not this MMA form, `sm_90a` has neither.
    A binary built for the plain target therefore cannot contain them: the likely origin of seed 002's claim."""
    from fp8lab.kernels import gb10_report as gr

    return {f"{src} for {t}": gr.refusal(src, t)
            for src, t in (("gemm_w4a4.cu", "sm_121"), ("nvfp4_hw.cu", "sm_121"), ("gemm_w4a4.cu", "sm_121a"),
                           ("gemm_w4a4.cu", "sm_90a"))}


def exercise_3() -> dict:
    """Seed 002's decode speeds for its GB10 models against the one-token-per-weight-read ceiling (273 GB/s, spec).

    A claim above the ceiling cannot come from plain decoding; speculative decoding (MTP) verifies several drafted
    tokens per weight read, and `fp8lab.serving_claims` gives the tokens per read each claim needs and the
    acceptance rate that would deliver them with 1, 2 or 3 drafted tokens (its conventions make the ceiling
    generous, so "exceeds" is robust)."""
    from fp8lab import serving_claims as sc

    rows = sc.claims_table()
    keep = ("tokens_per_s", "ceiling_tok_s", "tokens_per_weight_read_needed", "verdict", "acceptance_needed")
    return {r.get("id", str(i)): {k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items() if k in keep}
            for i, r in enumerate(rows)}


def exercise_4() -> dict:
    """The W4A4 kernel's inner loop on sm_121a against its portable twin's: instructions per matrix instruction.

    The native loop is loads and OMMAs: the tensor core widens the nibbles and applies the E4M3 block scales itself.
    The portable twin runs the same loads through f16 HMMAs and widens every nibble and applies every scale on the
    CUDA cores, so its loop holds many more conversion, logic and fp32 instructions per matrix instruction."""
    from fp8lab.kernels import gb10_report as gr

    s = gr.load()
    rows = gr.loops(s, "sm_121")
    return {r["kernel"]: {k: r[k] for k in ("matrix ops", "instructions", "per_matrix_instruction",
                                            "conversions (F2FP/I2F)", "logic (LOP3/SHF/PRMT)")} for r in rows} \
        or {"answer": "no loop recorded for sm_121 in this summary"}


if __name__ == "__main__":
    nb.run_exercises(globals())
