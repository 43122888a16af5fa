"""The <= 25-line summary of tools/gpu/decode.sh: python3 tools/gpu/decode_summary.py <run folder>."""
import json
import sys
from pathlib import Path

d = Path(sys.argv[1])
lines = []


def load(name):
    try:
        return json.loads((d / name).read_text())
    except Exception as e:
        lines.append(f"{name}: unreadable ({type(e).__name__})")
        return None


try:
    t = (d / "pytest.txt").read_text().strip().splitlines()
    fails = [x for x in t if x.startswith("FAILED")][:3]
    lines.append(f"pytest: {t[-1] if t else '(empty)'}")
    lines += [f"  {x[:150]}" for x in fails]
except Exception as e:
    lines.append(f"pytest: no output ({e})")

g = load("gemm_sweep.json")
if g:
    lines.append(f"copy {g['ceilings'].get('copy_gbps', 0):.0f} GB/s; failed validations: "
                 f"{sum(1 for v in g['validation'].values() if not v.get('passed'))}")
    res = [r for r in g["results"] if r.get("family") == "decode"]
    for (N, K) in sorted({(r["N"], r["K"]) for r in res}, key=lambda s: -s[0] * s[1]):
        for M in sorted({r["M"] for r in res}):
            rs = {r["kernel"].split(" (")[0]: r for r in res if (r["N"], r["K"], r["M"]) == (N, K, M)}
            def us(k):
                return f"{rs[k]['time_us']:.1f}" if k in rs else "-"
            def cfg(k):
                c = rs.get(k, {}).get("config_CPWC_R")
                return "" if not c else f"{tuple(c[0])}R{c[1]}"
            fr = rs.get("gemv_fp8_channel_v3", {}).get("weight_fraction_of_copy")
            nv = rs.get("gemv_nvfp4_v3", {}).get("weight_fraction_of_copy")
            lines.append(f"{N}x{K} M={M}: bf16 {us('bf16_cublas')} smm {us('scaled_mm_tensorwise')} | fp8 v2 "
                         f"{us('gemv_fp8_channel_v2')} v3 {us('gemv_fp8_channel_v3')}{cfg('gemv_fp8_channel_v3')} "
                         f"({fr or 0:.2f}) blk {us('gemv_fp8_block_v3')} | nv v2 {us('gemv_nvfp4_v2')} v3 "
                         f"{us('gemv_nvfp4_v3')}{cfg('gemv_nvfp4_v3')} ({nv or 0:.2f})")
lay = load("layer_b1.json")
if lay:
    bad = [k for k, v in lay["validation"].items() if not v.get("passed")]
    lines.append(f"layer B1 ctx1k: failed validations {bad[:4]}")
    for r in lay["results"]:
        lines.append(f"  {r['variant']:16s} {r['time_us']:7.1f} us  x{(r.get('speedup') or 1):.2f} bf16  "
                     f"of ceiling {r['of_ceiling']:.2f} ({r['ceiling_us_copy']:.1f} us)")
    for k, bd in (lay.get("breakdown") or {}).items():
        lines.append(f"  parts {k}: " + " ".join(f"{b['time_us']:.1f}" for b in bd))
for line in lines[-25:] if len(lines) > 25 else lines:
    print(line[:200])
