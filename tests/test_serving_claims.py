"""fp8lab.serving_claims: the arithmetic on small configs, the committed configs against transformers, the
table's verdicts."""

import json

import pytest

from fp8lab import bandwidth as bw
from fp8lab import serving_claims as sc
from fp8lab.gpus import get_gpu

GB10 = get_gpu("GB10")
DENSE = dict(model_type="llama", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=128, tie_word_embeddings=False)
MOE = dict(DENSE, model_type="qwen2_moe", moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
           shared_expert_intermediate_size=48)


def claim(tps, **kw):
    return {"id": "t", "seed": "x", "quote": "", "tokens_per_s": tps, "model_named": "m", "config": None,
            "relation": "test", "weights": "bf16", "kv_dtype": "bf16", **kw}


def test_ceiling_is_bandwidth_over_bytes_per_token():
    # dense llama, BF16, batch 1, empty cache: every weight except the unread embedding rows, 2 bytes each
    b = sc.verify_step_bytes(DENSE, "bf16", "bf16", 1, 0)
    assert b == bw.bytes_per_decode_step(DENSE, "bf16", "bf16", 1, 0)
    assert b == 2 * (bw.param_counts(DENSE)["total"] - 127 * 64)  # 127 of 128 embedding rows not read
    r = sc.evaluate_claim(claim(10.0), model=DENSE)
    assert r["ceiling_tok_s"] == pytest.approx(0.273e12 / b)
    assert r["verdict"] == "consistent with the ceiling" and r["gpu_label"] == "spec, not measured"
    # the KV cache at `context` lowers the second ceiling: 2 layers x 2 x 2 heads x 16 x 2 B per token
    assert r["bytes_per_token_ctx"] - r["bytes_per_token"] == 8192 * 2 * 2 * 2 * 16 * 2


def test_exceeding_claim_needs_tokens_per_read_and_acceptance():
    b1 = sc.verify_step_bytes(MOE, "bf16", "bf16", 1, 0)
    ceiling = 0.273e12 / b1
    r = sc.evaluate_claim(claim(2.5 * ceiling), model=MOE)
    assert r["verdict"] == "exceeds it: needs >= 2.50 tokens per weight read"
    assert r["tokens_per_weight_read_needed"] == pytest.approx(2.5)
    # verifying 2 tokens reads the experts of 2 tokens: more bytes than one decode step
    b2 = sc.verify_step_bytes(MOE, "bf16", "bf16", 2, 0)
    assert b2 > b1
    one = r["acceptance_needed"][1]
    assert one["tokens_per_step"] == pytest.approx(2.5 * b2 / b1)
    assert one["acceptance"] is None  # > 2 tokens per step: one draft cannot do it
    three = r["acceptance_needed"][3]
    assert sc.tokens_per_step(three["acceptance"], 3) == pytest.approx(three["tokens_per_step"], rel=1e-9)


def test_verify_bytes_read_cache_and_state_once():
    hybrid = dict(DENSE, model_type="qwen3_next", num_hidden_layers=4, head_dim=16, linear_num_key_heads=2,
                  linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8)
    s = bw.model_shape(hybrid)
    one, three = (sc.verify_step_bytes(s, "bf16", "bf16", n, 1000) for n in (1, 3))
    # three tokens of one sequence: two more embedding rows, the same cache and state
    assert three - one == 2 * 64 * 2


@pytest.mark.parametrize("tau,n,expect", [(1.0, 1, 0.0), (0.7, 2, 0.0), (1.5, 1, 0.5), (2.0, 1, 1.0),
                                          (2.01, 1, None), (1.75, 2, 0.5)])
def test_acceptance_needed(tau, n, expect):
    got = sc.acceptance_needed(tau, n)
    assert got == expect if expect is None else got == pytest.approx(expect, abs=1e-6)


def test_untestable_without_a_config():
    r = sc.evaluate_claim(claim(59.9))
    assert r["verdict"] == "untestable: no public config" and r.get("ceiling_tok_s") is None


def test_committed_configs_are_published_and_sourced():
    for name, meta in sc.CONFIGS.items():
        path = sc.config_path(name)
        cfg = json.loads(path.read_text())
        assert meta["source"].startswith("https://github.com/") and meta["upstream"].startswith("https://huggingface.co/")
        total = bw.param_counts(cfg)["total"]
        assert abs(total / meta["published_total_params"] - 1) < 0.02, (name, total)
    assert {c["config"] for c in sc.CLAIMS if c["config"]} <= set(sc.CONFIGS)


def test_committed_configs_match_transformers():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    for name in sc.CONFIGS:
        d = json.loads(sc.config_path(name).read_text())
        kw = dict(d["text_config"], tie_word_embeddings=d["tie_word_embeddings"]) if "text_config" in d else d
        cfg = transformers.AutoConfig.for_model(**kw)
        with torch.device("meta"):  # no memory: shapes only
            model = transformers.AutoModelForCausalLM.from_config(cfg)
        assert sum(p.numel() for p in model.parameters()) == bw.param_counts(d)["total"], name


def test_the_table():
    rows = {r["id"]: r for r in sc.claims_table()}
    assert len(rows) == len(sc.CLAIMS)
    q36 = rows["seed000-qwen3.6-35b-a3b-90"]
    assert q36["verdict"].startswith("exceeds it") and "closest public relative" in q36["relation"]
    assert 70 < q36["ceiling_tok_s"] < 90
    assert rows["seed002-qwen3.5-35b-131"]["verdict"].startswith("exceeds it")
    assert rows["seed002-qwen3-next-80b-104"]["verdict"] == "consistent with the ceiling"
    for k in ("seed002-marlin-mtp-59.9", "seed002-cutlass-moe-36.4", "seed002-trtllm-ceiling-29.6"):
        assert rows[k]["verdict"] == "untestable: no public config"
    text = sc.format_claims(list(rows.values()))
    assert "spec, not measured" in text and "acceptance >=" in text and "github.com/alibaba/InferSim" in text
    json.dumps(list(rows.values()))  # JSON-ready
