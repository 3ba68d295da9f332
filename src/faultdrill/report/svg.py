"""The pictures of the HTML report, drawn as inline SVG from a recorded item's event files.

* :func:`timeline_svg`: swimlanes on one clock (seconds since the injection): the job's
  state, each node (agent life, the platform's decisions), each rank's incarnations
  (process lives from the sampler, stepping inside them), checkpoints saved and loaded, the
  network track when ``net`` events exist, injection windows shaded, and the four questions
  as numbered vertical lines.
* :func:`loss_svg`: the fault-free baseline's loss per step against the drill's, one line
  per incarnation, with the resume point and the injection step marked.

Both read only what the run recorded (``<item>/events/*.jsonl``) plus the answers already
in ``report.json``, so any run directory or unpacked bundle can be drawn again. Nothing
here needs network access: no fonts, scripts or images are referenced.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

import numpy as np

from faultdrill.judge.analysis import LOST_KINDS
from faultdrill.report.i18n import Translator
from faultdrill.timeline import Timeline

__all__ = [
    "PALETTE",
    "ItemView",
    "item_events_dir",
    "load_item",
    "loss_svg",
    "proc_rows",
    "timeline_svg",
]

PALETTE = ("#2563eb", "#d97706", "#059669", "#7c3aed", "#db2777", "#0891b2", "#65a30d")
STATE_COLOURS = {
    "pending": "#cbd5e1",
    "running": "#60a5fa",
    "succeeded": "#34d399",
    "failed": "#f87171",
    "stopped": "#fb923c",
    "unknown": "#e5e7eb",
}
#: Platform event kinds that mean "a replica or node is gone" (unknown kinds still appear
#: as plain marks).
_LOST = LOST_KINDS
_NODE_TICKS = frozenset({"rdzv_complete", "workers_starting", "workers_succeeded"})


def item_events_dir(run_dir: Path, item_id: str, control: bool | None) -> Path:
    """Where an item's events live: ``baseline``, ``scenarios/ID`` or ``controls/ID``."""
    if control is None:
        return run_dir / "baseline" / "events"
    return run_dir / ("controls" if control else "scenarios") / item_id / "events"


@dataclass
class ItemView:
    """One item's timeline, loaded once for every picture of it."""

    tl: Timeline
    origin: float  # mono of the injection (or of the first event)
    injected: bool
    t_min: float
    t_max: float
    windows: list[tuple[float, float, str]] = field(default_factory=list)

    def rel(self, mono: float) -> float:
        return mono - self.origin


def load_item(events_dir: Path) -> ItemView | None:
    """The item's timeline, or None when its event files are not there."""
    if not events_dir.is_dir() or not any(events_dir.glob("*.jsonl")):
        return None
    tl = Timeline.load(events_dir)
    monos = [e.mono for e in tl.events]
    if len(tl.steps):
        monos += [float(tl.steps.mono.min()), float(tl.steps.mono.max())]
    if not monos:
        return None
    inj = tl.of("fault", "injected")
    origin = inj[0].mono if inj else min(monos)
    view = ItemView(tl, origin, bool(inj), min(monos) - origin, max(monos) - origin)
    # injection windows: inject_start (or injected) .. reverted (one-shot faults: a sliver)
    starts = tl.of("fault", "inject_start") or inj
    ends = tl.of("fault", "reverted") + tl.of("fault", "revert_failed")
    for i, st in enumerate(starts):
        label = f"{st.get('fault', '?')} {st.get('target', '')}".strip()
        done = inj[i] if i < len(inj) else None
        if done is not None and done.get("duration_s") is None:
            end = done.mono  # one-shot (a signal): the window is the act itself
        else:
            end = next((e.mono for e in ends if e.mono >= st.mono), max(monos))
        view.windows.append((view.rel(st.mono), view.rel(end), label))
    return view


# --- drawing helpers --------------------------------------------------------------------


def _nice_ticks(lo: float, hi: float, n: int = 8) -> list[float]:
    if not math.isfinite(lo) or not math.isfinite(hi) or hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    out = []
    v = first
    while v <= hi + 1e-9:
        out.append(round(v, 10))
        v += step
    return out


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v - round(v)) < 1e-9 else f"{v:.1f}"


