"""Expectation checks on tiny literal timelines, and the check seam itself: every check
passes a healthy drill, verdicts combine worst-first, and a check that raises or proves
nothing yields retest, never pass."""

from __future__ import annotations

import dataclasses

import pytest

from faultdrill.checks import CATEGORIES, CHECKS, Finding, Verdict, combine, run_checks
from faultdrill.checks.api import CheckContext, EvidenceResult, check
from faultdrill.errors import DrillError
from faultdrill.plan import Control
from faultdrill.readings.reference import Reference
from tests.timelines import NEW, TL, Judge, baseline, first_run, restart

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


def no_restart() -> TL:
    """Rank 1 killed after step 5; nobody restarts the job, which fails."""
    tl = first_run(TL().job("running", 0.0), 5).inject(5.5)
    return tl.platform("worker_group_failed", 6.0, node="n1").job("failed", 7.0)


# --- expectation.fault-applied ----------------------------------------------------------

FA = "expectation.fault-applied"


def test_fault_applied_passes_when_injected(judge: Judge) -> None:
    assert judge.one(FA, restart()) == (P, "kill-worker injected on rank 1 at step 5")


def test_fault_applied_passes_for_the_baseline(judge: Judge) -> None:
    assert judge.replace(item=None).one(FA, baseline()) == (P, "baseline: no fault planned")


def test_fault_applied_retests_when_the_fault_was_never_injected(judge: Judge) -> None:
    assert judge.one(FA, restart().drop("fault")) == (
        R,
        "the fault was never injected: trigger (when step 15 is reached) not reached",
    )


def test_fault_applied_retests_when_injection_failed(judge: Judge) -> None:
    tl = (
        restart()
        .drop("fault")
        .add("fault", "inject_failed", 5.5, fault="kill-worker", error="no such process")
    )
    assert judge.one(FA, tl) == (R, "the fault could not be injected: no such process")


def test_fault_applied_applies_to_controls(judge: Judge, control: Control) -> None:
    assert judge.replace(item=control).one(FA, restart().drop("fault"))[0] is R


# --- expectation.no-stop-condition ------------------------------------------------------

NS = "expectation.no-stop-condition"


def test_no_stop_condition_passes(judge: Judge) -> None:
    assert judge.one(NS, restart()) == (P, "no stop condition fired")


def test_no_stop_condition_retests_when_one_fired(judge: Judge) -> None:
    tl = restart().harness(
        "stop_condition", 9.0, condition="max_no_progress_s", detail="no step for 60 s", last_step=5
    )
    [f] = judge.run(NS, tl)
    assert (f.verdict, f.message) == (
        R,
        "stop condition 'max_no_progress_s' fired: no step for 60 s; the scenario was "
        "aborted and every fault reverted",
    )
    assert f.data == {"condition": "max_no_progress_s"}


# --- expectation.job-outcome ------------------------------------------------------------

JO = "expectation.job-outcome"


@pytest.mark.parametrize(
    ("expected", "state", "verdict", "message"),
    [
        ("completes", "succeeded", P, "job succeeded, as expected"),
        ("completes", "failed", F, "job failed; the plan expected it to complete"),
        ("completes", "stopped", F, "job stopped; the plan expected it to complete"),
        ("fails", "failed", P, "job failed, as expected"),
        ("fails", "stopped", P, "job stopped, as expected"),
        (
            "fails",
            "succeeded",
            R,
            "job succeeded but the plan expected it to fail: explain or "
            "correct the plan's expectation",
        ),
    ],
)
def test_job_outcome(
    judge: Judge, expected: str, state: str, verdict: Verdict, message: str
) -> None:
    tl = restart().drop("platform", "job_state").job("running", 0.0).job(state, 10.5)
    assert judge.scenario("expected", job=expected).one(JO, tl) == (verdict, message)


def test_job_outcome_uses_the_last_end_state(judge: Judge) -> None:
    tl = restart().drop("platform", "job_state").job("failed", 6.0).job("succeeded", 10.5)
    assert judge.one(JO, tl)[0] is P


