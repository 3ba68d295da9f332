"""Half-open integer intervals ``[start, end)`` in numpy arrays: the sample ledger's algebra."""

from __future__ import annotations

import numpy as np

__all__ = ["describe", "length", "merge", "overlaps", "subtract"]


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint, non-adjacent intervals."""
    if starts.size == 0:
        return starts.astype(np.int64), ends.astype(np.int64)
    if bool((starts[1:] >= starts[:-1]).all()):  # already sorted: skip the sort and copies
        s = starts
        run_end = np.maximum.accumulate(ends)
    else:
        order = np.argsort(starts, kind="stable")
        s = starts[order]
        run_end = ends[order]
        del order
        np.maximum.accumulate(run_end, out=run_end)
    # a new block starts where an interval begins after everything before it has ended
    idx = np.flatnonzero(s[1:] > run_end[:-1])
    idx += 1
    idx = np.concatenate(([0], idx))
    block_end = np.append(idx[1:], s.size) - 1
    return s[idx], run_end[block_end]


def length(starts: np.ndarray, ends: np.ndarray) -> int:
    return int((ends - starts).sum())


def overlaps(starts: np.ndarray, ends: np.ndarray) -> tuple[int, tuple[int, int] | None]:
    """How many ids are covered more than once, and the first such id range."""
    if starts.size == 0:
        return 0, None
    ms, me = merge(starts, ends)
    dup = length(starts, ends) - length(ms, me)
    if dup == 0:
        return 0, None
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    hit = np.flatnonzero(s[1:] < run_end[:-1])
    i = int(hit[0]) + 1
    return dup, (int(s[i]), int(min(e[i], run_end[i - 1])))


def subtract(
    a_starts: np.ndarray, a_ends: np.ndarray, b_starts: np.ndarray, b_ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Ids in union(a) not in union(b), as merged intervals."""
    a_s, a_e = merge(a_starts, a_ends)
    b_s, b_e = merge(b_starts, b_ends)
    if a_s.size == 0 or b_s.size == 0:
        return a_s, a_e
    # boundaries sweep: +1 entering a, -1 leaving a, +2 entering b, -2 leaving b
    pts = np.concatenate([a_s, a_e, b_s, b_e])
    delta = np.concatenate(
        [np.full(a_s.size, 1), np.full(a_e.size, -1), np.full(b_s.size, 2), np.full(b_e.size, -2)]
    )
    order = np.lexsort((delta, pts))
    pts, delta = pts[order], delta[order]
    uniq, first = np.unique(pts, return_index=True)
    level = np.cumsum(delta)
    # the level after processing every boundary at a given point
    last = np.append(first[1:], pts.size) - 1
    after = level[last]
    in_a_only = after == 1
    starts = uniq[:-1][in_a_only[:-1]]
    ends = uniq[1:][in_a_only[:-1]]
    return merge(starts, ends)


def describe(starts: np.ndarray, ends: np.ndarray, limit: int = 3) -> str:
    parts = [f"[{int(s)}, {int(e)})" for s, e in zip(starts[:limit], ends[:limit], strict=False)]
    more = starts.size - limit
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")
