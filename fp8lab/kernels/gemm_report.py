"""What notebook 07 reads from a recorded gemm benchmark (outputs/kernels/gemm.json): tables, goals, plots.

    data = load()                       # the recorded run (fp8lab.store checks it is whole)
    print(format_rows(decode_table(data)))
    plot_decode(data)

Prefill (the W8A8 block-scaled GEMM, gemm_prefill):
    prefill_table(data)      every (kernel, shape): TFLOP/s and ratios to _scaled_mm blockwise / tensorwise / bf16
    prefill_climb(data)      the climb at 4096x7168x7168: one change per rung, what it bought, SASS facts
    prefill_gap(data)        our rate against the best FP8 rate measured in the same run (and the spec, labelled)
    prefill_goals(data)      the prefill goals, each with its measured ratio (goals(data): decode_goals + these);
                             prefill_goal_lines(data) the same as printed lines

Decode (the W8A16 / NVFP4 GEMVs, gemm_decode):
    decode_versions(data)    per shape and M: the anchors and every version (v1 to v5) of each kernel, in us
    goal_reasons(data)       each missed decode goal at its worst shape: the bytes, the rates, the time left over
    plot_prefill(data)       TFLOP/s against M for each (N, K), ours and the anchors

CPU-only friendly: nothing here touches a GPU. Every number shown comes from the JSON the benchmark wrote.
"""
from __future__ import annotations

import re

from fp8lab import provenance
from fp8lab.stats import median_interval

from . import harness
from .sources import GEMV_PACKED_VERSIONS

DEFAULT_OUT = harness.REPO / "outputs" / "kernels" / "gemm.json"
#: the sources a gemm record depends on (named; their headers follow from the #includes)
SOURCES = harness.with_includes((
    "_cuda.py", "launch_ex.py", "gemv_fp8.cu", "gemv_nvfp4.cu", "gemv_v3.cu", "gemv_v4.cu", "gemv_v5.cu", "gemv_fp8.py",
    "gemv_nvfp4.py", "gemv_v3.py", "gemv_timeline.py", "gemv_timeline.cuh", "gemm_w8a8.cu", "gemm_w8a8_wgmma.cu", "gemm_w8a8_tma.cu",
    "gemm_w8a8.py", "tma.py", "bench_gemm.py", "gemm_decode.py", "gemm_prefill.py"))


def source_digest() -> dict:
    """sha256 (first 12 hex) of each GEMM / GEMV source (SOURCES): ties a recorded gemm result to the code in the tree."""
    return harness.source_digest(SOURCES)


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
    the bf16 8192^3 rate (every decode kernel here multiplies in bf16 or on FP8 tensor cores, both faster). A launch
    with programmatic dependent launch (the same kernel, overlapping its neighbour) is named '<kernel> (pdl)'."""
    ceil = data.get("ceilings", {})
    dec = [r for r in data["results"] if r.get("family") == "decode"]
    # The copy test counts read + write; a pure read stream goes faster (cuBLAS' bf16 GEMV reads at more than
    # the copy figure here), so the memory roof is the best of the two, both measured in the same run.
    bw = max([ceil.get("copy_gbps") or 0] + [r["gbps"] or 0 for r in dec]) or None
    rate = ceil.get("bf16_gemm_tflops_8192")
    rows = []
    for r in dec:
        row = {"kernel": r["kernel"] + (" (pdl)" if r.get("pdl") else ""), "M": r["M"], "N": r["N"], "K": r["K"],
               "time_us": r["time_us"],
               "GB/s": r.get("gbps"), "weight_x_copy": r.get("weight_fraction_of_copy"), "x_vs_bf16": r.get("speedup"),
               "x_vs_scaled_mm_tensorwise": r.get("speedup_vs_scaled_mm_tensorwise"),
               "x_vs_scaled_mm_blockwise": r.get("speedup_vs_scaled_mm_blockwise")}
        if bw and rate:
            floor = roofline_us(r["bytes"], r["flops"], bw, rate)
            row["roofline_us"] = floor
            row["of_roofline"] = floor / r["time_us"]
        rows.append(row)
    return rows


def _prefill(data: dict) -> list[dict]:
    return [r for r in data["results"] if r.get("family") == "prefill"]


def _short(kernel: str) -> str:
    """'w8a8_wgmma_tma' -> 'wgmma_tma', 'scaled_mm_blockwise (torch._scaled_mm)' -> 'scaled_mm_blockwise'."""
    k = kernel.split(" (")[0]
    return k[len("w8a8_"):] if k.startswith("w8a8_") else k


def _prefill_firsts(data: dict, kernels=None, min_m: int = 0):
    """(short kernel name, record) of the first prefill record of each (kernel, shape), kernels in `kernels` (all if
    None) at M >= min_m."""
    seen = set()
    for r in _prefill(data):
        k = _short(r["kernel"])
        if (kernels and k not in kernels) or r.get("M", 0) < min_m or (k, r["shape"]) in seen:
            continue
        seen.add((k, r["shape"]))
        yield k, r


def prefill_table(data: dict, kernels=None, min_m: int = 0) -> list[dict]:
    """Every timed (kernel, shape) of the prefill runs: TFLOP/s and the same-run ratios (> 1: faster than it)."""
    rows = []
    for k, r in _prefill_firsts(data, kernels, min_m):
        rows.append({"kernel": k, "M": r.get("M"), "N": r.get("N"), "K": r.get("K"), "time_us": r["time_us"],
                     "TFLOP/s": r.get("tflops"), "x_vs_blockwise": r.get("speedup_vs_scaled_mm_blockwise"),
                     "x_vs_tensorwise": r.get("speedup_vs_scaled_mm_tensorwise"), "x_vs_bf16": r.get("speedup")})
    return rows


#: every decode GEMV version: 1 and 2 (gemv_fp8.cu, gemv_nvfp4.cu), then the packed ones (gemv_v3.py)
DECODE_VERSIONS = (1, 2) + GEMV_PACKED_VERSIONS
#: the label of each of our decode kernels and its name in a record (version 1 bare, later ones `_vN`)
VERSION_FAMILIES = (("fp8 channel", "gemv_fp8_channel"), ("fp8 block", "gemv_fp8_block"), ("nvfp4", "gemv_nvfp4"))
#: the packed versions' records are named by their compiled configuration (gemv3_fp8c_r1_nt1_c2_p3_e0_n0): the
#: format in the name -> the family label
PACKED_FORMATS = {"fp8c": "fp8 channel", "fp8b": "fp8 block", "nvfp4": "nvfp4"}


def _name(base: str, v: int) -> str:
    return base if v == 1 else f"{base}_v{v}"


def _names(*bases) -> tuple[str, ...]:
    return tuple(_name(b, v) for b in bases for v in DECODE_VERSIONS)


W8A16_KERNELS = _names("gemv_fp8_channel", "gemv_fp8_block")
NVFP4_KERNELS = _names("gemv_nvfp4")
# the copy launched with programmatic dependent launch (pdl) is reported beside and left out of the goals (a layer
# can use PDL; a lone GEMV has nothing to overlap with)
W8A16_V3 = tuple(f"gemv{v}_{f}_" for v in GEMV_PACKED_VERSIONS for f in ("fp8c", "fp8b"))
NVFP4_V3 = tuple(f"gemv{v}_nvfp4_" for v in GEMV_PACKED_VERSIONS)
#: the decode goals apply to shapes whose FP8 weights are at least this many bytes
GOAL_MIN_FP8_BYTES = 32 * 2**20


def _in_family(r: dict, kernels) -> bool:
    v3 = W8A16_V3 if kernels is W8A16_KERNELS else NVFP4_V3 if kernels is NVFP4_KERNELS else ()
    return not r.get("pdl") and (r["kernel"] in kernels or r["kernel"].startswith(v3))


def _best_per_shape(dec, kernels, M, key):
    """{(N, K): the record of `kernels` at M with the largest `key`} over the goal shapes (FP8 weights >= 32 MiB)."""
    out = {}
    for r in dec:
        if _in_family(r, kernels) and r.get("M") == M and r["N"] * r["K"] >= GOAL_MIN_FP8_BYTES and r.get(key):
            k = (r["N"], r["K"])
            if k not in out or r[key] > out[k][key]:
                out[k] = r
    return out


def _worst_goal(goal, target, per_shape, key):
    """One goal over every shape: measured = the WORST shape's value of its best kernel (met only if all shapes are)."""
    if not per_shape:
        return {"goal": goal, "target": target, "measured": None, "kernel": None, "shape": None, "per_shape": {}}
    worst = min(per_shape.values(), key=lambda r: r[key])
    return {"goal": goal, "target": target, "measured": worst[key], "kernel": worst["kernel"],
            "shape": f"{worst['N']}x{worst['K']}",
            "per_shape": {f"{n}x{k}": {"value": r[key], "kernel": r["kernel"]} for (n, k), r in sorted(per_shape.items())}}


