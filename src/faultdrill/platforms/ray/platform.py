"""``platform: ray`` (DRAFT): a TorchTrainer job on an embedded Ray cluster.

Against today's ``platforms/api.py`` contract. The namespace cluster (nodes, links, cgroups)
is an inner ``NetnsPlatform`` (the seam's ``NodeCluster`` once it lands); on it an
:class:`~.embedded.EmbeddedRay` (head on ``n1``, a Ray worker node on every other node,
``--num-cpus=procs_per_node``), the GCS observer, and the driver on the head. A spare
becomes a Ray worker node only when a member's ``ray start`` dies (``spare_placed``): Ray
would otherwise place workers on it from the start, and node faults could not aim.

* ``submit``: the driver runs ``[python, *job.argv]`` on the head node, with the job's env and
  the cluster's (``RAY_ADDRESS``, ``FAULTDRILL_NODE_ADDR``...), plus
  ``FAULTDRILL_RAY_WORKERS`` (nodes x procs_per_node) and ``FAULTDRILL_RAY_MAX_FAILURES``
  (``max_restarts``). The reference workload (``-m faultdrill.workloads.lm``) is run as
  ``-m faultdrill.workloads.lm_ray`` with ``--workers``/``--max-failures``.
* ``poll``: the driver's exit status (0 succeeded, else failed; running while it runs).
* ``replicas``: the driver is the ``agent``; a process whose pid announced a rank in a
  probe ``run_start`` is that rank's ``worker``; its children are ``child``; Ray's own
  processes are not replicas of the job (see ``replicas``).
* Today's fault protocols are served by delegation, so the existing faults already drill
  Ray: ``worker_pids`` (kill-worker = a Train worker process), ``link``/``links``/rules
  (link faults, partition), ``node_pids``/``set_node_state`` (node-down, node-freeze),
  ``agent_pid`` = the node's ``ray start --block`` (node-drain: its SIGTERM makes Ray drain
  the node, reason PREEMPTION, for ``graceful_drain_s``; Train goes PREEMPTING),
  ``control_plane_processes`` = the GCS (control-plane pause), ``control_plane_endpoint``
  = the head and the GCS port (control-plane cut).
* The seam's actions are drafted as plain methods returning :class:`Change` (a local
  stand-in for the one ``platforms/api.py`` will define).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultdrill.errors import FaultError, PlatformError
from faultdrill.ledger import THIS_RUN, undoer
from faultdrill.platforms.api import (
    JobSpec,
    JobState,
    NodeInfo,
    Platform,
    Replica,
    register,
)
from faultdrill.platforms.local import procfs
from faultdrill.platforms.local.linux import NodeLink, ns_run
from faultdrill.platforms.local.netns import NetnsPlatform
from faultdrill.platforms.ray.embedded import GCS_PORT, EmbeddedRay, RayTuning
from faultdrill.platforms.ray.nodes import NetnsNodes

# TODO(adapter): declare faultdrill.platforms.api.Ability members instead.
ABILITY_NETWORK_LINKS = "network-links"  # draft: the pre-seam ability name
ABILITY_NETWORK_TRACK = "network-track"  # draft: the pre-seam ability name
ABILITY_NODE_CONTROL = "node-control"  # draft: the pre-seam ability name
ABILITY_SIGNAL_WORKERS = "signal-workers"  # draft: the pre-seam ability name

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.ledger import Ledger
    from faultdrill.plan import Resources

__all__ = ["Change", "RayPlatform"]

_LM = ["-m", "faultdrill.workloads.lm"]
_LIVE: dict[str, EmbeddedRay] = {}  # run id -> the cluster this process runs (for undos)


@dataclass(frozen=True)
class Change:
    """Stand-in for the seam's ``Change`` (see ../shared design): one undoable action."""

    kind: str
    data: dict[str, Any]
    label: str
    command: str
    apply: Callable[[], dict[str, Any] | None]
    reversible: bool = True


