"""Expectation: did the drill happen as planned (fault applied, no stop condition) and did
the job end the way the scenario expected."""

from __future__ import annotations

from faultdrill.checks.api import CheckContext, Finding, Verdict, check
from faultdrill.checks.progress import newest_valid_before
from faultdrill.judge.analysis import injections
from faultdrill.timeline import Incarnation

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


@check("expectation.fault-applied", "expectation")
def fault_applied(ctx: CheckContext) -> list[Finding]:
    """The scenario's fault was injected (its trigger was reached)."""
    name, tl = "expectation.fault-applied", ctx.timeline
    if ctx.item is None:
        return [ctx.finding(name, P, "baseline: no fault planned")]
    inj = injections(tl)
    failed = tl.of("fault", "inject_failed")
    if failed:
        return [ctx.finding(name, R, f"the fault could not be injected: {failed[0].get('error')}")]
    if not inj:
        return [
            ctx.finding(
                name,
                R,
                f"the fault was never injected: trigger "
                f"({ctx.item.trigger.describe()}) not reached",
            )
        ]
    e = inj[0]
    return [
        ctx.finding(
            name, P, f"{e.get('fault')} injected on {e.get('target')} at step {e.get('at_step')}"
        )
    ]


@check("expectation.no-stop-condition", "expectation")
def no_stop_condition(ctx: CheckContext) -> list[Finding]:
    """No stop condition aborted the scenario (an aborted drill proves nothing: retest)."""
    name, tl = "expectation.no-stop-condition", ctx.timeline
    fired = tl.of("harness", "stop_condition")
    if fired:
        e = fired[0]
        return [
            ctx.finding(
                name,
                R,
                f"stop condition '{e.get('condition')}' fired: "
                f"{e.get('detail')}; the scenario was aborted and every fault "
                "reverted",
                condition=e.get("condition"),
            )
        ]
    return [ctx.finding(name, P, "no stop condition fired")]


@check("expectation.job-outcome", "expectation")
def job_outcome(ctx: CheckContext) -> list[Finding]:
    """The job ended as the scenario expected (completed or failed)."""
    name, tl = "expectation.job-outcome", ctx.timeline
    states = tl.of("platform", "job_state")
    ended = [e.get("state") for e in states if e.get("state") in ("succeeded", "failed", "stopped")]
    if not ended:
        return [ctx.finding(name, R, "the platform never reported an end state")]
    final = ended[-1]
    resubmits = tl.of("harness", "operator_action")
    wanted = getattr(getattr(ctx.item, "expected", None), "job", "completes")
    got = "completes" if final == "succeeded" else "fails"
    note = f" after {len(resubmits)} operator action(s)" if resubmits else ""
    if got == wanted:
        return [ctx.finding(name, P, f"job {final}{note}, as expected")]
    if wanted == "fails":
        return [
            ctx.finding(
                name,
                R,
                f"job {final}{note} but the plan expected it to fail: "
                "explain or correct the plan's expectation",
            )
        ]
    return [ctx.finding(name, F, f"job {final}{note}; the plan expected it to complete")]


@check("expectation.restart", "expectation")
def restart(ctx: CheckContext) -> list[Finding]:
    """A restart happened after the fault if and only if the scenario expected a resume,
    and it resumed as expected: ``latest-valid`` from the newest valid checkpoint,
    ``previous-valid`` from an older valid one after refusing the newest, ``scratch`` from
    nothing."""
    name, tl = "expectation.restart", ctx.timeline
    expected = getattr(ctx.item, "expected", None)
    if expected is None:
        return [
            ctx.finding(
                name,
                P,
                "no expectation about restarts"
                + (" (baseline)" if ctx.item is None else " (control)"),
            )
        ]
    inj = injections(tl)
    if not inj:
        return [ctx.finding(name, R, "no injection to relate a restart to")]
    new = tl.incarnation_after(inj[0].mono)
    if expected.resume == "no-restart":
        if new is None:
            return [ctx.finding(name, P, "no restart after the fault, as expected")]
        return [
            ctx.finding(
                name,
                F,
                f"incarnation {new.index} started after the fault; the "
                "plan expected the job to ride it out without a restart",
            )
        ]
    if new is None:
        return [
            ctx.finding(
                name,
                F if expected.job == "completes" else P,
                "no restart after the fault"
                + ("" if expected.job == "completes" else " (job expected to fail)"),
            )
        ]
    how = _resume_as_expected(ctx, new, expected.resume)
    if how.verdict != P:
        return [how]
    limit = getattr(getattr(ctx.item, "pass_criteria", None), "max_recomputed_steps", None)
    old = tl.incarnation_at(inj[0].mono)
    if (
        limit is not None
        and old is not None
        and old.last_step is not None
        and new.resume_step is not None
    ):
        redo = old.last_step - new.resume_step
        if redo > limit:
            return [
                ctx.finding(
                    name,
                    F,
                    f"{redo} steps recomputed, more than the plan's max_recomputed_steps {limit}",
                )
            ]
    return [how]


