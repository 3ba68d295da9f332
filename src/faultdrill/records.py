"""The typed parts of report.json that the judge produces: records at the bottom.

:mod:`faultdrill.report.model` is the one definition of ``report.json`` and re-exports
every class here; they live here, below the judge and the checks, so that what a judge
computes is already the report's type (importing :mod:`faultdrill.report` would load the
renderers, which stand above the judge). The contracts of :class:`Record` (unknown keys
kept, written back as read, in their order) are :mod:`faultdrill.report.model`'s.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)

__all__ = [
    "EVIDENCE",
    "AccessIdentity",
    "ActionTotals",
    "AfterReturn",
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
    "LayerName",
    "LevelName",
    "LevelProof",
    "LogEvidence",
    "Message",
    "NetNode",
    "NetRule",
    "NetWindow",
    "NetworkTrack",
    "NodeLoss",
    "NotObservable",
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
    "Refusal",
    "RejectedSpareUse",
    "ReportedArtifact",
    "RestartBudget",
    "RestartInWindow",
    "RestartTotals",
    "ResumePoint",
    "SeriesTrend",
    "SparePlaced",
    "SpareRejected",
    "SpareTotals",
    "SpareUse",
    "StorageTotals",
    "Times",
    "Trend",
    "TrendMessages",
    "TrendWindow",
    "Undecided",
    "VerdictName",
    "VerifiedArtifact",
    "When",
    "WrittenBy",
    "message_of",
    "plain",
]

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


def plain(value: Any) -> Any:
    """``value`` as report.json has always stored it: JSON types only, anything else (a
    numpy scalar, a path) as its ``str``."""
    return json.loads(json.dumps(value, default=str))


# --- a job read from its logs ------------------------------------------------------------


class NotObservable(Record):
    """A check the plan's log patterns leave without evidence, and why."""

    check: str
    why: str
    verdict: str | None = None
    why_message: dict[str, JsonValue] = {}
    to_be_verified: bool = False


class Undecided(Record):
    """A progress, resources or results finding that stayed a retest."""

    check: str
    message: str
    message_id: str | None = None
    params: dict[str, JsonValue] = {}


class LogEvidence(Record):
    """What of an item's evidence came from the job's own log lines
    (:func:`faultdrill.judge.log_evidence.log_evidence`)."""

    source: str
    unit: str
    stamped: str
    stamp_bound_s: JsonValue = None
    from_logs: dict[str, int] = {}
    from_probe: dict[str, int] = {}
    read: dict[str, JsonValue] = {}
    not_observable: list[NotObservable] = []
    undecided: list[Undecided] = []


def message_of(said: Any) -> Message:
    """A :class:`~faultdrill.i18n.Msg` (anything with its ``to_json``) as a report message."""
    return Message.model_validate(plain(said.to_json()))


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
    #: Who decided the worker was lost (the event's ``source``; "" when it names none).
    worker_lost_source: str = ""
    old_replica_stopped_at: When | None = None
    old_replica_note: str = ""
    new_replicas_ready_at: When | None = None
    #: When the platform said the replacement's resources were up.
    resources_ready_at: When | None = None
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


class EventRef(Record):
    """A compact reference to one event of the timeline: where it is, and a few of its
    fields (those named by the rule that cites it, kept as extra keys, as recorded)."""

    src: str = ""
    kind: str = ""
    mono: Num | None = None
    since_injection_s: Num | None = None


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


# --- what the judge hands over: dependencies, trend, scheduling, artefacts, identities --------


class SpareUse(Record):
    """A spare placed for the recovery: the node, the node it replaced, when (s after t0)."""

    node: JsonValue = None
    replaces: JsonValue = None
    at_s: Num | None = None


class RejectedSpareUse(Record):
    node: JsonValue = None
    precondition: JsonValue = None
    detail: JsonValue = None


class RestartBudget(Record):
    """Restarts the platform made by itself, of ``max_restarts``."""

    used: int = 0
    max_restarts: int = 0
    incarnations: int = 0
    resubmissions: int = 0
    fewest_left_reported: int | None = None
    exhausted: bool = False


class OperatorUse(Record):
    """One operator action the recovery needed, and its observed time to the next step."""

    action: JsonValue = None
    operator: JsonValue = None
    runbook: JsonValue = None
    permission: str = ""
    steps: list[str] = []
    at_s: Num | None = None
    observed_s: Num | None = None
    observed_by: str = ""


