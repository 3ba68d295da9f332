"""``platform: ray``: a Ray Train job (``TorchTrainer``) on an embedded Ray cluster.

The cluster (:mod:`.cluster`: a head, a Ray worker node on each of ``n1..nN``, spares that
join on a node loss) is brought up once per run and shared by its items
(:meth:`RayPlatform.run_scope`), or per item outside a run. On it:

* ``submit``: the driver runs ``[python, *job.argv]`` on ``n1`` (its namespace and
  cgroup), with the job's environment and the cluster's (``RAY_ADDRESS``,
  ``FAULTDRILL_NODE_ADDR``, Ray Train's tuning), plus ``FAULTDRILL_RAY_WORKERS`` (nodes x
  procs_per_node) and ``FAULTDRILL_RAY_MAX_FAILURES`` (``max_restarts``). The reference
  workload (``-m faultdrill.workloads.lm``) is run as ``-m faultdrill.workloads.lm_ray``
  with ``--workers``/``--max-failures``. The GCS observer (:mod:`.observe`) starts with it.
* ``poll``: the driver's exit status (0 succeeded, else failed; running while it runs).
  While it runs, a member that Ray declares dead, whose ``ray start`` exits, or that a
  drill drained, is replaced by the next spare joining the cluster (``spare_placed``).
* ``replicas``: the driver and the Train controller (its pid from the controller's
  events) are ``agent``; a process that announced a rank (probe ``run_start``) is that
  rank's ``worker``; processes below them are ``child`` (:mod:`faultdrill.lineage`). Ray's
  own processes (raylets, GCS, pooled idle workers) are the platform, not the job.
* Actions (:mod:`faultdrill.platforms.api`): a rank's Train worker process is signalled
  (pid and start time); a node goes down (link cut, then its cgroup killed: raylet,
  workers, and on ``n1`` the driver), freezes (cgroup freezer) or is drained (SIGTERM to
  its ``ray start --block``: Ray drains it, reason PREEMPTION, until the deadline, then
  stops it); links lose, slow, flap or are cut (the node cluster's rules); the control
  plane is the GCS: paused (SIGSTOP), cut (its port dropped on the head's link) or stopped
  (SIGKILL: ``ray start`` then stops the head node; the undo starts the head again, which
  keeps the cluster only with ``gcs_ft: redis``); storage outages act on the checkpoint
  directory of this host (:class:`HostStorage`: Ray's storage path is that directory's
  parent, and the nodes share the harness's mounts).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultdrill import rundir
from faultdrill.errors import EnvironmentPrepError, FaultError
from faultdrill.events import RAY_CHECKPOINT_REGISTERED
from faultdrill.host import procfs
from faultdrill.host.cluster import NodeCluster
from faultdrill.host.linux import netns_unavailable, signal_change, sigstop_change
from faultdrill.host.storage import HostStorage, fuse_missing
from faultdrill.host.throttle import cpu_controller_missing, throttle_change
from faultdrill.ledger import THIS_RUN, undoer
from faultdrill.lineage import Lineage
from faultdrill.platforms.api import (
    Ability,
    Change,
    JobSpec,
    JobState,
    NodeInfo,
    Note,
    Platform,
    Replica,
    register,
)
from faultdrill.platforms.hosted import NodeLinks, ProcessReplicas
from faultdrill.platforms.ray.cluster import (
    LIVE,
    RayCluster,
    current,
    settings_of,
    shared_cluster,
)
from faultdrill.platforms.ray.embedded import GCS_PORT, ray_missing, redis_missing

if TYPE_CHECKING:
    import contextlib
    import subprocess

    from faultdrill.events import EventSink
    from faultdrill.ledger import Ledger
    from faultdrill.plan import Resources

__all__ = ["DRIVER_NODE", "RayPlatform"]

_LM = ["-m", "faultdrill.workloads.lm"]
#: Where the driver (and so Ray Train's controller) runs.
DRIVER_NODE = "n1"
_SCRUB = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RAY_ADDRESS")
#: Process titles of the actors Ray Train starts for a job (``ray::<class>...``).
_JOB_ACTORS = ("ray::TrainController", "ray::RayTrainWorker", "ray::PlacementGroupCleaner")

#: Every ability but the GCS stop (head: own only) and a replica copy (Ray Train starts its
#: workers as actors: there is no command line to copy one from).
#: ``data-outage`` is left out until a drill has proved it under Ray Train (see why_not).
_EMBEDDED = frozenset(Ability) - {
    Ability.CONTROL_PLANE_STOP,
    Ability.REPLICA_COPY,
    Ability.HANG_RANK,
    Ability.OOM_RANK,
    Ability.DATA_OUTAGE,
}
#: Why ``hang-worker`` is refused here (no Ray drill has shown what stopping a Train
#: worker actor does to Ray's own worker health checks yet).
_NO_HANG = (
    "hang-worker is not drilled on Ray yet (a Train worker is an actor process whose "
    "SIGSTOP Ray's own health checks may see first); drill the hang on platform local or "
    "slurm (embedded: true)"
)
_NO_OOM = (
    "a Ray Train worker is an actor in a Ray worker process that Ray replaces by a new "
    "actor, outside any memory limit faultdrill could keep on the rank; drill an OOM kill "
    "on the local platform or the embedded Slurm cluster (resources.platform: local)"
)
_NO_HEAD_RESTART = (
    "with head: n1 the head also runs Train workers and the driver, so stopping the GCS "
    "stops the job itself; set resources.ray.head: own"
)


@undoer("ray-head-stopped", owns={"run_id": THIS_RUN})
def _undo_head_stopped(data: dict[str, Any]) -> None:
    """Start the head again when the cluster runs in this process (a drill in progress);
    after a crash (``faultdrill cleanup``) there is nothing to bring back."""
    ray = LIVE.get(str(data["run_id"]))
    if ray is not None and not ray.running(ray.head, "head"):
        ray.stop_node(ray.head, "head", grace_s=2.0)  # what is left of a dead head
        ray.start_node(ray.head)


@undoer("ray-signal", owns={})  # acts on nothing
def _undo_signal(data: dict[str, Any]) -> None:
    """A delivered signal is not taken back (kind written by the draft adapter)."""


class _Announcements:
    """What the job's own events say about its processes, read incrementally from the
    item's events directory: pid -> rank (``run_start``), the Train controller's pid, the
    pids of the newest worker group, and the nodes the GCS declared dead."""

    def __init__(self, events_dir: Path, since: float) -> None:
        self.dir = events_dir
        self.since = since  # node losses before this (monotonic) time are not the job's
        self.ranks: dict[int, int] = {}
        self.controller: int | None = None
        self.group: list[int] = []
        self.dead: list[str] = []
        self._offsets: dict[Path, int] = {}
        self._lock = threading.Lock()

    def read(self) -> None:
        with self._lock:
            for path in sorted(self.dir.glob("*.jsonl")):
                if path.name.startswith("probe-rank") or path.name.startswith("ray-"):
                    for ev in self._new_lines(path):
                        self._take(ev)

    def _new_lines(self, path: Path) -> list[dict[str, Any]]:
        off = self._offsets.get(path, 0)
        try:
            with open(path, "rb") as f:
                f.seek(off)
                chunk = f.read()
        except OSError:
            return []
        end = chunk.rfind(b"\n") + 1
        self._offsets[path] = off + end
        out = []
        for raw in chunk[:end].splitlines():
            try:
                ev = json.loads(raw)
            except ValueError:
                continue
            if isinstance(ev, dict):
                out.append(ev)
        return out

    def _take(self, ev: dict[str, Any]) -> None:
        kind = ev.get("kind")
        if kind == "run_start" and ev.get("src") == "probe":
            self.ranks[int(ev["pid"])] = int(ev["rank"])
        elif ev.get("source") == "ray-train-controller" and ev.get("controller_pid"):
            self.controller = int(ev["controller_pid"])
            if kind == "ray_worker_group_started":
                self.group = [int(p) for p in ev.get("pids") or [] if p is not None]
        elif (
            kind == "node_lost"
            and ev.get("source") == "gcs"
            and ev.get("node")
            and float(ev.get("mono", 0.0)) >= self.since
        ):
            self.dead.append(str(ev["node"]))


#: The variants ``variant_for`` picks, by name; each registers itself on import (its
#: module imports this one: naming it here would close an import circle).
VARIANTS: dict[str, type[Platform]] = {}


@register
class RayPlatform(ProcessReplicas, NodeLinks, HostStorage, Platform):
    """A Ray Train job on an embedded Ray cluster (see the module)."""

    signal_noun = "Ray Train worker pid"
    worker_noun = "Ray Train worker"

    name = "ray"
    checkpoint_commits = ("ray-controller", RAY_CHECKPOINT_REGISTERED)

    def __init__(
        self, resources: Resources, work_dir: Path, ledger: Ledger, sink: EventSink
    ) -> None:
        super().__init__(resources, work_dir, ledger, sink)
        self.settings = settings_of(resources)
        self.rc: RayCluster | None = None
        self._owned = False
        self.driver: subprocess.Popen[bytes] | None = None
        self._driver_start: int | None = None
        self.state: dict[str, str] = {}
        self._handled: set[str] = set()
        self._spares: list[str] = []
        self._placing: threading.Thread | None = None
        self._seen: _Announcements | None = None
        self._lineage = Lineage()

    # --- abilities ----------------------------------------------------------------------

    @classmethod
    def abilities_for(cls, resources: Resources) -> frozenset[Ability]:
        settings = settings_of(resources)
        if not settings.is_embedded:
            return frozenset({Ability.SIGNAL_RANK, Ability.CHECKPOINT_FILES})
        return _EMBEDDED | ({Ability.CONTROL_PLANE_STOP} if settings.head == "own" else frozenset())

    @classmethod
    def why_not(cls, ability: Ability, resources: Resources) -> str:
        if ability is Ability.REPLICA_COPY:
            return (
                "Ray Train's workers are actors started by Ray, not command lines a copy could "
                "be started from; drill a stale replica with workload.bad_mode: stale-replica"
            )
        if ability is Ability.CONTROL_PLANE_STOP and settings_of(resources).is_embedded:
            return _NO_HEAD_RESTART
        if ability is Ability.HANG_RANK and settings_of(resources).is_embedded:
            return _NO_HANG
        if ability is Ability.OOM_RANK:
            return _NO_OOM
        if ability is Ability.DATA_OUTAGE:
            return (
                "data-outage is drilled on platform local and on the embedded Slurm cluster "
                "(no drill has proved it under Ray Train yet); run the scenario there"
            )
        return (
            "faultdrill owns no node, link, control plane or mount of a Ray cluster given by "
            "address; use the embedded cluster (remove resources.ray.address, isolation: netns)"
        )

    @classmethod
    def machine_lacks(cls, abilities: frozenset[Ability]) -> dict[Ability, str]:
        out: dict[Ability, str] = {}
        for ability in sorted(abilities, key=str):
            if ability in (Ability.STORAGE_UNREACHABLE, Ability.STORAGE_SLOW) and fuse_missing():
                out[ability] = "; ".join(fuse_missing())
            elif ability is Ability.THROTTLE_RANK and cpu_controller_missing():
                out[ability] = str(cpu_controller_missing())
            elif ability in (Ability.STORAGE_READ_ONLY, Ability.STORAGE_FULL) and os.geteuid():
                out[ability] = "root (storage faults mount over the checkpoint directory)"
        return out

    @classmethod
    def run_scope(
        cls, resources: Resources, run_dir: Path
    ) -> contextlib.AbstractContextManager[None]:
        """One embedded cluster for every item of the run (:func:`.cluster.shared_cluster`)."""
        return shared_cluster(resources, run_dir)

    @classmethod
    def variant_for(cls, resources: Resources) -> type[Platform]:
        if not settings_of(resources).is_embedded:
            return VARIANTS["address"]
        return cls

    # --- the contract ----------------------------------------------------------------

    @property
    def cluster(self) -> RayCluster:
        if self.rc is None:
            raise FaultError("the Ray cluster is not prepared yet")
        return self.rc

    def _prepare(self) -> None:
        why = ray_missing() or netns_unavailable()
        if self.settings.gcs_ft == "redis":
            why = why or redis_missing()
        if why:
            raise EnvironmentPrepError(f"embedded Ray cluster: {why}")
        shared = current(self.resources)
        self._owned = shared is None
        self.rc = shared or RayCluster(self.resources, self.work_dir, self.ledger, self.sink)
        if shared is not None:  # this item's faults name the shared cluster's namespaces
            self.ledger.share(shared.ledger.run_id)
        self.rc.attach(self.sink)
        facts = self.rc.ensure_up()
        self.state = {n: "up" for n in self.rc.members}
        self.state.update({n: "spare" for n in self.rc.spares})
        self._spares = list(self.rc.spares)
        self.sink.emit(
            "platform",
            "ray_cluster",
            shared=not self._owned,
            gcs_mode=self.rc.ray.gcs_mode,
            head=self.rc.ray.head,
            driver_node=DRIVER_NODE,
            **facts,
            dossier=json.dumps(self.rc.ray.dossier()),
        )

    def nodes(self) -> list[NodeInfo]:
        rc = self.cluster
        out = [
            NodeInfo(n, rc.nodes.address(n), self.state.get(n, "up"), n in rc.spares)
            for n in [*rc.members, *rc.spares]
        ]
        if rc.ray.head not in rc.members:
            out.append(NodeInfo(rc.ray.head, rc.nodes.address(rc.ray.head), "up"))
        return out

    def set_node_state(self, node: str, state: str, reason: str) -> None:
        """Record a node state change (by a node fault or the platform itself)."""
        old = self.state.get(node)
        if old != state:
            self.state[node] = state
            self.sink.emit(
                "platform", "node_state", node=node, state=state, previous=old, reason=reason
            )

    def _driver_command(
        self, job: JobSpec, ray_env: dict[str, str]
    ) -> tuple[list[str], dict[str, str]]:
        """The Ray driver's command line and environment (``ray_env``: how it reaches the
        cluster); the reference workload runs as its Ray Train variant. From now on the
        workers' announcements are read."""
        argv = list(job.argv)
        workers = len(job.nodes) * job.procs_per_node
        if argv[:2] == _LM:
            argv = ["-m", "faultdrill.workloads.lm_ray", *argv[2:]]
            argv += [f"--workers={workers}", f"--max-failures={job.max_restarts}"]
        self._seen = _Announcements(job.events_dir, time.monotonic())
        env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
        env.update(job.env)
        env.update(ray_env)
        env.update(
            {
                "FAULTDRILL_EVENTS_DIR": str(job.events_dir),
                "FAULTDRILL_TASK_ID": job.task_id,
                "FAULTDRILL_RUN_ID": job.run_id,
                "FAULTDRILL_RAY_WORKERS": str(workers),
                "FAULTDRILL_RAY_MAX_FAILURES": str(job.max_restarts),
                "PYTHONUNBUFFERED": "1",
            }
        )
        return [sys.executable, *argv], env

    def _driver_spawned(self, node: str) -> None:
        """Record the driver just started (``self.driver``) as the job's agent on ``node``."""
        assert self.driver is not None
        self._driver_start = procfs.start_time(self.driver.pid)
        self.sink.emit(
            "platform",
            "agent_spawned",
            node=node,
            pid=self.driver.pid,
            start_time=self._driver_start,
            role="ray-driver",
        )

    def _submit(self, job: JobSpec) -> None:
        rc = self.cluster
        argv, env = self._driver_command(job, rc.ray.driver_env(DRIVER_NODE))
        rc.ray.start_observer(job.events_dir, job.task_id)
        log_path = rundir.logs_dir(job.work_dir) / "ray-driver.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            self.driver = rc.nodes.launch(DRIVER_NODE, argv, env=env, cwd=job.work_dir, log=log)
        self._driver_spawned(DRIVER_NODE)

    def _poll(self) -> JobState:
        if self.driver is None:
            return JobState.PENDING
        rc = self.driver.poll()
        if rc is None:
            self._replace_lost_nodes()
            return JobState.RUNNING
        return JobState.SUCCEEDED if rc == 0 else JobState.FAILED

    def _lost_members(self) -> list[tuple[str, str]]:
        """Members lost now and not handled yet, each with why: Ray declared it dead, its
        ``ray start`` exited, or a drill drained it."""
        rc = self.cluster
        if self._seen is not None:
            self._seen.read()
        dead = set(self._seen.dead) if self._seen is not None else set()
        out = []
        for node in [*rc.members, *[s for s in rc.spares if self.state.get(s) == "up"]]:
            if node in self._handled or node == rc.ray.head:
                continue
            if node in dead:
                out.append((node, "Ray declared it dead"))
            elif self.state.get(node) == "drained":
                out.append((node, "drained"))
            elif not rc.ray.running(node):
                out.append((node, "its ray start exited"))
                self.sink.emit("platform", "ray_node_exited", node=node, source="faultdrill")
        return out

    def _replace_lost_nodes(self) -> None:
        """A lost member gets the next spare: a new Ray worker node joins (started in a
        thread: it takes seconds), and Ray Train places its next worker group there."""
        if self._placing is not None and self._placing.is_alive():
            return
        for node, why in self._lost_members():
            self._handled.add(node)
            if not self._spares:
                self.sink.emit(
                    "platform",
                    "no_spare",
                    replaces=node,
                    category="scheduling",
                    detail=f"{node} lost ({why}) and no spare left",
                )
                continue
            spare = self._spares.pop(0)
            self.set_node_state(spare, "up", f"placed to replace {node}")
            self.sink.emit("platform", "spare_placed", node=spare, replaces=node, why=why)
            self._placing = threading.Thread(
                target=self._join, args=(spare, node), name=f"ray-join-{spare}", daemon=True
            )
            self._placing.start()
            return

    def _join(self, spare: str, replaces: str) -> None:
        try:
            self.cluster.ray.start_node(spare)
        except (EnvironmentPrepError, OSError) as exc:
            self.set_node_state(spare, "unusable", "its Ray node did not start")
            self.sink.emit(
                "platform",
                "spare_rejected",
                node=spare,
                replaces=replaces,
                category="environment-preparation",
                precondition="ray start",
                detail=str(exc)[:300],
            )

    def replicas(self) -> list[Replica]:
        """The job's processes now (see the module): the driver and the Train controller,
        the Train workers, and the processes below them."""
        if self.rc is None or self._seen is None:
            return []
        self._seen.read()
        ranks, agents = self._seen.ranks, {self._seen.controller}
        if self.driver is not None:
            agents.add(self.driver.pid)
        procs = []
        for node in self.rc.ray.node_names:
            for pid in self.rc.nodes.node_pids(node):
                ids = procfs.identity(pid)
                if ids is None:
                    continue
                start, ppid, sid = ids
                if pid in agents:
                    role, rank = "agent", None
                else:
                    role, rank = ("worker", ranks[pid]) if pid in ranks else ("other", None)
                procs.append(Replica(pid, start, role, node, rank, None, ppid, sid))
        return [r for r in self._lineage.classify(procs) if r.role != "other"]

    def _signal_all(self, sig: int) -> None:
        for rep in self.replicas():
            procfs.kill_checked(rep.pid, rep.start_time, sig)
        if self.driver is not None and self.driver.poll() is None:
            procfs.kill_checked(self.driver.pid, self._driver_start, sig)

    def _any_alive(self) -> bool:
        if self.driver is not None and self.driver.poll() is None:
            return True
        return bool(self.replicas())

    def job_actor_pids(self) -> dict[int, str]:
        """Processes of Ray Train's actors for this job (controller, workers, placement
        group cleaner: ``ray::<class>`` titles started after the driver) still alive on the
        cluster's nodes, with their titles; empty before the job started."""
        if self.rc is None or self._driver_start is None:
            return {}
        out = {}
        for node in self.rc.ray.node_names:
            for pid in self.rc.nodes.node_pids(node):
                argv = procfs.cmdline(pid)
                start = procfs.start_time(pid)
                if argv and argv[0].startswith(_JOB_ACTORS) and (start or 0) >= self._driver_start:
                    out[pid] = argv[0]
        return out

    def leftovers(self) -> list[str]:
        """Ports still held by the job's processes, and Ray Train actors of the job still
        alive (the cluster's own daemons and ports outlive the job by design)."""
        reps = self.replicas()
        held = procfs.listening_ports(r.pid for r in reps)
        out = [
            f"TCP port {port} still held by job process {pid}"
            for pid, ports in held.items()
            for port in ports
        ]
        mine = {r.pid for r in reps}
        out += [
            f"Ray actor process {pid} ({title}) of the job still alive"
            for pid, title in sorted(self.job_actor_pids().items())
            if pid not in mine
        ]
        return out

    def _teardown(self) -> None:
        if self._placing is not None:
            self._placing.join(timeout=120)
        if self.driver is not None:
            if self.driver.poll() is None:
                self.driver.kill()
            self.driver.wait()
        rc = self.rc
        if rc is None:
            return
        try:
            left = self.job_actor_pids()
            for pid in left:
                procfs.kill_checked(pid, None, signal.SIGKILL)
            if left:
                self.sink.emit("platform", "ray_job_actors_killed", pids=sorted(left))
            rc.ray.stop_node(rc.ray.head, "observer", grace_s=2.0)
            rc.nodes.stop_network_track()
        finally:
            if self._owned:
                rc.down()
            else:
                rc.detach()

    # --- actions: a rank (SignalsRanks) ----------------------------------------------------

    def rank_replica(self, *, rank: int | None = None, node: str | None = None) -> Replica:
        found = self.live_workers(self.replicas(), rank=rank, node=node)
        # One of the newest worker group (the one Ray Train runs now) before an older
        # process that still claims the rank (a cut-off worker Ray gave up on).
        group = set(self._seen.group) if self._seen is not None else set()
        return min(
            found,
            key=lambda r: (
                r.pid not in group,
                r.rank if r.rank is not None else 1 << 30,
                -r.start_time,
            ),
        )

    # --- actions: a straggler (ThrottlesRanks) -----------------------------------------------

    def throttle_replica(self, replica: Replica, cpu_percent: int) -> Change:
        """The Train worker actor's process tree, in a cpu group of its own (Ray starts the
        actor; this host's cpu hierarchy holds it like any process)."""
        return throttle_change(self.ledger.run_id, replica, cpu_percent, "")

    # --- actions: whole nodes (NodeActions) ------------------------------------------------

    def _member(self, node: str, what: str) -> None:
        rc = self.cluster
        if node == rc.ray.head:
            raise FaultError(
                f"{what}: {node} is the Ray head; use control-plane-outage for the head"
            )
        if node not in rc.ray.node_names:
            raise FaultError(f"{what}: {node} runs no Ray node now")

    def node_down(self, node: str) -> list[Change]:
        """Marked down first, then the node cluster's link cut and kill (raylet, workers,
        and on n1 the driver with the Train controller)."""
        self._member(node, "node-down")
        cut, kill = self.cluster.nodes.node_down(node)
        mark = cut.preceded_by(lambda: self.set_node_state(node, "down", "node-down fault"))
        return [mark, kill]

    def node_freeze(self, node: str) -> list[Change]:
        self._member(node, "node-freeze")
        freeze = self.cluster.nodes.freeze_node(node)
        marked = freeze.followed_by(lambda: self.set_node_state(node, "frozen", "node-freeze"))
        return [replace(marked, after_undo=lambda: self.set_node_state(node, "up", "thawed"))]

    def node_drain(self, node: str) -> list[Change]:
        """Ray's drain: SIGTERM to the node's ``ray start --block`` makes it ask the GCS to
        drain the node (reason PREEMPTION, deadline ``drain_deadline_s``); Ray Train sees
        the node draining, and restarts elsewhere when it leaves. Irreversible: the node
        stops at the deadline (the cluster is restored between drills)."""
        self._member(node, "node-drain")
        ray = self.cluster.ray
        daemon = ray.daemons.get((node, "worker"))
        if daemon is None or not ray.running(node):
            raise FaultError(f"node-drain: node {node} runs no Ray node to drain")
        pid, deadline = daemon.proc.pid, ray.tuning.graceful_drain_s
        stop = signal_change(
            pid,
            daemon.start_time,
            "SIGTERM",
            f"drain {node}: SIGTERM ray start pid {pid}",
            f"kill -TERM {pid}  # ray start --block of {node}: drains it ({deadline:g} s)",
            {"ray_start_pid": pid, "drain_deadline_s": deadline},
        )
        return [stop.preceded_by(lambda: self.set_node_state(node, "drained", "node-drain"))]

    # --- actions: links (LinkActions) --------------------------------------------------------

    def node_cluster(self) -> NodeCluster:
        return self.cluster.nodes

    def cut_from_control_plane(self, node: str) -> list[Change]:
        """The node's raylet loses the GCS; gloo still flows."""
        ray = self.cluster.ray
        if node == ray.head:
            raise FaultError(
                f"{node} hosts the GCS (head: n1): it cannot be cut off from itself; "
                "pick another node or set resources.ray.head: own"
            )
        return self.cluster.nodes.service_cut(
            node, self.cluster.nodes.address(ray.head), GCS_PORT, purpose="partition-gcs"
        )

    def start_network_track(self, hz: float) -> None:
        self.cluster.nodes.start_network_track(hz)

    # --- actions: the control plane (ControlPlaneActions) ------------------------------------

    def control_plane_label(self) -> str:
        ray = self.cluster.ray
        ft = "GCS fault tolerance: redis" if ray.gcs_ft else "no GCS fault tolerance (memory)"
        return f"Ray GCS {ray.address} on {ray.head} ({ft})"

    def _gcs(self) -> tuple[int, int]:
        ray = self.cluster.ray
        pid = ray.gcs_pid()
        start = procfs.start_time(pid) if pid is not None else None
        if pid is None or start is None:
            raise FaultError("the Ray GCS is not running")
        return pid, start

    def control_plane_pause(self) -> list[Change]:
        pid, start = self._gcs()
        head = self.cluster.ray.head
        change = sigstop_change(pid, start, f"SIGSTOP GCS pid {pid} on {head}", node=head)
        return [change.with_facts(gcs_mode=self.cluster.ray.gcs_mode)]

    def control_plane_cut(self) -> list[Change]:
        ray = self.cluster.ray
        changes = self.cluster.nodes.port_cut(ray.head, GCS_PORT, purpose="control-plane-cut")
        return [c.with_facts(port=GCS_PORT, gcs_mode=ray.gcs_mode) for c in changes]

    def control_plane_stop(self) -> list[Change]:
        """SIGKILL the GCS (``ray start --block`` then stops the whole head node); the undo
        starts the head again: with redis the cluster's state comes back, without it the
        cluster is lost (worker nodes and drivers of the old GCS die)."""
        if self.settings.head != "own":
            raise FaultError(_NO_HEAD_RESTART)
        pid, start = self._gcs()
        ray = self.cluster.ray

        def apply(note: Note) -> dict[str, Any]:
            if not procfs.kill_checked(pid, start, signal.SIGKILL):
                raise ProcessLookupError(f"GCS pid {pid} exited before it could be stopped")
            return {"pid": pid, "node": ray.head, "gcs_mode": ray.gcs_mode}

        return [
            Change(
                "ray-head-stopped",
                {"run_id": self.cluster.ledger.run_id, "pid": pid, "gcs_mode": ray.gcs_mode},
                f"SIGKILL GCS pid {pid} ({ray.gcs_mode}); the head is started again after",
                f"kill -KILL {pid}; later: ray start --head --port={GCS_PORT} ... on {ray.head}",
                apply,
            )
        ]
