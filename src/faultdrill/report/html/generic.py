"""HTML building blocks of the report: escaping, verdict badges, and any recorded JSON value
shown as tables (how the report shows data this version has no part for: keys a newer
faultdrill wrote). Values are said for a reader: no ``None``, booleans in words, numbers
without float noise."""

from __future__ import annotations

import json
from html import escape
from typing import Any

from faultdrill.i18n import Translator

__all__ = ["e", "generic", "vb"]


def e(v: Any) -> str:
    """``v`` as escaped text (``None``: nothing)."""
    return escape("" if v is None else str(v))


def vb(t: Translator, verdict: str | None) -> str:
    """A verdict badge."""
    v = verdict or "retest"
    return f'<span class="v {e(v)}" data-verdict="{e(v)}">{e(t.verdict(v))}</span>'


def _records(value: list[Any], depth: int, t: Translator | None) -> str:
    """A list of JSON objects as one table, a column per key (first 300 rows)."""
    cols: list[str] = []
    for v in value:
        cols += [k for k in v if k not in cols]
    head = "".join(f"<th>{e(c)}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{generic(v.get(c), depth + 1, t)}</td>" for c in cols) + "</tr>"
        for v in value[:300]
    )
    more = f"<p class='note'>… {len(value) - 300} more</p>" if len(value) > 300 else ""
    return f'<table class="generic"><tr>{head}</tr>{body}</table>{more}'


def _scalar(value: Any, t: Translator | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        if t is not None:
            return e(t("yes") if value else t("no"))
        return "yes" if value else "no"
    if isinstance(value, float):  # as recorded, unless it is float noise
        return e(repr(value) if len(repr(value)) <= 10 else f"{value:.6g}")
    if (
        isinstance(value, str)
        and len(value) > 40
        and all(c in "0123456789abcdef:sha" for c in value)
    ):
        return f"<span title='{e(value)}'>{e(value[:16])}…</span>"  # a digest: short, full on hover
    return e(value)


def generic(value: Any, depth: int = 0, t: Translator | None = None) -> str:
    """Any JSON value as HTML: objects as key/value tables, lists of objects as tables."""
    if depth > 4:
        return f"<pre>{e(json.dumps(value, indent=1, default=str))}</pre>"
    if isinstance(value, dict):
        if not value:
            return "—"
        rows = "".join(
            f"<tr><th>{e(k)}</th><td>{generic(v, depth + 1, t)}</td></tr>" for k, v in value.items()
        )
        return f'<table class="generic">{rows}</table>'
    if isinstance(value, list):
        if not value:
            return "—"
        if all(isinstance(v, dict) for v in value):
            return _records(value, depth, t)
        if all(not isinstance(v, (dict, list)) for v in value):
            return ", ".join(_scalar(v, t) for v in value)
        return "<ul>" + "".join(f"<li>{generic(v, depth + 1, t)}</li>" for v in value) + "</ul>"
    return _scalar(value, t)
