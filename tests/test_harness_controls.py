"""Harness-side negative controls (faults/harness.py): what each does to real files or
asks of the platform, its undo (in the harness and replayed from the ledger alone, as by
``faultdrill cleanup``), the plan's one-line form, and a real copy of a process started
and stopped by the local platform's action."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from faultdrill.admit import parse_plan
from faultdrill.errors import FaultError, PlanError
from faultdrill.events import EventSink
from faultdrill.faults.api import FaultContext, make_fault
from faultdrill.faults.harness import (
    EXPECTED_CHECK,
    HideCheckpointsSpec,
    RollbackLatestSpec,
    StaleCopySpec,
)
from faultdrill.host import procfs
from faultdrill.host.cluster import NodeCluster
from faultdrill.host.copies import copy_change
from faultdrill.ledger import UNDOERS, Ledger
from faultdrill.plan import Resources
from faultdrill.platforms.api import Ability, Replica
from faultdrill.platforms.fake import FakePlatform
from tests.drillkit import demo_raw


def context(tmp_path: Path, pointer: str = "step-000020\n") -> FaultContext:
    item = tmp_path / "item"
    ckpt = item / "ckpt"
    for step in (10, 20):
        (ckpt / f"step-{step:06d}").mkdir(parents=True)
        (ckpt / f"step-{step:06d}" / "state.pt").write_bytes(b"x" * step)
    (ckpt / "latest").write_text(pointer)
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id="t-harness")
    sink = EventSink(tmp_path / "events", "t")
    return FaultContext(
        platform=FakePlatform(Resources(platform="fake"), item, ledger, sink),
        ledger=ledger,
        sink=sink,
        scenario_id="ctl",
        ckpt_dir=ckpt,
        item_dir=item,
    )


def asked(ctx: FaultContext) -> list[str]:
    assert isinstance(ctx.platform, FakePlatform)
    return ctx.platform.asked_names()


# --- rollback-latest ------------------------------------------------------------------------


def test_rollback_points_latest_at_the_older_checkpoint_then_restarts(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    pointer = tmp_path / "item" / "ckpt" / "latest"
    fault = make_fault(RollbackLatestSpec())
    facts = fault.inject(ctx)
    assert pointer.read_text() == "step-000010\n"
    assert (facts["pointer_from"], facts["pointer_to"]) == ("step-000020", "step-000010")
    assert "ckpt_id" not in facts  # else the checks would take step-000020 for damaged
    assert asked(ctx) == ["rank_replica", "signal_replica"]
    [entry] = [e for e in ctx.ledger.entries.values() if e.kind == "ckpt-pointer"]
    assert entry.applied and not entry.reverted
    fault.revert(ctx)
    assert pointer.read_text() == "step-000020\n"


def test_rollback_keeps_the_jobs_pointer_format_and_leaves_a_newer_pointer(
    tmp_path: Path,
) -> None:
    ctx = context(tmp_path, pointer="step-000020 5f3a9c\n")
    pointer = tmp_path / "item" / "ckpt" / "latest"
    fault = make_fault(RollbackLatestSpec())
    fault.inject(ctx)
    assert pointer.read_text() == "step-000010 5f3a9c\n"
    pointer.write_text("step-000030 77aa\n")  # the restarted job published since
    fault.revert(ctx)
    assert pointer.read_text() == "step-000030 77aa\n"


def test_rollback_without_an_older_checkpoint_changes_nothing(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    with pytest.raises(FaultError, match="no checkpoint 2 save"):
        make_fault(RollbackLatestSpec(back=2)).inject(ctx)
    assert (tmp_path / "item" / "ckpt" / "latest").read_text() == "step-000020\n"
    assert ctx.ledger.entries == {} and asked(ctx) == []


# --- hide-checkpoints ------------------------------------------------------------------------


def test_hide_moves_everything_aside_and_the_end_brings_back_what_is_free(
    tmp_path: Path,
) -> None:
    ctx = context(tmp_path)
    ckpt = tmp_path / "item" / "ckpt"
    fault = make_fault(HideCheckpointsSpec())
    facts = fault.inject(ctx)
    hidden = tmp_path / "item" / "faults" / "hidden-ckpt"
    assert sorted(os.listdir(ckpt)) == []
    assert facts["hidden"] == ["latest", "step-000010", "step-000020"]
    assert sorted(os.listdir(hidden)) == ["latest", "step-000010", "step-000020"]
    assert asked(ctx) == ["rank_replica", "signal_replica"]
    # the restarted job, from scratch, saved step-000010 and published it again
    (ckpt / "step-000010").mkdir()
    (ckpt / "latest").write_text("step-000010\n")
    fault.revert(ctx)
    assert sorted(os.listdir(ckpt)) == ["latest", "step-000010", "step-000020"]
    assert (ckpt / "latest").read_text() == "step-000010\n"
    assert sorted(os.listdir(hidden)) == ["latest", "step-000010"]  # kept aside: evidence


def test_the_hide_is_undone_from_the_ledger_alone(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    make_fault(HideCheckpointsSpec()).inject(ctx)
    [entry] = [e for e in ctx.ledger.entries.values() if e.kind == "ckpt-hide"]
    UNDOERS["ckpt-hide"](dict(entry.data))  # as `faultdrill cleanup` replays it
    ckpt = tmp_path / "item" / "ckpt"
    assert sorted(os.listdir(ckpt)) == ["latest", "step-000010", "step-000020"]
    assert not (tmp_path / "item" / "faults" / "hidden-ckpt").exists()
    UNDOERS["ckpt-hide"](dict(entry.data))  # idempotent
    bad = {**entry.data, "hidden": str(tmp_path)}
    with pytest.raises(Exception, match="not where the harness hid"):
        UNDOERS["ckpt-hide"](bad)


def test_an_empty_checkpoint_directory_is_not_hidden(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    ckpt = tmp_path / "item" / "ckpt"
    for entry in ckpt.iterdir():
        if entry.is_dir():
            for f in entry.iterdir():
                f.unlink()
            entry.rmdir()
        else:
            entry.unlink()
    with pytest.raises(FaultError, match="nothing to hide"):
        make_fault(HideCheckpointsSpec()).inject(ctx)


# --- stale-copy ---------------------------------------------------------------------------


def test_stale_copy_copies_then_kills_the_original(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    facts = make_fault(StaleCopySpec(target={"rank": 1})).inject(ctx)
    assert asked(ctx) == ["rank_replica", "replica_copy", "signal_replica"]
    assert (facts["copy_of"], facts["restart_signal"]) == (-1001, "SIGKILL")
    ctx2 = context(tmp_path / "b")
    make_fault(StaleCopySpec(kill_original=False)).inject(ctx2)
    assert asked(ctx2) == ["rank_replica", "replica_copy"]


def test_a_copy_runs_as_the_original_and_the_undo_stops_it(tmp_path: Path) -> None:
    """The local platform's action on a real process: same command line, environment and
    working directory, its own log; the ledger's undo kills it and its child."""
    run_id = f"t-copy-{os.getpid()}"
    work = tmp_path / "work"
    work.mkdir()
    script = "import subprocess,sys,time; subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)']); print('up', flush=True); time.sleep(60)"
    env = {**os.environ, "RANK": "1", "FAULTDRILL_RUN_ID": run_id, "MY_JOB_SETTING": "x"}
    original = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=work)
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id=run_id)
    cluster = NodeCluster(ledger, EventSink(tmp_path / "events", "t"), ["n1"])
    started: list[subprocess.Popen[bytes]] = []
    try:
        time.sleep(0.3)
        start = procfs.start_time(original.pid)
        assert start is not None
        replica = Replica(original.pid, start, "worker", "n1", 1)
        change = copy_change(cluster, replica, tmp_path / "logs", started)
        eid = ledger.record(change.kind, change.data, change.label)
        facts = change.apply(lambda **kw: ledger.update(eid, **kw))
        ledger.mark_applied(eid)
        assert facts is not None
        copy = int(facts["copy_pid"])
        assert ledger.entries[eid].data["pid"] == copy
        deadline = time.monotonic() + 10
        while "up" not in (tmp_path / "logs" / "copy-n1-rank1.log").read_text():
            assert time.monotonic() < deadline, "the copy never started"
            time.sleep(0.05)
        assert procfs.cmdline(copy) == procfs.cmdline(original.pid)
        assert procfs.environ(copy)["MY_JOB_SETTING"] == "x"
        assert procfs.cwd(copy) == work
        family = procfs.session_members(copy)
        assert len(family) == 2  # the copy and the helper it started
        ledger.revert(eid)
        assert change.after_undo is not None
        change.after_undo()
        assert not any(procfs.alive(p) for p in family)
        assert procfs.alive(original.pid)  # the original is not the undo's business
    finally:
        original.kill()
        original.wait()
        for p in procfs.pids_with_env("FAULTDRILL_RUN_ID", run_id):
            procfs.kill_checked(p, None, 9)


