import pytest

from fp8lab import probe
from fp8lab.grids import grid_figure, positive_grid


def rows_by_key(rows):
    return {(r["tensor"], r["format"], r["scale"]): r for r in rows}


def test_seed_003_four_rows_for_e4m3():
    r = rows_by_key(probe.underflow_probe(formats=("e4m3",)))
    typ, small = "typical (~1.0)", "small (~3e-4)"
    assert r[(small, "e4m3", "off")]["flushed_pct"] > 99       # the tensor ceases to exist
    assert r[(small, "e4m3", "off")]["mean_rel_err"] > 0.99
    assert r[(small, "e4m3", "on")]["flushed_pct"] == 0.0      # scaled: nothing flushed
    assert 0.015 < r[(small, "e4m3", "on")]["mean_rel_err"] < 0.035
    # a per-tensor scale makes the error independent of the magnitude: identical rows
    assert r[(small, "e4m3", "on")]["mean_rel_err"] == pytest.approx(r[(typ, "e4m3", "on")]["mean_rel_err"], rel=1e-6)
    assert r[(typ, "e4m3", "off")]["flushed_pct"] < 1


def test_extended_formats():
    r = rows_by_key(probe.underflow_probe())
    small = "small (~3e-4)"
    assert r[(small, "e5m2", "off")]["flushed_pct"] < 5            # E5M2's range reaches 1.5e-5: it survives
    for f in ("nvfp4", "mxfp4"):
        assert r[(small, f, "off")]["flushed_pct"] == 100.0         # E2M1 starts at 0.5
        assert r[(small, f, "on")]["flushed_pct"] < 15
    assert len(r) == 2 * 4 * 2


def test_table_csv_and_errors(tmp_path):
    rows = probe.underflow_probe(formats=("e4m3",), n=128)
    assert "small (~3e-4)" in probe.format_table(rows)
    p = probe.write_csv(rows, tmp_path / "probe.csv")
    assert p.read_text().count("\n") == 5
    with pytest.raises(ValueError, match="valid: e4m3"):
        probe.underflow_probe(formats=("fp6",))
    with pytest.raises(ValueError, match="multiple of 64"):
        probe.probe_tensor(1.0, n=100)


def test_grids(tmp_path):
    assert positive_grid("e2m1").tolist() == [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    assert len(positive_grid("e4m3")) == 126 and positive_grid("e4m3")[0] == 2.0 ** -9
    assert len(positive_grid("e5m2")) == 123
    grid_figure(path=tmp_path / "g.png")
    assert (tmp_path / "g.png").stat().st_size > 10_000
