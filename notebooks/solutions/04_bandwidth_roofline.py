"""Worked answers to notebook 04's exercises (bandwidth math and the roofline): arithmetic, no device.

    python notebooks/solutions/04_bandwidth_roofline.py
"""
from fp8lab import bandwidth as bw
from fp8lab import notebook as nb

GPU_ONLY: set = set()
LLAMA3 = nb.REPO / "tests/data/llama3_8b_config.json"


def exercise_1() -> dict:
    """An FP8 KV cache on a B200 at batch 32 and 8k context: how much does it raise the decode ceiling?

    At this batch and context the cache is most of the bytes read per step, so halving it moves the ceiling far
    more than FP8 weights alone do (`python -m fp8lab.bandwidth ... --kv-dtype fp8 --gpu B200` prints the table)."""
    out = {}
    for kv in ("bf16", "fp8"):
        r = bw.analyze(LLAMA3, batch=32, context=8192, gpu="B200", kv_dtype=kv)
        out[kv] = r["tokens_per_s_ceiling"]["fp8_tensor"]
    return {"tok/s per sequence, FP8 weights, by KV dtype": {k: round(v, 1) for k, v in out.items()},
            "gain from the FP8 cache": round(out["fp8"] / out["bf16"], 2)}


def exercise_2() -> dict:
    """A MoE at batch B reads only the experts its tokens route to: how fast does that grow with the batch?

    With E experts and top-k routing, one token reads k of E; B tokens read the union. For random routing the
    expected distinct fraction is 1 - (1 - k/E)**B: it approaches 1 quickly, so at serving batch sizes a MoE reads
    (almost) all its experts every step, and its bytes per step approach a dense model's."""
    E, k = 8, 2                                   # Mixtral-style routing
    return {f"batch {B}": round(bw.distinct_expert_fraction(E, k, B), 3) for B in (1, 2, 4, 8, 16, 32)}


def exercise_3() -> dict:
    """Seed 003's conventions (everything in FP8, the whole embedding table read per step) against the defaults.

    Two conventions move in opposite directions: policy "all" halves the embedding table and lm_head (FP8 instead of
    BF16), while reading the whole table every step adds the table where a real decode gathers one row per token.
    For Llama-3-8B (untied embedding and lm_head of the same size) the two cancel almost exactly at batch 1: the
    seed's total is right for the wrong reasons. The split below shows each convention on its own."""
    s = bw.model_shape(bw.load_config(LLAMA3))
    gb = {f"policy {p}, embedding read {e}": round(bw.bytes_per_decode_step(s, "fp8_tensor", "bf16", 1, 8192, p, e) / 1e9, 3)
          for p in ("all", "linear") for e in ("table", "rows")}
    return {"GB per decode step (FP8 weights, batch 1, 8k context)": gb,
            "seed's conventions / defaults": round(gb["policy all, embedding read table"]
                                                   / gb["policy linear, embedding read rows"], 4)}


def exercise_4() -> dict:
    """The attention benchmark's decode step on the roofline: FLOPs and bytes at 32k context.

    Per sequence and query head: q·K over L keys (2·L·D FLOPs) and P·V (2·L·D); the cache read is K and V for every
    KV head: 2·L·D elements. Grouped-query attention reads each KV head once for G = Hq / Hk query heads, so the
    intensity is about G · 2 FLOPs per cache element, i.e. G FLOPs per byte in bf16 and 2·G in FP8."""
    B, Hq, Hk, D, L = 8, 32, 8, 128, 32768
    flops = B * Hq * 4 * L * D
    out = {}
    for name, elem in (("bf16", 2), ("fp8", 1)):
        nbytes = B * Hk * 2 * L * D * elem
        out[name] = {"GFLOP": round(flops / 1e9, 2), "GB": round(nbytes / 1e9, 3), "FLOP/B": round(flops / nbytes, 1)}
    base = nb.recorded("kernels", "attention.json", prov=None, quiet=True)
    if base:
        from fp8lab.kernels import bench_attention as ba

        r = next((r for r in ba.summary_rows(ba.load(base / "attention.json"))
                  if (r["layout"], r["head_dim"], r["context"]) == ("contiguous", D, L)), None)
        if r:
            out["recorded fp8 TFLOP/s"] = round(flops / (r["fp8_us"] * 1e6), 2)
            out["recorded bf16 TFLOP/s"] = round(flops / (r["bf16_us"] * 1e6), 2)
    return out


def exercise_5() -> dict:
    """The measured decode layer beside the whole model's bandwidth ceiling at batch 1, 1k context.

    The layer benchmark times one transformer layer; 32 of them are the model minus the embedding row, the final
    norm and the lm_head (kept in BF16 by real FP8 checkpoints, and read every step). So the layer's own
    tokens/s (32 layers, nothing else) is an upper bound on the measured model, and the ceiling from
    fp8lab.bandwidth counts the lm_head too: the gap between the two ceilings is the lm_head's share."""
    base = nb.recorded("kernels", "layer.json", prov=None, quiet=True)
    if not base:
        return {"answer": "outputs/kernels/layer.json is not recorded"}
    from fp8lab.kernels import layer_report as lr

    rows = [r for r in lr.layer_table(lr.load(base / "layer.json")) if (r["batch"], r["context"]) == (1, 1024)]
    r = bw.analyze(LLAMA3, batch=1, context=1024, gpu="H200-measured")
    step = r["bytes_per_decode_step_by_kv"]["fp8"]
    out = {"model ceiling tokens/s (H200-measured, KV fp8)": {k: round(v, 1) for k, v in r["tokens_per_s_ceiling"].items()},
           "model bytes per step, KV fp8 (MB)": {k: round(v / 1e6, 1) for k, v in step.items()}}
    for x in rows:
        out[x["variant"]] = {"measured tokens/s (32 layers)": round(x["tokens/s (32 layers)"], 1),
                             "its own ceiling tokens/s": round(x["ceiling tokens/s"], 1),
                             "32 layers' bytes (MB)": round(32 * x["MB"], 1)}
    return out


if __name__ == "__main__":
    nb.run_exercises(globals())
