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
directory's ``active/`` folder so that ``faultdrill cleanup`` finds them without arguments;
each index entry names the ledger file and the harness process (pid and start time), so
that a cleanup without arguments can leave alone the ledgers of drills still running.
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

from faultdrill.errors import DrillError, FaultError, NotOursError

__all__ = [
    "UNDOERS",
    "ActiveEntry",
    "Ledger",
    "LedgerEntry",
    "NotOursError",
    "active_entries",
    "active_ledgers",
    "state_dir",
    "undoer",
]

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


@dataclass
class ActiveEntry:
    """One index entry of ``<state dir>/active``: a run that has not finished cleanly."""

    index: Path
    ledger: Path | None
    pid: int | None = None
    start_time: int | None = None
    problem: str = ""  # why the index entry could not be read (then ledger is None)

    @property
    def run_id(self) -> str:
        return self.index.name.removesuffix(".ledger")

    def harness_alive(self) -> bool:
        """True if the harness that wrote the entry still runs (same pid AND start time).
        An entry of the older format (a path only) cannot tell: False."""
        if self.pid is None or self.start_time is None:
            return False
        # Imported here: importing faultdrill.platforms registers the platforms, whose
        # modules import this one (undoer) at import time.
        from faultdrill.platforms.local import procfs

        return procfs.alive(self.pid, self.start_time)


def _read_index(index: Path) -> ActiveEntry:
    try:
        text = index.read_text(errors="replace").strip()
    except OSError as exc:
        return ActiveEntry(index, None, problem=f"cannot read: {exc.strerror}")
    if not text.startswith("{"):  # the older format: the ledger's path alone
        return ActiveEntry(index, Path(text)) if text else ActiveEntry(index, None, problem="empty")
    try:
        raw = json.loads(text)
        ledger = Path(str(raw["ledger"]))
        pid = raw.get("pid")
        start = raw.get("start_time")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return ActiveEntry(index, None, problem=f"not an index entry ({type(exc).__name__})")
    return ActiveEntry(
        index,
        ledger,
        pid=pid if isinstance(pid, int) else None,
        start_time=start if isinstance(start, int) else None,
    )


def active_entries() -> list[ActiveEntry]:
    """Index entries of runs that have not finished cleanly, oldest first (an entry that
    vanishes while listing, removed by its own harness, is simply not listed)."""
    active = state_dir() / "active"
    if not active.is_dir():
        return []
    stamped = []
    for index in active.iterdir():
        try:
            stamped.append((index.stat().st_mtime, index.name, index))
        except OSError:
            continue
    return [_read_index(index) for _, _, index in sorted(stamped)]


def active_ledgers() -> list[Path]:
    """Ledger files of runs that have not finished cleanly, oldest first."""
    return [e.ledger for e in active_entries() if e.ledger is not None]


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
        # Reentrant: an undo may record what it starts again (the Kubernetes test cluster's
        # apiserver or kubelet restarted by the undo of their stop); such new entries are
        # not part of the ``revert_all`` pass that ran the undo.
        self._lock = threading.RLock()
        self.entries: dict[str, LedgerEntry] = {}
        #: Lines of the file that could not be read back (see :meth:`_load`).
        self.problems: list[str] = []
        #: What undos left alone as not ours (``NotOursError``), for the caller to report.
        self.notes: list[str] = []
        if path.exists():
            self._load()
        path.parent.mkdir(parents=True, exist_ok=True)

    # --- index in the state dir -------------------------------------------------------

    def _index_file(self) -> Path:
        return state_dir() / "active" / f"{self.run_id}.ledger"

    def activate(self) -> None:
        """List this ledger in the state dir so a later ``cleanup`` finds it, with this
        process (the harness) as its owner: pid and start time."""
        # Imported here: importing faultdrill.platforms registers the platforms, whose
        # modules import this one (undoer) at import time.
        from faultdrill.platforms.local import procfs

        idx = self._index_file()
        idx.parent.mkdir(parents=True, exist_ok=True)
        pid = os.getpid()
        entry = {
            "ledger": str(self.path.resolve()),
            "pid": pid,
            "start_time": procfs.start_time(pid),
        }
        idx.write_text(json.dumps(entry) + "\n")

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
        """Read the file back. A torn line is skipped silently (the change it announced was
        never made); any other line that is not a well-formed record is skipped and said
        in :attr:`problems`, so one damaged line never hides the rest of the ledger."""
        lines = self.path.read_text(errors="replace").splitlines()
        for n, raw in enumerate(lines, 1):
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError:
                if n < len(lines):
                    self.problems.append(f"line {n}: not JSON")
                continue  # a torn last line: the change it announced was never recorded
            if not isinstance(rec, dict):
                self.problems.append(f"line {n}: not a JSON object")
                continue
            op, eid = rec.get("op"), rec.get("id")
            if not isinstance(eid, str):
                self.problems.append(f"line {n}: no entry id")
                continue
            if op == "record":
                kind, data = rec.get("kind"), rec.get("data")
                if not isinstance(kind, str) or not isinstance(data, dict):
                    self.problems.append(f"line {n}: a record without 'kind' or 'data'")
                    continue
                self.entries[eid] = LedgerEntry(
                    id=eid,
                    kind=kind,
                    data=data,
                    label=str(rec.get("label", "")),
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
            except NotOursError as exc:  # nothing of ours is left there: closed, and said
                self.notes.append(f"{entry.kind} {entry.label}: {exc}")
                entry.reverted = True
                self._append(
                    {"op": "reverted", "id": entry_id, "ts": time.time(), "note": str(exc)}
                )
                return
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
