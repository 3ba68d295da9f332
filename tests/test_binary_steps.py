"""Binary step records (``probe-rank<R>.steps``): the probe writes them behind the same
``Probe.step`` call, and every reader (``Timeline.load``, the step store, the engine's
watch) gives what the JSON step lines give for the same steps; damaged, torn, edited or
foreign step files are counted, never raised on, and never trusted past their hash."""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import faultdrill.probe as probe_mod
from faultdrill.archive.bundle import make_bundle, verify_bundle
from faultdrill.cli import main
from faultdrill.engine.watch import Watch
from faultdrill.probe import STEP_RECORD, STEP_TAG, Probe, step_file_header
from faultdrill.report.model import read_report
from faultdrill.timeline import Timeline
from faultdrill.timeline.store import STORE_DIR, StepStoreWriter, read_store
from tests.drillkit import same_timeline

FIXTURE = Path(__file__).parent / "fixtures" / "run-0.1.0-kill-worker.tar.xz"


@pytest.fixture()
def clock(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Every probe's ``mono`` from one counter (the wall clock fixed), so two writes of the
    same steps are equal; calling the fixture's value starts the counter again."""
    ticks = [iter(range(1, 1 << 30))]

    def mono_clock() -> Callable[[], float]:
        return lambda: next(ticks[0]) / 1000

    def restart() -> None:
        ticks[0] = iter(range(1, 1 << 30))

    monkeypatch.setattr(probe_mod, "mono_clock", mono_clock)
    monkeypatch.setattr(probe_mod, "time", SimpleNamespace(time=lambda: 1.0))
    return restart


def _write(events: Path, binary: bool, steps: range = range(1, 61), seed: int = 3) -> None:
    """Two ranks' steps with every shape a job may give (one range, several ranges, no
    loss, a NaN loss, no ids), saves, and a line that is not JSON."""
    rnd = random.Random(seed)
    probes = [Probe(events, rank=r, task_id="t", binary_steps=binary) for r in (0, 1)]
    for p in probes:
        if steps.start == 1:
            p.run_start(world_size=2)
    for s in steps:
        for r, p in enumerate(probes):
            shape = rnd.random()
            if shape < 0.6:
                p.step(s, 2.0 - s / 100, range(s * 8 + r * 4, s * 8 + r * 4 + 4))
            elif shape < 0.7:
                p.step(s, None, [s * 8, s * 8 + 2, s * 8 + 5])  # several ranges: a JSON line
            elif shape < 0.8:
                p.step(s, float("nan"), [])
            elif shape < 0.9:
                p.step(s, None, [s * 8 + r])
            else:
                p.step(s, float("inf"), range(s * 8 + r * 4, s * 8 + r * 4 + 4))
            if s % 10 == 0:
                p.checkpoint_saved(
                    ckpt_id=f"c{s}", step=s, path="p", sha256="x", data_position=s * 8
                )
    for p in probes:
        p.close()
    with open(events / "probe-rank1.jsonl", "a") as f:
        f.write("not json {\n")


def test_binary_steps_load_as_the_json_lines_do(tmp_path: Path, clock: Callable[[], None]) -> None:
    as_json, as_binary = tmp_path / "json", tmp_path / "binary"
    _write(as_json, binary=False)
    clock()
    _write(as_binary, binary=True)
    assert sorted(p.name for p in as_binary.glob("*.steps")) == [
        "probe-rank0.steps",
        "probe-rank1.steps",
    ]
    assert b'"kind":"step"' in (as_binary / "probe-rank0.jsonl").read_bytes()  # 3 ranges
    json_tl, binary_tl = Timeline.load(as_json), Timeline.load(as_binary)
    same_timeline(json_tl, binary_tl)
    assert len(binary_tl.steps) == 120 and binary_tl.bad_lines == {
        "probe-rank1.jsonl": (1, "probe")
    }
    same_timeline(binary_tl, Timeline.load(as_binary, readers=2))  # in child readers too
    loss = binary_tl.steps.loss
    assert np.isnan(loss).any() and np.isposinf(loss).any()  # not reported; a reported NaN


def test_the_store_of_binary_steps_is_what_the_files_give(
    tmp_path: Path, clock: Callable[[], None]
) -> None:
    events = tmp_path / "events"
    watch = Watch(events, StepStoreWriter(events))
    for first in (1, 21, 41):  # the job writes, the harness polls, the job writes on
        _write(events, binary=True, steps=range(first, first + 20), seed=first)
        watch.poll()
    with open(events / "probe-rank1.steps", "ab") as f:
        f.write(STEP_RECORD.pack(99.0, 1, 1, 61, 1.0, 1, STEP_TAG, 0, 1)[:30])  # torn
    watch.close()
    assert watch.max_step == 60 and watch.saves == 12 and watch.ranks_seen == {0, 1}
    stored = read_store(events)
    assert stored is not None
    size = (events / "probe-rank1.steps").stat().st_size
    assert stored.covered["probe-rank1.steps"] == size - 30  # whole records only
    from_store, from_files = Timeline.load(events), Timeline.load(events, use_store=False)
    same_timeline(from_store, from_files)
    assert from_files.torn_lines == 3 + 1  # the not-JSON lines; the torn record
    assert from_files.bad_lines == {"probe-rank1.jsonl": (3, "probe")}


@pytest.mark.parametrize("damage", ["edited", "truncated", "column"])
def test_a_store_whose_step_file_changed_is_ignored(
    tmp_path: Path, clock: Callable[[], None], damage: str
) -> None:
    events = tmp_path / "events"
    _write(events, binary=True)
    Watch(events, StepStoreWriter(events)).close()
    path = events / "probe-rank0.steps"
    data = bytearray(path.read_bytes())
    head = len(step_file_header(0, "t"))
    step_at = head + 16  # the first record's step
    if damage == "edited":  # a step number changed under the store
        data[step_at : step_at + 8] = (7777).to_bytes(8, "little")
    elif damage == "truncated":
        data = data[: len(data) // 2]
    else:
        (events / STORE_DIR / "loss.f8").write_bytes(b"")
    path.write_bytes(bytes(data))
    assert read_store(events) is None
    loaded = Timeline.load(events)
    same_timeline(loaded, Timeline.load(events, use_store=False))
    assert (7777 in loaded.steps.step) == (damage == "edited")  # judged from the file


def _record(**fields: Any) -> bytes:
    values = {"mono": 1.0, "rank": 0, "pid": 9, "step": 1, "loss": 1.0, "count": 1}
    values.update(flags=STEP_TAG, start=0, end=4)
    values.update(fields)
    return STEP_RECORD.pack(*values.values())


@pytest.mark.parametrize(
    ("content", "bad", "torn"),
    [
        (b"PK\x03\x04 a zip, not a step file", 1, 0),
        (step_file_header(0, "t")[:10], 0, 1),  # the header torn by a kill
        (step_file_header(0, "t") + _record() + b"\0" * STEP_RECORD.size, 1, 0),  # zero-filled
        (step_file_header(0, "t") + _record(count=5) + _record(step=2), 1, 0),
        (step_file_header(0, "t") + _record(mono=float("nan")), 1, 0),
        (step_file_header(0, "t") + _record(flags=0x12345678), 1, 0),
        (step_file_header(0, "t") + _record() + _record()[:20], 0, 1),  # a torn last record
        (b"FDSTEPS\n" + (9).to_bytes(4, "little") + bytes(40), 1, 0),  # another version
    ],
    ids=["foreign", "torn-header", "zeros", "count", "nan-time", "tag", "torn", "version"],
)
def test_a_damaged_step_file_is_counted_never_raised_on(
    tmp_path: Path, content: bytes, bad: int, torn: int
) -> None:
    (tmp_path / "probe-rank0.steps").write_bytes(content)
    tl = Timeline.load(tmp_path)
    assert tl.torn_lines == bad + torn
    assert bool(tl.bad_lines) == bool(bad)
    watch = Watch(tmp_path, StepStoreWriter(tmp_path))
    watch.close()  # the watch never raises on it either, and the store agrees
    same_timeline(Timeline.load(tmp_path), tl)


def test_a_step_file_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.steps"
    outside.write_bytes(step_file_header(0, "t") + _record())
    events = tmp_path / "events"
    events.mkdir()
    os.symlink(outside, events / "probe-rank0.steps")
    tl = Timeline.load(events)
    assert len(tl.steps) == 0 and tl.bad_lines == {"probe-rank0.steps": (1, "")}


def test_the_watch_sees_binary_steps_and_a_nonfinite_loss(tmp_path: Path) -> None:
    probe = Probe(tmp_path, rank=3, task_id="t", binary_steps=True)
    watch = Watch(tmp_path)
    watch.poll()
    assert watch.max_step == 0  # only the header so far
    probe.step(1, 2.0, range(0, 4))
    probe.step(2, None, range(4, 8))  # not reported: not non-finite
    watch.poll()
    assert (watch.max_step, watch.nonfinite) == (2, None)
    probe.step(3, float("nan"), range(8, 12))
    probe.close()
    watch.poll()
    assert watch.max_step == 3 and watch.nonfinite == "rank 3 step 3 loss nan"


def test_a_restarted_rank_completes_a_torn_record_and_appends(tmp_path: Path) -> None:
    first = Probe(tmp_path, rank=0, task_id="t", binary_steps=True)
    first.step(1, 1.0, range(0, 4))
    first.close()
    with open(tmp_path / "probe-rank0.steps", "ab") as f:
        f.write(_record(step=2)[:25])  # killed mid-write
    again = Probe(tmp_path, rank=0, task_id="t", binary_steps=True)
    again.step(2, 1.0, range(4, 8))
    again.close()
    tl = Timeline.load(tmp_path)
    assert list(tl.steps.step) == [1, 2] and tl.torn_lines == 1  # the completed record


def test_steps_the_binary_file_cannot_hold_stay_json_lines(tmp_path: Path) -> None:
    (tmp_path / "probe-rank0.steps").write_bytes(b"not ours")
    foreign = Probe(tmp_path, rank=0, task_id="t", binary_steps=True)
    foreign.step(1, 1.0, range(0, 4))  # the file is not a step file: left as it is
    foreign.close()
    assert (tmp_path / "probe-rank0.steps").read_bytes() == b"not ours"
    probe = Probe(tmp_path, rank=1, task_id="t", binary_steps=True)
    probe.step(2**70, 1.0, range(0, 4))  # no int64: a JSON line, judged there
    probe.close()
    lines = (tmp_path / "probe-rank0.jsonl").read_text() + (
        tmp_path / "probe-rank1.jsonl"
    ).read_text()
    assert lines.count('"kind":"step"') == 2


def test_the_environment_turns_binary_steps_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAULTDRILL_EVENTS_DIR", str(tmp_path))
    monkeypatch.setenv("FAULTDRILL_STEP_FORMAT", "binary")
    probe = probe_mod.probe_from_env(rank=0)
    probe.step(1, 1.0, range(0, 4))
    probe.close()
    assert (tmp_path / "probe-rank0.steps").stat().st_size == len(
        step_file_header(0, "")
    ) + STEP_RECORD.size


# --- a recorded run, re-judged with its steps as binary records ------------------------------


def _as_binary(events: Path) -> int:
    """Move the probe's step lines of ``events`` with at most one range into binary step
    files (as the probe with binary steps would have written them); returns how many."""
    moved = 0
    for path in sorted(events.glob("probe-rank*.jsonl")):
        rank = int(path.name[len("probe-rank") : -len(".jsonl")])
        kept: list[bytes] = []
        records = [step_file_header(rank, "")]
        for line in path.read_bytes().splitlines(keepends=True):
            rec = json.loads(line) if line.endswith(b"\n") else None
            if not (isinstance(rec, dict) and rec.get("kind") == "step"):
                kept.append(line)
                continue
            rng = rec["samples"][0] if rec["samples"] else (0, 0)
            if len(rec["samples"]) > 1:
                kept.append(line)
                continue
            loss = rec["loss"]
            flags = STEP_TAG | (loss is None)
            records.append(
                STEP_RECORD.pack(
                    rec["mono"],
                    rec["rank"],
                    rec["pid"],
                    rec["step"],
                    loss or 0.0,
                    len(rec["samples"]),
                    flags,
                    rng[0],
                    rng[1],
                )
            )
            moved += 1
        path.write_bytes(b"".join(kept))
        (events / f"probe-rank{rank}.steps").write_bytes(b"".join(records))
    shutil.rmtree(events / STORE_DIR, ignore_errors=True)
    return moved


def _findings(run: Path) -> Iterator[tuple[str, str, Any]]:
    report = read_report(run)
    yield "baseline", report.baseline.verdict, report.baseline.model_dump(mode="json")
    for item in report.scenarios:
        for cat, f in item.findings():
            yield item.id, cat, f.model_dump(mode="json")


def test_a_recorded_run_rejudges_the_same_with_binary_steps(tmp_path: Path) -> None:
    for name in ("json", "binary"):
        with tarfile.open(FIXTURE) as tar:
            tar.extractall(tmp_path / name, filter="data")
    as_json, as_binary = tmp_path / "json" / "run", tmp_path / "binary" / "run"
    moved = sum(_as_binary(e) for e in as_binary.glob("**/events"))
    assert moved > 100
    assert main(["check", str(as_json)]) == 0
    assert main(["check", str(as_binary)]) == 0
    for events in as_json.glob("**/events"):
        same = as_binary / events.relative_to(as_json)
        a, b = Timeline.load(events), Timeline.load(same)
        for col in ("mono", "rank", "step", "loss", "rng_start", "rng_end", "inc"):
            assert np.array_equal(getattr(a.steps, col), getattr(b.steps, col), equal_nan=True)
    assert list(_findings(as_json)) == list(_findings(as_binary))
    assert [(s.id, s.verdict) for s in read_report(as_binary).scenarios] == [
        (s.id, s.verdict) for s in read_report(as_json).scenarios
    ]
    # the bundle carries the step files, and a changed byte in one fails verification
    archive, _manifest = make_bundle(as_binary, tmp_path / "run.bundle.tar.gz")
    assert verify_bundle(archive).ok
    name = "scenarios/kill-worker/events/probe-rank1.steps"
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(archive, "r:gz") as tin, tarfile.open(bad, "w:gz") as tout:
        for m in tin:
            data = tin.extractfile(m).read() if m.isfile() else None  # type: ignore[union-attr]
            if data is not None and m.name.endswith("/" + name):
                data = data[:-9] + bytes([data[-9] ^ 1]) + data[-8:]  # the last range's end
            tout.addfile(m, io.BytesIO(data) if data is not None else None)
    assert verify_bundle(bad).modified == [name]
