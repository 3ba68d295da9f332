"""Mounts over a checkpoint directory of this host, and their undo.

The Linux side of the storage outages (:mod:`faultdrill.host.storage`): reading
``/proc/self/mountinfo``, a read-only bind of a directory onto itself, a small tmpfs and
the filler file that fills it, and the FUSE mirror (:mod:`~faultdrill.platforms.local.
fuse_mirror`) that serves a directory so that its server can be taken away. Every mount is
recorded in the ledger before it is made, with what will prove the mount ours (a unique
tmpfs or FUSE source tag; for the bind, the mounts already there and the directory's
identity); each undo here acts by recorded path, and only on a mount it can prove is ours
(:func:`_is_ours`), so a crash between recording and mounting never unmounts another's.
The FUSE daemon is recorded before it starts (its status file, where it writes its pid and
start time at once), then by pid and start time; its undo works after a SIGKILL of the
harness even while the daemon is stopped (:func:`_undo_fuse_mirror`). Ledger kinds:
``ro-bind-mount``, ``tmpfs-mount``, ``filler-file``, ``fuse-mirror``, ``fuse-outage``, ``fuse-slow``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faultdrill.errors import FaultError
from faultdrill.host import owned, procfs
from faultdrill.host.owned import MIRROR_MODULE
from faultdrill.ledger import PATH, undoer

__all__ = [
    "FILLER",
    "MIRROR_FSTYPE",
    "MIRROR_MODULE",
    "bind_entry",
    "connection_id",
    "dir_identity",
    "fill_file",
    "is_mount_point",
    "mirror_entry",
    "mount_namespace",
    "mounts_at",
    "read_status",
    "run",
    "tmpfs_entry",
    "wait_until",
]

FILLER = ".faultdrill-fill"


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


def run(argv: list[str]) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FaultError(f"{' '.join(argv)}: {exc}") from exc
    if done.returncode != 0:
        raise FaultError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


def _umount(path: str) -> None:
    """Unmount the top mount at ``path``; lazily if it is busy (a save holding a file)."""
    try:
        run(["umount", path])
    except FaultError as exc:
        if "busy" not in str(exc):
            raise
        run(["umount", "-l", path])


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


@undoer("ro-bind-mount", owns={"path": PATH})
def _undo_ro_bind(data: dict[str, Any]) -> None:
    """Unmount the read-only bind if it is ours (:func:`_is_ours`): the directory underneath
    is as it was. Any other mount at the path is left alone."""
    if _our_mount_on_top(data):
        _umount(str(data["path"]))


@undoer("tmpfs-mount", owns={"path": PATH, "keep_copy": PATH, "source": owned.MOUNT_TAG})
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


@undoer("filler-file", owns={"path": PATH})
def _undo_filler(data: dict[str, Any]) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(str(data["path"]))


# --- the FUSE mirror (mode unreachable) ----------------------------------------------------

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
        run(["mount", "-t", "fusectl", "faultdrill-fusectl", tmp])
        try:
            with contextlib.suppress(FileNotFoundError):
                Path(tmp, str(conn), "abort").write_text("1")
        finally:
            run(["umount", tmp])
    finally:
        os.rmdir(tmp)


def wait_until(pred: Callable[[], bool], timeout: float) -> bool:
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
    if not wait_until(lambda: not procfs.alive(pid, start), 2.0):
        procfs.kill_checked(pid, start, signal.SIGKILL)
        if not wait_until(lambda: not procfs.alive(pid, start), 5.0):
            raise FaultError(
                f"the FUSE mirror daemon {pid} survived SIGKILL (state "
                f"{procfs.proc_state(pid)}); run `faultdrill cleanup` again"
            )
    if procfs.parent_pid(pid) == os.getpid():
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


@undoer(
    "fuse-mirror",
    owns={
        "path": PATH,
        "log": PATH,
        "source": owned.MOUNT_TAG,
        "status": owned.FUSE_STATUS,
        "pid": owned.FUSE_DAEMON,
    },
)
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
        run(["umount", "--lazy", "--no-canonicalize", str(path)])
    if daemon is not None:
        _end_daemon(*daemon)


@undoer("fuse-outage", owns={"status": owned.FUSE_STATUS, "pid": owned.FUSE_DAEMON})
def _undo_fuse_outage(data: dict[str, Any]) -> None:
    """The server answers again: SIGCONT (hang), SIGUSR2 (error), to the recorded daemon
    only (pid and start time). A daemon that is gone has nothing to resume; the mirror's
    own undo deals with its mount."""
    pid, start = int(data["pid"]), int(data["start_time"])
    if not procfs.alive(pid, start):
        return
    procfs.kill_checked(pid, start, signal.SIGCONT)
    if not wait_until(lambda: procfs.proc_state(pid) != "T", 2.0):
        raise FaultError(f"the FUSE mirror daemon {pid} is still stopped after SIGCONT")
    if data.get("server") == "error":
        procfs.kill_checked(pid, start, signal.SIGUSR2)
        if not wait_until(lambda: read_status(str(data["status"])).get("state") != "failing", 2.0):
            raise FaultError(f"the FUSE mirror daemon {pid} did not resume normal service")


@undoer("fuse-slow", owns={"status": owned.FUSE_STATUS, "pid": owned.FUSE_DAEMON})
def _undo_fuse_slow(data: dict[str, Any]) -> None:
    """The server answers at full speed again: SIGUSR2 (normal service, which clears the
    delay) to the recorded daemon only (pid and start time). A daemon that is gone delays
    nothing; the mirror's own undo deals with its mount."""
    pid, start = int(data["pid"]), int(data["start_time"])
    if not procfs.alive(pid, start):
        return
    procfs.kill_checked(pid, start, signal.SIGCONT)  # a stopped daemon reads no signal
    procfs.kill_checked(pid, start, signal.SIGUSR2)
    if not wait_until(lambda: read_status(str(data["status"])).get("state") != "slow", 2.0):
        raise FaultError(f"the FUSE mirror daemon {pid} did not end its delay")


# --- filling, and the mount namespace of a process -------------------------------------


def fill_file(path: Path, size: int) -> None:
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


def mount_namespace(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/mnt").st_ino
    except OSError:
        return None
