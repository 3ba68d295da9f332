"""A real straggler drill on the local platform (``isolation: netns``): rank 1's replica
tree is held to 5 % of a core for 5 s; the job rides it out and the report gives per-rank
step times before, during and after, the steps lost, and says plainly that nothing noticed
it. The control throttles rank 1 to 1 % for 20 s with a gloo timeout of 1 s, shorter than
a slowed step: the job cannot ride that out and the straggler check must fail it. After
the drill no cpu group of the run is left. Both run in one plan with the slow storage's and
the data outage's items (``tests/new_kinds_local.py``: one baseline)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from faultdrill.host.throttle import CPU_ROOT, cpu_controller_missing
from tests.new_kinds_local import Drill
from tests.test_netns_kit import ledger_records

pytestmark = [
    pytest.mark.drill,
    pytest.mark.root,
    pytest.mark.skipif(cpu_controller_missing() is not None, reason=str(cpu_controller_missing())),
]


@pytest.fixture(scope="module")
def drill(straggler_io_drill: Drill) -> tuple[Path, dict[str, Any]]:
    """The straggler's items in the session's straggler/storage/data run
    (``tests/new_kinds_local.py``)."""
    return straggler_io_drill.run_dir, straggler_io_drill.report


def findings(found: dict[str, Any], check: str) -> list[dict[str, Any]]:
    parts = [*found["evidence"].values(), found["expectation"]]
    return [f for part in parts for f in part["findings"] if f["check"] == check]


def item(report: dict[str, Any], item_id: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [s for s in report["scenarios"] if s["id"] == item_id]
    assert len(found) == 1, [s["id"] for s in report["scenarios"]]
    return found[0]


def test_the_straggler_is_ridden_out_with_per_rank_step_times(
    drill: tuple[Path, dict[str, Any]],
) -> None:
    _, report = drill
    s = item(report, "slow-r1")
    assert s["verdict"] == "pass", json.dumps(s, indent=1)[:6000]
    [tolerated] = findings(s, "progress.straggler-tolerated")
    print(tolerated["message"])  # shown with -s: the per-rank step times of the drill
    assert tolerated["verdict"] == "pass", tolerated
    ranks = tolerated["data"]["ranks"]
    assert set(ranks) == {"0", "1"}
    before, during, _after = ranks["1"]
    assert before and during and during > 1.5 * before, ranks  # the straggler really slowed
    assert tolerated["data"]["steps_lost"] > 0
    [detected] = findings(s, "expectation.straggler-detected")
    assert detected["verdict"] == "pass"
    assert detected["message"].startswith("nothing noticed the slowed rank")


def test_the_control_that_outlasts_the_collective_timeout_is_caught(
    drill: tuple[Path, dict[str, Any]],
) -> None:
    _, report = drill
    c = item(report, "ctl-straggler-timeout")
    assert c["caught"] is True, json.dumps(c, indent=1)[:6000]
    [tolerated] = findings(c, "progress.straggler-tolerated")
    print(tolerated["message"])
    assert tolerated["verdict"] == "fail", tolerated


def test_the_throttle_was_recorded_first_and_nothing_is_left(
    drill: tuple[Path, dict[str, Any]],
) -> None:
    run_dir, _ = drill
    recs = ledger_records(run_dir / "scenarios" / "slow-r1" / "ledger.jsonl")
    recs += ledger_records(run_dir / "controls" / "ctl-straggler-timeout" / "ledger.jsonl")
    throttles = [r for r in recs if r["kind"] == "cpu-throttle"]
    assert len(throttles) == 2
    for throttle in throttles:
        assert throttle["reverted"] and throttle["data"]["path"].startswith(str(CPU_ROOT))
        assert not Path(throttle["data"]["path"]).exists()
