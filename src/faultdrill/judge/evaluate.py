"""Judging a recorded run: timeline -> checks -> verdicts, recovery classes, report data.

Pure with respect to the machine: it reads a run directory and writes nothing, so the
same directory can be judged again later (``faultdrill check``), by someone else, or after
a change to the checks. What it produces is the machine contract of ``report.json``: a
:class:`~faultdrill.report.model.Report` (:meth:`RunResult.to_report`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from faultdrill import __version__, plugins, rundir
from faultdrill.admit import parse_plan
from faultdrill.checks import CheckContext, EvidenceResult, Finding, Verdict, combine, run_checks
from faultdrill.checks.api import Msg
from faultdrill.checks.network import network_report
from faultdrill.checks.results import comparison_mode
from faultdrill.environment import environment_facts
from faultdrill.errors import RunDirError
from faultdrill.judge.conclusion import Conclusion, conclude
from faultdrill.judge.dependencies import dependency_totals, recovery_dependencies
from faultdrill.judge.disruption import describe_disruption
from faultdrill.judge.dossier import scheduling_result
from faultdrill.judge.goodput import account
from faultdrill.judge.layers import LayerResult, failing_layer
from faultdrill.judge.log_evidence import as_reached, log_evidence, not_observable
from faultdrill.judge.plausible import implausible
from faultdrill.judge.runfiles import refuse_outside, run_json
from faultdrill.judge.trend import trend_after_recovery
from faultdrill.plan import Control, Plan, RecoveryClass, Scenario
from faultdrill.readings.analysis import Answers, answer_questions
from faultdrill.readings.inventory import inventory_summary
from faultdrill.readings.reference import Reference
from faultdrill.report.model import (
    EVIDENCE,
    Baseline,
    Conditions,
    Dependencies,
    Disruption,
    Dossier,
    Evidence,
    EvidenceSet,
    Expected,
    Failure,
    FaultRef,
    Goodput,
    IncarnationPlacement,
    Inventory,
    Item,
    Message,
    RecordedPlan,
    Report,
    Skipped,
    Summary,
    Trend,
    message_of,
    plain,
)
from faultdrill.rundir import item_dir
from faultdrill.timeline import Timeline

__all__ = [
    "ItemResult",
    "RunResult",
    "evaluate_item",
    "evaluate_run",
    "recovery_class",
    "stop_condition_fired",
]

_CLASS_ORDER = list(RecoveryClass)


def recovery_class(
    evidence: dict[str, EvidenceResult],
    outcome: str | None,
    operator_actions: int,
    confirm_required: bool,
    aborted: str | Msg | None = None,
    undetermined: str | Msg | None = None,
) -> tuple[RecoveryClass, str]:
    """How the job came back, and why that class (in English; :func:`class_and_why` gives
    the why as a message)."""
    cls, why = class_and_why(
        evidence, outcome, operator_actions, confirm_required, aborted, undetermined
    )
    return cls, why.text()


def class_and_why(
    evidence: dict[str, EvidenceResult],
    outcome: str | None,
    operator_actions: int,
    confirm_required: bool,
    aborted: str | Msg | None = None,
    undetermined: str | Msg | None = None,
) -> tuple[RecoveryClass, Msg]:
    """How the job came back, and why that class.

    The class says who brought the job back (automatic, manual-confirmation,
    manual-restart) or that it did not continue from valid progress (unrecoverable: it
    ended, was aborted, or its progress evidence failed). A job that continued from valid
    progress but whose results evidence failed keeps the class of who acted, and the why
    says the results failed: class, conclusion level (valid-progress) and sentence agree.

    ``aborted``: why the harness aborted the drill (a stop condition). The job then did
    not recover within the plan's stop conditions, which is all that can be said of it:
    unrecoverable *within those limits*, and the why names the condition.
    ``undetermined``: why the drill cannot tell at all (its fault was never applied, its
    events are damaged): the class is ``not-determined``, never a guess."""
    if aborted is not None:
        return RecoveryClass.UNRECOVERABLE, Msg("class.why.aborted", why=aborted)
    if undetermined is not None:
        return RecoveryClass.NOT_DETERMINED, Msg("class.why.not-determined", why=undetermined)
    if outcome != "succeeded" and not _reached_last_step(evidence):
        return RecoveryClass.UNRECOVERABLE, Msg("class.why.ended", state=outcome or "none")
    if evidence["progress"].verdict == Verdict.FAIL:
        return RecoveryClass.UNRECOVERABLE, Msg("class.why.evidence-failed", category="progress")
    if outcome != "succeeded":
        # Every progress finding passed and every rank ended cleanly at the planned last
        # step, yet the launcher reported another end: it did continue, so it is not
        # unrecoverable; a person must confirm how it ended.
        return RecoveryClass.MANUAL_CONFIRMATION, Msg(
            "class.why.ended-after-valid-progress", state=outcome or "none"
        )
    cls, why = _who_acted(evidence, operator_actions, confirm_required)
    if evidence["results"].verdict == Verdict.FAIL:
        # It continued from valid progress (the conclusion level says so): the class still
        # says who brought it back; the failure is the verdict's and the level's to say.
        return cls, Msg("class.why.results-failed", who=why)
    return cls, why


def _reached_last_step(evidence: dict[str, EvidenceResult]) -> bool:
    """Every progress finding passed, and ``progress.completed`` says the committed progress
    reached the planned last step with a clean end on every rank (not merely that a failure
    was expected)."""
    progress = evidence["progress"]
    return progress.verdict == Verdict.PASS and any(
        f.check == "progress.completed" and f.message_id == "progress.completed.reached"
        for f in progress.findings
    )


def _who_acted(
    evidence: dict[str, EvidenceResult], operator_actions: int, confirm_required: bool
) -> tuple[RecoveryClass, Msg]:
    """The class of a job that continued from valid progress: who brought it back."""
    if operator_actions:
        return RecoveryClass.MANUAL_RESTART, Msg("class.why.resubmitted")
    if evidence["resources"].verdict == Verdict.FAIL:
        return RecoveryClass.MANUAL_CONFIRMATION, Msg("class.why.leftovers")
    if confirm_required:
        return RecoveryClass.MANUAL_CONFIRMATION, Msg("class.why.confirm-required")
    if any(evidence[c].verdict == Verdict.RETEST for c in ("progress", "resources", "results")):
        return RecoveryClass.MANUAL_CONFIRMATION, Msg("class.why.unexplained")
    return RecoveryClass.AUTOMATIC, Msg("class.why.automatic")


def _unobservable_only(
    evidence: dict[str, EvidenceResult], cls: RecoveryClass, confirm: bool
) -> bool:
    """The class is manual-confirmation only because of retests of what the platform
    declared it cannot observe (``unobservable`` findings: a real cluster's processes)."""
    if cls != RecoveryClass.MANUAL_CONFIRMATION or confirm:
        return False
    found = [f for c in ("progress", "resources", "results") for f in evidence[c].findings]
    not_pass = [f for f in found if f.verdict != Verdict.PASS]
    return bool(not_pass) and all(
        f.verdict == Verdict.RETEST and f.data.get("unobservable") for f in not_pass
    )


@dataclass
class ItemResult:
    id: str
    kind: str  # baseline | scenario | control
    round: int
    item: Scenario | Control | None
    evidence: dict[str, EvidenceResult]
    answers: Answers
    outcome: str | None
    operator_actions: list[dict[str, Any]]
    recovery: RecoveryClass
    recovery_why: str
    conditions: Conditions
    timeline: Timeline | None = field(default=None, repr=False)
    #: Round-3 accounting (``faultdrill.judge.goodput``, ``inventory``, ``disruption``).
    goodput: Goodput | None = None
    inventory: Inventory | None = None
    disruption: Disruption | None = None
    #: Why the harness aborted the item (a stop condition fired), or None.
    aborted: str | None = None
    #: What a buyer signs (issue 14): the conclusion level reached, the failing layer (None
    #: for an item that passed), what the recovery depended on, the trend after recovery,
    #: and which node got which rank per incarnation.
    conclusion: Conclusion | None = None
    layer: LayerResult | None = None
    dependencies: Dependencies = field(default_factory=Dependencies)
    trend: Trend = field(default_factory=Trend)
    scheduling: list[IncarnationPlacement] = field(default_factory=list)
    #: When the job ended failed: ``command``, ``exit_status``, ``signal``, ``node``,
    #: ``local_rank``, ``worker_failures``, ``error_tail`` (the failing worker's last output
    #: lines), ``log`` (relative to the run directory); see
    #: :func:`faultdrill.engine.failure.failure_facts`. None otherwise.
    failure: dict[str, Any] | None = None
    #: No probe event from any rank: the script is not instrumented (or died before its
    #: first ``run_start``); its evidence cannot be judged.
    no_probe_events: bool = False
    #: The messages behind English fields (``recovery_why``, ``aborted``): field -> message,
    #: so that a report can say them in its own language (report.json's ``field_messages``).
    said: dict[str, Msg] = field(default_factory=dict)
    #: Evidence read from the job's log lines (plan ``logs``), or None: ``faultdrill.joblogs``.
    log_evidence: dict[str, Any] | None = None

    @property
    def verdict(self) -> Verdict:
        """Worst-first over the evidence; retest whatever it says when the item was aborted
        (an aborted drill proves nothing either way; its findings stay visible)."""
        if self.aborted is not None:
            return Verdict.RETEST
        return combine([e.verdict for e in self.evidence.values()])

    @property
    def not_as_planned(self) -> str | None:
        """Why the drill did not run as planned (aborted, or its fault never applied)."""
        if self.aborted is not None:
            return self.aborted
        said = self.not_applied_message
        return said.text() if said is not None else None

    @property
    def not_applied_message(self) -> Msg | None:
        """Why the planned fault was not applied as planned, or None (it was, or no item)."""
        if self.item is None:
            return None
        applied = [
            f
            for f in self.evidence["expectation"].findings
            if f.check == "expectation.fault-applied"
        ]
        if not applied or any(f.verdict != Verdict.PASS for f in applied):
            why = applied[0].said if applied else Msg("evaluate.no-finding-recorded")
            return Msg("evaluate.not-applied", why=why)
        return None

    @property
    def expected_check(self) -> str | None:
        return self.item.expected_check if isinstance(self.item, Control) else None

    @property
    def caught(self) -> bool | None:
        """For a control: its check failed it (True) or not (False); None when it is no
        control or the drill did not run as planned (not proven either way: retest)."""
        name = self.expected_check
        if name is None or self.not_as_planned is not None:
            return None
        return any(
            f.check == name and f.verdict == Verdict.FAIL
            for e in self.evidence.values()
            for f in e.findings
        )

    def to_item(self) -> Item:
        """This item as report.json's typed entry (:class:`~faultdrill.report.model.Item`).
        RunDirError when its recorded events give a value the report cannot hold (a field
        the judge carries through as recorded, edited to another type)."""
        try:
            return self._item()
        except ValidationError as exc:
            events = rundir.events_dir(item_dir(Path(), self.kind, self.id))
            raise _unfit(events, self.id, exc) from exc

    def _item(self) -> Item:
        it = self.item
        sections: dict[str, Any] = {}
        if self.goodput is not None:
            sections["goodput"] = self.goodput
        if self.inventory is not None:
            sections["inventory"] = self.inventory
        sections["disruption"] = self.disruption
        if self.timeline is not None:
            net = network_report(self.timeline)
            if net.network is not None:
                sections["network"] = net.network
            if net.placement is not None:
                sections["placement"] = net.placement
        control: dict[str, Any] = {}
        if self.kind == "control":
            control = {
                "expected_check": self.expected_check,
                "caught": self.caught,
                "not_proven_why": self.not_as_planned if self.caught is None else None,
                "workload_mutation": dict(it.workload) if isinstance(it, Control) else {},
            }
        return Item(
            id=self.id,
            round=self.round,
            control=self.kind == "control",
            title=getattr(it, "title", "") or "",
            fault=_fault_ref(it),
            trigger=it.trigger.describe() if it is not None else None,
            preconditions=list(getattr(it, "preconditions", ()) or ()),
            expected=(
                Expected.model_validate(it.expected.model_dump(mode="json"))
                if isinstance(it, Scenario)
                else None
            ),
            verdict=self.verdict.value,
            aborted=self.aborted,
            recovery_class=self.recovery.value,
            recovery_class_why=self.recovery_why,
            outcome=self.outcome,
            operator_actions=plain(self.operator_actions),
            questions=self.answers.questions(),
            times=self.answers.times(),
            conditions=self.conditions,
            evidence=_evidence_set(self.evidence, with_expectation=False),
            expectation=_evidence(self.evidence["expectation"]),
            **sections,
            **control,
            conclusion=self.conclusion.to_record() if self.conclusion is not None else None,
            layer=self.layer.to_record() if self.layer is not None else None,
            dependencies=self.dependencies.to_json(),
            trend=self.trend.to_json(),
            scheduling=self.scheduling,
            failure=Failure.model_validate(plain(self.failure)) if self.failure else None,
            no_probe_events=self.no_probe_events,
            **({"field_messages": said} if (said := _field_messages(self, control)) else {}),
            log_evidence=plain(self.log_evidence) if self.log_evidence is not None else None,
        )


def _field_messages(result: ItemResult, control: dict[str, Any]) -> dict[str, Message]:
    """``field_messages`` of an item: the messages behind its English fields ({}: none)."""
    said = dict(result.said)
    if control.get("not_proven_why") is not None:
        why = result.said.get("aborted") or result.not_applied_message
        if why is not None:
            said["not_proven_why"] = why
    return {k: message_of(m) for k, m in said.items()}


def _fault_ref(it: Scenario | Control | None) -> FaultRef | None:
    if it is None:
        return None
    spec = it.fault.model_dump(mode="json")
    return FaultRef(kind=it.fault.kind, target=it.fault.target_label(), spec=spec)


def _evidence(ev: EvidenceResult) -> Evidence:
    return ev.to_record()


def _evidence_set(evidence: dict[str, EvidenceResult], *, with_expectation: bool) -> EvidenceSet:
    cats = [*EVIDENCE, "expectation"] if with_expectation else list(EVIDENCE)
    return EvidenceSet(**{c: _evidence(evidence[c]) for c in cats})


def _conditions(plan: Plan, tl: Timeline) -> Conditions:
    start = tl.first("harness", "item_start")
    env = start.get("environment") if start else None
    res = plan.resources
    return Conditions.model_validate(
        plain(
            {
                "platform": res.platform,
                "isolation": res.isolation,
                "nodes": res.nodes,
                "procs_per_node": res.procs_per_node,
                "world_sizes": sorted({i.world_size for i in tl.incarnations}),
                "max_restarts": res.max_restarts,
                "checkpoint_every_steps": plan.checkpoint.every_steps,
                "timeouts": res.timeouts.model_dump(),
                "sample_hz": plan.observation.sample_hz,
                "environment": env or environment_facts(),
                "note": "times are single observations under these conditions, not a service level",
            }
        )
    )


#: Which evidence the events of each source feed (a source not named here: all of it).
_FED_BY = {
    "sampler": ("resources",),
    "net": ("expectation",),
    "platform": ("resources", "expectation"),
    "fault": ("resources", "expectation"),
}


NO_PROBE_EVENTS = Msg("expectation.probe.none").text()


def _no_probe_events(
    tl: Timeline, evidence: dict[str, EvidenceResult], job_failed: bool
) -> Msg | None:
    """When no rank wrote a single probe event, nothing of progress, resources or results
    can be judged: say so (``expectation.probe``, retest), and let no failure stand that
    only says what is missing. Returns what was said, or None when there are events."""
    if len(tl.steps) or any(e.src == "probe" for e in tl.events):
        return None
    why = Msg("expectation.probe.job-failed" if job_failed else "expectation.probe.none")
    _not_judged(evidence, ("progress", "resources", "results"), why)
    evidence["expectation"].findings.append(Finding.of("expectation.probe", Verdict.RETEST, why))
    return why


def _not_judged(evidence: dict[str, EvidenceResult], cats: tuple[str, ...], why: Msg) -> None:
    """The failures in ``cats`` become retest: what they rest on is not trustworthy."""
    for cat in cats:
        ev = evidence[cat]
        ev.findings = [not_judged(f, why) if f.verdict == Verdict.FAIL else f for f in ev.findings]


def not_judged(f: Finding, why: Msg) -> Finding:
    """``f`` as a retest that says why it was not judged (its message kept, ``why`` added)."""
    text = f"{f.message} (not judged: {why.text()})"
    if f.message_id is None:
        return Finding(f.check, Verdict.RETEST, text, f.data)
    params = {**f.params, "not_judged": why.to_json()}
    return Finding(f.check, Verdict.RETEST, text, f.data, f.message_id, params)


def _integrity(
    tl: Timeline, evidence: dict[str, EvidenceResult], reference: Reference | None
) -> None:
    """Torn last lines (a writer killed mid-write) are expected and said. Any other line
    that is not an event makes the evidence its file feeds retest: a ``timeline.integrity``
    finding names the file and the count, and that evidence's failures are not judged
    (they may come from the lines that are missing). So does a damaged baseline
    (``reference``) for everything compared with it. The advice depends on who wrote the
    file: the job's probe (``probe-*``: a rerun writes it anew) or faultdrill itself (any
    other file: a rerun writes the same lines, so only the run's bundled copy can help)."""
    if reference is not None and reference.damaged:
        _not_judged(
            evidence,
            ("progress", "resources", "results"),
            Msg("timeline.integrity.baseline-damaged", files=list(reference.damaged)),
        )
    torn = tl.torn_lines - sum(n for n, _ in tl.bad_lines.values())
    if torn > 0:
        evidence["expectation"].findings.append(
            Finding.of("timeline.integrity", Verdict.PASS, Msg("timeline.integrity.torn", n=torn))
        )
    for name, (count, source) in sorted(tl.bad_lines.items()):
        cats = _FED_BY.get(source, ("progress", "resources", "results", "expectation"))
        why = Msg("timeline.integrity.bad-lines", n=count, file=name)
        _not_judged(evidence, cats, why)
        for cat in cats:
            evidence[cat].findings.append(
                Finding.of(
                    "timeline.integrity",
                    Verdict.RETEST,
                    Msg(
                        "timeline.integrity.incomplete"
                        if name.startswith("probe-")
                        else "timeline.integrity.incomplete.harness",
                        why=why,
                        category=cat,
                    ),
                    {"file": f"events/{name}", "lines": count, "source": source or None},
                )
            )


def _implausible(evidence: dict[str, EvidenceResult], reasons: list[Msg]) -> None:
    """Evidence outside physical bounds (:mod:`~faultdrill.judge.plausible`) makes every
    category retest, each reason said, and no failure judged on it."""
    cats = ("progress", "resources", "results", "expectation")
    for why in reasons:
        _not_judged(evidence, cats, why)
        for cat in cats:
            evidence[cat].findings.append(
                Finding.of(
                    "timeline.integrity",
                    Verdict.RETEST,
                    Msg("timeline.integrity.implausible", why=why, category=cat),
                )
            )


#: Expectations that cannot be judged when the scenario could not run as planned.
_OUTCOME_CHECKS = ("expectation.job-outcome", "expectation.restart", "expectation.recovery-class")


def stop_condition_fired(tl: Timeline) -> str | None:
    """Why the harness aborted the item (the first stop condition that fired), or None."""
    said = stop_condition_message(tl)
    return said.text() if said is not None else None


def stop_condition_message(tl: Timeline) -> Msg | None:
    """:func:`stop_condition_fired` as a message."""
    fired = tl.of("harness", "stop_condition")
    if not fired:
        return None
    e = fired[0]
    if e.get("detail"):
        return Msg(
            "evaluate.stop-condition.detail", condition=e.get("condition"), detail=e.get("detail")
        )
    return Msg("evaluate.stop-condition", condition=e.get("condition"))


def _fault_not_applied(evidence: dict[str, EvidenceResult]) -> Msg | str | None:
    """What ``expectation.fault-applied`` said when the planned fault was not applied (its
    trigger never reached, its injection failed), or None."""
    for f in evidence["expectation"].findings:
        if f.check == "expectation.fault-applied" and f.verdict != Verdict.PASS:
            return f.said
    return None


def _undetermined(
    tl: Timeline,
    evidence: dict[str, EvidenceResult],
    item: Scenario | Control | None,
    reference: Reference | None,
) -> Msg | None:
    """Why this drill cannot tell how the job recovered, or None when it can."""
    if item is not None:
        not_applied = _fault_not_applied(evidence)
        if not_applied is not None:
            return Msg("evaluate.undetermined.not-applied", why=not_applied)
    damaged = sorted(
        name
        for name, (_, source) in tl.bad_lines.items()
        if set(_FED_BY.get(source, ("progress",))) & {"progress", "resources", "results"}
    )
    if damaged:
        return Msg("evaluate.undetermined.damaged", files=damaged)
    if item is not None and reference is not None and reference.damaged:
        return Msg("evaluate.undetermined.baseline-damaged")
    return None


def _aborted_is_retest(
    tl: Timeline, evidence: dict[str, EvidenceResult], item: Scenario | Control | None
) -> None:
    """When a stop condition aborted the item, a spare it needed failed its environment
    preparation, or its fault was never applied, its outcome expectations become retest,
    not fail (the progress, resource and result evidence recorded keeps its verdict; the
    item's verdict is retest after a stop condition: :attr:`ItemResult.verdict`)."""
    fired = tl.of("harness", "stop_condition")
    unprepared = [
        e
        for e in tl.of("platform", "spare_rejected")
        if e.get("category") == "environment-preparation"
    ]
    not_applied = _fault_not_applied(evidence) if item is not None else None
    if fired:
        why = Msg("evaluate.not-judged.stop-condition", condition=fired[0].get("condition"))
    elif unprepared:
        why = Msg("evaluate.not-judged.spare-unprepared", node=unprepared[0].get("node"))
    elif not_applied is not None:
        why = Msg("evaluate.not-judged.not-applied")
    else:
        return
    ev = evidence["expectation"]
    ev.findings = [
        not_judged(f, why) if f.check in _OUTCOME_CHECKS and f.verdict == Verdict.FAIL else f
        for f in ev.findings
    ]


def _class_as_expected(
    item: Scenario, cls: RecoveryClass, why: Msg, unobservable_only: bool = False
) -> Finding:
    """``expectation.recovery-class``: the class against the plan's expected one. A class
    worse than expected only because of what the platform cannot observe
    (``unobservable_only``) is retest: whether it is the expected one is unknown."""
    name, want = "expectation.recovery-class", item.expected.recovery
    params = {"cls": cls.value, "expected": want.value}
    if cls == RecoveryClass.NOT_DETERMINED:
        return Finding.of(name, Verdict.RETEST, Msg(f"{name}.not-determined", **params, why=why))
    if cls == want:
        return Finding.of(name, Verdict.PASS, Msg(f"{name}.as-expected", **params))
    if _CLASS_ORDER.index(cls) > _CLASS_ORDER.index(want) and unobservable_only:
        return Finding.of(name, Verdict.RETEST, Msg(f"{name}.unobservable", **params))
    if _CLASS_ORDER.index(cls) > _CLASS_ORDER.index(want):
        return Finding.of(name, Verdict.FAIL, Msg(f"{name}.worse", **params, why=why))
    return Finding.of(name, Verdict.RETEST, Msg(f"{name}.better", **params))


def evaluate_item(
    plan: Plan,
    kind: str,
    item: Scenario | Control | None,
    work: Path,
    reference: Reference | None,
    baseline_verdict: Verdict | None = None,
    timeline: Timeline | None = None,
) -> ItemResult:
    """Judge one recorded item (``timeline``: its events, if already loaded). RunDirError
    when its recorded events give a value the report cannot hold."""
    if not rundir.events_dir(work).is_dir():
        raise RunDirError(f"{work}: no events/ directory; was this item run?")
    tl = timeline if timeline is not None else Timeline.load(rundir.events_dir(work))
    try:
        return _judge_item(plan, kind, item, tl, reference, baseline_verdict)
    except ValidationError as exc:
        item_id = "baseline" if item is None else item.id
        raise _unfit(rundir.events_dir(work), item_id, exc) from exc


def _unfit(events: Path, item_id: str, exc: ValidationError) -> RunDirError:
    """The error for events that give a report field a value it cannot hold."""
    first = exc.errors()[0]
    where = ".".join(str(x) for x in first["loc"])
    return RunDirError(
        f"{events}: the events of item {item_id} give {where} a value report.json "
        f"cannot hold ({first['msg']}); they were edited or damaged: restore them "
        "from the run's bundle, or run the drill again"
    )


def _judge_item(
    plan: Plan,
    kind: str,
    item: Scenario | Control | None,
    tl: Timeline,
    reference: Reference | None,
    baseline_verdict: Verdict | None,
) -> ItemResult:
    """:func:`evaluate_item` on the loaded timeline."""
    ctx = CheckContext(timeline=tl, plan=plan, item=item, reference=reference)
    plugins.load()
    evidence = run_checks(ctx)
    if plan.logs is not None:
        not_observable(plan.logs, evidence)
    item_id = "baseline" if item is None else item.id
    failed = tl.first("harness", "job_failed")
    no_probe = _no_probe_events(tl, evidence, failed is not None)
    _integrity(tl, evidence, reference if kind != "baseline" else None)
    odd = implausible(tl, plan)
    _implausible(evidence, odd)
    if kind != "baseline" and baseline_verdict is not None and baseline_verdict != Verdict.PASS:
        evidence["expectation"].findings.append(
            Finding.of(
                "expectation.baseline",
                Verdict.RETEST,
                Msg("expectation.baseline.not-passed", verdict=baseline_verdict.value),
            )
        )
    states = [e.get("state") for e in tl.of("platform", "job_state")]
    outcome = next((s for s in reversed(states) if s in ("succeeded", "failed", "stopped")), None)
    actions = [e.fields for e in tl.of("harness", "operator_action")]
    confirm = bool(getattr(getattr(item, "recovery", None), "confirm", False))
    aborted = stop_condition_message(tl)
    undetermined = _undetermined(tl, evidence, item, reference)
    if odd and undetermined is None:
        undetermined = Msg("evaluate.undetermined.implausible", why=odd[0])
    if no_probe is not None:
        undetermined = no_probe
    cls, why = class_and_why(evidence, outcome, len(actions), confirm, aborted, undetermined)
    if isinstance(item, Scenario):
        evidence["expectation"].findings.append(
            _class_as_expected(item, cls, why, _unobservable_only(evidence, cls, confirm))
        )
    _aborted_is_retest(tl, evidence, item)
    signed = _what_a_buyer_signs(ctx, evidence)
    result = ItemResult(
        id=item_id,
        kind=kind,
        round=plan.round_of(item_id) if kind == "scenario" else 0,
        item=item,
        evidence=evidence,
        answers=answer_questions(tl),
        outcome=outcome,
        operator_actions=actions,
        recovery=cls,
        recovery_why=why.text(),
        conditions=_conditions(plan, tl),
        timeline=tl,
        goodput=account(tl, checkpoint_every=plan.checkpoint.every_steps),
        inventory=inventory_summary(tl),
        disruption=describe_disruption(tl, gloo_s=plan.resources.timeouts.gloo_s),
        aborted=aborted.text() if aborted is not None else None,
        conclusion=signed.conclusion,
        dependencies=signed.dependencies,
        trend=signed.trend,
        scheduling=signed.scheduling,
        failure=dict(failed.fields) if failed is not None else None,
        no_probe_events=no_probe is not None,
        said={"recovery_class_why": why, **({"aborted": aborted} if aborted is not None else {})},
        log_evidence=(
            None if plan.logs is None else log_evidence(plan.logs, tl, evidence).to_json()
        ),
    )
    if result.verdict != Verdict.PASS:
        result.layer = failing_layer(tl, evidence, item)
    return result


class _Signed(NamedTuple):
    """What a buyer signs of one item, but its failing layer."""

    conclusion: Conclusion
    dependencies: Dependencies
    trend: Trend
    scheduling: list[IncarnationPlacement]


def _what_a_buyer_signs(ctx: CheckContext, evidence: dict[str, EvidenceResult]) -> _Signed:
    """The conclusion level, dependencies, trend after recovery and placement of one item
    (the failing layer needs its final verdict: :func:`evaluate_item` adds it)."""
    tl, plan = ctx.timeline, ctx.plan
    return _Signed(
        # what the job's log lines cannot show is no evidence: no level rests on it
        conclusion=conclude(tl, as_reached(evidence)),
        dependencies=recovery_dependencies(tl, plan, ctx.item),
        trend=trend_after_recovery(
            tl,
            ctx.reference,
            plan.tolerance,
            window_steps=plan.observation.post_steps,
            bitwise=comparison_mode(ctx)[0] == "bitwise",
        ),
        scheduling=scheduling_result(tl),
    )


@dataclass
class RunResult:
    plan: Plan
    run_dir: Path
    baseline: ItemResult | None
    reference: Reference | None
    items: list[ItemResult]
    skipped: list[dict[str, str]]
    #: ``--no-controls`` was said: a run without any control may still be OK.
    controls_waived: bool = False

    @property
    def scenarios(self) -> list[ItemResult]:
        return [i for i in self.items if i.kind == "scenario"]

    @property
    def controls(self) -> list[ItemResult]:
        return [i for i in self.items if i.kind == "control"]

    @property
    def ok(self) -> bool:
        """Something was drilled, every scenario passed, every control was caught (with its
        fault applied and no stop condition), nothing skipped, baseline passed; and at
        least one control ran, unless ``--no-controls`` waived them: without one, nothing
        showed that the checks can fail on this workload."""
        return (
            bool(self.scenarios or self.controls)
            and (bool(self.controls) or self.controls_waived)
            and self.baseline is not None
            and self.baseline.verdict == Verdict.PASS
            and all(s.verdict == Verdict.PASS for s in self.scenarios)
            and all(c.caught for c in self.controls)
            and not self.skipped
        )

    def to_report(self) -> Report:
        """The run as report.json's typed content (:class:`~faultdrill.report.model.Report`).
        RunDirError when recorded data give a value the report cannot hold."""
        try:
            return self._report()
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            raise RunDirError(
                f"{self.run_dir}: its recorded files give {where} a value report.json cannot "
                f"hold ({first['msg']}); they were edited or damaged: restore them from the "
                "run's bundle, or run the drill again"
            ) from exc

    def _report(self) -> Report:
        base = self.baseline
        ref = self.reference
        dossier = _recorded_dossier(self.run_dir)
        return Report(
            faultdrill_version=__version__,
            task_id=self.plan.task.id,
            plan_digest=self.plan.digest(),
            plan=RecordedPlan.model_validate(self.plan.model_dump(mode="json")),
            baseline=Baseline(
                run_id="baseline",
                steps=ref.last_step if ref else None,
                final_model_digest=ref.final_digest if ref else None,
                world_size=ref.world_size if ref else None,
                verdict=base.verdict.value if base else "retest",
                evidence=_evidence_set(base.evidence, with_expectation=True) if base else None,
                dossier=dossier,
                failure=Failure.model_validate(plain(base.failure))
                if base is not None and base.failure
                else None,
                no_probe_events=base.no_probe_events if base is not None else False,
                log_evidence=plain(base.log_evidence)
                if base is not None and base.log_evidence
                else None,
            ),
            scenarios=[i.to_item() for i in self.items],
            recovery_dependencies=dependency_totals(
                self.plan, [(s.id, s.dependencies) for s in self.scenarios]
            ).to_json(),
            skipped=[Skipped.model_validate(s) for s in self.skipped],
            summary=Summary(
                scenarios=len(self.scenarios),
                passed=sum(s.verdict == Verdict.PASS for s in self.scenarios),
                failed=sum(s.verdict == Verdict.FAIL for s in self.scenarios),
                retest=sum(s.verdict == Verdict.RETEST for s in self.scenarios),
                controls=len(self.controls),
                controls_caught=sum(bool(c.caught) for c in self.controls),
                controls_waived=self.controls_waived,
                controls_note=None
                if self.controls
                else "no negative control ran: the checks were not shown to catch a defect "
                "in this workload"
                + (" (waived with --no-controls)" if self.controls_waived else ""),
                ok=self.ok,
            ),
        )


def _recorded_dossier(run_dir: Path) -> Dossier | None:
    """The baseline's dossier as recorded (None: none was); RunDirError when it is not
    one (a link, not JSON, not of the dossier's shape)."""
    path = rundir.dossier_path(run_dir)
    raw = run_json(run_dir, path)
    if raw is None:
        return None
    try:
        return Dossier.model_validate(plain(raw))
    except ValidationError as exc:
        raise RunDirError(
            f"{path}: not a dossier ({exc.error_count()} problem(s), first: "
            f"{exc.errors()[0]['msg']}); restore it from the run's bundle"
        ) from exc


def load_run_plan(run_dir: Path) -> Plan:
    path = run_dir / "plan.json"
    if not os.path.lexists(path):
        raise RunDirError(f"{run_dir}: not a faultdrill run directory (no plan.json)")
    try:
        raw = run_json(run_dir, path)
    except RunDirError as exc:
        raise RunDirError(
            f"the run's copy of its plan is unreadable: {exc}; or re-run the drill"
        ) from exc
    return parse_plan(raw, source=str(path))


def evaluate_run(run_dir: Path, plan: Plan | None = None) -> RunResult:
    """Judge every item recorded under ``run_dir`` (items never run are listed as skipped)."""
    plan = plan or load_run_plan(run_dir)
    base_dir = item_dir(run_dir, "baseline", "baseline")
    baseline = reference = None
    refuse_outside(run_dir, base_dir)
    if rundir.events_dir(base_dir).is_dir():
        tl = Timeline.load(rundir.events_dir(base_dir))
        reference = Reference.from_timeline(tl)
        baseline = evaluate_item(plan, "baseline", None, base_dir, reference, timeline=tl)
    bverdict = baseline.verdict if baseline else None
    items, skipped = [], []
    notes = _skip_notes(run_dir)
    selected = _selection(run_dir)
    for kind, entries in (("scenario", plan.scenarios()), ("control", list(plan.controls))):
        for it in entries:
            work = item_dir(run_dir, kind, it.id)
            if selected is not None and it.id not in selected:
                continue  # left out on purpose (--only / --no-controls), not a gap
            refuse_outside(run_dir, work)
            if rundir.events_dir(work).is_dir():
                items.append(evaluate_item(plan, kind, it, work, reference, bverdict))
            else:
                skipped.append({"id": it.id, "kind": kind, "reason": notes.get(it.id, "not run")})
    waived = _controls_waived(run_dir)
    return RunResult(plan, run_dir, baseline, reference, items, skipped, waived)


def _selection(run_dir: Path) -> set[str] | None:
    """Ids the run set out to drill (None: the whole plan)."""
    raw = run_json(run_dir, run_dir / "selection.json")
    if raw is None:
        return None
    ids = raw.get("selected") if isinstance(raw, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise RunDirError(f"{run_dir / 'selection.json'}: no list of ids under 'selected'")
    return set(ids)


def _controls_waived(run_dir: Path) -> bool:
    """Whether the run was told ``--no-controls`` (recorded in ``selection.json``)."""
    raw = run_json(run_dir, run_dir / "selection.json")
    return isinstance(raw, dict) and bool(raw.get("no_controls"))


def _skip_notes(run_dir: Path) -> dict[str, str]:
    raw = run_json(run_dir, run_dir / "skipped.json")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RunDirError(f"{run_dir / 'skipped.json'}: not a mapping of id -> reason")
    return {str(k): str(v) for k, v in raw.items()}
