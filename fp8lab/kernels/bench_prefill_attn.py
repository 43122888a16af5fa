"""Chunked-prefill attention, bf16 vs FP8 KV cache, beside torch SDPA: `python -m fp8lab.kernels.bench prefill_attn`.

    python -m fp8lab.kernels.bench prefill_attn --chunks 512,2048,8192 --contexts 32768,131072,262144
    python -m fp8lab.kernels.bench prefill_attn --chunks 16,64,256 --contexts 32768 --out /tmp/pf.json

Writes outputs/kernels/prefill_attention.json (harness schema, plus "napkin", "crossover", "notes").

The problem: B = 1 sequence, 32 query heads over 8 KV heads, head_dim 128 (a Llama-3-8B layer's attention); a chunk of
Mq query tokens at absolute positions Lc .. Lc + Mq - 1 attends to the Lc cached tokens and causally to itself.
Contenders, on identical K/V values (the FP8 cache is the bf16 values quantized per tensor):
  * ours (attention_prefill.cu), the same kernel on a bf16 and on an FP8 cache, 4 warps (64 rows per block) and 8
    warps (128 rows: half the loads and FP8 widenings per flop); GQA packing where a chunk is shorter than a block;
  * torch SDPA on the bf16 cache with the lower-right causal mask (torch.nn.attention.bias.causal_lower_right, the
    chunked-prefill semantics; `is_causal=True` would align top-left): with enable_gqa, or on K/V expanded to the
    query heads where torch's kernels refuse GQA with a mask -- whichever works is recorded by name.
Each is checked against float32 attention on the dequantized cache for three query tokens (first, middle, last of
the chunk) with its output poisoned first, BEFORE it is timed, and the contenders of a point are timed in interleaved
rounds (CUDA events, median over rounds with the quartiles). FLOPs = 4 Hq D sum_t (Lc + t + 1); bytes = the K/V cache
read once (the floor: a block re-reads tiles through L2). Copy bandwidth and a cuBLAS bf16 matmul rate are measured in
the same run, so every point can be placed against both ceilings.

The question it answers: from which arithmetic intensity on does the FP8 cache stop paying? Halving the bytes saves
time only while the kernel waits for memory; the widening of every FP8 tile (conversions on CUDA cores, a write and a
read of shared memory) is paid per block and so grows with the flops. `napkin` rows print the arithmetic.

Report functions for notebooks (read the JSON; nothing is timed on a CPU): load, summary_rows, format_summary,
format_napkin, crossover, seed004_reading, format_provenance, plot_ratio.
"""
from __future__ import annotations

import argparse
import math
import sys
import time

from . import harness

DEFAULT_OUT = harness.REPO / "outputs" / "kernels" / "prefill_attention.json"
B, HQ, HK, D = 1, 32, 8, 128
CHUNKS = (16, 64, 256, 512, 2048, 8192)
CONTEXTS = (32768, 131072, 262144)
SMALL = dict(chunks=(64, 512), contexts=(8192,))
SEED004 = dict(context=250_000, ttft_bf16_s=34.0, ttft_fp8_s=45.0)
#: an assumed dense ~30B geometry for the attention share of a prefill (the seed's Qwen3.8-27B config is not public):
#: 64 layers, 64 query / 8 KV heads of 128, 32e9 parameters (Qwen3-32B's published shape)
ASSUMED_MODEL = dict(name="dense 32B-class (64 layers, 64q/8kv heads x 128)", n_layers=64, n_q_heads=64, head_dim=128,
                     params=32e9)


def flops_of(Mq: int, Lc: int, Hq: int = HQ, d: int = D, b: int = B) -> float:
    """4 Hq D sum_{t < Mq} (Lc + t + 1): QK^T and PV over the keys each query sees (causal within the chunk)."""
    return 4.0 * b * Hq * d * (Mq * Lc + Mq * (Mq + 1) / 2)


def kv_bytes(L: int, kv: str, Hk: int = HK, d: int = D, b: int = B) -> int:
    return 2 * b * Hk * L * d * (2 if kv == "bf16" else 1)


def matmul_tflops(n: int = 8192) -> float:
    """cuBLAS bf16 n x n x n on random data (the device's practical tensor-core rate), TFLOP/s."""
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    t = harness.time_us(lambda i: torch.matmul(a, b), warmup=3, rep=10)
    del a, b
    return 2 * n**3 / (t * 1e-6) / 1e12


