"""The timeline picture: swimlanes on one clock (seconds since the injection).

Lanes, top to bottom: the job's state; each node (agent life, the platform's decisions,
down periods); each rank (process lives from the sampler, coloured by incarnation, with the
stepping inside them); checkpoints saved and loaded; the network track when ``net`` events
exist. Injection windows are shaded under everything, and the four questions are numbered
vertical lines. Drawn only from the item's recorded events plus the answers already in its
:class:`~faultdrill.report.model.Item`.
"""

from __future__ import annotations

from html import escape
from typing import Any

from faultdrill.i18n import Translator
from faultdrill.readings.analysis import LOST_KINDS
from faultdrill.report.model import Item
from faultdrill.report.svg.canvas import PALETTE, STATE_COLOURS, Svg, fmt, nice_ticks
from faultdrill.report.svg.frame import GAP, LANE, LEFT, RIGHT, TOP, WIDTH, Frame
from faultdrill.report.svg.net import draw_net, net_series
from faultdrill.report.svg.view import ItemView
from faultdrill.timeline import Timeline

__all__ = ["timeline_svg"]

#: Platform event kinds that mean "a replica or node is gone" (unknown kinds still appear
#: as plain marks).
_LOST = LOST_KINDS
_NODE_TICKS = frozenset({"rdzv_complete", "workers_starting", "workers_succeeded"})


def _lanes(tl: Timeline, t: Translator, net_nodes: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, label) of every lane, top to bottom."""
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
    if net_nodes:
        lanes += [(f"net:{n}", t("lane.net.node", node=n)) for n in net_nodes]
    elif tl.of("net"):
        lanes.append(("net", t("lane.net")))
    return lanes


def _frame(view: ItemView, lanes: list[tuple[str, str]], label: str) -> Frame:
    """The canvas with every lane's background and label drawn."""
    height = TOP + len(lanes) * (LANE + GAP) + 34
    lo, hi = view.t_min, view.t_max
    if hi - lo < 1e-6:
        hi = lo + 1.0
    pad = (hi - lo) * 0.01
    ys = {key: float(TOP + i * (LANE + GAP)) for i, (key, _l) in enumerate(lanes)}
    fr = Frame(Svg(WIDTH, height, "timeline", label), view, ys, lo - pad, hi + pad, 0.0)
    fr.bottom = TOP + len(lanes) * (LANE + GAP)
    fr.svg.add(f'<g class="lanes" data-lanes="{len(lanes)}">')
    for key, text in lanes:
        y = ys[key]
        fr.svg.rect(LEFT, y, RIGHT - LEFT, LANE, "#f8fafc", extra='class="lane-bg"')
        fr.svg.text(LEFT - 8, y + LANE * 0.7, text, "lane-label", "end")
    fr.svg.add("</g>")
    return fr


def _draw_windows(fr: Frame, t: Translator) -> None:
    """Injection windows, under everything else."""
    for w0, w1, label in fr.view.windows:
        fr.svg.rect(
            fr.x(w0),
            TOP - 4,
            max(fr.x(w1) - fr.x(w0), 3.0),
            fr.bottom - TOP + 2,
            "#fecaca",
            t("tl.injection", what=label),
            'class="inject-window" opacity="0.75"',
        )


def _state_bar(fr: Frame, y: float, t0: float, t1: float, state: Any) -> None:
    colour = STATE_COLOURS.get(str(state), "#e5e7eb")
    fr.svg.rect(fr.X(t0), y + 2, fr.X(t1) - fr.X(t0), LANE - 4, colour, str(state), 'class="state"')


