"""The part about evidence read from a job's own log lines (plan ``logs``): how events were
stamped, which came from the logs, what was read, the checks the patterns leave without
evidence and why, and every finding that stays undecided (``judge/log_evidence.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faultdrill.i18n import Translator
from faultdrill.report.blocks import Badge, Code, Link, Para, Part, Row, Table, Text
from faultdrill.report.model import Item
from faultdrill.report.parts.common import as_map, finding_anchor

__all__ = ["log_evidence_part"]


def _said(t: Translator, entry: Mapping[str, Any], key: str, recorded: str) -> str:
    """An entry's text by its message (``{key}``), else as recorded."""
    msg = as_map(entry.get(key))
    return t.message(msg.get("message_id"), as_map(msg.get("params")), str(entry.get(recorded)))


def _count(v: Any) -> str:
    return str(v) if isinstance(v, int) and not isinstance(v, bool) else "0"


def _events(t: Translator, logs: Mapping[str, Any]) -> Table:
    from_logs, from_probe = as_map(logs.get("from_logs")), as_map(logs.get("from_probe"))
    kinds = sorted({*from_logs, *from_probe})
    rows: list[list[Text]] = [
        [Code(k), _count(from_logs.get(k)), _count(from_probe.get(k))] for k in kinds
    ]
    return Table([t("logs.col.event"), t("logs.col.logs"), t("logs.col.probe")], rows, cls="logs")


def _checks(t: Translator, item_id: str, entries: Any, verdicts: bool) -> list[Row]:
    rows = []
    for entry in entries if isinstance(entries, list) else []:
        entry = as_map(entry)
        check = str(entry.get("check"))
        link: Text = Link(Code(check), finding_anchor(item_id, check))
        if verdicts:
            v = entry.get("verdict")
            shown = t.verdict(str(v))
            if entry.get("to_be_verified"):
                shown = f"{shown}, {t('col.to_verify')}"
            badge: Text = Badge(str(v), shown) if v else t("na")
            said = _said(t, entry, "why_message", "why")
            rows.append(Row([link, badge, said], data={"check": check}))
        else:
            said = t.message(entry.get("message_id"), as_map(entry.get("params")), "")
            rows.append(Row([link, said or str(entry.get("message"))], data={"check": check}))
    return rows


def log_evidence_part(t: Translator, s: Item) -> Part | None:
    """What of an item's evidence came from the job's log lines (None: it had a probe)."""
    logs = s.log_evidence
    if logs is None:
        return None
    read = as_map(logs.get("read"))
    bound = logs.get("stamp_bound_s")
    blocks: list[Para | Table] = [
        Para(t("logs.intro", bound=t.seconds(bound) if bound is not None else t("na"))),
        _events(t, logs),
        Para(
            t(
                "logs.read",
                unattributed=_count(read.get("unattributed")),
                ambiguous=_count(read.get("ambiguous")),
                unreadable=_count(read.get("unreadable")),
                synthesized=_count(read.get("synthesized_starts")),
            ),
            cls="note",
        ),
    ]
    unit = logs.get("unit")
    if isinstance(unit, str) and unit != "step":
        blocks.append(Para(t("logs.unit", unit=unit), cls="note"))
    blind = _checks(t, s.id, logs.get("not_observable"), verdicts=True)
    if blind:
        head = [t("col.check"), t("col.verdict"), t("logs.col.why")]
        blocks += [Para(t("logs.blind")), Table(head, blind, cls="logs-blind")]
    undecided = _checks(t, s.id, logs.get("undecided"), verdicts=False)
    if undecided:
        head = [t("col.check"), t("col.message")]
        blocks += [Para(t("logs.undecided")), Table(head, undecided, cls="logs-undecided")]
    return Part("log-evidence", t("part.log_evidence"), blocks)