# --- the plan's one line ----------------------------------------------------------------------


def plan_raw(controls: Any, **resources: Any) -> dict[str, Any]:
    raw = demo_raw()
    raw["controls"] = controls
    raw["resources"].update(resources)
    return raw


def test_all_harness_controls_in_one_line() -> None:
    plan = parse_plan(plan_raw({"harness": "all"}), source="plan.yaml")
    got = [
        (c.id, c.fault.kind, c.expected_check, c.trigger.after_checkpoint) for c in plan.controls
    ]
    assert got == [
        ("ctl-rollback-latest", "rollback-latest", "progress.resume-point", 2),
        ("ctl-hide-checkpoints", "hide-checkpoints", "progress.no-restart-from-zero", 2),
        ("ctl-stale-copy", "stale-copy", "resources.no-stale-replica", 2),
    ]
    assert set(EXPECTED_CHECK) == {c.fault.kind for c in plan.controls}


def test_the_one_line_takes_a_trigger_a_target_and_the_plans_own_controls() -> None:
    own = demo_raw()["controls"][0]
    raw = plan_raw(
        {
            "harness": ["stale-copy"],
            "trigger": {"at_step": 12},
            "target": {"rank": 0},
            "items": [own],
        }
    )
    plan = parse_plan(raw, source="plan.yaml")
    assert [c.id for c in plan.controls] == ["ctl-stale-copy", own["id"]]
    copy = plan.controls[0]
    assert copy.trigger.at_step == 12 and copy.fault.target_label() == "rank 0"
    again = parse_plan(plan.model_dump(mode="json"), source="plan.json")  # a run's copy
    assert again.controls == plan.controls


