"""Where a decode GEMV's microseconds go, warp by warp: version 3 with a %globaltimer stamp per warp.

    bench_decode_timeline(bench, skip=set())          # `python -m fp8lab.kernels.bench gemm --only decode_timeline`
    s = summary(stamps)                               # stamps: [warps, 4] ns (entry, first unit, last unit, end)

The decode gap run (gemm_decode.bench_decode_gap) times what is left when the arithmetic is taken away; this one
watches the shipped kernel run. An instrumented copy of version 3 (patched sources, gemv_timeline.cuh) has each
warp's lane 0 read the GPU-wide nanosecond clock four times -- at entry, once its first unit is multiplied (its first
requested bytes have arrived), once its last unit is multiplied, and at its end (after the store or the stream-K
fix-up) -- and write them with the SM it ran on. The copy is validated against the float64 reference like the
kernel, and timed beside it and the anchors (interleaved): what the four clock reads cost is measured, not assumed.
One call's stamps are then read back (`summary`): when the warps started, how long the pipeline took to fill, how
long each warp streamed its equal share of the bytes, how long the end took, and how many warps were still running
at each moment of the call. Warps that had no work (whole-row-group ranges leave a few) write nothing and are left
out.
"""
from __future__ import annotations

import numpy as np

from . import harness

#: the Llama-3-8B MLP shapes (the smallest goal shapes: a call's fixed cost weighs most) and the largest of the lab's
SHAPES = [(14336, 4096), (4096, 14336), (28672, 8192)]
MS = (1, 16)
FORMATS = ("fp8c", "nvfp4")
#: warps the stamp arrays hold (gemv_timeline.cuh V3_TL_MAX_WARPS, the same number)
MAX_WARPS = 16384
#: points of the "warps still running" curve over a call's span
CURVE_POINTS = 41
_INCLUDE = '#include "gemv_v3_common.cuh"  // widening, chunk MMAs, epilogues, stream-K fix-up, fused RMSNorm\n'
# the four stamps, inserted into gemv_v3.cu's body: entry; after the unit multiply, the first and the last unit of
# the warp's range; after the loop
_HOOKS = [
    (_INCLUDE, _INCLUDE + '#include "gemv_timeline.cuh"  // the instrumented copy only\n'),
    ("    const int Wt = gridDim.x * wpc;\n",
     "    const int Wt = gridDim.x * wpc;\n    const unsigned long long tl0 = tl_now(0.f);\n"
     "    unsigned long long tl1 = 0, tl2 = 0;\n"),
    ("                v3_unit<FMT, R, NT, C, NORM>(acc, cur, scur, xrow, kk * C * CK, S, grp, kk, KB);\n",
     "                v3_unit<FMT, R, NT, C, NORM>(acc, cur, scur, xrow, kk * C * CK, S, grp, kk, KB);\n"
     "                if (u == u0) tl1 = tl_now(acc[0][0][0]);\n"
     "                if (u + 1 == u1) tl2 = tl_now(acc[0][0][0]);\n"),
    ("            }\n        }\n    }\n}\n",
     "            }\n        }\n    }\n    tl_store(wg, lane, tl0, tl1, tl2, tl_now(acc[0][0][0]));\n}\n"),
]


def patches(fmt: str, Ms=MS) -> dict:
    """_cuda.patched_sources patches of the instrumented copy: version 3's default kernels of `fmt` at `Ms` only (the
    decode gap run's instantiation edit), with the stamps."""
    from .gemm_decode import decode_gap_patches

    p = decode_gap_patches("full", fmt, Ms)
    p.setdefault("gemv_v3.cu", []).extend(_HOOKS)
    return p


def _quantiles(a) -> dict:
    return {str(q): round(float(np.percentile(a, q)), 3) for q in (0, 10, 50, 90, 100)}


def summary(stamps, sm=None, points: int = CURVE_POINTS) -> dict:
    """What one call's stamps say ([warps, 4] ns: entry, first unit done, last unit done, end; rows of zeros: warps
    that had no work). Times in us from the first warp's entry; each phase as quantiles {0, 10, 50, 90, 100} over the
    warps:
      start_us        entry                              first_unit_us  first unit done - entry (the pipeline fill)
      stream_us       last unit done - first unit done   finish_us      end - last unit done (store / fix-up)
      end_us          end
    span_us: the last warp's end; mean_end_us; idle_share: the share of the warps' time within the span spent after
    their end (0: all ended together); active: warps still running at `points` evenly spaced moments of the span;
    resolution_ns: the clock's smallest step seen. With `sm` (each warp's SM): sms (distinct SMs), sm_stream_us (the
    lowest and highest of the SMs' mean streaming times) and between_sm_share, the share of the streaming times'
    variance that lies between SMs (1: a warp's SM sets its time; 0: the SM says nothing about it).

    summary([[1000, 2000, 5000, 6000], [1000, 2500, 7500, 9000], [0, 0, 0, 0]])["idle_share"] -> 0.1875"""
    s = np.asarray(stamps, dtype=np.int64).reshape(-1, 4)
    busy = s[:, 0] > 0
    if not busy.any():
        raise ValueError("no warp wrote its stamps (did the instrumented kernel run?)")
    s = s[busy]
    if (np.diff(s, axis=1) < 0).any():
        raise ValueError("stamps out of order in some warp: entry <= first unit <= last unit <= end must hold")
    rel = (s - s[:, 0].min()) / 1e3
    span = float(rel[:, 3].max())
    steps = np.diff(np.unique(s))
    out = {"warps": int(busy.sum()), "span_us": round(span, 3), "mean_end_us": round(float(rel[:, 3].mean()), 3),
           "start_us": _quantiles(rel[:, 0]), "first_unit_us": _quantiles(rel[:, 1] - rel[:, 0]),
           "stream_us": _quantiles(rel[:, 2] - rel[:, 1]), "finish_us": _quantiles(rel[:, 3] - rel[:, 2]),
           "end_us": _quantiles(rel[:, 3]),
           "idle_share": round(float((span - rel[:, 3]).sum() / (len(rel) * span)), 4) if span > 0 else 0.0,
           "active": [int(((rel[:, 0] <= t) & (rel[:, 3] > t)).sum()) for t in np.linspace(0.0, span, points)],
           "resolution_ns": int(steps.min()) if len(steps) else None}
    if sm is not None:  # are the slow warps the warps of particular SMs?
        sm = np.asarray(sm)[busy]
        stream = rel[:, 2] - rel[:, 1]
        ids = np.unique(sm)
        means = np.array([stream[sm == i].mean() for i in ids])
        total = float(((stream - stream.mean()) ** 2).sum())
        between = float(sum((sm == i).sum() * (m - stream.mean()) ** 2 for i, m in zip(ids, means)))
        out["sms"] = int(len(ids))
        out["sm_stream_us"] = {"min": round(float(means.min()), 3), "max": round(float(means.max()), 3)}
        out["between_sm_share"] = round(between / total, 4) if total > 0 else None
    return out


