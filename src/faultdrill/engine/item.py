"""One drill item (the baseline, a scenario or a control), from launch to cleanup.

Running and judging are separate (as in Jepsen's run/analyze): :func:`execute_item` only
launches the job, watches it, injects the fault at its trigger, enforces the stop
conditions, and records everything as events under the item's directory; judging is
:mod:`faultdrill.judge.evaluate`, which can be re-run offline on the recorded directory
(``faultdrill check RUN_DIR``).

Whatever happens (normal end, stop condition, exception, SIGINT/SIGTERM/SIGHUP), the
``finally`` path reverts the fault, stops the job (TERM, bounded wait, KILL), tears the
platform down and replays the ledger; each of those steps runs even if one before it failed,
and signals during it are noted, not obeyed. A hard crash of the harness leaves the ledger
listed in the state directory for ``faultdrill cleanup``.
"""

from __future__ import annotations

import json
import os
import platform as pyplatform
import signal
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from faultdrill import __version__, plugins, rundir
from faultdrill.engine.failure import failure_facts
from faultdrill.engine.phases import PhaseClock
from faultdrill.engine.samplers import ProcessSampler, end_snapshot
from faultdrill.engine.watch import Watch, stop_reason
from faultdrill.errors import DrillError, FaultError
from faultdrill.events import EventSink
from faultdrill.faults.api import Fault, FaultContext, make_fault
from faultdrill.joblogs.tail import LogTail
from faultdrill.judge.artifacts import verify_artifacts
from faultdrill.judge.inventory import take_inventory
from faultdrill.ledger import Ledger
from faultdrill.plan import (
    ARG_PLACEHOLDERS,
    REFERENCE_WORKLOAD,
    Control,
    Plan,
    Scenario,
    StopConditions,
)
from faultdrill.plan.source import MAX_BYTES
from faultdrill.platforms import PLATFORMS
from faultdrill.platforms.api import JobSpec, JobState, NetworkTrack, Platform
from faultdrill.rundir import ItemKind, item_dir
from faultdrill.safepath import read_named, write_file
from faultdrill.timeline import Timeline
from faultdrill.timeline.store import StepStoreWriter

