"""Every fault's plan data: the specs, their targets and the harness controls.

A fault spec is frozen plan data (a pydantic model with a ``kind`` literal and bounded
params); the fault that acts on it is a plug-in (:mod:`faultdrill.faults`), which names its
spec as ``spec_model``. The plan's fault field is the union of :data:`FAULT_SPECS`, built
here, below every plug-in, so reading a plan loads no fault, platform or check
(``tests/test_plugins.py`` holds the union and the registry to the same kinds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from faultdrill.frozen import Frozen
from faultdrill.i18n import Msg

#: The ``peer`` of ``link_cut`` that names the control plane rather than a node: only the
#: node's traffic with its controller is cut (ability ``link-cut-control-plane``).
CONTROL_PLANE_PEER = "control-plane"

# --- from faults/api.py ---------------------------------------------------------


class FaultSpec(Frozen):
    """Base of every fault's plan data. Subclasses add ``kind: Literal[...]`` and params
    (each number with both bounds: :mod:`faultdrill.frozen`)."""

    kind: str

    def target_label(self) -> str:
        """A short human label of what the fault hits (``rank 1``, ``node n2``)."""
        return "-"

    @property
    def duration_s(self) -> float | None:
        """How long the fault stays applied before the drill reverts it (None: one-shot)."""
        return None

    @property
    def ends_at_failed_save(self) -> bool:
        """Whether the drill reverts the fault as soon as a checkpoint save has failed
        while it was applied (``duration_s`` then bounds how long it may last)."""
        return False


# --- from faults/process.py -----------------------------------------------------

#: Highest rank a plan may name (the plan checks it against the world size too).
MAX_RANK = 65_535


class WorkerTarget(Frozen):
    """Which worker: exactly one of a global rank or a node (all its workers' lowest rank)."""

    rank: int | None = Field(None, ge=0, le=MAX_RANK)
    node: str | None = None

    @model_validator(mode="after")
    def _one(self) -> WorkerTarget:
        if (self.rank is None) == (self.node is None):
            raise ValueError("set exactly one of 'rank' or 'node'")
        return self

    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"a worker on node {self.node}"


def check_worker_target(target: WorkerTarget, plan: Any, what: str) -> str | None:
    """Why ``target`` names no worker of the plan's layout (ranks ``0..world-1``; nodes
    ``n1..nN`` and the spares after them), or None."""
    res = plan.resources
    world = res.world_size
    if target.rank is not None and target.rank >= world:
        return f"{what} rank {target.rank} does not exist (world size {world})"
    names = [f"n{i}" for i in range(1, res.nodes + res.spares + 1)]
    if target.node is not None and target.node not in names:
        return (
            f"{what} node {target.node!r} does not exist in this layout (nodes: "
            f"{', '.join(names)}); use one of those"
        )
    return None


class KillWorkerSpec(FaultSpec):
    kind: Literal["kill-worker"] = "kill-worker"
    target: WorkerTarget
    signal: Literal["SIGKILL", "SIGTERM"] = "SIGKILL"
    grace_s: float = Field(
        3.0, ge=0, le=600, description="with SIGTERM: wait this long, then SIGKILL"
    )

    def target_label(self) -> str:
        return self.target.label()


class HangWorkerSpec(FaultSpec):
    """One rank's replica stops making progress while its node, agent and connections stay
    up: its process tree is stopped (SIGSTOP) for at most ``for_s`` seconds, then resumed
    if it still lives. The hang a collective timeout (or nothing) must notice."""

    kind: Literal["hang-worker"] = "hang-worker"
    target: WorkerTarget
    for_s: float = Field(
        gt=0,
        le=3600,
        description="the longest the replica stays stopped: the drill resumes it then "
        "(SIGCONT to the same pid and start time), if nothing killed it before",
    )

    def target_label(self) -> str:
        return self.target.label()

    @property
    def duration_s(self) -> float | None:
        return self.for_s


# --- from faults/straggler.py ---------------------------------------------------


class DetectionExpected(Frozen):
    """The plan expects the platform to notice the straggler: some platform decision that
    names it (a straggler report, the rank's worker replaced, its node taken out) within
    ``within_s`` of the throttle."""

    within_s: float = Field(gt=0, le=3600, description="seconds after the throttle began")


class SlowWorkerSpec(FaultSpec):
    """A straggler: one rank's replica and every process it started held to
    ``cpu_percent`` % of one CPU core (a CPU quota of a cgroup of their own) for ``for_s``,
    then released."""

    kind: Literal["slow-worker"] = "slow-worker"
    target: WorkerTarget
    cpu_percent: int = Field(
        ge=1, le=99, description="the CPU the rank keeps, in % of one core (e.g. 20)"
    )
    for_s: float = Field(gt=0, le=600, description="how long the rank stays throttled")
    expect_detection: DetectionExpected | None = Field(
        None,
        description="{within_s: T}: the platform must notice the straggler within T s "
        "(fails otherwise); none (the default): not required (the report says whether "
        "anything did)",
    )

    @field_validator("expect_detection", mode="before")
    @classmethod
    def _none_said(cls, value: Any) -> Any:
        """``none`` in a plan is the default: detection not required."""
        if value == "none":
            return None
        if not isinstance(value, dict) and value is not None:
            raise ValueError(f"got {value!r}; write {{within_s: SECONDS}} or none")
        return value

    def target_label(self) -> str:
        return self.target.label()

    @property
    def duration_s(self) -> float | None:
        return self.for_s

    @property
    def detection_within_s(self) -> float | None:
        """The seconds within which the plan expects detection; None: not required."""
        return None if self.expect_detection is None else self.expect_detection.within_s


# --- from faults/memory.py ------------------------------------------------------


class OomWorkerSpec(FaultSpec):
    """One rank's replica killed by the kernel's OOM killer: it is put under a memory
    limit of its own (``limit_mb``), then outgrows it (the workload is asked to allocate
    ``alloc_mb``). ``repeat``: the limit stays on the rank, and every later replica of it
    is put under it again (the restart loop a job with no fix between restarts is in)."""

    kind: Literal["oom-worker"] = "oom-worker"
    target: WorkerTarget
    limit_mb: int = Field(
        64,
        ge=8,
        le=4096,
        description="the memory the replica may take after it is capped (MiB): the limit",
    )
    alloc_mb: int = Field(
        256,
        ge=16,
        le=8192,
        description="what the workload is asked to allocate (MiB): more than limit_mb",
    )
    repeat: bool = Field(
        False,
        description="the limit stays: every later replica of the rank is capped again "
        "(a restart loop: the control the oom-restart-loop check must catch)",
    )
    wait_s: float = Field(
        60.0, gt=0, le=600, description="how long to wait for each capped replica to be killed"
    )

    @model_validator(mode="after")
    def _outgrows(self) -> OomWorkerSpec:
        if self.alloc_mb <= self.limit_mb:
            raise ValueError(
                f"alloc_mb ({self.alloc_mb}) must exceed limit_mb ({self.limit_mb}), or the "
                "replica never outgrows its limit; raise alloc_mb or lower limit_mb"
            )
        return self

    def target_label(self) -> str:
        return self.target.label()


# --- from faults/network.py -----------------------------------------------------


class LinkTarget(Frozen):
    """Whose link: a node (``n2``), optionally only towards one ``peer`` (a node, or
    ``control-plane`` for a partition from the control plane only)."""

    node: str = Field(pattern=r"^n\d{1,2}$")
    peer: str | None = Field(None, pattern=r"^(n\d{1,2}|control-plane)$")

    def label(self) -> str:
        return f"node {self.node}" + (f" <-> {self.peer}" if self.peer else "")


class _Timed(FaultSpec):
    target: LinkTarget
    for_s: float = Field(gt=0, le=3600, description="how long the fault stays applied")

    def target_label(self) -> str:
        return self.target.label()

    @property
    def duration_s(self) -> float | None:
        return self.for_s


class LinkLossSpec(_Timed):
    kind: Literal["link-loss"] = "link-loss"
    percent: float = Field(gt=0, le=100, description="share of packets dropped, each way")


class LinkSlowSpec(_Timed):
    kind: Literal["link-slow"] = "link-slow"
    rate: str = Field(
        "1mbit",
        pattern=r"^\d+(\.\d+)?(bit|kbit|mbit|gbit)$",
        description="tbf rate, e.g. 512kbit, 1mbit",
    )
    queue_ms: int = Field(
        200, ge=1, le=10000, description="tbf latency: the longest a packet may queue"
    )
    burst: str = Field("32kbit", pattern=r"^\d+(kbit|mbit|k|b)?$")


class LinkFlapSpec(FaultSpec):
    kind: Literal["link-flap"] = "link-flap"
    target: LinkTarget
    count: int = Field(3, ge=1, le=100, description="how many times the link goes down")
    down_s: float = Field(1.0, gt=0, le=600)
    up_s: float = Field(1.0, gt=0, le=600)

    @field_validator("target")
    @classmethod
    def _no_peer(cls, v: LinkTarget) -> LinkTarget:
        if v.peer is not None:
            raise ValueError("link-flap acts on the node's whole link; remove 'peer'")
        return v

    def target_label(self) -> str:
        return self.target.label()

    @property
    def duration_s(self) -> float | None:
        return self.count * (self.down_s + self.up_s)


class PartitionSpec(_Timed):
    kind: Literal["partition"] = "partition"


def check_nodes(spec: Any, plan: Any) -> str | None:
    """A problem with the target nodes of ``spec`` in ``plan`` (unknown node), or None."""
    res = plan.resources
    known = {f"n{i}" for i in range(1, res.nodes + res.spares + 1)}
    peer = getattr(spec.target, "peer", None)
    if peer == CONTROL_PLANE_PEER:
        if spec.kind != "partition":
            return (
                f"{spec.kind}: peer {CONTROL_PLANE_PEER!r} is only for a partition; "
                "name a node as peer, or use kind partition"
            )
        peer = None  # not a node of the layout: the platform's control plane
    for role, node in (("target node", spec.target.node), ("peer", peer)):
        if node is not None and node not in known:
            return (
                f"{spec.kind}: {role} {node!r} is not a node of this layout "
                f"(nodes: {', '.join(sorted(known))})"
            )
    if peer == spec.target.node:
        return f"{spec.kind}: peer must differ from the target node"
    return None


# --- from faults/node.py --------------------------------------------------------


class NodeTarget(Frozen):
    node: str = Field(pattern=r"^n\d{1,2}$")

    def label(self) -> str:
        return f"node {self.node}"


class _NodeSpec(FaultSpec):
    target: NodeTarget

    def target_label(self) -> str:
        return self.target.label()


class NodeDownSpec(_NodeSpec):
    kind: Literal["node-down"] = "node-down"


class NodeFreezeSpec(_NodeSpec):
    kind: Literal["node-freeze"] = "node-freeze"
    for_s: float = Field(gt=0, le=3600, description="how long the node stays frozen")

    @property
    def duration_s(self) -> float | None:
        return self.for_s


class NodeDrainSpec(_NodeSpec):
    kind: Literal["node-drain"] = "node-drain"


# --- from faults/storage.py -----------------------------------------------------


class StorageOutageSpec(FaultSpec):
    kind: Literal["storage-outage"] = "storage-outage"
    mode: Literal["read-only", "full", "unreachable"] = Field(
        description="read-only: EROFS via a read-only bind remount; full: ENOSPC on a small "
        "tmpfs that is filled; unreachable: the FUSE server of the directory goes away"
    )
    server: Literal["hang", "error"] | None = Field(
        None,
        description="unreachable only (default hang): hang = the server stops answering, "
        "requests block (NFS hard mount); error = every request fails with EIO (soft mount)",
    )
    for_s: float = Field(gt=0, le=600, description="how long the outage lasts")
    until_save_failed: bool = Field(
        False,
        description="end the outage as soon as a checkpoint save has failed in it (for_s "
        "is then the longest it lasts): the outage covers the save it aims at on a fast or "
        "a slow job alike, and no later one",
    )
    fs_size_mb: int = Field(
        8, ge=2, le=256, description="full: size of the tmpfs holding the checkpoints"
    )
    leave_free_kb: int = Field(
        64,
        ge=0,
        le=256 * 1024,
        description="full: free space left by the filler (smaller than a checkpoint)",
    )

    @model_validator(mode="after")
    def _server_for_unreachable(self) -> StorageOutageSpec:
        if self.server is not None and self.mode != "unreachable":
            raise ValueError(
                f"server applies to mode unreachable only; remove it (mode is {self.mode!r})"
            )
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave ``server`` and ``until_save_failed`` out when unset, so plans written
        before them keep their digest."""
        out: dict[str, Any] = handler(self)
        if self.server is None:
            out.pop("server", None)
        if not self.until_save_failed:
            out.pop("until_save_failed", None)
        return out

    @property
    def server_behaviour(self) -> Literal["hang", "error"]:
        return self.server or "hang"

    def target_label(self) -> str:
        return "the checkpoint directory"

    @property
    def duration_s(self) -> float | None:
        return self.for_s

    @property
    def ends_at_failed_save(self) -> bool:
        return self.until_save_failed


class StorageSlowSpec(FaultSpec):
    """The checkpoint directory's server keeps answering, each request ``latency_ms`` late,
    for ``for_s`` seconds (timed to overlap a save). A kind of its own, not a mode of
    ``storage-outage``: nothing fails, and its parameters (a latency, the requests it
    delays) and its evidence (how long saves took, what training lost) are not an
    outage's."""

    kind: Literal["storage-slow"] = "storage-slow"
    latency_ms: int = Field(
        ge=1,
        le=10_000,
        description="how late the server answers each request, in milliseconds (a checkpoint "
        "save makes a dozen or more requests, each up to 1 MiB of data)",
    )
    for_s: float = Field(gt=0, le=600, description="how long the slowdown lasts")
    ops: Literal["write", "all"] = Field(
        "write",
        description="write: only requests that change the directory (write, fsync, create, "
        "rename, unlink...) are late; all: reads and lookups too",
    )

    def target_label(self) -> str:
        return "the checkpoint directory"

    @property
    def duration_s(self) -> float | None:
        return self.for_s


# --- from faults/data.py --------------------------------------------------------


class DataOutageSpec(FaultSpec):
    kind: Literal["data-outage"] = "data-outage"
    mode: Literal["error", "hang"] = Field(
        description="error: every read of the data directory fails with EIO (a soft mount "
        "whose server is gone); hang: every read blocks until the outage ends (an NFS hard "
        "mount whose server is down)"
    )
    for_s: float = Field(gt=0, le=600, description="how long the data stays unreadable")

    def target_label(self) -> str:
        return "the job's data directory"

    @property
    def duration_s(self) -> float | None:
        return self.for_s


# --- from faults/checkpoint.py --------------------------------------------------

Damage = Literal["flip-bytes", "truncate", "remove-manifest", "latest-to-missing"]


class CorruptCheckpointSpec(FaultSpec):
    kind: Literal["corrupt-checkpoint"] = "corrupt-checkpoint"
    damage: Damage
    flip_count: int = Field(8, ge=1, le=4096, description="flip-bytes: bytes changed")
    restart: WorkerTarget | None = Field(
        default_factory=lambda: WorkerTarget(rank=1),
        description="kill this worker right after the damage so the job must restart and "
        "load (null: leave the restart to another cause)",
    )

    def target_label(self) -> str:
        return "the checkpoint `latest` names"


# --- from faults/control_plane.py -----------------------------------------------


class RestartProbe(Frozen):
    """Kill worker ``rank`` ``after_s`` seconds into the outage."""

    rank: int = Field(ge=0, le=MAX_RANK)
    after_s: float = Field(ge=0, le=3600)


class ControlPlaneOutageSpec(FaultSpec):
    kind: Literal["control-plane-outage"] = "control-plane-outage"
    mode: Literal["pause", "cut", "stop"] = Field(
        "pause",
        description="pause: SIGSTOP the control plane's processes, SIGCONT after for_s; "
        "cut: drop its traffic on its node's link for for_s (isolation: netns); "
        "stop: stop it, start it again after for_s (a scheduler's controller)",
    )
    for_s: float = Field(gt=0, le=600, description="how long the control plane is away")
    restart_during: RestartProbe | None = Field(
        None, description="kill a worker this long into the outage: can a restart rendezvous?"
    )

    @model_validator(mode="after")
    def _probe_inside(self) -> ControlPlaneOutageSpec:
        if self.restart_during is not None and self.restart_during.after_s >= self.for_s:
            raise ValueError(
                f"restart_during.after_s ({self.restart_during.after_s}) must be less than "
                f"for_s ({self.for_s}): the restart must fall inside the outage"
            )
        return self

    def target_label(self) -> str:
        return "the control plane (rendezvous store)"

    @property
    def duration_s(self) -> float | None:
        return self.for_s


# --- from faults/harness.py -----------------------------------------------------

HarnessKind = Literal["rollback-latest", "hide-checkpoints", "stale-copy"]


HARNESS_CONTROLS: tuple[str, ...] = ("rollback-latest", "hide-checkpoints", "stale-copy")


#: The check each harness control must make fail.
EXPECTED_CHECK = {
    "rollback-latest": "progress.resume-point",
    "hide-checkpoints": "progress.no-restart-from-zero",
    "stale-copy": "resources.no-stale-replica",
}


#: The title each harness control gets (a message: a report says it in its language).
TITLE_MESSAGE = {kind: f"ctl.harness.title.{kind}" for kind in HARNESS_CONTROLS}


def _restart_target() -> WorkerTarget:
    return WorkerTarget(rank=1)


class RollbackLatestSpec(FaultSpec):
    kind: Literal["rollback-latest"] = "rollback-latest"
    back: int = Field(1, ge=1, le=16, description="how many checkpoints back the pointer goes")
    restart: WorkerTarget = Field(
        default_factory=_restart_target, description="the worker killed to make the job restart"
    )

    def target_label(self) -> str:
        return "the checkpoint `latest` names"


class HideCheckpointsSpec(FaultSpec):
    kind: Literal["hide-checkpoints"] = "hide-checkpoints"
    restart: WorkerTarget = Field(
        default_factory=_restart_target, description="the worker killed to make the job restart"
    )

    def target_label(self) -> str:
        return "the checkpoint directory"


class StaleCopySpec(FaultSpec):
    kind: Literal["stale-copy"] = "stale-copy"
    target: WorkerTarget = Field(
        default_factory=_restart_target, description="the worker copied (and then killed)"
    )
    kill_original: bool = Field(
        True, description="kill the original after the copy started, so the job restarts"
    )

    def target_label(self) -> str:
        return self.target.label()


class HarnessControls(BaseModel):
    """``controls:`` as a mapping: the harness-side controls in one line, and the plan's
    own controls (known-bad workloads) under ``items``::

        controls: {harness: all}
        controls:
          harness: [rollback-latest, stale-copy]
          trigger: {after_checkpoint: 2}    # default: after the second checkpoint
          target: {rank: 1}                  # the worker killed (and copied); default rank 1
          items: [...]                       # controls as in the list form

    Each harness control becomes a control ``ctl-<kind>`` whose expected check is the one
    its defect must fail (:data:`EXPECTED_CHECK`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    harness: tuple[HarnessKind, ...] | Literal["all"]
    trigger: dict[str, Any] = Field(default_factory=lambda: {"after_checkpoint": 2})
    target: dict[str, Any] = Field(default_factory=lambda: {"rank": 1})
    items: tuple[dict[str, Any], ...] = ()


def expand_controls(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """The list form of ``controls`` given as a :class:`HarnessControls` mapping (each
    control still raw: the plan validates it as any other). Raises ValueError naming the
    field and the fix."""
    from pydantic import ValidationError

    try:
        spec = HarnessControls.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = ".".join(
                str(p) for p in err["loc"] if not str(p).startswith(("tuple", "literal"))
            )
            problems.append(f"controls.{loc}: {err['msg']} (got {err.get('input')!r})")
        raise ValueError(
            "; ".join(problems) + f"; harness controls are: all, {', '.join(HARNESS_CONTROLS)}"
        ) from exc
    kinds = HARNESS_CONTROLS if spec.harness == "all" else tuple(dict.fromkeys(spec.harness))
    out: list[dict[str, Any]] = []
    for kind in kinds:
        where = "target" if kind == "stale-copy" else "restart"
        out.append(
            {
                "id": f"ctl-{kind}",
                "title": Msg(TITLE_MESSAGE[kind]).text(),
                "fault": {"kind": kind, where: dict(spec.target)},
                "trigger": dict(spec.trigger),
                "expected_check": EXPECTED_CHECK[kind],
            }
        )
    return [*out, *(dict(item) for item in spec.items)]


# --- the plan's fault field ---------------------------------------------------------------

#: Every fault kind's spec, in the order the plan's schema lists them. A new fault kind adds
#: its spec here and its plug-in to :mod:`faultdrill.plugins`.
FAULT_SPECS: tuple[type[FaultSpec], ...] = (
    KillWorkerSpec,
    SlowWorkerSpec,
    HangWorkerSpec,
    OomWorkerSpec,
    CorruptCheckpointSpec,
    ControlPlaneOutageSpec,
    RollbackLatestSpec,
    HideCheckpointsSpec,
    StaleCopySpec,
    LinkLossSpec,
    PartitionSpec,
    LinkSlowSpec,
    LinkFlapSpec,
    NodeDownSpec,
    NodeFreezeSpec,
    NodeDrainSpec,
    StorageOutageSpec,
    StorageSlowSpec,
    DataOutageSpec,
)

#: The fault kinds a plan may name (``kind`` of each spec).
FAULT_KINDS: tuple[str, ...] = tuple(s.model_fields["kind"].default for s in FAULT_SPECS)

if TYPE_CHECKING:
    FaultField = FaultSpec
else:
    FaultField = Annotated[Union[FAULT_SPECS], Field(discriminator="kind")]  # noqa: UP007
