"""report.md: the human report, rendered from a :class:`~faultdrill.report.model.Report`
(never from live state), so that any recorded run can be re-rendered. Every fixed text goes
through :mod:`faultdrill.i18n` (``lang`` ``en`` or ``zh``); findings' messages are
data (:func:`~faultdrill.report.words.finding_text`)."""

from __future__ import annotations

from faultdrill.i18n import Translator, translator
from faultdrill.report import words
from faultdrill.report.blocks import to_markdown
from faultdrill.report.model import Conditions, Evidence, Item, Report
from faultdrill.report.parts import dossier_parts, item_parts, run_parts, verdict_parts
from faultdrill.report.parts.common import value
from faultdrill.report.parts.verdict import failure_part, no_probe_part
from faultdrill.report.scope import derive_scope

__all__ = ["render_markdown"]

_SUMMARY_COLS = (
    "col.scenario",
    "col.round",
    "col.fault",
    "col.verdict",
    "col.class",
    "col.level",
    "col.layer",
    "col.detect",
    "col.recover",
    "col.recomputed",
)
_CONTROL_COLS = (
    "col.control",
    "col.bug",
    "col.expected_check",
    "col.caught",
    "col.verdict",
    "col.layer",
)


def _caught_cell(caught: bool | None, t: Translator) -> str:
    if caught is None:
        return f"**{t('ctl.unproven')}**"
    return t("yes") if caught else f"**{t('no')}**"


def _findings(ev: Evidence, t: Translator) -> list[str]:
    return [
        f"  - {t.verdict(f.verdict)} `{f.check}`: {words.finding_text(t, f)}" for f in ev.findings
    ]


# --- one item -----------------------------------------------------------------------------


def _verdict_line(s: Item, t: Translator) -> str:
    verdict = t.verdict(s.verdict)
    if s.control:
        caught = t.caught(s.caught)
        return (
            "**"
            + t(
                "ctl.line",
                caught=caught,
                check=s.expected_check,
                mutation=words.mutation(t, s),
                verdict=verdict,
            )
            + "**"
        )
    return t(
        "verdict.line",
        verdict=f"**{verdict}**",
        cls=f"**{t.cls(s.recovery_class)}**",
        why=words.class_why(t, s),
    )


def _item_table(s: Item, t: Translator) -> list[str]:
    """Preconditions, injection, expected state, recovery action, outcome, conclusion."""
    fault = s.fault
    lines = [
        "| | |",
        "|---|---|",
        f"| {t('row.preconditions')} | {t('pre.baseline')}; "
        f"{'; '.join(s.preconditions) or t('pre.none')} |",
        f"| {t('row.injection')} | "
        + t(
            "inj.text",
            kind=fault.kind if fault else None,
            target=fault.target if fault else None,
            trigger=s.trigger,
        )
        + " |",
    ]
    if s.expected is not None:
        lines.append(f"| {t('row.expected')} | {words.expected(t, s.expected)} |")
    lines.append(f"| {t('row.recovery')} | {words.actions(t, s.operator_actions)} |")
    lines.append(f"| {t('row.outcome')} | {words.outcome(t, s.outcome)} |")
    conclusion = t("conclusion.cls", cls=t.cls(s.recovery_class), why=words.class_why(t, s))
    if s.conclusion is not None:
        conclusion += t("list.sep") + t("conclusion.level", level=t.level(s.conclusion.level))
    if s.layer is not None:
        conclusion += t("list.sep") + t("conclusion.layer", layer=t.layer(s.layer.layer))
    lines.append(f"| {t('row.conclusion')} | **{t.verdict(s.verdict)}**; {conclusion} |")
    return [*lines, ""]


