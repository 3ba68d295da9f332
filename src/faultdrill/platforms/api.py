"""The platform seam: what runs the job, and what the drill may ask of it.

Five verbs are the whole contract (``prepare``, ``submit``, ``poll``, ``replicas``, ``stop``)
plus ``teardown``. They fit a process launcher (the local torchrun platform), a batch
scheduler (Slurm: sbatch/srun, requeue, node states), an actor system (Ray Train) and a
pod controller (Kubernetes PyTorchJob/JobSet) alike: each has a job to submit, a state to
poll, replicas with a rank and a node, and a way to stop everything.

The base class owns what every adapter needs the same way (template method): event
recording of submit/state changes/stop, and TERM -> bounded wait -> KILL escalation.
Adapters implement the underscored hooks.

Job states (``JobState``)::

    PENDING ──> RUNNING <──> RESTARTING
                   │
                   ├──> SUCCEEDED
                   ├──> FAILED
                   └──> STOPPED   (the drill stopped it: stop condition or end of drill)

**Actions.** Faults never touch the machine themselves: they ask the platform for an
*action* (signal a rank's replica, take a node down, cut a link, pause the control plane,
make the checkpoint storage fail...). An action changes nothing when it is called: it
returns :class:`Change` objects, each naming its ledger kind, the data its undo needs, the
command an operator would type, and an ``apply`` callable. The fault records each change in
the ledger, then applies it (:meth:`faultdrill.faults.api.Fault.apply_change`). The undo of
every kind is registered with :func:`faultdrill.ledger.undoer` by the platform's own
modules, so ``faultdrill cleanup`` can replay it after a crash from the recorded data alone.

**Abilities.** What a platform can be asked depends on its resource layout: it declares
its :class:`Ability` values with ``abilities_for(resources)`` and says what would make a
missing one possible with ``why_not``; a fault states the abilities it needs, and the plan
validator refuses a fault the chosen platform cannot do before any drill starts. Each
group of abilities is one small protocol below (``SignalsRanks``, ``HangsRanks``, ``ThrottlesRanks``, ``OomRanks``, ``NodeActions``,
``LinkActions``, ``ControlPlaneActions``, ``StorageActions``, ``ReachesCheckpoints``,
``NetworkTrack``, ``CopiesReplicas``); a platform implements the groups it declares
abilities of, and may raise :class:`~faultdrill.errors.FaultError` from an action of the
group it cannot do.
"""

from __future__ import annotations

import contextlib
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from faultdrill.errors import DrillError
from faultdrill.host.api import Change, Note, Replica, StorageMode
from faultdrill.plan.faults import CONTROL_PLANE_PEER

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.ledger import Ledger
    from faultdrill.plan import Resources

__all__ = [
    "CONTROL_PLANE_PEER",
    "PLATFORMS",
    "TORCHRUN_ENV",
    "Ability",
    "Change",
    "ControlPlaneActions",
    "CopiesReplicas",
    "HangsRanks",
    "JobSpec",
    "JobState",
    "LinkActions",
    "NetworkTrack",
    "NodeActions",
    "NodeInfo",
    "Note",
    "OomRanks",
    "Platform",
    "ReachesCheckpoints",
    "Replica",
    "SignalsRanks",
    "StorageActions",
    "StorageMode",
    "ThrottlesRanks",
    "register",
]


