"""One drill item (the baseline, a scenario or a control), from launch to cleanup.

Running and judging are separate (as in Jepsen's run/analyze): :func:`execute_item` only
launches the job, watches it, injects the fault at its trigger, enforces the stop
conditions, and records everything as events under the item's directory; judging is
:mod:`faultdrill.judge.evaluate`, which can be re-run offline on the recorded directory
(``faultdrill check RUN_DIR``). The whole plan (round discipline, the run directory, the
baseline and judging) is :mod:`faultdrill.engine.run`'s; this module is given one item.

What has happened to the item's job and fault is one :class:`ItemPhase`, held with the
facts of each phase (when the fault was injected, reverted, when the job ended and how) in
one :class:`ItemFacts`, which refuses any move the diagram does not draw::

    OPENED ──> WATCHING ──> INJECTED ──> REVERTED
                  │  │          │            │
                  │  └──> INJECT_FAILED      │     (not retried: the item is judged retest)
                  │           │              │
                  └───────────┴──────┬───────┘     from any of these four:
                                     ├──> ENDED      the job ended by itself
                                     └──> STOPPED    a stop condition fired

    every phase but INTERRUPTED, CLEANED ──> INTERRUPTED   a signal (SIGINT/SIGTERM/SIGHUP)
    every phase but CLEANED ──────────────> CLEANED       the cleanup ran (terminal)

A job failed under ``recovery: resubmit`` is resubmitted once, a fact of its phase (an
INJECTED fault is reverted first); a baseline has no fault and goes from WATCHING to its
end. Where the harness's time went (bring-up, job, settle, post-window, sampling,
teardown) is :mod:`faultdrill.engine.phases`'s, a separate axis: WATCHING to ENDED or
STOPPED is its ``job`` phase. A fault whose run needs a step of its own adds its phase to
:class:`ItemPhase`, its row to :data:`MOVES` and its method to :class:`ItemFacts`, and is
driven from :func:`_drive_fault`.

Whatever happens (normal end, stop condition, exception, SIGINT/SIGTERM/SIGHUP), the
``finally`` path reverts the fault, stops the job (TERM, bounded wait, KILL), tears the
platform down and replays the ledger; each of those steps runs even if one before it failed,
and signals during it are noted, not obeyed. A hard crash of the harness leaves the ledger
listed in the state directory for ``faultdrill cleanup``.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import FrameType
from typing import Any

from faultdrill import plugins, rundir
from faultdrill.engine.failure import failure_facts
from faultdrill.engine.phases import PhaseClock
from faultdrill.engine.samplers import ProcessSampler, end_snapshot
from faultdrill.engine.watch import Watch, stop_reason
from faultdrill.environment import environment_facts
from faultdrill.errors import DrillError, FaultError
from faultdrill.events import EventSink
from faultdrill.faults.api import Fault, FaultContext, make_fault
from faultdrill.joblogs.tail import LogTail
from faultdrill.judge.artifacts import verify_artifacts
from faultdrill.ledger import Ledger
from faultdrill.plan import (
    ARG_PLACEHOLDERS,
    REFERENCE_WORKLOAD,
    Control,
    Plan,
    Scenario,
    StopConditions,
)
from faultdrill.plan.sections import Recovery, Trigger
from faultdrill.platforms import PLATFORMS
from faultdrill.platforms.api import JobSpec, JobState, NetworkTrack, Platform
from faultdrill.readings.inventory import take_inventory
from faultdrill.rundir import ItemKind, item_dir
from faultdrill.timeline import Timeline
from faultdrill.timeline.store import StepStoreWriter

__all__ = [
    "MOVES",
    "REFERENCE_WORKLOAD",
    "DrillInterrupted",
    "IllegalTransitionError",
    "ItemFacts",
    "ItemPhase",
    "Reporter",
    "execute_item",
    "signal_guard",
]

#: How often the engine looks at the job (progress, trigger, state, stop conditions): a
#: trigger fires and the job's end is noticed at most this late.
POLL_S = 0.05
Reporter = Callable[[str, str], None]  # (item id, status line)


class DrillInterrupted(BaseException):
    """A signal asked the harness to stop. BaseException so no handler swallows it.

    ``pending`` lists the ledger entries the cleanup could NOT revert (labels); it is
    filled before the exception leaves :func:`execute_item` (empty: all reverted)."""

    def __init__(self, signum: int, pending: list[str] | None = None) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum
        self.pending: list[str] = pending if pending is not None else []


class signal_guard:  # noqa: N801  (used as a context manager, reads as a statement)
    """Turn the first SIGINT/SIGTERM/SIGHUP into DrillInterrupted in the main thread.

    After that first one, and for the whole cleanup (the caller sets ``cleaning`` before
    it starts, whatever the reason), every signal is noted and ignored, so that no signal
    can cut the cleanup short. A signal that arrived during a cleanup that did not follow an
    interruption (a normal end) is kept in ``late``: the caller raises DrillInterrupted
    for it once the cleanup is done, so the CLI still exits 130."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self._old: dict[int, Any] = {}
        self.fired = False
        self.cleaning = False
        self.late: int | None = None

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.fired or self.cleaning:
            if not self.fired and self.late is None:
                self.late = signum
            return
        self.fired = True
        raise DrillInterrupted(signum)

    def __enter__(self) -> signal_guard:
        for s in self.SIGNALS:
            self._old[s] = signal.signal(s, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)


