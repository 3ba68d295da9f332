"""Replicas and their children (faultdrill.lineage): the rule that keeps a DataLoader
worker from counting as a second holder of its rank."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from faultdrill.lineage import Lineage, ProcFacts, assign_owners, promote_announced
from faultdrill.platforms.api import Replica

AGENT = ProcFacts(10, 100, "agent", ppid=1, sid=10)
WORKER = ProcFacts(20, 200, "worker", ppid=10, sid=20)  # torchrun: a session leader


def owners(
    procs: list[ProcFacts], memo: dict[tuple[int, int], int | None] | None = None
) -> dict[int, int | None]:
    got = assign_owners(procs, {} if memo is None else memo, set())
    return {key[0]: owner for key, owner in got.items()}


def test_a_worker_started_by_the_agent_is_a_replica() -> None:
    assert owners([AGENT, WORKER]) == {10: None, 20: None}


def test_dataloader_workers_belong_to_their_replica() -> None:
    fork = ProcFacts(21, 210, "worker", ppid=20, sid=20)  # fork: same env, same session
    spawn = ProcFacts(22, 220, "worker", ppid=20, sid=20)  # spawn: a new python, same env
    assert owners([AGENT, WORKER, fork, spawn]) == {10: None, 20: None, 21: 20, 22: 20}


def test_grandchildren_belong_to_the_replica_not_to_their_parent() -> None:
    forkserver = ProcFacts(21, 210, "worker", ppid=20, sid=20)
    loader = ProcFacts(23, 230, "worker", ppid=21, sid=20)
    tool = ProcFacts(24, 240, "other", ppid=23, sid=20)  # a helper without RANK in its env
    assert owners([loader, tool, forkserver, WORKER, AGENT]) == {
        10: None,
        20: None,
        21: 20,
        23: 20,
        24: 20,
    }


def test_an_orphan_first_seen_after_its_replica_died_is_found_by_its_session() -> None:
    replicas: set[int] = set()
    memo: dict[tuple[int, int], int | None] = {}
    assign_owners([AGENT, WORKER], memo, replicas)
    orphan = ProcFacts(25, 250, "worker", ppid=1, sid=20)  # reparented to init
    got = assign_owners([AGENT, orphan], memo, replicas)
    assert got[orphan.key] == 20


def test_a_child_keeps_its_owner_once_the_replica_is_gone() -> None:
    memo: dict[tuple[int, int], int | None] = {}
    replicas: set[int] = set()
    child = ProcFacts(21, 210, "worker", ppid=20, sid=20)
    assign_owners([AGENT, WORKER, child], memo, replicas)
    detached = ProcFacts(21, 210, "worker", ppid=1, sid=21)  # setsid'ed since, parent dead
    assert assign_owners([AGENT, detached], memo, replicas)[detached.key] == 20


def test_a_reused_pid_is_a_new_process() -> None:
    memo: dict[tuple[int, int], int | None] = {}
    replicas: set[int] = set()
    assign_owners([AGENT, WORKER, ProcFacts(21, 210, "worker", ppid=20, sid=20)], memo, replicas)
    new_replica = ProcFacts(21, 999, "worker", ppid=10, sid=21)  # same pid, later start
    assert assign_owners([AGENT, new_replica], memo, replicas)[new_replica.key] is None


def test_agents_and_strangers_are_nobody_s_children() -> None:
    sibling = ProcFacts(30, 300, "worker", ppid=10, sid=30)  # the agent's second worker
    stranger = ProcFacts(40, 400, "other", ppid=1, sid=40)
    assert owners([AGENT, WORKER, sibling, stranger]) == {10: None, 20: None, 30: None, 40: None}


def test_an_agent_fork_that_has_not_exec_d_yet_becomes_a_replica_after_exec() -> None:
    memo: dict[tuple[int, int], int | None] = {}
    replicas: set[int] = set()
    unborn = ProcFacts(20, 200, "agent", ppid=10, sid=20)  # still shows the agent's argv
    assign_owners([AGENT, unborn], memo, replicas)
    assign_owners([AGENT, WORKER], memo, replicas)
    orphan = ProcFacts(26, 260, "worker", ppid=1, sid=20)
    assert assign_owners([AGENT, orphan], memo, replicas)[orphan.key] == 20


@given(st.permutations(range(4)))
def test_the_order_a_sample_lists_processes_in_changes_nothing(order: list[int]) -> None:
    procs = [
        AGENT,
        WORKER,
        ProcFacts(21, 210, "worker", ppid=20, sid=20),
        ProcFacts(23, 230, "worker", ppid=21, sid=20),
    ]
    assert owners([procs[i] for i in order]) == {10: None, 20: None, 21: 20, 23: 20}


def test_classify_marks_children_and_keeps_replicas() -> None:
    def rep(pid: int, start: int, role: str, ppid: int, sid: int) -> Replica:
        rank = None if role == "agent" else 0
        return Replica(pid, start, role, "n1", rank=rank, ppid=ppid, sid=sid)

    got = Lineage().classify(
        [
            rep(10, 100, "agent", 1, 10),
            rep(20, 200, "worker", 10, 20),
            rep(21, 210, "worker", 20, 20),
        ]
    )
    assert [(r.pid, r.role, r.owner) for r in got] == [
        (10, "agent", None),
        (20, "worker", None),
        (21, "child", 20),
    ]


def test_a_child_that_announced_itself_is_the_replica_and_its_launcher_a_wrapper() -> None:
    # sh -c "python train.py": sh (20) holds RANK first; python (21) announced run_start;
    # python's DataLoader worker (22) was filed under sh by the sampler.
    keys = {20: (20, 200), 21: (21, 210), 22: (22, 220)}
    sampled = {keys[20]: None, keys[21]: 20, keys[22]: 20}
    parents = {keys[20]: 10, keys[21]: 20, keys[22]: 21}
    fixed, wrappers = promote_announced(sampled, parents, announced={21})
    assert fixed == {keys[20]: None, keys[21]: None, keys[22]: 21}
    assert wrappers == {20}


def test_nothing_announced_below_a_replica_changes_nothing() -> None:
    sampled = {(20, 200): None, (21, 210): 20}
    fixed, wrappers = promote_announced(sampled, {(20, 200): 10, (21, 210): 20}, {20})
    assert (fixed, wrappers) == (sampled, set())


def test_two_announced_processes_in_one_tree_are_both_replicas() -> None:
    # the stale-replica known-bad mode: a worker's detached copy announces the same rank
    sampled = {(20, 200): None, (21, 210): 20}
    fixed, wrappers = promote_announced(sampled, {(20, 200): 10, (21, 210): 20}, {20, 21})
    assert fixed == {(20, 200): None, (21, 210): None}
    assert wrappers == set()


def test_every_child_has_a_replica_above_it() -> None:
    # a wide tree in every listing order: owners are always replicas, never children
    tree = [AGENT, WORKER] + [
        ProcFacts(21 + i, 210 + i, "worker", ppid=20 + i, sid=20) for i in range(5)
    ]
    for perm in itertools.islice(itertools.permutations(tree), 50):
        got = owners(list(perm))
        replicas = {pid for pid, o in got.items() if o is None}
        assert all(o in replicas for o in got.values() if o is not None)
