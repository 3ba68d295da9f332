"""The parts about what the recovered job computed and where it ran: held-out evaluation
and the exported artefact (their checks; the HTML plots the values), the trend after
recovery against the baseline's, which node got which rank per incarnation, and each
rank's step times around a straggler or a hang."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faultdrill.i18n import Translator
from faultdrill.report import words
from faultdrill.report.blocks import Badge, Code, Link, Para, Part, Row, Strong, Table, Text
from faultdrill.report.model import Item, RankPlace
from faultdrill.report.parts.common import after_injection, as_map, finding_anchor, pick, value

__all__ = [
    "RESULT_CHECKS",
    "evaluation_part",
    "rank_times_part",
    "scheduling_part",
    "trend_part",
]

#: The result checks beyond the training loss: held-out evaluation and the exported file.
RESULT_CHECKS = ("results.evaluation-matches-baseline", "results.artifact-intact")


def evaluation_part(t: Translator, s: Item) -> Part | None:
    """The held-out evaluation and the exported artefact: each check's verdict and what
    it found (the HTML adds the plot of the values, baseline against drill)."""
    rows = [
        Row(
            [
                Link(Code(f.check), finding_anchor(s.id, f.check)),
                Badge(f.verdict, t.verdict(f.verdict)),
                words.finding_text(t, f),
            ],
            data={"check": f.check},
        )
        for f in s.evidence.results.findings
        if f.check in RESULT_CHECKS
    ]
    if not rows:
        return None
    head = [t("col.check"), t("col.verdict"), t("col.message")]
    blocks: list[Para | Table] = [
        Para(t("eval.intro"), cls="note"),
        Table(head, rows, cls="evaluation"),
    ]
    return Part("evaluation", t("part.evaluation"), blocks)


def _said(t: Translator, trend: Mapping[str, Any], key: str) -> str:
    messages = trend.get("messages")
    said = messages.get(key) if isinstance(messages, Mapping) else None
    if isinstance(said, Mapping):
        return t.message(said.get("message_id"), said.get("params") or {}, str(trend.get(key)))
    return value(t, trend.get(key))


def _pair(t: Translator, a: Any, b: Any, fmt: str = "{:.4g}") -> str:
    def one(v: Any) -> str:
        return fmt.format(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else "—"

    return t("trend.pair", drill=one(a), baseline=one(b))


def _series_row(t: Translator, name: str, s: Mapping[str, Any]) -> Row:
    within = s.get("within")
    verdict = pick(within, "pass", "fail", "retest")
    said = pick(within, t("trend.within"), t("trend.outside"), t("na"))
    steps = (
        t("trend.steps", n=s.get("steps"), a=s.get("from_step"), b=s.get("to_step"))
        if s.get("steps")
        else t("results.no-common-step")
    )
    return Row(
        [
            Code(name),
            steps,
            _pair(t, s.get("mean"), s.get("baseline_mean")),
            _pair(t, s.get("last"), s.get("baseline_last")),
            _pair(t, s.get("slope"), s.get("baseline_slope"), "{:.3g}"),
            Badge(verdict, said),
        ],
        data={"series": name},
    )


def trend_part(t: Translator, s: Item) -> Part | None:
    """The loss and held-out metrics after recovery against the baseline's: mean, last
    value and slope over the window, and whether a later drift shows."""
    tr = s.trend
    if not tr:
        return None
    step = tr.get("recovery_step")
    head_line: list[Text] = [_said(t, tr, "why")]
    if step is not None:
        head_line += [
            t("list.sep"),
            t("trend.from", step=step, what=_said(t, tr, "recovery_step_is")),
        ]
    blocks: list[Para | Table] = [Para(head_line)]
    series: list[tuple[str, Mapping[str, Any]]] = []
    if isinstance(tr.get("loss"), Mapping):
        series.append(("loss", as_map(tr["loss"])))
    series += [(str(k), as_map(v)) for k, v in as_map(tr.get("metrics")).items()]
    if series:
        head = [
            t("col.series"),
            t("col.steps"),
            t("col.mean"),
            t("col.last"),
            t("col.slope"),
            t("col.within"),
        ]
        blocks.append(Table(head, [_series_row(t, n, v) for n, v in series], cls="trend"))
    key = pick(tr.get("drift"), "trend.drift", "trend.no_drift", "trend.not_compared")
    blocks.append(Para(Strong(t(key))))
    return Part("trend", t("part.trend"), blocks)


def _ranks(t: Translator, ranks: list[RankPlace] | None) -> str:
    if ranks is None:
        return t("na")
    return t("list.sep").join(
        t("sched.rank", rank=r.rank, node=value(t, r.node), pid=value(t, r.pid)) for r in ranks
    )


def scheduling_part(t: Translator, s: Item) -> Part | None:
    """Which node got which rank, per incarnation, and when each was ready."""
    if not s.scheduling:
        return None
    rows = []
    for inc in s.scheduling:
        since = inc.ready_since_injection_s
        ready = (
            after_injection(t, since)
            if since is not None
            else t("sched.after_start", v=float(inc.ready_s or 0))
        )
        rows.append(
            Row(
                [
                    str(inc.incarnation),
                    ready,
                    value(t, inc.world_size),
                    value(t, inc.master),
                    _ranks(t, inc.ranks),
                ],
                data={"incarnation": str(inc.incarnation)},
            )
        )
    head = [
        t("col.incarnation"),
        t("col.ready_at"),
        t("col.world"),
        t("col.master"),
        t("col.ranks"),
    ]
    return Part("scheduling", t("part.scheduling"), [Table(head, rows, cls="scheduling")])


def _seconds(t: Translator, v: Any) -> str:
    return t("seconds", v=float(v)) if isinstance(v, int | float) else t("na")


def _straggler_rows(t: Translator, data: Mapping[str, Any]) -> list[Row]:
    rows = []
    for rank, medians in _by_rank(as_map(data.get("ranks"))):
        said = medians if isinstance(medians, list) else []  # a report is untrusted input
        before, during, after = [*said, None, None, None][:3]
        slow = (
            t("rank_times.slowdown", x=during / before)
            if isinstance(before, int | float) and before and isinstance(during, int | float)
            else t("na")
        )
        cells = [str(rank), _seconds(t, before), _seconds(t, during), _seconds(t, after), slow]
        rows.append(Row(cells, data={"rank": str(rank)}))
    return rows


def _by_rank(m: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """A finding's per-rank map in rank order (a key that is not a number last)."""
    return sorted(
        m.items(), key=lambda kv: (not kv[0].isdigit(), int(kv[0]) if kv[0].isdigit() else 0, kv[0])
    )