def _resume_as_expected(ctx: CheckContext, new: Incarnation, resume: str) -> Finding:
    """Whether incarnation ``new`` resumed as ``resume`` (``latest-valid``,
    ``previous-valid``, ``scratch``) says; consistent with ``progress.resume-point``'s idea
    of the newest valid checkpoint."""
    name, tl = "expectation.restart", ctx.timeline
    head = f"restarted as incarnation {new.index} after the fault"
    ld = new.load
    if ld is None:
        return ctx.finding(
            name,
            R,
            f"{head}, but it recorded no checkpoint load decision: cannot tell whether it "
            f"resumed {resume} as the plan expected",
        )
    got_id = str(ld.get("id")) if ld.kind == "ckpt_load" else None
    got_step = new.resume_step or 0
    got = f"{got_id} (step {got_step})" if got_id else "scratch"
    want_id, want_step = newest_valid_before(tl, new.started_mono)
    if resume == "scratch":
        if got_id is None:
            return ctx.finding(name, P, f"{head}, from scratch, as expected")
        return ctx.finding(
            name, F, f"{head}, resuming from {got}; the plan expected it to start from scratch"
        )
    if resume == "latest-valid":
        if got_step == want_step:
            best = f"the newest valid checkpoint {want_id} (step {want_step})"
            return ctx.finding(
                name,
                P,
                f"{head}, resuming from {best if want_id else 'scratch (none was valid)'}",
            )
        return ctx.finding(
            name,
            F,
            f"{head}, resuming from {got}, but the newest valid checkpoint was "
            f"{want_id or 'none'} (step {want_step}): the plan expected latest-valid",
        )
    # previous-valid: the newest checkpoint refused, an older valid one used
    saves = [e for e in tl.of("probe", "ckpt_save") if e.mono < new.started_mono]
    if not saves:
        return ctx.finding(
            name,
            R,
            f"{head}, but no checkpoint had been saved before it: nothing to reject, so "
            "previous-valid could not be shown",
        )
    newest = max(saves, key=lambda e: (int(e["step"]), e.mono))
    nid, nstep = str(newest["id"]), int(newest["step"])
    refused = {
        str(r.get("id")) for e in new.loads for r in e.get("rejected") or [] if isinstance(r, dict)
    }
    if got_id == nid or nid not in refused:
        return ctx.finding(
            name,
            F,
            f"{head}, resuming from {got} without rejecting the newest checkpoint {nid} (step {nstep}): "
            "the plan expected it to be refused and an older valid one used",
        )
    if want_id is None or want_step >= nstep:
        return ctx.finding(
            name,
            R,
            f"{head}, resuming from {got} after rejecting {nid}, but no older valid checkpoint "
            "existed: previous-valid could not be shown",
        )
    if got_step != want_step:
        return ctx.finding(
            name,
            F,
            f"{head}: rejected {nid} but resumed from {got}, not the newest older valid "
            f"checkpoint {want_id} (step {want_step})",
        )
    return ctx.finding(
        name,
        P,
        f"{head}: rejected the newest checkpoint {nid} (step {nstep}) and resumed from the "
        f"older valid {want_id} (step {want_step}), as expected",
    )
