"""Resource checks on tiny literal timelines: stale replicas, duplicate ranks, leftovers,
faults not taken back."""

from __future__ import annotations

import dataclasses

from faultdrill.checks import Verdict, run_checks
from tests.timelines import NEW, OLD, TL, Judge, baseline, ids, restart

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


def outlive(tl: TL, pid: int, rank: int, last_seen: float | None) -> TL:
    """Make old ``pid`` live until ``last_seen`` (None: still alive when sampling ended)."""
    tl.drop("sampler", where=lambda r: r["pid"] == pid)
    gone = None if last_seen is None else last_seen + 0.3
    return tl.proc(pid, rank, 0.05, gone, last_seen=last_seen, node=f"n{rank}")


# --- resources.no-stale-replica ---------------------------------------------------------

NS = "resources.no-stale-replica"


def test_no_stale_replica_passes_when_old_replicas_are_gone_in_time(judge: Judge) -> None:
    assert judge.one(NS, restart()) == (
        P,
        "1 restart(s); every older replica was gone before its successor made progress",
    )


def test_no_stale_replica_passes_without_restart(judge: Judge) -> None:
    assert judge.one(NS, baseline()) == (P, "no restart; no replica was superseded")


def test_no_stale_replica_fails_on_an_old_replica_alive_after_the_first_new_step(
    judge: Judge,
) -> None:
    # incarnation 1's first step is at t=8.0; old rank 1 was last seen at 9.0
    assert judge.one(NS, outlive(restart(), OLD[1], 1, 9.0)) == (
        F,
        "1 process(es) of an older incarnation still alive after incarnation 1 made "
        "progress: pid 101 (rank 1, node n1, alive 1.0 s after)",
    )


def test_no_stale_replica_fails_on_an_old_replica_alive_at_the_end(judge: Judge) -> None:
    # never gone: alive until the last sample (incarnation 1's exit at t=10.5)
    verdict, msg = judge.one(NS, outlive(restart(), OLD[0], 0, None))
    assert verdict is F
    assert "pid 100 (rank 0, node n0, alive 2.5 s after)" in msg


def test_no_stale_replica_passes_when_the_old_replica_left_before_the_first_step(
    judge: Judge,
) -> None:
    # alive after the new incarnation announced itself (7.0), gone before its step at 8.0
    assert judge.one(NS, outlive(restart(), OLD[1], 1, 7.9))[0] is P


def test_no_stale_replica_fails_on_an_unannounced_worker_from_before_the_restart(
    judge: Judge,
) -> None:
    tl = restart().proc(150, 1, 3.0, 9.5, last_seen=9.2, node="n1")
    verdict, msg = judge.one(NS, tl)
    assert verdict is F
    assert "pid 150 (rank 1, node n1, alive 1.2 s after)" in msg


def test_no_stale_replica_fails_when_the_old_incarnation_keeps_stepping(judge: Judge) -> None:
    tl = restart().step(OLD[1], 1, 6, 8.5, [ids(6, 1)])
    assert judge.one(NS, tl) == (
        F,
        "1 step(s) emitted by an older incarnation after incarnation 1 started making "
        "progress (split brain); first: pid 101 rank 1 step 6",
    )


def test_no_stale_replica_reports_both_a_live_and_a_stepping_old_replica(judge: Judge) -> None:
    tl = outlive(restart(), OLD[1], 1, 9.0).step(OLD[1], 1, 6, 8.5, [ids(6, 1)])
    found = judge.run(NS, tl)
    assert [f.verdict for f in found] == [F, F]
    assert "still alive" in found[0].message and "split brain" in found[1].message
    assert found[0].data["pids"] == [OLD[1]]


def test_no_stale_replica_retests_without_sampler_data(judge: Judge) -> None:
    assert judge.one(NS, restart().drop("sampler")) == (
        R,
        "the process table was not sampled (no worker seen)",
    )


def test_a_platform_that_cannot_see_the_processes_says_why(judge: Judge) -> None:
    why = "the pods run on the cluster's machines"
    tl = restart().drop("sampler").platform("unobservable", 0.0, what="processes", why=why)
    for check in (NS, "resources.no-duplicate-rank", "resources.children-released"):
        [f] = judge.run(check, tl)
        assert f.verdict is R and why in f.message and f.data == {"unobservable": True}
    # The platform's reason by message id: said in the report's language.
    said = (
        restart()
        .drop("sampler")
        .platform(
            "unobservable",
            0.0,
            what="processes",
            why=why,
            why_id="resources.unobservable.kubeconfig",
        )
    )
    [f] = judge.run(NS, said)
    assert f.message_id == "resources.unobservable" and "kubeconfig" in f.message
    assert f.params["why"]["message_id"] == "resources.unobservable.kubeconfig"


