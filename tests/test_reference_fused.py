"""The reference's fused pass over the baseline's columns gives exactly what building the
step covers, the mean loss per step and the loss lookup one by one gives."""

from __future__ import annotations

import numpy as np
import pytest

from faultdrill.checks import results
from faultdrill.readings import reference as refmod
from faultdrill.readings.reference import LossLookup, StepCovers, mean_loss_per_step
from faultdrill.timeline import StepTable


def _table(rng: np.random.Generator, rows: int, *, odd: bool, nan: bool) -> StepTable:
    ranks = int(rng.integers(1, 9))
    step = rng.integers(3, 3 + max(1, rows // ranks), rows).astype(np.int64)
    rank = rng.integers(0, ranks, rows)
    width = 4
    start = ((step - 3) * ranks + rank) * width
    if odd:  # some overlapping, misaligned or differently wide ranges
        start = start + rng.integers(0, 3, rows) * (rng.random(rows) < 0.05)
    end = start + width + (rng.random(rows) < 0.02) * (int(odd) * 2)
    loss = rng.random(rows) * 3
    if nan:
        loss[rng.random(rows) < 0.3] = np.nan
        loss[rng.random(rows) < 0.01] = np.inf
    return StepTable.from_columns(
        np.zeros(rows), rank, np.zeros(rows), step, loss, rng_start=start, rng_end=end
    )


def _same(a: object, b: object) -> None:
    for name in a.__dataclass_fields__:  # type: ignore[attr-defined]
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            assert x is not None and y is not None, name
            np.testing.assert_array_equal(x, y, err_msg=name)
            assert x.dtype == y.dtype, name
        else:
            assert x == y, name


@pytest.mark.parametrize("seed", range(12))
def test_fused_summary_equals_the_separate_builds(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(seed)
    monkeypatch.setattr(refmod, "_CHUNK", int(rng.integers(7, 300)))  # many blocks
    st = _table(rng, int(rng.integers(1, 3000)), odd=seed % 2 == 1, nan=seed % 3 == 0)
    fused = refmod._fused_summary(st)
    assert fused is not None
    covers, (m_steps, m_loss), losses, last = fused
    _same(covers, StepCovers.build(st))
    o_steps, o_loss = mean_loss_per_step(st)
    np.testing.assert_array_equal(m_steps, o_steps)
    assert m_loss.tobytes() == o_loss.tobytes()  # bit for bit, not merely close
    _same(losses, LossLookup.build(st.step, st.rank, st.loss))
    assert last == int(st.step.max())


def test_fused_summary_declines_what_it_does_not_cover() -> None:
    sparse = StepTable.from_columns(
        [0, 0],
        [0, 0],
        [0, 0],
        [1, 10**9],
        [1.0, 2.0],
        rng_start=np.array([0, 4]),
        rng_end=np.array([4, 8]),
    )
    assert refmod._fused_summary(sparse) is None
    assert refmod._fused_summary(StepTable.empty()) is None
    several = StepTable.from_columns([0], [0], [0], [1], [1.0], [[[0, 4], [8, 12]]])
    assert refmod._fused_summary(several) is None


def _compare_bitwise_gathered(
    losses: LossLookup, st: StepTable, rows: np.ndarray
) -> tuple[int, int, int, int, tuple[int, float] | None]:
    """The comparison as it was before it read fully committed blocks as views: every
    block gathered by row index (the oracle of the test below)."""
    n_cmp = silent = unknown = differing = 0
    first: tuple[int, float] | None = None
    first_step = 0
    chunk = results._CHUNK
    for lo in range(0, len(st), chunk):
        sel = rows[lo : lo + chunk]
        if not sel.any():
            continue
        at = np.flatnonzero(sel) + lo
        base, known = losses.lookup(st.step[at], st.rank[at])
        got = st.loss[at]
        compared = known & ~np.isnan(got) & ~np.isnan(base)
        silent += int((known & ~compared).sum())
        unknown += int((~known).sum())
        n_cmp += int(compared.sum())
        differ = np.flatnonzero(compared & (base != got))
        if differ.size:
            differing += int(differ.size)
            j = int(np.argmin(st.step[at[differ]]))
            step = int(st.step[at[differ[j]]])
            if first is None or step < first_step:
                first, first_step = (int(at[differ[j]]), float(base[differ[j]])), step
    return n_cmp, silent, unknown, differing, first


@pytest.mark.parametrize("seed", range(12))
def test_compare_bitwise_by_views_equals_the_gathered_comparison(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(100 + seed)
    monkeypatch.setattr(results, "_CHUNK", int(rng.integers(7, 300)))
    base = _table(rng, int(rng.integers(1, 3000)), odd=False, nan=seed % 3 == 0)
    drill = _table(rng, int(rng.integers(1, 3000)), odd=False, nan=seed % 2 == 0)
    if seed % 4 == 1:  # some equal losses, so that some pairs compare equal
        drill.loss[:] = np.where(rng.random(len(drill)) < 0.5, 1.0, drill.loss)
        base.loss[:] = 1.0
    losses = LossLookup.build(base.step, base.rank, base.loss)
    rows = rng.random(len(drill)) < (1.0 if seed % 3 == 2 else 0.9)
    rows[: len(rows) // 2] = True  # whole blocks committed, as a healthy drill's are
    got = results._compare_bitwise(losses, drill, rows)
    assert got == _compare_bitwise_gathered(losses, drill, rows)
    assert got[0] + got[1] + got[2] == int(rows.sum())


def test_fused_summary_of_a_baseline_with_every_cell() -> None:
    """Every (step, rank) reported, as a healthy baseline's are: no cell left NaN."""
    rng = np.random.default_rng(7)
    steps, ranks = 50, 6
    step = np.repeat(np.arange(1, steps + 1), ranks)
    rank = rng.permuted(np.tile(np.arange(ranks), (steps, 1)), axis=1).ravel()
    start = ((step - 1) * ranks + rank) * 8
    st = StepTable.from_columns(
        np.zeros(step.size),
        rank,
        np.zeros(step.size),
        step,
        rng.random(step.size),
        rng_start=start,
        rng_end=start + 8,
    )
    fused = refmod._fused_summary(st)
    assert fused is not None
    covers, _mean, losses, _last = fused
    assert losses.has is not None and losses.has.all()
    assert losses.grid is not None and not np.isnan(losses.grid).any()
    _same(losses, LossLookup.build(st.step, st.rank, st.loss))
    _same(covers, StepCovers.build(st))
    assert covers.odd_step.size == 0 and covers.steps.size == steps
