"""Benchmark harness shared by every kernel family (`python -m fp8lab.kernels.bench <family>`).

Method (llm.c dev/cuda, and the lab's METHOD notes):
  * validate before timing: `Bench.validate` poisons the outputs, runs the kernel once and checks it against the
    reference; `Bench.time` / `Bench.compare` refuse (NotValidated) to time a kernel that did not pass;
  * CUDA events around the region, warm-up first, the MEDIAN of many runs (`time_us`), or CUDA-graph replays for
    microsecond kernels (`graph_time_us`): the only two timers of the lab;
  * variants being compared are INTERLEAVED (A B A B ... rounds, `compare`) and reported as the median over rounds
    with its spread (quartiles, min, max), so a clock or thermal drift hits every variant alike and one number
    is never a lucky run;
  * L2 defeated by rotating over several input sets whose total is several times the L2 size (`sets_for_l2`);
  * bytes and FLOPs counted by the caller, turned into GB/s and TFLOP/s here, compared with anchors (copy
    bandwidth, cuBLAS, torch) measured in the same run;
  * provenance from fp8lab.provenance, every write through fp8lab.store.

Output schema (`outputs/kernels/<family>.json`):
  {"provenance": {...fp8lab.provenance...}, "ceilings": {"copy_gbps": ...}, "validation": {kernel: {...}},
   "results": [{kernel, shape, dtype, time_us, spread_us: {q1, q3, min, max, rounds}, gbps, tflops, anchor,
                anchor_time_us, speedup, fraction_of_copy_bw, ...}, ...]}
`speedup` = anchor time / our time (> 1 means we are faster than the anchor).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import Callable, Sequence

REPO = Path(__file__).resolve().parents[2]


KERNEL_DIR = Path(__file__).resolve().parent


def with_includes(files) -> tuple[str, ...]:
    """`files` (names in fp8lab/kernels) and every header their .cu / .cuh files #include "...", transitively, in order."""
    import re

    out, todo = [], list(files)
    while todo:
        f = todo.pop(0)
        if f in out:
            continue
        out.append(f)
        p = KERNEL_DIR / f
        if p.suffix in (".cu", ".cuh") and p.exists():
            todo += re.findall(r'^\s*#include\s+"([^"]+)"', p.read_text(), flags=re.M)
    return tuple(out)


def source_digest(files) -> dict:
    """sha256 (first 12 hex) of each named source in fp8lab/kernels that exists: ties a recorded result to the code
    in the tree (a record stores it as "sources_sha256_12"; gemm_report.provenance_summary compares)."""
    import hashlib

    ok = [f for f in files if isinstance(f, str) and Path(f).name == f and f not in (".", "..")
          and (KERNEL_DIR / f).is_file()]  # a plain file of this folder, whatever name a record carries
    return {f: hashlib.sha256((KERNEL_DIR / f).read_bytes()).hexdigest()[:12] for f in ok}


def int_list(text: str, lo: int, hi: int, what: str) -> list[int]:
    """A command-line list: '1,8,16' -> [1, 8, 16], each in lo..hi; an argparse error (one clear line) otherwise.

        int_list("1,8", 1, 16, "decode token counts")   -> [1, 8]
        int_list("0", 1, 16, "decode token counts")     -> ArgumentTypeError: decode token counts must be in 1..16, got [0]
    """
    import argparse

    try:
        vals = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers ({what})") from None
    bad = [v for v in vals if not lo <= v <= hi]
    if bad or not vals:
        raise argparse.ArgumentTypeError(f"{what} must be in {lo}..{hi}, got {bad or text!r}")
    return vals


def finish_figure(fig, path=None):
    """A bench figure's last step: tight layout, then (with a path) the file through fp8lab.store.save_figure."""
    fig.tight_layout()
    if path:
        from fp8lab import store

        store.save_figure(fig, path)
    return fig


class NotValidated(RuntimeError):
    """A kernel was about to be timed without having passed its validation in this run."""


