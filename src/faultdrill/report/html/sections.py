"""The run-wide sections of the HTML report: the summary tables, manual dependencies, the
verified / to-be-verified scope, the baseline's dossiers, the conditions of every measured
time, a replay's comparison, and the sign-off table. Each returns the section's inner HTML
from a :class:`~faultdrill.report.model.Report` (plus the run directory's event files
where a section shows recorded times)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faultdrill.events import read_jsonl
from faultdrill.i18n import Translator
from faultdrill.report import words
from faultdrill.report.blocks import to_html
from faultdrill.report.html.generic import e, generic, vb
from faultdrill.report.model import Item, Report
from faultdrill.report.parts.common import level_anchor
from faultdrill.report.parts.verdict import failure_part, no_probe_part
from faultdrill.report.scope import derive_scope
from faultdrill.report.svg import item_events_dir, load_item

__all__ = [
    "ManualStep",
    "conditions_html",
    "manual_html",
    "manual_steps",
    "replay_html",
    "scope_html",
    "signoff_html",
    "summary_html",
]

_VERDICT_COLS = (
    "col.scenario",
    "col.round",
    "col.fault",
    "col.verdict",
    "col.class",
    "col.level",
    "col.layer",
    "col.resume",
    "col.detect",
    "col.ready",
    "col.recover",
    "col.recomputed",
)


# --- summary ------------------------------------------------------------------------------


def _caught_attr(caught: bool | None) -> str:
    return "unproven" if caught is None else str(bool(caught)).lower()


def _caught_text(t: Translator, caught: bool | None) -> str:
    if caught is None:
        return t("ctl.unproven")
    return t("yes") if caught else t("no")


def _summary_list(t: Translator, report: Report) -> list[str]:
    summ, base = report.summary, report.baseline
    digest = (base.final_model_digest or t("na"))[:16]
    baseline = t(
        "summary.baseline.plain",
        verdict=t.verdict(base.verdict),
        steps=base.steps,
        digest=digest,
        ws=base.world_size,
    )
    scenarios = t(
        "summary.scenarios", n=summ.scenarios, p=summ.passed, f=summ.failed, r=summ.retest
    )
    return [
        "<ul class='summary'>",
        f"<li>{e(scenarios)}</li>",
        f"<li>{e(t('summary.controls', c=summ.controls_caught, n=summ.controls))}</li>",
        *(
            [f"<li class='warning' data-controls-note>{e(note)}</li>"]
            if (note := words.controls_note(t, report))
            else []
        ),
        f"<li>{e(baseline)}</li>",
        f"<li>{e(t('summary.overall', ok=t('ok') if summ.ok else t('not-ok')))}</li>",
        "</ul>",
    ]


def level_cell(t: Translator, s: Item) -> str:
    """The conclusion level reached, linked to its proof in the item."""
    c = s.conclusion
    if c is None:
        return "—"
    level = c.level or (c.levels[0].level if c.levels else None)
    name = e(t.level(c.level))
    if level is None:
        return name
    return (
        f"<a href='#{e(level_anchor(s.id, level))}' data-level='{e(c.level or 'none')}'>{name}</a>"
    )


def layer_cell(t: Translator, s: Item) -> str:
    if s.layer is None:
        return "—"
    return f"<a href='#layer-{e(s.id)}' data-layer='{e(s.layer.layer)}'>{e(t.layer(s.layer.layer))}</a>"


def _scenario_row(t: Translator, s: Item) -> str:
    tm, fault, rs = s.times, s.fault, s.questions.resumed_from
    resume = "—" if rs is None else f"{rs.checkpoint or '0'} / {rs.step} / {rs.data_position}"
    rc = tm.recomputed_steps
    return (
        f"<tr data-scenario='{e(s.id)}'><td><a href='#item-{e(s.id)}'>{e(s.id)}</a></td>"
        f"<td>{e(s.round)}</td><td>{e(fault.kind if fault else None)} "
        f"({e(fault.target if fault else None)})</td>"
        f"<td>{vb(t, s.verdict)}</td><td>{e(t.cls(s.recovery_class))}</td>"
        f"<td>{level_cell(t, s)}</td><td>{layer_cell(t, s)}</td>"
        f"<td>{e(resume)}</td><td>{e(t.seconds(tm.detect_s))}</td>"
        f"<td>{e(t.seconds(tm.ready_s))}</td><td>{e(t.seconds(tm.recover_s))}</td>"
        f"<td>{e(t('na') if rc is None else rc)}</td></tr>"
    )


def _controls_table(t: Translator, report: Report) -> str:
    rows = "".join(
        f"<tr data-scenario='{e(s.id)}'><td><a href='#item-{e(s.id)}'>{e(s.id)}</a></td>"
        f"<td><code>{e(words.mutation(t, s))}</code></td>"
        f"<td><code>{e(s.expected_check)}</code></td>"
        f"<td data-caught='{_caught_attr(s.caught)}'>"
        f"{e(_caught_text(t, s.caught))}</td><td>{vb(t, s.verdict)}</td>"
        f"<td>{layer_cell(t, s)}</td></tr>"
        for s in report.control_items
    )
    return (
        f"<table class='controls'><tr><th>{t('col.control')}</th><th>{t('col.bug')}</th>"
        f"<th>{t('col.expected_check')}</th><th>{t('col.caught')}</th><th>{t('col.verdict')}</th>"
        f"<th>{t('col.layer')}</th></tr>{rows}</table>"
    )


def summary_html(t: Translator, report: Report) -> str:
    """The overall result, one row per scenario (and skipped item), one per control."""
    head = "".join(f"<th>{t(k)}</th>" for k in _VERDICT_COLS)
    rows = [_scenario_row(t, s) for s in report.scenario_items]
    for sk in report.skipped:
        rows.append(
            f"<tr data-skipped='{e(sk.id)}'><td>{e(sk.id)}</td><td></td><td></td>"
            f"<td>{vb(t, 'not-run')}</td><td colspan='8'>{e(words.skip_reason(t, sk.reason))}</td></tr>"
        )
    out = [
        *_summary_list(t, report),
        f"<table class='verdicts'><tr>{head}</tr>{''.join(rows)}</table>",
    ]
    if report.control_items:
        out.append(_controls_table(t, report))
    base = report.baseline
    said = [
        failure_part(t, base.failure, "baseline-failure"),
        no_probe_part(t, base.no_probe_events),
    ]
    out.append(to_html([p for p in said if p is not None]))
    return "\n".join(out)


# --- manual dependencies ------------------------------------------------------------------


@dataclass(frozen=True)
class ManualStep:
    """One manual step of a run: an operator action or a required confirmation."""

    scenario: str
    action: str
    detail: str
    who: str | None
    permission: str  # i18n key
    at_s: float | None  # seconds after the injection, when recorded
    recover_s: float | None


def _action_times(run_dir: Path | None, item_id: str) -> list[float]:
    """When each operator action of an item happened, seconds after its injection."""
    view = load_item(item_events_dir(run_dir, item_id, False)) if run_dir is not None else None
    if view is None:
        return []
    return [round(view.rel(ev.mono), 2) for ev in view.tl.of("harness", "operator_action")]


def manual_steps(report: Report, run_dir: Path | None) -> list[ManualStep]:
    """Every manual step of the run's scenarios (times from the recorded events)."""
    operator = report.plan.responsibility.recovery_operator
    out: list[ManualStep] = []
    for s in report.scenario_items:
        times = _action_times(run_dir, s.id) if s.operator_actions else []
        for i, a in enumerate(s.operator_actions):
            at = times[i] if i < len(times) else None
            who = a.operator or operator
            detail = a.runbook or ""
            out.append(
                ManualStep(s.id, str(a.action), detail, who, "perm.operator", at, s.times.recover_s)
            )
        if s.recovery_class == "manual-confirmation":
            why = s.recovery_class_why or ""
            out.append(ManualStep(s.id, "confirm", why, operator, "perm.operator", None, None))
    return out


