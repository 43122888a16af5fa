"""Benchmarks for FP8/NVFP4 weights inside the matrix multiply: `python -m fp8lab.kernels.bench gemm`
(or, standing alone, `python -m fp8lab.kernels.bench_gemm`). Writes outputs/kernels/gemm.json (harness schema).

One device call does everything, in this order:
  1. smoke: each kernel validated on a small problem in a child process with a timeout (a hung or
     faulting kernel cannot take the run down; failures are skipped below and recorded);
  2. pytest tests/test_kernels_gemm.py (GPU tests included), its summary line recorded;
  3. ceilings measured in the same run: copy bandwidth, cuBLAS bf16 and torch._scaled_mm FP8 at 8192^3;
  4. decode: M in {1, 4, 16} x (N, K) in DECODE_SHAPES -- our W8A16 (channel and 128x128 scales) and
     W4A16 NVFP4 GEMVs, versions 1 and 2 (each tuned over its configs; version 2's names end in _v2),
     against cuBLAS bf16 and torch._scaled_mm (tensorwise, rowwise, blockwise);
  5. prefill: M = 4096 x (N = K) in {4096, 7168, 14336} -- our four W8A8 kernels against the same anchors;
  6. the accuracy gate of seed 001 on the kernel outputs, and SASS opcode counts (nvcc + cuobjdump).
Every kernel is checked against the float64 reference on the benchmarked shape before it is timed.

A quick decode-only run (what the kernel work used):
    python -m fp8lab.kernels.bench gemm --only decode,sass --no-smoke --no-pytest \
        --decode-shapes 28672x8192,4096x4096 --decode-m 1,16 --out /tmp/gemm_decode.json

Timing: a CUDA graph holds >= 16 calls cycling over weight copies whose total is >= 4x the L2 (the
harness' sets_for_l2), so the numbers are HBM, not L2, and not Python launch overhead; the median of
the graph replays (harness.time_us) divided by the calls in the graph.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import harness

KDIR = Path(__file__).resolve().parent
DEFAULT_OUT = harness.REPO / "outputs" / "kernels" / "gemm.json"
DEFAULT_SASS = harness.REPO / "outputs" / "kernels" / "gemm_sass.txt"
DECODE_SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192)]  # (N, K)
DECODE_M = (1, 4, 16)
PREFILL_SHAPES = [(4096, 4096, 4096), (4096, 7168, 7168), (4096, 14336, 14336)]  # (M, N, K)
GEMM_KERNELS = ("wgmma_ws", "wgmma_256", "wgmma_pipe", "wgmma", "mma_bf16", "mma_fp8")
SMOKE_ORDER = ("gemv_fp8", "gemv_nvfp4", "mma_bf16", "mma_fp8", "wgmma", "wgmma_pipe", "wgmma_256", "wgmma_ws")
SOURCES = ("gemv_fp8.cu", "gemv_nvfp4.cu", "gemm_w8a8.cu", "gemm_w8a8_wgmma.cu",
           "gemv_fp8.py", "gemv_nvfp4.py", "gemm_w8a8.py", "bench_gemm.py")


_T0 = [None]
DEADLINE_S = [float("inf")]


def log(*a):
    print(*a, flush=True)


def out_of_time(what: str, notes: list) -> bool:
    """True once the run's time budget (--budget-s) is spent: the rest is skipped and recorded as such."""
    import time

    if _T0[0] is not None and time.time() - _T0[0] > DEADLINE_S[0]:
        notes.append({"kernel": "-", "shape": what, "error": "skipped: the run's time budget was spent"})
        log("  out of time budget: skipping", what)
        return True
    return False


def source_digest() -> dict:
    """sha256 (first 12 hex) of each kernel source: ties a recorded result to the code in the tree."""
    return {f: hashlib.sha256((KDIR / f).read_bytes()).hexdigest()[:12] for f in SOURCES if (KDIR / f).exists()}


# ---- timing ------------------------------------------------------------------------------------------------
graph_time_us = harness.graph_time_us


def n_sets(bytes_per_set: int) -> int:
    return harness.sets_for_l2(bytes_per_set, factor=4, cap=32)