def prefill_climb(data: dict, shape: str = "M=4096 N=7168 K=7168") -> list[dict]:
    """The climb at one shape: each rung's change, its rate, what it bought over the rung before, and what the SASS
    says (QGMMA per k-block loop, TMA loads, registers at entry / per consumer thread, spills, shared memory).

    Rows in gemm_prefill.LADDER order (the older versions first; the rung before wgmma_tma_a is wgmma_ws), then the
    side branches (gemm_prefill.CLIMB_BRANCH), each against the rung it changes."""
    from .gemm_prefill import CLIMB_BRANCH, CLIMB_STEPS, LADDER, OLDER

    at = {_short(r["kernel"]): r for r in _prefill(data) if r["shape"] == shape}
    facts = data.get("prefill_sass") or {}
    rows, prev = [], None
    for k in tuple(reversed(OLDER)) + LADDER + tuple(CLIMB_BRANCH):
        r = at.get(k)
        if r is None:
            continue
        if k in CLIMB_BRANCH:
            prev = at.get(CLIMB_BRANCH[k])
        f = facts.get(k, {})
        rows.append({"kernel": k, "change": CLIMB_STEPS.get(k, ""), "TFLOP/s": r.get("tflops"),
                     "x_prev_rung": (r["tflops"] / prev["tflops"]) if (prev and (k in LADDER[1:] or k in CLIMB_BRANCH))
                     else None,
                     "x_vs_blockwise": r.get("speedup_vs_scaled_mm_blockwise"), "x_vs_bf16": r.get("speedup"),
                     "config": r.get("config"), "QGMMA": f.get("QGMMA"), "TMA loads": f.get("UTMALDG"),
                     "regs": f.get("registers"), "regs/consumer": f.get("registers_consumer"),
                     "spill B": f.get("spill_stores"), "smem KB": (f["smem_dynamic"] + f.get("smem_static", 0)) / 1024
                     if f.get("smem_dynamic") else None})
        if k in LADDER:
            prev = r
    return rows


