"""Translations of the human reports (Markdown, HTML, runbook), keyed by message id.

A *language* is one module of this package (``en.py``, ``zh.py``; a third language is one
more file beside them) defining ``NAME`` (the language's own name), ``HTML_LANG`` (the
``<html lang>`` value) and ``CATALOG``: key -> text. The keys are:

* fixed labels and sentences of the reports (``verdict.pass``, ``row.injection``, ...);
* ``check.<check name>``: what a check proves, shown beside its name;
* **message ids**: what a check's finding says (``Finding.message_id``; its ``params``
  fill the text's ``{fields}``), and what the judge says of a conclusion level or a
  failing layer. A message id starts with the check or rule that says it
  (``progress.resume-point.newest-valid``, ``layer.network-not-back.revert-failed``).

English is the source: a check builds its finding from a :class:`Msg` (id and params),
and the finding's recorded English ``message`` is ``en``'s text of it, so report.json
stays language-neutral and every report can say any finding in any language. A key a
language lacks falls back to English; a key English lacks is a programming error
(``KeyError``), caught by the tests, which also check that every language uses the same
``{fields}`` as English.

How params are said (:func:`format_message`): ``{field:spec}`` as Python formats it; a
param that is itself a message (a :class:`Msg`, or its JSON ``{"message_id", "params"}``)
is said in the same language; a list is joined with the field's spec as separator
(``{ids:, }``, ``{why:; }``; none given: ``", "``); ``None`` is the language's
``value.none`` and a boolean its ``yes``/``no``; ``{field:@prefix.}`` says the value as the
catalogue's word ``prefix.<value>`` (``{cls:@class.}``: a recovery class in words), or as it
is when there is no such word.

Usage::

    t = translator("zh")
    t("verdict.pass")                              # "通过"
    t("summary.scenarios", n=3, p=2, f=1, r=0)
    t.message("progress.no-jump.contiguous", {})   # a message id with its params
    Msg("progress.completed.reached", target=40).text()   # its English text
"""

from __future__ import annotations

import importlib
import pkgutil
import string
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from faultdrill.errors import DrillError

__all__ = [
    "LANGS",
    "Language",
    "Msg",
    "Translator",
    "catalog",
    "check_lang",
    "discover",
    "format_message",
    "languages",
    "translator",
]

#: The source language: complete, and what every other language falls back to.
SOURCE = "en"


@dataclass(frozen=True)
class Language:
    """One language: its code (the module's name), its own name, ``<html lang>``, catalog."""

    code: str
    name: str
    html_lang: str
    catalog: Mapping[str, str]


def _language(module: ModuleType, code: str) -> Language | None:
    cat = getattr(module, "CATALOG", None)
    if not isinstance(cat, Mapping):
        return None
    return Language(
        code,
        str(getattr(module, "NAME", code)),
        str(getattr(module, "HTML_LANG", code)),
        cat,
    )


_LANGUAGES: dict[str, Language] = {}


def discover() -> dict[str, Language]:
    """Find every language module of this package (again), English first."""
    found: dict[str, Language] = {}
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
    for code in [SOURCE, *(n for n in names if n != SOURCE)]:
        lang = _language(importlib.import_module(f"{__name__}.{code}"), code)
        if lang is not None:
            found[code] = lang
    _LANGUAGES.clear()
    _LANGUAGES.update(found)
    return dict(found)


def languages() -> dict[str, Language]:
    """code -> :class:`Language`, English first."""
    if not _LANGUAGES:
        discover()
    return dict(_LANGUAGES)


def catalog(lang: str = SOURCE) -> Mapping[str, str]:
    return languages()[check_lang(lang)].catalog


def check_lang(lang: str) -> str:
    """``lang`` if it is a known language; DrillError naming the known ones otherwise."""
    known = languages()
    if lang not in known:
        raise DrillError(f"--lang {lang!r} is not supported; use one of: {', '.join(known)}")
    return lang


# --- messages -----------------------------------------------------------------------------


class Msg:
    """A message: its id and the values it says (``Msg("x.y", n=3)``). Values may be
    numbers, strings, ``None``, booleans, lists, or messages themselves (said in the same
    language where they appear)."""

    __slots__ = ("id", "params")

    def __init__(self, message_id: str, /, **params: Any) -> None:
        self.id = message_id
        self.params = params

    def text(self, lang: str = SOURCE) -> str:
        """What this message says in ``lang`` (English by default)."""
        return format_message(lang, self.id, self.params)

    def json_params(self) -> dict[str, Any]:
        """The params as JSON data (nested messages as ``{"message_id", "params"}``)."""
        return {k: _plain(v) for k, v in self.params.items()}

    def to_json(self) -> dict[str, Any]:
        return {"message_id": self.id, "params": self.json_params()}

    def __repr__(self) -> str:
        return f"Msg({self.id!r}, **{self.params!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Msg) and (self.id, self.params) == (other.id, other.params)

    def __hash__(self) -> int:
        return hash(self.id)


def _plain(value: Any) -> Any:
    if isinstance(value, Msg):
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "item"):  # a numpy scalar
        return value.item()
    return str(value)


