"""Exploratory (not a recorded result): where version 3's microseconds go, from %globaltimer stamps per warp.

Each warp (lane 0) stamps: t0 at entry, t1 once its first unit is multiplied (its first bytes have arrived), t2 when
its last unit is multiplied (before the fix-up / store), t3 at its end. One instrumented launch is read after warm-up.
"""
import sys

import numpy as np
import torch

from fp8lab.kernels import _cuda, harness
from fp8lab.kernels import gemm_decode as GD
from fp8lab.kernels import gemv_v3 as V3

INC = '#include "gemv_v3_common.cuh"  // widening, chunk MMAs, epilogues, stream-K fix-up, fused RMSNorm'
DEV = INC + r'''
__device__ unsigned long long v3_tl[16384 * 4];
__device__ unsigned int v3_tl_sm[16384];
__device__ __forceinline__ unsigned long long v3_now(float dep) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : "f"(dep) : "memory");
    return t;
}
'''
PATCHES = [
    (INC, DEV),
    ("    const int Wt = gridDim.x * wpc;\n",
     "    const int Wt = gridDim.x * wpc;\n    const unsigned long long tl0 = v3_now(0.f);\n"
     "    unsigned long long tl1 = 0, tl2 = 0;\n"),
    ("                v3_unit<FMT, R, NT, C, NORM>(acc, cur, scur, xrow, kk * C * CK, S, grp, kk, KB);\n",
     "                v3_unit<FMT, R, NT, C, NORM>(acc, cur, scur, xrow, kk * C * CK, S, grp, kk, KB);\n"
     "                if (u == u0) tl1 = v3_now(acc[0][0][0]);\n"
     "                if (u + 1 == u1) tl2 = v3_now(acc[0][0][0]);\n"),
    ("                v3_after_unit<FMT, R, NT, EPI>(o, acc, grp, kk, u, u0, u1, KU, U, Wt, wg, lane, WS, CNT, smax);\n"
     "            }\n        }\n    }\n",
     "                v3_after_unit<FMT, R, NT, EPI>(o, acc, grp, kk, u, u0, u1, KU, U, Wt, wg, lane, WS, CNT, smax);\n"
     "            }\n        }\n    }\n"
     "    const unsigned long long tl3 = v3_now(acc[0][0][0]);\n"
     "    if (lane == 0) { v3_tl[wg * 4] = tl0; v3_tl[wg * 4 + 1] = tl1; v3_tl[wg * 4 + 2] = tl2; v3_tl[wg * 4 + 3] = tl3;\n"
     "        unsigned int sm; asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(sm)); v3_tl_sm[wg] = sm; }\n"),
]


def patches(fmt):
    p = GD.decode_gap_patches("full", fmt)
    p.setdefault("gemv_v3.cu", []).extend(PATCHES)
    return p


def pct(a, q):
    return float(np.percentile(a, q)) / 1e3


def main():
    shapes = [(14336, 4096), (4096, 14336), (28672, 8192)]
    for N, K in shapes:
        w8, sch, _, w4, gs, wbf = GD.shape_weights(N, K)
        for M in (1, 16):
            x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
            xq = x.float().clamp(-448, 448).to(torch.float8_e4m3fn)
            xs = torch.ones((), device="cuda")
            res = {}
            xpad = torch.zeros(max(M, 16), K, device="cuda").to(torch.float8_e4m3fn)
            xpad[:M] = xq
            sm_calls = [lambda w=w: torch._scaled_mm(xpad, w.T, scale_a=xs, scale_b=xs, out_dtype=torch.bfloat16)
                        for w in w8]
            try:
                res["scaled_mm"] = harness.graph_time_us(sm_calls, rep=30)[0]
            except Exception as e:  # noqa: BLE001
                print("scaled_mm failed", e)
            for fmt in ("fp8c", "nvfp4"):
                cfg, R = GD.v3_candidates(fmt, M, False)[0]
                packs = ([V3.pack_nvfp4(wp, sc, gs, R=R) for wp, sc in w4] if fmt == "nvfp4"
                         else [V3.pack_fp8(w, sch, R=R) for w in w8])
                plain = [V3.prepare(x, p, config=cfg) for p in packs]
                t_plain = harness.graph_time_us(plain, rep=30)[0]
                with _cuda.patched_sources(patches(fmt)):
                    inst = [V3.prepare(x, p, config=cfg) for p in packs]
                    inst[0]()
                    mod = _cuda.load_module("gemv_v3.cu")
                    import cupy as cp
                    tl_ptr = mod.get_global("v3_tl")
                    sm_ptr = mod.get_global("v3_tl_sm")
                t_inst = harness.graph_time_us(inst, rep=30)[0]
                plain[0](); inst[0](); torch.cuda.synchronize()
                ok = torch.equal(inst[0].out, plain[0].out)
                for _ in range(3):
                    inst[1 % len(inst)]()
                torch.cuda.synchronize()
                W = inst[0].info["warps"]
                tl = cp.ndarray((16384 * 4,), dtype=cp.uint64, memptr=tl_ptr).get()[: W * 4].reshape(W, 4).astype(np.int64)
                smid = cp.ndarray((16384,), dtype=cp.uint32, memptr=sm_ptr).get()[:W]
                busy = tl[:, 0] > 0
                tl = tl[busy]
                t0 = tl[:, 0].min()
                rel = tl - t0
                diffs = np.diff(np.unique(tl.ravel()))
                span = (tl[:, 3].max() - t0) / 1e3
                print(f"\n{fmt} M={M} N={N} K={K} cfg={cfg} R={R} info={ {k: inst[0].info[k] for k in ('grid','warps','units','whole_groups')} }")
                print(f"  graph time plain {t_plain:.2f} us, instrumented {t_inst:.2f} us, scaled_mm {res.get('scaled_mm', float('nan')):.2f} us; same output {ok}")
                print(f"  timer resolution (min positive step) {diffs[diffs > 0].min() if (diffs > 0).any() else 0} ns; warps stamped {busy.sum()} of {W}; SMs {len(np.unique(smid[busy]))}")
                print(f"  span (first start -> last end) {span:.2f} us")
                for name, a in (("start t0", rel[:, 0]), ("first unit done t1-t0", tl[:, 1] - tl[:, 0]),
                                ("stream t2-t1", tl[:, 2] - tl[:, 1]), ("finish t3-t2", tl[:, 3] - tl[:, 2]),
                                ("end t3", rel[:, 3])):
                    print(f"  {name:24s} p0 {pct(a,0):7.2f} p10 {pct(a,10):7.2f} p50 {pct(a,50):7.2f} p90 {pct(a,90):7.2f} p100 {pct(a,100):7.2f} us")
                # bytes streamed per us in the middle: how many warps are active over time
                grid_t = np.linspace(0, span * 1e3, 41)
                act = [int(((rel[:, 0] <= g) & (rel[:, 3] > g)).sum()) for g in grid_t]
                print("  warps active over time (41 points):", act)
                del inst, plain, packs
            del x, xq
        del w8, w4, wbf
        torch.cuda.empty_cache()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