def wave_busy(r: dict) -> float | None:
    """The fraction of the persistent grid's tile slots that hold a tile: T tiles on P CTAs (clusters) take
    ceil(T / P) waves, and the last one runs T - (waves - 1) P of them. Where the record's last wave was cut along
    K into S pieces (split, after split_whole_tiles whole tiles F), that wave takes 1 / S of the time: T / (F + P / S).
    From the record's tile width, cluster and grid; None for a record without them.

    wave_busy({"M": 2048, "N": 7168, "bn": 256, "cluster": 2, "grid_units": 66}) -> 0.848 (224 tiles, 4 waves of 66)
    ... with "split": 2, "split_whole_tiles": 198 -> 0.970 (3 waves + one of half tiles)"""
    from .gemm_w8a8 import TmaConfig, tile_counts

    if not all(r.get(k) for k in ("M", "N", "bn", "cluster", "grid_units")) or r.get("persistent") is False:
        return None
    mu, nb = tile_counts(r["M"], r["N"], TmaConfig(bn=r["bn"], cluster=r["cluster"]))
    T, P = mu * nb, r["grid_units"]
    if (r.get("split") or 1) > 1:
        return T / (r["split_whole_tiles"] + P / r["split"])
    return T / (-(-T // P) * P)


def same_kernel_twice(data: dict, shape: str = "M=4096 N=7168 K=7168") -> dict | None:
    """The run's own noise floor: where the default ("wgmma_tma") ran the same compiled kernel, grid and split as a
    named rung of the climb, the two are one kernel timed twice in one run. Their ratio says how far apart two
    identical measurements landed; differences between rungs smaller than that are not evidence.

    Every rung with the default's kernel counts (two rungs can differ only in an option that does nothing at this
    shape): "apart" is the widest spread among all of them, max / min - 1.

    -> {"kernel": the first such rung, "kernels": every such rung, "twin": "wgmma_tma", "tflops": (the rungs' rates,
        then the default's), "apart": max / min - 1} or None"""
    from .gemm_prefill import CLIMB_BRANCH, LADDER

    at = {_short(r["kernel"]): r for r in _prefill(data) if r["shape"] == shape}
    d = at.get("wgmma_tma")
    if not d or not d.get("config"):
        return None
    key = ("config", "grid_units", "split", "group")
    same = [k for k in LADDER[:-1] + tuple(CLIMB_BRANCH)
            if at.get(k) and at[k].get("tflops") and all(at[k].get(x) == d.get(x) for x in key)]
    if not same:
        return None
    rates = tuple(at[k]["tflops"] for k in same) + (d["tflops"],)
    return {"kernel": same[0], "kernels": same, "twin": "wgmma_tma", "tflops": rates,
            "apart": max(rates) / min(rates) - 1}


def prefill_gap(data: dict, kernel: str = "wgmma_tma", min_m: int = 2048) -> list[dict]:
    """Our rate against the best FP8 rate measured in the same run, per shape with M >= min_m.

    best_fp8_in_run: the fastest FP8 (e4m3) result recorded at that shape (ours or torch._scaled_mm) and the run's
    FP8 ceiling (torch._scaled_mm tensorwise at 8192^3), whichever is higher: the rate this device was seen to
    reach. spec_dense_fp8: NVIDIA's datasheet figure, for context only (not measured)."""
    from .gemm_prefill import SPEC_DENSE_FP8_TFLOPS

    ceil = (data.get("ceilings") or {}).get("fp8_scaled_mm_tensorwise_tflops_8192") or 0
    by_shape: dict = {}
    for r in _prefill(data):
        if r.get("dtype", "").startswith("e4m3") and r.get("tflops"):
            by_shape.setdefault(r["shape"], []).append(r)
    rows = []
    for shape, rs in by_shape.items():
        ours = next((r for r in rs if _short(r["kernel"]) == kernel), None)
        if ours is None or ours.get("M", 0) < min_m:
            continue
        best = max(rs, key=lambda r: r["tflops"])
        best_rate = max(best["tflops"], ceil)
        rows.append({"shape": shape, "ours TFLOP/s": ours["tflops"], "best_fp8_in_run": best_rate,
                     "best_by": _short(best["kernel"]) if best["tflops"] >= ceil else "scaled_mm_tensorwise 8192^3",
                     "of_best": ours["tflops"] / best_rate, "wave_busy": wave_busy(ours),
                     "spec_dense_fp8 (datasheet)": SPEC_DENSE_FP8_TFLOPS,
                     "of_spec": ours["tflops"] / SPEC_DENSE_FP8_TFLOPS})
    return sorted(rows, key=_shape_key)


def _shape_key(row: dict) -> list[int]:
    """Sort key of a row by its shape 'M=4096 N=7168 K=7168': [4096, 7168, 7168]."""
    return [int(x.split("=")[1]) for x in row["shape"].split()]


def gap_kernel(data: dict) -> str | None:
    """The kernel a gap run examined: the one its left-out variants name (of_kernel), None if it has none."""
    return next((_short(r["of_kernel"]) for r in _prefill(data) if r.get("subset") == "gap" and r.get("of_kernel")),
                None)


def leave_one_out(data: dict, kernel: str | None = None) -> list[dict]:
    """Per shape of a gap run (gemm_prefill.bench_gap), TFLOP/s and ratios to _scaled_mm blockwise of the same run
    ('<name> x blk'), the examined kernel (default: gap_kernel(data)) called "k": "k", "k-no_promote" (a variant
    that leaves a stage out or does it twice), "k_sg1" (a kernel of the same arithmetic), "k+ffma_yield_all" (k with
    control bits rewritten in its cubin), the anchors.
    '<variant> share' = 1 - t_variant / t_k, the fraction of k's time the variant saves (the same rule for both
    kinds; a kernel of the same arithmetic whose bits differed from k's gets none): k at 2.0 us and k-no_promote at
    1.5 us give 'no_promote share' 0.25; doing a stage twice gives a negative share, the time the second copy adds.
    Control-bit edits ('k+<edit>') are read against their control, the unedited cubin loaded the same way, where
    the run has it: 'ffma_yield_all share' = 1 - t_edit / t_as_compiled ('as_compiled share' itself is against k:
    the same machine code loaded two ways, so its size is the noise of these comparisons)."""
    kernel = kernel or gap_kernel(data)
    rows: dict = {}
    for r in _prefill(data):
        if r.get("subset") != "gap" or not r.get("tflops"):
            continue
        row = rows.setdefault(r["shape"], {"shape": r["shape"], "_time": {}})
        k = _short(r["kernel"])
        k = "k" + k[len(kernel):] if kernel and k.startswith(kernel) else k
        row[k] = r["tflops"]
        if r.get("speedup_vs_scaled_mm_blockwise"):
            row[f"{k} x blk"] = r["speedup_vs_scaled_mm_blockwise"]
        if k == "k" or (k[:2] in ("k-", "k_", "k+") and r.get("bits_equal_to", True)):
            row["_time"][k] = r["time_us"]
    out = []
    for row in rows.values():
        times = row.pop("_time")
        for k, tv in times.items():
            ref = "k+as_compiled" if k.startswith("k+") and k != "k+as_compiled" and "k+as_compiled" in times else "k"
            if k != "k" and ref in times:
                row[f"{k[2:]} share"] = 1 - tv / times[ref]
        out.append(row)
    return sorted(out, key=_shape_key)


def decode_gap(data: dict) -> list[dict]:
    """Rows of a decode gap run (gemm_decode.bench_decode_gap), one per (M, N, K, format, variant): the time, the ratio
    to `_scaled_mm` tensorwise of the same round set ('x_scaled_mm', > 1: faster) and 'saves' = 1 - t_variant / t_full,
    the share of the shipped kernel's time the cut stage costs (full at 20 us and loads_only at 19 us: 0.05).
    Variants in the run's order (gemm_decode.DECODE_GAP's) after 'full'; formats 'fp8c' and 'nvfp4'."""
    rows, full = [], {}
    recs = [r for r in data.get("results", []) if r.get("family") == "decode_gap" and r.get("fmt")]
    order = ["full"] + list(dict.fromkeys(r["kernel"].split("-", 1)[1] for r in recs if "-" in r["kernel"]))
    for r in recs:
        if "-" not in r["kernel"]:
            full[(r["shape"], r["fmt"])] = r["time_us"]
    for r in recs:
        variant = r["kernel"].split("-", 1)[1] if "-" in r["kernel"] else "full"
        t0 = full.get((r["shape"], r["fmt"]))
        rows.append({"M": r["M"], "N": r["N"], "K": r["K"], "format": r["fmt"], "variant": variant,
                     "time_us": r["time_us"], "x_scaled_mm": r.get("speedup_vs_scaled_mm_tensorwise"),
                     "saves": (1 - r["time_us"] / t0) if t0 else None})
    return sorted(rows, key=lambda x: (x["format"], x["M"], x["N"] * x["K"], x["N"], order.index(x["variant"])))


def inflight_table(data: dict) -> list[dict]:
    """Rows of an in-flight run (tools/gpu/inflight_probe.py: version 3 at several (C, P) and grids, family 'inflight'),
    one per (format, M, N, K, config): C chunks per unit, P units in flight per warp (C P KiB of weights per warp), WPC
    warps per CTA, 'split' whole (row groups per warp) or stream-K; the ratios to the same round's `_scaled_mm`
    tensorwise ('x_scaled_mm') and bf16 cuBLAS ('x_bf16'); 'x_default' = t(default) / t, where t(default) is the
    better of the two splits of the default config (C, P, WPC, CPS) in the same rounds (> 1: faster than it), and
    'default_split' that split."""
    recs = [r for r in data.get("results", []) if r.get("family") == "inflight" and r.get("fmt") and r.get("config")]

    def is_default(r):
        return list(r["config"][:4]) == list((r.get("config_CPWC_R") or [[]])[0])

    base = {}
    for r in recs:
        k = (r["shape"], r["fmt"])
        if is_default(r) and r["time_us"] < base.get(k, (float("inf"),))[0]:
            base[k] = (r["time_us"], "whole" if r["config"][4] else "stream-K")
    rows = []
    for r in recs:
        C, P, wpc, _, whole = r["config"]
        t0, split0 = base.get((r["shape"], r["fmt"]), (None, None))
        rows.append({"format": r["fmt"], "M": r["M"], "N": r["N"], "K": r["K"], "C": C, "P": P, "KiB_per_warp": C * P,
                     "WPC": wpc, "split": "whole" if whole else "stream-K", "time_us": r["time_us"],
                     "x_scaled_mm": r.get("speedup_vs_scaled_mm_tensorwise"),
                     "x_bf16": r.get("speedup") if r.get("anchor") == "bf16_cublas" else None,
                     "x_default": t0 / r["time_us"] if t0 else None, "default_split": split0,
                     "default": is_default(r)})
    return sorted(rows, key=lambda x: (x["format"], x["N"] * x["K"], x["N"], x["M"], x["C"] * x["P"], x["C"],
                                       x["split"], -x["WPC"]))


def inflight_defaults(rows: list[dict]) -> dict:
    """{format: (C, P) of the default config} in inflight_table rows."""
    return {r["format"]: (r["C"], r["P"]) for r in rows if r["default"]}


def inflight_summary(rows: list[dict]) -> list[dict]:
    """inflight_table rows summarized per (format, C, P, WPC, split) over the run's shapes and M, like for like: only
    the cases run with the split the default ran best with there (whole row groups where there are enough of them,
    stream-K where there are not); how many, and the least, median and largest x_default."""
    import statistics

    out = {}
    for r in rows:
        if r["x_default"] is not None and r["split"] == r["default_split"]:
            out.setdefault((r["format"], r["C"], r["P"], r["WPC"], r["split"]), []).append(r["x_default"])
    return [{"format": f, "C": C, "P": P, "KiB_per_warp": C * P, "WPC": w, "split": sp, "cases": len(v),
             "x_default_min": min(v), "x_default_median": statistics.median(v), "x_default_max": max(v)}
            for (f, C, P, w, sp), v in sorted(out.items(), key=lambda kv: (kv[0][0], kv[0][4], kv[0][1] * kv[0][2],
                                                                           kv[0][1], -kv[0][3]))]


def stagger_table(data: dict, no_x: bool = False) -> list[dict]:
    """Rows of a stagger run (tools/gpu/stagger_probe.py, family 'stagger'), one per (format, M, N, K, WPC): version 3
    with whole row groups per warp as shipped (every warp walks its group from k = 0, in step with the others) and its
    copy whose warp w starts at unit w mod KU, same grid, same rounds: both times and 'stagger_vs_default' =
    t(default) / t(stagger) (> 1: staggering is faster). no_x: the records of a run with both copies' activation loads
    cut (FP8LAB_PROBE_NO_X=1) instead, read on their own."""
    pairs = {}
    for r in data.get("results", []):
        if (r.get("family") == "stagger" and r.get("fmt") and r.get("config") and r.get("stagger") in (0, 1)
                and bool(r.get("no_x")) == no_x):
            k = (r["fmt"], r["M"], r["N"], r["K"], r["config"][2])
            pairs.setdefault(k, {})[r["stagger"]] = r["time_us"]
    return [{"format": f, "M": M, "N": N, "K": K, "WPC": w, "default_us": t[0], "stagger_us": t[1],
             "stagger_vs_default": t[0] / t[1]}
            for (f, M, N, K, w), t in sorted(pairs.items(), key=lambda kv: (kv[0][0], kv[0][2] * kv[0][3], kv[0][2],
                                                                             kv[0][1], -kv[0][4]))
            if 0 in t and 1 in t]


def segments_table(data: dict) -> list[dict]:
    """Rows of a segments run (tools/gpu/segments_probe.py, family 'segments'), one per (format, M, N, K, S, WPC):
    version 3 with its split in S whole segments per row group ('segments' S >= 2; 0 for the default's stream-K),
    'x_default' = t(default stream-K) / t in the same rounds (> 1: faster than the default) and the ratio to the same
    round's `_scaled_mm` tensorwise."""
    recs = [r for r in data.get("results", []) if r.get("family") == "segments" and r.get("fmt")
            and r.get("segments") is not None and r.get("config")]
    base = {(r["shape"], r["fmt"]): r["time_us"] for r in recs if r["segments"] == 0}
    rows = []
    for r in recs:
        t0 = base.get((r["shape"], r["fmt"]))
        rows.append({"format": r["fmt"], "M": r["M"], "N": r["N"], "K": r["K"], "S": r["segments"],
                     "WPC": r["config"][2], "warps": (r.get("info") or {}).get("warps"), "time_us": r["time_us"],
                     "x_default": t0 / r["time_us"] if t0 else None,
                     "x_scaled_mm": r.get("speedup_vs_scaled_mm_tensorwise")})
    return sorted(rows, key=lambda x: (x["format"], x["M"], x["N"] * x["K"], x["N"], x["S"], -x["WPC"]))


def segments_best(rows: list[dict]) -> list[dict]:
    """segments_table rows reduced to one per (format, M, N, K) where a segment split was timed: the default's time and
    ratio to `_scaled_mm`, and the fastest segment config (S, WPC) with its x_default."""
    out = []
    for key in sorted({(r["format"], r["M"], r["N"], r["K"]) for r in rows}):
        these = [r for r in rows if (r["format"], r["M"], r["N"], r["K"]) == key]
        d = [r for r in these if r["S"] == 0]
        segs = [r for r in these if r["S"] >= 2 and r["x_default"] is not None]
        if not d or not segs:
            continue
        b = max(segs, key=lambda r: r["x_default"])
        out.append({"format": key[0], "M": key[1], "N": key[2], "K": key[3], "default_us": d[0]["time_us"],
                    "default_x_scaled_mm": d[0]["x_scaled_mm"], "best_S": b["S"], "best_WPC": b["WPC"],
                    "best_us": b["time_us"], "best_x_default": b["x_default"], "best_x_scaled_mm": b["x_scaled_mm"]})
    return out


def decode_timeline(data: dict) -> list[dict]:
    """Rows of a decode timeline run (gemv_timeline.bench_decode_timeline), one per (format, M, N, K): the shipped
    kernel's time and ratio to `_scaled_mm` tensorwise of the same rounds, the instrumented copy's time ('stamps_cost':
    1 - t_kernel / t_copy, what the clock reads cost), and from the copy's stamped call (us): the warps, when the
    last one started, the first unit's wait (median, p90), each warp's streaming time (min, median, max), the end's
    time (median), the span, the mean end and the share of warp-time spent ended within the span ('idle_share'), the
    share of the streaming times' variance between SMs ('between_sm_share', None in runs that did not record it) and
    `active` (warps still running over the span, gemv_timeline.CURVE_POINTS points)."""
    recs = [r for r in data.get("results", []) if r.get("family") == "decode_timeline" and r.get("fmt")]
    plain = {(r["shape"], r["fmt"]): r for r in recs if not r.get("timeline")}
    rows = []
    for r in recs:
        tl = r.get("timeline")
        if not tl:
            continue
        k = plain.get((r["shape"], r["fmt"]))
        rows.append({"format": r["fmt"], "M": r["M"], "N": r["N"], "K": r["K"],
                     "time_us": k["time_us"] if k else None,
                     "x_scaled_mm": k.get("speedup_vs_scaled_mm_tensorwise") if k else None,
                     "stamps_cost": (1 - k["time_us"] / r["time_us"]) if k else None, "warps": tl["warps"],
                     "whole_groups": r.get("whole_groups"), "last_start_us": tl["start_us"]["100"],
                     "first_unit_us": tl["first_unit_us"]["50"], "first_unit_p90_us": tl["first_unit_us"]["90"],
                     "stream_min_us": tl["stream_us"]["0"], "stream_us": tl["stream_us"]["50"],
                     "stream_max_us": tl["stream_us"]["100"], "finish_us": tl["finish_us"]["50"],
                     "span_us": tl["span_us"], "mean_end_us": tl["mean_end_us"], "idle_share": tl["idle_share"],
                     "between_sm_share": tl.get("between_sm_share"), "active": tl["active"]})
    return sorted(rows, key=lambda x: (x["N"] * x["K"], x["N"], x["M"], x["format"]))


def plot_decode_timeline(rows: list[dict], path=None):
    """Warps still running over one call (rows: decode_timeline's), each curve as a share of its warps against the
    share of its span, one panel per shape: where the curve leaves 1, warps have ended while others still stream."""
    import matplotlib.pyplot as plt

    shapes = sorted({(r["N"], r["K"]) for r in rows}, key=lambda s: s[0] * s[1])
    fig, axes = plt.subplots(1, max(1, len(shapes)), figsize=(4.6 * max(1, len(shapes)), 3.6), sharey=True)
    axes = [axes] if len(shapes) <= 1 else axes
    for ax, (N, K) in zip(axes, shapes):
        for i, r in enumerate(x for x in rows if (x["N"], x["K"]) == (N, K)):
            n = len(r["active"])
            ax.plot([j / (n - 1) * r["span_us"] for j in range(n)], [a / r["warps"] for a in r["active"]],
                    color=f"C{i}", label=f"{r['format']} M={r['M']}")
        ax.set_title(f"{N}x{K}")
        ax.set_xlabel("time in the call (us)")
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=8, frameon=False)
    axes[0].set_ylabel("share of warps still running")
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=110)
    return fig


