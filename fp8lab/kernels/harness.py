"""Benchmark harness shared by every kernel family (`python -m fp8lab.kernels.bench <family>`).

Method (see llm.c dev/cuda and the lab's METHOD notes):
  * validate before timing (the caller does this; `bench` refuses to time an unvalidated kernel),
  * CUDA events around the region, warm-up first, the MEDIAN of many runs,
  * L2 defeated by rotating over several input sets whose total is several times the L2 size,
  * bytes moved and FLOPs counted by the caller, turned into GB/s and TFLOP/s here,
  * every result compared with an anchor measured in the same run (copy bandwidth, cuBLAS, torch).

Output schema (`outputs/kernels/<family>.json`):
  {"provenance": {git_commit, device, driver, torch, cupy, date, command, ...},
   "ceilings": {"copy_gbps": ..., ...},            # measured in the same run
   "results": [{kernel, shape, dtype, time_us, gbps, tflops, anchor, anchor_time_us, speedup,
                fraction_of_copy_bw, ...}, ...]}
`speedup` = anchor time / our time (> 1 means we are faster than the anchor).
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import platform
import subprocess
import sys
from dataclasses import dataclass, field, asdict
from pathlib import Path
from statistics import median
from typing import Callable, Sequence

REPO = Path(__file__).resolve().parents[2]


def git_commit() -> str:
    """The commit of the working tree ('+dirty' when it has uncommitted changes), or 'unknown'.

    A copy of the tree without usable git history (the lent GPU machine gets one) cannot resolve HEAD:
    there the command passes the commit in FP8LAB_GIT_COMMIT, which wins when set.
    """
    import os

    env = os.environ.get("FP8LAB_GIT_COMMIT")
    if env:
        return env
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        if len(sha) != 40:  # 'HEAD' or an error message: not a commit
            return "unknown"
        return sha + ("+dirty" if dirty else "")
    except Exception:
        return "unknown"


def provenance(command: str | None = None) -> dict:
    """Who/what/where/when of a GPU run: git commit, device, driver, library versions, date, command."""
    info = {
        "git_commit": git_commit(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command or " ".join([Path(sys.executable).name] + sys.argv),
        "python": platform.python_version(),
        "host": platform.node(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            info.update(device=p.name, sms=p.multi_processor_count,
                        cc=f"{p.major}.{p.minor}", mem_gib=round(p.total_memory / 2**30, 1),
                        l2_bytes=getattr(p, "L2_cache_size", None), cuda=torch.version.cuda)
    except Exception:
        pass
    try:
        import cupy

        info["cupy"] = cupy.__version__
        info["driver"] = cupy.cuda.runtime.driverGetVersion()
    except Exception:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.mem", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        if out:
            info["nvidia_smi"] = out
    except Exception:
        pass
    return info


def time_us(fn: Callable[[int], object], n_sets: int = 1, warmup: int = 10, rep: int = 50) -> float:
    """Median time in microseconds of `fn(i)`, timed with CUDA events, one event pair per call.

    `fn(i)` should run the kernel on input set `i % n_sets`; rotating over sets whose total size is
    several times the L2 (60 MB on an H200) keeps us measuring HBM, not the cache.
    """
    import torch

    for i in range(warmup):
        fn(i % n_sets)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    for i in range(rep):
        starts[i].record()
        fn(i % n_sets)
        ends[i].record()
    torch.cuda.synchronize()
    return 1000.0 * median(s.elapsed_time(e) for s, e in zip(starts, ends))


def graph_time_us(calls, min_calls: int = 16, rep: int = 20) -> tuple[float, str]:
    """Per-call time of `calls` (zero-arg callables, one per rotation set) replayed in a CUDA graph.

    Falls back to eager launches (noted in the second value) if the capture fails."""
    import torch

    per = max(1, math.ceil(min_calls / len(calls)))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture: cuBLAS handles, workspaces, module loads
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, capture_error_mode="thread_local"):
            for _ in range(per):
                for c in calls:
                    c()
        t = time_us(lambda i: g.replay(), warmup=3, rep=rep)
        del g
        return t / (per * len(calls)), "cuda_graph"
    except Exception as e:  # pragma: no cover - depends on the device
        torch.cuda.synchronize()
        n = per * len(calls)

        def run(i):
            for _ in range(per):
                for c in calls:
                    c()
        return time_us(run, warmup=2, rep=rep) / n, f"eager ({type(e).__name__})"


def sets_for_l2(bytes_per_set: int, l2_bytes: int | None = None, factor: int = 4, cap: int = 16) -> int:
    """How many input sets to rotate so that together they exceed `factor` x L2 (at least 1, at most cap)."""
    if l2_bytes is None:
        try:
            import torch

            l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
        except Exception:
            l2_bytes = 60 * 2**20
    need = factor * l2_bytes
    return max(1, min(cap, -(-need // max(1, bytes_per_set))))


def copy_bandwidth_gbps(nbytes: int = 2 * 2**30) -> float:
    """Device-to-device copy bandwidth, counting bytes read + written (the anchor for memory-bound kernels)."""
    import torch

    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    t = time_us(lambda i: dst.copy_(src), warmup=5, rep=20)
    return 2 * src.numel() / (t * 1e-6) / 1e9


@dataclass
class Result:
    """One timed kernel. `speedup` = anchor_time_us / time_us; `fraction_of_copy_bw` for memory-bound kernels."""

    kernel: str
    shape: str
    dtype: str
    time_us: float
    bytes: int = 0
    flops: int = 0
    anchor: str = ""
    anchor_time_us: float | None = None
    copy_gbps: float | None = None
    notes: str = ""
    extra: dict = field(default_factory=dict)

    def record(self) -> dict:
        d = asdict(self)
        extra = d.pop("extra")
        d["gbps"] = self.bytes / (self.time_us * 1e-6) / 1e9 if self.bytes else None
        d["tflops"] = self.flops / (self.time_us * 1e-6) / 1e12 if self.flops else None
        d["speedup"] = (self.anchor_time_us / self.time_us) if self.anchor_time_us else None
        d["fraction_of_copy_bw"] = (d["gbps"] / self.copy_gbps) if (d["gbps"] and self.copy_gbps) else None
        d.update(extra)
        return d


def print_table(records: Sequence[dict]) -> None:
    """The short table a reader sees last in a device run's output."""
    hdr = f"{'kernel':38s} {'shape':22s} {'time_us':>9s} {'GB/s':>8s} {'TFLOP/s':>8s} {'xcopy':>6s} {'speedup':>8s}  anchor"
    print(hdr)
    print("-" * len(hdr))
    for r in records:
        f = lambda v, fmt: (fmt % v) if isinstance(v, (int, float)) else "-"
        print(f"{r['kernel'][:38]:38s} {r['shape'][:22]:22s} {f(r['time_us'], '%9.1f')} {f(r.get('gbps'), '%8.0f')} "
              f"{f(r.get('tflops'), '%8.1f')} {f(r.get('fraction_of_copy_bw'), '%6.2f')} {f(r.get('speedup'), '%8.2f')}  {r.get('anchor', '')}")


def write_json(path: str | Path, records: Sequence[dict], ceilings: dict | None = None, command: str | None = None) -> Path:
    """Write `{"provenance", "ceilings", "results"}` to `path` (creating folders) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"provenance": provenance(command), "ceilings": ceilings or {}, "results": list(records)}
    path.write_text(json.dumps(payload, indent=1, default=float) + "\n")
    return path


def load_json(path: str | Path) -> dict:
    """Read a recorded benchmark (used by notebooks on CPU-only machines to show recorded results)."""
    return json.loads(Path(path).read_text())
