"""The benchmark harness keeps its promises on any machine: nothing is timed before it passed validation in the
same run (a deliberately broken kernel is caught and never reaches a timer), outputs are poisoned before the
validation run, variants are interleaved A B / B A, and the reported spread is the rounds' quartiles.
The bench CLI without a GPU answers in one line with status 2.
"""
import subprocess
import sys

import pytest
import torch

from fp8lab import store
from fp8lab.kernels import harness


def test_quartiles():
    assert harness.quartiles([1, 2, 3, 4, 5]) == (2.0, 3.0, 4.0)
    assert harness.quartiles([7.0]) == (7.0, 7.0, 7.0)


def test_interleave_alternates_and_reports_spread():
    order = []

    def timer(name, values):
        it = iter(values)
        return lambda: (order.append(name), (next(it), "fake"))[1]
    t = harness.interleave({"A": timer("A", [3, 1, 2, 9]), "B": timer("B", [5, 5, 5, 5])}, rounds=4)
    assert order == ["A", "B", "B", "A", "A", "B", "B", "A"]  # each round starts one variant later
    assert t["A"].median == 2.5 and (t["A"].min, t["A"].max) == (1, 9) and t["A"].rounds == 4
    assert t["B"].spread() == {"q1": 5, "q3": 5, "min": 5, "max": 5, "rounds": 4}
    # step 2 over (neighbour, variant) pairs: each round opens on a neighbour, so B always follows A, D always C
    order.clear()
    fake = {n: timer(n, [1] * 3) for n in "ABCDE"}
    harness.interleave(fake, rounds=3, step=2)
    assert order == list("ABCDE") + list("CDEAB") + list("EABCD")
    assert all(order[i - 1] == {"B": "A", "D": "C"}[n] for i, n in enumerate(order) if n in "BD")


def test_poison_fills_outputs():
    f, b = torch.zeros(4), torch.zeros(3, dtype=torch.uint8)
    harness.poison_(f, b)
    assert torch.isnan(f).all() and (b == 0xA5).all()


def test_a_broken_kernel_is_never_timed(tmp_path):
    bench = harness.Bench("test", tmp_path / "x.json", "pytest")
    out = torch.empty(8)
    timed = []

    def broken():  # "forgets" to write half of its output
        out[:4] = 1.0
        return out

    ok = bench.validate("broken", broken, lambda y: (bool(torch.isfinite(y).all()), {"nan": int(torch.isnan(y).sum())}),
                        outputs=[out])
    assert not ok and bench.validation["broken"] == {"passed": False, "nan": 4}  # the poison showed the unwritten half
    with pytest.raises(harness.NotValidated):
        bench.compare({"broken": lambda: timed.append(1) or (1.0, "x")})
    with pytest.raises(harness.NotValidated):
        bench.time("never validated", lambda: timed.append(1) or (1.0, "x"))
    assert timed == []

    def good():
        out.fill_(1.0)
        return out
    assert bench.validate("good", good, lambda y: bool(torch.isfinite(y).all()), outputs=[out])
    assert bench.time("good", lambda: (2.0, "fake")).median == 2.0


def test_a_crashing_kernel_is_a_failed_validation(tmp_path):
    bench = harness.Bench("test", tmp_path / "x.json", "pytest")

    def crash():
        raise RuntimeError("illegal memory access")
    assert not bench.validate("crash", crash, lambda y: True)
    assert "illegal memory access" in bench.validation["crash"]["error"]
    assert bench.notes[-1]["kernel"] == "crash"


def test_write_goes_through_the_store_with_provenance(tmp_path):
    bench = harness.Bench("test", tmp_path / "r.json", "python -m fp8lab.kernels.bench test")
    bench.trust("copy", "anchor")
    t = bench.time("copy", lambda: (4.0, "fake"))
    bench.record(harness.Result("copy", "[1]", "u8", 0.0, bytes=4000), t)
    bench.results[-1]["nan_field"] = float("nan")  # JSON cannot hold it: written as null, not refused
    d = store.read_json(bench.write(), required=("provenance", "results", "validation"))
    assert d["provenance"]["command"] == "python -m fp8lab.kernels.bench test" and "git_commit" in d["provenance"]
    r = d["results"][0]
    assert r["time_us"] == 4.0 and r["gbps"] == pytest.approx(1.0) and r["spread_us"]["rounds"] == 5
    assert r["nan_field"] is None and d["validation"]["copy"]["trusted"] == "anchor"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU answer")