def test_job_outcome_names_operator_actions(judge: Judge) -> None:
    tl = restart().harness("operator_action", 6.5, action="resubmit")
    assert judge.one(JO, tl) == (P, "job succeeded after 1 operator action(s), as expected")


def test_job_outcome_retests_without_an_end_state(judge: Judge) -> None:
    tl = restart().drop("platform", "job_state", lambda r: r["state"] != "running")
    assert judge.one(JO, tl) == (R, "the platform never reported an end state")


def test_job_outcome_expects_the_baseline_to_complete(judge: Judge) -> None:
    base = judge.replace(item=None)
    assert base.one(JO, baseline())[0] is P
    assert base.one(JO, no_restart())[0] is F


# --- expectation.restart ----------------------------------------------------------------

RS = "expectation.restart"


def test_restart_passes_when_the_job_restarted(judge: Judge) -> None:
    assert judge.one(RS, restart()) == (
        P,
        "restarted as incarnation 1 after the fault, resuming from the newest valid "
        "checkpoint ckpt-4 (step 4)",
    )


def test_restart_has_no_expectation_for_baseline_and_controls(
    judge: Judge, control: Control
) -> None:
    assert judge.replace(item=None).one(RS, baseline()) == (
        P,
        "no expectation about restarts (baseline)",
    )
    assert judge.replace(item=control).one(RS, no_restart()) == (
        P,
        "no expectation about restarts (control)",
    )


def test_restart_fails_when_a_restart_was_expected_but_none_came(judge: Judge) -> None:
    assert judge.one(RS, no_restart()) == (F, "no restart after the fault")


def test_restart_missing_is_fine_when_the_job_is_expected_to_fail(judge: Judge) -> None:
    assert judge.scenario("expected", job="fails").one(RS, no_restart()) == (
        P,
        "no restart after the fault (job expected to fail)",
    )


def test_restart_when_the_plan_expected_the_job_to_ride_it_out(judge: Judge) -> None:
    ride = judge.scenario("expected", resume="no-restart")
    assert ride.one(RS, no_restart()) == (P, "no restart after the fault, as expected")
    assert ride.one(RS, restart()) == (
        F,
        "incarnation 1 started after the fault; the plan expected the job to ride it out "
        "without a restart",
    )


def test_restart_fails_beyond_max_recomputed_steps(judge: Judge) -> None:
    # incarnation 0 got to step 5, incarnation 1 resumed from step 4: 1 step recomputed
    strict = judge.scenario("pass_criteria", max_recomputed_steps=0)
    assert strict.one(RS, restart()) == (
        F,
        "1 steps recomputed, more than the plan's max_recomputed_steps 0",
    )
    assert judge.scenario("pass_criteria", max_recomputed_steps=1).one(RS, restart())[0] is P


def refused_newest(tl: TL) -> TL:
    """``tl`` with ckpt-4 damaged before the restart and refused by incarnation 1."""
    tl.inject(5.2, fault="corrupt-checkpoint", target="ckpt-4", ckpt_id="ckpt-4")
    refusal = [{"id": "ckpt-4", "reason": "sha256 mismatch"}]
    for kind in ("ckpt_load", "ckpt_none"):
        tl.recs = [
            {**r, "rejected": refusal}
            if r["src"] == "probe" and r["kind"] == kind and r["pid"] in NEW
            else r
            for r in tl.recs
        ]
    return tl


def test_restart_expected_from_scratch(judge: Judge) -> None:
    scratch = judge.scenario("expected", resume="scratch")
    assert scratch.one(RS, restart(resume=None)) == (
        P,
        "restarted as incarnation 1 after the fault, from scratch, as expected",
    )
    assert scratch.one(RS, restart()) == (
        F,
        "restarted as incarnation 1 after the fault, resuming from ckpt-4 (step 4); the plan "
        "expected it to start from scratch",
    )


