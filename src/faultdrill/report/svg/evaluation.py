"""The evaluation picture: the baseline's held-out metrics per step against the drill's,
one plot per split and metric, like the loss picture (the values the job reported with
``probe.evaluation``, mean over the ranks that evaluated)."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from faultdrill.i18n import Translator
from faultdrill.report.model import Item
from faultdrill.report.svg.canvas import PALETTE, Svg
from faultdrill.report.svg.loss import _W, _axes, _lines, _marks, _plot, _Series
from faultdrill.report.svg.view import ItemView

__all__ = ["evaluation_series", "evaluation_svgs"]

#: (split/metric) -> series key -> {step: [values]}
_Values = dict[str, dict[str, dict[int, list[float]]]]


def _collect(view: ItemView, key_of: str | None, into: _Values) -> None:
    """Every evaluated value of ``view`` into ``into``; ``key_of``: the series key (None:
    one series per incarnation)."""
    tl = view.tl
    for e in tl.of("probe", "evaluation"):
        metrics = e.get("metrics")
        if not isinstance(metrics, dict):
            continue
        series = key_of or f"inc{tl.inc_of_pid(int(e.get('pid', -1)))}"
        for name, v in metrics.items():
            try:
                x = float(v)
            except (TypeError, ValueError):
                continue
            if math.isfinite(x):
                per = into.setdefault(f"{e.get('split', '')}/{name}", {}).setdefault(series, {})
                per.setdefault(int(e.get("step", -1)), []).append(x)


def evaluation_series(view: ItemView, baseline: ItemView | None) -> _Values:
    """split/metric -> series (``baseline``, ``inc<N>``) -> step -> values (one per rank)."""
    out: _Values = {}
    if baseline is not None:
        _collect(baseline, "baseline", out)
    _collect(view, None, out)
    return out


def _as_series(key: str, per: dict[int, list[float]], t: Translator) -> _Series:
    steps = np.array(sorted(per), dtype=float)
    values = np.array([sum(per[int(s)]) / len(per[int(s)]) for s in steps])
    if key == "baseline":
        return _Series(key, t("loss.baseline"), steps, values, "#9ca3af")
    inc = int(key[3:])
    colour = PALETTE[inc % len(PALETTE)] if inc >= 0 else "#64748b"
    return _Series(key, t("tl.inc", inc=inc), steps, values, colour)


def evaluation_svgs(
    view: ItemView, baseline: ItemView | None, item: Item, t: Translator
) -> list[tuple[str, str]]:
    """(split/metric, SVG) for every metric the drill or its baseline evaluated."""
    out = []
    values = evaluation_series(view, baseline)
    for metric in sorted(values):
        by_series: dict[str, dict[int, list[float]]] = defaultdict(dict, values[metric])
        series = [_as_series(k, by_series[k], t) for k in sorted(by_series, key=_order)]
        allx = np.concatenate([s.steps for s in series])
        ally = np.concatenate([s.loss for s in series])
        if allx.size == 0:
            continue
        p = _plot(allx, ally)
        svg = Svg(_W, 300, "evalcurve", t("html.eval.title", metric=metric))
        _axes(svg, p, t, metric.rsplit("/", 1)[-1])
        _marks(svg, p, view, item, t)
        _lines(svg, p, series, markers=True)
        out.append((metric, svg.done()))
    return out


def _order(key: str) -> tuple[int, int]:
    return (0, 0) if key == "baseline" else (1, int(key[3:]))
