"""Event files are untrusted input: the reader counts, per file, every line that is not a
valid event (a torn last line apart), and judging makes the evidence that file feeds retest,
naming the file and the count (issue 11). The whole-run cases, on a real recorded drill,
are ``tests/test_damaged_events.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from faultdrill.checks import Verdict
from faultdrill.engine.watch import Watch
from faultdrill.events import malformed, read_jsonl
from faultdrill.judge.evaluate import evaluate_item
from faultdrill.plan import Plan, RecoveryClass, Scenario
from faultdrill.readings.reference import Reference
from faultdrill.timeline import Timeline
from faultdrill.timeline.store import StepStoreWriter, read_store
from tests.timelines import TL, restart

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


def write_events(events: Path, tl: TL) -> None:
    """The records of ``tl`` in files as a run writes them: one per source, the probe's
    one per rank, each line as the writer formats it."""
    events.mkdir(parents=True, exist_ok=True)
    files: dict[str, list[str]] = {}
    for rec in tl.records():
        name = f"probe-rank{rec['rank']}" if rec["src"] == "probe" else rec["src"]
        files.setdefault(name, []).append(json.dumps(rec) + "\n")
    for name, lines in files.items():
        (events / f"{name}.jsonl").write_text("".join(lines))


def test_a_torn_last_line_is_expected_and_not_counted_as_bad(tmp_path: Path) -> None:
    write_events(tmp_path, restart())
    probe = tmp_path / "probe-rank0.jsonl"
    probe.write_bytes(probe.read_bytes() + b'{"src": "probe", "ki')
    tl = Timeline.load(tmp_path)
    assert tl.torn_lines == 1 and tl.bad_lines == {}


@pytest.mark.parametrize(
    "line",
    [
        b"garbage\n",
        b"\xff\xfe\n",
        b"[1, 2]\n",
        b"\n",
        b"\x00\x00\x00\n",
        b"[" * 50_000 + b"]" * 50_000 + b"\n",  # past the JSON decoder's recursion limit
        b'{"ts": 1, "mono": "1", "src": "probe", "kind": "x", "task": "t"}\n',
        b'{"ts": 1, "mono": NaN, "src": "probe", "kind": "x", "task": "t"}\n',
        b'{"ts": 1, "mono": 1, "src": "probe", "kind": "run_start", "task": "t", "rank": 0}\n',
        b'{"ts": 1, "mono": 1, "src": "probe", "kind": "step", "task": "t", "step": "3"}\n',
        b'{"src": "probe", "task": "t", "rank": 0, "pid": 1,"ts":1.0,"mono":NaN,'
        b'"kind":"step","step":3,"loss":1.0,"samples":[]}\n',  # the fast path's own layout
        b'{"src": "probe", "task": "t", "rank": 0, "pid": 1,"ts":1.0,"mono":2.0,'
        b'"kind":"step","step":99999999999999999999999,"loss":1.0,"samples":[]}\n',
    ],
    ids=[
        "garbage",
        "not-utf8",
        "array",
        "empty",
        "nul",
        "deep",
        "mono-string",
        "mono-nan",
        "run-start-no-pid",
        "step-string",
        "fast-step-mono-nan",
        "fast-step-overflow",
    ],
)
@pytest.mark.parametrize("store", [False, True], ids=["json-lines", "step-store"])
def test_a_bad_line_is_counted_against_its_file(tmp_path: Path, line: bytes, store: bool) -> None:
    """Counted the same whether the probe files are read as JSON lines or from the step
    store the engine's watch wrote while they grew (then the store covers the bad line)."""
    write_events(tmp_path, restart())
    probe = tmp_path / "probe-rank1.jsonl"
    lines = probe.read_bytes().splitlines(keepends=True)
    probe.write_bytes(b"".join([*lines[:3], line, *lines[3:]]))
    if store:
        Watch(tmp_path, StepStoreWriter(tmp_path)).close()
        stored = read_store(tmp_path)
        assert stored is not None and stored.covered["probe-rank1.jsonl"] == probe.stat().st_size
    tl = Timeline.load(tmp_path)
    assert tl.bad_lines == {"probe-rank1.jsonl": (1, "probe")}
    assert tl.torn_lines == 1


def test_a_line_without_source_or_kind_is_read_not_raised(tmp_path: Path) -> None:
    (tmp_path / "harness.jsonl").write_text('{"ts": 1.0, "mono": 1.0, "task": "t"}\n')
    tl = Timeline.load(tmp_path)
    assert [(e.src, e.kind) for e in tl.events] == [("", "")] and tl.bad_lines == {}


