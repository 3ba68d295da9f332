"""The step table: every rank's step events in numpy columns.

Shared by the timeline (:mod:`faultdrill.timeline.model`), which derives from it, and the
reader (:mod:`faultdrill.timeline.reader`), which builds it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

__all__ = ["I8", "StepTable"]

I8 = np.int64


@dataclass
class StepTable:
    """Step events in columns. Row i is one rank's step; its sample ranges are
    ``rng_start[rng_off[i]:rng_off[i+1]]`` / ``rng_end[...]``; ``rng_row`` maps each range
    back to its row. ``inc`` is filled in when incarnations are derived (-1: unknown).
    ``loss`` is NaN where the step reported no loss (jobs that log it every N steps) and
    +inf where it reported a NaN: both non-finite, but only NaN means "not reported"."""

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
