"""HTML building blocks of the report: escaping, verdict badges, and any recorded JSON value
shown as tables (how the report shows data it has no dedicated section for)."""

from __future__ import annotations

import json
from html import escape
from typing import Any

from faultdrill.report.i18n import Translator

__all__ = ["e", "generic", "vb"]


def e(v: Any) -> str:
    """``v`` as escaped text (``None``: nothing)."""
    return escape("" if v is None else str(v))


def vb(t: Translator, verdict: str | None) -> str:
    """A verdict badge."""
    v = verdict or "retest"
    return f'<span class="v {e(v)}" data-verdict="{e(v)}">{e(t.verdict(v))}</span>'


def _records(value: list[Any], depth: int) -> str:
    """A list of JSON objects as one table, a column per key (first 300 rows)."""
    cols: list[str] = []
    for v in value:
        cols += [k for k in v if k not in cols]
    head = "".join(f"<th>{e(c)}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{generic(v.get(c), depth + 1)}</td>" for c in cols) + "</tr>"
        for v in value[:300]
    )
    more = f"<p class='note'>… {len(value) - 300} more</p>" if len(value) > 300 else ""
    return f'<table class="generic"><tr>{head}</tr>{body}</table>{more}'


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if (
        isinstance(value, str)
        and len(value) > 40
        and all(c in "0123456789abcdef:sha" for c in value)
    ):
        return f"<span title='{e(value)}'>{e(value[:16])}…</span>"  # a digest: short, full on hover
    return e(value)


def generic(value: Any, depth: int = 0) -> str:
    """Any JSON value as HTML: objects as key/value tables, lists of objects as tables."""
    if depth > 4:
        return f"<pre>{e(json.dumps(value, indent=1, default=str))}</pre>"
    if isinstance(value, dict):
        if not value:
            return "—"
        rows = "".join(
            f"<tr><th>{e(k)}</th><td>{generic(v, depth + 1)}</td></tr>" for k, v in value.items()
        )
        return f'<table class="generic">{rows}</table>'
    if isinstance(value, list):
        if not value:
            return "—"
        if all(isinstance(v, dict) for v in value):
            return _records(value, depth)
        if all(not isinstance(v, (dict, list)) for v in value):
            return e(", ".join(map(str, value)))
        return "<ul>" + "".join(f"<li>{generic(v, depth + 1)}</li>" for v in value) + "</ul>"
    return _scalar(value)
