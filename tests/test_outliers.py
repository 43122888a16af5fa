"""Activation statistics, SmoothQuant, the Hadamard rotation and the activation quantizers, on a tiny random Llama
(no download) with an injected outlier channel: each transform computes the same function, really moves the
outliers, and its undo restores the model bit for bit."""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from fp8lab import activation_scaling as AS
from fp8lab import outliers as O
from fp8lab import recipes as R
from fp8lab.hadamard import RandomHadamard
from fp8lab.scaling import QuantSpec, fake_quant

OUTLIER = 5     # the channel of the residual stream that carries large values


def tiny_llama(seed=0):
    cfg = LlamaConfig(vocab_size=256, hidden_size=96, intermediate_size=192, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=24, max_position_embeddings=64,
                      tie_word_embeddings=True, attn_implementation="sdpa")
    torch.manual_seed(seed)
    m = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for layer in m.model.layers:    # an outlier channel, as real LLMs have: the RMSNorm gain is large there
            layer.input_layernorm.weight[OUTLIER] = 60.0
            layer.post_attention_layernorm.weight[OUTLIER] = 60.0
    return m


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 256, (1, 48), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def stats(model, ids):
    st = O.InputStats()
    with O.observe_inputs(model, st), torch.no_grad():
        model(input_ids=ids)
    return st


def _snapshot(m):
    return ({k: v.clone() for k, v in m.state_dict().items()}, {n: p for n, p in m.named_parameters()},
            sum(len(x._forward_pre_hooks) + len(x._forward_hooks) for x in m.modules()))


def _assert_restored(m, snap):
    sd, params, hooks = snap
    now = m.state_dict()
    assert now.keys() == sd.keys()
    for k in sd:
        assert torch.equal(now[k], sd[k]), k
    assert all(p is params[n] for n, p in m.named_parameters())          # the very same Parameter objects
    assert sum(len(x._forward_pre_hooks) + len(x._forward_hooks) for x in m.modules()) == hooks
    assert m.lm_head.weight is m.model.embed_tokens.weight


