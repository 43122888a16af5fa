"""Tiny synthetic checkpoints with real tensor names, dtypes and scale layouts, for fp8lab.audit.

Each builder writes real safetensors files (8-byte header length, JSON header padded with spaces to a
multiple of 8, then a zero payload) plus a ``config.json`` whose ``quantization_config`` is written in
the style of the named release. Shapes are tiny (hidden 64..256) but keep the layouts' rules: block
scales are [ceil(N/128), ceil(K/128)], MX scales [N, K/32], NVFP4 packs [N, K/2] with [N, K/16] scales.

The names follow the public releases where we know them (DeepSeek-V3 MLA + ``weight_scale_inv``,
gpt-oss fused ``mlp.experts.gate_up_proj`` and ``_blocks``/``_scales``, compressed-tensors and ModelOpt
NVFP4). Where we do not (the MXFP8 release's scale tensor name), the choice is marked ASSUMED.
No weights are real: the payload is zeros, and the labels are illustrations, not copies.

>>> paths = make_all(tmp_path)           # {"deepseek_block_fp8": Path(...), ...}
>>> sorted(paths)[:2]
['bf16_plain', 'deepseek_block_fp8']

To add a fixture: write a builder ``name(folder, quantization_config=None) -> Path`` from the w_* helpers
(one Linear's tensors in a layout) and ``write_shards`` / ``_write_checkpoint``, then list it in FIXTURES.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from fp8lab.audit import DTYPE_BITS


def header_bytes(tensors, metadata=None) -> tuple[bytes, int]:
    """(8-byte length + padded JSON header, payload size) for [(name, dtype, shape), ...]."""
    hdr, off = {}, 0
    if metadata:
        hdr["__metadata__"] = dict(metadata)
    for name, dtype, shape in tensors:
        n = math.prod(shape) * DTYPE_BITS[dtype] // 8
        hdr[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(hdr, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header so the payload starts 8-aligned
    return len(raw).to_bytes(8, "little") + raw, off


def safetensors_bytes(tensors, metadata=None) -> bytes:
    """A complete file in memory (zero payload)."""
    head, n = header_bytes(tensors, metadata)
    return head + bytes(n)


def write_safetensors(path, tensors, metadata=None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(safetensors_bytes(tensors, metadata or {"format": "pt"}))
    return path


def _write_checkpoint(folder: Path, tensors, config: dict, shards: int = 1, extra_json=None) -> Path:
    """config.json (+ ``extra_json`` files) and the tensors in one file, or split evenly into ``shards``."""
    if shards == 1:
        return write_shards(folder, [tensors], config, extra_json)
    per = math.ceil(len(tensors) / shards)
    return write_shards(folder, [tensors[i * per:(i + 1) * per] for i in range(shards)], config, extra_json)


def write_shards(folder, parts, config: dict | None, extra_json=None) -> Path:
    """A checkpoint folder with the tensor lists ``parts`` as its shards: one part -> model.safetensors;
    several -> model-0000i-of-0000n.safetensors plus model.safetensors.index.json, the way HF shards them.
    ``config=None`` writes no config.json (an unlabelled checkpoint)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config, indent=1))
    for name, obj in (extra_json or {}).items():
        (folder / name).write_text(json.dumps(obj, indent=1))
    if len(parts) == 1:
        write_safetensors(folder / "model.safetensors", parts[0])
        return folder
    weight_map, total = {}, 0
    for i, part in enumerate(parts):
        fname = f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors"
        write_safetensors(folder / fname, part)
        for name, dtype, shape in part:
            weight_map[name] = fname
            total += math.prod(shape) * DTYPE_BITS[dtype] // 8
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    return folder


