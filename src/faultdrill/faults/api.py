"""The fault seam: what a drill injects, and how it is undone.

A *fault* is one plug-in per kind (``kill-worker``, ``link-loss``...). Its *spec* is frozen
plan data (a pydantic model with a ``kind`` literal); its implementation has two verbs:

* ``inject(ctx)`` checks the spec against the moment, asks the platform for an *action*
  (``faultdrill.platforms.api``: ``node_freeze``, ``link_loss``...), which returns the
  :class:`~faultdrill.platforms.api.Change` objects it would make, and applies each through
  :meth:`Fault.apply_change`: recorded in the ledger BEFORE it is made, so that a crash
  between the two leaves an entry that cleanup can still undo. It returns the facts of the
  ``fault``/``injected`` event, among them the ``command`` an operator would type.
* ``revert(ctx)`` undoes what ``inject`` applied, through the ledger: the undo of each
  change is registered by kind (``faultdrill.ledger.undoer``) in the platform's modules, so
  the same code reverts it in-process, on a signal, or from ``faultdrill cleanup`` after
  the harness died. Revert is safe to repeat and safe when nothing was injected.

A fault never touches the machine itself and imports no concrete platform. It states the
abilities it needs (``requires``, :class:`~faultdrill.platforms.api.Ability`); the plan
validator refuses a plan that asks a platform for a fault it cannot do, before any drill.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from faultdrill.errors import DrillError, FaultError, PlatformError
from faultdrill.plan.faults import FaultSpec, check_worker_target
from faultdrill.platforms.api import Ability, Change, Replica

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.ledger import Ledger
    from faultdrill.platforms.api import Platform

__all__ = [
    "FAULTS",
    "Fault",
    "FaultContext",
    "FaultSpec",
    "WorkerFault",
    "cannot",
    "command_of",
    "is_single_name",
    "make_fault",
    "register",
]


@dataclass
class FaultContext:
    """What a fault may touch while it is injected.

    When ``item_dir`` is given, ``ckpt_dir`` is resolved (symlinks followed) at
    construction and must lie below it: storage and checkpoint faults mount over and damage
    that directory, so it must never be a host path. Raises FaultError otherwise."""

    platform: Platform
    ledger: Ledger
    sink: EventSink
    scenario_id: str
    stop_event: threading.Event = field(default_factory=threading.Event)
    #: The scenario's checkpoint directory (the plan's ``checkpoint.dir``), when known.
    ckpt_dir: Path | None = None
    #: The plan's ``checkpoint.latest_file`` (the pointer naming the published checkpoint).
    latest_file: str = "latest"
    #: The item's own directory (the run's ``baseline``, ``scenarios/ID``...), when known.
    item_dir: Path | None = None
    #: The item's data directory (the reference workload's data files), when known.
    data_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.item_dir is not None:
            self.item_dir = self.item_dir.resolve()
            if self.ckpt_dir is not None:
                self.ckpt_dir = self.checked_ckpt_dir()
            if self.data_dir is not None:
                self.data_dir = self.checked_data_dir()

    def checked_ckpt_dir(self) -> Path:
        """``ckpt_dir`` resolved now, refused (FaultError) unless it is strictly below
        ``item_dir``. Faults call it again right before acting: the job may have replaced
        the directory with a symlink since."""
        if self.ckpt_dir is None:
            raise FaultError("the drill did not say where the checkpoints are")
        return self._contained(
            self.ckpt_dir,
            "checkpoint directory",
            "set checkpoint.dir to a plain relative name such as 'ckpt'",
        )

    def checked_data_dir(self) -> Path:
        """``data_dir`` resolved now, refused (FaultError) unless it is strictly below
        ``item_dir`` (a data outage mounts over it: never a host path). Called again right
        before acting, as :meth:`checked_ckpt_dir`."""
        if self.data_dir is None:
            raise FaultError("the drill did not say where the job's data files are")
        return self._contained(
            self.data_dir,
            "data directory",
            "the data directory is the item's own 'data'; do not replace it with a link",
        )

    def _contained(self, path: Path, what: str, fix: str) -> Path:
        resolved = path.resolve()
        if self.item_dir is not None:
            base = self.item_dir.resolve()
            if resolved == base or not resolved.is_relative_to(base):
                raise FaultError(
                    f"{what} {path} resolves to {resolved}, which is not inside the item's "
                    f"directory {base}; faults act only on the run's own files ({fix})"
                )
        return resolved


class Fault(ABC):
    """One injected fault. Instances are single-use: inject once, revert once or more."""

    kind: ClassVar[str]
    spec_model: ClassVar[type[FaultSpec]]
    #: Platform abilities this fault needs (whatever its spec says).
    requires: ClassVar[frozenset[Ability]] = frozenset()

    def __init__(self, spec: FaultSpec) -> None:
        self.spec = spec
        #: Ledger entries of the changes ``inject`` applied, in order (``revert`` undoes them).
        self.entry_ids: list[str] = []
        self._changes: dict[str, Change] = {}

    @abstractmethod
    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        """Apply the fault; return flat facts for the injection event (pids hit, rule...,
        and ``command``: what an operator would type to do the same).

        Blocks only as long as applying takes (not for ``duration_s``). Raises FaultError.
        """

    @classmethod
    def requires_for(cls, spec: FaultSpec) -> frozenset[Ability]:
        """The abilities this spec needs (``requires``, plus what a mode may add)."""
        return cls.requires

    @classmethod
    def validate_against(cls, spec: FaultSpec, plan: Any) -> str | None:
        """A problem with this spec in this plan (a rank that does not exist...), or None."""
        return None

    def prepare(self, ctx: FaultContext) -> dict[str, Any]:
        """Put in place, before the job is submitted, what the fault needs from the start
        (e.g. the small filesystem a "storage full" outage later fills); returns facts for
        a ``fault``/``prepared`` event (empty: nothing was done, no event). Recorded in the
        ledger like ``inject``; undone at the end of the item. Raises FaultError."""
        return {}

    def apply_change(
        self, ctx: FaultContext, change: Change, *, revert: bool = True
    ) -> dict[str, Any]:
        """Record ``change`` in the ledger, make it (``change.apply``), then mark it
        applied; returns its facts. ``revert``: whether :meth:`revert` undoes it (False for
        what ``prepare`` puts in place for the whole item: the end of the item undoes it).

        An OSError or PlatformError from applying becomes a FaultError ``"<kind>: could not
        make '<label>': <error>"`` (a FaultError passes unchanged); either way the entry stays
        recorded but not applied, so revert (or cleanup) still undoes what part was made.
        An irreversible change (a signal) is closed in the ledger at once, applied or not.
        """
        eid = ctx.ledger.record(change.kind, change.data, change.label)
        if change.reversible and revert:
            self.entry_ids.append(eid)
            self._changes[eid] = change
        try:
            facts = change.apply(partial(ctx.ledger.update, eid)) or {}
        except (OSError, PlatformError) as exc:
            raise FaultError(f"{self.spec.kind}: could not make {change.label!r}: {exc}") from exc
        else:
            ctx.ledger.mark_applied(eid)
        finally:
            if not change.reversible:
                ctx.ledger.revert(eid)  # nothing to take back: closes the entry
        return facts

    def apply_changes(
        self, ctx: FaultContext, changes: list[Change], *, revert: bool = True
    ) -> list[dict[str, Any]]:
        """:meth:`apply_change` each, in order; stops at the first that fails."""
        return [self.apply_change(ctx, c, revert=revert) for c in changes]

    def undo_change(self, ctx: FaultContext, entry_id: str) -> None:
        """Undo one change this fault applied, through the ledger, with the platform's
        in-process steps around it (:class:`~faultdrill.platforms.api.Change`). Idempotent:
        an entry already reverted is left alone, and so are its steps."""
        entry = ctx.ledger.entries.get(entry_id)
        if entry is None or entry.reverted:
            return
        change = self._changes.get(entry_id)
        if change is not None and change.before_undo is not None:
            change.before_undo()
        ctx.ledger.revert(entry_id)
        if change is not None and change.after_undo is not None:
            change.after_undo()

    def revert(self, ctx: FaultContext) -> None:
        """Undo what ``inject`` applied, newest first. Idempotent; a no-op for one-shot
        faults and when nothing was injected. Raises FaultError when an undo fails (the
        entry stays pending for ``faultdrill cleanup``)."""
        for entry_id in reversed(self.entry_ids):
            self.undo_change(ctx, entry_id)


class WorkerFault(Fault):
    """A fault aimed at one rank's replica, named by the spec's ``worker_field`` (a
    :class:`~faultdrill.plan.faults.WorkerTarget`): the rank and node are checked against
    the plan, and a replica that exits between being picked and being hit is said so."""

    #: The spec's field that names the replica (``target``; ``restart`` for the harness
    #: controls that restart one).
    worker_field: ClassVar[str] = "target"

    @classmethod
    def validate_against(cls, spec: FaultSpec, plan: Any) -> str | None:
        target = getattr(spec, cls.worker_field)
        return check_worker_target(target, plan, f"{cls.kind} {cls.worker_field}")

    def apply_to_worker(
        self, ctx: FaultContext, victim: Replica, changes: list[Change], too_late: str
    ) -> list[dict[str, Any]]:
        """:meth:`apply_changes`; a replica gone first (the platform's ProcessLookupError)
        becomes ``"worker pid <pid> exited before it <too_late>"``, e.g. "could be
        signalled": the job moved on, which is not the harness failing to apply."""
        try:
            return self.apply_changes(ctx, changes)
        except FaultError as exc:
            if isinstance(exc.__cause__, ProcessLookupError):
                raise FaultError(f"worker pid {victim.pid} exited before it {too_late}") from exc
            raise


def cannot(ctx: FaultContext, ability: Ability) -> FaultError:
    """The error for a platform without the actions behind ``ability`` (plan validation
    refuses such a plan before any drill, so this is a platform that declared an ability
    it does not implement)."""
    return FaultError(f"platform {ctx.platform.name!r} cannot do {ability.value}")


def command_of(changes: list[Change]) -> str:
    """What an operator would type to make ``changes``, in order."""
    return "; ".join(c.command for c in changes if c.command)


def is_single_name(name: str) -> bool:
    """True if ``name`` is one plain path component (a checkpoint id, a file name): not
    empty, not ``.`` or ``..``, no separator, no NUL. A pointer file's content is data
    written by the job; a fault joins it to a directory only after this test."""
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\0")


FAULTS: dict[str, type[Fault]] = {}


def register(cls: type[Fault]) -> type[Fault]:
    """Class decorator: add a fault kind to the registry (duplicates are refused)."""
    if cls.kind in FAULTS:
        raise DrillError(f"fault kind {cls.kind!r} registered twice")
    FAULTS[cls.kind] = cls
    return cls


def make_fault(spec: FaultSpec) -> Fault:
    return FAULTS[spec.kind](spec)
