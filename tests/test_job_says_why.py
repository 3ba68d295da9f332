"""A job that fails says why (issue 11): the failing command, its exit status, the worker's
last output lines and the log's path, on the console and in the item's result; a script
that never calls the probe is said to be uninstrumented; a fault whose trigger was never
reached leaves the recovery class not determined; and a run says "item 3 of 17" and the
elapsed time as it goes, with or without a terminal."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

import faultdrill.engine.run as runner
from faultdrill.admit import parse_plan
from faultdrill.checks import Verdict
from faultdrill.cli import _Console
from faultdrill.engine.failure import describe, failure_facts
from faultdrill.judge.evaluate import evaluate_item
from faultdrill.plan import Plan, RecoveryClass, Scenario
from faultdrill.readings.reference import Reference
from faultdrill.timeline import Timeline
from tests.drillkit import cli_env, demo_raw, kill_task
from tests.timelines import TL, baseline

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL

#: Two attempts of a worker that raised at start, as torchrun's agent logs them.
AGENT_LOG = """\
I1201 10:40:08.220000 28590 torch/distributed/elastic/agent/server/api.py:715] [default] Starting worker group
starting
Traceback (most recent call last):
  File "/jobs/train.py", line 4, in <module>
    raise RuntimeError("boom: the config is wrong")
