"""Undo acts only on what this run provably made. Real mounts in a tmp dir (root): a storage
entry recorded before mounting, whose harness died before or right after the mount, never
unmounts a mount that is not ours (nor moves its files); a namespace whose inode is not the
recorded one is left alone. And the escalation SIGKILL of a worker is in the ledger."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from faultdrill.errors import FaultError
from faultdrill.events import EventSink
from faultdrill.faults.process import escalate
from faultdrill.host import procfs
from faultdrill.host.linux import netns_exists, ns_inode
from faultdrill.host.mounts import bind_entry, mounts_at, tmpfs_entry
from faultdrill.host.owned import net_prefix
from faultdrill.ledger import UNDOERS, Ledger
from faultdrill.plan import Resources
from faultdrill.platforms.api import Replica
from faultdrill.platforms.local.platform import LocalPlatform, describe_process

root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts and namespaces need root")


@pytest.fixture()
def ckpt(tmp_path: Path) -> Iterator[Path]:
    """An empty directory; every mount a test makes on it is unmounted afterwards (they
    are all this test's: the directory is its own)."""
    path = tmp_path / "ckpt"
    path.mkdir()
    try:
        yield path
    finally:
        for _ in range(8):
            if not mounts_at(path):
                break
            subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)
        assert not mounts_at(path), "a test mount was left behind"


def _tmpfs(path: Path, source: str = "someone-else") -> str:
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", source, str(path)], check=True, timeout=30
    )
    return mounts_at(path)[-1]["id"]


def _bind(path: Path) -> str:
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True, timeout=30)
    return mounts_at(path)[-1]["id"]


def _ids(path: Path) -> list[str]:
    return [m["id"] for m in mounts_at(path)]


# --- read-only bind ----------------------------------------------------------------------


@root
def test_bind_never_made_leaves_a_later_mount_alone(ckpt: Path) -> None:
    data = bind_entry(ckpt)  # recorded; the harness died before mounting
    other = _tmpfs(ckpt)  # someone mounts there afterwards
    UNDOERS["ro-bind-mount"](data)
    assert _ids(ckpt) == [other]


@root
def test_bind_never_made_leaves_a_pre_existing_mount_alone(ckpt: Path) -> None:
    other = _tmpfs(ckpt)
    data = bind_entry(ckpt)
    UNDOERS["ro-bind-mount"](data)
    assert _ids(ckpt) == [other]


@root
def test_bind_made_but_not_noted_is_unmounted_and_only_it(ckpt: Path) -> None:
    other = _tmpfs(ckpt)  # already there before the fault
    data = bind_entry(ckpt)
    ours = _bind(ckpt)  # mounted; the harness died before noting its id
    assert _ids(ckpt) == [other, ours] and data["mount_ids"] == []
    UNDOERS["ro-bind-mount"](data)
    assert _ids(ckpt) == [other]
    UNDOERS["ro-bind-mount"](data)  # again: nothing of ours left, nothing touched
    assert _ids(ckpt) == [other]


@root
def test_bind_covered_by_another_mount_is_said_and_nothing_unmounted(ckpt: Path) -> None:
    data = bind_entry(ckpt)
    ours = _bind(ckpt)
    data["mount_ids"] = [ours]
    other = _tmpfs(ckpt)
    with pytest.raises(FaultError, match="covered by mount"):
        UNDOERS["ro-bind-mount"](data)
    assert _ids(ckpt) == [ours, other]


# --- tmpfs -------------------------------------------------------------------------------


@root
def test_tmpfs_never_made_leaves_a_later_tmpfs_and_its_files_alone(ckpt: Path) -> None:
    data = tmpfs_entry(ckpt, 2)
    other = _tmpfs(ckpt)
    (ckpt / "theirs.bin").write_bytes(b"x")
    UNDOERS["tmpfs-mount"](data)
    assert _ids(ckpt) == [other]
    assert (ckpt / "theirs.bin").exists()
    subprocess.run(["umount", str(ckpt)], check=True)
    assert list(ckpt.iterdir()) == [], "their files were moved into the directory underneath"
    assert not Path(data["keep_copy"]).exists()


