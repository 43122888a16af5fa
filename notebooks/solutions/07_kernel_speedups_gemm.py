"""Worked answers to notebook 07's exercises (FP8/NVFP4 GEMV and the W8A8 GEMM), from the recorded H200 run.

    python notebooks/solutions/07_kernel_speedups_gemm.py
"""
from fp8lab import notebook as nb

GPU_ONLY = {"exercise_5"}


def _data():
    from fp8lab.kernels import gemm_report

    base = nb.recorded("kernels", "gemm.json", prov=None, quiet=True)
    return gemm_report.load(base / "gemm.json") if base else None


def exercise_1() -> dict:
    """For each decode shape and M, the fastest kernel, and how each newer version compares with its first.

    Anchors (cuBLAS, `_scaled_mm`) and the lab's kernels are timed in the same run, so the comparison is direct; a
    version ratio above 1 means the newer version is faster."""
    d = _data()
    if d is None:
        return {"answer": "outputs/kernels/gemm.json is not recorded"}
    dec = [r for r in d["results"] if r.get("family") == "decode"]
    fastest, versions = {}, {}
    for key in sorted({(r["N"], r["K"], r["M"]) for r in dec}):
        rs = [r for r in dec if (r["N"], r["K"], r["M"]) == key]
        best = min(rs, key=lambda r: r["time_us"])
        fastest[f"{key[0]}x{key[1]} M={key[2]}"] = f"{best['kernel'].split(' (')[0]} {best['time_us']:.1f} us"
        for r in rs:
            if r["kernel"].endswith(("_v2", "_v3")):
                v1 = next((t for t in rs if t["kernel"] == r["kernel"][:-3]), None)
                if v1:
                    versions.setdefault(r["kernel"], []).append(round(v1["time_us"] / r["time_us"], 2))
    return {"fastest per shape": fastest, "time v1 / time of the newer version, per shape and M": versions}


def exercise_2() -> dict:
    """The time floor of the largest decode shape: bytes over the run's best read bandwidth.

    A kernel that reads the same FP8 bytes cannot be much faster than that floor; `_scaled_mm` tensorwise at M = 16
    already runs close to it, so a target of 1.5x faster than it asks for more bandwidth than the card has."""
    from fp8lab.kernels import gemm_report

    d = _data()
    if d is None:
        return {"answer": "outputs/kernels/gemm.json is not recorded"}
    dec = [r for r in d["results"] if r.get("family") == "decode"]
    N, K = max(((r["N"], r["K"]) for r in dec), key=lambda nk: nk[0] * nk[1])
    roof = max([d.get("ceilings", {}).get("copy_gbps") or 0] + [r.get("gbps") or 0 for r in dec])
    rate = d["ceilings"].get("bf16_gemm_tflops_8192")
    out = {"shape": f"{N}x{K}", "memory roof (GB/s, best in the run)": round(roof)}
    for k in ("scaled_mm_tensorwise (torch._scaled_mm)", "gemv_fp8_block_v2", "gemv_nvfp4_v2"):
        r = next((r for r in dec if r["kernel"] == k and r["M"] == 16 and (r["N"], r["K"]) == (N, K)), None)
        if r:
            floor = gemm_report.roofline_us(r["bytes"], r["flops"], roof, rate)
            out[k.split(" (")[0]] = f"{r['time_us']:.1f} us, floor {floor:.1f} us ({floor / r['time_us']:.2f} of it)"
    return out


