"""What a run verified, and what stays *to be verified*, derived from its
:class:`~faultdrill.report.model.Report`.

The methodology's rule: combinations of model, framework, network, storage and nodes not
covered by the run go on the to-be-verified list and are never assumed supported. The rows
here are computed from the plan recorded in the report (and the scenarios that actually
ran), never from the machine that renders the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from faultdrill.i18n import Translator
from faultdrill.plan.faults import FAULT_KINDS
from faultdrill.report.model import Report

__all__ = ["ScopeRow", "derive_scope"]


@dataclass
class ScopeRow:
    dimension: str  # i18n key suffix: model, framework, ...
    verified: str
    to_verify: list[str] = field(default_factory=list)


def _stack_rows(report: Report, t: Translator) -> list[ScopeRow]:
    """What ran: the model, the framework, the network, the storage."""
    plan = report.plan
    task, res, env = plan.task, plan.resources, report.environment
    return [
        ScopeRow(
            "model",
            t(
                "scope.v.model",
                entry=task.entrypoint.module or task.entrypoint.script,
                code=task.code_id,
                cfg=task.config_version,
            ),
            [t("scope.tv.model")],
        ),
        ScopeRow(
            "framework",
            t(
                "scope.v.framework",
                torch=env.torch,
                backend="gloo" if res.devices == "cpu" else res.devices,
                python=env.python,
            ),
            [t("scope.tv.framework")],
        ),
        ScopeRow(
            "network",
            t("scope.v.network.netns" if res.isolation == "netns" else "scope.v.network.none"),
            [t("scope.tv.network")],
        ),
        ScopeRow(
            "storage",
            t("scope.v.storage", dir=plan.checkpoint.dir),
            [t("scope.tv.storage")],
        ),
    ]


def _drill_rows(report: Report, t: Translator) -> list[ScopeRow]:
    """Where and what was drilled: nodes, platform, faults, scenarios."""
    res = report.plan.resources
    ran = report.scenario_items
    world_sizes = sorted({w for s in ran if s.conditions for w in s.conditions.world_sizes})
    kinds = sorted({s.fault.kind for s in ran if s.fault})
    ran_ids = {s.id for s in ran}
    not_run = [sid for sid in report.plan.scenario_ids() if sid not in ran_ids]
    retest = [s.id for s in ran if s.verdict == "retest"]
    others = [k for k in sorted(FAULT_KINDS) if k not in kinds]
    return [
        ScopeRow(
            "nodes",
            t(
                "scope.v.nodes",
                nodes=res.nodes,
                ppn=res.procs_per_node,
                ws=", ".join(map(str, world_sizes)) or t("na"),
                spares=res.spares,
            ),
            [t("scope.tv.nodes", devices=res.devices)]
            + ([t("scope.tv.spares")] if not res.spares else []),
        ),
        ScopeRow(
            "platform",
            t("scope.v.platform", platform=res.platform, isolation=res.isolation),
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


def _evidence_rows(report: Report, t: Translator) -> list[ScopeRow]:
    """The checks that passed without evidence (``to_be_verified`` in a finding's data: a
    job that reports no evaluation or artefact, what its log lines cannot show), each with
    the items it passed so in; no row when there is none."""
    items: dict[str, list[str]] = {}
    baseline = report.baseline.evidence
    found = [
        ("baseline", f)
        for _, ev in (baseline.categories() if baseline else [])
        for f in ev.findings
    ]
    found += [(s.id, f) for s in report.scenarios for _, f in s.findings()]
    for item_id, f in found:
        if f.verdict == "pass" and f.data.get("to_be_verified"):
            items.setdefault(f.check, []).append(item_id)
    if not items:
        return []
    return [
        ScopeRow(
            "evidence",
            t("scope.v.evidence"),
            [
                t(
                    "scope.tv.evidence",
                    check=check,
                    name=t.opt("check." + check, check),
                    ids=", ".join(ids),
                )
                for check, ids in sorted(items.items())
            ],
        )
    ]


def derive_scope(report: Report, t: Translator) -> list[ScopeRow]:
    """The verified / to-be-verified rows of every dimension, in report order."""
    return [*_stack_rows(report, t), *_drill_rows(report, t), *_evidence_rows(report, t)]
