"""Fixtures for the exporter and the auditor: a tiny Llama, real published quantization labels, and
checkpoints the lab exported itself.

    >>> m = tiny_model()                                   # 2-layer random Llama, float32, 0.49M parameters
    >>> paths = make_all(tmp_path)   # {"ct_fp8_static_phi3": Path, "exported_nvfp4_ct": Path, ...}

Real labels (`REAL_LABELS`): the `quantization_config` / `hf_quant_config.json` text of published checkpoints,
copied field for field (key order kept) from the pages cited in `source`. We hold none of their weights:
`real_label_checkpoint` writes a tiny checkpoint whose tensor names, dtypes and shapes follow the layout the
label describes (zero payload, via fp8lab.audit_fixtures), with that real label beside it. Where a tensor's
dtype is not visible from the label it is marked ASSUMED.

Exported checkpoints (`exported_checkpoint`): `fp8lab.export` run on `tiny_model()` -- real bytes, real
scales, the layout vLLM reads -- so the auditor's tests see a checkpoint nobody hand-wrote.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from fp8lab import audit_fixtures as af
from fp8lab.tiny_llama import TINY, tiny_model  # re-exported: the fixtures' model

__all__ = ["TINY", "tiny_model", "REAL_LABELS", "real_label_checkpoint", "exported_checkpoint", "make_all"]


# ---- real labels -----------------------------------------------------------------------------------------
REAL_LABELS = {
    # llm-compressor FP8 W8A8, static per-tensor weights and inputs. The block below is the removed
    # "compression_config" of that commit, which the same commit renamed to "quantization_config".
    "ct_fp8_static_phi3": {
        "source": "https://huggingface.co/nm-testing/Phi-3-mini-128k-instruct-FP8/commit/"
                  "c29ffa78bcfa555846756662af81ccaee06b2743 (config.json)",
        "model_type": "phi3",
        "file": "config.json",
        "label": {
            "config_groups": {"group_0": {
                "input_activations": {"block_structure": None, "dynamic": False, "group_size": None,
                                      "num_bits": 8, "observer": "minmax", "observer_kwargs": {},
                                      "strategy": "tensor", "symmetric": True, "type": "float"},
                "output_activations": None,
                "targets": ["Linear"],
                "weights": {"block_structure": None, "dynamic": False, "group_size": None, "num_bits": 8,
                            "observer": "minmax", "observer_kwargs": {}, "strategy": "tensor",
                            "symmetric": True, "type": "float"}}},
            "format": "naive-quantized",
            "global_compression_ratio": 1.246153835878366,
            "ignore": ["lm_head"],
            "kv_cache_scheme": None,
            "quant_method": "compressed-tensors",
            "quantization_status": "frozen"},
    },
    # NVFP4 W4A4 in compressed-tensors format (written by auto-round, "provider" says so), from the
    # checkpoint's quantization_config.json.
    "ct_nvfp4_devstral": {
        "source": "https://huggingface.co/BrainForge/Devstral-2-123B-Instruct-2512-NVFP4/blob/main/"
                  "quantization_config.json",
        "model_type": "mistral",
        "file": "config.json",
        "label": {
            "config_groups": {"group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 4, "type": "float", "symmetric": True, "group_size": 16,
                            "strategy": "tensor_group", "block_structure": None, "dynamic": False,
                            "actorder": None, "scale_dtype": "torch.float8_e4m3fn", "zp_dtype": None,
                            "observer": "static_minmax", "observer_kwargs": {}},
                "input_activations": {"num_bits": 4, "type": "float", "symmetric": True, "group_size": 16,
                                      "strategy": "tensor_group", "block_structure": None, "dynamic": "local",
                                      "actorder": None, "scale_dtype": "torch.float8_e4m3fn", "zp_dtype": None,
                                      "observer": "static_minmax", "observer_kwargs": {}},
                "output_activations": None,
                "format": None}},
            "quant_method": "compressed-tensors",
            "kv_cache_scheme": None,
            "format": "nvfp4-pack-quantized",
            "quantization_status": "compressed",
            "global_compression_ratio": None,
            "ignore": [],
            "provider": "auto-round"},
    },
    # ModelOpt 0.41.0 NVFP4 export, hf_quant_config.json
    "modelopt_nvfp4_behemoth": {
        "source": "https://huggingface.co/TheHouseOfTheDude/Behemoth-R1-V2_ModelOpt-NVFP4/blob/main/"
                  "hf_quant_config.json",
        "model_type": "mistral",
        "file": "hf_quant_config.json",
        "label": {"producer": {"name": "modelopt", "version": "0.41.0"},
                  "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                                   "exclude_modules": ["lm_head"]}},
    },
    # ModelOpt NVFP4 with an FP8 KV cache, hf_quant_config.json
    "modelopt_nvfp4_fp8kv_cortexlm": {
        "source": "https://huggingface.co/CortexLM/test/blob/main/hf_quant_config.json",
        "model_type": "llama",
        "file": "hf_quant_config.json",
        "label": {"producer": {"name": "modelopt", "version": "0.0.1.dev1+g5dc17dfd1.d20260407"},
                  "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
                                   "exclude_modules": ["lm_head"]}},
    },
}


def _decoder(linear, names, H=128, I=256, L=2, kv=None):
    """Tensors of a small decoder whose Linears are written by `linear(prefix, n, k)`."""
    t = [("model.embed_tokens.weight", "BF16", [512, H])]
    for i in range(L):
        p = f"model.layers.{i}"
        t += [(f"{p}.input_layernorm.weight", "BF16", [H]), (f"{p}.post_attention_layernorm.weight", "BF16", [H])]
        for name, n, k in names(H, I):
            t += linear(f"{p}.{name}", n, k)
        if kv == "attn":
            t += [(f"{p}.self_attn.k_scale", "F32", []), (f"{p}.self_attn.v_scale", "F32", [])]
        elif kv == "proj":
            t += [(f"{p}.self_attn.k_proj.k_scale", "F32", []), (f"{p}.self_attn.v_proj.v_scale", "F32", [])]
    return t + [("model.norm.weight", "BF16", [H]), ("lm_head.weight", "BF16", [512, H])]


def _llama_names(H, I):
    return [("self_attn.q_proj", H, H), ("self_attn.k_proj", H // 2, H), ("self_attn.v_proj", H // 2, H),
            ("self_attn.o_proj", H, H), ("mlp.gate_proj", I, H), ("mlp.up_proj", I, H), ("mlp.down_proj", H, I)]


def _phi3_names(H, I):  # Phi-3 fuses q/k/v and gate/up
    return [("self_attn.qkv_proj", 3 * H, H), ("self_attn.o_proj", H, H), ("mlp.gate_up_proj", 2 * I, H),
            ("mlp.down_proj", H, I)]


def _ct_nvfp4_w4a4(p, n, k):
    # weight_packed / weight_scale / weight_global_scale + the static input_global_scale of W4A4
    return af.w_nvfp4_ct(p, n, k)


def _fp8_static(p, n, k):
    # ASSUMED: per-tensor scales stored as F32 [1] (the dtype is not visible from the label)
    return [(f"{p}.weight", "F8_E4M3", [n, k]), (f"{p}.weight_scale", "F32", [1]), (f"{p}.input_scale", "F32", [1])]


def real_label_checkpoint(name: str, root) -> Path:
    """Write a tiny checkpoint carrying the real label `name` (see REAL_LABELS) into root/name."""
    if name not in REAL_LABELS:
        raise ValueError(f"unknown real label {name!r}; valid: {', '.join(REAL_LABELS)}")
    spec = REAL_LABELS[name]
    folder = Path(root) / name
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": spec["model_type"], "hidden_size": 128,
           "num_hidden_layers": 2, "vocab_size": 512, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    if name == "ct_fp8_static_phi3":
        tensors = _decoder(_fp8_static, _phi3_names)
    elif name == "ct_nvfp4_devstral":
        tensors = _decoder(_ct_nvfp4_w4a4, _llama_names)
    else:
        tensors = _decoder(af.w_nvfp4_modelopt, _llama_names,
                           kv="proj" if spec["label"]["quantization"]["kv_cache_quant_algo"] else None)
    if spec["file"] == "config.json":
        cfg["quantization_config"] = spec["label"]
    else:
        (folder / "hf_quant_config.json").write_text(json.dumps(spec["label"], indent=1))
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    af.write_safetensors(folder / "model.safetensors", tensors)
    return folder


def exported_checkpoint(root, recipe: str = "nvfp4-w", fmt: str = "compressed-tensors", seed: int = 0) -> Path:
    """`fp8lab.export` of `tiny_model(seed)` with `recipe` in `fmt`, written to root/<recipe>-<fmt>."""
    from fp8lab.export import export_model

    calib = torch.randint(0, TINY["vocab_size"], (1, 256), generator=torch.Generator().manual_seed(seed))
    return export_model(tiny_model(seed), recipe, Path(root) / f"{recipe}-{fmt}", fmt, calib_ids=calib,
                        force=True, source="random 2-layer Llama (fp8lab.export_fixtures.tiny_model)",
                        model_note="random weights, float32", command="fp8lab.export_fixtures.exported_checkpoint")


def make_all(root) -> dict:
    """Every real-label checkpoint, the two exported NVFP4 checkpoints and an exported KV-cache-only one
    (compressed-tensors kv_cache_scheme, calibrated k_scale/v_scale): {name: folder}."""
    out = {n: real_label_checkpoint(n, root) for n in REAL_LABELS}
    out["exported_nvfp4_ct"] = exported_checkpoint(root, "nvfp4-w", "compressed-tensors")
    out["exported_nvfp4_modelopt"] = exported_checkpoint(root, "nvfp4-w", "modelopt")
    out["exported_kv_cal256_ct"] = exported_checkpoint(root, "e4m3-kv-cal256", "compressed-tensors")
    return out
