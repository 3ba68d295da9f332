"""A drill job on Slurm: the batch script, its submission, and the scheduler's decisions as events.

The batch script runs ``srun`` of one torchrun agent per allocated node (the task script,
:func:`render_task`): the first allocated node hosts the c10d rendezvous, each incarnation
(``SLURM_RESTART_COUNT``) gets its own rendezvous id and port, so an old task still running
on a cut-off node never joins the requeued job's rendezvous. Every task exports the job id
and the incarnation as ``FAULTDRILL_SCHED_JOB_ID`` / ``FAULTDRILL_SCHED_INCARNATION``: the
probe puts them into ``run_start``, so the timeline tells a requeued job's replicas from an
old incarnation's that still run (:mod:`faultdrill.timeline`). The probe's events reach the
harness through the events directory of the run (shared by the nodes: same host on the
embedded cluster; on a real cluster, the run directory lies on the file system that the
plan's ``slurm.shared_dir`` names).

:class:`SlurmWatch` polls ``scontrol show job|node|step -o`` at a fixed rate and turns every
change into one flat ``platform`` event on the drill's clock, with Slurm's own timestamp
(``sched_ts``, 1 s resolution, slurmctld's clock) where Slurm has one:

=====================  ==================================================================
sched_job_state        state, previous, reason, restarts, nodes, batch_host, exit_code
job_requeued           restart_count, previous_nodes (Restarts went up)
allocation             incarnation, nodes, batch_host, sched_ts (StartTime)
job_held               reason (e.g. "launch failed requeued held"): needs
                       ``scontrol release`` (manual restart)
node_state             node, state (normalised), slurm_state, previous, reason,
                       reason_user, sched_ts (when the reason was set), source="slurmctld"
node_lost              node, slurm_state, reason, job_nodes: a node of the job's
                       allocation declared DOWN (layer="scheduler": the four questions'
                       "worker deemed lost" when Slurm replaced the job)
replica_lost           restart_count, reason, previous_nodes: the job requeued (its
                       replicas deemed lost; layer="scheduler")
step_started           step, nodes, incarnation, sched_ts
step_gone              step (no longer listed: ended, killed, or its node's record lost)
controller_unreachable error (a client command failed: controller down, paused or cut off)
controller_reachable   after controller_unreachable
=====================  ==================================================================

There is no accounting in the embedded cluster (``sacct`` needs slurmdbd); a job's record
lives in slurmctld for ``MinJobAge`` seconds after it ended.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from faultdrill.errors import PlatformError
from faultdrill.platforms.api import JobSpec, JobState
from faultdrill.platforms.local.platform import AGENT_MODULE
from faultdrill.platforms.slurm.parse import (
    base_state,
    expand_hostlist,
    parse_records,
    reason_of,
    slurm_time,
)

__all__ = [
    "RecoveryOptions",
    "SlurmClient",
    "SlurmWatch",
    "job_state_of",
    "node_state_of",
    "render_batch",
    "render_task",
    "submit",
]


class SlurmClient(Protocol):
    """Runs one Slurm command (sbatch, scontrol...) where it reaches the controller.
    Raises PlatformError when it cannot run or (``check``) exits non-zero; a timeout
    with ``check=False`` returns status 124."""

    def client(
        self,
        argv: list[str],
        *,
        timeout: float = 15.0,
        check: bool = True,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]: ...


def run_client_command(
    argv: list[str], full: list[str], env: dict[str, str], *, timeout: float, check: bool
) -> subprocess.CompletedProcess[str]:
    """Run ``full`` (``argv`` behind whatever reaches the controller: a namespace's launch
    prefix, or nothing) with exactly ``env``, as :class:`SlurmClient` promises; errors name
    ``argv``, the command as the operator knows it."""
    try:
        done = subprocess.run(
            full, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
    except subprocess.TimeoutExpired as exc:
        if check:
            raise PlatformError(
                f"`{' '.join(argv)}` did not answer within {timeout:.0f} s"
            ) from exc
        return subprocess.CompletedProcess(full, 124, "", f"timed out after {timeout} s")
    except OSError as exc:
        raise PlatformError(f"cannot run `{' '.join(argv)}`: {exc}") from exc
    if check and done.returncode != 0:
        out = (done.stderr or done.stdout).strip()
        raise PlatformError(f"`{' '.join(argv)}` failed ({done.returncode}): {out}")
    return done


@dataclass(frozen=True)
class RecoveryOptions:
    """Job-side options that decide how Slurm and torchrun recover (see the dossier), and
    what else the batch script carries (the plan's extra sbatch options)."""

    requeue: bool = True
    """sbatch --requeue: a job whose node fails is requeued (else it ends NODE_FAIL)."""
    no_kill: bool = False
    """sbatch --no-kill: keep the allocation when a node fails (the job runs on without it)."""
    kill_on_bad_exit: bool = True
    """srun -K1: one task exiting non-zero kills the step (else the other tasks run on)."""
    max_restarts: int = 3
    """torchrun --max-restarts: worker-group restarts inside one incarnation."""
    rdzv_port_base: int = 29500
    """The rendezvous port of incarnation ``r`` is ``base + r``."""
    sbatch_options: tuple[str, ...] = ()
    """Extra ``#SBATCH`` lines (partition, account, time limit...)."""

    def dossier(self) -> dict[str, Any]:
        return {
            "sbatch --requeue": self.requeue,
            "sbatch --no-kill": self.no_kill,
            "srun --kill-on-bad-exit": 1 if self.kill_on_bad_exit else 0,
            "torchrun --max-restarts": self.max_restarts,
            **({"sbatch options": " ".join(self.sbatch_options)} if self.sbatch_options else {}),
        }


def _rdzv_conf(timeouts: Any) -> str:
    t = timeouts
    return ",".join(
        [
            f"join_timeout={t.rdzv_join_s}",
            f"last_call_timeout={t.rdzv_last_call_s}",
            f"close_timeout={t.rdzv_close_s}",
            f"keep_alive_interval={t.keep_alive_interval_s}",
            f"keep_alive_max_attempt={t.keep_alive_max_attempt}",
            f"read_timeout={t.rdzv_read_s}",
        ]
    )


def render_task(
    job: JobSpec,
    opts: RecoveryOptions,
    *,
    timeouts: Any,
    addresses: dict[str, str] | None = None,
    ifnames: dict[str, str] | None = None,
    python: str = sys.executable,
    scratch: Path | None = None,
) -> str:
    """The script ``srun`` runs once per node: one torchrun agent, rendezvous on the first
    allocated node. On the embedded cluster, per-node facts come from ``SLURMD_NODENAME``
    (a map of addresses and interfaces written in) and ``TMPDIR`` is below ``scratch``; on a
    real cluster (no maps) each node's address is its ``NodeAddr`` as Slurm reaches it, gloo
    uses the interface that holds it (when it is an IP address of the node), and each node
    keeps its own ``TMPDIR``."""
    argv = " ".join(shlex.quote(a) for a in job.argv)
    maps = "addr_of() { scontrol show node \"$1\" -o | tr ' ' '\\n' | sed -n 's/^NodeAddr=//p'; }\n"
    node_env = (
        'my_addr=$(addr_of "$node")\n'
        'export FAULTDRILL_NODE_ADDR="$my_addr"\n'
        'ifname=$(ip -o -4 addr show 2>/dev/null | awk -v a="$my_addr" '
        "'{split($4, p, \"/\"); if (p[1] == a) print $2}' | head -n1)\n"
        'if [ -n "$ifname" ]; then export GLOO_SOCKET_IFNAME="$ifname"; fi\n'
    )
    endpoint = '"$(addr_of "$first")"'
    local_addr = ' --local-addr="$my_addr"'
    if addresses is not None and ifnames is not None:
        addr = " ".join(f"[{n}]={shlex.quote(a)}" for n, a in addresses.items())
        ifn = " ".join(f"[{n}]={shlex.quote(i)}" for n, i in ifnames.items())
        maps = f"declare -A ADDR=({addr})\ndeclare -A IFACE=({ifn})\n"
        node_env = (
            'export FAULTDRILL_NODE_ADDR="${ADDR[$node]}"\n'
            'export GLOO_SOCKET_IFNAME="${IFACE[$node]}"\n'
        )
        endpoint = '"${ADDR[$first]}"'
        local_addr = ' --local-addr="${ADDR[$node]}"'
    tmp = ""
    if scratch is not None:
        tmp = (
            f'export TMPDIR={shlex.quote(str(scratch))}/"$node-$SLURM_JOB_ID-$restart"\n'
            'mkdir -p "$TMPDIR"\n'
        )
    return f"""#!/bin/bash
# One torchrun agent on this node (written by faultdrill for job {job.run_id}).
set -eu
{maps}node="$SLURMD_NODENAME"
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
restart="${{SLURM_RESTART_COUNT:-0}}"
is_host=0
[ "$node" = "$first" ] && is_host=1
export FAULTDRILL_NODE="$node"
export FAULTDRILL_SCHED_JOB_ID="$SLURM_JOB_ID" FAULTDRILL_SCHED_INCARNATION="$restart"
{node_env}{tmp}exec {shlex.quote(python)} -m {AGENT_MODULE} \\
  --nnodes={job.min_nodes}:{job.max_nodes} --nproc-per-node={job.procs_per_node} \\
  --max-restarts={opts.max_restarts} --rdzv-backend=c10d \\
  --rdzv-endpoint={endpoint}:$(({opts.rdzv_port_base} + restart)) \\
  --rdzv-id="$SLURM_JOB_ID-$restart" \\
  --rdzv-conf="{_rdzv_conf(timeouts)},is_host=$is_host" \\
  --monitor-interval={timeouts.monitor_interval_s}{local_addr} \\
  {argv}
"""


def render_batch(job: JobSpec, opts: RecoveryOptions, *, task_script: Path, out_dir: Path) -> str:
    """The sbatch script: one node per torchrun agent, srun of the task script."""
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job.run_id[:40]}",
        f"#SBATCH --nodes={job.max_nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --cpus-per-task={job.procs_per_node}",
        f"#SBATCH --output={out_dir}/job-%j.out",
        f"#SBATCH --chdir={job.work_dir}",
        # a requeued job appends to its output instead of truncating it
        "#SBATCH --open-mode=append",
        "#SBATCH --requeue" if opts.requeue else "#SBATCH --no-requeue",
    ]
    if opts.no_kill:
        lines.append("#SBATCH --no-kill")
    lines += [f"#SBATCH {opt}" for opt in opts.sbatch_options]
    lines += [
        'echo "faultdrill: batch job=$SLURM_JOB_ID restart=${SLURM_RESTART_COUNT:-0}'
        ' nodes=$SLURM_JOB_NODELIST host=$(hostname) at=$(date +%s.%N)"',
        f"exec srun --kill-on-bad-exit={1 if opts.kill_on_bad_exit else 0} "
        f"--ntasks-per-node=1 /bin/bash {shlex.quote(str(task_script))}",
    ]
    return "\n".join(lines) + "\n"


