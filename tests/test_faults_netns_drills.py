"""Real drills of every link and node fault on the namespace cluster, asserted on evidence.

Two plans (reference workload, 30 steps, torchrun, gloo, 2 nodes + 2 spares, gloo timeout
5 s), each with its own baseline:

* the default run's (:func:`drill`): one drill of each family: n2's link loses packets and
  is partitioned; n2 goes down with spare n3 broken on purpose (its address removed: no
  route to the rendezvous host), so the platform must reject n3 as an
  environment-preparation failure and place n4;
* the slow set's (:func:`drill_more`): the other kinds of the same families, each with real
  namespace tests of its own in the default run (tests/test_faults_network.py,
  tests/test_faults_node.py): n2's link slowed and flapped; n2 frozen briefly; n2 drained
  (healthy spare n3 replaces it).

The demo's own ``node-loss`` (n2 down, spare n3 replaces it) is the same fault as ``down``;
it runs in the demo itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faultdrill.admit import load_plan
from faultdrill.engine.run import run_plan
from faultdrill.host import procfs
from faultdrill.host.linux import ns_run
from faultdrill.judge.evaluate import RunResult
from faultdrill.platforms.local.netns import NetnsPlatform
from faultdrill.timeline import Timeline
from tests.drillkit import finding, item
from tests.test_netns_kit import (
    kill_task,
    ledger_records,
    leftovers,
    needs_netns,
    netns_raw,
    write_plan,
)

pytestmark = [pytest.mark.drill, pytest.mark.root, needs_netns]

N2 = {"node": "n2"}


def _scenario(sid: str, fault: dict[str, Any], resume: str) -> dict[str, Any]:
    return {
        "id": sid,
        "fault": fault,
        "trigger": {"at_step": 12},
        "expected": {"job": "completes", "recovery": "automatic", "resume": resume},
    }


#: The default run's drills: one of each family (link, node).
DEFAULT: dict[str, dict[str, Any]] = {
    "loss": {"kind": "link-loss", "target": N2, "percent": 30, "for_s": 3},
    "partition": {"kind": "partition", "target": N2, "for_s": 6},
    "down": {"kind": "node-down", "target": N2},
}
#: The slow set's: the other kinds of the same families.
MORE: dict[str, dict[str, Any]] = {
    "slow": {"kind": "link-slow", "target": N2, "rate": "1mbit", "queue_ms": 100, "for_s": 3},
    "flap": {"kind": "link-flap", "target": N2, "count": 2, "down_s": 1, "up_s": 1},
    "freeze": {"kind": "node-freeze", "target": N2, "for_s": 2},
    "drain": {"kind": "node-drain", "target": N2},
}
RESUME = {
    "loss": "no-restart",
    "slow": "no-restart",
    "flap": "no-restart",
    "partition": "latest-valid",
    "down": "latest-valid",
    "freeze": "no-restart",
    "drain": "latest-valid",
}
LINK = ("loss", "slow", "flap", "partition")


def _plan_raw(faults: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The netns plan with ``faults`` (id -> fault): link faults in round 1, node faults in
    round 2."""
    raw = netns_raw(spares=2, gloo_s=5)
    raw["task"]["workload"]["steps"] = 30
    link = [_scenario(sid, f, RESUME[sid]) for sid, f in faults.items() if sid in LINK]
    node = [_scenario(sid, f, RESUME[sid]) for sid, f in faults.items() if sid not in LINK]
    raw["rounds"] = [
        {"round": n, "name": name, "continue_on_failure": True, "scenarios": scenarios}
        for n, name, scenarios in ((1, "link faults", link), (2, "node faults", node))
        if scenarios
    ]
    return raw


def _break_spare_n3(self: NetnsPlatform) -> None:
    """In scenario ``down`` only: remove spare n3's address after bring-up (a spare without
    a route to the rendezvous host, as a misconfigured machine would be)."""
    _orig_prepare(self)
    if "-down-" in self.ledger.run_id:
        ln = self.link("n3")
        ns_run(ln.ns, ["ip", "addr", "flush", "dev", ln.dev])


_orig_prepare = NetnsPlatform._prepare


def _drill(base: Path, raw: dict[str, Any]) -> Iterator[tuple[RunResult, dict[str, Any]]]:
    path = write_plan(base, raw)
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(base / "state")
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(NetnsPlatform, "_prepare", _break_spare_n3)
            result = run_plan(load_plan(path), base / "run", source=path, controls=False)
        yield result, json.loads((base / "run" / "report.json").read_text())
    finally:
        kill_task(raw["task"]["id"])
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunResult, dict[str, Any]]]:
    """The default run's plan: link loss, partition, node down (with a broken spare)."""
    yield from _drill(tmp_path_factory.mktemp("netns-drills"), _plan_raw(DEFAULT))


