"""Does starting every warp at the same k slow version 3's ramp? (a diagnosis, not a result)

    python3 tools/gpu/stagger_probe.py OUT.json [M ...]      # M = 1 by default; FP8LAB_PROBE_SHAPES=14336x4096,... for fewer

With whole row groups per warp, every warp walks its group from k = 0 in step with the others: the first units of
all warps lie at one regular stride (a group's bytes) in memory, which can load some memory channels more than
others while the pipeline fills (the timeline puts the first unit 4-5 us after entry). The 'stagger' copy of version 3 (patched sources, the arithmetic unchanged) starts warp w at unit w mod KU of
its group and wraps around, so concurrent warps start at different offsets; it sums the units in another order, so
it is validated against the float64 reference (not bit-compared with the default), then timed beside the default in
the same grid, both in the default's CTAs of four warps and in one-warp CTAs, and the anchors, interleaved.
Stream-K ranges are not rotated (the copy is the default there).

FP8LAB_PROBE_NO_X=1: both copies with the activation loads replaced by values made from their addresses (the decode
gap run's no_x_loads patch): wrong numbers by design, timed and not validated; does the stagger still cost time when
no warp can share an activation line with another?
"""
import os
import sys

import v3probe   # tools/gpu/v3probe.py (this folder is on the path when the probe runs as a script)

from fp8lab.kernels import gemm_decode as GD, gemv_v3 as V3

SHAPES = [tuple(int(v) for v in s.split("x")) for s in
          os.environ.get("FP8LAB_PROBE_SHAPES", "14336x4096,18944x3584,28672x8192").split(",")]
GRIDS = ((4, 4), (1, 16))   # (WPC, CPS), whole row groups
NO_X = os.environ.get("FP8LAB_PROBE_NO_X") == "1"


def patches(fmt, stagger):
    (C, P, _, _), R = GD.v3_candidates(fmt, 1, False)[0]
    only = f"GEMV3({V3._FMT_ID[fmt]},{R},1,{C},{P},{V3.EPILOGUES['store']},0)"
    p = {"gemv_v3.cu": [("#endif\nFP8LAB_GEMV_V3", "#endif\n" + only)]}
    if NO_X:
        p["gemv_v3_common.cuh"] = [GD._NO_X]
    if stagger:
        p["gemv_v3.cu"] += [
            ("    const u8* wbase = W + lane * 16;",
             "    const int rot = gran == KU ? wg % KU : 0;  // stagger: warp wg starts its group at unit wg mod KU\n"
             "#define V3ROT(v) (gran == KU ? ((v) / KU) * KU + (((v) % KU) + rot) % KU : (v))\n"
             "    const u8* wbase = W + lane * 16;"),
            ("if (u0 + j < u1) load_unit(ring[j], sring[j], u0 + j);",
             "if (u0 + j < u1) load_unit(ring[j], sring[j], V3ROT(u0 + j));"),
            ("if (u + P < u1) load_unit(ring[j], sring[j], u + P);",
             "if (u + P < u1) load_unit(ring[j], sring[j], V3ROT(u + P));"),
            ("v3_unit<FMT, R, NT, C, NORM>(acc, cur, scur, xrow, kk * C * CK, S, grp, kk, KB);",
             "{ const int kp = gran == KU ? (kk + rot) % KU : kk;\n"
             "  v3_unit<FMT, R, NT, C, NORM>(acc, cur, scur, xrow, kp * C * CK, S, grp, kp, KB); }"),
        ]
    return p


def add_case(bench, c, x, shape, timers, meta, ref):
    C, P = c.cfg[:2]
    for stagger in (0, 1):
        for wpc, cps in GRIDS:
            label = f"{c.label} {'stagger' if stagger else 'default'} w{wpc}{' no_x' if NO_X else ''}"
            v3probe.add_config(bench, c, x, (C, P, wpc, cps, 1), f"{label} {shape}", label, timers, meta, ref,
                               patches=patches(c.fmt, stagger), stagger=stagger, no_x=NO_X,
                               trust=NO_X and "activation loads cut (no_x_loads): wrong numbers by design; "
                                              "timed, not validated")


def main(out, Ms=(1,)):
    return v3probe.run("stagger_probe.py", out, "stagger", SHAPES, Ms, add_case)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], tuple(int(m) for m in sys.argv[2:]) or (1,)))
