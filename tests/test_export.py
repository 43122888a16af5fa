"""fp8lab.export: every exportable recipe written from a tiny Llama, then read back three ways --
compressed-tensors' own decompression (bit-exact against fp8lab's fake quantization), transformers'
from_pretrained, and fp8lab.audit -- plus the refusals (exit 2, nothing written)."""
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from fp8lab import audit as au
from fp8lab import export as ex
from fp8lab import export_fixtures as fx
from fp8lab import formats as F
from fp8lab import recipes as R
from fp8lab import scaling as S

warnings.filterwarnings("ignore")
ROOT = Path(__file__).resolve().parents[1]

CT = "compressed-tensors"
MO = "modelopt"
EXPORTS = [(r, CT) for r in ("e4m3-w", "e4m3-wa", "e4m3-wa-tok", "e4m3-w-noscale", "e4m3-wa-noscale", "w8a8-block",
                             "nvfp4-w", "mxfp4-w", "e4m3-kv-uncal", "e4m3-kv-cal256")] + \
          [(r, MO) for r in ("nvfp4-w", "e4m3-wa-noscale")]
FP8_CT = ["e4m3-w", "e4m3-wa", "e4m3-wa-tok", "e4m3-w-noscale", "e4m3-wa-noscale", "w8a8-block"]
WEIGHT_EXPORTS = [e for e in EXPORTS if not e[0].startswith("e4m3-kv")]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(recipe, format) -> folder, each written once from tiny_model(0)."""
    root = tmp_path_factory.mktemp("exports")
    cache = {}

    def get(recipe, fmt):
        if (recipe, fmt) not in cache:
            cache[(recipe, fmt)] = fx.exported_checkpoint(root, recipe, fmt)
        return cache[(recipe, fmt)]
    return get


@pytest.fixture(scope="module")
def model():
    return fx.tiny_model(0)


def test_every_exportable_recipe_is_tested():
    """The exportable (recipe, format) pairs are exactly the ones exported and read back below, over the
    recipe list as it is (fp8lab.recipes.RECIPES), and every other pair is refused with one line naming the
    recipe and the missing field."""
    table = ex.exportable()
    assert set(table) == set(ex.FORMATS) and all(set(rows) == set(R.RECIPES) for rows in table.values())
    ok = sorted((r, f) for f, rows in table.items() for r, why in rows.items() if why == "ok")
    assert ok == sorted(EXPORTS)
    for fmt in ex.FORMATS:
        for name in R.RECIPES:
            if (name, fmt) in EXPORTS:
                assert ex.plan(name, fmt).recipe == name
                continue
            with pytest.raises(ex.ExportError) as e:
                ex.plan(name, fmt)
            msg = str(e.value)
            assert msg.startswith(f"recipe {name!r} cannot be exported as {fmt}: ") and "\n" not in msg, msg
            assert msg.endswith(")") and msg.split("(missing field: ")[-1].strip(")"), msg


def test_oracle_kv_recipes_are_refused_and_say_why():
    """No recipe whose KV scale sees future tokens is exportable (the checkpoint would claim a scale no engine
    can have); each oracle KV recipe's refusal says oracle, the causal dynamic ones say dynamic."""
    for name, rec in R.RECIPES.items():
        if rec.key is None:
            continue
        exportable = any((name, f) in EXPORTS for f in ex.FORMATS)
        if not rec.causal:
            assert not exportable, name
        if not exportable and isinstance(rec.key, S.QuantSpec) and rec.key.fmt == "e4m3":
            msg = str(pytest.raises(ex.ExportError, ex.plan, name).value)
            assert ("oracle" in msg) == (not rec.causal), msg


