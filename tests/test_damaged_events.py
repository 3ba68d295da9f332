"""Malformed event lines in a recorded run (issue 11): ``faultdrill check`` never shows a
traceback; a torn last line (what a killed writer leaves) is expected and said; any other
line that is not a valid event makes the evidence its file feeds retest, naming the file
and the count, and the recovery class "not determined".

One small drill is recorded (baseline and the worker kill, real torchrun, no namespaces);
each case of :mod:`tests.event_damage` damages a copy of it and judges it again.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultdrill.cli import main
from tests.drillkit import cli_env, demo_raw, kill_task
from tests.event_damage import DAMAGES, Damage

pytestmark = pytest.mark.drill


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("damage")
    raw = demo_raw()
    task_id = f"damage-{uuid.uuid4().hex[:8]}"  # ours alone: the cleanup kills by task id
    raw["task"]["id"] = task_id
    raw["resources"].update(isolation="none", spares=0)
    raw["rounds"] = [{"round": 1, "scenarios": [raw["rounds"][0]["scenarios"][0]]}]
    raw["controls"] = []
    plan = base / "plan.yaml"
    plan.write_text(yaml.safe_dump(raw, sort_keys=False))
    run = base / "run"
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "faultdrill.cli",
                "run",
                str(plan),
                "--out",
                str(run),
                "--quiet",
                "--no-controls",
            ],
            env=cli_env(base / "state"),
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        yield run
    finally:
        kill_task(task_id)


def damaged_copy(run: Path, tmp_path: Path, damage: Damage) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("ckpt", "logs", "tmp"))
    damage.apply(copy / damage.item / "events" / damage.file)
    return copy


def judged(report: dict[str, Any], damage: Damage) -> dict[str, Any]:
    if damage.item == "baseline":
        return dict(report["baseline"])
    return dict(next(s for s in report["scenarios"] if s["id"] == "kill-worker"))


def findings(item: dict[str, Any], check: str) -> list[dict[str, Any]]:
    evidence = [*(item.get("evidence") or {}).values()]
    if "expectation" in item:
        evidence.append(item["expectation"])
    return [f for ev in evidence for f in ev["findings"] if f["check"] == check]


def test_the_recording_passes_undamaged(recorded: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(recorded, copy, ignore=shutil.ignore_patterns("ckpt", "logs", "tmp"))
    assert main(["check", str(copy)]) == 0


@pytest.mark.parametrize("damage", DAMAGES, ids=[d.name for d in DAMAGES])
def test_damaged_events_are_retest_naming_the_file(
    recorded: Path, tmp_path: Path, damage: Damage, capsys: pytest.CaptureFixture[str]
) -> None:
    run = damaged_copy(recorded, tmp_path, damage)
    rc = main(["check", str(run)])  # a traceback would fail the test here
    report = json.loads((run / "report.json").read_text())
    item = judged(report, damage)
    integrity = findings(item, "timeline.integrity")
    if damage.torn_only:
        assert rc == 0 and item["verdict"] == "pass"
        assert [f["verdict"] for f in integrity] == ["pass"]
        assert "1 torn last line(s) skipped" in integrity[0]["message"]
        return
    assert rc == 1, capsys.readouterr()
    assert item["verdict"] == "retest"
    named = [f for f in integrity if f["verdict"] == "retest"]
    assert named, item
    assert all(f"of events/{damage.file} are not valid events" in f["message"] for f in named)
    assert all(f["data"]["file"] == f"events/{damage.file}" for f in named)
    assert named[0]["data"]["lines"] >= 1
    scenario = next(s for s in report["scenarios"] if s["id"] == "kill-worker")
    assert scenario["verdict"] == "retest"  # never pass, never a failure built on damage
    if not damage.file.startswith("net"):  # network samples feed no recovery evidence
        assert scenario["recovery_class"] == "not-determined"


def test_check_on_damaged_events_shows_no_traceback(recorded: Path, tmp_path: Path) -> None:
    damage = next(d for d in DAMAGES if d.name == "deeply-nested-line")
    run = damaged_copy(recorded, tmp_path, damage)
    done = subprocess.run(
        [sys.executable, "-m", "faultdrill.cli", "check", str(run)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "overall NOT OK" in done.stdout