def test_no_stale_replica_ignores_agents(judge: Judge) -> None:
    tl = restart().proc(90, None, 0.0, 11.0, role="agent")
    assert judge.one(NS, tl)[0] is P
    assert judge.one(NS, TL().proc(90, None, 0.0, 11.0, role="agent"))[0] is R


def _evicted_but_writing(last_old_step: int) -> TL:
    """The split brain of a node cut off its control plane only (Kubernetes, measured on
    the test cluster): one incarnation (ranks 0, 1 on n0, n1), n1's kubelet loses the
    apiserver at 5.5, the node is lost at 15.5, rank 1's pod evicted at 26.0 (grace 5 s)
    and its replacement running on n2 at 26.1; but the evicted pod's worker still trains
    with rank 0 until step ``last_old_step`` (one step a second), and the replacement never
    gets a rank: only one process ever holds rank 1, and no second incarnation starts."""
    tl = TL().job("running", 0.0)
    for rank, pid in enumerate(OLD):
        tl.run_start(rank, pid, "10.0.0.1:29500", 0.0).scratch(rank, pid, 0.1)
        tl.proc(pid, rank, 0.05, last_old_step + 1.5, node=f"n{rank}")
    tl.steps(OLD[0], 0, range(1, 41), t0=1.0).steps(OLD[1], 1, range(1, last_old_step + 1), 1.0)
    tl.inject(5.5, fault="partition", target="node n1 <-> control-plane", at_step=5)
    tl.platform("node_lost", 15.5, node="n1", source="node-lifecycle-controller")
    tl.platform(
        "replica_lost",
        26.0,
        node="n1",
        pod="job-b",
        uid="u1",
        pids=[OLD[1]],
        grace_s=5,
        source="kube-apiserver",
    )
    return tl.platform("replica_started", 26.1, node="n2", pod="job-c", uid="u2")


def test_a_replica_declared_lost_that_keeps_writing_beside_its_replacement_is_stale(
    judge: Judge,
) -> None:
    found = judge.run(NS, _evicted_but_writing(40))
    assert [f.verdict for f in found] == [F]
    assert found[0].message == (
        "job-b (node n1, pids [101]) was declared lost by kube-apiserver and its "
        "replacement started 0.1 s later, yet it wrote 7 step(s) past the 5 s grace, the "
        "last 13.9 s after its replacement started (split brain; first: rank 1 step 34)"
    )
    # Only one process ever held rank 1: the duplicate-rank check cannot see this.
    assert judge.verdicts("resources.no-duplicate-rank", _evicted_but_writing(40)) == [P]


def test_a_lost_replica_stopped_within_its_grace_is_not_stale(judge: Judge) -> None:
    # steps up to 33 (t=33.0 < 26.1 + 5 s grace + 2 s for the kill itself)
    assert judge.verdicts(NS, _evicted_but_writing(33)) == [P]


def test_a_lost_replica_is_found_by_its_node_when_the_platform_names_no_pids(
    judge: Judge,
) -> None:
    tl = _evicted_but_writing(40).edit("platform", "replica_lost", lambda r: True, pids=None)
    found = judge.run(NS, tl)
    assert [f.verdict for f in found] == [F] and found[0].data["pids"] == [OLD[1]]


def test_a_deleted_pod_whose_worker_steps_past_the_kill_slack_is_stale(judge: Judge) -> None:
    # kill-worker by pod deletion (grace 0): replacement at 5.7; an old step at 7.8 is
    # 2.1 s after it (the older-incarnation rule looks only from 8.0, the new first step)
    tl = restart().platform("replica_lost", 5.6, node="n1", pids=[OLD[1]], grace_s=0)
    tl.platform("replica_started", 5.7, node="n2")
    assert judge.verdicts(NS, tl) == [P]
    assert judge.verdicts(NS, tl.step(OLD[1], 1, 6, 7.8, [ids(6, 1)])) == [F]


# --- resources.no-duplicate-rank --------------------------------------------------------

ND = "resources.no-duplicate-rank"


def test_no_duplicate_rank_passes_when_each_rank_has_one_process(judge: Judge) -> None:
    assert judge.one(ND, restart()) == (
        P,
        "every rank was held by one live process at a time while training made progress",
    )


def test_no_duplicate_rank_fails_on_two_pids_announcing_one_rank(judge: Judge) -> None:
    tl = restart().run_start(1, 202, "10.0.0.1:29501", 7.02)
    assert judge.one(ND, tl) == (
        F,
        "incarnation 1: rank 1 announced by 2 processes (pids [201, 202])",
    )