@pytest.mark.parametrize("family", ["gemm", "attention", "quant"])
def test_bench_without_a_gpu_says_so_in_one_line(family):
    r = subprocess.run([sys.executable, "-m", "fp8lab.kernels.bench", family], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1 and "no CUDA device" in lines[0], lines


def test_merge_runs_keeps_each_record_with_its_run_and_refuses_dirty_trees(tmp_path):
    import json

    def rec(path, commit, dirty, kernels, ceil):
        path.write_text(json.dumps({"provenance": {"git_commit": commit, "dirty": dirty, "command": "x"},
                                    "ceilings": {"copy_gbps": ceil}, "notes": [commit],
                                    "results": [{"kernel": k, "time_us": 1.0} for k in kernels]}))
        return path

    a = rec(tmp_path / "a.json", "aaa", False, ["k1", "k2"], 4200.0)
    b = rec(tmp_path / "b.json", "bbb", False, ["k3"], 4300.0)
    m = harness.merge_runs([a, b], tmp_path / "m.json", "merge a b")
    assert [(r["kernel"], r["run"], r["run_commit"]) for r in m["results"]] == [("k1", 0, "aaa"), ("k2", 0, "aaa"),
                                                                              ("k3", 1, "bbb")]
    assert m["provenance"]["git_commit"] == "bbb" and [p["git_commit"] for p in m["provenance"]["merged_from"]] == ["aaa", "bbb"]
    assert m["ceilings_by_run"] == [{"copy_gbps": 4200.0}, {"copy_gbps": 4300.0}]
    assert json.loads((tmp_path / "m.json").read_text())["provenance"]["merged_by"] == "merge a b"
    d = rec(tmp_path / "d.json", "ddd", True, ["k4"], 1.0)
    with pytest.raises(ValueError, match="dirty"):
        harness.merge_runs([a, d], tmp_path / "m2.json", "merge a d")
    # one run back out (to re-record the other part and join them again): its records, provenance and ceilings
    back = harness.run_of(m, 1, keep=("notes",))
    assert back["results"] == [{"kernel": "k3", "time_us": 1.0}] and back["provenance"]["git_commit"] == "bbb"
    assert back["ceilings"] == {"copy_gbps": 4300.0} and back["notes"] == ["bbb"] and "merged_from" not in back["provenance"]
    (tmp_path / "b2.json").write_text(json.dumps(back))
    again = harness.merge_runs([a, tmp_path / "b2.json"], tmp_path / "m3.json", "merge a, run 1 of m")
    assert [(r["kernel"], r["run"], r["run_commit"]) for r in again["results"]] == [
        (r["kernel"], r["run"], r["run_commit"]) for r in m["results"]]
    with pytest.raises(ValueError, match="no run 2"):
        harness.run_of(m, 2)


@pytest.mark.gpu
def test_graph_time_us_settles_before_timing():
    """settle_ms replays the graph about that long before the timed replays (counted from one replay's time), and
    says so in the second value; without it the timing is as before."""
    import time

    x = torch.randn(2048, 2048, device="cuda")
    calls = [lambda: x @ x]
    t0, how0 = harness.graph_time_us(calls, min_calls=4, rep=5)
    start = time.perf_counter()
    t1, how1 = harness.graph_time_us(calls, min_calls=4, rep=5, settle_ms=200)
    took = time.perf_counter() - start
    assert how0 == "cuda_graph" and how1 == "cuda_graph, settled 200 ms"
    assert took >= 0.2 and t0 > 0 and t1 > 0


def test_source_digest_follows_includes_and_records_compare_their_own_files():
    """A record stores the sha256 of the sources it depends on (headers included, transitively); a report compares
    exactly the files a record names, whichever bench wrote it."""
    from fp8lab.kernels import bench_attention as BA
    from fp8lab.kernels import bench_layer as BL
    from fp8lab.kernels import gemm_report as GR

    inc = harness.with_includes(("attention_decode_v3.cu",))
    assert inc[0] == "attention_decode_v3.cu" and {"attention_decode.cuh", "tma.cuh", "fp8_decode.cuh", "ptx.cuh",
                                                   "formats.cuh"} <= set(inc) and len(set(inc)) == len(inc)
    assert set(BA.SOURCES) <= set(BL.SOURCES) and {"gemv_v3_common.cuh", "decode_layer.cu"} <= set(BL.SOURCES)
    dig = harness.source_digest(BA.SOURCES)
    assert set(dig) == set(BA.SOURCES) and all(len(v) == 12 for v in dig.values())
    rec = {"provenance": {"git_commit": "abc1234", "dirty": False}, "sources_sha256_12": dig}
    assert GR.provenance_summary(rec)["sources_match_this_tree"] is True
    rec["sources_sha256_12"] = {**dig, "ptx.cuh": "0" * 12}
    s = GR.provenance_summary(rec)
    assert s["sources_match_this_tree"] is False and s["sources_differing"] == ["ptx.cuh"]
    assert "differ from this tree: ptx.cuh (changed since abc1234: " in BA.format_provenance(rec)
    assert "git diff abc1234 -- fp8lab/kernels/ptx.cuh" in GR.provenance_lines(rec)[-1]
    assert "not recorded with this run" in BA.format_provenance({"provenance": {}})
    assert "not recorded with this run" in BA.format_provenance({})  # no provenance at all: lines, not a KeyError
    # whatever names a record carries, only plain files of fp8lab/kernels are read
    assert harness.source_digest(["..", ".", "/etc/passwd", "../harness.py", "sub/x.cu", "nope.cu", "ptx.cuh"]) == \
        {"ptx.cuh": dig["ptx.cuh"]}


def test_prefill_attention_provenance_reads_nested_records():
    from fp8lab.kernels import bench_prefill_attn as BP

    rec = {"provenance": {"git_commit": "abc1234", "device": "NVIDIA H200",
                          "packages": {"torch": "2.11.0", "cupy-cuda13x": "14.2.0"}}}
    text = BP.format_provenance(rec)
    assert "2.11.0" in text and "14.2.0" in text and "not recorded with this run" in text
