"""Progress checks on tiny literal timelines, plus two properties: record order does not
matter, and the sample ledger tells a healthy resume from a replayed or skipped one."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultdrill.checks import CHECKS, Verdict, progress
from faultdrill.readings.reference import Reference
from faultdrill.timeline import Timeline
from tests.timelines import NEW, OLD, TL, B, Judge, baseline, finish, first_run, ids, restart

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


def corrupt(tl: TL, ckpt_id: str, t: float = 5.2) -> TL:
    """A fault that damaged ``ckpt_id`` before the restart."""
    return tl.inject(t, fault="corrupt-checkpoint", target=ckpt_id, ckpt_id=ckpt_id)


# --- progress.resume-point ------------------------------------------------------------

RP = "progress.resume-point"


def test_resume_point_passes_when_resuming_from_the_newest_checkpoint(judge: Judge) -> None:
    assert judge.one(RP, restart()) == (
        P,
        "incarnation 1 resumed from ckpt-4 (step 4), the newest valid checkpoint",
    )


def test_resume_point_passes_without_restart(judge: Judge) -> None:
    assert judge.one(RP, baseline()) == (
        P,
        "no restart happened: the run progressed in one incarnation",
    )


def test_resume_point_fails_on_restart_from_zero_while_a_checkpoint_existed(judge: Judge) -> None:
    assert judge.one(RP, restart(resume=None)) == (
        F,
        "incarnation 1 resumed from step 0 (scratch) although valid checkpoint ckpt-4 at "
        "step 4 existed",
    )


def test_resume_point_fails_on_an_older_checkpoint_than_the_newest_valid(judge: Judge) -> None:
    verdict, msg = judge.one(RP, restart(resume=2))
    assert verdict is F
    assert "resumed from step 2 (ckpt-2) although valid checkpoint ckpt-4 at step 4" in msg


@pytest.mark.parametrize("verified", [False, True])
def test_resume_point_fails_on_a_checkpoint_damaged_by_the_fault(
    judge: Judge, verified: bool
) -> None:
    verdict, msg = judge.one(RP, corrupt(restart(verified=verified), "ckpt-4"))
    assert verdict is F
    assert "resumed from step 4 (ckpt-4), newer than the newest valid checkpoint (step 2)" in msg


def test_resume_point_passes_when_the_damaged_checkpoint_was_skipped(judge: Judge) -> None:
    assert judge.one(RP, corrupt(restart(resume=2), "ckpt-4"))[0] is P


def test_resume_point_ignores_damage_done_after_the_restart(judge: Judge) -> None:
    assert judge.one(RP, corrupt(restart(), "ckpt-4", t=9.9))[0] is P


def test_resume_point_fails_on_a_checkpoint_the_inventory_finds_broken(judge: Judge) -> None:
    tl = restart(verified=False).drop("harness", "ckpt_inventory").drop("harness", "ckpt_latest")
    tl.inventory(11.0, "ckpt-6", bad={"ckpt-4": "sha256 differs"})
    verdict, msg = judge.one(RP, tl)
    assert verdict is F
    assert "newer than the newest valid checkpoint (step 2)" in msg


def test_resume_point_trusts_a_verified_load_over_later_damage(judge: Judge) -> None:
    # ckpt-4 verified when incarnation 1 loaded it; it was damaged afterwards, so the
    # inventory taken at the end says it no longer verifies. The resume was still right.
    tl = restart().drop("harness", "ckpt_inventory").drop("harness", "ckpt_latest")
    tl.inventory(11.0, "ckpt-6", bad={"ckpt-4": "sha256 differs"})
    assert judge.one(RP, tl)[0] is P


def test_resume_point_fails_on_an_unknown_checkpoint(judge: Judge) -> None:
    tl = restart().edit("probe", "ckpt_load", lambda r: True, id="ckpt-9", step=9)
    verdict, msg = judge.one(RP, tl)
    assert verdict is F
    assert "invalid or unknown checkpoint was loaded" in msg


def test_resume_point_fails_when_ranks_load_different_checkpoints(judge: Judge) -> None:
    tl = restart().edit("probe", "ckpt_load", lambda r: r["rank"] == 1, id="ckpt-2", step=2)
    assert judge.one(RP, tl) == (
        F,
        "ranks of incarnation 1 resumed from different checkpoints: ['ckpt-2', 'ckpt-4']",
    )


def test_resume_point_fails_when_one_rank_starts_from_scratch(judge: Judge) -> None:
    tl = restart().drop("probe", "ckpt_load", lambda r: r["rank"] == 1).scratch(1, NEW[1], 7.1)
    verdict, msg = judge.one(RP, tl)
    assert verdict is F
    assert "resumed from different checkpoints" in msg


def test_resume_point_retests_without_a_load_decision(judge: Judge) -> None:
    verdict, msg = judge.one(RP, restart().drop("probe", "ckpt_load"))
    assert verdict is R
    assert "incarnation 1 recorded no checkpoint load decision" in msg


def test_resume_point_retests_without_replicas(judge: Judge) -> None:
    assert judge.one(RP, TL().job("failed", 1.0)) == (
        R,
        "no replica announced itself (no run_start events)",
    )


# --- progress.no-restart-from-zero ------------------------------------------------------

NZ = "progress.no-restart-from-zero"


def test_no_restart_from_zero_passes_on_a_resume(judge: Judge) -> None:
    assert judge.one(NZ, restart()) == (
        P,
        "1 restart(s), none from zero while a valid checkpoint existed",
    )


def test_no_restart_from_zero_fails_when_progress_was_thrown_away(judge: Judge) -> None:
    assert judge.one(NZ, restart(resume=None)) == (
        F,
        "incarnation 1 restarted from step 1 although checkpoint ckpt-4 (step 4) was "
        "valid: all progress was thrown away",
    )


def test_no_restart_from_zero_fails_when_a_loaded_checkpoint_is_ignored(judge: Judge) -> None:
    verdict, msg = judge.one(NZ, restart(first=1))
    assert verdict is F
    assert "restarted from step 1 although checkpoint ckpt-4" in msg


def test_no_restart_from_zero_passes_when_no_checkpoint_existed(judge: Judge) -> None:
    assert judge.one(NZ, restart(kill_after=1, resume=None))[0] is P


def test_no_restart_from_zero_passes_when_every_checkpoint_was_damaged(judge: Judge) -> None:
    tl = corrupt(corrupt(restart(resume=None), "ckpt-2"), "ckpt-4")
    assert judge.one(NZ, tl)[0] is P


def test_no_restart_from_zero_retests_without_replicas(judge: Judge) -> None:
    assert judge.one(NZ, TL()) == (R, "no replica announced itself")


# --- progress.no-jump -------------------------------------------------------------------

NJ = "progress.no-jump"


def test_no_jump_passes_on_contiguous_steps(judge: Judge) -> None:
    assert judge.one(NJ, restart()) == (
        P,
        "steps are contiguous in every replica and every restart continued at the step "
        "after its checkpoint",
    )


def test_no_jump_fails_when_the_first_step_after_resume_jumps_forward(judge: Judge) -> None:
    assert judge.one(NJ, restart(first=6)) == (
        F,
        "incarnation 1 loaded step 4 but its first step was 6 (jumped forward)",
    )


def test_no_jump_fails_when_the_first_step_after_resume_goes_back(judge: Judge) -> None:
    verdict, msg = judge.one(NJ, restart(first=3))
    assert verdict is F
    assert "loaded step 4 but its first step was 3 (went back)" in msg


def test_no_jump_fails_on_a_gap_inside_a_replica(judge: Judge) -> None:
    tl = baseline().drop("probe", "step", lambda r: r["pid"] == OLD[0] and r["step"] == 3)
    assert judge.one(NJ, tl) == (
        F,
        "1 step discontinuities inside a replica; first: pid 100 went from step 2 to 4",
    )


def test_no_jump_fails_on_a_repeated_step_inside_a_replica(judge: Judge) -> None:
    tl = baseline().step(OLD[1], 1, 6, 6.5, [ids(6, 1)])
    verdict, msg = judge.one(NJ, tl)
    assert verdict is F
    assert "pid 101 went from step 6 to 6" in msg


def test_no_jump_retests_without_steps(judge: Judge) -> None:
    assert judge.one(NJ, baseline().drop("probe", "step")) == (R, "no step events were recorded")


@pytest.mark.parametrize("block", [1, 3, 64, 1 << 21])
def test_no_jump_read_by_blocks_equals_one_sort_of_every_row(
    block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The block-wise scan (each process's last step carried between blocks) counts the
    same jumps and names the same first one as sorting every row by (pid, time), on 300
    random tables: interleaved processes, gaps, repeats, steps going back, pids far apart."""
    monkeypatch.setattr(progress, "_JUMP_BLOCK", block)
    rng = np.random.default_rng(20261204)
    for case in range(300):
        n = int(rng.integers(1, 200))
        pids = rng.choice([7, 9, 100, 101, 4000, 65000][: int(rng.integers(1, 7))], n)
        pid = pids.astype(np.int32)
        step = np.zeros(n, dtype=np.int64)
        for p in np.unique(pid):
            rows = np.flatnonzero(pid == p)
            inc = rng.choice([1, 1, 1, 1, 0, 2, -3], rows.size)
            step[rows] = int(rng.integers(0, 5)) + np.cumsum(inc)
        got = progress.step_jumps(pid, step)
        assert got == progress._step_jumps_sorted(pid, step), case


