"""runbook.md: the recovery manual of a recorded run, for an engineer who was not there.

For each scenario (and each negative control): how to reproduce the fault and the recovery
(automatically with ``faultdrill replay``, and by hand with the exact commands recorded:
the torchrun agents' command lines, the injected fault's ``command``, every change the
ledger recorded and how to undo it), the expected observations (the plan's expectation and
what the original run observed) and the stop conditions.

Built from the :class:`~faultdrill.report.model.Report` and the run's recorded files (events, ``ledger.jsonl``), never
from live state. Recorded pids, ports and paths belong to the original run; the runbook
says how to find the current ones.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faultdrill import boundedjson, rundir
from faultdrill.errors import RunDirError
from faultdrill.events import read_jsonl, read_objects
from faultdrill.i18n import Translator, translator
from faultdrill.report import words
from faultdrill.report.model import Item, PlanStop, RecordedPlan, Report
from faultdrill.report.svg import item_events_dir
from faultdrill.safepath import read_bytes

__all__ = ["ledger_changes", "render_runbook", "undo_hint"]

#: The recorded workload config shown in the runbook: a few hundred bytes in practice.
_WORKLOAD_LIMIT = 1 << 20

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
    path = rundir.ledger_path(item_dir)
    if not path.exists():
        return []
    entries: dict[str, dict[str, Any]] = {}
    for rec in read_objects(path):  # ledger records are not events
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


@dataclass(frozen=True)
class _Recorded:
    """What one item's directory recorded, read once for its section of the runbook."""

    sid: str
    sub: str  # scenarios | controls: where the item's files go
    ev_dir: Path
    run_id: str
    agents: list[dict[str, Any]]  # agent_start events
    changes: list[dict[str, Any]]  # the item's ledger
    links: dict[str, tuple[str, str]]  # node -> (namespace, interface)
    spares: set[str]
    orig: str  # where the original run lived: replaced by $RUN in commands

    @property
    def base(self) -> str:
        return f"$RUN/{self.sub}/{self.sid}"

    def subst(self, text: str) -> str:
        return text.replace(self.orig, "$RUN") if self.orig else text


def _recorded(s: Item, run_dir: Path | None, orig: str) -> _Recorded:
    sub = "controls" if s.control else "scenarios"
    ev_dir = item_events_dir(run_dir, s.id, s.control) if run_dir else Path("/nonexistent")
    start = _events(ev_dir, "harness", ("item_start",))
    agents = _events(ev_dir, "platform", ("agent_start",))
    # where the original run lived: from the recorded workload path, else the directory
    for a in agents:
        for x in a.get("argv") or []:
            if str(x).startswith("--workload-config="):
                orig = str(Path(str(x).split("=", 1)[1]).parent.parent.parent)
    changes = ledger_changes(run_dir / sub / s.id) if run_dir else []
    nodes = _events(ev_dir, "platform", ("node",))
    return _Recorded(
        sid=s.id,
        sub=sub,
        ev_dir=ev_dir,
        run_id=start[0].get("run_id", "RUN-ID") if start else "RUN-ID",
        agents=agents,
        changes=changes,
        links=_node_links(changes),
        spares={str(e.get("node")) for e in nodes if e.get("spare") is True},
        orig=orig,
    )


def _injection_text(t: Translator, s: Item) -> str:
    fault = s.fault
    return t(
        "inj.text",
        kind=fault.kind if fault else None,
        target=fault.target if fault else None,
        trigger=s.trigger,
    )


def _intro(t: Translator, s: Item, n: int, rec: _Recorded, ckpt_dir: str) -> list[str]:
    """Heading, the injection, and how to reproduce it: automatically, or by hand."""
    title = f" — {words.item_title(t, s)}" if s.title else ""
    lines = [f"## {n}. {s.id}{title}", "", f"- {t('row.injection')}: {_injection_text(t, s)}"]
    if s.control:
        mutation = json.dumps(s.workload_mutation, ensure_ascii=False)
        lines.append("- " + t("rb.control.body", mutation=mutation, check=s.expected_check))
    sid, sub = s.id, rec.sub
    return [
        *lines,
        "",
        f"### {t('rb.auto')}",
        "",
        t("rb.auto.body"),
        "",
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
        f"mkdir -p {rec.base}/events {rec.base}/{ckpt_dir}",
        "```",
        "",
    ]


