"""Benchmarks for FP8 and NVFP4 quantization kernels: `python -m fp8lab.kernels.bench quant`.

Writes outputs/kernels/quant.json (harness schema, plus "checks" and "sass" sections) and, where nvcc and
cuobjdump exist, outputs/kernels/quant_sass.txt. File order as in llm.c dev/cuda:
  1. the references: the CPU contract (fp8lab.scaling) and torch's own path for the same math (eager and
     torch.compile, each validated too),
  2. our versions (fp8lab.kernels.quant / nvfp4, every variant),
  3. validation BEFORE timing: on the benchmarked tensor, ours == torch's path bit for bit, and on a slice
     ours == the CPU reference; a kernel that fails is recorded and not timed,
  4. timing: CUDA events, warm-up, median of many samples (each sample several back-to-back calls, so Python
     launch overhead is hidden), inputs several times the L2 (or rotated copies), and a copy of the same
     number of bytes measured in the same run as the bandwidth anchor; napkin math printed per kernel.
Bytes counted: input read + codes written + scales written (the amax pass of a dynamic quantization is NOT
counted: it is the price of not knowing the scale in advance, and shows as a lower fraction of copy).
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import harness

KDIR = Path(__file__).resolve().parent
DEFAULT_OUT = harness.REPO / "outputs" / "kernels" / "quant.json"
# The goals, as (label, kernel row, metric, threshold): report.format_goals(summary, GOALS)
GOALS = [
    ("FP8 1x128 group quant, bf16 [16384, 7168]: fraction of copy bw", "fp8 group128 hw bf16", "fraction_of_copy_bw", 0.90),
    ("FP8 1x128 group quant, bf16: speedup vs torch eager", "fp8 group128 hw bf16", "speedup", 1.5),
    ("NVFP4 quant (given global amax), bf16: fraction of copy bw", "nvfp4 bits scale-hw (given amax)", "fraction_of_copy_bw", 0.85),
]
BIG = (16384, 7168)      # the issue's activation shape: 16k tokens x DeepSeek-V3's hidden size
SMALL = (2048, 1024)


def log(*a):
    print(*a, flush=True)


# =====================================================================================================
# 1. torch's own path for the same arithmetic (what one writes without a custom kernel)
def _c(v, like):
    """A 0-d CUDA (device) tensor: torch's CUDA division by a Python scalar or a CPU 0-d tensor is a
    multiplication by its reciprocal (not IEEE a / b); dividing by a device tensor is the true division."""
    import torch

    return torch.full((), v, dtype=torch.float32, device=like.device)


def torch_group_quant_pyscalar(x, G: int = 128, fmax: float = 448.0):
    """The same with `/ 448.0` (a Python scalar), as such code is usually written: on CUDA this is amax * (1/448)."""
    import torch

    M, K = x.shape
    xf = x.float().view(M, K // G, G)
    scale = xf.abs().amax(dim=-1, keepdim=True) / fmax
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = (xf / scale).clamp(-fmax, fmax).to(torch.float8_e4m3fn)
    return q.view(M, K), scale.squeeze(-1)


def torch_group_quant(x, G: int = 128, fmax: float = 448.0):
    import torch

    M, K = x.shape
    xf = x.float().view(M, K // G, G)
    scale = xf.abs().amax(dim=-1, keepdim=True) / _c(fmax, x)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = (xf / scale).clamp(-fmax, fmax).to(torch.float8_e4m3fn)
    return q.view(M, K), scale.squeeze(-1)


def torch_tensor_quant(x, fmax: float = 448.0):
    import torch

    xf = x.float()
    scale = xf.abs().amax() / _c(fmax, x)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return (xf / scale).clamp(-fmax, fmax).to(torch.float8_e4m3fn), scale


def torch_block_quant(x, fmax: float = 448.0):
    import torch

    M, K = x.shape
    xf = x.float().view(M // 128, 128, K // 128, 128)
    scale = xf.abs().amax(dim=(1, 3), keepdim=True) / _c(fmax, x)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = (xf / scale).clamp(-fmax, fmax).to(torch.float8_e4m3fn)
    return q.view(M, K), scale.view(M // 128, K // 128)


def torch_nvfp4(x, gamax=None):
    """NVFP4 with torch ops: the seed's seven compares (with the RNE tie rule), nibbles packed low-first."""
    import torch

    M, K = x.shape
    xf = x.float()
    a = xf.abs()
    if gamax is None:
        gamax = a.amax()
    gs = gamax / _c(2688.0, x)
    gs = torch.where(gs > 0, gs, torch.ones_like(gs))
    bs = a.view(M, K // 16, 16).amax(dim=-1) / _c(6.0, x) / gs
    sc = bs.clamp(max=448.0).to(torch.float8_e4m3fn)
    s = (sc.float() * gs).unsqueeze(-1)
    y = torch.where(s > 0, xf.view(M, K // 16, 16) / s, torch.zeros_like(s))
    ay = y.abs()
    mag = ((ay > 0.25).to(torch.uint8) + (ay >= 0.75) + (ay > 1.25) + (ay >= 1.75) + (ay > 2.5) + (ay >= 3.5)
           + (ay > 5.0))
    code = (mag | (torch.signbit(y).to(torch.uint8) << 3)).view(M, K)
    return code[:, 0::2] | (code[:, 1::2] << 4), sc.view(torch.uint8), gs


def torch_group_dequant(q, scale, G: int = 128):
    import torch

    M, K = q.shape
    return (q.view(torch.float8_e4m3fn).float().view(M, K // G, G) * scale.unsqueeze(-1)).view(M, K).to(torch.bfloat16)


# =====================================================================================================
# timing helpers
def _time(fn, n_sets: int = 1, per: int = 4, rep: int = 25, warmup: int = 3) -> float:
    """Median microseconds of one call: each timed sample runs `per` calls back to back (rotating sets)."""
    def sample(i):
        for j in range(per):
            fn((i * per + j) % n_sets)
    return harness.time_us(sample, n_sets=1, warmup=warmup, rep=rep) / per


def _copy_time(nbytes: int) -> float:
    """A device-to-device copy moving `nbytes` in total (nbytes/2 read + nbytes/2 written)."""
    import torch

    half = max(1, nbytes // 2)
    src = torch.empty(half, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    t = _time(lambda i: dst.copy_(src), per=4, rep=25)
    del src, dst
    return t


def _compile(fn, name: str, notes: dict):
    """torch.compile(fn) or None, recording why it failed or how long it took."""
    import torch

    try:
        t0 = time.time()
        cf = torch.compile(fn, dynamic=False)
        return cf, t0
    except Exception as e:  # pragma: no cover - depends on the installed torch/triton
        notes[name] = f"torch.compile failed: {type(e).__name__}: {str(e)[:300]}"
        return None, None


def _first_call(cf, args, name: str, notes: dict, t0):
    try:
        out = cf(*args)
        import torch

        torch.cuda.synchronize()
        notes[name] = f"compiled in {time.time() - t0:.1f} s"
        return out
    except Exception as e:  # pragma: no cover
        notes[name] = f"torch.compile failed at first call: {type(e).__name__}: {str(e)[:300]}"
        return None


def _bits_equal(a, b) -> int:
    """Number of positions where two tensors differ as raw bytes (uint8 / fp8 / fp32 views)."""
    import torch

    def raw(t):
        t = t.contiguous()
        if t.dtype in (torch.float32,):
            return t.view(torch.int32)
        if t.element_size() == 1:
            return t.view(torch.uint8)
        return t
    return int((raw(a) != raw(b)).sum())


# =====================================================================================================
def run(args) -> tuple[list, dict, dict, dict]:
    import torch

    from fp8lab import scaling
    from fp8lab.scaling import QuantSpec

    from . import nvfp4 as K4
    from . import quant as KQ

    torch.manual_seed(0)
    dev = torch.cuda.get_device_properties(0)
    M, K = SMALL if args.small else BIG
    checks: dict = {}
    notes: dict = {}
    records: list = []

    # ---- ceilings ----
    ceilings = {"copy_gbps_2GiB": harness.copy_bandwidth_gbps(), "l2_bytes": getattr(dev, "L2_cache_size", None),
                "sms": dev.multi_processor_count}
    log(f"device {dev.name}: copy {ceilings['copy_gbps_2GiB']:.0f} GB/s (2 GiB, read+write)")

    # ---- exhaustive conversion checks (all 2**32 fp32 inputs, ms each) ----
    for fmt in ("e4m3", "e5m2"):
        r = KQ.check_hw_vs_sw(fmt)
        checks[f"{fmt}_hw_vs_sw_all_fp32"] = r
        log(f"check {fmt}: hardware cvt vs software over 2^32 inputs: {r['mismatches']} mismatches (non-NaN), "
            f"NaN -> bytes {[hex(b) for b in r['nan_bytes']]}")
    r = K4.check_e2m1_variants()
    checks["e2m1_variants_all_fp32"] = r
    log(f"check e2m1: bits vs branchless {r['bits_vs_branchless']}, branchy vs branchless {r['branchy_vs_branchless']}")

    def record(kernel, shape, dtype, t, nbytes, anchor="", anchor_t=None, copy_t=None, **extra):
        res = harness.Result(kernel=kernel, shape=shape, dtype=dtype, time_us=t, bytes=nbytes, anchor=anchor,
                             anchor_time_us=anchor_t, copy_gbps=(nbytes / (copy_t * 1e-6) / 1e9) if copy_t else None,
                             extra=dict(extra, copy_time_us=copy_t))
        d = res.record()
        records.append(d)
        floor = nbytes / (ceilings["copy_gbps_2GiB"] * 1e9) * 1e6 if nbytes else 0
        log(f"  {kernel:44s} {t:9.1f} us  {nbytes / 1e6:8.1f} MB  floor@copy {floor:7.1f} us  "
            f"{(d['gbps'] or 0):6.0f} GB/s  x{(d['fraction_of_copy_bw'] or 0):.2f} of copy  "
            + (f"speedup {d['speedup']:.2f} vs {anchor}" if d["speedup"] else ""))
        return d

    shape = f"[{M}, {K}]"
    # ================================================================================================
    # FP8 1 x 128 group quantization (the goal: >= 0.90 of copy, >= 1.5x torch eager)
    for dtype, tag in ((torch.bfloat16, "bf16"), (torch.float32, "f32")):
        log(f"\n== FP8 E4M3 1x128 group quantization, {tag} {shape}")
        x = torch.randn(M, K, device="cuda").to(dtype)
        n_sets = harness.sets_for_l2(x.numel() * x.element_size())
        xs = [x] + [torch.randn(M, K, device="cuda").to(dtype) for _ in range(n_sets - 1)]
        ng = K // 128
        nbytes = M * K * x.element_size() + M * K + M * ng * 4
        # reference: CPU contract on a slice (ours run on the same slice), torch on the whole tensor
        sl = xs[0][:32].contiguous()
        ref = scaling.quantize(sl.cpu(), QuantSpec("e4m3", "group", group_size=128))
        tq, ts = torch_group_quant(xs[0])
        pq, ps = torch_group_quant_pyscalar(xs[0])
        checks[f"torch eager with a Python-scalar '/ 448.0' vs true division, {tag}"] = {
            "scale_mismatches": _bits_equal(ps, ts), "code_mismatches": _bits_equal(pq.view(torch.uint8), tq.view(torch.uint8)),
            "groups": M * (K // 128)}
        del pq, ps
        variants = {"hw": dict(cvt="hw"), "sw": dict(cvt="sw"), "hw kmajor": dict(cvt="hw", scale_layout="kmajor")}
        times = {}
        outs = [(torch.empty(M, K, dtype=torch.uint8, device="cuda"),) for _ in xs]
        for vname, kw in variants.items():
            name = f"fp8 group128 {vname}"
            c, s = KQ.quantize_group(sl, nonfinite="propagate", **kw)
            ok_ref = _bits_equal(c.cpu(), ref.codes) == 0 and _bits_equal(s.cpu(), ref.scale) == 0
            c, s = KQ.quantize_group(xs[0], nonfinite="propagate", **kw)
            mism = _bits_equal(c, tq.view(torch.uint8)) + _bits_equal(s.contiguous(), ts)
            checks[f"{name} {tag}"] = {"equals_cpu_reference_slice": ok_ref, "mismatches_vs_torch_full": mism}
            if not ok_ref or mism:
                log(f"  {name}: VALIDATION FAILED (cpu slice ok={ok_ref}, {mism} mismatches vs torch) - not timed")
                continue
            sc_out = [s.clone() for _ in xs]
            times[vname] = _time(lambda i: KQ.quantize_group(xs[i], nonfinite="propagate", out=(outs[i][0], sc_out[i]), **kw),
                                 n_sets=len(xs))
        t_eager = _time(lambda i: torch_group_quant(xs[i]), n_sets=len(xs), per=2, rep=15)
        cf, t0 = _compile(torch_group_quant, f"compile group {tag}", notes) if not args.no_compile else (None, None)
        t_comp = None
        if cf is not None:
            o = _first_call(cf, (xs[0],), f"compile group {tag}", notes, t0)
            if o is not None:
                checks[f"torch.compile group {tag}"] = {"mismatches_vs_eager": _bits_equal(o[0], tq) + _bits_equal(o[1], ts)}
                t_comp = _time(lambda i: cf(xs[i]), n_sets=len(xs), per=2, rep=15)
        t_copy = _copy_time(nbytes)
        record(f"copy {nbytes / 1e6:.0f} MB (same bytes)", shape, "u8", t_copy, nbytes, copy_t=t_copy)
        record(f"torch eager group128 {tag}", shape, tag, t_eager, nbytes, copy_t=t_copy)
        if t_comp:
            record(f"torch.compile group128 {tag}", shape, tag, t_comp, nbytes, copy_t=t_copy)
        for vname, t in times.items():
            record(f"fp8 group128 {vname} {tag}", shape, tag, t, nbytes, "torch eager", t_eager, t_copy,
                   speedup_vs_compile=(t_comp / t) if t_comp else None, compile_note=notes.get(f"compile group {tag}"))
        del xs, outs, tq, ts
        torch.cuda.empty_cache()

    # ================================================================================================
    # per-tensor (dynamic: amax pass + cast; static: given amax) and 128 x 128 blocks, bf16
    log(f"\n== FP8 E4M3 per-tensor and 128x128 blocks, bf16 {shape}")
    x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    codes = torch.empty(M, K, dtype=torch.uint8, device="cuda")
    sl = x[:256].contiguous()
    # per-tensor
    ref = scaling.quantize(sl.cpu(), QuantSpec("e4m3", "tensor"))
    c, s = KQ.quantize_tensor(sl, nonfinite="propagate")
    ok = _bits_equal(c.cpu(), ref.codes) == 0 and _bits_equal(s.cpu().reshape(()), ref.scale.reshape(())) == 0
    tq, ts = torch_tensor_quant(x)
    c, s = KQ.quantize_tensor(x, nonfinite="propagate")
    mism = _bits_equal(c, tq.view(torch.uint8)) + _bits_equal(s.reshape(1), ts.reshape(1))
    checks["fp8 tensor bf16"] = {"equals_cpu_reference_slice": ok, "mismatches_vs_torch_full": mism}
    nbytes = M * K * 2 + M * K + 4
    t_copy = _copy_time(nbytes)
    if ok and not mism:
        amax_t = KQ.amax(x)
        sc = torch.empty((), device="cuda")
        t_dyn = _time(lambda i: KQ.quantize_tensor(x, nonfinite="propagate", out=(codes, sc)))
        t_sta = _time(lambda i: KQ.quantize_tensor(x, amax_t=amax_t, nonfinite="propagate", out=(codes, sc)))
        t_eager = _time(lambda i: torch_tensor_quant(x), per=2, rep=15)
        record("torch eager tensor bf16", shape, "bf16", t_eager, nbytes, copy_t=t_copy)
        record("fp8 tensor dynamic (amax+cast) hw bf16", shape, "bf16", t_dyn, nbytes, "torch eager", t_eager, t_copy)
        record("fp8 tensor static (given amax) hw bf16", shape, "bf16", t_sta, nbytes, "torch eager", t_eager, t_copy)
    # blocks
    ref = scaling.quantize(sl.cpu(), QuantSpec("e4m3", "block"))
    c, s = KQ.quantize_block(sl, nonfinite="propagate")
    ok = _bits_equal(c.cpu(), ref.codes) == 0 and _bits_equal(s.cpu(), ref.scale) == 0
    tq, ts = torch_block_quant(x)
    c, s = KQ.quantize_block(x, nonfinite="propagate")
    mism = _bits_equal(c, tq.view(torch.uint8)) + _bits_equal(s, ts)
    checks["fp8 block bf16"] = {"equals_cpu_reference_slice": ok, "mismatches_vs_torch_full": mism}
    nbytes = M * K * 2 + M * K + (M // 128) * (K // 128) * 4
    t_copy = _copy_time(nbytes)
    if ok and not mism:
        sc = torch.empty_like(s)
        t_eager = _time(lambda i: torch_block_quant(x), per=2, rep=15)
        record("torch eager block128 bf16", shape, "bf16", t_eager, nbytes, copy_t=t_copy)
        for cvt in ("hw", "sw"):
            t = _time(lambda i: KQ.quantize_block(x, cvt=cvt, nonfinite="propagate", out=(codes, sc)))
            record(f"fp8 block128x128 {cvt} bf16", shape, "bf16", t, nbytes, "torch eager", t_eager, t_copy)
    # dequant (group codes -> bf16)
    c, s = KQ.quantize_group(x, nonfinite="propagate")
    d_ref = torch_group_dequant(c, s)
    out = torch.empty(M, K, dtype=torch.bfloat16, device="cuda")
    d = KQ.dequantize(c, s, "group", out_dtype=torch.bfloat16, out=out)
    mism = _bits_equal(d.view(torch.int16), d_ref.view(torch.int16))
    checks["fp8 group dequant bf16"] = {"mismatches_vs_torch_full": mism}
    nbytes = M * K + M * (K // 128) * 4 + M * K * 2
    t_copy = _copy_time(nbytes)
    if not mism:
        t_eager = _time(lambda i: torch_group_dequant(c, s), per=2, rep=15)
        t = _time(lambda i: KQ.dequantize(c, s, "group", out_dtype=torch.bfloat16, out=out))
        record("torch eager group dequant -> bf16", shape, "e4m3", t_eager, nbytes, copy_t=t_copy)
        record("fp8 group dequant -> bf16", shape, "e4m3", t, nbytes, "torch eager", t_eager, t_copy)
    del x, codes, tq, ts, c, s, d, d_ref, out
    torch.cuda.empty_cache()

    # ================================================================================================
    # NVFP4 (goal: >= 0.85 of copy); E2M1 branchless vs branchy vs bits
    log(f"\n== NVFP4 quantization, bf16 {shape}")
    x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    gam = KQ.amax(x)
    packed = torch.empty(M, K // 2, dtype=torch.uint8, device="cuda")
    scd = torch.empty(M, K // 16, dtype=torch.uint8, device="cuda")
    gso = torch.empty((), device="cuda")
    nbytes = M * K * 2 + M * K // 2 + M * K // 16 + 4
    sl = x[:64].contiguous()
    ref = scaling.quantize(sl.cpu(), QuantSpec("e2m1", "nvfp4"))
    tp, tsc, tgs = torch_nvfp4(x, gam)
    t_copy = _copy_time(nbytes)
    ntimes = {}
    for e2m1 in K4.E2M1_VARIANTS:
        for scv in ("sw", "hw"):
            name = f"nvfp4 {e2m1} scale-{scv}"
            q = K4.quantize(sl, e2m1=e2m1, scale_cvt=scv, nonfinite="propagate")
            ok = (_bits_equal(q.packed.cpu(), scaling.pack_nibbles(ref.codes)) == 0
                  and _bits_equal(q.scale_codes.cpu(), ref.scale_codes) == 0
                  and _bits_equal(q.global_scale.cpu().reshape(1), ref.global_scale.reshape(1)) == 0)
            q = K4.quantize(x, global_amax=gam, e2m1=e2m1, scale_cvt=scv, nonfinite="propagate")
            mism = _bits_equal(q.packed, tp) + _bits_equal(q.scale_codes, tsc)
            checks[name] = {"equals_cpu_reference_slice": ok, "mismatches_vs_torch_full": mism}
            if not ok or mism:
                log(f"  {name}: VALIDATION FAILED (cpu ok={ok}, {mism} vs torch) - not timed")
                continue
            ntimes[(e2m1, scv)] = _time(lambda i: K4.quantize(x, global_amax=gam, e2m1=e2m1, scale_cvt=scv,
                                                              nonfinite="propagate", out=(packed, scd, gso)))
    t_dyn = _time(lambda i: K4.quantize(x, nonfinite="propagate", out=(packed, scd, gso)))
    t_eager = _time(lambda i: torch_nvfp4(x, gam), per=1, rep=10)
    t_eager_dyn = _time(lambda i: torch_nvfp4(x), per=1, rep=10)
    t_comp = None
    if not args.no_compile:
        cf, t0 = _compile(torch_nvfp4, "compile nvfp4", notes)
        if cf is not None:
            o = _first_call(cf, (x, gam), "compile nvfp4", notes, t0)
            if o is not None:
                checks["torch.compile nvfp4"] = {"mismatches_vs_eager": _bits_equal(o[0], tp) + _bits_equal(o[1], tsc)}
                t_comp = _time(lambda i: cf(x, gam), per=2, rep=15)
    record(f"copy {nbytes / 1e6:.0f} MB (same bytes)", shape, "u8", t_copy, nbytes, copy_t=t_copy)
    record("torch eager nvfp4 (given amax)", shape, "bf16", t_eager, nbytes, copy_t=t_copy)
    record("torch eager nvfp4 (dynamic)", shape, "bf16", t_eager_dyn, nbytes, copy_t=t_copy)
    if t_comp:
        record("torch.compile nvfp4 (given amax)", shape, "bf16", t_comp, nbytes, copy_t=t_copy)
    t_branchy = ntimes.get(("branchy", "hw"))
    for (e2m1, scv), t in ntimes.items():
        record(f"nvfp4 {e2m1} scale-{scv} (given amax)", shape, "bf16", t, nbytes, "torch eager", t_eager, t_copy,
               speedup_vs_compile=(t_comp / t) if t_comp else None,
               speedup_vs_branchy=(t_branchy / t) if t_branchy else None, compile_note=notes.get("compile nvfp4"))
    record("nvfp4 bits dynamic (amax pass + quant)", shape, "bf16", t_dyn, nbytes, "torch eager", t_eager_dyn, t_copy)
    # dequant
    q = K4.quantize(x, global_amax=gam, nonfinite="propagate")
    out = torch.empty(M, K, dtype=torch.bfloat16, device="cuda")
    K4.dequantize(q, torch.bfloat16, out=out)
    nbytes_d = M * K // 2 + M * K // 16 + M * K * 2
    t_copy = _copy_time(nbytes_d)
    t = _time(lambda i: K4.dequantize(q, torch.bfloat16, out=out))
    record("nvfp4 dequant -> bf16", shape, "nvfp4", t, nbytes_d, copy_t=t_copy)
    del x, packed, scd, tp, tsc, out
    torch.cuda.empty_cache()

    # ================================================================================================
    # E2M1 conversion alone, compute-bound: dependent chains (see nvfp4.cu e2m1_chain_impl)
    log("\n== E2M1 conversion microbenchmark (dependent chains, compute-bound)")
    blocks, threads, iters = dev.multi_processor_count * 8, 256, (512 if args.small else 4096)
    conv = blocks * threads * iters
    chain = {}
    for v in ("baseline",) + K4.E2M1_VARIANTS:
        fn = K4.e2m1_chain_launcher(v, iters, blocks, threads)
        chain[v] = _time(lambda i: fn(), per=2, rep=15)
    for v in K4.E2M1_VARIANTS:
        t = chain[v]
        own = max(t - chain["baseline"], 1e-9)
        record(f"e2m1 chain {v}", f"{conv} conversions", "f32", t, 0,
               "e2m1 chain branchy" if v != "branchy" else "", chain["branchy"] if v != "branchy" else None,
               gconv_per_s=conv / (t * 1e-6) / 1e9, baseline_us=chain["baseline"], own_us=own,
               own_speedup_vs_branchy=(chain["branchy"] - chain["baseline"]) / own)
    return records, ceilings, checks, notes


# =====================================================================================================
SASS_KERNELS = {
    "quant.cu": ["quant_group_bf16_e4m3_hw", "quant_group_bf16_e4m3_sw", "quant_block_bf16_e4m3_hw"],
    "nvfp4.cu": ["nvfp4_quant_bf16_bits_hw", "nvfp4_quant_bf16_bits_sw", "nvfp4_quant_bf16_branchless_sw", "nvfp4_quant_bf16_branchy_sw",
                 "e2m1_chain_branchless", "e2m1_chain_branchy", "e2m1_chain_bits", "e2m1_chain_baseline"],
}


def sass_summary(arch: str, path: Path | None) -> dict:
    """Opcode counts of the key kernels, from nvcc -cubin + cuobjdump -sass (where the tools exist)."""
    nvcc, cuobjdump = shutil.which("nvcc"), shutil.which("cuobjdump")
    if not (nvcc and cuobjdump):
        return {"status": "nvcc/cuobjdump not found"}
    summary, text = {}, []
    with tempfile.TemporaryDirectory() as td:
        for src, kernels in SASS_KERNELS.items():
            cub = Path(td) / (src + ".cubin")
            # -ftz=true: what CuPy's NVRTC compile adds, so this is the code that runs
            r = subprocess.run([nvcc, f"-arch={arch}", "-std=c++17", "-ftz=true", "-cubin", f"-I{KDIR}", "-o", str(cub), str(KDIR / src)],
                               capture_output=True, text=True)
            if r.returncode:
                summary[src] = f"nvcc failed: {r.stderr[-300:]}"
                continue
            for k in kernels:
                s = subprocess.run([cuobjdump, "-sass", "-fun", k, str(cub)], capture_output=True, text=True).stdout
                ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", s)
                counts = {}
                for o in ops:
                    counts[o] = counts.get(o, 0) + 1
                top = dict(sorted(counts.items(), key=lambda kv: -kv[1])[:14])
                summary[k] = {"instructions": len(ops), "BRA": counts.get("BRA", 0), "MUFU": counts.get("MUFU", 0),
                              "F2FP": counts.get("F2FP", 0), "FCHK": counts.get("FCHK", 0), "top": top}
                text.append(f"==== {k} ({src}, {arch}): {len(ops)} instructions\n{s}")
    if path is not None:
        path.write_text("\n".join(text))
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fp8lab.kernels.bench quant", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--sass-out", default=None, help="full SASS listing (default: quant_sass.txt beside --out)")
    p.add_argument("--small", action="store_true", help=f"shape {SMALL} instead of {BIG} (quick; for notebooks)")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile anchors")
    args = p.parse_args(argv)
    from ._cuda import cuda_available, device_arch

    if not cuda_available():
        print("no CUDA device: nothing to measure (the notebooks show the recorded results)", file=sys.stderr)
        return 1
    records, ceilings, checks, notes = run(args)
    out = Path(args.out)
    sass = sass_summary(device_arch(), Path(args.sass_out) if args.sass_out else out.with_name(out.stem + "_sass.txt"))
    cmd = "python -m fp8lab.kernels.bench quant " + " ".join(argv if argv is not None else sys.argv[1:])
    harness.write_json(out, records, ceilings, command=cmd.strip())
    payload = json.loads(out.read_text())
    payload.update(checks=checks, notes=notes, sass=sass)
    out.write_text(json.dumps(payload, indent=1, default=float) + "\n")
    print()
    harness.print_table(records)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
