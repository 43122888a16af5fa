"""Build a notebook from a list of ("md"|"code", source) cells, execute it top to bottom, save it with outputs.

    python tools/nbbuild.py notebooks/src/01_number_formats.py   # run from the repository root

Each notebooks/src/NN_*.py defines CELLS and PATH (the .ipynb it writes, relative to the repository root); the
notebook executes with notebooks/ as its working directory. Used by the developers to (re)generate the committed
notebooks; the tests re-execute them (tests/test_notebooks.py).
"""
import runpy
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def build(cells, path, timeout=1800):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell(s.strip()) if k == "md" else nbformat.v4.new_code_cell(s.strip())
                for k, s in cells]
    path = Path(path)
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    nbformat.write(nb, path)
    print(f"wrote {path} ({len(nb.cells)} cells, executed)")


if __name__ == "__main__":
    spec = runpy.run_path(sys.argv[1])
    build(spec["CELLS"], spec["PATH"])
