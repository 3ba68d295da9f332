"""Control-plane outage: the store host is paused (SIGSTOP) and resumed, by revert, twice,
when it already exited, and by ``faultdrill cleanup`` after the harness was SIGKILLed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faultdrill.admit import parse_plan
from faultdrill.errors import FaultError, PlanError
from faultdrill.events import EventSink
from faultdrill.faults.api import FaultContext, make_fault
from faultdrill.faults.control_plane import ControlPlaneOutageSpec
from faultdrill.host import procfs
from faultdrill.ledger import UNDOERS, Ledger
from faultdrill.plan import Resources
from faultdrill.platforms.api import Ability
from faultdrill.platforms.local.platform import LocalPlatform, describe_process
from tests.drillkit import demo_raw
from tests.round3kit import Harness


def _store(tmp_path: Path, pid: int, monkeypatch: pytest.MonkeyPatch) -> LocalPlatform:
    """The local platform (no job) whose control plane is one real process: the action
    under test is the platform's own pause, only what hosts the store is stood in for."""
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id="t-cp")
    platform = LocalPlatform(Resources(), tmp_path, ledger, EventSink(tmp_path / "events", "t"))

    def hosts() -> list[object]:
        rep = describe_process(pid, "n1")
        return [rep] if rep is not None else []

    monkeypatch.setattr(platform, "control_plane_processes", hosts)
    return platform


def _ctx(platform: LocalPlatform) -> FaultContext:
    return FaultContext(
        platform=platform, ledger=platform.ledger, sink=platform.sink, scenario_id="s"
    )


def _state(pid: int) -> str | None:
    for _ in range(50):  # a signal takes effect asynchronously
        state = procfs.proc_state(pid)
        if state in ("T", "t", "S", "R", None):
            return state
        time.sleep(0.01)
    return procfs.proc_state(pid)


def test_local_platform_declares_the_ability() -> None:
    assert Ability.CONTROL_PLANE_PAUSE in LocalPlatform.abilities_for(Resources())
    assert Ability.CONTROL_PLANE_STOP not in LocalPlatform.abilities_for(Resources())


def test_pause_and_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The run's processes carry its id (the undo resumes only a process of the run).
    env = {**os.environ, "FAULTDRILL_RUN_ID": "t-cp"}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        fault = make_fault(ControlPlaneOutageSpec(for_s=5))
        ctx = _ctx(_store(tmp_path, proc.pid, monkeypatch))
        facts = fault.inject(ctx)
        assert facts["pids"] == [proc.pid] and facts["command"] == f"kill -STOP {proc.pid}"
        time.sleep(0.1)
        assert _state(proc.pid) == "T"
        fault.revert(ctx)
        time.sleep(0.1)
        assert _state(proc.pid) in ("S", "R")
        fault.revert(ctx)  # twice is fine
        assert ctx.ledger.pending() == []
    finally:
        proc.kill()
        proc.wait()
    # undo of a process that is gone (or never paused) is a no-op
    UNDOERS["sigstop"]({"pid": proc.pid, "start_time": 1})


def test_no_control_plane_process_is_a_fault_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fault = make_fault(ControlPlaneOutageSpec(for_s=5))
    with pytest.raises(FaultError, match="no live process"):
        fault.inject(_ctx(_store(tmp_path, 2**22 + 7, monkeypatch)))


def test_restart_probe_must_fall_inside_the_outage() -> None:
    raw = demo_raw()
    raw["rounds"] = [
        {
            "round": 3,
            "scenarios": [
                {
                    "id": "cp",
                    "fault": {
                        "kind": "control-plane-outage",
                        "for_s": 2,
                        "restart_during": {"rank": 1, "after_s": 3},
                    },
                    "trigger": {"at_step": 5},
                }
            ],
        }
    ]
    raw["controls"] = []
    with pytest.raises(PlanError, match="must be less than for_s"):
        parse_plan(raw)


@pytest.mark.drill
def test_sigkill_harness_mid_outage_then_cleanup_resumes_the_store(tmp_path: Path) -> None:
    scenario = {
        "id": "cp-pause",
        "fault": {"kind": "control-plane-outage", "for_s": 120},
        "trigger": {"at_step": 3},
        "expected": {"resume": "no-restart"},
    }
    h = Harness(tmp_path, scenario, steps=400, step_sleep_s=0.1)
    try:
        facts = h.wait_injected()
        store = int(facts["pids"][0])
        assert _state(store) == "T", "precondition: the store host is paused"
        h.sigkill()
        assert _state(store) == "T", "precondition: the pause outlived the harness"
        text = h.cleanup()
        assert "undone" in text
        assert h.pids() == []
        assert not procfs.alive(store) or _state(store) != "T"
        assert list((h.state / "active").iterdir()) == []
    finally:
        h.close()


