"""How a fault disrupted the job, and how the disruption ended: hang or crash.

From one item's timeline, for the first fault injected:

* **ending**: ``unaffected`` (no pause in progress longer than the threshold), ``stall``
  (progress paused, then went on without a restart), ``crash`` (a process failed and the
  platform acted on it, a *decision* such as ``worker_failed``, within the threshold of
  progress stopping; a worker merely logging an error is a *symptom*, not a decision) or ``hang`` (progress
  stopped and nothing noticed for longer than the threshold; or the failure was noticed
  but the restart then waited in rendezvous longer than ``RDZV_HANG_S``). A hang says
  which phase hung (``detection`` or ``rendezvous``) and what ended it:
  the fault's end (detection only followed the revert), a harness stop condition, the
  rendezvous timeout, a time consistent with the gloo collective timeout, or the job's
  end. The threshold is ``max(1.5 s, 10 x the median step interval before the fault)``.
* **window** (timed faults: storage and control-plane outages): whether training went on
  inside the fault window (step rate before and during), whether a restart was
  attempted inside it and when its rendezvous completed (inside the window, or only after
  the fault ended), and what the platform did in the seconds after the fault ended.

Descriptive only: checks judge; this says what happened, for the report.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from faultdrill.events import Event
from faultdrill.readings.analysis import LOST_KINDS, injections, job_done_mono
from faultdrill.records import Disruption, Ending, FaultWindow, plain
from faultdrill.timeline import Timeline

__all__ = ["describe_disruption"]

#: Platform events that are the platform acting on a loss (a decision), and those that are
#: only a process saying something went wrong (a symptom: a worker's "connection reset by
#: peer" or "timed out" line). A hang is the time from progress stopping to a decision.
SYMPTOMS = frozenset({"peer_error", "timeout_fired"})
DECISIONS = LOST_KINDS - SYMPTOMS

#: The revert's own effects (a SIGCONT, a remount) can precede its ``reverted`` event by
#: milliseconds: reactions this close before it count as after the fault ended.
_GRACE = 0.2

_RESTART_KINDS = frozenset(
    {"worker_failed", "worker_group_failed", "workers_stopping", "rdzv_start", "membership_change"}
)


def _rel(t0: float, mono: float | None) -> float | None:
    return None if mono is None else round(mono - t0, 3)


def _label(e: Event) -> str:
    where = e.get("node") or (f"rank {e.get('rank')}" if e.get("rank") is not None else "")
    return f"{e.kind}" + (f" on {where}" if where else "")


def _rate(monos: np.ndarray, lo: float, hi: float) -> float | None:
    if hi - lo <= 0.2:
        return None
    n = int(((monos >= lo) & (monos < hi)).sum())
    return round(n / (hi - lo), 2)


class _EndingHead(TypedDict, total=False):
    """An ending's kind and how it came about (the first keys of its :class:`Ending`)."""

    kind: str
    how: str
    phase: str
    ended_by: str


class _EndingTimes(TypedDict):
    """The moments behind an ending (the last keys of its :class:`Ending`)."""

    first_symptom: str | None
    first_symptom_at_s: float | None
    threshold_s: float
    progress_stopped_at_s: float | None
    progress_resumed_at_s: float | None
    failure_noticed_at_s: float | None
    failure_noticed_by: str | None
    stop_condition: object


@dataclass(frozen=True)
class _Aftermath:
    """What followed the first injection, the moments its ending is judged from.

    ``t0`` is the injection, ``theta`` the stall threshold; ``lost`` the platform's first
    decision and ``symptom`` its first symptom before the job was done; ``gap_start`` /
    ``gap_end`` the first pause longer than ``theta`` (``gap_end`` None: it never resumed).
    """

    t0: float
    theta: float
    revert: Event | None
    stop: Event | None
    lost: Event | None
    symptom: Event | None
    gap_start: float | None
    gap_end: float | None


def describe_disruption(tl: Timeline, *, gloo_s: float | None = None) -> Disruption | None:
    """What the first injected fault did to progress and how it ended (None: no fault)."""
    inj = injections(tl)
    if not inj:
        return None
    first = inj[0]
    t0 = first.mono
    monos = _lowest_rank_steps(tl)
    aftermath = _aftermath(tl, monos, t0)
    ending = Ending.model_validate(
        plain({**_ending(tl, aftermath, gloo_s), **_ending_times(aftermath)})
    )
    if first.get("duration_s") is None:
        return Disruption(
            fault=first.get("fault"), injected_step=first.get("at_step"), ending=ending
        )
    return Disruption(
        fault=first.get("fault"),
        injected_step=first.get("at_step"),
        ending=ending,
        window=_window(tl, first, aftermath.revert, monos, t0),
    )