def _item_seconds(run_dir: Path | None) -> float | None:
    """Wall seconds the recorded items took, from their harness start/end events."""
    if run_dir is None:
        return None
    total = 0.0
    for path in run_dir.glob("**/events/harness.jsonl"):
        recs = list(read_jsonl(path))
        start = next((r for r in recs if r.get("kind") == "item_start"), None)
        end = next((r for r in reversed(recs) if r.get("kind") == "item_end"), None)
        if start and end:
            total += float(end["ts"]) - float(start["ts"])
    return round(total, 1) if total else None


def _step_row(t: Translator, st: ManualStep) -> str:
    if st.action == "resubmit":
        what = t("manual.resubmit", runbook=st.detail or "-")
    elif st.action == "confirm":
        what = t("manual.confirm", why=st.detail)
    else:
        what = f"{st.action} {st.detail}".strip()
    at = t.seconds(st.at_s) if st.at_s is not None else "—"
    return (
        f"<tr data-manual='{e(st.scenario)}'><td>{e(st.scenario)}</td><td>{e(what)}</td>"
        f"<td>{e(st.who)}</td><td>{e(t(st.permission))}</td><td>{e(at)}</td></tr>"
    )


def manual_html(t: Translator, report: Report, run_dir: Path | None) -> str:
    """Every step a person had to take, and what the drill itself needed."""
    steps = manual_steps(report, run_dir)
    out = [f"<p class='note'>{t('html.manual.intro')}</p>"]
    if not steps:
        out.append(f"<p data-manual='none'>{t('html.manual.none')}</p>")
    else:
        out.append(
            f"<table><tr><th>{t('col.scenario')}</th><th>{t('col.step')}</th>"
            f"<th>{t('col.who')}</th><th>{t('col.permission')}</th><th>{t('col.time')}</th>"
            f"</tr>{''.join(_step_row(t, st) for st in steps)}</table>"
        )
    resp = report.plan.responsibility
    took = _item_seconds(run_dir)
    out.append(
        f"<table><tr><th>{t('col.step')}</th><th>{t('col.who')}</th><th>{t('col.permission')}</th>"
        f"<th>{t('col.time')}</th></tr>"
        f"<tr data-manual='drill'><td>{t('manual.drill')}</td><td>{e(resp.injector)}, "
        f"{e(resp.observer)}</td><td>{e(words.permissions(report, t))}</td>"
        f"<td>{e(t.seconds(took) if took is not None else '—')}</td></tr></table>"
    )
    return "\n".join(out)


