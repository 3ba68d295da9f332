"""Shared helpers for tests that run real drills (subprocesses, torchrun)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from faultdrill.host import procfs
from faultdrill.timeline import Timeline
from faultdrill.timeline.store import STORE_DIR, read_store

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "src" / "faultdrill" / "plans" / "demo.yaml"


#: The workload's pace the drill tests built on the demo plan were sized and timed for
#: (their triggers, outage lengths and asserted checkpoints). The demo itself runs faster
#: (fewer steps, a shorter pause a step), which is no reason to retime every such drill.
DRILL_PACE = {"steps": 40, "step_sleep_s": 0.05}


def demo_raw() -> dict[str, Any]:
    """The demo plan as raw data, its workload at :data:`DRILL_PACE`."""
    raw: dict[str, Any] = yaml.safe_load(DEMO.read_text())
    raw["task"]["workload"].update(DRILL_PACE)
    return raw


def small_plan(tmp_path: Path, **workload: Any) -> tuple[Path, str]:
    """The demo plan with a unique task id (to find its processes) and workload overrides."""
    raw = demo_raw()
    task_id = f"t-{uuid.uuid4().hex[:10]}"
    raw["task"]["id"] = task_id
    raw["task"]["workload"].update(workload)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path, task_id


def cli_env(state_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["FAULTDRILL_STATE_DIR"] = str(state_dir)
    return env


def faultdrill(*args: str, env: dict[str, str], **kw: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "faultdrill.cli", *args], env=env, **kw)


def task_pids(task_id: str) -> list[int]:
    return procfs.pids_with_env("FAULTDRILL_TASK_ID", task_id)


def wait_for(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def has_steps(events_dir: Path, n: int = 3) -> bool:
    files = list(events_dir.glob("probe-rank*.jsonl"))
    return bool(files) and all(f.read_text().count('"kind":"step"') >= n for f in files)


def kill_task(task_id: str) -> None:
    """Last-resort cleanup so a failing test never leaks processes."""
    for pid in task_pids(task_id):
        procfs.kill_checked(pid, None, 9)


def demo_plans_run(out: Path, monkeypatch: Any) -> list[Any]:
    """``faultdrill demo --out OUT --quiet`` through the CLI, stopped (as by Ctrl-C) where
    it would start the first drill: returns the plans it was about to run."""
    from faultdrill.cli import main

    ran: list[Any] = []

    def stop_before_any_drill(plan: Any, *a: Any, **k: Any) -> Any:
        ran.append(plan)
        raise KeyboardInterrupt

    monkeypatch.setattr("faultdrill.engine.run.run_plan", stop_before_any_drill)
    assert main(["demo", "--out", str(out), "--quiet"]) == 130
    return ran


def item(report: dict[str, Any], item_id: str) -> dict[str, Any]:
    """One scenario or control of a ``report.json``, by id."""
    found: dict[str, Any] = next(s for s in report["scenarios"] if s["id"] == item_id)
    return found


def finding(s: dict[str, Any], check: str) -> dict[str, Any]:
    """The finding of ``check`` in a report item's evidence or expectation."""
    for ev in [*s["evidence"].values(), s["expectation"]]:
        for f in ev["findings"]:
            if f["check"] == check:
                return dict(f)
    raise AssertionError(f"no finding of {check} in {s['id']}")


def same_timeline(a: Timeline, b: Timeline) -> None:
    """Two :class:`~faultdrill.timeline.Timeline` loads of one events dir are the same:
    step columns (incarnations included), events, process lives (lineage: role, owner),
    incarnations, and the lines skipped, per file."""
    for col in ("mono", "rank", "pid", "step", "loss", "rng_start", "rng_end", "inc"):
        x, y = getattr(a.steps, col), getattr(b.steps, col)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), col
    assert np.array_equal(a.steps.rng_off, b.steps.rng_off)
    assert [e.to_json() for e in a.events] == [e.to_json() for e in b.events]
    assert (a.torn_lines, a.bad_lines, a.task_id) == (b.torn_lines, b.bad_lines, b.task_id)
    assert a.procs == b.procs
    assert [(i.members, i.first_step, i.last_step) for i in a.incarnations] == [
        (i.members, i.first_step, i.last_step) for i in b.incarnations
    ]


def assert_store_is_the_json_lines(run_dir: Path) -> int:
    """Every item of a recorded run that has a step store loads the same from it as from
    its JSON lines alone; returns how many items did (a test asserts it is not zero)."""
    n = 0
    for manifest in sorted(run_dir.glob(f"**/events/{STORE_DIR}/manifest.json")):
        events = manifest.parent.parent
        assert read_store(events) is not None, f"{events}: the store does not match its files"
        same_timeline(Timeline.load(events), Timeline.load(events, use_store=False))
        n += 1
    return n


#: Conclusion levels that prove the job continued from valid progress.
_CONTINUED = ("valid-progress", "consistent-results")


def class_level_contradiction(s: dict[str, Any]) -> str | None:
    """Why a report item's recovery class, its why and its conclusion level contradict each
    other, or None: "unrecoverable" (or a why saying the job did not continue from valid
    progress) beside a level that proves valid progress."""
    level = (s.get("conclusion") or {}).get("level")
    if level not in _CONTINUED:
        return None
    if s.get("recovery_class") == "unrecoverable":
        return (
            f"{s.get('id')}: class unrecoverable (the job did not continue from valid "
            f"progress) beside level {level}"
        )
    if "did not continue from valid progress" in str(s.get("recovery_class_why", "")):
        return (
            f"{s.get('id')}: the class's why says the job did not continue from valid "
            f"progress, beside level {level}"
        )
    return None


def assert_no_class_level_contradiction(report: dict[str, Any]) -> None:
    """No item of a ``report.json`` has a class that contradicts its conclusion level."""
    found = [class_level_contradiction(s) for s in report["scenarios"]]
    assert not [f for f in found if f], found
