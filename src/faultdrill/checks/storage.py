"""Checkpoint-storage evidence (round 3): a failed save never becomes ``latest``, a damaged
checkpoint is refused (and the refusal said), the drill really hit what it aimed at (an
outage that overlapped a save, a restart during a control-plane outage), and what slow
storage cost a save (its duration against the checkpoint interval, the training it
blocked)."""

from __future__ import annotations

import itertools
import re
import statistics

from faultdrill.checks.api import CheckContext, Finding, Msg, Verdict, check
from faultdrill.events import Event
from faultdrill.readings.inventory import pointer_id

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


def _outage_moment(ctx: CheckContext, look: Event) -> Msg:
    """ "the start (end) of the storage outage", "1.20 s into the storage slowdown", as a
    message."""
    when = look.get("when")
    if look.get("fault") == "storage-slow":
        inj = _injection(ctx, "storage-slow")
        if when in ("start", "end"):
            return Msg(f"progress.failed-save-not-published.slow-{when}")
        at_s = look.mono - inj.mono if inj is not None else float("nan")
        return Msg("progress.failed-save-not-published.slow-during", at_s=at_s)
    if when in ("start", "end"):
        return Msg(f"progress.failed-save-not-published.outage-{when}")
    return Msg("progress.failed-save-not-published.outage", when=when)


def _reported_yet(look: Event, target: str, saves: list[Event]) -> bool:
    """Whether ``target`` counts as completed at ``look``: a save of it was reported
    before, or (a look of ``storage-slow``, which watches the pointer while saves are in
    flight) it verifies by its manifest: a job reports a save only after publishing and
    pruning, which the slow server stretches, so the report may lag the pointer."""
    if any(str(s.get("id")) == target and s.mono <= look.mono for s in saves):
        return True
    return look.get("fault") == "storage-slow" and look.get("latest_verifies") is True


@check("progress.failed-save-not-published", "progress")
def failed_save_not_published(ctx: CheckContext) -> list[Finding]:
    """``latest`` only ever named a checkpoint whose save completed and that verifies: as
    observed at the start and end of a storage outage, and at the end of the run."""
    tl, name = ctx.timeline, "progress.failed-save-not-published"
    saves = tl.of("probe", "ckpt_save")
    failed = tl.of("probe", "ckpt_save_failed")
    out: list[Finding] = []
    looks: list[tuple[float, Msg, Event]] = [
        (e.mono, _outage_moment(ctx, e), e) for e in tl.of("fault", "storage_observed")
    ]
    end = tl.first("harness", "ckpt_latest")
    if end is not None:
        looks.append((end.mono, Msg("progress.failed-save-not-published.run-end"), end))
    for _, when, e in looks:
        recorded = e.get("latest") if e.kind == "storage_observed" else e.get("target")
        # runs recorded before the pointer contract kept the pointer's whole text
        target = pointer_id(str(recorded)) if recorded else None
        if not target:
            continue
        if not _reported_yet(e, str(target), saves):
            out.append(
                ctx.finding(
                    name,
                    F,
                    Msg(
                        "progress.failed-save-not-published.not-durable-failed"
                        if failed
                        else "progress.failed-save-not-published.not-durable",
                        when=when,
                        latest=target,
                        failed=len(failed),
                    ),
                    latest=target,
                    when=when.text(),
                )
            )
        elif e.get("latest_verifies") is False:
            out.append(
                ctx.finding(
                    name,
                    F,
                    Msg(
                        "progress.failed-save-not-published.not-verifying",
                        when=when,
                        latest=target,
                        problem=e.get("latest_problem"),
                    ),
                    latest=target,
                    when=when.text(),
                )
            )
    if out:
        return out
    if not looks:
        return [ctx.finding(name, R, Msg("progress.failed-save-not-published.never-observed"))]
    msg = Msg(
        "progress.failed-save-not-published.completed-failed"
        if failed
        else "progress.failed-save-not-published.completed",
        n=len(looks),
        failed=len(failed),
        steps=[e.get("step") for e in failed],
    )
    return [ctx.finding(name, P, msg, failed_saves=len(failed))]


