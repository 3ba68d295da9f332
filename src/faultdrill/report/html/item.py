"""One scenario or control of the HTML report: an ``<article>`` with the methodology's row
table (preconditions, injection, expected state, evidence, recovery, conclusion), the four
answers, the conclusion level and (where not pass) the failing layer, a failed job's
command and error output, the timeline, loss and evaluation pictures, the resource
evidence, every finding, the parts of :mod:`faultdrill.report.parts` (evaluation, trend,
dependencies, scheduling, accounting), the conditions, and any recorded data this version
has no section for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from faultdrill.i18n import Translator
from faultdrill.report import words
from faultdrill.report.blocks import Table, html_block, to_html
from faultdrill.report.html.generic import e, generic, vb
from faultdrill.report.model import Evidence, Item, Report
from faultdrill.report.parts import ITEM_PART_KEYS, item_parts, verdict_parts
from faultdrill.report.parts.common import finding_anchor
from faultdrill.report.svg import (
    ItemView,
    item_events_dir,
    load_item,
    loss_svg,
    proc_rows,
    timeline_svg,
)
from faultdrill.report.svg.evaluation import evaluation_svgs

__all__ = ["KNOWN_ITEM_KEYS", "item_html"]

#: Keys of an item rendered by name; any other recorded key is shown generically.
KNOWN_ITEM_KEYS = frozenset(
    {
        "id",
        "round",
        "control",
        "title",
        "fault",
        "trigger",
        "preconditions",
        "expected",
        "verdict",
        "recovery_class",
        "recovery_class_why",
        "outcome",
        "operator_actions",
        "questions",
        "times",
        "conditions",
        "evidence",
        "expectation",
        "expected_check",
        "caught",
        "workload_mutation",
        *ITEM_PART_KEYS,
    }
)


def _bad_list(item_id: str, findings: list[tuple[str, str]]) -> str:
    return "".join(
        f"<li><a href='#{e(finding_anchor(item_id, check))}'><code>{e(check)}</code></a>: "
        f"{e(msg)}</li>"
        for check, msg in findings
    )


def _not_passed(t: Translator, ev: Evidence) -> list[tuple[str, str]]:
    return [(f.check, words.finding_text(t, f)) for f in ev.not_passed()]


def _evidence_cell(t: Translator, s: Item) -> str:
    parts = []
    for cat, ev in s.evidence.categories():
        bad = _not_passed(t, ev)
        detail = f"<ul>{_bad_list(s.id, bad)}</ul>" if bad else ""
        parts.append(
            f"<div data-evidence='{cat}'>{e(t.evidence(cat))}: {vb(t, ev.verdict)}{detail}</div>"
        )
    parts.append(
        f"<div data-evidence='expectation'>{e(t.evidence('expectation'))}: "
        f"{vb(t, s.expectation.verdict)}</div>"
    )
    return "".join(parts)


def _head(t: Translator, s: Item) -> list[str]:
    title = f" — {e(words.item_title(t, s))}" if s.title else ""
    out = [
        f'<article class="item {e(s.verdict)}" id="item-{e(s.id)}" data-item="{e(s.id)}" '
        f'data-verdict="{e(s.verdict)}">',
        f"<h3>{e(s.id)}{title}</h3>",
    ]
    if s.control:
        line = t(
            "ctl.line.plain",
            caught=t.caught(s.caught),
            check=s.expected_check,
            mutation=words.mutation(t, s),
            verdict=t.verdict(s.verdict),
        )
        out.append(f"<p class='control-line'>{e(line)}</p>")
    if s.not_as_planned:
        why = words.not_as_planned(t, s)
        out.append(f"<p class='note not-as-planned'>{e(t('not_as_planned', why=why))}</p>")
    return out


def _row_table(t: Translator, s: Item) -> str:
    pre = [t("pre.baseline"), *s.preconditions]
    conclusion = t("conclusion.cls", cls=t.cls(s.recovery_class), why=words.class_why(t, s))
    if s.conclusion is not None:
        conclusion += t("list.sep") + t("conclusion.level", level=t.level(s.conclusion.level))
    if s.layer is not None:
        conclusion += t("list.sep") + t("conclusion.layer", layer=t.layer(s.layer.layer))
    if s.control:
        expected = t("exp.control", check=s.expected_check)
    else:
        expected = "—" if s.expected is None else words.expected(t, s.expected)
    fault = t(
        "inj.text.plain",
        kind=s.fault.kind if s.fault else None,
        target=s.fault.target if s.fault else None,
        trigger=s.trigger,
    )
    return (
        '<table class="row">'
        f"<tr><th>{t('row.preconditions')}</th><td>{e('; '.join(pre))}</td></tr>"
        f"<tr><th>{t('row.injection')}</th><td>{e(fault)}</td></tr>"
        f"<tr><th>{t('row.expected')}</th><td>{e(expected)}</td></tr>"
        f"<tr><th>{t('row.evidence')}</th><td>{_evidence_cell(t, s)}</td></tr>"
        f"<tr><th>{t('row.recovery')}</th><td>{e(words.actions(t, s.operator_actions))}</td></tr>"
        f"<tr><th>{t('row.outcome')}</th><td>{e(words.outcome(t, s.outcome))}</td></tr>"
        f"<tr><th>{t('row.conclusion')}</th><td data-conclusion>{vb(t, s.verdict)} "
        f"{e(conclusion)}</td></tr></table>"
    )


def _questions(t: Translator, s: Item) -> str:
    q = s.questions
    lost_by, note2 = words.lost_by_text(t, q.worker_lost_by), words.note_text(t, q.old_replica_note)
    first = words.when(t, q.first_step_after_at)
    return (
        f"<h4>{t('q.title')}</h4><ol class='questions'>"
        f"<li data-q='1'><span class='qlabel'>{t('q.1')}</span>: "
        f"{e(words.when(t, q.worker_lost_at))}"
        + (f" — {e(t('q.by', by=lost_by))}" if lost_by else "")
        + "</li>"
        f"<li data-q='2'><span class='qlabel'>{t('q.2')}</span>: "
        f"{e(words.when(t, q.old_replica_stopped_at))}"
        + (f" — {e(note2)}" if note2 else "")
        + "</li>"
        f"<li data-q='3'><span class='qlabel'>{t('q.3')}</span>: "
        f"{e(words.when(t, q.new_replicas_ready_at))}</li>"
        f"<li data-q='4'><span class='qlabel'>{t('q.4')}</span>: "
        f"{e(words.resumed(t, q.resumed_from, markup=False))}; "
        f"{e(t('q.first_step', when=first))}</li></ol>"
        + (
            f"<p class='note q-note'>{e(t('q.note', note=words.note_text(t, q.note)))}</p>"
            if q.note
            else ""
        )
        + f"<p>{e(words.times_line(t, s.times))}</p>"
    )


def _draw_error(t: Translator, what: str, exc: Exception) -> str:
    error = f"{type(exc).__name__}: {exc}"
    return f"<p class='note draw-error'>{t('html.draw.error', what=what, error=error)}</p>"


def _evaluation(t: Translator, s: Item, view: ItemView, base_view: ItemView | None) -> list[str]:
    """One plot per evaluated metric, baseline against drill (none: the job evaluates
    nothing, said by the evaluation check)."""
    try:
        plots = evaluation_svgs(view, base_view, s, t)
    except Exception as exc:  # as the other pictures: said in the page, never silent
        return [_draw_error(t, t("html.eval"), exc)]
    return [
        f"<figure class='eval-fig' data-metric='{e(metric)}'>{svg}<figcaption>"
        f"{e(t('html.eval.title', metric=metric))}: {t('html.eval.note')}</figcaption></figure>"
        for metric, svg in plots
    ]


def _pictures(t: Translator, s: Item, view: ItemView, base_view: ItemView | None) -> list[str]:
    """The timeline and the loss plot. The pictures illustrate evidence that report.json
    already states, so a drawing that fails (events of a kind this version does not know)
    is said in the page instead of costing the whole deliverable."""
    out = []
    try:
        out.append(
            f"<figure class='timeline-fig'>{timeline_svg(view, s, t, item_id=s.id)}"
            f"<figcaption>{t('html.timeline')}: {t('html.timeline.note')}</figcaption></figure>"
        )
    except Exception as exc:  # see docstring: reported in the page, never silent
        out.append(_draw_error(t, t("html.timeline"), exc))
    try:
        loss = loss_svg(view, base_view, s, t)
    except Exception as exc:  # as above
        out.append(_draw_error(t, t("html.loss"), exc))
        return out
    if loss is None:
        out.append(f"<p class='note'>{t('html.loss.missing')}</p>")
    else:
        out.append(
            f"<figure class='loss-fig'>{loss}<figcaption>{t('html.loss')}: "
            f"{t('html.loss.note')}</figcaption></figure>"
        )
    return out + _evaluation(t, s, view, base_view)


def _resources_block(t: Translator, s: Item, view: ItemView | None) -> str:
    ev = s.evidence.resources
    if ev.verdict == "pass":
        head = f"<p data-stale='none'>{t('html.stale.none')}</p>"
    else:
        key = "html.stale.found" if ev.verdict == "fail" else "html.stale.unknown"
        bad = _bad_list(s.id, _not_passed(t, ev))
        head = f"<p data-stale='{e(ev.verdict)}'>{t(key)}</p><ul>{bad}</ul>"
    procs = ""
    rows = proc_rows(view) if view is not None else []
    if rows:
        procs = (
            f"<details><summary>{t('html.procs')} ({len(rows)})</summary>"
            + html_block(_proc_table(t, rows))
            + "</details>"
        )
    return f"<h4>{t('html.resources')}</h4>{head}{procs}"


def _proc_table(t: Translator, rows: list[dict[str, Any]]) -> Table:
    """The sampler's process lives: who, and when seen and gone after the injection."""
    head = [
        t("field.pid"),
        t("col.role_proc"),
        t("field.rank"),
        t("col.node"),
        t("col.incarnation"),
        t("col.seen"),
        t("col.gone"),
    ]
    body = [
        [
            str(r["pid"]),
            words.value(t, r["role"]),
            words.value(t, r["rank"]),
            words.value(t, r["node"]),
            words.value(t, r["incarnation"]),
            words.after_injection(t, r["seen_s"]),
            words.after_injection(t, r["gone_s"]) if r["gone_s"] is not None else t("proc.alive"),
        ]
        for r in rows
    ]
    return Table(head, body, cls="procs")


