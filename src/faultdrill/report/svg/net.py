"""The network lanes of the timeline: per node, traffic as a filled sparkline, the worst
probe round trip as a line, dropped packets and unanswered probes marked; without per-node
samples, any numeric ``net`` series as one line (or plain ticks)."""

from __future__ import annotations

from collections import defaultdict
from html import escape
from typing import Any

from faultdrill.i18n import Translator
from faultdrill.report.svg.frame import LANE, Frame

__all__ = ["draw_net", "net_series"]


def net_series(net: list[Any]) -> dict[str, dict[str, list[Any]]]:
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


def _sparkline(fr: Frame, y0: float, pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Canvas points of a series scaled into one lane (its maximum at the lane's top)."""
    vmax = max(v for _t, v in pts) or 1.0
    return [(fr.X(tt), y0 + LANE - 2 - (v / vmax) * (LANE - 4)) for tt, v in pts]


def _draw_node(fr: Frame, node: str, ser: dict[str, list[Any]], t: Translator) -> None:
    svg = fr.svg
    y0 = fr.ys[f"net:{node}"]
    rates = ser["rate"]
    if len(rates) > 1:
        vmax = max(v for _t, v in rates) or 1.0
        pts = _sparkline(fr, y0, rates)
        poly = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
        base = f"{pts[-1][0]:.1f},{y0 + LANE - 2:.1f} {pts[0][0]:.1f},{y0 + LANE - 2:.1f}"
        svg.add(
            f'<polygon class="net-rate" points="{poly} {base}" fill="#bae6fd" '
            f'stroke="#0369a1" stroke-width="0.8"><title>{escape(node)}: '
            f"{escape(t('tl.net.rate', v=vmax / 1024))}</title></polygon>"
        )
    rtts = ser["rtt"]
    if len(rtts) > 1:
        rmax = max(v for _t, v in rtts) or 1.0
        poly = " ".join(f"{a:.1f},{b:.1f}" for a, b in _sparkline(fr, y0, rtts))
        svg.add(
            f'<polyline class="net-rtt" points="{poly}" fill="none" stroke="#be123c" '
            f'stroke-width="1"><title>{escape(node)}: '
            f"{escape(t('tl.net.rtt', v=rmax))}</title></polyline>"
        )
    for tt, what in ser["events"]:
        svg.mark(fr.X(tt), y0 + LANE / 2, "x", "#be123c", f"{node}: {what}")
    for t0, t1, peers in ser["silent"]:
        svg.rect(
            fr.X(t0),
            y0 + 1,
            fr.X(t1) - fr.X(t0),
            3,
            "#be123c",
            f"{node}: {t('tl.net.silent', peers=peers)}",
            'class="net-silent"',
        )


def _draw_generic(fr: Frame, net: list[Any]) -> None:
    """Other ``net`` events: the first numeric series found as a line, else plain ticks."""
    svg = fr.svg
    y0 = fr.ys["net"]
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
        poly = " ".join(f"{a:.1f},{b:.1f}" for a, b in _sparkline(fr, y0, pts))
        svg.add(
            f'<polyline points="{poly}" fill="none" stroke="#0369a1" stroke-width="1.2">'
            f"<title>{escape(key_name)} (max {vmax:g})</title></polyline>"
        )
    else:
        for ev in net:
            svg.mark(fr.X(ev.mono), y0 + LANE / 2, "dot", "#0369a1", ev.kind)


def draw_net(
    fr: Frame, net: list[Any], nodes: dict[str, dict[str, list[Any]]], t: Translator
) -> None:
    """The network lanes (``nodes``: :func:`net_series` of the ``net`` events)."""
    for node, ser in nodes.items():
        _draw_node(fr, node, ser, t)
    if net and not nodes:
        _draw_generic(fr, net)