def _hang_rows(t: Translator, data: Mapping[str, Any]) -> list[Row]:
    rows = []
    for rank, blocked in _by_rank(as_map(data.get("blocked_s"))):
        said = _seconds(t, blocked) if blocked is not None else t("rank_times.never")
        rows.append(Row([str(rank), said], data={"rank": str(rank)}))
    return rows


def rank_times_part(t: Translator, s: Item) -> Part | None:
    """Each rank's step times around the fault, from the finding that measured them: the
    median before, during and after a slow-worker's throttle (and the slowdown), or how
    long each rank was blocked by a hang-worker. None for every other item."""
    for f in s.evidence.progress.findings:
        if f.check == "progress.straggler-tolerated" and as_map(f.data).get("ranks"):
            head = [
                t("col.rank"),
                t("col.step_before"),
                t("col.step_during"),
                t("col.step_after"),
                t("col.slowdown"),
            ]
            window = f.data.get("window_s")
            intro = t(
                "rank_times.straggler",
                window=float(window) if isinstance(window, int | float) else 0.0,
            )
            table = Table(head, _straggler_rows(t, f.data), cls="rank-times")
            return Part("rank-times", t("part.rank_times"), [Para(intro, cls="note"), table])
        if f.check == "progress.hang-detected" and as_map(f.data).get("blocked_s"):
            head = [t("col.rank"), t("col.blocked")]
            intro = t("rank_times.hang")
            table = Table(head, _hang_rows(t, f.data), cls="rank-times")
            return Part("rank-times", t("part.rank_times"), [Para(intro, cls="note"), table])
    return None
