"""Which attention configuration should the decode layer run at long caches? (a diagnosis, not a result)

    python3 tools/gpu/layer_attn_probe.py OUT.json [B:CTX ...]      # default points 32:8192 32:32768 1:32768

attention_fp8kv.v3_default picks (2, 2, 3) (COPY = 2: 4 KB bulk copies) where a cache holds >= V3_LONG_ROWS rows
(B x Hk x tokens planned), else (2, 1, 4): the H200 sweeps at 32k had (2, 2, 3) ahead for the attention alone. The
first H100 layer recording with that rule (outputs/kernels/h100/layer.json at b92afa5, against
h100/repeats/layer_d45d496.json before the rule) ran the PDL layers 4-10 % slower at B = 32, contexts 8k and 32k, while
the layers without PDL did not move. This probe builds the layer (DecodeLayer, as bench_layer does) at each point with
its attention step prepared in both configurations (the rule's and the other one; everything else identical), FP8 and
NVFP4, fused with and without PDL; each layer is validated against its float64 reference, and all are timed together in
interleaved rounds of CUDA graphs (harness.Bench.compare) beside the attention step alone in both configurations.
Each PDL layer is also timed with one edge launched plainly, to say which overlap costs: `attn plain` launches the
attention without PDL (it no longer starts under the RoPE/append kernel), `O plain` the O projection (it no longer
starts under the attention). Reading: if only the PDL layers lose with (2, 2, 3) while the attention alone wins or
ties, the loss is in how the long configuration's kernel overlaps its neighbours under PDL; the plain edge that wins
it back names the overlap.
"""
import sys
import time

import layerprobe   # tools/gpu/layerprobe.py (this folder is on the path when the probe runs as a script)

from fp8lab.kernels import attention_fp8kv as AF
from fp8lab.kernels import decode_layer as DL
from fp8lab.kernels import harness

VARIANTS = ("fp8_fused", "fp8_fused_pdl", "nvfp4_fused", "nvfp4_fused_pdl")
TWEAKS = {"": None, " attn plain": "attn", " O plain": "o"}  # PDL layers: one edge launched without PDL
KEY = ("fp8cvt", 128, "g8")


def attention_index(layer) -> int:
    """The position of the attention step in layer.steps (the one attention_fp8kv Launch)."""
    idx = [i for i, s in enumerate(layer.steps) if isinstance(s, AF.Launch)]
    if len(idx) != 1:
        raise RuntimeError(f"expected one attention step, found {len(idx)}")
    return idx[0]


def with_attention_config(layer, cfg: tuple) -> None:
    """Re-prepare the layer's attention step with `cfg` (same tensors); in a PDL layer it is launched with PDL (the
    question this probe asks, whatever decode_layer.PDL_ATTENTION makes the layer do)."""
    i = attention_index(layer)
    seq = layer._keep[0]
    new = AF.prepare(layer.q, layer.cache_k, layer.cache_v, seq, k_scale=layer.k_scale, v_scale=layer.v_scale,
                     out=layer.attn3, check_values=False, max_seq_len=layer.context, version=3, config=cfg)
    new.pdl_main = layer.pdl and new.info["version"] == 3
    layer.steps[i] = new


def plain_edge(layer, which: str) -> None:
    """Launch one step of a PDL layer without PDL: "attn" the attention, "o" the step after it (the O projection)."""
    i = attention_index(layer)
    if which == "attn":
        layer.steps[i].pdl_main = False
    else:
        layer.steps[i + 1].pdl = False


def main(out: str, points) -> int:
    t0 = time.time()
    bench = harness.Bench("layer_attn_probe", out, "python3 tools/gpu/layer_attn_probe.py " + " ".join(sys.argv[1:]),
                          rounds=7)
    shape = DL.LayerShape.from_config(DL.CONFIG)
    master = DL.make_master(shape)
    short, long_ = AF.V3_DEFAULTS[KEY], AF.V3_LONG_DEFAULTS[KEY]
    timers, meta = {}, {}
    wcache: dict = {}  # packed weights by (format, R, fused), caches by (type, B, Hk, L, D): shared by every layer
    for B, ctx in points:
        rule = AF.v3_default(*KEY, B, shape.kv_heads, ctx)
        for v, (tag, tweak) in [(v, tw) for v in VARIANTS for tw in TWEAKS.items() if v.endswith("_pdl") or not tw[1]]:
            for cfg in (short, long_):
                name = f"B={B} ctx={ctx} {v}{tag} attn{cfg}"
                def make(v=v, cfg=cfg, tweak=tweak):
                    layer = DL.DecodeLayer(shape, master, v, B, ctx, max_context=ctx, weight_cache=wcache)
                    with_attention_config(layer, cfg)
                    if tweak:
                        plain_edge(layer, tweak)
                    return layer
                layer = layerprobe.build(bench, name, make)
                if layer is None:
                    continue
                ran = tuple(layer.steps[attention_index(layer)].info["config"])
                meta[name] = dict(batch=B, context=ctx, variant=v + tag, attn_config=list(ran), rule_config=list(rule),
                                  is_rule=tuple(ran) == tuple(rule), what="layer")
                timers[name] = layerprobe.timer(layer.step)
                if v == "fp8_fused":  # the attention step alone, no PDL (as bench attention times it)
                    step = layer.steps[attention_index(layer)]
                    aname = f"B={B} ctx={ctx} attention alone attn{cfg}"
                    # the step is checked inside its layer: the layer's validation (its 'attn' stage) under this name
                    layerprobe.validate(bench, aname, layer)
                    meta[aname] = dict(batch=B, context=ctx, variant="attention", attn_config=list(ran),
                                       rule_config=list(rule), is_rule=tuple(ran) == tuple(rule), what="attention")
                    timers[aname] = layerprobe.timer(step)
                print(f"  {name}: validated", flush=True)
    t = bench.compare(timers)
    rows = []
    for name, timing in t.items():
        m = meta[name]
        other = [n for n in t if n != name and meta[n]["batch"] == m["batch"] and meta[n]["context"] == m["context"]
                 and meta[n]["variant"] == m["variant"]]
        ratio = (t[other[0]].median / timing.median) if other else None  # > 1: this config is faster
        rows.append(dict(name=name, **m, time_us=timing.median, q1=timing.q1, q3=timing.q3,
                         other_over_this=ratio))
        print(f"{name:52s} {timing.median:9.2f} us [{timing.q1:.2f}, {timing.q3:.2f}]  other/this "
              f"{ratio if ratio is None else round(ratio, 3)}{'  (rule)' if m['is_rule'] else ''}", flush=True)
    bench.extra.update(rows=rows, points=[list(p) for p in points], short=list(short), long=list(long_))
    bench.write()
    print(f"wrote {out} in {time.time() - t0:.0f} s")
    return 0


def parse_points(args) -> list:
    pts = []
    for a in args:
        b, _, c = a.partition(":")
        pts.append((int(b), int(c)))
    return pts or [(32, 8192), (32, 32768), (1, 32768)]


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], parse_points(sys.argv[2:])))
