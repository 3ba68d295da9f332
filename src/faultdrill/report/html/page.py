"""The HTML page: header, contents, every section in order, recorded data without a section,
footer; the assets inline and a Content-Security-Policy that forbids loading anything."""

from __future__ import annotations

from pathlib import Path

from faultdrill.i18n import Translator, translator
from faultdrill.report.blocks import to_html
from faultdrill.report.html import sections
from faultdrill.report.html.assets import CSP, CSS, SCRIPT
from faultdrill.report.html.generic import e, generic
from faultdrill.report.html.item import item_html
from faultdrill.report.model import Report
from faultdrill.report.parts import dossier_parts, run_parts
from faultdrill.report.svg import item_events_dir, load_item

__all__ = ["KNOWN_TOP_KEYS", "render_html"]

#: report.json keys rendered by name; any other recorded key is shown generically.
KNOWN_TOP_KEYS = frozenset(
    {
        "schema_version",
        "faultdrill_version",
        "task_id",
        "plan_digest",
        "plan",
        "baseline",
        "scenarios",
        "skipped",
        "summary",
        "recovery_dependencies",
    }
)


def _header(t: Translator, report: Report) -> list[str]:
    ok = report.summary.ok
    subtitle = t("subtitle", version=report.faultdrill_version, digest=report.plan_digest[:19])
    contents = [
        ("summary", t("summary.title")),
        ("scenarios", t("scenarios.title")),
        *([("controls", t("controls.title"))] if report.control_items else []),
        ("manual", t("html.manual")),
        ("dependencies", t("html.dependencies")),
        ("scope", t("scope.title")),
        ("dossiers", t("html.dossiers")),
        ("conditions", t("html.conditions")),
        ("signoff", t("signoff.title")),
    ]
    toc = "".join(f"<a href='#{k}'>{e(v)}</a>" for k, v in contents)
    return [
        "<header class='top'>",
        f"<h1>{e(t('title', task=report.task_id))}</h1>",
        f"<div class='sub'>{e(subtitle)} · {e(t('lang.name'))}</div>",
        f"<div class='banner {'ok' if ok else 'notok'}' data-overall='{'ok' if ok else 'not-ok'}'>"
        f"{e(t('ok') if ok else t('not-ok'))}</div>",
        "</header>",
        f"<nav class='toc'><b>{t('html.contents')}:</b> {toc}</nav>",
    ]


def _items(t: Translator, report: Report, run_dir: Path | None) -> list[str]:
    """The scenarios' section and, when there are controls, the controls' section."""
    base_view = load_item(item_events_dir(run_dir, "baseline", None)) if run_dir else None
    out = [
        f"<section id='scenarios'><h2>{t('scenarios.title')}</h2>",
        *[item_html(t, report, s, run_dir, base_view) for s in report.scenario_items],
        "</section>",
    ]
    if report.control_items:
        out += [
            f"<section id='controls'><h2>{t('controls.title')}</h2>"
            f"<p class='note'>{t('controls.intro')}</p>",
            *[item_html(t, report, s, run_dir, base_view) for s in report.control_items],
            "</section>",
        ]
    return out


def _more(t: Translator, report: Report) -> list[str]:
    """report.json keys without a section of their own, shown as recorded."""
    extra = {k: v for k, v in report.to_json().items() if k not in KNOWN_TOP_KEYS}
    if not extra:
        return []
    return [
        f"<section id='extra'><h2>{t('html.more')}</h2>"
        + "".join(
            f"<h4 data-extra='{e(k)}'>{e(k)}</h4>{generic(v, 0, t)}" for k, v in extra.items()
        )
        + "</section>"
    ]


def _section(key: str, title: str, inner: str) -> str:
    return f"<section id='{key}'><h2>{title}</h2>{inner}</section>"


def render_html(report: Report, run_dir: Path | None = None, lang: str = "en") -> str:
    """The HTML report of ``report``; ``run_dir`` supplies the event files for the pictures
    (without it, the pictures are left out and said so)."""
    t = translator(lang)
    body = [
        *_header(t, report),
        _section("summary", t("summary.title"), sections.summary_html(t, report)),
        *_items(t, report, run_dir),
        _section("manual", t("html.manual"), sections.manual_html(t, report, run_dir)),
        _section("dependencies", t("html.dependencies"), to_html(run_parts(t, report))),
        _section("scope", t("scope.title"), sections.scope_html(t, report)),
        _section("dossiers", t("html.dossiers"), to_html(dossier_parts(t, report))),
        _section("conditions", t("html.conditions"), sections.conditions_html(t, report)),
        sections.replay_html(t, report, run_dir),
        _section("signoff", t("signoff.title"), sections.signoff_html(t, report)),
        *_more(t, report),
        f"<footer>{e(t('html.footer', version=report.faultdrill_version))}</footer>",
    ]
    html_lang = t.language.html_lang
    return (
        f"<!DOCTYPE html>\n<html lang='{html_lang}'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{e(t('title', task=report.task_id))}</title><style>{CSS}</style></head>"
        f"<body><main>{''.join(body)}</main><script>{SCRIPT}</script></body></html>\n"
    )
