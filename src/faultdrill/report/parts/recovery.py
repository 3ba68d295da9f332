"""What a recovery depended on, for each scenario and summed for the run's cost discussion,
and who owns each dependency: platform capability, enterprise operations, vendor support,
or "to be agreed" (methodology: dependencies are exposed, not hidden; what the platform,
the enterprise's operations and the vendor's support each do is said separately)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faultdrill.i18n import Translator
from faultdrill.report.blocks import Code, Para, Part, Row, Strong, Table, Text
from faultdrill.report.model import Item, Report
from faultdrill.report.parts.common import after_injection, size, value

__all__ = ["DEPENDENCIES", "OWNERS", "dependencies_part", "ownership_part", "totals_part"]

#: Every dependency a recovery can have, in report order (judge/dependencies.py).
DEPENDENCIES = (
    "spare_nodes",
    "restart_budget",
    "operator_actions",
    "checkpoint_storage",
    "environment_preparation",
    "dedicated_network",
    "recovery_runbook",
)
#: The owners a plan can name, and the one it did not name.
OWNERS = ("platform", "enterprise-operations", "vendor-support", "to be agreed")


def _m(data: Any, key: str) -> Mapping[str, Any]:
    v = data.get(key) if isinstance(data, Mapping) else None
    return v if isinstance(v, Mapping) else {}


def _l(data: Any, key: str) -> list[Any]:
    v = data.get(key) if isinstance(data, Mapping) else None
    return v if isinstance(v, list) else []


def owner(t: Translator, who: Any) -> str:
    return t.opt(f"owner.{who}", who)


def _spares(t: Translator, deps: Mapping[str, Any]) -> str:
    placed = [
        t(
            "dep.spare",
            node=value(t, s.get("node")),
            replaces=value(t, s.get("replaces")),
            at=after_injection(t, s.get("at_s")),
        )
        for s in _l(deps, "spare_nodes")
    ]
    rejected = [
        t(
            "dep.spare.rejected",
            node=value(t, s.get("node")),
            why=value(t, s.get("precondition")),
            detail=value(t, s.get("detail")),
        )
        for s in _l(deps, "rejected_spares")
    ]
    return t("list.sep").join(placed + rejected) or t("dep.spare.none")


def _restarts(t: Translator, deps: Mapping[str, Any]) -> str:
    r = _m(deps, "restart_budget")
    if not r:
        return t("na")
    text = t(
        "dep.restarts",
        used=value(t, r.get("used")),
        cap=value(t, r.get("max_restarts")),
        generations=value(t, r.get("incarnations")),
        resubmissions=value(t, r.get("resubmissions")),
    )
    if r.get("exhausted"):
        text += t("dep.restarts.exhausted")
    return text


def _actions(t: Translator, deps: Mapping[str, Any]) -> str:
    out = []
    for a in _l(deps, "operator_actions"):
        steps = "; ".join(str(x) for x in a.get("steps") or []) or t("none")
        out.append(
            t(
                "dep.action",
                action=value(t, a.get("action")),
                operator=value(t, a.get("operator")),
                at=after_injection(t, a.get("at_s")),
                permission=owner(t, a.get("permission")),
                steps=steps,
                observed=t.seconds(a.get("observed_s")),
            )
        )
    return t("list.sep").join(out) or t("dep.action.none")


def _storage(t: Translator, deps: Mapping[str, Any]) -> str:
    c = _m(deps, "checkpoint_storage")
    if not c:
        return t("na")
    loaded = ", ".join(str(x) for x in c.get("loaded") or []) or t("none")
    return t(
        "dep.storage",
        loaded=loaded,
        saves=value(t, c.get("saves")),
        written=size(t, c.get("bytes_written")),
        largest=size(t, c.get("largest_checkpoint_bytes")),
        kept=value(t, c.get("kept")),
        bound=size(t, c.get("held_bytes_bound")),
    )


def _what(t: Translator, dep: str, deps: Mapping[str, Any]) -> str:
    if dep in ("spare_nodes", "environment_preparation"):
        return _spares(t, deps)
    if dep == "restart_budget":
        return _restarts(t, deps)
    if dep in ("operator_actions", "recovery_runbook"):
        return _actions(t, deps)
    if dep == "checkpoint_storage":
        return _storage(t, deps)
    net = _m(deps, "dedicated_network")
    return t("dep.network", isolation=value(t, net.get("isolation")))


def dependencies_part(t: Translator, s: Item) -> Part | None:
    """What this item's recovery used, each with its owner."""
    deps = s.dependencies
    if not deps:
        return None
    used = set(_l(deps, "used"))
    owners = _m(deps, "owners")
    rows = [
        Row(
            [
                t(f"dep.name.{d}"),
                Strong(t("yes")) if d in used else t("no"),
                _what(t, d, deps),
                owner(t, owners.get(d)) if d in used else "—",
            ],
            data={"dependency": d, "used": str(d in used).lower()},
        )
        for d in DEPENDENCIES
    ]
    head = [t("col.dependency"), t("col.used"), t("col.what"), t("col.owner")]
    return Part("dependencies", t("part.dependencies"), [Table(head, rows, cls="dependencies")])


