"""report.md: the human report, rendered from the report.json data (never from live state),
so that any recorded run can be re-rendered. Every fixed text goes through
:mod:`faultdrill.report.i18n` (``lang`` ``en`` or ``zh``); findings' messages are data and
stay as recorded."""

from __future__ import annotations

from typing import Any

from faultdrill.judge.network import network_lines
from faultdrill.report.i18n import Translator, translator
from faultdrill.report.round3 import item_sections
from faultdrill.report.scope import derive_scope

__all__ = ["render_markdown"]

_EN = translator("en")


def _mark(v: str, t: Translator = _EN) -> str:
    return t.verdict(v)


def _fmt_s(v: Any, t: Translator = _EN) -> str:
    return t.seconds(v)


def _when(q: dict[str, Any] | None, t: Translator = _EN) -> str:
    if not q:
        return t("when.none")
    rel = q.get("since_injection_s")
    return t("when.rel", wall=q["wall"], rel=rel) if rel is not None else q["wall"]


def _resumed(r: dict[str, Any] | None, t: Translator = _EN) -> str:
    if not r:
        return t("resumed.none")
    if r.get("checkpoint") is None:
        return t("resumed.scratch")
    ver = {True: "ver.true", False: "ver.false"}.get(r.get("verified"), "ver.none")  # type: ignore[arg-type]
    return t(
        "resumed.ckpt", ckpt=r["checkpoint"], step=r["step"], pos=r["data_position"], ver=t(ver)
    )


def _caught_cell(caught: bool | None, t: Translator = _EN) -> str:
    if caught is None:
        return f"**{t('ctl.unproven')}**"
    return t("yes") if caught else f"**{t('no')}**"


def _findings(ev: dict[str, Any], t: Translator = _EN) -> list[str]:
    return [f"  - {_mark(f['verdict'], t)} `{f['check']}`: {f['message']}" for f in ev["findings"]]


