"""Prefill (M = 4096 tokens): the W8A8 block-scaled GEMM kernels (wgmma and mma.sync) against cuBLAS bf16 and
torch._scaled_mm (tensorwise, rowwise, blockwise) in interleaved rounds; and seed 001's accuracy gate.

    bench_prefill(bench, skip=set(), shapes=[(4096, 7168, 7168)])
    accuracy_gate_run(skip) -> [{"kind": "random", "shape": ..., "wgmma_ws": {"cosine": ..., "rel_rms": ...}, ...}]

Each kernel is validated against the float64 reference (output poisoned, tolerances.matmul at this K) before it
is timed; _scaled_mm blockwise is checked against the same reference (its layout must compute OUR arithmetic).
"""
from __future__ import annotations

from . import harness, tolerances
from .gemm_anchors import scaled_mm_calls
from .gemm_smoke import out_of_time

PREFILL_SHAPES = [(4096, 4096, 4096), (4096, 7168, 7168), (4096, 14336, 14336)]  # (M, N, K)
GEMM_KERNELS = ("wgmma_ws", "wgmma_256", "wgmma_pipe", "wgmma", "mma_bf16", "mma_fp8")


def bench_prefill(bench: harness.Bench, skip: set, shapes=PREFILL_SHAPES) -> None:
    import torch

    from . import gemm_w8a8 as G
    from . import gemv_fp8 as F8

    copy_gbps = bench.ceilings.get("copy_gbps")
    for M, N, K in shapes:
        shape = f"M={M} N={N} K={K}"
        if out_of_time(shape, bench.notes):
            continue
        torch.manual_seed(M + N + K)
        flops = 2 * M * N * K
        nset = min(4, harness.sets_for_l2(M * K + N * K, factor=4, cap=32))
        A = [F8.random_codes(M, K) for _ in range(nset)]
        B = [F8.random_codes(N, K) for _ in range(nset)]
        sa = torch.rand(M, K // 128, device="cuda") * 1e-2 + 1e-3
        sb = torch.rand(N // 128, K // 128, device="cuda") * 1e-2 + 1e-3
        fp8_bytes = M * K + N * K + 2 * M * N + 4 * (sa.numel() + sb.numel())
        Abf = [torch.randn(M, K, device="cuda").to(torch.bfloat16) for _ in range(nset)]
        Bbf = [(torch.randn(N, K, device="cuda") * 0.02).to(torch.bfloat16) for _ in range(nset)]
        ref = G.reference(A[0], sa, B[0], sb)
        ad = F8.decode_e4m3(A[0]) * sa.double().repeat_interleave(128, 1)
        bd = F8.decode_e4m3(B[0]) * sb.double().repeat_interleave(128, 0).repeat_interleave(128, 1)
        terms = ad.abs() @ bd.abs().T
        del ad, bd
        timers, meta = {}, {}
        name = f"bf16_cublas {shape}"
        bench.trust(name, "library anchor (torch matmul, bf16 operands of the same shape)")
        timers[name] = lambda: harness.graph_time_us([lambda a=a, b=b: a @ b.t() for a, b in zip(Abf, Bbf)], min_calls=4, rep=10)
        meta[name] = ("bf16_cublas (torch matmul)", "bf16 x bf16", 2 * (M * K + N * K + M * N), {})
        for kind in ("tensorwise", "rowwise", "blockwise"):
            name = f"scaled_mm_{kind} {shape}"
            try:
                fns = [scaled_mm_calls(kind, a.view(torch.float8_e4m3fn), b.view(torch.float8_e4m3fn), sa, sb) for a, b in zip(A, B)]
            except Exception as e:
                bench.notes.append({"kernel": name, "error": str(e)[:500]})
                continue
            extra = {"layout": fns[0][1]}
            if kind == "blockwise":  # the layout we found must compute OUR arithmetic
                bench.validate(name, fns[0][0], lambda y: (
                    (e := tolerances.matmul("mma_bf16", K).worst(y, ref, terms)) <= 1.0, {"err_over_tol": e}))
            else:
                bench.trust(name, "library anchor (unit scales: times the FP8 matmul, not our scaling)")
            timers[name] = lambda fns=fns: harness.graph_time_us([f for f, _ in fns], min_calls=4, rep=10)
            meta[name] = (f"scaled_mm_{kind} (torch._scaled_mm)", "e4m3 x e4m3", fp8_bytes, extra)
        for kernel in GEMM_KERNELS:
            name = f"w8a8_{kernel} {shape}"
            if kernel in skip:
                bench.notes.append({"kernel": name, "error": "failed its smoke test: not timed"})
                continue
            tol = tolerances.matmul(kernel, K)
            launch = G.prepare(A[0], sa, B[0], sb, kernel=kernel)
            if not bench.validate(name, launch, lambda y: ((e := tol.worst(y, ref, terms)) <= 1.0, {"err_over_tol": e}),
                                  outputs=[launch.out]):
                continue
            timers[name] = lambda kernel=kernel: harness.graph_time_us(
                [G.prepare(a, sa, b, sb, kernel=kernel) for a, b in zip(A, B)], min_calls=4, rep=10)
            meta[name] = (f"w8a8_{kernel}", "e4m3 x e4m3 (1x128, 128x128)", fp8_bytes,
                          {"validated_err_over_tol": bench.validation[name].get("err_over_tol")})
        t = bench.compare({n: f for n, f in timers.items() if bench.validation.get(n, {}).get("passed")})
        t_bf16 = t[f"bf16_cublas {shape}"].median
        for name, timing in t.items():
            label, dtype, nbytes, extra = meta[name]
            if label.startswith("w8a8"):
                for a, ta in t.items():
                    if a.startswith("scaled_mm_"):
                        extra[f"speedup_vs_{a.split()[0]}"] = ta.median / timing.median
            anchor = label != "bf16_cublas (torch matmul)"
            bench.record(harness.Result(label, shape, dtype, timing.median, bytes=nbytes, flops=flops,
                                        anchor="bf16_cublas" if anchor else "", anchor_time_us=t_bf16 if anchor else None,
                                        copy_gbps=copy_gbps, extra={**extra, "M": M, "N": N, "K": K, "family": "prefill"}),
                         timing)
            print(f"  {label:36s} {shape:24s} {timing.median:8.1f} us  {flops / timing.median / 1e6:7.1f} TFLOP/s", flush=True)
        del A, B, Abf, Bbf, ref, terms
        torch.cuda.empty_cache()


def accuracy_gate_run(skip: set, M=1024, N=7168, K=7168) -> list:
    """Seed 001's gate on the kernels' outputs (W8A8 vs W8A16) at a realistic size, both input kinds."""
    import torch

    from . import gemm_w8a8 as G
    from . import reference as R

    out = []
    for kind in ("random", "outliers"):
        x, w = G.test_inputs(M, N, K, kind=kind, seed=11)
        a, sa = R.quantize_group(x, 128)
        b, sb = R.quantize_block(w, 128)
        ref16 = G.w8a16_reference(x, b, sb)
        row = {"kind": kind, "shape": f"M={M} N={N} K={K}", "math_w8a8_fp64": G.accuracy_gate(G.reference(a, sa, b, sb), ref16)}
        for kernel in GEMM_KERNELS:
            if kernel not in skip:
                row[kernel] = G.accuracy_gate(G.gemm_w8a8(a, sa, b, sb, kernel=kernel), ref16)
        out.append(row)
        print("  gate", kind, {k: (round(v["cosine"], 6), round(v["rel_rms"], 5)) for k, v in row.items() if isinstance(v, dict)},
              flush=True)
        del x, w, a, b, ref16
        torch.cuda.empty_cache()
    return out
