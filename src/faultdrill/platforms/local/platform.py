"""The embedded local platform: real torchrun agents, one per simulated node.

Each node is one torchrun agent (``faultdrill.platforms.local.agent``) with elastic
c10d rendezvous on loopback; the first node hosts the rendezvous store. Each node's
processes live in their own cgroup v1 freezer group, so that every process of a node can
be found, frozen and killed even when a worker runs in its own session or leaves a
detached child behind. Without cgroup access (not root) the run id in each process's
environment is the fallback handle, recorded in the ledger like the groups.

Settings taken from ``../shared/notes/torchrun.md`` (each fixed a measured failure):
``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (restarted workers otherwise read stale gloo
addresses), ``TMPDIR`` in a short scratch directory of the run, removed by its undo (torchelastic_*
leftovers; AF_UNIX socket paths of DataLoader workers stay under 108 bytes), one thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING

from faultdrill.errors import EnvironmentPrepError, NotOursError, PlatformError
from faultdrill.ledger import undoer
from faultdrill.lineage import Lineage
from faultdrill.platforms.api import (
    ABILITY_SIGNAL_WORKERS,
    JobSpec,
    JobState,
    NodeInfo,
    Platform,
    Replica,
    register,
)
from faultdrill.platforms.local import procfs

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.ledger import Ledger
    from faultdrill.plan import Resources

__all__ = ["AGENT_MODULE", "LocalPlatform", "free_port"]

AGENT_MODULE = "faultdrill.platforms.local.agent"
_SCRUB = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_RUN_ID",
)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@undoer("cgroup")
def _undo_cgroup(data: dict[str, object]) -> None:
    procfs.Cgroup(Path(str(data["path"]))).remove()


_SCRATCH_PARENT = Path("/tmp")
_SCRATCH_NAME = re.compile(r"fd-[0-9a-f]{12}")


def scratch_root(run_id: str) -> Path:
    """``/tmp/fd-<12 hex digits of the run id's hash>``: short, and named so that the undo
    can tell it is ours."""
    return _SCRATCH_PARENT / f"fd-{hashlib.sha1(run_id.encode()).hexdigest()[:12]}"


@undoer("scratch-dir")
def _undo_scratch(data: dict[str, object]) -> None:
    """Remove a run's scratch directory; refuses any path that is not one of ours."""
    path = Path(str(data["path"]))
    if path.parent != _SCRATCH_PARENT or not _SCRATCH_NAME.fullmatch(path.name):
        raise NotOursError(f"{path} is not a faultdrill scratch directory; left alone")
    if path.is_symlink():
        raise NotOursError(f"{path} is a symbolic link, not our scratch directory; left alone")
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        raise OSError(f"cannot remove scratch directory {path}")


@undoer("run-processes")
def _undo_run_processes(data: dict[str, object]) -> None:
    """Kill every process carrying the recorded run id (the fallback without cgroups)."""
    import signal
    import time

    run_id = str(data["run_id"])
    for _ in range(3):
        pids = procfs.pids_with_env("FAULTDRILL_RUN_ID", run_id)
        if not pids:
            return
        for pid in pids:
            procfs.kill_checked(pid, None, signal.SIGKILL)
        time.sleep(0.1)
    left = procfs.pids_with_env("FAULTDRILL_RUN_ID", run_id)
    if left:
        raise OSError(f"processes {left} of run {run_id} survived SIGKILL")


class _Agent:
    def __init__(self, node: str, proc: subprocess.Popen[bytes], log: IO[bytes]) -> None:
        self.node = node
        self.proc = proc
        self.log = log


