"""Straggler evidence (issue 23): what one slowed rank did to the job.

For a ``slow-worker`` item: each rank's step times before, during and after the throttle
(:func:`faultdrill.readings.steptimes.rank_step_times`), the steps per second lost while it
lasted, whether the job rode it out (no worker failed, no timeout fired, no restart), and
whether anything noticed it (the plan's ``expect_detection``). Most platforms have no
straggler detection; the report says so plainly instead of implying one.
"""

from __future__ import annotations

from faultdrill.checks.api import CheckContext, Finding, Msg, Verdict, check
from faultdrill.events import Event
from faultdrill.readings.steptimes import RankStepTimes, rank_step_times, steps_per_s
from faultdrill.timeline import Timeline

__all__ = ["DETECTIONS", "FAILURES", "straggler_detected", "straggler_tolerated", "window"]

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL
KIND = "slow-worker"
#: Platform events that mean the job did not ride the straggler out.
FAILURES = frozenset(
    {"worker_failed", "worker_group_failed", "timeout_fired", "rdzv_timeout", "dead_node"}
)
#: Platform events that show something noticed a straggler (a platform's own straggler
#: report, a membership decision, a node lost, or any failure above); a ``node_state``
#: counts only when it takes a node out (:data:`NODE_OUT`).
DETECTIONS = FAILURES | frozenset({"straggler", "membership_change", "node_lost"})
#: Node states that take a node out of the job (a node going idle at the job's end is none).
NODE_OUT = ("down", "drain", "fail", "frozen", "unusable")
#: After the throttle ends, how long a late consequence still counts (a timeout set just
#: above the slowed step fires after the release).
LATE_S = 10.0


def window(tl: Timeline) -> tuple[Event, float] | None:
    """The slow-worker's injection and when the throttle ended (its revert; else when it
    was due), or None when it was never injected."""
    inj = next((e for e in tl.of("fault", "injected") if e.get("fault") == KIND), None)
    if inj is None:
        return None
    rev = tl.first("fault", "reverted", after=inj.mono)
    if rev is not None:
        return inj, rev.mono
    dur = inj.get("duration_s")
    return inj, inj.mono + (float(dur) if isinstance(dur, (int, float)) else 0.0)


def _not_ours(ctx: CheckContext, name: str) -> Finding | None:
    if ctx.item is None:
        return ctx.finding(name, P, Msg("progress.straggler-tolerated.baseline"))
    if ctx.item.fault.kind != KIND:
        return ctx.finding(
            name, P, Msg("progress.straggler-tolerated.other", fault=ctx.item.fault.kind)
        )
    return None


def _seconds(value: float | None) -> Msg:
    if value is None:
        return Msg("progress.straggler-tolerated.no-step")
    return Msg("progress.straggler-tolerated.seconds", s=value)


def _rank_line(r: RankStepTimes, target: object) -> Msg:
    return Msg(
        "progress.straggler-tolerated.rank",
        rank=r.rank,
        target=Msg("progress.straggler-tolerated.throttled") if r.rank == target else "",
        before=_seconds(r.median_before_s),
        during=_seconds(r.median_during_s),
        after=_seconds(r.median_after_s),
        slowdown=""
        if r.slowdown is None
        else Msg("progress.straggler-tolerated.slowdown", x=r.slowdown),
    )


def _first_failure(tl: Timeline, t0: float, t1: float) -> Msg | None:
    """What showed the job did not ride the throttle out, at its time after ``t0``."""
    late = t1 + LATE_S
    bad = [e for e in tl.of("platform") if e.kind in FAILURES and t0 <= e.mono <= late]
    failed = [
        e
        for e in tl.of("platform", "job_state")
        if e.get("state") == "failed" and t0 <= e.mono <= late
    ]
    restarted = tl.incarnation_after(t0)
    moments = [
        (e.mono, Msg("progress.straggler-tolerated.event", kind=e.kind)) for e in bad + failed
    ]
    if restarted is not None and restarted.started_mono <= late:
        moments.append((restarted.started_mono, Msg("progress.straggler-tolerated.restarted")))
    if not moments:
        return None
    at, what = min(moments, key=lambda m: m[0])
    return Msg("progress.straggler-tolerated.at", what=what, at_s=at - t0)


def _goodput(
    ranks: list[RankStepTimes], tl: Timeline, t0: float, t1: float
) -> tuple[float | None, float | None]:
    """(steps lost during the throttle, share of the rate before it lost): the steps the
    lowest rank would have made at its median step time before the throttle, less those
    it made while it lasted."""
    before = ranks[0].median_before_s if ranks else None
    during = steps_per_s(tl, t0, t1)
    if not before or during is None:
        return None, None
    expected = 1.0 / before
    lost = max(expected - during, 0.0)
    return lost * (t1 - t0), lost / expected


