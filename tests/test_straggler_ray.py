"""A straggler under Ray Train on the embedded Ray cluster (slow set: a Ray cluster and two
Ray Train runs take minutes here): rank 1's Train worker actor (its process tree) is held to
5 % of a core for 5 s; Ray Train rides it out, the report gives per-rank step times and
says that nothing noticed it, and the throttle is undone."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faultdrill.admit import parse_plan
from faultdrill.engine.run import run_plan
from faultdrill.host.throttle import cpu_controller_missing
from tests.drillkit import kill_task
from tests.new_kinds_local import SLOW
from tests.ray_plans import default_raw, needs_ray_cluster
from tests.test_netns_kit import ledger_records
from tests.test_straggler_drill import findings, item

pytestmark = [
    pytest.mark.drill,
    pytest.mark.root,
    pytest.mark.slow,
    needs_ray_cluster,
    pytest.mark.skipif(cpu_controller_missing() is not None, reason=str(cpu_controller_missing())),
]


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    base = tmp_path_factory.mktemp("straggler-ray")
    raw = default_raw()
    raw["task"]["workload"]["steps"] = 60
    expected = {"job": "completes", "recovery": "automatic", "resume": "no-restart"}
    sc = {"id": "slow-r1", "fault": SLOW, "trigger": {"at_step": 10}, "expected": expected}
    raw["rounds"] = [{"round": 1, "name": "straggler", "scenarios": [sc]}]
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(base / "state")
    try:
        run_plan(parse_plan(raw, source="ray straggler"), base / "run")
        yield base / "run", json.loads((base / "run" / "report.json").read_text())
    finally:
        kill_task(raw["task"]["id"])
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old


def test_a_straggler_train_worker_is_ridden_out(drill: tuple[Path, dict[str, Any]]) -> None:
    run_dir, report = drill
    s = item(report, "slow-r1")
    [tolerated] = findings(s, "progress.straggler-tolerated")
    print(tolerated["message"])  # shown with -s: the per-rank step times of the drill
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:6000]
    before, during, _after = tolerated["data"]["ranks"]["1"]
    assert before and during and during > 1.5 * before, tolerated
    [detected] = findings(s, "expectation.straggler-detected")
    assert detected["message"].startswith("nothing noticed the slowed rank"), detected
    recs = ledger_records(run_dir / "scenarios" / "slow-r1" / "ledger.jsonl")
    [throttle] = [r for r in recs if r["kind"] == "cpu-throttle"]
    assert throttle["reverted"] and not Path(throttle["data"]["path"]).exists()
