"""The loss and evaluation trend after recovery against the baseline's, on literal timelines."""

from __future__ import annotations

import numpy as np
import pytest

from faultdrill.judge.trend import recovery_step, series_trend, trend_after_recovery
from faultdrill.plan import Plan
from faultdrill.plan.sections import Tolerance
from faultdrill.readings.reference import Reference
from tests.records import as_json
from tests.test_checks_results import shrunk
from tests.test_conclusion import rode_out
from tests.timelines import baseline, restart

TOL = Tolerance()


def test_a_changed_world_size_within_tolerance_has_no_drift(reference: Reference) -> None:
    out = as_json(trend_after_recovery(shrunk(1 + 1e-5).build(), reference, TOL))
    assert (out["applies"], out["recovery_step"], out["drift"]) == (True, 5, False)
    assert out["recovery_step_is"] == "first step of incarnation 1 after the restart"
    loss = out["loss"]
    assert (loss["steps"], loss["from_step"], loss["to_step"], loss["within"]) == (2, 5, 6, True)
    assert loss["mean_rel_diff"] == pytest.approx(1e-5, rel=1e-3)
    assert loss["slope"] == pytest.approx(loss["baseline_slope"], rel=1e-4)
    assert sorted(out["metrics"]) == ["heldout/accuracy", "heldout/loss"]
    assert out["metrics"]["heldout/loss"]["steps"] == 1 and out["metrics"]["heldout/loss"]["within"]


def test_a_loss_that_drifts_after_recovery_is_drift(reference: Reference) -> None:
    out = as_json(trend_after_recovery(shrunk(1.01).build(), reference, TOL))
    assert out["drift"] is True
    assert out["loss"]["within"] is False
    assert out["loss"]["mean_rel_diff"] == pytest.approx(0.01, rel=1e-6)
    assert out["metrics"]["heldout/loss"]["within"] is False


def test_the_window_after_recovery_is_the_plans_post_steps(reference: Reference) -> None:
    out = as_json(trend_after_recovery(shrunk(1.01).build(), reference, TOL, window_steps=1))
    assert out["window"] == {"from_step": 5, "to_step": 5, "steps_requested": 1}
    assert (out["loss"]["steps"], out["loss"]["to_step"]) == (1, 5)
    assert out["metrics"] == {}  # the only evaluation (step 6) is outside the window


def test_where_bitwise_applies_the_trend_is_only_a_supplement(reference: Reference) -> None:
    out = as_json(trend_after_recovery(restart().build(), reference, TOL, bitwise=True))
    assert out["applies"] is False
    assert out["why"] == "bitwise comparison applies: the step-by-step checks are stronger"
    assert out["drift"] is False  # still computed: identical numbers


def test_a_later_drift_shows_in_the_last_value_and_the_slope() -> None:
    steps = np.arange(1, 11)
    base = 3.0 - 0.1 * steps
    drill = base.copy()
    drill[-2:] += 0.05  # converges more slowly towards the end
    out = as_json(series_trend(steps, drill, steps, base, TOL))
    assert out["within"] is False
    assert out["last"] == pytest.approx(2.05) and out["baseline_last"] == pytest.approx(2.0)
    assert out["slope"] > out["baseline_slope"]
    assert as_json(series_trend(steps, base, steps, base, TOL))["within"] is True
    assert as_json(series_trend(steps, base, steps + 100, base, TOL)) == {
        "steps": 0,
        "within": None,
        "why": "no step in common with the baseline",
    }


def test_the_recovery_step_without_a_restart_is_the_first_step_after_the_fault() -> None:
    assert recovery_step(rode_out().build()) == (4, "first step after the fault (no restart)")
    assert recovery_step(baseline().build()) == (None, "no fault was injected")


def test_without_a_baseline_nothing_is_compared(plan: Plan) -> None:
    out = as_json(trend_after_recovery(shrunk().build(), None, plan.tolerance))
    assert (out["loss"], out["drift"], out["why"]) == (None, None, "no baseline to compare with")
