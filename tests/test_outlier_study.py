"""The outlier study's machinery on a tiny random Llama (seconds): every configuration builds and evaluates, rows carry
paired intervals, the CSV round-trips, the figures draw, and bad command lines exit 2 with one line."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fp8lab import outlier_study as S
from fp8lab.store import write_rows
from tests.test_outliers import tiny_llama


@pytest.fixture(scope="module")
def setup():
    m = tiny_llama()
    g = torch.Generator().manual_seed(0)
    test = torch.randint(0, 256, (3, 24), generator=g)
    cal = torch.randint(0, 256, (2, 24), generator=g)
    lm = SimpleNamespace(model=m, model_note="tiny random Llama", name="tiny", file_sha256="0" * 64)
    settings = {"model_sha256": "0", "n_windows": 3, "seq_len": 24, "seed": 0, "n_cal": 2, "calib": "test",
                "calibration": "2 x 24 random tokens", "model_note": "tiny random Llama"}
    return S.Setup(lm, test, torch.full((3,), 50), cal, settings)


def test_every_configuration_runs_with_intervals(setup, tmp_path):
    cfgs = S.scaling_configs() + S.taming_configs((0.5,))
    assert len({c.name for c in cfgs}) == len(cfgs) - 1        # e4m3-wa-static is shared by both parts
    rows = S.run_quality(setup, cfgs, tmp_path, progress=False, n_boot=200)
    assert [r["config"] for r in rows] == [c.name for c in cfgs]
    for r in rows:
        assert np.isfinite(r["ppl"]) and r["ci95_low"] <= r["delta_pct"] <= r["ci95_high"], r
        assert r["causal"] == ("oracle" if r["act_scaling"] == "dynamic-tensor" else "causal")
    assert all(r.get("delta_vs_ref_pct") is not None for r in rows if r["ref"] not in ("baseline", r["config"]))
    assert (tmp_path / "per_window" / "baseline.json").is_file()
    # a rerun reuses the per-window results: same numbers, no recomputation
    again = S.run_quality(setup, cfgs[:2], tmp_path, progress=False, n_boot=200)
    assert [r["ppl"] for r in again] == [r["ppl"] for r in rows[:2]]
    d, lo, hi = S.paired(tmp_path, "e4m3-wa-dyn-token", "e4m3-wa-dyn-tensor", n_boot=200)
    assert lo <= d <= hi
    assert S.paired(tmp_path, "e4m3-w", "e4m3-w", n_boot=200) == (0.0, 0.0, 0.0)
    write_rows(rows, tmp_path / "t.csv", S.CSV_FIELDS)
    back = S.read_csv(tmp_path / "t.csv")
    assert [r["config"] for r in back] == [r["config"] for r in rows]
    assert "oracle" in S.format_rows(back)
    S.plot_quality(back, "t", "note")


def test_stats_part_and_figures(setup):
    res = S.run_stats(setup)
    assert {r["kind"] for r in res["rows"]} == {"qkv", "o", "gate/up", "down"}
    assert len(res["examples"]) == 2 and all(e["histograms"] for e in res["examples"])
    assert all(v < 1e-4 for v in res["exactness"].values())
    assert "median token" in S.format_sqnr(res)
    for f in (S.plot_structure, S.plot_heatmaps, S.plot_histograms):
        f(res)


@pytest.mark.parametrize("argv", [["--parts", "nope"], ["--alphas", "2"], ["--alphas", "x"], ["--windows", "1"],
                                  ["--calib", "wiki"], ["--formats", "fp8"]])
def test_cli_bad_input_exits_2(argv, capsys, tmp_path):
    assert S.main(argv + ["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1


def test_merge_rows_keeps_other_formats():
    old = [{"fmt": f, "config": f"{f}-{i}"} for f in ("e4m3", "int8", "nvfp4") for i in (1, 2)]
    new = [{"fmt": "int8", "config": "int8-new"}]
    got = S.merge_rows(old, new, ["int8"])
    assert [r["config"] for r in got] == ["e4m3-1", "e4m3-2", "int8-new", "nvfp4-1", "nvfp4-2"]
