"""runbook.md: the recovery manual of a recorded run, for an engineer who was not there.

For each scenario (and each negative control): how to reproduce the fault and the recovery
(automatically with ``faultdrill replay``, and by hand with the exact commands recorded:
the torchrun agents' command lines, the injected fault's ``command``, every change the
ledger recorded and how to undo it), the expected observations (the plan's expectation and
what the original run observed) and the stop conditions.

Built from ``report.json`` and the run's recorded files (events, ``ledger.jsonl``), never
from live state. Recorded pids, ports and paths belong to the original run; the runbook
says how to find the current ones.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from faultdrill.events import read_jsonl
from faultdrill.report.i18n import Translator, translator
from faultdrill.report.scope import recorded_environment
from faultdrill.report.svg import item_events_dir

__all__ = ["ledger_changes", "render_runbook", "undo_hint"]

#: What faultdrill itself sets in every agent's environment (``platforms/local/platform.py``);
#: listed so that a person starting the agents by hand reproduces the same job.
_AGENT_ENV = (
    ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"),
    ("OMP_NUM_THREADS", "1"),
    ("GLOO_SOCKET_IFNAME", "lo"),
    ("PYTHONUNBUFFERED", "1"),
    ("LOGLEVEL", "INFO"),
)

#: Manual undo of the ledger entry kinds faultdrill knows (``faultdrill cleanup`` does the
#: same from the ledger; this is for a person without the tool at hand).
_UNDO = {
    "signal": "# a delivered signal cannot be undone; nothing to revert",
    "cgroup": "cat {path}/cgroup.procs | xargs -r kill -9; rmdir {path}",
    "run-processes": (
        "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null | "
        "grep -qx FAULTDRILL_RUN_ID={run_id} && kill -9 ${{p#/proc/}}; done"
    ),
    "iptables-rule": "ip netns exec {ns} iptables -w -D {chain} {rule}",
    "tc-qdisc": "tc -n {ns} qdisc del dev {dev} root",
    "link-down": "ip -n {ns} link set dev {dev} up",
    "ro-bind-mount": "umount {path}",
    "tmpfs-mount": "cp -a {path}/. /tmp/keep-ckpt/ && umount {path}  # then copy back",
    "filler-file": "rm -f {path}",
    "netns": "ip netns del {name}",
    "netns-link": "ip -n {ns} link del {name}",
    "node-kill": "# killed processes cannot be revived; nothing to revert",
    "slurm-drain": "scontrol update NodeName={node} State=RESUME",
    "slurm-daemon": "kill -TERM {pid}  # {name} on {node}",
    "slurmctld-stop": "slurmctld  # start the controller again (it keeps its saved state)",
}


def undo_hint(kind: str, data: dict[str, Any]) -> str:
    """A shell line that undoes one ledger entry, or a pointer to ``faultdrill cleanup``."""
    tmpl = _UNDO.get(kind)
    if tmpl is None:
        return f"faultdrill cleanup RUN_DIR  # {kind}: no manual recipe known"
    fields = {k: (" ".join(map(str, v)) if isinstance(v, list) else v) for k, v in data.items()}
    try:
        return tmpl.format(**fields)
    except (KeyError, IndexError):
        return f"faultdrill cleanup RUN_DIR  # {kind}: recorded data incomplete"


def ledger_changes(item_dir: Path) -> list[dict[str, Any]]:
    """Every change an item's ledger recorded: kind, label, data, applied, reverted."""
    path = item_dir / "ledger.jsonl"
    if not path.exists():
        return []
    entries: dict[str, dict[str, Any]] = {}
    for rec in read_jsonl(path):
        eid, op = rec.get("id"), rec.get("op")
        if op == "record":
            old = entries.get(str(eid), {})
            entries[str(eid)] = {
                "id": eid,
                "kind": rec.get("kind"),
                "label": rec.get("label", ""),
                "data": rec.get("data") or {},
                "applied": old.get("applied", False),
                "reverted": old.get("reverted", False),
            }
        elif str(eid) in entries and op in ("applied", "reverted"):
            entries[str(eid)][op] = True
    return list(entries.values())


