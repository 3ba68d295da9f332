"""An embedded Ray cluster on the namespace cluster: a head (on a controller node of its own,
or on ``n1``) and one Ray worker node on each member node.

Contract
--------
* Every daemon is ``ray start --head|--address=... --block`` (or ``redis-server`` for GCS
  fault tolerance) started through the node cluster's launch
  (:class:`~faultdrill.host.cluster.NodeCluster`): inside its node's network
  namespace (``--node-ip-address`` = the node's own address) AND its node's cgroup, joined
  before exec, so the raylet and every worker it forks are found, frozen and killed by
  node. Nodes start one after another (parallel starts time out on
  a 2-core machine); each start waits for ``ray start`` to say the runtime started.
* Each daemon is recorded in the ledger (kind ``ray-daemon``) BEFORE it starts, with a
  marker that its environment carries (``FAULTDRILL_RAY_DAEMON``) and, once started, its
  pid and start time. It is stopped by its process tree: SIGTERM to the daemon, its
  descendants and every process carrying its marker, a bounded wait, then SIGKILL. Never
  ``ray stop``: that kills every Ray process on the host, other people's too.
* Tear-down (:meth:`EmbeddedRay.stop`) is idempotent: worker nodes first, then the head,
  then redis. ``faultdrill cleanup`` replays the same undo from the ledger alone.
* :meth:`EmbeddedRay.restore` brings a cluster that outlived a drill back to its layout
  (every member a live Ray node the GCS counts alive, no spare): what a fault or Ray took
  away is started again, what joined for a drill is stopped.
* Ray's temp dir (session dirs, logs, unix sockets) is inside the run directory when the
  socket paths fit the 107-byte limit of ``sun_path``, else a short directory under
  ``/tmp`` (``/tmp/fd-ray-<hash of run id>``); it is recorded (kind ``ray-tempdir``) and
  removed by the undo only when it lies outside the run directory (logs are copied into
  the run directory first).
* Ports differ per node (``NodePorts.for_index``) although each namespace has its own port
  space: the same layout then also works with nodes sharing one network stack.
* Health checks are short for drills (:class:`RayTuning`); the values and the GCS mode
  (``memory``: no fault tolerance, the GCS restart loses the cluster; ``redis``: GCS
  tables in a ``redis-server`` from Debian, head started with ``RAY_REDIS_ADDRESS``) are
  in :meth:`EmbeddedRay.dossier` and in the ``ray_cluster_ready`` event.

Nothing here imports ``ray``: the undo functions must run where Ray is not installed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from faultdrill import rundir
from faultdrill.errors import EnvironmentPrepError, PlatformError
from faultdrill.host import owned, procfs
from faultdrill.ledger import SECONDS, acting_for, undoer

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.host.cluster import NodeCluster
    from faultdrill.ledger import Ledger
    from faultdrill.plan import RaySettings

__all__ = [
    "GCS_PORT",
    "MARKER_ENV",
    "REDIS_PORT",
    "Daemon",
    "EmbeddedRay",
    "NodePorts",
    "RayTuning",
    "process_tree",
    "ray_executable",
    "ray_missing",
    "redis_missing",
    "stop_tree",
]

MARKER_ENV = "FAULTDRILL_RAY_DAEMON"
GCS_PORT = 6380
REDIS_PORT = 6390
_SUN_PATH_MAX = 107
# What Ray appends to a node's temp dir for its longest socket path.
_SOCKET_SUFFIX = "/session_2026-12-01_09-25-36_123456_1234567/sockets/plasma_store"
_SHORT_ROOT = "/tmp"
_SHORT_PREFIX = "fd-ray-"
_READY_LINE = b"Ray runtime started"
#: How many times :meth:`EmbeddedRay.restore` looks at members it started again (and
#: starts again those not up) before it gives up.
RESTORE_LOOKS = 3


def ray_executable() -> Path:
    """The ``ray`` command of this interpreter's environment (it may not exist)."""
    return Path(sys.executable).with_name("ray")


def ray_missing() -> str | None:
    """Why this machine cannot start an embedded Ray cluster, or None if it can."""
    if not ray_executable().exists():
        return f"ray is not installed next to {sys.executable} (pip install 'faultdrill[ray]')"
    return None


def redis_missing() -> str | None:
    if shutil.which("redis-server") is None:
        return "redis-server not found (apt-get install -y --no-install-recommends redis-server)"
    return None


