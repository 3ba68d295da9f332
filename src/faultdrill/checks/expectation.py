"""Expectation: did the drill happen as planned (fault applied, no stop condition) and did
the job end the way the scenario expected."""

from __future__ import annotations

from faultdrill.checks.api import CheckContext, Finding, Msg, Verdict, check
from faultdrill.checks.progress import newest_valid_before
from faultdrill.readings.analysis import injections
from faultdrill.timeline import Incarnation

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


@check("expectation.fault-applied", "expectation")
def fault_applied(ctx: CheckContext) -> list[Finding]:
    """The scenario's fault was injected (its trigger was reached)."""
    name, tl = "expectation.fault-applied", ctx.timeline
    if ctx.item is None:
        return [ctx.finding(name, P, Msg("expectation.fault-applied.baseline"))]
    inj = injections(tl)
    failed = tl.of("fault", "inject_failed")
    if failed:
        error = failed[0].get("error")
        return [ctx.finding(name, R, Msg("expectation.fault-applied.failed", error=error))]
    if not inj:
        return [
            ctx.finding(
                name,
                R,
                Msg("expectation.fault-applied.never", trigger=ctx.item.trigger.describe()),
            )
        ]
    e = inj[0]
    return [
        ctx.finding(
            name,
            P,
            Msg(
                "expectation.fault-applied.injected",
                fault=e.get("fault"),
                target=_target_said(e.get("target")),
                step=e.get("at_step"),
            ),
        )
    ]


#: The targets a fault names in fixed words (``Fault.target_label``), said in the report's
#: language; a node, rank or link is named as recorded.
_TARGET_WORDS = {
    "the control plane (rendezvous store)": "expectation.target.control-plane",
    "the checkpoint directory": "expectation.target.checkpoint-dir",
    "the checkpoint `latest` names": "expectation.target.latest",
}


def _target_said(target: object) -> object:
    key = _TARGET_WORDS.get(str(target))
    return Msg(key) if key else target


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
                Msg(
                    "expectation.no-stop-condition.fired",
                    condition=e.get("condition"),
                    detail=e.get("detail"),
                ),
                condition=e.get("condition"),
            )
        ]
    return [ctx.finding(name, P, Msg("expectation.no-stop-condition.none"))]


@check("expectation.job-outcome", "expectation")
def job_outcome(ctx: CheckContext) -> list[Finding]:
    """The job ended as the scenario expected (completed or failed)."""
    name, tl = "expectation.job-outcome", ctx.timeline
    states = tl.of("platform", "job_state")
    ended = [e.get("state") for e in states if e.get("state") in ("succeeded", "failed", "stopped")]
    if not ended:
        return [ctx.finding(name, R, Msg("expectation.job-outcome.no-end-state"))]
    final = ended[-1]
    resubmits = tl.of("harness", "operator_action")
    wanted = getattr(getattr(ctx.item, "expected", None), "job", "completes")
    got = "completes" if final == "succeeded" else "fails"
    said = Msg(
        "expectation.job-outcome.ended-after" if resubmits else "expectation.job-outcome.ended",
        state=final,
        actions=len(resubmits),
    )
    if got == wanted:
        return [ctx.finding(name, P, Msg("expectation.job-outcome.as-expected", ended=said))]
    if wanted == "fails":
        return [ctx.finding(name, R, Msg("expectation.job-outcome.expected-fail", ended=said))]
    return [ctx.finding(name, F, Msg("expectation.job-outcome.expected-complete", ended=said))]


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
                Msg(
                    "expectation.restart.none-baseline"
                    if ctx.item is None
                    else "expectation.restart.none-control"
                ),
            )
        ]
    inj = injections(tl)
    if not inj:
        return [ctx.finding(name, R, Msg("expectation.restart.no-injection"))]
    new = tl.incarnation_after(inj[0].mono)
    if expected.resume == "no-restart":
        if new is None:
            return [ctx.finding(name, P, Msg("expectation.restart.none-as-expected"))]
        return [
            ctx.finding(
                name,
                F,
                Msg("expectation.restart.unexpected", inc=new.index),
            )
        ]
    if new is None:
        return [
            ctx.finding(
                name,
                F if expected.job == "completes" else P,
                Msg(
                    "expectation.restart.none"
                    if expected.job == "completes"
                    else "expectation.restart.none-expected-fail"
                ),
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
                    Msg("expectation.restart.too-many-recomputed", redo=redo, limit=limit),
                )
            ]
    return [how]


