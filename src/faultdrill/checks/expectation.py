"""Expectation: did the drill happen as planned (fault applied, no stop condition) and did
the job end the way the scenario expected."""

from __future__ import annotations

from faultdrill.analysis import injections
from faultdrill.checks.api import CheckContext, Finding, Verdict, check

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
    """A restart happened after the fault if and only if the scenario expected a resume."""
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
    return [ctx.finding(name, P, f"restarted as incarnation {new.index} after the fault")]
