"""The 4-bit KV experiment: configuration names, disjoint windows, causality through a real model, argument
errors (exit 2 before any model is loaded), and one end-to-end run on a tiny random Llama."""
import argparse
import types

import numpy as np
import pytest
import torch

from fp8lab import kv_bits as kb
from fp8lab import kv_quant as kq
from fp8lab import recipes as R
from fp8lab import store
from tests.test_recipes import tiny_llama
from tests.tiny import TEXT


@pytest.fixture
def small_corpus(monkeypatch):
    """A 12k-character corpus instead of the 1.6 MB BoolQ text: the end-to-end runs need a few windows only."""
    from fp8lab import data

    monkeypatch.setattr(data, "load_corpus", lambda name: data.Corpus(name, TEXT, ["tests/tiny.py"], 1))


def llama(n_layers=10):
    base = tiny_llama()
    return type(base)(type(base.config)(**{**base.config.to_dict(), "num_hidden_layers": n_layers})).eval()


class CharTokenizer:
    """One token per character (mod 256): enough for fp8lab.data.token_windows and the tiny model."""

    bos_token_id = None

    def __call__(self, text, add_special_tokens=False, **kw):
        return {"input_ids": [ord(c) % 256 for c in text]}

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def test_parse_config():
    assert kb.parse_config("e4m3-dyn") == ("e4m3-dyn", None, None)
    assert kb.parse_config("nvfp4-hp2") == ("nvfp4", "hp", 2)
    assert kb.parse_config("turbo4") == ("turbo4", None, None)
    assert kb.parse_config("nvfp4-sens4") == ("nvfp4", "sens", 4)
    assert kb.parse_config("nvfp4-L7") == ("nvfp4", "L", 7)
    for bad in ("nvfp5", "nvfp4-hp", "turbo4-xx2", "e4m3"):
        with pytest.raises(kb.UsageError, match="valid"):
            kb.parse_config(bad)


def test_make_plan_keeps_the_right_layers():
    p = kq.KV4Params(64)
    assert kb.make_plan("nvfp4-hp2", p, 10).kept_layers() == {0, 1, 8, 9}
    assert kb.make_plan("nvfp4-sens3", p, 10, ranking=[5, 0, 7, 1]).kept_layers() == {5, 0, 7}
    assert kb.make_plan("nvfp4-L4", p, 10).kept_layers() == set(range(10)) - {4}
    with pytest.raises(kb.UsageError, match="leaves nothing"):
        kb.make_plan("nvfp4-hp5", p, 10)
    with pytest.raises(kb.UsageError, match="sensitivity"):
        kb.make_plan("nvfp4-sens2", p, 10)


def test_windows_are_disjoint():
    text = "".join(chr(0x4E00 + i) for i in range(20000))       # every character (token) distinct
    tok = type("T", (CharTokenizer,), {"__call__": lambda self, t, **k: {"input_ids": [ord(c) for c in t]}})()
    test, cal, sens = kb.split_windows(tok, text, 512, 5, (3, 128), (6, 100), seed=1)
    assert test.shape == (5, 512) and cal.shape == (3, 128) and sens.shape == (6, 100)
    sets = [set(x.flatten().tolist()) for x in (test, cal, sens)]
    assert sum(len(s) for s in sets) == len(set().union(*sets)) == 5 * 512 + 3 * 128 + 6 * 100
    again = kb.split_windows(tok, text, 512, 5, (3, 128), (6, 100), seed=1)
    assert all(torch.equal(a, b) for a, b in zip((test, cal, sens), again))       # seeded


@pytest.mark.parametrize("config", ["nvfp4", "nvfp4-hp1", "turbo4", "turbo4-gauss", "nvfp4-rot", "e4m3-dyn"])
def test_configs_are_causal_through_the_model(config):
    """Logits at positions <= t must not change when only tokens after t change (the cache stores each token
    from that token alone); a per-tensor dynamic scale over the window would fail this."""
    model = llama(4)
    ids = torch.randint(0, 256, (1, 48), generator=torch.Generator().manual_seed(0))
    other = ids.clone()
    t = 20
    other[:, t + 1:] = torch.randint(0, 256, (1, 48 - t - 1), generator=torch.Generator().manual_seed(1))
    cal = kq.KVCalibration(32)
    with R.install_kv_functions(model, cal.make), torch.no_grad():
        model(torch.randint(0, 256, (1, 64), generator=torch.Generator().manual_seed(2)))
    params = cal.fit()
    out = []
    for x in (ids, other):
        with kb.kv_config(model, config, x, params, 4), torch.no_grad():
            out.append(model(x).logits)
    assert torch.equal(out[0][:, :t + 1], out[1][:, :t + 1])
    assert not torch.equal(out[0][:, t + 1:], out[1][:, t + 1:])


def test_a_per_tensor_dynamic_kv_scale_fails_the_causality_check():
    model = llama(2)
    ids = torch.randint(0, 256, (1, 48), generator=torch.Generator().manual_seed(0))
    other = ids.clone()
    other[:, 30:] = 7
    out = []
    for x in (ids, other):
        with R.applied(model, "e4m3-kv"), torch.no_grad():      # one scale per layer over the whole window
            out.append(model(x).logits)
    assert not torch.equal(out[0][:, :30], out[1][:, :30])