# ---- the bytes are fp8lab's codes --------------------------------------------------------------------------
@pytest.mark.parametrize("recipe,fmt", WEIGHT_EXPORTS)
def test_bytes_are_fp8lab_codes(exported, model, recipe, fmt):
    """Every stored code, scale code and scale equals fp8lab.scaling.quantize of the same weight."""
    t = load_file(str(exported(recipe, fmt) / "model.safetensors"))
    rec = R.get_recipe(recipe)
    targets = list(R._linears(model, rec))
    assert len(targets) == 14
    for name, m in targets:
        q = S.quantize(m.weight.detach(), rec.weight)
        u8 = lambda k: t[f"{name}.{k}"].view(torch.uint8)  # noqa: E731
        if rec.weight.granularity == "nvfp4":
            data = "weight_packed" if fmt == CT else "weight"
            assert torch.equal(u8(data), S.pack_nibbles(q.codes))
            assert torch.equal(u8("weight_scale"), q.scale_codes)
            if fmt == CT:
                assert torch.equal(t[f"{name}.weight_global_scale"], (1 / q.global_scale).reshape(1))
            else:
                assert torch.equal(t[f"{name}.weight_scale_2"], q.global_scale.reshape(()))
        elif rec.weight.granularity == "mx":
            assert torch.equal(u8("weight_packed"), S.pack_nibbles(q.codes))
            assert t[f"{name}.weight_scale"].dtype == torch.uint8 and torch.equal(u8("weight_scale"), q.scale_codes)
        else:
            assert t[f"{name}.weight"].dtype == torch.float8_e4m3fn and torch.equal(u8("weight"), q.codes)
            assert torch.equal(t[f"{name}.weight_scale"].reshape(q.scale.shape), q.scale)
        if rec.act is not None and rec.act.granularity == "none":
            assert float(t[f"{name}.input_scale"]) == 1.0
        else:
            assert f"{name}.input_scale" not in t
    # the untouched tensors are the model's own, float32; the tied lm_head is stored once
    assert torch.equal(t["model.embed_tokens.weight"], model.model.embed_tokens.weight)
    assert "lm_head.weight" not in t


# ---- compressed-tensors reads it back ---------------------------------------------------------------------
@pytest.mark.parametrize("recipe,fmt", [e for e in EXPORTS if e[1] == CT])
def test_ct_config_validates(exported, recipe, fmt):
    """The label parses as compressed-tensors' QuantizationConfig, and each group's format is the one the
    library itself infers for that scheme."""
    from compressed_tensors.compressors.format import infer_module_format
    from compressed_tensors.quantization import QuantizationConfig

    cfg = json.loads((exported(recipe, fmt) / "config.json").read_text())
    qc = QuantizationConfig.model_validate(cfg["quantization_config"])
    for scheme in qc.config_groups.values():
        assert infer_module_format(torch.nn.Linear, scheme).value == scheme.format == qc.format
    assert (qc.kv_cache_scheme is not None) == recipe.startswith("e4m3-kv")


def _ct_decompress(path):
    from compressed_tensors.entrypoints.convert.converters.ct_dequantizer import CompressedTensorsDequantizer

    # The model-free dequantizer treats every 2-D ".weight" outside `ignore` as a quantized Linear (it cannot
    # see module types); the embedding is not one, so it is named here, as its API expects.
    d = CompressedTensorsDequantizer(str(path), ignore=["re:.*embed_tokens$"], dtype=torch.float32)
    return d.process(dict(load_file(str(path / "model.safetensors"))))


@pytest.mark.parametrize("recipe", FP8_CT + ["mxfp4-w"])
def test_ct_decompression_is_bit_exact(exported, model, recipe):
    """compressed-tensors' own decompression returns exactly the float32 weights fp8lab's fake quantization
    fed the model (FP8: code * scale in float32; MXFP4: code * 2**e, exact even through its bf16 path)."""
    out = _ct_decompress(exported(recipe, CT))
    ref = ex.reference_weights(model, recipe)
    for k, w in ref.items():
        assert torch.equal(out[k], w), k


