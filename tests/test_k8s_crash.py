"""A harness SIGKILLed during a Kubernetes drill, then ``faultdrill cleanup``: no process,
namespace, file or API object of the drill is left.

The drill is a ``faultdrill run`` on the test cluster, killed while its baseline trains. The
crash leaves two ledgers listed for cleanup (the run's cluster, the baseline's objects).
The test first cleans up the baseline's ledger alone, while the control plane still runs,
and sees through the API that the Job and its pods are gone; then everything else. ~1-2
min (``slow``: the default run keeps one plan run on the test cluster).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from faultdrill.host import procfs
from faultdrill.platforms.kubernetes.client import api_client, kube
from faultdrill.platforms.kubernetes.manifest import LABEL_RUN, run_label
from tests.drillkit import ROOT, cli_env, kill_task, wait_for
from tests.k8s_kit import k8s_leftovers, needs_test_cluster, plan_raw, write
from tests.test_netns_kit import ledger_records

pytestmark = [pytest.mark.drill, pytest.mark.root, pytest.mark.slow, needs_test_cluster]


def _cleanup(*paths: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "faultdrill.cli", "cleanup", *map(str, paths)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _pods_of(cluster_dir: Path, label: str) -> list[str]:
    netns = next(
        r["data"]["name"]
        for r in ledger_records(cluster_dir / "ledger.jsonl")
        if r["kind"] == "netns" and r["data"]["name"].endswith("-cp")
    )
    core = kube().client.CoreV1Api(api_client(cluster_dir / "pki" / "kubeconfig", netns))
    pods = core.list_namespaced_pod("default", label_selector=f"{LABEL_RUN}={label}").items
    return [p.metadata.name for p in pods]


def test_sigkill_of_the_harness_then_cleanup_leaves_nothing(tmp_path: Path) -> None:
    raw = plan_raw(steps=2000, step_sleep_s=0.2)
    task = raw["task"]["id"]
    out, state = tmp_path / "run", tmp_path / "state"
    env = cli_env(state)
    harness = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "faultdrill.cli",
            "run",
            str(write(tmp_path, raw)),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    probe = out / "baseline" / "events" / "probe-rank1.jsonl"
    try:
        wait_for(lambda: probe.exists() and '"kind":"step"' in probe.read_text(), 240, "steps")
        harness.send_signal(signal.SIGKILL)
        harness.wait(10)
        # the precondition: the drill outlived its harness, all of it
        assert procfs.pids_with_env("FAULTDRILL_TASK_ID", task), "pod processes should run on"
        assert len(list((state / "active").iterdir())) == 2  # the cluster's and the baseline's
        run_id = next(
            json.loads(line)["run_id"]
            for line in (out / "baseline" / "events" / "harness.jsonl").read_text().splitlines()
            if '"item_start"' in line
        )
        label = run_label(run_id)
        assert _pods_of(out / "kubernetes", label), "the job's pods should be in the API"
        said = _cleanup(out / "baseline", env=env)
        assert "undone" in said, said
        wait_for(lambda: not _pods_of(out / "kubernetes", label), 60, "the pods to go")
        _cleanup(env=env)
        assert k8s_leftovers(out, task) == []
        assert not procfs.pids_with_env("FAULTDRILL_TASK_ID", task)
        assert list((state / "active").iterdir()) == []
        assert not (out / "kubernetes" / "pki").exists()
        assert not (out / "kubernetes" / "etcd").exists()
    finally:
        if harness.poll() is None:
            harness.kill()
        kill_task(task)
        if (state / "active").is_dir() and list((state / "active").iterdir()):
            subprocess.run(
                [sys.executable, "-m", "faultdrill.cli", "cleanup"],
                env={**os.environ, "FAULTDRILL_STATE_DIR": str(state)},
                capture_output=True,
                timeout=180,
                check=False,
            )
