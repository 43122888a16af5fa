"""Bad command lines of fp8lab.sensitivity, fp8lab.frontier and fp8lab.control: one `error:` line, exit 2,
nothing written, and no model loaded (every check fires before the work starts)."""
import os

import pytest
import torch

from fp8lab import control as C
from fp8lab import distributed as D
from fp8lab import frontier as F
from fp8lab import sensitivity as S
from tests.one_line import one_line_error


@pytest.fixture(autouse=True)
def no_model(monkeypatch):
    """A check that fires late would load a model: fail the test instead."""
    def boom(*a, **k):
        raise AssertionError("a model was loaded before the command line was checked")
    monkeypatch.setattr(S, "load_for_parts", boom)
    monkeypatch.setattr(C, "load_minilm", boom)


TOP = 4 * (os.cpu_count() or 1)        # the documented bound on --workers and --threads


@pytest.mark.parametrize("args,words", [
    (["--threads", "0"], ["--threads 0"]),
    (["--threads", "-2"], ["--threads -2"]),
    (["--threads", "100000"], ["--threads 100000", str(TOP)]),
    (["--device", "tpu"], ["--device 'tpu'"]),
    (["--scheduler", "bogus"], ["--scheduler 'bogus'", "host:port"]),
    (["--scheduler", "tcp://host:0"], ["--scheduler"]),
    (["--scheduler", "tcp://host"], ["--scheduler"]),
    (["--workers", "-1"], ["--workers -1"]),
    (["--workers", "10000"], ["--workers 10000", str(TOP)]),
    (["--windows", "1"], ["--windows >= 2"]),
    (["--parts", ""], ["--parts is empty"]),
    (["--parts", "layers,,kv"], ["--parts", "empty item"]),
    (["--parts", "layers,heads"], ["unknown part group"]),
    (["--formats", ""], ["--formats is empty"]),
    (["--formats", "e4m3,"], ["empty item"]),
    (["--windows", "x"], ["--windows", "--help"]),     # argparse's own errors: one line, no usage block
    (["--no-such-flag"], ["unrecognized arguments"]),
])
def test_sensitivity_bad_input(tmp_path, capsys, args, words):
    out = tmp_path / "sens"
    assert S.main(["--model", "tiny-llama", "--out", str(out), *args]) == 2
    one_line_error(capsys, *words, no_stdout=True)
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_sensitivity_cuda_without_cuda(tmp_path, capsys):
    out = tmp_path / "sens"
    assert S.main(["--model", "tiny-llama", "--out", str(out), "--device", "cuda:0"]) == 2
    one_line_error(capsys, "--device cuda:0", "no CUDA", no_stdout=True)
    assert not out.exists()


def test_sensitivity_help_is_exit_0(capsys):
    assert S.main(["--help"]) == 0
    assert "at most 4 per core" in " ".join(capsys.readouterr().out.split())


def test_scheduler_address_form():
    for good in ("tcp://10.0.0.5:8786", "localhost:8786", "tls://[::1]:8786"):
        assert D.check_scheduler(good) == good
    for bad in ("bogus", "tcp://host", "host:0", "host:65536", "tcp://host:port", ""):
        with pytest.raises(ValueError, match="host:port"):
            D.check_scheduler(bad)


def test_client_bad_address_is_a_distributed_error():
    pytest.importorskip("distributed")
    with pytest.raises(D.DistributedError, match="cannot reach"):
        D._client("bogus", 1, 1, timeout="2s")


def test_worker_device_errors_are_one_line():
    with pytest.raises(D.DistributedError, match="use cpu or cuda"):
        D.pick_device("tpu")
    assert D.pick_device("cpu") == "cpu"


@pytest.mark.parametrize("kw", [dict(threads=0), dict(threads=-2), dict(workers=-1)])
def test_run_cells_refuses_bad_sizes_before_writing(tmp_path, kw):
    c = D.Cell("a", "tiny-llama", {"weights": []}, {"corpus": "random", "seq_len": 8, "n_windows": 2})
    with pytest.raises(ValueError, match="threads|workers"):
        D.run_cells([c], tmp_path / "cells", **kw)
    assert not (tmp_path / "cells").exists()


