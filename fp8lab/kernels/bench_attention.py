"""FP8-KV and NVFP4-KV decode attention vs the same kernel on bf16 and torch SDPA: `python -m fp8lab.kernels.bench attention`.

    python -m fp8lab.kernels.bench attention --contexts 16384,32768,131072 --shapes 64,128   # the recording
    python -m fp8lab.kernels.bench attention --sweep --out /tmp/sweep.json                  # tuning at 32k, D = 128
    python -m fp8lab.kernels.bench attention --sweep --contexts 16384,32768                 # ... at each context
    python -m fp8lab.kernels.bench attention --small                                        # 1k and 4k, a live look

Writes outputs/kernels/attention.json (harness schema, plus "goals", "kernel_registers", "notes").

The problem: one decode step, B = 8 sequences, 32 query heads over 8 KV heads (G = 4), every sequence at the same
context; head_dim 128 and 64; plus the paged cache (pages of 16 tokens, shuffled) at 32k, D = 128. Contenders, on
identical K/V values (the FP8 and NVFP4 caches are the bf16 values quantized, per tensor):
  * version 3 (the default on sm_90+, attention_decode_v3.cu): FP8 E4M3 by the cvt instruction ("v3_fp8kv[cvt]") and
    the same kernel on the bf16 cache ("v3_bf16kv": the FP8 rows' anchor); both with the splits merged as the default
    does (attention_fp8kv.V3_MERGE: inside the kernel) and, as tuning rows beside them, the other way ("{reduce}":
    the second, reduce kernel);
  * version 2 (attention_decode.cuh): FP8 by the cvt instruction ("v2_fp8kv[cvt]") and by the bit move
    ("v2_fp8kv[bit]"), the same kernel on the bf16 cache ("v2_bf16kv": the anchor of version 2's rows), and the
    NVFP4 cache ("v2_nvfp4kv", attention_nvfp4kv.cu);
  * version 1 (the register-rotation kernel, kept as it was measured): FP8 cvt and bf16, "v1_fp8kv[cvt]" / "v1_bf16kv";
  * torch.nn.functional.scaled_dot_product_attention on the bf16 cache, enable_gqa=True, the backend torch picks
    (named in the record) and FlashAttention forced.
Every contender is validated against float32 SDPA on the dequantized cache (sequences 0 and B-1), its output poisoned
first, BEFORE it is timed (harness.Bench.validate), and all contenders of a problem are timed together in
interleaved rounds (median and quartiles over --rounds). Bytes = K + V actually read (+ scale codes for NVFP4) + q +
out. Timing: a CUDA graph of >= 16 calls cycling over cache copies whose total is >= 4x the L2 (harness.sets_for_l2),
per-call median of the replays (harness.graph_time_us). Copy bandwidth is measured in the same run.

--sweep times every compiled version-2 and version-3 configuration (attention_fp8kv.V2_KERNELS / V3_KERNELS,
attention_nvfp4kv.KERNELS) at 32k, D = 128 (or at each of --contexts), beside version 1 and torch: the run that
compares the defaults (V2_DEFAULTS / V3_DEFAULTS and v3_default's long-cache rule / DEFAULTS) with the alternatives.
Where version 3's default depends on the cache's size (attention_fp8kv.v3_default), every run also times the
configuration the rule did not pick beside the default ("alternative default" rows: default_rule_rows).

Report functions for notebooks (read the JSON; nothing is timed on a CPU): load, summary_rows, format_summary,
goals_table, format_goals, format_sweep, format_provenance, plot_speedup, plot_bandwidth, goal_met,
sweep_context, sweep_best, sweep_vs_default, default_rule_rows, format_default_rule, fixed_cost_fit,
fixed_cost_default_vs_torch, format_fixed_cost, merge_comparison, format_merge_comparison.
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
CONTEXTS = (16384, 32768, 131072)
HEAD_DIMS = (64, 128)
SMALL_CONTEXTS = (1024, 4096)
SWEEP_PROBLEM = (32768, 128)
B, HQ, HK = 8, 32, 8
#: the sources an attention record depends on (their sha256 is stored with it: gemm_report.provenance_summary)
SOURCES = harness.with_includes(("attention_decode_v2.cu", "attention_decode_v3.cu", "attention_fp8kv.cu",
                                 "attention_nvfp4kv.cu", "attention_fp8kv.py", "attention_nvfp4kv.py", "launch_ex.py",
                                 "_cuda.py", "bench_attention.py"))
#: the single headline goal (kept for notebook 08's cell: ba.GOAL[0], ba.GOAL[1], goal_met)
GOAL = ("FP8 vs bf16 (same kernel) at 32k context, head_dim 128", 1.85)
#: every goal: (key, description, threshold, contexts it applies to, head_dim)
GOALS = (
    ("fp8_vs_bf16", "FP8 / bf16, the same kernel (the default version)", 1.85, (16384, 32768, 131072), 128),
    ("fp8_vs_torch", "FP8 / torch SDPA (bf16, torch's pick)", 1.8, (16384, 32768, 131072), 128),
    ("fp8_xcopy", "FP8 kernel's fraction of copy bandwidth", 0.90, (16384, 32768, 131072), 128),
    ("nvfp4_vs_bf16", "NVFP4 / bf16, the same kernel", 3.0, (32768,), 128),
)


# ---- inputs ------------------------------------------------------------------------------------------------
def nvfp4_gpu(x):
    """NVFP4 cache of a bf16 [B, Hk, L, D] tensor on the GPU, per tensor (scaling.quantize_nvfp4, one global amax),
    one sequence at a time so the float32 temporaries stay small."""
    import torch

    from fp8lab import scaling

    from .attention_nvfp4kv import NVFP4Cache

    amax = x.abs().amax().float()
    parts = [scaling.quantize_nvfp4(x[b], global_amax=amax) for b in range(x.shape[0])]
    return NVFP4Cache(torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts]), parts[0][2].float().reshape(()))


def make_sets(L: int, D: int, n16: int, n8: int, n4: int = 0, seed: int = 0):
    """n16 bf16 caches, n8 FP8 caches and n4 NVFP4 caches (the first n of the same values, quantized per tensor), q."""
    import torch

    from .reference import quantize_kv

    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, HQ, D, device="cuda", generator=g).to(torch.bfloat16)
    bf, f8, f4 = [], [], []
    for i in range(max(n16, n8, n4)):
        k = torch.randn(B, HK, L, D, device="cuda", generator=g, dtype=torch.bfloat16)
        v = torch.randn(B, HK, L, D, device="cuda", generator=g, dtype=torch.bfloat16)
        if i < n8:
            kc, ks = quantize_kv(k)
            vc, vs = quantize_kv(v)
            f8.append((kc, vc, ks, vs))
        if i < n4:
            f4.append((nvfp4_gpu(k), nvfp4_gpu(v)))
        if i < n16:
            bf.append((k, v))
        else:
            del k, v
    return q, bf, f8, f4


def paged_fast(cache, page: int, seed: int = 0):
    """Contiguous [B, Hk, L, ...] (L % page == 0) -> (pool, block_table) with the pages in shuffled order, on the GPU."""
    import torch

    Bc, Hk, L = cache.shape[:3]
    rest = tuple(cache.shape[3:])
    npg = L // page
    pool0 = cache.view(Bc, Hk, npg, page, *rest).transpose(1, 2).reshape(Bc * npg, Hk, page, *rest)
    perm = torch.randperm(Bc * npg, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed))
    pool = torch.empty_like(pool0)
    pool[perm] = pool0  # page j of sequence b (row b * npg + j) goes to slot perm[b * npg + j]
    return pool, perm.view(Bc, npg).to(torch.int32).contiguous()


def _nvfp4_values(c, b):
    """float32 values of sequence b of an NVFP4 cache, decoded on the GPU with fp8lab.formats' tables."""
    import torch

    from fp8lab import formats

    p = c.packed[b]
    codes = torch.stack([p & 0xF, p >> 4], -1).reshape(*p.shape[:-1], -1).long()
    e2 = formats.E2M1.table().to(p.device)[codes]
    sc = formats.E4M3.table().to(p.device)[c.scales[b].long()].repeat_interleave(16, -1)
    gs = c.global_scale.to(p.device).float().reshape(-1)
    return e2 * sc * (gs.reshape(-1, 1, 1) if gs.numel() > 1 else gs)