def exercise_3() -> dict:
    """Re-packing NVFP4 nibbles offline: what it would remove, from the recorded SASS counts.

    The GEMV widens two 4-bit values per byte into the MMA's operand order: shifts, masks and permutes (LOP3, PRMT)
    per pair. A Marlin-style offline re-pack stores the nibbles already in k order, removing the permutes and a
    shift per pair. What that can buy is bounded by what removing ALL the arithmetic buys: the decode gap run's
    `loads_only` share (gemm_report.decode_gap), returned beside the counts where a run is recorded."""
    d = _data()
    counts = (d or {}).get("sass_counts") or {}
    # one configuration per kernel and version (r1 nt1: one row tile, one token tile): comparable counts
    pick = [k for k in counts if k.startswith("gemv_") and "_r1_nt1_" in k and k.endswith(("pf0", "c2_d2"))]
    out = {k: {op: counts[k].get(op) for op in ("total", "LOP3", "PRMT", "HMMA")} for k in pick} or \
        {"answer": "no SASS counts recorded"}
    from fp8lab.kernels import gemm_report

    for folder in ("kernels", "kernels/h100"):  # the upper bound: what cutting every instruction saved
        base = nb.recorded(folder, "decode_gap.json", prov=None, quiet=True)
        rows = gemm_report.decode_gap(gemm_report.load(base / "decode_gap.json")) if base else []
        shares = [r["saves"] for r in rows if r["format"] == "nvfp4" and r["variant"] == "loads_only"]
        if shares:
            out[f"NVFP4 loads_only share, min and max ({folder})"] = (round(min(shares), 3), round(max(shares), 3))
    return out


def exercise_4() -> dict:
    """The label vs the kernel: which matrix instruction each recorded kernel really runs.

    `HMMA` is the fp16/bf16 tensor-core MMA, `QGMMA` Hopper's FP8 warpgroup MMA. `w8a8_mma_fp8` asks for an FP8
    `mma.sync` and gets HMMA plus F2FP conversions on sm_90: an emulation."""
    d = _data()
    counts = (d or {}).get("sass_counts") or {}
    return {k: {"matrix": v.get("mma_forms"), "F2FP": v.get("F2FP")} for k, v in counts.items()
            if k.startswith("w8a8_")} or {"answer": "no SASS counts recorded"}


def exercise_6() -> dict:
    """What each fusion step buys in the recorded decode layer, and how much of the time above the ceiling the GEMVs
    account for.

    Each variant is one CUDA graph of the whole layer; the difference between two variants' times at the same batch
    and context is what the change bought. The per-kernel breakdown (each kernel timed alone) splits the fastest
    variant's time into GEMVs (floor: their weight bytes at copy bandwidth) and everything else (norms, RoPE and the
    cache append, attention): the GEMVs' time above their floor is the part a better GEMV could recover."""
    from fp8lab.kernels import layer_report as lr

    base = nb.recorded("kernels", "layer.json", prov=None, quiet=True)
    if not base:
        return {"answer": "outputs/kernels/layer.json is not recorded"}
    d = lr.load(base / "layer.json")
    rows = lr.layer_table(d)
    out = {}
    for B, L in sorted({(r["batch"], r["context"]) for r in rows}):
        t = {r["variant"]: r["time_us"] for r in rows if (r["batch"], r["context"]) == (B, L)}
        for fam in ("fp8", "nvfp4"):
            chain = [v for v in (fam, f"{fam}_fused", f"{fam}_fused_pdl", f"{fam}_fused_norm_pdl") if v in t]
            out[f"B={B} ctx={L} {fam}"] = {f"{a} -> {b}": f"{t[a] - t[b]:+.1f} us saved" for a, b in zip(chain, chain[1:])}
    for key, bd in (d.get("breakdown") or {}).items():
        g = [b for b in bd if str(b["kernel"]).startswith("gemv")]
        out[f"breakdown {key}"] = {"GEMVs us": round(sum(b["time_us"] for b in g), 1),
                                   "GEMV floor us": round(sum(b.get("floor_us") or 0 for b in g), 1),
                                   "other kernels us": round(sum(b["time_us"] for b in bd if b not in g), 1)}
    return out


def exercise_5() -> dict:
    """Re-run the decode benchmark (needs a CUDA device): `python -m fp8lab.kernels.bench gemm --only decode`."""
    import subprocess
    import sys
    import tempfile

    out = tempfile.mkdtemp() + "/gemm.json"
    subprocess.run([sys.executable, "-m", "fp8lab.kernels.bench", "gemm", "--only", "decode", "--no-smoke",
                    "--no-pytest", "--shapes", "4096x4096", "--m", "1", "--out", out], check=True, cwd=nb.REPO)
    return {"written": out}