# --- scope, dossiers, conditions, replay, sign-off ----------------------------------------


def scope_html(t: Translator, report: Report) -> str:
    rows = "".join(
        f"<tr data-scope='{r.dimension}'><td>{t('scope.dim.' + r.dimension)}</td>"
        f"<td>{e(r.verified)}</td><td><ul class='to-verify'>"
        f"{''.join(f'<li>{e(x)}</li>' for x in r.to_verify)}</ul></td></tr>"
        for r in derive_scope(report, t)
    )
    return (
        f"<table class='scope'><tr><th>{t('col.dimension')}</th><th>{t('col.verified')}</th>"
        f"<th>{t('col.to_verify')}</th></tr>{rows}</table>"
    )


def _conditions_row(t: Translator, s: Item) -> str:
    tm = s.times
    rc = tm.recomputed_steps
    extra = s.conditions.extra if s.conditions is not None else {}
    return (
        f"<tr data-conditions='{e(s.id)}'><td>{e(s.id)}</td>"
        f"<td>{e(t.seconds(tm.detect_s))}</td><td>{e(t.seconds(tm.ready_s))}</td>"
        f"<td>{e(t.seconds(tm.recover_s))}</td>"
        f"<td>{e(rc if rc is not None else t('na'))}</td>"
        f"<td>{e(words.conditions(t, s.conditions, pairs=True))}{generic(extra) if extra else ''}</td></tr>"
    )


def conditions_html(t: Translator, report: Report) -> str:
    """Every item's measured times beside the conditions they were observed under."""
    rows = "".join(_conditions_row(t, s) for s in report.scenarios)
    return (
        f"<p><b>{t('cond.note')}</b></p><table><tr><th>{t('col.scenario')}</th>"
        f"<th>{t('col.detect')}</th><th>{t('col.ready')}</th><th>{t('col.recover')}</th>"
        f"<th>{t('col.recomputed')}</th><th>{t('col.conditions')}</th></tr>{rows}</table>"
    )


