"""The slow-worker fault (a straggler): its plan data refused with a clear error when bad,
the fault through the fake platform, and the two straggler checks on tiny literal
timelines (a healthy straggler ridden out, a job that was not, detection expected and
missing or late, no data), each with its exact verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from faultdrill.admit import parse_plan
from faultdrill.checks import Verdict
from faultdrill.errors import FaultError, PlanError
from faultdrill.events import EventSink
from faultdrill.faults.api import FaultContext, make_fault
from faultdrill.faults.straggler import SlowWorkerSpec
from faultdrill.i18n import format_message
from faultdrill.ledger import Ledger
from faultdrill.plan import Resources, Scenario
from faultdrill.platforms import PLATFORMS
from faultdrill.platforms.api import Ability
from faultdrill.platforms.fake import FakePlatform
from faultdrill.readings.steptimes import rank_step_times, steps_per_s
from tests.drillkit import ROOT, demo_raw
from tests.timelines import NEW, OLD, TL, A, B, Judge

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL
TOLERATED, DETECTED = "progress.straggler-tolerated", "expectation.straggler-detected"


def slow(**extra: Any) -> SlowWorkerSpec:
    return SlowWorkerSpec(target={"rank": 1}, cpu_percent=20, for_s=5, **extra)


def with_fault(judge: Judge, fault: Any) -> Judge:
    """The judge's scenario with ``fault``, expecting no restart (a straggler ridden out)."""
    assert isinstance(judge.item, Scenario)
    ridden = judge.item.expected.model_copy(update={"resume": "no-restart"})
    return judge.replace(item=judge.item.model_copy(update={"fault": fault, "expected": ridden}))


def _inject(tl: TL) -> TL:
    """Rank 1 throttled to 20 % at t=5.6 for 5 s."""
    return tl.add(
        "fault",
        "injected",
        5.6,
        fault="slow-worker",
        target="rank 1",
        at_step=10,
        duration_s=5.0,
        rank=1,
        cpu_percent=20,
    )


def straggler(*, revert: bool = True) -> TL:
    """Two ranks; steps 1-10 every 0.5 s (t=1.0..5.5), rank 1 throttled at 5.6 for 5 s:
    steps 11-15 every 1.0 s (6.5..10.5), released at 10.6, steps 16-25 every 0.5 s again."""
    tl = TL().job("running", 0.0)
    for rank, pid in enumerate(OLD):
        tl.run_start(rank, pid, A, 0.0).scratch(rank, pid, 0.1)
        tl.steps(pid, rank, range(1, 11), t0=1.0, dt=0.5)
        tl.steps(pid, rank, range(11, 16), t0=6.5, dt=1.0)
        tl.steps(pid, rank, range(16, 26), t0=11.0, dt=0.5)
    _inject(tl)
    if revert:
        tl.add("fault", "reverted", 10.6, fault="slow-worker")
    return tl.job("succeeded", 16.5)


# --- the per-rank step times ------------------------------------------------------------


def test_step_times_split_by_where_each_step_ended() -> None:
    tl = straggler().build()
    ranks = rank_step_times(tl, 5.6, 10.6)
    assert [r.rank for r in ranks] == [0, 1]
    r1 = ranks[1]
    assert (r1.median_before_s, r1.median_during_s, r1.median_after_s) == (0.5, 1.0, 0.5)
    assert len(r1.before) == 9 and len(r1.during) == 5 and len(r1.after) == 10
    assert r1.slowdown == 2.0
    assert steps_per_s(tl, 0.6, 5.6) == 2.0 and steps_per_s(tl, 5.6, 10.6) == 1.0


# --- expectation.straggler-tolerated --------------------------------------------------------


def test_a_straggler_ridden_out_passes_with_per_rank_times_and_steps_lost(judge: Judge) -> None:
    found = with_fault(judge, slow()).run(TOLERATED, straggler())
    assert [f.verdict for f in found] == [P]
    msg = found[0].message
    assert msg.startswith("rank 1 held to 20 % of one CPU core for 5.0 s; the job rode it out")
    assert "5.0 steps lost (50 % of the step rate before)" in msg
    assert "rank 1 (throttled): median step time 0.500 s before, 1.000 s during" in msg
    assert found[0].data["ranks"]["1"] == [0.5, 1.0, 0.5]
    zh = format_message("zh", str(found[0].message_id), found[0].params)
    assert "损失 5.0 步" in zh and "rank 1（被限流）" in zh


