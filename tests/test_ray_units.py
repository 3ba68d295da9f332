"""The Ray Train platform without a cluster: its plan section and the abilities it declares
(validated at load, errors naming field and fix), Ray's decisions answering the four
questions on literal timelines, the handed-over checkpoint against the newest valid one,
a cut-off old replica caught by the resource checks, and the small parsers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from faultdrill.admit import parse_plan
from faultdrill.errors import PlanError
from faultdrill.plan import Resources
from faultdrill.platforms import PLATFORMS, Ability
from faultdrill.platforms.ray.embedded import RayTuning
from faultdrill.platforms.ray.platform import RayPlatform, _Announcements
from faultdrill.readings.analysis import answer_questions
from tests.drillkit import demo_raw
from tests.records import as_json
from tests.timelines import NEW, OLD, TL, Judge, first_run

CTL = "ray-train-controller"


def ray_plan(**ray: Any) -> dict[str, Any]:
    raw = demo_raw()
    raw["resources"].update(platform="ray", isolation="netns", ray=ray or None)
    raw["controls"] = []
    return raw


def problem(raw: dict[str, Any]) -> str:
    with pytest.raises(PlanError) as err:
        parse_plan(raw, source="ray.yaml")
    return str(err.value)


# --- the plan section --------------------------------------------------------------------


def test_a_ray_plan_without_the_section_gets_every_default_written_out() -> None:
    raw = ray_plan()
    del raw["resources"]["ray"]
    res = parse_plan(raw).resources
    assert res.ray is not None and res.ray.embedded and res.ray.head == "own"
    assert res.model_dump()["ray"]["health_check_period_ms"] == 500  # in the dossier


@pytest.mark.parametrize(
    ("ray", "resources", "says"),
    [
        ({"gcs_ft": "zookeeper"}, {}, "resources.ray.gcs_ft: 'zookeeper' is not allowed"),
        ({"address": "nohost"}, {}, "resources.ray: address 'nohost' is not HOST:PORT"),
        ({"embedded": False}, {}, "embedded: false needs address"),
        ({"address": "10.0.0.1:6379", "embedded": True}, {}, "not both"),
        ({}, {"isolation": "none"}, "needs isolation: netns"),
        ({"health_check_period_ms": 1}, {}, "resources.ray.health_check_period_ms"),
    ],
)
def test_bad_ray_settings_name_field_and_fix(
    ray: dict[str, Any], resources: dict[str, Any], says: str
) -> None:
    raw = ray_plan(**ray)
    raw["resources"].update(resources)
    assert says in problem(raw)


def test_a_ray_section_on_another_platform_is_refused() -> None:
    raw = demo_raw()
    raw["resources"]["ray"] = {}
    assert "settings for platform ray, but platform is 'local'" in problem(raw)


def test_the_embedded_cluster_does_every_fault_family_with_its_own_head() -> None:
    res = Resources(platform="ray", isolation="netns")
    assert RayPlatform.abilities_for(res) == frozenset(Ability) - {
        Ability.REPLICA_COPY,
        Ability.HANG_RANK,
        Ability.OOM_RANK,
        Ability.DATA_OUTAGE,
    }
    assert "actors started by Ray" in RayPlatform.why_not(Ability.REPLICA_COPY, res)
    assert "platform local" in RayPlatform.why_not(Ability.DATA_OUTAGE, res)
    parse_plan(ray_plan())  # the demo's faults, drain and control-plane stop included


def test_control_plane_stop_with_the_head_on_n1_is_refused_with_the_reason() -> None:
    raw = ray_plan(head="n1")
    raw["rounds"] = [
        {
            "round": 3,
            "scenarios": [
                {
                    "id": "gcs",
                    "fault": {"kind": "control-plane-outage", "mode": "stop", "for_s": 5},
                    "trigger": {"at_step": 5},
                }
            ],
        }
    ]
    says = problem(raw)
    assert "needs ability control-plane-stop" in says
    assert "set resources.ray.head: own" in says


def test_a_cluster_given_by_address_refuses_what_faultdrill_does_not_own() -> None:
    raw = ray_plan(address="10.0.0.1:6379")
    raw["resources"]["isolation"] = "none"
    raw["resources"]["spares"] = 0
    says = problem(raw)  # the demo's link faults
    assert "platform 'ray'" in says and "use the embedded cluster" in says
    res = Resources(platform="ray", ray={"address": "10.0.0.1:6379"})
    assert RayPlatform.abilities_for(res) == {Ability.SIGNAL_RANK, Ability.CHECKPOINT_FILES}
    assert PLATFORMS["ray"].variant_for(res).__name__ == "RayAddressPlatform"


def test_the_ray_only_bad_mode_is_refused_on_another_platform() -> None:
    raw = demo_raw()
    raw["task"]["workload"]["bad_mode"] = "handover-stale"
    assert "a Ray Train mode" in problem(raw)
    raw = ray_plan()
    raw["task"]["workload"]["bad_mode"] = "handover-stale"
    parse_plan(raw)


def test_tuning_from_the_plan_reaches_the_daemons_and_the_driver() -> None:
    res = Resources(
        platform="ray",
        isolation="netns",
        ray={"health_check_period_ms": 200, "train_health_check_interval_s": 0.25},
    )
    assert res.ray is not None
    tuning = RayTuning.from_settings(res.ray)
    assert tuning.daemon_env()["RAY_health_check_period_ms"] == "200"
    assert tuning.driver_env()["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] == "0.25"
    assert tuning.detect_node_s == pytest.approx(3 * (200 + 500) / 1000)


# --- Ray's decisions on literal timelines -------------------------------------------------


def ray_restart(*, handed: str | None = "ckpt-4", loaded: str = "ckpt-4", lost: str = CTL) -> TL:
    """A kill-worker drill as the Ray platform records it: the Train controller (or the
    GCS) decides, Ray hands a checkpoint over, the new group loads it."""
    tl = TL().job("running", 0.0)
    first_run(tl, 5, master="10.77.0.2:30001")
    for rank, pid in enumerate(OLD):
        tl.proc(pid, rank, 0.05, 6.5, last_seen=6.2, node=f"n{rank + 1}")
    tl.inject(5.5, at_step=5)
    if lost == CTL:
        tl.platform("replica_lost", 5.9, node="n2", rank=1, source=CTL, reason="ActorDiedError")
    else:
        tl.platform("node_lost", 5.8, node="n2", source="gcs", reason="UNEXPECTED_TERMINATION")
    tl.platform("ray_failure_decision", 5.95, decision="RETRY", source=CTL)
    tl.platform("ray_checkpoint_handed_over", 6.8, group=2, id=handed, source=CTL)
    step = int(loaded.split("-")[1])
    for rank, pid in enumerate(NEW):
        tl.run_start(rank, pid, "10.77.0.1:30002", 7.0, node=f"n{rank + 1}")
        tl.proc(pid, rank, 7.05, 12.5, node=f"n{rank + 1}")
        tl.load(rank, pid, loaded, step, 7.1)
        tl.recs[-1]["handed_over"] = handed  # what Ray's get_checkpoint() gave the worker
        tl.steps(pid, rank, range(step + 1, 7), t0=8.0)
    return tl


def test_the_train_controller_answers_question_one_and_names_itself() -> None:
    a = answer_questions(ray_restart().build())
    assert a.worker_lost_by == "replica_lost on n2 (ray-train-controller: ActorDiedError)"
    assert a.detect_s == pytest.approx(0.4)
    assert as_json(a.resumed_from) == {
        "checkpoint": "ckpt-4",
        "step": 4,
        "data_position": 16,
        "verified": True,
        "handed_over": "ckpt-4",
    }
    assert (a.old_replica_stopped_at, a.new_replicas_ready_at) == (6.5, 7.0)


def test_the_gcs_declaring_a_node_dead_answers_question_one() -> None:
    a = answer_questions(ray_restart(lost="gcs").build())
    assert a.worker_lost_by == "node_lost on n2 (gcs: UNEXPECTED_TERMINATION)"


def test_a_retry_handed_an_older_checkpoint_fails_the_resume_point() -> None:
    judge = Judge(parse_plan(ray_plan()), None, None)
    good = judge.run("progress.resume-point", ray_restart())
    assert [f.verdict.value for f in good] == ["pass"]
    assert "the platform handed over ckpt-4, the newest valid one" in good[0].message
    bad = judge.run("progress.resume-point", ray_restart(handed="ckpt-2", loaded="ckpt-2"))
    assert [f.verdict.value for f in bad] == ["fail"]
    assert "handed over ckpt-2, not the newest valid one (ckpt-4)" in bad[0].message


def test_a_damaged_handover_refused_by_the_job_still_resumes_from_the_newest_valid() -> None:
    tl = ray_restart(handed="ckpt-4", loaded="ckpt-2")
    tl.inject(4.6, fault="corrupt-checkpoint", ckpt_id="ckpt-4")  # damaged before the kill
    tl.recs.sort(key=lambda r: r["mono"])
    f = Judge(parse_plan(ray_plan()), None, None).run("progress.resume-point", tl)
    assert [x.verdict.value for x in f] == ["pass"]
    assert "handed over ckpt-4, not the newest valid one (ckpt-2)" in f[0].message


def registered(tl: TL, *at: tuple[str, int, float]) -> TL:
    """Ray's controller registering checkpoints: (directory id, reported step, time)."""
    for cid, step, t in at:
        tl.platform("ray_checkpoint_registered", t, id=cid, step=step, source=CTL)
    tl.recs.sort(key=lambda r: r["mono"])
    return tl