def test_ct_decompression_nvfp4_pinned(exported, model):
    """PINNED. compressed-tensors decompresses NVFP4 to bfloat16: weight = bf16(code * fl32(scale / G)) with
    G = weight_global_scale = 1 / fp8lab's global. Asserted: (1) its output is exactly that formula applied to
    the stored bytes; (2) it is within one bf16 ulp of bf16(fp8lab's float32 fake-quantized weight), and equal
    on every element of this model. The two roundings part only where code * scale * global lies within
    ~1e-7 of a bf16 rounding boundary; a tensor's few distinct products either hit that or not (on SmolLM2-135M
    9 of 210 tensors do). Float32 equality is impossible: the library returns bf16."""
    path = exported("nvfp4-w", CT)
    out = _ct_decompress(path)
    t = load_file(str(path / "model.safetensors"))
    ref = ex.reference_weights(model, "nvfp4-w")
    for k, w in ref.items():
        p = k[: -len(".weight")]
        codes = S.unpack_nibbles(t[f"{p}.weight_packed"])
        bsc = F.E4M3.decode(t[f"{p}.weight_scale"].view(torch.uint8)).repeat_interleave(16, dim=-1)
        formula = (F.E2M1.decode(codes) * (bsc / t[f"{p}.weight_global_scale"])).to(torch.bfloat16).float()
        assert torch.equal(out[k], formula), k
        ulps = (out[k].to(torch.bfloat16).view(torch.int16).int() - w.to(torch.bfloat16).view(torch.int16).int())
        assert int(ulps.abs().max()) <= 1, k
        assert torch.equal(out[k], w.to(torch.bfloat16).float()), k
        assert not torch.equal(out[k], w)


def test_modelopt_nvfp4_converts_to_the_ct_export(exported):
    """compressed-tensors' own ModelOpt -> compressed-tensors converter (weight_scale_2 -> 1 / x as
    weight_global_scale, weight -> weight_packed) turns the ModelOpt export into the compressed-tensors export,
    byte for byte (one value, 1 / weight_scale_2, computed the same way)."""
    from compressed_tensors.entrypoints.convert.converters.modelopt_nvfp4 import ModelOptNvfp4Converter

    mo = load_file(str(exported("nvfp4-w", MO) / "model.safetensors"))
    ct = load_file(str(exported("nvfp4-w", CT) / "model.safetensors"))
    conv = ModelOptNvfp4Converter(ignore=["lm_head"], targets=["re:.*(proj)$"]).validate(dict(mo))
    assert sorted(conv) == sorted(ct)
    for k in ct:   # the converter keeps ModelOpt's scalar shape [] for the global scale; the bytes are equal
        assert torch.equal(conv[k].reshape(-1).view(torch.uint8), ct[k].reshape(-1).view(torch.uint8)), k


@pytest.mark.parametrize("recipe", FP8_CT)
def test_transformers_loads_fp8_and_matches_fake_quant(exported, recipe):
    """transformers (with compressed-tensors installed) loads the FP8 exports; after its own decompression the
    logits equal fp8lab's fake-quantized model bit for bit (eager attention on both sides), activation
    quantization included (dynamic per-tensor, dynamic per-token, static scale 1.0, dynamic 1x128 groups)."""
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(exported(recipe, CT)), dtype=torch.float32,
                                             attn_implementation="eager").eval()
    ids = torch.randint(0, fx.TINY["vocab_size"], (2, 40), generator=torch.Generator().manual_seed(3))
    ref = fx.tiny_model(0)
    with torch.no_grad():
        got = m(ids).logits
        with R.applied(ref, recipe):
            want = ref(ids).logits
    assert torch.equal(got, want)


@pytest.mark.parametrize("recipe", ["nvfp4-w", "mxfp4-w"])
def test_transformers_loads_4bit_in_bf16(exported, model, recipe):
    """transformers loads the 4-bit exports only with dtype=bfloat16: compressed-tensors decompresses them to
    bf16, and a float32 model then fails in its first matmul (float != BFloat16). In bf16 the decompressed
    weights are bf16(fp8lab's fake-quantized weights)."""
    from transformers import AutoModelForCausalLM

    path = exported(recipe, CT)
    ids = torch.randint(0, fx.TINY["vocab_size"], (1, 8), generator=torch.Generator().manual_seed(3))
    m32 = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    with pytest.raises(RuntimeError, match="dtype"):
        with torch.no_grad():
            m32(ids)
    m = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.bfloat16).eval()
    with torch.no_grad():
        assert torch.isfinite(m(ids).logits.float()).all()
    params = dict(m.named_parameters())
    for k, w in ex.reference_weights(model, recipe).items():
        assert torch.equal(params[k], w.to(torch.bfloat16)), k


