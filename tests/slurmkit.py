"""Helpers for the Slurm drill tests: the example plan shrunk to drill-test size and run
through the CLI, and readers of what Slurm decided (the ``platform`` events)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultdrill.host.linux import netns_unavailable
from faultdrill.platforms.slurm.embedded import slurm_missing
from tests.drillkit import ROOT, cli_env, kill_task

EXAMPLE = ROOT / "examples" / "slurm.yaml"
_WHY = netns_unavailable() or slurm_missing()
needs_slurm = pytest.mark.skipif(_WHY is not None, reason=f"no embedded Slurm here: {_WHY}")


def example_raw() -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return raw


def shrunk(
    raw: dict[str, Any], *, steps: int = 20, every: int = 5, at_step: int = 8
) -> dict[str, Any]:
    """``raw`` with a unique task id, ``steps`` steps, a checkpoint every ``every``, every
    ``at_step`` trigger moved to ``at_step``, and every round going on after a failure."""
    raw = json.loads(json.dumps(raw))
    raw["task"]["id"] = f"t-{uuid.uuid4().hex[:10]}"
    raw["task"]["workload"].update(steps=steps)
    raw["checkpoint"]["every_steps"] = every
    for rnd in raw.get("rounds", []):
        rnd["continue_on_failure"] = True
        for sc in rnd["scenarios"]:
            if "at_step" in sc["trigger"]:
                sc["trigger"] = {"at_step": at_step}
    return raw


def run_plan_cli(raw: dict[str, Any], tmp_path: Path, timeout: float = 900) -> dict[str, Any]:
    """``faultdrill run`` of ``raw`` (as a user would run it); the report. The run's output
    is kept in ``tmp_path/run.log``."""
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "faultdrill.cli", "run", str(path), "--out", str(out)]
    if not raw.get("controls"):
        argv.append("--no-controls")  # a drill plan without negative controls, said so
    try:
        done = subprocess.run(
            [*argv, "--quiet"],
            env=cli_env(tmp_path / "state"),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    finally:
        kill_task(raw["task"]["id"])
    (tmp_path / "run.log").write_text(done.stdout + done.stderr)
    assert (out / "report.json").is_file(), done.stdout[-2000:] + done.stderr[-3000:]
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    report["_run_dir"] = str(out)
    return report


def scenario(report: dict[str, Any], sid: str) -> dict[str, Any]:
    for s in report["scenarios"]:
        if s["id"] == sid:
            found: dict[str, Any] = s
            return found
    raise AssertionError(
        f"no scenario {sid} in the report: {[s['id'] for s in report['scenarios']]}"
    )


def events(report: dict[str, Any], sid: str, stream: str = "platform") -> list[dict[str, Any]]:
    """The item's events of one stream, in order."""
    kind = (
        "controls" if any(c.get("id") == sid for c in report["plan"]["controls"]) else "scenarios"
    )
    path = Path(report["_run_dir"]) / kind / sid / "events" / f"{stream}.jsonl"
    out = [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]
    return sorted(out, key=lambda e: e["mono"])


def slurm(report: dict[str, Any], sid: str, kind: str) -> list[dict[str, Any]]:
    """slurmctld's decisions of one kind in an item (``node_state``, ``job_requeued``...)."""
    return [e for e in events(report, sid) if e["kind"] == kind and e.get("source") == "slurmctld"]


def injected_at(report: dict[str, Any], sid: str) -> float:
    (ev,) = [e for e in events(report, sid, "fault") if e["kind"] == "injected"]
    mono: float = ev["mono"]
    return mono


def failing(s: dict[str, Any]) -> dict[str, str]:
    """check -> message of every failed finding of an item."""
    return {
        f["check"]: f["message"]
        for ev in [*s["evidence"].values(), s["expectation"]]
        for f in ev["findings"]
        if f["verdict"] == "fail"
    }


def explain(s: dict[str, Any]) -> str:
    """What to print when an item did not pass."""
    bad = [
        f"{f['check']} {f['verdict']}: {f['message']}"
        for ev in [*s["evidence"].values(), s["expectation"]]
        for f in ev["findings"]
        if f["verdict"] != "pass"
    ]
    return json.dumps({"verdict": s["verdict"], "not pass": bad, "q": s["questions"]}, indent=1)
