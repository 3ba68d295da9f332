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
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from faultdrill import __version__, boundedjson, rundir
from faultdrill.errors import RunDirError
from faultdrill.safepath import read_bytes, read_named, write_file

__all__ = [
    "SCHEMA_VERSION",
    "Baseline",
    "Conditions",
    "Disruption",
    "Dossier",
    "Environment",
    "Evidence",
    "EvidenceSet",
    "FaultRef",
    "Finding",
    "Goodput",
    "Inventory",
    "Item",
    "Message",
    "NetworkTrack",
    "Placement",
    "Questions",
    "Record",
    "RecordedPlan",
    "Report",
    "ResumePoint",
    "Skipped",
    "Summary",
    "Times",
    "When",
    "read_report",
    "report_schema",
    "write_report",
]

#: The schema version this faultdrill writes and reads.
SCHEMA_VERSION = 1

VerdictName = Literal["pass", "retest", "fail"]
ClassName = Literal[
    "automatic", "manual-confirmation", "manual-restart", "unrecoverable", "not-determined"
]
LevelName = Literal["running-again", "valid-progress", "consistent-results"]
LayerName = Literal[
    "scheduling",
    "control-plane",
    "storage",
    "framework",
    "checkpoint",
    "network",
    "environment-preparation",
    "undetermined",
]
#: Evidence categories of an item, in report order (``expectation`` is kept apart).
EVIDENCE = ("progress", "resources", "results")
#: A number as JSON has it: an integer stays an integer (``30``, not ``30.0``).
Num = int | float


class Record(BaseModel):
    """A part of report.json: typed fields, unknown keys kept, written back as read."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)
    _keys: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _remember_keys(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        record = handler(data)
        if isinstance(data, dict) and isinstance(record, Record):
            record._keys = tuple(data)
        return record

    @model_serializer(mode="wrap")
    def _as_recorded(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if not self._keys:
            return out
        first = {k: out[k] for k in self._keys if k in out}
        return first | {k: v for k, v in out.items() if k not in first}

    def to_json(self) -> dict[str, Any]:
        """This record as JSON data: the keys it was read with (or set with), in order."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    @property
    def extra(self) -> dict[str, Any]:
        """Keys this version does not define, as recorded."""
        return dict(self.model_extra or {})


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


# --- where and under which conditions ---------------------------------------------------


class Environment(Record):
    """The machine a run was recorded on (``environment_facts``)."""

    faultdrill: str | None = None
    python: str | None = None
    host: str | None = None
    kernel: str | None = None
    machine: str | None = None
    cpus: int | None = None
    root: bool | None = None
    torch: str | None = None


class Conditions(Record):
    """The conditions every measured time of an item was observed under."""

    platform: str
    isolation: str
    nodes: int
    procs_per_node: int
    world_sizes: list[int]
    max_restarts: int
    checkpoint_every_steps: int
    timeouts: dict[str, JsonValue]
    sample_hz: Num
    environment: Environment = Environment()
    note: str = ""


# --- findings and evidence ---------------------------------------------------------------


class Finding(Record):
    """One judgement of one check.

    ``message`` is the English sentence the check wrote. ``message_id`` and ``params``
    (optional; ``None``/empty for checks that do not set them yet) name that sentence and
    its values, so that a translation can say it again in another language."""

    check: str
    verdict: VerdictName
    message: str
    data: dict[str, JsonValue] = {}
    message_id: str | None = None
    params: dict[str, JsonValue] = {}


class Message(Record):
    """A message by id, with the values it says (see :mod:`faultdrill.i18n`)."""

    message_id: str
    params: dict[str, JsonValue] = {}


class Evidence(Record):
    verdict: VerdictName
    findings: list[Finding] = []

    def not_passed(self) -> list[Finding]:
        return [f for f in self.findings if f.verdict != "pass"]


class EvidenceSet(Record):
    """An item's evidence by category; the baseline's also holds its ``expectation``."""

    progress: Evidence
    resources: Evidence
    results: Evidence
    expectation: Evidence | None = None

    def categories(self) -> list[tuple[str, Evidence]]:
        """(category, evidence) of progress, resources, results."""
        return [(c, getattr(self, c)) for c in EVIDENCE]


# --- one drilled item ---------------------------------------------------------------------


class FaultRef(Record):
    kind: str
    target: str
    spec: dict[str, JsonValue] = {}

    @property
    def target_rank(self) -> int | None:
        """The rank the fault targets, when it targets one."""
        target = self.spec.get("target")
        rank = target.get("rank") if isinstance(target, dict) else None
        return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


class Expected(Record):
    job: str
    recovery: ClassName
    resume: str
    state: str = ""


class OperatorStep(Record):
    """One step of a manual recovery on the platform: its command and the permission it
    needs (Platform.resubmit_steps)."""

    command: str | None = None
    permission: str | None = None