def _damage_tested(ctx: CheckContext, name: str, inj: Event) -> Finding:
    """Whether the first load decision after ``inj`` damaged a checkpoint refused it."""
    tl = ctx.timeline
    cid = str(inj["ckpt_id"])
    after = [
        e for e in tl.of("probe") if e.kind in ("ckpt_load", "ckpt_none") and e.mono > inj.mono
    ]
    if not after:
        return ctx.finding(
            name,
            R,
            Msg(
                "progress.damaged-checkpoint-refused.untested",
                ckpt=cid,
                damage=inj.get("damage"),
            ),
        )
    first_inc = tl.inc_of_pid(int(after[0].get("pid", -1)))
    decision = [e for e in after if tl.inc_of_pid(int(e.get("pid", -1))) == first_inc]
    loaded = [e for e in decision if e.kind == "ckpt_load" and str(e.get("id")) == cid]
    if loaded:
        e = loaded[0]
        return ctx.finding(
            name,
            F,
            Msg(
                "progress.damaged-checkpoint-refused.loaded",
                rank=e.get("rank"),
                ckpt=cid,
                damage=inj.get("damage"),
                verified=e.get("verified"),
            ),
            ckpt_id=cid,
        )
    said = [
        r
        for e in decision
        for r in e.get("rejected") or []
        if isinstance(r, dict) and str(r.get("id")) == cid
    ]
    chosen = next((e for e in decision if e.kind == "ckpt_load"), None)
    fell_to = (
        Msg("expectation.restart.ckpt", ckpt=chosen.get("id"), step=chosen.get("step"))
        if chosen
        else Msg("value.scratch")
    )
    if not said:
        not_offered = _never_offered(ctx, name, decision, cid)
        if not_offered is not None:
            return not_offered
        return ctx.finding(
            name,
            F,
            Msg("progress.damaged-checkpoint-refused.silent", ckpt=cid, fell_to=fell_to),
            ckpt_id=cid,
        )
    return ctx.finding(
        name,
        P,
        Msg(
            "progress.damaged-checkpoint-refused.refused",
            ckpt=cid,
            damage=inj.get("damage"),
            reason=said[0].get("reason"),
            fell_to=fell_to,
        ),
        ckpt_id=cid,
        reason=said[0].get("reason"),
        fell_back_to=chosen.get("id") if chosen else None,
    )


def _never_offered(ctx: CheckContext, name: str, decision: list[Event], cid: str) -> Finding | None:
    """A platform that hands checkpoints over (Ray Train) never offered damaged ``cid`` (it
    had not registered it yet): there was nothing to refuse, a retest; None otherwise."""
    offered = [e for e in decision if "handed_over" in e.fields]
    if not offered or any(str(e.get("handed_over")) == cid for e in offered):
        return None
    return ctx.finding(
        name,
        R,
        Msg(
            "progress.damaged-checkpoint-refused.not-offered",
            handed=offered[0].get("handed_over"),
            ckpt=cid,
        ),
        ckpt_id=cid,
    )


@check("progress.damaged-checkpoint-refused", "progress")
def damaged_checkpoint_refused(ctx: CheckContext) -> list[Finding]:
    """After a fault damaged a checkpoint, the next load refused it and said so."""
    tl, name = ctx.timeline, "progress.damaged-checkpoint-refused"
    damaged = [e for e in tl.of("fault", "injected") if e.get("ckpt_id")]
    if not damaged:
        return [ctx.finding(name, P, Msg("progress.damaged-checkpoint-refused.none"))]
    return [_damage_tested(ctx, name, inj) for inj in damaged]


