"""A real straggler drill on the embedded Slurm cluster: rank 1's task (its process tree
on node n2) is held to 5 % of a core for 5 s; Slurm keeps the job where it was, the job
rides the straggler out, the report gives per-rank step times and says that nothing
noticed it, and the throttle's cpu group is gone afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faultdrill.host.throttle import cpu_controller_missing
from tests.slurmkit import example_raw, explain, needs_slurm, run_plan_cli, scenario, shrunk
from tests.test_netns_kit import ledger_records
from tests.test_straggler_drill import SLOW, findings

pytestmark = [
    pytest.mark.drill,
    pytest.mark.root,
    needs_slurm,
    pytest.mark.skipif(cpu_controller_missing() is not None, reason=str(cpu_controller_missing())),
]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    raw = example_raw()
    expected = {"job": "completes", "recovery": "automatic", "resume": "no-restart"}
    sc = {"id": "slow-r1", "fault": SLOW, "trigger": {"at_step": 10}, "expected": expected}
    raw["rounds"] = [{"round": 1, "name": "straggler", "scenarios": [sc]}]
    raw["controls"] = []
    yield run_plan_cli(shrunk(raw, steps=80, every=10, at_step=10), tmp_path_factory.mktemp("s"))


def test_a_straggler_task_is_ridden_out_and_slurm_does_not_notice(
    report: dict[str, Any],
) -> None:
    s = scenario(report, "slow-r1")
    assert s["verdict"] == "pass", explain(s)
    [tolerated] = findings(s, "progress.straggler-tolerated")
    before, during, _after = tolerated["data"]["ranks"]["1"]
    assert before and during and during > 1.5 * before, tolerated
    print(tolerated["message"])  # shown with -s: the per-rank step times of the drill
    [detected] = findings(s, "expectation.straggler-detected")
    assert detected["message"].startswith("nothing noticed the slowed rank"), detected


def test_the_throttle_hit_a_task_on_its_node_and_was_undone(report: dict[str, Any]) -> None:
    ledger = Path(report["_run_dir"]) / "scenarios" / "slow-r1" / "ledger.jsonl"
    [throttle] = [r for r in ledger_records(ledger) if r["kind"] == "cpu-throttle"]
    assert throttle["reverted"], throttle
    assert not Path(throttle["data"]["path"]).exists()
    assert throttle["data"].get("moved"), "no process of the task was moved"
