"""Worked answers to notebook 05's exercises (what an "FP8" checkpoint really holds), on the synthetic fixtures.

    python notebooks/solutions/05_checkpoint_audit.py
"""
import tempfile
from pathlib import Path

from fp8lab import audit as au, audit_fixtures as af, export, recipes
from fp8lab import notebook as nb

GPU_ONLY: set = set()


def exercise_1() -> dict:
    """Audit a checkpoint folder: which roles are converted? (Here the DeepSeek-style fixture; the same call works on
    any folder of safetensors files, reading headers only.)

    The role x dtype table answers it: every expert, attention and MLP tensor is F8_E4M3 with F32 128x128 block
    scales; embeddings and norms stay BF16 — as in every FP8 recipe."""
    path = af.make_fixture("deepseek_block_fp8", tempfile.mkdtemp())
    rep = au.audit(path)
    return {"verdict": rep["verdict"], "scale layouts": rep["scale_layouts"]}


def exercise_2() -> dict:
    """K/V scales under the legacy name: does the audit recognise them?

    Checkpoints name K/V cache scales `self_attn.k_scale` / `v_scale`, `k_proj.k_scale`, or the legacy single
    `kv_scale`; the audit matches all of them."""
    out = {}
    for style in ("attn", "legacy"):
        rep = au.audit(af.fp8_per_tensor(Path(tempfile.mkdtemp()) / style, kv_scales=style))
        out[style] = {"has_kv_scales": rep["has_kv_scales"], "first": (rep["kv_scale_tensors"] or [None])[0]}
    return out


def exercise_3() -> dict:
    """64x64 blocks under a [128, 128] label: the scale tensor's shape gives it away.

    A block-FP8 weight [N, K] with b x b blocks has a [ceil(N/b), ceil(K/b)] scale; under a 128 label the audit
    expects [ceil(N/128), ceil(K/128)] and reports the mismatch instead of trusting the label."""
    folder = Path(tempfile.mkdtemp()) / "blocks64"
    tensors = [("model.embed_tokens.weight", "BF16", [512, 256])]
    for name, n, k in (("gate_proj", 512, 256), ("up_proj", 512, 256), ("down_proj", 256, 512)):
        tensors += af.w_fp8_block(f"model.layers.0.mlp.{name}", n, k, b=64)
    af.write_shards(folder, [tensors], {"model_type": "llama", "quantization_config": {
        "quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}})
    rep = au.audit(folder)
    return {"verdict": rep["verdict"], "scale layouts": rep["scale_layouts"],
            **{k: rep[k] for k in ("warnings", "notes") if rep.get(k)}}


def exercise_4() -> dict:
    """What a checkpoint says about activations, and whether it can hold an "oracle" activation recipe.

    A checkpoint stores a *rule* for activation scales ("dynamic, per token" or "dynamic, per tensor"), not scales.
    `e4m3-wa` (per tensor) is an oracle only in the lab's perplexity windows, where one forward covers tokens that
    stand for the future; in a server each forward covers the prompt (all known) or the current decode step, so the
    same rule is causal there. The per-token rule (`e4m3-wa-tok`) is causal everywhere."""
    return {name: {"act (how, granularity, group)": export.plan(name).act,
                   "lab's label": "causal" if recipes.get_recipe(name).causal else "ORACLE"}
            for name in ("e4m3-wa-tok", "e4m3-wa")}


if __name__ == "__main__":
    nb.run_exercises(globals())