def _as_message(value: Any) -> tuple[str, Mapping[str, Any]] | None:
    if isinstance(value, Msg):
        return value.id, value.params
    if isinstance(value, Mapping) and isinstance(value.get("message_id"), str):
        params = value.get("params")
        return value["message_id"], params if isinstance(params, Mapping) else {}
    return None


class _Formatter(string.Formatter):
    """``str.format`` that says nested messages, lists, None and booleans in a language."""

    def __init__(self, lang: str) -> None:
        self.lang = lang

    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec.startswith("@"):  # a word of the catalogue: "{cls:@class.}"
            key = format_spec[1:] + str(value)
            known = languages()[SOURCE].catalog
            return _lookup(self.lang, key) if key in known else str(value)
        nested = _as_message(value)
        if nested is not None:
            return format_message(self.lang, nested[0], nested[1])
        if isinstance(value, (list, tuple)):
            sep = format_spec or ", "
            return sep.join(self.format_field(v, "") for v in value)
        if value is None:
            return _lookup(self.lang, "value.none")
        if isinstance(value, bool):
            return _lookup(self.lang, "yes" if value else "no")
        try:
            return format(value, format_spec)
        except (TypeError, ValueError):  # a spec for a number given a string: as it is
            return str(value)


def _lookup(lang: str, key: str) -> str:
    """The text of ``key`` in ``lang``, else in English (KeyError if English lacks it)."""
    known = languages()
    text = known[lang].catalog.get(key) if lang in known else None
    return text if text else known[SOURCE].catalog[key]


def format_message(lang: str, message_id: str, params: Mapping[str, Any]) -> str:
    """Message ``message_id`` in ``lang`` with ``params`` (see the module docstring).

    A finding that was not judged (``params["not_judged"]``, set by the judge when what it
    rests on is not trustworthy) says so after its own text. Falls back to English when
    ``lang`` lacks the id or cannot say it with these params; raises KeyError when English
    lacks the id."""
    order = [lang, SOURCE] if lang != SOURCE else [SOURCE]
    for code in order:
        template = languages()[code].catalog.get(message_id)
        if not template:
            continue
        try:
            text = _Formatter(code).vformat(template, (), dict(params))
        except (KeyError, IndexError, ValueError):
            continue
        if "not_judged" in params:
            text = _Formatter(code).vformat(
                _lookup(code, "finding.not-judged"),
                (),
                {"message": text, "why": params["not_judged"]},
            )
        return text
    raise KeyError(message_id)


# --- the translator -----------------------------------------------------------------------


class Translator:
    """``t(key, **fields)``: the text of ``key`` in one language, formatted."""

    def __init__(self, lang: str) -> None:
        self.lang = check_lang(lang)
        self.language = languages()[self.lang]

    def __call__(self, key: str, **fields: Any) -> str:
        text = _lookup(self.lang, key)
        return _Formatter(self.lang).vformat(text, (), fields) if fields else text

    def has(self, key: str) -> bool:
        return key in languages()[SOURCE].catalog

    def opt(self, key: str, default: Any, **fields: Any) -> str:
        """The text of ``key`` if the catalogue has it, else ``str(default)``."""
        return self(key, **fields) if self.has(key) else str(default)

    def message(self, message_id: str | None, params: Mapping[str, Any], recorded: str) -> str:
        """A message by id with its params, or ``recorded`` (the English text as recorded)
        when it has no id or an id this version does not know (a newer part wrote it)."""
        if message_id is None:
            return recorded
        try:
            return format_message(self.lang, message_id, params)
        except KeyError:
            return recorded

    def verdict(self, v: str | None) -> str:
        return self.opt(f"verdict.{v}", v)

    def cls(self, c: str | None) -> str:
        return self.opt(f"class.{c}", c)

    def cls_why(self, c: str | None, recorded: str | None) -> str:
        """Why this class: in English the recorded reason, else the class's explanation."""
        if self.lang == SOURCE or not self.has(f"class.{c}.why"):
            return recorded or ""
        return self(f"class.{c}.why")

    def evidence(self, cat: str) -> str:
        return self.opt(f"ev.{cat}", cat)

    def level(self, level: str | None) -> str:
        """A conclusion level in words (None: no level proven)."""
        return self(f"level.name.{level}") if level is not None else self("level.name.none")

    def layer(self, layer: str | None) -> str:
        return self.opt(f"layer.name.{layer}", layer)

    def check_name(self, name: str) -> str:
        """A check's name with its meaning in words (unknown checks: the name alone)."""
        key = f"check.{name}"
        return f"{name} ({self(key)})" if self.has(key) else name

    def caught(self, caught: bool | None) -> str:
        """A control's outcome: caught, missed, or not proven (aborted: ``None``)."""
        return {True: self("ctl.caught"), None: self("ctl.unproven")}.get(
            caught, self("ctl.missed")
        )

    def seconds(self, v: Any) -> str:
        return self("na") if v is None else self("seconds", v=float(v))


def translator(lang: str = SOURCE) -> Translator:
    return Translator(lang)


#: The languages found when faultdrill was imported (``languages()`` sees later ones too).
LANGS: tuple[str, ...] = tuple(discover())