def _agent_env(rec: _Recorded, plan: RecordedPlan) -> list[tuple[str, str]]:
    """The environment every agent of the item is started with."""
    pi = plan.item(rec.sid)
    ck = plan.checkpoint
    return [
        *_AGENT_ENV,
        *sorted(plan.task.env.items()),
        *sorted((pi.env if pi is not None else {}).items()),
        ("FAULTDRILL_CKPT_DIR", f"{rec.base}/{ck.dir}"),
        ("FAULTDRILL_CKPT_EVERY", str(ck.every_steps)),
        ("FAULTDRILL_CKPT_KEEP", str(ck.keep)),
        ("FAULTDRILL_SEED", str(plan.seeds.get("global", 0))),
        ("FAULTDRILL_EVENTS_DIR", f"{rec.base}/events"),
        ("FAULTDRILL_TASK_ID", plan.task.id),
        ("FAULTDRILL_RUN_ID", rec.run_id),
    ]


def _agent_line(
    t: Translator, rec: _Recorded, agent: dict[str, Any], env: list[tuple[str, str]]
) -> str:
    """One node's agent as recorded, with the replay's port, paths and namespace."""
    node = str(agent.get("node"))
    argv = [str(x) for x in agent.get("argv") or []]
    argv = [x.rsplit(":", 1)[0] + ":$PORT" if x.startswith("--rdzv-endpoint=") else x for x in argv]
    prefix = ""
    if node in rec.links:
        ns, dev = rec.links[node]
        env = [(k, dev if k == "GLOO_SOCKET_IFNAME" else v) for k, v in env]
        prefix = f"nsenter --net=/run/netns/{ns} "
    envs = " ".join(f"{k}={shlex.quote(str(v)) if '$' not in str(v) else v}" for k, v in env)
    cmd = " ".join(shlex.quote(x) if "$" not in x else x for x in argv)
    spare = f" ({t('rb.spare')})" if node in rec.spares else ""
    return rec.subst(
        f"# node {node}{spare}\n{prefix}env {envs} FAULTDRILL_NODE={node} "
        f"TMPDIR={rec.base}/tmp/{node} "
        f"python -m faultdrill.platforms.local.agent {cmd} &"
    )


def _start_agents(
    t: Translator, rec: _Recorded, plan: RecordedPlan, run_dir: Path | None
) -> list[str]:
    """Step 1: every node's agent (and the workload config the job reads)."""
    lines = [f"1. {t('rb.step.start')}", "", "```sh"]
    if rec.links:
        lines.append(f"# {t('rb.netns')}")
    env = _agent_env(rec, plan)
    seen_nodes: set[str] = set()
    for a in sorted(rec.agents, key=lambda e: str(e.get("node"))):
        node = str(a.get("node"))
        if node in seen_nodes:
            continue  # a resubmission starts the same command again
        seen_nodes.add(node)
        lines.append(_agent_line(t, rec, a, env))
    if not rec.agents:
        lines.append("# (no agent command was recorded for this item)")
    recorded = _workload_config(run_dir, rec) if run_dir else None
    if recorded is not None:
        lines.append(
            f"# the workload config the job reads, as recorded (paths moved under $RUN):\n"
            f"cat > {rec.base}/workload.json <<EOF\n" + rec.subst(recorded.rstrip()) + "\nEOF"
        )
    return [*lines, "```", ""]


def _workload_config(run_dir: Path, rec: _Recorded) -> str | None:
    """The item's recorded ``workload.json`` as text, if it is a regular JSON file of the run
    (no link on the way, at most 1 MiB): the runbook is published with the bundle, so a
    link to a file outside the run (``/etc/shadow``) must never be followed into it."""
    try:
        raw = read_bytes(
            run_dir.resolve() / rec.sub / rec.sid / "workload.json",
            within=run_dir.resolve(),
            limit=_WORKLOAD_LIMIT,
        )
        text = raw.decode()
        boundedjson.loads(text)
    except (OSError, RunDirError, ValueError):
        return None  # absent, a link, not a regular file, not JSON: nothing recorded to show
    return text


