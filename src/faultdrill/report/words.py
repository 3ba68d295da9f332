"""Phrases every human report says the same way (Markdown, HTML, runbook).

Each takes the :class:`~faultdrill.i18n.Translator` of the report's language and a
part of the :class:`~faultdrill.report.model.Report`, and returns plain text (the HTML
renderer escapes it). :func:`finding_text` is the one place a finding's message becomes
words on a page.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Any

from faultdrill.i18n import Translator, format_message
from faultdrill.report.model import (
    Conditions,
    Expected,
    Finding,
    Item,
    OperatorAction,
    RecordedPlan,
    Report,
    ResumePoint,
    Times,
    When,
)

__all__ = [
    "actions",
    "after_injection",
    "class_why",
    "conditions",
    "controls_note",
    "expected",
    "field_text",
    "finding_text",
    "item_title",
    "mutation",
    "not_as_planned",
    "note_text",
    "outcome",
    "permissions",
    "resumed",
    "size",
    "skip_reason",
    "times_line",
    "topology",
    "utc",
    "value",
    "verified",
    "when",
    "window",
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


def field_text(t: Translator, s: Item, name: str, recorded: str | None) -> str:
    """An English field the judge wrote (``recovery_class_why``, ``aborted``,
    ``not_proven_why``), said from the message behind it when the item records one."""
    said = s.field_messages.get(name)
    if said is None:
        return recorded or ""
    return t.message(said.message_id, said.params, recorded or "")


def class_why(t: Translator, s: Item) -> str:
    """Why the item has its recovery class: the judge's reason in the report's language
    (an item judged before reasons had ids: in English the recorded reason, else the
    class's explanation)."""
    if "recovery_class_why" in s.field_messages:
        return field_text(t, s, "recovery_class_why", s.recovery_class_why)
    return t.cls_why(s.recovery_class, s.recovery_class_why)


def not_as_planned(t: Translator, s: Item) -> str:
    """Why the drill did not run as planned (aborted, or a control not proven)."""
    if s.aborted:
        return field_text(t, s, "aborted", s.aborted)
    return field_text(t, s, "not_proven_why", s.not_proven_why)


def after_injection(t: Translator, seconds: Any) -> str:
    """A moment as seconds after the injection ("+1.23 s"), or "n/a"."""
    if seconds is None:
        return t("na")
    return t("time.after", v=float(seconds))


def utc(t: Translator, v: Any) -> str:
    """A recorded wall-clock time (ISO text or epoch seconds) as UTC, to the second."""
    try:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            stamp = dt.datetime.fromtimestamp(float(v), dt.timezone.utc)
        else:
            stamp = dt.datetime.fromisoformat(str(v)).astimezone(dt.timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError):
        return value(t, v)
    return stamp.strftime("%Y-%m-%d %H:%M:%S UTC")


def size(t: Translator, n: Any) -> str:
    """A number of bytes in the unit that reads best (B, KiB, MiB, GiB)."""
    if n is None or isinstance(n, bool) or not isinstance(n, (int, float)):
        return t("na")
    v, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            break
        v /= 1024
    return t("size", v=f"{v:.0f}" if unit == "B" else f"{v:.1f}", unit=unit)


def value(t: Translator, v: Any) -> str:
    """A recorded value said for a reader: None as "n/a", booleans as yes/no, lists joined,
    floats without noise."""
    if v is None or v == "":
        return t("na")
    if isinstance(v, bool):
        return t("yes") if v else t("no")
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(value(t, x) for x in v) or t("none")
    if isinstance(v, Mapping):
        return "; ".join(f"{t.opt('field.' + str(k), k)} {value(t, x)}" for k, x in v.items())
    return str(v)


#: Why the runner did not drill an item, as it writes it (engine/run.py) -> message key.
_SKIPS = (
    (re.compile(r"not run: the baseline did not pass its own checks"), "skip.baseline"),
    (
        re.compile(
            r"not run: round (?P<round>\d+) did not pass \(set continue_on_failure to go on\)"
        ),
        "skip.round",
    ),
    (re.compile(r"not run"), "skip.not-run"),
)


#: Notes of the four answers, as the judge writes them (readings/analysis.py) -> message key.
_NOTES = (
    (re.compile(r"no replica was lost: the job rode the fault out"), "note.rode-out"),
    (re.compile(r"no new incarnation started after the fault"), "note.no-restart"),
    (re.compile(r"pids \[(?P<pids>[0-9, ]*)\] never sampled"), "note.never-sampled"),
    (
        re.compile(
            r"old replica pid\(s\) \[(?P<pids>[0-9, ]*)\] still alive when the job ended "
            r"\(stopped only by the drill's clean-up\)"
        ),
        "note.outlived-job",
    ),
)

#: Who deemed the worker lost, as the judge writes it (readings/analysis.py) -> message key.
_LOST_BY = (
    (
        re.compile(
            r"(?P<first>.+); the platform's own deciders \((?P<deciders>.*)\) decided nothing"
        ),
        "note.lost-by.deciders-silent",
    ),
    (
        re.compile(r"(?P<by>.+); first noticed by (?P<first>.+), (?P<s>[0-9.]+) s earlier"),
        "note.lost-by.noticed-first",
    ),
)


def note_text(t: Translator, note: str) -> str:
    """A note of the four answers in the report's language (unknown: as recorded)."""
    for pattern, key in _NOTES:
        m = pattern.fullmatch(note)
        if m is not None:
            return t(key, **m.groupdict())
    return note


def lost_by_text(t: Translator, by: str) -> str:
    """Who deemed the worker lost, in the report's language (the decisions themselves, event
    kinds and sources, stay as recorded)."""
    for pattern, key in _LOST_BY:
        m = pattern.fullmatch(by)
        if m is not None:
            return t(key, **m.groupdict())
    return by


def item_title(t: Translator, s: Item) -> str:
    """An item's title as the plan gave it; a title faultdrill wrote itself (a harness
    control's, ``ctl.harness.title.<kind>``) in the report's language."""
    key = f"ctl.harness.title.{s.fault.kind}" if s.fault is not None else ""
    if s.control and t.has(key) and s.title == format_message("en", key, {}):
        return t(key)
    return s.title or ""


def mutation(t: Translator, s: Item) -> str:
    """What a control plants: the workload's known-bad switch (``key=value``), or for a
    control the harness makes without the job's help, its fault kind."""
    if s.workload_mutation:
        return ", ".join(f"{k}={v}" for k, v in s.workload_mutation.items())
    if s.fault is not None:
        return t("ctl.harness", kind=s.fault.kind)
    return t("na")


def controls_note(t: Translator, report: Report) -> str | None:
    """The judge's note that no negative control ran (and whether ``--no-controls`` waived
    them), in the report's language; None when the judge said nothing."""
    summ = report.summary
    if summ.controls_note is None:
        return None
    return t("summary.no-controls") + (t("summary.controls-waived") if summ.controls_waived else "")


def skip_reason(t: Translator, reason: str) -> str:
    """Why an item was not drilled, in the report's language (a reason this version does
    not know: as recorded)."""
    for pattern, key in _SKIPS:
        m = pattern.fullmatch(reason)
        if m is not None:
            return t(key, **m.groupdict())
    return reason


def outcome(t: Translator, state: str | None) -> str:
    """How the job ended (succeeded, failed, stopped), in words."""
    return t.opt(f"job.state.{state}", state) if state else t("job.ended.none")


def topology(t: Translator, plan: RecordedPlan) -> str:
    """The job's layout: nodes, processes per node, spares, isolation."""
    res = plan.resources
    return t(
        "topology",
        nodes=res.nodes,
        ppn=res.procs_per_node,
        spares=res.spares,
        isolation=res.isolation,
    )


def window(t: Translator, recorded: object) -> str:
    """The baseline's observation window: how long, from when to when (UTC)."""
    if not isinstance(recorded, dict):
        return t("na")
    return t(
        "obs.window",
        seconds=t.seconds(recorded.get("seconds")),
        start=utc(t, recorded.get("start")),
        end=utc(t, recorded.get("end")),
    )


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
    if any(k.startswith(("storage", "corrupt", "data")) for k in kinds):
        extra.append("mounts")
    return t("perm.root", extra="".join(", " + e for e in extra))
