"""Real drills of every link and node fault on the namespace cluster, asserted on evidence.

One plan, one baseline, seven scenarios (reference workload, 30 steps, torchrun, gloo, 2
nodes + 2 spares, gloo timeout 5 s): round 1 loses, slows, flaps and partitions n2's link;
round 2 takes n2 down with spare n3 broken on purpose (its address removed: no route to the
rendezvous host), so the platform must reject n3 as an environment-preparation failure and
place n4; freezes n2 briefly; drains n2 (healthy spare n3 replaces it). The demo's own
``node-loss`` (n2 down, spare n3 replaces it) is the same fault as ``down``; it runs in the
demo itself.
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


def _plan_raw() -> dict[str, Any]:
    raw = netns_raw(spares=2, gloo_s=5)
    raw["task"]["workload"]["steps"] = 30
    raw["rounds"] = [
        {
            "round": 1,
            "name": "link faults",
            "continue_on_failure": True,
            "scenarios": [
                _scenario(
                    "loss",
                    {"kind": "link-loss", "target": N2, "percent": 30, "for_s": 3},
                    "no-restart",
                ),
                _scenario(
                    "slow",
                    {
                        "kind": "link-slow",
                        "target": N2,
                        "rate": "1mbit",
                        "queue_ms": 100,
                        "for_s": 3,
                    },
                    "no-restart",
                ),
                _scenario(
                    "flap",
                    {"kind": "link-flap", "target": N2, "count": 2, "down_s": 1, "up_s": 1},
                    "no-restart",
                ),
                _scenario(
                    "partition", {"kind": "partition", "target": N2, "for_s": 6}, "latest-valid"
                ),
            ],
        },
        {
            "round": 2,
            "name": "node faults",
            "continue_on_failure": True,
            "scenarios": [
                _scenario("down", {"kind": "node-down", "target": N2}, "latest-valid"),
                _scenario(
                    "freeze", {"kind": "node-freeze", "target": N2, "for_s": 2}, "no-restart"
                ),
                _scenario("drain", {"kind": "node-drain", "target": N2}, "latest-valid"),
            ],
        },
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


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunResult, dict[str, Any]]]:
    base = tmp_path_factory.mktemp("netns-drills")
    raw = _plan_raw()
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


@pytest.mark.parametrize("sid", ["loss", "slow", "flap"])
def test_short_link_faults_are_ridden_out_and_leave_no_rule(
    drill: tuple[RunResult, dict[str, Any]], sid: str
) -> None:
    result, report = drill
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


def test_short_freeze_is_a_stall_and_no_timeout_fires(
    drill: tuple[RunResult, dict[str, Any]],
) -> None:
    result, report = drill
    s = item(report, "freeze")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    f = finding(s, "expectation.timeout-fired")
    assert f["message"].startswith("no timeout fired") and f["data"]["timeout"] is None
    assert f["data"]["longest_stall_s"] >= 1.5
    tl = timeline(result, "freeze")
    states = [e.get("state") for e in tl.of("platform", "node_state") if e.get("node") == "n2"]
    assert states == ["frozen", "up"]


def test_drained_node_leaves_cleanly_and_is_excluded(
    drill: tuple[RunResult, dict[str, Any]],
) -> None:
    result, report = drill
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
    result, report = drill
    for ledger in sorted(result.run_dir.rglob("ledger.jsonl")):
        assert leftovers(ledger, report["task_id"]) == [], ledger
        assert all(r["reverted"] for r in ledger_records(ledger)), ledger
    assert procfs.pids_with_env("FAULTDRILL_TASK_ID", report["task_id"]) == []
    active = Path(os.environ.get("FAULTDRILL_STATE_DIR", "/nonexistent")) / "active"
    assert not active.exists() or list(active.iterdir()) == []
