"""Storage actions on a checkpoint directory of this host, for any platform.

:class:`HostStorage` gives a platform the ``StorageActions`` and ``ReachesCheckpoints``
of :mod:`faultdrill.platforms.api` when the job's checkpoint directory is a directory of
this host and the job's processes see this host's mounts: the local platform, and any
embedded cluster (Slurm, Ray, Kubernetes) whose nodes are network namespaces of this host
entered with ``nsenter --net`` only. It makes the directory

* ``read-only``: a bind mount of the directory onto itself, remounted read-only (saves fail
  with ``EROFS``); undone by unmounting the bind, which uncovers the directory as it was;
* ``full``: the directory is a small tmpfs from the start of the item (``storage_prepare``),
  filled until only ``leave_free_kb`` remain (saves fail with ``ENOSPC``, a pointer file
  still fits); undone by deleting the filler. At the end of the item the tmpfs is unmounted
  and its contents copied back into the directory, so the run keeps its checkpoints;
* ``unreachable``: the directory is served through a FUSE passthrough for the whole item
  (``storage_prepare`` mounts :mod:`~faultdrill.host.fuse_mirror` over the
  directory itself; the daemon mirrors the directory underneath through a descriptor
  opened before mounting), so the job writes its checkpoints as through a network
  filesystem; the outage makes that server ``hang`` (SIGSTOP: every request blocks, as on
  an NFS hard mount whose server is down) or ``error`` (every request answered ``EIO``, as
  on a soft mount). Undone by SIGCONT / normal service; at the end of the item the mount is
  lazily unmounted and the daemon stopped. While the server hangs, the harness reads the
  directory underneath through its own descriptor (:meth:`HostStorage.checkpoint_view`);
* ``slow`` (:meth:`HostStorage.storage_slow`): the same FUSE mirror, whose server keeps
  answering but each request ``latency_ms`` late (the mirror's delay knob: a delay file and
  SIGWINCH); undone by SIGUSR2 (normal service).

The mounts, their proofs of ownership and their undo are :mod:`~faultdrill.platforms.
local.mounts`. Mounts are made in the harness's mount namespace; an action refuses to act
when a job process lives in another one (a mount made here would not reach it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultdrill.errors import FaultError
from faultdrill.host import procfs
from faultdrill.host.api import Change, Note, StorageMode
from faultdrill.host.fuse_mirror import delay_file, write_status
from faultdrill.host.mounts import (
    FILLER,
    MIRROR_FSTYPE,
    MIRROR_MODULE,
    bind_entry,
    connection_id,
    fill_file,
    mirror_entry,
    mount_namespace,
    mounts_at,
    read_status,
    run,
    tmpfs_entry,
    wait_until,
)

if TYPE_CHECKING:
    from faultdrill.host.api import Replica

__all__ = ["HostStorage", "fuse_missing"]

_PROBE = ".faultdrill-probe"


def fuse_missing() -> list[str]:
    """What this machine lacks to serve a directory through FUSE, each with its fix (empty:
    nothing). Checked before a run, so a plan needing it fails before any drill."""
    out = []
    if os.geteuid() != 0:
        out.append("root (the FUSE mirror is mounted over the checkpoint directory)")
    if not os.path.exists("/dev/fuse"):
        out.append("/dev/fuse (load the fuse kernel module: modprobe fuse)")
    if shutil.which("fusermount") is None:
        out.append("fusermount (apt-get install -y --no-install-recommends fuse libfuse2)")
    try:
        import fuse  # fusepy; importing it loads libfuse.so.2

        if not hasattr(fuse, "FUSE"):
            raise ImportError("the importable 'fuse' module is not fusepy")
    except ImportError:
        out.append("fusepy (pip install 'faultdrill[storage]')")
    except OSError:  # fusepy without the C library
        out.append("libfuse2 (apt-get install -y --no-install-recommends fuse libfuse2)")
    return out


@dataclass
class _Mirror:
    """A FUSE mirror started over a checkpoint directory, and the harness's own descriptor
    of the directory underneath (None once released)."""

    status: str
    under: int | None
    pid: int | None = None
    start_time: int | None = None


def _write_error(path: Path) -> str:
    """The error a small write to ``path`` gets ('' if it succeeded: then it is removed)."""
    try:
        path.write_bytes(b"")
    except OSError as exc:
        return os.strerror(exc.errno) if exc.errno else str(exc)
    path.unlink()
    return ""


class HostStorage:
    """Mixin: storage outages on a checkpoint directory of this host (see the module
    docstring). The class it is mixed into provides ``replicas()`` (a ``Platform``)."""

    if TYPE_CHECKING:

        def replicas(self) -> list[Replica]: ...

    @property
    def _mirrors(self) -> dict[str, _Mirror]:
        mirrors: dict[str, _Mirror] = self.__dict__.setdefault("_host_storage_mirrors", {})
        return mirrors

    # --- checks before acting ---------------------------------------------------------------

    @staticmethod
    def _mountable(ckpt: Path) -> None:
        if os.geteuid() != 0:
            raise FaultError("storage-outage needs root (it mounts over the checkpoint dir)")
        if not ckpt.is_dir():
            raise FaultError(f"checkpoint directory {ckpt} does not exist")

    def _same_mounts(self) -> None:
        """Refuse when a job process lives in another mount namespace than the harness."""
        mine = mount_namespace("self")
        for rep in self.replicas():
            theirs = mount_namespace(rep.pid)
            if theirs is not None and theirs != mine:
                raise FaultError(
                    f"job process {rep.pid} (node {rep.node}) is in another mount namespace; "
                    "a mount made here would not reach it"
                )

    # --- StorageActions ---------------------------------------------------------------------

    def storage_prepare(self, mode: StorageMode, ckpt_dir: Path, *, size_mb: int) -> list[Change]:
        if mode == "read-only":
            return []
        self._mountable(ckpt_dir)
        if mode == "full":
            return [self._tmpfs(ckpt_dir, size_mb)]
        return [self._mirror(ckpt_dir)]

    def _tmpfs(self, ckpt: Path, size_mb: int) -> Change:
        if any(ckpt.iterdir()):
            raise FaultError(f"{ckpt} is not empty; a tmpfs would hide its contents")
        data = tmpfs_entry(ckpt, size_mb)
        source = str(data["source"])
        options = f"size={size_mb}m,mode=0755"

        def apply(note: Note) -> dict[str, Any]:
            run(["mount", "-t", "tmpfs", "-o", options, source, str(ckpt)])
            note(mount_ids=[m["id"] for m in mounts_at(ckpt) if m["source"] == source])
            return {"path": str(ckpt)}

        return Change(
            "tmpfs-mount",
            data,
            f"tmpfs {size_mb}M on {ckpt}",
            f"mount -t tmpfs -o size={size_mb}m {source} {ckpt}",
            apply,
        )

    def _mirror(self, ckpt: Path) -> Change:
        missing = fuse_missing()
        if missing:
            raise FaultError(
                f"a FUSE-served checkpoint directory (storage-outage mode unreachable, "
                f"storage-slow) needs FUSE, which this machine lacks: {missing}"
            )
        data = mirror_entry(ckpt)
        argv = [sys.executable, "-m", MIRROR_MODULE, "fd:{under}", str(ckpt), data["status"]]
        argv += ["--fsname", data["source"]]

        def apply(note: Note) -> dict[str, Any]:
            return self._start_mirror(ckpt, data, argv, note)

        return Change(
            "fuse-mirror",
            data,
            f"FUSE mirror on {ckpt}",
            " ".join(argv).replace("fd:{under}", f"fd:<descriptor of {ckpt}>"),
            apply,
        )

    def _start_mirror(
        self, ckpt: Path, data: dict[str, Any], argv: list[str], note: Note
    ) -> dict[str, Any]:
        """Start the mirror daemon over ``ckpt`` and wait until it serves; prove that a
        write through the mount lands in the directory underneath."""
        under = os.open(ckpt, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        mirror = self._mirrors[str(ckpt)] = _Mirror(status=data["status"], under=under)
        argv = [a.replace("fd:{under}", f"fd:{under}") for a in argv]
        with open(data["log"], "ab") as log:
            proc = subprocess.Popen(
                argv,
                pass_fds=(under,),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        mirror.pid, mirror.start_time = proc.pid, procfs.start_time(proc.pid)
        note(pid=proc.pid, start_time=mirror.start_time)

        def mounted() -> bool:
            if proc.poll() is not None:
                tail = Path(data["log"]).read_text(errors="replace")[-600:].strip()
                raise FaultError(
                    f"the FUSE mirror exited ({proc.returncode}) before mounting: {tail}"
                )
            ours = [m for m in mounts_at(ckpt) if m["source"] == data["source"]]
            return bool(ours) and read_status(data["status"]).get("state") == "mounted"

        if not wait_until(mounted, 20.0):
            raise FaultError(f"the FUSE mirror did not mount on {ckpt} within 20 s")
        mount = next(m for m in mounts_at(ckpt) if m["source"] == data["source"])
        conn = connection_id(mount["dev"])
        note(mount_ids=[mount["id"]], conn=conn)
        probe, seen = ckpt / _PROBE, Path(f"/proc/self/fd/{under}/{_PROBE}")
        probe.write_bytes(b"through the mirror\n")
        mirrored = seen.read_bytes() == b"through the mirror\n"
        probe.unlink()
        if not mirrored:
            raise FaultError(
                f"a write through the FUSE mirror on {ckpt} did not reach the directory"
            )
        return {
            "path": str(ckpt),
            "daemon_pid": proc.pid,
            "source": data["source"],
            "fuse_connection": conn,
        }

    def storage_read_only(self, ckpt_dir: Path) -> list[Change]:
        ckpt = ckpt_dir
        self._mountable(ckpt)
        self._same_mounts()
        data = bind_entry(ckpt)
        known = data["before_ids"]

        def apply(note: Note) -> dict[str, Any]:
            run(["mount", "--bind", str(ckpt), str(ckpt)])
            note(mount_ids=[m["id"] for m in mounts_at(ckpt) if m["id"] not in known])
            run(["mount", "-o", "remount,ro,bind", str(ckpt)])
            error = _write_error(ckpt / _PROBE)
            if not error:
                raise FaultError(f"{ckpt} is still writable after the read-only remount")
            return {"path": str(ckpt), "write_error": error}

        return [
            Change(
                "ro-bind-mount",
                data,
                f"read-only bind on {ckpt}",
                f"mount --bind {ckpt} {ckpt} && mount -o remount,ro,bind {ckpt}",
                apply,
            )
        ]

    def storage_full(self, ckpt_dir: Path, *, leave_free_kb: int) -> list[Change]:
        ckpt = ckpt_dir
        self._mountable(ckpt)
        self._same_mounts()
        if not any(m["fstype"] == "tmpfs" for m in mounts_at(ckpt)):
            raise FaultError(f"{ckpt} is not the small tmpfs prepared for this fault")
        filler = ckpt / FILLER
        st = os.statvfs(ckpt)
        size = max(0, st.f_bavail * st.f_frsize - leave_free_kb * 1024)

        def apply(note: Note) -> dict[str, Any]:
            fill_file(filler, size)
            left = os.statvfs(ckpt)
            return {
                "path": str(ckpt),
                "filler_bytes": size,
                "free_bytes": left.f_bavail * left.f_frsize,
            }

        return [
            Change(
                "filler-file",
                {"path": str(filler)},
                f"filler {filler}",
                f"fallocate -l {size} {filler}",
                apply,
            )
        ]

    def storage_unreachable(self, ckpt_dir: Path, *, server: str) -> list[Change]:
        ckpt = ckpt_dir
        pid, start, status = self._serving_mirror(ckpt)
        data = {"pid": pid, "start_time": start, "server": server, "status": status}

        def hang(note: Note) -> dict[str, Any]:
            procfs.kill_checked(pid, start, signal.SIGSTOP)
            if not wait_until(lambda: procfs.proc_state(pid) == "T", 2.0):
                raise FaultError(f"the FUSE mirror daemon {pid} did not stop")
            return {"path": str(ckpt), "daemon_pid": pid, "daemon_state": "T (stopped)"}

        def fail(note: Note) -> dict[str, Any]:
            procfs.kill_checked(pid, start, signal.SIGUSR1)
            if not wait_until(lambda: read_status(status).get("state") == "failing", 2.0):
                raise FaultError(f"the FUSE mirror daemon {pid} did not switch to failing")
            error = _write_error(ckpt / _PROBE)
            if not error:
                raise FaultError(
                    f"{ckpt} still takes writes after the FUSE server was told to fail"
                )
            return {"path": str(ckpt), "daemon_pid": pid, "write_error": error}

        return [
            Change(
                "fuse-outage",
                data,
                f"FUSE server of {ckpt}: {server}",
                f"kill -STOP {pid}" if server == "hang" else f"kill -USR1 {pid}",
                hang if server == "hang" else fail,
            )
        ]

    def storage_slow(self, ckpt_dir: Path, *, latency_ms: int, ops: str) -> list[Change]:
        ckpt = ckpt_dir
        pid, start, status = self._serving_mirror(ckpt)
        data = {"pid": pid, "start_time": start, "status": status, "latency_ms": latency_ms}
        data["ops"] = ops

        def slow(note: Note) -> dict[str, Any]:
            write_status(delay_file(Path(status)), ms=latency_ms, ops=ops)
            procfs.kill_checked(pid, start, signal.SIGWINCH)

            def acknowledged() -> bool:
                now = read_status(status)
                return now.get("state") == "slow" and now.get("delay_ms") == latency_ms

            if not wait_until(acknowledged, 2.0):
                raise FaultError(f"the FUSE mirror daemon {pid} did not take its delay")
            return {"path": str(ckpt), "daemon_pid": pid}

        return [
            Change(
                "fuse-slow",
                data,
                f"FUSE server of {ckpt}: {latency_ms} ms per {ops} request",
                f'echo \'{{"ms": {latency_ms}, "ops": "{ops}"}}\' > '
                f"{delay_file(Path(status))}; kill -WINCH {pid}",
                slow,
            )
        ]

    def _serving_mirror(self, ckpt: Path) -> tuple[int, int, str]:
        """(pid, start time, status file) of the FUSE mirror prepared on ``ckpt``, checked to
        be running and to serve the directory. Raises FaultError."""
        self._mountable(ckpt)
        self._same_mounts()
        m = self._mirrors.get(str(ckpt))
        if m is None or m.pid is None or not procfs.alive(m.pid, m.start_time):
            raise FaultError(f"the FUSE mirror prepared on {ckpt} is not running")
        if not any(x["fstype"] == MIRROR_FSTYPE for x in mounts_at(ckpt)[-1:]):
            raise FaultError(f"{ckpt} is not served by the FUSE mirror prepared for this fault")
        return m.pid, int(m.start_time or 0), m.status

    def storage_release(self, ckpt_dir: Path) -> None:
        mirror = self._mirrors.get(str(ckpt_dir))
        if mirror is not None and mirror.under is not None:
            os.close(mirror.under)  # the daemon has its own copy
            mirror.under = None

    # --- ReachesCheckpoints -------------------------------------------------------------------

    def checkpoint_view(self, ckpt_dir: Path) -> Path:
        """``ckpt_dir`` itself; while a FUSE mirror serves it, the directory underneath
        through the harness's own descriptor (a read through the mount would block while
        the server does not answer)."""
        mirror = self._mirrors.get(str(ckpt_dir))
        if mirror is not None and mirror.under is not None:
            return Path(f"/proc/self/fd/{mirror.under}")
        return ckpt_dir
