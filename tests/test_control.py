"""fp8lab.control: the FP32 MiniLM control (retrieval maths, ranks, a tiny real run, the LM comparison)."""
import json

import numpy as np
import pytest

from fp8lab import control as C
from fp8lab.store import atomic_write_json, read_rows, write_rows


def test_retrieval_ranks_and_ties():
    q = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    p = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    r = C.retrieval(q, p, np.array([0, 0, 2]))
    assert r["top1"].tolist() == [1, 0, 1]
    assert r["rr"][1] == pytest.approx(1 / 3)             # gold scores 0, below 1.0 and 0.8: rank 3
    tie = C.retrieval(np.array([[1.0, 0.0]]), np.array([[1.0, 0.0], [1.0, 0.0]]), np.array([1]))
    assert tie["top1"].tolist() == [0] and tie["rr"][0] == 0.5    # a tie counts against the gold passage


def test_spearman_matches_scipy_with_ties():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    for _ in range(20):
        a, b = rng.integers(0, 4, 7).astype(float), rng.normal(size=7)
        if np.ptp(a) == 0:
            continue
        assert C.spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic)
    rows = rng.normal(size=(5, 6))
    assert np.allclose(C.spearman(rows, rows[::-1]), [stats.spearmanr(x, y).statistic for x, y in zip(rows, rows[::-1])])


def test_control_recipes_share_the_sweeps_names_and_quantize_weights_only():
    from fp8lab.recipes import RECIPES
    rs = C.recipes()
    assert list(rs) == C.CONTROL_RECIPES
    for n, r in rs.items():
        assert r.weight is not None and r.act is None and r.key is None and r.value is None
        if n in RECIPES:
            assert r is RECIPES[n]


@pytest.mark.slow
def test_minilm_weights_are_fp32_and_the_embedding_is_sentence_transformers(tmp_path):
    try:
        model, tok, sha = C.load_minilm()
    except C.ControlError as e:
        pytest.skip(str(e))
    import torch
    assert all(p.dtype == torch.float32 for p in model.parameters()) and len(sha) == 64
    e = C.encode(model, tok, ["a cat sat on the mat", "a cat sat on the mat", "quantum chromodynamics"])
    assert np.allclose(np.linalg.norm(e, axis=1), 1.0)
    assert e[0] @ e[1] == pytest.approx(1.0) and e[0] @ e[2] < 0.5
    rows = C.weight_sqnr(model, C.recipes()["e4m3-w"])
    assert len(rows) == 36 and all(25 < float(r["sqnr_db"]) < 40 for r in rows)   # 6 layers x 6 Linears


@pytest.mark.slow
def test_tiny_run_and_comparison(tmp_path, capsys):
    try:
        C.minilm_dir()
    except C.ControlError as e:
        pytest.skip(str(e))
    lm = _fake_lm(tmp_path / "lm", ["e4m3-w", "int8-w", "e5m2-w"])
    out = tmp_path / "c"
    rc = C.main(["--pairs", "6", "--recipes", "int8-w,e4m3-w,e5m2-w", "--out", str(out), "--boot", "200",
                 "--lm", str(lm), "--plot", "--lm-sqnr", ""])
    assert rc == 0
    rows = read_rows(out / "control.csv", C.CSV_FIELDS)
    assert {r["metric"] for r in rows} == {"top1", "mrr", "query_cos_loss", "passage_cos_loss"}
    assert len(rows) == 3 * 4 and all(int(r["n_queries"]) == 6 for r in rows)
    cmp = json.loads((out / "comparison.json").read_text())
    assert cmp["n_formats"] == 3
    cos = {r["recipe"]: float(r["delta"]) for r in rows if r["metric"] == "query_cos_loss"}
    assert cos["int8-w"] < cos["e4m3-w"] < cos["e5m2-w"]          # more mantissa bits, less damage
    assert cmp["spearman_cos_loss_vs_lm_ppl"]["rho"] == pytest.approx(1.0)   # the fake LM has the same order
    assert (out / "control.png").is_file() and (out / "provenance.json").is_file()
    # a rerun finds every per-query file and recomputes nothing
    assert C.main(["--pairs", "6", "--recipes", "int8-w,e4m3-w,e5m2-w", "--out", str(out), "--boot", "200",
                   "--lm", "", "--lm-sqnr", ""]) == 0
    assert "FP32 embeddings recomputed" not in capsys.readouterr().out