def test_linear_modules_and_input_groups(model):
    names = list(O.linear_modules(model))
    assert "lm_head" not in names and len(names) == 14
    groups = O.input_groups(model)
    p = "model.layers.0."
    assert groups[:4] == [[p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"],
                          [p + "self_attn.o_proj"], [p + "mlp.gate_proj", p + "mlp.up_proj"], [p + "mlp.down_proj"]]


def test_input_stats_counts_and_maxima():
    st = O.InputStats()
    x = torch.zeros(1, 3, 4)
    x[0, 1, 2] = -500.0      # one element over 448, on token 1, channel 2
    x[0, 2, 0] = 10.0
    st.observe("a", x)
    st.observe("a", torch.ones(1, 2, 4))
    assert st.n_over["a"] == 1 and st.n_elem["a"] == 20
    assert st.chan_amax["a"].tolist() == [10.0, 1.0, 500.0, 1.0]
    assert st.amax["a"] == [500.0, 1.0] and st.static_amax() == {"a": 500.0}
    assert st.tok_amax["a"][0].tolist() == [0.0, 500.0, 10.0]


def test_outlier_is_seen_and_channel_structured(model, stats):
    rows = O.summarize(stats, O.input_groups(model))
    qkv = rows[0]
    assert qkv["kind"] == "qkv" and qkv["members"][0].endswith("q_proj")
    assert qkv["top_channels"][0] == OUTLIER and qkv["chan_ratio"] > 10
    assert qkv["tok_ratio"] < qkv["chan_ratio"]          # every token has it: channel-, not token-structured
    x = torch.randn(40, 96)
    x[:, OUTLIER] *= 50
    assert O.top_channel_share(x) > 0.9


def test_smoothing_factors_example_and_identity():
    s = O.smoothing_factors(torch.tensor([4.0, 1.0]), [torch.tensor([[1.0, 1.0]])], alpha=0.5)
    assert s.tolist() == [2.0, 1.0]
    g = torch.Generator().manual_seed(0)
    W, x = torch.randn(64, 96, generator=g), torch.randn(10, 96, generator=g)
    x[:, OUTLIER] *= 100
    s = O.smoothing_factors(x.abs().amax(0), [W], 0.5)
    ref = x.double() @ W.double().T
    got = (x / s) @ (W * s[None, :]).T                   # W x = (W diag(s)) (x / s)
    assert ((got.double() - ref).abs().max() / ref.abs().max()) < 1e-6
    assert (x / s).abs().amax(0).max() < x.abs().amax(0).max() / 5     # the outlier channel shrank
    with pytest.raises(ValueError):
        O.smoothing_factors(x.abs().amax(0), [W], 1.5)


def _logits(m, ids):
    with torch.no_grad():
        return m(input_ids=ids).logits


@pytest.mark.parametrize("make", [lambda st: O.SmoothQuant(st.chan_amax, 0.5),
                                  lambda st: O.SmoothQuant(st.chan_amax, 0.8, targets="all"),
                                  lambda st: O.HadamardRotation(seed=1),
                                  lambda st: O.HadamardRotation(seed=1, kind="block")],
                         ids=["smoothquant", "smoothquant-all", "hadamard", "hadamard-block"])
def test_transform_keeps_the_function_and_undo_is_bit_exact(model, ids, stats, make):
    snap, ref = _snapshot(model), _logits(model, ids)
    undo = make(stats)(model)
    out = _logits(model, ids)
    assert not torch.equal(out, ref)                                   # something really changed...
    assert (out - ref).abs().max() < 1e-3 * ref.abs().max()            # ...but not the function
    undo()
    _assert_restored(model, snap)
    assert torch.equal(_logits(model, ids), ref)


def test_smoothquant_moves_the_outlier_and_leaves_o_proj_alone(model, ids, stats):
    sq = O.SmoothQuant(stats.chan_amax, 0.5)
    attn = model.model.layers[0].self_attn
    o_w = attn.o_proj.weight
    w_amax = torch.stack([getattr(attn, p).weight.abs().amax(0) for p in ("q_proj", "k_proj", "v_proj")]).amax(0)
    undo = sq(model)
    try:
        assert attn.o_proj.weight is o_w
        after = O.InputStats()
        with O.observe_inputs(model, after), torch.no_grad():
            model(input_ids=ids)
        q = "model.layers.0.self_attn.q_proj"
        # on the calibration data itself, alpha = 0.5: max|X_j / s_j| = max|X_j|**0.5 * max|W_j|**0.5
        assert torch.allclose(after.chan_amax[q], stats.chan_amax[q].sqrt() * w_amax.sqrt(), rtol=1e-4)
        assert after.chan_amax[q].max() < stats.chan_amax[q].max() / 3
    finally:
        undo()


def test_hadamard_rotation_flattens_the_outlier(model, ids, stats):
    undo = O.HadamardRotation(seed=0)(model)
    try:
        after = O.InputStats()
        with O.observe_inputs(model, after), torch.no_grad():
            model(input_ids=ids)
        q = "model.layers.0.self_attn.q_proj"
        before_ratio = stats.chan_amax[q].max() / stats.chan_amax[q].median()
        after_ratio = after.chan_amax[q].max() / after.chan_amax[q].median()
        assert after_ratio < before_ratio / 5
    finally:
        undo()


def test_recipe_applies_transform_before_quantizing_weights(model, ids):
    snap, ref = _snapshot(model), _logits(model, ids)
    rot = O.HadamardRotation(seed=2)
    recipe = R.Recipe("t", "rotation then E4M3 weights", weight=QuantSpec("e4m3", "tensor"), transform=rot)
    q = model.model.layers[0].self_attn.q_proj
    w0 = q.weight.detach().clone()
    with R.applied(model, recipe):
        rm = RandomHadamard(q.in_features, seed=2).matrix()
        want = fake_quant((w0.double() @ rm.T).float(), QuantSpec("e4m3", "tensor"))
        assert torch.equal(q.weight, want)
        assert not recipe.is_baseline
    _assert_restored(model, snap)
    assert torch.equal(_logits(model, ids), ref)


def test_static_input_quant_saturates_at_the_calibrated_max(model, ids, stats):
    amax = {n: 0.5 * a for n, a in stats.static_amax().items()}     # half the real max: the top saturates
    seen = []
    undo = AS.StaticInputQuant(amax, "e4m3")(model)
    q = model.model.layers[0].self_attn.q_proj
    h = q.register_forward_pre_hook(lambda m, a: seen.append(a[0]))
    try:
        _logits(model, ids)
    finally:
        h.remove()
        undo()
    x = seen[0]
    lim = amax["model.layers.0.self_attn.q_proj"]
    assert torch.isclose(x.abs().max(), torch.tensor(lim), rtol=1e-6)
    assert torch.equal(x, fake_quant(x, QuantSpec("e4m3", "tensor")))     # on the E4M3 grid of scale lim/448


def test_delayed_input_quant_uses_the_history(model, ids, stats):
    hist = {n: [10.0 * a for a in v] for n, v in stats.amax.items()}       # a history 10x too large
    dq = AS.DelayedInputQuant(hist, history_len=4)
    undo = dq(model)
    try:
        _logits(model, ids)
    finally:
        undo()
    ds = dq.scalers["model.layers.0.self_attn.q_proj"]
    assert len(ds.history) == 2 and ds.history[-1] == pytest.approx(stats.amax["model.layers.0.self_attn.q_proj"][0])
    assert float(ds.scale) == pytest.approx(max(ds.history) / 448, rel=1e-6)


def test_delayed_fast_path_equals_delayed_scaling():
    from fp8lab.scaling import DelayedScaling, dequantize

    g = torch.Generator().manual_seed(0)
    ref, fast = DelayedScaling("e4m3", history_len=3), DelayedScaling("e4m3", history_len=3)
    fn = AS._delayed_fn(fast, "e4m3")
    for step in range(6):          # growing and shrinking maxima: saturation, stale scales, the first call
        x = torch.randn(4, 9, 40, generator=g) * (10.0 ** ((step % 3) - 1))
        assert torch.equal(fn(x), dequantize(ref.quantize(x)))
        assert fast.history == ref.history


def test_nvfp4_static_global_equals_dynamic_when_amax_matches():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 7, 64, generator=g) * torch.logspace(-2, 1, 64)
    spec = QuantSpec("e2m1", "nvfp4")
    assert torch.equal(AS.nvfp4_static_global(x, float(x.abs().max())), fake_quant(x, spec))
    y = AS.nvfp4_static_global(x, 1.0)                                     # a global amax below the data
    assert y.abs().max() <= 1.0 + 1e-6
    big = AS.nvfp4_static_global(x, 100.0)                                  # a coarser E4M3 block-scale grid
    assert not torch.equal(big, fake_quant(x, spec))