def stamped_call(launch, module) -> tuple[np.ndarray, np.ndarray]:
    """One call of an instrumented launch (`module`: its compiled gemv_v3.cu copy), the stamp arrays zeroed first:
    ([warps, 4] int64 ns, [warps] SM ids)."""
    import cupy as cp
    import torch

    W = launch.info["warps"]
    if W > MAX_WARPS:
        raise ValueError(f"{W} warps: the stamp arrays hold {MAX_WARPS} (gemv_timeline.cuh V3_TL_MAX_WARPS)")
    tl = cp.ndarray((MAX_WARPS * 4,), dtype=cp.uint64, memptr=module.get_global("v3_tl"))
    sm = cp.ndarray((MAX_WARPS,), dtype=cp.uint32, memptr=module.get_global("v3_tl_sm"))
    tl.fill(0)
    sm.fill(0)
    torch.cuda.synchronize()
    launch()
    torch.cuda.synchronize()
    return tl[: 4 * W].get().astype(np.int64).reshape(W, 4), sm[:W].get()


def bench_decode_timeline(bench: harness.Bench, skip: set, shapes=SHAPES, Ms=MS, fmts=FORMATS) -> None:
    """Per shape, M and format: version 3 at its default config and its instrumented copy (both validated against the
    float64 reference, outputs poisoned), `_scaled_mm` tensorwise and bf16 cuBLAS, interleaved; then one call of the
    copy read back. Records: family "decode_timeline"; the copy is '<label>-timeline' with `timeline` (summary) and
    of_kernel."""
    from . import _cuda
    from . import gemv_v3 as V3
    from .gemm_decode import v3_rounds

    for shape, x, timers, meta, cases in v3_rounds(bench, skip, shapes, Ms, fmts, "decode_timeline"):
        for fmt, c in cases.items():
            try:
                plain = [V3.prepare(x, p, config=c.cfg) for p in c.packs]
                with _cuda.patched_sources(patches(fmt, Ms)):
                    inst = [V3.prepare(x, p, config=c.cfg) for p in c.packs]
                    module = _cuda.load_module("gemv_v3.cu")
                    inst[0]()  # compiled from the patched copy while it exists
                for _ in range(3):  # warm: the stamps of a call like the timed ones
                    inst[0]()
                ref = c.reference()
                if not (c.validate(bench, f"{c.label} {shape}", plain[0], ref)
                        and c.validate(bench, f"{c.label}-timeline {shape}", inst[0], ref)):
                    continue
                stamps, sm = stamped_call(inst[0], module)
                tl = summary(stamps, sm)
            except Exception as e:  # noqa: BLE001 - recorded, not fatal
                bench.notes.append({"kernel": f"{c.label}-timeline {shape}", "error": f"{type(e).__name__}: {str(e)[:300]}"})
                continue
            extra = {**c.extra(plain[0]), "warps": plain[0].info["warps"], "whole_groups": plain[0].info["whole_groups"]}
            timers[f"{c.label} {shape}"] = lambda ls=plain: harness.graph_time_us(ls, rep=30)
            meta[f"{c.label} {shape}"] = (c.label, c.dtype, c.bytes, dict(extra))
            timers[f"{c.label}-timeline {shape}"] = lambda ls=inst: harness.graph_time_us(ls, rep=30)
            meta[f"{c.label}-timeline {shape}"] = (f"{c.label}-timeline", c.dtype, c.bytes,
                                                   {**extra, "of_kernel": c.label, "timeline": tl})
            print(f"  {c.label}-timeline {shape}: span {tl['span_us']:.1f} us, first unit p50 "
                  f"{tl['first_unit_us']['50']:.1f} us, stream p0-p100 {tl['stream_us']['0']:.1f}-"
                  f"{tl['stream_us']['100']:.1f} us, idle share {tl['idle_share']:.2f}", flush=True)