def scratch_restart() -> TL:
    """The kill landed after ckpt-2 and ckpt-4 were saved but before Ray's controller
    polled the workers' reports: Ray hands nothing over, the new group starts from step 1,
    and registers the checkpoints it saves afterwards."""
    tl = TL().job("running", 0.0)
    first_run(tl, 5, master="10.77.0.2:30001")
    for rank, pid in enumerate(OLD):
        tl.proc(pid, rank, 0.05, 6.5, last_seen=6.2, node=f"n{rank + 1}")
    tl.inject(5.5, at_step=5)
    tl.platform("replica_lost", 5.9, node="n2", rank=1, source=CTL, reason="ActorDiedError")
    tl.platform("ray_checkpoint_handed_over", 6.8, group=2, id=None, source=CTL)
    for rank, pid in enumerate(NEW):
        tl.run_start(rank, pid, "10.77.0.1:30002", 7.0, node=f"n{rank + 1}")
        tl.proc(pid, rank, 7.05, 20.5, node=f"n{rank + 1}")
        tl.scratch(rank, pid, 7.1)
        tl.recs[-1]["handed_over"] = None
        tl.steps(pid, rank, range(1, 7), t0=8.0)
    tl.save(0, NEW[0], "ckpt-2b", 2, 9.5)
    return registered(tl, ("ckpt-2b", 2, 9.8))


