"""The host layer's words: a change to the machine, and a live process of the job.

Below every platform and every host module: a host module builds :class:`Change` objects
(a signal, a rule, a mount, a frozen cgroup) and reads :class:`Replica` processes without
importing the platform seam above it. :mod:`faultdrill.platforms.api` hands these names on
with the rest of the seam (import them from there or from here: they are the same objects).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

__all__ = ["Change", "Note", "Replica", "StorageMode"]


Note = Callable[..., None]
"""Adds facts to a change's ledger entry while the change is being applied
(``note(pid=1234)``): what an undo must know that exists only once applying began."""


@dataclass(frozen=True)
class Change:
    """One change to the machine or the cluster, not made yet.

    ``kind`` is the ledger kind whose undo (registered with ``@undoer`` by the platform's
    module) takes it back from ``data`` alone; ``label`` is the ledger's human label and
    ``command`` what an operator would type to make the same change (it goes into the
    runbook). ``apply(note)`` makes the change and returns flat facts for the timeline (or
    None); it raises OSError, FaultError or PlatformError when it cannot, and may have made
    part of the change by then (the undo must cope). Whoever applies a change records it in
    the ledger first (``Fault.apply_change``).

    ``reversible=False``: nothing to take back (a delivered signal, a killed process); the
    ledger entry is closed as soon as it was applied. ``before_undo`` / ``after_undo`` run
    in the harness's process only, right around an in-process undo (final counters of a
    rule, a node marked up again); a replay by ``faultdrill cleanup`` does without them.
    """

    kind: str
    data: dict[str, Any]
    label: str
    command: str
    apply: Callable[[Note], dict[str, Any] | None]
    reversible: bool = True
    before_undo: Callable[[], None] | None = None
    after_undo: Callable[[], None] | None = None

    def preceded_by(self, step: Callable[[], None]) -> Change:
        """The same change, with ``step`` run first when it is applied (e.g. a platform's
        own bookkeeping that must happen before the change: a node marked down before its
        link is cut)."""
        inner = self.apply

        def apply(note: Note) -> dict[str, Any] | None:
            step()
            return inner(note)

        return replace(self, apply=apply)

    def followed_by(self, step: Callable[[], None]) -> Change:
        """The same change, with ``step`` run right after it was applied (e.g. a node
        marked frozen once its processes are)."""
        inner = self.apply

        def apply(note: Note) -> dict[str, Any] | None:
            facts = inner(note)
            step()
            return facts

        return replace(self, apply=apply)

    def with_facts(self, **facts: Any) -> Change:
        """The same change, with ``facts`` added to what ``apply`` returns."""
        inner = self.apply

        def apply(note: Note) -> dict[str, Any] | None:
            return {**facts, **(inner(note) or {})}

        return replace(self, apply=apply)


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


#: How a storage outage leaves the checkpoint directory (``StorageActions.storage_prepare``).
StorageMode = Literal["read-only", "full", "unreachable", "slow"]
