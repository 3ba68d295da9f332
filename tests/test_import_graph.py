"""The house has no import circle, counted as Python runs imports (issues 10 and 22).

Three proofs. The graph: every ``import`` statement of ``src/faultdrill`` is an edge,
module-level or inside a function (a lazy import does not hide a cycle; only a lazy import of
a third-party package is out of the graph). ``from a.b import n`` is an edge to ``a.b.n`` when
that is a module, else to ``a.b``. Importing ``a.b.c`` runs ``a/__init__`` and
``a/b/__init__`` first, so it is an edge to those packages too (not to the importer's own
packages: they began before it). ``plugins.py``'s lists of plug-in modules are its imports
(it loads them with importlib). Any strongly connected set of more than one module fails,
named with the imports that close it; a second, stricter graph counts the imports under
``if TYPE_CHECKING:`` too, and must have no circle either. The run: every module imports
first in a fresh set of faultdrill modules, so no module works only because another
happened to be imported before it. The floor: a fresh ``import faultdrill.plan`` loads only
a handful of modules, none above the plan.
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


def _ancestors(module: str, modules: dict[str, Path]) -> list[str]:
    """The packages Python runs before ``module`` (outermost first), that are in ``modules``."""
    parts = module.split(".")
    return [p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in modules]


def _imports(
    module: str, path: Path, modules: dict[str, Path], *, type_checking: bool
) -> Iterator[tuple[str, int, str]]:
    """(imported module of the package, line, how) for each import statement of ``module``."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = set() if type_checking else _type_checking_nodes(tree)
    tc_only = _type_checking_nodes(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        how = "imports (under TYPE_CHECKING)" if id(node) in tc_only else "imports"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield alias.name, node.lineno, how
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in modules:
                    yield target, node.lineno, how
                elif base in modules:
                    yield base, node.lineno, how


def _loaded_by_name(module: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(module, line) for each module of the package that ``plugins.py`` names in a string:
    its lists of plug-ins, which :func:`faultdrill.plugins.load` imports with importlib."""
    if module != f"{module.partition('.')[0]}.plugins":
        return
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in modules:
            yield node.value, node.lineno


def import_graph(
    src: Path, package: str, *, type_checking: bool = False
) -> dict[str, dict[str, tuple[int, str]]]:
    """module -> {module it makes Python run: (line of the first such import, how)}.

    Counted as Python runs them: ``import a.b.c`` (or ``from a.b.c import n``) runs
    ``a/__init__``, ``a/b/__init__`` and then ``a/b/c``, so it is an edge to each of them,
    except to the importer's own enclosing packages: those have begun before the importer
    (its own package's ``__init__`` runs before it), so importing a sibling re-runs nothing
    and can find nobody half-run. (An explicit ``from a.b import name`` inside ``a.b`` does
    read the package's names: that edge counts.) Imports inside functions count;
    ``type_checking`` counts those under ``if TYPE_CHECKING:`` too (the stricter graph: a
    circle there is a circle the day someone drops the guard). ``plugins.py``'s lists of
    plug-in modules count as its imports.
    """
    modules = _modules(src, package)
    graph: dict[str, dict[str, tuple[int, str]]] = {}
    for module, path in modules.items():
        own = {module, *_ancestors(module, modules)}
        edges: dict[str, tuple[int, str]] = {}
        for target, line, how in _imports(module, path, modules, type_checking=type_checking):
            for parent in _ancestors(target, modules):
                if parent not in own:
                    edges.setdefault(parent, (line, f"{how} {target}, which runs"))
            if target != module:
                edges.setdefault(target, (line, how))
        for target, line in _loaded_by_name(module, path, modules):
            edges.setdefault(target, (line, "loads by name"))
            for parent in _ancestors(target, modules):
                if parent not in own:
                    edges.setdefault(parent, (line, f"loads by name {target}, which runs"))
        graph[module] = edges
    return graph


def cycles(graph: dict[str, dict[str, tuple[int, str]]]) -> list[list[str]]:
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


def _describe(graph: dict[str, dict[str, tuple[int, str]]], members: list[str]) -> str:
    inside = set(members)
    lines = [
        f"  {m} {how} {t} (line {line})"
        for m in members
        for t, (line, how) in sorted(graph[m].items())
        if t in inside
    ]
    return f"{len(members)} modules in a circle:\n" + "\n".join(lines)


def test_src_has_no_import_circle() -> None:
    graph = import_graph(SRC, PACKAGE)
    assert len(graph) > 50  # the walk found the package
    found = cycles(graph)
    assert not found, "\n".join(_describe(graph, c) for c in found)


def test_src_has_no_import_circle_even_counting_type_checking_imports() -> None:
    """Issue 22's floor: 0 circles counting parent packages, function-local and
    ``TYPE_CHECKING`` imports (a type-only circle says two modules belong on one floor, or a
    third below both)."""
    graph = import_graph(SRC, PACKAGE, type_checking=True)
    found = cycles(graph)
    assert not found, "\n".join(_describe(graph, c) for c in found)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_a_circle_hidden_in_a_function_is_found(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "",
            "pkg/a.py": "from pkg.sub import b\n",
            "pkg/sub/b.py": "def f():\n    from .. import c\n",
            "pkg/c.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from pkg import d\nimport pkg.a\n",
            "pkg/d.py": "from pkg import c\n",
        },
    )
    graph = import_graph(tmp_path, "pkg")
    assert cycles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
    assert "pkg.sub.b imports pkg.c (line 2)" in _describe(graph, ["pkg.a", "pkg.c", "pkg.sub.b"])
    strict = import_graph(tmp_path, "pkg", type_checking=True)
    assert cycles(strict) == [["pkg.a", "pkg.c", "pkg.d", "pkg.sub.b"]]
    assert "pkg.c imports (under TYPE_CHECKING) pkg.d (line 3)" in _describe(
        strict, cycles(strict)[0]
    )


def test_a_circle_through_a_package_init_is_found(tmp_path: Path) -> None:
    """``import pkg.sub.b`` runs ``pkg/sub/__init__`` first: a face that imports its
    plug-ins closes a circle with whoever imports one module of the package."""
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "from pkg.sub import plugin\n",
            "pkg/sub/api.py": "X = 1\n",
            "pkg/sub/plugin.py": "from pkg.sub.api import X\nfrom pkg import user\n",
            "pkg/user.py": "from pkg.sub.api import X\n",
            # a face handing its own modules' names on is no circle
            "pkg/face/__init__.py": "from pkg.face.one import Y\n",
            "pkg/face/one.py": "from pkg.face.two import Z as Y\n",
            "pkg/face/two.py": "Z = 2\n",
        },
    )
    graph = import_graph(tmp_path, "pkg")
    assert cycles(graph) == [["pkg.sub", "pkg.sub.plugin", "pkg.user"]]
    assert "pkg.user imports pkg.sub.api, which runs pkg.sub (line 1)" in _describe(
        graph, ["pkg.sub", "pkg.sub.plugin", "pkg.user"]
    )


def test_modules_plugins_py_names_are_its_imports(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/plugins.py": '"""pkg.faults.one is named here, not loaded."""\n'
            'MODULES = (\n    "pkg.faults.one",\n)\n',
            "pkg/faults/__init__.py": "",
            "pkg/faults/one.py": "from pkg import plugins\n",
        },
    )
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.plugins"]["pkg.faults.one"] == (3, "loads by name")
    assert cycles(graph) == [["pkg.faults.one", "pkg.plugins"]]


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


def test_checks_faults_and_readings_import_nothing_that_judges_them() -> None:
    """Checks, faults and the readings of a timeline stand below the judge, the engine, the
    reports and the archive (type-only imports included): the judge reads checks, never
    the other way round."""
    graph = import_graph(SRC, PACKAGE, type_checking=True)
    low = tuple(f"{PACKAGE}.{p}" for p in ("checks", "faults", "readings"))
    high = tuple(f"{PACKAGE}.{p}" for p in ("judge", "engine", "report", "archive", "cli"))
    upward = sorted(
        f"{m} {how} {t} (line {line})"
        for m, edges in graph.items()
        if m.startswith(low)
        for t, (line, how) in edges.items()
        if t.startswith(high)
    )
    assert not upward, "\n".join(upward)


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
    # two interpreters side by side (CI has two cores), each importing every other module
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _FRESH_IMPORTS, *names[part::2]],
            env={**os.environ, "PYTHONPATH": str(SRC)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for part in range(2)
    ]
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stdout + stderr


#: What ``import faultdrill.plan`` may load: the plan is data at the bottom of the house.
_PLAN_FLOOR_MOST = 16
_ABOVE_THE_PLAN = ("platforms", "faults", "checks", "report", "engine", "judge", "host")


def test_the_plan_loads_nothing_above_it() -> None:
    """A fresh ``import faultdrill.plan`` loads no platform, fault, check, report, engine,
    judge or host module, and only a handful of modules at all (14 when this was written)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, faultdrill.plan\n"
            "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('faultdrill'))))",
        ],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert "faultdrill.plan.faults" in loaded  # the probe saw the plan load
    above = [m for m in loaded if m.split(".")[1:2] and m.split(".")[1] in _ABOVE_THE_PLAN]
    assert not above, f"import faultdrill.plan loads {above}"
    assert len(loaded) <= _PLAN_FLOOR_MOST, f"{len(loaded)} modules: {loaded}"
