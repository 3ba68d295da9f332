"""Events: everything that happens in a drill, on one clock.

An *event* is one JSON line: ``ts`` (wall clock, seconds since the epoch), ``mono``
(``time.monotonic()``: one clock for every process of the host, used for ordering and
durations), ``src`` (who saw it), ``kind``, ``task`` (the task id that correlates them) and
flat fields. Sources:

=========  ====================================================================
probe      the training script itself (``faultdrill.probe``)
platform   the platform: agents, workers, job state (``faultdrill.platforms``)
fault      injections and reverts (``faultdrill.faults``)
sampler    the process table, sampled (``faultdrill.engine.samplers``)
net        per-node network counters and round trips
harness    the drill engine: scenario start/end, stop conditions, operator actions
=========  ====================================================================

Writers append to ``<run>/events/<name>.jsonl``; readers tolerate a torn last line.

A job whose processes run on other hosts than the harness (a real Slurm cluster) writes
its events into the shared run directory with ``mono`` on the harness's clock: the
platform exports ``FAULTDRILL_CLOCK_OFFSET`` (the harness's ``time.time() -
time.monotonic()``), and every writer there stamps ``mono = time.time() - offset``
(wall clocks kept in step by NTP; their skew is the timeline's error).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_CLOCK_OFFSET = "FAULTDRILL_CLOCK_OFFSET"


def clock_offset_from_env() -> float | None:
    """The harness's wall-minus-monotonic offset a remote writer stamps ``mono`` with, or
    None (same host: ``time.monotonic()`` is the drill's clock)."""
    raw = os.environ.get(ENV_CLOCK_OFFSET)
    try:
        return float(raw) if raw else None
    except ValueError:
        return None


__all__ = ["SOURCES", "Event", "EventSink", "read_jsonl"]

SOURCES = ("probe", "platform", "fault", "sampler", "net", "harness")
_RESERVED = frozenset({"ts", "mono", "src", "kind", "task"})


@dataclass(frozen=True, slots=True)
class Event:
    ts: float
    mono: float
    src: str
    kind: str
    task: str
    fields: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self.fields[key]

    def to_json(self) -> dict[str, Any]:
        return {
            "ts": self.ts,
            "mono": self.mono,
            "src": self.src,
            "kind": self.kind,
            "task": self.task,
            **self.fields,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Event:
        fields = {k: v for k, v in raw.items() if k not in _RESERVED}
        return cls(
            ts=float(raw.get("ts", 0.0)),
            mono=float(raw.get("mono", 0.0)),
            src=str(raw.get("src", "")),
            kind=str(raw.get("kind", "")),
            task=str(raw.get("task", "")),
            fields=fields,
        )


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the JSON objects of one events file, skipping torn or foreign lines."""
    with open(path, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                return  # torn last line: the writer died mid-write
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict):
                yield obj


class EventSink:
    """Appends harness-side events to ``<events_dir>/<stream>.jsonl``. Thread-safe.

    One file per stream keeps writers from interleaving; every event is one ``write``
    so a crash loses at most that line.
    """

    def __init__(self, events_dir: Path, task_id: str, *, mono_offset: float | None = None) -> None:
        """``mono_offset``: stamp ``mono`` as ``time.time() - mono_offset`` (a writer on
        another host than the harness: :func:`clock_offset_from_env`)."""
        self.events_dir = events_dir
        self.task_id = task_id
        self.mono_offset = mono_offset
        events_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._fds: dict[str, int] = {}

    def emit(self, src: str, kind: str, *, stream: str | None = None, **fields: Any) -> Event:
        ts = time.time()
        mono = time.monotonic() if self.mono_offset is None else ts - self.mono_offset
        ev = Event(ts, mono, src, kind, self.task_id, fields)
        line = (json.dumps(ev.to_json(), separators=(",", ":"), default=str) + "\n").encode()
        name = stream or src
        with self._lock:
            fd = self._fds.get(name)
            if fd is None:
                path = self.events_dir / f"{name}.jsonl"
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                self._fds[name] = fd
            os.write(fd, line)
        return ev

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
