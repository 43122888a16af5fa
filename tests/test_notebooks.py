"""Every notebook runs top to bottom on the CPU at small size (FP8LAB_SMALL=1), as a reader would run it: from a
working directory that is not notebooks/, without touching the committed outputs/; and every committed notebook
shows its figures and no error."""
import hashlib
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
NB_DIR = REPO / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("[0-9][0-9]_*.ipynb"))
OUTPUTS = REPO / "outputs"


def _code(path):
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def _snapshot(folder: Path) -> dict:
    """Every file under `folder` with its size and content hash (what a run must leave as it found it)."""
    return {str(p.relative_to(folder)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks found"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_shows_figures_and_no_error(path):
    code = _code(path)
    assert any(c.get("outputs") for c in code), f"{path.name} is committed without outputs"
    errors = [c.source[:60] for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{path.name} is committed with errors in cells: {errors}"
    blank = [c.source.splitlines()[0] for c in code if "nb.show(" in c.source
             and not any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]
    assert not blank, f"{path.name}: figure cells committed without their figure: {blank}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_finds_files_from_the_package_not_the_working_directory(path):
    """`../outputs` broke when Jupyter started anywhere but notebooks/; paths come from fp8lab (notebook.REPO)."""
    bad = [ln.strip() for c in _code(path) for ln in c.source.splitlines()
           if re.search(r"""["']\.\./|Path\.cwd\(\)|os\.getcwd\(\)|os\.chdir\(""", ln)]
    assert not bad, f"{path.name}: working-directory-relative paths: {bad}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, monkeypatch, tmp_path):
    monkeypatch.setenv("FP8LAB_SMALL", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    nb = nbformat.read(path, as_version=4)
    before = _snapshot(OUTPUTS)
    # the kernel starts in an unrelated folder: a notebook that needs its own folder as cwd fails here
    NotebookClient(nb, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()  # raises CellExecutionError on failure
    after = _snapshot(OUTPUTS)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"{path.name} changed the committed outputs/: {changed[:10]}"