# --- job construction ------------------------------------------------------------------


def _workload_config(
    plan: Plan, item: Scenario | Control | None, ckpt_dir: Path, work: Path
) -> dict[str, Any]:
    # the same config the plan validated
    cfg = plan.workload_config(item, str(ckpt_dir), str(rundir.data_dir(work)))
    if "data_dir" in cfg:
        rundir.data_dir(work).mkdir(parents=True, exist_ok=True)
    if plan.task.entrypoint.module == REFERENCE_WORKLOAD:
        # The exported final model, outside the checkpoint directory that faults damage.
        cfg.setdefault("export_path", str(work / "export" / "model.pt"))
    return cfg


def build_job(plan: Plan, item: Scenario | Control | None, work: Path, run_id: str) -> JobSpec:
    ckpt_dir = work / plan.checkpoint.dir
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    events_dir = rundir.events_dir(work)
    wl_path = work / "workload.json"
    wl_path.write_text(json.dumps(_workload_config(plan, item, ckpt_dir, work), indent=2) + "\n")
    ep = plan.task.entrypoint
    args = list(ep.args)
    if ep.module == REFERENCE_WORKLOAD and not args:
        args = ["--workload-config={workload_config}"]
    subst = {
        "run_dir": str(work),
        "ckpt_dir": str(ckpt_dir),
        "events_dir": str(events_dir),
        "workload_config": str(wl_path),
    }
    assert set(subst) == set(ARG_PLACEHOLDERS)  # the plan validated args against these
    try:
        args = [a.format(**subst) for a in args]
    except (KeyError, IndexError, ValueError) as exc:
        raise DrillError(
            f"task.entrypoint.args: unknown placeholder {exc}; use one of "
            f"{', '.join('{' + k + '}' for k in subst)}"
        ) from exc
    argv = ["-m", ep.module, *args] if ep.module else [str(ep.script), *args]
    env = dict(plan.task.env)
    if isinstance(item, Control):
        env.update(item.env)
    env.update(
        FAULTDRILL_CKPT_DIR=str(ckpt_dir),
        FAULTDRILL_CKPT_EVERY=str(plan.checkpoint.every_steps),
        FAULTDRILL_CKPT_KEEP=str(plan.checkpoint.keep),
        FAULTDRILL_SEED=str(plan.seeds.get("global", 0)),
    )
    res = plan.resources
    return JobSpec(
        run_id=run_id,
        task_id=plan.task.id,
        argv=argv,
        env=env,
        nodes=[f"n{i}" for i in range(1, res.nodes + 1)],
        procs_per_node=res.procs_per_node,
        min_nodes=res.min_nodes or res.nodes,
        max_nodes=res.nodes,
        max_restarts=res.max_restarts,
        work_dir=work,
        events_dir=events_dir,
    )


