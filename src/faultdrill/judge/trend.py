"""The trend after recovery: does the loss (and the held-out metric) go on as the baseline's?

Where bitwise equality does not apply (the world size or config changed), a recovered job
cannot be compared step by step; what can be said is whether its loss and evaluation,
over a window after recovery (the plan's ``observation.post_steps``; 0: to the end), follow
the baseline's over the same steps: the mean over the window, the last value, and the slope.
A later drift of convergence shows here even when every single step is within tolerance of
its neighbour.

Pure: from the timeline and the reference to data; the comparison is informative, not a
check (the results checks judge), and says when it does not apply.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from faultdrill.checks.api import Msg
from faultdrill.readings.analysis import injections
from faultdrill.readings.reference import (
    committed_evaluations,
    evaluation_values,
    mean_loss_by_step,
)
from faultdrill.records import SeriesTrend, Trend, plain

if TYPE_CHECKING:
    from faultdrill.plan.sections import Tolerance
    from faultdrill.readings.reference import Reference
    from faultdrill.timeline import Timeline

__all__ = ["recovery_step", "series_trend", "trend_after_recovery"]


def recovery_step(tl: Timeline) -> tuple[int | None, str]:
    """The first step of progress after the fault, and what it is: the first step of the
    first generation that stepped after the injection, or (no restart) the first step made
    after the fault was reverted or injected. (None, why) when there is none."""
    step, what = _recovery_step(tl)
    return step, what.text()


def _recovery_step(tl: Timeline) -> tuple[int | None, Msg]:
    inj = injections(tl)
    if not inj:
        return None, Msg("trend.step.no-fault")
    t0 = inj[0].mono
    for inc in tl.incarnations:
        if inc.started_mono > t0 and inc.first_step is not None:
            return inc.first_step, Msg("trend.step.restart", inc=inc.index)
    rev = tl.first("fault", "reverted", after=t0)
    since = float(rev.get("revert_started_mono", rev.mono)) if rev is not None else t0
    st = tl.steps
    after = st.mono > since
    if not after.any():
        return None, Msg("trend.step.none")
    what = "trend.step.after-revert" if rev is not None else "trend.step.after-fault"
    return int(st.step[after].min()), Msg(what)


def _slope(x: np.ndarray, y: np.ndarray) -> float | None:
    if x.size < 2 or float(np.ptp(x)) == 0.0:
        return None
    return float(np.polyfit(x.astype(float), y, 1)[0])


def _close(a: float, b: float, tol: Tolerance) -> bool:
    return math.isclose(a, b, rel_tol=tol.rtol, abs_tol=tol.atol)


def series_trend(
    steps: np.ndarray,
    values: np.ndarray,
    base_steps: np.ndarray,
    base_values: np.ndarray,
    tol: Tolerance,
) -> SeriesTrend:
    """Compare two per-step series over the steps both have: mean, last value and slope.

    ``within`` is True when the mean and the last value are within ``tol`` of the
    baseline's, None when no step is in common."""
    common, gi, bi = np.intersect1d(steps, base_steps, return_indices=True)
    if common.size == 0:
        return SeriesTrend(steps=0, within=None, why="no step in common with the baseline")
    got, ref = values[gi], base_values[bi]
    mean, base_mean = float(got.mean()), float(ref.mean())
    last, base_last = float(got[-1]), float(ref[-1])
    within = _close(mean, base_mean, tol) and _close(last, base_last, tol)
    return SeriesTrend.model_validate(
        plain(
            {
                "steps": int(common.size),
                "from_step": int(common[0]),
                "to_step": int(common[-1]),
                "mean": mean,
                "baseline_mean": base_mean,
                "mean_rel_diff": abs(mean - base_mean) / max(abs(base_mean), 1e-12),
                "last": last,
                "baseline_last": base_last,
                "slope": _slope(common, got),
                "baseline_slope": _slope(common, ref),
                "within": within,
            }
        )
    )


def trend_after_recovery(
    tl: Timeline,
    reference: Reference | None,
    tol: Tolerance,
    *,
    window_steps: int = 0,
    bitwise: bool = False,
) -> Trend:
    """The loss and held-out metric trend of committed progress after recovery, against the
    baseline's over the same steps.

    ``window_steps``: how many steps from the recovery step (0: to the end). ``bitwise``:
    whether the step-by-step comparison applies (then this is only a supplement: ``applies``
    is False and says why). Keys: ``applies``, ``why``, ``recovery_step``, ``window``,
    ``loss`` (:func:`series_trend`), ``metrics`` (``split/metric`` -> :func:`series_trend`
    of the mean over ranks), ``drift`` (True: some series left the tolerance; None: nothing
    compared)."""
    start, what = _recovery_step(tl)
    why = Msg("trend.why.bitwise" if bitwise else "trend.why.trend")
    out: dict[str, Any] = {
        "applies": not bitwise,
        "why": why.text(),
        "recovery_step": start,
        "recovery_step_is": what.text(),
        "window": None,
        "loss": None,
        "metrics": {},
        "drift": None,
        #: The messages behind ``why`` and ``recovery_step_is``, for reports in any language.
        "messages": {"why": why.to_json(), "recovery_step_is": what.to_json()},
    }
    if start is None or reference is None or reference.rows == 0:
        if reference is None or reference.rows == 0:
            why = Msg("trend.why.no-baseline")
            out["why"] = why.text()
            out["messages"]["why"] = why.to_json()
        return Trend.model_validate(plain(out))
    chain, _notes = tl.committed_chain()
    rows = tl.rows_in(chain)
    st = tl.steps
    end = start + window_steps - 1 if window_steps else None
    sel = rows & (st.step >= start) & ((st.step <= end) if end is not None else True)
    steps, loss = mean_loss_by_step(st.step[sel], st.loss[sel])
    b_steps, b_loss = reference.step_loss()
    out["window"] = {"from_step": start, "to_step": end, "steps_requested": window_steps or None}
    out = plain(out)
    out["loss"] = lost = series_trend(steps, loss, b_steps, b_loss, tol)
    mine = _series(evaluation_values(committed_evaluations(tl, chain)), start, end)
    theirs = _series(list(reference.evaluations.items()), start, end)
    metrics: dict[str, SeriesTrend] = out["metrics"]
    for key in sorted(set(mine) & set(theirs)):
        (ms, mv), (bs, bv) = mine[key], theirs[key]
        metrics[key] = series_trend(ms, mv, bs, bv, tol)
    verdicts = [lost.within, *(m.within for m in metrics.values())]
    known = [v for v in verdicts if v is not None]
    out["drift"] = (not all(known)) if known else None
    return Trend.model_validate(out)


def _series(
    values: list[tuple[tuple[int, str, int, str], float]], start: int, end: int | None
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``split/metric`` -> (steps, mean over ranks) inside [start, end]."""
    acc: dict[str, dict[int, list[float]]] = {}
    for (step, split, _rank, metric), v in values:
        if step < start or (end is not None and step > end) or math.isnan(v):
            continue
        acc.setdefault(f"{split}/{metric}", {}).setdefault(step, []).append(v)
    return {
        key: (
            np.array(sorted(per)),
            np.array([sum(per[s]) / len(per[s]) for s in sorted(per)]),
        )
        for key, per in acc.items()
    }
