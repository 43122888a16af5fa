"""What notebook 07 reads from a recorded gemm benchmark (outputs/kernels/gemm.json): tables, goals, plots.

    data = load()                       # the recorded run (fp8lab.store checks it is whole)
    print(format_rows(decode_table(data)))
    plot_decode(data)

CPU-only friendly: nothing here touches a GPU. Every number shown comes from the JSON the benchmark wrote.
"""
from __future__ import annotations

import hashlib

from . import harness

KDIR = harness.REPO / "fp8lab" / "kernels"
DEFAULT_OUT = harness.REPO / "outputs" / "kernels" / "gemm.json"
SOURCES = ("gemv_fp8.cu", "gemv_nvfp4.cu", "gemv_v3.cu", "gemv_v3.py", "launch_ex.py", "gemm_w8a8.cu", "gemm_w8a8_wgmma.cu", "gemv_common.cuh", "gemm_w8a8_common.cuh",
           "ptx.cuh", "fp8_decode.cuh", "formats.cuh", "gemv_fp8.py", "gemv_nvfp4.py", "gemm_w8a8.py", "bench_gemm.py",
           "gemm_decode.py", "gemm_prefill.py")


def source_digest() -> dict:
    """sha256 (first 12 hex) of each kernel source: ties a recorded result to the code in the tree."""
    return {f: hashlib.sha256((KDIR / f).read_bytes()).hexdigest()[:12] for f in SOURCES if (KDIR / f).exists()}


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
               "GB/s": r.get("gbps"), "weight_x_copy": r.get("weight_fraction_of_copy"), "x_vs_bf16": r.get("speedup"),
               "x_vs_scaled_mm_tensorwise": r.get("speedup_vs_scaled_mm_tensorwise"),
               "x_vs_scaled_mm_blockwise": r.get("speedup_vs_scaled_mm_blockwise")}
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


W8A16_KERNELS = ("gemv_fp8_channel_v3", "gemv_fp8_block_v3", "gemv_fp8_channel_v2", "gemv_fp8_block_v2",
                 "gemv_fp8_channel", "gemv_fp8_block")
NVFP4_KERNELS = ("gemv_nvfp4_v3", "gemv_nvfp4_v2", "gemv_nvfp4")
#: the decode goals apply to shapes whose FP8 weights are at least this many bytes
GOAL_MIN_FP8_BYTES = 32 * 2**20


def _best_per_shape(dec, kernels, M, key):
    """{(N, K): the record of `kernels` at M with the largest `key`} over the goal shapes (FP8 weights >= 32 MiB)."""
    out = {}
    for r in dec:
        if r["kernel"] in kernels and r.get("M") == M and r["N"] * r["K"] >= GOAL_MIN_FP8_BYTES and r.get(key):
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


def goals(data: dict) -> list[dict]:
    """The lab's decode goals (each with its measured value, None where the run has no such number) and the prefill one.

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
    r = max((r for r in dec if r["kernel"] in NVFP4_KERNELS and r.get("M") == 1 and (r["N"], r["K"]) == (28672, 8192)
             and r.get("speedup")), key=lambda r: r["speedup"], default=None)
    out.append({"goal": "NVFP4 GEMV M=1 28672x8192 >= 3.3x bf16 cuBLAS", "target": 3.3, "measured": r and r["speedup"],
                "kernel": r and r["kernel"], "shape": "28672x8192"})
    out.append(_worst_goal("NVFP4 M=1 >= 0.85 of copy bandwidth on its 0.5625 B/weight (every shape >= 32 MiB)", 0.85,
                           _best_per_shape(dec, NVFP4_KERNELS, 1, "weight_fraction_of_copy"), "weight_fraction_of_copy"))
    out.append(_worst_goal("NVFP4 M=8 >= 2.5x bf16 cuBLAS (every shape >= 32 MiB)", 2.5,
                           _best_per_shape(dec, NVFP4_KERNELS, 8, "speedup"), "speedup"))
    cands = [r for r in res if r["kernel"].startswith("w8a8_wgmma") and r.get("M") == 4096 and r.get("N") == 7168
             and r.get("K") == 7168 and r.get("speedup_vs_scaled_mm_blockwise")]
    r = max(cands, key=lambda r: r["speedup_vs_scaled_mm_blockwise"]) if cands else None
    out.append({"goal": "wgmma W8A8 4096x7168x7168 >= 0.85x torch._scaled_mm blockwise", "target": 0.85,
                "measured": r and r.get("speedup_vs_scaled_mm_blockwise"), "kernel": r and r["kernel"]})
    for g in out:
        g["met"] = None if g["measured"] is None else bool(g["measured"] >= g["target"])
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
    """The goals as table rows (goal, target, measured, met, worst shape, kernel)."""
    return [{"goal": g["goal"], "target": g["target"], "measured": g["measured"], "met": g["met"],
             "shape": g.get("shape"), "kernel": g.get("kernel")} for g in data.get("goals") or goals(data)]


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
    """Where a recorded result came from, and whether the kernel sources in this tree are the ones measured.

    Reads both provenance schemas: fp8lab.provenance's (packages / machine sub-dicts, dirty flag) and the older flat one."""
    prov = data["provenance"]
    flat = {**prov.get("machine", {}), **prov.get("packages", {}), **prov}
    rec = data.get("sources_sha256_12") or prov.get("sources_sha256_12", {})
    now = source_digest()
    same = {f: rec.get(f) == now.get(f) for f in rec}
    keys = ("device", "date", "torch", "cupy", "cupy-cuda13x", "cuda", "git_commit", "dirty", "command", "nvidia_smi")
    return {**{k: flat.get(k) for k in keys if k in flat or k in ("device", "date", "git_commit", "command")},
            "sources_match_this_tree": all(same.values()) if same else None,
            "sources_differing": [f for f, ok in same.items() if not ok]}


def sass_table(data: dict, kernels=("w8a8_mma_fp8", "w8a8_mma_bf16", "w8a8_wgmma", "w8a8_wgmma_pipe", "w8a8_wgmma_256",
                                    "w8a8_wgmma_ws",
                                    "gemv_fp8_block_r1_nt1_pf0", "gemv_nvfp4_r1_nt1_pf0", "gemv3_fp8c_r1_nt1_c2_p3_e0",
                                    "gemv3_nvfp4_r1_nt1_c2_p3_e0")) -> list[dict]:
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
    kernels = ["bf16_cublas (torch F.linear)", "scaled_mm_tensorwise (torch._scaled_mm)", "gemv_fp8_channel_v3", "gemv_nvfp4_v3"]
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
