"""Longer drills on the Kubernetes test cluster (``slow``: not in the default run).

* the known-bad case: a node cut off its control plane only; its pod is evicted and
  replaced, but its process keeps training beside the replacement (split brain) and
  ``resources.no-stale-replica`` catches it (~3 min);
* the example plan, unchanged, passes (``examples/kubernetes.yaml``, ~3.5 min);
* more faults: node-freeze, node-drain (cordon, eviction, uncordon; it left the default
  run, where node-down drills the same family), a full partition of a node, the apiserver
  stopped and started again, the apiserver cut off the nodes, kill-worker by signal
  (~6.5 min);
* a cluster given by kubeconfig: the test cluster's control plane reached as an outside
  cluster with a ServiceAccount that has exactly the RBAC of ``docs/kubernetes-rbac.yaml``
  (~4 min).
"""

from __future__ import annotations

import base64
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultdrill.events import EventSink
from faultdrill.ledger import Ledger
from faultdrill.platforms.kubernetes.client import kube
from faultdrill.platforms.kubernetes.objects import Objects
from faultdrill.platforms.kubernetes.testcluster import RDZV_PORT, TestCluster
from tests.drillkit import ROOT, cli_env, kill_task
from tests.k8s_kit import (
    EXAMPLES,
    events,
    item,
    k8s_leftovers,
    needs_test_cluster,
    plan_raw,
    run_plan,
    scenario,
    verdicts,
)

pytestmark = [pytest.mark.drill, pytest.mark.root, pytest.mark.slow, needs_test_cluster]


def test_split_brain_after_a_partition_from_the_control_plane_is_caught(tmp_path: Path) -> None:
    """n2's kubelet loses the apiserver (its pods still talk to their peers): NotReady,
    eviction, replacement on the spare, while the evicted pod's worker keeps training with
    rank 0. Only one process ever holds its rank (the replacement never gets one while the
    group is full), so only the platform's decision can tell that it is a stale replica."""
    raw = plan_raw(steps=150, step_sleep_s=0.3)
    raw["controls"] = [
        {
            "id": "split-brain",
            "fault": {
                "kind": "partition",
                "target": {"node": "n2", "peer": "control-plane"},
                "for_s": 45,
            },
            "trigger": {"at_step": 8},
            "expected_check": "resources.no-stale-replica",
        }
    ]
    raw["stop"] = {"max_wall_s": 300, "max_no_progress_s": 120}
    report = run_plan(tmp_path, raw, timeout=900)
    s = item(report, "split-brain")
    assert s["caught"] is True, s["evidence"]["resources"]
    stale = next(
        f
        for f in s["evidence"]["resources"]["findings"]
        if f["check"] == "resources.no-stale-replica"
    )
    assert (
        "split brain" in stale["message"] and "declared lost by kube-apiserver" in stale["message"]
    )
    # the rank was never held twice: the duplicate-rank check could not have seen it
    assert verdicts(s)["resources.no-duplicate-rank"] == "pass"
    evs = events(Path(report["_out"]) / "controls" / "split-brain")
    lost = next(e for e in evs if e["kind"] == "replica_lost")
    assert lost["node"] == "n2" and lost["pids"]
    assert any(e["kind"] == "kubelet_paused" or e["kind"] == "heartbeat_failed" for e in evs)
    assert k8s_leftovers(Path(report["_out"]), raw["task"]["id"]) == []


def test_the_example_plan_passes(tmp_path: Path) -> None:
    out, state = tmp_path / "run", tmp_path / "state"
    raw: dict[str, Any] = yaml.safe_load((EXAMPLES / "kubernetes.yaml").read_text())
    task = raw["task"]["id"] = f"t-k8s-{uuid.uuid4().hex[:8]}"
    raw["resources"]["kubernetes"]["manifest"] = str(EXAMPLES / "kubernetes-job.yaml")
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(raw, sort_keys=False))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "faultdrill.cli", "run", str(plan), "--out", str(out)],
            env=cli_env(state),
            capture_output=True,
            text=True,
            timeout=900,
            cwd=ROOT,
        )
    finally:
        kill_task(task)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2/2 pass" in done.stdout
    assert "controls caught: 2/2" in done.stdout  # rollback-latest, hide-checkpoints
    assert k8s_leftovers(out, task) == []


