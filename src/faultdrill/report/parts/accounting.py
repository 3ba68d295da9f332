"""The accounting parts of an item: how the fault's disruption ended (hang or crash) and
what happened in its window, goodput with its context, the checkpoint inventory, where the
job ran and resumed, and the network track. Times are seconds after the injection."""

from __future__ import annotations

from faultdrill.i18n import Translator
from faultdrill.report.blocks import Bullets, Code, Para, Part, Row, Strong, Table, Text
from faultdrill.report.model import (
    CheckpointRecord,
    Disruption,
    FaultWindow,
    Goodput,
    Inventory,
    NetworkTrack,
    Placement,
)
from faultdrill.report.parts.common import after_injection, pick, size, value

__all__ = [
    "GOODPUT_CATEGORIES",
    "disruption_part",
    "goodput_part",
    "inventory_part",
    "network_part",
    "placement_part",
]

#: Goodput's categories, in report order (judge/goodput.py).
GOODPUT_CATEGORIES = (
    "productive",
    "wasted_progress",
    "recovery",
    "checkpoint_save",
    "checkpoint_restore",
    "startup",
    "other",
)


def _window(t: Translator, w: FaultWindow) -> list[Text]:
    affected = pick(w.training_affected, t("yes"), t("no"), t("na"))
    out: list[Text] = [
        t(
            "disr.window",
            end=after_injection(t, w.end_s),
            affected=affected,
            before=value(t, w.steps_per_s_before),
            during=value(t, w.steps_per_s_during),
        )
    ]
    r = w.restart
    if r is not None:
        out.append(
            t(
                "disr.restart",
                killed=after_injection(t, r.probe_killed_at_s),
                began=after_injection(t, r.restart_began_at_s),
                rdzv=after_injection(t, r.rendezvous_at_s),
                during=t("yes") if r.rendezvous_during_fault else t("no"),
            )
        )
    after = w.after_return
    events = ", ".join(f"{e.what} {after_injection(t, e.at_s)}" for e in after.platform_events)
    out.append(
        t(
            "disr.after",
            events=events or t("disr.after.none"),
            step=after_injection(t, after.first_step_at_s),
        )
    )
    return out


def disruption_part(t: Translator, d: Disruption | None) -> Part | None:
    """Whether the fault made the job hang, crash or stall, and the moments that show it."""
    if d is None:
        return None
    end = d.ending
    kind = t.opt(f"disr.kind.{end.kind}", end.kind)
    rows: list[list[Text]] = [
        [t("disr.stopped"), after_injection(t, end.progress_stopped_at_s)],
        [
            t("disr.noticed"),
            after_injection(t, end.failure_noticed_at_s)
            + (t("paren", text=end.failure_noticed_by) if end.failure_noticed_by else ""),
        ],
        [t("disr.resumed"), after_injection(t, end.progress_resumed_at_s)],
        [t("disr.threshold"), t.seconds(end.threshold_s)],
    ]
    if end.phase:
        rows.append([t("disr.phase"), t.opt(f"disr.phase.{end.phase}", end.phase)])
    blocks: list[Para | Table | Bullets] = [
        Para([Strong(kind), t("colon"), t.opt(f"disr.kind.{end.kind}.why", "")]),
        Table([t("col.moment"), t("col.value")], rows, cls="disruption"),
    ]
    if d.window is not None:
        blocks.append(Bullets(_window(t, d.window)))
    return Part("disruption", t("part.disruption"), blocks)


def goodput_part(t: Translator, g: Goodput | None, every: int) -> Part | None:
    """Goodput as a share of the job's time, with what the rest went to and how it was
    measured: a number a reader can put in context."""
    if g is None:
        return None
    if not g.available:
        w = g.why_message
        why = t.message(w.message_id, w.params, g.why or "") if w else (g.why or t("na"))
        return Part("goodput", t("part.goodput"), [Para(t("goodput.na", why=why))])
    line = t(
        "goodput.line",
        share=f"{g.goodput * 100:.1f}",
        productive=t.seconds(g.seconds.get("productive")),
        total=t.seconds(g.total_s),
        committed=value(t, g.committed_steps),
        recomputed=value(t, g.recomputed_steps),
        incarnations=value(t, g.incarnations),
    )
    rows = [
        Row(
            [
                t(f"goodput.{key}"),
                Code(g.ml_goodput_names.get(key, key)),
                t.seconds(g.seconds.get(key)),
                f"{g.shares.get(key, 0) * 100:.1f} %",
            ],
            data={"category": key},
        )
        for key in GOODPUT_CATEGORIES
        if key in g.seconds
    ]
    head = [t("col.category"), t("col.ml_goodput"), t("col.seconds"), t("col.share")]
    blocks: list[Para | Table] = [
        Para(Strong(line)),
        Para(t("goodput.context"), cls="note"),
        Table(head, rows, cls="goodput"),
        Para(t("goodput.conditions", every=every), cls="note"),
    ]
    notes = [
        n if isinstance(n, str) else t.message(n.message_id, n.params, "")
        for n in (g.note_messages or g.notes)
    ]
    if notes:
        blocks.append(Para(t("goodput.notes", notes=t("list.sep").join(notes)), cls="note"))
    return Part("goodput", t("part.goodput"), blocks)