class _Svg:
    def __init__(self, width: int, height: int, cls: str, label: str) -> None:
        self.parts: list[str] = [
            f'<svg xmlns="http://www.w3.org/2000/svg" class="{cls}" role="img" '
            f'viewBox="0 0 {width} {height}" width="100%" aria-label="{escape(label)}">',
            f"<title>{escape(label)}</title>",
        ]

    def add(self, s: str) -> None:
        self.parts.append(s)

    def rect(
        self, x: float, y: float, w: float, h: float, fill: str, title: str = "", extra: str = ""
    ) -> None:
        t = f"<title>{escape(title)}</title>" if title else ""
        self.add(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 1.5):.1f}" height="{h:.1f}" '
            f'fill="{fill}" {extra}>{t}</rect>'
        )

    def text(self, x: float, y: float, s: str, cls: str = "", anchor: str = "start") -> None:
        c = f' class="{cls}"' if cls else ""
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{c}>{escape(s)}</text>')

    def line(
        self, x1: float, y1: float, x2: float, y2: float, stroke: str, extra: str = ""
    ) -> None:
        self.add(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke="{stroke}" {extra}/>'
        )

    def mark(self, x: float, y: float, shape: str, fill: str, title: str) -> None:
        t = f"<title>{escape(title)}</title>"
        if shape == "x":
            d = 4.5
            self.add(
                f'<g class="mark-x" stroke="{fill}" stroke-width="2.2">{t}'
                f'<line x1="{x - d:.1f}" y1="{y - d:.1f}" x2="{x + d:.1f}" y2="{y + d:.1f}"/>'
                f'<line x1="{x - d:.1f}" y1="{y + d:.1f}" x2="{x + d:.1f}" y2="{y - d:.1f}"/></g>'
            )
        elif shape in ("up", "down"):
            d = 5.5
            pts = (
                f"{x:.1f},{y - d:.1f} {x - d:.1f},{y + d:.1f} {x + d:.1f},{y + d:.1f}"
                if shape == "up"
                else f"{x:.1f},{y + d:.1f} {x - d:.1f},{y - d:.1f} {x + d:.1f},{y - d:.1f}"
            )
            self.add(f'<polygon points="{pts}" fill="{fill}">{t}</polygon>')
        else:
            self.add(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.2" fill="{fill}">{t}</circle>')

    def done(self) -> str:
        return "\n".join([*self.parts, "</svg>"])


# --- the timeline -----------------------------------------------------------------------

_W, _LEFT, _RIGHT, _TOP, _LANE, _GAP = 1000, 150, 985, 64, 20, 7


def timeline_svg(view: ItemView, item: dict[str, Any], t: Translator, *, item_id: str = "") -> str:
    """Swimlanes of one item. ``item`` is the item's entry in ``report.json``."""
    tl = view.tl
    lanes: list[tuple[str, str]] = [("job", t("lane.job"))]
    nodes = sorted({str(e.get("node")) for e in tl.events if e.src == "platform" and e.get("node")})
    spares = {str(e.get("node")) for e in tl.of("platform", "node") if e.get("spare") is True}
    lanes += [
        (f"node:{n}", t("lane.node", node=n) + (f" ({t('lane.spare')})" if n in spares else ""))
        for n in nodes
    ]
    ranks = sorted(
        {p.rank for p in tl.procs if p.role == "worker" and p.rank is not None}
        | {r for inc in tl.incarnations for r in inc.ranks}
    )
    lanes += [(f"rank:{r}", t("lane.rank", rank=r)) for r in ranks]
    lanes.append(("ckpt", t("lane.ckpt")))
    net = tl.of("net")
    net_nodes = _net_series(net)
    if net_nodes:
        lanes += [(f"net:{n}", t("lane.net.node", node=n)) for n in net_nodes]
    elif net:
        lanes.append(("net", t("lane.net")))
    height = _TOP + len(lanes) * (_LANE + _GAP) + 34
    lo, hi = view.t_min, view.t_max
    if hi - lo < 1e-6:
        hi = lo + 1.0
    pad = (hi - lo) * 0.01
    lo, hi = lo - pad, hi + pad

    def x(rel: float) -> float:
        return _LEFT + (rel - lo) / (hi - lo) * (_RIGHT - _LEFT)

    def X(mono: float) -> float:  # noqa: N802  (mono -> x, the common case)
        return x(view.rel(mono))

    ys = {key: float(_TOP + i * (_LANE + _GAP)) for i, (key, _l) in enumerate(lanes)}
    svg = _Svg(_W, height, "timeline", f"{t('html.timeline')} {item_id}".strip())
    svg.add(f'<g class="lanes" data-lanes="{len(lanes)}">')
    for key, label in lanes:
        y = ys[key]
        svg.rect(_LEFT, y, _RIGHT - _LEFT, _LANE, "#f8fafc", extra='class="lane-bg"')
        svg.text(_LEFT - 8, y + _LANE * 0.7, label, "lane-label", "end")
    svg.add("</g>")
    bottom = _TOP + len(lanes) * (_LANE + _GAP)

    # injection windows, under everything else
    for w0, w1, label in view.windows:
        svg.rect(
            x(w0),
            _TOP - 4,
            max(x(w1) - x(w0), 3.0),
            bottom - _TOP + 2,
            "#fecaca",
            t("tl.injection", what=label),
            'class="inject-window" opacity="0.75"',
        )

    # job state
    y = ys["job"]
    states = tl.of("platform", "job_state")
    sub = tl.first("platform", "job_submitted")
    prev_t = sub.mono if sub else (states[0].mono if states else None)
    prev_s = states[0].get("previous", "pending") if states else None
    for ev in states:
        if prev_t is not None and prev_s is not None:
            svg.rect(
                X(prev_t),
                y + 2,
                X(ev.mono) - X(prev_t),
                _LANE - 4,
                STATE_COLOURS.get(str(prev_s), "#e5e7eb"),
                str(prev_s),
                'class="state"',
            )
        prev_t, prev_s = ev.mono, ev.get("state")
    if prev_t is not None and prev_s is not None:
        end = view.origin + view.t_max
        svg.rect(
            X(prev_t),
            y + 2,
            X(end) - X(prev_t),
            _LANE - 4,
            STATE_COLOURS.get(str(prev_s), "#e5e7eb"),
            str(prev_s),
            'class="state"',
        )
        if X(end) - X(prev_t) > 75:
            svg.text(X(prev_t) + 3, y + _LANE * 0.7, str(prev_s), "in-bar")
    for ev in tl.events:
        if ev.src == "harness" and ev.kind in ("operator_action", "stop_condition"):
            title = f"{ev.kind}: " + ", ".join(f"{k}={v}" for k, v in ev.fields.items())
            svg.mark(X(ev.mono), y + _LANE / 2, "x", "#7c2d12", title)
        elif ev.src == "platform" and ev.kind in ("job_resubmitted", "job_stop", "job_kill"):
            svg.mark(X(ev.mono), y + _LANE / 2, "dot", "#334155", ev.kind)

    # nodes: agent lives and platform decisions
    agent_pid_node = {
        int(e.get("pid", -1)): str(e.get("node")) for e in tl.of("platform", "agent_spawned")
    }
    for p in tl.procs:
        if p.role == "agent":
            node = agent_pid_node.get(p.pid, p.node)
            if f"node:{node}" in ys:
                end = p.gone_mono if p.gone_mono is not None else p.last_seen_mono
                svg.rect(
                    X(p.seen_mono),
                    ys[f"node:{node}"] + 6,
                    X(end) - X(p.seen_mono),
                    _LANE - 12,
                    "#94a3b8",
                    f"agent pid {p.pid}",
                    'class="agent"',
                )
    # node down periods first (under the marks), then the platform's decisions
    down: list[tuple[str, float, float, str]] = []
    down_since: dict[str, tuple[float, str]] = {}
    for ev in tl.events:
        node = str(ev.get("node"))
        if ev.src != "platform" or ev.kind not in ("node", "node_state"):
            continue
        state = str(ev.get("state", ""))
        if state not in ("up", "spare") and node not in down_since:
            down_since[node] = (ev.mono, f"{state}: {ev.get('reason', '')}".rstrip(": "))
        elif state == "up" and node in down_since:
            t0, why = down_since.pop(node)
            down.append((node, t0, ev.mono, why))
    for node, (t0, why) in down_since.items():
        down.append((node, t0, view.origin + view.t_max, why))
    for node, t0, t1, why in down:
        if f"node:{node}" in ys:
            y = ys[f"node:{node}"]
            svg.rect(X(t0), y + 2, X(t1) - X(t0), _LANE - 4, "#fca5a5", why, 'class="node-down"')
    for ev in tl.events:
        key = f"node:{ev.get('node')}"
        if ev.src != "platform" or key not in ys:
            continue
        yy = ys[key] + _LANE / 2
        if ev.kind in _LOST:
            msg = str(ev.get("msg", "") or ev.get("reason", ""))[:160]
            svg.mark(X(ev.mono), yy, "x", "#dc2626", f"{ev.kind} ({ev.get('node')}) {msg}".strip())
        elif ev.kind in _NODE_TICKS:
            svg.mark(X(ev.mono), yy, "dot", "#16a34a", f"{ev.kind} ({ev.get('node')})")

    # ranks: one bar per worker process, coloured by incarnation; stepping inside it
    st = tl.steps
    seen_pids: set[int] = set()
    for p in tl.procs:
        if p.role != "worker" or p.rank is None or f"rank:{p.rank}" not in ys:
            continue
        seen_pids.add(p.pid)
        inc = tl.inc_of_pid(p.pid)
        colour = PALETTE[inc % len(PALETTE)] if inc is not None else "#64748b"
        end = p.gone_mono if p.gone_mono is not None else p.last_seen_mono
        yy = ys[f"rank:{p.rank}"]
        label = t("tl.inc", inc=inc if inc is not None else "?")
        svg.rect(
            X(p.seen_mono),
            yy + 2,
            X(end) - X(p.seen_mono),
            _LANE - 4,
            colour,
            f"{label}: pid {p.pid}",
            f'class="replica" data-inc="{inc}" opacity="0.35"',
        )
        rows = st.pid == p.pid
        if rows.any():
            m0, m1 = float(st.mono[rows].min()), float(st.mono[rows].max())
            s0, s1 = int(st.step[rows].min()), int(st.step[rows].max())
            svg.rect(
                X(m0),
                yy + 5,
                X(m1) - X(m0),
                _LANE - 10,
                colour,
                f"{label}: pid {p.pid}, steps {s0}-{s1}",
                f'class="stepping" data-inc="{inc}"',
            )
            if X(m1) - X(m0) > 46:
                svg.text(X(m0) + 3, yy + _LANE * 0.72, f"{s0}-{s1}", "in-bar light")
    for gen in tl.incarnations:  # replicas the sampler never saw: from their own reports
        for pid, rank in gen.members.items():
            if pid in seen_pids or f"rank:{rank}" not in ys:
                continue
            rows = st.pid == pid
            start = next((e.mono for e in gen.starts if int(e.get("pid", -1)) == pid), None)
            if start is None:
                continue
            last = float(st.mono[rows].max()) if rows.any() else start
            svg.rect(
                X(start),
                ys[f"rank:{rank}"] + 5,
                X(last) - X(start),
                _LANE - 10,
                PALETTE[gen.index % len(PALETTE)],
                f"{t('tl.inc', inc=gen.index)}: pid {pid} (not sampled)",
                f'class="stepping" data-inc="{gen.index}"',
            )

    # checkpoints
    y = ys["ckpt"] + _LANE / 2
    saved: dict[str, Any] = {}
    for ev in tl.of("probe", "ckpt_save"):
        saved.setdefault(str(ev.get("id")), ev)
    for cid, ev in saved.items():
        svg.mark(X(ev.mono), y, "up", "#0f766e", t("tl.saved", id=cid, step=ev.get("step")))
    loaded: set[tuple[int, str]] = set()
    for gen in tl.incarnations:
        ld = gen.load
        if ld is None:
            continue
        pair = (gen.index, str(ld.get("id")))
        if pair in loaded:
            continue
        loaded.add(pair)
        if ld.kind == "ckpt_load":
            svg.mark(
                X(ld.mono),
                y,
                "down",
                "#b45309",
                t("tl.loaded", id=ld.get("id"), step=ld.get("step")),
            )

    # network track: per node, traffic as a filled sparkline, probe round trips as a line,
    # dropped packets marked; other ``net`` events as plain ticks
    for node, ser in net_nodes.items():
        y0 = ys[f"net:{node}"]
        rates = ser["rate"]
        if len(rates) > 1:
            vmax = max(v for _t, v in rates) or 1.0
            pts = [(X(tt), y0 + _LANE - 2 - (v / vmax) * (_LANE - 4)) for tt, v in rates]
            poly = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
            base = f"{pts[-1][0]:.1f},{y0 + _LANE - 2:.1f} {pts[0][0]:.1f},{y0 + _LANE - 2:.1f}"
            svg.add(
                f'<polygon class="net-rate" points="{poly} {base}" fill="#bae6fd" '
                f'stroke="#0369a1" stroke-width="0.8"><title>{escape(node)}: '
                f"{escape(t('tl.net.rate', v=vmax / 1024))}</title></polygon>"
            )
        rtts = ser["rtt"]
        if len(rtts) > 1:
            rmax = max(v for _t, v in rtts) or 1.0
            poly = " ".join(
                f"{X(tt):.1f},{y0 + _LANE - 2 - (v / rmax) * (_LANE - 4):.1f}" for tt, v in rtts
            )
            svg.add(
                f'<polyline class="net-rtt" points="{poly}" fill="none" stroke="#be123c" '
                f'stroke-width="1"><title>{escape(node)}: '
                f"{escape(t('tl.net.rtt', v=rmax))}</title></polyline>"
            )
        for tt, what in ser["events"]:
            svg.mark(X(tt), y0 + _LANE / 2, "x", "#be123c", f"{node}: {what}")
        for t0, t1, peers in ser["silent"]:
            svg.rect(
                X(t0),
                y0 + 1,
                X(t1) - X(t0),
                3,
                "#be123c",
                f"{node}: {t('tl.net.silent', peers=peers)}",
                'class="net-silent"',
            )
    if net and not net_nodes:
        y0 = ys["net"]
        series: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for ev in net:
            for k, v in ev.fields.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("pid",):
                    series[k].append((ev.mono, float(v)))
        key_name = next(
            (k for k in ("rtt_ms", "rtt_s", "loss", "drops", "tx_bytes") if k in series),
            next(iter(series), None),
        )
        if key_name and len(series[key_name]) > 1:
            pts = series[key_name]
            vmax = max(v for _t, v in pts) or 1.0
            poly = " ".join(
                f"{X(tt):.1f},{y0 + _LANE - 2 - (v / vmax) * (_LANE - 4):.1f}" for tt, v in pts
            )
            svg.add(
                f'<polyline points="{poly}" fill="none" stroke="#0369a1" stroke-width="1.2">'
                f"<title>{escape(key_name)} (max {vmax:g})</title></polyline>"
            )
        else:
            for ev in net:
                svg.mark(X(ev.mono), y0 + _LANE / 2, "dot", "#0369a1", ev.kind)

    # the four questions
    q = item.get("questions") or {}
    placed: list[float] = []
    for n, key in (
        (1, "worker_lost_at"),
        (2, "old_replica_stopped_at"),
        (3, "new_replicas_ready_at"),
        (4, "first_step_after_at"),
    ):
        at = q.get(key)
        if not at or at.get("mono") is None:
            continue
        xx = X(float(at["mono"]))
        # close markers stack upwards instead of hiding each other
        row = sum(1 for p in placed if abs(p - xx) < 17)
        placed.append(xx)
        cy = _TOP - 16 - row * 19
        svg.add(f'<g class="question" data-q="{n}">')
        svg.line(xx, cy + 8, xx, bottom, "#111827", 'stroke-dasharray="3,3" stroke-width="1"')
        svg.add(
            f'<circle cx="{xx:.1f}" cy="{cy:.1f}" r="8" fill="#111827">'
            f"<title>{n}. {escape(t(f'q.{n}'))}: {escape(str(at.get('wall')))}</title></circle>"
        )
        svg.text(xx, cy + 3.5, str(n), "qnum", "middle")
        svg.add("</g>")

    # axis
    svg.line(_LEFT, bottom, _RIGHT, bottom, "#475569")
    for v in _nice_ticks(lo, hi):
        svg.line(x(v), bottom, x(v), bottom + 4, "#475569")
        svg.text(x(v), bottom + 15, _fmt(v), "tick", "middle")
    svg.text(
        (_LEFT + _RIGHT) / 2,
        bottom + 29,
        t("tl.axis") if view.injected else t("tl.axis.start"),
        "axis",
        "middle",
    )
    return svg.done()


# --- loss ---------------------------------------------------------------------------------


def _mean_by_step(steps: np.ndarray, loss: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ok = np.isfinite(loss)
    steps, loss = steps[ok], loss[ok]
    if steps.size == 0:
        return steps, loss
    uniq, inv = np.unique(steps, return_inverse=True)
    return uniq, np.bincount(inv, weights=loss) / np.bincount(inv)


def loss_svg(
    view: ItemView, baseline: ItemView | None, item: dict[str, Any], t: Translator
) -> str | None:
    """Baseline vs drill loss per step, or None when there are no step events."""
    st = view.tl.steps
    if len(st) == 0:
        return None
    series: list[tuple[str, str, np.ndarray, np.ndarray, str]] = []
    if baseline is not None and len(baseline.tl.steps):
        chain, _notes = baseline.tl.committed_chain()
        bst = baseline.tl.steps
        rows = baseline.tl.rows_in(chain) if chain else np.ones(len(bst), bool)
        bs, bl = _mean_by_step(bst.step[rows], bst.loss[rows])
        series.append(("baseline", t("loss.baseline"), bs, bl, "#9ca3af"))
    for inc in sorted({int(i) for i in st.inc}):
        rows = st.inc == inc
        s, lv = _mean_by_step(st.step[rows], st.loss[rows])
        colour = PALETTE[inc % len(PALETTE)] if inc >= 0 else "#64748b"
        series.append((f"inc{inc}", t("tl.inc", inc=inc), s, lv, colour))
    allx = np.concatenate([s[2] for s in series if s[2].size])
    ally = np.concatenate([s[3] for s in series if s[3].size])
    if allx.size == 0:
        return None
    w, h, left, right, top, bottom = 1000, 300, 70, 975, 20, 250
    x0, x1 = 0.0, float(allx.max())
    y0, y1 = float(ally.min()), float(ally.max())
    if y1 - y0 < 1e-9:
        y0, y1 = y0 - 0.5, y1 + 0.5
    ypad = (y1 - y0) * 0.06
    y0, y1 = y0 - ypad, y1 + ypad
    x1 = max(x1, 1.0)

    def px(v: float) -> float:
        return left + (v - x0) / (x1 - x0) * (right - left)

    def py(v: float) -> float:
        return bottom - (v - y0) / (y1 - y0) * (bottom - top)

    svg = _Svg(w, h, "losscurve", t("html.loss"))
    svg.rect(left, top, right - left, bottom - top, "#f8fafc")
    for v in _nice_ticks(y0, y1, 5):
        svg.line(left, py(v), right, py(v), "#e2e8f0")
        svg.text(left - 6, py(v) + 4, f"{v:.3g}", "tick", "end")
    for v in _nice_ticks(x0, x1, 10):
        svg.line(px(v), bottom, px(v), bottom + 4, "#475569")
        svg.text(px(v), bottom + 16, _fmt(v), "tick", "middle")
    svg.text((left + right) / 2, bottom + 34, t("loss.axis.x"), "axis", "middle")
    svg.text(14, (top + bottom) / 2, t("loss.axis.y"), "axis", "middle")
    fault = view.tl.first("fault", "injected")
    if fault is not None and fault.get("at_step") is not None:
        xs = px(float(fault["at_step"]))
        svg.line(xs, top, xs, bottom, "#dc2626", 'stroke-width="1.2" class="fault-step"')
        svg.text(xs + 4, top + 12, t("loss.injected", step=fault["at_step"]), "note red")
        fault_x: float | None = xs
    else:
        fault_x = None
    resumed = (item.get("questions") or {}).get("resumed_from")
    if resumed and resumed.get("step") is not None:
        xr = px(float(resumed["step"]))
        svg.line(
            xr,
            top,
            xr,
            bottom,
            "#111827",
            'stroke-dasharray="5,4" stroke-width="1.4" class="resume"',
        )
        label = t("loss.resume", ckpt=resumed.get("checkpoint") or "-", step=resumed["step"])
        if fault_x is not None and fault_x > xr:  # the label goes left of its line
            svg.text(xr - 4, top + 28, label, "note", "end")
        else:
            svg.text(xr + 4, top + 28, label, "note")
    for key, label, s, lv, colour in series:
        if s.size == 0:
            continue
        pts = " ".join(f"{px(float(a)):.1f},{py(float(b)):.1f}" for a, b in zip(s, lv, strict=True))
        width = "7" if key == "baseline" else "1.8"
        opacity = ' stroke-opacity="0.7"' if key == "baseline" else ""
        svg.add(
            f'<polyline class="series" data-series="{key}" points="{pts}" fill="none" '
            f'stroke="{colour}" stroke-width="{width}"{opacity} stroke-linejoin="round">'
            f"<title>{escape(label)}</title></polyline>"
        )
    lx = right - 150
    for i, (_key, label, _s, _lv, colour) in enumerate(series):
        yy = top + 14 + i * 16
        svg.rect(lx, yy - 8, 14, 8, colour)
        svg.text(lx + 20, yy, label, "legend")
    return svg.done()


def _net_series(net: list[Any]) -> dict[str, dict[str, list[Any]]]:
    """Per node: traffic rate (bytes/s), worst probe round trip (ms), and marks for dropped
    packets and unanswered probes, from ``net_sample`` events (cumulative counters)."""
    out: dict[str, dict[str, list[Any]]] = {}
    last: dict[str, tuple[float, float, float]] = {}
    silent: dict[str, tuple[float, str] | None] = {}
    for ev in net:
        if ev.kind != "net_sample" or ev.get("node") is None:
            continue
        node = str(ev.get("node"))
        ser = out.setdefault(node, {"rate": [], "rtt": [], "events": [], "silent": []})
        total = float(ev.get("rx_bytes") or 0) + float(ev.get("tx_bytes") or 0)
        drops = float(ev.get("rx_drop") or 0) + float(ev.get("tx_drop") or 0)
        prev = last.get(node)
        if prev is not None and ev.mono > prev[0]:
            ser["rate"].append((ev.mono, max(0.0, (total - prev[1]) / (ev.mono - prev[0]))))
            if drops > prev[2]:
                ser["events"].append((ev.mono, f"{drops - prev[2]:g} packet(s) dropped"))
        last[node] = (ev.mono, total, drops)
        rtt = ev.get("rtt_ms")
        vals = list(rtt.values()) if isinstance(rtt, dict) else [rtt]
        nums = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if nums:
            ser["rtt"].append((ev.mono, max(nums)))
        # unanswered probes as intervals (one bar per silence, not one mark per sample)
        quiet = (
            ",".join(sorted(str(k) for k, v in rtt.items() if v is None))
            if isinstance(rtt, dict)
            else ""
        )
        open_ = silent.get(node)
        if quiet and open_ is None:
            silent[node] = (ev.mono, quiet)
        elif open_ is not None and (not quiet or quiet != open_[1]):
            ser["silent"].append((open_[0], ev.mono, open_[1]))
            silent[node] = (ev.mono, quiet) if quiet else None
    for node, open_ in silent.items():
        if open_ is not None:
            ser = out[node]
            end = ser["rtt"][-1][0] if ser["rtt"] else open_[0]
            ser["silent"].append((open_[0], max(end, open_[0]), open_[1]))
    return {n: s for n, s in out.items() if any(v > 0 for _t, v in s["rate"]) or s["rtt"]}


def proc_rows(view: ItemView) -> list[dict[str, Any]]:
    """The sampler's process lives, relative to the injection, for the resource table."""
    out = []
    for p in view.tl.procs:
        out.append(
            {
                "pid": p.pid,
                "role": p.role,
                "rank": p.rank,
                "node": p.node,
                "incarnation": view.tl.inc_of_pid(p.pid),
                "seen_s": round(view.rel(p.seen_mono), 2),
                "gone_s": None if p.gone_mono is None else round(view.rel(p.gone_mono), 2),
            }
        )
    return out
