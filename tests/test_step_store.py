"""The columnar step store: written by the engine's watch while probe files grow, read by
``Timeline.load``. Whatever the store holds, the timeline is the one the JSON lines give
(the evidence of record): complete, lagging, damaged or absent."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from faultdrill.engine.watch import Watch
from faultdrill.probe import Probe
from faultdrill.timeline import Timeline
from faultdrill.timeline.store import STORE_DIR, StepStoreWriter, read_store

COLUMNS = ("mono", "rank", "pid", "step", "loss", "rng_start", "rng_end", "inc")


def _same(a: Timeline, b: Timeline) -> None:
    for col in COLUMNS:
        x, y = getattr(a.steps, col), getattr(b.steps, col)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), col
    assert np.array_equal(a.steps.rng_off, b.steps.rng_off)
    assert a.steps.one_range_each == b.steps.one_range_each
    assert [e.to_json() for e in a.events] == [e.to_json() for e in b.events]
    assert (a.torn_lines, a.task_id) == (b.torn_lines, b.task_id)
    assert [i.members for i in a.incarnations] == [i.members for i in b.incarnations]


def _write(events: Path, rank: int, steps: range, rnd: random.Random, odd: bool) -> None:
    """Steps as the probe writes them, with every shape a job may give: ids as a range,
    as non-consecutive ids (several ranges), no loss, a NaN loss, no ids; and lines that
    are not steps, or not JSON at all."""
    probe = Probe(events, rank=rank, task_id="t")
    if steps.start == 1:
        probe.run_start(world_size=2)
        probe.no_checkpoint()
    for s in steps:
        shape = rnd.random() if odd else 0.0
        if shape < 0.7:
            probe.step(s, 2.0 - s / 100, range(s * 8 + rank * 4, s * 8 + rank * 4 + 4))
        elif shape < 0.8:
            probe.step(s, None, [s * 8, s * 8 + 2, s * 8 + 5])
        elif shape < 0.9:
            probe.step(s, float("nan"), [])
        else:
            probe.step(s, 1.0, range(s * 8, s * 8 + 4))
            probe.emit("note", n=s)
        if s % 10 == 0:
            probe.checkpoint_saved(
                ckpt_id=f"c{s}", step=s, path="p", sha256="x", data_position=s * 8
            )
    probe.close()
    if odd:
        with open(events / f"probe-rank{rank}.jsonl", "a") as f:
            f.write("not json {\n")
            f.write(json.dumps({"src": "probe", "kind": "step", "rank": rank, "step": 3}) + "\n")
            f.write(json.dumps({"src": "harness", "kind": "x", "mono": "soon"}) + "\n")


@pytest.mark.parametrize("odd", [False, True], ids=["probe-shapes", "every-shape"])
def test_the_store_gives_the_timeline_the_json_lines_give(tmp_path: Path, odd: bool) -> None:
    events = tmp_path / "events"
    events.mkdir()
    (events / "harness.jsonl").write_text(
        json.dumps({"src": "harness", "kind": "item_start", "mono": 0.0, "ts": 1.0}) + "\n"
    )
    rnd = random.Random(3)
    watch = Watch(events, StepStoreWriter(events))
    for first in (1, 21, 41):  # the job writes, the harness polls, the job writes on...
        for rank in (0, 1):
            _write(events, rank, range(first, first + 20), rnd, odd)
        watch.poll()
    with open(events / "probe-rank1.jsonl", "a") as f:
        f.write('{"src": "probe", "kind": "step", "mo')  # torn: a writer killed mid-line
    watch.close()
    assert watch.max_step == 60 and watch.saves == 12 and watch.ranks_seen == {0, 1}
    stored = read_store(events)
    assert stored is not None and stored.columns[0].size > 0
    sizes = {p.name: p.stat().st_size for p in events.glob("probe-rank*.jsonl")}
    assert stored.covered["probe-rank0.jsonl"] == sizes["probe-rank0.jsonl"]
    assert stored.covered["probe-rank1.jsonl"] < sizes["probe-rank1.jsonl"]  # not the torn line
    from_store, from_json = Timeline.load(events), Timeline.load(events, use_store=False)
    _same(from_store, from_json)
    assert from_store.steps.one_range_each != odd
    assert len(from_store.steps) == 120
    # per write: not JSON, a step without mono, a time that is no number; the torn line
    assert from_json.torn_lines == (3 * 2 * 3 if odd else 0) + 1


def test_a_store_that_lags_is_completed_from_the_json_lines(tmp_path: Path) -> None:
    events = tmp_path / "events"
    rnd = random.Random(4)
    _write(events, 0, range(1, 30), rnd, False)
    watch = Watch(events, StepStoreWriter(events))
    watch.poll()
    assert watch.store is not None
    watch.store.sync()  # the harness died here: the manifest names what it had
    _write(events, 0, range(30, 50), rnd, False)
    _write(events, 1, range(1, 50), rnd, False)  # a file the store never saw
    stored = read_store(events)
    assert stored is not None and stored.columns[3].max() == 29
    loaded = Timeline.load(events)
    _same(loaded, Timeline.load(events, use_store=False))
    assert len(loaded.steps) == 29 + 20 + 49


@pytest.mark.parametrize("damage", ["truncated", "rewritten", "manifest", "column"])
def test_a_store_that_does_not_match_its_files_is_ignored(tmp_path: Path, damage: str) -> None:
    events = tmp_path / "events"
    _write(events, 0, range(1, 40), random.Random(5), False)
    watch = Watch(events, StepStoreWriter(events))
    watch.close()
    path = events / "probe-rank0.jsonl"
    text = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(text[: len(text) // 2])
    elif damage == "rewritten":  # the evidence of record changed under the store
        path.write_bytes(text[:-30] + text[-30:].replace(b"1", b"2"))
    elif damage == "manifest":
        (events / STORE_DIR / "manifest.json").write_text("{")
    else:
        (events / STORE_DIR / "step.i8").write_bytes(b"")
    assert read_store(events) is None
    _same(Timeline.load(events), Timeline.load(events, use_store=False))


def test_the_store_refuses_lines_out_of_order(tmp_path: Path) -> None:
    store = StepStoreWriter(tmp_path)
    store.add("probe-rank0.jsonl", b"", 0)
    with pytest.raises(ValueError, match="covers 0 bytes"):
        store.add("probe-rank0.jsonl", b"x\n", 10)
    store.close()