def test_no_jump_by_blocks_with_more_processes_than_int16_holds() -> None:
    """2 x 16,384 ranks' processes and more: the codes are sorted as 16-bit unsigned (still
    radix), and one planted jump is counted and named as sorting every row names it."""
    n = 40_000
    pid = np.tile(np.arange(10, 10 + n, dtype=np.int32), 3)  # step-major: 3 steps each
    step = np.repeat(np.arange(1, 4, dtype=np.int64), n)
    step[2 * n + 39_000] = 5  # pid 39,010 goes from step 2 to 5
    assert progress.step_jumps(pid, step) == (1, (39_010, 2, 5))
    assert progress.step_jumps(pid, step) == progress._step_jumps_sorted(pid, step)


@pytest.mark.parametrize("block", [1, 5, 1 << 21])
def test_the_ledger_read_by_slots_equals_sorting_the_ranges(
    block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the block-wise union by slots answers, it is what merging the sorted ranges
    gives; it gives up (None) on every replay, mixed width or misaligned range, which the
    sorting path then names. 300 random tables."""
    from faultdrill.intervals import merge
    from faultdrill.timeline import StepTable

    monkeypatch.setattr(progress, "_LEDGER_BLOCK", block)
    rng = np.random.default_rng(20261205)
    answered = gave_up = 0
    for case in range(300):
        n, width = int(rng.integers(1, 60)), int(rng.choice([1, 4, 64]))
        slot = rng.permutation(int(n * rng.choice([1, 1, 2, 30])))[:n]
        if rng.random() < 0.2:
            slot[int(rng.integers(0, n))] = slot[0]  # a replay
        start = 1000 + slot.astype(np.int64) * width
        end = start + width
        if rng.random() < 0.1:
            end[int(rng.integers(0, n))] += 1  # one range wider
        if rng.random() < 0.1:
            start[int(rng.integers(0, n))] += 1  # one misaligned
        zeros = np.zeros(n)
        st = StepTable.from_columns(zeros, zeros, zeros, zeros, zeros, rng_start=start, rng_end=end)
        rows = rng.random(n) < 0.8
        got = progress.aligned_union(st, rows)
        s, e = start[rows], end[rows]
        ms, me = merge(s, e)
        exact = len(set(slot[rows])) == rows.sum() and bool((e - s == width).all())
        exact = exact and bool(((s - s.min()) % width == 0).all()) if s.size else False
        if got is None:
            gave_up += 1
            assert not exact or n * 30 > 4 * rows.sum() + 65536, case
            continue
        answered += 1
        assert exact, case
        assert got[0] == int((e - s).sum()), case
        assert got[1].tolist() == ms.tolist() and got[2].tolist() == me.tolist(), case
    assert answered > 100 and gave_up > 30


# --- progress.checkpoint-verified -------------------------------------------------------

CV = "progress.checkpoint-verified"


def test_checkpoint_verified_passes_on_verified_loads(judge: Judge) -> None:
    assert judge.one(CV, restart()) == (P, "2 load(s), all verified")


def test_checkpoint_verified_passes_when_nothing_was_loaded(judge: Judge) -> None:
    assert judge.one(CV, baseline()) == (P, "no checkpoint was loaded")


def test_checkpoint_verified_names_the_rejected_checkpoints(judge: Judge) -> None:
    tl = corrupt(restart(resume=2), "ckpt-4").edit(
        "probe", "ckpt_load", lambda r: True, rejected=[{"id": "ckpt-4", "reason": "sha256"}]
    )
    assert judge.one(CV, tl) == (P, "2 load(s), all verified; rejected as invalid: ckpt-4")


def test_checkpoint_verified_fails_on_a_load_without_verification(judge: Judge) -> None:
    assert judge.one(CV, restart(verified=False)) == (
        F,
        "2 load(s) used a checkpoint without verifying it; first: rank 0 loaded ckpt-4 "
        "(step 4) unverified",
    )


def test_checkpoint_verified_fails_when_verification_is_not_reported(judge: Judge) -> None:
    tl = restart()
    for r in tl.recs:
        if r["kind"] == "ckpt_load" and r["rank"] == 1:
            del r["verified"]
    verdict, msg = judge.one(CV, tl)
    assert verdict is F
    assert "1 load(s) used a checkpoint without verifying it; first: rank 1" in msg


# --- progress.sample-ledger -------------------------------------------------------------

SL = "progress.sample-ledger"


def test_sample_ledger_passes_on_a_healthy_resume(judge: Judge) -> None:
    [f] = judge.run(SL, restart())
    assert (f.verdict, f.message) == (
        P,
        "24 committed samples, each consumed exactly once (compared with the baseline); "
        "recomputed separately: steps 5-5 of incarnation 0 (4 samples)",
    )
    assert f.data["committed_steps"] == 6
    assert f.data["recomputed"] == [{"inc": 0, "first": 5, "last": 5}]


def test_sample_ledger_fails_on_replayed_samples(judge: Judge) -> None:
    # the data position was not restored: steps 5-6 read the samples of steps 1-2 again
    assert [(f.verdict, f.message) for f in judge.run(SL, restart(data_from=1))] == [
        (F, "8 sample(s) consumed more than once in committed progress (replayed); first: [0, 2)"),
        (
            F,
            "8 sample(s) the baseline consumed by step 6 were never consumed in committed "
            "progress (skipped): [16, 24)",
        ),
    ]


def test_sample_ledger_fails_on_skipped_samples(judge: Judge) -> None:
    # one batch too far: steps 5-6 read the samples of steps 6-7
    assert [(f.verdict, f.message) for f in judge.run(SL, restart(data_from=6))] == [
        (
            F,
            "4 sample(s) the baseline consumed by step 6 were never consumed in committed "
            "progress (skipped): [16, 20)",
        ),
        (F, "4 sample(s) consumed that the baseline did not consume by step 6: [24, 28)"),
    ]


def test_sample_ledger_fails_on_samples_beyond_the_baseline(judge: Judge) -> None:
    tl = restart().edit(
        "probe",
        "step",
        lambda r: r["pid"] == NEW[0] and r["step"] == 6,
        samples=[ids(6, 0), [100, 102]],
    )
    assert judge.one(SL, tl) == (
        F,
        "2 sample(s) consumed that the baseline did not consume by step 6: [100, 102)",
    )


def test_sample_ledger_ignores_samples_of_recomputed_steps(judge: Judge) -> None:
    tl = restart().edit(
        "probe", "step", lambda r: r["pid"] == OLD[0] and r["step"] == 5, samples=[[0, 2]]
    )
    assert judge.one(SL, tl)[0] is P


def test_sample_ledger_without_baseline_checks_contiguity(judge: Judge) -> None:
    alone = judge.replace(reference=None)
    verdict, msg = alone.one(SL, restart())
    assert verdict is P
    assert "(contiguity only (no baseline to compare with))" in msg
    assert alone.one(SL, restart(data_from=6)) == (
        F,
        "4 sample id(s) skipped inside committed progress: [16, 20)",
    )
    assert alone.verdicts(SL, restart(data_from=1)) == [F]


def test_sample_ledger_retests_without_sample_ids(judge: Judge) -> None:
    tl = restart()
    for r in tl.recs:
        if r["kind"] == "step":
            r["samples"] = []
    assert judge.one(SL, tl) == (R, "steps carry no sample ids; the ledger cannot be checked")


def test_sample_ledger_retests_when_some_committed_steps_carry_no_ids(judge: Judge) -> None:
    # The restarted replicas could not observe their samples: judging only the others would
    # pass whatever the blind steps consumed, and the baseline would call theirs skipped.
    tl = restart().edit("probe", "step", lambda r: r["pid"] in NEW, samples=[])
    tl.edit("probe", "run_start", lambda r: r["pid"] in NEW, sample_ids="not observed: x")
    assert judge.one(SL, tl) == (
        R,
        "sample ids not observable for 4 of 12 committed (rank, step) records: the ledger "
        "cannot be checked for them (the job said: not observed: x)",
    )


def test_sample_ledger_fails_on_a_replay_among_the_observed_steps(judge: Judge) -> None:
    tl = restart(data_from=1).edit(
        "probe", "step", lambda r: r["pid"] == NEW[1] and r["step"] == 6, samples=[]
    )
    assert [(f.verdict, f.message) for f in judge.run(SL, tl)] == [
        (
            F,
            "6 sample(s) consumed more than once among the committed steps that carry ids "
            "(replayed); first: [0, 2)",
        ),
        (
            R,
            "sample ids not observable for 1 of 12 committed (rank, step) records: the "
            "ledger cannot be checked for them",
        ),
    ]


def test_sample_ledger_retests_when_the_chain_breaks(judge: Judge) -> None:
    tl = restart().drop("probe", "ckpt_save", lambda r: r["id"] == "ckpt-4")
    assert judge.one(SL, tl) == (
        R,
        "committed progress cannot be traced: incarnation 1 loaded checkpoint 'ckpt-4', "
        "which no replica of this run reported saving",
    )


def test_sample_ledger_retests_without_progress(judge: Judge) -> None:
    assert judge.one(SL, restart().drop("probe", "step")) == (R, "no incarnation made progress")


# --- progress.steps-attributed ---------------------------------------------------------

SA = "progress.steps-attributed"


def test_steps_attributed_passes_when_every_step_has_an_announced_replica(judge: Judge) -> None:
    # 2 ranks x steps 1-5 of incarnation 0, 2 x steps 5-6 of incarnation 1
    assert judge.one(SA, restart()) == (
        P,
        "all 14 step events came from replicas that announced themselves",
    )


def test_steps_attributed_retests_on_steps_of_an_unannounced_process(judge: Judge) -> None:
    # pid 999 steps (e.g. a replica whose run_start line was lost, or a stray process):
    # no incarnation owns these rows, so every other check silently skips them.
    tl = restart().steps(999, 1, range(3, 5), t0=8.2)
    [f] = judge.run(SA, tl)
    assert (f.verdict, f.message) == (
        R,
        "2 step event(s) from pid(s) [999] that never emitted run_start (steps 3-4): they "
        "belong to no incarnation and no check judged them; find out what ran them",
    )
    assert f.data == {"rows": 2, "pids": [999]}
    # ... and nothing else notices them
    others = {c: judge.verdicts(c, tl) for c in CHECKS if c.startswith("progress.") and c != SA}
    assert all(v == [P] for v in others.values()), others


def test_steps_attributed_retests_without_steps(judge: Judge) -> None:
    assert judge.one(SA, restart().drop("probe", "step")) == (R, "no step events were recorded")


# --- progress.completed -----------------------------------------------------------------

CO = "progress.completed"


def test_completed_passes_at_the_baseline_last_step(judge: Judge) -> None:
    assert judge.one(CO, restart()) == (P, "reached step 6 and ended cleanly")


def test_completed_fails_short_of_the_baseline_last_step(judge: Judge) -> None:
    assert judge.one(CO, restart(last=5)) == (F, "committed progress stopped at step 5 of 6")


def test_completed_fails_without_a_clean_end(judge: Judge) -> None:
    tl = restart().drop("probe", "run_end")
    assert judge.one(CO, tl) == (
        F,
        "committed progress stopped at step 6 of 6; the run did not end cleanly",
    )
    tl = restart().edit("probe", "run_end", lambda r: True, status="error")
    assert judge.one(CO, tl)[0] is F


def test_completed_is_not_required_when_the_job_is_expected_to_fail(judge: Judge) -> None:
    verdict, msg = judge.scenario("expected", job="fails").one(
        CO, restart(last=5).drop("probe", "run_end")
    )
    assert verdict is P
    assert "not required: the plan expects this job to fail (last step reached: 5)" in msg


def test_completed_without_baseline_needs_a_clean_end(judge: Judge) -> None:
    alone = judge.replace(reference=None)
    assert alone.one(CO, restart()) == (
        P,
        "run ended cleanly at step 6 (no baseline to compare the target step with)",
    )
    assert alone.one(CO, restart().drop("probe", "run_end")) == (
        R,
        "no baseline and no clean end: completion unknown",
    )


def test_completed_treats_an_empty_baseline_as_no_baseline(judge: Judge) -> None:
    empty = Reference.from_timeline(TL().build())
    assert judge.replace(reference=empty).one(CO, restart())[0] is P
    assert judge.replace(reference=empty).one(CO, restart().drop("probe", "run_end"))[0] is R


# --- property: the order of the records does not matter ---------------------------------


def _stale(tl: TL) -> TL:
    return tl.drop("sampler", where=lambda r: r["pid"] == OLD[1]).proc(
        OLD[1], 1, 0.05, 9.3, last_seen=9.0, node="n1"
    )


CASES: dict[str, Callable[[], TL]] = {
    "baseline": baseline,
    "healthy restart": restart,
    "scratch restart": lambda: restart(resume=None),
    "older checkpoint": lambda: restart(resume=2),
    "replayed": lambda: restart(data_from=1),
    "skipped": lambda: restart(data_from=6),
    "jump": lambda: restart(first=6),
    "stale replica": lambda: _stale(restart()),
    "split brain": lambda: restart().step(OLD[1], 1, 6, 8.0, [ids(6, 1)]),
    "no master": lambda: restart(master=None).edit(
        "probe", "run_start", lambda r: r["pid"] in OLD, master=None
    ),
    "second restart": lambda: _second_restart(),
}


def _second_restart() -> TL:
    tl = restart(last=6).drop("probe", "run_end").drop("platform", "job_state")
    for rank, pid in enumerate((300, 301)):
        tl.run_start(rank, pid, "10.0.0.1:29502", 12.0).load(rank, pid, "ckpt-6", 6, 12.1)
        tl.steps(pid, rank, range(7, 9), t0=13.0).end(rank, pid, 8, 15.0)
    return tl.job("succeeded", 15.5)


def _findings(judge: Judge, timeline: Timeline) -> dict[str, list[tuple[Verdict, str]]]:
    return {name: [(f.verdict, f.message) for f in judge.run(name, timeline)] for name in CHECKS}


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=st.sampled_from(sorted(CASES)), seed=st.randoms(use_true_random=False))
def test_record_order_changes_no_finding(judge: Judge, case: str, seed: random.Random) -> None:
    # ranks step at the same instants, so shuffling also reorders ties between ranks
    tl = CASES[case]()
    records = tl.records()
    seed.shuffle(records)
    assert _findings(judge, Timeline.from_records(records)) == _findings(judge, tl.build())


def test_the_order_property_covers_failures() -> None:
    """Guard against a vacuous property: the cases include failing timelines."""
    assert len(CASES) >= 10
    assert "replayed" in CASES and "split brain" in CASES


# --- property: the sample ledger -------------------------------------------------------


@st.composite
def drills(draw: st.DrawFn) -> tuple[int, int, int, int, int]:
    """(every, ckpt step before the kill, kill step, last step, samples per rank)."""
    every = draw(st.integers(1, 5))
    ckpt = every * draw(st.integers(1, 4))
    kill = ckpt + draw(st.integers(0, every - 1))
    last = kill + draw(st.integers(1, 6))
    return every, ckpt, kill, last, draw(st.integers(1, 3))


def _ledger_drill(
    every: int, ckpt: int, kill: int, last: int, sps: int, data_from: int | None = None
) -> tuple[TL, TL]:
    """(the drill, its baseline): incarnation 0 dies after ``kill``, 1 resumes at ckpt."""
    base = TL("baseline")
    for rank, pid in enumerate(OLD):
        base.run_start(rank, pid, "b", 0.0).scratch(rank, pid, 0.1)
        base.steps(pid, rank, range(1, last + 1), t0=1.0, sps=sps).end(rank, pid, last, 99.0)
    tl = TL()
    for rank, pid in enumerate(OLD):
        tl.run_start(rank, pid, "m0", 0.0).scratch(rank, pid, 0.1)
        tl.steps(pid, rank, range(1, kill + 1), t0=1.0, sps=sps)
    for s in range(every, kill + 1, every):
        tl.save(0, OLD[0], f"ckpt-{s}", s, s + 0.5)
    t1 = kill + 2.0
    for rank, pid in enumerate(NEW):
        tl.run_start(rank, pid, "m1", t1).load(rank, pid, f"ckpt-{ckpt}", ckpt, t1 + 0.1)
        tl.steps(pid, rank, range(ckpt + 1, last + 1), t0=t1 + 1, sps=sps, data_from=data_from)
        tl.end(rank, pid, last, t1 + last + 2)
    return tl, base


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(d=drills(), shift=st.integers(1, 3))
def test_sample_ledger_tells_healthy_from_replayed_and_skipped(
    judge: Judge, d: tuple[int, int, int, int, int], shift: int
) -> None:
    ckpt = d[1]
    tl, base = _ledger_drill(*d)
    ref = judge.replace(reference=Reference.from_timeline(base.build()))
    alone = judge.replace(reference=None)
    assert ref.verdicts(SL, tl) == [P]
    assert alone.verdicts(SL, tl) == [P]
    if ckpt + 1 - shift >= 1:
        replayed, _ = _ledger_drill(*d, data_from=ckpt + 1 - shift)
        found = ref.run(SL, replayed)
        assert F in [f.verdict for f in found]
        assert any("(replayed)" in f.message for f in found)
        assert alone.verdicts(SL, replayed)[0] is F
    skipped, _ = _ledger_drill(*d, data_from=ckpt + 1 + shift)
    found = ref.run(SL, skipped)
    assert [f.verdict for f in found] == [F, F]
    assert "(skipped)" in found[0].message and "did not consume" in found[1].message
    assert alone.verdicts(SL, skipped) == [F]


def test_a_restart_that_resumes_at_the_final_checkpoint_with_nothing_left_passes(
    judge: Judge,
) -> None:
    # the kill landed after the last step and its checkpoint (step 6): the new incarnation
    # loads ckpt-6, runs no step and ends cleanly; the committed chain ends at step 6
    tl = TL().job("running", 0.0)
    first_run(tl, 6)
    for rank, pid in enumerate(OLD):
        tl.proc(pid, rank, 0.05, 7.5, last_seen=7.2, node=f"n{rank}")
    tl.inject(7.0, at_step=6)
    for rank, pid in enumerate(NEW):
        tl.run_start(rank, pid, B, 8.0).proc(pid, rank, 8.05, 10.5, node=f"n{rank}")
        tl.load(rank, pid, "ckpt-6", 6, 8.1)
    finish(tl, 6, 9.0, NEW, latest="ckpt-6")
    chain, notes = tl.build().committed_chain()
    assert notes == []
    assert [(s.inc, s.first, s.last) for s in chain] == [(0, 1, 6), (1, 7, 6)]
    assert judge.one("progress.completed", tl) == (P, "reached step 6 and ended cleanly")
    assert judge.one("progress.sample-ledger", tl)[0] is P
    assert judge.one("results.loss-matches-baseline", tl)[0] is P


# --- progress.restored-components -------------------------------------------------------

RC = "progress.restored-components"
PARTS = {"model": "m4", "optimizer": "o4", "scheduler": "s4", "rng": "r4"}


def with_parts(tl: TL, restored: dict[int, dict[str, str]], *, saved: dict[str, str] = PARTS) -> TL:
    """``restart()`` plus the digests of ckpt-4's parts: saved by both old ranks, restored
    (as given per rank) right after each new rank's load."""
    for rank, pid in enumerate(OLD):
        tl.add(
            "probe", "ckpt_components", 4.05, rank=rank, pid=pid, id="ckpt-4", step=4,
            phase="saved", components=saved,
        )  # fmt: skip
    for rank, pid in enumerate(NEW):
        if rank in restored:
            tl.add(
                "probe", "ckpt_components", 7.15, rank=rank, pid=pid, id="ckpt-4", step=4,
                phase="restored", components=restored[rank],
            )  # fmt: skip
    return tl


def test_restored_components_passes_when_every_part_comes_back(judge: Judge) -> None:
    tl = with_parts(restart(), {0: PARTS, 1: PARTS})
    [f] = judge.run(RC, tl)
    assert (f.verdict, f.message) == (
        P,
        "2 load(s) restored every saved part as saved "
        "(model, optimizer, rng, scheduler; ranks 0, 1)",
    )
    assert "to_be_verified" not in f.data


def test_restored_components_fails_when_the_optimizer_was_not_restored(judge: Judge) -> None:
    fresh = {**PARTS, "optimizer": "o-fresh"}
    assert judge.one(RC, with_parts(restart(), {0: PARTS, 1: fresh})) == (
        F,
        "incarnation 1, rank 1: optimizer of checkpoint ckpt-4 (step 4) saved but not "
        "restored: the digest after the load differs from the one taken at the save",
    )


def test_restored_components_fails_a_part_missing_after_the_load(judge: Judge) -> None:
    no_rng = {k: v for k, v in PARTS.items() if k != "rng"}
    assert judge.one(RC, with_parts(restart(), {0: no_rng, 1: PARTS})) == (
        F,
        "incarnation 1, rank 0: rng of checkpoint ckpt-4 (step 4) saved, but no digest was "
        "reported after the load although training went on: not shown restored",
    )


def test_restored_components_ignores_parts_never_saved(judge: Judge) -> None:
    """A job that does not save its RNG state reports no rng part: nothing to restore."""
    no_rng = {k: v for k, v in PARTS.items() if k != "rng"}
    tl = with_parts(restart(), {0: PARTS, 1: PARTS}, saved=no_rng)
    assert judge.one(RC, tl)[0] is P


def test_restored_components_says_when_the_job_reports_no_digests(judge: Judge) -> None:
    [f] = judge.run(RC, restart())
    assert (f.verdict, f.data.get("to_be_verified")) == (P, "restored checkpoint components")
    assert "judged on results alone" in f.message


def test_restored_components_without_a_load(judge: Judge) -> None:
    assert judge.one(RC, baseline()) == (P, "no checkpoint was loaded: no restore to compare")


def test_component_digests_that_break_the_event_contract_are_refused() -> None:
    from faultdrill.events import malformed

    good = {"mono": 1.0, "src": "probe", "kind": "ckpt_components", "task": "t", "pid": 1,
            "rank": 0, "id": "ckpt-4", "step": 4, "phase": "saved", "components": {"m": "ab"}}  # fmt: skip
    assert malformed(good) is None
    assert malformed({**good, "components": {"m": 1}}) == "components is not digests"
    assert malformed({**good, "components": ["ab"]}) == "components is not digests"
    assert malformed({k: v for k, v in good.items() if k != "phase"}) == "phase is missing"


def test_the_probe_writes_component_digests_and_refuses_an_unknown_phase(tmp_path: Path) -> None:
    from faultdrill.probe import Probe

    probe = Probe(tmp_path, rank=1)
    probe.components(ckpt_id="ckpt-4", step=4, phase="restored", components={"model": "ab"})
    with pytest.raises(ValueError, match="phase must be"):
        probe.components(ckpt_id="ckpt-4", step=4, phase="loaded", components={})
    [line] = (tmp_path / "probe-rank1.jsonl").read_text().splitlines()
    rec = json.loads(line)
    assert (rec["kind"], rec["phase"], rec["components"]) == (
        "ckpt_components",
        "restored",
        {"model": "ab"},
    )
    assert Timeline.from_records([rec]).of("probe", "ckpt_components")


def test_restored_components_when_no_loading_rank_reported_its_save(judge: Judge) -> None:
    """Digests were reported, but only at the load: nothing to compare with, said so."""
    tl = restart().add(
        "probe", "ckpt_components", 7.15, rank=0, pid=NEW[0], id="ckpt-4", step=4,
        phase="restored", components=PARTS,
    )  # fmt: skip
    [f] = judge.run(RC, tl)
    assert (f.verdict, f.data.get("to_be_verified")) == (P, "restored checkpoint components")
    assert f.message == (
        "2 load(s) of checkpoint(s) ckpt-4 whose parts were not digested at the save: "
        "those restores are judged on results alone"
    )
