"""Process exits by event: the exit watch on real processes of this host, the sampler that
records what it says, and the timeline that prefers it to sampling. No timing is asserted
(speed and precision are measured by ``bench/precision.py``): only what was recorded, in
which order, on which clock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faultdrill.engine.exits import Exit, ExitWatch
from faultdrill.engine.item import _first_change_applied
from faultdrill.engine.samplers import ProcessSampler
from faultdrill.events import EventSink, read_jsonl
from faultdrill.host import procfs
from faultdrill.ledger import UNDOERS, Ledger
from faultdrill.plan import Resources
from faultdrill.platforms.api import JobSpec, JobState, NodeInfo, Platform, Replica
from faultdrill.timeline import Timeline

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfds here")

CLOCKS = {"kernel", "pidfd"}


def _sleeper(code: int | None = None) -> subprocess.Popen[bytes]:
    """A real process: sleeps, or exits with ``code`` when told on stdin."""
    script = "import sys; sys.stdin.readline(); sys.exit(int(sys.argv[1]))"
    if code is None:
        return subprocess.Popen(["sleep", "60"])
    return subprocess.Popen([sys.executable, "-c", script, str(code)], stdin=subprocess.PIPE)


class _Collect:
    def __init__(self) -> None:
        self.exits: list[Exit] = []
        self.done = threading.Event()

    def __call__(self, ex: Exit) -> None:
        self.exits.append(ex)
        self.done.set()


@pytest.fixture(params=[True, False], ids=["connector-if-allowed", "pidfd-only"])
def watch(request: pytest.FixtureRequest) -> Iterator[tuple[ExitWatch, _Collect]]:
    got = _Collect()
    w = ExitWatch(got, connector=request.param)
    w.start()
    yield w, got
    w.close()


def test_a_killed_process_is_reported_once_with_its_end(
    watch: tuple[ExitWatch, _Collect],
) -> None:
    w, got = watch
    proc = _sleeper()
    start = procfs.start_time(proc.pid)
    assert start is not None
    assert w.follow(proc.pid, start, time.monotonic(), role="worker", rank=3)
    killed_at = time.monotonic()
    proc.kill()
    assert got.done.wait(10)
    proc.wait()
    (ex,) = got.exits
    assert (ex.pid, ex.start_time, ex.facts) == (proc.pid, start, {"role": "worker", "rank": 3})
    assert ex.clock == w.clock and ex.clock in CLOCKS
    assert ex.mono >= killed_at  # it ended after the signal was sent, not before
    if ex.clock == "kernel":
        assert (ex.signal, ex.exit_code) == (signal.SIGKILL, None)


def test_an_exit_status_is_said_where_the_kernel_reports_it(
    watch: tuple[ExitWatch, _Collect],
) -> None:
    w, got = watch
    proc = _sleeper(code=3)
    start = procfs.start_time(proc.pid)
    assert start is not None and w.follow(proc.pid, start, time.monotonic())
    assert proc.stdin is not None
    proc.stdin.write(b"go\n")
    proc.stdin.flush()
    assert got.done.wait(10)
    assert proc.wait() == 3
    (ex,) = got.exits
    assert ex.pid == proc.pid
    if ex.clock == "kernel":
        assert (ex.exit_code, ex.signal) == (3, None)
    else:
        assert (ex.exit_code, ex.signal) == (None, None)


def test_a_process_gone_before_it_was_followed_is_left_to_sampling() -> None:
    got = _Collect()
    w = ExitWatch(got, connector=False)
    w.start()
    try:
        proc = _sleeper()
        start = procfs.start_time(proc.pid)
        assert start is not None
        proc.kill()
        proc.wait()  # reaped: the pid names nothing now
        assert not w.follow(proc.pid, start, time.monotonic())
        assert not w.follow(proc.pid, start + 1, time.monotonic())  # nor a wrong identity
    finally:
        w.close()
    assert got.exits == []
    w.close()  # idempotent


# --- the sampler records it; the timeline prefers it --------------------------------------


class HostProcesses(Platform):
    """A job of real processes of this host that the test starts itself (one per rank);
    stands in for the local platform's torchrun workers."""

    name = "host-processes-test"
    host_processes = True

    def __init__(self, procs: list[subprocess.Popen[bytes]], *args: Any) -> None:
        super().__init__(*args)
        self.procs = procs

    def replicas(self) -> list[Replica]:
        out = []
        for rank, p in enumerate(self.procs):
            ids = procfs.identity(p.pid)
            if ids is not None and procfs.alive(p.pid):
                out.append(Replica(p.pid, ids[0], "worker", "n1", rank=rank, ppid=ids[1]))
        return out

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo("n1", "127.0.0.1", "up")]

    def _prepare(self) -> None: ...

    def _submit(self, job: JobSpec) -> None: ...

    def _poll(self) -> JobState:
        return JobState.RUNNING

    def _signal_all(self, sig: int) -> None: ...

    def _any_alive(self) -> bool:
        return bool(self.replicas())

    def _teardown(self) -> None: ...