def order_effect(data: dict) -> list[dict]:
    """The order run (gemm_prefill.bench_order), per shape and settle time: the examined kernel's median time after
    each neighbour ('after <neighbour>' in us), its spread over them ((slowest - fastest) / fastest), the range of
    its ratios to the run's first _scaled_mm blockwise timing, and the two blockwise timings' own difference (the
    anchor timed once first and once after the examined kernel). [] where the file has no order run."""
    runs: dict = {}
    for r in _prefill(data):
        if r.get("subset") != "order" or not r.get("time_us"):
            continue
        key = (r["shape"], float(r.get("settle_ms") or 0.0))
        runs.setdefault(key, []).append(r)
    rows = []
    for (shape, settle), rs in runs.items():
        copies = ([r for r in rs if r.get("copy_of")]  # runs before copy_of: every w8a8_ record named '@after_'
                  or [r for r in rs if "@after_" in r["kernel"] and r["kernel"].startswith("w8a8_")])
        blk = next((r for r in rs if r["kernel"].startswith("scaled_mm_blockwise") and "@" not in r["kernel"]), None)
        blk2 = next((r for r in rs if r["kernel"].startswith("scaled_mm_blockwise@after_")), None)
        if not copies:
            continue
        ts = [r["time_us"] for r in copies]
        row = {"shape": shape, "settle_ms": settle, "kernel": copies[0]["kernel"].split("@")[0],
               "rotation": copies[0].get("rotation", "timer")}
        row.update({f"after {r['after']}": r["time_us"] for r in copies})
        row["spread"] = max(ts) / min(ts) - 1
        if blk:
            xs = [blk["time_us"] / t for t in ts]
            row["x blk lo"], row["x blk hi"] = min(xs), max(xs)
            if blk2:
                row["blk twice"] = abs(blk["time_us"] / blk2["time_us"] - 1)
        rows.append(row)
    return sorted(rows, key=lambda r: (_shape_key(r), r["settle_ms"]))


#: the prefill goal: at least this many times _scaled_mm blockwise at every shape with M >= PREFILL_GOAL_MIN_M
PREFILL_GOAL, PREFILL_GOAL_MIN_M = 0.95, 2048


def prefill_goals(data: dict, kernel: str = "wgmma_tma") -> list[dict]:
    """The prefill goals with their measured same-run ratios (worst case over the shapes each one covers)."""
    rows = [r for r in _prefill(data) if _short(r["kernel"]) == kernel]
    out = []

    def worst(rs, key):
        rs = [r for r in rs if r.get(key)]
        return min(rs, key=lambda r: r[key]) if rs else None

    r = worst([r for r in rows if (r.get("M"), r.get("N"), r.get("K")) == (4096, 7168, 7168)], "speedup_vs_scaled_mm_blockwise")
    out.append({"goal": f"W8A8 4096x7168x7168 >= {PREFILL_GOAL}x torch._scaled_mm blockwise", "target": PREFILL_GOAL,
                "measured": r and r["speedup_vs_scaled_mm_blockwise"], "kernel": kernel, "where": r and r["shape"]})
    r = worst([r for r in rows if r.get("M", 0) >= PREFILL_GOAL_MIN_M], "speedup_vs_scaled_mm_blockwise")
    out.append({"goal": f"W8A8 >= {PREFILL_GOAL}x torch._scaled_mm blockwise at every shape with M >= "
                        f"{PREFILL_GOAL_MIN_M} (worst shown)",
                "target": PREFILL_GOAL, "measured": r and r["speedup_vs_scaled_mm_blockwise"], "kernel": kernel,
                "where": r and r["shape"]})
    out.append({"goal": f"moonshot: W8A8 >= 1.1x torch._scaled_mm blockwise at every shape with M >= {PREFILL_GOAL_MIN_M}",
                "target": 1.1,
                "measured": r and r["speedup_vs_scaled_mm_blockwise"], "kernel": kernel, "where": r and r["shape"]})
    r = worst([r for r in rows if r.get("M", 0) >= 512], "speedup")
    out.append({"goal": "W8A8 faster than bf16 cuBLAS at every shape with M >= 512 (worst shown)", "target": 1.0,
                "measured": r and r["speedup"], "kernel": kernel, "where": r and r["shape"]})
    for g in out:
        g["met"] = None if g["measured"] is None else bool(g["measured"] >= g["target"])
    return out


