"""The ``oom-worker`` fault without a machine: its plan data (bounds, the limit it must
outgrow, errors naming the field and the fix), through the shipped fake platform (the cap
and the request recorded in the ledger before they are made, the death said with its cause
apart from any signal, the cap lifted once), platforms that refuse it at validation with
the fix, and the ``progress.oom-restart-loop`` check on tiny literal timelines: a loop
caught with its count, a recovery passed, what it cannot tell retested."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from faultdrill.admit import parse_plan
from faultdrill.checks import Verdict
from faultdrill.errors import PlanError
from faultdrill.events import EventSink
from faultdrill.faults.api import FaultContext, make_fault
from faultdrill.faults.memory import OomWorker
from faultdrill.ledger import Ledger
from faultdrill.plan import Resources
from faultdrill.plan.faults import OomWorkerSpec
from faultdrill.platforms.api import Ability, Change, Replica
from faultdrill.platforms.fake import FakePlatform
from tests.drillkit import demo_raw
from tests.timelines import NEW, OLD, TL, Judge, finish, first_run, restart

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL
LOOP = "progress.oom-restart-loop"

# --- plan data -------------------------------------------------------------------------


def test_the_spec_has_bounded_defaults_and_a_target_label() -> None:
    spec = OomWorkerSpec(target={"rank": 1})
    assert (spec.limit_mb, spec.alloc_mb, spec.repeat, spec.wait_s) == (64, 256, False, 60.0)
    assert spec.target_label() == "rank 1" and spec.duration_s is None


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"limit_mb": 64, "alloc_mb": 64}, "alloc_mb (64) must exceed limit_mb (64)"),
        ({"limit_mb": 4}, "greater than or equal to 8"),
        ({"alloc_mb": 9000}, "less than or equal to 8192"),
        ({"wait_s": 0}, "greater than 0"),
        ({"repeat": "sometimes"}, "valid boolean"),
        ({"signal": "SIGKILL"}, "Extra inputs are not permitted"),
    ],
)
def test_bad_spec_values_are_refused_naming_the_rule(fields: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(says)):
        OomWorkerSpec(target={"rank": 1}, **fields)


def _plan(fault: dict[str, Any], **resources: Any) -> dict[str, Any]:
    raw = demo_raw()
    raw["resources"].update(resources)
    scenario = {"id": "oom", "fault": fault, "trigger": {"at_step": 15}}
    raw["rounds"] = [{"round": 1, "name": "memory", "scenarios": [scenario]}]
    raw["controls"] = []
    return raw


def test_a_plan_error_names_the_file_field_and_fix() -> None:
    raw = _plan({"kind": "oom-worker", "target": {"rank": 1}, "limit_mb": 512, "alloc_mb": 100})
    with pytest.raises(PlanError) as err:
        parse_plan(raw, source="oom.yaml")
    text = str(err.value)
    assert "oom.yaml" in text and "alloc_mb (100) must exceed limit_mb (512)" in text
    assert "raise alloc_mb or lower limit_mb" in text


def test_a_rank_outside_the_world_is_refused() -> None:
    raw = _plan({"kind": "oom-worker", "target": {"rank": 7}}, isolation="none", spares=0)
    with pytest.raises(
        PlanError, match=r"oom-worker target rank 7 does not exist \(world size 2\)"
    ):
        parse_plan(raw, source="oom.yaml")


@pytest.mark.parametrize(
    ("resources", "fix"),
    [
        (
            {"platform": "kubernetes", "kubernetes": {"test_cluster": True}},
            "no memory limit of their own",
        ),
        ({"platform": "ray", "ray": {}}, "drill an OOM kill on the local platform"),
    ],
)
def test_platforms_without_the_ability_refuse_it_at_validation_with_the_fix(
    resources: dict[str, Any], fix: str
) -> None:
    raw = _plan({"kind": "oom-worker", "target": {"rank": 1}}, isolation="netns", **resources)
    with pytest.raises(PlanError) as err:
        parse_plan(raw, source="oom.yaml")
    assert "oom-rank" in str(err.value) and fix in str(err.value), str(err.value)


def test_the_local_platform_and_embedded_slurm_declare_the_ability() -> None:
    raw = _plan({"kind": "oom-worker", "target": {"rank": 1}}, isolation="none", spares=0)
    plan = parse_plan(raw, source="oom.yaml")
    assert plan.scenarios()[0].fault.kind == "oom-worker"
    from faultdrill.platforms.slurm.platform import EMBEDDED_ABILITIES

    assert Ability.OOM_RANK in EMBEDDED_ABILITIES


# --- through the fake platform ----------------------------------------------------------


def _ctx(tmp_path: Path, platform: type[FakePlatform] = FakePlatform) -> FaultContext:
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id="t-oom")
    sink = EventSink(tmp_path / "events", "t")
    res = Resources(platform="fake", nodes=2, spares=0)
    return FaultContext(platform(res, tmp_path, ledger, sink), ledger, sink, "s")


def _fault_events(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "events" / "fault.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _wait_for(pred: Any, what: str) -> None:
    deadline = time.monotonic() + 5
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_the_cap_is_recorded_first_the_death_said_with_its_cause_then_the_cap_lifted(
    tmp_path: Path,
) -> None:
    ctx = _ctx(tmp_path)
    platform = ctx.platform
    assert isinstance(platform, FakePlatform)
    fault = make_fault(OomWorkerSpec(target={"rank": 1}, limit_mb=32, alloc_mb=128))
    assert isinstance(fault, OomWorker)
    facts = fault.inject(ctx)
    assert platform.asked_names()[:2] == ["rank_replica", "oom_cap"]
    assert (facts["rank"], facts["limit_bytes"], facts["alloc_mb"]) == (1, 32 << 20, 128)
    assert "signal" not in facts  # the drill sends none
    assert all(c.recorded_first and c.applied for c in platform.changes)
    _wait_for(lambda: all(c.undone == 1 for c in platform.changes), "the cap to be lifted")
    [died] = [e for e in _fault_events(tmp_path) if e["kind"] == "oom_killed"]
    assert died["cause"] == "oom-killer" and died["exit_signal"] == "SIGKILL"
    assert died["signal_sent_by_drill"] is False and died["memcg_oom_kills"] == 1
    fault.revert(ctx)  # the end of the item: nothing left to undo, nothing undone twice
    assert [c.undone for c in platform.changes] == [1, 1]
    assert ctx.ledger.pending() == []


class _NoOomKill(FakePlatform):
    """A fake whose capped replica survives its allocation (the kernel killed nothing)."""

    def oom_cap(self, replica: Replica, *, limit_mb: int, alloc_mb: int) -> list[Change]:
        cap, ask = super().oom_cap(replica, limit_mb=limit_mb, alloc_mb=alloc_mb)
        return [cap, dataclasses.replace(ask, apply=lambda note: {"alloc_mb": alloc_mb})]


def test_a_replica_that_outlives_the_wait_is_said_and_the_cap_stays_for_the_end(
    tmp_path: Path,
) -> None:
    ctx = _ctx(tmp_path, _NoOomKill)
    fault = make_fault(OomWorkerSpec(target={"rank": 0}, alloc_mb=128, wait_s=0.2))
    fault.inject(ctx)
    _wait_for(lambda: any(e["kind"] == "oom_not_killed" for e in _fault_events(tmp_path)), "it")
    [said] = [e for e in _fault_events(tmp_path) if e["kind"] == "oom_not_killed"]
    assert (said["rank"], said["waited_s"], said["memcg_oom_kills"]) == (0, 0.2, 0)
    assert len(ctx.ledger.pending()) == 2  # the cap stays until the end of the item
    fault.revert(ctx)
    assert ctx.ledger.pending() == []


# --- progress.oom-restart-loop on literal timelines -----------------------------------------


def _oom_judge(judge: Judge) -> Judge:
    assert judge.item is not None
    fault = OomWorkerSpec(target={"rank": 1})
    return judge.replace(item=judge.item.model_copy(update={"fault": fault}))


def _killed(tl: TL, t: float, pid: int, cause: str = "oom-killer") -> TL:
    return tl.add("fault", "oom_killed", t, pid=pid, rank=1, node="n1", cause=cause)


def _loop(restarts: int) -> TL:
    """Rank 1 OOM-killed after step 5, then every restart dies at its first step (the limit
    stays); the job fails when the restarts are spent."""
    tl = TL().job("running", 0.0)
    first_run(tl, 5)
    tl.inject(5.5, fault="oom-worker", at_step=5)
    _killed(tl, 5.6, OLD[1])
    t = 7.0
    for n in range(restarts):
        pids = [p + 100 * (n + 1) for p in NEW]
        for rank, pid in enumerate(pids):
            tl.run_start(rank, pid, None, t).load(rank, pid, "ckpt-4", 4, t + 0.1)
        _killed(tl, t + 0.5, pids[1])
        t += 2.0
    return tl.job("failed", t)


def test_replicas_that_die_before_announcing_themselves_are_counted(judge: Judge) -> None:
    tl = _loop(0)
    for n, t in enumerate((7.0, 9.0)):
        tl.add("fault", "oom_recapped", t, pid=900 + n, rank=1, node="n1")
        _killed(tl, t + 0.4, 900 + n)
    verdict, message = _oom_judge(judge).one(LOOP, tl)
    assert verdict == F
    assert "3 times; 2 restart(s) died of OOM again (2 restart(s) after the first kill)" in message


def test_a_restart_loop_into_the_same_oom_fails_with_its_count(judge: Judge) -> None:
    verdict, message = _oom_judge(judge).one(LOOP, _loop(3))
    assert verdict == F
    assert message.startswith("restart loop: rank 1 was killed by the kernel's OOM killer 4 times")
    assert "3 restart(s) died of OOM again (3 restart(s) after the first kill)" in message
    assert "never got past step 5 (the OOM point)" in message


def test_a_recovery_after_one_oom_kill_passes(judge: Judge) -> None:
    tl = restart()
    _killed(tl, 5.6, OLD[1])
    verdict, message = _oom_judge(judge).one(LOOP, tl)
    assert verdict == P
    assert message == (
        "rank 1 was killed by the kernel's OOM killer 1 time(s) (0 restart(s) died of OOM "
        "again); the job got past step 5 (the OOM point) 3.4 s after the first kill"
    )


def test_recovering_after_two_oom_kills_is_no_loop(judge: Judge) -> None:
    tl = restart()
    _killed(tl, 5.6, OLD[1])
    _killed(tl, 6.8, NEW[1] + 500)
    verdict, message = _oom_judge(judge).one(LOOP, tl)
    assert verdict == P and "2 time(s) (1 restart(s) died of OOM again)" in message


def test_a_death_without_an_oom_kill_is_unexplained_and_retested(judge: Judge) -> None:
    tl = _loop(0)
    tl.recs = [r for r in tl.recs if r["kind"] != "oom_killed"]
    _killed(tl, 5.6, OLD[1], cause="unknown")
    verdict, message = _oom_judge(judge).one(LOOP, tl)
    assert verdict == R and "counted no OOM kill" in message


def test_one_oom_kill_without_progress_is_retest_not_a_loop(judge: Judge) -> None:
    verdict, message = _oom_judge(judge).one(LOOP, _loop(0))
    assert verdict == R and "not a restart loop" in message


def test_a_replica_that_was_never_killed_is_retested(judge: Judge) -> None:
    tl = TL().job("running", 0.0)
    first_run(tl, 5)
    tl.inject(5.5, fault="oom-worker", at_step=5)
    tl.add("fault", "oom_not_killed", 65.5, pid=OLD[1], rank=1, waited_s=60.0)
    finish(tl, 5, 70.0, OLD, latest="ckpt-4")
    verdict, message = _oom_judge(judge).one(LOOP, tl)
    assert verdict == R and "still alive 60.0 s after" in message


def test_other_faults_are_not_applicable(judge: Judge) -> None:
    assert judge.one(LOOP, restart()) == (
        P,
        "no process was killed for lack of memory: not applicable",
    )
