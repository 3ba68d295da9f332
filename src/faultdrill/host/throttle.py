"""A straggler on this host: one replica's process tree held to a CPU quota.

The replica and its descendants move into a cgroup v1 ``cpu`` group of their own,
``/sys/fs/cgroup/cpu/faultdrill/<run id>/<name>``, whose ``cpu.cfs_quota_us`` is
``cpu_percent`` % of ``cpu.cfs_period_us``; processes they start while throttled are born
in it. The ``cpu`` hierarchy is separate from the ``freezer`` one that holds a node's
processes (:mod:`faultdrill.host.cluster`), so freezing or killing a node still finds them.

Ledger kind (replayed by ``faultdrill cleanup`` too; its data never changes meaning):

=================  ==========================================================================
``cpu-throttle``   a cpu group: its quota lifted, its members moved back to ``home`` (the
                   cpu group the replica was in, a path inside the cpu hierarchy), the group
                   removed (and the run's empty parent with it)
=================  ==========================================================================
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from faultdrill import safepath
from faultdrill.errors import NotOursError
from faultdrill.host import procfs
from faultdrill.ledger import RunScope, undoer
from faultdrill.platforms.api import Change, Note, Replica

__all__ = [
    "CPU_ROOT",
    "PERIOD_US",
    "cpu_controller_missing",
    "cpu_group_of",
    "process_tree",
    "throttle_change",
]

CPU_ROOT = Path("/sys/fs/cgroup/cpu")
#: The CFS period the quota is a share of (the kernel's default, 100 ms).
PERIOD_US = 100_000


def cpu_controller_missing() -> str | None:
    """Why this machine cannot throttle a process tree, with the fix; None if it can."""
    if os.geteuid() != 0:
        return "throttling a rank needs root (a cgroup of its own)"
    if not (CPU_ROOT / "cpu.cfs_quota_us").is_file():
        return (
            f"no cgroup v1 cpu controller at {CPU_ROOT} (mount it: mount -t cgroup -o cpu "
            f"cgroup {CPU_ROOT})"
        )
    if not os.access(CPU_ROOT, os.W_OK):
        return f"{CPU_ROOT} is not writable (run as root on a host that delegates it)"
    return None


def run_cpu_root(run_id: str) -> Path:
    """The run's own part of the cpu hierarchy (every throttle group is below it)."""
    return CPU_ROOT / "faultdrill" / run_id


def cpu_group_of(pid: int) -> str | None:
    """The cpu cgroup ``pid`` is in, as ``/proc/<pid>/cgroup`` says it (``/`` for the
    root), None when it is gone or has none."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        if "cpu" in controllers.split(","):
            return path or "/"
    return None


def process_tree(pid: int, start: int | None) -> list[int]:
    """``pid`` (if it is still the process that started at ``start``) and every live
    descendant of it, parents first. Empty when it is gone."""
    if not procfs.alive(pid, start):
        return []
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            parent = procfs.parent_pid(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        current = todo.pop(0)
        out.append(current)
        todo.extend(sorted(children.get(current, [])))
    return out


def _home_dir(home: str) -> Path:
    """The directory of cpu cgroup ``home`` (a path as ``/proc/<pid>/cgroup`` writes it)."""
    return CPU_ROOT.joinpath(*[p for p in home.split("/") if p])


def throttle_change(run_id: str, replica: Replica, cpu_percent: int, command_host: str) -> Change:
    """Hold ``replica``'s process tree to ``cpu_percent`` % of one core (ledger kind
    ``cpu-throttle``). ``command_host``: how an operator reaches the node (``""`` on this
    host, ``ssh n2 `` elsewhere), for the runbook's command. Its ``apply`` raises
    ProcessLookupError when the replica is gone and OSError when the group cannot be made."""
    group = run_cpu_root(run_id) / f"slow-r{replica.rank}-p{replica.pid}"
    quota = PERIOD_US * cpu_percent // 100
    home = cpu_group_of(replica.pid) or "/"
    data = {"path": str(group), "home": home, "pid": replica.pid}

    def apply(note: Note) -> dict[str, Any]:
        tree = process_tree(replica.pid, replica.start_time)
        if not tree:
            raise ProcessLookupError(f"process {replica.pid} exited before it could be throttled")
        group.mkdir(parents=True, exist_ok=True)
        (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(quota))
        moved = []
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):  # exited meanwhile
                (group / "cgroup.procs").write_text(str(pid))
                moved.append(pid)
        note(moved=moved)
        return {
            "pid": replica.pid,
            "rank": replica.rank,
            "node": replica.node,
            "cpu_percent": cpu_percent,
            "throttled": len(moved),
            "cgroup": str(group),
            "quota_us": quota,
            "period_us": PERIOD_US,
        }

    label = f"throttle pid {replica.pid} (rank {replica.rank}, node {replica.node}) to "
    label += f"{cpu_percent} % CPU"
    command = (
        f"{command_host}mkdir {group} && echo {quota} > {group}/cpu.cfs_quota_us && "
        f"echo {replica.pid} > {group}/cgroup.procs"
    )
    return Change("cpu-throttle", data, label, command, apply)


def _cpu_group(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    root = run_cpu_root(run.run_id)
    why = safepath.escape(root, value) if isinstance(value, str) else "no path"
    if why is not None:
        raise NotOursError(f"cpu cgroup {value!r} is not one of this run's ({root}): {why}")


def _cpu_home(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    """A cpu group members may go back to: any existing group of the cpu hierarchy (where
    the replica was), not one of another run's throttles."""
    if not isinstance(value, str) or not value.startswith("/"):
        raise NotOursError(f"home cpu cgroup {value!r} is not a cgroup path")
    where = _home_dir(value)
    why = safepath.escape(CPU_ROOT, where, allow_base=True)
    if why is not None:
        raise NotOursError(f"home cpu cgroup {value!r}: {why}")
    theirs = CPU_ROOT / "faultdrill"
    if where.is_relative_to(theirs) and not where.is_relative_to(run_cpu_root(run.run_id)):
        raise NotOursError(f"home cpu cgroup {value!r} is another run's throttle")


@undoer("cpu-throttle", owns={"path": _cpu_group, "home": _cpu_home})
def _undo_throttle(data: dict[str, Any]) -> None:
    """Lift the quota, move every member back to ``home``, remove the group (and the run's
    parent group once empty). Idempotent; a group already gone is fine."""
    group = Path(str(data["path"]))
    if not group.is_dir():
        return
    with contextlib.suppress(OSError):
        (group / "cpu.cfs_quota_us").write_text("-1")
    home = _home_dir(str(data.get("home") or "/"))
    if not (home / "cgroup.procs").is_file():
        home = CPU_ROOT
    for _ in range(50):
        try:
            members = [int(p) for p in (group / "cgroup.procs").read_text().split()]
        except OSError:
            members = []
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                (home / "cgroup.procs").write_text(str(pid))
        try:
            group.rmdir()
            break
        except FileNotFoundError:
            break
        except OSError:
            time.sleep(0.05)  # a member was being born or reaped
    else:
        group.rmdir()
    with contextlib.suppress(OSError):
        group.parent.rmdir()  # the run's part: only when no other throttle is left
