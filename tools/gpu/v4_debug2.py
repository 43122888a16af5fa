"""A version-4 config that fails validation: repeat it, locate the bad outputs (rows, tokens, split or whole groups)."""
import torch
from fp8lab.kernels import gemv_v3 as V3, gemv_fp8 as F8, tolerances
torch.manual_seed(0)
N, K = 18944, 3584
p = V3.pack_fp8(F8.random_codes(N, K), torch.rand(N, device="cuda") + 0.01)
for M in (16, 9, 8, 1):
    x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    ref, terms = V3.reference(x, p)
    tol = tolerances.matmul("gemv_fp8", K)
    for cfg in ((2, 4, 4, 8), (2, 4, 4, 6), (2, 4, 4, 5), (2, 4, 2, 8), (2, 4, 8, 4), (2, 8, 4, 8), (2, 4, 3, 8)):
        for rep in range(3):
            L = V3.prepare(x, p, config=cfg, version=4)
            L.out.fill_(float("nan"))
            y = L().clone()
            torch.cuda.synchronize()
            bad = ~((y.double() - ref).abs() <= tol.bound(ref, terms))
            nb = int(bad.sum())
            msg = ""
            if nb:
                rows = bad.any(0).nonzero().flatten()
                toks = bad.any(1).nonzero().flatten().tolist()
                nan = int(torch.isnan(y).sum())
                msg = f"rows {rows[:6].tolist()} groups {(rows // 16).unique()[:6].tolist()} tokens {toks[:16]} nan {nan}"
            print(M, cfg, "warps", L.info["warps"], "grid", L.info["grid"], "rep", rep, "bad", nb, msg, flush=True)
