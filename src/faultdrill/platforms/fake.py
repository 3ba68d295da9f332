"""A fake platform, shipped with the product (as httpx ships ``MockTransport``).

:class:`FakePlatform` runs no job and touches nothing: the job "succeeds" at its first
poll, and every action a fault asks of it (``node_drain``, ``link_loss``...) is recorded,
with what became of the :class:`~faultdrill.platforms.api.Change` it handed out: whether
the change was in the ledger before it was applied, and how often its undo ran. It can be
told to fail an action or a verb, and declares the abilities it is given. Engine and fault
tests use it; a plan may select it (``resources.platform: fake``) to try a plan's shape
without a cluster, and what such a run reports proves nothing about any platform.

Its changes are ledger entries of kind ``fake-change``, whose undo only counts (in the live
fake that made them; a replay by ``faultdrill cleanup`` in another process finds nothing to
do), so a ledger written by a fake run is always cleanable.
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from faultdrill.errors import FaultError
from faultdrill.ledger import undoer
from faultdrill.platforms.api import (
    Ability,
    Change,
    JobSpec,
    JobState,
    NodeInfo,
    Note,
    Platform,
    Replica,
    StorageMode,
    register,
)

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.ledger import Ledger
    from faultdrill.plan import Resources

__all__ = ["FakeChange", "FakePlatform"]

_LIVE: weakref.WeakValueDictionary[str, FakePlatform] = weakref.WeakValueDictionary()

Hook = Callable[["FakePlatform"], None]


@dataclass
class FakeChange:
    """One change the fake handed out, and what became of it."""

    action: str
    args: dict[str, Any]
    token: str
    reversible: bool = True
    #: When it was applied: whether its ledger entry existed then, not yet applied.
    recorded_first: bool | None = None
    applied: bool = False
    undone: int = 0


@undoer("fake-change", owns={})  # acts on this process's fakes only
def _undo_fake(data: dict[str, Any]) -> None:
    """Count the undo in the live fake that made the change (none: nothing to do)."""
    platform = _LIVE.get(str(data.get("platform")))
    if platform is not None:
        platform._undone(str(data.get("token")))


@register
class FakePlatform(Platform):
    """No job, no machine: records what it is asked (see the module docstring).

    ``asked`` lists every action and verb called, in order, as (name, arguments);
    ``changes`` every change handed out; ``jobs`` every job submitted. Settings are class
    attributes, so that code constructing platforms by class (the engine) gets them: make
    a configured class with :meth:`scripted`.
    """

    name = "fake"
    #: The abilities it declares (all of them unless :meth:`scripted` says otherwise).
    declared: ClassVar[frozenset[Ability]] = frozenset(Ability)
    #: Action or verb name -> exception: a change of that action raises it when applied
    #: (after it was recorded); a verb (``prepare``, ``submit``, ``stop``, ``teardown``)
    #: raises it when called.
    fail: ClassVar[Mapping[str, BaseException]] = {}
    #: Verb name -> callable run (with the platform) when the verb is called.
    on: ClassVar[Mapping[str, Hook]] = {}
    #: Every instance of this class, oldest first (the engine makes its own).
    instances: ClassVar[list[FakePlatform]] = []

    @classmethod
    def scripted(
        cls,
        *,
        abilities: Iterable[Ability] | None = None,
        fail: Mapping[str, BaseException] | None = None,
        on: Mapping[str, Hook] | None = None,
    ) -> type[FakePlatform]:
        """A subclass with these settings (and its own ``instances``)."""
        attrs: dict[str, Any] = {
            "declared": frozenset(Ability if abilities is None else abilities),
            "fail": dict(fail or {}),
            "on": dict(on or {}),
            "instances": [],
        }
        return type("ScriptedFakePlatform", (cls,), attrs)

    def __init__(
        self, resources: Resources, work_dir: Path, ledger: Ledger, sink: EventSink
    ) -> None:
        super().__init__(resources, work_dir, ledger, sink)
        self.id = uuid.uuid4().hex[:12]
        self.asked: list[tuple[str, dict[str, Any]]] = []
        self.changes: list[FakeChange] = []
        self.jobs: list[JobSpec] = []
        self.killed: set[int] = set()
        #: Replicas its ``oom_cap`` "OOM-killed" (the kernel's count, as ``oom_kill_count``).
        self.oom_kills = 0
        self._prepared: str | None = None
        _LIVE[self.id] = self
        type(self).instances.append(self)

    # --- abilities --------------------------------------------------------------------------

    @classmethod
    def abilities_for(cls, resources: Resources) -> frozenset[Ability]:
        return cls.declared

    @classmethod
    def why_not(cls, ability: Ability, resources: Resources) -> str:
        return "the fake platform was not given it (FakePlatform.scripted(abilities=...))"

    # --- what it records --------------------------------------------------------------------

    def _verb(self, name: str, **args: Any) -> None:
        self.asked.append((name, args))
        if name in self.on:
            self.on[name](self)
        if name in self.fail:
            raise self.fail[name]

    def _change(
        self, action: str, args: dict[str, Any], command: str, *, reversible: bool = True
    ) -> Change:
        """A change of ``action`` (recorded as asked), whose apply checks that its ledger
        entry came first and fails when told to."""
        self.asked.append((action, args))
        return self._make_change(action, args, command, reversible=reversible)

    def _make_change(
        self, action: str, args: dict[str, Any], command: str, *, reversible: bool = True
    ) -> Change:
        token = uuid.uuid4().hex[:12]
        record = FakeChange(action, args, token, reversible)
        self.changes.append(record)

        def apply(note: Note) -> dict[str, Any]:
            record.recorded_first = any(
                e.data.get("token") == token and not e.applied for e in self.ledger.entries.values()
            )
            if action in self.fail:
                raise self.fail[action]
            record.applied = True
            return {"fake": token}

        data = {"platform": self.id, "token": token, "action": action}
        label = f"fake {action} {args}"
        return Change("fake-change", data, label, command, apply, reversible=reversible)

    def _undone(self, token: str) -> None:
        for record in self.changes:
            if record.token == token:
                record.undone += 1

    def asked_names(self) -> list[str]:
        """The names of what it was asked, in order."""
        return [name for name, _ in self.asked]

    # --- the contract -------------------------------------------------------------------------

    def replicas(self) -> list[Replica]:
        return []

    def nodes(self) -> list[NodeInfo]:
        res = self.resources
        names = [f"n{i}" for i in range(1, res.nodes + res.spares + 1)]
        return [
            NodeInfo(n, f"fake://{n}", "spare" if i > res.nodes else "up", i > res.nodes)
            for i, n in enumerate(names, start=1)
        ]

    def _prepare(self) -> None:
        self._verb("prepare")
        change = self._make_change("prepare", {}, "")
        eid = self.ledger.record(change.kind, change.data, change.label)
        change.apply(lambda **_: None)
        self.ledger.mark_applied(eid)
        self._prepared = eid

    def _submit(self, job: JobSpec) -> None:
        self._verb("submit", run_id=job.run_id)
        self.jobs.append(job)

    def _poll(self) -> JobState:
        return JobState.SUCCEEDED

    def _signal_all(self, sig: int) -> None:
        pass

    def _any_alive(self) -> bool:
        return False

    def stop(self, grace_s: float = 5.0, reason: str = "end of drill") -> None:
        self._verb("stop", reason=reason)
        super().stop(grace_s, reason)

    def _teardown(self) -> None:
        self._verb("teardown")
        if self._prepared is not None:
            self.ledger.revert(self._prepared)

    # --- SignalsRanks -------------------------------------------------------------------------

    def rank_replica(self, *, rank: int | None = None, node: str | None = None) -> Replica:
        self.asked.append(("rank_replica", {"rank": rank, "node": node}))
        res = self.resources
        ranks = range(res.world_size)
        if node is not None:
            on_node = [r for r in ranks if f"n{r // res.procs_per_node + 1}" == node]
            rank = on_node[0] if on_node else None
        if rank is None or rank not in ranks:
            raise FaultError(f"no live worker holds {rank if node is None else node}")
        pid = -(1000 + rank)  # never a real process
        if pid in self.killed:
            raise FaultError(f"no live worker holds rank {rank}")
        return Replica(pid, 0, "worker", f"n{rank // res.procs_per_node + 1}", rank)

    def signal_replica(self, replica: Replica, sig: str) -> Change:
        args = {"pid": replica.pid, "rank": replica.rank, "signal": sig}
        change = self._change(
            "signal_replica", args, f"fake: {sig} rank {replica.rank}", reversible=False
        )
        inner = change.apply

        def apply(note: Note) -> dict[str, Any]:
            facts = inner(note) or {}
            if sig == "SIGKILL":
                self.killed.add(replica.pid)
            return {**facts, "pid": replica.pid, "rank": replica.rank, "node": replica.node}

        return Change(
            change.kind, change.data, change.label, change.command, apply, reversible=False
        )

    def replica_alive(self, replica: Replica) -> bool:
        """Alive until it got a SIGKILL (a fake replica ignores SIGTERM)."""
        return replica.pid not in self.killed

    # --- ThrottlesRanks -----------------------------------------------------------------------

    def throttle_replica(self, replica: Replica, cpu_percent: int) -> Change:
        args = {"pid": replica.pid, "rank": replica.rank, "cpu_percent": cpu_percent}
        change = self._change(
            "throttle_replica", args, f"fake: rank {replica.rank} at {cpu_percent} % CPU"
        )
        return change.with_facts(
            pid=replica.pid,
            rank=replica.rank,
            node=replica.node,
            cpu_percent=cpu_percent,
            throttled=1,
        )

    # --- HangsRanks ---------------------------------------------------------------------------

    def hang_replica(self, replica: Replica) -> list[Change]:
        args = {"pid": replica.pid, "rank": replica.rank, "node": replica.node}
        change = self._change("hang_replica", args, f"fake: stop rank {replica.rank}")
        return [change.with_facts(pid=replica.pid, rank=replica.rank, node=replica.node)]

    # --- OomRanks ----------------------------------------------------------------------------

    def oom_cap(self, replica: Replica, *, limit_mb: int, alloc_mb: int) -> list[Change]:
        """A cap, and a request whose apply "OOM-kills" the replica (as the kernel would)."""
        args = {"pid": replica.pid, "rank": replica.rank, "limit_mb": limit_mb}
        cap = self._change("oom_cap", args, f"fake: limit rank {replica.rank} to {limit_mb} MiB")
        ask = self._make_change("oom_request", {"alloc_mb": alloc_mb}, "fake: allocate")

        def killed() -> None:
            self.killed.add(replica.pid)
            self.oom_kills += 1

        return [
            cap.with_facts(memcg=f"fake/oom-r{replica.rank}", limit_bytes=limit_mb << 20),
            ask.followed_by(killed).with_facts(alloc_mb=alloc_mb),
        ]

    def oom_join(self, replica: Replica) -> None:
        self.asked.append(("oom_join", {"pid": replica.pid, "rank": replica.rank}))

    def oom_kill_count(self) -> int | None:
        return self.oom_kills

    # --- CopiesReplicas -----------------------------------------------------------------------

    def replica_copy(self, replica: Replica) -> Change:
        args = {"pid": replica.pid, "rank": replica.rank, "node": replica.node}
        change = self._change("replica_copy", args, f"fake: copy of rank {replica.rank}")
        return change.with_facts(copy_of=replica.pid, rank=replica.rank, node=replica.node)

    # --- NodeActions, LinkActions ---------------------------------------------------------------

    def node_down(self, node: str) -> list[Change]:
        return [
            self._change("node_down", {"node": node}, f"fake: node {node} down", reversible=False)
        ]

    def node_freeze(self, node: str) -> list[Change]:
        return [self._change("node_freeze", {"node": node}, f"fake: freeze {node}")]

    def node_drain(self, node: str) -> list[Change]:
        return [self._change("node_drain", {"node": node}, f"fake: drain {node}")]

    def link_loss(self, node: str, percent: float, *, peer: str | None = None) -> list[Change]:
        args = {"node": node, "percent": percent, "peer": peer}
        return [self._change("link_loss", args, f"fake: {percent:g} % loss on {node}")]

    def link_slow(self, node: str, *, rate: str, burst: str, queue_ms: int) -> list[Change]:
        args = {"node": node, "rate": rate, "burst": burst, "queue_ms": queue_ms}
        return [self._change("link_slow", args, f"fake: {node} at {rate}")]

    def link_down(self, node: str) -> Change:
        return self._change("link_down", {"node": node}, f"fake: link of {node} down")

    def link_cut(self, node: str, *, peer: str | None = None) -> list[Change]:
        args = {"node": node, "peer": peer}
        return [self._change("link_cut", args, f"fake: cut {node}")]

    # --- ControlPlaneActions ---------------------------------------------------------------------

    def control_plane_label(self) -> str:
        return "the fake control plane"

    def control_plane_pause(self) -> list[Change]:
        return [self._change("control_plane_pause", {}, "fake: pause the control plane")]

    def control_plane_cut(self) -> list[Change]:
        return [self._change("control_plane_cut", {}, "fake: cut the control plane")]

    def control_plane_stop(self) -> list[Change]:
        return [self._change("control_plane_stop", {}, "fake: stop the control plane")]

    # --- StorageActions, ReachesCheckpoints ----------------------------------------------------

    def storage_prepare(self, mode: StorageMode, ckpt_dir: Path, *, size_mb: int) -> list[Change]:
        if mode == "read-only":
            return []
        args = {"mode": mode, "path": str(ckpt_dir), "size_mb": size_mb}
        return [self._change("storage_prepare", args, f"fake: prepare {mode} storage")]

    def storage_read_only(self, ckpt_dir: Path) -> list[Change]:
        args = {"path": str(ckpt_dir)}
        return [self._change("storage_read_only", args, "fake: storage read-only")]

    def storage_full(self, ckpt_dir: Path, *, leave_free_kb: int) -> list[Change]:
        args = {"path": str(ckpt_dir), "leave_free_kb": leave_free_kb}
        return [self._change("storage_full", args, "fake: storage full")]

    def storage_unreachable(self, ckpt_dir: Path, *, server: str) -> list[Change]:
        args = {"path": str(ckpt_dir), "server": server}
        return [self._change("storage_unreachable", args, f"fake: storage server {server}")]

    def storage_slow(self, ckpt_dir: Path, *, latency_ms: int, ops: str) -> list[Change]:
        args = {"path": str(ckpt_dir), "latency_ms": latency_ms, "ops": ops}
        return [self._change("storage_slow", args, f"fake: storage {latency_ms} ms per {ops}")]

    def storage_release(self, ckpt_dir: Path) -> None:
        self.asked.append(("storage_release", {"path": str(ckpt_dir)}))

    def checkpoint_view(self, ckpt_dir: Path) -> Path:
        return ckpt_dir

    # --- NetworkTrack -------------------------------------------------------------------------------

    def start_network_track(self, hz: float) -> None:
        self.asked.append(("start_network_track", {"hz": hz}))
