"""Render the pages' result blocks from the committed files, so that no page types a measured number.

    python tools/render_docs.py            # rewrite README.md's results block and notebooks/README.md's tables
    python tools/render_docs.py --check    # exit 1 (and say where) if a committed page differs from its rendering

Two blocks, each between markers that the rest of the page leaves alone:
  README.md            <!-- results:begin --> ... <!-- results:end -->   quality, KV cache and kernel results
  notebooks/README.md  <!-- notebooks:begin --> ... <!-- notebooks:end -->  order, time per notebook, GPU or not

Every number comes from a file under outputs/ (results.csv, sweep_more/, kv_drift*/, kernels/*.json,
notebook_times.json) through fp8lab's readers, with the file's provenance (commit and clean/DIRTY state); a file
that is not there renders as "not recorded". tests/test_render_docs.py fails when a committed block differs from
what this script renders, so after re-recording a result: run this script and commit both.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fp8lab import findings  # noqa: E402
from fp8lab import notebook as nb  # noqa: E402
from fp8lab.provenance import describe  # noqa: E402

OUT = REPO / "outputs"
NOT_RECORDED = "not recorded"

#: what each notebook needs and shows (a description, not a measurement); a notebook missing here is listed with
#: "(see the notebook)" until its author adds a line
ROLES = {
    "01": ("CPU", "live: exact arithmetic, nothing recorded"),
    "02": ("CPU", "live slice + the committed sweep"),
    "03": ("CPU", "live calibration + committed drift runs; H200 attention timings"),
    "04": ("CPU", "arithmetic + the H200 reference ceilings and kernel points"),
    "05": ("CPU", "live: synthetic checkpoints and a tiny export"),
    "06": ("GPU to re-time", "recorded H200 results (live on a CUDA machine)"),
    "07": ("GPU to re-time", "recorded H200 results (and H100 runs, labelled): decode GEMVs and goals, the prefill "
                             "W8A8 climb, one decode layer"),
    "08": ("GPU to re-time", "CPU numerics + recorded H200 timings (and an H100 run, labelled): decode attention "
                             "v1-v3, NVFP4 KV, chunked prefill"),
    "09": ("CPU", "SASS compiled for sm_89/90a/120a/121a (committed summary or a live compile); no GB10 timing"),
    "10": ("CPU; GPU to re-record", "live CPU accumulation model + the recorded H200 `_scaled_mm` fast-accumulation run"),
    "11": ("CPU", "live activation statistics on one window + the committed outlier study (scaling, taming)"),
    "12": ("CPU", "live slices + committed control, second-LM, sensitivity and frontier runs"),
    "13": ("CPU; GPU to re-record", "live 4-bit KV quantizers + the committed kv_bits run, recorded H200 NVFP4-KV and "
           "prefill kernels, GB10 arithmetic; each seed claim marked"),
}


# ---- helpers ----------------------------------------------------------------------------------------------------
def _prov(path: Path, command: bool = False) -> str:
    """describe(provenance): commit (clean/DIRTY), device, date — and the command when `command`."""
    try:
        line = nb.provenance_line(path)
    except (OSError, ValueError):
        return "provenance unreadable"
    return line if command else " · ".join(line.split(" · ")[:3])


def _frame(folder: str):
    p = OUT / folder / "results.csv"
    return nb.results_frame(p) if p.is_file() else None


def _delta(df, recipe: str, task: str = "ppl", metric: str = "ppl") -> str:
    r = findings.sweep_delta(df, recipe, task, metric) if df is not None else None
    if r is None:
        return NOT_RECORDED
    return findings.ci(r["delta_pct"], r["ci95_low"], r["ci95_high"])


def _json(rel: str):
    p = OUT / rel
    try:
        return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None
    except ValueError:
        return None


# ---- README: quality --------------------------------------------------------------------------------------------
def quality_block() -> list[str]:
    main, more = _frame(""), _frame("sweep_more")
    lines = []
    if main is None:
        return ["**Quality**: `outputs/results.csv` is not recorded yet."]
    ppl = main[(main.task == "ppl") & (main.metric == "ppl")]
    n, L = int(ppl.n.max()), ppl.seq_len.iloc[0]
    lines.append(f"**Quality** (`outputs/results.csv`: {_prov(OUT / 'provenance.json')}): perplexity change against "
                 f"the baseline on BoolQ passages, 95 % paired bootstrap interval over {n} windows of {L} tokens. "
                 f"E4M3 weights {_delta(main, 'e4m3-w')}; + Linear inputs with per-token scales (causal) "
                 f"{_delta(main, 'e4m3-wa-tok')}, with one per-tensor scale over the window (oracle) "
                 f"{_delta(main, 'e4m3-wa')}; + KV cache, per token (causal) {_delta(main, 'e4m3-wakv-tok')}, per "
                 f"tensor (oracle) {_delta(main, 'e4m3-wakv')}; E5M2 weights {_delta(main, 'e5m2-w')}; E4M3 weights "
                 f"without a scale {_delta(main, 'e4m3-w-noscale')}.")
    if more is not None:
        lines.append(f"From `outputs/sweep_more/` ({_prov(OUT / 'sweep_more' / 'provenance.json')}): INT8 "
                     f"per-channel weights {_delta(more, 'int8-w')}; W8A8 with 128×128 weight blocks and 1×128 "
                     f"activation groups (causal) {_delta(more, 'w8a8-block')}; NVFP4 weights {_delta(more, 'nvfp4-w')} "
                     f"and MXFP4 {_delta(more, 'mxfp4-w')} — re-quantizing weights that are already 4-bit Q4_1 (16 "
                     "asymmetric levels per 32-block) onto E2M1's grid is a second rounding, so these 4-bit rows "
                     "need not match what NVFP4 does to an original bf16 checkpoint; notebook 12's FP32 control "
                     "measures the formats on weights that were never quantized.")
    else:
        lines.append(f"`outputs/sweep_more/` (INT8, W8A8 blocks, NVFP4, MXFP4, KV recipes): {NOT_RECORDED}.")
    mc = main[(main.task == "arc_easy") & (main.recipe != "baseline")]
    if not mc.empty:
        w = (mc.ci95_high - mc.ci95_low) / 2
        exact = int(mc.ci_method.astype(str).str.startswith("exact").sum()) if "ci_method" in mc else 0
        lines.append(f"On {int(mc.n.max())} ARC-Easy questions the intervals are ±{w.min():.1f} to ±{w.max():.1f} "
                     f"points wide (acc and acc_norm; {exact} of {len(mc)} exact, where few questions changed "
                     "answer): that column cannot separate these recipes (notebook 02). MMLU (`--tasks mmlu`, 5-shot) "
                     "is not in the committed run (the sweep prints its time estimate before it starts). It is a "
                     "four-way choice and a 135M model is not expected to score far above chance: read an MMLU delta "
                     "only where its interval excludes zero.")
    return ["\n".join(_wrap(" ".join(lines)))]


def kv_block() -> list[str]:
    from fp8lab import kv_drift

    out = []
    p, p8 = OUT / "kv_drift" / "kv_drift.csv", OUT / "kv_drift_8k" / "kv_drift.csv"
    if not p.is_file():
        return [f"**KV cache**: `outputs/kv_drift/` is {NOT_RECORDED} yet."]
    rows = kv_drift.read_csv(p)
    prov = _json("kv_drift/provenance.json") or {}
    by = {}
    for r in rows:
        by.setdefault(r["config"], []).append(r)
    parts = []
    for c, rs in by.items():
        if c == "baseline":
            continue
        deltas = " → ".join(format(r["delta_pct"], "+.2f") for r in rs)
        parts.append(f"`{c}` {deltas} %")
    buckets = " | ".join(f"{r['pos_lo']}–{r['pos_hi']}" for r in by["baseline"])
    text = (f"**KV cache** (`outputs/kv_drift/`: {_prov(OUT / 'kv_drift' / 'provenance.json')}; {rows[0]['n']} "
            f"windows × {prov.get('seq_len', '?')} tokens; every configuration is causal from the end of its "
            f"calibration window on). Perplexity change per position bucket ({buckets}): " + "; ".join(parts) + ".")
    text += " " + findings.kv_drift_findings(rows)[0]
    if p8.is_file():
        rows8 = kv_drift.read_csv(p8)
        long = findings.kv_long_findings(rows8)
        text += (f" At the model's full context (`outputs/kv_drift_8k/`: {_prov(OUT / 'kv_drift_8k' / 'provenance.json')};"
                 f" {rows8[0]['n']} windows × {(_json('kv_drift_8k/provenance.json') or {}).get('seq_len', '?')} tokens): "
                 + " ".join(long[:-1]))
    else:
        text += f" The full-context run (`outputs/kv_drift_8k/`) is {NOT_RECORDED}."
    out.append("\n".join(_wrap(text + " Intervals and the reading: notebook 03.")))
    return out


# ---- README: kernels -----------------------------------------------------------------------------------------------
def _goal_cell(measured, target, unit="×") -> str:
    want = f"≥ {target} of copy bandwidth" if unit == "copy" else f"≥ {target}{unit}"
    if measured is None:
        return f"{want}: {NOT_RECORDED}"
    return f"{want}: {'met' if measured >= target else 'not met'}"


def _fmt(v, spec=".2f", unit="") -> str:
    return NOT_RECORDED if v is None else f"{v:{spec}}{unit}"


def _vs(measured: float, threshold: float) -> str:
    """The measured value with as many decimals (2 to 4) as it takes for the rounded text to read on the same side of
    the threshold as the value: 1.7995 against 1.8 is "1.7995", not "1.80"."""
    import math

    for k in (2, 3, 4):
        if (round(measured, k) >= threshold) == (measured >= threshold):
            return f"{measured:.{k}f}"
    # still on the wrong side at 4 decimals (1.79999 against 1.8): cut toward the value's side instead of rounding
    cut = (math.floor if measured < threshold else math.ceil)(measured * 1e4) / 1e4
    return f"{cut:.4f}"


def kernel_block() -> list[str]:
    from fp8lab.kernels import bench_attention as ba, bench_prefill_attn as bp, bench_quant, gemm_report, layer_report
    from fp8lab.kernels import report

    rows = []
    q = OUT / "kernels" / "quant.json"
    if q.is_file():
        s = report.load_and_summarize(q, family="quant")
        g = report.find(s, "fp8 group128 hw bf16") or {}
        vs_c = g.get("speedup_vs_compile")   # against torch.compile of the same work, the anchor a user would pick
        rows.append(("FP8 1×128 group quantization, bf16 [16384, 7168]",
                     f"{_fmt(g.get('fraction_of_copy_bw'))} of copy bandwidth, "
                     f"{_fmt(g.get('speedup'), '.1f')}× torch eager, {_fmt(vs_c)}× torch.compile",
                     ", ".join(_goal_cell((report.find(s, k) or {}).get(m), t, "copy" if "copy" in m else "× eager")
                               for _, k, m, t in bench_quant.GOALS[:2])))
        _, k, m, t = bench_quant.GOALS[2]
        n4 = report.find(s, k) or {}
        rows.append(("NVFP4 quantization (given global amax)", f"{_fmt(n4.get(m))} of copy bandwidth; "
                     "instruction-bound (a software E2M1 conversion per element)", _goal_cell(n4.get(m), t, "copy")))
    gj = OUT / "kernels" / "gemm.json"
    if gj.is_file():
        d = gemm_report.load(gj)
        for goal in gemm_report.goals(d):
            where = " ".join(x for x in (goal.get("shape") or goal.get("where") or "", f"`{goal['kernel']}`"
                                         if goal.get("kernel") else "") if x)
            res = NOT_RECORDED if goal["measured"] is None else f"{goal['measured']:.2f} (worst: {where})"
            rows.append((goal["goal"].replace(">=", "≥"), res,
                         NOT_RECORDED if goal["met"] is None else ("met" if goal["met"] else "not met")))
        mma = next((r for r in d["results"] if r["kernel"] == "w8a8_mma_fp8" and r.get("M") == 4096
                    and r.get("N") == 7168 and r.get("K") == 7168), None)
        forms = ((d.get("sass_counts") or {}).get("w8a8_mma_fp8") or {}).get("mma_forms")
        if mma:
            rows.append(("W8A8 on `mma.sync…e4m3`", f"emulated on sm_90 ({', '.join(forms or ['?'])} + F2FP in SASS), "
                         f"{mma['tflops']:.0f} TFLOP/s", "the \"label vs kernel\" lesson"))
    lj = OUT / "kernels" / "layer.json"
    if lj.is_file():
        for g in layer_report.layer_goals(layer_report.load(lj)):
            rows.append((g["goal"].replace(">=", "≥"), f"{_fmt(g['measured'])} (`{g['variant']}`)",
                         NOT_RECORDED if g["met"] is None else ("met" if g["met"] else "not met")))
    aj = OUT / "kernels" / "attention.json"
    if aj.is_file():
        a = ba.load(aj)
        vt = {(r["layout"], r["head_dim"], r["context"]): r for r in ba.versions_table(a)}
        for r in ba.summary_rows(a):
            if (r["layout"], r["head_dim"]) != ("contiguous", 128):
                continue
            v = vt.get((r["layout"], r["head_dim"], r["context"]), {})
            res = (f"version {r['version']} (the default): {_fmt(r['speedup_vs_bf16'])}× its bf16 twin, "
                   f"{_fmt(r['speedup_vs_torch'])}× torch SDPA, {_fmt(r['fp8_frac_copy'])} of copy bandwidth; the fastest "
                   f"FP8 kernel {_fmt(v.get('best_fp8_vs_best_bf16'))}× the fastest bf16 kernel of the run (ours or torch); "
                   f"NVFP4 KV (version {r.get('nvfp4_version')}) {_fmt(r.get('nvfp4_vs_bf16'))}× its bf16 twin, "
                   f"{_fmt(v.get('best_nvfp4_vs_best_bf16'))}× the fastest bf16 kernel")
            rows.append((f"FP8-KV decode attention, {r['context'] // 1024}k context, d=128", res,
                         ", ".join(f"{g['what']} ≥ {g['threshold']}: {_vs(g['measured'], g['threshold'])}, {'met' if g['met'] else 'not met'}"
                                   for g in ba.goals_table(a) if g["context"] == r["context"] and g["measured"] is not None)))
    pj = OUT / "kernels" / "prefill_attention.json"
    if pj.is_file():
        p = bp.load(pj)
        cx = bp.crossover(p)
        slower = [c for c in cx if not c["below"]]
        rows.append(("chunked-prefill attention, FP8 KV vs bf16 KV (seed 004)",
                     f"FP8 KV slower at every chunk size measured in {len(slower)} of {len(cx)} contexts "
                     "(compute-bound: the cache's bytes are not the limit; dequantization is extra work)",
                     "the seed's direction confirmed; its size is the engine's, not measurable here"))
    if not rows:
        return [f"**Kernels**: `outputs/kernels/` is {NOT_RECORDED} yet."]
    provs = {}
    for p in (q, gj, lj, aj, pj):
        if p.is_file():
            provs.setdefault(_prov(p), []).append(f"`{p.name}`")
    head = ("**Kernels on the H200** (ratios against anchors measured in the same run; the lab's targets, met or "
            "not; `outputs/kernels/`: " + "; ".join(f"{', '.join(v)}: {k}" for k, v in provs.items()) + ").")
    table = ["| kernel | result | target |", "|---|---|---|"] + [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return ["\n".join(_wrap(head)), "\n".join(table),
            "Why each miss happened (from the SASS and the per-kernel breakdown), and what would close it, is in "
            "notebooks 06–08 and the JSON files' notes."]


def _wrap(text: str, width: int = 118) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)


def readme_block() -> str:
    parts = ["Every number below is rendered by `tools/render_docs.py` from a committed file under `outputs/`, with "
             "its provenance (commit and\nclean/DIRTY state, device, date, command). Quality: SmolLM2-135M-Instruct, "
             "**whose weights are 4-bit GGUF dequantized, so\nthe baseline is already a quantized model**."]
    parts += quality_block()
    parts.append("![sweep](outputs/sweep.png)" if (OUT / "sweep.png").is_file() else "(outputs/sweep.png: not recorded)")
    parts += kv_block()
    if (OUT / "kv_drift" / "kv_drift.png").is_file():
        parts.append("![kv drift](outputs/kv_drift/kv_drift.png)")
    parts += control_block()
    parts += beyond_block()
    parts += kernel_block()
    return "\n\n".join(parts)


def control_block() -> list[str]:
    """The FP32 control (notebook 12): the formats on weights that were never quantized."""
    import csv

    c, sq = OUT / "control" / "control.csv", OUT / "control" / "sqnr.csv"
    if not (c.is_file() and sq.is_file()):
        return [f"**FP32 control** (`outputs/control/`): {NOT_RECORDED}."]
    with open(c) as f, open(sq) as g:
        sentences = findings.control_findings(list(csv.DictReader(f)), list(csv.DictReader(g)))
    text = (f"**FP32 control** (`outputs/control/`: {_prov(OUT / 'control' / 'provenance.json')}; all-MiniLM-L6-v2, "
            "an FP32 sentence encoder whose weights were never quantized, on BoolQ question→passage retrieval): "
            + " ".join(sentences) + " The second LM, the sensitivity map and the frontier: below and notebook 12.")
    return ["\n".join(_wrap(text))]


def _rows(path: Path) -> list[dict]:
    import csv

    with open(path) as f:
        return list(csv.DictReader(f))


def beyond_block() -> list[str]:
    """Notebook 12's other committed runs: the second LM, the sensitivity maps, the bytes-quality frontier, and what
    each model can and cannot tell."""
    from fp8lab import control

    out = []
    g = OUT / "gemma3" / "results.csv"
    if g.is_file():
        text = (f"**A second LM** (`outputs/gemma3/`: {_prov(OUT / 'gemma3' / 'provenance.json')}; Gemma-3-270M, "
                "**also a 4-bit checkpoint** (GGUF Q4_K_M), the same BoolQ passages cut by its own tokenizer): ")
        df = nb.results_frame(g)
        text += findings.cheapest_causal(df, list(df.recipe.unique())) + " "
        try:
            r = control.compare_sweeps([OUT / "results.csv", OUT / "sweep_more" / "results.csv"], [g])
            text += findings.rho_sentence(f"{r['model_a']} vs {r['model_b']}, perplexity change per recipe",
                                          r["spearman"], len(r["recipes"]))
        except control.ControlError as e:
            text += f"(no ordering comparison: {e})"
        out.append("\n".join(_wrap(text)))
    else:
        out.append(f"**A second LM** (`outputs/gemma3/`): {NOT_RECORDED}.")
    kinds = (("sensitivity", "Sensitivity map", "one part at a time to E4M3 or NVFP4, the rest as loaded; the `kv` "
              "part is an oracle, its scale taken over the window", findings.sensitivity_findings),
             ("frontier", "Bytes-quality frontier", "mixed assignments chosen greedily from the sensitivity map under a "
              "byte budget, evaluated", findings.frontier_findings))
    for folder, title, what, describe_rows in kinds:
        for m in ("smollm2-135m", "gemma3-270m"):
            csv_path = OUT / folder / m / f"{folder}.csv"
            head = f"**{title}, {m}** (`outputs/{folder}/{m}/`"
            if not csv_path.is_file():
                out.append(f"{head}): {NOT_RECORDED}.")
                continue
            text = f"{head}: {_prov(csv_path.parent / 'provenance.json')}; {what}): " + " ".join(describe_rows(_rows(csv_path)))
            out.append("\n".join(_wrap(text)))
    out.append("\n".join(_wrap(
        "**What each model can and cannot tell.** MiniLM's weights were never quantized, so its rows say what each "
        "weight format does to real trained FP32 weights, but it is an encoder scored on retrieval, not a language "
        "model's perplexity. SmolLM2 and Gemma are causal LMs, so their rows measure perplexity as a server would, but "
        "their weights were already 4-bit: a weight-format delta there compounds two roundings, and says little about "
        "an original bf16 checkpoint. Activation and KV-cache recipes quantize values the 4-bit files never touched, "
        "so those rows are the LMs' most direct evidence. Where the rankings of two models agree (the rank "
        "correlations above), a conclusion stands on more than one model; where an interval spans zero, it does not "
        "stand at all.")))
    return out


# ---- notebooks/README.md: the workshop table -------------------------------------------------------------------
def _title(path: Path) -> str:
    import nbformat

    for c in nbformat.read(path, as_version=4).cells:
        if c.cell_type == "markdown":
            m = re.search(r"^#\s+(.*)$", c.source, re.M)
            if m:
                return m.group(1).split("·", 1)[-1].strip()
    return path.stem


def _minutes(t: dict | None) -> str:
    if not t:
        return "not timed"
    if not t.get("ok", True):
        return "failed"
    s = t["wall_s"]
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.1f} min"


def notebooks_block() -> str:
    times = _json("notebook_times.json") or {}
    nbt = times.get("notebooks", {})
    lines = ["| # | notebook | needs | shows | small (`FP8LAB_SMALL=1`) | full | exercises |",
             "|---|---|---|---|---|---|---|"]
    for p in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        needs, shows = ROLES.get(p.name[:2], ("(see the notebook)", "(see the notebook)"))
        t = nbt.get(p.stem, {})
        sol = REPO / "notebooks" / "solutions" / f"{p.stem}.py"
        ex = f"[answers](solutions/{sol.name})" if sol.is_file() else "-"
        lines.append(f"| {p.name[:2]} | [{_title(p)}]({p.name}) | {needs} | {shows} | {_minutes(t.get('small'))} | "
                     f"{_minutes(t.get('full'))} | {ex} |")
    if times:
        m = times.get("machine", {})
        prov = times.get("provenance", {})
        lines += ["", f"Times: wall-clock seconds of `tools/time_notebooks.py` executing each notebook top to bottom "
                  f"(nbclient), {' '.join(describe(prov).split())}; {m.get('cpu_count', '?')} cores, "
                  f"{m.get('torch_threads', '?')} torch threads, load average {m.get('load_start', '?')} at the start "
                  f"and {m.get('load_end', '?')} at the end (other jobs shared the machine: an idle laptop of the same "
                  f"size is faster). CPU seconds of each run are in `outputs/notebook_times.json`."]
    else:
        lines += ["", "Times: `outputs/notebook_times.json` is not recorded yet (`python tools/time_notebooks.py --record`)."]
    return "\n".join(lines)


# ---- markers -----------------------------------------------------------------------------------------------------
PAGES = {REPO / "README.md": ("results", readme_block), REPO / "notebooks" / "README.md": ("notebooks", notebooks_block)}


def splice(text: str, name: str, body: str) -> str:
    """Replace what lies between <!-- name:begin --> and <!-- name:end --> (the markers stay); ValueError if absent."""
    b, e = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if text.count(b) != 1 or text.count(e) != 1 or text.index(b) > text.index(e):
        raise ValueError(f"expected one {b} ... {e} pair")
    head, rest = text.split(b, 1)
    _, tail = rest.split(e, 1)
    return f"{head}{b}\n{body.strip()}\n{e}{tail}"


def render() -> dict:
    """{page path: its text with the block rendered}."""
    out = {}
    for page, (name, fn) in PAGES.items():
        out[page] = splice(page.read_text(encoding="utf-8"), name, fn())
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/render_docs.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if a page differs from its rendering")
    a = ap.parse_args(argv)
    stale = []
    for page, text in render().items():
        if page.read_text(encoding="utf-8") != text:
            stale.append(page)
            if not a.check:
                from fp8lab.store import atomic_write_text

                atomic_write_text(page, text)
                print(f"rendered {page.relative_to(REPO)}")
    if a.check and stale:
        print("out of date (run python tools/render_docs.py and commit): "
              + ", ".join(str(p.relative_to(REPO)) for p in stale), file=sys.stderr)
        return 1
    if not stale:
        print("up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
