"""Daemons of the test cluster, each in the ledger before it runs, stopped by pid.

:func:`launch` starts a process on a node so that its pid and start time are in the
ledger before its program runs: a shell joins the node's cgroup, then blocks reading one
line from a pipe; the harness records that shell's pid and start time (``exec`` keeps
both), then writes ``go``; only then does the shell ``exec`` into the node's namespace
and the program. If the harness dies before writing, the pipe closes, ``read`` fails and
the shell exits without running anything.

Undo (kind ``k8s-process``, also run by ``faultdrill cleanup``): SIGTERM, wait up to the
recorded grace, SIGKILL, all checked against the recorded start time (a reused pid is
never signalled). A process that is gone already is fine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from faultdrill.errors import PlatformError
from faultdrill.host import owned, procfs
from faultdrill.ledger import SECONDS, undoer

if TYPE_CHECKING:
    from faultdrill.ledger import Ledger

__all__ = ["Daemon", "launch", "stop_pid"]

_GATE = 'echo $$ > "$1" && read -r go && [ "$go" = go ] && shift && exec "$@" </dev/null'


def stop_pid(pid: int, start: int | None, grace_s: float) -> bool:
    """SIGTERM, wait up to ``grace_s``, SIGKILL (each only if still the same process).
    Returns True once it is gone; reaps it when it is this process's child."""

    def gone() -> bool:
        if procfs.parent_pid(pid) == os.getpid() and procfs.proc_state(pid) == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        return not procfs.alive(pid, start)

    if gone():
        return True
    procfs.kill_checked(pid, start, signal.SIGCONT)  # a stopped daemon cannot act on TERM
    procfs.kill_checked(pid, start, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if gone():
            return True
        time.sleep(0.05)
    procfs.kill_checked(pid, start, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        if gone():
            return True
        time.sleep(0.05)
    return gone()


@undoer("k8s-process", owns={"pid": owned.PROCESS, "grace_s": SECONDS})
def _undo_process(data: dict[str, Any]) -> None:
    pid, start = data.get("pid"), data.get("start_time")
    if not isinstance(pid, int):
        return  # recorded, never started
    if not stop_pid(pid, start if isinstance(start, int) else None, float(data.get("grace_s", 5))):
        raise OSError(f"{data.get('name')} (pid {pid}) survived SIGKILL")


@dataclass
class Daemon:
    """One started process: its name, node, Popen, log and ledger entry."""

    name: str
    node: str
    proc: subprocess.Popen[bytes]
    start_time: int | None
    entry: str
    log: IO[bytes]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None and procfs.alive(self.pid, self.start_time)


def launch(
    ledger: Ledger,
    *,
    name: str,
    node: str,
    cgroup: procfs.Cgroup,
    enter: Sequence[str],
    argv: Sequence[str],
    log_path: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    grace_s: float = 5.0,
) -> Daemon:
    """Start ``argv`` on ``node`` (cgroup joined, then ``enter`` + argv), recorded first.
    Raises PlatformError when it cannot be started."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")  # noqa: SIM115  (closed by the owner when it stops the daemon)
    procs_file = str(cgroup.path / "cgroup.procs")
    full = ["/bin/sh", "-c", _GATE, "sh", procs_file, *enter, *argv]
    try:
        proc = subprocess.Popen(
            full,
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        log.close()
        raise PlatformError(f"cannot start {name} on {node}: {exc}") from exc
    start = procfs.start_time(proc.pid)
    eid = ledger.record(
        "k8s-process",
        {
            "name": name,
            "node": node,
            "pid": proc.pid,
            "start_time": start,
            "grace_s": grace_s,
            "argv0": str(argv[0]),
        },
        f"{name} on {node} (pid {proc.pid})",
    )
    assert proc.stdin is not None
    try:
        proc.stdin.write(b"go\n")
        proc.stdin.close()
    except OSError as exc:  # the gate shell died (e.g. could not join the cgroup)
        proc.wait()
        log.close()
        ledger.revert(eid)
        tail = log_path.read_text(errors="replace")[-400:].strip()
        raise PlatformError(f"cannot start {name} on {node}: {exc}; log: {tail}") from exc
    ledger.mark_applied(eid)
    return Daemon(name, node, proc, start, eid, log)
