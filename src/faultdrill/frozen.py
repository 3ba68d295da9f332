"""Frozen plan data: the one base of every plan section and fault spec, and its number rules.

A plan is untrusted input. Every model of it (``faultdrill.plan`` sections, every fault's
spec) derives from :class:`Frozen`, which makes it immutable, refuses unknown keys and holds
every number to the same rules, whatever the field:

* a number is finite (``.inf`` and ``.nan`` are refused, not clamped);
* ``true``/``false`` is never a number (pydantic would read ``true`` as 1);
* each numeric field declares its range with ``Field(ge=..., le=...)``: a value such as
  ``settle_s: 1e300`` or ``at_step: 2**63`` is refused at load, where it can be named,
  not later in ``time.sleep`` or a numpy column (``tests/test_plan_fuzz.py`` walks the
  schema and fails on any number without both bounds).

Cross-field validators report problems with field paths through :class:`FieldProblems`, so
that one plan error lists every problem at its place (:mod:`faultdrill.plan.validate`).
This module imports nothing of faultdrill: faults and the plan both build on it.
"""

from __future__ import annotations

import functools
import reprlib
import types
import typing
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, model_validator

__all__ = ["FieldProblems", "Frozen", "shown"]

_NUMBERS = (int, float)


class FieldProblems(ValueError):  # noqa: N818  (a ValueError pydantic passes through as one)
    """Raised by a model validator with every problem it found, each at a field path
    relative to the model (``"spares"``, ``"rounds[0].scenarios[1].fault"``); the loader
    turns each into a line of its own. Pydantic reports it as one ``value_error`` whose
    ``ctx["error"]`` is this object."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{path}: {msg}" for path, msg in problems))


_short = reprlib.Repr()
_short.maxstring = 200
_short.maxother = 200
_short.maxlist = _short.maxtuple = _short.maxdict = _short.maxset = 4
_short.maxlevel = 2


def shown(value: Any) -> str:
    """``repr(value)`` cut to at most a couple hundred characters: what an error may print of an input.

    An input may be huge (a long string, a structure YAML aliases expanded); an error
    message shows a glimpse of it, never all of it."""
    return _short.repr(value)


@functools.cache
def _kinds(annotation: Any) -> tuple[bool, bool, Any, Any]:
    """(takes a number, takes a bool or anything, mapping value type, sequence item type)
    of a field's annotation; the last two are None when the field is no such container."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _kinds(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        parts = [_kinds(a) for a in typing.get_args(annotation)]
        return (
            any(p[0] for p in parts),
            any(p[1] for p in parts),
            next((p[2] for p in parts if p[2] is not None), None),
            next((p[3] for p in parts if p[3] is not None), None),
        )
    if annotation is Any or annotation is bool:
        return False, True, None, None
    if annotation in _NUMBERS:
        return True, False, None, None
    if origin is Literal:
        values = typing.get_args(annotation)
        return (
            any(type(v) in _NUMBERS for v in values),
            any(type(v) is bool for v in values),
            None,
            None,
        )
    if origin is dict:
        return False, False, typing.get_args(annotation)[1], None
    if origin in (tuple, list):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return False, False, None, args[0] if len(args) == 1 else None
    return False, False, None, None


def _may_hold_a_number(annotation: Any) -> bool:
    """Whether a value of this type is, or contains, a number field (sub-models check
    their own fields)."""
    number, _, values, items = _kinds(annotation)
    return number or values is not None or items is not None


def _bool_for_number(value: Any, annotation: Any, where: str) -> str | None:
    """Where ``value`` holds true/false in a place that wants a number: a message, or None."""
    number, takes_bool, values, items = _kinds(annotation)
    if isinstance(value, bool):
        if number and not takes_bool:
            return f"{where}must be a number, not {str(value).lower()}"
        return None
    if values is not None and isinstance(value, dict) and _may_hold_a_number(values):
        for key, item in value.items():
            problem = _bool_for_number(item, values, f"{where}{shown(key)}: ")
            if problem:
                return problem
    if items is not None and isinstance(value, (list, tuple)) and _may_hold_a_number(items):
        for i, item in enumerate(value):
            problem = _bool_for_number(item, items, f"{where}[{i}]: ")
            if problem:
                return problem
    return None


class Frozen(BaseModel):
    """Base of every model of a plan: immutable, no unknown keys, numbers finite, numbers
    never booleans (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, raw: Any) -> Any:
        # A model validator, not a field one: a "before" field validator may not touch a
        # union's discriminator (every fault spec's ``kind``).
        if not isinstance(raw, dict):
            return raw
        problems = []
        for name, value in raw.items():
            field = cls.model_fields.get(name) if isinstance(name, str) else None
            if field is None or not isinstance(value, (bool, dict, list, tuple)):
                continue
            problem = _bool_for_number(value, field.annotation, "")
            if problem:
                problems.append((name, problem))
        if problems:
            raise FieldProblems(problems)
        return raw
