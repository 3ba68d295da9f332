"""Storage faults (round 3): the checkpoint directory stops taking writes for a while.

``storage-outage`` makes the scenario's checkpoint directory

* ``read-only``: a bind mount of the directory onto itself, remounted read-only (saves
  fail with ``EROFS``); reverted by unmounting the bind, which uncovers the directory
  exactly as it was;
* ``full``: the directory is a small tmpfs from the start of the item (``prepare``), and
  the fault fills it with a filler file until only ``leave_free_kb`` remain (saves fail with
  ``ENOSPC``, small writes such as a pointer file still succeed); reverted by deleting the
  filler. At the end of the item the tmpfs is unmounted and its contents copied back into
  the directory, so the run keeps its checkpoints as evidence.
* ``unreachable``: the directory is served through a FUSE passthrough for the whole item
  (``prepare`` mounts :mod:`faultdrill.platforms.local.fuse_mirror` over the directory
  itself; the daemon mirrors the directory underneath through a descriptor opened before
  mounting), so the job writes its checkpoints as through a network filesystem; the fault
  makes that server unreachable, as chosen by ``server``: ``hang`` (the daemon is
  SIGSTOPped: every request blocks, as on an NFS hard mount whose server is down; a save
  blocks its rank until the server returns) or ``error`` (every request is answered
  ``EIO``, as on a soft mount).
  Reverted by SIGCONT / normal service. At the end of the item the mount is lazily
  unmounted and the daemon stopped; every write that went through it is already in the
  directory underneath. Needs the ``checkpoint-fuse`` ability (fusepy, libfuse2,
  ``/dev/fuse``, ``fusermount``), checked at plan validation.

for ``for_s`` seconds, timed (by the scenario's trigger) to overlap a checkpoint save. The
fault looks at the checkpoint pointer when it starts and just before it ends
(``storage_observed`` events): what ``latest`` named, and whether that checkpoint verifies
(its ``manifest.json``, if it has one, against its state file). Checks use that to prove
that a failed save never became ``latest``.

Every mount and file is recorded in the ledger before it is made, with what will prove the
mount ours (a unique tmpfs or FUSE source tag; for the bind, the mounts already there and
the directory's identity); the undo acts by recorded path, and only on a mount it can prove
is ours (:func:`_is_ours`), so a crash between recording and mounting never unmounts
another's. The FUSE daemon is recorded before it starts (its status file, where it writes
its pid and start time at once), then by pid and start time; its undo works after a
SIGKILL of the harness even while the daemon is stopped (:func:`_undo_fuse_mirror`).
Mounts are made in the harness's mount namespace, which is the job's on the
local platform (agents are entered with ``nsenter --net`` only); ``inject`` refuses to act
when a job process lives in another mount namespace.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from faultdrill.errors import FaultError
from faultdrill.faults.api import Fault, FaultContext, FaultSpec, is_single_name, register
from faultdrill.judge.inventory import read_pointer, verify_dir
from faultdrill.ledger import undoer
from faultdrill.platforms.local import procfs

__all__ = [
    "ABILITY_CHECKPOINT_FUSE",
    "ABILITY_CHECKPOINT_MOUNTS",
    "StorageOutageSpec",
    "is_mount_point",
    "observe_pointer",
]

#: The harness may mount over the job's checkpoint dir (root), and the job's processes see
#: this host's mounts (declared by the local platform when run as root).
ABILITY_CHECKPOINT_MOUNTS = "checkpoint-mounts"
#: The checkpoint directory can be served through a FUSE mirror (mode ``unreachable``):
#: root, fusepy, libfuse2, ``/dev/fuse`` and ``fusermount`` (declared by the local platform
#: only when all are there; ``platforms.local.platform.fuse_missing`` says what is not).
ABILITY_CHECKPOINT_FUSE = "checkpoint-fuse"

FILLER = ".faultdrill-fill"


class StorageOutageSpec(FaultSpec):
    kind: Literal["storage-outage"] = "storage-outage"
    mode: Literal["read-only", "full", "unreachable"] = Field(
        description="read-only: EROFS via a read-only bind remount; full: ENOSPC on a small "
        "tmpfs that is filled; unreachable: the FUSE server of the directory goes away"
    )
    server: Literal["hang", "error"] | None = Field(
        None,
        description="unreachable only (default hang): hang = the server stops answering, "
        "requests block (NFS hard mount); error = every request fails with EIO (soft mount)",
    )
    for_s: float = Field(gt=0, le=600, description="how long the outage lasts")
    fs_size_mb: int = Field(
        8, ge=2, le=256, description="full: size of the tmpfs holding the checkpoints"
    )
    leave_free_kb: int = Field(
        64,
        ge=0,
        le=256 * 1024,
        description="full: free space left by the filler (smaller than a checkpoint)",
    )

    @model_validator(mode="after")
    def _server_for_unreachable(self) -> StorageOutageSpec:
        if self.server is not None and self.mode != "unreachable":
            raise ValueError(
                f"server applies to mode unreachable only; remove it (mode is {self.mode!r})"
            )
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave ``server`` out when unset, so plans written before it keep their digest."""
        out: dict[str, Any] = handler(self)
        if self.server is None:
            out.pop("server", None)
        return out

    @property
    def server_behaviour(self) -> Literal["hang", "error"]:
        return self.server or "hang"

    def target_label(self) -> str:
        return "the checkpoint directory"

    @property
    def duration_s(self) -> float | None:
        return self.for_s