def test_a_misspelled_harness_control_is_refused_naming_the_field() -> None:
    with pytest.raises(PlanError) as err:
        parse_plan(plan_raw({"harness": ["rollbak-latest"]}), source="plan.yaml")
    msg = str(err.value)
    assert "controls.harness" in msg and "'rollbak-latest'" in msg
    assert "harness controls are: all, rollback-latest, hide-checkpoints, stale-copy" in msg
    with pytest.raises(PlanError, match=r"ctl-rollback-latest: .* restart rank 7 does not exist"):
        parse_plan(plan_raw({"harness": "all", "target": {"rank": 7}}), source="plan.yaml")


def test_rollback_needs_a_pointer_and_the_copy_a_platform_that_can() -> None:
    raw = plan_raw({"harness": ["rollback-latest"]})
    raw["checkpoint"]["latest_file"] = ""
    raw["rounds"] = []
    with pytest.raises(PlanError, match=r"rollback-latest needs checkpoint\.latest_file"):
        parse_plan(raw, source="plan.yaml")
    fake = FakePlatform.scripted(abilities=set(Ability) - {Ability.REPLICA_COPY})
    fake.name = "fake-no-copy"
    from faultdrill.platforms import PLATFORMS

    PLATFORMS[fake.name] = fake
    try:
        with pytest.raises(PlanError, match=r"needs ability replica-copy, which platform"):
            parse_plan(
                plan_raw({"harness": ["stale-copy"]}, platform="fake-no-copy", isolation="none"),
                source="plan.yaml",
            )
    finally:
        del PLATFORMS[fake.name]
