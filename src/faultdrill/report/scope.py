"""What a run verified, and what stays *to be verified*, derived from ``report.json``.

The methodology's rule: combinations of model, framework, network, storage and nodes not
covered by the run go on the to-be-verified list and are never assumed supported. The rows
here are computed from the plan recorded in the report (and the scenarios that actually
ran), never from the machine that renders the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from faultdrill.report.i18n import Translator

__all__ = ["ScopeRow", "derive_scope", "recorded_environment"]


@dataclass
class ScopeRow:
    dimension: str  # i18n key suffix: model, framework, ...
    verified: str
    to_verify: list[str] = field(default_factory=list)


def recorded_environment(report: dict[str, Any]) -> dict[str, Any]:
    """The environment the run recorded (first item's conditions, else the dossier's)."""
    for s in report.get("scenarios") or []:
        env = (s.get("conditions") or {}).get("environment")
        if env:
            return dict(env)
    dossier = (report.get("baseline") or {}).get("dossier") or {}
    return dict(dossier.get("environment") or {})


def _fault_kinds_known() -> list[str]:
    try:
        from faultdrill.faults.api import FAULTS
    except ImportError:  # rendering must not depend on the drill machinery
        return []
    return sorted(FAULTS)


def derive_scope(report: dict[str, Any], t: Translator) -> list[ScopeRow]:
    plan = report["plan"]
    res = plan.get("resources", {})
    task = plan.get("task", {})
    ep = task.get("entrypoint") or {}
    env = recorded_environment(report)
    ran = [s for s in report.get("scenarios") or [] if not s.get("control")]
    world_sizes = sorted(
        {w for s in ran for w in (s.get("conditions") or {}).get("world_sizes", [])}
    )
    kinds = sorted({str((s.get("fault") or {}).get("kind")) for s in ran if s.get("fault")})
    planned = [sc for r in plan.get("rounds", []) for sc in r.get("scenarios", [])]
    ran_ids = {s["id"] for s in ran}
    not_run = [sc["id"] for sc in planned if sc["id"] not in ran_ids]
    retest = [s["id"] for s in ran if s.get("verdict") == "retest"]
    others = [k for k in _fault_kinds_known() if k not in kinds]

    rows = [
        ScopeRow(
            "model",
            t(
                "scope.v.model",
                entry=ep.get("module") or ep.get("script"),
                code=task.get("code_id"),
                cfg=task.get("config_version"),
            ),
            [t("scope.tv.model")],
        ),
        ScopeRow(
            "framework",
            t(
                "scope.v.framework",
                torch=env.get("torch"),
                backend="gloo" if res.get("devices", "cpu") == "cpu" else res.get("devices"),
                python=env.get("python"),
            ),
            [t("scope.tv.framework")],
        ),
        ScopeRow(
            "network",
            t(
                "scope.v.network.netns"
                if res.get("isolation") == "netns"
                else "scope.v.network.none"
            ),
            [t("scope.tv.network")],
        ),
        ScopeRow(
            "storage",
            t("scope.v.storage", dir=(plan.get("checkpoint") or {}).get("dir")),
            [t("scope.tv.storage")],
        ),
        ScopeRow(
            "nodes",
            t(
                "scope.v.nodes",
                nodes=res.get("nodes"),
                ppn=res.get("procs_per_node"),
                ws=", ".join(map(str, world_sizes)) or t("na"),
                spares=res.get("spares", 0),
            ),
            [t("scope.tv.nodes", devices=res.get("devices", "cpu"))]
            + ([t("scope.tv.spares")] if not res.get("spares") else []),
        ),
        ScopeRow(
            "platform",
            t("scope.v.platform", platform=res.get("platform"), isolation=res.get("isolation")),
            [t("scope.tv.platform")],
        ),
        ScopeRow(
            "faults",
            t("scope.v.faults", kinds=", ".join(kinds) or t("none")),
            [t("scope.tv.faults", others=(": " + ", ".join(others)) if others else "")],
        ),
        ScopeRow(
            "scenarios",
            t("scope.v.scenarios", ids=", ".join(sorted(ran_ids)) or t("none")),
            (
                [t("scope.tv.scenarios", ids=", ".join(not_run))]
                if not_run
                else [t("scope.tv.scenarios.none")]
            )
            + ([t("scope.tv.retest", ids=", ".join(retest))] if retest else []),
        ),
    ]
    return rows