def _lowest_rank_steps(tl: Timeline) -> np.ndarray:
    """The sorted monotonic times of the lowest rank's steps (empty without steps)."""
    st = tl.steps
    if not len(st):
        return np.zeros(0)
    low = st.rank == st.rank.min()
    return np.sort(st.mono[low])


def _stall_threshold(monos: np.ndarray, t0: float) -> float:
    """``max(1.5 s, 10 x the median step interval in the 5 s before t0)``; the interval is
    taken as 0.1 s when fewer than three steps fell in those 5 s."""
    before = monos[(monos < t0) & (monos >= t0 - 5.0)]
    typical = float(statistics.median(np.diff(before))) if before.size > 2 else 0.1
    return max(1.5, 10.0 * typical)


def _first_platform_event(
    tl: Timeline, lo: float, hi: float, kinds: frozenset[str]
) -> Event | None:
    """The first platform event of one of ``kinds`` in ``[lo, hi)``, or None."""
    return next(
        (e for e in tl.events if lo <= e.mono < hi and e.src == "platform" and e.kind in kinds),
        None,
    )


def _aftermath(tl: Timeline, monos: np.ndarray, t0: float) -> _Aftermath:
    """Gather the events and the pause in progress that followed the injection at ``t0``."""
    theta = _stall_threshold(monos, t0)
    stop = tl.first("harness", "stop_condition", after=t0)
    # What the platform says once the workers have finished (a peer missing from the exit
    # barrier, a keep-alive after the store went) is shutdown, not a disruption of training.
    done = job_done_mono(tl, t0)
    lost = _first_platform_event(tl, t0, done, DECISIONS)
    gap_start, gap_end = _first_pause(monos, t0, theta, stop, lost)
    return _Aftermath(
        t0=t0,
        theta=theta,
        revert=tl.first("fault", "reverted", after=t0),
        stop=stop,
        lost=lost,
        symptom=_first_platform_event(tl, t0, done, SYMPTOMS),
        gap_start=gap_start,
        gap_end=gap_end,
    )


def _first_pause(
    monos: np.ndarray, t0: float, theta: float, stop: Event | None, lost: Event | None
) -> tuple[float | None, float | None]:
    """(start, end) of the first pause in progress after ``t0`` longer than ``theta``.

    End None: progress never resumed, though it had stopped for longer than ``theta`` before
    the stop condition or the platform's decision, or the decision came after the last step.
    (None, None): no such pause.
    """
    after = monos[monos >= t0]
    prev = float(monos[monos < t0].max()) if (monos < t0).any() else t0
    for m in after:
        if m - max(prev, t0) > theta:
            return prev, float(m)
        prev = float(m)
    end_ref = stop.mono if stop is not None else (lost.mono if lost is not None else None)
    stalled_to_end = end_ref is not None and end_ref - max(prev, t0) > theta
    lost_after_last = lost is not None and (after.size == 0 or lost.mono > float(after.max()))
    if stalled_to_end or lost_after_last:
        return prev, None
    return None, None


def _ending(tl: Timeline, a: _Aftermath, gloo_s: float | None) -> _EndingHead:
    """The ending's kind (unaffected, stall, crash, hang) and how it came about."""
    new_inc = tl.incarnation_after(a.t0)
    if a.gap_start is None and new_inc is None:
        return {
            "kind": "unaffected",
            "how": f"training went on with no pause longer than {a.theta:.1f} s",
        }
    if a.lost is None or (a.gap_end is not None and a.lost.mono > a.gap_end and new_inc is None):
        return _unnoticed_ending(a)
    return _noticed_ending(tl, a, a.lost, gloo_s)


