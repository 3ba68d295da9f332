"""A literal report.json, shaped exactly like ``RunResult.to_json``, for rendering tests.

It holds the cases a renderer must handle without a drill: an automatic recovery that
passed, a manual restart that failed (operator action, retest findings), a control caught
and one missed, a skipped scenario, and keys no renderer knows yet (added by newer parts:
they must show up, not break anything).
"""

from __future__ import annotations

import copy
from typing import Any

from faultdrill.plan import load_plan
from faultdrill.report.model import Report
from tests.drillkit import DEMO

_ENV = {
    "faultdrill": "0.1.0",
    "python": "3.11.7",
    "host": "vm",
    "kernel": "6.1",
    "machine": "x86_64",
    "cpus": 2,
    "root": True,
    "torch": "2.13.0+cpu",
}
_COND = {
    "platform": "local",
    "isolation": "none",
    "nodes": 2,
    "procs_per_node": 1,
    "world_sizes": [2],
    "max_restarts": 3,
    "checkpoint_every_steps": 10,
    "timeouts": {"rdzv_join_s": 30, "gloo_s": 30},
    "sample_hz": 10.0,
    "environment": _ENV,
    "note": "times are single observations under these conditions, not a service level",
}


def _when(rel: float) -> dict[str, Any]:
    return {
        "wall": f"2026-11-30T15:20:{33 + rel:06.3f}+00:00",
        "mono": 1000 + rel,
        "since_injection_s": rel,
    }


def _ev(verdict: str, *checks: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "verdict": verdict,
        "findings": [{"check": c, "verdict": v, "message": m} for c, v, m in checks],
    }


def _item(sid: str, **over: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": sid,
        "round": 1,
        "control": False,
        "title": f"title of {sid}",
        "fault": {
            "kind": "kill-worker",
            "target": "rank 1",
            "spec": {"kind": "kill-worker", "target": {"rank": 1, "node": None}},
        },
        "trigger": "when step 15 is reached",
        "preconditions": ["checkpoint at step 10 published before the fault"],
        "expected": {
            "job": "completes",
            "recovery": "automatic",
            "resume": "latest-valid",
            "state": "resumes from step 10",
        },
        "verdict": "pass",
        "recovery_class": "automatic",
        "recovery_class_why": "the platform recovered the job by itself from valid progress",
        "outcome": "succeeded",
        "operator_actions": [],
        "questions": {
            "worker_lost_at": _when(0.08),
            "worker_lost_by": "worker_failed on n2",
            "old_replica_stopped_at": _when(0.7),
            "old_replica_note": "",
            "new_replicas_ready_at": _when(6.2),
            "first_step_after_at": _when(6.3),
            "resumed_from": {
                "checkpoint": "step-000010",
                "step": 10,
                "data_position": 80,
                "verified": True,
            },
        },
        "times": {"detect_s": 0.08, "recover_s": 6.3, "ready_s": 6.2, "recomputed_steps": 5},
        "conditions": copy.deepcopy(_COND),
        "evidence": {
            "progress": _ev("pass", ("progress.resume-point", "pass", "resumed from step 10")),
            "resources": _ev("pass", ("resources.no-stale-replica", "pass", "none alive")),
            "results": _ev("pass", ("results.loss-matches-baseline", "pass", "bitwise equal")),
        },
        "expectation": _ev("pass", ("expectation.fault-applied", "pass", "injected at step 15")),
    }
    item.update(over)
    return item


def report_of(data: dict[str, Any]) -> Report:
    """``data`` (report.json content, e.g. an edited :func:`synthetic_report`) as the model
    every renderer reads."""
    return Report.from_json(copy.deepcopy(data), source="synthetic report.json")


def synthetic_report() -> dict[str, Any]:
    plan = load_plan(DEMO).model_dump(mode="json")
    # the cases below assume a plain loopback layout without spares, whatever the demo uses
    plan["resources"].update(isolation="none", spares=0)
    failed = _item(
        "node-loss",
        round=2,
        verdict="fail",
        recovery_class="manual-restart",
        recovery_class_why="the job continued only after an operator resubmitted it",
        expected={
            "job": "completes",
            "recovery": "automatic",
            "resume": "latest-valid",
            "state": "",
        },
        operator_actions=[
            {"action": "resubmit", "operator": "chen", "runbook": "resubmit the job unchanged"}
        ],
        times={"detect_s": 31.0, "recover_s": 45.5, "ready_s": 44.0, "recomputed_steps": 9},
        evidence={
            "progress": _ev("retest", ("progress.sample-ledger", "retest", "ledger gap")),
            "resources": _ev(
                "fail", ("resources.no-stale-replica", "fail", "pid 77 of incarnation 0 alive")
            ),
            "results": _ev("pass", ("results.loss-matches-baseline", "pass", "within tolerance")),
        },
        expectation=_ev(
            "fail", ("expectation.recovery-class", "fail", "manual-restart, worse than automatic")
        ),
        future_probe=[{"node": "n1", "rtt_ms": 0.2}, {"node": "n2", "rtt_ms": 48.0}],
        future_flag="rdzv_join_s",
    )
    caught = _item(
        "ctl-optimizer-lost",
        round=0,
        control=True,
        expected=None,
        verdict="fail",
        recovery_class="unrecoverable",
        expected_check="results.loss-matches-baseline",
        caught=True,
        workload_mutation={"bad_mode": "optimizer-not-restored"},
        evidence={
            "progress": _ev("pass", ("progress.resume-point", "pass", "resumed from step 10")),
            "resources": _ev("pass", ("resources.no-stale-replica", "pass", "none alive")),
            "results": _ev(
                "fail", ("results.loss-matches-baseline", "fail", "58 of 80 losses differ")
            ),
        },
    )
    missed = _item(
        "ctl-skip-ahead",
        round=0,
        control=True,
        expected=None,
        verdict="pass",
        expected_check="progress.sample-ledger",
        caught=False,
        workload_mutation={"bad_mode": "skip-ahead"},
    )
    return {
        "faultdrill_version": "0.1.0",
        "task_id": "demo-lm",
        "plan_digest": "sha256:" + "ab" * 32,
        "plan": plan,
        "baseline": {
            "run_id": "baseline",
            "steps": 40,
            "final_model_digest": "94bd174732b4d2d7" * 4,
            "world_size": 2,
            "verdict": "pass",
            "evidence": {
                "progress": _ev("pass"),
                "resources": _ev("pass"),
                "results": _ev("pass"),
                "expectation": _ev("pass"),
            },
            "dossier": {
                "task": {"id": "demo-lm", "config_version": "lm-v1", "code_id": "lm@0.1.0"},
                "resources": {"topology": "2 node(s) x 1 process(es)"},
                "responsibility": plan["responsibility"],
                "observation": {"baseline_window": {"seconds": 14.1}},
                "environment": _ENV,
            },
        },
        "scenarios": [_item("kill-worker"), failed, caught, missed],
        "skipped": [{"id": "link-flap", "kind": "scenario", "reason": "not run: round 2 failed"}],
        "summary": {
            "scenarios": 2,
            "passed": 1,
            "failed": 1,
            "retest": 0,
            "controls": 2,
            "controls_caught": 1,
            "ok": False,
        },
        "future_summary": {"kill-worker": {"lost_s": 6.3, "recomputed_steps": 5}},
    }
