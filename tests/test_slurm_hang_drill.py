"""``hang-worker`` on the embedded Slurm cluster, for real: rank 1's worker (a task's child
on node n2) is SIGSTOPped at step 8 for at most 12 s while slurmd, slurmstepd and its
torchrun agent run on; with a gloo collective timeout of 4 s, rank 0's collective times
out, torchrun restarts the group inside the allocation (Slurm sees live tasks throughout),
and the job resumes from the last checkpoint. ``progress.hang-detected`` says who noticed,
when, against the 4 s timeout, and how long the ranks were blocked. It runs in one plan with
the Slurm OOM scenario (``tests/new_kinds_slurm.py``: one cluster, one baseline)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from faultdrill.host import procfs
from tests.drillkit import finding
from tests.slurmkit import events, explain, needs_slurm, scenario
from tests.test_netns_kit import ledger_records

pytestmark = [pytest.mark.drill, pytest.mark.root, needs_slurm]


@pytest.fixture(scope="module")
def report(slurm_hang_oom: dict[str, Any]) -> dict[str, Any]:
    """The session's Slurm hang/OOM run (``tests/new_kinds_slurm.py``)."""
    return slurm_hang_oom


def test_the_hang_is_noticed_by_torchrun_inside_the_allocation(report: dict[str, Any]) -> None:
    s = scenario(report, "hang")
    f = finding(s, "progress.hang-detected")
    assert f["verdict"] == "pass", f
    assert 3.0 <= f["data"]["after_s"] <= 12.0, f
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
