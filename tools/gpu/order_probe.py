"""Chunk-major against group-major packs: does version 3 stream faster when the whole grid reads one window of memory
at a time? (a diagnosis, not a result)

    python3 tools/gpu/order_probe.py OUT.json [M ...]    # M = 1 and 16 by default; FP8LAB_PROBE_SHAPES=14336x4096,...
                                                         # a 300 s budget (FP8LAB_PROBE_BUDGET_S)

Group-major packs (gemv_v3.ORDERS "group": all chunks of row group 0, then group 1, ...) let every warp stream its own
contiguous range, so at any moment the grid's ~900 warps read ~900 places a group (or a range) apart. Chunk-major packs
("chunk": chunk 0 of every group, then chunk 1, ...) put what warps walking their groups in step read next to each
other: one contiguous window at a time, as a memcpy reads. Version 3 reads either (the kernel is passed the strides);
the same arithmetic in the same order, so both are validated against the float64 reference and give the same bits.
Timed beside each other at version 3's default config, each also with its arithmetic cut away (the decode gap run's
loads_only patch: wrong numbers by design, timed, not validated), `_scaled_mm` tensorwise and bf16 cuBLAS, interleaved.
"""
import copy
import os
import sys

import v3probe   # tools/gpu/v3probe.py (this folder is on the path when the probe runs as a script)

from fp8lab.kernels import gemm_decode as GD, gemv_v3 as V3

BUDGET_S = float(os.environ.get("FP8LAB_PROBE_BUDGET_S", 300))
SHAPES = [tuple(int(v) for v in s.split("x")) for s in
          os.environ.get("FP8LAB_PROBE_SHAPES", "14336x4096,28672x8192,4096x14336,18944x3584").split(",")]


def add_case(bench, c, x, shape, timers, meta, ref, Ms):
    for variant in ("full", "loads_only"):
        for order in V3.ORDERS:
            case = copy.copy(c)
            case.packs = [V3.reorder(p, order) for p in c.packs]
            label = f"{c.label} {order}{'' if variant == 'full' else ' loads_only'}"
            v3probe.add_config(bench, case, x, c.cfg, f"{label} {shape}", label, timers, meta, ref,
                               patches=GD.decode_gap_patches(variant, c.fmt, Ms) if variant != "full" else None,
                               order=order, variant=variant,
                               trust=variant != "full" and "arithmetic cut away (loads_only): wrong numbers by design; "
                                                           "timed, not validated")


def main(out, Ms=(1, 16)):
    return v3probe.run("order_probe.py", out, "order", SHAPES, Ms, lambda *a: add_case(*a, Ms=Ms), BUDGET_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], tuple(int(m) for m in sys.argv[2:]) or (1, 16)))
