"""A crashed or interrupted harness leaves no process of the drill behind."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from faultdrill.host import procfs
from tests.drillkit import (
    cli_env,
    faultdrill,
    has_steps,
    kill_task,
    small_plan,
    task_pids,
    wait_for,
)

pytestmark = pytest.mark.drill


def _start_long_drill(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str, Path, dict[str, str]]:
    plan, task = small_plan(tmp_path, steps=400, step_sleep_s=0.1)
    out = tmp_path / "run"
    env = cli_env(tmp_path / "state")
    proc = faultdrill(
        "run",
        str(plan),
        "--out",
        str(out),
        "--quiet",
        "--no-controls",
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    events = out / "baseline" / "events"
    try:
        wait_for(lambda: has_steps(events), 90, "the baseline to make progress")
    except AssertionError:
        proc.kill()
        kill_task(task)
        raise
    return proc, task, out, env


def test_sigkill_harness_then_cleanup_leaves_nothing(tmp_path: Path) -> None:
    proc, task, out, env = _start_long_drill(tmp_path)
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        # The precondition that makes this test mean something: the job outlived the harness.
        assert task_pids(task), "job processes should be orphaned, still running"
        active = list((tmp_path / "state" / "active").iterdir())
        assert len(active) == 1, "the crashed run's ledger must be listed for cleanup"
        done = faultdrill("cleanup", env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        text = done.communicate(timeout=60)[0].decode()
        assert done.returncode == 0, text
        assert "undone" in text
        assert task_pids(task) == []
        assert list((tmp_path / "state" / "active").iterdir()) == []
        ledger = [
            json.loads(line)
            for line in (out / "baseline" / "ledger.jsonl").read_text().splitlines()
        ]
        cgroups = [r["data"]["path"] for r in ledger if r.get("kind") == "cgroup"]
        assert all(not Path(p).exists() for p in cgroups)
        # A second cleanup finds nothing to do.
        again = faultdrill("cleanup", env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert "nothing to clean up" in again.communicate(timeout=60)[0].decode()
    finally:
        kill_task(task)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_reverts_and_exits_130(tmp_path: Path, sig: signal.Signals) -> None:
    proc, task, out, _env = _start_long_drill(tmp_path)
    try:
        proc.send_signal(sig)
        text = proc.communicate(timeout=60)[0].decode()
        assert proc.returncode == 130, text
        assert "every fault was reverted" in text
        assert task_pids(task) == []
        assert list((tmp_path / "state" / "active").iterdir()) == []
        events = (out / "baseline" / "events" / "harness.jsonl").read_text()
        assert '"kind":"interrupted"' in events and '"kind":"cleanup"' in events
    finally:
        kill_task(task)


def test_cleanup_with_nothing_recorded(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "state")
    done = faultdrill("cleanup", env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert "nothing to clean up" in done.communicate(timeout=60)[0].decode()
    assert done.returncode == 0
    assert not procfs.pids_with_env("FAULTDRILL_STATE_DIR", str(tmp_path / "state"))
