"""Link faults on a real namespace cluster (no job): each applies exactly the recorded
rule, has the effect it claims, and is undone by revert, by a second revert, and from the
ledger file alone. Plus the plan validator's refusals."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest

from faultdrill.admit import parse_plan
from faultdrill.errors import PlanError
from faultdrill.events import read_jsonl
from faultdrill.faults.api import FaultSpec, make_fault
from faultdrill.faults.network import LinkFlapSpec, LinkLossSpec, LinkSlowSpec, PartitionSpec
from faultdrill.host.linux import ns_run, run_in_netns
from faultdrill.ledger import Ledger
from faultdrill.platforms.local.netns import NetnsPlatform
from tests.test_netns_kit import ctx_of, ledger_records, make, needs_netns, netns_raw

N2: dict[str, Any] = {"node": "n2"}


def iptables(platform: NetnsPlatform, node: str) -> str:
    ns = platform.link(node).ns
    return ns_run(ns, ["iptables", "-w", "-S"], check=False).stdout


def can_connect(platform: NetnsPlatform, src: str, dst: str, port: int) -> bool:
    addr = platform.link(dst).address

    def attempt() -> bool:
        try:
            socket.create_connection((addr, port), timeout=0.7).close()
            return True
        except OSError:
            return False

    return run_in_netns(platform.link(src).ns, attempt)


def listen_on(platform: NetnsPlatform, node: str) -> tuple[socket.socket, int]:
    def open_listener() -> socket.socket:
        s = socket.socket()
        s.bind((platform.link(node).address, 0))
        s.listen(16)
        return s

    s = run_in_netns(platform.link(node).ns, open_listener)
    return s, int(s.getsockname()[1])


# --- the faults on a real cluster -------------------------------------------------------


@pytest.mark.root
@needs_netns
def test_link_loss_applies_the_recorded_rules_and_reverts_twice(cluster: NetnsPlatform) -> None:
    fault = make_fault(LinkLossSpec(target=N2, percent=25, for_s=5))
    ctx = ctx_of(cluster)
    facts = fault.inject(ctx)
    rules = iptables(cluster, "n2")
    for tag in facts["rules"]:
        assert tag in rules
    assert rules.count("--probability 0.25") == 2 and "-j DROP" in rules
    assert "fd-" not in iptables(cluster, "n1")  # only the target's link
    recs = [r for r in ledger_records(cluster.ledger.path) if r["kind"] == "iptables-rule"]
    assert {r["data"]["tag"] for r in recs} == set(facts["rules"])
    assert [r["data"]["chain"] for r in recs] == ["INPUT", "OUTPUT"]
    assert {r.rule_id for r in cluster.active_rules()} == set(facts["rules"])
    fault.revert(ctx)
    fault.revert(ctx)
    assert "fd-" not in iptables(cluster, "n2")
    assert cluster.active_rules() == []
    assert all(
        r["reverted"] for r in ledger_records(cluster.ledger.path) if r["kind"] == "iptables-rule"
    )


@pytest.mark.root
@needs_netns
def test_partition_from_one_peer_cuts_only_that_peer(cluster: NetnsPlatform) -> None:
    server, port = listen_on(cluster, "n2")
    try:
        assert can_connect(cluster, "n1", "n2", port) and can_connect(cluster, "n3", "n2", port)
        fault = make_fault(PartitionSpec(target={"node": "n2", "peer": "n1"}, for_s=5))
        ctx = ctx_of(cluster)
        fault.inject(ctx)
        assert "-s 10.77.0.1/32" in iptables(cluster, "n2")
        assert not can_connect(cluster, "n1", "n2", port)
        assert can_connect(cluster, "n3", "n2", port)
        fault.revert(ctx)
        assert can_connect(cluster, "n1", "n2", port)
    finally:
        server.close()


@pytest.mark.root
@needs_netns
def test_partition_rules_are_undone_from_the_ledger_file_alone(cluster: NetnsPlatform) -> None:
    fault = make_fault(PartitionSpec(target=N2, for_s=5))
    fault.inject(ctx_of(cluster))
    assert iptables(cluster, "n2").count("fd-") == 2
    # What `faultdrill cleanup` does after a crash: a new Ledger over the same file.
    assert Ledger(cluster.ledger.path, run_id=cluster.ledger.run_id).revert_all() == []
    assert "fd-" not in iptables(cluster, "n2")


@pytest.mark.root
@needs_netns
def test_link_slow_shapes_both_ends_and_reverts(cluster: NetnsPlatform) -> None:
    ln = cluster.link("n2")
    fault = make_fault(LinkSlowSpec(target=N2, rate="2mbit", queue_ms=50, for_s=5))
    ctx = ctx_of(cluster)
    fault.inject(ctx)
    for ns, dev in ((ln.ns, ln.dev), (ln.switch_ns, ln.switch_dev)):
        shown = ns_run(ns, ["tc", "qdisc", "show", "dev", dev], check=False).stdout
        assert "tbf" in shown and "2Mbit" in shown
    fault.revert(ctx)
    fault.revert(ctx)
    for ns, dev in ((ln.ns, ln.dev), (ln.switch_ns, ln.switch_dev)):
        assert "tbf" not in ns_run(ns, ["tc", "qdisc", "show", "dev", dev], check=False).stdout


@pytest.mark.root
@needs_netns
def test_link_flap_goes_down_and_up_count_times(cluster: NetnsPlatform) -> None:
    ln = cluster.link("n2")
    fault = make_fault(LinkFlapSpec(target=N2, count=2, down_s=0.3, up_s=0.3))
    ctx = ctx_of(cluster)
    assert fault.spec.duration_s == pytest.approx(1.2)
    fault.inject(ctx)
    shown = ns_run(ln.ns, ["ip", "link", "show", "dev", ln.dev], check=False).stdout
    assert "state DOWN" in shown
    time.sleep(1.3)
    fault.revert(ctx)
    shown = ns_run(ln.ns, ["ip", "link", "show", "dev", ln.dev], check=False).stdout
    assert "state UP" in shown or "LOWER_UP" in shown
    evs = [e["kind"] for e in read_jsonl(cluster.work_dir / "events" / "fault.jsonl")]
    assert evs == ["link_down", "link_up", "link_down", "link_up"]
    downs = [r for r in ledger_records(cluster.ledger.path) if r["kind"] == "link-down"]
    assert len(downs) == 2 and all(r["reverted"] for r in downs)


@pytest.mark.root
@needs_netns
def test_link_flap_reverted_early_leaves_the_link_up(cluster: NetnsPlatform) -> None:
    ln = cluster.link("n2")
    fault = make_fault(LinkFlapSpec(target=N2, count=50, down_s=5, up_s=5))
    ctx = ctx_of(cluster)
    fault.inject(ctx)
    fault.revert(ctx)
    shown = ns_run(ln.ns, ["ip", "link", "show", "dev", ln.dev], check=False).stdout
    assert "state DOWN" not in shown


def test_revert_without_inject_is_safe(tmp_path: Path) -> None:
    platform = make(tmp_path)
    for spec in (
        LinkLossSpec(target=N2, percent=5, for_s=1),
        PartitionSpec(target=N2, for_s=1),
        LinkSlowSpec(target=N2, for_s=1),
        LinkFlapSpec(target=N2),
    ):
        make_fault(spec).revert(ctx_of(platform))


# --- the plan validator -----------------------------------------------------------------


def _plan(fault: dict[str, Any], isolation: str = "netns") -> Any:
    raw = netns_raw(spares=1 if isolation == "netns" else 0)  # spares need netns
    raw["resources"]["isolation"] = isolation
    raw["rounds"] = [
        {"round": 1, "scenarios": [{"id": "x", "fault": fault, "trigger": {"at_step": 3}}]}
    ]
    return parse_plan(raw, source="plan.yaml")


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (
            {"kind": "link-loss", "target": {"node": "n7"}, "percent": 5, "for_s": 1},
            "x: link-loss: target node 'n7' is not a node of this layout (nodes: n1, n2, n3)",
        ),
        (
            {"kind": "partition", "target": {"node": "n2", "peer": "n2"}, "for_s": 1},
            "x: partition: peer must differ from the target node",
        ),
        (
            {"kind": "link-slow", "target": {"node": "n2", "peer": "n1"}, "for_s": 1},
            "x: link-slow acts on the node's whole link; remove 'target.peer'",
        ),
        (
            {"kind": "link-loss", "target": {"node": "n2"}, "percent": 0, "for_s": 1},
            "greater than 0",
        ),
        (
            {"kind": "link-flap", "target": {"node": "n2", "peer": "n1"}},
            "link-flap acts on the node's whole link; remove 'peer'",
        ),
    ],
)
def test_validator_refuses_bad_link_faults(fault: dict[str, Any], message: str) -> None:
    with pytest.raises(PlanError) as err:
        _plan(fault)
    assert message in str(err.value)
    assert "plan.yaml" in str(err.value)


def test_validator_refuses_link_faults_without_namespaces() -> None:
    with pytest.raises(
        PlanError,
        match="needs ability link-cut, which platform 'local' with isolation 'none' cannot do",
    ):
        _plan({"kind": "partition", "target": N2, "for_s": 1}, isolation="none")


def test_fault_specs_report_their_duration_and_target() -> None:
    spec: FaultSpec = PartitionSpec(target={"node": "n2", "peer": "n1"}, for_s=7)
    assert spec.duration_s == 7 and spec.target_label() == "node n2 <-> n1"
    assert LinkFlapSpec(target=N2, count=3, down_s=1, up_s=2).duration_s == 9