def test_a_save_ray_had_not_registered_when_the_group_failed_is_not_a_resume_point() -> None:
    """Ray resumes only from a checkpoint its controller registered: a kill between the
    save and Ray's next poll costs the unregistered steps, and the report says so; it is
    no failure of the resume (a healthy Ray job on a busy machine did this in CI)."""
    judge = Judge(parse_plan(ray_plan()), None, None)
    # nothing registered before the restart: scratch is all Ray had
    tl = scratch_restart()
    (f,) = judge.run("progress.resume-point", tl)
    assert f.verdict.value == "pass", f.message
    assert "ckpt-4 (step 4) was saved but not yet committed by the platform" in f.message
    assert "4 step(s) were recomputed" in f.message
    (z,) = judge.run("progress.no-restart-from-zero", tl)
    assert z.verdict.value == "pass" and "before the platform committed any" in z.message
    # ckpt-2 registered, ckpt-4 not yet: Ray hands ckpt-2 over, which is its newest
    tl = registered(ray_restart(handed="ckpt-2", loaded="ckpt-2"), ("ckpt-2", 2, 3.0))
    (f,) = judge.run("progress.resume-point", tl)
    assert f.verdict.value == "pass" and "2 step(s) were recomputed" in f.message


def test_a_registered_checkpoint_ray_did_not_hand_over_still_fails() -> None:
    judge = Judge(parse_plan(ray_plan()), None, None)
    # ckpt-4 registered before the failure, yet Ray handed ckpt-2 over
    tl = registered(
        ray_restart(handed="ckpt-2", loaded="ckpt-2"), ("ckpt-2", 2, 3.0), ("ckpt-4", 4, 5.0)
    )
    assert [f.verdict.value for f in judge.run("progress.resume-point", tl)] == ["fail"]
    # the known-bad stale hand-over: Ray registered step 4 with step 2's directory
    tl = registered(ray_restart(handed="ckpt-2", loaded="ckpt-2"), ("ckpt-2", 4, 5.0))
    (f,) = judge.run("progress.resume-point", tl)
    assert f.verdict.value == "fail" and "not the newest valid one (ckpt-4)" in f.message
    # registered, and then Ray handed nothing: progress thrown away
    tl = scratch_restart()
    registered(tl, ("ckpt-4", 4, 5.0))
    assert [f.verdict.value for f in judge.run("progress.resume-point", tl)] == ["fail"]
    assert [f.verdict.value for f in judge.run("progress.no-restart-from-zero", tl)] == ["fail"]


