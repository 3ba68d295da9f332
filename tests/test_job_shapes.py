"""Verdicts on jobs shaped like real ones (tests/jobs/shapes_train.py, written independently
of the reference workload): DataLoader worker processes (fork, spawn; persistent or not),
helper subprocesses, a background checkpoint writer, gradient accumulation and a loss
logged every few steps. Each healthy shape must pass its fault-free baseline and a
kill-worker drill; the matching bad shapes must still be caught: a detached child of the
killed worker that keeps writing steps (split brain) and children that outlive their
replica past the grace.

The default run drills two combined shapes, each plan with a baseline, a kill of rank 1
and one known-bad control; the slow set drills every shape on its own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faultdrill.admit import parse_plan
from faultdrill.engine.run import run_plan
from tests.drillkit import assert_store_is_the_json_lines, finding
from tests.test_netns_kit import kill_task, needs_netns, netns_raw

pytestmark = [pytest.mark.drill, pytest.mark.root, needs_netns]

JOB = Path(__file__).resolve().parent / "jobs" / "shapes_train.py"
KILL_RANK_1 = {"kind": "kill-worker", "target": {"rank": 1}}


def shapes_plan(flags: list[str], controls: list[dict[str, Any]]) -> dict[str, Any]:
    """The shapes job on the namespace cluster (2 nodes x 1 process), 24 steps, a
    checkpoint every 8, rank 1 killed at step 12; ``controls``: known-bad shapes."""
    raw = netns_raw()
    raw["task"]["entrypoint"] = {
        "script": str(JOB),
        "args": [
            "--ckpt-dir={ckpt_dir}",
            "--steps=24",
            "--ckpt-every=8",
            "--step-sleep=0.05",
            *flags,
        ],
    }
    raw["task"]["workload"] = {}
    # spawn workers import torch each epoch: generous limits, so a busy machine is not a stall
    raw["stop"] = {"max_wall_s": 600, "max_no_progress_s": 240}
    raw["rounds"] = [
        {
            "round": 1,
            "name": "worker exit",
            "scenarios": [{"id": "kill-rank-1", "fault": KILL_RANK_1, "trigger": {"at_step": 12}}],
        }
    ]
    raw["controls"] = controls
    return raw


def control(cid: str, bad: str, check: str) -> dict[str, Any]:
    return {
        "id": cid,
        "env": {"SHAPES_BAD": bad},
        "fault": KILL_RANK_1,
        "trigger": {"at_step": 12},
        "expected_check": check,
    }


def run(raw: dict[str, Any], base: Path) -> dict[str, Any]:
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(base / "state")
    try:
        run_plan(parse_plan(raw, source="shapes plan"), base / "run")
        report: dict[str, Any] = json.loads((base / "run" / "report.json").read_text())
        # children's steps and lineage: the step store gives what the JSON lines give
        assert assert_store_is_the_json_lines(base / "run") == 1 + len(report["scenarios"])
        return report
    finally:
        kill_task(raw["task"]["id"])
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old


def assert_all_pass(report: dict[str, Any]) -> None:
    base = report["baseline"]
    assert base["verdict"] == "pass", json.dumps(base["evidence"], indent=1)[:3000]
    for s in report["scenarios"]:
        if not s["control"]:
            assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:3000]
            assert s["recovery_class"] == "automatic"


def controls(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in report["scenarios"] if s["control"]]


@pytest.fixture(scope="module")
def loader_fork_helpers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """DataLoader workers (fork, persistent), helper processes, gradient accumulation; the
    control leaves a detached child of the killed rank writing steps."""
    flags = ["--loader-workers=2", "--loader-start=fork", "--helper", "--grad-accum=2"]
    ctl = control("ctl-detached-stepper", "detached-stepper", "resources.no-stale-replica")
    yield run(shapes_plan(flags, [ctl]), tmp_path_factory.mktemp("shapes-a"))


@pytest.fixture(scope="module")
def loader_spawn_async(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """DataLoader workers (spawn, started again every epoch), rank 0 checkpointing from a
    background thread, the loss logged every 3 steps; the control leaves two children of
    the killed rank alive past the grace."""
    flags = [
        "--loader-workers=2",
        "--loader-start=spawn",
        "--no-persistent",
        "--async-ckpt",
        "--log-every=3",
    ]
    ctl = control("ctl-leaky-children", "leaky-children", "resources.children-released")
    yield run(shapes_plan(flags, [ctl]), tmp_path_factory.mktemp("shapes-b"))


def test_dataloader_workers_and_helpers_pass_baseline_and_kill_drill(
    loader_fork_helpers: dict[str, Any],
) -> None:
    report = loader_fork_helpers
    assert_all_pass(report)
    [s] = [s for s in report["scenarios"] if not s["control"]]
    dup = finding(s, "resources.no-duplicate-rank")
    assert dup["verdict"] == "pass"
    kids = finding(s, "resources.children-released")
    assert kids["verdict"] == "pass" and "grace" in kids["message"]


def test_a_detached_child_writing_steps_after_the_kill_is_caught(
    loader_fork_helpers: dict[str, Any],
) -> None:
    [c] = controls(loader_fork_helpers)
    assert c["caught"] is True, json.dumps(c, indent=1)[:3000]
    stale = finding(c, "resources.no-stale-replica")
    assert stale["verdict"] == "fail" and "split brain" in stale["message"]


@pytest.mark.slow  # ~2 min; the default run keeps the fork/helpers drill
def test_spawned_workers_async_checkpoints_and_sparse_losses_pass(
    loader_spawn_async: dict[str, Any],
) -> None:
    report = loader_spawn_async
    assert_all_pass(report)
    [s] = [s for s in report["scenarios"] if not s["control"]]
    loss = finding(s, "results.loss-matches-baseline")
    assert "reported no loss" in loss["message"], loss


@pytest.mark.slow  # ~2 min; the default run keeps the fork/helpers drill
def test_children_kept_alive_past_the_grace_are_caught(
    loader_spawn_async: dict[str, Any],
) -> None:
    [c] = controls(loader_spawn_async)
    assert c["caught"] is True, json.dumps(c, indent=1)[:3000]
    kids = finding(c, "resources.children-released")
    assert kids["verdict"] == "fail" and "past the 10 s grace" in kids["message"]


SWEEP = {
    "fork-persistent": ["--loader-workers=2", "--loader-start=fork"],
    "fork-per-epoch": ["--loader-workers=2", "--loader-start=fork", "--no-persistent"],
    "spawn-persistent": ["--loader-workers=2", "--loader-start=spawn"],
    "spawn-per-epoch": ["--loader-workers=2", "--loader-start=spawn", "--no-persistent"],
    "forkserver": ["--loader-workers=1", "--loader-start=forkserver"],
    "helper": ["--helper"],
    "async-ckpt": ["--async-ckpt"],
    "grad-accum": ["--grad-accum=3"],
    "sparse-loss": ["--log-every=4"],
}


@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(SWEEP))
def test_each_healthy_shape_passes_alone(shape: str, tmp_path: Path) -> None:
    assert_all_pass(run(shapes_plan(SWEEP[shape], []), tmp_path))