def _unnoticed_ending(a: _Aftermath) -> _EndingHead:
    """The platform never acted (or acted only after progress had resumed without a
    restart): a stall if progress resumed, else a hang ended by the stop condition or the
    end of observation."""
    stop = a.stop
    paused = (a.gap_end or (stop.mono if stop else a.t0)) - (a.gap_start or a.t0)
    if a.gap_end is not None:
        by = "by itself"
        if a.revert is not None and (a.gap_start or a.t0) <= a.revert.mono <= a.gap_end:
            by = f"when the fault ended ({a.gap_end - a.revert.mono:.2f} s after the revert)"
        return {
            "kind": "stall",
            "how": f"progress paused {paused:.1f} s, then went on without a restart, {by}",
        }
    by = (
        f"the stop condition {stop.get('condition')} ({stop.get('detail')})"
        if stop is not None
        else "the end of observation"
    )
    return {
        "kind": "hang",
        "how": f"no progress and no failure noticed for {paused:.1f} s; ended by {by}",
        "ended_by": "stop-condition" if stop is not None else "observation-end",
    }


def _noticed_ending(tl: Timeline, a: _Aftermath, lost: Event, gloo_s: float | None) -> _EndingHead:
    """The platform acted (``lost``): a crash if it did so within the threshold of progress
    stopping (unless the restart then hung in rendezvous), else a hang in detection."""
    stopped_at = a.gap_start if a.gap_start is not None else a.t0
    delay = lost.mono - max(stopped_at, a.t0)
    if delay <= a.theta:
        crash: _EndingHead = {
            "kind": "crash",
            "how": f"a process failed; the platform noticed ({_label(lost)}) "
            f"{max(0.0, delay):.2f} s after progress stopped",
        }
        stuck = _rendezvous_hang(tl, lost.mono, a.revert, a.stop)
        return stuck if stuck is not None else crash
    ended_by, why = _detection_hang_ended_by(a, lost, delay, gloo_s)
    symptom = a.symptom
    return {
        "kind": "hang",
        "phase": "detection",
        "how": f"progress stopped and the platform did not act for {delay:.1f} s"
        + (
            f" (a process reported {symptom.kind} {symptom.mono - a.t0:+.2f} s after injection)"
            if symptom is not None and symptom.mono < lost.mono
            else ""
        )
        + f"; ended by {why}",
        "ended_by": ended_by,
    }


def _detection_hang_ended_by(
    a: _Aftermath, lost: Event, delay: float, gloo_s: float | None
) -> tuple[str, str]:
    """(ended_by, why) for a hang in detection that the platform's decision ``lost`` ended
    ``delay`` seconds after progress stopped; the first explanation that fits wins."""
    stop, symptom, revert = a.stop, a.symptom, a.revert
    if stop is not None and stop.mono <= lost.mono + 0.5:
        return "stop-condition", f"the stop condition {stop.get('condition')}"
    if lost.kind == "rdzv_timeout":
        return "rdzv-timeout", "torchrun's rendezvous timeout"
    if (
        symptom is not None
        and symptom.kind == "timeout_fired"
        and symptom.mono <= lost.mono + _GRACE
    ):
        return (
            f"{symptom.get('timeout') or 'a'}-timeout",
            f"the {symptom.get('timeout') or ''} timeout firing ({_label(symptom)})",
        )
    if revert is not None and -_GRACE <= lost.mono - revert.mono <= a.theta:
        return "fault-end", (
            f"the fault's end: {_label(lost)} came "
            f"{max(0.0, lost.mono - revert.mono):.2f} s after the fault was reverted"
        )
    if gloo_s is not None and abs(delay - gloo_s) <= 0.25 * gloo_s + 2.0:
        return "gloo-timeout", f"a time consistent with the gloo collective timeout ({gloo_s:g} s)"
    return "platform", f"the platform finally noticed ({_label(lost)})"


def _ending_times(a: _Aftermath) -> _EndingTimes:
    """The moments behind an ending, in seconds after the injection, for the report."""
    t0, symptom, lost, stop = a.t0, a.symptom, a.lost, a.stop
    return {
        "first_symptom": _label(symptom) if symptom else None,
        "first_symptom_at_s": _rel(t0, symptom.mono if symptom else None),
        "threshold_s": round(a.theta, 3),
        "progress_stopped_at_s": _rel(t0, a.gap_start),
        "progress_resumed_at_s": _rel(t0, a.gap_end),
        "failure_noticed_at_s": _rel(t0, lost.mono if lost else None),
        "failure_noticed_by": _label(lost) if lost else None,
        "stop_condition": stop.get("condition") if stop else None,
    }


#: A restart's rendezvous that takes longer than this is a hang (a healthy one takes
#: about ``last_call_timeout``, 1 s in the demo).
RDZV_HANG_S = 3.0


