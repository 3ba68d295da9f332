"""The whole demo, as the README runs it: every scenario of the three rounds and every
negative control, then the bundle verified. About 6 minutes on 2 cores, so in the slow set
(`pytest -m slow tests/test_full_demo.py`); the default run drills each part separately."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.drillkit import kill_task

pytestmark = [
    pytest.mark.slow,
    pytest.mark.drill,
    pytest.mark.skipif(os.geteuid() != 0, reason="the full demo needs root"),
]


def test_the_full_demo_passes_every_scenario_and_catches_every_control(tmp_path: Path) -> None:
    env = {**os.environ, "FAULTDRILL_STATE_DIR": str(tmp_path / "state")}
    out = tmp_path / "demo"
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "faultdrill.cli", "demo", "--out", str(out), "--quiet"],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        kill_task("demo-lm")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "report.json").read_text())
    scenarios = [s for s in report["scenarios"] if not s["control"]]
    controls = [s for s in report["scenarios"] if s["control"]]
    assert len(scenarios) == 8 and len(controls) == 10
    assert {s["id"]: s["verdict"] for s in scenarios} == {s["id"]: "pass" for s in scenarios}
    assert all(c["caught"] for c in controls), [c["id"] for c in controls if not c["caught"]]
    assert re.search(r"^wall time: [\d.]+ s \(18 items drilled\)$", proc.stdout, re.M), proc.stdout
    bundle = re.search(r"^bundle: (\S+)", proc.stdout, re.M)
    assert bundle, proc.stdout
    verify = subprocess.run(
        [sys.executable, "-m", "faultdrill.cli", "bundle", "verify", bundle.group(1)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
