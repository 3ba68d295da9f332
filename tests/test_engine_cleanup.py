"""The engine's cleanup path runs to the end whatever happens in it: a signal during the
cleanup of a normal end, a second signal during the cleanup after an interruption, a step
that raises, a probe file with malformed records. Tested against a fake platform (no job
is started) that records one real change in the ledger, whose undo removes a marker file;
and the loader and the CLI's last words on their own."""

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
from faultdrill.ledger import UNDOERS
from faultdrill.plan import Plan
from faultdrill.platforms import PLATFORMS
from faultdrill.platforms.api import JobSpec, JobState, NodeInfo, Platform, Replica
from faultdrill.timeline import Timeline

Hook = Callable[["FakePlatform"], None]


class FakePlatform(Platform):
    """No job at all: it "succeeds" at the first poll. ``hooks`` run at submit, stop and
    teardown; ``prepare`` records (then makes) one change, a marker file."""

    name = "fake"
    hooks: dict[str, Hook] = {}  # noqa: RUF012  (replaced per test)
    last: FakePlatform | None = None

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.calls: list[str] = []
        FakePlatform.last = self

    def _hook(self, name: str) -> None:
        self.calls.append(name)
        if name in self.hooks:
            self.hooks[name](self)

    def replicas(self) -> list[Replica]:
        return []

    def nodes(self) -> list[NodeInfo]:
        return []

    def _prepare(self) -> None:
        marker = self.work_dir / "marker"
        eid = self.ledger.record("test-marker", {"path": str(marker)}, f"marker {marker}")
        marker.touch()
        self.ledger.mark_applied(eid)

    def _submit(self, job: JobSpec) -> None:
        self._hook("submit")

    def _poll(self) -> JobState:
        return JobState.SUCCEEDED

    def _signal_all(self, sig: int) -> None:
        pass

    def _any_alive(self) -> bool:
        return False

    def stop(self, grace_s: float = 5.0, reason: str = "end of drill") -> None:
        self._hook("stop")

    def _teardown(self) -> None:
        self._hook("teardown")


def _undo_marker(data: dict[str, Any]) -> None:
    Path(data["path"]).unlink(missing_ok=True)


@pytest.fixture()
def drill(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, plan: Plan
) -> Callable[..., tuple[Path, FakePlatform]]:
    """Runs the baseline item on the fake platform with the given hooks; returns the item
    directory (or raises what execute_item raised) and the platform."""
    state = tmp_path / "state"
    monkeypatch.setenv("FAULTDRILL_STATE_DIR", str(state))
    monkeypatch.setitem(UNDOERS, "test-marker", _undo_marker)
    monkeypatch.setitem(PLATFORMS, plan.resources.platform, FakePlatform)
    quick = plan.model_copy(
        update={"observation": plan.observation.model_copy(update={"settle_s": 0.0})}
    )

    def run(**hooks: Hook) -> tuple[Path, FakePlatform]:
        monkeypatch.setattr(FakePlatform, "hooks", hooks)
        work = execute_item(quick, "baseline", None, tmp_path / "run")
        assert FakePlatform.last is not None
        return work, FakePlatform.last

    return run


def _harness(work: Path) -> list[dict[str, Any]]:
    path = work / "events" / "harness.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _cleaned_up(tmp_path: Path, platform: FakePlatform) -> None:
    """Every step of the cleanup ran: teardown, the ledger replayed, the index dropped."""
    work = tmp_path / "run" / "baseline"
    assert "teardown" in platform.calls
    assert not (work / "marker").exists(), "the ledger was not replayed"
    assert list((tmp_path / "state" / "active").iterdir()) == []
    kinds = [e["kind"] for e in _harness(work)]
    assert "cleanup" in kinds and kinds[-1] == "item_end"


def _self_signal(sig: int) -> Hook:
    def send(_p: FakePlatform) -> None:
        os.kill(os.getpid(), sig)

    return send


# --- signals -------------------------------------------------------------------------------


def test_signal_during_the_cleanup_of_a_normal_end_skips_nothing(
    drill: Callable[..., tuple[Path, FakePlatform]], tmp_path: Path
) -> None:
    with pytest.raises(DrillInterrupted) as err:
        drill(stop=_self_signal(signal.SIGINT))  # Ctrl-C while the job is being stopped
    assert err.value.signum == signal.SIGINT
    assert err.value.pending == []
    platform = FakePlatform.last
    assert platform is not None
    _cleaned_up(tmp_path, platform)
    events = _harness(tmp_path / "run" / "baseline")
    late = [e for e in events if e["kind"] == "interrupted"]
    assert late and late[0]["during"] == "cleanup" and late[0]["signal"] == "SIGINT"


