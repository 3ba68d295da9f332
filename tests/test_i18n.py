"""Languages: a complete catalogue keyed by message id, the methodology's terms in Chinese,
one structure in every language, every finding said in the report's language, and a third
language that is one file."""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path
from typing import Any

import pytest

import faultdrill
from faultdrill.cli import build_parser
from faultdrill.errors import DrillError
from faultdrill.report import i18n
from faultdrill.report.html import render_html
from faultdrill.report.i18n import Msg, catalog, format_message, translator
from faultdrill.report.markdown import render_markdown
from faultdrill.report.runbook import render_runbook
from tests.i18n_kit import english_in, finding_texts, message_chunks
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


def test_a_finding_without_a_message_id_is_shown_as_recorded() -> None:
    rep = synthetic_report()
    md = render_markdown(report_of(rep), "zh")
    assert "pid 77 of incarnation 0 alive" in md  # no id: said as recorded, in English
    assert "`resources.no-stale-replica`" in md


def test_a_finding_with_a_message_id_is_said_in_the_reports_language() -> None:
    rep = synthetic_report()
    said = Msg("progress.resume-point.newest-valid", inc=1, ckpt="step-000010", step=10)
    finding = rep["scenarios"][0]["evidence"]["progress"]["findings"][0]
    finding.update(message=said.text(), message_id=said.id, params=said.json_params())
    zh = render_markdown(report_of(rep), "zh")
    assert "第 1 代副本从 step-000010（第 10 步）继续，即最新有效检查点" in zh
    en = render_markdown(report_of(rep), "en")
    assert "incarnation 1 resumed from step-000010 (step 10), the newest valid checkpoint" in en
    texts = finding_texts(render_html(report_of(rep), None, "zh"), html_page=True)
    said_zh = "第 1 代副本从 step-000010（第 10 步）继续，即最新有效检查点"
    assert said_zh in texts and said_zh not in english_in(texts)
    # what stays English are the synthetic findings recorded without an id
    assert "pid 77 of incarnation 0 alive" in english_in(texts)


LEVELS_AND_LAYERS = [
    "重新进入运行态",
    "从有效进度继续",
    "结果保持一致",
    "调度",
    "控制面",
    "存储",
    "框架",
    "检查点",
    "网络",
    "环境准备",
]


def test_levels_and_layers_use_the_methodologys_words() -> None:
    t = translator("zh")
    levels = [t.level(lv) for lv in ("running-again", "valid-progress", "consistent-results")]
    assert levels == LEVELS_AND_LAYERS[:3]
    layers = [
        t.layer(x)
        for x in (
            "scheduling",
            "control-plane",
            "storage",
            "framework",
            "checkpoint",
            "network",
            "environment-preparation",
        )
    ]
    assert layers == LEVELS_AND_LAYERS[3:]
    rep = report_of(synthetic_report())
    for text in (render_markdown(rep, "zh"), render_html(rep, None, "zh")):
        for word in (
            "重新进入运行态",
            "从有效进度继续",
            "结果保持一致",
            "调度",
            "待商定",
            "平台能力",
        ):
            assert word in text, word


def _dummy(spec: str) -> Any:
    """A value a ``{field:spec}`` accepts."""
    if spec.startswith("@"):
        return "automatic"
    if spec and spec[-1] in "fge%":
        return 1.5
    if spec:
        return ["a1", "b2"]  # a list joined with the spec as separator
    return "x1"


@pytest.mark.parametrize(
    "key",
    sorted(
        k
        for k in EN
        if k.split(".")[0]
        in {
            "progress",
            "resources",
            "results",
            "expectation",
            "timeline",
            "check",
            "evaluate",
            "level",
            "layer",
            "trend",
            "timeout",
        }
        and not k.startswith(("check.", "level.name.", "layer.name."))
    ),
)
def test_every_message_is_said_in_chinese_without_its_english_wording(key: str) -> None:
    params = {f: _dummy(spec or "") for _, f, spec, _ in string.Formatter().parse(EN[key]) if f}
    zh = format_message("zh", key, params)
    words = re.sub(TECHNICAL + r"|x1|a1|b2|[^A-Za-z]", "", zh)
    assert CJK.search(zh) or not words
    assert not [c for c in message_chunks() if c in zh], zh


_PLAIN = (ast.Constant, ast.JoinedStr, ast.BinOp)


def _says_plain_text(call: ast.Call) -> bool:
    """``ctx.finding(check, verdict, <message>)`` with a message that is a string: a literal,
    an f-string, a concatenation, or a ``"...".join(...)``."""
    if len(call.args) < 3:
        return False
    msg = call.args[2]
    joined = isinstance(msg, ast.Call) and getattr(msg.func, "attr", "") == "join"
    return isinstance(msg, _PLAIN) or joined


def test_every_finding_of_every_check_names_its_message() -> None:
    """A check that writes a finding as a plain English string leaves every other language
    with that English: each ``ctx.finding`` says a ``Msg`` (an id with its values)."""
    root = Path(faultdrill.__file__).parent
    plain = []
    for path in [*sorted((root / "checks").glob("*.py")), root / "judge" / "evaluate.py"]:
        tree = ast.parse(path.read_text())
        legacy = [  # keeps a finding recorded without an id as it was, not judged
            f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "not_judged"
        ]
        skip = {id(n) for f in legacy for n in ast.walk(f)}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if not isinstance(node, ast.Call):
                continue
            if getattr(node.func, "attr", "") == "finding" and _says_plain_text(node):
                plain.append(f"{path.name}:{node.lineno}")
            if getattr(node.func, "id", "") == "Finding":
                plain.append(f"{path.name}:{node.lineno} Finding(...): use Finding.of(..., Msg)")
    known_bad = ast.parse('ctx.finding(name, F, f"{n} bad")').body[0].value  # type: ignore[attr-defined]
    assert _says_plain_text(known_bad)
    allowed = {"api.py"}  # the seam itself builds findings from a Msg or a legacy string
    assert [p for p in plain if p.split(":")[0] not in allowed] == []


def test_a_third_language_is_one_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Drop ``xx.py`` (a catalogue that marks every English text) beside en.py and zh.py:
    every report renders in it, findings included, and ``--lang xx`` is accepted."""
    pseudo = {k: f"«{v}»" for k, v in EN.items()}
    (tmp_path / "xx.py").write_text(
        f"NAME = 'pseudo'\nHTML_LANG = 'x-pseudo'\nCATALOG = {pseudo!r}\n", encoding="utf-8"
    )
    monkeypatch.setattr(i18n, "__path__", [*i18n.__path__, str(tmp_path)])
    try:
        assert list(i18n.discover()) == ["en", "xx", "zh"]
        rep = synthetic_report()
        said = Msg("progress.no-jump.contiguous")
        rep["scenarios"][0]["evidence"]["progress"]["findings"][0].update(
            message=said.text(), message_id=said.id, params={}
        )
        md = render_markdown(report_of(rep), "xx")
        page = render_html(report_of(rep), None, "xx")
        runbook = render_runbook(report_of(rep), None, "xx")
        assert "«PASS»" in md and "«Preconditions»" in page and "«Recovery runbook: " in runbook
        assert "<html lang='x-pseudo'>" in page
        assert f"«{said.text()}»" in md and f"«{said.text()}»" in page
        assert build_parser().parse_args(["check", "x", "--lang", "xx"]).lang == "xx"
    finally:
        monkeypatch.undo()
        i18n.discover()
    with pytest.raises(DrillError):
        translator("xx")