def test_chain_undoes_in_reverse(model, ids, stats):
    snap, ref = _snapshot(model), _logits(model, ids)
    t = O.chain(O.SmoothQuant(stats.chan_amax, 0.5), O.HadamardRotation(seed=0))
    undo = t(model)
    assert (_logits(model, ids) - ref).abs().max() < 1e-3 * ref.abs().max()      # still the same function
    st = O.calibrate(model, windows=ids)                                          # inputs as transformed
    undo_q = AS.StaticInputQuant(st.static_amax(), "e4m3")(model)
    assert 0 < (_logits(model, ids) - ref).abs().max() < 0.2 * ref.abs().max()   # quantized, still close
    undo_q()
    undo()
    _assert_restored(model, snap)
    assert torch.equal(_logits(model, ids), ref)


def test_calibrated_transform_without_tokenizer_warns(model, ids):
    snap = _snapshot(model)
    with pytest.warns(UserWarning, match="random token ids"):
        undo = AS.recipe_transform("smoothquant+static", n_windows=2, seq_len=16)(model)
    undo()
    _assert_restored(model, snap)
    with pytest.raises(ValueError, match="unknown recipe transform"):
        AS.recipe_transform("nope")


def test_histogram_is_relative_to_the_max():
    x = torch.tensor([0.0, 1.0, 0.5, 2.0 ** -10])
    h = O.log2_histogram(x, lo=-12, hi=1, bins=13)
    assert h["zeros"] == 1 and sum(h["counts"]) == 3 and h["amax"] == 1.0
    assert h["counts"][12] == 1 and h["counts"][11] == 1 and h["counts"][2] == 1   # log2 = 0, -1, -10


@pytest.mark.slow
def test_boolq_calibration_windows_are_held_out():
    from fp8lab import data, models

    tok = models.load_model(verbose=False).tokenizer
    test, _ = data.token_windows(tok, data.load_corpus("boolq").text, 128, 16)
    cal = O.calibration_windows(tok, 8, 128, "boolq", exclude=test)
    assert cal.shape == (8, 128)
    assert not any(torch.equal(c, t) for c in cal for t in test)
    with pytest.raises(ValueError, match="exclude"):
        O.calibration_windows(tok, 8, 128, "boolq")
    sci = O.calibration_windows(tok, 2, 128, "sciq")
    assert sci.shape == (2, 128)
