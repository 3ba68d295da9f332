"""Results checks on tiny literal timelines: losses and held-out evaluations against the
baseline (bitwise or within tolerance), the final model digest, the final checkpoint, and
the exported artefact."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from faultdrill.checks import Verdict
from faultdrill.checks.band import K_STEP, measure_band
from faultdrill.checks.results import baseline_band, comparison_mode
from faultdrill.readings.reference import Reference
from faultdrill.timeline import Timeline
from tests.timelines import (
    MODEL_FILE,
    NEW,
    OLD,
    TL,
    Judge,
    baseline,
    eval_at,
    finish,
    first_run,
    loss_at,
    restart,
)

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


def mean_loss(step: int, rank: int) -> float:
    """What a healthy 2-rank run reports as its mean loss at ``step``."""
    return (loss_at(step, 0) + loss_at(step, 1)) / 2


def shrunk(scale: float = 1.0) -> TL:
    """Rank 1's node is lost; incarnation 1 runs on one rank (world size 1, 4 samples per
    step, the same global batch) from ckpt-4, its loss ``scale`` times the 2-rank mean."""
    tl = first_run(TL().job("running", 0.0), 5).inject(5.5)
    tl.run_start(0, NEW[0], "10.0.0.1:29501", 7.0, world_size=1).load(0, NEW[0], "ckpt-4", 4, 7.1)
    tl.steps(NEW[0], 0, range(5, 7), t0=8.0, sps=4, loss=lambda s, r: mean_loss(s, r) * scale)
    tl.save(0, NEW[0], "ckpt-6", 6, 9.5)
    tl.evaluation(0, NEW[0], 6, 9.6, {k: v * scale for k, v in eval_at(6).items()})
    return finish(tl, 6, 10.0, NEW[:1], latest="ckpt-6")


# --- the comparison mode ----------------------------------------------------------------


def test_comparison_mode_is_bitwise_when_world_and_config_are_unchanged(judge: Judge) -> None:
    mode, why = comparison_mode(judge.ctx(restart()))
    assert (mode, why.text()) == (
        "bitwise",
        "world size and config unchanged from the baseline",
    )


def test_comparison_mode_is_tolerance_when_the_world_size_changed(judge: Judge) -> None:
    mode, why = comparison_mode(judge.ctx(shrunk()))
    assert (mode, why.text()) == (
        "tolerance",
        "world size(s) [1, 2] or config differ from the baseline's",
    )


def test_comparison_mode_is_tolerance_when_the_config_changed(judge: Judge) -> None:
    tl = restart().edit("probe", "run_start", lambda r: r["pid"] in NEW, config_digest="cfg-2")
    assert comparison_mode(judge.ctx(tl))[0] == "tolerance"


def test_comparison_mode_follows_the_plan(judge: Judge) -> None:
    bitwise = judge.scenario("pass_criteria", results="bitwise")
    tolerance = judge.scenario("pass_criteria", results="tolerance")
    assert comparison_mode(bitwise.ctx(shrunk()))[0] == "bitwise"
    assert comparison_mode(tolerance.ctx(restart()))[0] == "tolerance"
    assert comparison_mode(judge.replace(reference=None).ctx(restart()))[0] == "tolerance"


# --- results.loss-matches-baseline ------------------------------------------------------

LM = "results.loss-matches-baseline"


def test_loss_matches_bitwise(judge: Judge) -> None:
    [f] = judge.run(LM, restart())
    assert (f.verdict, f.message) == (
        P,
        "all 12 committed (rank, step) losses are bitwise equal to the baseline (world "
        "size and config unchanged from the baseline)",
    )
    assert f.data == {"mode": "bitwise", "compared": 12, "not_reported": 0}


def sparse(tl: TL, every: int = 2) -> TL:
    """The same run, reporting its loss only at steps divisible by ``every`` (the others
    carry ``loss: null``, as ``probe.step(step, None, ids)`` writes)."""
    for r in tl.recs:
        if r["kind"] == "step" and r["step"] % every:
            r["loss"] = None
    return tl


def test_loss_compares_only_the_steps_a_sparse_log_reports(judge: Judge) -> None:
    reference = Reference.from_timeline(sparse(baseline()).build())
    j = dataclasses.replace(judge, reference=reference)
    [f] = j.run(LM, sparse(restart()))
    assert (f.verdict, f.message) == (
        P,
        "all 6 committed (rank, step) losses are bitwise equal to the baseline (world "
        "size and config unchanged from the baseline); 6 step(s) reported no loss in the "
        "drill or the baseline and were not compared",
    )


def test_a_sparse_log_still_catches_a_different_loss(judge: Judge) -> None:
    reference = Reference.from_timeline(sparse(baseline()).build())
    j = dataclasses.replace(judge, reference=reference).scenario("pass_criteria", results="bitwise")
    tl = sparse(restart()).edit(
        "probe", "step", lambda r: r["step"] == 6 and r["rank"] == 1, loss=9.0
    )
    assert j.one(LM, tl)[0] is F


def test_a_reported_nan_is_not_taken_for_a_missing_loss(judge: Judge) -> None:
    tl = restart().edit(
        "probe", "step", lambda r: r["step"] == 6 and r["rank"] == 1, loss=float("nan")
    )
    verdict, msg = judge.scenario("pass_criteria", results="bitwise").one(LM, tl)
    assert verdict is F and "inf vs baseline" in msg


def test_no_loss_reported_anywhere_is_retest(judge: Judge) -> None:
    reference = Reference.from_timeline(sparse(baseline(), every=100).build())
    j = dataclasses.replace(judge, reference=reference)
    verdict, msg = j.one(LM, sparse(restart(), every=100))
    assert verdict is R and "could not be compared" in msg


def test_loss_fails_on_the_smallest_difference_in_bitwise_mode(judge: Judge) -> None:
    off = loss_at(6, 1) + 1e-12
    tl = restart().edit("probe", "step", lambda r: r["pid"] == NEW[1] and r["step"] == 6, loss=off)
    [f] = judge.scenario("pass_criteria", results="bitwise").run(LM, tl)
    assert f.verdict is F
    assert f.message.startswith(
        "1 of 12 committed (rank, step) losses differ from the "
        "baseline (the plan asks for bitwise equality); "
        "first at step 6 rank 1: "
    )
    assert f"{off!r} vs baseline {loss_at(6, 1)!r}" in f.message
    assert f.data == {"first_step": 6, "differing": 1, "mode": "bitwise"}


def test_loss_fails_from_the_first_step_after_a_bad_restore(judge: Judge) -> None:
    # the optimizer state was not restored: every step after the resume differs
    tl = restart().edit("probe", "step", lambda r: r["pid"] in NEW, loss=9.0)
    [f] = judge.scenario("pass_criteria", results="bitwise").run(LM, tl)
    assert f.verdict is F
    assert "4 of 12 committed (rank, step) losses differ" in f.message
    assert "first at step 5 rank 0" in f.message


def test_a_difference_the_baseline_is_too_short_to_judge_is_retest(judge: Judge) -> None:
    # auto: not bitwise, and 6 baseline steps cannot measure a band: "cannot tell"
    tl = restart().edit("probe", "step", lambda r: r["pid"] in NEW, loss=9.0)
    [f] = judge.run(LM, tl)
    assert (f.verdict, f.message) == (
        R,
        "4 of 12 committed (rank, step) losses are not bitwise equal to the baseline's, "
        "first at step 5 (world size and config unchanged from the baseline); the baseline "
        "reports a loss at only 6 step(s), too few to measure its noise (at least 8): the "
        "difference cannot be judged",
    )


def test_loss_ignores_recomputed_steps(judge: Judge) -> None:
    tl = restart().edit("probe", "step", lambda r: r["pid"] in OLD and r["step"] == 5, loss=9.0)
    assert judge.one(LM, tl)[0] is P


def test_loss_fails_on_steps_the_baseline_never_ran(judge: Judge) -> None:
    found = judge.run(LM, restart(last=7))
    assert [(f.verdict, f.message) for f in found] == [
        (F, "2 committed (rank, step) pairs have no baseline counterpart")
    ]


def test_loss_within_tolerance_after_the_world_size_changed(judge: Judge) -> None:
    [f] = judge.run(LM, shrunk(1 + 1e-5))
    assert f.verdict is P
    assert f.message.startswith(
        "mean loss of all 6 common steps within rtol=0.001 of the "
        "baseline (worst relative difference 1.00e-05; world size(s) "
        "[1, 2] or config differ from the baseline's)"
    )
    assert f.data["mode"] == "tolerance"


def test_loss_fails_outside_tolerance_after_the_world_size_changed(judge: Judge) -> None:
    verdict, msg = judge.one(LM, shrunk(1.01))
    assert verdict is F
    assert msg.startswith(
        "2 of 6 steps' mean loss outside rtol=0.001, atol=1e-05 of the "
        "baseline (world size(s) [1, 2] or config differ from the "
        "baseline's); first at step 5: "
    )


def test_loss_tolerance_comes_from_the_plan(judge: Judge) -> None:
    loose = judge.plan.model_copy(
        update={"tolerance": judge.plan.tolerance.model_copy(update={"rtol": 0.05})}
    )
    assert judge.replace(plan=loose).one(LM, shrunk(1.01))[0] is P


def test_loss_bitwise_on_request_fails_a_changed_world(judge: Judge) -> None:
    bitwise = judge.scenario("pass_criteria", results="bitwise")
    verdict, msg = bitwise.one(LM, shrunk())
    assert verdict is F
    assert "(the plan asks for bitwise equality)" in msg


def test_loss_retests_without_baseline(judge: Judge) -> None:
    assert judge.replace(reference=None).one(LM, restart()) == (
        R,
        "no baseline losses to compare with",
    )
    empty = Reference.from_timeline(TL().build())
    assert judge.replace(reference=empty).one(LM, restart())[0] is R


def test_loss_retests_without_committed_progress(judge: Judge) -> None:
    assert judge.one(LM, restart().drop("probe", "step")) == (R, "no incarnation made progress")


# --- the measured band (auto, not bitwise) ------------------------------------------------

#: A fixed draw in [-1, 1] per step (PCG64 is stable across numpy versions): the
#: baseline's batch noise ...
NOISE = np.random.default_rng(7).uniform(-1, 1, 64).round(3).tolist()
#: ... and another draw, the noise a resumed run sees when its random stream is shifted.
OTHER = np.random.default_rng(8).uniform(-1, 1, 64).round(3).tolist()


def noisy_loss(step: int, rank: int, draw: list[float] = NOISE) -> float:
    return 3.0 - 0.05 * step + 0.2 * draw[step] + 0.001 * rank


def noisy(tl: TL, after: Callable[[int, int], float] | None = None) -> TL:
    """The run's losses with batch noise; the steps of incarnation 1 from ``after(step,
    rank)`` when given (a resume that is not bitwise equal)."""
    for r in tl.recs:
        if r["kind"] == "step" and r["src"] == "probe":
            fn = after if after is not None and r["pid"] in NEW else noisy_loss
            r["loss"] = fn(r["step"], r["rank"])
    return tl


def long_restart() -> TL:
    """The stock drill run on to step 20: rank 1 killed after step 5, resumed from 4."""
    return restart(last=20)


@pytest.fixture()
def long_judge(judge: Judge) -> Judge:
    """The judge with a 20-step noisy baseline: enough steps to measure its band."""
    return judge.replace(reference=Reference.from_timeline(noisy(baseline(last=20)).build()))


def shifted(step: int, rank: int) -> float:
    """A healthy resume whose random stream is one draw later: other noise, same curve."""
    return noisy_loss(step, rank, OTHER)


def test_band_is_measured_on_the_baseline(long_judge: Judge) -> None:
    assert long_judge.reference is not None
    band = baseline_band(long_judge.reference)
    assert band is not None and band.steps == 20 and not band.floored
    # the MAD of the first differences of 0.2 x a uniform draw, as a standard deviation
    assert 0.05 < band.sigma < 0.2
    assert band.step_limit == K_STEP * band.sigma


def test_a_bitwise_equal_resume_is_said_bitwise_even_where_a_band_exists(
    long_judge: Judge,
) -> None:
    [f] = long_judge.run(LM, noisy(long_restart()))
    assert f.verdict is P and f.message.startswith("all 40 committed (rank, step) losses are")
    assert f.data["mode"] == "bitwise" and "basis" not in f.data


def test_a_shifted_random_stream_passes_within_the_band(long_judge: Judge) -> None:
    [f] = long_judge.run(LM, noisy(long_restart(), shifted))
    assert f.verdict is P, f.message
    assert f.message.startswith(
        "not bitwise reproducible: 32 of 40 committed (rank, step) losses are not bitwise "
        "equal to the baseline's, first at step 5 (world size and config unchanged from "
        "the baseline), as non-deterministic kernels or a random stream drawn differently "
        "on resume give; judged by the band instead, the mean loss over ranks of all 20 "
        "common steps is within it"
    )
    assert "1.4826 × MAD of the first differences / √2, over 20 steps" in f.message
    assert f.data["basis"] == "band" and f.data["window"] == 10
    assert f.data["worst_mean"] <= f.data["mean_limit"]


def test_a_systematic_offset_fails_the_band(long_judge: Judge) -> None:
    # every step after the resume 0.3 higher: inside the per-step band, not over a window
    [f] = long_judge.run(LM, noisy(long_restart(), lambda s, r: shifted(s, r) + 0.3))
    assert f.verdict is F
    assert f.data["first_step"] == 11 and f.data["worst_step"] < f.data["step_limit"]
    assert f.message.startswith(
        "the mean loss leaves the band measured on the baseline: over steps 2–11 the mean "
        "loss differs from the baseline's by "
    )
    assert "a systematic offset; 0 of 20 step(s) and " in f.message


def test_one_step_jump_fails_the_band(long_judge: Judge) -> None:
    jump = lambda s, r: shifted(s, r) + (3.0 if s == 15 else 0.0)  # noqa: E731
    [f] = long_judge.run(LM, noisy(long_restart(), jump))
    assert f.verdict is F and f.data["first_step"] == 15
    assert "at step 15 the mean loss is" in f.message
    assert "beyond the per-step band" in f.message


def test_a_non_finite_loss_is_outside_any_band(long_judge: Judge) -> None:
    nan = lambda s, r: float("nan") if s == 18 and r == 1 else shifted(s, r)  # noqa: E731
    [f] = long_judge.run(LM, noisy(long_restart(), nan))
    assert f.verdict is F and f.data["first_step"] == 18


def test_the_plan_can_still_demand_bitwise(long_judge: Judge) -> None:
    bitwise = long_judge.scenario("pass_criteria", results="bitwise")
    [f] = bitwise.run(LM, noisy(long_restart(), shifted))
    assert f.verdict is F and "(the plan asks for bitwise equality)" in f.message


def test_the_plan_can_ask_for_the_band_after_the_world_size_changed(long_judge: Judge) -> None:
    band = long_judge.scenario("pass_criteria", results="band")
    tl = noisy(long_restart(), shifted).edit(
        "probe", "run_start", lambda r: r["pid"] in NEW, config_digest="cfg-2"
    )
    assert comparison_mode(band.ctx(tl))[0] == "band"
    assert comparison_mode(long_judge.ctx(tl))[0] == "tolerance"
    [f] = band.run(LM, tl)
    assert f.verdict is P and "the plan asks for a comparison within the band" in f.message
    # bitwise equality is still said where it holds
    [g] = band.run(LM, noisy(long_restart()))
    assert g.verdict is P and "bitwise equal" in g.message


def test_the_band_fails_steps_the_baseline_never_ran(long_judge: Judge) -> None:
    band = long_judge.scenario("pass_criteria", results="band")
    found = band.run(LM, noisy(restart(last=22), shifted))
    assert (found[0].verdict, found[0].message) == (
        F,
        "2 committed step(s) have no baseline loss to compare with, from step 21",
    )
    assert [f.verdict for f in found][1:] == [P]  # the 20 common steps are within the band


def test_the_band_without_a_baseline_is_retest(long_judge: Judge) -> None:
    assert long_judge.replace(reference=None).one(LM, noisy(long_restart(), shifted))[0] is R


def test_the_band_says_its_floor_for_a_noiseless_baseline() -> None:
    steps = np.arange(1, 21)
    band = measure_band(steps, 3.0 - 0.05 * steps)  # a straight line: no noise at all
    assert band is not None and band.floored and band.sigma == pytest.approx(2.475e-6)
    assert measure_band(steps[:7], 3.0 - 0.05 * steps[:7]) is None


# --- results.final-model-digest ---------------------------------------------------------

FD = "results.final-model-digest"


def digest(tl: TL, value: str | None, rank: int | None = None) -> TL:
    return tl.edit(
        "probe", "run_end", lambda r: rank is None or r["rank"] == rank, model_digest=value
    )


def test_final_digest_matches_the_baseline(judge: Judge) -> None:
    assert judge.one(FD, restart()) == (P, "final model identical to the baseline's (model-1...)")


def test_final_digest_fails_when_it_differs(judge: Judge) -> None:
    [f] = judge.run(FD, digest(restart(), "model-2"))
    assert (f.verdict, f.message) == (
        F,
        "final model model-2... differs from the baseline's model-1...",
    )
    assert f.data == {"got": "model-2", "baseline": "model-1"}


def test_final_digest_fails_when_ranks_disagree(judge: Judge) -> None:
    assert judge.one(FD, digest(restart(), "model-2", rank=1)) == (
        F,
        "ranks ended with different models: ['model-1', 'model-2']",
    )


def test_final_digest_does_not_apply_in_tolerance_mode(judge: Judge) -> None:
    verdict, msg = judge.one(FD, shrunk())
    assert verdict is P
    assert msg.startswith("not applicable: world size(s) [1, 2] or config differ")


def test_final_digest_does_not_apply_when_the_job_is_expected_to_fail(judge: Judge) -> None:
    fails = judge.scenario("expected", job="fails")
    assert fails.one(FD, digest(restart(), "model-2")) == (
        P,
        "not applicable: the plan expects this job to fail",
    )


def test_final_digest_retests_without_a_baseline_digest(judge: Judge) -> None:
    ref = Reference.from_timeline(digest(baseline(), "").build())
    assert judge.replace(reference=ref).one(FD, restart()) == (
        R,
        "the baseline recorded no final model digest",
    )


def test_final_digest_retests_without_a_baseline(judge: Judge) -> None:
    assert judge.replace(reference=None).one(FD, restart()) == (
        R,
        "no baseline to compare the final model with",
    )
    empty = Reference.from_timeline(TL().build())
    assert judge.replace(reference=empty).one(FD, restart())[0] is R


def test_final_digest_retests_without_a_run_digest(judge: Judge) -> None:
    assert judge.one(FD, restart().drop("probe", "run_end")) == (
        R,
        "the run recorded no final model digest (no run_end)",
    )
    assert judge.one(FD, digest(restart(), ""))[0] is R


def test_final_digest_retests_when_run_end_carries_no_digest(judge: Judge) -> None:
    # a run_end without model_digest (a script not using the probe's run_end) is no evidence
    tl = restart()
    for r in tl.recs:
        if r["kind"] == "run_end":
            del r["model_digest"]
    assert judge.one(FD, tl)[0] is R
    assert judge.one(FD, digest(restart(), None, rank=1))[0] is P


# --- results.final-checkpoint-verifies --------------------------------------------------

FC = "results.final-checkpoint-verifies"


def inventory(latest: str | None, bad: dict[str, str] | None = None) -> TL:
    tl = restart().drop("harness", "ckpt_inventory").drop("harness", "ckpt_latest")
    return tl.inventory(11.6, latest, bad=bad)


def test_final_checkpoint_verifies(judge: Judge) -> None:
    assert judge.one(FC, restart()) == (
        P,
        "latest checkpoint ckpt-6 (step 6) verifies against its manifest",
    )


def test_final_checkpoint_fails_when_the_latest_does_not_verify(judge: Judge) -> None:
    [f] = judge.run(FC, inventory("ckpt-6", {"ckpt-6": "sha256 differs from the one recorded"}))
    assert (f.verdict, f.message) == (
        F,
        "latest checkpoint ckpt-6 does not verify: sha256 differs from the one recorded",
    )
    assert f.data == {"id": "ckpt-6"}


def test_final_checkpoint_only_judges_the_latest(judge: Judge) -> None:
    assert judge.one(FC, inventory("ckpt-6", {"ckpt-2": "missing"}))[0] is P


def test_final_checkpoint_fails_on_a_broken_latest_pointer(judge: Judge) -> None:
    assert judge.one(FC, inventory("ckpt-9")) == (
        F,
        "the latest pointer does not lead to a checkpoint: latest names 'ckpt-9', which "
        "no save reported",
    )


def test_final_checkpoint_retests_without_inventory(judge: Judge) -> None:
    tl = restart().drop("harness", "ckpt_inventory")
    assert judge.one(FC, tl) == (R, "no checkpoint inventory was taken")


def test_final_checkpoint_retests_without_a_pointer_record(judge: Judge) -> None:
    tl = inventory(None).drop("harness", "ckpt_latest")
    assert judge.one(FC, tl) == (R, "no latest pointer state was recorded")


def test_shrunk_timeline_is_what_it_claims() -> None:
    tl: Timeline = shrunk().build()
    assert [i.world_size for i in tl.incarnations] == [2, 1]
    assert tl.incarnations[1].first_step == 5


# --- results.evaluation-matches-baseline ------------------------------------------------

EV = "results.evaluation-matches-baseline"


def stale_eval(tl: TL, step: int = 6, as_of: int = 4) -> TL:
    """The evaluation at ``step`` of incarnation 1 reports the model as loaded (``as_of``):
    the ``stale-eval-model`` bug (training and everything else unchanged)."""
    return tl.edit(
        "probe",
        "evaluation",
        lambda r: r["pid"] in NEW and r["step"] == step,
        metrics=eval_at(as_of),
    )


def test_evaluation_matches_bitwise(judge: Judge) -> None:
    [f] = judge.run(EV, restart())
    assert (f.verdict, f.message) == (
        P,
        "all 12 evaluated value(s) of committed progress (steps 2, 4, 6) bitwise equal to "
        "the baseline's (world size and config unchanged from the baseline)",
    )
    assert f.data == {"mode": "bitwise", "basis": "bitwise", "compared": 12, "steps": [2, 4, 6]}


def test_evaluation_fails_when_the_restart_evaluates_a_stale_model(judge: Judge) -> None:
    tl = stale_eval(restart())
    assert judge.verdicts(LM, tl) == [P]  # training itself is fine: only evaluation is wrong
    [f] = judge.run(EV, tl)
    assert (f.verdict, f.message) == (
        F,
        "4 of 12 evaluated value(s) differ from the baseline (bitwise; world size and config "
        "unchanged from the baseline); first at step 6 (heldout accuracy, rank 0): "
        "0.2 vs baseline 0.30000000000000004",
    )
    assert f.data == {"first_step": 6, "differing": 4, "mode": "bitwise"}


def test_evaluation_fails_on_the_smallest_difference_in_bitwise_mode(judge: Judge) -> None:
    tl = restart().edit(
        "probe",
        "evaluation",
        lambda r: r["pid"] == NEW[1],
        metrics={"loss": eval_at(6)["loss"] + 1e-15, "accuracy": eval_at(6)["accuracy"]},
    )
    assert judge.one(EV, tl)[0] is F


def test_evaluation_ignores_recomputed_steps(judge: Judge) -> None:
    # incarnation 0 evaluated at step 4 after its save; were it wrong, it would not count
    # if the chain did not use it: drop the checkpoint at 4 so incarnation 1 loads ckpt-2
    tl = restart(resume=2).edit(
        "probe", "evaluation", lambda r: r["pid"] in OLD and r["step"] == 4, metrics={"loss": 9.0}
    )
    [f] = judge.run(EV, tl)
    assert f.verdict is P and f.data["steps"] == [2, 4, 6]


def test_evaluation_within_tolerance_after_the_world_size_changed(judge: Judge) -> None:
    [f] = judge.run(EV, shrunk(1 + 1e-5))
    assert f.verdict is P
    assert f.message.startswith("all 6 evaluated value(s) of committed progress (steps 2, 4, 6)")
    assert "within tolerance of the baseline's" in f.message


def test_evaluation_fails_outside_tolerance_after_the_world_size_changed(judge: Judge) -> None:
    verdict, msg = judge.one(EV, shrunk(1.01))
    assert verdict is F
    assert msg.startswith(
        "2 of 6 evaluated value(s) differ from the baseline (within rtol=0.001, atol=1e-05; "
        "world size(s) [1, 2] or config differ from the baseline's); first at step 6 "
        "(heldout accuracy): "
    )


def test_evaluation_retests_when_the_job_reports_none(judge: Judge) -> None:
    assert judge.one(EV, restart().drop("probe", "evaluation")) == (
        R,
        "the job reported no evaluation of its committed progress: its results rest on the "
        "training loss alone",
    )


def test_evaluation_retests_without_a_baseline_evaluation(judge: Judge) -> None:
    ref = Reference.from_timeline(baseline().drop("probe", "evaluation").build())
    assert judge.replace(reference=ref).one(EV, restart()) == (
        R,
        "the job evaluated here but not in its baseline: nothing to compare with",
    )


def test_a_job_that_never_evaluates_is_outside_the_check_and_says_so(judge: Judge) -> None:
    ref = Reference.from_timeline(baseline().drop("probe", "evaluation").build())
    [f] = judge.replace(reference=ref).run(EV, restart().drop("probe", "evaluation"))
    assert f.verdict is P and "stay to be verified" in f.message
    assert f.data == {"to_be_verified": "held-out evaluation"}


def test_a_job_that_never_exports_is_outside_the_artifact_check(judge: Judge) -> None:
    ref = Reference.from_timeline(baseline().drop("probe", "artifact").build())
    tl = restart().drop("probe", "artifact").drop("harness", "artifact_verified")
    [f] = judge.replace(reference=ref).run("results.artifact-intact", tl)
    assert f.verdict is P and f.data == {"to_be_verified": "exported artefact"}
    # a job that exported in its baseline but not after recovery is still retest
    assert judge.run("results.artifact-intact", tl)[0].verdict is R


def test_evaluation_retests_when_the_final_evaluation_is_missing(judge: Judge) -> None:
    tl = restart().drop("probe", "evaluation", lambda r: r["step"] == 6)
    assert judge.one(EV, tl) == (
        R,
        "8 evaluated value(s) equal the baseline's, but the final evaluation (step 6) is "
        "missing: the end result was not evaluated",
    )


def test_evaluation_retests_with_nothing_in_common(judge: Judge) -> None:
    tl = restart().edit("probe", "evaluation", lambda r: True, split="validation")
    verdict, msg = judge.one(EV, tl)
    assert verdict is R
    assert msg.startswith("no evaluation at a step, split and metric the baseline also")


def test_evaluation_does_not_apply_when_the_job_is_expected_to_fail(judge: Judge) -> None:
    fails = judge.scenario("expected", job="fails")
    assert fails.one(EV, stale_eval(restart()))[0] is P


def test_evaluation_reported_nan_equals_nan_only() -> None:
    from faultdrill.checks.results import _same

    assert _same(float("nan"), float("nan")) and not _same(float("nan"), 1.0)


def test_final_digest_is_not_compared_when_the_run_is_not_bitwise_reproducible(
    long_judge: Judge,
) -> None:
    tl = digest(noisy(long_restart(), shifted), "d-other")
    [f] = long_judge.run(FD, tl)
    assert f.verdict is P
    assert f.message.startswith(
        "not compared: the run is not bitwise reproducible (32 of 40 committed (rank, step) "
        "losses are not bitwise equal to the baseline's, first at step 5"
    )
    assert f.message.endswith("results judged by band")
    # where the losses are bitwise equal, the digest must still be identical
    assert long_judge.one(FD, digest(noisy(long_restart()), "d-other"))[0] is F
    # and a plan that demands bitwise compares it whatever the losses
    bitwise = long_judge.scenario("pass_criteria", results="bitwise")
    assert bitwise.one(FD, tl)[0] is F


def evaluated(tl: TL, scale: float) -> TL:
    """Incarnation 1's evaluations, each metric ``scale`` times the healthy value."""
    for r in tl.recs:
        if r["kind"] == "evaluation" and r["pid"] in NEW:
            r["metrics"] = {k: v * scale for k, v in eval_at(r["step"]).items()}
    return tl


