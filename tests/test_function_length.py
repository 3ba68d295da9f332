"""No function over 80 lines anywhere in src/faultdrill (issue 10, item 5).

A function's length is from its ``def`` line to its last line (decorators not counted);
nested functions and methods are measured on their own, named by their qualified name
(``Class.method``, ``outer.inner``). The functions still over the limit are listed in
``ALLOWED`` with the reason they are; the list may only shrink: an entry whose function is
no longer over the limit (split, renamed or gone) fails too, so it is struck off.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import faultdrill

ROOT = Path(faultdrill.__file__).parent
LIMIT = 80

#: (module path under src/faultdrill, qualified function name) -> why it is still long.
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class FunctionSize:
    """One function (or method) in a module: where it starts and how many lines it spans."""

    module: str
    line: int
    name: str
    lines: int

    def where(self) -> str:
        return f"{self.module}:{self.line}:{self.name} ({self.lines} lines)"


def _walk(node: ast.AST, prefix: str, module: str) -> list[FunctionSize]:
    sizes: list[FunctionSize] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                n = (child.end_lineno or child.lineno) - child.lineno + 1
                sizes.append(FunctionSize(module, child.lineno, name, n))
            sizes += _walk(child, f"{name}.", module)
        else:
            sizes += _walk(child, prefix, module)
    return sizes


def function_sizes(root: Path) -> list[FunctionSize]:
    """Every function and method in the ``*.py`` files under ``root``, by module path
    relative to ``root`` (posix separators) and qualified name."""
    sizes: list[FunctionSize] = []
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        sizes += _walk(ast.parse(path.read_text(), str(path)), "", module)
    return sizes


def too_long(root: Path, allowed: dict[tuple[str, str], str]) -> list[str]:
    """The functions under ``root`` over ``LIMIT`` lines that ``allowed`` does not name."""
    return [
        f.where()
        for f in function_sizes(root)
        if f.lines > LIMIT and (f.module, f.name) not in allowed
    ]


def no_longer_long(root: Path, allowed: dict[tuple[str, str], str]) -> list[str]:
    """The ``allowed`` entries whose function is not over ``LIMIT`` lines (or not found)."""
    long = {(f.module, f.name) for f in function_sizes(root) if f.lines > LIMIT}
    return [f"{module}:{name}" for module, name in sorted(allowed) if (module, name) not in long]


def test_no_function_is_over_80_lines_outside_the_allowed_list() -> None:
    assert len(function_sizes(ROOT)) > 500  # the walk saw the package
    long = too_long(ROOT, ALLOWED)
    assert not long, "split these into well-named smaller functions:\n" + "\n".join(long)


def test_the_allowed_list_only_shrinks() -> None:
    stale = no_longer_long(ROOT, ALLOWED)
    assert not stale, "no longer over 80 lines; strike them from ALLOWED:\n" + "\n".join(stale)


def _function(name: str, lines: int, indent: str = "") -> str:
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 1))
    return f"{indent}def {name}() -> None:\n{body}"


def test_an_81_line_function_is_reported_and_an_80_line_one_is_not(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "mod.py").write_text(
        "import os\n\n\n" + _function("long_one", 81) + "\n\n" + _function("fits", 80)
    )
    (pkg / "klass.py").write_text("class Holder:\n" + _function("method", 81, indent="    "))
    assert sorted(too_long(tmp_path, {})) == [
        "pkg/klass.py:2:Holder.method (81 lines)",
        "pkg/mod.py:4:long_one (81 lines)",
    ]
    assert (
        too_long(
            tmp_path,
            {("pkg/mod.py", "long_one"): "known", ("pkg/klass.py", "Holder.method"): "known"},
        )
        == []
    )


def test_an_allowed_function_that_fits_is_reported_as_stale(tmp_path: Path) -> None:
    (tmp_path / "mod.py").write_text(_function("fits", 80))
    allowed = {("mod.py", "fits"): "was long", ("mod.py", "gone"): "was long"}
    assert no_longer_long(tmp_path, allowed) == ["mod.py:fits", "mod.py:gone"]
