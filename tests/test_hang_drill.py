"""A real ``hang-worker`` drill on the local platform (``isolation: none``): rank 1's replica
is stopped (SIGSTOP) at step 12 for at most 20 s, with a gloo collective timeout of 4 s.

Scenario ``hang``: rank 0's collective times out, torchrun notices and restarts the group,
the job resumes from the last checkpoint; ``progress.hang-detected`` says who noticed,
when (against the 4 s timeout) and how long the ranks were blocked. Control
``ctl-hang-long-timeout``: the same hang with the job's collective timeout at 60 s, longer
than the 20 s the hang lasts: nobody notices, and the check must fail naming both."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faultdrill.admit import parse_plan
from faultdrill.engine.run import run_plan
from faultdrill.host import procfs
from tests.drillkit import demo_raw, finding, item, kill_task
from tests.test_netns_kit import ledger_records

pytestmark = [pytest.mark.drill]

HANG = {"kind": "hang-worker", "target": {"rank": 1}, "for_s": 20}


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    base = tmp_path_factory.mktemp("hang-drill")
    raw = demo_raw()
    task_id = raw["task"]["id"] = f"t-{uuid.uuid4().hex[:10]}"
    raw["task"]["workload"].update(steps=24, loader_workers=0)
    raw["resources"].update(isolation="none", spares=0, timeouts={"gloo_s": 4})
    raw["observation"]["settle_s"] = 0.5
    expected = {"job": "completes", "recovery": "automatic", "resume": "latest-valid"}
    scenario = {"id": "hang", "fault": HANG, "trigger": {"at_step": 12}, "expected": expected}
    raw["rounds"] = [{"round": 1, "name": "worker hang", "scenarios": [scenario]}]
    raw["controls"] = [
        {
            "id": "ctl-hang-long-timeout",
            "title": "the job's collective timeout (60 s) outlasts the hang (20 s)",
            "workload": {"gloo_timeout_s": 60},
            "fault": HANG,
            "trigger": {"at_step": 12},
            "expected_check": "progress.hang-detected",
        }
    ]
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(base / "state")
    started = time.monotonic()
    try:
        run_plan(parse_plan(raw, source="hang drill"), base / "run")
        report = json.loads((base / "run" / "report.json").read_text())
        report["_wall_s"] = time.monotonic() - started
        yield base / "run", report
    finally:
        kill_task(task_id)
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old


def test_the_collective_timeout_notices_the_hang_and_the_job_recovers(
    drill: tuple[Path, dict[str, Any]],
) -> None:
    _, report = drill
    print(f"hang drill (baseline + scenario + control): {report['_wall_s']:.1f} s")
    s = item(report, "hang")
    f = finding(s, "progress.hang-detected")
    assert f["verdict"] == "pass", f
    data = f["data"]
    assert data["gloo_timeout_s"] == 4.0
    # noticed after the 4 s timeout could fire, well before the 10 s release
    assert 3.0 <= data["after_s"] <= 20.0, f
    assert data["noticed_by"] == "agent", f
    # rank 0's own collective timeout, before its agent acted
    assert 3.5 <= data["symptom_after_s"] <= data["after_s"], f
    assert "configured gloo collective timeout: 4 s" in f["message"]
    # rank 0 was blocked at least as long as the timeout took, and stepped again
    blocked = {int(k): v for k, v in data["blocked_s"].items()}
    assert set(blocked) == {0, 1} and all(v is not None and v >= 3.0 for v in blocked.values())
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]


def test_the_stop_was_in_the_ledger_and_resumed_to_the_same_process(
    drill: tuple[Path, dict[str, Any]],
) -> None:
    run_dir, report = drill
    for name in ("scenarios/hang", "controls/ctl-hang-long-timeout"):
        stops = [
            r for r in ledger_records(run_dir / name / "ledger.jsonl") if r["kind"] == "sigstop"
        ]
        assert stops, name
        assert all(r["data"]["start_time"] for r in stops)
        events_dir = run_dir / name / "events"
        faults = [
            json.loads(x)
            for f in events_dir.glob("fault*.jsonl")
            for x in f.read_text().splitlines()
        ]
        (inj,) = [e for e in faults if e["kind"] == "injected"]
        assert inj["rank"] == 1 and inj["pid"] == stops[0]["data"]["pid"]
        assert any(e["kind"] == "reverted" for e in faults)
    assert procfs.pids_with_env("FAULTDRILL_TASK_ID", report["task_id"]) == []


def test_a_collective_timeout_longer_than_the_hang_is_caught(
    drill: tuple[Path, dict[str, Any]],
) -> None:
    _, report = drill
    c = item(report, "ctl-hang-long-timeout")
    f = finding(c, "progress.hang-detected")
    assert f["verdict"] == "fail", f
    assert "nobody acted on the hung rank within" in f["message"]
    assert "gloo collective timeout (60 s) is not shorter than that window" in f["message"]
    assert f["data"]["gloo_timeout_s"] == 60.0
    assert 19.0 <= f["data"]["window_s"] <= 22.0
    assert c["caught"] is True, (c["not_proven_why"], json.dumps(c["evidence"], indent=1)[:3000])
    assert report["summary"]["controls_caught"] == 1