def _inject(t: Translator, s: Item, rec: _Recorded) -> list[str]:
    """Steps 2 onwards: wait for the trigger, find the target, inject, revert."""
    lines = [
        f"2. {t('rb.step.wait', trigger=s.trigger)}",
        "",
        "```sh",
        f'tail -F {rec.base}/events/probe-rank0.jsonl | grep --line-buffered \'"kind":"step"\'',
        "```",
        "",
    ]
    rank = s.fault.target_rank if s.fault else None
    if rank is not None:
        lines += [
            f"3. {t('rb.step.find', target=s.fault.target if s.fault else None)}",
            "",
            "```sh",
            "for p in /proc/[0-9]*; do e=$(tr '\\0' '\\n' < $p/environ 2>/dev/null); "
            f'echo "$e" | grep -qx FAULTDRILL_RUN_ID={rec.run_id} && echo "$e" | grep -qx '
            f"RANK={rank} && echo ${{p#/proc/}}; done",
            "```",
            "",
        ]
    step = 4 if rank is not None else 3
    injected = _events(rec.ev_dir, "fault", ("injected", "prepared"))
    if injected:
        lines += [f"{step}. {t('rb.step.inject')}", "", "```sh"]
        for e in injected:
            if e.get("command") is not None:
                lines.append(rec.subst(_cmd(e["command"])) + f"   # {e.get('kind')}")
            else:
                facts = {k: v for k, v in e.items() if k not in ("ts", "mono", "src", "task")}
                lines.append("# " + json.dumps(facts, default=str))
        lines += ["```", ""]
    else:
        lines += [f"{step}. {t('rb.no_injection')}", ""]
    reverted = _events(rec.ev_dir, "fault", ("reverted", "revert_failed"))
    if reverted:
        lines += [f"{step + 1}. {t('rb.step.revert')}", ""]
        lines += [
            f"   - {e.get('kind')} {e.get('fault')} {e.get('error', '')}".rstrip() for e in reverted
        ]
        lines.append("")
    return lines


def _recovery(t: Translator, s: Item, plan: RecordedPlan) -> list[str]:
    pi = plan.item(s.id)
    rec = pi.recovery if pi is not None else None
    lines = [f"### {t('rb.step.recover')}", ""]
    if rec is not None and rec.action == "resubmit":
        lines.append(t("rb.recover.resubmit", runbook=f": {rec.runbook}" if rec.runbook else ""))
    elif not s.control:
        lines.append(t("rb.recover.auto"))
    if rec is not None and rec.confirm:
        lines.append("- " + t("manual.confirm", why=t("manual.confirm.plan")))
    if s.operator_actions:
        lines.append("- " + t("rb.recover.recorded", actions=words.actions(t, s.operator_actions)))
    for a in s.operator_actions:
        for step in a.steps:
            at = a.at or "?"
            lines.append(
                "  - "
                + t("rb.recover.step", command=step.command, permission=step.permission, at=at)
            )
    return [*lines, ""]


def _observed(t: Translator, s: Item) -> list[str]:
    """The plan's expectation and what the original run observed."""
    lines = [f"### {t('rb.expect')}", ""]
    if s.expected is not None:
        lines.append("- " + t("rb.expect.plan", expected=words.expected(t, s.expected)))
    q = s.questions
    lines.append("- " + t("rb.expect.recorded"))
    for i, at in q.moments():
        rel = at.since_injection_s if at else None
        val = t.seconds(rel) if rel is not None else t("when.none")
        if i == 1 and q.worker_lost_by:
            val += f" ({words.lost_by_text(t, q.worker_lost_by)})"
        rf = q.resumed_from
        if i == 4 and rf is not None:
            val += "; " + (words.resumed(t, rf) if rf.checkpoint else t("resumed.scratch"))
        lines.append(f"  - {t(f'q.{i}')}: {val}")
    verdict = t("rb.expect.verdict", verdict=t.verdict(s.verdict), cls=t.cls(s.recovery_class))
    return [*lines, f"  - {verdict}", *_proved(t, s), ""]