def _items(t: Translator, ids: Any) -> Text:
    ids = [str(i) for i in ids] if isinstance(ids, list) else []
    return ", ".join(ids) or t("none")


def _total(t: Translator, dep: str, totals: Mapping[str, Any]) -> str:
    if dep == "spare_nodes":
        return t("dep.total.spares", n=value(t, _m(totals, "spare_nodes").get("placements")))
    if dep == "restart_budget":
        r = _m(totals, "restarts")
        return t(
            "dep.total.restarts", n=value(t, r.get("total")), cap=value(t, r.get("max_restarts"))
        )
    if dep == "operator_actions":
        a = _m(totals, "operator_actions")
        return t(
            "dep.total.actions",
            n=value(t, a.get("count")),
            observed=t.seconds(a.get("observed_s_total")),
        )
    if dep == "checkpoint_storage":
        bound = _m(totals, "checkpoint_storage").get("held_bytes_bound")
        return t("dep.total.storage", bound=size(t, bound))
    return "—"


def totals_part(t: Translator, report: Report) -> Part | None:
    """Every dependency summed over the run's scenarios, for the cost discussion."""
    totals = report.recovery_dependencies
    if not totals:
        return None
    by_dep = _m(totals, "by_dependency")
    rows = []
    for d in DEPENDENCIES:
        row = _m(by_dep, d)
        rows.append(
            Row(
                [
                    t(f"dep.name.{d}"),
                    _items(t, row.get("items")),
                    _total(t, d, totals),
                    owner(t, row.get("owner")),
                ],
                data={"dependency": d},
            )
        )
    head = [t("col.dependency"), t("col.scenarios_using"), t("col.in_total"), t("col.owner")]
    blocks: list[Para | Table] = [
        Para(t("dep.intro"), cls="note"),
        Table(head, rows, cls="dependency-totals"),
    ]
    agreed = [t(f"dep.name.{d}") for d in _l(totals, "to_be_agreed") if d in DEPENDENCIES]
    if agreed:
        blocks.append(Para(t("dep.to_be_agreed", deps="; ".join(agreed)), cls="warning"))
    return Part("recovery-dependencies", t("part.dependency_totals"), blocks)


def ownership_part(t: Translator, report: Report) -> Part | None:
    """Platform capability / enterprise operations / vendor support / to be agreed: which
    dependencies each owns, and whether this run's recoveries used them."""
    totals = report.recovery_dependencies
    by_dep = _m(totals, "by_dependency")
    if not by_dep:
        return None
    rows = []
    for who in OWNERS:
        deps = [d for d in DEPENDENCIES if _m(by_dep, d).get("owner") == who]
        cells: list[Text] = []
        for d in deps:
            if cells:
                cells.append("; ")
            users = [str(i) for i in _l(_m(by_dep, d), "items")]
            name = t(f"dep.name.{d}")
            cells.append(Strong(name) if users else name)
            if users:
                cells.append(t("paren", text=t("dep.used_by", ids=", ".join(users))))
        rows.append(Row([owner(t, who), cells or "—"], data={"owner": who}))
    blocks: list[Para | Table] = [
        Para(t("owner.intro"), cls="note"),
        Table([t("col.owner"), t("col.dependencies")], rows, cls="ownership"),
        Para([t("owner.plan"), Code("ownership")], cls="note"),
    ]
    return Part("ownership", t("part.ownership"), blocks)
