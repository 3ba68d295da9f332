"""Real drills on the Kubernetes test cluster, one ``faultdrill run`` for all of them.

The control plane is real (etcd, kube-apiserver, kube-controller-manager, kube-scheduler
v1.20.2), brought up once for the run and shared by its items; the kubelets are process
kubelets. One plan holds a drill of every fault family (a worker's pod deleted, a link
losing packets, a node lost, the apiserver paused, the checkpoint storage
read-only, a checkpoint damaged) and of the one newer kind the test cluster takes (the
checkpoint storage slow, where the machine has FUSE), each judged by faultdrill's own
checks, and the tests read what the control plane decided from the same run. ~4-5 min on
an idle 2-core machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from faultdrill.host.linux import netns_exists
from faultdrill.host.storage import fuse_missing
from tests.drillkit import finding
from tests.k8s_kit import (
    events,
    item,
    k8s_leftovers,
    needs_test_cluster,
    plan_raw,
    run_plan,
    scenario,
    verdicts,
)
from tests.test_netns_kit import ledger_records

pytestmark = [pytest.mark.drill, pytest.mark.root, needs_test_cluster]

ALL_FAMILIES = (
    scenario("kill-worker", {"kind": "kill-worker", "target": {"rank": 1}, "signal": "SIGKILL"}),
    scenario(
        "link-loss",
        {"kind": "link-loss", "target": {"node": "n2"}, "percent": 10, "for_s": 3},
        expected={"resume": "no-restart"},
    ),
    scenario("node-down", {"kind": "node-down", "target": {"node": "n2"}}),
    # node-drain (the same family as node-down: a node lost) is drilled in the slow set
    # (tests/test_k8s_slow.py), as the default run's time is the 30-minute budget's
    scenario(
        "apiserver-pause",
        {"kind": "control-plane-outage", "mode": "pause", "for_s": 12},
        expected={"resume": "no-restart"},
    ),
    scenario(
        "storage-read-only",
        {"kind": "storage-outage", "mode": "read-only", "for_s": 2},
        at_step=8,
        expected={"resume": "no-restart"},
    ),
    scenario(
        "corrupt-checkpoint",
        {"kind": "corrupt-checkpoint", "damage": "flip-bytes"},
        expected={"resume": "previous-valid"},
    ),
    # every write to the checkpoint directory 150 ms late for 5 s, across the step-10 save
    # (the step-5 save before it gives the usual save time)
    *(
        ()
        if fuse_missing()
        else (
            scenario(
                "storage-slow",
                {"kind": "storage-slow", "latency_ms": 150, "for_s": 5},
                at_step=8,
                expected={"resume": "no-restart"},
            ),
        )
    ),
)


@pytest.fixture(scope="module")
def drilled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("k8s-drills")
    raw = plan_raw(*ALL_FAMILIES)
    report = run_plan(tmp, raw)
    report["_task"] = raw["task"]["id"]
    return report


def _evs(report: dict[str, Any], sid: str) -> list[dict[str, Any]]:
    return events(Path(report["_out"]) / "scenarios" / sid)


def _after_injection(evs: list[dict[str, Any]]) -> tuple[float, list[dict[str, Any]]]:
    t0 = next(e["mono"] for e in evs if e["kind"] == "inject_start")
    return t0, [e for e in evs if e["mono"] >= t0]


@pytest.mark.parametrize("sid", [s["id"] for s in ALL_FAMILIES])
def test_every_family_passes_its_checks(drilled: dict[str, Any], sid: str) -> None:
    s = item(drilled, sid)
    bad = {c: v for c, v in verdicts(s).items() if v != "pass"}
    assert s["verdict"] == "pass", (bad, drilled["_stdout"][-2000:])
    assert drilled["baseline"]["verdict"] == "pass"


def test_kill_worker_deletes_the_pod_and_a_replacement_resumes(drilled: dict[str, Any]) -> None:
    t0, evs = _after_injection(_evs(drilled, "kill-worker"))
    lost = next(e for e in evs if e["kind"] == "replica_lost")
    assert lost["source"] == "kube-apiserver" and lost["why"] == "deleted"
    # pids: the pod's processes the kubelet still knew when the watch saw the deletion; on a
    # busy machine the kubelet may have let go of them first (the sampler still has them)
    assert lost["mono"] - t0 < 2.0 and isinstance(lost["pids"], list), lost
    started = next(e for e in evs if e["kind"] == "replica_started" and e["uid"] != lost["uid"])
    assert started["mono"] - lost["mono"] < 5.0
    assert any(e["kind"] == "pod_bound" and e["uid"] == started["uid"] for e in evs)
    q = item(drilled, "kill-worker")["questions"]
    assert q["worker_lost_source"] == "kube-apiserver"
    assert q["resumed_from"]["step"] == 10 and q["resumed_from"]["verified"] is True


def test_node_down_seen_through_the_control_planes_decisions(drilled: dict[str, Any]) -> None:
    """NotReady -> unreachable taints -> eviction -> replacement, in that order, each with
    the control plane's own time; the four questions answered from them."""
    t0, evs = _after_injection(_evs(drilled, "node-down"))

    def first(kind: str, **match: Any) -> dict[str, Any]:
        return next(e for e in evs if e["kind"] == kind and match.items() <= e.items())

    lost = first("node_lost", node="n2")
    noexec = first("k8s_taint", node="n2", op="added", effect="NoExecute")
    evicted = first("replica_lost", node="n2")
    started = next(e for e in evs if e["kind"] == "replica_started" and e["node"] != "n2")
    assert lost["mono"] < noexec["mono"] < evicted["mono"] < started["mono"]
    assert 5.0 < lost["mono"] - t0 < 20.0, "node monitor grace 10 s"
    assert 5.0 < evicted["mono"] - lost["mono"] < 20.0, "unreachable toleration 10 s"
    assert lost["source"] == "node-lifecycle-controller" and lost["k8s_time"]
    assert noexec["key"] == "node.kubernetes.io/unreachable"
    s = item(drilled, "node-down")
    q = s["questions"]
    assert q["worker_lost_source"] == "node-lifecycle-controller"
    assert "first noticed by" in q["worker_lost_by"]  # the torchrun agent decides first
    assert q["resources_ready_at"]["mono"] == pytest.approx(started["mono"], abs=0.01)
    assert q["resumed_from"]["step"] == 10


