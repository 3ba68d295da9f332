"""The timeline: one run's events, merged on one clock, with what can be derived from them.

A :class:`Timeline` holds the non-step events as :class:`~faultdrill.events.Event` objects
sorted by monotonic time, and the step events as a columnar :class:`StepTable` (numpy), so
that checks over millions of steps stay vectorised. From these it derives:

* *incarnations*: the generations of the job. Replicas that announced the same rendezvous
  endpoint (``MASTER_ADDR:MASTER_PORT``, unique per torchrun rendezvous round) form one
  incarnation; without an endpoint, a rank announcing itself twice starts a new one. We
  count generations ourselves because ``TORCHELASTIC_RESTART_COUNT`` is per agent.
* process lives from the sampler (when each worker/agent pid was first and last seen);
* the *committed chain*: which steps of which incarnation make up the progress that the
  final model is built on (each incarnation from the step after the checkpoint it loaded
  up to the step of the checkpoint its successor loaded). Steps outside it were recomputed.

Nothing here judges; checks (``faultdrill.checks``) do.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import PIPE
from typing import Any

import numpy as np

from faultdrill.events import Event

__all__ = [
    "Incarnation",
    "ProcLife",
    "Segment",
    "StepTable",
    "Timeline",
]

I8 = np.int64


@dataclass
class StepTable:
    """Step events in columns. Row i is one rank's step; its sample ranges are
    ``rng_start[rng_off[i]:rng_off[i+1]]`` / ``rng_end[...]``; ``rng_row`` maps each range
    back to its row. ``inc`` is filled in when incarnations are derived (-1: unknown)."""

    mono: np.ndarray
    rank: np.ndarray
    pid: np.ndarray
    step: np.ndarray
    loss: np.ndarray
    rng_off: np.ndarray
    rng_start: np.ndarray
    rng_end: np.ndarray
    inc: np.ndarray

    def __len__(self) -> int:
        return int(self.step.shape[0])

    @property
    def rng_row(self) -> np.ndarray:
        counts = np.diff(self.rng_off)
        return np.repeat(np.arange(len(self), dtype=I8), counts)

    @classmethod
    def empty(cls) -> StepTable:
        return cls.from_columns([], [], [], [], [], [])

    @classmethod
    def from_columns(
        cls,
        mono: Iterable[float] | np.ndarray,
        rank: Iterable[int] | np.ndarray,
        pid: Iterable[int] | np.ndarray,
        step: Iterable[int] | np.ndarray,
        loss: Iterable[float] | np.ndarray,
        samples: list[list[list[int]]] | None = None,
        *,
        rng_off: np.ndarray | None = None,
        rng_start: np.ndarray | None = None,
        rng_end: np.ndarray | None = None,
    ) -> StepTable:
        """Build from per-row values; sample ranges either as nested lists or as CSR arrays."""
        step_a = np.asarray(step, dtype=I8)
        if rng_off is None:
            samples = samples or [[] for _ in range(step_a.shape[0])]
            counts = np.fromiter((len(s) for s in samples), dtype=I8, count=len(samples))
            rng_off = np.zeros(len(samples) + 1, dtype=I8)
            np.cumsum(counts, out=rng_off[1:])
            flat = [pair for s in samples for pair in s]
            pairs = np.asarray(flat, dtype=I8).reshape(-1, 2)
            rng_start, rng_end = pairs[:, 0].copy(), pairs[:, 1].copy()
        assert rng_start is not None and rng_end is not None
        return cls(
            mono=np.asarray(mono, dtype=np.float64),
            rank=np.asarray(rank, dtype=I8),
            pid=np.asarray(pid, dtype=I8),
            step=step_a,
            loss=np.asarray(loss, dtype=np.float64),
            rng_off=np.asarray(rng_off, dtype=I8),
            rng_start=np.asarray(rng_start, dtype=I8),
            rng_end=np.asarray(rng_end, dtype=I8),
            inc=np.full(step_a.shape[0], -1, dtype=I8),
        )

    def take(self, rows: np.ndarray) -> StepTable:
        """The sub-table of the given row indices (or boolean mask), ranges included."""
        idx = np.flatnonzero(rows) if rows.dtype == bool else rows
        off, src = self._range_index(idx)
        return StepTable(
            mono=self.mono[idx],
            rank=self.rank[idx],
            pid=self.pid[idx],
            step=self.step[idx],
            loss=self.loss[idx],
            rng_off=off,
            rng_start=self.rng_start[src],
            rng_end=self.rng_end[src],
            inc=self.inc[idx],
        )

    def ranges(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of the sample ranges of the given rows (index array or boolean
        mask), in row order; copies only those two columns, unlike :meth:`take`."""
        one_each = (
            rows.dtype == bool
            and self.rng_start.shape[0] == len(self) == rows.shape[0]
            and not self.rng_off[0]
            and bool((self.rng_off[1:] - self.rng_off[:-1] == 1).all())
        )
        if one_each:  # one range per row, as the probe writes contiguous ids: no index needed
            return self.rng_start[rows], self.rng_end[rows]
        idx = np.flatnonzero(rows) if rows.dtype == bool else rows
        _off, src = self._range_index(idx)
        return self.rng_start[src], self.rng_end[src]

    def _range_index(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For rows ``idx``: their new CSR offsets and the positions of their ranges."""
        first = self.rng_off[:-1][idx]
        counts = self.rng_off[1:][idx] - first
        off = np.zeros(idx.shape[0] + 1, dtype=I8)
        np.cumsum(counts, out=off[1:])
        # position of range j of the result: first[row] + (j - off[row])
        src = np.repeat(first - off[:-1], counts)
        src += np.arange(int(off[-1]), dtype=I8)
        return off, src


@dataclass
class Incarnation:
    """One generation of the job: the replicas of one rendezvous round."""

    index: int
    master: str | None
    members: dict[int, int] = field(default_factory=dict)  # pid -> rank
    starts: list[Event] = field(default_factory=list)
    loads: list[Event] = field(default_factory=list)  # ckpt_load / ckpt_none
    ends: list[Event] = field(default_factory=list)
    first_step: int | None = None
    last_step: int | None = None
    first_step_mono: float | None = None
    last_step_mono: float | None = None

    @property
    def started_mono(self) -> float:
        return min(e.mono for e in self.starts)

    @property
    def ready_mono(self) -> float:
        """When the last replica of this generation announced itself ready."""
        return max(e.mono for e in self.starts)

    @property
    def world_size(self) -> int:
        return int(self.starts[0].get("world_size", len(set(self.members.values()))))

    @property
    def ranks(self) -> list[int]:
        return sorted(set(self.members.values()))

    @property
    def nodes(self) -> list[str]:
        return sorted({str(e.get("node")) for e in self.starts})

    def duplicate_ranks(self) -> dict[int, list[int]]:
        """Ranks announced by more than one pid in this generation -> those pids."""
        by_rank: dict[int, list[int]] = defaultdict(list)
        for pid, rank in self.members.items():
            by_rank[rank].append(pid)
        return {r: pids for r, pids in by_rank.items() if len(pids) > 1}

    @property
    def load(self) -> Event | None:
        """The resume decision of this generation (the lowest rank's load event)."""
        if not self.loads:
            return None
        return min(self.loads, key=lambda e: (e.get("rank", 0), e.mono))

    @property
    def resume_step(self) -> int | None:
        """Step of the checkpoint it resumed from; 0 when it started from scratch."""
        ld = self.load
        if ld is None:
            return None
        return int(ld["step"]) if ld.kind == "ckpt_load" else 0


@dataclass(frozen=True)
class ProcLife:
    """One process of the job as the sampler saw it."""

    pid: int
    start_time: int
    role: str  # "agent" | "worker" | "other"
    rank: int | None
    node: str
    seen_mono: float
    gone_mono: float | None  # first sample it was missing from; None: alive at the end
    last_seen_mono: float  # last sample it was present in

    def seen_alive_at(self, mono: float) -> bool:
        """Certainly alive at ``mono``: seen in samples on both sides of it."""
        return self.seen_mono <= mono <= self.last_seen_mono


@dataclass(frozen=True)
class Segment:
    """Steps ``first..last`` (inclusive) of incarnation ``inc``."""

    inc: int
    first: int
    last: int

    @property
    def steps(self) -> int:
        return max(0, self.last - self.first + 1)


@dataclass
class Timeline:
    task_id: str
    events: list[Event]
    steps: StepTable
    torn_lines: int = 0
    incarnations: list[Incarnation] = field(default_factory=list)
    procs: list[ProcLife] = field(default_factory=list)

    # --- construction ---------------------------------------------------------------

    @classmethod
    def load(cls, events_dir: Path, *, readers: int | None = None) -> Timeline:
        """Read every ``*.jsonl`` under ``events_dir`` (a run's or a scenario's).

        Streams: step events go straight into columns, so memory stays near the size of
        the resulting table rather than of the parsed JSON. A line that is torn, not JSON
        or not an object, and a record that is malformed (a step without ``mono`` or
        ``step``, a non-numeric time, rank, step or sample range), is skipped and counted
        in ``torn_lines``; loading never raises on the content of a line.

        Files of :data:`PARALLEL_BYTES` or more in all are read by ``readers`` processes
        (default: one per usable CPU, at most 4), each taking a run of consecutive files;
        their parts are joined in file order, so the result is the same either way.
        ``readers=1`` reads in this process whatever the size."""
        paths = sorted(events_dir.glob("*.jsonl"))
        parts = _read_in_parallel(paths, readers)
        if parts is None:
            parts = [_read_files(paths)]
        events: list[Event] = []
        steps = _StepColumns()
        task = ""
        torn = 0
        for part in parts:
            task = task or part.task
            events.extend(part.events)
            steps.absorb(part.chunks)
            part.chunks = []  # the table frees each column's chunks as it joins them
            torn += part.torn
        tl = cls._assemble(task, events, steps.table())
        tl.torn_lines = torn
        return tl

    @classmethod
    def from_records(cls, records: Iterable[dict[str, Any]]) -> Timeline:
        """Build from raw event dicts in any order (tests use tiny literal lists)."""
        events: list[Event] = []
        steps = _StepColumns()
        task = ""
        for raw in records:
            if raw.get("src") == "probe" and raw.get("kind") == "step":
                steps.add(raw)
            else:
                events.append(Event.from_json(raw))
            task = task or str(raw.get("task", ""))
        return cls._assemble(task, events, steps.table())

    @classmethod
    def _assemble(cls, task: str, events: list[Event], steps: StepTable) -> Timeline:
        """Sort events and steps by time (stable: ties keep file order), then derive."""
        mono = steps.mono
        if len(steps) and not bool((mono[1:] >= mono[:-1]).all()):
            _reorder(steps, np.argsort(mono, kind="stable"))
        events.sort(key=lambda e: e.mono)
        return cls.from_parts(task, events, steps)

    @classmethod
    def from_parts(cls, task_id: str, events: list[Event], steps: StepTable) -> Timeline:
        """Build from already-sorted events and a mono-sorted step table."""
        tl = cls(task_id=task_id, events=events, steps=steps)
        tl._derive_incarnations()
        tl._derive_procs()
        return tl

    # --- queries ----------------------------------------------------------------------

    def of(self, src: str | None = None, kind: str | None = None) -> list[Event]:
        return [
            e
            for e in self.events
            if (src is None or e.src == src) and (kind is None or e.kind == kind)
        ]

    def first(self, src: str, kind: str, after: float = float("-inf")) -> Event | None:
        for e in self.events:
            if e.mono >= after and e.src == src and e.kind == kind:
                return e
        return None

    def checkpoint_saves(self) -> dict[str, Event]:
        """Checkpoint id -> its (last) ckpt_save event."""
        return {str(e["id"]): e for e in self.of("probe", "ckpt_save")}

    def inc_of_pid(self, pid: int) -> int | None:
        for inc in self.incarnations:
            if pid in inc.members:
                return inc.index
        return None

    def incarnation_after(self, mono: float) -> Incarnation | None:
        """The first generation that started after ``mono``."""
        for inc in self.incarnations:
            if inc.started_mono > mono:
                return inc
        return None

    def incarnation_at(self, mono: float) -> Incarnation | None:
        """The newest generation started at or before ``mono``."""
        current = None
        for inc in self.incarnations:
            if inc.started_mono <= mono:
                current = inc
        return current

    def final_incarnation(self) -> Incarnation | None:
        """The generation whose steps the run ended with (prefers one that ended ok)."""
        finished = [i for i in self.incarnations if any(e.get("status") == "ok" for e in i.ends)]
        if finished:
            return finished[-1]
        stepped = [i for i in self.incarnations if i.first_step is not None]
        return stepped[-1] if stepped else None

    def committed_chain(self) -> tuple[list[Segment], list[str]]:
        """Segments of committed progress, oldest first, and notes where the chain breaks."""
        notes: list[str] = []
        final = self.final_incarnation()
        if final is None or final.last_step is None:
            return [], ["no incarnation made progress"]
        saves: dict[str, list[Event]] = defaultdict(list)  # id -> its saves, oldest first
        for e in self.of("probe", "ckpt_save"):
            saves[str(e["id"])].append(e)
        segments: list[Segment] = []
        cur, upper = final, final.last_step
        seen: set[int] = set()
        while True:
            seen.add(cur.index)
            base = cur.resume_step
            if base is None:
                notes.append(f"incarnation {cur.index} recorded no checkpoint load decision")
                base = (cur.first_step or 1) - 1
            segments.append(Segment(cur.index, base + 1, upper))
            ld = cur.load
            if base == 0 or ld is None or ld.kind != "ckpt_load":
                break
            # The save the load read: the newest of that id before the load. A framework
            # may write the same id again after resuming from it (Lightning re-saves the
            # step it resumed at); that later save is not what this generation loaded.
            before = [e for e in saves.get(str(ld["id"]), []) if e.mono < ld.mono]
            save = before[-1] if before else None
            if save is None:
                notes.append(
                    f"incarnation {cur.index} loaded checkpoint {ld['id']!r}, "
                    "which no replica of this run reported saving"
                )
                break
            writer = self.inc_of_pid(int(save.get("pid", -1)))
            if writer is None or writer in seen:
                notes.append(
                    f"writer of checkpoint {ld['id']!r} is not a known earlier incarnation"
                )
                break
            cur, upper = self.incarnations[writer], int(save["step"])
        segments.reverse()
        return segments, notes

    def recomputed(self, chain: list[Segment]) -> list[Segment]:
        """Per incarnation, the steps it ran that are not part of the committed chain."""
        committed = {s.inc: s for s in chain}
        out = []
        for inc in self.incarnations:
            if inc.first_step is None or inc.last_step is None:
                continue
            seg = committed.get(inc.index)
            if seg is None:
                out.append(Segment(inc.index, inc.first_step, inc.last_step))
            elif inc.last_step > seg.last:
                out.append(Segment(inc.index, seg.last + 1, inc.last_step))
        return out

    def rows_in(self, segments: Iterable[Segment]) -> np.ndarray:
        """Boolean mask of step rows that fall in the given segments."""
        st = self.steps
        mask = np.zeros(len(st), dtype=bool)
        for seg in segments:
            mask |= (st.inc == seg.inc) & (st.step >= seg.first) & (st.step <= seg.last)
        return mask

    def iter_procs(self, role: str | None = None) -> Iterator[ProcLife]:
        return (p for p in self.procs if role is None or p.role == role)

    # --- derivations ------------------------------------------------------------------

    def _derive_incarnations(self) -> None:
        starts = self.of("probe", "run_start")
        incs: list[Incarnation] = []
        by_master: dict[str, Incarnation] = {}
        current: Incarnation | None = None
        for ev in starts:
            master = ev.get("master")
            pid, rank = int(ev.get("pid", 0)), int(ev.get("rank", 0))
            if master:
                inc = by_master.get(master)
                if inc is None:
                    inc = Incarnation(index=len(incs), master=master)
                    incs.append(inc)
                    by_master[master] = inc
            else:
                if current is None or current.master or rank in current.members.values():
                    current = Incarnation(index=len(incs), master=None)
                    incs.append(current)
                inc = current
            inc.members[pid] = rank
            inc.starts.append(ev)
        pid_inc = {pid: inc.index for inc in incs for pid in inc.members}
        for ev in self.events:
            if ev.src != "probe":
                continue
            idx = pid_inc.get(int(ev.get("pid", -1)))
            if idx is None:
                continue
            if ev.kind in ("ckpt_load", "ckpt_none"):
                incs[idx].loads.append(ev)
            elif ev.kind == "run_end":
                incs[idx].ends.append(ev)
        st = self.steps
        if len(st):
            st.inc = _lookup(pid_inc, st.pid)
            for inc in incs:
                m = st.inc == inc.index
                if not m.any():
                    continue
                # masked reductions: no copy of the incarnation's rows
                inc.first_step = int(st.step.min(where=m, initial=np.iinfo(I8).max))
                inc.last_step = int(st.step.max(where=m, initial=np.iinfo(I8).min))
                inc.first_step_mono = float(st.mono.min(where=m, initial=np.inf))
                inc.last_step_mono = float(st.mono.max(where=m, initial=-np.inf))
        self.incarnations = incs

    def _derive_procs(self) -> None:
        seen: dict[tuple[int, int], Event] = {}
        gone: dict[tuple[int, int], Event] = {}
        last_sample = max((e.mono for e in self.events if e.src == "sampler"), default=0.0)
        for ev in self.events:
            if ev.src != "sampler":
                continue
            key = (int(ev.get("pid", 0)), int(ev.get("start_time", 0)))
            if ev.kind == "proc_seen":
                seen.setdefault(key, ev)
            elif ev.kind == "proc_gone":
                gone.setdefault(key, ev)
        procs = []
        for key, ev in seen.items():
            rank = ev.get("rank")
            end = gone.get(key)
            procs.append(
                ProcLife(
                    pid=key[0],
                    start_time=key[1],
                    role=str(ev.get("role", "other")),
                    rank=None if rank is None else int(rank),
                    node=str(ev.get("node", "")),
                    seen_mono=ev.mono,
                    gone_mono=end.mono if end else None,
                    last_seen_mono=float(end.get("last_seen_mono", end.mono))
                    if end
                    else last_sample,
                )
            )
        self.procs = sorted(procs, key=lambda p: p.seen_mono)

    @property
    def unknown_step_rows(self) -> int:
        """Step events from processes that never announced themselves (no run_start)."""
        return int((self.steps.inc < 0).sum())


def _reorder(st: StepTable, order: np.ndarray) -> None:
    """Put the rows of a table nobody else holds yet in ``order``, column by column: the
    same result as :meth:`StepTable.take`, with one column's copy alive at a time."""
    off, src = st._range_index(order)
    for name in ("mono", "rank", "pid", "step", "loss", "inc"):
        setattr(st, name, getattr(st, name)[order])
    st.rng_start = st.rng_start[src]
    st.rng_end = st.rng_end[src]
    st.rng_off = off


def _lookup(table: dict[int, int], keys: np.ndarray) -> np.ndarray:
    """``table[k]`` for every ``k`` in ``keys`` (-1 where absent), in linear time."""
    out = np.full(keys.shape[0], -1, dtype=I8)
    if not table or not keys.size:
        return out
    known = np.fromiter(table.keys(), dtype=I8, count=len(table))
    values = np.fromiter(table.values(), dtype=I8, count=len(table))
    lo = min(int(known.min()), int(keys.min()))
    span = max(int(known.max()), int(keys.max())) - lo + 1
    if span <= 1 << 23:  # pids are small integers: a lookup table (<= 64 MiB), no search
        lut = np.full(span, -1, dtype=I8)
        lut[known - lo] = values
        at = keys - lo
        np.take(lut, at, out=out)
        return out
    order = np.argsort(known)
    known, values = known[order], values[order]
    pos = np.searchsorted(known, keys)
    np.minimum(pos, known.size - 1, out=pos)
    hit = known[pos] == keys
    out[hit] = values[pos[hit]]
    return out


#: Event files this large in all (bytes) are read by several processes.
PARALLEL_BYTES = 128 << 20


@dataclass
class _Part:
    """What one reader made of a run of consecutive event files."""

    task: str
    events: list[Event]
    chunks: list[list[np.ndarray]]  # per step column, its converted chunks in file order
    torn: int  # lines skipped, rows dropped included


def _read_files(paths: list[Path]) -> _Part:
    events: list[Event] = []
    steps = _StepColumns()
    task = ""
    torn = 0
    for path in paths:
        with open(path, "rb") as f:
            for line in f:
                m = _probe_step_line(line)
                if m is not None:  # the probe's own step line: no JSON decoding needed
                    fields = m.groups()
                    steps.add_matched(fields)
                    task = task or json.loads(b'"' + fields[0] + b'"')
                    continue
                raw = _parse_line(line)
                if raw is None:
                    torn += 1
                    continue
                if raw.get("src") == "probe" and raw.get("kind") == "step":
                    if not steps.add(raw):
                        torn += 1
                        continue
                else:
                    try:
                        events.append(Event.from_json(raw))
                    except (TypeError, ValueError):  # a time that is not a number
                        torn += 1
                        continue
                task = task or str(raw.get("task", ""))
    chunks = steps.chunks()
    return _Part(task, events, chunks, torn + steps.bad)


def _read_in_parallel(paths: list[Path], readers: int | None) -> list[_Part] | None:
    """The parts read by ``readers`` child processes (``python -m faultdrill.event_reader``),
    or None where one reader will do: few bytes, one file, one CPU, or a reader that could
    not start or failed (then the caller reads everything itself; nothing is lost).

    Plain subprocesses, not :mod:`multiprocessing`: its spawn re-runs the caller's main
    module in each child, and fork is unsafe beside the engine's sampler threads."""
    sizes = []
    for path in paths:
        try:
            sizes.append(path.stat().st_size)
        except OSError:
            sizes.append(0)
    if readers is None:
        if sum(sizes) < PARALLEL_BYTES:
            return None
        readers = min(4, len(os.sched_getaffinity(0)))
    groups = _split_by_size(paths, sizes, readers)
    if len(groups) < 2:
        return None
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(x for x in (package_root, env.get("PYTHONPATH")) if x)
    argv = [sys.executable, "-m", "faultdrill.event_reader"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in groups:
            procs.append(subprocess.Popen(argv, stdin=PIPE, stdout=PIPE, stderr=PIPE, env=env))

        def run(proc: subprocess.Popen[bytes], group: list[Path]) -> bytes | None:
            out, _err = proc.communicate(json.dumps([str(p) for p in group]).encode())
            return out if proc.returncode == 0 else None

        with ThreadPoolExecutor(len(procs)) as pool:
            outs = list(pool.map(run, procs, groups))
        parts: list[_Part] = []
        for i, out in enumerate(outs):
            if out is None:
                return None
            outs[i] = None  # one pickled part in memory at a time, besides the parts
            part = pickle.loads(out)
            if not isinstance(part, _Part):
                return None
            parts.append(part)
        return parts
    except (OSError, ValueError, pickle.UnpicklingError, EOFError):
        return None
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _split_by_size(paths: list[Path], sizes: list[int], n: int) -> list[list[Path]]:
    """``paths`` cut into at most ``n`` runs of consecutive files of about equal size."""
    total = sum(sizes)
    groups: list[list[Path]] = []
    current: list[Path] = []
    done = 0
    for path, size in zip(paths, sizes, strict=True):
        current.append(path)
        done += size
        if len(groups) < n - 1 and done >= total * (len(groups) + 1) / n:
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups


_raw_decode = json.JSONDecoder().raw_decode

# Possessive quantifiers: these patterns never need to backtrack, and matching is most of
# the cost of loading (about 1.5 us a line against 4-8 us for the JSON decoder).
_INT = rb"-?(?:0|[1-9][0-9]*+)"
_NUM = rb"(?:-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?+(?:[eE][-+]?[0-9]++)?+|NaN|-?Infinity)"
_CHARS = rb"[\x20\x21\x23-\x5b\x5d-\x7e]*+"  # printable ASCII but the quote and backslash
_STR = _CHARS + rb'(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})' + _CHARS + rb")*+"
#: A step line exactly as :meth:`faultdrill.probe.Probe.step` writes it, with no sample
#: range or one. Only strict JSON (numbers, an ASCII task) matches, so every line it takes
#: is one :func:`_parse_line` would decode to the same values; any other line goes that way.
#: Groups: task, rank, pid, mono, step, loss, range start, range end.
_probe_step_line = re.compile(
    (
        rb'\{"src": "probe", "task": "(STR)", "rank": (INT), "pid": (INT),'
        rb'"ts":NUM,"mono":(NUM),"kind":"step","step":(INT),"loss":(NUM),'
        rb'"samples":\[(?:\[(INT),(INT)\])?\]\}\n'
    )
    .replace(b"STR", _STR)
    .replace(b"INT", _INT)
    .replace(b"NUM", _NUM)
).fullmatch


def _parse_line(line: bytes) -> dict[str, Any] | None:
    """One events line as an object, or None if it is torn (no newline: the writer died
    mid-write), not JSON, or not an object: what :func:`~faultdrill.events.read_jsonl`
    accepts, decoded faster for the usual line (one object, then the newline)."""
    if not line.endswith(b"\n"):
        return None
    try:
        text = line.decode()
        obj, end = _raw_decode(text)
        if end != len(text) - 1:  # more than the newline follows: let json.loads judge
            obj = json.loads(text)
    except ValueError:  # not JSON, or not UTF-8: json.loads has the final word
        try:
            obj = json.loads(line)
        except ValueError:
            return None
    return obj if isinstance(obj, dict) else None


class _StepColumns:
    """Step events gathered as columns, converted to numpy every :attr:`CHUNK` rows, so
    the event dicts never pile up (at 10 M steps they would take several GiB)."""

    CHUNK = 1 << 16

    def __init__(self) -> None:
        self._done: list[list[np.ndarray]] = [[] for _ in range(8)]  # chunks, per column
        self.bad = 0  # rows dropped because a value was not a number (see _close)
        self._open()

    def _open(self) -> None:
        self.mono: list[Any] = []
        self.rank: list[Any] = []
        self.pid: list[Any] = []
        self.step: list[Any] = []
        self.loss: list[Any] = []
        self.counts: list[int] = []
        self.pairs: list[Any] = []

    def add(self, raw: dict[str, Any]) -> bool:
        """Queue one step event; False (nothing queued) if it lacks ``mono`` or ``step`` or
        its ``samples`` is not a list. Values are checked when the chunk is converted."""
        samples = raw.get("samples") or []
        if "mono" not in raw or "step" not in raw or type(samples) not in (list, tuple):
            return False
        self.mono.append(raw["mono"])
        self.rank.append(raw.get("rank", 0))
        self.pid.append(raw.get("pid", 0))
        self.step.append(raw["step"])
        self.loss.append(raw.get("loss", float("nan")))
        self.counts.append(len(samples))
        self.pairs.extend(samples)
        if len(self.step) >= self.CHUNK:
            self._close()
        return True

    def add_matched(self, fields: tuple[Any, ...]) -> None:
        """Queue one step line matched by :data:`_probe_step_line` (its groups). The values
        stay bytes: numpy converts them with the chunk, as it does the numbers of :meth:`add`."""
        _task, rank, pid, mono, step, loss, lo, hi = fields
        self.mono.append(mono)
        self.rank.append(rank)
        self.pid.append(pid)
        self.step.append(step)
        self.loss.append(loss)
        if lo is None:
            self.counts.append(0)
        else:
            self.counts.append(1)
            self.pairs.append((lo, hi))
        if len(self.step) >= self.CHUNK:
            self._close()

    def _convert(self) -> tuple[np.ndarray, ...]:
        """The open chunk as columns; ValueError/TypeError/OverflowError if a value is not
        a number or a sample is not a [start, end) pair."""
        pairs = np.asarray(self.pairs, dtype=I8)
        if pairs.size == 0:
            pairs = pairs.reshape(0, 2)
        elif pairs.ndim != 2 or pairs.shape[1] != 2:
            raise ValueError("a sample range is not a [start, end) pair")
        return (
            np.asarray(self.mono, dtype=np.float64),
            np.asarray(self.rank, dtype=I8),
            np.asarray(self.pid, dtype=I8),
            np.asarray(self.step, dtype=I8),
            np.asarray(self.loss, dtype=np.float64),
            np.asarray(self.counts, dtype=I8),
            pairs[:, 0].copy(),
            pairs[:, 1].copy(),
        )

    def _drop_bad_rows(self) -> None:
        """Slow path, only for a chunk that failed to convert: keep the rows whose every
        value converts on its own, count the others in :attr:`bad`."""
        cols = (self.mono, self.rank, self.pid, self.step, self.loss)
        types = (np.float64, I8, I8, I8, np.float64)
        keep: list[int] = []
        starts: list[int] = []
        at = 0
        for i, n in enumerate(self.counts):
            starts.append(at)
            at += n
            try:
                for col, dt in zip(cols, types, strict=True):
                    if np.asarray(col[i], dtype=dt).ndim:
                        raise ValueError("not a single number")
                pairs = np.asarray(self.pairs[starts[i] : at], dtype=I8)
                if pairs.size and (pairs.ndim != 2 or pairs.shape[1] != 2):
                    raise ValueError("not a pair")
            except (ValueError, TypeError, OverflowError):
                continue
            keep.append(i)
        self.bad += len(self.counts) - len(keep)
        pairs_kept = [p for i in keep for p in self.pairs[starts[i] : starts[i] + self.counts[i]]]
        self.mono, self.rank, self.pid, self.step, self.loss = ([c[i] for i in keep] for c in cols)
        self.counts = [self.counts[i] for i in keep]
        self.pairs = pairs_kept

    def _close(self) -> None:
        if not self.step:
            return
        try:
            chunk = self._convert()
        except (ValueError, TypeError, OverflowError):
            self._drop_bad_rows()
            try:
                chunk = self._convert()
            except (ValueError, TypeError, OverflowError):  # mixed rows numpy still refuses
                self.bad += len(self.step)
                self.step = []
            if not self.step:
                self._open()
                return
        for done, col in zip(self._done, chunk, strict=True):
            done.append(col)
        self._open()

    def chunks(self) -> list[list[np.ndarray]]:
        """Everything added so far, converted: per column, its chunks in order."""
        self._close()
        return self._done

    def absorb(self, chunks: list[list[np.ndarray]]) -> None:
        """Append what another reader's :meth:`chunks` returned, after what is here."""
        self._close()
        for done, more in zip(self._done, chunks, strict=True):
            done.extend(more)

    def table(self) -> StepTable:
        """Everything added so far, in the order added."""
        self._close()
        if not self._done[0]:
            return StepTable.empty()
        cols = []
        for done in self._done:  # one column at a time: its chunks are freed as it is joined
            cols.append(np.concatenate(done) if len(done) > 1 else done[0])
            done.clear()
        mono, rank, pid, step, loss, counts, starts, ends = cols
        off = np.zeros(counts.shape[0] + 1, dtype=I8)
        np.cumsum(counts, out=off[1:])
        return StepTable.from_columns(
            mono, rank, pid, step, loss, rng_off=off, rng_start=starts, rng_end=ends
        )
