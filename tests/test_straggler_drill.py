"""A real straggler drill on the local platform (``isolation: none``): rank 1's replica
tree is held to 5 % of a core for 5 s; the job rides it out and the report gives per-rank
step times before, during and after, the steps lost, and says plainly that nothing noticed
it. The control throttles rank 1 to 1 % for 20 s with a gloo timeout of 1 s, shorter than
a slowed step: the job cannot ride that out and the straggler check must fail it. After
the drill no cpu group of the run is left. It keeps a plan of its own (``isolation: none``):
shared with the slow storage's and the data outage's items on ``isolation: netns``, the
control's 1 s collective timeout once failed to fire against 4.5 s steps."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faultdrill.admit import parse_plan
from faultdrill.engine.run import run_plan
from faultdrill.host.throttle import CPU_ROOT, cpu_controller_missing
from tests.drillkit import demo_raw, kill_task
from tests.new_kinds_local import HARD, SLOW
from tests.test_netns_kit import ledger_records

pytestmark = [
    pytest.mark.drill,
    pytest.mark.root,
    pytest.mark.skipif(cpu_controller_missing() is not None, reason=str(cpu_controller_missing())),
]


def straggler_raw(task_id: str, platform: dict[str, Any] | None = None) -> dict[str, Any]:
    """The demo plan: 80 steps, one slow-worker scenario at step 10 and its control."""
    raw = demo_raw()
    raw["task"]["id"] = task_id
    raw["task"]["workload"].update(steps=80, loader_workers=1)
    raw["resources"].update(platform or {"isolation": "none", "spares": 0})
    raw["observation"]["settle_s"] = 0.5
    expected = {"job": "completes", "recovery": "automatic", "resume": "no-restart"}
    scenario = {"id": "slow-r1", "fault": SLOW, "trigger": {"at_step": 10}, "expected": expected}
    raw["rounds"] = [{"round": 1, "name": "straggler", "scenarios": [scenario]}]
    raw["controls"] = [
        {
            "id": "ctl-straggler-timeout",
            "title": "a straggler slower than the collective timeout",
            "workload": {"gloo_timeout_s": 1},
            "fault": HARD,
            "trigger": {"at_step": 10},
            "expected_check": "progress.straggler-tolerated",
        }
    ]
    return raw


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    base = tmp_path_factory.mktemp("straggler-drill")
    task_id = f"t-{uuid.uuid4().hex[:10]}"
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(base / "state")
    try:
        run_plan(parse_plan(straggler_raw(task_id), source="straggler drill"), base / "run")
        yield base / "run", json.loads((base / "run" / "report.json").read_text())
    finally:
        kill_task(task_id)
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old


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