class Ability(str, Enum):
    """Something a platform can be asked to do; the only place abilities are named.

    The value is the name used in messages (``needs ability node-drain``)."""

    #: Signal the replica of a rank (``SignalsRanks``).
    SIGNAL_RANK = "signal-rank"
    #: Hold a rank's replica to a share of one CPU core until the undo (``ThrottlesRanks``).
    THROTTLE_RANK = "throttle-rank"
    #: Stop a rank's replica (its process tree) until the undo resumes it (``HangsRanks``).
    HANG_RANK = "hang-rank"
    #: Put a rank's replica under a memory limit it then outgrows, so that the kernel's
    #: OOM killer kills it (``OomRanks``).
    OOM_RANK = "oom-rank"
    #: Take a node away: its link cut, every process of it killed (``NodeActions``).
    NODE_DOWN = "node-down"
    #: Stop every process of a node until the undo thaws it (``NodeActions``).
    NODE_FREEZE = "node-freeze"
    #: Take a node out of scheduling and stop its work cleanly (``NodeActions``).
    NODE_DRAIN = "node-drain"
    #: Drop a share of a node's packets (``LinkActions``).
    LINK_LOSS = "link-loss"
    #: Rate-limit a node's link (``LinkActions``).
    LINK_SLOW = "link-slow"
    #: Set a node's link down, and up again on undo (``LinkActions``).
    LINK_FLAP = "link-flap"
    #: Drop every packet of a node, or those to and from one peer (``LinkActions``).
    LINK_CUT = "link-cut"
    #: Cut a node off the control plane only (``link_cut(node, peer="control-plane")``):
    #: its agent, kubelet or slurmd loses its controller while the job's own traffic still
    #: flows (``LinkActions``).
    LINK_CUT_CONTROL_PLANE = "link-cut-control-plane"
    #: Stop the control plane's processes until the undo resumes them.
    CONTROL_PLANE_PAUSE = "control-plane-pause"
    #: Cut the control plane off the network until the undo.
    CONTROL_PLANE_CUT = "control-plane-cut"
    #: Stop the control plane; the undo starts it again.
    CONTROL_PLANE_STOP = "control-plane-stop"
    #: The checkpoint directory refuses writes (EROFS) (``StorageActions``).
    STORAGE_READ_ONLY = "storage-read-only"
    #: The checkpoint directory's filesystem is full (ENOSPC) (``StorageActions``).
    STORAGE_FULL = "storage-full"
    #: The checkpoint directory's server stops answering (hang) or fails (EIO).
    STORAGE_UNREACHABLE = "storage-unreachable"
    #: The checkpoint directory's server answers, each request late (``StorageActions``).
    STORAGE_SLOW = "storage-slow"
    #: The job's data directory (the item's own, read by the workload's file-backed
    #: dataset) is served through a FUSE mirror whose server hangs or fails (EIO)
    #: (``StorageActions`` on the data directory).
    DATA_OUTAGE = "data-outage"
    #: The harness can read and damage the job's checkpoint files (``ReachesCheckpoints``).
    CHECKPOINT_FILES = "checkpoint-files"
    #: Per-node interface counters and round trips can be sampled (``NetworkTrack``).
    NETWORK_TRACK = "network-track"
    #: Start a copy of a rank's replica on its node; the undo stops it (``CopiesReplicas``).
    REPLICA_COPY = "replica-copy"

    def __str__(self) -> str:
        return self.value


#: The variables torchrun sets in each worker (rank, world, rendezvous). A harness that runs
#: under torchrun itself (a test) must not hand them to the job it launches.
TORCHRUN_ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_RUN_ID",
)


