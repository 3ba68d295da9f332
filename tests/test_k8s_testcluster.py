"""The Kubernetes test cluster for real: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler v1.20.2 in a control-plane namespace, a process kubelet per node.

* up, a 1-node Job of ``python -c 'print(1)'`` succeeds through the process kubelet, and
  the tear-down leaves no process, namespace, cgroup or secret file;
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
from faultdrill.ledger import Ledger
from faultdrill.platforms.kubernetes.binaries import find_binaries
from faultdrill.platforms.kubernetes.client import client_missing, kube
from faultdrill.platforms.kubernetes.testcluster import TestCluster
from faultdrill.platforms.local import procfs
from faultdrill.platforms.local.linux import netns_unavailable
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
    pytest.mark.skipif(_WHY is not None, reason=f"no Kubernetes test cluster here: {_WHY}"),
]


def _cluster(work: Path, *, activate: bool = False) -> TestCluster:
    run_id = f"t-k8s-{uuid.uuid4().hex[:10]}"
    ledger = Ledger(work / "ledger.jsonl", run_id=run_id)
    if activate:
        ledger.activate()
    (work / "events").mkdir(parents=True, exist_ok=True)
    return TestCluster(work, ledger, EventSink(work / "events", run_id), workers=1)


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


@pytest.mark.slow
def test_deleted_pod_is_replaced_and_training_resumes_from_a_checkpoint(tmp_path: Path) -> None:
    """The draft adapter end to end (~70 s): a 2-node Job of the reference workload; the
    rank-1 pod is deleted at step 12; a replacement pod is bound, and every rank resumes
    from the step-10 checkpoint; the Job completes; nothing is left."""
    from faultdrill.events import read_jsonl
    from faultdrill.plan import Resources
    from faultdrill.platforms.api import JobSpec, JobState
    from faultdrill.platforms.kubernetes.job import write_lm_config
    from faultdrill.platforms.kubernetes.platform import KubernetesPlatform, apply_change

    run_id = f"t-k8s-{uuid.uuid4().hex[:10]}"
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id=run_id)
    (tmp_path / "events").mkdir()
    sink = EventSink(tmp_path / "events", run_id)
    p = KubernetesPlatform(
        Resources(platform="kubernetes", nodes=2, spares=1), tmp_path, ledger, sink
    )
    cfg = write_lm_config(
        tmp_path / "lm.json",
        tmp_path / "ckpt",
        steps=30,
        ckpt_every=10,
        step_sleep_s=0.3,
        gloo_timeout_s=10.0,
    )
    job = JobSpec(
        run_id=run_id,
        task_id=run_id,
        argv=["-m", "faultdrill.workloads.lm", f"--workload-config={cfg}"],
        env={},
        nodes=["n1", "n2"],
        procs_per_node=1,
        min_nodes=1,
        max_nodes=2,
        max_restarts=3,
        work_dir=tmp_path,
        events_dir=tmp_path / "events",
    )

    def evs() -> list[dict[str, Any]]:
        return [e for f in (tmp_path / "events").glob("*.jsonl") for e in read_jsonl(f)]

    try:
        p.prepare()
        p.submit(job)
        deadline = time.monotonic() + 180
        while not any(e["kind"] == "step" and e["step"] >= 12 for e in evs()):
            assert time.monotonic() < deadline, "no step 12 within 180 s"
            time.sleep(0.2)
        _, old_node = p.pod_of_rank(1)
        for change in p.delete_pod(1):
            apply_change(ledger, change)
        assert p.wait_job(240) == JobState.SUCCEEDED
    finally:
        p.stop(grace_s=5)
        p.teardown()
    events = evs()
    lost = [e for e in events if e["kind"] == "replica_lost"]
    assert lost and lost[0]["node"] == old_node
    bound = [e for e in events if e["kind"] == "pod_bound" and e["mono"] > lost[0]["mono"]]
    assert bound, "no replacement pod was bound"
    loads = [e for e in events if e["kind"] == "ckpt_load"]
    assert {e["rank"] for e in loads} == {0, 1} and {e["step"] for e in loads} == {10}
    assert max(e["step"] for e in events if e["kind"] == "step") == 30
    assert not ledger.pending(), [e.label for e in ledger.pending()]
    assert leftovers(tmp_path, run_id) == []