def goal_line(g: dict, where: str | None = None) -> str:
    """One goal (a goals / prefill_goals entry) as a printed line: verdict, measured value, target, goal, and in
    brackets `where` (default: the goal's 'where')."""
    verdict = "not measured" if g["met"] is None else "met" if g["met"] else "NOT met"
    m = "-" if g["measured"] is None else format(g["measured"], ".3f")
    return (f"{verdict:12s} {m:>6s} (target {round(g['target'], 3)}) {g['goal']}  "
            f"[{where if where is not None else g.get('where') or '-'}]")


def prefill_goal_lines(data: dict, kernel: str = "wgmma_tma") -> list[str]:
    """prefill_goals as printed lines: verdict, measured ratio, target, goal, the worst shape."""
    return [goal_line(g) for g in prefill_goals(data, kernel)]


def decode_goal_lines(data: dict, per_shape: bool = True) -> list[str]:
    """The decode goals as printed lines, each with its kernel and worst shape, and (per_shape) one line per shape
    under it."""
    out = []
    for g in decode_goals(data):
        out.append(goal_line(g, f"{g.get('kernel') or '-'}, {g.get('shape') or g.get('where') or '-'}"))
        if per_shape:
            out += [f"{'':20s} per shape {sh:12s} {v['value']:.3f} {v['kernel']}" for sh, v in (g.get("per_shape") or {}).items()]
    return out


def goals(data: dict) -> list[dict]:
    """The lab's decode goals (decode_goals) and the prefill ones (prefill_goals)."""
    return decode_goals(data) + prefill_goals(data)


def decode_goals(data: dict) -> list[dict]:
    """The lab's decode goals, each with its measured value (None where the run has no such number).

    Every decode goal is evaluated on every shape whose FP8 weights are >= 32 MiB; `measured` is the worst shape's
    value of the best kernel there (the goal holds only if it holds everywhere), `per_shape` lists them all."""
    res = data["results"]
    dec = [r for r in res if r.get("family") == "decode"]
    out = []
    for M in (1, 16):
        out.append(_worst_goal(f"W8A16 M={M} >= 1.0x torch._scaled_mm tensorwise at every shape with >= 32 MiB of FP8 weights",
                               1.0, _best_per_shape(dec, W8A16_KERNELS, M, "speedup_vs_scaled_mm_tensorwise"),
                               "speedup_vs_scaled_mm_tensorwise"))
        out.append(_worst_goal(f"W8A16 M={M} >= 0.90 of copy bandwidth on the weight bytes (every shape >= 32 MiB)",
                               0.90, _best_per_shape(dec, W8A16_KERNELS, M, "weight_fraction_of_copy"),
                               "weight_fraction_of_copy"))
    r = max((r for r in dec if _in_family(r, NVFP4_KERNELS) and r.get("M") == 1 and (r["N"], r["K"]) == (28672, 8192)
             and r.get("speedup")), key=lambda r: r["speedup"], default=None)
    out.append({"goal": "NVFP4 GEMV M=1 28672x8192 >= 3.3x bf16 cuBLAS", "target": 3.3, "measured": r and r["speedup"],
                "kernel": r and r["kernel"], "shape": "28672x8192"})
    out.append(_worst_goal("NVFP4 M=1 >= 0.85 of copy bandwidth on its 0.5625 B/weight (every shape >= 32 MiB)", 0.85,
                           _best_per_shape(dec, NVFP4_KERNELS, 1, "weight_fraction_of_copy"), "weight_fraction_of_copy"))
    out.append(_worst_goal("NVFP4 M=8 >= 2.5x bf16 cuBLAS (every shape >= 32 MiB)", 2.5,
                           _best_per_shape(dec, NVFP4_KERNELS, 8, "speedup"), "speedup"))
    for g in out:
        g["met"] = None if g["measured"] is None else bool(g["measured"] >= g["target"])
    return out


def _version_label(r: dict) -> str | None:
    """'fp8 channel v3' for a decode record of ours (v3 and v4 records are named by their configuration: gemv3_...,
    gemv4_...), None otherwise."""
    k = r["kernel"]
    for label, base in VERSION_FAMILIES:
        for v in DECODE_VERSIONS:
            if k == _name(base, v):
                return f"{label} v{v}"
    for v in GEMV_PACKED_VERSIONS:
        for fmt, label in PACKED_FORMATS.items():
            if k.startswith(f"gemv{v}_{fmt}_"):
                return f"{label} v{v}"
    return None


def _plain_decode(data: dict) -> list[dict]:
    """A gemm record's decode results launched plainly (without programmatic dependent launch: the goals use those)."""
    return [r for r in data["results"] if r.get("family") == "decode" and not r.get("pdl")
            and not r["kernel"].endswith("_pdl")]


def best_version_records(data: dict) -> dict:
    """{(version label, N, K, M): the fastest plain-launch record of that version of one of our decode kernels at that
    point, over its configurations and runs}: what decode_versions tabulates (and findings.version_verdicts compares,
    spreads included)."""
    best: dict = {}
    for r in _plain_decode(data):
        label = _version_label(r)
        key = (label, r["N"], r["K"], r["M"])
        if label is not None and (key not in best or r["time_us"] < best[key]["time_us"]):
            best[key] = r
    return best


def decode_versions(data: dict) -> list[dict]:
    """One row per decode (N, K, M): the anchors' times and each version of each of our kernels side by side (us:
    the fastest record of that version at that point, over its configurations and runs), with the best same-run
    ratio of our FP8 kernels to torch._scaled_mm tensorwise (> 1: ours faster). A version the run did not time is
    None. Launches with programmatic dependent launch (`pdl`) are left out: the goals use the plain launch."""
    dec = _plain_decode(data)
    versions = best_version_records(data)
    keys = sorted({(r["N"], r["K"], r["M"]) for r in dec}, key=lambda k: (k[0] * k[1], k[2]))
    rows = []
    for N, K, M in keys:
        at = [r for r in dec if (r["N"], r["K"], r["M"]) == (N, K, M)]
        best = lambda pred: min((r["time_us"] for r in at if pred(r)), default=None)  # noqa: E731
        row = {"N": N, "K": K, "M": M, "bf16 cuBLAS": best(lambda r: r["kernel"].startswith("bf16_cublas")),
               "_scaled_mm tw": best(lambda r: r["kernel"].startswith("scaled_mm_tensorwise"))}
        for label, _ in VERSION_FAMILIES:
            for v in DECODE_VERSIONS:
                row[f"{label} v{v}"] = (versions.get((f"{label} v{v}", N, K, M)) or {}).get("time_us")
        fp8 = [r.get("speedup_vs_scaled_mm_tensorwise") for r in at
               if (_version_label(r) or "").startswith("fp8") and r.get("speedup_vs_scaled_mm_tensorwise")]
        row["best fp8 / _scaled_mm"] = max(fp8, default=None)
        rows.append(row)
    return rows


def version_speedups(rows: list[dict], old: int, new: int) -> dict:
    """{family label: [time of version `old` / time of version `new`, at each decode_versions row where both ran]}
    (above 1: the newer version is faster).  version_speedups(decode_versions(data), 1, 3) -> {"fp8 channel": [...]}"""
    out: dict = {}
    for label, _ in VERSION_FAMILIES:
        for r in rows:
            a, b = r.get(f"{label} v{old}"), r.get(f"{label} v{new}")
            if a and b:
                out.setdefault(label, []).append(a / b)
    return out