RuntimeError: boom: the config is wrong
E1201 10:40:08.446000 28590 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 28837) of binary: /usr/bin/python3
I1201 10:40:08.447000 28590 torch/distributed/elastic/agent/server/api.py:942] [default] Worker group FAILED. 1/1 attempts left; will restart worker group
starting
E1201 10:40:10.198000 28590 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 0 (pid: 28845) of binary: /usr/bin/python3
"""


def test_the_first_worker_failure_is_found_in_the_launcher_logs(tmp_path: Path) -> None:
    logs = tmp_path / "run" / "baseline" / "logs"
    logs.mkdir(parents=True)
    (logs / "agent-n1.log").write_text(AGENT_LOG)
    (logs / "agent-n2.log").write_text(AGENT_LOG.replace("10:40:08.446", "10:40:09.000"))
    facts = failure_facts(logs.parent, ["/jobs/train.py", "--lr=1"], tmp_path / "run")
    assert facts["command"] == f"{sys.executable} /jobs/train.py --lr=1"
    assert (facts["exit_status"], facts["signal"], facts["node"]) == (1, None, "n1")
    assert facts["local_rank"] == 0 and facts["worker_failures"] == 4
    assert facts["error_tail"] == [
        "starting",
        "Traceback (most recent call last):",
        '  File "/jobs/train.py", line 4, in <module>',
        '    raise RuntimeError("boom: the config is wrong")',
        "RuntimeError: boom: the config is wrong",
    ]
    assert facts["log"] == "baseline/logs/agent-n1.log"
    said = describe(facts)
    assert said[0] == "a worker exited with status 1 (local rank 0 on n1)"
    assert said[-1] == "full log: baseline/logs/agent-n1.log"


def test_a_worker_killed_by_a_signal_is_named(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "agent-n1.log").write_text("".join(AGENT_LOG.splitlines(True)[-2:]))
    facts = failure_facts(tmp_path, ["-m", "pkg"])
    assert (facts["exit_status"], facts["signal"]) == (-9, "SIGKILL")
    assert facts["error_tail"] == ["starting"]
    assert (
        describe(facts)[0] == "a worker was killed by SIGKILL (exit status -9) (local rank 0 on n1)"
    )


# --- judging -----------------------------------------------------------------------------


def judged(tmp_path: Path, plan: Plan, item: Scenario | None, tl: Timeline) -> Any:
    work = tmp_path / "item"
    (work / "events").mkdir(parents=True, exist_ok=True)
    ref = Reference.from_timeline(baseline().build())
    return evaluate_item(plan, "scenario" if item else "baseline", item, work, ref, timeline=tl)


def test_a_job_without_probe_events_is_said_to_be_uninstrumented(
    tmp_path: Path, plan: Plan, scenario: Scenario
) -> None:
    tl = TL().job("running", 0.0).job("succeeded", 5.0).cleanup(6.0)
    res = judged(tmp_path, plan, scenario, tl.build())
    assert res.no_probe_events and res.verdict is R
    said = [f for f in res.evidence["expectation"].findings if f.check == "expectation.probe"]
    assert [(f.verdict, f.message) for f in said] == [
        (R, "no probe events from any rank: instrument the script (docs/probe.md)")
    ]
    assert all(f.verdict is not F for ev in res.evidence.values() for f in ev.findings)
    assert res.recovery is RecoveryClass.NOT_DETERMINED
    assert res.to_item().to_json()["no_probe_events"] is True


def test_a_failed_job_carries_its_failure_into_the_result(tmp_path: Path, plan: Plan) -> None:
    facts = {"command": "python train.py", "exit_status": 1, "error_tail": ["boom"]}
    tl = TL().job("running", 0.0).job("failed", 3.0).harness("job_failed", 3.1, **facts)
    res = judged(tmp_path, plan, None, tl.build())
    assert res.failure == facts
    assert res.verdict is F  # the job failed: the expectation says so
    [probe] = [f for f in res.evidence["expectation"].findings if f.check == "expectation.probe"]
    assert "the job failed before any rank reported" in probe.message


def test_a_trigger_never_reached_is_retest_and_not_determined(
    tmp_path: Path, plan: Plan, scenario: Scenario
) -> None:
    res = judged(tmp_path, plan, scenario, baseline().build())  # ran, but never injected
    assert res.verdict is R
    assert res.recovery is RecoveryClass.NOT_DETERMINED
    assert res.recovery_why.startswith("not determined: the fault was never injected: trigger")
    cls = [f for f in res.evidence["expectation"].findings if f.check.endswith("recovery-class")]
    assert [f.verdict for f in cls] == [R]
    assert all(f.verdict is not F for ev in res.evidence.values() for f in ev.findings)


def test_a_plan_cannot_expect_not_determined() -> None:
    raw = demo_raw()
    raw["rounds"][0]["scenarios"][0]["expected"]["recovery"] = "not-determined"
    with pytest.raises(Exception, match="'not-determined' is what a drill says"):
        parse_plan(raw)


# --- progress ----------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.said: list[tuple[Any, ...]] = []

    def started(self, item: str, kind: str, index: int, total: int) -> None:
        self.said.append(("start", item, index, total))

    def finished(
        self, item: str, kind: str, index: int, total: int, result: Any, reason: str | None
    ) -> None:
        self.said.append(("end", item, index, total, reason))


def test_run_plan_numbers_every_item_as_it_starts_and_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = parse_plan(demo_raw())

    def evaluate(plan: Plan, kind: str, item: Any, work: Path, *a: Any, **k: Any) -> Any:
        bad = item is not None and item.id == "kill-worker"
        return SimpleNamespace(
            id="baseline" if item is None else item.id,
            timeline=None,
            verdict=F if bad else P,
            failure=None,
            no_probe_events=False,
        )

    monkeypatch.setattr(runner, "execute_item", lambda plan, kind, item, run_dir, rep: run_dir)
    monkeypatch.setattr(runner, "evaluate_item", evaluate)
    monkeypatch.setattr(runner, "write_dossier", lambda *a, **k: None)
    monkeypatch.setattr(Timeline, "load", staticmethod(lambda *a, **k: None))
    monkeypatch.setattr(Reference, "from_timeline", staticmethod(lambda *a: None))
    monkeypatch.setattr(runner, "write_reports", lambda result: None)
    monkeypatch.setattr(runner, "machine_problems", lambda plan, ids: {})
    monkeypatch.setattr(runner, "host_problem", lambda plan: None)
    rec = Recorder()
    only = {"kill-worker", "link-jitter", "node-loss", "ctl-resume-ignored"}
    runner.run_plan(plan, tmp_path / "run", only=only, progress=rec)
    assert rec.said == [
        ("start", "baseline", 1, 5),
        ("end", "baseline", 1, 5, None),
        ("start", "kill-worker", 2, 5),
        ("end", "kill-worker", 2, 5, None),
        ("start", "link-jitter", 3, 5),
        ("end", "link-jitter", 3, 5, None),
        (
            "end",
            "node-loss",
            4,
            5,
            "not run: round 1 did not pass (set continue_on_failure to go on)",
        ),
        ("start", "ctl-resume-ignored", 5, 5),
        ("end", "ctl-resume-ignored", 5, 5, None),
    ]


def test_without_a_terminal_each_item_start_and_end_is_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    con = _Console(quiet=False)  # pytest's stderr is no terminal
    assert not con.live_line
    con.started("kill-worker", "scenario", 3, 17)
    con.finished("kill-worker", "scenario", 3, 17, None, "not run: a reason")
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "faultdrill: item 3 of 17, 0:00 elapsed: scenario kill-worker started",
        "faultdrill: item 3 of 17, 0:00 elapsed: scenario kill-worker: not run: a reason",
    ]


# --- a real job that crashes at start ------------------------------------------------------


@pytest.mark.drill
def test_a_script_crashing_at_start_says_command_status_output_and_log(tmp_path: Path) -> None:
    (tmp_path / "crash.py").write_text(
        'print("starting", flush=True)\nraise RuntimeError("boom: the config is wrong")\n'
    )
    raw = demo_raw()
    task_id = f"crash-{uuid.uuid4().hex[:8]}"  # ours alone: the cleanup kills by task id
    raw["task"].update(id=task_id, workload={})
    raw["task"]["entrypoint"] = {"script": "crash.py", "args": ["--ckpt={ckpt_dir}"]}
    raw["resources"].update(isolation="none", spares=0, max_restarts=1)
    raw["rounds"] = [{"round": 1, "scenarios": [raw["rounds"][0]["scenarios"][0]]}]
    raw["controls"] = []
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    out = tmp_path / "out"
    argv = ["run", str(tmp_path / "plan.yaml"), "--out", str(out)]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "faultdrill.cli", *argv],
            env=cli_env(tmp_path / "state"),
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        kill_task(task_id)
    err = done.stderr
    assert done.returncode == 1, err
    assert "faultdrill: item 1 of 2, " in err and "baseline: fail" in err
    assert "a worker exited with status 1 (local rank 0 on n" in err
    assert f"command: {sys.executable} {tmp_path / 'crash.py'} --ckpt=" in err
    assert "      RuntimeError: boom: the config is wrong" in err
    assert f"full log: {out}/baseline/logs/agent-n" in err
    assert "no probe events from any rank: the job failed before any rank reported" in err
    failure = json.loads((out / "report.json").read_text())["baseline"]["failure"]
    assert failure["exit_status"] == 1 and failure["error_tail"][-1].startswith("RuntimeError")
    assert (out / failure["log"]).is_file()
