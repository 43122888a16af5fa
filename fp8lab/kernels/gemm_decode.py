"""Decode (M = 1..16 tokens): the W8A16 FP8 and W4A16 NVFP4 GEMVs, versions 1 and 2, each tuned over its compiled
configs, against cuBLAS bf16 and torch._scaled_mm (tensorwise, rowwise, blockwise), in interleaved rounds.

    records = bench_decode(bench, skip=set(), shapes=[(28672, 8192)], Ms=(1, 16))

Per (N, K) and M: every config of every kernel is validated against the float64 reference (outputs poisoned) before
any is timed; the configs are timed briefly to pick the best (tuning); then the tuned kernels and the anchors are
timed together in interleaved rounds (harness.Bench.compare) and recorded with the median and spread.
Timing: CUDA graphs of >= 16 calls over weight copies totalling >= 4x the L2 (harness.sets_for_l2): HBM, not L2.
"""
from __future__ import annotations

import math

from . import harness, tolerances
from .gemm_anchors import scaled_mm_calls
from .gemm_smoke import out_of_time

DECODE_SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192)]  # (N, K)
DECODE_M = (1, 4, 16)


def n_sets(bytes_per_set: int) -> int:
    return harness.sets_for_l2(bytes_per_set, factor=4, cap=32)