@pytest.mark.parametrize("follow_exits", [None, False])
def test_the_sampler_records_exits_and_the_timeline_uses_them(
    tmp_path: Path, follow_exits: bool | None
) -> None:
    events = tmp_path / "events"
    sink = EventSink(events, "t")
    procs = [_sleeper(), _sleeper()]
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id="t")
    platform = HostProcesses(procs, Resources(), tmp_path, ledger, sink)
    sampler = ProcessSampler(platform, sink, 20.0, follow_exits=follow_exits)
    try:
        sampler.start()
        deadline = time.monotonic() + 10
        while len(sampler.known) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        killed_at = time.monotonic()
        procs[1].kill()
        procs[1].wait()
        assert sampler.wait_gone(0.2) is False  # rank 0 still runs
        time.sleep(0.3)  # a few samples see rank 1 missing
    finally:
        procs[0].kill()
        procs[0].wait()
        sampler.stop()
        sink.close()
    records = list(read_jsonl(events / "sampler.jsonl"))
    exits = [r for r in records if r["kind"] == "proc_exit"]
    stopped = next(r for r in records if r["kind"] == "sampling_stopped")
    tl = Timeline.load(events)
    life = next(p for p in tl.procs if p.pid == procs[1].pid)
    gone = next(r for r in records if r["kind"] == "proc_gone" and r["pid"] == procs[1].pid)
    if follow_exits is False:
        assert exits == [] and stopped["exit_clock"] is None
        assert (life.gone_by, life.gone_mono) == ("sampled", gone["mono"])
        return
    assert stopped["exit_clock"] in CLOCKS
    mine = [r for r in exits if r["pid"] == procs[1].pid]
    assert len(mine) == 1 and mine[0]["rank"] == 1 and mine[0]["role"] == "worker"
    assert life.gone_by == mine[0]["clock"] == stopped["exit_clock"]
    assert life.gone_mono is not None
    assert killed_at <= life.gone_mono == mine[0]["mono"] <= gone["mono"]
    assert life.last_seen_mono == life.gone_mono


# --- the injection's time: when the fault's first change was in effect --------------------


def test_the_injection_is_stamped_when_its_first_change_was_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(UNDOERS, "test-change", lambda _d: None)
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id="t")
    earlier = ledger.record("test-change", {}, "made before the fault")
    ledger.mark_applied(earlier)
    before = set(ledger.entries)
    first = ledger.record("test-change", {"n": 1}, "the fault's first change")
    t0 = time.monotonic()
    ledger.mark_applied(first)
    second = ledger.record("test-change", {"n": 2}, "its second")
    ledger.mark_applied(second)
    ledger.record("test-change", {"n": 3}, "recorded, never applied")
    at = _first_change_applied(ledger, before)
    assert at == ledger.entries[first].applied_mono
    later = ledger.entries[second].applied_mono
    assert at is not None and later is not None and t0 <= at <= later
    assert _first_change_applied(ledger, set(ledger.entries)) is None
    records = [json.loads(x) for x in (tmp_path / "ledger.jsonl").read_text().splitlines()]
    applied = [r for r in records if r["op"] == "applied"]
    assert [r["mono"] for r in applied][1] == at  # the ledger file says it too


def test_an_event_stamped_when_it_happened(tmp_path: Path) -> None:
    sink = EventSink(tmp_path, "t")
    now = sink.emit("harness", "x")
    then = sink.emit("harness", "y", at_mono=now.mono - 2.0, n=1)
    sink.close()
    assert then.mono == now.mono - 2.0 and then.fields == {"n": 1}
    assert abs((now.ts - then.ts) - 2.0) < 0.5  # the wall time moved with it
    (_x, y) = read_jsonl(tmp_path / "harness.jsonl")
    assert y["mono"] == then.mono and "at_mono" not in y
