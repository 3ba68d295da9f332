"""For every link and node fault: SIGKILL the harness while the fault is active, run
``faultdrill cleanup``, and nothing of the drill remains (namespaces, veths, bridge,
iptables rules, qdiscs, links left down, frozen groups, processes).

The job is a tiny stdlib worker under real torchrun agents, so each case takes seconds.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from faultdrill.host import procfs
from faultdrill.host.linux import ns_run
from tests.test_netns_kit import (
    cleanup,
    kill_task,
    ledger_records,
    leftovers,
    needs_netns,
    start_harness,
    tiny_raw,
    wait_injected,
    write_plan,
)

pytestmark = [pytest.mark.drill, pytest.mark.root, needs_netns]


def _active(kind: str, recs: list[dict[str, Any]]) -> None:
    """The fault is really in place now (asserted before the harness is killed)."""
    by_kind = [r for r in recs if not r["reverted"]]
    if kind in ("link-loss", "partition"):
        rules = [r for r in by_kind if r["kind"] == "iptables-rule"]
        assert len(rules) == 2
        for r in rules:
            d = r["data"]
            assert (
                ns_run(
                    d["ns"], ["iptables", "-w", "-C", d["chain"], *d["rule"]], check=False
                ).returncode
                == 0
            )
    elif kind == "link-slow":
        qd = [r for r in by_kind if r["kind"] == "tc-qdisc"]
        assert len(qd) == 2
        shown = ns_run(qd[0]["data"]["ns"], ["tc", "qdisc", "show", "dev", qd[0]["data"]["dev"]])
        assert shown.returncode == 0
    elif kind in ("link-flap", "node-down"):
        down = [r for r in by_kind if r["kind"] == "link-down"]
        assert down, "the link should be down"
    elif kind == "node-freeze":
        fr = [r for r in by_kind if r["kind"] == "freeze"]
        assert procfs.Cgroup(Path(fr[0]["data"]["path"])).state() == "FROZEN"
    elif kind == "node-drain":
        assert any(r["kind"] == "signal" for r in recs)


FAULTS: list[dict[str, Any]] = [
    {"kind": "link-loss", "target": {"node": "n2"}, "percent": 50, "for_s": 300},
    {"kind": "link-slow", "target": {"node": "n2"}, "rate": "512kbit", "for_s": 300},
    {"kind": "link-flap", "target": {"node": "n2"}, "count": 100, "down_s": 3, "up_s": 1},
    {"kind": "partition", "target": {"node": "n2", "peer": "n1"}, "for_s": 300},
    {"kind": "node-down", "target": {"node": "n2"}},
    {"kind": "node-freeze", "target": {"node": "n2"}, "for_s": 300},
    {"kind": "node-drain", "target": {"node": "n2"}},
]


@pytest.mark.parametrize("fault", FAULTS, ids=[f["kind"] for f in FAULTS])
def test_sigkill_while_fault_active_then_cleanup_leaves_nothing(
    tmp_path: Path, fault: dict[str, Any]
) -> None:
    raw = tiny_raw(tmp_path, fault)
    task = raw["task"]["id"]
    state, out = tmp_path / "state", tmp_path / "run"
    proc = start_harness(write_plan(tmp_path, raw), out, state)
    work = out / "scenarios" / "sc"
    try:
        wait_injected(work, proc)
        recs = ledger_records(work / "ledger.jsonl")
        _active(fault["kind"], recs)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        # What makes this test mean something: the drill outlived its harness.
        assert procfs.pids_with_env("FAULTDRILL_TASK_ID", task), "job should be orphaned"
        assert leftovers(work / "ledger.jsonl", task), "the fault's traces should remain"
        text = cleanup(state)
        assert "undone" in text
        assert leftovers(work / "ledger.jsonl", task) == []
        assert list((state / "active").iterdir()) == []
        kinds = {r["kind"] for r in ledger_records(work / "ledger.jsonl")}
        assert {"netns", "netns-link", "cgroup"} <= kinds
    finally:
        if proc.poll() is None:
            proc.kill()
        if (state / "active").is_dir() and list((state / "active").iterdir()):
            cleanup(state)
        kill_task(task)
