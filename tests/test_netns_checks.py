"""The network/node checks and the network-track summary on tiny literal timelines: each
check has a healthy case and known-bad cases with their exact verdicts."""

from __future__ import annotations

from typing import Any

import pytest

from faultdrill.checks import Verdict
from faultdrill.checks.network import placement
from faultdrill.faults.network import LinkTarget, PartitionSpec
from faultdrill.faults.node import NodeDownSpec, NodeTarget
from faultdrill.i18n import translator
from faultdrill.plan import Scenario
from faultdrill.readings.network import network_summary
from faultdrill.report.blocks import to_markdown
from faultdrill.report.model import NetworkTrack
from faultdrill.report.parts.accounting import network_part
from tests.records import as_json
from tests.timelines import NEW, OLD, TL, Judge, baseline, restart

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL
PARTITION = PartitionSpec(target=LinkTarget(node="n1"), for_s=5)
NODE_DOWN = NodeDownSpec(target=NodeTarget(node="n1"))


def with_fault(judge: Judge, fault: Any) -> Judge:
    assert isinstance(judge.item, Scenario)
    return judge.replace(item=judge.item.model_copy(update={"fault": fault}))


def _on(tl: TL, pid: int, node: str) -> TL:
    """Move process ``pid`` (its run_start and sampler records) to ``node``."""
    tl.edit("probe", "run_start", lambda r: r["pid"] == pid, node=node)
    for kind in ("proc_seen", "proc_gone"):
        tl.edit("sampler", kind, lambda r: r["pid"] == pid, node=node)
    return tl


# --- expectation.timeout-fired ------------------------------------------------------------


def test_timeout_fired_names_the_gloo_timeout_before_the_restart(judge: Judge) -> None:
    tl = restart().platform(
        "timeout_fired", 5.8, node="n1", timeout="gloo", line="Timed out waiting 30000ms for recv"
    )
    v, msg = with_fault(judge, PARTITION).one("expectation.timeout-fired", tl)
    assert v == P
    assert msg.startswith("gloo collective timeout (30 s) fired on n1 at +0.30 s, then ")
    assert "worker_group_failed on n1 at +0.50 s" in msg


def test_timeout_fired_prefers_the_timeout_on_the_deciding_node(judge: Judge) -> None:
    tl = (
        restart()
        .platform("timeout_fired", 5.7, node="n1", timeout="gloo")
        .platform("timeout_fired", 5.9, node="n0", timeout="store-read")
    )
    found = with_fault(judge, PARTITION).run("expectation.timeout-fired", tl)
    assert [f.verdict for f in found] == [P]
    assert found[0].data["timeout"] == "gloo" and found[0].data["node"] == "n1"


def test_timeout_fired_keep_alive_names_the_dead_node(judge: Judge) -> None:
    tl = (
        restart()
        .platform("node", 0.0, node="n1", address="10.77.0.2")
        .platform(
            "dead_node", 5.9, node="n0", msg="Detected dead node '10.77.0.2_42_0', removing it"
        )
    )
    v, msg = with_fault(judge, PARTITION).one("expectation.timeout-fired", tl)
    assert v == P
    assert msg.startswith("rendezvous keep-alive (1 s x 3) fired on n0")
    assert "n1 declared dead" in msg


def test_timeout_fired_none_when_the_job_rides_the_fault_out(judge: Judge) -> None:
    tl = baseline().inject(3.5, fault="partition", target="node n1")
    v, msg = with_fault(judge, PARTITION).one("expectation.timeout-fired", tl)
    assert v == P
    assert (
        msg
        == "no timeout fired: the job rode out the fault without a restart; longest pause between steps 1.0 s"
    )


def test_timeout_fired_lost_peer_explains_a_restart_without_timeout(judge: Judge) -> None:
    tl = restart().platform("peer_error", 5.6, node="n0", line="Connection reset by peer")
    v, msg = with_fault(judge, PARTITION).one("expectation.timeout-fired", tl)
    assert v == P
    assert msg.startswith("no timeout fired: peer_error on n0 at +0.10 s ended the hang")


