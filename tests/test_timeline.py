"""Timeline derivations: incarnations, process lives, the committed chain, loading files."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from faultdrill.timeline import ProcLife, Segment, StepTable, Timeline
from tests.timelines import NEW, NEWER, OLD, TL, A, B, C, baseline, ids, restart


def two_restarts() -> TL:
    """Incarnation 0 runs 1-5 (ckpt-2, ckpt-4); 1 resumes from ckpt-4, runs 5-7 (ckpt-6) and
    dies; 2 resumes from ckpt-6 and finishes at step 8."""
    tl = restart(last=7).drop("probe", "run_end").drop("platform", "job_state")
    for rank, pid in enumerate(NEWER):
        tl.run_start(rank, pid, C, 12.0).load(rank, pid, "ckpt-6", 6, 12.1)
        tl.steps(pid, rank, range(7, 9), t0=13.0).end(rank, pid, 8, 15.0)
    return tl.save(0, NEWER[0], "ckpt-8", 8, 14.5).job("succeeded", 15.5)


# --- incarnations -----------------------------------------------------------------------


def test_incarnations_are_grouped_by_master_endpoint() -> None:
    tl = restart().build()
    old, new = tl.incarnations
    assert (old.index, old.master, old.members) == (0, A, {100: 0, 101: 1})
    assert (new.index, new.master, new.members) == (1, B, {200: 0, 201: 1})
    assert (old.first_step, old.last_step, old.first_step_mono, old.last_step_mono) == (
        1,
        5,
        1.0,
        5.0,
    )
    assert (new.first_step, new.last_step, new.first_step_mono, new.last_step_mono) == (
        5,
        6,
        8.0,
        9.0,
    )
    assert (new.started_mono, new.ready_mono, new.world_size) == (7.0, 7.0, 2)
    assert new.ranks == [0, 1] and new.nodes == ["n0", "n1"]
    assert [e.kind for e in old.loads] == ["ckpt_none", "ckpt_none"] and old.resume_step == 0
    assert [e.kind for e in new.loads] == ["ckpt_load", "ckpt_load"] and new.resume_step == 4
    assert (old.ends, [e["status"] for e in new.ends]) == ([], ["ok", "ok"])
    assert list(tl.steps.inc) == [0] * 10 + [1] * 4


def test_a_generation_is_ready_when_its_last_replica_announced_itself() -> None:
    tl = restart().edit("probe", "run_start", lambda r: r["pid"] == NEW[1], mono=7.4).build()
    assert (tl.incarnations[1].started_mono, tl.incarnations[1].ready_mono) == (7.0, 7.4)


def test_one_master_makes_one_incarnation_whatever_the_order() -> None:
    tl = TL()
    for pid, rank, master, t in [(1, 0, A, 0.0), (2, 0, B, 1.0), (3, 1, A, 2.0), (4, 1, B, 3.0)]:
        tl.run_start(rank, pid, master, t)
    incs = tl.build().incarnations
    assert [(i.master, i.members) for i in incs] == [(A, {1: 0, 3: 1}), (B, {2: 0, 4: 1})]


def test_without_master_a_repeated_rank_starts_a_new_incarnation() -> None:
    tl = restart(master=None).edit("probe", "run_start", lambda r: True, master=None).build()
    assert [(i.master, i.members) for i in tl.incarnations] == [
        (None, {100: 0, 101: 1}),
        (None, {200: 0, 201: 1}),
    ]
    assert tl.incarnations[1].resume_step == 4


def test_without_master_ranks_joining_late_stay_in_their_incarnation() -> None:
    tl = TL().run_start(0, 1, None, 0.0).run_start(1, 2, None, 0.5).run_start(0, 3, None, 5.0)
    tl.run_start(1, 4, None, 5.1).run_start(1, 5, None, 6.0)
    assert [i.members for i in tl.build().incarnations] == [{1: 0, 2: 1}, {3: 0, 4: 1}, {5: 1}]


def test_a_stale_replica_announcing_the_old_master_joins_the_old_incarnation() -> None:
    # pid 150 restarts rank 1 inside the old rendezvous round, after the new round began
    tl = restart().run_start(1, 150, A, 7.5).build()
    assert len(tl.incarnations) == 2
    old = tl.incarnations[0]
    assert old.members == {100: 0, 101: 1, 150: 1}
    assert old.duplicate_ranks() == {1: [101, 150]}
    assert tl.incarnations[1].duplicate_ranks() == {}
    assert tl.inc_of_pid(150) == 0


def test_the_resume_decision_is_the_lowest_ranks_load() -> None:
    tl = restart().edit("probe", "ckpt_load", lambda r: r["rank"] == 1, id="ckpt-2", step=2)
    new = tl.build().incarnations[1]
    assert new.load is not None and new.load["id"] == "ckpt-4"
    assert new.resume_step == 4


def test_an_incarnation_without_a_load_decision_has_no_resume_step() -> None:
    new = restart().drop("probe", "ckpt_load").build().incarnations[1]
    assert (new.load, new.resume_step) == (None, None)


def test_incarnation_at_and_after() -> None:
    tl = two_restarts().build()
    at = [tl.incarnation_at(t) for t in (-1.0, 0.0, 6.9, 7.0, 100.0)]
    assert [i.index if i else None for i in at] == [None, 0, 0, 1, 2]
    after = [tl.incarnation_after(t) for t in (-1.0, 0.0, 5.5, 12.0)]
    assert [i.index if i else None for i in after] == [0, 1, 1, None]


def test_final_incarnation_prefers_one_that_ended_ok() -> None:
    tl = restart().step(OLD[0], 0, 6, 12.0, [ids(6, 0)])  # a stale step after the clean end
    assert tl.build().final_incarnation().index == 1  # type: ignore[union-attr]
    no_end = restart().drop("probe", "run_end").build()
    assert no_end.final_incarnation().index == 1  # type: ignore[union-attr]
    assert TL().run_start(0, 1, A, 0.0).build().final_incarnation() is None


# --- unknown processes ------------------------------------------------------------------


def test_steps_of_unknown_pids_belong_to_no_incarnation() -> None:
    tl = restart().step(999, 0, 3, 4.5, [[1000, 1002]])
    tl.load(0, 999, "ckpt-2", 2, 4.4)
    timeline = tl.build()
    assert timeline.unknown_step_rows == 1
    assert timeline.inc_of_pid(999) is None
    row = int(np.flatnonzero(timeline.steps.pid == 999)[0])
    assert timeline.steps.inc[row] == -1
    assert all(e.get("pid") != 999 for i in timeline.incarnations for e in i.loads)
    assert timeline.incarnations[0].last_step == 5  # unaffected
    assert restart().build().unknown_step_rows == 0


# --- the committed chain ----------------------------------------------------------------


def test_committed_chain_of_a_single_run() -> None:
    tl = baseline().build()
    assert tl.committed_chain() == ([Segment(0, 1, 6)], [])
    assert tl.recomputed([Segment(0, 1, 6)]) == []


def test_committed_chain_through_one_restart() -> None:
    tl = restart().build()
    chain, notes = tl.committed_chain()
    assert (chain, notes) == ([Segment(0, 1, 4), Segment(1, 5, 6)], [])
    assert tl.recomputed(chain) == [Segment(0, 5, 5)]


def test_committed_chain_through_two_restarts() -> None:
    tl = two_restarts().build()
    chain, notes = tl.committed_chain()
    assert (chain, notes) == ([Segment(0, 1, 4), Segment(1, 5, 6), Segment(2, 7, 8)], [])
    assert sum(s.steps for s in chain) == 8
    assert tl.recomputed(chain) == [Segment(0, 5, 5), Segment(1, 7, 7)]
    rows = tl.rows_in(chain)
    assert int(rows.sum()) == 16
    committed = tl.steps.take(rows)
    assert sorted(zip(committed.step.tolist(), committed.rank.tolist(), strict=True)) == [
        (s, r) for s in range(1, 9) for r in (0, 1)
    ]


def test_committed_chain_after_a_restart_from_scratch() -> None:
    tl = restart(resume=None).build()
    assert tl.committed_chain() == ([Segment(1, 1, 6)], [])
    assert tl.recomputed([Segment(1, 1, 6)]) == [Segment(0, 1, 5)]


def test_committed_chain_notes_where_it_breaks() -> None:
    unsaved = restart().drop("probe", "ckpt_save", lambda r: r["id"] == "ckpt-4").build()
    assert unsaved.committed_chain() == (
        [Segment(1, 5, 6)],
        ["incarnation 1 loaded checkpoint 'ckpt-4', which no replica of this run reported saving"],
    )
    foreign = restart().edit("probe", "ckpt_save", lambda r: r["id"] == "ckpt-4", pid=999)
    assert foreign.build().committed_chain()[1] == [
        "writer of checkpoint 'ckpt-4' is not a known earlier incarnation"
    ]
    undecided = restart().drop("probe", "ckpt_load").build()
    assert undecided.committed_chain() == (
        [Segment(1, 5, 6)],
        ["incarnation 1 recorded no checkpoint load decision"],
    )
    assert TL().build().committed_chain() == ([], ["no incarnation made progress"])


def test_segment_steps() -> None:
    assert (Segment(0, 5, 6).steps, Segment(0, 5, 5).steps, Segment(0, 5, 4).steps) == (2, 1, 0)


def test_checkpoint_saves_keep_the_last_save_of_an_id() -> None:
    tl = restart().save(0, NEW[0], "ckpt-4", 4, 8.2).build()
    assert tl.checkpoint_saves()["ckpt-4"]["pid"] == NEW[0]
    assert sorted(tl.checkpoint_saves()) == ["ckpt-2", "ckpt-4", "ckpt-6"]


# --- process lives ----------------------------------------------------------------------


def test_process_lives_from_the_sampler() -> None:
    tl = restart().proc(90, None, 0.0, role="agent").build()
    by_pid = {p.pid: p for p in tl.procs}
    assert by_pid[101] == ProcLife(
        pid=101,
        start_time=1010,
        role="worker",
        rank=1,
        node="n1",
        seen_mono=0.05,
        gone_mono=6.5,
        last_seen_mono=6.2,
        gone_by="sampled",
    )
    agent = by_pid[90]
    assert (agent.role, agent.rank, agent.gone_mono) == ("agent", None, None)
    assert agent.last_seen_mono == 10.5  # alive at the end: the last sample taken
    assert [p.pid for p in tl.iter_procs("agent")] == [90]
    assert [p.pid for p in tl.procs] == [90, 100, 101, 200, 201]  # by first sighting
    assert by_pid[101].seen_alive_at(6.2) and not by_pid[101].seen_alive_at(6.3)


def test_an_exit_event_is_when_the_process_ended() -> None:
    """The exit event (the kernel's or the pidfd's time) wins over the sample that missed
    the process; without one, the sample's time stands. An exit stamped before the sample
    that first described the process counts as at that sample."""
    tl = (
        TL()
        .proc(7, 0, 1.0, 2.0, exited=1.9634)  # exited 1.9634, noticed by sampling at 2.0
        .proc(8, 0, 1.0, 2.0, exited=1.95, clock="pidfd")
        .proc(9, 0, 1.0, 2.0)  # sampling only
        .proc(10, 0, 1.0, exited=0.99)  # ended while its first sample was written
        .build()
    )
    by_pid = {p.pid: p for p in tl.procs}
    assert [(by_pid[p].gone_mono, by_pid[p].gone_by) for p in (7, 8, 9, 10)] == [
        (1.9634, "kernel"),
        (1.95, "pidfd"),
        (2.0, "sampled"),
        (1.0, "kernel"),
    ]
    assert by_pid[7].last_seen_mono == 1.9634  # alive until it exited
    assert by_pid[7].seen_alive_at(1.96) and not by_pid[7].seen_alive_at(1.97)
    assert by_pid[9].last_seen_mono == 1.9  # the last sample it was present in


def test_a_reused_pid_is_a_different_process() -> None:
    tl = TL().proc(5, 0, 1.0, 2.0, start_time=1).proc(5, 0, 3.0, 4.0, start_time=2).build()
    assert [(p.start_time, p.seen_mono, p.gone_mono) for p in tl.procs] == [
        (1, 1.0, 2.0),
        (2, 3.0, 4.0),
    ]


# --- building and loading ---------------------------------------------------------------


def test_from_records_sorts_whatever_the_input_order() -> None:
    records = restart().records()
    random.Random(7).shuffle(records)
    tl = Timeline.from_records(records)
    assert tl.task_id == "drill"
    assert [e.mono for e in tl.events] == sorted(e.mono for e in tl.events)
    assert np.all(np.diff(tl.steps.mono) >= 0)
    # a row's ranges travel with it
    for i in range(len(tl.steps)):
        lo, hi = tl.steps.rng_off[i], tl.steps.rng_off[i + 1]
        got = [
            [int(s), int(e)]
            for s, e in zip(tl.steps.rng_start[lo:hi], tl.steps.rng_end[lo:hi], strict=True)
        ]
        assert got == [ids(int(tl.steps.step[i]), int(tl.steps.rank[i]))]


def test_step_table_take_keeps_ranges_with_their_rows() -> None:
    st = StepTable.from_columns(
        [1.0, 2.0, 3.0],
        [0, 1, 0],
        [7, 8, 7],
        [1, 1, 2],
        [0.5] * 3,
        [[[0, 2], [5, 6]], [], [[2, 4]]],
    )
    assert st.rng_row.tolist() == [0, 0, 2]
    sub = st.take(np.array([False, True, True]))
    assert (sub.step.tolist(), sub.rng_off.tolist()) == ([1, 2], [0, 0, 1])
    assert (sub.rng_start.tolist(), sub.rng_end.tolist()) == ([2], [4])
    rev = st.take(np.array([2, 0]))
    assert (rev.rng_start.tolist(), rev.rng_end.tolist()) == ([2, 0, 5], [4, 2, 6])
    assert len(StepTable.empty()) == 0


def _write(path: Path, records: list[dict[str, object]], tail: bytes = b"") -> None:
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records) + tail)


def test_load_tolerates_a_torn_last_line(tmp_path: Path) -> None:
    records = restart().records()
    probe = [r for r in records if r["src"] == "probe"]
    other = [r for r in records if r["src"] != "probe"]
    _write(tmp_path / "probe-rank0.jsonl", probe, tail=b'{"src": "probe", "kind": "st')
    _write(tmp_path / "harness.jsonl", other)
    (tmp_path / "notes.txt").write_text("not an events file\n")
    tl = Timeline.load(tmp_path)
    assert tl.torn_lines == 1
    assert (len(tl.steps), len(tl.events)) == (14, len(records) - 14)
    assert tl.committed_chain()[0] == [Segment(0, 1, 4), Segment(1, 5, 6)]


def test_load_skips_unreadable_lines_and_counts_them(tmp_path: Path) -> None:
    lines = b'{"src": "harness", "kind": "a", "mono": 1}\nnot json\n[1, 2]\n'
    (tmp_path / "h.jsonl").write_bytes(lines + b'{"src": "harness", "kind": "b", "mono": 2}\n')
    tl = Timeline.load(tmp_path)
    assert [e.kind for e in tl.events] == ["a", "b"]
    assert tl.torn_lines == 2


def test_load_of_an_empty_directory(tmp_path: Path) -> None:
    tl = Timeline.load(tmp_path)
    assert (tl.events, len(tl.steps), tl.incarnations, tl.torn_lines) == ([], 0, [], 0)


# --- the probe's step lines: decoded without JSON, to the same values --------------------


def _probe_lines(tmp_path: Path) -> list[bytes]:
    """Step lines as the real probe writes them, then hand-made ones in the probe's layout
    with edge values: each must load exactly as the JSON decoder reads it (or be refused
    the same way)."""
    from faultdrill.probe import Probe

    probe = Probe(tmp_path / "written", rank=1, task_id='t\u00e9/"x"')
    probe.run_start(world_size=2)
    probe.step(1, 2.5, range(0, 64))
    probe.step(2, float("nan"), [])
    probe.step(3, float("inf"), [64, 65, 70])  # two ranges: not the fast layout
    probe.step(4, -1e-7, range(128, 192))
    probe.step(5, None, range(192, 256))  # a step that reported no loss
    probe.close()
    lines = (tmp_path / "written").glob("*.jsonl")
    written = [ln for f in sorted(lines) for ln in f.read_bytes().splitlines(keepends=True)]
    head = b'{"src": "probe", "task": "t", "rank": 0, "pid": 7,"ts":1.5,"mono":'
    hand = [
        b'2.0,"kind":"step","step":5,"loss":-Infinity,"samples":[[-3,0]]}\n',
        b'2.1,"kind":"step","step":01,"loss":1.0,"samples":[]}\n',  # not JSON: torn
        b'2.2,"kind":"step","step":6,"loss":1e400,"samples":[[1,2]]}\n',  # inf, as json reads it
        b'2.3,"kind":"step","step":99999999999999999999,"loss":1.0,"samples":[]}\n',  # overflow
        b'2.4,"kind":"step","step":7,"loss":1.0,"samples":[[1,2]],"x":1}\n',  # extra field
        b'2.5,"kind":"step","step":8,"loss":1.0,"samples":[[1,2]]}',  # torn: no newline
    ]
    tab = b'{"src": "probe", "task": "a\tb", "rank": 0, "pid": 7,"ts":1.5,"mono":'
    return [*written, *(head + h for h in hand), tab + hand[0]]


def _same_steps(a: StepTable, b: StepTable) -> None:
    for col in ("mono", "rank", "pid", "step", "loss", "rng_off", "rng_start", "rng_end"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)


def test_probe_step_lines_load_as_the_json_decoder_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import faultdrill.timeline.reader as reader

    lines = _probe_lines(tmp_path)
    events = tmp_path / "events"
    events.mkdir()
    (events / "probe-rank0.jsonl").write_bytes(b"".join(lines[:-1]))
    (events / "probe-rank9.jsonl").write_bytes(lines[-1])
    fast = Timeline.load(events)
    decoded: list[bytes] = []
    real_parse = reader._parse_line

    def counted_parse(line: bytes) -> dict[str, object] | None:
        decoded.append(line)
        return real_parse(line)

    monkeypatch.setattr(reader, "_parse_line", counted_parse)
    Timeline.load(events)
    # Only the lines outside the probe's usual step layout went through the JSON decoder.
    assert len(decoded) == 6, decoded
    monkeypatch.setattr(reader, "_probe_step_line", lambda ln: None)
    slow = Timeline.load(events)
    assert len(fast.steps) == 8 and fast.torn_lines == 4
    # "not reported" (null) is NaN; a reported NaN is +inf: both paths keep them apart
    mine = fast.steps.rank == 1
    loss = dict(zip(fast.steps.step[mine].tolist(), fast.steps.loss[mine].tolist(), strict=True))
    assert np.isnan(loss[5]) and loss[2] == np.inf
    assert (fast.task_id, fast.torn_lines, len(fast.events)) == (
        slow.task_id,
        slow.torn_lines,
        len(slow.events),
    )
    assert fast.task_id == 't\u00e9/"x"'
    _same_steps(fast.steps, slow.steps)


def test_several_readers_load_what_one_reader_loads(tmp_path: Path) -> None:
    """Files read by two processes (forced; big runs do so on their own) join in file
    order: the same steps, events, task and torn-line count as one reader."""
    from faultdrill.probe import Probe

    for rank in range(3):
        probe = Probe(tmp_path, rank=rank, task_id="t")
        probe.run_start(world_size=3)
        for step in range(1, 40):
            probe.step(step, 1.0 / step, range(step * 9 + rank * 3, step * 9 + rank * 3 + 3))
        probe.close()
    with open(tmp_path / "probe-rank1.jsonl", "ab") as f:
        f.write(b'not json\n{"src": "probe", "kind": "step", "mono": "x", "step": 1}\n')
    from faultdrill.timeline.reader import _read_in_parallel

    parts = _read_in_parallel(sorted(tmp_path.glob("*.jsonl")), 2)
    assert parts is not None and [len(p.events) for p in parts] == [2, 1]  # two processes
    one = Timeline.load(tmp_path, readers=1)
    two = Timeline.load(tmp_path, readers=2)
    assert len(one.steps) == 3 * 39 and one.torn_lines == 2
    assert (two.task_id, two.torn_lines, len(two.events)) == ("t", 2, 3)
    assert [e.to_json() for e in two.events] == [e.to_json() for e in one.events]
    _same_steps(one.steps, two.steps)
    np.testing.assert_array_equal(one.steps.inc, two.steps.inc)


def test_split_by_size_keeps_file_order_and_balances_bytes() -> None:
    from faultdrill.timeline.reader import _split_by_size

    paths = [Path(f"f{i}") for i in range(6)]
    groups = _split_by_size(paths, [10, 10, 10, 10, 10, 10], 2)
    assert groups == [paths[:3], paths[3:]]
    assert _split_by_size(paths, [100, 1, 1, 1, 1, 1], 3)[0] == paths[:1]
    assert [p for g in _split_by_size(paths, [5, 1, 9, 2, 7, 3], 4) for p in g] == paths
    assert _split_by_size(paths[:1], [10], 4) == [paths[:1]]


def test_a_reader_that_fails_leaves_the_load_to_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import faultdrill.timeline.reader as reader
    from faultdrill.probe import Probe

    for rank in range(2):
        probe = Probe(tmp_path, rank=rank, task_id="t")
        probe.step(1, 0.5, range(rank, rank + 1))
        probe.close()
    monkeypatch.setattr(sys, "executable", "/bin/false")
    assert reader._read_in_parallel(sorted(tmp_path.glob("*.jsonl")), 2) is None
    tl = Timeline.load(tmp_path, readers=2)
    assert len(tl.steps) == 2 and tl.task_id == "t"


def test_committed_chain_follows_the_save_a_load_read_not_a_later_resave() -> None:
    # Lightning writes the checkpoint it resumed from again right after the resume: the
    # chain must still lead to the incarnation whose save the load read.
    tl = restart().save(0, NEW[0], "ckpt-4", 4, 7.5).build()
    assert tl.committed_chain() == ([Segment(0, 1, 4), Segment(1, 5, 6)], [])
