"""The parts of a gemm benchmark run that guard the rest: smoke tests in child processes (a hung or faulting kernel
cannot take the run down: it is marked failed and skipped), the GPU pytest run recorded with the results, and the
run's time budget.

    status = smoke_all()          # {"gemv_fp8": {"ok": True, "msg": "max err / tolerance = 0.02"}, ...}
    run_pytest(path, skip)        # "516 passed in 240 s"
    python -m fp8lab.kernels.gemm_smoke --smoke gemv_fp8,mma_fp8 --progress /tmp/p.jsonl   (the child process)
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import harness

SMOKE_ORDER = ("gemv_fp8", "gemv_nvfp4", "mma_bf16", "mma_fp8", "wgmma", "wgmma_pipe", "wgmma_256", "wgmma_ws",
               "wgmma_tma_a", "wgmma_tma_b", "wgmma_tma_c", "wgmma_tma_d", "wgmma_tma_e", "wgmma_tma")


_T0 = [None]  # the run's start (time.time()) and budget, set by start_budget
DEADLINE_S = [float("inf")]


def out_of_time(what: str, notes: list) -> bool:
    """True once the run's time budget (--budget-s) is spent: the rest is skipped and recorded as such."""
    import time

    if _T0[0] is not None and time.time() - _T0[0] > DEADLINE_S[0]:
        notes.append({"kernel": "-", "shape": what, "error": "skipped: the run's time budget was spent"})
        print("  out of time budget: skipping", what, flush=True)
        return True
    return False


def start_budget(seconds: float) -> None:
    _T0[0], DEADLINE_S[0] = time.time(), seconds


def _smoke_one(name: str) -> tuple[bool, str]:
    import torch

    from . import gemm_w8a8 as G
    from . import gemv_fp8 as F8
    from . import gemv_nvfp4 as F4
    from . import tolerances

    torch.manual_seed(0)
    if name == "gemv_fp8":
        N, K, M = 272, 1024, 5
        w = F8.random_codes(N, K)
        s = torch.rand(math.ceil(N / 128), K // 128, device="cuda") + 0.01
        x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        wd = F8.dequant_weight(w, s)
        y = F8.gemv_fp8(x, w, s)
    elif name == "gemv_nvfp4":
        N, K, M = 272, 1024, 5
        wp, sc = F4.random_nvfp4(N, K)
        x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        wd = F4.dequant_weight(wp, sc, 0.5)
        y = F4.gemv_nvfp4(x, wp, sc, 0.5)
    else:
        M, N, K = 200, 256, 512
        a, b = F8.random_codes(M, K), F8.random_codes(N, K)
        sa = torch.rand(M, K // 128, device="cuda") * 1e-2 + 1e-3
        sb = torch.rand(N // 128, K // 128, device="cuda") * 1e-2 + 1e-3
        x = F8.decode_e4m3(a) * sa.double().repeat_interleave(128, 1)
        wd = F8.decode_e4m3(b) * sb.double().repeat_interleave(128, 0).repeat_interleave(128, 1)
        y = G.gemm_w8a8(a, sa, b, sb, kernel=name)
    torch.cuda.synchronize()
    ref = x.double() @ wd.T
    terms = x.double().abs() @ wd.abs().T
    err = tolerances.matmul(name, K).worst(y, ref, terms)
    return err <= 1.0, f"max err / tolerance = {err:.3g}"


def smoke_child(names, progress: str) -> int:
    for n in names:
        try:
            ok, msg = _smoke_one(n)
        except Exception as e:
            with open(progress, "a") as f:
                f.write(json.dumps({"kernel": n, "ok": False, "msg": f"{type(e).__name__}: {e}"[:400]}) + "\n")
            return 1  # a CUDA error poisons this context: let a fresh process take the rest
        with open(progress, "a") as f:
            f.write(json.dumps({"kernel": n, "ok": ok, "msg": msg}) + "\n")
    return 0


def smoke_all(names=SMOKE_ORDER, timeout: int = 240) -> dict:
    """Run the smoke tests in child processes; a hang or crash marks that kernel failed and moves on."""
    status, remaining = {}, list(names)
    while remaining:
        with tempfile.NamedTemporaryFile("w+", suffix=".jsonl", delete=False) as tf:
            progress = tf.name
        cmd = [sys.executable, "-m", "fp8lab.kernels.gemm_smoke", "--smoke", ",".join(remaining), "--progress", progress]
        try:
            subprocess.run(cmd, cwd=harness.REPO, timeout=timeout)
            ended = "exited"
        except subprocess.TimeoutExpired:
            ended = f"timed out after {timeout} s (hang?)"
        for line in Path(progress).read_text().splitlines():
            d = json.loads(line)
            status[d["kernel"]] = d
        os.unlink(progress)
        nxt = [n for n in remaining if n not in status]
        if nxt and nxt == remaining or (nxt and ended != "exited"):
            status[nxt[0]] = {"kernel": nxt[0], "ok": False, "msg": f"child process {ended} during this kernel"}
        remaining = [n for n in remaining if n not in status]
        print("smoke:", {k: v["ok"] for k, v in status.items()})
    return status


def run_pytest(path: Path | None, skip: set, timeout: int = 300) -> str:
    env = dict(os.environ, FP8LAB_SKIP_KERNELS=",".join(sorted(skip)))
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "tests/test_kernels_gemm.py", "tests/test_kernels_gemm_tma.py",
                            "-q", "-p", "no:cacheprovider"],
                           cwd=harness.REPO, env=env, capture_output=True, text=True, timeout=timeout)
        out = r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += f"\nTIMED OUT after {timeout} s"
    if path:
        path.write_text(out)
    lines = [ln for ln in out.splitlines() if re.search(r"\d+ (passed|failed)", ln)]
    return lines[-1].strip("= ") if lines else out.strip().splitlines()[-1] if out.strip() else "no output"


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--smoke", required=True)
    p.add_argument("--progress", required=True)
    a = p.parse_args()
    raise SystemExit(smoke_child([n for n in a.smoke.split(",") if n], a.progress))
