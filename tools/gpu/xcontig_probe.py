"""Does the NVFP4 GEMV's activation load pattern cost time at M = 8 and 16? (a diagnosis, not a result)

    python3 tools/gpu/xcontig_probe.py OUT.json

Version 3 packs NVFP4 so that lane (g, t) multiplies the 32 consecutive activations x[m][32t ..] of a 128-k chunk:
one 16-byte activation load instruction of a warp (fixed v) then reads, per token row, four 16-byte pieces 64 bytes
apart (two 128-byte lines per row, 16 lines for 8 token rows). The variant 'x_contig' reads x[m][32v + 8t ..]
instead (four lanes on 64 contiguous bytes: one line per row, half the L1 lines per instruction) with everything
else unchanged: it computes WRONG numbers (the weights were packed for the other order), so it is timed, never
validated, as the decode gap run's variants are (gemm_decode.DECODE_GAP). If it is markedly faster, a packing whose
k order matches it is worth building; 'no_x_loads' (no activation loads at all) bounds what any pattern can save.
"""
import sys

from fp8lab.kernels import gemm_anchors, gemm_decode as GD, harness

GD.DECODE_GAP["x_contig"] = (
    "NVFP4 activations read 64 contiguous bytes per 4-lane group (one line per token row per instruction, not two)",
    {"nvfp4": [("gemv_v3.cu", "t * (CK / 4);", "t * (NV ? 8 : CK / 4);"),
               ("c * CK + v * 8);", "c * CK + v * (NV ? 32 : 8));")]})


def main(out):
    bench = harness.Bench("gemm", out, "python3 tools/gpu/xcontig_probe.py " + out, rounds=7)
    bench.ceilings = gemm_anchors.measure_ceilings()
    GD.bench_decode_gap(bench, set(), shapes=[(14336, 4096), (4096, 14336), (18944, 3584)], Ms=(1, 8, 16),
                        fmts=("nvfp4",), variants=("x_contig", "no_x_loads"))
    bench.write()
    harness.print_table(bench.results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
