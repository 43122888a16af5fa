"""Bad command lines of kv_bits, outlier_study, serving_claims, kv_drift, bandwidth and kernels.sass: one line
`error: ...`, exit status 2, nothing written, and no model loaded (seconds)."""
import os
from pathlib import Path

import pytest

from fp8lab import bandwidth, data, kv_bits, kv_drift, models, outlier_study, serving_claims, store
from fp8lab.kernels import sass
from tests import tiny
from tests.one_line import one_line_error

REPO = Path(__file__).resolve().parents[1]
LLAMA3 = REPO / "tests" / "data" / "llama3_8b_config.json"


@pytest.fixture
def no_model(monkeypatch):
    """Any model or corpus load fails the test: the checks must come first."""
    def refuse(*a, **k):
        raise AssertionError("a model or corpus was loaded before the arguments were checked")
    monkeypatch.setattr(models, "load_model", refuse)
    monkeypatch.setattr(data, "load_corpus", refuse)


@pytest.fixture
def hub_env(monkeypatch):
    """HF_*_OFFLINE unset for the test and restored after it (main sets them)."""
    for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(k, "x")
        monkeypatch.delenv(k)


# ---- kv_bits ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, words", [
    (["--threads", "100000"], ["--threads", f"1 .. {os.cpu_count() or 1}"]),
    (["--threads", "0"], ["--threads"]),
    (["--configs", ""], ["--configs is empty"]),
    (["--configs", ","], ["--configs is empty"]),
    (["--configs", "nvfp4,,turbo4"], ["empty item"]),
    (["--configs", "nvfp4,"], ["empty item"]),
    (["--corpus", "bogus"], ["unknown --corpus 'bogus'", "ppl, ppl_lambada"]),
    (["--corpus", "ppl_wikitext"], ["unknown --corpus"]),
])
def test_kv_bits_refuses_up_front(argv, words, capsys, tmp_path, no_model):
    assert kv_bits.main(argv + ["--out", str(tmp_path / "o")]) == 2
    err = one_line_error(capsys, *words)
    assert "boolq" not in err
    assert not (tmp_path / "o").exists()


def test_kv_bits_seq_len_beyond_the_context_is_refused_before_the_model_loads(capsys, tmp_path, monkeypatch, no_model,
                                                                             hub_env):
    monkeypatch.setattr(models, "context_length", lambda name=None: 4096)
    assert kv_bits.main(["--seq-len", "4097", "--out", str(tmp_path / "o")]) == 2
    one_line_error(capsys, "--seq-len 4097", "context of 4096 tokens")
    assert not (tmp_path / "o").exists()


def test_kv_bits_help_names_the_corpora_and_the_thread_bound():
    text = " ".join(kv_bits._parser().format_help().split())
    assert "ppl or ppl_lambada" in text
    assert f"1 .. {os.cpu_count() or 1}" in text


# ---- outlier_study ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, words", [
    (["--parts", "stats,,scaling"], ["--parts", "empty item"]),
    (["--parts", ""], ["--parts is empty"]),
    (["--formats", "e4m3,"], ["--formats", "empty item"]),
    (["--alphas", "0.25,,0.75"], ["--alphas", "empty item"]),
    (["--nope"], ["unrecognized arguments: --nope"]),
    (["--windows", "x"], ["--windows"]),
    (["--seq-len", "129"], ["beyond the model's context of 128 tokens"]),
    (["--out", ""], ["--out is empty"]),
    (["--out", str(store.REFERENCE / "outliers")], ["committed reference", "--record"]),
])
def test_outlier_study_refuses_up_front(argv, words, capsys, tmp_path, monkeypatch, no_model, hub_env):
    monkeypatch.setattr(models, "context_length", lambda name=None: tiny.CONTEXT)
    args = argv if "--out" in argv else argv + ["--out", str(tmp_path / "o")]
    assert outlier_study.main(args) == 2
    one_line_error(capsys, *words)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv", [["--windows", "100000"], ["--cal-windows", "100000"]])
def test_outlier_study_too_many_windows_is_one_line(argv, capsys, tmp_path, monkeypatch, hub_env):
    tiny.install(monkeypatch.setattr)          # a tiny corpus: 100000 windows of 64 tokens do not fit
    assert outlier_study.main(argv + ["--seq-len", "64", "--out", str(tmp_path / "o")]) == 2
    one_line_error(capsys, "asked for")
    assert not (tmp_path / "o").exists()       # the lock's folder is removed again


def test_outlier_study_unknown_model_is_one_line_and_offline(capsys, tmp_path, hub_env):
    assert outlier_study.main(["--model", str(tmp_path / "nonexistent"), "--out", str(tmp_path / "o")]) == 2
    one_line_error(capsys, "unknown model", "HF_HUB_OFFLINE=1")
    assert os.environ.get("HF_HUB_OFFLINE") == "1" and os.environ.get("HF_DATASETS_OFFLINE") == "1"
    assert not (tmp_path / "o").exists()


