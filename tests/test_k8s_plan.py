"""``platform: kubernetes`` without a cluster: the plan's ``kubernetes`` section, the
manifest template (validation, placeholders, labels and the probe's environment, job
states of every followed kind), what each cluster kind can drill, and the follower's
replica events."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace as Ns
from typing import Any

import pytest
import yaml

from faultdrill.admit import load_plan, parse_plan
from faultdrill.errors import PlanError
from faultdrill.events import EventSink
from faultdrill.platforms import PLATFORMS
from faultdrill.platforms.api import Ability, JobState
from faultdrill.platforms.kubernetes import manifest as mf
from faultdrill.platforms.kubernetes.testplatform import TestClusterPlatform
from tests.k8s_kit import EXAMPLES, plan_raw, scenario
from tests.test_k8s_units import job_spec, values


def _errors(raw: dict[str, Any], plan_dir: Path | None = None) -> list[tuple[str, str]]:
    with pytest.raises(PlanError) as err:
        parse_plan(raw, source="p.yaml", plan_dir=plan_dir)
    return err.value.problems


def _k8s(raw: dict[str, Any], **settings: Any) -> dict[str, Any]:
    raw["resources"]["kubernetes"] = settings
    return raw


# --- the plan section -------------------------------------------------------------------


def test_the_example_plan_is_valid_and_chooses_the_test_cluster() -> None:
    plan = load_plan(EXAMPLES / "kubernetes.yaml")
    k8s = plan.resources.kubernetes
    assert k8s is not None and k8s.test_cluster and k8s.manifest is not None
    assert Path(k8s.manifest) == (EXAMPLES / "kubernetes-job.yaml").resolve()
    cls = PLATFORMS["kubernetes"].variant_for(plan.resources)
    assert cls is TestClusterPlatform
    # the harness controls the test cluster can host (no replica-copy: no stale-copy)
    assert [(c.id, c.expected_check) for c in plan.controls] == [
        ("ctl-rollback-latest", "progress.resume-point"),
        ("ctl-hide-checkpoints", "progress.no-restart-from-zero"),
    ]


def test_a_kubernetes_plan_without_its_section_says_how_to_add_it() -> None:
    raw = plan_raw()
    del raw["resources"]["kubernetes"]
    [(where, why)] = _errors(raw)
    assert where == "resources" and "kubernetes: {test_cluster: true}" in why


def test_the_section_on_another_platform_is_refused() -> None:
    raw = plan_raw()
    raw["resources"]["platform"] = "local"
    raw["resources"]["spares"] = 0
    [(where, why)] = _errors(raw)
    assert where == "resources" and "remove it" in why


def test_exactly_one_cluster(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text("apiVersion: v1\n")
    raw = _k8s(plan_raw(), test_cluster=True, kubeconfig=str(kubeconfig))
    [(where, why)] = _errors(raw)
    assert where == "resources.kubernetes" and "exactly one of test_cluster" in why
    [(where, why)] = _errors(_k8s(plan_raw()))
    assert "exactly one of test_cluster" in why


def test_a_missing_kubeconfig_or_manifest_is_named(tmp_path: Path) -> None:
    raw = _k8s(plan_raw(), kubeconfig="nope.yaml", manifest="job.yaml")
    raw["resources"]["spares"] = 0
    errs = dict(_errors(raw, plan_dir=tmp_path))
    assert "kubeconfig 'nope.yaml' not found" in errs["resources.kubernetes.kubeconfig"]
    assert "manifest 'job.yaml' not found" in errs["resources.kubernetes.manifest"]


def test_a_real_cluster_needs_a_manifest_and_a_rendezvous_and_no_spares(tmp_path: Path) -> None:
    kc = tmp_path / "kc"
    kc.write_text("apiVersion: v1\n")
    raw = _k8s(plan_raw(), kubeconfig=str(kc))
    raw["resources"]["spares"] = 0
    assert "needs manifest: PATH" in _errors(raw, tmp_path)[0][1]
    # a plan read from a file must drill something: one fault a real cluster can do
    kill = scenario("kill", {"kind": "kill-worker", "target": {"rank": 1}})
    raw = _k8s(plan_raw(kill), kubeconfig=str(kc), manifest=str(EXAMPLES / "kubernetes-job.yaml"))
    raw["resources"]["spares"] = 0
    assert "set rendezvous: HOST:PORT" in _errors(raw, tmp_path)[0][1]
    raw["resources"]["kubernetes"]["rendezvous"] = "store.default.svc:29400"
    raw["resources"]["spares"] = 1
    assert "set spares: 0" in _errors(raw, tmp_path)[0][1]
    raw["resources"]["spares"] = 0
    plan = parse_plan(raw, plan_dir=tmp_path)
    assert PLATFORMS["kubernetes"].variant_for(plan.resources) is PLATFORMS["kubernetes"]


def test_a_bad_template_is_refused_at_load(tmp_path: Path) -> None:
    bad = tmp_path / "job.yaml"
    bad.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: '{{nope}}'}\n")
    raw = _k8s(plan_raw(), test_cluster=True, manifest=str(bad))
    [(where, why)] = _errors(raw, tmp_path)
    assert where == "resources.kubernetes.manifest" and "holds 0 jobs" in why


# --- what each cluster can drill ----------------------------------------------------------


def test_a_real_cluster_offers_only_what_the_api_can_do(tmp_path: Path) -> None:
    kc = tmp_path / "kc"
    kc.write_text("apiVersion: v1\n")
    raw = plan_raw(scenario("down", {"kind": "node-down", "target": {"node": "n2"}}))
    _k8s(raw, kubeconfig=str(kc), manifest=str(EXAMPLES / "kubernetes-job.yaml"))
    raw["resources"]["kubernetes"]["rendezvous"] = "s:1"
    raw["resources"]["spares"] = 0
    [(_where, why)] = _errors(raw, tmp_path)
    assert "needs ability node-down" in why and "test_cluster: true" in why
    cls = PLATFORMS["kubernetes"]
    kill = scenario("kill", {"kind": "kill-worker", "target": {"rank": 1}})
    plan_res = parse_plan({**raw, "rounds": plan_raw(kill)["rounds"]}, plan_dir=tmp_path).resources
    assert cls.abilities_for(plan_res) == {
        Ability.SIGNAL_RANK,
        Ability.NODE_DRAIN,
        Ability.CHECKPOINT_FILES,
    }


def test_the_test_cluster_offers_every_family() -> None:
    plan = load_plan(EXAMPLES / "kubernetes.yaml")
    can = PLATFORMS["kubernetes"].abilities_for(plan.resources)
    assert can >= {
        Ability.SIGNAL_RANK,
        Ability.NODE_DOWN,
        Ability.NODE_FREEZE,
        Ability.NODE_DRAIN,
        Ability.LINK_LOSS,
        Ability.LINK_CUT,
        Ability.LINK_CUT_CONTROL_PLANE,
        Ability.CONTROL_PLANE_PAUSE,
        Ability.CONTROL_PLANE_STOP,
        Ability.STORAGE_READ_ONLY,
        Ability.CHECKPOINT_FILES,
    }


def test_a_partition_from_the_control_plane_needs_a_platform_that_has_one() -> None:
    fault = {"kind": "partition", "target": {"node": "n2", "peer": "control-plane"}, "for_s": 5}
    raw = plan_raw(scenario("split", fault))
    assert parse_plan(raw).scenarios()[0].fault.target.peer == "control-plane"  # type: ignore[attr-defined]
    raw["resources"] = {"platform": "local", "isolation": "netns", "nodes": 2}
    [(_where, why)] = _errors(raw)
    assert "needs ability link-cut-control-plane" in why and "'local'" in why
    raw = plan_raw(scenario("x", {**fault, "kind": "link-loss", "percent": 5}))
    [(_where, why)] = _errors(raw)
    assert "only for a partition" in why


# --- the manifest -------------------------------------------------------------------------


def test_placeholders_fill_strings_numbers_and_splice_the_entrypoint() -> None:
    doc = {
        "spec": {
            "parallelism": "{{nodes}}",
            "args": ["--rdzv-endpoint={{rdzv_endpoint}}", "{{entrypoint}}", "--x"],
            "shell": "exec {{entrypoint}}",
            "id": "{{ run_id }}",
        }
    }
    out = mf.render(doc, values(job_spec(argv=["-m", "pkg", "a b"])))
    assert out["spec"]["parallelism"] == 2
    assert out["spec"]["args"] == ["--rdzv-endpoint=10.77.0.4:29400", "-m", "pkg", "a b", "--x"]
    assert out["spec"]["shell"] == "exec -m pkg 'a b'"
    assert out["spec"]["id"] == "r1"


def test_labels_and_the_probes_environment_reach_every_pod_template() -> None:
    docs = mf.load_template(EXAMPLES / "kubernetes-job.yaml")
    pytj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j"},
        "spec": {
            "pytorchReplicaSpecs": {
                role: {
                    "template": {
                        "spec": {
                            "containers": [{"name": "c", "env": [{"name": "A", "value": "old"}]}]
                        }
                    }
                }
                for role in ("Master", "Worker")
            }
        },
    }
    env = [{"name": "A", "value": "new"}, {"name": "FAULTDRILL_EVENTS_DIR", "value": "/ev"}]
    out = mf.inject([*docs, pytj], {mf.LABEL_RUN: "fd-x"}, env)
    tpls = [t for d in out for t in mf.pod_templates(d)]
    assert len(tpls) == 3
    for t in tpls:
        assert t["metadata"]["labels"][mf.LABEL_RUN] == "fd-x"
        for c in t["spec"]["containers"]:
            names = [e["name"] for e in c["env"]]
            assert names.count("A") <= 1 and "FAULTDRILL_EVENTS_DIR" in names
    assert all(d["metadata"]["labels"][mf.LABEL_RUN] == "fd-x" for d in out)
    assert {"name": "A", "value": "new"} in tpls[-1]["spec"]["containers"][0]["env"]
    assert docs[0]["metadata"] == {"name": "{{job_name}}"}  # the template is left as it was


@pytest.mark.parametrize(
    ("api", "kind", "status", "state"),
    [
        ("batch/v1", "Job", {"conditions": [{"type": "Complete", "status": "True"}]}, "succeeded"),
        ("batch/v1", "Job", {"conditions": [{"type": "Failed", "status": "True"}]}, "failed"),
        ("batch/v1", "Job", {"active": 2}, "running"),
        (
            "kubeflow.org/v1",
            "PyTorchJob",
            {"conditions": [{"type": "Succeeded", "status": "True"}]},
            "succeeded",
        ),
        (
            "kubeflow.org/v1",
            "PyTorchJob",
            {"conditions": [{"type": "Succeeded", "status": "False"}]},
            "running",
        ),
        (
            "jobset.x-k8s.io/v1alpha2",
            "JobSet",
            {"conditions": [{"type": "Completed", "status": "True"}]},
            "succeeded",
        ),
        ("batch.volcano.sh/v1alpha1", "Job", {"state": {"phase": "Aborted"}}, "failed"),
        ("batch.volcano.sh/v1alpha1", "Job", {"state": {"phase": "Running"}}, "running"),
    ],
)
def test_job_states_of_every_followed_kind(
    api: str, kind: str, status: dict[str, Any], state: str
) -> None:
    doc = {"apiVersion": api, "kind": kind}
    assert mf.job_state(doc, {"status": status}) == JobState(state)


def test_template_problems_name_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    two = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a"}}
    path.write_text(yaml.safe_dump_all([two, two]))
    assert "holds 2 jobs" in (mf.template_problem(path) or "")
    path.write_text(yaml.safe_dump({**two, "spec": {"template": {"spec": {}}}}))
    assert "no pod template" in (mf.template_problem(path) or "")
    path.write_text("a: [")
    assert "not valid YAML" in (mf.template_problem(path) or "")
    ok = mf.load_template(EXAMPLES / "kubernetes-job.yaml")
    ok[0]["metadata"]["name"] = "{{jobname}}"
    path.write_text(yaml.safe_dump_all(ok))
    assert "unknown placeholder(s) jobname" in (mf.template_problem(path) or "")
    assert mf.template_problem(EXAMPLES / "kubernetes-job.yaml") is None
    assert mf.uses_placeholder(EXAMPLES / "kubernetes-job.yaml", "rdzv_endpoint")
    assert mf.run_label("a") == mf.run_label("a") != mf.run_label("b")
    assert len(mf.run_label("x" * 200)) <= 63


# --- the follower's replica events -----------------------------------------------------------


def _pod(phase: str, uid: str = "u1", deleting: bool = False, node: str = "n2") -> Any:
    from datetime import datetime, timezone

    t = datetime(2026, 12, 1, 9, 0, 0, tzinfo=timezone.utc)
    return Ns(
        metadata=Ns(
            name=f"pod-{uid}",
            uid=uid,
            deletion_timestamp=t if deleting else None,
            deletion_grace_period_seconds=5 if deleting else None,
        ),
        spec=Ns(node_name=node),
        status=Ns(
            phase=phase,
            reason=None,
            start_time=t,
            conditions=[],
            container_statuses=[Ns(restart_count=0, state=Ns(terminated=None))],
        ),
    )


def test_follower_says_when_a_replica_runs_and_when_it_is_lost_with_its_pids(
    tmp_path: Path,
) -> None:
    pytest.importorskip("kubernetes")
    from kubernetes import client

    from faultdrill.platforms.kubernetes.follow import Follower

    f = Follower(
        client.ApiClient,
        EventSink(tmp_path, "t"),
        namespace="default",
        label_selector="a=b",
        pids_of=lambda uid: [41, 42] if uid == "u1" else [],
    )
    f._on_pod("ADDED", _pod("Pending"), False)
    f._on_pod("MODIFIED", _pod("Running"), False)
    f._on_pod("MODIFIED", _pod("Running", deleting=True), False)
    f._on_pod("MODIFIED", _pod("Running", deleting=True), False)
    evs = [json.loads(x) for x in (tmp_path / "platform.jsonl").read_text().splitlines()]
    kinds = [e["kind"] for e in evs if e["kind"] != "k8s_pod"]
    assert kinds == ["pod_bound", "replica_started", "replica_lost"]
    lost = next(e for e in evs if e["kind"] == "replica_lost")
    assert lost["pids"] == [41, 42] and lost["grace_s"] == 5 and lost["source"] == "kube-apiserver"
    started = next(e for e in evs if e["kind"] == "replica_started")
    assert started["source"] == "kubelet" and started["k8s_time"] is not None


def test_the_probes_clock_follows_the_harness_through_the_wall_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pods on other hosts: FAULTDRILL_CLOCK_OFFSET puts their events on the harness's
    monotonic clock (here: the same host, so the two agree within scheduling noise)."""
    import time

    from faultdrill.probe import ENV_CLOCK_OFFSET, Probe, mono_clock

    assert mono_clock() is time.monotonic
    monkeypatch.setenv(ENV_CLOCK_OFFSET, f"{time.time() - time.monotonic():.6f}")
    assert abs(mono_clock()() - time.monotonic()) < 0.05
    probe = Probe(tmp_path, rank=0, task_id="t")
    before = time.monotonic()
    probe.emit("step", step=1)
    ev = json.loads((tmp_path / "probe-rank0.jsonl").read_text())
    assert abs(ev["mono"] - before) < 0.05
    monkeypatch.setenv(ENV_CLOCK_OFFSET, "not a number")
    assert mono_clock() is time.monotonic


def test_pids_of_containers_carry_their_host(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import socket

    from faultdrill.probe import ENV_PID_PER_HOST, own_pid

    assert own_pid() == os.getpid()
    monkeypatch.setenv(ENV_PID_PER_HOST, "1")
    mine = own_pid()
    assert mine & ((1 << 22) - 1) == os.getpid() and mine >> 22 > 0
    monkeypatch.setattr(socket, "gethostname", lambda: "pod-b")
    other = own_pid()
    assert other != mine and other & ((1 << 22) - 1) == os.getpid()