def submit(
    client: SlurmClient,
    job: JobSpec,
    opts: RecoveryOptions,
    *,
    task: str,
    out_dir: Path,
    env: dict[str, str] | None = None,
) -> str:
    """Write the task script (``task``, from :func:`render_task`) and the batch script
    under ``out_dir`` and sbatch; returns the job id. The job's environment is the
    submitter's (sbatch exports it), so the client runs with :func:`job_env` and ``env``
    added.
    Raises PlatformError when sbatch refuses."""
    out_dir.mkdir(parents=True, exist_ok=True)
    task_path = out_dir / f"{job.run_id}-task.sh"
    batch = out_dir / f"{job.run_id}-batch.sh"
    task_path.write_text(task)
    batch.write_text(render_batch(job, opts, task_script=task_path, out_dir=out_dir))
    done = client.client(
        ["sbatch", "--parsable", str(batch)], timeout=20, env={**job_env(job), **(env or {})}
    )
    job_id = done.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise PlatformError(f"sbatch answered {done.stdout!r}, not a job id")
    return job_id


def job_env(job: JobSpec) -> dict[str, str]:
    """What sbatch exports to the job beyond the submitter's environment: the plan's env and
    the torchrun settings of ``../shared/notes/torchrun.md`` (each fixed a measured failure)."""
    env = dict(job.env)
    env.update(
        {
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
            "OMP_NUM_THREADS": "1",
            "LOGLEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
            "FAULTDRILL_EVENTS_DIR": str(job.events_dir),
            "FAULTDRILL_TASK_ID": job.task_id,
            "FAULTDRILL_RUN_ID": job.run_id,
        }
    )
    return env