@check("expectation.outage-overlapped-save", "expectation")
def outage_overlapped_save(ctx: CheckContext) -> list[Finding]:
    """A storage outage overlapped at least one checkpoint save (else it tested nothing): a
    save failed during it, or (a server that hangs) started during it and completed only
    after it ended."""
    tl, name = ctx.timeline, "expectation.outage-overlapped-save"
    inj = _injection(ctx, "storage-outage")
    if inj is None:
        return [ctx.finding(name, P, Msg("expectation.outage-overlapped-save.not-outage"))]
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
        ids = [str(e.get("id")) for e in done]
        return [ctx.finding(name, R, Msg("expectation.outage-overlapped-save.no-effect", ids=ids))]
    if blocked and not failed:
        e = blocked[0]
        return [
            ctx.finding(
                name,
                P,
                Msg(
                    "expectation.outage-overlapped-save.blocked",
                    step=e.get("step"),
                    after_s=e.mono - t1,
                    duration_s=float(e["duration_s"]),
                ),
                blocked_steps=[b.get("step") for b in blocked],
            )
        ]
    if not failed:
        return [
            ctx.finding(
                name,
                R,
                Msg("expectation.outage-overlapped-save.no-save", seconds=t1 - t0),
            )
        ]
    errors = sorted({re.sub(r": '[^']*'$", "", str(e.get("error"))) for e in failed})
    return [
        ctx.finding(
            name,
            P,
            Msg(
                "expectation.outage-overlapped-save.failed",
                n=len(failed),
                steps=[e.get("step") for e in failed],
                errors=errors,
            ),
            failed_steps=[e.get("step") for e in failed],
        )
    ]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _save_start(e: Event) -> float:
    return e.mono - float(e.get("duration_s") or 0.0)


def _usual_pace(ctx: CheckContext, t0: float, saves: list[Event]) -> tuple[float | None, ...]:
    """Before the slowdown: (median save duration, checkpoint interval, step gap) in
    seconds, None where the timeline does not tell. The interval is the median time
    between saves, else ``checkpoint.every_steps`` steps at the median step gap."""
    steps = [t for t, _ in _rank0_steps(ctx)]
    step_s = _median([b - a for a, b in itertools.pairwise(steps) if b <= t0])
    before = [e for e in saves if e.mono < t0]
    interval = _median([b.mono - a.mono for a, b in itertools.pairwise(before)])
    if interval is None and step_s is not None:
        interval = ctx.plan.checkpoint.every_steps * step_s
    durations = [float(e["duration_s"]) for e in before if e.get("duration_s") is not None]
    return _median(durations), interval, step_s


def _blocked(ctx: CheckContext, save: Event, step_s: float | None) -> Msg:
    """Whether training stopped while ``save`` ran: the rank-0 step gap around it."""
    steps = _rank0_steps(ctx)
    start = _save_start(save)
    before = [s for s in steps if s[0] <= start + 0.05]
    after = [s for s in steps if s[0] >= save.mono]
    if not before or not after or step_s is None:
        return Msg("expectation.slow-storage-save.blocked-unknown")
    gap = after[0][0] - before[-1][0]
    # blocked: the gap holds most of the save, not just a step or two of jitter
    key = "blocked" if gap > 2 * step_s + 0.5 * (save.mono - start) else "not-blocked"
    return Msg(f"expectation.slow-storage-save.{key}", gap_s=gap, step=before[-1][1], step_s=step_s)


def _rank0_steps(ctx: CheckContext) -> list[tuple[float, int]]:
    """(time, step) of every step rank 0 recorded, in time order."""
    st = ctx.timeline.steps
    rows = st.rank == 0
    return list(zip(st.mono[rows].tolist(), st.step[rows].tolist(), strict=True))


