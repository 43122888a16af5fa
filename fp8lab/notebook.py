"""What every notebook needs from the package: the repository, the committed results with their provenance,
figures shown inline, prose rendered from numbers, and a scratch folder that is never `outputs/`.

    from fp8lab import notebook as nb
    nb.REPO                                   # the repository, from the package's own location (any cwd)
    p = nb.recorded("kv_drift", "kv_drift.csv")   # prints the provenance line, or "not recorded yet: ..."
    if p: rows = kv_drift.read_csv(p / "kv_drift.csv")
    nb.show(fig)                              # the figure, inline, whatever backend a function switched to
    nb.md(f"The cache costs **{d:+.2f} %** here.")  # a sentence whose number comes from a file
    out = nb.scratch("02")                    # runs/notebooks/02/ (git-ignored): what a notebook writes

Importing it also quiets library noise an attendee should not have to read: torchao's "Failed to load" lines
for CUDA extensions on a CPU machine, torch's pytree deprecation lines, tqdm's widget warning and transformers'
weight-loading bars (`quiet()`; the lab's own progress bars are untouched).

Why a module: the notebooks used to find `../outputs` relative to the working directory (wrong when Jupyter
was started anywhere else), wrote figures into the committed `outputs/` when not in small mode, printed
`git_commit[:12]` (which cut the dirty mark off) and lost figures when a package function switched
matplotlib to Agg. Each of those is one function here, so every notebook (present and future) does it the
same way.
"""
from __future__ import annotations

import io
import json
import os
from pathlib import Path

from .provenance import REPO, describe

__all__ = ["REPO", "OUTPUTS", "SCRATCH", "quiet", "small", "recorded", "recorded_part", "provenance_line", "show", "md", "scratch",
           "exercises", "run_exercises",
           "results_frame", "rel"]

OUTPUTS = REPO / "outputs"
#: where notebooks write what they make (git-ignored: /runs/ in .gitignore)
SCRATCH = REPO / "runs" / "notebooks"


def quiet() -> None:
    """Silence third-party noise in notebook output (not errors): see the module docstring. Called on import."""
    import logging
    import warnings

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")     # transformers' bars read it at import
    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="IProgress not found")
    import sys

    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()


quiet()


def small() -> bool:
    """True when the tests run the notebooks at small size (FP8LAB_SMALL=1)."""
    return os.environ.get("FP8LAB_SMALL") == "1"


