"""The new fault kinds' real drills on the local platform: four kinds in two plans, not four.

Each kind used to run its own plan (its own baseline, scenario and control: four baselines,
four torchrun start-ups). The scenarios and controls now share a plan wherever their
baseline can be the same, and the test modules (``test_hang_drill``, ``test_oom_drill``,
``test_storage_slow_drill``, ``test_data_outage_drill``) read their items from the one report. Two plans remain because a scenario may change nothing but
its fault, and the hang needs the plan's own collective timeout short:

* :func:`hang_oom_drill` (``isolation: none``, gloo timeout 4 s, 30 steps): ``hang`` and
  ``ctl-hang-long-timeout`` (the hang must be noticed by the plan's 4 s timeout) and
  ``oom-r1`` and ``ctl-oom-loop`` (a dead rank is noticed whatever the timeout);
* :func:`storage_data_drill` (``isolation: netns``, file-backed data, 40 steps, the plan's
  gloo timeout 30 s): ``storage-slow`` and ``ctl-publish-before-durable-slow``,
  ``data-error`` and ``ctl-skip-unreadable``. A 4 s collective timeout would cut short what
  these scenarios must ride out (a save blocked for seconds, a 4 s data outage), so they
  cannot share the hang's baseline.

The straggler (``test_straggler_drill``) keeps its own plan on ``isolation: none``: run in
the storage/data plan on ``isolation: netns``, its control's 1 s collective timeout once did
not fire against 4.5 s steps (not understood yet), so the control was not caught.

A kind whose machine support is missing (memory cgroups) is left out of
its plan; its test module skips on the same condition."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultdrill.admit import load_plan
from faultdrill.engine.run import run_plan
from faultdrill.host import memcg, procfs
from faultdrill.host.mounts import mounts_at
from tests.drillkit import demo_raw, kill_task

COMPLETES_LATEST = {"job": "completes", "recovery": "automatic", "resume": "latest-valid"}
COMPLETES_NO_RESTART = {"job": "completes", "recovery": "automatic", "resume": "no-restart"}

# --- hang-worker and oom-worker -------------------------------------------------------------

#: 12 s, not longer: torchrun's SIGTERM waits on the stopped replica until its release, so
#: each hang item lasts the whole window (the 4 s timeout still fires well inside it)
HANG = {"kind": "hang-worker", "target": {"rank": 1}, "for_s": 12}
OOM = {"kind": "oom-worker", "target": {"rank": 1}, "limit_mb": 64, "alloc_mb": 512}
#: the hang/OOM plan's steps; its last checkpoint is step-000030
HANG_OOM_STEPS = 30


def oom_possible() -> bool:
    return memcg.memcg_unavailable() is None


def hang_items() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """rank 1 SIGSTOPped at step 12 for at most 12 s; the control's own 60 s collective
    timeout outlasts the hang, so nobody notices it."""
    scenario = {
        "id": "hang",
        "fault": HANG,
        "trigger": {"at_step": 12},
        "expected": COMPLETES_LATEST,
    }
    control = {
        "id": "ctl-hang-long-timeout",
        "title": "the job's collective timeout (60 s) outlasts the hang (12 s)",
        "workload": {"gloo_timeout_s": 60},
        "fault": HANG,
        "trigger": {"at_step": 12},
        "expected_check": "progress.hang-detected",
    }
    return [scenario], [control]


def oom_items() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """rank 1 capped at 64 MB at step 15 and made to grow past it; the control keeps the
    cap on every later replica of the rank (``repeat``): a restart loop."""
    scenario = {
        "id": "oom-r1",
        "fault": OOM,
        "trigger": {"at_step": 15},
        "expected": COMPLETES_LATEST,
    }
    control = {
        "id": "ctl-oom-loop",
        "title": "the memory limit stays: every restart dies of OOM again",
        "fault": {**OOM, "repeat": True, "wait_s": 30},
        "trigger": {"at_step": 15},
        "expected_check": "progress.oom-restart-loop",
    }
    return [scenario], [control]


def hang_oom_raw(task_id: str) -> dict[str, Any]:
    """The demo plan on ``isolation: none`` with a 4 s collective timeout: the hang's and
    (where memory cgroups work) the OOM's scenario and control."""
    raw = demo_raw()
    raw["task"]["id"] = task_id
    raw["task"]["workload"].update(steps=HANG_OOM_STEPS, loader_workers=0)
    raw["resources"].update(isolation="none", spares=0, timeouts={"gloo_s": 4})
    raw["observation"]["settle_s"] = 0.5
    # the OOM control's job fails only once the surviving agent's rendezvous (join_timeout
    # 30 s) gives up after the looping node's agent spent its restarts: no stop condition
    # before that
    raw["stop"].update(max_no_progress_s=120, max_wall_s=240)
    scenarios, controls = hang_items()
    if oom_possible():
        more_scenarios, more_controls = oom_items()
        scenarios += more_scenarios
        controls += more_controls
    raw["rounds"] = [{"round": 1, "name": "worker hang and OOM", "scenarios": scenarios}]
    raw["controls"] = controls
    return raw


# --- slow-worker, storage-slow and data-outage ----------------------------------------------

