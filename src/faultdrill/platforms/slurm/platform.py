"""The ``slurm`` platform: a drill job under sbatch/srun, with Slurm's decisions on the timeline.

Two variants, picked by ``variant_for`` from the plan's ``resources.slurm``:

* :class:`SlurmPlatform` (``slurm: {shared_dir: ...}``): the cluster that ``sbatch`` on PATH
  reaches. faultdrill submits, follows (``scontrol show job|node|step``; ``sacct`` once
  slurmctld has forgotten the job) and cancels the job, and acts only through Slurm's own
  commands and the shared file system: it drains a node (``scontrol update State=DRAIN``;
  the undo resumes it) and damages checkpoints. It cannot see the nodes' processes, so
  process, node, link, control-plane and storage faults are refused at plan validation,
  and the process-level evidence (old replicas stopped, duplicate ranks) is *retest*.
* :class:`~faultdrill.platforms.slurm.embedded_platform.EmbeddedSlurmPlatform`
  (``slurm: {embedded: true}``): an embedded cluster brought up on this machine for each
  item; every fault family.

Nodes: a plan names nodes ``n1..nN`` (spares after them). On the embedded cluster those are
Slurm's node names; on a real cluster ``nI`` is the I-th node of the job's first allocation.

The job's options that decide recovery (``--requeue``, ``--no-kill``, srun ``-K``, torchrun
``--max-restarts``) and, on the embedded cluster, slurm.conf's (``SlurmdTimeout``,
``cred_expire``, ``ReturnToService``...; on a real cluster read from ``scontrol show
config``) are recorded in a ``platform``/``dossier`` event, which the resource dossier
copies.

A job Slurm holds ("launch failed requeued held") is FAILED until an operator acts: the
plan's ``recovery: {action: resubmit}`` makes the engine call :meth:`~faultdrill.platforms.
api.Platform.resubmit`, which is then ``scontrol update NodeName=<n> State=RESUME`` of
the job's nodes that Slurm drained itself, and ``scontrol release <job>`` (the steps, with
the permission each needs, are in the runbook: :meth:`SlurmPlatform.resubmit_steps`).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultdrill.errors import EnvironmentPrepError, FaultError, NotOursError, PlatformError
from faultdrill.host import owned
from faultdrill.host.linux import netns_exists
from faultdrill.ledger import PATH, RunScope, undoer
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
from faultdrill.platforms.slurm import jobs
from faultdrill.platforms.slurm.parse import base_state, expand_hostlist, parse_records, reason_of
from faultdrill.probe import ENV_CLOCK_OFFSET

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.ledger import Ledger
    from faultdrill.plan import Resources, SlurmSettings

__all__ = ["EMBEDDED_ABILITIES", "REAL_ABILITIES", "HostSlurm", "SlurmPlatform", "drain_reason"]

#: What faultdrill can do to a real cluster: through Slurm's commands and shared files.
REAL_ABILITIES = frozenset({Ability.NODE_DRAIN, Ability.CHECKPOINT_FILES})
#: What it can do to the embedded cluster: everything (its nodes are this machine's).
EMBEDDED_ABILITIES = frozenset(Ability)
_CLIENT_TOOLS = ("sbatch", "scontrol", "scancel")
_NEEDS_NODES = (
    "needs access to the nodes' processes, links or the controller, which faultdrill has "
    "only on an embedded cluster: set resources.slurm.embedded: true (on a real cluster, "
    "inject it by hand on the node and drill what Slurm does with a plan that observes it)"
)
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_OPERATOR = "a Slurm operator (AdminLevel=Operator or Admin), root or SlurmUser"
#: How often each node's agent samples its processes on a real cluster.
NODE_SAMPLE_HZ = 5.0


def _scontrol(
    ns: str | None, conf: str | None, argv: list[str]
) -> subprocess.CompletedProcess[str]:
    """``scontrol ARGV`` in network namespace ``ns`` with config ``conf`` (both None: as this
    process would run it). Raises OSError when it cannot run or hangs."""
    cmd = ["scontrol", *argv]
    env = dict(os.environ)
    if ns is not None:
        cmd = ["nsenter", f"--net=/run/netns/{ns}", *cmd]
    if conf is not None:
        env["SLURM_CONF"] = conf
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=15, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        raise OSError(f"`{' '.join(cmd)}` did not answer within 15 s") from exc


def drain_reason(run_id: str) -> str:
    """The ``Reason`` a drill's drain sets: it names the run, so that only this run's
    cleanup resumes the node, and never a node an administrator drained."""
    return f"faultdrill {run_id}: node-drain"


def _this_runs_reason(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    """Claim: the recorded drain reason is this run's (:func:`drain_reason`)."""
    if value != drain_reason(run.run_id):
        raise NotOursError(
            f"drain reason {value!r} is not this run's ({drain_reason(run.run_id)!r}): a node "
            "drained for another reason is not resumed"
        )


