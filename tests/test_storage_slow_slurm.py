"""``storage-slow`` on the embedded Slurm cluster, for real: the job's checkpoint directory
(a directory of this host that the cluster's nodes, network namespaces entered with
``nsenter --net`` only, see as it is) served through the FUSE mirror, every write answered
150 ms late across the step-10 save. The save takes seconds instead of a fraction of one,
training waits for it, nothing fails, Slurm keeps the job where it was, and ``latest`` only
ever names a whole checkpoint. It runs in one plan with the Slurm straggler scenario
(``tests/new_kinds_slurm.py``: one cluster, one baseline, 80 steps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from faultdrill.host.storage import fuse_missing
from tests.slurmkit import (
    events,
    explain,
    needs_slurm,
    scenario,
    slurm,
)

pytestmark = [
    pytest.mark.drill,
    pytest.mark.root,
    needs_slurm,
    pytest.mark.skipif(bool(fuse_missing()), reason=f"needs FUSE: {fuse_missing()}"),
]


@pytest.fixture(scope="module")
def report(slurm_straggler_storage: dict[str, Any]) -> dict[str, Any]:
    """The session's Slurm straggler/storage run (``tests/new_kinds_slurm.py``)."""
    return slurm_straggler_storage


def _finding(s: dict[str, Any], check: str) -> dict[str, Any]:
    return next(
        f
        for ev in [*s["evidence"].values(), s["expectation"]]
        for f in ev["findings"]
        if f["check"] == check
    )


def test_slow_storage_on_slurm_stretches_the_save_and_nothing_fails(
    report: dict[str, Any],
) -> None:
    s = scenario(report, "storage-slow")
    assert s["verdict"] == "pass", explain(s)
    slow = _finding(s, "expectation.slow-storage-save")
    assert slow["verdict"] == "pass", slow
    assert 10 in slow["data"]["slowed_steps"]
    assert slow["data"]["save_s"] > 1.0 > slow["data"]["usual_save_s"], slow
    assert _finding(s, "progress.failed-save-not-published")["verdict"] == "pass"
    assert s["inventory"]["failed_saves"] == []
    # the delay was in force on the nodes' view of the directory (the timed probe write)
    (inj,) = [e for e in events(report, "storage-slow", "fault") if e["kind"] == "injected"]
    assert inj["probe_write_s"] >= 0.45 and inj["latency_ms"] == 150
    # Slurm kept the job where it was: one allocation, never requeued
    assert not slurm(report, "storage-slow", "job_requeued")
    states = [e["state"] for e in slurm(report, "storage-slow", "sched_job_state")]
    assert states[-1] == "COMPLETED", states
    prepared = [e for e in events(report, "storage-slow", "fault") if e["kind"] == "prepared"]
    with open("/proc/self/mountinfo") as f:
        assert prepared[0]["source"] not in f.read(), "the FUSE mount was left"
    assert Path(report["_run_dir"]).is_dir()