def fixed_cost_fit(data: dict, M: int = 1) -> list[dict]:
    """time = fixed + weight bytes / rate, fitted by least squares over the run's decode shapes at M, per kernel (the
    anchors by name; ours by version label, the fastest record of each version per shape; plain launches only).

    `fixed_us`: the part of a call that does not grow with the bytes (launch, ramp-up, the tail, a split's fix-up);
    `rate_TBps`: the streaming rate once running (a read-only kernel may exceed the copy test, which also writes);
    `r2`: how well a straight line explains the times. Kernels timed at fewer than 3 shapes are left out.

        fixed_cost_fit({"results": [records of t = 5 + bytes / 4e6 us]}) -> [{"fixed_us": 5.0, "rate_TBps": 4.0, ...}]
    """
    from .report import fixed_plus_stream

    best: dict = {}
    for r in data.get("results", []):
        if r.get("family") != "decode" or r.get("M") != M or r.get("pdl") or not r.get("weight_bytes"):
            continue
        name = _version_label(r) or r["kernel"].split(" (")[0]
        key = (name, r["N"], r["K"])
        if key not in best or r["time_us"] < best[key]["time_us"]:
            best[key] = r
    rows = []
    for name in sorted({k[0] for k in best}):
        fit = fixed_plus_stream((r["weight_bytes"] / 1e6, r["time_us"]) for k, r in best.items() if k[0] == name)
        if fit is not None:
            rows.append({"kernel": name, "M": M, "shapes": fit["points"], "fixed_us": fit["fixed_us"],
                         "rate_TBps": fit["rate_TBps"], "r2": fit["r2"]})
    return rows


def goal_reasons(data: dict) -> list[dict]:
    """For each decode goal that is not met: its worst shape, what the kernel read there and how fast, against the
    anchor (torch._scaled_mm tensorwise, or bf16 cuBLAS) and the copy bandwidth, and the time it would take at the
    goal. Every number is the run's; the notebook explains the mechanisms beside them.

    Columns: MB = the kernel's weight bytes; GB/s = weight bytes / time; anchor GB/s = the anchor's weight bytes /
    its time; floor_us = weight bytes / copy bandwidth; over_floor_us = time - floor (launch, tail and what the
    kernel does not overlap: the larger it is relative to the time, the more a small shape suffers)."""
    dec = [r for r in data["results"] if r.get("family") == "decode"]
    copy = (data.get("ceilings") or {}).get("copy_gbps")
    out = []
    for g in decode_goals(data):
        if g.get("met") is not False or not g.get("shape"):
            continue
        N, K = (int(x) for x in g["shape"].split("x"))
        M = int(re.search(r"M=(\d+)", g["goal"]).group(1))
        key = "speedup" if "bf16" in g["goal"] else ("weight_fraction_of_copy" if "copy" in g["goal"]
                                                      else "speedup_vs_scaled_mm_tensorwise")
        cands = [r for r in dec if r["kernel"] == g["kernel"] and (r["N"], r["K"], r["M"]) == (N, K, M)
                 and not r.get("pdl") and r.get(key)]
        if not cands:
            continue
        ours = max(cands, key=lambda r: r[key])            # the record the goal was evaluated on
        anchor_name = "bf16_cublas" if "bf16" in g["goal"] else "scaled_mm_tensorwise"
        same = [r for r in dec if r["kernel"].startswith(anchor_name) and (r["N"], r["K"], r["M"]) == (N, K, M)]
        anc = next((r for r in same if r.get("run") == ours.get("run")), same[0] if same else None)  # same run first
        wb = ours.get("weight_bytes") or ours["bytes"]
        row = {"goal": g["goal"], "target": g["target"], "measured": g["measured"], "kernel": g["kernel"],
               "worst shape": f"{N}x{K} M={M}", "MB": wb / 1e6, "time_us": ours["time_us"],
               "GB/s": ours.get("weight_gbps") or wb / ours["time_us"] / 1e3,
               "anchor": anchor_name, "anchor_us": anc and anc["time_us"],
               "anchor GB/s": anc and (anc.get("weight_gbps") or (anc.get("weight_bytes") or anc["bytes"]) / anc["time_us"] / 1e3),
               "copy GB/s": copy, "floor_us": wb / copy / 1e3 if copy else None}
        row["over_floor_us"] = row["time_us"] - row["floor_us"] if row["floor_us"] else None
        row["goal_us"] = ours["time_us"] * g["measured"] / g["target"]     # the time at which the goal would hold
        out.append(row)
    return out


def decode_roofline_points(data: dict, kernels=("bf16_cublas (torch F.linear)", "scaled_mm_tensorwise (torch._scaled_mm)",
                                                "gemv_fp8_channel_v3", "gemv_nvfp4_v3"), shape=(28672, 8192)) -> list[dict]:
    """Measured decode GEMV points for notebook 04's roofline: for each kernel and M at one shape, the arithmetic
    intensity of the bytes it moved (FLOP / byte), the achieved TFLOP/s and GB/s. fp8lab.bandwidth.roofline_figure
    takes them as `measured` points ({"name", "intensity", "tflops"})."""
    pts = []
    for r in data["results"]:
        if r.get("family") == "decode" and r["kernel"] in kernels and (r["N"], r["K"]) == tuple(shape) and r.get("tflops"):
            pts.append({"name": f"{r['kernel'].split(' (')[0]} M={r['M']}", "kernel": r["kernel"], "M": r["M"],
                        "intensity": r["flops"] / r["bytes"], "tflops": r["tflops"], "gbps": r.get("gbps"),
                        "time_us": r["time_us"]})
    return sorted(pts, key=lambda p: (p["kernel"], p["M"]))


def goal_table(data: dict) -> list[dict]:
    """The goals as table rows (goal, target, measured, met, worst shape, kernel), computed from the records (a file
    merged from several runs carries one run's `goals`, computed before the others joined)."""
    return [{"goal": g["goal"], "target": g["target"], "measured": g["measured"], "met": g["met"],
             "shape": g.get("shape"), "kernel": g.get("kernel")} for g in goals(data)]


def format_rows(rows: list[dict], cols: list[str] | None = None) -> str:
    """A plain-text table (no pandas): numbers to 3 significant digits (whole numbers from 100 up, never in
    exponent form below 10^4: 1124.3 -> '1124'), missing values as '-'."""
    if not rows:
        return "(no rows)"
    cols = cols or list(rows[0])

    def f(v):
        if v is None:
            return "-"
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
        return str(v)
    cells = [[f(r.get(c)) for c in cols] for r in rows]
    w = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w[i]) for i, c in enumerate(cols)), "  ".join("-" * x for x in w)]
    lines += ["  ".join(row[i].ljust(w[i]) for i in range(len(cols))) for row in cells]
    return "\n".join(lines)


def provenance_summary(data: dict) -> dict:
    """Where a recorded result came from, and whether the kernel sources in this tree are the ones measured.

    Reads both provenance schemas: fp8lab.provenance's (packages / machine sub-dicts, dirty flag) and the older flat one."""
    prov = data.get("provenance") or {}
    flat = provenance.flat(prov)
    rec = data.get("sources_sha256_12") or prov.get("sources_sha256_12", {})
    now = harness.source_digest(tuple(rec))  # the files the record names (a gemm, attention or layer record)
    same = {f: rec.get(f) == now.get(f) for f in rec}
    keys = ("device", "date", "torch", "cupy", "cuda", "git_commit", "dirty", "command", "nvidia_smi")
    return {**{k: flat.get(k) for k in keys if k in flat or k in ("device", "date", "git_commit", "command")},
            "sources_match_this_tree": all(same.values()) if same else None,
            "sources_differing": [f for f, ok in same.items() if not ok]}


def provenance_rows(data: dict, keys=("git_commit", "device", "date", "command", "torch", "cupy", "cuda",
                                      "nvidia_smi")) -> list[str]:
    """A record's provenance as aligned 'key  value' lines (either schema), then whether the kernel sources the
    record names still match this tree."""
    p = provenance.flat(data.get("provenance") or {})
    return [f"{k:11s} {p.get(k) or '-'}" for k in keys] + [f"{'sources':11s} {sources_state(data)}"]


def sources_state(data: dict, missing: str | None = "not recorded with this run") -> str | None:
    """Whether a record timed the kernel sources of this tree, in words a reader can act on: 'the kernel sources of
    this tree', `missing` where the record holds no sources digest, or 'differ from this tree: a.cu, b.py (changed
    since <commit>: these rows time the code as it was then; git diff <commit> -- <paths> shows the change)'."""
    s = provenance_summary(data)
    if s["sources_match_this_tree"] is None:
        return missing
    if s["sources_match_this_tree"]:
        return "the kernel sources of this tree"
    c = str(s.get("git_commit") or "")[:7] or "the recorded commit"
    diff = s["sources_differing"]
    paths = " ".join(f"fp8lab/kernels/{f}" for f in diff) if len(diff) <= 3 else "fp8lab/kernels"
    return (f"differ from this tree: {', '.join(diff)} (changed since {c}: these rows time the code as it was then; "
            f"git diff {c} -- {paths} shows the change)")


