"""Finding sentences of a rendered report, and the English ones among them.

A finding line of report.md is ``  - VERDICT `check`: TEXT``; in report.html it is a row of
the findings table (``<tr ... data-check='...'>``, its third cell). A text *speaks English*
when it holds a stretch of the English catalogue's wording of any message id (a literal
part of a template with at least two words), or has no Chinese at all.
"""

from __future__ import annotations

import html
import re
import string

from faultdrill.i18n import catalog

__all__ = ["CJK", "english_in", "finding_texts", "message_chunks"]

CJK = re.compile(r"[\u4e00-\u9fff]")
_WORDS = re.compile(r"[A-Za-z]{2,}[^{}]*?\b[A-Za-z]{2,}")
_MD_FINDING = re.compile(r"^  - \S+ `[a-z]+\.[a-z0-9-]+`: (.*)$", re.M)
_HTML_FINDING = re.compile(
    r"<tr[^>]*data-check='[^']+'><td>.*?</td><td>.*?</td><td>(.*?)</td></tr>"
)


def message_chunks() -> set[str]:
    """The English wording of every message id: each literal part of two words or more."""
    out = set()
    for key, text in catalog("en").items():
        if "." not in key or key.split(".")[0] not in _MESSAGE_ROOTS:
            continue
        for literal, *_ in string.Formatter().parse(text):
            chunk = literal.strip(" ;:,()[]'`")
            if _WORDS.search(chunk) and len(chunk.split()) >= 2:
                out.add(chunk)
    return out


#: The first part of a message id: a check category, or a part of the judge.
_MESSAGE_ROOTS = {
    "progress",
    "resources",
    "results",
    "expectation",
    "timeline",
    "check",
    "evaluate",
    "class",
    "level",
    "layer",
    "trend",
    "timeout",
}


def finding_texts(text: str, *, html_page: bool) -> list[str]:
    """Every finding's sentence in a rendered report (Markdown or HTML)."""
    if html_page:
        return [html.unescape(re.sub(r"<[^>]+>", "", m)) for m in _HTML_FINDING.findall(text)]
    return _MD_FINDING.findall(text)


def english_in(texts: list[str]) -> list[str]:
    """The texts that speak English (see the module docstring)."""
    chunks = message_chunks()
    return [t for t in texts if not CJK.search(t) or any(c in t for c in chunks)]
