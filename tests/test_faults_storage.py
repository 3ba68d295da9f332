"""Storage outages for real (root): a read-only bind remount gives EROFS, a filled small
tmpfs gives ENOSPC, and every mount is undone: by revert, twice, without having been
applied, and by ``faultdrill cleanup`` after the harness was SIGKILLed mid-outage."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from faultdrill.events import EventSink
from faultdrill.faults.api import FaultContext, make_fault
from faultdrill.faults.storage import StorageOutageSpec, observe_pointer
from faultdrill.host.mounts import FILLER, is_mount_point, mounts_at
from faultdrill.ledger import UNDOERS, Ledger
from faultdrill.plan import Resources
from faultdrill.platforms.api import Ability
from faultdrill.platforms.local.platform import LocalPlatform
from tests.round3kit import Harness

root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")


def _ctx(tmp_path: Path, ckpt: Path) -> FaultContext:
    """The local platform without a job: its storage actions act on ``ckpt`` for real."""
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id=f"t-{os.getpid()}")
    sink = EventSink(tmp_path / "events", "t")
    return FaultContext(
        platform=LocalPlatform(Resources(), tmp_path, ledger, sink),
        ledger=ledger,
        sink=sink,
        scenario_id="s",
        ckpt_dir=ckpt,
        latest_file="latest",
    )


def _write(path: Path, size: int) -> int | None:
    """errno of writing ``size`` bytes to ``path`` (None: it worked)."""
    try:
        with open(path, "wb") as f:
            f.write(b"\1" * size)
    except OSError as exc:
        return exc.errno
    return None


def test_local_platform_declares_the_ability() -> None:
    have = LocalPlatform.abilities_for(Resources())
    assert {Ability.STORAGE_READ_ONLY, Ability.STORAGE_FULL, Ability.CHECKPOINT_FILES} <= have


@root
def test_an_outage_may_end_at_a_failed_save_and_a_plan_without_it_keeps_its_digest() -> None:
    plain = StorageOutageSpec(mode="full", for_s=1)
    assert not plain.ends_at_failed_save and "until_save_failed" not in plain.model_dump()
    ending = StorageOutageSpec(mode="read-only", for_s=5, until_save_failed=True)
    assert ending.ends_at_failed_save and ending.duration_s == 5  # for_s bounds it still
    assert ending.model_dump()["until_save_failed"] is True
    with pytest.raises(ValueError, match="until_save_failed"):
        StorageOutageSpec(mode="full", for_s=1, until_save_failed="soon")


def test_read_only_outage_gives_erofs_and_reverts(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "latest").write_text("step-000010\n")
    fault = make_fault(StorageOutageSpec(mode="read-only", for_s=5))
    ctx = _ctx(tmp_path, ckpt)
    try:
        facts = fault.inject(ctx)
        assert facts["write_error"] == os.strerror(errno.EROFS)
        assert _write(ckpt / "new", 10) == errno.EROFS
        assert (ckpt / "latest").read_text() == "step-000010\n"  # still readable
        assert "ro" in mounts_at(ckpt)[-1]["options"].split(",")
    finally:
        fault.revert(ctx)
    assert not is_mount_point(ckpt)
    assert _write(ckpt / "new", 10) is None
    fault.revert(ctx)  # twice is fine
    assert ctx.ledger.pending() == []
    seen = (tmp_path / "events" / "fault.jsonl").read_text()
    assert '"when":"start"' in seen and '"when":"end"' in seen


@root
def test_full_outage_gives_enospc_keeps_small_writes_and_copies_back(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    fault = make_fault(StorageOutageSpec(mode="full", for_s=5, fs_size_mb=4, leave_free_kb=64))
    ctx = _ctx(tmp_path, ckpt)
    try:
        prep = fault.prepare(ctx)
        assert prep["mode"] == "full" and mounts_at(ckpt)[-1]["fstype"] == "tmpfs"
        assert _write(ckpt / "before.bin", 400_000) is None
        facts = fault.inject(ctx)
        assert facts["free_bytes"] <= 64 * 1024
        assert _write(ckpt / "state.pt", 400_000) == errno.ENOSPC
        (ckpt / "state.pt").unlink()  # as a failed save cleans up after itself
        assert _write(ckpt / "latest", 12) is None  # a pointer still fits: the trap
        fault.revert(ctx)
        assert not (ckpt / FILLER).exists()
        assert _write(ckpt / "after.bin", 400_000) is None
    finally:
        fault.revert(ctx)
        ctx.ledger.revert_all()
    assert not is_mount_point(ckpt)
    # what the tmpfs held was copied into the directory underneath, filler excepted
    assert sorted(p.name for p in ckpt.iterdir()) == ["after.bin", "before.bin", "latest"]
    assert ctx.ledger.pending() == []


@root
def test_undo_of_a_mount_never_made_is_a_no_op(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    UNDOERS["ro-bind-mount"]({"path": str(ckpt), "mount_ids": []})
    UNDOERS["tmpfs-mount"]({"path": str(ckpt), "mount_ids": [], "keep_copy": str(tmp_path / "k")})
    UNDOERS["filler-file"]({"path": str(ckpt / FILLER)})
    assert not is_mount_point(ckpt)


def test_pointer_observation(tmp_path: Path) -> None:
    assert observe_pointer(tmp_path, "latest")["latest"] is None
    (tmp_path / "latest").write_text("step-000020\n")
    seen = observe_pointer(tmp_path, "latest")
    assert seen["latest"] == "step-000020" and seen["latest_verifies"] is False
    assert "missing directory" in seen["latest_problem"]


# --- the harness dies mid-outage ----------------------------------------------------------


@root
@pytest.mark.drill
@pytest.mark.parametrize("mode", ["read-only", "full"])
def test_sigkill_harness_mid_outage_then_cleanup_unmounts(tmp_path: Path, mode: str) -> None:
    scenario = {
        "id": f"storage-{mode}",
        "fault": {"kind": "storage-outage", "mode": mode, "for_s": 120},
        "trigger": {"at_step": 12},  # after the step-10 checkpoint
        "expected": {"resume": "no-restart"},
    }
    h = Harness(tmp_path, scenario, steps=400, step_sleep_s=0.1)
    ckpt = h.work / "ckpt"
    try:
        facts = h.wait_injected()
        assert facts["mode"] == mode
        assert is_mount_point(ckpt), "precondition: the outage is applied"
        h.sigkill()
        assert is_mount_point(ckpt), "precondition: the mount outlived the harness"
        text = h.cleanup()
        assert "undone" in text
        assert not is_mount_point(ckpt), mounts_at(ckpt)
        assert not any(m["fstype"] == "tmpfs" for m in mounts_at(ckpt))
        assert _write(ckpt / "writable", 10) is None
        assert not (ckpt / FILLER).exists()
        assert h.pids() == []
        # the checkpoints are still there (for "full": copied back from the tmpfs)
        assert (ckpt / "latest").read_text().strip() == "step-000010"
        assert (ckpt / "step-000010" / "state.pt").is_file()
    finally:
        h.close()
        while is_mount_point(ckpt):  # never leave a mount behind, even when failing
            os.system(f"umount -l {ckpt}")
