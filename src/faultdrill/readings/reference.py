"""The reference: what the fault-free baseline run says a correct run looks like.

Kept compact, because a drill's checks hold it beside the drill's own timeline: at 41 M
baseline step events the baseline's table would take 2 GB, what the checks need of it a
tenth of that. From the baseline's committed steps it keeps:

* the loss at every (step, rank): a dense grid when steps and ranks are dense small
  integers (the usual case), else sorted keys (:class:`LossLookup`);
* the mean loss per step, for tolerance comparisons;
* which samples the steps up to any step consumed (:class:`StepCovers`): per step, the
  one block of ids its ranks consumed when they form one (the usual case), and the ranges
  of the other steps as they were;
* the final model digest, world size, config digests and last step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from faultdrill.events import Event
from faultdrill.intervals import merge
from faultdrill.timeline import Segment, StepTable, Timeline

__all__ = [
    "EvalKey",
    "LossLookup",
    "Reference",
    "StepCovers",
    "committed_evaluations",
    "evaluation_values",
    "mean_loss_by_step",
    "mean_loss_per_step",
]

#: One evaluated number: (step, split, rank, metric name).
EvalKey = tuple[int, str, int, str]


@dataclass
class Reference:
    """Committed steps of the baseline: per (rank, step) loss, samples, final digest, and
    the held-out evaluations of its committed progress."""

    run_id: str
    rows: int  # the baseline's committed step events
    final_digest: str | None
    world_size: int | None
    config_digests: frozenset[str]
    last_step: int
    cover_starts: np.ndarray  # every committed sample, merged
    cover_ends: np.ndarray
    losses: LossLookup
    covers: StepCovers
    mean_steps: np.ndarray  # distinct steps that reported a loss ...
    mean_loss: np.ndarray  # ... and the mean over ranks at each
    evaluations: dict[EvalKey, float] = field(default_factory=dict)
    #: Names of the artefacts the baseline's final generation exported (probe.artifact).
    artifacts: frozenset[str] = frozenset()
    #: The baseline's events files that held lines that are not valid events: what is
    #: compared with this reference proves nothing (``Timeline.bad_lines``).
    damaged: tuple[str, ...] = ()

    @classmethod
    def from_timeline(cls, tl: Timeline, run_id: str = "baseline") -> Reference:
        chain, _notes = tl.committed_chain()
        st = StepTable.empty()
        if chain:
            rows = tl.rows_in(chain)
            # A fault-free baseline commits every row: no copy of its table.
            st = tl.steps if rows.all() else tl.steps.take(rows)
        return cls.from_steps(st, tl, run_id, chain)

    @classmethod
    def from_steps(
        cls,
        st: StepTable,
        tl: Timeline,
        run_id: str = "baseline",
        chain: list[Segment] | None = None,
    ) -> Reference:
        """From the baseline's committed step rows ``st`` and its timeline (for the final
        incarnation's digest, world size, config, evaluations and artefacts). ``chain``:
        the timeline's committed chain, if already derived."""
        final = tl.final_incarnation()
        digests = {str(e.get("model_digest")) for e in final.ends} if final else set()
        digests.discard("")
        digests.discard("None")
        fused = _fused_summary(st)
        if fused is not None:
            covers, (mean_steps, mean_loss), losses, last_step = fused
        else:
            covers = StepCovers.build(st)
            st.release()  # one pass over a few columns at a time stays resident (at scale)
            mean_steps, mean_loss = mean_loss_per_step(st)
            losses = LossLookup.build(st.step, st.rank, st.loss)
            last_step = int(st.step.max()) if len(st) else 0
        st.release()
        cs, ce = covers.until(None)
        return cls(
            run_id=run_id,
            rows=len(st),
            final_digest=next(iter(digests)) if len(digests) == 1 else None,
            world_size=final.world_size if final else None,
            config_digests=frozenset(
                str(e.get("config_digest", "")) for i in tl.incarnations for e in i.starts
            ),
            last_step=last_step,
            cover_starts=cs,
            cover_ends=ce,
            losses=losses,
            covers=covers,
            mean_steps=mean_steps,
            mean_loss=mean_loss,
            evaluations=dict(evaluation_values(committed_evaluations(tl, chain))),
            artifacts=frozenset(
                str(e.get("name") or e.get("path"))
                for e in tl.of("probe", "artifact")
                if final is not None and int(e.get("pid", -1)) in final.members
            ),
            damaged=tuple(sorted(tl.bad_lines)),
        )

    def step_loss(self) -> tuple[np.ndarray, np.ndarray]:
        """(steps, global loss per step): the mean over ranks, for tolerance comparison."""
        return self.mean_steps, self.mean_loss

    def cover_until(self, last: int) -> tuple[np.ndarray, np.ndarray]:
        """The samples the baseline's steps up to ``last`` consumed, merged."""
        if last >= self.last_step:
            return self.cover_starts, self.cover_ends
        return self.covers.until(last)


