"""A real ``hang-worker`` drill on the local platform (``isolation: none``): rank 1's replica
is stopped (SIGSTOP) at step 12 for at most 12 s, with a gloo collective timeout of 4 s.

Scenario ``hang``: rank 0's collective times out, torchrun notices and restarts the group,
the job resumes from the last checkpoint; ``progress.hang-detected`` says who noticed,
when (against the 4 s timeout) and how long the ranks were blocked. Control
``ctl-hang-long-timeout``: the same hang with the job's collective timeout at 60 s, longer
than the 12 s the hang lasts: nobody notices, and the check must fail naming both. Both run
in one plan with the OOM drill's items (``tests/new_kinds_local.py``: one baseline)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from faultdrill.host import procfs
from tests.drillkit import finding, item
from tests.new_kinds_local import Drill
from tests.test_netns_kit import ledger_records

pytestmark = [pytest.mark.drill]


@pytest.fixture(scope="module")
def drill(hang_oom_drill: Drill) -> tuple[Path, dict[str, Any]]:
    """The hang's items in the session's hang/OOM run (``tests/new_kinds_local.py``)."""
    return hang_oom_drill.run_dir, {**hang_oom_drill.report, "_wall_s": hang_oom_drill.wall_s}


def test_the_collective_timeout_notices_the_hang_and_the_job_recovers(
    drill: tuple[Path, dict[str, Any]],
) -> None:
    _, report = drill
    print(f"hang/OOM drill (baseline + scenarios + controls): {report['_wall_s']:.1f} s")
    s = item(report, "hang")
    f = finding(s, "progress.hang-detected")
    assert f["verdict"] == "pass", f
    data = f["data"]
    assert data["gloo_timeout_s"] == 4.0
    # noticed after the 4 s timeout could fire, before the 12 s release
    assert 3.0 <= data["after_s"] <= 12.0, f
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
    assert 11.0 <= f["data"]["window_s"] <= 14.0
    assert c["caught"] is True, (c["not_proven_why"], json.dumps(c["evidence"], indent=1)[:3000])
    caught = [i["id"] for i in report["scenarios"] if i.get("control") and i["caught"]]
    assert "ctl-hang-long-timeout" in caught
    assert report["summary"]["controls_caught"] == len(caught)
