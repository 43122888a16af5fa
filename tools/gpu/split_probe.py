"""Which split plans pay? (exploratory probe) The default TMA kernel at a shape, launched with forced (F, S) plans
(F whole tiles, the other T - F tiles in S pieces along K), each validated against float64 on a poisoned output,
then timed settled and interleaved with _scaled_mm blockwise.

    python3 tools/gpu/split_probe.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


KERNEL = "wgmma_tma_e_ss_tmastore_split"  # the default's configuration at these shapes (128 x 256 tiles)


def main() -> None:
    from fp8lab.kernels import gemm_prefill as P, gemm_w8a8 as G, harness

    plans = {
        (2048, 3584, 18944): [(112, 1), (66, 2), (66, 3), (66, 4), (66, 7), (0, 4), (0, 7), (46, 2)],
        (2048, 7168, 7168): [(224, 1), (198, 2), (198, 4), (198, 5), (132, 3)],
        (4096, 14336, 4096): [(896, 1), (858, 2), (858, 3), (858, 4)],
        (4096, 3584, 18944): [(224, 1), (198, 2), (198, 4), (132, 3)],
    }
    real = G.split_plan
    for (M, N, K), fs in plans.items():
        sh = P._Shape(M, N, K, need_bf16=False)
        bench = harness.Bench("split_probe", "/dev/null", "split_probe", rounds=5)
        timers, meta = {}, {}
        P._add_anchors(bench, sh, timers, meta, kinds=("scaled_mm_blockwise",))
        mc = P._min_calls(sh.flops)
        print(f"\n{sh.name}: default plan {real(*_tkp(G, M, N, K))}", flush=True)
        for F, S in fs:
            G.split_plan = lambda T, Pn, KB, most, min_kb=4, F=F, S=S: (F, S)
            try:
                # a named configuration: "wgmma_tma" would ask tma_default, which itself calls split_plan
                ls = [G.prepare(a, sh.sa, b, sh.sb, kernel=KERNEL) for a, b in zip(sh.A, sh.B)]
            finally:
                G.split_plan = real
            name = f"F{F}_S{S}"
            harness.poison_(ls[0].out)
            if not bench.validate(name, ls[0], sh.check("wgmma_tma"), outputs=[ls[0].out]):
                print(f"  {name}: FAILED validation {bench.validation[name]}")
                continue
            assert ls[0].split == (F, S) and ls[0].config.bn == 256, (ls[0].split, ls[0].config)
            timers[name] = lambda ls=ls: P._timed(ls, mc)
        res = bench.compare(timers, rounds=5)
        blk = res[f"scaled_mm_blockwise {sh.name}"].median
        for n, r in res.items():
            print(f"  {n:40s} {r.median:8.1f} us [{r.q1:7.1f}, {r.q3:7.1f}]  x blk {blk / r.median:.3f}", flush=True)
        del sh


def _tkp(G, M, N, K):
    cfg = G.tma_default(M, N, K)
    mu, nb = G.tile_counts(M, N, cfg)
    return mu * nb, 132 // cfg.cluster, -(-K // 128), cfg.split


if __name__ == "__main__":
    main()