def rel(path) -> str:
    """A path relative to the repository when it is inside it: /…/fp8lab/outputs/x.csv -> outputs/x.csv."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(REPO))
    except ValueError:
        return str(p)


def provenance_line(source) -> str:
    """`provenance.describe` of a provenance dict, a JSON file holding one, or a file with a "provenance" key.

    One line, whitespace collapsed (a recorded commit string once held a newline): commit, clean or DIRTY,
    device, date, command."""
    if isinstance(source, (str, Path)):
        source = json.loads(Path(source).read_text(encoding="utf-8"))
    prov = source.get("provenance", source) if isinstance(source, dict) else {}
    return " ".join(describe(prov).split())


def recorded(folder: str, *files: str, prov: str | None = "provenance.json", quiet: bool = False):
    """The committed folder `outputs/<folder>` if every one of `files` is there, else None.

    Prints the provenance line of the run (from `prov` inside the folder, or from the first file when it is a
    JSON holding a "provenance" key), or one clear line saying what is not recorded yet — never a traceback. A kernel
    record that carries its sources' digest gets a second line: whether it timed the kernel sources of this tree
    (gemm_report.sources_state).

    recorded("kv_drift_8k", "kv_drift.csv") -> Path(".../outputs/kv_drift_8k") or None
    """
    base = OUTPUTS / folder
    missing = [f for f in files if not (base / f).is_file()]
    if missing:
        if not quiet:
            print(f"not recorded yet: {rel(base / missing[0])} is not in this checkout "
                  "(the committed results are re-recorded from clean commits; this cell shows them once they are)")
        return None
    if not quiet:
        src = base / prov if prov and (base / prov).is_file() else (base / files[0] if files else None)
        sources = None
        try:
            line = "(no provenance recorded)"
            if src is not None and src.suffix == ".json":
                data = json.loads(src.read_text(encoding="utf-8"))
                line = provenance_line(data)
                if isinstance(data, dict):   # a kernel record with a sources digest: did it time this tree?
                    from fp8lab.kernels.gemm_report import sources_state
                    sources = sources_state(data, missing=None)
        except (OSError, ValueError) as e:
            line = f"(provenance unreadable: {e})"
        print(f"{rel(base)}: {line}" + (f"\n  sources: {sources}" if sources else ""))
    return base


def recorded_part(folder: str, part: str, *files: str, prov: str = "provenance.json"):
    """`recorded` for a folder whose provenance file holds one record per part of the run
    ({"stats": {...}, "scaling": {...}, "taming": {...}}, as fp8lab.outlier_study writes it): prints the line of
    every record whose key starts with `part`, or the one "not recorded yet" line; returns the folder or None.

    recorded_part("outliers", "scaling", "scaling.csv") -> Path(".../outputs/outliers") or None
    """
    base = recorded(folder, *files, quiet=True)
    if base is None:
        return recorded(folder, *files)                 # prints the "not recorded yet" line
    try:
        provs = json.loads((base / prov).read_text(encoding="utf-8"))
        lines = [f"{rel(base)} [{k}]: {provenance_line(v)}" for k, v in provs.items() if k.startswith(part)]
    except (OSError, ValueError, AttributeError) as e:
        lines = [f"{rel(base)} [{part}]: (provenance unreadable: {e})"]
    print("\n".join(lines) or f"{rel(base)} [{part}]: (no provenance recorded for this part)")
    return base


def scratch(name: str) -> Path:
    """A folder for what a notebook writes: runs/notebooks/<name>/ (git-ignored), created if needed."""
    p = SCRATCH / name
    p.mkdir(parents=True, exist_ok=True)
    return p


def _ipython():
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython ships with ipykernel
        return None
    return get_ipython()


def show(fig, dpi: int = 100) -> None:
    """Display a matplotlib figure inline as a PNG, whatever backend is active, and close it.

    Some package functions save figures on machines without a display and switch matplotlib to Agg; after
    that, a figure left to the notebook's automatic display never appears (01's and 03's figures were empty
    in the committed notebooks for that reason). Outside a notebook nothing is shown.
    """
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    png = buf.getvalue()
    if _ipython() is not None:
        from IPython.display import Image, display

        display(Image(png))
    try:
        import matplotlib.pyplot as plt

        plt.close(fig)
    except Exception:  # pragma: no cover - a Figure made without pyplot
        pass


def md(text: str) -> None:
    """Show Markdown whose numbers were computed from files (a notebook's prose never types a measurement)."""
    if _ipython() is not None:
        from IPython.display import Markdown, display

        display(Markdown(text))
    else:
        print(text)


def show_recorded(reports, format_rows, missing: str) -> None:
    """Print each (provenance lines, rows, sentence) report (e.g. gemm_report.probe_reports): the provenance, the rows
    through `format_rows`, the sentence as Markdown; `missing` where no run is recorded."""
    for prov_lines, rows, text in reports:
        print("\n".join(prov_lines))
        print(format_rows(rows))
        md(text)
    if not reports:
        print(missing)


def results_frame(path):
    """A sweep results.csv (either column layout) as a pandas DataFrame with numbers as numbers.

    Older files lack `causal`, `changed` and `ci_method`; they are filled in where they can be known
    (causal from the recipe table) by fp8lab.results.read_results(allow_legacy=True)."""
    import pandas as pd

    from .results import read_results

    df = pd.DataFrame(read_results(path, allow_legacy=True))
    for k in ("value", "baseline", "delta_pct", "ci95_low", "ci95_high", "n", "seconds"):
        if k in df:
            df[k] = pd.to_numeric(df[k], errors="coerce")
    if "changed" in df:
        df["changed"] = pd.to_numeric(df["changed"], errors="coerce").astype("Int64")
    return df


def exercises(namespace: dict) -> list:
    """The exercise_N functions of a solutions module (notebooks/solutions/NN_*.py), in N order."""
    fns = [(int(k.split("_")[1]), v) for k, v in namespace.items()
           if k.startswith("exercise_") and k.split("_")[1].isdigit() and callable(v)]
    return [f for _, f in sorted(fns, key=lambda t: t[0])]


def run_exercises(namespace: dict) -> None:
    """Run and print every exercise of a solutions module (its `__main__`); GPU_ONLY ones only on a GPU."""
    import inspect

    gpu_only = namespace.get("GPU_ONLY", set())
    for f in exercises(namespace):
        print(f"== {f.__name__}: {(inspect.getdoc(f) or '').splitlines()[0]}")
        if f.__name__ in gpu_only:
            from .kernels import cuda_available

            if not cuda_available():
                print("   (needs a CUDA device: skipped here)\n")
                continue
        for k, v in (f() or {}).items():
            print(f"   {k}: {v}")
        print()
