"""report.json as typed data: the machine contract of a judged run (schema version 1).

This module is the one definition of ``report.json``. :func:`~faultdrill.judge.evaluate`
builds a :class:`Report`, :func:`write_report` writes it, :func:`read_report` and
:meth:`Report.from_json` read it back, and :func:`report_schema` publishes its JSON Schema
(``faultdrill schema --report``). Every renderer (html, markdown, runbook, diff, replay,
junit, bundle, serve) reads a :class:`Report`, never the raw JSON.

Shape (top level; each part is a class below)::

    Report
    ├── schema_version        1 (a report without one is read as version 1 if it fits)
    ├── faultdrill_version, task_id, plan_digest
    ├── plan: RecordedPlan    the validated plan as recorded (the parts reports read)
    ├── baseline: Baseline    steps, final model digest, verdict, evidence, dossier
    ├── scenarios: [Item]     every scenario and control drilled, in plan order
    │     verdict, recovery_class, questions (the four answers), times, conditions,
    │     evidence {progress, resources, results}, expectation, goodput, inventory,
    │     disruption, network, placement, and for a control: expected_check, caught
    ├── skipped: [Skipped]    items of the plan that were not drilled, and why
    └── summary: Summary      counts and the overall ok

Contracts:

* **Missing is decided here, once.** A field that a report may lack has its default in
  this module (``None`` means "not recorded"); a field every report of this version has
  is required, and a report without it is refused, naming the field.
* **Nothing recorded is lost.** Keys this version does not define (written by a newer
  part) are kept on the record that holds them (:attr:`Record.extra`) and shown by the
  renderers as they are; a record written back (:meth:`Record.to_json`) has the keys it
  was read with, in their order, and no key it did not have.
* **Versions.** A report of a newer or unknown ``schema_version`` is refused with a message
  naming the version and what to do. Adding an optional field keeps the version; anything
  that changes the meaning of an existing field raises it.
* Values echoed from a training script's own events (checkpoint ids, data positions,
  ranks) are kept as the JSON they were (:data:`JsonValue`); values the harness computes
  (verdicts, classes, times, counts) are typed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import (
    JsonValue,
    ValidationError,
)

from faultdrill import __version__, boundedjson, rundir
from faultdrill.errors import RunDirError
from faultdrill.records import (
    EVIDENCE,
    AccessIdentity,
    ActionTotals,
    AfterReturn,
    CheckpointRecord,
    CheckpointStorageUse,
    ClassName,
    Clue,
    Conclusion,
    Conditions,
    DedicatedNetwork,
    Dependencies,
    DependencyOwner,
    DependencyTotals,
    Disruption,
    Ending,
    Environment,
    EventRef,
    Evidence,
    EvidenceSet,
    Expected,
    FailedSave,
    FailingLayer,
    Failure,
    FaultRef,
    FaultWindow,
    Finding,
    Goodput,
    IncarnationPlacement,
    Inventory,
    LayerName,
    LevelName,
    LevelProof,
    Message,
    NetNode,
    NetRule,
    NetWindow,
    NetworkTrack,
    NodeLoss,
    Num,
    OperatorAction,
    OperatorStep,
    OperatorUse,
    Placement,
    PlatformMoment,
    Pointer,
    PointerObservation,
    Questions,
    RankPlace,
    Record,
    Refusal,
    RejectedSpareUse,
    ReportedArtifact,
    RestartBudget,
    RestartInWindow,
    RestartTotals,
    ResumePoint,
    SeriesTrend,
    SparePlaced,
    SpareRejected,
    SpareTotals,
    SpareUse,
    StorageTotals,
    Times,
    Trend,
    TrendMessages,
    TrendWindow,
    VerdictName,
    VerifiedArtifact,
    When,
    WrittenBy,
    message_of,
    plain,
)
from faultdrill.safepath import read_bytes, read_named, write_file

__all__ = [
    "EVIDENCE",
    "SCHEMA_VERSION",
    "AccessIdentity",
    "ActionTotals",
    "AfterReturn",
    "Baseline",
    "CheckpointRecord",
    "CheckpointStorageUse",
    "ClassName",
    "Clue",
    "Conclusion",
    "Conditions",
    "DedicatedNetwork",
    "Dependencies",
    "DependencyOwner",
    "DependencyTotals",
    "Disruption",
    "Dossier",
    "Ending",
    "Environment",
    "EventRef",
    "Evidence",
    "EvidenceSet",
    "Expected",
    "FailedSave",
    "FailingLayer",
    "Failure",
    "FaultRef",
    "FaultWindow",
    "Finding",
    "Goodput",
    "IncarnationPlacement",
    "Inventory",
    "Item",
    "LayerName",
    "LevelName",
    "LevelProof",
    "Message",
    "NetNode",
    "NetRule",
    "NetWindow",
    "NetworkTrack",
    "NodeLoss",
    "Num",
    "OperatorAction",
    "OperatorStep",
    "OperatorUse",
    "Placement",
    "PlatformMoment",
    "Pointer",
    "PointerObservation",
    "Questions",
    "RankPlace",
    "Record",
    "RecordedPlan",
    "Refusal",
    "RejectedSpareUse",
    "Report",
    "ReportedArtifact",
    "RestartBudget",
    "RestartInWindow",
    "RestartTotals",
    "ResumePoint",
    "SeriesTrend",
    "Skipped",
    "SparePlaced",
    "SpareRejected",
    "SpareTotals",
    "SpareUse",
    "StorageTotals",
    "Summary",
    "Times",
    "Trend",
    "TrendMessages",
    "TrendWindow",
    "VerdictName",
    "VerifiedArtifact",
    "When",
    "WrittenBy",
    "message_of",
    "plain",
    "read_report",
    "report_schema",
    "write_report",
]

#: The schema version this faultdrill writes and reads.
SCHEMA_VERSION = 1

# --- the plan as recorded ---------------------------------------------------------------


class PlanEntrypoint(Record):
    module: str | None = None
    script: str | None = None
    args: list[str] = []


class PlanTask(Record):
    id: str
    config_version: str = ""
    code_id: str = ""
    entrypoint: PlanEntrypoint = PlanEntrypoint()
    env: dict[str, str] = {}


class PlanData(Record):
    snapshot: str = ""
    digest: str = ""
    read_position: JsonValue = 0


class PlanResources(Record):
    platform: str = "local"
    isolation: str = "none"
    nodes: int = 2
    procs_per_node: int = 1
    spares: int = 0
    max_restarts: int = 3
    devices: str = "cpu"


class PlanCheckpoint(Record):
    dir: str = "ckpt"
    every_steps: int = 10
    keep: int = 3
    latest_file: str = "latest"


class Responsibility(Record):
    injector: str
    observer: str
    recovery_operator: str
    signer: str


class PlanStop(Record):
    """Stop conditions; in a scenario, its overrides (``None``: the plan's)."""

    max_wall_s: Num | None = None
    max_no_progress_s: Num | None = None
    stop_on_nonfinite_loss: bool | None = None

    def over(self, base: PlanStop) -> PlanStop:
        """These overrides applied over ``base``."""
        return PlanStop(
            max_wall_s=base.max_wall_s if self.max_wall_s is None else self.max_wall_s,
            max_no_progress_s=(
                base.max_no_progress_s if self.max_no_progress_s is None else self.max_no_progress_s
            ),
            stop_on_nonfinite_loss=(
                base.stop_on_nonfinite_loss
                if self.stop_on_nonfinite_loss is None
                else self.stop_on_nonfinite_loss
            ),
        )


class PlanRecovery(Record):
    action: str = "none"
    confirm: bool = False
    runbook: str = ""


class PlanItem(Record):
    """A scenario or control of the plan (the fields reports use; the rest kept)."""

    id: str
    env: dict[str, str] = {}
    recovery: PlanRecovery = PlanRecovery()
    stop: PlanStop = PlanStop()


class PlanRound(Record):
    round: int
    scenarios: list[PlanItem] = []


class RecordedPlan(Record):
    """The plan the run was drilled with, as ``Plan.model_dump(mode="json")`` wrote it.

    Not validated again as a :class:`~faultdrill.plan.Plan` (a report is a record, readable
    without the drill machinery); the fields named here are those reports read."""

    task: PlanTask
    data: PlanData = PlanData()
    resources: PlanResources = PlanResources()
    checkpoint: PlanCheckpoint = PlanCheckpoint()
    seeds: dict[str, JsonValue] = {}
    responsibility: Responsibility
    stop: PlanStop = PlanStop()
    rounds: list[PlanRound] = []
    controls: list[PlanItem] = []

    def item(self, item_id: str) -> PlanItem | None:
        """The scenario or control ``item_id`` of the plan."""
        scenarios = [s for r in self.rounds for s in r.scenarios]
        return next((s for s in [*scenarios, *self.controls] if s.id == item_id), None)

    def scenario_ids(self) -> list[str]:
        return [s.id for r in self.rounds for s in r.scenarios]


class Item(Record):
    """One drilled scenario or control (``control`` says which)."""

    id: str
    round: int
    control: bool
    title: str = ""
    fault: FaultRef | None = None
    trigger: str | None = None
    preconditions: list[str] = []
    expected: Expected | None = None
    verdict: VerdictName
    #: Why the harness aborted the drill (a stop condition), or None.
    aborted: str | None = None
    recovery_class: ClassName
    recovery_class_why: str = ""
    #: The job's last end state (succeeded, failed, stopped), or None.
    outcome: str | None = None
    operator_actions: list[OperatorAction] = []
    questions: Questions = Questions()
    times: Times = Times()
    conditions: Conditions | None = None
    evidence: EvidenceSet
    expectation: Evidence
    goodput: Goodput | None = None
    inventory: Inventory | None = None
    disruption: Disruption | None = None
    network: NetworkTrack | None = None
    placement: Placement | None = None
    # a control's own fields
    expected_check: str | None = None
    #: Whether its check failed it; None: not proven (the drill did not run as planned).
    caught: bool | None = None
    not_proven_why: str | None = None
    workload_mutation: dict[str, JsonValue] | None = None
    # what a buyer signs (optional: reports before these fields lack them)
    conclusion: Conclusion | None = None
    #: None for an item that passed.
    layer: FailingLayer | None = None
    #: What the recovery used (spares, restarts, operator actions, storage) and who owns it.
    dependencies: dict[str, JsonValue] = {}
    #: Loss and evaluation trend after recovery vs the baseline's (where bitwise does not apply).
    trend: dict[str, JsonValue] = {}
    #: Which node got which rank, per incarnation.
    scheduling: list[IncarnationPlacement] = []
    failure: Failure | None = None
    #: No rank reported anything: the script is not instrumented, or died first.
    no_probe_events: bool = False
    #: The message behind an English field the judge wrote (``recovery_class_why``,
    #: ``aborted``, ``not_proven_why``): field -> message id and params, so that a report
    #: can say it in its own language.
    field_messages: dict[str, Message] = {}
    #: For a job read from its log lines (plan ``logs``): which evidence came from logs,
    #: the stamping bound, lines not attributed, what the patterns cannot show.
    log_evidence: dict[str, JsonValue] | None = None

    @property
    def not_as_planned(self) -> str | None:
        """Why the drill did not run as planned (aborted, or a control not proven)."""
        return self.aborted or self.not_proven_why

    def findings(self) -> Iterator[tuple[str, Finding]]:
        """(category, finding) over the evidence and then the expectation."""
        for cat, ev in self.evidence.categories():
            for f in ev.findings:
                yield cat, f
        for f in self.expectation.findings:
            yield "expectation", f

    def resume_key(self) -> dict[str, JsonValue] | None:
        rf = self.questions.resumed_from
        return None if rf is None else rf.key()


# --- the run ------------------------------------------------------------------------------


class DossierTask(Record):
    id: JsonValue = None
    config_version: JsonValue = None
    code_id: JsonValue = None


class DossierResources(Record):
    topology: str | None = None


class DossierObservation(Record):
    baseline_window: JsonValue = None


class DossierResponsibility(Record):
    injector: str | None = None
    observer: str | None = None
    recovery_operator: str | None = None
    signer: str | None = None
    replay_operator: str | None = None


class ReplayRecord(Record):
    """Who replayed this run from which bundle (written by ``faultdrill replay``)."""

    operator: str | None = None
    bundle: str | None = None
    original_responsibility: dict[str, JsonValue] | None = None
    #: What was checked of the source before its plan ran (``Trust.describe``).
    source_trust: dict[str, JsonValue] | None = None


class Dossier(Record):
    """The baseline's frozen dossiers (``baseline/dossier.json``), one section each."""

    task: DossierTask = DossierTask()
    resources: DossierResources = DossierResources()
    responsibility: DossierResponsibility = DossierResponsibility()
    observation: DossierObservation = DossierObservation()
    environment: Environment | None = None
    replay: ReplayRecord | None = None


class Baseline(Record):
    run_id: str = "baseline"
    steps: int | None = None
    final_model_digest: str | None = None
    world_size: int | None = None
    verdict: VerdictName
    evidence: EvidenceSet | None = None
    dossier: Dossier | None = None
    failure: Failure | None = None
    no_probe_events: bool = False
    log_evidence: dict[str, JsonValue] | None = None


class Skipped(Record):
    id: str
    kind: str = "scenario"
    reason: str = ""


class Summary(Record):
    scenarios: int
    passed: int
    failed: int
    retest: int
    controls: int
    controls_caught: int
    #: The operator said --no-controls: a run without controls may still be ok.
    controls_waived: bool = False
    #: Said when no negative control ran: the checks were not shown to catch a defect.
    controls_note: str | None = None
    ok: bool


class Report(Record):
    """A judged run: the content of ``report.json``."""

    schema_version: int = SCHEMA_VERSION
    faultdrill_version: str
    task_id: str
    plan_digest: str
    plan: RecordedPlan
    baseline: Baseline
    #: Every drilled item, scenarios and controls (``Item.control``), in plan order.
    scenarios: list[Item]
    #: The recovery dependencies of every scenario summed, for the cost discussion.
    recovery_dependencies: dict[str, JsonValue] = {}
    skipped: list[Skipped] = []
    summary: Summary

    @property
    def scenario_items(self) -> list[Item]:
        return [s for s in self.scenarios if not s.control]

    @property
    def control_items(self) -> list[Item]:
        return [s for s in self.scenarios if s.control]

    def item(self, item_id: str) -> Item | None:
        return next((s for s in self.scenarios if s.id == item_id), None)

    @property
    def dossier(self) -> Dossier:
        """The baseline's dossiers (empty sections when none was recorded)."""
        return self.baseline.dossier or Dossier()

    @property
    def environment(self) -> Environment:
        """The environment the run recorded: the first item's that has one, else the
        dossier's, else nothing known."""
        for s in self.scenarios:
            env = s.conditions.environment if s.conditions is not None else None
            if env is not None and env.to_json():
                return env
        return self.dossier.environment or Environment()

    def to_json(self) -> dict[str, Any]:
        """report.json's content; ``schema_version`` always first."""
        return {"schema_version": self.schema_version} | super().to_json()

    @classmethod
    def from_json(cls, data: Any, *, source: str = "report.json") -> Report:
        """Read parsed report.json data. Raises RunDirError naming ``source``, the field and
        the fix when it is not a report this version reads."""
        if not isinstance(data, dict) or ("scenarios" not in data and "summary" not in data):
            raise RunDirError(f"{source}: not a faultdrill report (no 'scenarios'/'summary')")
        _check_version(data.get("schema_version", 1), source)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise RunDirError(_explain(source, exc)) from exc

    @classmethod
    def from_text(cls, text: str | bytes, *, source: str = "report.json") -> Report:
        try:
            data = boundedjson.loads(text)  # nested too deep: a ValueError too
        except ValueError as exc:  # also not UTF-8: a binary file given by mistake
            raise RunDirError(
                f"{source}: report.json is not valid JSON ({exc}); give a run directory, a "
                "bundle or the report.json a run wrote"
            ) from exc
        return cls.from_json(data, source=source)


def _check_version(version: Any, source: str) -> None:
    fix = (
        "re-judge the run with this version (`faultdrill check RUN_DIR` rewrites "
        "report.json from the recorded events)"
    )
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise RunDirError(
            f"{source}: schema_version {version!r} is not a report schema version; this "
            f"faultdrill ({__version__}) reads version {SCHEMA_VERSION}: {fix}"
        )
    if version > SCHEMA_VERSION:
        raise RunDirError(
            f"{source}: report.json has schema_version {version}, newer than this faultdrill "
            f"({__version__}) reads (version {SCHEMA_VERSION}); read it with the faultdrill "
            f"that wrote it or a newer one, or {fix}"
        )


def _explain(source: str, exc: ValidationError) -> str:
    errors = exc.errors()
    lines = [
        f"{source}: does not fit report schema version {SCHEMA_VERSION} "
        f"({len(errors)} problem{'s' * (len(errors) != 1)}); re-judge the run with this "
        "version (`faultdrill check RUN_DIR`) or restore report.json from the run's bundle"
    ]
    for err in errors[:20]:
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        got = "" if err["type"] == "missing" else f" (got {err.get('input')!r:.60})"
        lines.append(f"  - {loc.lstrip('.') or '(top level)'}: {err['msg']}{got}")
    return "\n".join(lines)


#: report.json is read whole: a few MB for a large plan, never this much.
_REPORT_LIMIT = 64 << 20


def read_report(path: Path) -> Report:
    """The report of a run directory (or a report.json file). Raises RunDirError."""
    run_dir = path.is_dir()
    file = path / rundir.REPORT_JSON if run_dir else path
    try:
        # A run's report.json: no link out of the run. A report.json the user named: any
        # path, but a regular file (a FIFO there would block the read forever).
        if run_dir:
            base = path.resolve()
            text = read_bytes(base / rundir.REPORT_JSON, within=base, limit=_REPORT_LIMIT)
        else:
            text = read_named(file, limit=_REPORT_LIMIT)
    except FileNotFoundError as exc:
        raise RunDirError(
            f"{path}: no report.json; is this a faultdrill run directory? "
            f"(`faultdrill check {path}` judges a recorded run)"
        ) from exc
    except OSError as exc:
        raise RunDirError(f"{file}: cannot read: {exc.strerror}") from exc
    return Report.from_text(text, source=str(file))


def write_report(report: Report, run_dir: Path) -> Path:
    """Write ``run_dir/report.json``; returns its path."""
    path = run_dir / rundir.REPORT_JSON
    write_file(path, json.dumps(report.to_json(), indent=2) + "\n", within=run_dir)
    return path


def report_schema() -> dict[str, Any]:
    """The JSON Schema of report.json (what a report must look like to be read)."""
    schema = Report.model_json_schema()
    schema["description"] = (
        f"faultdrill report.json, schema version {SCHEMA_VERSION}. A report without "
        "schema_version is read as version 1. Objects may hold keys not listed here "
        "(written by newer parts); readers keep and show them."
    )
    return schema