def _rendezvous_hang(
    tl: Timeline, noticed: float, revert: Event | None, stop: Event | None
) -> _EndingHead | None:
    """The failure was noticed at once, but did the restart then hang in rendezvous?"""
    start = next(
        (
            e
            for e in tl.events
            if e.src == "platform" and e.kind == "rdzv_start" and e.mono >= noticed
        ),
        None,
    )
    if start is None:
        return None
    done = tl.first("platform", "rdzv_complete", after=start.mono)
    timeout = tl.first("platform", "rdzv_timeout", after=start.mono)
    end = min(
        (e for e in (done, timeout, stop) if e is not None), key=lambda e: e.mono, default=None
    )
    waited = (end.mono if end is not None else tl.events[-1].mono) - start.mono
    if waited <= RDZV_HANG_S:
        return None
    if end is None:
        ended_by, why = "observation-end", "the end of observation"
    elif end is stop:
        ended_by, why = "stop-condition", f"the stop condition {stop.get('condition')}"
    elif end is timeout:
        ended_by, why = "rdzv-timeout", "torchrun's rendezvous timeout"
    elif revert is not None and start.mono <= revert.mono <= end.mono:
        ended_by = "fault-end"
        why = (
            f"the fault's end: rendezvous completed {end.mono - revert.mono:.2f} s after the revert"
        )
    else:
        ended_by, why = "platform", "the rendezvous completing by itself"
    return {
        "kind": "hang",
        "phase": "rendezvous",
        "how": f"the failure was noticed at once ({_label(start)}), but the restart hung in "
        f"rendezvous for {waited:.1f} s; ended by {why}",
        "ended_by": ended_by,
    }


def _window(
    tl: Timeline, inj: Event, revert: Event | None, monos: np.ndarray, t0: float
) -> FaultWindow:
    t1 = revert.mono if revert is not None else t0 + float(inj["duration_s"])
    probe = tl.first("fault", "restart_probe", after=t0)
    own_end = probe.mono if probe is not None and probe.mono < t1 else t1
    before = _rate(monos, t0 - min(5.0, own_end - t0 + 1.0), t0)
    during = _rate(monos, t0, own_end)
    platform = [e for e in tl.events if e.src == "platform" and e.mono >= t0]
    attempt = next((e for e in platform if e.kind in _RESTART_KINDS), None)
    rdzv = (
        next((e for e in platform if e.kind == "rdzv_complete" and e.mono >= attempt.mono), None)
        if attempt is not None
        else None
    )
    restart: dict[str, object] | None = None
    if probe is not None or attempt is not None:
        noticed_in = attempt is not None and attempt.mono < t1 - _GRACE
        rdzv_in = rdzv is not None and rdzv.mono < t1 - _GRACE
        if attempt is None:
            verdict = "no restart began"
        elif not noticed_in:
            verdict = (
                f"the failure was not even noticed until {max(0.0, attempt.mono - t1):.2f} s "
                "after the fault ended"
            )
        elif rdzv_in:
            verdict = "a restart rendezvoused while the fault was on"
        elif rdzv is not None:
            verdict = (
                f"a restart began inside the fault window but rendezvoused only "
                f"{rdzv.mono - t1:.2f} s after it ended"
            )
        else:
            verdict = "a restart began inside the fault window and never rendezvoused"
        restart = {
            "probe_killed_at_s": _rel(t0, probe.mono if probe else None),
            "restart_began_at_s": _rel(t0, attempt.mono if attempt else None),
            "began_by": _label(attempt) if attempt else None,
            "rendezvous_at_s": _rel(t0, rdzv.mono if rdzv else None),
            "rendezvous_during_fault": rdzv_in,
            "summary": verdict,
        }
    after: list[Event] = []
    for e in platform:
        fresh = not any(_label(a) == _label(e) for a in after)
        if t1 - _GRACE <= e.mono <= t1 + 3.0 and e.kind != "agent_log" and fresh:
            after.append(e)
    next_step = monos[monos >= t1]
    return FaultWindow.model_validate(
        plain(
            {
                "start_s": 0.0,
                "end_s": _rel(t0, t1),
                "steps_per_s_before": before,
                "steps_per_s_during": during,
                "training_affected": (
                    None if before is None or during is None else bool(during < 0.5 * before)
                ),
                "restart": restart,
                "after_return": {
                    "platform_events": [
                        {"at_s": _rel(t0, e.mono), "what": _label(e)} for e in after[:12]
                    ],
                    "first_step_at_s": _rel(t0, float(next_step[0]) if next_step.size else None),
                },
            }
        )
    )