def test_a_file_that_cannot_be_read_is_counted_not_raised(tmp_path: Path) -> None:
    write_events(tmp_path, restart())
    (tmp_path / "extra.jsonl").mkdir()
    tl = Timeline.load(tmp_path)
    assert tl.bad_lines == {"extra.jsonl": (1, "")}
    assert list(read_jsonl(tmp_path / "extra.jsonl")) == []


def test_the_contract_of_an_event() -> None:
    good: dict[str, Any] = {"ts": 1.0, "mono": 1.0, "src": "sampler", "kind": "proc_seen"}
    good.update(task="t", pid=5, start_time=7, rank=None, owner=None, ppid=1)
    assert malformed(good) is None
    assert malformed({**good, "pid": "5"}) == "pid is not int"
    assert malformed({**good, "pid": True}) == "pid is not int"
    assert malformed({**good, "start_time": None}) == "start_time is missing"
    assert malformed({**good, "mono": float("inf")}) == "mono (and ts) must be finite numbers"
    assert malformed({**good, "kind": 3}) == "src, kind and task must be strings"
    assert malformed({**good, "kind": "anything", "pid": "free-form"}) is None
    assert malformed({"ts": 1.0, "mono": 1.0}) is None  # src, kind, task: "" when absent


# --- judging --------------------------------------------------------------------------


def judged(tmp_path: Path, plan: Plan, scenario: Scenario, tl: Timeline, ref: Reference) -> Any:
    work = tmp_path / scenario.id
    (work / "events").mkdir(parents=True, exist_ok=True)
    return evaluate_item(plan, "scenario", scenario, work, ref, timeline=tl)


def test_bad_lines_make_the_evidence_they_feed_retest(
    tmp_path: Path, plan: Plan, scenario: Scenario, reference: Reference
) -> None:
    tl = restart().build()
    assert judged(tmp_path, plan, scenario, tl, reference).verdict is P
    tl.bad_lines = {"sampler.jsonl": (3, "sampler")}
    res = judged(tmp_path, plan, scenario, tl, reference)
    assert res.verdict is R
    assert res.evidence["resources"].verdict is R
    assert res.evidence["progress"].verdict is P  # a sampler feeds the resources evidence
    [f] = [f for f in res.evidence["resources"].findings if f.check == "timeline.integrity"]
    assert f.message.startswith(
        "3 line(s) of events/sampler.jsonl are not valid events (not JSON, not an object, or "
        "a field missing or of the wrong type) and were skipped"
    )
    assert f.data == {"file": "events/sampler.jsonl", "lines": 3, "source": "sampler"}
    assert res.recovery is RecoveryClass.NOT_DETERMINED
    assert res.recovery_why == (
        "not determined: events/sampler.jsonl hold lines that are not valid events"
    )


def test_a_failure_built_on_damaged_events_is_not_judged(
    tmp_path: Path, plan: Plan, scenario: Scenario, reference: Reference
) -> None:
    tl = restart(resume=None).build()  # restarted from scratch: a progress failure
    assert judged(tmp_path, plan, scenario, tl, reference).verdict is F
    tl.bad_lines = {"probe-rank0.jsonl": (1, "probe")}
    res = judged(tmp_path, plan, scenario, tl, reference)
    verdicts = [f.verdict for ev in res.evidence.values() for f in ev.findings]
    assert F not in verdicts and res.verdict is R
    [zero] = [f for f in res.evidence["progress"].findings if f.check.endswith("from-zero")]
    assert zero.message.endswith(
        "(not judged: 1 line(s) of events/probe-rank0.jsonl are not valid events (not JSON, "
        "not an object, or a field missing or of the wrong type) and were skipped)"
    )


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("selection.json", b"garbage"),
        ("selection.json", b'{"selected": 5}'),
        ("skipped.json", b"[" * 100_000),
        ("plan.json", b"[" * 100_000),
    ],
)
def test_a_damaged_run_file_is_said_not_raised(
    tmp_path: Path, plan: Plan, name: str, content: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    from faultdrill.cli import main

    (tmp_path / "plan.json").write_text(json.dumps(plan.model_dump(mode="json")))
    (tmp_path / name).write_bytes(content)
    assert main(["check", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / name}:" in err and "Traceback" not in err
