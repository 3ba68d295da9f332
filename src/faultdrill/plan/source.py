"""Reading a plan file: bytes -> UTF-8 text -> YAML data, each step bounded.

A plan file is untrusted input, and YAML can make a small file expensive. It is opened as a
regular file only (:func:`faultdrill.safepath.open_named`: a FIFO put in its place is refused
at once, never waited on) and read up to :data:`MAX_BYTES`. Before any
object is built, one streaming pass over the parser's events (no recursion, no values
kept) refuses:

* nesting deeper than :data:`MAX_DEPTH` levels (a plan needs about ten);
* aliases that would add more than :data:`MAX_ALIAS_NODES` nodes when expanded (a
  "billion laughs" file of 2 KB expands to 10^9); the error names the alias, never a value;
* a key repeated in one mapping (YAML would keep the last silently: a second
  ``rounds: []`` would drop every round), named by its field path and both lines.

Then the C parser (libyaml, when PyYAML has it) builds the data. Every problem is a
:class:`~faultdrill.errors.PlanError` naming the file, where, and the fix.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from faultdrill.errors import PlanError
from faultdrill.frozen import shown
from faultdrill.safepath import UnsafePathError, open_named

__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_BYTES",
    "MAX_DEPTH",
    "file_kind",
    "read_plan_data",
    "read_yaml_documents",
    "read_yaml_text",
]

#: Deepest nesting of mappings and sequences a plan may have.
MAX_DEPTH = 64
#: Most nodes that aliases (``*name``) may add to a plan when expanded, in all.
MAX_ALIAS_NODES = 100_000
#: Largest plan file read (a plan of 5,000 scenarios is about 2 MB).
MAX_BYTES = 64 << 20

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_plan_data(path: Path) -> Any:
    """The data of a YAML (or JSON) plan file. Raises PlanError, never anything else."""
    source = str(path)
    text = read_yaml_text(path, source, what="a plan")
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise PlanError(source, [_yaml_problem(exc, text)]) from exc
    except RecursionError as exc:  # the events pass bounds nesting; kept as a backstop
        raise PlanError(source, [("(file)", f"nested deeper than {MAX_DEPTH} levels")]) from exc


def read_yaml_documents(path: Path, source: str, *, what: str) -> list[Any]:
    """The documents of a YAML file that a plan names (a job's manifest), read under the
    plan's own bounds (:func:`read_yaml_text`). Raises PlanError naming ``source``."""
    text = read_yaml_text(path, source, what=what)
    try:
        return list(yaml.load_all(text, Loader=_Loader))
    except yaml.YAMLError as exc:
        raise PlanError(source, [_yaml_problem(exc, text)]) from exc
    except RecursionError as exc:
        raise PlanError(source, [("(file)", f"nested deeper than {MAX_DEPTH} levels")]) from exc


def read_yaml_text(path: Path, source: str, *, what: str) -> str:
    """The text of a YAML file, checked before anything is built from it: a regular file
    (a FIFO, device or directory is refused without waiting for a writer), at most
    :data:`MAX_BYTES`, UTF-8, and its events within the module's bounds. ``what`` names
    what the file should be, for the messages. Raises PlanError naming ``source``."""
    try:
        with open_named(path) as f:
            data = f.read(MAX_BYTES + 1)
    except UnsafePathError as exc:  # not a regular file: say what it is instead
        raise PlanError(
            source, [("(file)", f"{file_kind(path)}; give the path of {what} file")]
        ) from exc
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise PlanError(source, [("(file)", f"cannot read: {reason}")]) from exc
    if len(data) > MAX_BYTES:
        raise PlanError(
            source,
            [
                (
                    "(file)",
                    f"larger than {MAX_BYTES >> 20} MiB; {what} is far smaller: is this {what}?",
                )
            ],
        )
    text = _decode(data, source)
    _check_events(text, source)
    return text


def file_kind(path: Path) -> str:
    """``"file"`` when ``path`` is a regular file (links followed), else what it is, said to
    follow its name: ``"not found"``, ``"is a directory"``, ``"is a FIFO (named pipe), not
    a file"``... Asked with ``stat``, which never blocks on a FIFO the way opening it would."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # absent, a name too long, a NUL byte: no such file
        return "not found"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    what = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket"}.get(
        stat.S_IFMT(mode), "a device"
    )
    return f"is {what}, not a file"


def _decode(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise PlanError(
            source,
            [
                (
                    f"line {line}, column {column}",
                    f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                    "save the plan as UTF-8",
                )
            ],
        ) from exc


def _yaml_problem(exc: yaml.YAMLError, text: str) -> tuple[str, str]:
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(file)"
    problem = getattr(exc, "problem", None) or str(exc)
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow
        at = exc.position
        line = text.count("\n", 0, at) + 1
        where = f"line {line}, column {at - (text.rfind(chr(10), 0, at) + 1) + 1}"
        char = exc.character
        shown_char = f"U+{char:04X}" if isinstance(char, int) else shown(char)
        problem = f"character {shown_char} is not allowed in YAML ({exc.reason})"
    elif "nesting depth" in problem:  # libyaml's own limit, met before ours when scanning
        problem = f"nested deeper than {MAX_DEPTH} levels; flatten it"
    return where, problem if problem.startswith("nested") else f"not valid YAML: {problem}"


@dataclass
class _Open:
    """A mapping or sequence being read: its path, size so far, anchor, keys seen."""

    path: str
    mapping: bool
    anchor: str | None
    size: int = 1
    keys: dict[str, int] = field(default_factory=dict)
    key_next: bool = True  # mapping: the next node is a key
    key: str = ""  # mapping: the key of the value being read
    index: int = 0  # sequence: the index of the next item


def _check_events(text: str, source: str) -> None:
    """One pass over the parser's events: depth, alias expansion, duplicate keys."""
    stack: list[_Open] = []
    sizes: dict[str, int] = {}  # anchor -> expanded node count
    added = 0
    try:
        for ev in yaml.parse(text, Loader=_Loader):
            if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                path = _child_path(stack)
                if len(stack) >= MAX_DEPTH:
                    where = path if len(path) <= 80 else f"{path[:40]}...{path[-30:]}"
                    raise _problem(
                        source,
                        ev,
                        f"nested deeper than {MAX_DEPTH} levels (at {where}); flatten it",
                    )
                stack.append(_Open(path, isinstance(ev, yaml.MappingStartEvent), ev.anchor))
            elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                done = stack.pop()
                if done.anchor:
                    sizes[done.anchor] = done.size
                _add_node(stack, done.size)
            elif isinstance(ev, yaml.ScalarEvent):
                _key_or_value(stack, ev, source)
                if ev.anchor:
                    sizes[ev.anchor] = 1
            elif isinstance(ev, yaml.AliasEvent):
                if any(o.anchor == ev.anchor for o in stack):
                    raise _problem(
                        source,
                        ev,
                        f"alias *{shown(ev.anchor)[1:-1]} at {_child_path(stack)} refers to a "
                        "node that contains it (a cycle); write the value out",
                    )
                size = sizes.get(ev.anchor or "", 1)
                added += size
                if added > MAX_ALIAS_NODES:
                    raise _problem(
                        source,
                        ev,
                        f"aliases expand this plan by more than {MAX_ALIAS_NODES:,} nodes (alias "
                        f"*{shown(ev.anchor)[1:-1]} at {_child_path(stack)} alone adds {size:,}); "
                        "write the values out, or use fewer and smaller aliases",
                    )
                _add_node(stack, size)
    except yaml.YAMLError as exc:
        raise PlanError(source, [_yaml_problem(exc, text)]) from exc


def _child_path(stack: list[_Open]) -> str:
    """The field path of the node about to be read."""
    if not stack:
        return "(top level)"
    top = stack[-1]
    base = "" if top.path == "(top level)" else top.path
    if top.mapping:
        return f"{base}.{top.key}" if base else top.key
    return f"{base}[{top.index}]"


def _add_node(stack: list[_Open], size: int) -> None:
    """A node of ``size`` (expanded) nodes was read inside the innermost open node."""
    if not stack:
        return
    top = stack[-1]
    top.size += size
    if top.mapping:
        if top.key_next:
            top.key = "?"  # a key that is not a scalar: never one of a plan's fields
        top.key_next = not top.key_next
    else:
        top.index += 1


def _key_or_value(stack: list[_Open], ev: Any, source: str) -> None:
    top = stack[-1] if stack else None
    if top is not None and top.mapping and top.key_next:
        key = ev.value
        line = ev.start_mark.line + 1 if ev.start_mark else 0
        if key in top.keys and key != "<<":  # "<<" merges; YAML allows it to repeat
            raise _problem(
                source,
                ev,
                f"duplicate key {shown(key)} {_in(top.path)} (first at line {top.keys[key]}); "
                "YAML would silently keep only the last: remove or rename one",
            )
        top.keys[key] = line
        top.size += 1
        top.key = key if len(key) <= 64 else shown(key)
        top.key_next = False
        return
    _add_node(stack, 1)


def _in(path: str) -> str:
    return "at the top level" if path == "(top level)" else f"in {path}"


def _problem(source: str, ev: Any, message: str) -> PlanError:
    mark = ev.start_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(file)"
    return PlanError(source, [(where, message)])