@dataclass
class LossLookup:
    """The baseline's loss at each (step, rank) it reported, for lookups by the drill's
    (step, rank) pairs. Where one pair was reported twice, one of them is kept. Each pair
    is one cell ``(step - lo) * width + (rank - r0)``: a dense grid of cells when steps and
    ranks are dense, else the sorted cells that exist."""

    lo: int  # lowest step
    hi: int  # highest step
    r0: int  # lowest rank
    width: int  # ranks r0 .. r0 + width - 1
    grid: np.ndarray | None  # dense: the loss of every cell (NaN where none)
    has: np.ndarray | None  # dense: which cells the baseline reported
    keys: np.ndarray | None  # sparse: the sorted cells ...
    values: np.ndarray | None  # ... and the loss of each

    @classmethod
    def build(cls, step: np.ndarray, rank: np.ndarray, loss: np.ndarray) -> LossLookup:
        if step.size == 0:
            return cls(0, -1, 0, 1, None, None, np.zeros(0, np.int64), np.zeros(0))
        lo, hi = int(step.min()), int(step.max())
        r0 = int(rank.min())
        width = int(rank.max()) - r0 + 1
        cells = (hi - lo + 1) * width
        if cells > 2 * step.size + 65536:
            cell = _cells(step, rank, lo, r0, width)
            order = np.argsort(cell)
            return cls(lo, hi, r0, width, None, None, cell[order], loss[order])
        grid = np.full(cells, np.nan)
        has = np.zeros(cells, dtype=bool)
        for a in range(0, step.size, _CHUNK):  # in order: a pair reported twice keeps the last
            cell = _cells(step[a : a + _CHUNK], rank[a : a + _CHUNK], lo, r0, width)
            grid[cell] = loss[a : a + _CHUNK]
            has[cell] = True
        return cls(lo, hi, r0, width, grid, has, None, None)

    def lookup(self, step: np.ndarray, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the baseline's loss at each (step, rank), whether the baseline has it)."""
        inside = (step >= self.lo) & (step <= self.hi)
        inside &= (rank >= self.r0) & (rank < self.r0 + self.width)
        key = _cells(step, rank, self.lo, self.r0, self.width)
        if self.grid is not None and self.has is not None:
            np.clip(key, 0, self.grid.size - 1, out=key)
            return self.grid[key], inside & self.has[key]
        assert self.keys is not None and self.values is not None
        if self.keys.size == 0:
            return np.full(step.shape, np.nan), np.zeros(step.shape, dtype=bool)
        pos = np.clip(np.searchsorted(self.keys, key), 0, self.keys.size - 1)
        return self.values[pos], inside & (self.keys[pos] == key)


@dataclass
class Tally:
    """Per step (from the lowest): how many ranges, their lowest start and highest end,
    their narrowest and widest width."""

    count: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    lmin: np.ndarray
    lmax: np.ndarray

    @classmethod
    def zeros(cls, n: int) -> Tally:
        count = np.zeros(n, dtype=np.int64)
        lo, hi = _filled(n, np.minimum), _filled(n, np.maximum)
        return cls(count, lo, hi, _filled(n, np.minimum), _filled(n, np.maximum))

    def add(self, idx: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Count the ranges ``start``/``end`` of steps ``idx``; returns the count of this
        block alone, per step."""
        counted = np.bincount(idx, minlength=self.count.size)
        self.count += counted
        np.minimum.at(self.lo, idx, start)
        np.maximum.at(self.hi, idx, end)
        width = end - start
        np.minimum.at(self.lmin, idx, width)
        np.maximum.at(self.lmax, idx, width)
        return counted


@dataclass
class StepCovers:
    """Which sample ids the baseline's steps consumed, by step: built in linear time.

    A step whose ranges, taken together, form one block of ids without gap or overlap is
    kept as that block (``steps``/``lo``/``hi``); the ranges of any other step are kept as
    they were (``odd_*``), so that :meth:`until` is exact either way."""

    steps: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    odd_step: np.ndarray
    odd_start: np.ndarray
    odd_end: np.ndarray

    @classmethod
    def build(cls, st: StepTable) -> StepCovers:
        empty = np.zeros(0, dtype=np.int64)
        if st.rng_start.size == 0:
            return cls(empty, empty, empty, empty, empty, empty)
        step = st.step if st.one_range_each else st.step[st.rng_row]
        s0, s1 = int(step.min()), int(step.max())
        if s1 - s0 + 1 > 4 * step.size + 65536:  # sparse steps: keep every range as is
            return cls(empty, empty, empty, step.copy(), st.rng_start.copy(), st.rng_end.copy())
        start, end, n = st.rng_start, st.rng_end, s1 - s0 + 1
        # pass 1, a chunk at a time: per step, how many ranges, their extent, their widths
        tally = Tally.zeros(n)
        for a in range(0, step.size, _CHUNK):
            tally.add(step[a : a + _CHUNK] - s0, start[a : a + _CHUNK], end[a : a + _CHUNK])
        return cls.from_tally(step, start, end, s0, tally)

    @classmethod
    def from_tally(
        cls, step: np.ndarray, start: np.ndarray, end: np.ndarray, s0: int, tally: Tally
    ) -> StepCovers:
        """From the ranges (each with its step) and their ``tally`` per step (steps from
        ``s0``): a second pass over ``step`` and ``start`` finds which steps are blocks."""
        empty = np.zeros(0, dtype=np.int64)
        count, lo, hi, lmin, lmax = tally.count, tally.lo, tally.hi, tally.lmin, tally.lmax
        # A step is one block when its ranges have one width and tile [lo, hi) exactly:
        # each on its own slot of that width, as many as fit.
        block = (count > 0) & (lmin == lmax) & (lmin > 0) & (hi - lo == count * lmax)
        width = np.where(block, lmax, 1)
        first = np.cumsum(count) - count  # each step's first slot among all slots
        taken = np.zeros(step.size, dtype=np.int32)
        for a in range(0, step.size, _CHUNK):  # pass 2: which slot each range is on
            idx = step[a : a + _CHUNK] - s0
            b = start[a : a + _CHUNK]
            candidate = block[idx]  # the ranges of any other step are kept as they are
            idx, b = idx[candidate], b[candidate]
            slot, off = np.divmod(b - lo[idx], width[idx])
            block[idx[off != 0]] = False  # not aligned on the width
            slot += first[idx]
            np.clip(slot, 0, step.size - 1, out=slot)
            # of taken's own type: a Python 1 would be cast per element (20 times slower)
            np.add.at(taken, slot, _ONE)
        used = np.flatnonzero(count)
        block[used[np.maximum.reduceat(taken, first[used]) > 1]] = False  # an overlap
        del taken
        odd = (count > 0) & ~block
        regular = np.flatnonzero(block)
        if odd.any():
            rows = odd[step - s0]
            odd_step, odd_start, odd_end = step[rows], start[rows], end[rows]
        else:
            odd_step, odd_start, odd_end = empty, empty, empty
        return cls(regular + s0, lo[regular], hi[regular], odd_step, odd_start, odd_end)

    def until(self, last: int | None) -> tuple[np.ndarray, np.ndarray]:
        """Merged ids consumed by the steps up to ``last`` (None: every step)."""
        if last is None:
            parts_s, parts_e = [self.lo, self.odd_start], [self.hi, self.odd_end]
        else:
            keep, odd = self.steps <= last, self.odd_step <= last
            parts_s = [self.lo[keep], self.odd_start[odd]]
            parts_e = [self.hi[keep], self.odd_end[odd]]
        return merge(np.concatenate(parts_s), np.concatenate(parts_e))


_ONE = np.int32(1)

#: Rows handled at a time when the reference is built: the temporaries stay a few dozen
#: MB at any size (a pass over 41 M rows at once would need several GB of them).
_CHUNK = 1 << 22


def _extent(st: StepTable) -> tuple[int, int, int, int]:
    """(lowest step, highest step, lowest rank, highest rank) of a table with rows, in one
    pass over the two columns a block at a time."""
    s0, s1 = int(st.step[0]), int(st.step[0])
    r0, r1 = int(st.rank[0]), int(st.rank[0])
    for a in range(0, len(st), _CHUNK):
        step, rank = st.step[a : a + _CHUNK], st.rank[a : a + _CHUNK]
        s0, s1 = min(s0, int(step.min())), max(s1, int(step.max()))
        r0, r1 = min(r0, int(rank.min())), max(r1, int(rank.max()))
    return s0, s1, r0, r1


def _fused_summary(
    st: StepTable,
) -> tuple[StepCovers, tuple[np.ndarray, np.ndarray], LossLookup, int] | None:
    """:meth:`StepCovers.build`, :func:`mean_loss_per_step`, :meth:`LossLookup.build` and
    the last step at once, equal to what each gives: one pass over every column a block at
    a time (and a second over steps and starts), where each alone would read the step
    column again (at scale, from the disk: the store does not fit the page cache). None
    where the fused pass does not apply (ranges not one per row, sparse steps or cells):
    build them one by one."""
    if not st.one_range_each or len(st) == 0:
        return None
    s0, s1, r0, r1 = _extent(st)
    n, width = s1 - s0 + 1, r1 - r0 + 1
    if n > 4 * len(st) + 65536 or n * width > 2 * len(st) + 65536:
        return None
    tally = Tally.zeros(n)
    sums, reported = np.zeros(n), np.zeros(n, dtype=np.int64)
    # not filled with NaN first: the rows write every cell a healthy baseline has (the
    # pages are touched once, by them); the cells none wrote become NaN below
    grid, has = np.empty(n * width), np.zeros(n * width, dtype=bool)
    for a in range(0, len(st), _CHUNK):
        step, loss = st.step[a : a + _CHUNK], st.loss[a : a + _CHUNK]
        idx = step - s0
        counted = tally.add(idx, st.rng_start[a : a + _CHUNK], st.rng_end[a : a + _CHUNK])
        # in row order, as one bincount over every row would add them: the same sums
        said = ~np.isnan(loss)
        if said.all():
            np.add.at(sums, idx, loss)
            reported += counted
        else:
            np.add.at(sums, idx[said], loss[said])
            reported += np.bincount(idx[said], minlength=n)
        cell = idx * width  # in order: a pair reported twice keeps the last
        cell += st.rank[a : a + _CHUNK]
        cell -= r0
        grid[cell] = loss
        has[cell] = True
        st.release()  # what stays resident is this block's rows, not every column
    if not has.all():
        grid[~has] = np.nan
    covers = StepCovers.from_tally(st.step, st.rng_start, st.rng_end, s0, tally)
    at = np.flatnonzero(reported)
    mean = (at + s0, sums[at] / reported[at])
    return covers, mean, LossLookup(s0, s1, r0, width, grid, has, None, None), s1


def _filled(n: int, ufunc: np.ufunc) -> np.ndarray:
    """The start of a running minimum or maximum of int64 values."""
    info = np.iinfo(np.int64)
    return np.full(n, info.max if ufunc is np.minimum else info.min, dtype=np.int64)


def _cells(step: np.ndarray, rank: np.ndarray, lo: int, r0: int, width: int) -> np.ndarray:
    """``(step - lo) * width + (rank - r0)``, in one new int64 array."""
    cell = step - lo
    cell *= width
    cell += rank
    cell -= r0
    return cell


def mean_loss_per_step(st: StepTable) -> tuple[np.ndarray, np.ndarray]:
    return mean_loss_by_step(st.step, st.loss)


def mean_loss_by_step(step: np.ndarray, loss: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct steps, mean loss at each), from parallel columns; steps that reported no
    loss (NaN, see :class:`~faultdrill.timeline.StepTable`) are left out."""
    reported = ~np.isnan(loss)
    if not reported.all():
        step, loss = step[reported], loss[reported]
    if step.size == 0:
        return np.zeros(0, np.int64), np.zeros(0)
    s0, s1 = int(step.min()), int(step.max())
    if s1 - s0 + 1 <= 4 * step.size + 65536:  # dense steps: counted, not sorted
        idx = step - s0
        sums = np.bincount(idx, weights=loss, minlength=s1 - s0 + 1)
        counts = np.bincount(idx, minlength=s1 - s0 + 1)
        at = np.flatnonzero(counts)
        return at + s0, sums[at] / counts[at]
    steps, inv = np.unique(step, return_inverse=True)
    sums = np.bincount(inv, weights=loss)
    counts = np.bincount(inv)
    return steps, sums / counts


def committed_evaluations(tl: Timeline, chain: list[Segment] | None = None) -> list[Event]:
    """The ``evaluation`` events of the committed progress: from an incarnation of the
    committed chain, at a step of its segment (or the step it resumed from: the model as
    loaded, which the chain vouches for). Evaluations of recomputed steps are left out.
    ``chain``: the timeline's committed chain, if already derived."""
    if chain is None:
        chain, _notes = tl.committed_chain()
    segments = {seg.inc: seg for seg in chain}
    pid_inc = {pid: inc.index for inc in tl.incarnations for pid in inc.members}
    out = []
    for e in tl.of("probe", "evaluation"):
        seg = segments.get(pid_inc.get(int(e.get("pid", -1)), -1))
        if seg is not None and seg.first - 1 <= int(e.get("step", -1)) <= seg.last:
            out.append(e)
    return out


def evaluation_values(events: list[Event]) -> list[tuple[EvalKey, float]]:
    """Every number of the given ``evaluation`` events, keyed by (step, split, rank, metric);
    a value that is not a number (``null``) becomes NaN."""
    out = []
    for e in events:
        metrics = e.get("metrics") or {}
        if not isinstance(metrics, dict):
            continue
        for name, value in metrics.items():
            key = (
                int(e.get("step", -1)),
                str(e.get("split", "")),
                int(e.get("rank", 0)),
                str(name),
            )
            try:
                out.append((key, float(value)))
            except (TypeError, ValueError):
                out.append((key, float("nan")))
    return out
