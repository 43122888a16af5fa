"""Does a stream-K tail pay where the last wave is ragged? (exploratory probe) At each shape: the package's default
('wgmma_tma': its own tile and split choice) against the same 128 x 256 configuration with the stream-K tail
(split = -1: the full waves whole, the tail's k-blocks cut into one equal range per pair) and, for reference, that
configuration unsplit; each validated against float64 on a poisoned output, then timed settled and interleaved with
_scaled_mm blockwise.

    python3 tools/gpu/streamk_probe.py 2048x3584x18944,2048x7168x7168
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

KERNEL = "wgmma_tma_e_ss_tmastore_split"  # the default's 128 x 256 configuration


def main() -> None:
    from fp8lab.kernels import gemm_prefill as P, gemm_w8a8 as G, harness

    shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1].split(",")]
    base = G.TMA_KERNELS[KERNEL]
    for M, N, K in shapes:
        sh = P._Shape(M, N, K, need_bf16=False)
        bench = harness.Bench("streamk_probe", "/dev/null", "streamk_probe", rounds=5)
        timers, meta = {}, {}
        P._add_anchors(bench, sh, timers, meta, kinds=("scaled_mm_blockwise",))
        mc = P._min_calls(sh.flops)
        for name, kw in (("default", {"kernel": "wgmma_tma"}), ("256 stream-K tail", {"kernel": KERNEL, "config": replace(base, split=-1)}),
                         ("256 whole", {"kernel": KERNEL, "config": replace(base, split=0)})):
            ls = [G.prepare(a, sh.sa, b, sh.sb, **kw) for a, b in zip(sh.A, sh.B)]
            harness.poison_(ls[0].out)
            if not bench.validate(name, ls[0], sh.check("wgmma_tma"), outputs=[ls[0].out]):
                print(f"  {name}: FAILED validation {bench.validation[name]}")
                continue
            print(f"  {name}: {ls[0].config.function} split {ls[0].split} units {ls[0].grid_units}", flush=True)
            timers[name] = lambda ls=ls: P._timed(ls, mc)
        res = bench.compare(timers, rounds=5)
        blk = res[f"scaled_mm_blockwise {sh.name}"].median
        print(f"{sh.name}")
        for n, r in res.items():
            print(f"  {n:40s} {r.median:8.1f} us [{r.q1:7.1f}, {r.q3:7.1f}]  x blk {blk / r.median:.3f}", flush=True)
        del sh


if __name__ == "__main__":
    main()
