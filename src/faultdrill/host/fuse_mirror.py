"""A FUSE passthrough of one directory: the checkpoint directory served as if through a
network filesystem, so that a storage outage can make its "server" unreachable.

Run as its own process, in its own session::

    python -m faultdrill.host.fuse_mirror SRC MOUNTPOINT STATUS --fsname TAG

* ``SRC``: the directory mirrored, as ``fd:N`` (a directory descriptor inherited from the
  caller, opened before the mount covered the directory) or a path (opened here, before
  mounting). Every operation works relative to that descriptor (``*at`` calls), so the
  mirror may be mounted over ``SRC`` itself and never reads its own mount.
* ``MOUNTPOINT``: where the mirror is mounted (usually ``SRC`` itself).
* ``STATUS``: a JSON file outside the mount that the daemon rewrites atomically: ``pid``,
  ``start_time``, ``fsname`` and ``state``: ``starting``, ``mounted`` (FUSE init ran),
  ``failing``, ``slow`` or ``serving`` (after a switch), ``exited``; and the delay in
  force (``delay_ms``, ``delay_ops``).
* ``TAG``: the mount's source in ``/proc/self/mountinfo``: the proof an undo uses that the
  FUSE mount at the path is this daemon's.

Nothing is cached here: a write returns once ``pwrite`` on the underlying file returned, an
``fsync`` is an ``fsync`` of the underlying file, so every write acknowledged through the
mirror is in the underlying directory, whatever happens to the daemon afterwards.

Control, by signals (the only channel left to ``faultdrill cleanup`` after a crash):

* ``SIGSTOP`` / ``SIGCONT``: the server hangs (every request blocks, as on an NFS hard
  mount whose server is down) / answers again;
* ``SIGUSR1`` / ``SIGUSR2``: every request is answered ``EIO`` (as on a soft mount whose
  server is gone) / normal service again (no failing, no delay); acknowledged in ``STATUS``;
* ``SIGWINCH``: read the delay file beside ``STATUS`` (:func:`delay_file`: JSON
  ``{"ms": N, "ops": "write"|"all"}``) and from then on answer each request of that class
  ``N`` ms late (a slow server: ``write`` delays what changes the directory, ``all`` every
  request); a missing or malformed file, or ``ms`` 0, means no delay. The delay is bounded
  (:data:`MAX_DELAY_MS`) and acknowledged in ``STATUS`` (``state`` ``slow``, ``delay_ms``,
  ``delay_ops``);
* ``SIGTERM``, ``SIGINT``, ``SIGHUP``: libfuse unmounts the mount point and exits. The
  harness never uses these (libfuse unmounts by path); it unmounts what it proves its own,
  then ``SIGKILL``\\ s the daemon.

Needs fusepy (``pip install 'faultdrill[storage]'``), libfuse2 and ``/dev/fuse``; fusepy is
imported only by :func:`main`, so this module's helpers import without it.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["FUSE_SUPER_MAGIC", "MAX_DELAY_MS", "Mirror", "delay_file", "main", "write_status"]

FUSE_SUPER_MAGIC = 0x65735546
#: Requests still answered while failing: closing what is open is the client's cleanup,
#: not a call to the server, and must not leak descriptors here.
_ALWAYS = frozenset({"init", "destroy", "release", "releasedir"})
#: Requests that change the directory: what ``ops: write`` delays.
_WRITES = frozenset(
    {
        "chmod",
        "chown",
        "create",
        "fsync",
        "fsyncdir",
        "link",
        "mkdir",
        "mknod",
        "rename",
        "rmdir",
        "symlink",
        "truncate",
        "unlink",
        "utimens",
        "write",
    }
)
#: The longest delay per request the daemon accepts (longer asks are cut to it).
MAX_DELAY_MS = 60_000
_STAT_KEYS = (
    "st_mode",
    "st_ino",
    "st_dev",
    "st_nlink",
    "st_uid",
    "st_gid",
    "st_size",
    "st_blocks",
    "st_blksize",
    "st_rdev",
)


def write_status(path: Path, **facts: Any) -> None:
    """Replace ``path`` with ``facts`` as JSON (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(facts) + "\n")
    os.replace(tmp, path)


def delay_file(status: Path) -> Path:
    """The delay file the daemon whose status file is ``status`` reads on SIGWINCH."""
    return status.with_name(status.name + ".delay")