def _lock_spy(monkeypatch, seen):
    def lock(folder, command="", wait=0.0):
        seen.append(Path(folder))
        raise store.FolderBusy(f"{folder} is being written by a test")
    monkeypatch.setattr(store, "FolderLock", lock)
    monkeypatch.setattr(models, "context_length", lambda name=None: 8192)


def test_outlier_study_default_out_is_runs_and_outputs_needs_record(capsys, tmp_path, monkeypatch, no_model,
                                                                    hub_env):
    monkeypatch.chdir(tmp_path)
    seen = []
    _lock_spy(monkeypatch, seen)
    assert outlier_study.main([]) == 2
    assert outlier_study.main(["--record"]) == 2
    assert seen == [Path("runs") / "outliers", store.REFERENCE / "outliers"]
    assert capsys.readouterr().err.count("error: ") == 2
    assert (store.REFERENCE / "outliers" / "stats.json").is_file()        # the committed results stay put


def test_outlier_study_online_leaves_the_hub_settings(capsys, tmp_path, monkeypatch, no_model, hub_env):
    seen = []
    _lock_spy(monkeypatch, seen)
    assert outlier_study.main(["--online", "--out", str(tmp_path / "o")]) == 2
    assert "HF_HUB_OFFLINE" not in os.environ and "HF_DATASETS_OFFLINE" not in os.environ
    assert outlier_study.main(["--out", str(tmp_path / "o")]) == 2
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert len(seen) == 2


# ---- serving_claims --------------------------------------------------------------------------------------------
def test_serving_claims_help_and_unknown_argument(capsys):
    assert serving_claims.main(["--bogus"]) == 2
    one_line_error(capsys, "unrecognized arguments: --bogus")
    assert serving_claims.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m fp8lab.serving_claims") and "bandwidth ceiling" in out
    assert "ceiling_tok_s" not in out and "seed002" not in out            # help only: no table


def test_serving_claims_prints_the_table(capsys):
    assert serving_claims.main([]) == 0
    assert "seed002-qwen3.5-35b-131" in capsys.readouterr().out


# ---- kv_drift, bandwidth: empty list items ---------------------------------------------------------------------
@pytest.mark.parametrize("configs", ["baseline,,e4m3-dyn", "e4m3-dyn,"])
def test_kv_drift_empty_config_item(configs, capsys, tmp_path, no_model, hub_env):
    assert kv_drift.main(["--configs", configs, "--out", str(tmp_path / "o")]) == 2
    one_line_error(capsys, "--configs", "empty item")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("gpus, words", [("H200,,GB10", ["empty item"]), (",", ["--compare-gpus is empty"])])
def test_bandwidth_empty_gpu_item(gpus, words, capsys):
    assert bandwidth.main([str(LLAMA3), "--compare-gpus", gpus]) == 2
    one_line_error(capsys, "--compare-gpus", *words)


# ---- kernels.sass: a long --summary says what it is doing ------------------------------------------------------
def test_sass_build_all_reports_each_pair(monkeypatch):
    monkeypatch.setattr(sass, "kernels", lambda f, cc: {f"{f}-{cc}": None})
    pairs = [("a.cu", 90), ("b.cu", 90), ("a.cu", 121)]
    lines = []
    built = sass.build_all(pairs, workers=2, progress=lines.append)
    assert list(built) == pairs
    assert len(lines) == 1 + len(pairs) and "3 (source, arch) pairs" in lines[0]
    assert sorted(line.split("]")[0] for line in lines[1:]) == ["[1/3", "[2/3", "[3/3"]
    assert {p for line in lines[1:] for p in pairs if f"{p[0]} sm_{p[1]}:" in line} == set(pairs)
    assert all("s left" in line for line in lines[1:])
    assert sass.build_all(pairs[:1], progress=None) == {pairs[0]: {"a.cu-90": None}}     # quiet by default


@pytest.mark.parametrize("argv, words", [
    (["--summary", "--archs", "sm_90,,sm_121"], ["--archs", "empty item"]),
    (["--summary", "--archs", ""], ["--archs is empty"]),
    (["--summary", "--out", str(store.REFERENCE / "kernels" / "sass")], ["--record"]),   # the committed summary
    ([], ["give --summary, or --source"]),
    (["--bogus"], ["unrecognized arguments: --bogus"]),
])
def test_sass_command_line_refuses_in_one_line(argv, words, capsys, monkeypatch):
    monkeypatch.setattr(sass, "write_summary", lambda *a, **k: pytest.fail("compiled before the arguments were checked"))
    assert sass.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert all(w in err for w in words), err
