"""A whole drill: the baseline first, then the rounds in order, then the controls.

Round discipline: a round runs only if every scenario of the earlier rounds passed, unless
that earlier round says ``continue_on_failure``. Items not run are listed with the reason.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from faultdrill.checks import Verdict
from faultdrill.engine.item import (
    Reporter,
    environment_facts,
    execute_item,
    item_dir,
    write_plan_copy,
)
from faultdrill.errors import DrillError
from faultdrill.judge.evaluate import ItemResult, RunResult, evaluate_item
from faultdrill.judge.reference import Reference
from faultdrill.plan import Plan
from faultdrill.report import write_reports
from faultdrill.timeline import Timeline

__all__ = ["run_plan", "write_dossier"]


def write_dossier(plan: Plan, run_dir: Path, started: float, ended: float) -> None:
    """The baseline's frozen dossiers: task, data, resources, recovery, responsibility."""
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
        "data": plan.data.model_dump(mode="json"),
        "resources": {
            **res.model_dump(mode="json"),
            "world_size": res.world_size,
            "topology": f"{res.nodes} node(s) x {res.procs_per_node} process(es), "
            f"{res.spares} spare(s), isolation {res.isolation}",
            "timeouts_note": "these timeouts decide detection time",
        },
        "recovery": {
            "checkpoint": plan.checkpoint.model_dump(mode="json"),
            "max_restarts": res.max_restarts,
        },
        "seeds": plan.seeds,
        "responsibility": plan.responsibility.model_dump(mode="json"),
        "observation": {
            **plan.observation.model_dump(mode="json"),
            "baseline_window": {
                "start": started,
                "end": ended,
                "seconds": round(ended - started, 3),
            },
        },
        "environment": environment_facts(),
    }
    path = item_dir(run_dir, "baseline", "baseline") / "dossier.json"
    path.write_text(json.dumps(dossier, indent=2) + "\n")


def machine_problems(plan: Plan, ids: Iterable[str]) -> dict[str, dict[str, str]]:
    """For each item of ``ids`` whose fault needs abilities this machine lacks now (root,
    FUSE...): per ability, what is missing and its fix. A plan is validated against its
    platform alone (so a recorded run can be judged anywhere); this is checked before a run."""
    from faultdrill.faults import FAULTS
    from faultdrill.platforms import PLATFORMS

    platform = PLATFORMS[plan.resources.platform].variant_for(plan.resources)
    wanted = set(ids)
    out: dict[str, dict[str, str]] = {}
    for item in plan.items():
        if item.id not in wanted:
            continue
        lacks = platform.machine_lacks(FAULTS[item.fault.kind].requires_for(item.fault))
        if lacks:
            out[item.id] = {ability.value: why for ability, why in lacks.items()}
    return out


def run_plan(
    plan: Plan,
    run_dir: Path,
    *,
    source: Path | None = None,
    only: set[str] | None = None,
    controls: bool = True,
    report: Reporter = lambda _i, _s: None,
    on_item: Callable[[str, str, Verdict | None], None] = lambda _i, _k, _v: None,
) -> RunResult:
    """Execute and judge a plan into ``run_dir``. ``only`` limits scenarios/controls by id."""
    run_dir = run_dir.resolve()  # a relative --out must not depend on a job's working dir
    if run_dir.exists() and any(run_dir.iterdir()):
        raise DrillError(f"{run_dir} is not empty; choose a new --out directory")
    selected = [s.id for s in plan.scenarios() if only is None or s.id in only]
    if controls:
        selected += [c.id for c in plan.controls if only is None or c.id in only]
    problems = machine_problems(plan, selected)
    if problems:
        lines = "".join(
            f"\n  {item}: needs {ability!r}, which this machine lacks: {why}"
            for item, lacks in problems.items()
            for ability, why in lacks.items()
        )
        raise DrillError(
            f"this machine cannot run {len(problems)} selected item(s):{lines}\n"
            "provide what is named, or leave these items out with --only"
        )
    write_plan_copy(plan, source, run_dir)
    (run_dir / "selection.json").write_text(json.dumps({"selected": selected}, indent=2) + "\n")
    from faultdrill.platforms import PLATFORMS

    platform = PLATFORMS[plan.resources.platform].variant_for(plan.resources)
    # One scope for all items: an embedded cluster is brought up once per run.
    with platform.run_scope(plan.resources, run_dir):
        base, reference, items, skipped = _run_items(
            plan, run_dir, only=only, controls=controls, report=report, on_item=on_item
        )
    (run_dir / "skipped.json").write_text(json.dumps(skipped, indent=2) + "\n")
    result = RunResult(
        plan,
        run_dir,
        base,
        reference,
        items,
        [{"id": k, "kind": "scenario", "reason": v} for k, v in skipped.items()],
    )
    write_reports(result)
    return result


def _run_items(
    plan: Plan,
    run_dir: Path,
    *,
    only: set[str] | None,
    controls: bool,
    report: Reporter,
    on_item: Callable[[str, str, Verdict | None], None],
) -> tuple[ItemResult, Reference, list[ItemResult], dict[str, str]]:
    """The baseline, the rounds (with their discipline) and the controls, each executed and
    judged; returns the baseline's result, its reference, the items' results and the
    scenarios not run (id -> reason)."""
    skipped: dict[str, str] = {}
    started = time.time()
    base_work = execute_item(plan, "baseline", None, run_dir, report)
    write_dossier(plan, run_dir, started, time.time())
    base_tl = Timeline.load(base_work / "events")
    reference = Reference.from_timeline(base_tl)
    base = evaluate_item(plan, "baseline", None, base_work, reference, timeline=base_tl)
    on_item("baseline", "baseline", base.verdict)
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
                on_item(sc.id, "scenario", None)
                continue
            work = execute_item(plan, "scenario", sc, run_dir, report)
            res = evaluate_item(plan, "scenario", sc, work, reference, base.verdict)
            items.append(res)
            on_item(sc.id, "scenario", res.verdict)
            round_ok &= res.verdict == Verdict.PASS
        if not round_ok and not rnd.continue_on_failure and blocked_by is None:
            blocked_by = f"round {rnd.round} did not pass (set continue_on_failure to go on)"
    if controls:
        for ctl in plan.controls:
            if only is not None and ctl.id not in only:
                continue
            work = execute_item(plan, "control", ctl, run_dir, report)
            res = evaluate_item(plan, "control", ctl, work, reference, base.verdict)
            items.append(res)
            on_item(ctl.id, "control", res.verdict)
    return base, reference, items, skipped


def _only_unobservable(res: ItemResult) -> bool:
    """Whether every finding of ``res`` that did not pass is a retest of something its
    platform declared it cannot observe (a real cluster's processes): such a baseline still
    gives the reference, and every drill of the run would retest the same way."""
    findings = [f for e in res.evidence.values() for f in e.findings]
    return res.aborted is None and all(
        f.verdict == Verdict.PASS or (f.verdict == Verdict.RETEST and f.data.get("unobservable"))
        for f in findings
    )
