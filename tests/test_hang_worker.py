"""``hang-worker``: the spec's bounds and bad input, the platforms that can and cannot,
``progress.hang-detected`` on tiny literal timelines (each verdict exact: noticed by a
timeout, nobody noticing within a window the timeout outlasts or should have fired in, a
stop condition ending it, never injected), the per-rank blocked time, a control's own
collective timeout, and the stop of a real process tree undone by ``faultdrill cleanup``
after the harness was SIGKILLed (and refused for a pid that started at another time)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from faultdrill import cli
from faultdrill.admit import parse_plan
from faultdrill.checks import Verdict
from faultdrill.checks.network import blocked_per_rank
from faultdrill.errors import PlanError
from faultdrill.faults.process import HangWorkerSpec
from faultdrill.host import procfs
from faultdrill.plan import Control, Resources, Scenario
from faultdrill.platforms import PLATFORMS
from faultdrill.platforms.api import Ability
from tests.drillkit import demo_raw
from tests.timelines import NEW, OLD, TL, Judge, first_run

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL
HANG = {"kind": "hang-worker", "target": {"rank": 1}, "for_s": 10}
CHECK = "progress.hang-detected"


def _problem(fault: dict[str, Any], **resources: Any) -> str:
    raw = demo_raw()
    raw["resources"].update(resources)
    raw["rounds"][0]["scenarios"][0]["fault"] = fault
    with pytest.raises(PlanError) as err:
        parse_plan(raw, source="hang.yaml")
    return str(err.value)


# --- the spec --------------------------------------------------------------------------


def test_the_spec_is_bounded_and_says_its_target() -> None:
    spec = HangWorkerSpec.model_validate(HANG)
    assert spec.duration_s == 10 and spec.target_label() == "rank 1"
    raw = demo_raw()
    raw["rounds"][0]["scenarios"][0]["fault"] = {**HANG, "target": {"node": "n2"}}
    plan = parse_plan(raw, source="hang.yaml")
    assert plan.scenarios()[0].fault.kind == "hang-worker"


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        ({**HANG, "for_s": 0}, "for_s"),
        ({**HANG, "for_s": 3601}, "for_s"),
        ({"kind": "hang-worker", "target": {"rank": 1}}, "for_s"),
        ({**HANG, "for_s": "long"}, "for_s"),
        ({**HANG, "target": {"rank": 1, "node": "n1"}}, "set exactly one of 'rank' or 'node'"),
        ({**HANG, "target": {"rank": 7}}, "hang-worker target rank 7 does not exist"),
        ({**HANG, "target": {"node": "n9"}}, "node 'n9' does not exist"),
        ({**HANG, "mode": "freeze"}, "mode"),
    ],
)
def test_bad_input_names_the_field(fault: dict[str, Any], says: str) -> None:
    text = _problem(fault)
    assert "hang.yaml" in text and says in text, text


def test_platforms_without_it_are_refused_with_the_fix() -> None:
    ray = _problem(HANG, platform="ray", isolation="netns", ray={})
    assert "hang-worker is not drilled on Ray yet" in ray and "slurm (embedded: true)" in ray
    assert Ability.HANG_RANK in PLATFORMS["local"].abilities_for(parse_plan(demo_raw()).resources)
    k8s = Resources(platform="kubernetes", isolation="netns", kubernetes={"test_cluster": True})
    test_cluster = PLATFORMS["kubernetes"].variant_for(k8s)
    assert Ability.HANG_RANK not in test_cluster.abilities_for(k8s)
    assert "not implemented on Kubernetes yet" in test_cluster.why_not(Ability.HANG_RANK, k8s)
    slurm = Resources(platform="slurm", isolation="netns", slurm={"embedded": True})
    assert Ability.HANG_RANK in PLATFORMS["slurm"].variant_for(slurm).abilities_for(slurm)


# --- progress.hang-detected -----------------------------------------------------------


def _hung(t_inj: float = 5.5) -> TL:
    """Incarnation 0, steps 1..5 at t=1..5; rank 1 stopped at ``t_inj``."""
    tl = TL().job("running", 0.0)
    first_run(tl, 5)
    return tl.inject(t_inj, fault="hang-worker", target="rank 1")


def _recovered() -> TL:
    """The collective timeout (30 s) fires on n1, torchrun restarts, the hang is released."""
    tl = _hung().platform(
        "timeout_fired", 35.6, node="n1", timeout="gloo", line="Timed out waiting 30000ms for recv"
    )
    tl.platform("worker_group_failed", 35.8, node="n1").add("fault", "reverted", 40.0)
    for rank, pid in enumerate(NEW):
        tl.run_start(rank, pid, "10.0.0.1:29501", 37.0).steps(pid, rank, range(5, 7), t0=38.5)
    return tl


def _rode_out(release: float = 15.5) -> TL:
    """Nobody notices; the drill releases the hang and the same processes step on."""
    tl = _hung().add("fault", "reverted", release)
    for rank, pid in enumerate(OLD):
        tl.steps(pid, rank, range(6, 9), t0=release + 0.5)
    return tl


@pytest.fixture()
def hang(judge: Judge) -> Judge:
    assert isinstance(judge.item, Scenario)
    return judge.replace(item=judge.item.model_copy(update={"fault": HangWorkerSpec(**HANG)}))


def _control(judge: Judge, gloo_s: float) -> Judge:
    ctl = Control(
        id="ctl-hang",
        workload={"gloo_timeout_s": gloo_s},
        fault=HangWorkerSpec(**HANG),
        trigger={"at_step": 5},
        expected_check=CHECK,
    )
    return judge.replace(item=ctl)


def test_acted_on_by_the_agent_after_the_timeout_passes_with_times_and_blocking(
    hang: Judge,
) -> None:
    (f,) = hang.run(CHECK, _recovered())
    assert f.verdict == P
    assert f.message == (
        "the hang was acted on by the launcher agent (worker_group_failed) on n1 at +30.3 s "
        "after the rank stopped (configured gloo collective timeout: 30 s); first sign: a "
        "timeout or lost peer in the log of n1 at +30.1 s (Timed out waiting 30000ms for "
        "recv); the job restarted (incarnation 1 began at +31.5 s); the ranks were blocked "
        "up to 33.5 s (last step before the hang to first step after it)"
    )
    assert f.data["noticed_by"] == "agent" and f.data["after_s"] == 30.3
    assert f.data["symptom_after_s"] == 30.1
    assert f.data["blocked_s"] == {0: 33.5, 1: 33.5}


def test_a_heartbeat_acting_is_named_with_its_setting(hang: Judge) -> None:
    tl = _recovered().drop("platform", "timeout_fired").drop("platform", "worker_group_failed")
    tl.platform("dead_node", 12.0, node="n1", msg="Detected dead node")
    (f,) = hang.run(CHECK, tl)
    assert f.verdict == P and f.data["noticed_by"] == "heartbeat"
    assert "by a heartbeat (rendezvous keep-alive (1 s x 3)) on n1 at +6.5 s" in f.message


def test_a_timeout_in_a_worker_that_nobody_acted_on_fails(hang: Judge) -> None:
    """The survivor's collective timed out, but its exit waited for the hung peer: the
    agent acted only after the drill released the hang."""
    tl = _rode_out().add(
        "probe",
        "worker_error",
        9.6,
        rank=0,
        pid=OLD[0],
        error="RuntimeError: Timed out waiting 4000ms for recv operation to complete",
    )
    tl.platform("worker_failed", 18.0, node="n1")
    (f,) = _control(hang, 4).run(CHECK, tl)
    assert f.verdict == F
    assert f.message.startswith(
        "nobody acted on the hung rank within 10.0 s after it stopped (the drill then released "
        "the hang): a peer saw it (a worker error on rank 0 at +4.1 s (RuntimeError: Timed out "
        "waiting 4000ms for recv operation to complete)), but no agent, heartbeat or platform "
        "acted on it within that window (the survivor's exit may be waiting for the hung "
        "peer; a longer for_s shows whether anything acts at all); "
    )
    assert f.data["symptom_after_s"] == 4.1


def test_nobody_noticing_a_hang_the_timeout_outlasts_fails_naming_both(hang: Judge) -> None:
    (f,) = hang.run(CHECK, _rode_out())
    assert f.verdict == F
    assert f.message == (
        "nobody acted on the hung rank within 10.0 s after it stopped (the drill then released "
        "the hang): the configured gloo collective timeout (30 s) is not shorter than that "
        "window, so it could not fire; set resources.timeouts.gloo_s (or the job's collective "
        "timeout) below the hang's for_s; the ranks were blocked up to 11.0 s (last step "
        "before the hang to first step after it)"
    )
    assert f.data["window_s"] == 10.0 and f.data["noticed"] is None


def test_a_timeout_that_should_have_fired_but_did_not_fails(hang: Judge) -> None:
    (f,) = _control(hang, 4).run(CHECK, _rode_out())
    assert f.verdict == F
    assert "gloo collective timeout (4 s) should have fired at +4 s" in f.message
    assert f.data["gloo_timeout_s"] == 4.0


def test_a_notice_after_the_release_does_not_count(hang: Judge) -> None:
    tl = _rode_out().platform("worker_failed", 20.0, node="n2")
    assert hang.verdicts(CHECK, tl) == [F]
    tl = _rode_out().platform("worker_failed", 16.0, node="n2")  # within the read slack
    assert hang.verdicts(CHECK, tl) == [P]


def test_a_stop_condition_ending_the_hang_fails_and_is_named(hang: Judge) -> None:
    tl = _hung().harness("stop_condition", 65.5, condition="max_no_progress_s")
    tl.add("fault", "reverted", 66.0)
    (f,) = hang.run(CHECK, tl)
    assert f.verdict == F
    assert "within 60.0 s after it stopped (the drill's stop condition max_no_progress_s" in (
        f.message
    )
    assert "rank(s) 0, 1 made no step after the hang" in f.message


def test_never_injected_is_retest_and_other_faults_are_not_judged(
    hang: Judge, judge: Judge
) -> None:
    tl = TL().job("running", 0.0)
    first_run(tl, 5)
    assert hang.verdicts(CHECK, tl) == [R]
    assert judge.one(CHECK, _recovered()) == (P, "not a hang-worker fault: not applicable")
    assert judge.replace(item=None).verdicts(CHECK, tl) == [P]
    assert hang.one("expectation.timeout-fired", _recovered()) == (
        P,
        "a hung rank: which timeout or who noticed it is judged by progress.hang-detected",
    )


def test_blocked_time_per_rank_leaves_out_ranks_without_an_earlier_step() -> None:
    tl = _rode_out().build()
    assert blocked_per_rank(tl, 5.5) == {0: 11.0, 1: 11.0}
    assert blocked_per_rank(tl, 0.5) == {}


# --- a control's own collective timeout ------------------------------------------------------


def test_a_controls_own_gloo_timeout_wins_over_the_plans(judge: Judge) -> None:
    plan = judge.plan
    ctl = _control(judge, 600).item
    assert plan.gloo_timeout_for(ctl) == 600.0
    assert plan.workload_config(ctl, "ckpt")["gloo_timeout_s"] == 600
    scenario = judge.item
    assert plan.gloo_timeout_for(scenario) == plan.resources.timeouts.gloo_s
    assert plan.workload_config(scenario, "ckpt")["gloo_timeout_s"] == 30


# --- cleanup after a hard crash ----------------------------------------------------------------

_HARNESS = r"""
import os, subprocess, sys, time
from functools import partial
from pathlib import Path
from faultdrill.host import procfs
from faultdrill.host.linux import stop_tree_changes
from faultdrill.ledger import Ledger
from faultdrill.platforms.api import Replica