def test_restart_expected_from_the_latest_valid_checkpoint(judge: Judge) -> None:
    assert judge.one(RS, restart(resume=2)) == (
        F,
        "restarted as incarnation 1 after the fault, resuming from ckpt-2 (step 2), but the "
        "newest valid checkpoint was ckpt-4 (step 4): the plan expected latest-valid",
    )
    assert judge.one(RS, restart(resume=None))[0] is F
    # the newest was damaged: the newest *valid* one is ckpt-2
    assert judge.one(RS, refused_newest(restart(resume=2))) == (
        P,
        "restarted as incarnation 1 after the fault, resuming from the newest valid "
        "checkpoint ckpt-2 (step 2)",
    )


def test_restart_expected_from_the_previous_valid_checkpoint(judge: Judge) -> None:
    prev = judge.scenario("expected", resume="previous-valid")
    assert prev.one(RS, refused_newest(restart(resume=2))) == (
        P,
        "restarted as incarnation 1 after the fault: rejected the newest checkpoint ckpt-4 "
        "(step 4) and resumed from the older valid ckpt-2 (step 2), as expected",
    )
    assert prev.one(RS, restart()) == (
        F,
        "restarted as incarnation 1 after the fault, resuming from ckpt-4 (step 4) without "
        "rejecting the newest checkpoint ckpt-4 (step 4): the plan expected it to be refused "
        "and an older valid one used",
    )
    assert prev.one(RS, refused_newest(restart(resume=None))) == (
        F,
        "restarted as incarnation 1 after the fault: rejected ckpt-4 but resumed from "
        "scratch, not the newest older valid checkpoint ckpt-2 (step 2)",
    )


def test_restart_expected_from_the_previous_valid_checkpoint_retests(judge: Judge) -> None:
    prev = judge.scenario("expected", resume="previous-valid")
    unsaved = restart(resume=None).drop("probe", "ckpt_save", lambda r: r["mono"] < 7.0)
    assert prev.one(RS, unsaved) == (
        R,
        "restarted as incarnation 1 after the fault, but no checkpoint had been saved before "
        "it: nothing to reject, so previous-valid could not be shown",
    )
    undecided = restart().drop("probe", "ckpt_load")
    assert prev.one(RS, undecided) == (
        R,
        "restarted as incarnation 1 after the fault, but it recorded no checkpoint load "
        "decision: cannot tell whether it resumed previous-valid as the plan expected",
    )


def test_restart_retests_without_injection(judge: Judge) -> None:
    assert judge.one(RS, restart().drop("fault")) == (R, "no injection to relate a restart to")


# --- the check seam ---------------------------------------------------------------------

EVERY_CHECK = [
    "expectation.fault-applied",
    "expectation.job-outcome",
    "expectation.no-stop-condition",
    "expectation.outage-overlapped-save",
    "expectation.restart",
    "expectation.restart-during-outage",
    "expectation.slow-storage-save",
    "expectation.spare-environment",
    "expectation.straggler-detected",
    "expectation.timeout-fired",
    "progress.checkpoint-verified",
    "progress.completed",
    "progress.damaged-checkpoint-refused",
    "progress.data-outage",
    "progress.failed-save-not-published",
    "progress.hang-detected",
    "progress.no-jump",
    "progress.no-restart-from-zero",
    "progress.oom-restart-loop",
    "progress.restored-components",
    "progress.resume-point",
    "progress.sample-ledger",
    "progress.steps-attributed",
    "progress.straggler-tolerated",
    "resources.children-released",
    "resources.faults-reverted",
    "resources.lost-node-isolated",
    "resources.no-duplicate-rank",
    "resources.no-stale-replica",
    "resources.released-at-end",
    "results.artifact-intact",
    "results.evaluation-matches-baseline",
    "results.final-checkpoint-verifies",
    "results.final-model-digest",
    "results.loss-matches-baseline",
]


def test_every_registered_check_has_healthy_and_known_bad_tests() -> None:
    """A new check needs a healthy and a known-bad literal timeline in tests/test_checks_*.py;
    add it there, then here."""
    assert sorted(CHECKS) == EVERY_CHECK
    for name, reg in CHECKS.items():
        assert name.split(".")[0] == reg.category
        assert reg.doc, f"{name} has no docstring"