# ---- KV cache scales ------------------------------------------------------------------------------------
@pytest.mark.parametrize("recipe", ["e4m3-kv-uncal", "e4m3-kv-cal256"])
def test_kv_scales_reproduce_the_recipe(exported, recipe):
    """The exported k_scale / v_scale, used as frozen scales (fp8lab.calibration.static_kv), give exactly the
    recipe's forward on the calibration tokens: the checkpoint carries the cache the lab measured."""
    from fp8lab.calibration import StaticKVScales, static_kv

    t = load_file(str(exported(recipe, CT) / "model.safetensors"))
    L = fx.TINY["num_hidden_layers"]
    k = {i: t[f"model.layers.{i}.self_attn.k_scale"] for i in range(L)}
    v = {i: t[f"model.layers.{i}.self_attn.v_scale"] for i in range(L)}
    assert all(s.shape == () and s.dtype == torch.float32 for s in [*k.values(), *v.values()])
    if recipe == "e4m3-kv-uncal":
        assert all(float(s) == 1.0 for s in [*k.values(), *v.values()])
    else:
        assert len({float(s) for s in k.values()}) == L            # calibrated per layer
    ids = torch.randint(0, fx.TINY["vocab_size"], (1, 256), generator=torch.Generator().manual_seed(0))
    m = fx.tiny_model(0)
    with torch.no_grad():
        with R.applied(m, recipe):
            want = m(ids).logits
        with static_kv(m, StaticKVScales("e4m3", k, v)):
            got = m(ids).logits
    assert torch.equal(got, want)


# ---- the auditor reads it back ----------------------------------------------------------------------------
AUDIT = {
    ("e4m3-w", CT): ("FP8", ["fp8-per-tensor"]),
    ("e4m3-wa", CT): ("FP8", ["fp8-per-tensor"]),
    ("e4m3-wa-tok", CT): ("FP8", ["fp8-per-tensor"]),
    ("e4m3-w-noscale", CT): ("FP8", ["fp8-per-tensor"]),
    ("e4m3-wa-noscale", CT): ("FP8", ["fp8-per-tensor", "input_scale"]),
    ("w8a8-block", CT): ("FP8", ["fp8-block-128x128"]),
    ("nvfp4-w", CT): ("NVFP4", ["nvfp4/compressed-tensors"]),
    ("mxfp4-w", CT): ("MXFP4", ["mxfp4"]),
    ("e4m3-kv-uncal", CT): ("FP8", ["kv_scale"]),
    ("e4m3-kv-cal256", CT): ("FP8", ["kv_scale"]),
    ("nvfp4-w", MO): ("NVFP4", ["nvfp4/modelopt"]),
    ("e4m3-wa-noscale", MO): ("FP8", ["fp8-per-tensor", "input_scale"]),
}


@pytest.mark.parametrize("recipe,fmt", EXPORTS)
def test_export_then_audit(exported, recipe, fmt):
    """`python -m fp8lab.audit DIR` on each export: the label's family is the recipe's format, the scale
    layouts are the ones written, K/V scales are reported where shipped, and the verdict says consistent --
    a KV-only export read through compressed-tensors' kv_cache_scheme (no weight group), ModelOpt's
    weight-only NVFP4 through quant_algo W4A16_NVFP4."""
    path = exported(recipe, fmt)
    assert au.main([str(path)]) == 0
    r = au.audit(path)
    family, layouts = AUDIT[(recipe, fmt)]
    assert r["has_kv_scales"] == recipe.startswith("e4m3-kv")
    assert r["scale_layouts"] == layouts
    assert not r["warnings"]
    assert r["label"]["family"] == family, r["label"]
    assert r["consistent"] is True, r["verdict"]
    assert "no quantization label" not in r["verdict"]


