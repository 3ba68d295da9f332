"""The report's table of step times per rank, for a straggler and a hang: read from the
finding that measured them, in both languages, and absent for every other item; a report
edited by hand (odd values in the finding's data) renders without a traceback."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from faultdrill.i18n import Translator
from faultdrill.records import Evidence, EvidenceSet, Finding
from faultdrill.report.blocks import to_html, to_markdown
from faultdrill.report.model import Item
from faultdrill.report.parts.results import rank_times_part


def item_with(*findings: Finding) -> Item:
    empty = Evidence(verdict="pass")
    ev = EvidenceSet(
        progress=Evidence(verdict="pass", findings=list(findings)), resources=empty, results=empty
    )
    return cast(Item, SimpleNamespace(id="s1", evidence=ev))


def straggler(data: dict[str, Any]) -> Finding:
    return Finding(check="progress.straggler-tolerated", verdict="pass", message="", data=data)


def hang(data: dict[str, Any]) -> Finding:
    return Finding(check="progress.hang-detected", verdict="pass", message="", data=data)


def test_a_straggler_gets_each_ranks_median_step_times_and_slowdown() -> None:
    f = straggler({"window_s": 6.0, "ranks": {"1": [0.1, 0.35, 0.1], "0": [0.1, 0.12, None]}})
    part = rank_times_part(Translator("en"), item_with(f))
    assert part is not None
    md = "\n".join(to_markdown([part]))
    assert "Step times per rank" in md and "during it (6.0 s)" in md
    lines = [ln for ln in md.splitlines() if ln.startswith("| 0 ") or ln.startswith("| 1 ")]
    assert lines == [
        "| 0 | 0.10 s | 0.12 s | n/a | 1.20x |",  # rank order, whatever the map's
        "| 1 | 0.10 s | 0.35 s | 0.10 s | 3.50x |",
    ]
    zh = "\n".join(to_markdown([rank_times_part(Translator("zh"), item_with(f))]))  # type: ignore[list-item]
    assert "各 rank 的步时" in zh and "3.50 倍" in zh
    assert "data-part='rank-times'" in to_html([part]) and "data-rank='1'" in to_html([part])


def test_a_hang_gets_how_long_each_rank_was_blocked() -> None:
    f = hang({"gloo_timeout_s": 20, "blocked_s": {"0": 21.5, "1": None}})
    md = "\n".join(to_markdown([rank_times_part(Translator("en"), item_with(f))]))  # type: ignore[list-item]
    assert "| 0 | 21.50 s |" in md and "| 1 | no step after the hang |" in md


def test_other_items_and_findings_without_figures_get_no_table() -> None:
    other = Finding(check="progress.resume-point", verdict="pass", message="", data={"ranks": {}})
    assert rank_times_part(Translator("en"), item_with(other)) is None
    assert rank_times_part(Translator("en"), item_with(straggler({"ranks": {}}))) is None
    assert rank_times_part(Translator("en"), item_with(hang({}))) is None


@pytest.mark.parametrize(
    "data",
    [
        {"ranks": {"x": "fast", "2": [None], "1": {"a": 1}}, "window_s": "long"},
        {"ranks": {"0": [0.0, 1.0, 1.0]}},  # a zero median before: no slowdown, no division
    ],
)
def test_odd_figures_in_an_edited_report_render_as_not_available(data: dict[str, Any]) -> None:
    part = rank_times_part(Translator("en"), item_with(straggler(data)))
    assert part is not None
    md = "\n".join(to_markdown([part]))
    assert "n/a" in md
