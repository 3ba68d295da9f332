"""The timeline: one run's events, merged on one clock, with what can be derived from them.

A :class:`Timeline` holds the non-step events as :class:`~faultdrill.events.Event` objects
sorted by monotonic time, and the step events as a columnar :class:`StepTable` (numpy), so
that checks over millions of steps stay vectorised. From these it derives:

* *incarnations*: the generations of the job. Replicas that announced the same rendezvous
  endpoint (``MASTER_ADDR:MASTER_PORT``, unique per torchrun rendezvous round) form one
  incarnation; without an endpoint, a rank announcing itself twice starts a new one. We
  count generations ourselves because ``TORCHELASTIC_RESTART_COUNT`` is per agent. Under a
  scheduler that restarts the whole job (a Slurm requeue), each replica also announces the
  scheduler's job id and incarnation (``sched_job_id``, ``sched_incarnation`` in
  ``run_start``): replicas of different scheduler incarnations never share a generation,
  and a generation of a later scheduler incarnation supersedes every generation of an
  earlier one, whenever either started (:meth:`Incarnation.supersedes`). A generation that
  still made steps after a later scheduler incarnation started is *stale* (an old task on a
  cut-off node that re-formed its own rendezvous): it is never anyone's successor.
* process lives from the sampler (when each worker/agent pid was first seen, and when it
  ended: its exit event where the sampler followed it by event, else the first sample it
  was missing from);
* the *committed chain*: which steps of which incarnation make up the progress that the
  final model is built on (each incarnation from the step after the checkpoint it loaded
  up to the step of the checkpoint its successor loaded). Steps outside it were recomputed.

Nothing here judges; checks (``faultdrill.checks``) do.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from faultdrill.events import Event
from faultdrill.lineage import promote_announced
from faultdrill.timeline.reader import _Part, _read_files, _read_in_parallel, _StepColumns
from faultdrill.timeline.stepfile import GLOB as STEP_FILES
from faultdrill.timeline.steps import I4, I8, StepTable
from faultdrill.timeline.store import read_store

__all__ = [
    "Incarnation",
    "ProcLife",
    "Segment",
    "StepTable",
    "Timeline",
]


@dataclass
class Incarnation:
    """One generation of the job: the replicas of one rendezvous round."""

    index: int
    master: str | None
    #: The scheduler's incarnation of the job (Slurm's restart count) its replicas
    #: announced; None when the launcher is not under such a scheduler.
    sched: int | None = None
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

    def supersedes(self, other: Incarnation) -> bool:
        """Whether this generation replaced ``other``: a later scheduler incarnation, or,
        within one (or without a scheduler), a later generation."""
        if self.sched is not None and other.sched is not None and self.sched != other.sched:
            return self.sched > other.sched
        return self.index > other.index

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
    def reached_step(self) -> int | None:
        """The last step this generation's progress stands at: its last step, or, for one
        that resumed from the final checkpoint and had nothing left to run, that
        checkpoint's step (None: no step and no checkpoint)."""
        if self.last_step is not None:
            return self.last_step
        return self.resume_step or None

    @property
    def resume_step(self) -> int | None:
        """Step of the checkpoint it resumed from; 0 when it started from scratch."""
        ld = self.load
        if ld is None:
            return None
        return int(ld["step"]) if ld.kind == "ckpt_load" else 0