# real published labels next to the lab's own exports (fixtures for the auditor's tests)
REAL = {"ct_fp8_static_phi3": ("FP8", ["fp8-per-tensor", "input_scale"], False),
        "ct_nvfp4_devstral": ("NVFP4", ["input_scale", "nvfp4/compressed-tensors"], False),
        "modelopt_nvfp4_behemoth": ("NVFP4", ["input_scale", "nvfp4/modelopt"], False),
        "modelopt_nvfp4_fp8kv_cortexlm": ("NVFP4", ["input_scale", "kv_scale", "nvfp4/modelopt"], True)}


@pytest.mark.parametrize("name", list(REAL))
def test_audit_real_labels(tmp_path, name):
    assert set(REAL) == set(fx.REAL_LABELS)
    r = au.audit(fx.real_label_checkpoint(name, tmp_path))
    family, layouts, kv = REAL[name]
    assert fx.REAL_LABELS[name]["source"].startswith("https://huggingface.co/")
    assert (r["label"]["family"], r["scale_layouts"], r["has_kv_scales"], r["consistent"]) == \
        (family, layouts, kv, True), r["verdict"]


def test_fixture_set_audits_consistent(tmp_path):
    """export_fixtures.make_all (real labels + the lab's own exports, for the auditor): every folder gets a
    family and a consistent verdict, the KV-only export as an FP8 KV cache."""
    paths = fx.make_all(tmp_path)
    assert set(paths) == set(fx.REAL_LABELS) | {"exported_nvfp4_ct", "exported_nvfp4_modelopt",
                                                "exported_kv_cal256_ct"}
    for name, path in paths.items():
        r = au.audit(path)
        assert r["consistent"] is True and r["label"]["family"], (name, r["verdict"])
    assert au.audit(paths["exported_kv_cal256_ct"])["label"]["scope"] == "kv-cache"


# ---- provenance, README, config ---------------------------------------------------------------------------
def test_folder_contents(exported):
    path = exported("nvfp4-w", CT)
    names = sorted(p.name for p in path.iterdir())
    assert names == ["README.md", "config.json", "fp8lab_provenance.json", "generation_config.json",
                     "model.safetensors"]
    prov = json.loads((path / "fp8lab_provenance.json").read_text())
    assert prov["recipe"] == "nvfp4-w" and prov["format"] == CT and len(prov["git_commit"]) >= 7
    assert "dirty" in prov and prov["command"]
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["fp8lab_export"]["recipe"] == "nvfp4-w" and cfg["dtype"] == "float32"
    readme = (path / "README.md").read_text()
    assert "nvfp4-w" in readme and "python -m fp8lab.audit" in readme
    assert not [p for p in path.parent.iterdir() if ".partial-" in p.name or ".old-" in p.name]


def test_source_note_says_q4_1(tmp_path, monkeypatch):
    """An export of the offline default says its source weights were 4-bit Q4_1 GGUF, in config.json and the
    README (checked without loading the model: the note comes from fp8lab.models)."""
    from fp8lab.models import OFFLINE_MODELS

    note = OFFLINE_MODELS["smollm2-135m"].note
    out = ex.export_model(fx.tiny_model(0), "e4m3-w", tmp_path / "o", source="smollm2-135m", model_note=note)
    cfg = json.loads((out / "config.json").read_text())
    assert "Q4_1" in cfg["fp8lab_export"]["source_note"]
    assert "Q4_1" in (out / "README.md").read_text()