@check("progress.straggler-tolerated", "progress")
def straggler_tolerated(ctx: CheckContext) -> list[Finding]:
    """For a slow-worker: per-rank step times before, during and after the throttle, the
    steps lost, and that the job rode it out (no worker failed, no timeout fired, no
    restart within the throttle or 10 s after it) unless the scenario expects a restart.
    No step times on both sides is retest."""
    name, tl = "progress.straggler-tolerated", ctx.timeline
    skip = _not_ours(ctx, name)
    if skip is not None:
        return [skip]
    found = window(tl)
    if found is None:
        return [ctx.finding(name, R, Msg("progress.straggler-tolerated.never-injected"))]
    inj, t1 = found
    t0 = inj.mono
    ranks = rank_step_times(tl, t0, t1)
    target = inj.get("rank")
    lines = [_rank_line(r, target) for r in ranks]
    lost, share = _goodput(ranks, tl, t0, t1)
    data = {
        "window_s": t1 - t0,
        "steps_lost": lost,
        "share_lost": share,
        "ranks": {
            str(r.rank): [r.median_before_s, r.median_during_s, r.median_after_s] for r in ranks
        },
    }
    failure = _first_failure(tl, t0, t1)
    if failure is not None:
        # a scenario may expect the slowed job to restart (its timeout shorter than a slowed
        # step, on purpose): expectation.restart judges that restart; a control never does
        expected = getattr(getattr(ctx.item, "expected", None), "resume", "no-restart")
        verdict, key = (
            (F, "not-tolerated") if expected == "no-restart" else (P, "restarted-as-expected")
        )
        msg = Msg(f"progress.straggler-tolerated.{key}", failure=failure, ranks=lines)
        return [ctx.finding(name, verdict, msg, **data)]
    if not any(r.before for r in ranks) or not any(r.during or r.after for r in ranks):
        return [ctx.finding(name, R, Msg("progress.straggler-tolerated.no-steps"), **data)]
    msg = Msg(
        "progress.straggler-tolerated.tolerated",
        rank=target,
        percent=inj.get("cpu_percent"),
        window_s=t1 - t0,
        steps_lost=lost,
        share_lost=None if share is None else 100 * share,
        ranks=lines,
    )
    return [ctx.finding(name, P, msg, **data)]


def _noticed(tl: Timeline, t0: float, horizon: float) -> list[tuple[float, Msg]]:
    """Each sign, from ``t0`` to ``horizon``, that something noticed the straggler."""
    seen = [
        e
        for e in tl.of("platform")
        if t0 <= e.mono <= horizon
        and (
            e.kind in DETECTIONS
            or (e.kind == "node_state" and str(e.get("state", "")).startswith(NODE_OUT))
        )
    ]
    moments = [(e.mono, Msg("progress.straggler-tolerated.event", kind=e.kind)) for e in seen]
    restarted = tl.incarnation_after(t0)
    if restarted is not None and restarted.started_mono <= horizon:
        moments.append((restarted.started_mono, Msg("progress.straggler-tolerated.restarted")))
    return moments


@check("expectation.straggler-detected", "expectation")
def straggler_detected(ctx: CheckContext) -> list[Finding]:
    """For a slow-worker: what noticed the straggler (a platform's straggler report, a
    membership or node decision, a failure or a restart) and when. With
    ``expect_detection: {within_s: T}`` nothing within T s is a fail; with ``none``
    nothing noticing it is said plainly (a pass: the plan did not require it). Signs count
    up to 10 s after the throttle ended (or T s after it began, if later)."""
    name, tl = "expectation.straggler-detected", ctx.timeline
    skip = _not_ours(ctx, name)
    if skip is not None:
        return [skip]
    found = window(tl)
    if found is None:
        return [ctx.finding(name, R, Msg("progress.straggler-tolerated.never-injected"))]
    inj, t1 = found
    t0 = inj.mono
    within = getattr(ctx.item.fault, "detection_within_s", None) if ctx.item else None
    moments = _noticed(tl, t0, max(t1 + LATE_S, t0 + (within or 0.0)))
    first = min(moments, key=lambda m: m[0]) if moments else None
    if first is None:
        if within is None:
            return [ctx.finding(name, P, Msg("expectation.straggler-detected.unnoticed-ok"))]
        msg = Msg("expectation.straggler-detected.unnoticed", within_s=within)
        return [ctx.finding(name, F, msg, detected=False)]
    at_s = first[0] - t0
    said = Msg("expectation.straggler-detected.noticed", what=first[1], at_s=at_s)
    if within is not None and at_s > within:
        msg = Msg("expectation.straggler-detected.noticed-late", noticed=said, within_s=within)
        return [ctx.finding(name, F, msg, detected=True, at_s=at_s)]
    return [ctx.finding(name, P, said, detected=True, at_s=at_s)]
