"""The fault and resource ledger: an on-disk undo log that outlives the harness.

Every change a drill makes to the machine (a fault injected, a cgroup or namespace created,
an agent process started) is recorded here BEFORE it is made, with the data needed to undo
it, and marked reverted after it is undone. The file is append-only JSON lines, fsynced per
record, so it survives a SIGKILL of the harness. ``faultdrill cleanup`` replays the undo of
every entry not yet marked reverted, newest first, using only what was recorded: it never
touches anything by pattern.

Undo functions are registered per entry kind with :func:`undoer`. An undo must be
idempotent and must tolerate that the change was never applied (the harness may have died
between recording and applying). Ledgers of runs in progress are listed in the state
directory's ``active/`` folder so that ``faultdrill cleanup`` finds them without arguments.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultdrill.errors import DrillError, FaultError

__all__ = ["UNDOERS", "Ledger", "LedgerEntry", "active_ledgers", "state_dir", "undoer"]

Undo = Callable[[dict[str, Any]], None]
UNDOERS: dict[str, Undo] = {}


def undoer(kind: str) -> Callable[[Undo], Undo]:
    """Register the undo of ledger entries of ``kind`` (duplicates are refused)."""

    def wrap(fn: Undo) -> Undo:
        if kind in UNDOERS:
            raise DrillError(f"undo for ledger kind {kind!r} registered twice")
        UNDOERS[kind] = fn
        return fn

    return wrap


def state_dir() -> Path:
    """Where ledgers of runs in progress are indexed (``$FAULTDRILL_STATE_DIR`` wins)."""
    env = os.environ.get("FAULTDRILL_STATE_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/faultdrill")
    return Path.home() / ".local" / "state" / "faultdrill"


def active_ledgers() -> list[Path]:
    """Ledger files of runs that have not finished cleanly, oldest first."""
    active = state_dir() / "active"
    if not active.is_dir():
        return []
    out = []
    for link in sorted(active.iterdir(), key=lambda p: p.stat().st_mtime):
        target = Path(link.read_text().strip())
        out.append(target)
    return out


@dataclass
class LedgerEntry:
    id: str
    kind: str
    data: dict[str, Any]
    label: str
    recorded_at: float
    applied: bool = False
    reverted: bool = False
    errors: list[str] = field(default_factory=list)


class Ledger:
    """One run's undo log. Thread-safe; every write is fsynced."""

    def __init__(self, path: Path, *, run_id: str) -> None:
        self.path = path
        self.run_id = run_id
        self._lock = threading.Lock()
        self.entries: dict[str, LedgerEntry] = {}
        if path.exists():
            self._load()
        path.parent.mkdir(parents=True, exist_ok=True)

    # --- index in the state dir -------------------------------------------------------

    def _index_file(self) -> Path:
        return state_dir() / "active" / f"{self.run_id}.ledger"

    def activate(self) -> None:
        """List this ledger in the state dir so a later ``cleanup`` finds it."""
        idx = self._index_file()
        idx.parent.mkdir(parents=True, exist_ok=True)
        idx.write_text(str(self.path.resolve()) + "\n")

    def deactivate(self) -> None:
        """Drop the index entry; only when every entry is reverted."""
        if self.pending():
            return
        self._index_file().unlink(missing_ok=True)

    # --- records --------------------------------------------------------------------

    def _append(self, rec: dict[str, Any]) -> None:
        line = json.dumps(rec, separators=(",", ":")) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def _load(self) -> None:
        for raw in self.path.read_text().splitlines():
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError:
                continue  # a torn last line: the change it announced was never recorded
            op, eid = rec.get("op"), rec.get("id")
            if op == "record":
                self.entries[eid] = LedgerEntry(
                    id=eid,
                    kind=rec["kind"],
                    data=rec["data"],
                    label=rec.get("label", ""),
                    recorded_at=rec.get("ts", 0.0),
                )
            elif eid in self.entries:
                entry = self.entries[eid]
                if op == "applied":
                    entry.applied = True
                elif op == "reverted":
                    entry.reverted = True
                elif op == "revert_failed":
                    entry.errors.append(rec.get("error", ""))

    def record(self, kind: str, data: dict[str, Any], label: str = "") -> str:
        """Write the intent to change something; returns the entry id. Call BEFORE acting."""
        if kind not in UNDOERS:
            raise DrillError(f"ledger kind {kind!r} has no registered undo")
        eid = uuid.uuid4().hex[:12]
        with self._lock:
            ts = time.time()
            self._append(
                {"op": "record", "id": eid, "kind": kind, "data": data, "label": label, "ts": ts}
            )
            self.entries[eid] = LedgerEntry(eid, kind, dict(data), label, ts)
        return eid

    def update(self, entry_id: str, **data: Any) -> None:
        """Add facts learned while applying (e.g. the pid just started)."""
        with self._lock:
            entry = self.entries[entry_id]
            entry.data.update(data)
            self._append(
                {
                    "op": "record",
                    "id": entry_id,
                    "kind": entry.kind,
                    "data": entry.data,
                    "label": entry.label,
                    "ts": entry.recorded_at,
                }
            )

    def mark_applied(self, entry_id: str) -> None:
        with self._lock:
            self.entries[entry_id].applied = True
            self._append({"op": "applied", "id": entry_id, "ts": time.time()})

    def revert(self, entry_id: str) -> None:
        """Undo one entry now (idempotent). Raises FaultError if the undo fails."""
        with self._lock:
            entry = self.entries[entry_id]
            if entry.reverted:
                return
            try:
                UNDOERS[entry.kind](entry.data)
            except Exception as exc:  # an undo that fails must stay pending, and be said
                entry.errors.append(str(exc))
                self._append({"op": "revert_failed", "id": entry_id, "error": str(exc)})
                raise FaultError(f"could not undo {entry.kind} {entry.label}: {exc}") from exc
            entry.reverted = True
            self._append({"op": "reverted", "id": entry_id, "ts": time.time()})

    def pending(self) -> list[LedgerEntry]:
        return [e for e in self.entries.values() if not e.reverted]

    def revert_all(self) -> list[str]:
        """Undo every pending entry, newest first; returns the errors (empty when clean)."""
        errors = []
        for entry in reversed(self.pending()):  # record order is dict order
            try:
                self.revert(entry.id)
            except FaultError as exc:
                errors.append(str(exc))
        return errors
