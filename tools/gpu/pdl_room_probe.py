"""Does the next kernel start under a GEMV that leaves it room on each SM? (a diagnosis, not a result)

    python3 tools/gpu/pdl_room_probe.py OUT.json [W ...]     # W warps per SM for every GEMV; default 8 and 6

The decode layer's GEMVs launch a grid that fills every SM's register file (gemv_v3.prepare: the whole grid resident
at once; FP8 at M = 1: 160 registers x 12 warps, NVFP4: 128 x 16). Programmatic dependent launch lets the next kernel
start once the running one has issued its launch_dependents, but its CTAs still need a free slot on an SM: with every
slot taken they only start as the running kernel's warps exit, and each GEMV pays its own ramp (the ~4 us before a
warp's first unit, outputs/kernels/decode_timeline.json) after the previous kernel's tail. This probe builds the
layer (B = 1, context 1k, the goal point) with every GEMV capped at W warps per SM (gemv_config: the default's C and
P, its CTAs cut to W warps), fused with and without PDL, FP8 and NVFP4, beside the defaults; each layer is validated
against its float64 reference (DecodeLayer.validate) and all are timed together in interleaved rounds of CUDA graphs
(harness.Bench.compare), as bench_layer times the recorded layer. Reading: if capped PDL layers get faster while the
capped non-PDL ones do not (or lose), residency limits the overlap; if both lose, fewer warps stream slower and the
cap costs more than the overlap buys.
"""
import sys
import time

import layerprobe   # tools/gpu/layerprobe.py (this folder is on the path when the probe runs as a script)

from fp8lab.kernels import decode_layer as DL
from fp8lab.kernels import gemv_v3 as V3
from fp8lab.kernels import harness

VARIANTS = ("fp8_fused", "fp8_fused_pdl", "nvfp4_fused", "nvfp4_fused_pdl")
GEMVS = ("qkv", "o", "gate_up", "down")


def capped(fmt: str, M: int, warps: int) -> tuple:
    """The default (C, P, WPC, CPS) with W warps per SM: CTAs of 4 warps where W is a multiple of 4, else of 2 / 1."""
    C, P, _, _ = V3.default_config(fmt, M)
    wpc = next(w for w in (4, 2, 1) if warps % w == 0)
    return (C, P, wpc, warps // wpc)


def main(out: str, caps=(8, 6), B: int = 1, ctx: int = 1024) -> int:
    t0 = time.time()
    bench = harness.Bench("pdl_room_probe", out, "python3 tools/gpu/pdl_room_probe.py " + " ".join(sys.argv[1:]), rounds=7)
    copy = bench.ceilings["copy_gbps"] = harness.copy_bandwidth_gbps()
    shape = DL.LayerShape.from_config(DL.CONFIG)
    master = DL.make_master(shape)
    wcache: dict = {}
    timers, meta = {}, {}
    for v in VARIANTS:
        fmt = v.split("_")[0]
        for W in (0,) + tuple(caps):
            cfg = {} if W == 0 else {g: capped(fmt, B, W) for g in GEMVS}
            name = f"{v} {'default' if W == 0 else f'{W} warps/SM'}"
            layer = layerprobe.build(bench, name, lambda cfg=cfg: DL.DecodeLayer(
                shape, master, v, B, ctx, max_context=ctx, weight_cache=wcache, gemv_config=cfg))
            if layer is None:
                continue
            grids = {type(s).__name__ + str(i): getattr(s, "info", {}).get("config") for i, s in enumerate(layer.steps)}
            meta[name] = dict(variant=v, warps_per_sm=W or None, gemv_config={g: list(c) for g, c in cfg.items()},
                              launched={k: list(c) for k, c in grids.items() if c})
            timers[name] = layerprobe.timer(layer.step)
            print(f"  {name}: validated, launched {meta[name]['launched']}", flush=True)
    t = bench.compare(timers)
    ceil = {f: DL.ceiling_us(DL.layer_bytes(f"{f}_fused", B, ctx, DL.CONFIG)["total"], copy) for f in ("fp8", "nvfp4")}
    rows = []
    for name, timing in t.items():
        m = meta[name]
        base = t.get(f"{m['variant']} default")
        fmt = m["variant"].split("_")[0]
        rows.append(dict(name=name, **m, time_us=timing.median, q1=timing.q1, q3=timing.q3,
                         vs_default=(base.median / timing.median) if base else None,
                         of_ceiling=ceil[fmt] / timing.median))
        print(f"{name:34s} {timing.median:8.2f} us [{timing.q1:.2f}, {timing.q3:.2f}]  "
              f"x default {rows[-1]['vs_default']:.3f}  of ceiling {rows[-1]['of_ceiling']:.3f}", flush=True)
    bench.extra.update(rows=rows, point=dict(batch=B, context=ctx), ceilings_us=ceil)
    bench.write()
    print(f"wrote {out} in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__.split("\n\n")[1] if "\n\n" in __doc__ else __doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], tuple(int(w) for w in sys.argv[2:]) or (8, 6)))
