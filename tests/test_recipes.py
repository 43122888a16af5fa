"""Recipes on a tiny random Llama (no download): apply/remove is lossless, every slot really quantizes
what it claims to, and the KV hook sees keys AFTER RoPE."""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from fp8lab import recipes as R
from fp8lab.scaling import QuantSpec, fake_quant  # noqa: F401 (R.QuantSpec is the same class)


def tiny_llama(attn="sdpa", tie=True, seed=0):
    # hidden 128 / intermediate 384 so that 128x128 blocks, 1x128 groups, 16- and 32-blocks all fit exactly
    cfg = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=128,
                      tie_word_embeddings=tie, attn_implementation=attn)
    torch.manual_seed(seed)
    m = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():   # random init is ~N(0, 0.02); spread the weights so E4M3 without scale flushes some
        for p in m.parameters():
            if p.dim() == 2:
                p.mul_(torch.logspace(-1.5, 0.5, p.shape[1])[None, :])
    return m


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(1))


def _hooks(m):
    return sum(len(x._forward_pre_hooks) + len(x._forward_hooks) for x in m.modules())


@pytest.mark.parametrize("name", list(R.RECIPES))
def test_apply_then_remove_is_bit_identical(model, ids, name):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    impl, n_hooks = model.config._attn_implementation, _hooks(model)
    with torch.no_grad():
        ref = model(ids).logits
        with R.applied(model, name):
            q = model(ids).logits
        after = model(ids).logits
    sd = model.state_dict()
    assert sd.keys() == before.keys()
    for k in before:
        assert torch.equal(sd[k], before[k]), k
    assert torch.equal(after, ref)
    assert model.lm_head.weight is model.model.embed_tokens.weight     # still tied
    assert model.config._attn_implementation == impl
    assert _hooks(model) == n_hooks
    assert not any(hasattr(m, "_fp8lab_kv") for m in model.modules())
    if name == "baseline" or name.startswith("nvfp4-kv-hp"):   # -hpN keeps the first/last N: all 2 layers here
        assert torch.equal(q, ref)
    else:
        assert not torch.equal(q, ref), f"{name} changed nothing"