def test_no_duplicate_rank_fails_on_two_live_workers_of_one_rank_while_stepping(
    judge: Judge,
) -> None:
    # pid 250 holds rank 0 next to pid 200 from 7.5 to 8.5, across the step at 8.0
    tl = restart().proc(250, 0, 7.5, 8.8, last_seen=8.5, node="n2")
    assert judge.one(ND, tl) == (
        F,
        "rank 0 held by pids 200 (node n0) and 250 (node n2) at once for 1.0 s while "
        "training made progress",
    )


def test_no_duplicate_rank_allows_an_overlap_without_progress(judge: Judge) -> None:
    # old rank 1 lingers until 7.5, after new rank 1 appeared (7.05), but no step ran meanwhile
    assert judge.one(ND, outlive(restart(), OLD[1], 1, 7.5))[0] is P


def test_no_duplicate_rank_catches_a_stale_replica_overlapping_steps(judge: Judge) -> None:
    verdict, msg = judge.one(ND, outlive(restart(), OLD[1], 1, 9.0))
    assert verdict is F
    assert "rank 1 held by pids 101 (node n1) and 201 (node n1) at once" in msg


def test_no_duplicate_rank_retests_when_no_replica_was_seen(judge: Judge) -> None:
    verdict, msg = judge.one(ND, TL().job("failed", 1.0))
    assert verdict is R and "process table was not sampled" in msg


def test_no_duplicate_rank_judges_announcements_without_sampler_data(judge: Judge) -> None:
    # announcements alone cannot prove one process per rank, but can prove two
    assert judge.one(ND, restart().drop("sampler"))[0] is R
    tl = restart().drop("sampler").run_start(1, 202, "10.0.0.1:29501", 7.02)
    assert judge.one(ND, tl)[0] is F


# --- resources.released-at-end ----------------------------------------------------------

RA = "resources.released-at-end"


def at_end(
    alive: list[dict[str, object]] | None = None,
    ports: list[int] | None = None,
    leftovers: list[str] | None = None,
) -> TL:
    """The healthy restart whose end-of-job snapshot found these left."""
    return (
        restart()
        .drop("harness", "procs_final")
        .procs_final(11.5, alive=alive or [], ports=ports or [], leftovers=leftovers or [])
    )


def test_released_at_end_passes_when_nothing_is_left(judge: Judge) -> None:
    assert judge.one(RA, restart()) == (
        P,
        "no process, listening port or leftover the platform reports was held 1.0 s after "
        "the job ended",
    )


def test_released_at_end_fails_on_processes_left(judge: Judge) -> None:
    alive = [{"pid": NEW[1], "role": "worker", "rank": 1, "node": "n1"}]
    [f] = judge.run(RA, at_end(alive=alive))
    assert (f.verdict, f.message) == (
        F,
        "1 process(es) of the job still alive 1.0 s after it ended: pid 201 (worker, "
        "rank 1, node n1)",
    )
    assert f.data == {"pids": [NEW[1]]}


def test_released_at_end_fails_on_ports_left(judge: Judge) -> None:
    assert judge.one(RA, at_end(ports=[29501])) == (F, "listening port(s) still held: [29501]")


def test_released_at_end_fails_on_leftovers(judge: Judge) -> None:
    assert judge.one(RA, at_end(leftovers=["/tmp/fd-ckpt", "mount /mnt/x"])) == (
        F,
        "left behind: /tmp/fd-ckpt, mount /mnt/x",
    )


def test_released_at_end_reports_every_kind_of_leftover(judge: Judge) -> None:
    tl = at_end(
        alive=[{"pid": 7, "role": "agent", "rank": None, "node": "n0"}],
        ports=[29500],
        leftovers=["/tmp/x"],
    )
    assert judge.verdicts(RA, tl) == [F, F, F]


def test_released_at_end_retests_without_a_snapshot(judge: Judge) -> None:
    assert judge.one(RA, restart().drop("harness", "procs_final")) == (
        R,
        "no end-of-job resource snapshot was recorded",
    )


def test_released_at_end_retests_when_the_harness_stopped_the_job(judge: Judge) -> None:
    # After a stop condition the harness killed the job itself: a snapshot taken right
    # after that kill says nothing about whether the job releases what it holds.
    alive = [{"pid": NEW[1], "role": "worker", "rank": 1, "node": "n1"}]
    tl = at_end(alive=alive).edit("harness", "procs_final", lambda r: True, after_stop=True)
    [f] = judge.run(RA, tl)
    assert (f.verdict, f.message) == (
        R,
        "the harness itself stopped the job after a stop condition, so whether the job "
        "releases its resources when it ends was not observed (1 item(s) still held at the "
        "snapshot right after the stop)",
    )
    clean = restart().edit("harness", "procs_final", lambda r: True, after_stop=True)
    assert judge.one(RA, clean)[0] is R


