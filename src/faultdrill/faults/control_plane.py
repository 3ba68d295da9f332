"""Control-plane faults (round 3): what coordinates the job goes away for a while.

``control-plane-outage`` pauses (SIGSTOP) the processes that host the platform's control
plane for ``for_s`` seconds and resumes them (SIGCONT). On the local platform that is the
c10d rendezvous store, which lives in the first node's torchrun agent; on a scheduler it
would be its controller. Running workers talk to each other directly (gloo), so the
question the drill answers is what needed the control plane meanwhile: a restart, a
membership change, a keep-alive.

To find out whether a restart *during* the outage can rendezvous, ``restart_during`` kills
one worker ``after_s`` seconds into the outage (a ``restart_probe`` event records it).

The pause is recorded in the ledger before it is applied, and undone (SIGCONT, only to the
same pid with the same start time) on revert, on a signal, or by ``faultdrill cleanup``.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from faultdrill import procfs
from faultdrill.errors import FaultError
from faultdrill.faults.api import Fault, FaultContext, FaultSpec, register
from faultdrill.faults.process import KillWorker, KillWorkerSpec, WorkerTarget
from faultdrill.ledger import undoer
from faultdrill.platforms.api import Replica

__all__ = [
    "ABILITY_CONTROL_PLANE",
    "ControlPlaneOutageSpec",
    "HostsControlPlane",
    "RestartProbe",
]

#: The platform can name the processes that host its control plane.
ABILITY_CONTROL_PLANE = "control-plane"


@runtime_checkable
class HostsControlPlane(Protocol):
    """Ability ``control-plane``: the live processes hosting the job's control plane, and
    what that control plane is, in words."""

    def control_plane_processes(self) -> list[Replica]: ...

    def control_plane_label(self) -> str: ...


class RestartProbe(BaseModel):
    """Kill worker ``rank`` ``after_s`` seconds into the outage."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    rank: int = Field(ge=0)
    after_s: float = Field(ge=0)


class ControlPlaneOutageSpec(FaultSpec):
    kind: Literal["control-plane-outage"] = "control-plane-outage"
    mode: Literal["pause"] = Field(
        "pause", description="pause: SIGSTOP the control plane's processes, SIGCONT after for_s"
    )
    for_s: float = Field(gt=0, le=600, description="how long the control plane is away")
    restart_during: RestartProbe | None = Field(
        None, description="kill a worker this long into the outage: can a restart rendezvous?"
    )

    @model_validator(mode="after")
    def _probe_inside(self) -> ControlPlaneOutageSpec:
        if self.restart_during is not None and self.restart_during.after_s >= self.for_s:
            raise ValueError(
                f"restart_during.after_s ({self.restart_during.after_s}) must be less than "
                f"for_s ({self.for_s}): the restart must fall inside the outage"
            )
        return self

    def target_label(self) -> str:
        return "the control plane (rendezvous store)"

    @property
    def duration_s(self) -> float | None:
        return self.for_s


@undoer("sigstop")
def _undo_sigstop(data: dict[str, Any]) -> None:
    """Resume the paused process, only if it is still the one that was paused."""
    pid, start = int(data["pid"]), data.get("start_time")
    if procfs.alive(pid, None if start is None else int(start)):
        procfs.kill_checked(pid, None if start is None else int(start), signal.SIGCONT)


@register
class ControlPlaneOutage(Fault):
    """Pause the control plane's processes for ``for_s`` seconds."""

    kind = "control-plane-outage"
    spec_model = ControlPlaneOutageSpec
    requires = frozenset({ABILITY_CONTROL_PLANE})

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self._over = threading.Event()

    @classmethod
    def validate_against(cls, spec: FaultSpec, plan: Any) -> str | None:
        assert isinstance(spec, ControlPlaneOutageSpec)
        probe = spec.restart_during
        if probe is not None and probe.rank >= plan.resources.world_size:
            return (
                f"control-plane-outage restart_during.rank {probe.rank} does not exist "
                f"(world size {plan.resources.world_size})"
            )
        return None

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, ControlPlaneOutageSpec)
        platform = ctx.platform
        if not isinstance(platform, HostsControlPlane):
            raise FaultError(f"platform {platform.name!r} cannot name its control plane")
        procs = platform.control_plane_processes()
        if not procs:
            raise FaultError("no live process hosts the control plane")
        paused = []
        for rep in procs:
            eid = ctx.ledger.record(
                "sigstop",
                {"pid": rep.pid, "start_time": rep.start_time},
                f"SIGSTOP pid {rep.pid} ({rep.role} on {rep.node}: control plane)",
            )
            self.entry_ids.append(eid)
            if not procfs.kill_checked(rep.pid, rep.start_time, signal.SIGSTOP):
                raise FaultError(f"control-plane process {rep.pid} exited before the pause")
            ctx.ledger.mark_applied(eid)
            paused.append(rep)
        if spec.restart_during is not None:
            threading.Thread(
                target=self._restart_probe, args=(ctx, spec.restart_during), daemon=True
            ).start()
        return {
            "mode": spec.mode,
            "control_plane": platform.control_plane_label(),
            "pids": [r.pid for r in paused],
            "node": paused[0].node,
            "restart_during": spec.restart_during.model_dump() if spec.restart_during else None,
            "command": "kill -STOP " + " ".join(str(r.pid) for r in paused),
        }

    def _restart_probe(self, ctx: FaultContext, probe: RestartProbe) -> None:
        if self._over.wait(probe.after_s):
            return  # the outage ended early (the drill stopped): no probe
        try:
            facts = KillWorker(KillWorkerSpec(target=WorkerTarget(rank=probe.rank))).inject(ctx)
        except FaultError as exc:
            ctx.sink.emit("fault", "restart_probe_failed", rank=probe.rank, error=str(exc))
            return
        ctx.sink.emit("fault", "restart_probe", **facts)

    def revert(self, ctx: FaultContext) -> None:
        self._over.set()
        super().revert(ctx)
