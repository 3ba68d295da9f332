"""``bench.demo_time``'s split of an item's wall time into phases, on tiny literal
timelines with the exact expected seconds (the whole demo is measured by ``python
bench/run.py``; its command line is started by tests/test_bench_smoke.py)."""

from __future__ import annotations

from typing import Any

import pytest
from bench.demo_time import JOB_PHASES, item_split

from faultdrill.timeline import Timeline


def _ev(t: float, src: str, kind: str, **fields: Any) -> dict[str, Any]:
    return {"ts": 1000.0 + t, "mono": t, "src": src, "kind": kind, "task": "t", **fields}


def _step(t: float, step: int, rank: int) -> dict[str, Any]:
    return _ev(t, "probe", "step", step=step, rank=rank, pid=100 + rank, loss=1.0, samples=[])


def _item(job: list[dict[str, Any]], end: float) -> list[dict[str, Any]]:
    """An item around ``job``: bring-up 0-1 s, the job from 1 s to ``end``, the harness
    noticing it 0.5 s later, settle and teardown after, checks 0.25 s."""
    return [
        _ev(0.0, "harness", "item_start", item="x"),
        _ev(1.0, "harness", "phase", phase="bring-up", started_mono=0.0, seconds=1.0),
        _ev(1.0, "platform", "job_submitted"),
        *job,
        _ev(end, "platform", "job_state", state="succeeded"),
        _ev(end + 0.5, "harness", "phase", phase="job", started_mono=1.0, seconds=end - 0.5),
        _ev(end + 1.0, "harness", "phase", phase="settle", started_mono=end + 0.5, seconds=0.5),
        _ev(end + 1.5, "harness", "phase", phase="teardown", started_mono=end + 1, seconds=0.5),
        _ev(end + 1.5, "harness", "item_end"),
        _ev(end + 1.75, "harness", "phase", phase="checks", started_mono=end + 1.5, seconds=0.25),
    ]


def test_a_fault_free_job_is_start_rendezvous_worker_start_training_and_end() -> None:
    job = [
        _ev(3.0, "platform", "rdzv_start", node="n1"),
        _ev(3.5, "platform", "rdzv_start", node="n2"),
        _ev(4.0, "platform", "rdzv_complete", node="n1"),
        _ev(4.0, "platform", "rdzv_complete", node="n2"),
        *[_step(7.0 + s, s, r) for s in (1, 2, 3) for r in (0, 1)],
        _ev(11.0, "platform", "agent_exit", node="n1"),
    ]
    split = item_split(Timeline.from_records(_item(job, 11.0)))
    assert split is not None
    phases = split["phases_s"]
    assert {k: phases[k] for k in JOB_PHASES} == {
        "job start": 2.0,  # submitted at 1, first agent rendezvousing at 3
        "rendezvous": 1.0,
        "worker start": 4.0,  # until the first step at 8
        "training": 2.0,  # steps from 8 to 10
        "detection": 0.0,
        "restart": 0.0,
        "job end": 1.0,  # last step to the job's end at 11
    }
    assert (phases["bring-up"], phases["noticing end"], phases["settle"]) == (1.0, 0.5, 0.5)
    assert (phases["teardown"], phases["checks"], phases["other"]) == (0.5, 0.25, 0.0)
    assert split["wall_s"] == pytest.approx(12.75) == sum(phases.values())


def test_a_killed_worker_splits_into_detection_and_restart() -> None:
    job = [
        _ev(2.0, "platform", "rdzv_start", node="n1"),
        _ev(3.0, "platform", "rdzv_complete", node="n1"),
        *[_step(4.0 + s, s, 0) for s in (1, 2)],  # steps at 5 and 6
        _ev(6.5, "fault", "injected"),
        _ev(7.0, "platform", "worker_failed", node="n2"),
        _ev(8.0, "platform", "rdzv_start", node="n1"),
        _ev(9.0, "platform", "rdzv_complete", node="n1"),
        *[_step(10.0 + s, s, 0) for s in (1, 2)],  # steps at 11 and 12
    ]
    split = item_split(Timeline.from_records(_item(job, 13.0)))
    assert split is not None
    assert {k: split["phases_s"][k] for k in JOB_PHASES} == {
        "job start": 1.0,
        "rendezvous": 1.0,
        "worker start": 2.0,
        "training": 2.5,  # 5 to the injection at 6.5, then 11 to 12
        "detection": 0.5,  # injection to the worker's failure
        "restart": 4.0,  # the failure to the new incarnation's first step
        "job end": 1.0,
    }


def test_a_hang_without_an_injection_event_is_detection_from_the_last_step() -> None:
    """A worker that dies inside a fault's window (no injection event of its own): the
    time from the last step to the platform's reaction is waiting, not training."""
    job = [
        _ev(2.0, "platform", "rdzv_start", node="n1"),
        _ev(3.0, "platform", "rdzv_complete", node="n1"),
        *[_step(4.0 + s, s, 0) for s in (1, 2)],  # steps at 5 and 6
        _ev(10.0, "platform", "worker_group_failed", node="n1"),
        _step(12.0, 3, 0),
    ]
    split = item_split(Timeline.from_records(_item(job, 12.5)))
    assert split is not None
    got = {k: split["phases_s"][k] for k in ("training", "detection", "restart", "job end")}
    assert got == {"training": 1.0, "detection": 4.0, "restart": 2.0, "job end": 0.5}


def test_an_item_without_phase_events_has_no_split() -> None:
    assert item_split(Timeline.from_records([_ev(0.0, "platform", "job_submitted")])) is None
