"""What the version-3 probes (inflight_probe.py, stagger_probe.py, segments_probe.py) share: the run itself (`run`: the
bench, its ceilings and sources digest, the rounds of gemm_decode.v3_rounds, the written file) and one config of
version 3 prepared, checked and added to a round (`add_config`). A diagnosis helper, not part of the package."""
import contextlib
import sys

from fp8lab.kernels import _cuda, gemm_anchors, gemm_decode as GD, gemm_report, gemm_smoke, gemv_v3 as V3, harness


def run(script: str, out: str, family: str, shapes, Ms, add_case, budget_s: float | None = None) -> int:
    """Time a probe: for each (shape, M) round of gemm_decode.v3_rounds (anchors `_scaled_mm` tensorwise and bf16
    cuBLAS) and each format's V3Case, add_case(bench, c, x, shape, timers, meta, ref) adds the probe's configs
    (add_config); the round is then timed interleaved and recorded as `family`. Writes `out` (with the sources digest
    notebook 07 checks against the tree) and prints the table. `budget_s`: a time budget (gemm_smoke) for the run."""
    bench = harness.Bench("gemm", out, f"python3 tools/gpu/{script} " + " ".join(sys.argv[1:]), rounds=5)
    bench.ceilings = gemm_anchors.measure_ceilings()
    bench.extra.update(sources_sha256_12=gemm_report.source_digest())
    if budget_s is not None:
        gemm_smoke.start_budget(budget_s)
    for shape, x, timers, meta, cases in GD.v3_rounds(bench, set(), shapes, Ms, ("fp8c", "nvfp4"), family):
        for c in cases.values():
            add_case(bench, c, x, shape, timers, meta, c.reference())
    bench.write()
    harness.print_table(bench.results)
    return 0


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
