"""What a recovery depended on, and who owns each dependency: data for the cost discussion.

If a recovery relied on a spare node, on the restart budget, on a person on call or on the
storage that holds checkpoints, that belongs in the implementation and cost discussion; and
what the platform does, what the enterprise's operations do and what the vendor's support
does are said separately (the plan's ``ownership``; an owner it does not name is "to be
agreed").

:func:`recovery_dependencies` reads one item's timeline and the plan; :func:`dependency_totals`
sums the items of a run. Pure: data in, data out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from faultdrill.readings.analysis import injections
from faultdrill.records import (
    CheckpointStorageUse,
    Dependencies,
    DependencyTotals,
    OperatorUse,
    RestartBudget,
    plain,
)

if TYPE_CHECKING:
    from faultdrill.plan import Control, Plan, Scenario
    from faultdrill.timeline import Timeline

__all__ = ["DEPENDENCIES", "TO_BE_AGREED", "dependency_totals", "recovery_dependencies"]

#: Every dependency a recovery can have (the plan's ``ownership`` fields), in report order.
DEPENDENCIES = (
    "spare_nodes",
    "restart_budget",
    "operator_actions",
    "checkpoint_storage",
    "environment_preparation",
    "dedicated_network",
    "recovery_runbook",
)
TO_BE_AGREED = "to be agreed"


def _since(mono: float, t0: float | None) -> float | None:
    return None if t0 is None else round(mono - t0, 3)


def _platform_steps(raw: Any) -> list[str]:
    """The platform's own steps of a manual restart (``Platform.resubmit_steps``), as
    "command (needs: permission)"; [] when the event has none."""
    if not isinstance(raw, list):
        return []
    return [
        f"{s.get('command')} (needs: {s.get('permission')})" for s in raw if isinstance(s, dict)
    ]


def _operator_actions(
    tl: Timeline, item: Scenario | Control | None, t0: float | None
) -> list[OperatorUse]:
    """Each operator action: what, by whom, with which permission and steps, and how long
    until the job made its next step (the observed time of the manual recovery)."""
    recovery = getattr(item, "recovery", None)
    st = tl.steps
    out = []
    for e in tl.of("harness", "operator_action"):
        later = st.mono[st.mono > e.mono] if len(st) else st.mono
        next_step = float(later.min()) if len(later) else None
        out.append(
            OperatorUse.model_validate(
                plain(
                    {
                        "action": e.get("action"),
                        "operator": e.get("operator"),
                        "runbook": e.get("runbook"),
                        "permission": getattr(recovery, "permission", "") or TO_BE_AGREED,
                        "steps": list(getattr(recovery, "steps", ()) or ())
                        or _platform_steps(e.get("steps"))
                        or ([str(e.get("runbook"))] if e.get("runbook") else []),
                        "at_s": _since(e.mono, t0),
                        "observed_s": None if next_step is None else round(next_step - e.mono, 3),
                        "observed_by": "from the action to the job's next step",
                    }
                )
            )
        )
    return out


def _restarts(tl: Timeline, plan: Plan, resubmits: int) -> RestartBudget:
    """Restarts the platform made by itself: generations after the first, less those an
    operator's resubmission started (each resubmission starts a fresh budget)."""
    gens = len(tl.incarnations)
    used = max(0, gens - 1 - resubmits)
    cap = plan.resources.max_restarts
    left = [
        int(e.get("restarts_left"))
        for e in tl.of("platform", "worker_group_failed")
        if e.get("restarts_left") is not None
    ]
    return RestartBudget.model_validate(
        {
            "used": used,
            "max_restarts": cap,
            "incarnations": gens,
            "resubmissions": resubmits,
            "fewest_left_reported": min(left) if left else None,
            "exhausted": used >= cap if cap else used > 0,
        }
    )


def _checkpoint_storage(tl: Timeline, plan: Plan, t0: float | None) -> CheckpointStorageUse:
    """The checkpoint storage the recovery relied on: how much the plan's policy keeps, and
    whether a restart after the fault loaded a checkpoint from it."""
    saves = tl.of("probe", "ckpt_save")
    sizes = [int(e.get("bytes") or 0) for e in saves]
    largest = max(sizes, default=0)
    loaded = [
        e
        for inc in tl.incarnations
        if t0 is not None and inc.started_mono > t0
        for e in inc.loads
        if e.kind == "ckpt_load"
    ]
    return CheckpointStorageUse.model_validate(
        {
            "used_by_recovery": bool(loaded),
            "loaded": sorted({str(e.get("id")) for e in loaded}),
            "saves": len(saves),
            "bytes_written": sum(sizes),
            "largest_checkpoint_bytes": largest,
            "kept": plan.checkpoint.keep,
            "held_bytes_bound": largest * plan.checkpoint.keep,
        }
    )


