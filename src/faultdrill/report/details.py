"""report.md sections of one item beyond its verdict: how the fault ended (hang or crash)
and what happened in its window, goodput accounting, the checkpoint inventory, where the
job ran and resumed (placement), and the network track. Each reads one part of the item's
:class:`~faultdrill.report.model.Item` and returns Markdown lines (none when the part was
not recorded)."""

from __future__ import annotations

from typing import Any

from faultdrill.report.model import (
    CheckpointRecord,
    Disruption,
    FaultWindow,
    Goodput,
    Inventory,
    Item,
    NetworkTrack,
    Placement,
)

__all__ = [
    "disruption_lines",
    "goodput_lines",
    "inventory_lines",
    "item_details",
    "network_lines",
    "placement_lines",
]

_LABEL = {
    "productive": "productive (committed steps)",
    "wasted_progress": "wasted progress since the last checkpoint",
    "recovery": "recovery (detection, restart, rendezvous, hang)",
    "checkpoint_save": "checkpoint save",
    "checkpoint_restore": "checkpoint restore",
    "startup": "startup",
    "other": "other (end of job, unattributed)",
}


def _s(v: Any) -> str:
    return "n/a" if v is None else f"{v:+.2f} s"


def disruption_lines(d: Disruption | None) -> list[str]:
    if d is None:
        return []
    end = d.ending
    lines = [
        f"**How the fault ended: {end.kind.upper()}** — {end.how} (threshold "
        f"{end.threshold_s:.1f} s; progress stopped {_s(end.progress_stopped_at_s)}, "
        f"resumed {_s(end.progress_resumed_at_s)}, failure noticed "
        f"{_s(end.failure_noticed_at_s)} after injection)",
        "",
    ]
    if d.window is not None:
        lines += _window_lines(d.window)
    return lines


def _window_lines(w: FaultWindow) -> list[str]:
    affected = {True: "yes", False: "no", None: "unknown"}[w.training_affected]
    lines = [
        f"- Fault window 0 to {_s(w.end_s)}: training affected: **{affected}** "
        f"({w.steps_per_s_before} steps/s before, {w.steps_per_s_during} "
        "steps/s during, until any restart probe)"
    ]
    r = w.restart
    if r is not None:
        lines.append(
            f"- Restart during the fault: {r.summary} (worker killed "
            f"{_s(r.probe_killed_at_s)}, restart began {_s(r.restart_began_at_s)}"
            f"{' by ' + r.began_by if r.began_by else ''}, rendezvous "
            f"{_s(r.rendezvous_at_s)})"
        )
    after = w.after_return
    evs = ", ".join(f"{e.what} {_s(e.at_s)}" for e in after.platform_events)
    lines.append(
        f"- When it returned: {evs or 'no platform event within 3 s'}; first step "
        f"{_s(after.first_step_at_s)}"
    )
    lines.append("")
    return lines


def goodput_lines(g: Goodput | None) -> list[str]:
    if g is None:
        return []
    if not g.available:
        return [f"**Goodput**: not available ({g.why})", ""]
    lines = [
        f"**Goodput {g.goodput:.1%}** of {g.total_s:.2f} s "
        f"({g.committed_steps} committed steps, {g.recomputed_steps} recomputed, "
        f"{g.incarnations} incarnation(s))",
        "",
        "| category (ml-goodput-measurement) | seconds | share |",
        "|---|---|---|",
    ]
    for key, label in _LABEL.items():
        lines.append(
            f"| {label} (`{g.ml_goodput_names[key]}`) | {g.seconds[key]:.2f} | "
            f"{g.shares[key]:.1%} |"
        )
    lines += ["", f"_Conditions_: {g.conditions}."]
    if g.notes:
        lines.append(f"_Notes_: {'; '.join(g.notes)}.")
    lines.append("")
    return lines


def _sha(v: Any) -> str:
    return f"`{str(v)[:12]}`" if v else "-"


def _checkpoint_row(r: CheckpointRecord) -> str:
    w = r.written_by
    who = f"{w.rank}, {w.inc}" if w is not None and w.to_json() else "-"
    refused = ", ".join(f"{x.inc} ({x.reason})" for x in r.rejected_by)
    state = r.state
    if r.damaged_by:
        state += f"; damaged by {r.damaged_by}"
    if r.reason and not r.verifies:
        state += f"; {r.reason}"
    verifies = {True: "yes", False: "**NO**", None: "-"}[r.verifies]
    return (
        f"| {r.id}{' (latest)' if r.latest else ''} | {r.step} | "
        f"{r.size or '-'} | {_sha(r.sha256_now)} | {verifies} | {who} | "
        f"{', '.join(map(str, r.loaded_by)) or '-'} | {refused or '-'} | "
        f"{state} |"
    )