def _fake_lm(folder, names):
    """A sweep-shaped results.csv + per-window files: deltas ordered int8 < e4m3 < e5m2."""
    from fp8lab.sweep import CSV_FIELDS
    rng = np.random.default_rng(0)
    base = rng.uniform(2000, 3000, 8)
    d = folder / "per_item" / "m-abcdefabcdef" / "ppl-t4096"
    atomic_write_json(d / "baseline.json", {"nll": base.tolist(), "ntok": [511] * 8, "nbytes": [2000] * 8})
    rows = []
    for k, n in enumerate(names):
        f = {"int8-w": 1.0005, "e4m3-w": 1.01, "e5m2-w": 1.05}[n]
        atomic_write_json(d / f"{n}.json", {"nll": (base * f).tolist(), "ntok": [511] * 8, "nbytes": [2000] * 8})
        rows.append(dict(model="m", model_sha256="abcdefabcdef0000", recipe=n, task="ppl", metric="ppl", value=1,
                         baseline=1, delta_pct=(f - 1) * 100, ci95_low=0, ci95_high=9, delta_unit="%", n=8,
                         size="t4096", seq_len=512, seed=0, seconds=1, model_note="a fake LM"))
    write_rows(rows, folder / "results.csv", CSV_FIELDS)
    return folder / "results.csv"


def test_bad_input_is_one_line(tmp_path, capsys):
    assert C.main(["--recipes", "fp7-w", "--out", str(tmp_path), "--lm", ""]) == 2
    assert "unknown control recipe" in capsys.readouterr().err
    assert C.main(["--pairs", "1", "--recipes", "e4m3-w", "--out", str(tmp_path), "--lm", ""]) == 2
    assert "--pairs" in capsys.readouterr().err


def test_compare_sweeps_rank_correlation(tmp_path):
    a = _fake_lm(tmp_path / "a", ["int8-w", "e4m3-w", "e5m2-w"])
    b = _fake_lm(tmp_path / "b", ["int8-w", "e4m3-w", "e5m2-w"])
    r = C.compare_sweeps([a], [b], n_boot=300)
    assert r["recipes"] == ["int8-w", "e4m3-w", "e5m2-w"] and r["spearman"]["rho"] == pytest.approx(1.0)
    assert r["spearman"]["ci95_low"] <= 1.0
    with pytest.raises(C.ControlError, match="need 3"):
        C.compare_sweeps([a], [b], recipes=["int8-w", "e5m2-w"])


@pytest.mark.slow
def test_lm_weight_sqnr_on_the_4bit_lm():
    from fp8lab.models import MissingPackageError
    try:
        rows, name, note = C.lm_weight_sqnr("smollm2-135m", ["int8-w", "e5m2-w"], layers=(0,))
    except MissingPackageError as e:
        pytest.skip(str(e))
    assert name == "smollm2-135m" and "4-bit" in note
    assert {r["linear"].split(".")[-1] for r in rows} == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                          "up_proj", "down_proj"}
    by = {r["recipe"]: [] for r in rows}
    for r in rows:
        by[r["recipe"]].append(float(r["sqnr_db"]))
    assert min(by["int8-w"]) > max(by["e5m2-w"])           # 8 bits of integer grid beat 2 mantissa bits


def test_the_committed_comparison_reads_the_committed_sweeps():
    """outputs/control/comparison.csv sets MiniLM's damage beside the 4-bit LM's perplexity change: each LM number it
    holds must be the one the committed sweeps hold now (outputs/results.csv, outputs/sweep_more/results.csv), or the
    control compares against a run that is no longer there (re-record the control after re-recording a sweep)."""
    import csv
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    cmp_file = repo / "outputs" / "control" / "comparison.csv"
    if not cmp_file.is_file():
        pytest.skip("no committed control comparison")
    lm = {}
    for f in (repo / "outputs" / "results.csv", repo / "outputs" / "sweep_more" / "results.csv"):
        for r in csv.DictReader(f.open()) if f.is_file() else []:
            if (r["task"], r["metric"]) == ("ppl", "ppl"):
                lm.setdefault(r["recipe"], []).append((float(r["delta_pct"]), int(r["n"])))
    rows = list(csv.DictReader(cmp_file.open()))
    assert rows
    for r in rows:
        have = lm.get(r["recipe"], [])
        assert any(abs(d - float(r["lm_ppl_delta_pct"])) < 1e-6 * max(1.0, abs(d)) and n == int(r["lm_n_windows"])
                   for d, n in have), f"{r['recipe']}: {r['lm_ppl_delta_pct']} (n {r['lm_n_windows']}) not in {have}"
