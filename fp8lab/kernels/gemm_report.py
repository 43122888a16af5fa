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
SOURCES = ("gemv_fp8.cu", "gemv_nvfp4.cu", "gemm_w8a8.cu", "gemm_w8a8_wgmma.cu", "gemv_common.cuh", "gemm_w8a8_common.cuh",
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
    """The lab's four GEMV/GEMM goals, each with the measured ratio (None where the run has no such number)."""
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
    anchors and the newest version of each of the lab's kernels in the run (`_v2` over version 1, and whatever
    a later run adds); the legend sits below the panels, where it covers no bar."""
    import matplotlib.pyplot as plt

    rows = [r for r in data["results"] if r.get("family") == "decode"]
    shapes = sorted({(r["N"], r["K"]) for r in rows}, key=lambda s: s[0] * s[1])
    Ms = sorted({r["M"] for r in rows})
    if kernels is None:
        ours = newest_versions(r["kernel"] for r in rows if not r["kernel"].split(" (")[0] in
                               {a.split(" (")[0] for a in DECODE_ANCHORS} and "(" not in r["kernel"])
        kernels = [k for k in DECODE_ANCHORS if any(r["kernel"] == k for r in rows)] + ours
    fig, axes = plt.subplots(1, len(Ms), figsize=(5 * len(Ms), 4.4), sharey=True)
    axes = [axes] if len(Ms) == 1 else axes
    w = 0.8 / max(1, len(kernels))
    for ax, M in zip(axes, Ms):
        for i, k in enumerate(kernels):
            ys = []
            for N, K in shapes:
                r = next((r for r in rows if r["kernel"] == k and r["M"] == M and (r["N"], r["K"]) == (N, K)), None)
                ys.append(r["time_us"] if r else float("nan"))
            xs = [j + (i - (len(kernels) - 1) / 2) * w for j in range(len(shapes))]
            ax.bar(xs, ys, width=w, label=k.split(" (")[0], color=f"C{i}",
                   hatch="//" if k in DECODE_ANCHORS else None, edgecolor="white" if k in DECODE_ANCHORS else None)
        ax.set_xticks(range(len(shapes)), [f"{N}x{K}" for N, K in shapes], rotation=20)
        ax.set_title(f"decode, M = {M}")
        ax.set_yscale("log")
        ax.set_ylabel("time per call (us, log; lower is faster)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06 + 0.05 * ((len(labels) - 1) // 4), 1, 1))
    if path:
        fig.savefig(path, dpi=110)
    return fig


def plot_prefill(data: dict, path=None):
    """TFLOP/s per kernel for each prefill shape, with the run's bf16 and FP8 8192^3 ceilings as lines."""
    import matplotlib.pyplot as plt

    rows = [r for r in data["results"] if r.get("family") == "prefill"]
    shapes = sorted({r["shape"] for r in rows}, key=lambda s: [int(x.split("=")[1]) for x in s.split()])
    kernels = sorted({r["kernel"] for r in rows}, key=lambda k: (not k.startswith("w8a8"), k))
    fig, ax = plt.subplots(figsize=(13, 4))
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
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # beside: covers no bar
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=110)
    return fig
