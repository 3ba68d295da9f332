"""Network faults (rounds 1-2): a node's link loses, slows, flaps or is cut.

They act on the node's own link, inside the namespaces of a ``local`` platform with
``isolation: netns`` (ability ``network-links``), exactly as a bad cable, a congested
port or a switch ACL would: ``tc netem`` does not exist in every kernel, so only what
does is used:

==============  ==========================================================================
``link-loss``   iptables ``statistic`` random DROP of P % on the node's interface, both
                directions, for ``for_s`` seconds
``link-slow``   a ``tbf`` rate limit (and queue bound) on both ends of the node's veth
                pair, for ``for_s`` seconds
``link-flap``   the node's interface set down and up ``count`` times
``partition``   every packet on the node's interface dropped (or only those to and from
                one ``peer``), for ``for_s`` seconds
==============  ==========================================================================

Every rule is written to the ledger before it is applied (its undo deletes exactly that
rule, found by its comment tag), so it is removed afterwards whatever happens: by the
drill when ``for_s`` elapses, by the engine's cleanup path, or by ``faultdrill cleanup``
after a crash.
"""

from __future__ import annotations

import contextlib
import threading
from functools import partial
from typing import Any, Literal

from pydantic import Field, field_validator

from faultdrill.errors import FaultError
from faultdrill.faults.api import Fault, FaultContext, FaultSpec, register
from faultdrill.frozen import Frozen
from faultdrill.ledger import undoer
from faultdrill.platforms.api import ABILITY_NETWORK_LINKS, NetworkLinks
from faultdrill.platforms.local.linux import (
    NodeLink,
    _ActiveRule,
    fresh_rule_id,
    link_exists,
    netns_exists,
    ns_run,
)

__all__ = ["LinkFlapSpec", "LinkLossSpec", "LinkSlowSpec", "LinkTarget", "PartitionSpec"]


class LinkTarget(Frozen):
    """Whose link: a node (``n2``), optionally only towards one ``peer`` (partition)."""

    node: str = Field(pattern=r"^n\d{1,2}$")
    peer: str | None = Field(None, pattern=r"^n\d{1,2}$")

    def label(self) -> str:
        return f"node {self.node}" + (f" <-> {self.peer}" if self.peer else "")


class _Timed(FaultSpec):
    target: LinkTarget
    for_s: float = Field(gt=0, le=3600, description="how long the fault stays applied")

    def target_label(self) -> str:
        return self.target.label()

    @property
    def duration_s(self) -> float | None:
        return self.for_s


class LinkLossSpec(_Timed):
    kind: Literal["link-loss"] = "link-loss"
    percent: float = Field(gt=0, le=100, description="share of packets dropped, each way")


class LinkSlowSpec(_Timed):
    kind: Literal["link-slow"] = "link-slow"
    rate: str = Field(
        "1mbit",
        pattern=r"^\d+(\.\d+)?(bit|kbit|mbit|gbit)$",
        description="tbf rate, e.g. 512kbit, 1mbit",
    )
    queue_ms: int = Field(
        200, ge=1, le=10000, description="tbf latency: the longest a packet may queue"
    )
    burst: str = Field("32kbit", pattern=r"^\d+(kbit|mbit|k|b)?$")


class LinkFlapSpec(FaultSpec):
    kind: Literal["link-flap"] = "link-flap"
    target: LinkTarget
    count: int = Field(3, ge=1, le=100, description="how many times the link goes down")
    down_s: float = Field(1.0, gt=0, le=600)
    up_s: float = Field(1.0, gt=0, le=600)

    @field_validator("target")
    @classmethod
    def _no_peer(cls, v: LinkTarget) -> LinkTarget:
        if v.peer is not None:
            raise ValueError("link-flap acts on the node's whole link; remove 'peer'")
        return v

    def target_label(self) -> str:
        return self.target.label()

    @property
    def duration_s(self) -> float | None:
        return self.count * (self.down_s + self.up_s)


class PartitionSpec(_Timed):
    kind: Literal["partition"] = "partition"


# --- undo functions -------------------------------------------------------------------


@undoer("iptables-rule")
def _undo_iptables(data: dict[str, Any]) -> None:
    """Delete every copy of the recorded rule from its chain (none left is fine)."""
    ns = str(data["ns"])
    if not netns_exists(ns):
        return  # the namespace took its rules with it
    rule = [str(a) for a in data["rule"]]
    chain = str(data["chain"])
    for _ in range(10):
        if ns_run(ns, ["iptables", "-w", "-C", chain, *rule], check=False).returncode != 0:
            return
        ns_run(ns, ["iptables", "-w", "-D", chain, *rule])
    raise OSError(f"rule {data.get('tag')} keeps reappearing in {ns} {chain}")


@undoer("tc-qdisc")
def _undo_qdisc(data: dict[str, Any]) -> None:
    ns, dev = str(data["ns"]), str(data["dev"])
    if not link_exists(ns, dev):
        return
    shown = ns_run(ns, ["tc", "qdisc", "show", "dev", dev, "root"], check=False).stdout
    if "tbf" in shown:
        ns_run(ns, ["tc", "qdisc", "del", "dev", dev, "root"])


