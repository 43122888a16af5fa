"""Exploratory (not a recorded result): version 6 (work claimed at run time) against version 3 and the anchors."""
import statistics
import sys

import torch

from fp8lab.kernels import gemm_decode as GD
from fp8lab.kernels import gemv_fp8 as F8
from fp8lab.kernels import gemv_nvfp4 as F4
from fp8lab.kernels import gemv_v3 as V3
from fp8lab.kernels import harness, tolerances

SHAPES = [(14336, 4096), (4096, 14336), (18944, 3584), (28672, 8192)]
if len(sys.argv) > 1:
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1].split(",")]
MS = (1, 8, 16)
VARIANTS = [(2, 0), (4, 0), (8, 0), (2, 1)]   # (items per warp, whole groups)


def main():
    for N, K in SHAPES:
        w8, sch, _, w4, gs, wbf = GD.shape_weights(N, K)
        deq = {"fp8c": F8.dequant_weight(w8[0], sch), "nvfp4": F4.dequant_weight(*w4[0], gs)}
        packs = {"fp8c": {}, "nvfp4": {}}
        for M in MS:
            x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
            xq = torch.zeros(max(M, 16), K, device="cuda").to(torch.float8_e4m3fn)
            xq[:M] = x.float().clamp(-448, 448).to(torch.float8_e4m3fn)
            one = torch.ones((), device="cuda")
            timers = {"bf16": lambda: harness.graph_time_us([lambda w=w: torch.nn.functional.linear(x, w) for w in wbf], rep=30),
                      "smm_tw": lambda: harness.graph_time_us([lambda w=w: torch._scaled_mm(xq, w.view(torch.float8_e4m3fn).T, scale_a=one, scale_b=one,
                                                                                            out_dtype=torch.bfloat16) for w in w8], rep=30)}
            for fmt in ("fp8c", "nvfp4"):
                (cfg, R) = GD.v3_candidates(fmt, M, False)[0]
                if R not in packs[fmt]:
                    packs[fmt][R] = ([V3.pack_nvfp4(wp, sc, gs, R=R) for wp, sc in w4] if fmt == "nvfp4"
                                     else [V3.pack_fp8(w, sch, R=R) for w in w8])
                ps = packs[fmt][R]
                ref, terms = x.double() @ deq[fmt].T, x.double().abs() @ deq[fmt].abs().T
                tol = tolerances.matmul("gemv_nvfp4" if fmt == "nvfp4" else "gemv_fp8", K)
                cands = {f"{fmt} v3": (3, tuple(cfg))}
                for ipw, whole in VARIANTS:
                    cands[f"{fmt} v6 ipw{ipw}{' whole' if whole else ''}"] = (6, (*cfg[:4], ipw, whole))
                for name, (ver, c) in cands.items():
                    ls = [V3.prepare(x, p, config=c, version=ver) for p in ps]
                    ok = True
                    for rep in range(3):  # poisoned, three calls: the counter resets itself
                        harness.poison_(ls[0].out)
                        y = ls[0]()
                        e = tol.worst(y, ref, terms)
                        ok = ok and e <= 1.0
                    if not ok:
                        print(f"INVALID {name} M={M} N={N} K={K} err/tol {e:.3g}", flush=True)
                        continue
                    timers[name] = lambda ls=ls: harness.graph_time_us(ls, rep=30)
                    if ver == 6:
                        print(f"  {name}: items {ls[0].info['items']} warps {ls[0].info['warps']} smax {ls[0].info['smax']}")
            res = {k: [] for k in timers}
            for _ in range(3):   # interleaved rounds
                for k, f in timers.items():
                    res[k].append(f()[0])
            med = {k: statistics.median(v) for k, v in res.items()}
            print(f"\nM={M} N={N} K={K}")
            for k, v in res.items():
                extra = ""
                if k.startswith(("fp8c", "nvfp4")):
                    extra = f" x_smm {med['smm_tw'] / med[k]:.3f} x_bf16 {med['bf16'] / med[k]:.3f} x_v3 {med[k.split()[0] + ' v3'] / med[k]:.3f}"
                print(f"  {k:28s} {med[k]:8.2f} us  spread {(max(v) - min(v)) / med[k] * 100:4.1f} %{extra}", flush=True)
            del x, xq
        del w8, w4, wbf, packs, deq
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
