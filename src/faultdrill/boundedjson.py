"""JSON from untrusted files, parsed with a bound on nesting.

``json.loads`` of ``[[[[...]]]]`` nested a hundred thousand deep raises RecursionError (the C
scanner counts its own depth), and a document a little under Python's recursion limit parses
but makes any later recursive walk (``json.dumps``, a pydantic model) raise it instead.
:func:`loads` measures the nesting first, outside strings, and refuses a document deeper than
``max_depth`` with a ValueError (what ``json.loads`` raises for bad JSON), so a caller that
handles bad JSON handles this too and no RecursionError ever escapes.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["MAX_DEPTH", "TooDeepError", "loads", "nesting"]

#: Deeper than anything faultdrill writes (a report nests about ten levels).
MAX_DEPTH = 64

#: An escape pair, then a string with its escapes gone: both removed before brackets are
#: counted. Two plain passes, no nested quantifier: linear time whatever the input (a
#: single pattern for a string with escapes backtracks quadratically on ``"\\"\\"...``).
#: A backslash outside a string makes the JSON invalid at that point, before the parser
#: descends any further, so dropping pairs there hides no bracket the parser would reach.
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class TooDeepError(ValueError):
    """The document nests deeper than the bound."""


def nesting(raw: bytes | str) -> int:
    """The deepest nesting of arrays and objects in ``raw`` (brackets inside strings do not
    count; an unterminated string's brackets do: the parser refuses it anyway)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    brackets = _STRING.sub(b"", _ESCAPE.sub(b"", data)).translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for c in brackets:
        if c in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def loads(raw: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(raw)``, refusing a document nested deeper than ``max_depth``
    (TooDeepError, a ValueError). Raises ValueError for anything that is not JSON."""
    deepest = nesting(raw)
    if deepest > max_depth:
        raise TooDeepError(f"nested {deepest} levels deep, more than {max_depth}")
    try:
        return json.loads(raw)
    except RecursionError as exc:  # not reached below the bound; kept as a last line
        raise TooDeepError(f"nested too deep ({exc})") from None