def test_second_signal_during_the_cleanup_after_an_interruption_is_ignored(
    drill: Callable[..., tuple[Path, FakePlatform]], tmp_path: Path
) -> None:
    with pytest.raises(DrillInterrupted) as err:
        drill(submit=_self_signal(signal.SIGTERM), stop=_self_signal(signal.SIGINT))
    assert err.value.signum == signal.SIGTERM
    platform = FakePlatform.last
    assert platform is not None
    _cleaned_up(tmp_path, platform)


def test_signal_guard_notes_signals_while_cleaning() -> None:
    with signal_guard() as guard:
        guard.cleaning = True
        os.kill(os.getpid(), signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGINT)
    assert guard.late == signal.SIGHUP and not guard.fired


# --- steps that raise ------------------------------------------------------------------


def _boom(exc: BaseException) -> Hook:
    def hook(_p: FakePlatform) -> None:
        raise exc

    return hook


def test_a_cleanup_step_that_raises_does_not_skip_the_rest(
    drill: Callable[..., tuple[Path, FakePlatform]], tmp_path: Path
) -> None:
    work, platform = drill(stop=_boom(RuntimeError("boom")))
    _cleaned_up(tmp_path, platform)
    cleanup = next(e for e in _harness(work) if e["kind"] == "cleanup")
    assert "stop the job: RuntimeError: boom" in cleanup["problems"]
    assert cleanup["ledger_pending"] == 0


def test_teardown_that_raises_still_replays_the_ledger(
    drill: Callable[..., tuple[Path, FakePlatform]], tmp_path: Path
) -> None:
    work, platform = drill(teardown=_boom(ValueError("odd state")))
    _cleaned_up(tmp_path, platform)
    cleanup = next(e for e in _harness(work) if e["kind"] == "cleanup")
    assert any("ValueError: odd state" in p for p in cleanup["problems"])


def test_malformed_probe_records_do_not_stop_the_inventory(
    drill: Callable[..., tuple[Path, FakePlatform]], tmp_path: Path
) -> None:
    def write_probe(p: FakePlatform) -> None:
        lines = [
            {"src": "probe", "kind": "step", "rank": 0, "step": 1},  # no mono
            {"src": "probe", "kind": "step", "rank": "zero", "mono": 1.0, "step": 1},
        ]
        events = p.work_dir / "events"
        (events / "probe-rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))

    work, platform = drill(submit=write_probe)
    _cleaned_up(tmp_path, platform)
    assert any(e["kind"] == "ckpt_latest" for e in _harness(work))


# --- the harness's own phases --------------------------------------------------------------


def test_every_phase_of_an_item_is_recorded_as_a_harness_event(
    drill: Callable[..., tuple[Path, FakePlatform]],
) -> None:
    """bring-up, job, settle, sampling and teardown (in two parts), in the order they ran,
    each with its start and duration; the settle ends at once when nothing of the job is
    left (the fake job has no process), and says after how long."""
    work, _platform = drill()
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


def test_a_phase_that_raised_is_timed_too(
    drill: Callable[..., tuple[Path, FakePlatform]], tmp_path: Path
) -> None:
    with pytest.raises(RuntimeError, match="no job"):
        drill(submit=_boom(RuntimeError("no job")))
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
    jobs: list[JobSpec] = []
    monkeypatch.setenv("FAULTDRILL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setitem(UNDOERS, "test-marker", _undo_marker)
    monkeypatch.setitem(PLATFORMS, plan.resources.platform, FakePlatform)
    monkeypatch.setattr(FakePlatform, "hooks", {})
    monkeypatch.setattr(FakePlatform, "_submit", lambda self, job: jobs.append(job))
    monkeypatch.chdir(tmp_path)
    work = execute_item(plan, "baseline", None, Path("relative-out"))
    assert work.is_absolute() and work == tmp_path / "relative-out" / "baseline"
    [job] = jobs
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
        "sampling": 0.05,
        "teardown": 0.3,
        "checks": 0.4,
        "report": 0.1,
        "noticing_end": 0.1,
        "other": 0.05,
    }
    assert harness_overhead(TL().add("harness", "item_start", 0.0).build()) is None