def read_delay(path: Path) -> tuple[float, frozenset[str] | None]:
    """(seconds, the requests delayed: None for all) from a delay file; (0, empty) when it is
    missing or malformed (no delay)."""
    try:
        raw = json.loads(path.read_text()[:4096])
        ms, ops = raw["ms"], raw.get("ops", "write")
    except (OSError, ValueError, TypeError, KeyError):
        return 0.0, frozenset()
    if not isinstance(ms, int) or isinstance(ms, bool) or ms <= 0 or ops not in ("write", "all"):
        return 0.0, frozenset()
    return min(ms, MAX_DELAY_MS) / 1000.0, None if ops == "all" else _WRITES


def _start_time(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(raw[raw.rfind(")") + 2 :].split()[19])


class Mirror:
    """The fusepy operations of a passthrough to the directory open as ``root``.

    Callable as fusepy expects (``mirror(op, path, *args)``); a handler that raises OSError
    answers the request with its errno. ``failing`` makes every request but the closing
    ones fail with EIO; ``delay_s`` answers each request in ``delayed`` (None: all but the
    closing ones) that much later."""

    use_ns = True  # fusepy: times in nanoseconds

    def __init__(self, root: int, status: Path, fsname: str) -> None:
        self.root = root
        self.status = status
        self.fsname = fsname
        self.failing = False
        self.delay_s = 0.0
        self.delayed: frozenset[str] | None = frozenset()
        self.pid = os.getpid()
        self.start_time = _start_time(self.pid)

    def report(self, state: str) -> None:
        write_status(
            self.status,
            pid=self.pid,
            start_time=self.start_time,
            fsname=self.fsname,
            state=state,
            delay_ms=round(self.delay_s * 1000),
            delay_ops="all" if self.delayed is None else "write",
        )

    def __call__(self, op: str, path: str, *args: Any) -> Any:
        if op not in _ALWAYS:
            if self.delay_s and (self.delayed is None or op in self.delayed):
                time.sleep(self.delay_s)  # this request's thread only: others overlap
            if self.failing:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
        return getattr(self, op)(path, *args)

    @staticmethod
    def rel(path: str) -> str:
        """A FUSE path (``/a/b``, normalised by the kernel) relative to the root fd."""
        return path.lstrip("/") or "."

    # --- lifecycle --------------------------------------------------------------------

    def init(self, path: str) -> None:
        self.report("mounted")

    def destroy(self, path: str) -> None:
        pass

    # --- metadata ---------------------------------------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = (
            os.fstat(fh)
            if fh is not None
            else os.stat(self.rel(path), dir_fd=self.root, follow_symlinks=False)
        )
        out: dict[str, Any] = {k: getattr(st, k) for k in _STAT_KEYS}
        out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return out

    def access(self, path: str, amode: int) -> None:
        if not os.access(self.rel(path), amode, dir_fd=self.root):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))

    def statfs(self, path: str) -> dict[str, int]:
        st = os.fstatvfs(self.root)
        keys = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree")
        return {k: getattr(st, k) for k in (*keys, "f_favail", "f_flag", "f_namemax")}

    def chmod(self, path: str, mode: int) -> None:
        os.chmod(self.rel(path), mode, dir_fd=self.root)

    def chown(self, path: str, uid: int, gid: int) -> None:
        os.chown(self.rel(path), uid, gid, dir_fd=self.root, follow_symlinks=False)

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> None:
        rel = self.rel(path)
        if times is None:
            os.utime(rel, dir_fd=self.root, follow_symlinks=False)
        else:
            os.utime(rel, ns=times, dir_fd=self.root, follow_symlinks=False)

    def readlink(self, path: str) -> str:
        return os.readlink(self.rel(path), dir_fd=self.root)

    # --- names ------------------------------------------------------------------------

    def mkdir(self, path: str, mode: int) -> None:
        os.mkdir(self.rel(path), mode, dir_fd=self.root)

    def rmdir(self, path: str) -> None:
        os.rmdir(self.rel(path), dir_fd=self.root)

    def unlink(self, path: str) -> None:
        os.unlink(self.rel(path), dir_fd=self.root)

    def rename(self, old: str, new: str) -> None:
        os.rename(self.rel(old), self.rel(new), src_dir_fd=self.root, dst_dir_fd=self.root)

    def symlink(self, target: str, source: str) -> None:
        """fusepy: create ``target`` as a symlink whose content is ``source``."""
        os.symlink(source, self.rel(target), dir_fd=self.root)

    def link(self, target: str, source: str) -> None:
        """fusepy: create ``target`` as a hard link to the existing ``source``."""
        os.link(
            self.rel(source),
            self.rel(target),
            src_dir_fd=self.root,
            dst_dir_fd=self.root,
            follow_symlinks=False,
        )

    def mknod(self, path: str, mode: int, dev: int) -> None:
        os.mknod(self.rel(path), mode, dev, dir_fd=self.root)

    # --- directories ------------------------------------------------------------------

    def opendir(self, path: str) -> int:
        return os.open(self.rel(path), os.O_RDONLY | os.O_DIRECTORY, dir_fd=self.root)

    def readdir(self, path: str, fh: int) -> Iterator[str]:
        yield from (".", "..")
        yield from os.listdir(fh)

    def releasedir(self, path: str, fh: int) -> None:
        os.close(fh)

    def fsyncdir(self, path: str, datasync: int, fh: int) -> None:
        os.fsync(fh)

    # --- files ------------------------------------------------------------------------

    def create(self, path: str, mode: int) -> int:
        return os.open(self.rel(path), os.O_RDWR | os.O_CREAT, mode, dir_fd=self.root)

    def open(self, path: str, flags: int) -> int:
        # offsets come from the kernel: O_APPEND here would move every pwrite to the end
        keep = flags & ~(os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOCTTY)
        return os.open(self.rel(path), keep, dir_fd=self.root)

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        return os.pwrite(fh, data, offset)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> None:
        if fh is not None:
            os.ftruncate(fh, length)
            return
        fd = os.open(self.rel(path or "/"), os.O_WRONLY, dir_fd=self.root)
        try:
            os.ftruncate(fd, length)
        finally:
            os.close(fd)

    def flush(self, path: str | None, fh: int) -> None:
        pass  # nothing is buffered here

    def fsync(self, path: str | None, datasync: int, fh: int) -> None:
        if datasync:
            os.fdatasync(fh)
        else:
            os.fsync(fh)

    def release(self, path: str | None, fh: int) -> None:
        os.close(fh)


