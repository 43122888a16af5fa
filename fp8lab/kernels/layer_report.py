"""What notebooks 07 and 04 read from a recorded decode-layer benchmark (outputs/kernels/layer.json): tables, goals,
the ceiling comparison, roofline points and a figure. Nothing here touches a GPU.

    data = load()
    print(format_rows(layer_table(data)))          # every variant at every (batch, context): time, x bf16, of ceiling
    print(format_rows(goal_table(data)))           # the layer goals, with how much a missed one misses by and why
    layer_roofline_points(data)                    # measured points for fp8lab.bandwidth.roofline_figure(measured=...)
    plot_layer(data)                               # time per step against the ceiling of its bytes
"""
from __future__ import annotations

from pathlib import Path

from . import harness
from .gemm_report import format_rows, goal_line, provenance_summary  # noqa: F401  (re-exported for the notebooks)

__all__ = ["load", "layer_table", "layer_goals", "goal_lines", "goal_table", "breakdown_table", "layer_roofline_points",
           "pdl_effect", "pdl_sentence", "attention_launch_rows", "attention_launch_sentence",
           "load_attention_probes", "plot_layer", "format_rows", "provenance_summary"]

DEFAULT_OUT = harness.REPO / "outputs" / "kernels" / "layer.json"
GOAL_POINT = (1, 1024)  # batch, context
#: the layer-attention probe's records (tools/gpu/layer_attn_probe.py: its default points, then the short-context ones)
ATTENTION_PROBES = ("layer_attn_probe.json", "layer_attn_probe_short.json")


def load(path=DEFAULT_OUT) -> dict:
    return harness.load_json(path)


def _layer_rows(data):
    return [r for r in data["results"] if r.get("family") == "layer"]


def layer_table(data: dict) -> list[dict]:
    """One row per variant and point: time (median, quartiles), x bf16, the ceiling of its bytes, tokens/s."""
    rows = []
    for r in _layer_rows(data):
        sp = r.get("spread_us") or {}
        rows.append({"variant": r["variant"], "batch": r["batch"], "context": r["context"], "time_us": r["time_us"],
                     "q1": sp.get("q1"), "q3": sp.get("q3"), "x_vs_bf16": r.get("speedup"),
                     "ceiling_us": r["ceiling_us_copy"], "of_ceiling": r["of_ceiling"],
                     "MB": r["bytes"] / 1e6, "tokens/s (32 layers)": r["tokens_per_s"],
                     "ceiling tokens/s": r["ceiling_tokens_per_s"]})
    return rows


def _best(rows, prefix, key, point=GOAL_POINT):
    cands = [r for r in rows if r["variant"].startswith(prefix) and (r["batch"], r["context"]) == point and r.get(key)]
    return max(cands, key=lambda r: r[key]) if cands else None


def _why(data, r) -> str:
    """From the per-kernel breakdown of the same variant and point (bench_layer.breakdown), where the time goes."""
    bd = (data.get("breakdown") or {}).get(f"{r['variant']} B={r['batch']} ctx={r['context']}")
    if not bd:
        return "no per-kernel breakdown recorded for this variant"
    gemv = [b for b in bd if str(b["kernel"]).startswith("gemv3")]
    t_g = sum(b["time_us"] for b in gemv)
    f_g = sum(b["floor_us"] or 0 for b in gemv)
    other = [b for b in bd if b not in gemv]
    parts = sum(b["time_us"] for b in bd)
    kinds = {"rmsnorm": "RMSNorm", "rope": "RoPE+append", "decode_v": "attention", "add": "add", "silu": "SiLU*mul"}
    named = ", ".join(dict.fromkeys(next((v for k, v in kinds.items() if str(b["kernel"]).startswith(k)), str(b["kernel"]))
                                    for b in other))
    return (f"the GEMVs alone take {t_g:.1f} us for a {f_g:.1f} us floor ({f_g / t_g:.2f} of copy bandwidth); "
            f"the other {len(other)} launches ({named}) {sum(b['time_us'] for b in other):.1f} us "
            f"timed alone; the whole step {r['time_us']:.1f} us against {parts:.1f} us of parts timed alone "
            f"and a {r['ceiling_us_copy']:.1f} us ceiling")


