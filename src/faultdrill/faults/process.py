"""Process faults (round 1): a worker exits."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any, Literal

from pydantic import Field, model_validator

from faultdrill.errors import FaultError
from faultdrill.faults.api import Fault, FaultContext, FaultSpec, register
from faultdrill.frozen import Frozen
from faultdrill.ledger import Ledger, undoer
from faultdrill.platforms.api import ABILITY_SIGNAL_WORKERS, SignalsWorkers
from faultdrill.platforms.local import procfs

#: Highest rank a plan may name (the plan checks it against the world size too).
MAX_RANK = 65_535


class WorkerTarget(Frozen):
    """Which worker: exactly one of a global rank or a node (all its workers' lowest rank)."""

    rank: int | None = Field(None, ge=0, le=MAX_RANK)
    node: str | None = None

    @model_validator(mode="after")
    def _one(self) -> WorkerTarget:
        if (self.rank is None) == (self.node is None):
            raise ValueError("set exactly one of 'rank' or 'node'")
        return self

    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"a worker on node {self.node}"


def check_worker_target(target: WorkerTarget, plan: Any, what: str) -> str | None:
    """Why ``target`` names no worker of the plan's layout (ranks ``0..world-1``; nodes
    ``n1..nN`` and the spares after them), or None."""
    res = plan.resources
    world = res.world_size
    if target.rank is not None and target.rank >= world:
        return f"{what} rank {target.rank} does not exist (world size {world})"
    names = [f"n{i}" for i in range(1, res.nodes + res.spares + 1)]
    if target.node is not None and target.node not in names:
        return (
            f"{what} node {target.node!r} does not exist in this layout (nodes: "
            f"{', '.join(names)}); use one of those"
        )
    return None


class KillWorkerSpec(FaultSpec):
    kind: Literal["kill-worker"] = "kill-worker"
    target: WorkerTarget
    signal: Literal["SIGKILL", "SIGTERM"] = "SIGKILL"
    grace_s: float = Field(
        3.0, ge=0, le=600, description="with SIGTERM: wait this long, then SIGKILL"
    )

    def target_label(self) -> str:
        return self.target.label()


@undoer("signal")
def _undo_signal(data: dict[str, Any]) -> None:
    """A delivered signal cannot be taken back; recorded so the ledger shows it happened."""


def send_signal(
    ledger: Ledger, pid: int, start: int | None, sig: str, label: str, **facts: Any
) -> bool:
    """Send signal ``sig`` (``"SIGKILL"``...) to ``pid`` if it is still the process that
    started at ``start``, recorded in the ledger (a ``signal`` entry with ``facts``) before it
    is sent. A signal cannot be taken back, so the entry is closed at once, marked applied
    only if the signal went out. Returns whether it did."""
    eid = ledger.record("signal", {"pid": pid, "start_time": start, "signal": sig, **facts}, label)
    sent = procfs.kill_checked(pid, start, signal.Signals[sig])
    if sent:
        ledger.mark_applied(eid)
    ledger.revert(eid)  # nothing to undo; closes the entry
    return sent


@register
class KillWorker(Fault):
    """Kill one worker process (SIGKILL, or SIGTERM then SIGKILL after a grace period)."""

    kind = "kill-worker"
    spec_model = KillWorkerSpec
    requires = frozenset({ABILITY_SIGNAL_WORKERS})

    @classmethod
    def validate_against(cls, spec: FaultSpec, plan: Any) -> str | None:
        assert isinstance(spec, KillWorkerSpec)
        return check_worker_target(spec.target, plan, "kill-worker target")

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, KillWorkerSpec)
        platform = ctx.platform
        if not isinstance(platform, SignalsWorkers):
            raise FaultError(f"platform {platform.name!r} cannot signal workers")
        found = platform.worker_pids(rank=spec.target.rank, node=spec.target.node)
        if not found:
            raise FaultError(f"no live worker holds {spec.target.label()}")
        # A worker the platform launched (child of an agent) before any stray process that
        # merely claims the rank, such as a detached old replica.
        agents = {r.pid for r in platform.replicas() if r.role == "agent"}
        victim = min(
            found,
            key=lambda r: (r.ppid not in agents, r.rank if r.rank is not None else 1 << 30, r.pid),
        )
        if not send_signal(
            ctx.ledger,
            victim.pid,
            victim.start_time,
            spec.signal,
            f"{spec.signal} pid {victim.pid} (rank {victim.rank}, node {victim.node})",
        ):
            raise FaultError(f"worker pid {victim.pid} exited before it could be signalled")
        if spec.signal == "SIGTERM":
            threading.Thread(
                target=_escalate,
                args=(ctx.ledger, victim.pid, victim.start_time, spec.grace_s),
                daemon=True,
            ).start()
        return {
            "pid": victim.pid,
            "rank": victim.rank,
            "node": victim.node,
            "signal": spec.signal,
            "command": f"kill -{spec.signal[3:]} {victim.pid}",
        }


def _escalate(ledger: Ledger, pid: int, start: int | None, grace_s: float) -> None:
    """After ``grace_s``, SIGKILL the worker if it still runs; like every signal the fault
    sends, recorded in the ledger before it is sent."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not procfs.alive(pid, start):
            return
        time.sleep(0.05)
    if not procfs.alive(pid, start):
        return
    send_signal(
        ledger,
        pid,
        start,
        "SIGKILL",
        f"SIGKILL pid {pid} (still alive {grace_s:g} s after SIGTERM)",
        escalation=True,
    )
