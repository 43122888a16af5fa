"""FP8-KV decode attention vs the same kernel on a bf16 cache and torch SDPA: `python -m fp8lab.kernels.bench attention`.

(or standing alone: `python -m fp8lab.kernels.bench_attention [--out PATH] [--small]`). Writes
outputs/kernels/attention.json (harness schema, plus "checks" and "notes").

The problem: one decode step, B = 8 sequences, 32 query heads over 8 KV heads (G = 4), head_dim 128, every
sequence at the same context L in {1k, 4k, 16k, 32k, 64k, 128k}; head_dim 64 at 32k; the paged cache (pages of
16 and 64 tokens, shuffled) at 32k. Contenders, on identical K/V values:
  * ours, FP8 E4M3 cache: the default (cvt instruction, V as the A operand of P.V, "va"), the bit-move
    conversion, and the other P.V layout ("vb", V as the B operand) as ablations;
  * ours, bf16 cache (the same kernel, other element type), both layouts: each FP8 row's anchor is the bf16
    kernel of the same layout, so the speedup is against the same design;
  * torch.nn.functional.scaled_dot_product_attention on the bf16 cache with enable_gqa=True, with the
    backend torch picks (recorded) and, separately, each backend forced (flash / efficient / cudnn) where
    it accepts the inputs.
Every contender is compared with float32 SDPA on the dequantized cache (sequences 0 and B-1), its output
poisoned first, BEFORE it is timed (harness.Bench.validate; the errors are recorded), and all the contenders of a
problem are timed together in interleaved rounds (median and quartiles over --rounds). Bytes = K + V actually read + q + out (the split partials are overhead, not
counted). Timing: a CUDA graph of >= 16 calls cycling over cache copies whose total is >= 4x the L2
(harness.sets_for_l2), the median of the replays (harness.time_us) per call: HBM, not L2, and no Python
launch overhead for anyone. Copy bandwidth is measured in the same run (harness.copy_bandwidth_gbps).
"""
from __future__ import annotations

import argparse
import math
import re
import sys
import time
from pathlib import Path

from . import harness, tolerances

DEFAULT_OUT = harness.REPO / "outputs" / "kernels" / "attention.json"
CONTEXTS = (1024, 4096, 16384, 32768, 65536, 131072)
SMALL_CONTEXTS = (1024, 4096)
B, HQ, HK = 8, 32, 8
GOAL = ("FP8 vs bf16 (same kernel) at 32k context, head_dim 128", 1.8)


# ---- inputs ------------------------------------------------------------------------------------------------
def make_sets(L: int, D: int, n16: int, n8: int, seed: int = 0):
    """n16 bf16 caches and n8 FP8 caches (the first n8 of the same values, quantized per tensor), plus q."""
    import torch

    from .reference import quantize_kv

    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, HQ, D, device="cuda", generator=g).to(torch.bfloat16)
    bf, f8 = [], []
    for i in range(max(n16, n8)):
        k = torch.randn(B, HK, L, D, device="cuda", generator=g, dtype=torch.bfloat16)
        v = torch.randn(B, HK, L, D, device="cuda", generator=g, dtype=torch.bfloat16)
        if i < n8:
            kc, ks = quantize_kv(k)
            vc, vs = quantize_kv(v)
            f8.append((kc, vc, ks, vs))
        if i < n16:
            bf.append((k, v))
        else:
            del k, v
    return q, bf, f8


def paged_fast(cache, page: int, seed: int = 0):
    """Contiguous [B, Hk, L, D] (L % page == 0) -> (pool, block_table) with the pages in shuffled order, on the GPU."""
    import torch

    Bc, Hk, L, D = cache.shape
    npg = L // page
    pool0 = cache.view(Bc, Hk, npg, page, D).permute(0, 2, 1, 3, 4).reshape(Bc * npg, Hk, page, D)
    perm = torch.randperm(Bc * npg, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed))
    pool = torch.empty_like(pool0)
    pool[perm] = pool0  # page j of sequence b (row b * npg + j) goes to slot perm[b * npg + j]
    return pool, perm.view(Bc, npg).to(torch.int32).contiguous()