def test_timeout_fired_unexplained_decision_is_retest(judge: Judge) -> None:
    v, msg = with_fault(judge, PARTITION).one("expectation.timeout-fired", restart())
    assert v == R
    assert "no timeout, lost peer or platform event explains it" in msg


def test_timeout_fired_restart_without_any_decision_is_retest(judge: Judge) -> None:
    tl = restart().drop("platform", "worker_group_failed")
    v, msg = with_fault(judge, PARTITION).one("expectation.timeout-fired", tl)
    assert v == R
    assert msg.startswith("incarnation 1 started after the fault, but no timeout")


def test_timeout_fired_not_applicable_to_a_worker_kill(judge: Judge) -> None:
    assert judge.one("expectation.timeout-fired", restart()) == (
        P,
        "kill-worker is not a hang fault: not applicable",
    )


def test_timeout_fired_without_injection_is_retest(judge: Judge) -> None:
    v, _ = with_fault(judge, PARTITION).one("expectation.timeout-fired", baseline())
    assert v == R


# --- resources.lost-node-isolated ---------------------------------------------------------


def _moved_to_spare() -> TL:
    """restart(), but rank 1 of the new incarnation runs on spare n2 (n1 was lost)."""
    tl = restart()
    tl.add("platform", "spare_placed", 5.7, node="n2", replaces="n1")
    return _on(tl, NEW[1], "n2")


def test_lost_node_isolated_passes_and_says_where_the_job_resumed(judge: Judge) -> None:
    v, msg = with_fault(judge, NODE_DOWN).one("resources.lost-node-isolated", _moved_to_spare())
    assert v == P
    assert msg == (
        "every process of n1 gone within 5 s; n1 not used again; the job resumed on n0, n2 "
        "(spare n2 (replacing n1))"
    )


def test_lost_node_used_again_fails(judge: Judge) -> None:
    verdicts = with_fault(judge, NODE_DOWN).verdicts("resources.lost-node-isolated", restart())
    assert verdicts == [F, F]  # a process started on n1 again, and incarnation 1 includes it


def test_lost_node_process_outliving_the_fault_fails(judge: Judge) -> None:
    tl = _moved_to_spare().edit("sampler", "proc_gone", lambda r: r["pid"] == OLD[1], mono=12.0)
    v, msg = with_fault(judge, NODE_DOWN).one("resources.lost-node-isolated", tl)
    assert v == F
    assert msg.startswith(f"1 process(es) of lost node n1 not gone within 5 s: pid {OLD[1]}")


def test_lost_node_without_process_samples_is_retest(judge: Judge) -> None:
    tl = _moved_to_spare().drop("sampler")
    assert with_fault(judge, NODE_DOWN).verdicts("resources.lost-node-isolated", tl) == [R]


def test_lost_node_not_applicable_to_link_faults(judge: Judge) -> None:
    assert with_fault(judge, PARTITION).verdicts("resources.lost-node-isolated", restart()) == [P]


# --- expectation.spare-environment -----------------------------------------------------------


def test_spare_rejected_is_an_environment_preparation_retest(judge: Judge) -> None:
    tl = restart().platform(
        "spare_rejected",
        5.7,
        node="n2",
        replaces="n1",
        category="environment-preparation",
        precondition="route",
        detail="cannot reach the rendezvous host 10.77.0.1:29500: Network is unreachable",
    )
    found = judge.run("expectation.spare-environment", tl)
    assert [f.verdict for f in found] == [R]
    assert found[0].message.startswith(
        "environment preparation failure, not a scheduling failure: spare n2: route: cannot reach"
    )
    assert found[0].data == {"category": "environment-preparation", "nodes": ["n2"]}


def test_spare_placed_after_its_preconditions_passes(judge: Judge) -> None:
    v, msg = judge.one("expectation.spare-environment", _moved_to_spare())
    assert v == P and msg.startswith("spare n2 (replacing n1) passed its preconditions")


def test_no_spare_is_not_an_environment_failure(judge: Judge) -> None:
    tl = restart().platform("no_spare", 5.7, replaces="n1", category="scheduling", detail="none")
    assert judge.one("expectation.spare-environment", tl)[0] == P
    assert judge.one("expectation.spare-environment", baseline()) == (P, "no spare was needed")


# --- placement and the network track -------------------------------------------------------


