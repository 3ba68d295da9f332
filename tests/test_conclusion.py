"""The conclusion level of a scenario on tiny literal timelines: each level, and none."""

from __future__ import annotations

from faultdrill.checks import Verdict, run_checks
from faultdrill.judge.conclusion import Conclusion, Level, conclude
from tests.test_checks_results import stale_eval
from tests.timelines import NEW, OLD, TL, Judge, baseline, finish, first_run, restart

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


def concluded(judge: Judge, tl: TL) -> Conclusion:
    ctx = judge.ctx(tl)
    return conclude(ctx.timeline, run_checks(ctx))


def proofs(c: Conclusion) -> list[tuple[str, Verdict]]:
    return [(p.level.value, p.verdict) for p in c.levels]


def rode_out() -> TL:
    """A fault (a link jitter) the job rode out: no restart, steps go on after it."""
    tl = TL().job("running", 0.0)
    first_run(tl, 6)
    for rank, pid in enumerate(OLD):
        tl.proc(pid, rank, 0.05, 7.5, node=f"n{rank}")
    tl.inject(3.5, fault="link-loss", target="node n1", at_step=3)
    return finish(tl, 6, 7.0, OLD, latest="ckpt-6")


def test_consistent_results_when_every_level_is_proven(judge: Judge) -> None:
    c = concluded(judge, restart())
    assert c.level is Level.CONSISTENT_RESULTS
    assert proofs(c) == [("running-again", P), ("valid-progress", P), ("consistent-results", P)]
    running, progress, results = c.levels
    assert running.why == (
        "incarnation 1 announced itself ready at +1.50 s on n0, n1, first step 5 at +2.50 s"
    )
    assert [e.kind for e in running.events] == ["run_start", "step"]
    assert running.events[0].to_json()["pid"] == NEW[0]
    assert "progress.sample-ledger" in progress.findings
    assert "results.evaluation-matches-baseline" in results.findings
    assert results.why == f"all {len(results.findings)} results finding(s) passed"


def test_valid_progress_when_only_the_results_fail(judge: Judge) -> None:
    c = concluded(judge, stale_eval(restart()))
    assert c.level is Level.VALID_PROGRESS
    assert proofs(c) == [("running-again", P), ("valid-progress", P), ("consistent-results", F)]
    assert c.levels[2].findings == ("results.evaluation-matches-baseline",)
    assert c.levels[2].why == "results evidence failed: results.evaluation-matches-baseline"


def test_running_again_when_the_restart_started_from_zero(judge: Judge) -> None:
    # restarted from scratch although ckpt-4 existed: running again, no valid progress; its
    # results happen to match, but they rest on a level that is not proven
    c = concluded(judge, restart(resume=None))
    assert c.level is Level.RUNNING_AGAIN
    assert proofs(c) == [("running-again", P), ("valid-progress", F), ("consistent-results", R)]
    assert "progress.no-restart-from-zero" in c.levels[1].findings
    assert c.levels[2].why.startswith("not proven: valid-progress is not (")


def test_none_when_nothing_ran_after_the_fault(judge: Judge) -> None:
    tl = first_run(TL().job("running", 0.0), 5).inject(5.5)
    tl.platform("worker_group_failed", 6.0, node="n1").job("failed", 7.0)
    c = concluded(judge, tl)
    assert c.level is None
    assert c.levels[0].verdict is F
    assert c.levels[0].why == (
        "after the fault no replica announced itself again and no step was made"
    )
    assert [p.proven for p in c.levels] == [False, False, False]
    assert c.to_record().to_json()["level"] is None


def test_a_fault_ridden_out_is_running_again_without_a_restart(judge: Judge) -> None:
    c = concluded(judge, rode_out())
    assert c.levels[0].why == "no restart was needed: the job kept running (step 4 at +0.50 s)"
    assert c.level is Level.CONSISTENT_RESULTS


def test_retest_evidence_proves_no_level(judge: Judge) -> None:
    # no evaluation reported: results cannot be judged, so consistent-results is not proven
    c = concluded(judge, restart().drop("probe", "evaluation"))
    assert c.level is Level.VALID_PROGRESS
    assert c.levels[2].verdict is R
    assert c.levels[2].why.startswith("results evidence could not be judged (retest): ")


def test_the_baseline_has_no_conclusion_level(judge: Judge) -> None:
    c = concluded(judge.replace(item=None), baseline())
    assert (c.level, c.levels) == (None, ())
    assert c.to_record().to_json() == {
        "level": None,
        "levels": [],
        "note": "no fault was planned or injected: no recovery to conclude",
    }


def test_a_failed_injection_proves_nothing(judge: Judge) -> None:
    tl = restart().drop("fault").add("fault", "inject_failed", 5.5, error="no such process")
    c = concluded(judge, tl)
    assert c.level is None
    assert c.levels[0].verdict is R
    assert [p.proven for p in c.levels] == [False, False, False]


def test_to_json_links_every_level_to_its_evidence(judge: Judge) -> None:
    out = concluded(judge, stale_eval(restart())).to_record().to_json()
    assert out["level"] == "valid-progress"
    assert [lv["level"] for lv in out["levels"]] == [
        "running-again",
        "valid-progress",
        "consistent-results",
    ]
    assert out["levels"][2] == {
        "level": "consistent-results",
        "proven": False,
        "verdict": "fail",
        "why": "results evidence failed: results.evaluation-matches-baseline",
        "findings": ["results.evaluation-matches-baseline"],
        "events": [],
        "message_id": "level.category.failed",
        "params": {"category": "results", "checks": ["results.evaluation-matches-baseline"]},
    }