def layer_goals(data: dict) -> list[dict]:
    """The layer goals at batch 1, context 1k: FP8 >= 1.8x bf16, NVFP4 >= 2.8x, each within 15 % of the ceiling of
    its bytes (ceiling / time >= 1 / 1.15). A missed goal carries `miss` (how far, in the goal's own terms) and
    `why` (from the per-kernel breakdown when the run recorded one)."""
    rows = _layer_rows(data)
    out = []
    for fam, target in (("fp8", 1.8), ("nvfp4", 2.8)):
        r = _best(rows, fam, "speedup")
        out.append({"goal": f"{fam.upper()} layer >= {target}x bf16 at batch 1, context 1k", "target": target,
                    "measured": r and r["speedup"], "variant": r and r["variant"], "row": r})
        r = _best(rows, fam, "of_ceiling")
        out.append({"goal": f"{fam.upper()} layer within 15 % of its bandwidth ceiling at batch 1, context 1k",
                    "target": 1 / 1.15, "measured": r and r["of_ceiling"], "variant": r and r["variant"], "row": r})
    for g in out:
        r = g.pop("row")
        g["met"] = None if g["measured"] is None else bool(g["measured"] >= g["target"])
        if g["met"] is False:
            g["miss"] = f"{g['measured']:.3f} against {g['target']:.3f} ({100 * (1 - g['measured'] / g['target']):.1f} % short)"
            g["why"] = _why(data, r)
    return out


def goal_lines(data: dict) -> list[str]:
    """The layer goals as notebook lines: verdict, measured, target, goal, variant; a missed one's miss and why."""
    out = []
    for g in layer_goals(data):
        out.append(goal_line(g, g["variant"] or "-"))
        if g.get("miss"):
            out += [f"{'':14s}miss: {g['miss']}", f"{'':14s}why:  {g['why']}"]
    return out


def goal_table(data: dict) -> list[dict]:
    """The goals computed from the recorded results and breakdown (not the run's stored copy: a record whose run
    stored its goals without the breakdown still gets each miss's `why`)."""
    return [{k: g.get(k) for k in ("goal", "target", "measured", "met", "variant", "miss", "why")}
            for g in layer_goals(data)]


def breakdown_table(data: dict) -> list[dict]:
    """Per-kernel times of the fastest FP8 and NVFP4 variants at the first point, each timed alone."""
    rows = []
    for key, bd in (data.get("breakdown") or {}).items():
        for b in bd:
            rows.append({"step": key, "kernel": b["kernel"], "time_us": b["time_us"], "floor_us": b.get("floor_us"),
                         "of_copy": b.get("fraction_of_copy")})
    return rows


def pdl_effect(data: dict) -> list[dict]:
    """Per format and point, the fused layer launched with programmatic dependent launch against the same layer
    without it (`{fmt}_fused_pdl` and `{fmt}_fused`): pdl_over_plain = time with PDL / time without (< 1: PDL saved
    time), `apart`: whether the two quartile ranges are apart (None where a record has no spread)."""
    from .bench_attention import quartiles_apart

    by = {(r["variant"], r["batch"], r["context"]): r for r in _layer_rows(data)}
    rows = []
    for (v, B, ctx), plain in sorted(by.items()):
        if not v.endswith("_fused") or (f"{v}_pdl", B, ctx) not in by:
            continue
        pdl = by[(f"{v}_pdl", B, ctx)]
        rows.append({"format": v[: -len("_fused")], "batch": B, "context": ctx, "fused_us": plain["time_us"],
                     "fused_pdl_us": pdl["time_us"], "pdl_over_plain": pdl["time_us"] / plain["time_us"],
                     "apart": quartiles_apart(plain, pdl)})
    return rows


def pdl_sentence(data: dict) -> str:
    """Where PDL saved time and where it cost time (quartile ranges apart), from pdl_effect."""
    rows = pdl_effect(data)
    if not rows:
        return "No fused layer was recorded both with and without PDL."
    saved = [r for r in rows if r["pdl_over_plain"] < 1 and r["apart"]]
    lost = [r for r in rows if r["pdl_over_plain"] > 1 and r["apart"]]
    even = len(rows) - len(saved) - len(lost)
    out = f"PDL (time with / without, fused layers) saved time at {len(saved)} of {len(rows)} points"
    if lost:
        out += f"; it cost time at {len(lost)}: " + ", ".join(
            f"{r['format']} B={r['batch']} {r['context'] // 1024}k (x{r['pdl_over_plain']:.3f})" for r in lost)
    else:
        out += "; it cost time at none"
    return out + (f"; {even} within the quartile ranges." if even else ".")


