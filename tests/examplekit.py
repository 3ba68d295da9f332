"""Runs an example job's faultdrill plan (``examples/<name>/plan.yaml``) through the CLI,
shrunk to drill-test size, and reads its report."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml

from tests.drillkit import ROOT, cli_env, kill_task

EXAMPLES = ROOT / "examples"


def shrunk_plan(
    name: str, tmp_path: Path, workload: dict[str, Any] | None = None
) -> tuple[Path, str]:
    """The example's plan with a unique task id, its script by absolute path, 16 steps,
    a checkpoint every 4 steps, kills at step 6 and damage after the 2nd save (step 8);
    ``workload``: further overrides of its workload config."""
    raw: dict[str, Any] = yaml.safe_load((EXAMPLES / name / "plan.yaml").read_text())
    task_id = f"t-{uuid.uuid4().hex[:10]}"
    raw["task"]["id"] = task_id
    raw["task"]["entrypoint"]["script"] = str(EXAMPLES / name / "train.py")
    raw["task"]["workload"].update(steps=16, step_sleep_s=0.1, **(workload or {}))
    raw["checkpoint"]["every_steps"] = 4
    for item in [s for r in raw["rounds"] for s in r["scenarios"]] + raw["controls"]:
        if "at_step" in item["trigger"]:
            item["trigger"] = {"at_step": 6}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path, task_id


def run_example(
    name: str, tmp_path: Path, only: list[str], workload: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``faultdrill run`` of the shrunk plan, for the items in ``only``; the report."""
    plan, task_id = shrunk_plan(name, tmp_path, workload)
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "faultdrill.cli", "run", str(plan), "--out", str(out)]
    argv += ["--only", ",".join(only), "--quiet"]
    try:
        done = subprocess.run(
            argv, env=cli_env(tmp_path / "state"), capture_output=True, text=True, timeout=560
        )
    finally:
        kill_task(task_id)
    assert (out / "report.json").is_file(), done.stdout[-2000:] + done.stderr[-3000:]
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    return report
