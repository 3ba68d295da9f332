"""The interval algebra of the sample ledger, by example and against a set-of-ints model."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from faultdrill.intervals import describe, length, merge, overlaps, subtract

Pairs = list[tuple[int, int]]


def arr(pairs: Pairs) -> tuple[np.ndarray, np.ndarray]:
    starts = np.array([s for s, _ in pairs], dtype=np.int64)
    ends = np.array([e for _, e in pairs], dtype=np.int64)
    return starts, ends


def pairs_of(starts: np.ndarray, ends: np.ndarray) -> Pairs:
    return [(int(s), int(e)) for s, e in zip(starts, ends, strict=True)]


def ints(pairs: Pairs) -> set[int]:
    return {i for s, e in pairs for i in range(s, e)}


def counts(pairs: Pairs) -> dict[int, int]:
    out: dict[int, int] = {}
    for s, e in pairs:
        for i in range(s, e):
            out[i] = out.get(i, 0) + 1
    return out


# non-empty half-open intervals, as the probe records them
intervals = st.lists(
    st.tuples(st.integers(0, 60), st.integers(1, 12)).map(lambda p: (p[0], p[0] + p[1])),
    max_size=12,
)


# --- by example -------------------------------------------------------------------------


def test_merge_joins_overlapping_and_adjacent_intervals() -> None:
    assert pairs_of(*merge(*arr([(5, 8), (0, 2), (2, 4), (7, 10), (12, 13)]))) == [
        (0, 4),
        (5, 10),
        (12, 13),
    ]
    assert pairs_of(*merge(*arr([(0, 10), (2, 3), (4, 5)]))) == [(0, 10)]
    assert pairs_of(*merge(*arr([]))) == []


def test_subtract() -> None:
    a, b = arr([(0, 10), (20, 30)]), arr([(2, 4), (8, 22), (29, 40)])
    assert pairs_of(*subtract(*a, *b)) == [(0, 2), (4, 8), (22, 29)]
    assert pairs_of(*subtract(*a, *arr([]))) == [(0, 10), (20, 30)]
    assert pairs_of(*subtract(*arr([]), *b)) == []
    assert pairs_of(*subtract(*arr([(0, 4)]), *arr([(0, 4)]))) == []


def test_overlaps_counts_every_extra_consumption() -> None:
    assert overlaps(*arr([(0, 4), (4, 8)])) == (0, None)
    assert overlaps(*arr([(0, 4), (2, 6), (3, 5)])) == (4, (2, 4))
    assert overlaps(*arr([(10, 12), (0, 2), (10, 12)])) == (2, (10, 12))
    assert overlaps(*arr([])) == (0, None)


def test_length_and_describe() -> None:
    s, e = arr([(0, 2), (5, 9), (10, 11), (20, 30)])
    assert length(s, e) == 17
    assert describe(s, e) == "[0, 2), [5, 9), [10, 11) and 1 more"
    assert describe(s[:2], e[:2]) == "[0, 2), [5, 9)"


# --- against the model -------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(intervals)
def test_merge_is_the_union_as_sorted_disjoint_non_adjacent_intervals(pairs: Pairs) -> None:
    merged = pairs_of(*merge(*arr(pairs)))
    assert ints(merged) == ints(pairs)
    assert all(s < e for s, e in merged)
    assert all(e1 < s2 for (_, e1), (s2, _) in itertools.pairwise(merged))


@settings(max_examples=300, deadline=None)
@given(intervals, intervals)
def test_subtract_is_set_difference(a: Pairs, b: Pairs) -> None:
    diff = pairs_of(*subtract(*arr(a), *arr(b)))
    assert ints(diff) == ints(a) - ints(b)
    assert diff == pairs_of(*merge(*arr(diff)))  # already merged


@settings(max_examples=300, deadline=None)
@given(intervals)
def test_overlaps_counts_duplicates_and_names_the_first(pairs: Pairs) -> None:
    seen = counts(pairs)
    dup, first = overlaps(*arr(pairs))
    assert dup == sum(n - 1 for n in seen.values())
    if dup == 0:
        assert first is None
        return
    assert first is not None
    lo, hi = first
    assert lo < hi
    assert lo == min(i for i, n in seen.items() if n > 1)
    assert all(seen[i] > 1 for i in range(lo, hi))


@settings(max_examples=200, deadline=None)
@given(intervals)
def test_length_of_the_merge_is_the_number_of_ids(pairs: Pairs) -> None:
    assert length(*merge(*arr(pairs))) == len(ints(pairs))
    assert length(*arr(pairs)) == sum(counts(pairs).values())
