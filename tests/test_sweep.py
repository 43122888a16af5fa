"""The CLI: arguments and errors (subprocess, exit code 2, no traceback), --redraw from a CSV alone, and one
tiny end-to-end sweep on the real offline model (the only test that loads SmolLM2). The hostile-user cases
run on a tiny stand-in model in tests/test_sweep_cli.py."""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fp8lab import sweep
from fp8lab.recipes import RECIPES

REPO = Path(__file__).resolve().parents[1]


def cli(*args, timeout=300):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "fp8lab.sweep", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=timeout)


def test_list_recipes():
    r = cli("--list-recipes")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert [l.split()[0] for l in lines] == list(RECIPES)
    assert {l.split()[0] for l in lines if l.split()[1] == "ORACLE"} == {n for n, x in RECIPES.items() if not x.causal}


@pytest.mark.parametrize("args,message", [
    (["--recipes", "e4m3-w,fp9"], "unknown recipe(s) fp9; valid: baseline, bf16, e4m3-w"),
    (["--tasks", "ppl,winogrande"], "unknown task(s) winogrande; valid: ppl, ppl_lambada"),
    (["--tasks", "ppl_wikitext"], "needs a dataset hub: add --online"),
    (["--tokens", "100", "--seq-len", "512"], "--tokens >= --seq-len"),
])
def test_bad_arguments_exit_2_with_the_valid_names(args, message):
    r = cli(*args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_unknown_model_exits_2_listing_offline_models(tmp_path):
    r = cli("--model", "no-such/model", "--tasks", "ppl", "--out", str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert "valid offline names: smollm2-135m, gemma3-270m" in r.stderr and "Traceback" not in r.stderr


def _fake_csv(path):
    rows = []
    for task, unit, metric in (("ppl", "%", "ppl"), ("arc_easy", "pp", "acc")):
        for i, rec in enumerate(["baseline", "e4m3-w", "e4m3-wa"]):
            rows.append(dict(model="m", model_sha256="abc", recipe=rec, causal=RECIPES[rec].causal, task=task,
                             metric=metric, value=1 + i, baseline=1, delta_pct=float(i), ci95_low=i - 0.5,
                             ci95_high=i + 0.5, ci_method="paired bootstrap", changed="", delta_unit=unit, n=16,
                             size="t1", seq_len=512, seed=0, batch_size="", device="cpu", n_boot=2000, seconds=1,
                             model_note="a note"))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=sweep.CSV_FIELDS)
        w.writeheader()
        w.writerows(rows)


def test_redraw_draws_from_the_csv_without_a_model(tmp_path):
    # (was `--plot` alone; `--plot` now means "also draw" after a run that reuses what is there)
    _fake_csv(tmp_path / "results.csv")
    r = cli("--redraw", "--out", str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr
    for name in ("sweep.png", "sweep_ppl.png", "sweep_arc_easy.png"):
        assert (tmp_path / name).stat().st_size > 10_000
    assert not (tmp_path / "provenance.json").exists()     # nothing was computed
    assert "nothing was computed" in r.stdout


def _have_mc_backend():
    import importlib.util
    return importlib.util.find_spec("accelerate") is not None   # lm-eval's HFLM needs it (lm-eval[hf])


def test_tiny_end_to_end_sweep_then_rerun_skips(tmp_path, capsys):
    # perplexity always; ARC-Easy through lm-eval where its HF backend is installed (else that part is
    # covered by test_mc_task_without_lm_eval_backend_is_a_clear_error)
    mc = _have_mc_backend()
    tasks = "ppl,arc_easy" if mc else "ppl"
    args = ["--recipes", "baseline,e4m3-wakv", "--tasks", tasks, "--tokens", "256", "--seq-len",
            "128", "--limit", "4", "--out", str(tmp_path), "--quiet", "--plot"]
    assert sweep.main(args) == 0
    rows = sweep.read_csv(tmp_path / "results.csv")
    metrics = [("ppl", "ppl"), ("ppl", "bpb")] + ([("arc_easy", "acc"), ("arc_easy", "acc_norm")] if mc else [])
    assert {(r["recipe"], r["task"], r["metric"]) for r in rows} == {
        (rec, t, m) for rec in ("baseline", "e4m3-wakv") for t, m in metrics}
    for r in rows:
        assert set(sweep.CSV_FIELDS) <= set(r)
        assert int(r["n"]) == (2 if r["task"] == "ppl" else 4)
        assert float(r["ci95_low"]) <= float(r["delta_pct"]) <= float(r["ci95_high"])
        assert "Q4_1" in r["model_note"]
        if r["recipe"] == "baseline":
            assert float(r["delta_pct"]) == float(r["ci95_low"]) == float(r["ci95_high"]) == 0.0
    ppl = {r["recipe"]: float(r["value"]) for r in rows if r["metric"] == "ppl"}
    assert 5 < ppl["baseline"] < 100 and ppl["e4m3-wakv"] != ppl["baseline"]
    prov = json.loads((tmp_path / "provenance.json").read_text())
    assert len(prov["model"]["sha256"]) == 64 and "Q4_1" in prov["model_note"]
    # the one provenance record (fp8lab.provenance): commit with its clean/dirty state, device, packages
    assert {"git_commit", "dirty", "device", "packages", "date", "wall_seconds", "command", "data_files"} <= set(prov)
    assert (tmp_path / "sweep.png").exists() and (tmp_path / "sweep.log").exists()
    before = (tmp_path / "results.csv").read_text()

    # any two recipes pair through the per-item files; against the baseline it reproduces the CSV row
    row = next(r for r in rows if r["recipe"] == "e4m3-wakv" and r["metric"] == "ppl")
    c = sweep.compare(tmp_path, "ppl", "e4m3-wakv", "baseline")
    assert c["n"] == 2 and c["unit"] == "%"
    assert c["delta"] == pytest.approx(float(row["delta_pct"]), rel=1e-4)
    assert c["ci95_low"] == pytest.approx(float(row["ci95_low"]), rel=1e-4)

    capsys.readouterr()
    assert sweep.main(args) == 0                             # same settings: nothing to recompute
    assert f"reused {4 if mc else 2} cell(s)" in capsys.readouterr().out
    assert (tmp_path / "results.csv").read_text() == before


@pytest.mark.skipif(_have_mc_backend(), reason="accelerate is installed: the MC backend works")
def test_mc_task_without_lm_eval_backend_is_a_clear_error(tmp_path):
    r = cli("--tasks", "arc_easy", "--out", str(tmp_path))
    assert r.returncode == 2 and "pip install accelerate" in r.stderr and "Traceback" not in r.stderr


def test_delta_table_formats_and_orders():
    import pandas as pd
    from fp8lab.sweep import UsageError, delta_table
    df = pd.DataFrame({"recipe": ["baseline", "a", "b"], "task": "ppl", "metric": "ppl", "value": [10.0, 10.1, 10.3],
                       "delta_pct": [0.0, 1.0, 3.0], "ci95_low": [0.0, 0.5, 2.0], "ci95_high": [0.0, 1.5, 4.0],
                       "delta_unit": "%", "n": 16})
    t = delta_table(df, "ppl", "ppl", ["b", "baseline", "missing"])
    assert list(t.index) == ["b", "baseline"]
    assert t.loc["b", "delta (%)"] == "+3.00" and t.loc["b", "95% CI"] == "[+2.00, +4.00]"
    with pytest.raises(UsageError, match="no rows"):
        delta_table(df, "arc_easy", "acc")


def test_plot_runs_the_sweep_then_draws_only_its_rows(tmp_path, monkeypatch):
    """--plot: run (reusing what is there), then draw the rows of this run; --redraw: draw only."""
    from fp8lab import plots, sweep as S
    calls = []
    monkeypatch.setattr(S, "run_sweep", lambda plan, args, out, prov: calls.append(plan) or
                        dict(csv=out / "results.csv", computed=[], reused=[("baseline", "ppl")], wall=0.0, keys={"k"}))
    monkeypatch.setattr(plots, "plot_sweep", lambda csv, out, only=None: calls.append(("plot", only)) or [])
    (tmp_path / "results.csv").write_text(",".join(S.CSV_FIELDS) + "\n")
    assert S.main(["--plot", "--out", str(tmp_path), "--quiet"]) == 0
    assert isinstance(calls[0], dict) and calls[1] == ("plot", {"k"})     # computed (or reused), then plotted
    calls.clear()
    assert S.main(["--redraw", "--out", str(tmp_path)]) == 0
    assert calls == [("plot", None)]                                     # drew only
