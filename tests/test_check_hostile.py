"""``faultdrill check`` on a run directory someone else wrote (issue 21, items 3, 6-10).

Each case edits a copy of a real recorded run (``tests/hostile_run.py``: the fixture run,
with the step store the harness writes) the way the issue found it got through, then
re-judges it: never a traceback, never a hang, never "overall OK" on evidence that was
changed, and one clear message naming the file.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest

from faultdrill.judge.evaluate import evaluate_run
from faultdrill.judge.runfiles import MAX_EVIDENCE_FILE
from faultdrill.timeline import Timeline
from faultdrill.timeline.store import read_store
from tests.hostile_run import SC, check, unpack


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    return unpack(tmp_path)


def events(run: Path, name: str, item: str = SC) -> Path:
    return run / item / "events" / name


def verdicts(run: Path) -> dict[str, str]:
    """Each item's verdict in the report.json ``check`` wrote."""
    items: list[dict[str, str]] = json.loads((run / "report.json").read_text())["scenarios"]
    return {s["id"]: s["verdict"] for s in items}


def test_the_untouched_run_passes_from_its_store(run: Path) -> None:
    assert read_store(run / SC / "events") is not None
    rc, out, _ = check(run)
    assert rc == 0 and "overall OK" in out


# --- 3: the step store is a cache, verified before it is trusted -------------------------


def test_3_losses_edited_to_the_same_length_are_judged_from_the_lines(run: Path) -> None:
    probe = events(run, "probe-rank0.jsonl")
    text = probe.read_text()
    edited, n = re.subn(r'"loss":3\.(\d)', r'"loss":9.\1', text)
    assert n > 0 and len(edited) == len(text)
    probe.write_text(edited)
    assert read_store(run / SC / "events") is None  # the covered bytes' hash differs
    stored = evaluate_run(run).to_report().to_json()
    shutil.rmtree(run / SC / "events" / "steps")
    assert evaluate_run(run).to_report().to_json()["scenarios"] == stored["scenarios"]
    rc, out, _ = check(run)
    assert rc == 1 and "overall NOT OK" in out


def test_3_step_lines_overwritten_with_hashes_are_bad_lines(run: Path) -> None:
    probe = events(run, "probe-rank1.jsonl")
    lines = probe.read_bytes().splitlines(keepends=True)
    steps = [i for i, ln in enumerate(lines) if b'"kind":"step"' in ln][:30]
    for i in steps:
        lines[i] = b"#" * (len(lines[i]) - 1) + b"\n"
    probe.write_bytes(b"".join(lines))
    tl = Timeline.load(run / SC / "events")
    assert tl.bad_lines["probe-rank1.jsonl"] == (30, "probe")
    rc, out, _ = check(run)
    assert rc == 1 and "overall NOT OK" in out
    assert (
        "30 line(s) of events/probe-rank1.jsonl are not valid events"
        in (run / "report.md").read_text()
    )


def test_3_the_stores_own_lines_are_held_to_the_event_contract(run: Path) -> None:
    lines = run / SC / "events" / "steps" / "lines" / "probe-rank0.jsonl"
    first, *rest = lines.read_bytes().splitlines(keepends=True)
    obj = json.loads(first)
    obj["mono"] = float("nan")
    lines.write_bytes(json.dumps(obj).encode() + b"\n" + b"".join(rest))
    assert read_store(run / SC / "events") is None
    rc, out, _ = check(run)
    assert rc == 0 and "overall OK" in out  # judged from the lines, which are intact


def test_3_a_store_column_that_is_not_finite_is_not_trusted(run: Path) -> None:
    mono = run / SC / "events" / "steps" / "mono.f8"
    data = bytearray(mono.read_bytes())
    data[8:16] = b"\x00\x00\x00\x00\x00\x00\xf8\x7f"  # NaN
    mono.write_bytes(bytes(data))
    assert read_store(run / SC / "events") is None


@pytest.mark.parametrize("column", ["loss.f8", "step.i8", "pid.i4"])
def test_3_an_edited_store_column_is_not_trusted(run: Path, column: str) -> None:
    path = run / SC / "events" / "steps" / column
    data = bytearray(path.read_bytes())
    data[3] ^= 0x40
    path.write_bytes(bytes(data))
    assert read_store(run / SC / "events") is None
    rc, out, _ = check(run)
    assert rc == 0 and "overall OK" in out  # judged from the intact lines


def test_3_the_stores_lines_removed_are_not_taken_for_none(run: Path) -> None:
    (run / SC / "events" / "steps" / "lines" / "probe-rank0.jsonl").unlink()
    assert read_store(run / SC / "events") is None


# --- 6, 7: every read bounded, no read that blocks ---------------------------------------


def test_6_an_events_file_linked_to_dev_zero_is_refused(run: Path) -> None:
    link = events(run, "sampler.jsonl")
    link.unlink()
    link.symlink_to("/dev/zero")
    rc, _, err = check(run, seconds=30)
    assert rc == 2 and f"{link} is a symbolic link (to /dev/zero)" in err
    assert "Traceback" not in err


def test_6_one_endless_line_is_skipped_without_being_held(tmp_path: Path) -> None:
    from faultdrill.timeline.reader import MAX_LINE, bounded_lines

    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n' + b"x" * (3 * MAX_LINE) + b'\n{"b": 2}\n' + b"y" * 10)
    with path.open("rb") as f:
        got = list(bounded_lines(f, path.stat().st_size))
    assert got == [b'{"a": 1}\n', None, b'{"b": 2}\n', b"y" * 10]


