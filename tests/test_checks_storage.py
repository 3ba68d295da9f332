"""Round-3 checks on tiny literal timelines: each with a healthy case and a known-bad one."""

from __future__ import annotations

from faultdrill.checks import Verdict
from tests.timelines import NEW, OLD, TL, Judge, baseline, restart

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