@check("expectation.slow-storage-save", "expectation")
def slow_storage_save(ctx: CheckContext) -> list[Finding]:
    """Under ``storage-slow`` a save ran and completed, and what the latency cost it: its
    duration against the usual one and the checkpoint interval, whether training stopped
    for it, the training time lost to saving. A save that failed although the storage only
    answered late fails; no save under the slowdown, or one no slower than usual, retests."""
    tl, name = ctx.timeline, "expectation.slow-storage-save"
    inj = _injection(ctx, "storage-slow")
    if inj is None:
        return [ctx.finding(name, P, Msg("expectation.slow-storage-save.not-slow"))]
    t0, t1 = inj.mono, _fault_end(ctx, inj)
    latency = inj.get("latency_ms")
    failed = [e for e in tl.of("probe", "ckpt_save_failed") if t0 <= e.mono <= t1 + 1.0]
    if failed:
        errors = sorted({re.sub(r": '[^']*'$", "", str(e.get("error"))) for e in failed})
        msg = Msg(
            "expectation.slow-storage-save.failed",
            n=len(failed),
            steps=[e.get("step") for e in failed],
            latency_ms=latency,
            errors=errors,
        )
        return [ctx.finding(name, F, msg, failed_steps=[e.get("step") for e in failed])]
    saves = [e for e in tl.of("probe", "ckpt_save") if e.get("duration_s") is not None]
    slowed = [e for e in saves if _save_start(e) <= t1 and e.mono >= t0]
    if not slowed:
        return [ctx.finding(name, R, Msg("expectation.slow-storage-save.no-save", seconds=t1 - t0))]
    usual, interval, step_s = _usual_pace(ctx, t0, saves)
    worst = max(slowed, key=lambda e: float(e["duration_s"]))
    took = float(worst["duration_s"])
    if usual is not None and took <= 1.5 * usual:
        msg = Msg(
            "expectation.slow-storage-save.no-effect",
            step=worst.get("step"),
            duration_s=took,
            usual_s=usual,
        )
        return [ctx.finding(name, R, msg)]
    lost = sum(float(e["duration_s"]) - (usual or 0.0) for e in slowed)
    if interval is None:
        pace = Msg("expectation.slow-storage-save.interval-unknown")
    else:
        key = "over-interval" if took > interval else "within-interval"
        pace = Msg(f"expectation.slow-storage-save.{key}", interval_s=interval)
    start_s = _save_start(worst) - t0
    began = (
        Msg("expectation.slow-storage-save.began-after", start_s=start_s, latency_ms=latency)
        if start_s >= 0
        else Msg("expectation.slow-storage-save.began-before", ago_s=-start_s, latency_ms=latency)
    )
    msg = Msg(
        "expectation.slow-storage-save.slowed",
        step=worst.get("step"),
        began=began,
        n=len(slowed),
        duration_s=took,
        usual=Msg("expectation.slow-storage-save.usual", usual_s=usual)
        if usual is not None
        else Msg("expectation.slow-storage-save.usual-unknown"),
        pace=pace,
        blocked=_blocked(ctx, worst, step_s),
        lost_s=lost,
    )
    data = {"save_s": took, "usual_save_s": usual, "interval_s": interval, "lost_s": lost}
    return [ctx.finding(name, P, msg, **data, slowed_steps=[e.get("step") for e in slowed])]


@check("expectation.restart-during-outage", "expectation")
def restart_during_outage(ctx: CheckContext) -> list[Finding]:
    """When a control-plane outage asked for a restart inside it, that restart happened."""
    tl, name = ctx.timeline, "expectation.restart-during-outage"
    inj = _injection(ctx, "control-plane-outage")
    if inj is None or not inj.get("restart_during"):
        return [ctx.finding(name, P, Msg("expectation.restart-during-outage.not-asked"))]
    failed = tl.of("fault", "restart_probe_failed")
    if failed:
        error = failed[0].get("error")
        return [ctx.finding(name, R, Msg("expectation.restart-during-outage.failed", error=error))]
    probe = tl.first("fault", "restart_probe", after=inj.mono)
    if probe is None:
        return [ctx.finding(name, R, Msg("expectation.restart-during-outage.never"))]
    end = _fault_end(ctx, inj)
    if probe.mono > end:
        return [ctx.finding(name, R, Msg("expectation.restart-during-outage.too-late"))]
    return [
        ctx.finding(
            name,
            P,
            Msg(
                "expectation.restart-during-outage.killed",
                rank=probe.get("rank"),
                pid=probe.get("pid"),
                at_s=probe.mono - inj.mono,
                outage_s=end - inj.mono,
            ),
        )
    ]