def _questions(s: Item, t: Translator) -> list[str]:
    q = s.questions
    by, note2 = words.lost_by_text(t, q.worker_lost_by), words.note_text(t, q.old_replica_note)
    return [
        f"**{t('q.title')}**",
        "",
        f"1. {t('q.1')}: {words.when(t, q.worker_lost_at)}"
        + (f" — {t('q.by', by=by)}" if by else ""),
        f"2. {t('q.2')}: {words.when(t, q.old_replica_stopped_at)}"
        + (f" — {note2}" if note2 else ""),
        f"3. {t('q.3')}: {words.when(t, q.new_replicas_ready_at)}",
        f"4. {t('q.4')}: {words.resumed(t, q.resumed_from)}; "
        + t("q.first_step", when=words.when(t, q.first_step_after_at)),
        "",
        *([t("q.note", note=words.note_text(t, q.note)), ""] if q.note else []),
        words.times_line(t, s.times),
        "",
    ]


def _evidence(s: Item, t: Translator) -> list[str]:
    lines = [f"**{t('evidence.title')}**", ""]
    for cat, ev in s.evidence.categories():
        lines.append(f"- {t.evidence(cat)}: **{t.verdict(ev.verdict)}**")
        lines += _findings(ev, t)
    lines.append(f"- {t.evidence('expectation')}: **{t.verdict(s.expectation.verdict)}**")
    lines += _findings(s.expectation, t)
    return [*lines, ""]


def _conditions(c: Conditions | None, t: Translator) -> list[str]:
    return [f"_{t('cond.title')}_: {words.conditions(t, c, pairs=True)} {t('cond.note')}", ""]


def _item(s: Item, t: Translator, report: Report) -> list[str]:
    title = f" — {words.item_title(t, s)}" if s.title else ""
    lines = [f"### {s.id}{title}", "", _verdict_line(s, t), ""]
    if s.not_as_planned:
        lines += [t("not_as_planned", why=words.not_as_planned(t, s)), ""]
    return [
        *lines,
        *_item_table(s, t),
        *_questions(s, t),
        *to_markdown(verdict_parts(t, s)),
        *_evidence(s, t),
        *to_markdown(item_parts(t, s, report)),
        *_conditions(s.conditions, t),
    ]


# --- the run ------------------------------------------------------------------------------


def _header(report: Report, t: Translator) -> list[str]:
    summ, base = report.summary, report.baseline
    return [
        f"# {t('title', task=report.task_id)}",
        "",
        t("subtitle", version=report.faultdrill_version, digest=report.plan_digest[:19]),
        "",
        f"## {t('summary.title')}",
        "",
        "- "
        + t(
            "summary.scenarios",
            n=summ.scenarios,
            p=summ.passed,
            f=summ.failed,
            r=summ.retest,
        ),
        "- " + t("summary.controls", c=summ.controls_caught, n=summ.controls),
        *(["- " + note] if (note := words.controls_note(t, report)) else []),
        "- "
        + t(
            "summary.baseline",
            verdict=t.verdict(base.verdict),
            steps=base.steps,
            digest=(base.final_model_digest or t("na"))[:16],
            ws=base.world_size,
        ),
        "- " + t("summary.overall", ok=f"**{t('ok') if summ.ok else t('not-ok')}**"),
        "",
    ]


def _verdict_tables(report: Report, t: Translator) -> list[str]:
    lines = [
        "| " + " | ".join(t(k) for k in _SUMMARY_COLS) + " |",
        "|" + "---|" * len(_SUMMARY_COLS),
    ]
    for s in report.scenario_items:
        tm, fault = s.times, s.fault
        level = t.level(s.conclusion.level) if s.conclusion is not None else "—"
        layer = t.layer(s.layer.layer) if s.layer is not None else "—"
        rc = tm.recomputed_steps
        lines.append(
            f"| {s.id} | {s.round} | {fault.kind if fault else None} "
            f"({fault.target if fault else None}) | "
            f"{t.verdict(s.verdict)} | {t.cls(s.recovery_class)} | {level} | {layer} | "
            f"{t.seconds(tm.detect_s)} | {t.seconds(tm.recover_s)} | "
            f"{rc if rc is not None else t('na')} |"
        )
    for sk in report.skipped:
        reason = words.skip_reason(t, sk.reason)
        lines.append(f"| {sk.id} | | | {t('verdict.not-run')} | | | | | | {reason} |")
    if report.control_items:
        lines += [
            "",
            "| " + " | ".join(t(k) for k in _CONTROL_COLS) + " |",
            "|" + "---|" * len(_CONTROL_COLS),
        ]
        for s in report.control_items:
            layer = t.layer(s.layer.layer) if s.layer is not None else "—"
            lines.append(
                f"| {s.id} | `{words.mutation(t, s)}` | `{s.expected_check}` "
                f"| {_caught_cell(s.caught, t)} | "
                f"{t.verdict(s.verdict)} | {layer} |"
            )
    return lines


