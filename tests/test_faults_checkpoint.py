"""Checkpoint corruption on real checkpoints of the reference workload's store: every damage
is refused by the verified loader, which falls back to the previous checkpoint and says
why, while the known-bad unverified loader takes a bit-flipped checkpoint silently."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import torch

from faultdrill.admit import parse_plan
from faultdrill.errors import FaultError
from faultdrill.events import EventSink
from faultdrill.faults.api import FaultContext, make_fault
from faultdrill.faults.checkpoint import CorruptCheckpointSpec, damage_checkpoint
from faultdrill.ledger import Ledger
from faultdrill.plan import Resources
from faultdrill.platforms.fake import FakePlatform
from faultdrill.workloads import _ckpt
from tests.drillkit import demo_raw


def _save(ckpt_dir: Path, step: int) -> None:
    torch.manual_seed(step)
    state = {
        "model": {"w": torch.randn(64, 64), "b": torch.randn(64)},
        "step": step,
        "data_position": step * 8,
    }
    _ckpt.save(
        str(ckpt_dir),
        step=step,
        state=state,
        data_position=step * 8,
        world_size=2,
        written_by={"rank": 0, "pid": 1, "restart_count": 0},
        keep=3,
    )


@pytest.fixture()
def two(tmp_path: Path) -> Path:
    """A checkpoint dir with step-000010 and step-000020 (latest)."""
    ckpt = tmp_path / "ckpt"
    _save(ckpt, 10)
    _save(ckpt, 20)
    assert _ckpt.read_latest(str(ckpt)) == "step-000020"
    return ckpt


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("flip-bytes", "sha256"),
        ("truncate", "bytes, manifest says"),
        ("remove-manifest", "missing manifest.json"),
        ("latest-to-missing", "missing directory"),
    ],
)
def test_verified_loader_refuses_each_damage_and_falls_back(
    two: Path, damage: Any, reason: str
) -> None:
    facts = damage_checkpoint(two, "step-000020", damage, flip_count=8, evidence_dir=two.parent)
    assert facts["ckpt_id"] == "step-000020" and facts["damage"] == damage
    result = _ckpt.load(str(two))
    assert result.loaded is not None and result.loaded.id == "step-000010"
    assert result.loaded.verified is True
    assert result.rejected[0]["id"] == "step-000020"
    assert reason in result.rejected[0]["reason"]


def test_flipped_bits_load_silently_without_verification(two: Path) -> None:
    before = torch.load(two / "step-000020" / "state.pt", weights_only=True)
    facts = damage_checkpoint(two, "step-000020", "flip-bytes", flip_count=8, evidence_dir=two)
    assert facts["flipped"] == 8 and facts["sha256_after"] != facts["sha256_before"]
    assert facts["member"].endswith(tuple("0123456789"))  # a tensor's storage, not the pickle
    bad = _ckpt.load_unverified(str(two))  # the known-bad loader takes it
    assert bad.loaded is not None and bad.loaded.id == "step-000020"
    assert bad.loaded.verified is False
    changed = [
        k for k in ("w", "b") if not torch.equal(before["model"][k], bad.loaded.state["model"][k])
    ]
    assert changed, "the flipped bits must land in tensor data"


def test_latest_to_missing_keeps_the_directory_as_evidence(two: Path) -> None:
    facts = damage_checkpoint(
        two, "step-000020", "latest-to-missing", flip_count=1, evidence_dir=two.parent / "faults"
    )
    assert not (two / "step-000020").exists()
    assert (Path(facts["moved_to"]) / "state.pt").is_file()
    assert _ckpt.read_latest(str(two)) == "step-000020"


def test_remove_manifest_needs_a_manifest(two: Path) -> None:
    (two / "step-000020" / "manifest.json").unlink()
    with pytest.raises(FaultError, match=r"no manifest\.json"):
        damage_checkpoint(two, "step-000020", "remove-manifest", flip_count=1, evidence_dir=two)


def test_fault_follows_latest_records_ledger_and_names_the_checkpoint(two: Path) -> None:
    spec = CorruptCheckpointSpec(damage="truncate", restart=None)
    fault = make_fault(spec)
    ledger = Ledger(two.parent / "ledger.jsonl", run_id="t-ckpt")
    sink = EventSink(two.parent / "events", "t")
    ctx = FaultContext(
        platform=FakePlatform(Resources(platform="fake"), two.parent, ledger, sink),
        ledger=ledger,
        sink=sink,
        scenario_id="s",
        ckpt_dir=two,
        latest_file="latest",
    )
    facts = fault.inject(ctx)
    assert facts["ckpt_id"] == "step-000020" and facts["bytes_after"] < facts["bytes_before"]
    assert "signal_replica" not in ctx.platform.asked_names()  # type: ignore[attr-defined]
    assert ledger.pending() == []  # damage is evidence: nothing left to undo
    fault.revert(ctx)  # safe, and a no-op
    assert (two / "step-000020" / "state.pt").stat().st_size == facts["bytes_after"]


def test_plan_validation_refuses_a_restart_rank_that_does_not_exist() -> None:
    raw = demo_raw()
    raw["rounds"] = [
        {
            "round": 3,
            "scenarios": [
                {
                    "id": "c",
                    "fault": {
                        "kind": "corrupt-checkpoint",
                        "damage": "truncate",
                        "restart": {"rank": 5},
                    },
                    "trigger": {"after_checkpoint": 2},
                }
            ],
        }
    ]
    raw["controls"] = []
    from faultdrill.errors import PlanError

    with pytest.raises(PlanError, match="restart rank 5 does not exist"):
        parse_plan(raw)


@pytest.mark.drill
def test_sigkill_harness_after_the_damage_then_cleanup_leaves_nothing(tmp_path: Path) -> None:
    from tests.round3kit import Harness

    scenario = {
        "id": "ckpt-flip",
        "fault": {"kind": "corrupt-checkpoint", "damage": "flip-bytes"},
        "trigger": {"after_checkpoint": 1},
    }
    h = Harness(tmp_path, scenario, steps=400, step_sleep_s=0.1)
    try:
        facts = h.wait_injected()
        assert facts["ckpt_id"] == "step-000010" and facts["restart_signal"] == "SIGKILL"
        h.sigkill()
        h.cleanup()
        assert h.pids() == []
        assert list((h.state / "active").iterdir()) == []
        # the damage stays, as evidence
        state = h.work / "ckpt" / "step-000010" / "state.pt"
        assert hashlib.sha256(state.read_bytes()).hexdigest() == facts["sha256_after"]
    finally:
        h.close()