@register
class LocalPlatform(Platform):
    """torchrun agents on this host; nodes are cgroups (and, with netns isolation, network
    namespaces: see ``faultdrill.platforms.local.netns``)."""

    name = "local"
    host_processes = True

    def __init__(
        self, resources: Resources, work_dir: Path, ledger: Ledger, sink: EventSink
    ) -> None:
        super().__init__(resources, work_dir, ledger, sink)
        n = resources.nodes
        self.node_names = [f"n{i}" for i in range(1, n + 1)]
        self.spare_names = [f"n{i}" for i in range(n + 1, n + 1 + resources.spares)]
        self._cgroups: dict[str, procfs.Cgroup] = {}
        self._agents: dict[str, _Agent] = {}
        self._retired: list[_Agent] = []  # agents of an earlier submission of the job
        self.rdzv_host = "127.0.0.1"
        self.rdzv_port = 0
        self._lineage = Lineage()
        self._scratch: Path | None = None

    @classmethod
    def abilities_for(cls, resources: Resources) -> frozenset[str]:
        if cls is LocalPlatform and resources.isolation == "netns":
            return cls.variant_for(resources).abilities_for(resources) | set(ROUND3_ABILITIES)
        return frozenset({ABILITY_SIGNAL_WORKERS, *ROUND3_ABILITIES})

    @classmethod
    def machine_lacks(cls, abilities: frozenset[str]) -> dict[str, str]:
        have = round3_abilities()
        out = {}
        for ability in sorted(abilities & set(ROUND3_ABILITIES) - have):
            if ability == "checkpoint-fuse":
                out[ability] = "; ".join(fuse_missing())
            else:
                out[ability] = "root (storage faults mount over the checkpoint directory)"
        return out

    @classmethod
    def variant_for(cls, resources: Resources) -> type[Platform]:
        if resources.isolation == "netns":
            from faultdrill.platforms.local.netns import NetnsPlatform

            return NetnsPlatform
        return cls

    # --- layout -------------------------------------------------------------------------

    def node_address(self, node: str) -> str:
        return "127.0.0.1"

    def nodes(self) -> list[NodeInfo]:
        out = []
        for name in [*self.node_names, *self.spare_names]:
            spare = name in self.spare_names
            state = "spare" if spare and name not in self._agents else "up"
            out.append(NodeInfo(name, self.node_address(name), state, spare))
        return out

    def cgroup(self, node: str) -> procfs.Cgroup | None:
        return self._cgroups.get(node)

    def _prepare(self) -> None:
        assert self.ledger is not None
        run_id = self.ledger.run_id
        self.ledger.mark_applied(self.ledger.record("run-processes", {"run_id": run_id}, run_id))
        if not procfs.Cgroup.available():
            return
        root = procfs.FREEZER_ROOT / "faultdrill" / run_id
        eid = self.ledger.record("cgroup", {"path": str(root)}, f"cgroup {root}")
        procfs.Cgroup(root).create()
        self.ledger.mark_applied(eid)
        for name in [*self.node_names, *self.spare_names]:
            group = procfs.Cgroup(root / name)
            eid = self.ledger.record("cgroup", {"path": str(group.path)}, f"cgroup {group.path}")
            try:
                group.create()
            except OSError as exc:
                raise EnvironmentPrepError(f"cannot create cgroup {group.path}: {exc}") from exc
            self.ledger.mark_applied(eid)
            self._cgroups[name] = group

    # --- launching ----------------------------------------------------------------------

    def agent_argv(self, node: str, job: JobSpec, *, is_host: bool) -> list[str]:
        t = self.resources.timeouts
        conf = ",".join(
            [
                f"join_timeout={t.rdzv_join_s}",
                f"last_call_timeout={t.rdzv_last_call_s}",
                f"close_timeout={t.rdzv_close_s}",
                f"keep_alive_interval={t.keep_alive_interval_s}",
                f"keep_alive_max_attempt={t.keep_alive_max_attempt}",
                f"read_timeout={t.rdzv_read_s}",
                f"is_host={1 if is_host else 0}",
            ]
        )
        return [
            sys.executable,
            "-m",
            AGENT_MODULE,
            f"--nnodes={job.min_nodes}:{job.max_nodes}",
            f"--nproc-per-node={job.procs_per_node}",
            f"--max-restarts={job.max_restarts}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={self.rdzv_host}:{self.rdzv_port}",
            f"--rdzv-id={job.run_id}",
            f"--rdzv-conf={conf}",
            f"--monitor-interval={t.monitor_interval_s}",
            f"--local-addr={self.node_address(node)}",
            *job.argv,
        ]

    def scratch_dir(self, node: str) -> Path:
        """The node's TMPDIR: below a short directory of this run in /tmp, made (and
        recorded in the ledger) on first use. Not the run directory: multiprocessing (and
        so every DataLoader worker that shares a tensor) binds AF_UNIX sockets in TMPDIR,
        whose paths may not exceed 107 bytes, and a run directory can be deep."""
        if self._scratch is None:
            assert self.ledger is not None
            root = scratch_root(self.ledger.run_id)
            eid = self.ledger.record("scratch-dir", {"path": str(root)}, f"scratch dir {root}")
            try:
                root.mkdir(mode=0o700, exist_ok=True)
            except OSError as exc:
                raise PlatformError(f"cannot create the scratch directory {root}: {exc}") from exc
            self.ledger.mark_applied(eid)
            self._scratch = root
        tmp = self._scratch / node
        tmp.mkdir(exist_ok=True)
        return tmp

    def agent_env(self, node: str, job: JobSpec) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
        tmp = self.scratch_dir(node)
        env.update(job.env)
        env.update(
            {
                "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
                "OMP_NUM_THREADS": "1",
                "GLOO_SOCKET_IFNAME": self.gloo_ifname(node),
                "TMPDIR": str(tmp),
                "LOGLEVEL": "INFO",
                "PYTHONUNBUFFERED": "1",
                "FAULTDRILL_EVENTS_DIR": str(job.events_dir),
                "FAULTDRILL_TASK_ID": job.task_id,
                "FAULTDRILL_RUN_ID": job.run_id,
                "FAULTDRILL_NODE": node,
            }
        )
        return env

    def gloo_ifname(self, node: str) -> str:
        return "lo"

    def launch_prefix(self, node: str) -> list[str]:
        """Argv placed before the agent's (e.g. entering the node's network namespace)."""
        return []

    def start_agent(self, node: str, job: JobSpec, *, is_host: bool) -> None:
        """Start one node's agent inside the node's cgroup (joined before exec, so every
        descendant inherits it)."""
        argv = [*self.launch_prefix(node), *self.agent_argv(node, job, is_host=is_host)]
        group = self._cgroups.get(node)
        if group is not None:
            procs_file = shlex.quote(str(group.path / "cgroup.procs"))
            argv = ["/bin/sh", "-c", f'echo $$ > {procs_file} && exec "$@"', "sh", *argv]
        log_path = job.work_dir / "logs" / f"agent-{node}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "ab")  # noqa: SIM115  (closed in _teardown)
        try:
            proc = subprocess.Popen(
                argv,
                env=self.agent_env(node, job),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=job.work_dir,
                start_new_session=True,
            )
        except OSError as exc:
            log.close()
            raise PlatformError(f"cannot start torchrun agent for node {node}: {exc}") from exc
        old = self._agents.get(node)
        if old is not None:
            self._retired.append(old)
        self._agents[node] = _Agent(node, proc, log)
        self.sink.emit(
            "platform",
            "agent_spawned",
            node=node,
            pid=proc.pid,
            start_time=procfs.start_time(proc.pid),
        )

    def _submit(self, job: JobSpec) -> None:
        self.rdzv_host = self.node_address(job.nodes[0])
        self.rdzv_port = free_port(self.rdzv_host)
        for i, node in enumerate(job.nodes):
            self.start_agent(node, job, is_host=(i == 0))

    # --- observing ----------------------------------------------------------------------

    def _poll(self) -> JobState:
        codes = [a.proc.poll() for a in self._agents.values()]
        if any(c is None for c in codes):
            return JobState.RUNNING
        if any(c == 0 for c in codes):
            return JobState.SUCCEEDED
        return JobState.FAILED

    def agent_exit_codes(self) -> dict[str, int | None]:
        return {n: a.proc.poll() for n, a in self._agents.items()}

    def member_pids(self, node: str | None = None) -> list[int]:
        nodes = [node] if node else list(self._cgroups) or list(self._agents)
        if self._cgroups:
            return [pid for n in nodes if n in self._cgroups for pid in self._cgroups[n].pids()]
        assert self.ledger is not None
        pids = procfs.pids_with_env("FAULTDRILL_RUN_ID", self.ledger.run_id)
        if node is None:
            return pids
        return [p for p in pids if procfs.environ(p).get("FAULTDRILL_NODE") == node]

    def replicas(self) -> list[Replica]:
        out = []
        for node in [*self.node_names, *self.spare_names]:
            for pid in self.member_pids(node) if self._cgroups else []:
                rep = describe_process(pid, node)
                if rep is not None:
                    out.append(rep)
        if not self._cgroups:
            for pid in self.member_pids():
                rep = describe_process(pid, procfs.environ(pid).get("FAULTDRILL_NODE", "?"))
                if rep is not None:
                    out.append(rep)
        return self._lineage.classify(out)

    def worker_pids(self, *, rank: int | None = None, node: str | None = None) -> list[Replica]:
        """The replicas (never their children) holding ``rank`` or living on ``node``."""
        return [
            r
            for r in self.replicas()
            if r.role == "worker"
            and (rank is None or r.rank == rank)
            and (node is None or r.node == node)
        ]

    # --- stopping -----------------------------------------------------------------------

    def _signal_all(self, sig: int) -> None:
        for pid in self.member_pids():
            procfs.kill_checked(pid, None, sig)
        for agent in self._agents.values():
            if agent.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(agent.proc.pid, sig)

    def _any_alive(self) -> bool:
        if any(a.proc.poll() is None for a in self._agents.values()):
            return True
        return any(procfs.alive(p) for p in self.member_pids())

    def _teardown(self) -> None:
        for agent in [*self._retired, *self._agents.values()]:
            if agent.proc.poll() is None:
                agent.proc.kill()
            agent.proc.wait()
            agent.log.close()
        assert self.ledger is not None
        for entry in reversed(self.ledger.pending()):
            if entry.kind in ("cgroup", "run-processes"):
                self.ledger.revert(entry.id)

    # --- control plane (faults.control_plane) --------------------------------------------

    def control_plane_label(self) -> str:
        node = self.job.nodes[0] if self.job else self.node_names[0]
        return f"c10d rendezvous store {self.rdzv_host}:{self.rdzv_port} in the agent of {node}"

    def control_plane_endpoint(self) -> tuple[str, int] | None:
        if self.job is None or not self.rdzv_port:
            return None
        return self.job.nodes[0], self.rdzv_port

    def control_plane_processes(self) -> list[Replica]:
        """The process hosting the c10d rendezvous store: the first node's agent."""
        if self.job is None or self.job.nodes[0] not in self._agents:
            return []
        node = self.job.nodes[0]
        agent = self._agents[node]
        if agent.proc.poll() is not None:
            return []
        rep = describe_process(agent.proc.pid, node)
        return [rep] if rep is not None else []