def reference(q, k, v, ks=None, vs=None, rows=(0, B - 1), nvfp4=False):
    """float32 SDPA on the dequantized cache for a few sequences (GPU, dense): the check before timing."""
    import torch

    from fp8lab import formats

    tab = formats.E4M3.table().to(q.device)
    out = {}
    for b in rows:
        if nvfp4:
            kb, vb = _nvfp4_values(k, b), _nvfp4_values(v, b)
        else:
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
    # a loose gate (the tight tolerances live in the tests): a wrong kernel is far above it
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


# ---- the contenders ----------------------------------------------------------------------------------------------
def contenders(D: int, sweep: bool, L: int = SWEEP_PROBLEM[0], page: int | None = None) -> list[dict]:
    """name, format (bf16 / fp8cvt / fp8bit / nvfp4), version, config (versions 2, 3) and the default flag of each, for
    one problem (context L, pages of `page` tokens or contiguous). Where version 3's default depends on the cache's
    size (attention_fp8kv.v3_default), the configuration the rule did not pick is timed beside the default
    (alt_default: a tuning row, default_rule_rows reads it)."""
    import torch

    from . import attention_fp8kv as att
    from . import attention_nvfp4kv as nv

    base = {"bf16": "bf16kv", "fp8cvt": "fp8kv[cvt]", "fp8bit": "fp8kv[bit]", "nvfp4": "nvfp4kv"}
    picked = {k: att.v3_default(*k, B, HK, L, page) for k in att.V3_LONG_DEFAULTS}
    # the rule's other choice per (fmt, D, g): the long configuration where the rule kept the short one, and back
    alt = {k: att.V3_DEFAULTS[k] if cfg == att.V3_LONG_DEFAULTS[k] else att.V3_LONG_DEFAULTS[k] for k, cfg in picked.items()}
    dv = att.default_version(torch.device("cuda"))
    out = [dict(name="v1_bf16kv", fmt="bf16", version=1, config=None, default=dv == 1),
           dict(name="v1_fp8kv[cvt]", fmt="fp8cvt", version=1, config=None, default=dv == 1),
           dict(name="v2_bf16kv", fmt="bf16", version=2, config=None, default=dv == 2),
           dict(name="v2_fp8kv[cvt]", fmt="fp8cvt", version=2, config=None, default=dv == 2),
           dict(name="v2_fp8kv[bit]", fmt="fp8bit", version=2, config=None, default=False),
           dict(name="v2_nvfp4kv", fmt="nvfp4", version=2, config=None, default=nv.DEFAULT_VERSION == 2)]
    if att.v3_available():  # sm_90+: on an older GPU the bench leaves version 3 out
        out += [dict(name="v3_bf16kv", fmt="bf16", version=3, config=None, default=dv == 3),
                dict(name="v3_fp8kv[cvt]", fmt="fp8cvt", version=3, config=None, default=dv == 3),
                dict(name="v3_nvfp4kv", fmt="nvfp4", version=3, config=None, default=nv.DEFAULT_VERSION == 3)]
        # the other merge of the splits, timed beside the default in every run (a tuning row: not in the summaries)
        other = "reduce" if att.V3_MERGE else "kernel"
        out += [dict(name=f"v3_{b}{{{other}}}", fmt=f, version=3, config=None, default=False, sweep=True,
                     merge=not att.V3_MERGE) for f, b in (("bf16", "bf16kv"), ("fp8cvt", "fp8kv[cvt]"))]
        if not sweep:  # (the sweep times every configuration anyway; its row of the other choice is marked below)
            out += [dict(name=f"v3_{base[f]}{{{','.join(map(str, cfg))}}}", fmt=f, version=3, config=cfg, default=False,
                         sweep=True, alt_default=True) for (f, d, g), cfg in alt.items() if d == D and g == "g8"]
    if sweep:
        lists = [(2, att.V2_KERNELS | nv.KERNELS, att.V2_DEFAULTS | nv.DEFAULTS)]
        if att.v3_available():
            lists.append((3, att.V3_KERNELS, att.V3_DEFAULTS | picked))
        for version, kernels, defaults in lists:
            for f, d, g, *cfg in sorted(kernels):
                if d == D and g == "g8" and tuple(cfg) != defaults[(f, d, g)]:
                    out.append(dict(name=f"v{version}_{base[f]}{{{','.join(map(str, cfg))}}}", fmt=f, version=version,
                                    config=tuple(cfg), default=False, sweep=True,
                                    alt_default=version == 3 and tuple(cfg) == alt.get((f, d, g))))
    return out