# --- the item's phases -----------------------------------------------------------------


class ItemPhase(str, Enum):
    """What has happened to the item's job and fault (the module docstring draws the
    moves between them)."""

    OPENED = "opened"  # directory, sink, ledger, platform made; item_start recorded
    WATCHING = "watching"  # the job submitted and watched; its fault (if any) not yet due
    INJECTED = "injected"  # the fault is in effect
    INJECT_FAILED = "inject-failed"  # injecting raised; not retried
    REVERTED = "reverted"  # the fault reverted: its duration ran out, or before a resubmit
    ENDED = "ended"  # the job ended by itself
    STOPPED = "stopped"  # a stop condition ended the item
    INTERRUPTED = "interrupted"  # a signal asked the harness to stop
    CLEANED = "cleaned"  # the cleanup ran: nothing follows


_P = ItemPhase
_ENDS = {_P.ENDED, _P.STOPPED, _P.INTERRUPTED, _P.CLEANED}
#: The moves :class:`ItemFacts` allows, from each phase.
MOVES: dict[ItemPhase, frozenset[ItemPhase]] = {
    _P.OPENED: frozenset({_P.WATCHING, _P.INTERRUPTED, _P.CLEANED}),
    _P.WATCHING: frozenset({_P.INJECTED, _P.INJECT_FAILED, *_ENDS}),
    _P.INJECTED: frozenset({_P.REVERTED, *_ENDS}),
    _P.INJECT_FAILED: frozenset(_ENDS),
    _P.REVERTED: frozenset(_ENDS),
    _P.ENDED: frozenset({_P.INTERRUPTED, _P.CLEANED}),
    _P.STOPPED: frozenset({_P.INTERRUPTED, _P.CLEANED}),
    _P.INTERRUPTED: frozenset({_P.CLEANED}),
    _P.CLEANED: frozenset(),
}


class IllegalTransitionError(RuntimeError):
    """A move :data:`MOVES` does not allow: a defect of the engine, never of the input."""


