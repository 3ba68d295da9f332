"""The parts of the human reports beyond the scenario's row table and its four answers,
each built once (:mod:`faultdrill.report.blocks`) and written by the Markdown report, the
HTML report and (some of them) the runbook.

Per item (:func:`item_parts`): the conclusion level with each level's proof, the failing
layer, a failed job's command and error output, "no probe events", the held-out evaluation
and exported artefact, the trend after recovery, what the recovery depended on, where each
rank ran, how the fault's disruption ended, goodput, the checkpoint inventory, placement and
the network track, and what of the evidence was read from the job's log lines. Per run (:func:`run_parts`): the recovery dependencies summed for the
cost discussion and who owns each. The baseline's dossiers: :func:`dossier_parts`.
"""

from __future__ import annotations

from faultdrill.i18n import Translator
from faultdrill.report.blocks import Part
from faultdrill.report.model import Item, Report
from faultdrill.report.parts.accounting import (
    disruption_part,
    goodput_part,
    inventory_part,
    network_part,
    placement_part,
)
from faultdrill.report.parts.dossier import dossier_parts
from faultdrill.report.parts.joblog import log_evidence_part
from faultdrill.report.parts.recovery import dependencies_part, ownership_part, totals_part
from faultdrill.report.parts.results import (
    evaluation_part,
    rank_times_part,
    scheduling_part,
    trend_part,
)
from faultdrill.report.parts.verdict import (
    conclusion_part,
    failure_part,
    layer_part,
    no_probe_part,
)

__all__ = [
    "ITEM_PART_KEYS",
    "dossier_parts",
    "item_parts",
    "run_parts",
    "verdict_parts",
]

#: report.json keys of an item that the parts say (no generic dump for them).
ITEM_PART_KEYS = frozenset(
    {
        "conclusion",
        "layer",
        "failure",
        "no_probe_events",
        "trend",
        "dependencies",
        "scheduling",
        "disruption",
        "goodput",
        "inventory",
        "placement",
        "network",
        "field_messages",
        "aborted",
        "not_proven_why",
        "log_evidence",
    }
)


def verdict_parts(t: Translator, s: Item) -> list[Part]:
    """What the item proved and, where it did not pass, where and how it failed."""
    parts = [
        conclusion_part(t, s),
        layer_part(t, s),
        failure_part(t, s.failure),
        no_probe_part(t, s.no_probe_events),
    ]
    return [p for p in parts if p is not None]


def item_parts(t: Translator, s: Item, report: Report) -> list[Part]:
    """Every part of one item after its evidence, in report order."""
    every = report.plan.checkpoint.every_steps
    parts = [
        log_evidence_part(t, s),
        evaluation_part(t, s),
        trend_part(t, s),
        dependencies_part(t, s),
        scheduling_part(t, s),
        rank_times_part(t, s),
        disruption_part(t, s.disruption),
        goodput_part(t, s.goodput, every),
        inventory_part(t, s.inventory),
        placement_part(t, s.placement),
        network_part(t, s.network),
    ]
    return [p for p in parts if p is not None]


def run_parts(t: Translator, report: Report) -> list[Part]:
    """The run-wide parts: recovery dependencies summed, and who owns each."""
    parts = [totals_part(t, report), ownership_part(t, report)]
    return [p for p in parts if p is not None]