def exercise_7() -> dict:
    """Waves and the split of the recorded prefill grid: per shape with M >= 2048, the default's tiles T, units P, how
    many waves, what the run cut (the record's split, chosen by `gemm_w8a8.split_plan`), and the recorded ratio to
    `_scaled_mm` blockwise. Where the last wave is more than half full nothing is cut (`wave_busy` < 1 stays): those
    are the shapes stream-K proper would still help."""
    from fp8lab.kernels import gemm_report
    from fp8lab.kernels import gemm_w8a8 as G

    d = _data()
    if d is None:
        return {"answer": "outputs/kernels/gemm.json is not recorded"}
    out = {}
    for r in gemm_report._prefill(d):
        if gemm_report._short(r["kernel"]) != "wgmma_tma" or r.get("M", 0) < 2048 or not r.get("grid_units"):
            continue
        mu, nb = G.tile_counts(r["M"], r["N"], G.TmaConfig(bn=r["bn"], cluster=r["cluster"]))
        T, P, S = mu * nb, r["grid_units"], r.get("split") or 1
        out[r["shape"]] = {"tiles": T, "units": P, "waves": round(T / P, 2),
                           "cut": f"{T - r['split_whole_tiles']} tiles in {S}" if S > 1 else "none",
                           "wave_busy": round(gemm_report.wave_busy(r), 3),
                           "x_blockwise": round(r["speedup_vs_scaled_mm_blockwise"], 3)}
    return out


def exercise_8() -> dict:
    """The scheduling hints on the promotion: the control bits of the default prefill kernel's k-loop FFMAs (compiled
    and disassembled on the CPU), counted by pattern, and what each recorded gap run measured when they were rewritten.

    ptxas sets a reuse flag on about half of the FFMAs (the scale operand stays in the operand cache for the next
    FFMA) and, on those, keeps the yield bit set: a warp switch there would lose the cached operand. On the others it
    clears the yield bit, so the scheduler may switch to another warp (the other consumer warpgroup, whose MMAs wait
    to be issued) every second FFMA. The recorded runs read the edits against the unedited binary; a share below
    zero is time lost."""
    from fp8lab.kernels import _cuda, gemm_prefill, gemm_report, sass
    from fp8lab.kernels import gemm_w8a8 as G

    fn = G.TMA_KERNELS[gemm_prefill.GAP_KERNELS[0]].function
    try:
        text = sass.disassemble(_cuda.compile_for("gemm_w8a8_tma.cu", 90)[0])
    except Exception as e:  # noqa: BLE001 - no NVRTC or cuobjdump on this machine: say so
        return {"answer": f"needs NVRTC and cuobjdump (requirements.txt): {type(e).__name__}: {str(e)[:120]}"}
    k = sass.parse(text)[fn]
    pick = sass.promotion_ffmas(k)
    cs = [sass.control(hi) for a, t, _, hi in sass.encoded(text)[fn] if pick(a, t)]
    out = {"kernel": fn, "promotion FFMAs in the k-loop": len(cs),
           "reuse flag, yield bit set": sum(c["reuse"] != 0 and c["yield"] == 1 for c in cs),
           "yield bit clear (may switch warps)": sum(c["yield"] == 0 for c in cs),
           "neither": sum(c["reuse"] == 0 and c["yield"] == 1 for c in cs)}
    for folder in ("kernels", "kernels/h100"):
        base = nb.recorded(folder, "prefill_gap.json", prov=None, quiet=True)
        if base is None:
            continue
        d = gemm_report.load(base / "prefill_gap.json")
        rows = {r["shape"]: {c: round(v, 3) for c, v in r.items() if c.startswith("ffma_") and c.endswith("share")}
                for r in gemm_report.leave_one_out(d)}
        if any(rows.values()):
            out[f"recorded edits, {(d.get('provenance') or {}).get('device')}"] = rows
    return out


if __name__ == "__main__":
    nb.run_exercises(globals())
