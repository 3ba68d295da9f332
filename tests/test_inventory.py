"""The checkpoint inventory on real checkpoint files: what verifies now, who wrote and loaded
each one, who refused it and why, which fault damaged it, and the unreported leftovers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from faultdrill.faults.checkpoint import damage_checkpoint
from faultdrill.readings.inventory import inventory_summary, take_inventory, verify_dir
from faultdrill.records import CheckpointRecord
from faultdrill.timeline import Timeline
from faultdrill.workloads import _ckpt
from tests.records import as_json
from tests.timelines import NEW, OLD, TL


def _save(ckpt: Path, step: int, tl: TL, t: float) -> None:
    torch.manual_seed(step)
    state = {"model": {"w": torch.randn(32, 32)}, "step": step, "data_position": step * 8}
    saved = _ckpt.save(
        str(ckpt),
        step=step,
        state=state,
        data_position=step * 8,
        world_size=2,
        written_by={"rank": 0, "pid": OLD[0], "restart_count": 0},
        keep=3,
    )
    tl.add(
        "probe",
        "ckpt_save",
        t,
        rank=0,
        pid=OLD[0],
        id=saved.id,
        step=step,
        path=saved.path,
        sha256=saved.sha256,
        bytes=saved.size,
        data_position=step * 8,
    )


def _run(ckpt: Path) -> TL:
    """Incarnation 0 saves steps 10 and 20; incarnation 1 refuses step 20, loads step 10."""
    tl = TL()
    for rank, pid in enumerate(OLD):
        tl.run_start(rank, pid, "a:1", 0.0).scratch(rank, pid, 0.1)
    _save(ckpt, 10, tl, 1.0)
    _save(ckpt, 20, tl, 2.0)
    tl.inject(2.5, fault="corrupt-checkpoint", ckpt_id="step-000020", damage="flip-bytes")
    for rank, pid in enumerate(NEW):
        tl.run_start(rank, pid, "a:2", 4.0)
        tl.load(rank, pid, "step-000010", 10, 4.1, rejected=[{"id": "step-000020", "reason": "x"}])
    return tl


def _by_id(records: list[CheckpointRecord]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in (x.to_json() for x in records)}


def test_healthy_checkpoints_verify_with_writer_and_loaders(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    records, pointer = take_inventory(_run(ckpt).build(), ckpt, "latest", keep=3)
    assert pointer.to_json() == {"file": "latest", "target": "step-000020", "problem": None}
    ten = _by_id(records)["step-000010"]
    assert ten["verifies"] is True and ten["manifest_verifies"] is True
    assert ten["written_by"] == {"rank": 0, "pid": OLD[0], "inc": 0}
    assert ten["loaded_by"] == [1] and ten["rejected_by"] == []
    assert ten["size"] == (ckpt / "step-000010" / "state.pt").stat().st_size
    twenty = _by_id(records)["step-000020"]
    assert twenty["latest"] is True and twenty["rejected_by"] == [{"inc": 1, "reason": "x"}]
    assert twenty["damaged_by"] == "corrupt-checkpoint (flip-bytes)"


def test_damaged_checkpoint_does_not_verify(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    tl = _run(ckpt)
    damage_checkpoint(ckpt, "step-000020", "flip-bytes", flip_count=4, evidence_dir=tmp_path)
    rec = _by_id(take_inventory(tl.build(), ckpt, "latest", keep=3)[0])["step-000020"]
    assert rec["verifies"] is False
    assert rec["reason"] == "sha256 differs from the one recorded at save"


def test_checkpoint_without_its_manifest_does_not_verify(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    tl = _run(ckpt)
    damage_checkpoint(ckpt, "step-000020", "remove-manifest", flip_count=1, evidence_dir=tmp_path)
    rec = _by_id(take_inventory(tl.build(), ckpt, "latest", keep=3)[0])["step-000020"]
    assert rec["verifies"] is False and "no manifest.json" in rec["reason"]


def test_moved_away_checkpoint_is_missing_not_pruned(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    tl = _run(ckpt)
    damage_checkpoint(ckpt, "step-000020", "latest-to-missing", flip_count=1, evidence_dir=tmp_path)
    rec = _by_id(take_inventory(tl.build(), ckpt, "latest", keep=1)[0])["step-000020"]
    assert rec["state"] == "missing" and rec["verifies"] is False


def test_half_written_checkpoint_no_save_reported_is_listed(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    tl = _run(ckpt)
    # What publish-before-durable leaves when the disk fills: a manifest, a short state.pt,
    # and the pointer already moved.
    half = ckpt / "step-000030"
    half.mkdir()
    (half / "manifest.json").write_text(
        json.dumps({"id": "step-000030", "step": 30, "file": "state.pt", "bytes": 4096})
    )
    (half / "state.pt").write_bytes(b"\0" * 100)
    (ckpt / "latest").write_text("step-000030\n")
    records, pointer = take_inventory(tl.build(), ckpt, "latest", keep=3)
    rec = _by_id(records)["step-000030"]
    assert rec["state"] == "unreported" and rec["verifies"] is False and rec["latest"]
    assert "100 bytes, manifest.json says 4096" in rec["reason"]
    assert pointer.problem == "latest names 'step-000030', which no save reported"


def test_verify_dir_without_manifest_is_unknown(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "state.pt").write_bytes(b"x")
    assert verify_dir(tmp_path / "c")[0] is None
    assert verify_dir(tmp_path / "nope") == (False, "nope: missing directory")


def test_summary_comes_from_recorded_events_only(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    tl = _run(ckpt)
    records, pointer = take_inventory(tl.build(), ckpt, "latest", keep=3)
    tl.harness("ckpt_latest", 9.0, **pointer.to_json())
    for rec in records:
        tl.harness("ckpt_inventory", 9.0, **rec.to_json())
    tl.add("probe", "ckpt_save_failed", 3.0, rank=0, pid=OLD[0], step=30, error="E", errno=28)
    tl.add("fault", "storage_observed", 3.1, when="end", latest="step-000020",
           latest_verifies=True, latest_problem=None)  # fmt: skip
    summary = as_json(inventory_summary(Timeline.from_records(tl.records())))
    assert summary["taken"] and summary["latest"]["target"] == "step-000020"
    assert [c["id"] for c in summary["checkpoints"]] == ["step-000010", "step-000020"]
    assert "mono" not in summary["checkpoints"][0]
    assert summary["failed_saves"][0]["step"] == 30 and summary["failed_saves"][0]["errno"] == 28
    assert summary["pointer_observed"] == [
        {"when": "end", "latest": "step-000020", "verifies": True, "problem": None}
    ]
