"""The harness's own time: each phase of an item, recorded as a ``harness``/``phase`` event.

An item's wall time is the job's own (from its submission to its end) plus the harness's
phases around it:

============  ======================================================================
bring-up      prepare the platform (groups, namespaces), write the job, prepare the fault
job           submit, watch, inject; ends when the harness notices the job ended
settle        after a natural end: wait (at most ``observation.settle_s``) until nothing
              of the job is left, then take the end-of-job snapshot
sampling      the closing observations: last sample, exit watch closed, checkpoint inventory
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
from typing import Any

from faultdrill.events import EventSink

__all__ = ["PHASES", "STREAM", "PhaseClock", "record_phase"]

PHASES = ("bring-up", "job", "settle", "sampling", "teardown", "checks", "report")
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