@dataclass
class ItemFacts:
    """One item's phase and the facts each phase added; times are monotonic seconds.

    Every change goes through one of the methods named after the phase it enters, which
    raise :class:`IllegalTransitionError` for a move :data:`MOVES` does not allow, and leave
    the facts unchanged then. Facts are kept when a later phase follows (an item
    interrupted during its settle still ended by itself)."""

    phase: ItemPhase = ItemPhase.OPENED
    #: When the watch began: the stop conditions count from it.
    watch_started: float | None = None
    #: The ``fault``/``injected`` event's time.
    injected_at: float | None = None
    #: When the fault's injection failed (it is not retried).
    inject_failed_at: float | None = None
    reverted_at: float | None = None
    #: When the job, failed, was resubmitted (at most once).
    resubmitted_at: float | None = None
    #: The state the job ended in by itself, and when the watch saw it.
    job_state: JobState | None = None
    ended_at: float | None = None
    #: The stop condition that ended the item (``max_wall_s``...), and when.
    stop_condition: str | None = None
    stopped_at: float | None = None
    #: The signal that interrupted the item (``SIGINT``...).
    signal: str | None = None
    #: What the ``item_end`` event says: the job's end state, ``stopped: CONDITION``,
    #: ``interrupted``, or ``unknown`` (the item raised before its end was known).
    outcome: str = "unknown"
    history: list[ItemPhase] = field(default_factory=lambda: [ItemPhase.OPENED])

    def _enter(self, phase: ItemPhase) -> None:
        if phase not in MOVES[self.phase]:
            raise IllegalTransitionError(f"item phase {self.phase.value} -> {phase.value}")
        self.phase = phase
        self.history.append(phase)

    def watching(self, at: float) -> None:
        self._enter(_P.WATCHING)
        self.watch_started = at

    def injected(self, at: float) -> None:
        self._enter(_P.INJECTED)
        self.injected_at = at

    def inject_failed(self, at: float) -> None:
        self._enter(_P.INJECT_FAILED)
        self.inject_failed_at = at

    def reverted(self, at: float) -> None:
        self._enter(_P.REVERTED)
        self.reverted_at = at

    def ended(self, state: JobState, at: float) -> None:
        if not state.ended:
            raise IllegalTransitionError(f"a job in state {state.value} has not ended")
        self._enter(_P.ENDED)
        self.job_state, self.ended_at, self.outcome = state, at, state.value

    def stopped(self, condition: str, at: float) -> None:
        self._enter(_P.STOPPED)
        self.stop_condition, self.stopped_at = condition, at
        self.outcome = f"stopped: {condition}"

    def interrupted(self, signal_name: str) -> None:
        self._enter(_P.INTERRUPTED)
        self.signal, self.outcome = signal_name, "interrupted"

    def cleaned(self) -> None:
        self._enter(_P.CLEANED)

    def resubmitted(self, at: float) -> None:
        """The failed job resubmitted: once, while watching, with no fault in effect (the
        caller reverts an injected one first). The phase does not change."""
        if not self.may_resubmit:
            raise IllegalTransitionError(f"resubmit in phase {self.phase.value}")
        self.resubmitted_at = at

    @property
    def may_resubmit(self) -> bool:
        watching = {_P.WATCHING, _P.INJECT_FAILED, _P.REVERTED}
        return self.resubmitted_at is None and self.phase in watching

    @property
    def fault_due(self) -> bool:
        """Whether a fault may be injected now (at its trigger): once, while watching."""
        return self.phase is _P.WATCHING

    def revert_due(self, duration_s: float | None, now: float, *, done: bool = False) -> bool:
        """Whether the fault in effect has run its ``duration_s`` (None: until the end), or
        has done what it was for (``done``: a fault that ends at a failed save saw one)."""
        return (
            self.phase is _P.INJECTED
            and self.injected_at is not None
            and (done or (duration_s is not None and now - self.injected_at >= duration_s))
        )

    @property
    def fault_tried(self) -> bool:
        """Whether the fault's trigger was reached (injected, or its injection failed)."""
        return self.injected_at is not None or self.inject_failed_at is not None

    @property
    def natural_end(self) -> bool:
        """Whether the job ended by itself (then it is given its settle and post-window)."""
        return self.job_state is not None

    @property
    def succeeded_at(self) -> float | None:
        """When the watch saw the job end by itself successfully (None: it did not)."""
        return self.ended_at if self.job_state is JobState.SUCCEEDED else None


# --- one item --------------------------------------------------------------------------


def execute_item(
    plan: Plan,
    kind: ItemKind,
    item: Scenario | Control | None,
    run_dir: Path,
    report: Reporter = lambda _i, _s: None,
) -> Path:
    """Run the baseline, one scenario or one control; returns its directory.

    Raises DrillInterrupted (after cleaning up, with the ledger entries it could not revert
    in ``pending``) when a signal arrived, also one that arrived during the cleanup of a
    normal end; no signal cuts the cleanup short. Raises DrillError when the platform could
    not even start; every other outcome is recorded as events.
    """
    run = _open_item(plan, kind, item, run_dir)
    pending: list[str] = []  # filled in place by the cleanup; a DrillInterrupted carries it
    guard = signal_guard()
    with guard:
        try:
            try:
                _run_item(run, run_dir, report)
            except DrillInterrupted as exc:
                name = signal.Signals(exc.signum).name
                run.facts.interrupted(name)
                run.sink.emit("harness", "interrupted", signal=name)
                exc.pending = pending
                raise
            finally:
                guard.cleaning = True  # from here on signals are noted, never raised
                pending[:] = _finish(run)
                run.facts.cleaned()
        finally:
            if guard.late is not None:  # the job's outcome stands; the run stops after it
                run.sink.emit(
                    "harness",
                    "interrupted",
                    signal=signal.Signals(guard.late).name,
                    during="cleanup",
                )
            run.sink.emit("harness", "item_end", item=run.item_id, outcome=run.facts.outcome)
            run.sink.close()
    if guard.late is not None:
        raise DrillInterrupted(guard.late, pending)
    return run.work