@undoer("ray-signal", owns={})  # acts on nothing
def _undo_signal(data: dict[str, Any]) -> None:
    """A delivered signal is not taken back (entry closed at once)."""


@undoer("ray-head-stopped", owns={"run_id": THIS_RUN})
def _undo_head_stopped(data: dict[str, Any]) -> None:
    """Start the head again when the cluster runs in this process (a drill in progress);
    after a crash (``faultdrill cleanup``) there is nothing to bring back."""
    ray = _LIVE.get(str(data["run_id"]))
    if ray is not None and not ray.running(ray.head, "head"):
        ray.stop_node(ray.head, "head")
        ray.start_node(ray.head)


@register
class RayPlatform(Platform):
    """A Ray Train job on an embedded Ray cluster (see the module)."""

    name = "ray"

    def __init__(
        self,
        resources: Resources,
        work_dir: Path,
        ledger: Ledger,
        sink: EventSink,
        *,
        gcs_ft: bool = False,
        tuning: RayTuning | None = None,
    ) -> None:
        super().__init__(resources, work_dir, ledger, sink)
        self.cluster = NetnsPlatform(resources, work_dir, ledger, sink)
        self.ray = EmbeddedRay(
            NetnsNodes(self.cluster),
            ledger,
            sink,
            work_dir,
            node_names=self.cluster.node_names,
            gcs_ft=gcs_ft,
            tuning=tuning,
            cpus=resources.procs_per_node,
        )
        self.driver: Any = None  # subprocess.Popen of the driver
        self._spares = list(self.cluster.spare_names)  # Ray nodes started on a node loss
        self._handled: set[str] = set()
        self._placing: threading.Thread | None = None
        self._ranks: dict[int, int] = {}  # pid -> rank, from run_start events
        self._offsets: dict[Path, int] = {}

    @classmethod
    def abilities_for(cls, resources: Resources) -> frozenset[Any]:
        return frozenset(
            {
                ABILITY_SIGNAL_WORKERS,
                ABILITY_NETWORK_LINKS,
                ABILITY_NODE_CONTROL,
                ABILITY_NETWORK_TRACK,
                "control-plane",
                "checkpoint-mounts",
            }
        )

    # --- the contract ----------------------------------------------------------------

    def _prepare(self) -> None:
        self.cluster._prepare()
        _LIVE[self.ledger.run_id] = self.ray
        self.ray.start()
        self.sink.emit("platform", "ray_dossier", **{"dossier": json.dumps(self.ray.dossier())})

    def _submit(self, job: JobSpec) -> None:
        argv = list(job.argv)
        workers = len(job.nodes) * job.procs_per_node
        if argv[:2] == _LM:
            argv = ["-m", "faultdrill.workloads.lm_ray", *argv[2:]]
            argv += [f"--workers={workers}", f"--max-failures={job.max_restarts}"]
        self.ray.start_observer(job.events_dir, job.task_id)
        env = {
            **os.environ,
            **job.env,
            **self.ray.driver_env(self.ray.head),
            "FAULTDRILL_EVENTS_DIR": str(job.events_dir),
            "FAULTDRILL_TASK_ID": job.task_id,
            "FAULTDRILL_RUN_ID": job.run_id,
            "FAULTDRILL_RAY_WORKERS": str(workers),
            "FAULTDRILL_RAY_MAX_FAILURES": str(job.max_restarts),
            "PYTHONUNBUFFERED": "1",
        }
        log_path = job.work_dir / "logs" / "ray-driver.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            self.driver = self.ray.nodes.launch(
                self.ray.head, [sys.executable, *argv], env=env, cwd=job.work_dir, log=log
            )
        self.sink.emit(
            "platform",
            "agent_spawned",
            node=self.ray.head,
            pid=self.driver.pid,
            start_time=procfs.start_time(self.driver.pid),
            role="ray-driver",
        )

    def _poll(self) -> JobState:
        if self.driver is None:
            return JobState.PENDING
        rc = self.driver.poll()
        if rc is None:
            self._replace_lost_nodes()
            return JobState.RUNNING
        return JobState.SUCCEEDED if rc == 0 else JobState.FAILED

    def _replace_lost_nodes(self) -> None:
        """A member whose ``ray start`` died (node down, drained) gets a spare: a new Ray
        worker node joins the cluster (started in a thread: it takes seconds), and Ray Train
        schedules its next worker group there."""
        if self._placing is not None and self._placing.is_alive():
            return
        for node in self.cluster.node_names:
            role = "head" if node == self.ray.head else "worker"
            daemon = self.ray.daemons.get((node, role))
            if node in self._handled or daemon is None or daemon.proc.poll() is None:
                continue
            self._handled.add(node)
            self.sink.emit(
                "platform", "node_lost", node=node, reason="ray start exited", rc=daemon.proc.poll()
            )
            if not self._spares:
                self.sink.emit("platform", "no_spare", replaces=node, category="scheduling")
                return
            spare = self._spares.pop(0)
            self.cluster.set_node_state(spare, "up", f"placed to replace {node}")
            self.sink.emit("platform", "spare_placed", node=spare, replaces=node)
            self.ray.node_names.append(spare)
            self._placing = threading.Thread(target=self.ray.start_node, args=(spare,), daemon=True)
            self._placing.start()
            return

    def nodes(self) -> list[NodeInfo]:
        return self.cluster.nodes()

    def replicas(self) -> list[Replica]:
        """The job's processes: the driver, the Train workers (once they announced their
        rank) and their descendants. Ray's own processes (raylets, GCS, agents, pooled idle
        workers, a worker not yet announced) are the platform, not the job: they live until
        tear-down, and the timeline keeps a process's first role, so a pooled worker seen
        as "other" before it became a rank would never count as that rank's replica."""
        self._read_ranks()
        driver = self.driver.pid if self.driver is not None else None
        out = []
        for node in self.ray.node_names:
            pids = self.ray.node_pids(node)
            workers = {p for p in pids if p in self._ranks}
            for pid in pids:
                ppid = procfs.parent_pid(pid)
                if pid == driver:
                    role, rank = "agent", None
                elif pid in workers:
                    role, rank = "worker", self._ranks[pid]
                elif ppid is not None and ppid in workers:
                    role, rank = "child", self._ranks[ppid]
                else:
                    continue
                start = procfs.start_time(pid)
                if start is not None:
                    out.append(Replica(pid, start, role, node, rank, None, ppid))
        return out

    def _read_ranks(self) -> None:
        """pid -> rank from the probe's ``run_start`` lines (read incrementally)."""
        if self.job is None:
            return
        for path in self.job.events_dir.glob("probe-rank*.jsonl"):
            off = self._offsets.get(path, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(off)
                    chunk = f.read()
            except OSError:
                continue
            end = chunk.rfind(b"\n") + 1
            self._offsets[path] = off + end
            for raw in chunk[:end].splitlines():
                if b'"run_start"' in raw:
                    ev = json.loads(raw)
                    self._ranks[int(ev["pid"])] = int(ev["rank"])

    def _signal_all(self, sig: int) -> None:
        for rep in self.replicas():
            procfs.kill_checked(rep.pid, rep.start_time, sig)

    def _any_alive(self) -> bool:
        if self.driver is not None and self.driver.poll() is None:
            return True
        return any(r.role != "agent" for r in self.replicas())

    def _teardown(self) -> None:
        if self._placing is not None:
            self._placing.join(timeout=self.ray.start_timeout_s)
        if self.driver is not None and self.driver.poll() is None:
            self.driver.kill()
        if self.driver is not None:
            self.driver.wait()
        self.ray.stop()
        _LIVE.pop(self.ledger.run_id, None)
        self.cluster._teardown()

    def leftovers(self) -> list[str]:
        """Ports still held by the job's processes (the Ray daemons' own ports stay open
        until tear-down: the cluster outlives the job)."""
        held = procfs.listening_ports(r.pid for r in self.replicas())
        return [
            f"TCP port {port} still held by job process {pid}"
            for pid, ports in held.items()
            for port in ports
        ]

    # --- today's fault protocols, by delegation ----------------------------------------

    def worker_pids(self, *, rank: int | None = None, node: str | None = None) -> list[Replica]:
        return [
            r
            for r in self.replicas()
            if r.role == "worker"
            and (rank is None or r.rank == rank)
            and (node is None or r.node == node)
        ]

    def link(self, node: str) -> NodeLink:
        return self.cluster.link(node)

    def links(self) -> list[NodeLink]:
        return self.cluster.links()

    def add_rule(self, rule: Any) -> None:
        self.cluster.add_rule(rule)  # type: ignore[attr-defined]  # draft, pre-seam

    def drop_rule(self, rule_id: str) -> None:
        self.cluster.drop_rule(rule_id)  # type: ignore[attr-defined]  # draft, pre-seam

    def start_network_track(self, hz: float) -> None:
        self.cluster.start_network_track(hz)

    def cgroup(self, node: str) -> procfs.Cgroup | None:
        return self.cluster.cgroup(node)

    def node_pids(self, node: str) -> list[int]:
        return self.ray.node_pids(node)

    def agent_pid(self, node: str) -> int | None:
        """The node's ``ray start --block`` (its SIGTERM drains the node)."""
        role = "head" if node == self.ray.head else "worker"
        if not self.ray.running(node, role):
            return None
        return int(self.ray.daemons[(node, role)].proc.pid)

    def set_node_state(self, node: str, state: str, reason: str) -> None:
        self.cluster.set_node_state(node, state, reason)

    def control_plane_label(self) -> str:
        return f"Ray GCS {self.ray.address} ({self.ray.gcs_mode}) on {self.ray.head}"

    def control_plane_endpoint(self) -> tuple[str, int] | None:
        return self.ray.head, GCS_PORT

    def control_plane_processes(self) -> list[Replica]:
        pid = self.ray.gcs_pid()
        start = procfs.start_time(pid) if pid is not None else None
        if pid is None or start is None:
            return []
        return [Replica(pid, start, "other", self.ray.head, None, None, procfs.parent_pid(pid))]

    # --- the seam's actions (draft) ---------------------------------------------------

    def signal_rank(self, rank: int, sig: int) -> list[Change]:
        """Signal the live Train worker process of ``rank`` (irreversible)."""
        found = self.worker_pids(rank=rank)
        if not found:
            raise FaultError(f"no live Ray Train worker holds rank {rank}")
        rep = max(found, key=lambda r: r.start_time)  # the newest incarnation's
        name = signal.Signals(sig).name

        def apply() -> dict[str, Any]:
            if not procfs.kill_checked(rep.pid, rep.start_time, sig):
                raise FaultError(f"worker pid {rep.pid} exited before it could be signalled")
            return {"pid": rep.pid, "rank": rank, "node": rep.node}

        return [
            Change(
                "ray-signal",
                {"pid": rep.pid, "start_time": rep.start_time, "signal": name},
                f"{name} Ray Train worker pid {rep.pid} (rank {rank}, {rep.node})",
                f"kill -{name[3:]} {rep.pid}",
                apply,
                reversible=False,
            )
        ]

    def node_down(self, node: str) -> list[Change]:
        """Cut the node's link (undo: link up), then SIGKILL its raylet tree (its cgroup)."""
        ln = self.cluster.link(node)
        group = self.cluster.cgroup(node)
        if group is None:
            raise FaultError(f"node {node} has no cgroup")

        def cut() -> dict[str, Any]:
            ns_run(ln.ns, ["ip", "link", "set", "dev", ln.dev, "down"])
            return {"dev": ln.dev}

        def kill() -> dict[str, Any]:
            pids = group.pids()
            left = group.kill_all(timeout_s=5.0)
            if left:
                raise FaultError(f"processes {left} of {node} survived SIGKILL")
            return {"killed": pids}

        return [
            Change(
                "link-down",
                {"ns": ln.ns, "dev": ln.dev, "node": node},
                f"link {ln.dev} down in {ln.ns} (node-down)",
                f"ip -n {ln.ns} link set dev {ln.dev} down",
                cut,
                True,
            ),
            Change(
                "ray-signal",
                {"path": str(group.path), "node": node, "signal": "SIGKILL"},
                f"SIGKILL every process of {node} (raylet tree)",
                f"kill -KILL $(cat {group.path}/cgroup.procs)",
                kill,
                reversible=False,
            ),
        ]

    def node_drain(self, node: str) -> list[Change]:
        """Ray's drain: SIGTERM to the node's ``ray start --block`` makes it ask the GCS to
        drain the node (reason PREEMPTION, deadline ``graceful_drain_s``); Ray Train goes
        PREEMPTING, then restarts elsewhere when the node leaves. Not reversible: the node
        exits at the deadline (bring it back with ``ray.start_node``)."""
        pid = self.agent_pid(node)
        if pid is None:
            raise FaultError(f"node {node} runs no Ray node")
        start = procfs.start_time(pid)

        def apply() -> dict[str, Any]:
            if not procfs.kill_checked(pid, start, signal.SIGTERM):
                raise FaultError(f"ray start of {node} exited before it was drained")
            return {"pid": pid, "drain_s": self.ray.tuning.graceful_drain_s}

        return [
            Change(
                "ray-signal",
                {"pid": pid, "start_time": start, "signal": "SIGTERM", "node": node},
                f"drain {node}: SIGTERM ray start pid {pid}",
                f"kill -TERM {pid}  # ray start --block of {node}: drains it",
                apply,
                reversible=False,
            )
        ]

    def control_plane_pause(self) -> list[Change]:
        """SIGSTOP the GCS (undo: SIGCONT)."""
        procs = self.control_plane_processes()
        if not procs:
            raise PlatformError("the GCS is not running")
        rep = procs[0]

        def apply() -> dict[str, Any]:
            if not procfs.kill_checked(rep.pid, rep.start_time, signal.SIGSTOP):
                raise FaultError(f"GCS pid {rep.pid} exited before the pause")
            return {"pid": rep.pid}

        return [
            Change(
                "sigstop",
                {"pid": rep.pid, "start_time": rep.start_time},
                f"SIGSTOP GCS pid {rep.pid}",
                f"kill -STOP {rep.pid}",
                apply,
            )
        ]

    def control_plane_stop(self) -> list[Change]:
        """SIGKILL the GCS (``ray start --block`` then stops the whole head node); undo:
        start the head again (with redis the cluster state comes back; without it the
        cluster is lost: worker nodes and drivers of the old GCS die)."""
        procs = self.control_plane_processes()
        if not procs:
            raise PlatformError("the GCS is not running")
        rep = procs[0]

        def apply() -> dict[str, Any]:
            procfs.kill_checked(rep.pid, rep.start_time, signal.SIGKILL)
            return {"pid": rep.pid, "gcs_mode": self.ray.gcs_mode}

        return [
            Change(
                "ray-head-stopped",
                {"run_id": self.ledger.run_id, "pid": rep.pid, "gcs_mode": self.ray.gcs_mode},
                f"SIGKILL GCS pid {rep.pid} ({self.ray.gcs_mode})",
                f"kill -KILL {rep.pid}; later: ray start --head ... on {self.ray.head}",
                apply,
            )
        ]