path, run_id, forge = sys.argv[1], sys.argv[2], sys.argv[3] == "forge"
env = {**os.environ, "FAULTDRILL_RUN_ID": run_id}
code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); time.sleep(300)"
worker = subprocess.Popen(
    [sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
)
time.sleep(1.0)
child = int(open(f"/proc/{worker.pid}/task/{worker.pid}/children").read().split()[0])
start = procfs.start_time(worker.pid)
victim = Replica(worker.pid, start + 1 if forge else start, "worker", "n2", rank=1)
kid = Replica(child, procfs.start_time(child), "child", "n2", owner=worker.pid)
ledger = Ledger(Path(path), run_id=run_id)
ledger.activate()
for change in stop_tree_changes(victim, [kid]):
    eid = ledger.record(change.kind, change.data, change.label)
    if forge:  # stop it for real; the ledger says another start time
        os.kill(worker.pid, 19)
    else:
        change.apply(partial(ledger.update, eid))
    ledger.mark_applied(eid)
    forge = False
print(worker.pid, child, flush=True)
time.sleep(300)
"""


def _crashed_harness(tmp_path: Path, *, forge: bool) -> tuple[int, int]:
    """A harness that stopped a real process tree (recorded in its ledger first), then was
    SIGKILLed; the stopped pids (worker, child)."""
    run_id = f"hang-{os.getpid()}-{int(time.time() * 1000) % 100000}-{int(forge)}"
    harness = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _HARNESS,
            str(tmp_path / "ledger.jsonl"),
            run_id,
            "forge" if forge else "real",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert harness.stdout is not None
    worker, child = (int(x) for x in harness.stdout.readline().split())
    harness.send_signal(signal.SIGKILL)
    harness.wait(10)
    return worker, child


def _stopped(pid: int) -> bool:
    return procfs.proc_state(pid) == "T"


@pytest.fixture()
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FAULTDRILL_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def test_cleanup_resumes_the_stopped_tree_after_the_harness_died(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    worker, child = _crashed_harness(tmp_path, forge=False)
    try:
        assert _stopped(worker) and _stopped(child), "the crash must leave the tree stopped"
        assert cli.main(["cleanup"]) == 0
        out = capsys.readouterr().out
        assert "2 of 2 pending change(s) undone" in out, out
        assert not _stopped(worker) and not _stopped(child)
        assert list((state / "active").iterdir()) == []
        records = [json.loads(x) for x in (tmp_path / "ledger.jsonl").read_text().splitlines()]
        assert [r["kind"] for r in records if r.get("kind")] == ["sigstop", "sigstop"]
    finally:
        for pid in (child, worker):
            procfs.kill_checked(pid, None, signal.SIGKILL)


def test_cleanup_does_not_resume_a_pid_that_started_at_another_time(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    worker, child = _crashed_harness(tmp_path, forge=True)
    try:
        assert _stopped(worker)
        assert cli.main(["cleanup"]) == 0
        capsys.readouterr()
        assert _stopped(worker), "a pid whose start time differs is not the one recorded"
    finally:
        for pid in (child, worker):
            procfs.kill_checked(pid, None, signal.SIGKILL)
