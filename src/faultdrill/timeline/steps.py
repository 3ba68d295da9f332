"""The step table: every rank's step events in numpy columns.

Shared by the timeline (:mod:`faultdrill.timeline.model`), which derives from it, the
reader (:mod:`faultdrill.timeline.reader`) and the columnar store
(:mod:`faultdrill.timeline.store`), which build it.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

__all__ = ["I4", "I8", "StepTable", "mapping_of"]

I8 = np.int64
#: Ranks, pids and incarnation numbers: small integers (pids stay below 2**22 on Linux).
#: Half the memory of int64 at tens of millions of rows.
I4 = np.int32


@dataclass
class StepTable:
    """Step events in columns. Row i is one rank's step; its sample ranges are
    ``rng_start[rng_off[i]:rng_off[i+1]]`` / ``rng_end[...]``; ``rng_row`` maps each range
    back to its row. ``inc`` is filled in when incarnations are derived (-1: unknown).
    ``loss`` is NaN where the step reported no loss (jobs that log it every N steps) and
    +inf where it reported a NaN: both non-finite, but only NaN means "not reported".

    ``step`` and the sample ids are int64, ``rank``, ``pid`` and ``inc`` int32. When every
    row has exactly one range (what the probe writes for contiguous ids) the offsets are
    implicit (``one_range_each``): ``rng_off`` is then made on demand, and range ``i`` is
    row ``i``'s."""

    mono: np.ndarray
    rank: np.ndarray
    pid: np.ndarray
    step: np.ndarray
    loss: np.ndarray
    rng_start: np.ndarray
    rng_end: np.ndarray
    inc: np.ndarray
    _off: np.ndarray | None = None  # None: one range per row

    def __len__(self) -> int:
        return int(self.step.shape[0])

    @property
    def one_range_each(self) -> bool:
        return self._off is None

    @property
    def rng_off(self) -> np.ndarray:
        if self._off is None:
            return np.arange(len(self) + 1, dtype=I8)
        return self._off

    @rng_off.setter
    def rng_off(self, off: np.ndarray | None) -> None:
        self._off = off

    @property
    def rng_row(self) -> np.ndarray:
        if self._off is None:
            return np.arange(len(self), dtype=I8)
        counts = np.diff(self._off)
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
        """Build from per-row values; sample ranges either as nested lists or as CSR arrays
        (``rng_off=None`` with ``rng_start``/``rng_end``: one range per row)."""
        step_a = np.asarray(step, dtype=I8)
        if rng_start is None:
            samples = samples or [[] for _ in range(step_a.shape[0])]
            counts = np.fromiter((len(s) for s in samples), dtype=I8, count=len(samples))
            rng_off = np.zeros(len(samples) + 1, dtype=I8)
            np.cumsum(counts, out=rng_off[1:])
            flat = [pair for s in samples for pair in s]
            pairs = np.asarray(flat, dtype=I8).reshape(-1, 2)
            rng_start, rng_end = pairs[:, 0].copy(), pairs[:, 1].copy()
        assert rng_start is not None and rng_end is not None
        off = None if rng_off is None else np.asarray(rng_off, dtype=I8)
        n = step_a.shape[0]
        if (
            off is not None
            and off.shape[0] == n + 1
            and rng_start.shape[0] == n
            and not off[0]
            and bool((off[1:] - off[:-1] == 1).all())
        ):
            off = None
        return cls(
            mono=np.asarray(mono, dtype=np.float64),
            rank=np.asarray(rank, dtype=I4),
            pid=np.asarray(pid, dtype=I4),
            step=step_a,
            loss=np.asarray(loss, dtype=np.float64),
            rng_start=np.asarray(rng_start, dtype=I8),
            rng_end=np.asarray(rng_end, dtype=I8),
            inc=np.full(n, -1, dtype=I4),
            _off=off,
        )

    def release(self) -> None:
        """Drop from this process's resident memory the pages of the columns that are
        memory-mapped from the step store and were read so far. They stay in the page
        cache and are mapped again, without a read, when next touched; under memory
        pressure the kernel may have to read them from the file again. So what stays
        resident is what the judge is working on, not every column it has read. Changes
        no value; a column held in memory is left as it is."""
        for col in (self.mono, self.rank, self.pid, self.step, self.loss, self.rng_start):
            _release(col)
        _release(self.rng_end)

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
            rng_start=self.rng_start[src],
            rng_end=self.rng_end[src],
            inc=self.inc[idx],
            _off=off,
        )

    def ranges(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of the sample ranges of the given rows (index array or boolean
        mask), in row order; copies only those two columns, unlike :meth:`take`."""
        if self._off is None:  # one range per row, as the probe writes contiguous ids
            return self.rng_start[rows], self.rng_end[rows]
        idx = np.flatnonzero(rows) if rows.dtype == bool else rows
        _off, src = self._range_index(idx)
        return self.rng_start[src], self.rng_end[src]

    def _range_index(self, idx: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """For rows ``idx``: their new CSR offsets (None: one range each) and the positions
        of their ranges."""
        if self._off is None:
            return None, idx
        first = self._off[:-1][idx]
        counts = self._off[1:][idx] - first
        off = np.zeros(idx.shape[0] + 1, dtype=I8)
        np.cumsum(counts, out=off[1:])
        # position of range j of the result: first[row] + (j - off[row])
        src = np.repeat(first - off[:-1], counts)
        src += np.arange(int(off[-1]), dtype=I8)
        return off, src


def mapping_of(col: np.ndarray) -> mmap.mmap | None:
    """The file mapping ``col`` is a view of (the step store's columns,
    :func:`~faultdrill.timeline.store.read_store`), or None for a column in memory."""
    base: object = col
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return base if isinstance(base, mmap.mmap) and not base.closed else None


def _release(col: np.ndarray) -> None:
    """``MADV_DONTNEED`` on the file mapping ``col`` is a view of, if it is one: for a
    shared, read-only file mapping that drops page table entries only, never data."""
    mapped = mapping_of(col)
    if mapped is not None:
        mapped.madvise(mmap.MADV_DONTNEED)