def _resume_as_expected(ctx: CheckContext, new: Incarnation, resume: str) -> Finding:
    """Whether incarnation ``new`` resumed as ``resume`` (``latest-valid``,
    ``previous-valid``, ``scratch``) says; consistent with ``progress.resume-point``'s idea
    of the newest valid checkpoint."""
    name, tl = "expectation.restart", ctx.timeline
    head = Msg("expectation.restart.head", inc=new.index)
    ld = new.load
    if ld is None:
        return ctx.finding(
            name,
            R,
            Msg("expectation.restart.no-load-decision", head=head, resume=resume),
        )
    got_id = str(ld.get("id")) if ld.kind == "ckpt_load" else None
    got_step = new.resume_step or 0
    got = Msg("expectation.restart.ckpt", ckpt=got_id, step=got_step) if got_id else None
    got = got or Msg("value.scratch")
    want = newest_valid_before(tl, new.started_mono)
    if resume == "scratch":
        if got_id is None:
            return ctx.finding(name, P, Msg("expectation.restart.scratch", head=head))
        return ctx.finding(name, F, Msg("expectation.restart.not-scratch", head=head, got=got))
    if resume == "latest-valid":
        return _resumed_latest_valid(ctx, head, got, got_step, want)
    return _resumed_previous_valid(ctx, new, head, (got_id, got_step, got), want)


def _resumed_latest_valid(
    ctx: CheckContext, head: Msg, got: Msg, got_step: int, want: tuple[str | None, int]
) -> Finding:
    """``resume: latest-valid``: the step resumed from is the newest valid checkpoint's."""
    name = "expectation.restart"
    want_id, want_step = want
    if got_step == want_step:
        best = (
            Msg("expectation.restart.newest-valid", ckpt=want_id, step=want_step)
            if want_id
            else Msg("expectation.restart.scratch-none-valid")
        )
        return ctx.finding(name, P, Msg("expectation.restart.resumed", head=head, got=best))
    return ctx.finding(
        name,
        F,
        Msg(
            "expectation.restart.not-latest",
            head=head,
            got=got,
            valid=want_id or Msg("value.no-checkpoint"),
            valid_step=want_step,
        ),
    )


def _resumed_previous_valid(
    ctx: CheckContext,
    new: Incarnation,
    head: Msg,
    loaded: tuple[str | None, int, Msg],
    want: tuple[str | None, int],
) -> Finding:
    """``resume: previous-valid``: the newest checkpoint refused, an older valid one used."""
    name, tl = "expectation.restart", ctx.timeline
    got_id, got_step, got = loaded
    want_id, want_step = want
    saves = [e for e in tl.of("probe", "ckpt_save") if e.mono < new.started_mono]
    if not saves:
        return ctx.finding(
            name,
            R,
            Msg("expectation.restart.nothing-saved", head=head),
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
            Msg(
                "expectation.restart.newest-not-rejected", head=head, got=got, ckpt=nid, step=nstep
            ),
        )
    if want_id is None or want_step >= nstep:
        return ctx.finding(
            name,
            R,
            Msg("expectation.restart.no-older-valid", head=head, got=got, ckpt=nid),
        )
    if got_step != want_step:
        return ctx.finding(
            name,
            F,
            Msg(
                "expectation.restart.not-newest-older",
                head=head,
                ckpt=nid,
                got=got,
                valid=want_id,
                valid_step=want_step,
            ),
        )
    return ctx.finding(
        name,
        P,
        Msg(
            "expectation.restart.previous-valid",
            head=head,
            ckpt=nid,
            step=nstep,
            valid=want_id,
            valid_step=want_step,
        ),
    )
