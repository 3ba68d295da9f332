"""The plan's ``logs`` section: how to read a job's progress from its own output.

Each field is a Python regular expression (``re``, applied with ``search`` to one line of
the job's output, without its newline) with named groups for the values. A line may match
several patterns (a step line that also reports a save); each gives one event, in the
order of the table. Groups that a pattern may use (**bold**: required):

=================  ==================  ==================================================
field              event               groups
=================  ==================  ==================================================
run_start          ``run_start``       rank, world_size
checkpoint_loaded  ``ckpt_load``       **step**, id, rank, verified, data_position,
                                       path
no_checkpoint      ``ckpt_none``       rank
step               ``step``            **step**, rank, loss, and the samples it consumed:
                                       sample_start with sample_end (exclusive) or
                                       sample_last (inclusive), or samples (a count)
checkpoint_saved   ``ckpt_save``       **id**, **step**, rank, path, data_position
run_end            ``run_end``         rank, step, digest
rank               (none)              **rank**: the rank of any line it matches
=================  ==================  ==================================================

``step`` is required. Without ``run_start`` a replica announces itself with its first
matched line. Without ``run_end`` the launcher's exit ends the run: when the job ends by
itself successfully, each replica of its last generation ends there (a ``run_end`` the
harness writes, ``synthesized: true``). A ``checkpoint_loaded`` line without an ``id`` group
loaded the checkpoint whose save was read last (``inferred: id``). Without
``no_checkpoint``, a replica whose first step line came with no resume line before it loaded
no checkpoint (a ``ckpt_none``, ``inferred: no-resume-line``; only when
``checkpoint_loaded`` is given, else nothing can be told). A value a line does not give is
left out of its event, never written as null; a group whose text is not a whole number
where one is needed makes the line unreadable. A ``verified`` group says the job checked the checkpoint before loading
it: true when it matched text other than ``false``/``no``/``0``/``unverified``, false when
it did not take part in the match; a pattern without one leaves verification unknown
(``progress.checkpoint-verified`` then retests). A ``samples`` count says how many samples
a step consumed, not which: the sample ledger then retests ("not observable").

What a number counts: a ``step`` event's ``step`` is how many units are complete. A field
with a ``step`` group (``step``, ``checkpoint_loaded``, ``checkpoint_saved``, ``run_end``)
may be given as ``{pattern: ..., counts: started}``: its number is the unit about to run,
not (``completed``, the default) the unit just completed. ``first_unit`` (0 or 1, default
1) is the number the job gives its first unit, ``unit`` its name (``epoch``). A step line
of a unit about to run completes the replica's previous one (:attr:`Reading.starts_unit`;
the tail keeps the count).

Validation names the field: a pattern that does not compile, lacks a required group or has
a group its field does not know is refused when the plan loads.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from faultdrill.frozen import Frozen
from faultdrill.i18n import Msg

__all__ = ["GROUPS", "LineReader", "LogPatterns", "Reading"]

#: field -> (event kind, required groups, optional groups), in the order a line is read.
GROUPS: dict[str, tuple[str | None, frozenset[str], frozenset[str]]] = {
    "run_start": ("run_start", frozenset(), frozenset({"rank", "world_size"})),
    "checkpoint_loaded": (
        "ckpt_load",
        frozenset({"step"}),
        frozenset({"id", "rank", "verified", "data_position", "path"}),
    ),
    "no_checkpoint": ("ckpt_none", frozenset(), frozenset({"rank"})),
    "step": (
        "step",
        frozenset({"step"}),
        frozenset({"rank", "loss", "sample_start", "sample_end", "sample_last", "samples"}),
    ),
    "checkpoint_saved": (
        "ckpt_save",
        frozenset({"id", "step"}),
        frozenset({"rank", "path", "data_position"}),
    ),
    "run_end": ("run_end", frozenset(), frozenset({"rank", "step", "digest"})),
    "rank": (None, frozenset({"rank"}), frozenset()),
}

#: Groups whose text must be a whole number: a line where one is not reads as unreadable
#: (never as an event with the value left out or null).
_WHOLE = (
    "step",
    "rank",
    "world_size",
    "data_position",
    "sample_start",
    "sample_end",
    "sample_last",
    "samples",
)

#: The fields whose ``step`` group numbers a unit of work: each says whether its number is
#: the unit just completed (``completed``, the default) or the one about to start
#: (``started``).
COUNTED = ("step", "checkpoint_loaded", "checkpoint_saved", "run_end")
Counts = Literal["completed", "started"]

_FALSE = frozenset({"", "false", "no", "0", "unverified", "not verified", "none"})


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _check_pattern(name: str, pattern: str | None) -> str | None:
    """``pattern`` if it compiles and has exactly the groups field ``name`` allows; raises
    ValueError saying what is wrong and how to fix it."""
    if pattern is None:
        return None
    try:
        rx = _compiled(pattern)
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise ValueError(
            f"does not compile: {exc.msg}{where} in {pattern!r}; write a Python regular "
            "expression (quote it in single quotes in YAML so backslashes stay as written)"
        ) from exc
    _kind, required, optional = GROUPS[name]
    groups = set(rx.groupindex)
    missing = sorted(required - groups)
    if missing:
        example = ", ".join(f"(?P<{g}>...)" for g in missing)
        raise ValueError(f"needs the named group(s) {', '.join(missing)}: add {example}")
    unknown = sorted(groups - required - optional)
    if unknown:
        raise ValueError(
            f"has named group(s) {', '.join(unknown)}, which logs.{name} does not use; its "
            f"groups are {', '.join(sorted(required | optional))} (use (?:...) for a group "
            "that only groups)"
        )
    if name == "step":
        ranged = {"sample_end", "sample_last"} & groups
        if ("sample_start" in groups) != bool(ranged) or len(ranged) > 1:
            raise ValueError(
                "a sample range needs sample_start with exactly one of sample_end "
                "(exclusive) or sample_last (inclusive)"
            )
        if "samples" in groups and ranged:
            raise ValueError("give either a sample range or a sample count (samples), not both")
    return pattern


class LogPatterns(Frozen):
    """How the job's own output says what it did (see the module docstring); a plan's
    model like the others (numbers written as numbers)."""

    step: str
    #: field -> what its number counts (see :data:`COUNTED`); a plan writes it beside the
    #: pattern: ``step: {pattern: '...', counts: started}``.
    counts: dict[Literal["step", "checkpoint_loaded", "checkpoint_saved", "run_end"], Counts] = (
        Field(default_factory=dict)
    )
    #: What one step is, in the job's words (``epoch``): said in the report.
    unit: str = Field("step", min_length=1, max_length=40, pattern=r"^[A-Za-z][A-Za-z -]*$")
    #: The number the job gives its first unit: 1 (``step 1`` after the first) or 0
    #: (``Epoch 0``, as ``range(epochs)`` numbers them).
    first_unit: int = Field(1, ge=0, le=1)
    run_end: str | None = None
    run_start: str | None = None
    checkpoint_loaded: str | None = None
    no_checkpoint: str | None = None
    checkpoint_saved: str | None = None
    rank: str | None = None

    @field_validator(
        "step",
        "run_end",
        "run_start",
        "checkpoint_loaded",
        "no_checkpoint",
        "checkpoint_saved",
        "rank",
    )
    @classmethod
    def _valid(cls, value: str | None, info: Any) -> str | None:
        return _check_pattern(str(info.field_name), value)

    @model_validator(mode="before")
    @classmethod
    def _counted(cls, raw: Any) -> Any:
        """``{pattern: ..., counts: ...}`` of a counted field into its pattern and
        :attr:`counts`."""
        if not isinstance(raw, dict):
            return raw
        raw, counts = dict(raw), dict(raw.get("counts") or {})
        for name in COUNTED:
            value = raw.get(name)
            if not isinstance(value, dict):
                continue
            unknown = sorted(set(value) - {"pattern", "counts"})
            if unknown or "pattern" not in value:
                raise ValueError(
                    f"logs.{name}: give a pattern, or {{pattern: '...', counts: started}} "
                    f"(counts: completed or started){'; unknown: ' + ', '.join(unknown) if unknown else ''}"
                )
            raw[name] = value["pattern"]
            if "counts" in value:
                counts[name] = value["counts"]
        if counts:
            raw["counts"] = counts
        return raw

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # a plan that does not use counts, unit or first_unit keeps the digest it had
        out: dict[str, Any] = handler(self)
        for key, default in (("counts", {}), ("unit", "step"), ("first_unit", 1)):
            if out.get(key) == default:
                out.pop(key, None)
        return out

    def counted(self, name: str) -> Counts:
        """What the number of field ``name``'s ``step`` group counts."""
        return self.counts.get(name, "completed")  # type: ignore[call-overload,no-any-return]

    @model_validator(mode="after")
    def _not_empty_match(self) -> LogPatterns:
        for name in GROUPS:
            pattern = getattr(self, name)
            if pattern is not None and _compiled(pattern).search("") is not None:
                raise ValueError(
                    f"logs.{name} {pattern!r} matches an empty line, so it would match every "
                    "line; make it name something the line must contain"
                )
        return self

    @property
    def says_rank(self) -> bool:
        """Whether some pattern reads the rank from the line."""
        return any(
            p is not None and "rank" in _compiled(p).groupindex
            for p in (getattr(self, n) for n in GROUPS)
        )

    @property
    def sample_ids(self) -> str:
        """What the step lines say about sample ids, as ``run_start``'s ``sample_ids``."""
        said = self._sample_ids()
        return "observed" if said is None else said.text()

    def _sample_ids(self) -> Msg | None:
        """Why the step lines do not say which samples (None: they do)."""
        groups = _compiled(self.step).groupindex
        if "sample_start" in groups:
            return None
        if "samples" in groups:
            return Msg("logs.blind.sample-count")
        return Msg("logs.blind.sample-none")

    def blind_spots(self) -> list[tuple[str, str]]:
        """(check, why) for each check the patterns leave without evidence."""
        return [(check, why.text()) for check, why in self.blind_spot_messages()]

    def blind_spot_messages(self) -> list[tuple[str, Msg]]:
        """:meth:`blind_spots` with each why as a message (said in a report's language)."""
        out: list[tuple[str, Msg]] = []
        step = _compiled(self.step).groupindex
        samples = self._sample_ids()
        if samples is not None:
            out.append(("progress.sample-ledger", samples))
        if "loss" not in step:
            out.append(("results.loss-matches-baseline", Msg("logs.blind.no-loss")))
        if self.checkpoint_loaded is None:
            out.append(("progress.resume-point", Msg("logs.blind.no-load-pattern")))
        elif "verified" not in _compiled(self.checkpoint_loaded).groupindex:
            out.append(("progress.checkpoint-verified", Msg("logs.blind.no-verified")))
        if self.checkpoint_saved is None:
            out.append(("results.final-checkpoint-verifies", Msg("logs.blind.no-save-pattern")))
        if self.run_end is None:
            out.append(("results.final-model-digest", Msg("logs.blind.no-end-pattern")))
        elif "digest" not in _compiled(self.run_end).groupindex:
            out.append(("results.final-model-digest", Msg("logs.blind.no-digest")))
        return out


