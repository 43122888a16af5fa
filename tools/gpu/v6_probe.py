"""Version 6 (split activations, FP8 wgmma on TMA-copied weights) against version 3 and the anchors.

    python tools/gpu/v6_probe.py [shapes NxK,...] [M,...] [configs] [out.json] [both|split]

configs: comma-separated "default" or MH:ST:G[:grid] (G = 0 one CTA per whole tile, no fix-up; G >= 1 stream-K over
G CTAs per SM; grid overrides the CTA count). FP8 per-channel weights in rotating sets (> 4x the L2). Through the
lab's harness.Bench: every kernel validated first on a poisoned output (version 6 against gemv_v6.reference with
tolerances.matmul("wgmma", K), version 3 against gemv_fp8.reference), then timed in interleaved rounds (CUDA graphs,
median and quartiles) with bf16 F.linear and `_scaled_mm` tensorwise (activations already FP8, M padded to 16: the
anchor a user would pick). Version 6 runs two ways per config: the split fused into the GEMV (one kernel, plain
launch) and gemv6_split + the PDL-launched GEMV (mode "split": the second way only, for a tuning sweep over many
configs); the split kernel alone is timed too, and the default's GEMV alone on a split made beforehand (what the call
costs where the kernel producing the activations writes them split). Napkin math first: the weight
bytes over the run's copy bandwidth. Results: family "v6" records (variant, N, K, M, time and quartiles,
vs_scaled_mm, of_copy) plus "checks" (validation and split error per point); gemm_report.v6_table reads them."""
import math
import sys

import torch

from fp8lab.kernels import gemv_fp8 as F8
from fp8lab.kernels import gemv_v3 as V3
from fp8lab.kernels import gemv_v6 as V6
from fp8lab.kernels import harness, tolerances

DEFAULT_SHAPES = "14336x4096,4096x14336,18944x3584,3584x18944,28672x8192"
shapes = [tuple(int(v) for v in s.split("x")) for s in (sys.argv[1] if len(sys.argv) > 1 else DEFAULT_SHAPES).split(",")]
Ms = [int(v) for v in (sys.argv[2] if len(sys.argv) > 2 else "1,16").split(",")]
configs = [c if c == "default" else tuple(int(v) for v in c.split(":"))
           for c in (sys.argv[3] if len(sys.argv) > 3 else "default,1:2:0,2:3:0").split(",")]
out_path = sys.argv[4] if len(sys.argv) > 4 else "/dev/null"
mode = sys.argv[5] if len(sys.argv) > 5 else "both"
if mode not in ("both", "split"):
    sys.exit(f"mode {mode!r}: expected 'both' or 'split'")

bench = harness.Bench("v6", out_path, "tools/gpu/v6_probe.py " + " ".join(sys.argv[1:]))
copy_gbps = harness.copy_bandwidth_gbps()
bench.ceilings["copy_gbps"] = copy_gbps
print(f"copy bandwidth (read + write) {copy_gbps:.0f} GB/s on {torch.cuda.get_device_name()}")
checks = []
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
        xm[:M] = x.float().clamp(-448, 448).to(torch.float8_e4m3fn)
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
        point = f" {N}x{K} M={M}"
        bench.trust("bf16 F.linear" + point, "anchor: timed for its speed, bf16 cuBLAS on the same shape")
        bench.trust("_scaled_mm tensorwise" + point, "anchor: timed for its speed, its FP8 activations made outside "
                    "the timing")

        def gate(name, ls, ref, terms, kernel, run=None):
            tol = tolerances.matmul(kernel, K)
            err = {}

            def check_fn(y):
                err["e"] = tol.worst(y.clone(), ref, terms)
                return err["e"] <= 1.0, {"err_over_tol": err["e"]}
            ok = bench.validate(name + point, run=run or ls[0], check=check_fn, outputs=[ls[0].out])
            check["err_over_tol"][name] = err.get("e")
            return ok

        ls3 = [V3.prepare(x, p, version=3) for p in packs]
        if gate("v3 default", ls3, ref3, terms3, "gemv_fp8"):
            calls["v3 default"] = ls3
        for cfg in configs:
            conf = None if cfg == "default" else cfg[:3]
            for fused in ((True, False) if mode == "both" else (False,)):
                try:
                    # fused: one kernel, launched plainly (no overlap with the previous call); split: gemv6_split,
                    # then the GEMV with PDL (the pair launched as one call would be)
                    ls = [V6.prepare(x, w, sch, config=conf, grid=cfg[3] if conf and len(cfg) > 3 else None,
                                     fused=fused, pdl=not fused) for w in w8]
                except ValueError as e:
                    print(f"  v6 {cfg}: {e}")
                    break
                name = ("v6 fused " if fused else "v6 split+gemv ") + (cfg if cfg == "default" else ":".join(map(str, cfg)))
                info = ls[0].info
                print(f"  {name}: {info['config']} grid {info['grid']} tiles {info['tiles']} units {info['units']} "
                      f"maxp {info['maxp']} smem {info['smem']}")
                if gate(name, ls, ref6, terms6, "wgmma"):
                    calls[name] = ls
                    if not fused and "v6 split only" not in calls:
                        calls["v6 split only"] = [l.split_only for l in ls]
                        want = V6.split_reference(x)   # bit for bit; padding rows (zero) are not poisoned
                        bench.validate("v6 split only" + point, run=lambda l=ls[0]: l.split_only(),
                                       check=lambda _, l=ls[0], w=want: (torch.equal(l.x8, w[0]) and torch.equal(
                                           l.sx.view(torch.int32), w[1].view(torch.int32)), {}),
                                       outputs=[ls[0].x8[:2 * M], ls[0].sx])
                    if not fused and cfg == "default":
                        # the GEMV alone, on a split made once beforehand: what the call costs where the kernel that
                        # produces the activations (RMSNorm, SiLU x mul) writes them split, so no split kernel runs
                        for l in ls:
                            l.split_only()
                        if gate("v6 gemv only", ls, ref6, terms6, "wgmma", run=lambda l=ls[0]: l.gemv_only(pdl=False)):
                            calls["v6 gemv only"] = [lambda l=l: l.gemv_only(pdl=False) for l in ls]
        timers = {k + point: (lambda fs=fs: harness.graph_time_us(fs, rep=30)) for k, fs in calls.items()}
        res = bench.compare(timers)
        sm = res["_scaled_mm tensorwise" + point]
        for k in calls:
            r = res[k + point]
            print(f"  {k:28s} {r.median:7.1f} us [{r.q1:.1f}, {r.q3:.1f}]  {wbytes / r.median / 1e6:.2f} TB/s "
                  f"{ideal / r.median:.3f} of copy  x{sm.median / r.median:.3f} of _scaled_mm")
            bench.record(harness.Result(kernel=k, shape=f"{N}x{K}", dtype="e4m3", time_us=r.median, bytes=wbytes,
                                        anchor="_scaled_mm tensorwise", anchor_time_us=sm.median, copy_gbps=copy_gbps,
                                        extra={"family": "v6", "variant": k, "N": N, "K": K, "M": M,
                                               "median_us": r.median, "q1_us": r.q1, "q3_us": r.q3,
                                               "vs_scaled_mm": sm.median / r.median, "of_copy": ideal / r.median}),
                         r)
bench.extra["checks"] = checks
bench.notes.append("version 6 (activations split into two E4M3 terms, FP8 wgmma on TMA-copied weights) against "
                   "version 3 and the anchors; every variant validated before it was timed")
if out_path != "/dev/null":
    print("wrote", bench.write())