@dataclass(frozen=True)
class _ArmedFault:
    """A scenario's or control's fault with the trigger that makes it due."""

    fault: Fault
    trigger: Trigger


@dataclass
class _Item:
    """What one item runs with (its plan entry, directory, sink, ledger, platform, fault,
    samplers, log tail) and its :class:`ItemFacts`, which the cleanup and the ``item_end``
    event read whatever phase raised."""

    plan: Plan
    kind: ItemKind
    item: Scenario | Control | None
    item_id: str
    run_id: str
    work: Path
    sink: EventSink
    ledger: Ledger
    platform: Platform
    stop: StopConditions
    armed: _ArmedFault | None
    recovery: Recovery | None
    ctx: FaultContext
    sampler: ProcessSampler
    watch: Watch
    tail: LogTail | None
    clock: PhaseClock
    facts: ItemFacts = field(default_factory=ItemFacts)


def _open_item(plan: Plan, kind: ItemKind, item: Scenario | Control | None, run_dir: Path) -> _Item:
    """Make the item's directory, event sink, ledger (activated), platform, fault,
    samplers and log tail, and record ``item_start``. Raises DrillError when the directory
    already holds a drill."""
    item_id = "baseline" if item is None else item.id
    # Absolute: every path here reaches processes that run elsewhere (agents, workers).
    work = item_dir(run_dir.resolve(), kind, item_id)
    if work.exists() and any(work.iterdir()):
        raise DrillError(f"{work} already holds a drill; use a new --out directory")
    work.mkdir(parents=True, exist_ok=True)
    run_id = f"{plan.task.id}-{item_id}-{uuid.uuid4().hex[:8]}"
    sink = EventSink(rundir.events_dir(work), plan.task.id)
    ledger = Ledger(rundir.ledger_path(work), run_id=run_id)
    plugins.load()
    platform_cls = PLATFORMS[plan.resources.platform].variant_for(plan.resources)
    platform: Platform = platform_cls(plan.resources, work, ledger, sink)
    stop = plan.stop_for(item.stop) if item is not None else plan.stop
    ctx = FaultContext(
        platform=platform,
        ledger=ledger,
        sink=sink,
        scenario_id=item_id,
        ckpt_dir=work / plan.checkpoint.dir,
        latest_file=plan.checkpoint.latest_file,
        item_dir=work,  # refuses a checkpoint dir outside the item's directory
        data_dir=rundir.data_dir(work),
    )
    ledger.activate()
    sampler = ProcessSampler(platform, sink, plan.observation.sample_hz)
    # the probe files, tailed while the job runs, into the columnar step store
    watch = Watch(
        rundir.events_dir(work),
        StepStoreWriter(rundir.events_dir(work)),
        commits_from=platform.checkpoint_commits,
    )
    tail = _log_tail(plan, work, sink, platform)
    sink.emit(
        "harness",
        "item_start",
        item=item_id,
        item_kind=kind,
        run_id=run_id,
        plan_digest=plan.digest(),
        environment=environment_facts(),
        stop=stop.model_dump(),
    )
    return _Item(
        plan=plan,
        kind=kind,
        item=item,
        item_id=item_id,
        run_id=run_id,
        work=work,
        sink=sink,
        ledger=ledger,
        platform=platform,
        stop=stop,
        armed=_ArmedFault(make_fault(item.fault), item.trigger) if item is not None else None,
        recovery=item.recovery if isinstance(item, Scenario) else None,
        ctx=ctx,
        sampler=sampler,
        watch=watch,
        tail=tail,
        clock=PhaseClock(sink),
    )


