"""report.md: the human report, rendered from the report.json data (never from live state),
so that any recorded run can be re-rendered."""

from __future__ import annotations

from typing import Any

__all__ = ["render_markdown"]

_MARK = {"pass": "PASS", "retest": "RETEST", "fail": "FAIL"}


def _fmt_s(v: Any) -> str:
    return "n/a" if v is None else f"{v:.2f} s"


def _when(q: dict[str, Any] | None) -> str:
    if not q:
        return "not observed"
    rel = q.get("since_injection_s")
    return f"{q['wall']} (+{rel:.2f} s after injection)" if rel is not None else q["wall"]


def _resumed(r: dict[str, Any] | None) -> str:
    if not r:
        return "no restart observed"
    if r.get("checkpoint") is None:
        return "from scratch (step 0, data position 0)"
    ver = {True: "verified", False: "NOT verified", None: "verification unknown"}[r.get("verified")]
    return (
        f"checkpoint `{r['checkpoint']}`, step {r['step']}, data position "
        f"{r['data_position']} ({ver})"
    )


def _findings(ev: dict[str, Any]) -> list[str]:
    return [f"  - {_MARK[f['verdict']]} `{f['check']}`: {f['message']}" for f in ev["findings"]]


def _item(s: dict[str, Any], lines: list[str]) -> None:
    title = f" — {s['title']}" if s.get("title") else ""
    lines.append(f"### {s['id']}{title}")
    lines.append("")
    verdict = _MARK[s["verdict"]]
    if s.get("control"):
        caught = "CAUGHT" if s.get("caught") else "MISSED"
        lines.append(
            f"**Negative control: {caught}** by `{s['expected_check']}` "
            f"(workload mutation: `{s.get('workload_mutation')}`); verdict {verdict}"
        )
    else:
        lines.append(
            f"**Verdict: {verdict}** · recovery class: **{s['recovery_class']}** "
            f"({s['recovery_class_why']})"
        )
    lines.append("")
    fault = s["fault"] or {}
    pre = s.get("preconditions") or []
    lines += [
        "| | |",
        "|---|---|",
        f"| Preconditions | baseline recorded and passed; {'; '.join(pre) or 'none beyond the baseline'} |",
        f"| Injection | `{fault.get('kind')}` on {fault.get('target')}, {s.get('trigger')} |",
    ]
    exp = s.get("expected")
    if exp:
        lines.append(
            f"| Expected state | job {exp['job']}, recovery {exp['recovery']}, resume from "
            f"{exp['resume']}{'; ' + exp['state'] if exp.get('state') else ''} |"
        )
    actions = s.get("operator_actions") or []
    action = (
        "; ".join(f"{a.get('action')} by {a.get('operator')}" for a in actions)
        or "none: the platform acted alone"
    )
    lines.append(f"| Recovery action | {action} |")
    lines.append(f"| Job outcome | {s.get('outcome')} |")
    lines.append("")
    q, t = s["questions"], s["times"]
    lines += [
        "**The four questions**",
        "",
        f"1. Worker deemed lost: {_when(q['worker_lost_at'])} — by {q['worker_lost_by']}",
        f"2. Old replica stopped: {_when(q['old_replica_stopped_at'])}"
        + (f" — {q['old_replica_note']}" if q.get("old_replica_note") else ""),
        f"3. New replicas ready: {_when(q['new_replicas_ready_at'])}",
        f"4. Training continued from: {_resumed(q['resumed_from'])}; first new step "
        f"{_when(q.get('first_step_after_at'))}",
        "",
        f"Observed: detection {_fmt_s(t['detect_s'])}, new replicas ready "
        f"{_fmt_s(t.get('ready_s'))}, first new step {_fmt_s(t['recover_s'])} after injection; "
        f"recomputed steps: {t['recomputed_steps'] if t['recomputed_steps'] is not None else 'n/a'}.",
        "",
        "**Evidence**",
        "",
    ]
    for cat in ("progress", "resources", "results"):
        ev = s["evidence"][cat]
        lines.append(f"- {cat}: **{_MARK[ev['verdict']]}**")
        lines += _findings(ev)
    lines.append(f"- expectation: **{_MARK[s['expectation']['verdict']]}**")
    lines += _findings(s["expectation"])
    lines.append("")
    c = s["conditions"]
    env = c.get("environment") or {}
    lines.append(
        f"_Conditions of these observations_: platform {c['platform']} (isolation "
        f"{c['isolation']}), {c['nodes']} node(s) x {c['procs_per_node']} process(es), world "
        f"size(s) {c['world_sizes']}, checkpoint every {c['checkpoint_every_steps']} steps, "
        f"max restarts {c['max_restarts']}, timeouts {c['timeouts']}, process sampling "
        f"{c['sample_hz']} Hz; host {env.get('host')} ({env.get('cpus')} CPUs, kernel "
        f"{env.get('kernel')}), python {env.get('python')}, torch {env.get('torch')}. "
        f"{c['note']}."
    )
    lines.append("")


