"""What the decode-layer probes (pdl_room_probe.py, layer_attn_probe.py) share: one layer built, validated against its
float64 reference under a name (harness.Bench.validate, as bench_layer validates the recorded layers), and its timer.
A diagnosis helper, not part of the package."""
from fp8lab.kernels import harness


def validate(bench, name: str, layer) -> bool:
    """The layer's own check (DecodeLayer.validate: every stage against float64) recorded under `name`."""
    return bench.validate(name, lambda: layer.validate(),
                          lambda r: (r[0], {"rel_rms": r[1], "tolerance": layer.tolerance}))


def build(bench, name: str, make):
    """make() -> a DecodeLayer, validated under `name`; None (noted and printed) where it fails to build or validate."""
    try:
        layer = make()
    except Exception as e:
        bench.notes.append({"kernel": name, "error": f"build failed: {type(e).__name__}: {str(e)[:300]}"})
        print(f"  {name}: BUILD FAILED {e}", flush=True)
        return None
    if not validate(bench, name, layer):
        print(f"  {name}: VALIDATION FAILED", flush=True)
        return None
    return layer


def timer(step, min_calls: int = 16, rep: int = 20):
    """A timer of one call (a layer's step, or one of its steps) as a CUDA graph, for harness.Bench.compare."""
    return lambda: harness.graph_time_us([step], min_calls=min_calls, rep=rep)
