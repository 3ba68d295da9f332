"""report.html: the deliverable a buyer signs, one self-contained file.

Rendered from ``report.json`` plus the run directory's event files (timeline and loss
curve), never from live state, so any recorded run or unpacked bundle renders again. The
file needs no network access: CSS, the small script and every picture (inline SVG) are in
the page, and a Content-Security-Policy forbids loading anything else.

Keys of ``report.json`` this module does not know (added by newer checks, inventories,
network tracks...) are still shown, generically, under "Additional recorded data"; keys
that are absent are simply not shown.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from faultdrill.report.i18n import Translator, translator
from faultdrill.report.scope import derive_scope, recorded_environment
from faultdrill.report.svg import (
    ItemView,
    item_events_dir,
    load_item,
    loss_svg,
    proc_rows,
    timeline_svg,
)

__all__ = ["manual_steps", "render_html"]

#: Keys of a scenario entry rendered by name; any other key is shown generically.
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
    }
)
KNOWN_TOP_KEYS = frozenset(
    {
        "faultdrill_version",
        "task_id",
        "plan_digest",
        "plan",
        "baseline",
        "scenarios",
        "skipped",
        "summary",
    }
)

_CSS = """
:root{--fg:#111827;--mut:#4b5563;--line:#e5e7eb;--pass:#047857;--fail:#b91c1c;--retest:#b45309;
--bg-pass:#d1fae5;--bg-fail:#fee2e2;--bg-retest:#fef3c7}
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI","Noto Sans","Noto Sans CJK SC","PingFang SC",
"Microsoft YaHei",sans-serif;color:var(--fg);margin:0;line-height:1.45;background:#fff}
main{max-width:1180px;margin:0 auto;padding:16px 24px 60px}
header.top{border-bottom:3px solid var(--fg);padding-bottom:8px;margin-bottom:12px}
h1{font-size:1.55em;margin:.2em 0}h2{font-size:1.25em;margin:1.6em 0 .5em;border-bottom:1px solid var(--line)}
h3{font-size:1.1em;margin:0 0 .4em}h4{font-size:1em;margin:1em 0 .3em}
.sub{color:var(--mut);font-size:.9em}
.banner{display:inline-block;padding:4px 12px;border-radius:4px;font-weight:700;margin-top:6px}
.banner.ok{background:var(--bg-pass);color:var(--pass)}.banner.notok{background:var(--bg-fail);color:var(--fail)}
nav.toc{font-size:.9em;margin:8px 0}nav.toc a{margin-right:14px}
table{border-collapse:collapse;width:100%;margin:6px 0 10px;font-size:.92em}
th,td{border:1px solid var(--line);padding:4px 7px;text-align:left;vertical-align:top}
th{background:#f3f4f6;font-weight:600}
table.row th{width:15%;white-space:nowrap}
.v{font-weight:700;padding:1px 7px;border-radius:3px;white-space:nowrap}
.v.pass{background:var(--bg-pass);color:var(--pass)}.v.fail{background:var(--bg-fail);color:var(--fail)}
.v.retest,.v.not-run{background:var(--bg-retest);color:var(--retest)}
article.item{border:1px solid var(--line);border-left:6px solid #9ca3af;border-radius:4px;padding:12px 14px;margin:14px 0}
article.item.pass{border-left-color:var(--pass)}article.item.fail{border-left-color:var(--fail)}
article.item.retest{border-left-color:var(--retest)}
ol.questions{margin:4px 0 8px;padding-left:1.6em}ol.questions li{margin:2px 0}
ol.questions .qlabel{font-weight:600}
figure{margin:8px 0 12px}figcaption{font-size:.85em;color:var(--mut)}
svg{display:block;max-width:100%;height:auto;font-size:11px}
svg .lane-label{font-size:11px;fill:#334155}svg .tick{font-size:10px;fill:#475569}
svg .axis{font-size:11px;fill:#334155}svg .qnum{font-size:10px;fill:#fff;font-weight:700}
svg .in-bar{font-size:9.5px;fill:#1f2937}svg .in-bar.light{fill:#fff}
svg .note{font-size:10.5px;fill:#111827}svg .note.red{fill:#b91c1c}svg .legend{font-size:10.5px;fill:#1f2937}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.88em}
pre{background:#f8fafc;border:1px solid var(--line);padding:6px;overflow:auto;max-height:320px}
details{margin:4px 0}summary{cursor:pointer;color:#1d4ed8}
td.sign{height:2.4em;min-width:12em}
.note{color:var(--mut);font-size:.9em}
footer{margin-top:40px;color:var(--mut);font-size:.8em;border-top:1px solid var(--line);padding-top:6px}
@media print{nav.toc,details>summary{display:none}details{display:block}article.item{break-inside:avoid}}
"""

_SCRIPT = """
(function(){
  document.querySelectorAll('tr[data-scenario]').forEach(function(tr){
    tr.style.cursor='pointer';
    tr.addEventListener('click',function(){
      var el=document.getElementById('item-'+tr.getAttribute('data-scenario'));
      if(el){el.scrollIntoView({behavior:'smooth'});}
    });
  });
  document.body.setAttribute('data-ready','1');
})();
"""


def _e(v: Any) -> str:
    return escape("" if v is None else str(v))


def _vb(t: Translator, verdict: str | None) -> str:
    v = verdict or "retest"
    return f'<span class="v {_e(v)}" data-verdict="{_e(v)}">{_e(t.verdict(v))}</span>'


def _when(t: Translator, q: dict[str, Any] | None) -> str:
    if not q:
        return t("when.none")
    rel = q.get("since_injection_s")
    return t("when.rel", wall=q["wall"], rel=rel) if rel is not None else str(q["wall"])


def _resumed(t: Translator, r: dict[str, Any] | None) -> str:
    if not r:
        return t("resumed.none")
    if r.get("checkpoint") is None:
        return t("resumed.scratch")
    ver = {True: "ver.true", False: "ver.false"}.get(r.get("verified"), "ver.none")  # type: ignore[arg-type]
    return t(
        "resumed.ckpt.plain",
        ckpt=r["checkpoint"],
        step=r["step"],
        pos=r["data_position"],
        ver=t(ver),
    )


def _generic(value: Any, depth: int = 0) -> str:
    """Any JSON value as HTML: dicts as key/value tables, lists of dicts as tables."""
    if depth > 4:
        return f"<pre>{_e(json.dumps(value, indent=1, default=str))}</pre>"
    if isinstance(value, dict):
        if not value:
            return "—"
        rows = "".join(
            f"<tr><th>{_e(k)}</th><td>{_generic(v, depth + 1)}</td></tr>" for k, v in value.items()
        )
        return f'<table class="generic">{rows}</table>'
    if isinstance(value, list):
        if not value:
            return "—"
        if all(isinstance(v, dict) for v in value):
            cols: list[str] = []
            for v in value:
                cols += [k for k in v if k not in cols]
            head = "".join(f"<th>{_e(c)}</th>" for c in cols)
            body = "".join(
                "<tr>"
                + "".join(f"<td>{_generic(v.get(c), depth + 1)}</td>" for c in cols)
                + "</tr>"
                for v in value[:300]
            )
            more = f"<p class='note'>… {len(value) - 300} more</p>" if len(value) > 300 else ""
            return f'<table class="generic"><tr>{head}</tr>{body}</table>{more}'
        if all(not isinstance(v, (dict, list)) for v in value):
            return _e(", ".join(map(str, value)))
        return "<ul>" + "".join(f"<li>{_generic(v, depth + 1)}</li>" for v in value) + "</ul>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if (
        isinstance(value, str)
        and len(value) > 40
        and all(c in "0123456789abcdef:sha" for c in value)
    ):
        return (
            f"<span title='{_e(value)}'>{_e(value[:16])}…</span>"  # a digest: short, full on hover
        )
    return _e(value)


def _findings_table(t: Translator, findings: list[dict[str, Any]]) -> str:
    rows = "".join(
        f"<tr><td>{_vb(t, f.get('verdict'))}</td><td><code>{_e(t.check_name(f.get('check', '')))}"
        f"</code></td><td>{_e(f.get('message'))}</td></tr>"
        for f in findings
    )
    return (
        f"<table class='findings'><tr><th>{t('col.verdict')}</th><th>{t('col.check')}</th>"
        f"<th>{t('col.message')}</th></tr>{rows}</table>"
    )


def _evidence_cell(t: Translator, s: dict[str, Any]) -> str:
    parts = []
    for cat in ("progress", "resources", "results"):
        ev = (s.get("evidence") or {}).get(cat)
        if ev is None:
            continue
        bad = [f for f in ev.get("findings", []) if f.get("verdict") != "pass"]
        detail = (
            "<ul>"
            + "".join(
                f"<li><code>{_e(f.get('check'))}</code>: {_e(f.get('message'))}</li>" for f in bad
            )
            + "</ul>"
            if bad
            else ""
        )
        parts.append(
            f"<div data-evidence='{cat}'>{_e(t.evidence(cat))}: {_vb(t, ev.get('verdict'))}{detail}</div>"
        )
    exp = s.get("expectation")
    if exp:
        parts.append(
            f"<div data-evidence='expectation'>{_e(t.evidence('expectation'))}: "
            f"{_vb(t, exp.get('verdict'))}</div>"
        )
    return "".join(parts)


def _fault_text(t: Translator, s: dict[str, Any]) -> str:
    fault = s.get("fault") or {}
    return t(
        "inj.text.plain",
        kind=fault.get("kind"),
        target=fault.get("target"),
        trigger=s.get("trigger"),
    )


def _expected_text(t: Translator, exp: dict[str, Any] | None) -> str:
    if not exp:
        return "—"
    job = exp.get("job")
    resume = exp.get("resume")
    text = t(
        "exp.text",
        job=t.opt(f"exp.job.{job}", job),
        recovery=t.cls(exp.get("recovery")),
        resume=t.opt(f"exp.resume.{resume}", resume),
    )
    return text + (f"; {exp['state']}" if exp.get("state") else "")


def _actions_text(t: Translator, s: dict[str, Any]) -> str:
    acts = s.get("operator_actions") or []
    return "; ".join(
        t("action.by", action=a.get("action"), operator=a.get("operator")) for a in acts
    ) or t("action.none")


def _times_line(t: Translator, s: dict[str, Any]) -> str:
    tm = s.get("times") or {}
    rc = tm.get("recomputed_steps")
    return t(
        "times.line",
        detect=t.seconds(tm.get("detect_s")),
        ready=t.seconds(tm.get("ready_s")),
        recover=t.seconds(tm.get("recover_s")),
        recomputed=t("na") if rc is None else rc,
    )


def _conditions_text(t: Translator, c: dict[str, Any] | None) -> str:
    if not c:
        return "—"
    env = c.get("environment") or {}
    return t(
        "cond.line",
        platform=c.get("platform"),
        isolation=c.get("isolation"),
        nodes=c.get("nodes"),
        ppn=c.get("procs_per_node"),
        ws=c.get("world_sizes"),
        every=c.get("checkpoint_every_steps"),
        restarts=c.get("max_restarts"),
        timeouts=", ".join(f"{k}={v}" for k, v in (c.get("timeouts") or {}).items()),
        hz=c.get("sample_hz"),
        host=env.get("host"),
        cpus=env.get("cpus"),
        kernel=env.get("kernel"),
        python=env.get("python"),
        torch=env.get("torch"),
    )


def _resources_block(t: Translator, s: dict[str, Any], view: ItemView | None) -> str:
    ev = (s.get("evidence") or {}).get("resources") or {}
    findings = ev.get("findings", [])
    verdict = ev.get("verdict")
    if verdict == "pass":
        head = f"<p data-stale='none'>{t('html.stale.none')}</p>"
    else:
        key = "html.stale.found" if verdict == "fail" else "html.stale.unknown"
        bad = "".join(
            f"<li><code>{_e(f.get('check'))}</code>: {_e(f.get('message'))}</li>"
            for f in findings
            if f.get("verdict") != "pass"
        )
        head = f"<p data-stale='{_e(verdict)}'>{t(key)}</p><ul>{bad}</ul>"
    procs = ""
    if view is not None:
        rows = proc_rows(view)
        if rows:
            procs = (
                f"<details><summary>{t('html.procs')} ({len(rows)})</summary>"
                + _generic(rows)
                + "</details>"
            )
    return f"<h4>{t('html.resources')}</h4>{head}{procs}"


def _pictures(
    t: Translator, s: dict[str, Any], view: ItemView, base_view: ItemView | None
) -> list[str]:
    """The timeline and the loss plot. The pictures illustrate evidence that report.json
    already states, so a drawing that fails (events of a kind this version does not know)
    is said in the page instead of costing the whole deliverable."""
    out = []
    try:
        out.append(
            f"<figure class='timeline-fig'>{timeline_svg(view, s, t, item_id=s['id'])}"
            f"<figcaption>{t('html.timeline')}: {t('html.timeline.note')}</figcaption></figure>"
        )
    except Exception as exc:  # see docstring: reported in the page, never silent
        out.append(
            f"<p class='note draw-error'>{t('html.draw.error', what=t('html.timeline'), error=f'{type(exc).__name__}: {exc}')}</p>"
        )
    try:
        loss = loss_svg(view, base_view, s, t)
    except Exception as exc:  # as above
        out.append(
            f"<p class='note draw-error'>{t('html.draw.error', what=t('html.loss'), error=f'{type(exc).__name__}: {exc}')}</p>"
        )
        return out
    if loss is None:
        out.append(f"<p class='note'>{t('html.loss.missing')}</p>")
    else:
        out.append(
            f"<figure class='loss-fig'>{loss}<figcaption>{t('html.loss')}: "
            f"{t('html.loss.note')}</figcaption></figure>"
        )
    return out


def _caught_attr(caught: bool | None) -> str:
    return "unproven" if caught is None else str(bool(caught)).lower()


def _caught_text(t: Translator, caught: bool | None) -> str:
    if caught is None:
        return t("ctl.unproven")
    return t("yes") if caught else t("no")


def _item_html(
    t: Translator, s: dict[str, Any], run_dir: Path | None, base_view: ItemView | None
) -> str:
    sid = s["id"]
    verdict = s.get("verdict", "retest")
    title = f" — {_e(s['title'])}" if s.get("title") else ""
    out = [
        f'<article class="item {_e(verdict)}" id="item-{_e(sid)}" data-item="{_e(sid)}" '
        f'data-verdict="{_e(verdict)}">',
        f"<h3>{_e(sid)}{title}</h3>",
    ]
    if s.get("control"):
        caught = t.caught(s.get("caught"))
        out.append(
            "<p class='control-line'>"
            + _e(
                t(
                    "ctl.line.plain",
                    caught=caught,
                    check=s.get("expected_check"),
                    mutation=json.dumps(s.get("workload_mutation"), ensure_ascii=False),
                    verdict=t.verdict(verdict),
                )
            )
            + "</p>"
        )
    why_not = s.get("aborted") or s.get("not_proven_why")
    if why_not:
        out.append(f"<p class='note not-as-planned'>{_e(t('not_as_planned', why=why_not))}</p>")
    pre = [t("pre.baseline"), *(s.get("preconditions") or [])]
    conclusion = t(
        "conclusion.cls",
        cls=t.cls(s.get("recovery_class")),
        why=t.cls_why(s.get("recovery_class"), s.get("recovery_class_why")),
    )
    expected = (
        t("exp.control", check=s.get("expected_check"))
        if s.get("control")
        else _expected_text(t, s.get("expected"))
    )
    out.append(
        '<table class="row">'
        f"<tr><th>{t('row.preconditions')}</th><td>{_e('; '.join(pre))}</td></tr>"
        f"<tr><th>{t('row.injection')}</th><td>{_e(_fault_text(t, s))}</td></tr>"
        f"<tr><th>{t('row.expected')}</th><td>{_e(expected)}</td></tr>"
        f"<tr><th>{t('row.evidence')}</th><td>{_evidence_cell(t, s)}</td></tr>"
        f"<tr><th>{t('row.recovery')}</th><td>{_e(_actions_text(t, s))}</td></tr>"
        f"<tr><th>{t('row.outcome')}</th><td>{_e(s.get('outcome'))}</td></tr>"
        f"<tr><th>{t('row.conclusion')}</th><td data-conclusion>{_vb(t, verdict)} "
        f"{_e(conclusion)}</td></tr></table>"
    )
    q = s.get("questions") or {}
    lost_by = q.get("worker_lost_by")
    note2 = q.get("old_replica_note")
    out.append(
        f"<h4>{t('q.title')}</h4><ol class='questions'>"
        f"<li data-q='1'><span class='qlabel'>{t('q.1')}</span>: {_e(_when(t, q.get('worker_lost_at')))}"
        + (f" — {_e(t('q.by', by=lost_by))}" if lost_by else "")
        + "</li>"
        f"<li data-q='2'><span class='qlabel'>{t('q.2')}</span>: "
        f"{_e(_when(t, q.get('old_replica_stopped_at')))}"
        + (f" — {_e(note2)}" if note2 else "")
        + "</li>"
        f"<li data-q='3'><span class='qlabel'>{t('q.3')}</span>: "
        f"{_e(_when(t, q.get('new_replicas_ready_at')))}</li>"
        f"<li data-q='4'><span class='qlabel'>{t('q.4')}</span>: "
        f"{_e(_resumed(t, q.get('resumed_from')))}; "
        f"{_e(t('q.first_step', when=_when(t, q.get('first_step_after_at'))))}</li></ol>"
        + (f"<p class='note q-note'>{_e(t('q.note', note=q['note']))}</p>" if q.get("note") else "")
        + f"<p>{_e(_times_line(t, s))}</p>"
    )
    view = None
    if run_dir is not None:
        view = load_item(item_events_dir(run_dir, sid, bool(s.get("control"))))
    if view is None:
        out.append(f"<p class='note missing-timeline'>{t('html.timeline.missing')}</p>")
    else:
        out += _pictures(t, s, view, base_view)
    out.append(_resources_block(t, s, view))
    out.append(f"<details><summary>{t('evidence.title')}</summary>")
    for cat in ("progress", "resources", "results"):
        ev = (s.get("evidence") or {}).get(cat)
        if ev:
            out.append(f"<h4>{_e(t.evidence(cat))}: {_vb(t, ev.get('verdict'))}</h4>")
            out.append(_findings_table(t, ev.get("findings", [])))
    exp = s.get("expectation")
    if exp:
        out.append(f"<h4>{_e(t.evidence('expectation'))}: {_vb(t, exp.get('verdict'))}</h4>")
        out.append(_findings_table(t, exp.get("findings", [])))
    out.append("</details>")
    out.append(
        f"<p class='note conditions'><b>{t('cond.title')}</b>: "
        f"{_e(_conditions_text(t, s.get('conditions')))} {t('cond.note')}</p>"
    )
    extra = {k: v for k, v in s.items() if k not in KNOWN_ITEM_KEYS}
    if extra:
        out.append(f"<h4>{t('html.more')}</h4>")
        for k, v in extra.items():
            big = len(json.dumps(v, default=str)) > 1500
            out.append(
                f"<details class='extra' data-extra='{_e(k)}'{'' if big else ' open'}>"
                f"<summary>{_e(k)}</summary>{_generic(v)}</details>"
            )
    out.append("</article>")
    return "\n".join(out)


def manual_steps(report: dict[str, Any], run_dir: Path | None) -> list[dict[str, Any]]:
    """Every manual step of the run: operator actions and required confirmations.

    Each: scenario, step (action, text), who, permission key, seconds after the injection
    (from the recorded events when available).
    """
    plan = report["plan"]
    resp = plan.get("responsibility", {})
    out: list[dict[str, Any]] = []
    for s in report.get("scenarios") or []:
        if s.get("control"):
            continue
        times: list[float | None] = []
        if run_dir is not None:
            view = load_item(item_events_dir(run_dir, s["id"], False))
            if view is not None:
                times = [
                    round(view.rel(e.mono), 2) for e in view.tl.of("harness", "operator_action")
                ]
        for i, a in enumerate(s.get("operator_actions") or []):
            out.append(
                {
                    "scenario": s["id"],
                    "action": str(a.get("action")),
                    "detail": a.get("runbook") or "",
                    "who": a.get("operator") or resp.get("recovery_operator"),
                    "permission": "perm.operator",
                    "at_s": times[i] if i < len(times) else None,
                    "recover_s": (s.get("times") or {}).get("recover_s"),
                }
            )
        if s.get("recovery_class") == "manual-confirmation":
            out.append(
                {
                    "scenario": s["id"],
                    "action": "confirm",
                    "detail": s.get("recovery_class_why") or "",
                    "who": resp.get("recovery_operator"),
                    "permission": "perm.operator",
                    "at_s": None,
                    "recover_s": None,
                }
            )
    return out


def drill_permissions(report: dict[str, Any], t: Translator) -> str:
    """What the drill itself needed on the hosts, from the recorded layout and fault kinds."""
    env = recorded_environment(report)
    if not env.get("root"):
        return t("perm.user")
    kinds = {str((s.get("fault") or {}).get("kind")) for s in report.get("scenarios") or []}
    extra = []
    if (report["plan"].get("resources") or {}).get("isolation") == "netns":
        extra.append("network namespaces")
    if any(k.startswith(("link", "partition")) for k in kinds):
        extra.append("iptables/tc")
    if any(k.startswith("node") for k in kinds):
        extra.append("cgroup freezer")
    if any(k.startswith(("storage", "corrupt")) for k in kinds):
        extra.append("mounts")
    return t("perm.root", extra="".join(", " + e for e in extra))


def _item_seconds(run_dir: Path | None) -> float | None:
    """Wall seconds the recorded items took, from their harness start/end events."""
    if run_dir is None:
        return None
    from faultdrill.events import read_jsonl

    total = 0.0
    for path in run_dir.glob("**/events/harness.jsonl"):
        recs = list(read_jsonl(path))
        start = next((r for r in recs if r.get("kind") == "item_start"), None)
        end = next((r for r in reversed(recs) if r.get("kind") == "item_end"), None)
        if start and end:
            total += float(end["ts"]) - float(start["ts"])
    return round(total, 1) if total else None


def _manual_html(t: Translator, report: dict[str, Any], run_dir: Path | None) -> str:
    steps = manual_steps(report, run_dir)
    perm = drill_permissions(report, t)
    out = [f"<p class='note'>{t('html.manual.intro')}</p>"]
    if not steps:
        out.append(f"<p data-manual='none'>{t('html.manual.none')}</p>")
    else:
        rows = []
        for st in steps:
            if st["action"] == "resubmit":
                what = t("manual.resubmit", runbook=st["detail"] or "-")
            elif st["action"] == "confirm":
                what = t("manual.confirm", why=st["detail"])
            else:
                what = f"{st['action']} {st['detail']}".strip()
            at = t.seconds(st["at_s"]) if st["at_s"] is not None else "—"
            rows.append(
                f"<tr data-manual='{_e(st['scenario'])}'><td>{_e(st['scenario'])}</td><td>{_e(what)}</td>"
                f"<td>{_e(st['who'])}</td><td>{_e(t(st['permission']))}</td><td>{_e(at)}</td></tr>"
            )
        out.append(
            f"<table><tr><th>{t('col.scenario')}</th><th>{t('col.step')}</th><th>{t('col.who')}</th>"
            f"<th>{t('col.permission')}</th><th>{t('col.time')}</th></tr>{''.join(rows)}</table>"
        )
    resp = report["plan"].get("responsibility", {})
    took = _item_seconds(run_dir)
    out.append(
        f"<table><tr><th>{t('col.step')}</th><th>{t('col.who')}</th><th>{t('col.permission')}</th>"
        f"<th>{t('col.time')}</th></tr>"
        f"<tr data-manual='drill'><td>{t('manual.drill')}</td><td>{_e(resp.get('injector'))}, "
        f"{_e(resp.get('observer'))}</td><td>{_e(perm)}</td>"
        f"<td>{_e(t.seconds(took) if took is not None else '—')}</td></tr></table>"
    )
    return "\n".join(out)


def _dossiers_html(t: Translator, report: dict[str, Any]) -> str:
    dossier = (report.get("baseline") or {}).get("dossier") or {}
    plan = report["plan"]
    if not dossier:  # an old or partial run: fall back to the plan
        dossier = {
            "task": plan.get("task"),
            "data": plan.get("data"),
            "resources": plan.get("resources"),
            "recovery": {"checkpoint": plan.get("checkpoint")},
            "responsibility": plan.get("responsibility"),
        }
    out = []
    for key in (
        "task",
        "data",
        "resources",
        "recovery",
        "responsibility",
        "observation",
        "environment",
    ):
        if key in dossier:
            out.append(
                f"<h4 data-dossier='{key}'>{t('dossier.' + key)}</h4>{_generic(dossier[key])}"
            )
    rest = {
        k: v
        for k, v in dossier.items()
        if k
        not in (
            "task",
            "data",
            "resources",
            "recovery",
            "responsibility",
            "observation",
            "environment",
        )
    }
    for k, v in rest.items():
        out.append(f"<h4 data-dossier='{_e(k)}'>{_e(k)}</h4>{_generic(v)}")
    return "\n".join(out)


def _signoff_html(t: Translator, report: dict[str, Any]) -> str:
    resp = dict(report["plan"].get("responsibility", {}))
    dossier_resp = ((report.get("baseline") or {}).get("dossier") or {}).get("responsibility") or {}
    rows = []
    for role in ("injector", "observer", "recovery_operator", "signer"):
        rows.append((t(f"role.{role}"), resp.get(role)))
    if dossier_resp.get("replay_operator"):
        rows.append((t("role.replay_operator"), dossier_resp["replay_operator"]))
    body = "".join(
        f"<tr data-role='{_e(r)}'><td>{_e(r)}</td><td>{_e(n)}</td><td class='sign'></td><td class='sign'></td></tr>"
        for r, n in rows
    )
    return (
        f"<table class='signoff'><tr><th>{t('col.role')}</th><th>{t('col.name')}</th>"
        f"<th>{t('col.signature')}</th><th>{t('col.date')}</th></tr>{body}</table>"
    )


def _conditions_html(t: Translator, report: dict[str, Any]) -> str:
    rows = []
    for s in report.get("scenarios") or []:
        tm = s.get("times") or {}
        c = s.get("conditions") or {}
        extra = {
            k: v
            for k, v in c.items()
            if k
            not in {
                "platform",
                "isolation",
                "nodes",
                "procs_per_node",
                "world_sizes",
                "max_restarts",
                "checkpoint_every_steps",
                "timeouts",
                "sample_hz",
                "environment",
                "note",
            }
        }
        rows.append(
            f"<tr data-conditions='{_e(s['id'])}'><td>{_e(s['id'])}</td>"
            f"<td>{_e(t.seconds(tm.get('detect_s')))}</td><td>{_e(t.seconds(tm.get('ready_s')))}</td>"
            f"<td>{_e(t.seconds(tm.get('recover_s')))}</td>"
            f"<td>{_e(tm.get('recomputed_steps') if tm.get('recomputed_steps') is not None else t('na'))}</td>"
            f"<td>{_e(_conditions_text(t, c))}{_generic(extra) if extra else ''}</td></tr>"
        )
    return (
        f"<p><b>{t('cond.note')}</b></p><table><tr><th>{t('col.scenario')}</th>"
        f"<th>{t('col.detect')}</th><th>{t('col.ready')}</th><th>{t('col.recover')}</th>"
        f"<th>{t('col.recomputed')}</th><th>{t('col.conditions')}</th></tr>{''.join(rows)}</table>"
    )


def _summary_html(t: Translator, report: dict[str, Any]) -> str:
    summ = report["summary"]
    base = report["baseline"]
    digest = (base.get("final_model_digest") or t("na"))[:16]
    out = [
        "<ul class='summary'>",
        f"<li>{_e(t('summary.scenarios', n=summ['scenarios'], p=summ['passed'], f=summ['failed'], r=summ['retest']))}</li>",
        f"<li>{_e(t('summary.controls', c=summ['controls_caught'], n=summ['controls']))}</li>",
        f"<li>{_e(t('summary.baseline.plain', verdict=t.verdict(base.get('verdict')), steps=base.get('steps'), digest=digest, ws=base.get('world_size')))}</li>",
        f"<li>{_e(t('summary.overall', ok=t('ok') if summ.get('ok') else t('not-ok')))}</li>",
        "</ul>",
    ]
    head = "".join(
        f"<th>{t(k)}</th>"
        for k in (
            "col.scenario",
            "col.round",
            "col.fault",
            "col.verdict",
            "col.class",
            "col.resume",
            "col.detect",
            "col.ready",
            "col.recover",
            "col.recomputed",
        )
    )
    rows = []
    for s in report.get("scenarios") or []:
        if s.get("control"):
            continue
        tm = s.get("times") or {}
        fault = s.get("fault") or {}
        rs = (s.get("questions") or {}).get("resumed_from")
        resume = (
            "—"
            if not rs
            else f"{rs.get('checkpoint') or '0'} / {rs.get('step')} / {rs.get('data_position')}"
        )
        rc = tm.get("recomputed_steps")
        rows.append(
            f"<tr data-scenario='{_e(s['id'])}'><td><a href='#item-{_e(s['id'])}'>{_e(s['id'])}</a></td>"
            f"<td>{_e(s.get('round'))}</td><td>{_e(fault.get('kind'))} ({_e(fault.get('target'))})</td>"
            f"<td>{_vb(t, s.get('verdict'))}</td><td>{_e(t.cls(s.get('recovery_class')))}</td>"
            f"<td>{_e(resume)}</td><td>{_e(t.seconds(tm.get('detect_s')))}</td>"
            f"<td>{_e(t.seconds(tm.get('ready_s')))}</td><td>{_e(t.seconds(tm.get('recover_s')))}</td>"
            f"<td>{_e(t('na') if rc is None else rc)}</td></tr>"
        )
    for sk in report.get("skipped") or []:
        rows.append(
            f"<tr data-skipped='{_e(sk.get('id'))}'><td>{_e(sk.get('id'))}</td><td></td><td></td>"
            f"<td>{_vb(t, 'not-run')}</td><td colspan='6'>{_e(sk.get('reason'))}</td></tr>"
        )
    out.append(f"<table class='verdicts'><tr>{head}</tr>{''.join(rows)}</table>")
    ctls = [s for s in report.get("scenarios") or [] if s.get("control")]
    if ctls:
        crow = "".join(
            f"<tr data-scenario='{_e(s['id'])}'><td><a href='#item-{_e(s['id'])}'>{_e(s['id'])}</a></td>"
            f"<td><code>{_e(json.dumps(s.get('workload_mutation'), ensure_ascii=False))}</code></td>"
            f"<td><code>{_e(s.get('expected_check'))}</code></td>"
            f"<td data-caught='{_caught_attr(s.get('caught'))}'>"
            f"{_e(_caught_text(t, s.get('caught')))}</td><td>{_vb(t, s.get('verdict'))}</td></tr>"
            for s in ctls
        )
        out.append(
            f"<table class='controls'><tr><th>{t('col.control')}</th><th>{t('col.bug')}</th>"
            f"<th>{t('col.expected_check')}</th><th>{t('col.caught')}</th><th>{t('col.verdict')}</th></tr>"
            f"{crow}</table>"
        )
    return "\n".join(out)


def _scope_html(t: Translator, report: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr data-scope='{r.dimension}'><td>{t('scope.dim.' + r.dimension)}</td><td>{_e(r.verified)}</td>"
        f"<td><ul class='to-verify'>{''.join(f'<li>{_e(x)}</li>' for x in r.to_verify)}</ul></td></tr>"
        for r in derive_scope(report, t)
    )
    return (
        f"<table class='scope'><tr><th>{t('col.dimension')}</th><th>{t('col.verified')}</th>"
        f"<th>{t('col.to_verify')}</th></tr>{rows}</table>"
    )


def _replay_html(t: Translator, report: dict[str, Any], run_dir: Path | None) -> str:
    dossier = (report.get("baseline") or {}).get("dossier") or {}
    rp = dossier.get("replay")
    if not rp:
        return ""
    original = rp.get("original_responsibility") or {}
    out = [
        f"<h2 id='replay'>{t('html.replay')}</h2>",
        "<p>"
        + _e(
            t(
                "replay.line",
                operator=rp.get("operator"),
                bundle=rp.get("bundle"),
                original=", ".join(f"{k}={v}" for k, v in original.items()),
            )
        )
        + "</p>",
    ]
    comp = None
    if run_dir is not None and (run_dir / "replay.json").exists():
        try:
            comp = json.loads((run_dir / "replay.json").read_text())
        except ValueError:
            comp = None
    if comp:
        ok = comp.get("matches")
        out.append(
            f"<p data-replay-match='{str(bool(ok)).lower()}'><b>"
            f"{t('replay.match') if ok else t('replay.mismatch')}</b></p>"
        )
        out.append(_generic(comp.get("items", [])))
    return "\n".join(out)


def render_html(report: dict[str, Any], run_dir: Path | None = None, lang: str = "en") -> str:
    """The HTML report of ``report`` (the ``report.json`` data); ``run_dir`` supplies the
    event files for the pictures (without it, the pictures are left out and said so)."""
    t = translator(lang)
    base_view = load_item(item_events_dir(run_dir, "baseline", None)) if run_dir else None
    real = [s for s in report.get("scenarios") or [] if not s.get("control")]
    ctls = [s for s in report.get("scenarios") or [] if s.get("control")]
    ok = bool(report["summary"].get("ok"))
    sections = [
        ("summary", t("summary.title")),
        ("scenarios", t("scenarios.title")),
        *([("controls", t("controls.title"))] if ctls else []),
        ("manual", t("html.manual")),
        ("scope", t("scope.title")),
        ("dossiers", t("html.dossiers")),
        ("conditions", t("html.conditions")),
        ("signoff", t("signoff.title")),
    ]
    toc = "".join(f"<a href='#{k}'>{_e(v)}</a>" for k, v in sections)
    body = [
        "<header class='top'>",
        f"<h1>{_e(t('title', task=report['task_id']))}</h1>",
        f"<div class='sub'>{_e(t('subtitle', version=report['faultdrill_version'], digest=report['plan_digest'][:19]))}"
        f" · {_e(t('lang.name'))}</div>",
        f"<div class='banner {'ok' if ok else 'notok'}' data-overall='{'ok' if ok else 'not-ok'}'>"
        f"{_e(t('ok') if ok else t('not-ok'))}</div>",
        "</header>",
        f"<nav class='toc'><b>{t('html.contents')}:</b> {toc}</nav>",
        f"<section id='summary'><h2>{t('summary.title')}</h2>{_summary_html(t, report)}</section>",
        f"<section id='scenarios'><h2>{t('scenarios.title')}</h2>",
        *[_item_html(t, s, run_dir, base_view) for s in real],
        "</section>",
    ]
    if ctls:
        body += [
            f"<section id='controls'><h2>{t('controls.title')}</h2><p class='note'>{t('controls.intro')}</p>",
            *[_item_html(t, s, run_dir, base_view) for s in ctls],
            "</section>",
        ]
    body += [
        f"<section id='manual'><h2>{t('html.manual')}</h2>{_manual_html(t, report, run_dir)}</section>",
        f"<section id='scope'><h2>{t('scope.title')}</h2>{_scope_html(t, report)}</section>",
        f"<section id='dossiers'><h2>{t('html.dossiers')}</h2>{_dossiers_html(t, report)}</section>",
        f"<section id='conditions'><h2>{t('html.conditions')}</h2>{_conditions_html(t, report)}</section>",
        _replay_html(t, report, run_dir),
        f"<section id='signoff'><h2>{t('signoff.title')}</h2>{_signoff_html(t, report)}</section>",
    ]
    extra = {k: v for k, v in report.items() if k not in KNOWN_TOP_KEYS}
    if extra:
        body.append(
            f"<section id='extra'><h2>{t('html.more')}</h2>"
            + "".join(
                f"<h4 data-extra='{_e(k)}'>{_e(k)}</h4>{_generic(v)}" for k, v in extra.items()
            )
            + "</section>"
        )
    body.append(f"<footer>{_e(t('html.footer', version=report['faultdrill_version']))}</footer>")
    html_lang = "zh-CN" if lang == "zh" else "en"
    csp = (
        "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )
    return (
        f"<!DOCTYPE html>\n<html lang='{html_lang}'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{csp}\">"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{_e(t('title', task=report['task_id']))}</title><style>{_CSS}</style></head>"
        f"<body><main>{''.join(body)}</main><script>{_SCRIPT}</script></body></html>\n"
    )