def _log_tail(plan: Plan, work: Path, sink: EventSink, platform: Platform) -> LogTail | None:
    """For a job that cannot be changed (the plan's ``logs``): the tail that reads its
    progress from its log lines; None for a job that reports through the probe."""
    if plan.logs is None:
        return None
    return LogTail(
        plan.logs,
        rundir.logs_dir(work),
        sink,
        platform.replicas,
        world_size=plan.resources.world_size,
        ckpt_dir=work / plan.checkpoint.dir,
    )


def _run_item(run: _Item, run_dir: Path, report: Reporter) -> None:
    """The item's phases up to its cleanup: bring-up, the job (watched until it ends or is
    stopped), why it failed, and after a natural end the settle and post-windows. The
    caller's ``finally`` cleans up."""
    plan, phase = run.plan, run.clock
    with phase("bring-up"):
        run.platform.prepare()
        job = build_job(plan, run.item, run.work, run.run_id)
        if run.armed is not None:
            _prepare_fault(run.armed.fault, run.ctx)
    with phase("job"):
        run.platform.submit(job)
        run.sampler.start()
        if run.tail is not None:
            run.tail.start()
        if isinstance(run.platform, NetworkTrack):
            run.platform.start_network_track(plan.observation.net_hz)
        _watch_job(run, report)
    if run.facts.job_state is JobState.FAILED:  # say why, from the launcher's logs
        with phase("sampling", part="why the job failed"):
            facts = failure_facts(run.work, job.argv, run_dir.resolve())
            run.sink.emit("harness", "job_failed", **facts)
    if run.facts.natural_end:
        with phase("settle"):
            _settle(run.platform, run.sampler, run.sink, plan.observation.settle_s)
        if plan.observation.post_s > 0:
            with phase("post-window"):
                _observe_after_end(plan.observation.post_s, run.platform, run.sampler, run.sink)


def _settle(platform: Platform, sampler: ProcessSampler, sink: EventSink, settle_s: float) -> None:
    """After the job ended by itself: give it up to ``settle_s`` to release everything, then
    record what is left (``procs_final``). Ends as soon as none of its processes is left:
    a job with no process cannot release anything more."""
    started = time.monotonic()
    sampler.wait_gone(settle_s)
    sink.emit(
        "harness",
        "procs_final",
        settled_s=round(time.monotonic() - started, 3),
        **end_snapshot(platform, sampler, settle_s=settle_s, after_stop=False),
    )


def _watch_job(run: _Item, report: Reporter) -> None:
    """Poll until the job ends by itself (ENDED) or a stop condition fires (STOPPED),
    injecting the fault at its trigger and reverting it after its duration on the way."""
    facts = run.facts
    started = time.monotonic()
    facts.watching(started)
    while facts.phase not in (ItemPhase.ENDED, ItemPhase.STOPPED):
        time.sleep(POLL_S)
        now = time.monotonic()
        run.watch.poll()
        state = run.platform.poll()
        if run.armed is not None:
            _drive_fault(run, run.armed, now)
        report(
            run.item_id,
            f"{run.kind} {run.item_id}: step {run.watch.max_step}, job {state.value}"
            + (", fault injected" if facts.fault_tried else ""),
        )
        if state.ended:
            _job_ended(run, state)
            continue
        reason = stop_reason(run.watch, run.stop, started, now)
        if reason is not None:
            facts.stopped(reason[0], now)
            run.sink.emit(
                "harness",
                "stop_condition",
                condition=reason[0],
                detail=reason[1],
                last_step=run.watch.max_step,
            )


def _drive_fault(run: _Item, armed: _ArmedFault, now: float) -> None:
    """Inject the fault when its trigger is reached (once: a failed injection is not
    retried), and revert it once its duration has run (or, a fault that ends at a failed
    save, once a save failed while it was in effect)."""
    if run.facts.fault_due and run.watch.triggered(armed.trigger, now):
        injected_at = _inject(armed, run.ctx, run.watch)
        if injected_at is None:
            run.facts.inject_failed(now)  # the item is judged "retest"
        else:
            run.facts.injected(injected_at)
    spec = armed.fault.spec
    done = spec.ends_at_failed_save and run.watch.save_failed_since(run.facts.injected_at)
    if run.facts.revert_due(spec.duration_s, now, done=done):
        _revert(armed.fault, run.ctx)
        run.facts.reverted(now)