__all__ = [
    "REFERENCE_WORKLOAD",
    "DrillInterrupted",
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


def environment_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {
        "faultdrill": __version__,
        "python": pyplatform.python_version(),
        "host": socket.gethostname(),
        "kernel": pyplatform.release(),
        "machine": pyplatform.machine(),
        "cpus": os.cpu_count(),
        "root": os.geteuid() == 0,
    }
    try:
        from importlib.metadata import version

        facts["torch"] = version("torch")
    except Exception:  # torch missing is a fact, not an error
        facts["torch"] = None
    return facts


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
    r = _open_item(plan, kind, item, run_dir)
    pending: list[str] = []  # filled in place by the cleanup; a DrillInterrupted carries it
    guard = signal_guard()
    phase = PhaseClock(r.sink)
    with guard:
        try:
            try:
                _run_item(plan, kind, item, run_dir, r, phase, report)
            except DrillInterrupted as exc:
                r.outcome = "interrupted"
                r.sink.emit("harness", "interrupted", signal=signal.Signals(exc.signum).name)
                exc.pending = pending
                raise
            finally:
                guard.cleaning = True  # from here on signals are noted, never raised
                pending[:] = _finish(
                    plan,
                    r.fault,
                    r.ctx,
                    r.platform,
                    r.sampler,
                    r.watch,
                    r.ledger,
                    r.work,
                    r.natural_end,
                    phase,
                    r.tail,
                    r.succeeded_at,
                )
        finally:
            if guard.late is not None:  # the job's outcome stands; the run stops after it
                r.sink.emit(
                    "harness",
                    "interrupted",
                    signal=signal.Signals(guard.late).name,
                    during="cleanup",
                )
            r.sink.emit("harness", "item_end", item=r.item_id, outcome=r.outcome)
            r.sink.close()
    if guard.late is not None:
        raise DrillInterrupted(guard.late, pending)
    return r.work


@dataclass
class _ItemParts:
    """What :func:`execute_item` runs one item with, and what is known of its outcome so
    far: ``outcome`` and ``natural_end`` are set as soon as the job's watch returns, so the
    cleanup and the ``item_end`` event see them even when a later phase raised."""

    item_id: str
    run_id: str
    work: Path
    sink: EventSink
    ledger: Ledger
    platform: Platform
    stop: StopConditions
    fault: Fault | None
    ctx: FaultContext
    sampler: ProcessSampler
    watch: Watch
    tail: LogTail | None
    outcome: str = "unknown"
    natural_end: bool = False
    #: When the watch saw the job end by itself successfully (None: it did not).
    succeeded_at: float | None = None


def _open_item(
    plan: Plan, kind: ItemKind, item: Scenario | Control | None, run_dir: Path
) -> _ItemParts:
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
    fault: Fault | None = make_fault(item.fault) if item is not None else None
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
    watch = Watch(rundir.events_dir(work), StepStoreWriter(rundir.events_dir(work)))
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
    return _ItemParts(
        item_id=item_id,
        run_id=run_id,
        work=work,
        sink=sink,
        ledger=ledger,
        platform=platform,
        stop=stop,
        fault=fault,
        ctx=ctx,
        sampler=sampler,
        watch=watch,
        tail=tail,
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


def _run_item(
    plan: Plan,
    kind: ItemKind,
    item: Scenario | Control | None,
    run_dir: Path,
    r: _ItemParts,
    phase: PhaseClock,
    report: Reporter,
) -> None:
    """The item's phases up to its cleanup: bring-up, the job (watched until it ends or is
    stopped; sets ``r.outcome`` and ``r.natural_end``), why it failed, and after a natural
    end the settle and post-windows. The caller's ``finally`` cleans up."""
    with phase("bring-up"):
        r.platform.prepare()
        job = build_job(plan, item, r.work, r.run_id)
        if r.fault is not None:
            _prepare_fault(r.fault, r.ctx)
    with phase("job"):
        r.platform.submit(job)
        r.sampler.start()
        if r.tail is not None:
            r.tail.start()
        if isinstance(r.platform, NetworkTrack):
            r.platform.start_network_track(plan.observation.net_hz)
        r.outcome, r.natural_end = _watch_job(
            plan, kind, item, r.fault, r.ctx, r.platform, r.stop, r.watch, report
        )
        if r.outcome == JobState.SUCCEEDED.value:
            r.succeeded_at = time.monotonic()
    if r.outcome == JobState.FAILED.value:  # say why, from the launcher's logs
        with phase("sampling", part="why the job failed"):
            facts = failure_facts(r.work, job.argv, run_dir.resolve())
            r.sink.emit("harness", "job_failed", **facts)
    if r.natural_end:
        with phase("settle"):
            _settle(r.platform, r.sampler, r.sink, plan.observation.settle_s)
        if plan.observation.post_s > 0:
            with phase("post-window"):
                _observe_after_end(plan.observation.post_s, r.platform, r.sampler, r.sink)


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


def _watch_job(
    plan: Plan,
    kind: ItemKind,
    item: Scenario | Control | None,
    fault: Fault | None,
    ctx: FaultContext,
    platform: Platform,
    stop: StopConditions,
    watch: Watch,
    report: Reporter,
) -> tuple[str, bool]:
    """Poll until the job ends or a stop condition fires. Returns (outcome, ended naturally)."""
    sink = ctx.sink
    started = time.monotonic()
    injected_at: float | None = None
    reverted = False
    resubmitted = False
    item_id = item.id if item is not None else "baseline"
    while True:
        time.sleep(POLL_S)
        now = time.monotonic()
        watch.poll()
        state = platform.poll()
        if fault is not None and injected_at is None and watch.triggered(item.trigger, now):  # type: ignore[union-attr]
            injected_at = _inject(fault, ctx, item, watch)  # type: ignore[arg-type]
            if injected_at < 0:
                injected_at = now  # failed: do not retry, the item is judged "retest"
                reverted = True
        duration = fault.spec.duration_s if fault is not None else None
        if (
            injected_at is not None
            and not reverted
            and duration is not None
            and now - injected_at >= duration
        ):
            _revert(fault, ctx)  # type: ignore[arg-type]
            reverted = True
        report(
            item_id,
            f"{kind} {item_id}: step {watch.max_step}, job {state.value}"
            + (", fault injected" if injected_at else ""),
        )
        if state.ended:
            recovery = getattr(item, "recovery", None)
            if (
                state == JobState.FAILED
                and recovery is not None
                and recovery.action == "resubmit"
                and not resubmitted
            ):
                if injected_at is not None and not reverted:
                    _revert(fault, ctx)  # type: ignore[arg-type]
                    reverted = True
                resubmitted = True
                sink.emit(
                    "harness",
                    "operator_action",
                    action="resubmit",
                    operator=plan.responsibility.recovery_operator,
                    runbook=recovery.runbook or "resubmit the job unchanged",
                    steps=platform.resubmit_steps(),
                    at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                )
                platform.resubmit()
                continue
            return state.value, True
        reason = stop_reason(watch, stop, started, now)
        if reason is not None:
            sink.emit(
                "harness",
                "stop_condition",
                condition=reason[0],
                detail=reason[1],
                last_step=watch.max_step,
            )
            return f"stopped: {reason[0]}", False


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


def _inject(fault: Fault, ctx: FaultContext, item: Scenario | Control, watch: Watch) -> float:
    spec = fault.spec
    ctx.sink.emit(
        "fault",
        "inject_start",
        fault=spec.kind,
        target=spec.target_label(),
        spec=spec.model_dump(mode="json"),
        trigger=item.trigger.describe(),
    )
    before = set(ctx.ledger.entries)
    try:
        facts = fault.inject(ctx)
    except FaultError as exc:
        ctx.sink.emit("fault", "inject_failed", fault=spec.kind, error=str(exc))
        return -1.0
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


def _finish(
    plan: Plan,
    fault: Fault | None,
    ctx: FaultContext,
    platform: Platform,
    sampler: ProcessSampler,
    watch: Watch,
    ledger: Ledger,
    work: Path,
    natural_end: bool,
    phase: PhaseClock,
    tail: LogTail | None = None,
    succeeded_at: float | None = None,
) -> list[str]:
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

    sink = ctx.sink
    with phase("teardown", part="revert the fault, stop the job"):
        if fault is not None:
            attempt("revert the fault", lambda: fault.revert(ctx))
        attempt("stop the job", lambda: platform.stop(reason="end of drill"))
    with phase("sampling"):
        if tail is not None:  # before the inventory: it hashes what the last lines saved
            attempt("read the job's last log lines", lambda: tail.stop(succeeded_at))
        _close_observation(plan, platform, sampler, watch, work, natural_end, attempt)
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
    sink.emit("harness", "cleanup", problems=problems, ledger_pending=len(pending))
    return pending


def _close_observation(
    plan: Plan,
    platform: Platform,
    sampler: ProcessSampler,
    watch: Watch,
    work: Path,
    natural_end: bool,
    attempt: Callable[[str, Callable[[], object]], None],
) -> None:
    """The closing observations: the snapshot after a stop, the last sample, the rest of
    the probe files into the step store, the checkpoint inventory and the exported
    artefacts hashed again."""
    sink = sampler.sink
    if not natural_end and sampler.running:
        attempt(
            "final process snapshot",
            lambda: sink.emit(
                "harness",
                "procs_final",
                **end_snapshot(platform, sampler, settle_s=0.0, after_stop=True),
            ),
        )
    attempt("stop the sampler", sampler.stop)
    attempt("close the step store", watch.close)

    def inventory() -> None:
        tl = Timeline.load(rundir.events_dir(work))
        records, pointer = take_inventory(
            tl, work / plan.checkpoint.dir, plan.checkpoint.latest_file, plan.checkpoint.keep
        )
        sink.emit("harness", "ckpt_latest", **pointer)
        for rec in records:
            sink.emit("harness", "ckpt_inventory", **rec)
        # the exported artefacts, hashed again now that nothing of the job writes any more
        for rec in verify_artifacts(tl, work):
            sink.emit("harness", "artifact_verified", **rec)

    attempt("checkpoint inventory failed", inventory)


def write_plan_copy(plan: Plan, source: Path | None, run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    as_json = json.dumps(plan.model_dump(mode="json"), indent=2) + "\n"
    write_file(run_dir / "plan.json", as_json, within=run_dir)
    # the file as the user wrote it, read again: opened as load_plan opens it (a FIFO put
    # in its place since is refused, not waited on), bounded the same way
    text = (
        read_named(source, limit=MAX_BYTES).decode("utf-8-sig", errors="replace")
        if source
        else yaml.safe_dump(plan.model_dump(mode="json"), sort_keys=False)
    )
    write_file(run_dir / rundir.PLAN, text, within=run_dir)
