"""The house has no import circle (issue 10, item 4).

Two proofs. The graph: every ``import`` statement of ``src/faultdrill`` is an edge,
module-level or inside a function (a lazy import does not hide a cycle; only a lazy import of
a third-party package is out of the graph), except those under ``if TYPE_CHECKING:``, which
never run. ``from a.b import n`` is an edge to ``a.b.n`` when that is a module, else to
``a.b``. Any strongly connected set of more than one module fails, named with the imports
that close it. The run: every module imports first in a fresh set of faultdrill modules, so
no module works only because another happened to be imported before it.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "faultdrill"


def _modules(src: Path, package: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in (src / package).rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (never executed)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                skipped.update(id(n) for n in ast.walk(sub))
    return skipped


def _imports(module: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(imported module of the package, line) for each import statement of ``module``."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = _type_checking_nodes(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in modules:
                    yield target, node.lineno
                elif base in modules:
                    yield base, node.lineno


def import_graph(src: Path, package: str) -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first such import}."""
    modules = _modules(src, package)
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges: dict[str, int] = {}
        for target, line in _imports(module, path, modules):
            if target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return found


def _describe(graph: dict[str, dict[str, int]], members: list[str]) -> str:
    inside = set(members)
    lines = [
        f"  {m} imports {t} (line {line})"
        for m in members
        for t, line in sorted(graph[m].items())
        if t in inside
    ]
    return f"{len(members)} modules in a circle:\n" + "\n".join(lines)


def test_src_has_no_import_circle() -> None:
    graph = import_graph(SRC, PACKAGE)
    assert len(graph) > 50  # the walk found the package
    found = cycles(graph)
    assert not found, "\n".join(_describe(graph, c) for c in found)


def test_a_circle_hidden_in_a_function_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import c\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import d\nimport pkg.a\n"
    )
    (pkg / "d.py").write_text("from pkg import c\n")
    graph = import_graph(tmp_path, "pkg")
    assert cycles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
    assert "pkg.sub.b imports pkg.c (line 2)" in _describe(graph, ["pkg.a", "pkg.c", "pkg.sub.b"])


def test_faults_import_no_concrete_platform() -> None:
    graph = import_graph(SRC, PACKAGE)
    reaching = {
        (m, t)
        for m, edges in graph.items()
        if m.startswith(f"{PACKAGE}.faults")
        for t in edges
        if t.startswith(f"{PACKAGE}.platforms.") and not t.endswith(".api")
    }
    assert not reaching


_FRESH_IMPORTS = """
import importlib, sys, traceback
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "faultdrill" or m.startswith("faultdrill.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("faultdrill"):
            continue  # an optional dependency this machine lacks (ray, kubernetes, ...)
        failed.append(name + ": " + traceback.format_exc(limit=-3))
    except Exception:
        failed.append(name + ": " + traceback.format_exc(limit=-3))
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def test_every_module_imports_first() -> None:
    names = sorted(m for m in _modules(SRC, PACKAGE) if not m.endswith("__main__"))
    done = subprocess.run(
        [sys.executable, "-c", _FRESH_IMPORTS, *names],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
