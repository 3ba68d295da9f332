"""Reading and signalling processes through /proc and cgroup v1, safely.

A pid alone is not an identity (pids are reused), so everything here pairs a pid with its
start time (field 22 of ``/proc/<pid>/stat``, in clock ticks since boot) and refuses to
signal a pid whose start time changed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "FREEZER_ROOT",
    "Cgroup",
    "alive",
    "cmdline",
    "cwd",
    "environ",
    "identity",
    "kill_checked",
    "listening_ports",
    "pids_with_env",
    "proc_state",
    "session_id",
    "session_members",
    "start_time",
]

FREEZER_ROOT = Path("/sys/fs/cgroup/freezer")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parens: split after the last ')'
    return raw[raw.rfind(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def parent_pid(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def identity(pid: int) -> tuple[int, int, int] | None:
    """(start time, parent pid, session id) from one read of ``stat``; None if gone."""
    fields = _stat_fields(pid)
    return (int(fields[19]), int(fields[1]), int(fields[3])) if fields else None


def session_id(pid: int) -> int | None:
    """The session the process belongs to (its leader's pid; kept after the leader died)."""
    fields = _stat_fields(pid)
    return int(fields[3]) if fields else None


def proc_state(pid: int) -> str | None:
    """One-letter state (R, S, D, T, Z...), None if gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def alive(pid: int, start: int | None = None) -> bool:
    """True if ``pid`` exists, is not a zombie, and (if given) has this start time."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return start is None or int(fields[19]) == start


def environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, val = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = val.decode(errors="replace")
    return out


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [p.decode(errors="replace") for p in raw.split(b"\0") if p]


def cwd(pid: int) -> Path | None:
    """The process's working directory, None if gone or not readable."""
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None


def session_members(sid: int) -> list[int]:
    """Every live pid whose session is ``sid`` (the leader included, if alive)."""
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and session_id(int(entry.name)) == sid and alive(int(entry.name)):
            out.append(int(entry.name))
    return out


def kill_checked(pid: int, start: int | None, sig: int) -> bool:
    """Send ``sig`` if the pid is still the same process. Returns whether it was sent."""
    if not alive(pid, start):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def pids_with_env(key: str, value: str) -> list[int]:
    """Every live pid whose environment has ``key=value`` (the recorded run id)."""
    needle = f"{key}={value}".encode()
    out = []
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            raw = Path(entry.path, "environ").read_bytes()
        except OSError:
            continue
        if needle in raw.split(b"\0") and alive(int(entry.name)):
            out.append(int(entry.name))
    return out


def listening_ports(pids: Iterable[int]) -> dict[int, list[int]]:
    """pid -> TCP ports it listens on (sockets looked up in that pid's own netns)."""
    out: dict[int, list[int]] = {}
    for pid in pids:
        inodes = set()
        try:
            for fd in os.scandir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(fd.path)
                    if link.startswith("socket:["):
                        inodes.add(link[8:-1])
        except OSError:
            continue
        if not inodes:
            continue
        ports = []
        for table in ("tcp", "tcp6"):
            try:
                lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                cols = line.split()
                if len(cols) > 9 and cols[3] == "0A" and cols[9] in inodes:
                    ports.append(int(cols[1].rsplit(":", 1)[1], 16))
        if ports:
            out[pid] = sorted(set(ports))
    return out


class Cgroup:
    """A cgroup v1 freezer group: membership survives setsid, so it finds every process
    of a node, including workers in their own sessions and detached children."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @staticmethod
    def available() -> bool:
        return FREEZER_ROOT.is_dir() and os.access(FREEZER_ROOT, os.W_OK)

    def create(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    def exists(self) -> bool:
        return self.path.is_dir()

    def pids(self) -> list[int]:
        try:
            text = (self.path / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def freeze(self) -> None:
        (self.path / "freezer.state").write_text("FROZEN")

    def thaw(self) -> None:
        with contextlib.suppress(OSError):
            (self.path / "freezer.state").write_text("THAWED")

    def state(self) -> str:
        try:
            return (self.path / "freezer.state").read_text().strip()
        except OSError:
            return "GONE"

    def kill_all(self, timeout_s: float = 5.0) -> list[int]:
        """Thaw, SIGKILL every member until none is left; returns pids still present."""
        if not self.exists():
            return []
        self.thaw()
        deadline = time.monotonic() + timeout_s
        while True:
            pids = self.pids()
            if not pids:
                return []
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                return pids
            time.sleep(0.05)

    def remove(self) -> None:
        """Kill what is left and remove the group (children first). Idempotent."""
        if not self.exists():
            return
        for child in sorted((p for p in self.path.iterdir() if p.is_dir()), reverse=True):
            Cgroup(child).remove()
        left = self.kill_all()
        if left:
            raise OSError(f"processes {left} survived SIGKILL in {self.path}")
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)  # exiting processes are still being reaped
        self.path.rmdir()
