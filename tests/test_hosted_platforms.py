"""What the host platforms share (platforms/hosted.py), on real processes.

``ProcessReplicas`` signals a replica only while its pid is still the process that started
at the replica's start time, says in the ledger's label and command what it did, and finds
the live workers of a rank (or refuses, naming what was asked).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from faultdrill.errors import FaultError
from faultdrill.host import procfs
from faultdrill.host.api import Replica
from faultdrill.platforms.hosted import ProcessReplicas


class _OverSsh(ProcessReplicas):
    signal_noun = "Slurm task pid"
    worker_noun = "Slurm task"

    def kill_command(self, replica: Replica, sig: str) -> str:
        return f"ssh {replica.node} {super().kill_command(replica, sig)}"


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _replica(proc: subprocess.Popen[bytes], rank: int = 1, node: str = "n2") -> Replica:
    start = procfs.start_time(proc.pid)
    assert start is not None
    return Replica(pid=proc.pid, start_time=start, role="worker", node=node, rank=rank)


def test_a_signal_reaches_the_replica_and_says_what_it_did(
    sleeper: subprocess.Popen[bytes],
) -> None:
    replica = _replica(sleeper)
    actions = ProcessReplicas()
    assert actions.replica_alive(replica)
    change = actions.signal_replica(replica, "SIGTERM")
    assert change.kind == "signal" and not change.reversible
    assert change.label == f"SIGTERM pid {sleeper.pid} (rank 1, node n2)"
    assert change.command == f"kill -TERM {sleeper.pid}"
    facts = change.apply(lambda **_: None)
    assert facts == {"pid": sleeper.pid, "rank": 1, "node": "n2", "signal": "SIGTERM"}
    assert sleeper.wait(timeout=10) == -15
    assert not actions.replica_alive(replica)


def test_a_replica_that_is_gone_is_never_signalled_again(
    sleeper: subprocess.Popen[bytes],
) -> None:
    replica = _replica(sleeper)
    sleeper.kill()
    sleeper.wait()
    change = ProcessReplicas().signal_replica(replica, "SIGKILL")
    with pytest.raises(ProcessLookupError):
        change.apply(lambda **_: None)


def test_a_reused_pid_is_not_the_replica(sleeper: subprocess.Popen[bytes]) -> None:
    """Same pid, another start time: not alive, and the signal is refused."""
    replica = _replica(sleeper)
    other = Replica(**{**replica.__dict__, "start_time": replica.start_time + 1})
    assert not ProcessReplicas().replica_alive(other)
    with pytest.raises(ProcessLookupError):
        ProcessReplicas().signal_replica(other, "SIGKILL").apply(lambda **_: None)
    time.sleep(0.05)
    assert sleeper.poll() is None  # the real process was left alone


def test_a_platform_says_how_its_nodes_are_reached_and_its_workers_called(
    sleeper: subprocess.Popen[bytes],
) -> None:
    replica = _replica(sleeper, rank=3, node="n4")
    change = _OverSsh().signal_replica(replica, "SIGKILL")
    assert change.label == f"SIGKILL Slurm task pid {sleeper.pid} (rank 3, node n4)"
    assert change.command == f"ssh n4 kill -KILL {sleeper.pid}"


def test_live_workers_of_a_rank_or_a_node_and_a_clear_refusal() -> None:
    reps = [
        Replica(pid=10, start_time=1, role="agent", node="n1"),
        Replica(pid=11, start_time=1, role="worker", node="n1", rank=0),
        Replica(pid=12, start_time=1, role="worker", node="n2", rank=1),
        Replica(pid=13, start_time=1, role="child", node="n2", rank=1, owner=12),
    ]
    actions = ProcessReplicas()
    assert [r.pid for r in actions.live_workers(reps, rank=1, node=None)] == [12]
    assert [r.pid for r in actions.live_workers(reps, rank=None, node="n1")] == [11]
    assert len(actions.live_workers(reps, rank=None, node=None)) == 2
    with pytest.raises(FaultError, match="no live worker holds rank 5"):
        actions.live_workers(reps, rank=5, node=None)
    with pytest.raises(FaultError, match="no live Slurm task holds a Slurm task on node n3"):
        _OverSsh().live_workers(reps, rank=None, node="n3")
