"""Round-3 checks on tiny literal timelines: each with a healthy case and a known-bad one."""

from __future__ import annotations

import pytest

from faultdrill.checks import Verdict
from tests.timelines import NEW, OLD, TL, WALL, A, Judge, baseline, restart

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


def _observed(tl: TL, t: float, when: str, latest: str, verifies: bool = True) -> TL:
    return tl.add(
        "fault",
        "storage_observed",
        t,
        when=when,
        latest=latest,
        latest_verifies=verifies,
        latest_problem=None if verifies else "state.pt has 512 bytes, manifest says 1024",
    )


def _outage(tl: TL, t0: float = 3.2, t1: float = 4.8, *, failed_step: int | None = 4) -> TL:
    """A storage outage from t0 to t1 over a baseline whose ckpt-4 save failed."""
    tl.drop("probe", "ckpt_save", lambda r: r["id"] == "ckpt-4")
    tl.inject(t0, fault="storage-outage", target="the checkpoint directory", at_step=3)
    tl.edit("fault", "injected", lambda r: True, duration_s=t1 - t0)
    _observed(tl, t0, "start", "ckpt-2")
    if failed_step is not None:
        tl.add(
            "probe",
            "ckpt_save_failed",
            4.55,
            rank=0,
            pid=OLD[0],
            step=failed_step,
            error="OSError: [Errno 30] Read-only file system: '/x/ckpt/.tmp-ckpt-4'",
            errno=30,
            duration_s=0.01,
        )
    _observed(tl, t1 - 0.01, "end", "ckpt-2")
    return tl.add("fault", "reverted", t1, fault="storage-outage")


# --- progress.failed-save-not-published ---------------------------------------------------


def test_failed_save_never_published_passes(judge: Judge) -> None:
    v, msg = judge.one("progress.failed-save-not-published", _outage(baseline()))
    assert v == P
    assert "1 failed save(s) (step 4) never became latest" in msg


def test_pointer_moved_to_a_save_that_never_completed_fails(judge: Judge) -> None:
    tl = _outage(baseline()).edit(
        "fault", "storage_observed", lambda r: r["when"] == "end", latest="ckpt-4"
    )
    v, msg = judge.one("progress.failed-save-not-published", tl)
    assert v == F
    assert "'ckpt-4', which no completed save reported" in msg
    assert "end of the storage outage" in msg


def test_pointer_naming_a_checkpoint_that_does_not_verify_fails(judge: Judge) -> None:
    tl = _outage(baseline()).edit(
        "fault",
        "storage_observed",
        lambda r: r["when"] == "end",
        latest_verifies=False,
        latest_problem="state.pt has 512 bytes, manifest says 1024",
    )
    v, msg = judge.one("progress.failed-save-not-published", tl)
    assert v == F and "does not verify" in msg


def test_end_pointer_naming_an_unreported_checkpoint_fails(judge: Judge) -> None:
    tl = baseline().edit("harness", "ckpt_latest", lambda r: True, target="ckpt-8")
    v, msg = judge.one("progress.failed-save-not-published", tl)
    assert v == F and "end of the run" in msg


def test_pointer_never_observed_is_retest(judge: Judge) -> None:
    tl = baseline().drop("harness", "ckpt_latest")
    assert judge.one("progress.failed-save-not-published", tl)[0] == R


# --- progress.damaged-checkpoint-refused ---------------------------------------------------


def _damaged(tl: TL, *, damaged: str = "ckpt-4") -> TL:
    return tl.edit(
        "fault",
        "injected",
        lambda r: True,
        fault="corrupt-checkpoint",
        ckpt_id=damaged,
        damage="flip-bytes",
    )


