"""Perplexity scoring against transformers' own loss, and the paired bootstrap on known answers."""
import math

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from fp8lab import evaluate, stats


# ---- paired bootstrap ----------------------------------------------------------------------------------
def test_identical_inputs_give_a_zero_interval():
    rng = np.random.default_rng(0)
    nll = rng.uniform(800, 1200, 32)
    ntok = np.full(32, 511)
    assert stats.delta_with_ci(stats.ppl_delta_pct, (nll, nll, ntok)) == (0.0, 0.0, 0.0)
    a = (rng.random(200) < 0.6).astype(float)
    assert stats.delta_with_ci(stats.acc_delta_pp, (a, a)) == (0.0, 0.0, 0.0)


def test_a_shifted_sample_gives_an_interval_that_excludes_zero():
    rng = np.random.default_rng(1)
    nll_b = rng.uniform(800, 1200, 32)               # windows differ a lot from each other...
    nll_r = nll_b + rng.normal(5.0, 2.0, 32)         # ...the recipe adds ~5 nats per window, consistently
    ntok = np.full(32, 511)
    d, lo, hi = stats.delta_with_ci(stats.ppl_delta_pct, (nll_r, nll_b, ntok))
    assert 0 < lo < d < hi
    # the exact point estimate: exp(total extra NLL / total tokens) - 1
    assert d == pytest.approx((math.exp((nll_r.sum() - nll_b.sum()) / ntok.sum()) - 1) * 100)


def test_pairing_is_what_makes_the_interval_narrow():
    """Same data, unpaired resampling (independent indices) gives a far wider interval."""
    rng = np.random.default_rng(2)
    nll_b = rng.uniform(800, 1200, 32)
    nll_r = nll_b * 1.004
    ntok = np.full(32, 511)
    _, lo, hi = stats.delta_with_ci(stats.ppl_delta_pct, (nll_r, nll_b, ntok))
    idx_r, idx_b = rng.integers(0, 32, (2, 2000, 32))
    unpaired = stats.ppl_delta_pct(nll_r[idx_r], nll_b[idx_b], ntok[idx_r])
    u_lo, u_hi = np.quantile(unpaired, [0.025, 0.975])
    assert (hi - lo) < 0.1 * (u_hi - u_lo)
    assert u_lo < 0 < lo                              # unpaired cannot even see the effect


def test_accuracy_delta_is_in_points_and_its_interval_matches_a_binomial_scale():
    a_b = np.zeros(400)
    a_b[:200] = 1                                     # baseline 50 %
    a_r = a_b.copy()
    a_r[:40] = 0                                      # recipe loses 40 questions -> -10 points
    d, lo, hi = stats.delta_with_ci(stats.acc_delta_pp, (a_r, a_b))
    assert d == pytest.approx(-10.0)
    # 40 discordant pairs out of 400: sd of the delta = sqrt(0.1 * 0.9 / 400) = 1.5 points
    assert (hi - lo) == pytest.approx(2 * 1.96 * 1.5, rel=0.15)


def test_bootstrap_rejects_unpaired_lengths():
    with pytest.raises(ValueError, match="equal length"):
        stats.paired_bootstrap_ci(stats.acc_delta_pp, (np.ones(3), np.ones(4)))


def test_ppl_and_bpb():
    nll = np.array([math.log(4) * 10, math.log(4) * 10])
    assert stats.ppl(nll, np.array([10, 10])) == pytest.approx(4.0)          # 2 bits/token
    assert stats.bpb(nll, np.array([20, 20])) == pytest.approx(1.0)          # 2 bits over 2 bytes


# ---- perplexity scoring --------------------------------------------------------------------------------
def test_eval_ppl_matches_transformers_loss():
    cfg = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    torch.manual_seed(0)
    m = LlamaForCausalLM(cfg).eval()
    windows = torch.randint(0, 97, (3, 33), generator=torch.Generator().manual_seed(0))
    items = evaluate.eval_ppl(m, windows, torch.tensor([40, 41, 42]), progress=False)
    assert items.ntok.tolist() == [32, 32, 32]        # the first token of a window is not predicted
    with torch.no_grad():
        for i in range(3):
            loss = m(windows[i:i + 1], labels=windows[i:i + 1]).loss   # mean over the 32 shifted targets
            assert items.nll[i] == pytest.approx(float(loss) * 32, rel=1e-5)
    round_trip = evaluate.PplItems.from_json(items.to_json())
    assert np.array_equal(round_trip.nll, items.nll) and np.array_equal(round_trip.nbytes, items.nbytes)


def test_eval_ppl_refuses_non_finite_scores():
    class Broken(torch.nn.Module):
        def forward(self, input_ids, use_cache=False):
            out = torch.zeros(*input_ids.shape, 10)
            out[..., 0] = float("nan")
            return type("O", (), {"logits": out})()
    with pytest.raises(FloatingPointError, match="non-finite"):
        evaluate.eval_ppl(Broken(), torch.zeros(2, 5, dtype=torch.long), torch.ones(2), progress=False)


def test_unknown_mc_task_is_refused():
    with pytest.raises(ValueError, match="valid: mmlu, hellaswag, arc_easy, piqa"):
        evaluate.eval_mc(None, None, "winogrande", None)


def test_hflm_does_not_retie_a_quantized_lm_head():
    """lm-eval's HFLM calls tie_weights(); a recipe that quantizes only the head must survive it."""
    pytest.importorskip("accelerate", reason="lm-eval's HFLM (the lm-eval[hf] extra) needs accelerate")
    from tokenizers import Tokenizer, models as tm, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from fp8lab import recipes as R
    from fp8lab.scaling import QuantSpec
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, tie_word_embeddings=True)
    m = LlamaForCausalLM(cfg).eval()
    t = Tokenizer(tm.WordLevel({f"w{i}": i for i in range(63)} | {"<unk>": 63}, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=t, unk_token="<unk>", eos_token="w0")
    r = R.Recipe("head", "lm_head only", weight=QuantSpec("e4m3", "tensor"), include_lm_head=True)
    with R.applied(m, r):
        head = m.lm_head.weight
        assert head is not m.model.embed_tokens.weight
        evaluate.make_hflm(m, tok)
        assert m.lm_head.weight is head                       # still the quantized, untied head
        assert "tie_weights" not in m.__dict__
    assert m.lm_head.weight is m.model.embed_tokens.weight   # remove_recipe re-ties as before