def prefill_repeats(runs: list[dict], kernel: str = "wgmma_tma", min_m: int = 0) -> list[dict]:
    """The same prefill grid recorded several times (runs: loaded gemm files, one GPU): per shape, the kernel's ratio to
    _scaled_mm blockwise in each run ('x_runs', in the order given), their median, min, max and 'spread' (max / min - 1),
    the distribution-free interval of the median ('median_lo', 'median_hi', 'median_coverage': stats.median_interval),
    and 'same_launch': whether every run launched the same compiled configuration and split there (the records'
    config and split fields; the SASS of a configuration is the source's business, checked apart)."""
    per: dict = {}
    for d in runs:
        for _, r in _prefill_firsts(d, (kernel,), min_m):
            x = r.get("speedup_vs_scaled_mm_blockwise")
            row = per.setdefault(r["shape"], {"shape": r["shape"], "M": r.get("M"), "N": r.get("N"), "K": r.get("K"),
                                              "x_runs": [], "_launch": set()})
            if x:
                row["x_runs"].append(x)
            row["_launch"].add((r.get("config"), r.get("split")))
    out = []
    for row in per.values():
        xs = row["x_runs"]
        if not xs:
            continue
        row["same_launch"] = len(row.pop("_launch")) == 1
        lo, hi, cov = median_interval(xs)
        row.update(runs=len(xs), x_median=harness.quartiles(xs)[1], x_min=min(xs), x_max=max(xs),
                   spread=max(xs) / min(xs) - 1, median_lo=lo, median_hi=hi, median_coverage=cov)
        out.append(row)
    return sorted(out, key=_shape_key)


def repeats_table(rows: list[dict]) -> list[dict]:
    """prefill_repeats rows for format_rows: the shape, each run's ratio (3 decimals, run order), the median, its
    distribution-free interval with the interval's coverage, the spread and same_launch."""
    return [{"shape": r["shape"], "x_runs": " ".join(f"{x:.3f}" for x in r["x_runs"]), "x_median": r["x_median"],
             "median interval": f"[{r['median_lo']:.3f}, {r['median_hi']:.3f}] {100 * r['median_coverage']:.0f} %",
             "spread": r["spread"], "same_launch": r["same_launch"]} for r in rows]


def run_line(data: dict) -> str:
    """One line of a run's provenance: 'run: <commit8> <date to the minute> dirty=<flag> <device>'."""
    p = data.get("provenance") or {}
    return f"run: {str(p.get('git_commit', '?'))[:8]} {str(p.get('date', '?'))[:16]} dirty={p.get('dirty')} {p.get('device')}"


def decode_gap_sass_rows(data: dict, ops=("LDG", "HMMA", "HMUL2", "LOP3")) -> list[dict]:
    """The SASS opcode counts a decode gap run recorded (extra decode_gap_sass), one row per (format, variant, kernel):
    the whole function's instruction count and the counts of `ops`."""
    rows = []
    for fmt, by_variant in (data.get("decode_gap_sass") or {}).items():
        for variant, kernels in by_variant.items():
            for kname, c in sorted(kernels.items()):
                rows.append({"format": fmt, "variant": variant, "kernel": kname, "total": sum(c.values()),
                             **{o: c.get(o, 0) for o in ops}})
    return rows


def provenance_lines(data: dict) -> list[str]:
    """provenance_summary as aligned 'key value' lines (whitespace in a value collapsed), for printing; its two
    source-digest entries as one 'sources' line in words (sources_state)."""
    skip = ("sources_match_this_tree", "sources_differing")
    return ([f"{k:24s} {' '.join(str(v).split())}" for k, v in provenance_summary(data).items() if k not in skip]
            + [f"{'sources':24s} {sources_state(data)}"])


#: where the lab's GPU records live: the H200's (outputs/kernels/) and the H100's (outputs/kernels/h100/)
RECORD_FOLDERS = (harness.REPO / "outputs" / "kernels", harness.REPO / "outputs" / "kernels" / "h100")


def recorded_runs(filename: str, folders=RECORD_FOLDERS) -> list[dict]:
    """Every committed run named `filename` (e.g. 'decode_gap.json') in `folders`, in that order: one per GPU it was
    recorded on, each to be read on its own (its ratios compare variants timed in the same rounds on one GPU)."""
    return [load(f / filename) for f in folders if (f / filename).is_file()]


def probe_reports(filename: str, rows_of, sentence_of, folders=RECORD_FOLDERS) -> list[tuple[list[str], list[dict], str]]:
    """Each committed run named `filename` (recorded_runs, one per GPU) read the same way: (its provenance lines, its
    rows = rows_of(run), the sentence sentence_of(rows, device) renders from them). notebook.show_recorded prints them."""
    out = []
    for d in recorded_runs(filename, folders):
        rows = rows_of(d)
        out.append((provenance_lines(d), rows, sentence_of(rows, (d.get("provenance") or {}).get("device"))))
    return out


def repeat_runs(filename: str = "gemm_prefill.json", folder=RECORD_FOLDERS[1]) -> list[dict]:
    """The committed run `folder/filename` and its other recordings kept beside it as `folder/repeats/<stem>_<commit>
    [_runN].json` (each with its own provenance), the committed file first, then the others newest first (by the
    date in their provenance); [] where it is not recorded."""
    stem = filename.rsplit(".", 1)[0]
    main = recorded_runs(filename, (folder,))
    # <stem>_<commit>[_runN].json only: attention_sweep_<commit>.json is another recording, not a repeat of attention
    name = re.compile(re.escape(stem) + r"_[0-9a-f]{7,40}(_run\d+)?\.json")
    older = [load(f) for f in (folder / "repeats").glob(f"{stem}_*.json") if name.fullmatch(f.name)]
    older.sort(key=lambda d: str((d.get("provenance") or {}).get("date", "")), reverse=True)
    return main + older if main else []


def same_sources(runs: list[dict]) -> tuple[list[dict], list[dict]]:
    """(the runs that timed the same kernel sources as the first -- equal `sources_sha256_12` --, the others): repeats
    are read together only where they timed the same code. A run without the digest counts as other sources."""
    ref = runs[0].get("sources_sha256_12") if runs else None
    same = [d for d in runs if ref is not None and d.get("sources_sha256_12") == ref] or runs[:1]
    return same, [d for d in runs if d not in same]


def sass_table(data: dict, kernels=("w8a8_mma_fp8", "w8a8_mma_bf16", "w8a8_wgmma", "w8a8_wgmma_pipe", "w8a8_wgmma_256",
                                    "w8a8_wgmma_ws", "w8a8_tma_n128_w2_s6_c2_e0", "w8a8_tma_n256_w2_s4_c2_e0",
                                    "gemv_fp8_block_r1_nt1_pf0", "gemv_nvfp4_r1_nt1_pf0", "gemv3_fp8c_r1_nt1_c2_p3_e0_n0",
                                    "gemv3_nvfp4_r1_nt1_c2_p3_e0_n0")) -> list[dict]:
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


def newest_versions(names) -> list[str]:
    """Keep the newest version of each kernel: a name ending in `_vN` supersedes the same name with a lower N (or
    none). newest_versions(["gemv_nvfp4", "gemv_nvfp4_v2", "bf16_cublas"]) -> ["gemv_nvfp4_v2", "bf16_cublas"]."""
    import re

    best: dict = {}
    for n in dict.fromkeys(names):
        m = re.match(r"(.*?)_v(\d+)$", n)
        base, v = (m.group(1), int(m.group(2))) if m else (n, 1)
        if base not in best or v > best[base][0]:
            best[base] = (v, n)
    return [n for _, n in best.values()]


DECODE_ANCHORS = ("bf16_cublas (torch F.linear)", "scaled_mm_tensorwise (torch._scaled_mm)")


