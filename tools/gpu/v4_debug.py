"""Which version-4 configs disagree with version 3 (same packing, same arithmetic: the bits must match)."""
import sys
import torch
from fp8lab.kernels import gemv_v3 as V3, gemv_fp8 as F8
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
            y3 = V3.prepare(x, p, config=V3.default_config(fmt, M))().clone()
            for C, D in ((2, 4), (2, 8), (4, 4)):
                for wpc, cps in ((8, 4), (4, 8), (8, 2), (1, 1), (4, 4), (2, 8)):
                    L = V3.prepare(x, p, config=(C, D, wpc, cps), version=4)
                    L.out.fill_(float("nan"))
                    y = L().clone()
                    bad = (y.view(torch.int16) != y3.view(torch.int16))
                    nb = int(bad.sum())
                    rows = bad.any(0).nonzero().flatten()
                    print(fmt, N, K, M, (C, D, wpc, cps), "grid", L.info["grid"], "warps", L.info["warps"], "smem", L.smem,
                          "BAD" if nb else "ok", nb, (rows[:8].tolist(), (rows // 16).unique()[:8].tolist()) if nb else "", flush=True)
