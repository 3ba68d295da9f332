"""A straggler (issue 23): one rank's replica slowed, not stopped.

``slow-worker`` holds the rank's replica and every process it started to a share of one
CPU core (``ThrottlesRanks``) for ``for_s``; the drill reverts it. The throttle is in the
ledger before it is applied, so a signal or ``faultdrill cleanup`` after a crash gives the
CPU back. What it shows is judged by :mod:`faultdrill.checks.straggler`.
"""

from __future__ import annotations

from typing import Any

from faultdrill.faults.api import FaultContext, WorkerFault, cannot, register
from faultdrill.plan.faults import SlowWorkerSpec
from faultdrill.platforms.api import Ability, SignalsRanks, ThrottlesRanks

__all__ = ["SlowWorker", "SlowWorkerSpec"]


@register
class SlowWorker(WorkerFault):
    """Throttle one rank's replica to ``cpu_percent`` % of a core until reverted."""

    kind = "slow-worker"
    spec_model = SlowWorkerSpec
    requires = frozenset({Ability.SIGNAL_RANK, Ability.THROTTLE_RANK})

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, SlowWorkerSpec)
        platform = ctx.platform
        if not isinstance(platform, SignalsRanks):
            raise cannot(ctx, Ability.SIGNAL_RANK)
        if not isinstance(platform, ThrottlesRanks):
            raise cannot(ctx, Ability.THROTTLE_RANK)
        victim = platform.rank_replica(rank=spec.target.rank, node=spec.target.node)
        change = platform.throttle_replica(victim, spec.cpu_percent)
        (facts,) = self.apply_to_worker(ctx, victim, [change], "could be throttled")
        return {
            **facts,
            "pid": victim.pid,
            "rank": victim.rank,
            "node": victim.node,
            "cpu_percent": spec.cpu_percent,
            "expect_detection_within_s": spec.detection_within_s,
            "command": change.command,
        }