@dataclass(frozen=True)
class ProcLife:
    """One process of the job as the sampler saw it.

    ``role``: ``agent``, ``worker`` (a rank's replica), ``child`` (below the replica whose
    pid is ``owner``), ``wrapper`` (a rank holder whose child announced itself as the
    replica, e.g. ``sh -c "python train.py"``) or ``other``; see :mod:`faultdrill.lineage`.
    Runs recorded before lineage existed have no children: every rank holder is a worker."""

    pid: int
    start_time: int
    role: str
    rank: int | None
    node: str
    seen_mono: float
    #: When it ended: its exit event's time (``gone_by`` ``kernel`` or ``pidfd``), else the
    #: first sample it was missing from (``sampled``); None: alive at the end.
    gone_mono: float | None
    #: Until when it was certainly alive: its exit time when an exit event says, else the
    #: last sample it was present in.
    last_seen_mono: float
    owner: int | None = None
    ppid: int | None = None
    #: Where ``gone_mono`` comes from: ``kernel`` (the kernel's exit stamp), ``pidfd`` (the
    #: harness woke on the exit), ``sampled`` (the sampler noticed; up to one period late),
    #: "" (alive at the end).
    gone_by: str = ""

    def seen_alive_at(self, mono: float) -> bool:
        """Certainly alive at ``mono``: seen in samples on both sides of it (or before it,
        and exited after it)."""
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
    #: Per events file with lines that are not events (garbage, wrong types...; a torn
    #: last line, what a killed writer leaves, is not counted here): file name ->
    #: (lines skipped, the file's source, "" if none could be read). Judged as retest.
    bad_lines: dict[str, tuple[int, str]] = field(default_factory=dict)
    incarnations: list[Incarnation] = field(default_factory=list)
    procs: list[ProcLife] = field(default_factory=list)

    # --- construction ---------------------------------------------------------------

    @classmethod
    def load(
        cls, events_dir: Path, *, readers: int | None = None, use_store: bool = True
    ) -> Timeline:
        """Read every ``*.jsonl`` under ``events_dir`` (a run's or a scenario's), and the
        probe's binary step files (``probe-rank*.steps``: :mod:`~faultdrill.timeline.stepfile`).

        Streams: step events go straight into columns, so memory stays near the size of
        the resulting table rather than of the parsed JSON. A line that is torn, not JSON
        or not an object, and a record that is malformed (a step without ``mono`` or
        ``step``, a value of the wrong type, an event breaking its shape in
        :data:`~faultdrill.events.SHAPES`), is skipped and counted in ``torn_lines``, and
        per file in ``bad_lines`` unless it is a file's torn last line (what a writer
        killed mid-write leaves); loading never raises on the content of a line or file.

        Files of :data:`~faultdrill.timeline.reader.PARALLEL_BYTES` or more in all are
        read by ``readers`` processes (default: one per usable CPU, at most 4), each taking
        a run of consecutive files; their parts are joined in file order, so the result is
        the same either way.
        ``readers=1`` reads in this process whatever the size.

        Where the harness wrote a columnar store of the probe files while the job ran
        (:mod:`~faultdrill.timeline.store`), the part of them it covers is taken from it
        and only the rest is read as JSON lines: the same timeline, in a fraction of the
        time and memory. ``use_store=False`` reads every JSON line (the evidence of
        record) whatever is there."""
        paths = sorted([*events_dir.glob("*.jsonl"), *events_dir.glob(STEP_FILES)])
        stored = read_store(events_dir) if use_store else None
        if stored is not None:
            first = _Part(stored.task, [], [[c] for c in stored.columns], stored.torn)
            rest = _read_files(paths, stored.covered, stored.events)
            rest.bad = stored.bad_lines(rest.bad)
            parts = [first, rest]
        else:
            parts = _read_in_parallel(paths, readers) or [_read_files(paths)]
        events: list[Event] = []
        steps = _StepColumns()
        task = ""
        torn = 0
        bad: dict[str, tuple[int, str]] = {}
        for part in parts:
            task = task or part.task
            events.extend(part.events)
            steps.absorb(part.chunks)
            part.chunks = []  # the table frees each column's chunks as it joins them
            torn += part.torn
            bad.update(part.bad)
        tl = cls._assemble(task, events, steps.table())
        tl.steps.release()  # the columns derivation read (at scale: the checks read others)
        tl.torn_lines = torn
        tl.bad_lines = bad
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
        """Sort events and steps by time (stable: ties keep file order; steps at one time
        by rank, then in file order), then derive."""
        mono = steps.mono
        if len(steps) and not bool((mono[1:] >= mono[:-1]).all()):
            _reorder(steps, np.argsort(mono, kind="stable"))
            mono = steps.mono
        if len(steps) > 1 and bool((mono[1:] == mono[:-1]).any()):
            # Steps of several files at one time: ordered by rank, which the probe's files
            # are named by, so the order does not depend on how the files were read (the
            # step store holds them in the order the harness polled them).
            _reorder(steps, np.lexsort((steps.rank, mono)))
        events.sort(key=lambda e: e.mono)
        return cls.from_parts(task, events, steps)

    @classmethod
    def from_parts(cls, task_id: str, events: list[Event], steps: StepTable) -> Timeline:
        """Build from already-sorted events and a mono-sorted step table."""
        tl = cls(task_id=task_id, events=events, steps=steps)
        tl._derive_procs()
        tl._derive_incarnations()
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
        """The first generation that started after ``mono`` (a stale one is nobody's
        successor: :meth:`stale_incarnations`)."""
        stale = self.stale_incarnations()
        for inc in self.incarnations:
            if inc.started_mono > mono and inc.index not in stale:
                return inc
        return None

    def stale_incarnations(self) -> set[int]:
        """Generations that made a step after a later scheduler incarnation had started
        (old tasks that the scheduler could not stop, training on beside their successor)."""
        out = set()
        for old in self.incarnations:
            if old.sched is None or old.last_step_mono is None:
                continue
            for new in self.incarnations:
                if (
                    new.sched is not None
                    and new.sched > old.sched
                    and old.last_step_mono > new.started_mono
                ):
                    out.add(old.index)
                    break
        return out

    def incarnation_at(self, mono: float) -> Incarnation | None:
        """The newest generation started at or before ``mono``."""
        current = None
        for inc in self.incarnations:
            if inc.started_mono <= mono:
                current = inc
        return current

    def final_incarnation(self) -> Incarnation | None:
        """The generation whose steps the run ended with (prefers one that ended ok)."""
        stale = self.stale_incarnations()
        live = [i for i in self.incarnations if i.index not in stale] or self.incarnations
        finished = [i for i in live if any(e.get("status") == "ok" for e in i.ends)]
        if finished:
            return finished[-1]
        stepped = [i for i in live if i.first_step is not None]
        return stepped[-1] if stepped else None

    def committed_chain(self) -> tuple[list[Segment], list[str]]:
        """Segments of committed progress, oldest first, and notes where the chain breaks."""
        notes: list[str] = []
        final = self.final_incarnation()
        upper = None if final is None else final.reached_step
        if final is None or upper is None or len(self.steps) == 0:
            return [], ["no incarnation made progress"]
        saves: dict[str, list[Event]] = defaultdict(list)  # id -> its saves, oldest first
        for e in self.of("probe", "ckpt_save"):
            saves[str(e["id"])].append(e)
        segments: list[Segment] = []
        cur = final
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
        segments = list(segments)
        for a in range(0, len(st), _MASK_BLOCK):  # temporaries of one block, not the table's
            inc, step = st.inc[a : a + _MASK_BLOCK], st.step[a : a + _MASK_BLOCK]
            out = mask[a : a + _MASK_BLOCK]
            for seg in segments:
                out |= (inc == seg.inc) & (step >= seg.first) & (step <= seg.last)
        return mask

    def iter_procs(self, role: str | None = None) -> Iterator[ProcLife]:
        return (p for p in self.procs if role is None or p.role == role)

    # --- derivations ------------------------------------------------------------------

    def _derive_incarnations(self) -> None:
        starts = self.of("probe", "run_start")
        incs: list[Incarnation] = []
        by_master: dict[tuple[Any, Any, str], Incarnation] = {}
        current: Incarnation | None = None
        for ev in starts:
            master = ev.get("master")
            pid, rank = int(ev.get("pid", 0)), int(ev.get("rank", 0))
            raw_sched = ev.get("sched_incarnation")
            sched = (
                int(raw_sched)
                if isinstance(raw_sched, (int, str)) and str(raw_sched).isdigit()
                else None
            )
            if master:
                key = (ev.get("sched_job_id"), sched, str(master))
                inc = by_master.get(key)
                if inc is None:
                    inc = Incarnation(index=len(incs), master=master, sched=sched)
                    incs.append(inc)
                    by_master[key] = inc
            else:
                if (
                    current is None
                    or current.master
                    or rank in current.members.values()
                    or current.sched != sched
                ):
                    current = Incarnation(index=len(incs), master=None, sched=sched)
                    incs.append(current)
                inc = current
            inc.members[pid] = rank
            inc.starts.append(ev)
        pid_inc = {pid: inc.index for inc in incs for pid in inc.members}
        step_inc = dict(pid_inc)
        for p in self.procs:  # a replica's children write on its behalf (a logger, a writer)
            if p.role == "child" and p.owner in pid_inc:
                step_inc.setdefault(p.pid, pid_inc[p.owner])
        for ev in self.events:
            if ev.src != "probe":
                continue
            idx = pid_inc.get(_int(ev.get("pid"), -1))
            if idx is None:
                continue
            if ev.kind in ("ckpt_load", "ckpt_none"):
                incs[idx].loads.append(ev)
            elif ev.kind == "run_end":
                incs[idx].ends.append(ev)
        st = self.steps
        if len(st):
            st.inc = _lookup(step_inc, st.pid)
            for inc, extent in zip(incs, _step_extents(st, len(incs)), strict=True):
                if extent is not None:
                    inc.first_step, inc.last_step = extent[0], extent[1]
                    inc.first_step_mono, inc.last_step_mono = extent[2], extent[3]
        self.incarnations = incs

    def _derive_procs(self) -> None:
        seen: dict[tuple[int, int], Event] = {}
        gone: dict[tuple[int, int], Event] = {}
        exited: dict[tuple[int, int], Event] = {}
        last_sample = max(
            (e.mono for e in self.events if e.src == "sampler" and e.kind != "proc_exit"),
            default=0.0,
        )
        for ev in self.events:
            if ev.src != "sampler":
                continue
            key = (_int(ev.get("pid"), 0), _int(ev.get("start_time"), 0))
            if ev.kind == "proc_seen":
                seen.setdefault(key, ev)
            elif ev.kind == "proc_gone":
                gone.setdefault(key, ev)
            elif ev.kind == "proc_exit":
                exited.setdefault(key, ev)
        owners, wrappers = self._owners(seen)
        procs = []
        for key, ev in seen.items():
            rank = ev.get("rank")
            end = gone.get(key)
            role = str(ev.get("role", "other"))
            owner = owners.get(key)
            if role == "child" and owner is None:
                role = "worker"  # it announced itself: the replica, whatever its parentage
            elif owner is not None and role != "agent":
                role = "child"
            elif role == "worker" and key[0] in wrappers:
                role = "wrapper"
            ppid = ev.get("ppid")
            gone_mono, last_seen, gone_by = _end_of(ev, end, exited.get(key), last_sample)
            procs.append(
                ProcLife(
                    pid=key[0],
                    start_time=key[1],
                    role=role,
                    rank=None if rank is None else int(rank),
                    node=str(ev.get("node", "")),
                    seen_mono=ev.mono,
                    gone_mono=gone_mono,
                    last_seen_mono=last_seen,
                    owner=owner,
                    ppid=None if ppid is None else int(ppid),
                    gone_by=gone_by,
                )
            )
        self.procs = sorted(procs, key=lambda p: p.seen_mono)

    def _owners(
        self, seen: dict[tuple[int, int], Event]
    ) -> tuple[dict[tuple[int, int], int | None], set[int]]:
        """Each process's owner as the sampler decided it, corrected by who announced itself
        (:func:`faultdrill.lineage.promote_announced`), and the wrapper pids."""
        owners: dict[tuple[int, int], int | None] = {}
        parents: dict[tuple[int, int], int | None] = {}
        for key, ev in seen.items():
            owner, ppid = ev.get("owner"), ev.get("ppid")
            owners[key] = _int(owner, None)
            parents[key] = _int(ppid, None)
        announced = {int(e.get("pid", -1)) for e in self.of("probe", "run_start")}
        return promote_announced(owners, parents, announced)

    @property
    def unknown_step_rows(self) -> int:
        """Step events from processes that never announced themselves (no run_start)."""
        return int((self.steps.inc < 0).sum())


