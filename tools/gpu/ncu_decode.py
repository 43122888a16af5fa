"""Run the M = 1 FP8 decode GEMVs a few times each, for Nsight Compute (a diagnosis, not a result).

    ncu --section SpeedOfLight --section MemoryWorkloadAnalysis ... python3 tools/gpu/ncu_decode.py 18944x3584 [M] [VERSIONS]

VERSIONS: the packed GEMV versions to run, each `v` (its default config) or `v:C.P.WPC.CPS` (e.g. 3,5:4.2.8.3); default 3.

Per shape: the packed GEMVs FP8 per-channel (M tokens, default 1), torch._scaled_mm tensorwise (cuBLASLt, here at M = 16;
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
    M = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    packed = V3.pack_fp8(codes, scale)
    launches = []
    for spec in (sys.argv[3] if len(sys.argv) > 3 else "3").split(","):
        ver, _, cfg = spec.partition(":")
        launches.append(V3.prepare(x, packed, version=int(ver), config=tuple(int(c) for c in cfg.split(".")) if cfg else None))
    xq = torch.zeros(16, K, device="cuda", dtype=torch.float8_e4m3fn)
    sm, _ = scaled_mm_calls("tensorwise", xq, codes.view(torch.float8_e4m3fn), None, None)
    w16 = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    for fn in (*launches, sm, lambda: torch.nn.functional.linear(x, w16)):
        for _ in range(2):
            fn()
    torch.cuda.synchronize()
    print("ran", shape, [launch.info for launch in launches], flush=True)
