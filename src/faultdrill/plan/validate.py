"""Loading a plan: the one edge where raw YAML or JSON becomes a :class:`Plan`.

Past :func:`load_plan` nothing handles raw dicts. Every error names the file, the field
path, the rule broken and how to fix it (:class:`~faultdrill.errors.PlanError`), and one
error lists every problem found: a value YAML gave that is no plain data (``!!binary``
bytes, an unquoted date) and a number written as text (:mod:`faultdrill.frozen`) are put
in place as a :class:`~faultdrill.frozen.Refused`, so that pydantic goes on with the rest.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from faultdrill.errors import PlanError
from faultdrill.faults.api import FAULTS
from faultdrill.frozen import FieldProblems, Refused, shown
from faultdrill.plan.model import Plan
from faultdrill.plan.source import read_plan_data

__all__ = ["load_plan", "parse_plan", "plan_schema", "plan_without"]


def plan_schema() -> dict[str, Any]:
    return Plan.model_json_schema()


def load_plan(path: str | Path) -> Plan:
    """Read and validate a YAML (or JSON) plan file (:mod:`faultdrill.plan.source` bounds
    what the file may cost). Raises PlanError, never anything else."""
    path = Path(path)
    raw = read_plan_data(path)
    return parse_plan(raw, source=str(path), plan_dir=path.resolve().parent)


def plan_without(plan: Plan, ids: set[str], *, source: str, **resources: Any) -> Plan:
    """The same plan without the scenarios and controls named in ``ids`` (a round left
    empty goes too), with ``resources`` fields replaced; validated again."""
    raw = plan.model_dump(mode="json")
    raw["resources"].update(resources)
    rounds = []
    for rnd in raw["rounds"]:
        keep = [s for s in rnd["scenarios"] if s["id"] not in ids]
        if keep:
            rounds.append({**rnd, "scenarios": keep})
    raw["rounds"] = rounds
    raw["controls"] = [c for c in raw["controls"] if c["id"] not in ids]
    return parse_plan(raw, source=source)


def parse_plan(raw: Any, *, source: str = "<plan>", plan_dir: Path | None = None) -> Plan:
    """Validate a parsed plan. ``plan_dir``: the directory of the plan file it came from, if
    any; a relative ``task.entrypoint.script`` is resolved against it and must exist, and the
    plan must be one that can be drilled (:meth:`Plan.drill_problems`): it was written by a
    person. Without it (a run's recorded copy, the demo without what this machine lacks) the
    data rules alone apply."""
    if not isinstance(raw, dict):
        raise PlanError(
            source,
            [("(top level)", f"must be a mapping with task, data, ...; got {type(raw).__name__}")],
        )
    try:
        foreign: list[tuple[str, Refused]] = []
        raw = _plain_data(raw, "", foreign)
        context = {"plan_dir": str(plan_dir)} if plan_dir is not None else None
        plan = Plan.model_validate(raw, context=context)
    except ValidationError as exc:
        raise PlanError(source, _problems(exc, foreign)) from exc
    except RecursionError as exc:  # a raw structure deeper than any file may give
        raise PlanError(source, [("(top level)", "nested too deeply to be a plan")]) from exc
    if foreign:  # only where any value goes (a workload's keys): pydantic took them
        raise PlanError(source, [(path, r.message) for path, r in foreign])
    return plan


def _problems(exc: ValidationError, foreign: list[tuple[str, Refused]]) -> list[tuple[str, str]]:
    """The plan's problems: each value that is no plain data (``foreign``), then each of
    pydantic's errors, once (those about a foreign value are said already)."""
    errors = exc.errors()
    # A tuple whose item failed also reports itself "too short": noise, drop it.
    locs = [tuple(e["loc"]) for e in errors]
    said = {id(r) for _, r in foreign}
    errors = [
        e
        for e in errors
        if id(e.get("input")) not in said
        and not any(id(part) in said for part in e["loc"])
        and not (
            e["type"] == "too_short"
            and any(
                other != tuple(e["loc"]) and other[: len(e["loc"])] == tuple(e["loc"])
                for other in locs
            )
        )
    ]
    problems = [(path, r.message) for path, r in foreign]
    done = {path for path, _ in problems}
    return problems + [p for err in errors for p in _explain(err) if p[0] not in done]


#: What YAML may give that is plain data (JSON's types), as mapping keys and as values.
_PLAIN = (str, int, float, bool, type(None))


def _plain_data(node: Any, path: str, foreign: list[tuple[str, Refused]]) -> Any:
    """``node`` with every value that is not plain data (YAML's ``!!binary`` bytes, an
    unquoted date, a ``!!set``) replaced by a :class:`Refused`, each listed in ``foreign``
    with its path; ``node`` itself when it holds none. A plan holds text, numbers, booleans,
    lists and mappings: pydantic would read bytes as text, and a workload's config is
    written out as JSON."""
    if isinstance(node, dict):
        out: dict[Any, Any] = {}
        changed = False
        for key, value in node.items():
            where = _join(path, key if isinstance(key, str) and len(key) <= 64 else shown(key))
            if not isinstance(key, _PLAIN):
                refused = Refused(key, f"key {_foreign(key)}")
                foreign.append((where, refused))
                key, changed = refused, True
            new = _plain_data(value, where, foreign)
            changed = changed or new is not value
            out[key] = new
        return out if changed else node
    if isinstance(node, list | tuple):
        items = [_plain_data(v, f"{path}[{i}]", foreign) for i, v in enumerate(node)]
        return node if all(a is b for a, b in zip(items, node, strict=True)) else items
    if isinstance(node, _PLAIN):
        return node
    refused = Refused(node, _foreign(node))
    foreign.append((path or "(top level)", refused))
    return refused


def _foreign(value: Any) -> str:
    """Why ``value`` (from YAML, not plain data) does not belong in a plan, and the fix."""
    if isinstance(value, bytes):
        return (
            f"{shown(value)} is binary data (a YAML !!binary value) where the plan takes "
            "text; write the text itself"
        )
    if isinstance(value, dt.date):  # datetime too
        return (
            f"{value.isoformat()} is a date (YAML reads an unquoted date as one) where the "
            f"plan takes text; quote it: '{value.isoformat()}'"
        )
    if isinstance(value, set | frozenset):
        return f"{shown(value)} is a set (a YAML !!set); write a list"
    return (
        f"{shown(value)} is a {type(value).__name__}; a plan holds only text, numbers, "
        "true/false, lists and mappings"
    )


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in FAULTS or str(part).startswith(("function-after", "tagged-union")):
            continue  # pydantic's union branch names are noise to a plan author
        else:  # a key as written in the plan: shortened if it is long
            name = str(part) if len(str(part)) <= 64 else shown(part)
            out += ("." if out else "") + name
    return out or "(top level)"


def _explain(err: Any) -> list[tuple[str, str]]:
    """One pydantic error as (field path, message) lines: a :class:`FieldProblems` gives
    one line per problem, at its own path below the error's."""
    kind, loc = err["type"], _loc(err["loc"])
    cause = err.get("ctx", {}).get("error")
    if kind == "value_error" and isinstance(cause, FieldProblems):
        base = "" if loc == "(top level)" else loc
        return [(_join(base, path), msg) for path, msg in cause.problems]
    return [_explain_one(err, kind, loc)]


def _join(base: str, path: str) -> str:
    if not base:
        return path
    return base + path if path.startswith("[") else f"{base}.{path}"


def _explain_one(err: Any, kind: str, loc: str) -> tuple[str, str]:
    value = err.get("input")
    msg = err["msg"]
    if isinstance(value, Refused):  # judged before pydantic saw it: its own words
        return loc, value.message
    if kind == "extra_forbidden":
        return loc, f"unknown key {shown(loc.rsplit('.', 1)[-1])}; remove it or check its spelling"
    if kind == "missing":
        return loc, "required field is missing; add it"
    if kind == "union_tag_invalid":
        tag = err.get("ctx", {}).get("tag", value)
        return (
            loc + ".kind",
            f"{shown(tag)} is not a known fault kind; use one of: {', '.join(sorted(FAULTS))}",
        )
    if kind == "union_tag_not_found":
        return loc, f"a fault needs 'kind'; use one of: {', '.join(sorted(FAULTS))}"
    if kind == "literal_error" and loc.endswith("fault.kind"):
        return (
            loc,
            f"{shown(value)} is not a known fault kind; use one of: {', '.join(sorted(FAULTS))}",
        )
    if kind in ("literal_error", "enum"):
        expected = err.get("ctx", {}).get("expected", "")
        return loc, f"{shown(value)} is not allowed; use {expected}"
    if kind == "value_error":
        return loc, msg.removeprefix("Value error, ")
    if kind == "finite_number":
        return loc, f"must be a finite number; got {shown(value)}"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return loc, f"{msg.lower()}; got {shown(value)} ({type(value).__name__})"
    return loc, f"{msg} (got {shown(value)})"