class JobState(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    RESTARTING = "restarting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def ended(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED)


@dataclass(frozen=True)
class NodeInfo:
    name: str
    address: str
    state: (
        str  # "up" | "down" | "frozen" | "drained" | "spare" | "unusable" (failed its preparation)
    )
    spare: bool = False


@dataclass(frozen=True)
class JobSpec:
    """Everything a platform needs to launch the job, resolved from the plan."""

    run_id: str
    task_id: str
    argv: Sequence[str]  # what each replica runs after the launcher, e.g. ["-m", "pkg", ...]
    env: dict[str, str]
    nodes: Sequence[str]
    procs_per_node: int
    min_nodes: int
    max_nodes: int
    max_restarts: int
    work_dir: Path
    events_dir: Path
    extra: dict[str, str] = field(default_factory=dict)


class Platform(ABC):
    """One job on one platform. Not thread-safe except ``poll``/``replicas``/``stop``."""

    name: ClassVar[str]
    #: The replicas are processes of this host (their pids and start times are this
    #: host's ``/proc``): the sampler then follows their exits by event.
    host_processes: ClassVar[bool] = False
    #: The events file (``<stream>.jsonl``) and kind of the platform event that commits a
    #: checkpoint (the platform resumes only from checkpoints it recorded so, e.g. Ray
    #: Train's report); ``None``: every completed save is one it can resume from. A
    #: trigger "after checkpoint K" then waits for the K-th commit too, so that a drill
    #: tests the hand-over, not the race between a save and its commit.
    checkpoint_commits: ClassVar[tuple[str, str] | None] = None

    def __init__(self, resources: Resources, work_dir: Path, ledger: Ledger, sink: EventSink):
        self.resources = resources
        self.work_dir = work_dir
        self.ledger = ledger
        self.sink = sink
        self._state = JobState.PENDING
        self.job: JobSpec | None = None

    # --- abilities --------------------------------------------------------------------

    @classmethod
    def abilities_for(cls, resources: Resources) -> frozenset[Ability]:
        """Abilities this platform has with this resource layout (on any machine: what
        this machine lacks now is :meth:`machine_lacks`)."""
        return frozenset()

    @classmethod
    def why_not(cls, ability: Ability, resources: Resources) -> str:
        """What would make ``ability`` possible on this platform, for the plan validator's
        error (``set resources.isolation: netns (as root)``); called only for an ability
        that ``abilities_for(resources)`` lacks."""
        return f"platform {cls.name!r} does not offer it"

    @classmethod
    def machine_lacks(cls, abilities: frozenset[Ability]) -> dict[Ability, str]:
        """Of ``abilities`` (which the platform has), those this machine cannot provide now,
        each with what is missing and its fix. Plans are validated against the platform
        alone, so a recorded run can be re-judged anywhere; this is checked before a run."""
        return {}

    @classmethod
    def host_lacks(cls, resources: Resources) -> str | None:
        """What this machine lacks to host this layout at all (namespaces need root...),
        with its fix; None when nothing is missing. Checked before a run writes anything;
        ``faultdrill validate`` says it too."""
        return None

    @classmethod
    def run_scope(
        cls, resources: Resources, run_dir: Path
    ) -> contextlib.AbstractContextManager[None]:
        r"""Held open around every item of one run (baseline, scenarios, controls): what
        the items share. Default: nothing. An adapter whose cluster is costly to bring up
        (an embedded Ray, Slurm or Kubernetes cluster) brings it up once per run while the
        scope is open, in a ledger of its own under ``run_dir`` (recorded before each
        change, listed for ``faultdrill cleanup`` like an item's), and takes it down when
        the scope closes, whatever the reason (also on an error or a signal); an item's
        platform constructed outside any scope brings up its own. Each item still starts
        from a cluster in its planned state: the adapter restores it between items, and an
        item's ledger :meth:`~faultdrill.ledger.Ledger.share`\ s the scope's run id (its
        faults name the shared cluster's namespaces and processes)."""
        return contextlib.nullcontext()

    @classmethod
    def variant_for(cls, resources: Resources) -> type[Platform]:
        """The class that runs this layout (an adapter may pick a subclass, e.g. for
        ``isolation: netns``). Construct platforms through this."""
        return cls

    # --- the contract (final) -----------------------------------------------------------

    def prepare(self) -> None:
        """Create the platform's resources (nodes, groups). Recorded in the ledger first.
        Raises EnvironmentPrepError when the machine cannot host the layout."""
        self._prepare()
        for node in self.nodes():
            self.sink.emit(
                "platform",
                "node",
                node=node.name,
                address=node.address,
                state=node.state,
                spare=node.spare,
            )

    def submit(self, job: JobSpec) -> None:
        """Start the job; returns once it is launched (does not wait for it to run)."""
        self.job = job
        self.sink.emit(
            "platform",
            "job_submitted",
            run_id=job.run_id,
            nodes=list(job.nodes),
            procs_per_node=job.procs_per_node,
            max_restarts=job.max_restarts,
        )
        self._submit(job)
        self._set_state(JobState.RUNNING)

    def resubmit(self) -> None:
        """Submit the same job again after it ended (the recovery operator's manual restart)."""
        if self.job is None:
            raise DrillError("resubmit before submit")
        self.sink.emit("platform", "job_resubmitted", run_id=self.job.run_id)
        self._state = JobState.PENDING
        self._submit(self.job)
        self._set_state(JobState.RUNNING)

    def resubmit_steps(self) -> list[dict[str, str]]:
        """What the recovery operator's manual restart is on this platform now, step by
        step: each a ``command`` and the ``permission`` it needs (the runbook shows them).
        Asked right before :meth:`resubmit`."""
        return [{"command": "resubmit the job unchanged", "permission": "may submit the job"}]

    def poll(self) -> JobState:
        """The job's state now; records every change as a ``job_state`` event."""
        if not self._state.ended:
            self._set_state(self._poll())
        return self._state

    @abstractmethod
    def replicas(self) -> list[Replica]:
        """Live processes of the job now (agents and workers), read from the system."""

    @abstractmethod
    def nodes(self) -> list[NodeInfo]:
        """The nodes of this job's layout, spares included."""

    def stop(self, grace_s: float = 5.0, reason: str = "end of drill") -> None:
        """Stop everything of the job: TERM, wait up to ``grace_s``, then KILL. Idempotent."""
        if not self._any_alive():
            if not self._state.ended:
                self._set_state(self._poll())
            return
        self.sink.emit("platform", "job_stop", reason=reason, grace_s=grace_s)
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while self._any_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._any_alive():
            self.sink.emit("platform", "job_kill", reason="still alive after grace period")
            self._signal_all(signal.SIGKILL)
            deadline = time.monotonic() + 5.0
            while self._any_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
        if self._any_alive():
            raise DrillError(f"job {self.job.run_id if self.job else '?'} survived SIGKILL")
        if not self._state.ended:
            self._set_state(JobState.STOPPED)

    def leftovers(self) -> list[str]:
        """Resources of the job other than processes that are still held now (mounts,
        frozen groups, network rules...). Called after the job ended; empty when clean."""
        return []

    def teardown(self) -> None:
        """Release the platform's resources (idempotent; also runs after a failed prepare)."""
        self._teardown()

    # --- hooks for adapters -----------------------------------------------------------

    @abstractmethod
    def _prepare(self) -> None: ...

    @abstractmethod
    def _submit(self, job: JobSpec) -> None: ...

    @abstractmethod
    def _poll(self) -> JobState: ...

    @abstractmethod
    def _signal_all(self, sig: int) -> None: ...

    @abstractmethod
    def _any_alive(self) -> bool: ...

    @abstractmethod
    def _teardown(self) -> None: ...

    def _set_state(self, state: JobState) -> None:
        if state != self._state:
            self.sink.emit("platform", "job_state", state=state.value, previous=self._state.value)
            self._state = state


# --- actions: one protocol per group of abilities -----------------------------------------


@runtime_checkable
class SignalsRanks(Protocol):
    """Ability ``signal-rank``: the replica of a rank, and a signal to it."""

    def rank_replica(self, *, rank: int | None = None, node: str | None = None) -> Replica:
        """The live replica (``role == "worker"``, never a child of one) that holds
        ``rank``, or the lowest rank on ``node``; a replica the platform launched before a
        stray process that merely claims the rank. Raises FaultError when none is alive."""
        ...

    def signal_replica(self, replica: Replica, sig: str) -> Change:
        """Deliver ``sig`` (``"SIGKILL"``, ``"SIGTERM"``) to ``replica`` (on a pod
        platform: to its container's process, or a pod deletion for SIGKILL). Irreversible.
        Its ``apply`` raises ProcessLookupError when the replica is gone (never signals a
        reused pid) and returns at least ``pid``, ``rank``, ``node``, ``signal``."""
        ...

    def replica_alive(self, replica: Replica) -> bool:
        """Whether this very replica (pid and start time) still runs."""
        ...


@runtime_checkable
class ThrottlesRanks(Protocol):
    """Ability ``throttle-rank``: a rank's replica made a straggler (found with
    :meth:`SignalsRanks.rank_replica`)."""

    def throttle_replica(self, replica: Replica, cpu_percent: int) -> Change:
        """Hold ``replica`` and every process it started (and starts while throttled) to
        ``cpu_percent`` % of one CPU core. Reversible: the undo gives them their CPU back
        and removes whatever held them. Its ``apply`` raises ProcessLookupError when the
        replica is gone, and returns at least ``pid``, ``rank``, ``node``,
        ``cpu_percent`` and ``throttled`` (how many processes)."""


@runtime_checkable
class HangsRanks(Protocol):
    """Ability ``hang-rank``: a rank's replica hangs while its node, agent and connections
    stay up (what a worker stuck in a collective looks like to its peers)."""

    def rank_replica(self, *, rank: int | None = None, node: str | None = None) -> Replica:
        """As :meth:`SignalsRanks.rank_replica`."""
        ...

    def hang_replica(self, replica: Replica) -> list[Change]:
        """Stop ``replica`` and its children (SIGSTOP, the replica first, so it starts no
        new child); each undo resumes one of them (SIGCONT, only to the same pid and start
        time). Its ``apply`` raises ProcessLookupError when the replica is gone before it
        was stopped (a child gone meanwhile is skipped) and returns ``pid``, ``rank``,
        ``node``."""
        ...


@runtime_checkable
class OomRanks(Protocol):
    """Ability ``oom-rank``: a rank's replica killed by the kernel's OOM killer, because
    it outgrew a memory limit placed on it (never a signal from the drill)."""

    def oom_cap(self, replica: Replica, *, limit_mb: int, alloc_mb: int) -> list[Change]:
        """Put ``replica`` (and the children it starts from then on) under a memory limit
        of ``limit_mb`` MiB of its own, and ask the workload to allocate ``alloc_mb`` MiB
        in it. Reversible: the undo lifts the limit (the members go back where they came
        from, the group is removed) and withdraws the request. Apply results: ``memcg``,
        ``limit_bytes``, ``alloc_mb``. Raises FaultError when the machine cannot (not
        root, no memory controller); a change's ``apply`` raises ProcessLookupError when
        the replica is gone."""
        ...

    def oom_join(self, replica: Replica) -> None:
        """Put a later replica of the same rank under the cap :meth:`oom_cap` made (the
        limit stays across restarts). Raises FaultError when there is no cap."""
        ...

    def oom_kill_count(self) -> int | None:
        """How many processes the kernel's OOM killer killed under the cap so far (the
        memory group's ``oom_kill``); None when there is no cap to read."""
        ...


@runtime_checkable
class CopiesReplicas(Protocol):
    """Ability ``replica-copy``: a second process for a rank, started as the platform
    started the first (what a platform that failed to stop an old replica leaves running:
    the harness-side ``stale-copy`` control)."""

    def replica_copy(self, replica: Replica) -> Change:
        """Start a copy of ``replica`` on its node: its command line, environment and
        working directory, its output in a log of its own. Reversible: the undo stops the
        copy and every process it started. Its ``apply`` raises ProcessLookupError when
        ``replica`` is gone before it could be read, and returns ``copy_pid``,
        ``copy_of``, ``rank``, ``node``."""
        ...


@runtime_checkable
class NodeActions(Protocol):
    """Abilities ``node-down``, ``node-freeze``, ``node-drain``: a node as a whole. The
    platform keeps its own view of node states (events ``node_state``) in step."""

    def node_down(self, node: str) -> list[Change]:
        """The node is gone: peers hear silence (link cut first), then every process of
        it is killed. Apply results: ``killed`` (what was killed) and the link's facts."""
        ...

    def node_freeze(self, node: str) -> list[Change]:
        """Every process of the node stopped; the undo thaws them. Apply results:
        ``frozen`` (pids), ``freezer_state``."""
        ...

    def node_drain(self, node: str) -> list[Change]:
        """The node is taken out of scheduling and its work stopped cleanly (on a
        scheduler the undo resumes it; the local platform stops its agent). Raises
        FaultError when the node runs nothing to drain."""
        ...


@runtime_checkable
class LinkActions(Protocol):
    """Abilities ``link-loss``, ``link-slow``, ``link-flap``, ``link-cut``: a node's own
    network link (never the host's). Every rule a change applies is also known to the
    network track while it is in place."""

    def link_loss(self, node: str, percent: float, *, peer: str | None = None) -> list[Change]:
        """Drop ``percent`` % of the node's packets each way (only those to and from
        ``peer`` when given). Apply results: ``rule``, ``dev``."""
        ...

    def link_slow(self, node: str, *, rate: str, burst: str, queue_ms: int) -> list[Change]:
        """Rate-limit the node's link to ``rate`` (a tbf: ``burst``, at most ``queue_ms``
        of queue) on both of its ends."""
        ...

    def link_down(self, node: str) -> Change:
        """Set the node's link down; the undo sets it up (one flap)."""
        ...

    def link_cut(self, node: str, *, peer: str | None = None) -> list[Change]:
        """Drop every packet of the node each way (or only those to and from ``peer``;
        ``peer="control-plane"``: only its traffic with the control plane, ability
        ``link-cut-control-plane``). Apply results: ``rule``, ``dev``."""
        ...


@runtime_checkable
class ControlPlaneActions(Protocol):
    """Abilities ``control-plane-pause``, ``-cut``, ``-stop``: what coordinates the job
    (the c10d rendezvous store; slurmctld, the Ray GCS, kube-apiserver)."""

    def control_plane_label(self) -> str:
        """What the control plane is, in words (for the timeline and the report)."""
        ...

    def control_plane_pause(self) -> list[Change]:
        """Stop its processes (SIGSTOP); the undo resumes them. Raises FaultError when
        no live process hosts it. Apply results: ``pid``, ``node``."""
        ...

    def control_plane_cut(self) -> list[Change]:
        """Drop its traffic on its node's link. Raises FaultError before the job runs.
        Apply results: ``rule``, ``node``, ``port``, ``dev``."""
        ...

    def control_plane_stop(self) -> list[Change]:
        """Stop it; the undo starts it again (a controller restart)."""
        ...


@runtime_checkable
class StorageActions(Protocol):
    """Abilities ``storage-read-only``, ``storage-full``, ``storage-unreachable``,
    ``storage-slow``: the job's checkpoint directory (``ckpt_dir``, resolved, inside the item's directory) fails
    as a storage system would. Raises FaultError when the machine cannot (not root)."""

    def storage_prepare(self, mode: StorageMode, ckpt_dir: Path, *, size_mb: int) -> list[Change]:
        """What the outage needs in place before the job starts (``full``: a small
        filesystem of ``size_mb``; ``unreachable``, ``slow``: the directory served by a
        server the fault can take away or slow down; ``read-only``: nothing). Undone at the
        end of the item."""
        ...

    def storage_read_only(self, ckpt_dir: Path) -> list[Change]:
        """Writes fail with EROFS until the undo. Apply results: ``write_error``."""
        ...

    def storage_full(self, ckpt_dir: Path, *, leave_free_kb: int) -> list[Change]:
        """The prepared filesystem filled until ``leave_free_kb`` remain (ENOSPC for a
        checkpoint, small writes still fit). Apply results: ``filler_bytes``,
        ``free_bytes``."""
        ...

    def storage_unreachable(self, ckpt_dir: Path, *, server: str) -> list[Change]:
        """The prepared server stops answering (``hang``) or fails every request with EIO
        (``error``) until the undo."""
        ...

    def storage_slow(self, ckpt_dir: Path, *, latency_ms: int, ops: str) -> list[Change]:
        """The prepared server answers each request ``latency_ms`` late (``ops``: ``write``,
        the requests that change the directory; ``all``) until the undo."""
        ...

    def storage_release(self, ckpt_dir: Path) -> None:
        """The drill no longer reads the directory through :meth:`ReachesCheckpoints.
        checkpoint_view` (handles kept for it may go). Idempotent."""
        ...


@runtime_checkable
class ReachesCheckpoints(Protocol):
    """Ability ``checkpoint-files``: the harness reads (and a fault damages) the job's
    checkpoint files."""

    def checkpoint_view(self, ckpt_dir: Path) -> Path:
        """Where the harness reads ``ckpt_dir`` now: the directory itself, or a way to its
        files that still answers while a storage outage makes ``ckpt_dir`` hang."""
        ...


@runtime_checkable
class NetworkTrack(Protocol):
    """Ability ``network-track``: sample per-node network counters and round trips."""

    def start_network_track(self, hz: float) -> None: ...


PLATFORMS: dict[str, type[Platform]] = {}


def register(cls: type[Platform]) -> type[Platform]:
    if cls.name in PLATFORMS:
        raise DrillError(f"platform {cls.name!r} registered twice")
    PLATFORMS[cls.name] = cls
    return cls
