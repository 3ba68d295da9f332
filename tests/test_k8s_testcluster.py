"""The Kubernetes test cluster on its own (``slow``: the drills of test_k8s_drills.py bring
it up and down in the default run): etcd, kube-apiserver, kube-controller-manager and
kube-scheduler v1.20.2 on the control-plane host, a process kubelet per node.

* up, a 1-node Job of ``python -c 'print(1)'`` succeeds through the process kubelet (its
  events go to the directory the cluster names), and the tear-down leaves no process,
  namespace, cgroup or secret file;
* a harness SIGKILLed while a pod runs, then ``python -m faultdrill.cli cleanup RUN_DIR``:
  nothing is left either (daemons, kubelet, the pod's process, namespaces, cgroups, files).

Each takes ~15-25 s (the apiserver needs ~6 s to become ready). Skipped, with the fix, when
the binaries, etcd or the kubernetes client are missing, or without root.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from faultdrill.errors import EnvironmentPrepError
from faultdrill.events import EventSink
from faultdrill.host import procfs
from faultdrill.host.linux import netns_unavailable
from faultdrill.ledger import Ledger
from faultdrill.platforms.kubernetes.binaries import find_binaries
from faultdrill.platforms.kubernetes.client import client_missing, kube
from faultdrill.platforms.kubernetes.testcluster import TestCluster
from tests.drillkit import ROOT
from tests.test_netns_kit import ledger_records
from tests.test_netns_kit import leftovers as netns_leftovers


def _unavailable() -> str | None:
    why = netns_unavailable() or client_missing()
    if why:
        return why
    try:
        find_binaries()
    except EnvironmentPrepError as exc:
        return str(exc)
    return None


_WHY = _unavailable()
pytestmark = [
    pytest.mark.drill,
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(_WHY is not None, reason=f"no Kubernetes test cluster here: {_WHY}"),
]


def _cluster(work: Path, *, activate: bool = False) -> TestCluster:
    run_id = f"t-k8s-{uuid.uuid4().hex[:10]}"
    ledger = Ledger(work / "ledger.jsonl", run_id=run_id)
    if activate:
        ledger.activate()
    (work / "events").mkdir(parents=True, exist_ok=True)
    cluster = TestCluster(work / "k8s", ledger, EventSink(work / "events", run_id), workers=1)
    (work / "k8s").mkdir(parents=True, exist_ok=True)
    cluster.events_to(work / "events", run_id)
    return cluster


def _job(name: str, argv: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 2,
                    "containers": [{"name": "main", "image": "none", "command": argv}],
                }
            },
        },
    }


def leftovers(work: Path, run_id: str) -> list[str]:
    """Everything of the run still on the machine: what the namespace kit checks
    (namespaces, links, cgroups) plus recorded daemons, secret files and any process
    carrying the run id."""
    ledger = work / "ledger.jsonl"
    left = netns_leftovers(ledger, run_id)
    for rec in ledger_records(ledger):
        data = rec["data"]
        if rec["kind"] == "k8s-process" and procfs.alive(data["pid"], data["start_time"]):
            left.append(f"{data['name']} pid {data['pid']} alive")
        elif rec["kind"] == "k8s-files":
            left += [f"file {p}" for p in data["paths"] if Path(p).exists()]
    run_procs = procfs.pids_with_env("FAULTDRILL_RUN_ID", run_id)
    if run_procs:
        left.append(f"processes of the run: {run_procs}")
    return left


def test_control_plane_runs_a_job_through_the_process_kubelet(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    run_id = cluster.ledger.run_id
    try:
        cluster.start()
        batch = kube().client.BatchV1Api(cluster.api())
        core = kube().client.CoreV1Api(cluster.api())
        nodes = core.list_node().items
        assert [n.metadata.name for n in nodes] == cluster.workers == ["n1"]
        batch.create_namespaced_job("default", _job("print1", [sys.executable, "-c", "print(1)"]))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = batch.read_namespaced_job_status("print1", "default").status
            if status.succeeded or status.failed:
                break
            time.sleep(0.2)
        assert status.succeeded == 1 and not status.failed, status
        pods = core.list_namespaced_pod("default", label_selector="job-name=print1").items
        assert len(pods) == 1 and pods[0].spec.node_name == "n1"
        term = pods[0].status.container_statuses[0].state.terminated
        assert pods[0].status.phase == "Succeeded" and term.exit_code == 0
        log = cluster.kubelet_dir("n1") / "pods" / pods[0].metadata.uid / "main.log"
        assert log.read_text().strip() == "1"
        kinds = [json.loads(x)["kind"] for x in (tmp_path / "events" / "kubelet-n1.jsonl").open()]
        assert {"kubelet_registered", "pod_started", "pod_exited"} <= set(kinds)
    finally:
        cluster.teardown()
        cluster.teardown()  # idempotent
    assert not cluster.ledger.pending()
    assert leftovers(tmp_path, run_id) == []
    assert not (tmp_path / "k8s" / "pki").exists() and not (tmp_path / "k8s" / "etcd").exists()


def test_harness_sigkill_then_cleanup_leaves_nothing(tmp_path: Path) -> None:
    work, state = tmp_path / "run", tmp_path / "state"
    env = {**os.environ, "FAULTDRILL_STATE_DIR": str(state)}
    harness = subprocess.Popen(
        [sys.executable, "-m", "tests.test_k8s_testcluster", str(work)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert harness.stdout is not None
        line = harness.stdout.readline().decode()  # blocks until the pod runs (or exit)
        assert line.startswith("RUNNING "), line + harness.stdout.read().decode()
        run_id, pod_pid = line.split()[1], int(line.split()[2])
        assert procfs.alive(pod_pid)
        records = ledger_records(work / "ledger.jsonl")
        daemons = {r["data"]["name"] for r in records if r["kind"] == "k8s-process"}
        assert {"etcd", "kube-apiserver", "kubelet-n1"} <= daemons
    finally:
        harness.send_signal(signal.SIGKILL)
        harness.wait()
    assert leftovers(work, run_id), "the SIGKILL should have left the cluster running"
    done = subprocess.run(
        [sys.executable, "-m", "faultdrill.cli", "cleanup", str(work)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert leftovers(work, run_id) == []
    assert not procfs.alive(pod_pid)


def _harness(work: Path) -> None:
    """Bring a cluster up, run a pod that sleeps, print ``RUNNING <run id> <pid>``, wait
    to be killed."""
    cluster = _cluster(work, activate=True)
    cluster.start()
    batch = kube().client.BatchV1Api(cluster.api())
    batch.create_namespaced_job("default", _job("sleeper", ["sleep", "600"]))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids = procfs.pids_with_env("FAULTDRILL_RUN_ID", cluster.ledger.run_id)
        sleepers = [p for p in pids if procfs.cmdline(p)[:1] == ["sleep"]]
        if sleepers:
            print(f"RUNNING {cluster.ledger.run_id} {sleepers[0]}", flush=True)
            time.sleep(600)
        time.sleep(0.2)
    raise SystemExit("the pod did not start within 60 s")


if __name__ == "__main__":
    _harness(Path(sys.argv[1]))
