"""The four questions of a drill, answered from tiny literal timelines."""

from __future__ import annotations

import pytest

from faultdrill.readings.analysis import (
    END_KINDS,
    LOST_KINDS,
    RODE_OUT,
    answer_questions,
    injections,
    wall_offset,
)
from faultdrill.timeline import Timeline
from tests.records import as_json
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
    assert as_json(a.resumed_from) == {
        "checkpoint": "ckpt-4",
        "step": 4,
        "data_position": 16,
        "verified": True,
    }
    assert (a.old_incarnation, a.new_incarnation, a.recomputed_steps) == (0, 1, 1)
    assert (a.detect_s, a.ready_s, a.recover_s) == (0.5, 1.5, 2.5)
    assert a.times().to_json() == {
        "detect_s": 0.5,
        "recover_s": 2.5,
        "ready_s": 1.5,
        "recomputed_steps": 1,
    }


def test_answers_carry_wall_clock_times() -> None:
    a = answer_questions(restart().build())
    assert a.offset == pytest.approx(WALL)
    assert as_json(a.when(8.0)) == {
        "wall": "2023-11-14T22:13:28.000+00:00",
        "mono": 8.0,
        "since_injection_s": 2.5,
    }
    assert a.when(None) is None
    q = a.questions().to_json()
    assert list(q) == [
        "worker_lost_at",
        "worker_lost_by",
        "worker_lost_source",
        "old_replica_stopped_at",
        "old_replica_note",
        "new_replicas_ready_at",
        "resources_ready_at",
        "first_step_after_at",
        "resumed_from",
        "note",
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
    assert as_json(a.resumed_from) == {
        "checkpoint": None,
        "step": 0,
        "data_position": 0,
        "verified": None,
    }
    assert a.recomputed_steps == 5


def test_answers_without_injection() -> None:
    a = answer_questions(restart().drop("fault").build())
    assert (a.injected_at, a.worker_lost_by, a.detect_s, a.recover_s) == (
        None,
        "no fault was injected",
        None,
        None,
    )
    assert as_json(a.when(3.0)) == {
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


# --- a fault the job rode out; platform chatter at the normal end -------------------


def ride_out(*, end_chatter: bool = True) -> TL:
    """Link jitter at t=5.5 that the job rides out: one incarnation runs steps 1..8 to a
    clean end at 9.0; the agents say ``workers_succeeded`` at 9.3 and, closing the
    rendezvous, ``rdzv_connection_error`` at 9.4 (as torchrun does)."""
    tl = first_run(TL().job("running", 0.0), 8).inject(5.5, fault="link-loss", target="node n2")
    for rank, pid in enumerate(OLD):
        tl.proc(pid, rank, 0.05, 9.5, node=f"n{rank}").end(rank, pid, 8, 9.0)
    if end_chatter:
        tl.platform("workers_succeeded", 9.3, node="n1")
        tl.platform("rdzv_connection_error", 9.4, node="n2")
    return tl.job("succeeded", 9.6)


def test_a_fault_ridden_out_answers_nothing_and_says_why() -> None:
    a = answer_questions(ride_out().build())
    assert (a.worker_lost_at, a.worker_lost_by, a.detect_s) == (None, "", None)
    assert (a.old_replica_stopped_at, a.old_replica_note) == (None, "")
    assert (a.new_replicas_ready_at, a.recover_s, a.ready_s, a.resumed_from) == (
        None,
        None,
        None,
        None,
    )
    assert (a.old_incarnation, a.new_incarnation) == (0, None)
    assert a.note == RODE_OUT == "no replica was lost: the job rode the fault out"
    assert a.questions().to_json()["note"] == RODE_OUT


def test_a_ride_out_without_run_end_is_told_by_the_job_state() -> None:
    tl = ride_out().drop("probe", "run_end")
    assert answer_questions(tl.build()).note == RODE_OUT


@pytest.mark.parametrize("end", sorted(END_KINDS))
def test_lost_kinds_after_the_successful_end_do_not_detect(end: str) -> None:
    # A restart whose old replicas are lost at 6.0, then chatter after the new one finished:
    # only the decision before the end counts.
    tl = restart().drop("platform", "worker_group_failed")
    tl.platform(end, 11.2, node="n1").platform("rdzv_connection_error", 11.3, node="n2")
    a = answer_questions(tl.build())
    assert (a.worker_lost_at, a.worker_lost_by) == (None, "no platform event after injection")
    a = answer_questions(tl.platform("worker_failed", 6.1, node="n2").build())
    assert (a.worker_lost_at, a.worker_lost_by, a.detect_s) == (6.1, "worker_failed on n2", 0.6)


def test_lost_kinds_after_the_final_run_end_do_not_detect() -> None:
    # No agent said "succeeded": the final incarnation's clean run_end (t=10) bounds it.
    tl = restart().drop("platform", "worker_group_failed").platform("rdzv_closed", 10.5)
    assert answer_questions(tl.build()).worker_lost_at is None


def test_a_fault_not_ridden_out_keeps_its_detection() -> None:
    # No restart and the job failed: the platform's decision is real, and the note says why
    # questions 3 and 4 have no answer.
    tl = first_run(TL(), 5).inject(5.5).platform("worker_group_failed", 6.0, node="n1")
    a = answer_questions(tl.job("failed", 7.0).build())
    assert (a.worker_lost_at, a.detect_s) == (6.0, 0.5)
    assert a.note == "no new incarnation started after the fault"


# --- a platform with deciders of its own (Kubernetes) -------------------------------------


def _node_down_on_kubernetes() -> TL:
    """The stock restart as a node-down on Kubernetes (times compressed): the torchrun
    agent on n0 notices the dead peer at 6.0 (its own symptom), the node controller deems n1
    lost at 6.3, the pod is evicted at 6.6 and its replacement runs at 6.7 on n2; the new
    incarnation announces itself at 7.0."""
    tl = restart().drop("platform", "worker_group_failed")
    tl.platform("deciders", 0.0, sources=["node-lifecycle-controller", "kube-apiserver"])
    tl.platform("dead_node", 6.0, node="n0", source="torchrun-agent")
    tl.platform("node_lost", 6.3, node="n1", source="node-lifecycle-controller", ready="Unknown")
    tl.platform("replica_lost", 6.6, node="n1", pod="job-x", source="kube-apiserver")
    tl.platform("replica_started", 6.7, node="n2", pod="job-y", source="kubelet")
    return tl


def test_the_platforms_own_decider_answers_and_the_first_noticer_is_said() -> None:
    a = answer_questions(_node_down_on_kubernetes().build())
    assert (a.worker_lost_at, a.worker_lost_source) == (6.3, "node-lifecycle-controller")
    assert a.worker_lost_by == (
        "node_lost on n1 (node-lifecycle-controller); first noticed by dead_node on n0 "
        "(torchrun-agent), 0.3 s earlier"
    )
    assert a.detect_s == 0.8
    assert a.resources_ready_at == 6.7
    assert a.questions().to_json()["resources_ready_at"]["since_injection_s"] == 1.2


def test_without_deciders_the_first_decision_answers_as_before() -> None:
    tl = _node_down_on_kubernetes().drop("platform", "deciders")
    a = answer_questions(tl.build())
    assert (a.worker_lost_at, a.worker_lost_source) == (6.0, "torchrun-agent")
    assert a.worker_lost_by == "dead_node on n0 (torchrun-agent)"


def test_deciders_that_decided_nothing_are_said() -> None:
    tl = _node_down_on_kubernetes().drop("platform", "node_lost").drop("platform", "replica_lost")
    a = answer_questions(tl.build())
    assert a.worker_lost_at == 6.0
    assert a.worker_lost_by == (
        "dead_node on n0 (torchrun-agent); the platform's own deciders (kube-apiserver, "
        "node-lifecycle-controller) decided nothing"
    )


def test_no_replacement_started_means_no_resources_ready_time() -> None:
    assert answer_questions(restart().build()).resources_ready_at is None