# ---- bad input ---------------------------------------------------------------------------------------------
REFUSED = [
    ("e4m3-kv-perchannel", CT, "per-channel k_scale/v_scale"),
    ("e4m3-kv", CT, "dynamic per-tensor k_scale/v_scale"),
    ("e4m3-wakv", CT, "dynamic per-tensor k_scale/v_scale"),
    ("e4m3-kv-tok", CT, "dynamic per-token k_scale/v_scale"),
    ("e4m3-wakv-tok", CT, "dynamic per-token k_scale/v_scale"),
    ("e4m3-kv-cal256-channel", CT, "per-channel k_scale/v_scale"),
    ("e5m2-w", CT, "E5M2"),
    ("e5m2-kv", CT, "E5M2"),
    ("e5m2-kv-tok", CT, "E5M2"),
    ("e4m3-wa-tok", MO, "input_scale"),
    ("baseline", CT, "any quantized tensor"),
    ("bf16", CT, "bf16"),
    ("int8-w", CT, "pack-quantized"),
    ("e4m3-wa", MO, "input_scale"),                  # dynamic activation scales; ModelOpt FP8 needs static
    ("e4m3-w", MO, "input_scale"),
    ("w8a8-block", MO, "quant_algo"),
    ("e4m3-kv-uncal", MO, "k_scale"),
]


@pytest.mark.parametrize("recipe,fmt,field", REFUSED)
def test_refusals_name_recipe_and_field(recipe, fmt, field):
    with pytest.raises(ex.ExportError) as e:
        ex.plan(recipe, fmt)
    msg = str(e.value)
    assert f"recipe {recipe!r}" in msg and "missing field:" in msg and field in msg.split("missing field:")[1]
    assert "\n" not in msg


@pytest.mark.parametrize("recipe,fmt,field", [r for r in REFUSED if r[0] in
                                               ("e4m3-kv-perchannel", "e4m3-kv", "e4m3-kv-tok", "e4m3-wa")])
def test_cli_refusal_exit_2_writes_nothing(tmp_path, capsys, recipe, fmt, field):
    out = tmp_path / "out"
    rc = ex.main(["--recipe", recipe, "--format", fmt, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("error: ") and field in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("desc,field", [
    ({"weights": [[r"\.layers\.0\.", "nvfp4"], [".", "fp8_tensor"]]}, "a config group per weight_map entry"),
    ({"kv": "fp8", "kv_layers": [0]}, "a per-layer kv_cache_scheme"),
    ({"weights": [[".", "fp8_tensor"]], "lm_head": "fp8_tensor"}, "lm_head/embedding scheme"),
])
def test_mixed_assignments_refused(tmp_path, desc, field):
    """A parts description (fp8lab.parts: the sensitivity map's and frontier's recipes) with per-Linear formats
    or a partial KV cache is refused with its field named, never exported with the wrong scheme."""
    from fp8lab.parts import build_recipe

    rec = build_recipe(desc)
    with pytest.raises(ex.ExportError, match="missing field: " + field):
        ex.plan(rec)
    with pytest.raises(ex.ExportError):
        ex.export_model(fx.tiny_model(0), rec, tmp_path / "o")
    assert list(tmp_path.iterdir()) == []


def test_custom_recipe_object_exports(tmp_path):
    """A Recipe built in Python (not in the recipe list) exports through its own slots, not a list lookup."""
    rec = R.Recipe("my-fp8-channel", "E4M3 weights, one scale per output channel",
                   S.QuantSpec("e4m3", "channel", axis=0))
    model = fx.tiny_model(0)
    out = ex.export_model(model, rec, tmp_path / "o")
    t = load_file(str(out / "model.safetensors"))
    w = model.model.layers[0].mlp.up_proj.weight
    q = S.quantize(w.detach(), rec.weight)
    assert torch.equal(t["model.layers.0.mlp.up_proj.weight_scale"].reshape(-1), q.scale)
    assert "my-fp8-channel" in (out / "README.md").read_text()
    r = au.audit(out)
    assert r["scale_layouts"] == ["fp8-per-channel"] and r["consistent"] is True, r["verdict"]


def test_partial_blocks_refused_before_writing(tmp_path):
    """SmolLM2's 576 is not a multiple of 128: w8a8-block cannot be written as whole 128x128 blocks (vLLM's
    block-FP8 loader refuses partial blocks) nor whole 1x128 activation groups. Shown on a tiny model with
    hidden size 192."""
    m = fx.tiny_model(0, hidden_size=192, num_attention_heads=3, num_key_value_heads=3)
    with pytest.raises(ex.ExportError, match=r"w8a8-block.*not a multiple of 128 x 128.*missing field"):
        ex.export_model(m, "w8a8-block", tmp_path / "o")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args,words", [
    (["--recipe", "nope", "--out", "X"], "unknown recipe 'nope'"),
    (["--recipe", "e4m3-w", "--out", "X", "--model", "no-such-model"], "unknown model 'no-such-model'"),
    (["--out", "X"], "--recipe and --out are required"),
    (["--recipe", "e4m3-w", "--out", "FILE"], "is a file"),
    (["--recipe", "e4m3-w", "--out", "FULL"], "not empty; pass --force"),
])
def test_cli_validates_up_front(tmp_path, capsys, args, words):
    (tmp_path / "FILE").write_text("x")
    (tmp_path / "FULL").mkdir()
    (tmp_path / "FULL" / "keep.txt").write_text("x")
    args = [str(tmp_path / a) if a in ("X", "FILE", "FULL") else a for a in args]
    assert ex.main(args) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert (tmp_path / "FULL" / "keep.txt").read_text() == "x" and not (tmp_path / "X").exists()


