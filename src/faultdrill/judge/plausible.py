"""Evidence outside physical bounds: what no recording of a real drill holds.

A recorded run is untrusted input. Lines can each keep the event contract
(:func:`~faultdrill.events.malformed`) and still describe something that cannot have
happened: a wall-clock time centuries away from the run, a step an hour after the item
ended, a world of no worker or of a billion, a rank announced by a process the sampler never
saw on a node it was watching, a fault or harness event written twice to the microsecond.
Judging such a timeline would turn nonsense into a verdict; :func:`implausible` says what
is wrong, and the judge makes every evidence category retest with those reasons (never a
pass, never a failure built on it).

Pure: timeline and plan in, messages out.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np

from faultdrill.checks.api import Msg
from faultdrill.events import Event
from faultdrill.plan import Plan
from faultdrill.timeline import Timeline

__all__ = ["MARGIN_S", "WORLD_FACTOR", "implausible"]

#: How far (seconds) an event may lie outside the item's window (its harness ``item_start``
#: to ``item_end``), and how far an event's wall clock may drift from the monotonic clock
#: against the item's start (NTP slews by well under a second an hour; a step of the clock
#: by a few minutes at most). Past this, the time is not a real recording's.
MARGIN_S = 3600.0
#: A world larger than this many times the plan's largest (nodes and spares, all their
#: processes) cannot be the plan's job.
WORLD_FACTOR = 4
#: How long (seconds) the sampler must have watched on after an announcement for a process
#: it never saw to count as unknown (a rank imports its framework for seconds before it
#: announces, so the sampler, at 1 Hz or faster, has seen it long before).
_WATCHED_S = 2.0


def implausible(tl: Timeline, plan: Plan) -> list[Msg]:
    """Why ``tl`` cannot be a real recording of ``plan``'s job (empty: nothing found)."""
    found = [
        _wall_clock(tl),
        _outside_window(tl),
        _world_sizes(tl, plan),
        _unknown_announcers(tl),
        _duplicates(tl),
    ]
    return [m for m in found if m is not None]


def _first(tl: Timeline, src: str, kind: str) -> Event | None:
    return next((e for e in tl.events if e.src == src and e.kind == kind), None)


def _wall_clock(tl: Timeline) -> Msg | None:
    """Events whose wall clock (``ts``) disagrees with their monotonic time by more than
    :data:`MARGIN_S` against the item's start (or the median); ts 0: not stamped."""
    stamped = [e for e in tl.events if e.ts != 0.0]
    if not stamped:
        return None
    start = _first(tl, "harness", "item_start")
    offsets = np.array([e.ts - e.mono for e in stamped], dtype=np.float64)
    ref = start.ts - start.mono if start is not None and start.ts else float(np.median(offsets))
    off = ~(np.abs(offsets - ref) <= MARGIN_S)  # NaN and inf count as off too
    if not off.any():
        return None
    first = stamped[int(np.flatnonzero(off)[0])]
    return Msg(
        "timeline.implausible.wall-clock",
        n=int(off.sum()),
        event=f"{first.src}/{first.kind}",
        ts=first.ts,
    )


def _outside_window(tl: Timeline) -> Msg | None:
    """Events and steps more than :data:`MARGIN_S` before the item started or after it
    ended (no window without the harness's item_start)."""
    start = _first(tl, "harness", "item_start")
    if start is None:
        return None
    end = _first(tl, "harness", "item_end")
    lo = start.mono - MARGIN_S
    hi = (end.mono if end is not None else float("inf")) + MARGIN_S
    events = sum(not (lo <= e.mono <= hi) for e in tl.events)
    steps = int(((tl.steps.mono < lo) | (tl.steps.mono > hi)).sum()) if len(tl.steps) else 0
    if not events and not steps:
        return None
    return Msg("timeline.implausible.window", n=events + steps, margin_s=int(MARGIN_S))


def _world_sizes(tl: Timeline, plan: Plan) -> Msg | None:
    """A replica announcing a world of no worker, or far more than the plan can hold."""
    res = plan.resources
    most = WORLD_FACTOR * (res.nodes + res.spares) * res.procs_per_node
    for e in tl.of("probe", "run_start"):
        size = e.get("world_size")
        if size is not None and not 1 <= size <= most:
            return Msg(
                "timeline.implausible.world-size",
                pid=e.get("pid"),
                rank=e.get("rank"),
                size=size,
                most=most,
            )
    return None


def _unknown_announcers(tl: Timeline) -> Msg | None:
    """A rank announced (``run_start``) by a process the sampler never saw, on a node where
    it saw the job's other announcers, while it was sampling: someone else's line."""
    sampled = [e for e in tl.events if e.src == "sampler"]
    seen = {e.get("pid") for e in sampled if e.kind in ("proc_seen", "proc_exit", "proc_gone")}
    starts = tl.of("probe", "run_start")
    watched = {
        e.get("node")
        for e in sampled
        if e.kind == "proc_seen" and e.get("pid") in {s.get("pid") for s in starts}
    }
    if not sampled or not watched:
        return None
    first, last = sampled[0].mono, sampled[-1].mono
    unknown = [
        s
        for s in starts
        if s.get("pid") not in seen
        and s.get("node") in watched
        and first < s.mono < last - _WATCHED_S
    ]
    if not unknown:
        return None
    s = unknown[0]
    return Msg(
        "timeline.implausible.unknown-pid",
        n=len(unknown),
        pid=s.get("pid"),
        rank=s.get("rank"),
        node=s.get("node"),
    )


def _duplicates(tl: Timeline) -> Msg | None:
    """Fault and harness events recorded twice, identical to the microsecond: their writers
    stamp each event afresh, so a copy was added after the fact."""
    keys = Counter(
        (e.src, e.kind, e.ts, e.mono, json.dumps(e.fields, sort_keys=True, default=str))
        for e in tl.events
        if e.src in ("fault", "harness")
    )
    twice = [k for k, n in keys.items() if n > 1]
    if not twice:
        return None
    return Msg(
        "timeline.implausible.duplicate",
        n=sum(keys[k] - 1 for k in twice),
        event=f"{twice[0][0]}/{twice[0][1]}",
    )