def v1_candidates(M: int, N: int, K: int) -> tuple[list, list]:
    """Version-1 configs (R, S, PF) worth trying, FP8 and NVFP4 (the default included)."""
    from . import gemv_fp8 as F8
    from . import gemv_nvfp4 as F4

    NT = 1 if M <= 8 else 2
    c8 = {(*F8.default_config(M, N, K), 0), (1, 4, 0), (1, 8, 0), (1, 16, 0), (2, 4, 0), (2, 8, 0), (4, 4, 0),
          (1, 4, 1), (1, 8, 1), (1, 16, 1), (2, 4, 1), (2, 8, 1)}
    c4 = {(*F8.default_config(M, N, K, kblock=256), 0), (1, 4, 0), (1, 8, 0), (1, 16, 0), (2, 2, 0), (2, 4, 0),
          (2, 8, 0), (1, 4, 1), (1, 8, 1), (2, 4, 1), (2, 8, 1)}
    c8 = sorted(c for c in c8 if F8.valid_config(c[0], c[1], NT, c[2]) and c[1] <= max(1, K // 128))
    c4 = sorted(c for c in c4 if F4.valid_config(min(c[0], 2), c[1], NT, c[2]) and c[1] <= max(1, K // 256))
    return c8, c4


def v2_candidates(M: int, N: int, K: int) -> tuple[list, list]:
    """Every compiled version-2 config (R, S, C, D) of this M with S in {2, 4, 8} (4 and 8 when N is small)."""
    from . import gemv_fp8 as F8
    from . import gemv_nvfp4 as F4

    NT = 1 if M <= 8 else 2
    widths = {2, 4, 8} if N >= 8192 else {4, 8}
    c8 = {F8.default_config_v2(M, N, K)} | {(R, S, C, D) for (R, nt, C, D) in F8.KERNELS_V2 if nt == NT for S in widths}
    c4 = {F4.default_config_v2(M, N, K)} | {(R, S, C, D) for (R, nt, C, D) in F4.KERNELS_V2 if nt == NT for S in widths}
    c8 = sorted(c for c in c8 if F8.valid_config_v2(c[0], c[1], NT, c[2], c[3], K) and c[1] * 64 * c[2] <= K)
    c4 = sorted(c for c in c4 if F4.valid_config_v2(c[0], c[1], NT, c[2], c[3], K) and c[1] * 128 * c[2] <= K)
    return c8, c4


def _tune(make, configs) -> tuple[tuple, dict]:
    """Time each (validated) config briefly; return (best config, {config: us})."""
    times = {}
    for cfg in configs:
        times[cfg] = harness.graph_time_us(make(cfg), rep=6)[0]
    return min(times, key=times.get), times


def bench_decode(bench: harness.Bench, skip: set, shapes=DECODE_SHAPES, Ms=DECODE_M, versions=(1, 2)) -> None:
    import torch

    from . import gemv_fp8 as F8
    from . import gemv_nvfp4 as F4

    copy_gbps = bench.ceilings.get("copy_gbps")
    for N, K in shapes:
        if out_of_time(f"decode N={N} K={K}", bench.notes):
            continue
        torch.manual_seed(N + K)
        w8 = [F8.random_codes(N, K) for _ in range(n_sets(N * K))]
        sch = torch.rand(N, device="cuda") * 1e-3 + 1e-4
        sbl = torch.rand(math.ceil(N / 128), K // 128, device="cuda") * 1e-3 + 1e-4
        w4 = [F4.random_nvfp4(N, K) for _ in range(n_sets(N * K // 2 + N * K // 16))]
        gs = torch.tensor(0.01, device="cuda")
        wbf = [(torch.randn(N, K, device="cuda") * 0.02).to(torch.bfloat16) for _ in range(n_sets(2 * N * K))]
        wd = {"channel": F8.dequant_weight(w8[0], sch), "block": F8.dequant_weight(w8[0], sbl)}  # float64, set 0
        wd4 = F4.dequant_weight(*w4[0], gs)
        for M in Ms:
            shape = f"M={M} N={N} K={K}"
            x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
            flops, act_bytes = 2 * M * N * K, 2 * M * K + 2 * M * N
            xq = x.float().clamp(-448, 448).to(torch.float8_e4m3fn)
            # ---- anchors: timed as the libraries give them (other weights, same shapes), so trusted, not validated
            timers, meta = {}, {}
            bench.trust(f"bf16_cublas {shape}", "library anchor (torch F.linear, bf16 weights of the same shape)")
            timers[f"bf16_cublas {shape}"] = lambda: harness.graph_time_us([lambda w=w: torch.nn.functional.linear(x, w) for w in wbf])
            meta[f"bf16_cublas {shape}"] = ("bf16_cublas (torch F.linear)", "bf16 x bf16", 2 * N * K + act_bytes, {})
            for kind in ("tensorwise", "rowwise", "blockwise"):
                name = f"scaled_mm_{kind} {shape}"
                try:
                    sa = torch.rand(M, K // 128, device="cuda") + 0.5
                    fns = [scaled_mm_calls(kind, xq, w.view(torch.float8_e4m3fn), sa, sbl if kind == "blockwise" else None)
                           for w in w8]
                except Exception as e:
                    bench.notes.append({"kernel": name, "error": str(e)[:500]})
                    continue
                bench.trust(name, "library anchor (torch._scaled_mm)")
                timers[name] = lambda fns=fns: harness.graph_time_us([f for f, _ in fns])
                meta[name] = (f"scaled_mm_{kind} (torch._scaled_mm)", "e4m3 x e4m3", N * K + M * K + 2 * M * N,
                              {"layout": fns[0][1]})
            # ---- ours: validate every config, tune, keep the best
            c8_1, c4_1 = v1_candidates(M, N, K)
            c8_2, c4_2 = v2_candidates(M, N, K)
            ours = []
            for v, suffix in ((1, ""), (2, "_v2")):
                if v not in versions:
                    continue
                for mode, scale in (("channel", sch), ("block", sbl)):
                    ours.append((f"gemv_fp8_{mode}{suffix}", "gemv_fp8", N * K + scale.numel() * 4,
                                 lambda cfg, scale=scale, v=v: [F8.prepare(x, w, scale, config=cfg, version=v) for w in w8],
                                 c8_1 if v == 1 else c8_2, wd[mode]))
                ours.append((f"gemv_nvfp4{suffix}", "gemv_nvfp4", N * K // 2 + N * K // 16,
                             lambda cfg, v=v: [F4.prepare(x, wp, sc, gs, config=cfg, version=v) for wp, sc in w4],
                             c4_1 if v == 1 else c4_2, wd4))
            for kname, smoke_name, wbytes, make, cands, wdeq in ours:
                if smoke_name in skip:
                    bench.notes.append({"kernel": kname, "shape": shape, "error": "failed its smoke test: not timed"})
                    continue
                ref, terms = x.double() @ wdeq.T, x.double().abs() @ wdeq.abs().T
                tol = tolerances.matmul(smoke_name, K)
                good = []
                for cfg in [None] + list(cands):  # every config validated before any is timed
                    launch = make(cfg)[0]
                    ok = bench.validate(f"{kname} {cfg} {shape}", launch, lambda y: (
                        (e := tol.worst(y, ref, terms)) <= 1.0, {"err_over_tol": e}), outputs=[launch.out])
                    if ok and cfg is not None:
                        good.append(cfg)
                if not good:
                    continue
                best, tuned = _tune(make, good)
                name = f"{kname} {shape}"
                bench.validation[name] = bench.validation[f"{kname} {best} {shape}"]
                timers[name] = lambda make=make, best=best: harness.graph_time_us(make(best), rep=30)
                meta[name] = (kname, "e2m1+e4m3/16 x bf16" if "nvfp4" in kname else "e4m3 x bf16", wbytes + act_bytes,
                              {"version": 2 if kname.endswith("_v2") else 1,
                               "config_RSCD" if kname.endswith("_v2") else "config_RSPF": list(best),
                               "tuned_us": {",".join(map(str, c)): t for c, t in tuned.items()}, "weight_bytes": wbytes})
            # ---- every contender of this shape in interleaved rounds
            t = bench.compare(timers)
            t_bf16 = t[f"bf16_cublas {shape}"].median
            for name, timing in t.items():
                label, dtype, nbytes, extra = meta[name]
                is_ours = label.startswith("gemv")
                if is_ours:
                    for a, ta in t.items():
                        if a.startswith("scaled_mm_"):
                            extra[f"speedup_vs_{a.split()[0]}"] = ta.median / timing.median
                bench.record(harness.Result(label, shape, dtype, timing.median, bytes=nbytes, flops=flops,
                                            anchor="bf16_cublas" if label != "bf16_cublas (torch F.linear)" else "",
                                            anchor_time_us=t_bf16 if label != "bf16_cublas (torch F.linear)" else None,
                                            copy_gbps=copy_gbps, extra={**extra, "M": M, "N": N, "K": K, "family": "decode"}),
                             timing)
                print(f"  {label:40s} {shape:24s} {timing.median:8.1f} us [{timing.q1:.1f}, {timing.q3:.1f}]", flush=True)
            del x, xq
        del w8, w4, wbf, wd, wd4
        torch.cuda.empty_cache()
