"""The worked answers of every notebook's exercises run and answer (notebooks/solutions/NN_*.py).

Every notebook with an "Exercises" section has a solutions module with one exercise_N() per exercise; each returns
a non-empty dict of what it computed. Exercises listed in the module's GPU_ONLY are skipped without a CUDA device.
"""
import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
SOL = REPO / "notebooks" / "solutions"
MODULES = sorted(SOL.glob("[0-9][0-9]_*.py"))
_loaded: dict = {}


def _module(path: Path):
    if path not in _loaded:
        spec = importlib.util.spec_from_file_location(f"solutions_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _loaded[path] = mod
    return _loaded[path]


def _cases():
    from fp8lab.notebook import exercises

    out = []
    for p in MODULES:
        for f in exercises(vars(_module(p))):
            out.append(pytest.param(p, f.__name__, id=f"{p.stem}-{f.__name__}"))
    return out


def _exercise_count(nb_path: Path) -> int:
    """How many numbered items the notebook's Exercises section lists."""
    nb = nbformat.read(nb_path, as_version=4)
    for c in nb.cells:
        if c.cell_type == "markdown" and "## Exercises" in c.source:
            section = c.source.split("## Exercises", 1)[1]
            return len(re.findall(r"(?m)^\d+\. ", section))
    return 0


@pytest.mark.parametrize("path, name", _cases())
def test_exercise_answers(path, name):
    mod = _module(path)
    if name in getattr(mod, "GPU_ONLY", set()):
        from fp8lab.kernels import cuda_available

        if not cuda_available():
            pytest.skip("needs a CUDA device")
    fn = getattr(mod, name)
    assert fn.__doc__ and len(fn.__doc__.strip()) > 40, f"{name}: the worked answer needs its explanation"
    out = fn()
    assert isinstance(out, dict) and out, f"{name} returned nothing"


@pytest.mark.parametrize("nb_path", sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.name)
def test_every_exercise_list_has_its_answers(nb_path):
    n = _exercise_count(nb_path)
    if n == 0:
        pytest.skip(f"{nb_path.name} has no Exercises section")
    sol = SOL / f"{nb_path.stem}.py"
    assert sol.is_file(), f"{nb_path.name} lists {n} exercises but {sol.relative_to(REPO)} does not exist"
    from fp8lab.notebook import exercises

    have = len(exercises(vars(_module(sol))))
    assert have == n, f"{nb_path.name} lists {n} exercises, {sol.name} answers {have}"
