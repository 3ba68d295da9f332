"""The failing layer on tiny literal timelines: one test per rule, and each demo control
(on a timeline shaped like its evidence) landing on the layer its bug lives in."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from faultdrill.checks import Verdict, run_checks
from faultdrill.judge import layers
from faultdrill.judge.layers import Layer, LayerContext, LayerResult, failing_layer
from faultdrill.plan import Control, Plan, Scenario
from faultdrill.readings.reference import Reference
from tests.test_checks_results import long_restart, noisy, shifted, stale_eval
from tests.test_checks_storage import _damaged, _outage
from tests.timelines import NEW, OLD, TL, Judge, baseline, first_run, ids, restart

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


def layer(judge: Judge, tl: TL) -> LayerResult:
    ctx = judge.ctx(tl)
    return failing_layer(ctx.timeline, run_checks(ctx), judge.item)


def context(judge: Judge, tl: TL) -> LayerContext:
    ctx = judge.ctx(tl)
    return LayerContext(ctx.timeline, run_checks(ctx), judge.item)


def lost(*, t_fail: float = 7.0) -> TL:
    """Rank 1 killed after step 5; the platform declares the group failed; nothing restarts
    the job, which fails."""
    tl = first_run(TL().job("running", 0.0), 5).inject(5.5)
    tl.platform("worker_group_failed", 6.0, node="n1", restarts_left=0)
    return tl.job("failed", t_fail)


def item(plan: Plan, item_id: str) -> Scenario | Control:
    return next(i for i in plan.items() if i.id == item_id)


# --- one test per rule --------------------------------------------------------------------


def test_a_rejected_spare_is_environment_preparation(judge: Judge) -> None:
    tl = lost().platform(
        "spare_rejected",
        6.2,
        node="n3",
        replaces="n2",
        category="environment-preparation",
        precondition="runtime",
        detail="python cannot import torch",
    )
    tl.platform("no_spare", 6.3, replaces="n2", category="scheduling", detail="no usable spare")
    res = layer(judge, tl)
    assert res.layer is Layer.ENVIRONMENT_PREPARATION
    assert res.why == (
        "spare rejected, environment not prepared: n3: runtime (python cannot import torch)"
    )
    assert res.clue is not None and res.clue.events[0].kind == "spare_rejected"
    assert res.clue.findings == ("expectation.spare-environment",)
    # not scheduling: the "no spare" that followed is listed, but does not decide
    assert [c.layer for c in res.also][:1] == [Layer.SCHEDULING]


def test_a_latest_that_named_an_incomplete_save_is_checkpoint(judge: Judge) -> None:
    tl = _outage(baseline()).edit(
        "fault", "storage_observed", lambda r: r["when"] == "end", latest="ckpt-4"
    )
    clue = layers.checkpoint_not_published_safely(context(judge, tl))
    assert clue is not None and clue.layer is Layer.CHECKPOINT
    assert clue.findings == ("progress.failed-save-not-published",)
    assert {e.kind for e in clue.events} == {"ckpt_latest", "storage_observed"}


def test_a_final_checkpoint_that_does_not_verify_is_checkpoint(judge: Judge) -> None:
    tl = restart().drop("harness", "ckpt_inventory").drop("harness", "ckpt_latest")
    tl.inventory(11.6, "ckpt-6", bad={"ckpt-6": "sha256 mismatch"})
    res = layer(judge, tl)
    assert (res.layer, res.clue and res.clue.rule) == (
        Layer.CHECKPOINT,
        "checkpoint-not-published-safely",
    )


def test_a_restart_that_refused_every_checkpoint_is_checkpoint(judge: Judge) -> None:
    refused = [{"id": "ckpt-4", "reason": "sha256 mismatch"}, {"id": "ckpt-2", "reason": "x"}]
    tl = restart(resume=None).edit(
        "probe", "ckpt_none", lambda r: r["pid"] in NEW, rejected=refused
    )
    clue = layers.checkpoint_load_refused_or_absent(context(judge, tl))
    assert clue is not None and clue.layer is Layer.CHECKPOINT
    assert (
        "incarnation 1 started from scratch although 2 checkpoint(s) had been saved; "
        "it refused 2" in clue.why
    )
    assert clue.events[0].kind == "ckpt_none" and clue.events[0].to_json()["rejected"] == refused


def test_starting_from_scratch_is_no_clue_when_the_plan_expects_it(judge: Judge) -> None:
    scratch = judge.scenario("expected", resume="scratch")
    tl = restart(resume=None)
    clue = layers.checkpoint_load_refused_or_absent(context(scratch, tl))
    # the checks still say what they say; the timeline adds nothing of its own
    assert clue is not None and clue.events == ()
    assert layers.checkpoint_load_refused_or_absent(context(judge, restart())) is None


def test_no_node_to_restart_on_is_scheduling(judge: Judge) -> None:
    tl = lost().platform(
        "no_spare", 6.3, replaces="n2", category="scheduling", detail="no usable spare"
    )
    res = layer(judge, tl)
    assert (res.layer, res.why) == (Layer.SCHEDULING, "no node to restart on: no usable spare")


def test_a_rendezvous_that_never_completed_is_the_control_plane(judge: Judge) -> None:
    tl = lost(t_fail=40.0).platform("rdzv_start", 6.5, node="n0")
    tl.platform("rdzv_timeout", 36.5, node="n0", msg="RendezvousTimeoutError")
    res = layer(judge, tl)
    assert res.layer is Layer.CONTROL_PLANE
    assert res.why.startswith(
        "after the fault the rendezvous was tried (rdzv_start, rdzv_timeout) and never completed"
    )
    assert [e.kind for e in res.clue.events] == ["rdzv_start", "rdzv_timeout"]  # type: ignore[union-attr]
    # a rendezvous that completed is no clue, nor is one tried only at the normal end
    done = lost(t_fail=40.0).platform("rdzv_start", 6.5, node="n0")
    done.platform("rdzv_complete", 7.0, node="n0")
    assert layers.rendezvous_never_completed(context(judge, done)) is None
    ended = lost().platform("workers_succeeded", 6.4).platform("rdzv_closed", 6.5)
    assert layers.rendezvous_never_completed(context(judge, ended)) is None


def outlive_and_step(tl: TL) -> TL:
    """Old rank 1 never goes away and keeps stepping after the restart (a stale replica)."""
    tl.drop("sampler", where=lambda r: r["pid"] == OLD[1])
    tl.proc(OLD[1], 1, 0.05, None, node="n1")
    return tl.step(OLD[1], 1, 6, 8.5, [ids(6, 1)])


def test_old_replicas_not_released_is_scheduling(judge: Judge) -> None:
    res = layer(judge, outlive_and_step(restart()))
    assert res.layer is Layer.SCHEDULING
    assert res.clue is not None and res.clue.rule == "old-replicas-not-released"
    assert "resources.no-stale-replica" in res.clue.findings


def failed_saves(*, recovered: bool) -> TL:
    """Saves fail in a storage outage; the job stops there, or rides it out."""
    tl = _outage(baseline()) if recovered else _outage(first_run(TL().job("running", 0.0), 4))
    if not recovered:
        tl.job("failed", 6.0)
    return tl


def test_saves_that_failed_and_stopped_the_job_are_storage(judge: Judge) -> None:
    res = layer(judge, failed_saves(recovered=False))
    assert res.layer is Layer.STORAGE
    assert res.why.startswith("1 checkpoint save(s) failed (OSError: [Errno 30] Read-only")
    assert res.why.endswith("and the job made no step after the last one")
    assert layers.saves_failed_and_job_stopped(context(judge, failed_saves(recovered=True))) is None


def network_fault(plan: Plan, judge: Judge, *, answered: bool) -> tuple[Judge, TL]:
    """``link-jitter`` (link loss for 2 s) from 5.5 to 7.5; the job hangs: no step after
    step 5; the network track after the revert answers every probe, or loses them."""
    tl = first_run(TL().job("running", 0.0), 5)
    tl.inject(5.5, fault="link-loss", target="node n2", at_step=5)
    tl.add("fault", "reverted", 7.5, fault="link-loss", revert_started_mono=7.45)
    for t in (5.0, 6.0, 8.0, 9.0):
        rtt = 0.2 if answered or t < 5.5 else None
        tl.add("net", "net_sample", t, node="n2", probed_mono=t, rtt_ms={"n1": rtt, "n3": rtt})
    tl.harness("stop_condition", 66.0, condition="max_no_progress_s", detail="x", last_step=5)
    return judge.replace(item=item(plan, "link-jitter")), tl.job("stopped", 66.5)


def test_a_network_still_losing_probes_after_the_revert_is_network(
    plan: Plan, judge: Judge
) -> None:
    j, tl = network_fault(plan, judge, answered=False)
    res = layer(j, tl)
    assert res.layer is Layer.NETWORK
    assert res.why == (
        "after the fault was reverted the network track still lost 4 of 4 probes, and no "
        "step followed"
    )


def test_a_network_back_to_normal_without_progress_is_not_network(plan: Plan, judge: Judge) -> None:
    j, tl = network_fault(plan, judge, answered=True)
    res = layer(j, tl)
    assert res.layer is Layer.UNDETERMINED
    assert [c.rule for c in res.ruled_out] == ["network-back-without-progress"]
    assert "ruled out: network (the network track answered all 4 probes" in res.why
    # and a clue pointing at the network is overruled by it
    forced = failing_layer(
        context(j, tl).timeline,
        context(j, tl).evidence,
        j.item,
        rules=(blame_the_network, layers.network_back_without_progress),
    )
    assert forced.layer is Layer.UNDETERMINED


def blame_the_network(ctx: LayerContext) -> layers.Clue:
    return layers.Clue("blame", Layer.NETWORK, True, "blame it")


def test_a_failed_revert_of_a_link_fault_is_network(plan: Plan, judge: Judge) -> None:
    j, tl = network_fault(plan, judge, answered=True)
    tl.add("fault", "revert_failed", 7.6, fault="link-loss", error="iptables: no chain")
    clue = layers.network_not_back(context(j, tl))
    assert clue is not None and clue.why == (
        "the link fault could not be reverted: iptables: no chain"
    )


def optimizer_lost() -> TL:
    """The restart restores model, step and data, not the optimizer: the losses after it
    are offset from the baseline's (judged against :func:`long_reference`: a baseline long
    enough to measure its band)."""
    return noisy(long_restart(), lambda s, r: shifted(s, r) + 0.5)


def long_reference() -> Reference:
    return Reference.from_timeline(noisy(baseline(last=20)).build())


def test_a_right_resume_with_wrong_results_is_framework(judge: Judge) -> None:
    res = layer(judge.replace(reference=long_reference()), optimizer_lost())
    assert res.layer is Layer.FRAMEWORK
    assert res.clue is not None and res.clue.rule == "resumed-right-but-diverged"
    assert "results.loss-matches-baseline" in res.clue.findings
    assert res.clue.events[0].kind == "ckpt_load" and res.clue.events[0].to_json()["id"] == "ckpt-4"


def test_a_job_that_failed_after_its_restart_is_framework(judge: Judge) -> None:
    tl = restart().drop("platform", "job_state", lambda r: r["state"] == "succeeded")
    tl.job("failed", 10.5).platform("worker_failed", 10.4, node="n0", msg="exitcode 1")
    clue = layers.job_failed_after_restart(context(judge, tl))
    assert clue is not None and clue.layer is Layer.FRAMEWORK
    assert clue.why == "incarnation 1 started after the fault, yet the job ended failed"
    assert [e.kind for e in clue.events] == ["run_start", "worker_failed"]


def test_a_lost_replica_never_restarted_is_scheduling(judge: Judge) -> None:
    res = layer(judge, lost())
    assert res.layer is Layer.SCHEDULING
    assert res.why == (
        "the platform declared a replica lost (worker_group_failed on n1) (0 restart(s) "
        "left) and never started a new generation"
    )


def test_no_rule_is_undetermined(judge: Judge) -> None:
    res = layer(judge, restart().drop("fault"))  # never injected: retest, nothing points
    assert (res.layer, res.clue, res.why) == (
        Layer.UNDETERMINED,
        None,
        "no rule points at a layer",
    )
    assert res.to_record().to_json()["layer"] == "undetermined"


def test_every_rule_has_a_docstring() -> None:
    for rule in layers.RULES:
        assert rule.__doc__, rule.__name__


# --- each demo control lands on the layer its bug lives in ----------------------------------


def stale_replica() -> TL:
    return outlive_and_step(restart())


def publish_before_durable() -> TL:
    return _outage(baseline()).edit(
        "fault", "storage_observed", lambda r: r["when"] == "end", latest="ckpt-4"
    )


def control_plane_resume_ignored() -> TL:
    return restart(resume=None).edit(
        "fault", "injected", lambda r: True, fault="control-plane-outage", target="store"
    )


CONTROLS: dict[str, tuple[Callable[[], TL], Layer]] = {
    "ctl-resume-ignored": (lambda: restart(resume=None), Layer.CHECKPOINT),
    "ctl-data-replayed": (lambda: restart(data_from=1), Layer.FRAMEWORK),
    "ctl-skip-ahead": (lambda: restart(data_from=6), Layer.FRAMEWORK),
    "ctl-optimizer-lost": (optimizer_lost, Layer.FRAMEWORK),
    "ctl-load-unverified": (lambda: restart(verified=False), Layer.CHECKPOINT),
    "ctl-stale-replica": (stale_replica, Layer.SCHEDULING),
    "ctl-publish-before-durable": (publish_before_durable, Layer.CHECKPOINT),
    "ctl-corrupt-loaded": (
        lambda: _damaged(restart(resume=4, verified=False)),
        Layer.CHECKPOINT,
    ),
    "ctl-stale-eval": (lambda: stale_eval(restart()), Layer.FRAMEWORK),
    "ctl-control-plane-resume-ignored": (control_plane_resume_ignored, Layer.CHECKPOINT),
}


def test_every_demo_control_is_covered(plan: Plan) -> None:
    assert sorted(CONTROLS) == sorted(c.id for c in plan.controls)


@pytest.mark.parametrize("control_id", sorted(CONTROLS))
def test_each_control_lands_on_the_layer_of_its_bug(
    plan: Plan, judge: Judge, control_id: str
) -> None:
    ctl = item(plan, control_id)
    assert isinstance(ctl, Control)
    shape, expected = CONTROLS[control_id]
    j = judge.replace(item=ctl)
    if control_id == "ctl-optimizer-lost":
        j = j.replace(reference=long_reference())
    ctx = j.ctx(shape())
    evidence = run_checks(ctx)
    caught = [f for e in evidence.values() for f in e.findings if f.check == ctl.expected_check]
    assert [f.verdict for f in caught] == [F] * len(caught) and caught, (
        f"the timeline is not shaped like {control_id}'s evidence"
    )
    res = failing_layer(ctx.timeline, evidence, ctl)
    assert res.layer is expected, res.to_record().to_json()
