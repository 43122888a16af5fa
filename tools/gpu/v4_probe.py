"""Where version 4's time goes at a 68 MB decode shape (exploratory; prints, writes nothing).

Same weights (3 rotating sets, > 4x the L2), M = 1, FP8 per channel: version 3's default, version 4 at a tuned
stream-K grid, and grids whose warps own whole row groups (prepare(sms=...) sets the warp count; the 5th config element
is left to the default rule, so a grid's split is the one prepare picks -- the printed `smax` shows it), against the
anchors. The probe that led to the whole-group ranges; its numbers are exploratory (printed, never committed)."""
import math
import sys

import torch

from fp8lab.kernels import gemv_fp8 as F8
from fp8lab.kernels import gemv_v3 as V3
from fp8lab.kernels import harness

N, K = (int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "18944x3584").split("x"))
M = int(sys.argv[2]) if len(sys.argv) > 2 else 1
torch.manual_seed(0)
sets = max(3, math.ceil(4 * 50e6 / (N * K)))
w8 = [F8.random_codes(N, K) for _ in range(sets)]
sch = torch.rand(N, device="cuda") * 1e-3 + 1e-4
packs = [V3.pack_fp8(w, sch) for w in w8]
x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
G = packs[0].groups
wbf = [(torch.randn(N, K, device="cuda") * 0.02).to(torch.bfloat16) for _ in range(max(2, sets // 2))]
xq = x.float().to(torch.float8_e4m3fn)
one = torch.ones((), device="cuda")
xm = torch.zeros(16, K, device="cuda").to(torch.float8_e4m3fn)
timers = {
    "bf16 F.linear": lambda: harness.graph_time_us([lambda w=w: torch.nn.functional.linear(x, w) for w in wbf], rep=30),
    "_scaled_mm tensorwise (M->16)": lambda: harness.graph_time_us(
        [lambda w=w: torch._scaled_mm(xm, w.view(torch.float8_e4m3fn).t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
         for w in w8], rep=30),
}
cases = [("v3 default", 3, V3.default_config("fp8c", M), None),
         ("v4 (2,4,8,2) tuned", 4, (2, 4, 8, 2), None),
         ("v4 (2,4,8,1) Wt=G", 4, (2, 4, 8, 1), G // 8),
         ("v4 (2,8,8,1) Wt=G", 4, (2, 8, 8, 1), G // 8),
         ("v4 (2,4,4,1) Wt=G", 4, (2, 4, 4, 1), G // 4),
         ("v4 (2,8,4,1) Wt=G", 4, (2, 8, 4, 1), G // 4),
         ("v4 (2,4,8,1) Wt=2G", 4, (2, 4, 8, 1), G // 4),
         ("v4 (2,4,8,1) Wt=3G", 4, (2, 4, 8, 1), 3 * G // 8),
         ("v3 (2,3,4,1) Wt=G", 3, (2, 3, 4, 1), G // 4),
         ("v3 (2,3,8,1) Wt=2G", 3, (2, 3, 8, 1), G // 4)]
for name, ver, cfg, sms in cases:
    ls = [V3.prepare(x, p, config=cfg, version=ver, sms=sms) for p in packs]
    ref = V3.prepare(x, packs[0])().clone()
    ls[0].out.fill_(float("nan"))
    y = ls[0]().clone()
    err = float((y.float() - ref.float()).abs().max() / ref.float().abs().max())
    info = ls[0].info
    print(f"{name:24s} grid {info['grid']:5d} warps {info['warps']:5d} units {info['units']} smax {info['smax']} rel.err {err:.1e}")
    timers[name] = lambda ls=ls: harness.graph_time_us(ls, rep=30)
res = {k: [] for k in timers}
for _ in range(3):  # interleaved rounds
    for k, f in timers.items():
        res[k].append(f()[0])
fp8_bytes = N * K + 4 * N
for k, v in res.items():
    v = sorted(v)
    print(f"{k:32s} {v[1]:7.1f} us  [{v[0]:.1f}, {v[-1]:.1f}]  {fp8_bytes / v[1] / 1e6:.2f} TB/s of FP8 weight bytes")