def _int(value: Any, default: Any) -> Any:
    """``value`` if it is an int (bool is not), else ``default``: recorded fields are held
    to their types when read (:func:`~faultdrill.events.malformed`); this keeps a derivation
    from raising on an event built another way."""
    return value if type(value) is int else default


def _end_of(
    seen: Event, gone: Event | None, exited: Event | None, last_sample: float
) -> tuple[float | None, float, str]:
    """(gone_mono, last_seen_mono, gone_by) of one process: its exit event wins over the
    sample that missed it. An exit stamped before the sample that first described the
    process (it ended while that sample was being written) counts as at that sample."""
    if exited is not None:
        at = max(exited.mono, seen.mono)
        return at, at, str(exited.get("clock") or "event")
    if gone is not None:
        return gone.mono, float(gone.get("last_seen_mono", gone.mono)), "sampled"
    return None, last_sample, ""


def _step_extents(st: StepTable, count: int) -> list[tuple[int, int, float, float] | None]:
    """Per incarnation ``0 .. count - 1``: (lowest step, highest step, earliest time, latest
    time) of its rows, None where it has none. A block of rows at a time, every
    incarnation's masked reductions over it while it is in cache (no copy of any
    incarnation's rows; one pass over the columns, not four per incarnation)."""
    big, small = np.iinfo(I8).max, np.iinfo(I8).min
    step_lo, step_hi = [big] * count, [small] * count
    mono_lo, mono_hi = [np.inf] * count, [-np.inf] * count
    found = [False] * count
    for a in range(0, len(st), _MASK_BLOCK):
        inc, step = st.inc[a : a + _MASK_BLOCK], st.step[a : a + _MASK_BLOCK]
        mono = st.mono[a : a + _MASK_BLOCK]
        for i in range(count):
            m = inc == i
            if not m.any():
                continue
            found[i] = True
            step_lo[i] = min(step_lo[i], int(step.min(where=m, initial=big)))
            step_hi[i] = max(step_hi[i], int(step.max(where=m, initial=small)))
            mono_lo[i] = min(mono_lo[i], float(mono.min(where=m, initial=np.inf)))
            mono_hi[i] = max(mono_hi[i], float(mono.max(where=m, initial=-np.inf)))
    return [
        (step_lo[i], step_hi[i], mono_lo[i], mono_hi[i]) if found[i] else None for i in range(count)
    ]