def reference(q, k, v, ks=None, vs=None, rows=(0, B - 1)):
    """float32 SDPA on the dequantized cache for a few sequences (GPU, dense): the check before timing."""
    import torch

    from fp8lab import formats

    tab = formats.E4M3.table().cuda()
    out = {}
    for b in rows:
        kb = tab[k[b].long()] * ks if ks is not None else k[b].float()
        vb = tab[v[b].long()] * vs if vs is not None else v[b].float()
        out[b] = torch.nn.functional.scaled_dot_product_attention(
            q[b].float()[None, :, None, :], kb[None], vb[None], enable_gqa=True)[0, :, 0]
    return out


def errors(out, ref) -> dict:
    import torch

    num, den, mx = 0.0, 0.0, 0.0
    for b, r in ref.items():
        d = out[b].float() - r
        num += float(torch.sum(d * d))
        den += float(torch.sum(r * r))
        mx = max(mx, float(d.abs().max()))
    rel = math.sqrt(num / max(den, 1e-30))
    # a loose gate (the tight tolerances live in tests/test_kernels_attention.py): a wrong kernel is far above it
    return {"max_abs_err": mx, "rel_rms_err": rel, "valid": bool(rel <= tolerances.ATTENTION_BENCH_REL_RMS)}


# ---- torch SDPA ------------------------------------------------------------------------------------------------
def sdpa_backends():
    from torch.nn.attention import SDPBackend

    return {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}


def sdpa_default_choice(q4, k, v) -> str:
    """Which backend torch's dispatcher picks for these inputs (torch._fused_sdp_choice), by name."""
    import torch

    try:
        i = int(torch._fused_sdp_choice(q4, k, v, None, 0.0, False, scale=None, enable_gqa=True))
    except Exception as e:
        return f"unknown ({type(e).__name__})"
    names = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}
    return names.get(i, str(i))


def sdpa_call(q4, k, v, backend=None):
    import torch
    from torch.nn.attention import sdpa_kernel

    F = torch.nn.functional
    if backend is None:
        return lambda: F.scaled_dot_product_attention(q4, k, v, enable_gqa=True)

    def call():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q4, k, v, enable_gqa=True)
    return call


# ---- one problem ------------------------------------------------------------------------------------------------
VARIANTS = (("cvt", "va"), ("bit", "va"), ("cvt", "vb"))  # FP8 (conversion, P.V layout); bf16 runs both layouts