def render_markdown(report: dict[str, Any]) -> str:
    plan = report["plan"]
    summ = report["summary"]
    base = report["baseline"]
    resp = plan["responsibility"]
    lines = [
        f"# Fault drill report: {report['task_id']}",
        "",
        f"faultdrill {report['faultdrill_version']} · plan {report['plan_digest'][:19]}",
        "",
        "## Summary",
        "",
        f"- Scenarios: {summ['scenarios']} run — {summ['passed']} pass, {summ['failed']} fail, "
        f"{summ['retest']} retest.",
        f"- Negative controls: {summ['controls_caught']} of {summ['controls']} caught by the "
        "check their bug violates.",
        f"- Baseline: {_MARK[base['verdict']]}, {base['steps']} steps, final model "
        f"`{(base['final_model_digest'] or 'n/a')[:16]}`, world size {base['world_size']}.",
        f"- Overall: **{'OK' if summ['ok'] else 'NOT OK'}** — pass means recovery from valid "
        "progress was proven by progress, resource and result evidence; anything unexplained "
        "is retest, never pass.",
        "",
        "| scenario | round | fault | verdict | recovery class | detect | first new step | "
        "recomputed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    real = [s for s in report["scenarios"] if not s["control"]]
    ctls = [s for s in report["scenarios"] if s["control"]]
    for s in real:
        t = s["times"]
        lines.append(
            f"| {s['id']} | {s['round']} | {s['fault']['kind']} ({s['fault']['target']}) | "
            f"{_MARK[s['verdict']]} | {s['recovery_class']} | {_fmt_s(t['detect_s'])} | "
            f"{_fmt_s(t['recover_s'])} | {t['recomputed_steps']} |"
        )
    for sk in report.get("skipped") or []:
        lines.append(f"| {sk['id']} | | | NOT RUN | | | | {sk['reason']} |")
    if ctls:
        lines += [
            "",
            "| negative control | bug | expected check | caught | verdict |",
            "|---|---|---|---|---|",
        ]
        for s in ctls:
            lines.append(
                f"| {s['id']} | `{s.get('workload_mutation')}` | `{s['expected_check']}` "
                f"| {'yes' if s['caught'] else '**NO**'} | {_MARK[s['verdict']]} |"
            )
    lines += ["", "## Baseline (frozen before any fault)", ""]
    dossier = base.get("dossier") or {}
    task = dossier.get("task", {})
    lines += [
        f"- Task: `{task.get('id')}`, config version `{task.get('config_version')}`, code "
        f"`{task.get('code_id')}`",
        f"- Data: snapshot `{plan['data']['snapshot']}` {plan['data'].get('digest') or ''}, "
        f"read position {plan['data']['read_position']}",
        f"- Resources: {dossier.get('resources', {}).get('topology', '?')}",
        f"- Checkpoint policy: every {plan['checkpoint']['every_steps']} steps, keep "
        f"{plan['checkpoint']['keep']}",
        f"- Seeds: {plan['seeds']}",
        f"- Observation window: {dossier.get('observation', {}).get('baseline_window')}",
        f"- Responsibility: injector {resp['injector']}, observer {resp['observer']}, recovery "
        f"operator {resp['recovery_operator']}, signer {resp['signer']}",
    ]
    if base.get("evidence"):
        for cat in ("progress", "resources", "results"):
            lines.append(f"- Baseline {cat} self-check: {_MARK[base['evidence'][cat]['verdict']]}")
    lines += ["", "## Scenarios", ""]
    for s in real:
        _item(s, lines)
    if ctls:
        lines += [
            "## Negative controls",
            "",
            "Each control runs a known-bad workload under the same fault; the named check "
            "must fail it. A control that is not caught means the drill cannot be trusted "
            "to see that bug.",
            "",
        ]
        for s in ctls:
            _item(s, lines)
    lines += [
        "## Verified scope and what stays to be verified",
        "",
        f"- Verified: the scenarios above, on platform `{plan['resources']['platform']}` with "
        f"{plan['resources']['nodes']} node(s) x {plan['resources']['procs_per_node']} "
        f"process(es), entrypoint `{plan['task']['entrypoint'].get('module') or plan['task']['entrypoint'].get('script')}`.",
        "- To be verified: every other model, framework version, world size, network, storage "
        "and node combination; fault kinds not in this plan.",
        "",
        "## Sign-off",
        "",
        f"- Injector: {resp['injector']} ____________  - Observer: {resp['observer']} ____________",
        f"- Recovery operator: {resp['recovery_operator']} ____________  - Signer: "
        f"{resp['signer']} ____________",
        "",
    ]
    return "\n".join(lines)
