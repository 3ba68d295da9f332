"""The FUSE mirror behind ``storage-outage`` mode ``unreachable``, for real (root, FUSE):
what goes through it lands in the directory underneath; ``hang`` blocks a write until the
revert, ``error`` fails it with EIO; every mount and daemon is undone, also by an undo that
cannot vouch for the daemon (it aborts the connection); plans asking for it on a machine
without FUSE are refused at validation with the fix."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from faultdrill.admit import load_plan
from faultdrill.errors import PlanError
from faultdrill.events import EventSink
from faultdrill.faults.api import FaultContext, make_fault
from faultdrill.faults.storage import StorageOutage, StorageOutageSpec
from faultdrill.host import procfs
from faultdrill.host.mounts import MIRROR_FSTYPE, mirror_entry, mounts_at
from faultdrill.host.storage import fuse_missing
from faultdrill.ledger import UNDOERS, Ledger
from faultdrill.plan import Resources
from faultdrill.platforms.api import Ability
from faultdrill.platforms.local.platform import LocalPlatform
from tests.drillkit import demo_raw

fuse = pytest.mark.skipif(
    os.geteuid() != 0 or bool(fuse_missing()), reason=f"needs root and FUSE: {fuse_missing()}"
)


@dataclass
class Mirrored:
    fault: StorageOutage
    ctx: FaultContext
    ckpt: Path
    under: Path  # the directory underneath the mount, seen through a descriptor of ours
    pid: int
    start: int


def _ours(tag: str) -> list[str]:
    """Mount points of every mount whose source is ``tag``, anywhere."""
    with open("/proc/self/mountinfo") as f:
        return [ln.split()[4] for ln in f if f" - {MIRROR_FSTYPE} {tag} " in ln]


@pytest.fixture()
def mirrored(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Mirrored]:
    """A mirror prepared over ``tmp_path/ckpt`` (server as the test's param, default hang),
    and everything undone afterwards, whatever the test left."""
    server = getattr(request, "param", "hang")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    fd = os.open(ckpt, os.O_RDONLY | os.O_DIRECTORY)
    fault = make_fault(StorageOutageSpec(mode="unreachable", server=server, for_s=5))
    assert isinstance(fault, StorageOutage)
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id=f"t-{os.getpid()}")
    sink = EventSink(tmp_path / "events", "t")
    ctx = FaultContext(
        platform=LocalPlatform(Resources(), tmp_path, ledger, sink),
        ledger=ledger,
        sink=sink,
        scenario_id="s",
        ckpt_dir=ckpt,
        latest_file="latest",
    )
    facts = fault.prepare(ctx)
    tag = str(facts["source"])
    pid = int(facts["daemon_pid"])
    start = procfs.start_time(pid)
    assert start is not None
    try:
        yield Mirrored(fault, ctx, ckpt, Path(f"/proc/self/fd/{fd}"), pid, start)
    finally:
        fault.revert(ctx)
        assert ctx.ledger.revert_all() == []
        assert _ours(tag) == [], "a FUSE mount was left behind"
        assert not procfs.alive(pid, start), "the mirror daemon was left running"
        os.close(fd)


def _writer(path: Path, data: bytes) -> subprocess.Popen[bytes]:
    """A process writing ``data`` to ``path`` with fsync (as a checkpoint save does)."""
    code = (
        "import os,sys\n"
        "with open(sys.argv[1], 'wb') as f:\n"
        "    f.write(bytes.fromhex(sys.argv[2])); f.flush(); os.fsync(f.fileno())\n"
    )
    return subprocess.Popen([sys.executable, "-c", code, str(path), data.hex()])


def _errno(fn: object) -> int | None:
    try:
        fn()  # type: ignore[operator]
    except OSError as exc:
        return exc.errno
    return None


def test_local_platform_declares_fuse_only_with_its_prerequisites() -> None:
    assert Ability.STORAGE_UNREACHABLE in LocalPlatform.abilities_for(Resources())
    lacks = LocalPlatform.machine_lacks(frozenset({Ability.STORAGE_UNREACHABLE}))
    assert (not lacks) == (os.geteuid() == 0 and not fuse_missing())


@fuse
def test_mirror_passes_everything_through_to_the_directory(mirrored: Mirrored) -> None:
    ck, under = mirrored.ckpt, mirrored.under
    assert mounts_at(ck)[-1]["fstype"] == MIRROR_FSTYPE
    blob = os.urandom(3_000_000)
    with open(ck / ".tmp-state", "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    os.makedirs(ck / "step-000010")
    os.replace(ck / ".tmp-state", ck / "step-000010" / "state.pt")
    dfd = os.open(ck / "step-000010", os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dfd)  # fsync of a directory, as a save does before publishing
    os.close(dfd)
    (ck / "latest").write_text("step-000010\n")
    (ck / "gone").write_text("x")
    os.unlink(ck / "gone")
    os.symlink("step-000010", ck / "link")
    os.link(ck / "latest", ck / "latest.hard")
    (ck / "short").write_bytes(b"0123456789abcdef")
    os.truncate(ck / "short", 10)
    os.chmod(ck / "short", 0o600)
    os.utime(ck / "short", ns=(1_000_000_000, 2_000_000_000))
    os.makedirs(ck / "empty")
    os.rmdir(ck / "empty")
    # what the job sees through the mount is what is underneath, byte for byte
    assert (under / "step-000010" / "state.pt").read_bytes() == blob
    assert (ck / "step-000010" / "state.pt").read_bytes() == blob
    assert sorted(os.listdir(ck)) == sorted(os.listdir(under))
    assert sorted(os.listdir(ck)) == ["latest", "latest.hard", "link", "short", "step-000010"]
    assert os.readlink(ck / "link") == os.readlink(under / "link") == "step-000010"
    mine, theirs = os.stat(ck / "short"), os.stat(under / "short")
    assert (mine.st_size, mine.st_mode, mine.st_mtime_ns) == (10, theirs.st_mode, 2_000_000_000)
    assert theirs.st_size == 10 and theirs.st_mode & 0o777 == 0o600
    assert os.stat(under / "latest").st_nlink == 2
    assert os.statvfs(ck).f_blocks == os.statvfs(under).f_blocks
    # reading back in pieces at offsets (the kernel splits reads)
    with open(ck / "step-000010" / "state.pt", "rb") as f:
        f.seek(1_234_567)
        assert f.read(100_000) == blob[1_234_567:1_334_567]


@fuse
def test_hang_blocks_a_write_until_the_server_returns(mirrored: Mirrored) -> None:
    m = mirrored
    (m.ckpt / "latest").write_text("step-000010\n")
    facts = m.fault.inject(m.ctx)
    assert facts["server"] == "hang" and facts["daemon_state"] == "T (stopped)"
    assert procfs.proc_state(m.pid) == "T"
    writer = _writer(m.ckpt / "w.bin", b"saved")
    try:
        time.sleep(0.8)
        assert writer.poll() is None, "the write did not block"
        assert procfs.proc_state(writer.pid) in ("S", "D")
        assert not (m.under / "w.bin").exists()
        started = time.monotonic()
        m.fault.revert(m.ctx)
        assert writer.wait(5) == 0
        assert time.monotonic() - started < 2.0
    finally:
        if writer.poll() is None:
            writer.kill()
    assert (m.under / "w.bin").read_bytes() == b"saved"
    seen = (m.ctx.sink.events_dir / "fault.jsonl").read_text()
    # the pointer was read (underneath) at both ends, the end while the server hung
    assert seen.count('"latest":"step-000010"') == 2 and '"when":"end"' in seen


@fuse
@pytest.mark.parametrize("mirrored", ["error"], indirect=True)
def test_error_fails_every_request_with_eio_until_the_revert(mirrored: Mirrored) -> None:
    m = mirrored
    (m.ckpt / "before").write_text("b")
    facts = m.fault.inject(m.ctx)
    assert facts["write_error"] == os.strerror(errno.EIO)
    assert _errno(lambda: (m.ckpt / "w.bin").write_bytes(b"x")) == errno.EIO
    assert _errno(lambda: os.mkdir(m.ckpt / ".tmp-step")) == errno.EIO
    assert _errno(lambda: (m.ckpt / "before").read_text()) == errno.EIO
    assert not (m.under / "w.bin").exists()
    m.fault.revert(m.ctx)
    (m.ckpt / "w.bin").write_bytes(b"x")
    assert (m.under / "w.bin").read_bytes() == b"x"
    assert (m.ckpt / "before").read_text() == "b"


@fuse
def test_cleanup_from_the_ledger_file_mid_hang_frees_everything(mirrored: Mirrored) -> None:
    """As ``faultdrill cleanup`` would: a fresh ledger read from the file, while the server
    hangs and a writer is blocked on it."""
    m = mirrored
    m.fault.inject(m.ctx)
    writer = _writer(m.ckpt / "w.bin", b"late")
    try:
        time.sleep(0.5)
        assert writer.poll() is None
        again = Ledger(m.ctx.ledger.path, run_id="cleanup")
        assert {e.kind for e in again.pending()} == {"fuse-mirror", "fuse-outage"}
        assert again.revert_all() == []
        assert mounts_at(m.ckpt, resolve=False) == []
        assert not procfs.alive(m.pid, m.start)
        writer.wait(5)  # resumed, then ended (written, or ENOTCONN once the daemon went)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert (m.under / "w.bin").read_bytes() in (b"late", b"")
    m.ctx.ledger = again  # the fixture's revert_all finds nothing left


@fuse
def test_undo_that_cannot_vouch_for_the_daemon_aborts_the_connection(
    mirrored: Mirrored,
) -> None:
    """The recorded start time does not match (the pid could be another process now) and
    there is no status file: the undo must not signal that pid; it aborts the connection
    of the mount it proves its own by tag, so blocked requests fail, and unmounts it."""
    m = mirrored
    m.fault.inject(m.ctx)
    writer = _writer(m.ckpt / "w.bin", b"never")
    entry = next(e for e in m.ctx.ledger.entries.values() if e.kind == "fuse-mirror")
    try:
        time.sleep(0.5)
        assert writer.poll() is None
        data = {**entry.data, "start_time": m.start + 1, "status": str(m.ckpt.parent / "none")}
        UNDOERS["fuse-mirror"](data)
        assert writer.wait(5) != 0  # ENOTCONN, not blocked forever
        assert mounts_at(m.ckpt, resolve=False) == []
        assert procfs.proc_state(m.pid) == "T", "the daemon it could not vouch for was touched"
        with open("/proc/self/mountinfo") as f:
            assert "faultdrill-fusectl" not in f.read(), "the private fusectl mount was left"
    finally:
        if writer.poll() is None:
            writer.kill()
    # the fixture's undo, with the true identity, resumes and ends the daemon


@fuse
def test_undo_leaves_a_mount_of_another_tag_alone(mirrored: Mirrored) -> None:
    m = mirrored
    UNDOERS["fuse-mirror"](mirror_entry(m.ckpt))  # recorded, never started
    UNDOERS["fuse-outage"](
        {"pid": m.pid, "start_time": m.start + 1, "server": "hang", "status": "/nonexistent"}
    )
    assert mounts_at(m.ckpt)[-1]["fstype"] == MIRROR_FSTYPE
    assert procfs.alive(m.pid, m.start)
    os.kill(m.pid, signal.SIGSTOP)  # a stopped daemon only a vouched undo may resume
    for _ in range(100):  # the stop takes effect asynchronously
        if procfs.proc_state(m.pid) == "T":
            break
        time.sleep(0.01)
    assert procfs.proc_state(m.pid) == "T", "precondition: the daemon is stopped"
    UNDOERS["fuse-outage"]({"pid": m.pid, "start_time": m.start + 1, "server": "hang"})
    assert procfs.proc_state(m.pid) == "T"
    os.kill(m.pid, signal.SIGCONT)


# --- plan validation ------------------------------------------------------------------------


def _plan_with(tmp_path: Path, fault: dict[str, object]) -> Path:
    raw = demo_raw()
    raw["rounds"] = [
        {
            "round": 3,
            "name": "storage",
            "scenarios": [
                {
                    "id": "storage-unreachable",
                    "fault": fault,
                    "trigger": {"at_step": 18},
                    "expected": {"resume": "no-restart"},
                }
            ],
        }
    ]
    raw["controls"] = []
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_server_applies_to_unreachable_only(tmp_path: Path) -> None:
    bad = {"kind": "storage-outage", "mode": "read-only", "for_s": 1, "server": "error"}
    with pytest.raises(PlanError, match="server applies to mode unreachable only"):
        load_plan(_plan_with(tmp_path, bad))
    assert "server" not in StorageOutageSpec(mode="full", for_s=1).model_dump()
    spec = StorageOutageSpec(mode="unreachable", for_s=1)
    assert spec.server_behaviour == "hang" and "server" not in spec.model_dump()
    assert StorageOutageSpec(mode="unreachable", for_s=1, server="error").model_dump()[
        "server"
    ] == ("error")
