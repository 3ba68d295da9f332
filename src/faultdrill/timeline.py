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

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from faultdrill.events import Event, read_jsonl

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
        counts = np.diff(self.rng_off)[idx]
        off = np.zeros(idx.shape[0] + 1, dtype=I8)
        np.cumsum(counts, out=off[1:])
        starts = np.repeat(self.rng_off[:-1][idx], counts)
        within = np.arange(int(off[-1]), dtype=I8) - np.repeat(off[:-1], counts)
        src = starts + within
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
    def load(cls, events_dir: Path) -> Timeline:
        """Read every ``*.jsonl`` under ``events_dir`` (a run's or a scenario's)."""
        records: list[dict[str, Any]] = []
        torn = 0
        for path in sorted(events_dir.glob("*.jsonl")):
            n_before = len(records)
            records.extend(read_jsonl(path))
            torn += _count_unparsed(path, len(records) - n_before)
        tl = cls.from_records(records)
        tl.torn_lines = torn
        return tl

    @classmethod
    def from_records(cls, records: Iterable[dict[str, Any]]) -> Timeline:
        """Build from raw event dicts in any order (tests use tiny literal lists)."""
        events: list[Event] = []
        cols: dict[str, list[Any]] = {k: [] for k in ("mono", "rank", "pid", "step", "loss")}
        samples: list[list[list[int]]] = []
        task = ""
        for raw in records:
            if raw.get("src") == "probe" and raw.get("kind") == "step":
                cols["mono"].append(raw["mono"])
                cols["rank"].append(raw.get("rank", 0))
                cols["pid"].append(raw.get("pid", 0))
                cols["step"].append(raw["step"])
                cols["loss"].append(raw.get("loss", float("nan")))
                samples.append(raw.get("samples") or [])
            else:
                events.append(Event.from_json(raw))
            task = task or str(raw.get("task", ""))
        order = np.argsort(np.asarray(cols["mono"], dtype=np.float64), kind="stable")
        steps = StepTable.from_columns(
            cols["mono"], cols["rank"], cols["pid"], cols["step"], cols["loss"], samples
        )
        steps = steps.take(order) if len(steps) else steps
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
        saves = self.checkpoint_saves()
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
            save = saves.get(str(ld["id"]))
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
            pids = np.fromiter(pid_inc.keys(), dtype=I8, count=len(pid_inc))
            idxs = np.fromiter(pid_inc.values(), dtype=I8, count=len(pid_inc))
            order = np.argsort(pids)
            pids, idxs = pids[order], idxs[order]
            pos = np.searchsorted(pids, st.pid)
            pos_c = np.clip(pos, 0, max(len(pids) - 1, 0))
            hit = (
                (pos < len(pids)) & (pids[pos_c] == st.pid)
                if len(pids)
                else np.zeros(len(st), bool)
            )
            st.inc = np.where(hit, idxs[pos_c] if len(pids) else -1, -1).astype(I8)
            for inc in incs:
                m = st.inc == inc.index
                if not m.any():
                    continue
                steps, monos = st.step[m], st.mono[m]
                inc.first_step, inc.last_step = int(steps.min()), int(steps.max())
                inc.first_step_mono, inc.last_step_mono = float(monos.min()), float(monos.max())
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


def _count_unparsed(path: Path, parsed: int) -> int:
    with open(path, "rb") as f:
        lines = sum(1 for _ in f)
    return max(0, lines - parsed)
