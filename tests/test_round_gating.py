"""Round discipline in ``run_plan``: rounds run in order, a later round only if the earlier
ones passed (or the round says continue_on_failure), never after a failed baseline;
controls run regardless. The drills themselves are replaced by recorded verdicts here
(real drills are in the drill tests); what is under test is which items run, in what
order, and what the skipped ones say."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import faultdrill.engine.run as runner
from faultdrill.admit import parse_plan
from faultdrill.checks import Verdict
from faultdrill.plan import Plan
from faultdrill.readings.reference import Reference
from faultdrill.timeline import Timeline
from tests.drillkit import demo_raw

ROUND1 = ["kill-worker", "link-jitter"]
LATER = [
    "node-loss",
    "control-plane-pause",
    "storage-read-only",
    "storage-full",
    "checkpoint-bit-flip",
    "checkpoint-dir-missing",
]


def _run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    plan: Plan,
    failing: set[str],
    controls: bool = False,
) -> tuple[list[str], dict[str, str]]:
    """Run ``plan`` with every drill replaced: items in ``failing`` fail, others pass.
    Returns the items executed, in order, and the skipped ones with their reasons."""
    ran: list[str] = []

    def execute(plan: Plan, kind: str, item: Any, run_dir: Path, report: Any) -> Path:
        ran.append(item.id if item is not None else "baseline")
        return run_dir / ran[-1]

    def evaluate(plan: Plan, kind: str, item: Any, work: Path, *a: Any, **k: Any) -> Any:
        name = item.id if item is not None else "baseline"
        return SimpleNamespace(
            id=name, verdict=Verdict.FAIL if name in failing else Verdict.PASS, timeline=None
        )

    monkeypatch.setattr(runner, "execute_item", execute)
    monkeypatch.setattr(runner, "evaluate_item", evaluate)
    monkeypatch.setattr(runner, "write_dossier", lambda *a, **k: None)
    monkeypatch.setattr(Timeline, "load", staticmethod(lambda *a, **k: None))
    monkeypatch.setattr(Reference, "from_timeline", staticmethod(lambda *a: None))
    monkeypatch.setattr(runner, "write_reports", lambda result: None)
    monkeypatch.setattr(runner, "machine_problems", lambda plan, ids: {})
    monkeypatch.setattr(runner, "host_problem", lambda plan: None)
    run_dir = tmp_path / "run"
    runner.run_plan(plan, run_dir, controls=controls)
    return ran, json.loads((run_dir / "skipped.json").read_text())


def test_every_round_runs_in_order_when_each_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = parse_plan(demo_raw())
    ran, skipped = _run(tmp_path, monkeypatch, plan, set())
    assert ran == ["baseline", *ROUND1, *LATER] and skipped == {}


def test_a_failed_round_stops_the_later_rounds_but_finishes_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = parse_plan(demo_raw())
    ran, skipped = _run(tmp_path, monkeypatch, plan, {"kill-worker"})
    assert ran == ["baseline", *ROUND1]  # link-jitter still runs: same round
    reason = "not run: round 1 did not pass (set continue_on_failure to go on)"
    assert skipped == {sid: reason for sid in LATER}


def test_continue_on_failure_lets_the_next_round_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = demo_raw()
    raw["rounds"][0]["continue_on_failure"] = True
    ran, skipped = _run(tmp_path, monkeypatch, parse_plan(raw), {"kill-worker", "node-loss"})
    assert ran == ["baseline", *ROUND1, "node-loss"]
    assert set(skipped) == set(LATER[1:])
    assert all("round 2 did not pass" in why for why in skipped.values())


def test_a_failed_baseline_runs_no_scenario_but_every_control(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = parse_plan(demo_raw())
    ran, skipped = _run(tmp_path, monkeypatch, plan, {"baseline"}, controls=True)
    assert ran == ["baseline", *(c.id for c in plan.controls)]
    assert skipped == {
        sid: "not run: the baseline did not pass its own checks" for sid in ROUND1 + LATER
    }


@pytest.mark.parametrize(("unobservable", "runs"), [(True, True), (False, False)])
def test_a_baseline_that_retests_only_what_its_platform_cannot_see_lets_the_rounds_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unobservable: bool, runs: bool
) -> None:
    """A real cluster's processes are out of reach: the process-table checks retest for
    every item alike, and the reference does not depend on them. Any other retest blocks."""
    from faultdrill.checks import EvidenceResult, Finding
    from faultdrill.judge.evaluate import ItemResult

    data = {"unobservable": True} if unobservable else {}
    base = ItemResult.__new__(ItemResult)
    base.aborted = None
    base.evidence = {
        "progress": EvidenceResult("progress", [Finding("progress.completed", Verdict.PASS, "")]),
        "resources": EvidenceResult(
            "resources", [Finding("resources.no-stale-replica", Verdict.RETEST, "", data)]
        ),
    }
    assert base.verdict is Verdict.RETEST
    assert runner._only_unobservable(base) is runs


def test_checks_and_report_are_timed_into_every_item_that_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The harness's phases after an item's own sink closed: judging it (``checks``) and
    its equal share of the run's reports (``report``), appended to its phase events."""
    plan = parse_plan(demo_raw())
    ran, _skipped = _run(tmp_path, monkeypatch, plan, {"kill-worker"})
    for item in ran:
        path = tmp_path / "run" / item / "events" / "phases.jsonl"
        phases = [json.loads(line) for line in path.read_text().splitlines()]
        assert [p["phase"] for p in phases] == ["checks", "report"], item
        report = phases[1]
        assert report["items"] == len(ran) and report["seconds"] * len(ran) == pytest.approx(
            report["run_s"], abs=1e-5
        )