def _node_name(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    """Claim: one Slurm node name (no hostlist, no option for ``scontrol``)."""
    if not isinstance(value, str) or not _NODE_NAME.fullmatch(value):
        raise NotOursError(f"{value!r} is not one Slurm node name")


@undoer(
    "slurm-drain",
    owns={"ns": owned.NETNS, "conf": PATH, "reason": _this_runs_reason, "node": _node_name},
)
def _undo_drain(data: dict[str, Any]) -> None:
    """``scontrol update State=RESUME`` of the node this run drained, only while the live
    node is still drained for this run's reason (the recorded reason must be this run's
    :func:`drain_reason`, and it is compared with what ``scontrol show node`` says now): a
    node resumed since, or drained since by someone else, is left alone. An entry without a
    reason is not resumed. An embedded cluster that is gone (its namespace) or no longer
    answers takes its nodes with it: nothing to resume."""
    ns, conf = data.get("ns"), data.get("conf")
    if not isinstance(data.get("reason"), str) or not data["reason"].startswith("faultdrill "):
        raise NotOursError(f"drain of {data.get('node')!r} records no faultdrill reason")
    node, reason = str(data["node"]), str(data["reason"])
    embedded = bool(data.get("embedded"))
    if embedded and (ns is None or not netns_exists(str(ns))):
        return
    ns_, conf_ = (None if ns is None else str(ns)), (None if conf is None else str(conf))
    try:
        shown = _scontrol(ns_, conf_, ["show", "node", node, "-o"])
    except OSError:
        if embedded:
            return
        raise
    if shown.returncode != 0:
        if embedded:
            return
        raise OSError(f"scontrol show node {node}: {(shown.stderr or shown.stdout).strip()}")
    recs = parse_records(shown.stdout)
    rec = recs[0] if recs else {}
    drained = "DRAIN" in rec.get("State", "").upper().split("+")[1:]
    if not drained or reason_of(rec.get("Reason"))[0] != reason:
        return
    done = _scontrol(ns_, conf_, ["update", f"NodeName={node}", "State=RESUME"])
    if done.returncode != 0 and "Invalid node state" not in done.stderr:
        raise OSError(f"scontrol update NodeName={node} State=RESUME: {done.stderr.strip()}")


class HostSlurm:
    """Runs Slurm's client commands as this machine would (``sbatch`` on PATH, the site's
    own configuration): the :class:`~faultdrill.platforms.slurm.jobs.SlurmClient` of a
    real cluster."""

    def client(
        self,
        argv: list[str],
        *,
        timeout: float = 15.0,
        check: bool = True,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_JOB")}
        full_env.update(env or {})
        return jobs.run_client_command(argv, argv, full_env, timeout=timeout, check=check)


def settings_of(resources: Resources) -> SlurmSettings:
    """The plan's ``resources.slurm`` (validated with the plan). Raises PlatformError when a
    caller built resources for this platform without it."""
    if resources.slurm is None:
        raise PlatformError(
            "platform slurm needs resources.slurm (embedded: true, or shared_dir for a real "
            "cluster)"
        )
    return resources.slurm


#: The variants ``variant_for`` picks, by name; each registers itself on import (its
#: module imports this one: naming it here would close an import circle).
VARIANTS: dict[str, type[Platform]] = {}


@register
class SlurmPlatform(Platform):
    """A torchrun job under sbatch/srun on the cluster ``sbatch`` reaches (see the module
    docstring); the embedded cluster's variant adds the node-level actions."""

    name = "slurm"

    def __init__(
        self, resources: Resources, work_dir: Path, ledger: Ledger, sink: EventSink
    ) -> None:
        super().__init__(resources, work_dir, ledger, sink)
        self.settings = settings_of(resources)
        n = resources.nodes
        self.node_names = [f"n{i}" for i in range(1, n + 1)]
        self.spare_names = [f"n{i}" for i in range(n + 1, n + 1 + resources.spares)]
        self.options = jobs.RecoveryOptions(
            requeue=self.settings.requeue,
            no_kill=self.settings.no_kill,
            kill_on_bad_exit=self.settings.kill_on_bad_exit,
            max_restarts=resources.max_restarts,
            sbatch_options=self.settings.sbatch_options,
        )
        self.client: jobs.SlurmClient = HostSlurm()
        self.poll_s = 0.5
        self.job_id: str | None = None
        self.watch: jobs.SlurmWatch | None = None
        self._cancelled = False
        self._releasing = False  # released, but the watch may still hold the held record
        self._cluster_options: dict[str, Any] = {}
        #: Node states the drill set (down, frozen, drained), over what Slurm says.
        self.marked: dict[str, str] = {}

    # --- abilities ----------------------------------------------------------------------

    @classmethod
    def abilities_for(cls, resources: Resources) -> frozenset[Ability]:
        s = resources.slurm
        return EMBEDDED_ABILITIES if s is not None and s.embedded else REAL_ABILITIES

    @classmethod
    def why_not(cls, ability: Ability, resources: Resources) -> str:
        return _NEEDS_NODES

    @classmethod
    def machine_lacks(cls, abilities: frozenset[Ability]) -> dict[Ability, str]:
        missing = [t for t in _CLIENT_TOOLS if shutil.which(t) is None]
        if not missing:
            return {}
        why = f"Slurm's client commands ({', '.join(missing)} not on PATH)"
        return dict.fromkeys(abilities, why)

    @classmethod
    def variant_for(cls, resources: Resources) -> type[Platform]:
        if resources.slurm is not None and resources.slurm.embedded:
            return VARIANTS["embedded"]
        return cls

    # --- the contract -------------------------------------------------------------------

    def _emit(self, kind: str, **fields: Any) -> None:
        self.sink.emit("platform", kind, **fields)

    def _prepare(self) -> None:
        missing = [t for t in _CLIENT_TOOLS if shutil.which(t) is None]
        if missing:
            raise EnvironmentPrepError(
                f"platform slurm: {', '.join(missing)} not on PATH (run faultdrill on a "
                "machine that submits to the cluster, e.g. its login node)"
            )
        shared = Path(str(self.settings.shared_dir)).resolve()
        if not self.work_dir.resolve().is_relative_to(shared):
            raise EnvironmentPrepError(
                f"the run directory {self.work_dir} is not below slurm.shared_dir {shared}: "
                "the job writes its events and checkpoints there, so every node must see it; "
                f"pass --out under {shared}"
            )
        self._cluster_options = self._read_config()
        self._emit("dossier", **self.dossier())

    def _read_config(self) -> dict[str, Any]:
        """The cluster's own settings that decide recovery (``scontrol show config``)."""
        done = self.client.client(["scontrol", "show", "config"], timeout=15, check=False)
        wanted = (
            *("SlurmdTimeout", "MessageTimeout", "KillWait", "AuthInfo", "ReturnToService"),
            *("SchedulerParameters", "JobRequeue", "SlurmctldTimeout", "ClusterName"),
        )
        out: dict[str, Any] = {}
        for line in done.stdout.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() in wanted:
                out[key.strip()] = value.strip()
        return out

    def dossier(self) -> dict[str, Any]:
        """Options that decide recovery (job side and cluster side), for the dossier."""
        return {
            "cluster": "embedded" if self.settings.embedded else "real",
            **self.options.dossier(),
            **self._cluster_options,
        }

    def _task_script(self, job: JobSpec) -> str:
        return jobs.render_task(
            job,
            self.options,
            timeouts=self.resources.timeouts,
            python=self.settings.python or sys.executable,
        )

    def _submit(self, job: JobSpec) -> None:
        if self.job_id and self.watch is not None and jobs.is_held(self.watch.job):
            self._release()
            return
        self._cancelled = False
        self.job_id = jobs.submit(
            self.client,
            job,
            self.options,
            task=self._task_script(job),
            out_dir=self.jobs_dir(),
            env=self._job_env(),
        )
        self._emit("slurm_job", job_id=self.job_id, source="sbatch")
        if self.watch is not None:
            self.watch.stop()
        self.watch = jobs.SlurmWatch(
            self.client,
            self._emit,
            job_id=self.job_id,
            interval_s=self.poll_s,
            all_nodes=self.settings.embedded,
        )
        self.watch.start()

    def _job_env(self) -> dict[str, str]:
        """The nodes are other hosts: events on this machine's clock, and each node's agent
        samples its own processes (the harness cannot see them)."""
        return {
            ENV_CLOCK_OFFSET: repr(time.time() - time.monotonic()),
            "FAULTDRILL_NODE_SAMPLE_HZ": str(NODE_SAMPLE_HZ),
        }

    def jobs_dir(self) -> Path:
        """Where the batch and task scripts and the job's output go."""
        return self.work_dir / "slurm-jobs"

    def _drained_by_slurm(self) -> list[str]:
        """The job's nodes that Slurm drained itself (not this drill's drain)."""
        if self.watch is None:
            return []
        out = []
        for node in self.watch.job_nodes():
            rec = self.watch.nodes.get(node, {})
            flags = rec.get("State", "").upper().split("+")[1:]
            reason = reason_of(rec.get("Reason"))[0]
            if ("DRAIN" in flags or base_state(rec.get("State", "")) == "DOWN") and not (
                reason.startswith("faultdrill")
            ):
                out.append(node)
        return out

    def resubmit_steps(self) -> list[dict[str, str]]:
        """Slurm's manual restart: a held job is released (after its nodes that Slurm
        drained are resumed); an ended one is submitted again."""
        if self.job_id and self.watch is not None and jobs.is_held(self.watch.job):
            steps = [
                {
                    "command": f"scontrol update NodeName={node} State=RESUME",
                    "permission": _OPERATOR,
                }
                for node in self._drained_by_slurm()
            ]
            steps.append(
                {
                    "command": f"scontrol release {self.job_id}",
                    "permission": f"the job's owner or {_OPERATOR}",
                }
            )
            return steps
        script = self.jobs_dir() / f"{self.job.run_id if self.job else 'job'}-batch.sh"
        return [{"command": f"sbatch {script}", "permission": "the job's owner"}]

    def _release(self) -> None:
        """The operator's manual restart of a held job (:meth:`resubmit_steps`)."""
        assert self.job_id is not None
        steps = self.resubmit_steps()
        for step in steps:
            # a node that came back by itself meanwhile refuses RESUME: nothing lost
            last = step is steps[-1]
            self.client.client(step["command"].split(), timeout=15, check=last)
        self._releasing = True
        self._emit(
            "job_released",
            job_id=self.job_id,
            commands=[s["command"] for s in steps],
            permission=_OPERATOR,
            source="scontrol",
        )

    def _poll(self) -> JobState:
        if self.watch is None or not self.watch.job:
            return JobState.RUNNING
        rec = self.watch.job
        if "Invalid" in rec:
            return self._forgotten()
        if self._releasing:
            if jobs.is_held(rec):  # the record from before the release
                return JobState.RESTARTING
            self._releasing = False
        state = jobs.job_state_of(rec, cancelled_by_us=self._cancelled)
        restarts = int(rec.get("Restarts", "0") or 0)
        # Between a requeue and the new incarnation's start the record says COMPLETING of
        # the old allocation: restarting, not running.
        if state == JobState.RUNNING and restarts not in self.watch.incarnations:
            return JobState.RESTARTING
        return state

    def _forgotten(self) -> JobState:
        """slurmctld no longer knows the job (it ended MinJobAge ago, or a controller restart
        lost it): its end state from accounting, where the cluster keeps it; else FAILED."""
        assert self.job_id is not None
        done = self.client.client(
            ["sacct", "-j", self.job_id, "-X", "-n", "-P", "-o", "State"], timeout=15, check=False
        )
        lines = [x.strip() for x in done.stdout.splitlines() if x.strip()]
        if done.returncode == 0 and lines:
            state = lines[-1].split()[0]
            self._emit("sacct_state", job_id=self.job_id, state=state, source="slurmdbd")
            return jobs.job_state_of({"JobState": state}, cancelled_by_us=self._cancelled)
        self._emit(
            "job_record_lost",
            job_id=self.job_id,
            error=(done.stderr or "no accounting").strip()[:300],
            source="slurmctld",
        )
        return JobState.FAILED

    # --- nodes --------------------------------------------------------------------------

    def slurm_node(self, node: str) -> str:
        """Slurm's name of plan node ``node``: on a real cluster the I-th node of the job's
        first allocation. Raises FaultError when it has none (yet)."""
        if self.settings.embedded:
            return node
        first = (self.watch.incarnations.get(0) or []) if self.watch else []
        index = int(node[1:]) - 1
        if index >= len(first):
            raise FaultError(f"node {node} is not known yet (the job's allocation: {first})")
        return first[index]

    def nodes(self) -> list[NodeInfo]:
        seen = self.watch.nodes if self.watch else {}
        out = []
        for name in [*self.node_names, *self.spare_names]:
            spare = name in self.spare_names
            try:
                slurm_name = self.slurm_node(name)
            except FaultError:
                slurm_name = name
            rec = seen.get(slurm_name)
            state = "spare" if spare else "up"
            if rec is not None:
                view = jobs.node_state_of(rec.get("State", ""))
                if view == "down":
                    state = "down"
                elif view in ("drained", "draining"):
                    state = "drained"
                elif view == "allocated":
                    state = "up"
            out.append(NodeInfo(name, self.address_of(name), self.marked.get(name, state), spare))
        return out

    def address_of(self, node: str) -> str:
        """The node's address, as far as the harness knows it."""
        try:
            return self.slurm_node(node)
        except FaultError:
            return "?"

    def set_node_state(self, node: str, state: str, reason: str) -> None:
        """Record a node state the drill caused (event ``node_state``, source faultdrill)."""
        old = self.marked.get(node)
        if old == state:
            return
        self.marked[node] = state
        self._emit(
            "node_state", node=node, state=state, previous=old, reason=reason, source="faultdrill"
        )

    def replicas(self) -> list[Replica]:
        """None visible from here: each node's agent samples its own processes into the
        shared events directory instead (``sampler-<node>.jsonl``)."""
        return []

    # --- stopping -----------------------------------------------------------------------

    def _signal_all(self, sig: int) -> None:
        if self.job_id is None:
            return
        self._cancelled = True
        argv = ["scancel", self.job_id]
        if sig == signal.SIGKILL:
            argv = ["scancel", "--full", "--signal=KILL", self.job_id]
        self.client.client(argv, timeout=10, check=False)

    def _any_alive(self) -> bool:
        """Whether Slurm still runs (or queues) the job, asked now."""
        if self.job_id is None or self.watch is None:
            return False
        try:
            self.watch.tick()
        except PlatformError:
            return False
        rec = self.watch.job
        if not rec or "Invalid" in rec:
            return False
        return not jobs.job_state_of(rec).ended and not jobs.is_held(rec)

    def _teardown(self) -> None:
        if self.watch is not None:
            self.watch.stop()

    # --- actions: drain (NodeActions) ---------------------------------------------------------

    def _drain_target(self) -> tuple[str | None, str | None]:
        """(namespace, config) the drain's ``scontrol`` runs with (None, None: as is)."""
        return None, None

    def node_drain(self, node: str) -> list[Change]:
        """``scontrol update NodeName=<n> State=DRAIN Reason=...``: Slurm places no new
        work on it, and its running job step carries on (DRAINING until it ends). The undo
        (``slurm-drain``) resumes it. Raises FaultError when the job does not run on it."""
        slurm_name = self.slurm_node(node)
        on = self.watch.job_nodes() if self.watch else []
        current = expand_hostlist(self.watch.job.get("NodeList", "")) if self.watch else []
        if slurm_name not in current:
            raise FaultError(
                f"node-drain: the job does not run on {node} ({slurm_name}) now "
                f"(its nodes: {', '.join(current) or 'none'}; ever: {', '.join(on) or 'none'})"
            )
        reason = drain_reason(self.ledger.run_id)
        argv = ["scontrol", "update", f"NodeName={slurm_name}", "State=DRAIN", f"Reason={reason}"]
        ns, conf = self._drain_target()

        def apply(note: Note) -> dict[str, Any]:
            self.client.client(argv, timeout=15)
            return {"node": node, "slurm_node": slurm_name, "reason": reason}

        change = Change(
            "slurm-drain",
            {
                "node": slurm_name,
                "reason": reason,
                "ns": ns,
                "conf": conf,
                "embedded": self.settings.embedded,
            },
            f"{slurm_name} drained (scontrol)",
            f'scontrol update NodeName={slurm_name} State=DRAIN Reason="{reason}"',
            apply,
            after_undo=lambda: self.set_node_state(node, "up", "resumed (scontrol)"),
        )
        return [change.preceded_by(lambda: self.set_node_state(node, "drained", "node-drain"))]

    def node_down(self, node: str) -> list[Change]:
        raise FaultError(f"node-down on a real Slurm cluster {_NEEDS_NODES}")

    def node_freeze(self, node: str) -> list[Change]:
        raise FaultError(f"node-freeze on a real Slurm cluster {_NEEDS_NODES}")

    # --- actions: checkpoint files (ReachesCheckpoints) -----------------------------------------

    def checkpoint_view(self, ckpt_dir: Path) -> Path:
        """The checkpoint directory itself: it lies on the shared file system."""
        return ckpt_dir