def test_cli_subprocess_exit_code(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "fp8lab.export", "--recipe", "e4m3-kv-perchannel", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("error: recipe 'e4m3-kv-perchannel'")
    assert not (tmp_path / "o").exists()


def test_failure_midway_writes_nothing(tmp_path, monkeypatch):
    """A failure after some files are written (here: the provenance write) removes the temporary folder and
    leaves --out as it was (absent, or with --force, the old contents)."""
    from fp8lab import store

    old = tmp_path / "o"
    old.mkdir()
    (old / "keep.txt").write_text("old")
    real = store.atomic_write_json

    def boom(path, obj, **kw):
        if Path(path).name == "fp8lab_provenance.json":
            raise OSError("disk full")
        return real(path, obj, **kw)
    monkeypatch.setattr(store, "atomic_write_json", boom)
    for out in (old, tmp_path / "new"):
        with pytest.raises(OSError, match="disk full"):
            ex.export_model(fx.tiny_model(0), "e4m3-w", out, force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]
    assert [p.name for p in old.iterdir()] == ["keep.txt"]


def test_force_replaces_and_refuses_without(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "stale.txt").write_text("x")
    with pytest.raises(ex.ExportError, match="not empty"):
        ex.export_model(fx.tiny_model(0), "e4m3-w", out)
    ex.export_model(fx.tiny_model(0), "e4m3-w", out, force=True)
    assert not (out / "stale.txt").exists() and (out / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_demo_tiny(tmp_path):
    """What notebook 05 calls (there with the real model): export + audit in one call."""
    path, report = ex.demo(tmp_path, model="tiny")
    assert path.is_dir() and report["label"]["family"] == "NVFP4" and report["consistent"]


def test_cli_end_to_end_from_a_local_folder(tmp_path, capsys):
    """The whole CLI path (load_model on a local folder, export, tokenizer copied through fp8lab.store), on a
    saved tiny model with a word-level tokenizer; the real default model takes minutes on this CPU."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    src = tmp_path / "tiny"
    fx.tiny_model(0).save_pretrained(src)
    vocab = {"<unk>": 0, **{f"w{i}": i for i in range(1, fx.TINY["vocab_size"])}}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
                                  unk_token="<unk>", eos_token="<unk>")
    tok.save_pretrained(src)
    out = tmp_path / "out"
    assert ex.main(["--model", str(src), "--recipe", "nvfp4-w", "--out", str(out)]) == 0
    assert "python -m fp8lab.audit" in capsys.readouterr().out
    assert (out / "tokenizer.json").is_file() and (out / "tokenizer_config.json").is_file()
    r = au.audit(out)
    assert r["label"]["family"] == "NVFP4" and r["consistent"]
    prov = json.loads((out / "fp8lab_provenance.json").read_text())
    assert prov["command"].startswith("python -m fp8lab.export --model") and prov["model_sha256"]
