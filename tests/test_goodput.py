"""Goodput accounting and the hang-or-crash description, on tiny literal timelines with
exact expected numbers."""

from __future__ import annotations

import pytest

from faultdrill.judge.disruption import describe_disruption
from faultdrill.judge.goodput import CATEGORIES, account
from tests.records import as_json
from tests.timelines import NEW, OLD, TL, baseline, restart


def _submitted(tl: TL) -> TL:
    return tl.platform("job_submitted", 0.0, run_id="r")


def test_baseline_is_all_productive_but_startup_and_end() -> None:
    g = as_json(account(_submitted(baseline()).build(), checkpoint_every=2))
    assert g["available"] and g["total_s"] == 7.5
    # steps at t=1..6 after the load decision at t=0.1: 0.9 + 5 x 1.0
    assert g["seconds"]["productive"] == pytest.approx(5.9)
    assert g["seconds"]["startup"] == pytest.approx(0.1)
    assert g["seconds"]["wasted_progress"] == 0 and g["seconds"]["recovery"] == 0
    assert g["seconds"]["other"] == pytest.approx(1.5)
    assert sum(g["seconds"][c] for c in CATEGORIES) == pytest.approx(g["total_s"])
    assert g["goodput"] == pytest.approx(5.9 / 7.5, abs=1e-4)
    assert "3 save(s) reported no duration_s" in g["notes"]
    assert "checkpoint every 2 steps" in g["conditions"]


def test_restart_splits_wasted_progress_and_recovery() -> None:
    g = as_json(account(_submitted(restart()).build()))
    s = g["seconds"]
    # incarnation 0: steps 1-4 committed (0.9 + 3), step 5 thrown away (1.0)
    # incarnation 1: load at 7.1 after the old one's last step at 5.0 -> 2.1 s recovery;
    # steps 5, 6 at t=8, 9 (0.9 + 1.0) committed
    assert s["productive"] == pytest.approx(5.8)
    assert s["wasted_progress"] == pytest.approx(1.0)
    assert s["recovery"] == pytest.approx(2.1)
    assert g["recomputed_steps"] == 1 and g["committed_steps"] == 6
    assert g["total_s"] == 10.5
    assert s["other"] == pytest.approx(10.5 - 5.8 - 1.0 - 2.1 - 0.1)


def test_reported_save_and_restore_durations_are_their_own_categories() -> None:
    tl = _submitted(restart())
    tl.edit("probe", "ckpt_save", lambda r: True, duration_s=0.25)
    tl.edit("probe", "ckpt_load", lambda r: r["pid"] in NEW, duration_s=0.4)
    g = as_json(account(tl.build()))
    s = g["seconds"]
    saves = 3  # ckpt-2, ckpt-4 of incarnation 0; ckpt-6 of incarnation 1
    assert s["checkpoint_save"] == pytest.approx(0.25 * saves)
    assert s["checkpoint_restore"] == pytest.approx(0.4)
    # The step after a save no longer carries the save (ckpt-2 in committed step 3, ckpt-4
    # in wasted step 5; ckpt-6 comes after the last step); recovery no longer the restore.
    # Incarnation 0's median step is now 0.875 s, so its first step's 0.9 s gives 0.025 s
    # to startup.
    assert s["productive"] == pytest.approx(5.8 - 0.25 - 0.025)
    assert s["wasted_progress"] == pytest.approx(0.75)
    assert s["startup"] == pytest.approx(0.1 + 0.025)
    assert s["recovery"] == pytest.approx(2.1 - 0.4)
    assert g["notes"] == []


def test_no_submission_means_no_goodput() -> None:
    g = as_json(account(baseline().build()))
    assert g == {
        "available": False,
        "why": "no job submission and end on the timeline",
        "why_message": {"message_id": "goodput.why.no-window", "params": {}},
    }


# --- hang or crash -----------------------------------------------------------------------


def test_no_fault_no_disruption() -> None:
    assert describe_disruption(baseline().build()) is None


def test_worker_kill_is_a_crash() -> None:
    d = as_json(describe_disruption(restart().build()))
    assert d is not None
    end = d["ending"]
    # progress stopped at step 5 (t=5.0); the platform noticed at 6.0: 0.5 s after the
    # injection at 5.5, inside the 10 x 1 s step threshold
    assert end["kind"] == "crash"
    assert end["failure_noticed_by"] == "worker_group_failed on n1"
    assert end["threshold_s"] == 10.0