@pytest.mark.parametrize("name", EVERY_CHECK)
def test_every_check_passes_a_healthy_restart(judge: Judge, name: str) -> None:
    assert judge.verdicts(name, restart()) == [P]


@pytest.mark.parametrize("name", EVERY_CHECK)
def test_every_check_passes_a_healthy_baseline(judge: Judge, name: str) -> None:
    base = judge.replace(item=None, reference=Reference.from_timeline(baseline().build()))
    assert base.verdicts(name, baseline()) == [P]


def test_run_checks_groups_findings_by_category(judge: Judge) -> None:
    out = run_checks(judge.ctx(restart()))
    assert list(out) == list(CATEGORIES)
    assert {c: r.verdict for c, r in out.items()} == dict.fromkeys(CATEGORIES, P)
    assert sum(len(r.findings) for r in out.values()) == len(CHECKS)


def test_a_check_that_raises_yields_retest(judge: Judge, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(ctx: CheckContext) -> list[Finding]:
        return [Finding("progress.no-jump", P, f"{1 / 0}")]

    monkeypatch.setitem(
        CHECKS, "progress.no-jump", dataclasses.replace(CHECKS["progress.no-jump"], fn=boom)
    )
    [f] = judge.run("progress.no-jump", restart())
    assert f.verdict is R
    assert f.message.startswith("check raised ZeroDivisionError: division by zero (at ")
    assert "test_checks_expectation.py:" in f.message
    out = run_checks(judge.ctx(restart()))
    assert out["progress"].verdict is R
    assert out["resources"].verdict is P


def test_a_check_that_finds_nothing_yields_retest(
    judge: Judge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        CHECKS,
        "results.final-model-digest",
        dataclasses.replace(CHECKS["results.final-model-digest"], fn=lambda ctx: []),
    )
    assert judge.run("results.final-model-digest", restart()) == [
        Finding(
            "results.final-model-digest",
            R,
            "check produced no finding",
            message_id="check.no-finding",
        )
    ]
    assert run_checks(judge.ctx(restart()))["results"].verdict is R


def test_a_failing_finding_outweighs_a_raising_check(
    judge: Judge, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(ctx: CheckContext) -> list[Finding]:
        raise KeyError("rank")

    monkeypatch.setitem(
        CHECKS, "progress.no-jump", dataclasses.replace(CHECKS["progress.no-jump"], fn=boom)
    )
    assert run_checks(judge.ctx(restart(data_from=1)))["progress"].verdict is F


def test_registration_refuses_duplicates_and_unknown_categories() -> None:
    with pytest.raises(DrillError, match="registered twice"):
        check("progress.no-jump", "progress")(lambda ctx: [])
    with pytest.raises(DrillError, match="unknown check category 'speed'"):
        check("speed.fast", "speed")


def test_combine_of_nothing_is_retest() -> None:
    assert combine([]) is R
    assert EvidenceResult("progress", []).verdict is R


@pytest.mark.parametrize(
    ("verdicts", "worst"),
    [
        ([P], P),
        ([P, P], P),
        ([P, R], R),
        ([R, P], R),
        ([P, F], F),
        ([F, R, P], F),
        ([R, R], R),
        ([P, R, F, R, P], F),
    ],
)
def test_combine_is_worst_first(verdicts: list[Verdict], worst: Verdict) -> None:
    assert combine(verdicts) is worst


def test_findings_serialise_flat() -> None:
    f = Finding("progress.no-jump", F, "went back", {"inc": 1})
    assert f.to_record().to_json() == {
        "check": "progress.no-jump",
        "verdict": "fail",
        "message": "went back",
        "data": {"inc": 1},
    }
    assert "data" not in Finding("x", P, "ok").to_record().to_json()
    ev = EvidenceResult("progress", [f, Finding("x", P, "ok")])
    assert ev.to_record().to_json()["verdict"] == "fail"