def test_weight_slot_quantizes_every_linear_but_lm_head(model):
    orig = {n: m.weight.detach().clone() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    spec = R.get_recipe("e4m3-w").weight
    with R.applied(model, "e4m3-w"):
        for n, m in model.named_modules():
            if not isinstance(m, torch.nn.Linear):
                continue
            if n == "lm_head":
                assert torch.equal(m.weight, orig[n])
            else:
                assert torch.equal(m.weight, fake_quant(orig[n], spec)), n
        assert torch.equal(model.model.embed_tokens.weight, orig["lm_head"])


def test_include_lm_head_unties_only_the_head():
    m = tiny_llama()
    emb = m.model.embed_tokens.weight.detach().clone()
    r = R.Recipe("t", "lm_head too", weight=QuantSpec("e4m3", "tensor"), include_lm_head=True)
    with R.applied(m, r):
        assert torch.equal(m.lm_head.weight, fake_quant(emb, r.weight))
        assert torch.equal(m.model.embed_tokens.weight, emb)      # the embedding table is untouched
    assert m.lm_head.weight is m.model.embed_tokens.weight


@pytest.mark.parametrize("name", ["e4m3-wa", "w8a8-block", "e4m3-wa-noscale", "bf16"])
def test_act_slot_quantizes_linear_inputs(model, ids, name):
    recipe = R.get_recipe(name)
    lin = model.model.layers[1].mlp.down_proj
    raw, seen = [], []
    h1 = lin.register_forward_pre_hook(lambda mod, a: raw.append(a[0].detach().clone()))   # runs first
    with R.applied(model, name):
        h2 = lin.register_forward_hook(lambda mod, a, out: seen.append(a[0].detach().clone()))
        with torch.no_grad():
            model(ids)
        h2.remove()
    h1.remove()
    assert len(raw) == len(seen) == 1
    assert torch.equal(seen[0], R._quantizer(recipe.act)(raw[0]))
    assert not torch.equal(seen[0], raw[0])


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("name", ["e4m3-kv", "e4m3-kv-perchannel", "e5m2-kv"])
def test_kv_hook_quantizes_keys_after_rope(attn, name, ids):
    """The key attention reads equals fake_quant(rope(k_proj(x))), not rope(fake_quant(k_proj(x)))."""
    m = tiny_llama(attn)
    recipe = R.get_recipe(name)
    attn0 = m.model.layers[0].self_attn
    kp, vp = [], []
    hk = attn0.k_proj.register_forward_hook(lambda mod, a, out: kp.append(out.detach().clone()))
    hv = attn0.v_proj.register_forward_hook(lambda mod, a, out: vp.append(out.detach().clone()))
    R.apply_recipe(m, recipe)
    try:
        attn0._fp8lab_kv["capture"] = cap = []
        with torch.no_grad():
            m(ids)
    finally:
        R.remove_recipe(m)
        hk.remove()
        hv.remove()
    B, S = ids.shape
    k = kp[0].view(B, S, -1, 32).transpose(1, 2)         # [B, kv_heads, S, head_dim], before RoPE
    v = vp[0].view(B, S, -1, 32).transpose(1, 2)
    pos = torch.arange(S)[None].expand(B, S)
    cos, sin = m.model.rotary_emb(v, pos)
    _, k_rope = apply_rotary_pos_emb(k, k, cos, sin)
    seen_k, seen_v = cap[0]
    assert torch.equal(seen_k, R.kv_fake_quant(k_rope, recipe.key))
    _, rope_of_q = apply_rotary_pos_emb(k, R.kv_fake_quant(k, recipe.key), cos, sin)
    assert not torch.equal(seen_k, rope_of_q)            # quantizing before RoPE would give this instead
    assert not torch.equal(seen_k, k_rope)               # and it is quantized
    assert torch.equal(seen_v, R.kv_fake_quant(v, recipe.value))


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_kv_wrapper_is_transparent_when_it_quantizes_nothing(attn):
    """The wrapper (and the mask built under its name) changes nothing by itself, padding included."""
    m = tiny_llama(attn)
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, :7] = 0                                       # left padding on the second row
    with torch.no_grad():
        ref = m(ids, attention_mask=mask).logits
        R.apply_recipe(m, "e4m3-kv")
        try:
            for mod in m.modules():
                if hasattr(mod, "_fp8lab_kv"):
                    mod._fp8lab_kv.update(key=None, value=None)
            out = m(ids, attention_mask=mask).logits
        finally:
            R.remove_recipe(m)
    assert torch.equal(out, ref)


@pytest.mark.parametrize("outlier,per_channel_wins", [(200.0, False), (1e5, True)])
def test_kv_per_channel_vs_per_tensor_on_an_outlier_channel(outlier, per_channel_wins):
    """E4M3 is floating point: its relative error does not depend on the scale until values drop below the
    normal range (2**-6 of the scaled max / 448). A 200x outlier channel costs the other channels nothing;
    a 1e5x one pushes them into subnormals, and only a per-channel scale rescues them."""
    g = torch.Generator().manual_seed(0)
    k = torch.randn(1, 2, 64, 32, generator=g)
    k[:, 0, :, 5] *= outlier
    normal = torch.ones_like(k, dtype=torch.bool)
    normal[:, 0, :, 5] = False
    rel = {}
    for name in ("e4m3-kv", "e4m3-kv-perchannel"):
        q = R.kv_fake_quant(k, R.get_recipe(name).key)
        rel[name] = float(((q - k)[normal]).abs().mean() / k[normal].abs().mean())
    if per_channel_wins:
        assert rel["e4m3-kv-perchannel"] < 0.2 * rel["e4m3-kv"]
    else:
        assert rel["e4m3-kv-perchannel"] == pytest.approx(rel["e4m3-kv"], rel=0.25)


