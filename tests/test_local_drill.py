"""A real drill with ``isolation: none`` (what a normal user gets: every node's agent on the
host's loopback, no namespaces): a worker on node n2 is sent SIGTERM, torchrun restarts the
group, and training resumes from the last valid checkpoint with results equal to the
baseline's. Also exercises the fault's other options: a target by node, and SIGTERM; and
what a buyer signs: the held-out evaluation and the exported model checked, the conclusion
level, the recovery's dependencies, the observation window after the end, the dossiers."""

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
from faultdrill.host import procfs
from tests.drillkit import demo_raw, kill_task
from tests.test_netns_kit import ledger_records

# slow: the default run drills kill-worker on this platform through the recorded demo
pytestmark = [pytest.mark.drill, pytest.mark.slow]


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    base = tmp_path_factory.mktemp("local-drill")
    raw = demo_raw()
    task_id = raw["task"]["id"] = f"t-{uuid.uuid4().hex[:10]}"
    raw["task"]["workload"]["steps"] = 30
    raw["resources"].update(isolation="none", spares=0)
    raw["observation"]["settle_s"] = 0.5
    raw["observation"]["post_s"] = 1.0  # and the window after the job's end
    fault = {"kind": "kill-worker", "target": {"node": "n2"}, "signal": "SIGTERM", "grace_s": 3}
    expected = {"job": "completes", "recovery": "automatic", "resume": "latest-valid"}
    scenario = {"id": "term-n2", "fault": fault, "trigger": {"at_step": 15}, "expected": expected}
    raw["rounds"] = [{"round": 1, "name": "worker exit", "scenarios": [scenario]}]
    raw["controls"] = []
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(base / "state")
    try:
        run_plan(parse_plan(raw, source="local drill"), base / "run")
        yield base / "run", json.loads((base / "run" / "report.json").read_text())
    finally:
        kill_task(task_id)
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old


def test_sigterm_to_a_worker_on_n2_is_recovered_from_the_last_checkpoint(
    drill: tuple[Path, dict[str, Any]],
) -> None:
    _, report = drill
    [s] = report["scenarios"]
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    assert s["recovery_class"] == "automatic"
    assert {k: v["verdict"] for k, v in s["evidence"].items()} == {
        "progress": "pass",
        "resources": "pass",
        "results": "pass",
    }
    resumed = s["questions"]["resumed_from"]
    assert (resumed["checkpoint"], resumed["step"], resumed["data_position"]) == (
        "step-000010",
        10,
        80,
    )
    assert report["plan"]["resources"]["isolation"] == "none"


def test_the_signal_went_to_a_worker_of_n2_recorded_before_it_was_sent(
    drill: tuple[Path, dict[str, Any]],
) -> None:
    run_dir, report = drill
    events_dir = run_dir / "scenarios" / "term-n2" / "events"
    events = [
        json.loads(x)
        for f in events_dir.glob("*.jsonl")
        if not f.name.startswith("probe-")  # a killed worker may leave a torn line there
        for x in f.read_text().splitlines()
    ]
    injected = [e for e in events if e["src"] == "fault" and e["kind"] == "injected"]
    assert len(injected) == 1
    assert injected[0]["node"] == "n2" and injected[0]["signal"] == "SIGTERM"
    assert injected[0]["rank"] == 1  # n2's only worker in a 2 x 1 layout
    signals = [
        r
        for r in ledger_records(run_dir / "scenarios" / "term-n2" / "ledger.jsonl")
        if r["kind"] == "signal"
    ]
    assert signals[0]["data"]["signal"] == "SIGTERM"
    assert signals[0]["data"]["pid"] == injected[0]["pid"]
    # Escalated only if the worker outlived the grace period; either way, recorded as such.
    assert all(r["data"].get("escalation") for r in signals[1:])
    assert procfs.pids_with_env("FAULTDRILL_TASK_ID", report["task_id"]) == []


def test_what_a_buyer_signs_is_on_record(drill: tuple[Path, dict[str, Any]]) -> None:
    run_dir, report = drill
    [s] = report["scenarios"]
    results = {f["check"]: f for f in s["evidence"]["results"]["findings"]}
    evaluation = results["results.evaluation-matches-baseline"]
    assert evaluation["verdict"] == "pass", evaluation
    assert "(steps 10, 20, 30) bitwise equal to the baseline's" in evaluation["message"]
    assert results["results.artifact-intact"]["verdict"] == "pass", results
    assert s["conclusion"]["level"] == "consistent-results" and s["layer"] is None
    assert s["dependencies"]["used"] == ["restart_budget", "checkpoint_storage"]
    assert s["dependencies"]["owners"]["restart_budget"] == "platform"
    assert [i["nodes"] for i in s["scheduling"]] == [["n1", "n2"], ["n1", "n2"]]
    assert s["trend"]["applies"] is False and s["trend"]["drift"] is False
    assert report["recovery_dependencies"]["restarts"]["per_item"] == {"term-n2": 1}
    events = [
        json.loads(x)
        for f in (run_dir / "scenarios" / "term-n2" / "events").glob("harness*.jsonl")
        for x in f.read_text().splitlines()
    ]
    window = [e for e in events if e["kind"] == "post_window"]
    assert [(e["phase"], e["post_s"]) for e in window] == [("start", 1.0), ("end", 1.0)]
    assert window[1]["alive"] == [] and window[1]["ports"] == []
    assert window[1]["mono"] - window[0]["mono"] >= 1.0
    verified = [e for e in events if e["kind"] == "artifact_verified"]
    assert [(e["name"], e["present"], e["matches"]) for e in verified] == [
        ("final-model", True, True)
    ]
    assert verified[0]["path"].endswith("/scenarios/term-n2/export/model.pt")
    dossier = report["baseline"]["dossier"]
    assert dossier["data"]["access_identity"]["observed"][0]["uid"] == os.getuid()
    record = dossier["data"]["change_record"]
    assert set(record["reported_by_job"]) == {"baseline", "term-n2"}
    assert record["changed"] is False
    assert [i["nodes"] for i in dossier["resources"]["scheduling"]] == [["n1", "n2"]]
    assert dossier["observation"]["post_window"]["post_s"] == 1.0
