"""Which process is a rank's replica, and which processes belong to one.

A real training process is rarely alone: DataLoader workers (``fork``, ``spawn`` or
``forkserver``), compile workers, an async checkpoint writer, a logger's service process or
a tool run with ``subprocess`` are its children, and most of them inherit its environment
(``RANK``...). Counting each of them as a second holder of the rank raised a false alarm
on every real job, so the rule is:

* a **replica** of a rank is a process that holds the rank (a ``worker`` as the platform
  describes it) and has no ancestor among the job's processes that is itself a replica or
  part of one: the process the launcher started for the rank;
* a **child** is any other process of the job below a replica (``role="child"``,
  ``owner`` = the replica's pid), found by its parent chain at the first sample it appears
  in. A process first seen after its parent died (reparented to init) is still found by
  its session: torchrun starts each worker as a session leader, and DataLoader workers
  stay in that session (``sid`` = the replica's pid);
* offline, a process that announced itself with ``run_start`` is a replica whatever its
  parentage (a launcher that runs ``sh -c "python train.py"`` makes ``sh`` the rank holder
  the platform sees first; ``sh`` is then a ``wrapper`` and ``python`` the replica).

Agents (launchers) are never children. Nothing here reads /proc: these are pure functions
over what a platform or a recorded timeline says, so the live classification (faults pick
their victim among replicas) and the offline one (checks) are the same rule.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from faultdrill.host.api import Replica

__all__ = ["Lineage", "ProcFacts", "assign_owners", "promote_announced"]

Key = tuple[int, int]  # (pid, start time): a pid alone is reused


@dataclass(frozen=True)
class ProcFacts:
    """What lineage needs of one process."""

    pid: int
    start_time: int
    role: str  # "agent" | "worker" | "other" as the platform describes it
    ppid: int | None = None
    sid: int | None = None

    @property
    def key(self) -> Key:
        return (self.pid, self.start_time)


def assign_owners(
    procs: Iterable[ProcFacts],
    memo: dict[Key, int | None],
    replicas_seen: set[int],
) -> dict[Key, int | None]:
    """For each process of one sample: the pid of the replica it belongs to, or None for a
    replica itself (and for agents and processes outside any replica).

    ``memo`` keeps every decision made earlier, keyed by (pid, start time), so that a child
    keeps its owner once its parent is gone; ``replicas_seen`` collects the pids of every
    replica ever decided (a session leader that died still owns its session). Both are
    updated in place. A parent is decided before its children, so one sample suffices for
    a whole tree."""
    sample = _Sample(procs, memo, replicas_seen)
    return {p.key: sample.owner(p) for p in sample.procs}


class _Sample:
    def __init__(
        self, procs: Iterable[ProcFacts], memo: dict[Key, int | None], replicas_seen: set[int]
    ) -> None:
        self.procs = sorted(procs, key=lambda p: (p.start_time, p.pid))
        self.by_pid = {p.pid: p for p in self.procs}
        self.memo = memo
        self.replicas_seen = replicas_seen

    def owner(self, p: ProcFacts, depth: int = 0) -> int | None:
        if p.key in self.memo:
            owner = self.memo[p.key]
            if owner is None and p.role == "worker":  # an agent's fork that has exec'd since
                self.replicas_seen.add(p.pid)
            return owner
        owner = None if p.role == "agent" else self._by_parent(p, depth)
        if owner is None and p.role != "agent" and p.sid not in (None, p.pid):
            owner = p.sid if p.sid in self.replicas_seen else None
        self.memo[p.key] = owner
        if owner is None and p.role == "worker":
            self.replicas_seen.add(p.pid)
        return owner

    def _by_parent(self, p: ProcFacts, depth: int) -> int | None:
        parent = self.by_pid.get(p.ppid) if p.ppid is not None else None
        if parent is None or parent.pid == p.pid or parent.role == "agent" or depth > 64:
            return None
        above = self.owner(parent, depth + 1)
        if above is not None:
            return above
        return parent.pid if parent.role == "worker" else None


class Lineage:
    """The live classification of one job's processes: remembers every decision, so a
    child keeps its owner after the owner died. Thread-safe (the sampler and the faults
    both ask)."""

    def __init__(self) -> None:
        self._memo: dict[Key, int | None] = {}
        self._replicas_seen: set[int] = set()
        self._lock = threading.Lock()

    def classify(self, procs: list[Replica]) -> list[Replica]:
        """``procs`` with ``role="child"`` and ``owner`` set on every descendant of a replica."""
        facts = [ProcFacts(p.pid, p.start_time, p.role, p.ppid, p.sid) for p in procs]
        with self._lock:
            owners = assign_owners(facts, self._memo, self._replicas_seen)
        out = []
        for p in procs:
            owner = owners.get((p.pid, p.start_time))
            if owner is not None and p.role != "agent":
                p = dataclasses.replace(p, role="child", owner=owner)
            out.append(p)
        return out


def promote_announced(
    owners: Mapping[Key, int | None],
    parents: Mapping[Key, int | None],
    announced: set[int],
) -> tuple[dict[Key, int | None], set[int]]:
    """Apply the offline rule: a child that announced itself (``run_start``) is a replica;
    the replica it was filed under becomes a *wrapper* unless it announced itself too; the
    children below the announced process belong to it.

    ``owners``: key -> owner pid (None: a replica or outside any); ``parents``: key -> ppid.
    Returns the corrected owners and the pids that turned out to be wrappers."""
    pid_key = {k[0]: k for k in owners}
    promoted = {k for k, o in owners.items() if o is not None and k[0] in announced}
    if not promoted:
        return dict(owners), set()
    wrappers = {int(owners[k]) for k in promoted if owners[k] not in announced}  # type: ignore[arg-type]
    fixed: dict[Key, int | None] = {}
    for key, owner in owners.items():
        if key in promoted:
            fixed[key] = None
            continue
        if owner is None or owner not in wrappers:
            fixed[key] = owner
            continue
        # Walk up from the process towards its wrapper; the first announced ancestor owns it.
        new_owner: int | None = owner
        seen: set[int] = set()
        ppid = parents.get(key)
        while ppid is not None and ppid not in seen and ppid != owner:
            if ppid in announced:
                new_owner = ppid
                break
            seen.add(ppid)
            up = pid_key.get(ppid)
            ppid = parents.get(up) if up is not None else None
        fixed[key] = new_owner
    return fixed, wrappers