def test_damaged_checkpoint_refused_and_said_passes(judge: Judge) -> None:
    tl = _damaged(restart(resume=2)).edit(
        "probe",
        "ckpt_load",
        lambda r: r["pid"] in NEW,
        rejected=[{"id": "ckpt-4", "reason": "state.pt sha256 1a... != manifest 2b..."}],
    )
    v, msg = judge.one("progress.damaged-checkpoint-refused", tl)
    assert v == P
    assert "damaged ckpt-4 (flip-bytes) was refused" in msg and "fell back to ckpt-2" in msg
    # and the resume point is the newest VALID checkpoint: ckpt-2, not the damaged ckpt-4
    assert judge.verdicts("progress.resume-point", tl) == [P]


def test_loading_the_damaged_checkpoint_fails(judge: Judge) -> None:
    tl = _damaged(restart(resume=4, verified=False))
    v, msg = judge.one("progress.damaged-checkpoint-refused", tl)
    assert v == F and "loaded ckpt-4 after it was damaged" in msg
    assert judge.verdicts("progress.resume-point", tl) == [F]
    assert judge.verdicts("progress.checkpoint-verified", tl) == [F]


def test_silent_fallback_fails(judge: Judge) -> None:
    v, msg = judge.one("progress.damaged-checkpoint-refused", _damaged(restart(resume=2)))
    assert v == F and "silent" in msg


def test_damage_never_put_to_the_test_is_retest(judge: Judge) -> None:
    tl = _damaged(restart(resume=2)).drop("probe", "ckpt_load")
    assert judge.one("progress.damaged-checkpoint-refused", tl)[0] == R


def test_no_damage_passes(judge: Judge) -> None:
    assert judge.one("progress.damaged-checkpoint-refused", restart())[0] == P


# --- expectation.outage-overlapped-save ------------------------------------------------------


def test_outage_overlapping_a_failed_save_passes(judge: Judge) -> None:
    v, msg = judge.one("expectation.outage-overlapped-save", _outage(baseline()))
    assert v == P
    assert "1 save(s) (step 4) failed during the outage: OSError: [Errno 30] Read-only" in msg


def test_outage_that_missed_every_save_is_retest(judge: Judge) -> None:
    v, msg = judge.one("expectation.outage-overlapped-save", _outage(baseline(), failed_step=None))
    assert v == R and "retime the trigger" in msg


def test_save_completing_inside_the_outage_is_retest(judge: Judge) -> None:
    tl = _outage(baseline()).save(0, OLD[0], "ckpt-4", 4, 4.6)
    v, msg = judge.one("expectation.outage-overlapped-save", tl)
    assert v == R and "did not take effect" in msg


def _blocked(started: float, t: float = 5.1) -> TL:
    """An outage (3.2 to 4.8 s) in which no save failed, and ckpt-4's save began at
    ``started`` and completed at ``t``, after the outage: a server that hung."""
    tl = _outage(baseline(), failed_step=None).save(0, OLD[0], "ckpt-4", 4, t)
    return tl.edit("probe", "ckpt_save", lambda r: r["id"] == "ckpt-4", duration_s=t - started)


def test_save_blocked_by_the_outage_until_it_ended_passes(judge: Judge) -> None:
    v, msg = judge.one("expectation.outage-overlapped-save", _blocked(started=3.5))
    assert v == P
    assert "save of step 4 started during the outage and blocked until it ended" in msg
    assert "completed 0.31 s after the outage ended, 1.60 s after it began" in msg


def test_save_released_before_the_revert_was_written_counts_as_blocked(judge: Judge) -> None:
    # the end observation (4.79) precedes the revert's action; the save completed at 4.795,
    # after the server was resumed but before the ``reverted`` event (4.8)
    v, msg = judge.one("expectation.outage-overlapped-save", _blocked(started=3.5, t=4.795))
    assert v == P and "blocked until it ended" in msg


def test_save_begun_before_the_outage_is_not_overlap(judge: Judge) -> None:
    v, msg = judge.one("expectation.outage-overlapped-save", _blocked(started=3.0))
    assert v == R and "retime the trigger" in msg


def test_overlap_not_applicable_to_other_faults(judge: Judge) -> None:
    assert judge.one("expectation.outage-overlapped-save", restart())[0] == P


# --- expectation.restart-during-outage -------------------------------------------------------


