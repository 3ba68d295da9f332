"""Ray Train's own decisions as ``platform`` events, written from inside the Train controller.

:class:`DrillObserver` is a Ray Train (V2) controller callback: the driver passes it in
``RunConfig(callbacks=[...])`` and Ray runs its hooks in the controller actor, a process on
the driver's node, on this host. It appends flat events to ``<events dir>/ray-controller.
jsonl`` (``src="platform"``, ``source="ray-train-controller"``), stamped on the host's
clocks like every other event:

=========================  ===============================================================
ray_controller_state       state, previous (INITIALIZING, SCHEDULING, RUNNING, RESTARTING,
                           RESCHEDULING, ERRORED, FINISHED, ...); error (first line) when
                           the new state carries one
replica_lost               rank, node, node_ip, reason (exception type), detail: the
                           controller's poll found this rank's worker failed (dead actor,
                           failed health check, exception in the training function); once
                           per group and rank (the generic kind the timeline reads as "the
                           platform deemed the worker lost")
ray_failure_decision       decision (RETRY / RAISE / NOOP): what the controller will do
ray_worker_group_started   group (placement), ranks, pids, node_ips, node_ids: the new
                           replicas are scheduled and their process group is set up
ray_worker_group_shutdown  group: the controller tears the worker group down
ray_checkpoint_registered  id (directory name), path, step: every rank reported and the
                           controller's checkpoint manager holds it; this is what the
                           next worker group will be handed
ray_checkpoint_handed_over group (the one about to start), id, path (None: nothing): the
                           checkpoint the controller hands the new group's workers, its
                           newest registered one (Ray's CheckpointManager gives the
                           newest reported checkpoint to ``before_init_train_context``)
ray_run_finished           error (None when training succeeded)
=========================  ===============================================================

It imports ``ray`` at module level: only the Ray driver imports this module. A hook never
raises into Ray (that would fail the run): an error of the observer itself becomes an
``ray_observer_error`` event.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ray.train.v2._internal.execution.callback import (
    ControllerCallback,
    ReportCallback,
    WorkerGroupCallback,
)

from faultdrill.events import RAY_CHECKPOINT_REGISTERED, EventSink

__all__ = ["DrillObserver"]

F = TypeVar("F", bound=Callable[..., Any])


def _first_line(exc: object, limit: int = 300) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:limit]


def _guarded(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(self: DrillObserver, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except Exception as exc:  # an observer must never fail the run it watches
            self._emit("ray_observer_error", hook=fn.__name__, error=_first_line(exc))
            return None

    return wrapper  # type: ignore[return-value]


class DrillObserver(ControllerCallback, WorkerGroupCallback, ReportCallback):  # type: ignore[misc,unused-ignore]
    """Writes the Train controller's decisions to ``events_dir`` (see the module)."""

    def __init__(self, events_dir: str, task_id: str, names: dict[str, str] | None = None) -> None:
        self.events_dir = events_dir
        self.task_id = task_id
        self.names = dict(names or {})  # node address -> our node name
        self._sink: EventSink | None = None
        self._groups = 0
        self._lost: set[tuple[int, int]] = set()
        self._rank_ip: dict[int, str] = {}
        self._latest: str | None = None  # path of the newest registered checkpoint

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_sink"] = None  # file descriptors stay in the process that opened them
        return state

    def _emit(self, kind: str, **fields: Any) -> None:
        if self._sink is None:
            self._sink = EventSink(Path(self.events_dir), self.task_id)
        self._sink.emit(
            "platform",
            kind,
            stream="ray-controller",
            source="ray-train-controller",
            controller_pid=os.getpid(),
            **fields,
        )

    # --- controller ------------------------------------------------------------------

    @_guarded
    def after_controller_state_update(self, previous_state: Any, current_state: Any) -> None:
        prev, cur = previous_state._state_type.name, current_state._state_type.name
        if prev == cur:
            return
        error = getattr(current_state, "training_failed_error", None)
        self._emit(
            "ray_controller_state",
            state=cur,
            previous=prev,
            error=_first_line(error) if error is not None else None,
        )

    @_guarded
    def before_controller_execute_failure_decision(self, failure_decision: Any) -> None:
        self._emit(
            "ray_failure_decision",
            decision=getattr(failure_decision, "name", str(failure_decision)),
        )

    @_guarded
    def after_controller_finish(self, result: Any) -> None:
        error = getattr(result, "error", None)
        self._emit("ray_run_finished", error=_first_line(error) if error is not None else None)

    # --- worker group ----------------------------------------------------------------

    @_guarded
    def after_worker_group_start(self, worker_group: Any) -> None:
        self._groups += 1
        workers = list(worker_group.get_workers())
        ranks = [getattr(w.distributed_context, "world_rank", None) for w in workers]
        self._rank_ip = {
            r: w.metadata.node_ip for r, w in zip(ranks, workers, strict=True) if r is not None
        }
        self._emit(
            "ray_worker_group_started",
            group=self._groups,
            ranks=ranks,
            pids=[w.metadata.pid for w in workers],
            nodes=[self.names.get(w.metadata.node_ip, w.metadata.node_ip) for w in workers],
            node_ips=[w.metadata.node_ip for w in workers],
            node_ids=[w.metadata.node_id for w in workers],
        )

    def before_init_train_context(self, workers: list[Any]) -> dict[str, list[Any]]:
        try:
            path = self._latest
            self._emit(
                "ray_checkpoint_handed_over",
                group=self._groups + 1,
                id=os.path.basename(path) if path else None,
                path=path,
            )
        except Exception as exc:  # an observer must never fail the run it watches
            self._emit("ray_observer_error", hook="before_init_train_context", error=str(exc))
        return {}

    @_guarded
    def before_worker_group_shutdown(self, worker_group: Any) -> None:
        self._emit("ray_worker_group_shutdown", group=self._groups)

    @_guarded
    def after_worker_group_poll_status(self, worker_group_status: Any) -> None:
        for rank, exc in worker_group_status.errors.items():
            if (self._groups, rank) in self._lost:
                continue
            self._lost.add((self._groups, rank))
            ip = self._rank_ip.get(rank)
            self._emit(
                "replica_lost",
                group=self._groups,
                rank=rank,
                node=self.names.get(ip, ip) if ip else None,
                node_ip=ip,
                reason=type(exc).__name__,
                detail=_first_line(exc),
            )

    # --- reports ---------------------------------------------------------------------

    @_guarded
    def after_report(self, training_report: Any, metrics: list[dict[str, Any]]) -> None:
        ckpt = getattr(training_report, "checkpoint", None)
        if ckpt is None:
            return
        step = metrics[0].get("step") if metrics else None
        self._latest = str(ckpt.path).rstrip("/")
        self._emit(
            RAY_CHECKPOINT_REGISTERED,
            id=os.path.basename(str(ckpt.path).rstrip("/")),
            path=str(ckpt.path),
            step=step,
        )
