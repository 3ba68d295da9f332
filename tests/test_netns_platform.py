"""The namespace cluster without a job: bring-up and tear-down (idempotent, recorded
before made, undone by recorded name only), the network track, and the demo's fallback
where namespaces cannot be created."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from faultdrill.admit import load_plan
from faultdrill.engine import demo as demo_mod
from faultdrill.engine.demo import without_netns_if_unavailable
from faultdrill.errors import EnvironmentPrepError
from faultdrill.events import read_jsonl
from faultdrill.host import procfs
from faultdrill.host.linux import link_exists, netns_exists, ns_run, run_in_netns
from faultdrill.ledger import Ledger
from faultdrill.plan import Resources
from faultdrill.platforms import PLATFORMS
from faultdrill.platforms.api import Ability
from faultdrill.platforms.local.netns import NetnsPlatform
from faultdrill.platforms.local.platform import LocalPlatform
from tests.drillkit import DEMO, demo_plans_run
from tests.test_netns_kit import RES, ledger_records, leftovers, make, needs_netns


def test_names_fit_ifnamsiz_and_differ_per_run(tmp_path: Path) -> None:
    a, b = make(tmp_path / "a"), make(tmp_path / "b")
    for p in (a, b):
        for ln in p.links():
            assert len(ln.dev) <= 15 and len(ln.switch_dev) <= 15 and len(p.bridge) <= 15
    assert {ln.ns for ln in a.links()}.isdisjoint({ln.ns for ln in b.links()})
    assert [ln.address for ln in a.links()] == ["10.77.0.1", "10.77.0.2", "10.77.0.3"]


def test_plan_abilities_follow_isolation() -> None:
    assert PLATFORMS["local"].variant_for(Resources()) is LocalPlatform
    assert Ability.LINK_LOSS in LocalPlatform.abilities_for(RES)
    assert Ability.NODE_DOWN not in LocalPlatform.abilities_for(Resources())


@pytest.mark.root
@needs_netns
def test_bring_up_is_recorded_idempotent_and_connected(cluster: NetnsPlatform) -> None:
    recs = ledger_records(cluster.ledger.path)
    kinds = [r["kind"] for r in recs]
    # Every namespace and link was recorded (before it was made) and is now applied.
    assert kinds[:2] == ["netns", "netns-link"]
    assert kinds.count("netns") == 4 and kinds.count("netns-link") == 4
    for ln in cluster.links():
        assert netns_exists(ln.ns) and link_exists(ln.ns, ln.dev)
        assert link_exists(ln.switch_ns, ln.switch_dev)
    assert all(r["data"].get("inode") for r in recs if r["kind"] == "netns")
    # The host's own namespace never sees any of it.
    host_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert cluster.prefix not in host_links
    # A second bring-up changes nothing and records nothing.
    before = cluster.ledger.path.read_text()
    cluster.prepare()
    assert cluster.ledger.path.read_text() == before
    # n1 reaches n2 over the bridge: a TCP connection from n1's namespace.
    n1, n2 = cluster.link("n1"), cluster.link("n2")

    def listen() -> int:
        import socket

        s = socket.socket()
        s.bind((n2.address, 0))
        s.listen()
        listeners.append(s)
        return int(s.getsockname()[1])

    listeners: list[object] = []
    port = run_in_netns(n2.ns, listen)
    done = ns_run(
        n1.ns,
        ["python3", "-c", f"import socket; socket.create_connection(('{n2.address}', {port}), 3)"],
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"TCP port {port} still listening" in " ".join(cluster.leftovers())
    for s in listeners:
        s.close()  # type: ignore[attr-defined]


@pytest.mark.root
@needs_netns
def test_tear_down_removes_exactly_what_was_recorded(tmp_path: Path) -> None:
    platform = make(tmp_path)
    other = "fdkeep-unit"  # someone else's namespace: never touched
    subprocess.run(["ip", "netns", "add", other], check=True)
    try:
        platform.prepare()
        platform.teardown()
        platform.teardown()  # idempotent
        assert leftovers(platform.ledger.path, "no-such-task") == []
        assert all(
            r["reverted"]
            for r in ledger_records(platform.ledger.path)
            if r["kind"].startswith("netns")
        )
        assert netns_exists(other)
    finally:
        subprocess.run(["ip", "netns", "del", other], check=False)
        platform.ledger.revert_all()


@pytest.mark.root
@needs_netns
def test_cleanup_from_the_ledger_alone_kills_what_runs_inside(tmp_path: Path) -> None:
    platform = make(tmp_path)
    platform.prepare()
    ln = platform.link("n2")
    # A process left inside a node's namespace, as a crashed harness would leave it.
    sleeper = subprocess.Popen(["nsenter", f"--net=/run/netns/{ln.ns}", "sleep", "300"])
    try:
        # A fresh ledger object reads the file: that is all `faultdrill cleanup` has.
        errors = Ledger(platform.ledger.path, run_id=platform.ledger.run_id).revert_all()
        assert errors == []
        assert sleeper.wait(5) == -signal.SIGKILL
        assert leftovers(platform.ledger.path, "no-such-task") == []
    finally:
        if sleeper.poll() is None:
            sleeper.kill()


@pytest.mark.root
@needs_netns
def test_existing_namespace_of_the_same_name_is_refused(tmp_path: Path) -> None:
    platform = make(tmp_path)
    subprocess.run(["ip", "netns", "add", platform.switch_ns], check=True)
    try:
        with pytest.raises(
            EnvironmentPrepError, match="already exists but this run did not create"
        ):
            platform.prepare()
    finally:
        platform.teardown()
        platform.ledger.revert_all()
        subprocess.run(["ip", "netns", "del", platform.switch_ns], check=False)
    assert not netns_exists(platform.switch_ns)


@pytest.mark.root
@needs_netns
def test_network_track_samples_every_node_at_the_set_rate(cluster: NetnsPlatform) -> None:
    cluster.start_network_track(4.0)
    time.sleep(1.6)
    track = cluster.net_track
    assert track is not None
    track.stop()
    cluster.net_track = None
    evs = list(read_jsonl(cluster.work_dir / "events" / "net.jsonl"))
    samples = [e for e in evs if e["kind"] == "net_sample"]
    per_node = {n: [e for e in samples if e["node"] == n] for n in ("n1", "n2", "n3")}
    assert all(len(v) >= 5 for v in per_node.values()), {k: len(v) for k, v in per_node.items()}
    gaps = [b["mono"] - a["mono"] for a, b in zip(per_node["n1"], per_node["n1"][1:], strict=False)]
    assert max(gaps) < 0.5  # >= 2 Hz
    last = per_node["n1"][-1]
    assert set(last["rtt_ms"]) == {"n2", "n3"} and all(
        v is not None for v in last["rtt_ms"].values()
    )
    assert last["rx_packets"] > 0 and last["tx_bytes"] > 0


def test_demo_without_namespaces_says_so_and_runs_what_it_can(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(demo_mod, "netns_unavailable", lambda: "network namespaces need root")
    plan, note = without_netns_if_unavailable(load_plan(DEMO))
    assert plan.resources.isolation == "none" and plan.resources.spares == 0
    ids = [s.id for s in plan.scenarios()]
    assert "kill-worker" in ids and not {"link-jitter", "node-loss"} & set(ids)
    assert note is not None and "need root" in note and "link-jitter, node-loss" in note
    ran = demo_plans_run(tmp_path / "demo", monkeypatch)
    err = capsys.readouterr().err
    assert "running the demo without network isolation" in err
    assert ran and ran[0].resources.isolation == "none"


@pytest.mark.root
@needs_netns
def test_run_ledger_names_only_what_it_created(cluster: NetnsPlatform) -> None:
    names = {
        r["data"].get("name")
        for r in ledger_records(cluster.ledger.path)
        if r["kind"] in ("netns", "netns-link")
    }
    assert all(str(n).startswith(cluster.prefix) for n in names)
    head, first = (json.loads(ln) for ln in cluster.ledger.path.read_text().splitlines()[:2])
    assert (head["op"], head["run_id"]) == ("run", cluster.ledger.run_id)  # whose file it is
    assert first["op"] == "record"
    assert procfs.Cgroup.available()
