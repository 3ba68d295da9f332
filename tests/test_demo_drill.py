"""The demo's round 1 worker kill and its known-bad workloads, for real.

One run of the demo plan restricted to the worker-kill scenario and the six workload bugs
of the core loop (real torchrun, gloo, 2 nodes) is shared by the assertions below: the
healthy recovery passes on all three kinds of evidence, and each known-bad workload is
caught by exactly the check its bug violates. The other rounds have their own drill tests.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from faultdrill.cli import main
from tests.drillkit import item
from tests.recorded_run import RecordedDemo, demo_pids

pytestmark = pytest.mark.drill


@pytest.fixture(scope="module")
def demo(recorded_demo: RecordedDemo) -> tuple[Path, dict[str, Any]]:
    """The session's recorded demo run (see tests/recorded_run.py): kill-worker + controls."""
    assert recorded_demo.rc == 0, recorded_demo.stdout + recorded_demo.stderr
    run_dir = recorded_demo.run_dir
    return run_dir, json.loads((run_dir / "report.json").read_text())


def failing_checks(s: dict[str, Any]) -> set[str]:
    return {
        f["check"]
        for ev in s["evidence"].values()
        for f in ev["findings"]
        if f["verdict"] == "fail"
    }


def test_baseline_passes_its_own_checks(demo: tuple[Path, dict[str, Any]]) -> None:
    _, report = demo
    base = report["baseline"]
    assert base["verdict"] == "pass"
    assert base["steps"] == 25 and base["world_size"] == 2
    assert base["dossier"]["resources"]["timeouts"]["rdzv_join_s"] == 30


def test_kill_worker_recovers_from_the_last_valid_checkpoint(
    demo: tuple[Path, dict[str, Any]],
) -> None:
    _, report = demo
    s = item(report, "kill-worker")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)
    assert s["recovery_class"] == "automatic"
    assert {k: v["verdict"] for k, v in s["evidence"].items()} == {
        "progress": "pass",
        "resources": "pass",
        "results": "pass",
    }
    q = s["questions"]
    assert q["resumed_from"]["checkpoint"] == "step-000010"
    assert q["resumed_from"]["step"] == 10 and q["resumed_from"]["data_position"] == 80
    assert q["resumed_from"]["verified"] is True
    t = s["times"]
    # loose bounds: detection is the agent's monitor interval, recovery includes imports
    assert 0 <= t["detect_s"] < 5 and 0 < t["recover_s"] < 60
    assert t["recomputed_steps"] >= 5
    assert (
        q["worker_lost_at"]["since_injection_s"] <= q["new_replicas_ready_at"]["since_injection_s"]
    )
    assert q["old_replica_stopped_at"] is not None


@pytest.mark.parametrize(
    ("control", "check"),
    [
        ("ctl-resume-ignored", "progress.no-restart-from-zero"),
        ("ctl-data-replayed", "progress.sample-ledger"),
        ("ctl-skip-ahead", "progress.sample-ledger"),
        ("ctl-optimizer-lost", "results.loss-matches-baseline"),
        ("ctl-load-unverified", "progress.checkpoint-verified"),
        ("ctl-stale-replica", "resources.no-stale-replica"),
    ],
)
def test_each_known_bad_mode_is_caught_by_its_check(
    demo: tuple[Path, dict[str, Any]], control: str, check: str
) -> None:
    _, report = demo
    s = item(report, control)
    assert s["control"] is True and s["expected_check"] == check
    assert s["caught"] is True, json.dumps(s["evidence"], indent=1)
    assert check in failing_checks(s)
    assert s["verdict"] == "fail"


def test_stale_replica_fails_resources_not_only_progress(
    demo: tuple[Path, dict[str, Any]],
) -> None:
    _, report = demo
    s = item(report, "ctl-stale-replica")
    assert s["evidence"]["resources"]["verdict"] == "fail"
    assert s["recovery_class"] == "manual-confirmation"


def test_offline_check_reproduces_the_verdicts(
    demo: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir, report = demo
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("ckpt", "tmp"))
    for name in ("report.json", "report.md", "report.html"):
        (copy / name).unlink()
    before = {s["id"]: (s["verdict"], s.get("caught")) for s in report["scenarios"]}
    assert main(["check", str(copy)]) == 0
    after = json.loads((copy / "report.json").read_text())
    assert {s["id"]: (s["verdict"], s.get("caught")) for s in after["scenarios"]} == before
    assert "overall OK" in capsys.readouterr().out


def test_nothing_left_behind(
    demo: tuple[Path, dict[str, Any]], recorded_demo: RecordedDemo
) -> None:
    run_dir, report = demo
    assert report["summary"]["ok"]
    assert demo_pids(run_dir) == []
    active = Path(recorded_demo.env["FAULTDRILL_STATE_DIR"]) / "active"
    assert not active.exists() or list(active.iterdir()) == []
    md = (run_dir / "report.md").read_text()
    assert "The four questions" in md and "Negative controls" in md


def test_process_ends_are_exit_events_and_the_steps_are_stored(
    demo: tuple[Path, dict[str, Any]],
) -> None:
    """The killed worker's end is its exit event (the kernel's stamp where the harness may
    listen, with the signal), after the injection's stamp (when the kill was in effect);
    every replica and agent that ended has its exit time; the step store covers the probe
    files; and each phase of the harness is on the timeline."""
    from faultdrill.timeline import Timeline
    from faultdrill.timeline.store import read_store

    run_dir, _report = demo
    events = run_dir / "scenarios" / "kill-worker" / "events"
    tl = Timeline.load(events)
    (injected,) = tl.of("fault", "injected")
    assert injected.get("stamped") == "first change applied"
    victim = next(p for p in tl.procs if p.pid == injected["pid"])
    assert victim.gone_by in ("kernel", "pidfd") and victim.gone_mono is not None
    # The stamp is taken once kill(2) returned; the kernel may end the process (and stamp
    # its exit) inside that call, a few ms before. Never long before: that would be a
    # stamp from another process's end.
    assert injected.mono - 0.25 <= victim.gone_mono
    (exit_event,) = [e for e in tl.of("sampler", "proc_exit") if e["pid"] == victim.pid]
    if exit_event["clock"] == "kernel":
        assert exit_event["signal"] == 9
    ended = [p for p in tl.procs if p.role in ("worker", "agent") and p.gone_mono is not None]
    assert ended and all(p.gone_by in ("kernel", "pidfd") for p in ended)
    stored = read_store(events)
    assert stored is not None and stored.columns[0].size == len(tl.steps)
    phases = {e.get("phase") for e in tl.of("harness", "phase")}
    assert phases == {"bring-up", "job", "settle", "sampling", "teardown", "checks", "report"}