def test_more_faults_on_the_test_cluster(tmp_path: Path) -> None:
    raw = plan_raw(
        scenario("node-freeze", {"kind": "node-freeze", "target": {"node": "n2"}, "for_s": 30}),
        scenario("node-drain", {"kind": "node-drain", "target": {"node": "n2"}}),
        scenario("partition", {"kind": "partition", "target": {"node": "n2"}, "for_s": 30}),
        scenario(
            "apiserver-stop",
            {"kind": "control-plane-outage", "mode": "stop", "for_s": 8},
            expected={"resume": "no-restart"},
        ),
        scenario(
            "apiserver-cut",
            {"kind": "control-plane-outage", "mode": "cut", "for_s": 8},
            expected={"resume": "no-restart"},
        ),
        steps=40,
        step_sleep_s=0.2,
    )
    raw["stop"] = {"max_wall_s": 240, "max_no_progress_s": 120}
    report = run_plan(tmp_path, raw, timeout=1200)
    out = Path(report["_out"])
    for sid in ("node-freeze", "node-drain", "partition", "apiserver-stop", "apiserver-cut"):
        s = item(report, sid)
        assert s["verdict"] == "pass", (sid, {c: v for c, v in verdicts(s).items() if v != "pass"})
    _node_drain_cordons_evicts_and_uncordons(events(out / "scenarios" / "node-drain"))
    frozen = events(out / "scenarios" / "node-freeze")
    assert any(e["kind"] == "node_lost" and e["node"] == "n2" for e in frozen)
    stopped = events(out / "scenarios" / "apiserver-stop")
    assert any(e["kind"] == "k8s_apiserver_restarted" for e in stopped)
    cut = events(out / "scenarios" / "apiserver-cut")
    assert any(e["kind"] == "heartbeat_failed" for e in cut)
    assert k8s_leftovers(out, raw["task"]["id"]) == []


def _node_drain_cordons_evicts_and_uncordons(evs: list[dict[str, Any]]) -> None:
    t0 = next(e["mono"] for e in evs if e["kind"] == "inject_start")
    evs = [e for e in evs if e["mono"] >= t0]
    drained = next(e for e in evs if e["kind"] == "node_state" and e["node"] == "n2")
    assert drained["state"] == "drained"
    evicted = next(e for e in evs if e["kind"] == "replica_lost")
    assert evicted["node"] == "n2" and evicted["mono"] - t0 < 5.0
    assert any(e["kind"] == "replica_started" and e["node"] != "n2" for e in evs)
    reasons = {e.get("reason") for e in evs if e["kind"] == "k8s_event"}
    assert "Killing" in reasons or "SuccessfulCreate" in reasons
    # the undo uncordoned n2: the next item found every node schedulable again
    ups = [e for e in evs if e["kind"] == "node_state" and e["node"] == "n2" and e["state"] == "up"]
    assert ups, "n2 not uncordoned by the revert"


# --- a cluster given by kubeconfig ------------------------------------------------------


def _service_account_kubeconfig(cluster: TestCluster, path: Path, namespace: str) -> Path:
    """Apply docs/kubernetes-rbac.yaml in ``namespace`` and write a kubeconfig for its
    ServiceAccount (its token secret, made by the token controller)."""
    k8s = kube()
    core = k8s.client.CoreV1Api(cluster.api())
    core.create_namespace({"metadata": {"name": namespace}})
    objects = Objects(cluster.api())
    for doc in yaml.safe_load_all((ROOT / "docs" / "kubernetes-rbac.yaml").read_text()):
        for subject in doc.get("subjects", []):
            subject["namespace"] = namespace
        doc["metadata"].pop("namespace", None)
        objects.create(doc, namespace)
    deadline = time.monotonic() + 60
    while True:
        sa = core.read_namespaced_service_account("faultdrill", namespace)
        if sa.secrets:
            break
        assert time.monotonic() < deadline, "no token for the ServiceAccount"
        time.sleep(0.5)
    secret = core.read_namespaced_secret(sa.secrets[0].name, namespace)
    token = base64.b64decode(secret.data["token"]).decode()
    assert cluster.pki is not None
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": cluster.pki.server,
                            "certificate-authority": str(cluster.pki.ca),
                        },
                    }
                ],
                "users": [{"name": "faultdrill", "user": {"token": token}}],
                "contexts": [{"name": "fd", "context": {"cluster": "c", "user": "faultdrill"}}],
                "current-context": "fd",
            }
        )
    )
    return path


