"""Network faults (rounds 1-2): a node's link loses, slows, flaps or is cut.

Each acts on the node's own link through the platform (``LinkActions``), exactly as a bad
cable, a congested port or a switch ACL would:

==============  ==========================================================================
``link-loss``   P % of the node's packets dropped, each way (or only those to and from
                one ``peer``), for ``for_s`` seconds
``link-slow``   the node's link rate-limited (and its queue bounded) on both of its ends,
                for ``for_s`` seconds
``link-flap``   the node's link set down and up ``count`` times
``partition``   every packet of the node dropped (or only those to and from one ``peer``),
                for ``for_s`` seconds; ``peer: control-plane`` cuts the node off the
                control plane only (its kubelet, slurmd or agent loses the controller while
                the job's own traffic flows: the split brain of a node its scheduler
                believes lost), where the platform can (``link-cut-control-plane``)
==============  ==========================================================================

On the local platform with ``isolation: netns`` these are iptables ``statistic``/DROP
rules and ``tbf`` qdiscs inside the node's own namespaces, and ``ip link set down`` on its
veth (``tc netem`` does not exist in every kernel). Every rule is written to the ledger
before it is applied, so it is removed afterwards whatever happens: by the drill when
``for_s`` elapses, by the engine's cleanup path, or by ``faultdrill cleanup`` after a crash.
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
from faultdrill.plan.faults import (  # noqa: F401
    LinkFlapSpec,
    LinkLossSpec,
    LinkSlowSpec,
    LinkTarget,
    PartitionSpec,
    _Timed,
    check_nodes,
)
from faultdrill.platforms.api import CONTROL_PLANE_PEER, Ability, LinkActions

__all__ = [
    "CONTROL_PLANE_PEER",
    "LinkFlapSpec",
    "LinkLossSpec",
    "LinkSlowSpec",
    "LinkTarget",
    "PartitionSpec",
    "check_nodes",
]


# --- shared machinery -------------------------------------------------------------------


def rule_facts(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The interface and the rules that the platform reported applying."""
    return {
        "dev": next((r["dev"] for r in results if "dev" in r), None),
        "rules": [r["rule"] for r in results if "rule" in r],
    }


class _LinkFault(Fault):
    """Base of the link faults: the platform's link actions, applied and reverted through
    the ledger."""

    @classmethod
    def validate_against(cls, spec: FaultSpec, plan: Any) -> str | None:
        return check_nodes(spec, plan)

    def _links(self, ctx: FaultContext) -> LinkActions:
        platform = ctx.platform
        if not isinstance(platform, LinkActions):
            raise cannot(ctx, next(iter(self.requires)))
        return platform


# --- the faults ---------------------------------------------------------------------


@register
class LinkLoss(_LinkFault):
    """Drop P % of the packets of a node's link, each way, for ``for_s`` seconds."""

    kind = "link-loss"
    spec_model = LinkLossSpec
    requires = frozenset({Ability.LINK_LOSS})

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, LinkLossSpec)
        changes = self._links(ctx).link_loss(spec.target.node, spec.percent, peer=spec.target.peer)
        results = self.apply_changes(ctx, changes)
        return {
            "node": spec.target.node,
            "percent": spec.percent,
            **rule_facts(results),
            "command": command_of(changes),
        }


@register
class Partition(_LinkFault):
    """Cut a node from every peer (or from one ``peer``) for ``for_s`` seconds."""

    kind = "partition"
    spec_model = PartitionSpec
    requires = frozenset({Ability.LINK_CUT})

    @classmethod
    def requires_for(cls, spec: FaultSpec) -> frozenset[Ability]:
        assert isinstance(spec, PartitionSpec)
        if spec.target.peer == CONTROL_PLANE_PEER:
            return frozenset({Ability.LINK_CUT_CONTROL_PLANE})
        return cls.requires

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, PartitionSpec)
        changes = self._links(ctx).link_cut(spec.target.node, peer=spec.target.peer)
        results = self.apply_changes(ctx, changes)
        return {
            "node": spec.target.node,
            "peer": spec.target.peer,
            **rule_facts(results),
            "command": command_of(changes),
        }


@register
class LinkSlow(_LinkFault):
    """Rate-limit a node's link (both of its ends) for ``for_s`` seconds."""

    kind = "link-slow"
    spec_model = LinkSlowSpec
    requires = frozenset({Ability.LINK_SLOW})

    @classmethod
    def validate_against(cls, spec: FaultSpec, plan: Any) -> str | None:
        assert isinstance(spec, LinkSlowSpec)
        if spec.target.peer is not None:
            return "link-slow acts on the node's whole link; remove 'target.peer'"
        return check_nodes(spec, plan)

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, LinkSlowSpec)
        changes = self._links(ctx).link_slow(
            spec.target.node, rate=spec.rate, burst=spec.burst, queue_ms=spec.queue_ms
        )
        self.apply_changes(ctx, changes)
        return {
            "node": spec.target.node,
            "rate": spec.rate,
            "queue_ms": spec.queue_ms,
            "command": command_of(changes),
        }


@register
class LinkFlap(_LinkFault):
    """Set a node's link down and up ``count`` times (``down_s`` down, ``up_s`` up).

    ``inject`` takes the link down the first time and returns; a thread does the rest.
    Each down is recorded in the ledger before it is made and undone (link up) after.
    """

    kind = "link-flap"
    spec_model = LinkFlapSpec
    requires = frozenset({Ability.LINK_FLAP})

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _down(self, ctx: FaultContext, i: int) -> tuple[str, dict[str, Any], str]:
        """One down: (ledger entry, the platform's facts, the command)."""
        node = self.spec.target.node  # type: ignore[attr-defined]
        change = self._links(ctx).link_down(node)
        facts = self.apply_change(ctx, change)
        ctx.sink.emit("fault", "link_down", node=node, dev=facts.get("dev"), flap=i)
        return self.entry_ids[-1], facts, change.command

    def _up(self, ctx: FaultContext, eid: str, facts: dict[str, Any], i: int) -> None:
        self.undo_change(ctx, eid)
        node = self.spec.target.node  # type: ignore[attr-defined]
        ctx.sink.emit("fault", "link_up", node=node, dev=facts.get("dev"), flap=i)

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, LinkFlapSpec)
        first, facts, command = self._down(ctx, 1)
        self._thread = threading.Thread(
            target=self._run, args=(ctx, first, facts), name="link-flap", daemon=True
        )
        self._thread.start()
        return {
            "node": spec.target.node,
            "dev": facts.get("dev"),
            "count": spec.count,
            "down_s": spec.down_s,
            "up_s": spec.up_s,
            "command": f"{command}  (then up; x{spec.count}: "
            f"{spec.down_s:g} s down, {spec.up_s:g} s up)",
        }

    def _run(self, ctx: FaultContext, eid: str, facts: dict[str, Any]) -> None:
        spec = self.spec
        assert isinstance(spec, LinkFlapSpec)
        try:
            for i in range(1, spec.count + 1):
                if i > 1:
                    if self._stop.wait(spec.up_s):
                        return
                    eid, facts, _ = self._down(ctx, i)
                self._stop.wait(spec.down_s)
                self._up(ctx, eid, facts, i)
                if self._stop.is_set():
                    return
        except FaultError as exc:
            ctx.sink.emit("fault", "flap_error", node=spec.target.node, error=str(exc)[:300])

    def revert(self, ctx: FaultContext) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        super().revert(ctx)
