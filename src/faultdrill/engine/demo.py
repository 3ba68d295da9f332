"""The demo's plan on a machine without network namespaces (``faultdrill demo``)."""

from __future__ import annotations

from faultdrill import plugins
from faultdrill.admit import plan_without
from faultdrill.faults import FAULTS
from faultdrill.host.linux import netns_unavailable
from faultdrill.plan import Plan
from faultdrill.platforms.local.platform import LocalPlatform

__all__ = ["without_netns_if_unavailable"]


def without_netns_if_unavailable(plan: Plan) -> tuple[Plan, str | None]:
    """For the demo: when this machine cannot create namespaces, the same plan with
    ``isolation: none`` and without the scenarios and controls whose faults need them,
    plus a sentence saying so; otherwise the plan unchanged and None."""
    if plan.resources.isolation != "netns":
        return plan, None
    why = netns_unavailable()
    if why is None:
        return plan, None
    plugins.load()
    can = LocalPlatform.abilities_for(plan.resources.model_copy(update={"isolation": "none"}))
    dropped = [
        item.id
        for item in plan.items()
        if not FAULTS[item.fault.kind].requires_for(item.fault) <= can
    ]
    note = (
        f"{why}; running the demo without network isolation"
        + (f" and without {', '.join(dropped)}" if dropped else "")
        + " (run as root for the multi-node network drills)"
    )
    source = "demo plan without network namespaces"
    return plan_without(plan, set(dropped), source=source, isolation="none", spares=0), note
