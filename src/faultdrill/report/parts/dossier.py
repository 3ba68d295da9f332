"""The baseline's dossiers, each section rendered for a reader (methodology: 任务、数据、资源、
恢复、责任档案): labels in the report's language, units (seconds, bytes, Hz), times of day
instead of epoch seconds, the data's access identity and change record, the resources'
devices, quotas and scheduling result, and who owns what a recovery may depend on."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from faultdrill.i18n import Translator
from faultdrill.report.blocks import Code, Para, Part, Row, Strong, Table, Text, plain
from faultdrill.report.model import Report
from faultdrill.report.parts.common import as_map, pick, size, utc, value
from faultdrill.report.parts.recovery import owner

__all__ = ["SECTIONS", "dossier_parts"]

#: Dossier sections in report order; any other recorded section follows, labelled as recorded.
SECTIONS = (
    "task",
    "data",
    "resources",
    "recovery",
    "responsibility",
    "ownership",
    "observation",
    "seeds",
    "environment",
    "replay",
)
#: Keys said with a unit.
_SECONDS = ("_s", "seconds")
_HZ = ("_hz",)
_BYTES = ("bytes", "memory_bytes")


def _label(t: Translator, section: str, key: str) -> str:
    return t.opt(f"dossier.{section}.{key}", t.opt(f"field.{key}", key.replace("_", " ")))


def _when(v: Any) -> str:
    """Epoch seconds as a UTC time of day (reports are read on other machines)."""
    stamp = dt.datetime.fromtimestamp(float(v), dt.timezone.utc)
    return stamp.isoformat(timespec="seconds").replace("+00:00", " UTC")


def _said(t: Translator, key: str, v: Any) -> Text:
    """One recorded value, with its unit when its key says one."""
    if isinstance(v, bool) or v is None:
        return value(t, v)
    if isinstance(v, (int, float)):
        if key in ("start", "end") and v > 1e9:
            return _when(v)
        if key.endswith(_SECONDS):
            return t.seconds(v)
        if key.endswith(_HZ):
            return t("hz", v=v)
        if key in _BYTES:
            return size(t, v)
        return value(t, v)
    if isinstance(v, str) and len(v) > 40 and all(c in "0123456789abcdef" for c in v):
        return Code(v[:16] + "…")
    if isinstance(v, Mapping):
        return (
            "; ".join(
                f"{t.opt('field.' + str(k), k)} {plain(_said(t, str(k), x))}" for k, x in v.items()
            )
            or "—"
        )
    if isinstance(v, list):
        if all(isinstance(x, Mapping) for x in v):
            return " | ".join(plain(_said(t, key, x)) for x in v) or t("none")
        return ", ".join(plain(_said(t, key, x)) for x in v) or t("none")
    return str(v)


def _rows(
    t: Translator, section: str, data: Mapping[str, Any], skip: tuple[str, ...] = ()
) -> list[Row]:
    return [
        Row([_label(t, section, k), _said(t, k, v)], data={"field": k})
        for k, v in data.items()
        if k not in skip
    ]


def _table(t: Translator, rows: list[Row]) -> Table:
    return Table([t("col.item"), t("col.value")], rows, cls="dossier")


def _data(t: Translator, d: Mapping[str, Any]) -> list[Para | Table]:
    """The data dossier: the plan's data, the access identity, the change record."""
    rows = _rows(t, "data", d, skip=("access_identity", "change_record"))
    ident = as_map(d.get("access_identity"))
    observed = [
        t(
            "data.identity",
            user=value(t, x.get("user")),
            uid=value(t, x.get("uid")),
            nodes=", ".join(x.get("nodes") or []),
        )
        for x in ident.get("observed") or []
        if isinstance(x, Mapping)
    ]
    rows.append(Row([t("dossier.data.access_declared"), value(t, ident.get("declared"))]))
    rows.append(Row([t("dossier.data.access_observed"), t("list.sep").join(observed) or t("na")]))
    out: list[Para | Table] = [_table(t, rows)]
    rec = d.get("change_record")
    if isinstance(rec, Mapping):
        out += _change_record(t, rec)
    return out