@root
def test_tmpfs_made_but_not_noted_is_unmounted_and_its_files_kept(ckpt: Path) -> None:
    data = tmpfs_entry(ckpt, 2)
    _tmpfs(ckpt, source=data["source"])  # the tag recorded before mounting; id not noted
    (ckpt / "state.pt").write_bytes(b"saved")
    UNDOERS["tmpfs-mount"](data)
    assert _ids(ckpt) == []
    assert (ckpt / "state.pt").read_bytes() == b"saved"  # copied into the directory
    assert not Path(data["keep_copy"]).exists()


@root
def test_tmpfs_over_another_mount_unmounts_only_ours(ckpt: Path) -> None:
    other = _tmpfs(ckpt)
    data = tmpfs_entry(ckpt, 2)
    ours = _tmpfs(ckpt, source=data["source"])
    (ckpt / "state.pt").write_bytes(b"saved")
    assert _ids(ckpt) == [other, ours]
    UNDOERS["tmpfs-mount"](data)
    assert _ids(ckpt) == [other]
    assert not (ckpt / "state.pt").exists()  # not moved into their filesystem...
    assert (Path(data["keep_copy"]) / "state.pt").read_bytes() == b"saved"  # ...kept aside


def test_each_tmpfs_entry_has_its_own_tag(tmp_path: Path) -> None:
    a, b = tmpfs_entry(tmp_path, 2), tmpfs_entry(tmp_path, 2)
    assert a["source"] != b["source"] and a["source"].startswith("faultdrill-")


# --- namespaces ----------------------------------------------------------------------------


@root
@pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2")
def test_namespace_with_another_inode_is_left_alone(tmp_path: Path) -> None:
    from faultdrill.host import linux as _linux  # noqa: F401  (registers the undo)

    run_id = f"t-ns-{uuid.uuid4().hex[:8]}"
    name = f"{net_prefix(run_id)}-n1"  # named as this run names its nodes
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=30)
    try:
        inode = ns_inode(name)
        assert inode is not None
        ledger = Ledger(tmp_path / "ledger.jsonl", run_id=run_id)
        eid = ledger.record("netns", {"name": name, "inode": inode + 1}, f"namespace {name}")
        ledger.revert(eid)  # not ours: left alone, the entry closed, and said
        assert netns_exists(name)
        assert ledger.pending() == []
        assert len(ledger.notes) == 1 and "not the one this run made" in ledger.notes[0]
        UNDOERS["netns"]({"name": name, "inode": inode})  # ours: deleted
        assert not netns_exists(name)
    finally:
        if netns_exists(name):
            subprocess.run(["ip", "netns", "del", name], check=False, timeout=30)


# --- the escalation SIGKILL ------------------------------------------------------------------

_STUBBORN = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def _platform(tmp_path: Path, ledger: Ledger) -> LocalPlatform:
    """The local platform without a job: its signal actions act on real processes."""
    return LocalPlatform(Resources(), tmp_path, ledger, EventSink(tmp_path / "events", "t"))


def test_escalation_sigkill_is_recorded_before_it_is_sent(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _STUBBORN], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        start = procfs.start_time(proc.pid)
        ledger = Ledger(tmp_path / "ledger.jsonl", run_id="t-esc")
        victim = describe_process(proc.pid, "n1")
        assert victim is not None
        escalate(ledger, _platform(tmp_path, ledger), victim, 0.1)
        assert proc.wait(10) == -9
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    recs = [json.loads(line) for line in ledger.path.read_text().splitlines()]
    mac = recs[0]["mac"]  # every line is signed (faultdrill.ledger)
    assert recs[0] == {"op": "run", "run_id": "t-esc", "ts": recs[0]["ts"], "mac": mac}
    recs = recs[1:]
    assert [r["op"] for r in recs] == ["record", "applied", "reverted"]
    assert recs[0]["kind"] == "signal"
    assert recs[0]["data"] == {
        "pid": proc.pid,
        "start_time": start,
        "signal": "SIGKILL",
        "escalation": True,
    }
    assert ledger.pending() == []


def test_no_escalation_for_a_worker_that_exited(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    start = procfs.start_time(proc.pid)
    proc.wait(10)
    assert start is not None
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id="t-esc")
    gone = Replica(proc.pid, start, "worker", "n1", rank=1)
    escalate(ledger, _platform(tmp_path, ledger), gone, 0.05)
    assert not ledger.path.exists() and ledger.entries == {}