def test_a_cluster_given_by_kubeconfig_with_the_documented_rbac(tmp_path: Path) -> None:
    """The harness runs as an outsider: in the control-plane host's network namespace (the
    address a client would use), with the ServiceAccount's token only. kill-worker deletes
    the pod through the API, node-drain cordons and evicts; the events' clock comes from the
    wall clock (FAULTDRILL_CLOCK_OFFSET); everything labelled goes at the end."""
    ledger = Ledger(tmp_path / "cluster" / "ledger.jsonl", run_id=f"t-kc-{uuid.uuid4().hex[:8]}")
    cluster = TestCluster(
        tmp_path / "cluster", ledger, EventSink(tmp_path / "cluster" / "events", "c"), spares=1
    )
    try:
        cluster.start()
        kc = _service_account_kubeconfig(cluster, tmp_path / "kubeconfig", "drills")
        template = (EXAMPLES / "kubernetes-job.yaml").read_text()
        job = tmp_path / "job.yaml"
        job.write_text(template.replace("{{python}}", sys.executable))
        raw = plan_raw(
            scenario("kill-worker", {"kind": "kill-worker", "target": {"rank": 1}}),
            scenario("node-drain", {"kind": "node-drain", "target": {"node": "n2"}}),
        )
        raw["resources"]["spares"] = 0
        raw["resources"]["kubernetes"] = {
            "kubeconfig": str(kc),
            "namespace": "drills",
            "manifest": str(job),
            "rendezvous": f"{cluster.address}:{RDZV_PORT}",
        }
        report = _run_in(cluster.control_netns, tmp_path, raw)
        _check_kubeconfig_run(cluster, report, raw)
    finally:
        cluster.teardown()
    assert not ledger.pending()


def _run_in(netns: str, tmp_path: Path, raw: dict[str, Any]) -> dict[str, Any]:
    import json

    from tests.k8s_kit import write

    out = tmp_path / "run"
    argv = ["nsenter", f"--net=/run/netns/{netns}", sys.executable, "-m", "faultdrill.cli"]
    argv += ["run", str(write(tmp_path, raw)), "--out", str(out), "--quiet"]
    try:
        done = subprocess.run(
            argv, env=cli_env(tmp_path / "state"), capture_output=True, text=True, timeout=900
        )
    finally:
        kill_task(raw["task"]["id"])
    assert (out / "report.json").is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    report["_out"] = str(out)
    return report


def _check_kubeconfig_run(
    cluster: TestCluster, report: dict[str, Any], raw: dict[str, Any]
) -> None:
    out = Path(report["_out"])
    assert report["baseline"]["verdict"] in ("pass", "retest")
    base = verdicts({"evidence": report["baseline"]["evidence"], "expectation": {"findings": []}})
    assert base["progress.completed"] == "pass"
    assert base["resources.no-stale-replica"] == "retest"  # no process of it is seen from here
    for sid in ("kill-worker", "node-drain"):
        s = item(report, sid)
        v = verdicts(s)
        assert v["progress.resume-point"] == "pass" and v["progress.completed"] == "pass", v
        assert "fail" not in v.values(), v
        evs = events(out / "scenarios" / sid)
        item_start = next(e for e in evs if e["kind"] == "item_start")["mono"]
        steps = [e["mono"] for e in evs if e["kind"] == "step"]
        assert steps and min(steps) > item_start  # the wall-clock-derived monotonic clock
        lost = next(e for e in evs if e["kind"] == "replica_lost")
        assert lost["source"] == "kube-apiserver"
        assert any(e["kind"] == "replica_started" and e["mono"] > lost["mono"] for e in evs)
    k8s = kube()
    batch = k8s.client.BatchV1Api(cluster.api())
    core = k8s.client.CoreV1Api(cluster.api())
    task = f"faultdrill.io/task={raw['task']['id']}"
    assert not batch.list_namespaced_job("drills", label_selector=task).items
    assert not core.list_namespaced_pod("drills", label_selector=task).items
    n2 = core.read_node("n2")
    assert not n2.spec.unschedulable, "the drain's undo uncordons"