# --- mounts ------------------------------------------------------------------------------


def _unescape(field: str) -> str:
    """Mountinfo escapes space, tab, newline and backslash as octal."""
    out, i = [], 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mounts_at(path: Path, *, resolve: bool = True) -> list[dict[str, str]]:
    """Mounts whose mount point is exactly ``path`` (this mount namespace), oldest first.
    ``resolve=False`` compares ``path`` as given (already resolved when it was recorded):
    resolving stats the path, which blocks while a FUSE server there does not answer."""
    target = os.path.realpath(path) if resolve else str(path)
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 10 or _unescape(parts[4]) != target:
                continue
            sep = parts.index("-")
            out.append(
                {
                    "id": parts[0],
                    "dev": parts[2],
                    "options": parts[5],
                    "fstype": parts[sep + 1],
                    "source": parts[sep + 2],
                }
            )
    return out


def is_mount_point(path: Path) -> bool:
    return bool(mounts_at(path))


def _run(argv: list[str]) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FaultError(f"{' '.join(argv)}: {exc}") from exc
    if done.returncode != 0:
        raise FaultError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


def _umount(path: str) -> None:
    """Unmount the top mount at ``path``; lazily if it is busy (a save holding a file)."""
    try:
        _run(["umount", path])
    except FaultError as exc:
        if "busy" not in str(exc):
            raise
        _run(["umount", "-l", path])


def dir_identity(path: Path) -> list[int]:
    """(st_dev, st_ino) of a directory: a bind mount of it onto itself shows the same pair
    at its mount point; any other filesystem mounted there shows another."""
    st = os.stat(path)
    return [st.st_dev, st.st_ino]


def tmpfs_entry(ckpt: Path, size_mb: int) -> dict[str, Any]:
    """The ledger data of a tmpfs about to be mounted on ``ckpt``. Its ``source`` is a
    unique tag, given to ``mount`` as the source: it is how an undo (maybe after a crash
    right after the mount) recognises this tmpfs, and no other, as ours."""
    return {
        "path": str(ckpt),
        "size_mb": size_mb,
        "keep_copy": str(ckpt.parent / f".{ckpt.name}.from-tmpfs"),
        "source": f"faultdrill-{uuid.uuid4().hex}",
        "mount_ids": [],
    }


def bind_entry(ckpt: Path) -> dict[str, Any]:
    """The ledger data of a bind of ``ckpt`` onto itself about to be made: what proves the
    bind ours afterwards, taken before mounting (the mounts already there, which are not
    ours, and the directory's identity, which the bind shows at the mount point)."""
    return {
        "path": str(ckpt),
        "before_ids": [m["id"] for m in mounts_at(ckpt)],
        "identity": dir_identity(ckpt),
        "mount_ids": [],
    }