def test_evaluation_within_the_band_when_the_run_is_not_bitwise(long_judge: Judge) -> None:
    [f] = long_judge.run(EV, evaluated(noisy(long_restart(), shifted), 1.003))
    assert f.verdict is P, f.message
    assert f.message.startswith(
        "all 20 evaluated value(s) of committed progress (steps 2, 4, 6, 8, 10, 12, 14, 16, "
        "18, 20) within the band of the baseline's (the mean over ranks within ±1."
    )
    assert "standard error of a 10-step mean loss" in f.message
    assert "not bitwise: 32 of 40 committed (rank, step) losses" in f.message
    assert f.data["basis"] == "band"


def test_a_stale_evaluation_fails_the_band(long_judge: Judge) -> None:
    tl = stale_eval(noisy(long_restart(), shifted), step=20, as_of=14)
    [f] = long_judge.run(EV, tl)
    assert f.verdict is F
    assert f.message.startswith("2 of 20 evaluated value(s) differ from the baseline (the mean")
    assert "first at step 20 (heldout accuracy): 0.7000000000000001 vs baseline 1.0" in f.message


def test_evaluation_differing_while_losses_are_bitwise_fails_bitwise(long_judge: Judge) -> None:
    # a bitwise reproducible run evaluated differently: no band excuses that
    [f] = long_judge.run(EV, evaluated(noisy(long_restart()), 1.003))
    assert f.verdict is F and "(bitwise; world size and config unchanged" in f.message