def _draw_job(fr: Frame) -> None:
    """The job's state over time, operator actions and stop conditions marked."""
    tl, svg, y = fr.tl, fr.svg, fr.ys["job"]
    states = tl.of("platform", "job_state")
    sub = tl.first("platform", "job_submitted")
    prev_t = sub.mono if sub else (states[0].mono if states else None)
    prev_s = states[0].get("previous", "pending") if states else None
    for ev in states:
        if prev_t is not None and prev_s is not None:
            _state_bar(fr, y, prev_t, ev.mono, prev_s)
        prev_t, prev_s = ev.mono, ev.get("state")
    if prev_t is not None and prev_s is not None:
        end = fr.view.origin + fr.view.t_max
        _state_bar(fr, y, prev_t, end, prev_s)
        if fr.X(end) - fr.X(prev_t) > 75:
            svg.text(fr.X(prev_t) + 3, y + LANE * 0.7, str(prev_s), "in-bar")
    for ev in tl.events:
        if ev.src == "harness" and ev.kind in ("operator_action", "stop_condition"):
            title = f"{ev.kind}: " + ", ".join(f"{k}={v}" for k, v in ev.fields.items())
            svg.mark(fr.X(ev.mono), y + LANE / 2, "x", "#7c2d12", title)
        elif ev.src == "platform" and ev.kind in ("job_resubmitted", "job_stop", "job_kill"):
            svg.mark(fr.X(ev.mono), y + LANE / 2, "dot", "#334155", ev.kind)


def _down_periods(fr: Frame) -> list[tuple[str, float, float, str]]:
    """(node, from, to, why) of every period a node was not up."""
    down: list[tuple[str, float, float, str]] = []
    down_since: dict[str, tuple[float, str]] = {}
    for ev in fr.tl.events:
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
        down.append((node, t0, fr.view.origin + fr.view.t_max, why))
    return down


def _draw_nodes(fr: Frame) -> None:
    """Agent lives, node down periods (under the marks), then the platform's decisions."""
    tl, svg, ys = fr.tl, fr.svg, fr.ys
    agent_pid_node = {
        int(e.get("pid", -1)): str(e.get("node")) for e in tl.of("platform", "agent_spawned")
    }
    for p in tl.procs:
        node = agent_pid_node.get(p.pid, p.node)
        if p.role == "agent" and f"node:{node}" in ys:
            end = p.gone_mono if p.gone_mono is not None else p.last_seen_mono
            svg.rect(
                fr.X(p.seen_mono),
                ys[f"node:{node}"] + 6,
                fr.X(end) - fr.X(p.seen_mono),
                LANE - 12,
                "#94a3b8",
                f"agent pid {p.pid}",
                'class="agent"',
            )
    for node, t0, t1, why in _down_periods(fr):
        if f"node:{node}" in ys:
            y = ys[f"node:{node}"]
            svg.rect(
                fr.X(t0), y + 2, fr.X(t1) - fr.X(t0), LANE - 4, "#fca5a5", why, 'class="node-down"'
            )
    for ev in tl.events:
        key = f"node:{ev.get('node')}"
        if ev.src != "platform" or key not in ys:
            continue
        yy = ys[key] + LANE / 2
        if ev.kind in _LOST:
            msg = str(ev.get("msg", "") or ev.get("reason", ""))[:160]
            svg.mark(
                fr.X(ev.mono), yy, "x", "#dc2626", f"{ev.kind} ({ev.get('node')}) {msg}".strip()
            )
        elif ev.kind in _NODE_TICKS:
            svg.mark(fr.X(ev.mono), yy, "dot", "#16a34a", f"{ev.kind} ({ev.get('node')})")


def _draw_ranks(fr: Frame, t: Translator) -> None:
    """One bar per worker process, coloured by incarnation; stepping inside it; then the
    replicas the sampler never saw, from their own reports."""
    tl, svg, ys, st = fr.tl, fr.svg, fr.ys, fr.tl.steps
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
            fr.X(p.seen_mono),
            yy + 2,
            fr.X(end) - fr.X(p.seen_mono),
            LANE - 4,
            colour,
            f"{label}: pid {p.pid}",
            f'class="replica" data-inc="{inc}" opacity="0.35"',
        )
        rows = st.pid == p.pid
        if rows.any():
            m0, m1 = float(st.mono[rows].min()), float(st.mono[rows].max())
            s0, s1 = int(st.step[rows].min()), int(st.step[rows].max())
            svg.rect(
                fr.X(m0),
                yy + 5,
                fr.X(m1) - fr.X(m0),
                LANE - 10,
                colour,
                f"{label}: pid {p.pid}, steps {s0}-{s1}",
                f'class="stepping" data-inc="{inc}"',
            )
            if fr.X(m1) - fr.X(m0) > 46:
                svg.text(fr.X(m0) + 3, yy + LANE * 0.72, f"{s0}-{s1}", "in-bar light")
    _draw_unsampled(fr, seen_pids, t)


