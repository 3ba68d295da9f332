"""The fault seam: what a drill injects, and how it is undone.

A *fault* is one plug-in per kind (``kill-worker``, ``link-loss``...). Its *spec* is frozen
plan data (a pydantic model with a ``kind`` literal); its implementation has two verbs:

* ``inject(ctx)`` applies the fault. It must record every change in the ledger
  (``ctx.ledger.record``) BEFORE applying it, so that a crash between the two leaves an
  entry that cleanup can still undo.
* the change's *undo* is registered with the ledger by kind (``faultdrill.ledger.undoer``),
  so the same code reverts it in-process, on a signal, or from ``faultdrill cleanup`` after
  the harness died. Undo is safe to repeat and safe when nothing was applied.

A fault states the platform abilities it needs (``requires``); the plan validator refuses a
plan that asks a platform for a fault it cannot do, before any drill starts.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from faultdrill.errors import DrillError, FaultError
from faultdrill.frozen import Frozen

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.ledger import Ledger
    from faultdrill.platforms.api import Platform


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

    def __post_init__(self) -> None:
        if self.ckpt_dir is not None and self.item_dir is not None:
            self.item_dir = self.item_dir.resolve()
            self.ckpt_dir = self.checked_ckpt_dir()

    def checked_ckpt_dir(self) -> Path:
        """``ckpt_dir`` resolved now, refused (FaultError) unless it is strictly below
        ``item_dir``. Faults call it again right before acting: the job may have replaced
        the directory with a symlink since."""
        if self.ckpt_dir is None:
            raise FaultError("the drill did not say where the checkpoints are")
        resolved = self.ckpt_dir.resolve()
        if self.item_dir is not None:
            base = self.item_dir.resolve()
            if resolved == base or not resolved.is_relative_to(base):
                raise FaultError(
                    f"checkpoint directory {self.ckpt_dir} resolves to {resolved}, which is not "
                    f"inside the item's directory {base}; faults act only on the run's own "
                    "files (set checkpoint.dir to a plain relative name such as 'ckpt')"
                )
        return resolved


class Fault(ABC):
    """One injected fault. Instances are single-use: inject once, revert once or more."""

    kind: ClassVar[str]
    spec_model: ClassVar[type[FaultSpec]]
    #: Platform abilities (``faultdrill.platforms.api`` protocol names) this fault needs.
    requires: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, spec: FaultSpec) -> None:
        self.spec = spec
        self.entry_ids: list[str] = []

    @abstractmethod
    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        """Apply the fault; return flat facts for the injection event (pids hit, rule...).

        Blocks only as long as applying takes (not for ``duration_s``). Raises FaultError.
        """

    @classmethod
    def requires_for(cls, spec: FaultSpec) -> frozenset[str]:
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

    def _apply(
        self,
        ctx: FaultContext,
        kind: str,
        data: dict[str, Any],
        label: str,
        action: Callable[[], object],
        what: str,
    ) -> str:
        """Record a change in the ledger (entry kept for ``revert``), make it (``action``),
        then mark it applied; returns the entry id. An OSError from ``action`` becomes a
        FaultError ``"<kind>: cannot <what>: <error>"``; a FaultError passes unchanged. Either
        way the entry stays recorded but not applied, so revert still undoes it."""
        eid = ctx.ledger.record(kind, data, label)
        self.entry_ids.append(eid)
        try:
            action()
        except OSError as exc:
            raise FaultError(f"{self.spec.kind}: cannot {what}: {exc}") from exc
        ctx.ledger.mark_applied(eid)
        return eid

    def revert(self, ctx: FaultContext) -> None:
        """Undo what ``inject`` applied. Idempotent; a no-op for one-shot faults."""
        for entry_id in reversed(self.entry_ids):
            ctx.ledger.revert(entry_id)


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