def _events(events_dir: Path, src: str, kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if not events_dir.is_dir():
        return out
    for path in sorted(events_dir.glob("*.jsonl")):
        out += [e for e in read_jsonl(path) if e.get("src") == src and e.get("kind") in kinds]
    return sorted(out, key=lambda e: float(e.get("mono", 0.0)))


def _plan_item(plan: dict[str, Any], item_id: str) -> dict[str, Any]:
    for r in plan.get("rounds", []):
        for sc in r.get("scenarios", []):
            if sc.get("id") == item_id:
                return dict(sc)
    for c in plan.get("controls", []):
        if c.get("id") == item_id:
            return dict(c)
    return {}


def _node_links(changes: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """node -> (network namespace, interface) from the ledger's recorded veth pairs."""
    out: dict[str, tuple[str, str]] = {}
    for c in changes:
        data = c.get("data") or {}
        ns, dev = str(data.get("ns", "")), str(data.get("name", ""))
        if c.get("kind") == "netns-link" and "-" in ns and data.get("peer"):
            out[ns.rsplit("-", 1)[1]] = (ns, dev)
    return out


def _cmd(value: Any) -> str:
    return shlex.join(map(str, value)) if isinstance(value, list) else str(value)


def _subst(text: str, orig: str) -> str:
    return text.replace(orig, "$RUN") if orig else text


def _item_section(
    t: Translator,
    report: dict[str, Any],
    s: dict[str, Any],
    run_dir: Path | None,
    orig: str,
    n: int,
) -> list[str]:
    plan = report["plan"]
    sid = s["id"]
    control = bool(s.get("control"))
    pi = _plan_item(plan, sid)
    sub = "controls" if control else "scenarios"
    ev_dir = item_events_dir(run_dir, sid, control) if run_dir else Path("/nonexistent")
    title = f" — {s['title']}" if s.get("title") else ""
    lines = [f"## {n}. {sid}{title}", ""]
    fault = s.get("fault") or {}
    lines += [
        f"- {t('row.injection')}: "
        + t(
            "inj.text", kind=fault.get("kind"), target=fault.get("target"), trigger=s.get("trigger")
        ),
    ]
    if control:
        lines.append(
            "- "
            + t(
                "rb.control.body",
                mutation=json.dumps(s.get("workload_mutation"), ensure_ascii=False),
                check=s.get("expected_check"),
            )
        )
    lines += ["", f"### {t('rb.auto')}", "", t("rb.auto.body"), ""]
    lines += [
        "```sh",
        f"faultdrill replay BUNDLE.tar.gz --scenario {sid} --operator YOUR-NAME --out replay-{sid}",
        "```",
        "",
        f"### {t('rb.manual')}",
        "",
        "```sh",
        f"RUN=$PWD/my-replay   # {sub}/{sid} below is where this item's files go",
        'PORT=$(python3 -c \'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); '
        "print(s.getsockname()[1])')",
        f"mkdir -p $RUN/{sub}/{sid}/events $RUN/{sub}/{sid}/{plan['checkpoint']['dir']}",
        "```",
        "",
    ]
    start = _events(ev_dir, "harness", ("item_start",))
    run_id = start[0].get("run_id", "RUN-ID") if start else "RUN-ID"
    agents = _events(ev_dir, "platform", ("agent_start",))
    env = [*_AGENT_ENV]
    env += sorted((plan.get("task", {}).get("env") or {}).items())
    env += sorted((pi.get("env") or {}).items())
    ck = plan["checkpoint"]
    env += [
        ("FAULTDRILL_CKPT_DIR", f"$RUN/{sub}/{sid}/{ck['dir']}"),
        ("FAULTDRILL_CKPT_EVERY", str(ck["every_steps"])),
        ("FAULTDRILL_CKPT_KEEP", str(ck["keep"])),
        ("FAULTDRILL_SEED", str((plan.get("seeds") or {}).get("global", 0))),
        ("FAULTDRILL_EVENTS_DIR", f"$RUN/{sub}/{sid}/events"),
        ("FAULTDRILL_TASK_ID", plan["task"]["id"]),
        ("FAULTDRILL_RUN_ID", run_id),
    ]
    # where the original run lived: from the recorded workload path, else the directory
    for a in agents:
        for x in a.get("argv") or []:
            if str(x).startswith("--workload-config="):
                orig = str(Path(str(x).split("=", 1)[1]).parent.parent.parent)
    links = _node_links(ledger_changes(run_dir / sub / sid) if run_dir else [])
    spares = {
        str(e.get("node")) for e in _events(ev_dir, "platform", ("node",)) if e.get("spare") is True
    }
    lines += [f"1. {t('rb.step.start')}", "", "```sh"]
    if links:
        lines.append(f"# {t('rb.netns')}")
    seen_nodes: set[str] = set()
    for a in sorted(agents, key=lambda e: str(e.get("node"))):
        node = str(a.get("node"))
        if node in seen_nodes:
            continue  # a resubmission starts the same command again
        seen_nodes.add(node)
        argv = [str(x) for x in a.get("argv") or []]
        argv = [
            x.rsplit(":", 1)[0] + ":$PORT" if x.startswith("--rdzv-endpoint=") else x for x in argv
        ]
        node_env = list(env)
        prefix = ""
        if node in links:
            ns, dev = links[node]
            node_env = [(k, dev if k == "GLOO_SOCKET_IFNAME" else v) for k, v in node_env]
            prefix = f"nsenter --net=/run/netns/{ns} "
        envs = " ".join(
            f"{k}={shlex.quote(str(v)) if '$' not in str(v) else v}" for k, v in node_env
        )
        cmd = " ".join(shlex.quote(x) if "$" not in x else x for x in argv)
        lines.append(
            _subst(
                f"# node {node}"
                + (f" ({t('rb.spare')})" if node in spares else "")
                + f"\n{prefix}env {envs} FAULTDRILL_NODE={node} "
                f"TMPDIR=$RUN/{sub}/{sid}/tmp/{node} "
                f"python -m faultdrill.platforms.local.agent {cmd} &",
                orig,
            )
        )
    if not agents:
        lines.append("# (no agent command was recorded for this item)")
    wl = (run_dir / sub / sid / "workload.json") if run_dir else None
    if wl is not None and wl.exists():
        lines.append(
            f"# the workload config the job reads, as recorded (paths moved under $RUN):\n"
            f"cat > $RUN/{sub}/{sid}/workload.json <<EOF\n"
            + _subst(wl.read_text().rstrip(), orig)
            + "\nEOF"
        )
    lines += ["```", ""]
    lines += [
        f"2. {t('rb.step.wait', trigger=s.get('trigger'))}",
        "",
        "```sh",
        f'tail -F $RUN/{sub}/{sid}/events/probe-rank0.jsonl | grep --line-buffered \'"kind":"step"\'',
        "```",
        "",
    ]
    injected = _events(ev_dir, "fault", ("injected", "prepared"))
    spec = fault.get("spec") or {}
    target = spec.get("target") if isinstance(spec.get("target"), dict) else {}
    if target and target.get("rank") is not None:
        lines += [
            f"3. {t('rb.step.find', target=fault.get('target'))}",
            "",
            "```sh",
            "for p in /proc/[0-9]*; do e=$(tr '\\0' '\\n' < $p/environ 2>/dev/null); "
            f'echo "$e" | grep -qx FAULTDRILL_RUN_ID={run_id} && echo "$e" | grep -qx '
            f"RANK={target['rank']} && echo ${{p#/proc/}}; done",
            "```",
            "",
        ]
    step = 4 if target and target.get("rank") is not None else 3
    if injected:
        lines += [f"{step}. {t('rb.step.inject')}", "", "```sh"]
        for e in injected:
            if e.get("command") is not None:
                lines.append(_subst(_cmd(e["command"]), orig) + f"   # {e.get('kind')}")
            else:
                facts = {k: v for k, v in e.items() if k not in ("ts", "mono", "src", "task")}
                lines.append("# " + json.dumps(facts, default=str))
        lines += ["```", ""]
    else:
        lines += [f"{step}. {t('rb.no_injection')}", ""]
    reverted = _events(ev_dir, "fault", ("reverted", "revert_failed"))
    if reverted:
        lines += [f"{step + 1}. {t('rb.step.revert')}", ""]
        lines += [
            f"   - {e.get('kind')} {e.get('fault')} {e.get('error', '')}".rstrip() for e in reverted
        ]
        lines.append("")
    # recovery
    rec = pi.get("recovery") or {}
    lines += [f"### {t('rb.step.recover')}", ""]
    if rec.get("action") == "resubmit":
        rb = rec.get("runbook") or ""
        lines.append(t("rb.recover.resubmit", runbook=f": {rb}" if rb else ""))
    elif not control:
        lines.append(t("rb.recover.auto"))
    if rec.get("confirm"):
        lines.append("- " + t("manual.confirm", why=t("manual.confirm.plan")))
    acts = s.get("operator_actions") or []
    if acts:
        lines.append(
            "- "
            + t(
                "rb.recover.recorded",
                actions="; ".join(
                    t("action.by", action=a.get("action"), operator=a.get("operator")) for a in acts
                ),
            )
        )
        for a in acts:
            for step in a.get("steps") or []:
                lines.append(
                    "  - "
                    + t(
                        "rb.recover.step",
                        command=step.get("command"),
                        permission=step.get("permission"),
                        at=a.get("at") or "?",
                    )
                )
    lines.append("")
    # expected observations
    lines += [f"### {t('rb.expect')}", ""]
    exp = s.get("expected")
    if exp:
        lines.append(
            "- "
            + t(
                "rb.expect.plan",
                expected=t(
                    "exp.text",
                    job=t.opt(f"exp.job.{exp.get('job')}", exp.get("job")),
                    recovery=t.cls(exp.get("recovery")),
                    resume=t.opt(f"exp.resume.{exp.get('resume')}", exp.get("resume")),
                )
                + (f"; {exp['state']}" if exp.get("state") else ""),
            )
        )
    q = s.get("questions") or {}
    lines.append("- " + t("rb.expect.recorded"))
    for i, key in (
        (1, "worker_lost_at"),
        (2, "old_replica_stopped_at"),
        (3, "new_replicas_ready_at"),
        (4, "first_step_after_at"),
    ):
        at = q.get(key)
        rel = at.get("since_injection_s") if at else None
        val = t.seconds(rel) if rel is not None else t("when.none")
        if i == 1 and q.get("worker_lost_by"):
            val += f" ({q['worker_lost_by']})"
        if i == 4:
            rf = q.get("resumed_from")
            if rf and rf.get("checkpoint"):
                val += "; " + t(
                    "resumed.ckpt",
                    ckpt=rf["checkpoint"],
                    step=rf.get("step"),
                    pos=rf.get("data_position"),
                    ver=t(
                        {True: "ver.true", False: "ver.false"}.get(rf.get("verified"), "ver.none")
                    ),
                )
            elif rf:
                val += "; " + t("resumed.scratch")
        lines.append(f"  - {t(f'q.{i}')}: {val}")
    lines.append(
        "  - "
        + t(
            "rb.expect.verdict",
            verdict=t.verdict(s.get("verdict")),
            cls=t.cls(s.get("recovery_class")),
        )
    )
    lines.append("")
    # stop conditions
    stop = dict(plan.get("stop") or {})
    stop.update({k: v for k, v in (pi.get("stop") or {}).items() if v is not None})
    lines += [
        f"### {t('rb.stop')}",
        "",
        t(
            "rb.stop.body",
            wall=stop.get("max_wall_s"),
            noprog=stop.get("max_no_progress_s"),
            nonfinite=t(
                "rb.stop.nonfinite.on"
                if stop.get("stop_on_nonfinite_loss", True)
                else "rb.stop.nonfinite.off"
            ),
            target=fault.get("target"),
        ),
        "",
        t("rb.cleanup"),
        "",
        "```sh",
    ]
    changes = ledger_changes(run_dir / sub / sid) if run_dir else []
    for c in reversed(changes):
        data = dict(c["data"])
        data.setdefault("run_id", run_id)
        lines.append(_subst(undo_hint(str(c["kind"]), data), orig) + f"   # {c['label']}")
    if not changes:
        lines.append("faultdrill cleanup $RUN")
    lines += ["```", ""]
    return lines


def render_runbook(report: dict[str, Any], run_dir: Path | None = None, lang: str = "en") -> str:
    """The runbook of a recorded run (``report.json`` data plus its directory's files)."""
    t = translator(lang)
    env = recorded_environment(report)
    orig = str(run_dir.resolve()) if run_dir is not None else ""
    from faultdrill.report.html import drill_permissions

    perm = drill_permissions(report, t)
    lines = [
        f"# {t('rb.title', task=report['task_id'])}",
        "",
        t("subtitle", version=report["faultdrill_version"], digest=report["plan_digest"][:19]),
        "",
        t("rb.intro"),
        "",
        f"## {t('rb.prereq')}",
        "",
        t(
            "rb.prereq.body",
            python=env.get("python"),
            torch=env.get("torch"),
            host=env.get("host"),
            cpus=env.get("cpus"),
            kernel=env.get("kernel"),
            version=report["faultdrill_version"],
            perm=perm,
        ),
        "",
    ]
    items = [s for s in report.get("scenarios") or [] if not s.get("control")]
    ctls = [s for s in report.get("scenarios") or [] if s.get("control")]
    n = 0
    for s in items:
        n += 1
        lines += _item_section(t, report, s, run_dir, orig, n)
    if ctls:
        lines += [f"# {t('rb.controls')}", ""]
        for s in ctls:
            n += 1
            lines += _item_section(t, report, s, run_dir, orig, n)
    return "\n".join(lines) + "\n"