def _cut_plan(isolation: str) -> dict[str, object]:
    raw = demo_raw()
    raw["resources"]["isolation"] = isolation
    raw["resources"]["spares"] = 0 if isolation == "none" else raw["resources"]["spares"]
    raw["rounds"] = [
        {
            "round": 3,
            "scenarios": [
                {
                    "id": "cp-cut",
                    "fault": {"kind": "control-plane-outage", "mode": "cut", "for_s": 4},
                    "trigger": {"at_step": 5},
                }
            ],
        }
    ]
    raw["controls"] = []
    return raw


def test_cut_needs_network_namespaces() -> None:
    with pytest.raises(PlanError, match=r"set resources\.isolation: netns"):
        parse_plan(_cut_plan("none"))
    with pytest.raises(PlanError) as err:
        parse_plan(_cut_plan("none"))
    assert (
        "scenario cp-cut: fault 'control-plane-outage' needs ability control-plane-cut, which "
        "platform 'local' with isolation 'none' cannot do; set resources.isolation: netns"
    ) in str(err.value)
    assert parse_plan(_cut_plan("netns")).scenarios()[0].fault.mode == "cut"  # type: ignore[attr-defined]


def test_stop_and_restart_is_refused_on_the_local_platform() -> None:
    raw = _cut_plan("netns")
    raw["rounds"][0]["scenarios"][0]["fault"]["mode"] = "stop"  # type: ignore[index]
    with pytest.raises(PlanError) as err:
        parse_plan(raw)
    assert "needs ability control-plane-stop, which platform 'local'" in str(err.value)
    assert "cannot be stopped and restarted alone; use mode pause or cut" in str(err.value)


def _rules_in(ns: str) -> str:
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "iptables", "-w", "-S"], capture_output=True, text=True
    )
    return out.stdout


@pytest.mark.drill
@pytest.mark.root
def test_cut_restart_waits_for_the_store_and_leaves_no_rule(tmp_path: Path) -> None:
    """Cut the rendezvous store off the network for 6 s and kill a worker inside the cut:
    the restart can only rendezvous once the cut ends; the job then resumes from step 10."""
    scenario = {
        "id": "cp-cut",
        "fault": {
            "kind": "control-plane-outage",
            "mode": "cut",
            "for_s": 6,
            "restart_during": {"rank": 1, "after_s": 0.5},
        },
        "trigger": {"at_step": 12},
        "stop": {"max_no_progress_s": 40},
        "expected": {"job": "completes", "recovery": "automatic", "resume": "latest-valid"},
    }
    h = Harness(tmp_path, scenario)
    try:
        facts = h.wait_injected()
        ns = str(facts["dev"])[: -len(str(facts["node"]))] + "-" + str(facts["node"])
        assert str(facts["port"]) in _rules_in(ns), "precondition: the cut rules are in place"
        assert h.proc.wait(180) == 0
        assert (
            str(facts["port"]) not in _rules_in(ns) if Path(f"/run/netns/{ns}").exists() else True
        )
        events = [
            json.loads(line)
            for f in (h.work / "events").glob("*.jsonl")
            for line in f.read_text().splitlines()
            if line.strip()
        ]
        reverted = next(e["mono"] for e in events if e["kind"] == "reverted")
        probe = next(e["mono"] for e in events if e["kind"] == "restart_probe")
        rdzv = sorted(e["mono"] for e in events if e["kind"] == "rdzv_complete")
        counters = [e for e in events if e["kind"] == "rule_counters" and e.get("final")]
        assert probe < reverted
        # the restart's rendezvous completed only after the store was reachable again
        assert any(t > reverted for t in rdzv) and not any(probe < t < reverted for t in rdzv)
        assert sum(int(e["packets"]) for e in counters) > 0, "the cut dropped nothing"
        loads = [e for e in events if e["kind"] == "ckpt_load"]
        assert loads and all(e["id"] == "step-000010" and e["verified"] for e in loads)
        assert h.pids() == []
    finally:
        h.close()


@pytest.mark.drill
@pytest.mark.root
def test_sigkill_harness_mid_cut_then_cleanup_removes_the_rules(tmp_path: Path) -> None:
    scenario = {
        "id": "cp-cut",
        "fault": {"kind": "control-plane-outage", "mode": "cut", "for_s": 120},
        "trigger": {"at_step": 3},
        "expected": {"resume": "no-restart"},
    }
    h = Harness(tmp_path, scenario, steps=400, step_sleep_s=0.1)
    try:
        facts = h.wait_injected()
        ns = str(facts["dev"])[: -len(str(facts["node"]))] + "-" + str(facts["node"])
        assert str(facts["port"]) in _rules_in(ns), "precondition: the cut rules are in place"
        h.sigkill()
        assert str(facts["port"]) in _rules_in(ns), "precondition: the cut outlived the harness"
        assert "undone" in h.cleanup()
        assert h.pids() == []
        assert not Path(f"/run/netns/{ns}").exists()
        assert list((h.state / "active").iterdir()) == []
    finally:
        h.close()
