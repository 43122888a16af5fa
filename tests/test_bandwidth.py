"""fp8lab.bandwidth and fp8lab.gpus: parameter counts against published totals and against
transformers itself, seed 003's Llama-3-8B table, seed 000's 122B claim, the roofline, the CLI."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fp8lab import bandwidth as bw
from fp8lab.gpus import get_gpu

ROOT = Path(__file__).resolve().parents[1]
LLAMA3 = ROOT / "tests" / "data" / "llama3_8b_config.json"
SMOL = ROOT / "tests" / "data" / "smollm2_135m_config.json"


def dense(mt, H, I, L, nh, nkv, V, **kw):
    return dict(model_type=mt, hidden_size=H, intermediate_size=I, num_hidden_layers=L,
                num_attention_heads=nh, num_key_value_heads=nkv, vocab_size=V, **kw)


# Public configs (values from each model's config.json) and the totals their model cards publish.
PUBLISHED = [
    # Llama-3-8B: GQA 32/8, untied 128256-token vocabulary; "8.03B"
    ("llama3_8b", str(LLAMA3), 8.03e9, None),
    # Mistral-7B-v0.1: GQA, sliding window (not modelled: only changes KV, not params); "7.24B"
    ("mistral_7b", dense("mistral", 4096, 14336, 32, 32, 8, 32000, tie_word_embeddings=False,
                         sliding_window=4096), 7.24e9, None),
    # Qwen2-7B: q/k/v biases without attention_bias in the config, kv heads 4; "7.62B"
    ("qwen2_7b", dense("qwen2", 3584, 18944, 28, 28, 4, 152064, tie_word_embeddings=False), 7.62e9, None),
    # Gemma-7B: head_dim 256 given (16 x 256 != hidden 3072), tie absent -> tied for gemma; "8.54B"
    ("gemma_7b", dense("gemma", 3072, 24576, 28, 16, 16, 256000, head_dim=256), 8.54e9, None),
    # SmolLM2-135M: tied embeddings, 9 heads / 3 kv heads; "135M" (134.5M)
    ("smollm2_135m", str(SMOL), 134.5e6, None),
    # Mixtral-8x7B: 8 experts top-2 ("num_local_experts"); 46.7B total, 12.9B active
    ("mixtral_8x7b", dense("mixtral", 4096, 14336, 32, 32, 8, 32000, num_local_experts=8,
                           num_experts_per_tok=2, tie_word_embeddings=False), 46.7e9, 12.9e9),
    # Qwen1.5-MoE-A2.7B: 60 experts top-4 + one shared expert of 5632; 14.3B total, 2.7B active
    ("qwen15_moe", dense("qwen2_moe", 2048, 5632, 24, 16, 16, 151936, moe_intermediate_size=1408,
                         shared_expert_intermediate_size=5632, num_experts=60, num_experts_per_tok=4,
                         tie_word_embeddings=False), 14.3e9, 2.7e9),
    # DeepSeek-V3: MLA, 3 dense + 58 MoE layers, 256 routed top-8 + 1 shared; 671B total, 37B active
    # (without the 14B multi-token-prediction module, which HF does not load)
    ("deepseek_v3", dense("deepseek_v3", 7168, 18432, 61, 128, 128, 129280, moe_intermediate_size=2048,
                          first_k_dense_replace=3, moe_layer_freq=1, n_routed_experts=256, n_shared_experts=1,
                          num_experts_per_tok=8, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                          qk_rope_head_dim=64, v_head_dim=128, tie_word_embeddings=False), 671e9, 37e9),
]


@pytest.mark.parametrize("name,config,total,active", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_param_counts_match_published_totals(name, config, total, active):
    p = bw.param_counts(config)
    # published totals carry 3 significant figures: allow half a unit in the last place
    assert abs(p["total"] - total) / total < 0.006, (p["total"], total)
    if active is not None:
        assert abs(p["active_per_token"] - active) / active < 0.02, (p["active_per_token"], active)
    else:
        assert p["active_per_token"] == p["total"]


def test_llama3_8b_exact_count():
    # 32 x (41,943,040 attention + 176,160,768 MLP + 8,192 norms) + 2 x 525,336,576 + 4,096
    assert bw.param_counts(LLAMA3)["total"] == 8_030_261_248


# Tiny configs of every architecture we claim to handle; transformers builds the real model and we
# compare its parameter count with ours (the trusted implementation).
TINY = {
    "llama": dense("llama", 64, 96, 2, 4, 2, 128, tie_word_embeddings=False),
    "mistral": dense("mistral", 64, 96, 2, 4, 2, 128, head_dim=32),          # head_dim != hidden/heads
    "qwen2": dense("qwen2", 64, 96, 2, 4, 2, 128),                            # implicit q/k/v biases
    "qwen3": dense("qwen3", 64, 96, 2, 4, 2, 128, head_dim=32),               # q_norm / k_norm
    "gemma": dense("gemma", 64, 96, 2, 4, 1, 128, head_dim=32),               # MQA, tied by default
    "gemma2": dense("gemma2", 64, 96, 2, 4, 2, 128, head_dim=32),             # 4 norms per layer
    "gemma3_text": dense("gemma3_text", 64, 96, 2, 4, 2, 128, head_dim=32),   # 4 norms + q/k norms
    "mixtral": dense("mixtral", 64, 96, 2, 4, 2, 128, num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": dense("qwen2_moe", 64, 96, 2, 4, 4, 128, moe_intermediate_size=32,   # shared expert + gate
                       shared_expert_intermediate_size=96, num_experts=4, num_experts_per_tok=2),
    "qwen3_moe": dense("qwen3_moe", 64, 96, 2, 4, 2, 128, moe_intermediate_size=32, num_experts=4,
                       num_experts_per_tok=2, head_dim=16),
    "deepseek_v3": dense("deepseek_v3", 64, 96, 3, 4, 4, 128, moe_intermediate_size=32, first_k_dense_replace=1,
                         n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, n_group=1, topk_group=1,
                         q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
                         v_head_dim=16, tie_word_embeddings=False),                 # MLA + dense first layer
    "gpt_oss": dense("gpt_oss", 64, 64, 2, 4, 2, 128, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                     tie_word_embeddings=False, attention_bias=True,              # biases, sinks, fused experts
                     layer_types=["sliding_attention", "full_attention"]),
    # hybrid: Gated DeltaNet layers + gated full attention every 4th layer, MoE with a shared expert
    "qwen3_next": dense("qwen3_next", 64, 96, 8, 4, 2, 128, head_dim=16, linear_num_key_heads=2,
                        linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
                        linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                        shared_expert_intermediate_size=48, decoder_sparse_step=2, mlp_only_layers=[3],
                        tie_word_embeddings=False),                                # + dense MLP layers
    "qwen3_5_moe_text": dense("qwen3_5_moe_text", 64, 96, 4, 4, 2, 128, head_dim=16, linear_num_key_heads=2,
                              linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
                              linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
                              moe_intermediate_size=32, shared_expert_intermediate_size=48,
                              layer_types=["linear_attention", "full_attention", "linear_attention",
                                           "full_attention"], tie_word_embeddings=False),
}


def test_param_counts_match_transformers():
    transformers = pytest.importorskip("transformers")
    import torch
    torch.set_num_threads(1)
    bad = {}
    for mt, c in TINY.items():
        cfg = transformers.AutoConfig.for_model(**c)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
        theirs = sum(p.numel() for p in model.parameters())
        ours = bw.param_counts(cfg.to_dict())["total"]
        if theirs != ours:
            bad[mt] = (ours, theirs)
    assert not bad, f"ours vs transformers: {bad}"


# ---- seed 003 §3 ------------------------------------------------------------------------------------

def test_kv_cache_arithmetic():
    # 32 layers x 2 (K, V) x 8 kv heads x 128 head_dim x 2 bytes = 131,072 B per token
    assert bw.kv_bytes_per_token(LLAMA3, "bf16") == 32 * 2 * 8 * 128 * 2 == 131_072
    assert bw.kv_cache_bytes(LLAMA3, "bf16", 32, 8192) == 131_072 * 8192 * 32 == 34_359_738_368
    assert bw.kv_cache_bytes(LLAMA3, "fp8", 32, 8192) == 17_179_869_184


def test_seed003_table_reproduced_where_it_is_right():
    rows = {r["quantity"]: r for r in bw.seed003_check(LLAMA3)}
    # weights and KV: the seed used GB = 1e9, every parameter in the format (FP8 8.0 = 8.03e9 x 1 B)
    assert rows["weights"]["match"] and rows["kv_cache"]["match"]
    assert round(rows["weights"]["ours_bf16_GB"], 2) == 16.06
    assert round(rows["weights"]["ours_fp8_GB"], 2) == 8.03
    # read per step: FP8 25.21 -> "25.2" matches; BF16 is 50.42, not 50.5: the seed added its
    # rounded 16.1 + 34.4. (It did count the whole embedding table as read: without it, 49.4.)
    r = rows["read_per_step"]
    assert round(r["ours_fp8_GB"], 1) == 25.2
    assert round(r["ours_bf16_GB"], 2) == 50.42 and r["seed_bf16_GB"] == 50.5 and not r["match"]
    assert round(16.1 + 34.4, 1) == 50.5
    rows_only = bw.bytes_per_decode_step(LLAMA3, "bf16", "bf16", 32, 8192, "all", "rows") / bw.GB
    assert round(rows_only, 1) == 49.4


def test_realistic_fp8_keeps_embeddings_bf16():
    # FP8 checkpoints keep embed_tokens / lm_head / norms in BF16: 9.08 GB, not the seed's 8.0
    linear = bw.weight_bytes(LLAMA3, "fp8_tensor", "linear")
    assert round(linear / bw.GB, 2) == 9.08
    # = 6.98e9 Linear params x 1 B + 224 F32 scales + 1.05e9 embedding/lm_head params x 2 B + norms
    assert linear == 6_979_321_856 + 224 * 4 + 2 * 1_050_673_152 + 2 * 266_240


MATRIX_BYTES = [  # one 4096 x 4096 weight
    ("bf16", 33_554_432),                              # 2 B / value
    ("fp8_tensor", 16_777_216 + 4),                    # + one F32 scale
    ("fp8_block128", 16_777_216 + 32 * 32 * 4),        # + 32 x 32 F32 block scales
    ("int8_channel", 16_777_216 + 4096 * 4),           # + one F32 scale per output row
    ("mxfp8", 16_777_216 + 4096 * 128),                # + one E8M0 byte per 32 values
    ("nvfp4", 8_388_608 + 4096 * 256 + 4),             # 2 values / byte + E4M3 per 16 + F32 global
    ("mxfp4", 8_388_608 + 4096 * 128),                 # 2 values / byte + E8M0 per 32
]


@pytest.mark.parametrize("fmt,expected", MATRIX_BYTES)
def test_matrix_bytes(fmt, expected):
    assert bw.FORMATS[fmt].matrix_bytes(4096, 4096) == expected


# ---- seed 000: "76 GB NVFP4 vs 152 GB FP8" for a 122B-class model ------------------------------------

def test_seed000_122b_claim():
    b = bw.class_size_bytes(122e9)
    assert b["fp8_tensor"] / 1e9 == pytest.approx(122.0)       # not 152
    assert b["nvfp4"] / 1e9 == pytest.approx(68.625)           # 122e9 x (0.5 + 1/16); not 76
    assert b["fp8_tensor"] / b["nvfp4"] == pytest.approx(1 / 0.5625)  # 1.78x, not 2x
    # 76 GB would need ~5.1B parameters left in BF16; the same split in FP8 weighs ~127 GB
    x = bw.implied_bf16_params(122e9, 76e9, "nvfp4")
    assert x / 1e9 == pytest.approx(5.13, abs=0.01)
    assert (2 * x + (122e9 - x) * 1.0) / 1e9 == pytest.approx(127.1, abs=0.1)
    # either way FP8 does not fit a 128 GB GB10 with room to spare; NVFP4 does
    assert b["fp8_tensor"] / 1e9 > 0.9 * get_gpu("GB10").memory_GB


# ---- MoE, roofline, compute-bound batch -------------------------------------------------------------

def test_moe_reads_distinct_experts():
    mix = PUBLISHED[5][1]
    assert bw.distinct_expert_fraction(8, 2, 1) == 0.25
    one = bw.bytes_per_decode_step(mix, "bf16", "bf16", 1, 0)
    big = bw.bytes_per_decode_step(mix, "bf16", "bf16", 64, 0)
    # batch 1 reads 2 of 8 experts; batch 64 reads all but 0.75**64 of them: every weight except
    # the 32000 - 64 embedding rows nobody looked up
    assert one < 0.35 * bw.weight_bytes(mix, "bf16")
    unread_rows = (32000 - 64) * 4096 * 2
    assert big == pytest.approx(bw.weight_bytes(mix, "bf16") - unread_rows, rel=1e-6)


def test_decode_flops_are_two_per_weight():
    # Llama-3-8B, no context: 2 x (8.03e9 - 0.525e9 input-embedding gather) FLOPs per sequence
    f = bw.decode_flops(LLAMA3, batch=1, context=0)
    assert f == 2 * (8_030_261_248 - 525_336_576 - 266_240)  # norms do no matmul


def test_compute_bound_batch():
    h200 = get_gpu("H200")
    # BF16 weights: intensity ~ batch FLOP/B, so the ridge 989.5/4.8 = 206 is crossed at batch ~207
    assert bw.compute_bound_from_batch(LLAMA3, "bf16", h200, context=0) == 207
    # at 8k context the KV cache grows with the batch: attention stays memory-bound for ever
    assert bw.compute_bound_from_batch(LLAMA3, "bf16", h200, context=8192) is None
    # NVFP4 on Hopper computes in BF16 (no FP4 units): it turns compute-bound at a smaller batch
    assert bw.compute_dtype(h200, "nvfp4") == ("bf16", 989.5)
    assert bw.compute_bound_from_batch(LLAMA3, "nvfp4", h200, context=0) < 100
    assert bw.compute_dtype(get_gpu("B200"), "nvfp4") == ("fp4", 9000.0)
    assert bw.compute_dtype(h200, "mxfp8")[0] == "bf16"         # seed 004: MXFP8 is W8A16 on Hopper
    assert bw.compute_dtype(get_gpu("H200-measured"), "fp8_block128") == ("fp8_block", 1129.4000543744182)
    # GB10: NVIDIA publishes no BF16 rate -> no answer rather than an invented one
    assert bw.compute_bound_from_batch(LLAMA3, "bf16", get_gpu("GB10"), context=0) is None


def test_prefill_is_compute_bound():
    p = bw.prefill_point(LLAMA3, "bf16", tokens=8192, gpu="H200")
    assert p["compute_bound"] and p["intensity"] > 10 * p["ridge"]


def test_analyze_ceiling_is_bandwidth_over_bytes():
    r = bw.analyze(LLAMA3, batch=32, context=8192, gpu="H200", kv_dtype="bf16")
    for f, b in r["bytes_per_decode_step"].items():
        assert r["tokens_per_s_ceiling"][f] == pytest.approx(4.8e12 / b)
        assert r["aggregate_tokens_per_s_ceiling"][f] == pytest.approx(32 * 4.8e12 / b)
    assert r["kv_cache_bytes"]["bf16"] == 34_359_738_368


def test_roofline_figure_writes_png_and_json(tmp_path):
    pts = [{"name": "gemv bf16 4096x4096", "intensity": 1.0, "tflops": 0.78}]
    fig, data = bw.roofline_figure(SMOL, measured_points=pts, batches=(1, 64), out_png=tmp_path / "r.png",
                                   out_json=tmp_path / "r.json")
    assert (tmp_path / "r.png").stat().st_size > 10_000
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["roofline"]["measured_points"] == pts
    assert {"git_commit", "date", "command", "device"} <= set(saved["provenance"])
    with pytest.raises(ValueError, match="name, intensity, tflops"):
        bw.roofline_figure(SMOL, measured_points=[{"name": "x"}])


# ---- bad input --------------------------------------------------------------------------------------

BAD_CONFIGS = [
    ({"hidden_size": 64}, "missing required field"),                            # not a decoder config
    (dense("llama", 64, 96, 2, 5, 5, 128), "not divisible"),                     # 64 / 5 heads, no head_dim
    (dense("llama", 64, 96, 2, 4, 3, 128), "not a multiple"),                    # 4 heads, 3 kv heads
    (dense("llama", 64, 96, 2, 4, 2, "128"), "positive integer"),                # vocab as a string
    (dense("llama", 64, 96, 2, 4, 2, 128, head_dim=True), "positive integer"),   # bool is not an int
    (dense("mixtral", 64, 96, 2, 4, 2, 128, num_local_experts=4), "top-k"),      # MoE without top-k
]


@pytest.mark.parametrize("cfg,msg", BAD_CONFIGS)
def test_bad_configs(cfg, msg):
    with pytest.raises(bw.ConfigError, match=msg):
        bw.model_shape(cfg)


def test_bad_files(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(bw.ConfigError, match="not valid JSON"):
        bw.load_config(tmp_path / "bad.json")
    with pytest.raises(bw.ConfigError, match="expected a JSON object"):
        bw.load_config(tmp_path / "list.json")
    with pytest.raises(bw.ConfigError, match="file not found"):
        bw.load_config(tmp_path / "missing.json")
    with pytest.raises(bw.ConfigError, match="no config.json"):
        bw.load_config(tmp_path)
    with pytest.raises(ValueError, match="batch"):
        bw.analyze(LLAMA3, batch=0)


# ---- CLI --------------------------------------------------------------------------------------------

def cli(*args, env=None):
    e = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "fp8lab.bandwidth", *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, env=e, timeout=120)


def test_cli_table_and_json():
    t = cli(LLAMA3, "--batch", "32", "--context", "8192")
    assert t.returncode == 0, t.stderr
    assert "34.36 GB" in t.stdout and "fp8_tensor" in t.stdout
    j = cli(LLAMA3, "--batch", "32", "--context", "8192", "--gpu", "h200-measured", "--json")
    assert j.returncode == 0, j.stderr
    r = json.loads(j.stdout)
    assert {"params", "weight_bytes", "kv_cache_bytes", "bytes_per_decode_step", "tokens_per_s_ceiling"} <= set(r)
    assert r["gpu"]["source"] == "measured"
    assert r["kv_cache_bytes"]["bf16"] == 34_359_738_368
    assert r["tokens_per_s_ceiling"]["bf16"] == pytest.approx(4.196927022165589e12 / r["bytes_per_decode_step"]["bf16"])


CLI_ERRORS = [
    (("tests/data/nope.json",), "file not found"),                             # missing file
    (("{bad}",), "error:"),                                                     # bad JSON (written below)
    (("{nofields}",), "missing required field"),                                # JSON without the fields
    ((str(LLAMA3), "--gpu", "A100"), "valid names: H100, H200, B200, GB10"),    # unknown GPU
    ((str(LLAMA3), "--kv-dtype", "int4"), "unknown KV-cache dtype"),            # unknown cache dtype
    (("no-such-org/no-such-model",), "hub id failed"),                          # hub id, offline
]


@pytest.mark.parametrize("args,msg", CLI_ERRORS)
def test_cli_errors(args, msg, tmp_path):
    (tmp_path / "bad.json").write_text('{"hidden_size": 4096,')
    (tmp_path / "nofields.json").write_text('{"model_type": "llama"}')
    args = [a.replace("{bad}", str(tmp_path / "bad.json")).replace("{nofields}", str(tmp_path / "nofields.json"))
            for a in args]
    r = cli(*args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and r.stderr.startswith("error:") and msg in r.stderr, r.stderr


# ---- the storage table against the one format description --------------------------------------------

def test_storage_table_matches_fp8lab_formats():
    formats = pytest.importorskip("fp8lab.formats")
    scaling = pytest.importorskip("fp8lab.scaling")
    blocks = {"nvfp4": scaling.QuantSpec("e2m1", "nvfp4").block_len,       # 16 along K
              "mxfp4": scaling.QuantSpec("e2m1", "mx").block_len,          # 32 along K
              "mxfp8": scaling.QuantSpec("e4m3", "mx").block_len,
              "fp8_block128": tuple(scaling.QuantSpec("e4m3", "block").block)}
    for name, f in bw.FORMATS.items():
        if f.element is None:
            assert name == "bf16" and f.element_bits == 16
            continue
        assert f.element_bits == formats.get(f.element).bits, name
        if f.scale != "none":
            want = 32 if f.scale_format == "f32" else formats.get(f.scale_format).bits
            assert f.scale_bits == want, name
        if name in blocks:
            b = blocks[name]
            assert (f.block == b) if isinstance(b, tuple) else (f.block == (1, b)), name
    e2m1, e4m3 = formats.get("e2m1"), formats.get("e4m3")
    assert bw.KV_DTYPES["fp8"] == e4m3.bits / 8
    assert bw.KV_DTYPES["nvfp4"] == e2m1.bits / 8 + e4m3.bits / 8 / blocks["nvfp4"]


# ---- hybrid models (Gated DeltaNet + gated attention), checked against transformers above ---------------

def test_hybrid_state_and_kv():
    c = TINY["qwen3_5_moe_text"]
    s = bw.model_shape(c)
    # 2 full-attention layers hold a KV cache; 2 linear-attention layers hold a fixed state:
    # 4 value heads x 8 x 8 (bf16, no mamba_ssm_dtype) + conv (2*16 + 32) x 3 positions, both 2 bytes
    assert s.kv_elems_per_token == 2 * 2 * 2 * 16
    assert s.state_bytes_per_seq == 2 * (4 * 8 * 8 * 2 + 64 * 3 * 2)
    step0 = bw.bytes_per_decode_step(c, "bf16", "bf16", 1, 0)
    assert bw.bytes_per_decode_step(c, "bf16", "bf16", 3, 0) > step0
    assert bw.bytes_per_decode_step(c, "bf16", "bf16", 1, 100) - step0 == pytest.approx(100 * 2 * 2 * 2 * 16 * 2)
    s32 = bw.model_shape({**c, "mamba_ssm_dtype": "float32"})
    assert s32.state_bytes_per_seq - s.state_bytes_per_seq == 2 * 4 * 8 * 8 * 2


# ---- bad configs: each reproduction the lab was handed, as a regression test ---------------------------

LLAMA_TINY = dense("llama", 64, 96, 2, 4, 2, 128, tie_word_embeddings=False)


def test_regression_num_key_value_heads_null():
    # null means "not given", as transformers reads it: MHA (was: TypeError in nh % None)
    s = bw.model_shape({**LLAMA_TINY, "num_key_value_heads": None})
    assert s.attention == "mha"
    assert bw.param_counts(s)["total"] == bw.param_counts({**LLAMA_TINY, "num_key_value_heads": 4})["total"]


@pytest.mark.parametrize("arch", ["LlamaForCausalLM", 5, {"a": 1}, [1, 2], True])
def test_regression_architectures_not_a_list_of_strings(arch):
    # a string used to give the model name "L"; an int or dict a TypeError / KeyError
    with pytest.raises(bw.ConfigError, match="'architectures' must be a list of strings"):
        bw.model_shape({**LLAMA_TINY, "architectures": arch})


@pytest.mark.parametrize("bad", [5, [[1]], ["a"], [99], [-1], {"0": 1}, [True]])
def test_regression_bad_mlp_only_layers(bad):
    moe = dense("qwen2_moe", 64, 96, 4, 4, 4, 128, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2)
    with pytest.raises(bw.ConfigError, match="mlp_only_layers"):
        bw.model_shape({**moe, "mlp_only_layers": bad})


def test_regression_deeply_nested_json(tmp_path):
    f = tmp_path / "deep.json"
    f.write_text('{"hidden_size": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(bw.ConfigError, match="nested too deeply"):
        bw.model_shape(f)
    assert main_cli(str(f)) == (2, "")


def test_regression_moe_with_a_billion_layers_is_counted_not_walked():
    # a config claiming 10**9 MoE layers used to build range(L) in memory; now it is arithmetic (and answers
    # in milliseconds), and a count beyond any model is refused with a clear error. Run in a child with a
    # 1 GB address-space limit and a timeout, so the old behaviour fails the test instead of the machine.
    code = ("import resource, time; resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30)); "
            "from fp8lab import bandwidth as bw; t = time.perf_counter(); "
            "c = dict(model_type='deepseek_v3', hidden_size=64, num_hidden_layers=10**9, num_attention_heads=4, "
            "num_key_value_heads=4, vocab_size=128, intermediate_size=96, moe_intermediate_size=32, "
            "n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=3, moe_layer_freq=2, "
            "tie_word_embeddings=False); s = bw.model_shape(c); "
            "print(s.notes[-1], round(time.perf_counter() - t, 3))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-500:]
    # layers 3..10**9-1 with i % 2 == 0: (10**9 - 4) / 2 of them
    assert "499999998 MoE layers, 500000002 dense layers" in r.stdout
    assert float(r.stdout.split()[-1]) < 1.0
    with pytest.raises(bw.ConfigError, match="beyond any model"):
        bw.model_shape({**LLAMA_TINY, "num_hidden_layers": 10**12})


@pytest.mark.parametrize("value", ["false", "true", 0, 1, "no", [], {}])
def test_regression_booleans_are_strict(value):
    # "tie_word_embeddings": "false" used to count as tied (4.76 GB instead of 5.81 GB for Llama-3-8B)
    with pytest.raises(bw.ConfigError, match="'tie_word_embeddings' must be true or false"):
        bw.model_shape({**LLAMA_TINY, "tie_word_embeddings": value})
    for key in ("attention_bias", "use_sliding_window"):
        with pytest.raises(bw.ConfigError, match=f"'{key}' must be true or false"):
            bw.model_shape({**LLAMA_TINY, "sliding_window": 16, key: value})


def test_regression_tie_false_string_never_tied():
    untied = bw.weight_bytes({**LLAMA_TINY, "tie_word_embeddings": False}, "bf16")
    tied = bw.weight_bytes({**LLAMA_TINY, "tie_word_embeddings": True}, "bf16")
    assert untied - tied == 128 * 64 * 2
    with pytest.raises(bw.ConfigError):
        bw.weight_bytes({**LLAMA_TINY, "tie_word_embeddings": "false"}, "bf16")


@pytest.mark.parametrize("field,value,msg", [
    ("hidden_size", 10**400, "beyond any model"),            # huge integers: refused, not overflowed
    ("hidden_size", 1e999, "positive integer"),              # Infinity from JSON's 1e999
    ("vocab_size", float("nan"), "positive integer"),
    ("model_type", ["llama"], "'model_type' must be a string"),
    ("text_config", [1], "'text_config' must be an object"),
    ("layer_types", ["full_attention"], "'layer_types' must list"),
    ("mamba_ssm_dtype", "float64", "mamba_ssm_dtype"),
])
def test_wrong_types_are_config_errors(field, value, msg):
    c = {**LLAMA_TINY, field: value}
    if field == "text_config":
        c.pop("hidden_size")
    if field == "mamba_ssm_dtype":
        c = {**TINY["qwen3_5_moe_text"], field: value}
    with pytest.raises(bw.ConfigError, match=msg):
        bw.model_shape(c)


@pytest.mark.parametrize("L,first,freq,step,only", [(61, 3, 1, 1, ()), (48, 0, 1, 2, (1, 3)), (10, 0, 2, 2, ()),
                                                     (7, 9, 1, 1, ()), (100, 5, 3, 4, (11, 23, 35, 47))])
def test_count_moe_layers_matches_the_walk(L, first, freq, step, only):
    walk = sum(1 for i in range(L) if i >= first and i % freq == 0 and (i + 1) % step == 0 and i not in only)
    assert bw.count_moe_layers(L, first, freq, step, only) == walk


def test_count_moe_layers_property():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=300, deadline=None, derandomize=True)
    @hypothesis.given(L=st.integers(1, 300), first=st.integers(0, 320), freq=st.integers(1, 12),
                      step=st.integers(1, 12), only=st.sets(st.integers(0, 299), max_size=8))
    def check(L, first, freq, step, only):
        only = {i for i in only if i < L}
        walk = sum(1 for i in range(L) if i >= first and i % freq == 0 and (i + 1) % step == 0 and i not in only)
        assert bw.count_moe_layers(L, first, freq, step, only) == walk

    check()


def test_fifo_config_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    r = subprocess.run([sys.executable, "-m", "fp8lab.bandwidth", str(fifo)], capture_output=True, text=True,
                       timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and "not a regular file" in r.stderr and "Traceback" not in r.stderr


# ---- the roofline writer: provenance, atomic files, committed outputs kept ----------------------------

def test_roofline_refuses_to_overwrite_committed_outputs(tmp_path):
    committed = ROOT / "outputs" / "bandwidth" / "llama3_8b" / "roofline.json"
    if not committed.exists():
        pytest.skip("no committed roofline in this checkout")
    before = committed.read_bytes()
    with pytest.raises(ValueError, match="committed result under outputs/"):
        bw.roofline_figure(SMOL, batches=(1,), out_json=committed)
    assert committed.read_bytes() == before
    fig, data = bw.roofline_figure(SMOL, batches=(1,), out_json=tmp_path / "r.json", command="test")
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["provenance"]["command"] == "test" and "dirty" in saved["provenance"]
    assert "computed_on" in saved["provenance"]
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic writer left no temporary file


def test_cli_roofline_and_compare(tmp_path):
    code, out = main_cli(str(SMOL), "--roofline", str(tmp_path / "rf"), "--compare-gpus", "H200,GB10")
    assert code == 0, out
    assert (tmp_path / "rf" / "roofline.png").stat().st_size > 10_000
    assert "spec, not measured" in out and "GB10" in out
    js = json.loads((tmp_path / "rf" / "roofline.json").read_text())
    assert js["provenance"]["command"].startswith("python -m fp8lab.bandwidth")


def test_decode_ceilings_gb10_next_to_h200():
    rows = bw.decode_ceilings(LLAMA3, gpus=("H200", "H200-measured", "GB10"), formats=("bf16", "nvfp4"))
    by = {(r["gpu"], r["format"]): r for r in rows}
    for f in ("bf16", "nvfp4"):
        assert by[("H200", f)]["bytes_per_step"] == by[("GB10", f)]["bytes_per_step"]
        assert by[("H200", f)]["tokens_per_s"] / by[("GB10", f)]["tokens_per_s"] == pytest.approx(4.8 / 0.273)
    assert by[("GB10", "bf16")]["label"] == "spec, not measured"
    assert by[("H200-measured", "bf16")]["label"] == "measured 2026-11-29 on NVIDIA H200"
    assert "spec, not measured" in bw.format_decode_ceilings(rows)


def main_cli(*argv):
    """(exit status, stdout + stderr) of bw.main in-process."""
    import contextlib
    import io
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = bw.main(list(argv))
    if code == 2:
        e = err.getvalue()
        assert e.startswith("error:") and e.count("\n") == 1 and "Traceback" not in e, e
        return code, ""
    return code, out.getvalue() + err.getvalue()


@pytest.mark.parametrize("argv", [
    ["{cfg}", "--batch", "0"], ["{cfg}", "--batch", "x"], ["{cfg}", "--context", "-1"],
    ["{cfg}", "--batch", "9" * 5000], ["{cfg}", "--gpu", "A100"], ["{cfg}", "--kv-dtype", "int4"],
    ["{cfg}", "--policy", "most"], ["{cfg}", "--embedding-read", "cols"], ["{cfg}", "--nope"], [],
    ["{cfg}", "--compare-gpus", ","], ["{cfg}", "--compare-gpus", "H200,Z"], ["{cfg}", "--roofline", ""],
    ["{cfg}", "--context", str(2**40)], ["{cfg}", "--batch", str(2**30)],
])
def test_cli_bad_arguments_one_line(argv):
    argv = [a.replace("{cfg}", str(LLAMA3)) for a in argv]
    assert main_cli(*argv)[0] == 2
