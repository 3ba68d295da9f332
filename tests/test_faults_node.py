"""Node faults on a real namespace cluster: the processes of a node (in its cgroup) are
frozen and thawed, or killed with its link cut; and a stop condition that fires while a
node is frozen aborts the scenario, reverts the fault and names the condition."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from faultdrill.admit import load_plan, parse_plan
from faultdrill.engine.item import execute_item
from faultdrill.errors import FaultError, PlanError
from faultdrill.events import read_jsonl
from faultdrill.faults.api import make_fault
from faultdrill.faults.node import NodeDownSpec, NodeDrainSpec, NodeFreezeSpec
from faultdrill.host import procfs
from faultdrill.host.linux import ns_run
from faultdrill.judge.evaluate import evaluate_item
from faultdrill.platforms.local.netns import NetnsPlatform
from tests.test_netns_kit import (
    ctx_of,
    kill_task,
    ledger_records,
    leftovers,
    needs_netns,
    netns_raw,
    tiny_raw,
    write_plan,
)

N2: dict[str, Any] = {"node": "n2"}


def sleepers(platform: NetnsPlatform, node: str, n: int = 2) -> list[subprocess.Popen[bytes]]:
    """Processes of ``node``: in its cgroup (joined before exec) and its namespace."""
    group = platform.cgroup(node)
    assert group is not None
    procs_file = group.path / "cgroup.procs"
    out = []
    for _ in range(n):
        out.append(
            subprocess.Popen(
                [
                    *("/bin/sh", "-c", f'echo $$ > {procs_file} && exec "$@"', "sh"),
                    *platform.launch_prefix(node),
                    *("sleep", "300"),
                ],
            )
        )
    for _ in range(100):
        if {p.pid for p in out} <= set(group.pids()):
            break
        time.sleep(0.02)
    return out


@pytest.mark.root
@needs_netns
def test_node_freeze_stops_every_process_then_thaws(cluster: NetnsPlatform) -> None:
    procs = sleepers(cluster, "n2")
    ctx = ctx_of(cluster)
    try:
        fault = make_fault(NodeFreezeSpec(target=N2, for_s=5))
        facts = fault.inject(ctx)
        group = cluster.cgroup("n2")
        assert group is not None and group.state() == "FROZEN"
        assert set(facts["frozen"]) == {p.pid for p in procs}
        assert cluster.nodes()[1].state == "frozen"
        assert cluster.cgroup("n1").state() == "THAWED"  # type: ignore[union-attr]
        fault.revert(ctx)
        fault.revert(ctx)
        assert group.state() == "THAWED"
        assert all(procfs.proc_state(p.pid) in ("S", "R") for p in procs)
        states = [
            e["state"]
            for e in read_jsonl(cluster.work_dir / "events" / "platform.jsonl")
            if e["kind"] == "node_state"
        ]
        assert states == ["frozen", "up"]
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.mark.root
@needs_netns
def test_node_down_cuts_the_link_then_kills_every_process(cluster: NetnsPlatform) -> None:
    procs = sleepers(cluster, "n2")
    ctx = ctx_of(cluster)
    fault = make_fault(NodeDownSpec(target=N2))
    facts = fault.inject(ctx)
    assert sorted(facts["killed"]) == sorted(p.pid for p in procs)
    assert all(p.wait(5) == -9 for p in procs)
    ln = cluster.link("n2")
    assert "state DOWN" in ns_run(ln.ns, ["ip", "link", "show", "dev", ln.dev], check=False).stdout
    assert cluster.state["n2"] == "down"
    kinds = [r["kind"] for r in ledger_records(cluster.ledger.path)]
    assert kinds.index("link-down") < kinds.index("node-kill")  # cut first, then kill
    fault.revert(ctx)
    assert (
        "state DOWN" not in ns_run(ln.ns, ["ip", "link", "show", "dev", ln.dev], check=False).stdout
    )


@pytest.mark.root
@needs_netns
def test_node_drain_needs_a_running_agent(cluster: NetnsPlatform) -> None:
    with pytest.raises(FaultError, match="node n2 runs no agent"):
        make_fault(NodeDrainSpec(target=N2)).inject(ctx_of(cluster))


@pytest.mark.parametrize(
    ("fault", "isolation", "message"),
    [
        ({"kind": "node-down", "target": {"node": "n3"}}, "netns", "spares cannot be targeted"),
        ({"kind": "node-freeze", "target": N2, "for_s": 0}, "netns", "greater than 0"),
        (
            {"kind": "node-freeze", "target": N2, "for_s": 3},
            "none",
            "scenario x: fault 'node-freeze' needs ability node-freeze, which platform 'local' "
            "with isolation 'none' cannot do; set resources.isolation: netns (as root)",
        ),
        ({"kind": "node-drain", "target": {"node": "x"}}, "netns", "should match pattern"),
    ],
)
def test_validator_refuses_bad_node_faults(
    fault: dict[str, Any], isolation: str, message: str
) -> None:
    raw = netns_raw(spares=1 if isolation == "netns" else 0)  # spares need netns
    raw["resources"]["isolation"] = isolation
    raw["rounds"] = [
        {"round": 1, "scenarios": [{"id": "x", "fault": fault, "trigger": {"at_step": 2}}]}
    ]
    with pytest.raises(PlanError) as err:
        parse_plan(raw, source="plan.yaml")
    assert message in str(err.value)


@pytest.mark.drill
@pytest.mark.root
@needs_netns
def test_stop_condition_aborts_reverts_the_freeze_and_is_named(tmp_path: Path) -> None:
    raw = tiny_raw(tmp_path, {"kind": "node-freeze", "target": N2, "for_s": 300})
    raw["stop"] = {"max_wall_s": 8, "max_no_progress_s": 60}
    plan = load_plan(write_plan(tmp_path, raw))
    out = tmp_path / "run"
    try:
        work = execute_item(plan, "scenario", plan.scenarios()[0], out)
        harness = list(read_jsonl(work / "events" / "harness.jsonl"))
        stop = [e for e in harness if e["kind"] == "stop_condition"]
        assert [e["condition"] for e in stop] == ["max_wall_s"]
        assert harness[-1]["kind"] == "item_end" and harness[-1]["outcome"] == "stopped: max_wall_s"
        # The freeze was reverted, everything else too, nothing is left.
        recs = ledger_records(work / "ledger.jsonl")
        assert any(r["kind"] == "freeze" for r in recs) and all(r["reverted"] for r in recs)
        assert leftovers(work / "ledger.jsonl", raw["task"]["id"]) == []
        res = evaluate_item(plan, "scenario", plan.scenarios()[0], work, None)
        # The outcome expectations are retest, not fail: an aborted drill proves nothing.
        # (Progress evidence is not asserted: the tiny worker's ranks do not synchronise.)
        assert res.evidence["expectation"].verdict.value == "retest"
        assert {
            f.check for f in res.evidence["expectation"].findings if f.verdict.value == "retest"
        } >= {
            "expectation.no-stop-condition",
            "expectation.job-outcome",
            "expectation.recovery-class",
        }
        msgs = [
            f.message
            for f in res.evidence["expectation"].findings
            if f.check == "expectation.no-stop-condition"
        ]
        assert msgs and "stop condition 'max_wall_s' fired" in msgs[0]
        assert "every fault reverted" in msgs[0]
        # The scenario itself is retest, naming the condition, whatever its findings say
        # (they stay visible with their own verdicts), and it did not recover within it.
        assert res.verdict.value == "retest"
        assert res.aborted is not None and res.aborted.startswith("stop condition 'max_wall_s'")
        assert res.to_item().to_json()["aborted"] == res.aborted
        assert res.recovery.value == "unrecoverable"
        assert "not determined within the stop conditions" in res.recovery_why
        assert "max_wall_s" in res.recovery_why
        # The harness stopped the job itself: whether it releases resources is not judged.
        released = [
            f for f in res.evidence["resources"].findings if f.check == "resources.released-at-end"
        ]
        assert [f.verdict.value for f in released] == ["retest"]
    finally:
        kill_task(raw["task"]["id"])