def _item(s: dict[str, Any], lines: list[str], t: Translator = _EN) -> None:
    title = f" — {s['title']}" if s.get("title") else ""
    lines.append(f"### {s['id']}{title}")
    lines.append("")
    verdict = _mark(s["verdict"], t)
    if s.get("control"):
        caught = t.caught(s.get("caught"))
        lines.append(
            "**"
            + t(
                "ctl.line",
                caught=caught,
                check=s["expected_check"],
                mutation=s.get("workload_mutation"),
                verdict=verdict,
            )
            + "**"
        )
    else:
        lines.append(
            t(
                "verdict.line",
                verdict=f"**{verdict}**",
                cls=f"**{t.cls(s['recovery_class'])}**",
                why=t.cls_why(s["recovery_class"], s["recovery_class_why"]),
            )
        )
    lines.append("")
    why_not = s.get("aborted") or s.get("not_proven_why")
    if why_not:
        lines += [t("not_as_planned", why=why_not), ""]
    fault = s["fault"] or {}
    pre = s.get("preconditions") or []
    lines += [
        "| | |",
        "|---|---|",
        f"| {t('row.preconditions')} | {t('pre.baseline')}; {'; '.join(pre) or t('pre.none')} |",
        f"| {t('row.injection')} | "
        + t(
            "inj.text", kind=fault.get("kind"), target=fault.get("target"), trigger=s.get("trigger")
        )
        + " |",
    ]
    exp = s.get("expected")
    if exp:
        lines.append(
            f"| {t('row.expected')} | "
            + t(
                "exp.text",
                job=t.opt(f"exp.job.{exp['job']}", exp["job"]),
                recovery=t.cls(exp["recovery"]),
                resume=t.opt(f"exp.resume.{exp['resume']}", exp["resume"]),
            )
            + f"{'; ' + exp['state'] if exp.get('state') else ''} |"
        )
    actions = s.get("operator_actions") or []
    action = "; ".join(
        t("action.by", action=a.get("action"), operator=a.get("operator")) for a in actions
    ) or t("action.none")
    lines.append(f"| {t('row.recovery')} | {action} |")
    lines.append(f"| {t('row.outcome')} | {s.get('outcome')} |")
    lines.append(
        f"| {t('row.conclusion')} | **{verdict}**; "
        + t(
            "conclusion.cls",
            cls=t.cls(s["recovery_class"]),
            why=t.cls_why(s["recovery_class"], s["recovery_class_why"]),
        )
        + " |"
    )
    lines.append("")
    q, tm = s["questions"], s["times"]
    rc = tm["recomputed_steps"]
    by = q.get("worker_lost_by")
    lines += [
        f"**{t('q.title')}**",
        "",
        f"1. {t('q.1')}: {_when(q['worker_lost_at'], t)}"
        + (f" — {t('q.by', by=by)}" if by else ""),
        f"2. {t('q.2')}: {_when(q['old_replica_stopped_at'], t)}"
        + (f" — {q['old_replica_note']}" if q.get("old_replica_note") else ""),
        f"3. {t('q.3')}: {_when(q['new_replicas_ready_at'], t)}",
        f"4. {t('q.4')}: {_resumed(q['resumed_from'], t)}; "
        + t("q.first_step", when=_when(q.get("first_step_after_at"), t)),
        "",
        *([t("q.note", note=q["note"]), ""] if q.get("note") else []),
        t(
            "times.line",
            detect=_fmt_s(tm["detect_s"], t),
            ready=_fmt_s(tm.get("ready_s"), t),
            recover=_fmt_s(tm["recover_s"], t),
            recomputed=rc if rc is not None else t("na"),
        ),
        "",
        f"**{t('evidence.title')}**",
        "",
    ]
    for cat in ("progress", "resources", "results"):
        ev = s["evidence"][cat]
        lines.append(f"- {t.evidence(cat)}: **{_mark(ev['verdict'], t)}**")
        lines += _findings(ev, t)
    lines.append(f"- {t.evidence('expectation')}: **{_mark(s['expectation']['verdict'], t)}**")
    lines += _findings(s["expectation"], t)
    lines.append("")
    lines += item_sections(s)
    lines += network_lines(s)
    c = s["conditions"]
    env = c.get("environment") or {}
    lines.append(
        f"_{t('cond.title')}_: "
        + t(
            "cond.line",
            platform=c["platform"],
            isolation=c["isolation"],
            nodes=c["nodes"],
            ppn=c["procs_per_node"],
            ws=c["world_sizes"],
            every=c["checkpoint_every_steps"],
            restarts=c["max_restarts"],
            timeouts=c["timeouts"],
            hz=c["sample_hz"],
            host=env.get("host"),
            cpus=env.get("cpus"),
            kernel=env.get("kernel"),
            python=env.get("python"),
            torch=env.get("torch"),
        )
        + f" {t('cond.note')}"
    )
    lines.append("")


