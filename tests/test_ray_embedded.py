"""The embedded Ray cluster on the namespace cluster: bring-up (every daemon recorded before
it starts, inside its node's namespace and cgroup), one real Ray task on each node, and a
tear-down that leaves nothing; and after a SIGKILL of the harness, ``faultdrill cleanup``
alone leaves nothing either (never ``ray stop``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from faultdrill.host import procfs
from faultdrill.platforms.ray.embedded import MARKER_ENV
from tests.drillkit import ROOT
from tests.ray_kit import DRIVER, make_cluster, needs_ray, ray_leftovers
from tests.test_netns_kit import ledger_records

# Beyond the one every-family drill of the default run (test_ray_drills.py): slow.
pytestmark = [pytest.mark.drill, pytest.mark.root, pytest.mark.slow, needs_ray]


def test_bring_up_one_task_per_node_and_tear_down_leaves_nothing(tmp_path: Path) -> None:
    nodes, ray = make_cluster(tmp_path)
    run_id = nodes.ledger.run_id
    try:
        nodes.prepare()
        ray.start()
        # Every daemon was recorded, then got its pid; each process carrying its marker
        # lives in its node's cgroup and network namespace.
        daemons = [r for r in ledger_records(nodes.ledger.path) if r["kind"] == "ray-daemon"]
        assert [(r["data"]["role"], r["data"]["node"]) for r in daemons] == [
            ("head", "n1"),
            ("worker", "n2"),
        ]
        for rec in daemons:
            node = rec["data"]["node"]
            pids = procfs.pids_with_env(MARKER_ENV, rec["data"]["marker"])
            assert ray.raylet_pid(node) in pids and len(pids) >= 2, pids  # ray start, raylet...
            assert set(pids) <= set(ray.node_pids(node))
            ns_inode = os.stat(f"/run/netns/{nodes.link(node).ns}").st_ino
            assert {os.stat(f"/proc/{p}/ns/net").st_ino for p in pids} == {ns_inode}
        assert ray.gcs_pid() in ray.node_pids("n1")
        # A real task on each node, from a driver inside n1.
        env = {**os.environ, **ray.driver_env("n1"), "FAULTDRILL_RUN_ID": run_id}
        done = subprocess.run(
            [*nodes.launch_prefix("n1"), sys.executable, "-c", DRIVER],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert "RAN ['n1', 'n2']" in done.stdout, done.stdout + done.stderr[-2000:]
        assert ray.dossier()["gcs_mode"] == "memory"
    finally:
        ray.stop()
        ray.stop()  # idempotent
        nodes.teardown()
        errors = nodes.ledger.revert_all()
    assert errors == []
    assert ray_leftovers(nodes.ledger.path, run_id) == []
    assert all(r["reverted"] for r in ledger_records(nodes.ledger.path))


def test_harness_sigkill_then_cleanup_leaves_no_ray_process(tmp_path: Path) -> None:
    run_id = f"t-ray-{uuid.uuid4().hex[:10]}"
    work, state = tmp_path / "run", tmp_path / "state"
    work.mkdir()
    env = {**os.environ, "FAULTDRILL_STATE_DIR": str(state)}
    harness = subprocess.Popen(
        [sys.executable, "-m", "tests.ray_kit", str(work), run_id],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert harness.stdout is not None
        line = harness.stdout.readline()
        while line and b"READY" not in line:
            line = harness.stdout.readline()
        assert b"READY" in line, f"harness exited ({harness.wait()}) before its task ran"
        harness.send_signal(signal.SIGKILL)
        harness.wait(10)
        # What makes this test mean something: the cluster outlived its harness.
        left = ray_leftovers(work / "ledger.jsonl", run_id)
        assert any("of head on n1" in x for x in left), left
        assert any("of worker on n2" in x for x in left), left
        done = subprocess.run(
            [sys.executable, "-m", "faultdrill.cli", "cleanup", str(work)],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert ray_leftovers(work / "ledger.jsonl", run_id) == []
    finally:
        if harness.poll() is None:
            harness.kill()
        if ray_leftovers(work / "ledger.jsonl", run_id):
            from faultdrill.ledger import Ledger

            Ledger(work / "ledger.jsonl", run_id=run_id).revert_all()
