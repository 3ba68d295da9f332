"""The Kubernetes platform's pure parts, without a cluster: ``$(VAR)`` expansion, the
built-in Job, the follower's flat events, and the binaries' cache (a damaged tarball is
skipped and named, a verified one is unpacked and used)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace as Ns
from typing import Any

import pytest

from faultdrill.errors import EnvironmentPrepError
from faultdrill.events import EventSink
from faultdrill.platforms.api import JobSpec
from faultdrill.platforms.kubernetes import binaries
from faultdrill.platforms.kubernetes import manifest as mf
from faultdrill.platforms.kubernetes.job import builtin_template, template_values
from faultdrill.platforms.kubernetes.kubelet import expand


def test_expand_follows_kubernetes_rules() -> None:
    env = {"A": "1", "B": "x y"}
    assert expand("$(A)-$(B)-$$-$(MISSING)-$A", env) == "1-x y-$-$(MISSING)-$A"


def job_spec(**kw: Any) -> JobSpec:
    base: dict[str, Any] = dict(
        run_id="r1",
        task_id="t1",
        argv=["-m", "faultdrill.workloads.lm", "--workload-config=/w/lm.json"],
        env={},
        nodes=["n1", "n2"],
        procs_per_node=1,
        min_nodes=1,
        max_nodes=2,
        max_restarts=3,
        work_dir=Path("/w"),
        events_dir=Path("/ev"),
    )
    return JobSpec(**{**base, **kw})


def values(spec: JobSpec | None = None) -> dict[str, Any]:
    return template_values(
        spec or job_spec(),
        name="train-ab12",
        namespace="default",
        rdzv_endpoint="10.77.0.4:29400",
        python="/venv/bin/python",
        rdzv="join_timeout=60,is_host=0",
    )


def test_builtin_job_one_agent_per_node_ranks_from_the_rendezvous() -> None:
    m: dict[str, Any] = mf.render(builtin_template(5, 0.1), values())
    spec = m["spec"]
    assert spec["parallelism"] == 2 and "completions" not in spec  # work-queue Job
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["terminationGracePeriodSeconds"] == 5
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    assert anti[0]["labelSelector"]["matchLabels"] == {"faultdrill.io/job": "train-ab12"}
    c = pod["containers"][0]
    assert c["command"] == ["/venv/bin/python", "-m", "faultdrill.platforms.local.agent"]
    args = c["args"]
    assert "--rdzv-endpoint=10.77.0.4:29400" in args and "--local-addr=$(POD_IP)" in args
    assert "--nnodes=1:2" in args and "--rdzv-conf=join_timeout=60,is_host=0" in args
    assert args[-3:] == ["-m", "faultdrill.workloads.lm", "--workload-config=/w/lm.json"]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"]["value"] == "1"


def _node(
    ready: str, taints: list[tuple[str, str]] | None = None, unschedulable: bool = False
) -> Any:
    t = datetime(2026, 12, 1, 9, 0, 0, tzinfo=timezone.utc)
    return Ns(
        metadata=Ns(name="n1"),
        spec=Ns(
            taints=[Ns(key=k, effect=e, time_added=t) for k, e in taints or []],
            unschedulable=unschedulable,
        ),
        status=Ns(
            conditions=[
                Ns(type="Ready", status=ready, reason="r", last_transition_time=t),
            ]
        ),
    )


def _follower(tmp_path: Path) -> Any:
    pytest.importorskip("kubernetes")
    from kubernetes import client

    from faultdrill.platforms.kubernetes.follow import Follower

    sink = EventSink(tmp_path, "t")
    return Follower(client.ApiClient, sink, namespace="default", label_selector="a=b")


def _kinds(tmp_path: Path) -> list[tuple[str, dict[str, Any]]]:
    lines = (tmp_path / "platform.jsonl").read_text().splitlines()
    return [(e["kind"], e) for e in map(json.loads, lines)]


def test_follower_healthy_node_repeated_says_nothing_new(tmp_path: Path) -> None:
    f = _follower(tmp_path)
    f._on_node("LISTED", _node("True"), True)
    f._on_node("MODIFIED", _node("True"), False)
    kinds = [k for k, _ in _kinds(tmp_path)]
    assert kinds == ["k8s_node", "node_state"]


def test_follower_lost_node_gives_node_lost_once_and_taints(tmp_path: Path) -> None:
    f = _follower(tmp_path)
    f._on_node("LISTED", _node("True"), True)
    unreachable = [("node.kubernetes.io/unreachable", "NoSchedule")]
    f._on_node("MODIFIED", _node("Unknown", unreachable), False)
    f._on_node("MODIFIED", _node("Unknown", [*unreachable, ("x", "NoExecute")]), False)
    evs = _kinds(tmp_path)
    lost = [e for k, e in evs if k == "node_lost"]
    assert len(lost) == 1 and lost[0]["ready"] == "Unknown"
    assert lost[0]["k8s_time"] == datetime(2026, 12, 1, 9, tzinfo=timezone.utc).timestamp()
    added = [(e["key"], e["effect"]) for k, e in evs if k == "k8s_taint" and e["op"] == "added"]
    assert added == [*unreachable, ("x", "NoExecute")]
    states = [e["state"] for k, e in evs if k == "node_state"]
    assert states == ["up", "down"]


def test_follower_cordon_is_drained_not_lost(tmp_path: Path) -> None:
    f = _follower(tmp_path)
    f._on_node("LISTED", _node("True"), True)
    f._on_node("MODIFIED", _node("True", unschedulable=True), False)
    evs = _kinds(tmp_path)
    assert [e["state"] for k, e in evs if k == "node_state"] == ["up", "drained"]
    assert not [k for k, _ in evs if k == "node_lost"]


def _tarball(dest: Path, version: str = binaries.VERSION) -> Path:
    """A tarball of three stand-ins that answer --version like the real binaries."""
    tgz = dest / binaries.TARBALL
    with tarfile.open(tgz, "w:gz") as tar:
        for name in binaries.BINARIES:
            script = f"#!/bin/sh\necho 'Kubernetes v{version}'\n".encode()
            info = tarfile.TarInfo(f"./{name}")
            info.size, info.mode = len(script), 0o755
            tar.addfile(info, io.BytesIO(script))
    digest = hashlib.sha256(tgz.read_bytes()).hexdigest()
    (dest / f"{binaries.TARBALL}.sha256").write_text(f"{digest}  {binaries.TARBALL}\n")
    return tgz


@pytest.fixture()
def only_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cache search sees only ``tmp_path/cache`` (and a stand-in etcd)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    etcd = tmp_path / "etcd"
    etcd.write_text("")
    monkeypatch.setenv(binaries.ENV_CACHE, str(cache))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(binaries, "ETCD", etcd)
    monkeypatch.setattr(binaries, "_REPO", tmp_path / "nowhere" / "repo")
    return cache


def test_verified_tarball_is_unpacked_and_used(only_here: Path) -> None:
    tgz = _tarball(only_here)
    found = binaries.find_binaries()
    assert found.source == str(tgz)
    assert found.apiserver.parent.parent == only_here and found.apiserver.is_file()


def test_damaged_tarball_is_skipped_and_named(only_here: Path) -> None:
    tgz = _tarball(only_here)
    with open(tgz, "ab") as f:
        f.write(b"x")
    with pytest.raises(EnvironmentPrepError) as err:
        binaries.find_binaries()
    assert str(tgz) in str(err.value) and "does not match" in str(err.value)
    assert "--build" in str(err.value)


def test_wrong_version_is_refused(only_here: Path) -> None:
    _tarball(only_here, version="1.21.0")
    with pytest.raises(EnvironmentPrepError, match=r"not v1\.20\.2"):
        binaries.find_binaries()
