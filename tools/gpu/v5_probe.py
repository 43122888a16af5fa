"""Version 5 against versions 3 and 4 and the anchors at decode shapes (exploratory; prints, writes nothing).

    python tools/gpu/v5_probe.py 18944x3584,3584x18944,28672x8192 1,16 [fp8c|nvfp4]

Same weights (rotating sets, > 4x the L2), FP8 per channel (or NVFP4): versions 3 and 4 at their defaults, version 5 at
a few (C, D, WPC, CPS, whole) configs, bf16 F.linear and `_scaled_mm` tensorwise (M padded to 16), interleaved rounds
through harness.interleave; every launch validated on a poisoned output first. Its numbers are exploratory (printed,
never committed): the recording run is `python -m fp8lab.kernels.bench gemm`."""
import math
import sys

import torch

from fp8lab.kernels import gemv_fp8 as F8
from fp8lab.kernels import gemv_v3 as V3
from fp8lab.kernels import harness, tolerances

shapes = [tuple(int(v) for v in s.split("x")) for s in (sys.argv[1] if len(sys.argv) > 1 else "18944x3584").split(",")]
Ms = [int(v) for v in (sys.argv[2] if len(sys.argv) > 2 else "1").split(",")]
fmt = sys.argv[3] if len(sys.argv) > 3 else "fp8c"
V5 = [(4, 3, 8, 2, 0), (4, 2, 8, 2, 0), (4, 2, 8, 3, 0), (4, 3, 4, 4, 0), (2, 4, 8, 3, 0), (2, 6, 8, 2, 0),
      (2, 4, 4, 6, 0), (4, 3, 8, 2, 1), (4, 3, 4, 4, 1)]
for N, K in shapes:
    torch.manual_seed(0)
    sets = max(3, math.ceil(4 * 50e6 / (N * K)))
    if fmt == "nvfp4":
        packs = [V3.pack_nvfp4(torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device="cuda"),
                               torch.randint(0x30, 0x40, (N, K // 16), dtype=torch.uint8, device="cuda"),
                               torch.tensor(0.01, device="cuda")) for _ in range(sets)]
    else:
        sch = torch.rand(N, device="cuda") * 1e-3 + 1e-4
        packs = [V3.pack_fp8(F8.random_codes(N, K), sch) for _ in range(sets)]
    w8 = [F8.random_codes(N, K) for _ in range(sets)]
    wbf = [(torch.randn(N, K, device="cuda") * 0.02).to(torch.bfloat16) for _ in range(max(2, sets // 2))]
    one = torch.ones((), device="cuda")
    wd = V3.dequant(packs[0]).float()
    for M in Ms:
        x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        xm = torch.zeros(max(16, M), K, device="cuda").to(torch.float8_e4m3fn)
        ref, terms = x.double() @ wd.double().T, x.double().abs() @ wd.double().abs().T
        tol = tolerances.matmul("gemv_fp8" if fmt != "nvfp4" else "gemv_nvfp4", K)
        calls = {
            "bf16 F.linear": [lambda w=w: torch.nn.functional.linear(x, w) for w in wbf],
            "_scaled_mm tensorwise": [lambda w=w: torch._scaled_mm(xm, w.view(torch.float8_e4m3fn).t(), scale_a=one,
                                                                  scale_b=one, out_dtype=torch.bfloat16) for w in w8],
        }
        cases = [("v3 default", 3, None), ("v4 default", 4, None)] + [(f"v5 {c}", 5, c) for c in V5
                                                                      if M <= 8 or c[4] == 0]
        for name, ver, cfg in cases:
            try:
                ls = [V3.prepare(x, p, config=cfg, version=ver) for p in packs]
            except ValueError as e:
                print(f"{name}: {e}")
                continue
            ls[0].out.fill_(float("nan"))
            e = tol.worst(ls[0]().clone(), ref, terms)
            info = ls[0].info
            print(f"  {name:26s} grid {info['grid']:4d} warps {info['warps']:5d} smem {info['smem']:6d} "
                  f"smax {info['smax']:3d} err/tol {e:.2f}")
            if e <= 1.0:
                calls[name] = ls
        res = harness.interleave({k: (lambda fs=fs: harness.graph_time_us(fs, rep=30)) for k, fs in calls.items()},
                                 rounds=5)
        wbytes = packs[0].weight_bytes()
        sm = res["_scaled_mm tensorwise"].median
        print(f"{N}x{K} M={M} {fmt}: {wbytes / 1e6:.1f} MB")
        for k, r in res.items():
            print(f"  {k:28s} {r.median:7.1f} us [{r.q1:.1f}, {r.q3:.1f}]  {wbytes / r.median / 1e6:.2f} TB/s"
                  f"  x{sm / r.median:.3f} of _scaled_mm")
