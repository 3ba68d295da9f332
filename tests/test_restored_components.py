"""Drills of ``progress.restored-components`` on a job that is not the reference workload
(tests/jobs/adamw_resume_train.py: its own torch.save checkpoints, AdamW, a cosine LR
schedule, dropout, a shuffled DataLoader with 2 worker processes), 2 ranks under torchrun
on the local platform, rank 1 killed at step 12, the resume from ckpt-8.

Healthy, every part it saved comes back as saved and the check passes; a resume that
saves AdamW's moments but does not load them (``--drop optimizer``) fails the check,
although its loss barely moves. The slow set drills the scheduler and the RNG state too.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from faultdrill.admit import parse_plan
from faultdrill.engine.run import run_plan
from tests.drillkit import demo_raw, finding, kill_task

pytestmark = [pytest.mark.drill]

JOB = Path(__file__).resolve().parent / "jobs" / "adamw_resume_train.py"
KILL_RANK_1 = {"kind": "kill-worker", "target": {"rank": 1}}


def adamw_plan(drops: list[str]) -> dict[str, Any]:
    """24 steps, a checkpoint every 8, rank 1 killed at step 12; a control per part in
    ``drops`` that the resume leaves out."""
    raw = demo_raw()
    raw["task"]["id"] = f"t-{uuid.uuid4().hex[:10]}"
    raw["task"]["entrypoint"] = {
        "script": str(JOB),
        "args": ["--ckpt-dir={ckpt_dir}", "--steps=24", "--ckpt-every=8", "--step-sleep=0.1"],
    }
    raw["task"]["workload"] = {}
    raw["resources"].update(isolation="none", nodes=2, spares=0)
    raw["checkpoint"].update(every_steps=8)
    raw["observation"]["settle_s"] = 0.5
    raw["stop"] = {"max_wall_s": 400, "max_no_progress_s": 120}
    raw["rounds"] = [
        {
            "round": 1,
            "name": "worker exit",
            "scenarios": [{"id": "kill-rank-1", "fault": KILL_RANK_1, "trigger": {"at_step": 12}}],
        }
    ]
    raw["controls"] = [
        {
            "id": f"ctl-drop-{part}",
            "env": {"ADAMW_DROP": part},
            "fault": KILL_RANK_1,
            "trigger": {"at_step": 12},
            "expected_check": "progress.restored-components",
        }
        for part in drops
    ]
    return raw


def run(raw: dict[str, Any], base: Path) -> dict[str, Any]:
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(base / "state")
    try:
        run_plan(parse_plan(raw, source="adamw plan"), base / "run")
        report: dict[str, Any] = json.loads((base / "run" / "report.json").read_text())
        return report
    finally:
        kill_task(raw["task"]["id"])
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old


def by_id(report: dict[str, Any], item_id: str) -> dict[str, Any]:
    [s] = [s for s in report["scenarios"] if s["id"] == item_id]
    found: dict[str, Any] = s
    return found


@pytest.fixture(scope="module")
def drop_optimizer(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run(adamw_plan(["optimizer"]), tmp_path_factory.mktemp("adamw"))


def test_a_healthy_resume_restores_every_saved_part(drop_optimizer: dict[str, Any]) -> None:
    s = by_id(drop_optimizer, "kill-rank-1")
    restored = finding(s, "progress.restored-components")
    assert restored["verdict"] == "pass", restored
    assert restored["message"].startswith("2 load(s) restored every saved part as saved")
    assert "dataloader, model, optimizer, rng, scheduler" in restored["message"]
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:3000]
    [base] = [
        f
        for f in drop_optimizer["baseline"]["evidence"]["progress"]["findings"]
        if f["check"] == "progress.restored-components"
    ]
    assert base["message"] == "no checkpoint was loaded: no restore to compare"


def test_adamw_moments_not_restored_fail_whatever_the_loss_did(
    drop_optimizer: dict[str, Any],
) -> None:
    c = by_id(drop_optimizer, "ctl-drop-optimizer")
    restored = finding(c, "progress.restored-components")
    assert restored["verdict"] == "fail", restored
    assert "optimizer of checkpoint ckpt-8 (step 8) saved but not restored" in restored["message"]
    assert c["caught"] is True, json.dumps(c, indent=1)[:3000]


@pytest.mark.slow  # ~1.5 min more: two further known-bad resumes
def test_a_schedule_or_rng_state_not_restored_fails(tmp_path: Path) -> None:
    report = run(adamw_plan(["scheduler", "rng"]), tmp_path)
    for part in ("scheduler", "rng"):
        c = by_id(report, f"ctl-drop-{part}")
        restored = finding(c, "progress.restored-components")
        assert restored["verdict"] == "fail", restored
        assert f": {part} of checkpoint ckpt-8 (step 8) saved but not" in restored["message"]