def _cp(tl: TL, *, probe_at: float | None = 5.6) -> TL:
    tl.edit(
        "fault",
        "injected",
        lambda r: True,
        fault="control-plane-outage",
        duration_s=3.0,
        restart_during={"rank": 1, "after_s": 0.1},
    )
    if probe_at is not None:
        tl.add("fault", "restart_probe", probe_at, pid=OLD[1], rank=1, signal="SIGKILL")
    return tl.add("fault", "reverted", 8.5, fault="control-plane-outage")


def test_restart_probe_inside_the_outage_passes(judge: Judge) -> None:
    v, msg = judge.one("expectation.restart-during-outage", _cp(restart()))
    assert v == P and "0.1 s into the 3.0 s outage" in msg


def test_missing_restart_probe_is_retest(judge: Judge) -> None:
    assert judge.one("expectation.restart-during-outage", _cp(restart(), probe_at=None))[0] == R


def test_failed_restart_probe_is_retest(judge: Judge) -> None:
    tl = _cp(restart(), probe_at=None).add(
        "fault", "restart_probe_failed", 5.6, rank=1, error="no live worker holds rank 1"
    )
    v, msg = judge.one("expectation.restart-during-outage", tl)
    assert v == R and "no live worker" in msg


# --- storage-slow: expectation.slow-storage-save and the pointer watched during saves ----

SLOW = "expectation.slow-storage-save"
PUB = "progress.failed-save-not-published"


def _slow(save_s: float = 1.5, *, for_s: float = 3.0) -> TL:
    """Two ranks at 0.5 s a step, a save every 4 steps (0.1 s each); storage-slow from 4.7
    for ``for_s`` (200 ms per request); the step-12 save starts at 6.55 and takes
    ``save_s``, training waits for it (as the reference workload's synchronous save does)."""
    tl = TL().job("running", 0.0)
    end = 6.55 + save_s
    for rank, pid in enumerate(OLD):
        tl.run_start(rank, pid, A, 0.0).scratch(rank, pid, 0.1)
        tl.steps(pid, rank, range(1, 13), t0=1.0, dt=0.5)
        tl.steps(pid, rank, range(13, 17), t0=end + 0.45, dt=0.5)
    for cid, t, took in (("ckpt-4", 2.6, 0.1), ("ckpt-8", 4.6, 0.1), ("ckpt-12", end, save_s)):
        tl.save(0, OLD[0], cid, int(cid[5:]), t)
        tl.recs[-1]["duration_s"] = took
    tl.inject(4.7, fault="storage-slow", target="the checkpoint directory", at_step=8)
    tl.edit("fault", "injected", lambda r: True, duration_s=for_s, latency_ms=200, ops="write")
    tl.add("fault", "storage_observed", 4.7, when="start", fault="storage-slow",
           latest="ckpt-8", latest_verifies=True, latest_problem=None)  # fmt: skip
    tl.add("fault", "storage_observed", 4.7 + for_s, when="end", fault="storage-slow",
           latest="ckpt-8", latest_verifies=True, latest_problem=None)  # fmt: skip
    return tl.add("fault", "reverted", 4.7 + for_s + 0.01, fault="storage-slow")


def test_slow_save_is_measured_against_usual_and_interval(judge: Judge) -> None:
    found = judge.run(SLOW, _slow(1.5))
    assert [f.verdict for f in found] == [P]
    assert found[0].message == (
        "the save of step 12 started 1.85 s after the slowdown (200 ms per request) began "
        "and took 1.50 s (usually 0.10 s), within the checkpoint interval of 2.0 s; "
        "training was blocked: no step for 2.00 s after step 12 (steps usually 0.50 s "
        "apart); the 1 save(s) under the slowdown cost 1.40 s more training time than usual"
    )
    assert found[0].data["lost_s"] == pytest.approx(1.4)
    assert found[0].data["slowed_steps"] == [12]


