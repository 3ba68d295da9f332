"""A real drill of a job that cannot be changed (tests/jobs/plain_train.py: torchrun, gloo,
2 ranks on one node; it never imports faultdrill and only prints its progress), read
through the ``logs`` patterns of its plan (examples/plain_logs/plan.yaml): the baseline and a killed worker pass on a healthy
resume (bitwise equal losses and model), a known-bad resume (the script ignores its
checkpoint on restart) is caught, and so are the three harness-side controls, which need
nothing from the job. The events were stamped when read, within 0.1 s of the job printing
the line (the job prints its own monotonic clock: CLOCK_MONOTONIC is one clock per host).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultdrill.admit import parse_plan
from faultdrill.engine.run import run_plan
from faultdrill.report.html import render_html
from faultdrill.report.markdown import render_markdown
from faultdrill.report.model import read_report
from faultdrill.timeline.store import read_store
from tests.drillkit import ROOT, assert_store_is_the_json_lines, finding, item, kill_task
from tests.i18n_kit import english_in, finding_texts

pytestmark = [pytest.mark.drill]

JOB = ROOT / "tests" / "jobs" / "plain_train.py"
PLAN = ROOT / "examples" / "plain_logs" / "plan.yaml"


def plain_plan(task_id: str) -> dict[str, Any]:
    """The example plan (examples/plain_logs/plan.yaml) with a task id of its own."""
    raw: dict[str, Any] = yaml.safe_load(PLAN.read_text())
    raw["task"]["id"] = task_id
    return raw


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    base = tmp_path_factory.mktemp("joblog-drill")
    task_id = f"t-{uuid.uuid4().hex[:10]}"
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(base / "state")
    try:
        plan = parse_plan(plain_plan(task_id), source=str(PLAN), plan_dir=PLAN.parent)
        run_plan(plan, base / "run")
        yield base / "run", json.loads((base / "run" / "report.json").read_text())
    finally:
        kill_task(task_id)
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old


def test_the_job_never_imports_faultdrill() -> None:
    assert "faultdrill" not in re.sub(r'""".*?"""', "", JOB.read_text(), count=1, flags=re.S)


def test_the_step_store_holds_the_log_lines_and_loads_as_they_do(
    drill: tuple[Path, dict[str, Any]],
) -> None:
    run_dir, report = drill
    assert assert_store_is_the_json_lines(run_dir) == 1 + len(report["scenarios"])
    stored = read_store(run_dir / "baseline" / "events")
    assert stored is not None and stored.columns[0].size > 0
    assert any(name.startswith("joblog-") for name in stored.covered)


def test_a_killed_worker_resumes_healthily_and_passes_on_evidence_from_logs(
    drill: tuple[Path, dict[str, Any]],
) -> None:
    _, report = drill
    assert report["baseline"]["verdict"] == "pass"
    s = item(report, "kill-worker")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    assert s["recovery_class"] == "automatic"
    assert finding(s, "results.final-model-digest")["message"].startswith("final model identical")
    assert "bitwise" in finding(s, "results.loss-matches-baseline")["message"]
    assert finding(s, "progress.sample-ledger")["verdict"] == "pass"
    resumed = s["questions"]["resumed_from"]
    assert (resumed["checkpoint"], resumed["step"]) == ("step-000008", 8)
    logs = s["log_evidence"]
    assert logs["from_probe"] == {} and logs["not_observable"] == [] and logs["undecided"] == []
    assert logs["from_logs"]["ckpt_load"] == 2 and logs["from_logs"]["run_start"] == 4
    assert logs["read"]["unattributed"] == 0 and logs["stamp_bound_s"] < 0.5


def test_events_were_stamped_within_a_tenth_of_a_second_of_the_line(
    drill: tuple[Path, dict[str, Any]],
) -> None:
    run_dir, _ = drill
    work = run_dir / "scenarios" / "kill-worker"
    printed: dict[tuple[int, int], list[float]] = {}
    for line in (work / "logs" / "agent-n1.log").read_text().splitlines():
        m = re.search(r"\[rank (\d+)\] step (\d+) .* t=([\d.]+)", line)
        if m:
            printed.setdefault((int(m[1]), int(m[2])), []).append(float(m[3]))
    late = []
    for raw in (work / "events" / "joblog-n1.jsonl").read_text().splitlines():
        e = json.loads(raw)
        if e["kind"] == "step":
            late.append(
                min(e["mono"] - t for t in printed[(e["rank"], e["step"])] if t <= e["mono"])
            )
    late.sort()
    assert len(late) >= 48
    assert late[len(late) // 2] <= 0.1, late  # the machine is shared: the median, loosely
    assert late[0] >= 0


@pytest.mark.parametrize(
    ("control", "check"),
    [
        ("ctl-resume-ignored", "progress.no-restart-from-zero"),
        ("ctl-rollback-latest", "progress.resume-point"),
        ("ctl-hide-checkpoints", "progress.no-restart-from-zero"),
        ("ctl-stale-copy", "resources.no-stale-replica"),
    ],
)
def test_each_control_is_caught_by_its_check(
    drill: tuple[Path, dict[str, Any]], control: str, check: str
) -> None:
    _, report = drill
    c = item(report, control)
    assert c["caught"] is True, (c["not_proven_why"], json.dumps(c["evidence"], indent=1)[:3000])
    assert c["expected_check"] == check
    assert finding(c, check)["verdict"] == "fail"


def test_the_harness_controls_did_what_they_say_and_were_taken_back(
    drill: tuple[Path, dict[str, Any]],
) -> None:
    run_dir, report = drill
    rollback = item(report, "ctl-rollback-latest")
    assert (
        "resumed from step 8 (step-000008) although valid checkpoint step-000016"
        in finding(rollback, "progress.resume-point")["message"]
    )
    stale = item(report, "ctl-stale-copy")
    assert finding(stale, "resources.no-duplicate-rank")["verdict"] == "fail"
    for control in ("ctl-rollback-latest", "ctl-hide-checkpoints", "ctl-stale-copy"):
        c = item(report, control)
        assert finding(c, "resources.faults-reverted")["verdict"] == "pass", control
    assert (run_dir / "controls" / "ctl-stale-copy" / "logs" / "copy-n1-rank1.log").exists()
    summary = report["summary"]
    assert (summary["controls"], summary["controls_caught"], summary["ok"]) == (4, 4, True)
    assert summary["controls_note"] is None


def test_the_chinese_report_says_the_log_evidence_and_every_finding_in_chinese(
    drill: tuple[Path, dict[str, Any]],
) -> None:
    """Every finding of a job read from its log lines names its message (the log-line
    mode's own ones too), and the zh report says them and the log evidence in Chinese."""
    run_dir, report = drill
    findings = [
        f
        for s in [report["baseline"], *report["scenarios"]]
        for cat in (s.get("evidence") or {}).values()
        for f in cat["findings"]
    ]
    assert findings and [f["message"] for f in findings if not f.get("message_id")] == []
    model = read_report(run_dir)
    md, page = render_markdown(model, "zh"), render_html(model, run_dir, "zh")
    assert "读自任务日志行的证据" in md and "读自任务日志行的证据" in page
    assert (
        "演练工具注入：rollback-latest" in md
        and "— 演练工具注入的对照：重启期间隐藏检查点目录" in md
    )
    said = finding_texts(md, html_page=False)
    assert said and english_in(said) == []
    assert english_in(finding_texts(page, html_page=True)) == []


@pytest.mark.slow
def test_a_job_printing_nothing_at_start_or_end_is_drilled_the_same(tmp_path: Path) -> None:
    """The same job, printing only its step, save and resume lines (``PLAIN_TRAIN_QUIET``),
    read without run_start, no_checkpoint or run_end patterns: a fresh start is inferred
    from a first step line with no resume line before it, the launcher's exit ends the
    run, and the killed worker still passes (the model digest is not observable)."""
    task_id = f"t-{uuid.uuid4().hex[:10]}"
    raw = plain_plan(task_id)
    raw["task"]["env"] = {"PLAIN_TRAIN_QUIET": "1"}
    for name in ("run_start", "no_checkpoint", "run_end"):
        raw["logs"].pop(name)
    raw.pop("controls")
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(tmp_path / "state")
    try:
        plan = parse_plan(raw, source=str(PLAN), plan_dir=PLAN.parent)
        run_plan(plan, tmp_path / "run", controls=False)
        report = json.loads((tmp_path / "run" / "report.json").read_text())
    finally:
        kill_task(task_id)
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old
    assert report["baseline"]["verdict"] == "pass", json.dumps(report["baseline"])[:3000]
    s = item(report, "kill-worker")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    assert finding(s, "progress.completed")["verdict"] == "pass"
    assert finding(s, "results.final-model-digest")["message_id"] == "logs.not-observable"
    assert "bitwise" in finding(s, "results.loss-matches-baseline")["message"]
    assert finding(s, "progress.sample-ledger")["verdict"] == "pass"
    assert s["log_evidence"]["from_logs"]["ckpt_none"] >= 2  # inferred fresh starts