# --- states --------------------------------------------------------------------------------

_RUNNING = {
    "RUNNING",
    "CONFIGURING",
    "COMPLETING",
    "SUSPENDED",
    "STOPPED",
    "SIGNALING",
    "STAGE_OUT",
    "RESIZING",
}
_FAILED = {
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
    "SPECIAL_EXIT",
}


def is_held(rec: dict[str, str]) -> bool:
    """A job Slurm will not start again by itself (held, e.g. "launch failed requeued held")."""
    reason = rec.get("Reason", "")
    return (
        rec.get("JobState") in ("REQUEUE_HOLD", "SPECIAL_EXIT")
        or "held" in reason.lower()
        or reason.startswith("JobHeld")
    )


def job_state_of(rec: dict[str, str], *, cancelled_by_us: bool = False) -> JobState:
    """faultdrill's job state from a ``scontrol show job`` record. A held job is FAILED:
    only an operator (``scontrol release``) starts it again."""
    state = base_state(rec.get("JobState", ""))
    restarts = int(rec.get("Restarts", "0") or 0)
    if is_held(rec):
        return JobState.FAILED
    if state in _RUNNING:
        return JobState.RUNNING
    if state in ("PENDING", "REQUEUED", "REQUEUE_FED"):
        return JobState.RESTARTING if restarts > 0 else JobState.PENDING
    if state == "COMPLETED":
        return JobState.SUCCEEDED
    if state == "CANCELLED":
        return JobState.STOPPED if cancelled_by_us else JobState.FAILED
    if state in _FAILED:
        return JobState.FAILED
    return JobState.RUNNING


