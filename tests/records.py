"""Typed judge results as the JSON report.json holds, for tests that compare literal data."""

from __future__ import annotations

from typing import Any

from faultdrill.records import Record


def as_json(value: Record | list[Any] | None) -> Any:
    """``value`` (a record, a list of records, or None) as report.json writes it."""
    if value is None:
        return None
    if isinstance(value, list):
        return [as_json(v) for v in value]
    return value.to_json()