def test_a_timeout_and_restart_during_the_throttle_fails(judge: Judge) -> None:
    tl = straggler().platform("timeout_fired", 8.0, node="n1", timeout="gloo")
    for rank, pid in enumerate(NEW):
        tl.run_start(rank, pid, B, 9.0).scratch(rank, pid, 9.1)
    v, msg = with_fault(judge, slow()).one(TOLERATED, tl)
    assert v == F
    assert msg.startswith(
        "the job did not ride out the slowed rank: platform event timeout_fired at +2.4 s"
    )


def test_a_restart_the_scenario_expects_is_no_failure_of_this_check(judge: Judge) -> None:
    tl = straggler().platform("timeout_fired", 8.0, node="n1", timeout="gloo")
    expecting = with_fault(judge, slow()).scenario("expected", resume="latest-valid")
    v, msg = expecting.one(TOLERATED, tl)
    assert v == P and msg.startswith("the job did not ride out the slowed rank, as the scenario")


def test_a_restart_alone_after_the_throttle_fails(judge: Judge) -> None:
    tl = straggler()
    for rank, pid in enumerate(NEW):
        tl.run_start(rank, pid, B, 12.0).scratch(rank, pid, 12.1)
    v, msg = with_fault(judge, slow()).one(TOLERATED, tl)
    assert v == F and "the job restarted (a new incarnation) at +6.4 s" in msg


def test_no_step_times_is_retest(judge: Judge) -> None:
    tl = TL().job("running", 0.0)
    _inject(tl)
    tl.add("fault", "reverted", 10.6, fault="slow-worker").job("succeeded", 12.0)
    v, msg = with_fault(judge, slow()).one(TOLERATED, tl)
    assert v == R and msg.startswith("no step times both before and during or after")


def test_never_injected_is_retest_and_other_items_are_not_applicable(judge: Judge) -> None:
    tl = straggler()
    tl.recs = [r for r in tl.recs if r["src"] != "fault"]
    assert with_fault(judge, slow()).one(TOLERATED, tl)[0] == R
    assert with_fault(judge, slow()).one(DETECTED, tl)[0] == R
    assert judge.one(TOLERATED, straggler()) == (
        P,
        "kill-worker is not a straggler fault: not applicable",
    )
    assert judge.replace(item=None).one(DETECTED, straggler())[0] == P


# --- expectation.straggler-detected ---------------------------------------------------------


def test_nothing_noticed_is_said_plainly_when_not_required(judge: Judge) -> None:
    v, msg = with_fault(judge, slow()).one(DETECTED, straggler())
    assert v == P
    assert msg.startswith("nothing noticed the slowed rank: no platform event, no restart")


def test_detection_expected_and_missing_fails(judge: Judge) -> None:
    v, msg = with_fault(judge, slow(expect_detection={"within_s": 3})).one(DETECTED, straggler())
    assert v == F
    assert msg == "nothing noticed the slowed rank, but the plan expects detection within 3 s"


def test_detection_in_time_passes_and_late_fails(judge: Judge) -> None:
    expecting = with_fault(judge, slow(expect_detection={"within_s": 3}))
    early = straggler().platform("straggler", 6.6, node="n1", rank=1)
    assert expecting.one(DETECTED, early) == (
        P,
        "platform event straggler at +1.0 s after the throttle began",
    )
    idle = straggler().platform("node_state", 12.0, node="n2", state="idle")
    assert with_fault(judge, slow()).one(DETECTED, idle)[0] == P  # a node idle at the end
    assert expecting.one(DETECTED, idle)[0] == F
    drained = straggler().platform("node_state", 7.0, node="n2", state="drain")
    assert expecting.one(DETECTED, drained)[0] == P
    late = straggler().platform("straggler", 9.6, node="n1", rank=1)
    v, msg = expecting.one(DETECTED, late)
    assert v == F and msg.endswith("later than the 3 s the plan expects")


# --- the spec, the plan and the fault ------------------------------------------------------


def _plan_with(fault: dict[str, Any]) -> dict[str, Any]:
    raw = demo_raw()
    raw["resources"].update(platform="fake", isolation="none", spares=0)
    raw["rounds"] = [
        {"round": 1, "scenarios": [{"id": "slow", "fault": fault, "trigger": {"at_step": 3}}]}
    ]
    raw["controls"] = []
    return raw


