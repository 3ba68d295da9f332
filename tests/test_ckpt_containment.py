"""The checkpoint directory, and every checkpoint a pointer names, stay inside the item's own
directory: a plan cannot point ``checkpoint.dir`` at a host path, the fault context refuses a
checkpoint dir that resolves outside the item (a symlink), and a pointer naming ``../x`` or
``/etc`` never leads a fault (damage, observation) outside the checkpoint directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from faultdrill.admit import parse_plan
from faultdrill.errors import FaultError, PlanError
from faultdrill.events import EventSink
from faultdrill.faults.api import FaultContext, make_fault
from faultdrill.faults.checkpoint import CorruptCheckpointSpec, damage_checkpoint
from faultdrill.faults.storage import observe_pointer
from faultdrill.ledger import Ledger
from faultdrill.plan import Resources
from faultdrill.platforms.fake import FakePlatform
from tests.drillkit import demo_raw


def _ctx(tmp_path: Path, ckpt: Path, item: Path | None) -> FaultContext:
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id="t-contain")
    sink = EventSink(tmp_path / "events", "t")
    return FaultContext(
        platform=FakePlatform(Resources(platform="fake"), tmp_path, ledger, sink),
        ledger=ledger,
        sink=sink,
        scenario_id="s",
        ckpt_dir=ckpt,
        latest_file="latest",
        item_dir=item,
    )


def _victim(tmp_path: Path) -> Path:
    """A file outside the checkpoint dir that a fault must never touch."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "state.pt").write_bytes(b"precious" * 64)
    (outside / "manifest.json").write_text("{}")
    return outside


# --- the plan --------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["/etc", "../../..", "ckpt/../../x", "/", ".", ""])
def test_plan_refuses_a_checkpoint_dir_outside_the_item(bad: str) -> None:
    raw = demo_raw()
    raw["checkpoint"]["dir"] = bad
    with pytest.raises(PlanError) as err:
        parse_plan(raw, source="plan.yaml")
    text = str(err.value)
    assert "plan.yaml" in text and "checkpoint.dir" in text
    assert "relative path" in text and "'ckpt'" in text  # the rule and the fix


@pytest.mark.parametrize("good", ["ckpt", "state/ckpt", "./ckpt"])
def test_plan_accepts_relative_checkpoint_dirs(good: str) -> None:
    raw = demo_raw()
    raw["checkpoint"]["dir"] = good
    assert parse_plan(raw).checkpoint.dir == good


@pytest.mark.parametrize("bad", ["../latest", "/etc/passwd", "a/latest", ".."])
def test_plan_refuses_a_pointer_file_that_is_a_path(bad: str) -> None:
    raw = demo_raw()
    raw["checkpoint"]["latest_file"] = bad
    with pytest.raises(PlanError, match=r"checkpoint\.latest_file: must be a file name"):
        parse_plan(raw, source="plan.yaml")


# --- the fault context -------------------------------------------------------------------


def test_context_refuses_a_checkpoint_dir_that_resolves_outside_the_item(tmp_path: Path) -> None:
    item = tmp_path / "item"
    item.mkdir()
    outside = _victim(tmp_path)
    (item / "ckpt").symlink_to(outside)
    with pytest.raises(FaultError, match="not inside the item's directory"):
        _ctx(tmp_path, item / "ckpt", item)
    with pytest.raises(FaultError, match="not inside the item's directory"):
        _ctx(tmp_path, item / ".." / "outside", item)
    with pytest.raises(FaultError, match="not inside the item's directory"):
        _ctx(tmp_path, item, item)  # the item dir itself holds the events and the ledger


def test_context_resolves_a_checkpoint_dir_inside_the_item(tmp_path: Path) -> None:
    item = tmp_path / "item"
    ctx = _ctx(tmp_path, item / "a" / ".." / "ckpt", item)
    assert ctx.ckpt_dir == (item / "ckpt").resolve()


def test_context_rechecks_before_acting(tmp_path: Path) -> None:
    """The job may swap the directory for a symlink after the context was made."""
    item = tmp_path / "item"
    (item / "ckpt").mkdir(parents=True)
    ctx = _ctx(tmp_path, item / "ckpt", item)
    (item / "ckpt").rmdir()
    (item / "ckpt").symlink_to(_victim(tmp_path))
    with pytest.raises(FaultError, match="not inside"):
        ctx.checked_ckpt_dir()


# --- what the pointer names --------------------------------------------------------------


@pytest.mark.parametrize("cid", ["../outside", "..", "/abs/path", "a/b", ""])
@pytest.mark.parametrize(
    "damage", ["truncate", "flip-bytes", "remove-manifest", "latest-to-missing"]
)
def test_damage_refuses_an_id_that_is_not_one_name(tmp_path: Path, cid: str, damage: str) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    outside = _victim(tmp_path)
    if cid == "/abs/path":
        cid = str(outside)
    with pytest.raises(FaultError):
        damage_checkpoint(ckpt, cid, damage, flip_count=4, evidence_dir=tmp_path / "faults")  # type: ignore[arg-type]
    assert (outside / "state.pt").read_bytes() == b"precious" * 64
    assert (outside / "manifest.json").exists()


def test_damage_refuses_a_checkpoint_that_is_a_symlink(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    outside = _victim(tmp_path)
    (ckpt / "step-000010").symlink_to(outside)
    with pytest.raises(FaultError, match="symbolic link"):
        damage_checkpoint(ckpt, "step-000010", "truncate", flip_count=1, evidence_dir=tmp_path)
    assert (outside / "state.pt").read_bytes() == b"precious" * 64


def test_damage_ignores_a_manifest_naming_a_file_elsewhere(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    (ckpt / "step-000010").mkdir(parents=True)
    outside = _victim(tmp_path)
    (ckpt / "step-000010" / "state.pt").write_bytes(b"x" * 100)
    (ckpt / "step-000010" / "manifest.json").write_text(
        json.dumps({"file": "../../outside/state.pt"})
    )
    facts = damage_checkpoint(ckpt, "step-000010", "truncate", flip_count=1, evidence_dir=tmp_path)
    assert facts["path"] == str(ckpt / "step-000010" / "state.pt")
    assert (outside / "state.pt").read_bytes() == b"precious" * 64


def test_corrupt_fault_refuses_a_pointer_leading_outside(tmp_path: Path) -> None:
    item = tmp_path / "item"
    ckpt = item / "ckpt"
    ckpt.mkdir(parents=True)
    outside = _victim(tmp_path)
    (ckpt / "latest").write_text(os.path.relpath(outside, ckpt) + "\n")  # ../../outside
    ctx = _ctx(tmp_path, ckpt, item)
    fault = make_fault(CorruptCheckpointSpec(damage="truncate", restart=None))
    with pytest.raises(FaultError, match="not a checkpoint id"):
        fault.inject(ctx)
    assert (outside / "state.pt").read_bytes() == b"precious" * 64
    assert ctx.ledger.entries == {}  # refused before anything was recorded or done


def test_pointer_observation_does_not_follow_a_path(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    outside = _victim(tmp_path)
    (ckpt / "latest").write_text(f"{outside}\n")
    seen = observe_pointer(ckpt, "latest")
    assert seen["latest"] == str(outside)
    assert seen["latest_verifies"] is False
    assert "not a checkpoint id" in seen["latest_problem"]