def test_evaluation_band_on_a_baseline_too_short_is_retest(judge: Judge) -> None:
    tl = evaluated(restart().edit("probe", "step", lambda r: r["pid"] in NEW, loss=2.0), 1.003)
    verdict, msg = judge.one(EV, tl)
    assert verdict is R and "too few to measure its noise" in msg


# --- results.artifact-intact ------------------------------------------------------------

AI = "results.artifact-intact"


def test_artifact_intact(judge: Judge) -> None:
    assert judge.one(AI, restart()) == (
        P,
        "final-model intact (sha-model-file-1..., 4096 bytes)",
    )


def test_artifact_fails_when_the_file_differs(judge: Judge) -> None:
    tl = restart().drop("harness", "artifact_verified").artifact_verified(11.65, sha256="other")
    [f] = judge.run(AI, tl)
    assert (f.verdict, f.message) == (
        F,
        f"final-model {MODEL_FILE} differs from what the job exported: sha256 other... on "
        "disk, sha-model-file-1... reported",
    )


def test_artifact_fails_when_the_file_is_gone(judge: Judge) -> None:
    tl = (
        restart()
        .drop("harness", "artifact_verified")
        .artifact_verified(11.65, sha256=None, problem="no such file")
    )
    assert judge.one(AI, tl) == (
        F,
        f"final-model {MODEL_FILE} is gone after the run: no such file",
    )


def test_artifact_retests_when_the_job_exported_nothing(judge: Judge) -> None:
    assert judge.one(AI, restart().drop("probe", "artifact")) == (
        R,
        "the job's final generation reported no exported artefact (probe.artifact): its "
        "final model file was not verified",
    )


def test_artifact_retests_when_the_harness_did_not_hash_it(judge: Judge) -> None:
    assert judge.one(AI, restart().drop("harness", "artifact_verified")) == (
        R,
        f"final-model {MODEL_FILE} was not hashed again after the run",
    )


def test_artifact_of_an_old_generation_does_not_count(judge: Judge) -> None:
    tl = restart().edit("probe", "artifact", lambda r: True, pid=OLD[0])
    assert judge.one(AI, tl)[0] is R


def test_artifact_does_not_apply_when_the_job_is_expected_to_fail(judge: Judge) -> None:
    fails = judge.scenario("expected", job="fails")
    assert fails.one(AI, restart().drop("probe", "artifact"))[0] is P
