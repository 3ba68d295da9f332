"""Control-plane faults (round 3): what coordinates the job goes away for a while.

``control-plane-outage`` takes the component that coordinates the job away for ``for_s``
seconds, in one of three modes, each an action of the platform (``ControlPlaneActions``):

* ``pause``: its processes are stopped (SIGSTOP), and resumed after (a hung controller);
* ``cut``: every packet to and from its port is dropped on its node's link (a controller
  cut off from the network; the local platform needs ``isolation: netns``). The host's own
  node still reaches it through its loopback route, exactly as a control plane co-located
  with one node would;
* ``stop``: it is stopped, and started again after (a controller restart; a scheduler's
  controller can, the local platform's store cannot: it lives inside torchrun's agent).

On the local platform that is the c10d rendezvous store, which lives in the first node's
torchrun agent; on a scheduler it is its controller (slurmctld, the Ray GCS,
kube-apiserver). Running workers talk to each other directly (gloo), so the question the
drill answers is what needed the control plane meanwhile: a restart, a membership change,
a keep-alive.

To find out whether a restart *during* the outage can rendezvous, ``restart_during`` kills
one worker ``after_s`` seconds into the outage (a ``restart_probe`` event records it).

Every change is recorded in the ledger before it is applied, and undone (SIGCONT only to
the same pid with the same start time; the rule deleted by its tag) on revert, on a
signal, or by ``faultdrill cleanup``.
"""

from __future__ import annotations

import threading
from typing import Any

from faultdrill.errors import FaultError
from faultdrill.faults.api import (
    Fault,
    FaultContext,
    FaultSpec,
    cannot,
    command_of,
    register,
)
from faultdrill.faults.process import KillWorker, KillWorkerSpec, WorkerTarget
from faultdrill.plan.faults import ControlPlaneOutageSpec, RestartProbe
from faultdrill.platforms.api import Ability, ControlPlaneActions

__all__ = ["ControlPlaneOutageSpec", "RestartProbe"]

_MODE_ABILITY = {
    "pause": Ability.CONTROL_PLANE_PAUSE,
    "cut": Ability.CONTROL_PLANE_CUT,
    "stop": Ability.CONTROL_PLANE_STOP,
}


@register
class ControlPlaneOutage(Fault):
    """Take the control plane away (pause, cut or stop) for ``for_s`` seconds."""

    kind = "control-plane-outage"
    spec_model = ControlPlaneOutageSpec

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self._over = threading.Event()

    @classmethod
    def requires_for(cls, spec: FaultSpec) -> frozenset[Ability]:
        assert isinstance(spec, ControlPlaneOutageSpec)
        needs = {_MODE_ABILITY[spec.mode]}
        if spec.restart_during is not None:
            needs.add(Ability.SIGNAL_RANK)
        return frozenset(needs)

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
        ability = _MODE_ABILITY[spec.mode]
        platform = ctx.platform
        if not isinstance(platform, ControlPlaneActions):
            raise cannot(ctx, ability)
        if spec.mode == "pause":
            changes = platform.control_plane_pause()
        elif spec.mode == "cut":
            changes = platform.control_plane_cut()
        else:
            changes = platform.control_plane_stop()
        results = self.apply_changes(ctx, changes)
        facts = _facts(spec.mode, results)
        if spec.restart_during is not None:
            threading.Thread(
                target=self._restart_probe, args=(ctx, spec.restart_during), daemon=True
            ).start()
        return {
            "mode": spec.mode,
            "control_plane": platform.control_plane_label(),
            "restart_during": spec.restart_during.model_dump() if spec.restart_during else None,
            **facts,
            "command": command_of(changes),
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


def _facts(mode: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    """The injection's facts from what the platform reported applying: the processes
    paused, or the rules of the cut, and where."""
    first = results[0] if results else {}
    if mode == "pause":
        return {"pids": [r["pid"] for r in results if "pid" in r], "node": first.get("node")}
    out: dict[str, Any] = {k: first[k] for k in ("node", "port", "dev") if k in first}
    if mode == "cut":
        out["rules"] = [r["rule"] for r in results if "rule" in r]
    else:
        out.update({k: v for r in results for k, v in r.items() if k not in out})
    return out