def _cdiv(a, b):
    return -(-a // b)


# ---- weight-tensor helpers (w_*): each returns the tensors one Linear [n, k] stores ----------------------

def w_bf16(p, n, k):
    return [(f"{p}.weight", "BF16", [n, k])]


def w_fp8_block(p, n, k, b=128):  # DeepSeek-V3 / Qwen3-FP8: F32 weight_scale_inv per b x b block
    return [(f"{p}.weight", "F8_E4M3", [n, k]), (f"{p}.weight_scale_inv", "F32", [_cdiv(n, b), _cdiv(k, b)])]


def w_fp8_tensor(p, n, k, static_input=True):  # AutoFP8 / vLLM export: one F32 scale per tensor
    t = [(f"{p}.weight", "F8_E4M3", [n, k]), (f"{p}.weight_scale", "F32", [])]
    return t + ([(f"{p}.input_scale", "F32", [])] if static_input else [])


def w_fp8_channel(p, n, k):  # compressed-tensors "channel" strategy: [N, 1] scales
    return [(f"{p}.weight", "F8_E4M3", [n, k]), (f"{p}.weight_scale", "BF16", [n, 1])]


def w_mxfp8(p, n, k):  # E4M3 + E8M0 (stored U8) per 32 along K. ASSUMED scale name "weight_scale".
    return [(f"{p}.weight", "F8_E4M3", [n, k]), (f"{p}.weight_scale", "U8", [n, k // 32])]


def w_nvfp4_ct(p, n, k):  # compressed-tensors nvfp4-pack-quantized
    return [(f"{p}.weight_packed", "U8", [n, k // 2]), (f"{p}.weight_scale", "F8_E4M3", [n, k // 16]),
            (f"{p}.weight_global_scale", "F32", [1]), (f"{p}.input_global_scale", "F32", [1])]


def w_nvfp4_modelopt(p, n, k):  # TensorRT Model Optimizer export
    return [(f"{p}.weight", "U8", [n, k // 2]), (f"{p}.weight_scale", "F8_E4M3", [n, k // 16]),
            (f"{p}.weight_scale_2", "F32", []), (f"{p}.input_scale", "F32", [])]


# ---- a llama-style decoder with a pluggable Linear format ------------------------------------------

def _llama(linear, H=128, I=256, L=2, heads=4, kv_heads=2, V=512, kv_scales=None):
    hd = H // heads
    t = [("model.embed_tokens.weight", "BF16", [V, H])]
    for i in range(L):
        p = f"model.layers.{i}"
        t += [(f"{p}.input_layernorm.weight", "BF16", [H]), (f"{p}.post_attention_layernorm.weight", "BF16", [H])]
        for name, n, k in (("q_proj", heads * hd, H), ("k_proj", kv_heads * hd, H), ("v_proj", kv_heads * hd, H),
                           ("o_proj", H, heads * hd)):
            t += linear(f"{p}.self_attn.{name}", n, k)
        for name, n, k in (("gate_proj", I, H), ("up_proj", I, H), ("down_proj", H, I)):
            t += linear(f"{p}.mlp.{name}", n, k)
        if kv_scales == "attn":  # current vLLM / compressed-tensors naming
            t += [(f"{p}.self_attn.k_scale", "F32", []), (f"{p}.self_attn.v_scale", "F32", [])]
        elif kv_scales == "proj":  # ModelOpt naming, on the projections
            t += [(f"{p}.self_attn.k_proj.k_scale", "F32", []), (f"{p}.self_attn.v_proj.v_scale", "F32", [])]
        elif kv_scales == "legacy":  # older AutoFP8 exports: one kv_scale
            t += [(f"{p}.self_attn.kv_scale", "F32", [])]
    t += [("model.norm.weight", "BF16", [H]), ("lm_head.weight", "BF16", [V, H])]
    return t


def _llama_cfg(H=128, I=256, L=2, heads=4, kv_heads=2, V=512, **extra):
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
            "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": heads,
            "num_key_value_heads": kv_heads, "vocab_size": V, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", **extra}


# ---- the fixtures -----------------------------------------------------------------------------------

def deepseek_block_fp8(folder, quantization_config=None):
    """DeepSeek-V3-style block-FP8 cast, sharded in two files with an index: MLA attention, one dense
    layer then one MoE layer (8 routed experts + 1 shared), everything Linear in E4M3 + 128x128 F32
    ``weight_scale_inv``; embedding, norms, router and lm_head BF16."""
    H, I, Ie, E, V, nh, r_q, r_kv, d_nope, d_rope, d_v = 256, 512, 128, 8, 512, 4, 128, 64, 32, 16, 32
    t = [("model.embed_tokens.weight", "BF16", [V, H])]
    for i in range(2):
        p = f"model.layers.{i}"
        t += [(f"{p}.input_layernorm.weight", "BF16", [H]), (f"{p}.post_attention_layernorm.weight", "BF16", [H])]
        a = f"{p}.self_attn"
        t += w_fp8_block(f"{a}.q_a_proj", r_q, H) + [(f"{a}.q_a_layernorm.weight", "BF16", [r_q])]
        t += w_fp8_block(f"{a}.q_b_proj", nh * (d_nope + d_rope), r_q)
        t += w_fp8_block(f"{a}.kv_a_proj_with_mqa", r_kv + d_rope, H) + [(f"{a}.kv_a_layernorm.weight", "BF16", [r_kv])]
        t += w_fp8_block(f"{a}.kv_b_proj", nh * (d_nope + d_v), r_kv) + w_fp8_block(f"{a}.o_proj", H, nh * d_v)
        if i == 0:
            for name, n, k in (("gate_proj", I, H), ("up_proj", I, H), ("down_proj", H, I)):
                t += w_fp8_block(f"{p}.mlp.{name}", n, k)
        else:
            for e in range(E):
                for name, n, k in (("gate_proj", Ie, H), ("up_proj", Ie, H), ("down_proj", H, Ie)):
                    t += w_fp8_block(f"{p}.mlp.experts.{e}.{name}", n, k)
            for name, n, k in (("gate_proj", Ie, H), ("up_proj", Ie, H), ("down_proj", H, Ie)):
                t += w_fp8_block(f"{p}.mlp.shared_experts.{name}", n, k)
            t += [(f"{p}.mlp.gate.weight", "BF16", [E, H]), (f"{p}.mlp.gate.e_score_correction_bias", "F32", [E])]
    t += [("model.norm.weight", "BF16", [H]), ("lm_head.weight", "BF16", [V, H])]
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": H,
           "intermediate_size": I, "moe_intermediate_size": Ie, "num_hidden_layers": 2, "first_k_dense_replace": 1,
           "n_routed_experts": E, "n_shared_experts": 1, "num_experts_per_tok": 2, "num_attention_heads": nh,
           "num_key_value_heads": nh, "q_lora_rank": r_q, "kv_lora_rank": r_kv, "qk_nope_head_dim": d_nope,
           "qk_rope_head_dim": d_rope, "v_head_dim": d_v, "vocab_size": V, "tie_word_embeddings": False,
           "quantization_config": quantization_config or {"activation_scheme": "dynamic", "fmt": "e4m3",
                                                          "quant_method": "fp8", "weight_block_size": [128, 128]}}
    return _write_checkpoint(Path(folder), t, cfg, shards=2)


def minimax_mxfp8(folder, quantization_config=None):
    """MXFP8 release in the MiniMax style (Mixtral-like ``block_sparse_moe.experts.E.w1/w2/w3``): E4M3
    elements with a U8 (E8M0) scale per 32 values, [rows, cols/32], on every Linear. The label is
    ASSUMED (we hold no copy of the real config): quant_method "mxfp8"."""
    H, Ie, E, V, heads, kvh = 128, 128, 8, 512, 4, 2
    hd = H // heads
    t = [("model.embed_tokens.weight", "BF16", [V, H])]
    for i in range(2):
        p = f"model.layers.{i}"
        t += [(f"{p}.input_layernorm.weight", "BF16", [H]), (f"{p}.post_attention_layernorm.weight", "BF16", [H])]
        for name, n, k in (("q_proj", heads * hd, H), ("k_proj", kvh * hd, H), ("v_proj", kvh * hd, H),
                           ("o_proj", H, heads * hd)):
            t += w_mxfp8(f"{p}.self_attn.{name}", n, k)
        for e in range(E):
            for name, n, k in (("w1", Ie, H), ("w3", Ie, H), ("w2", H, Ie)):
                t += w_mxfp8(f"{p}.block_sparse_moe.experts.{e}.{name}", n, k)
        t += [(f"{p}.block_sparse_moe.gate.weight", "BF16", [E, H])]
    t += [("model.norm.weight", "BF16", [H]), ("lm_head.weight", "BF16", [V, H])]
    cfg = {"architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2", "hidden_size": H,
           "intermediate_size": Ie, "num_hidden_layers": 2, "num_attention_heads": heads, "num_key_value_heads": kvh,
           "num_local_experts": E, "num_experts_per_tok": 2, "vocab_size": V,
           "quantization_config": quantization_config or {"quant_method": "mxfp8", "fmt": "e4m3",
                                                          "scale_fmt": "ue8m0", "weight_block_size": [1, 32]}}
    return _write_checkpoint(Path(folder), t, cfg)


def _gptoss(folder, experts, quantization_config, attn):
    H, I, E, V, heads, kvh, hd = 64, 64, 8, 256, 4, 2, 16
    t = [("model.embed_tokens.weight", "BF16", [V, H])]
    for i in range(2):
        p = f"model.layers.{i}"
        t += [(f"{p}.input_layernorm.weight", "BF16", [H]), (f"{p}.post_attention_layernorm.weight", "BF16", [H])]
        for name, n, k in (("q_proj", heads * hd, H), ("k_proj", kvh * hd, H), ("v_proj", kvh * hd, H),
                           ("o_proj", H, heads * hd)):
            t += attn(f"{p}.self_attn.{name}", n, k) + [(f"{p}.self_attn.{name}.bias", "BF16", [n])]
        t += [(f"{p}.self_attn.sinks", "BF16", [heads])]
        t += [(f"{p}.mlp.router.weight", "BF16", [E, H]), (f"{p}.mlp.router.bias", "BF16", [E])]
        t += experts(f"{p}.mlp.experts", E, H, I)
    t += [("model.norm.weight", "BF16", [H]), ("lm_head.weight", "BF16", [V, H])]
    cfg = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": H, "intermediate_size": I,
           "num_hidden_layers": 2, "num_attention_heads": heads, "num_key_value_heads": kvh, "head_dim": hd,
           "num_local_experts": E, "num_experts_per_tok": 2, "vocab_size": V, "tie_word_embeddings": False,
           "attention_bias": True, "quantization_config": quantization_config}
    return _write_checkpoint(Path(folder), t, cfg)


def gptoss_fp8_bf16_experts(folder, quantization_config=None):
    """gpt-oss "FP8" whose recipe targeted Linear layers: attention E4M3 (per-channel scales), the
    fused 3-D experts ``mlp.experts.gate_up_proj`` [E, H, 2I] / ``down_proj`` [E, I, H] still BF16."""
    def experts(p, E, H, I):
        return [(f"{p}.gate_up_proj", "BF16", [E, H, 2 * I]), (f"{p}.gate_up_proj_bias", "BF16", [E, 2 * I]),
                (f"{p}.down_proj", "BF16", [E, I, H]), (f"{p}.down_proj_bias", "BF16", [E, H])]
    q = quantization_config or {
        "quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
            "num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True, "dynamic": False},
            "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}}},
        "ignore": ["lm_head", "re:.*router"]}
    return _gptoss(folder, experts, q, w_fp8_channel)


def gptoss_mxfp4(folder, quantization_config=None):
    """gpt-oss as released: experts MXFP4 (``_blocks`` U8 [E, N, K/32, 16] + ``_scales`` U8 [E, N, K/32]),
    attention, router and embeddings BF16."""
    def experts(p, E, H, I):
        return [(f"{p}.gate_up_proj_blocks", "U8", [E, 2 * I, H // 32, 16]),
                (f"{p}.gate_up_proj_scales", "U8", [E, 2 * I, H // 32]),
                (f"{p}.gate_up_proj_bias", "BF16", [E, 2 * I]),
                (f"{p}.down_proj_blocks", "U8", [E, H, I // 32, 16]), (f"{p}.down_proj_scales", "U8", [E, H, I // 32]),
                (f"{p}.down_proj_bias", "BF16", [E, H])]
    q = quantization_config or {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    return _gptoss(folder, experts, q, w_bf16)


def fp8_per_tensor(folder, quantization_config=None, kv_scales="attn"):
    """Llama FP8 export with one F32 ``weight_scale`` and a static ``input_scale`` per Linear and
    per-layer K/V scales (``kv_scales``: "attn", "proj", "legacy" or None)."""
    q = quantization_config or {"quant_method": "fp8", "activation_scheme": "static", "ignored_layers": ["lm_head"]}
    return _write_checkpoint(Path(folder), _llama(w_fp8_tensor, kv_scales=kv_scales),
                             _llama_cfg(quantization_config=q))


def nvfp4_compressed_tensors(folder, quantization_config=None):
    """Llama NVFP4 in compressed-tensors naming: ``weight_packed`` U8 [N, K/2], ``weight_scale`` E4M3
    [N, K/16], ``weight_global_scale`` F32 [1], ``input_global_scale`` F32 [1]."""
    grp = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": True}
    q = quantization_config or {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
                                "config_groups": {"group_0": {"targets": ["Linear"], "weights": grp,
                                                              "input_activations": {**grp, "dynamic": "local"}}},
                                "ignore": ["lm_head"]}
    return _write_checkpoint(Path(folder), _llama(w_nvfp4_ct), _llama_cfg(quantization_config=q))


def nvfp4_modelopt(folder, quantization_config=None):
    """Llama NVFP4 from ModelOpt: ``weight`` U8, ``weight_scale`` E4M3, ``weight_scale_2`` F32 scalar,
    ``input_scale``; FP8 KV scales on k_proj/v_proj; label in both config.json and hf_quant_config.json."""
    quant = {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16, "exclude_modules": ["lm_head"]}
    q = quantization_config or {"quant_method": "modelopt", **quant}
    hf_quant = {"producer": {"name": "modelopt", "version": "0.29.0"}, "quantization": quant}
    return _write_checkpoint(Path(folder), _llama(w_nvfp4_modelopt, kv_scales="proj"),
                             _llama_cfg(quantization_config=q), extra_json={"hf_quant_config.json": hf_quant})


def bf16_plain(folder, quantization_config=None):
    """A plain BF16 llama: no label, no scales."""
    cfg = _llama_cfg() if quantization_config is None else _llama_cfg(quantization_config=quantization_config)
    return _write_checkpoint(Path(folder), _llama(w_bf16), cfg)


FIXTURES = {f.__name__: f for f in (deepseek_block_fp8, minimax_mxfp8, gptoss_fp8_bf16_experts, gptoss_mxfp4,
                                    fp8_per_tensor, nvfp4_compressed_tensors, nvfp4_modelopt, bf16_plain)}


def make_fixture(name: str, root, **kw) -> Path:
    """Write fixture ``name`` into ``root/name`` and return that folder."""
    if name not in FIXTURES:
        raise ValueError(f"unknown fixture {name!r}; valid: {', '.join(FIXTURES)}")
    return FIXTURES[name](Path(root) / name, **kw)


def make_all(root) -> dict:
    return {name: make_fixture(name, root) for name in FIXTURES}