@dataclass(frozen=True)
class Reading:
    """One event a line stands for: the probe event ``kind``, its fields, and the rank the
    line names (None: the line does not say)."""

    kind: str
    fields: dict[str, Any] = field(default_factory=dict)
    rank: int | None = None
    #: A step line whose number is the unit about to start (``counts: started``): its
    #: ``step`` is how many were complete before it.
    starts_unit: bool = False


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _known(fields: dict[str, Any], **optional: Any) -> dict[str, Any]:
    """``fields`` with each of ``optional`` the line gave (not None). A value the line did
    not give is left out, never written as null: the event contract
    (:data:`faultdrill.events.SHAPES`) refuses a null ``data_position`` or ``final_step``."""
    return fields | {k: v for k, v in optional.items() if v is not None}


def _float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


class LineReader:
    """Reads lines with the compiled patterns of a :class:`LogPatterns`. Thread-compatible
    (no state besides the compiled patterns)."""

    def __init__(self, patterns: LogPatterns) -> None:
        self.patterns = patterns
        self._rx = [
            (name, GROUPS[name][0], _compiled(p))
            for name in GROUPS
            if name != "rank" and (p := getattr(patterns, name)) is not None
        ]
        rank = patterns.rank
        self._rank = None if rank is None else _compiled(rank[1:] if rank[:1] == "^" else rank)
        loaded = patterns.checkpoint_loaded
        self._knows_verified = loaded is not None and "verified" in _compiled(loaded).groupindex

    def read(self, line: str) -> list[Reading]:
        """The events ``line`` stands for, in table order (empty: none).

        Each pattern is found as often as it occurs: two processes that share an output
        file and write a line's text and its newline separately (``print`` does) leave
        lines of two records glued together, each record whole. A record without a rank
        group takes the rank of the nearest ``logs.rank`` match before it (looked for
        anywhere in the line: a leading ``^`` of that pattern is dropped). A match whose
        ``step`` or ``rank`` is not a whole number gives a Reading of kind ``unreadable``
        (``field``, ``why``) instead of an event."""
        out = []
        marks: list[tuple[int, int | None]] = []
        if self._rank is not None:
            marks = [(m.start(), _int(m.group("rank"))) for m in self._rank.finditer(line)]
        for name, kind, rx in self._rx:
            assert kind is not None
            for m in rx.finditer(line):
                out.append(self._reading(name, kind, m, marks))
        return out

    def _reading(
        self, name: str, kind: str, m: re.Match[str], marks: list[tuple[int, int | None]]
    ) -> Reading:
        groups = m.groupdict()
        rank = _int(groups.get("rank"))
        for group in _WHOLE:
            if groups.get(group) is not None and _int(groups[group]) is None:
                why = f"{group} is not a whole number"
                return Reading("unreadable", {"field": name, "why": why})
        fields = self._fields(kind, groups)
        started = name in COUNTED and self.patterns.counted(name) == "started"
        if fields.get("step") is not None or (kind == "run_end" and "final_step" in fields):
            key = "final_step" if kind == "run_end" else "step"
            done = self._completed(int(fields[key]), started)
            if done is None:
                first = self.patterns.first_unit
                why = f"step {fields[key]} is below logs.first_unit {first}"
                return Reading("unreadable", {"field": name, "why": why})
            fields[key] = done
        if rank is None:
            before = [r for at, r in marks if at <= m.start()]
            rank = before[-1] if before else None
        return Reading(kind, fields, rank, starts_unit=started and kind == "step")

    def _completed(self, number: int, started: bool) -> int | None:
        """How many units are complete at a line whose number is ``number``: the unit just
        completed (its ordinal; 0 when none is), or the one about to start (those before
        it); None for a number that cannot be either (below the plan's ``first_unit``)."""
        done = number - self.patterns.first_unit + (0 if started else 1)
        return done if done >= 0 else None

    def _fields(self, kind: str, g: dict[str, str | None]) -> dict[str, Any]:
        if kind == "step":
            return self._step(g)
        if kind == "ckpt_load":
            verified: bool | None = None
            if self._knows_verified:
                v = g.get("verified")
                verified = v is not None and v.strip().lower() not in _FALSE
            return _known(
                {
                    "id": g.get("id"),
                    "step": _int(g["step"]),
                    "path": g.get("path") or "",
                    "verified": verified,
                    "rejected": [],
                },
                data_position=_int(g.get("data_position")),
            )
        if kind == "ckpt_save":
            return _known(
                {"id": g["id"], "step": _int(g["step"]), "path": g.get("path") or ""},
                data_position=_int(g.get("data_position")),
            )
        if kind == "ckpt_none":
            return {"rejected": []}
        if kind == "run_start":
            return {"world_size": _int(g.get("world_size"))}
        # run_end
        return _known(
            {"status": "ok", "model_digest": g.get("digest")}, final_step=_int(g.get("step"))
        )

    @staticmethod
    def _step(g: dict[str, str | None]) -> dict[str, Any]:
        fields: dict[str, Any] = {"step": _int(g["step"]), "loss": _float(g.get("loss"))}
        start = _int(g.get("sample_start"))
        end = _int(g.get("sample_end"))
        last = _int(g.get("sample_last"))
        if start is not None and end is None and last is not None:
            end = last + 1
        if start is not None and end is not None and end >= start:
            fields["samples"] = [[start, end]] if end > start else []
        else:
            fields["samples"] = []
        count = _int(g.get("samples"))
        if count is not None:
            fields["sample_count"] = count
        return fields
