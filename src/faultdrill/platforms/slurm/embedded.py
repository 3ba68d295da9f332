"""An embedded multi-node Slurm 22.05 cluster on the namespace cluster, for drills and tests.

Needs Debian's packages, installed with::

    apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge

Layout, on a :class:`~faultdrill.host.cluster.NodeCluster` with network
namespaces, one controller host ``ctl`` and one host group ``svc``::

    svc  (host network, cgroup .../svc)   munged, its own key/socket/pid/log/seed files
    ctl  (fd<h>-ctl, 10.77.0.250, UTS ctl) slurmctld, port 6817; the harness's clients too
    n1.. (fd<h>-nI, 10.77.0.I, UTS nI)    slurmd -N nI, port 6818 -> slurmstepd -> tasks

slurmctld lives in its own namespace, not on a worker node: cutting the control plane's
link then cuts only the controller (on n1 it would also cut a worker and the job's
rendezvous host), and killing or freezing a worker node never touches the controller.
munged stays in the host's network (a unix socket every node reaches through the file
system). Every daemon starts in its node's cgroup (slurmd -> slurmstepd -> tasks all stay
in it), network namespace and a UTS namespace named after the node.

Everything the cluster writes is under ``<run dir>/slurm/`` (:class:`SlurmPaths`): the
config, munge's files, slurmctld's state, pid and log files; except its AF_UNIX sockets
(munged's, and each slurmstepd's in its slurmd's spool), which go under the run's short
scratch directory when the platform gives one: a socket's path must fit in 108 bytes, and a
run directory nested a few levels deep (pytest's per-worker directories) pushed
slurmstepd's past it, so the batch step died at its start with no job output at all.

Every daemon is recorded in the ledger (kind ``slurm-daemon``) BEFORE it starts, then
updated with its pid and start time, so ``faultdrill cleanup`` stops exactly that process
after a harness crash: TERM (and CONT, in case a fault paused it) -> bounded wait -> KILL,
never by name or pattern. Whatever a daemon left behind (slurmstepd, tasks) is in its node's
cgroup and goes with the cgroup's undo.

Settings that decide recovery, measured in ``../shared/notes/schedulers.md``:
``cred_expire`` is also the hold-off before a requeued job may start (default 120 s);
``SlurmdTimeout`` decides when a silent node is declared DOWN; ``ReturnToService=2`` lets a
node that registers again come back by itself; ``MessageTimeout=2`` lost a completion message
once, so it is 5.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from faultdrill.errors import EnvironmentPrepError, FaultError, PlatformError
from faultdrill.host import owned, procfs
from faultdrill.host.cluster import CONTROLLER_BASE, SUBNET, NodeCluster
from faultdrill.ledger import SECONDS, undoer
from faultdrill.platforms.api import TORCHRUN_ENV
from faultdrill.platforms.slurm.jobs import run_client_command
from faultdrill.platforms.slurm.parse import parse_records

if TYPE_CHECKING:
    from faultdrill.plan import SlurmSettings

__all__ = [
    "CONTROLLER",
    "CONTROLLER_ADDRESS",
    "INSTALL_LINE",
    "SERVICES",
    "ClusterSettings",
    "EmbeddedSlurm",
    "SlurmPaths",
    "render_conf",
    "slurm_cluster",
    "slurm_missing",
    "stop_process",
]

CONTROLLER = "ctl"
"""The controller host (its namespace, cgroup and host name)."""
CONTROLLER_ADDRESS = f"{SUBNET}.{CONTROLLER_BASE}"
SERVICES = "svc"
"""The host group of the services that keep the host's network (munged)."""

