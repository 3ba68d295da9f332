"""Judging a recorded run: timeline -> checks -> verdicts, recovery classes, report data.

Pure with respect to the machine: it reads a run directory and writes nothing, so the
same directory can be judged again later (``faultdrill check``), by someone else, or after
a change to the checks. The JSON it produces is the machine contract of ``report.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultdrill import __version__
from faultdrill.checks import CheckContext, EvidenceResult, Finding, Verdict, combine, run_checks
from faultdrill.checks.network import network_report
from faultdrill.engine.item import environment_facts, item_dir
from faultdrill.errors import RunDirError
from faultdrill.judge.analysis import Answers, answer_questions
from faultdrill.judge.disruption import describe_disruption
from faultdrill.judge.goodput import account
from faultdrill.judge.inventory import inventory_summary
from faultdrill.judge.reference import Reference
from faultdrill.plan import Control, Plan, RecoveryClass, Scenario, parse_plan
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
    aborted: str | None = None,
) -> tuple[RecoveryClass, str]:
    """How the job came back, and why that class.

    ``aborted``: why the harness aborted the drill (a stop condition). The job then did
    not recover within the plan's stop conditions, which is all that can be said of it:
    unrecoverable *within those limits*, and the why names the condition."""
    if aborted is not None:
        return (
            RecoveryClass.UNRECOVERABLE,
            f"not determined within the stop conditions: {aborted}; the job had not "
            "recovered when the drill was aborted",
        )
    if outcome != "succeeded":
        return RecoveryClass.UNRECOVERABLE, f"the job ended {outcome or 'without an end state'}"
    for cat in ("progress", "results"):
        if evidence[cat].verdict == Verdict.FAIL:
            return (
                RecoveryClass.UNRECOVERABLE,
                f"the job ran again but its {cat} evidence failed: it did not continue "
                "from valid progress with valid results",
            )
    if operator_actions:
        return (
            RecoveryClass.MANUAL_RESTART,
            "the job continued only after an operator resubmitted it",
        )
    if evidence["resources"].verdict == Verdict.FAIL:
        return (
            RecoveryClass.MANUAL_CONFIRMATION,
            "the job recovered, but stale replicas or leftovers need an operator",
        )
    if confirm_required:
        return RecoveryClass.MANUAL_CONFIRMATION, "the plan requires a human to confirm recovery"
    if any(evidence[c].verdict == Verdict.RETEST for c in ("progress", "resources", "results")):
        return (
            RecoveryClass.MANUAL_CONFIRMATION,
            "the job recovered by itself, but part of the evidence is unexplained",
        )
    return RecoveryClass.AUTOMATIC, "the platform recovered the job by itself from valid progress"


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
    conditions: dict[str, Any]
    timeline: Timeline | None = field(default=None, repr=False)
    #: Round-3 accounting (``faultdrill.judge.goodput``, ``inventory``, ``disruption``).
    goodput: dict[str, Any] = field(default_factory=dict)
    inventory: dict[str, Any] = field(default_factory=dict)
    disruption: dict[str, Any] | None = None
    #: Why the harness aborted the item (a stop condition fired), or None.
    aborted: str | None = None

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
        if self.item is None:
            return None
        applied = [
            f
            for f in self.evidence["expectation"].findings
            if f.check == "expectation.fault-applied"
        ]
        if not applied or any(f.verdict != Verdict.PASS for f in applied):
            why = applied[0].message if applied else "no finding recorded"
            return f"the fault was not applied as planned: {why}"
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

    def to_json(self) -> dict[str, Any]:
        it = self.item
        fault = (
            {
                "kind": it.fault.kind,
                "target": it.fault.target_label(),
                "spec": it.fault.model_dump(mode="json"),
            }
            if it is not None
            else None
        )
        out: dict[str, Any] = {
            "id": self.id,
            "round": self.round,
            "control": self.kind == "control",
            "title": getattr(it, "title", "") or "",
            "fault": fault,
            "trigger": it.trigger.describe() if it is not None else None,
            "preconditions": list(getattr(it, "preconditions", ()) or ()),
            "expected": (it.expected.model_dump(mode="json") if isinstance(it, Scenario) else None),
            "verdict": self.verdict.value,
            "aborted": self.aborted,
            "recovery_class": self.recovery.value,
            "recovery_class_why": self.recovery_why,
            "outcome": self.outcome,
            "operator_actions": self.operator_actions,
            "questions": self.answers.questions_json(),
            "times": self.answers.times_json(),
            "conditions": self.conditions,
            "evidence": {
                k: v.to_json()
                for k, v in self.evidence.items()
                if k in ("progress", "resources", "results")
            },
            "expectation": self.evidence["expectation"].to_json(),
            "goodput": self.goodput,
            "inventory": self.inventory,
            "disruption": self.disruption,
        }
        if self.timeline is not None:
            out.update(network_report(self.timeline))
        if self.kind == "control":
            out["expected_check"] = self.expected_check
            out["caught"] = self.caught
            out["not_proven_why"] = self.not_as_planned if self.caught is None else None
            out["workload_mutation"] = dict(it.workload) if isinstance(it, Control) else {}
        return out


def _conditions(plan: Plan, tl: Timeline) -> dict[str, Any]:
    start = tl.first("harness", "item_start")
    env = start.get("environment") if start else None
    res = plan.resources
    return {
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


#: Expectations that cannot be judged when the scenario could not run as planned.
_OUTCOME_CHECKS = ("expectation.job-outcome", "expectation.restart", "expectation.recovery-class")


def stop_condition_fired(tl: Timeline) -> str | None:
    """Why the harness aborted the item (the first stop condition that fired), or None."""
    fired = tl.of("harness", "stop_condition")
    if not fired:
        return None
    e = fired[0]
    detail = f" ({e.get('detail')})" if e.get("detail") else ""
    return f"stop condition '{e.get('condition')}' fired{detail}"


def _aborted_is_retest(tl: Timeline, evidence: dict[str, EvidenceResult]) -> None:
    """When a stop condition aborted the item, or a spare it needed failed its environment
    preparation, its outcome expectations become retest, not fail (the progress, resource
    and result evidence recorded keeps its verdict; the item's verdict is retest after a
    stop condition: :attr:`ItemResult.verdict`)."""
    fired = tl.of("harness", "stop_condition")
    unprepared = [
        e
        for e in tl.of("platform", "spare_rejected")
        if e.get("category") == "environment-preparation"
    ]
    if fired:
        why = f"stop condition '{fired[0].get('condition')}' aborted the scenario"
    elif unprepared:
        why = f"spare {unprepared[0].get('node')} failed its environment preparation"
    else:
        return
    ev = evidence["expectation"]
    ev.findings = [
        Finding(f.check, Verdict.RETEST, f"{f.message} (not judged: {why})", f.data)
        if f.check in _OUTCOME_CHECKS and f.verdict == Verdict.FAIL
        else f
        for f in ev.findings
    ]


def evaluate_item(
    plan: Plan,
    kind: str,
    item: Scenario | Control | None,
    work: Path,
    reference: Reference | None,
    baseline_verdict: Verdict | None = None,
    timeline: Timeline | None = None,
) -> ItemResult:
    """Judge one recorded item (``timeline``: its events, if already loaded)."""
    if not (work / "events").is_dir():
        raise RunDirError(f"{work}: no events/ directory; was this item run?")
    tl = timeline if timeline is not None else Timeline.load(work / "events")
    ctx = CheckContext(timeline=tl, plan=plan, item=item, reference=reference)
    evidence = run_checks(ctx)
    item_id = "baseline" if item is None else item.id
    if tl.torn_lines:
        evidence["expectation"].findings.append(
            Finding(
                "timeline.integrity",
                Verdict.PASS,
                f"{tl.torn_lines} torn or unreadable event line(s) "
                "skipped (a process was killed mid-write)",
            )
        )
    if kind != "baseline" and baseline_verdict is not None and baseline_verdict != Verdict.PASS:
        evidence["expectation"].findings.append(
            Finding(
                "expectation.baseline",
                Verdict.RETEST,
                f"the baseline itself did not pass its checks ({baseline_verdict.value}); "
                "comparisons with it prove nothing",
            )
        )
    states = [e.get("state") for e in tl.of("platform", "job_state")]
    outcome = next((s for s in reversed(states) if s in ("succeeded", "failed", "stopped")), None)
    actions = [e.fields for e in tl.of("harness", "operator_action")]
    confirm = bool(getattr(getattr(item, "recovery", None), "confirm", False))
    aborted = stop_condition_fired(tl)
    cls, why = recovery_class(evidence, outcome, len(actions), confirm, aborted)
    if isinstance(item, Scenario):
        want = item.expected.recovery
        if cls == want:
            f = Finding(
                "expectation.recovery-class",
                Verdict.PASS,
                f"recovery class {cls.value}, as expected",
            )
        elif _CLASS_ORDER.index(cls) > _CLASS_ORDER.index(want) and _unobservable_only(
            evidence, cls, confirm
        ):
            f = Finding(
                "expectation.recovery-class",
                Verdict.RETEST,
                f"recovery class {cls.value} only because what the platform cannot observe "
                f"was not judged: whether it is the expected {want.value} is unknown",
            )
        elif _CLASS_ORDER.index(cls) > _CLASS_ORDER.index(want):
            f = Finding(
                "expectation.recovery-class",
                Verdict.FAIL,
                f"recovery class {cls.value}, worse than the expected {want.value}: {why}",
            )
        else:
            f = Finding(
                "expectation.recovery-class",
                Verdict.RETEST,
                f"recovery class {cls.value}, better than the expected {want.value}: "
                "explain or correct the plan's expectation",
            )
        evidence["expectation"].findings.append(f)
    _aborted_is_retest(tl, evidence)
    return ItemResult(
        id=item_id,
        kind=kind,
        round=plan.round_of(item_id) if kind == "scenario" else 0,
        item=item,
        evidence=evidence,
        answers=answer_questions(tl),
        outcome=outcome,
        operator_actions=actions,
        recovery=cls,
        recovery_why=why,
        conditions=_conditions(plan, tl),
        timeline=tl,
        goodput=account(tl, checkpoint_every=plan.checkpoint.every_steps),
        inventory=inventory_summary(tl),
        disruption=describe_disruption(tl, gloo_s=plan.resources.timeouts.gloo_s),
        aborted=aborted,
    )


@dataclass
class RunResult:
    plan: Plan
    run_dir: Path
    baseline: ItemResult | None
    reference: Reference | None
    items: list[ItemResult]
    skipped: list[dict[str, str]]

    @property
    def scenarios(self) -> list[ItemResult]:
        return [i for i in self.items if i.kind == "scenario"]

    @property
    def controls(self) -> list[ItemResult]:
        return [i for i in self.items if i.kind == "control"]

    @property
    def ok(self) -> bool:
        """Something was drilled, every scenario passed, every control was caught (with its
        fault applied and no stop condition), nothing skipped, baseline passed."""
        return (
            bool(self.scenarios or self.controls)
            and self.baseline is not None
            and self.baseline.verdict == Verdict.PASS
            and all(s.verdict == Verdict.PASS for s in self.scenarios)
            and all(c.caught for c in self.controls)
            and not self.skipped
        )

    def to_json(self) -> dict[str, Any]:
        base = self.baseline
        ref = self.reference
        dossier_path = self.run_dir / "baseline" / "dossier.json"
        dossier = json.loads(dossier_path.read_text()) if dossier_path.exists() else None
        return {
            "faultdrill_version": __version__,
            "task_id": self.plan.task.id,
            "plan_digest": self.plan.digest(),
            "plan": self.plan.model_dump(mode="json"),
            "baseline": {
                "run_id": "baseline",
                "steps": ref.last_step if ref else None,
                "final_model_digest": ref.final_digest if ref else None,
                "world_size": ref.world_size if ref else None,
                "verdict": base.verdict.value if base else "retest",
                "evidence": {k: v.to_json() for k, v in base.evidence.items()} if base else None,
                "dossier": dossier,
            },
            "scenarios": [i.to_json() for i in self.items],
            "skipped": self.skipped,
            "summary": {
                "scenarios": len(self.scenarios),
                "passed": sum(s.verdict == Verdict.PASS for s in self.scenarios),
                "failed": sum(s.verdict == Verdict.FAIL for s in self.scenarios),
                "retest": sum(s.verdict == Verdict.RETEST for s in self.scenarios),
                "controls": len(self.controls),
                "controls_caught": sum(bool(c.caught) for c in self.controls),
                "ok": self.ok,
            },
        }


def load_run_plan(run_dir: Path) -> Plan:
    path = run_dir / "plan.json"
    if not path.exists():
        raise RunDirError(f"{run_dir}: not a faultdrill run directory (no plan.json)")
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or not UTF-8
        raise RunDirError(
            f"{path}: the run's copy of its plan is unreadable ({exc}); restore it from the "
            "run's bundle, or re-run the drill"
        ) from exc
    return parse_plan(raw, source=str(path))


def evaluate_run(run_dir: Path, plan: Plan | None = None) -> RunResult:
    """Judge every item recorded under ``run_dir`` (items never run are listed as skipped)."""
    plan = plan or load_run_plan(run_dir)
    base_dir = item_dir(run_dir, "baseline", "baseline")
    baseline = reference = None
    if (base_dir / "events").is_dir():
        tl = Timeline.load(base_dir / "events")
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
            if (work / "events").is_dir():
                items.append(evaluate_item(plan, kind, it, work, reference, bverdict))
            else:
                skipped.append({"id": it.id, "kind": kind, "reason": notes.get(it.id, "not run")})
    return RunResult(plan, run_dir, baseline, reference, items, skipped)


def _selection(run_dir: Path) -> set[str] | None:
    """Ids the run set out to drill (None: the whole plan)."""
    path = run_dir / "selection.json"
    return set(json.loads(path.read_text())["selected"]) if path.exists() else None


def _skip_notes(run_dir: Path) -> dict[str, str]:
    path = run_dir / "skipped.json"
    return json.loads(path.read_text()) if path.exists() else {}