def attention_launch_rows(*probes: dict) -> list[dict]:
    """From layer-attention probe records (tools/gpu/layer_attn_probe.py): per PDL layer and point, the attention in
    the size rule's configuration launched with PDL against launched plainly (everything else as in the PDL layer):
    plain_over_pdl < 1: the plain launch was faster; `apart`: whether the quartile ranges are apart (the probe's rows
    carry q1 / q3 themselves)."""
    from .bench_attention import quartiles_apart

    rows = [r for p in probes for r in (p.get("rows") or [])]
    by = {(r["batch"], r["context"], r["variant"], tuple(r["attn_config"])): r for r in rows}
    out = []
    for (B, ctx, v, cfg), r in sorted(by.items()):
        plain = by.get((B, ctx, f"{v} attn plain", cfg))
        if not (v.endswith("_pdl") and r.get("is_rule") and plain):
            continue
        out.append({"batch": B, "context": ctx, "variant": v, "attn_config": cfg, "pdl_us": r["time_us"],
                    "plain_us": plain["time_us"], "plain_over_pdl": plain["time_us"] / r["time_us"],
                    "apart": quartiles_apart({"spread_us": plain}, {"spread_us": r})})
    return out


def load_attention_probes(folder) -> list[dict]:
    """The layer-attention probe records in `folder` (layer_attn_probe.json, layer_attn_probe_short.json), those present."""
    return [load(Path(folder) / f) for f in ATTENTION_PROBES if (Path(folder) / f).exists()] if folder else []


def attention_launch_sentence(rows: list[dict]) -> str:
    """How often the plain attention launch beat the PDL one (attention_launch_rows), and where it lost."""
    if not rows:
        return "No layer-attention probe recorded."
    faster = [r for r in rows if r["apart"] and r["plain_over_pdl"] < 1]
    slower = [r for r in rows if r["apart"] and r["plain_over_pdl"] > 1]
    lo, hi = (min(r["plain_over_pdl"] for r in faster), max(r["plain_over_pdl"] for r in faster)) if faster else (0, 0)
    out = (f"Launching the attention plainly instead of with PDL: faster in {len(faster)} of {len(rows)} cases "
           + (f"(time x{lo:.3f} to x{hi:.3f})" if faster else "") + f", slower in {len(slower)}")
    if slower:
        out += " (" + ", ".join(f"{r['variant']} B={r['batch']} {r['context'] // 1024}k x{r['plain_over_pdl']:.3f}"
                                for r in slower) + ")"
    return out + f", within the quartiles in {len(rows) - len(faster) - len(slower)}."


def layer_roofline_points(data: dict, batches=None, context: int = 1024) -> list[dict]:
    """Measured layer points for notebook 04's roofline ({"name", "intensity", "tflops", "gbps"}): intensity is the
    step's FLOPs over the bytes fp8lab.bandwidth counts for it; tflops / gbps what the measured time achieves."""
    pts = []
    for r in _layer_rows(data):
        if r["context"] == context and (batches is None or r["batch"] in batches):
            pts.append({"name": f"{r['variant']} B={r['batch']}", "variant": r["variant"], "batch": r["batch"],
                        "intensity": r["intensity"], "tflops": r["tflops"], "gbps": r["gbps"], "time_us": r["time_us"]})
    return pts


def plot_layer(data: dict, path=None, context: int | None = None):
    """Time per layer step for each variant and batch (one panel per context), the ceiling of each bar's bytes as a
    black tick: the gap between bar and tick is what the implementation leaves on the table."""
    import matplotlib.pyplot as plt

    rows = _layer_rows(data)
    ctxs = sorted({r["context"] for r in rows}) if context is None else [context]
    batches = sorted({r["batch"] for r in rows})
    variants = [v for v in dict.fromkeys(r["variant"] for r in rows)]
    fig, axes = plt.subplots(1, len(ctxs), figsize=(6 * len(ctxs), 4), sharey=False, squeeze=False)
    w = 0.8 / max(1, len(variants))
    for ax, ctx in zip(axes[0], ctxs):
        for i, v in enumerate(variants):
            for j, B in enumerate(batches):
                r = next((r for r in rows if r["variant"] == v and r["batch"] == B and r["context"] == ctx), None)
                if r is None:
                    continue
                x = j + (i - len(variants) / 2 + 0.5) * w
                ax.bar(x, r["time_us"], width=w, color=f"C{i}", label=v if j == 0 else None)
                ax.plot([x - w / 2, x + w / 2], [r["ceiling_us_copy"]] * 2, color="k", lw=1.5)
        ax.set_xticks(range(len(batches)), [f"batch {b}" for b in batches])
        ax.set_title(f"one Llama-3-8B layer, context {ctx}")
        ax.set_ylabel("us per step (black: bytes / copy bandwidth)")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # beside: covers no bar
    return harness.finish_figure(fig, path)
