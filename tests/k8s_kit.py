"""Helpers for the Kubernetes drill tests (no tests here).

* :data:`needs_test_cluster`: skip, naming the fix, where the test cluster cannot run (not
  root, no namespaces, no ``kubernetes`` client, no etcd-server or binaries);
* :func:`plan_raw`: a small plan for ``platform: kubernetes`` on the test cluster (2 nodes and
  a spare, 20 steps, a checkpoint every 5, faults at step 12);
* :func:`run_plan`: ``faultdrill run`` of it through the CLI, its report;
* :func:`k8s_leftovers`: everything of a run still on the machine (namespaces, links,
  cgroups, rules of every ledger under the run directory, recorded daemons alive, secret
  files, processes of the task).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultdrill.errors import EnvironmentPrepError
from faultdrill.host import procfs
from faultdrill.host.linux import netns_unavailable
from faultdrill.platforms.kubernetes.binaries import find_binaries
from faultdrill.platforms.kubernetes.client import client_missing
from tests.drillkit import ROOT, cli_env, kill_task
from tests.test_netns_kit import ledger_records, leftovers

EXAMPLES = ROOT / "examples"


def _unavailable() -> str | None:
    why = netns_unavailable() or client_missing()
    if why:
        return why
    try:
        find_binaries()
    except EnvironmentPrepError as exc:
        return str(exc)
    return None


WHY_NOT = _unavailable()
needs_test_cluster = pytest.mark.skipif(
    WHY_NOT is not None,
    reason=f"no Kubernetes test cluster here: {WHY_NOT} (scripts/setup-kubernetes.sh)",
)


def plan_raw(*scenarios: dict[str, Any], **workload: Any) -> dict[str, Any]:
    """The test cluster plan: a unique task id, ``scenarios`` in round 1 (continue on
    failure: each is judged on its own), ``workload`` over the defaults."""
    return {
        "version": 1,
        "task": {
            "id": f"t-k8s-{uuid.uuid4().hex[:8]}",
            "config_version": "lm-v1",
            "code_id": "faultdrill.workloads.lm@0.1.0",
            "entrypoint": {"module": "faultdrill.workloads.lm"},
            "workload": {"steps": 20, "global_batch": 8, "step_sleep_s": 0.1, **workload},
        },
        "data": {"snapshot": "synthetic-markov-v1", "digest": "seed:1234/dataset_size:512"},
        "resources": {
            "platform": "kubernetes",
            "nodes": 2,
            "spares": 1,
            "max_restarts": 3,
            "timeouts": {"gloo_s": 10, "rdzv_join_s": 60},
            "kubernetes": {"test_cluster": True},
        },
        "checkpoint": {"dir": "ckpt", "every_steps": 5, "keep": 3},
        "seeds": {"global": 1234},
        "observation": {"sample_hz": 10, "settle_s": 1.0},
        "responsibility": {
            "injector": "a",
            "observer": "b",
            "recovery_operator": "c",
            "signer": "d",
        },
        "stop": {"max_wall_s": 180, "max_no_progress_s": 90},
        "rounds": [{"round": 1, "continue_on_failure": True, "scenarios": list(scenarios)}]
        if scenarios
        else [],
    }


def scenario(sid: str, fault: dict[str, Any], at_step: int = 12, **more: Any) -> dict[str, Any]:
    return {"id": sid, "fault": fault, "trigger": {"at_step": at_step}, **more}


def write(tmp_path: Path, raw: dict[str, Any]) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def run_plan(tmp_path: Path, raw: dict[str, Any], *, timeout: float = 900) -> dict[str, Any]:
    """``faultdrill run`` of ``raw`` into ``tmp_path/run``; its report (with ``_out``,
    ``_stdout`` and ``_state`` added)."""
    plan, out, state = write(tmp_path, raw), tmp_path / "run", tmp_path / "state"
    argv = [sys.executable, "-m", "faultdrill.cli", "run", str(plan), "--out", str(out)]
    if not raw.get("controls"):
        argv.append("--no-controls")  # a drill plan without negative controls, said so
    try:
        done = subprocess.run(
            [*argv, "--quiet"],
            env=cli_env(state),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
        )
    finally:
        kill_task(raw["task"]["id"])
    assert (out / "report.json").is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    report.update(_out=str(out), _stdout=done.stdout + done.stderr, _state=str(state))
    return report


def events(work: Path) -> list[dict[str, Any]]:
    """Every event of an item, in time order."""
    out = []
    for path in (work / "events").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return sorted(out, key=lambda e: float(e.get("mono", 0.0)))


def k8s_leftovers(run: Path, task_id: str) -> list[str]:
    """Everything of the run still on the machine (see the module docstring)."""
    left = []
    for ledger in sorted(run.rglob("ledger.jsonl")):
        left += leftovers(ledger, task_id)
        for rec in ledger_records(ledger):
            data = rec["data"]
            if rec["kind"] == "k8s-process" and procfs.alive(data["pid"], data["start_time"]):
                left.append(f"{data['name']} pid {data['pid']} alive")
            elif rec["kind"] == "k8s-files":
                left += [f"file {p}" for p in data["paths"] if Path(p).exists()]
            elif rec["kind"] == "scratch-dir" and Path(data["path"]).exists():
                left.append(f"scratch dir {data['path']}")
            if not rec["reverted"]:
                left.append(f"ledger entry {rec['kind']} {rec.get('label')} not reverted")
    return left


def item(report: dict[str, Any], item_id: str) -> dict[str, Any]:
    found: dict[str, Any] = next(s for s in report["scenarios"] if s["id"] == item_id)
    return found


def verdicts(s: dict[str, Any]) -> dict[str, str]:
    """check -> worst verdict of its findings, for one report item."""
    out: dict[str, str] = {}
    rank = {"pass": 0, "retest": 1, "fail": 2}
    for ev in [*s["evidence"].values(), s["expectation"]]:
        for f in ev["findings"]:
            old = out.get(f["check"], "pass")
            out[f["check"]] = max(old, f["verdict"], key=lambda v: rank.get(v, 0))
    return out
