"""The conclusion level of a scenario: how far its recovery is proven, layer by layer.

The methodology keeps three conclusions apart, each resting on the one before it::

    running-again  ->  valid-progress  ->  consistent-results

* ``running-again``: after the fault the job ran again: a new generation of replicas
  announced itself ready (``run_start``), or, when no restart was needed, the generation
  running at the fault made a step after it. This only proves that the scheduler can start
  processes again.
* ``valid-progress``: the job is running again *and* every progress finding passed: it
  continued from the right checkpoint and data position, without restarting from zero,
  jumping or replaying samples, up to the planned last step.
* ``consistent-results``: it continued from valid progress *and* every results finding
  passed: losses, held-out evaluation, final model and exported artefact match the
  baseline.

The level is the highest of them proven; ``None`` when not even the first one is ("none").
A level whose evidence is ``retest`` is not proven (no evidence is not a pass), and every
level above an unproven one is not proven either. Resource evidence (stale replicas, leftovers)
is not one of these levels: it is judged in the verdict and the recovery class.

Pure: from the timeline and the findings per category (``run_checks``) to data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from faultdrill.checks.api import EvidenceResult, Msg, Verdict, combine
from faultdrill.events import Event
from faultdrill.readings.analysis import injections
from faultdrill.records import Conclusion as ConclusionRecord
from faultdrill.records import EventRef, plain
from faultdrill.records import LevelProof as LevelProofRecord

if TYPE_CHECKING:
    from faultdrill.timeline import Timeline

__all__ = ["LEVELS", "Conclusion", "Level", "LevelProof", "conclude", "event_ref"]


class Level(str, Enum):
    """A conclusion level, lowest first (see the module docstring)."""

    RUNNING_AGAIN = "running-again"
    VALID_PROGRESS = "valid-progress"
    CONSISTENT_RESULTS = "consistent-results"


LEVELS = tuple(Level)
#: The evidence category each level above ``running-again`` rests on.
_CATEGORY = {Level.VALID_PROGRESS: "progress", Level.CONSISTENT_RESULTS: "results"}


@dataclass(frozen=True)
class LevelProof:
    """One level: its verdict (pass: proven; fail: disproven; retest: not shown), why (in
    English; ``said``: the same as a message a report can translate), and the evidence it
    rests on (check names of the item's findings, event references)."""

    level: Level
    verdict: Verdict
    why: str
    findings: tuple[str, ...] = ()
    events: tuple[EventRef, ...] = ()
    said: Msg | None = None

    @classmethod
    def of(
        cls,
        level: Level,
        verdict: Verdict,
        said: Msg,
        findings: tuple[str, ...] = (),
        events: tuple[EventRef, ...] = (),
    ) -> LevelProof:
        return cls(level, verdict, said.text(), findings, events, said)

    @property
    def proven(self) -> bool:
        return self.verdict == Verdict.PASS

    def to_record(self) -> LevelProofRecord:
        """This proof as report.json's :class:`~faultdrill.report.model.LevelProof`."""
        return LevelProofRecord.model_validate(
            {
                "level": self.level.value,
                "proven": self.proven,
                "verdict": self.verdict.value,
                "why": self.why,
                "findings": list(self.findings),
                "events": [e.to_json() for e in self.events],
                **(plain(self.said.to_json()) if self.said is not None else {}),
            }
        )


@dataclass(frozen=True)
class Conclusion:
    """The highest level proven (None: none) and every level's proof, lowest first."""

    level: Level | None
    levels: tuple[LevelProof, ...] = field(default=())
    note: str = ""

    def to_record(self) -> ConclusionRecord:
        """This conclusion as report.json's :class:`~faultdrill.report.model.Conclusion`."""
        return ConclusionRecord(
            level=self.level.value if self.level is not None else None,
            levels=[p.to_record() for p in self.levels],
            note=self.note,
        )


def event_ref(ev: Event, t0: float | None = None, *keys: str) -> EventRef:
    """A compact reference to one event: where it is on the timeline, and a few fields."""
    out: dict[str, Any] = {"src": ev.src, "kind": ev.kind, "mono": round(ev.mono, 4)}
    if t0 is not None:
        out["since_injection_s"] = round(ev.mono - t0, 3)
    for key in keys:
        if ev.get(key) is not None:
            out[key] = ev.get(key)
    return EventRef.model_validate(plain(out))


def running_again(tl: Timeline) -> LevelProof:
    """After the first injection: a new generation announced itself ready (the scheduler
    started the job's processes again), or the generation running at the fault made a step
    after it (nothing had to be restarted)."""
    lvl = Level.RUNNING_AGAIN
    inj = injections(tl)
    if not inj:
        return LevelProof.of(lvl, Verdict.RETEST, Msg("level.running-again.never-injected"))
    t0 = inj[0].mono
    new = tl.incarnation_after(t0)
    if new is not None:
        first = min(new.starts, key=lambda e: e.mono)
        refs = [event_ref(first, t0, "rank", "node", "pid")]
        stepped: Msg | str = ""
        if new.first_step_mono is not None:
            stepped = Msg(
                "level.running-again.first-step",
                step=new.first_step,
                at_s=new.first_step_mono - t0,
            )
            refs.append(
                EventRef.model_validate(
                    plain(
                        {
                            "src": "probe",
                            "kind": "step",
                            "mono": round(new.first_step_mono, 4),
                            "since_injection_s": round(new.first_step_mono - t0, 3),
                            "step": new.first_step,
                        }
                    )
                )
            )
        return LevelProof.of(
            lvl,
            Verdict.PASS,
            Msg(
                "level.running-again.ready",
                inc=new.index,
                at_s=new.ready_mono - t0,
                nodes=list(new.nodes),
                stepped=stepped,
            ),
            events=tuple(refs),
        )
    st = tl.steps
    after = st.mono > t0
    if after.any():
        mono = float(st.mono[after].min())
        step = int(st.step[after][st.mono[after].argmin()])
        return LevelProof.of(
            lvl,
            Verdict.PASS,
            Msg("level.running-again.kept-running", step=step, at_s=mono - t0),
            events=(
                EventRef.model_validate(
                    {
                        "src": "probe",
                        "kind": "step",
                        "mono": round(mono, 4),
                        "since_injection_s": round(mono - t0, 3),
                        "step": step,
                    }
                ),
            ),
        )
    return LevelProof.of(
        lvl,
        Verdict.FAIL,
        Msg("level.running-again.not"),
        events=(event_ref(inj[0], t0, "fault", "target"),),
    )


def _category_proof(level: Level, evidence: dict[str, EvidenceResult]) -> LevelProof:
    cat = _CATEGORY[level]
    findings = evidence[cat].findings
    verdict = combine([f.verdict for f in findings])
    if verdict == Verdict.PASS:
        return LevelProof.of(
            level,
            verdict,
            Msg("level.category.passed", n=len(findings), category=cat),
            tuple(sorted({f.check for f in findings})),
        )
    bad = [f for f in findings if f.verdict == verdict]
    names = tuple(sorted({f.check for f in bad}))
    said = Msg(
        "level.category.failed" if verdict == Verdict.FAIL else "level.category.retest",
        category=cat,
        checks=list(names),
    )
    return LevelProof.of(level, verdict, said, names)


def conclude(tl: Timeline, evidence: dict[str, EvidenceResult]) -> Conclusion:
    """The conclusion level of one drilled item (see the module docstring).

    ``evidence``: the item's findings per category, as :func:`~faultdrill.checks.run_checks`
    returns them (``progress`` and ``results`` are read). A run without an injection (the
    baseline) has no conclusion level: ``level`` None, with a note."""
    if not injections(tl) and not tl.of("fault", "inject_failed"):
        return Conclusion(None, (), Msg("level.no-fault").text())
    proofs = [running_again(tl)]
    for level in LEVELS[1:]:
        proof = _category_proof(level, evidence)
        below = proofs[-1]
        if not below.proven:
            proof = LevelProof.of(
                level,
                Verdict.RETEST if proof.verdict == Verdict.PASS else proof.verdict,
                Msg("level.below-not-proven", below=below.level.value, why=proof.said or proof.why),
                proof.findings,
                proof.events,
            )
        proofs.append(proof)
    proven = [p.level for p in proofs if p.proven]
    # proofs above an unproven level are never proven, so the proven ones are a prefix
    return Conclusion(proven[-1] if proven else None, tuple(proofs))