def test_placement_before_and_after() -> None:
    where = as_json(placement(_moved_to_spare().build()))
    assert where is not None
    assert where["before"] == ["n0", "n1"] and where["resumed_on"] == ["n0", "n2"]
    assert where["spares_placed"] == [{"node": "n2", "replaces": "n1", "at_s": 0.2}]
    assert placement(baseline().build()) is None


def _net(tl: TL, t: float, node: str, rtt: float | None, rx: int, drop: int = 0) -> TL:
    peer = "n1" if node == "n0" else "n0"
    return tl.add(
        "net",
        "net_sample",
        t,
        node=node,
        rtt_ms={peer: rtt},
        rx_bytes=rx,
        tx_bytes=rx,
        rx_packets=rx // 100,
        tx_packets=rx // 100,
        rx_drop=drop,
        tx_drop=0,
    )


def test_network_summary_splits_before_during_after() -> None:
    tl = TL().add("net", "net_track_started", 0.0, hz=2.0, probe="UDP echo")
    tl.add("fault", "injected", 2.0, fault="link-loss", target="node n1", duration_s=2.0)
    tl.add("fault", "reverted", 4.0, fault="link-loss")
    for t, rtt, rx in [(1.0, 0.1, 1000), (1.5, 0.3, 2000), (2.5, None, 2500), (3.0, 5.0, 2600)]:
        _net(tl, t, "n1", rtt, rx, drop=1 if t == 3.0 else 0)
    _net(tl, 4.5, "n1", 0.2, 4000)
    tl.add("net", "rule_counters", 3.5, rule="fd-1", node="n1", rule_kind="iptables",
           chain="INPUT", packets=7, bytes=700, fault="link-loss", final=True)  # fmt: skip
    summ = as_json(network_summary(tl.build()))
    assert summ is not None
    assert summ["window"] == {"from": "fault injected", "to": "fault reverted", "seconds": 2.0}
    (n1,) = summ["nodes"]
    assert n1["rtt_before_ms"] == 0.2 and n1["rtt_during_ms"] == 5.0 and n1["rtt_after_ms"] == 0.2
    assert n1["lost_during"] == "1/2" and n1["lost_before"] == "0/2"
    assert n1["bytes_during"] == 2 * (2600 - 2000) and n1["drop_during"] == 1
    assert summ["rules"] == [
        {"rule": "fd-1", "node": "n1", "fault": "link-loss", "rule_kind": "iptables",
         "chain": "INPUT", "packets": 7, "bytes": 700}
    ]  # fmt: skip
    part = network_part(translator("en"), NetworkTrack.model_validate(summ))
    assert part is not None
    md = "\n".join(to_markdown([part]))
    assert "| n1 | 0.20 | 5.00 | 0.20 | 1/2 | 1.2 KiB | 12 | 1 |" in md
    assert "`fd-1` iptables INPUT on n1: 7 packets\n" in md  # no drop counter: not said


def test_samples_are_judged_by_when_they_measured_not_when_they_were_written() -> None:
    """A tick sends its probes, waits up to a period for answers, then writes its samples:
    one that probed before the injection is "before" though written after it, and one that
    probed after the undo began is "after" though written before the ``reverted`` event."""
    tl = TL().add("net", "net_track_started", 0.0, hz=2.0, probe="UDP echo")
    tl.add("fault", "injected", 2.0, fault="partition", target="node n1", duration_s=2.0)
    tl.add("fault", "reverted", 4.05, fault="partition", revert_started_mono=4.0)
    for written, probed, rtt in [(2.05, 1.96, 0.2), (3.0, 2.9, None), (4.04, 4.01, 0.3)]:
        _net(tl, written, "n1", rtt, 1000)
        tl.recs[-1]["probed_mono"] = probed
    summ = as_json(network_summary(tl.build()))
    assert summ is not None and summ["window"]["seconds"] == 2.0
    (n1,) = summ["nodes"]
    assert (n1["lost_before"], n1["lost_during"], n1["lost_after"]) == ("0/1", "1/1", "0/1")


@pytest.mark.parametrize("tl", [baseline(), restart()])
def test_no_network_track_no_summary(tl: TL) -> None:
    assert network_summary(tl.build()) is None
