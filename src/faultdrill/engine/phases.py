"""The harness's own time: each phase of an item, recorded as a ``harness``/``phase`` event.

An item's wall time is the job's own (from its submission to its end) plus the harness's
phases around it:

============  ======================================================================
bring-up      prepare the platform (groups, namespaces), write the job, prepare the fault
job           submit, watch, inject; ends when the harness notices the job ended
settle        after a natural end: wait (at most ``observation.settle_s``) until nothing
              of the job is left, then take the end-of-job snapshot
post-window   ``observation.post_s`` > 0 only: the samplers kept running after the settle
              snapshot, to see a replica that lingers or comes back
sampling      the closing observations: last sample, exit watch closed, checkpoint inventory,
              the job's last log lines (log-line mode), why a failed job failed
teardown      revert the fault, stop the job, release the platform, replay the ledger
checks        judge the item (every check, the four questions, goodput...)
report        the run's reports, shared equally by its items
============  ======================================================================

Events go to the item's ``phases`` stream (``events/phases.jsonl``), written in a
``finally``, so a phase that failed is timed too. ``checks`` and ``report`` happen after
the item's own sink closed and are appended by :func:`record_phase`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultdrill.events import EventSink

if TYPE_CHECKING:
    from faultdrill.timeline import Timeline

__all__ = ["PHASES", "STREAM", "PhaseClock", "harness_overhead", "record_phase"]

PHASES = ("bring-up", "job", "settle", "post-window", "sampling", "teardown", "checks", "report")
STREAM = "phases"


class PhaseClock:
    """Times phases of one item into its sink."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink

    @contextmanager
    def __call__(self, phase: str, **facts: Any) -> Iterator[None]:
        assert phase in PHASES, phase
        started = time.monotonic()
        try:
            yield
        finally:
            _emit(self.sink, phase, started, time.monotonic() - started, facts)


def record_phase(
    events_dir: Path, task_id: str, phase: str, started: float, seconds: float, **facts: Any
) -> None:
    """Append one phase that ran after the item's sink closed (checks, report)."""
    assert phase in PHASES, phase
    sink = EventSink(events_dir, task_id)
    try:
        _emit(sink, phase, started, seconds, facts)
    finally:
        sink.close()


def _emit(sink: EventSink, phase: str, started: float, seconds: float, facts: Any) -> None:
    sink.emit(
        "harness",
        "phase",
        stream=STREAM,
        phase=phase,
        started_mono=started,
        seconds=round(seconds, 6),
        **facts,
    )


def harness_overhead(tl: Timeline) -> dict[str, Any] | None:
    """The harness's own time in one recorded item, from its phase events: the item's wall
    time (``item_start`` to ``item_end``, plus its ``checks`` and ``report`` phases) minus
    the job's own (from ``job_submitted`` to the job's end: the last agent's exit where the
    sampler followed it by event, else the platform's end state), with each phase's
    seconds and ``noticing_end`` (the job phase beyond the job's own end). None for an item
    recorded without phase events."""
    phases = tl.of("harness", "phase")
    start, end = tl.first("harness", "item_start"), tl.first("harness", "item_end")
    submitted = tl.first("platform", "job_submitted")
    if not phases or start is None or end is None or submitted is None:
        return None
    seconds = dict.fromkeys(PHASES, 0.0)
    for e in phases:
        seconds[str(e.get("phase"))] = seconds.get(str(e.get("phase")), 0.0) + float(
            e.get("seconds") or 0.0
        )
    ends = [e.mono for e in tl.of("platform", "job_state") if e.get("state") != "running"]
    agents = [p.gone_mono for p in tl.iter_procs("agent")]
    if agents and None not in agents:
        job_end, source = max(a for a in agents if a is not None), "agent exits"
    elif ends:
        job_end, source = ends[-1], "job state"
    else:
        job_end, source = end.mono, "item end"
    job_s = max(0.0, job_end - submitted.mono)
    wall_s = end.mono - start.mono + seconds["checks"] + seconds["report"]
    harness = {k: round(v, 3) for k, v in seconds.items() if k != "job"}
    harness["noticing_end"] = round(max(0.0, seconds["job"] - job_s), 3)
    accounted = sum(harness.values())
    harness["other"] = round(max(0.0, wall_s - job_s - accounted), 3)
    return {
        "wall_s": round(wall_s, 3),
        "job_s": round(job_s, 3),
        "overhead_s": round(wall_s - job_s, 3),
        "phases_s": harness,
        "job_end_from": source,
    }
