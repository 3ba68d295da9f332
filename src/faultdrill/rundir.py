"""The run directory's layout: the one module that knows where a run keeps what.

::

    RUN/
      plan.yaml                     the plan as it ran (PLAN)
      report.json                   the judged run, the contract (REPORT_JSON)
      report.md, report.html        the people's reports (REPORT_MD, REPORT_HTML)
      baseline/                     the fault-free baseline item
      scenarios/ID/                 one directory per scenario
      controls/ID/                  one directory per negative control

    ITEM/
      events/*.jsonl                every event of the item, one clock (EVENTS)
      events/steps/                 the columnar step store beside them
      logs/                         the job's and the agents' logs (LOGS)
      ledger.jsonl                  every change made, recorded before it was made (LEDGER)
      dossier.json                  the baseline's dossier (baseline only: DOSSIER)

Writers (the engine) and readers (judge, report, archive, cleanup) take these names from
here, so a recorded run, a bundle and a live run are read the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Literal

__all__ = [
    "BASELINE",
    "DOSSIER",
    "EVENTS",
    "ITEM_PARENTS",
    "LEDGER",
    "LOGS",
    "PLAN",
    "REPORT_HTML",
    "REPORT_JSON",
    "REPORT_MD",
    "ItemKind",
    "data_dir",
    "dossier_path",
    "events_dir",
    "item_dir",
    "items",
    "ledger_path",
    "logs_dir",
]

ItemKind = Literal["baseline", "scenario", "control"]

PLAN = "plan.yaml"
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
BASELINE = "baseline"
EVENTS = "events"
LOGS = "logs"
LEDGER = "ledger.jsonl"
DOSSIER = "dossier.json"
#: The directories holding one directory per item, and the kind of those items.
ITEM_PARENTS: dict[str, ItemKind] = {"scenarios": "scenario", "controls": "control"}


def item_dir(run_dir: Path, kind: str, item_id: str) -> Path:
    """Where the item ``item_id`` of ``kind`` (baseline, scenario, control) keeps its files."""
    if kind == "baseline":
        return run_dir / BASELINE
    return run_dir / ("scenarios" if kind == "scenario" else "controls") / item_id


def items(run_dir: Path) -> Iterator[tuple[ItemKind, str, Path]]:
    """(kind, item id, directory) of every item recorded in ``run_dir``: the baseline
    first, then scenarios and controls by name; only real directories (never a link)."""
    base = run_dir / BASELINE
    if base.is_dir() and not base.is_symlink():
        yield "baseline", BASELINE, base
    for parent, kind in ITEM_PARENTS.items():
        top = run_dir / parent
        if not top.is_dir() or top.is_symlink():
            continue
        for d in sorted(top.iterdir()):
            if d.is_dir() and not d.is_symlink():
                yield kind, d.name, d


def events_dir(item: Path) -> Path:
    """The item's event files (``*.jsonl``) and step store."""
    return item / EVENTS


def data_dir(item: Path) -> Path:
    """The item's data files (the reference workload's file-backed dataset, written by the
    job at its first start; what a ``data-outage`` makes unreadable)."""
    return item / "data"


def logs_dir(item: Path) -> Path:
    """The item's logs (job, agents, daemons)."""
    return item / LOGS


def ledger_path(item: Path) -> Path:
    """The item's ledger of changes."""
    return item / LEDGER


def dossier_path(run_dir: Path) -> Path:
    """The baseline's dossier (task, data, resources, recovery, responsibility)."""
    return run_dir / BASELINE / DOSSIER
