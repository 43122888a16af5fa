"""Does the NVFP4 GEMV's activation load pattern cost time? (a diagnosis, not a result)

    python3 tools/gpu/xcontig_probe.py OUT.json

Version 3 packs NVFP4 so that lane (g, t)'s two halves of a 128-k chunk are the 16-blocks t and t + 4: one 16-byte
activation load instruction of a warp reads, per token row, four 16-byte pieces of ONE 128-byte line. The order it
replaced gave lane t the 32 consecutive activations x[m][32t ..]: four pieces 64 bytes apart, two lines per row (16
lines per instruction at M >= 8). The variant 'x_twoline' puts that old pattern back in the addresses alone (the
weights stay packed in the new order, so it computes WRONG numbers: timed, never validated, as the decode gap run's
variants are, gemm_decode.DECODE_GAP); 'no_x_loads' (no activation loads at all) bounds what any pattern can save.
"""
import sys

from fp8lab.kernels import gemm_anchors, gemm_report, gemm_decode as GD, harness

GD.DECODE_GAP["x_twoline"] = (
    "NVFP4 activations read as the previous k order did: 32 consecutive per lane, two 128-byte lines per token row "
    "per load instruction",
    {"nvfp4": [("gemv_v3.cu", "* Kp + 16 * t;", "* Kp + (NV ? 32 : 16) * t;"),
               ("return NV ? (v >> 1) * 64 + (v & 1) * 8 : v * 8;", "return v * 8;")]})


def main(out):
    bench = harness.Bench("gemm", out, "python3 tools/gpu/xcontig_probe.py " + out, rounds=7)
    bench.ceilings = gemm_anchors.measure_ceilings()
    bench.extra.update(sources_sha256_12=gemm_report.source_digest())   # what notebook 07 checks against the tree
    GD.bench_decode_gap(bench, set(), shapes=[(14336, 4096), (4096, 14336), (18944, 3584)], Ms=(1, 8, 16),
                        fmts=("nvfp4",), variants=("x_twoline", "no_x_loads"))
    bench.write()
    harness.print_table(bench.results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
