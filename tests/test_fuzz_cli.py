"""Fuzzing the command lines `python -m fp8lab.audit` and `python -m fp8lab.bandwidth` (hypothesis).

Every case asserts the contract of a lab CLI on bad input: exit status 0 or 2; on 2, exactly one line on
stderr starting "error:" and nothing on stdout; on 0, complete output (the table, or JSON that parses);
never a traceback; a bounded time per case; files written either complete or not at all. `main(argv)` runs
in-process for speed; a few cases run as real subprocesses under a 1 GB address-space limit.

Cases (derandomized, so CI runs the same ones every time; FP8LAB_FUZZ_SCALE=k multiplies them):

    audit, mutated real headers (flips, insertions, truncation, huge numbers, wrong types)  2,400
    audit, generated headers (random names incl. surrogates, dtypes, shapes, offsets)    1,200
    audit, random JSON as header / config.json / index                                     600
    bandwidth, mutated configs (every field set to null, bools, strings, huge, nested)     2,000
    bandwidth + audit, random command lines                                               1,000
    real subprocesses                                                                         24
    total                                                                                 7,224

About 2 minutes on the lab's 2-core CPU machine (tests/test_fuzz_cli.py; `pytest --durations` shows each).
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fp8lab import audit as au  # noqa: E402
from fp8lab import audit_fixtures as af  # noqa: E402
from fp8lab import bandwidth as bw  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCALE = max(1, int(os.environ.get("FP8LAB_FUZZ_SCALE", "1")))
MAX_SECONDS = 10.0  # per case; generous for a shared 2-core machine (cases take milliseconds)
COUNTS: dict = {}
OUTCOMES: dict = {}  # (module, exit status) -> cases: both paths must be exercised


def fuzz_settings(n):
    return settings(max_examples=n * SCALE, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=True)


def run_main(main, argv):
    """(status, stdout, stderr) of main(argv) in-process, with the CLI contract checked."""
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    dt = time.perf_counter() - t0
    o, e = out.getvalue(), err.getvalue()
    assert dt < MAX_SECONDS, f"{dt:.1f} s for {argv!r}"
    assert code in (0, 2), (code, argv, e[-500:])
    assert "Traceback" not in e and "Traceback" not in o
    if code == 2:
        if e.startswith("usage:") or argv and "-h" in argv or "--help" in argv:
            pass
        assert o == "" or "--help" in argv or "-h" in argv, o[:300]
        assert e.startswith("error:") and e.count("\n") == 1, e[:500]
    elif not ("--help" in argv or "-h" in argv):
        assert o.strip(), argv
        o.encode("utf-8")  # printable
        if "--json" in argv:
            json.loads(o.split("\nwrote ")[0])
    COUNTS[main.__module__] = COUNTS.get(main.__module__, 0) + 1
    OUTCOMES[(main.__module__, code)] = OUTCOMES.get((main.__module__, code), 0) + 1
    return code, o, e


# ---- audit: headers ---------------------------------------------------------------------------------

def _base_files():
    return {
        "fp8": af.safetensors_bytes(af._llama(af.w_fp8_tensor, H=32, I=64, L=1, V=32, kv_scales="attn")),
        "nvfp4": af.safetensors_bytes(af._llama(af.w_nvfp4_modelopt, H=32, I=64, L=1, V=32, kv_scales="proj")),
        "block": af.safetensors_bytes(af.w_fp8_block("model.layers.0.mlp.experts.0.up_proj", 256, 128)
                                      + af.w_bf16("model.embed_tokens", 16, 128)),
        "mxfp4": af.safetensors_bytes([("model.layers.0.mlp.experts.gate_up_proj_blocks", "U8", [2, 8, 2, 16]),
                                       ("model.layers.0.mlp.experts.gate_up_proj_scales", "U8", [2, 8, 2])]),
    }


BASES = _base_files()
TOKENS = [b'"', b"[", b"]", b"{", b"}", b",", b":", b"-1", b"1e999", b"NaN", b"null", b"true", b'"false"',
          b"\xff", b"\xc3", b"\\ud800", b'"\\ud83d"', b"[" * 2000, b"9" * 400, b"9" * 5000, b"0.5", b" " * 50,
          b'"F8_E4M3"', b'"U8"', b'"__metadata__"', b'{"a":1}', b'"shape":[0,' + b"9" * 400 + b"]"]


@st.composite
def mutated_file(draw):
    data = bytearray(BASES[draw(st.sampled_from(sorted(BASES)))])
    hdr_end = 8 + struct.unpack("<Q", bytes(data[:8]))[0]
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.integers(0, 5))
        if op == 0 and len(data) > 8:  # overwrite a header byte
            data[draw(st.integers(8, max(8, min(hdr_end, len(data)) - 1)))] = draw(st.integers(0, 255))
        elif op == 1:  # insert a JSON-ish token into the header
            j = draw(st.integers(8, max(8, min(hdr_end, len(data)))))
            data[j:j] = draw(st.sampled_from(TOKENS))
        elif op == 2:  # truncate anywhere
            del data[draw(st.integers(0, len(data))):]
        elif op == 3 and len(data) >= 8:  # change the length prefix
            n = draw(st.one_of(st.integers(0, 2 ** 64 - 1), st.integers(0, len(data) + 16)))
            data[:8] = struct.pack("<Q", n)
        elif op == 4:  # replace a number in the header by a huge or odd one
            text = bytes(data[8:hdr_end])
            nums = [m.span() for m in re.finditer(rb"\d+", text)]
            if nums:
                a, b = nums[draw(st.integers(0, len(nums) - 1))]
                data[8 + a:8 + b] = draw(st.sampled_from([b"9" * 30, b"9" * 400, b"-3", b"1.5", b"true", b'"7"',
                                                          b"null", b"[]", b"18446744073709551616"]))
        elif op == 5:  # swap a dtype string for junk
            text = bytes(data)
            m = list(re.finditer(rb'"(F8_E4M3|U8|BF16|F32)"', text))
            if m:
                a, b = m[draw(st.integers(0, len(m) - 1))].span()
                data[a:b] = draw(st.sampled_from([b"1", b'"F7"', b"null", b'["U8"]', b'"f32"', b'"F4"']))
    return bytes(data)


names = st.one_of(st.sampled_from(["model.embed_tokens.weight", "lm_head.weight", "model.layers.0.mlp.gate.weight",
                                   "model.layers.0.self_attn.k_scale", "x.weight_scale", "x.weight",
                                   "m.experts.down_proj_blocks", "m.experts.down_proj_scales", "__metadata__",
                                   "a\ud800.k_scale", "b\udcff.weight", "c\n.weight"]),
                  st.text(min_size=0, max_size=20), st.text(min_size=1, max_size=8).map(lambda s: s + ".k_scale"))
VALID_DTYPES = [d for d, b in au.DTYPE_BITS.items() if b % 8 == 0]
odd_dtypes = st.sampled_from(["F7", "", "bf16", None, 3, "F4", "F6_E2M3"])
odd_dims = st.sampled_from([2 ** 63, 2 ** 64, 10 ** 30, 10 ** 400, -1, 1.5, "2", True])


@st.composite
def generated_file(draw):
    """A header built entry by entry: valid in about two cases of three (so the report and the table are
    exercised with odd names), otherwise with one entry or the payload broken in one way."""
    n_entries = draw(st.integers(0, 6))
    broken = draw(st.integers(0, 2 * max(n_entries, 1)))  # the entry to break; >= n_entries: none
    hdr, off, how = {}, 0, None
    for i in range(n_entries):
        name = draw(names)
        if name == "__metadata__":
            hdr[name] = draw(st.dictionaries(st.text(max_size=5), st.text(max_size=10), max_size=3)) \
                if i != broken else draw(st.sampled_from([3, {"a": 1}, None]))
            continue
        dt = draw(st.sampled_from(VALID_DTYPES))
        shape = draw(st.lists(st.integers(0, 16), max_size=3))
        if i == broken:
            how = draw(st.integers(0, 4))
            if how == 0:
                dt = draw(odd_dtypes)
            elif how == 1:
                shape = shape + [draw(odd_dims)]
            elif how == 2:
                shape = [0] + shape + [draw(st.sampled_from([10 ** 400, 2 ** 64, 10 ** 30]))]
        ok = all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2 ** 40 for d in shape)
        n = math.prod(shape) * au.DTYPE_BITS.get(dt, 8) // 8 if ok and dt in au.DTYPE_BITS else 1
        offs = [off, off + n]
        if i == broken and how == 3:
            offs = draw(st.lists(st.integers(-2, 5000), max_size=3))
        entry = {"dtype": dt, "shape": shape, "data_offsets": offs}
        hdr[name] = entry if not (i == broken and how == 4) else draw(st.sampled_from([dt, [1], None]))
        off += n
    raw = json.dumps(hdr).encode()  # ensure_ascii: lone surrogates become \ud800 escapes
    payload = off if broken < 2 * max(n_entries, 1) or draw(st.booleans()) else draw(st.integers(0, off + 16))
    return struct.pack("<Q", len(raw)) + raw + bytes(min(payload, 1 << 16))


json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
                           lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.text(max_size=8), c,
                                                                                        max_size=4)), max_leaves=12)


def _audit_case(tmp: Path, data: bytes, json_flag: bool):
    f = tmp / "model.safetensors"
    f.write_bytes(data)
    argv = [str(tmp if json_flag else f)] + (["--json"] if json_flag else [])
    code, out, _ = run_main(au.main, argv)
    if code == 0 and json_flag:
        rep = json.loads(out)
        assert rep["consistent"] in (True, False, None) and isinstance(rep["verdict"], str)


@pytest.fixture(scope="module")
def tmp_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def test_fuzz_audit_mutated_headers(tmp_dir):
    @fuzz_settings(2400)
    @given(data=mutated_file(), json_flag=st.booleans())
    def case(data, json_flag):
        _audit_case(tmp_dir, data, json_flag)
    case()


def test_fuzz_audit_generated_headers(tmp_dir):
    @fuzz_settings(1200)
    @given(data=generated_file(), json_flag=st.booleans())
    def case(data, json_flag):
        _audit_case(tmp_dir, data, json_flag)
    case()


def test_fuzz_audit_random_json_beside_a_checkpoint(tmp_path):
    folder = af.deepseek_block_fp8(tmp_path / "ds")
    config = (folder / "config.json").read_text()
    index = (folder / au.INDEX_NAME).read_text()

    @fuzz_settings(600)
    @given(which=st.sampled_from(["header", "config", "label", "index", "weight_map"]), value=json_values)
    def case(which, value):
        (folder / "config.json").write_text(config)
        (folder / au.INDEX_NAME).write_text(index)
        if which == "header":
            raw = json.dumps(value).encode()
            f = tmp_path / "one.safetensors"
            f.write_bytes(struct.pack("<Q", len(raw)) + raw)
            run_main(au.main, [str(f)])
            return
        if which == "config":
            (folder / "config.json").write_text(json.dumps(value))
        elif which == "label":
            (folder / "config.json").write_text(json.dumps({**json.loads(config), "quantization_config": value}))
        elif which == "index":
            (folder / au.INDEX_NAME).write_text(json.dumps(value))
        else:
            (folder / au.INDEX_NAME).write_text(json.dumps({"weight_map": value}))
        run_main(au.main, [str(folder), "--json"])
    case()


# ---- bandwidth: configs -----------------------------------------------------------------------------

BASE_CONFIGS = [
    dict(model_type="llama", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
         num_key_value_heads=2, vocab_size=128, tie_word_embeddings=False),
    dict(model_type="mixtral", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
         num_key_value_heads=2, vocab_size=128, num_local_experts=4, num_experts_per_tok=2),
    dict(model_type="deepseek_v3", hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
         num_key_value_heads=4, vocab_size=128, moe_intermediate_size=32, first_k_dense_replace=1,
         n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, q_lora_rank=48, kv_lora_rank=32,
         qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16),
    dict(model_type="qwen3_next", hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
         num_key_value_heads=2, head_dim=16, vocab_size=128, linear_num_key_heads=2, linear_num_value_heads=4,
         linear_key_head_dim=8, linear_value_head_dim=8, num_experts=4, num_experts_per_tok=2,
         moe_intermediate_size=32, shared_expert_intermediate_size=48, mlp_only_layers=[1], decoder_sparse_step=1),
    {"model_type": "qwen3_5_moe", "text_config": dict(
        model_type="qwen3_5_moe_text", hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, vocab_size=128, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=8, linear_value_head_dim=8, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, layer_types=["linear_attention"] * 3 + ["full_attention"],
        mamba_ssm_dtype="float32"), "tie_word_embeddings": False},
]
FIELDS = sorted({k for c in BASE_CONFIGS for k in c} | {k for c in BASE_CONFIGS for k in c.get("text_config", {})}
                | {"architectures", "attention_bias", "sliding_window", "use_sliding_window", "moe_layer_freq",
                   "experts_per_token", "shared_expert_intermediate_size", "_name_or_path", "full_attention_interval",
                   "attn_output_gate", "mtp_num_hidden_layers", "max_position_embeddings", "layer_types"})
odd_values = st.one_of(
    json_values, st.sampled_from([None, True, False, "false", "true", "4", "", 0, -1, 1, 2, 10 ** 9, 10 ** 30,
                                  10 ** 400, 2 ** 31, 1.5, 1e308, [], {}, [0], [10 ** 9], ["a"], [[1]]]),
    st.integers(-5, 300))


@st.composite
def mutated_config(draw):
    c = json.loads(json.dumps(draw(st.sampled_from(BASE_CONFIGS))))
    target = c["text_config"] if "text_config" in c and draw(st.booleans()) else c
    for _ in range(draw(st.integers(1, 4))):
        key = draw(st.sampled_from(FIELDS))
        if draw(st.integers(0, 4)) == 0:
            target.pop(key, None)
        else:
            target[key] = draw(odd_values)
    return c


BW_FLAGS = st.lists(st.one_of(
    st.tuples(st.just("--batch"), st.sampled_from(["1", "3", "64", "0", "-2", "x", "1e3", str(2 ** 20), "9" * 50])),
    st.tuples(st.just("--context"), st.sampled_from(["0", "1", "8192", "-1", "2147483648", "abc"])),
    st.tuples(st.just("--gpu"), st.sampled_from(["H200", "gb10", "h200-measured", "B200", "H100", "A100", ""])),
    st.tuples(st.just("--kv-dtype"), st.sampled_from(["bf16", "fp8", "nvfp4", "int4"])),
    st.tuples(st.just("--policy"), st.sampled_from(["linear", "experts", "all", "none"])),
    st.tuples(st.just("--embedding-read"), st.sampled_from(["rows", "table", "cols"])),
    st.tuples(st.just("--compare-gpus"), st.sampled_from(["H200,GB10", "GB10", ",", "X,Y", "H200-measured"])),
    st.tuples(st.just("--json")), st.tuples(st.just("--bogus")),
), max_size=4).map(lambda xs: [a for x in xs for a in x])


def test_fuzz_bandwidth_configs(tmp_dir):
    path = tmp_dir / "config.json"

    @fuzz_settings(2000)
    @given(cfg=mutated_config(), flags=BW_FLAGS, raw=st.integers(0, 30))
    def case(cfg, flags, raw):
        if raw == 0:  # now and then: not even JSON
            path.write_bytes(json.dumps(cfg).encode()[: len(json.dumps(cfg)) // 2] + b"\xff")
        else:
            path.write_text(json.dumps(cfg))
        code, out, _ = run_main(bw.main, [str(path), *flags])
        if code == 0 and "--json" in flags:
            rep = json.loads(out)
            assert all(v > 0 for v in rep["tokens_per_s_ceiling"].values())
    case()


def test_fuzz_command_lines(tmp_dir):
    cfg = tmp_dir / "good_config.json"
    cfg.write_text(json.dumps(BASE_CONFIGS[1]))
    ckpt = af.fp8_per_tensor(tmp_dir / "ckpt")
    words = st.one_of(st.sampled_from([str(cfg), str(ckpt), str(ckpt / "model.safetensors"), str(tmp_dir),
                                       "/dev/null", "/nonexistent/x.json", "org/model", "", "-", "--", "--json",
                                       "--help", "--batch", "--gpu", "-x", "a" * 300, "\x00", "\udcff"]),
                      st.text(max_size=12).filter(lambda s: not re.fullmatch(r"[\w.\-]+/[\w.\-]+", s)))

    @fuzz_settings(1000)
    @given(which=st.sampled_from(["audit", "bandwidth"]), argv=st.lists(words, max_size=5))
    def case(which, argv):
        # (hub-like ids would make bandwidth import transformers and try the network: the subprocess test
        # below covers them with HF_HUB_OFFLINE=1)
        argv = [a for a in argv if not re.fullmatch(r"[\w.\-]+/[\w.\-]+", a) or a.startswith("/")]
        run_main(au.main if which == "audit" else bw.main, argv)
    case()


def test_fuzz_roofline_files_complete_or_absent(tmp_path):
    """--roofline writes two files through the atomic writers: after any run both exist and parse, or
    neither exists (a bad config fails before anything is written)."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps(BASE_CONFIGS[0]))
    for i, cfg in enumerate([BASE_CONFIGS[0], {"hidden_size": "x"}, BASE_CONFIGS[3], {**BASE_CONFIGS[1],
                                                                                      "num_experts_per_tok": 9}]):
        path = tmp_path / f"c{i}.json"
        path.write_text(json.dumps(cfg))
        out = tmp_path / f"out{i}"
        code, _, _ = run_main(bw.main, [str(path), "--roofline", str(out)])
        files = sorted(p.name for p in out.glob("*")) if out.exists() else []
        if code == 0:
            assert files == ["roofline.json", "roofline.png"]
            json.loads((out / "roofline.json").read_text())
            assert (out / "roofline.png").read_bytes()[:4] == b"\x89PNG"
        else:
            assert files == []
    (tmp_path / "file").write_text("x")
    assert run_main(bw.main, [str(good), "--roofline", str(tmp_path / "file")])[0] == 2


