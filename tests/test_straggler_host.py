"""The straggler's throttle on this host, for real: a busy process tree held to 10 % of a
core really gets about that much CPU, a child it starts while throttled is held too, and
the undo (in-process, or replayed from the ledger as ``faultdrill cleanup`` does) moves
every process back and removes the group; forged ledger data naming another cgroup is
refused."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from faultdrill.errors import NotOursError
from faultdrill.host import procfs
from faultdrill.host.throttle import CPU_ROOT, cpu_controller_missing, cpu_group_of, throttle_change
from faultdrill.ledger import OWNS, UNDOERS, Ledger, RunScope
from faultdrill.platforms.api import Replica

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(cpu_controller_missing() is not None, reason=str(cpu_controller_missing())),
]

#: A parent that spins, and starts a spinning child after 1 s.
BUSY = (
    "import os, time\ntime.sleep(1.0)\nif os.fork() == 0:\n    while True: pass\nwhile True: pass\n"
)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    return [
        int(e.name)
        for e in os.scandir("/proc")
        if e.name.isdigit() and procfs.parent_pid(int(e.name)) == pid
    ]


@pytest.fixture
def busy() -> Iterator[Replica]:
    proc = subprocess.Popen([sys.executable, "-c", BUSY])
    start = procfs.start_time(proc.pid)
    assert start is not None
    yield Replica(proc.pid, start, "worker", "n1", rank=1)
    for child in _children(proc.pid):
        procfs.kill_checked(child, None, 9)
    proc.kill()
    proc.wait()


def test_throttle_holds_the_tree_and_the_undo_gives_it_back(tmp_path: Path, busy: Replica) -> None:
    run_id = f"t-slow-{uuid.uuid4().hex[:8]}"
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id=run_id)
    change = throttle_change(run_id, busy, 10, "")
    eid = ledger.record(change.kind, change.data, change.label)
    facts = change.apply(lambda **kw: ledger.update(eid, **kw)) or {}
    ledger.mark_applied(eid)
    group = Path(facts["cgroup"])
    assert group.is_relative_to(CPU_ROOT / "faultdrill" / run_id)
    assert (group / "cpu.cfs_quota_us").read_text().strip() == "10000"
    time.sleep(1.5)  # the child is born inside the group
    [child] = _children(busy.pid)
    members = {int(p) for p in (group / "cgroup.procs").read_text().split()}
    assert {busy.pid, child} <= members
    before = _cpu_s(busy.pid) + _cpu_s(child)
    time.sleep(3.0)
    used = _cpu_s(busy.pid) + _cpu_s(child) - before
    assert used < 0.3 * 3.0, f"throttled tree used {used:.2f} CPU s in 3 s (quota 10 %)"
    # a cleanup after a crash: a fresh ledger from the file replays the undo
    assert Ledger(tmp_path / "ledger.jsonl", run_id=run_id).revert_all() == []
    assert not group.exists() and not group.parent.exists()
    assert cpu_group_of(busy.pid) == "/" and cpu_group_of(child) == "/"
    before = _cpu_s(busy.pid) + _cpu_s(child)
    time.sleep(2.0)
    freed = _cpu_s(busy.pid) + _cpu_s(child) - before
    # the quota would allow 0.2 CPU s in 2 s; a shared machine may give less than 2 cores
    assert freed > 0.3, f"released tree used only {freed:.2f} CPU s in 2 s"


def test_forged_throttle_data_is_refused() -> None:
    run = RunScope("t-mine", Path("/nonexistent-run"))
    claims = OWNS["cpu-throttle"]
    assert "cpu-throttle" in UNDOERS
    for bad in (str(CPU_ROOT), str(CPU_ROOT / "faultdrill" / "t-other" / "g"), "/etc"):
        with pytest.raises(NotOursError):
            claims["path"](bad, {}, run)
    with pytest.raises(NotOursError):
        claims["home"]("/faultdrill/t-other/slow-r1-p1", {}, run)
    with pytest.raises(NotOursError):
        claims["home"]("../../etc", {}, run)
    claims["path"](str(CPU_ROOT / "faultdrill" / "t-mine" / "slow-r1-p5"), {}, run)
    claims["home"]("/", {}, run)