def test_unknown_recipe_lists_the_valid_names():
    with pytest.raises(R.RecipeError, match="valid: baseline, bf16, e4m3-w"):
        R.get_recipe("e4m3-everything")


def test_double_apply_is_refused(model):
    with R.applied(model, "e4m3-w"):
        with pytest.raises(R.RecipeError, match="already applied"):
            R.apply_recipe(model, "e4m3-wa")


def test_list_recipes_has_a_line_per_recipe():
    lines = R.list_recipes().splitlines()
    assert [l.split()[0] for l in lines] == list(R.RECIPES)
    assert set(R.SEED003_RECIPES) <= set(R.RECIPES)
    for line, r in zip(lines, R.RECIPES.values()):      # causal or ORACLE, then the reason in brackets
        assert line.split()[1] == ("causal" if r.causal else "ORACLE") and line.endswith(f"[{r.why}]")


# ---- causal or oracle ----------------------------------------------------------------------------------
ORACLES = {"e4m3-wa", "e4m3-wakv", "e4m3-kv", "e4m3-kv-perchannel", "e5m2-kv"}


def test_every_recipe_says_whether_it_is_causal_and_why():
    for r in R.RECIPES.values():
        assert isinstance(r.causal, bool) and r.why, r.name
    assert {n for n, r in R.RECIPES.items() if not r.causal} == ORACLES
    assert all(r.why.startswith("oracle:") and "future tokens" in r.why for n, r in R.RECIPES.items() if n in ORACLES)


def test_every_oracle_has_a_causal_counterpart():
    assert set(R.CAUSAL_COUNTERPART) == ORACLES
    for oracle, causal in R.CAUSAL_COUNTERPART.items():
        assert R.get_recipe(causal).causal, causal


def _dynamic(recipe):
    """Recipes with a scale computed during the forward (act / KV QuantSpec slots): the ones that can leak."""
    return any(isinstance(s, R.QuantSpec) for s in (recipe.act, recipe.key, recipe.value))


@pytest.mark.parametrize("name", ["e4m3-w"] + [n for n, r in R.RECIPES.items() if _dynamic(r)])
def test_causal_means_the_future_cannot_change_the_past(model, name):
    """The flag, checked on the model: with a causal recipe the logits of positions < 30 do not move when
    tokens 30.. change; with an oracle they do (some scale saw the new future tokens). Weight-only recipes
    are causal by construction (one stands for them); calibrated KV recipes are left out: their scales freeze
    after the first 256 tokens they see, beyond this tiny model's 128-token context."""
    a = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(5))
    b = a.clone()
    b[0, 30:] = torch.randint(0, 256, (10,), generator=torch.Generator().manual_seed(6))
    with R.applied(model, name), torch.no_grad():
        la, lb = model(a).logits[0, :30], model(b).logits[0, :30]
    assert torch.equal(la, lb) == R.get_recipe(name).causal


def test_per_token_kv_is_the_calibration_modules_dynamic_reference():
    from fp8lab.calibration import dynamic_fake_quant
    k = torch.randn(2, 3, 17, 32, generator=torch.Generator().manual_seed(0)) * 5
    assert torch.equal(R.kv_fake_quant(k, R.get_recipe("e4m3-kv-tok").key), dynamic_fake_quant(k, "e4m3"))


def test_recipe_formats_name_what_is_stored():
    assert R.recipe_formats("nvfp4-w") == ["nvfp4"] and R.recipe_formats("mxfp4-w") == ["mxfp4"]
    assert R.recipe_formats("e4m3-wakv-tok") == ["e4m3"] and R.recipe_formats("baseline") == []
    assert R.recipe_formats("e4m3-kv-cal256") == ["e4m3"]
