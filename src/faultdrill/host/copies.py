"""A copy of a rank's replica, started on its node as the launcher started the original.

What a platform that failed to stop an old replica leaves running, made on purpose (the
``stale-copy`` harness control, ability ``replica-copy``): the original's command line,
environment (``RANK``, ``MASTER_ADDR``/``MASTER_PORT`` of its rendezvous round, the run's
``FAULTDRILL_*`` handles) and working directory, read from /proc, started with
:meth:`NodeCluster.launch <faultdrill.host.cluster.NodeCluster.launch>` on the
original's node (its cgroup, its network namespace) in a session of its own, its output in
``logs/copy-<node>-rank<R>.log``.

Ledger kind ``replica-copy``: recorded before the copy starts; ``pid`` and ``start_time``
are noted once it runs. The undo kills the copy and every process of its session that
carries the run's id (its DataLoader workers, helpers), never anything else.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultdrill.host import owned, procfs
from faultdrill.host.api import Change, Note, Replica
from faultdrill.ledger import THIS_RUN, undoer

if TYPE_CHECKING:
    from faultdrill.host.cluster import NodeCluster

__all__ = ["copy_change", "reap"]


@undoer("replica-copy", owns={"pid": owned.PROCESS, "run_id": THIS_RUN})
def _undo_copy(data: dict[str, Any]) -> None:
    """Kill the copy and the processes of its session that belong to the run."""
    if data.get("pid") is None:
        return  # recorded, never started
    pid, start, run_id = int(data["pid"]), data.get("start_time"), str(data["run_id"])
    for _ in range(3):
        members = [
            p
            for p in procfs.session_members(pid)
            if procfs.environ(p).get("FAULTDRILL_RUN_ID") == run_id
        ]
        if not members:
            return
        for p in members:
            procfs.kill_checked(
                p, int(start) if p == pid and start is not None else None, signal.SIGKILL
            )
        time.sleep(0.1)
    raise OSError(f"copy pid {pid} (or its session) survived SIGKILL")


def copy_change(
    cluster: NodeCluster, replica: Replica, log_dir: Path, started: list[subprocess.Popen[bytes]]
) -> Change:
    """A copy of ``replica`` (see the module docstring); the Popen of each copy started is
    appended to ``started`` so the platform can reap it (:func:`reap`)."""
    pid, node, rank = replica.pid, replica.node, replica.rank
    log_path = log_dir / f"copy-{node}-rank{rank}.log"

    def apply(note: Note) -> dict[str, Any]:
        argv, env, cwd = procfs.cmdline(pid), procfs.environ(pid), procfs.cwd(pid)
        if not argv or cwd is None or not procfs.alive(pid, replica.start_time):
            raise ProcessLookupError(f"replica pid {pid} is gone: nothing to copy")
        log_dir.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            proc = cluster.launch(node, argv, env=env, cwd=cwd, log=log)
        started.append(proc)
        note(pid=proc.pid, start_time=procfs.start_time(proc.pid))
        return {
            "copy_pid": proc.pid,
            "copy_of": pid,
            "rank": rank,
            "node": node,
            "log": str(log_path),
        }

    data = {"copy_of": pid, "node": node, "rank": rank, "run_id": cluster.run_id}
    label = f"copy of pid {pid} (rank {rank}) on node {node}"
    script = f'exec env -i "$@" {shlex.join(procfs.cmdline(pid)) or "<its command line>"}'
    command = (
        f"cd {shlex.quote(str(procfs.cwd(pid) or '.'))} && xargs -0 -a /proc/{pid}/environ "
        f"sh -c {shlex.quote(script)} sh &   # in node {node}'s cgroup and namespace"
    )
    return Change("replica-copy", data, label, command, apply, after_undo=lambda: reap(started))


def reap(started: list[subprocess.Popen[bytes]]) -> None:
    """Collect the exit status of the copies the undo killed (a zombie would still count
    as a process of the job); those still running stay in ``started``."""
    for proc in started:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2)
    started[:] = [p for p in started if p.returncode is None]