def recovery_dependencies(
    tl: Timeline, plan: Plan, item: Scenario | Control | None
) -> Dependencies:
    """What the recovery of one item used, with each dependency's owner.

    Keys: ``spare_nodes`` (spares placed: node, the node it replaced, when), ``rejected_spares``,
    ``restart_budget`` (restarts used of ``max_restarts``), ``operator_actions`` (action,
    operator, permission, steps, observed time), ``checkpoint_storage`` (what the policy
    holds, whether a restart loaded from it), ``dedicated_network`` (not observable: said so),
    ``used`` (the dependencies this recovery used, in
    :data:`DEPENDENCIES` order) and ``owners`` (dependency -> owner or "to be agreed", for
    those used)."""
    inj = injections(tl)
    t0 = inj[0].mono if inj else None
    spares = [
        {"node": e.get("node"), "replaces": e.get("replaces"), "at_s": _since(e.mono, t0)}
        for e in tl.of("platform", "spare_placed")
    ]
    rejected = [
        {"node": e.get("node"), "precondition": e.get("precondition"), "detail": e.get("detail")}
        for e in tl.of("platform", "spare_rejected")
    ]
    actions = _operator_actions(tl, item, t0)
    restarts = _restarts(tl, plan, sum(a.action == "resubmit" for a in actions))
    storage = _checkpoint_storage(tl, plan, t0)
    used = {
        "spare_nodes": bool(spares),
        "restart_budget": restarts.used > 0,
        "operator_actions": bool(actions),
        "checkpoint_storage": storage.used_by_recovery,
        "environment_preparation": bool(spares or rejected),
        # A drill cannot tell a dedicated network from a shared one; the platform or the
        # plan's ownership says whether the job has one.
        "dedicated_network": False,
        "recovery_runbook": any(a.runbook for a in actions),
    }
    names = [d for d in DEPENDENCIES if used[d]]
    return Dependencies.model_validate(
        {
            "spare_nodes": plain(spares),
            "rejected_spares": plain(rejected),
            "restart_budget": restarts,
            "operator_actions": actions,
            "checkpoint_storage": storage,
            "dedicated_network": plain(
                {
                    "used": None,
                    "isolation": plan.resources.isolation,
                    "note": "not observable in a drill: state it in the plan's ownership if the "
                    "job has a network of its own",
                }
            ),
            "used": names,
            "owners": {d: plan.ownership.owner_of(d) for d in names},
        }
    )


def dependency_totals(plan: Plan, items: Iterable[tuple[str, Dependencies]]) -> DependencyTotals:
    """Sum the dependencies of a run's items (``(item id, recovery_dependencies(...))``)
    for the cost discussion, and split them by owner.

    Keys: ``spare_nodes`` (placements and the items that needed one), ``restarts`` (total
    and per item), ``operator_actions`` (count, observed seconds in all, items),
    ``checkpoint_storage`` (largest bound held, items that loaded from it),
    ``by_dependency`` (dependency -> owner and the items that used it), ``by_owner``
    (owner -> dependencies) and ``to_be_agreed`` (dependencies used without an owner)."""
    items = list(items)
    users: dict[str, list[str]] = {d: [] for d in DEPENDENCIES}
    for item_id, deps in items:
        for d in deps.used:
            users[d].append(item_id)
    actions = [(i, a) for i, deps in items for a in deps.operator_actions]
    observed = [a.observed_s for _, a in actions if a.observed_s is not None]
    by_dependency: dict[str, dict[str, Any]] = {
        d: {"owner": plan.ownership.owner_of(d), "items": users[d]} for d in DEPENDENCIES
    }
    by_owner: dict[str, list[str]] = {}
    for d, row in by_dependency.items():
        by_owner.setdefault(row["owner"], []).append(d)
    return DependencyTotals.model_validate(
        plain(
            {
                "spare_nodes": {
                    "placements": sum(len(deps.spare_nodes) for _, deps in items),
                    "items": users["spare_nodes"],
                },
                "restarts": {
                    "total": sum(deps.restart_budget.used for _, deps in items),
                    "per_item": {i: deps.restart_budget.used for i, deps in items},
                    "max_restarts": plan.resources.max_restarts,
                },
                "operator_actions": {
                    "count": len(actions),
                    "observed_s_total": round(sum(observed), 3),
                    "items": sorted({i for i, _ in actions}),
                },
                "checkpoint_storage": {
                    "held_bytes_bound": max(
                        (deps.checkpoint_storage.held_bytes_bound for _, deps in items),
                        default=0,
                    ),
                    "items": users["checkpoint_storage"],
                },
                "by_dependency": by_dependency,
                "by_owner": by_owner,
                "to_be_agreed": [
                    d
                    for d in DEPENDENCIES
                    if users[d] and by_dependency[d]["owner"] == TO_BE_AGREED
                ],
            }
        )
    )
