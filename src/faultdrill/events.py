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
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CHECKPOINT_COMMIT_KINDS",
    "RAY_CHECKPOINT_REGISTERED",
    "SHAPES",
    "SOURCES",
    "Event",
    "EventSink",
    "malformed",
    "read_jsonl",
    "read_objects",
]

SOURCES = ("probe", "platform", "fault", "sampler", "net", "harness")
#: Platform events that commit a checkpoint: the platform resumes only from a checkpoint
#: it recorded so (``step``: the step it was reported at; ``id``: the directory's name).
RAY_CHECKPOINT_REGISTERED = "ray_checkpoint_registered"
CHECKPOINT_COMMIT_KINDS = frozenset({RAY_CHECKPOINT_REGISTERED})
_RESERVED = frozenset({"ts", "mono", "src", "kind", "task"})

#: The fields the timeline and the judge rely on, by (source, kind): name -> type, where
#: a type is ``int``, ``num`` (a finite number), ``str``, ``bool``, ``list``, ``dict`` or
#: ``rtts`` (a mapping of peer -> number or null) or ``digests`` (a mapping of name ->
#: string), with ``?`` when null is allowed and a
#: leading ``!`` when the field is required. An event breaking its shape is malformed
#: (:func:`malformed`): the reader skips it and counts it against its file, and the
#: evidence it feeds is judged retest, never read with a wrong value. Other fields and
#: kinds are free-form.
_PROBE = {"pid": "!int", "rank": "!int"}
SHAPES: dict[tuple[str, str], dict[str, str]] = {
    ("probe", "run_start"): {
        **_PROBE,
        "world_size": "int",
        "local_rank": "int?",
        "restart_count": "int?",
        "master": "str?",
        "node": "str",
    },
    ("probe", "ckpt_load"): {
        **_PROBE,
        "id": "!str",
        "step": "!int",
        "data_position": "int",
        "rejected": "list",
        "duration_s": "num?",
    },
    ("probe", "ckpt_none"): {**_PROBE, "rejected": "list"},
    ("probe", "ckpt_components"): {
        **_PROBE,
        "id": "!str",
        "step": "!int",
        "phase": "!str",
        "components": "!digests",
    },
    ("probe", "ckpt_save"): {
        **_PROBE,
        "id": "!str",
        "step": "!int",
        "bytes": "int?",
        "data_position": "int",
        "duration_s": "num?",
    },
    ("probe", "ckpt_save_failed"): {**_PROBE, "step": "!int", "duration_s": "num?"},
    ("probe", "run_end"): {**_PROBE, "status": "str", "final_step": "int"},
    ("sampler", "proc_seen"): {
        "pid": "!int",
        "start_time": "!int",
        "role": "str",
        "rank": "int?",
        "node": "str",
        "ppid": "int?",
        "owner": "int?",
    },
    ("sampler", "proc_gone"): {
        "pid": "!int",
        "start_time": "!int",
        "rank": "int?",
        "last_seen_mono": "num",
    },
    ("sampler", "proc_exit"): {"pid": "!int", "start_time": "!int"},
    ("platform", "job_state"): {"state": "!str"},
    ("net", "net_sample"): {"node": "!str", "rtt_ms": "rtts", "probed_mono": "num"},
    ("fault", "injected"): {"fault": "str", "at_step": "int?", "duration_s": "num?"},
    ("harness", "stop_condition"): {"condition": "!str"},
}


#: Fields an event of a source carries whatever its kind, when present: the probe stamps
#: its pid and rank on every line, and the timeline keys incarnations by them, so a probe
#: kind without a shape of its own is held to them too.
_EVERY_KIND: dict[str, dict[str, str]] = {
    "probe": {"pid": "int?", "rank": "int?"},
}


def _finite(v: Any) -> bool:
    return type(v) in (int, float) and v - v == 0  # not bool; inf - inf and nan are nan


_TYPES: dict[str, Callable[[Any], bool]] = {
    "int": lambda v: type(v) is int,
    "num": _finite,
    "str": lambda v: type(v) is str,
    "bool": lambda v: type(v) is bool,
    "list": lambda v: type(v) is list,
    "dict": lambda v: type(v) is dict,
    "rtts": lambda v: type(v) is dict and all(x is None or _finite(x) for x in v.values()),
    "digests": lambda v: type(v) is dict and all(type(x) is str for x in v.values()),
}