# --- process trees -------------------------------------------------------------------


def _children_map() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            ppid = procfs.parent_pid(int(entry.name))
            if ppid is not None:
                out.setdefault(ppid, []).append(int(entry.name))
    return out


def process_tree(
    pid: int | None, start: int | None, marker: str | None, runs: tuple[str, ...] | None = None
) -> dict[int, int]:
    """pid -> start time of a daemon, its live descendants, and every live process whose
    environment carries ``MARKER_ENV=marker`` (those reparented after a parent died).
    A recorded pid whose start time changed is not ours and not included. ``runs`` (an
    undo's trusted run ids): only processes whose ``FAULTDRILL_RUN_ID`` is one of them,
    looked at when listed, so a process that took the marker since is never included."""
    found: set[int] = set()
    if pid is not None and procfs.alive(pid, start):
        children = _children_map()
        todo = [pid]
        while todo:
            p = todo.pop()
            if p not in found:
                found.add(p)
                todo.extend(children.get(p, ()))
    if marker:
        found.update(procfs.pids_with_env(MARKER_ENV, marker))
    me = os.getpid()
    out = {}
    for p in found:
        st = procfs.start_time(p)
        if st is None or p == me or not procfs.alive(p):
            continue
        if runs is None or procfs.environ(p).get("FAULTDRILL_RUN_ID") in runs:
            out[p] = st
    return out


