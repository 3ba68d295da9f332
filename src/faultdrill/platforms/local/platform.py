"""The embedded local platform: real torchrun agents, one per simulated node.

Each node is one torchrun agent (``faultdrill.platforms.local.agent``) with elastic
c10d rendezvous on loopback; the first node hosts the rendezvous store. The nodes are a
:class:`~faultdrill.host.cluster.NodeCluster` (each node's processes in their
own cgroup v1 freezer group, so that every process of a node can be found, frozen and
killed even when a worker runs in its own session or leaves a detached child behind;
without cgroup access, not root, the run id in each process's environment is the fallback
handle, recorded in the ledger like the groups). Storage outages act on the checkpoint
directory of this host (:class:`~faultdrill.host.storage.HostStorage`).

Actions (:mod:`faultdrill.platforms.api`): a rank's replica is signalled through /proc
(pid and start time), the control plane (the store's host, the first agent) is paused
with SIGSTOP, and a copy of a replica is started on its node (``copies``). With ``isolation: netns`` the nodes and links can be acted on as well
(:mod:`faultdrill.platforms.local.netns`).

Settings taken from ``../shared/notes/torchrun.md`` (each fixed a measured failure):
``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (restarted workers otherwise read stale gloo
addresses), ``TMPDIR`` in a short scratch directory of the run, removed by its undo (torchelastic_*
leftovers; AF_UNIX socket paths of DataLoader workers stay under 108 bytes), one thread.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING

from faultdrill import rundir
from faultdrill.errors import FaultError, NotOursError, PlatformError
from faultdrill.host import owned, procfs
from faultdrill.host.cluster import NodeCluster
from faultdrill.host.copies import copy_change, reap
from faultdrill.host.linux import sigstop_change, stop_tree_changes
from faultdrill.host.memcg import HostMemoryCaps, memcg_unavailable
from faultdrill.host.storage import HostStorage, fuse_missing
from faultdrill.host.throttle import cpu_controller_missing, throttle_change
from faultdrill.ledger import undoer
from faultdrill.lineage import Lineage
from faultdrill.platforms.api import (
    TORCHRUN_ENV,
    Ability,
    Change,
    JobSpec,
    JobState,
    NodeInfo,
    Platform,
    Replica,
    register,
)
from faultdrill.platforms.hosted import ProcessReplicas

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.ledger import Ledger
    from faultdrill.plan import Resources

__all__ = ["AGENT_MODULE", "LocalPlatform", "describe_process", "free_port", "fuse_missing"]

AGENT_MODULE = "faultdrill.platforms.local.agent"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


_SCRATCH_PARENT = Path("/tmp")
_SCRATCH_NAME = re.compile(r"fd-[0-9a-f]{12}")


def scratch_root(run_id: str) -> Path:
    """``/tmp/fd-<12 hex digits of the run id's hash>``: short, and named so that the undo
    can tell it is ours."""
    return owned.run_tmp_dir("fd-", 12, run_id)


def make_scratch_root(ledger: Ledger, run_id: str) -> Path:
    """Make the run's :func:`scratch_root` (mode 0700), recorded in ``ledger`` first (undo
    ``scratch-dir``), for every platform whose nodes are this host's. Raises PlatformError
    when it cannot be made."""
    root = scratch_root(run_id)
    eid = ledger.record("scratch-dir", {"path": str(root)}, f"scratch dir {root}")
    try:
        root.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise PlatformError(f"cannot create the scratch directory {root}: {exc}") from exc
    ledger.mark_applied(eid)
    return root


@undoer("scratch-dir", owns={"path": owned.tmp_dir("fd-", 12, in_run=False)})
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


class _Agent:
    def __init__(self, node: str, proc: subprocess.Popen[bytes], log: IO[bytes]) -> None:
        self.node = node
        self.proc = proc
        self.log = log


#: Abilities of the local platform on any layout, and those it adds with network
#: namespaces (nodes and links of their own).
_ALWAYS = frozenset(
    {
        Ability.SIGNAL_RANK,
        Ability.THROTTLE_RANK,
        Ability.HANG_RANK,
        Ability.OOM_RANK,
        Ability.CONTROL_PLANE_PAUSE,
        Ability.STORAGE_READ_ONLY,
        Ability.STORAGE_FULL,
        Ability.STORAGE_UNREACHABLE,
        Ability.STORAGE_SLOW,
        Ability.DATA_OUTAGE,
        Ability.CHECKPOINT_FILES,
        Ability.REPLICA_COPY,
    }
)
_WITH_NETNS = frozenset(
    {
        Ability.NODE_DOWN,
        Ability.NODE_FREEZE,
        Ability.NODE_DRAIN,
        Ability.LINK_LOSS,
        Ability.LINK_SLOW,
        Ability.LINK_FLAP,
        Ability.LINK_CUT,
        Ability.CONTROL_PLANE_CUT,
        Ability.NETWORK_TRACK,
    }
)
_NO_STORE_RESTART = (
    "the c10d rendezvous store lives inside the first node's torchrun agent and cannot be "
    "stopped and restarted alone; use mode pause or cut"
)


#: ``resources.isolation`` -> the platform class that provides it (each variant registers
#: itself here, so this module needs no import of its subclasses).
ISOLATION_VARIANTS: dict[str, type[Platform]] = {}


@register
class LocalPlatform(ProcessReplicas, HostStorage, HostMemoryCaps, Platform):
    """torchrun agents on this host; nodes are a :class:`NodeCluster` of cgroups (and, with
    netns isolation, network namespaces: see ``faultdrill.platforms.local.netns``)."""

    name = "local"
    host_processes = True

    def __init__(
        self, resources: Resources, work_dir: Path, ledger: Ledger, sink: EventSink
    ) -> None:
        super().__init__(resources, work_dir, ledger, sink)
        n = resources.nodes
        self.node_names = [f"n{i}" for i in range(1, n + 1)]
        self.spare_names = [f"n{i}" for i in range(n + 1, n + 1 + resources.spares)]
        self.cluster = NodeCluster(
            ledger,
            sink,
            self.node_names,
            self.spare_names,
            netns=resources.isolation == "netns",
        )
        self._agents: dict[str, _Agent] = {}
        self._retired: list[_Agent] = []  # agents of an earlier submission of the job
        self.rdzv_host = "127.0.0.1"
        self.rdzv_port = 0
        self._lineage = Lineage()
        self._scratch: Path | None = None
        self._copies: list[subprocess.Popen[bytes]] = []  # replica copies (CopiesReplicas)

    # --- abilities ----------------------------------------------------------------------

    @classmethod
    def abilities_for(cls, resources: Resources) -> frozenset[Ability]:
        return _ALWAYS | (_WITH_NETNS if resources.isolation == "netns" else frozenset())

    @classmethod
    def why_not(cls, ability: Ability, resources: Resources) -> str:
        if ability in _WITH_NETNS:
            return "set resources.isolation: netns (as root)"
        if ability is Ability.CONTROL_PLANE_STOP:
            return _NO_STORE_RESTART
        return super().why_not(ability, resources)

    @classmethod
    def machine_lacks(cls, abilities: frozenset[Ability]) -> dict[Ability, str]:
        out: dict[Ability, str] = {}
        for ability in sorted(abilities, key=str):
            if ability in (Ability.STORAGE_UNREACHABLE, Ability.STORAGE_SLOW, Ability.DATA_OUTAGE):
                missing = fuse_missing()
                if missing:
                    out[ability] = "; ".join(missing)
            elif ability is Ability.THROTTLE_RANK:
                missing_cpu = cpu_controller_missing()
                if missing_cpu:
                    out[ability] = missing_cpu
            elif ability is Ability.OOM_RANK and memcg_unavailable():
                out[ability] = str(memcg_unavailable())
            elif ability in (Ability.STORAGE_READ_ONLY, Ability.STORAGE_FULL) and os.geteuid():
                out[ability] = "root (storage faults mount over the checkpoint directory)"
        return out

    @classmethod
    def variant_for(cls, resources: Resources) -> type[Platform]:
        return ISOLATION_VARIANTS.get(resources.isolation, cls)

    # --- layout -------------------------------------------------------------------------

    def node_address(self, node: str) -> str:
        return self.cluster.address(node)

    def nodes(self) -> list[NodeInfo]:
        out = []
        for name in [*self.node_names, *self.spare_names]:
            spare = name in self.spare_names
            state = "spare" if spare and name not in self._agents else "up"
            out.append(NodeInfo(name, self.node_address(name), state, spare))
        return out

    def cgroup(self, node: str) -> procfs.Cgroup | None:
        return self.cluster.cgroup(node)

    def _prepare(self) -> None:
        self.cluster.prepare()

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
            self._scratch = make_scratch_root(self.ledger, self.ledger.run_id)
        tmp = self._scratch / node
        tmp.mkdir(exist_ok=True)
        return tmp

    def agent_env(self, node: str, job: JobSpec) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV}
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
        return self.cluster.interface(node)

    def launch_prefix(self, node: str) -> list[str]:
        """Argv placed before the agent's (entering the node's network namespace)."""
        return self.cluster.launch_prefix(node)

    def start_agent(self, node: str, job: JobSpec, *, is_host: bool) -> None:
        """Start one node's agent on the node (its cgroup joined before exec, so every
        descendant inherits it)."""
        log_path = rundir.logs_dir(job.work_dir) / f"agent-{node}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "ab")  # noqa: SIM115  (closed in _teardown)
        try:
            proc = self.cluster.launch(
                node,
                self.agent_argv(node, job, is_host=is_host),
                env=self.agent_env(node, job),
                cwd=job.work_dir,
                log=log,
            )
        except PlatformError as exc:
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
        self.rdzv_port = self.cluster.free_port(job.nodes[0])
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
        """Every live process of ``node`` (of every node when None)."""
        return self.cluster.node_pids(node) if node else self.cluster.pids()

    def replicas(self) -> list[Replica]:
        out = []
        if self.cluster.cgroups:
            for node in [*self.node_names, *self.spare_names]:
                for pid in self.cluster.node_pids(node):
                    rep = describe_process(pid, node)
                    if rep is not None:
                        out.append(rep)
        else:
            for pid in self.cluster.pids():
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
        self.cluster.teardown()
        reap(self._copies)

    def leftovers(self) -> list[str]:
        return self.cluster.leftovers()

    # --- actions: signal a rank (SignalsRanks) -------------------------------------------

    def rank_replica(self, *, rank: int | None = None, node: str | None = None) -> Replica:
        reps = self.replicas()
        found = self.live_workers(reps, rank=rank, node=node)
        # A worker the platform launched (child of an agent) before any stray process that
        # merely claims the rank, such as a detached old replica.
        agents = {r.pid for r in reps if r.role == "agent"}
        return min(
            found,
            key=lambda r: (r.ppid not in agents, r.rank if r.rank is not None else 1 << 30, r.pid),
        )

    # --- actions: a straggler (ThrottlesRanks) -------------------------------------------

    def throttle_replica(self, replica: Replica, cpu_percent: int) -> Change:
        return throttle_change(self.ledger.run_id, replica, cpu_percent, "")

    # --- actions: hang a rank (HangsRanks) -------------------------------------------------

    def hang_replica(self, replica: Replica) -> list[Change]:
        return stop_tree_changes(replica, self.replicas())

    # --- actions: a copy of a replica (CopiesReplicas) ------------------------------------

    def replica_copy(self, replica: Replica) -> Change:
        return copy_change(self.cluster, replica, rundir.logs_dir(self.work_dir), self._copies)

    # --- actions: the control plane (ControlPlaneActions) ------------------------------------

    def control_plane_label(self) -> str:
        node = self.job.nodes[0] if self.job else self.node_names[0]
        return f"c10d rendezvous store {self.rdzv_host}:{self.rdzv_port} in the agent of {node}"

    def control_plane_endpoint(self) -> tuple[str, int] | None:
        """(node hosting the control plane, its TCP port), None before the job runs."""
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

    def control_plane_pause(self) -> list[Change]:
        procs = self.control_plane_processes()
        if not procs:
            raise FaultError("no live process hosts the control plane")
        return [
            sigstop_change(
                r.pid,
                r.start_time,
                f"SIGSTOP pid {r.pid} ({r.role} on {r.node}: control plane)",
                node=r.node,
            )
            for r in procs
        ]

    def control_plane_cut(self) -> list[Change]:
        where = self.control_plane_endpoint()
        if where is None:
            raise FaultError("the control plane has no endpoint yet (job not running)")
        node, port = where
        changes = self.cluster.port_cut(node, port, purpose="control-plane-cut")
        return [c.with_facts(port=port) for c in changes]

    def control_plane_stop(self) -> list[Change]:
        raise FaultError(_NO_STORE_RESTART)


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