# --- resources.faults-reverted ----------------------------------------------------------

FR = "resources.faults-reverted"


def test_faults_reverted_passes_when_cleanup_took_everything_back(judge: Judge) -> None:
    assert judge.one(FR, restart()) == (
        P,
        "cleanup reported every fault reverted and no ledger entry pending",
    )


def test_faults_reverted_fails_on_a_failed_revert(judge: Judge) -> None:
    tl = restart().add(
        "fault", "revert_failed", 7.5, fault="link-loss", error="iptables: rule not found"
    )
    [f] = judge.run(FR, tl)
    assert (f.verdict, f.message) == (
        F,
        "reverting fault link-loss failed: iptables: rule not found",
    )


def test_faults_reverted_fails_on_pending_ledger_entries(judge: Judge) -> None:
    msg = "1 ledger entries not reverted; run `faultdrill cleanup`"
    tl = restart().drop("harness", "cleanup").cleanup(11.7, problems=[msg], pending=1)
    assert [(f.check, f.verdict, f.message, f.data) for f in judge.run(FR, tl)] == [
        (
            FR,
            F,
            "1 ledger entry not reverted after cleanup (a rule, mount, namespace or frozen "
            "group may be left behind); run `faultdrill cleanup RUN_DIR`",
            {"ledger_pending": 1},
        ),
        (FR, F, f"cleanup reported 1 problem(s): {msg}", {"problems": [msg]}),
    ]


def test_faults_reverted_fails_on_a_cleanup_problem(judge: Judge) -> None:
    tl = restart().drop("harness", "cleanup").cleanup(11.7, problems=["umount: target is busy"])
    assert judge.one(FR, tl) == (F, "cleanup reported 1 problem(s): umount: target is busy")


def test_faults_reverted_retests_without_a_cleanup_record(judge: Judge) -> None:
    assert judge.one(FR, restart().drop("harness", "cleanup")) == (
        R,
        "no cleanup was recorded (the harness may have died): whether every fault and change "
        "was taken back is unknown; run `faultdrill cleanup RUN_DIR`",
    )


def test_a_scenario_with_a_fault_left_behind_does_not_pass(judge: Judge) -> None:
    tl = restart().drop("harness", "cleanup").cleanup(11.7, pending=2)
    out = run_checks(judge.ctx(tl))
    assert out["resources"].verdict is F
    assert {c: r.verdict for c, r in out.items() if c != "resources"} == {
        "progress": P,
        "results": P,
        "expectation": P,
    }


# --- replicas and their children (DataLoader workers, helpers) ----------------------------

CR = "resources.children-released"


def with_loader_workers(tl: TL, pids: dict[int, int], *, linger: float = 0.3) -> TL:
    """Two DataLoader workers per replica in ``pids`` (pid -> rank): children seen with
    their replica, gone ``linger`` seconds after it (the sampler's lineage recorded)."""
    lives = {
        r["pid"]: r
        for r in tl.recs
        if r["src"] == "sampler" and r["kind"] in ("proc_seen", "proc_gone")
    }
    for pid, rank in pids.items():
        gone = next(
            (r["mono"] for r in tl.recs if r["kind"] == "proc_gone" and r["pid"] == pid), None
        )
        seen = next(r["mono"] for r in tl.recs if r["kind"] == "proc_seen" and r["pid"] == pid)
        assert pid in lives
        for k in (1, 2):
            end = None if gone is None else gone + linger
            tl.proc(
                pid * 10 + k,
                rank,
                seen + 0.1,
                end,
                last_seen=None if end is None else end - 0.05,
                role="child",
                owner=pid,
                ppid=pid,
                node=f"n{rank}",
            )
    return tl


def healthy_with_workers(linger: float = 0.3) -> TL:
    pids = {OLD[0]: 0, OLD[1]: 1, NEW[0]: 0, NEW[1]: 1}
    return with_loader_workers(restart(), pids, linger=linger)


def test_dataloader_workers_are_not_second_holders_of_their_rank(judge: Judge) -> None:
    # the false alarm of every real job: workers overlap their replica across many steps
    tl = healthy_with_workers()
    assert judge.one(ND, tl) == (
        P,
        "every rank was held by one live process at a time while training made progress",
    )
    assert judge.one(NS, tl)[0] is P


