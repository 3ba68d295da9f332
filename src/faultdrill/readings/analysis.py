"""The four questions of a drill, answered from its timeline.

For the first fault injected in a scenario: when was the worker deemed lost, when did the
old replica stop, when were new replicas ready, and from which checkpoint, step and data
position did training continue. From those: detection time, recovery time, recomputed
steps. Times are monotonic seconds on the timeline's clock; :meth:`Answers.to_json` adds
wall-clock ISO times and seconds since injection.

Question 1 is answered by the platform's own decision (``platform`` events of
:data:`LOST_KINDS`, e.g. torchrun's agent, Ray Train's controller or Ray's GCS): its
``source`` and ``reason``, when the event names them, are part of the answer. Question 4
says, besides the checkpoint loaded, which one the platform handed over when it hands
checkpoints over (a load event's ``handed_over``, e.g. Ray Train's
``get_checkpoint()``).

Only platform decisions between the injection and the job's successful end count as "the
worker deemed lost" (agents closing the rendezvous at a normal end say things that look
like a loss). Each decision names its decider (``source``: ``torchrun-agent``,
``node-lifecycle-controller``, ``kube-apiserver``...). A platform that declares its own
deciders (a ``platform``/``deciders`` event: a scheduler's control plane) is answered by
them: on Kubernetes the torchrun agents notice a dead peer within seconds, while the
control plane decides NotReady ~10 s later and evicts ~10 s after that; the answer is the
control plane's decision, and who noticed first (and how much earlier) is said beside it.
"New resources ready" is when the platform started the replacement (``replica_started``:
a pod Running; ``spare_placed``), when it says so. When no new incarnation started after the fault and the job ended well,
nothing was lost: questions 1-3 and the times stay empty and :attr:`Answers.note` says
so (:data:`RODE_OUT`).
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np

from faultdrill.events import Event
from faultdrill.records import Questions, ResumePoint, Times, When, plain
from faultdrill.timeline import Incarnation, Timeline

__all__ = [
    "END_KINDS",
    "LOST_KINDS",
    "READY_KINDS",
    "RODE_OUT",
    "Answers",
    "answer_questions",
    "injections",
    "job_done_mono",
    "wall_offset",
]

#: Platform event kinds that mean "the platform has decided a replica is gone".
#: Adapters for other schedulers emit the generic ``replica_lost``/``node_lost``, with
#: ``layer="scheduler"`` when the scheduler decided (Slurm's node DOWN and requeue) rather
#: than the launcher inside the job (torchrun's agent): when the scheduler replaced the job
#: (the new incarnation has another scheduler incarnation than the old), the scheduler's
#: first decision answers "when was the worker deemed lost", even if the launcher noticed
#: earlier. A worker's own symptoms (``peer_error``, ``timeout_fired``: a collective failing
#: inside the job) are not the platform's decision and are reported separately
#: (``disruption``).
LOST_KINDS = frozenset(
    {
        "worker_group_failed",
        "worker_failed",
        "membership_change",
        "replica_lost",
        "node_lost",
        "rdzv_timeout",
        "rdzv_connection_error",
        "rdzv_closed",
        "dead_node",
    }
)
#: Platform event kinds that mean "the job's workers finished successfully": anything the
#: platform says after them (e.g. ``rdzv_connection_error`` while the agents shut the
#: rendezvous down) belongs to the normal end, not to a fault.
END_KINDS = frozenset({"workers_succeeded", "exit_barrier"})
#: Platform event kinds that mean "the platform started a replacement" (its resources are
#: up: a pod Running, an agent placed on a spare), before any replica of it announced itself.
READY_KINDS = frozenset({"replica_started", "spare_placed"})
#: The note of a drill in which no new incarnation started and the job ended well.
RODE_OUT = "no replica was lost: the job rode the fault out"


def wall_offset(tl: Timeline) -> float:
    """wall = mono + offset, estimated from every event's pair of readings."""
    diffs = [e.ts - e.mono for e in tl.events[:500]]
    return statistics.median(diffs) if diffs else 0.0


def injections(tl: Timeline) -> list[Event]:
    return tl.of("fault", "injected")