# ---- the two timers ---------------------------------------------------------------------------------------
def time_us(fn: Callable[[int], object], n_sets: int = 1, warmup: int = 10, rep: int = 50, per: int = 1) -> float:
    """Median time in microseconds of one `fn(i)`, timed with CUDA events.

    Each timed sample runs `per` calls back to back (fn(i) with i cycling over `n_sets` input sets: rotating sets
    whose total is several times the L2 keeps the numbers HBM, and per > 1 hides Python launch overhead).
    """
    import torch

    for i in range(warmup):
        fn(i % n_sets)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    for i in range(rep):
        starts[i].record()
        for j in range(per):
            fn((i * per + j) % n_sets)
        ends[i].record()
    torch.cuda.synchronize()
    return 1000.0 * median(s.elapsed_time(e) for s, e in zip(starts, ends)) / per


def graph_time_us(calls, min_calls: int = 16, rep: int = 20, settle_ms: float = 0.0) -> tuple[float, str]:
    """Per-call time of `calls` (zero-arg callables, one per rotation set) replayed in a CUDA graph.

    settle_ms: before timing, replay the graph for about this long (the count from one timed replay). A GPU held at
    its power limit by compute-bound kernels sets its clock by what ran just before; run alone this long, the
    variant is timed at its own sustained clock instead of its predecessor's (gemm_prefill.bench_order). The second
    value says how it was timed ("cuda_graph", "cuda_graph, settled N ms").
    Falls back to eager launches (noted in the second value) if the capture fails."""
    import time

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
        how = "cuda_graph"
        if settle_ms > 0:
            g.replay()  # the first replay may carry one-off costs: the count comes from the second
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            g.replay()
            torch.cuda.synchronize()
            one_ms = max((time.perf_counter() - t0) * 1e3, 1e-3)
            for _ in range(min(10**5, math.ceil(settle_ms / one_ms))):  # back to back: no idle gap to cool in
                g.replay()
            torch.cuda.synchronize()
            how += f", settled {settle_ms:g} ms"
        t = time_us(lambda i: g.replay(), warmup=3, rep=rep)
        del g
        return t / (per * len(calls)), how
    except Exception as e:  # pragma: no cover - depends on the device
        torch.cuda.synchronize()

        def run(i):
            for _ in range(per):
                for c in calls:
                    c()
        return time_us(run, warmup=2, rep=rep) / (per * len(calls)), f"eager ({type(e).__name__})"


@dataclass
class Timing:
    """One variant over interleaved rounds: the median of the per-round times and their spread (us)."""

    median: float
    q1: float
    q3: float
    min: float
    max: float
    rounds: int
    how: str = ""

    def spread(self) -> dict:
        return {"q1": self.q1, "q3": self.q3, "min": self.min, "max": self.max, "rounds": self.rounds}


def quartiles(xs: Sequence[float]) -> tuple[float, float, float]:
    """(q1, median, q3) by linear interpolation: quartiles([1, 2, 3, 4, 5]) -> (2.0, 3.0, 4.0)."""
    s = sorted(xs)

    def q(p):
        k = (len(s) - 1) * p
        lo, hi = math.floor(k), math.ceil(k)
        return s[lo] + (s[hi] - s[lo]) * (k - lo)
    return q(0.25), q(0.5), q(0.75)


def interleave(timers: dict, rounds: int = 5, step: int = 1) -> dict[str, Timing]:
    """Run `timers` (name -> zero-arg callable returning (us, how)) in A B C A B C ... order for `rounds` rounds,
    starting each round `step` variants later (step 1: A B C, B C A, ...) so no variant always goes first. Who
    follows whom stays fixed but for the variant that opens a round (it follows the previous round's last one);
    step 2 over (neighbour, variant) pairs keeps every variant behind its own neighbour in every round."""
    names = list(timers)
    got: dict = {n: [] for n in names}
    how: dict = {}
    for r in range(rounds):
        for i in range(len(names)):
            n = names[(r * step + i) % len(names)]
            t, how[n] = timers[n]()
            got[n].append(t)
    out = {}
    for n, ts in got.items():
        q1, med, q3 = quartiles(ts)
        out[n] = Timing(med, q1, q3, min(ts), max(ts), len(ts), how[n])
    return out


# ---- helpers ----------------------------------------------------------------------------------------------
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