INSTALL_LINE = "apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge"
_TOOLS = ("slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "scancel", "munged")


def slurm_missing() -> str | None:
    """Why this machine cannot host an embedded Slurm cluster (tools missing), or None."""
    missing = [t for t in _TOOLS if shutil.which(t) is None]
    if missing:
        return f"missing {', '.join(missing)} (install with: {INSTALL_LINE})"
    return None


def stop_process(pid: int, start: int | None, term_wait_s: float) -> None:
    """TERM (then CONT, so a paused process handles it) -> wait up to ``term_wait_s`` ->
    KILL -> wait 5 s. Only if ``pid`` still has start time ``start``. Raises OSError if it
    survives KILL (e.g. frozen by a cgroup: thaw it first)."""
    if not procfs.kill_checked(pid, start, signal.SIGTERM):
        return
    procfs.kill_checked(pid, start, signal.SIGCONT)
    for sig, wait in ((None, term_wait_s), (signal.SIGKILL, 5.0)):
        if sig is not None:
            procfs.kill_checked(pid, start, sig)
        deadline = time.monotonic() + wait
        while procfs.alive(pid, start) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not procfs.alive(pid, start):
            return
    raise OSError(f"process {pid} survived SIGKILL")


@undoer("slurm-daemon", owns={"pid": owned.PROCESS, "cgroup": owned.CGROUP, "term_wait_s": SECONDS})
def _undo_daemon(data: dict[str, Any]) -> None:
    """Stop the recorded daemon process (pid + start time), thawing its cgroup first. A
    daemon recorded without a pid never started as far as the harness knew; anything it
    did start is in its cgroup, whose own undo kills it."""
    pid = data.get("pid")
    if not isinstance(pid, int):
        return
    start = data.get("start_time")
    group = data.get("cgroup")
    if group:
        procfs.Cgroup(Path(str(group))).thaw()
    stop_process(pid, start if isinstance(start, int) else None, float(data.get("term_wait_s", 10)))


def slurm_cluster(ledger: Any, sink: Any, nodes: list[str], spares: list[str]) -> NodeCluster:
    """The node cluster an embedded Slurm cluster stands on: the worker nodes (spares are
    Slurm nodes too), the controller host and munged's host group."""
    return NodeCluster(
        ledger, sink, nodes, spares, netns=True, controllers=[CONTROLLER], host_groups=[SERVICES]
    )


@dataclass(frozen=True)
class ClusterSettings:
    """The embedded cluster's tunables (slurm.conf). Defaults are those measured to work
    here; the plan's ``resources.slurm`` sets the ones that decide recovery."""

    slurmd_timeout_s: int = 5
    message_timeout_s: int = 5
    kill_wait_s: int = 5
    cred_expire_s: int = 5
    return_to_service: int = 2
    sched_interval_s: int = 2
    cpus_per_node: int = 2
    real_memory_mb: int = 1000
    partition: str = "debug"
    ctld_port: int = 6817
    slurmd_port: int = 6818
    up_timeout_s: float = 30.0

    @classmethod
    def from_plan(cls, s: SlurmSettings) -> ClusterSettings:
        return cls(
            slurmd_timeout_s=s.slurmd_timeout_s,
            message_timeout_s=s.message_timeout_s,
            kill_wait_s=s.kill_wait_s,
            cred_expire_s=s.cred_expire_s,
            return_to_service=s.return_to_service,
            sched_interval_s=s.sched_interval_s,
        )

    def recovery_options(self) -> dict[str, Any]:
        """The cluster-side options that decide recovery, for the resource dossier."""
        return {
            "SlurmdTimeout": self.slurmd_timeout_s,
            "MessageTimeout": self.message_timeout_s,
            "KillWait": self.kill_wait_s,
            "cred_expire": self.cred_expire_s,
            "ReturnToService": self.return_to_service,
            "sched_interval": self.sched_interval_s,
        }


#: The longest AF_UNIX socket path the kernel takes (``sun_path`` is 108 bytes, with its NUL).
SOCKET_PATH_MAX = 107

#: Digits of the longest job id (MaxJobId's default is 67,043,328) and step id (the batch
#: step is 4294967291) in a slurmstepd socket's name, ``<node>_<job>.<step>``.
_JOB_ID_DIGITS = 8
_STEP_ID_DIGITS = 10


@dataclass(frozen=True)
class SlurmPaths:
    """Where the cluster's files live: under ``root``, a directory of the run, except the
    sockets (munged's, and the slurmd spools where each slurmstepd makes its own), under
    ``sockets`` when given (a short directory: see the module's docstring)."""

    root: Path
    sockets: Path | None = None

    def socket_problem(self, nodes: list[str]) -> str | None:
        """Why a socket of this cluster would not fit in ``sun_path``, or None."""
        longest = max(nodes, key=len, default="n")
        step = f"{longest}_{'9' * _JOB_ID_DIGITS}.{'9' * _STEP_ID_DIGITS}"
        for path in (self.munge_socket, self.spool / longest / step):
            if len(os.fsencode(path)) > SOCKET_PATH_MAX:
                return (
                    f"embedded Slurm: the socket path {path} would be "
                    f"{len(os.fsencode(path))} bytes, over the {SOCKET_PATH_MAX} the kernel "
                    "allows; give the run a shorter --out directory"
                )
        return None

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge(self) -> Path:
        return self.root / "munge"

    @property
    def munge_socket(self) -> Path:
        return (self.sockets or self.munge) / "munge.socket"

    @property
    def munge_key(self) -> Path:
        return self.munge / "munge.key"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def spool(self) -> Path:
        return (self.sockets or self.root) / "spool"

    @property
    def logs(self) -> Path:
        return self.root / "log"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def jobs(self) -> Path:
        return self.root / "jobs"

    def daemon_log(self, name: str) -> Path:
        """The daemon's own log file (what slurm.conf / munged's option names)."""
        return self.logs / f"{name}.log"


def render_conf(
    paths: SlurmPaths, nodes: list[tuple[str, str]], settings: ClusterSettings, cluster: str
) -> str:
    """slurm.conf for ``nodes`` (name, address), controller at :data:`CONTROLLER_ADDRESS`."""
    s = settings
    lines = [
        f"ClusterName={cluster}",
        f"SlurmctldHost={CONTROLLER}({CONTROLLER_ADDRESS})",
        f"SlurmctldPort={s.ctld_port}",
        f"SlurmdPort={s.slurmd_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # cred_expire is also the hold-off before a requeued job may start (default 120 s)
        f"AuthInfo=socket={paths.munge_socket},cred_expire={s.cred_expire_s}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={paths.state}",
        f"SlurmdSpoolDir={paths.spool}/%n",
        f"SlurmctldPidFile={paths.run}/slurmctld.pid",
        f"SlurmdPidFile={paths.run}/slurmd-%n.pid",
        f"SlurmctldLogFile={paths.daemon_log('slurmctld')}",
        f"SlurmdLogFile={paths.logs}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc",
        "MpiDefault=none",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        f"SchedulerParameters=sched_interval={s.sched_interval_s},bf_interval=1",
        "SlurmdParameters=config_overrides",
        f"ReturnToService={s.return_to_service}",
        f"SlurmdTimeout={s.slurmd_timeout_s}",
        f"MessageTimeout={s.message_timeout_s}",
        f"KillWait={s.kill_wait_s}",
        "InactiveLimit=0",
        "MinJobAge=600",
        "JobRequeue=1",
        "PropagateResourceLimits=NONE",
        "MailProg=/bin/true",
        f"TmpFS={paths.root}/tmp",
    ]
    for name, addr in nodes:
        lines.append(
            f"NodeName={name} NodeHostname={name} NodeAddr={addr} "
            f"CPUs={s.cpus_per_node} RealMemory={s.real_memory_mb} State=UNKNOWN"
        )
    names = ",".join(n for n, _ in nodes)
    lines.append(
        f"PartitionName={s.partition} Nodes={names} Default=YES OverSubscribe=YES "
        "MaxTime=INFINITE State=UP"
    )
    return "\n".join(lines) + "\n"


@dataclass
class _Daemon:
    name: str
    node: str
    proc: subprocess.Popen[bytes]
    start_time: int | None
    entry_id: str
    out: IO[bytes]


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"({path}: no log)"
    return "\n".join(f"    {line}" for line in text[-lines:]) or f"({path}: empty)"


class EmbeddedSlurm:
    """munged + slurmctld + one slurmd per node (spares included), on a node cluster made by
    :func:`slurm_cluster`.

    ``up`` blocks until every node is idle or raises EnvironmentPrepError naming the part
    that failed with its log's tail. ``down`` is idempotent. ``client`` runs a Slurm command
    as the harness (in the controller's network namespace).
    """

    def __init__(
        self, nodes: NodeCluster, root: Path, settings: ClusterSettings | None = None
    ) -> None:
        self.nodes = nodes
        self.paths = SlurmPaths(root)
        self.settings = settings or ClusterSettings()
        self.cluster_name = nodes.prefix
        self.daemons: dict[str, _Daemon] = {}
        self._retired: list[_Daemon] = []

    def place_sockets(self, directory: Path) -> None:
        """Make the cluster's sockets under ``directory`` (short, the caller's to remove);
        before :meth:`up`."""
        self.paths = replace(self.paths, sockets=directory)

    @property
    def ledger(self) -> Any:
        return self.nodes.ledger

    @property
    def ctl_ns(self) -> str:
        """The controller's network namespace."""
        return self.nodes.link(CONTROLLER).ns

    def workers(self) -> list[str]:
        """Every Slurm node (the cluster's nodes and spares)."""
        return self.nodes.nodes()

    def env(self) -> dict[str, str]:
        """Environment of every Slurm command and daemon: the run's own config."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
        env["SLURM_CONF"] = str(self.paths.conf)
        return env

    # --- files --------------------------------------------------------------------------

    def write_files(self) -> None:
        """Config, munge key (0400, fresh per run) and the directories, under the run dir."""
        p = self.paths
        spools = [p.spool / n for n in self.workers()]
        sockets = [p.sockets] if p.sockets is not None else []
        for d in (
            p.root,
            *sockets,
            p.state,
            p.spool,
            p.logs,
            p.run,
            p.jobs,
            p.root / "tmp",
            *spools,
        ):
            d.mkdir(parents=True, exist_ok=True)
        p.munge.mkdir(mode=0o755, exist_ok=True)
        p.munge.chmod(0o755)  # munged: "Socket is inaccessible" otherwise
        if not p.munge_key.exists():
            fd = os.open(p.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
            try:
                os.write(fd, os.urandom(1024))
            finally:
                os.close(fd)
        nodes = [(n, self.nodes.address(n)) for n in self.workers()]
        p.conf.write_text(render_conf(p, nodes, self.settings, self.cluster_name))

    # --- daemons ------------------------------------------------------------------------

    def start_daemon(
        self, name: str, node: str, argv: list[str], *, hostname: str | None = None
    ) -> _Daemon:
        """Record, then start one daemon on ``node``; returns it once its pid is recorded."""
        group = self.nodes.cgroup(node)
        data = {
            "name": name,
            "node": node,
            "argv": argv,
            "cgroup": str(group.path) if group else None,
            "term_wait_s": 10,
            "pid": None,
        }
        eid = self.ledger.record("slurm-daemon", data, f"{name} on {node}")
        out_path = self.paths.logs / f"{name}.out"
        out = open(out_path, "ab")  # noqa: SIM115  (closed when the daemon is reaped)
        try:
            proc = self.nodes.launch(
                node, argv, env=self.env(), log=out, cwd=self.paths.root, hostname=hostname
            )
        except PlatformError as exc:
            out.close()
            raise EnvironmentPrepError(f"cannot start {name} on {node}: {exc}") from exc
        start = procfs.start_time(proc.pid)
        self.ledger.update(eid, pid=proc.pid, start_time=start)
        self.ledger.mark_applied(eid)
        daemon = _Daemon(name, node, proc, start, eid, out)
        old = self.daemons.get(name)
        if old is not None:
            self._retired.append(old)
        self.daemons[name] = daemon
        self.nodes.sink.emit(
            "platform", "daemon_started", daemon=name, node=node, pid=proc.pid, start_time=start
        )
        return daemon

    def stop_daemon(self, name: str, *, term_wait_s: float = 10.0) -> None:
        """TERM -> bounded wait -> KILL one daemon, and close its ledger entry."""
        daemon = self.daemons.get(name)
        if daemon is None:
            return
        try:
            stop_process(daemon.proc.pid, daemon.start_time, term_wait_s)
        except OSError as exc:
            raise FaultError(f"cannot stop {name}: {exc}") from exc
        self._reap(daemon)
        self.ledger.revert(daemon.entry_id)  # already stopped: the undo finds it gone
        self.nodes.sink.emit(
            "platform", "daemon_stopped", daemon=name, node=daemon.node, rc=daemon.proc.returncode
        )

    @staticmethod
    def _reap(daemon: _Daemon) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            daemon.proc.wait(timeout=5)
        daemon.out.close()

    def start_munged(self) -> None:
        """munged as root with ``--force``: the run directory may sit below a directory only
        root may enter (pytest's, a 0700 home), where munge's own user cannot reach its key
        and munged refuses, without ``--force``, a socket that others cannot reach. Every
        daemon, client and job of the embedded cluster runs as root."""
        p = self.paths
        self.start_daemon(
            "munged",
            SERVICES,
            [
                *("munged", "--foreground", "--force", f"--key-file={p.munge_key}"),
                f"--socket={p.munge_socket}",
                f"--pid-file={p.munge / 'munged.pid'}",
                f"--log-file={p.munge / 'munged.log'}",
                f"--seed-file={p.munge / 'munged.seed'}",
            ],
        )
        self._wait("munged", lambda: p.munge_socket.exists(), p.munge / "munged.log", timeout=10)

    def start_slurmctld(self, *, clean: bool) -> None:
        """Start the controller; ``clean`` ignores saved state (first start only: a restart
        must keep the jobs)."""
        argv = ["slurmctld", "-D", "-f", str(self.paths.conf)]
        if clean:
            argv.append("-c")
        self.start_daemon("slurmctld", CONTROLLER, argv, hostname=CONTROLLER)
        self._wait(
            "slurmctld",
            lambda: "UP" in self.client(["scontrol", "ping"], timeout=8, check=False).stdout,
            self.paths.daemon_log("slurmctld"),
            timeout=self.settings.up_timeout_s,
        )

    def start_slurmd(self, node: str) -> None:
        self.start_daemon(
            f"slurmd-{node}",
            node,
            ["slurmd", "-D", "-f", str(self.paths.conf), "-N", node],
            hostname=node,
        )

    def _wait(self, name: str, ready: Any, log: Path, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        daemon = self.daemons[name]
        while time.monotonic() < deadline:
            if daemon.proc.poll() is not None:
                raise EnvironmentPrepError(
                    f"embedded Slurm: {name} exited with status {daemon.proc.returncode} while "
                    f"starting; last lines of {log}:\n{_tail(log)}\n"
                    f"and of {self.paths.logs / (name + '.out')}:\n"
                    f"{_tail(self.paths.logs / (name + '.out'))}"
                )
            if ready():
                return
            time.sleep(0.1)
        raise EnvironmentPrepError(
            f"embedded Slurm: {name} not ready within {timeout:.0f} s; last lines of {log}:\n"
            f"{_tail(log)}"
        )

    # --- bring-up / tear-down -------------------------------------------------------------

    def up(self) -> None:
        """Files, munged, slurmctld, every slurmd; returns when every node is idle. Raises
        EnvironmentPrepError, before anything starts, when a socket path would be too long."""
        problem = self.paths.socket_problem(self.workers())
        if problem is not None:
            raise EnvironmentPrepError(problem)
        self.write_files()
        self.start_munged()
        self.start_slurmctld(clean=True)
        for node in self.workers():
            self.start_slurmd(node)
        self.wait_nodes_idle(self.workers(), timeout=self.settings.up_timeout_s)
        self.nodes.sink.emit(
            "platform", "slurm_up", nodes=self.workers(), conf=str(self.paths.conf)
        )

    def wait_nodes_idle(self, nodes: list[str], *, timeout: float) -> None:
        """Block until every node in ``nodes`` is IDLE; raises EnvironmentPrepError naming the
        nodes that are not, their state and their slurmd's log tail."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            for node in nodes:
                d = self.daemons.get(f"slurmd-{node}")
                if d is not None and d.proc.poll() is not None:
                    log = self.paths.logs / f"slurmd-{node}.log"
                    out = self.paths.logs / f"slurmd-{node}.out"
                    raise EnvironmentPrepError(
                        f"embedded Slurm: slurmd of {node} exited with status "
                        f"{d.proc.returncode}; last lines of {log}:\n{_tail(log)}\n"
                        f"and of {out}:\n{_tail(out)}"
                    )
            states = self.node_states()
            if all(states.get(n, "").split("+")[0] == "IDLE" for n in nodes):
                return
            time.sleep(0.2)
        bad = [n for n in nodes if states.get(n, "").split("+")[0] != "IDLE"]
        tails = "\n".join(
            f"  {n} ({states.get(n, 'unknown')}), {self.paths.logs / f'slurmd-{n}.log'}:\n"
            f"{_tail(self.paths.logs / f'slurmd-{n}.log', 8)}"
            for n in bad
        )
        raise EnvironmentPrepError(
            f"embedded Slurm: node(s) {', '.join(bad)} not idle within {timeout:.0f} s:\n{tails}"
        )

    def node_states(self) -> dict[str, str]:
        """Node name -> Slurm state (e.g. ``IDLE``, ``DOWN+NOT_RESPONDING``); empty when the
        controller does not answer."""
        done = self.client(["scontrol", "show", "node", "-o"], timeout=8, check=False)
        if done.returncode != 0:
            return {}
        return {
            r["NodeName"]: r.get("State", "") for r in parse_records(done.stdout) if "NodeName" in r
        }

    def down(self) -> None:
        """Cancel every job, stop every daemon (slurmd, slurmctld, munged: newest first).
        Idempotent. What the daemons left (stepds, tasks) goes with the node cgroups."""
        if "slurmctld" in self.daemons and self.daemons["slurmctld"].proc.poll() is None:
            with contextlib.suppress(PlatformError):
                self.client(
                    ["scancel", f"--partition={self.settings.partition}"], timeout=8, check=False
                )
        errors = []
        for entry in reversed(self.ledger.pending()):
            if entry.kind == "slurm-daemon":
                try:
                    self.ledger.revert(entry.id)
                except FaultError as exc:
                    errors.append(str(exc))
        for daemon in [*self._retired, *self.daemons.values()]:
            self._reap(daemon)
        if errors:
            raise FaultError("; ".join(errors))

    # --- the harness's Slurm commands ---------------------------------------------------------

    def client(
        self,
        argv: list[str],
        *,
        timeout: float = 15.0,
        check: bool = True,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command (sbatch, squeue, scontrol, scancel...) in the controller's
        network namespace with the run's config (plus ``env``: sbatch exports it to the
        job). Raises PlatformError when it cannot run, times out, or (``check``) exits
        non-zero."""
        full = [*self.nodes.launch_prefix(CONTROLLER), *argv]
        full_env = self.env()
        for key in [k for k in full_env if k in TORCHRUN_ENV]:
            del full_env[key]
        full_env.update(env or {})
        return run_client_command(argv, full, full_env, timeout=timeout, check=check)

    def describe(self) -> dict[str, Any]:
        """What the dossier needs: config path, daemons with pids, settings."""
        return {
            "conf": str(self.paths.conf),
            "controller": f"{CONTROLLER} {CONTROLLER_ADDRESS} ({self.ctl_ns})",
            "daemons": {n: {"node": d.node, "pid": d.proc.pid} for n, d in self.daemons.items()},
            "settings": asdict(self.settings),
        }
