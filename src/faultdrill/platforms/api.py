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

Optional abilities are named strings a platform declares for a given resource layout
(``abilities_for``); a fault lists the abilities it needs (``Fault.requires``) and the plan
validator refuses the combination before any drill starts. The protocols below are the
methods behind each ability.
"""

from __future__ import annotations

import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from faultdrill.errors import DrillError

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.ledger import Ledger
    from faultdrill.plan import Resources

__all__ = [
    "ABILITY_NETWORK_LINKS",
    "ABILITY_NETWORK_TRACK",
    "ABILITY_NODE_CONTROL",
    "ABILITY_SIGNAL_WORKERS",
    "PLATFORMS",
    "JobSpec",
    "JobState",
    "NetworkLinks",
    "NetworkTrack",
    "NodeControl",
    "NodeInfo",
    "Platform",
    "Replica",
    "SignalsWorkers",
    "register",
]

ABILITY_SIGNAL_WORKERS = "signal-workers"
#: Each node has its own network link that faults can degrade (``NetworkLinks``).
ABILITY_NETWORK_LINKS = "network-links"
#: Nodes can be taken down, frozen and drained as a whole (``NodeControl``).
ABILITY_NODE_CONTROL = "node-control"
#: Per-node interface counters and round trips can be sampled (``NetworkTrack``).
ABILITY_NETWORK_TRACK = "network-track"


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
class Replica:
    """A live process of the job, as the platform sees it now.

    ``role``: ``agent`` (a launcher, e.g. torchrun's agent), ``worker`` (the replica of a
    rank: the process the launcher started for it), ``child`` (a descendant of a replica:
    DataLoader workers, helpers; ``owner`` is the replica's pid) or ``other``. Which
    rank-holding process is a replica and which a child is decided by
    :mod:`faultdrill.lineage`, the same way for every platform."""

    pid: int
    start_time: int
    role: str  # "agent" | "worker" | "child" | "other"
    node: str
    rank: int | None = None
    restart_count: int | None = None
    ppid: int | None = None
    sid: int | None = None
    owner: int | None = None


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

    def __init__(self, resources: Resources, work_dir: Path, ledger: Ledger, sink: EventSink):
        self.resources = resources
        self.work_dir = work_dir
        self.ledger = ledger
        self.sink = sink
        self._state = JobState.PENDING
        self.job: JobSpec | None = None

    # --- abilities --------------------------------------------------------------------

    @classmethod
    def abilities_for(cls, resources: Resources) -> frozenset[str]:
        """Abilities this platform has with this resource layout."""
        return frozenset()

    @classmethod
    def machine_lacks(cls, abilities: frozenset[str]) -> dict[str, str]:
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


@runtime_checkable
class SignalsWorkers(Protocol):
    """Ability ``signal-workers``: find the pids that hold a rank or live on a node."""

    def worker_pids(self, *, rank: int | None = None, node: str | None = None) -> list[Replica]: ...


@runtime_checkable
class NetworkLinks(Protocol):
    """Ability ``network-links``: each node's link (namespace, interface, address), and a
    registry of the rules faults have applied, for the network track."""

    def link(self, node: str) -> Any: ...

    def links(self) -> list[Any]: ...

    def add_rule(self, rule: Any) -> None: ...

    def drop_rule(self, rule_id: str) -> None: ...


@runtime_checkable
class NodeControl(Protocol):
    """Ability ``node-control``: a node's processes, agent and state, as a whole."""

    def node_pids(self, node: str) -> list[int]: ...

    def agent_pid(self, node: str) -> int | None: ...

    def set_node_state(self, node: str, state: str, reason: str) -> None: ...


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
