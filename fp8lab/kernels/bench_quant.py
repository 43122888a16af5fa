"""Benchmarks for FP8 and NVFP4 quantization kernels: `python -m fp8lab.kernels.bench quant`.

Writes outputs/kernels/quant.json (harness schema, plus "checks" and "sass"). File order as in llm.c dev/cuda:
  1. the references: the CPU contract (fp8lab.scaling) and torch's own path for the same math (eager and
     torch.compile, each validated too),
  2. our versions (fp8lab.kernels.quant / nvfp4, every variant),
  3. validation BEFORE timing (harness.Bench.validate, outputs poisoned): on the benchmarked tensor, ours == torch's
     path bit for bit, and on a slice ours == the CPU reference; a kernel that fails is recorded and not timed,
  4. timing: every variant of a section and its anchors (torch eager, torch.compile, a copy of the same bytes) in
     interleaved rounds (median and quartiles over --rounds), each sample several back-to-back calls; inputs
     several times the L2 (rotated copies).
Bytes counted: input read + codes written + scales written (the amax pass of a dynamic quantization is NOT
counted: it is the price of not knowing the scale in advance, and shows as a lower fraction of copy).

    python -m fp8lab.kernels.bench quant --shapes 16384x7168 --rounds 5 --out /tmp/quant.json
"""
from __future__ import annotations

import argparse
import sys
import time

from fp8lab import formats

from . import harness
from .reference import e2m1_midpoints

DEFAULT_OUT = harness.REPO / "outputs" / "kernels" / "quant.json"
# The lab's goals, as (label, kernel row, metric, threshold): report.format_goals(summary, GOALS)
GOALS = [
    ("FP8 1x128 group quant, bf16 [16384, 7168]: fraction of copy bw", "fp8 group128 hw bf16", "fraction_of_copy_bw", 0.90),
    ("FP8 1x128 group quant, bf16: speedup vs torch eager", "fp8 group128 hw bf16", "speedup", 1.5),
    ("NVFP4 quant (given global amax), bf16: fraction of copy bw", "nvfp4 bits scale-hw (given amax)", "fraction_of_copy_bw", 0.85),
]
BIG = (16384, 7168)      # 16k tokens x DeepSeek-V3's hidden size
SMALL = (2048, 1024)
E4M3_MAX, E2M1_MAX = formats.E4M3.max, formats.E2M1.max
E2M1_MIDPOINTS = e2m1_midpoints()
SASS_KERNELS = {
    "quant.cu": ["quant_group_bf16_e4m3_hw", "quant_group_bf16_e4m3_sw", "quant_block_bf16_e4m3_hw"],
    "nvfp4.cu": ["nvfp4_quant_bf16_bits_hw", "nvfp4_quant_bf16_bits_sw", "nvfp4_quant_bf16_branchless_sw",
                 "nvfp4_quant_bf16_branchy_sw", "e2m1_chain_branchless", "e2m1_chain_branchy", "e2m1_chain_bits",
                 "e2m1_chain_baseline"],
}


# =====================================================================================================
# 1. torch's own path for the same arithmetic (what one writes without a custom kernel)
def _c(v, like):
    """A 0-d CUDA (device) tensor: torch's CUDA division by a Python scalar or a CPU 0-d tensor is a
    multiplication by its reciprocal (not IEEE a / b); dividing by a device tensor is the true division."""
    import torch

    return torch.full((), v, dtype=torch.float32, device=like.device)


