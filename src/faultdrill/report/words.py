"""Phrases every human report says the same way (Markdown, HTML, runbook).

Each takes the :class:`~faultdrill.report.i18n.Translator` of the report's language and a
part of the :class:`~faultdrill.report.model.Report`, and returns plain text (the HTML
renderer escapes it). :func:`finding_text` is the one place a finding's message becomes
words on a page.
"""

from __future__ import annotations

from faultdrill.report.i18n import Translator
from faultdrill.report.model import (
    Conditions,
    Expected,
    Finding,
    OperatorAction,
    Report,
    ResumePoint,
    Times,
    When,
)

__all__ = [
    "actions",
    "conditions",
    "expected",
    "finding_text",
    "permissions",
    "resumed",
    "times_line",
    "verified",
    "when",
]


def when(t: Translator, at: When | None) -> str:
    """A moment: its wall-clock time and seconds after the injection, or "not observed"."""
    if at is None:
        return t("when.none")
    rel = at.since_injection_s
    return t("when.rel", wall=at.wall, rel=rel) if rel is not None else at.wall


def verified(t: Translator, r: ResumePoint) -> str:
    key = {True: "ver.true", False: "ver.false"}.get(r.verified, "ver.none")  # type: ignore[arg-type]
    return t(key)


def resumed(t: Translator, r: ResumePoint | None, *, markup: bool = True) -> str:
    """Where training continued. ``markup``: Markdown code marks around the checkpoint."""
    if r is None:
        return t("resumed.none")
    if r.checkpoint is None:
        return t("resumed.scratch")
    key = "resumed.ckpt" if markup else "resumed.ckpt.plain"
    return t(key, ckpt=r.checkpoint, step=r.step, pos=r.data_position, ver=verified(t, r))


def expected(t: Translator, exp: Expected) -> str:
    """The plan's expected state of a scenario."""
    text = t(
        "exp.text",
        job=t.opt(f"exp.job.{exp.job}", exp.job),
        recovery=t.cls(exp.recovery),
        resume=t.opt(f"exp.resume.{exp.resume}", exp.resume),
    )
    return text + (f"; {exp.state}" if exp.state else "")


def actions(t: Translator, acts: list[OperatorAction]) -> str:
    """The recovery actions a person took, or "none: the platform acted alone"."""
    return "; ".join(t("action.by", action=a.action, operator=a.operator) for a in acts) or t(
        "action.none"
    )


def times_line(t: Translator, tm: Times) -> str:
    rc = tm.recomputed_steps
    return t(
        "times.line",
        detect=t.seconds(tm.detect_s),
        ready=t.seconds(tm.ready_s),
        recover=t.seconds(tm.recover_s),
        recomputed=rc if rc is not None else t("na"),
    )


def conditions(t: Translator, c: Conditions | None, *, pairs: bool = False) -> str:
    """The conditions of an item's times ("—" when not recorded); ``pairs``: the timeouts
    as ``name=value, ...`` instead of as recorded."""
    if c is None:
        return "—"
    env = c.environment
    timeouts = ", ".join(f"{k}={v}" for k, v in c.timeouts.items()) if pairs else c.timeouts
    return t(
        "cond.line",
        platform=c.platform,
        isolation=c.isolation,
        nodes=c.nodes,
        ppn=c.procs_per_node,
        ws=c.world_sizes,
        every=c.checkpoint_every_steps,
        restarts=c.max_restarts,
        timeouts=timeouts,
        hz=c.sample_hz,
        host=env.host,
        cpus=env.cpus,
        kernel=env.kernel,
        python=env.python,
        torch=env.torch,
    )


def finding_text(t: Translator, f: Finding) -> str:
    """A finding's message as the report shows it: said again in the report's language
    from its ``message_id`` and ``params``; a finding without an id (a check that does not
    name its messages, a run judged by an older version) as recorded, in English."""
    return t.message(f.message_id, f.params, f.message)


def permissions(report: Report, t: Translator) -> str:
    """What the drill itself needed on the hosts, from the recorded layout and fault kinds."""
    if not report.environment.root:
        return t("perm.user")
    kinds = {str(s.fault.kind if s.fault else None) for s in report.scenarios}
    extra = []
    if report.plan.resources.isolation == "netns":
        extra.append("network namespaces")
    if any(k.startswith(("link", "partition")) for k in kinds):
        extra.append("iptables/tc")
    if any(k.startswith("node") for k in kinds):
        extra.append("cgroup freezer")
    if any(k.startswith(("storage", "corrupt")) for k in kinds):
        extra.append("mounts")
    return t("perm.root", extra="".join(", " + e for e in extra))
