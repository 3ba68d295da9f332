"""Functions stay readable: none over 80 lines in the packages split so far (report/ and
archive/; add a package here once its long functions are split)."""

from __future__ import annotations

import ast
from pathlib import Path

import faultdrill

ROOT = Path(faultdrill.__file__).parent
SPLIT = ("report", "archive")
LIMIT = 80


def test_no_function_is_over_80_lines() -> None:
    long, seen = [], 0
    for package in SPLIT:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    seen += 1
                    n = (node.end_lineno or node.lineno) - node.lineno + 1
                    if n > LIMIT:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n})")
    assert not long, "split these into readable pieces:\n" + "\n".join(long)
    assert seen > 100  # the walk saw the packages