def _proved(t: Translator, s: Item) -> list[str]:
    """What the original run proved, where it failed, and how its job failed."""
    lines = []
    if s.conclusion is not None:
        lines.append("  - " + t("rb.expect.level", level=t.level(s.conclusion.level)))
    if s.layer is not None:
        why = t.message(s.layer.message_id, s.layer.params, s.layer.why)
        lines.append("  - " + t("rb.expect.layer", layer=t.layer(s.layer.layer), why=why))
    f = s.failure
    if f is not None:
        status = "?" if f.exit_status is None else str(f.exit_status)
        lines.append(
            "  - "
            + t("rb.expect.failure", command=f.command or "?", status=status, log=f.log or "?")
        )
        lines += [f"    > {line}" for line in f.error_tail[-5:]]
    if s.no_probe_events:
        lines.append("  - " + t("part.no_probe"))
    return lines


def _stop_and_cleanup(t: Translator, s: Item, plan: RecordedPlan, rec: _Recorded) -> list[str]:
    pi = plan.item(s.id)
    stop = (pi.stop if pi is not None else PlanStop()).over(plan.stop)
    nonfinite = stop.stop_on_nonfinite_loss is not False
    lines = [
        f"### {t('rb.stop')}",
        "",
        t(
            "rb.stop.body",
            wall=stop.max_wall_s,
            noprog=stop.max_no_progress_s,
            nonfinite=t("rb.stop.nonfinite.on" if nonfinite else "rb.stop.nonfinite.off"),
            target=s.fault.target if s.fault else None,
        ),
        "",
        t("rb.cleanup"),
        "",
        "```sh",
    ]
    for c in reversed(rec.changes):
        data = dict(c["data"])
        data.setdefault("run_id", rec.run_id)
        lines.append(rec.subst(undo_hint(str(c["kind"]), data)) + f"   # {c['label']}")
    if not rec.changes:
        lines.append("faultdrill cleanup $RUN")
    return [*lines, "```", ""]


def _item_section(
    t: Translator, report: Report, s: Item, run_dir: Path | None, orig: str, n: int
) -> list[str]:
    plan = report.plan
    rec = _recorded(s, run_dir, orig)
    return [
        *_intro(t, s, n, rec, plan.checkpoint.dir),
        *_start_agents(t, rec, plan, run_dir),
        *_inject(t, s, rec),
        *_recovery(t, s, plan),
        *_observed(t, s),
        *_stop_and_cleanup(t, s, plan, rec),
    ]


def render_runbook(report: Report, run_dir: Path | None = None, lang: str = "en") -> str:
    """The runbook of a recorded run (its report plus its directory's files)."""
    t = translator(lang)
    env = report.environment
    orig = str(run_dir.resolve()) if run_dir is not None else ""
    lines = [
        f"# {t('rb.title', task=report.task_id)}",
        "",
        t("subtitle", version=report.faultdrill_version, digest=report.plan_digest[:19]),
        "",
        t("rb.intro"),
        "",
        f"## {t('rb.prereq')}",
        "",
        t(
            "rb.prereq.body",
            python=env.python,
            torch=env.torch,
            host=env.host,
            cpus=env.cpus,
            kernel=env.kernel,
            version=report.faultdrill_version,
            perm=words.permissions(report, t),
        ),
        "",
    ]
    n = 0
    for s in report.scenario_items:
        n += 1
        lines += _item_section(t, report, s, run_dir, orig, n)
    if report.control_items:
        lines += [f"# {t('rb.controls')}", ""]
        for s in report.control_items:
            n += 1
            lines += _item_section(t, report, s, run_dir, orig, n)
    return "\n".join(lines) + "\n"