def _job_ended(run: _Item, state: JobState) -> None:
    """The job ended by itself: a failed job under ``recovery: resubmit`` is resubmitted
    once (an injected fault reverted first, the operator's action recorded); any other
    end is the item's ENDED."""
    facts = run.facts
    now = time.monotonic()
    recovery = run.recovery
    resubmit = recovery is not None and recovery.action == "resubmit"
    if state is not JobState.FAILED or recovery is None or not resubmit:
        facts.ended(state, now)
        return
    if facts.resubmitted_at is not None:  # once only: the second failure is its end
        facts.ended(state, now)
        return
    if facts.phase is ItemPhase.INJECTED and run.armed is not None:
        _revert(run.armed.fault, run.ctx)
        facts.reverted(now)
    facts.resubmitted(now)
    run.sink.emit(
        "harness",
        "operator_action",
        action="resubmit",
        operator=run.plan.responsibility.recovery_operator,
        runbook=recovery.runbook or "resubmit the job unchanged",
        steps=run.platform.resubmit_steps(),
        at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )
    run.platform.resubmit()


def _observe_after_end(
    post_s: float, platform: Platform, sampler: ProcessSampler, sink: EventSink
) -> None:
    """``observation.post_s``: keep the samplers (processes, ports, network) running this
    much longer after the settle snapshot, then snapshot again (``post_window`` events), so
    that a replica that lingers or comes back is on the timeline. 0: nothing."""
    if post_s <= 0:
        return
    sink.emit("harness", "post_window", phase="start", post_s=post_s)
    time.sleep(post_s)
    sink.emit(
        "harness",
        "post_window",
        phase="end",
        post_s=post_s,
        **end_snapshot(platform, sampler, settle_s=post_s, after_stop=False),
    )


def _prepare_fault(fault: Fault, ctx: FaultContext) -> None:
    """What the fault needs in place before the job starts (most faults: nothing)."""
    try:
        facts = fault.prepare(ctx)
    except FaultError as exc:
        ctx.sink.emit("fault", "inject_failed", fault=fault.spec.kind, error=f"prepare: {exc}")
        return
    if facts:
        ctx.sink.emit("fault", "prepared", fault=fault.spec.kind, **facts)


def _inject(armed: _ArmedFault, ctx: FaultContext, watch: Watch) -> float | None:
    """Inject the fault and record it; returns the ``injected`` event's time, or None when
    the injection failed (recorded as ``inject_failed``)."""
    spec = armed.fault.spec
    ctx.sink.emit(
        "fault",
        "inject_start",
        fault=spec.kind,
        target=spec.target_label(),
        spec=spec.model_dump(mode="json"),
        trigger=armed.trigger.describe(),
    )
    before = set(ctx.ledger.entries)
    try:
        facts = armed.fault.inject(ctx)
    except FaultError as exc:
        ctx.sink.emit("fault", "inject_failed", fault=spec.kind, error=str(exc))
        return None
    acted = _first_change_applied(ctx.ledger, before)
    ev = ctx.sink.emit(
        "fault",
        "injected",
        at_mono=acted,
        fault=spec.kind,
        target=spec.target_label(),
        at_step=watch.max_step,
        duration_s=spec.duration_s,
        stamped="first change applied" if acted is not None else "inject returned",
        **facts,
    )
    return ev.mono


def _first_change_applied(ledger: Ledger, before: set[str]) -> float | None:
    """When the first change a fault made while injecting was in effect: the earliest
    ``applied_mono`` of the ledger entries it added (every change is recorded, then made,
    then marked applied). None when it recorded none (the event is then stamped when
    ``inject`` returned, after any waiting it did)."""
    stamps = [
        e.applied_mono
        for eid, e in list(ledger.entries.items())
        if eid not in before and e.applied_mono is not None
    ]
    return min(stamps, default=None)


