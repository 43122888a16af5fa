"""Run B of the prefill GEMM (called by tools/gpu/prefill.sh): the tuning sweep, then a <= 25-line summary.

    python3 tools/gpu/prefill_runb.py tune --out DIR --skip a,b      # DIR/tune.json, written after every shape
    python3 tools/gpu/prefill_runb.py summary --out DIR              # reads DIR/*.json|txt, prints the summary

The sweep (every kernel validated against float64 with a poisoned output before it is timed; anchors interleaved):
  1. 4096x7168x7168: the whole ladder, the tuning variants, the older wgmma_256, tile-order groups on rung e;
  2. three large shapes (M >= 2048): the top rungs, both tile widths, TMA-store epilogue, the default;
  3. three small ones (M = 512, 128): the same without the older kernels.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

TOP = ("wgmma_ws", "wgmma_tma_c", "wgmma_tma_d", "wgmma_tma_e", "wgmma_tma_c256", "wgmma_tma_e_tmastore",
       "wgmma_tma_d7", "wgmma_tma")


def plan():
    from fp8lab.kernels import gemm_prefill as P
    from fp8lab.kernels import gemm_w8a8 as G

    e, d = G.TMA_LADDER["wgmma_tma_e"], G.TMA_LADDER["wgmma_tma_d"]
    groups = {f"e_group{g}": ("wgmma_tma_e", replace(e, group=g)) for g in (1, 2, 4, 16)}
    groups["e_flat"] = ("wgmma_tma_e", replace(e, group=10**6))      # no grouping: m fastest over all m-units
    groups["d_group16"] = ("wgmma_tma_d", replace(d, group=16))
    return [
        ([(4096, 7168, 7168)], P.LADDER + tuple(G.TMA_VARIANTS) + ("wgmma_256",), groups),
        ([(8192, 18944, 3584), (2048, 4096, 14336), (4096, 14336, 4096)], TOP, {}),
        ([(512, 7168, 7168), (512, 4096, 4096), (128, 4096, 4096)], TOP, {}),
    ]


def tune(out: Path, skip: set) -> None:
    from fp8lab.kernels import gemm_prefill as P
    from fp8lab.kernels import tma

    try:
        probe = f"tma probes: {tma.check_device()}"
    except Exception as e:  # noqa: BLE001 - the TMA kernels cannot run: the sweep still times the others
        probe = f"tma probes FAILED: {type(e).__name__}: {e}"
    (out / "probe.txt").write_text(probe + "\n")
    results = []
    for i, (shapes, names, extra) in enumerate(plan()):
        for shape in shapes:
            try:
                results += P.tune([shape], names, extra_configs=extra, rounds=3,
                                  out=out / f"tune_{i}_{'x'.join(map(str, shape))}.json", skip=skip)
            except Exception as e:  # noqa: BLE001 - one shape's failure (memory, a CUDA error) must not end the sweep
                print(f"tune {shape}: {type(e).__name__}: {e}", flush=True)
                (out / "tune_errors.txt").open("a").write(f"{shape}: {type(e).__name__}: {str(e)[:300]}\n")


def summary(out: Path) -> None:
    lines = []
    for name in ("device.txt", "probe.txt", "smoke.json", "pytest_line.txt"):
        p = out / name
        if p.exists():
            t = p.read_text().strip()
            if name in ("device.txt", "probe.txt"):
                lines += [ln[:200] for ln in t.splitlines()[:1]]
            elif name == "smoke.json":
                d = json.loads(t)
                bad = {k: v["msg"][:60] for k, v in d.items() if not v["ok"]}
                lines.append(f"smoke: {sum(v['ok'] for v in d.values())}/{len(d)} ok" + (f"; FAILED {bad}" if bad else ""))
            else:
                lines.append(f"{name[:-4]}: {t.splitlines()[-1][:150] if t else '-'}")
    recs, fails = [], []
    for p in sorted(out.glob("tune_*.json")):
        d = json.loads(p.read_text())
        recs += d["results"]
        fails += [k for k, v in d["validation"].items() if not v.get("passed")]
    if (out / "tune_errors.txt").exists():
        lines.append("tune errors: " + (out / "tune_errors.txt").read_text().replace("\n", " | ")[:190])
    if fails:
        lines.append(f"VALIDATION FAILED ({len(fails)}): " + ", ".join(sorted({f.split()[0] for f in fails}))[:200])
    by_shape: dict = {}
    for r in recs:
        by_shape.setdefault(r["shape"], []).append(r)
    for shape, rs in by_shape.items():
        t = {r["kernel"].split(" (")[0].replace("w8a8_", "").replace("scaled_mm_", "sm_"): r["tflops"] for r in rs}
        blk = t.get("sm_blockwise")
        head = f"{shape}: bf16 {t.get('bf16_cublas', 0):.0f} blk {blk or 0:.0f} tw {t.get('sm_tensorwise', 0):.0f} |"
        ours = sorted(((k, v) for k, v in t.items() if not k.startswith(("bf16", "sm_"))), key=lambda kv: -kv[1])
        body = " ".join(f"{k.replace('wgmma_', '')}={v:.0f}" + (f"({v / blk:.2f})" if blk else "") for k, v in ours)
        text = head + " " + body
        lines += [text[i:i + 200] for i in range(0, min(len(text), 400), 200)]
    print("\n".join(lines[-25:]))
    (out / "summary.txt").write_text("\n".join(lines) + "\n")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=("tune", "summary"))
    p.add_argument("--out", required=True)
    p.add_argument("--skip", default="")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.what == "tune":
        os.environ["FP8LAB_SKIP_KERNELS"] = a.skip
        tune(out, {k for k in a.skip.split(",") if k})
    else:
        summary(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
