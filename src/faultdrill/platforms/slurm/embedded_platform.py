"""``platform: slurm`` with ``slurm: {embedded: true}``: an embedded Slurm cluster per item.

``prepare`` brings up the node cluster (network namespaces, cgroups; the controller's
namespace ``ctl``) and munged, slurmctld and one slurmd per node
(:mod:`faultdrill.platforms.slurm.embedded`); ``teardown`` takes them down. Every daemon,
namespace and cgroup is in the ledger before it exists, so ``faultdrill cleanup`` removes
them after a crash of the harness.

Faults go through Slurm's own controls where Slurm has one, else through the node:

====================  =======================================================================
kill-worker           the rank's worker process on its node (pid + start time), SIGKILL or
                      SIGTERM: what the task's death does next is torchrun's (restart) or,
                      with ``--max-restarts`` spent, srun ``-K``'s and Slurm's (job FAILED)
hang-worker           the rank's worker and its children SIGSTOPped on their node (slurmd,
                      slurmstepd and the agent live on), SIGCONT after ``for_s``
oom-worker            the rank's worker process moved into a memory cgroup of its own with a
                      limit it is asked to outgrow (:mod:`faultdrill.host.memcg`): the
                      kernel's OOM killer kills it, as ``task/cgroup`` would on a real node
node-down             the node's link down, then its cgroup SIGKILLed: slurmd, slurmstepd and
                      the tasks; slurmctld declares it DOWN after ``SlurmdTimeout`` and, with
                      ``--requeue``, requeues the job. Undo: link up, slurmd started again
                      (``ReturnToService=2`` makes the node usable)
node-freeze           the node's cgroup frozen (slurmd included), thawed by the undo
node-drain            ``scontrol update State=DRAIN Reason=...`` (undo: ``State=RESUME``)
link-*, partition     the node's link (iptables, tbf, link down): Slurm's own traffic too
control-plane-outage  slurmctld SIGSTOPped (pause), its namespace's link cut (cut), or
                      stopped with SIGTERM and started again by the undo (stop)
storage-outage        the checkpoint directory, as on the local platform (the job runs in
                      the harness's mount namespace: ``HostStorage``)
data-outage           the item's data directory, through the same FUSE mirror (``HostStorage``)
corrupt-checkpoint    the checkpoint files, from this machine
====================  =======================================================================
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultdrill import rundir
from faultdrill.errors import EnvironmentPrepError, FaultError, PlatformError
from faultdrill.host import procfs
from faultdrill.host.cluster import NodeCluster
from faultdrill.host.copies import copy_change, reap
from faultdrill.host.linux import (
    netns_unavailable,
    sigstop_change,
    stop_tree_changes,
)
from faultdrill.host.memcg import HostMemoryCaps, memcg_unavailable
from faultdrill.host.storage import HostStorage, fuse_missing
from faultdrill.host.throttle import cpu_controller_missing, throttle_change
from faultdrill.ledger import undoer
from faultdrill.lineage import Lineage
from faultdrill.platforms.api import Ability, Change, JobSpec, Note, Replica
from faultdrill.platforms.hosted import NodeLinks, ProcessReplicas
from faultdrill.platforms.local.platform import describe_process, make_scratch_root
from faultdrill.platforms.slurm import jobs
from faultdrill.platforms.slurm.embedded import (
    CONTROLLER,
    CONTROLLER_ADDRESS,
    ClusterSettings,
    EmbeddedSlurm,
    slurm_cluster,
    slurm_missing,
)
from faultdrill.platforms.slurm.platform import VARIANTS, SlurmPlatform

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.host.netsampler import NetSampler
    from faultdrill.ledger import Ledger
    from faultdrill.plan import Resources

__all__ = ["EmbeddedSlurmPlatform"]


@undoer("slurmctld-stop", owns={})  # acts on nothing
def _undo_ctld_stop(data: dict[str, Any]) -> None:
    """Nothing to do from the record alone: the harness starts the embedded controller
    again right after this undo (``after_undo``); a replay after a crash finds a cluster
    that goes away with its run (its daemons' own entries stop whatever still runs)."""


class EmbeddedSlurmPlatform(ProcessReplicas, NodeLinks, HostStorage, HostMemoryCaps, SlurmPlatform):
    """The ``slurm`` platform on an embedded cluster (see the module docstring)."""

    def __init__(
        self, resources: Resources, work_dir: Path, ledger: Ledger, sink: EventSink
    ) -> None:
        super().__init__(resources, work_dir, ledger, sink)
        self.cluster = slurm_cluster(ledger, sink, self.node_names, self.spare_names)
        self.slurm = EmbeddedSlurm(
            self.cluster, work_dir / "slurm", ClusterSettings.from_plan(self.settings)
        )
        self.client = self.slurm
        self._lineage = Lineage()
        self._scratch: Path | None = None
        self._copies: list[subprocess.Popen[bytes]] = []

    @classmethod
    def machine_lacks(cls, abilities: frozenset[Ability]) -> dict[Ability, str]:
        why = netns_unavailable() or slurm_missing()
        if why is not None:
            return dict.fromkeys(abilities, f"the embedded Slurm cluster: {why}")
        out: dict[Ability, str] = {}
        missing = fuse_missing()
        for needs_fuse in (Ability.STORAGE_UNREACHABLE, Ability.STORAGE_SLOW, Ability.DATA_OUTAGE):
            if needs_fuse in abilities and missing:
                out[needs_fuse] = "; ".join(missing)
        missing_cpu = cpu_controller_missing()
        if Ability.THROTTLE_RANK in abilities and missing_cpu:
            out[Ability.THROTTLE_RANK] = missing_cpu
        if Ability.OOM_RANK in abilities and memcg_unavailable():
            out[Ability.OOM_RANK] = str(memcg_unavailable())
        return out

    # --- the contract -------------------------------------------------------------------

    def _prepare(self) -> None:
        self.cluster.prepare()
        self.slurm.place_sockets(self.scratch() / "slurm")
        self.slurm.up()
        self._cluster_options = self.slurm.settings.recovery_options()
        self._emit("dossier", **self.dossier())

    def jobs_dir(self) -> Path:
        return self.slurm.paths.jobs

    def scratch(self) -> Path:
        """The nodes' TMPDIR root: a short directory of this run in /tmp, recorded in the
        ledger (AF_UNIX socket paths below it must stay under 108 bytes)."""
        if self._scratch is None:
            self._scratch = make_scratch_root(self.ledger, self.ledger.run_id)
        return self._scratch

    def _task_script(self, job: JobSpec) -> str:
        nodes = self.cluster.nodes()
        return jobs.render_task(
            job,
            self.options,
            timeouts=self.resources.timeouts,
            addresses={n: self.cluster.address(n) for n in nodes},
            ifnames={n: self.cluster.interface(n) for n in nodes},
            python=sys.executable,
            scratch=self.scratch(),
        )

    def _job_env(self) -> dict[str, str]:
        return {}  # one host, one clock; the harness samples every node's processes

    def address_of(self, node: str) -> str:
        return self.cluster.address(node)

    def replicas(self) -> list[Replica]:
        """The job's processes on every node (slurmstepd, srun and the batch shell as
        ``other``; the slurmd daemons left out)."""
        daemons = {d.proc.pid for d in self.slurm.daemons.values()}
        out = []
        for node in self.cluster.nodes():
            for pid in self.cluster.node_pids(node):
                if pid in daemons:
                    continue
                rep = describe_process(pid, node)
                if rep is not None:
                    out.append(rep)
        return self._lineage.classify(out)

    def _signal_all(self, sig: int) -> None:
        with contextlib.suppress(PlatformError):
            super()._signal_all(sig)
        if sig == signal.SIGKILL:  # what Slurm could not reach (a node cut off) goes by pid
            for rep in self.replicas():
                procfs.kill_checked(rep.pid, rep.start_time, sig)

    def _any_alive(self) -> bool:
        return bool(self.replicas())

    def _teardown(self) -> None:
        super()._teardown()
        reap(self._copies)
        errors = []
        for part in (self.slurm.down, self.cluster.teardown):
            try:
                part()
            except FaultError as exc:
                errors.append(str(exc))
        if errors:
            raise FaultError("; ".join(errors))

    def leftovers(self) -> list[str]:
        """Ports still open on the nodes, except those of Slurm's own daemons."""
        conf = self.slurm.settings
        ports: dict[str, set[int]] = {n: {conf.slurmd_port} for n in self.cluster.nodes()}
        ports[CONTROLLER] = {conf.ctld_port}
        return self.cluster.leftovers(ports)

    # --- actions: a rank's replica (SignalsRanks) ---------------------------------------------

    def rank_replica(self, *, rank: int | None = None, node: str | None = None) -> Replica:
        reps = self.replicas()
        found = self.live_workers(reps, rank=rank, node=node)
        # A worker an agent started, newest agent first: an old incarnation's stray
        # replica that still runs on a cut-off node is not the one the fault means.
        agents = {r.pid: r.start_time for r in reps if r.role == "agent"}
        return min(
            found,
            key=lambda r: (r.ppid not in agents, -agents.get(r.ppid or -1, 0), r.pid),
        )

    def kill_command(self, replica: Replica, sig: str) -> str:
        return f"ssh {replica.node} {super().kill_command(replica, sig)}"

    # --- actions: a straggler (ThrottlesRanks) ----------------------------------------------

    def throttle_replica(self, replica: Replica, cpu_percent: int) -> Change:
        """The rank's task process tree on its node, in a cpu group of its own (Slurm's
        ``TaskPlugin=task/none`` leaves the cpu hierarchy alone)."""
        return throttle_change(self.ledger.run_id, replica, cpu_percent, f"ssh {replica.node} ")

    def hang_replica(self, replica: Replica) -> list[Change]:
        """The task's worker and its children stopped on their node; slurmd, slurmstepd
        and torchrun's agent run on (Slurm sees a live task)."""
        return stop_tree_changes(replica, self.replicas(), via=f"ssh {replica.node} ")

    # --- actions: whole nodes (NodeActions) ---------------------------------------------------

    def _drain_target(self) -> tuple[str | None, str | None]:
        return self.slurm.ctl_ns, str(self.slurm.paths.conf)

    def node_down(self, node: str) -> list[Change]:
        """Marked down first, then the cluster's link down and cgroup kill (slurmd,
        slurmstepd and the tasks). Undoing the link brings the node back: slurmd starts
        again."""
        cut, kill = self.cluster.node_down(node)
        cut = cut.preceded_by(lambda: self.set_node_state(node, "down", "node-down fault"))
        return [replace(cut, after_undo=lambda: self.restore_node(node)), kill]

    def restore_node(self, node: str) -> None:
        """The node is back: its slurmd started again while the cluster still runs."""
        ctld = self.slurm.daemons.get("slurmctld")
        slurmd = self.slurm.daemons.get(f"slurmd-{node}")
        if ctld is None or ctld.proc.poll() is not None:
            return
        if slurmd is not None and slurmd.proc.poll() is None and procfs.alive(slurmd.proc.pid):
            return
        try:
            self.slurm.start_slurmd(node)
        except EnvironmentPrepError as exc:
            raise FaultError(f"node {node} is back but its slurmd did not start: {exc}") from exc
        self.set_node_state(node, "up", "restored: link up, slurmd started")

    def node_freeze(self, node: str) -> list[Change]:
        freeze = self.cluster.freeze_node(node)
        return [
            replace(
                freeze.followed_by(lambda: self.set_node_state(node, "frozen", "node-freeze")),
                after_undo=lambda: self.set_node_state(node, "up", "thawed"),
            )
        ]

    # --- actions: links (LinkActions) -------------------------------------------------------

    def node_cluster(self) -> NodeCluster:
        return self.cluster

    def cut_from_control_plane(self, node: str) -> list[Change]:
        """slurmd loses slurmctld; the job's traffic flows."""
        port = self.slurm.settings.ctld_port
        return self.cluster.service_cut(
            node, CONTROLLER_ADDRESS, port, purpose="partition-control-plane"
        )

    # --- actions: a copy of a replica (CopiesReplicas) ------------------------------------

    def replica_copy(self, replica: Replica) -> Change:
        """A copy of a task's worker on its node (its command line, environment and working
        directory), outside Slurm: what a step Slurm failed to stop leaves running."""
        return copy_change(self.cluster, replica, rundir.logs_dir(self.work_dir), self._copies)

    # --- actions: the controller (ControlPlaneActions) ----------------------------------------

    def control_plane_label(self) -> str:
        port = self.slurm.settings.ctld_port
        return f"slurmctld on {CONTROLLER} ({CONTROLLER_ADDRESS}:{port})"

    def _ctld(self) -> tuple[int, int | None]:
        daemon = self.slurm.daemons.get("slurmctld")
        if daemon is None or daemon.proc.poll() is not None:
            raise FaultError("slurmctld is not running")
        return daemon.proc.pid, daemon.start_time

    def control_plane_pause(self) -> list[Change]:
        pid, start = self._ctld()
        return [sigstop_change(pid, start, f"SIGSTOP slurmctld (pid {pid})", node=CONTROLLER)]

    def control_plane_cut(self) -> list[Change]:
        """Every packet of the controller's namespace dropped on its link, both ways (the
        harness's own clients run inside that namespace and still reach it)."""
        port = self.slurm.settings.ctld_port
        return [c.with_facts(port=port) for c in self.cluster.link_cut(CONTROLLER)]

    def control_plane_stop(self) -> list[Change]:
        """slurmctld stopped with SIGTERM (it saves its state; killing it shortly after a
        submit lost jobs once); the undo starts it again with its saved state."""
        pid, start = self._ctld()

        def apply(note: Note) -> dict[str, Any]:
            self.slurm.stop_daemon("slurmctld")
            return {"pid": pid, "node": CONTROLLER, "signal": "SIGTERM"}

        return [
            Change(
                "slurmctld-stop",
                {"pid": pid, "start_time": start, "node": CONTROLLER},
                f"slurmctld (pid {pid}) stopped",
                f"kill -TERM {pid}  # systemctl stop slurmctld",
                apply,
                after_undo=self._start_ctld,
            )
        ]

    def _start_ctld(self) -> None:
        try:
            self.slurm.start_slurmctld(clean=False)
        except EnvironmentPrepError as exc:
            raise FaultError(f"slurmctld did not start again: {exc}") from exc

    # --- the network track (NetworkTrack) -----------------------------------------------------

    @property
    def net_track(self) -> NetSampler | None:
        return self.cluster.track

    def start_network_track(self, hz: float) -> None:
        self.cluster.start_network_track(hz)


VARIANTS["embedded"] = EmbeddedSlurmPlatform
