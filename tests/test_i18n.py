"""zh/en: a complete catalogue, the methodology's terms in Chinese, one structure in both."""

from __future__ import annotations

import re
import string
from typing import Any

import pytest

from faultdrill.cli import build_parser
from faultdrill.errors import DrillError
from faultdrill.report.html import render_html
from faultdrill.report.i18n import catalog, translator
from faultdrill.report.markdown import render_markdown
from faultdrill.report.runbook import render_runbook
from tests.report_data import report_of, synthetic_report

CJK = re.compile(r"[\u4e00-\u9fff]")
EN, ZH = catalog("en"), catalog("zh")
#: Technical words a Chinese text keeps as they are (names of things, units).
TECHNICAL = r"\b(rank|pid|uid|sha256|world size|GPU|Hz|latest)\b"


def _fields(text: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(text) if f}


@pytest.mark.parametrize("key", sorted(EN))
def test_every_message_exists_in_both_languages_with_the_same_fields(key: str) -> None:
    en, zh = EN[key], ZH[key]
    assert en.strip() and zh.strip()
    assert _fields(en) == _fields(zh)
    assert not CJK.search(en)
    literal = "".join(lit for lit, *_ in string.Formatter().parse(zh))
    if re.sub(TECHNICAL + r"|[\s，；、（）()\[\]：:;,.'`/_→-]", "", literal):
        assert CJK.search(zh), "a Chinese text in English words"


def test_chinese_has_no_key_english_lacks() -> None:
    assert set(ZH) <= set(EN)


def test_check_names_are_translated() -> None:
    core = {"progress.resume-point", "resources.no-stale-replica", "results.loss-matches-baseline"}
    names = {k.removeprefix("check.") for k in EN if k.startswith("check.")}
    assert core <= names
    for name in names:
        en, zh = EN[f"check.{name}"], ZH[f"check.{name}"]
        assert en and CJK.search(zh) and not CJK.search(en)
    t = translator("zh")
    assert "从最新有效检查点继续" in t.check_name("progress.resume-point")
    assert t.check_name("storage.some-future-check") == "storage.some-future-check"


def test_unknown_language_is_a_clear_error() -> None:
    with pytest.raises(DrillError, match="use one of: en, zh"):
        translator("fr")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["check", "x", "--lang", "fr"])
    assert build_parser().parse_args(["demo", "--lang", "zh"]).lang == "zh"


METHOD_TERMS = [
    "前置条件",
    "注入动作",
    "预期状态",
    "实际证据",
    "恢复动作",
    "结论",
    "自动恢复",
    "需人工重启",
    "进度证据",
    "资源证据",
    "结果证据",
    "已验证范围",
    "待验证",
    "故障注入人",
    "观察人",
    "恢复操作人",
    "结论签收人",
    "平台何时认定原Worker不可用",
    "旧副本何时停止",
    "新资源何时完成准备",
    "任务从哪个检查点和数据位置继续",
    "不构成SLA",
]


def test_chinese_reports_use_the_methodology_terms() -> None:
    rep = synthetic_report()
    md = render_markdown(report_of(rep), "zh")
    html = render_html(report_of(rep), None, "zh")
    for term in METHOD_TERMS:
        assert term in html, term
    for term in ("前置条件", "注入动作", "预期状态", "恢复动作", "待验证", "结论签收人"):
        assert term in md, term
    for dossier in ("任务档案", "资源档案", "责任档案"):
        assert dossier in html
    assert "需人工确认" in render_markdown(report_of(_with_confirmation(rep)), "zh")
    assert "补测" in md  # the retest findings of node-loss


def _with_confirmation(rep: dict[str, Any]) -> dict[str, Any]:
    rep["scenarios"][0]["recovery_class"] = "manual-confirmation"
    return rep


def test_english_reports_have_no_chinese_of_their_own() -> None:
    rep = synthetic_report()
    for text in (render_markdown(report_of(rep), "en"), render_html(report_of(rep), None, "en")):
        assert not CJK.search(text)


def _shape(md: str) -> list[str]:
    """The structure of a Markdown report: heading levels, table rows, list items."""
    out = []
    for line in md.splitlines():
        if line.startswith("#"):
            out.append(line.split(" ")[0])
        elif line.startswith("|"):
            out.append(f"|{line.count('|')}")
        elif re.match(r"^\s*(-|\d+\.) ", line):
            out.append(re.match(r"^\s*(-|\d+\.)", line).group(0))  # type: ignore[union-attr]
    return out


def test_markdown_structure_is_the_same_in_both_languages() -> None:
    rep = synthetic_report()
    assert _shape(render_markdown(report_of(rep), "en")) == _shape(
        render_markdown(report_of(rep), "zh")
    )
    assert _shape(render_runbook(report_of(rep), None, "en")) == _shape(
        render_runbook(report_of(rep), None, "zh")
    )


def test_findings_stay_as_recorded_and_json_stays_neutral() -> None:
    rep = synthetic_report()
    md = render_markdown(report_of(rep), "zh")
    assert "pid 77 of incarnation 0 alive" in md  # a check's message is data
    assert "`resources.no-stale-replica`" in md
