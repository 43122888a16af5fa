"""The <= 25-line summary of tools/gpu/attn.sh's results folder: `python tools/gpu/attn_summary.py $OUT/attn`.

Reads what the stages left (compile logs, pytest logs, sweep.json, prefill.json, decode128k.json) and never fails on
a missing or damaged file: it says so in the line instead.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def _load(p: Path):
    try:
        return json.loads(p.read_text())
    except Exception as e:  # missing, or cut short by a timeout
        return {"_error": f"{p.name}: {type(e).__name__}"}


def _last(p: Path, pattern: str) -> str:
    try:
        lines = [ln for ln in p.read_text().splitlines() if re.search(pattern, ln)]
        return lines[-1].strip("= ").strip() if lines else "(no match)"
    except Exception as e:
        return f"(no log: {type(e).__name__})"


def main(folder: str) -> int:
    R = Path(folder)
    out = []
    comp = []
    for f in ("attention_fp8kv", "attention_decode_v2", "attention_nvfp4kv", "attention_prefill"):
        s = _last(R / f"compile_{f}.log", r"compiled|Error|error")
        m = re.search(r"in ([\d.]+) s", s)
        comp.append(f"{f.replace('attention_', '')} {m.group(1) + 's' if m else 'FAILED: ' + s[:60]}")
    out.append("compile: " + ", ".join(comp))
    for t in ("attention_v1", "attention", "attention_nvfp4", "attention_prefill"):
        p = R / f"pytest_{t}.log"
        line = _last(p, r"\d+ (passed|failed|error|skipped)")
        if line == "(no match)":  # cut short by the timeout: count what ran
            try:
                txt = p.read_text()
                line = f"TIMED OUT after {txt.count('.')} passes, {txt.count('F')} failures shown"
            except Exception:
                pass
        fails = []
        try:
            fails = [ln.split(" ")[1] for ln in p.read_text().splitlines() if ln.startswith("FAILED ")][:2]
        except Exception:
            pass
        out.append(f"tests {t}: {line}" + (f" | first: {'; '.join(f.split('::')[-1][:50] for f in fails)}" if fails else ""))
    sw = _load(R / "sweep.json")
    if "_error" in sw:
        out.append(f"sweep: {sw['_error']}")
    else:
        res = sw.get("results", [])
        out.append(f"sweep 32k D128 (copy {sw.get('ceilings', {}).get('copy_gbps', 0):.0f} GB/s): kernel config splits us xcopy vs-bf16")
        for fmt, n in (("fp8cvt", 3), ("fp8bit", 1), ("nvfp4", 2), ("bf16", 2), ("torch", 1)):
            grp = sorted((r for r in res if r.get("fmt") == fmt), key=lambda r: r["time_us"])[:n]
            for r in grp:
                cfg = "v1" if r.get("version") == 1 else ",".join(map(str, r.get("config") or [])) or "-"
                sp = r.get("speedup")
                out.append(f"  {r['kernel'][:30]:30s} {cfg:9s} {str(r.get('num_splits', '-')):>3s} {r['time_us']:7.1f} "
                           f"{(r.get('fraction_of_copy_bw') or 0):.3f} {sp if sp is None else round(sp, 2)}")
        bad = [n.get("kernel", "?") for n in sw.get("notes", [])]
        if bad:
            out.append(f"  not timed / failed: {', '.join(bad)[:150]}")
    pf = _load(R / "prefill.json")
    if "_error" in pf:
        out.append(f"prefill: {pf['_error']}")
    else:
        rows = {}
        for r in pf.get("results", []):
            rows.setdefault((r.get("context"), r.get("chunk")), {})[r["kernel"].split("[")[0] + ("8" if r.get("nw") == 8 else "")] = r["time_us"]
        for (Lc, Mq), d in sorted(rows.items()):
            b4, f4, b8, f8 = d.get("ours_bf16kv"), d.get("ours_fp8kv"), d.get("ours_bf16kv8"), d.get("ours_fp8kv8")
            ratio = lambda a, b: "-" if not (a and b) else f"{b / a:.2f}"  # noqa: E731
            out.append(f"prefill Lc={Lc} Mq={Mq}: bf16 {b4 or 0:.0f} fp8 {f4 or 0:.0f} us (x{ratio(b4, f4)}); w8 x{ratio(b8, f8)}; "
                       f"torch {d.get('torch_sdpa', 0):.0f} us")
        if pf.get("notes"):
            out.append(f"  prefill notes: {str([n.get('kernel', n.get('shape')) for n in pf['notes']])[:120]}")
    d128 = _load(R / "decode128k.json")
    if "_error" not in d128:
        gs = [g for g in d128.get("goals") or [] if g.get("context") == 131072 and g.get("measured") is not None]
        out.append("128k goals: " + "; ".join(f"{g['goal']} {g['measured']:.2f}/{g['threshold']}" for g in gs))
    goals = [g for g in (sw.get("goals") or []) if g.get("measured") is not None and g.get("context") == 32768] \
        if "_error" not in sw else []
    out.append("32k goals: " + "; ".join(f"{g['goal']} {g['measured']:.2f}/{g['threshold']}" for g in goals))
    print("\n".join(out[:25]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