def _findings_table(t: Translator, ev: Evidence, item_id: str, seen: set[str]) -> str:
    """The findings of one kind of evidence; the first finding of each check is the
    anchor the conclusion levels and the failing layer link to."""
    rows = []
    for f in ev.findings:
        anchor = "" if f.check in seen else f" id='{e(finding_anchor(item_id, f.check))}'"
        seen.add(f.check)
        rows.append(
            f"<tr{anchor} data-check='{e(f.check)}'><td>{vb(t, f.verdict)}</td><td><code>"
            f"{e(t.check_name(f.check))}</code></td><td>{e(words.finding_text(t, f))}</td></tr>"
        )
    return (
        f"<table class='findings'><tr><th>{t('col.verdict')}</th><th>{t('col.check')}</th>"
        f"<th>{t('col.message')}</th></tr>{''.join(rows)}</table>"
    )


def _all_findings(t: Translator, s: Item) -> list[str]:
    out = [f"<details class='findings'><summary>{t('evidence.title')}</summary>"]
    seen: set[str] = set()
    for cat, ev in [*s.evidence.categories(), ("expectation", s.expectation)]:
        out.append(f"<h4>{e(t.evidence(cat))}: {vb(t, ev.verdict)}</h4>")
        out.append(_findings_table(t, ev, s.id, seen))
    out.append("</details>")
    return out


