"""Frozen plan data: the one base of every plan section and fault spec, and its number rules.

A plan is untrusted input. Every model of it (``faultdrill.plan`` sections, every fault's
spec) derives from :class:`Frozen`, which makes it immutable, refuses unknown keys and holds
every number to the same rules, whatever the field:

* a number is finite (``.inf`` and ``.nan`` are refused, not clamped);
* a number is written as one: ``true``/``false`` and a quoted ``'15'`` are refused where a
  number goes (pydantic's lax mode would read them as 1 and 15), and so is ``10.0`` where
  a whole number goes; an int where a float goes is fine (YAML writes ``5`` for 5.0);
* each numeric field declares its range with ``Field(ge=..., le=...)``: a value such as
  ``settle_s: 1e300`` or ``at_step: 2**63`` is refused at load, where it can be named,
  not later in ``time.sleep`` or a numpy column (``tests/test_plan_fuzz.py`` walks the
  schema and fails on any number without both bounds).

Cross-field validators report problems with field paths through :class:`FieldProblems`, so
that one plan error lists every problem at its place (:mod:`faultdrill.admit`).
This module imports nothing of faultdrill: faults and the plan both build on it.
"""

from __future__ import annotations

import functools
import reprlib
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, model_validator

__all__ = ["FieldProblems", "Frozen", "Refused", "shown"]

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


class Refused:
    """A value already judged wrong, put in its place before pydantic validates, so that
    pydantic reports it at its own field path, with every other problem of the plan, in
    :attr:`message` rather than in its own words (the loader, :mod:`faultdrill.admit`,
    prints the message). It is no number, string or mapping: every typed field refuses it."""

    __slots__ = ("message", "value")

    def __init__(self, value: Any, message: str) -> None:
        self.value = value
        self.message = message

    def __repr__(self) -> str:
        return shown(self.value)


@dataclass(frozen=True)
class _Kinds:
    """What a field's annotation takes: scalars, and the item type of a container."""

    ints: bool = False
    floats: bool = False
    strs: bool = False
    bools: bool = False  # bool, or Any
    values: Any = None  # mapping value type
    items: Any = None  # sequence item type

    @property
    def numbers(self) -> bool:
        return self.ints or self.floats


@functools.cache
def _kinds(annotation: Any) -> _Kinds:
    """What a field of this annotation takes (see :class:`_Kinds`)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _kinds(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        parts = [_kinds(a) for a in typing.get_args(annotation)]
        return _Kinds(
            ints=any(p.ints for p in parts),
            floats=any(p.floats for p in parts),
            strs=any(p.strs for p in parts),
            bools=any(p.bools for p in parts),
            values=next((p.values for p in parts if p.values is not None), None),
            items=next((p.items for p in parts if p.items is not None), None),
        )
    if annotation is Any:
        return _Kinds(ints=True, floats=True, strs=True, bools=True)
    if annotation is bool:
        return _Kinds(bools=True)
    if annotation is int:
        return _Kinds(ints=True)
    if annotation is float:
        return _Kinds(floats=True)
    if annotation is str or (isinstance(annotation, type) and issubclass(annotation, str)):
        return _Kinds(strs=True)
    if origin is Literal:
        values = typing.get_args(annotation)
        return _Kinds(
            ints=any(type(v) in _NUMBERS for v in values),
            strs=any(isinstance(v, str) for v in values),
            bools=any(type(v) is bool for v in values),
        )
    if origin is dict:
        return _Kinds(values=typing.get_args(annotation)[1])
    if origin in (tuple, list):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return _Kinds(items=args[0] if len(args) == 1 else None)
    return _Kinds()


def _may_hold_a_number(annotation: Any) -> bool:
    """Whether a value of this type is, or contains, a number field (sub-models check
    their own fields)."""
    kinds = _kinds(annotation)
    return kinds.numbers or kinds.values is not None or kinds.items is not None


def _number_problem(value: Any, kinds: _Kinds) -> str | None:
    """Why ``value`` is not a number a field of these kinds takes as one, or None. Strict:
    YAML's own numbers only (an int is fine for a float field), never a quoted one."""
    if not kinds.numbers:
        return None
    if isinstance(value, bool):
        return None if kinds.bools else f"must be a number, not {str(value).lower()}"
    if isinstance(value, str) and not kinds.strs:
        try:
            float(value)
        except ValueError:
            return f"must be a number, not the string {shown(value)}"
        return (
            f"must be a number, not the string {shown(value)}; write it without quotes "
            f"({value.strip()})"
        )
    if type(value) is float and kinds.ints and not kinds.floats and value.is_integer():
        return f"must be a whole number, not {value!r}; write {int(value)}"
    return None


def _strict_numbers(value: Any, annotation: Any) -> Any:
    """``value`` with each number that a field of ``annotation`` would take only by lax
    coercion (``true``, ``'15'``, ``10.0`` for an int) replaced by a :class:`Refused`;
    ``value`` itself (the same object) when there is none."""
    kinds = _kinds(annotation)
    problem = _number_problem(value, kinds)
    if problem:
        return Refused(value, problem)
    if kinds.values is not None and isinstance(value, dict) and _may_hold_a_number(kinds.values):
        out = {k: _strict_numbers(v, kinds.values) for k, v in value.items()}
        return value if all(out[k] is v for k, v in value.items()) else out
    if (
        kinds.items is not None
        and isinstance(value, list | tuple)
        and _may_hold_a_number(kinds.items)
    ):
        items = [_strict_numbers(v, kinds.items) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


class Frozen(BaseModel):
    """Base of every model of a plan: immutable, no unknown keys, numbers finite, numbers
    written as numbers, never booleans or quoted (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _numbers_as_written(cls, raw: Any) -> Any:
        # A model validator, not a field one: a "before" field validator may not touch a
        # union's discriminator (every fault spec's ``kind``). Pydantic's lax mode would
        # read '15' or true as a number; each such value becomes a Refused, which pydantic
        # then reports at its own path with every other problem.
        if not isinstance(raw, dict):
            return raw
        out = None
        for name, value in raw.items():
            field = cls.model_fields.get(name) if isinstance(name, str) else None
            if field is None or not isinstance(value, (bool, str, float, dict, list, tuple)):
                continue
            checked = _strict_numbers(value, field.annotation)
            if checked is not value:
                out = out if out is not None else dict(raw)
                out[name] = checked
        return raw if out is None else out