def _kv_bytes(fmt: str, L: int, D: int) -> int:
    per = {"bf16": 2 * D, "fp8cvt": D, "fp8bit": D, "nvfp4": D // 2 + D // 16}[fmt]
    return 2 * B * HK * L * per


# ---- one problem ------------------------------------------------------------------------------------------------
def bench_problem(bench: harness.Bench, L: int, D: int, copy_gbps: float, page: int | None = None, torch_too: bool = True,
                  sweep: bool = False) -> tuple[list, list]:
    """All contenders on one (L, D, layout), validated then timed in interleaved rounds. Returns (records, notes)."""
    import torch

    from . import attention_fp8kv as att
    from . import attention_nvfp4kv as nv
    from .attention_nvfp4kv import NVFP4Cache

    notes = []
    layout = "contiguous" if page is None else f"paged{page}"
    shape = f"B{B} Hq{HQ} Hk{HK} L{L} D{D}" + ("" if page is None else f" page{page}")
    qo = 2 * B * HQ * D * 2
    n16 = harness.sets_for_l2(_kv_bytes("bf16", L, D))
    n8 = harness.sets_for_l2(_kv_bytes("fp8cvt", L, D))
    n4 = harness.sets_for_l2(_kv_bytes("nvfp4", L, D))
    q, bf, f8, f4 = make_sets(L, D, n16, n8, n4, seed=L + D)
    rows = (0, B - 1)
    ref16 = reference(q, bf[0][0], bf[0][1], rows=rows)
    ref8 = reference(q, *f8[0], rows=rows)
    ref4 = reference(q, f4[0][0], f4[0][1], rows=rows, nvfp4=True)
    bts = {}
    if page is not None:  # the same shuffled page order for K and V (and the NVFP4 scale pools) of a set
        bf = [(paged_fast(k, page, i)[0], paged_fast(v, page, i)[0]) for i, (k, v) in enumerate(bf)]
        f8 = [(paged_fast(kc, page, i)[0], paged_fast(vc, page, i)[0], ks, vs) for i, (kc, vc, ks, vs) in enumerate(f8)]
        f4 = [tuple(NVFP4Cache(paged_fast(c.packed, page, i)[0], paged_fast(c.scales, page, i)[0], c.global_scale)
                    for c in pair) for i, pair in enumerate(f4)]
        bts = {i: paged_fast(torch.zeros(B, 1, L, 1, device="cuda"), page, i)[1] for i in range(max(n16, n8, n4))}
    lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
    extra = dict(context=L, head_dim=D, layout=layout, B=B, n_q_heads=HQ, n_kv_heads=HK)

    def bt(i):
        return dict(block_table=bts[i]) if page is not None else {}

    timers, info, errs, spec = {}, {}, {}, {}

    def add(name, launches, ref):
        """Validate launch 0 (output poisoned) against the float32 reference, then queue all for timing."""
        bench.validate(name, launches[0], lambda out: (lambda e: (e["valid"], e))(errors(out, ref)), outputs=[launches[0].out])
        errs[name] = {k: v for k, v in bench.validation[name].items() if k != "passed"}
        info[name] = launches[0].info
        timers[name] = lambda: harness.graph_time_us(launches)

    for c in contenders(D, sweep, L, page):
        name, fmt = c["name"], c["fmt"]
        spec[name] = c
        try:
            if fmt == "bf16":
                ls = [att.prepare(q, k, v, lens, version=c["version"], config=c["config"], max_seq_len=L,
                                  merge=c.get("merge"), **bt(i)) for i, (k, v) in enumerate(bf)]
                add(name, ls, ref16)
            elif fmt.startswith("fp8"):
                ls = [att.prepare(q, kc, vc, lens, k_scale=ks, v_scale=vs, conv=fmt[3:], version=c["version"],
                                  config=c["config"], max_seq_len=L, merge=c.get("merge"), **bt(i))
                      for i, (kc, vc, ks, vs) in enumerate(f8)]
                add(name, ls, ref8)
            else:
                ls = [nv.prepare(q, kc, vc, lens, config=c["config"], max_seq_len=L, version=c["version"], **bt(i))
                      for i, (kc, vc) in enumerate(f4)]
                add(name, ls, ref4)
        except Exception as ex:  # a launch that cannot even be prepared: recorded, the run goes on
            notes.append({"kernel": name, "shape": shape, "error": f"{type(ex).__name__}: {str(ex).splitlines()[0][:200]}"})
            print("  ", name, "failed:", notes[-1]["error"], flush=True)
    torch_names = []
    if torch_too and page is None:
        q4 = q[:, :, None, :]
        choice = sdpa_default_choice(q4, bf[0][0], bf[0][1])
        cands = [("torch_sdpa[default=" + choice + "]", None)] + [(f"torch_sdpa[{n}]", b_) for n, b_ in sdpa_backends().items()
                                                                 if n == "flash" and n != choice]
        for name, backend in cands:
            try:
                calls = [sdpa_call(q4, k, v, backend) for k, v in bf]
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
    for name, c in spec.items():
        if name not in t:
            continue
        fmt, i = c["fmt"], info[name]
        anchor = f"v{c['version']}_bf16kv" if fmt != "bf16" else (torch_name or "")
        a_t = t.get(anchor)
        recs.append(bench.record(harness.Result(
            kernel=name, shape=shape, dtype={"bf16": "bf16", "nvfp4": "nvfp4"}.get(fmt, "e4m3"), time_us=0.0,
            bytes=_kv_bytes(fmt, L, D) + qo, anchor=anchor, anchor_time_us=a_t.median if a_t else None, copy_gbps=copy_gbps,
            extra=dict(**extra, **errs[name], fmt=fmt, version=c["version"], config=list(i.get("config") or []) or None,
                       default=c["default"], sweep=c.get("sweep", False), alt_default=c.get("alt_default", False),
                       kernel_name=i["kernel"],
                       num_splits=i["num_splits"], split_len=i["split_len"], merge=i.get("merge"),
                       speedup_vs_torch=(t_torch / t[name].median) if t_torch else None, torch_anchor=torch_name)), t[name]))
    for name in torch_names:
        if name in t:
            recs.append(bench.record(harness.Result(kernel=name, shape=shape, dtype="bf16", time_us=0.0,
                                                    bytes=_kv_bytes("bf16", L, D) + qo, copy_gbps=copy_gbps,
                                                    extra=dict(**extra, **errs[name], fmt="torch")), t[name]))
    del q, bf, f8, f4
    torch.cuda.empty_cache()
    return recs, notes


def kernel_registers() -> dict:
    """Registers per thread and local memory of every decode kernel (from the driver): the occupancy story."""
    from . import attention_fp8kv as att
    from . import attention_nvfp4kv as nv
    from ._cuda import load_module

    out = {}
    for src, names in (("attention_fp8kv.cu", [f"decode_attn_{k}_d{D}_{g}_va" for k in ("bf16", "fp8cvt", "fp8bit")
                                               for D in (64, 128) for g in ("g8", "g16")]),
                       ("attention_decode_v2.cu", [att.v2_kernel_name(f, D, g, tuple(cfg)) for f, D, g, *cfg in sorted(att.V2_KERNELS)]),
                       ("attention_nvfp4kv.cu", [att.v2_kernel_name(f, D, g, tuple(cfg)) for f, D, g, *cfg in sorted(nv.KERNELS)]),
                       ("attention_decode_v3.cu", [att.v3_kernel_name(f, D, g, tuple(cfg)) for f, D, g, *cfg in sorted(att.V3_KERNELS)]
                        if att.v3_available() else [])):
        if not names:
            continue
        mod = load_module(src)
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


def _legacy(data: dict) -> bool:
    return not any("version" in r for r in data.get("results", []))


def _by_shape(res: list) -> list:
    """[((layout, head_dim, context), the records of that shape)], shapes in the order they first appear."""
    groups = {}
    for r in res:
        groups.setdefault((r.get("layout"), r.get("head_dim"), r.get("context")), []).append(r)
    return list(groups.items())


def _summary_rows_legacy(res: list) -> list[dict]:
    """The schema of the first recordings (one kernel version, names ours_fp8kv[conv,pv] / ours_bf16kv[pv])."""
    out = []
    for (layout, D, L), grp in _by_shape(res):
        f8 = next((r for r in grp if r["kernel"].startswith("ours_fp8kv") and r.get("default")), None)
        b16 = next((r for r in grp if r["kernel"].startswith("ours_bf16kv") and r.get("default")), None)
        tch = next((r for r in grp if r["kernel"].startswith("torch_sdpa[default")), None)
        if f8 is None:
            continue
        out.append(dict(layout=layout, head_dim=D, context=L, fp8_us=f8["time_us"], bf16_us=b16["time_us"] if b16 else None,
                        torch_us=tch["time_us"] if tch else None, torch=tch["kernel"] if tch else None,
                        nvfp4_us=None, fp8_v1_us=None, bf16_v1_us=None,
                        speedup_vs_bf16=f8.get("speedup"), speedup_vs_torch=f8.get("speedup_vs_torch"),
                        nvfp4_vs_bf16=None, fp8_frac_copy=f8.get("fraction_of_copy_bw"),
                        bf16_frac_copy=b16.get("fraction_of_copy_bw") if b16 else None, nvfp4_frac_copy=None,
                        v1_speedup_vs_bf16=None, fp8_rel_rms_err=f8.get("rel_rms_err"),
                        valid=bool(f8.get("valid", True) and (b16 is None or b16.get("valid", True)))))
    return out


def summary_rows(data: dict) -> list[dict]:
    """One row per (layout, head_dim, context): the default FP8 kernel vs its bf16 twin vs torch's pick; NVFP4; and
    version 1's FP8 and bf16 times beside them. Reads both the current and the first recordings' schema."""
    res = [r for r in data.get("results", []) if not r.get("sweep")]
    if _legacy(data):
        return _summary_rows_legacy(res)
    out = []
    for (layout, D, L), grp in _by_shape(res):

        def pick(fmt, version=None, default=True):
            return next((r for r in grp if r.get("fmt") == fmt and (version is None or r.get("version") == version)
                         and (not default or r.get("default"))), None)
        f8, b16, f4 = pick("fp8cvt"), pick("bf16"), pick("nvfp4")
        f8v1, b16v1 = pick("fp8cvt", 1, False), pick("bf16", 1, False)
        tch = next((r for r in grp if r["kernel"].startswith("torch_sdpa[default")), None)
        if f8 is None:
            continue
        g = lambda r, k: r.get(k) if r else None  # noqa: E731
        out.append(dict(layout=layout, head_dim=D, context=L, version=f8.get("version"), nvfp4_version=g(f4, "version"),
                        fp8_us=f8["time_us"],
                        bf16_us=g(b16, "time_us"), torch_us=g(tch, "time_us"), torch=g(tch, "kernel"), nvfp4_us=g(f4, "time_us"),
                        fp8_v1_us=g(f8v1, "time_us"), bf16_v1_us=g(b16v1, "time_us"),
                        speedup_vs_bf16=f8.get("speedup"), speedup_vs_torch=f8.get("speedup_vs_torch"),
                        nvfp4_vs_bf16=g(f4, "speedup"), nvfp4_vs_torch=g(f4, "speedup_vs_torch"),
                        nvfp4_twin_us=g(f4, "anchor_time_us"),   # the NVFP4 kernel's own bf16 twin: its ratio's base
                        fp8_frac_copy=f8.get("fraction_of_copy_bw"), bf16_frac_copy=g(b16, "fraction_of_copy_bw"),
                        nvfp4_frac_copy=g(f4, "fraction_of_copy_bw"), fp8_v1_frac_copy=g(f8v1, "fraction_of_copy_bw"),
                        v1_speedup_vs_bf16=g(f8v1, "speedup"), fp8_rel_rms_err=f8.get("rel_rms_err"),
                        valid=all(r.get("valid", True) for r in (f8, b16, f4) if r)))
    return out


def versions_table(data: dict) -> list[dict]:
    """One row per (layout, head_dim, context): each format's versions 1, 2 and 3 (the default configuration) side by
    side, torch's pick, and the comparison a user makes: the fastest FP8 (or NVFP4) kernel of the run against the
    fastest bf16 one, whoever wrote it (ours of any version, or torch SDPA). Sweep rows are left out.

    vN_over_v1_* > 1 means version N is SLOWER than version 1 (a time ratio); best_*_vs_best_bf16 > 1 means the
    low-precision cache is faster."""
    res = [r for r in data.get("results", []) if not r.get("sweep")]
    if _legacy(data):
        return []
    keys = list(dict.fromkeys((r.get("layout"), r.get("head_dim"), r.get("context")) for r in res))
    out = []
    for layout, D, L in keys:
        grp = [r for r in res if (r.get("layout"), r.get("head_dim"), r.get("context")) == (layout, D, L)]

        def t(fmt, version):
            rs = [r for r in grp if r.get("fmt") == fmt and r.get("version") == version and r.get("valid", True)]
            return min((r["time_us"] for r in rs), default=None)
        tch = [r for r in grp if r["kernel"].startswith("torch_sdpa") and r.get("valid", True)]
        row = dict(layout=layout, head_dim=D, context=L, torch=min((r["time_us"] for r in tch), default=None),
                   nvfp4_v2=t("nvfp4", 2), nvfp4_v3=t("nvfp4", 3))
        for v in (1, 2, 3):
            row[f"bf16_v{v}"], row[f"fp8_v{v}"] = t("bf16", v), t("fp8cvt", v)
        q = lambda a, b: a / b if a and b else None  # noqa: E731
        for v in (2, 3):
            row[f"v{v}_over_v1_fp8"] = q(row[f"fp8_v{v}"], row["fp8_v1"])
            row[f"v{v}_over_v1_bf16"] = q(row[f"bf16_v{v}"], row["bf16_v1"])
        bf = [row[k] for k in ("bf16_v1", "bf16_v2", "bf16_v3", "torch") if row[k]]
        f8 = [v for v in (row["fp8_v1"], row["fp8_v2"], row["fp8_v3"], t("fp8bit", 2)) if v]
        row["best_fp8_vs_best_bf16"] = q(min(bf, default=None), min(f8, default=None))
        row["best_nvfp4_vs_best_bf16"] = q(min(bf, default=None),
                                           min((v for v in (row["nvfp4_v2"], row["nvfp4_v3"]) if v), default=None))
        out.append(row)
    return out


#: the columns of format_summary (header -> (key of a summary_rows row, format spec)). `fp8/bf16` is the default
#: FP8 kernel against its bf16 twin (`bf16 us`); the NVFP4 default is another version, so `nvfp4/twin` is against
#: that version's own bf16 twin (`nvfp4 twin us`), not against `bf16 us` ...
SUMMARY_COLUMNS = {
    "layout": ("layout", ""), "D": ("head_dim", ""), "context": ("context", ""), "fp8 us": ("fp8_us", ".1f"),
    "bf16 us": ("bf16_us", ".1f"), "nvfp4 us": ("nvfp4_us", ".1f"), "torch us": ("torch_us", ".1f"),
    "v1 fp8 us": ("fp8_v1_us", ".1f"), "fp8/bf16": ("speedup_vs_bf16", ".2f"),
    "fp8/torch": ("speedup_vs_torch", ".2f"), "nvfp4 twin us": ("nvfp4_twin_us", ".1f"),
    "nvfp4/twin": ("nvfp4_vs_bf16", ".2f"),
    "fp8 xcopy": ("fp8_frac_copy", ".2f"), "bf16 xcopy": ("bf16_frac_copy", ".2f")}
#: ... and of format_versions (versions_table's rows; (time ratios vN/v1: above 1, version N is slower; best x: above 1, faster))
VERSIONS_COLUMNS = {
    "layout": ("layout", ""), "D": ("head_dim", ""), "context": ("context", ""),
    **{f"{f} v{v}": (f"{f}_v{v}", ".1f") for f in ("bf16", "fp8") for v in (1, 2, 3)},
    "nvfp4 v2": ("nvfp4_v2", ".1f"), "nvfp4 v3": ("nvfp4_v3", ".1f"), "torch": ("torch", ".1f"),
    "fp8 v2/v1": ("v2_over_v1_fp8", ".2f"), "fp8 v3/v1": ("v3_over_v1_fp8", ".2f"),
    "bf16 v3/v1": ("v3_over_v1_bf16", ".2f"),
    "best fp8 x": ("best_fp8_vs_best_bf16", ".2f"), "best nvfp4 x": ("best_nvfp4_vs_best_bf16", ".2f")}


def format_versions(data: dict) -> str:
    """versions_table as text: times in us, then the ratios."""
    from .report import format_columns

    rows = versions_table(data)
    if not rows:
        return "(this recording holds one version of the kernel only: nothing to put side by side)"
    return format_columns(rows, VERSIONS_COLUMNS)


def other_merge_row(r: dict) -> bool:
    """Whether a record times version 3's other merge of the splits beside the default (contenders' "{reduce}" /
    "{kernel}" rows): not a configuration of its own."""
    return r["kernel"].endswith(("{reduce}", "{kernel}"))


def _q1_q3(r: dict) -> list:
    """[q1, q3] of a record's timing spread (None where it has none)."""
    return [(r.get("spread_us") or {}).get(q) for q in ("q1", "q3")]


def quartiles_apart(a: dict, b: dict) -> bool | None:
    """Whether two records' quartile ranges [q1, q3] do not overlap; None where either has no spread."""
    (lo_a, hi_a), (lo_b, hi_b) = _q1_q3(a), _q1_q3(b)
    if None in (lo_a, hi_a, lo_b, hi_b):
        return None
    return hi_a < lo_b or hi_b < lo_a


def sweep_context(data: dict, context: int | None = None) -> int | None:
    """The context a sweep is read at: `context`, else the run's only context, else SWEEP_PROBLEM's (32k) where the
    run has it, else its longest (a sweep over several contexts: --sweep --contexts)."""
    if context is not None:
        return int(context)
    ctx = sorted({r["context"] for r in data.get("results", []) if r.get("context")})
    if len(ctx) <= 1:
        return ctx[0] if ctx else None
    return SWEEP_PROBLEM[0] if SWEEP_PROBLEM[0] in ctx else ctx[-1]


def sweep_best(data: dict, fmt: str, version: int, copy: int | None = None, context: int | None = None) -> dict | None:
    """The fastest valid record of a format and version in a run (a sweep's every configuration) at one context
    (sweep_context); copy: version 3's COPY field (0: a copy per row, 1: per tile, 2: per two tiles) or None for any.
    The rows that time the other merge of the splits ("{reduce}" / "{kernel}", merge_comparison's) are not
    configurations and never count."""
    L = sweep_context(data, context)
    rs = [r for r in data.get("results", []) if r.get("fmt") == fmt and r.get("version") == version
          and r.get("config") and r.get("valid", True) and (copy is None or r["config"][1] == copy)
          and not other_merge_row(r) and (L is None or r.get("context", L) == L)]
    return min(rs, key=lambda r: r["time_us"], default=None)


def sweep_vs_default(data: dict, fmt: str, version: int, context: int | None = None) -> tuple[dict | None, dict | None]:
    """(the fastest valid configuration of a format and version in a sweep, the default's record) at one context
    (sweep_context), or Nones."""
    L = sweep_context(data, context)
    best = sweep_best(data, fmt, version, context=L)
    default = next((r for r in data.get("results", []) if r.get("fmt") == fmt and r.get("version") == version
                    and r.get("default") and r.get("valid", True) and (L is None or r.get("context", L) == L)), None)
    return best, default


def default_rule_rows(data: dict) -> list[dict]:
    """Version 3's size-dependent default (attention_fp8kv.v3_default) against the configuration it did not pick, timed
    in the same rounds: per (format, head_dim, layout, context) with both rows {fmt, head_dim, layout, context,
    default_config, default_us, other_config, other_us, other_over_default (time ratio: > 1 means the default was the
    faster), separated (the two rows' quartile ranges do not overlap; None without spreads)}. Empty for a run without
    the alternative rows (recordings before the rule)."""
    res = [r for r in data.get("results", []) if r.get("version") == 3 and r.get("valid", True)]
    rows = []
    for alt in (r for r in res if r.get("alt_default")):
        key = (alt["fmt"], alt.get("head_dim"), alt.get("layout"), alt.get("context"))
        d = next((r for r in res if r.get("default") and (r["fmt"], r.get("head_dim"), r.get("layout"), r.get("context")) == key),
                 None)
        if d is None:
            continue
        rows.append(dict(fmt=key[0], head_dim=key[1], layout=key[2], context=key[3], default_config=tuple(d["config"] or ()),
                         default_us=d["time_us"], other_config=tuple(alt["config"] or ()), other_us=alt["time_us"],
                         other_over_default=alt["time_us"] / d["time_us"], separated=quartiles_apart(d, alt)))
    return sorted(rows, key=lambda r: (r["fmt"], r["head_dim"] or 0, r["layout"] or "", r["context"] or 0))


def format_default_rule(data: dict) -> str:
    rows = default_rule_rows(data)
    if not rows:
        return "(no alternative-default rows in this run: it predates the long-cache rule)"
    lines = [f"{'format':7s} {'D':>4s} {'layout':11s} {'context':>8s} {'default':10s} {'us':>8s} {'other':10s} {'us':>8s} "
             f"{'other/default':>13s}  quartiles"]
    for r in rows:
        sep = {None: "-", True: "apart", False: "overlap"}[r["separated"]]
        lines.append(f"{r['fmt']:7s} {r['head_dim']:>4d} {r['layout']:11s} {r['context']:>8d} {str(r['default_config']):10s} "
                     f"{r['default_us']:8.1f} {str(r['other_config']):10s} {r['other_us']:8.1f} {r['other_over_default']:13.3f}  {sep}")
    return "\n".join(lines)


def merge_comparison(data: dict, head_dim: int = 128, layout: str = "contiguous") -> list[dict]:
    """Version 3's two merges of the splits, timed in the same run: per (format, context) the default record and the
    other merge's row ("{reduce}" or "{kernel}"): {fmt, context, kernel_us, reduce_us, saved_us, spread_us} (kernel:
    the splits merged inside the main kernel; reduce: by the second launch), and separated: whether the two rows'
    quartile ranges [q1, q3] do not overlap (None without spreads). Empty for a run without both."""
    res = [r for r in data.get("results", []) if r.get("version") == 3 and r.get("head_dim") == head_dim
           and r.get("layout") == layout and r.get("fmt") in ("fp8cvt", "bf16") and r.get("merge") in ("kernel", "reduce")
           and (r.get("default") or other_merge_row(r))]
    rows = []
    for fmt in ("fp8cvt", "bf16"):
        for L in sorted({r["context"] for r in res if r["fmt"] == fmt}):
            by = {r["merge"]: r for r in res if r["fmt"] == fmt and r["context"] == L}
            if "kernel" in by and "reduce" in by:
                k, rd = by["kernel"], by["reduce"]
                rows.append(dict(fmt=fmt, context=L, kernel_us=k["time_us"], reduce_us=rd["time_us"],
                                 saved_us=rd["time_us"] - k["time_us"], spread_us={"kernel": _q1_q3(k), "reduce": _q1_q3(rd)},
                                 separated=quartiles_apart(k, rd)))
    return rows


def format_merge_comparison(data: dict, head_dim: int = 128) -> str:
    rows = merge_comparison(data, head_dim)
    if not rows:
        return "(no version-3 merge comparison in this run)"
    lines = [f"{'format':7s} {'context':>8s} {'merge in kernel':>16s} {'reduce kernel':>14s} {'saved':>8s}"]
    for r in rows:
        lines.append(f"{r['fmt']:7s} {r['context']:8d} {r['kernel_us']:13.1f} us {r['reduce_us']:11.1f} us "
                     f"{r['saved_us']:5.1f} us" + ("  (quartiles overlap)" if r.get("separated") is False else ""))
    return "\n".join(lines)


def fixed_cost_fit(data: dict, head_dim: int = 128, layout: str = "contiguous") -> list[dict]:
    """Per kernel (sweep rows left out): time = fixed + cache bytes / rate over the run's contexts (report.
    fixed_plus_stream), and what the fixed part costs at the shortest context: `fixed_share` of its time, and the
    fraction of copy bandwidth the kernel would read there without it (`xcopy_without_fixed`)."""
    from .report import fixed_plus_stream

    res = [r for r in data.get("results", []) if not r.get("sweep") and r.get("head_dim") == head_dim
           and r.get("layout") == layout and r.get("valid", True) and r.get("bytes")]
    rows = []
    for name in dict.fromkeys(r["kernel"] for r in res):
        rs = sorted((r for r in res if r["kernel"] == name), key=lambda r: r["context"])
        fit = fixed_plus_stream((r["bytes"] / 1e6, r["time_us"]) for r in rs)
        if fit is None:
            continue
        short = rs[0]
        left = short["time_us"] - fit["fixed_us"]
        rows.append(dict(kernel=name, contexts=[r["context"] for r in rs], **fit, shortest=short["context"],
                         fixed_share=fit["fixed_us"] / short["time_us"],
                         xcopy_without_fixed=(short["fraction_of_copy_bw"] * short["time_us"] / left) if left > 0 else None))
    return rows


def fixed_cost_default_vs_torch(data: dict, head_dim: int = 128) -> tuple[dict | None, dict | None]:
    """(the default FP8 kernel's fixed_cost_fit row, torch's pick's), contiguous cache; None where not recorded."""
    fits = fixed_cost_fit(data, head_dim)
    ver = next((r["version"] for r in summary_rows(data) if r["layout"] == "contiguous" and r["head_dim"] == head_dim),
               None)
    ours = next((r for r in fits if r["kernel"] == f"v{ver}_fp8kv[cvt]"), None)
    torch_pick = next((r for r in fits if r["kernel"].startswith("torch_sdpa[default")), None)
    return ours, torch_pick


def format_fixed_cost(data: dict, head_dim: int = 128) -> str:
    f = lambda v, s: "-" if v is None else format(v, s)  # noqa: E731
    hdr = (f"{'kernel':28s} {'fixed us':>9s} {'rate TB/s':>10s} {'r2':>6s} {'shortest':>9s} {'fixed share':>11s} "
           f"{'xcopy w/o fixed':>15s}")
    lines = [hdr, "-" * len(hdr)]
    for r in fixed_cost_fit(data, head_dim):
        lines.append(f"{r['kernel']:28s} {r['fixed_us']:9.1f} {f(r['rate_TBps'], '10.2f')} {f(r['r2'], '6.3f')} "
                     f"{r['shortest']:>9d} {r['fixed_share']:11.2f} {f(r['xcopy_without_fixed'], '15.2f')}")
    return "\n".join(lines)


def format_summary(data: dict) -> str:
    """The table of the report: times (us), speedups and fractions of copy bandwidth (xcopy)."""
    from .report import format_columns

    return format_columns(summary_rows(data), SUMMARY_COLUMNS)


def goals_table(data: dict) -> list[dict]:
    """Each goal at each context it names (head_dim 128, contiguous): measured value, threshold, met or not."""
    rows = {(r["layout"], r["head_dim"], r["context"]): r for r in summary_rows(data)}
    col = {"fp8_vs_bf16": "speedup_vs_bf16", "fp8_vs_torch": "speedup_vs_torch", "fp8_xcopy": "fp8_frac_copy",
           "nvfp4_vs_bf16": "nvfp4_vs_bf16"}
    out = []
    for key, what, thr, ctxs, D in GOALS:
        for L in ctxs:
            r = rows.get(("contiguous", D, L))
            v = r.get(col[key]) if r else None
            out.append(dict(goal=key, what=what, context=L, head_dim=D, threshold=thr, measured=v,
                            met=None if v is None or not r.get("valid") else bool(v >= thr)))
    return out


def format_goals(data: dict) -> str:
    lines = []
    for g in goals_table(data):
        m = "-" if g["measured"] is None else f"{g['measured']:.2f}"
        verdict = "not measured" if g["met"] is None else ("met" if g["met"] else "NOT met")
        lines.append(f"{g['what']:44s} L={g['context']:>6d} D={g['head_dim']}: {m:>5s} (goal >= {g['threshold']}) {verdict}")
    return "\n".join(lines)


def format_sweep(data: dict) -> str:
    """The tuning sweep (--sweep): every configuration at each of its problems, fastest first within each format."""
    res = [r for r in data.get("results", []) if "version" in r or r["kernel"].startswith("torch")]
    if not res:
        return "(no sweep in this file)"
    contexts = sorted({r.get("context") for r in res}, key=lambda c: c or 0)
    lines = []
    for L in contexts:
        at = [r for r in res if r.get("context") == L]
        lines += ([""] if lines else []) + _format_sweep_at(at, f"{at[0].get('shape', '')}:" if len(contexts) > 1 else None)
    return "\n".join(lines)


def _format_sweep_at(res: list, title: str | None) -> list:
    lines = ([title] if title else []) + [f"{'kernel':34s} {'config':14s} {'splits':>6s} {'time_us':>8s} {'[q1, q3]':>16s} "
                                          f"{'xcopy':>6s} {'vs bf16':>8s}"]
    for fmt in ("fp8cvt", "fp8bit", "nvfp4", "bf16", "torch"):
        grp = sorted((r for r in res if r.get("fmt") == fmt), key=lambda r: r["time_us"])
        for r in grp:
            sp = r.get("spread_us") or {}
            cfg = "v1" if r.get("version") == 1 else str(tuple(r["config"])) if r.get("config") else "-"
            # bf16 and torch rows are the denominators: their "vs bf16" is not a measurement, so it prints "-"
            vs = r.get("speedup") if fmt not in ("bf16", "torch") else None
            lines.append(f"{r['kernel'][:34]:34s} {cfg:14s} {str(r.get('num_splits', '-')):>6s} {r['time_us']:8.1f} "
                         f"[{sp.get('q1', 0):6.1f}, {sp.get('q3', 0):6.1f}] {r.get('fraction_of_copy_bw') or 0:6.2f} "
                         + (f"{vs:8.2f}" if vs else f"{'-':>8s}"))
    return lines


def format_provenance(data: dict) -> str:
    from .gemm_report import provenance_rows

    rows = provenance_rows(data)
    c = data.get("ceilings", {})
    if c.get("copy_gbps"):
        rows.append(f"{'copy bw':11s} {c['copy_gbps']:.0f} GB/s (measured in the same run)")
    if data.get("pytest"):
        rows.append(f"{'GPU tests':11s} {data['pytest']}")
    return "\n".join(rows)


def plot_speedup(data: dict, path=None, ax=None):
    """Speedups against context (head_dim 128, contiguous): FP8 and NVFP4 vs the same kernel on bf16, FP8 vs torch."""
    import matplotlib.pyplot as plt

    rows = [r for r in summary_rows(data) if r["layout"] == "contiguous" and r["head_dim"] == 128]
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
    else:
        fig = ax.figure
    xs = [r["context"] for r in rows]
    ax.plot(xs, [r["speedup_vs_bf16"] or float("nan") for r in rows], "o-", label="FP8 vs bf16 (same kernel)")
    if any(r["speedup_vs_torch"] for r in rows):
        ax.plot(xs, [r["speedup_vs_torch"] or float("nan") for r in rows], "s--", label="FP8 vs torch SDPA bf16")
    if any(r.get("nvfp4_vs_bf16") for r in rows):
        ax.plot(xs, [r.get("nvfp4_vs_bf16") or float("nan") for r in rows], "^-", label="NVFP4 vs bf16 (same kernel)")
        ax.axhline(2 / 0.5625, color="gray", lw=0.8, ls="-.", label="3.56x (NVFP4 bytes)")
    ax.axhline(2.0, color="gray", lw=0.8, ls=":", label="2x (FP8 bytes)")
    ax.axhline(GOAL[1], color="tab:red", lw=0.8, ls="--", label=f"goal {GOAL[1]}x")
    ax.axhline(1.0, color="k", lw=0.6)
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [f"{x // 1024}k" for x in xs])
    ax.set_xlabel("context (tokens per sequence)")
    ax.set_ylabel("speedup (time ratio)")
    p = data.get("provenance", {})
    ax.set_title(f"decode attention, B={B}, {HQ}q/{HK}kv heads, D=128 — {p.get('device', '?')}, "
                 f"{str(p.get('date', '?'))[:10]}", fontsize=9)
    ax.legend(fontsize=7)
    return harness.finish_figure(fig, path)


