"""What the version-3 probes (inflight_probe.py, stagger_probe.py) share: one config of version 3 prepared, checked and
added to a round of gemm_decode.v3_rounds (a diagnosis helper, not part of the package)."""
import contextlib

from fp8lab.kernels import _cuda, gemv_v3 as V3, harness


def add_config(bench, case, x, cfg, name, label, timers, meta, ref=None, patches=None, trust=None, **extra) -> bool:
    """Prepare version 3 at `cfg` for every weight set of `case` (a gemm_decode.V3Case), compiled from patched sources
    when `patches` (_cuda.patched_sources), then either validate the first launch against the float64 reference
    (`ref`: case.reference(), computed once per round) on poisoned outputs, or, for a copy that computes wrong numbers
    by design, record `trust` (why it is timed unvalidated); then add its timer and record meta to the round.
    False (and a note) where it does not build; False where it fails validation (bench.validate records that)."""
    try:
        with _cuda.patched_sources(patches) if patches else contextlib.nullcontext():
            launches = [V3.prepare(x, p, config=cfg) for p in case.packs]
            if patches:
                harness.poison_(launches[0].out)
                launches[0]()   # compiled from the patched copy while it exists
    except ValueError as e:
        bench.notes.append({"kernel": name, "error": str(e)[:300]})
        return False
    if trust:
        bench.trust(name, trust)
    elif not case.validate(bench, name, launches[0], ref):
        return False
    rec = case.extra(launches[0])
    rec.update(config=list(cfg), info={k: launches[0].info[k] for k in ("kernel", "grid", "warps", "whole_groups", "segments")},
               **extra)
    timers[name] = lambda ls=launches: harness.graph_time_us(ls, rep=30)
    meta[name] = (label, case.dtype, case.bytes, rec)
    return True