class OperatorAction(Record):
    action: str | None = None
    operator: str | None = None
    runbook: str | None = None
    steps: list[OperatorStep] = []
    at: str | None = None


class When(Record):
    wall: str
    mono: Num | None = None
    since_injection_s: Num | None = None


class ResumePoint(Record):
    """Where training continued: a checkpoint (``None``: from scratch), step, position."""

    checkpoint: JsonValue = None
    step: JsonValue = None
    data_position: JsonValue = None
    verified: bool | None = None

    @property
    def step_number(self) -> float | None:
        """The step as a number, when it is one."""
        step = self.step
        if isinstance(step, bool) or not isinstance(step, (int, float)):
            return None
        return float(step)

    def key(self) -> dict[str, JsonValue]:
        """What must be the same for two runs to have resumed at the same point."""
        return {
            "checkpoint": self.checkpoint,
            "step": self.step,
            "data_position": self.data_position,
        }


class Questions(Record):
    """The four questions of a drill: lost when, old stopped when, new ready when, from where."""

    worker_lost_at: When | None = None
    worker_lost_by: str = ""
    old_replica_stopped_at: When | None = None
    old_replica_note: str = ""
    new_replicas_ready_at: When | None = None
    first_step_after_at: When | None = None
    resumed_from: ResumePoint | None = None
    note: str = ""

    def moments(self) -> list[tuple[int, When | None]]:
        """(question number, when) of questions 1-3 and the first step after (4)."""
        return [
            (1, self.worker_lost_at),
            (2, self.old_replica_stopped_at),
            (3, self.new_replicas_ready_at),
            (4, self.first_step_after_at),
        ]


class Times(Record):
    detect_s: Num | None = None
    recover_s: Num | None = None
    ready_s: Num | None = None
    recomputed_steps: int | None = None


class Goodput(Record):
    """Goodput accounting (:mod:`faultdrill.judge.goodput`); ``available`` False: ``why``."""

    available: bool
    why: str | None = None
    total_s: Num = 0
    seconds: dict[str, Num] = {}
    shares: dict[str, Num] = {}
    goodput: Num = 0
    ml_goodput_names: dict[str, str] = {}
    incarnations: int | None = None
    committed_steps: int | None = None
    recomputed_steps: int | None = None
    conditions: str = ""
    notes: list[str] = []
    #: ``why`` and ``notes`` as messages (a note written in words: the text).
    why_message: Message | None = None
    note_messages: list[Message | str] = []


class Pointer(Record):
    file: JsonValue = None
    target: JsonValue = None
    problem: str | None = None


class WrittenBy(Record):
    rank: JsonValue = None
    pid: JsonValue = None
    inc: int | None = None


class Refusal(Record):
    inc: JsonValue = None
    reason: JsonValue = None


class CheckpointRecord(Record):
    """One checkpoint of the inventory (:mod:`faultdrill.readings.inventory`)."""

    id: str
    step: JsonValue = None
    path: str | None = None
    sha256_recorded: str | None = None
    sha256_now: str | None = None
    size: int | None = None
    data_position: JsonValue = None
    written_by: WrittenBy | None = None
    loaded_by: list[JsonValue] = []
    rejected_by: list[Refusal] = []
    damaged_by: str | None = None
    latest: bool = False
    state: str = ""
    verifies: bool | None = None
    manifest_verifies: bool | None = None
    reason: str | None = None


class FailedSave(Record):
    step: JsonValue = None
    error: JsonValue = None
    errno: JsonValue = None
    rank: JsonValue = None
    duration_s: JsonValue = None


class PointerObservation(Record):
    when: JsonValue = None
    latest: JsonValue = None
    verifies: JsonValue = None
    problem: JsonValue = None


class Inventory(Record):
    taken: bool = False
    latest: Pointer | None = None
    checkpoints: list[CheckpointRecord] = []
    failed_saves: list[FailedSave] = []
    pointer_observed: list[PointerObservation] = []


class Ending(Record):
    """How the first fault's disruption ended (:mod:`faultdrill.judge.disruption`)."""

    kind: str
    how: str = ""
    phase: str | None = None
    ended_by: str | None = None
    first_symptom: str | None = None
    first_symptom_at_s: Num | None = None
    threshold_s: Num = 0
    progress_stopped_at_s: Num | None = None
    progress_resumed_at_s: Num | None = None
    failure_noticed_at_s: Num | None = None
    failure_noticed_by: str | None = None
    stop_condition: JsonValue = None


class RestartInWindow(Record):
    probe_killed_at_s: Num | None = None
    restart_began_at_s: Num | None = None
    began_by: str | None = None
    rendezvous_at_s: Num | None = None
    rendezvous_during_fault: bool = False
    summary: str = ""