def test_6_an_events_file_larger_than_any_recording_is_refused(run: Path) -> None:
    path = events(run, "net.jsonl")
    with path.open("r+b") as f:
        f.truncate(MAX_EVIDENCE_FILE + 1)  # sparse: no disk used
    rc, _, err = check(run, seconds=30)
    assert rc == 2 and f"{path} is {MAX_EVIDENCE_FILE + 1} bytes" in err


@pytest.mark.parametrize("name", ["scenarios/kill-worker/events/sampler.jsonl", "plan.json"])
def test_7_a_fifo_is_refused_at_once(run: Path, name: str) -> None:
    path = run / name
    path.unlink()
    os.mkfifo(path)
    rc, _, err = check(run, seconds=30)
    assert rc == 2 and str(path) in err and "not a regular file" in err


# --- 8: no traceback ----------------------------------------------------------------------


def test_8_a_dossier_that_is_not_json(run: Path) -> None:
    (run / "baseline" / "dossier.json").write_text("{{{")
    rc, _, err = check(run)
    assert rc == 2 and f"{run / 'baseline' / 'dossier.json'}: unreadable" in err


def test_8_a_probe_line_with_a_pid_that_is_not_a_number(run: Path) -> None:
    probe = events(run, "probe-rank0.jsonl")
    lines = probe.read_bytes().splitlines(keepends=True)
    odd = {"src": "probe", "task": "demo-lm", "rank": 0, "pid": "x", "ts": 1.0}
    odd.update(mono=json.loads(lines[5])["mono"], kind="eval")
    lines.insert(6, json.dumps(odd).encode() + b"\n")
    probe.write_bytes(b"".join(lines))
    rc, out, _ = check(run)
    assert rc == 1 and "overall NOT OK" in out
    assert verdicts(run)["kill-worker"] == "retest"


def test_8_a_nan_time_in_the_stores_lines(run: Path) -> None:
    lines = run / SC / "events" / "steps" / "lines" / "probe-rank0.jsonl"
    lines.write_bytes(re.sub(rb'"mono": ?[0-9.]+', b'"mono": NaN', lines.read_bytes()))
    assert all(math.isfinite(e.mono) for e in Timeline.load(run / SC / "events").events)
    rc, out, _ = check(run)
    assert rc == 0 and "overall OK" in out  # the store is ignored, the lines are intact


# --- 9: nothing outside the run directory is judged ---------------------------------------


@pytest.mark.parametrize(
    "where",
    [f"{SC}/events/probe-rank0.jsonl", f"{SC}/events", SC, "baseline"],
    ids=["events-file", "events-dir", "scenario-dir", "baseline"],
)
def test_9_evidence_through_a_link_that_leaves_the_run_is_refused(
    run: Path, tmp_path: Path, where: str
) -> None:
    path = run / where
    outside = tmp_path / "elsewhere" / path.name
    outside.parent.mkdir()
    shutil.move(path, outside)
    path.symlink_to(outside)
    rc, _, err = check(run)
    assert rc == 2 and f"{path} is a symbolic link" in err and "Traceback" not in err


# --- 10: evidence outside physical bounds is retest, with the reason ----------------------


def _edit_first(path: Path, kind: str, **fields: object) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    for i, line in enumerate(lines):
        obj = json.loads(line)
        if obj.get("kind") == kind:
            obj.update(fields)
            lines[i] = json.dumps(obj).encode() + b"\n"
            path.write_bytes(b"".join(lines))
            return
    raise AssertionError(f"no {kind} in {path}")


def _retest_because(run: Path, words: str) -> None:
    rc, out, _ = check(run)
    assert rc == 1 and "overall NOT OK" in out
    assert verdicts(run)["kill-worker"] == "retest"
    assert words in (run / "report.md").read_text()


@pytest.mark.parametrize("ts", [1e308, -1e9])
def test_10_a_wall_clock_far_from_the_run(run: Path, ts: float) -> None:
    _edit_first(events(run, "fault.jsonl"), "injected", ts=ts)
    _retest_because(run, "carry a wall-clock time far from the run's")


def test_10_a_step_long_after_the_item_ended(run: Path) -> None:
    probe = events(run, "probe-rank0.jsonl")
    lines = probe.read_bytes().splitlines(keepends=True)
    last = max(i for i, ln in enumerate(lines) if b'"kind":"step"' in ln)
    obj = json.loads(lines[last])
    obj["mono"] += 86_400.0
    lines[last] = json.dumps(obj).encode() + b"\n"
    probe.write_bytes(b"".join(lines))
    _retest_because(run, "outside the item's window")


def test_10_every_fault_and_harness_line_twice(run: Path) -> None:
    for name in ("fault.jsonl", "harness.jsonl"):
        path = events(run, name)
        path.write_bytes(b"".join(ln * 2 for ln in path.read_bytes().splitlines(keepends=True)))
    _retest_because(run, "recorded twice, identical to the microsecond")


@pytest.mark.parametrize("size", [0, 10**9])
def test_10_a_world_size_the_plan_cannot_hold(run: Path, size: int) -> None:
    _edit_first(events(run, "probe-rank1.jsonl"), "run_start", world_size=size)
    _retest_because(run, f"announced a world of {size} worker(s)")


def test_10_a_rank_announced_by_a_process_nobody_saw(run: Path) -> None:
    probe = events(run, "probe-rank1.jsonl")
    lines = probe.read_bytes().splitlines(keepends=True)
    start = json.loads(lines[0])
    steps = [json.loads(ln) for ln in lines if b'"kind":"step"' in ln]
    extra = {**start, "pid": 4_000_000, "mono": steps[len(steps) // 2]["mono"]}
    lines.insert(1, json.dumps(extra).encode() + b"\n")
    probe.write_bytes(b"".join(lines))
    _retest_because(run, "from processes the sampler never saw")
