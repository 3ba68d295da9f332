"""The live reader of a job's log files: lines in, probe events out.

:class:`LogTail` is a thread that reads the new complete lines of every ``*.log`` file in
the item's ``logs/`` directory every ``period_s`` (default 0.05 s), reads each with the
plan's patterns (:class:`~faultdrill.joblogs.spec.LineReader`) and writes the events it
stands for into ``events/joblog-<node>.jsonl``: ``src`` ``probe``, ``via`` ``log``, the
``rank`` and ``pid`` of the replica that wrote it, ``node``; ``ts`` and ``mono`` are the
moment the harness read the line (the line carries no clock of the job's). The engine's
watch tails those files like the probe's, so step triggers and stop conditions work on
them.

Files: ``agent-<node>.log`` (what the platform launched on the node writes: torchrun's
agent and its workers) and ``copy-<node>-*.log`` (a copy of a replica a harness control
started: its lines are its own). Attribution of a line, at the moment it is read:

* its rank is what the line says (a ``rank`` group, or the plan's ``logs.rank``); a line
  that says none belongs to the one replica on its node (one process per node);
* its pid is that of the live replica holding that rank on the node (for an agent's log
  the replica the platform launched, for a copy's log the other one). When none holds it
  now (a replica killed after it wrote the line), the replica that held it at the last
  line read from the same file. A line no replica can be found for is counted
  (``unattributed``), never guessed.

Without a ``logs.run_start`` pattern a replica announces itself (``run_start`` with
``synthesized: true``) just before the first event read from it. A ``checkpoint_saved``
line makes the harness hash the checkpoint it names (``ckpt_dir/<id>``, or the ``path``
group; of a directory, the file its ``manifest.json`` names or else its largest file), so
the end-of-run inventory can verify it like a probe-reported save; the event is stamped
once that hash is taken.

On :meth:`LogTail.stop` the remaining lines are read and a ``harness``/``log_evidence``
event says what was read: lines per file, events per kind, lines not attributed or
ambiguous, and ``stamp_bound_s``: the longest time from one read of the files to the end of
the next, the bound on how late any event was stamped after its line reached the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultdrill.joblogs.spec import LineReader, LogPatterns, Reading

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.host.api import Replica

__all__ = ["LogTail", "hash_checkpoint", "log_file_origin"]

_NAME = re.compile(r"(agent|copy)-([A-Za-z0-9_]+)(?:-.*)?\.log")
_CHUNK = 1 << 20
_MANIFEST = "manifest.json"


def log_file_origin(name: str) -> tuple[str, str] | None:
    """(``agent`` or ``copy``, node) of a log file name, None for any other file."""
    m = _NAME.fullmatch(name)
    return (m.group(1), m.group(2)) if m else None


def _plain_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\0")


def hash_checkpoint(ckpt_dir: Path, cid: str, path: str = "") -> dict[str, Any]:
    """The file a saved checkpoint stands for, hashed now: ``path``, ``sha256``, ``bytes``;
    or ``hash_problem`` saying why none could be hashed (also for a path outside
    ``ckpt_dir``: what a log line names is never read elsewhere)."""
    if path:
        target = Path(path) if Path(path).is_absolute() else ckpt_dir / path
    elif _plain_name(cid):
        target = ckpt_dir / cid
    else:
        return {"hash_problem": f"checkpoint id {cid!r} is not a name inside {ckpt_dir}"}
    # the line is the job's data: the harness reads nothing outside the checkpoint directory
    if not target.resolve().is_relative_to(ckpt_dir.resolve()):
        return {"hash_problem": f"{target} is not inside the checkpoint directory {ckpt_dir}"}
    if target.is_dir():
        named = None
        with contextlib.suppress(OSError, ValueError):
            manifest = json.loads((target / _MANIFEST).read_text())
            name = manifest.get("file") if isinstance(manifest, dict) else None
            if isinstance(name, str) and _plain_name(name) and (target / name).is_file():
                named = target / name
        if named is None:
            files = [p for p in target.iterdir() if p.is_file() and p.name != _MANIFEST]
            if not files:
                return {"hash_problem": f"{target} holds no file"}
            named = max(files, key=lambda p: (p.stat().st_size, p.name))
        target = named
    h = hashlib.sha256()
    try:
        with open(target, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError as exc:
        return {"hash_problem": f"cannot read {target}: {exc.strerror or exc}"}
    return {"path": str(target), "sha256": h.hexdigest(), "bytes": target.stat().st_size}


class LogTail:
    """Reads the job's log files live (see the module docstring). ``replicas`` returns the
    job's live processes now (the platform's ``replicas``: thread-safe); ``world_size`` is
    the plan's, for a ``run_start`` that does not say it."""

    def __init__(
        self,
        patterns: LogPatterns,
        logs_dir: Path,
        sink: EventSink,
        replicas: Callable[[], list[Replica]],
        *,
        world_size: int,
        ckpt_dir: Path,
        period_s: float = 0.05,
    ) -> None:
        self.reader = LineReader(patterns)
        self.patterns = patterns
        self.logs_dir = logs_dir
        self.sink = sink
        self.replicas = replicas
        self.world_size = world_size
        self.ckpt_dir = ckpt_dir
        self.period_s = period_s
        self.offsets: dict[str, int] = {}
        self.lines: Counter[str] = Counter()
        self.events: Counter[str] = Counter()
        self.unattributed = 0
        self.ambiguous = 0
        self.unreadable = 0
        self.synthesized = 0
        self.stamp_bound_s = 0.0
        self._announced: set[int] = set()
        self._decided: set[int] = set()  # pids whose load decision was read
        #: pid -> the unit it announced starting last (``counts: started``): it completes
        #: at the next such line, at its end line, or at the launcher's successful exit
        self._unit: dict[int, int] = {}
        self._last_saved = ""  # the id of the checkpoint whose save was read last
        #: pid -> (node, rank, last step read) of replicas of the agents'
        #: logs that printed no end line: those a successful exit ends
        self._running: dict[int, tuple[str, int, int | None]] = {}
        self._last: dict[tuple[str, int | None], tuple[int, int]] = {}
        self._now: list[Replica] | None = None
        self._prev_start: float | None = None
        self._host = socket.gethostname()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="job-log-tail", daemon=True)

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, succeeded_at: float | None = None) -> None:
        """Stop the thread, read what is left, and emit the ``log_evidence`` summary.
        ``succeeded_at``: the job ended by itself, successfully, at this monotonic time
        (the launcher exited 0); without a ``logs.run_end`` pattern each replica of the
        agents' logs that printed no end line and belongs to the last generation ends
        then (a ``run_end`` with ``synthesized: true``). Idempotent for the thread; the
        summary is emitted on every call."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.poll()
        if succeeded_at is not None and self.patterns.run_end is None:
            self._end_at_exit(succeeded_at)
        self.sink.emit("harness", "log_evidence", **self.summary())

    def _end_at_exit(self, at: float) -> None:
        """The launcher's exit ends the last replica of each rank that printed no end line."""
        last: dict[int, tuple[int, str, int | None]] = {}
        for pid, (node, rank, step) in self._running.items():
            last[rank] = (pid, node, step)  # the most recently active last
        for rank, (pid, node, _) in sorted(last.items()):
            self._complete_running_unit(node, pid, rank, at)
            step = self._running[pid][2]
            fields: dict[str, Any] = {"status": "ok", "model_digest": None}
            if step is not None:
                fields["final_step"] = step
            self._emit("run_end", node, pid, rank, fields, "", synthesized=True, at_mono=at)
        self._running.clear()

    def summary(self) -> dict[str, Any]:
        return {
            "stamped": "when the harness read the line",
            "read_every_s": self.period_s,
            "stamp_bound_s": round(self.stamp_bound_s, 4),
            "files": dict(self.lines),
            "events": dict(self.events),
            "unattributed": self.unattributed,
            "ambiguous": self.ambiguous,
            "unreadable": self.unreadable,
            "synthesized_starts": self.synthesized,
        }

    def _loop(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            with contextlib.suppress(Exception):  # a failed read is a gap, not a crash
                self.poll()
            self._stop.wait(max(0.0, self.period_s - (time.monotonic() - t)))

    # --- reading ------------------------------------------------------------------------

    def poll(self) -> None:
        """Read the new complete lines of every log file once."""
        with self._lock:
            start = time.monotonic()
            self._now = None
            for path in sorted(self.logs_dir.glob("*.log")):
                origin = log_file_origin(path.name)
                if origin is not None:
                    self._read_file(path, *origin)
            end = time.monotonic()
            if self._prev_start is not None:
                self.stamp_bound_s = max(self.stamp_bound_s, end - self._prev_start)
            self._prev_start = start

    def _read_file(self, path: Path, origin: str, node: str) -> None:
        off = self.offsets.get(path.name, 0)
        try:
            with open(path, "rb") as f:
                f.seek(off)
                chunk = f.read(_CHUNK)
        except OSError:
            return
        end = chunk.rfind(b"\n")
        if end < 0:
            return
        self.offsets[path.name] = off + end + 1
        for raw in chunk[: end + 1].decode(errors="replace").splitlines():
            self.lines[path.name] += 1
            line = raw.rstrip("\r")
            for reading in self.reader.read(line):
                self._take(reading, line, path.name, origin, node)

    def _take(self, reading: Reading, line: str, fname: str, origin: str, node: str) -> None:
        if reading.kind == "unreadable":
            self.unreadable += 1
            return
        who = self._who(fname, origin, node, reading.rank)
        if who is None:
            self.unattributed += 1
            return
        pid, rank = who
        if reading.kind == "run_start":
            self._announced.add(pid)
        elif pid not in self._announced and self.patterns.run_start is None:
            self._announced.add(pid)
            self.synthesized += 1
            self._emit("run_start", node, pid, rank, self._start_fields({}), line, synthesized=True)
        fields = dict(reading.fields)
        extra: dict[str, Any] = {}
        if reading.kind == "run_start":
            fields = self._start_fields(fields)
        elif reading.kind == "ckpt_save":
            fields.update(hash_checkpoint(self.ckpt_dir, str(fields["id"]), fields["path"]))
            self._last_saved = str(fields["id"])
        elif reading.kind == "ckpt_load" and fields.get("id") is None:
            fields["id"], extra["inferred"] = self._last_saved, "id"
        if reading.kind == "step":
            self._no_resume_line(node, pid, rank, line)
            if reading.starts_unit and not self._unit_started(pid, int(fields["step"])):
                self._track("started", origin, node, pid, rank, None)
                return
        elif reading.kind == "run_end":
            self._complete_running_unit(node, pid, rank)
        if reading.kind in ("ckpt_load", "ckpt_none"):
            self._decided.add(pid)
        self._track(reading.kind, origin, node, pid, rank, fields.get("step"))
        self._emit(reading.kind, node, pid, rank, fields, line, **extra)

    def _unit_started(self, pid: int, done: int) -> bool:
        """A line announcing that unit ``done + 1`` starts (``counts: started``): whether
        it also completes a unit, the one this replica started before (its first such
        line completes nothing)."""
        ran = pid in self._unit
        self._unit[pid] = done + 1
        return ran

    def _complete_running_unit(
        self, node: str, pid: int, rank: int, at_mono: float | None = None
    ) -> None:
        """The unit a replica announced last (``counts: started``) completed: its end line
        was read, or the launcher exited successfully."""
        unit = self._unit.pop(pid, None)
        if unit is None:
            return
        fields: dict[str, Any] = {"step": unit, "loss": None, "samples": []}
        if at_mono is not None:
            self._emit(
                "step", node, pid, rank, fields, "", completed_by="launcher-exit", at_mono=at_mono
            )
        else:
            self._emit("step", node, pid, rank, fields, "", completed_by="end-line")
        if pid in self._running:
            self._running[pid] = (node, rank, unit)

    def _no_resume_line(self, node: str, pid: int, rank: int, line: str) -> None:
        """A replica's first step line with no resume line before it: it loaded no
        checkpoint (inferred; only when a resume line could have said otherwise)."""
        p = self.patterns
        if pid in self._decided or p.checkpoint_loaded is None or p.no_checkpoint is not None:
            return
        self._decided.add(pid)
        fields: dict[str, Any] = {"rejected": []}
        self._emit("ckpt_none", node, pid, rank, fields, line, inferred="no-resume-line")

    def _track(self, kind: str, origin: str, node: str, pid: int, rank: int, step: Any) -> None:
        """Remember the replicas of the agents' logs still running (for :meth:`stop`)."""
        if origin != "agent" or kind == "run_end":
            self._running.pop(pid, None)
            return
        node_, rank_, last = self._running.pop(pid, (node, rank, None))
        self._running[pid] = (node_, rank_, step if kind == "step" else last)

    def _start_fields(self, fields: dict[str, Any]) -> dict[str, Any]:
        return {
            "world_size": fields.get("world_size") or self.world_size,
            "local_rank": None,
            "host": self._host,
            "restart_count": None,
            "master": None,
            "config_digest": "",
            "sample_ids": self.patterns.sample_ids,
        }

    def _emit(
        self,
        kind: str,
        node: str,
        pid: int,
        rank: int,
        fields: dict[str, Any],
        line: str,
        **extra: Any,
    ) -> None:
        if kind != "step":
            extra["line"] = line[:300]
        self.events[kind] += 1
        self.sink.emit(
            "probe",
            kind,
            stream=f"joblog-{node}",
            rank=rank,
            pid=pid,
            via="log",
            node=node,
            **fields,
            **extra,
        )

    # --- attribution --------------------------------------------------------------------

    def _live(self) -> list[Replica]:
        if self._now is None:
            try:
                self._now = list(self.replicas())
            except Exception:  # the platform could not say now: attribute from the cache
                self._now = []
        return self._now

    def _who(self, fname: str, origin: str, node: str, rank: int | None) -> tuple[int, int] | None:
        """(pid, rank) of the replica that wrote a line of ``fname`` (see the module
        docstring), or None."""
        live = self._live()
        agents = {r.pid for r in live if r.role == "agent"}
        holders = [
            r
            for r in live
            if r.role == "worker" and r.node == node and (rank is None or r.rank == rank)
        ]
        if agents:
            launched = origin == "agent"
            holders = [r for r in holders if (r.ppid in agents) == launched]
        key = (fname, rank)
        if len(holders) > 1:
            self.ambiguous += 1
        if holders:
            pick = min(holders, key=lambda r: r.pid)
            if pick.rank is None:
                return None
            self._last[key] = (pick.pid, pick.rank)
            return self._last[key]
        return self._last.get(key)
