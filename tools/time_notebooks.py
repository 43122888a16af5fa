"""Time every notebook as a workshop attendee would run it: top to bottom with nbclient, at small and full size.

    python tools/time_notebooks.py                         # every notebook, small and full -> runs/notebook_times.json
    python tools/time_notebooks.py --sizes small --only 01,02
    python tools/time_notebooks.py --record                # -> outputs/notebook_times.json (from a clean commit)

Each notebook runs in a fresh kernel started in a scratch folder (not notebooks/), as in the tests; nothing is
saved back into the notebook. For each run the file records the wall time, the CPU seconds of the kernel process
(user + system, children included: on a shared machine the CPU time says how much work it was, the wall time how
long it took here), and whether it finished. The machine's core count and load average at the start and end are
recorded with the provenance, because a shared machine runs slower than an idle laptop. Entries already in the
output file for notebooks or sizes not re-timed are kept, so the table can be completed one notebook at a time.
tools/render_docs.py renders notebooks/README.md's table from this file.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def time_one(path: Path, small: bool, timeout: int) -> dict:
    """Execute one notebook in a fresh kernel; {"wall_s", "cpu_s", "ok", "error"?}."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    nb = nbformat.read(path, as_version=4)
    env_old = os.environ.get("FP8LAB_SMALL")
    os.environ["FP8LAB_SMALL"] = "1" if small else "0"
    cpu0, t0 = _children_cpu(), time.time()
    ok, err = True, None
    try:
        with tempfile.TemporaryDirectory(prefix="fp8lab_time_") as cwd:
            NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": cwd}}).execute()
    except (CellExecutionError, CellTimeoutError, RuntimeError) as e:
        ok, err = False, " ".join(str(e).split())[-300:]
    finally:
        if env_old is None:
            os.environ.pop("FP8LAB_SMALL", None)
        else:
            os.environ["FP8LAB_SMALL"] = env_old
    out = {"wall_s": round(time.time() - t0, 1), "cpu_s": round(_children_cpu() - cpu0, 1), "ok": ok}
    if err:
        out["error"] = err
    return out


def main(argv=None) -> int:
    from fp8lab.provenance import provenance
    from fp8lab.store import REFERENCE, atomic_write_json, read_json

    ap = argparse.ArgumentParser(prog="python tools/time_notebooks.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="small,full", help="small, full or both (default)")
    ap.add_argument("--only", default=None, help="notebook numbers, e.g. 01,02 (default: every notebook)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per cell")
    ap.add_argument("--record", action="store_true", help="write outputs/notebook_times.json (the committed table)")
    ap.add_argument("--out", default=None, help="output file (default runs/notebook_times.json; outputs/ with --record)")
    a = ap.parse_args(argv)
    sizes = [s for s in a.sizes.split(",") if s]
    if not sizes or any(s not in ("small", "full") for s in sizes):
        ap.error(f"--sizes takes small and/or full, got {a.sizes!r}")
    out = Path(a.out) if a.out else (REFERENCE / "notebook_times.json" if a.record else REPO / "runs" / "notebook_times.json")
    if not a.record and out.resolve().is_relative_to(REFERENCE.resolve()):
        ap.error(f"{out} is a committed result: pass --record to write it")
    nbs = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if a.only:
        want = {x.strip() for x in a.only.split(",")}
        nbs = [p for p in nbs if p.name[:2] in want]
    if not nbs:
        ap.error("no notebook selected")
    prev = {}
    if out.is_file():
        try:
            prev = read_json(out).get("notebooks", {})
        except ValueError:
            prev = {}
    import torch

    prov = provenance(" ".join(["python tools/time_notebooks.py", *(argv if argv is not None else sys.argv[1:])]),
                      cuda=False)
    load_start = round(os.getloadavg()[0], 1)
    results = {k: dict(v) for k, v in prev.items()}
    for size in sizes:
        for p in nbs:
            print(f"{p.name} ({size}) ...", end=" ", flush=True)
            r = time_one(p, size == "small", a.timeout)
            results.setdefault(p.stem, {})[size] = r
            print(f"{r['wall_s']:.0f} s wall, {r['cpu_s']:.0f} s CPU{'' if r['ok'] else ' FAILED: ' + r['error']}",
                  flush=True)
            atomic_write_json(out, {"provenance": prov, "machine": {
                "cpu": prov["machine"].get("cpu"), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                "load_start": load_start, "load_end": round(os.getloadavg()[0], 1)}, "notebooks": results})
    print(f"wrote {out}")
    return 0 if all(v.get("ok", True) for d in results.values() for v in d.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