class PlatformMoment(Record):
    at_s: Num | None = None
    what: str = ""


class AfterReturn(Record):
    platform_events: list[PlatformMoment] = []
    first_step_at_s: Num | None = None


class FaultWindow(Record):
    start_s: Num = 0
    end_s: Num | None = None
    steps_per_s_before: Num | None = None
    steps_per_s_during: Num | None = None
    training_affected: bool | None = None
    restart: RestartInWindow | None = None
    after_return: AfterReturn = AfterReturn()


class Disruption(Record):
    fault: JsonValue = None
    injected_step: JsonValue = None
    ending: Ending
    window: FaultWindow | None = None


class NetWindow(Record):
    from_: str | None = Field(None, alias="from")
    to: str | None = None
    seconds: Num | None = None


class NetNode(Record):
    node: str
    rtt_before_ms: Num | None = None
    rtt_during_ms: Num | None = None
    rtt_after_ms: Num | None = None
    lost_before: str | None = None
    lost_during: str | None = None
    lost_after: str | None = None
    bytes_during: int | None = None
    packets_during: int | None = None
    drop_during: int | None = None


class NetRule(Record):
    rule: JsonValue = None
    node: JsonValue = None
    fault: JsonValue = None
    rule_kind: JsonValue = None
    chain: JsonValue = None
    dev: JsonValue = None
    packets: JsonValue = None
    bytes: JsonValue = None
    dropped: JsonValue = None


class NetworkTrack(Record):
    """The network track's summary (:func:`faultdrill.readings.network.network_summary`)."""

    window: NetWindow = NetWindow()
    hz: JsonValue = None
    probe: JsonValue = None
    nodes: list[NetNode] = []
    rules: list[NetRule] = []
    samples: int = 0
    gaps: int = 0


class NodeLoss(Record):
    node: JsonValue = None
    reason: JsonValue = None
    at_s: Num = 0


class SparePlaced(Record):
    node: JsonValue = None
    replaces: JsonValue = None
    at_s: Num = 0


class SpareRejected(Record):
    node: JsonValue = None
    replaces: JsonValue = None
    precondition: JsonValue = None
    detail: JsonValue = None
    category: JsonValue = None


class Placement(Record):
    """Where the job ran before the fault, where it resumed, spares placed or rejected."""

    before: list[str] = []
    resumed_on: list[str] | None = None
    final: list[str] | None = None
    world_size_before: int | None = None
    world_size_after: int | None = None
    lost: list[NodeLoss] = []
    spares_placed: list[SparePlaced] = []
    spares_rejected: list[SpareRejected] = []
    no_spare: list[JsonValue] = []


class LevelProof(Record):
    """One conclusion level and what proves (or fails to prove) it."""

    level: LevelName
    proven: bool
    verdict: VerdictName
    why: str = ""
    #: Names of the checks whose findings the level rests on.
    findings: list[str] = []
    #: Compact references to the events that show it (src, kind, mono, ...).
    events: list[dict[str, JsonValue]] = []
    #: ``why`` as a message (id and params), for reports in other languages.
    message_id: str | None = None
    params: dict[str, JsonValue] = {}


class Conclusion(Record):
    """The highest level the drill proved (None: not even running again), and each level's
    proof: running again only proves the scheduler restarted the processes; valid progress
    and consistent results are what a buyer needs (methodology: 三种结论)."""

    level: LevelName | None = None
    levels: list[LevelProof] = []
    note: str = ""


class Clue(Record):
    """One rule's reading of the timeline: a layer it points at or rules out."""

    rule: str
    layer: LayerName
    points: bool
    why: str = ""
    events: list[dict[str, JsonValue]] = []
    findings: list[str] = []
    message_id: str | None = None
    params: dict[str, JsonValue] = {}


class FailingLayer(Record):
    """Where a recovery that did not pass failed: the layer, the rule that named it and the
    events and findings behind it, and the other clues (also pointing, or ruled out)."""

    layer: LayerName
    why: str = ""
    rule: str | None = None
    events: list[dict[str, JsonValue]] = []
    findings: list[str] = []
    also: list[Clue] = []
    ruled_out: list[Clue] = []
    message_id: str | None = None
    params: dict[str, JsonValue] = {}


class Failure(Record):
    """How a job that ended failed: the failing command, its exit, its last output lines."""

    command: str | None = None
    exit_status: int | None = None
    signal: str | None = None
    node: str | None = None
    local_rank: int | None = None
    #: How many worker failures the launcher logged.
    worker_failures: int = 0
    error_tail: list[str] = []
    #: The launcher's log holding the rest, relative to the run directory.
    log: str | None = None


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
    scheduling: list[dict[str, JsonValue]] = []
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
