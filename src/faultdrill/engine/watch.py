"""Watching a job: its progress from the probe files (and the events read from its log
lines), its trigger, its stop conditions.

:class:`Watch` tails the ranks' probe files as they grow and keeps what the engine decides
on: the highest step, checkpoint saves, the time of the first and the last step, and the
first non-finite loss. :meth:`Watch.triggered` says when a scenario's fault is due;
:func:`stop_reason` says which stop condition, if any, ends the item now.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from faultdrill.plan import StopConditions, Trigger
from faultdrill.timeline.stepfile import GLOB as STEP_FILES
from faultdrill.timeline.stepfile import RECORD, first_nonfinite, header_of
from faultdrill.timeline.store import StepStoreWriter, parse_chunk, parse_step_records

__all__ = ["Watch", "stop_reason"]


@dataclass
class Watch:
    """What the engine knows of the job's progress, from tailing the probe files.

        The probe's binary step files (``probe-rank<R>.steps``) are tailed the same way, a whole
    record at a time. With a ``store``, every complete line (or record) read is also appended to the columnar step store
        (:mod:`faultdrill.timeline.store`): the harness reads each line once, while the job
        runs, and the timeline loads from columns afterwards. :meth:`close` catches up and
        writes the store's manifest."""

    events_dir: Path
    store: StepStoreWriter | None = None
    offsets: dict[Path, int] = field(default_factory=dict)
    max_step: int = 0
    saves: int = 0
    #: The ``mono`` of the last ``ckpt_save_failed`` event seen (None: no save failed).
    last_failed_save_mono: float | None = None
    first_step_mono: float | None = None
    last_progress_mono: float | None = None
    nonfinite: str | None = None
    ranks_seen: set[int] = field(default_factory=set)
    #: (stream, kind) of the platform's checkpoint commits (``Platform.checkpoint_commits``)
    commits_from: tuple[str, str] | None = None
    commits: int = 0
    _synced: float = 0.0
    _commit_offset: int = 0
    _step_headers: dict[Path, int] = field(default_factory=dict)  # step file -> header bytes

    def poll(self) -> None:
        # joblog-*: probe events the harness read from a job's log lines (faultdrill.joblogs)
        paths = [
            *sorted(self.events_dir.glob("probe-rank*.jsonl")),
            *sorted(self.events_dir.glob("joblog-*.jsonl")),
            *sorted(self.events_dir.glob(STEP_FILES)),
        ]
        for path in paths:
            off = self.offsets.get(path, 0)
            if off < 0:
                continue  # a step file that is not one: the reader counts it as bad
            data = _read_from(path, off)
            if data is None:
                continue
            whole = self._whole(path, data, off)
            if whole <= 0:
                continue
            data = data[:whole]
            self.offsets[path] = off + whole
            records = self._records(path, data, off)
            if self.store is not None:
                chunk = self.store.add(path.name, data, off)
            elif records is not None:
                chunk = parse_step_records(records)
            else:
                chunk = parse_chunk(data)
            for ev in chunk.records:
                self._see(ev)
            if chunk.steps is not None:
                self._steps(chunk.steps, data, records)
        self._read_commits()
        now = time.monotonic()
        if self.store is not None and now - self._synced >= _SYNC_S:
            self._synced = now
            self.store.sync()

    def _whole(self, path: Path, data: bytes, off: int) -> int:
        """How many bytes of ``data`` (read from byte ``off`` of ``path``) are whole: lines,
        or a binary step file's header and records. -1 marks a step file that is not one."""
        if not path.name.endswith(".steps"):
            return data.rfind(b"\n") + 1
        head = 0
        if off == 0:
            try:
                header = header_of(data)
            except ValueError:
                self.offsets[path] = -1
                return -1
            if header is None:
                return 0
            head = header.size
            self._step_headers[path] = head
        return head + (len(data) - head) // RECORD.itemsize * RECORD.itemsize

    def _records(self, path: Path, data: bytes, off: int) -> memoryview | None:
        """The records of ``data`` if ``path`` is a binary step file (None: JSON lines)."""
        if not path.name.endswith(".steps"):
            return None
        return memoryview(data)[self._step_headers.get(path, 0) if off == 0 else 0 :]

    def _read_commits(self) -> None:
        """Count the platform's checkpoint commits (a small file: read whole lines)."""
        if self.commits_from is None:
            return
        stream, kind = self.commits_from
        data = _read_from(self.events_dir / f"{stream}.jsonl", self._commit_offset)
        whole = data.rfind(b"\n") + 1 if data is not None else 0
        if data is None or not whole:
            return
        self._commit_offset += whole
        for line in data[:whole].splitlines():
            with contextlib.suppress(ValueError):
                ev = json.loads(line)
                if isinstance(ev, dict) and ev.get("kind") == kind:
                    self.commits += 1

    def close(self) -> None:
        """Read what is left and close the store (idempotent)."""
        if self.store is None:
            return
        try:
            self.poll()
        finally:
            store, self.store = self.store, None
            store.close()

    def _steps(self, cols: list[np.ndarray], data: bytes, records: memoryview | None) -> None:
        mono, _rank, _pid, step, loss = cols[:5]
        if self.first_step_mono is None:
            self.first_step_mono = float(mono[0])
        self.max_step = max(self.max_step, int(step.max()))
        self.last_progress_mono = max(self.last_progress_mono or -math.inf, float(mono.max()))
        # NaN in the column: no loss reported; +-inf: a reported NaN or infinity
        if self.nonfinite is None and bool(np.isinf(loss).any()):
            self.nonfinite = _first_nonfinite(data) if records is None else first_nonfinite(records)

    def _see(self, ev: dict[str, Any]) -> None:
        kind = ev.get("kind")
        if kind == "ckpt_save":
            self.saves += 1
        elif kind == "ckpt_save_failed":
            with contextlib.suppress(TypeError, ValueError):
                self.last_failed_save_mono = float(ev.get("mono"))  # type: ignore[arg-type]
        elif kind == "run_start":
            with contextlib.suppress(TypeError, ValueError):
                self.ranks_seen.add(int(ev.get("rank", 0)))

    def save_failed_since(self, mono: float | None) -> bool:
        """Whether a checkpoint save failed at or after ``mono`` (None: never)."""
        last = self.last_failed_save_mono
        return mono is not None and last is not None and last >= mono

    def triggered(self, trig: Trigger, now: float) -> bool:
        if trig.at_step is not None:
            return self.max_step >= trig.at_step
        if trig.after_checkpoint is not None:
            k = trig.after_checkpoint
            return self.saves >= k and (self.commits_from is None or self.commits >= k)
        assert trig.after_s is not None
        return self.first_step_mono is not None and now - self.first_step_mono >= trig.after_s