@pytest.fixture(scope="module")
def drill_more(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunResult, dict[str, Any]]]:
    """The slow set's plan: link slowed and flapped, node frozen and drained."""
    yield from _drill(tmp_path_factory.mktemp("netns-drills-more"), _plan_raw(MORE))


def verdicts(s: dict[str, Any]) -> dict[str, str]:
    return {k: v["verdict"] for k, v in s["evidence"].items()}


def timeline(result: RunResult, sid: str) -> Timeline:
    return Timeline.load(result.run_dir / "scenarios" / sid / "events")


ALL_PASS = {"progress": "pass", "resources": "pass", "results": "pass"}


def test_baseline_on_the_cluster_passes_and_records_the_timeouts(
    drill: tuple[RunResult, dict[str, Any]],
) -> None:
    _, report = drill
    base = report["baseline"]
    assert base["verdict"] == "pass"
    res = base["dossier"]["resources"]
    assert res["isolation"] == "netns" and res["spares"] == 2
    assert res["timeouts"]["gloo_s"] == 5 and res["timeouts"]["rdzv_join_s"] == 30


def test_short_link_loss_is_ridden_out_and_leaves_no_rule(
    drill: tuple[RunResult, dict[str, Any]],
) -> None:
    assert_short_link_fault_ridden_out(*drill, "loss")


@pytest.mark.slow
@pytest.mark.parametrize("sid", ["slow", "flap"])
def test_short_link_faults_are_ridden_out_and_leave_no_rule(
    drill_more: tuple[RunResult, dict[str, Any]], sid: str
) -> None:
    assert_short_link_fault_ridden_out(*drill_more, sid)


def assert_short_link_fault_ridden_out(result: RunResult, report: dict[str, Any], sid: str) -> None:
    """``sid``, a short link fault, passed without a restart or a timeout, the network
    track saw it, and none of its rules is left."""
    s = item(report, sid)
    assert s["verdict"] == "pass", json.dumps(s, indent=1)[:4000]
    assert verdicts(s) == ALL_PASS
    assert finding(s, "expectation.restart")["message"].startswith("no restart")
    assert finding(s, "expectation.timeout-fired")["message"].startswith("no timeout fired")
    net = s["network"]
    assert net["hz"] >= 2 and net["samples"] > 0
    n2 = next(n for n in net["nodes"] if n["node"] == "n2")
    work = result.run_dir / "scenarios" / sid
    assert leftovers(work / "ledger.jsonl", report["task_id"]) == []
    tl = timeline(result, sid)
    if sid == "loss":
        # The rules really dropped packets, and the RTT probes saw it.
        rules = net["rules"]
        assert {r["chain"] for r in rules} == {"INPUT", "OUTPUT"}
        assert sum(r["packets"] for r in rules) > 0
        assert int(n2["lost_during"].split("/")[0]) > 0
    elif sid == "slow":
        assert {r["rule_kind"] for r in net["rules"]} == {"tbf"}
        assert any((r.get("packets") or 0) > 0 for r in net["rules"])
    else:
        downs, ups = tl.of("fault", "link_down"), tl.of("fault", "link_up")
        assert len(downs) == 2 and len(ups) == 2
        assert all(u.mono > d.mono for d, u in zip(downs, ups, strict=True))
    # Per-node counters and round trips on the job's clock, before and after the fault.
    assert n2["rtt_before_ms"] is not None and n2["rtt_after_ms"] is not None
    md = (result.run_dir / "report.md").read_text()
    assert "**Network track**" in md


def test_partition_names_the_timeout_that_fired(drill: tuple[RunResult, dict[str, Any]]) -> None:
    result, report = drill
    s = item(report, "partition")
    f = finding(s, "expectation.timeout-fired")
    assert f["verdict"] == "pass"
    assert f["data"]["timeout"] == "gloo", f
    assert "gloo collective timeout (5 s) fired" in f["message"]
    assert 4.0 <= f["data"]["after_s"] <= 9.0
    # The job came back from the last valid checkpoint, at full size.
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    assert s["questions"]["resumed_from"]["checkpoint"] == "step-000010"
    assert "gloo collective timeout" in (result.run_dir / "report.md").read_text()
    lost = next(n for n in s["network"]["nodes"] if n["node"] == "n2")
    assert lost["lost_during"].split("/")[0] == lost["lost_during"].split("/")[1]


