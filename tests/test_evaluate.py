"""Judging whole items on tiny literal timelines: a stop condition makes the item retest
(its findings stay visible), a control counts as caught only when the drill ran as
planned, and a run proves nothing unless something was drilled."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultdrill.checks import Verdict
from faultdrill.checks.api import EvidenceResult, Finding
from faultdrill.judge.evaluate import ItemResult, RunResult, evaluate_item, recovery_class
from faultdrill.plan import Control, Plan, RecoveryClass, Scenario
from faultdrill.readings.reference import Reference
from faultdrill.report.html import render_html
from faultdrill.report.markdown import render_markdown
from tests.drillkit import class_level_contradiction
from tests.report_data import report_of, synthetic_report
from tests.test_checks_results import stale_eval
from tests.timelines import NEW, OLD, TL, baseline, first_run, restart

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


def judge_item(
    tmp_path: Path,
    plan: Plan,
    kind: str,
    item: Scenario | Control | None,
    tl: TL,
    reference: Reference | None,
) -> ItemResult:
    work = tmp_path / (item.id if item is not None else "baseline")
    (work / "events").mkdir(parents=True, exist_ok=True)
    return evaluate_item(plan, kind, item, work, reference, timeline=tl.build())


def aborted() -> TL:
    """Rank 1 killed after step 5; nothing restarts it; 60 s without a step, the harness
    fires ``max_no_progress_s``, stops the job and cleans up."""
    tl = first_run(TL().job("running", 0.0), 5).inject(5.5)
    tl.platform("worker_group_failed", 6.0, node="n1")
    for rank, pid in enumerate(OLD):
        tl.proc(pid, rank, 0.05, 6.5, node=f"n{rank}")
    tl.harness(
        "stop_condition",
        66.0,
        condition="max_no_progress_s",
        detail="no new step for 61 s > 60 s (last step 5)",
        last_step=5,
    )
    tl.job("stopped", 66.5)
    tl.harness("procs_final", 66.6, alive=[], ports=[], leftovers=[], settle_s=0.0, after_stop=True)
    return tl.inventory(66.7, "ckpt-4").cleanup(66.8)


# --- a stop condition -------------------------------------------------------------------


def test_a_stop_condition_makes_the_scenario_retest_naming_it(
    tmp_path: Path, plan: Plan, scenario: Scenario, reference: Reference
) -> None:
    res = judge_item(tmp_path, plan, "scenario", scenario, aborted(), reference)
    why = "stop condition 'max_no_progress_s' fired (no new step for 61 s > 60 s (last step 5))"
    assert res.aborted == why
    assert res.verdict is R
    # the individual findings stay visible with their own verdicts
    assert res.evidence["progress"].verdict is F
    completed = [f for f in res.evidence["progress"].findings if f.check == "progress.completed"]
    assert [f.verdict for f in completed] == [F]
    expectation = {f.check: f.verdict for f in res.evidence["expectation"].findings}
    assert expectation["expectation.no-stop-condition"] is R
    assert expectation["expectation.recovery-class"] is R
    assert res.recovery is RecoveryClass.UNRECOVERABLE
    assert res.recovery_why == (
        f"not determined within the stop conditions: {why}; the job had not recovered when "
        "the drill was aborted"
    )
    out = res.to_item().to_json()
    assert (out["verdict"], out["aborted"], out["recovery_class"]) == (
        "retest",
        why,
        "unrecoverable",
    )


def test_recovery_class_names_the_stop_condition_first() -> None:
    cls, why = recovery_class({}, "succeeded", 0, False, aborted="stop condition 'x' fired")
    assert cls is RecoveryClass.UNRECOVERABLE and "stop condition 'x' fired" in why


def test_without_a_stop_condition_the_verdict_is_the_evidence(
    tmp_path: Path, plan: Plan, scenario: Scenario, reference: Reference
) -> None:
    res = judge_item(tmp_path, plan, "scenario", scenario, restart(), reference)
    assert (res.aborted, res.verdict, res.recovery) == (None, P, RecoveryClass.AUTOMATIC)
    res = judge_item(tmp_path, plan, "scenario", scenario, restart(data_from=1), reference)
    assert (res.aborted, res.verdict) == (None, F)


# --- controls ---------------------------------------------------------------------------


def resume_ignored() -> TL:
    """The healthy restart, except incarnation 1 ignores ckpt-4 and starts from step 1."""
    return restart(resume=None)


def test_a_control_whose_check_fails_it_is_caught(
    tmp_path: Path, plan: Plan, control: Control, reference: Reference
) -> None:
    res = judge_item(tmp_path, plan, "control", control, resume_ignored(), reference)
    assert control.expected_check == "progress.no-restart-from-zero"
    assert (res.caught, res.verdict) == (True, F)
    assert res.to_item().to_json()["not_proven_why"] is None


def test_a_control_aborted_by_a_stop_condition_is_not_proven(
    tmp_path: Path, plan: Plan, control: Control, reference: Reference
) -> None:
    tl = resume_ignored().harness(
        "stop_condition", 10.5, condition="max_wall_s", detail="scenario ran 150 s > 150 s"
    )
    res = judge_item(tmp_path, plan, "control", control, tl, reference)
    assert res.caught is None and res.verdict is R
    out = res.to_item().to_json()
    assert out["caught"] is None
    assert out["not_proven_why"] == "stop condition 'max_wall_s' fired (scenario ran 150 s > 150 s)"


def test_a_control_whose_fault_was_never_applied_is_not_proven(
    tmp_path: Path, plan: Plan, control: Control, reference: Reference
) -> None:
    # the check fails (a restart from zero), but not because of the drill: no fault applied
    res = judge_item(tmp_path, plan, "control", control, resume_ignored().drop("fault"), reference)
    assert res.caught is None
    assert res.not_as_planned == (
        "the fault was not applied as planned: the fault was never injected: trigger (when "
        "step 15 is reached) not reached"
    )


# --- the run ----------------------------------------------------------------------------


@pytest.fixture()
def base(tmp_path: Path, plan: Plan) -> ItemResult:
    ref = Reference.from_timeline(baseline().build())
    return judge_item(tmp_path, plan, "baseline", None, baseline(), ref)


def run_of(
    plan: Plan, base: ItemResult, items: list[ItemResult], *, waived: bool = False
) -> RunResult:
    return RunResult(plan, Path("/nonexistent"), base, base_ref(), items, [], waived)


def base_ref() -> Reference:
    return Reference.from_timeline(baseline().build())


def test_a_run_with_nothing_drilled_is_not_ok(plan: Plan, base: ItemResult) -> None:
    assert base.verdict is P
    assert not run_of(plan, base, []).ok


def test_a_run_is_ok_when_every_scenario_passed_and_every_control_was_caught(
    tmp_path: Path, plan: Plan, scenario: Scenario, control: Control, base: ItemResult
) -> None:
    ref = base_ref()
    ok = judge_item(tmp_path, plan, "scenario", scenario, restart(), ref)
    caught = judge_item(tmp_path, plan, "control", control, resume_ignored(), ref)
    assert run_of(plan, base, [ok, caught]).ok
    assert (
        run_of(plan, base, [ok, caught]).to_report().to_json()["summary"]["controls_note"] is None
    )


def test_a_run_without_any_control_is_not_ok_unless_controls_were_waived(
    tmp_path: Path, plan: Plan, scenario: Scenario, base: ItemResult
) -> None:
    ok = judge_item(tmp_path, plan, "scenario", scenario, restart(), base_ref())
    run = run_of(plan, base, [ok])
    assert not run.ok
    summary = run.to_report().to_json()["summary"]
    assert (summary["ok"], summary["controls_waived"]) == (False, False)
    assert summary["controls_note"] == (
        "no negative control ran: the checks were not shown to catch a defect in this workload"
    )
    waived = run_of(plan, base, [ok], waived=True)
    assert waived.ok
    assert (
        waived.to_report()
        .to_json()["summary"]["controls_note"]
        .endswith("(waived with --no-controls)")
    )


def test_a_control_not_proven_keeps_the_run_from_ok(
    tmp_path: Path, plan: Plan, scenario: Scenario, control: Control, base: ItemResult
) -> None:
    ref = base_ref()
    ok = judge_item(tmp_path, plan, "scenario", scenario, restart(), ref)
    unproven = judge_item(tmp_path, plan, "control", control, resume_ignored().drop("fault"), ref)
    run = run_of(plan, base, [ok, unproven])
    assert not run.ok
    summary = run.to_report().to_json()["summary"]
    assert (summary["controls"], summary["controls_caught"], summary["ok"]) == (1, 0, False)


# --- how the reports say it --------------------------------------------------------------


def test_reports_show_an_aborted_scenario_and_an_unproven_control() -> None:
    rep = synthetic_report()
    why = "stop condition 'max_wall_s' fired (scenario ran 150 s > 150 s)"
    scenario, control = rep["scenarios"][0], rep["scenarios"][3]
    scenario.update(verdict="retest", aborted=why)
    control.update(caught=None, not_proven_why=why, verdict="retest")
    scenario["questions"].update(
        worker_lost_at=None,
        worker_lost_by="",
        note="no replica was lost: the job rode the fault out",
    )
    md = render_markdown(report_of(rep), "en")
    assert f"Not run as planned: {why}; this proves nothing either way (retest)" in md
    assert (
        "| ctl-skip-ahead | `bad_mode=skip-ahead` | `progress.sample-ledger` | "
        "**NOT PROVEN (retest)** |" in md
    )
    assert "1. Worker deemed lost: not observed\n" in md
    assert "Note: no replica was lost: the job rode the fault out" in md
    html = render_html(report_of(rep), None, "en")
    assert "data-caught='unproven'" in html and "NOT PROVEN (retest)" in html
    assert "class='note not-as-planned'" in html and "class='note q-note'" in html
    assert "未证实（补测）" in render_markdown(report_of(rep), "zh")


def _evidence(**verdicts: Verdict) -> dict[str, EvidenceResult]:
    out = {}
    for cat in ("progress", "resources", "results"):
        v = verdicts.get(cat, Verdict.PASS)
        out[cat] = EvidenceResult(cat, [Finding(f"{cat}.x", v, "")])
    return out


def _reached() -> dict[str, EvidenceResult]:
    out = _evidence()
    out["progress"] = EvidenceResult(
        "progress",
        [
            Finding(
                "progress.completed",
                Verdict.PASS,
                "",
                message_id="progress.completed.reached",
                params={"target": 40},
            )
        ],
    )
    return out


@pytest.mark.parametrize(
    ("evidence", "outcome", "actions", "confirm", "expected", "why"),
    [
        (_evidence(), "succeeded", 0, False, RecoveryClass.AUTOMATIC, "by itself"),
        (
            _evidence(progress=Verdict.RETEST),
            "failed",
            0,
            False,
            RecoveryClass.UNRECOVERABLE,
            "ended failed",
        ),
        (
            _evidence(progress=Verdict.RETEST),
            None,
            0,
            False,
            RecoveryClass.UNRECOVERABLE,
            "without an end state",
        ),
        # every progress finding passed but none says it reached its last step (e.g. a
        # failure was expected): the job ended
        (_evidence(), "failed", 0, False, RecoveryClass.UNRECOVERABLE, "ended failed"),
        (
            # every progress finding passed and it reached its last step with a clean end on
            # every rank: it did continue, so not unrecoverable, whatever the launcher said
            _reached(),
            "failed",
            0,
            False,
            RecoveryClass.MANUAL_CONFIRMATION,
            "continued from valid progress to its last step, but ended failed",
        ),
        (
            _evidence(progress=Verdict.FAIL),
            "succeeded",
            1,
            False,
            RecoveryClass.UNRECOVERABLE,
            "progress evidence failed",
        ),
        (
            # it continued from valid progress: the class says who acted, the why the failure
            _evidence(results=Verdict.FAIL),
            "succeeded",
            0,
            False,
            RecoveryClass.AUTOMATIC,
            "by itself from valid progress; but its results evidence failed",
        ),
        (
            _evidence(results=Verdict.FAIL),
            "succeeded",
            1,
            False,
            RecoveryClass.MANUAL_RESTART,
            "resubmitted it; but its results evidence failed",
        ),
        (_evidence(), "succeeded", 1, False, RecoveryClass.MANUAL_RESTART, "resubmitted"),
        (
            _evidence(resources=Verdict.FAIL),
            "succeeded",
            0,
            False,
            RecoveryClass.MANUAL_CONFIRMATION,
            "stale replicas",
        ),
        (_evidence(), "succeeded", 0, True, RecoveryClass.MANUAL_CONFIRMATION, "confirm"),
        (
            _evidence(results=Verdict.RETEST),
            "succeeded",
            0,
            False,
            RecoveryClass.MANUAL_CONFIRMATION,
            "unexplained",
        ),
    ],
)
def test_recovery_class_follows_the_evidence(
    evidence: dict[str, EvidenceResult],
    outcome: str | None,
    actions: int,
    confirm: bool,
    expected: RecoveryClass,
    why: str,
) -> None:
    cls, reason = recovery_class(evidence, outcome, actions, confirm)
    assert cls is expected and why in reason


def test_results_failing_after_valid_progress_keep_class_level_and_why_in_agreement(
    tmp_path: Path, plan: Plan, scenario: Scenario, reference: Reference
) -> None:
    res = judge_item(tmp_path, plan, "scenario", scenario, stale_eval(restart()), reference)
    out = res.to_item().to_json()
    assert (out["verdict"], out["conclusion"]["level"], out["recovery_class"]) == (
        "fail",
        "valid-progress",
        "automatic",
    )
    assert "results evidence failed" in out["recovery_class_why"]
    assert class_level_contradiction(out) is None
    # and a restart from zero: did not continue from valid progress, said alike
    res = judge_item(tmp_path, plan, "scenario", scenario, restart(resume=None), reference)
    out = res.to_item().to_json()
    assert (out["conclusion"]["level"], out["recovery_class"]) == (
        "running-again",
        "unrecoverable",
    )
    assert class_level_contradiction(out) is None


def test_the_contradiction_scanner_catches_the_old_contradiction() -> None:
    old = {
        "id": "s",
        "recovery_class": "unrecoverable",
        "recovery_class_why": "the job ran again but its results evidence failed: it did not "
        "continue from valid progress with valid results",
        "conclusion": {"level": "valid-progress"},
    }
    assert class_level_contradiction(old) == (
        "s: class unrecoverable (the job did not continue from valid progress) beside level "
        "valid-progress"
    )
    said = {**old, "recovery_class": "automatic"}
    assert class_level_contradiction(said) == (
        "s: the class's why says the job did not continue from valid progress, beside level "
        "valid-progress"
    )


# --- what a buyer signs: conclusion level, failing layer, dependencies, trend -----------


def test_a_passing_scenario_carries_its_level_dependencies_and_placement(
    tmp_path: Path, plan: Plan, scenario: Scenario, reference: Reference
) -> None:
    res = judge_item(tmp_path, plan, "scenario", scenario, restart(), reference)
    assert res.verdict is P and res.layer is None
    out = res.to_item().to_json()
    assert out["conclusion"]["level"] == "consistent-results"
    assert [lv["proven"] for lv in out["conclusion"]["levels"]] == [True, True, True]
    assert out["layer"] is None
    assert out["dependencies"]["used"] == ["restart_budget", "checkpoint_storage"]
    assert out["trend"]["applies"] is False and out["trend"]["drift"] is False
    assert [i["nodes"] for i in out["scheduling"]] == [["n0", "n1"], ["n0", "n1"]]


def test_a_failing_scenario_names_its_layer(
    tmp_path: Path, plan: Plan, scenario: Scenario, reference: Reference
) -> None:
    tl = restart().edit(
        "probe", "evaluation", lambda r: r["pid"] in NEW and r["step"] == 6, metrics={"loss": 9.0}
    )
    res = judge_item(tmp_path, plan, "scenario", scenario, tl, reference)
    assert res.verdict is F
    out = res.to_item().to_json()
    assert out["conclusion"]["level"] == "valid-progress"
    assert out["layer"]["layer"] == "framework"
    assert out["layer"]["rule"] == "resumed-right-but-diverged"
    assert out["layer"]["findings"] == ["results.evaluation-matches-baseline"]


def test_the_run_sums_the_scenarios_dependencies(
    tmp_path: Path, plan: Plan, scenario: Scenario, base: ItemResult, reference: Reference
) -> None:
    res = judge_item(tmp_path, plan, "scenario", scenario, restart(), reference)
    totals = run_of(plan, base, [res]).to_report().to_json()["recovery_dependencies"]
    assert totals["restarts"]["per_item"] == {"kill-worker": 1}
    assert totals["by_dependency"]["restart_budget"] == {
        "owner": "platform",
        "items": ["kill-worker"],
    }


def test_a_class_lowered_only_by_what_the_platform_cannot_observe_is_not_a_failure() -> None:
    """A real cluster's processes: their checks retest everywhere; the recovery class the
    plan expected is then unknown (retest), not missed (fail)."""
    from faultdrill.checks import Finding
    from faultdrill.judge.evaluate import _unobservable_only

    def ev(data: dict[str, bool]) -> dict[str, EvidenceResult]:
        out = _evidence()
        out["resources"] = EvidenceResult(
            "resources", [Finding("resources.no-stale-replica", Verdict.RETEST, "", data)]
        )
        return out

    cls = RecoveryClass.MANUAL_CONFIRMATION
    assert _unobservable_only(ev({"unobservable": True}), cls, confirm=False)
    assert not _unobservable_only(ev({}), cls, confirm=False)
    assert not _unobservable_only(ev({"unobservable": True}), cls, confirm=True)
    assert not _unobservable_only(_evidence(), cls, confirm=False)
