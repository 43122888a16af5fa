"""No import cycles inside the package, lazy (function-level) imports included.

A cycle hidden behind a lazy import still ties two modules together: neither can be read, tested or moved
without the other, and the order in which they are first imported starts to matter. The graph is built from
the source with `ast` (every `import` / `from ... import` anywhere in a module, not only at the top), so
nothing is imported to check it.

    fp8lab.sweep -> fp8lab.plots -> fp8lab.sweep        # what this test refuses, with the path printed
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "fp8lab"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _resolve(current: str, is_pkg: bool, level: int, module: str | None) -> str:
    """The absolute name of `from <level dots><module> import ...` written inside `current`."""
    if level == 0:
        return module or ""
    base = current.split(".") if is_pkg else current.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _targets(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """Package modules that `name` imports, anywhere in its source."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()

    def add(mod: str):
        # importing a.b.c runs a, a.b and a.b.c; the package __init__s are edges too
        parts = mod.split(".")
        for i in range(1, len(parts) + 1):
            m = ".".join(parts[:i])
            if m in mods and m != name:
                out.add(m)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(name, is_pkg, node.level, node.module)
            add(base)
            for a in node.names:                      # `from fp8lab import sweep` imports a module
                add(f"{base}.{a.name}")
    # an __init__ is imported by its own submodules implicitly: that edge is not a cycle to report
    return {t for t in out if not name.startswith(t + ".")}


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    return {n: _targets(n, p, mods) for n, p in mods.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), each as one example path."""
    index, low, stack, on, comps = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def test_the_graph_sees_lazy_and_relative_imports():
    g = import_graph()
    assert "fp8lab.formats" in g["fp8lab.scaling"]             # `from . import formats as _f`
    assert "fp8lab.kernels._cuda" in g["fp8lab.kernels"]       # `from ._cuda import ...` in an __init__
    assert "fp8lab.recipes" in g["fp8lab.sweep"]               # imported inside a function only


def test_cycle_detection_finds_a_planted_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_in_the_package():
    cycles = find_cycles(import_graph())
    if cycles:
        pytest.fail("import cycles among fp8lab modules (lazy imports included):\n" +
                    "\n".join("  " + " <-> ".join(c) for c in cycles))
