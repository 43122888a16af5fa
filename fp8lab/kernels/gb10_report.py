"""Notebook 09's helpers: which instruction does each low-precision job on each arch, read from the committed SASS
summary (`python -m fp8lab.kernels.sass --summary --out outputs/kernels/sass/`), never typed in.

    s = load()                               # outputs/kernels/sass/summary.json (or a live compile of a subset)
    print(format_jobs(jobs(s)))              # job x arch: the SASS that does it (or "software", "not built")
    print(format_loops(loops(s, "sm_121")))  # inner loops: the native kernel next to its portable twin
    live_listing("gemm_w4a4.cu", 121, "w4a4_omma")   # compile one kernel now, return its matrix instructions
    refusal("gemm_w4a4.cu", "sm_121")        # compile it for the plain target: ptxas' own refusal

A job's cell names the instruction that does the work in that arch's machine code: the native kernel's if the
source builds there, else the portable kernel's, marked "(portable)". Everything comes from cuobjdump's listing
of what NVRTC 13.0 compiled with CuPy's exact options; nothing here ran on a GB10.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

from . import sources

REPO = Path(__file__).resolve().parents[2]
SUMMARY = REPO / "outputs" / "kernels" / "sass" / "summary.json"
COMMAND = "python -m fp8lab.kernels.sass --summary --out outputs/kernels/sass/"

# job, native (source, kernel), portable (source, kernel), which SASS forms answer the question
JOBS = [
    ("E2M1 encode (NVFP4 quantizer)", ("nvfp4_hw.cu", "nvfp4_quant_bf16_cvt_hw"), ("nvfp4.cu", "nvfp4_quant_bf16_bits_hw"), "e2m1"),
    ("E2M1 decode (NVFP4 GEMV)", ("gemv_nvfp4_hw.cu", "gemv_nvfp4_hw_r1_nt1_c2"), ("gemv_nvfp4.cu", "gemv_nvfp4_v2_r1_nt1_c2_d2"), "e2m1"),
    ("W4A4 NVFP4 GEMM (block-scaled FP4 MMA)", ("gemm_w4a4.cu", "w4a4_omma"), ("gemm_w4a4_emu.cu", "w4a4_emu"), "matrix"),
    ("W8A8 mma.sync e4m3", ("gemm_w8a8.cu", "w8a8_mma_fp8_s3"), None, "matrix+e4m3"),
    ("W8A8 wgmma e4m3", ("gemm_w8a8_wgmma.cu", "w8a8_wgmma_ws"), None, "matrix"),
]
# the subset compiled live when no summary is committed (each small: seconds per arch)
LIVE_SOURCES = ("nvfp4_hw.cu", "gemm_w4a4.cu", "gemm_w4a4_emu.cu", "gemm_w8a8.cu")


def load(path=SUMMARY, live_if_missing: bool = True) -> dict:
    """The committed summary (fp8lab.store.read_json); if there is none, a live compile of LIVE_SOURCES for every
    summary arch (a minute or so on a laptop CPU), marked `live` so the notebook says so."""
    from fp8lab import store

    path = Path(path)
    if path.exists():
        return store.read_json(path, required=("provenance", "compiler", "kernels", "not_built"))
    if not live_if_missing:
        raise FileNotFoundError(f"{path} is missing: run `{COMMAND}` from the repository root")
    return summarize_live()


def summarize_live(files=LIVE_SOURCES, archs=sources.SUMMARY_ARCHS) -> dict:
    """sass.summarize's structure for `files` only: every kernel of each (file, arch) that builds."""
    from . import sass

    t = time.time()
    pairs = [(f, cc) for f in files for cc in archs if sources.get(f).builds_for(cc)]
    built = sass.build_all(pairs)
    out = {}
    for (f, cc), ks in built.items():
        for name, k in ks.items():
            out.setdefault(f"sm_{cc}", {})[name] = {"source": f, "target": sources.get(f).target(cc), **k.summary()}
    not_built = {f"sm_{cc}": {f: sources.get(f).why for f in files if not sources.get(f).builds_for(cc)} for cc in archs}
    return {"live": True, "seconds": round(time.time() - t, 1), "kernels": out, "not_built": not_built}


def describe(summary: dict) -> str:
    """Where the table comes from: the summary's provenance and compiler, or the live compile."""
    if summary.get("live"):
        from . import nvrtc

        try:
            ver = "NVRTC " + ".".join(str(x) for x in nvrtc.version())
        except Exception as e:  # noqa: BLE001 - the line says what it could not read
            ver = f"NVRTC version unreadable ({e})"
        return (f"LIVE compile of {', '.join(LIVE_SOURCES)} ({summary['seconds']} s) with {ver}: no committed "
                f"summary; `{COMMAND}` writes it")
    from fp8lab import provenance

    c = summary["compiler"]
    return f"{provenance.describe(summary['provenance'])}\nNVRTC {c['nvrtc']}, {c['cuobjdump']}"


def _e2m1(k: dict) -> str:
    forms = [f for f in k["f2fp_forms"] if "E2M1" in f]
    return ", ".join(forms) if forms else "software (no E2M1 instruction)"


def _matrix(k: dict, e4m3: bool = False) -> str:
    forms = list(k["matrix_forms"]) or ["no matrix instruction"]
    if e4m3 and any("E4M3" in f and "UNPACK" in f for f in k["f2fp_forms"]):
        forms = ["F2FP.F16.E4M3.UNPACK_B + " + "/".join(forms) + " (emulated)"]
    return ", ".join(forms)