@pytest.mark.parametrize("argv,msg", [
    (["--windows", "1"], "--windows"),
    (["--configs", "fp6"], "valid"),
    (["--cal-len", "9000"], "--cal-len"),
    (["--sens-windows", "0", "--configs", "nvfp4-sens4"], "sensitivity"),
    (["--sens-windows", "1"], "--sens-windows"),
    (["--seq-len", "64"], "--seq-len"),
    (["--n-boot", "10"], "--n-boot"),
])
def test_cli_rejects_bad_arguments_in_one_line(argv, msg, capsys, tmp_path):
    assert kb.main(argv + ["--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and msg in err and "\n" not in err
    assert not (tmp_path / "o").exists()                     # nothing written, no model loaded


def test_cli_refuses_a_file_as_out_and_a_busy_folder(capsys, tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    assert kb.main(["--out", str(f)]) == 2
    assert "not a folder" in capsys.readouterr().err
    with store.FolderLock(tmp_path / "busy", "someone else"):
        assert kb.main(["--out", str(tmp_path / "busy")]) == 2
    assert "being written by" in capsys.readouterr().err
    assert kb.main(["--plot", "--out", str(tmp_path / "none")]) == 2
    capsys.readouterr()
    assert kb.main(["--out", str(store.REFERENCE / "kv_bits")]) == 2       # the committed folder needs --record
    assert "--record" in capsys.readouterr().err


def test_end_to_end_on_a_tiny_model(tmp_path, small_corpus):
    model = llama(10)
    lm = types.SimpleNamespace(model=model, tokenizer=CharTokenizer(), name="tiny", source="random",
                               file_sha256="", model_note="a tiny random Llama (test)")
    args = argparse.Namespace(model=None, corpus="ppl", windows=3, seq_len=96, cal_windows=1, cal_len=64,
                              sens_windows=2, sens_len=48, configs=list(kb.DEFAULT_CONFIGS) + ["turbo4-g64"],
                              seed=0, n_boot=100, out=str(tmp_path), plot=False, command="test")
    summary = kb.run(lm, args, tmp_path, say=lambda s: None)
    for f in ("ppl_by_position.csv", "ppl_compare.csv", "nll_by_bucket.csv", "kv_error_by_layer.csv",
              "sensitivity.csv", "layers.csv", "summary.json", "provenance.json", "ppl_by_position.png",
              "kv_error_by_layer.png", "sensitivity.png"):
        assert (tmp_path / f).is_file(), f
    assert not (tmp_path / ".partial").exists()
    res = kb.load(tmp_path)
    assert {r["config"] for r in res["ppl"]} == set(args.configs)
    assert len(res["errors"]) == 10 * 2 * len(kb.ERROR_METHODS)
    assert len(res["sensitivity"]) == 10 and len(summary["sensitivity_ranking"]) == 10
    assert summary["bits_per_element"]["nvfp4"] == summary["bits_per_element"]["turbo4"] == 4.5
    assert all(v.startswith("causal") for v in summary["causal"].values())
    errs = {(r["layer"], r["kind"], r["method"]): float(r["mean_rel_err"]) for r in res["errors"]}
    assert all(0 < errs[(str(l), k, "nvfp4")] < 0.3 for l in range(10) for k in ("key", "value"))
    assert all(errs[(str(l), k, "e4m3-dyn")] < errs[(str(l), k, "nvfp4")] for l in range(10) for k in ("key", "value"))
    base = [r for r in res["ppl"] if r["config"] == "baseline"]
    assert all(r["delta_pct"] == 0 for r in base)
    v = kb.verdicts(res)
    assert [c for c, _, _ in v][0].startswith("seed 000") and len(v) == 3
    assert all(verdict for _, verdict, _ in v)
    # the whole-window paired comparison is consistent with the sums it is built from
    d, lo, hi = kb.pooled(res, "nvfp4", "baseline")
    assert lo <= d <= hi
    # a rerun into the same folder redraws only with --plot
    assert kb.main(["--plot", "--out", str(tmp_path)]) == 0


def test_an_interrupted_run_resumes_and_gives_the_same_result(tmp_path, monkeypatch, small_corpus):
    lm = types.SimpleNamespace(model=llama(4), tokenizer=CharTokenizer(), name="tiny", source="random",
                               file_sha256="", model_note="a tiny random Llama (test)")

    def args(out):
        return argparse.Namespace(model=None, corpus="ppl", windows=2, seq_len=64, cal_windows=1, cal_len=32,
                                  sens_windows=0, sens_len=32, configs=["baseline", "nvfp4", "turbo4"], seed=0,
                                  n_boot=100, out=str(out), plot=False, command="test")

    real = kb.kv_config

    def killed_at_turbo4(model, name, *a, **k):
        if name == "turbo4":
            raise KeyboardInterrupt
        return real(model, name, *a, **k)

    monkeypatch.setattr(kb, "kv_config", killed_at_turbo4)
    with pytest.raises(KeyboardInterrupt):
        kb.run(lm, args(tmp_path / "a"), tmp_path / "a", say=lambda s: None)
    assert (tmp_path / "a" / ".partial").is_dir() and not (tmp_path / "a" / "summary.json").exists()
    monkeypatch.setattr(kb, "kv_config", real)
    kb.run(lm, args(tmp_path / "a"), tmp_path / "a", say=lambda s: None)
    reused = store.read_json(tmp_path / "a" / "provenance.json")["resumed_pieces"]
    assert "calibration" in reused and "nll-nvfp4-1" in reused and not any("turbo4" in r for r in reused)
    kb.run(lm, args(tmp_path / "b"), tmp_path / "b", say=lambda s: None)        # uninterrupted
    assert store.read_rows(tmp_path / "a" / "ppl_by_position.csv") == store.read_rows(tmp_path / "b" / "ppl_by_position.csv")
    assert store.read_rows(tmp_path / "a" / "kv_error_by_layer.csv") == store.read_rows(tmp_path / "b" / "kv_error_by_layer.csv")