@undoer("link-down")
def _undo_link_down(data: dict[str, Any]) -> None:
    ns, dev = str(data["ns"]), str(data["dev"])
    if link_exists(ns, dev):
        ns_run(ns, ["ip", "link", "set", "dev", dev, "up"])


# --- shared machinery -------------------------------------------------------------------


def links_of(ctx: FaultContext) -> NetworkLinks:
    platform = ctx.platform
    if not isinstance(platform, NetworkLinks):
        raise FaultError(f"platform {platform.name!r} has no per-node links (use isolation: netns)")
    return platform


def check_nodes(spec: Any, plan: Any) -> str | None:
    """A problem with the target nodes of ``spec`` in ``plan`` (unknown node), or None."""
    res = plan.resources
    known = {f"n{i}" for i in range(1, res.nodes + res.spares + 1)}
    for role, node in (
        ("target node", spec.target.node),
        ("peer", getattr(spec.target, "peer", None)),
    ):
        if node is not None and node not in known:
            return (
                f"{spec.kind}: {role} {node!r} is not a node of this layout "
                f"(nodes: {', '.join(sorted(known))})"
            )
    if getattr(spec.target, "peer", None) == spec.target.node:
        return f"{spec.kind}: peer must differ from the target node"
    return None


def add_drop_rule(
    ctx: FaultContext,
    owner: Fault,
    rules: list[_ActiveRule],
    ln: NodeLink,
    chain: str,
    match: list[str],
    what: str,
) -> dict[str, Any]:
    """Insert one tagged iptables DROP rule in ``ln``'s namespace: recorded in the ledger
    first (entry id kept on ``owner`` for its revert), then registered with the platform
    so the network track reads its counters. Returns the facts for the injection event."""
    tag = fresh_rule_id()
    rule = [*match, "-m", "comment", "--comment", tag, "-j", "DROP"]
    owner._apply(
        ctx,
        "iptables-rule",
        {"ns": ln.ns, "chain": chain, "rule": rule, "tag": tag, "node": ln.node},
        f"iptables {chain} {' '.join(rule)} in {ln.ns}",
        lambda: ns_run(ln.ns, ["iptables", "-w", "-I", chain, *rule]),
        f"add {what} on {ln.node}",
    )
    active = _ActiveRule(tag, ln.node, ln.ns, "iptables", chain=chain, fault=owner.spec.kind)
    rules.append(active)
    links_of(ctx).add_rule(active)
    return {"rule": tag, "chain": chain, "command": f"iptables -w -I {chain} {' '.join(rule)}"}


def forget_rules(ctx: FaultContext, rules: list[_ActiveRule]) -> None:
    """Take the final counters of ``rules`` and stop tracking them (before their undo)."""
    track = getattr(ctx.platform, "net_track", None)
    platform = ctx.platform
    for rule in rules:
        if track is not None:
            with contextlib.suppress(Exception):
                track.emit_rule(rule, final=True)
        if isinstance(platform, NetworkLinks):
            platform.drop_rule(rule.rule_id)


class _LinkFault(Fault):
    """Base of the link faults: applies ledger-recorded iptables rules or qdiscs and
    registers them with the platform so the network track reads their counters."""

    requires = frozenset({ABILITY_NETWORK_LINKS})

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self.rules: list[_ActiveRule] = []

    @classmethod
    def validate_against(cls, spec: FaultSpec, plan: Any) -> str | None:
        return check_nodes(spec, plan)

    def _iptables(
        self, ctx: FaultContext, ln: NodeLink, chain: str, match: list[str], what: str
    ) -> dict[str, Any]:
        return add_drop_rule(ctx, self, self.rules, ln, chain, match, what)

    def revert(self, ctx: FaultContext) -> None:
        forget_rules(ctx, self.rules)
        super().revert(ctx)


# --- the faults ---------------------------------------------------------------------


@register
class LinkLoss(_LinkFault):
    """Drop P % of the packets on a node's interface, each way, for ``for_s`` seconds."""

    kind = "link-loss"
    spec_model = LinkLossSpec

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, LinkLossSpec)
        ln = links_of(ctx).link(spec.target.node)
        p = f"{spec.percent / 100:.6f}"
        stat = ["-m", "statistic", "--mode", "random", "--probability", p]
        peer = _peer_match(ctx, spec.target)
        a = self._iptables(ctx, ln, "INPUT", ["-i", ln.dev, *peer[0], *stat], "loss rule")
        b = self._iptables(ctx, ln, "OUTPUT", ["-o", ln.dev, *peer[1], *stat], "loss rule")
        return {
            "node": ln.node,
            "dev": ln.dev,
            "percent": spec.percent,
            "rules": [a["rule"], b["rule"]],
            "command": f"{a['command']}; {b['command']}",
        }


