"""Memory faults: a rank's replica killed by the kernel's OOM killer (``oom-worker``).

The platform (``OomRanks``) puts the rank's replica under a memory limit of its own and
asks the workload to allocate more than it (:mod:`faultdrill.host.memcg` on this host);
both changes are in the ledger before they are made. The kill is the kernel's, not the
drill's: no signal is sent. A follower thread waits for the capped replica to die and puts
the cause on the timeline, apart from anything the drill sent (``fault``/``oom_killed``:
``cause`` ``oom-killer`` when the group's ``oom_kill`` count went up, ``unknown`` when the
replica died another way; ``fault``/``oom_not_killed`` when it outlived ``wait_s``).

Then the limit is lifted (the "fix": a restarted replica runs without it), unless the spec
says ``repeat``: the limit stays on the rank, every later replica of it is put under it
again (``fault``/``oom_recapped``), and a job with no fix between restarts dies of OOM at
every restart: the restart loop ``progress.oom-restart-loop`` must catch.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from faultdrill.errors import FaultError
from faultdrill.faults.api import FaultContext, FaultSpec, WorkerFault, cannot, command_of, register
from faultdrill.plan.faults import OomWorkerSpec
from faultdrill.platforms.api import Ability, OomRanks, Replica, SignalsRanks

__all__ = ["OomWorker", "OomWorkerSpec"]

_POLL_S = 0.05


@register
class OomWorker(WorkerFault):
    """Cap one rank's replica's memory and make it outgrow the cap (see the module)."""

    kind = "oom-worker"
    spec_model = OomWorkerSpec
    requires = frozenset({Ability.OOM_RANK, Ability.SIGNAL_RANK})

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self.follower: threading.Thread | None = None

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, OomWorkerSpec)
        platform = ctx.platform
        if not isinstance(platform, OomRanks):
            raise cannot(ctx, Ability.OOM_RANK)
        if not isinstance(platform, SignalsRanks):
            raise cannot(ctx, Ability.SIGNAL_RANK)
        victim = platform.rank_replica(rank=spec.target.rank, node=spec.target.node)
        changes = platform.oom_cap(victim, limit_mb=spec.limit_mb, alloc_mb=spec.alloc_mb)
        facts: dict[str, Any] = {}
        for applied in self.apply_to_worker(ctx, victim, changes, "was capped"):
            facts.update(applied)
        self.follower = threading.Thread(
            target=self._follow, args=(ctx, platform, victim), name="oom-follower", daemon=True
        )
        self.follower.start()
        return {
            **facts,
            "pid": victim.pid,
            "rank": victim.rank,
            "node": victim.node,
            "repeat": spec.repeat,
            "command": command_of(changes),
        }

    def revert(self, ctx: FaultContext) -> None:
        """Stop following the rank, then lift the cap (idempotent, from any thread)."""
        self._stopping.set()
        with self._lock:
            super().revert(ctx)

    # --- the follower ----------------------------------------------------------------------

    def _follow(self, ctx: FaultContext, platform: Any, victim: Replica) -> None:
        """Wait for each capped replica's death and say its cause; lift the cap after the
        first (or, with ``repeat``, cap the rank's next replica again)."""
        spec = self.spec
        assert isinstance(spec, OomWorkerSpec)
        seen = 0
        current: Replica | None = victim
        while current is not None:
            if not self._wait(lambda r=current: not platform.replica_alive(r), spec.wait_s):
                if not self._stopping.is_set():
                    ctx.sink.emit(
                        "fault",
                        "oom_not_killed",
                        pid=current.pid,
                        rank=current.rank,
                        waited_s=spec.wait_s,
                        memcg_oom_kills=platform.oom_kill_count(),
                    )
                return
            seen = self._said_death(ctx, platform, current, seen)
            if not spec.repeat:
                self._lift(ctx)
                return
            current = self._recap(ctx, platform, current)

    def _said_death(self, ctx: FaultContext, platform: Any, dead: Replica, seen: int) -> int:
        """Emit ``oom_killed`` for ``dead``; returns the group's OOM kill count now."""
        count = platform.oom_kill_count()
        by_oom = count is not None and count > seen
        ctx.sink.emit(
            "fault",
            "oom_killed",
            fault=self.spec.kind,
            pid=dead.pid,
            rank=dead.rank,
            node=dead.node,
            cause="oom-killer" if by_oom else "unknown",
            # the OOM killer's signal: the launcher sees exit status -9 (a shell's 137)
            exit_signal="SIGKILL" if by_oom else None,
            signal_sent_by_drill=False,
            memcg_oom_kills=count,
        )
        return count if count is not None else seen

    def _recap(self, ctx: FaultContext, platform: Any, dead: Replica) -> Replica | None:
        """The rank's next replica, put under the same limit (None: none came in time, or
        the fault was reverted)."""
        spec = self.spec
        assert isinstance(spec, OomWorkerSpec)
        found: list[Replica] = []

        def next_replica() -> bool:
            try:
                rep = platform.rank_replica(rank=dead.rank)
            except FaultError:
                return False
            if rep.pid == dead.pid:
                return False
            found.append(rep)
            return True

        if not self._wait(next_replica, spec.wait_s):
            return None
        rep = found[-1]
        with self._lock:
            if self._stopping.is_set():
                return None
            try:
                platform.oom_join(rep)
            except FaultError as exc:
                ctx.sink.emit("fault", "oom_recap_failed", pid=rep.pid, error=str(exc))
                return None
        ctx.sink.emit("fault", "oom_recapped", pid=rep.pid, rank=rep.rank, node=rep.node)
        return rep

    def _lift(self, ctx: FaultContext) -> None:
        try:
            self.revert(ctx)
        except FaultError as exc:  # left for the end of the item and `faultdrill cleanup`
            ctx.sink.emit("fault", "revert_failed", fault=self.spec.kind, error=str(exc))

    def _wait(self, done: Any, timeout_s: float) -> bool:
        """Poll ``done()`` until it is true (True) or ``timeout_s`` passed or the fault is
        reverted (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self._stopping.is_set():
            if done():
                return True
            time.sleep(_POLL_S)
        return False
