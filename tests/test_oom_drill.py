"""Real ``oom-worker`` drills on the local platform (``isolation: none``, real torchrun
job, real memory cgroup, the kernel's own OOM killer): rank 1 is capped at step 15 and
outgrows its limit; torchrun restarts the group outside the cap and the job completes from
the last checkpoint with results equal to the baseline's, the timeline naming the cause
(oom-killer, the group's ``oom_kill`` count, no signal from the drill). The control keeps
the limit on every later replica of the rank (``repeat``): the job restarts into the same
OOM until its restarts are spent, and ``progress.oom-restart-loop`` catches the loop with
its count. Nothing of the cap is left afterwards. Both run in one plan with the hang drill's
items (``tests/new_kinds_local.py``: one baseline)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from faultdrill.host import memcg
from tests.new_kinds_local import Drill

pytestmark = [
    pytest.mark.drill,
    pytest.mark.skipif(memcg.memcg_unavailable() is not None, reason="no memory cgroups"),
]


@pytest.fixture(scope="module")
def drill(hang_oom_drill: Drill) -> tuple[Path, dict[str, Any]]:
    """The OOM's items in the session's hang/OOM run (``tests/new_kinds_local.py``)."""
    return hang_oom_drill.run_dir, hang_oom_drill.report


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