# ---- frontier ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args,words", [
    (["--gpu", "FOO=nan"], ["--gpu 'FOO=nan'", "finite"]),
    (["--gpu", "FOO=-1"], ["--gpu 'FOO=-1'"]),
    (["--gpu", "FOO=0"], ["--gpu 'FOO=0'"]),
    (["--gpu", "FOO=inf"], ["--gpu 'FOO=inf'"]),
    (["--gpu", "=3"], ["--gpu '=3'"]),
    (["--gpu", "NOPE"], ["unknown GPU"]),
    (["--context", "99999999999"], ["context", "2,147,483,647"]),
    (["--context", "-1"], ["context"]),
    (["--batch", "0"], ["batch"]),
    (["--budget", "0.5,,0.7"], ["--budget", "empty item"]),
    (["--budget", ""], ["--budget is empty"]),
    (["--budget", "0.5,x"], ["bad budget 'x'"]),
    (["--formats", "e4m3,,nvfp4"], ["--formats", "empty item"]),
    (["--windows", "1"], ["--windows >= 2"]),
    (["--threads", "0"], ["--threads 0"]),
    (["--workers", "-1"], ["--workers -1"]),
    (["--scheduler", "bogus"], ["--scheduler"]),
    (["--no-such-flag"], ["unrecognized arguments"]),
])
def test_frontier_bad_input(tmp_path, capsys, args, words):
    out = tmp_path / "front"
    rc = F.main(["--model", "tiny-llama", "--sensitivity", str(tmp_path / "no-sens"), "--out", str(out), *args])
    assert rc == 2
    one_line_error(capsys, *words, no_stdout=True)
    assert not out.exists()


def test_frontier_ceilings_accept_names_and_positive_bandwidths():
    got = F.ceilings(["FOO=2.5", "H200"])
    assert got["FOO"] == 2.5 and got["H200"] > 0


def test_frontier_bad_context_with_bytes_only(tmp_path, capsys):
    assert F.main(["--model", "tiny-llama", "--sensitivity", str(tmp_path), "--bytes-only",
                   "--context", "99999999999"]) == 2
    one_line_error(capsys, "context", no_stdout=True)


# ---- control -----------------------------------------------------------------------------------------------
def _control(tmp_path, *args):
    return C.main(["--recipes", "bf16-w", "--pairs", "2", "--lm-sqnr", "", "--out", str(tmp_path / "c"), *args])


def test_control_missing_lm_is_an_error_and_writes_nothing(tmp_path, capsys):
    assert _control(tmp_path, "--lm", str(tmp_path / "nonexistent.csv")) == 2
    one_line_error(capsys, "--lm", "no such file", no_stdout=True)
    assert not (tmp_path / "c").exists()


def test_control_unreadable_lm_is_an_error(tmp_path, capsys):
    assert _control(tmp_path, "--lm", str(tmp_path)) == 2               # a folder
    one_line_error(capsys, "not a file", no_stdout=True)
    bad = tmp_path / "cut.csv"
    bad.write_text("model,recipe\nm,e4m3")                               # cut short: no final newline
    assert _control(tmp_path, "--lm", str(bad)) == 2
    one_line_error(capsys, "cannot be read", no_stdout=True)
    bad.write_bytes(b"model,recipe\n\xff\xfe,x\n")                       # not UTF-8
    assert _control(tmp_path, "--lm", str(bad)) == 2
    one_line_error(capsys, "cannot be read", no_stdout=True)
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("args,words", [
    (["--lm", "a.csv,,b.csv"], ["--lm", "empty item"]),
    (["--recipes", "bf16-w,,e4m3-w"], ["--recipes", "empty item"]),
    (["--recipes", ""], ["--recipes is empty"]),
    (["--recipes", "fp7-w"], ["unknown control recipe"]),
    (["--pairs", "1"], ["--pairs"]),
    (["--pairs", "x"], ["--pairs", "--help"]),
    (["--no-such-flag"], ["unrecognized arguments"]),
])
def test_control_bad_lists_and_flags(tmp_path, capsys, args, words):
    assert _control(tmp_path, "--lm", "", *args) == 2
    one_line_error(capsys, *words, no_stdout=True)
    assert not (tmp_path / "c").exists()
