"""Recipes on parts of a model: `weight_map` (a weight slot per Linear, by name) and `kv_layers`."""
import pytest
import torch

from fp8lab import recipes as R
from fp8lab.scaling import QuantSpec, fake_quant
from tests.test_recipes import tiny_llama

E4 = QuantSpec("e4m3", "tensor")
NV = QuantSpec("e2m1", "nvfp4")


def _changed(model, before):
    return {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)
            and not torch.equal(m.weight, before[n])}


@pytest.fixture()
def model():
    return tiny_llama(tie=False)


def _weights(model):
    return {n: m.weight.detach().clone() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}


def test_weight_map_quantizes_only_the_matching_linears(model):
    before = _weights(model)
    r = R.Recipe("l1", "layer 1 in E4M3", weight_map=((r"\.layers\.1\.", E4),))
    with R.applied(model, r):
        changed = _changed(model, before)
        q = model.model.layers[1].mlp.down_proj.weight
        assert torch.equal(q, fake_quant(before["model.layers.1.mlp.down_proj"], E4))
    assert changed == {n for n in before if ".layers.1." in n}
    assert _changed(model, before) == set()                 # removed: every original weight back


def test_weight_map_first_match_wins_and_none_leaves_alone(model):
    before = _weights(model)
    r = R.Recipe("mixed", "q_proj NVFP4, layer 0 E4M3 except its q_proj, lm_head E4M3",
                 weight_map=((r"\.q_proj$", NV), (r"\.layers\.0\.mlp\.", None), (r"\.layers\.0\.", E4),
                             (r"^lm_head$", E4)), include_lm_head=True)
    with R.applied(model, r):
        for n, m in model.named_modules():
            if not isinstance(m, torch.nn.Linear):
                continue
            if n.endswith("q_proj"):
                want = fake_quant(before[n], NV)
            elif ".layers.0.mlp." in n:
                want = before[n]
            elif ".layers.0." in n or n == "lm_head":
                want = fake_quant(before[n], E4)
            else:
                want = before[n]
            assert torch.equal(m.weight, want), n
    assert not r.is_baseline


def test_lm_head_needs_include_lm_head(model):
    before = _weights(model)
    with R.applied(model, R.Recipe("h", "head only, not included", weight_map=((r"^lm_head$", E4),))):
        assert _changed(model, before) == set()


def test_kv_layers_quantizes_only_those_layers_caches():
    m = tiny_llama()
    ids = torch.randint(0, 256, (1, 24), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = m(ids).logits
        with R.applied(m, R.Recipe("kv1", "layer 1's cache", key=E4, value=E4, kv_layers=(1,))):
            attn = [mod for mod in m.modules() if hasattr(mod, "k_proj")]
            assert [a._fp8lab_kv["key"] is not None for a in attn] == [False, True]
            one = m(ids).logits
        with R.applied(m, R.Recipe("kv", "every cache", key=E4, value=E4)):
            both = m(ids).logits
        assert torch.equal(m(ids).logits, ref)
    assert not torch.equal(one, ref) and not torch.equal(one, both)


def test_kv_layers_out_of_range_is_a_clear_error():
    m = tiny_llama()
    with pytest.raises(R.RecipeError, match="kv_layers"):
        R.apply_recipe(m, R.Recipe("kv9", "no such layer", key=E4, value=E4, kv_layers=(9,)))
    assert getattr(m, "_fp8lab_applied", None) is None
    assert m.config._attn_implementation == "sdpa"
