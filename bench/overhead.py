"""Harness overhead per drill item: its wall time beyond the job's own, by phase.

Runs the demo plan's baseline and ``kill-worker`` scenario for real on the local platform
(the reference workload under torchrun; network namespaces as root, else without them, as
the demo does), under its own task id so that nothing else on a shared machine mistakes its
processes for another run's. Then reads each item's ``harness``/``phase`` events
(:func:`faultdrill.engine.phases.harness_overhead`): the item's wall time (start to end,
plus judging it and its share of the reports) minus the job's own (from its submission to
its last agent's exit), and what each phase took.

Run alone: ``python -m bench.overhead``; it takes about two minutes on 2 cores.
``--only=`` (nothing) runs the baseline alone, and ``--steps N`` shortens the workload:
``python -m bench.overhead --only= --steps 12`` is the tiny size the test suite runs
(``tests/test_bench_smoke.py``, a drill test: one real item, well under a minute).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from importlib.resources import files
from pathlib import Path
from typing import Any

from faultdrill.admit import load_plan, parse_plan, plan_without
from faultdrill.engine.demo import without_netns_if_unavailable
from faultdrill.engine.phases import harness_overhead
from faultdrill.engine.run import machine_problems, run_plan
from faultdrill.plan import Plan
from faultdrill.timeline import Timeline

__all__ = ["TARGET_S", "measure"]

TARGET_S = 2.0
TASK = "bench-overhead"


def bench_plan(only: set[str], steps: int | None = None) -> tuple[Plan, list[str]]:
    """The demo plan under :data:`TASK` with its scenarios in ``only`` (none: the baseline
    alone) and ``steps`` training steps (None: the demo's), without what this machine
    cannot run."""
    demo = load_plan(Path(str(files("faultdrill") / "plans" / "demo.yaml")))
    unknown = only - {i.id for i in demo.items()}
    if unknown:
        raise SystemExit(f"the demo plan has no item {', '.join(sorted(unknown))}")
    raw = plan_without(demo, {i.id for i in demo.items()} - only, source="demo plan").model_dump(
        mode="json"
    )
    raw["task"]["id"] = TASK
    if steps is not None:
        raw["task"]["workload"]["steps"] = steps
    plan = parse_plan(raw, source="bench plan")
    notes = []
    plan, note = without_netns_if_unavailable(plan)
    if note:
        notes.append(note)
    lacking = machine_problems(plan, [i.id for i in plan.items()])
    if lacking:
        plan = plan_without(plan, set(lacking), source="bench plan")
        notes.append(f"left out: {', '.join(sorted(lacking))}")
    missing = only - {i.id for i in plan.items()}
    if missing:
        raise SystemExit(f"this machine cannot run {', '.join(sorted(missing))}")
    return plan, notes


def measure(only: set[str], steps: int | None = None) -> dict[str, Any]:
    """Run the baseline and ``only`` (``steps`` long, None: the demo's); per item, the
    overhead and its phases."""
    plan, notes = bench_plan(only, steps)
    with tempfile.TemporaryDirectory(prefix="faultdrill-overhead-") as tmp:
        run_dir = Path(tmp) / "run"
        t = time.perf_counter()
        result = run_plan(plan, run_dir, only=only, controls=False)
        run_s = time.perf_counter() - t
        items = {}
        for res in [result.baseline, *result.items]:
            if res is None:
                continue
            work = (
                run_dir / "baseline" if res.kind == "baseline" else run_dir / "scenarios" / res.id
            )
            over = harness_overhead(Timeline.load(work / "events"))
            if over is None:
                raise RuntimeError(f"{res.id}: no phase events were recorded")
            items[res.id] = {"verdict": res.verdict.value, **over}
    worst = max(v["overhead_s"] for v in items.values())
    return {
        "isolation": plan.resources.isolation,
        "notes": notes,
        "steps": plan.task.workload.get("steps"),
        "run_s": round(run_s, 2),
        "items": items,
        "max_overhead_s": worst,
        "target_s": TARGET_S,
        "meets_target": worst <= TARGET_S and all(v["verdict"] == "pass" for v in items.values()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument(
        "--only", default="kill-worker", help="scenario ids, comma-separated (empty: none)"
    )
    ap.add_argument("--steps", type=int, help="training steps (default: the demo plan's)")
    args = ap.parse_args(argv)
    only = {x for x in args.only.split(",") if x}
    json.dump(measure(only, args.steps), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
