"""A rank's replica under a memory limit of its own, and the allocation that exceeds it.

The ``oom-worker`` fault on any platform whose replicas are processes of this host (the
local platform, the embedded Slurm cluster) is made of two changes, each in the ledger
before it is made:

``memory-cap``
    the replica is moved into a cgroup v1 memory group of its own,
    ``/sys/fs/cgroup/memory/faultdrill/<run id>/oom-r<rank>``, whose
    ``memory.limit_in_bytes`` is ``limit_mb``. Only the victim and the children it starts
    from then on are in it, so the limit can hurt no other process of the host. This kernel
    does not move a process's charges with it (``memory.move_charge_at_immigrate`` is gone
    in Linux 6.x), so the limit bounds the memory the replica takes *after* the move. The
    undo moves every member back to the memory group the replica came from (recorded),
    removes the group, then the run's directory above it if empty.
``memory-request``
    the file ``<events dir>/memory-request.json`` names that group and ``alloc_mb``. The
    reference workload (:mod:`faultdrill.workloads.memory_request`) checks it after each
    step, and a process that finds itself *in that very group* allocates ``alloc_mb``
    (every page touched): more than the limit, so the kernel's OOM killer kills it
    (SIGKILL; the group's ``oom_kill`` count goes up). A replica outside the group (a
    restarted one, once the cap is gone) never allocates. The undo deletes the file.

Which of a workload's needs is "too much" is the plan's (``alloc_mb`` over ``limit_mb``);
the kill itself is the kernel's, as on a container that outgrows its limit.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultdrill import safepath
from faultdrill.errors import FaultError, NotOursError
from faultdrill.host import procfs
from faultdrill.ledger import RunScope, undoer
from faultdrill.platforms.api import Change, Note

if TYPE_CHECKING:
    from faultdrill.ledger import Ledger
    from faultdrill.platforms.api import JobSpec, Replica

__all__ = [
    "MEMCG_ROOT",
    "REQUEST_FILE",
    "HostMemoryCaps",
    "MemoryGroup",
    "memcg_unavailable",
    "memory_cgroup_of",
    "oom_group_path",
]

MEMCG_ROOT = Path("/sys/fs/cgroup/memory")
#: The file (in the item's events directory) that asks a capped replica to allocate.
REQUEST_FILE = "memory-request.json"


def memcg_unavailable() -> str | None:
    """Why this machine cannot cap a replica's memory, or None if it can."""
    if os.geteuid() != 0:
        return "root (oom-worker moves the replica into a memory cgroup of its own)"
    if not (MEMCG_ROOT / "memory.limit_in_bytes").is_file():
        return f"the cgroup v1 memory controller mounted at {MEMCG_ROOT}"
    if not os.access(MEMCG_ROOT, os.W_OK):
        return f"write access to {MEMCG_ROOT}"
    return None


def oom_group_path(run_id: str, rank: int) -> Path:
    """The memory group of rank ``rank``'s cap in run ``run_id`` (the run's own name)."""
    return MEMCG_ROOT / "faultdrill" / run_id / f"oom-r{rank}"


def memory_cgroup_of(pid: int) -> str | None:
    """The memory cgroup of ``pid`` as ``/proc/<pid>/cgroup`` names it (``/a/b``), or None."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        if "memory" in controllers.split(","):
            return path or "/"
    return None


class MemoryGroup:
    """A cgroup v1 memory group (a directory under :data:`MEMCG_ROOT`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def name(self) -> str:
        """The group as ``/proc/<pid>/cgroup`` names it (``/faultdrill/<run>/oom-r1``)."""
        return "/" + str(self.path.relative_to(MEMCG_ROOT))

    def exists(self) -> bool:
        return self.path.is_dir()

    def create(self, limit_bytes: int) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def oom_kills(self) -> int | None:
        """The kernel's count of processes its OOM killer killed in this group."""
        try:
            text = (self.path / "memory.oom_control").read_text()
        except OSError:
            return None
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return None

    def limit_bytes(self) -> int | None:
        try:
            return int((self.path / "memory.limit_in_bytes").read_text())
        except (OSError, ValueError):
            return None

    def release(self, origin: Path) -> None:
        """Move every member to ``origin`` (the root group if it is gone), then remove this
        group and the empty run directories above it. Idempotent."""
        if not self.exists():
            return
        target = origin if (origin / "cgroup.procs").is_file() else MEMCG_ROOT
        for _ in range(50):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(OSError):  # exited meanwhile
                    (target / "cgroup.procs").write_text(str(pid))
            time.sleep(0.02)
        for _ in range(50):
            try:
                self.path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)  # an exiting member is still being reaped
        else:
            self.path.rmdir()
        run_dir = self.path.parent
        if run_dir.parent == MEMCG_ROOT / "faultdrill":
            with contextlib.suppress(OSError):  # not empty: another cap of the run
                run_dir.rmdir()


# --- ownership of what a ledger names, and the undo ------------------------------------


