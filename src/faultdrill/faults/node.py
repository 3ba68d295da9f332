"""Node faults (round 2): a whole node goes away, hangs, or is taken out of scheduling.

==============  ==========================================================================
``node-down``   the machine is gone: its link is cut first (peers see silence, not a
                reset), then every process of the node is killed. The platform marks it
                ``down`` and never schedules on it again in this drill.
``node-freeze`` a hang, not a crash: every process of the node is stopped for ``for_s``
                seconds, then thawed. Which timeout fired (gloo, rendezvous keep-alive or
                join, store read), or that none did, is judged from the timeline
                (``expectation.timeout-fired``).
``node-drain``  the node is taken out of scheduling: marked ``drained`` (excluded from
                placement), then its work is stopped cleanly (the local platform: its
                agent gets SIGTERM, so torchrun stops its workers and leaves; a scheduler:
                its drain), so it is absent from the next rendezvous.
==============  ==========================================================================

Each asks the platform (``NodeActions``; the local platform can with ``isolation: netns``,
where a node is a network namespace and a cgroup). Every change is recorded in the ledger
before it is made: a cut link and a frozen node are undone by revert (or ``faultdrill
cleanup``); a killed process or a delivered signal cannot be undone and is recorded as done.
"""

from __future__ import annotations

from typing import Any

from faultdrill.faults.api import (
    Fault,
    FaultContext,
    FaultSpec,
    cannot,
    command_of,
    register,
)
from faultdrill.plan.faults import (
    NodeDownSpec,
    NodeDrainSpec,
    NodeFreezeSpec,
    NodeTarget,
    _NodeSpec,
)
from faultdrill.platforms.api import Ability, NodeActions

__all__ = ["NodeDownSpec", "NodeDrainSpec", "NodeFreezeSpec", "NodeTarget"]


class _NodeFault(Fault):
    @classmethod
    def validate_against(cls, spec: FaultSpec, plan: Any) -> str | None:
        assert isinstance(spec, _NodeSpec)
        res = plan.resources
        nodes = {f"n{i}" for i in range(1, res.nodes + 1)}
        if spec.target.node not in nodes:
            return (
                f"{spec.kind}: target node {spec.target.node!r} is not a working node of "
                f"this layout (nodes: {', '.join(sorted(nodes))}; spares cannot be targeted)"
            )
        return None

    def _nodes(self, ctx: FaultContext) -> NodeActions:
        platform = ctx.platform
        if not isinstance(platform, NodeActions):
            raise cannot(ctx, next(iter(self.requires)))
        return platform

    def _act(self, ctx: FaultContext, changes: list[Any]) -> dict[str, Any]:
        """Apply ``changes``; the node, the platform's facts of each, and the command."""
        facts: dict[str, Any] = {"node": self.spec.target.node}  # type: ignore[attr-defined]
        for result in self.apply_changes(ctx, changes):
            facts.update(result)
        facts["command"] = command_of(changes)
        return facts


@register
class NodeDown(_NodeFault):
    """The node is gone: link cut, then every process of it killed."""

    kind = "node-down"
    spec_model = NodeDownSpec
    requires = frozenset({Ability.NODE_DOWN})

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, NodeDownSpec)
        return self._act(ctx, self._nodes(ctx).node_down(spec.target.node))


@register
class NodeFreeze(_NodeFault):
    """Every process of the node stopped for ``for_s`` seconds, then thawed."""

    kind = "node-freeze"
    spec_model = NodeFreezeSpec
    requires = frozenset({Ability.NODE_FREEZE})

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, NodeFreezeSpec)
        facts = self._act(ctx, self._nodes(ctx).node_freeze(spec.target.node))
        return {**facts, "for_s": spec.for_s}


@register
class NodeDrain(_NodeFault):
    """The node is taken out of scheduling and its work stopped cleanly."""

    kind = "node-drain"
    spec_model = NodeDrainSpec
    requires = frozenset({Ability.NODE_DRAIN})

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, NodeDrainSpec)
        return self._act(ctx, self._nodes(ctx).node_drain(spec.target.node))
