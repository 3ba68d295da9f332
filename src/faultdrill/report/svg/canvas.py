"""Drawing on an inline SVG canvas: shapes with hover titles, axis ticks, the palette."""

from __future__ import annotations

import math
from html import escape

__all__ = ["PALETTE", "STATE_COLOURS", "Svg", "fmt", "nice_ticks"]

PALETTE = ("#2563eb", "#d97706", "#059669", "#7c3aed", "#db2777", "#0891b2", "#65a30d")
STATE_COLOURS = {
    "pending": "#cbd5e1",
    "running": "#60a5fa",
    "succeeded": "#34d399",
    "failed": "#f87171",
    "stopped": "#fb923c",
    "unknown": "#e5e7eb",
}


def nice_ticks(lo: float, hi: float, n: int = 8) -> list[float]:
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


def fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v - round(v)) < 1e-9 else f"{v:.1f}"


class Svg:
    """An SVG document being drawn: ``add`` markup, or draw with the shape helpers."""

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
