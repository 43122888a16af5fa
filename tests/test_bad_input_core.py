"""Bad input to the core commands (sweep, accumulation) and the store: one line `error: ...`, exit status 2, and
nothing left behind. No real model is loaded: a corrupt checkpoint folder fails before any weights are read."""
import json
import os

import pytest

from fp8lab import accumulation as A
from fp8lab import plots, sweep
from fp8lab.results import CSV_FIELDS
from fp8lab.store import FolderNotFile, OutputError, atomic_write_text, write_rows
from tests.one_line import one_line_error


# ---- a local model folder that cannot be loaded ----------------------------------------------------------
@pytest.fixture
def corrupt_model(tmp_path):
    d = tmp_path / "m3"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (d / "model.safetensors").write_bytes(b"\xff" * 64)
    return d


def test_corrupt_local_model_is_a_model_error_naming_the_folder(corrupt_model):
    from fp8lab.models import ModelError, load_model
    with pytest.raises(ModelError, match="m3") as e:
        load_model(str(corrupt_model), verbose=False)
    assert "local folder" in str(e.value)


def test_sweep_with_a_corrupt_model_says_so_in_one_line_and_leaves_nothing(tmp_path, corrupt_model, capsys):
    out = tmp_path / "new" / "run"
    assert sweep.main(["--model", str(corrupt_model), "--recipes", "baseline", "--tasks", "ppl", "--tokens", "64",
                       "--seq-len", "32", "--quiet", "--out", str(out)]) == 2
    err = one_line_error(capsys)
    assert "m3" in err and "local folder" in err
    assert not (tmp_path / "new").exists()                  # no lock file, no failure log, no folder


# ---- sweep --redraw ---------------------------------------------------------------------------------------
def _row(recipe, **kw):
    r = dict.fromkeys(CSV_FIELDS, "")
    r.update(model="tiny", model_sha256="abc", recipe=recipe, causal="True", task="ppl", metric="ppl", value="10",
             baseline="10", delta_pct="0", ci95_low="0", ci95_high="0", ci_method="paired bootstrap",
             delta_unit="%", n="3", size="t96", seq_len="32", seed="0", device="cpu", n_boot="2000",
             seconds="1.0", model_note="a note")
    if recipe != "baseline":
        r.update(value="10.5", delta_pct="5", ci95_low="4", ci95_high="6")
    r.update(kw)
    return r


def _results(folder, rows):
    folder.mkdir(parents=True, exist_ok=True)
    write_rows(rows, folder / "results.csv", CSV_FIELDS)
    return folder


def test_redraw_of_good_rows_still_draws(tmp_path, capsys):
    out = _results(tmp_path / "r", [_row("baseline"), _row("e4m3-w")])
    assert sweep.main(["--redraw", "--out", str(out)]) == 0
    assert (out / "sweep.png").is_file() and (out / "sweep_ppl.png").is_file()


def test_redraw_of_a_header_only_table_is_one_line(tmp_path, capsys):
    out = _results(tmp_path / "h", [])
    assert sweep.main(["--redraw", "--out", str(out)]) == 2
    assert "no rows to plot" in one_line_error(capsys)
    assert not list(out.glob("*.png"))


@pytest.mark.parametrize("col, value", [("ci95_low", "x"), ("delta_pct", "abc"), ("ci95_low", "nan"),
                                        ("delta_pct", "nan"), ("ci95_high", "inf"), ("baseline", ""),
                                        ("n", "abc")])
def test_redraw_refuses_a_bad_number_naming_file_line_and_column(tmp_path, capsys, col, value):
    out = _results(tmp_path / "b", [_row("baseline"), _row("e4m3-w", **{col: value})])
    assert sweep.main(["--redraw", "--out", str(out)]) == 2
    err = one_line_error(capsys)
    assert "results.csv" in err and "line 3" in err and f"column {col}" in err
    assert not list(out.glob("*.png"))                      # nothing drawn from it


def test_plot_sweep_raises_damaged_file_not_a_drawing_error(tmp_path):
    from fp8lab.store import DamagedFile
    out = _results(tmp_path / "p", [_row("baseline"), _row("e4m3-w", ci95_low="nan")])
    with pytest.raises(DamagedFile, match="line 3, column ci95_low"):
        plots.plot_sweep(out / "results.csv", out)
    with pytest.raises(plots.NothingToPlot):
        plots.plot_sweep(out / "results.csv", out, only=set())


def test_redraw_of_a_missing_folder_creates_nothing(tmp_path, capsys):
    out = tmp_path / "nonexistent" / "zz"
    assert sweep.main(["--redraw", "--out", str(out)]) == 2
    assert "does not exist" in one_line_error(capsys)
    assert not (tmp_path / "nonexistent").exists()


# ---- sweep: comma-separated lists -------------------------------------------------------------------------
@pytest.mark.parametrize("flag, value, why", [("--recipes", "baseline,,e4m3-w", "empty item"),
                                              ("--recipes", ",", "is empty"), ("--tasks", "", "is empty"),
                                              ("--tasks", "ppl,", "empty item")])
def test_sweep_lists_refuse_empty_items(tmp_path, capsys, flag, value, why):
    assert sweep.main([flag, value, "--tokens", "1", "--out", str(tmp_path / "o")]) == 2   # never a run
    assert why in one_line_error(capsys)
    assert not (tmp_path / "o").exists()
    with pytest.raises(sweep.UsageError, match=why):
        sweep.estimate([flag, value])


# ---- the folder lock ---------------------------------------------------------------------------------------
# ---- accumulation ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, why", [
    (["--mn", "100000000"], "too large for the CPU model"),
    (["--ks", "1310720000", "--mn", "8"], "too large for the CPU model"),
    (["--ks", ""], "--ks is empty"),
    (["--ks", "128,,256"], "empty item"),
    (["--mn", "abc"], "invalid int value"),
    (["--out", "", "--ks", "128", "--mn", "8"], "--out is empty"),
])
def test_accumulation_bad_arguments_are_one_line(capsys, argv, why):
    assert A.main(argv) == 2
    assert why in one_line_error(capsys)


def test_accumulation_gpu_defaults_fit_the_size_bound():
    assert A._size_problem(True, 4096, (256, 1024, 4096, 16384, 65536)) is None
    assert A._size_problem(False, 64, A.CPU_KS) is None
    assert A._size_problem(True, 100_000, (65536,))


def test_accumulation_out_that_is_a_folder_or_under_a_file(tmp_path, capsys):
    (tmp_path / "emptydir").mkdir()
    (tmp_path / "afile").write_text("")
    assert A.main(["--out", str(tmp_path / "emptydir"), "--ks", "128", "--mn", "8"]) == 2
    assert "emptydir is a folder, not a file" in one_line_error(capsys)
    assert A.main(["--out", str(tmp_path / "afile" / "sub"), "--ks", "128", "--mn", "8"]) == 2
    assert "afile is a file, not a folder" in one_line_error(capsys)
    assert sorted(os.listdir(tmp_path)) == ["afile", "emptydir"] and not os.listdir(tmp_path / "emptydir")
    with pytest.raises(OutputError) as e:                   # the writer itself says the same, as an OutputError
        atomic_write_text(tmp_path / "emptydir", "x")
    assert isinstance(e.value, (FolderNotFile, IsADirectoryError))
