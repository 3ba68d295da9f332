"""The Slurm platform without a cluster: the plan's ``resources.slurm`` section, the
abilities of a real and an embedded cluster, the scripts, and the timeline of Slurm's
decisions (literal): the four questions answered from them and a split brain keyed by
Slurm's incarnations."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from faultdrill.admit import parse_plan
from faultdrill.checks import Verdict
from faultdrill.errors import PlanError
from faultdrill.plan import Resources
from faultdrill.plan.sections import Timeouts
from faultdrill.platforms import PLATFORMS, Ability
from faultdrill.platforms.api import JobSpec
from faultdrill.platforms.slurm.embedded import SlurmPaths
from faultdrill.platforms.slurm.embedded_platform import EmbeddedSlurmPlatform
from faultdrill.platforms.slurm.jobs import RecoveryOptions, render_task
from faultdrill.platforms.slurm.platform import REAL_ABILITIES, SlurmPlatform
from faultdrill.probe import Probe
from faultdrill.readings.analysis import answer_questions
from tests.slurmkit import example_raw
from tests.timelines import TL, Judge

F, P = Verdict.FAIL, Verdict.PASS

# --- the plan ---------------------------------------------------------------------------------


def plan_with(slurm: dict[str, Any] | None, **resources: Any) -> dict[str, Any]:
    raw = example_raw()
    res = {"platform": "slurm", "isolation": "netns", "nodes": 2, "spares": 1, **resources}
    if slurm is not None:
        res["slurm"] = slurm
    raw["resources"] = res
    return raw


def problems(raw: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(PlanError) as err:
        parse_plan(raw, source="p.yaml")
    return err.value.problems


def test_the_example_plan_is_valid_and_embedded() -> None:
    plan = parse_plan(example_raw(), source="slurm.yaml")
    assert plan.resources.slurm is not None and plan.resources.slurm.embedded
    assert PLATFORMS["slurm"].variant_for(plan.resources) is EmbeddedSlurmPlatform
    # the harness controls, every one (the drill test proves each is caught)
    assert [(c.id, c.expected_check) for c in plan.controls] == [
        ("ctl-rollback-latest", "progress.resume-point"),
        ("ctl-hide-checkpoints", "progress.no-restart-from-zero"),
        ("ctl-stale-copy", "resources.no-stale-replica"),
    ]


@pytest.mark.parametrize(
    ("slurm", "resources", "where", "says"),
    [
        (None, {}, "resources", "platform slurm needs a slurm section: slurm: {embedded: true}"),
        ({"embedded": True}, {"isolation": "none"}, "resources", "set isolation: netns"),
        ({}, {}, "resources.slurm", "a real Slurm cluster needs shared_dir"),
        ({"shared_dir": "rel/dir"}, {}, "resources.slurm", "must be an absolute path"),
        (
            {"embedded": True, "shared_dir": "/nfs"},
            {},
            "resources.slurm",
            "shared_dir is for a real cluster",
        ),
        (
            {"shared_dir": "/nfs", "slurmd_timeout_s": 3},
            {"spares": 0},
            "resources.slurm",
            "slurmd_timeout_s configure the embedded cluster only",
        ),
        (
            {"embedded": True, "sbatch_options": ["--partition=a", "--requeue"]},
            {},
            "resources.slurm.sbatch_options",
            "[1] --requeue is set by faultdrill",
        ),
        (
            {"embedded": True, "cred_expire_s": 1},
            {},
            "resources.slurm.cred_expire_s",
            "greater than or equal to 5",
        ),
        (
            {"shared_dir": "/nfs"},
            {"spares": 1},
            "resources",
            "spares are the cluster's own idle nodes",
        ),
    ],
)
def test_a_bad_slurm_section_is_named_with_its_fix(
    slurm: dict[str, Any] | None, resources: dict[str, Any], where: str, says: str
) -> None:
    found = problems(plan_with(slurm, **resources))
    assert any(loc == where and says in msg for loc, msg in found), found


def test_a_slurm_section_on_another_platform_is_refused() -> None:
    raw = plan_with({"embedded": True}, platform="local")
    raw["rounds"] = raw["rounds"][:1]
    found = problems(raw)
    assert any("slurm applies only with platform: slurm" in msg for _, msg in found), found


def test_a_real_cluster_refuses_node_level_faults_at_validation() -> None:
    raw = plan_with({"shared_dir": "/nfs/drills"}, spares=0, isolation="none")
    problem, node_down, *controls = problems(raw)  # every refused fault is said, at its field
    assert [where for where, _ in controls] == [f"controls[{i}].fault.kind" for i in range(3)]
    assert all("needs abilit" in why and "signal-rank" in why for _, why in controls)
    assert node_down[0] == "rounds[1].scenarios[0].fault.kind"
    assert "fault 'node-down' needs ability node-down" in node_down[1]
    assert problem[1].startswith(
        "scenario kill-worker: fault 'kill-worker' needs ability signal-rank, which platform "
        "'slurm' with isolation 'none' cannot do; needs access to the nodes' processes"
    )
    assert "set resources.slurm.embedded: true" in problem[1]
    raw["rounds"] = [raw["rounds"][1]]
    raw["rounds"][0]["scenarios"] = raw["rounds"][0]["scenarios"][1:]  # node-drain only
    raw["controls"] = []
    assert parse_plan(raw).scenarios()[0].fault.kind == "node-drain"


def test_abilities_per_cluster() -> None:
    real = Resources(platform="slurm", nodes=2, slurm={"shared_dir": "/nfs"})
    embedded = Resources(
        platform="slurm",
        isolation="netns",
        nodes=2,
        slurm={"embedded": True},
    )
    assert (
        SlurmPlatform.abilities_for(real)
        == REAL_ABILITIES
        == {
            Ability.NODE_DRAIN,
            Ability.CHECKPOINT_FILES,
        }
    )
    assert SlurmPlatform.abilities_for(embedded) == frozenset(Ability)
    assert SlurmPlatform.variant_for(real) is SlurmPlatform


# --- the scripts ------------------------------------------------------------------------------


def spec(tmp_path: Path) -> JobSpec:
    return JobSpec(
        run_id="r1",
        task_id="t",
        argv=["-m", "faultdrill.workloads.lm", "--workload-config=/x/c.json"],
        env={},
        nodes=["n1", "n2"],
        procs_per_node=1,
        min_nodes=1,
        max_nodes=2,
        max_restarts=2,
        work_dir=tmp_path,
        events_dir=tmp_path / "events",
    )


def bash_ok(script: str) -> None:
    done = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_task_script_exports_slurms_incarnation_for_the_probe(tmp_path: Path) -> None:
    opts = RecoveryOptions(max_restarts=2, sbatch_options=("--partition=gpu",))
    real = render_task(spec(tmp_path), opts, timeouts=Timeouts(), python="/opt/venv/bin/python")
    assert 'FAULTDRILL_SCHED_JOB_ID="$SLURM_JOB_ID" FAULTDRILL_SCHED_INCARNATION="$restart"' in real
    assert '--rdzv-endpoint="$(addr_of "$first")":$((29500 + restart))' in real
    assert '--local-addr="$my_addr"' in real and "TMPDIR" not in real
    assert 'export GLOO_SOCKET_IFNAME="$ifname"' in real
    assert "exec /opt/venv/bin/python -m faultdrill.platforms.local.agent" in real
    assert "--nnodes=1:2" in real
    bash_ok(real)
    embedded = render_task(
        spec(tmp_path),
        opts,
        timeouts=Timeouts(),
        addresses={"n1": "10.77.0.1", "n2": "10.77.0.2"},
        ifnames={"n1": "fdxn1", "n2": "fdxn2"},
        scratch=Path("/tmp/fd-0123456789ab"),
    )
    assert '--rdzv-endpoint="${ADDR[$first]}"' in embedded
    assert 'export TMPDIR=/tmp/fd-0123456789ab/"$node-$SLURM_JOB_ID-$restart"' in embedded
    bash_ok(embedded)
    assert opts.dossier()["sbatch options"] == "--partition=gpu"


def test_a_socket_path_too_long_for_the_kernel_is_refused_before_anything_starts() -> None:
    """slurmstepd makes its socket in its slurmd's spool, ``<node>_<job>.<step>``: below a
    deep run directory (pytest's per-worker ones) it passed 108 bytes and the batch step
    died at its start with no output. The embedded cluster puts its sockets in the run's
    short scratch directory, and names the path and the fix when even that is too long."""
    deep = Path("/tmp") / ("d" * 40) / ("e" * 30) / "run/scenarios/slurmctld-restart/slurm"
    problem = SlurmPaths(deep).socket_problem(["n1", "n2", "n3"])
    assert problem is not None
    assert f"{deep / 'munge/munge.socket'} would be 133 bytes" in problem
    assert "over the 107 the kernel allows" in problem and "shorter --out" in problem
    short = SlurmPaths(deep, sockets=Path("/tmp/fd-0123456789ab/slurm"))
    assert short.socket_problem(["n1", "n2", "n3"]) is None
    assert short.munge_socket == Path("/tmp/fd-0123456789ab/slurm/munge.socket")
    assert short.spool == Path("/tmp/fd-0123456789ab/slurm/spool")
    assert short.state == deep / "state" and short.munge_key == deep / "munge/munge.key"
    # a run directory just short enough is still taken as it is
    fits = Path("/r") / ("x" * (107 - len("/r//spool/n1/n1_99999999.9999999999")))
    assert SlurmPaths(fits).socket_problem(["n1"]) is None
    longer = Path(f"{fits}x")
    step_socket = longer / "spool/n1/n1_99999999.9999999999"
    assert f"{step_socket} would be 108 bytes" in str(SlurmPaths(longer).socket_problem(["n1"]))


def test_the_probe_announces_slurms_incarnation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAULTDRILL_SCHED_JOB_ID", "42")
    monkeypatch.setenv("FAULTDRILL_SCHED_INCARNATION", "1")
    probe = Probe(tmp_path, rank=0, task_id="t")
    probe.run_start(world_size=2)
    probe.close()
    (line,) = (tmp_path / "probe-rank0.jsonl").read_text().splitlines()
    ev = json.loads(line)
    assert (ev["sched_job_id"], ev["sched_incarnation"]) == ("42", 1)
    monkeypatch.delenv("FAULTDRILL_SCHED_JOB_ID")
    monkeypatch.delenv("FAULTDRILL_SCHED_INCARNATION")
    probe = Probe(tmp_path / "plain", rank=0, task_id="t")
    probe.run_start(world_size=2)
    probe.close()
    plain = json.loads((tmp_path / "plain" / "probe-rank0.jsonl").read_text())
    assert "sched_incarnation" not in plain and "sched_job_id" not in plain


# --- Slurm's decisions on a literal timeline --------------------------------------------------

OLD, STALE, NEW = (100, 101), 150, (200, 201)
M0, MS, MN = "10.77.0.1:40000", "10.77.0.1:40001", "10.77.0.2:40002"


def start(
    tl: TL, rank: int, pid: int, master: str, t: float, node: str, sched: int | None, world: int = 2
) -> None:
    tl.run_start(rank, pid, master, t, node=node, world_size=world)
    if sched is not None:
        tl.edit(
            "probe",
            "run_start",
            lambda r: r["pid"] == pid,
            sched_job_id="7",
            sched_incarnation=sched,
        )


def split_brain(*, sched: bool = True) -> TL:
    """n1 (the rendezvous host) cut off at t=5.5: torchrun's agent on n2 notices at 8,
    slurmctld declares n1 DOWN at 20 and requeues; the requeued job (Slurm incarnation 1)
    starts on n2+n3 at 27 and at 32 loads ckpt-8, which the cut-off old task on n1 wrote at
    31.6 after re-forming a world of 1 alone at 28 (still Slurm incarnation 0) and which it
    steps on beside the requeued job until 35.5."""
    s0, s1 = (0, 1) if sched else (None, None)
    tl = TL()
    for r, pid in enumerate(OLD):
        start(tl, r, pid, M0, 1.0, f"n{r + 1}", s0)
        tl.scratch(r, pid, 1.1).steps(pid, r, range(1, 6), 2.0)
        tl.proc(pid, r, 0.9, 21.0 if r else 24.0, node=f"n{r + 1}")
    tl.save(0, OLD[0], "ckpt-4", 4, 5.1)
    tl.inject(5.5, fault="partition", target="node n1")
    tl.platform("dead_node", 8.0, node="n2")
    tl.platform("node_lost", 20.0, node="n1", source="slurmctld", layer="scheduler")
    tl.platform("replica_lost", 20.5, node="n1,n2", source="slurmctld", layer="scheduler")
    for r, pid in enumerate(NEW):
        start(tl, r, pid, MN, 27.0, f"n{r + 2}", s1)
        tl.proc(pid, r, 26.5, 40.0, node=f"n{r + 2}")
    start(tl, 0, STALE, MS, 28.0, "n1", s0, world=1)
    tl.load(0, STALE, "ckpt-4", 4, 28.1).steps(STALE, 0, range(5, 13), 28.5)
    tl.save(0, STALE, "ckpt-8", 8, 31.6)
    tl.proc(STALE, 0, 27.9, 45.0, node="n1")
    for r, pid in enumerate(NEW):
        tl.load(r, pid, "ckpt-8", 8, 32.0).steps(pid, r, range(9, 13), 33.0)
        tl.end(r, pid, 12, 37.0)
    return tl


def test_slurms_incarnations_tell_the_stale_task_from_the_requeued_job() -> None:
    tl = split_brain().build()
    old, new, stale = tl.incarnations
    assert (old.sched, new.sched, stale.sched) == (0, 1, 0)
    assert stale.members == {STALE: 0} and set(new.members) == set(NEW)
    assert tl.stale_incarnations() == {stale.index}
    assert tl.incarnation_after(5.5) is new
    assert tl.final_incarnation() is new
    assert new.supersedes(stale) and not stale.supersedes(new)


def test_the_four_questions_come_from_slurms_decision_when_slurm_replaced_the_job() -> None:
    a = answer_questions(split_brain().build())
    assert a.worker_lost_by == "node_lost on n1 (slurmctld)"
    assert (a.worker_lost_at, a.detect_s) == (20.0, 14.5)
    assert (a.old_incarnation, a.new_incarnation) == (0, 1)
    assert a.resumed_from is not None and a.resumed_from.checkpoint == "ckpt-8"


def test_within_one_slurm_incarnation_the_launchers_decision_answers() -> None:
    tl = TL()
    for r, pid in enumerate(OLD):
        start(tl, r, pid, M0, 1.0, f"n{r + 1}", 0)
        tl.scratch(r, pid, 1.1).steps(pid, r, range(1, 6), 2.0)
    tl.save(0, OLD[0], "ckpt-4", 4, 5.1).inject(5.5)
    tl.platform("worker_failed", 5.6, node="n2")
    for r, pid in enumerate(NEW):
        start(tl, r, pid, MS, 8.0, f"n{r + 1}", 0)
        tl.load(r, pid, "ckpt-4", 4, 8.1).steps(pid, r, range(5, 7), 9.0).end(r, pid, 6, 11.0)
    assert answer_questions(tl.build()).worker_lost_by == "worker_failed on n2"


def test_the_stale_replica_check_names_the_cut_off_writer(judge: Judge) -> None:
    found = judge.run("resources.no-stale-replica", split_brain())
    assert [f.verdict for f in found] == [F, F, F]
    alive, steps, loaded = (f.message for f in found)
    assert alive.startswith("1 process(es) of an older incarnation still alive after incarnation 1")
    assert f"pid {STALE} (rank 0, node n1" in alive
    assert steps.startswith("3 step(s) emitted by an older incarnation after incarnation 1")
    assert steps.endswith(f"(split brain); first: pid {STALE} rank 0 step 10")
    assert loaded == (
        "incarnation 1 resumed from checkpoint 'ckpt-8' (step 8), written by incarnation 2 "
        "after incarnation 1 had replaced it (a stale replica's checkpoint)"
    )


def test_without_slurms_incarnations_the_requeued_job_would_be_blamed(judge: Judge) -> None:
    """Start order alone makes the cut-off task's late re-formation the newest generation:
    the requeued job's replicas are then the 'stale' ones. Why the marker matters."""
    tl = split_brain(sched=False).build()
    assert tl.stale_incarnations() == set()
    found = judge.run("resources.no-stale-replica", tl)
    assert any(f"pid {NEW[0]}" in f.message for f in found), [f.message for f in found]


def test_a_requeue_whose_old_replicas_were_stopped_passes(judge: Judge) -> None:
    tl = TL()
    for r, pid in enumerate(OLD):
        start(tl, r, pid, M0, 1.0, f"n{r + 1}", 0)
        tl.scratch(r, pid, 1.1).steps(pid, r, range(1, 6), 2.0).proc(pid, r, 0.9, 20.5)
    tl.save(0, OLD[0], "ckpt-4", 4, 5.1).inject(5.5, fault="node-down", target="node n2")
    tl.platform("node_lost", 20.0, node="n2", source="slurmctld", layer="scheduler")
    for r, pid in enumerate(NEW):
        start(tl, r, pid, MN, 27.0, f"n{(1, 3)[r]}", 1)
        tl.proc(pid, r, 26.5, 40.0)
        tl.load(r, pid, "ckpt-4", 4, 27.1).steps(pid, r, range(5, 7), 28.0).end(r, pid, 6, 31.0)
    assert judge.one("resources.no-stale-replica", tl) == (
        P,
        "1 restart(s); every older replica was gone before its successor made progress",
    )


def test_the_runbook_lists_the_operators_commands_with_permission_and_time() -> None:
    from faultdrill.report.runbook import render_runbook, undo_hint
    from tests.report_data import report_of, synthetic_report

    data = synthetic_report()
    (item,) = [s for s in data["scenarios"] if s["operator_actions"]]
    item["operator_actions"][0].update(
        at="2026-12-01T11:34:39+0000",
        steps=[
            {
                "command": "scontrol update NodeName=n1 State=RESUME",
                "permission": "a Slurm operator",
            },
            {"command": "scontrol release 1", "permission": "the job's owner"},
        ],
    )
    report = report_of(data)
    text = render_runbook(report, None, "en")
    assert (
        "  - `scontrol update NodeName=n1 State=RESUME` at 2026-12-01T11:34:39+0000 "
        "(needs: a Slurm operator)"
    ) in text
    assert "`scontrol release 1` at 2026-12-01T11:34:39+0000 (needs: the job's owner)" in text
    assert "2026-12-01T11:34:39+0000 执行 `scontrol release 1`" in render_runbook(
        report, None, "zh"
    )
    drain = {"node": "n2", "reason": "faultdrill r: node-drain", "ns": None}
    assert undo_hint("slurm-drain", drain) == "scontrol update NodeName=n2 State=RESUME"


def test_a_job_on_other_hosts_stamps_events_on_the_harness_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FAULTDRILL_CLOCK_OFFSET (the harness's wall minus monotonic) makes ``mono`` of a
    remote writer (probe, agent, a node's sampler) comparable with the harness's."""
    import time

    from faultdrill.events import EventSink

    offset = time.time() - time.monotonic() + 1000.0  # a host whose clock is 1000 s off
    monkeypatch.setenv("FAULTDRILL_CLOCK_OFFSET", repr(offset))
    probe = Probe(tmp_path, rank=0, task_id="t")
    probe.step(1, 0.5)
    probe.close()
    ev = json.loads((tmp_path / "probe-rank0.jsonl").read_text())
    assert ev["mono"] == pytest.approx(ev["ts"] - offset)
    sink = EventSink(tmp_path / "s", "t", mono_offset=offset)
    e = sink.emit("sampler", "proc_seen", stream="sampler-n1", pid=1)
    sink.close()
    assert e.mono == pytest.approx(e.ts - offset)
    assert (tmp_path / "s" / "sampler-n1.jsonl").exists()