def stop_tree(
    pid: int | None,
    start: int | None,
    marker: str | None,
    *,
    grace_s: float = 5.0,
    runs: tuple[str, ...] | None = None,
) -> list[int]:
    """Stop a daemon's tree (:func:`process_tree`): SIGTERM to the daemon alone when it
    still runs (``ray start --block`` then stops its children in Ray's own order, in ~2 s;
    a SIGTERM to every process at once left GCS and raylet waiting on each other for more
    than 8 s), else to every process of the tree; wait up to ``grace_s`` for the whole tree;
    SIGKILL what is left (looked up again: a dying raylet may have forked), wait up to 5 s
    more. Returns the pids still alive (empty when stopped). Idempotent. ``runs``: see
    :func:`process_tree`."""
    tree = process_tree(pid, start, marker, runs)
    if pid is not None and pid in tree and tree[pid] == start:
        procfs.kill_checked(pid, start, signal.SIGTERM)
    else:
        for p, st in tree.items():
            procfs.kill_checked(p, st, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(procfs.alive(p, st) for p, st in tree.items()):
        time.sleep(0.05)
    left = {p: st for p, st in tree.items() if procfs.alive(p, st)}
    left.update(process_tree(pid, start, marker, runs))
    for p, st in left.items():
        procfs.kill_checked(p, st, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(procfs.alive(p, st) for p, st in left.items()):
        time.sleep(0.05)
    return sorted(p for p, st in left.items() if procfs.alive(p, st))


# --- undo functions (used in-process and by `faultdrill cleanup`) -------------------------


@undoer(
    "ray-daemon",
    owns={"pid": owned.PROCESS, "marker": owned.env_marker(MARKER_ENV), "grace_s": SECONDS},
)
def _undo_daemon(data: dict[str, Any]) -> None:
    """Stop a Ray daemon (or redis) by its recorded pid tree and marker: only processes
    carrying the id of the run being cleaned up (:func:`~faultdrill.ledger.acting_for`;
    every daemon started for a run carries it), checked when they are signalled, not only
    when the entry's claims were. Idempotent; never ``ray stop``."""
    pid, start = data.get("pid"), data.get("start_time")
    left = stop_tree(
        int(pid) if pid is not None else None,
        int(start) if start is not None else None,
        str(data.get("marker") or "") or None,
        grace_s=float(data.get("grace_s", 5.0)),
        runs=acting_for(),
    )
    if left:
        raise OSError(f"{data.get('role')} on {data.get('node')}: pids {left} survived SIGKILL")


@undoer("ray-tempdir", owns={"path": owned.tmp_dir(_SHORT_PREFIX, 10, in_run=True)})
def _undo_tempdir(data: dict[str, Any]) -> None:
    """Remove Ray's temp dir when it lies outside the run directory (a short path under
    /tmp made for this run); one inside the run directory is evidence and stays."""
    if not data.get("remove"):
        return
    path = Path(str(data["path"]))
    if path.parent != Path(_SHORT_ROOT) or not path.name.startswith(_SHORT_PREFIX):
        raise OSError(f"refusing to remove {path}: not a faultdrill Ray temp dir")
    shutil.rmtree(path, ignore_errors=True)


# --- configuration -------------------------------------------------------------------


@dataclass(frozen=True)
class RayTuning:
    """Ray's detection and start-up limits, short for drills (Ray's defaults in brackets).

    ``health_check_*``: the GCS marks a raylet dead after ``failure_threshold`` missed
    checks, one every ``period_ms`` [3000 ms, timeout 10000 ms, threshold 5: ~30 s].
    ``gcs_reconnect_timeout_s``: how long raylets and drivers wait for a lost GCS before
    they exit [60]. ``train_*``: the Train controller's poll interval [2 s], how long a hung
    worker health check may last [600 s], how long a new worker group may take to start
    [60 s]. ``graceful_drain_s``: how long ``ray start --block`` drains its node (GCS
    ``drain_node``, reason PREEMPTION) after a SIGTERM before it stops its processes [30 s];
    tear-down waits for it. ``startup_concurrency``: how many worker processes a raylet
    starts at once [its CPUs: one on a 1-CPU node, so the Train controller and its helper
    actors would start one after another]."""

    health_check_period_ms: int = 500
    health_check_timeout_ms: int = 500
    health_check_failure_threshold: int = 3
    gcs_reconnect_timeout_s: int = 60
    train_health_check_interval_s: float = 0.5
    train_worker_health_check_timeout_s: float = 10.0
    train_worker_group_start_timeout_s: float = 90.0
    graceful_drain_s: float = 5.0
    object_store_bytes: int = 100 * 1024 * 1024
    startup_concurrency: int = 4

    @classmethod
    def from_settings(cls, settings: RaySettings) -> RayTuning:
        """The tuning a plan's ``resources.ray`` section asks for."""
        return cls(
            health_check_period_ms=settings.health_check_period_ms,
            health_check_timeout_ms=settings.health_check_timeout_ms,
            health_check_failure_threshold=settings.health_check_failure_threshold,
            gcs_reconnect_timeout_s=settings.gcs_reconnect_timeout_s,
            train_health_check_interval_s=settings.train_health_check_interval_s,
            train_worker_health_check_timeout_s=settings.train_worker_health_check_timeout_s,
            train_worker_group_start_timeout_s=settings.train_worker_group_start_timeout_s,
            graceful_drain_s=settings.drain_deadline_s,
            object_store_bytes=settings.object_store_mb * 1024 * 1024,
        )

    @property
    def detect_node_s(self) -> float:
        """How long the GCS takes at most to declare a silent node dead."""
        return (
            self.health_check_failure_threshold
            * (self.health_check_period_ms + self.health_check_timeout_ms)
            / 1000
        )

    def daemon_env(self) -> dict[str, str]:
        """Environment of every ``ray start`` (the GCS reads the health-check settings)."""
        return {
            "RAY_health_check_period_ms": str(self.health_check_period_ms),
            "RAY_health_check_timeout_ms": str(self.health_check_timeout_ms),
            "RAY_health_check_failure_threshold": str(self.health_check_failure_threshold),
            "RAY_health_check_initial_delay_ms": "0",
            "RAY_gcs_rpc_server_reconnect_timeout_s": str(self.gcs_reconnect_timeout_s),
            "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": str(self.graceful_drain_s),
            "RAY_worker_maximum_startup_concurrency": str(self.startup_concurrency),
            # A raylet gives up when its node's agents take too long to start, which a
            # loaded host makes them do.
            "RAY_agent_register_timeout_ms": "120000",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_DEDUP_LOGS": "0",
        }

    def driver_env(self) -> dict[str, str]:
        """Environment of the Train driver (Ray propagates these to controller and workers).
        Train's metrics are off: they feed a dashboard this cluster does not run."""
        return {
            "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": str(self.train_health_check_interval_s),
            "RAY_TRAIN_WORKER_HEALTH_CHECK_TIMEOUT_S": str(
                self.train_worker_health_check_timeout_s
            ),
            "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": str(self.train_worker_group_start_timeout_s),
            "RAY_TRAIN_ENABLE_STATE_ACTOR_RECONCILIATION": "0",
            "RAY_TRAIN_METRICS_ENABLED": "0",
            "RAY_USAGE_STATS_ENABLED": "0",
        }


@dataclass(frozen=True)
class NodePorts:
    """One node's Ray ports: a block of 200 per node index, worker ports in its top part."""

    node_manager: int
    object_manager: int
    agent_listen: int
    agent_grpc: int
    runtime_env_agent: int
    metrics_export: int
    min_worker: int
    max_worker: int

    @classmethod
    def for_index(cls, index: int) -> NodePorts:
        base = 23000 + 200 * (index - 1)
        return cls(base, base + 1, base + 2, base + 3, base + 4, base + 5, base + 20, base + 199)

    def argv(self) -> list[str]:
        out = [
            f"--node-manager-port={self.node_manager}",
            f"--object-manager-port={self.object_manager}",
            f"--dashboard-agent-listen-port={self.agent_listen}",
            f"--dashboard-agent-grpc-port={self.agent_grpc}",
            f"--runtime-env-agent-port={self.runtime_env_agent}",
            f"--metrics-export-port={self.metrics_export}",
            f"--min-worker-port={self.min_worker}",
            f"--max-worker-port={self.max_worker}",
        ]
        return out


@dataclass
class Daemon:
    """One started daemon: ``ray start`` of a node, or redis."""

    node: str
    role: str  # "head" | "worker" | "redis" | "observer"
    entry_id: str
    marker: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]
    start_time: int | None
    log_offset: int = 0  # where this daemon's output begins in its (appended) log
    startup_s: float = 0.0
    stopped: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class EmbeddedRay:
    """A Ray cluster on a prepared node cluster. Not thread-safe, except that one spare may
    be started (:meth:`start_node`) in a thread while the rest is only read.

    ``head`` runs ``ray start --head`` with ``head_cpus`` CPUs (0: the control plane alone);
    each of ``members`` (which may include the head) is a Ray worker node with ``cpus`` CPUs
    (one Train worker per CPU). ``gcs_ft=True`` starts a ``redis-server`` on the head node
    first and the head with ``RAY_REDIS_ADDRESS`` (GCS tables survive a GCS restart).
    Raises EnvironmentPrepError when Ray or redis is missing or a node does not come up.
    """

    def __init__(
        self,
        nodes: NodeCluster,
        ledger: Ledger,
        sink: EventSink,
        work_dir: Path,
        *,
        head: str,
        members: list[str],
        gcs_ft: bool = False,
        tuning: RayTuning | None = None,
        cpus: int = 1,
        head_cpus: int | None = None,
        start_timeout_s: float = 120.0,
    ) -> None:
        self.nodes = nodes
        self.ledger = ledger
        self.sink = sink
        self.work_dir = work_dir
        self.head = head
        self.members = list(members)
        #: The Ray nodes of the cluster now: the head, the members, spares that joined.
        self.node_names = list(dict.fromkeys([head, *members]))
        self.gcs_ft = gcs_ft
        self.tuning = tuning or RayTuning()
        self.cpus = cpus
        self.head_cpus = cpus if head_cpus is None else head_cpus
        self.start_timeout_s = start_timeout_s
        self.daemons: dict[tuple[str, str], Daemon] = {}  # (node, role) -> newest
        self._retired: list[Daemon] = []
        self.temp_root: Path | None = None
        self._temp_removable = False
        self._index = {n: i for i, n in enumerate(nodes.hosts(), start=1)}
        self.namespace = hashlib.sha1(ledger.run_id.encode()).hexdigest()[:8]

    # --- layout ----------------------------------------------------------------------

    @property
    def gcs_mode(self) -> str:
        return "redis" if self.gcs_ft else "memory"

    @property
    def address(self) -> str:
        """The GCS address drivers and worker nodes connect to (``host:port``)."""
        return f"{self.nodes.address(self.head)}:{GCS_PORT}"

    def role(self, node: str) -> str:
        """The role of the node's ``ray start`` daemon: ``head`` or ``worker``."""
        return "head" if node == self.head else "worker"

    def ports(self, node: str) -> NodePorts:
        return NodePorts.for_index(self._index[node])

    def temp_dir(self, node: str) -> Path:
        assert self.temp_root is not None, "start() first"
        return self.temp_root / node

    def node_cpus(self, node: str) -> int:
        return self.head_cpus if node == self.head else self.cpus

    def dossier(self) -> dict[str, Any]:
        """What the report's resource dossier should say about this cluster."""
        return {
            "gcs_address": self.address,
            "gcs_mode": self.gcs_mode,
            "redis": f"127.0.0.1:{REDIS_PORT} on {self.head}" if self.gcs_ft else None,
            "head": self.head,
            "nodes": {n: self.nodes.address(n) for n in self.node_names},
            "cpus": {n: self.node_cpus(n) for n in self.node_names},
            "temp_dir": str(self.temp_root) if self.temp_root else None,
            "tuning": asdict(self.tuning),
            "detect_node_s": self.tuning.detect_node_s,
            "daemon_env": self.tuning.daemon_env(),
            "driver_env": self.tuning.driver_env(),
        }

    # --- bring-up --------------------------------------------------------------------

    def start(self) -> None:
        """Temp dir, redis (if ``gcs_ft``), head, then each member in turn; returns once
        every node said its runtime started. Idempotent for nodes already up."""
        why = ray_missing() or (redis_missing() if self.gcs_ft else None)
        if why:
            raise EnvironmentPrepError(f"embedded Ray cluster: {why}")
        self._make_temp_root()
        began = time.monotonic()
        if self.gcs_ft and not self.running(self.head, "redis"):
            self._start_redis()
        for node in self.node_names:
            if not self.running(node, self.role(node)):
                self.start_node(node)
        self.sink.emit(
            "platform",
            "ray_cluster_ready",
            address=self.address,
            gcs_mode=self.gcs_mode,
            head=self.head,
            nodes=self.node_names,
            temp_dir=str(self.temp_root),
            startup_s=round(time.monotonic() - began, 3),
            **{f"tuning_{k}": v for k, v in asdict(self.tuning).items()},
        )

    def running(self, node: str, role: str | None = None) -> bool:
        d = self.daemons.get((node, role or self.role(node)))
        return d is not None and not d.stopped and d.proc.poll() is None

    def _make_temp_root(self) -> None:
        if self.temp_root is not None:
            return
        inside = self.work_dir.resolve() / "ray"
        longest = max(len(n) for n in self.nodes.hosts()) + 1
        if len(str(inside)) + longest + len(_SOCKET_SUFFIX) <= _SUN_PATH_MAX:
            root, remove = inside, False
        else:
            h = hashlib.sha1(self.ledger.run_id.encode()).hexdigest()[:10]
            root, remove = Path(_SHORT_ROOT) / f"{_SHORT_PREFIX}{h}", True
        eid = self.ledger.record(
            "ray-tempdir", {"path": str(root), "remove": remove}, f"Ray temp dir {root}"
        )
        root.mkdir(parents=True, exist_ok=True)
        self.ledger.mark_applied(eid)
        self.temp_root, self._temp_removable = root, remove

    def _base_env(self, node: str, marker: str) -> dict[str, str]:
        env = dict(os.environ)
        for key in ("RAY_ADDRESS", "RAY_REDIS_ADDRESS", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
            env.pop(key, None)
        tmp = self.work_dir / "tmp" / node
        tmp.mkdir(parents=True, exist_ok=True)
        env.update(self.tuning.daemon_env())
        env.update(
            {
                MARKER_ENV: marker,
                "FAULTDRILL_RUN_ID": self.ledger.run_id,
                "FAULTDRILL_NODE": node,
                "GLOO_SOCKET_IFNAME": self.nodes.interface(node),
                "OMP_NUM_THREADS": "1",
                "TMPDIR": str(tmp),
                "PYTHONUNBUFFERED": "1",
            }
        )
        return env

    def _launch(
        self,
        node: str,
        role: str,
        argv: list[str],
        env: dict[str, str],
        marker: str,
        *,
        cgroup: bool = True,
    ) -> Daemon:
        """Record, then start, one daemon; the ledger entry gets its pid and start time."""
        log_path = rundir.logs_dir(self.work_dir) / f"ray-{role}-{node}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        eid = self.ledger.record(
            "ray-daemon",
            {
                "node": node,
                "role": role,
                "marker": marker,
                "argv": argv,
                "log": str(log_path),
                "grace_s": self.tuning.graceful_drain_s + 5.0,
            },
            f"{role} on {node}",
        )
        log = open(log_path, "ab")  # noqa: SIM115  (closed when the daemon is stopped)
        log_offset = log.seek(0, os.SEEK_END)
        try:
            proc = self.nodes.launch(node, argv, env=env, cwd=self.work_dir, log=log, cgroup=cgroup)
        except PlatformError:
            log.close()
            raise
        start = procfs.start_time(proc.pid)
        self.ledger.update(eid, pid=proc.pid, start_time=start)
        self.ledger.mark_applied(eid)
        daemon = Daemon(node, role, eid, marker, proc, log_path, log, start, log_offset)
        old = self.daemons.get((node, role))
        if old is not None:
            self._retired.append(old)
        self.daemons[(node, role)] = daemon
        return daemon

    def _start_redis(self) -> None:
        marker = uuid.uuid4().hex
        node = self.head
        data_dir = self.temp_dir(node) / "redis"
        data_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            str(shutil.which("redis-server")),
            *("--port", str(REDIS_PORT), "--bind", "127.0.0.1"),
            *("--save", "", "--appendonly", "no", "--protected-mode", "no"),
            *("--dir", str(data_dir), "--daemonize", "no"),
        ]
        began = time.monotonic()
        daemon = self._launch(node, "redis", argv, self._base_env(node, marker), marker)
        self._wait_ready(daemon, b"Ready to accept connections")
        daemon.startup_s = time.monotonic() - began
        self._announce(daemon)

    def start_node(self, node: str, *, attempts: int = 3) -> Daemon:
        """Start (or restart) one node's ``ray start --block``; returns once it is up. A
        start that fails is stopped and tried again, up to ``attempts`` in all: ``ray start``
        gives its raylet a fixed 30 s to register, which a loaded host can miss."""
        for attempt in range(1, attempts + 1):
            try:
                return self._start_node(node)
            except EnvironmentPrepError as exc:
                self.stop_node(node, self.role(node), grace_s=2.0)
                if attempt == attempts:
                    raise
                self.sink.emit("platform", "ray_start_retried", node=node, error=str(exc)[-300:])
        raise AssertionError("unreachable")

    def _start_node(self, node: str) -> Daemon:
        head = node == self.head
        role = self.role(node)
        marker = uuid.uuid4().hex
        env = self._base_env(node, marker)
        argv = [
            str(ray_executable()),
            "start",
            "--block",
            "--disable-usage-stats",
            f"--node-ip-address={self.nodes.address(node)}",
            f"--num-cpus={self.node_cpus(node)}",
            "--num-gpus=0",
            f"--object-store-memory={self.tuning.object_store_bytes}",
            f"--temp-dir={self.temp_dir(node)}",
            *self.ports(node).argv(),
        ]
        if head:
            # A restarted head: `ray start` refuses an address that this temp dir last
            # started and that a live raylet (ours, on a worker node) still names.
            (self.temp_dir(node) / "ray_current_cluster").unlink(missing_ok=True)
            argv += ["--head", f"--port={GCS_PORT}", "--include-dashboard=false"]
            if self.gcs_ft:
                env["RAY_REDIS_ADDRESS"] = f"127.0.0.1:{REDIS_PORT}"
                env["RAY_external_storage_namespace"] = self.namespace
        else:
            argv.append(f"--address={self.address}")
        if node not in self.node_names:
            self.node_names.append(node)
        began = time.monotonic()
        daemon = self._launch(node, role, argv, env, marker)
        self._wait_ready(daemon, _READY_LINE)
        daemon.startup_s = time.monotonic() - began
        self._announce(daemon)
        return daemon

    def _wait_ready(self, daemon: Daemon, line: bytes) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), open(daemon.log_path, "rb") as f:
                f.seek(daemon.log_offset)
                if line in f.read():
                    return
            if daemon.proc.poll() is not None:
                break
            time.sleep(0.1)
        tail = _tail(daemon.log_path)
        rc = daemon.proc.poll()
        why = f"exited with {rc}" if rc is not None else f"not up after {self.start_timeout_s} s"
        raise EnvironmentPrepError(
            f"Ray {daemon.role} on {daemon.node} {why}; log {daemon.log_path}: {tail}"
        )

    def _announce(self, daemon: Daemon) -> None:
        self.sink.emit(
            "platform",
            "ray_daemon_started",
            node=daemon.node,
            role=daemon.role,
            pid=daemon.proc.pid,
            start_time=daemon.start_time,
            startup_s=round(daemon.startup_s, 3),
            address=self.nodes.address(daemon.node),
        )

    def driver_env(self, node: str) -> dict[str, str]:
        """Environment for a Ray driver started on ``node`` (added to the job's own): the
        cluster address, the node's address (a driver must announce its own, see
        ``workloads.lm_ray``), its gloo interface, and the Train tuning."""
        return {
            **self.tuning.driver_env(),
            "RAY_ADDRESS": self.address,
            "FAULTDRILL_NODE": node,
            "FAULTDRILL_NODE_ADDR": self.nodes.address(node),
            "FAULTDRILL_RAY_NODES": ",".join(
                f"{n}={self.nodes.address(n)}" for n in self.nodes.hosts()
            ),
            "GLOO_SOCKET_IFNAME": self.nodes.interface(node),
            "OMP_NUM_THREADS": "1",
        }

    def _node_names_arg(self) -> str:
        return ",".join(f"{n}={self.nodes.address(n)}" for n in self.nodes.hosts())

    def start_observer(self, events_dir: Path, task_id: str) -> Daemon:
        """Start the GCS node-table observer (:mod:`.observe`) in the head's namespace but
        outside its cgroup (node faults on the head must not stop our observation);
        recorded like a daemon. Replaces a running one."""
        self.stop_node(self.head, "observer")
        marker = uuid.uuid4().hex
        argv = [
            sys.executable,
            "-m",
            "faultdrill.platforms.ray.observe",
            f"--address={self.address}",
            f"--events-dir={events_dir}",
            f"--task={task_id}",
            f"--nodes={self._node_names_arg()}",
        ]
        daemon = self._launch(
            self.head, "observer", argv, self._base_env(self.head, marker), marker, cgroup=False
        )
        self._announce(daemon)
        return daemon

    # --- what actions use ----------------------------------------------------------------

    def node_pids(self, node: str) -> list[int]:
        """Every live process of the node (its cgroup): ``ray start``, raylet, workers..."""
        return self.nodes.node_pids(node)

    def pids_named(self, node: str, name: str) -> list[int]:
        """Processes of the node whose command line's first word ends with ``name``
        (``gcs_server``, ``raylet``) or whose process title starts with it (``ray::...``)."""
        out = []
        for pid in self.node_pids(node):
            argv = procfs.cmdline(pid)
            if argv and (
                argv[0].endswith("/" + name) or argv[0] == name or argv[0].startswith(name)
            ):
                out.append(pid)
        return out

    def gcs_pid(self) -> int | None:
        pids = self.pids_named(self.head, "gcs_server")
        return pids[0] if pids else None

    def raylet_pid(self, node: str) -> int | None:
        pids = self.pids_named(node, "raylet")
        return pids[0] if pids else None

    def gcs_view(self) -> dict[str, str] | None:
        """Each Ray node's state as the GCS holds it now (``up``, ``draining``, ``down``;
        a node that re-registered counts as its newest registration), asked from inside
        the head's namespace; None when the GCS does not answer."""
        argv = [
            sys.executable,
            "-m",
            "faultdrill.platforms.ray.observe",
            f"--address={self.address}",
            f"--nodes={self._node_names_arg()}",
            "--once",
        ]
        try:
            done = self.nodes.run(self.head, argv, env={**os.environ, **self.tuning.daemon_env()})
        except OSError:
            return None
        if done.returncode != 0:
            return None
        try:
            view = json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return None
        return {str(k): str(v) for k, v in view.items()} if isinstance(view, dict) else None

    # --- between drills ----------------------------------------------------------------

    def restore(self) -> list[str]:
        """Bring the cluster back to its layout after a drill: the head up and answering
        (else the whole cluster started again: a GCS without fault tolerance that was
        restarted lost every node), every member a live Ray node the GCS counts ``up``
        (else that node started again), no spare joined. Returns what was done (empty:
        nothing was needed). Raises EnvironmentPrepError when a node does not come up."""
        done: list[str] = []
        if self.gcs_ft and not self.running(self.head, "redis"):
            self.stop_node(self.head, "redis")
            self._start_redis()
            done.append(f"redis restarted on {self.head}")
        view = self.gcs_view() if self.running(self.head, "head") else None
        if view is None:
            for node in reversed(self.node_names):
                self.stop_node(node, self.role(node))
            self.node_names = list(dict.fromkeys([self.head, *self.members]))
            self.start()
            return [*done, "the whole cluster started again (its GCS was gone or not answering)"]
        for node in [n for n in self.node_names if n not in (self.head, *self.members)]:
            self.stop_node(node, "worker")
            self.node_names.remove(node)
            done.append(f"spare {node} left the cluster")
        restarted = self._restart_members(view, done)
        # A raylet started on a busy machine can miss its first health checks and be
        # declared dead a second later; the item would run without it (a spare joins, and
        # Ray Train places a rank there). After every start, look again one detection
        # window later, until a look finds every member up.
        t = self.tuning
        window_s = t.health_check_failure_threshold * t.health_check_period_ms / 1000
        window_s += t.health_check_timeout_ms / 1000 + 0.5
        looks = 0
        while restarted:
            time.sleep(window_s)
            looks += 1
            again = self.gcs_view() if self.running(self.head, "head") else None
            lacking = [
                n
                for n in self.members
                if again is None or again.get(n) != "up" or not self.running(n, self.role(n))
            ]
            if not lacking:
                break
            if looks >= RESTORE_LOOKS:
                why = "the GCS does not answer" if again is None else "not up in the GCS"
                raise EnvironmentPrepError(
                    f"embedded Ray cluster: {', '.join(lacking)}: {why} {looks} detection "
                    f"windows after being started again between drills ({'; '.join(done)})"
                )
            # a GCS that did not answer this time is asked again after the next window
            restarted = again is None or self._restart_members(again, done)
        return done

    def _restart_members(self, view: dict[str, str], done: list[str]) -> bool:
        """Start again every member that is not running or not ``up`` in ``view``; says so
        in ``done``. Whether one was started."""
        started = False
        for node in self.members:
            role = self.role(node)
            if self.running(node, role) and view.get(node) == "up":
                continue
            why = "not running" if not self.running(node, role) else f"{view.get(node)} in the GCS"
            self.stop_node(node, role)
            self.start_node(node)
            done.append(f"{node} started again ({why})")
            started = True
        return started

    # --- tear-down -------------------------------------------------------------------

    def stop_node(
        self, node: str, role: str | None = None, *, grace_s: float | None = None
    ) -> None:
        """Stop one node's daemon(s) by pid tree through the ledger (idempotent). Without
        ``role``: those in the node's cgroup (head or worker, redis), not the observer."""
        grace = self.tuning.graceful_drain_s + 5.0 if grace_s is None else grace_s
        for (n, r), d in list(self.daemons.items()):
            if n == node and (r == role or (role is None and r != "observer")):
                self._stop(d, grace)

    def _stop(self, daemon: Daemon, grace_s: float) -> None:
        if daemon.stopped:
            return
        began = time.monotonic()
        self.ledger.update(daemon.entry_id, grace_s=grace_s)
        self.ledger.revert(daemon.entry_id)
        with contextlib.suppress(subprocess.TimeoutExpired):
            daemon.proc.wait(5)
        daemon.log.close()
        daemon.stopped = True
        self.sink.emit(
            "platform",
            "ray_daemon_stopped",
            node=daemon.node,
            role=daemon.role,
            pid=daemon.proc.pid,
            rc=daemon.proc.poll(),
            stop_s=round(time.monotonic() - began, 3),
        )

    def stop(self, *, grace_s: float | None = None) -> None:
        """Stop everything: the observer, worker nodes (newest first), the head, redis;
        keep Ray's logs in the run directory; remove a short temp dir. Idempotent."""
        grace = self.tuning.graceful_drain_s + 5.0 if grace_s is None else grace_s
        order = {"observer": 0, "worker": 1, "head": 2, "redis": 3}
        every = [*self._retired, *self.daemons.values()]
        names = self.nodes.hosts()
        for d in sorted(every, key=lambda d: (order[d.role], -names.index(d.node))):
            self._stop(d, grace)
        self._keep_logs()
        for entry in reversed(self.ledger.pending()):
            if entry.kind == "ray-tempdir":
                self.ledger.revert(entry.id)

    def _keep_logs(self) -> None:
        if self.temp_root is None or not self._temp_removable:
            return
        for node in self.node_names:
            logs = self.temp_dir(node) / Path("session_latest", "logs")
            if logs.is_dir():
                with contextlib.suppress(OSError, shutil.Error):
                    shutil.copytree(
                        logs, self.work_dir / "ray-logs" / node, dirs_exist_ok=True, symlinks=True
                    )


def _tail(path: Path, n: int = 5) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(lines[-n:]) or "(empty log)"