def _control(mirror: Mirror, wakeup: int) -> None:
    """Switch between failing, slow and serving on SIGUSR1/SIGWINCH/SIGUSR2, and say so in
    the status file. The signals arrive through Python's wakeup fd: whichever thread the kernel picks
    (libfuse's, or one a library started at import), the C-level handler writes the signal
    number there, while the main thread stays inside libfuse's loop."""
    while True:
        for sig in os.read(wakeup, 64):
            if sig == signal.SIGWINCH:
                mirror.delay_s, mirror.delayed = read_delay(delay_file(mirror.status))
            elif sig in (signal.SIGUSR1, signal.SIGUSR2):
                mirror.failing = sig == signal.SIGUSR1
                if not mirror.failing:
                    mirror.delay_s, mirror.delayed = 0.0, frozenset()
            else:
                continue
            state = "failing" if mirror.failing else "slow" if mirror.delay_s else "serving"
            mirror.report(state)


def _open_source(src: str) -> int:
    if src.startswith("fd:"):
        fd = int(src[3:])
        os.set_inheritable(fd, False)
        return fd
    return os.open(src, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m faultdrill.host.fuse_mirror",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("src", help="the directory mirrored: fd:N or a path")
    parser.add_argument("mountpoint")
    parser.add_argument("status", type=Path, help="the JSON status file (outside the mount)")
    parser.add_argument("--fsname", default="faultdrill-mirror", help="the mount's source tag")
    args = parser.parse_args(argv)
    try:
        import fuse  # fusepy; loads libfuse.so.2
    except (ImportError, OSError) as exc:
        fix = "pip install 'faultdrill[storage]'; apt-get install fuse libfuse2"
        print(f"fuse_mirror: {exc} ({fix})", file=sys.stderr)
        return 2
    root = _open_source(args.src)
    mirror = Mirror(root, args.status, args.fsname)
    mirror.report("starting")
    wakeup, notify = os.pipe()
    os.set_blocking(notify, False)
    for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH):
        signal.signal(sig, lambda _s, _f: None)  # caught (never the default: terminate)
    signal.set_wakeup_fd(notify, warn_on_full_buffer=False)
    threading.Thread(target=_control, args=(mirror, wakeup), name="control", daemon=True).start()
    try:
        fuse.FUSE(
            mirror,
            args.mountpoint,
            foreground=True,
            fsname=args.fsname,
            subtype="faultdrill",
            nonempty=True,
            allow_other=True,
            hard_remove=True,
            big_writes=True,
            max_write=1 << 20,
        )
    finally:
        with contextlib.suppress(OSError):
            mirror.report("exited")
    return 0


if __name__ == "__main__":
    sys.exit(main())
