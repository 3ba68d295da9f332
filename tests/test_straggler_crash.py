"""SIGKILL the harness while a rank is throttled (slow-worker), run ``faultdrill cleanup``:
the throttle's cpu group is gone and no process of the task is left. The job is the tiny
stdlib worker under real torchrun agents, so the case takes seconds."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from faultdrill.host import procfs
from faultdrill.host.throttle import CPU_ROOT, cpu_controller_missing, cpu_group_of
from tests.test_netns_kit import (
    cleanup,
    kill_task,
    ledger_records,
    needs_netns,
    start_harness,
    tiny_raw,
    wait_injected,
    write_plan,
)

pytestmark = [
    pytest.mark.drill,
    pytest.mark.root,
    needs_netns,
    pytest.mark.skipif(cpu_controller_missing() is not None, reason=str(cpu_controller_missing())),
]

FAULT = {"kind": "slow-worker", "target": {"rank": 1}, "cpu_percent": 10, "for_s": 300}


def test_sigkill_while_a_rank_is_throttled_then_cleanup_removes_the_throttle(
    tmp_path: Path,
) -> None:
    raw = tiny_raw(tmp_path, FAULT)
    task = raw["task"]["id"]
    state, out = tmp_path / "state", tmp_path / "run"
    proc = start_harness(write_plan(tmp_path, raw), out, state)
    work = out / "scenarios" / "sc"
    try:
        wait_injected(work, proc)
        [entry] = [r for r in ledger_records(work / "ledger.jsonl") if r["kind"] == "cpu-throttle"]
        group = Path(entry["data"]["path"])
        victim = int(entry["data"]["pid"])
        assert group.is_dir() and cpu_group_of(victim) == f"/{group.relative_to(CPU_ROOT)}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        # what makes this test mean something: the throttle outlived its harness
        assert group.is_dir() and procfs.pids_with_env("FAULTDRILL_TASK_ID", task)
        text = cleanup(state)
        assert "undone" in text
        assert not group.exists() and not group.parent.exists()
        assert procfs.pids_with_env("FAULTDRILL_TASK_ID", task) == []
        assert list((state / "active").iterdir()) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        if (state / "active").is_dir() and list((state / "active").iterdir()):
            cleanup(state)
        kill_task(task)
