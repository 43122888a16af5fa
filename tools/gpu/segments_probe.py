"""Split-K in whole segments against version 3's stream-K split, where the default streams (a diagnosis, not a result)

    python3 tools/gpu/segments_probe.py OUT.json [M ...]     # M = 1 by default; a 220 s budget (FP8LAB_PROBE_BUDGET_S)

Where N is small (few row groups) the default cuts the units of all groups evenly over the resident warps at any unit
boundary (stream-K): warps start at scattered k and each group is split at arbitrary units. The lab's version 1
(split-K in 16 equal K segments, gemv_fp8.default_config) beat version 3 at the small-N decode shapes in the recorded
H100 run (gemm_report.decode_goal_lines names it per shape). This probe times version 3 with its split in S whole
segments per row group (config's 5th element S: grains of KU / S units, every warp whole segments, the same fix-up)
for each divisor S of the units per group that gives 4 to 16 segments per SM, in the default's CTAs of four warps and
in one-warp CTAs, beside the default (stream-K), `_scaled_mm` tensorwise and bf16 cuBLAS: every config validated
against the float64 reference on poisoned outputs, then timed in interleaved rounds of CUDA graphs.
"""
import os
import sys

import v3probe   # tools/gpu/v3probe.py (this folder is on the path when the probe runs as a script)

from fp8lab.kernels import gemv_v3 as V3

BUDGET_S = float(os.environ.get("FP8LAB_PROBE_BUDGET_S", 220))
SHAPES = [tuple(int(v) for v in s.split("x")) for s in
          os.environ.get("FP8LAB_PROBE_SHAPES", "4096x14336,3584x18944,8192x28672,28672x8192,14336x4096").split(",")]
GRIDS = ((4, 4), (1, 16))   # (WPC, CPS): CPS is capped by what is resident


def segment_counts(G: int, KU: int, sms: int) -> list[int]:
    """Divisors S >= 2 of KU with 4 sms <= G S <= 16 sms (segments that fill the resident warps, not many more)."""
    return [S for S in range(2, KU + 1) if KU % S == 0 and 4 * sms <= G * S <= 16 * sms]


def add_case(bench, c, x, shape, timers, meta, ref):
    p = c.packs[0]
    C, P, wpc0, cps0 = c.cfg
    if V3.prepare(x, p).info["whole_groups"]:
        return   # the default takes whole row groups here: nothing is split
    KU = p.Kp // (V3.CHUNK_K[p.fmt] * C)
    v3probe.add_config(bench, c, x, (C, P, wpc0, cps0, 0), f"{c.label} default streamk {shape}",
                       f"{c.label} default streamk", timers, meta, ref, segments=0)
    for S in segment_counts(p.groups, KU, V3.sm_count()):
        for wpc, cps in GRIDS:
            v3probe.add_config(bench, c, x, (C, P, wpc, cps, S), f"{c.label} seg{S} w{wpc} {shape}",
                               f"{c.label} seg{S} w{wpc}", timers, meta, ref, segments=S)


def main(out, Ms=(1,)):
    return v3probe.run("segments_probe.py", out, "segments", SHAPES, Ms, add_case, BUDGET_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], tuple(int(m) for m in sys.argv[2:]) or (1,)))