def _is_ours(mount: dict[str, str], path: Path, data: dict[str, Any], top: bool) -> bool:
    """Whether ``mount`` (one of :func:`mounts_at` ``path``) is the one this ledger entry
    made, proven from what was recorded BEFORE mounting (the harness may have died between
    recording and mounting, or between mounting and noting the mount's id):

    * tmpfs, FUSE mirror: its source is the unique tag recorded in ``source`` (and its
      type the recorded ``fstype``, tmpfs if none);
    * read-only bind: it was not among the mounts at ``path`` before (``before_ids``), is
      one of ``mount_ids`` when those were noted, and (only checkable for the top mount)
      its root is the very directory recorded in ``identity``;
    * an entry of an older format without ``source``/``before_ids``: only by ``mount_ids``.
    """
    ids = [str(i) for i in data.get("mount_ids") or []]
    if data.get("source"):
        return bool(
            mount["source"] == data["source"] and mount["fstype"] == data.get("fstype", "tmpfs")
        )
    if "before_ids" not in data:
        return bool(ids) and mount["id"] in ids
    if mount["id"] in [str(i) for i in data["before_ids"]]:
        return False
    if ids and mount["id"] not in ids:
        return False
    if not top:
        return bool(ids)  # noted by id after mounting; its root cannot be examined
    try:
        return dir_identity(path) == list(data.get("identity") or [])
    except OSError:
        return False


def _our_mount_on_top(data: dict[str, Any], *, resolve: bool = True) -> bool:
    """True if the top mount at the entry's path is ours; False if none of ours is there.
    Raises FaultError if ours is there but covered by a mount that is not ours."""
    path = Path(str(data["path"]))
    mounts = mounts_at(path, resolve=resolve)
    if not mounts:
        return False
    if _is_ours(mounts[-1], path, data, top=True):
        return True
    if any(_is_ours(m, path, data, top=False) for m in mounts[:-1]):
        raise FaultError(
            f"our mount at {path} is covered by mount {mounts[-1]['id']} "
            f"({mounts[-1]['fstype']} {mounts[-1]['source']}), which is not ours; unmount that "
            "first, then run `faultdrill cleanup` again"
        )
    return False


@undoer("ro-bind-mount")
def _undo_ro_bind(data: dict[str, Any]) -> None:
    """Unmount the read-only bind if it is ours (:func:`_is_ours`): the directory underneath
    is as it was. Any other mount at the path is left alone."""
    if _our_mount_on_top(data):
        _umount(str(data["path"]))


@undoer("tmpfs-mount")
def _undo_tmpfs(data: dict[str, Any]) -> None:
    """If the top mount at the path is our tmpfs: copy what it holds back into the directory
    underneath, then unmount it. Any other mount at the path is left alone."""
    if not _our_mount_on_top(data):
        return
    path = str(data["path"])
    keep = Path(str(data["keep_copy"]))
    copied = False
    try:
        shutil.copytree(path, keep, ignore=shutil.ignore_patterns(FILLER), dirs_exist_ok=True)
        copied = True
    except OSError:
        pass  # the evidence copy is a courtesy: the mount must go regardless
    _umount(path)
    # Back into the directory itself only; if another mount is still there (one that was
    # there before ours), the copy stays in ``keep_copy``.
    if copied and not is_mount_point(Path(path)):
        for child in keep.iterdir():
            dest = Path(path) / child.name
            if not dest.exists():
                os.replace(child, dest)
        shutil.rmtree(keep, ignore_errors=True)


@undoer("filler-file")
def _undo_filler(data: dict[str, Any]) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(str(data["path"]))


# --- the FUSE mirror (mode unreachable) ----------------------------------------------------

MIRROR_MODULE = "faultdrill.platforms.local.fuse_mirror"
MIRROR_FSTYPE = "fuse.faultdrill"  # the daemon mounts with subtype "faultdrill"
FUSECTL = Path("/sys/fs/fuse/connections")


def mirror_entry(ckpt: Path) -> dict[str, Any]:
    """The ledger data of a FUSE mirror about to be started over ``ckpt``: the unique tag
    given as the mount's source (what proves the mount ours), and the status file in which
    the daemon writes its pid and start time as its first act, so that an undo finds the
    daemon even if the harness died before noting its pid."""
    tag = f"faultdrill-{uuid.uuid4().hex}"
    base = ckpt.parent / f".{ckpt.name}.fuse-{tag[-8:]}"
    return {
        "path": str(ckpt),
        "source": tag,
        "fstype": MIRROR_FSTYPE,
        "status": f"{base}.json",
        "log": f"{base}.log",
        "pid": None,
        "start_time": None,
        "conn": None,
        "mount_ids": [],
    }


def read_status(path: str | Path) -> dict[str, Any]:
    """The mirror daemon's status file ({} when absent or unreadable)."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def connection_id(dev: str) -> int:
    """The FUSE connection id (its name under ``/sys/fs/fuse/connections``) of a mount whose
    mountinfo device is ``major:minor``: the kernel's dev_t, ``major << 20 | minor``."""
    major, minor = (int(x) for x in dev.split(":"))
    return (major << 20) | minor


