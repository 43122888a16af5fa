"""Build notebooks from their sources (lists of ("md"|"code", source) cells), execute them top to bottom, save them
with their outputs.

    python tools/nbbuild.py notebooks/src/01_number_formats.py        # one notebook (run from the repository root)
    python tools/nbbuild.py --all                                     # every notebooks/src/NN_*.py, in order
    python tools/nbbuild.py --all --small                             # the same at FP8LAB_SMALL=1 (a quick check)
    python tools/nbbuild.py --all --from 05                           # resume at notebook 05

Each notebooks/src/NN_*.py defines CELLS and PATH (the .ipynb it writes, relative to the repository root). The
committed notebooks are built at full size from a clean commit (the outputs they show name that commit);
`--small` is for checking that they run, not for committing. A notebook that fails stops the build with its
cell's error; the notebooks built before it are kept.
"""
import argparse
import os
import runpy
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]


def build(cells, path, timeout=3600):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell(s.strip()) if k == "md" else nbformat.v4.new_code_cell(s.strip())
                for k, s in cells]
    path = Path(path)
    if not path.is_absolute():
        path = REPO / path
    t0 = time.time()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    nbformat.write(nb, path)
    print(f"wrote {path.relative_to(REPO)} ({len(nb.cells)} cells, executed in {time.time() - t0:.0f} s)", flush=True)


def sources(first: str | None = None) -> list[Path]:
    """notebooks/src/NN_*.py in notebook order, from notebook `first` (e.g. "05") on."""
    out = sorted((REPO / "notebooks" / "src").glob("[0-9][0-9]_*.py"))
    return [p for p in out if first is None or p.name[:2] >= first]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/nbbuild.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("sources", nargs="*", help="notebooks/src/NN_*.py files to build")
    ap.add_argument("--all", action="store_true", help="build every notebooks/src/NN_*.py in order")
    ap.add_argument("--from", dest="first", help="with --all: start at this notebook number (e.g. 05)")
    ap.add_argument("--small", action="store_true", help="execute at FP8LAB_SMALL=1 (checking, not committing)")
    a = ap.parse_args(argv)
    if a.all == bool(a.sources):
        ap.error("name source files, or pass --all")
    todo = sources(a.first) if a.all else [Path(s) for s in a.sources]
    missing = [str(p) for p in todo if not p.is_file()]
    if missing:
        ap.error(f"no such source: {', '.join(missing)}")
    if a.small:
        os.environ["FP8LAB_SMALL"] = "1"
    elif os.environ.get("FP8LAB_SMALL") == "1":
        print("note: FP8LAB_SMALL=1 is set in the environment: building at small size", file=sys.stderr)
    for p in todo:
        spec = runpy.run_path(str(p))
        print(f"building {spec['PATH']} from {p.name} ...", flush=True)
        build(spec["CELLS"], spec["PATH"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
