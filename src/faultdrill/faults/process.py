"""Process faults (round 1): a rank's replica exits, or hangs.

``kill-worker``: the platform picks the replica (never one of its children:
:mod:`faultdrill.lineage`) and delivers the signal (``SignalsRanks``); a SIGTERM is
followed by a SIGKILL after ``grace_s`` if the replica still runs. Each signal is in the
ledger before it is sent.

``hang-worker``: the replica and its children are stopped (``HangsRanks``: SIGSTOP) while
its node, agent and connections stay up, the way a rank stuck in a collective looks to its
peers; each stop is in the ledger (kind ``sigstop``) before it is sent, and resumed
(SIGCONT, only to the same pid and start time) after ``for_s``, at the end of the item, on
a signal, or by ``faultdrill cleanup``. Who noticed the hang, when and by what is judged
from the timeline (``progress.hang-detected``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from faultdrill.errors import PlatformError
from faultdrill.faults.api import FaultContext, WorkerFault, cannot, command_of, register
from faultdrill.platforms.api import Ability, HangsRanks, Replica, SignalsRanks

if TYPE_CHECKING:
    from faultdrill.ledger import Ledger

__all__ = [
    "HangWorker",
    "HangWorkerSpec",
    "KillWorker",
    "KillWorkerSpec",
    "WorkerTarget",
    "check_worker_target",
    "escalate",
]
from faultdrill.plan.faults import (  # noqa: F401
    MAX_RANK,
    HangWorkerSpec,
    KillWorkerSpec,
    WorkerTarget,
    check_worker_target,
)


@register
class KillWorker(WorkerFault):
    """Kill one rank's replica (SIGKILL, or SIGTERM then SIGKILL after a grace period)."""

    kind = "kill-worker"
    spec_model = KillWorkerSpec
    requires = frozenset({Ability.SIGNAL_RANK})

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, KillWorkerSpec)
        platform = ctx.platform
        if not isinstance(platform, SignalsRanks):
            raise cannot(ctx, Ability.SIGNAL_RANK)
        victim = platform.rank_replica(rank=spec.target.rank, node=spec.target.node)
        change = platform.signal_replica(victim, spec.signal)
        (facts,) = self.apply_to_worker(ctx, victim, [change], "could be signalled")
        if spec.signal == "SIGTERM":
            threading.Thread(
                target=escalate,
                args=(ctx.ledger, platform, victim, spec.grace_s),
                daemon=True,
            ).start()
        return {
            "pid": victim.pid,
            "rank": victim.rank,
            "node": victim.node,
            "signal": spec.signal,
            **{k: v for k, v in facts.items() if k not in ("pid", "rank", "node", "signal")},
            "command": change.command,
        }


@register
class HangWorker(WorkerFault):
    """Stop one rank's replica and its children for at most ``for_s`` seconds."""

    kind = "hang-worker"
    spec_model = HangWorkerSpec
    requires = frozenset({Ability.HANG_RANK})

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, HangWorkerSpec)
        platform = ctx.platform
        if not isinstance(platform, HangsRanks):
            raise cannot(ctx, Ability.HANG_RANK)
        victim = platform.rank_replica(rank=spec.target.rank, node=spec.target.node)
        changes = platform.hang_replica(victim)
        applied = self.apply_to_worker(ctx, victim, changes, "could be stopped")
        children = [f["child"] for f in applied[1:] if "child" in f]
        return {
            "pid": victim.pid,
            "rank": victim.rank,
            "node": victim.node,
            "children_stopped": children,
            "for_s": spec.for_s,
            "command": command_of(changes),
        }


def escalate(ledger: Ledger, platform: SignalsRanks, victim: Replica, grace_s: float) -> None:
    """After ``grace_s``, SIGKILL ``victim`` if it still runs; like every signal the fault
    sends, recorded in the ledger before it is sent (with ``escalation: true``)."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not platform.replica_alive(victim):
            return
        time.sleep(0.05)
    if not platform.replica_alive(victim):
        return
    change = platform.signal_replica(victim, "SIGKILL")
    change = replace(
        change,
        data={**change.data, "escalation": True},
        label=f"{change.label} (still alive {grace_s:g} s after SIGTERM)",
    )
    eid = ledger.record(change.kind, change.data, change.label)
    try:
        change.apply(partial(ledger.update, eid))
    except (OSError, PlatformError):
        pass  # it exited meanwhile: nothing was sent
    else:
        ledger.mark_applied(eid)
    finally:
        ledger.revert(eid)  # a signal cannot be taken back: closes the entry
