"""The timeline's canvas: lane geometry and the clock-to-x mapping its drawers share."""

from __future__ import annotations

from dataclasses import dataclass

from faultdrill.report.svg.canvas import Svg
from faultdrill.report.svg.view import ItemView
from faultdrill.timeline import Timeline

__all__ = ["GAP", "LANE", "LEFT", "RIGHT", "TOP", "WIDTH", "Frame"]

WIDTH, LEFT, RIGHT, TOP, LANE, GAP = 1000, 150, 985, 64, 20, 7


@dataclass
class Frame:
    """The canvas of one timeline: its lanes' heights and the clock-to-x mapping."""

    svg: Svg
    view: ItemView
    ys: dict[str, float]  # lane key -> top y
    lo: float  # seconds since the injection at the left edge
    hi: float
    bottom: float  # y below the last lane

    @property
    def tl(self) -> Timeline:
        return self.view.tl

    def x(self, rel: float) -> float:
        return LEFT + (rel - self.lo) / (self.hi - self.lo) * (RIGHT - LEFT)

    def X(self, mono: float) -> float:  # noqa: N802  (mono -> x, the common case)
        return self.x(self.view.rel(mono))