def _baseline(report: Report, t: Translator) -> list[str]:
    plan, base, dossier = report.plan, report.baseline, report.dossier
    resp = plan.responsibility
    lines = [
        "",
        f"## {t('baseline.title')}",
        "",
        "- "
        + t(
            "baseline.task",
            id=dossier.task.id,
            cfg=dossier.task.config_version,
            code=dossier.task.code_id,
        ),
        "- "
        + t(
            "baseline.data",
            snap=plan.data.snapshot,
            digest=plan.data.digest or "",
            pos=plan.data.read_position,
        ),
        "- " + t("baseline.resources", topology=words.topology(t, plan)),
        "- " + t("baseline.ckpt", every=plan.checkpoint.every_steps, keep=plan.checkpoint.keep),
        "- " + t("baseline.seeds", seeds=value(t, dict(plan.seeds))),
        "- " + t("baseline.window", window=words.window(t, dossier.observation.baseline_window)),
        "- "
        + t(
            "baseline.resp",
            injector=resp.injector,
            observer=resp.observer,
            operator=resp.recovery_operator,
            signer=resp.signer,
        ),
    ]
    if base.evidence is not None:
        for cat, ev in base.evidence.categories():
            lines.append(
                "- " + t("baseline.selfcheck", cat=t.evidence(cat), verdict=t.verdict(ev.verdict))
            )
    said = [
        failure_part(t, base.failure, "baseline-failure"),
        no_probe_part(t, base.no_probe_events),
    ]
    lines.append("")
    lines += to_markdown([p for p in said if p is not None])
    lines += [f"### {t('html.dossiers')}", "", *to_markdown(dossier_parts(t, report))]
    return lines


def _items(report: Report, t: Translator) -> list[str]:
    lines = ["", f"## {t('scenarios.title')}", ""]
    for s in report.scenario_items:
        lines += _item(s, t, report)
    if report.control_items:
        lines += [f"## {t('controls.title')}", "", t("controls.intro"), ""]
        for s in report.control_items:
            lines += _item(s, t, report)
    return lines


def _scope_and_signoff(report: Report, t: Translator) -> list[str]:
    resp = report.plan.responsibility
    lines = [
        f"## {t('scope.title')}",
        "",
        f"| {t('col.dimension')} | {t('col.verified')} | {t('col.to_verify')} |",
        "|---|---|---|",
        *(
            f"| {t('scope.dim.' + row.dimension)} | {row.verified} | {'; '.join(row.to_verify)} |"
            for row in derive_scope(report, t)
        ),
        "",
        f"## {t('signoff.title')}",
        "",
        "- "
        + t("signoff.line", role=t("role.injector"), name=resp.injector)
        + "  - "
        + t("signoff.line", role=t("role.observer"), name=resp.observer),
        "- "
        + t("signoff.line", role=t("role.recovery_operator"), name=resp.recovery_operator)
        + "  - "
        + t("signoff.line", role=t("role.signer"), name=resp.signer),
    ]
    replayer = report.dossier.responsibility.replay_operator
    if replayer:
        lines.append("- " + t("signoff.line", role=t("role.replay_operator"), name=replayer))
    return [*lines, ""]


def render_markdown(report: Report, lang: str = "en") -> str:
    """report.md of ``report`` in ``lang``."""
    t = translator(lang)
    lines = [
        *_header(report, t),
        *_verdict_tables(report, t),
        *_baseline(report, t),
        *_items(report, t),
        f"## {t('html.dependencies')}",
        "",
        *to_markdown(run_parts(t, report)),
        *_scope_and_signoff(report, t),
    ]
    return "\n".join(lines)
