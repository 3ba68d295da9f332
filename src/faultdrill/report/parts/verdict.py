"""The parts that say what a scenario proved and, where it did not pass, where it failed:
the conclusion level with each level's proof, the failing layer with the events and
findings that point there, and a failed job's command, exit status and last error lines."""

from __future__ import annotations

from typing import Any

from faultdrill.i18n import Translator
from faultdrill.report.blocks import Badge, Bullets, Code, Para, Part, Pre, Row, Strong, Table, Text
from faultdrill.report.model import Clue, FailingLayer, Failure, Item, LevelProof
from faultdrill.report.parts.common import event_text, finding_links, level_anchor

__all__ = ["conclusion_part", "failure_part", "layer_part", "no_probe_part"]


def _why(t: Translator, p: LevelProof | Clue | FailingLayer) -> str:
    return t.message(p.message_id, p.params, p.why)


def _evidence(t: Translator, item_id: str, checks: list[str], events: list[dict[str, Any]]) -> Text:
    out: list[Text] = []
    if checks:
        out += [t("proof.findings"), *finding_links(item_id, checks)]
    if events:
        if out:
            out.append("; ")
        out += [t("proof.events"), "; ".join(event_text(t, e) for e in events)]
    return out or "—"


def conclusion_part(t: Translator, s: Item) -> Part | None:
    """The highest level proven, and each level's verdict, why and evidence."""
    c = s.conclusion
    if c is None:
        return None
    rows = [
        Row(
            [
                t.level(p.level),
                Badge(p.verdict, t("proof.proven") if p.proven else t.verdict(p.verdict)),
                _why(t, p),
                _evidence(t, s.id, p.findings, p.events),
            ],
            data={"level": p.level, "proven": str(p.proven).lower()},
            anchor=level_anchor(s.id, p.level),
        )
        for p in c.levels
    ]
    blocks: list[Para | Table] = [
        Para([t("conclusion.highest"), Strong(t.level(c.level))], cls="level-line"),
        Para(t("conclusion.intro"), cls="note"),
    ]
    if rows:
        head = [t("col.level"), t("col.verdict"), t("col.why"), t("col.proof")]
        blocks.append(Table(head, rows, cls="levels"))
    return Part("conclusion", t("part.conclusion"), blocks, anchor=f"conclusion-{s.id}")


def _clue_line(t: Translator, c: Clue) -> Text:
    return [Strong(t.layer(c.layer)), t("colon"), _why(t, c)]


def layer_part(t: Translator, s: Item) -> Part | None:
    """For an item that did not pass: the layer its failure lives in, the rule that named
    it, the events and findings behind it, and the other clues."""
    lay = s.layer
    if lay is None:
        return None
    rows: list[list[Text]] = [
        [t("layer.label"), Strong(t.layer(lay.layer))],
        [t("col.why"), _why(t, lay)],
    ]
    if lay.rule:
        rows.append([t("layer.rule"), Code(lay.rule)])
    if lay.events:
        rows.append([t("proof.events.title"), "; ".join(event_text(t, e) for e in lay.events)])
    if lay.findings:
        rows.append([t("proof.findings.title"), finding_links(s.id, lay.findings)])
    blocks: list[Para | Table | Bullets] = [
        Para(t("layer.intro"), cls="note"),
        Table([t("col.item"), t("col.value")], rows, cls="layer"),
    ]
    if lay.also:
        blocks += [Para(t("layer.also")), Bullets([_clue_line(t, c) for c in lay.also])]
    if lay.ruled_out:
        blocks += [Para(t("layer.ruled_out")), Bullets([_clue_line(t, c) for c in lay.ruled_out])]
    return Part("layer", t("part.layer"), blocks, anchor=f"layer-{s.id}")


def _exit(t: Translator, f: Failure) -> str:
    if f.exit_status is None:
        return t("failure.no_exit")
    if f.signal:
        return t("failure.signal", status=f.exit_status, signal=f.signal)
    return str(f.exit_status)


def failure_part(t: Translator, f: Failure | None, key: str = "failure") -> Part | None:
    """A job that failed: its command, exit status, where, the last lines of its error
    output and the log that holds the rest."""
    if f is None:
        return None
    rows: list[list[Text]] = [
        [t("failure.command"), Code(f.command or "?")],
        [t("failure.exit"), _exit(t, f)],
    ]
    if f.node is not None:
        rows.append([t("failure.where"), t("failure.node", node=f.node, local=f.local_rank)])
    rows.append([t("failure.count"), str(f.worker_failures)])
    if f.log:
        rows.append([t("failure.log"), Code(f.log)])
    blocks: list[Para | Table | Pre] = [Table([t("col.item"), t("col.value")], rows, cls="failure")]
    if f.error_tail:
        blocks += [Para(t("failure.tail")), Pre(f.error_tail)]
    return Part(key, t("part.failure"), blocks)


def no_probe_part(t: Translator, said: bool) -> Part | None:
    """ "No probe events from any rank", said plainly, with what to do."""
    if not said:
        return None
    return Part("no-probe", t("part.no_probe"), [Para(t("no_probe.body"), cls="warning")])