SLOW = {"kind": "slow-worker", "target": {"rank": 1}, "cpu_percent": 5, "for_s": 5}
HARD = {"kind": "slow-worker", "target": {"rank": 1}, "cpu_percent": 1, "for_s": 20}
LATENCY_MS = 150
FOR_S = 6.0
STORAGE_SLOW = {"kind": "storage-slow", "latency_ms": LATENCY_MS, "for_s": FOR_S}
OUTAGE_S = 4.0
#: in-process reads, so the job's data_read_* events are recorded
DATA = {"data_files": True, "loader_workers": 0}
#: the storage/data plan's steps; its last checkpoint is step-000040
IO_STEPS = 40


def data_outage_fault(mode: str, for_s: float) -> dict[str, Any]:
    return {"kind": "data-outage", "mode": mode, "for_s": for_s}


def storage_slow_items() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """every checkpoint write 150 ms late for 6 s across the step-20 save; the control's
    job publishes ``latest`` before the checkpoint is written."""
    scenario = {
        "id": "storage-slow",
        "title": f"every write to the checkpoint storage {LATENCY_MS} ms late "
        f"for {FOR_S:g} s across the step-20 save",
        "fault": STORAGE_SLOW,
        "trigger": {"at_step": 18},
        "expected": {"job": "completes", "resume": "no-restart"},
    }
    control = {
        "id": "ctl-publish-before-durable-slow",
        "title": "latest moved before the checkpoint was written, on slow storage",
        "workload": {"bad_mode": "publish-before-durable"},
        "fault": STORAGE_SLOW,
        "trigger": {"at_step": 18},
        "expected_check": "progress.failed-save-not-published",
    }
    return [scenario], [control]


def data_outage_items() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """every read of the data fails (EIO) for 4 s from step 12; the control's loader
    serves other samples in place of those it cannot read."""
    scenario = {
        "id": "data-error",
        "title": f"every read of the data fails (EIO) for {OUTAGE_S:g} s",
        "fault": data_outage_fault("error", OUTAGE_S),
        "trigger": {"at_step": 12},
        "expected": COMPLETES_NO_RESTART,
    }
    control = {
        "id": "ctl-skip-unreadable",
        "title": "the loader skips the samples it cannot read",
        "workload": {"bad_mode": "skip-unreadable-shard"},
        "fault": data_outage_fault("error", 2.0),
        "trigger": {"at_step": 12},
        "expected_check": "progress.sample-ledger",
    }
    return [scenario], [control]


def storage_data_raw(task_id: str) -> dict[str, Any]:
    """The demo plan (``isolation: netns``) with file-backed data and 40 steps: the
    slow storage's and the data outage's scenarios and controls (each
    where the machine can do it)."""
    raw = demo_raw()
    raw["task"]["id"] = task_id
    raw["task"]["workload"].update(steps=IO_STEPS, **DATA)
    raw["resources"].update(spares=0)
    scenarios: list[dict[str, Any]] = []
    controls: list[dict[str, Any]] = []
    for items in (storage_slow_items, data_outage_items):
        more_scenarios, more_controls = items()
        scenarios += more_scenarios
        controls += more_controls
    raw["rounds"] = [{"round": 1, "name": "slow storage and data", "scenarios": scenarios}]
    raw["controls"] = controls
    return raw


# --- running them ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Drill:
    """One finished run of a combined plan: its run directory and ``report.json``."""

    run_dir: Path
    report: dict[str, Any]
    wall_s: float  # the whole plan: baseline, scenarios and controls


def run_raw(base: Path, raw: dict[str, Any]) -> Drill:
    """Run ``raw`` for real into ``base/run`` (state in ``base/state``; the environment
    variable is put back before returning, as other tests run between)."""
    path = base / "plan.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(base / "state")
    started = time.monotonic()
    try:
        run_plan(load_plan(path), base / "run", source=path)
    finally:
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old
    report = json.loads((base / "run" / "report.json").read_text())
    return Drill(base / "run", report, time.monotonic() - started)


def no_fuse_left(run: Path) -> None:
    """No FUSE mirror of the run is mounted and no mirror daemon of it is alive."""
    for events in run.glob("*/*/events/fault.jsonl"):
        for line in events.read_text().splitlines():
            ev = json.loads(line)
            if ev["kind"] == "prepared" and ev.get("mode") == "slow":
                with open("/proc/self/mountinfo") as f:
                    assert ev["source"] not in f.read()
                assert procfs.proc_state(int(ev["daemon_pid"])) in (None, "Z")
    for item in run.glob("*/*/data"):
        assert not mounts_at(item, resolve=False), f"a mount was left on {item}"


@pytest.fixture(scope="session")
def hang_oom_drill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Drill]:
    """The hang's and the OOM's scenarios and controls, one real run for the session."""
    task_id = f"t-{uuid.uuid4().hex[:10]}"
    try:
        yield run_raw(tmp_path_factory.mktemp("hang-oom-drill"), hang_oom_raw(task_id))
    finally:
        kill_task(task_id)


@pytest.fixture(scope="session")
def storage_data_drill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Drill]:
    """The slow storage's and data outage's scenarios and controls, one real
    run for the session; afterwards no FUSE mount or daemon of it is left."""
    task_id = f"t-{uuid.uuid4().hex[:10]}"
    base = tmp_path_factory.mktemp("storage-data-drill")
    try:
        yield run_raw(base, storage_data_raw(task_id))
    finally:
        kill_task(task_id)
    no_fuse_left(base / "run")
