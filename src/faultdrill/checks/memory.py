"""Memory evidence: after a rank was killed by the kernel's OOM killer, the job got past
the step where it died (the OOM point), and did not restart into the same OOM again and
again (a restart loop: nothing was fixed between restarts)."""

from __future__ import annotations

import numpy as np

from faultdrill.checks.api import CheckContext, Finding, Msg, Verdict, check
from faultdrill.events import Event

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL

NAME = "progress.oom-restart-loop"


@check(NAME, "progress")
def oom_restart_loop(ctx: CheckContext) -> list[Finding]:
    """After an OOM kill (``fault``/``oom_killed`` with cause ``oom-killer``): some rank
    reported a step past the highest step reported before the first kill (the OOM point).
    Fails when the job was OOM-killed again after a restart and never passed that point:
    a restart loop, with the number of kills and of restarts that died of OOM. A capped
    replica whose death is unexplained, or one OOM kill with no progress after it, is
    retest."""
    tl = ctx.timeline
    deaths = tl.of("fault", "oom_killed")
    item = ctx.item
    if not deaths and (item is None or item.fault.kind != "oom-worker"):
        return [ctx.finding(NAME, P, Msg(f"{NAME}.not-applicable"))]
    kills = [e for e in deaths if e.get("cause") == "oom-killer"]
    if not kills:
        return [_unexplained(ctx, deaths)]
    first = kills[0]
    rank = first.get("rank")
    point = _oom_point(ctx, first.mono)
    again = len(kills) - 1
    passed = _first_past(ctx, point, first.mono)
    if passed is not None:
        msg = Msg(
            f"{NAME}.recovered",
            rank=rank,
            kills=len(kills),
            again=again,
            point=point,
            after_s=round(passed - first.mono, 1),
        )
        return [ctx.finding(NAME, P, msg, oom_kills=len(kills), oom_point=point)]
    restarts = _replicas_started(ctx, rank, first.mono)
    if again:
        msg = Msg(
            f"{NAME}.loop", rank=rank, kills=len(kills), again=again, restarts=restarts, point=point
        )
        return [
            ctx.finding(
                NAME,
                F,
                msg,
                oom_kills=len(kills),
                oom_restarts=again,
                restarts=restarts,
                oom_point=point,
            )
        ]
    return [ctx.finding(NAME, R, Msg(f"{NAME}.no-progress", rank=rank, point=point))]


def _unexplained(ctx: CheckContext, deaths: list[Event]) -> Finding:
    """The retest when no death was the OOM killer's: why there is none."""
    waited = ctx.timeline.of("fault", "oom_not_killed")
    if waited:
        e = waited[0]
        msg = Msg(f"{NAME}.not-killed", rank=e.get("rank"), waited_s=e.get("waited_s"))
    elif deaths:
        msg = Msg(f"{NAME}.other-cause", pid=deaths[0].get("pid"), rank=deaths[0].get("rank"))
    else:
        msg = Msg(f"{NAME}.never-killed")
    return ctx.finding(NAME, R, msg)


def _replicas_started(ctx: CheckContext, rank: object, after: float) -> int:
    """Replicas of ``rank`` seen to start after ``after``: those that announced themselves
    (``run_start``) and those the fault put under the limit again (``oom_recapped``; a
    replica whose start-up alone outgrows the limit dies before it can announce itself)."""
    tl = ctx.timeline
    pids = {
        e.get("pid")
        for e in [*tl.of("probe", "run_start"), *tl.of("fault", "oom_recapped")]
        if e.mono > after and e.get("rank") == rank
    }
    return len(pids)


def _oom_point(ctx: CheckContext, mono: float) -> int:
    """The highest step any rank reported before ``mono`` (0: none)."""
    steps = ctx.timeline.steps
    before = steps.step[steps.mono < mono]
    return int(before.max()) if before.size else 0


def _first_past(ctx: CheckContext, point: int, after: float) -> float | None:
    """When a step past ``point`` was first reported after ``after`` (None: never)."""
    steps = ctx.timeline.steps
    mask = (steps.mono > after) & (steps.step > point)
    return float(np.min(steps.mono[mask])) if mask.any() else None
