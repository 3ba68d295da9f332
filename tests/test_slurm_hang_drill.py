"""``hang-worker`` on the embedded Slurm cluster, for real: rank 1's worker (a task's child
on node n2) is SIGSTOPped at step 8 for at most 20 s while slurmd, slurmstepd and its
torchrun agent run on; with a gloo collective timeout of 4 s, rank 0's collective times
out, torchrun restarts the group inside the allocation (Slurm sees live tasks throughout),
and the job resumes from the last checkpoint. ``progress.hang-detected`` says who noticed,
when, against the 4 s timeout, and how long the ranks were blocked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faultdrill.host import procfs
from tests.drillkit import finding
from tests.slurmkit import events, example_raw, explain, needs_slurm, run_plan_cli, scenario, shrunk
from tests.test_netns_kit import ledger_records

pytestmark = [pytest.mark.drill, pytest.mark.root, needs_slurm]


def hang_plan() -> dict[str, Any]:
    raw = example_raw()
    raw["resources"].update(spares=0, timeouts={"gloo_s": 4})
    hang = {
        "id": "hang",
        "title": "rank 1's worker stopped (SIGSTOP) on n2 for at most 20 s",
        "fault": {"kind": "hang-worker", "target": {"rank": 1}, "for_s": 20},
        "trigger": {"at_step": 8},
        "expected": {"job": "completes", "recovery": "automatic", "resume": "latest-valid"},
    }
    raw["rounds"] = [{"round": 1, "name": "worker hang", "scenarios": [hang]}]
    raw["controls"] = []
    return shrunk(raw)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    yield run_plan_cli(hang_plan(), tmp_path_factory.mktemp("slurm-hang"), timeout=300)


def test_the_hang_is_noticed_by_torchrun_inside_the_allocation(report: dict[str, Any]) -> None:
    s = scenario(report, "hang")
    f = finding(s, "progress.hang-detected")
    assert f["verdict"] == "pass", f
    assert 3.0 <= f["data"]["after_s"] <= 20.0, f
    assert 3.5 <= f["data"]["symptom_after_s"] <= f["data"]["after_s"], f
    assert f["data"]["gloo_timeout_s"] == 4.0
    blocked = {int(k): v for k, v in f["data"]["blocked_s"].items()}
    assert set(blocked) == {0, 1} and all(v is not None and v >= 3.0 for v in blocked.values())
    assert s["verdict"] == "pass", explain(s)
    # Slurm kept the job: no requeue, no node state change
    assert not [e for e in events(report, "hang") if e["kind"] == "job_requeued"]


def test_the_stop_was_recorded_first_and_nothing_is_left(report: dict[str, Any]) -> None:
    run_dir = Path(report["_run_dir"])
    stops = [
        r
        for r in ledger_records(run_dir / "scenarios" / "hang" / "ledger.jsonl")
        if r["kind"] == "sigstop"
    ]
    (inj,) = [e for e in events(report, "hang", "fault") if e["kind"] == "injected"]
    assert stops and stops[0]["data"]["pid"] == inj["pid"] and inj["node"] == "n2"
    assert "ssh n2 kill -STOP" in inj["command"]
    assert procfs.pids_with_env("FAULTDRILL_TASK_ID", report["task_id"]) == []
