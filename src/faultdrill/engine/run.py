"""A whole drill: the baseline first, then the rounds in order, then the controls.

Round discipline: a round runs only if every scenario of the earlier rounds passed, unless
that earlier round says ``continue_on_failure``. Items not run are listed with the reason.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from faultdrill import plugins, rundir
from faultdrill.checks import Verdict
from faultdrill.engine.dossier import (
    amend_change_record,
    data_dossier,
    resource_extras,
    snapshot_record,
)
from faultdrill.engine.item import Reporter, execute_item
from faultdrill.engine.phases import record_phase
from faultdrill.environment import environment_facts
from faultdrill.errors import DrillError
from faultdrill.judge.evaluate import ItemResult, RunResult, evaluate_item
from faultdrill.plan import Control, Plan, Scenario
from faultdrill.plan.source import MAX_BYTES
from faultdrill.platforms import PLATFORMS
from faultdrill.readings.reference import Reference
from faultdrill.report import write_reports
from faultdrill.rundir import ItemKind
from faultdrill.safepath import read_named, write_file
from faultdrill.timeline import Timeline

__all__ = [
    "Progress",
    "host_problem",
    "machine_problems",
    "run_plan",
    "write_dossier",
    "write_plan_copy",
]


def write_plan_copy(plan: Plan, source: Path | None, run_dir: Path) -> None:
    """The plan as admitted (``plan.json``) and as its author wrote it, into the run."""
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


def write_dossier(
    plan: Plan,
    run_dir: Path,
    started: float,
    ended: float,
    *,
    timeline: Timeline | None = None,
    data_before: dict[str, Any] | None = None,
) -> None:
    """The baseline's frozen dossiers: task, data, resources, recovery, responsibility.

    ``timeline``: the baseline's, for what only the run shows (the identity the replicas ran
    as, which node got which rank); ``data_before``: the data snapshot's state before the
    baseline (:func:`~faultdrill.engine.dossier.snapshot_record`). The change record gets
    the state after the baseline now, and after the last item from :func:`run_plan`."""
    res = plan.resources
    dossier = {
        "task": {
            "id": plan.task.id,
            "submitter": plan.task.submitter,
            "config_version": plan.task.config_version,
            "code_id": plan.task.code_id,
            "entrypoint": plan.task.entrypoint.model_dump(mode="json"),
            "workload": plan.task.workload,
        },
        "data": data_dossier(
            plan, timeline, data_before, snapshot_record(plan, "after the baseline")
        ),
        "resources": {
            **res.model_dump(mode="json"),
            "world_size": res.world_size,
            "topology": f"{res.nodes} node(s) x {res.procs_per_node} process(es), "
            f"{res.spares} spare(s), isolation {res.isolation}",
            "timeouts_note": "these timeouts decide detection time",
            **resource_extras(plan, timeline),
        },
        "recovery": {
            "checkpoint": plan.checkpoint.model_dump(mode="json"),
            "max_restarts": res.max_restarts,
        },
        "seeds": plan.seeds,
        "responsibility": plan.responsibility.model_dump(mode="json"),
        "ownership": {d: plan.ownership.owner_of(d) for d in type(plan.ownership).model_fields},
        "observation": {
            **plan.observation.model_dump(mode="json"),
            "baseline_window": {
                "start": started,
                "end": ended,
                "seconds": round(ended - started, 3),
            },
            "post_window": {
                "post_s": plan.observation.post_s,
                "post_steps": plan.observation.post_steps,
                "note": "post_s: sampling goes on this long after each item's job ended "
                "(0: only the settle snapshot); post_steps: the trend window after recovery "
                "(0: every step after it)",
            },
        },
        "environment": environment_facts(),
    }
    options = _platform_options(rundir.item_dir(run_dir, "baseline", "baseline"))
    if options:
        dossier["resources"]["platform_options"] = options
    path = rundir.dossier_path(run_dir)
    path.write_text(json.dumps(dossier, indent=2) + "\n")


def _platform_options(work: Path) -> dict[str, object]:
    """What the platform recorded of its own recovery-deciding options in the baseline
    (its ``platform``/``dossier`` event: Slurm's requeue, timeouts...); {} if none."""
    try:
        events = Timeline.load(rundir.events_dir(work)).of("platform", "dossier")
    except OSError:
        return {}
    return dict(events[-1].fields) if events else {}


def machine_problems(plan: Plan, ids: Iterable[str]) -> dict[str, dict[str, str]]:
    """For each item of ``ids`` whose fault needs abilities this machine lacks now (root,
    FUSE...): per ability, what is missing and its fix. A plan is validated against its
    platform alone (so a recorded run can be judged anywhere); this is checked before a run.
    The machine is asked once for the whole plan, not once per item."""
    from faultdrill.faults import FAULTS

    plugins.load()
    platform = PLATFORMS[plan.resources.platform].variant_for(plan.resources)
    wanted = set(ids)
    needs = {
        item.id: FAULTS[item.fault.kind].requires_for(item.fault)
        for item in plan.items()
        if item.id in wanted
    }
    # One question to the machine for all items: each ability is judged on its own.
    lacks = platform.machine_lacks(frozenset().union(*needs.values()))
    out: dict[str, dict[str, str]] = {}
    for item_id, need in needs.items():
        missing = {str(a): why for a, why in lacks.items() if a in need}
        if missing:
            out[item_id] = missing
    return out


def host_problem(plan: Plan) -> str | None:
    """What this machine lacks to host the plan's layout at all (``isolation: netns``
    without root...), with its fix; None when nothing is missing."""
    plugins.load()
    return PLATFORMS[plan.resources.platform].variant_for(plan.resources).host_lacks(plan.resources)


def _refuse_what_this_machine_cannot_run(plan: Plan, selected: list[str]) -> None:
    """Raise one DrillError naming everything this machine lacks for the selection (the
    layout itself, then each item), with the fixes; nothing when it lacks nothing."""
    host = host_problem(plan)
    problems = machine_problems(plan, selected)
    if host is None and not problems:
        return
    parts = [f"this machine cannot run this plan at all: {host}"] if host else []
    if problems:
        lines = "".join(
            f"\n  {item}: needs {ability!r}, which this machine lacks: {why}"
            for item, lacks in problems.items()
            for ability, why in lacks.items()
        )
        parts.append(
            f"this machine cannot run {len(problems)} selected item(s):{lines}\n"
            "provide what is named, or leave these items out with --only"
        )
    raise DrillError("\n".join(parts))


class Progress(Protocol):
    """What a caller is told as a run goes: each item's start and end, with its number
    (``index`` of ``total``: the baseline, then every selected scenario and control)."""

    def started(self, item: str, kind: str, index: int, total: int) -> None: ...

    def finished(
        self,
        item: str,
        kind: str,
        index: int,
        total: int,
        result: ItemResult | None,
        reason: str | None,
    ) -> None:
        """``result``: the item judged; None when it was not run (``reason`` says why)."""


@dataclass
class _Announcer:
    """Numbers the items as they run and tells ``on_item`` and ``progress`` of each."""

    total: int
    on_item: Callable[[str, str, Verdict | None], None]
    progress: Progress | None
    index: int = 0

    def start(self, item: str, kind: str) -> None:
        self.index += 1
        if self.progress is not None:
            self.progress.started(item, kind, self.index, self.total)

    def skip(self, item: str, kind: str, reason: str) -> None:
        """An item not run: it is counted and its end said, it never starts."""
        self.index += 1
        self.done(item, kind, None, reason)

    def done(
        self, item: str, kind: str, result: ItemResult | None, reason: str | None = None
    ) -> None:
        self.on_item(item, kind, result.verdict if result is not None else None)
        if self.progress is not None:
            self.progress.finished(item, kind, self.index, self.total, result, reason)


def run_plan(
    plan: Plan,
    run_dir: Path,
    *,
    source: Path | None = None,
    only: set[str] | None = None,
    controls: bool = True,
    report: Reporter = lambda _i, _s: None,
    on_item: Callable[[str, str, Verdict | None], None] = lambda _i, _k, _v: None,
    progress: Progress | None = None,
) -> RunResult:
    """Execute and judge a plan into ``run_dir``. ``only`` limits scenarios/controls by id."""
    run_dir = run_dir.resolve()  # a relative --out must not depend on a job's working dir
    if run_dir.exists() and any(run_dir.iterdir()):
        raise DrillError(f"{run_dir} is not empty; choose a new --out directory")
    selected = [s.id for s in plan.scenarios() if only is None or s.id in only]
    if controls:
        selected += [c.id for c in plan.controls if only is None or c.id in only]
    _refuse_what_this_machine_cannot_run(plan, selected)  # before anything is written
    write_plan_copy(plan, source, run_dir)
    chosen = {"selected": selected, "no_controls": not controls}
    (run_dir / "selection.json").write_text(json.dumps(chosen, indent=2) + "\n")
    say = _Announcer(1 + len(selected), on_item, progress)
    plugins.load()
    platform = PLATFORMS[plan.resources.platform].variant_for(plan.resources)
    # One scope around every item: an embedded cluster is brought up once per run.
    with platform.run_scope(plan.resources, run_dir):
        base, base_tl, reference, items, skipped, works = _execute(
            plan, run_dir, only, controls, report, say
        )
    (run_dir / "skipped.json").write_text(json.dumps(skipped, indent=2) + "\n")
    amend_change_record(
        plan,
        rundir.dossier_path(run_dir),
        {"baseline": base_tl, **{i.id: i.timeline for i in items}},
    )
    result = RunResult(
        plan,
        run_dir,
        base,
        reference,
        items,
        [{"id": k, "kind": "scenario", "reason": v} for k, v in skipped.items()],
        controls_waived=not controls,
    )
    _write_reports_timed(result, works)
    return result


def _execute(
    plan: Plan,
    run_dir: Path,
    only: set[str] | None,
    controls: bool,
    report: Reporter,
    say: _Announcer,
) -> tuple[ItemResult, Timeline, Reference, list[ItemResult], dict[str, str], list[Path]]:
    """The baseline, the rounds in order and the controls, each executed and judged;
    returns the baseline's result and timeline, its reference, the items' results, the
    scenarios not run (id -> reason) and the items' directories."""
    skipped: dict[str, str] = {}
    data_before = snapshot_record(plan, "before the baseline")
    started = time.time()
    say.start("baseline", "baseline")
    base_work = execute_item(plan, "baseline", None, run_dir, report)
    ended = time.time()
    t = time.monotonic()  # the baseline's checks: its load, dossier and reference included
    base_tl = Timeline.load(rundir.events_dir(base_work))
    write_dossier(plan, run_dir, started, ended, timeline=base_tl, data_before=data_before)
    reference = Reference.from_timeline(base_tl)
    base = evaluate_item(plan, "baseline", None, base_work, reference, timeline=base_tl)
    _timed(plan, base_work, "checks", t)
    say.done("baseline", "baseline", base)
    works = [base_work]
    items: list[ItemResult] = []
    blocked_by: str | None = None
    if base.verdict != Verdict.PASS and not (
        base.verdict == Verdict.RETEST and _only_unobservable(base)
    ):
        blocked_by = "the baseline did not pass its own checks"
    for rnd in plan.rounds:
        round_ok = True
        for sc in rnd.scenarios:
            if only is not None and sc.id not in only:
                continue
            if blocked_by:
                skipped[sc.id] = f"not run: {blocked_by}"
                say.skip(sc.id, "scenario", skipped[sc.id])
                continue
            res = _run_item(plan, "scenario", sc, run_dir, report, reference, base, say, works)
            items.append(res)
            round_ok &= res.verdict == Verdict.PASS
        if not round_ok and not rnd.continue_on_failure and blocked_by is None:
            blocked_by = f"round {rnd.round} did not pass (set continue_on_failure to go on)"
    for ctl in plan.controls if controls else ():
        if only is not None and ctl.id not in only:
            continue
        items.append(_run_item(plan, "control", ctl, run_dir, report, reference, base, say, works))
    return base, base_tl, reference, items, skipped, works


def _only_unobservable(res: ItemResult) -> bool:
    """Whether every finding of ``res`` that did not pass is a retest of something its
    platform declared it cannot observe (a real cluster's processes): such a baseline still
    gives the reference, and every drill of the run would retest the same way."""
    findings = [f for e in res.evidence.values() for f in e.findings]
    return res.aborted is None and all(
        f.verdict == Verdict.PASS or (f.verdict == Verdict.RETEST and f.data.get("unobservable"))
        for f in findings
    )


def _run_item(
    plan: Plan,
    kind: ItemKind,
    item: Scenario | Control,
    run_dir: Path,
    report: Reporter,
    reference: Reference,
    base: ItemResult,
    say: _Announcer,
    works: list[Path],
) -> ItemResult:
    """Run and judge one scenario or control (its checks timed as its ``checks`` phase);
    its directory is appended to ``works``."""
    say.start(item.id, kind)
    work = execute_item(plan, kind, item, run_dir, report)
    t = time.monotonic()
    res = evaluate_item(plan, kind, item, work, reference, base.verdict)
    _timed(plan, work, "checks", t)
    works.append(work)
    say.done(item.id, kind, res)
    return res


def _write_reports_timed(result: RunResult, works: list[Path]) -> None:
    """Write the run's reports; their time is each item's ``report`` phase, shared
    equally by the items."""
    t = time.monotonic()
    write_reports(result)
    seconds = time.monotonic() - t
    for work in works:
        record_phase(
            rundir.events_dir(work),
            result.plan.task.id,
            "report",
            t,
            seconds / len(works),
            run_s=round(seconds, 6),
            items=len(works),
        )


def _timed(plan: Plan, work: Path, phase: str, started: float) -> None:
    record_phase(rundir.events_dir(work), plan.task.id, phase, started, time.monotonic() - started)
