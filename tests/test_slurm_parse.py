"""Slurm's output read into events, on literal text recorded from the embedded cluster
(no Slurm needed): scontrol records, host lists, states, and the watcher's events for a
node loss with requeue and for a held job."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from faultdrill.plan.sections import Timeouts
from faultdrill.platforms.api import JobSpec, JobState
from faultdrill.platforms.slurm.jobs import (
    RecoveryOptions,
    SlurmWatch,
    job_state_of,
    node_state_of,
    render_batch,
    render_task,
)
from faultdrill.platforms.slurm.parse import (
    expand_hostlist,
    parse_records,
    reason_of,
    slurm_time,
)

NODE_DOWN = (
    "NodeName=n2 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=2 CPUTot=2 "
    "AvailableFeatures=(null) NodeAddr=10.77.0.2 NodeHostName=n2 Version=22.05.8 "
    "OS=Linux 6.1.0 #1 SMP RealMemory=1000 State=DOWN+NOT_RESPONDING "
    "Partitions=debug CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES= "
    "Reason=Not responding [slurm@2026-12-01T09:35:57]"
)
JOB = (
    "JobId=1 JobName=t UserId=root(0) JobState={state} Reason={reason} Dependency=(null) "
    "Requeue=1 Restarts={restarts} BatchFlag=1 ExitCode=0:0 SubmitTime=2026-12-01T09:35:00 "
    "StartTime={start} EndTime=Unknown NodeList={nodes} BatchHost=n1 NumNodes=2 "
    "TRES=cpu=2,node=2,billing=2 Command=/tmp/r/job.sh"
)


def job(state: str, restarts: int, nodes: str, reason: str = "None", start: str = "Unknown") -> str:
    return JOB.format(state=state, restarts=restarts, nodes=nodes, reason=reason, start=start)


def test_records_keep_values_with_spaces_and_equals_signs() -> None:
    (rec,) = parse_records(NODE_DOWN + "\n\n")
    assert rec["State"] == "DOWN+NOT_RESPONDING"
    assert rec["OS"] == "Linux 6.1.0 #1 SMP"
    assert rec["CfgTRES"] == "cpu=2,mem=1000M,billing=2"
    assert rec["AllocTRES"] == ""
    assert rec["Reason"] == "Not responding [slurm@2026-12-01T09:35:57]"
    assert reason_of(rec["Reason"]) == (
        "Not responding",
        "slurm",
        slurm_time("2026-12-01T09:35:57"),
    )
    assert reason_of("(null)") == ("", None, None)
    assert slurm_time("Unknown") is None


@pytest.mark.parametrize(
    ("spec", "hosts"),
    [
        ("n[1-3]", ["n1", "n2", "n3"]),
        ("n[1,3]", ["n1", "n3"]),
        ("n[1-2,5],ctl", ["n1", "n2", "n5", "ctl"]),
        ("node[08-10]", ["node08", "node09", "node10"]),
        ("n2", ["n2"]),
        ("(null)", []),
        ("", []),
    ],
)
def test_host_lists_expand(spec: str, hosts: list[str]) -> None:
    assert expand_hostlist(spec) == hosts


def test_a_malformed_host_list_is_refused() -> None:
    with pytest.raises(ValueError, match="malformed"):
        expand_hostlist("n[1-")


@pytest.mark.parametrize(
    ("state", "restarts", "reason", "expected"),
    [
        ("PENDING", 0, "None", JobState.PENDING),
        ("RUNNING", 0, "None", JobState.RUNNING),
        ("PENDING", 1, "BeginTime", JobState.RESTARTING),
        ("COMPLETED", 1, "None", JobState.SUCCEEDED),
        ("FAILED", 0, "NonZeroExitCode", JobState.FAILED),
        ("PENDING", 2, "launch_failed_requeued_held", JobState.FAILED),
        ("CANCELLED", 0, "None", JobState.FAILED),
    ],
)
def test_job_states(state: str, restarts: int, reason: str, expected: JobState) -> None:
    (rec,) = parse_records(job(state, restarts, "n[1-2]", reason))
    assert job_state_of(rec) == expected


def test_a_job_we_cancelled_is_stopped_not_failed() -> None:
    (rec,) = parse_records(job("CANCELLED", 0, "n[1-2]"))
    assert job_state_of(rec, cancelled_by_us=True) == JobState.STOPPED


@pytest.mark.parametrize(
    ("raw", "state"),
    [
        ("IDLE", "idle"),
        ("MIXED", "allocated"),
        ("MIXED+NOT_RESPONDING", "not-responding"),
        ("DOWN+NOT_RESPONDING", "down"),
        ("MIXED+DRAIN", "draining"),
        ("IDLE+DRAIN", "drained"),
        ("IDLE+COMPLETING+DRAIN", "drained"),
    ],
)
def test_node_states(raw: str, state: str) -> None:
    assert node_state_of(raw) == state


class Replay:
    """A Slurm client that answers ``scontrol show`` from a script of recorded outputs,
    one per poll, a poll starting with ``show node``; ``None`` is an unreachable controller."""

    def __init__(self, polls: list[dict[str, str | None]]) -> None:
        self.polls = polls
        self.i = 0
        self.asked: list[list[str]] = []

    def client(
        self,
        argv: list[str],
        *,
        timeout: float = 15.0,
        check: bool = True,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        what = argv[2]
        self.asked.append(argv[2:])
        if what == "node":  # the first command of a poll
            self.i += 1
        poll = self.polls[min(self.i - 1, len(self.polls) - 1)]
        text = poll.get(what, "")
        if text is None:
            return subprocess.CompletedProcess(argv, 1, "", "Unable to contact slurm controller")
        if what == "step" and not text:  # Slurm 22.05 asked for the steps of a job without any
            return subprocess.CompletedProcess(argv, 1, "", "Job step 1. not found\n")
        return subprocess.CompletedProcess(argv, 0, text, "")


def nodes_text(n2: str, reason: str = "(null)") -> str:
    return "\n".join(
        f"NodeName={n} State={st} Reason={reason if n == 'n2' else '(null)'}"
        for n, st in (("n1", "MIXED"), ("n2", n2), ("n3", "IDLE"))
    )


def watch_events(polls: list[dict[str, str | None]]) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    watch = SlurmWatch(Replay(polls), lambda kind, **f: events.append((kind, f)), job_id="1")
    for _ in polls:
        watch.tick()
    return events


def test_a_node_loss_with_requeue_gives_the_four_answers_in_order() -> None:
    """Node n2 lost: not responding, DOWN with Slurm's reason, the job requeued
    (Restarts 1), then a new allocation on n1+n3 with its own incarnation."""
    step0 = "StepId=1.0 State=RUNNING NodeList=n[1-2] StartTime=2026-12-01T09:35:00"
    step1 = "StepId=1.0 State=RUNNING NodeList=n[1,3] StartTime=2026-12-01T09:36:10"
    polls: list[dict[str, str | None]] = [
        {"node": nodes_text("MIXED"), "job": job("RUNNING", 0, "n[1-2]"), "step": step0},
        {
            "node": nodes_text("MIXED+NOT_RESPONDING"),
            "job": job("RUNNING", 0, "n[1-2]"),
            "step": step0,
        },
        {
            "node": nodes_text("DOWN+NOT_RESPONDING", "Not responding [slurm@2026-12-01T09:35:57]"),
            "job": job("COMPLETING", 1, "n1"),
            "step": "",
        },
        {
            "node": nodes_text("DOWN+NOT_RESPONDING", "Not responding [slurm@2026-12-01T09:35:57]"),
            "job": job("PENDING", 1, "(null)", "BeginTime"),
            "step": "",
        },
        {
            "node": nodes_text("DOWN+NOT_RESPONDING", "Not responding [slurm@2026-12-01T09:35:57]"),
            "job": job("RUNNING", 1, "n[1,3]", start="2026-12-01T09:36:10"),
            "step": step1,
        },
    ]
    events = watch_events(polls)
    kinds = [k for k, _ in events]
    n2 = [f for k, f in events if k == "node_state" and f["node"] == "n2"]
    assert [f["state"] for f in n2] == ["allocated", "not-responding", "down"]
    assert n2[-1]["reason"] == "Not responding"
    assert n2[-1]["sched_ts"] == slurm_time("2026-12-01T09:35:57")
    (req,) = [f for k, f in events if k == "job_requeued"]
    assert req["restart_count"] == 1 and req["previous_nodes"] == ["n1", "n2"]
    allocs = [f for k, f in events if k == "allocation"]
    # the COMPLETING record after the requeue (old nodes) is not an allocation
    assert [(a["incarnation"], a["nodes"]) for a in allocs] == [
        (0, ["n1", "n2"]),
        (1, ["n1", "n3"]),
    ]
    assert allocs[1]["sched_ts"] == slurm_time("2026-12-01T09:36:10")
    assert kinds.index("job_requeued") < kinds.index("step_gone") < len(kinds) - 1
    started = [f for k, f in events if k == "step_started"]
    assert [s["incarnation"] for s in started] == [0, 1]
    # the generic decisions the four questions read, each once, from the scheduler
    (lost,) = [f for k, f in events if k == "node_lost"]
    assert (lost["node"], lost["layer"], lost["source"]) == ("n2", "scheduler", "slurmctld")
    assert lost["reason"] == "Not responding" and lost["job_nodes"] == ["n1", "n2"]
    (gone,) = [f for k, f in events if k == "replica_lost"]
    assert (gone["restart_count"], gone["previous_nodes"]) == (1, ["n1", "n2"])
    assert kinds.index("node_lost") < kinds.index("replica_lost")
    assert "controller_unreachable" not in kinds  # "Job step 1. not found" is an answer


def test_on_a_real_cluster_only_the_jobs_nodes_are_polled() -> None:
    polls: list[dict[str, str | None]] = [
        {"node": nodes_text("MIXED"), "job": job("RUNNING", 0, "n[1-2]"), "step": ""},
    ]
    replay = Replay(polls)
    watch = SlurmWatch(replay, lambda kind, **f: None, job_id="1", all_nodes=False)
    for _ in range(3):
        watch.tick()
    # nothing allocated yet at the first poll: the job first, no node; then the job's nodes
    assert replay.asked[:2] == [["job", "1", "-o"], ["step", "1", "-o"]], replay.asked
    nodes_asked = [a for a in replay.asked if a[0] == "node"]
    assert nodes_asked == [["node", "n1,n2", "-o"]] * 2, replay.asked


def test_a_held_job_and_an_unreachable_controller_are_said() -> None:
    polls: list[dict[str, str | None]] = [
        {"node": nodes_text("MIXED"), "job": job("RUNNING", 0, "n[1-2]"), "step": ""},
        {"node": None, "job": None, "step": None},
        {"node": None, "job": None, "step": None},
        {
            "node": nodes_text("IDLE+DRAIN", "Duplicate jobid [root@2026-12-01T09:38:00]"),
            "job": job("PENDING", 2, "(null)", "launch_failed_requeued_held"),
            "step": "",
        },
    ]
    events = watch_events(polls)
    kinds = [k for k, _ in events]
    assert kinds.count("controller_unreachable") == 1
    assert kinds.index("controller_unreachable") < kinds.index("controller_reachable")
    (held,) = [f for k, f in events if k == "job_held"]
    assert held["operator_command"] == "scontrol release 1"
    drained = [f for k, f in events if k == "node_state" and f["state"] == "drained"]
    assert drained[0]["reason"] == "Duplicate jobid"


def test_the_scripts_carry_the_recovery_options(tmp_path: Path) -> None:
    spec = JobSpec(
        run_id="r1",
        task_id="t",
        argv=["-m", "faultdrill.workloads.lm", "--workload-config=/x/c.json"],
        env={},
        nodes=["n1", "n2"],
        procs_per_node=1,
        min_nodes=2,
        max_nodes=2,
        max_restarts=2,
        work_dir=tmp_path,
        events_dir=tmp_path / "events",
    )
    opts = RecoveryOptions(max_restarts=2, no_kill=True, kill_on_bad_exit=False)
    batch = render_batch(spec, opts, task_script=tmp_path / "task.sh", out_dir=tmp_path)
    assert "#SBATCH --requeue" in batch and "#SBATCH --no-kill" in batch
    assert "srun --kill-on-bad-exit=0" in batch
    task = render_task(
        spec,
        opts,
        addresses={"n1": "10.77.0.1", "n2": "10.77.0.2"},
        ifnames={"n1": "fdn1", "n2": "fdn2"},
        timeouts=Timeouts(),
    )
    assert "--max-restarts=2" in task and "--nnodes=2:2" in task
    assert '--rdzv-id="$SLURM_JOB_ID-$restart"' in task
    assert "-m faultdrill.workloads.lm --workload-config=/x/c.json" in task
    assert opts.dossier() == {
        "sbatch --requeue": True,
        "sbatch --no-kill": True,
        "srun --kill-on-bad-exit": 0,
        "torchrun --max-restarts": 2,
    }
    done = subprocess.run(["bash", "-n"], input=task, text=True, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