def plot_bandwidth(data: dict, path=None, ax=None, head_dim: int = 128):
    """Fraction of copy bandwidth of each kernel against context: how close each format gets to the memory limit."""
    import matplotlib.pyplot as plt

    rows = [r for r in summary_rows(data) if r["layout"] == "contiguous" and r["head_dim"] == head_dim]
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.5, 3.4))
    else:
        fig = ax.figure
    xs = [r["context"] for r in rows]
    for key, label, st in (("fp8_frac_copy", "FP8 (default version)", "o-"), ("fp8_v1_frac_copy", "FP8 version 1", "o:"),
                           ("bf16_frac_copy", "bf16 (same kernel)", "s-"), ("nvfp4_frac_copy", "NVFP4", "^-")):
        if any(r.get(key) for r in rows):
            ax.plot(xs, [r.get(key) or float("nan") for r in rows], st, label=label)
    ax.axhline(1.0, color="k", lw=0.6)
    ax.axhline(0.90, color="tab:red", lw=0.8, ls="--", label="goal 0.90")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [f"{x // 1024}k" for x in xs])
    ax.set_xlabel("context (tokens per sequence)")
    ax.set_ylabel("fraction of copy bandwidth")
    ax.set_title(f"decode attention, D={head_dim}: bytes read / time / copy bandwidth", fontsize=9)
    ax.legend(fontsize=7)
    return harness.finish_figure(fig, path)


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
    p.add_argument("--small", action="store_true", help="contexts 1k and 4k, D = 128 only (a quick live run)")
    p.add_argument("--contexts", type=_contexts, default=None, help="comma-separated contexts (default 16384,32768,131072)")
    p.add_argument("--shapes", type=_head_dims, default=None, help="head dims at every context: 64,128 (the default)")
    p.add_argument("--paged", type=int, default=16, help="page size of the paged problem at 32k, D = 128 (0: none)")
    p.add_argument("--sweep", action="store_true",
                   help="every compiled version-2 and -3 configuration at 32k, D = 128 (--contexts: at each of them)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    p.add_argument("--no-torch", action="store_true", help="skip torch SDPA")
    p.add_argument("--pytest-log", default=None, help="a pytest log whose summary line is recorded with the results")
    p.add_argument("--budget-s", type=float, default=float("inf"), help="skip what is left after this many seconds")
    p.add_argument("--no-compile", action="store_true", help=argparse.SUPPRESS)  # accepted for report.summarize
    args = p.parse_args(argv)
    if args.paged < 0 or (args.paged and args.paged % 16):
        p.error("--paged must be 0 or a multiple of 16")
    import torch

    t0 = time.time()
    if args.sweep:  # at 32k, D = 128 (--contexts: at each of them)
        problems = [(L, SWEEP_PROBLEM[1], None) for L in (args.contexts or (SWEEP_PROBLEM[0],))]
    else:
        contexts = args.contexts or (SMALL_CONTEXTS if args.small else CONTEXTS)
        dims = args.shapes or ((128,) if args.small else HEAD_DIMS)
        problems = [(L, D, None) for D in sorted(dims, reverse=True) for L in contexts]
        if args.paged and not args.small and 32768 % args.paged == 0:
            problems.append((32768, 128, args.paged))
    cmd = " ".join(["python -m fp8lab.kernels.bench attention"] + list(sys.argv[1:] if argv is None else argv))
    bench = harness.Bench("attention", args.out, cmd, rounds=args.rounds)
    copy_gbps = bench.ceilings["copy_gbps"] = harness.copy_bandwidth_gbps()
    print(f"copy bandwidth {copy_gbps:.0f} GB/s", flush=True)
    q4 = torch.zeros(1, HQ, 1, 128, dtype=torch.bfloat16, device="cuda")
    k4 = torch.zeros(1, HK, 1024, 128, dtype=torch.bfloat16, device="cuda")
    bench.ceilings["torch_sdpa_default_backend_L1k"] = sdpa_default_choice(q4, k4, k4)
    from . import attention_fp8kv as att
    from . import attention_nvfp4kv as nv

    bench.extra.update(pytest=pytest_summary(args.pytest_log), kernel_registers=kernel_registers(), goals=None,
                       defaults=dict(version=att.default_version(torch.device("cuda")), conv=att.DEFAULT_CONV,
                                     nvfp4=dict(version=nv.DEFAULT_VERSION,
                                                v2={"/".join(map(str, k)): v for k, v in nv.DEFAULTS.items()}),
                                     v2={"/".join(map(str, k)): v for k, v in att.V2_DEFAULTS.items()},
                                     v3={"/".join(map(str, k)): v for k, v in att.V3_DEFAULTS.items()},
                                     v3_long={"/".join(map(str, k)): v for k, v in att.V3_LONG_DEFAULTS.items()},
                                     v3_long_rows=att.V3_LONG_ROWS),
                       sweep=bool(args.sweep), sources_sha256_12=harness.source_digest(SOURCES))

    def dump():
        bench.extra["goals"] = goals_table({"results": bench.results})
        bench.write()

    for L, D, page in problems:
        if time.time() - t0 > args.budget_s:
            bench.notes.append({"shape": f"L{L} D{D} page{page}", "error": "skipped: time budget spent"})
            continue
        print(f"L={L} D={D} page={page} ...", flush=True)
        _, notes = bench_problem(bench, L, D, copy_gbps, page=page, torch_too=not args.no_torch, sweep=args.sweep)
        bench.notes += notes
        dump()
    harness.print_table(bench.results)
    print()
    data = {"results": bench.results}
    print(format_sweep(data) if args.sweep else format_summary(data))
    print(format_goals(data))
    print("wrote", args.out, f"in {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
