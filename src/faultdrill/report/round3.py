"""report.md sections for one item: how the fault ended (hang or crash) and what happened in
its window, goodput accounting, and the checkpoint inventory. Rendered from report.json
data only (``disruption``, ``goodput``, ``inventory`` of an item)."""

from __future__ import annotations

from typing import Any

__all__ = ["disruption_lines", "goodput_lines", "inventory_lines", "item_sections"]

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


def disruption_lines(d: dict[str, Any] | None) -> list[str]:
    if not d:
        return []
    end = d["ending"]
    lines = [
        f"**How the fault ended: {end['kind'].upper()}** — {end['how']} (threshold "
        f"{end['threshold_s']:.1f} s; progress stopped {_s(end.get('progress_stopped_at_s'))}, "
        f"resumed {_s(end.get('progress_resumed_at_s'))}, failure noticed "
        f"{_s(end.get('failure_noticed_at_s'))} after injection)",
        "",
    ]
    w = d.get("window")
    if w:
        affected = {True: "yes", False: "no", None: "unknown"}[w.get("training_affected")]
        lines.append(
            f"- Fault window 0 to {_s(w['end_s'])}: training affected: **{affected}** "
            f"({w.get('steps_per_s_before')} steps/s before, {w.get('steps_per_s_during')} "
            "steps/s during, until any restart probe)"
        )
        r = w.get("restart")
        if r:
            lines.append(
                f"- Restart during the fault: {r['summary']} (worker killed "
                f"{_s(r.get('probe_killed_at_s'))}, restart began {_s(r.get('restart_began_at_s'))}"
                f"{' by ' + r['began_by'] if r.get('began_by') else ''}, rendezvous "
                f"{_s(r.get('rendezvous_at_s'))})"
            )
        after = w.get("after_return") or {}
        evs = ", ".join(f"{e['what']} {_s(e['at_s'])}" for e in after.get("platform_events", []))
        lines.append(
            f"- When it returned: {evs or 'no platform event within 3 s'}; first step "
            f"{_s(after.get('first_step_at_s'))}"
        )
        lines.append("")
    return lines


def goodput_lines(g: dict[str, Any] | None) -> list[str]:
    if not g:
        return []
    if not g.get("available"):
        return [f"**Goodput**: not available ({g.get('why')})", ""]
    lines = [
        f"**Goodput {g['goodput']:.1%}** of {g['total_s']:.2f} s "
        f"({g['committed_steps']} committed steps, {g['recomputed_steps']} recomputed, "
        f"{g['incarnations']} incarnation(s))",
        "",
        "| category (ml-goodput-measurement) | seconds | share |",
        "|---|---|---|",
    ]
    for key, label in _LABEL.items():
        lines.append(
            f"| {label} (`{g['ml_goodput_names'][key]}`) | {g['seconds'][key]:.2f} | "
            f"{g['shares'][key]:.1%} |"
        )
    lines += ["", f"_Conditions_: {g['conditions']}."]
    if g.get("notes"):
        lines.append(f"_Notes_: {'; '.join(g['notes'])}.")
    lines.append("")
    return lines


def _sha(v: Any) -> str:
    return f"`{str(v)[:12]}`" if v else "-"


def inventory_lines(inv: dict[str, Any] | None) -> list[str]:
    if not inv or not inv.get("taken"):
        return ["**Checkpoint inventory**: not taken", ""]
    pointer = inv.get("latest") or {}
    lines = [
        f"**Checkpoint inventory** (`{pointer.get('file')}` names "
        f"`{pointer.get('target')}`{'; ' + pointer['problem'] if pointer.get('problem') else ''})",
        "",
        "| id | step | bytes | sha256 now | verifies | written by (rank, inc) | loaded by inc "
        "| refused by inc | state |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in inv.get("checkpoints", []):
        w = r.get("written_by") or {}
        who = f"{w.get('rank')}, {w.get('inc')}" if w else "-"
        refused = ", ".join(f"{x['inc']} ({x['reason']})" for x in r.get("rejected_by") or [])
        state = r.get("state", "")
        if r.get("damaged_by"):
            state += f"; damaged by {r['damaged_by']}"
        if r.get("reason") and not r.get("verifies"):
            state += f"; {r['reason']}"
        verifies = {True: "yes", False: "**NO**", None: "-"}[r.get("verifies")]
        lines.append(
            f"| {r['id']}{' (latest)' if r.get('latest') else ''} | {r.get('step')} | "
            f"{r.get('size') or '-'} | {_sha(r.get('sha256_now'))} | {verifies} | {who} | "
            f"{', '.join(map(str, r.get('loaded_by') or [])) or '-'} | {refused or '-'} | "
            f"{state} |"
        )
    failed = inv.get("failed_saves") or []
    if failed:
        lines.append("")
        lines.append(
            "Failed saves: " + "; ".join(f"step {f['step']} ({f['error']})" for f in failed)
        )
    seen = inv.get("pointer_observed") or []
    if seen:
        lines.append(
            "Pointer during the storage fault: "
            + "; ".join(
                f"{p['when']}: `{p['latest']}` verifies {p['verifies']}"
                + (f" ({p['problem']})" if p.get("problem") else "")
                for p in seen
            )
        )
    lines.append("")
    return lines


def item_sections(s: dict[str, Any]) -> list[str]:
    """All three sections for one scenario or control of report.json."""
    return [
        *disruption_lines(s.get("disruption")),
        *goodput_lines(s.get("goodput")),
        *inventory_lines(s.get("inventory")),
    ]
