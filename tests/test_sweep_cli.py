"""The sweep as a user (and a hostile one) runs it, on the tiny stand-in model of tests/tiny.py (seconds).

Regression tests, one per failure found by trying the CLI the way people do: two sweeps into one folder,
runs with another --seed / --seq-len in the same folder, files cut short by a crash, bad arguments, a run
of hours started by accident, a failed run touching the committed log, progress bars written to a file.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fp8lab import plots, results, store, sweep
from tests import tiny

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--tasks", "ppl", "--tokens", "96", "--seq-len", "32", "--quiet"]     # 3 windows of 32 tokens


@pytest.fixture
def tinymodel(monkeypatch):
    tiny.install(monkeypatch.setattr)


def run(out, *args, recipes="baseline,e4m3-w"):
    return sweep.main(["--recipes", recipes, *SMALL, "--out", str(out), *args])


def rows_of(out):
    return results.read_results(Path(out) / "results.csv")


def one_line_error(capsys):
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


# ---- concurrency and identity -----------------------------------------------------------------------------
def _tiny_cli(*args, env=None, **kw):
    e = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.Popen([sys.executable, "-m", "tests.tiny", "sweep", *args], cwd=REPO, env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_regression_two_concurrent_sweeps_into_one_folder_keep_every_row_or_refuse(tmp_path):
    """Both used to exit 0 while one run's rows vanished (a shared results.csv.partial). Now the folder is
    locked for the whole run: the second is refused at once, naming the holder; rerun, it adds its rows."""
    out, started = tmp_path / "c", tmp_path / "started"
    first = _tiny_cli("--recipes", "e4m3-w", *SMALL, "--out", str(out),
                      env={"FP8LAB_TINY_SLOW": "4", "FP8LAB_TINY_STARTED": str(started)})
    deadline = time.time() + 240
    while not started.exists():
        assert first.poll() is None, first.communicate()
        assert time.time() < deadline
        time.sleep(0.2)
    second = _tiny_cli("--recipes", "e5m2-w", *SMALL, "--out", str(out))
    o2, e2 = second.communicate(timeout=240)
    o1, e1 = first.communicate(timeout=240)
    assert first.returncode == 0, e1
    assert second.returncode == 2 and f"pid {first.pid}" in e2 and "is being written by" in e2, e2
    assert "Traceback" not in e2 and e2.count("\n") == 1
    assert {r["recipe"] for r in rows_of(out)} == {"baseline", "e4m3-w"}
    again = _tiny_cli("--recipes", "e5m2-w", *SMALL, "--out", str(out))
    o3, e3 = again.communicate(timeout=240)
    assert again.returncode == 0, e3
    got = {(r["recipe"], r["metric"]) for r in rows_of(out)}
    assert got == {(r, m) for r in ("baseline", "e4m3-w", "e5m2-w") for m in ("ppl", "bpb")}
    assert "reused 1 cell(s)" in o3 and "computed 1 cell(s)" in o3     # the baseline was reused


def test_regression_seed_and_seq_len_runs_in_one_folder_never_overwrite_each_other(tmp_path, tinymodel, capsys):
    out = tmp_path / "s"
    assert run(out) == 0
    seed0 = {results.key(r): r for r in rows_of(out)}
    assert run(out, "--seed", "1") == 0
    assert sweep.main(["--recipes", "baseline,e4m3-w", "--tasks", "ppl", "--tokens", "128", "--seq-len", "64",
                       "--quiet", "--out", str(out)]) == 0
    rows = rows_of(out)
    assert len(rows) == 3 * 4                                      # 3 settings x 2 recipes x (ppl, bpb)
    assert {(r["seed"], r["seq_len"]) for r in rows} == {("0", "32"), ("1", "32"), ("0", "64")}
    for k, r in seed0.items():                                     # seed 0's rows are untouched
        assert {results.key(x): x for x in rows}[k] == r
    folders = sorted(p.name for p in (out / "per_item").glob("*/*"))
    assert folders == ["ppl-t128-L64-s0-cpu", "ppl-t96-L32-s0-cpu", "ppl-t96-L32-s1-cpu"]
    with pytest.raises(sweep.UsageError, match="found 3"):          # ambiguous: it says so, never guesses
        sweep.compare(out, "ppl", "e4m3-w", "baseline")
    for seed in ("0", "1"):
        c = sweep.compare(out, "ppl", "e4m3-w", "baseline", select={"seed": seed, "seq_len": "32"}, seed=int(seed))
        row = next(r for r in rows if r["seed"] == seed and r["seq_len"] == "32" and r["recipe"] == "e4m3-w"
                   and r["metric"] == "ppl")
        assert c["delta"] == pytest.approx(float(row["delta_pct"]), rel=1e-4)
        assert c["ci95_low"] == pytest.approx(float(row["ci95_low"]), rel=1e-4)


# ---- files cut short ------------------------------------------------------------------------------------
def _item(out, recipe="baseline"):
    return next((Path(out) / "per_item").glob(f"*/ppl-*/{recipe}.json"))


def test_regression_truncated_per_item_json_is_recomputed_with_a_warning(tmp_path, tinymodel, capsys):
    out = tmp_path / "t"
    assert run(out) == 0
    before = rows_of(out)
    p = _item(out)
    p.write_text(p.read_text()[:40])                       # a crash mid-write (before atomic writes)
    capsys.readouterr()
    assert run(out) == 0
    text = capsys.readouterr().out
    assert "WARNING" in text and "not valid JSON" in text and "recomputing baseline/ppl" in text
    assert "computed 1 cell(s)" in text and "reused 1 cell(s)" in text
    assert json.loads(p.read_text())["identity"]["recipe"] == "baseline"
    assert [r["value"] for r in rows_of(out)] == [r["value"] for r in before]   # same numbers again


def test_regression_truncated_provenance_does_not_fail_the_run(tmp_path, tinymodel, capsys):
    out = tmp_path / "p"
    assert run(out) == 0
    (out / "provenance.json").write_text('{"date": "2026')
    assert run(out, recipes="baseline,e5m2-w") == 0
    prov = json.loads((out / "provenance.json").read_text())
    assert "dirty" in prov and "git_commit" in prov and prov["cells_computed"] == ["e5m2-w/ppl"]
    assert "not valid JSON" in capsys.readouterr().out


@pytest.mark.parametrize("damage", ["cut mid-row", "garbage line"])
def test_regression_damaged_results_csv_is_never_taken_as_done(tmp_path, tinymodel, capsys, damage):
    out = tmp_path / "d"
    assert run(out) == 0
    good = (out / "results.csv").read_text()
    bad = good[:-25] if damage == "cut mid-row" else good + "garbage,line\n"
    (out / "results.csv").write_text(bad)
    r = sweep.main(["--redraw", "--out", str(out)])             # drawing refuses it in one line
    assert r == 2 and "results.csv" in one_line_error(capsys)
    assert run(out) == 0                                          # the sweep keeps it aside and rebuilds
    assert "WARNING" in capsys.readouterr().out
    assert (out / "results.csv").read_text() == good
    kept = list(out.glob("results.csv.damaged-*"))
    assert len(kept) == 1 and kept[0].read_text() == bad          # nothing lost


def test_every_writer_in_the_quality_modules_goes_through_the_store():
    """No plain writes: a writer opens only a temp file beside its target (fp8lab.store)."""
    import re
    for name in ("sweep", "kv_drift", "overhead", "plots", "grids", "results", "recipes", "calibration", "stats"):
        src = (REPO / "fp8lab" / f"{name}.py").read_text()
        for pat in (r"\.write_text\(", r"\.write_bytes\(", r"open\([^)]*['\"][wa]b?['\"]", r"\.savefig\(",
                    r"json\.dump\("):
            assert not re.search(pat, src), f"fp8lab/{name}.py writes without fp8lab.store ({pat})"


# ---- arguments --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["--seq-len", "0"], "--seq-len must be >= 8, got 0"),
    (["--seq-len", "-5"], "--seq-len must be >= 8, got -5"),
    (["--tokens", "32", "--seq-len", "32"], "n is too small for an interval"),
    (["--tasks", "arc_easy", "--limit", "1"], "n is too small for an interval"),
    (["--limit", "-3"], "--limit must be >= 0"),
    (["--seed", "-1"], "--seed must be in 0"),
    (["--boot", "10"], "--boot must be in 100"),
    (["--batch-size", "0"], "--batch-size must be in 1"),
    (["--device", "tpu"], "use cpu or cuda[:N]"),
    (["--out", ""], "--out is empty"),
    (["--out", "README.md"], "exists and is not a folder"),
    (["--out", "README.md/sub"], "is a file, not a folder"),
    (["--out", "outputs"], "committed reference results"),
    (["--out", "outputs/sweep_more"], "committed reference results"),
    (["--recipes", "e4m3-w,fp9"], "unknown recipe(s) fp9; valid: baseline"),
    (["--tasks", "ppl,winogrande"], "unknown task(s) winogrande"),
    (["--tasks", "ppl_wikitext"], "needs a dataset hub: add --online"),
    (["--tokens", "1024", "--seq-len", "512"], "beyond the model's context of 128 tokens"),
])
def test_regression_bad_arguments_are_one_line_and_exit_2(args, message, tinymodel, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert sweep.main(args) == 2
    assert message in one_line_error(capsys)


def test_argparse_errors_are_one_line_too(capsys):
    with pytest.raises(SystemExit) as e:
        sweep.main(["--seq-len", "abc"])
    assert e.value.code == 2 and "invalid int value" in one_line_error(capsys)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a CUDA device is present")
def test_cuda_without_a_device_is_a_clear_error(capsys):
    assert sweep.main(["--device", "cuda", "--tasks", "ppl"]) == 2
    assert "no CUDA device" in one_line_error(capsys)


def test_regression_all_of_mmlu_asks_first_with_an_estimate(tinymodel, capsys, tmp_path, monkeypatch):
    """--tasks mmlu --limit 0 is 14,042 questions x every recipe: hours. It says so and needs --yes."""
    assert sweep.main(["--tasks", "mmlu", "--limit", "0", "--out", str(tmp_path)]) == 2
    err = one_line_error(capsys)
    assert "estimated at about" in err and " h on a 2-core CPU" in err and "14,042 questions" in err
    assert "--yes" in err and not (tmp_path / "results.csv").exists()
    monkeypatch.setattr(sys, "stdin", type("T", (), {"isatty": lambda self: True})())   # a person at a terminal
    monkeypatch.setattr(sys, "stdout", type("T", (), {"isatty": lambda self: True, "write": lambda s, x: 0,
                                                      "flush": lambda s: None})())
    asked = []
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or "n")
    assert sweep.main(["--tasks", "mmlu", "--limit", "0", "--out", str(tmp_path)]) == 2
    assert "Start it? [y/N]" in asked[0] and "not started" in capsys.readouterr().err


def test_the_default_run_is_estimated_within_ten_minutes():
    plan = dict(recipes=sweep.DEFAULTS["recipes"], **{k: sweep.DEFAULTS[k] for k in ("tasks", "tokens", "seq_len")},
                limit=sweep.DEFAULTS["limit"])
    assert 300 < sweep.estimate_seconds(plan) < 600
    assert {"e4m3-wa-tok", "e4m3-wakv-tok"} <= set(plan["recipes"])        # causal rows beside the oracles


# ---- users' runs vs the committed reference ---------------------------------------------------------------
def test_default_out_is_a_git_ignored_run_folder_and_outputs_needs_record(tmp_path, tinymodel, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    ref = tmp_path / "outputs"
    monkeypatch.setattr(store, "REFERENCE", ref)
    monkeypatch.setattr(sweep, "REFERENCE", ref)
    assert sweep.main(["--recipes", "baseline,e4m3-w", *SMALL]) == 0
    assert (tmp_path / "runs" / "default" / "results.csv").is_file() and not ref.exists()
    assert sweep.main(["--recipes", "baseline,e4m3-w", *SMALL, "--out", str(ref)]) == 2
    assert "--record" in capsys.readouterr().err and not ref.exists()
    assert sweep.main(["--recipes", "baseline,e4m3-w", *SMALL, "--record"]) == 0
    assert (ref / "results.csv").is_file() and (ref / "provenance.json").is_file()
    ignored = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", "runs/default/results.csv"])
    assert ignored.returncode == 0, "runs/ must be git-ignored"


def test_regression_a_failed_sweep_never_appends_to_sweep_log(tmp_path, tinymodel, monkeypatch, capsys):
    out = tmp_path / "f"
    assert run(out) == 0
    log_before = (out / "sweep.log").read_text()
    assert "computed 2 cell(s)" in log_before
    from fp8lab import evaluate
    real = evaluate.eval_ppl

    def boom(model, *a, **k):
        if getattr(model, "_fp8lab_applied", None) is not None:
            raise RuntimeError("disk full")
        return real(model, *a, **k)

    monkeypatch.setattr(evaluate, "eval_ppl", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        run(out, recipes="baseline,e5m2-w")
    assert (out / "sweep.log").read_text() == log_before
    assert "e5m2-w" in (out / "sweep.failed.log").read_text()
    assert "sweep.log is unchanged" in capsys.readouterr().err
    assert not list(out.glob(".sweep.*.log.part"))


def test_a_run_says_what_it_computed_and_what_it_reused(tmp_path, tinymodel, capsys):
    out = tmp_path / "r"
    assert run(out) == 0
    first = capsys.readouterr().out
    assert "computed 2 cell(s)" in first and "baseline/ppl, e4m3-w/ppl" in first and "reused" not in first
    assert run(out, "--plot") == 0
    second = capsys.readouterr().out
    assert "nothing computed: every cell of this plan was already in" in second
    assert "reused 2 cell(s)" in second and (out / "sweep.png").is_file()
    assert sweep.main(["--redraw", "--out", str(out)]) == 0
    assert "nothing was computed" in capsys.readouterr().out


def test_regression_progress_written_to_a_file_has_no_cursor_codes(tmp_path):
    """Not --quiet, stdout and stderr to files: no tqdm bars at all (no \\r, no ESC[A), only log lines."""
    with open(tmp_path / "o.txt", "w") as o, open(tmp_path / "e.txt", "w") as e:
        p = subprocess.run([sys.executable, "-m", "tests.tiny", "sweep", "--recipes", "e4m3-w", "--tasks", "ppl",
                            "--tokens", "96", "--seq-len", "32", "--out", str(tmp_path / "x")], cwd=REPO,
                           env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=o, stderr=e, timeout=300)
    text = (tmp_path / "o.txt").read_text() + (tmp_path / "e.txt").read_text()
    assert p.returncode == 0, text
    assert "\x1b[" not in text and "\r" not in text and "computed 2 cell(s)" in text


def test_bench_overhead_writes_its_json_atomically_with_provenance(tmp_path, tinymodel, capsys):
    out = tmp_path / "o"
    assert sweep.main(["--bench-overhead", "--recipes", "e4m3-wa-tok", "--seq-len", "32", "--out", str(out)]) == 0
    doc = json.loads((out / "fakequant_overhead.json").read_text())
    assert [r["recipe"] for r in doc["results"]] == ["e4m3-wa-tok"] and doc["results"][0]["ratio"] > 0
    assert {"git_commit", "dirty", "device", "command"} <= set(doc["provenance"])
    assert sorted(p.name for p in out.iterdir()) == [".fp8lab.lock", "fakequant_overhead.json"]


# ---- rows and figures ------------------------------------------------------------------------------------
def test_rows_say_causal_and_how_each_interval_was_made(tmp_path, tinymodel):
    out = tmp_path / "c"
    assert run(out, recipes="baseline,e4m3-wa,e4m3-wa-tok") == 0
    rows = {(r["recipe"], r["metric"]): r for r in rows_of(out)}
    assert rows[("e4m3-wa", "ppl")]["causal"] == "False" and rows[("e4m3-wa-tok", "ppl")]["causal"] == "True"
    assert rows[("e4m3-wa", "ppl")]["ci_method"] == "paired bootstrap"
    assert rows[("baseline", "ppl")]["ci_method"] == "baseline (itself)"


def _mc_items(scores):
    return {"metrics": {m: {f"q:{i}": float(s) for i, s in enumerate(v)} for m, v in scores.items()}}


def test_multiple_choice_rows_count_changed_questions_and_use_exact_intervals(tmp_path):
    lm = tiny.tiny_model()
    plan = dict(tokens=96, seq_len=32, limit=40, seed=0, batch_size=1, device="cpu", n_boot=500)
    cell = sweep.Cell(tmp_path, lm, plan, "e5m2-w", "arc_easy")
    base = _mc_items({"acc": [1, 0] * 20, "acc_norm": [1, 1, 0, 0] * 10})
    same = _mc_items({"acc": [1, 0] * 20, "acc_norm": [1, 1, 0, 0] * 10})
    rows = {r["metric"]: r for r in results.rows_for(cell, same, base, lm, plan, 1.0)}
    acc = rows["acc"]
    assert acc["changed"] == 0 and float(acc["delta_pct"]) == 0 and "rule of three" in acc["ci_method"]
    assert float(acc["ci95_low"]) == pytest.approx(-7.2158, abs=1e-3) and float(acc["ci95_high"]) > 7


def _fake_rows(recipes=("baseline", "e4m3-w", "e4m3-wa", "nvfp4-w")):
    from fp8lab.recipes import get_recipe
    rows = []
    for task, unit, metrics in (("ppl", "%", ("ppl", "bpb")), ("arc_easy", "pp", ("acc", "acc_norm"))):
        for i, rec in enumerate(recipes):
            for m in metrics:
                rows.append(dict(model="m", model_sha256="abc", recipe=rec, causal=get_recipe(rec).causal,
                                 task=task, metric=m, value=1 + i, baseline=0.6 if unit == "pp" else 20,
                                 delta_pct=float(i), ci95_low=i - 0.5, ci95_high=i + 0.5,
                                 ci_method="paired bootstrap", changed="" if unit == "%" else i, delta_unit=unit,
                                 n=16, size="t1", seq_len=512 if unit == "%" else "", seed=0,
                                 batch_size="" if unit == "%" else 1, device="cpu", n_boot=2000, seconds=1,
                                 model_note="a note"))
    return rows


def test_figures_explain_colours_mark_oracles_show_acc_norm_and_keep_legends_off_the_bars(tmp_path):
    store.write_rows(_fake_rows(), tmp_path / "results.csv", results.CSV_FIELDS)
    paths = plots.plot_sweep(tmp_path / "results.csv", tmp_path)
    assert [p.name for p in paths] == ["sweep.png", "sweep_ppl.png", "sweep_arc_easy.png"]
    sel = plots._select(results.read_results(tmp_path / "results.csv"))["m"]
    assert sorted(sel) == [("arc_easy", "acc"), ("arc_easy", "acc_norm"), ("ppl", "ppl")]
    fig = plots._figure([(tm, sel[tm]) for tm in sorted(sel)], "m", "a note", "t")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    r = canvas.get_renderer()
    legend = fig.legends[0]
    texts = [t.get_text() for t in legend.get_texts()]
    assert any("reliably worse" in t for t in texts) and any("oracle" in t for t in texts)
    lb = legend.get_window_extent(r)
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>":
            continue
        assert not lb.overlaps(ax.get_window_extent(r)), "the legend covers a panel"
    labels = [t.get_text() for ax in fig.axes[:3] for t in ax.get_yticklabels()]
    assert "e4m3-wa (oracle)" in labels and "e4m3-w" in labels
    hatched = [p for ax in fig.axes[:3] for p in ax.patches if p.get_hatch()]
    assert hatched and all(p.get_hatch() == "//" for p in hatched)


def test_a_4_bit_run_is_titled_as_what_it_is():
    assert plots.title_for(["baseline", "e4m3-w", "e5m2-w"]) == "FP8 recipes"
    assert plots.title_for(["baseline", "nvfp4-w", "mxfp4-w"]) == "NVFP4 and MXFP4 recipes"
    assert plots.title_for(["e4m3-w", "nvfp4-w", "int8-w"]) == "FP8, NVFP4 and INT8 recipes"


def test_legacy_results_still_draw_but_are_never_extended(tmp_path, tinymodel, capsys):
    rows = _fake_rows()
    store.write_rows(rows, tmp_path / "results.csv", results.LEGACY_FIELDS)
    assert plots.plot_sweep(tmp_path / "results.csv", tmp_path)
    assert run(tmp_path) == 2
    assert "older fp8lab" in one_line_error(capsys)
