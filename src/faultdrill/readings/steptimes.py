"""Per-rank step times around a window (a fault applied from ``start`` to ``end``).

A rank's step time is the time between two consecutive steps of the same process (the
first step of each process is its start-up, not a step time). Each step time counts in
the phase its step ENDED in: ``before`` the window, ``during`` it, ``after`` it. Shared by
the straggler check (:mod:`faultdrill.checks.straggler`) and anything else that reports
per-rank step figures (a hang's blocked time per rank).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from faultdrill.timeline import Timeline

__all__ = ["PHASES", "RankStepTimes", "rank_step_times", "steps_per_s"]

PHASES = ("before", "during", "after")


@dataclass(frozen=True)
class RankStepTimes:
    """One rank's step times (seconds), by phase; medians are None without a step time."""

    rank: int
    before: tuple[float, ...]
    during: tuple[float, ...]
    after: tuple[float, ...]

    @staticmethod
    def _median(values: tuple[float, ...]) -> float | None:
        return statistics.median(values) if values else None

    @property
    def median_before_s(self) -> float | None:
        return self._median(self.before)

    @property
    def median_during_s(self) -> float | None:
        return self._median(self.during)

    @property
    def median_after_s(self) -> float | None:
        return self._median(self.after)

    @property
    def slowdown(self) -> float | None:
        """Median step time during the window over the one before (2.0: twice as slow)."""
        b, d = self.median_before_s, self.median_during_s
        return d / b if b and d is not None else None


def rank_step_times(tl: Timeline, start: float, end: float) -> list[RankStepTimes]:
    """Each rank's step times before ``start``, from ``start`` to ``end``, and after
    ``end`` (monotonic seconds of the timeline), ranks in order.

    One sort of the step rows by (rank, pid, time), not a pass per rank: the cost grows
    with the rows, not with ranks x rows (a fleet-sized drill has tens of thousands)."""
    st = tl.steps
    if not len(st):
        return []
    mono = np.asarray(st.mono, dtype=float)
    rank = np.asarray(st.rank, dtype=np.int64)
    pid = np.asarray(st.pid, dtype=np.int64)
    order = np.lexsort((mono, pid, rank))
    mono, rank, pid = mono[order], rank[order], pid[order]
    same = (rank[1:] == rank[:-1]) & (pid[1:] == pid[:-1])  # a step time, not a start-up
    gap = (mono[1:] - mono[:-1])[same]
    ended, owner = mono[1:][same], rank[1:][same]
    phase = np.where(ended < start, 0, np.where(ended <= end, 1, 2))
    ranks = np.unique(rank)
    # rows of each rank are contiguous after the sort: split the gaps at the rank changes
    cuts = np.searchsorted(owner, ranks[1:])
    out = []
    for r, gaps, phases in zip(ranks, np.split(gap, cuts), np.split(phase, cuts), strict=True):
        out.append(
            RankStepTimes(int(r), *(tuple(float(g) for g in gaps[phases == i]) for i in range(3)))
        )
    return out


def steps_per_s(tl: Timeline, start: float, end: float) -> float | None:
    """The job's progress in steps per second from ``start`` to ``end``: distinct steps
    the lowest rank completed in that time over its length (None for an empty span)."""
    st = tl.steps
    if not len(st) or end <= start:
        return None
    rank = np.asarray(st.rank)
    low = int(rank.min())
    mono = np.asarray(st.mono, dtype=float)
    inside = (rank == low) & (mono >= start) & (mono <= end)
    return len({int(s) for s in np.asarray(st.step)[inside]}) / (end - start)
