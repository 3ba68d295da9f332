"""Real drills of a job that prints only epoch lines (tests/jobs/epoch_log_train.py: the
PyTorch DDP tutorial's Trainer on CPU/gloo, torchrun, 2 nodes of one rank; it prints a line
at the START of each epoch, one after each save and one on resume, nothing at a fresh start
or at the end), read through examples/epoch_logs/plan.yaml.

As published the job saves "epochs run = epoch" after finishing that epoch and resumes at
it, re-running a completed epoch: a killed worker FAILs on progress (progress.resume-point).
With ``--fixed`` the same drill passes: the scenarios run although the logs show no loss,
sample ids or model digest, which pass as no evidence, to be verified (the conclusion level
does not rest on them). The harness-side controls (slow) are caught on the job as it is.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultdrill.admit import parse_plan
from faultdrill.engine.run import run_plan
from tests.drillkit import ROOT, finding, item, kill_task

pytestmark = [pytest.mark.drill]

PLAN = ROOT / "examples" / "epoch_logs" / "plan.yaml"


def drill(tmp_path: Path, *extra_args: str, controls: bool = False) -> dict[str, Any]:
    """Run the example plan (its job given ``extra_args``) into ``tmp_path``; the report."""
    raw: dict[str, Any] = yaml.safe_load(PLAN.read_text())
    task_id = f"t-{uuid.uuid4().hex[:10]}"
    raw["task"]["id"] = task_id
    raw["task"]["entrypoint"]["args"] += list(extra_args)
    if not controls:
        raw.pop("controls", None)
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(tmp_path / "state")
    try:
        plan = parse_plan(raw, source=str(PLAN), plan_dir=PLAN.parent)
        run_plan(plan, tmp_path / "run", controls=controls)
        report: dict[str, Any] = json.loads((tmp_path / "run" / "report.json").read_text())
        return report
    finally:
        kill_task(task_id)
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old


def test_the_tutorial_job_re_runs_an_epoch_and_fails_on_progress(tmp_path: Path) -> None:
    report = drill(tmp_path)
    assert report["baseline"]["verdict"] == "pass", json.dumps(report["baseline"])[:3000]
    s = item(report, "kill-worker")
    assert s["verdict"] == "fail", json.dumps(s["evidence"], indent=1)[:4000]
    resume = finding(s, "progress.resume-point")
    assert resume["verdict"] == "fail", resume
    assert resume["params"]["step"] == resume["params"]["valid_step"] - 1
    assert s["evidence"]["progress"]["verdict"] == "fail"


def test_the_fixed_job_passes_with_what_logs_cannot_show_to_be_verified(tmp_path: Path) -> None:
    report = drill(tmp_path, "--fixed")
    assert report["baseline"]["verdict"] == "pass", json.dumps(report["baseline"])[:3000]
    s = item(report, "kill-worker")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    for name in ("progress.resume-point", "progress.no-jump", "progress.completed"):
        assert finding(s, name)["verdict"] == "pass", finding(s, name)
    ledger = finding(s, "progress.sample-ledger")
    assert ledger["message_id"] == "logs.not-observable"
    assert ledger["data"]["to_be_verified"] == "which samples each step consumed"
    blind = {e["check"]: e for e in s["log_evidence"]["not_observable"]}
    assert {"progress.sample-ledger", "results.loss-matches-baseline"} <= set(blind)
    assert all(e["to_be_verified"] for e in blind.values() if e["verdict"] == "pass")
    # the level stops where the evidence did: the sample ledger was not observable
    assert s["conclusion"]["level"] == "running-again"
    assert s["log_evidence"]["undecided"] == []
    assert s["log_evidence"]["unit"] == "epoch"


@pytest.mark.slow
def test_the_harness_controls_are_caught_on_the_epoch_job(tmp_path: Path) -> None:
    report = drill(tmp_path, "--fixed", controls=True)
    for control, check in (
        ("ctl-hide-checkpoints", "progress.no-restart-from-zero"),
        ("ctl-stale-copy", "resources.no-stale-replica"),
    ):
        c = item(report, control)
        assert c["caught"] is True, (c["not_proven_why"], json.dumps(c["evidence"])[:3000])
        assert finding(c, check)["verdict"] == "fail"
