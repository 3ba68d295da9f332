"""Runs of the probe's JSON step lines decoded in one call: the fast path of the reader.

:func:`decode_run` takes complete lines and gives their step columns, or None when it
cannot vouch that every line is a step line that the per-line path (the reader's
``_Scan.lines``) would read to the very same row. None is not a judgement on any line: the
caller reads that run line by line, so what loads is the same either way, by construction
(``tests/test_step_lines.py`` loads random and damaged files both ways and compares).

How: msgspec decodes the lines in one call (``Decoder.decode_lines``: JSON values apart by
whitespace) into :class:`_StepLine`, a struct of the fields the probe writes and no other; the
sample range of the usual line (one ``[start, end)`` pair) is parsed by numpy from the text
msgspec kept of it. About 1 us a line, against about 4 us line by line.

A run is declined (None) when any of these holds, each a case where the two paths could
part:

- msgspec is not installed (it is a dependency; the probe's side never needs it);
- a carriage return: JSON whitespace to the decoder, but a line break to the step
  store's ``bytes.splitlines``;
- a line that does not start with ``{``. Strings cannot hold a raw newline, and no field
  of :class:`_StepLine` holds an object (the sample ranges are checked to hold none), so
  the ``{`` after each newline starts a new value: every line holds whole values, and
  there must be as many values as lines;
- anything msgspec refuses: not JSON, a field of another type (``true`` for a rank,
  ``1.0`` for a step), a field the probe does not write (refused, not skipped: msgspec
  checks neither UTF-8 nor nesting depth in what it skips, the JSON decoder does), ``NaN``
  or a number out of a double's range, invalid UTF-8 or a lone surrogate in a string;
- an integer out of its column's range (numpy raises; the per-line path drops the row);
- a time or loss equal to zero: ``-0`` reads as -0.0 by the per-line path's numpy
  conversion of the matched text, as 0.0 here;
- sample ranges that are not a list of ``[start, end)`` integer pairs, or a value numpy
  clamped to the int64 bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np

from faultdrill.timeline.steps import I4, I8

try:
    import msgspec
except ImportError:  # pragma: no cover - a dependency; without it every line is read alone
    msgspec = None  # type: ignore[assignment]

__all__ = ["FastRun", "decode_run"]

#: The usual sample ranges once their numbers are deleted: one ``[start, end)`` pair.
_ONE_PAIR = b"[[,]]"
_NUMBER_CHARS = b"-0123456789"
_TO_SPACES = bytes.maketrans(b"[],", b"   ")
_I8_BOUNDS = (np.iinfo(I8).min, np.iinfo(I8).max)
_OPEN_BRACE = ord("{")
_NEWLINE = ord("\n")


@dataclass
class FastRun:
    """What a run of step lines holds: its columns (in ``_StepColumns`` order: mono, rank,
    pid, step, loss, ranges per row, range starts, range ends), checked and converted, and
    the first non-empty task of its lines ("" if none has one)."""

    columns: list[np.ndarray]
    task: str


if msgspec is not None:

    class _StepLine(msgspec.Struct, forbid_unknown_fields=True, gc=False, kw_only=True):
        """A step line as :meth:`faultdrill.probe.Probe.step` writes it, its fields in the
        probe's order (msgspec decodes fields met in declared order fastest); a field left
        out takes the value the per-line path gives it."""

        src: Literal["probe"]
        task: str = ""
        rank: int = 0
        pid: int = 0
        ts: float = 0.0
        mono: float
        kind: Literal["step"]
        step: int
        loss: float | None = None
        samples: msgspec.Raw = msgspec.Raw(b"[]")

    _decode_lines = msgspec.json.Decoder(_StepLine).decode_lines
    _decode_ranges = msgspec.json.Decoder(list[list[tuple[int, int]]]).decode
    _REFUSED: tuple[type[BaseException], ...] = (
        msgspec.DecodeError,
        ValueError,  # invalid UTF-8 in a string
        RecursionError,
    )

#: (task, rank, pid) -> the decoder of step lines of that one process (see _fixed_decoder)
_FIXED: dict[tuple[str, int, int], Any] = {}
_FIXED_MAX = 256
_I4_BOUNDS = (int(np.iinfo(I4).min), int(np.iinfo(I4).max))


def decode_run(data: bytes) -> FastRun | None:
    """The step columns of ``data`` (complete lines: it ends with a newline), or None where
    it cannot vouch for every line (see the module's docstring): then read it line by line.
    Never raises on the content of ``data``.

    A process writes the same task, rank and pid on each of its lines: the lines are first
    decoded by a struct that holds those of the first line as literals (nothing to build or
    gather per line), and by :class:`_StepLine` if they differ (a file a restarted process
    went on writing)."""
    if msgspec is None or not data.endswith(b"\n") or b"\r" in data:
        return None
    buf = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(buf == _NEWLINE)
    if buf[0] != _OPEN_BRACE or not bool((buf[ends[:-1] + 1] == _OPEN_BRACE).all()):
        return None
    try:
        (first,) = _decode_lines(data[: ends[0] + 1])
    except _REFUSED:
        return None  # the first line is not one msgspec takes: neither is the run
    fixed = _fixed_decoder(first.task, first.rank, first.pid)
    for decode, same in ((fixed, first), (_decode_lines, None)):
        if decode is None:
            continue
        try:
            rows = decode(data)
        except _REFUSED:
            continue
        if len(rows) != ends.shape[0]:
            return None
        try:
            return _run(rows, same)
        except (OverflowError, ValueError, TypeError):
            return None
    return None


def _fixed_decoder(task: str, rank: int, pid: int) -> Any:
    """``decode_lines`` of a struct like :class:`_StepLine` whose task, rank and pid are
    these literals (a line with others is refused), or None if rank or pid does not fit its
    column. A field the per-line path would give this value when absent may be absent."""
    if not all(_I4_BOUNDS[0] <= v <= _I4_BOUNDS[1] for v in (rank, pid)):
        return None
    key = (task, rank, pid)
    decode = _FIXED.get(key)
    if decode is None:
        if len(_FIXED) >= _FIXED_MAX:
            _FIXED.clear()

        def fixed(name: str, value: Any, absent: Any) -> tuple[Any, ...]:
            literal = cast(Any, Literal)[value]
            return (name, literal, value) if value == absent else (name, literal)

        fields = [
            ("src", Literal["probe"]),
            fixed("task", task, ""),
            fixed("rank", rank, 0),
            fixed("pid", pid, 0),
            ("ts", float, 0.0),
            ("mono", float),
            ("kind", Literal["step"]),
            ("step", int),
            ("loss", float | None, None),
            ("samples", msgspec.Raw, msgspec.Raw(b"[]")),
        ]
        struct = msgspec.defstruct(
            "_FixedStepLine", fields, kw_only=True, forbid_unknown_fields=True, gc=False
        )
        decode = _FIXED[key] = msgspec.json.Decoder(struct).decode_lines
    return decode


def _run(rows: list[Any], same: Any) -> FastRun | None:
    """The run of decoded rows, or None (see :func:`decode_run`); OverflowError where an
    integer does not fit its column. ``same``: the row whose task, rank and pid every row
    has (None: gather them)."""
    n = len(rows)
    mono = np.array([r.mono for r in rows], dtype=np.float64)
    loss = np.array([r.loss for r in rows], dtype=np.float64)  # None (null) -> NaN
    if not bool(mono.all()) or not bool(loss.all()):  # a zero: maybe "-0" (see above)
        return None
    if same is not None:
        rank, pid = np.full(n, same.rank, dtype=I4), np.full(n, same.pid, dtype=I4)
        task = same.task
    else:
        rank = np.array([r.rank for r in rows], dtype=I4)
        pid = np.array([r.pid for r in rows], dtype=I4)
        task = next((r.task for r in rows if r.task), "")
    step = np.array([r.step for r in rows], dtype=I8)
    ranges = _ranges([r.samples for r in rows])
    if ranges is None:
        return None
    counts, starts, ends = ranges
    return FastRun([mono, rank, pid, step, loss, counts, starts, ends], task)


def _ranges(raws: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Ranges per row, starts and ends of the sample ranges of each row (their JSON text),
    or None where one is not a list of integer pairs or a value is at an int64 bound."""
    text = b"".join(raws)
    n = len(raws)
    if text.translate(None, _NUMBER_CHARS) == _ONE_PAIR * n:
        # Each row's text is "[[<int>,<int>]]": msgspec checked it is JSON, so every
        # number between the brackets is a JSON integer.
        flat = np.fromstring(text.translate(_TO_SPACES), dtype=I8, sep=" ")
        counts = np.ones(n, dtype=I4)
    else:
        try:
            pairs = _decode_ranges(b"[" + b",".join(raws) + b"]")
        except _REFUSED:
            return None
        counts = np.array([len(p) for p in pairs], dtype=I4)
        flat = np.array([v for row in pairs for pair in row for v in pair], dtype=I8)
    if flat.shape[0] != 2 * int(counts.sum()):
        return None
    if flat.shape[0] and (int(flat.min()) == _I8_BOUNDS[0] or int(flat.max()) == _I8_BOUNDS[1]):
        return None  # fromstring clamps what overflows: read such a run line by line
    return counts, flat[0::2].copy(), flat[1::2].copy()