def test_a_healthy_job_with_children_passes_every_check(judge: Judge) -> None:
    found = run_checks(judge.ctx(healthy_with_workers()))
    bad = [f for r in found.values() for f in r.findings if f.verdict is not P]
    assert bad == []


def test_children_released_reports_lingering_within_the_grace(judge: Judge) -> None:
    # old replicas gone at 6.5; their workers last seen at 6.5 + 2.0 - 0.05
    assert judge.one(CR, healthy_with_workers(linger=2.0)) == (
        P,
        "8 child process(es) outlived their replica, the longest by 1.9 s (pid 1001 of "
        "replica pid 100, rank 0): within the 10 s grace for the framework's own clean-up",
    )


def test_children_released_fails_on_children_past_the_grace(judge: Judge) -> None:
    tl = restart()
    with_loader_workers(tl, {OLD[1]: 1}, linger=12.0)
    [f] = judge.run(CR, tl)
    assert (f.verdict, f.message) == (
        F,
        "2 child process(es) of replica pid 101 (rank 1, node n1) outlived it by up to "
        "11.9 s, past the 10 s grace: pids [1011, 1012]",
    )
    assert f.data["grace_s"] == 10.0


def test_children_released_uses_the_plan_s_grace(judge: Judge) -> None:
    tl = restart()
    with_loader_workers(tl, {OLD[1]: 1}, linger=2.0)
    obs = judge.plan.observation.model_copy(update={"child_grace_s": 1.0})
    strict = dataclasses.replace(judge, plan=judge.plan.model_copy(update={"observation": obs}))
    verdict, msg = strict.one(CR, tl)
    assert verdict is F and "past the 1 s grace" in msg


def test_children_released_counts_a_child_alive_when_sampling_stopped(judge: Judge) -> None:
    tl = restart().proc(1015, 1, 3.0, None, role="child", owner=OLD[1], ppid=OLD[1], node="n1")
    verdict, msg = judge.one(CR, tl)
    # sampling ends when the new incarnation is gone (10.5): 4.0 s after the old replica
    assert verdict is P and "longest by 4.0 s" in msg
    later = tl.proc(NEW[1] * 10, None, 12.0, 30.0, role="other", node="n1")
    verdict, msg = judge.one(CR, later)
    assert verdict is F and "(1 still alive when sampling stopped)" in msg


def test_children_released_passes_when_no_replica_had_children(judge: Judge) -> None:
    assert judge.one(CR, restart()) == (
        P,
        "no child process of a replica outlived it (no replica had any) (grace 10 s)",
    )


def test_children_released_retests_without_sampler_data(judge: Judge) -> None:
    assert judge.one(CR, restart().drop("sampler"))[0] is R


def test_a_child_that_keeps_stepping_after_the_restart_is_a_stale_replica(judge: Judge) -> None:
    # a detached child of killed rank 1 writes steps under its own pid, beside the new one
    tl = restart().proc(1019, 1, 2.0, 10.0, role="child", owner=OLD[1], ppid=OLD[1], node="n1")
    tl.step(1019, 1, 6, 8.6, [ids(6, 1)])
    verdict, msg = judge.one(NS, tl)
    assert verdict is F
    assert "split brain" in msg and "pid 1019 rank 1 step 6" in msg
    # its steps are its replica's, not an unknown process's
    assert judge.one("progress.steps-attributed", tl)[0] is P


def test_a_wrapper_s_child_that_announced_itself_is_the_replica(judge: Judge) -> None:
    # the launcher ran `sh -c "python train.py"`: sh (pid 55, rank 0) holds RANK first,
    # python (pid 200, rank 0) announced itself; sh is a wrapper, not a second holder
    tl = restart().drop("sampler", where=lambda r: r["pid"] == NEW[0])
    tl.proc(55, 0, 7.0, 12.0, node="n0")
    tl.proc(NEW[0], 0, 7.05, 12.0, role="child", owner=55, ppid=55, node="n0")
    built = tl.build()
    roles = {p.pid: p.role for p in built.procs}
    assert roles[55] == "wrapper" and roles[NEW[0]] == "worker"
    assert judge.one(ND, built)[0] is P


def test_recordings_without_lineage_keep_every_rank_holder_a_worker(judge: Judge) -> None:
    # runs recorded before lineage existed: the same duplicate as before is still a failure
    tl = restart().proc(250, 0, 7.5, 8.8, last_seen=8.5, node="n2")
    assert {p.role for p in tl.build().procs} == {"worker"}
    assert judge.one(ND, tl)[0] is F