def render_markdown(report: dict[str, Any], lang: str = "en") -> str:
    t = translator(lang)
    plan = report["plan"]
    summ = report["summary"]
    base = report["baseline"]
    resp = plan["responsibility"]
    lines = [
        f"# {t('title', task=report['task_id'])}",
        "",
        t("subtitle", version=report["faultdrill_version"], digest=report["plan_digest"][:19]),
        "",
        f"## {t('summary.title')}",
        "",
        "- "
        + t(
            "summary.scenarios",
            n=summ["scenarios"],
            p=summ["passed"],
            f=summ["failed"],
            r=summ["retest"],
        ),
        "- " + t("summary.controls", c=summ["controls_caught"], n=summ["controls"]),
        "- "
        + t(
            "summary.baseline",
            verdict=_mark(base["verdict"], t),
            steps=base["steps"],
            digest=(base["final_model_digest"] or t("na"))[:16],
            ws=base["world_size"],
        ),
        "- " + t("summary.overall", ok=f"**{t('ok') if summ['ok'] else t('not-ok')}**"),
        "",
        "| "
        + " | ".join(
            t(k)
            for k in (
                "col.scenario",
                "col.round",
                "col.fault",
                "col.verdict",
                "col.class",
                "col.detect",
                "col.recover",
                "col.recomputed",
            )
        )
        + " |",
        "|---|---|---|---|---|---|---|---|",
    ]
    real = [s for s in report["scenarios"] if not s["control"]]
    ctls = [s for s in report["scenarios"] if s["control"]]
    for s in real:
        tm = s["times"]
        lines.append(
            f"| {s['id']} | {s['round']} | {s['fault']['kind']} ({s['fault']['target']}) | "
            f"{_mark(s['verdict'], t)} | {t.cls(s['recovery_class'])} | "
            f"{_fmt_s(tm['detect_s'], t)} | {_fmt_s(tm['recover_s'], t)} | "
            f"{tm['recomputed_steps']} |"
        )
    for sk in report.get("skipped") or []:
        lines.append(f"| {sk['id']} | | | {t('verdict.not-run')} | | | | {sk['reason']} |")
    if ctls:
        lines += [
            "",
            "| "
            + " | ".join(
                t(k)
                for k in (
                    "col.control",
                    "col.bug",
                    "col.expected_check",
                    "col.caught",
                    "col.verdict",
                )
            )
            + " |",
            "|---|---|---|---|---|",
        ]
        for s in ctls:
            lines.append(
                f"| {s['id']} | `{s.get('workload_mutation')}` | `{s['expected_check']}` "
                f"| {_caught_cell(s.get('caught'), t)} | "
                f"{_mark(s['verdict'], t)} |"
            )
    lines += ["", f"## {t('baseline.title')}", ""]
    dossier = base.get("dossier") or {}
    task = dossier.get("task", {})
    lines += [
        "- "
        + t(
            "baseline.task",
            id=task.get("id"),
            cfg=task.get("config_version"),
            code=task.get("code_id"),
        ),
        "- "
        + t(
            "baseline.data",
            snap=plan["data"]["snapshot"],
            digest=plan["data"].get("digest") or "",
            pos=plan["data"]["read_position"],
        ),
        "- " + t("baseline.resources", topology=dossier.get("resources", {}).get("topology", "?")),
        "- "
        + t(
            "baseline.ckpt",
            every=plan["checkpoint"]["every_steps"],
            keep=plan["checkpoint"]["keep"],
        ),
        "- " + t("baseline.seeds", seeds=plan["seeds"]),
        "- " + t("baseline.window", window=dossier.get("observation", {}).get("baseline_window")),
        "- "
        + t(
            "baseline.resp",
            injector=resp["injector"],
            observer=resp["observer"],
            operator=resp["recovery_operator"],
            signer=resp["signer"],
        ),
    ]
    if base.get("evidence"):
        for cat in ("progress", "resources", "results"):
            lines.append(
                "- "
                + t(
                    "baseline.selfcheck",
                    cat=t.evidence(cat),
                    verdict=_mark(base["evidence"][cat]["verdict"], t),
                )
            )
    lines += ["", f"## {t('scenarios.title')}", ""]
    for s in real:
        _item(s, lines, t)
    if ctls:
        lines += [
            f"## {t('controls.title')}",
            "",
            t("controls.intro"),
            "",
        ]
        for s in ctls:
            _item(s, lines, t)
    lines += [
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
        + t("signoff.line", role=t("role.injector"), name=resp["injector"])
        + "  - "
        + t("signoff.line", role=t("role.observer"), name=resp["observer"]),
        "- "
        + t("signoff.line", role=t("role.recovery_operator"), name=resp["recovery_operator"])
        + "  - "
        + t("signoff.line", role=t("role.signer"), name=resp["signer"]),
    ]
    replayer = (dossier.get("responsibility") or {}).get("replay_operator")
    if replayer:
        lines.append("- " + t("signoff.line", role=t("role.replay_operator"), name=replayer))
    lines.append("")
    return "\n".join(lines)