def _our_group(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    root = MEMCG_ROOT / "faultdrill" / run.run_id
    why = safepath.escape(root, value) if isinstance(value, str) else "no path"
    if why is not None:
        raise NotOursError(f"memory group {value!r} is not one of this run's ({root}): {why}")


def _a_memory_group(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    """The origin the members go back to: a memory group outside faultdrill's own tree."""
    why = safepath.escape(MEMCG_ROOT, value, allow_base=True) if isinstance(value, str) else "-"
    if why is not None:
        raise NotOursError(f"{value!r} is not a memory cgroup ({MEMCG_ROOT}): {why}")
    if Path(str(value)).is_relative_to(MEMCG_ROOT / "faultdrill"):
        raise NotOursError(f"{value!r} is inside faultdrill's own memory groups")


@undoer("memory-cap", owns={"path": _our_group, "origin": _a_memory_group})
def _undo_memory_cap(data: dict[str, Any]) -> None:
    """Members back to the recorded origin group, the group removed. Idempotent."""
    MemoryGroup(Path(str(data["path"]))).release(Path(str(data["origin"])))


def _request_in_run(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    run.inside(value)
    if not isinstance(value, str) or Path(value).name != REQUEST_FILE:
        raise NotOursError(f"{value!r} is not a memory request file ({REQUEST_FILE})")


@undoer("memory-request", owns={"path": _request_in_run})
def _undo_memory_request(data: dict[str, Any]) -> None:
    """Delete the request (a link in its place is left alone: not ours). Idempotent."""
    path = Path(str(data["path"]))
    if path.is_symlink():
        raise NotOursError(f"{path} is a symbolic link, not the request this run wrote")
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


# --- the actions -----------------------------------------------------------------------------


class HostMemoryCaps:
    """Mixin: the ``OomRanks`` actions of :mod:`faultdrill.platforms.api` for a platform
    whose replicas are processes of this host (the class it is mixed into is a
    ``Platform``: ``ledger``, ``job``)."""

    if TYPE_CHECKING:
        ledger: Ledger
        job: JobSpec | None

    def _memory_cap(self) -> dict[str, Any]:
        caps: dict[str, Any] = self.__dict__.setdefault("_host_memory_caps", {})
        return caps

    def oom_cap(self, replica: Replica, *, limit_mb: int, alloc_mb: int) -> list[Change]:
        why = memcg_unavailable()
        if why is not None:
            raise FaultError(f"oom-worker needs {why}")
        if self.job is None:
            raise FaultError("oom-worker: the job has not been submitted")
        if replica.rank is None:
            raise FaultError(f"replica {replica.pid} holds no rank")
        group = MemoryGroup(oom_group_path(self.ledger.run_id, replica.rank))
        origin = MEMCG_ROOT / (memory_cgroup_of(replica.pid) or "/").lstrip("/")
        limit = limit_mb << 20
        request = Path(self.job.events_dir) / REQUEST_FILE
        self._memory_cap()["group"] = group

        def cap(note: Note) -> dict[str, Any]:
            group.create(limit)
            if not procfs.alive(replica.pid, replica.start_time):
                raise ProcessLookupError(f"worker pid {replica.pid} exited before it was capped")
            group.add(replica.pid)
            return {"memcg": group.name, "limit_bytes": limit, "oom_kills_before": 0}

        def ask(note: Note) -> dict[str, Any]:
            body = {"memcg": group.name, "alloc_mb": alloc_mb, "rank": replica.rank}
            tmp = request.with_name(REQUEST_FILE + ".tmp")
            tmp.write_text(json.dumps(body))
            tmp.replace(request)
            return {"alloc_mb": alloc_mb}

        where = f"rank {replica.rank}, node {replica.node}"
        return [
            Change(
                "memory-cap",
                {
                    "path": str(group.path),
                    "origin": str(origin),
                    "pid": replica.pid,
                    "start_time": replica.start_time,
                    "limit_bytes": limit,
                },
                f"memory limit {limit_mb} MiB on pid {replica.pid} ({where})",
                f"mkdir {group.path}; echo {limit} > {group.path}/memory.limit_in_bytes; "
                f"echo {replica.pid} > {group.path}/cgroup.procs",
                cap,
            ),
            Change(
                "memory-request",
                {"path": str(request)},
                f"ask the workload in {group.name} to allocate {alloc_mb} MiB",
                f'echo \'{{"memcg": "{group.name}", "alloc_mb": {alloc_mb}}}\' > {request}',
                ask,
            ),
        ]

    def oom_join(self, replica: Replica) -> None:
        group = self._memory_cap().get("group")
        if not isinstance(group, MemoryGroup) or not group.exists():
            raise FaultError("oom-worker: no memory cap to put the new replica in")
        try:
            group.add(replica.pid)
        except OSError as exc:
            raise FaultError(f"could not move pid {replica.pid} into {group.name}: {exc}") from exc

    def oom_kill_count(self) -> int | None:
        group = self._memory_cap().get("group")
        return group.oom_kills() if isinstance(group, MemoryGroup) else None