def _reorder(st: StepTable, order: np.ndarray) -> None:
    """Put the rows of a table nobody else holds yet in ``order``, column by column: the
    same result as :meth:`StepTable.take`, with one column's copy alive at a time."""
    off, src = st._range_index(order)
    for name in ("mono", "rank", "pid", "step", "loss", "inc"):
        setattr(st, name, getattr(st, name)[order])
    st.rng_start = st.rng_start[src]
    st.rng_end = st.rng_end[src]
    st.rng_off = off
    del src


#: Rows of :meth:`Timeline.rows_in` masked at a time.
_MASK_BLOCK = 1 << 21
#: Rows looked up at a time by :func:`_lookup`.
_LOOKUP_BLOCK = 1 << 20


def _lookup(table: dict[int, int], keys: np.ndarray) -> np.ndarray:
    """``table[k]`` for every ``k`` in ``keys`` (-1 where absent; values fit int32), in
    linear time."""
    out = np.full(keys.shape[0], -1, dtype=I4)
    if not table or not keys.size:
        return out
    known = np.fromiter(table.keys(), dtype=I8, count=len(table))
    values = np.fromiter(table.values(), dtype=I4, count=len(table))
    lo = min(int(known.min()), int(keys.min()))
    span = max(int(known.max()), int(keys.max())) - lo + 1
    if span <= 1 << 23:  # pids are small integers: a lookup table (<= 32 MiB), no search
        lut = np.full(span, -1, dtype=I4)
        lut[known - lo] = values
        # a block at a time: the index temporaries stay small at any table size (and
        # ``np.take(..., out=)`` would buffer the whole output: ten times slower)
        for a in range(0, keys.shape[0], _LOOKUP_BLOCK):
            block = keys[a : a + _LOOKUP_BLOCK]
            out[a : a + block.shape[0]] = lut[block - lo]
        return out
    order = np.argsort(known)
    known, values = known[order], values[order]
    pos = np.searchsorted(known, keys)
    np.minimum(pos, known.size - 1, out=pos)
    hit = known[pos] == keys
    out[hit] = values[pos[hit]]
    return out
