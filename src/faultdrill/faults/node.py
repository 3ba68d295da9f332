"""Node faults (round 2): a whole node goes away, hangs, or is taken out of scheduling.

==============  ==========================================================================
``node-down``   the machine is gone: its link is cut first (peers see silence, not a
                reset), then every process of the node is killed (its cgroup). The
                platform marks it ``down`` and never schedules on it again in this drill.
``node-freeze`` a hang, not a crash: every process of the node is stopped with the cgroup
                freezer for ``for_s`` seconds, then thawed. Which timeout fired (gloo,
                rendezvous keep-alive or join, store read), or that none did, is judged
                from the timeline (``expectation.timeout-fired``).
``node-drain``  the node is taken out of scheduling: marked ``drained`` (excluded from
                placement), then its agent is stopped cleanly (SIGTERM: torchrun stops its
                workers and leaves), so it is absent from the next rendezvous.
==============  ==========================================================================

Needs ability ``node-control`` (``local`` with ``isolation: netns``). Every change is
recorded in the ledger before it is made: a cut link and a frozen group are undone by
revert (or ``faultdrill cleanup``); a signal cannot be undone and is recorded as done.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from faultdrill.errors import FaultError
from faultdrill.faults.api import Fault, FaultContext, FaultSpec, register
from faultdrill.faults.network import links_of
from faultdrill.faults.process import send_signal
from faultdrill.frozen import Frozen
from faultdrill.ledger import undoer
from faultdrill.platforms.api import ABILITY_NODE_CONTROL, NodeControl
from faultdrill.platforms.local import procfs
from faultdrill.platforms.local.linux import ns_run

__all__ = ["NodeDownSpec", "NodeDrainSpec", "NodeFreezeSpec", "NodeTarget"]


class NodeTarget(Frozen):
    node: str = Field(pattern=r"^n\d{1,2}$")

    def label(self) -> str:
        return f"node {self.node}"


class _NodeSpec(FaultSpec):
    target: NodeTarget

    def target_label(self) -> str:
        return self.target.label()


class NodeDownSpec(_NodeSpec):
    kind: Literal["node-down"] = "node-down"


class NodeFreezeSpec(_NodeSpec):
    kind: Literal["node-freeze"] = "node-freeze"
    for_s: float = Field(gt=0, le=3600, description="how long the node stays frozen")

    @property
    def duration_s(self) -> float | None:
        return self.for_s


class NodeDrainSpec(_NodeSpec):
    kind: Literal["node-drain"] = "node-drain"


@undoer("freeze")
def _undo_freeze(data: dict[str, Any]) -> None:
    """Thaw the recorded freezer group (gone already is fine)."""
    group = procfs.Cgroup(Path(str(data["path"])))
    if not group.exists():
        return
    group.thaw()
    for _ in range(100):
        if group.state() in ("THAWED", "GONE"):
            return
        time.sleep(0.02)
    raise OSError(f"{group.path} is still {group.state()} after THAWED was written")


@undoer("node-kill")
def _undo_node_kill(data: dict[str, Any]) -> None:
    """Killed processes cannot be revived; recorded so the ledger shows it happened."""


def _control(ctx: FaultContext) -> NodeControl:
    platform = ctx.platform
    if not isinstance(platform, NodeControl):
        raise FaultError(f"platform {platform.name!r} cannot control whole nodes")
    return platform


class _NodeFault(Fault):
    requires = frozenset({ABILITY_NODE_CONTROL})

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

    def _group(self, ctx: FaultContext, node: str) -> procfs.Cgroup:
        group = getattr(ctx.platform, "cgroup", lambda _n: None)(node)
        if group is None:
            raise FaultError(f"{self.spec.kind}: node {node} has no cgroup (needs root)")
        assert isinstance(group, procfs.Cgroup)
        return group


@register
class NodeDown(_NodeFault):
    """The node is gone: link cut, then every process of it killed."""

    kind = "node-down"
    spec_model = NodeDownSpec

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, NodeDownSpec)
        node = spec.target.node
        control = _control(ctx)
        ln = links_of(ctx).link(node)
        group = self._group(ctx, node)
        # Mark it first, so the platform never mistakes the agent's death for the job's.
        control.set_node_state(node, "down", "node-down fault")
        self._apply(
            ctx,
            "link-down",
            {"ns": ln.ns, "dev": ln.dev, "node": node},
            f"link {ln.dev} down in {ln.ns} (node-down)",
            lambda: ns_run(ln.ns, ["ip", "link", "set", "dev", ln.dev, "down"]),
            f"cut the link of {node}",
        )
        pids = group.pids()
        kid = ctx.ledger.record(
            "node-kill",
            {"path": str(group.path), "pids": pids, "node": node},
            f"SIGKILL every process of {node} ({len(pids)})",
        )
        left = group.kill_all(timeout_s=5.0)
        ctx.ledger.mark_applied(kid)
        ctx.ledger.revert(kid)  # nothing to undo; closes the entry
        if left:
            raise FaultError(f"node-down: processes {left} of {node} survived SIGKILL")
        return {
            "node": node,
            "killed": pids,
            "dev": ln.dev,
            "command": f"ip -n {ln.ns} link set dev {ln.dev} down; "
            f"kill -KILL $(cat {group.path}/cgroup.procs)",
        }


@register
class NodeFreeze(_NodeFault):
    """Every process of the node stopped (cgroup freezer) for ``for_s`` seconds."""

    kind = "node-freeze"
    spec_model = NodeFreezeSpec

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, NodeFreezeSpec)
        node = spec.target.node
        control = _control(ctx)
        group = self._group(ctx, node)
        self._apply(
            ctx,
            "freeze",
            {"path": str(group.path), "node": node},
            f"freeze {group.path}",
            group.freeze,
            f"freeze {group.path}",
        )
        deadline = time.monotonic() + 5.0
        while group.state() == "FREEZING" and time.monotonic() < deadline:
            time.sleep(0.01)
        control.set_node_state(node, "frozen", "node-freeze fault")
        return {
            "node": node,
            "frozen": group.pids(),
            "freezer_state": group.state(),
            "for_s": spec.for_s,
            "command": f"echo FROZEN > {group.path}/freezer.state",
        }

    def revert(self, ctx: FaultContext) -> None:
        super().revert(ctx)
        spec = self.spec
        assert isinstance(spec, NodeFreezeSpec)
        platform = ctx.platform
        if isinstance(platform, NodeControl) and self.entry_ids:
            platform.set_node_state(spec.target.node, "up", "thawed")


@register
class NodeDrain(_NodeFault):
    """The node is taken out of scheduling and its agent stopped cleanly (SIGTERM)."""

    kind = "node-drain"
    spec_model = NodeDrainSpec

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, NodeDrainSpec)
        node = spec.target.node
        control = _control(ctx)
        pid = control.agent_pid(node)
        if pid is None:
            raise FaultError(f"node-drain: node {node} runs no agent")
        control.set_node_state(node, "drained", "node-drain fault")
        start = procfs.start_time(pid)
        label = f"SIGTERM agent pid {pid} of {node} (drain)"
        if not send_signal(ctx.ledger, pid, start, "SIGTERM", label):
            raise FaultError(f"node-drain: the agent of {node} exited before it was stopped")
        return {
            "node": node,
            "agent_pid": pid,
            "signal": "SIGTERM",
            "command": f"kill -TERM {pid}  # torchrun agent of {node}",
        }
