"""Does settling change the decode GEMV ratios? (exploratory probe) gemm_decode.bench_decode at a few shapes, run
twice: as recorded (no settle) and with every timer settled (harness.graph_time_us settle_ms), printing each
kernel's time and its ratio to _scaled_mm tensorwise.

    python3 tools/gpu/decode_settle_probe.py
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    from fp8lab.kernels import gemm_decode, harness

    orig = harness.graph_time_us
    for settle in (0.0, 60.0):
        harness.graph_time_us = functools.partial(orig, settle_ms=settle)
        bench = harness.Bench("decode_settle_probe", "/dev/null", "probe", rounds=5)
        try:
            gemm_decode.bench_decode(bench, set(), shapes=[(14336, 4096), (28672, 8192), (18944, 3584)], Ms=(1, 16),
                                     versions=(3,), pdl=False)
        finally:
            harness.graph_time_us = orig
        print(f"\n==== settle {settle:g} ms")
        for r in bench.results:
            x = r.get("speedup_vs_scaled_mm_tensorwise")
            print(f"  {r['kernel'][:44]:44s} {r['shape'][:24]:24s} {r['time_us']:8.2f} us  x tw {x if x is None else round(x, 3)}",
                  flush=True)


if __name__ == "__main__":
    main()