def _revert(fault: Fault, ctx: FaultContext) -> None:
    started = time.monotonic()
    try:
        fault.revert(ctx)
        ctx.sink.emit("fault", "reverted", fault=fault.spec.kind, revert_started_mono=started)
    except FaultError as exc:
        ctx.sink.emit("fault", "revert_failed", fault=fault.spec.kind, error=str(exc))


def _finish(run: _Item) -> list[str]:
    """The cleanup path: runs on every exit, with signals noted and ignored (the caller
    sets ``signal_guard.cleaning``). Every step is attempted even if an earlier one raised:
    whatever a step raises is recorded in the ``harness``/``cleanup`` event's ``problems``
    and the next step runs. Returns the labels of ledger entries still not reverted (empty:
    every change was undone and the ledger's index entry is gone)."""
    problems: list[str] = []

    def attempt(what: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception as exc:  # a cleanup step must not skip the rest; said, not lost
            detail = str(exc) if isinstance(exc, DrillError) else f"{type(exc).__name__}: {exc}"
            problems.append(f"{what}: {detail}")

    platform, ledger, phase, armed = run.platform, run.ledger, run.clock, run.armed
    with phase("teardown", part="revert the fault, stop the job"):
        if armed is not None:
            attempt("revert the fault", lambda: armed.fault.revert(run.ctx))
        attempt("stop the job", lambda: platform.stop(reason="end of drill"))
    with phase("sampling"):
        tail = run.tail
        if tail is not None:  # before the inventory: it hashes what the last lines saved
            attempt("read the job's last log lines", lambda: tail.stop(run.facts.succeeded_at))
        _close_observation(run, attempt)
    with phase("teardown", part="release the platform, replay the ledger"):
        attempt("tear the platform down", platform.teardown)

        def revert_ledger() -> None:
            problems.extend(ledger.revert_all())
            problems.extend(f"left alone, not ours: {note}" for note in ledger.notes)
            problems.extend(f"refused, not of this run's making: {why}" for why in ledger.refused)

        attempt("revert the ledger", revert_ledger)
        pending = [f"{e.kind} {e.label}".strip() for e in ledger.pending()]
        if pending:
            problems.append(f"{len(pending)} ledger entries not reverted; run `faultdrill cleanup`")
        else:
            attempt("drop the ledger's index entry", ledger.deactivate)
    run.sink.emit("harness", "cleanup", problems=problems, ledger_pending=len(pending))
    return pending


def _close_observation(run: _Item, attempt: Callable[[str, Callable[[], object]], None]) -> None:
    """The closing observations: the snapshot after a stop, the last sample, the rest of
    the probe files into the step store, the checkpoint inventory and the exported
    artefacts hashed again."""
    sink, sampler, platform, work = run.sink, run.sampler, run.platform, run.work
    ckpt = run.plan.checkpoint
    if not run.facts.natural_end and sampler.running:
        attempt(
            "final process snapshot",
            lambda: sink.emit(
                "harness",
                "procs_final",
                **end_snapshot(platform, sampler, settle_s=0.0, after_stop=True),
            ),
        )
    attempt("stop the sampler", sampler.stop)
    attempt("close the step store", run.watch.close)

    def inventory() -> None:
        tl = Timeline.load(rundir.events_dir(work))
        records, pointer = take_inventory(tl, work / ckpt.dir, ckpt.latest_file, ckpt.keep)
        sink.emit("harness", "ckpt_latest", **pointer.to_json())
        for rec in records:
            sink.emit("harness", "ckpt_inventory", **rec.to_json())
        # the exported artefacts, hashed again now that nothing of the job writes any more
        for art in verify_artifacts(tl, work):
            sink.emit("harness", "artifact_verified", **art.to_json())

    attempt("checkpoint inventory failed", inventory)
