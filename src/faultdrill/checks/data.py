"""Data-source evidence: how the job lived through a ``data-outage`` (its data directory
failing or hanging for a while): whether its reads felt the outage, whether it retried,
stalled or crashed, and when training went on after the data came back. Whether a sample
was skipped or read twice across the outage is ``progress.sample-ledger``'s; a loader
that says it skipped data is a failure here too.

The job's own words come from the reference workload's file-backed dataset (probe events
``data_read_failed``, ``data_read_recovered``, ``data_read_skipped``); a job without them
is judged on its steps alone.
"""

from __future__ import annotations

import numpy as np

from faultdrill.checks.api import CheckContext, Finding, Msg, Verdict, check
from faultdrill.events import Event

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL
NAME = "progress.data-outage"
#: The ``injected`` event is written once the outage is in place (the mirror acknowledged
#: it), so the job's first failed read may come this much before it.
_APPLY_S = 2.0


def _window(ctx: CheckContext, inj: Event) -> tuple[float, float]:
    """The outage's start and end (the revert; or when it was due, if never recorded)."""
    rev = ctx.timeline.first("fault", "reverted", after=inj.mono)
    if rev is not None:
        return inj.mono, rev.mono
    dur = inj.get("duration_s")
    return inj.mono, inj.mono + float(dur) if dur is not None else float("inf")


def _how(ctx: CheckContext, t0: float, t1: float) -> Msg:
    """What the job did during the outage, from its events and incarnations."""
    tl = ctx.timeline
    restarted = [i for i in tl.incarnations if i.starts and i.started_mono > t0]
    if restarted:
        return Msg("progress.data-outage.how.restarted", inc=restarted[0].index)
    failed = [e for e in tl.of("probe", "data_read_failed") if t0 - _APPLY_S <= e.mono <= t1 + 1.0]
    if failed:
        recovered = tl.of("probe", "data_read_recovered")
        waited = max((float(e.get("waited_s") or 0.0) for e in recovered), default=0.0)
        return Msg("progress.data-outage.how.retried", n=len(failed), waited_s=waited)
    return Msg("progress.data-outage.how.stalled")


@check(NAME, "progress")
def data_outage(ctx: CheckContext) -> list[Finding]:
    """After a data outage, training went on (no step lost to it) and the job's reads
    felt it: it did not keep training through most of it, and no loader reported skipping
    data."""
    tl = ctx.timeline
    inj = next((e for e in tl.of("fault", "injected") if e.get("fault") == "data-outage"), None)
    if inj is None:
        return [ctx.finding(NAME, P, Msg("progress.data-outage.not-outage"))]
    t0, t1 = _window(ctx, inj)
    mono = tl.steps.mono
    skipped = tl.of("probe", "data_read_skipped")  # whenever: skipped data is lost data
    if skipped:
        positions = sorted({int(e.get("position", -1)) for e in skipped})
        return [
            ctx.finding(
                NAME,
                F,
                Msg("progress.data-outage.skipped", n=len(skipped), positions=positions[:8]),
                skipped=len(skipped),
            )
        ]
    late = mono[(mono > t0 + (t1 - t0) / 2) & (mono <= t1)]
    if late.size:
        return [
            ctx.finding(
                NAME,
                R,
                Msg(
                    "progress.data-outage.not-felt",
                    n=int(late.size),
                    at_s=float(late.max()) - t0,
                    seconds=t1 - t0,
                ),
            )
        ]
    after = mono[mono > t1]
    if after.size == 0:
        return [
            ctx.finding(NAME, F, Msg("progress.data-outage.no-progress-after", seconds=t1 - t0))
        ]
    before = mono[mono <= t0]
    last_s = float(before.max()) - t0 if before.size else None
    next_s = float(np.min(after)) - t0
    return [
        ctx.finding(
            NAME,
            P,
            Msg(
                "progress.data-outage.recovered",
                mode=inj.get("mode"),
                seconds=t1 - t0,
                how=_how(ctx, t0, t1),
                next_s=next_s,
                after_s=next_s - (t1 - t0),
                last=Msg("progress.data-outage.last", last_s=last_s) if last_s is not None else "",
            ),
            resumed_after_s=next_s - (t1 - t0),
        )
    ]
