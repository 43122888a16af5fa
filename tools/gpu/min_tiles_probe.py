"""The decode layer at batch 1 and 8, 1k and 8k tokens, with version 3's merged splits planned at >= 1 and >= 4 tiles
each (attention_fp8kv.V3_MIN_TILES_MERGED): a diagnosis, not a result. python3 tools/gpu/min_tiles_probe.py"""

from fp8lab.kernels import attention_fp8kv as att
from fp8lab.kernels import decode_layer as DL
from fp8lab.kernels import harness

shape = DL.LayerShape.from_config()
master = DL.make_master(shape)
for B, ctx in ((1, 1024), (1, 8192), (8, 1024), (8, 8192)):
    layers = {}
    for mt in (4, 1):
        att.V3_MIN_TILES_MERGED = mt
        for v in ("fp8_fused_pdl", "nvfp4_fused_norm_pdl"):
            layer = DL.DecodeLayer(shape, master, v, B, ctx, max_context=ctx)
            ok, err = layer.validate()
            assert ok, (v, mt, err)
            layers[(v, mt)] = (layer, layer.steps[[i for i, s in enumerate(layer.steps) if hasattr(s, "info") and "num_splits" in s.info][0]].info["num_splits"])
    ts = harness.interleave({k: (lambda layer=layer: harness.graph_time_us([layer.step], min_calls=8, rep=10))
                             for k, (layer, _) in layers.items()})
    for k, t in ts.items():
        print(f"B={B} ctx={ctx} {k[0]:22s} min_tiles={k[1]} splits={layers[k][1]:4d} {t.median:7.2f} us "
              f"[{t.min:.2f}, {t.max:.2f}]")