#: Abilities of round-3 faults, named here as strings to keep platforms free of fault
#: imports: ``control-plane`` (faults.control_plane: ``control_plane_processes``),
#: ``checkpoint-mounts`` (faults.storage: the harness may mount over the checkpoint dir,
#: as root, and the job sees this host's mounts) and ``checkpoint-fuse`` (faults.storage,
#: mode ``unreachable``: the checkpoint dir can be served through a FUSE mirror).
ROUND3_ABILITIES = ("control-plane", "checkpoint-mounts", "checkpoint-fuse")
_ROOT_ONLY = ("checkpoint-mounts", "checkpoint-fuse")


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


def round3_abilities() -> frozenset[str]:
    """The round-3 abilities this machine has now: ``checkpoint-mounts`` needs root,
    ``checkpoint-fuse`` root and :func:`fuse_missing` empty. Without them, a run with such
    storage faults is refused before it starts (and the demo leaves them out)."""
    if os.geteuid() != 0:
        return frozenset(a for a in ROUND3_ABILITIES if a not in _ROOT_ONLY)
    if fuse_missing():
        return frozenset(a for a in ROUND3_ABILITIES if a != "checkpoint-fuse")
    return frozenset(ROUND3_ABILITIES)


def describe_process(pid: int, node: str) -> Replica | None:
    """What a job process is, from its environment and command line (None if gone). Every
    process holding a rank is a ``worker`` here; :meth:`LocalPlatform.replicas` then tells
    the replicas from their children (:mod:`faultdrill.lineage`)."""
    ids = procfs.identity(pid)
    if ids is None:
        return None
    start, ppid, sid = ids
    env = procfs.environ(pid)
    argv = procfs.cmdline(pid)
    if "RANK" in env:
        role = "worker"
    elif AGENT_MODULE in argv or any("torchrun" in a for a in argv[:3]):
        role = "agent"
    else:
        role = "other"
    rank = int(env["RANK"]) if env.get("RANK", "").isdigit() else None
    rc = env.get("TORCHELASTIC_RESTART_COUNT", "")
    return Replica(
        pid=pid,
        start_time=start,
        role=role,
        node=node,
        rank=rank,
        restart_count=int(rc) if rc.isdigit() else None,
        ppid=ppid,
        sid=sid,
    )
