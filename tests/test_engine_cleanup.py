"""The engine's cleanup path runs to the end whatever happens in it: a signal during the
cleanup of a normal end, a second signal during the cleanup after an interruption, a step
that raises, a probe file with malformed records. Tested against the shipped fake platform
(no job is started), whose preparation is one change in the ledger that the cleanup must
undo; and the loader and the CLI's last words on their own."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from faultdrill import cli
from faultdrill.engine.item import DrillInterrupted, execute_item, signal_guard
from faultdrill.plan import Plan
from faultdrill.platforms import PLATFORMS
from faultdrill.platforms.api import JobSpec
from faultdrill.platforms.fake import FakePlatform
from faultdrill.timeline import Timeline

Hook = Callable[[FakePlatform], None]


def _on_fake(plan: Plan) -> Plan:
    """The plan on the fake platform, without the settle time."""
    return plan.model_copy(
        update={
            "resources": plan.resources.model_copy(update={"platform": "fake"}),
            "observation": plan.observation.model_copy(update={"settle_s": 0.0}),
        }
    )


class Drill:
    """Runs the baseline item on the fake platform with the given hooks (``on``) and
    failures (``fail``); returns the item directory (or raises what execute_item raised).
    ``platform`` is the fake the engine made."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, plan: Plan) -> None:
        self.monkeypatch, self.tmp_path, self.plan = monkeypatch, tmp_path, plan
        self.platform: FakePlatform | None = None

    def __call__(self, fail: dict[str, BaseException] | None = None, **on: Hook) -> Path:
        fake = FakePlatform.scripted(on=on, fail=fail)
        self.monkeypatch.setitem(PLATFORMS, "fake", fake)
        try:
            return execute_item(_on_fake(self.plan), "baseline", None, self.tmp_path / "run")
        finally:
            self.platform = fake.instances[-1]


@pytest.fixture()
def drill(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, plan: Plan) -> Drill:
    monkeypatch.setenv("FAULTDRILL_STATE_DIR", str(tmp_path / "state"))
    return Drill(monkeypatch, tmp_path, plan)


def _harness(work: Path) -> list[dict[str, Any]]:
    path = work / "events" / "harness.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _cleaned_up(tmp_path: Path, platform: FakePlatform | None) -> None:
    """Every step of the cleanup ran: teardown, the ledger replayed, the index dropped."""
    assert platform is not None
    work = tmp_path / "run" / "baseline"
    assert "teardown" in platform.asked_names()
    [prepared] = [c for c in platform.changes if c.action == "prepare"]
    assert prepared.recorded_first and prepared.undone == 1, "the ledger was not replayed"
    assert list((tmp_path / "state" / "active").iterdir()) == []
    kinds = [e["kind"] for e in _harness(work)]
    assert "cleanup" in kinds and kinds[-1] == "item_end"


def _self_signal(sig: int) -> Hook:
    def send(_p: FakePlatform) -> None:
        os.kill(os.getpid(), sig)

    return send


# --- signals -------------------------------------------------------------------------------


def test_signal_during_the_cleanup_of_a_normal_end_skips_nothing(
    drill: Drill, tmp_path: Path
) -> None:
    with pytest.raises(DrillInterrupted) as err:
        drill(stop=_self_signal(signal.SIGINT))  # Ctrl-C while the job is being stopped
    assert err.value.signum == signal.SIGINT
    assert err.value.pending == []
    _cleaned_up(tmp_path, drill.platform)
    events = _harness(tmp_path / "run" / "baseline")
    late = [e for e in events if e["kind"] == "interrupted"]
    assert late and late[0]["during"] == "cleanup" and late[0]["signal"] == "SIGINT"


def test_second_signal_during_the_cleanup_after_an_interruption_is_ignored(
    drill: Drill, tmp_path: Path
) -> None:
    with pytest.raises(DrillInterrupted) as err:
        drill(submit=_self_signal(signal.SIGTERM), stop=_self_signal(signal.SIGINT))
    assert err.value.signum == signal.SIGTERM
    _cleaned_up(tmp_path, drill.platform)


def test_signal_guard_notes_signals_while_cleaning() -> None:
    with signal_guard() as guard:
        guard.cleaning = True
        os.kill(os.getpid(), signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGINT)
    assert guard.late == signal.SIGHUP and not guard.fired


# --- steps that raise ------------------------------------------------------------------


def test_a_cleanup_step_that_raises_does_not_skip_the_rest(drill: Drill, tmp_path: Path) -> None:
    work = drill(fail={"stop": RuntimeError("boom")})
    _cleaned_up(tmp_path, drill.platform)
    cleanup = next(e for e in _harness(work) if e["kind"] == "cleanup")
    assert "stop the job: RuntimeError: boom" in cleanup["problems"]
    assert cleanup["ledger_pending"] == 0