def _conditions(t: Translator, s: Item) -> str:
    text = words.conditions(t, s.conditions, pairs=True)
    return f"<p class='note conditions'><b>{t('cond.title')}</b>: {e(text)} {t('cond.note')}</p>"


def _more(t: Translator, s: Item) -> list[str]:
    """Recorded keys without a section of their own, shown as recorded."""
    extra = {k: v for k, v in s.to_json().items() if k not in KNOWN_ITEM_KEYS}
    if not extra:
        return []
    out = [f"<h4>{t('html.more')}</h4>"]
    for k, v in extra.items():
        big = len(json.dumps(v, default=str)) > 1500
        out.append(
            f"<details class='extra' data-extra='{e(k)}'{'' if big else ' open'}>"
            f"<summary>{e(k)}</summary>{generic(v, 0, t)}</details>"
        )
    return out


def item_html(
    t: Translator, report: Report, s: Item, run_dir: Path | None, base_view: ItemView | None
) -> str:
    """The ``<article>`` of one item; ``run_dir`` supplies its event files for the pictures."""
    out = [*_head(t, s), _row_table(t, s), _questions(t, s), to_html(verdict_parts(t, s))]
    view = load_item(item_events_dir(run_dir, s.id, s.control)) if run_dir is not None else None
    if view is None:
        out.append(f"<p class='note missing-timeline'>{t('html.timeline.missing')}</p>")
    else:
        out += _pictures(t, s, view, base_view)
    out.append(_resources_block(t, s, view))
    out += _all_findings(t, s)
    out.append(to_html(item_parts(t, s, report)))
    out.append(_conditions(t, s))
    out += _more(t, s)
    out.append("</article>")
    return "\n".join(out)
