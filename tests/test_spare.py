"""Spare nodes: preconditions checked from inside the spare before use (runtime, checkpoint
and run directories, route to the rendezvous host); each one made to fail on purpose is
reported as an environment-preparation failure, and the platform then tries the next
spare or says that none is left (a scheduling fact, not an environment one)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from faultdrill.events import EventSink, read_jsonl
from faultdrill.host.linux import ns_run, run_in_netns
from faultdrill.ledger import Ledger
from faultdrill.plan import Resources
from faultdrill.platforms.api import JobSpec
from faultdrill.platforms.local.netns import NetnsPlatform
from tests.test_netns_kit import needs_netns

pytestmark = [pytest.mark.root, needs_netns]


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[NetnsPlatform]:
    res = Resources(isolation="netns", nodes=2, spares=2)
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id="t-spare-unit")
    platform = NetnsPlatform(res, tmp_path, ledger, EventSink(tmp_path / "events", "t"))
    listener: list[socket.socket] = []
    try:
        platform.prepare()
        n1 = platform.link("n1")

        def listen() -> int:
            s = socket.socket()
            s.bind((n1.address, 0))
            s.listen(8)
            listener.append(s)
            return int(s.getsockname()[1])

        # Stands in for the rendezvous store on n1.
        platform.rdzv_host, platform.rdzv_port = n1.address, run_in_netns(n1.ns, listen)
        (tmp_path / "ckpt").mkdir()
        platform.job = job(tmp_path)
        yield platform
    finally:
        for s in listener:
            s.close()
        platform.teardown()
        platform.ledger.revert_all()


def job(work: Path, module: str = "faultdrill.workloads.lm", ckpt: str = "ckpt") -> JobSpec:
    return JobSpec(
        run_id="t-spare-unit",
        task_id="t",
        argv=["-m", module],
        env={"FAULTDRILL_CKPT_DIR": str(work / ckpt)},
        nodes=["n1", "n2"],
        procs_per_node=1,
        min_nodes=2,
        max_nodes=2,
        max_restarts=3,
        work_dir=work,
        events_dir=work / "events",
    )


def test_a_prepared_spare_passes_every_precondition(cluster: NetnsPlatform) -> None:
    assert cluster.spare_problems("n3") == {}
    # A host that answers "refused" is routed (its store may not be up yet, on resubmit).
    cluster.rdzv_port = 1
    assert cluster.spare_problems("n3") == {}


def test_spare_without_route_fails_the_route_precondition(cluster: NetnsPlatform) -> None:
    ln = cluster.link("n3")
    ns_run(ln.ns, ["ip", "addr", "flush", "dev", ln.dev])
    problems = cluster.spare_problems("n3")
    assert set(problems) == {"route"}
    assert problems["route"].startswith(f"cannot reach the rendezvous host {cluster.rdzv_host}:")


def test_spare_without_the_checkpoint_directory_fails_storage(
    cluster: NetnsPlatform, tmp_path: Path
) -> None:
    cluster.job = job(tmp_path, ckpt="no-such-ckpt")
    problems = cluster.spare_problems("n3")
    assert set(problems) == {"storage"}
    assert "no-such-ckpt" in problems["storage"]


def test_spare_without_the_runtime_fails_runtime(cluster: NetnsPlatform, tmp_path: Path) -> None:
    cluster.job = job(tmp_path, module="no_such_training_module")
    problems = cluster.spare_problems("n3")
    assert set(problems) == {"runtime"}
    assert "no_such_training_module" in problems["runtime"]


def test_replacement_skips_a_broken_spare_and_places_the_next(
    cluster: NetnsPlatform, monkeypatch: pytest.MonkeyPatch
) -> None:
    ln = cluster.link("n3")
    ns_run(ln.ns, ["ip", "addr", "flush", "dev", ln.dev])
    started: list[str] = []
    monkeypatch.setattr(cluster, "start_agent", lambda node, job, is_host: started.append(node))
    cluster._place_replacement("n2")
    assert started == ["n4"]
    assert cluster.state["n3"] == "unusable" and cluster.state["n4"] == "up"
    evs = list(read_jsonl(cluster.work_dir / "events" / "platform.jsonl"))
    rejected = [e for e in evs if e["kind"] == "spare_rejected"]
    assert [(e["node"], e["precondition"], e["category"]) for e in rejected] == [
        ("n3", "route", "environment-preparation")
    ]
    assert [e["node"] for e in evs if e["kind"] == "spare_placed"] == ["n4"]
    # No spare left for a second loss: said as a scheduling fact.
    cluster._place_replacement("n1")
    none = [
        e
        for e in read_jsonl(cluster.work_dir / "events" / "platform.jsonl")
        if e["kind"] == "no_spare"
    ]
    assert len(none) == 1 and none[0]["category"] == "scheduling" and none[0]["replaces"] == "n1"
    assert started == ["n4"]


def test_resubmission_runs_on_the_members_and_replaces_a_down_host(
    cluster: NetnsPlatform, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    started: list[tuple[str, bool]] = []
    monkeypatch.setattr(
        cluster, "start_agent", lambda node, job, is_host: started.append((node, is_host))
    )
    cluster.set_node_state("n1", "down", "test")
    cluster._submit(job(tmp_path))
    # n2 hosts the rendezvous now; spare n3 replaces n1 (its route to n2 is checked first).
    assert started == [("n2", True), ("n3", False)]
    assert cluster.members == ["n3", "n2"] and cluster.rdzv_host == cluster.link("n2").address
