"""A literal report.json, shaped exactly like ``RunResult.to_json``, for rendering tests.

It holds the cases a renderer must handle without a drill: an automatic recovery that
passed (conclusion level consistent results), a manual restart that failed (operator
action, retest findings, a failing layer, a failed job with its error output), a control
caught and one missed, a skipped scenario, what the recoveries depended on and who owns it,
and keys no renderer knows yet (added by newer parts: they must show up, not break
anything).
"""

from __future__ import annotations

import copy
from typing import Any

from faultdrill.admit import load_plan
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


def _level(level: str, verdict: str, why: str, **more: Any) -> dict[str, Any]:
    return {
        "level": level,
        "proven": verdict == "pass",
        "verdict": verdict,
        "why": why,
        "findings": [],
        "events": [],
    } | more


#: The healthy recovery: every level proven.
PROVEN = {
    "level": "consistent-results",
    "levels": [
        _level(
            "running-again",
            "pass",
            "incarnation 1 announced itself ready at +6.20 s on n1, n2",
            events=[
                {
                    "src": "probe",
                    "kind": "run_start",
                    "mono": 1006.2,
                    "since_injection_s": 6.2,
                    "rank": 1,
                    "node": "n2",
                }
            ],
            message_id="level.running-again.ready",
            params={"inc": 1, "at_s": 6.2, "nodes": ["n1", "n2"], "stepped": ""},
        ),
        _level(
            "valid-progress",
            "pass",
            "all 1 progress finding(s) passed",
            findings=["progress.resume-point"],
            message_id="level.category.passed",
            params={"n": 1, "category": "progress"},
        ),
        _level(
            "consistent-results",
            "pass",
            "all 1 results finding(s) passed",
            findings=["results.loss-matches-baseline"],
            message_id="level.category.passed",
            params={"n": 1, "category": "results"},
        ),
    ],
    "note": "",
}

#: The failed one: running again, progress not judged; the layer is scheduling.
RUNNING_ONLY = {
    "level": "running-again",
    "levels": [
        PROVEN["levels"][0],
        _level(
            "valid-progress",
            "retest",
            "progress evidence could not be judged (retest): progress.sample-ledger",
            findings=["progress.sample-ledger"],
            message_id="level.category.retest",
            params={"category": "progress", "checks": ["progress.sample-ledger"]},
        ),
        _level(
            "consistent-results",
            "retest",
            "not proven: valid-progress is not (all 1 results finding(s) passed)",
            findings=["results.loss-matches-baseline"],
        ),
    ],
    "note": "",
}
SCHEDULING = {
    "layer": "scheduling",
    "why": "the platform did not stop or release what the job no longer needed: pid 77 alive",
    "rule": "old-replicas-not-released",
    "events": [],
    "findings": ["resources.no-stale-replica"],
    "also": [],
    "ruled_out": [
        {
            "rule": "network-back-without-progress",
            "layer": "network",
            "points": False,
            "why": "the network track answered all 4 probes after the fault was reverted",
            "events": [],
            "findings": [],
        }
    ],
}
DEPENDENCIES = {
    "spare_nodes": [],
    "rejected_spares": [],
    "restart_budget": {
        "used": 1,
        "max_restarts": 3,
        "incarnations": 3,
        "resubmissions": 1,
        "fewest_left_reported": 2,
        "exhausted": False,
    },
    "operator_actions": [
        {
            "action": "resubmit",
            "operator": "chen",
            "runbook": "resubmit the job unchanged",
            "permission": "to be agreed",
            "steps": ["resubmit the job unchanged"],
            "at_s": 31.5,
            "observed_s": 14.0,
            "observed_by": "from the action to the job's next step",
        }
    ],
    "checkpoint_storage": {
        "used_by_recovery": True,
        "loaded": ["step-000010"],
        "saves": 4,
        "bytes_written": 1601052,
        "largest_checkpoint_bytes": 400263,
        "kept": 3,
        "held_bytes_bound": 1200789,
    },
    "dedicated_network": {"used": None, "isolation": "none", "note": "not observable"},
    "used": ["restart_budget", "operator_actions", "checkpoint_storage", "recovery_runbook"],
    "owners": {
        "restart_budget": "platform",
        "operator_actions": "to be agreed",
        "checkpoint_storage": "enterprise-operations",
        "recovery_runbook": "vendor-support",
    },
}
FAILURE = {
    "command": "/usr/bin/python3 -m faultdrill.workloads.lm --workload-config=w.json",
    "exit_status": 1,
    "signal": None,
    "node": "n2",
    "local_rank": 0,
    "worker_failures": 1,
    "error_tail": ["Traceback (most recent call last):", "RuntimeError: boom"],
    "log": "scenarios/node-loss/logs/agent-n2.log",
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
        "conclusion": copy.deepcopy(PROVEN),
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
        conclusion=copy.deepcopy(RUNNING_ONLY),
        layer=copy.deepcopy(SCHEDULING),
        dependencies=copy.deepcopy(DEPENDENCIES),
        failure=copy.deepcopy(FAILURE),
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
        "recovery_dependencies": _totals(),
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


def _totals() -> dict[str, Any]:
    """The run's dependency totals, as ``judge.dependencies.dependency_totals`` sums them."""
    owners = {
        "spare_nodes": "to be agreed",
        "restart_budget": "platform",
        "operator_actions": "to be agreed",
        "checkpoint_storage": "enterprise-operations",
        "environment_preparation": "to be agreed",
        "dedicated_network": "to be agreed",
        "recovery_runbook": "vendor-support",
    }
    used = {
        "restart_budget": ["kill-worker", "node-loss"],
        "operator_actions": ["node-loss"],
        "checkpoint_storage": ["kill-worker", "node-loss"],
        "recovery_runbook": ["node-loss"],
    }
    by_dependency = {d: {"owner": o, "items": used.get(d, [])} for d, o in owners.items()}
    by_owner: dict[str, list[str]] = {}
    for d, o in owners.items():
        by_owner.setdefault(o, []).append(d)
    return {
        "spare_nodes": {"placements": 0, "items": []},
        "restarts": {"total": 2, "per_item": {"kill-worker": 1, "node-loss": 1}, "max_restarts": 3},
        "operator_actions": {"count": 1, "observed_s_total": 14.0, "items": ["node-loss"]},
        "checkpoint_storage": {"held_bytes_bound": 1200789, "items": ["kill-worker", "node-loss"]},
        "by_dependency": by_dependency,
        "by_owner": by_owner,
        "to_be_agreed": ["operator_actions"],
    }
