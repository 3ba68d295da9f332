"""Real ``oom-worker`` drills on the local platform (``isolation: none``, real torchrun
job, real memory cgroup, the kernel's own OOM killer): rank 1 is capped at step 15 and
outgrows its limit; torchrun restarts the group outside the cap and the job completes from
the last checkpoint with results equal to the baseline's, the timeline naming the cause
(oom-killer, the group's ``oom_kill`` count, no signal from the drill). The control keeps
the limit on every later replica of the rank (``repeat``): the job restarts into the same
OOM until its restarts are spent, and ``progress.oom-restart-loop`` catches the loop with
its count. Nothing of the cap is left afterwards."""

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
from faultdrill.host import memcg
from tests.drillkit import demo_raw, kill_task

pytestmark = [
    pytest.mark.drill,
    pytest.mark.skipif(memcg.memcg_unavailable() is not None, reason="no memory cgroups"),
]

FAULT = {"kind": "oom-worker", "target": {"rank": 1}, "limit_mb": 64, "alloc_mb": 512}


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    base = tmp_path_factory.mktemp("oom-drill")
    raw = demo_raw()
    task_id = raw["task"]["id"] = f"t-{uuid.uuid4().hex[:10]}"
    raw["task"]["workload"]["steps"] = 30
    raw["resources"].update(isolation="none", spares=0)
    raw["observation"]["settle_s"] = 0.5
    # the control's job fails only once the surviving agent's rendezvous (join_timeout 30 s)
    # gives up after the looping node's agent spent its restarts: no stop condition before
    raw["stop"].update(max_no_progress_s=120, max_wall_s=240)
    expected = {"job": "completes", "recovery": "automatic", "resume": "latest-valid"}
    scenario = {"id": "oom-r1", "fault": FAULT, "trigger": {"at_step": 15}, "expected": expected}
    raw["rounds"] = [{"round": 1, "name": "worker OOM", "scenarios": [scenario]}]
    raw["controls"] = [
        {
            "id": "ctl-oom-loop",
            "title": "the memory limit stays: every restart dies of OOM again",
            "fault": {**FAULT, "repeat": True, "wait_s": 30},
            "trigger": {"at_step": 15},
            "expected_check": "progress.oom-restart-loop",
        }
    ]
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(base / "state")
    try:
        run_plan(parse_plan(raw, source="oom drill"), base / "run")
        yield base / "run", json.loads((base / "run" / "report.json").read_text())
    finally:
        kill_task(task_id)
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old


def _events(item: Path, name: str) -> list[dict[str, Any]]:
    path = item / "events" / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _item(report: dict[str, Any], item_id: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [i for i in report["scenarios"] if i["id"] == item_id]
    assert len(found) == 1, [i["id"] for i in report["scenarios"]]
    return found[0]


def _findings(item: dict[str, Any], check: str) -> list[dict[str, Any]]:
    return [f for e in item["evidence"].values() for f in e["findings"] if f["check"] == check]


def test_an_oom_killed_rank_is_recovered_from_the_last_checkpoint(
    drill: tuple[Path, dict[str, Any]],
) -> None:
    _, report = drill
    s = _item(report, "oom-r1")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    assert {k: v["verdict"] for k, v in s["evidence"].items()} == {
        "progress": "pass",
        "resources": "pass",
        "results": "pass",
    }
    [loop] = _findings(s, "progress.oom-restart-loop")
    assert loop["verdict"] == "pass" and "OOM killer 1 time(s)" in loop["message"]
    assert s["questions"]["resumed_from"]["checkpoint"] == "step-000010"


def test_the_timeline_names_the_oom_killer_not_a_drill_signal(
    drill: tuple[Path, dict[str, Any]],
) -> None:
    run_dir, _ = drill
    fault = _events(run_dir / "scenarios" / "oom-r1", "fault.jsonl")
    [injected] = [e for e in fault if e["kind"] == "injected"]
    assert injected["limit_bytes"] == 64 << 20 and injected["alloc_mb"] == 512
    assert "signal" not in injected
    [died] = [e for e in fault if e["kind"] == "oom_killed"]
    assert (died["cause"], died["exit_signal"], died["memcg_oom_kills"]) == (
        "oom-killer",
        "SIGKILL",
        1,
    )
    assert died["signal_sent_by_drill"] is False and died["pid"] == injected["pid"]
    probe = _events(run_dir / "scenarios" / "oom-r1", "probe-rank1.jsonl")
    [asked] = [e for e in probe if e["kind"] == "memory_allocate"]
    assert asked["step"] >= 15 and asked["alloc_mb"] == 512


def test_the_restart_loop_control_is_caught_with_its_count(
    drill: tuple[Path, dict[str, Any]],
) -> None:
    _, report = drill
    c = _item(report, "ctl-oom-loop")
    assert c["control"] is True and c["caught"] is True, json.dumps(c["evidence"], indent=1)[:4000]
    [loop] = _findings(c, "progress.oom-restart-loop")
    assert loop["verdict"] == "fail" and loop["message"].startswith("restart loop: rank 1")
    assert loop["data"]["oom_kills"] >= 2 and loop["data"]["oom_restarts"] >= 1


def test_no_memory_group_or_request_is_left(drill: tuple[Path, dict[str, Any]]) -> None:
    run_dir, _ = drill
    assert list(run_dir.rglob(memcg.REQUEST_FILE)) == []
    caps = [
        json.loads(line)["data"]["path"]
        for ledger in run_dir.rglob("ledger.jsonl")
        for line in ledger.read_text().splitlines()
        if '"kind":"memory-cap"' in line
    ]
    assert len(caps) == 2 and not [p for p in caps if Path(p).exists()], caps