# ---- one context: the cache, then every chunk -----------------------------------------------------------------
def reference_rows(q, k, v, Lc: int, toks, ks=None, vs=None):
    """float32 attention on the GPU for a few query tokens: {token: [Hq, D]} (dequantized with fp8lab.formats)."""
    import torch

    from fp8lab import formats

    tab = formats.E4M3.table().to(k.device)
    Mq = q.shape[2]
    kv_len = Lc + Mq
    kf = (tab[k[0, :, :kv_len].long()] * ks) if ks is not None else k[0, :, :kv_len].float()
    vf = (tab[v[0, :, :kv_len].long()] * vs) if vs is not None else v[0, :, :kv_len].float()
    Hk, G = k.shape[1], q.shape[1] // k.shape[1]
    out = {}
    for t in toks:  # query head h = kh * G + g reads KV head kh
        qt = q[0, :, t].float().reshape(Hk, G, -1)
        s = torch.einsum("kgd,knd->kgn", qt, kf[:, : Lc + t + 1]) / math.sqrt(q.shape[-1])
        out[t] = torch.einsum("kgn,knd->kgd", torch.softmax(s, -1), vf[:, : Lc + t + 1]).reshape(Hk * G, -1)
    return out


def check(out, ref) -> tuple[bool, dict]:
    import torch

    from . import tolerances

    num = den = mx = 0.0
    for t, r in ref.items():
        d = out[0, :, t].float() - r
        num += float(torch.sum(d * d))
        den += float(torch.sum(r * r))
        mx = max(mx, float(d.abs().max()))
    rel = math.sqrt(num / max(den, 1e-30))
    ok = bool(rel <= tolerances.ATTENTION_BENCH_REL_RMS)
    return ok, {"max_abs_err": mx, "rel_rms_err": rel, "valid": ok}


def sdpa_candidates(q, k, v):
    """torch SDPA calls with the lower-right causal mask, in order of preference: (name, zero-arg callable)."""
    import torch
    from torch.nn.attention.bias import causal_lower_right

    F = torch.nn.functional
    Mq, L = q.shape[2], k.shape[2]
    bias = causal_lower_right(Mq, L)
    G = q.shape[1] // k.shape[1]
    yield "torch_sdpa[gqa,lower_right]", lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True)
    ke, ve = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
    yield "torch_sdpa[expanded,lower_right]", lambda: F.scaled_dot_product_attention(q, ke, ve, attn_mask=bias)


