"""Does a timing depend on what ran just before it? (exploratory probe, H100/H200)

The same kernel is timed under several names in one interleaved run, each placed after a different neighbour; then
the run is repeated with every timer called twice (the first call discarded: the kernel settles on its own clocks).

    python3 tools/gpu/order_probe.py [MxNxK ...]
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def clocks() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception as e:  # noqa: BLE001
        return str(e)


def main() -> None:
    from fp8lab.kernels import gemm_prefill as P, harness

    shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[1:]] or [(4096, 7168, 7168), (8192, 4096, 4096)]
    for M, N, K in shapes:
        sh = P._Shape(M, N, K)
        bench = harness.Bench("order_probe", "/dev/null", "order_probe", rounds=5)
        t, meta = {}, {}
        P._add_anchors(bench, sh, t, meta, kinds=("bf16_cublas", "scaled_mm_blockwise", "scaled_mm_tensorwise"))
        base = {}
        for k in ("wgmma_tma_e_ss_tmastore", "wgmma_tma_w192_ss_tmastore"):
            P._add_kernel(bench, sh, k, base, meta)
        A = base[f"w8a8_wgmma_tma_e_ss_tmastore {sh.name}"]
        slow = base[f"w8a8_wgmma_tma_w192_ss_tmastore {sh.name}"]
        blk, tw, bf = (t[f"{a} {sh.name}"] for a in ("scaled_mm_blockwise", "scaled_mm_tensorwise", "bf16_cublas"))
        order = {"blk": blk, "A_after_blk": A, "bf16": bf, "A_after_bf16": A, "w192": slow, "A_after_w192": A,
                 "tw": tw, "A_after_tw": A, "blk2_after_A": blk}
        for settle in (0, 1, 3):
            def wrap(f, s=settle):
                def g():
                    for _ in range(s):
                        f()
                    return f()
                return g
            t0 = time.time()
            res = harness.interleave({n: wrap(f) for n, f in order.items()}, rounds=5)
            print(f"\n{sh.name}  settle={settle} ({time.time() - t0:.0f} s)  clocks now: {clocks()}")
            ref = res["blk"].median
            for n, r in res.items():
                print(f"  {n:14s} {r.median:8.1f} us  [{r.q1:7.1f}, {r.q3:7.1f}]  blk/this {ref / r.median:.3f}", flush=True)
        del sh


if __name__ == "__main__":
    main()