def bench_problem(bench: harness.Bench, L: int, D: int, copy_gbps: float, page: int | None = None, torch_too: bool = True,
                  variants=VARIANTS) -> tuple[list, list]:
    """All contenders on one (L, D, layout), validated then timed in interleaved rounds. Returns (records, notes)."""
    import torch

    from . import attention_fp8kv as att

    notes = []
    layout = "contiguous" if page is None else f"paged{page}"
    shape = f"B{B} Hq{HQ} Hk{HK} L{L} D{D}" + ("" if page is None else f" page{page}")
    kv16 = 2 * B * HK * L * D * 2
    kv8 = kv16 // 2
    qo = 2 * B * HQ * D * 2
    n16, n8 = harness.sets_for_l2(kv16), harness.sets_for_l2(kv8)
    q, bf, f8 = make_sets(L, D, n16, n8, seed=L + D)
    if page is not None:  # the same shuffled page order for K and V of a set (same seed)
        bf2, f82 = [], []
        for i, (k, v) in enumerate(bf):
            kp, bt = paged_fast(k, page, i)
            bf2.append((kp, paged_fast(v, page, i)[0], bt))
        for i, (kc, vc, ks, vs) in enumerate(f8):
            kp, bt = paged_fast(kc, page, i)
            f82.append((kp, paged_fast(vc, page, i)[0], ks, vs, bt))
        bf, f8 = bf2, f82
        del bf2, f82
    lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
    extra = dict(context=L, head_dim=D, layout=layout, B=B, n_q_heads=HQ, n_kv_heads=HK)
    rows = (0, B - 1)

    def kw16(s):
        return dict(block_table=s[2]) if page is not None else {}

    def kw8(s):
        return dict(k_scale=s[2], v_scale=s[3], **(dict(block_table=s[4]) if page is not None else {}))

    # references (contiguous values: the paged copies hold the same tokens)
    if page is None:
        ref16 = reference(q, bf[0][0], bf[0][1], rows=rows)
        ref8 = reference(q, f8[0][0], f8[0][1], f8[0][2], f8[0][3], rows=rows)
    else:
        from .attention_fp8kv import gather_pages

        g16 = [gather_pages(t, bf[0][2], [L] * B) for t in bf[0][:2]]
        ref16 = reference(q, *g16, rows=rows)
        g8 = [gather_pages(t, f8[0][4], [L] * B) for t in f8[0][:2]]
        ref8 = reference(q, *g8, f8[0][2], f8[0][3], rows=rows)
        del g16, g8

    timers, info, errs = {}, {}, {}

    def contender(name, launches, ref):
        """Validate launch 0 (output poisoned) against the float32 reference, then queue all for timing."""
        bench.validate(name, launches[0], lambda out: (lambda e: (e["valid"], e))(errors(out, ref)), outputs=[launches[0].out])
        errs[name] = {k: v for k, v in bench.validation[name].items() if k != "passed"}
        info[name] = launches[0].info
        timers[name] = lambda: harness.graph_time_us(launches)

    for pv in att.PV_LAYOUTS:  # ours, bf16 cache
        contender(f"ours_bf16kv[{pv}]", [att.prepare(q, s[0], s[1], lens, pv=pv, max_seq_len=L, **kw16(s)) for s in bf], ref16)
    for conv, pv in variants:  # ours, FP8 cache
        contender(f"ours_fp8kv[{conv},{pv}]",
                  [att.prepare(q, s[0], s[1], lens, conv=conv, pv=pv, max_seq_len=L, **kw8(s)) for s in f8], ref8)
    torch_names = []
    if torch_too and page is None:
        q4 = q[:, :, None, :]
        choice = sdpa_default_choice(q4, bf[0][0], bf[0][1])
        cands = [("torch_sdpa[default=" + choice + "]", None)] + [(f"torch_sdpa[{n}]", b) for n, b in sdpa_backends().items()
                                                                 if n != "math" and n != choice]
        for name, backend in cands:
            try:
                calls = [sdpa_call(q4, s[0], s[1], backend) for s in bf]
                calls[0]()
            except Exception as ex:
                notes.append({"kernel": name, "shape": shape, "error": f"{type(ex).__name__}: {str(ex).splitlines()[0][:160]}"})
                print("  ", name, "not usable:", notes[-1]["error"], flush=True)
                continue
            bench.validate(name, calls[0], lambda out: (lambda e: (e["valid"], e))(errors(out[:, :, 0], ref16)))
            errs[name] = {k: v for k, v in bench.validation[name].items() if k != "passed"}
            timers[name] = lambda calls=calls: harness.graph_time_us(calls)
            torch_names.append(name)
    t = bench.compare({n: f for n, f in timers.items() if bench.validation[n]["passed"]})
    torch_name = next((n for n in torch_names if n in t), None)
    t_torch = t[torch_name].median if torch_name else None
    recs = []
    for conv, pv in variants:
        name = f"ours_fp8kv[{conv},{pv}]"
        if name not in t:
            continue
        b16 = t.get(f"ours_bf16kv[{pv}]")  # the anchor: the same kernel layout on the bf16 cache
        default = conv == att.DEFAULT_CONV and pv == att.DEFAULT_PV
        i = info[name]
        recs.append(bench.record(harness.Result(
            kernel=name, shape=shape, dtype="e4m3", time_us=0.0, bytes=kv8 + qo, anchor=f"ours_bf16kv[{pv}]",
            anchor_time_us=b16.median if b16 else None, copy_gbps=copy_gbps,
            extra=dict(**extra, **errs[name], default=default, conv=conv, pv=pv, kernel_name=i["kernel"],
                       num_splits=i["num_splits"], split_len=i["split_len"],
                       speedup_vs_torch=(t_torch / t[name].median) if t_torch else None, torch_anchor=torch_name)), t[name]))
    for pv in att.PV_LAYOUTS:
        name = f"ours_bf16kv[{pv}]"
        if name not in t:
            continue
        i = info[name]
        recs.append(bench.record(harness.Result(
            kernel=name, shape=shape, dtype="bf16", time_us=0.0, bytes=kv16 + qo, anchor=torch_name or "",
            anchor_time_us=t_torch, copy_gbps=copy_gbps,
            extra=dict(**extra, **errs[name], default=(pv == att.DEFAULT_PV), pv=pv, kernel_name=i["kernel"],
                       num_splits=i["num_splits"], split_len=i["split_len"])), t[name]))
    for name in torch_names:
        if name in t:
            recs.append(bench.record(harness.Result(kernel=name, shape=shape, dtype="bf16", time_us=0.0, bytes=kv16 + qo,
                                                    copy_gbps=copy_gbps, extra=dict(**extra, **errs[name])), t[name]))
    del q, bf, f8
    torch.cuda.empty_cache()
    return recs, notes


