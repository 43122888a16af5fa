"""Version 6 (split activations, FP8 wgmma on TMA-copied weights) against version 3 and the anchors (exploratory).

    python tools/gpu/v6_probe.py [shapes NxK,...] [M,...] [configs MH:ST,...] [out.json]

FP8 per-channel weights in rotating sets (> 4x the L2). Every launch is validated first on a poisoned output:
version 6 against gemv_v6.reference (tolerances.matmul("wgmma", K)), version 3 against gemv_fp8.reference; the split's
own distance from the exact W8A16 answer is printed (gemv_v6.split_error). Then bf16 F.linear, `_scaled_mm`
tensorwise (M padded to 16, activations already FP8: the anchor a user would pick), version 3 at its default, and
version 6 (split + GEMV, and the GEMV alone) at each config, interleaved (harness.interleave, CUDA graphs), median
and quartiles. Napkin math first: the weight bytes over the run's copy bandwidth. Exploratory: the numbers are
printed (and written to out.json with provenance when given), not a committed record until a recording run."""
import json
import math
import os
import sys

import torch

from fp8lab import provenance
from fp8lab.kernels import gemv_fp8 as F8
from fp8lab.kernels import gemv_v3 as V3
from fp8lab.kernels import gemv_v6 as V6
from fp8lab.kernels import harness, tolerances

DEFAULT_SHAPES = "14336x4096,4096x14336,18944x3584,3584x18944,28672x8192"
shapes = [tuple(int(v) for v in s.split("x")) for s in (sys.argv[1] if len(sys.argv) > 1 else DEFAULT_SHAPES).split(",")]
Ms = [int(v) for v in (sys.argv[2] if len(sys.argv) > 2 else "1,16").split(",")]
# MH:ST:G[:grid]: G = 0 one CTA per tile (no tile is cut, no fix-up), G >= 1 stream-K over G CTAs per SM; "default"
configs = [c if c == "default" else tuple(int(v) for v in c.split(":"))
           for c in (sys.argv[3] if len(sys.argv) > 3 else "default,1:4:0,2:4:1").split(",")]
out_path = sys.argv[4] if len(sys.argv) > 4 else None

git = provenance.git_state()  # the tree as the run starts
copy_gbps = harness.copy_bandwidth_gbps()
print(f"copy bandwidth (read + write) {copy_gbps:.0f} GB/s on {torch.cuda.get_device_name()}")
rows, checks = [], []
for N, K in shapes:
    torch.manual_seed(0)
    sets = max(3, math.ceil(4 * 50e6 / (N * K)))
    w8 = [F8.random_codes(N, K) for _ in range(sets)]
    sch = torch.rand(N, device="cuda") * 1e-3 + 1e-4
    packs = [V3.pack_fp8(w, sch) for w in w8]
    wbf = [(torch.randn(N, K, device="cuda") * 0.02).to(torch.bfloat16) for _ in range(max(2, sets // 2))]
    one = torch.ones((), device="cuda")
    wbytes = N * K
    ideal = wbytes / (copy_gbps * 1e3)
    print(f"\n{N}x{K}: {wbytes / 1e6:.1f} MB of FP8 weights, {sets} sets; napkin: {ideal:.1f} us at copy bandwidth")
    for M in Ms:
        x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        xm = torch.zeros(max(16, M), K, device="cuda").to(torch.float8_e4m3fn)
        wd = F8.dequant_weight(w8[0], sch)
        ref3, terms3 = F8.reference(x, w8[0], sch), x.double().abs() @ wd.abs().T
        ref6, terms6 = V6.reference(x, w8[0], sch), V6.split_values(x).abs() @ wd.abs().T
        se = V6.split_error(x, w8[0], sch)
        print(f" M={M}: split error max {se['max']:.2e} rms {se['rms']:.2e} of sum|x w|")
        check = {"N": N, "K": K, "M": M, "split_error": se, "err_over_tol": {}}
        checks.append(check)
        calls = {
            "bf16 F.linear": [lambda w=w: torch.nn.functional.linear(x, w) for w in wbf],
            "_scaled_mm tensorwise": [lambda w=w: torch._scaled_mm(xm, w.view(torch.float8_e4m3fn).t(), scale_a=one,
                                                                  scale_b=one, out_dtype=torch.bfloat16) for w in w8],
        }
        ls3 = [V3.prepare(x, p, version=3) for p in packs]
        ls3[0].out.fill_(float("nan"))
        e3 = tolerances.matmul("gemv_fp8", K).worst(ls3[0]().clone(), ref3, terms3)
        print(f"  v3 default: err/tol {e3:.2f}")
        check["err_over_tol"]["v3 default"] = e3
        if e3 <= 1.0:
            calls["v3 default"] = ls3
        for cfg in configs:
            conf = None if cfg == "default" else cfg[:3]
            for fused in (True, False):
                try:
                    # fused: one kernel, launched plainly (no overlap with the previous call); split: gemv6_split,
                    # then the GEMV with PDL (the pair launched as one call would be)
                    ls = [V6.prepare(x, w, sch, config=conf, grid=cfg[3] if conf and len(cfg) > 3 else None,
                                     fused=fused, pdl=not fused) for w in w8]
                except ValueError as e:
                    print(f"  v6 {cfg}: {e}")
                    break
                ls[0].out.fill_(float("nan"))
                e6 = tolerances.matmul("wgmma", K).worst(ls[0]().clone(), ref6, terms6)
                info = ls[0].info
                name = ("v6 fused " if fused else "v6 split+gemv ") + (cfg if cfg == "default" else ":".join(map(str, cfg)))
                check["err_over_tol"][name] = e6
                print(f"  {name}: {info['config']} grid {info['grid']} tiles {info['tiles']} units {info['units']} "
                      f"maxp {info['maxp']} smem {info['smem']} err/tol {e6:.2f}")
                if e6 <= 1.0:
                    calls[name] = ls
                    if not fused and "v6 split only" not in calls:
                        calls["v6 split only"] = [l.split_only for l in ls]
        res = harness.interleave({k: (lambda fs=fs: harness.graph_time_us(fs, rep=30)) for k, fs in calls.items()},
                                 rounds=5)
        sm = res["_scaled_mm tensorwise"].median
        for k, r in res.items():
            print(f"  {k:28s} {r.median:7.1f} us [{r.q1:.1f}, {r.q3:.1f}]  {wbytes / r.median / 1e6:.2f} TB/s "
                  f"{ideal / r.median:.3f} of copy  x{sm / r.median:.3f} of _scaled_mm")
            rows.append({"N": N, "K": K, "M": M, "variant": k, "median_us": r.median, "q1_us": r.q1, "q3_us": r.q3,
                         "vs_scaled_mm": sm / r.median, "of_copy": ideal / r.median})
if out_path:
    doc = {"provenance": provenance.provenance("tools/gpu/v6_probe.py " + " ".join(sys.argv[1:]), cuda=True, git=git),
           "copy_gbps": copy_gbps, "rows": rows, "checks": checks,
           "notes": "version 6 (activations split into two E4M3 terms, FP8 wgmma on TMA-copied weights) vs version 3 and "
                    "the anchors; every variant validated (err_over_tol <= 1) before it was timed"}
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, out_path)  # never a half-written file
