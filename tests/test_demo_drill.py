"""The demo's round 1 worker kill and its known-bad workloads, for real.

One run of the demo plan restricted to the worker-kill scenario and the six workload bugs
of the core loop (real torchrun, gloo, 2 nodes) is shared by the assertions below: the
healthy recovery passes on all three kinds of evidence, and each known-bad workload is
caught by exactly the check its bug violates. The other rounds have their own drill tests.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faultdrill.cli import main
from faultdrill.evaluate import RunResult
from faultdrill.plan import load_plan
from faultdrill.runner import run_plan
from tests.drillkit import DEMO, kill_task, task_pids

pytestmark = pytest.mark.drill


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunResult, dict[str, Any]]]:
    base = tmp_path_factory.mktemp("demo")
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(base / "state")
    plan = load_plan(DEMO)
    try:
        result = run_plan(plan, base / "run", source=DEMO, only=ONLY)
        report = json.loads((base / "run" / "report.json").read_text())
        yield result, report
    finally:
        kill_task(plan.task.id)
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old


ONLY = {
    "kill-worker",
    "ctl-resume-ignored",
    "ctl-data-replayed",
    "ctl-skip-ahead",
    "ctl-optimizer-lost",
    "ctl-load-unverified",
    "ctl-stale-replica",
}


def item(report: dict[str, Any], item_id: str) -> dict[str, Any]:
    return next(s for s in report["scenarios"] if s["id"] == item_id)


def failing_checks(s: dict[str, Any]) -> set[str]:
    return {
        f["check"]
        for ev in s["evidence"].values()
        for f in ev["findings"]
        if f["verdict"] == "fail"
    }


def test_baseline_passes_its_own_checks(demo: tuple[RunResult, dict[str, Any]]) -> None:
    _, report = demo
    base = report["baseline"]
    assert base["verdict"] == "pass"
    assert base["steps"] == 40 and base["world_size"] == 2
    assert base["dossier"]["resources"]["timeouts"]["rdzv_join_s"] == 30


def test_kill_worker_recovers_from_the_last_valid_checkpoint(
    demo: tuple[RunResult, dict[str, Any]],
) -> None:
    _, report = demo
    s = item(report, "kill-worker")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)
    assert s["recovery_class"] == "automatic"
    assert {k: v["verdict"] for k, v in s["evidence"].items()} == {
        "progress": "pass",
        "resources": "pass",
        "results": "pass",
    }
    q = s["questions"]
    assert q["resumed_from"]["checkpoint"] == "step-000010"
    assert q["resumed_from"]["step"] == 10 and q["resumed_from"]["data_position"] == 80
    assert q["resumed_from"]["verified"] is True
    t = s["times"]
    # loose bounds: detection is the agent's monitor interval, recovery includes imports
    assert 0 <= t["detect_s"] < 5 and 0 < t["recover_s"] < 60
    assert t["recomputed_steps"] >= 5
    assert (
        q["worker_lost_at"]["since_injection_s"] <= q["new_replicas_ready_at"]["since_injection_s"]
    )
    assert q["old_replica_stopped_at"] is not None


@pytest.mark.parametrize(
    ("control", "check"),
    [
        ("ctl-resume-ignored", "progress.no-restart-from-zero"),
        ("ctl-data-replayed", "progress.sample-ledger"),
        ("ctl-skip-ahead", "progress.sample-ledger"),
        ("ctl-optimizer-lost", "results.loss-matches-baseline"),
        ("ctl-load-unverified", "progress.checkpoint-verified"),
        ("ctl-stale-replica", "resources.no-stale-replica"),
    ],
)
def test_each_known_bad_mode_is_caught_by_its_check(
    demo: tuple[RunResult, dict[str, Any]], control: str, check: str
) -> None:
    _, report = demo
    s = item(report, control)
    assert s["control"] is True and s["expected_check"] == check
    assert s["caught"] is True, json.dumps(s["evidence"], indent=1)
    assert check in failing_checks(s)
    assert s["verdict"] == "fail"


def test_stale_replica_fails_resources_not_only_progress(
    demo: tuple[RunResult, dict[str, Any]],
) -> None:
    _, report = demo
    s = item(report, "ctl-stale-replica")
    assert s["evidence"]["resources"]["verdict"] == "fail"
    assert s["recovery_class"] == "manual-confirmation"


def test_offline_check_reproduces_the_verdicts(
    demo: tuple[RunResult, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    result, report = demo
    before = {s["id"]: (s["verdict"], s.get("caught")) for s in report["scenarios"]}
    assert main(["check", str(result.run_dir)]) == 0
    after = json.loads((result.run_dir / "report.json").read_text())
    assert {s["id"]: (s["verdict"], s.get("caught")) for s in after["scenarios"]} == before
    assert "overall OK" in capsys.readouterr().out


def test_nothing_left_behind(demo: tuple[RunResult, dict[str, Any]]) -> None:
    result, report = demo
    assert result.ok and report["summary"]["ok"]
    assert task_pids(report["task_id"]) == []
    active = Path(os.environ["FAULTDRILL_STATE_DIR"]) / "active"
    assert not active.exists() or list(active.iterdir()) == []
    md = (result.run_dir / "report.md").read_text()
    assert "The four questions" in md and "Negative controls" in md
