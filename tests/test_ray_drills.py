"""Real drills of every fault family on the embedded Ray cluster, asserted on evidence.

One ``faultdrill run`` (:func:`tests.ray_plans.default_raw`): one cluster for the run (a
head of its own with a redis-backed GCS, Ray worker nodes n1 and n2, spare n3), the
reference workload under Ray Train (``TorchTrainer``, 2 workers, 30 steps), a baseline and
up to eight scenarios: a Train worker killed, node n2 down (spare n3 joins), n2 cut off for
longer than the rest of the job (the cut-off worker lives on: split brain at process level),
the GCS killed and restarted, the checkpoint directory read-only across a save, the newest
checkpoint damaged after Ray registered it; and the two newer kinds Ray can be drilled with,
each where the machine can do it: a straggling Train worker (5 % of a core for 5 s) and slow
checkpoint storage (each write 150 ms late across the step-20 save). Each asserts Ray's
decisions answering the four questions and the evidence; the last test asserts nothing of
the run is left.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faultdrill.admit import load_plan
from faultdrill.engine.run import run_plan
from faultdrill.events import Event
from faultdrill.host import procfs
from faultdrill.host.linux import netns_exists
from faultdrill.host.storage import fuse_missing
from faultdrill.host.throttle import cpu_controller_missing
from faultdrill.judge.evaluate import RunResult
from faultdrill.platforms.ray.embedded import MARKER_ENV
from faultdrill.timeline import Timeline
from tests.drillkit import finding, item
from tests.ray_plans import default_raw, needs_ray_cluster
from tests.test_netns_kit import ledger_records, write_plan

pytestmark = [pytest.mark.drill, pytest.mark.root, needs_ray_cluster]

CTL = "ray-train-controller"
Drill = tuple[RunResult, dict[str, Any]]


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Drill]:
    base = tmp_path_factory.mktemp("ray-drills")
    raw = default_raw()
    path = write_plan(base, raw)
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(base / "state")
    try:
        result = run_plan(load_plan(path), base / "run", source=path)
        yield result, json.loads((base / "run" / "report.json").read_text())
    finally:
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old


def timeline(result: RunResult, sid: str) -> Timeline:
    return Timeline.load(result.run_dir / "scenarios" / sid / "events")


def verdicts(s: dict[str, Any]) -> dict[str, str]:
    return {k: v["verdict"] for k, v in s["evidence"].items()}


def since(s: dict[str, Any], question: str) -> float:
    at = s["questions"][question]
    assert at is not None, f"{s['id']}: {question} unanswered: {s['questions']}"
    return float(at["since_injection_s"])


def _placement_events(tl: Timeline, before: float) -> list[Event]:
    """What decided where a group ran, before ``before``: nodes lost, spares placed."""
    kinds = {"node_lost", "spare_placed", "ray_node_exited", "no_spare"}
    return [e for e in tl.of("platform") if e.kind in kinds and e.mono < before]


ALL_PASS = {"progress": "pass", "resources": "pass", "results": "pass"}


def test_baseline_under_ray_train_passes_and_records_ray_settings(drill: Drill) -> None:
    result, report = drill
    base = report["baseline"]
    assert base["verdict"] == "pass"
    res = base["dossier"]["resources"]
    assert res["platform"] == "ray" and res["ray"]["gcs_ft"] == "redis"
    assert res["ray"]["health_check_period_ms"] == 500 and res["timeouts"]["gloo_s"] == 30
    tl = Timeline.load(result.run_dir / "baseline" / "events")
    (cluster,) = tl.of("platform", "ray_cluster")
    assert cluster.get("shared") is True and cluster.get("brought_up_s") is not None
    dossier = json.loads(cluster["dossier"])
    assert dossier["gcs_mode"] == "redis" and dossier["head"] == "head"
    assert dossier["daemon_env"]["RAY_health_check_failure_threshold"] == "3"
    # Ray Train ran the workload: its controller's decisions are on the timeline.
    states = [e.get("state") for e in tl.of("platform", "ray_controller_state")]
    assert states[-1] == "FINISHED" and "RUNNING" in states
    assert len(tl.incarnations) == 1 and tl.incarnations[0].nodes == ["n1", "n2"]


def test_a_killed_train_worker_is_restarted_by_ray_from_the_newest_checkpoint(
    drill: Drill,
) -> None:
    _, report = drill
    s = item(report, "kill-worker")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    assert verdicts(s) == ALL_PASS and s["recovery_class"] == "automatic"
    q = s["questions"]
    assert q["worker_lost_by"].startswith("replica_lost on ") and CTL in q["worker_lost_by"]
    assert 0 <= since(s, "worker_lost_at") < 10
    assert 0 <= since(s, "old_replica_stopped_at") < 15
    assert since(s, "worker_lost_at") < since(s, "new_replicas_ready_at")
    assert q["resumed_from"] == {
        "checkpoint": "step-000010",
        "step": 10,
        "data_position": 80,
        "verified": True,
        "handed_over": "step-000010",
    }
    assert "bitwise" in finding(s, "results.loss-matches-baseline")["message"]
    assert (
        "handed over step-000010, the newest valid one"
        in (finding(s, "progress.resume-point")["message"])
    )


def test_node_down_is_decided_by_ray_and_the_spare_takes_over(drill: Drill) -> None:
    result, report = drill
    s = item(report, "node-down")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    assert verdicts(s) == ALL_PASS
    by = s["questions"]["worker_lost_by"]
    assert by.startswith(("replica_lost on n2", "node_lost on n2")), by
    assert finding(s, "resources.lost-node-isolated")["verdict"] == "pass"
    where = s["placement"]
    assert where["before"] == ["n1", "n2"] and where["resumed_on"] == ["n1", "n3"]
    assert [p["node"] for p in where["spares_placed"]] == ["n3"]
    assert s["questions"]["resumed_from"]["checkpoint"] == "step-000010"
    tl = timeline(result, "node-down")
    t0 = tl.of("fault", "injected")[0].mono
    gcs = [e for e in tl.of("platform", "node_lost") if e.get("node") == "n2"]
    assert gcs and gcs[0].get("source") == "gcs" and gcs[0].mono > t0


def test_a_cut_off_worker_that_lives_on_is_caught(drill: Drill) -> None:
    """Split brain at process level: Ray gave up on n2 and resumed on n1 and n3, while the
    old rank on n2 (stuck in its allreduce: it wrote nothing) stayed alive to the end."""
    result, report = drill
    s = item(report, "partition")
    tl = timeline(result, "partition")
    t0 = tl.of("fault", "injected")[0].mono
    old = tl.incarnation_at(t0)
    assert old is not None
    # The rank on n2 (Ray Train orders its workers itself: rank 0 or 1). Where the group
    # runs is made, not hoped for: one CPU on each of n1 and n2, none on the head, spares
    # outside Ray until a member is lost; the cluster restored (members looked at until
    # up) before the item. What happened before the cut is checked, and said if it differs.
    node_of = {int(e.get("pid")): str(e.get("node")) for e in tl.of("probe", "run_start")}
    assert sorted(node_of.get(p, "?") for p in old.members) == ["n1", "n2"], (
        "the group the partition hit was not placed on n1 and n2: "
        f"{ {p: node_of.get(p) for p in old.members} }; before the cut: "
        f"{[(e.kind, e.get('node'), round(e.mono - t0, 1)) for e in _placement_events(tl, t0)]}"
    )
    cut_off = [p for p in old.members if node_of.get(p) == "n2"]
    rank = old.members[cut_off[0]]
    life = next(p for p in tl.procs if p.pid == cut_off[0])
    (end,) = tl.of("harness", "procs_final")
    assert life.node == "n2" and life.last_seen_mono >= end.mono  # alive when the job ended
    assert cut_off[0] in [p.get("pid") for p in end.get("alive")]
    stale = finding(s, "resources.no-stale-replica")
    assert (
        stale["verdict"] == "fail" and f"pid {cut_off[0]} (rank {rank}, node n2" in stale["message"]
    )
    assert finding(s, "resources.released-at-end")["verdict"] == "fail"
    assert f"{cut_off[0]}" in finding(s, "resources.no-duplicate-rank")["message"]
    # The job itself recovered: Ray decided, resumed from the newest valid checkpoint.
    assert s["evidence"]["progress"]["verdict"] == "pass"
    assert s["evidence"]["results"]["verdict"] == "pass"
    assert s["recovery_class"] == "manual-confirmation"
    by = s["questions"]["worker_lost_by"]
    assert by.startswith(("replica_lost on n2", "node_lost on n2")), by
    assert "still alive when the job ended" in s["questions"]["old_replica_note"]
    assert s["questions"]["old_replica_stopped_at"] is None
    assert s["placement"]["resumed_on"] == ["n1", "n3"]
    # It wrote no step after the cut: no data-level split brain with DDP.
    late = (tl.steps.pid == cut_off[0]) & (tl.steps.mono > t0 + 1.0)
    assert not late.any()


def test_a_gcs_restart_with_redis_is_survived(drill: Drill) -> None:
    result, report = drill
    s = item(report, "gcs-restart")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    assert verdicts(s) == ALL_PASS
    tl = timeline(result, "gcs-restart")
    (inj,) = tl.of("fault", "injected")
    assert inj.get("mode") == "stop" and inj.get("gcs_mode") == "redis"
    assert "GCS fault tolerance: redis" in inj.get("control_plane")
    assert tl.first("platform", "gcs_unreachable", after=inj.mono) is not None
    back = tl.first("platform", "gcs_reachable", after=inj.mono)
    assert back is not None and back.get("outage_s") > 4
    heads = [e for e in tl.of("platform", "ray_daemon_started") if e.get("role") == "head"]
    assert heads and heads[-1].mono > inj.mono  # the undo started the head again
    assert len(tl.incarnations) == 1  # training rode it out: no Train restart
    assert s["questions"]["note"].startswith("no replica was lost")


def test_a_read_only_checkpoint_dir_fails_the_save_and_ray_goes_on(drill: Drill) -> None:
    result, report = drill
    s = item(report, "storage-ro")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    assert finding(s, "expectation.outage-overlapped-save")["verdict"] == "pass"
    assert finding(s, "progress.failed-save-not-published")["verdict"] == "pass"
    tl = timeline(result, "storage-ro")
    failed = tl.of("probe", "ckpt_save_failed")
    assert failed and all(e.get("errno") == 30 for e in failed)  # EROFS
    # Ray was not handed the failed save, and training finished in one incarnation.
    registered = {e.get("step") for e in tl.of("platform", "ray_checkpoint_registered")}
    assert not registered & {e.get("step") for e in failed}
    assert len(tl.incarnations) == 1


def test_a_damaged_checkpoint_ray_hands_over_is_refused(drill: Drill) -> None:
    result, report = drill
    s = item(report, "corrupt")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    f = finding(s, "progress.damaged-checkpoint-refused")
    assert f["verdict"] == "pass" and f["data"]["fell_back_to"] == "step-000010"
    q = s["questions"]["resumed_from"]
    assert q["handed_over"] == "step-000020" and q["checkpoint"] == "step-000010"
    tl = timeline(result, "corrupt")
    inj = tl.of("fault", "injected")[0]
    handed = [e for e in tl.of("platform", "ray_checkpoint_handed_over") if e.mono > inj.mono]
    assert handed and handed[0].get("id") == "step-000020"  # Ray's own decision


@pytest.mark.skipif(cpu_controller_missing() is not None, reason=str(cpu_controller_missing()))
def test_a_straggler_train_worker_is_ridden_out(drill: Drill) -> None:
    """rank 1's Train worker actor (its process tree) held to 5 % of a core for 5 s: Ray
    Train rides it out, the report gives per-rank step times and says that nothing noticed
    it, and the throttle is undone."""
    result, report = drill
    s = item(report, "slow-r1")
    tolerated = finding(s, "progress.straggler-tolerated")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:6000]
    before, during, _after = tolerated["data"]["ranks"]["1"]
    assert before and during and during > 1.5 * before, tolerated
    detected = finding(s, "expectation.straggler-detected")
    assert detected["message"].startswith("nothing noticed the slowed rank"), detected
    recs = ledger_records(result.run_dir / "scenarios" / "slow-r1" / "ledger.jsonl")
    [throttle] = [r for r in recs if r["kind"] == "cpu-throttle"]
    assert throttle["reverted"] and not Path(throttle["data"]["path"]).exists()


@pytest.mark.skipif(bool(fuse_missing()), reason=f"needs FUSE: {fuse_missing()}")
def test_slow_storage_stretches_the_save_of_ray_train_and_nothing_fails(drill: Drill) -> None:
    """Ray's storage path served through the FUSE mirror, each write 150 ms late across the
    step-20 save (measured once alone: 2.8 s instead of 0.1 s, training blocked 2.9 s)."""
    _, report = drill
    s = item(report, "storage-slow")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    slow = finding(s, "expectation.slow-storage-save")
    assert slow["verdict"] == "pass" and 20 in slow["data"]["slowed_steps"], slow
    assert slow["data"]["save_s"] > 1.0 > slow["data"]["usual_save_s"], slow
    assert finding(s, "progress.failed-save-not-published")["verdict"] == "pass"


def test_nothing_of_the_run_is_left(drill: Drill) -> None:
    result, report = drill
    ledgers = sorted(result.run_dir.rglob("ledger.jsonl"))
    assert result.run_dir / "ray-cluster" / "ledger.jsonl" in ledgers
    for ledger in ledgers:
        recs = ledger_records(ledger)
        assert all(r["reverted"] for r in recs), ledger
        for r in recs:
            if r["kind"] == "ray-daemon":
                assert procfs.pids_with_env(MARKER_ENV, r["data"]["marker"]) == [], r
            elif r["kind"] == "netns":
                assert not netns_exists(r["data"]["name"]), r
            elif r["kind"] == "cgroup":
                assert not Path(r["data"]["path"]).exists(), r
    assert procfs.pids_with_env("FAULTDRILL_TASK_ID", report["task_id"]) == []
    active = Path(os.environ.get("FAULTDRILL_STATE_DIR", "/nonexistent")) / "active"
    assert not active.exists() or list(active.iterdir()) == []