def _replay_comparison(run_dir: Path | None) -> dict[str, Any] | None:
    """A replayed run's ``replay.json`` (how it compared with the original), if any."""
    path = run_dir / "replay.json" if run_dir is not None else None
    if path is None or not path.exists():
        return None
    try:
        comp = json.loads(path.read_text())
    except ValueError:
        return None
    return comp if isinstance(comp, dict) else None


def replay_html(t: Translator, report: Report, run_dir: Path | None) -> str:
    """Who replayed the run and whether it reproduced the original ("" when no replay)."""
    rp = report.dossier.replay
    if rp is None:
        return ""
    original = rp.original_responsibility or {}
    line = t(
        "replay.line",
        operator=rp.operator,
        bundle=rp.bundle,
        original=", ".join(f"{k}={v}" for k, v in original.items()),
    )
    out = [f"<h2 id='replay'>{t('html.replay')}</h2>", f"<p>{e(line)}</p>"]
    trust = _trust_line(t, rp.source_trust)
    if trust:
        out.append(f"<p data-replay-trust>{e(trust)}</p>")
    comp = _replay_comparison(run_dir)
    if comp:
        ok = comp.get("matches")
        out.append(
            f"<p data-replay-match='{str(bool(ok)).lower()}'><b>"
            f"{t('replay.match') if ok else t('replay.mismatch')}</b></p>"
        )
        out.append(_replay_items(t, comp.get("items")))
    return "\n".join(out)


def _trust_line(t: Translator, trust: dict[str, Any] | None) -> str:
    """What was checked of the replayed bundle before its plan ran ("" if not recorded)."""
    if not trust:
        return ""
    if trust.get("no_verify"):
        return t("replay.trust.no-verify")
    if trust.get("key_id"):
        return t("replay.trust.key", key_id=trust["key_id"])
    return t("replay.trust.unsigned") if trust.get("unsigned") else ""


def _replay_items(t: Translator, items: Any) -> str:
    """Each replayed item: whether it reproduced the original, and each difference."""
    rows = []
    for it in items if isinstance(items, list) else []:
        if not isinstance(it, dict):
            continue
        pair = [str(x) for x in (it.get("verdict") or [])]
        diffs = "".join(f"<li>{e(d)}</li>" for d in it.get("differences") or [])
        match = "pass" if it.get("matches") else "fail"
        said = t("replay.match") if it.get("matches") else t("replay.mismatch")
        rows.append(
            f"<tr data-replayed='{e(it.get('id'))}'><td>{e(it.get('id'))}</td>"
            f"<td><span class='v {match}'>{e(said)}</span></td>"
            f"<td>{e(' → '.join(t.verdict(v) for v in pair))}</td>"
            f"<td>{'<ul>' + diffs + '</ul>' if diffs else '—'}</td></tr>"
        )
    return (
        f"<table class='replay'><tr><th>{t('col.item')}</th><th>{t('col.outcome')}</th>"
        f"<th>{t('col.verdict')}</th><th>{t('col.differences')}</th></tr>{''.join(rows)}</table>"
    )


def signoff_html(t: Translator, report: Report) -> str:
    """A row per role (and the replay operator, if any) to sign and date."""
    resp = report.plan.responsibility
    rows = [
        (t("role.injector"), resp.injector),
        (t("role.observer"), resp.observer),
        (t("role.recovery_operator"), resp.recovery_operator),
        (t("role.signer"), resp.signer),
    ]
    replayer = report.dossier.responsibility.replay_operator
    if replayer:
        rows.append((t("role.replay_operator"), replayer))
    body = "".join(
        f"<tr data-role='{e(r)}'><td>{e(r)}</td><td>{e(n)}</td><td class='sign'></td>"
        "<td class='sign'></td></tr>"
        for r, n in rows
    )
    return (
        f"<table class='signoff'><tr><th>{t('col.role')}</th><th>{t('col.name')}</th>"
        f"<th>{t('col.signature')}</th><th>{t('col.date')}</th></tr>{body}</table>"
    )