def kernel_registers() -> dict:
    """Registers per thread of each kernel (from the driver), the occupancy story in one line each."""
    from ._cuda import load_module

    mod = load_module("attention_fp8kv.cu")
    out = {}
    names = [f"decode_attn_{kind}_d{D}_{g}_{pv}" for kind in ("bf16", "fp8cvt", "fp8bit") for D in (64, 128)
             for g in ("g8", "g16") for pv in ("va", "vb")]
    for name in names:
        try:
            fn = mod.get_function(name)
            out[name] = {k: int(fn.attributes[k]) for k in ("num_regs", "local_size_bytes")}
        except Exception as e:  # pragma: no cover
            out[name] = str(e)
    return out


def pytest_summary(path: str | None) -> str | None:
    if not path or not Path(path).exists():
        return None
    lines = [ln for ln in Path(path).read_text().splitlines() if re.search(r"\d+ (passed|failed|error)", ln)]
    return lines[-1].strip("= ") if lines else None


# ---- for notebooks: read the recorded results --------------------------------------------------------------------
def load(path=DEFAULT_OUT) -> dict:
    return harness.load_json(path)


def summary_rows(data: dict) -> list[dict]:
    """One row per (context, head_dim, layout): our FP8 (default conversion) vs our bf16 vs torch's pick."""
    res = data.get("results", [])
    keys = []
    for r in res:
        k = (r.get("layout"), r.get("head_dim"), r.get("context"))
        if k not in keys:
            keys.append(k)
    out = []
    for layout, D, L in keys:
        grp = [r for r in res if (r.get("layout"), r.get("head_dim"), r.get("context")) == (layout, D, L)]
        f8 = next((r for r in grp if r["kernel"].startswith("ours_fp8kv") and r.get("default")), None)
        alt = [r for r in grp if r["kernel"].startswith("ours_fp8kv") and not r.get("default")]
        b16 = next((r for r in grp if r["kernel"].startswith("ours_bf16kv") and r.get("default")), None)
        tch = next((r for r in grp if r["kernel"].startswith("torch_sdpa[default")), None)
        if f8 is None:
            continue
        out.append(dict(layout=layout, head_dim=D, context=L, fp8_us=f8["time_us"],
                        fp8_alt_us=alt[0]["time_us"] if alt else None, alt_kernel=alt[0]["kernel"] if alt else None,
                        bf16_us=b16["time_us"] if b16 else None, torch_us=tch["time_us"] if tch else None,
                        torch=tch["kernel"] if tch else None, speedup_vs_bf16=f8.get("speedup"),
                        speedup_vs_torch=f8.get("speedup_vs_torch"), fp8_frac_copy=f8.get("fraction_of_copy_bw"),
                        bf16_frac_copy=b16.get("fraction_of_copy_bw") if b16 else None,
                        bf16_vs_torch=b16.get("speedup") if b16 else None, fp8_rel_rms_err=f8.get("rel_rms_err"),
                        valid=bool(f8.get("valid", True) and (b16 is None or b16.get("valid", True)))))
    return out