def test_apiserver_pause_is_seen_by_the_watches_and_rides_out(drilled: dict[str, Any]) -> None:
    _t0, evs = _after_injection(_evs(drilled, "apiserver-pause"))
    errors = [e for e in evs if e["kind"] == "k8s_watch_error"]
    oks = [e for e in evs if e["kind"] == "k8s_watch_ok"]
    assert errors and oks and min(e["mono"] for e in oks) > min(e["mono"] for e in errors)
    assert any(e["kind"] == "heartbeat_failed" for e in evs), "the kubelets lost it too"
    assert not [e for e in evs if e["kind"] == "replica_lost"]
    assert item(drilled, "apiserver-pause")["questions"]["note"].startswith("no replica was lost")


def test_storage_read_only_fails_a_save_and_latest_stays(drilled: dict[str, Any]) -> None:
    evs = _evs(drilled, "storage-read-only")
    failed = [e for e in evs if e["kind"] == "ckpt_save_failed"]
    assert failed, "the save during the outage should have failed (EROFS)"
    assert verdicts(item(drilled, "storage-read-only"))["progress.failed-save-not-published"] == (
        "pass"
    )


def test_corrupt_checkpoint_is_refused_and_the_previous_one_resumes(
    drilled: dict[str, Any],
) -> None:
    q = item(drilled, "corrupt-checkpoint")["questions"]
    assert q["resumed_from"]["step"] == 5, q
    loads = [e for e in _evs(drilled, "corrupt-checkpoint") if e["kind"] == "ckpt_load"]
    assert any(r["id"] == "step-000010" for e in loads for r in e["rejected"])


@pytest.mark.skipif(bool(fuse_missing()), reason=f"needs FUSE: {fuse_missing()}")
def test_slow_storage_stretches_the_save_and_nothing_fails(drilled: dict[str, Any]) -> None:
    s = item(drilled, "storage-slow")
    slow = finding(s, "expectation.slow-storage-save")
    assert slow["verdict"] == "pass" and 10 in slow["data"]["slowed_steps"], slow
    assert slow["data"]["save_s"] > 1.0 > slow["data"]["usual_save_s"], slow
    assert finding(s, "progress.failed-save-not-published")["verdict"] == "pass"
    assert s["inventory"]["failed_saves"] == []
    _t0, evs = _after_injection(_evs(drilled, "storage-slow"))
    assert not [e for e in evs if e["kind"] == "replica_lost"], "the pods rode it out"


def test_nothing_of_the_run_is_left(drilled: dict[str, Any]) -> None:
    """Every ledger (the cluster's and each item's) fully reverted; no namespace, link,
    cgroup, daemon, pod process, secret or scratch directory left; none listed as active."""
    run = Path(drilled["_out"])
    assert k8s_leftovers(run, drilled["_task"]) == []
    cluster = ledger_records(run / "kubernetes" / "ledger.jsonl")
    names = [r["data"]["name"] for r in cluster if r["kind"] == "netns"]
    assert names and not [n for n in names if netns_exists(n)]
    assert not list((Path(drilled["_state"]) / "active").glob("*"))
