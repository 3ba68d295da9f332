"""Long link and node drills (``slow``: minutes each, excluded from the default run).

* 2:2 (no elastic slack), gloo 10 s: a 60-s partition loses the job (the rendezvous join
  timeout ends it; the report names the gloo timeout that fired first), and a 20-s freeze
  outlasts the gloo timeout: the job waits for the frozen node and resumes at full size.
* 1:2 (elastic), gloo 10 s: a 60-s partition lets n1 continue alone; a node lost without a
  spare leaves the job on the remaining node (``no_spare`` said as a scheduling fact).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faultdrill.admit import load_plan
from faultdrill.engine.run import run_plan
from faultdrill.judge.evaluate import RunResult
from tests.drillkit import finding, item
from tests.test_netns_kit import (
    kill_task,
    ledger_records,
    leftovers,
    needs_netns,
    netns_raw,
    write_plan,
)

pytestmark = [pytest.mark.slow, pytest.mark.drill, pytest.mark.root, needs_netns]
N2 = {"node": "n2"}


def _sc(
    sid: str, fault: dict[str, Any], job: str, resume: str, recovery: str = "automatic"
) -> dict[str, Any]:
    return {
        "id": sid,
        "fault": fault,
        "trigger": {"at_step": 12},
        "expected": {"job": job, "recovery": recovery, "resume": resume},
    }


def _run(base: Path, raw: dict[str, Any]) -> Iterator[tuple[RunResult, dict[str, Any]]]:
    path = write_plan(base, raw)
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(base / "state")
    try:
        result = run_plan(load_plan(path), base / "run", source=path, controls=False)
        yield result, json.loads((base / "run" / "report.json").read_text())
    finally:
        kill_task(raw["task"]["id"])
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunResult, dict[str, Any]]]:
    raw = netns_raw(gloo_s=10)
    raw["task"]["workload"].update(steps=40)
    raw["stop"] = {"max_wall_s": 200, "max_no_progress_s": 150}
    raw["rounds"] = [
        {
            "round": 1,
            "continue_on_failure": True,
            "scenarios": [
                _sc(
                    "partition-60",
                    {"kind": "partition", "target": N2, "for_s": 60},
                    "fails",
                    "no-restart",
                    "unrecoverable",
                ),
                _sc(
                    "freeze-20",
                    {"kind": "node-freeze", "target": N2, "for_s": 20},
                    "completes",
                    "latest-valid",
                ),
            ],
        }
    ]
    yield from _run(tmp_path_factory.mktemp("netns-strict"), raw)


@pytest.fixture(scope="module")
def elastic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunResult, dict[str, Any]]]:
    raw = netns_raw(gloo_s=10, rdzv_last_call_s=5)
    raw["resources"]["min_nodes"] = 1
    raw["task"]["workload"].update(steps=40)
    raw["stop"] = {"max_wall_s": 240, "max_no_progress_s": 150}
    raw["rounds"] = [
        {
            "round": 1,
            "continue_on_failure": True,
            "scenarios": [
                _sc(
                    "partition-60",
                    {"kind": "partition", "target": N2, "for_s": 60},
                    "completes",
                    "latest-valid",
                ),
                _sc(
                    "down-no-spare",
                    {"kind": "node-down", "target": N2},
                    "completes",
                    "latest-valid",
                ),
            ],
        }
    ]
    yield from _run(tmp_path_factory.mktemp("netns-elastic"), raw)


def test_strict_partition_60s_loses_the_job_and_names_the_timeout(
    strict: tuple[RunResult, dict[str, Any]],
) -> None:
    result, report = strict
    s = item(report, "partition-60")
    assert s["outcome"] == "failed"
    f = finding(s, "expectation.timeout-fired")
    assert f["data"]["timeout"] == "gloo" and "gloo collective timeout (10 s) fired" in f["message"]
    events = (result.run_dir / "scenarios" / "partition-60" / "events").glob("agent-*.jsonl")
    assert any(
        '"rdzv_timeout"' in p.read_text() or "RendezvousTimeoutError" in p.read_text()
        for p in events
    )


def test_strict_freeze_20s_waits_for_the_node_and_resumes_full_size(
    strict: tuple[RunResult, dict[str, Any]],
) -> None:
    _, report = strict
    s = item(report, "freeze-20")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:3000]
    f = finding(s, "expectation.timeout-fired")
    assert f["data"]["timeout"] == "gloo"
    assert s["placement"]["resumed_on"] == ["n1", "n2"]


def test_elastic_partition_60s_continues_on_the_remaining_node(
    elastic: tuple[RunResult, dict[str, Any]],
) -> None:
    _, report = elastic
    s = item(report, "partition-60")
    assert s["outcome"] == "succeeded"
    assert s["placement"]["resumed_on"] == ["n1"] and s["placement"]["world_size_after"] == 1
    assert finding(s, "expectation.timeout-fired")["data"]["timeout"] == "gloo"
    assert s["evidence"]["progress"]["verdict"] == "pass"


def test_elastic_node_down_without_spare_continues_on_the_remaining_node(
    elastic: tuple[RunResult, dict[str, Any]],
) -> None:
    result, report = elastic
    s = item(report, "down-no-spare")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:3000]
    where = s["placement"]
    assert where["resumed_on"] == ["n1"] and where["spares_placed"] == []
    assert where["no_spare"] and "no usable spare" in where["no_spare"][0]
    assert finding(s, "expectation.spare-environment")["verdict"] == "pass"
    for ledger in sorted(result.run_dir.rglob("ledger.jsonl")):
        assert leftovers(ledger, report["task_id"]) == []
        assert all(r["reverted"] for r in ledger_records(ledger))