@dataclass(frozen=True)
class Answers:
    injected_at: float | None
    worker_lost_at: float | None
    worker_lost_by: str
    old_replica_stopped_at: float | None
    old_replica_note: str
    new_replicas_ready_at: float | None
    first_step_after_at: float | None
    resumed_from: ResumePoint | None
    old_incarnation: int | None
    new_incarnation: int | None
    recomputed_steps: int | None
    offset: float
    #: Why questions 1-3 have no answer, when the drill had nothing to answer them with
    #: (:data:`RODE_OUT`, or no restart after the fault); "" otherwise.
    note: str = ""
    #: Who decided the worker was lost (the event's ``source``; "" when it names none).
    worker_lost_source: str = ""
    #: When the platform said the replacement's resources were up (:data:`READY_KINDS`).
    resources_ready_at: float | None = None

    @property
    def detect_s(self) -> float | None:
        return _delta(self.injected_at, self.worker_lost_at)

    @property
    def recover_s(self) -> float | None:
        return _delta(self.injected_at, self.first_step_after_at)

    @property
    def ready_s(self) -> float | None:
        return _delta(self.injected_at, self.new_replicas_ready_at)

    def when(self, mono: float | None) -> When | None:
        if mono is None:
            return None
        wall = dt.datetime.fromtimestamp(mono + self.offset, tz=dt.timezone.utc)
        return When.model_validate(
            plain(
                {
                    "wall": wall.isoformat(timespec="milliseconds"),
                    "mono": round(mono, 4),
                    "since_injection_s": _delta(self.injected_at, mono),
                }
            )
        )

    def questions(self) -> Questions:
        """The four questions' answers as report.json's :class:`Questions`."""
        return Questions.model_validate(
            {
                "worker_lost_at": self.when(self.worker_lost_at),
                "worker_lost_by": self.worker_lost_by,
                "worker_lost_source": self.worker_lost_source,
                "old_replica_stopped_at": self.when(self.old_replica_stopped_at),
                "old_replica_note": self.old_replica_note,
                "new_replicas_ready_at": self.when(self.new_replicas_ready_at),
                "resources_ready_at": self.when(self.resources_ready_at),
                "first_step_after_at": self.when(self.first_step_after_at),
                "resumed_from": self.resumed_from,
                "note": self.note,
            }
        )

    def times(self) -> Times:
        """Detection, recovery and readiness times as report.json's :class:`Times`."""
        return Times.model_validate(
            plain(
                {
                    "detect_s": self.detect_s,
                    "recover_s": self.recover_s,
                    "ready_s": self.ready_s,
                    "recomputed_steps": self.recomputed_steps,
                }
            )
        )


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(b - a, 3)


def answer_questions(tl: Timeline) -> Answers:
    inj = injections(tl)
    offset = wall_offset(tl)
    t0 = _began(tl, inj[0]) if inj else None
    if t0 is None:
        return Answers(
            None,
            None,
            "no fault was injected",
            None,
            "",
            None,
            None,
            None,
            None,
            None,
            None,
            offset,
        )
    old = tl.incarnation_at(t0)
    new = tl.incarnation_after(t0)
    if new is None and _ended_well(tl, old):
        # Nothing was lost: a platform event after the fault (say, the rendezvous closing
        # at the normal end) answers no question, and the old replicas' exit is their end.
        return Answers(
            injected_at=t0,
            worker_lost_at=None,
            worker_lost_by="",
            old_replica_stopped_at=None,
            old_replica_note="",
            new_replicas_ready_at=None,
            first_step_after_at=None,
            resumed_from=None,
            old_incarnation=old.index if old is not None else None,
            new_incarnation=None,
            recomputed_steps=None,
            offset=offset,
            note=RODE_OUT,
        )
    done = job_done_mono(tl, t0)
    rescheduled = old is not None and new is not None and _rescheduled(old, new)
    lost, by = _deemed_lost(tl, t0, done, rescheduled)
    stopped, note = _old_stopped(tl, old)
    return Answers(
        injected_at=t0,
        worker_lost_at=lost.mono if lost else None,
        worker_lost_by=by,
        old_replica_stopped_at=stopped,
        old_replica_note=note,
        new_replicas_ready_at=new.ready_mono if new else None,
        first_step_after_at=new.first_step_mono if new else None,
        resumed_from=_resumed_from(new),
        old_incarnation=old.index if old else None,
        new_incarnation=new.index if new else None,
        recomputed_steps=_recomputed_steps(tl, old, new),
        offset=offset,
        note="" if new is not None else "no new incarnation started after the fault",
        worker_lost_source=str(lost.get("source") or "") if lost else "",
        resources_ready_at=_resources_ready(tl, t0, done),
    )


def _resumed_from(new: Incarnation | None) -> ResumePoint | None:
    """Where the new incarnation resumed, as its load decision recorded it (a fresh start
    is step 0; None: no new incarnation, or it recorded no load decision)."""
    if new is None or new.load is None:
        return None
    ld = new.load
    resumed: dict[str, Any]
    if ld.kind == "ckpt_load":
        resumed = {
            "checkpoint": ld.get("id"),
            "step": ld.get("step"),
            "data_position": ld.get("data_position"),
            "verified": ld.get("verified"),
        }
    else:
        resumed = {"checkpoint": None, "step": 0, "data_position": 0, "verified": None}
    if "handed_over" in ld.fields:
        resumed["handed_over"] = ld.get("handed_over")
    return ResumePoint.model_validate(plain(resumed))


def _recomputed_steps(tl: Timeline, old: Incarnation | None, new: Incarnation | None) -> int | None:
    """How many steps the new incarnation makes again: the old one's last step before the
    new one started, less the new one's resume step (None: not known)."""
    if old is None or new is None or new.resume_step is None:
        return None
    # Only steps the old generation made before its successor started count: a stale
    # replica stepping on afterwards is a resource finding, not recomputation.
    st = tl.steps
    before = (st.inc == old.index) & (st.mono < new.started_mono)
    if not before.any():
        return None
    last = int(st.step.max(where=before, initial=np.iinfo(np.int64).min))
    return max(0, last - new.resume_step)