@register
class Partition(_LinkFault):
    """Cut a node from every peer (or from one ``peer``) for ``for_s`` seconds."""

    kind = "partition"
    spec_model = PartitionSpec

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, PartitionSpec)
        ln = links_of(ctx).link(spec.target.node)
        peer = _peer_match(ctx, spec.target)
        a = self._iptables(ctx, ln, "INPUT", ["-i", ln.dev, *peer[0]], "partition rule")
        b = self._iptables(ctx, ln, "OUTPUT", ["-o", ln.dev, *peer[1]], "partition rule")
        return {
            "node": ln.node,
            "peer": spec.target.peer,
            "dev": ln.dev,
            "rules": [a["rule"], b["rule"]],
            "command": f"{a['command']}; {b['command']}",
        }


def _peer_match(ctx: FaultContext, target: LinkTarget) -> tuple[list[str], list[str]]:
    if target.peer is None:
        return [], []
    addr = links_of(ctx).link(target.peer).address
    return ["-s", f"{addr}/32"], ["-d", f"{addr}/32"]


@register
class LinkSlow(_LinkFault):
    """Rate-limit a node's link (tbf on both ends of its veth pair) for ``for_s`` seconds."""

    kind = "link-slow"
    spec_model = LinkSlowSpec

    @classmethod
    def validate_against(cls, spec: FaultSpec, plan: Any) -> str | None:
        assert isinstance(spec, LinkSlowSpec)
        if spec.target.peer is not None:
            return "link-slow acts on the node's whole link; remove 'target.peer'"
        return check_nodes(spec, plan)

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, LinkSlowSpec)
        ln = links_of(ctx).link(spec.target.node)
        commands = []
        for ns, dev in ((ln.ns, ln.dev), (ln.switch_ns, ln.switch_dev)):
            tbf = ["tbf", "rate", spec.rate, "burst", spec.burst, "latency", f"{spec.queue_ms}ms"]
            eid = self._apply(
                ctx,
                "tc-qdisc",
                {"ns": ns, "dev": dev, "node": ln.node},
                f"tc qdisc root {' '.join(tbf)} on {dev} in {ns}",
                partial(ns_run, ns, ["tc", "qdisc", "replace", "dev", dev, "root", *tbf]),
                f"shape {dev} in {ns}",
            )
            active = _ActiveRule(f"tbf-{eid}", ln.node, ns, "tbf", dev=dev, fault=self.spec.kind)
            self.rules.append(active)
            links_of(ctx).add_rule(active)
            commands.append(f"tc -n {ns} qdisc replace dev {dev} root {' '.join(tbf)}")
        return {
            "node": ln.node,
            "rate": spec.rate,
            "queue_ms": spec.queue_ms,
            "command": "; ".join(commands),
        }


@register
class LinkFlap(_LinkFault):
    """Set a node's interface down and up ``count`` times (``down_s`` down, ``up_s`` up).

    ``inject`` takes the link down the first time and returns; a thread does the rest.
    Each down is recorded in the ledger before it is made and undone (link up) after.
    """

    kind = "link-flap"
    spec_model = LinkFlapSpec

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.flaps: list[dict[str, Any]] = []

    def _down(self, ctx: FaultContext, ln: NodeLink, i: int) -> str:
        eid = self._apply(
            ctx,
            "link-down",
            {"ns": ln.ns, "dev": ln.dev, "node": ln.node},
            f"link {ln.dev} down in {ln.ns} (flap {i})",
            lambda: ns_run(ln.ns, ["ip", "link", "set", "dev", ln.dev, "down"]),
            f"take {ln.dev} down",
        )
        ctx.sink.emit("fault", "link_down", node=ln.node, dev=ln.dev, flap=i)
        return eid

    def _up(self, ctx: FaultContext, ln: NodeLink, eid: str, i: int) -> None:
        ctx.ledger.revert(eid)
        ctx.sink.emit("fault", "link_up", node=ln.node, dev=ln.dev, flap=i)

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        spec = self.spec
        assert isinstance(spec, LinkFlapSpec)
        ln = links_of(ctx).link(spec.target.node)
        first = self._down(ctx, ln, 1)
        self._thread = threading.Thread(
            target=self._run, args=(ctx, ln, first), name="link-flap", daemon=True
        )
        self._thread.start()
        return {
            "node": ln.node,
            "dev": ln.dev,
            "count": spec.count,
            "down_s": spec.down_s,
            "up_s": spec.up_s,
            "command": f"ip -n {ln.ns} link set dev {ln.dev} down/up x{spec.count}",
        }

    def _run(self, ctx: FaultContext, ln: NodeLink, eid: str) -> None:
        spec = self.spec
        assert isinstance(spec, LinkFlapSpec)
        try:
            for i in range(1, spec.count + 1):
                if i > 1:
                    if self._stop.wait(spec.up_s):
                        return
                    eid = self._down(ctx, ln, i)
                self._stop.wait(spec.down_s)
                self._up(ctx, ln, eid, i)
                if self._stop.is_set():
                    return
        except (OSError, FaultError) as exc:
            ctx.sink.emit("fault", "flap_error", node=ln.node, error=str(exc)[:300])

    def revert(self, ctx: FaultContext) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        super().revert(ctx)