def _mirror_daemon(data: dict[str, Any]) -> tuple[int, int] | None:
    """The entry's daemon as (pid, start time) if it still runs: recorded in the ledger or,
    failing that, in its status file; and its command line carries the entry's tag."""
    pid, start = data.get("pid"), data.get("start_time")
    if not isinstance(pid, int) or not isinstance(start, int):
        status = read_status(str(data["status"]))
        if status.get("fsname") != data["source"]:
            return None
        pid, start = status.get("pid"), status.get("start_time")
    if not isinstance(pid, int) or not isinstance(start, int) or not procfs.alive(pid, start):
        return None
    if str(data["source"]) not in procfs.cmdline(pid):
        return None
    return pid, start


def _abort_connection(conn: int) -> None:
    """Abort a FUSE connection: every request waiting on it fails with ENOTCONN at once.
    Through ``/sys/fs/fuse/connections`` when fusectl is mounted there, else through a
    fusectl mounted for the occasion in a private directory and unmounted again."""
    if any(m["fstype"] == "fusectl" for m in mounts_at(FUSECTL)):
        with contextlib.suppress(FileNotFoundError):
            (FUSECTL / str(conn) / "abort").write_text("1")
        return
    tmp = tempfile.mkdtemp(prefix="faultdrill-fusectl-")
    try:
        _run(["mount", "-t", "fusectl", "faultdrill-fusectl", tmp])
        try:
            with contextlib.suppress(FileNotFoundError):
                Path(tmp, str(conn), "abort").write_text("1")
        finally:
            _run(["umount", tmp])
    finally:
        os.rmdir(tmp)


