"""Run the M = 1 FP8 decode GEMVs a few times each, for Nsight Compute (a diagnosis, not a result).

    ncu --section SpeedOfLight --section MemoryWorkloadAnalysis ... python3 tools/gpu/ncu_decode.py 18944x3584

Per shape: gemv_v3 FP8 per-channel (default config, M = 1), torch._scaled_mm tensorwise (cuBLASLt, here at M = 16;
the bench times it at the decode M itself) and bf16 F.linear (M = 1), each called twice on the same inputs; ncu
picks launches by kernel-name regex.
"""
import sys

import torch

from fp8lab.kernels import gemv_fp8 as F8
from fp8lab.kernels import gemv_v3 as V3
from fp8lab.kernels.gemm_anchors import scaled_mm_calls

torch.manual_seed(0)
for shape in sys.argv[1].split(","):
    N, K = (int(v) for v in shape.split("x"))
    codes = F8.random_codes(N, K)
    scale = torch.rand(N, device="cuda") * 1e-2 + 1e-3
    x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
    launch = V3.prepare(x, V3.pack_fp8(codes, scale))
    xq = torch.zeros(16, K, device="cuda", dtype=torch.float8_e4m3fn)
    sm, _ = scaled_mm_calls("tensorwise", xq, codes.view(torch.float8_e4m3fn), None, None)
    w16 = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    for fn in (launch, sm, lambda: torch.nn.functional.linear(x, w16)):
        for _ in range(2):
            fn()
    torch.cuda.synchronize()
    print("ran", shape, launch.info, flush=True)