class CheckpointStorageUse(Record):
    used_by_recovery: bool = False
    loaded: list[str] = []
    saves: int = 0
    bytes_written: int = 0
    largest_checkpoint_bytes: int = 0
    kept: int = 0
    held_bytes_bound: int = 0


class DedicatedNetwork(Record):
    used: bool | None = None
    isolation: str | None = None
    note: str = ""


class Dependencies(Record):
    """What one item's recovery used, and each used dependency's owner
    (:func:`faultdrill.judge.dependencies.recovery_dependencies`)."""

    spare_nodes: list[SpareUse] = []
    rejected_spares: list[RejectedSpareUse] = []
    restart_budget: RestartBudget = RestartBudget()
    operator_actions: list[OperatorUse] = []
    checkpoint_storage: CheckpointStorageUse = CheckpointStorageUse()
    dedicated_network: DedicatedNetwork | None = None
    used: list[str] = []
    owners: dict[str, str] = {}


class SpareTotals(Record):
    placements: int = 0
    items: list[str] = []


class RestartTotals(Record):
    total: int = 0
    per_item: dict[str, int] = {}
    max_restarts: int = 0


class ActionTotals(Record):
    count: int = 0
    observed_s_total: Num = 0
    items: list[str] = []


class StorageTotals(Record):
    held_bytes_bound: int = 0
    items: list[str] = []


class DependencyOwner(Record):
    owner: str = ""
    items: list[str] = []


class DependencyTotals(Record):
    """A run's recovery dependencies summed, split by owner
    (:func:`faultdrill.judge.dependencies.dependency_totals`)."""

    spare_nodes: SpareTotals = SpareTotals()
    restarts: RestartTotals = RestartTotals()
    operator_actions: ActionTotals = ActionTotals()
    checkpoint_storage: StorageTotals = StorageTotals()
    by_dependency: dict[str, DependencyOwner] = {}
    by_owner: dict[str, list[str]] = {}
    to_be_agreed: list[str] = []


class SeriesTrend(Record):
    """One series after recovery against the baseline's over the steps both have
    (``steps`` 0: none in common, ``why`` says so)."""

    steps: int = 0
    from_step: int | None = None
    to_step: int | None = None
    mean: Num | None = None
    baseline_mean: Num | None = None
    mean_rel_diff: Num | None = None
    last: Num | None = None
    baseline_last: Num | None = None
    slope: Num | None = None
    baseline_slope: Num | None = None
    within: bool | None = None
    why: str | None = None


class TrendWindow(Record):
    from_step: int | None = None
    to_step: int | None = None
    steps_requested: int | None = None


class TrendMessages(Record):
    why: Message | None = None
    recovery_step_is: Message | None = None


class Trend(Record):
    """Loss and held-out metric trend after recovery vs the baseline's
    (:func:`faultdrill.judge.trend.trend_after_recovery`)."""

    applies: bool = False
    why: str = ""
    recovery_step: int | None = None
    recovery_step_is: str = ""
    window: TrendWindow | None = None
    loss: SeriesTrend | None = None
    metrics: dict[str, SeriesTrend] = {}
    drift: bool | None = None
    messages: TrendMessages = TrendMessages()


class RankPlace(Record):
    rank: JsonValue = None
    node: JsonValue = None
    host: JsonValue = None
    pid: JsonValue = None
    local_rank: JsonValue = None


class IncarnationPlacement(Record):
    """Which node got which rank in one incarnation (:mod:`faultdrill.judge.dossier`)."""

    incarnation: int | None = None
    master: JsonValue = None
    world_size: JsonValue = None
    ready_s: Num | None = None
    ready_since_injection_s: Num | None = None
    nodes: list[JsonValue] = []
    ranks: list[RankPlace] | None = None


class AccessIdentity(Record):
    """An identity the replicas ran as, and the nodes they ran on."""

    uid: JsonValue = None
    user: JsonValue = None
    nodes: list[str] = []


class ReportedArtifact(Record):
    """The last report of one exported file, as the job made it."""

    name: JsonValue = None
    path: str = ""
    sha256: JsonValue = None
    bytes: JsonValue = None
    rank: JsonValue = None
    pid: JsonValue = None


class VerifiedArtifact(Record):
    """One exported file hashed again at the item's end, against what the job reported."""

    name: JsonValue = None
    path: str = ""
    reported_sha256: JsonValue = None
    present: bool = False
    sha256: str | None = None
    bytes: int | None = None
    matches: bool = False
    problem: str | None = None
