"""How the parts say recurring things: times after the injection, sizes, event references,
links to an item's findings and conclusion levels, recorded data values."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from faultdrill.i18n import Translator
from faultdrill.report.blocks import Code, Link, Text
from faultdrill.report.words import after_injection, size, utc, value

__all__ = [
    "after_injection",
    "as_map",
    "event_text",
    "finding_anchor",
    "finding_links",
    "level_anchor",
    "pick",
    "size",
    "utc",
    "value",
]

#: Keys of an event reference that say where it is, not what it says.
_PLACE = ("src", "kind", "mono", "since_injection_s")


def as_map(v: Any) -> Mapping[str, Any]:
    """``v`` if it is a mapping (recorded JSON of a known shape), else an empty one."""
    return v if isinstance(v, Mapping) else {}


def pick(v: Any, yes: str, no: str, unknown: str) -> str:
    """``yes`` for True, ``no`` for False, ``unknown`` for anything else (None)."""
    return yes if v is True else no if v is False else unknown


def finding_anchor(item_id: str, check: str) -> str:
    """The anchor of an item's first finding of ``check`` (its row in the HTML findings)."""
    return f"f-{item_id}-{check}"


def level_anchor(item_id: str, level: str) -> str:
    """The anchor of an item's conclusion level (its row in the conclusion table)."""
    return f"level-{item_id}-{level}"


def finding_links(item_id: str, checks: Iterable[str]) -> list[Text]:
    """Each check name as a link to the item's finding, separated by commas."""
    out: list[Text] = []
    for check in checks:
        if out:
            out.append(", ")
        out.append(Link(Code(check), finding_anchor(item_id, check)))
    return out


def event_text(t: Translator, ref: Mapping[str, Any]) -> str:
    """One event reference: when (after the injection), what, and its few fields."""
    when = ref.get("since_injection_s")
    what = f"{ref.get('src')}/{ref.get('kind')}"
    fields = [
        f"{t.opt('field.' + str(k), k)} {value(t, v)}" for k, v in ref.items() if k not in _PLACE
    ]
    detail = t("paren", text=", ".join(fields)) if fields else ""
    return t("event.line", when=after_injection(t, when), what=what, detail=detail)
