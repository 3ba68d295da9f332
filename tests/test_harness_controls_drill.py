"""The harness-side controls on the reference workload (real torchrun, 2 nodes on the
host's loopback): asked for in one line (``controls: {harness: all}``), each is caught by
its check, each change is taken back, and nothing of the job (the copy included) is left.
The same controls on a job that cannot be changed: tests/test_joblog_drill.py."""

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
from tests.drillkit import demo_raw, finding, item, kill_task, task_pids

pytestmark = [pytest.mark.drill, pytest.mark.slow]


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    base = tmp_path_factory.mktemp("harness-controls")
    raw = demo_raw()
    task_id = raw["task"]["id"] = f"t-{uuid.uuid4().hex[:10]}"
    raw["task"]["workload"].update(steps=24, loader_workers=0, step_sleep_s=0.02)
    raw["resources"].update(isolation="none", spares=0)
    raw["checkpoint"]["every_steps"] = 8
    raw["observation"]["settle_s"] = 0.3
    raw["rounds"] = []
    raw["controls"] = {"harness": "all"}
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(base / "state")
    try:
        run_plan(parse_plan(raw, source="harness controls"), base / "run")
        yield base / "run", json.loads((base / "run" / "report.json").read_text())
    finally:
        kill_task(task_id)
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old


@pytest.mark.parametrize(
    ("control", "check", "says"),
    [
        (
            "ctl-rollback-latest",
            "progress.resume-point",
            "resumed from step 8 (step-000008) although valid checkpoint step-000016",
        ),
        (
            "ctl-hide-checkpoints",
            "progress.no-restart-from-zero",
            "restarted from step 1 although checkpoint step-000016 (step 16) was valid",
        ),
        ("ctl-stale-copy", "resources.no-stale-replica", "of an older incarnation still alive"),
    ],
)
def test_each_harness_control_is_caught_on_the_reference_workload(
    drill: tuple[Path, dict[str, Any]], control: str, check: str, says: str
) -> None:
    _, report = drill
    c = item(report, control)
    assert c["caught"] is True, (c["not_proven_why"], json.dumps(c["evidence"], indent=1)[:3000])
    f = finding(c, check)
    assert f["verdict"] == "fail" and says in f["message"], f
    assert finding(c, "resources.faults-reverted")["verdict"] == "pass"


def test_the_run_is_ok_and_leaves_nothing(drill: tuple[Path, dict[str, Any]]) -> None:
    run_dir, report = drill
    assert report["baseline"]["verdict"] == "pass"
    assert report["summary"]["ok"] and report["summary"]["controls_caught"] == 3
    assert task_pids(report["task_id"]) == []
    hidden = run_dir / "controls" / "ctl-hide-checkpoints" / "faults" / "hidden-ckpt"
    # the restart from zero saved under the same names; the originals stay aside as evidence
    assert {"step-000008", "step-000016"} <= {p.name for p in hidden.iterdir()}