def bench_context(bench: harness.Bench, Lc: int, chunks, copy_gbps: float, mma_tflops: float, torch_too: bool = True,
                  rounds: int = 3, variants=("w4", "w8"), budget_end: float = float("inf")) -> list:
    import torch

    from . import attention_prefill as pf
    from .reference import quantize_kv

    notes = []
    Lkv = Lc + max(chunks)
    g = torch.Generator(device="cuda").manual_seed(Lc)
    k = torch.randn(B, HK, Lkv, D, device="cuda", generator=g, dtype=torch.bfloat16)
    v = torch.randn(B, HK, Lkv, D, device="cuda", generator=g, dtype=torch.bfloat16)
    kc, ks = quantize_kv(k)
    vc, vs = quantize_kv(v)
    for Mq in chunks:
        if time.time() > budget_end:
            notes.append({"shape": f"Mq{Mq} Lc{Lc}", "error": "skipped: time budget spent"})
            continue
        shape = f"B{B} Hq{HQ} Hk{HK} D{D} Mq{Mq} Lc{Lc}"
        print(f"  chunk {Mq} at context {Lc} ...", flush=True)
        q = torch.randn(B, HQ, Mq, D, device="cuda", generator=g).to(torch.bfloat16)
        toks = sorted({0, Mq // 2, Mq - 1})
        ref16 = reference_rows(q, k, v, Lc, toks)
        ref8 = reference_rows(q, kc, vc, Lc, toks, ks, vs)
        fl = flops_of(Mq, Lc)
        rep = 3 if fl > 5e12 else (8 if fl > 5e11 else 30)
        timers, info, errs = {}, {}, {}
        for var in variants:
            nw = int(var[1:])
            pack = "gqa" if Mq < 16 * nw else 1  # a chunk shorter than a block: fill its rows with the G heads
            for kv in ("bf16", "fp8"):
                name = f"ours_{kv}kv[{var}{',gqa' if pack == 'gqa' else ''}]"
                kw = dict(k_scale=ks, v_scale=vs) if kv == "fp8" else {}
                try:
                    launch = pf.prepare(q, kc if kv == "fp8" else k, vc if kv == "fp8" else v, Lc, nw=nw, pack=pack, **kw)
                except Exception as ex:
                    notes.append({"kernel": name, "shape": shape, "error": f"{type(ex).__name__}: {str(ex)[:200]}"})
                    continue
                bench.validate(name, launch, lambda out, r=(ref8 if kv == "fp8" else ref16): check(out, r), outputs=[launch.out])
                errs[name] = {a: b for a, b in bench.validation[name].items() if a != "passed"}
                info[name] = dict(kv=kv, nw=nw, pack=pack, num_splits=launch.info["num_splits"], blocks=launch.info["blocks"],
                                  variant=var)
                timers[name] = lambda launch=launch: (harness.time_us(lambda i: launch(), warmup=1, rep=rep), "events")
        torch_name = None
        if torch_too:
            for name, call in sdpa_candidates(q, k[:, :, : Lc + Mq], v[:, :, : Lc + Mq]):
                try:
                    call()
                    torch.cuda.synchronize()
                except Exception as ex:
                    notes.append({"kernel": name, "shape": shape, "error": f"{type(ex).__name__}: {str(ex).splitlines()[0][:160]}"})
                    print("    ", name, "not usable:", notes[-1]["error"], flush=True)
                    continue
                bench.validate(name, call, lambda out: check(out, ref16))
                errs[name] = {a: b for a, b in bench.validation[name].items() if a != "passed"}
                info[name] = dict(kv="bf16", nw=None, pack=None, variant="torch")
                timers[name] = lambda call=call: (harness.time_us(lambda i: call(), warmup=1, rep=rep), "events")
                torch_name = name
                break
        t = bench.compare({n: f for n, f in timers.items() if bench.validation[n]["passed"]}, rounds=rounds)
        t_torch = t[torch_name].median if torch_name in t else None
        for name in t:
            i = info[name]
            anchor = (f"ours_bf16kv[{i['variant']}" + (",gqa]" if i["pack"] == "gqa" else "]")) if i["kv"] == "fp8" else (torch_name or "")
            a = t.get(anchor)
            bench.record(harness.Result(
                kernel=name, shape=shape, dtype="e4m3" if i["kv"] == "fp8" else "bf16", time_us=0.0, bytes=kv_bytes(Lc + Mq, i["kv"]),
                flops=int(fl), anchor=anchor, anchor_time_us=a.median if a else None, copy_gbps=copy_gbps,
                extra=dict(chunk=Mq, context=Lc, kv=i["kv"], variant=i["variant"], nw=i["nw"], pack=i["pack"],
                           num_splits=i.get("num_splits"), blocks=i.get("blocks"), **errs[name],
                           fraction_of_mma=(fl / (t[name].median * 1e-6) / 1e12) / mma_tflops if mma_tflops else None,
                           speedup_vs_torch=(t_torch / t[name].median) if t_torch and not name.startswith("torch") else None,
                           napkin=pf.napkin(Mq, Lc, HQ, HK, D, bm=16 * (i["nw"] or 4), pack=1 if i["pack"] in (None, 1) else HQ // HK,
                                            mma_tflops=mma_tflops, hbm_gbps=copy_gbps))), t[name])
        del q
    del k, v, kc, vc
    torch.cuda.empty_cache()
    return notes


# ---- for notebooks: read the recorded results -----------------------------------------------------------------
def load(path=DEFAULT_OUT) -> dict:
    return harness.load_json(path)


def summary_rows(data: dict, variant: str = "w4") -> list[dict]:
    """One row per (context, chunk): our bf16 and FP8 times (one block shape), their ratio, torch, the intensity."""
    res = data.get("results", [])
    keys = sorted({(r["context"], r["chunk"]) for r in res if "chunk" in r})
    out = []
    for Lc, Mq in keys:
        grp = [r for r in res if r.get("context") == Lc and r.get("chunk") == Mq]
        b16 = next((r for r in grp if r.get("kv") == "bf16" and r.get("variant") == variant), None)
        f8 = next((r for r in grp if r.get("kv") == "fp8" and r.get("variant") == variant), None)
        tch = next((r for r in grp if r["kernel"].startswith("torch")), None)
        if b16 is None or f8 is None:
            continue
        nap = f8.get("napkin") or {}
        out.append(dict(context=Lc, chunk=Mq, bf16_us=b16["time_us"], fp8_us=f8["time_us"], torch_us=tch["time_us"] if tch else None,
                        torch=tch["kernel"] if tch else None, fp8_over_bf16=f8["time_us"] / b16["time_us"],
                        bf16_tflops=b16.get("tflops"), fp8_tflops=f8.get("tflops"), torch_tflops=tch.get("tflops") if tch else None,
                        flops_per_fp8_byte=nap.get("flops_per_byte_fp8"), conversions_per_fp8_byte=nap.get("conversions_per_fp8_byte"),
                        bound=nap.get("bound_bf16"), valid=bool(b16.get("valid", True) and f8.get("valid", True))))
    return out


def format_summary(data: dict, variant: str = "w4") -> str:
    f = lambda v, s: "-" if v is None else format(v, s)  # noqa: E731
    hdr = (f"{'context':>8s} {'chunk':>6s} {'bf16 us':>10s} {'fp8 us':>10s} {'fp8/bf16':>8s} {'torch us':>10s} "
           f"{'bf16 TF/s':>9s} {'fp8 TF/s':>8s} {'torch TF/s':>10s} {'flop/B fp8':>10s} {'cvt/B':>7s}")
    lines = [f"our kernel: {variant} ({16 * int(variant[1:])} rows per block)", hdr, "-" * len(hdr)]
    for r in summary_rows(data, variant):
        lines.append(f"{r['context']:>8d} {r['chunk']:>6d} {r['bf16_us']:10.1f} {r['fp8_us']:10.1f} {r['fp8_over_bf16']:7.2f}x "
                     f"{f(r['torch_us'], '10.1f')} {f(r['bf16_tflops'], '9.0f')} {f(r['fp8_tflops'], '8.0f')} "
                     f"{f(r['torch_tflops'], '10.0f')} {f(r['flops_per_fp8_byte'], '10.0f')} {f(r['conversions_per_fp8_byte'], '7.1f')}")
    return "\n".join(lines)


def format_napkin(data: dict | None = None, Mq: int = 8192, Lc: int = 262144) -> str:
    """The arithmetic of one point, with the ceilings measured in the run (or the leads without data)."""
    from .attention_prefill import napkin

    c = (data or {}).get("ceilings", {})
    a = napkin(Mq, Lc, HQ, HK, D, mma_tflops=c.get("mma_tflops_cublas", 660.0), hbm_gbps=c.get("copy_gbps", 4300.0))
    src = "measured in the run" if c else "datasheet-like leads"
    return "\n".join([
        f"chunk {Mq} tokens at context {Lc}, {HQ}q/{HK}kv heads, D={D} (ceilings: {src})",
        f"  FLOPs          {a['flops']:.3e}   (4 Hq D sum_t keys_t)",
        f"  cache bytes    bf16 {a['bytes_bf16'] / 1e9:.3f} GB, FP8 {a['bytes_fp8'] / 1e9:.3f} GB (read once)",
        f"  intensity      {a['flops_per_byte_bf16']:.0f} FLOP/B bf16, {a['flops_per_byte_fp8']:.0f} FLOP/B FP8 "
        f"(H200 balance ~{(c.get('mma_tflops_cublas', 660.0) * 1e12) / (c.get('copy_gbps', 4300.0) * 1e9):.0f})",
        f"  time floors    tensor cores {a['t_mma_us']:.0f} us, HBM bf16 {a['t_hbm_bf16_us']:.0f} us, HBM FP8 "
        f"{a['t_hbm_fp8_us']:.0f} us -> {a['bound_bf16']}-bound",
        f"  FP8 widening   {a['conversions']:.3e} conversions = {a['conversions_per_fp8_byte']:.1f} per FP8 byte, "
        f"{a['conversions_per_kflop']:.2f} per kFLOP; at 16 cvt/clk/SM: {a['t_cvt_us']:.0f} us",
        f"  FP8 saves      {a['fp8_saves_us']:.0f} us of memory time; costs ~{a['fp8_costs_us']:.0f} us of conversions "
        "(if not hidden)"])


def crossover(data: dict, variant: str = "w4") -> list[dict]:
    """Per context: the chunk (and the FLOP per FP8 byte) at which FP8 / bf16 crosses 1, log-interpolated."""
    out = []
    rows = summary_rows(data, variant)
    for Lc in sorted({r["context"] for r in rows}):
        rs = sorted((r for r in rows if r["context"] == Lc), key=lambda r: r["chunk"])
        x = None
        for a, b in zip(rs, rs[1:]):
            if (a["fp8_over_bf16"] - 1) * (b["fp8_over_bf16"] - 1) <= 0 and a["fp8_over_bf16"] != b["fp8_over_bf16"]:
                fa, fb = math.log(a["chunk"]), math.log(b["chunk"])
                w = (1 - a["fp8_over_bf16"]) / (b["fp8_over_bf16"] - a["fp8_over_bf16"])
                x = math.exp(fa + w * (fb - fa))
                break
        out.append(dict(context=Lc, crossover_chunk=x, below=[r["chunk"] for r in rs if r["fp8_over_bf16"] < 1],
                        above=[r["chunk"] for r in rs if r["fp8_over_bf16"] >= 1],
                        crossover_flops_per_fp8_byte=None if x is None else 4 * HQ * D * x / (2 * HK * D)))
    return out


def seed004_reading(data: dict, variant: str = "w4", model=ASSUMED_MODEL) -> str:
    """What the kernel measurement says about seed 004 (250K-token document: 34 s bf16 KV, 45 s FP8 KV), and what not."""
    rows = summary_rows(data, variant)
    if not rows:
        return "no prefill measurement recorded"
    top = max(rows, key=lambda r: (r["context"], r["chunk"]))
    r = top["fp8_over_bf16"]
    L = SEED004["context"]
    attn = 2.0 * L * L * model["n_q_heads"] * model["head_dim"] * model["n_layers"]  # causal: 4 * L^2 / 2 * Hq * D
    lin = 2.0 * model["params"] * L
    f = attn / (attn + lin)
    seed = SEED004["ttft_fp8_s"] / SEED004["ttft_bf16_s"]
    need = 1 + (seed - 1) / f
    return "\n".join([
        f"seed 004: TTFT {SEED004['ttft_bf16_s']:.0f} s (bf16 KV) -> {SEED004['ttft_fp8_s']:.0f} s (FP8 KV) = {seed:.2f}x at {L} tokens",
        f"our kernel at chunk {top['chunk']}, context {top['context']}: FP8 / bf16 = {r:.2f}x "
        f"({'slower' if r > 1 else 'faster'} with FP8)",
        f"attention share of a {L}-token prefill's FLOPs for an assumed {model['name']}: {f:.0%}",
        f"if attention time scales like its FLOPs, a {r:.2f}x attention kernel gives TTFT x{1 + f * (r - 1):.2f}; "
        f"the seed's {seed:.2f}x would need ~{need:.2f}x in attention",
        "what this can say: on Hopper, long-context prefill attention is compute-bound (thousands of FLOP per cache byte),",
        "so an FP8 cache saves ~no time there and any dequantization in the attention kernel is extra work; the size of",
        "that extra work here is this kernel's (widening in shared memory), not the engine's.",
        "what it cannot say: which kernel the engine ran for FP8 vs bf16 KV (a different backend, or FA3's FP8 path with",
        "Q quantized, or a fallback for the seed's head size), the cost of quantizing each chunk's K/V into the cache,",
        "scheduling and chunk sizes, or the model's real geometry (not public): the two runs were also a day apart."])


def format_provenance(data: dict) -> str:
    from .gemm_report import provenance_rows

    rows = provenance_rows(data, keys=("git_commit", "device", "date", "command", "torch", "cupy"))
    c = data.get("ceilings", {})
    if c.get("copy_gbps"):
        rows.append(f"{'copy bw':11s} {c['copy_gbps']:.0f} GB/s; cuBLAS bf16 matmul {c.get('mma_tflops_cublas', 0):.0f} "
                    "TFLOP/s (measured in the same run)")
    return "\n".join(rows)


def plot_ratio(data: dict, path=None, ax=None, variant: str = "w4"):
    """FP8 / bf16 time of the same prefill kernel against the chunk size, one line per context: where FP8 stops paying."""
    import matplotlib.pyplot as plt

    rows = summary_rows(data, variant)
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
    else:
        fig = ax.figure
    for Lc in sorted({r["context"] for r in rows}):
        rs = sorted((r for r in rows if r["context"] == Lc), key=lambda r: r["chunk"])
        ax.plot([r["chunk"] for r in rs], [r["fp8_over_bf16"] for r in rs], "o-", label=f"context {Lc // 1024}k")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(0.5, color="gray", lw=0.8, ls=":", label="0.5 (bytes halve)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("chunk (query tokens)")
    ax.set_ylabel("FP8 time / bf16 time")
    p = data.get("provenance", {})
    ax.set_title(f"chunked prefill, {HQ}q/{HK}kv heads, D={D} — {p.get('device', '?')}, {str(p.get('date', '?'))[:10]}", fontsize=9)
    ax.legend(fontsize=7)
    return harness.finish_figure(fig, path)


# ---- main -----------------------------------------------------------------------------------------------------
def _ints(text: str, lo: int) -> tuple[int, ...]:
    vals = text.split(",")
    if not all(v.isdigit() and int(v) >= lo for v in vals):
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers >= {lo}")
    return tuple(int(v) for v in vals)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fp8lab.kernels.bench prefill_attn", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--chunks", type=lambda s: _ints(s, 1), default=None, help=f"query tokens per chunk (default {CHUNKS})")
    p.add_argument("--contexts", type=lambda s: _ints(s, 0), default=None, help=f"cached tokens (default {CONTEXTS})")
    p.add_argument("--variants", default="w4,w8", help="our block shapes: w4 (64 rows), w8 (128 rows)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    p.add_argument("--small", action="store_true", help="a quick live look (chunks 64 and 512 at context 8192)")
    p.add_argument("--no-torch", action="store_true", help="skip torch SDPA")
    p.add_argument("--budget-s", type=float, default=float("inf"), help="skip what is left after this many seconds")
    p.add_argument("--no-compile", action="store_true", help=argparse.SUPPRESS)  # accepted for report.summarize
    args = p.parse_args(argv)
    variants = tuple(v for v in args.variants.split(",") if v)
    if not variants or any(v not in ("w4", "w8") for v in variants):
        p.error("--variants takes w4 and/or w8")
    chunks = args.chunks or (SMALL["chunks"] if args.small else CHUNKS)
    contexts = args.contexts or (SMALL["contexts"] if args.small else CONTEXTS)
    t0 = time.time()
    cmd = " ".join(["python -m fp8lab.kernels.bench prefill_attn"] + list(sys.argv[1:] if argv is None else argv))
    bench = harness.Bench("prefill_attn", args.out, cmd, rounds=args.rounds)
    bench.ceilings["copy_gbps"] = harness.copy_bandwidth_gbps()
    bench.ceilings["mma_tflops_cublas"] = matmul_tflops()
    print(f"copy {bench.ceilings['copy_gbps']:.0f} GB/s, cuBLAS bf16 {bench.ceilings['mma_tflops_cublas']:.0f} TFLOP/s", flush=True)
    for Lc in contexts:
        print(f"context {Lc} ...", flush=True)
        bench.notes += bench_context(bench, Lc, chunks, bench.ceilings["copy_gbps"], bench.ceilings["mma_tflops_cublas"],
                                     torch_too=not args.no_torch, rounds=args.rounds, variants=variants,
                                     budget_end=t0 + args.budget_s)
        data = {"results": bench.results, "ceilings": bench.ceilings}
        bench.extra.update(crossover=crossover(data, variants[0]), napkin=format_napkin(data).splitlines(),
                           seed004=seed004_reading(data, variants[0]).splitlines())
        bench.write()
    harness.print_table(bench.results)
    data = {"results": bench.results, "ceilings": bench.ceilings}
    for v in variants:
        print()
        print(format_summary(data, v))
    print()
    print(format_napkin(data))
    for c in crossover(data, variants[0]):
        print(f"crossover at context {c['context']}: chunk {c['crossover_chunk']}, FP8 faster at {c['below']}, slower at {c['above']}")
    print(seed004_reading(data, variants[0]))
    print("wrote", args.out, f"in {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
