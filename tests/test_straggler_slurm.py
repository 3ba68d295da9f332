"""A real straggler drill on the embedded Slurm cluster: rank 1's task (its process tree
on node n2) is held to 5 % of a core for 5 s; Slurm keeps the job where it was, the job
rides the straggler out, the report gives per-rank step times and says that nothing
noticed it, and the throttle's cpu group is gone afterwards. It runs in one plan with the
Slurm slow-storage scenario (``tests/new_kinds_slurm.py``: one cluster, one baseline)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from faultdrill.host.throttle import cpu_controller_missing
from tests.slurmkit import explain, needs_slurm, scenario
from tests.test_netns_kit import ledger_records
from tests.test_straggler_drill import findings

pytestmark = [
    pytest.mark.drill,
    pytest.mark.root,
    needs_slurm,
    pytest.mark.skipif(cpu_controller_missing() is not None, reason=str(cpu_controller_missing())),
]


@pytest.fixture(scope="module")
def report(slurm_straggler_storage: dict[str, Any]) -> dict[str, Any]:
    """The session's Slurm straggler/storage run (``tests/new_kinds_slurm.py``)."""
    return slurm_straggler_storage


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