def jobs(summary: dict) -> list[dict]:
    """One row per job: {job, sm_89: cell, sm_90: cell, ...} (see module doc)."""
    archs = list(summary["kernels"]) or [f"sm_{cc}" for cc in sources.SUMMARY_ARCHS]
    rows = []
    for job, native, portable, what in JOBS:
        row = {"job": job}
        for arch in archs:
            ks = summary["kernels"].get(arch, {})
            cell = None
            for which, sk in (("", native), (" (portable)", portable)):
                if sk is None or sk[1] not in ks:
                    continue
                k = ks[sk[1]]
                cell = (_e2m1(k) if what == "e2m1" else _matrix(k, what == "matrix+e4m3")) + which
                break
            if cell is None:
                nb = summary["not_built"].get(arch, {})
                cell = "not built" if native[0] in nb else "not compiled here"
            row[arch] = cell
        rows.append(row)
    return rows


def _target_label(summary: dict, arch: str) -> str:
    """'sm_121a' where the arch's native kernels use the `a` target (from the summary's own targets)."""
    targets = {k.get("target") for k in summary["kernels"].get(arch, {}).values()}
    a = [t for t in targets if t and t.endswith("a")]
    return a[0] if a else arch


def format_jobs(rows: list[dict], summary: dict | None = None) -> str:
    """The job table, one block per job (the cells are long SASS names)."""
    lines = []
    for r in rows:
        lines.append(r["job"])
        for arch, cell in r.items():
            if arch != "job":
                label = _target_label(summary, arch) if summary else arch
                lines.append(f"  {label:8s} {cell}")
    return "\n".join(lines)


LOOP_PAIRS = [("gemm_w4a4.cu", "w4a4_omma", "gemm_w4a4_emu.cu", "w4a4_emu"),
              ("gemv_nvfp4_hw.cu", "gemv_nvfp4_hw_r1_nt1_c2", "gemv_nvfp4.cu", "gemv_nvfp4_v2_r1_nt1_c2_d0"),
              ("gemm_w8a8.cu", "w8a8_mma_fp8_s3", None, None)]


def loops(summary: dict, arch: str = "sm_121") -> list[dict]:
    """The inner loop (the largest loop holding a matrix instruction) of each native kernel and its portable twin
    on `arch`: instructions per matrix instruction, and the ops that touch NVFP4 nibbles or scales on the CUDA cores."""
    ks = summary["kernels"].get(arch, {})
    rows = []
    for pair in LOOP_PAIRS:
        for f, name in ((pair[0], pair[1]), (pair[2], pair[3])):
            if name is None or name not in ks or not ks[name].get("loop"):
                continue
            lp = ks[name]["loop"]
            ops = lp["ops"]
            rows.append({"kernel": name, "source": f, "matrix": lp["matrix"], "instructions": lp["instructions"],
                         "per_matrix_instruction": lp["per_matrix_instruction"],
                         "conversions (F2FP/I2F)": ops.get("F2FP", 0) + ops.get("I2F", 0),
                         "fp32 math (FFMA/FMUL)": ops.get("FFMA", 0) + ops.get("FMUL", 0),
                         "logic (LOP3/SHF/PRMT)": ops.get("LOP3", 0) + ops.get("SHF", 0) + ops.get("PRMT", 0),
                         "matrix ops": ", ".join(f"{k} {v}" for k, v in ops.items() if k.endswith("MMA"))})
    return rows


def format_loops(rows: list[dict]) -> str:
    cols = ["kernel", "matrix ops", "instructions", "per_matrix_instruction", "conversions (F2FP/I2F)",
            "fp32 math (FFMA/FMUL)", "logic (LOP3/SHF/PRMT)"]
    w = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols} if rows else {c: len(c) for c in cols}
    lines = ["  ".join(f"{c:>{w[c]}}" if c != "kernel" else f"{c:<{w[c]}}" for c in cols)]
    for r in rows:
        lines.append("  ".join(f"{str(r[c]):>{w[c]}}" if c != "kernel" else f"{r[c]:<{w[c]}}" for c in cols))
    return "\n".join(lines)


def live_listing(source: str = "gemm_w4a4.cu", cc: int = 121, kernel: str = "w4a4_omma", pattern: str = r"MMA") -> dict:
    """Compile one kernel now (NVRTC, CuPy's options) and return its matrix-instruction forms and the first few
    SASS lines matching `pattern`; {"error": why} where the offline tools are missing."""
    from . import nvrtc, sass

    t = time.time()
    try:
        k = sass.kernels(source, cc)[kernel]
    except (nvrtc.NvrtcUnavailable, sass.ToolMissing) as e:
        return {"error": str(e)}
    hits = [txt for _, txt in k.instrs if re.search(pattern, txt)]
    return {"target": sources.get(source).target(cc), "seconds": round(time.time() - t, 1),
            "matrix_forms": k.summary()["matrix_forms"], "lines": hits[:3], "count": len(hits)}


def refusal(source: str = "gemm_w4a4.cu", target: str = "sm_121") -> str:
    """Compile `source` for `target` anyway (e.g. the plain sm_121): ptxas' first error line, or 'compiled'."""
    from . import _cuda, nvrtc, sass

    cc = sass.arch_cc(target)
    opts = _cuda.compile_options(source, target) + _cuda.cupy_appended_options(cc)
    try:
        nvrtc.compile_cubin((_cuda.KERNEL_DIR / source).read_text(), opts, name=source)
    except nvrtc.NvrtcUnavailable as e:
        return f"(not compiled here: {e})"
    except nvrtc.CompileError as e:
        errs = [ln.split("error", 1)[-1].strip(" :") for ln in str(e).splitlines() if "error" in ln and "ptxas" in ln]
        return errs[0] if errs else str(e).splitlines()[0]
    return "compiled"
