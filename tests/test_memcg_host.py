"""The ``oom-worker`` fault's host part on this machine's real memory cgroups (root, cgroup
v1 memory controller): a process capped by :class:`HostMemoryCaps` and asked to allocate
is killed by the kernel's OOM killer (SIGKILL, the group's ``oom_kill`` count 1), a process
in another group never allocates, the undo moves members back and removes the group; and
after a harness that dies hard between applying and reverting, ``faultdrill cleanup``
finds the ledger and lifts the cap. A ledger naming a group outside the run is refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from faultdrill import cli
from faultdrill.errors import NotOursError
from faultdrill.host import memcg
from faultdrill.host.memcg import MEMCG_ROOT, HostMemoryCaps, memory_cgroup_of
from faultdrill.host.procfs import start_time
from faultdrill.ledger import Ledger
from faultdrill.platforms.api import Replica

pytestmark = pytest.mark.skipif(
    memcg.memcg_unavailable() is not None, reason=str(memcg.memcg_unavailable())
)

#: A stand-in for a worker: a step loop that honours the memory request after each step.
WORKER = textwrap.dedent(
    """
    import sys, time
    from faultdrill.workloads.memory_request import MemoryRequest
    req = MemoryRequest(sys.argv[1], lambda kind, **f: print(kind, f, flush=True))
    step = 0
    while True:
        step += 1
        req.after_step(step)
        time.sleep(0.02)
    """
)


@dataclass
class _Job:
    events_dir: Path


class _Caps(HostMemoryCaps):
    def __init__(self, ledger: Ledger, events_dir: Path) -> None:
        self.ledger = ledger
        self.job = _Job(events_dir)  # type: ignore[assignment]


def _worker(events: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, str(events)], env=env, stdout=subprocess.PIPE, text=True
    )


def _replica(proc: subprocess.Popen[str]) -> Replica:
    start = start_time(proc.pid)
    assert start is not None
    return Replica(proc.pid, start, "worker", "n1", rank=1)


def _apply(ledger: Ledger, caps: _Caps, replica: Replica, **kw: Any) -> list[str]:
    ids = []
    for change in caps.oom_cap(replica, limit_mb=kw.get("limit_mb", 16), alloc_mb=128):
        eid = ledger.record(change.kind, change.data, change.label)
        change.apply(lambda **_: None)
        ledger.mark_applied(eid)
        ids.append(eid)
    return ids


def test_the_capped_process_is_oom_killed_and_the_undo_leaves_nothing(tmp_path: Path) -> None:
    events = tmp_path / "events"
    events.mkdir()
    bystander = _worker(events)  # reads the same request, but is in another group
    victim = _worker(events)
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id=f"t-oom-{os.getpid()}")
    caps = _Caps(ledger, events)
    origin = memory_cgroup_of(victim.pid)
    try:
        time.sleep(0.5)
        _apply(ledger, caps, _replica(victim))
        group = memcg.oom_group_path(ledger.run_id, 1)
        assert memory_cgroup_of(victim.pid) == "/" + str(group.relative_to(MEMCG_ROOT))
        assert victim.wait(timeout=20) == -signal.SIGKILL
        assert caps.oom_kill_count() == 1
        out = victim.stdout.read() if victim.stdout else ""
        assert "memory_allocate" in out and "'alloc_mb': 128" in out
        assert bystander.poll() is None  # never asked: another group
        assert ledger.revert_all() == []
        assert not group.exists() and not group.parent.exists()
        assert not (events / memcg.REQUEST_FILE).exists()
        assert memory_cgroup_of(bystander.pid) == origin
    finally:
        for proc in (bystander, victim):
            proc.kill()
            proc.wait()
        ledger.revert_all()


HARNESS = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from faultdrill.ledger import Ledger
    from faultdrill.host.procfs import start_time
    from faultdrill.platforms.api import Replica
    sys.path.insert(0, sys.argv[4])
    from tests.test_memcg_host import _Caps, _apply
    ledger = Ledger(Path(sys.argv[1]), run_id=sys.argv[2])
    ledger.activate()
    pid = int(sys.argv[3])
    _apply(ledger, _Caps(ledger, Path(sys.argv[1]).parent / "events"),
           Replica(pid, start_time(pid), "worker", "n1", rank=1), limit_mb=4000)
    print("capped", flush=True)
    time.sleep(600)
    """
)


def test_cleanup_after_a_hard_crash_lifts_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAULTDRILL_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "events").mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    run_id = f"t-oomcrash-{os.getpid()}"
    group = memcg.oom_group_path(run_id, 1)
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": f"{root}/src:{root}"}
    args = [str(tmp_path / "ledger.jsonl"), run_id, str(sleeper.pid), root]
    harness = subprocess.Popen(
        [sys.executable, "-c", HARNESS, *args], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert harness.stdout is not None and harness.stdout.readline().strip() == "capped"
        assert group.exists() and sleeper.pid in memcg.MemoryGroup(group).pids()
        harness.kill()  # hard crash: no finally, no signal handler
        harness.wait()
        assert cli.main(["cleanup", "--force"]) == 0, capsys.readouterr()
        assert not group.exists()
        assert not (tmp_path / "events" / memcg.REQUEST_FILE).exists()
        assert sleeper.poll() is None  # moved back, not killed
        assert memory_cgroup_of(sleeper.pid) != "/" + str(group.relative_to(MEMCG_ROOT))
    finally:
        sleeper.kill()
        sleeper.wait()
        if group.exists():
            memcg.MemoryGroup(group).release(MEMCG_ROOT)


def test_a_ledger_naming_another_group_is_refused(tmp_path: Path) -> None:
    from faultdrill.ledger import RunScope

    run = RunScope("t-x", tmp_path)
    claim = memcg._our_group
    with pytest.raises(NotOursError, match="not one of this run's"):
        claim(str(MEMCG_ROOT / "process_api"), {}, run)
    with pytest.raises(NotOursError, match="not one of this run's"):
        claim(str(MEMCG_ROOT / "faultdrill" / "t-y" / "oom-r1"), {}, run)
    claim(str(MEMCG_ROOT / "faultdrill" / "t-x" / "oom-r1"), {}, run)  # ours: no error
    with pytest.raises(NotOursError, match="inside faultdrill's own"):
        memcg._a_memory_group(str(MEMCG_ROOT / "faultdrill" / "t-y"), {}, run)
