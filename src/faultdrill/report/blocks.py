"""A small document model for the report's parts, said once and written as Markdown or HTML.

A part of the report (the conclusion level of an item, its failing layer, what its recovery
depended on, ...) is built once as a :class:`Part`: a title and a list of blocks
(:class:`Para`, :class:`Bullets`, :class:`Table`, :class:`Pre`) whose text is already in
the report's language. :func:`to_markdown` and :func:`to_html` write it; every string is
escaped for the format it goes into, so a part never holds markup of its own.

Inline text is a string, a :class:`Code`, :class:`Strong`, :class:`Link` or :class:`Badge`,
or a list of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from typing import TypeAlias

__all__ = [
    "Badge",
    "Bullets",
    "Code",
    "Link",
    "Para",
    "Part",
    "Pre",
    "Row",
    "Strong",
    "Table",
    "Text",
    "html_block",
    "plain",
    "to_html",
    "to_markdown",
]


@dataclass(frozen=True)
class Code:
    text: str


@dataclass(frozen=True)
class Strong:
    text: str


@dataclass(frozen=True)
class Link:
    """A link to an anchor of the same page (HTML); its text alone in Markdown."""

    text: Text
    anchor: str


@dataclass(frozen=True)
class Badge:
    """A verdict badge: ``verdict`` (pass, retest, fail) said as ``text``."""

    verdict: str
    text: str


Text: TypeAlias = "str | Code | Strong | Link | Badge | Sequence[Text]"


@dataclass(frozen=True)
class Para:
    text: Text
    cls: str = ""


@dataclass(frozen=True)
class Bullets:
    items: Sequence[Text]
    cls: str = ""


@dataclass(frozen=True)
class Row:
    cells: Sequence[Text]
    #: data-* attributes of the row in HTML (name without ``data-`` -> value).
    data: dict[str, str] = field(default_factory=dict)
    anchor: str = ""


@dataclass(frozen=True)
class Table:
    head: Sequence[Text]
    rows: Sequence[Row | Sequence[Text]]
    cls: str = ""


@dataclass(frozen=True)
class Pre:
    """Lines shown as they are (a command's output)."""

    lines: Sequence[str]


Block = Para | Bullets | Table | Pre


@dataclass(frozen=True)
class Part:
    """A titled part of an item or of the run. ``key``: its name in the HTML
    (``data-part``) and its anchor."""

    key: str
    title: str
    blocks: Sequence[Block]
    anchor: str = ""


# --- Markdown -------------------------------------------------------------------------------


def plain(text: Text) -> str:
    """The text without any markup."""
    if isinstance(text, str):
        return text
    if isinstance(text, (Code, Strong, Badge)):
        return text.text
    if isinstance(text, Link):
        return plain(text.text)
    return "".join(plain(t) for t in text)


def _md(text: Text, *, cell: bool = False) -> str:
    if isinstance(text, str):
        out = text
    elif isinstance(text, Code):
        out = "`" + text.text.replace("`", "'") + "`"
    elif isinstance(text, (Strong, Badge)):
        out = f"**{text.text}**" if text.text else ""
    elif isinstance(text, Link):
        out = _md(text.text)
    else:
        out = "".join(_md(t) for t in text)
    if cell:
        out = out.replace("|", "\\|").replace("\n", " ")
    return out


def _md_row(cells: Sequence[Text]) -> str:
    return "| " + " | ".join(_md(c, cell=True) or " " for c in cells) + " |"


def _md_block(block: Block) -> list[str]:
    if isinstance(block, Para):
        return [_md(block.text), ""]
    if isinstance(block, Bullets):
        return [*(f"- {_md(i)}" for i in block.items), ""]
    if isinstance(block, Pre):
        return ["```", *block.lines, "```", ""]
    rows = [r.cells if isinstance(r, Row) else r for r in block.rows]
    return [
        _md_row(block.head),
        "|" + "---|" * len(block.head),
        *(_md_row(r) for r in rows),
        "",
    ]


def to_markdown(parts: Sequence[Part]) -> list[str]:
    """Markdown lines of ``parts`` (each a bold title, then its blocks)."""
    out: list[str] = []
    for part in parts:
        out += [f"**{part.title}**", ""]
        for block in part.blocks:
            out += _md_block(block)
    return out


# --- HTML -----------------------------------------------------------------------------------


def _html(text: Text) -> str:
    if isinstance(text, str):
        return escape(text)
    if isinstance(text, Code):
        return f"<code>{escape(text.text)}</code>"
    if isinstance(text, Strong):
        return f"<b>{escape(text.text)}</b>"
    if isinstance(text, Badge):
        v = escape(text.verdict)
        return f'<span class="v {v}" data-verdict="{v}">{escape(text.text)}</span>'
    if isinstance(text, Link):
        return f"<a href='#{escape(text.anchor)}'>{_html(text.text)}</a>"
    return "".join(_html(t) for t in text)


def _attrs(row: Row) -> str:
    out = "".join(f" data-{escape(k)}='{escape(v)}'" for k, v in row.data.items())
    return out + (f" id='{escape(row.anchor)}'" if row.anchor else "")


def html_block(block: Block) -> str:
    """One block as HTML (escaped)."""
    name = "" if isinstance(block, Pre) else block.cls
    cls = f" class='{escape(name)}'" if name else ""
    if isinstance(block, Para):
        return f"<p{cls}>{_html(block.text)}</p>"
    if isinstance(block, Bullets):
        return f"<ul{cls}>" + "".join(f"<li>{_html(i)}</li>" for i in block.items) + "</ul>"
    if isinstance(block, Pre):
        return "<pre>" + escape("\n".join(block.lines)) + "</pre>"
    head = "".join(f"<th>{_html(h)}</th>" for h in block.head)
    body = ""
    for r in block.rows:
        row = r if isinstance(r, Row) else Row(r)
        body += f"<tr{_attrs(row)}>" + "".join(f"<td>{_html(c)}</td>" for c in row.cells)
        body += "</tr>"
    return f"<table{cls}><tr>{head}</tr>{body}</table>"


def to_html(parts: Sequence[Part]) -> str:
    """HTML of ``parts``: each a ``<div class='part'>`` with an ``<h4>`` title."""
    out = []
    for part in parts:
        anchor = f" id='{escape(part.anchor)}'" if part.anchor else ""
        out.append(
            f"<div class='part' data-part='{escape(part.key)}'{anchor}>"
            f"<h4>{escape(part.title)}</h4>"
            + "".join(html_block(b) for b in part.blocks)
            + "</div>"
        )
    return "\n".join(out)
