"""Slurm, for real: every fault family drilled on the embedded Slurm cluster by one
``faultdrill run`` of the example plan (``examples/slurm.yaml``: kill-worker, node-down with
requeue, node-drain) plus a link fault, a storage outage and a damaged checkpoint, a data
outage (the samples read from files). Each test asserts the evidence and that the four
questions were answered from what Slurm decided (``platform`` events with ``source:
slurmctld``).

One run of eight items (baseline, seven scenarios), about 2.5 minutes on 2 cores.
Two families run elsewhere, to keep the default run short without losing them:

* the slurmctld restart runs in the 80-step plan of ``tests/new_kinds_slurm.py`` (the
  ``slurm_straggler_storage`` session run): in this plan's 20-step job the 8 s outage
  outlasted the job, whose end slurmstepd then reported only ~60 s after slurmctld was
  back (its retry interval): 75 s of the run spent waiting for COMPLETED, and the restart
  never happened under a running job;
* the example's harness controls (``controls: {harness: all}``) are caught in the slow set
  (``test_slurm_slow.py``); the default run catches all three on the local platform
  (``test_joblog_drill.py``).

The known-bad split brain, the manual restart of a held job and the other Slurm drills are
in ``test_slurm_slow.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.slurmkit import (
    events,
    example_raw,
    explain,
    failing,
    injected_at,
    needs_slurm,
    run_plan_cli,
    scenario,
    shrunk,
    slurm,
)

#: The run holds eight items (baseline, seven scenarios): up to ~7 min on 2 cores shared
#: with other drills, near the default 600 s.
pytestmark = [pytest.mark.drill, pytest.mark.root, needs_slurm, pytest.mark.timeout(1200)]

_EXTRA = {
    1: [
        {
            "id": "link-loss",
            "title": "n2's link drops 10% of its packets for 3 s (Slurm's traffic too)",
            "fault": {"kind": "link-loss", "target": {"node": "n2"}, "percent": 10, "for_s": 3},
            "trigger": {"at_step": 8},
            "expected": {"resume": "no-restart"},
        }
    ],
    3: [
        {
            "id": "storage-read-only",
            "title": "the checkpoint directory is read-only across the step-10 save",
            "fault": {"kind": "storage-outage", "mode": "read-only", "for_s": 1},
            "trigger": {"at_step": 9},
            "expected": {"resume": "no-restart"},
        },
        {
            "id": "data-error",
            "title": "every read of the job's data fails (EIO) for 3 s",
            "fault": {"kind": "data-outage", "mode": "error", "for_s": 3},
            "trigger": {"at_step": 7},
            "expected": {"resume": "no-restart"},
        },
        {
            "id": "checkpoint-bit-flip",
            "title": "bits flipped in the step-10 checkpoint, then a worker dies",
            "fault": {"kind": "corrupt-checkpoint", "damage": "flip-bytes"},
            "trigger": {"after_checkpoint": 2},
            "expected": {"resume": "previous-valid"},
        },
    ],
}


def default_plan() -> dict[str, Any]:
    raw = example_raw()
    # the samples are read from files (same ids and numbers), so a data outage can hit them
    raw["task"]["workload"]["data_files"] = True
    raw["rounds"][0]["scenarios"] += _EXTRA[1]
    raw["rounds"].append({"round": 3, "name": "storage and data", "scenarios": _EXTRA[3]})
    # the harness controls are drilled in the slow set (test_slurm_slow.py; see the module)
    raw["controls"] = []
    return shrunk(raw)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    yield run_plan_cli(default_plan(), tmp_path_factory.mktemp("slurm"), timeout=1100)


def passed(s: dict[str, Any]) -> None:
    assert s["verdict"] == "pass", explain(s)
    assert s["recovery_class"] == "automatic", explain(s)


def one_allocation(report: dict[str, Any], sid: str) -> None:
    """Slurm kept the job where it was: one allocation, never requeued."""
    allocs = [(a["incarnation"], a["nodes"]) for a in slurm(report, sid, "allocation")]
    assert allocs == [(0, ["n1", "n2"])], allocs
    assert not slurm(report, sid, "job_requeued")
    states = [e["state"] for e in slurm(report, sid, "sched_job_state")]
    assert states[-1] == "COMPLETED", states


def test_the_example_plan_passes_and_records_slurms_recovery_options(
    report: dict[str, Any],
) -> None:
    assert report["baseline"]["verdict"] == "pass"
    options = report["baseline"]["dossier"]["resources"]["platform_options"]
    assert options["sbatch --requeue"] is True and options["srun --kill-on-bad-exit"] == 1
    assert options["torchrun --max-restarts"] == 3
    assert (options["SlurmdTimeout"], options["cred_expire"], options["ReturnToService"]) == (
        5,
        5,
        2,
    )
    assert report["baseline"]["dossier"]["resources"]["slurm"]["embedded"] is True


def test_kill_worker_is_torchruns_business_slurm_keeps_the_job(report: dict[str, Any]) -> None:
    s = scenario(report, "kill-worker")
    passed(s)
    q = s["questions"]
    assert q["worker_lost_by"].startswith(("worker_failed", "worker_group_failed")), q
    assert q["resumed_from"]["step"] == 5 and q["resumed_from"]["verified"] is True
    one_allocation(report, "kill-worker")
    assert s["times"]["detect_s"] < 5, s["times"]
    # the new generation is the same Slurm incarnation, a new torchrun round
    starts = [e for e in events(report, "kill-worker", "probe-rank0") if e["kind"] == "run_start"]
    assert [e["sched_incarnation"] for e in starts] == [0, 0]
    assert len({e["master"] for e in starts}) == 2


def test_node_down_slurm_declares_it_down_requeues_and_the_job_resumes(
    report: dict[str, Any],
) -> None:
    s = scenario(report, "node-down")
    passed(s)
    t0 = injected_at(report, "node-down")
    q = s["questions"]
    assert q["worker_lost_by"].startswith("node_lost on n2 (slurmctld"), q  # and its reason
    down = [e for e in slurm(report, "node-down", "node_state") if e["state"] == "down"]
    assert down[0]["node"] == "n2" and down[0]["reason"] == "Not responding", down
    # DOWN ~3 SlurmdTimeouts after the node went silent; loose bounds on a busy machine
    assert 5 < down[0]["mono"] - t0 < 60
    assert 5 < s["times"]["detect_s"] < 60
    (req,) = slurm(report, "node-down", "job_requeued")
    assert req["restart_count"] == 1 and req["previous_nodes"] == ["n1", "n2"]
    allocs = [(a["incarnation"], a["nodes"]) for a in slurm(report, "node-down", "allocation")]
    assert allocs == [(0, ["n1", "n2"]), (1, ["n1", "n3"])]
    assert q["resumed_from"]["step"] in (5, 10) and q["resumed_from"]["verified"] is True
    starts = [e for e in events(report, "node-down", "probe-rank1") if e["kind"] == "run_start"]
    assert [(e["sched_incarnation"], e["node"]) for e in starts] == [(0, "n2"), (1, "n3")]
    assert s["placement"]["resumed_on"] == ["n1", "n3"]
    # the old replicas were gone before the new ones stepped; node-down's undo brought n2
    # back (link up, slurmd started again)
    assert (
        q["old_replica_stopped_at"]["since_injection_s"]
        < q["first_step_after_at"]["since_injection_s"]
    )
    restarted = [e for e in events(report, "node-down") if e["kind"] == "daemon_started"]
    assert [e["daemon"] for e in restarted].count("slurmd-n2") == 2


def test_node_drain_is_slurms_own_drain_and_the_job_carries_on(report: dict[str, Any]) -> None:
    s = scenario(report, "node-drain")
    passed(s)
    inj = next(e for e in events(report, "node-drain", "fault") if e["kind"] == "injected")
    assert inj["command"].startswith("scontrol update NodeName=n2 State=DRAIN Reason=")
    n2 = [e for e in slurm(report, "node-drain", "node_state") if e["node"] == "n2"]
    states = [e["state"] for e in n2]
    assert "draining" in states and states.index("draining") < states.index("drained"), states
    assert n2[states.index("draining")]["reason"] == inj["reason"]
    assert s["questions"]["note"] == "no replica was lost: the job rode the fault out"
    one_allocation(report, "node-drain")


def test_a_link_fault_on_a_node_is_ridden_out(report: dict[str, Any]) -> None:
    s = scenario(report, "link-loss")
    passed(s)
    assert s["questions"]["note"] == "no replica was lost: the job rode the fault out"
    assert not slurm(report, "link-loss", "node_lost")
    one_allocation(report, "link-loss")
    assert s["network"], "the network track saw the fault window"


def test_a_slurmctld_restart_does_not_touch_the_running_job(
    slurm_straggler_storage: dict[str, Any],
) -> None:
    """slurmctld stopped for 8 s at step 6 of 80 and started again with its saved state,
    the job still training when it is back (``tests/new_kinds_slurm.py``)."""
    report = slurm_straggler_storage
    s = scenario(report, "slurmctld-restart")
    passed(s)
    evs = events(report, "slurmctld-restart")
    kinds = [(e["kind"], e.get("daemon")) for e in evs]
    stopped = kinds.index(("daemon_stopped", "slurmctld"))
    assert ("daemon_started", "slurmctld") in kinds[stopped:], kinds
    unreachable = [e for e in evs if e["kind"] == "controller_unreachable"]
    back = [e for e in evs if e["kind"] == "controller_reachable"]
    assert unreachable and back and unreachable[0]["mono"] < back[0]["mono"]
    # the restart happened under a running job: it saved checkpoints after slurmctld was back
    probe = events(report, "slurmctld-restart", "probe-rank0")
    assert any(e["kind"] == "ckpt_save" and e["mono"] > back[0]["mono"] for e in probe), probe
    one_allocation(report, "slurmctld-restart")
    assert s["questions"]["note"] == "no replica was lost: the job rode the fault out"


def test_storage_read_only_fails_one_save_and_the_job_goes_on(report: dict[str, Any]) -> None:
    s = scenario(report, "storage-read-only")
    passed(s)
    probe = events(report, "storage-read-only", "probe-rank0")
    failed = [e for e in probe if e["kind"] == "ckpt_save_failed"]
    assert failed and failed[0]["step"] == 10, failed
    one_allocation(report, "storage-read-only")


def test_a_damaged_checkpoint_is_refused_after_the_restart(report: dict[str, Any]) -> None:
    s = scenario(report, "checkpoint-bit-flip")
    passed(s)
    q = s["questions"]
    assert q["resumed_from"]["step"] == 5, q
    loads = [
        e for e in events(report, "checkpoint-bit-flip", "probe-rank0") if e["kind"] == "ckpt_load"
    ]
    assert loads[-1]["rejected"] and loads[-1]["rejected"][0]["id"].endswith("10"), loads
    one_allocation(report, "checkpoint-bit-flip")


def test_a_data_outage_is_retried_and_no_sample_is_lost(report: dict[str, Any]) -> None:
    s = scenario(report, "data-error")
    assert s["verdict"] == "pass", explain(s)
    found = {
        f["check"]: f for ev in [*s["evidence"].values(), s["expectation"]] for f in ev["findings"]
    }
    assert "retried its reads" in found["progress.data-outage"]["message"]
    assert found["progress.sample-ledger"]["verdict"] == "pass"


def test_nothing_is_left_behind(report: dict[str, Any]) -> None:
    """Every item's ledger is fully undone: no daemon, namespace, rule or job remains."""
    from tests.test_slurm_embedded import leftovers

    run = Path(report["_run_dir"])
    ledgers = sorted(run.glob("**/ledger.jsonl"))
    assert len(ledgers) == 8  # baseline, seven scenarios
    for ledger in ledgers:
        assert leftovers(ledger) == [], ledger
    for s in report["scenarios"]:
        assert "resources.faults-reverted" not in failing(s), explain(s)
