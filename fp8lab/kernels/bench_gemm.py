"""Benchmarks for FP8/NVFP4 weights inside the matrix multiply: `python -m fp8lab.kernels.bench gemm`.

Writes outputs/kernels/gemm.json (harness schema) and gemm_sass.txt beside it. One device call, in this order:
  1. smoke: each kernel family validated on a small problem in a child process with a timeout (gemm_smoke);
  2. pytest tests/test_kernels_gemm.py (GPU tests included), its summary line recorded (gemm_smoke);
  3. ceilings measured in the same run: copy bandwidth, cuBLAS bf16 and torch._scaled_mm FP8 at 8192^3 (gemm_anchors);
  4. decode: M in --m x (N, K) in --shapes (gemm_decode), each kernel validated, tuned, then timed with the
     anchors in interleaved rounds (median and quartiles over --rounds);
  5. prefill: (M, N, K) in --prefill-shapes (default: M in 128..8192 x six (N, K)), version C's default and the
     previous best against the same anchors, and the climb (every rung) at 4096x7168x7168 (gemm_prefill);
  6. seed 001's accuracy gate on the kernel outputs, and the SASS opcode counts of what runs (fp8lab.kernels.sass);
  7. only when asked (--only gap, its own file): where the prefill gap goes, the kernel with its promotion left out
     and done twice, and with staggered consumers, beside the anchors (gemm_prefill.bench_gap); --only order: the
     same kernel timed after different neighbours, unsettled and settled (gemm_prefill.bench_order); --only
     decode_gap: where the decode GEMV's time goes, version 3 with its arithmetic cut away beside the same kernel
     and the anchors (gemm_decode.bench_decode_gap), with the SASS opcode counts of every variant; --only
     decode_timeline: version 3 with a clock read per warp at four moments of its call, beside the same kernel and
     the anchors, and one call's stamps read back (gemv_timeline.bench_decode_timeline).
What notebook 07 reads back is gemm_report (re-exported here).

    python -m fp8lab.kernels.bench gemm --only decode,sass --no-smoke --no-pytest \
        --shapes 28672x8192,4096x4096 --m 1,16 --out /tmp/gemm_decode.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import harness
# what notebook 07 reads back, re-exported so `bench_gemm.load(...)` etc. keep working
from .gemm_report import (DECODE_VERSIONS, DEFAULT_OUT, decode_roofline_points, decode_table, format_rows, gate_table,  # noqa: F401
                          goal_table, goals, load, plot_decode, plot_prefill, prefill_climb, prefill_gap,
                          prefill_goals, prefill_table, provenance_summary,
                          roofline_us, sass_table, source_digest)

SASS_KERNELS = {"gemm_w8a8.cu": ("w8a8_mma_fp8", "w8a8_mma_bf16"),
                "gemm_w8a8_wgmma.cu": ("w8a8_wgmma", "w8a8_wgmma_pipe", "w8a8_wgmma_256", "w8a8_wgmma_ws"),
                "gemm_w8a8_tma.cu": ("w8a8_tma_n128_w1_s6_c1_e0", "w8a8_tma_n128_w2_s6_c1_e0", "w8a8_tma_n128_w2_s6_c2_e0",
                                     "w8a8_tma_n256_w2_s4_c2_e0"),
                "gemv_fp8.cu": ("gemv_fp8_block_r1_nt1_pf0", "gemv_fp8_v2_block_r1_nt1_c2_d2"),
                "gemv_nvfp4.cu": ("gemv_nvfp4_r1_nt1_pf0", "gemv_nvfp4_v2_r1_nt1_c2_d2"),
                "gemv_v3.cu": ("gemv3_fp8c_r1_nt1_c2_p3_e0_n0", "gemv3_fp8b_r1_nt1_c2_p3_e0_n0", "gemv3_nvfp4_r1_nt1_c2_p3_e0_n0",
                               "gemv3_fp8c_r1_nt2_c2_p2_e0_n0", "gemv3_nvfp4_r1_nt2_c2_p2_e0_n0"),
                "gemv_v4.cu": ("gemv4_fp8c_r1_nt1_c2_d4_e0_n0", "gemv4_nvfp4_r1_nt1_c2_d4_e0_n0")}


def _dims(text: str, n: int) -> list[tuple]:
    """'28672x8192,4096x4096' -> [(28672, 8192), (4096, 4096)]; a clear error otherwise."""
    out = []
    for item in text.split(","):
        parts = item.lower().split("x")
        if len(parts) != n or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"{item!r}: expected {n} positive integers joined by 'x'")
        out.append(tuple(int(p) for p in parts))
    return out


def sass_counts(cc: int, path: Path) -> dict:
    """Opcode counts of the gemm kernels as this device runs them (sass.kernels: the loader's exact compile)."""
    from fp8lab import store

    from . import sass, sources

    counts, text = {}, []
    for f, names in SASS_KERNELS.items():
        if not sources.get(f).builds_for(cc):
            continue
        ks = sass.kernels(f, cc)
        for n in names:
            if n not in ks:     # a renamed kernel: say so in the listing, never lose the run's results over it
                counts[n] = {"missing": f"no kernel {n} in {f} for sm_{cc}"}
                text.append(f"== {n} ({f}): not in the module (renamed?)")
                continue
            s = ks[n].summary()
            counts[n] = {**{k: s[k] for k in ("total", "HMMA", "QMMA", "QGMMA", "F2FP", "HMUL2", "HFMA2", "PRMT", "LOP3")},
                         "mma_forms": sorted(s["matrix_forms"]), "f2fp_forms": s["f2fp_forms"], "loop": s["loop"]}
            lp = s["loop"]
            text.append(f"== {n} ({f}, {sources.get(f).target(cc)})\n   matrix instructions: "
                        f"{', '.join(sorted(s['matrix_forms'])) or 'none'}; F2FP {s['f2fp_forms']}" +
                        (f"\n   inner loop: {lp['instructions']} instructions, {lp['matrix']} matrix, "
                         + " ".join(f"{k}={v}" for k, v in list(lp["ops"].items())[:12]) if lp else ""))
    store.atomic_write_text(path, "SASS of the gemm kernels as the device runs them (python -m fp8lab.kernels.sass)\n\n"
                            + "\n".join(text) + "\n")
    return counts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fp8lab.kernels.bench gemm", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--skip", default="", help="comma-separated kernels not to run")
    p.add_argument("--no-smoke", action="store_true")
    p.add_argument("--no-pytest", action="store_true")
    p.add_argument("--only", default="decode,prefill,gate,sass")
    p.add_argument("--budget-s", type=float, default=float("inf"), help="skip remaining shapes after this many seconds")
    p.add_argument("--shapes", type=lambda t: _dims(t, 2), default=None, help="decode (N, K) shapes: NxK,NxK")
    p.add_argument("--m", type=lambda t: harness.int_list(t, 1, 16, "decode token counts"), default=None,
                   help="decode token counts: 1,8,16")
    p.add_argument("--prefill-shapes", type=lambda t: _dims(t, 3), default=None, help="prefill MxNxK,...")
    last = DECODE_VERSIONS[-1]
    p.add_argument("--versions", type=lambda t: harness.int_list(t, 1, last, "GEMV versions"), default=list(DECODE_VERSIONS),
                   help=f"GEMV versions to time (default all: {','.join(map(str, DECODE_VERSIONS))})")
    p.add_argument("--tune", type=lambda t: harness.int_list(t, 1, last, "versions to tune"), default=[],
                   help="versions whose every compiled config is validated and timed, e.g. 3 or 1,2,3 "
                        "(default none: each version at its default config, the recording run)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (median and quartiles over them)")
    args = p.parse_args(argv)

    from . import gemm_anchors, gemm_decode, gemm_prefill, gemm_smoke
    from ._cuda import device_cc

    gemm_smoke.start_budget(args.budget_s)
    out = Path(args.out)
    skip = {s for s in args.skip.split(",") if s}
    smoke = {} if args.no_smoke else gemm_smoke.smoke_all([n for n in gemm_smoke.SMOKE_ORDER if n not in skip])
    skip |= {k for k, v in smoke.items() if not v["ok"]}
    pytest_line = None
    if not args.no_pytest:
        pytest_line = gemm_smoke.run_pytest(out.with_name(out.stem + "_pytest.txt"), skip)
        print("pytest:", pytest_line, flush=True)
    only = set(args.only.split(","))
    cmd = " ".join(["python -m fp8lab.kernels.bench gemm"] + list(sys.argv[1:] if argv is None else argv))
    bench = harness.Bench("gemm", out, cmd, rounds=args.rounds)
    bench.ceilings = gemm_anchors.measure_ceilings()
    print("ceilings:", bench.ceilings, flush=True)
    bench.extra.update(smoke=smoke, pytest=pytest_line, sources_sha256_12=source_digest(), accuracy_gate=None,
                       sass_counts=None)

    def dump():
        bench.extra["goals"] = goals({"results": bench.results})
        bench.write()

    dump()
    if "sass" in only:  # cheap and independent of the timings: first, so a cut-short run still has it
        bench.extra["sass_counts"] = sass_counts(device_cc(), out.with_name(out.stem + "_sass.txt"))
        dump()
    if "decode" in only:
        kw = {"versions": tuple(args.versions), "tune": tuple(args.tune)}
        if args.shapes:
            kw["shapes"] = args.shapes
        if args.m:
            kw["Ms"] = tuple(args.m)
        gemm_decode.bench_decode(bench, skip, on_shape_done=dump, **kw)
        dump()
    if "decode_gap" in only:
        kw = {k: v for k, v in (("shapes", args.shapes), ("Ms", tuple(args.m) if args.m else None)) if v}
        bench.extra["decode_gap_sass"] = {
            fmt: {v: gemm_decode.decode_gap_sass(fmt, v, device_cc(), kw.get("Ms", gemm_decode.DECODE_GAP_M))
                  for v in gemm_decode.decode_gap_variants(fmt)}
            for fmt in gemm_decode.DECODE_GAP_FORMATS}
        dump()
        gemm_decode.bench_decode_gap(bench, skip, **kw)
        dump()
    if "decode_timeline" in only:
        from . import gemv_timeline

        kw = {k: v for k, v in (("shapes", args.shapes), ("Ms", tuple(args.m) if args.m else None)) if v}
        gemv_timeline.bench_decode_timeline(bench, skip, **kw)
        dump()
    if "prefill" in only:
        gemm_prefill.bench_prefill(bench, skip, **({"shapes": args.prefill_shapes} if args.prefill_shapes else {}))
        dump()
    if "gap" in only:
        gemm_prefill.bench_gap(bench, skip, **({"shapes": args.prefill_shapes} if args.prefill_shapes else {}))
        dump()
    if "order" in only:
        gemm_prefill.bench_order(bench, skip)
        dump()
    if "gate" in only and not gemm_smoke.out_of_time("accuracy gate", bench.notes):
        bench.extra["accuracy_gate"] = gemm_prefill.accuracy_gate_run(skip)
        dump()
    harness.print_table(bench.results)
    for g in bench.extra["goals"]:
        m = g["measured"]
        print(f"GOAL {g['goal']}: measured {m if m is None else round(m, 3)}"
              + (f" (worst shape {g['shape']}, {g['kernel']})" if g.get("shape") else "")
              + f" -> {'not measured in this run' if m is None else 'MET' if g['met'] else 'not met'}")
    print("wrote", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
