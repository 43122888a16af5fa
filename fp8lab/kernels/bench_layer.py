"""One decode layer end to end, bf16 / _scaled_mm / FP8 / NVFP4, unfused and fused: `python -m fp8lab.kernels.bench layer`.

    python -m fp8lab.kernels.bench layer --batch 1,8,32 --context 1024,8192,32768
    python -m fp8lab.kernels.bench layer --batch 1 --context 1024 --variants bf16,fp8_fused --out /tmp/layer.json

Per (batch, context): every variant (decode_layer.VARIANTS) is built with the same random bf16 "checkpoint" and
inputs, validated stage by stage against the float64 reference (outputs poisoned), then all of them are timed
together as CUDA graphs of 16 layer steps in interleaved rounds (median and quartiles). Each record carries the
layer's bytes (fp8lab.bandwidth: weights + KV read + activations), the ceiling those bytes set at the copy bandwidth
measured in the same run (and at the datasheet's 4.8 TB/s), tokens/s (a 32-layer model decoding as fast as this
layer), FLOPs and intensity for notebook 04's roofline. For the fastest FP8 and NVFP4 variants at the first point,
`breakdown` times each kernel of the step alone: where the time above the ceiling goes.
Writes outputs/kernels/layer.json (harness schema); layer_report reads it back.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import harness
from .bench_attention import SOURCES as ATTENTION_SOURCES

DEFAULT_OUT = harness.REPO / "outputs" / "kernels" / "layer.json"
#: the sources a layer record depends on (the attention's, the GEMV's, the layer's own; stored as sha256 with it)
SOURCES = harness.with_includes(ATTENTION_SOURCES + ("gemv_v3.cu", "gemv_v3.py", "decode_layer.cu", "decode_layer.py",
                                                     "bench_layer.py"))


def _variants(text: str) -> list[str]:
    from .decode_layer import VARIANTS

    vals = [v for v in text.split(",") if v]
    bad = [v for v in vals if v not in VARIANTS]
    if bad or not vals:
        raise argparse.ArgumentTypeError(f"unknown variant(s) {bad or text!r}; valid: {', '.join(VARIANTS)}")
    return vals


def breakdown(layer, copy_gbps: float) -> list[dict]:
    """Each launch of a lab variant's step timed alone (a graph of 16), with the bytes it must move: where the time
    goes. The sum of the parts exceeds the whole step when consecutive kernels overlap (PDL)."""
    from .gemv_v3 import Launch as GemvLaunch

    rows = []
    for i, s in enumerate(layer.steps):
        t, _ = harness.graph_time_us([s], rep=10)
        if isinstance(s, GemvLaunch):
            name, nbytes = s.info["kernel"], s.info["weight_bytes"]
        elif hasattr(s, "info") and "num_splits" in getattr(s, "info", {}):
            name = s.info["kernel"] + {"kernel": " (splits merged in the kernel)"}.get(s.info.get("merge"), "")
            name += " + reduce" if s.reduce is not None else ""
            p = s.info["problem"]
            nbytes = 2 * layer.B * p.Hk * layer.context * p.D
        else:
            name = getattr(s.fn, "name", None) or f"small kernel {i}"
            nbytes = 0
        rows.append({"i": i, "kernel": str(name), "time_us": t, "bytes": nbytes,
                     "floor_us": nbytes / (copy_gbps * 1e3) if nbytes else None,
                     "fraction_of_copy": (nbytes / (copy_gbps * 1e3)) / t if nbytes else None})
    return rows


def run(bench: harness.Bench, batches, contexts, variants, config=None, budget_s=float("inf"), do_breakdown=True) -> None:
    import torch

    from . import decode_layer as DL
    from fp8lab.gpus import get_gpu

    t0 = time.time()
    copy = bench.ceilings["copy_gbps"]
    spec = get_gpu("H200").bandwidth_TBps * 1e3
    shape = DL.LayerShape.from_config(config or DL.CONFIG)
    n_layers = 32
    master = DL.make_master(shape)
    for B in batches:
        wcache: dict = {}
        for ctx in contexts:
            # weights (packed, and float64 for the references) carry over between contexts; KV caches do not
            wcache = {k: v for k, v in wcache.items() if not (isinstance(k, tuple) and k[0] == "cache")}
            if time.time() - t0 > budget_s:
                bench.notes.append({"point": f"B={B} ctx={ctx}", "error": "skipped: the run's time budget was spent"})
                print(f"  out of time budget: skipping B={B} ctx={ctx}", flush=True)
                continue
            point = f"B={B} ctx={ctx}"
            layers, timers = {}, {}
            # graphs of >= 16 steps for short steps; fewer (and fewer repetitions) where one step is ~1 ms
            slow = DL.ceiling_us(DL.layer_bytes("bf16", B, ctx, config or DL.CONFIG)["total"], copy)
            calls, rep = max(2, min(16, int(4000 / slow))), (20 if slow < 500 else 10)
            for v in variants:
                name = f"{v} {point}"
                try:
                    layer = DL.DecodeLayer(shape, master, v, B, ctx, max_context=ctx, weight_cache=wcache)
                except Exception as e:  # a variant that cannot be built is recorded, not a crash of the run
                    bench.validation[name] = {"passed": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
                    bench.notes.append({"kernel": name, "error": f"build failed: {type(e).__name__}: {str(e)[:300]}"})
                    print(f"  {name}: BUILD FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
                    continue
                ok = bench.validate(name, lambda layer=layer: layer.validate(),
                                    lambda r, layer=layer: (r[0], {"rel_rms": r[1], "tolerance": layer.tolerance}))
                if ok:
                    layers[v] = layer
                    timers[name] = lambda layer=layer: harness.graph_time_us([layer.step], min_calls=calls, rep=rep)
            if not timers:
                continue
            t = bench.compare(timers)
            base = t.get(f"bf16 {point}")
            for v, layer in layers.items():
                timing = t[f"{v} {point}"]
                lb = DL.layer_bytes(v, B, ctx, config or DL.CONFIG)
                flops = 2 * B * (shape.qkv_rows + shape.hidden + 3 * shape.intermediate) * shape.hidden \
                    + 4 * B * shape.heads * ctx * shape.head_dim
                c_us, s_us = DL.ceiling_us(lb["total"], copy), DL.ceiling_us(lb["total"], spec)
                extra = {"family": "layer", "variant": v, "batch": B, "context": ctx, "bytes_detail": lb,
                         "weight_bytes_stored": layer.weight_bytes(), "ceiling_us_copy": c_us, "ceiling_us_spec": s_us,
                         "of_ceiling": c_us / timing.median,
                         "tokens_per_s": B / (n_layers * timing.median * 1e-6),
                         "ceiling_tokens_per_s": B / (n_layers * c_us * 1e-6),
                         "intensity": flops / lb["total"], "kernels": DL.describe(v), "validation_rel_rms": bench.validation[f"{v} {point}"].get("rel_rms")}
                d = bench.record(harness.Result(f"layer_{v}", point, v, timing.median, bytes=int(lb["total"]), flops=flops,
                                                anchor="bf16" if v != "bf16" and base else "",
                                                anchor_time_us=base.median if (v != "bf16" and base) else None,
                                                copy_gbps=copy, extra=extra), timing)
                print(f"  {v:18s} {point:16s} {timing.median:8.1f} us [{timing.q1:.1f}, {timing.q3:.1f}]  "
                      f"ceiling {c_us:6.1f} us ({d['of_ceiling']:.2f})  "
                      + (f"{d['speedup']:.2f}x bf16" if d.get("speedup") else ""), flush=True)
            if do_breakdown and B == batches[0] and ctx == contexts[0]:
                for fam in ("fp8", "nvfp4"):
                    cands = [(t[f"{v} {point}"].median, v) for v in layers if v.startswith(fam)]
                    if cands:
                        v = min(cands)[1]
                        try:
                            bench.extra.setdefault("breakdown", {})[f"{v} {point}"] = breakdown(layers[v], copy)
                        except Exception as e:
                            bench.notes.append({"kernel": v, "error": f"breakdown failed: {e}"[:300]})
            del layers, timers
            torch.cuda.empty_cache()
        del wcache
        torch.cuda.empty_cache()


def goals_of(bench: harness.Bench) -> list[dict]:
    """The layer goals of a run, each missed one with its `why` from the run's per-kernel breakdown."""
    from .layer_report import layer_goals

    return layer_goals({"results": bench.results, "breakdown": bench.extra.get("breakdown")})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fp8lab.kernels.bench layer", description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=lambda t: harness.int_list(t, 1, 32, "batch"), default=[1, 8, 32])
    p.add_argument("--context", type=lambda t: harness.int_list(t, 1, 131072, "context"), default=[1024, 8192, 32768])
    p.add_argument("--variants", type=_variants, default=None, help="comma-separated (default: all)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--budget-s", type=float, default=float("inf"), help="skip remaining points after this many seconds")
    p.add_argument("--no-breakdown", action="store_true")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be >= 1")

    from . import decode_layer as DL
    cmd = " ".join(["python -m fp8lab.kernels.bench layer"] + list(sys.argv[1:] if argv is None else argv))
    bench = harness.Bench("layer", Path(args.out), cmd, rounds=args.rounds)
    bench.ceilings = {"copy_gbps": harness.copy_bandwidth_gbps()}
    print("ceilings:", bench.ceilings, flush=True)
    bench.extra.update(sources_sha256_12=harness.source_digest(SOURCES), shape=DL.LayerShape.from_config().__dict__,
                       variants={v: DL.describe(v) for v in DL.VARIANTS},
                       stage_rel_rms_tolerance=DL.STAGE_REL_RMS,
                       stage_tolerance_rule="STAGE_REL_RMS per stage; h and out (checked on the part their step adds "
                                            "to a bf16 sum) decode_layer.sum_tolerance: one bf16 ulp of the sum's "
                                            "rounding counted (validation[...]['tolerance'])")
    try:
        run(bench, args.batch, args.context, args.variants or list(DL.VARIANTS), budget_s=args.budget_s,
            do_breakdown=not args.no_breakdown)
    finally:
        bench.extra["goals"] = goals_of(bench)
        bench.write()
    harness.print_table(bench.results)
    for g in bench.extra["goals"]:
        m = g["measured"]
        print(f"GOAL {g['goal']}: measured {m if m is None else round(m, 3)} ({g.get('variant')}) -> "
              f"{'MET' if g['met'] else 'not met'}")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