GOOD = {"kind": "slow-worker", "target": {"rank": 1}, "cpu_percent": 20, "for_s": 10}


def test_a_good_slow_worker_loads_with_detection_not_required_by_default() -> None:
    plan = parse_plan(_plan_with(GOOD))
    spec = plan.rounds[0].scenarios[0].fault
    assert isinstance(spec, SlowWorkerSpec)
    assert spec.expect_detection is None and spec.detection_within_s is None
    said = parse_plan(_plan_with({**GOOD, "expect_detection": "none"}))
    assert said.rounds[0].scenarios[0].fault == spec
    assert spec.duration_s == 10 and spec.target_label() == "rank 1"
    timed = parse_plan(_plan_with({**GOOD, "expect_detection": {"within_s": 30}}))
    timed_spec = timed.rounds[0].scenarios[0].fault
    assert isinstance(timed_spec, SlowWorkerSpec) and timed_spec.detection_within_s == 30


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"cpu_percent": 0}, "cpu_percent"),
        ({"cpu_percent": 100}, "cpu_percent"),
        ({"cpu_percent": "20"}, "cpu_percent"),
        ({"for_s": 0}, "for_s"),
        ({"for_s": 601}, "for_s"),
        ({"expect_detection": {"within_s": -1}}, "within_s"),
        ({"expect_detection": "sometimes"}, "expect_detection"),
        ({"target": {"rank": 7}}, "slow-worker target rank 7 does not exist"),
        ({"throttle": 5}, "throttle"),
    ],
)
def test_bad_slow_worker_input_is_refused_naming_the_field(
    change: dict[str, Any], said: str
) -> None:
    with pytest.raises(PlanError) as err:
        parse_plan(_plan_with({**GOOD, **change}), source="plan.yaml")
    assert said in str(err.value) and "plan.yaml" in str(err.value)


def test_a_platform_without_throttling_refuses_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakePlatform.scripted(abilities=set(Ability) - {Ability.THROTTLE_RANK})
    monkeypatch.setitem(PLATFORMS, "fake", fake)
    with pytest.raises(PlanError, match="needs ability throttle-rank"):
        parse_plan(_plan_with(GOOD), source="plan.yaml")


def test_the_fault_throttles_through_the_platform_and_reverts_once(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id="t-slow")
    sink = EventSink(tmp_path / "events", "t")
    platform = FakePlatform(Resources(platform="fake", nodes=2), tmp_path, ledger, sink)
    ctx = FaultContext(platform=platform, ledger=ledger, sink=sink, scenario_id="s")
    fault = make_fault(slow(expect_detection={"within_s": 30}))
    facts = fault.inject(ctx)
    assert facts["rank"] == 1 and facts["cpu_percent"] == 20 and facts["throttled"] == 1
    assert facts["expect_detection_within_s"] == 30
    [change] = platform.changes
    assert change.action == "throttle_replica" and change.recorded_first
    fault.revert(ctx)
    fault.revert(ctx)
    assert change.undone == 1 and ledger.pending() == []


def test_a_platform_that_cannot_throttle_is_a_fault_error(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id="t-slow")
    sink = EventSink(tmp_path / "events", "t")

    class SignalsOnly(FakePlatform):
        throttle_replica = None  # type: ignore[assignment]

    platform = SignalsOnly(Resources(platform="fake", nodes=2), tmp_path, ledger, sink)
    ctx = FaultContext(platform=platform, ledger=ledger, sink=sink, scenario_id="s")
    with pytest.raises(FaultError, match="cannot do throttle-rank"):
        make_fault(slow()).inject(ctx)


def test_kubernetes_refuses_a_straggler_naming_where_to_drill_it() -> None:
    raw = yaml.safe_load((ROOT / "examples" / "kubernetes.yaml").read_text())
    raw["rounds"] = [
        {"round": 1, "scenarios": [{"id": "slow", "fault": GOOD, "trigger": {"at_step": 3}}]}
    ]
    raw["controls"] = []
    with pytest.raises(PlanError) as err:
        parse_plan(raw, source="k8s.yaml")
    said = str(err.value)
    assert "needs ability throttle-rank" in said
    assert "drill a straggler on platform local or slurm (embedded)" in said