def test_teardown_that_raises_still_replays_the_ledger(drill: Drill, tmp_path: Path) -> None:
    work = drill(fail={"teardown": ValueError("odd state")})
    _cleaned_up(tmp_path, drill.platform)
    cleanup = next(e for e in _harness(work) if e["kind"] == "cleanup")
    assert any("ValueError: odd state" in p for p in cleanup["problems"])


def test_malformed_probe_records_do_not_stop_the_inventory(drill: Drill, tmp_path: Path) -> None:
    def write_probe(p: FakePlatform) -> None:
        lines = [
            {"src": "probe", "kind": "step", "rank": 0, "step": 1},  # no mono
            {"src": "probe", "kind": "step", "rank": "zero", "mono": 1.0, "step": 1},
        ]
        events = p.work_dir / "events"
        (events / "probe-rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))

    work = drill(submit=write_probe)
    _cleaned_up(tmp_path, drill.platform)
    assert any(e["kind"] == "ckpt_latest" for e in _harness(work))


# --- the harness's own phases --------------------------------------------------------------


def test_every_phase_of_an_item_is_recorded_as_a_harness_event(drill: Drill) -> None:
    """bring-up, job, settle, sampling and teardown (in two parts), in the order they ran,
    each with its start and duration; the settle ends at once when nothing of the job is
    left (the fake job has no process), and says after how long."""
    work = drill()
    phases = [json.loads(x) for x in (work / "events" / "phases.jsonl").read_text().splitlines()]
    assert [(p["src"], p["kind"]) for p in phases] == [("harness", "phase")] * len(phases)
    assert [p["phase"] for p in phases] == [
        "bring-up",
        "job",
        "settle",
        "teardown",
        "sampling",
        "teardown",
    ]
    assert all(p["seconds"] >= 0 for p in phases)
    starts = [p["started_mono"] for p in phases]
    assert starts == sorted(starts)
    final = next(e for e in _harness(work) if e["kind"] == "procs_final")
    assert final["settled_s"] >= 0 and final["after_stop"] is False
    tl = Timeline.load(work / "events")
    assert [e.get("phase") for e in tl.of("harness", "phase")] == [p["phase"] for p in phases]


def test_a_phase_that_raised_is_timed_too(drill: Drill, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="no job"):
        drill(fail={"submit": RuntimeError("no job")})
    path = tmp_path / "run" / "baseline" / "events" / "phases.jsonl"
    phases = [json.loads(x)["phase"] for x in path.read_text().splitlines()]
    assert phases[:2] == ["bring-up", "job"] and "settle" not in phases
    assert phases[2:] == ["teardown", "sampling", "teardown"]


# --- the CLI's last words ------------------------------------------------------------------


def _interrupted(pending: list[str]) -> Callable[[Any], int]:
    def cmd(_args: Any) -> int:
        raise DrillInterrupted(signal.SIGINT, pending)

    return cmd


def test_cli_says_every_fault_was_reverted_only_when_nothing_is_pending(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "cmd_schema", _interrupted(["cgroup /sys/fs/cgroup/x"]))
    assert cli.main(["schema"]) == 130
    err = capsys.readouterr().err
    assert "every fault was reverted" not in err
    assert "1 recorded change(s) could NOT be reverted: cgroup /sys/fs/cgroup/x" in err
    assert "faultdrill cleanup" in err
    monkeypatch.setattr(cli, "cmd_schema", _interrupted([]))
    assert cli.main(["schema"]) == 130
    assert "interrupted by SIGINT; every fault was reverted" in capsys.readouterr().err


# --- the loader ----------------------------------------------------------------------------


def _step(**kw: Any) -> dict[str, Any]:
    return {"ts": 1.0, "src": "probe", "kind": "step", "task": "t", "pid": 7, **kw}


def test_timeline_load_skips_and_counts_malformed_records(tmp_path: Path) -> None:
    good = [
        _step(mono=1.0, rank=0, step=1, loss=2.0, samples=[[0, 4]]),
        _step(mono=2.0, rank=1, step=1, loss=2.0, samples=[[4, 8]]),
        _step(mono=3.0, rank=0, step=2, loss=1.9, samples=[]),
    ]
    bad = [
        _step(rank=0, step=3),  # no mono
        _step(mono=4.0, rank=0),  # no step
        _step(mono="later", rank=0, step=3),
        _step(mono=4.0, rank="zero", step=3),
        _step(mono=4.0, rank=0, step=[3]),
        _step(mono=4.0, rank=0, step=3, samples="0-4"),
        _step(mono=4.0, rank=0, step=3, samples=[[1, 2, 3]]),
        _step(mono=4.0, rank=0, step=3, samples=[5]),
        _step(mono=4.0, rank=0, step=3, samples=7),
        {"src": "harness", "kind": "note", "mono": "soon", "ts": 1.0},
        {"src": "harness", "kind": "note", "mono": 1.0, "ts": None},
    ]
    lines = [good[0], bad[0], bad[1], good[1], *bad[2:], good[2]]
    events = tmp_path / "events"
    events.mkdir()
    (events / "probe-rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    tl = Timeline.load(events)
    assert tl.torn_lines == len(bad)
    assert list(tl.steps.mono) == [1.0, 2.0, 3.0]
    assert list(tl.steps.rank) == [0, 1, 0]
    assert list(tl.steps.step) == [1, 1, 2]
    assert tl.steps.ranges(tl.steps.mono >= 0)[0].tolist() == [0, 4]
    assert tl.steps.ranges(tl.steps.mono >= 0)[1].tolist() == [4, 8]


def test_timeline_load_of_clean_records_counts_nothing(tmp_path: Path) -> None:
    events = tmp_path / "events"
    events.mkdir()
    recs = [_step(mono=float(i), rank=0, step=i, samples=[[i, i + 1]]) for i in range(1, 50)]
    (events / "probe-rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
    tl = Timeline.load(events)
    assert tl.torn_lines == 0 and len(tl.steps) == 49


def test_a_relative_run_dir_reaches_the_job_as_an_absolute_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, plan: Plan
) -> None:
    """Agents and workers do not run in the harness's working directory: ``--out
    faultdrill-demo`` (the README's demo command) once made every agent fail to open its
    events file."""
    monkeypatch.setenv("FAULTDRILL_STATE_DIR", str(tmp_path / "state"))
    fake = FakePlatform.scripted()
    monkeypatch.setitem(PLATFORMS, "fake", fake)
    monkeypatch.chdir(tmp_path)
    work = execute_item(_on_fake(plan), "baseline", None, Path("relative-out"))
    assert work.is_absolute() and work == tmp_path / "relative-out" / "baseline"
    [job] = fake.instances[-1].jobs
    assert isinstance(job, JobSpec)
    assert job.work_dir.is_absolute() and job.events_dir.is_absolute()
    paths = [v for v in job.env.values() if "relative-out" in v]
    assert paths and all(Path(v).is_absolute() for v in paths), job.env
    args = [a.split("=", 1)[-1] for a in job.argv if "relative-out" in a]
    assert args and all(Path(a).is_absolute() for a in args), job.argv


def test_the_harness_overhead_is_the_item_beyond_the_job_by_phase() -> None:
    """The item's wall time plus its checks and report, minus the job's own (submission to
    the last agent's exit); the job phase beyond that exit is the time to notice the end."""
    from faultdrill.engine.phases import harness_overhead
    from tests.timelines import TL

    def phase(t: TL, name: str, start: float, seconds: float) -> TL:
        return t.add(
            "harness", "phase", start + seconds, phase=name, started_mono=start, seconds=seconds
        )

    tl = TL().add("harness", "item_start", 0.0).add("platform", "job_submitted", 0.3)
    tl = tl.proc(50, None, 0.4, 10.3, role="agent", exited=10.0)
    tl = tl.proc(51, None, 0.4, 10.3, role="agent", exited=10.2)
    tl = tl.add("platform", "job_state", 10.25, state="succeeded")
    for name, start, seconds in [
        ("bring-up", 0.0, 0.3),
        ("job", 0.3, 10.0),
        ("settle", 10.3, 0.1),
        ("teardown", 10.4, 0.1),
        ("sampling", 10.5, 0.05),
        ("teardown", 10.55, 0.2),
    ]:
        tl = phase(tl, name, start, seconds)
    tl = tl.add("harness", "item_end", 10.8)
    tl = phase(tl, "checks", 10.9, 0.4)
    tl = phase(tl, "report", 11.3, 0.1)
    over = harness_overhead(tl.build())
    assert over is not None
    assert (over["job_s"], over["wall_s"], over["overhead_s"]) == (9.9, 11.3, 1.4)
    assert over["job_end_from"] == "agent exits"
    assert over["phases_s"] == {
        "bring-up": 0.3,
        "settle": 0.1,
        "post-window": 0.0,
        "sampling": 0.05,
        "teardown": 0.3,
        "checks": 0.4,
        "report": 0.1,
        "noticing_end": 0.1,
        "other": 0.05,
    }
    assert harness_overhead(TL().add("harness", "item_start", 0.0).build()) is None