def _resources_ready(tl: Timeline, t0: float, done: float) -> float | None:
    """When the platform first said the replacement's resources were ready, between the
    injection ``t0`` and the job's end ``done``."""
    return next(
        (
            e.mono
            for e in tl.events
            if t0 <= e.mono < done and e.src == "platform" and e.kind in READY_KINDS
        ),
        None,
    )


def _rescheduled(old: Incarnation, new: Incarnation) -> bool:
    """The scheduler, not the launcher, replaced the job: another scheduler incarnation."""
    return old.sched is not None and new.sched is not None and new.sched != old.sched


def _deemed_lost(
    tl: Timeline, t0: float, done: float, rescheduled: bool
) -> tuple[Event | None, str]:
    """The decision that the worker was lost, and who made it, in words: the first
    :data:`LOST_KINDS` event after the injection (when the scheduler replaced the whole job,
    the first of its own layer's, ``layer: scheduler``); where the platform declared its
    deciders, the first of theirs, with the first noticer beside it when that was someone
    else."""
    found = [
        e for e in tl.events if t0 <= e.mono < done and e.src == "platform" and e.kind in LOST_KINDS
    ]
    if rescheduled:
        found = [e for e in found if e.get("layer") == "scheduler"] or found
    if not found:
        return None, "no platform event after injection"
    deciders = {str(s) for e in tl.of("platform", "deciders") for s in e.get("sources") or []}
    first = found[0]
    lost = next((e for e in found if e.get("source") in deciders), None) if deciders else first
    if lost is None:
        return first, (
            f"{_said(first)}; the platform's own deciders ({', '.join(sorted(deciders))}) "
            "decided nothing"
        )
    by = _said(lost)
    if first is not lost:
        by += f"; first noticed by {_said(first)}, {lost.mono - first.mono:.1f} s earlier"
    return lost, by


def _said(e: Event) -> str:
    """``replica_lost on n1 (ray-train-controller: WorkerHealthCheckFailedError)``: the
    decision, where, and who decided why when the event says."""
    out = f"{e.kind} on {e.get('node', '?')}"
    source, reason = e.get("source"), e.get("reason")
    if source:
        out += f" ({source}" + (f": {reason}" if reason else "") + ")"
    return out


def _began(tl: Timeline, injected: Event) -> float:
    """When the harness began the injection (its ``inject_start``): a platform may react
    before the injection's own record is written (a deleted pod's watch event arrives
    within milliseconds of the API call)."""
    start = [e.mono for e in tl.of("fault", "inject_start") if e.mono <= injected.mono]
    return max(start) if start else injected.mono


def job_done_mono(tl: Timeline, after: float) -> float:
    """When the job's workers finished successfully, after ``after`` (inf: never): the
    first :data:`END_KINDS` platform event, or ok ``run_end`` of the final incarnation,
    at or after that incarnation's start."""
    final = tl.final_incarnation()
    since = max(after, final.started_mono) if final is not None else after
    ends = [
        e.mono for e in tl.events if e.mono >= since and e.src == "platform" and e.kind in END_KINDS
    ]
    if final is not None:
        ends += [e.mono for e in final.ends if e.get("status") == "ok" and e.mono >= after]
    return min(ends, default=float("inf"))


def _ended_well(tl: Timeline, old: Incarnation | None) -> bool:
    """The incarnation running at the fault ended the job cleanly (or the platform said the
    job succeeded with no other incarnation in sight)."""
    if old is None:
        return False
    if any(e.get("status") == "ok" for e in old.ends):
        return True
    states = [e.get("state") for e in tl.of("platform", "job_state")]
    ended = [s for s in states if s in ("succeeded", "failed", "stopped")]
    return bool(ended) and ended[-1] == "succeeded"


def _old_stopped(tl: Timeline, old: Incarnation | None) -> tuple[float | None, str]:
    if old is None:
        return None, "no incarnation was running at injection"
    lives = [p for p in tl.procs if p.pid in old.members]
    if not lives:
        return None, "the process sampler did not see the old replicas"
    alive = [p.pid for p in lives if p.gone_mono is None]
    if alive:
        return None, f"old replica pid(s) {alive} still alive when observation ended"
    end = tl.first("harness", "procs_final")
    outlived = [
        p.pid
        for p in lives
        if end is not None and p.gone_mono is not None and p.gone_mono > end.mono
    ]
    if outlived:
        # Gone only once the drill stopped what was left: the platform never stopped them.
        return None, (
            f"old replica pid(s) {outlived} still alive when the job ended "
            "(stopped only by the drill's clean-up)"
        )
    missing = set(old.members) - {p.pid for p in lives}
    note = f"pids {sorted(missing)} never sampled" if missing else ""
    return max(p.gone_mono for p in lives if p.gone_mono is not None), note
