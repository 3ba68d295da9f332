"""The new fault kinds' real drills on the embedded Slurm cluster, run as two plans, not four.

Each kind used to run its own plan (its own cluster start, baseline and scenario). The
scenarios now share a plan wherever their baseline can be the same, and the test modules
(``test_slurm_hang_drill``, ``test_slurm_oom``, ``test_straggler_slurm``,
``test_storage_slow_slurm``) read their item from the one report. Two plans remain because
a scenario may change nothing but its fault, and the hang needs the plan's own collective
timeout short:

* :func:`slurm_hang_oom` (gloo timeout 4 s, no spare, 20 steps, a checkpoint every 5):
  ``hang`` (noticed by the plan's 4 s timeout) and ``oom-r1`` (a dead rank is noticed
  whatever the timeout), both at step 8;
* :func:`slurm_straggler_storage` (the plan's gloo timeout 30 s, 80 steps, a checkpoint
  every 5): ``slow-r1`` at step 10 and ``storage-slow`` at step 8, across the step-10 save
  (the step-5 save before it gives the usual save time), and ``slurmctld-restart`` (the
  control-plane family, asserted in ``test_slurm_drills.py``) at step 6: its 8 s outage
  must end while the job still trains (in the 20-step example plan the job ended inside
  it, and slurmstepd reported the end ~60 s after slurmctld was back).
  A 4 s collective timeout would cut short what these must ride out (a straggler's slowed
  steps, a save blocked for seconds).

A kind whose machine support is missing (memory cgroups, the cpu controller, FUSE) is left
out of its plan; its test module skips on the same condition."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from faultdrill.host import memcg
from faultdrill.host.storage import fuse_missing
from faultdrill.host.throttle import cpu_controller_missing
from tests.new_kinds_local import COMPLETES_LATEST, COMPLETES_NO_RESTART, OOM, SLOW
from tests.slurmkit import example_raw, run_plan_cli, shrunk

SLURM_HANG = {
    "id": "hang",
    "title": "rank 1's worker stopped (SIGSTOP) on n2 for at most 12 s",
    "fault": {"kind": "hang-worker", "target": {"rank": 1}, "for_s": 12},
    "trigger": {"at_step": 8},
    "expected": COMPLETES_LATEST,
}
SLURM_OOM = {"id": "oom-r1", "fault": OOM, "trigger": {"at_step": 8}, "expected": COMPLETES_LATEST}
SLURM_SLOW = {
    "id": "slow-r1",
    "fault": SLOW,
    "trigger": {"at_step": 10},
    "expected": COMPLETES_NO_RESTART,
}
SLURM_STORAGE_SLOW = {
    "id": "storage-slow",
    "title": "every write to the checkpoint storage 150 ms late for 5 s, across the step-10 save",
    "fault": {"kind": "storage-slow", "latency_ms": 150, "for_s": 5},
    "trigger": {"at_step": 8},
    "expected": {"resume": "no-restart"},
}

SLURMCTLD_RESTART = {
    "id": "slurmctld-restart",
    "title": "slurmctld stopped (SIGTERM) for 8 s, then started with its saved state",
    "fault": {"kind": "control-plane-outage", "mode": "stop", "for_s": 8},
    "trigger": {"at_step": 6},
    "expected": {"resume": "no-restart"},
}


def slurm_hang_oom_raw() -> dict[str, Any]:
    """The Slurm example with a 4 s collective timeout and no spare: the hang and (where
    memory cgroups work) the OOM, at step 8 of 20, a checkpoint every 5; no controls."""
    raw = example_raw()
    raw["resources"].update(spares=0, timeouts={"gloo_s": 4})
    scenarios = [SLURM_HANG]
    if memcg.memcg_unavailable() is None:
        scenarios.append(SLURM_OOM)
    raw["rounds"] = [{"round": 1, "name": "worker hang and OOM", "scenarios": scenarios}]
    raw["controls"] = []
    return shrunk(raw)


def slurm_straggler_storage_raw() -> dict[str, Any]:
    """The Slurm example, 80 steps, a checkpoint every 5: the straggler at step 10 and
    the slow storage at step 8 (each where the machine can do it), the slurmctld restart
    at step 6; no controls."""
    raw = example_raw()
    scenarios: list[dict[str, Any]] = [SLURMCTLD_RESTART]
    if cpu_controller_missing() is None:
        scenarios.append(SLURM_SLOW)
    if not fuse_missing():
        scenarios.append(SLURM_STORAGE_SLOW)
    raw["rounds"] = [
        {"round": 1, "name": "straggler, slow storage, controller", "scenarios": scenarios}
    ]
    raw["controls"] = []
    raw = shrunk(raw, steps=80, every=5)
    # shrunk moves every trigger to one step: each scenario keeps its own
    for shrunk_scenario, scenario in zip(raw["rounds"][0]["scenarios"], scenarios, strict=True):
        shrunk_scenario["trigger"] = dict(scenario["trigger"])
    return raw


@pytest.fixture(scope="session")
def slurm_hang_oom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The report of the Slurm hang/OOM run, one real run for the session."""
    # a short directory: munged's socket path must stay under 108 bytes
    yield run_plan_cli(slurm_hang_oom_raw(), tmp_path_factory.mktemp("sho"))


@pytest.fixture(scope="session")
def slurm_straggler_storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The report of the Slurm straggler/storage run, one real run for the session."""
    yield run_plan_cli(slurm_straggler_storage_raw(), tmp_path_factory.mktemp("sss"))