def _change_record(t: Translator, rec: Mapping[str, Any]) -> list[Para | Table]:
    changed = pick(
        rec.get("changed"), "data.changed.yes", "data.changed.no", "data.changed.unknown"
    )
    snaps = [
        Row(
            [
                t.opt(f"data.when.{s.get('when')}", s.get("when")),
                utc(t, s.get("at")),
                Code(str(s.get("sha256"))[:16] + "…") if s.get("sha256") else t("data.not_hashed"),
            ]
        )
        for s in rec.get("snapshots") or []
        if isinstance(s, Mapping)
    ]
    reported = as_map(rec.get("reported_by_job"))
    digests = {str(d) for v in reported.values() if isinstance(v, list) for d in v}
    seen = t(
        "data.reported",
        n=len(reported),
        digests=", ".join(sorted(d[:16] + "…" for d in digests)) or t("none"),
    )
    return [
        Para([Strong(t("data.change_record")), t("colon"), t(changed)]),
        Table([t("col.when"), t("col.at"), t("col.sha256")], snaps, cls="snapshots"),
        Para(seen, cls="note"),
    ]


def _resources(t: Translator, r: Mapping[str, Any]) -> list[Para | Table]:
    rows = _rows(t, "resources", r, skip=("scheduling", "timeouts_note"))
    out: list[Para | Table] = [_table(t, rows)]
    sched = r.get("scheduling")
    if isinstance(sched, list) and sched:
        ranks = [
            Row(
                [
                    str(inc.get("incarnation")),
                    value(t, inc.get("world_size")),
                    value(t, inc.get("master")),
                    t("list.sep").join(
                        t(
                            "sched.rank",
                            rank=x.get("rank"),
                            node=value(t, x.get("node")),
                            pid=value(t, x.get("pid")),
                        )
                        for x in inc.get("ranks") or []
                        if isinstance(x, Mapping)
                    ),
                ]
            )
            for inc in sched
            if isinstance(inc, Mapping)
        ]
        head = [t("col.incarnation"), t("col.world"), t("col.master"), t("col.ranks")]
        out += [
            Para(Strong(t("dossier.resources.scheduling"))),
            Table(head, ranks, cls="scheduling"),
        ]
    return out


def _ownership(t: Translator, o: Mapping[str, Any]) -> list[Para | Table]:
    rows = [
        Row([t.opt(f"dep.name.{k}", k), owner(t, v)], data={"dependency": k}) for k, v in o.items()
    ]
    return [_table(t, rows)]


def _observation(t: Translator, o: Mapping[str, Any]) -> list[Para | Table]:
    rows = _rows(t, "observation", o, skip=("baseline_window", "post_window"))
    win = o.get("baseline_window")
    if isinstance(win, Mapping):
        text = t(
            "obs.window",
            seconds=t.seconds(win.get("seconds")),
            start=_said(t, "start", win.get("start")),
            end=_said(t, "end", win.get("end")),
        )
        rows.append(Row([t("dossier.observation.baseline_window"), text]))
    post = o.get("post_window")
    if isinstance(post, Mapping):
        rows.append(
            Row(
                [
                    t("dossier.observation.post_window"),
                    t(
                        "obs.post",
                        seconds=t.seconds(post.get("post_s")),
                        steps=value(t, post.get("post_steps")),
                    ),
                ]
            )
        )
    return [_table(t, rows)]


def _recorded(report: Report) -> dict[str, Any]:
    """The baseline's dossiers as recorded, or (an old or partial run) the plan's sections."""
    dossier = report.baseline.dossier.to_json() if report.baseline.dossier else {}
    if dossier:
        return dossier
    plan = report.plan
    return {
        "task": plan.task.to_json(),
        "data": plan.data.to_json(),
        "resources": plan.resources.to_json(),
        "recovery": {"checkpoint": plan.checkpoint.to_json()},
        "responsibility": plan.responsibility.to_json(),
    }


def _section(t: Translator, key: str, data: Any) -> list[Para | Table]:
    if not isinstance(data, Mapping):
        return [Para(value(t, data))]
    if key == "data":
        return _data(t, data)
    if key == "resources":
        return _resources(t, data)
    if key == "ownership":
        return _ownership(t, data)
    if key == "observation":
        return _observation(t, data)
    return [_table(t, _rows(t, key, data))]


def dossier_parts(t: Translator, report: Report) -> list[Part]:
    """Every dossier section: the known ones first, under their names; then any other."""
    dossier = _recorded(report)
    keys = [k for k in SECTIONS if k in dossier] + [k for k in dossier if k not in SECTIONS]
    return [
        Part(f"dossier-{key}", t.opt(f"dossier.{key}", key), _section(t, key, dossier[key]))
        for key in keys
    ]