def malformed(raw: dict[str, Any]) -> str | None:
    """Why the decoded event ``raw`` breaks the event contract (no ``mono``, a time that
    is not a finite number, its source, kind or task not strings, a field of :data:`SHAPES` missing or of
    the wrong type), or None when it keeps it."""
    if not (_finite(raw.get("mono")) and _finite(raw.get("ts", 0.0))):
        return "mono (and ts) must be finite numbers"
    if not all(type(raw.get(k, "")) is str for k in ("src", "kind", "task")):
        return "src, kind and task must be strings"
    src, kind = raw.get("src", ""), raw.get("kind", "")  # absent: "" (from_json)
    shape = {**_EVERY_KIND.get(src, {}), **SHAPES.get((src, kind), {})}
    for name, spec in shape.items():
        value = raw.get(name)
        if value is None:
            if spec.startswith("!"):
                return f"{name} is missing"
            if name not in raw or spec.endswith("?"):
                continue
            return f"{name} is null"
        if not _TYPES[spec.strip("!?")](value):
            return f"{name} is not {spec.strip('!?')}"
    return None


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


def read_objects(path: Path) -> Iterator[dict[str, Any]]:
    """Yield every JSON object line of a JSON-lines file that holds no events (a ledger),
    skipping a torn last line and lines that are not objects; nothing from a file that
    cannot be read. Events files are read with :func:`read_jsonl`, which also holds each
    line to the event contract."""
    for raw in _lines(path):
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            yield obj


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the events of one events file, skipping torn lines and anything that is not an
    event (not JSON, nested too deep, not an object, :func:`malformed`); nothing from a
    file that cannot be read. The timeline counts what was skipped (``Timeline.bad_lines``)."""
    for raw in _lines(path):
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict) and malformed(obj) is None:
            yield obj


#: The longest line read whole; a longer one is skipped (no event or ledger line is near it).
_MAX_LINE = 1 << 20


def _lines(path: Path) -> Iterator[bytes]:
    """The complete lines of a regular file, up to its size when opened: a symbolic link, a
    FIFO or device (which would block or never end) yields nothing, a line longer than
    :data:`_MAX_LINE` is skipped without being held, and a torn last line (the writer died
    mid-write) is dropped."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return
    os.set_blocking(fd, True)
    left = st.st_size
    with os.fdopen(fd, "rb") as f:
        while left > 0:
            raw = f.readline(min(_MAX_LINE + 1, left))
            if not raw:
                return
            left -= len(raw)
            if not raw.endswith(b"\n"):
                if len(raw) <= _MAX_LINE:
                    return  # torn last line
                while raw and not raw.endswith(b"\n") and left > 0:  # skip the rest of it
                    raw = f.readline(min(_MAX_LINE, left))
                    left -= len(raw)
                continue
            yield raw


class EventSink:
    """Appends harness-side events to ``<events_dir>/<stream>.jsonl``. Thread-safe.

    One file per stream keeps writers from interleaving; every event is one ``write``
    so a crash loses at most that line.
    """

    def __init__(self, events_dir: Path, task_id: str, *, mono_offset: float | None = None) -> None:
        """``mono_offset``: stamp ``mono`` as ``time.time() - mono_offset`` (a writer on
        another host than the harness: :func:`faultdrill.probe.clock_offset`)."""
        self.events_dir = events_dir
        self.task_id = task_id
        self.mono_offset = mono_offset
        events_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._fds: dict[str, int] = {}

    def emit(
        self,
        src: str,
        kind: str,
        *,
        stream: str | None = None,
        at_mono: float | None = None,
        **fields: Any,
    ) -> Event:
        """Append one event, stamped now, or at ``at_mono`` (a ``time.monotonic()``
        reading of when it happened, taken by whoever saw it: an exit the kernel stamped, a
        fault's change). The wall time of ``at_mono`` is derived from the clocks' offset now.
        A sink with a ``mono_offset`` (another host's writer) stamps ``mono`` from the wall
        clock instead."""
        ts, mono = time.time(), time.monotonic()
        if at_mono is not None:
            ts, mono = ts - (mono - at_mono), at_mono
        elif self.mono_offset is not None:
            mono = ts - self.mono_offset
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