@pytest.mark.slow
def test_short_freeze_is_a_stall_and_no_timeout_fires(
    drill_more: tuple[RunResult, dict[str, Any]],
) -> None:
    result, report = drill_more
    s = item(report, "freeze")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    f = finding(s, "expectation.timeout-fired")
    assert f["message"].startswith("no timeout fired") and f["data"]["timeout"] is None
    assert f["data"]["longest_stall_s"] >= 1.5
    tl = timeline(result, "freeze")
    states = [e.get("state") for e in tl.of("platform", "node_state") if e.get("node") == "n2"]
    assert states == ["frozen", "up"]


@pytest.mark.slow
def test_drained_node_leaves_cleanly_and_is_excluded(
    drill_more: tuple[RunResult, dict[str, Any]],
) -> None:
    result, report = drill_more
    s = item(report, "drain")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    tl = timeline(result, "drain")
    t0 = tl.of("fault", "injected")[0].mono
    assert tl.first("platform", "agent_signalled", after=t0 - 1) is not None
    new = tl.incarnation_after(t0)
    assert new is not None and "n2" not in new.nodes and new.nodes == ["n1", "n3"]
    assert finding(s, "resources.lost-node-isolated")["verdict"] == "pass"
    # A healthy spare takes the drained node's place; the job continues at full size.
    assert verdicts(s) == ALL_PASS and s["recovery_class"] == "automatic"
    where = s["placement"]
    assert where["before"] == ["n1", "n2"] and where["resumed_on"] == ["n1", "n3"]
    assert [p["node"] for p in where["spares_placed"]] == ["n3"]
    assert finding(s, "expectation.spare-environment")["verdict"] == "pass"
    assert "bitwise" in finding(s, "results.loss-matches-baseline")["message"]
    assert "resumed on n1, n3" in (result.run_dir / "report.md").read_text()


def test_node_down_isolates_the_node_rejects_the_broken_spare_and_continues(
    drill: tuple[RunResult, dict[str, Any]],
) -> None:
    result, report = drill
    s = item(report, "down")
    # The lost node: every process gone within 5 s, nothing started on it again.
    tl = timeline(result, "down")
    t0 = tl.of("fault", "injected")[0].mono
    n2 = [p for p in tl.procs if p.node == "n2"]
    assert n2 and all(p.gone_mono is not None and p.gone_mono - t0 < 5 for p in n2)
    assert not [p for p in n2 if p.seen_mono > t0]
    assert finding(s, "resources.lost-node-isolated")["verdict"] == "pass"
    assert s["questions"]["worker_lost_by"] == "node_lost on n2"
    # Spare n3 fails a precondition: an environment-preparation failure, not scheduling.
    f = finding(s, "expectation.spare-environment")
    assert f["verdict"] == "retest"
    assert f["data"]["category"] == "environment-preparation" and f["data"]["nodes"] == ["n3"]
    assert "not a scheduling failure" in f["message"] and "route" in f["message"]
    where = s["placement"]
    assert where["spares_rejected"][0]["precondition"] == "route"
    assert [p["node"] for p in where["spares_placed"]] == ["n4"]
    # The job continued from the last valid checkpoint on n1 and spare n4, at full size.
    assert where["before"] == ["n1", "n2"] and where["resumed_on"] == ["n1", "n4"]
    assert s["questions"]["resumed_from"]["checkpoint"] == "step-000010"
    assert s["evidence"]["progress"]["verdict"] == "pass"
    assert s["evidence"]["results"]["verdict"] == "pass"
    assert "bitwise" in finding(s, "results.loss-matches-baseline")["message"]
    assert s["verdict"] == "retest"  # only because of the spare's environment
    md = (result.run_dir / "report.md").read_text()
    assert "resumed on n1, n4" in md and "environment preparation" in md


def test_nothing_of_any_drill_is_left(drill: tuple[RunResult, dict[str, Any]]) -> None:
    assert_nothing_left(*drill)


@pytest.mark.slow
def test_nothing_of_the_slow_sets_drills_is_left(
    drill_more: tuple[RunResult, dict[str, Any]],
) -> None:
    assert_nothing_left(*drill_more)


def assert_nothing_left(result: RunResult, report: dict[str, Any]) -> None:
    for ledger in sorted(result.run_dir.rglob("ledger.jsonl")):
        assert leftovers(ledger, report["task_id"]) == [], ledger
        assert all(r["reverted"] for r in ledger_records(ledger)), ledger
    assert procfs.pids_with_env("FAULTDRILL_TASK_ID", report["task_id"]) == []
    active = Path(os.environ.get("FAULTDRILL_STATE_DIR", "/nonexistent")) / "active"
    assert not active.exists() or list(active.iterdir()) == []