def _read_from(path: Path, offset: int) -> bytes | None:
    """At most :data:`_READ_MAX` bytes of ``path`` from ``offset`` (None: unreadable now)."""
    try:
        with open(path, "rb") as f:
            # Ask for what is there, not _READ_MAX: a buffer of the size asked for is
            # allocated, and one over malloc's mmap threshold is fresh memory (page faults)
            # on every read, where one of a file's size is reused from the heap.
            size = os.fstat(f.fileno()).st_size - offset
            f.seek(offset)
            return f.read(max(0, min(size, _READ_MAX)))
    except OSError:
        return None


def stop_reason(
    watch: Watch, stop: StopConditions, started: float, now: float
) -> tuple[str, str] | None:
    if now - started > stop.max_wall_s:
        return "max_wall_s", f"scenario ran {now - started:.0f} s > {stop.max_wall_s:g} s"
    since = watch.last_progress_mono or started
    if now - since > stop.max_no_progress_s:
        return (
            "max_no_progress_s",
            f"no new step for {now - since:.0f} s > {stop.max_no_progress_s:g} s "
            f"(last step {watch.max_step})",
        )
    if stop.stop_on_nonfinite_loss and watch.nonfinite:
        return "nonfinite_loss", watch.nonfinite
    return None


#: At most this much of one probe file is read per poll (the rest at the next one).
_READ_MAX = 64 << 20
#: The store's manifest is rewritten at most this often while the job runs (a reader
#: takes what it does not cover from the JSON lines), and at the end.
_SYNC_S = 1.0


def _first_nonfinite(data: bytes) -> str | None:
    """How the first step with a non-finite loss among these lines reads, as the stop
    condition says it."""
    for raw in data.splitlines():
        try:
            ev = json.loads(raw)
        except ValueError:
            continue
        loss = ev.get("loss") if isinstance(ev, dict) else None
        if ev.get("kind") == "step" and isinstance(loss, float) and not math.isfinite(loss):
            return f"rank {ev.get('rank')} step {ev.get('step')} loss {loss}"
    return None
