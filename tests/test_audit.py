"""fp8lab.audit on the synthetic checkpoints of fp8lab.audit_fixtures: roles, scale layouts, K/V
scales, verdicts, the safetensors library as a cross-check, every kind of bad file, a header fuzz."""

import json
import os
import random
import struct
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from fp8lab import audit as au
from fp8lab import audit_fixtures as af

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    return af.make_all(tmp_path_factory.mktemp("ckpt"))


# fixture -> (scale layouts, has K/V scales, consistent, words the verdict must contain)
EXPECTED = {
    # DeepSeek-V3-style cast: E4M3 everywhere in the blocks, F32 weight_scale_inv per 128x128
    "deepseek_block_fp8": (["fp8-block-128x128"], False, True, ["labelled FP8", "block-128x128", "consistent"]),
    # MiniMax-style MXFP8: E4M3 with U8 (E8M0) scales [rows, cols/32]; Hopper caveat in the verdict
    "minimax_mxfp8": (["mxfp8"], False, True, ["MXFP8", "W8A16"]),
    # gpt-oss "FP8": fused 3-D BF16 experts, only attention FP8 (per-channel)
    "gptoss_fp8_bf16_experts": (["fp8-per-channel"], False, False,
                                ["labelled FP8", "95 % of parameter bytes are BF16", "experts were not converted",
                                 "fused 3-D", "FP8 covers only attention"]),
    # gpt-oss as released: MXFP4 _blocks/_scales experts, attention BF16 by design
    "gptoss_mxfp4": (["mxfp4"], False, True, ["labelled MXFP4", "attention stays BF16", "consistent"]),
    # per-tensor FP8 export with static input scales and k_scale/v_scale on self_attn
    "fp8_per_tensor": (["fp8-per-tensor", "input_scale", "kv_scale"], True, True, ["per-tensor", "consistent"]),
    # NVFP4, compressed-tensors naming (weight_packed / weight_global_scale)
    "nvfp4_compressed_tensors": (["input_scale", "nvfp4/compressed-tensors"], False, True, ["NVFP4", "consistent"]),
    # NVFP4, ModelOpt naming (weight U8 / weight_scale_2), K/V scales on k_proj / v_proj
    "nvfp4_modelopt": (["input_scale", "kv_scale", "nvfp4/modelopt"], True, True, ["NVFP4", "modelopt", "consistent"]),
    # plain BF16
    "bf16_plain": ([], False, True, ["no quantization label", "plain BF16"]),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_fixture_audit(fixtures, name):
    layouts, kv, consistent, words = EXPECTED[name]
    r = au.audit(fixtures[name])
    assert r["scale_layouts"] == layouts
    assert r["has_kv_scales"] is kv
    assert r["consistent"] is consistent, r["verdict"]
    for w in words:
        assert w in r["verdict"], (w, r["verdict"])
    assert not r["warnings"]
    # the byte totals add up three ways: per dtype, per role, and per file payload
    assert sum(r["by_dtype"].values()) == r["total_bytes"]
    assert sum(sum(d.values()) for d in r["by_role"].values()) == r["total_bytes"]
    payload = 0
    for f in r["files"]:
        (n,) = struct.unpack("<Q", Path(f).read_bytes()[:8])
        payload += Path(f).stat().st_size - 8 - n
    assert payload == r["total_bytes"]


def test_roles_and_params(fixtures):
    r = au.audit(fixtures["gptoss_mxfp4"])
    # packed E2M1: U8 bytes hold two parameters each
    assert r["params_by_role"]["expert"]["U8"] == 2 * r["by_role"]["expert"]["U8"]
    ds = au.audit(fixtures["deepseek_block_fp8"])
    assert set(ds["by_role"]["expert"]) == {"F8_E4M3"}
    assert ds["by_role"]["embedding"] == {"BF16": 2 * 512 * 256 * 2}  # embed_tokens + lm_head
    assert ds["by_role"]["scale"] == {"F32": ds["by_dtype"]["F32"] - 8 * 4}  # minus the router bias


ROLES = [
    ("model.layers.3.mlp.experts.7.gate_proj.weight", "expert"),                 # DeepSeek routed expert
    ("model.layers.3.mlp.experts.gate_up_proj", "expert"),                        # gpt-oss fused 3-D
    ("model.layers.3.mlp.experts.down_proj_blocks", "expert"),                    # MXFP4 blocks
    ("model.layers.3.block_sparse_moe.experts.0.w1.weight", "expert"),            # Mixtral / MiniMax
    ("model.layers.3.mlp.shared_experts.up_proj.weight", "mlp"),                  # shared expert: always on
    ("model.layers.3.mlp.gate.weight", "other"),                                  # router
    ("model.layers.3.mlp.router.weight", "other"),                                # gpt-oss router
    ("model.layers.3.mlp.gate_proj.weight", "mlp"),                               # dense MLP (not a router)
    ("model.layers.3.self_attn.kv_a_proj_with_mqa.weight", "attention"),          # MLA
    ("model.layers.3.self_attn.kv_a_layernorm.weight", "norm"),                   # norm inside attention
    ("model.layers.3.self_attn.k_proj.weight_scale_inv", "scale"),                # block scale
    ("model.layers.3.self_attn.k_scale", "scale"),                                # K cache scale
    ("model.layers.3.input_layernorm.weight", "norm"),
    ("model.embed_tokens.weight", "embedding"),
    ("lm_head.weight", "embedding"),                                              # unembedding
    ("transformer.h.0.ln_1.weight", "norm"),                                      # GPT-2 naming
    ("model.layers.3.self_attn.sinks", "attention"),                              # gpt-oss sinks
    ("some.unrelated.tensor", "other"),
]


@pytest.mark.parametrize("name,role", ROLES)
def test_role_of(name, role):
    assert au.role_of(name) == role


@pytest.mark.parametrize("naming,expect", [
    ("attn", "model.layers.0.self_attn.k_scale"),        # vLLM / compressed-tensors
    ("proj", "model.layers.0.self_attn.k_proj.k_scale"),  # ModelOpt
    ("legacy", "model.layers.0.self_attn.kv_scale"),      # older AutoFP8
    (None, None),                                        # none shipped (seed 004: 22 of 22 indices)
])
def test_kv_scale_namings(tmp_path, naming, expect):
    r = au.audit(af.fp8_per_tensor(tmp_path / "c", kv_scales=naming))
    assert r["has_kv_scales"] is (expect is not None)
    assert (r["kv_scale_tensors"][0] if expect else None) == expect


def test_label_fp8_but_bytes_mxfp8(tmp_path):
    q = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
    r = au.audit(af.minimax_mxfp8(tmp_path / "m", quantization_config=q))
    assert not r["consistent"]
    assert "different scale layout" in r["verdict"] and "W8A16" in r["verdict"]


def test_label_from_hf_quant_config_only(tmp_path):
    # ModelOpt exports may carry the label only in hf_quant_config.json
    folder = af.nvfp4_modelopt(tmp_path / "n")
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["quantization_config"]
    (folder / "config.json").write_text(json.dumps(cfg))
    r = au.audit(folder)
    assert r["label"]["source"] == "hf_quant_config.json" and r["label"]["family"] == "NVFP4"
    assert r["consistent"]


@pytest.mark.parametrize("q", [
    ["fp8"],                                                            # not an object: ignored
    {"quant_method": "compressed-tensors", "config_groups": ["x"]},     # malformed groups
    {"quant_method": "fp8", "weight_block_size": ["a", None]},          # malformed block size
])
def test_odd_labels_do_not_crash(tmp_path, q):
    folder = af.bf16_plain(tmp_path / "p", quantization_config=q)
    assert isinstance(au.audit(folder)["verdict"], str)


def test_block_size_from_scale_shapes(tmp_path):
    # 64x64 blocks with a label that says 128x128: the layout comes from the shapes, with a warning
    t = af.w_fp8_block("model.layers.0.mlp.up_proj", 256, 512, b=64) + af.w_bf16("model.embed_tokens", 64, 512)
    folder = tmp_path / "b"
    af._write_checkpoint(folder, t, {"model_type": "llama", "quantization_config": {
        "quant_method": "fp8", "weight_block_size": [128, 128]}})
    r = au.audit(folder)
    assert r["scale_layouts"] == ["fp8-block-64x64"]
    assert any("imply fp8-block-64x64" in w for w in r["warnings"])


def test_paths_file_folder_index(fixtures):
    ds = fixtures["deepseek_block_fp8"]
    whole = au.audit(ds)
    assert len(whole["files"]) == 2
    assert au.audit(ds / au.INDEX_NAME)["total_bytes"] == whole["total_bytes"]
    index = json.loads((ds / au.INDEX_NAME).read_text())
    assert index["metadata"]["total_size"] == whole["total_bytes"]
    one = au.audit(ds / "model-00001-of-00002.safetensors")
    assert 0 < one["total_bytes"] < whole["total_bytes"]
    assert one["label"]["family"] == "FP8"  # config.json beside the file is read


def test_index_mismatch_warns(tmp_path):
    folder = af.deepseek_block_fp8(tmp_path / "d")
    idx = json.loads((folder / au.INDEX_NAME).read_text())
    idx["weight_map"]["model.layers.9.ghost.weight"] = "model-00001-of-00002.safetensors"
    (folder / au.INDEX_NAME).write_text(json.dumps(idx))
    r = au.audit(folder)
    assert any("listed in the index are in no shard" in w for w in r["warnings"])


# ---- the safetensors library as the trusted implementation ----------------------------------------

def test_our_files_read_by_safetensors(fixtures):
    safetensors = pytest.importorskip("safetensors")
    for name in ("deepseek_block_fp8", "minimax_mxfp8", "nvfp4_modelopt", "gptoss_mxfp4"):
        for f in sorted(fixtures[name].glob("*.safetensors")):
            ours = {t.name: t for t in au.read_header(f)[0]}
            with safetensors.safe_open(str(f), "pt") as fh:
                assert set(fh.keys()) == set(ours)
                for k in fh.keys():
                    sl = fh.get_slice(k)
                    assert (sl.get_dtype(), tuple(sl.get_shape())) == (ours[k].dtype, ours[k].shape)


def test_we_read_safetensors_files(tmp_path):
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    tensors = {"w": torch.zeros(4, 32).to(torch.float8_e4m3fn), "s": torch.zeros(4, 1, dtype=torch.float32),
               "b": torch.zeros(3, dtype=torch.bfloat16), "p": torch.zeros(4, 16, dtype=torch.uint8),
               "e": torch.zeros(5, dtype=torch.float8_e8m0fnu), "z": torch.zeros(0, 3)}
    st.save_file(tensors, str(tmp_path / "m.safetensors"), metadata={"format": "pt"})
    got, md, warnings = au.read_header(tmp_path / "m.safetensors")
    assert md == {"format": "pt"} and not warnings
    assert {t.name: t.nbytes for t in got} == {k: v.numel() * v.element_size() for k, v in tensors.items()}
    assert {t.name: t.dtype for t in got}["e"] == "F8_E8M0"


# ---- bad input --------------------------------------------------------------------------------------

def _file(header_obj=None, raw_header=None, payload=b"", length=None):
    raw = raw_header if raw_header is not None else json.dumps(header_obj).encode()
    n = len(raw) if length is None else length
    return struct.pack("<Q", n) + raw + payload


GOOD = {"a": {"dtype": "F8_E4M3", "shape": [2, 4], "data_offsets": [0, 8]}}
BAD_FILES = [
    (b"", "truncated"),                                                           # empty file
    (b"\x10\x00\x00", "truncated"),                                               # 3 bytes
    (_file(GOOD, payload=bytes(8), length=10_000), "beyond the file size"),       # length past EOF
    (_file(GOOD, payload=bytes(8), length=2 ** 40), "exceeds the 100,000,000"),   # absurd length
    (_file(raw_header=b'{"a": {"dtype": "F8_E4M3",'), "not valid JSON"),           # cut JSON
    (_file(raw_header=b'\xff\xfe{}'), "not valid JSON"),                           # not UTF-8
    (_file([1, 2]), "must be a JSON object"),                                     # a list
    (_file({"a": 3}), "is not an object"),                                        # entry not an object
    (_file({"a": {**GOOD["a"], "dtype": "F7"}}, payload=bytes(8)), "unknown dtype 'F7'"),
    (_file({"a": {**GOOD["a"], "shape": [2, -4]}}, payload=bytes(8)), "invalid shape"),
    (_file({"a": {**GOOD["a"], "shape": [2.0, 4]}}, payload=bytes(8)), "invalid shape"),
    (_file({"a": {**GOOD["a"], "data_offsets": [8, 0]}}, payload=bytes(8)), "invalid data_offsets"),
    (_file({"a": {**GOOD["a"], "data_offsets": [0, 9]}}, payload=bytes(9)), "span 9 bytes but"),
    (_file(GOOD, payload=bytes(4)), "out of range"),                              # payload cut short
    (_file({**GOOD, "b": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}}, payload=bytes(8)), "overlap"),
    (_file(raw_header=b'{"a": ' + json.dumps(GOOD["a"]).encode() + b', "a": ' + json.dumps(GOOD["a"]).encode()
           + b"}", payload=bytes(8)), "duplicate key"),                                # duplicate names
    (_file({"__metadata__": {"k": 1}}), "__metadata__ must map strings"),
    (_file({"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 1]}}, payload=bytes(2)), "whole number"),
    (_file(raw_header=b"[" * 100_000), "must be a JSON object"),                   # deep nesting, top level
    (_file(raw_header=b'{"a": ' + b"[" * 100_000), "nested too deeply"),          # deep nesting in an entry
]


@pytest.mark.parametrize("data,msg", BAD_FILES)
def test_bad_files(tmp_path, data, msg):
    f = tmp_path / "bad.safetensors"
    f.write_bytes(data)
    with pytest.raises(au.AuditError, match=msg) as e:
        au.read_header(f)
    assert str(f) in str(e.value)
    with pytest.raises(au.AuditError, match=msg):
        au.parse_bytes(data)


def test_bad_checkpoints(tmp_path):
    with pytest.raises(au.AuditError, match="no such file"):
        au.audit(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(au.AuditError, match="no .safetensors files"):
        au.audit(tmp_path / "empty")
    d = af.bf16_plain(tmp_path / "c")
    (d / "config.json").write_text("{")
    with pytest.raises(au.AuditError, match="config.json: not valid JSON"):
        au.audit(d)
    s = af.deepseek_block_fp8(tmp_path / "s")
    (s / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(au.AuditError, match="which is missing"):
        au.audit(s)
    (s / au.INDEX_NAME).write_text(json.dumps({"weight_map": {"x": "../../etc/passwd"}}))
    with pytest.raises(au.AuditError, match="not a plain file name"):
        au.audit(s)
    (s / au.INDEX_NAME).write_text(json.dumps({"weights": {}}))
    with pytest.raises(au.AuditError, match="weight_map"):
        au.audit(s)


def test_header_length_checked_before_reading(tmp_path):
    # a file claiming a 99 MB header is refused without allocating it
    f = tmp_path / "liar.safetensors"
    f.write_bytes(struct.pack("<Q", 99_000_000) + b"{}")
    tracemalloc.start()
    with pytest.raises(au.AuditError, match="beyond the file size"):
        au.read_header(f)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1_000_000


def _mutate(rng: random.Random, b: bytearray, header_end: int) -> bytes:
    for _ in range(rng.randint(1, 3)):
        op, hi = rng.random(), max(1, min(len(b), header_end))
        if op < 0.45 and b:    # flip a byte (mostly in the header)
            b[rng.randrange(hi)] = rng.randrange(256)
        elif op < 0.6:         # truncate
            b = b[: rng.randrange(len(b) + 1)]
        elif op < 0.85:        # insert JSON-ish or random bytes
            j = rng.randrange(hi + 1)
            b[j:j] = rng.choice([b'"', b"[", b"{", b"}", b",", b":", b"-1", b"9" * rng.randint(1, 30), b"1e999",
                                 b"NaN", b"\xff", b"[" * 3000, bytes(rng.randrange(256) for _ in range(4))])
        elif b:                # flip a bit of the length prefix
            b[rng.randrange(min(8, len(b)))] ^= 1 << rng.randrange(8)
    return bytes(b)


def test_fuzz_headers_only_raise_audit_error():
    tensors = af._llama(af.w_fp8_tensor, H=32, I=64, L=1, V=32, kv_scales="attn")
    base = af.safetensors_bytes(tensors, {"format": "pt"})
    header_end = 8 + struct.unpack("<Q", base[:8])[0]
    rng = random.Random(20261129)
    t0, outcomes = time.perf_counter(), {"ok": 0, "AuditError": 0}
    for _ in range(10_000):
        data = _mutate(rng, bytearray(base), header_end)
        try:
            au.parse_bytes(data)
            outcomes["ok"] += 1
        except au.AuditError:
            outcomes["AuditError"] += 1
    assert time.perf_counter() - t0 < 15
    assert outcomes["AuditError"] > 5_000 and outcomes["ok"] > 100  # both paths exercised


# ---- CLI --------------------------------------------------------------------------------------------

def cli(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "fp8lab.audit", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)


def test_cli_table_and_json(fixtures):
    t = cli(fixtures["gptoss_fp8_bf16_experts"])
    assert t.returncode == 0, t.stderr
    assert "verdict: labelled FP8" in t.stdout and "expert     BF16" in t.stdout
    j = cli(fixtures["deepseek_block_fp8"], "--json")
    assert j.returncode == 0, j.stderr
    r = json.loads(j.stdout)
    assert {"total_bytes", "by_dtype", "by_role", "scale_layouts", "has_kv_scales", "verdict"} <= set(r)
    assert r["scale_layouts"] == ["fp8-block-128x128"] and r["has_kv_scales"] is False


def test_cli_errors(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 2 ** 40) + b"{}")
    for path, msg in ((tmp_path / "missing", "no such file"), (bad, "exceeds")):
        r = cli(path)
        assert r.returncode == 2 and r.stderr.startswith("error:") and msg in r.stderr
        assert "Traceback" not in r.stderr


# ---- each reproduction the lab was handed, as a regression test --------------------------------------

FP8_LABEL = {"model_type": "deepseek_v3", "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                                                  "weight_block_size": [128, 128]}}


def _first_shard_checkpoint(root):
    """A block-FP8 checkpoint whose first shard holds only the embedding and two norms (as real ones do)."""
    head = af.w_bf16("model.embed_tokens", 512, 256) + [("model.layers.0.input_layernorm.weight", "BF16", [256]),
                                                      ("model.norm.weight", "BF16", [256])]
    body = (af.w_fp8_block("model.layers.0.self_attn.q_proj", 256, 256)
            + af.w_fp8_block("model.layers.0.mlp.gate_proj", 512, 256) + af.w_bf16("lm_head", 512, 256))
    return af.write_shards(root / "ckpt", [head, body], FP8_LABEL)


def test_regression_labelled_shard_without_block_weights_gets_a_verdict(tmp_path):
    # was: ValueError "max() arg is an empty sequence" in _verdict
    folder = _first_shard_checkpoint(tmp_path)
    first = au.audit(folder / "model-00001-of-00002.safetensors")
    assert first["consistent"] is None
    assert "hold no attention, MLP or expert weights" in first["verdict"] and "audit the whole" in first["verdict"]
    assert any("one shard of a sharded checkpoint" in w for w in first["warnings"])
    whole = au.audit(folder)
    assert whole["consistent"] is True and whole["scale_layouts"] == ["fp8-block-128x128"]
    assert "n/a" in au.format_summary({"first shard": first})


@pytest.mark.parametrize("shape", [[0, 10 ** 400], [0, 2 ** 64], [10 ** 400]])
def test_regression_huge_dimension_is_an_audit_error(tmp_path, shape):
    # was: OverflowError (integer division result too large for a float) in the block-size guess
    hdr = {"a.weight": {"dtype": "F8_E4M3", "shape": shape, "data_offsets": [0, 0]},
           "a.weight_scale": {"dtype": "F32", "shape": [1, 3], "data_offsets": [0, 12]}}
    f = tmp_path / "big.safetensors"
    f.write_bytes(_file(hdr, payload=bytes(12)))
    with pytest.raises(au.AuditError, match="dimension|needs"):
        au.audit(f)


def test_regression_surrogate_in_a_tensor_name(tmp_path):
    # a JSON \\ud800 escape decodes to a lone surrogate; printing the table raised UnicodeEncodeError
    d = tmp_path / "s"
    d.mkdir()
    raw = b'{"a\\ud800.k_scale": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}, ' \
          b'"a\\nb.weight": {"dtype": "BF16", "shape": [2], "data_offsets": [4, 8]}}'
    (d / "m.safetensors").write_bytes(_file(raw_header=raw, payload=bytes(8)))
    table = au.format_table(au.audit(d))
    table.encode("utf-8")  # no UnicodeEncodeError
    assert "a\\ud800.k_scale" in table and "\n" not in table.split("K/V cache scales:")[1].split("\n")[0][:-1]
    r = subprocess.run([sys.executable, "-m", "fp8lab.audit", str(d)], capture_output=True, text=True,
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8"},
                       timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "a\\ud800.k_scale" in r.stdout


def _run_audit(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "fp8lab.audit", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=timeout)


def test_regression_fifo_named_safetensors_never_opened(tmp_path):
    # was: a hang (open() on a FIFO waits for a writer). Run as a child with a timeout so a hang fails.
    d = af.bf16_plain(tmp_path / "c")
    os.mkfifo(d / "x.safetensors")
    r = _run_audit(d)
    assert r.returncode == 0, r.stderr
    assert "skipped x.safetensors: not a regular file" in r.stdout
    r = _run_audit(d / "x.safetensors")
    assert r.returncode == 2 and "not a regular file" in r.stderr and r.stderr.count("\n") == 1
    only = tmp_path / "only_fifo"
    only.mkdir()
    os.mkfifo(only / "y.safetensors")
    r = _run_audit(only)
    assert r.returncode == 2 and "non-regular file(s) skipped" in r.stderr


def test_regression_empty_weight_map_beside_a_real_file(tmp_path):
    # was: silently "no parameter tensors found."
    d = af.bf16_plain(tmp_path / "c")
    (d / au.INDEX_NAME).write_text(json.dumps({"metadata": {}, "weight_map": {}}))
    with pytest.raises(au.AuditError, match=r"weight_map is empty .*\(model.safetensors\).*audit a file directly"):
        au.audit(d)
    (d / "model.safetensors").unlink()
    with pytest.raises(au.AuditError, match="weight_map is empty .*no .safetensors files"):
        au.audit(d)


# Peak resident memory of an audit, in a fresh child. Not ru_maxrss: Linux carries it across execve, so a
# child of a big pytest process would start with the parent's peak. /proc/self/clear_refs "5" resets the
# high-water mark (VmHWM) instead.
_PEAK = ("import re, sys; from fp8lab import audit as au\n"
         "hwm = lambda: int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n"
         "open('/proc/self/clear_refs', 'w').write('5'); b = hwm(); r = au.audit(sys.argv[1])\n"
         "print(r['n_tensors'], (hwm() - b) / 1024)")


def _peak_mb(path):
    if not os.path.exists("/proc/self/clear_refs"):
        pytest.skip("needs Linux /proc to measure peak memory")
    r = subprocess.run([sys.executable, "-c", _PEAK, str(path)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-800:]
    n, mb = r.stdout.split()
    return int(n), float(mb)


def test_regression_99mb_header_costs_megabytes_not_gigabytes(tmp_path):
    # was: a 99 MB header parsed as one JSON tree (GBs for small entries; 2x the header for padding).
    f = tmp_path / "pad.safetensors"
    raw = b'{"a.weight":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}' + b" " * 99_000_000
    with open(f, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw + bytes(4))
    del raw
    n, mb = _peak_mb(f)
    assert n == 1 and mb < 20, f"{mb:.1f} MB of extra peak memory for a 99 MB header"


def test_regression_many_quantized_tensors_bounded_per_tensor(tmp_path):
    # 60,000 U8 tensors (each waits for a scale that never comes): about 40 bytes of record each, where a
    # parsed JSON tree costs about 1 KB per tensor (60 MB here)
    f = tmp_path / "many.safetensors"
    n = 60_000
    body = ",".join(f'"m{i}.weight":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{i + 1}]}}' for i in range(n))
    raw = ("{" + body + "}").encode()
    f.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(n))
    del raw, body
    got, mb = _peak_mb(f)
    assert got == n and mb < 30, f"{mb:.1f} MB for {n} tensors"


def test_regression_memory_does_not_accumulate_across_shards(tmp_path):
    # 8 shards of 1,000 tensors: the peak is that of one shard (plus the index, which is read whole, or
    # 8 bytes per name for a bare folder), not that of all 12,000 tensors at once
    np = pytest.importorskip("numpy")  # imported before tracing: its import is not the audit's memory
    parts = [[(f"model.layers.{s}.e.{i}.weight", "F8_E4M3", [4, 4]) for i in range(500)]
             + [(f"model.layers.{s}.e.{i}.weight_scale", "F32", []) for i in range(500)] for s in range(8)]
    folder = af.write_shards(tmp_path / "c", parts, FP8_LABEL)
    index_bytes = (folder / au.INDEX_NAME).stat().st_size
    tracemalloc.start()
    one = au.audit(folder / "model-00001-of-00008.safetensors")
    peak_one = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    whole = au.audit(folder)
    peak_index = tracemalloc.get_traced_memory()[1]
    (folder / au.INDEX_NAME).unlink()
    tracemalloc.reset_peak()
    bare = au.audit(folder)
    peak_bare = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert whole["n_tensors"] == bare["n_tensors"] == 8 * one["n_tensors"] == 8_000 and np
    assert whole["scale_layout_counts"]["fp8-per-tensor"] == bare["scale_layout_counts"]["fp8-per-tensor"] == 4_000
    assert peak_index < 2 * peak_one + 6 * index_bytes, (peak_one, peak_index, index_bytes)
    assert peak_bare < 2 * peak_one + 64 * 8_000, (peak_one, peak_bare)  # all tensors held: ~800 B each


def test_weight_and_scale_split_across_shards(tmp_path):
    # HF sharding can put a weight in one shard and its scale in the next: the layout must not change
    w = af.w_fp8_block("model.layers.0.mlp.up_proj", 256, 512)
    for index in (True, False):
        folder = af.write_shards(tmp_path / f"c{index}", [w[:1], w[1:] + af.w_bf16("model.embed_tokens", 64, 256)],
                                 FP8_LABEL)
        if not index:
            (folder / au.INDEX_NAME).unlink()
        r = au.audit(folder)
        assert r["scale_layouts"] == ["fp8-block-128x128"], (index, r["scale_layouts"])
        assert r["params_by_role"]["mlp"] == {"F8_E4M3": 256 * 512}


@pytest.mark.parametrize("argv", [[], ["--nope"], ["a", "b"], ["{missing}"], ["{missing}", "--json"], [""]])
def test_cli_bad_arguments_one_line(argv, tmp_path, capsys):
    argv = [a.replace("{missing}", str(tmp_path / "none")) for a in argv]
    assert au.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1 and "Traceback" not in err


def test_empty_block_tensors_do_not_divide_by_zero(tmp_path):
    # found by the fuzz suite: an expert tensor of shape [0] weighs 0 bytes; the verdict must still come
    d = tmp_path / "e"
    d.mkdir()
    af.write_safetensors(d / "m.safetensors", [("model.embed_tokens.weight", "BOOL", []),
                                               ("m.experts.down_proj_blocks", "BOOL", [0])])
    r = au.audit(d)
    assert r["verdict"] and r["consistent"] in (True, False, None)
    au.format_table(r).encode("utf-8")
