"""The four questions of a drill, answered from tiny literal timelines."""

from __future__ import annotations

import pytest

from faultdrill.analysis import LOST_KINDS, answer_questions, injections, wall_offset
from faultdrill.timeline import Timeline
from tests.timelines import OLD, TL, WALL, first_run, restart


def test_answers_of_a_healthy_restart() -> None:
    a = answer_questions(restart().build())
    assert (a.injected_at, a.worker_lost_at, a.worker_lost_by) == (
        5.5,
        6.0,
        "worker_group_failed on n1",
    )
    assert (a.old_replica_stopped_at, a.old_replica_note) == (6.5, "")
    assert (a.new_replicas_ready_at, a.first_step_after_at) == (7.0, 8.0)
    assert a.resumed_from == {
        "checkpoint": "ckpt-4",
        "step": 4,
        "data_position": 16,
        "verified": True,
    }
    assert (a.old_incarnation, a.new_incarnation, a.recomputed_steps) == (0, 1, 1)
    assert (a.detect_s, a.ready_s, a.recover_s) == (0.5, 1.5, 2.5)
    assert a.times_json() == {
        "detect_s": 0.5,
        "recover_s": 2.5,
        "ready_s": 1.5,
        "recomputed_steps": 1,
    }


def test_answers_carry_wall_clock_times() -> None:
    a = answer_questions(restart().build())
    assert a.offset == pytest.approx(WALL)
    assert a.when(8.0) == {
        "wall": "2023-11-14T22:13:28.000+00:00",
        "mono": 8.0,
        "since_injection_s": 2.5,
    }
    assert a.when(None) is None
    q = a.questions_json()
    assert list(q) == [
        "worker_lost_at",
        "worker_lost_by",
        "old_replica_stopped_at",
        "old_replica_note",
        "new_replicas_ready_at",
        "first_step_after_at",
        "resumed_from",
    ]
    assert q["worker_lost_at"]["since_injection_s"] == 0.5
    assert q["new_replicas_ready_at"]["mono"] == 7.0


def test_wall_offset_is_the_median_of_the_clock_pairs() -> None:
    tl = TL().harness("a", 1.0).harness("b", 2.0).harness("c", 3.0)
    tl.edit("harness", "c", lambda r: True, ts=0.0)  # one bad clock reading
    assert wall_offset(tl.build()) == WALL
    assert wall_offset(TL().build()) == 0.0


def test_answers_after_a_restart_from_scratch() -> None:
    a = answer_questions(restart(resume=None).build())
    assert a.resumed_from == {"checkpoint": None, "step": 0, "data_position": 0, "verified": None}
    assert a.recomputed_steps == 5


def test_answers_without_injection() -> None:
    a = answer_questions(restart().drop("fault").build())
    assert (a.injected_at, a.worker_lost_by, a.detect_s, a.recover_s) == (
        None,
        "no fault was injected",
        None,
        None,
    )
    assert a.when(3.0) == {
        "wall": "2023-11-14T22:13:23.000+00:00",
        "mono": 3.0,
        "since_injection_s": None,
    }
    assert injections(restart().build())[0]["fault"] == "kill-worker"


def test_answers_without_a_platform_event() -> None:
    a = answer_questions(restart().drop("platform", "worker_group_failed").build())
    assert (a.worker_lost_at, a.worker_lost_by, a.detect_s) == (
        None,
        "no platform event after injection",
        None,
    )


@pytest.mark.parametrize("kind", sorted(LOST_KINDS))
def test_every_lost_kind_detects(kind: str) -> None:
    tl = restart().drop("platform", "worker_group_failed").platform(kind, 6.2, node="n1")
    assert answer_questions(tl.build()).worker_lost_by == f"{kind} on n1"


def test_platform_events_before_the_injection_or_of_other_kinds_do_not_detect() -> None:
    tl = restart().drop("platform", "worker_group_failed")
    tl.platform("worker_failed", 5.0, node="n0").platform("agent_heartbeat", 5.8)
    assert answer_questions(tl.build()).worker_lost_at is None


def test_the_old_replica_still_alive() -> None:
    tl = restart().drop("sampler", "proc_gone", lambda r: r["pid"] == OLD[1])
    a = answer_questions(tl.build())
    assert (a.old_replica_stopped_at, a.old_replica_note) == (
        None,
        "old replica pid(s) [101] still alive when observation ended",
    )


def test_the_old_replica_not_sampled() -> None:
    a = answer_questions(restart().drop("sampler").build())
    assert (a.old_replica_stopped_at, a.old_replica_note) == (
        None,
        "the process sampler did not see the old replicas",
    )
    tl = restart().drop("sampler", where=lambda r: r["pid"] == OLD[1])
    a = answer_questions(tl.build())
    assert (a.old_replica_stopped_at, a.old_replica_note) == (6.5, "pids [101] never sampled")


def test_answers_without_a_restart() -> None:
    tl = first_run(TL(), 5).inject(5.5).platform("worker_group_failed", 6.0, node="n1")
    tl.proc(OLD[0], 0, 0.05, 6.5).proc(OLD[1], 1, 0.05, 6.0)
    a = answer_questions(tl.build())
    assert (a.old_incarnation, a.new_incarnation) == (0, None)
    assert (a.new_replicas_ready_at, a.first_step_after_at, a.resumed_from) == (None, None, None)
    assert (a.recomputed_steps, a.recover_s) == (None, None)
    assert a.old_replica_stopped_at == 6.5  # the last of them to go


def test_answers_when_nothing_ran_at_injection() -> None:
    tl: Timeline = TL().inject(0.5).build()
    a = answer_questions(tl)
    assert (a.old_incarnation, a.old_replica_note) == (
        None,
        "no incarnation was running at injection",
    )