def split_brain() -> TL:
    """A node cut off: Ray gave up on n2 and restarted on n1 and a spare, but the old
    rank-1 worker on n2 lived on to the end (it wrote nothing: its allreduce was stuck)."""
    tl = ray_restart(lost="gcs")
    tl.drop("sampler", where=lambda r: r["pid"] == OLD[1])
    tl.proc(OLD[1], 1, 0.05, None, node="n2")
    tl.procs_final(13.0, alive=[{"pid": OLD[1], "role": "worker", "rank": 1, "node": "n2"}])
    return tl


def test_a_cut_off_worker_that_lives_on_is_caught_by_the_resource_checks() -> None:
    judge = Judge(parse_plan(ray_plan()), None, None)
    stale = judge.run("resources.no-stale-replica", split_brain())
    assert [f.verdict.value for f in stale] == ["fail"]
    assert f"pid {OLD[1]} (rank 1, node n2" in stale[0].message
    dup = judge.run("resources.no-duplicate-rank", split_brain())
    assert any(f.verdict.value == "fail" and "rank 1" in f.message for f in dup)
    end = judge.run("resources.released-at-end", split_brain())
    assert [f.verdict.value for f in end] == ["fail"]
    a = answer_questions(split_brain().build())
    assert a.old_replica_stopped_at is None
    assert f"[{OLD[1]}] still alive when observation ended" in a.old_replica_note
    # Stopped only by the drill's clean-up after the job ended: not stopped by the platform.
    tl = split_brain().drop("sampler", where=lambda r: r["pid"] == OLD[1])
    tl.proc(OLD[1], 1, 0.05, 14.0, node="n2")
    a = answer_questions(tl.build())
    assert a.old_replica_stopped_at is None
    assert "still alive when the job ended (stopped only by the drill's clean-up)" in (
        a.old_replica_note
    )


# --- parsers -------------------------------------------------------------------------------


def test_announcements_are_read_incrementally_from_the_events(tmp_path: Path) -> None:
    probe, ctl, gcs = (tmp_path / n for n in ("probe-rank1.jsonl", "ray-c.jsonl", "ray-g.jsonl"))
    probe.write_text(json.dumps({"src": "probe", "kind": "run_start", "pid": 7, "rank": 1}) + "\n")
    seen = _Announcements(tmp_path, since=0.0)
    seen.read()
    assert seen.ranks == {7: 1}
    with ctl.open("a") as f:
        f.write(
            json.dumps(
                {
                    "kind": "ray_worker_group_started",
                    "source": CTL,
                    "controller_pid": 42,
                    "pids": [8, 9],
                }
            )
            + "\n"
        )
        f.write('{"kind": "ray_controller_state", "source": "ray-train-con')  # torn
    lost = [
        {"kind": "node_lost", "source": "gcs", "node": n, "mono": t}
        for n, t in (("n3", -1.0), ("n2", 1.0))
    ]
    gcs.write_text("".join(json.dumps(e) + "\n" for e in lost))  # n3: before the job
    seen.read()
    assert (seen.controller, seen.group, seen.dead) == (42, [8, 9], ["n2"])
    seen.read()
    assert seen.dead == ["n2"]  # read once


