"""Control-plane faults (round 3): what coordinates the job goes away for a while.

``control-plane-outage`` takes the component that coordinates the job away for ``for_s``
seconds, in one of two modes:

* ``pause``: SIGSTOP the processes that host it, SIGCONT after (a hung controller);
* ``cut``: drop every packet to and from its port on its node's link (a controller cut
  off from the network; needs ``isolation: netns``). The host's own node still reaches it
  through its loopback route, exactly as a control plane co-located with one node would.

On the local platform that is the c10d rendezvous store, which lives in the first node's
torchrun agent; on a scheduler it would be its controller. Running workers talk to each other directly (gloo), so the
question the drill answers is what needed the control plane meanwhile: a restart, a
membership change, a keep-alive.

To find out whether a restart *during* the outage can rendezvous, ``restart_during`` kills
one worker ``after_s`` seconds into the outage (a ``restart_probe`` event records it).

The pause (or each rule) is recorded in the ledger before it is applied, and undone
(SIGCONT, only to the same pid with the same start time; the rule deleted by its tag) on
revert, on a signal, or by ``faultdrill cleanup``.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import Field, model_validator

from faultdrill.errors import FaultError
from faultdrill.faults.api import Fault, FaultContext, FaultSpec, register
from faultdrill.faults.process import MAX_RANK, KillWorker, KillWorkerSpec, WorkerTarget
from faultdrill.frozen import Frozen
from faultdrill.ledger import undoer
from faultdrill.platforms.api import Replica
from faultdrill.platforms.local import procfs

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


@runtime_checkable
class ReachesControlPlane(Protocol):
    """What mode ``cut`` needs besides: where the control plane listens."""

    def control_plane_endpoint(self) -> tuple[str, int] | None:
        """(node hosting the control plane, its TCP port), None before the job runs."""
        ...


class RestartProbe(Frozen):
    """Kill worker ``rank`` ``after_s`` seconds into the outage."""

    rank: int = Field(ge=0, le=MAX_RANK)
    after_s: float = Field(ge=0, le=3600)


class ControlPlaneOutageSpec(FaultSpec):
    kind: Literal["control-plane-outage"] = "control-plane-outage"
    mode: Literal["pause", "cut"] = Field(
        "pause",
        description="pause: SIGSTOP the control plane's processes, SIGCONT after for_s; "
        "cut: drop its traffic on its node's link for for_s (isolation: netns)",
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
        self.rules: list[Any] = []

    @classmethod
    def validate_against(cls, spec: FaultSpec, plan: Any) -> str | None:
        assert isinstance(spec, ControlPlaneOutageSpec)
        if spec.mode == "cut" and plan.resources.isolation != "netns":
            return (
                "control-plane-outage mode 'cut' drops traffic on a node's own link: set "
                "resources.isolation: netns (or use mode: pause)"
            )
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
        facts = self._cut(ctx, platform) if spec.mode == "cut" else self._pause(ctx, platform)
        if spec.restart_during is not None:
            threading.Thread(
                target=self._restart_probe, args=(ctx, spec.restart_during), daemon=True
            ).start()
        return {
            "mode": spec.mode,
            "control_plane": platform.control_plane_label(),
            "restart_during": spec.restart_during.model_dump() if spec.restart_during else None,
            **facts,
        }

    def _cut(self, ctx: FaultContext, platform: object) -> dict[str, Any]:
        from faultdrill.faults.network import add_drop_rule, links_of

        if not isinstance(platform, ReachesControlPlane):
            raise FaultError("this platform does not say where its control plane listens")
        where = platform.control_plane_endpoint()
        if where is None:
            raise FaultError("the control plane has no endpoint yet (job not running)")
        node, port = where
        ln = links_of(ctx).link(node)
        a = add_drop_rule(
            ctx,
            self,
            self.rules,
            ln,
            "INPUT",
            ["-i", ln.dev, "-p", "tcp", "--dport", str(port)],
            "control-plane cut",
        )
        b = add_drop_rule(
            ctx,
            self,
            self.rules,
            ln,
            "OUTPUT",
            ["-o", ln.dev, "-p", "tcp", "--sport", str(port)],
            "control-plane cut",
        )
        return {
            "node": node,
            "port": port,
            "dev": ln.dev,
            "rules": [a["rule"], b["rule"]],
            "command": f"{a['command']}; {b['command']}",
        }

    def _pause(self, ctx: FaultContext, platform: HostsControlPlane) -> dict[str, Any]:
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
        return {
            "pids": [r.pid for r in paused],
            "node": paused[0].node,
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
        if self.rules:
            from faultdrill.faults.network import forget_rules

            forget_rules(ctx, self.rules)
        super().revert(ctx)
