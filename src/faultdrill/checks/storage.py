"""Checkpoint-storage evidence (round 3): a failed save never becomes ``latest``, a damaged
checkpoint is refused (and the refusal said), and the drill really hit what it aimed at
(an outage that overlapped a save, a restart during a control-plane outage)."""

from __future__ import annotations

import re

from faultdrill.checks.api import CheckContext, Finding, Verdict, check
from faultdrill.events import Event
from faultdrill.judge.inventory import pointer_id

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


def _injection(ctx: CheckContext, kind: str) -> Event | None:
    return next((e for e in ctx.timeline.of("fault", "injected") if e.get("fault") == kind), None)


def _fault_end(ctx: CheckContext, inj: Event) -> float:
    """When the fault was reverted (or, if that was never recorded, when it was due to)."""
    rev = ctx.timeline.first("fault", "reverted", after=inj.mono)
    if rev is not None:
        return rev.mono
    dur = inj.get("duration_s")
    return inj.mono + float(dur) if dur is not None else float("inf")


@check("progress.failed-save-not-published", "progress")
def failed_save_not_published(ctx: CheckContext) -> list[Finding]:
    """``latest`` only ever named a checkpoint whose save completed and that verifies: as
    observed at the start and end of a storage outage, and at the end of the run."""
    tl, name = ctx.timeline, "progress.failed-save-not-published"
    saves = tl.of("probe", "ckpt_save")
    failed = tl.of("probe", "ckpt_save_failed")
    out: list[Finding] = []
    looks = [
        (e.mono, f"the {e.get('when')} of the storage outage", e)
        for e in tl.of("fault", "storage_observed")
    ]
    end = tl.first("harness", "ckpt_latest")
    if end is not None:
        looks.append((end.mono, "the end of the run", end))
    for mono, when, e in looks:
        recorded = e.get("latest") if e.kind == "storage_observed" else e.get("target")
        # runs recorded before the pointer contract kept the pointer's whole text
        target = pointer_id(str(recorded)) if recorded else None
        if not target:
            continue
        done = {str(s.get("id")) for s in saves if s.mono <= mono}
        if str(target) not in done:
            out.append(
                ctx.finding(
                    name,
                    F,
                    f"at {when} `latest` named {target!r}, which no completed save reported: "
                    "a save was published before it was durable"
                    + (f" ({len(failed)} save(s) failed)" if failed else ""),
                    latest=target,
                    when=when,
                )
            )
        elif e.get("latest_verifies") is False:
            out.append(
                ctx.finding(
                    name,
                    F,
                    f"at {when} `latest` named {target!r}, which does not verify: "
                    f"{e.get('latest_problem')}",
                    latest=target,
                    when=when,
                )
            )
    if out:
        return out
    if not looks:
        return [ctx.finding(name, R, "the checkpoint pointer was never observed")]
    msg = f"`latest` always named a completed save ({len(looks)} observation(s))"
    if failed:
        steps = ", ".join(str(e.get("step")) for e in failed)
        msg += f"; {len(failed)} failed save(s) (step {steps}) never became latest"
    return [ctx.finding(name, P, msg, failed_saves=len(failed))]


@check("progress.damaged-checkpoint-refused", "progress")
def damaged_checkpoint_refused(ctx: CheckContext) -> list[Finding]:
    """After a fault damaged a checkpoint, the next load refused it and said so."""
    tl, name = ctx.timeline, "progress.damaged-checkpoint-refused"
    damaged = [e for e in tl.of("fault", "injected") if e.get("ckpt_id")]
    if not damaged:
        return [ctx.finding(name, P, "no checkpoint was damaged in this run")]
    out = []
    for inj in damaged:
        cid = str(inj["ckpt_id"])
        after = [
            e for e in tl.of("probe") if e.kind in ("ckpt_load", "ckpt_none") and e.mono > inj.mono
        ]
        if not after:
            out.append(
                ctx.finding(
                    name,
                    R,
                    f"no replica decided what to load after {cid} was damaged "
                    f"({inj.get('damage')}): the damage was never put to the test",
                )
            )
            continue
        first_inc = tl.inc_of_pid(int(after[0].get("pid", -1)))
        decision = [e for e in after if tl.inc_of_pid(int(e.get("pid", -1))) == first_inc]
        loaded = [e for e in decision if e.kind == "ckpt_load" and str(e.get("id")) == cid]
        if loaded:
            e = loaded[0]
            out.append(
                ctx.finding(
                    name,
                    F,
                    f"rank {e.get('rank')} loaded {cid} after it was damaged "
                    f"({inj.get('damage')}), verified={e.get('verified')}",
                    ckpt_id=cid,
                )
            )
            continue
        said = [
            r
            for e in decision
            for r in e.get("rejected") or []
            if isinstance(r, dict) and str(r.get("id")) == cid
        ]
        chosen = next((e for e in decision if e.kind == "ckpt_load"), None)
        fell_to = f"{chosen.get('id')} (step {chosen.get('step')})" if chosen else "scratch"
        offered = [e for e in decision if "handed_over" in e.fields]
        if not said and offered and all(str(e.get("handed_over")) != cid for e in offered):
            # A platform that hands checkpoints over (Ray Train) never offered the damaged
            # one (it had not registered it yet): there was nothing to refuse.
            out.append(
                ctx.finding(
                    name,
                    R,
                    f"the platform handed over {offered[0].get('handed_over')}, not damaged "
                    f"{cid}: the damage was never put to the test (inject after the platform "
                    "has registered the checkpoint)",
                    ckpt_id=cid,
                )
            )
            continue
        if not said:
            out.append(
                ctx.finding(
                    name,
                    F,
                    f"the restart did not load damaged {cid} but fell back to {fell_to} "
                    "without reporting it as rejected: the fallback was silent",
                    ckpt_id=cid,
                )
            )
            continue
        out.append(
            ctx.finding(
                name,
                P,
                f"damaged {cid} ({inj.get('damage')}) was refused: {said[0].get('reason')}; "
                f"fell back to {fell_to}",
                ckpt_id=cid,
                reason=said[0].get("reason"),
                fell_back_to=chosen.get("id") if chosen else None,
            )
        )
    return out


