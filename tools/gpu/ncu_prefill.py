"""Run a few prefill GEMMs a handful of times each, for Nsight Compute (tools/gpu/ncu.sh profiles them).

    ncu ... python3 tools/gpu/ncu_prefill.py 4096x7168x7168 wgmma_tma_e,wgmma_tma_p,blockwise,tensorwise

Each named kernel (gemm_w8a8 TMA_KERNELS names, or the _scaled_mm anchors 'blockwise' / 'tensorwise') is called
twice on the same inputs; ncu picks launches by kernel-name regex.
"""
import sys

import torch

from fp8lab.kernels import gemm_w8a8 as G
from fp8lab.kernels import gemv_fp8 as F8
from fp8lab.kernels.gemm_anchors import scaled_mm_calls

M, N, K = (int(v) for v in sys.argv[1].split("x"))
names = sys.argv[2].split(",")
torch.manual_seed(0)
a, b = F8.random_codes(M, K), F8.random_codes(N, K)
sa = torch.rand(M, -(-K // 128), device="cuda") * 1e-2 + 1e-3
sb = torch.rand(-(-N // 128), -(-K // 128), device="cuda") * 1e-2 + 1e-3
for name in names:
    if name in ("blockwise", "tensorwise"):
        fn, _ = scaled_mm_calls(name, a.view(torch.float8_e4m3fn), b.view(torch.float8_e4m3fn), sa, sb)
    else:
        launch = G.prepare(a, sa, b, sb, kernel=name)
        fn = launch
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    print("ran", name, flush=True)