def test_a_stale_registration_ending_is_no_node_loss(tmp_path: Path) -> None:
    """A member started again between drills can leave an earlier registration that the
    GCS declares dead only after the next job began: while the node's newer registration
    is up, that is no ``node_lost`` (else a spare joined and Ray Train placed a rank on it
    instead of on the live member). Its only registration going down is one."""
    gcs_pb2 = pytest.importorskip("ray.core.generated.gcs_pb2")
    from faultdrill.events import EventSink
    from faultdrill.platforms.ray.observe import _Poller

    def reg(address: str, dead: bool) -> Any:
        info = gcs_pb2.GcsNodeInfo(node_manager_address=address)
        if dead:
            info.state = gcs_pb2.GcsNodeInfo.DEAD
            info.death_info.reason = info.death_info.UNEXPECTED_TERMINATION
        return info

    class Ids:  # the node ids the GCS client answers with: only .hex() is read
        def __init__(self, rid: str) -> None:
            self.rid = rid

        def hex(self) -> str:
            return self.rid

    answers: list[dict[Ids, Any]] = []

    class Client:
        def get_all_node_info(self, timeout: float) -> dict[Ids, Any]:
            return answers.pop(0)

    sink = EventSink(tmp_path, "t")
    poller = _Poller("gcs", sink, {"10.0.0.1": "n1", "10.0.0.2": "n2"})
    poller.client = Client()
    n1, old, new = Ids("n1-a"), Ids("n2-old"), Ids("n2-new")
    answers += [
        {n1: reg("10.0.0.1", False), old: reg("10.0.0.2", False), new: reg("10.0.0.2", False)},
        {n1: reg("10.0.0.1", False), old: reg("10.0.0.2", True), new: reg("10.0.0.2", False)},
        {n1: reg("10.0.0.1", False), old: reg("10.0.0.2", True), new: reg("10.0.0.2", True)},
    ]
    poller.poll()
    poller.poll()
    sink.close()
    events = [json.loads(x) for x in (tmp_path / "ray-gcs.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in events if e["kind"] == "node_lost"] == []
    (ended,) = [e for e in events if e["kind"] == "node_state" and not e["initial"]]
    assert (ended["ray_node_id"], ended["state"]) == ("n2-old", "down")  # still recorded
    sink = EventSink(tmp_path, "t")
    poller.sink = sink
    poller.poll()
    sink.close()
    events = [json.loads(x) for x in (tmp_path / "ray-gcs.jsonl").read_text().splitlines()]
    (lost,) = [e for e in events if e["kind"] == "node_lost"]
    assert lost["node"] == "n2" and lost["reason"] == "UNEXPECTED_TERMINATION"


def test_a_damaged_checkpoint_the_platform_never_handed_over_is_retest_not_silent() -> None:
    judge = Judge(parse_plan(ray_plan()), None, None)
    # Killed between the save of ckpt-4 and Ray registering it: Ray hands over ckpt-2.
    tl = ray_restart(handed="ckpt-2", loaded="ckpt-2")
    tl.inject(4.6, fault="corrupt-checkpoint", ckpt_id="ckpt-4")
    f = judge.run("progress.damaged-checkpoint-refused", tl)
    assert [x.verdict.value for x in f] == ["retest"]
    assert "handed over ckpt-2, not damaged ckpt-4" in f[0].message
    # Handed the damaged one, the job refused it and said so.
    tl = ray_restart(handed="ckpt-4", loaded="ckpt-2")
    tl.inject(4.6, fault="corrupt-checkpoint", ckpt_id="ckpt-4")
    for r in tl.recs:
        if r["kind"] == "ckpt_load":
            r["rejected"] = [{"id": "ckpt-4", "reason": "sha256 mismatch"}]
    f = judge.run("progress.damaged-checkpoint-refused", tl)
    assert [x.verdict.value for x in f] == ["pass"]
    # Handed the damaged one and silently fell back: still a failure.
    tl = ray_restart(handed="ckpt-4", loaded="ckpt-2")
    tl.inject(4.6, fault="corrupt-checkpoint", ckpt_id="ckpt-4")
    f = judge.run("progress.damaged-checkpoint-refused", tl)
    assert [x.verdict.value for x in f] == ["fail"]


def test_the_example_plan_is_a_valid_ray_plan() -> None:
    from faultdrill.admit import load_plan
    from tests.drillkit import ROOT

    plan = load_plan(ROOT / "examples" / "ray.yaml")
    assert plan.resources.platform == "ray" and plan.resources.ray is not None
    kinds = {i.fault.kind for i in plan.items()}
    assert {"kill-worker", "node-down"} <= kinds