def inventory_lines(inv: Inventory | None) -> list[str]:
    if inv is None or not inv.taken:
        return ["**Checkpoint inventory**: not taken", ""]
    pointer = inv.latest
    problem = pointer.problem if pointer is not None else None
    lines = [
        f"**Checkpoint inventory** (`{pointer.file if pointer else None}` names "
        f"`{pointer.target if pointer else None}`{'; ' + problem if problem else ''})",
        "",
        "| id | step | bytes | sha256 now | verifies | written by (rank, inc) | loaded by inc "
        "| refused by inc | state |",
        "|---|---|---|---|---|---|---|---|---|",
        *(_checkpoint_row(r) for r in inv.checkpoints),
    ]
    if inv.failed_saves:
        lines.append("")
        lines.append(
            "Failed saves: " + "; ".join(f"step {f.step} ({f.error})" for f in inv.failed_saves)
        )
    if inv.pointer_observed:
        lines.append(
            "Pointer during the storage fault: "
            + "; ".join(
                f"{p.when}: `{p.latest}` verifies {p.verifies}"
                + (f" ({p.problem})" if p.problem else "")
                for p in inv.pointer_observed
            )
        )
    lines.append("")
    return lines


def placement_lines(where: Placement | None) -> list[str]:
    """Where the job ran and resumed, when a node was lost or a spare considered."""
    if where is None or not (where.lost or where.spares_placed or where.spares_rejected):
        return []
    resumed = where.resumed_on
    parts = [
        f"ran on {', '.join(where.before) or '?'} (world size {where.world_size_before})",
        "resumed on "
        + (
            f"{', '.join(resumed)} (world size {where.world_size_after})"
            if resumed
            else "no node: the job did not resume"
        ),
    ]
    for lost in where.lost:
        parts.append(f"{lost.node} lost at +{lost.at_s:.2f} s ({lost.reason})")
    for sp in where.spares_placed:
        parts.append(f"spare {sp.node} placed for {sp.replaces} at +{sp.at_s:.2f} s")
    for rej in where.spares_rejected:
        parts.append(
            f"spare {rej.node} REJECTED, environment preparation: {rej.precondition}: {rej.detail}"
        )
    for detail in where.no_spare:
        parts.append(f"no spare: {detail}")
    return [f"**Placement**: {'; '.join(parts)}.", ""]


def _ms(v: Any) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def _na(v: Any) -> Any:
    return "n/a" if v is None else v


def network_lines(net: NetworkTrack | None) -> list[str]:
    """The network track: per node round trips, lost probes and traffic; injected rules."""
    if net is None:
        return []
    w = net.window
    span = f"{w.seconds:.1f} s, " if w.seconds is not None else ""
    lines = [
        f"**Network track** ({net.hz} Hz per node; {net.probe}; fault window "
        f"{span}from {w.from_ or 'start'} to {w.to}):",
        "",
        "| node | RTT before ms | RTT during ms | RTT after ms | probes lost during | "
        "bytes during | packets during | interface drops during |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n in net.nodes:
        lines.append(
            f"| {n.node} | {_ms(n.rtt_before_ms)} | {_ms(n.rtt_during_ms)} "
            f"| {_ms(n.rtt_after_ms)} | {n.lost_during} | "
            f"{_na(n.bytes_during)} | {_na(n.packets_during)} | "
            f"{_na(n.drop_during)} |"
        )
    if net.rules:
        lines.append("")
        lines.append(
            "Injected rules (final counters): "
            + "; ".join(
                f"`{r.rule}` {r.rule_kind} {r.chain or r.dev} on "
                f"{r.node}: {r.packets} packets"
                + (f", {r.dropped} dropped" if r.dropped is not None else "")
                for r in net.rules
            )
        )
    if net.gaps:
        lines.append(f"\n{net.gaps} gap(s) in the network track.")
    lines.append("")
    return lines


def item_details(s: Item) -> list[str]:
    """Every detail section of one scenario or control, in report order."""
    return [
        *disruption_lines(s.disruption),
        *goodput_lines(s.goodput),
        *inventory_lines(s.inventory),
        *placement_lines(s.placement),
        *network_lines(s.network),
    ]
