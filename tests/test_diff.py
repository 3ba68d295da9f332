"""Regression diff: literal reports for every rule, then a healthy run against a known-bad one.

The drill test compares the shared recorded drill (healthy worker-kill recovery) with a run
whose ``kill-worker`` item holds the events of the known-bad workload (optimizer state not
restored) recorded under the same fault and trigger by that same drill, re-judged by the
real checks as that scenario: the diff must report the regression and exit non-zero. The
slow test records the known-bad run from scratch with ``faultdrill run``.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultdrill.archive.diff import Band, DiffResult, load_report
from faultdrill.archive.diff import diff_reports as diff_models
from faultdrill.cli import main
from faultdrill.errors import RunDirError
from tests.drillkit import demo_raw, kill_task
from tests.recorded_run import RecordedDemo
from tests.report_data import report_of, synthetic_report


def _pair() -> tuple[dict[str, Any], dict[str, Any]]:
    a = synthetic_report()
    return a, copy.deepcopy(a)


def diff_reports(a: dict[str, Any], b: dict[str, Any], **kw: Any) -> DiffResult:
    return diff_models(report_of(a), report_of(b), **kw)


def _item(rep: dict[str, Any], sid: str) -> dict[str, Any]:
    return next(s for s in rep["scenarios"] if s["id"] == sid)


def test_identical_runs_have_no_regression() -> None:
    a, b = _pair()
    d = diff_reports(a, b)
    assert not d.regressed and d.regressions == []
    assert all(not i.changes for i in d.items)


def test_worse_verdict_and_class_are_regressions() -> None:
    a, b = _pair()
    k = _item(b, "kill-worker")
    k["verdict"], k["recovery_class"] = "retest", "manual-confirmation"
    d = diff_reports(a, b)
    assert d.regressions == [
        "kill-worker: verdict pass -> retest",
        "kill-worker: recovery class automatic -> manual-confirmation",
    ]


def test_better_verdict_is_a_change_not_a_regression() -> None:
    a, b = _pair()
    n = _item(b, "node-loss")
    n["verdict"], n["recovery_class"] = "pass", "automatic"
    d = diff_reports(a, b)
    assert not d.regressed
    changes = next(i for i in d.items if i.id == "node-loss").changes
    assert "verdict improved fail -> pass" in changes


def test_control_no_longer_caught_is_a_regression() -> None:
    a, b = _pair()
    _item(b, "ctl-optimizer-lost")["caught"] = False
    d = diff_reports(a, b)
    assert len(d.regressions) == 1 and "no longer caught" in d.regressions[0]


def test_resume_from_scratch_is_a_regression_other_resume_changes_are_reported() -> None:
    a, b = _pair()
    _item(b, "kill-worker")["questions"]["resumed_from"] = {
        "checkpoint": None,
        "step": 0,
        "data_position": 0,
        "verified": None,
    }
    assert "resumed from scratch" in diff_reports(a, b).regressions[0]
    a, b = _pair()
    _item(b, "kill-worker")["questions"]["resumed_from"]["step"] = 20
    _item(b, "kill-worker")["questions"]["resumed_from"]["checkpoint"] = "step-000020"
    d = diff_reports(a, b)
    assert not d.regressed
    assert any(c.startswith("resume point") for c in d.items[0].changes)


def test_lost_coverage_and_baseline_are_regressions() -> None:
    a, b = _pair()
    b["scenarios"] = [s for s in b["scenarios"] if s["id"] != "node-loss"]
    b["baseline"]["verdict"] = "retest"
    d = diff_reports(a, b)
    assert "baseline verdict pass -> retest" in d.regressions
    assert "node-loss: run in A but not in B (lost coverage)" in d.regressions


def test_times_outside_the_band_are_reported_and_gate_only_when_asked() -> None:
    a, b = _pair()
    _item(b, "kill-worker")["times"]["recover_s"] = 30.0
    d = diff_reports(a, b)
    assert not d.regressed
    assert any("recover_s 6.3 -> 30.0" in c for c in d.items[0].changes)
    gated = diff_reports(a, b, gate_times=True)
    assert gated.regressed and "recover_s" in gated.regressions[0]
    assert not diff_reports(a, b, band=Band(abs_s=30.0), gate_times=True).regressed


def test_new_findings_are_listed() -> None:
    a, b = _pair()
    b_res = _item(b, "kill-worker")["evidence"]["resources"]
    b_res["verdict"] = "fail"
    b_res["findings"].append(
        {"check": "resources.released-at-end", "verdict": "fail", "message": "port 29500 open"}
    )
    d = diff_reports(a, b)
    k = d.items[0]
    assert k.new_findings == {"resources.released-at-end": "fail"}
    assert any("port 29500 open" in c for c in k.changes)


def test_a_conclusion_level_that_drops_is_a_regression_one_that_rises_a_change() -> None:
    a, b = _pair()
    _item(b, "kill-worker")["conclusion"]["level"] = "valid-progress"
    d = diff_reports(a, b)
    assert d.regressions == ["kill-worker: conclusion level consistent-results -> valid-progress"]
    assert d.items[0].level == ("consistent-results", "valid-progress")
    assert d.to_json()["items"][0]["level"] == ["consistent-results", "valid-progress"]
    rise = diff_reports(b, a)
    assert not rise.regressed
    assert "conclusion level valid-progress -> consistent-results" in rise.items[0].changes
    _item(b, "kill-worker")["conclusion"]["level"] = None
    assert diff_reports(a, b).regressions == [
        "kill-worker: conclusion level consistent-results -> none proven"
    ]


def test_a_failing_layer_that_appears_or_moves_is_a_regression() -> None:
    a, b = _pair()
    _item(b, "node-loss")["layer"]["layer"] = "checkpoint"
    assert diff_reports(a, b).regressions == ["node-loss: failing layer scheduling -> checkpoint"]
    a, b = _pair()
    _item(b, "kill-worker")["layer"] = _item(a, "node-loss")["layer"]
    assert diff_reports(a, b).regressions == ["kill-worker: failing layer none -> scheduling"]
    gone = diff_reports(b, a)
    assert not gone.regressed
    assert "failing layer scheduling -> none" in gone.items[0].changes


def test_a_controls_level_or_layer_change_is_said_not_gated() -> None:
    a, b = _pair()
    ctl = _item(b, "ctl-optimizer-lost")
    ctl["layer"] = {"layer": "framework", "why": "diverged"}
    ctl["conclusion"]["level"] = "running-again"
    d = diff_reports(a, b)
    assert not d.regressed
    changes = next(i for i in d.items if i.id == "ctl-optimizer-lost").changes
    assert "failing layer none -> framework" in changes
    assert "conclusion level consistent-results -> running-again" in changes


def test_reports_without_levels_compare_no_levels_and_not_determined_is_the_worst_class() -> None:
    a, b = _pair()
    for rep in (a, b):
        for s in rep["scenarios"]:
            s.pop("conclusion", None)
            s.pop("layer", None)
    assert not diff_reports(a, b).regressed
    _item(b, "kill-worker")["recovery_class"] = "not-determined"
    assert diff_reports(a, b).regressions == [
        "kill-worker: recovery class automatic -> not-determined"
    ]


def test_load_report_refuses_what_is_not_a_report(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match="no such"):
        load_report(tmp_path / "nope")
    with pytest.raises(RunDirError, match=r"no report\.json"):
        load_report(tmp_path)
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(RunDirError, match="not a faultdrill report"):
        load_report(tmp_path / "x.json")


def test_cli_exit_status_and_junit(tmp_path: Path) -> None:
    a, b = _pair()
    _item(b, "kill-worker")["verdict"] = "fail"
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    junit = tmp_path / "j.xml"
    out = tmp_path / "d.json"
    argv = ["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    assert main([*argv, "--junit", str(junit), "--json", str(out)]) == 1
    assert json.loads(out.read_text())["regressed"] is True
    root = ET.parse(junit).getroot()
    assert root.get("failures") == "1"
    assert main(["diff", str(tmp_path / "a.json"), str(tmp_path / "a.json")]) == 0
    assert main(["diff", str(tmp_path / "a.json"), str(tmp_path / "missing")]) == 2


# --- real runs --------------------------------------------------------------------------------


def _known_bad_from_recording(demo: RecordedDemo, dest: Path) -> Path:
    """The recorded run with its kill-worker item replaced by the known-bad workload's
    recording under the same fault, re-judged by the checks as that scenario."""
    from faultdrill.judge.evaluate import evaluate_run
    from faultdrill.report import write_reports

    skip = shutil.ignore_patterns("ckpt", "tmp")
    shutil.copytree(demo.run_dir, dest, ignore=skip)
    shutil.rmtree(dest / "scenarios" / "kill-worker")
    shutil.copytree(
        demo.run_dir / "controls" / "ctl-optimizer-lost",
        dest / "scenarios" / "kill-worker",
        ignore=skip,
    )
    wl = json.loads((dest / "scenarios" / "kill-worker" / "workload.json").read_text())
    assert wl["bad_mode"] == "optimizer-not-restored"  # the evidence says what ran
    write_reports(evaluate_run(dest))
    return dest


@pytest.mark.drill
def test_healthy_against_known_bad_reports_the_regression(recorded_demo: RecordedDemo) -> None:
    assert recorded_demo.rc == 0, recorded_demo.stdout + recorded_demo.stderr
    healthy = recorded_demo.run_dir
    bad = _known_bad_from_recording(recorded_demo, recorded_demo.base / "known-bad")
    junit = recorded_demo.base / "diff-junit.xml"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "faultdrill.cli",
            "diff",
            str(healthy),
            str(bad),
            "--junit",
            f"{junit}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "REGRESSION verdict pass -> fail" in out
    # it continued from valid progress by itself: the class stays, the verdict and the
    # results finding regress
    assert "REGRESSION recovery class" not in out
    assert "new finding fail results.loss-matches-baseline" in out
    failures = [
        c for c in ET.parse(junit).getroot().iter("testcase") if c.find("failure") is not None
    ]
    assert [c.get("name") for c in failures] == ["kill-worker"]
    # the other way round is an improvement, and a run against its own bundle is no change
    assert main(["diff", str(bad), str(healthy)]) == 0
    assert main(["diff", str(healthy), str(recorded_demo.printed("bundle"))]) == 0


@pytest.mark.drill
@pytest.mark.slow
def test_known_bad_workload_recorded_from_scratch_regresses(
    recorded_demo: RecordedDemo, tmp_path: Path
) -> None:
    raw = demo_raw()
    raw["task"]["id"] = f"bad-{uuid.uuid4().hex[:8]}"
    raw["task"]["workload"]["bad_mode"] = "optimizer-not-restored"
    raw["controls"] = []
    plan = tmp_path / "bad.yaml"
    plan.write_text(yaml.safe_dump(raw, sort_keys=False))
    run = tmp_path / "bad-run"
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "faultdrill.cli",
                "run",
                str(plan),
                "--out",
                f"{run}",
                "--quiet",
                "--no-controls",
            ],
            env=recorded_demo.env,
            capture_output=True,
            text=True,
            timeout=400,
        )
    finally:
        kill_task(raw["task"]["id"])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert main(["diff", str(recorded_demo.run_dir), str(run)]) == 1
