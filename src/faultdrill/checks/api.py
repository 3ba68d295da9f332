"""The check seam: a check is a pure function from a timeline (and the plan) to findings.

* A *finding* is one judgement: the check's name, a verdict, a message a person can act on,
  and flat data. The message is a :class:`~faultdrill.i18n.Msg`: a message id
  (``<check name>.<what it found>``) and the values it says; the finding records its
  English text (from the English catalogue, :mod:`faultdrill.i18n.en`) with the id
  and values, so that every report can say it in its own language.
* Verdicts combine worst-first: ``fail`` > ``retest`` > ``pass``. ``retest`` means "we cannot
  tell": missing data, a chain that breaks, a check that raised. It is never a pass.
* A check that returns nothing is treated as ``retest`` (it proved nothing); one that raises
  yields ``retest`` naming the exception.

Checks are registered by name with a category: ``progress``, ``resources`` or ``results``
(the three kinds of evidence a recovery needs), or ``expectation`` (did the scenario end the
way the plan expected).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from faultdrill.errors import DrillError
from faultdrill.i18n import Msg
from faultdrill.records import Evidence, plain
from faultdrill.records import Finding as FindingRecord

if TYPE_CHECKING:
    from faultdrill.plan import Control, Plan, Scenario
    from faultdrill.readings.reference import Reference
    from faultdrill.timeline import Timeline

__all__ = [
    "CATEGORIES",
    "CHECKS",
    "CheckContext",
    "EvidenceResult",
    "Finding",
    "Msg",
    "Verdict",
    "check",
    "combine",
    "run_checks",
]

CATEGORIES = ("progress", "resources", "results", "expectation")


class Verdict(str, Enum):
    PASS = "pass"
    RETEST = "retest"
    FAIL = "fail"

    @property
    def rank(self) -> int:
        return {"pass": 0, "retest": 1, "fail": 2}[self.value]


def combine(verdicts: list[Verdict]) -> Verdict:
    """Worst first; nothing to combine is ``retest`` (no evidence is not a pass)."""
    if not verdicts:
        return Verdict.RETEST
    return max(verdicts, key=lambda v: v.rank)


@dataclass(frozen=True)
class Finding:
    """``message``: the English sentence a person acts on. ``message_id`` and ``params``
    (optional) name that sentence and the values in it, so that a report can say it in
    another language; a finding without them is shown as recorded."""

    check: str
    verdict: Verdict
    message: str
    data: dict[str, Any] = field(default_factory=dict)
    message_id: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def to_record(self) -> FindingRecord:
        """This finding as report.json's :class:`~faultdrill.report.model.Finding` (``data``,
        ``message_id`` and ``params`` only when set)."""
        out: dict[str, Any] = {
            "check": self.check,
            "verdict": self.verdict.value,
            "message": self.message,
        }
        if self.data:
            out["data"] = self.data
        if self.message_id is not None:
            out["message_id"] = self.message_id
        if self.params:
            out["params"] = self.params
        return FindingRecord.model_validate(plain(out))

    @property
    def said(self) -> Msg | str:
        """What this finding says: its message (id and values), or its English text when it
        has no id."""
        return Msg(self.message_id, **self.params) if self.message_id else self.message

    @classmethod
    def of(
        cls, check: str, verdict: Verdict, msg: Msg, data: dict[str, Any] | None = None
    ) -> Finding:
        """A finding saying ``msg``: its English text, id and values."""
        return cls(check, verdict, msg.text(), dict(data or {}), msg.id, msg.json_params())


@dataclass(frozen=True)
class CheckContext:
    """The inputs of every check: a timeline, the plan, what was drilled, the baseline."""

    timeline: Timeline
    plan: Plan
    item: Scenario | Control | None  # None: the baseline run itself
    reference: Reference | None

    def finding(self, check: str, verdict: Verdict, message: Msg | str, **data: Any) -> Finding:
        """A finding of ``check``. ``message``: a :class:`Msg` (translatable); a plain
        string is kept as it is and every report shows it in English."""
        if isinstance(message, Msg):
            return Finding.of(check, verdict, message, data)
        return Finding(check, verdict, message, data)

    def unsampled(self, check: str, not_sampled: Msg) -> Finding:
        """The retest of a check that needs the process table, which was not sampled
        (``not_sampled`` says so); on a platform that declared it cannot observe the job's
        processes (a ``platform``/``unobservable`` event, ``what: processes``), its reason
        (``why_id``: a message id of it; else ``why`` as recorded), and ``unobservable``."""
        for e in self.timeline.of("platform", "unobservable"):
            if e.get("what") == "processes":
                why_id = e.get("why_id")
                why: Msg | str = Msg(str(why_id)) if why_id else str(e.get("why"))
                return self.finding(
                    check,
                    Verdict.RETEST,
                    Msg("resources.unobservable", why=why),
                    unobservable=True,
                )
        return self.finding(check, Verdict.RETEST, not_sampled)


CheckFn = Callable[[CheckContext], list[Finding]]


@dataclass(frozen=True)
class _Registered:
    name: str
    category: str
    fn: CheckFn
    doc: str


CHECKS: dict[str, _Registered] = {}


def check(name: str, category: str) -> Callable[[CheckFn], CheckFn]:
    """Register a check under ``name`` (``<category>.<what>``); duplicates are refused."""
    if category not in CATEGORIES:
        raise DrillError(f"unknown check category {category!r}")

    def wrap(fn: CheckFn) -> CheckFn:
        if name in CHECKS:
            raise DrillError(f"check {name!r} registered twice")
        CHECKS[name] = _Registered(name, category, fn, (fn.__doc__ or "").strip())
        return fn

    return wrap


@dataclass
class EvidenceResult:
    category: str
    findings: list[Finding]

    @property
    def verdict(self) -> Verdict:
        return combine([f.verdict for f in self.findings])

    def to_record(self) -> Evidence:
        """This category's verdict and findings as report.json's ``Evidence``."""
        return Evidence(verdict=self.verdict.value, findings=[f.to_record() for f in self.findings])


def run_one(name: str, ctx: CheckContext) -> list[Finding]:
    reg = CHECKS[name]
    try:
        found = list(reg.fn(ctx))
    except Exception as exc:  # a crashing check must never read as a pass
        where = traceback.extract_tb(exc.__traceback__)[-1]
        at = f"{where.filename.rsplit('/', 1)[-1]}:{where.lineno}"
        error = f"{type(exc).__name__}: {exc}"
        return [Finding.of(name, Verdict.RETEST, Msg("check.raised", error=error, at=at))]
    if not found:
        return [Finding.of(name, Verdict.RETEST, Msg("check.no-finding"))]
    return found


def run_checks(ctx: CheckContext) -> dict[str, EvidenceResult]:
    """Every registered check, grouped by category (all four categories always present)."""
    out = {cat: EvidenceResult(cat, []) for cat in CATEGORIES}
    for name, reg in CHECKS.items():
        out[reg.category].findings.extend(run_one(name, ctx))
        # what this check read of a memory-mapped step table leaves resident memory: at a
        # fleet's size the columns of every check together would not fit
        ctx.timeline.steps.release()
    return out
