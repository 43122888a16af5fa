"""`python -m fp8lab.kernels.bench gemm|attention|quant` on a machine without a GPU: one clean line, exit 2.

A workshop attendee on a laptop runs the benchmark entry point: the lab cannot measure anything there, and it
must say so in one line (the recorded results are in the notebooks), not with a traceback. These cases run as
real processes (the entry point is a command line), under a timeout; a few command lines are fuzzed.

"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _has_gpu() -> bool:
    try:
        from fp8lab.kernels import cuda_available
        return bool(cuda_available())
    except Exception:  # noqa: BLE001 -- any import problem means: no usable GPU here
        return False


pytestmark = pytest.mark.skipif(_has_gpu(), reason="a CUDA device is present: the bench would run for real")


def bench(*args, timeout=180):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", "fp8lab.kernels.bench", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)


def assert_one_clean_line(r):
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr[-1500:]
    assert r.returncode == 2, (r.returncode, r.stderr[-500:])
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, r.stderr[-1500:]
    assert not r.stdout.strip(), r.stdout[-500:]


@pytest.mark.parametrize("family", ["gemm", "attention", "quant"])
def test_family_without_gpu_one_line_exit_2(family):
    assert_one_clean_line(bench(family))


@pytest.mark.parametrize("args", [
    pytest.param(["gemm", "--help"], id="gemm-help"),            # --help prints and exits 0: no GPU needed
    pytest.param(["quant", "--help"], id="quant-help"),
])
def test_help_needs_no_gpu(args):
    r = bench(*args)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "usage" in r.stdout.lower()


def test_unknown_family_one_line():
    r = bench("nope")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "unknown benchmark family" in r.stderr


def test_fuzz_bench_command_lines():
    """A handful of command lines (each is a process: torch imports dominate, ~2 s each)."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    flags = st.lists(st.sampled_from(["--small", "--no-compile", "--out", "/nonexistent/x.json", "--bogus", "1",
                                      "--out=runs/x.json", "-x", ""]), max_size=3)

    # each case is a process that imports torch: few cases, and no shrinking (it would run dozens more)
    @hypothesis.settings(max_examples=4, deadline=None, derandomize=True, database=None,
                         phases=(hypothesis.Phase.generate,), report_multiple_bugs=False)
    @hypothesis.given(family=st.sampled_from(["gemm", "attention", "quant"]), rest=flags)
    def case(family, rest):
        r = bench(family, *rest)
        assert "Traceback" not in r.stderr
        assert r.returncode == 2 and len([x for x in r.stderr.splitlines() if x.strip()]) == 1, r.stderr[-800:]

    case()