def format_summary(data: dict) -> str:
    """The table of the report: times (us), speedups and fractions of copy bandwidth."""
    f = lambda v, s: ("-" if v is None else format(v, s)).rjust(int(s.split(".")[0]))
    fx = lambda v, w: ("-" if v is None else f"{v:.2f}x").rjust(w)
    hdr = (f"{'layout':11s} {'D':>4s} {'context':>8s} {'fp8 us':>8s} {'bf16 us':>8s} {'torch us':>9s} "
           f"{'fp8/bf16':>9s} {'fp8/torch':>9s} {'fp8 xcopy':>9s} {'bf16 xcopy':>10s}")
    lines = [hdr, "-" * len(hdr)]
    for r in summary_rows(data):
        lines.append(f"{r['layout']:11s} {r['head_dim']:>4d} {r['context']:>8d} {f(r['fp8_us'], '8.1f')} "
                     f"{f(r['bf16_us'], '8.1f')} {f(r['torch_us'], '9.1f')} {fx(r['speedup_vs_bf16'], 9)} "
                     f"{fx(r['speedup_vs_torch'], 9)} {f(r['fp8_frac_copy'], '9.2f')} {f(r['bf16_frac_copy'], '10.2f')}")
    return "\n".join(lines)


def format_provenance(data: dict) -> str:
    from fp8lab.provenance import describe

    p = data.get("provenance", {})
    keys = ("device", "date", "command", "torch", "cupy", "cuda", "nvidia_smi")
    rows = [f"{'record':11s} {' '.join(describe(p).split())}"]       # the commit with its clean/dirty state
    rows += [f"{k:11s} {p.get(k, '-')}" for k in keys]
    c = data.get("ceilings", {})
    if c.get("copy_gbps"):
        rows.append(f"{'copy bw':11s} {c['copy_gbps']:.0f} GB/s (measured in the same run)")
    if data.get("pytest"):
        rows.append(f"{'GPU tests':11s} {data['pytest']}")
    return "\n".join(rows)