# ---- smoke tests (child processes) ---------------------------------------------------------------------
def _smoke_one(name: str) -> tuple[bool, str]:
    import torch

    from . import gemm_w8a8 as G
    from . import gemv_fp8 as F8
    from . import gemv_nvfp4 as F4

    torch.manual_seed(0)
    if name == "gemv_fp8":
        N, K, M = 272, 1024, 5
        w = F8.random_codes(N, K)
        s = torch.rand(math.ceil(N / 128), K // 128, device="cuda") + 0.01
        x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        wd = F8.dequant_weight(w, s)
        y = F8.gemv_fp8(x, w, s)
    elif name == "gemv_nvfp4":
        N, K, M = 272, 1024, 5
        wp, sc = F4.random_nvfp4(N, K)
        x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        wd = F4.dequant_weight(wp, sc, 0.5)
        y = F4.gemv_nvfp4(x, wp, sc, 0.5)
    else:
        M, N, K = 200, 256, 512
        a, b = F8.random_codes(M, K), F8.random_codes(N, K)
        sa = torch.rand(M, K // 128, device="cuda") * 1e-2 + 1e-3
        sb = torch.rand(N // 128, K // 128, device="cuda") * 1e-2 + 1e-3
        x = F8.decode_e4m3(a) * sa.double().repeat_interleave(128, 1)
        wd = F8.decode_e4m3(b) * sb.double().repeat_interleave(128, 0).repeat_interleave(128, 1)
        y = G.gemm_w8a8(a, sa, b, sb, kernel=name)
    torch.cuda.synchronize()
    ref = x.double() @ wd.T
    terms = x.double().abs() @ wd.abs().T
    err = float(((y.double() - ref).abs() / (2**-8 * ref.abs() + 2**-11 * terms)).max())
    return err <= 1.0 and bool(torch.isfinite(y).all()), f"max err / tolerance = {err:.3g}"


def smoke_child(names, progress: str) -> int:
    for n in names:
        try:
            ok, msg = _smoke_one(n)
        except Exception as e:
            with open(progress, "a") as f:
                f.write(json.dumps({"kernel": n, "ok": False, "msg": f"{type(e).__name__}: {e}"[:400]}) + "\n")
            return 1  # a CUDA error poisons this context: let a fresh process take the rest
        with open(progress, "a") as f:
            f.write(json.dumps({"kernel": n, "ok": ok, "msg": msg}) + "\n")
    return 0


def smoke_all(names=SMOKE_ORDER, timeout: int = 240) -> dict:
    """Run the smoke tests in child processes; a hang or crash marks that kernel failed and moves on."""
    status, remaining = {}, list(names)
    while remaining:
        with tempfile.NamedTemporaryFile("w+", suffix=".jsonl", delete=False) as tf:
            progress = tf.name
        cmd = [sys.executable, "-m", "fp8lab.kernels.bench_gemm", "--smoke", ",".join(remaining), "--progress", progress]
        try:
            subprocess.run(cmd, cwd=harness.REPO, timeout=timeout)
            ended = "exited"
        except subprocess.TimeoutExpired:
            ended = f"timed out after {timeout} s (hang?)"
        for line in Path(progress).read_text().splitlines():
            d = json.loads(line)
            status[d["kernel"]] = d
        os.unlink(progress)
        nxt = [n for n in remaining if n not in status]
        if nxt and nxt == remaining or (nxt and ended != "exited"):
            status[nxt[0]] = {"kernel": nxt[0], "ok": False, "msg": f"child process {ended} during this kernel"}
        remaining = [n for n in remaining if n not in status]
        log("smoke:", {k: v["ok"] for k, v in status.items()})
    return status


# ---- baselines -------------------------------------------------------------------------------------------
def scaled_mm_calls(kind: str, xq, wq, sa, sb):
    """A zero-arg callable for torch._scaled_mm with `kind` scaling, and a note on the layout used.

    xq [M, K] fp8, wq [N, K] fp8 (passed as wq.t(), column-major as cuBLASLt wants); sa [M, K/128] and
    sb [N/128, K/128] dequant scales (blockwise only). Raises if torch rejects every layout tried."""
    import torch

    M, K = xq.shape
    N = wq.shape[0]
    dev = xq.device
    if kind == "tensorwise":
        one = torch.tensor(1.0, device=dev)
        return (lambda: torch._scaled_mm(xq, wq.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)), "scalar scales"
    if kind == "rowwise":
        ra, rb = torch.ones(M, 1, device=dev), torch.ones(1, N, device=dev)
        return (lambda: torch._scaled_mm(xq, wq.t(), scale_a=ra, scale_b=rb, out_dtype=torch.bfloat16)), "[M,1] x [1,N]"
    assert kind == "blockwise"
    sa_cm = sa.t().contiguous().t()  # 'outer-dim-major' [M, K/128], strides (1, M)
    tries = [
        ("_scaled_mm(sa col-major, sb.t())", lambda: torch._scaled_mm(xq, wq.t(), scale_a=sa_cm, scale_b=sb.t(), out_dtype=torch.bfloat16)),
        ("_scaled_mm(sa col-major, sb)", lambda: torch._scaled_mm(xq, wq.t(), scale_a=sa_cm, scale_b=sb, out_dtype=torch.bfloat16)),
    ]
    try:
        from torch.nn.functional import ScalingType, scaled_mm

        tries.append(("F.scaled_mm(BlockWise1x128, BlockWise128x128)",
                      lambda: scaled_mm(xq, wq.t(), sa_cm, ScalingType.BlockWise1x128, sb.t(),
                                        ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)))
    except Exception:
        pass
    errors = []
    for note, fn in tries:
        try:
            fn()
            torch.cuda.synchronize()
            return fn, note
        except Exception as e:
            errors.append(f"{note}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    raise RuntimeError(" | ".join(errors))


def measure_ceilings() -> dict:
    import torch

    out = {"copy_gbps": harness.copy_bandwidth_gbps(2 * 2**30)}
    n = 8192
    a = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    t, _ = graph_time_us([lambda: a @ b], min_calls=4, rep=10)
    out["bf16_gemm_tflops_8192"] = 2 * n**3 / (t * 1e-6) / 1e12
    aq, bq = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    try:
        fn, _ = scaled_mm_calls("tensorwise", aq, bq, None, None)
        t, _ = graph_time_us([fn], min_calls=4, rep=10)
        out["fp8_scaled_mm_tensorwise_tflops_8192"] = 2 * n**3 / (t * 1e-6) / 1e12
    except Exception as e:
        out["fp8_scaled_mm_tensorwise_error"] = str(e)[:300]
    del a, b, aq, bq
    torch.cuda.empty_cache()
    return out


# ---- decode -----------------------------------------------------------------------------------------------
def _tune(make, configs, label):
    """Time each config briefly, return (best config, {config: us})."""
    times = {}
    for cfg in configs:
        try:
            calls = make(cfg)
            times[cfg] = graph_time_us(calls, rep=6)[0]
        except Exception as e:
            log(f"  {label} config {cfg}: {type(e).__name__}: {e}")
    best = min(times, key=times.get)
    return best, times


def _check(y, ref, terms, rel=2**-8, acc=2**-13) -> float:
    """Largest |y - ref| / tolerance (<= 1 passes; the tests' table: bf16 rounding + fp32 accumulation)."""
    return float(((y.double() - ref).abs() / (rel * ref.abs() + acc * terms)).max())


def _v2_candidates(M: int, N: int, K: int) -> tuple[list, list]:
    """Every compiled version-2 config of this M with S in {2, 4, 8} (and each default)."""
    from . import gemv_fp8 as F8
    from . import gemv_nvfp4 as F4

    NT = 1 if M <= 8 else 2

    def widths(R):  # split-K widths worth trying: small N needs more warps per row tile
        return {2, 4, 8} if N >= 8192 else {4, 8}
    c8 = {F8.default_config_v2(M, N, K)} | {(R, S, C, D) for (R, nt, C, D) in F8.KERNELS_V2 if nt == NT
                                             for S in widths(R)}
    c4 = {F4.default_config_v2(M, N, K)} | {(R, S, C, D) for (R, nt, C, D) in F4.KERNELS_V2 if nt == NT
                                             for S in widths(R)}
    c8 = sorted(c for c in c8 if F8.valid_config_v2(c[0], c[1], NT, c[2], c[3], K) and c[1] * 64 * c[2] <= K)
    c4 = sorted(c for c in c4 if F4.valid_config_v2(c[0], c[1], NT, c[2], c[3], K) and c[1] * 128 * c[2] <= K)
    return c8, c4


def bench_decode(skip: set, copy_gbps: float, shapes=DECODE_SHAPES, Ms=DECODE_M, versions=(1, 2)) -> tuple[list, list]:
    import torch

    from . import gemv_fp8 as F8
    from . import gemv_nvfp4 as F4

    records, notes = [], []
    for N, K in shapes:
        if out_of_time(f"decode N={N} K={K}", notes):
            continue
        torch.manual_seed(N + K)
        n8 = n_sets(N * K)
        n4 = n_sets(N * K // 2 + N * K // 16)
        n16 = n_sets(2 * N * K)
        w8 = [F8.random_codes(N, K) for _ in range(n8)]
        sch = torch.rand(N, device="cuda") * 1e-3 + 1e-4
        sbl = torch.rand(math.ceil(N / 128), K // 128, device="cuda") * 1e-3 + 1e-4
        w4 = [F4.random_nvfp4(N, K) for _ in range(n4)]
        gs = torch.tensor(0.01, device="cuda")
        wbf = [(torch.randn(N, K, device="cuda") * 0.02).to(torch.bfloat16) for _ in range(n16)]
        # float64 dequantized weights of set 0, for validation
        wd = {"gemv_fp8_channel": F8.dequant_weight(w8[0], sch), "gemv_fp8_block": F8.dequant_weight(w8[0], sbl)}
        wd4 = F4.dequant_weight(*w4[0], gs)
        for M in Ms:
            shape = f"M={M} N={N} K={K}"
            x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
            flops = 2 * M * N * K
            act_bytes = 2 * M * K + 2 * M * N
            # anchors
            t_bf16, how = graph_time_us([lambda w=w: torch.nn.functional.linear(x, w) for w in wbf])
            anchors = {"bf16_cublas": t_bf16}
            records.append(harness.Result("bf16_cublas (torch F.linear)", shape, "bf16 x bf16", t_bf16,
                                          bytes=2 * N * K + act_bytes, flops=flops, copy_gbps=copy_gbps,
                                          extra={"timing": how, "M": M, "N": N, "K": K, "family": "decode"}).record())
            xq = x.float().clamp(-448, 448).to(torch.float8_e4m3fn)
            for kind in ("tensorwise", "rowwise", "blockwise"):
                name = f"scaled_mm_{kind}"
                try:
                    sa = torch.rand(M, K // 128, device="cuda") + 0.5
                    fns = []
                    for w in w8:
                        fn, note = scaled_mm_calls(kind, xq, w.view(torch.float8_e4m3fn), sa, sbl if kind == "blockwise" else None)
                        fns.append(fn)
                    t, how = graph_time_us(fns)
                    anchors[name] = t
                    records.append(harness.Result(f"{name} (torch._scaled_mm)", shape, "e4m3 x e4m3", t,
                                                  bytes=N * K + M * K + 2 * M * N, flops=flops, copy_gbps=copy_gbps,
                                                  anchor="bf16_cublas", anchor_time_us=t_bf16,
                                                  extra={"timing": how, "layout": note, "M": M, "N": N, "K": K,
                                                         "family": "decode"}).record())
                except Exception as e:
                    notes.append({"kernel": name, "shape": shape, "error": str(e)[:500]})
                    log(f"  {name} {shape}: not available: {str(e)[:160]}")
            # ours
            NT = 1 if M <= 8 else 2
            cands8 = [c for c in {(*F8.default_config(M, N, K), 0), (1, 4, 0), (1, 8, 0), (1, 16, 0), (2, 4, 0),
                                  (2, 8, 0), (4, 4, 0), (1, 4, 1), (1, 8, 1), (1, 16, 1), (2, 4, 1), (2, 8, 1)}
                      if F8.valid_config(c[0], c[1], NT, c[2]) and c[1] <= max(1, K // 128)]
            cands4 = [c for c in {(*F8.default_config(M, N, K, kblock=256), 0), (1, 4, 0), (1, 8, 0), (1, 16, 0),
                                  (2, 2, 0), (2, 4, 0), (2, 8, 0), (1, 4, 1), (1, 8, 1), (2, 4, 1), (2, 8, 1)}
                      if F4.valid_config(min(c[0], 2), c[1], NT, c[2]) and c[1] <= max(1, K // 256)]
            v2c8, v2c4 = _v2_candidates(M, N, K)
            ours = []
            for v, suffix in ((1, ""), (2, "_v2")):
                if v not in versions:
                    continue
                for mode, scale in (("channel", sch), ("block", sbl)):
                    ours.append((f"gemv_fp8_{mode}{suffix}", "gemv_fp8", N * K + scale.numel() * 4,
                                 lambda cfg, scale=scale, v=v: [F8.prepare(x, w, scale, config=cfg, version=v) for w in w8],
                                 cands8 if v == 1 else v2c8, wd[f"gemv_fp8_{mode}"]))
                ours.append((f"gemv_nvfp4{suffix}", "gemv_nvfp4", N * K // 2 + N * K // 16,
                             lambda cfg, v=v: [F4.prepare(x, wp, sc, gs, config=cfg, version=v) for wp, sc in w4],
                             cands4 if v == 1 else v2c4, wd4))
            for name, smoke_name, wbytes, make, cands, wdeq in ours:
                if smoke_name in skip:
                    notes.append({"kernel": name, "shape": shape, "error": "failed its smoke test: not timed"})
                    continue
                ref = x.double() @ wdeq.T
                terms = x.double().abs() @ wdeq.abs().T
                err = 0.0
                for cfg in [None] + list(cands):  # every config is validated before any is timed
                    y = make(cfg)[0]()
                    torch.cuda.synchronize()
                    err = max(err, _check(y, ref, terms))
                if not err <= 1.0:
                    notes.append({"kernel": name, "shape": shape, "error": f"validation failed: err/tol {err:.3g}"})
                    log(f"  {name} {shape}: VALIDATION FAILED err/tol {err:.3g}")
                    continue
                best, tuned = _tune(make, cands, name)
                t, how = graph_time_us(make(best), rep=30)
                extra = {"timing": how, "version": 2 if name.endswith("_v2") else 1,
                         "config_RSCD" if name.endswith("_v2") else "config_RSPF": list(best),
                         "tuned_us": {",".join(map(str, c)): v for c, v in tuned.items()},
                         "validated_err_over_tol": err, "M": M, "N": N, "K": K, "family": "decode",
                         "weight_bytes": wbytes}
                for a, ta in anchors.items():
                    if a != "bf16_cublas":
                        extra[f"speedup_vs_{a}"] = ta / t
                dtype = "e2m1+e4m3/16 x bf16" if "nvfp4" in name else "e4m3 x bf16"
                records.append(harness.Result(name, shape, dtype, t, bytes=wbytes + act_bytes, flops=flops,
                                              anchor="bf16_cublas", anchor_time_us=t_bf16, copy_gbps=copy_gbps,
                                              extra=extra).record())
                log(f"  {name:18s} {shape:24s} {t:8.1f} us  x{t_bf16 / t:5.2f} vs bf16  cfg {best}")
            del x, xq
        del w8, w4, wbf, wd, wd4
        torch.cuda.empty_cache()
    return records, notes


# ---- prefill ----------------------------------------------------------------------------------------------
def bench_prefill(skip: set, copy_gbps: float, shapes=PREFILL_SHAPES) -> tuple[list, list]:
    import torch

    from . import gemm_w8a8 as G
    from . import gemv_fp8 as F8

    records, notes = [], []
    for M, N, K in shapes:
        shape = f"M={M} N={N} K={K}"
        if out_of_time(shape, notes):
            continue
        torch.manual_seed(M + N + K)
        flops = 2 * M * N * K
        nset = min(4, n_sets(M * K + N * K))
        A = [F8.random_codes(M, K) for _ in range(nset)]
        B = [F8.random_codes(N, K) for _ in range(nset)]
        sa = torch.rand(M, K // 128, device="cuda") * 1e-2 + 1e-3
        sb = torch.rand(N // 128, K // 128, device="cuda") * 1e-2 + 1e-3
        fp8_bytes = M * K + N * K + 2 * M * N + 4 * (sa.numel() + sb.numel())
        Abf = [(torch.randn(M, K, device="cuda")).to(torch.bfloat16) for _ in range(nset)]
        Bbf = [(torch.randn(N, K, device="cuda") * 0.02).to(torch.bfloat16) for _ in range(nset)]
        t_bf16, how = graph_time_us([lambda a=a, b=b: a @ b.t() for a, b in zip(Abf, Bbf)], min_calls=4, rep=10)
        del Abf, Bbf
        records.append(harness.Result("bf16_cublas (torch matmul)", shape, "bf16 x bf16", t_bf16,
                                      bytes=2 * (M * K + N * K + M * N), flops=flops, copy_gbps=copy_gbps,
                                      extra={"timing": how, "M": M, "N": N, "K": K, "family": "prefill"}).record())
        anchors = {}
        ref = G.reference(A[0], sa, B[0], sb)
        for kind in ("tensorwise", "rowwise", "blockwise"):
            name = f"scaled_mm_{kind}"
            try:
                fns = []
                for a, b in zip(A, B):
                    fn, note = scaled_mm_calls(kind, a.view(torch.float8_e4m3fn), b.view(torch.float8_e4m3fn), sa, sb)
                    fns.append(fn)
                extra = {"layout": note, "M": M, "N": N, "K": K, "family": "prefill"}
                if kind == "blockwise":  # make sure the layout we found computes OUR arithmetic
                    y = fns[0]()
                    torch.cuda.synchronize()
                    extra["rel_err_vs_reference"] = float((y.double() - ref).norm() / ref.norm())
                t, how = graph_time_us(fns, min_calls=4, rep=10)
                extra["timing"] = how
                anchors[name] = t
                records.append(harness.Result(f"{name} (torch._scaled_mm)", shape, "e4m3 x e4m3", t, bytes=fp8_bytes,
                                              flops=flops, anchor="bf16_cublas", anchor_time_us=t_bf16,
                                              copy_gbps=copy_gbps, extra=extra).record())
                log(f"  {name:18s} {shape:24s} {t:8.1f} us  {flops / t / 1e6:7.1f} TFLOP/s")
            except Exception as e:
                notes.append({"kernel": name, "shape": shape, "error": str(e)[:500]})
                log(f"  {name} {shape}: not available: {str(e)[:200]}")
        ad = F8.decode_e4m3(A[0]) * sa.double().repeat_interleave(128, 1)
        bd = F8.decode_e4m3(B[0]) * sb.double().repeat_interleave(128, 0).repeat_interleave(128, 1)
        terms = ad.abs() @ bd.abs().T
        del ad, bd
        for kernel in GEMM_KERNELS:
            name = f"w8a8_{kernel}"
            if kernel in skip:
                notes.append({"kernel": name, "shape": shape, "error": "failed its smoke test: not timed"})
                continue
            try:
                y = G.gemm_w8a8(A[0], sa, B[0], sb, kernel=kernel)
                torch.cuda.synchronize()
                acc = 2**-11 if kernel.startswith("wgmma") else 2**-13
                err = _check(y, ref, terms, acc=acc)
                if not err <= 1.0:
                    notes.append({"kernel": name, "shape": shape, "error": f"validation failed: err/tol {err:.3g}"})
                    log(f"  {name} {shape}: VALIDATION FAILED err/tol {err:.3g}")
                    continue
                t, how = graph_time_us([G.prepare(a, sa, b, sb, kernel=kernel) for a, b in zip(A, B)], min_calls=4, rep=10)
            except Exception as e:
                notes.append({"kernel": name, "shape": shape, "error": f"{type(e).__name__}: {e}"[:500]})
                log(f"  {name} {shape}: ERROR {e}")
                continue
            extra = {"timing": how, "validated_err_over_tol": err, "M": M, "N": N, "K": K, "family": "prefill"}
            for a_name, ta in anchors.items():
                extra[f"speedup_vs_{a_name}"] = ta / t
            records.append(harness.Result(name, shape, "e4m3 x e4m3 (1x128, 128x128)", t, bytes=fp8_bytes, flops=flops,
                                          anchor="bf16_cublas", anchor_time_us=t_bf16, copy_gbps=copy_gbps,
                                          extra=extra).record())
            log(f"  {name:18s} {shape:24s} {t:8.1f} us  {flops / t / 1e6:7.1f} TFLOP/s")
        del A, B, ref, terms
        torch.cuda.empty_cache()
    return records, notes


def accuracy_gate_run(skip: set, M=1024, N=7168, K=7168) -> list:
    """Seed 001's gate on the kernels' outputs (W8A8 vs W8A16) at a realistic size, both input kinds."""
    import torch

    from . import gemm_w8a8 as G

    out = []
    for kind in ("random", "outliers"):
        x, w = G.test_inputs(M, N, K, kind=kind, seed=11)
        a, sa = G.quantize_act_1x128(x)
        b, sb = G.quantize_weight_128x128(w)
        ref16 = G.w8a16_reference(x, b, sb)
        row = {"kind": kind, "shape": f"M={M} N={N} K={K}",
               "math_w8a8_fp64": G.accuracy_gate(G.reference(a, sa, b, sb), ref16)}
        for kernel in GEMM_KERNELS:
            if kernel not in skip:
                row[kernel] = G.accuracy_gate(G.gemm_w8a8(a, sa, b, sb, kernel=kernel), ref16)
        out.append(row)
        log("  gate", kind, {k: (round(v["cosine"], 6), round(v["rel_rms"], 5)) for k, v in row.items() if isinstance(v, dict)})
        del x, w, a, b, ref16
        torch.cuda.empty_cache()
    return out


# ---- SASS evidence ------------------------------------------------------------------------------------------
OPCODES = ("HMMA", "QGMMA", "HGMMA", "IMMA", "F2FP", "F2F", "I2F", "PRMT", "LOP3", "HMUL2", "LDSM", "LDGSTS",
           "FFMA", "SYNCS", "WARPGROUP")


def inner_loop(block: str) -> dict | None:
    """Opcode counts of the largest loop (a backward branch) that holds a matrix instruction: the work
    per iteration, which is what a kernel's speed follows when it is instruction bound.

    Returns {"instructions": n, "HMMA": h, "per_matrix_instruction": n / h, "ops": {opcode: count}}."""
    ins = [(int(a, 16), t.strip()) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", block)]
    best = None
    for addr, text in ins:
        m = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", text)
        if m and int(m.group(1), 16) <= addr:
            body = [t for a, t in ins if int(m.group(1), 16) <= a <= addr]
            if any(re.search(r"\b(HMMA|QGMMA|HGMMA)", t) for t in body) and (best is None or len(body) > len(best)):
                best = body
    if best is None:
        return None
    ops: dict = {}
    for t in best:
        op = re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0]
        ops[op] = ops.get(op, 0) + 1
    n_mma = sum(v for k, v in ops.items() if k in ("HMMA", "QGMMA", "HGMMA"))
    return {"instructions": len(best), "HMMA": n_mma, "per_matrix_instruction": len(best) / n_mma,
            "ops": dict(sorted(ops.items(), key=lambda kv: -kv[1]))}


def sass_report(path: Path, sources=None) -> dict | None:
    """Compile the kernels with nvcc (same source as NVRTC), disassemble with cuobjdump, count opcodes per
    kernel and in its inner loop (`inner_loop`). `sources`: only these .cu files (default all four)."""
    nvcc, cuobjdump = shutil.which("nvcc"), shutil.which("cuobjdump")
    if not nvcc or not cuobjdump:
        return None
    counts, text = {}, []
    builds = [("gemv_fp8.cu", ["-arch=sm_90"]), ("gemv_nvfp4.cu", ["-arch=sm_90"]), ("gemm_w8a8.cu", ["-arch=sm_90"]),
              ("gemm_w8a8_wgmma.cu", ["-gencode", "arch=compute_90a,code=sm_90a"])]
    builds = [b for b in builds if sources is None or b[0] in sources]
    with tempfile.TemporaryDirectory() as td:
        for src, arch in builds:
            cub = Path(td) / (src + ".cubin")
            r = subprocess.run([nvcc, "-std=c++17", "-cubin", *arch, f"-I{KDIR}", "-o", str(cub), str(KDIR / src)],
                               capture_output=True, text=True)
            if r.returncode:
                text.append(f"== {src}: nvcc failed\n{r.stderr[:2000]}")
                continue
            sass = subprocess.run([cuobjdump, "--dump-sass", str(cub)], capture_output=True, text=True).stdout
            for block in re.split(r"\n\s*Function : ", sass)[1:]:
                fname = block.split("\n", 1)[0].strip()
                ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)", block)
                c = {op: sum(1 for o, _ in ops if o == op or o.startswith(op + "_")) for op in OPCODES}
                c["total"] = len(ops)
                mma_forms = sorted({o + suf for o, suf in ops if "MMA" in o or "GMMA" in o})
                c["mma_forms"] = mma_forms
                c["loop"] = inner_loop(block)
                counts[fname] = c
                lp = c["loop"]
                text.append(f"== {fname} ({src}, {' '.join(arch)})\n   " +
                            "  ".join(f"{k}={v}" for k, v in c.items() if k not in ("mma_forms", "loop")) +
                            f"\n   matrix instructions: {', '.join(mma_forms) or 'none'}" +
                            (f"\n   inner loop: {lp['instructions']} instructions, {lp['HMMA']} matrix, "
                             + " ".join(f"{k}={v}" for k, v in list(lp["ops"].items())[:12]) if lp else ""))
                samples = [ln.strip() for ln in block.splitlines() if re.search(r"\b(HMMA|QGMMA|HGMMA|F2FP)\b", ln)][:6]
                text.extend("     " + s for s in samples)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("SASS opcode counts per kernel (nvcc -cubin, cuobjdump --dump-sass; NVRTC compiles the same source)\n\n"
                    + "\n".join(text) + "\n")
    return counts


# ---- report helpers (used by the notebook; CPU-only friendly) ------------------------------------------------
def load(path=DEFAULT_OUT) -> dict:
    return harness.load_json(path)


def roofline_us(bytes_moved: float, flops: float, gbps: float, tflops: float) -> float:
    """max(bytes / bandwidth, flops / rate) in microseconds: the floor no kernel beats by much.

    roofline_us(235e6, 0.47e9, 4300, 790) -> 54.7   # 28672x8192 FP8 GEMV at M=1: bytes dominate
    """
    return max(bytes_moved / (gbps * 1e3), flops / (tflops * 1e6))


def decode_table(data: dict) -> list[dict]:
    """Rows of the decode results: our time, the anchors, ratios, and the roofline from the run's own ceilings.

    Memory roof = the best read bandwidth seen in the run (copy test or any decode kernel); compute roof =
    the bf16 8192^3 rate (every decode kernel here multiplies in bf16 or on FP8 tensor cores, both faster)."""
    ceil = data.get("ceilings", {})
    dec = [r for r in data["results"] if r.get("family") == "decode"]
    # The copy test counts read + write; a pure read stream goes faster (cuBLAS' bf16 GEMV reads at more than
    # the copy figure here), so the memory roof is the best of the two, both measured in the same run.
    bw = max([ceil.get("copy_gbps") or 0] + [r["gbps"] or 0 for r in dec]) or None
    rate = ceil.get("bf16_gemm_tflops_8192")
    rows = []
    for r in dec:
        row = {"kernel": r["kernel"], "M": r["M"], "N": r["N"], "K": r["K"], "time_us": r["time_us"],
               "GB/s": r.get("gbps"), "x_vs_bf16": r.get("speedup"),
               "x_vs_scaled_mm_tensorwise": r.get("speedup_vs_scaled_mm_tensorwise"),
               "x_vs_scaled_mm_rowwise": r.get("speedup_vs_scaled_mm_rowwise")}
        if bw and rate:
            floor = roofline_us(r["bytes"], r["flops"], bw, rate)
            row["roofline_us"] = floor
            row["of_roofline"] = floor / r["time_us"]
        rows.append(row)
    return rows


def prefill_table(data: dict) -> list[dict]:
    rows = []
    for r in data["results"]:
        if r.get("family") == "prefill":
            rows.append({"kernel": r["kernel"], "shape": r["shape"], "time_us": r["time_us"], "TFLOP/s": r.get("tflops"),
                         "x_vs_bf16": r.get("speedup"),
                         "x_vs_scaled_mm_blockwise": r.get("speedup_vs_scaled_mm_blockwise")})
    return rows


def goals(data: dict) -> list[dict]:
    """The issue's four goals, each with the measured ratio (None where the run has no such number)."""
    res = data["results"]

    def find(kernel, M=None, N=None, K=None):
        for r in res:
            if r["kernel"] == kernel and (M is None or r.get("M") == M) and (N is None or r.get("N") == N) \
                    and (K is None or r.get("K") == K):
                return r
        return None

    out = []

    def best(kernels, M, key):
        rs = [r for r in (find(k, M, 28672, 8192) for k in kernels) if r and r.get(key)]
        return max(rs, key=lambda r: r[key]) if rs else None

    fp8_kernels = ("gemv_fp8_channel", "gemv_fp8_block", "gemv_fp8_channel_v2", "gemv_fp8_block_v2")
    r = best(fp8_kernels, 1, "speedup")
    out.append({"goal": "W8A16 GEMV M=1 28672x8192 >= 1.9x bf16 cuBLAS", "target": 1.9,
                "measured": r and r["speedup"], "kernel": r and r["kernel"]})
    for r in res:  # against the FASTEST torch._scaled_mm variant measured at M=16
        if r["kernel"].startswith("gemv_fp8") and r.get("M") == 16 and r.get("N") == 28672:
            r["_vs_best_scaled_mm"] = min((v for k, v in r.items() if k.startswith("speedup_vs_scaled_mm") and v), default=None)
    r = best(fp8_kernels, 16, "_vs_best_scaled_mm")
    out.append({"goal": "W8A16 M=16 28672x8192 >= 1.5x torch._scaled_mm FP8 (its fastest scaling)", "target": 1.5,
                "measured": r and r["_vs_best_scaled_mm"], "kernel": r and r["kernel"]})
    for r in res:
        r.pop("_vs_best_scaled_mm", None)
    r = best(("gemv_nvfp4", "gemv_nvfp4_v2"), 1, "speedup")
    out.append({"goal": "NVFP4 GEMV M=1 28672x8192 >= 3.5x bf16 cuBLAS", "target": 3.5, "measured": r and r["speedup"],
                "kernel": r and r["kernel"]})
    cands = [r for r in res if r["kernel"].startswith("w8a8_wgmma") and r.get("M") == 4096 and r.get("N") == 7168
             and r.get("K") == 7168 and r.get("speedup_vs_scaled_mm_blockwise")]
    r = max(cands, key=lambda r: r["speedup_vs_scaled_mm_blockwise"]) if cands else None
    out.append({"goal": "wgmma W8A8 4096x7168x7168 >= 0.85x torch._scaled_mm blockwise", "target": 0.85,
                "measured": r and r.get("speedup_vs_scaled_mm_blockwise"), "kernel": r and r["kernel"]})
    for g in out:
        g["met"] = None if g["measured"] is None else bool(g["measured"] >= g["target"])
    return out


def format_rows(rows: list[dict], cols: list[str] | None = None) -> str:
    """A plain-text table (no pandas): numbers to 3 significant digits, missing values as '-'."""
    if not rows:
        return "(no rows)"
    cols = cols or list(rows[0])

    def f(v):
        if v is None:
            return "-"
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.0f}"
        return str(v)
    cells = [[f(r.get(c)) for c in cols] for r in rows]
    w = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w[i]) for i, c in enumerate(cols)), "  ".join("-" * x for x in w)]
    lines += ["  ".join(row[i].ljust(w[i]) for i in range(len(cols))) for row in cells]
    return "\n".join(lines)


def provenance_summary(data: dict) -> dict:
    """Where a recorded result came from, and whether the kernel sources in this tree are the ones measured."""
    prov = data["provenance"]
    rec = prov.get("sources_sha256_12", {})
    now = source_digest()
    same = {f: rec.get(f) == now.get(f) for f in rec}
    keys = ("device", "date", "torch", "cupy", "cuda", "git_commit", "command", "nvidia_smi")
    return {**{k: prov.get(k) for k in keys}, "sources_match_this_tree": all(same.values()) if same else None,
            "sources_differing": [f for f, ok in same.items() if not ok]}


def sass_table(data: dict, kernels=("w8a8_mma_fp8", "w8a8_mma_bf16", "w8a8_wgmma", "w8a8_wgmma_pipe", "w8a8_wgmma_256",
                                    "w8a8_wgmma_ws",
                                    "gemv_fp8_block_r1_nt1_pf0", "gemv_nvfp4_r1_nt1_pf0")) -> list[dict]:
    """Opcode counts recorded from cuobjdump: which matrix instruction each kernel really runs."""
    sc = data.get("sass_counts") or {}
    rows = []
    for k in kernels:
        c = sc.get(k)
        if c:
            rows.append({"kernel": k, "matrix instr": ", ".join(c.get("mma_forms", [])) or "none", "HMMA": c["HMMA"],
                         "QGMMA": c["QGMMA"], "F2FP": c["F2FP"], "HMUL2": c["HMUL2"], "total SASS": c["total"]})
    return rows


def gate_table(data: dict) -> list[dict]:
    rows = []
    for g in data.get("accuracy_gate") or []:
        for k, v in g.items():
            if isinstance(v, dict):
                rows.append({"inputs": g["kind"], "shape": g["shape"], "kernel": k, "cosine": v["cosine"],
                             "rel_rms": v["rel_rms"], "gate (cos>=0.999, rms<=2%)": v["passed"]})
    return rows


def plot_decode(data: dict, path=None):
    """Achieved bytes/s per kernel for each decode shape, against the run's own copy bandwidth."""
    import matplotlib.pyplot as plt

    rows = [r for r in data["results"] if r.get("family") == "decode"]
    shapes = sorted({(r["N"], r["K"]) for r in rows}, key=lambda s: s[0] * s[1])
    Ms = sorted({r["M"] for r in rows})
    kernels = ["bf16_cublas (torch F.linear)", "scaled_mm_tensorwise (torch._scaled_mm)", "gemv_fp8_block", "gemv_nvfp4"]
    fig, axes = plt.subplots(1, len(Ms), figsize=(5 * len(Ms), 4), sharey=True)
    axes = [axes] if len(Ms) == 1 else axes
    for ax, M in zip(axes, Ms):
        for i, k in enumerate(kernels):
            ys = []
            for N, K in shapes:
                r = next((r for r in rows if r["kernel"] == k and r["M"] == M and (r["N"], r["K"]) == (N, K)), None)
                ys.append(r["time_us"] if r else float("nan"))
            xs = [j + (i - 1.5) * 0.2 for j in range(len(shapes))]
            ax.bar(xs, ys, width=0.2, label=k.split(" (")[0])
        ax.set_xticks(range(len(shapes)), [f"{N}x{K}" for N, K in shapes], rotation=20)
        ax.set_title(f"decode, M = {M}")
        ax.set_yscale("log")
        ax.set_ylabel("time per call (us, log)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=110)
    return fig


def plot_prefill(data: dict, path=None):
    """TFLOP/s per kernel for each prefill shape, with the run's bf16 and FP8 8192^3 ceilings as lines."""
    import matplotlib.pyplot as plt

    rows = [r for r in data["results"] if r.get("family") == "prefill"]
    shapes = sorted({r["shape"] for r in rows}, key=lambda s: [int(x.split("=")[1]) for x in s.split()])
    kernels = sorted({r["kernel"] for r in rows}, key=lambda k: (not k.startswith("w8a8"), k))
    fig, ax = plt.subplots(figsize=(11, 4))
    width = 0.8 / len(kernels)
    for i, k in enumerate(kernels):
        ys = [next((r["tflops"] for r in rows if r["kernel"] == k and r["shape"] == s), float("nan")) for s in shapes]
        ax.bar([j + (i - len(kernels) / 2) * width for j in range(len(shapes))], ys, width=width, label=k.split(" (")[0])
    c = data.get("ceilings", {})
    for key, ls in (("bf16_gemm_tflops_8192", "--"), ("fp8_scaled_mm_tensorwise_tflops_8192", ":")):
        if c.get(key):
            ax.axhline(c[key], color="k", ls=ls, lw=1, label=f"{key} = {c[key]:.0f}")
    ax.set_xticks(range(len(shapes)), shapes)
    ax.set_ylabel("TFLOP/s")
    ax.set_title("prefill W8A8 (1x128 x 128x128 scales) vs cuBLAS")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=110)
    return fig


# ---- main ------------------------------------------------------------------------------------------------------
def run_pytest(path: Path | None, skip: set, timeout: int = 300) -> str:
    env = dict(os.environ, FP8LAB_SKIP_KERNELS=",".join(sorted(skip)))
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "tests/test_kernels_gemm.py", "-q", "-p", "no:cacheprovider"],
                           cwd=harness.REPO, env=env, capture_output=True, text=True, timeout=timeout)
        out = r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += f"\nTIMED OUT after {timeout} s"
    if path:
        path.write_text(out)
    lines = [ln for ln in out.splitlines() if re.search(r"\d+ (passed|failed)", ln)]
    return lines[-1].strip("= ") if lines else out.strip().splitlines()[-1] if out.strip() else "no output"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fp8lab.kernels.bench gemm", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--sass-out", default=str(DEFAULT_SASS))
    p.add_argument("--pytest-out", default=None, help="where to save the pytest log (default: beside --out)")
    p.add_argument("--skip", default="", help="comma-separated kernels not to run")
    p.add_argument("--no-smoke", action="store_true")
    p.add_argument("--no-pytest", action="store_true")
    p.add_argument("--only", default="decode,prefill,gate,sass")
    p.add_argument("--budget-s", type=float, default=float("inf"), help="skip remaining shapes after this many seconds")
    p.add_argument("--decode-shapes", default=None, help="decode (N, K) shapes as NxK,NxK (default: all DECODE_SHAPES)")
    p.add_argument("--decode-m", default=None, help="decode token counts as 1,4,16 (default: DECODE_M)")
    p.add_argument("--versions", default="1,2", help="GEMV versions to time (default both)")
    p.add_argument("--smoke", default=None, help=argparse.SUPPRESS)
    p.add_argument("--progress", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.smoke is not None:  # child process
        return smoke_child([n for n in args.smoke.split(",") if n], args.progress)

    from ._cuda import NoCudaDevice, cuda_available

    if not cuda_available():
        raise NoCudaDevice("bench_gemm needs a CUDA device; the recorded results are in outputs/kernels/gemm.json")
    import time

    _T0[0], DEADLINE_S[0] = time.time(), args.budget_s
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    skip = {s for s in args.skip.split(",") if s}
    smoke = {} if args.no_smoke else smoke_all([n for n in SMOKE_ORDER if n not in skip])
    skip |= {k for k, v in smoke.items() if not v["ok"]}
    pytest_line = None
    if not args.no_pytest:
        pytest_line = run_pytest(Path(args.pytest_out) if args.pytest_out else out.with_name("gemm_pytest.txt"), skip)
        log("pytest:", pytest_line)
    only = set(args.only.split(","))
    ceilings = measure_ceilings()
    log("ceilings:", ceilings)
    payload = {"provenance": {**harness.provenance(" ".join(["python -m fp8lab.kernels.bench gemm"] + (argv or sys.argv[1:]))),
                              "sources_sha256_12": source_digest()},
               "ceilings": ceilings, "results": [], "smoke": smoke, "pytest": pytest_line,
               "baseline_and_kernel_notes": [], "accuracy_gate": None, "sass_counts": None}

    def dump():
        payload["goals"] = goals(payload)
        out.write_text(json.dumps(payload, indent=1, default=float) + "\n")

    dump()
    if "sass" in only:  # cheap and independent of the timings: first, so a cut-short run still has it
        payload["sass_counts"] = sass_report(Path(args.sass_out),
                                             sources=("gemv_fp8.cu", "gemv_nvfp4.cu") if only == {"decode", "sass"} else None)
        dump()
    dec_kw = {"versions": tuple(int(v) for v in args.versions.split(","))}
    if args.decode_shapes:
        dec_kw["shapes"] = [tuple(int(d) for d in sh.split("x")) for sh in args.decode_shapes.split(",")]
    if args.decode_m:
        dec_kw["Ms"] = tuple(int(m) for m in args.decode_m.split(","))
    for phase, fn in (("decode", bench_decode), ("prefill", bench_prefill)):
        if phase in only:
            r, n = fn(skip, ceilings["copy_gbps"], **(dec_kw if phase == "decode" else {}))
            payload["results"] += r
            payload["baseline_and_kernel_notes"] += n
            dump()
    if "gate" in only and not out_of_time("accuracy gate", payload["baseline_and_kernel_notes"]):
        payload["accuracy_gate"] = accuracy_gate_run(skip)
        dump()
    records = payload["results"]
    harness.print_table(records)
    for g in payload["goals"]:
        log(f"GOAL {g['goal']}: measured {g['measured']} -> {'MET' if g['met'] else 'not met'}")
    log("wrote", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
