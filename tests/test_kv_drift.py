"""The KV drift CLI as a user runs it (tiny stand-in model, seconds), and its figure."""
import json
from pathlib import Path

import matplotlib
import pytest

from fp8lab import kv_drift, store
from fp8lab.store import FolderLock
from tests import tiny

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--windows", "3", "--seq-len", "80", "--configs", "e4m3-uncal,e4m3-cal16,e4m3-dyn", "--quiet"]


@pytest.fixture
def tinymodel(monkeypatch):
    tiny.install(monkeypatch.setattr)


def one_line_error(capsys):
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("args, message", [
    (["--windows", "1"], "n is too small for an interval"),
    (["--windows", "0"], "n is too small for an interval"),
    (["--seq-len", "0"], "--seq-len must be >= 16"),
    (["--seq-len", "-4"], "--seq-len must be >= 16"),
    (["--seq-len", "256"], "beyond the model's context of 128 tokens"),
    (["--corpus", "wiki"], "unknown --corpus 'wiki'"),
    (["--configs", "fp6"], "unknown KV configuration(s) fp6; valid: baseline"),
    (["--configs", ","], "(none given)"),
    (["--configs", "e4m3-cal256", "--seq-len", "100"], "calibrate(s) on at least --seq-len 100"),
    (["--seed", "-1"], "--seed must be in 0"),
    (["--boot", "3"], "--boot must be in 100"),
    (["--device", "tpu"], "use cpu or cuda[:N]"),
    (["--out", ""], "--out is empty"),
    (["--out", "README.md"], "exists and is not a folder"),
    (["--out", "outputs/kv_drift"], "committed reference results"),
    (["--redraw", "--out", "/nonexistent/kv"], "no rows (missing or empty)"),
])
def test_regression_every_bad_argument_is_one_line_and_exit_2(args, message, tinymodel, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert kv_drift.main(args) == 2
    assert message in one_line_error(capsys)


def test_argparse_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        kv_drift.main(["--windows", "many"])
    assert e.value.code == 2 and "invalid int value" in one_line_error(capsys)


def test_a_run_writes_atomically_into_a_settings_named_run_folder(tmp_path, tinymodel, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert kv_drift.main(SMALL) == 0
    out = tmp_path / "runs" / "kv_drift" / "smollm2-135m-ppl-L80-w3-s0"
    assert {p.name for p in out.iterdir()} == {"kv_drift.csv", "kv_drift.png", "provenance.json", ".fp8lab.lock"}
    rows = kv_drift.read_csv(out / "kv_drift.csv")
    assert {r["config"] for r in rows} == {"baseline", "e4m3-uncal", "e4m3-cal16", "e4m3-dyn"}
    prov = json.loads((out / "provenance.json").read_text())
    assert {"git_commit", "dirty", "device", "packages", "wall_s", "model_note", "settings"} <= set(prov)
    assert prov["settings"]["windows"] == 3 and prov["command"].startswith("python -m fp8lab.kv_drift")
    # the same folder with other settings is refused (its CSV and provenance describe one run)
    assert kv_drift.main([*SMALL, "--seed", "1", "--out", str(out)]) == 2
    assert "other settings {'seed': 0}" in one_line_error(capsys)
    # the same settings again: replaced in place (same numbers: same windows, same model)
    before = (out / "kv_drift.csv").read_text()
    assert kv_drift.main([*SMALL, "--out", str(out)]) == 0
    assert (out / "kv_drift.csv").read_text() == before


def test_regression_a_second_run_into_a_locked_folder_is_refused_naming_the_holder(tmp_path, tinymodel, capsys):
    out = tmp_path / "k"
    with FolderLock(out, "python -m fp8lab.kv_drift (another run)"):
        assert kv_drift.main([*SMALL, "--out", str(out)]) == 2
    err = one_line_error(capsys)
    assert "is being written by pid" in err and "(another run)" in err
    assert not (out / "kv_drift.csv").exists()


def test_record_writes_the_reference_only_when_asked(tmp_path, tinymodel, monkeypatch):
    ref = tmp_path / "outputs"
    monkeypatch.setattr(store, "REFERENCE", ref)
    monkeypatch.setattr(kv_drift, "REFERENCE", ref)
    assert kv_drift.main([*SMALL, "--out", str(ref / "kv_drift")]) == 2
    assert kv_drift.main([*SMALL, "--record"]) == 0
    assert (ref / "kv_drift" / "kv_drift.csv").is_file()


def _rows_8k():
    rows = []
    for c in ("baseline", "e4m3-uncal", "e4m3-cal256", "e4m3-dyn"):
        for lo, hi in kv_drift.buckets_for(8192):
            rows.append(dict(config=c, pos_lo=lo, pos_hi=hi, ppl=20.0, baseline_ppl=20.0, delta_pct=1.0,
                             ci95_low=0.5, ci95_high=1.5, n=4))
    return rows


def test_regression_8k_bucket_labels_do_not_overlap_and_the_legend_covers_no_point():
    import matplotlib.pyplot as plt
    fig = kv_drift.plot(_rows_8k())
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        boxes = [t.get_window_extent(r) for t in ax.get_xticklabels() if t.get_text()]
        assert [t.get_text() for t in ax.get_xticklabels()][-2:] == ["2048-4096", "4096-8192"]
        assert len(boxes) == 6
        for a, b in zip(boxes, boxes[1:]):
            assert not a.overlaps(b), "x tick labels run into each other"
        assert not fig.legends[0].get_window_extent(r).overlaps(ax.get_window_extent(r))
    plt.close(fig)


def test_figures_do_not_switch_the_matplotlib_backend(tmp_path):
    """A notebook's inline backend must survive (forcing Agg hid the figures in notebooks 01 and 03)."""
    import matplotlib.pyplot as plt
    from fp8lab import grids
    old = matplotlib.get_backend()
    try:
        plt.switch_backend("svg")
        kv_drift.plot(_rows_8k(), tmp_path / "k.png")
        grids.grid_figure(path=tmp_path / "g.png")
        assert matplotlib.get_backend() == "svg"
        assert (tmp_path / "k.png").stat().st_size > 10_000 and (tmp_path / "g.png").stat().st_size > 10_000
    finally:
        plt.close("all")
        plt.switch_backend(old)


def test_damaged_csv_is_refused_not_trusted(tmp_path):
    p = tmp_path / "kv_drift.csv"
    store.write_rows(_rows_8k(), p, kv_drift.CSV_FIELDS)
    p.write_text(p.read_text()[:-7])
    with pytest.raises(store.DamagedFile, match="incomplete"):
        kv_drift.read_csv(p)
    p.write_text(p.read_text() + "\n")
    with pytest.raises(store.DamagedFile):
        kv_drift.read_csv(p)
