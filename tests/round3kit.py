"""Helpers for round-3 fault tests: one scenario run by a harness process that the test can
SIGKILL once the fault is applied (no baseline: the crash tests need only the fault)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml

from tests.drillkit import cli_env, demo_raw, faultdrill, kill_task, task_pids, wait_for

_RUN_ONE = """
import sys
from pathlib import Path
from faultdrill.engine.item import execute_item
from faultdrill.admit import load_plan
plan = load_plan(sys.argv[1])
sc = plan.scenarios()[0]
execute_item(plan, "scenario", sc, Path(sys.argv[2]))
"""


def one_scenario_plan(
    tmp_path: Path, scenario: dict[str, Any], **workload: Any
) -> tuple[Path, str]:
    """The demo plan reduced to one round-3 scenario (and no controls), unique task id."""
    raw = demo_raw()
    task = f"t-{uuid.uuid4().hex[:10]}"
    raw["task"]["id"] = task
    raw["task"]["workload"].update(workload)
    raw["rounds"] = [{"round": 3, "name": "round 3", "scenarios": [scenario]}]
    raw["controls"] = []
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path, task


def injected(work: Path) -> dict[str, Any] | None:
    path = work / "events" / "fault.jsonl"
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        ev = json.loads(line)
        if ev.get("kind") == "injected":
            return dict(ev)
        if ev.get("kind") == "inject_failed":
            raise AssertionError(f"the fault could not be injected: {ev.get('error')}")
    return None


class Harness:
    """A harness process running one scenario, started by :func:`start_harness`."""

    def __init__(self, tmp_path: Path, scenario: dict[str, Any], **workload: Any) -> None:
        self.plan, self.task = one_scenario_plan(tmp_path, scenario, **workload)
        self.run_dir = tmp_path / "run"
        self.work = self.run_dir / "scenarios" / str(scenario["id"])
        self.state = tmp_path / "state"
        self.env = cli_env(self.state)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _RUN_ONE, str(self.plan), str(self.run_dir)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def wait_injected(self, timeout: float = 90.0) -> dict[str, Any]:
        found: dict[str, Any] = {}

        def ready() -> bool:
            ev = injected(self.work)
            if ev is not None:
                found.update(ev)
            return ev is not None

        wait_for(ready, timeout, "the fault to be applied")
        return found

    def sigkill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def cleanup(self) -> str:
        done = faultdrill("cleanup", env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        text = done.communicate(timeout=90)[0].decode()
        assert done.returncode == 0, text
        return text

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        kill_task(self.task)

    def pids(self) -> list[int]:
        return task_pids(self.task)