def _hang(detect_at: float, *, revert_at: float | None = None, stop_at: float | None = None) -> TL:
    """Steps every 0.1 s until t=5.0, a fault at 5.05, no progress; detection at detect_at."""
    tl = TL().job("running", 0.0)
    for rank, pid in enumerate(OLD):
        tl.run_start(rank, pid, "a:1", 0.0).scratch(rank, pid, 0.05)
        tl.steps(pid, rank, range(1, 51), t0=0.1, dt=0.1)
    tl.inject(5.05, fault="control-plane-outage", target="the control plane", at_step=50)
    tl.edit("fault", "injected", lambda r: True, duration_s=6.0)
    if revert_at is not None:
        tl.add("fault", "reverted", revert_at, fault="control-plane-outage")
    if stop_at is not None:
        tl.harness("stop_condition", stop_at, condition="max_no_progress_s", detail="x")
    tl.platform("worker_failed", detect_at, node="n1")
    for rank, pid in enumerate(NEW):
        tl.run_start(rank, pid, "a:2", detect_at + 1.0).load(rank, pid, "c", 40, detect_at + 1.1)
        tl.steps(pid, rank, range(41, 51), t0=detect_at + 2.0, dt=0.1)
    return tl


def test_detection_only_after_the_revert_is_a_hang_ended_by_the_fault() -> None:
    d = as_json(describe_disruption(_hang(11.06, revert_at=11.05).build()))
    assert d is not None
    end = d["ending"]
    assert end["kind"] == "hang" and end["ended_by"] == "fault-end"
    assert end["threshold_s"] == pytest.approx(1.5)
    assert end["progress_stopped_at_s"] == pytest.approx(-0.05)
    assert "the platform did not act for 6.0 s" in end["how"]
    w = d["window"]
    assert w["end_s"] == pytest.approx(6.0)
    assert w["restart"]["rendezvous_during_fault"] is False
    assert "not even noticed" in w["restart"]["summary"]


def test_hang_ended_by_the_stop_condition() -> None:
    d = as_json(describe_disruption(_hang(40.0, stop_at=39.9).build()))
    assert d is not None
    assert d["ending"]["kind"] == "hang" and d["ending"]["ended_by"] == "stop-condition"


def test_hang_as_long_as_the_gloo_timeout() -> None:
    d = as_json(describe_disruption(_hang(35.5).build(), gloo_s=30))
    assert d is not None
    assert d["ending"]["ended_by"] == "gloo-timeout"
    assert "gloo collective timeout (30 s)" in d["ending"]["how"]


def test_training_unaffected_by_a_short_outage() -> None:
    tl = TL().job("running", 0.0)
    for rank, pid in enumerate(OLD):
        tl.run_start(rank, pid, "a:1", 0.0).scratch(rank, pid, 0.05)
        tl.steps(pid, rank, range(1, 101), t0=0.1, dt=0.1)
    tl.inject(5.05, fault="storage-outage", target="ckpt", at_step=50)
    tl.edit("fault", "injected", lambda r: True, duration_s=2.0)
    tl.add("fault", "reverted", 7.05, fault="storage-outage")
    d = as_json(describe_disruption(tl.build()))
    assert d is not None
    assert d["ending"]["kind"] == "unaffected"
    assert d["window"]["training_affected"] is False
    assert d["window"]["steps_per_s_during"] == pytest.approx(10.0)
    assert d["window"]["restart"] is None


def test_noticed_at_once_but_rendezvous_hung_until_the_fault_ended() -> None:
    tl = _hang(5.1, revert_at=11.05)
    tl.platform("rdzv_start", 5.1, node="n2").platform("rdzv_complete", 12.1, node="n2")
    d = as_json(describe_disruption(tl.build()))
    assert d is not None
    end = d["ending"]
    assert end["kind"] == "hang" and end["phase"] == "rendezvous"
    assert end["ended_by"] == "fault-end"
    assert "hung in rendezvous for 7.0 s" in end["how"]
    assert d["window"]["restart"]["rendezvous_during_fault"] is False
    assert "rendezvoused only 1.05 s after it ended" in d["window"]["restart"]["summary"]


def test_a_quick_rendezvous_after_a_crash_stays_a_crash() -> None:
    tl = restart().platform("rdzv_start", 6.0, node="n1").platform("rdzv_complete", 7.0, node="n1")
    d = as_json(describe_disruption(tl.build()))
    assert d is not None and d["ending"]["kind"] == "crash"
