"""Benchmark entry point for every kernel family: `python -m fp8lab.kernels.bench <family> [family options]`.

    python -m fp8lab.kernels.bench quant                 # -> outputs/kernels/quant.json
    python -m fp8lab.kernels.bench quant --small         # a quick run on small shapes
    python -m fp8lab.kernels.bench gemm --shapes 28672x8192 --m 1,16 --out /tmp/gemm.json
    python -m fp8lab.kernels.bench attention --contexts 1024,32768 --rounds 7 --out /tmp/att.json
    python -m fp8lab.kernels.bench gemm --help

Every family validates each kernel (outputs poisoned) before timing it, times the variants it compares in
interleaved rounds and reports the median with its quartiles (fp8lab.kernels.harness). On a machine without a
CUDA device the command says so in one line and exits with status 2.

The registry is the file system: a family NAME is the module `fp8lab/kernels/bench_NAME.py`, imported lazily
(only when asked for, so one family's imports or failures never touch another's). A family module defines

    def main(argv: list[str] | None = None) -> int     # parses its own options, writes outputs/kernels/NAME.json

and uses `fp8lab.kernels.harness` for timing, provenance and the JSON schema. To add a family, add the file;
nothing here changes. `FAMILIES` lists what is present (with a one-line description from each docstring,
read without importing the module).
"""
from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

KDIR = Path(__file__).resolve().parent


def _families() -> dict[str, str]:
    """{name: first docstring line} for every fp8lab/kernels/bench_<name>.py."""
    out = {}
    for p in sorted(KDIR.glob("bench_*.py")):
        try:
            doc = ast.get_docstring(ast.parse(p.read_text())) or ""
        except SyntaxError:
            doc = "(does not parse)"
        out[p.stem[len("bench_"):]] = doc.strip().splitlines()[0] if doc.strip() else ""
    return out


FAMILIES = _families()


def load(family: str):
    """The family's module (imported now)."""
    if family not in FAMILIES:
        raise KeyError(f"unknown benchmark family {family!r}; available: {', '.join(FAMILIES) or 'none'}")
    return importlib.import_module(f"fp8lab.kernels.bench_{family}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        for name, doc in FAMILIES.items():
            print(f"  {name:12s} {doc}")
        if not argv:
            raise SystemExit(2)
        return 0
    family, rest = argv[0], argv[1:]
    if family not in FAMILIES:
        print(f"unknown benchmark family {family!r}; available: {', '.join(FAMILIES)}", file=sys.stderr)
        raise SystemExit(2)
    if not any(a in ("-h", "--help") for a in rest):
        from ._cuda import cuda_available

        if not cuda_available():
            print(f"python -m fp8lab.kernels.bench {family}: no CUDA device here, nothing to measure "
                  f"(the recorded results are in outputs/kernels/{family}.json)", file=sys.stderr)
            raise SystemExit(2)
    return int(load(family).main(rest) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