def _wait(pred: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def _end_daemon(pid: int, start: int) -> None:
    """The daemon exits by itself once its mount is gone and nothing holds it open; else
    SIGKILL (checked pid and start time), which also aborts its connection. Reaped here
    when it is this process's child."""
    if not _wait(lambda: not procfs.alive(pid, start), 2.0):
        procfs.kill_checked(pid, start, signal.SIGKILL)
        if not _wait(lambda: not procfs.alive(pid, start), 5.0):
            raise FaultError(
                f"the FUSE mirror daemon {pid} survived SIGKILL (state "
                f"{procfs.proc_state(pid)}); run `faultdrill cleanup` again"
            )
    if procfs.parent_pid(pid) == os.getpid():
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


@undoer("fuse-mirror")
def _undo_fuse_mirror(data: dict[str, Any]) -> None:
    """Take the FUSE mirror down, also after a SIGKILL of the harness mid-outage:

    1. the daemon, if it still runs and is this entry's (:func:`_mirror_daemon`), is
       resumed (SIGCONT, then SIGUSR2: normal service), so that nothing waits on it;
    2. if the top mount at the path is ours (its source is the recorded tag) and no daemon
       of ours can answer it, its connection is aborted (requests fail instead of blocking);
    3. that mount is lazily unmounted (never another's; paths are compared as recorded,
       without resolving them, which would stat a mount that may not answer);
    4. the daemon is ended (:func:`_end_daemon`). Never SIGTERM: libfuse would then
       unmount by path whatever is mounted there by then.
    """
    path = Path(str(data["path"]))
    daemon = _mirror_daemon(data)
    if daemon is not None:
        procfs.kill_checked(*daemon, signal.SIGCONT)
        procfs.kill_checked(*daemon, signal.SIGUSR2)
    if _our_mount_on_top(data, resolve=False):
        if daemon is None:
            _abort_connection(connection_id(mounts_at(path, resolve=False)[-1]["dev"]))
        _run(["umount", "--lazy", "--no-canonicalize", str(path)])
    if daemon is not None:
        _end_daemon(*daemon)


@undoer("fuse-outage")
def _undo_fuse_outage(data: dict[str, Any]) -> None:
    """The server answers again: SIGCONT (hang), SIGUSR2 (error), to the recorded daemon
    only (pid and start time). A daemon that is gone has nothing to resume; the mirror's
    own undo deals with its mount."""
    pid, start = int(data["pid"]), int(data["start_time"])
    if not procfs.alive(pid, start):
        return
    procfs.kill_checked(pid, start, signal.SIGCONT)
    if not _wait(lambda: procfs.proc_state(pid) != "T", 2.0):
        raise FaultError(f"the FUSE mirror daemon {pid} is still stopped after SIGCONT")
    if data.get("server") == "error":
        procfs.kill_checked(pid, start, signal.SIGUSR2)
        if not _wait(lambda: read_status(str(data["status"])).get("state") != "failing", 2.0):
            raise FaultError(f"the FUSE mirror daemon {pid} did not resume normal service")


# --- observing the pointer -----------------------------------------------------------------


def observe_pointer(ckpt_dir: Path, latest_file: str) -> dict[str, Any]:
    """What the pointer names now, and whether that checkpoint verifies by its manifest."""
    out: dict[str, Any] = {"latest": None, "latest_verifies": None, "latest_problem": None}
    if not latest_file:
        out["latest_problem"] = "the plan names no pointer file"
        return out
    try:
        out["latest"] = read_pointer(ckpt_dir / latest_file)
    except FileNotFoundError:
        return out
    except OSError as exc:
        out["latest_problem"] = f"cannot read {latest_file}: {exc.strerror}"
        return out
    if out["latest"] and not is_single_name(out["latest"]):
        out["latest_verifies"] = False
        out["latest_problem"] = (
            f"{latest_file} names {out['latest']!r}, which is not a checkpoint id (one plain "
            "name inside the checkpoint directory)"
        )
    elif out["latest"]:
        ok, why = verify_dir(ckpt_dir / out["latest"])
        out["latest_verifies"] = ok
        out["latest_problem"] = why or None
    return out


# --- the fault ---------------------------------------------------------------------------


def _fill_file(path: Path, size: int) -> None:
    """Create ``path`` and allocate ``size`` bytes to it; running out of space (ENOSPC) is
    fine: a full filesystem is the point."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        if size:
            os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)


def _mount_ns(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/mnt").st_ino
    except OSError:
        return None


@register
class StorageOutage(Fault):
    """The checkpoint directory goes read-only, full or unreachable for ``for_s`` seconds."""

    kind = "storage-outage"
    spec_model = StorageOutageSpec
    requires = frozenset({ABILITY_CHECKPOINT_MOUNTS})

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self._prepared: list[str] = []
        self._observed_end = False
        #: mode unreachable: the mirror daemon (pid, start time, status file), and the
        #: harness's own descriptor of the directory underneath the mount, through which
        #: the pointer is observed while the server does not answer.
        self._mirror: dict[str, Any] | None = None
        self._under: int | None = None

    @classmethod
    def requires_for(cls, spec: FaultSpec) -> frozenset[str]:
        assert isinstance(spec, StorageOutageSpec)
        if spec.mode == "unreachable":
            return cls.requires | {ABILITY_CHECKPOINT_FUSE}
        return cls.requires

    def _ckpt(self, ctx: FaultContext) -> Path:
        if ctx.ckpt_dir is None:
            raise FaultError("storage-outage: the drill did not say where the checkpoints are")
        if os.geteuid() != 0:
            raise FaultError("storage-outage needs root (it mounts over the checkpoint dir)")
        ctx.checked_ckpt_dir().mkdir(parents=True, exist_ok=True)
        return ctx.checked_ckpt_dir()  # again: resolved now that it exists

    def prepare(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, StorageOutageSpec)
        if spec.mode == "unreachable":
            return self._serve_through_fuse(ctx, self._ckpt(ctx), spec)
        if spec.mode != "full":
            return {}
        ckpt = self._ckpt(ctx)
        if any(ckpt.iterdir()):
            raise FaultError(f"{ckpt} is not empty; a tmpfs would hide its contents")
        data = tmpfs_entry(ckpt, spec.fs_size_mb)
        source = data["source"]
        eid = ctx.ledger.record("tmpfs-mount", data, f"tmpfs {spec.fs_size_mb}M on {ckpt}")
        self._prepared.append(eid)
        _run(
            ["mount", "-t", "tmpfs", "-o", f"size={spec.fs_size_mb}m,mode=0755", source, str(ckpt)]
        )
        ids = [m["id"] for m in mounts_at(ckpt) if m["source"] == source]
        ctx.ledger.update(eid, mount_ids=ids)
        ctx.ledger.mark_applied(eid)
        return {
            "mode": spec.mode,
            "path": str(ckpt),
            "command": f"mount -t tmpfs -o size={spec.fs_size_mb}m {source} {ckpt}",
        }

    def _serve_through_fuse(
        self, ctx: FaultContext, ckpt: Path, spec: StorageOutageSpec
    ) -> dict[str, Any]:
        """Start the mirror daemon over ``ckpt`` and wait until it serves (see the module
        docstring); prove that a write through the mount lands in the directory underneath."""
        from faultdrill.platforms.local.platform import fuse_missing

        missing = fuse_missing()
        if missing:
            raise FaultError(f"mode unreachable needs FUSE, which this machine lacks: {missing}")
        data = mirror_entry(ckpt)
        eid = ctx.ledger.record("fuse-mirror", data, f"FUSE mirror on {ckpt}")
        self._prepared.append(eid)
        self._under = under = os.open(ckpt, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        argv = [sys.executable, "-m", MIRROR_MODULE, f"fd:{under}", str(ckpt), data["status"]]
        argv += ["--fsname", data["source"]]
        with open(data["log"], "ab") as log:
            proc = subprocess.Popen(
                argv,
                pass_fds=(under,),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        start = procfs.start_time(proc.pid)
        ctx.ledger.update(eid, pid=proc.pid, start_time=start)
        self._mirror = {"pid": proc.pid, "start_time": start, "status": data["status"]}

        def mounted() -> bool:
            if proc.poll() is not None:
                tail = Path(data["log"]).read_text(errors="replace")[-600:].strip()
                raise FaultError(
                    f"the FUSE mirror exited ({proc.returncode}) before mounting: {tail}"
                )
            ours = [m for m in mounts_at(ckpt) if m["source"] == data["source"]]
            return bool(ours) and read_status(data["status"]).get("state") == "mounted"

        if not _wait(mounted, 20.0):
            raise FaultError(f"the FUSE mirror did not mount on {ckpt} within 20 s")
        mount = next(m for m in mounts_at(ckpt) if m["source"] == data["source"])
        conn = connection_id(mount["dev"])
        ctx.ledger.update(eid, mount_ids=[mount["id"]], conn=conn)
        ctx.ledger.mark_applied(eid)
        probe, seen = ckpt / ".faultdrill-probe", Path(f"/proc/self/fd/{under}/.faultdrill-probe")
        probe.write_bytes(b"through the mirror\n")
        mirrored = seen.read_bytes() == b"through the mirror\n"
        probe.unlink()
        if not mirrored:
            raise FaultError(
                f"a write through the FUSE mirror on {ckpt} did not reach the directory"
            )
        return {
            "mode": spec.mode,
            "server": spec.server_behaviour,
            "path": str(ckpt),
            "daemon_pid": proc.pid,
            "source": data["source"],
            "fuse_connection": conn,
            "command": " ".join(argv),
        }

    def _view(self, ckpt: Path) -> Path:
        """Where the harness reads the checkpoint directory: for the FUSE mirror, the
        directory underneath (a read through the mount would block while the server hangs)."""
        return Path(f"/proc/self/fd/{self._under}") if self._under is not None else ckpt

    def _check_namespace(self, ctx: FaultContext) -> None:
        mine = _mount_ns("self")
        for rep in ctx.platform.replicas():
            theirs = _mount_ns(rep.pid)
            if theirs is not None and theirs != mine:
                raise FaultError(
                    f"job process {rep.pid} (node {rep.node}) is in another mount namespace; "
                    "a mount made here would not reach it"
                )

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, StorageOutageSpec)
        ckpt = self._ckpt(ctx)
        self._check_namespace(ctx)
        before = observe_pointer(self._view(ckpt), ctx.latest_file)
        ctx.sink.emit("fault", "storage_observed", when="start", **before)
        if spec.mode == "read-only":
            return self._read_only(ctx, ckpt, before)
        if spec.mode == "unreachable":
            return self._unreachable(ctx, ckpt, spec, before)
        return self._fill(ctx, ckpt, spec, before)

    def _unreachable(
        self, ctx: FaultContext, ckpt: Path, spec: StorageOutageSpec, before: dict[str, Any]
    ) -> dict[str, Any]:
        m = self._mirror
        if m is None or not procfs.alive(m["pid"], m["start_time"]):
            raise FaultError(f"the FUSE mirror prepared on {ckpt} is not running")
        if not any(x["fstype"] == MIRROR_FSTYPE for x in mounts_at(ckpt)[-1:]):
            raise FaultError(f"{ckpt} is not served by the FUSE mirror prepared for this fault")
        pid, start, server = int(m["pid"]), int(m["start_time"]), spec.server_behaviour
        data = {"pid": pid, "start_time": start, "server": server, "status": m["status"]}
        eid = ctx.ledger.record("fuse-outage", data, f"FUSE server of {ckpt}: {server}")
        self.entry_ids.append(eid)
        facts: dict[str, Any] = {
            "mode": "unreachable",
            "server": server,
            "path": str(ckpt),
            "daemon_pid": pid,
            "latest_before": before["latest"],
        }
        if server == "hang":
            procfs.kill_checked(pid, start, signal.SIGSTOP)
            if not _wait(lambda: procfs.proc_state(pid) == "T", 2.0):
                raise FaultError(f"the FUSE mirror daemon {pid} did not stop")
            ctx.ledger.mark_applied(eid)
            return {**facts, "daemon_state": "T (stopped)", "command": f"kill -STOP {pid}"}
        procfs.kill_checked(pid, start, signal.SIGUSR1)
        if not _wait(lambda: read_status(m["status"]).get("state") == "failing", 2.0):
            raise FaultError(f"the FUSE mirror daemon {pid} did not switch to failing")
        ctx.ledger.mark_applied(eid)
        probe = ckpt / ".faultdrill-probe"
        try:
            probe.write_bytes(b"")
        except OSError as exc:
            return {
                **facts,
                "write_error": exc.strerror or str(exc),
                "command": f"kill -USR1 {pid}",
            }
        probe.unlink()
        raise FaultError(f"{ckpt} still takes writes after the FUSE server was told to fail")

    def _read_only(self, ctx: FaultContext, ckpt: Path, before: dict[str, Any]) -> dict[str, Any]:
        data = bind_entry(ckpt)
        known = data["before_ids"]
        eid = ctx.ledger.record("ro-bind-mount", data, f"read-only bind on {ckpt}")
        self.entry_ids.append(eid)
        _run(["mount", "--bind", str(ckpt), str(ckpt)])
        ids = [m["id"] for m in mounts_at(ckpt) if m["id"] not in known]
        ctx.ledger.update(eid, mount_ids=ids)
        _run(["mount", "-o", "remount,ro,bind", str(ckpt)])
        ctx.ledger.mark_applied(eid)
        probe = ckpt / ".faultdrill-probe"
        write_error = ""
        try:
            probe.write_bytes(b"")
        except OSError as exc:
            write_error = os.strerror(exc.errno) if exc.errno else str(exc)
        if not write_error:
            probe.unlink()
            raise FaultError(f"{ckpt} is still writable after the read-only remount")
        return {
            "mode": "read-only",
            "path": str(ckpt),
            "write_error": write_error,
            "latest_before": before["latest"],
            "command": f"mount --bind {ckpt} {ckpt} && mount -o remount,ro,bind {ckpt}",
        }

    def _fill(
        self, ctx: FaultContext, ckpt: Path, spec: StorageOutageSpec, before: dict[str, Any]
    ) -> dict[str, Any]:
        if not any(m["fstype"] == "tmpfs" for m in mounts_at(ckpt)):
            raise FaultError(f"{ckpt} is not the small tmpfs prepared for this fault")
        filler = ckpt / FILLER
        st = os.statvfs(ckpt)
        free = st.f_bavail * st.f_frsize
        size = max(0, free - spec.leave_free_kb * 1024)
        self._apply(
            ctx,
            "filler-file",
            {"path": str(filler)},
            f"filler {filler}",
            partial(_fill_file, filler, size),
            f"fill {ckpt}",
        )
        st = os.statvfs(ckpt)
        left = st.f_bavail * st.f_frsize
        return {
            "mode": "full",
            "path": str(ckpt),
            "filler_bytes": size,
            "free_bytes": left,
            "latest_before": before["latest"],
            "command": f"fallocate -l {size} {filler}",
        }

    def revert(self, ctx: FaultContext) -> None:
        if self.entry_ids and not self._observed_end and ctx.ckpt_dir is not None:
            self._observed_end = True
            with contextlib.suppress(OSError):
                ctx.sink.emit(
                    "fault",
                    "storage_observed",
                    when="end",
                    **observe_pointer(self._view(ctx.ckpt_dir), ctx.latest_file),
                )
        try:
            super().revert(ctx)
        finally:
            if self._under is not None:  # the daemon has its own copy
                os.close(self._under)
                self._under = None