def test_a_save_under_way_when_the_slowdown_began_is_said_so(judge: Judge) -> None:
    tl = _slow(1.5).edit("fault", "injected", lambda r: True, mono=6.9, ts=WALL + 6.9)
    v, msg = judge.one(SLOW, tl)
    assert v == P
    assert "was under way when the slowdown (200 ms per request) began, 0.35 s after it" in msg


def test_slow_save_longer_than_the_interval_is_said(judge: Judge) -> None:
    v, msg = judge.one(SLOW, _slow(3.0, for_s=4.0))
    assert v == P
    assert "longer than the checkpoint interval of 2.0 s: at this latency saves cannot" in msg


def test_slow_storage_that_did_not_slow_the_save_retests(judge: Judge) -> None:
    v, msg = judge.one(SLOW, _slow(0.1))
    assert v == R
    assert "took 0.10 s, no longer than usual (0.10 s): the latency did not reach it" in msg


def test_slowdown_without_a_save_retests(judge: Judge) -> None:
    v, msg = judge.one(SLOW, _slow(1.5, for_s=1.0))
    assert (v, msg) == (
        R,
        "no checkpoint save ran during the 1.0 s slowdown: retime the trigger or lengthen "
        "for_s so that it overlaps a save",
    )


def test_save_that_failed_under_mere_latency_fails(judge: Judge) -> None:
    tl = _slow(1.5).add(
        "probe", "ckpt_save_failed", 6.9, rank=0, pid=OLD[0], step=12,
        error="TimeoutError: save took too long", errno=None, duration_s=0.3,
    )  # fmt: skip
    v, msg = judge.one(SLOW, tl)
    assert v == F
    assert msg == (
        "1 save(s) (step 12) failed while the storage only answered late (200 ms per "
        "request): TimeoutError: save took too long"
    )


def test_no_slowdown_passes_as_not_applicable(judge: Judge) -> None:
    assert judge.one(SLOW, baseline()) == (
        P,
        "not a storage slowdown (or it was never injected)",
    )


def _pointer_moved(tl: TL, t: float, verifies: bool | None) -> TL:
    problem = {True: None, False: "state.pt has 0 bytes, manifest.json says 1024",
               None: "ckpt-12: no manifest.json to verify against"}[verifies]  # fmt: skip
    return tl.add("fault", "storage_observed", t, when="during", fault="storage-slow",
                  latest="ckpt-12", latest_verifies=verifies, latest_problem=problem)  # fmt: skip


def test_pointer_to_a_complete_save_not_yet_reported_passes(judge: Judge) -> None:
    """A healthy job publishes, prunes (slowly), then reports: the pointer moves first."""
    v, msg = judge.one(PUB, _pointer_moved(_slow(1.5), 7.9, True))
    assert v == P and "3 observation(s)" in msg


def test_pointer_published_before_the_state_was_written_fails(judge: Judge) -> None:
    v, msg = judge.one(PUB, _pointer_moved(_slow(1.5), 6.9, False))
    assert (v, msg) == (
        F,
        "at 2.20 s after the storage slowdown began (the moment `latest` changed) `latest` "
        "named 'ckpt-12', which no completed save reported: a save was published before it "
        "was durable",
    )


def test_pointer_to_a_save_already_reported_that_does_not_verify_fails(judge: Judge) -> None:
    v, msg = judge.one(PUB, _pointer_moved(_slow(1.5), 8.2, False))
    assert v == F
    assert "`latest` named 'ckpt-12', which does not verify: state.pt has 0 bytes" in msg


def test_pointer_without_manifest_ahead_of_its_save_fails(judge: Judge) -> None:
    v, msg = judge.one(PUB, _pointer_moved(_slow(1.5), 6.9, None))
    assert v == F
    assert "`latest` named 'ckpt-12', which no completed save reported" in msg


def test_outage_look_still_judges_by_the_reported_save(judge: Judge) -> None:
    """The manifest exemption is storage-slow's only: an outage's look keeps the rule."""
    tl = _outage(baseline()).edit(
        "fault", "storage_observed", lambda r: r["when"] == "end", latest="ckpt-4"
    )
    assert judge.one(PUB, tl)[0] == F