def _draw_unsampled(fr: Frame, seen_pids: set[int], t: Translator) -> None:
    tl, st = fr.tl, fr.tl.steps
    for gen in tl.incarnations:
        for pid, rank in gen.members.items():
            if pid in seen_pids or f"rank:{rank}" not in fr.ys:
                continue
            rows = st.pid == pid
            start = next((e.mono for e in gen.starts if int(e.get("pid", -1)) == pid), None)
            if start is None:
                continue
            last = float(st.mono[rows].max()) if rows.any() else start
            fr.svg.rect(
                fr.X(start),
                fr.ys[f"rank:{rank}"] + 5,
                fr.X(last) - fr.X(start),
                LANE - 10,
                PALETTE[gen.index % len(PALETTE)],
                f"{t('tl.inc', inc=gen.index)}: pid {pid} (not sampled)",
                f'class="stepping" data-inc="{gen.index}"',
            )


def _draw_checkpoints(fr: Frame, t: Translator) -> None:
    """Saves (up) and each incarnation's load (down)."""
    tl, svg = fr.tl, fr.svg
    y = fr.ys["ckpt"] + LANE / 2
    saved: dict[str, Any] = {}
    for ev in tl.of("probe", "ckpt_save"):
        saved.setdefault(str(ev.get("id")), ev)
    for cid, ev in saved.items():
        svg.mark(fr.X(ev.mono), y, "up", "#0f766e", t("tl.saved", id=cid, step=ev.get("step")))
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
            title = t("tl.loaded", id=ld.get("id"), step=ld.get("step"))
            svg.mark(fr.X(ld.mono), y, "down", "#b45309", title)


def _draw_questions(fr: Frame, item: Item, t: Translator) -> None:
    """The four questions as numbered vertical lines; close ones stack upwards."""
    svg = fr.svg
    placed: list[float] = []
    for n, at in item.questions.moments():
        if at is None or at.mono is None:
            continue
        xx = fr.X(float(at.mono))
        row = sum(1 for p in placed if abs(p - xx) < 17)
        placed.append(xx)
        cy = TOP - 16 - row * 19
        svg.add(f'<g class="question" data-q="{n}">')
        svg.line(xx, cy + 8, xx, fr.bottom, "#111827", 'stroke-dasharray="3,3" stroke-width="1"')
        svg.add(
            f'<circle cx="{xx:.1f}" cy="{cy:.1f}" r="8" fill="#111827">'
            f"<title>{n}. {escape(t(f'q.{n}'))}: {escape(str(at.wall))}</title></circle>"
        )
        svg.text(xx, cy + 3.5, str(n), "qnum", "middle")
        svg.add("</g>")


def _draw_axis(fr: Frame, t: Translator) -> None:
    svg, bottom = fr.svg, fr.bottom
    svg.line(LEFT, bottom, RIGHT, bottom, "#475569")
    for v in nice_ticks(fr.lo, fr.hi):
        svg.line(fr.x(v), bottom, fr.x(v), bottom + 4, "#475569")
        svg.text(fr.x(v), bottom + 15, fmt(v), "tick", "middle")
    label = t("tl.axis") if fr.view.injected else t("tl.axis.start")
    svg.text((LEFT + RIGHT) / 2, bottom + 29, label, "axis", "middle")


def timeline_svg(view: ItemView, item: Item, t: Translator, *, item_id: str = "") -> str:
    """Swimlanes of one item (``item``: its entry in the report, for the four answers)."""
    net = view.tl.of("net")
    net_nodes = net_series(net)
    lanes = _lanes(view.tl, t, net_nodes)
    fr = _frame(view, lanes, f"{t('html.timeline')} {item_id}".strip())
    _draw_windows(fr, t)
    _draw_job(fr)
    _draw_nodes(fr)
    _draw_ranks(fr, t)
    _draw_checkpoints(fr, t)
    draw_net(fr, net, net_nodes, t)
    _draw_questions(fr, item, t)
    _draw_axis(fr, t)
    return fr.svg.done()
