"""Version-4 configs against the float64 reference (tolerance) and against version 3 at the same (C, WPC, CPS) when
the two grids have the same warps (then the stream-K split, hence the summation order, is the same: the bits must
match)."""
import torch
from fp8lab.kernels import gemv_v3 as V3, gemv_fp8 as F8, tolerances
torch.manual_seed(0)
for fmt in ("fp8c", "nvfp4"):
    for (N, K) in ((18944, 3584), (400, 1000 if fmt != "nvfp4" else 1008)):
        if fmt == "nvfp4":
            wp = torch.randint(0, 256, (N, K // 2), dtype=torch.int32, device="cuda").to(torch.uint8)
            sc = torch.randint(1, 0x7F, (N, K // 16), dtype=torch.int32, device="cuda").to(torch.uint8)
            p = V3.pack_nvfp4(wp, sc, torch.tensor(0.37, device="cuda"))
        else:
            p = V3.pack_fp8(F8.random_codes(N, K), torch.rand(N, device="cuda") + 0.01)
        for M in (1, 16):
            x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
            ref, terms = V3.reference(x, p)
            tol = tolerances.matmul("gemv_fp8" if fmt != "nvfp4" else "gemv_nvfp4", K)
            for C, D in ((2, 4), (2, 8), (4, 4)):
                for wpc, cps in ((8, 4), (4, 8), (8, 2), (1, 1)):
                    L = V3.prepare(x, p, config=(C, D, wpc, cps), version=4)
                    L.out.fill_(float("nan"))
                    y = L().clone()
                    e = tol.worst(y, ref, terms)
                    same = ""
                    if (2, C, 1) and any(k[:4] == (fmt, 1, V3.n_tiles(M), C) for k in V3.KERNELS):
                        P = min(k[4] for k in V3.KERNELS if k[:4] == (fmt, 1, V3.n_tiles(M), C) and k[5] == "store" and not k[6])
                        L3 = V3.prepare(x, p, config=(C, P, wpc, cps), version=3)
                        if L3.info["warps"] == L.info["warps"]:
                            same = "bits==v3" if torch.equal(L3().view(torch.int16), y.view(torch.int16)) else "BITS!=v3"
                    print(fmt, N, K, M, (C, D, wpc, cps), "warps", L.info["warps"], "smem", L.smem,
                          f"err/tol {e:.3g}", "BAD" if not e <= 1 else "ok", same, flush=True)