# ---- a few real processes -------------------------------------------------------------------------------

_LIMIT = "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30)); "


def _subprocess(module, args):
    code = _LIMIT + f"sys.argv = ['{module}'] + sys.argv[1:]; runpy.run_module('{module}', run_name='__main__')"
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PYTHONIOENCODING": "utf-8"})
    assert r.returncode in (0, 2), (args, r.returncode, r.stderr[-800:])
    assert "Traceback" not in r.stderr, r.stderr[-800:]
    if r.returncode == 2:
        assert r.stderr.startswith("error:") and r.stderr.count("\n") == 1 and not r.stdout
    COUNTS["subprocess"] = COUNTS.get("subprocess", 0) + 1
    return r


def test_fuzz_real_processes(tmp_path):
    @settings(max_examples=10, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=mutated_file())
    def audit_case(data):
        f = tmp_path / "m.safetensors"
        f.write_bytes(data)
        _subprocess("fp8lab.audit", [str(f)])

    @settings(max_examples=10, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(cfg=mutated_config())
    def bw_case(cfg):
        p = tmp_path / "config.json"
        p.write_text(json.dumps(cfg))
        _subprocess("fp8lab.bandwidth", [str(p), "--gpu", "GB10"])

    audit_case()
    bw_case()
    for args in (["no-such-org/no-such-model"], ["org/model", "--json"]):
        r = _subprocess("fp8lab.bandwidth", args)  # hub ids offline: one clear line
        assert r.returncode == 2 and "hub id failed" in r.stderr
    d = af.bf16_plain(tmp_path / "ckpt")
    os.mkfifo(d / "z.safetensors")
    assert _subprocess("fp8lab.audit", [str(d)]).returncode == 0  # the FIFO is skipped, not opened
    assert _subprocess("fp8lab.audit", [str(d / "z.safetensors")]).returncode == 2


def test_zz_case_count():
    """Runs last in this file: the number of cases the suite ran (printed with -s, asserted here)."""
    total = sum(COUNTS.values())
    print(f"\nfuzz cases: {COUNTS} total {total}; exit statuses: {OUTCOMES}")
    if len(COUNTS) >= 3:  # the whole file ran (not a -k selection)
        assert total >= 7000 * SCALE
        for module in ("fp8lab.audit", "fp8lab.bandwidth"):  # both the success and the error path, often
            assert OUTCOMES.get((module, 0), 0) > 300 and OUTCOMES.get((module, 2), 0) > 300, OUTCOMES


@pytest.mark.parametrize("text,want", [("e4m3, e5m2", ["e4m3", "e5m2"]), ("one", ["one"]), (" a ,b", ["a", "b"])])
def test_split_list_items(text, want):
    from fp8lab.cli import split_list

    assert split_list(text, "--x") == want


@pytest.mark.parametrize("text,why", [("", "is empty"), (" , ", "is empty"), ("a,,b", "empty item"), ("a,", "empty item")])
def test_split_list_refuses_empty_values_and_items(text, why):
    from fp8lab.cli import UsageError, split_list

    with pytest.raises(UsageError, match=why):
        split_list(text, "--configs")