def _checkpoint_row(t: Translator, r: CheckpointRecord) -> Row:
    w = r.written_by
    who = (
        t("inv.written", rank=value(t, w.rank), inc=value(t, w.inc))
        if w is not None and w.to_json()
        else "—"
    )
    refused = ", ".join(f"{value(t, x.inc)} ({value(t, x.reason)})" for x in r.rejected_by)
    state = t.opt(f"inv.state.{r.state}", r.state)
    if r.latest:
        state += t("paren", text=t("inv.latest"))
    if r.damaged_by:
        state += t("list.sep") + t("inv.damaged", by=r.damaged_by)
    verifies = pick(r.verifies, t("yes"), t("no"), "—")
    return Row(
        [
            Code(r.id),
            value(t, r.step),
            size(t, r.size) if r.size is not None else "—",
            Code(str(r.sha256_now)[:12]) if r.sha256_now else "—",
            Strong(verifies) if r.verifies is False else verifies,
            who,
            ", ".join(map(str, r.loaded_by)) or "—",
            refused or "—",
            state,
        ],
        data={"checkpoint": r.id},
    )


def inventory_part(t: Translator, inv: Inventory | None) -> Part | None:
    """Every checkpoint of the item: its state, whether it verifies, who wrote, loaded or
    refused it; where ``latest`` points."""
    if inv is None or not inv.taken:
        return Part("inventory", t("part.inventory"), [Para(t("inv.none"))])
    p = inv.latest
    pointer: list[Text] = [
        Code(value(t, p.file if p else None)),
        t("inv.pointer", target=value(t, p.target if p else None)),
    ]
    if p is not None and p.problem:
        pointer += [t("list.sep"), p.problem]
    head = [
        t("col.checkpoint"),
        t("col.step"),
        t("col.size"),
        t("col.sha256"),
        t("col.verifies"),
        t("col.written_by"),
        t("col.loaded_by"),
        t("col.refused_by"),
        t("col.state"),
    ]
    blocks: list[Para | Table] = [
        Para(pointer),
        Table(head, [_checkpoint_row(t, r) for r in inv.checkpoints], cls="inventory"),
    ]
    if inv.failed_saves:
        saves = "; ".join(
            t("inv.failed_save", step=value(t, f.step), error=value(t, f.error))
            for f in inv.failed_saves
        )
        blocks.append(Para(t("inv.failed_saves", saves=saves)))
    return Part("inventory", t("part.inventory"), blocks)


def placement_part(t: Translator, where: Placement | None) -> Part | None:
    """Where the job ran and resumed, when a node was lost or a spare considered."""
    if where is None or not (where.lost or where.spares_placed or where.spares_rejected):
        return None
    resumed = where.resumed_on
    items: list[Text] = [
        t("place.ran", nodes=", ".join(where.before) or "?", ws=value(t, where.world_size_before)),
        t("place.resumed", nodes=", ".join(resumed), ws=value(t, where.world_size_after))
        if resumed
        else t("place.not_resumed"),
    ]
    items += [
        t(
            "place.lost",
            node=value(t, x.node),
            at=after_injection(t, x.at_s),
            why=value(t, x.reason),
        )
        for x in where.lost
    ]
    items += [
        t(
            "place.spare",
            node=value(t, x.node),
            replaces=value(t, x.replaces),
            at=after_injection(t, x.at_s),
        )
        for x in where.spares_placed
    ]
    items += [
        t(
            "place.rejected",
            node=value(t, x.node),
            why=value(t, x.precondition),
            detail=value(t, x.detail),
        )
        for x in where.spares_rejected
    ]
    items += [t("place.no_spare", detail=value(t, x)) for x in where.no_spare]
    return Part("placement", t("part.placement"), [Bullets(items)])


def _ms(v: object) -> str:
    return "—" if v is None else f"{v:.2f}"


def network_part(t: Translator, net: NetworkTrack | None) -> Part | None:
    """Per node: round trips before, during and after the fault, probes lost, traffic."""
    if net is None:
        return None
    w = net.window
    intro = t(
        "net.intro",
        hz=t("hz", v=net.hz) if isinstance(net.hz, (int, float)) else t("na"),
        probe=t.opt(f"net.label.{net.probe}", value(t, net.probe)),
        seconds=t.seconds(w.seconds),
        start=t.opt(f"net.label.{w.from_}", w.from_) if w.from_ else t("net.start"),
        end=t.opt(f"net.label.{w.to}", value(t, w.to)),
    )
    rows = [
        Row(
            [
                n.node,
                _ms(n.rtt_before_ms),
                _ms(n.rtt_during_ms),
                _ms(n.rtt_after_ms),
                value(t, n.lost_during),
                size(t, n.bytes_during),
                value(t, n.packets_during),
                value(t, n.drop_during),
            ],
            data={"node": n.node},
        )
        for n in net.nodes
    ]
    head = [
        t("col.node"),
        t("col.rtt_before"),
        t("col.rtt_during"),
        t("col.rtt_after"),
        t("col.lost_during"),
        t("col.bytes_during"),
        t("col.packets_during"),
        t("col.drops_during"),
    ]
    blocks: list[Para | Table] = [Para(intro), Table(head, rows, cls="network")]
    if net.rules:
        rules = "; ".join(
            t(
                "net.rule" if r.dropped is not None else "net.rule.no-drops",
                rule=value(t, r.rule),
                kind=value(t, r.rule_kind),
                where=value(t, r.chain or r.dev),
                node=value(t, r.node),
                packets=value(t, r.packets),
                dropped=value(t, r.dropped),
            )
            for r in net.rules
        )
        blocks.append(Para(t("net.rules", rules=rules)))
    if net.gaps:
        blocks.append(Para(t("net.gaps", n=net.gaps), cls="note"))
    return Part("network", t("part.network"), blocks)
