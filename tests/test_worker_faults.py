"""The faults aimed at one rank's replica share one base (``faults.api.WorkerFault``): the
plan's target checked against the resources under the fault's own field name, and a
replica that exits between being picked and being hit said so, with the ledger entry kept
(recorded, never applied) so that cleanup sees it."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultdrill.errors import FaultError
from faultdrill.events import EventSink
from faultdrill.faults.api import FAULTS, FaultContext, WorkerFault, make_fault
from faultdrill.ledger import Ledger
from faultdrill.plan import Resources
from faultdrill.plan.faults import (
    HangWorkerSpec,
    KillWorkerSpec,
    OomWorkerSpec,
    SlowWorkerSpec,
    StaleCopySpec,
    WorkerTarget,
)
from faultdrill.platforms.fake import FakePlatform
from faultdrill.plugins import load
from tests.drillkit import demo_raw

load()

#: (spec, the fake platform's action that hits the replica, what the error says it missed)
GONE_BEFORE = [
    (KillWorkerSpec(kind="kill-worker", target=WorkerTarget(rank=1)), "signal_replica",
     "could be signalled"),
    (HangWorkerSpec(kind="hang-worker", target=WorkerTarget(rank=1), for_s=5), "hang_replica",
     "could be stopped"),
    (SlowWorkerSpec(kind="slow-worker", target=WorkerTarget(rank=1), cpu_percent=10, for_s=5),
     "throttle_replica", "could be throttled"),
    (OomWorkerSpec(kind="oom-worker", target=WorkerTarget(rank=1)), "oom_cap", "was capped"),
    (StaleCopySpec(kind="stale-copy", target=WorkerTarget(rank=1)), "replica_copy",
     "was copied"),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "action", "missed"), GONE_BEFORE, ids=lambda v: str(v)[:20])
def test_a_replica_gone_before_the_hit_is_named_and_its_entry_kept(
    tmp_path: Path, spec: object, action: str, missed: str
) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id="t-worker")
    sink = EventSink(tmp_path / "events", "t")
    platform = FakePlatform.scripted(fail={action: ProcessLookupError("gone")})
    res = Resources(platform="fake", nodes=2, spares=0)
    fault = make_fault(spec)  # type: ignore[arg-type]
    assert isinstance(fault, WorkerFault)
    with pytest.raises(FaultError) as caught:
        fault.inject(FaultContext(platform(res, tmp_path, ledger, sink), ledger, sink, "s"))
    assert str(caught.value) == f"worker pid -1001 exited before it {missed}"
    recorded = [e for e in ledger.entries.values() if e.data.get("action") == action]
    assert len(recorded) == 1 and not recorded[0].applied


def test_another_error_passes_unchanged(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id="t-worker")
    sink = EventSink(tmp_path / "events", "t")
    platform = FakePlatform.scripted(fail={"signal_replica": PermissionError("not yours")})
    res = Resources(platform="fake", nodes=2, spares=0)
    fault = make_fault(KillWorkerSpec(kind="kill-worker", target=WorkerTarget(rank=1)))
    with pytest.raises(FaultError, match=r"could not make .*not yours"):
        fault.inject(FaultContext(platform(res, tmp_path, ledger, sink), ledger, sink, "s"))


def test_every_worker_fault_checks_its_own_field_against_the_plan() -> None:
    """A rank past the world size is refused under the fault's kind and field name."""
    from faultdrill.admit import parse_plan

    plan = parse_plan(demo_raw())
    worker_kinds = {k: c for k, c in FAULTS.items() if issubclass(c, WorkerFault)}
    assert set(worker_kinds) >= {
        "kill-worker",
        "hang-worker",
        "slow-worker",
        "oom-worker",
        "stale-copy",
        "hide-checkpoints",
        "rollback-latest",
    }
    required = {"hang-worker": {"for_s": 5}, "slow-worker": {"for_s": 5, "cpu_percent": 10}}
    for kind, cls in worker_kinds.items():
        field = cls.worker_field
        raw = {"kind": kind, **required.get(kind, {})}
        spec = cls.spec_model.model_validate({**raw, field: {"rank": 999}})
        problem = cls.validate_against(spec, plan)
        assert problem is not None and problem.startswith(f"{kind} {field}"), (kind, problem)
        fine = cls.spec_model.model_validate({**raw, field: {"rank": 0}})
        assert cls.validate_against(fine, plan) is None, kind
