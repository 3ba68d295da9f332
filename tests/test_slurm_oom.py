"""``oom-worker`` on the embedded Slurm cluster (real slurmctld/slurmd, tasks started by
srun in the nodes' network namespaces, a real memory cgroup and the kernel's OOM killer):
rank 1's task is capped and outgrows its limit at step 8; torchrun restarts the group inside
the allocation (Slurm does nothing) and the job completes from the step-5 checkpoint. The
timeline names the OOM killer as the cause, and no memory group is left. It runs in one plan
with the Slurm hang scenario (``tests/new_kinds_slurm.py``: one cluster, one baseline)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from faultdrill.host import memcg
from tests.slurmkit import events, explain, needs_slurm, scenario

pytestmark = [
    pytest.mark.drill,
    pytest.mark.root,
    needs_slurm,
    pytest.mark.skipif(memcg.memcg_unavailable() is not None, reason="no memory cgroups"),
]


def test_an_oom_killed_task_is_recovered_inside_the_allocation(
    slurm_hang_oom: dict[str, Any],
) -> None:
    report = slurm_hang_oom
    s = scenario(report, "oom-r1")
    assert s["verdict"] == "pass", explain(s)
    [loop] = [
        f
        for e in s["evidence"].values()
        for f in e["findings"]
        if f["check"] == "progress.oom-restart-loop"
    ]
    assert loop["verdict"] == "pass" and "OOM killer 1 time(s)" in loop["message"]
    [died] = [e for e in events(report, "oom-r1", "fault") if e["kind"] == "oom_killed"]
    assert (died["cause"], died["memcg_oom_kills"], died["signal_sent_by_drill"]) == (
        "oom-killer",
        1,
        False,
    )
    assert s["questions"]["resumed_from"]["checkpoint"] == "step-000005"
    run_dir = Path(report["_run_dir"])
    assert list(run_dir.rglob(memcg.REQUEST_FILE)) == []
    caps = [
        json.loads(line)["data"]["path"]
        for ledger in run_dir.rglob("ledger.jsonl")
        for line in ledger.read_text().splitlines()
        if '"kind":"memory-cap"' in line
    ]
    assert caps and not [p for p in caps if Path(p).exists()], caps