def plot_decode(data: dict, path=None, kernels=None):
    """Time per call of each decode kernel for each shape and M, on a log axis. `kernels` defaults to the two
    anchors and the newest version of each of the lab's kernels in the run (the fastest of its configurations at
    each point; launches with PDL are left out: they are the same kernels); the legend sits below the panels,
    where it covers no bar."""
    import matplotlib.pyplot as plt

    rows = [r for r in data["results"] if r.get("family") == "decode" and not r.get("pdl")
            and not r["kernel"].endswith("_pdl")]
    shapes = sorted({(r["N"], r["K"]) for r in rows}, key=lambda s: s[0] * s[1])
    Ms = sorted({r["M"] for r in rows})
    # a bar is a kernel name, or a version label ("fp8 channel v3": the fastest of its configurations there)
    name = lambda r: _version_label(r) or r["kernel"]  # noqa: E731
    if kernels is None:
        have = {name(r) for r in rows}
        ours = [f"{label} v{v}" for label, _ in VERSION_FAMILIES
                for v in (max((v for v in (1, 2, 3) if f"{label} v{v}" in have), default=None),) if v]
        kernels = [k for k in DECODE_ANCHORS if k in have] + ours
    fig, axes = plt.subplots(1, len(Ms), figsize=(5 * len(Ms), 4.4), sharey=True)
    axes = [axes] if len(Ms) == 1 else axes
    w = 0.8 / max(1, len(kernels))
    for ax, M in zip(axes, Ms):
        for i, k in enumerate(kernels):
            ys = []
            for N, K in shapes:
                ts = [r["time_us"] for r in rows if name(r) == k and r["M"] == M and (r["N"], r["K"]) == (N, K)]
                ys.append(min(ts) if ts else float("nan"))
            xs = [j + (i - (len(kernels) - 1) / 2) * w for j in range(len(shapes))]
            ax.bar(xs, ys, width=w, label=k.split(" (")[0], color=f"C{i}",
                   hatch="//" if k in DECODE_ANCHORS else None, edgecolor="white" if k in DECODE_ANCHORS else None)
        ax.set_xticks(range(len(shapes)), [f"{N}x{K}" for N, K in shapes], rotation=30, ha="right", fontsize=8)
        ax.set_title(f"decode, M = {M}")
        ax.set_yscale("log")
        ax.set_ylabel("time per call (us, log; lower is faster)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06 + 0.05 * ((len(labels) - 1) // 4), 1, 1))
    if path:
        fig.savefig(path, dpi=110)
    return fig


def plot_prefill(data: dict, path=None, kernels=("wgmma_tma", "wgmma_ws", "scaled_mm_blockwise",
                                                  "scaled_mm_tensorwise", "bf16_cublas")):
    """TFLOP/s against M for each (N, K) of the grid: our kernels and the anchors, with the run's FP8 and bf16
    8192^3 rates as horizontal lines."""
    import matplotlib.pyplot as plt

    rows = _prefill(data)
    nks = sorted({(r["N"], r["K"]) for r in rows if r.get("N")}, key=lambda nk: (nk[0] * nk[1], nk))
    cols = min(3, max(1, len(nks)))
    nrow = -(-len(nks) // cols) if nks else 1
    fig, axes = plt.subplots(nrow, cols, figsize=(5 * cols, 3.4 * nrow), squeeze=False, sharey=True)
    c = data.get("ceilings", {})
    for ax, (N, K) in zip(axes.flat, nks):
        for k in kernels:
            pts = sorted({(r["M"], r["tflops"]) for r in rows if _short(r["kernel"]) == k and (r["N"], r["K"]) == (N, K)})
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", lw=1.5 if k.startswith("wgmma") else 1,
                        label=k)
        for key, ls in (("bf16_gemm_tflops_8192", "--"), ("fp8_scaled_mm_tensorwise_tflops_8192", ":")):
            if c.get(key):
                ax.axhline(c[key], color="k", ls=ls, lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_title(f"N = {N}, K = {K}", fontsize=9)
        ax.set_xlabel("M (tokens)")
    for ax in axes.flat[len(nks):]:
        ax.axis("off")
    axes[0][0].set_ylabel("TFLOP/s")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("prefill W8A8 (1x128 x 128x128 scales); lines: the run's bf16 (--) and FP8 (:) 8192^3 rates", fontsize=10)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=110)
    return fig


# ---- version 6: the split activations (tools/gpu/v6_probe.py) -----------------------------------------------------
V6_MAIN, V6_FUSED = "v6 split+gemv default", "v6 fused default"


def v6_table(data: dict) -> list[dict]:
    """Rows of a version-6 run (tools/gpu/v6_probe.py), one per (N, K, M): `_scaled_mm` tensorwise's median time and
    each variant's speed relative to it in the same rounds (x > 1: faster). 'v6' is the default call (gemv6_split, then
    the PDL-launched GEMV), 'v6_fused' the split inside the GEMV, 'v6_best' the fastest split+gemv config timed;
    'v6_lo'/'v6_hi' bound v6's ratio by the quartiles of both times (q1 / q3 each way); 'gemv_only' the default's GEMV
    alone on a split made beforehand (None where the run did not time it); 'of_copy' is v6's weight
    bytes over its time against the run's copy bandwidth; 'err_over_tol' the worst validation of the timed variants
    (<= 1 passed) and 'split_error' how far the split moved y (max, in units of sum |x w|)."""
    checks = {(c["N"], c["K"], c["M"]): c for c in data.get("checks", [])}
    rows = []
    for (N, K, M), v in _v6_points(data):
        sm, main = v.get("_scaled_mm tensorwise"), v.get(V6_MAIN)
        if not sm or not main:
            continue
        splits = {n: r for n, r in v.items() if n.startswith("v6 split+gemv")}
        best_name, best = max(splits.items(), key=lambda kv: kv[1]["vs_scaled_mm"])
        c = checks.get((N, K, M), {})
        errs = [e for n, e in c.get("err_over_tol", {}).items() if n in v]
        fused, v3, split, alone = v.get(V6_FUSED), v.get("v3 default"), v.get("v6 split only"), v.get("v6 gemv only")
        rows.append({
            "N": N, "K": K, "M": M, "MB": round(N * K / 1e6, 1), "scaled_mm_us": round(sm["median_us"], 2),
            "v3": round(v3["vs_scaled_mm"], 3) if v3 else None,
            "v6": round(main["vs_scaled_mm"], 3),
            "v6_lo": round(sm["q1_us"] / main["q3_us"], 3), "v6_hi": round(sm["q3_us"] / main["q1_us"], 3),
            "v6_fused": round(fused["vs_scaled_mm"], 3) if fused else None,
            "v6_best": round(best["vs_scaled_mm"], 3), "best": best_name.replace("v6 split+gemv ", ""),
            "split_us": round(split["median_us"], 2) if split else None,
            "gemv_only": round(alone["vs_scaled_mm"], 3) if alone else None,
            "of_copy": round(main["of_copy"], 3),
            "err_over_tol": round(max(errs), 2) if errs else None,
            "split_error": (c.get("split_error") or {}).get("max"),
        })
    return rows


def v6_configs(data: dict) -> list[dict]:
    """A version-6 tuning run (tools/gpu/v6_probe.py ... split): per (N, K, M), every split+gemv configuration's
    speed against `_scaled_mm` tensorwise in the same rounds ('MH:ST:G' -> x, > 1 faster), the default's name and
    ratio, the fastest configuration and its ratio, by how much it beat the default (gain = default's time / best's,
    from the medians), and 'gain_lo' the same from the quartiles taken against it (default's q1 / best's q3: above 1,
    the two rows' quartile ranges do not overlap)."""
    rows = []
    for (N, K, M), v in _v6_points(data):
        cfg = {n.replace("v6 split+gemv ", ""): r for n, r in v.items() if n.startswith("v6 split+gemv ")}
        if not cfg:
            continue
        best = max(cfg, key=lambda n: cfg[n]["vs_scaled_mm"])
        rd, rb = cfg.get("default"), cfg[best]
        d = rd["vs_scaled_mm"] if rd else None
        lo = (rd["q1_us"] / rb["q3_us"]) if rd and rd.get("q1_us") and rb.get("q3_us") else None
        rows.append({"N": N, "K": K, "M": M, "default": round(d, 3) if d else None, "best": best,
                     "best_x": round(rb["vs_scaled_mm"], 3), "gain": round(rb["vs_scaled_mm"] / d, 3) if d else None,
                     "gain_lo": round(lo, 3) if lo else None,
                     "configs": {k: round(r["vs_scaled_mm"], 3) for k, r in sorted(cfg.items())}})
    return rows


def _v6_points(data: dict) -> list:
    """A version-6 run's records grouped per point: [((N, K, M), {variant: record}), ...], by M, then size."""
    by: dict = {}
    for r in data.get("results", []):
        if r.get("family") == "v6":
            by.setdefault((r["N"], r["K"], r["M"]), {})[r["variant"]] = r
    return sorted(by.items(), key=lambda kv: (kv[0][2], kv[0][0] * kv[0][1], kv[0]))