def plot_speedup(data: dict, path=None, ax=None):
    """Speedup of our FP8-KV kernel vs our bf16-KV kernel and vs torch SDPA, against context (head_dim 128, contiguous)."""
    import matplotlib.pyplot as plt

    rows = [r for r in summary_rows(data) if r["layout"] == "contiguous" and r["head_dim"] == 128]
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
    else:
        fig = ax.figure
    xs = [r["context"] for r in rows]
    ax.plot(xs, [r["speedup_vs_bf16"] for r in rows], "o-", label="FP8 vs bf16 (same kernel)")
    if any(r["speedup_vs_torch"] for r in rows):
        ax.plot(xs, [r["speedup_vs_torch"] or float("nan") for r in rows], "s--", label="FP8 vs torch SDPA bf16")
    ax.axhline(2.0, color="gray", lw=0.8, ls=":", label="2x (bytes halve)")
    ax.axhline(GOAL[1], color="tab:red", lw=0.8, ls="--", label=f"goal {GOAL[1]}x at 32k")
    ax.axhline(1.0, color="k", lw=0.6)
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [f"{x // 1024}k" for x in xs])
    ax.set_xlabel("context (tokens per sequence)")
    ax.set_ylabel("speedup (time ratio)")
    p = data.get("provenance", {})
    ax.set_title(f"decode attention, B={B}, {HQ}q/{HK}kv heads, D=128 — {p.get('device', '?')}, "
                 f"{str(p.get('date', '?'))[:10]}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=120)
    return fig


def goal_met(data: dict) -> tuple[float | None, bool | None]:
    r = next((r for r in summary_rows(data) if (r["layout"], r["head_dim"], r["context"]) == ("contiguous", 128, 32768)), None)
    if r is None or r["speedup_vs_bf16"] is None or not r["valid"]:
        return None, None
    return r["speedup_vs_bf16"], r["speedup_vs_bf16"] >= GOAL[1]


# ---- main -----------------------------------------------------------------------------------------------------
def _contexts(text: str) -> tuple[int, ...]:
    vals = text.split(",")
    if not all(v.isdigit() and int(v) >= 16 for v in vals):
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated contexts >= 16, e.g. 1024,32768")
    return tuple(int(v) for v in vals)


def _head_dims(text: str) -> tuple[int, ...]:
    vals = text.split(",")
    if not all(v in ("64", "128") for v in vals):
        raise argparse.ArgumentTypeError(f"{text!r}: head dims are 64 and/or 128")
    return tuple(int(v) for v in vals)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fp8lab.kernels.bench attention", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--small", action="store_true", help="contexts 1k and 4k only (a quick live run)")
    p.add_argument("--contexts", type=_contexts, default=None, help="comma-separated contexts, e.g. 1024,32768")
    p.add_argument("--shapes", type=_head_dims, default=None, help="head dims to run at every context: 64,128 (default 128)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    p.add_argument("--pytest-log", default=None, help="a pytest log whose summary line is recorded with the results")
    p.add_argument("--budget-s", type=float, default=float("inf"), help="skip what is left after this many seconds")
    p.add_argument("--no-compile", action="store_true", help=argparse.SUPPRESS)  # accepted for report.summarize
    args = p.parse_args(argv)
    import torch

    t0 = time.time()
    contexts = args.contexts or (SMALL_CONTEXTS if args.small else CONTEXTS)
    problems = [(L, D, None) for L in contexts for D in (args.shapes or (128,))]
    if not args.small and not args.contexts and not args.shapes:
        problems += [(32768, 64, None), (32768, 128, 16), (32768, 128, 64)]
    cmd = " ".join(["python -m fp8lab.kernels.bench attention"] + list(sys.argv[1:] if argv is None else argv))
    bench = harness.Bench("attention", args.out, cmd, rounds=args.rounds)
    copy_gbps = bench.ceilings["copy_gbps"] = harness.copy_bandwidth_gbps()
    print(f"copy bandwidth {copy_gbps:.0f} GB/s", flush=True)
    q4 = torch.zeros(1, HQ, 1, 128, dtype=torch.bfloat16, device="cuda")
    k4 = torch.zeros(1, HK, 1024, 128, dtype=torch.bfloat16, device="cuda")
    bench.ceilings["torch_sdpa_default_backend_L1k"] = sdpa_default_choice(q4, k4, k4)
    bench.extra.update(pytest=pytest_summary(args.pytest_log), kernel_registers=kernel_registers(), goal=None)

    def dump():
        speed, met = goal_met({"results": bench.results})
        bench.extra["goal"] = {"goal": GOAL[0], "threshold": GOAL[1], "measured": speed, "met": met}
        bench.write()

    for L, D, page in problems:
        if time.time() - t0 > args.budget_s:
            bench.notes.append({"shape": f"L{L} D{D} page{page}", "error": "skipped: time budget spent"})
            continue
        print(f"L={L} D={D} page={page} ...", flush=True)
        _, notes = bench_problem(bench, L, D, copy_gbps, page=page, torch_too=page is None)
        bench.notes += notes
        dump()
    harness.print_table(bench.results)
    print()
    print(format_summary({"results": bench.results}))
    speed, met = goal_met({"results": bench.results})
    print(f"GOAL {GOAL[0]} >= {GOAL[1]}: measured {speed} -> {'MET' if met else 'not met'}")
    print("wrote", args.out, f"in {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