def copy_time_us(nbytes: int) -> float:
    """A device-to-device copy moving `nbytes` in total (nbytes/2 read + nbytes/2 written)."""
    import torch

    src = torch.empty(max(1, nbytes // 2), dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    t = time_us(lambda i: dst.copy_(src), warmup=3, rep=25, per=4)
    del src, dst
    return t


def copy_bandwidth_gbps(nbytes: int = 2 * 2**30) -> float:
    """Device-to-device copy bandwidth, counting bytes read + written (the anchor for memory-bound kernels)."""
    return nbytes / (copy_time_us(nbytes) * 1e-6) / 1e9


def poison_(*tensors) -> None:
    """Fill outputs with values no kernel writes on purpose: NaN for floats, 0xA5 bytes for integers."""
    import torch

    for t in tensors:
        if t.dtype.is_floating_point:
            t.fill_(float("nan"))
        else:
            t.view(torch.uint8).fill_(0xA5)


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
    spread_us: dict | None = None
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


# ---- a run: validation gate, timing, records, one JSON ----------------------------------------------------------
class Bench:
    """One benchmark run. Nothing is timed before it validated in this run:

        b = Bench("gemm", out_path, command)
        ok = b.validate("gemv_fp8 M=1", run=lambda: F8.gemv_fp8(x, w, s, out=y), check=lambda y: tol.worst(y, ref, terms) <= 1,
                        outputs=[y])
        t = b.compare({"gemv_fp8 M=1": calls_a, "cublas M=1": calls_b})   # interleaved rounds; NotValidated if not ok
    Anchors (cuBLAS, torch) validate too (they are checked against the same reference) or are marked with
    `trust(name, why)`, which the JSON records.
    """

    def __init__(self, family: str, out: str | Path, command: str, rounds: int = 5):
        self.family, self.out, self.command, self.rounds = family, Path(out), command, rounds
        self.validation: dict = {}
        self.results: list = []
        self.notes: list = []
        self.ceilings: dict = {}
        self.extra: dict = {}

    # -- validation --
    def validate(self, name: str, run: Callable[[], object], check: Callable[[object], object], outputs=()) -> bool:
        """Poison `outputs`, run once, check. `check(result)` returns a bool or (bool, detail dict)."""
        import torch

        poison_(*outputs)
        try:
            res = run()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            got = check(res)
        except Exception as e:  # a launch error is a failed validation, recorded, not a crash of the run
            got = (False, {"error": f"{type(e).__name__}: {str(e)[:300]}"})
        ok, detail = (got if isinstance(got, tuple) else (got, {}))
        self.validation[name] = {"passed": bool(ok), **detail}
        if not ok:
            self.notes.append({"kernel": name, "error": "validation failed: not timed", **detail})
            print(f"  {name}: VALIDATION FAILED {detail} - not timed", flush=True)
        return bool(ok)

    def trust(self, name: str, why: str) -> None:
        """An anchor timed without a check of its own (e.g. a copy): recorded as such."""
        self.validation[name] = {"passed": True, "trusted": why}

    def _require(self, name: str) -> None:
        v = self.validation.get(name)
        if not v or not v.get("passed"):
            raise NotValidated(f"{name} has not passed validation in this run; it is not timed")

    # -- timing --
    def time(self, name: str, timer: Callable[[], tuple[float, str]]) -> Timing:
        return self.compare({name: timer})[name]

    def compare(self, timers: dict, rounds: int | None = None, step: int = 1) -> dict[str, Timing]:
        """Interleaved rounds of the named timers (name -> zero-arg callable returning (us, how)); step: interleave's."""
        for n in timers:
            self._require(n)
        return interleave(timers, rounds or self.rounds, step)

    def record(self, r: Result, timing: Timing | None = None) -> dict:
        if timing is not None:
            r.time_us, r.spread_us = timing.median, timing.spread()
            r.extra.setdefault("timing", timing.how)
        d = r.record()
        self.results.append(d)
        return d

    # -- output --
    def write(self) -> Path:
        from fp8lab import provenance, store

        payload = {"provenance": provenance.provenance(self.command, cuda=True, extra_packages=("cupy-cuda13x",)),
                   "ceilings": self.ceilings, "validation": self.validation, "results": self.results,
                   "notes": self.notes, **self.extra}
        store.atomic_write_json(self.out, _finite(payload))
        return self.out


def _finite(o):
    """JSON cannot hold NaN/Inf (store refuses them): write them as null."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def print_table(records: Sequence[dict]) -> None:
    """The short table a reader sees last in a device run's output (time = median over rounds, [q1, q3])."""
    hdr = (f"{'kernel':38s} {'shape':22s} {'time_us':>9s} {'[q1, q3]':>17s} {'GB/s':>7s} {'TFLOP/s':>8s} "
           f"{'xcopy':>6s} {'speedup':>8s}  anchor")
    print(hdr)
    print("-" * len(hdr))
    for r in records:
        f = lambda v, fmt: (fmt % v) if isinstance(v, (int, float)) else "-"  # noqa: E731
        sp = r.get("spread_us") or {}
        iqr = f"[{f(sp.get('q1'), '%.1f')}, {f(sp.get('q3'), '%.1f')}]" if sp else "-"
        print(f"{r['kernel'][:38]:38s} {r['shape'][:22]:22s} {f(r['time_us'], '%9.1f')} {iqr:>17s} "
              f"{f(r.get('gbps'), '%7.0f')} {f(r.get('tflops'), '%8.1f')} {f(r.get('fraction_of_copy_bw'), '%6.2f')} "
              f"{f(r.get('speedup'), '%8.2f')}  {r.get('anchor', '')}")


def load_json(path: str | Path) -> dict:
    """Read a recorded benchmark (notebooks on CPU-only machines show recorded results)."""
    from fp8lab import store

    return store.read_json(path, required=("provenance", "results"))


def run_of(merged: dict, index: int, keep=()) -> dict:
    """One run back out of a merge_runs file: its records (without `run` / `run_commit`), its own provenance and
    ceilings, and the top-level keys named in `keep` (those only that run set: merge_runs keeps the last run's value
    of a key, so a key both runs set cannot be told apart). For re-recording one part of a merged file and joining it
    to the other parts again:
        merge_runs([new_decode_path, run_of_path], ...) with run_of(load_json("outputs/kernels/gemm.json"), 1, keep)"""
    runs = merged.get("provenance", {}).get("merged_from")
    if not runs or not 0 <= index < len(runs):
        raise ValueError(f"no run {index} in this file (merged from {len(runs or [])} runs)")
    results = [{k: v for k, v in r.items() if k not in ("run", "run_commit")}
               for r in merged["results"] if r.get("run") == index]
    out = {k: merged[k] for k in keep if k in merged}
    ceilings = (merged.get("ceilings_by_run") or [None] * len(runs))[index]
    return {**out, "provenance": runs[index], "ceilings": ceilings, "results": results}


def merge_runs(paths, out: str | Path, command: str) -> dict:
    """Join recordings of one family made by separate device calls into one file (a call is at most 10 minutes).

    Every ratio in a record is against anchors timed in ITS run, so records from different runs stay comparable
    with their own anchors; each record gains `run` (its file's index) and `run_commit`. The top-level provenance is
    the last run's, with `merged_from` holding every run's full provenance and `merged_by` the joining command;
    `ceilings_by_run` keeps each run's ceilings (`ceilings` is the last run's). Other top-level keys: the last run's
    value wins where it is set. A run whose tree was dirty is refused: merged files are committed results.

        merge_runs(["gemm_decode.json", "gemm_prefill.json"], "outputs/kernels/gemm.json", "python ...")
    """
    from fp8lab import store

    runs = [load_json(p) for p in paths]
    for p, d in zip(paths, runs):
        if d["provenance"].get("dirty") is not False:
            raise ValueError(f"{p}: recorded from a dirty or unknown tree; re-record it from a clean commit")
    merged: dict = {}
    for d in runs:
        merged.update({k: v for k, v in d.items() if v is not None})
    merged["results"] = [{**r, "run": i, "run_commit": d["provenance"].get("git_commit")}
                         for i, d in enumerate(runs) for r in d["results"]]
    merged["provenance"] = {**runs[-1]["provenance"], "merged_from": [d["provenance"] for d in runs],
                            "merged_by": command}
    merged["ceilings_by_run"] = [d.get("ceilings") for d in runs]
    store.atomic_write_json(out, merged)
    return merged