@check("expectation.outage-overlapped-save", "expectation")
def outage_overlapped_save(ctx: CheckContext) -> list[Finding]:
    """A storage outage overlapped at least one checkpoint save (else it tested nothing): a
    save failed during it, or (a server that hangs) started during it and completed only
    after it ended."""
    tl, name = ctx.timeline, "expectation.outage-overlapped-save"
    inj = _injection(ctx, "storage-outage")
    if inj is None:
        return [ctx.finding(name, P, "not a storage outage (or it was never injected)")]
    t0, t1 = inj.mono, _fault_end(ctx, inj)
    # The last look at the pointer is taken just before the revert acts; a save the revert
    # releases (SIGCONT to a hung server) may complete before ``reverted`` is written.
    looked = [e.mono for e in tl.of("fault", "storage_observed") if e.get("when") == "end"]
    t1 = min([t1, *(m for m in looked if m >= t0)])
    failed = [e for e in tl.of("probe", "ckpt_save_failed") if t0 <= e.mono <= t1 + 1.0]
    done = [e for e in tl.of("probe", "ckpt_save") if t0 <= e.mono <= t1]
    blocked = [
        e
        for e in tl.of("probe", "ckpt_save")
        if e.mono > t1
        and e.get("duration_s") is not None
        and t0 <= e.mono - float(e["duration_s"]) <= t1
    ]
    if done:
        ids = ", ".join(str(e.get("id")) for e in done)
        return [
            ctx.finding(
                name,
                R,
                f"save(s) {ids} completed during the outage: the outage did not take effect",
            )
        ]
    if blocked and not failed:
        e = blocked[0]
        return [
            ctx.finding(
                name,
                P,
                f"the save of step {e.get('step')} started during the outage and blocked until "
                f"it ended: it completed {e.mono - t1:.2f} s after the outage ended, "
                f"{float(e['duration_s']):.2f} s after it began",
                blocked_steps=[b.get("step") for b in blocked],
            )
        ]
    if not failed:
        return [
            ctx.finding(
                name,
                R,
                f"no checkpoint save was attempted during the {t1 - t0:.1f} s outage: retime "
                "the trigger or lengthen for_s so that it overlaps a save",
            )
        ]
    errors = sorted({re.sub(r": '[^']*'$", "", str(e.get("error"))) for e in failed})
    steps = ", ".join(str(e.get("step")) for e in failed)
    return [
        ctx.finding(
            name,
            P,
            f"{len(failed)} save(s) (step {steps}) failed during the outage: {'; '.join(errors)}",
            failed_steps=[e.get("step") for e in failed],
        )
    ]


@check("expectation.restart-during-outage", "expectation")
def restart_during_outage(ctx: CheckContext) -> list[Finding]:
    """When a control-plane outage asked for a restart inside it, that restart happened."""
    tl, name = ctx.timeline, "expectation.restart-during-outage"
    inj = _injection(ctx, "control-plane-outage")
    if inj is None or not inj.get("restart_during"):
        return [ctx.finding(name, P, "no restart was asked for during a control-plane outage")]
    failed = tl.of("fault", "restart_probe_failed")
    if failed:
        return [ctx.finding(name, R, f"the restart probe failed: {failed[0].get('error')}")]
    probe = tl.first("fault", "restart_probe", after=inj.mono)
    if probe is None:
        return [ctx.finding(name, R, "the restart probe never fired inside the outage")]
    end = _fault_end(ctx, inj)
    if probe.mono > end:
        return [ctx.finding(name, R, "the restart probe fired after the outage had ended")]
    return [
        ctx.finding(
            name,
            P,
            f"worker rank {probe.get('rank')} (pid {probe.get('pid')}) killed "
            f"{probe.mono - inj.mono:.1f} s into the {end - inj.mono:.1f} s outage",
        )
    ]