def torch_group_quant_pyscalar(x, G: int = 128, fmax: float = E4M3_MAX):
    """The same with `/ fmax` (a Python scalar), as such code is usually written: on CUDA this is amax * (1/448)."""
    import torch

    M, K = x.shape
    xf = x.float().view(M, K // G, G)
    scale = xf.abs().amax(dim=-1, keepdim=True) / fmax
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = (xf / scale).clamp(-fmax, fmax).to(torch.float8_e4m3fn)
    return q.view(M, K), scale.squeeze(-1)


def torch_group_quant(x, G: int = 128, fmax: float = E4M3_MAX):
    import torch

    M, K = x.shape
    xf = x.float().view(M, K // G, G)
    scale = xf.abs().amax(dim=-1, keepdim=True) / _c(fmax, x)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = (xf / scale).clamp(-fmax, fmax).to(torch.float8_e4m3fn)
    return q.view(M, K), scale.squeeze(-1)


def torch_tensor_quant(x, fmax: float = E4M3_MAX):
    import torch

    xf = x.float()
    scale = xf.abs().amax() / _c(fmax, x)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return (xf / scale).clamp(-fmax, fmax).to(torch.float8_e4m3fn), scale


def torch_block_quant(x, fmax: float = E4M3_MAX):
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
    gs = gamax / _c(E4M3_MAX * E2M1_MAX, x)
    gs = torch.where(gs > 0, gs, torch.ones_like(gs))
    bs = a.view(M, K // 16, 16).amax(dim=-1) / _c(E2M1_MAX, x) / gs
    sc = bs.clamp(max=E4M3_MAX).to(torch.float8_e4m3fn)
    s = (sc.float() * gs).unsqueeze(-1)
    y = torch.where(s > 0, xf.view(M, K // 16, 16) / s, torch.zeros_like(s))
    ay = y.abs()
    mag = torch.zeros(ay.shape, dtype=torch.uint8, device=ay.device)
    for mid, tie_down in E2M1_MIDPOINTS:  # the seed's seven compares, '>' where a tie rounds down (RNE)
        mag += (ay > mid) if tie_down else (ay >= mid)
    code = (mag | (torch.signbit(y).to(torch.uint8) << 3)).view(M, K)
    return code[:, 0::2] | (code[:, 1::2] << 4), sc.view(torch.uint8), gs


def torch_group_dequant(q, scale, G: int = 128):
    import torch

    M, K = q.shape
    return (q.view(torch.float8_e4m3fn).float().view(M, K // G, G) * scale.unsqueeze(-1)).view(M, K).to(torch.bfloat16)


# =====================================================================================================
def _bits_equal(a, b) -> int:
    """Number of positions where two tensors differ as raw bytes (uint8 / fp8 / fp32 views)."""
    import torch

    def raw(t):
        t = t.contiguous()
        if t.dtype == torch.float32:
            return t.view(torch.int32)
        return t.view(torch.uint8) if t.element_size() == 1 else t
    return int((raw(a) != raw(b)).sum())


def _compiled_check(checks: dict, name: str, got, ref) -> str:
    """torch.compile's quantizer is an anchor (what a user would pick), timed even where it is not bit-identical to
    eager torch: on CUDA, Triton divides float32 with an approximate division (div.full.f32), so a value on a
    rounding boundary can land on the neighbouring code. The differences are counted and recorded, not hidden."""
    codes, scales = _bits_equal(got[0], ref[0]), _bits_equal(got[1], ref[1])
    checks[name] = {"codes_differing_from_eager": int(codes), "scales_differing_from_eager": int(scales),
                    "codes": int(got[0].numel()), "scales": int(got[1].numel())}
    return (f"torch's own compiled path; {codes} of {got[0].numel()} codes and {scales} of {got[1].numel()} scales "
            "differ from eager torch")


def _compiled(fn, args, name: str, notes: dict):
    """torch.compile(fn), called once on args: (compiled fn, its output) or (None, None), the reason in notes."""
    import torch

    t0 = time.time()
    try:
        cf = torch.compile(fn, dynamic=False)
        out = cf(*args)
        torch.cuda.synchronize()
        notes[name] = f"compiled in {time.time() - t0:.1f} s"
        return cf, out
    except Exception as e:  # pragma: no cover - depends on the installed torch/triton
        notes[name] = f"torch.compile failed: {type(e).__name__}: {str(e)[:300]}"
        return None, None


class Section:
    """One problem (shape, bytes moved): validated contenders timed together in interleaved rounds, then recorded."""

    def __init__(self, bench: harness.Bench, shape: str, dtype: str, nbytes: int, per: int = 4):
        self.b, self.shape, self.dtype, self.nbytes, self.per = bench, shape, dtype, nbytes, per
        self.timers: dict = {}

    def add(self, name: str, fn, n_sets: int = 1, per: int | None = None, trusted: str | None = None):
        """fn(i) runs one call on input set i. `trusted`: an anchor timed without a check of its own (why)."""
        if trusted:
            self.b.trust(name, trusted)
        p = per or self.per
        self.timers[name] = lambda: (harness.time_us(fn, n_sets=n_sets, warmup=3, rep=25, per=p), "events")

    def run(self, anchor: str | None = None, **extra) -> dict:
        ok = {n: f for n, f in self.timers.items() if self.b.validation.get(n, {}).get("passed")}
        t = self.b.compare(ok)
        copy = t.pop("copy", None)
        if copy is not None:  # the bandwidth anchor's own row, as the notebooks show it
            self.b.record(harness.Result(f"copy {self.nbytes / 1e6:.0f} MB (same bytes)", self.shape, "u8", copy.median,
                                         bytes=self.nbytes, copy_gbps=self.nbytes / (copy.median * 1e-6) / 1e9,
                                         extra={"copy_time_us": copy.median}), copy)
        base = t.get(anchor).median if anchor in t else None
        for name, timing in t.items():
            rec = self.b.record(harness.Result(
                name, self.shape, self.dtype, timing.median, bytes=self.nbytes,
                anchor=anchor if (anchor and name != anchor) else "", anchor_time_us=base if name != anchor else None,
                copy_gbps=self.nbytes / (copy.median * 1e-6) / 1e9 if copy else None,
                extra={**extra.get(name, {}), "copy_time_us": copy.median if copy else None}), timing)
            print(f"  {name:44s} {timing.median:9.1f} us [{timing.q1:.1f}, {timing.q3:.1f}]  {(rec['gbps'] or 0):6.0f} GB/s"
                  f"  x{(rec['fraction_of_copy_bw'] or 0):.2f} of copy", flush=True)
        return t


def run(bench: harness.Bench, M: int, K: int, no_compile: bool) -> None:
    import torch

    from fp8lab import scaling
    from fp8lab.scaling import QuantSpec

    from . import nvfp4 as K4
    from . import quant as KQ

    torch.manual_seed(0)
    dev = torch.cuda.get_device_properties(0)
    checks, notes = bench.extra.setdefault("checks", {}), bench.extra.setdefault("compile_notes", {})
    bench.ceilings.update(copy_gbps_2GiB=harness.copy_bandwidth_gbps(), l2_bytes=getattr(dev, "L2_cache_size", None),
                          sms=dev.multi_processor_count)
    print(f"device {dev.name}: copy {bench.ceilings['copy_gbps_2GiB']:.0f} GB/s (2 GiB, read+write)", flush=True)
    for fmt in ("e4m3", "e5m2"):  # exhaustive conversion checks (all 2**32 fp32 inputs, ms each)
        checks[f"{fmt}_hw_vs_sw_all_fp32"] = r = KQ.check_hw_vs_sw(fmt)
        print(f"check {fmt}: hardware cvt vs software over 2^32 inputs: {r['mismatches']} mismatches (non-NaN)", flush=True)
    checks["e2m1_variants_all_fp32"] = r = K4.check_e2m1_variants()
    print(f"check e2m1: bits vs branchless {r['bits_vs_branchless']}, branchy vs branchless {r['branchy_vs_branchless']}")
    shape = f"[{M}, {K}]"

    def copy_anchor(sec):
        half = max(1, sec.nbytes // 2)
        src = torch.empty(half, dtype=torch.uint8, device="cuda").random_()
        dst = torch.empty_like(src)
        sec.add("copy", lambda i: dst.copy_(src), trusted="device-to-device copy of the same bytes (the bandwidth anchor)")

    def exact(name, got, ref_cpu, want_full, got_full):
        """Validation: the slice equals the CPU reference and the whole tensor equals torch's path, bit for bit."""
        mism = sum(_bits_equal(a, b) for a, b in zip(got_full, want_full))
        ok_ref = all(_bits_equal(a.cpu(), b) == 0 for a, b in zip(got, ref_cpu))
        checks[name] = {"equals_cpu_reference_slice": ok_ref, "mismatches_vs_torch_full": mism}
        return ok_ref and mism == 0, checks[name]

    # ---- FP8 1 x 128 groups (goals: >= 0.90 of copy, >= 1.5x torch eager) ------------------------------------
    for dtype, tag in ((torch.bfloat16, "bf16"), (torch.float32, "f32")):
        print(f"\n== FP8 E4M3 1x128 group quantization, {tag} {shape}", flush=True)
        xs = [torch.randn(M, K, device="cuda").to(dtype)]
        xs += [torch.randn(M, K, device="cuda").to(dtype) for _ in range(harness.sets_for_l2(xs[0].nbytes) - 1)]
        sec = Section(bench, shape, tag, M * K * xs[0].element_size() + M * K + M * (K // 128) * 4)
        sl = xs[0][:32].contiguous()
        ref = scaling.quantize(sl.cpu(), QuantSpec("e4m3", "group", group_size=128))
        tq, ts = torch_group_quant(xs[0])
        pq, ps = torch_group_quant_pyscalar(xs[0])
        checks[f"torch eager with a Python-scalar '/ fmax' vs true division, {tag}"] = {
            "scale_mismatches": _bits_equal(ps, ts), "code_mismatches": _bits_equal(pq.view(torch.uint8), tq.view(torch.uint8)),
            "groups": M * (K // 128)}
        outs = [(torch.empty(M, K, dtype=torch.uint8, device="cuda"), torch.empty(M, K // 128, device="cuda")) for _ in xs]
        for vname, kw in {"hw": dict(cvt="hw"), "sw": dict(cvt="sw"), "hw kmajor": dict(cvt="hw", scale_layout="kmajor")}.items():
            name = f"fp8 group128 {vname} {tag}"
            o = KQ.quantize_group(xs[0], nonfinite="propagate", **kw)  # the layout of the scales this variant writes
            out0 = (outs[0][0], o[1])
            bench.validate(name, lambda kw=kw, out0=out0: (KQ.quantize_group(sl, nonfinite="propagate", **kw),
                                                           KQ.quantize_group(xs[0], nonfinite="propagate", out=out0, **kw)),
                           lambda r: exact(name, r[0], (ref.codes, ref.scale), (tq.view(torch.uint8), ts),
                                           (r[1][0], r[1][1].contiguous())), outputs=out0)
            scs = [o[1].clone() for _ in xs]
            sec.add(name, lambda i, kw=kw, scs=scs: KQ.quantize_group(xs[i], nonfinite="propagate", out=(outs[i][0], scs[i]), **kw),
                    n_sets=len(xs))
        bench.validate(f"torch eager group128 {tag}", lambda: torch_group_quant(xs[0]),
                       lambda r: (_bits_equal(r[0], tq) + _bits_equal(r[1], ts) == 0, {}))
        sec.add(f"torch eager group128 {tag}", lambda i: torch_group_quant(xs[i]), n_sets=len(xs), per=2)
        if not no_compile:
            cf, o = _compiled(torch_group_quant, (xs[0],), f"compile group {tag}", notes)
            if cf is not None:
                sec.add(f"torch.compile group128 {tag}", lambda i: cf(xs[i]), n_sets=len(xs), per=2,
                        trusted=_compiled_check(checks, f"torch.compile group128 {tag}", o, (tq, ts)))
        copy_anchor(sec)
        sec.run(anchor=f"torch eager group128 {tag}")
        torch.cuda.empty_cache()

    # ---- per-tensor (dynamic: amax pass + cast; static: given amax), 128 x 128 blocks, group dequant, bf16 --------
    print(f"\n== FP8 E4M3 per-tensor, 128x128 blocks and dequant, bf16 {shape}", flush=True)
    x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    codes = torch.empty(M, K, dtype=torch.uint8, device="cuda")
    sl = x[:256].contiguous()
    ref = scaling.quantize(sl.cpu(), QuantSpec("e4m3", "tensor"))
    tq, ts = torch_tensor_quant(x)
    sc0 = torch.empty((), device="cuda")
    amax_t = KQ.amax(x)
    sec = Section(bench, shape, "bf16", M * K * 2 + M * K + 4)
    for name, kw in (("fp8 tensor dynamic (amax+cast) hw bf16", {}), ("fp8 tensor static (given amax) hw bf16", {"amax_t": amax_t})):
        bench.validate(name, lambda kw=kw: (KQ.quantize_tensor(sl, nonfinite="propagate"),
                                            KQ.quantize_tensor(x, nonfinite="propagate", out=(codes, sc0), **kw)),
                       lambda r: exact(name, (r[0][0], r[0][1].reshape(())), (ref.codes, ref.scale.reshape(())),
                                       (tq.view(torch.uint8), ts.reshape(1)), (r[1][0], r[1][1].reshape(1))), outputs=(codes, sc0))
        sec.add(name, lambda i, kw=kw: KQ.quantize_tensor(x, nonfinite="propagate", out=(codes, sc0), **kw))
    sec.add("torch eager tensor bf16", lambda i: torch_tensor_quant(x), per=2, trusted="torch's own path (validated above as the reference of the full tensor)")
    copy_anchor(sec)
    sec.run(anchor="torch eager tensor bf16")
    ref = scaling.quantize(sl.cpu(), QuantSpec("e4m3", "block"))
    tq, ts = torch_block_quant(x)
    scb = torch.empty_like(ts)
    sec = Section(bench, shape, "bf16", M * K * 2 + M * K + (M // 128) * (K // 128) * 4)
    for cvt in ("hw", "sw"):
        name = f"fp8 block128x128 {cvt} bf16"
        bench.validate(name, lambda cvt=cvt: (KQ.quantize_block(sl, cvt=cvt, nonfinite="propagate"),
                                              KQ.quantize_block(x, cvt=cvt, nonfinite="propagate", out=(codes, scb))),
                       lambda r: exact(name, r[0], (ref.codes, ref.scale), (tq.view(torch.uint8), ts), r[1]), outputs=(codes, scb))
        sec.add(name, lambda i, cvt=cvt: KQ.quantize_block(x, cvt=cvt, nonfinite="propagate", out=(codes, scb)))
    sec.add("torch eager block128 bf16", lambda i: torch_block_quant(x), per=2, trusted="torch's own path")
    copy_anchor(sec)
    sec.run(anchor="torch eager block128 bf16")
    c, s = KQ.quantize_group(x, nonfinite="propagate")
    d_ref = torch_group_dequant(c, s)
    out = torch.empty(M, K, dtype=torch.bfloat16, device="cuda")
    sec = Section(bench, shape, "e4m3", M * K + M * (K // 128) * 4 + M * K * 2)
    bench.validate("fp8 group dequant -> bf16", lambda: KQ.dequantize(c, s, "group", out_dtype=torch.bfloat16, out=out),
                   lambda r: (_bits_equal(r.view(torch.int16), d_ref.view(torch.int16)) == 0, {}), outputs=(out,))
    sec.add("fp8 group dequant -> bf16", lambda i: KQ.dequantize(c, s, "group", out_dtype=torch.bfloat16, out=out))
    sec.add("torch eager group dequant -> bf16", lambda i: torch_group_dequant(c, s), per=2, trusted="torch's own path")
    copy_anchor(sec)
    sec.run(anchor="torch eager group dequant -> bf16")
    torch.cuda.empty_cache()

    # ---- NVFP4 (goal: >= 0.85 of copy); E2M1 branchless vs branchy vs bits --------------------------------------
    print(f"\n== NVFP4 quantization, bf16 {shape}", flush=True)
    x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    gam = KQ.amax(x)
    packed = torch.empty(M, K // 2, dtype=torch.uint8, device="cuda")
    scd = torch.empty(M, K // 16, dtype=torch.uint8, device="cuda")
    gso = torch.empty((), device="cuda")
    sl = x[:64].contiguous()
    ref = scaling.quantize(sl.cpu(), QuantSpec("e2m1", "nvfp4"))
    tp, tsc, _ = torch_nvfp4(x, gam)
    sec = Section(bench, shape, "bf16", M * K * 2 + M * K // 2 + M * K // 16 + 4)
    for e2m1 in K4.E2M1_VARIANTS:
        for scv in ("sw", "hw"):
            name = f"nvfp4 {e2m1} scale-{scv} (given amax)"
            bench.validate(name, lambda e2m1=e2m1, scv=scv: (
                K4.quantize(sl, e2m1=e2m1, scale_cvt=scv, nonfinite="propagate"),
                K4.quantize(x, global_amax=gam, e2m1=e2m1, scale_cvt=scv, nonfinite="propagate", out=(packed, scd, gso))),
                lambda r: exact(name, (r[0].packed, r[0].scale_codes, r[0].global_scale.reshape(1)),
                                (scaling.pack_nibbles(ref.codes), ref.scale_codes, ref.global_scale.reshape(1)),
                                (tp, tsc), (r[1].packed, r[1].scale_codes)), outputs=(packed, scd, gso))
            sec.add(name, lambda i, e2m1=e2m1, scv=scv: K4.quantize(x, global_amax=gam, e2m1=e2m1, scale_cvt=scv,
                                                                    nonfinite="propagate", out=(packed, scd, gso)))
    bench.validate("nvfp4 bits dynamic (amax pass + quant)", lambda: K4.quantize(x, nonfinite="propagate", out=(packed, scd, gso)),
                   lambda r: (_bits_equal(r.packed, tp) + _bits_equal(r.scale_codes, tsc) == 0, {}), outputs=(packed, scd, gso))
    sec.add("nvfp4 bits dynamic (amax pass + quant)", lambda i: K4.quantize(x, nonfinite="propagate", out=(packed, scd, gso)))
    sec.add("torch eager nvfp4 (given amax)", lambda i: torch_nvfp4(x, gam), per=1, trusted="torch's own path (the full-tensor reference above)")
    sec.add("torch eager nvfp4 (dynamic)", lambda i: torch_nvfp4(x), per=1, trusted="torch's own path")
    if not no_compile:
        cf, o = _compiled(torch_nvfp4, (x, gam), "compile nvfp4", notes)
        if cf is not None:
            sec.add("torch.compile nvfp4 (given amax)", lambda i: cf(x, gam), per=2,
                    trusted=_compiled_check(checks, "torch.compile nvfp4 (given amax)", o, (tp, tsc)))
    copy_anchor(sec)
    t = sec.run(anchor="torch eager nvfp4 (given amax)")
    branchy = t.get("nvfp4 branchy scale-hw (given amax)")
    for r in bench.results:
        if r["kernel"].startswith("nvfp4 ") and branchy and r["shape"] == shape:
            r["speedup_vs_branchy"] = branchy.median / r["time_us"]
    q = K4.quantize(x, global_amax=gam, nonfinite="propagate")
    out = torch.empty(M, K, dtype=torch.bfloat16, device="cuda")
    sec = Section(bench, shape, "nvfp4", M * K // 2 + M * K // 16 + M * K * 2)
    want = scaling.dequantize(scaling.quantize(x[:64].float().cpu(), QuantSpec("e2m1", "nvfp4", nonfinite="propagate")))
    bench.validate("nvfp4 dequant -> bf16", lambda: K4.dequantize(K4.quantize(x[:64].contiguous(), nonfinite="propagate"), torch.bfloat16),
                   lambda r: (_bits_equal(r.cpu().view(torch.int16), want.to(torch.bfloat16).view(torch.int16)) == 0, {}))
    sec.add("nvfp4 dequant -> bf16", lambda i: K4.dequantize(q, torch.bfloat16, out=out))
    copy_anchor(sec)
    sec.run()
    torch.cuda.empty_cache()

    # ---- the E2M1 conversion alone, compute-bound: dependent chains (nvfp4.cu e2m1_chain_impl) -------------------
    print("\n== E2M1 conversion microbenchmark (dependent chains, compute-bound)", flush=True)
    blocks, threads, iters = dev.multi_processor_count * 8, 256, (512 if M * K <= SMALL[0] * SMALL[1] else 4096)
    conv = blocks * threads * iters
    sec = Section(bench, f"{conv} conversions", "f32", 0, per=2)
    for v in ("baseline",) + K4.E2M1_VARIANTS:  # validated over all 2**32 inputs above (check_e2m1_variants)
        fn = K4.e2m1_chain_launcher(v, iters, blocks, threads)
        sec.add(f"e2m1 chain {v}", lambda i, fn=fn: fn(),
                trusted="the exhaustive check_e2m1_variants above" if checks["e2m1_variants_all_fp32"]["bits_vs_branchless"] == 0 else None)
    t = sec.run(anchor="e2m1 chain branchy")
    base = t.get("e2m1 chain baseline")
    for r in bench.results:
        if r["kernel"].startswith("e2m1 chain") and base:
            own = max(r["time_us"] - base.median, 1e-9)
            r.update(gconv_per_s=conv / (r["time_us"] * 1e-6) / 1e9, baseline_us=base.median, own_us=own)


def sass_summary(cc: int) -> dict:
    """Opcode counts of the key kernels as the device runs them (fp8lab.kernels.sass: the loader's exact compile)."""
    from . import sass

    out = {}
    for src, names in SASS_KERNELS.items():
        ks = sass.kernels(src, cc)
        for k in names:
            c = ks[k].opcodes()
            out[k] = {"instructions": sum(c.values()), "BRA": c.get("BRA", 0), "MUFU": c.get("MUFU", 0),
                      "F2FP": c.get("F2FP", 0), "FCHK": c.get("FCHK", 0), "top": dict(c.most_common(14))}
    return out


def _shape(text: str) -> tuple[int, int]:
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts) or int(parts[1]) % 128:
        raise argparse.ArgumentTypeError(f"{text!r}: expected MxK with K a multiple of 128, e.g. 16384x7168")
    return int(parts[0]), int(parts[1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fp8lab.kernels.bench quant", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--small", action="store_true", help=f"shape {SMALL} instead of {BIG} (quick; for notebooks)")
    p.add_argument("--shapes", type=_shape, default=None, help="one MxK activation shape, e.g. 16384x7168")
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile anchors")
    args = p.parse_args(argv)
    from ._cuda import device_cc

    M, K = args.shapes or (SMALL if args.small else BIG)
    cmd = "python -m fp8lab.kernels.bench quant " + " ".join(sys.argv[1:] if argv is None else argv)
    bench = harness.Bench("quant", args.out, cmd.strip(), rounds=args.rounds)
    run(bench, M, K, args.no_compile)
    bench.extra["sass"] = sass_summary(device_cc())
    bench.write()
    print()
    harness.print_table(bench.results)
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
