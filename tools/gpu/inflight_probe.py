"""Do more weight bytes in flight per warp shorten version 3's fixed cost at M = 1? (a diagnosis, not a result)

    python3 tools/gpu/inflight_probe.py OUT.json [M ...]          # M = 1 by default; a 220 s budget (FP8LAB_PROBE_BUDGET_S)

Version 3's fit over the decode shapes (gemm_report.fixed_cost_fit) streams at or above `_scaled_mm`'s rate but pays
~5.5-6.5 us of fixed cost against its ~3.5 us, and its timeline puts the first unit 4-5 us after entry. The default
at M <= 8 holds C P = 8 KiB of weights per warp in flight (C = 4 chunks x P = 2 units); with whole row groups a
14336-row matrix leaves ~7 warps per SM, ~55 KiB per SM, against the ~128 KiB per SM a plain read keeps in flight
(tools/gpu/stream_probe.cu read_ldg4). This probe compiles version 3 with deeper pipelines as well ((C, P) = (4, 3)
and (2, 6): 12 KiB per warp, no spills on sm_90 by ptxas -v; (4, 4) and (2, 8) spill) and times each, validated
against the float64 reference on poisoned outputs, beside the default, `_scaled_mm` tensorwise and bf16 cuBLAS,
interleaved rounds of CUDA graphs. Whole row groups and stream-K both.

Whole row groups also in CTAs of one warp: the default grid (4 warps per CTA) puts 896 groups in 224 CTAs on 132 SMs,
8 warps on 92 SMs and 4 on 40 (the timeline found the SM explains most of the whole-group spread); one-warp CTAs
let the block scheduler spread them 6-7 per SM.
"""
import os
import sys

import v3probe   # tools/gpu/v3probe.py (this folder is on the path when the probe runs as a script)

from fp8lab.kernels import gemv_v3 as V3

DEEP = ((4, 3), (2, 6))
V3.KERNELS = V3.KERNELS | {(f, 1, 1, C, P, "store", 0) for f in ("fp8c", "nvfp4") for C, P in DEEP}
V3.TABLES[3] = V3.KERNELS

BUDGET_S = float(os.environ.get("FP8LAB_PROBE_BUDGET_S", 220))
SHAPES = [(14336, 4096), (4096, 14336), (18944, 3584), (3584, 18944), (28672, 8192)]
# (C, P) per format: the default first, then deeper pipelines; each in the GRIDS below
GRIDS = ((4, 4, 1), (1, 16, 1), (4, 4, 0))   # (WPC, CPS, whole): CPS is capped by what is resident
CONFIGS = {"fp8c": [(4, 2), (4, 3), (2, 6), (2, 4)], "nvfp4": [(2, 2), (4, 2), (2, 3), (2, 6)]}


def add_case(bench, c, x, shape, timers, meta, ref):
    for C, P in CONFIGS[c.fmt]:
        for wpc, cps, whole in GRIDS:
            how = f"whole w{wpc}" if whole else "streamk"
            v3probe.add_config(bench, c, x, (C, P, wpc, cps, whole), f"{c.label} c{C}p{P} {how} {shape}",
                               f"{c.label} c{C}p{P} {how}", timers, meta, ref)


def main(out, Ms=(1,)):
    return v3probe.run("inflight_probe.py", out, "inflight", SHAPES, Ms, add_case, BUDGET_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], tuple(int(m) for m in sys.argv[2:]) or (1,)))