def node_state_of(slurm_state: str) -> str:
    """A node's state in faultdrill's words: ``down``, ``drained``, ``draining``, ``idle``,
    ``allocated``, ``not-responding`` (silent but not yet DOWN), or the base state."""
    flags = set(slurm_state.upper().split("+")[1:])
    base = base_state(slurm_state)
    if base == "DOWN":
        return "down"
    if "DRAIN" in flags:
        return "drained" if base == "IDLE" else "draining"
    if "NOT_RESPONDING" in flags or slurm_state.endswith("*"):
        return "not-responding"
    if base in ("ALLOCATED", "MIXED", "COMPLETING"):
        return "allocated"
    return base.lower()


# --- the watcher ---------------------------------------------------------------------------

Emit = Callable[..., Any]
#: What a Slurm client says when slurmctld did not answer (down, paused or cut off).
_NO_ANSWER = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "timed out",
    "Connection refused",
    "Zero Bytes were transmitted",
    "Communication connection failure",
    "Unable to connect",
)


class SlurmWatch:
    """Polls one job, the nodes and the job's steps at a fixed rate in a thread; every
    change becomes one event (see the module docstring). ``start``/``stop`` are idempotent;
    ``tick`` runs one poll in the caller's thread (tests, or a caller's own loop).

    ``all_nodes``: poll every node of the cluster (the embedded one); otherwise only the
    nodes the job was allocated (a real cluster may have thousands)."""

    def __init__(
        self,
        client: SlurmClient,
        emit: Emit,
        *,
        job_id: str | None = None,
        interval_s: float = 0.5,
        all_nodes: bool = True,
    ) -> None:
        self.client = client
        self.emit = emit
        self.job_id = job_id
        self.interval_s = interval_s
        self.all_nodes = all_nodes
        self.job: dict[str, str] = {}
        self.nodes: dict[str, dict[str, str]] = {}
        self.steps: dict[str, dict[str, str]] = {}
        self.reachable = True
        self.incarnations: dict[int, list[str]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="slurm-watch", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            with contextlib.suppress(PlatformError):
                self.tick()
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - t0)))

    def _show(self, what: list[str]) -> list[dict[str, str]] | None:
        """Records of ``scontrol show WHAT -o``; ``[{"Invalid": error}]`` for a job that
        slurmctld does not know; None when the controller did not answer."""
        done = self.client.client(["scontrol", "show", *what, "-o"], timeout=8, check=False)
        text, err = done.stdout, done.stderr.strip()
        if done.returncode == 0:
            return parse_records(text)
        if done.returncode == 124 or any(sign in err for sign in _NO_ANSWER):
            self._unreachable((err or text).strip()[:300] or f"status {done.returncode}")
            return None
        if what[0] == "job" and "Invalid job id" in err:
            return [{"Invalid": err}]
        return []  # an answer that lists nothing: no steps ("Job step 1. not found")

    def _unreachable(self, error: str) -> None:
        if self.reachable:
            self.reachable = False
            self.emit("controller_unreachable", error=error, source="scontrol")

    def _reachable(self) -> None:
        if not self.reachable:
            self.reachable = True
            self.emit("controller_reachable", source="scontrol")

    def job_nodes(self) -> list[str]:
        """Every node the job was allocated so far (its incarnations' and its current)."""
        seen = [n for nodes in self.incarnations.values() for n in nodes]
        seen += expand_hostlist(self.job.get("NodeList", "")) if "Invalid" not in self.job else []
        return list(dict.fromkeys(seen))

    def tick(self) -> None:
        """One poll: nodes, then the job, then its steps."""
        with self._lock:
            which = [] if self.all_nodes else self.job_nodes()
            if self.all_nodes or which:
                nodes = self._show(["node", *([",".join(which)] if which else [])])
                if nodes is None:
                    return
                self._reachable()
                self._nodes(nodes)
            if self.job_id is None:
                return
            job = self._show(["job", self.job_id])
            if job is None:
                return
            self._reachable()
            if job:
                self._job(job[0])
            steps = self._show(["step", self.job_id])
            if steps is not None:
                self._steps([s for s in steps if s.get("StepId", "").split(".")[0] == self.job_id])

    def _nodes(self, records: list[dict[str, str]]) -> None:
        for rec in records:
            name = rec.get("NodeName")
            if not name:
                continue
            old = self.nodes.get(name)
            self.nodes[name] = rec
            raw = rec.get("State", "")
            if (
                old is not None
                and old.get("State") == raw
                and old.get("Reason") == rec.get("Reason")
            ):
                continue
            reason, user, when = reason_of(rec.get("Reason"))
            state = node_state_of(raw)
            previous = node_state_of(old.get("State", "")) if old else None
            self.emit(
                "node_state",
                node=name,
                state=state,
                slurm_state=raw,
                previous=previous,
                reason=reason or None,
                reason_user=user,
                sched_ts=when,
                source="slurmctld",
            )
            job_nodes = self.job_nodes()
            if state == "down" and previous != "down" and name in job_nodes:
                self.emit(
                    "node_lost",
                    node=name,
                    slurm_state=raw,
                    reason=reason or None,
                    job_nodes=job_nodes,
                    sched_ts=when,
                    source="slurmctld",
                    layer="scheduler",
                )

    def _job(self, rec: dict[str, str]) -> None:
        if "Invalid" in rec:
            if self.job and "Invalid" not in self.job:
                self.emit(
                    "sched_job_state",
                    state="UNKNOWN",
                    previous=self.job.get("JobState"),
                    reason=rec["Invalid"],
                    source="slurmctld",
                )
            self.job = rec
            return
        old, self.job = self.job, rec
        restarts = int(rec.get("Restarts", "0") or 0)
        nodes = expand_hostlist(rec.get("NodeList", ""))
        old_restarts = int(old.get("Restarts", "0") or 0) if old else 0
        if old and restarts > old_restarts:
            previous = expand_hostlist(old.get("NodeList", ""))
            self.emit(
                "job_requeued",
                job_id=rec.get("JobId"),
                restart_count=restarts,
                previous_nodes=previous,
                source="slurmctld",
            )
            self.emit(
                "replica_lost",
                node=",".join(previous) or None,
                restart_count=restarts,
                reason=rec.get("Reason"),
                previous_nodes=previous,
                source="slurmctld",
                layer="scheduler",
            )
        state = rec.get("JobState", "")
        changed = not old or (old.get("JobState"), old.get("Reason"), old.get("NodeList")) != (
            state,
            rec.get("Reason"),
            rec.get("NodeList"),
        )
        if changed:
            self._job_changed(old, rec, nodes)
        self._allocation(rec, nodes)

    def _job_changed(self, old: dict[str, str], rec: dict[str, str], nodes: list[str]) -> None:
        state, restarts = rec.get("JobState", ""), int(rec.get("Restarts", "0") or 0)
        self.emit(
            "sched_job_state",
            job_id=rec.get("JobId"),
            state=state,
            previous=old.get("JobState") if old else None,
            reason=rec.get("Reason"),
            restarts=restarts,
            nodes=nodes,
            batch_host=rec.get("BatchHost"),
            exit_code=rec.get("ExitCode"),
            sched_ts=slurm_time(
                rec.get("EndTime") if job_state_of(rec).ended else rec.get("StartTime")
            ),
            source="slurmctld",
        )
        if is_held(rec) and not (old and is_held(old)):
            self.emit(
                "job_held",
                job_id=rec.get("JobId"),
                reason=rec.get("Reason"),
                restarts=restarts,
                operator_command=f"scontrol release {rec.get('JobId')}",
                source="slurmctld",
            )

    def _allocation(self, rec: dict[str, str], nodes: list[str]) -> None:
        """An incarnation's allocation, also when the poll missed it running (a short job
        seen PENDING then COMPLETED); COMPLETING after a requeue lists the old nodes."""
        state, restarts = rec.get("JobState", ""), int(rec.get("Restarts", "0") or 0)
        placed = base_state(state) in ("RUNNING", "CONFIGURING") or (
            job_state_of(rec).ended
            and not is_held(rec)  # a held job's record still names its last allocation
            and slurm_time(rec.get("StartTime")) is not None
        )
        if placed and nodes and restarts not in self.incarnations:
            self.incarnations[restarts] = nodes
            self.emit(
                "allocation",
                job_id=rec.get("JobId"),
                incarnation=restarts,
                nodes=nodes,
                batch_host=rec.get("BatchHost"),
                sched_ts=slurm_time(rec.get("StartTime")),
                source="slurmctld",
            )

    def _steps(self, records: list[dict[str, str]]) -> None:
        seen = {}
        for rec in records:
            sid = rec.get("StepId", "")
            seen[sid] = rec
            if sid not in self.steps:
                inc = int(self.job.get("Restarts", "0") or 0) if self.job else None
                self.emit(
                    "step_started",
                    step=sid,
                    nodes=expand_hostlist(rec.get("NodeList", "")),
                    state=rec.get("State"),
                    incarnation=inc,
                    sched_ts=slurm_time(rec.get("StartTime")),
                    source="slurmctld",
                )
        for sid in self.steps:
            if sid not in seen:
                self.emit("step_gone", step=sid, source="slurmctld")
        self.steps = seen
