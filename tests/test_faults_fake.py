"""Every fault through the shipped fake platform: which actions it asks for, every change
recorded in the ledger before it is applied, revert undoing each change once however often
it runs, revert when nothing was injected, a failing action, and the plan validator's
refusal of a fault the platform cannot do (naming platform, fault and fix)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from faultdrill.admit import parse_plan
from faultdrill.errors import FaultError, PlanError
from faultdrill.events import EventSink
from faultdrill.faults.api import FAULTS, Fault, FaultContext, FaultSpec, make_fault
from faultdrill.faults.checkpoint import CorruptCheckpointSpec
from faultdrill.faults.control_plane import ControlPlaneOutageSpec
from faultdrill.faults.harness import HideCheckpointsSpec, RollbackLatestSpec, StaleCopySpec
from faultdrill.faults.memory import OomWorkerSpec
from faultdrill.faults.network import LinkFlapSpec, LinkLossSpec, LinkSlowSpec, PartitionSpec
from faultdrill.faults.node import NodeDownSpec, NodeDrainSpec, NodeFreezeSpec
from faultdrill.faults.process import HangWorkerSpec, KillWorkerSpec
from faultdrill.faults.storage import StorageOutageSpec, StorageSlowSpec
from faultdrill.faults.straggler import SlowWorkerSpec
from faultdrill.ledger import Ledger
from faultdrill.plan import Resources
from faultdrill.plan.faults import DataOutageSpec
from faultdrill.platforms import PLATFORMS
from faultdrill.platforms.api import Ability, Change
from faultdrill.platforms.fake import FakePlatform
from tests.drillkit import demo_raw

N2: dict[str, Any] = {"node": "n2"}

#: (spec, the actions it asks for in ``prepare`` and ``inject``, in order)
CASES: list[tuple[FaultSpec, list[str]]] = [
    (KillWorkerSpec(target={"rank": 1}), ["rank_replica", "signal_replica"]),
    (KillWorkerSpec(target=N2, signal="SIGTERM", grace_s=30), ["rank_replica", "signal_replica"]),
    (
        SlowWorkerSpec(target={"rank": 1}, cpu_percent=20, for_s=1),
        ["rank_replica", "throttle_replica"],
    ),
    (HangWorkerSpec(target={"rank": 1}, for_s=5), ["rank_replica", "hang_replica"]),
    (HangWorkerSpec(target=N2, for_s=0.5), ["rank_replica", "hang_replica"]),
    (OomWorkerSpec(target={"rank": 1}), ["rank_replica", "oom_cap"]),
    (LinkLossSpec(target={"node": "n2", "peer": "n1"}, percent=5, for_s=1), ["link_loss"]),
    (LinkSlowSpec(target=N2, rate="1mbit", for_s=1), ["link_slow"]),
    (LinkFlapSpec(target=N2, count=1, down_s=30, up_s=1), ["link_down"]),
    (PartitionSpec(target={"node": "n2", "peer": "n1"}, for_s=1), ["link_cut"]),
    (NodeDownSpec(target=N2), ["node_down"]),
    (NodeFreezeSpec(target=N2, for_s=1), ["node_freeze"]),
    (NodeDrainSpec(target=N2), ["node_drain"]),
    (ControlPlaneOutageSpec(for_s=1), ["control_plane_pause"]),
    (ControlPlaneOutageSpec(mode="cut", for_s=1), ["control_plane_cut"]),
    (ControlPlaneOutageSpec(mode="stop", for_s=1), ["control_plane_stop"]),
    (StorageOutageSpec(mode="read-only", for_s=1), ["storage_read_only"]),
    (StorageOutageSpec(mode="full", for_s=1), ["storage_prepare", "storage_full"]),
    (
        StorageOutageSpec(mode="unreachable", server="error", for_s=1),
        ["storage_prepare", "storage_unreachable"],
    ),
    (StorageSlowSpec(latency_ms=200, for_s=1), ["storage_prepare", "storage_slow"]),
    (DataOutageSpec(mode="error", for_s=1), ["storage_prepare", "storage_unreachable"]),
    (CorruptCheckpointSpec(damage="truncate"), ["rank_replica", "signal_replica"]),
    (RollbackLatestSpec(), ["rank_replica", "signal_replica"]),
    (HideCheckpointsSpec(), ["rank_replica", "signal_replica"]),
    (StaleCopySpec(), ["rank_replica", "replica_copy", "signal_replica"]),
]


def _id(case: tuple[FaultSpec, list[str]]) -> str:
    spec = case[0]
    return f"{spec.kind}-{getattr(spec, 'mode', '') or getattr(spec, 'signal', '')}".strip("-")


def test_every_fault_kind_has_a_case() -> None:
    assert {spec.kind for spec, _ in CASES} == set(FAULTS)


def _fake(tmp_path: Path, platform: type[FakePlatform] = FakePlatform) -> FaultContext:
    """A fault context on a fake platform (2 nodes, 1 spare), with a checkpoint directory
    holding two checkpoints, the newer of which ``latest`` names."""
    item = tmp_path / "item"
    ckpt = item / "ckpt"
    (ckpt / "step-000005").mkdir(parents=True)
    (ckpt / "step-000010").mkdir(parents=True)
    (ckpt / "step-000010" / "state.pt").write_bytes(b"x" * 64)
    (ckpt / "latest").write_text("step-000010\n")
    (item / "data").mkdir()
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id="t-fake")
    sink = EventSink(tmp_path / "events", "t")
    res = Resources(platform="fake", nodes=2, spares=1)
    return FaultContext(
        platform=platform(res, item, ledger, sink),
        ledger=ledger,
        sink=sink,
        scenario_id="s",
        ckpt_dir=ckpt,
        item_dir=item,
        data_dir=item / "data",
    )


def _platform(ctx: FaultContext) -> FakePlatform:
    assert isinstance(ctx.platform, FakePlatform)
    return ctx.platform


def _actions(platform: FakePlatform) -> list[str]:
    return [n for n in platform.asked_names() if n != "storage_release"]


@pytest.mark.parametrize(("spec", "asked"), CASES, ids=[_id(c) for c in CASES])
def test_each_fault_asks_the_platform_records_first_and_reverts_once(
    tmp_path: Path, spec: FaultSpec, asked: list[str]
) -> None:
    ctx = _fake(tmp_path)
    platform = _platform(ctx)
    fault = make_fault(spec)
    fault.prepare(ctx)
    facts = fault.inject(ctx)
    assert _actions(platform) == asked
    assert platform.changes, "the fault changed nothing"
    assert all(c.recorded_first and c.applied for c in platform.changes)
    commands = [c.args for c in platform.changes]
    assert facts["command"] and all(isinstance(a, dict) for a in commands)
    fault.revert(ctx)
    fault.revert(ctx)
    prepared = [c for c in platform.changes if c.action == "storage_prepare"]
    for change in platform.changes:
        # what prepare put in place stays until the end of the item; all else undone once
        assert change.undone == (0 if change in prepared else 1), change
    assert [e.kind for e in ctx.ledger.pending()] == ["fake-change"] * len(prepared)
    assert ctx.ledger.revert_all() == []  # the end of the item
    assert all(c.undone == 1 for c in platform.changes)


@pytest.mark.parametrize(("spec", "asked"), CASES, ids=[_id(c) for c in CASES])
def test_revert_without_inject_asks_and_records_nothing(
    tmp_path: Path, spec: FaultSpec, asked: list[str]
) -> None:
    ctx = _fake(tmp_path)
    make_fault(spec).revert(ctx)
    assert _platform(ctx).asked == [] and ctx.ledger.entries == {}


def test_sigterm_is_followed_by_a_recorded_sigkill_after_the_grace(tmp_path: Path) -> None:
    ctx = _fake(tmp_path)
    platform = _platform(ctx)
    make_fault(KillWorkerSpec(target={"rank": 1}, signal="SIGTERM", grace_s=0.1)).inject(ctx)
    deadline = time.monotonic() + 5
    while not (len(platform.changes) == 2 and platform.changes[-1].undone):
        assert time.monotonic() < deadline, "no SIGKILL followed"
        time.sleep(0.02)
    signals = [c.args["signal"] for c in platform.changes]
    assert signals == ["SIGTERM", "SIGKILL"]
    assert all(c.recorded_first for c in platform.changes)
    entries = list(ctx.ledger.entries.values())
    assert [e.data.get("escalation") for e in entries] == [None, True]
    assert ctx.ledger.pending() == []  # a signal cannot be taken back: closed at once


def test_a_restart_during_the_outage_kills_the_rank(tmp_path: Path) -> None:
    ctx = _fake(tmp_path)
    platform = _platform(ctx)
    spec = ControlPlaneOutageSpec(for_s=5, restart_during={"rank": 1, "after_s": 0})
    fault = make_fault(spec)
    facts = fault.inject(ctx)
    assert facts["control_plane"] == "the fake control plane"
    deadline = time.monotonic() + 5
    while not any(c.action == "signal_replica" and c.undone for c in platform.changes):
        assert time.monotonic() < deadline, "the restart probe never killed"
        time.sleep(0.02)
    fault.revert(ctx)
    assert platform.asked_names()[:3] == ["control_plane_pause", "rank_replica", "signal_replica"]


def test_a_failing_action_leaves_its_entry_recorded_and_revert_undoes_it(
    tmp_path: Path,
) -> None:
    fake = FakePlatform.scripted(fail={"node_freeze": OSError("freezer busy")})
    ctx = _fake(tmp_path, fake)
    fault = make_fault(NodeFreezeSpec(target=N2, for_s=1))
    with pytest.raises(FaultError, match=r"node-freeze: could not make .*freezer busy"):
        fault.inject(ctx)
    [entry] = ctx.ledger.pending()
    assert entry.kind == "fake-change" and not entry.applied
    fault.revert(ctx)
    [change] = _platform(ctx).changes
    assert change.recorded_first and not change.applied and change.undone == 1
    assert ctx.ledger.pending() == []


def test_the_flap_goes_down_and_up_count_times(tmp_path: Path) -> None:
    ctx = _fake(tmp_path)
    platform = _platform(ctx)
    fault = make_fault(LinkFlapSpec(target=N2, count=3, down_s=0.05, up_s=0.05))
    fault.inject(ctx)
    deadline = time.monotonic() + 5
    while sum(c.undone for c in platform.changes) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    fault.revert(ctx)
    assert platform.asked_names() == ["link_down"] * 3
    assert [c.undone for c in platform.changes] == [1, 1, 1]
    kinds = [e["kind"] for e in _events(tmp_path)]
    assert kinds == ["link_down", "link_up"] * 3


def _events(tmp_path: Path) -> list[dict[str, Any]]:
    import json

    path = tmp_path / "events" / "fault.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_storage_outage_reads_the_pointer_where_the_platform_says(tmp_path: Path) -> None:
    ctx = _fake(tmp_path)
    fault = make_fault(StorageOutageSpec(mode="read-only", for_s=1))
    facts = fault.inject(ctx)
    assert facts["latest_before"] == "step-000010"
    fault.revert(ctx)
    seen = [e for e in _events(tmp_path) if e["kind"] == "storage_observed"]
    assert [e["when"] for e in seen] == ["start", "end"]
    assert _platform(ctx).asked_names()[-1] == "storage_release"


def test_a_platform_without_the_actions_is_a_fault_error(tmp_path: Path) -> None:
    ctx = _fake(tmp_path)

    class Bare:
        name = "bare"

    ctx.platform = Bare()  # type: ignore[assignment]
    with pytest.raises(FaultError, match="platform 'bare' cannot do node-drain"):
        make_fault(NodeDrainSpec(target=N2)).inject(ctx)


# --- plan validation --------------------------------------------------------------------


def _plan_with(fault: dict[str, Any]) -> dict[str, Any]:
    raw = demo_raw()
    raw["resources"].update(platform="fake", isolation="none", spares=0)
    raw["rounds"] = [
        {"round": 1, "scenarios": [{"id": "drain", "fault": fault, "trigger": {"at_step": 3}}]}
    ]
    raw["controls"] = []
    return raw


def test_the_fake_is_selectable_and_can_do_every_fault() -> None:
    plan = parse_plan(_plan_with({"kind": "node-drain", "target": N2}))
    assert plan.resources.platform == "fake"
    assert PLATFORMS["fake"].abilities_for(plan.resources) == frozenset(Ability)


def test_a_fault_the_platform_cannot_do_is_refused_naming_platform_fault_and_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakePlatform.scripted(abilities=set(Ability) - {Ability.NODE_DRAIN})
    monkeypatch.setitem(PLATFORMS, "fake", fake)
    with pytest.raises(PlanError) as err:
        parse_plan(_plan_with({"kind": "node-drain", "target": N2}), source="plan.yaml")
    assert (
        "scenario drain: fault 'node-drain' needs ability node-drain, which platform 'fake' "
        "with isolation 'none' cannot do; the fake platform was not given it"
    ) in str(err.value)
    assert "plan.yaml" in str(err.value)


def test_a_mode_asks_for_its_own_ability() -> None:
    def needs(spec: FaultSpec) -> frozenset[Ability]:
        return FAULTS[spec.kind].requires_for(spec)

    assert needs(StorageOutageSpec(mode="full", for_s=1)) == {
        Ability.STORAGE_FULL,
        Ability.CHECKPOINT_FILES,
    }
    assert needs(ControlPlaneOutageSpec(mode="cut", for_s=2)) == {Ability.CONTROL_PLANE_CUT}
    probe = ControlPlaneOutageSpec(for_s=2, restart_during={"rank": 0, "after_s": 1})
    assert needs(probe) == {Ability.CONTROL_PLANE_PAUSE, Ability.SIGNAL_RANK}
    assert needs(CorruptCheckpointSpec(damage="truncate", restart=None)) == {
        Ability.CHECKPOINT_FILES
    }


# --- the change itself ------------------------------------------------------------------


def test_change_steps_run_around_the_apply_in_order() -> None:
    seen: list[str] = []

    def apply(note: Any) -> dict[str, Any]:
        seen.append("apply")
        return {"a": 1}

    change = Change("fake-change", {}, "label", "cmd", apply)
    wrapped = (
        change.preceded_by(lambda: seen.append("before"))
        .followed_by(lambda: seen.append("after"))
        .with_facts(port=9)
    )
    assert wrapped.apply(lambda **_: None) == {"port": 9, "a": 1}
    assert seen == ["before", "apply", "after"]
    assert isinstance(make_fault(NodeDrainSpec(target=N2)), Fault)


def test_no_fault_module_imports_a_concrete_platform() -> None:
    """Faults know the seam (``faultdrill.platforms.api``), never a platform."""
    import ast

    import faultdrill.faults

    found = []
    for path in Path(faultdrill.faults.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            found += [
                f"{path.name}: {n}"
                for n in names
                if n.startswith("faultdrill.platforms")
                and not n.startswith("faultdrill.platforms.api")
            ]
    assert found == []
