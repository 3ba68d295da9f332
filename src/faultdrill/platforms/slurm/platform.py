"""DRAFT: the ``slurm`` platform on the embedded cluster, against today's ``platforms/api.py``.

Not registered (``PLATFORMS``) yet: the plan has no ``slurm:`` section and the engine does
not know the platform-actions seam. What is here:

* the five verbs: ``prepare`` brings the namespace cluster and the embedded Slurm cluster
  up; ``submit`` runs :func:`jobs.submit` (or ``scontrol release`` of a held job: the
  operator's manual restart); ``poll`` maps the watcher's job record; ``replicas`` lists the
  job's processes per node cgroup; ``stop`` is ``scancel`` (TERM, KillWait, KILL) and then
  the node cgroups' remaining job processes;
* the actions of the seam (``../briefs/seam.md``) as plain methods that return the
  :class:`Change` objects a fault would record and apply. ``Change`` mirrors the seam's
  dataclass; the lead's one replaces it. Undo kinds: ``slurm-drain`` (here), and the generic
  ``link-down``, ``freeze``, ``sigstop``, ``signal`` whose undoers live in ``faults/*`` today
  and move to the node cluster with the seam (same data shapes).

What an action does on Slurm (measured, see ``docs/slurm-notes.md``):

=================  =========================================================================
signal_rank        kill the worker process of a rank (pid + start time) on its node
node_down          pull the node's cable (switch port down) + SIGKILL its cgroup (slurmd,
                   slurmstepd, tasks); :meth:`node_restore` starts slurmd again
node_freeze        freeze the node's cgroup (slurmd included)
node_drain         ``scontrol update NodeName=n State=DRAIN Reason=...`` (undo: RESUME)
link_cut           the node's switch port down (undo: up)
control_plane_*    slurmctld: SIGSTOP (pause), switch port of the controller down (cut),
                   TERM + start again (stop: :meth:`control_plane_start`)
=================  =========================================================================
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultdrill.errors import FaultError, PlatformError
from faultdrill.ledger import PATH, undoer
from faultdrill.platforms.api import (
    JobSpec,
    JobState,
    NodeInfo,
    Platform,
    Replica,
)
from faultdrill.platforms.local import owned, procfs
from faultdrill.platforms.local.platform import describe_process
from faultdrill.platforms.slurm import jobs
from faultdrill.platforms.slurm.embedded import EmbeddedSlurm, SlurmSettings
from faultdrill.platforms.slurm.nodes import CONTROLLER, SlurmNodes

# TODO(adapter): declare faultdrill.platforms.api.Ability members instead.
ABILITY_NETWORK_LINKS = "network-links"  # draft: the pre-seam ability name
ABILITY_NODE_CONTROL = "node-control"  # draft: the pre-seam ability name
ABILITY_SIGNAL_WORKERS = "signal-workers"  # draft: the pre-seam ability name

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.ledger import Ledger
    from faultdrill.plan import Resources

__all__ = ["Change", "SlurmPlatform"]


@dataclass(frozen=True)
class Change:
    """One change an action makes (mirrors the seam's ``Change``): record ``kind``/``data``
    in the ledger, then call ``apply``."""

    kind: str
    data: dict[str, Any]
    label: str
    command: str
    apply: Callable[[], dict[str, Any] | None]
    reversible: bool = True


def _scontrol_in(ns: str, conf: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nsenter", f"--net=/run/netns/{ns}", "scontrol", *argv],
        capture_output=True,
        text=True,
        timeout=15,
        env={"SLURM_CONF": conf, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        check=False,
    )


@undoer("slurm-drain", owns={"ns": owned.NETNS, "conf": PATH})
def _undo_drain(data: dict[str, Any]) -> None:
    """``scontrol update State=RESUME`` of the drained node. When the controller no longer
    answers and the cluster is embedded (it is going away with the run), nothing is left
    to resume; on any other failure the entry stays pending."""
    ns, conf, node = str(data["ns"]), str(data["conf"]), str(data["node"])
    if not Path(f"/run/netns/{ns}").exists() and data.get("embedded"):
        return
    done = _scontrol_in(ns, conf, ["update", f"NodeName={node}", "State=RESUME"])
    if done.returncode == 0 or "Invalid node state" in done.stderr:
        return
    if data.get("embedded") and "Unable to contact" in done.stderr:
        return
    raise OSError(f"scontrol update NodeName={node} State=RESUME: {done.stderr.strip()}")


class SlurmPlatform(Platform):
    """A torchrun job under sbatch/srun on the embedded Slurm cluster (DRAFT, unregistered)."""

    name = "slurm"

    def __init__(
        self,
        resources: Resources,
        work_dir: Path,
        ledger: Ledger,
        sink: EventSink,
        *,
        settings: SlurmSettings | None = None,
        options: jobs.RecoveryOptions | None = None,
        poll_s: float = 0.5,
    ) -> None:
        super().__init__(resources, work_dir, ledger, sink)
        self.cluster = SlurmNodes(resources, work_dir, ledger, sink)
        self.slurm = EmbeddedSlurm(self.cluster, work_dir / "slurm", settings)
        self.options = options or jobs.RecoveryOptions(max_restarts=resources.max_restarts)
        self.poll_s = poll_s
        self.job_id: str | None = None
        self.watch: jobs.SlurmWatch | None = None
        self._cancelled = False

    @classmethod
    def abilities_for(cls, resources: Resources) -> frozenset[Any]:
        return frozenset(
            {ABILITY_SIGNAL_WORKERS, ABILITY_NETWORK_LINKS, ABILITY_NODE_CONTROL, "control-plane"}
        )

    def dossier(self) -> dict[str, Any]:
        """Options that decide recovery, and the cluster (for the resource dossier)."""
        return {
            **self.options.dossier(),
            **self.slurm.settings.recovery_options(),
            "cluster": self.slurm.describe(),
        }

    # --- the contract -------------------------------------------------------------------

    def _prepare(self) -> None:
        self.cluster.prepare()
        self.slurm.up()

    def _emit(self, kind: str, **fields: Any) -> None:
        self.sink.emit("platform", kind, **fields)

    def _submit(self, job: JobSpec) -> None:
        if self.job_id and self.watch and jobs.is_held(self.watch.job):
            self.slurm.client(["scontrol", "release", self.job_id])
            self._emit(
                "job_released", job_id=self.job_id, command=f"scontrol release {self.job_id}"
            )
            return
        self._cancelled = False
        self.job_id = jobs.submit(
            self.slurm,
            job,
            self.options,
            addresses={n: self.cluster.address(n) for n in self.cluster.workers()},
            ifnames={n: self.cluster.ifname(n) for n in self.cluster.workers()},
            timeouts=self.resources.timeouts,
            out_dir=self.slurm.paths.jobs,
        )
        self._emit("slurm_job", job_id=self.job_id, **self.dossier())
        if self.watch is not None:
            self.watch.stop()
        self.watch = jobs.SlurmWatch(
            self.slurm, self._emit, job_id=self.job_id, interval_s=self.poll_s
        )
        self.watch.start()

    def _poll(self) -> JobState:
        if self.watch is None or not self.watch.job or "Invalid" in self.watch.job:
            return JobState.RUNNING if self.watch is None or not self.watch.job else JobState.FAILED
        rec = self.watch.job
        state = jobs.job_state_of(rec, cancelled_by_us=self._cancelled)
        restarts = int(rec.get("Restarts", "0") or 0)
        # Between a requeue and the new incarnation's start the record says COMPLETING of
        # the old allocation: restarting, not running.
        if state == JobState.RUNNING and restarts not in self.watch.incarnations:
            return JobState.RESTARTING
        return state

    def nodes(self) -> list[NodeInfo]:
        seen = self.watch.nodes if self.watch else {}
        spares = set(self.cluster.cluster.spare_names)
        return [
            NodeInfo(
                n,
                self.cluster.address(n),
                jobs.node_state_of(seen[n].get("State", "")) if n in seen else "up",
                n in spares,
            )
            for n in self.cluster.workers()
        ]

    def _daemon_pids(self) -> set[int]:
        return {d.proc.pid for d in self.slurm.daemons.values()}

    def replicas(self) -> list[Replica]:
        """The job's processes on every node (slurmstepd as ``other``; daemons left out)."""
        daemons = self._daemon_pids()
        out = []
        for node in self.cluster.workers():
            for pid in self.cluster.pids(node):
                if pid in daemons:
                    continue
                rep = describe_process(pid, node)
                if rep is not None:
                    out.append(rep)
        return out

    def worker_pids(self, *, rank: int | None = None, node: str | None = None) -> list[Replica]:
        return [
            r
            for r in self.replicas()
            if r.role == "worker"
            and (rank is None or r.rank == rank)
            and (node is None or r.node == node)
        ]

    def _signal_all(self, sig: int) -> None:
        if self.job_id is not None:
            self._cancelled = True
            argv = ["scancel", self.job_id]
            if sig == signal.SIGKILL:
                argv = ["scancel", "--full", "--signal=KILL", self.job_id]
            self.slurm.client(argv, timeout=10, check=False)
        if sig == signal.SIGKILL:  # what Slurm could not reach (a node cut off) goes by node
            for rep in self.replicas():
                procfs.kill_checked(rep.pid, rep.start_time, sig)

    def _any_alive(self) -> bool:
        return bool(self.replicas())

    def _teardown(self) -> None:
        if self.watch is not None:
            self.watch.stop()
        errors = []
        for part in (self.slurm.down, self.cluster.teardown):
            try:
                part()
            except FaultError as exc:
                errors.append(str(exc))
        if errors:
            raise FaultError("; ".join(errors))

    def leftovers(self) -> list[str]:
        return self.cluster.leftovers()

    # --- actions (the seam's, as plain methods) ---------------------------------------------

    def signal_rank(self, rank: int, sig: int = signal.SIGKILL) -> list[Change]:
        """Signal the worker process holding ``rank`` (irreversible)."""
        reps = self.worker_pids(rank=rank)
        if not reps:
            raise PlatformError(f"no live worker holds rank {rank}")
        rep = reps[0]
        name = signal.Signals(sig).name
        return [
            Change(
                kind="signal",
                data={"pid": rep.pid, "start_time": rep.start_time, "signal": name},
                label=f"{name} to rank {rank} (pid {rep.pid} on {rep.node})",
                command=f"ssh {rep.node} kill -{name.removeprefix('SIG')} {rep.pid}",
                apply=lambda: {"sent": procfs.kill_checked(rep.pid, rep.start_time, sig)},
                reversible=False,
            )
        ]

    def link_cut(self, node: str) -> list[Change]:
        """Pull the node's cable: its switch-side port down (undo: up)."""
        sw, dev = self.cluster.switch_port(node)

        def apply() -> dict[str, Any]:
            subprocess.run(["ip", "-n", sw, "link", "set", dev, "down"], check=True, timeout=10)
            return {"ns": sw, "dev": dev}

        return [
            Change(
                kind="link-down",
                data={"ns": sw, "dev": dev},
                label=f"link of {node} cut (port {dev} down in {sw})",
                command=f"ip -n {sw} link set {dev} down",
                apply=apply,
            )
        ]

    def node_down(self, node: str) -> list[Change]:
        """Cable pulled, then slurmd, slurmstepd and the tasks SIGKILLed (whole cgroup)."""
        group = self.cluster.cgroup(node)
        if group is None:
            raise PlatformError(f"node {node} has no cgroup")

        def kill() -> dict[str, Any]:
            pids = group.pids()
            left = group.kill_all()
            return {"killed": pids, "left": left}

        return [
            *self.link_cut(node),
            Change(
                kind="signal",
                data={"cgroup": str(group.path), "signal": "SIGKILL"},
                label=f"every process of {node} killed (slurmd, slurmstepd, tasks)",
                command=f"ssh {node} 'systemctl kill -s KILL slurmd; pkill -KILL -u $JOBUSER'",
                apply=kill,
                reversible=False,
            ),
        ]

    def node_restore(self, node: str) -> None:
        """The node comes back: slurmd started again (ReturnToService=2 makes it usable)."""
        self.slurm.start_slurmd(node)

    def node_freeze(self, node: str) -> list[Change]:
        group = self.cluster.cgroup(node)
        if group is None:
            raise PlatformError(f"node {node} has no cgroup")

        def apply() -> None:
            group.freeze()

        return [
            Change(
                kind="freeze",
                data={"path": str(group.path)},
                label=f"{node} frozen (cgroup {group.path})",
                command=f"echo FROZEN > {group.path}/freezer.state",
                apply=apply,
            )
        ]

    def node_drain(self, node: str, reason: str = "faultdrill drill") -> list[Change]:
        argv = ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"]

        def apply() -> None:
            self.slurm.client(argv)

        return [
            Change(
                kind="slurm-drain",
                data={
                    "node": node,
                    "ns": self.cluster.ctl_ns,
                    "conf": str(self.slurm.paths.conf),
                    "embedded": True,
                },
                label=f"{node} drained",
                command=" ".join(argv[:-1]) + f' "Reason={reason}"',
                apply=apply,
            )
        ]

    def _ctld(self) -> tuple[int, int | None]:
        d = self.slurm.daemons.get("slurmctld")
        if d is None or d.proc.poll() is not None:
            raise PlatformError("slurmctld is not running")
        return d.proc.pid, d.start_time

    def control_plane_pause(self) -> list[Change]:
        pid, start = self._ctld()
        return [
            Change(
                kind="sigstop",
                data={"pid": pid, "start_time": start},
                label=f"slurmctld (pid {pid}) paused",
                command=f"kill -STOP {pid}",
                apply=lambda: {"sent": procfs.kill_checked(pid, start, signal.SIGSTOP)},
            )
        ]

    def control_plane_cut(self) -> list[Change]:
        return self.link_cut(CONTROLLER)

    def control_plane_stop(self) -> list[Change]:
        """slurmctld stopped with TERM (it saves its state; killing it shortly after a
        submit lost jobs once). :meth:`control_plane_start` brings it back."""
        pid, _ = self._ctld()
        return [
            Change(
                kind="signal",
                data={"pid": pid, "signal": "SIGTERM"},
                label=f"slurmctld (pid {pid}) stopped",
                command="systemctl stop slurmctld",
                apply=lambda: self.slurm.stop_daemon("slurmctld"),
                reversible=False,
            )
        ]

    def control_plane_start(self) -> None:
        self.slurm.start_slurmctld(clean=False)
