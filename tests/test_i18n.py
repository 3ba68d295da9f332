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
from faultdrill import i18n
from faultdrill.cli import build_parser
from faultdrill.errors import DrillError
from faultdrill.faults.harness import expand_controls
from faultdrill.i18n import Msg, catalog, format_message, translator
from faultdrill.joblogs.spec import LogPatterns
from faultdrill.report.blocks import to_html, to_markdown
from faultdrill.report.html import render_html
from faultdrill.report.markdown import render_markdown
from faultdrill.report.parts.joblog import log_evidence_part
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


def _ids_said(arg: ast.expr) -> list[str]:
    """The message ids a ``Msg(...)``'s first argument can be: a literal, or either branch
    of ``"a" if cond else "b"`` (anything else is computed: covered by the catalogue
    tests, which hold every id English has to Chinese)."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.IfExp):
        return _ids_said(arg.body) + _ids_said(arg.orelse)
    return []


def test_every_message_id_in_the_source_has_an_english_and_a_chinese_text() -> None:
    """Each ``Msg("id", ...)`` anywhere in faultdrill (checks, judge, goodput, log-line
    mode) names a message both catalogues hold: none falls back to English in a report."""
    root = Path(faultdrill.__file__).parent
    used: dict[str, str] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Msg" and node.args:
                for mid in _ids_said(node.args[0]):
                    used.setdefault(mid, f"{path.relative_to(root)}:{node.lineno}")
    assert len(used) > 250  # the walk found the checks' messages
    assert "progress.checkpoint-verified.unsaid" in used and "logs.blind.no-digest" in used
    missing = {mid: where for mid, where in used.items() if mid not in EN or mid not in ZH}
    assert missing == {}
    known_bad = ast.parse('Msg("x.y" if a else "no.such-id")').body[0].value  # type: ignore[attr-defined]
    assert _ids_said(known_bad.args[0]) == ["x.y", "no.such-id"]


def _log_read_item(rep: dict[str, Any]) -> dict[str, Any]:
    """A scenario read from its job's log lines, with what the patterns cannot show."""
    blind = LogPatterns(step=r"step (?P<step>\d+) n=(?P<samples>\d+)", run_end=r"done")
    said = Msg(
        "progress.checkpoint-verified.unsaid",
        count=2,
        rank=1,
        ckpt="step-000010",
        step=10,
        via=Msg("progress.via-log"),
    )
    item: dict[str, Any] = rep["scenarios"][0]
    item["log_evidence"] = {
        "source": "the job's own log lines (plan: logs)",
        "stamped": "each event when the harness read its line",
        "stamp_bound_s": 0.06,
        "from_logs": {"run_start": 4, "step": 40, "ckpt_load": 2},
        "from_probe": {},
        "read": {"unattributed": 1, "ambiguous": 0, "unreadable": 0, "synthesized_starts": 2},
        "not_observable": [
            {"check": c, "why": m.text(), "verdict": "retest", "why_message": m.to_json()}
            for c, m in blind.blind_spot_messages()
        ],
        "undecided": [
            {"check": "progress.checkpoint-verified", "message": said.text(), **said.to_json()}
        ],
    }
    return item


def test_log_line_evidence_and_the_controls_note_are_said_in_chinese() -> None:
    rep = synthetic_report()
    _log_read_item(rep)
    rep["scenarios"] = [s for s in rep["scenarios"] if not s.get("control")]
    rep["summary"].update(
        controls=0,
        controls_caught=0,
        controls_waived=True,
        controls_note="no negative control ran: (as the judge wrote it)",
    )
    item = report_of(rep).scenarios[0]
    part = log_evidence_part(translator("zh"), item)
    assert part is not None
    said = ["\n".join(to_markdown([part])), to_html([part])]
    for text in said:
        assert "读自任务日志行的证据" in text
        assert "任务的训练步日志行只给出样本数量" in text  # why the sample ledger is blind
        assert "logs.run_end 没有 digest 分组" in text
        assert "次加载没有说明使用前是否校验了检查点" in text and "（读自任务的日志行）" in text
        assert not [c for c in message_chunks() if c in text], text
        for english in ("not observable", "log line", "harness", "from the probe"):
            assert english not in text, english
    assert english_in(finding_texts(said[1], html_page=True)) == []
    md_zh, md_en = render_markdown(report_of(rep), "zh"), render_markdown(report_of(rep), "en")
    page = render_html(report_of(rep), None, "zh")
    assert "读自任务日志行的证据" in md_zh and "读自任务日志行的证据" in page
    assert "- 没有执行任何阴性对照：" in md_zh and "（已用 --no-controls 豁免。）" in md_zh
    assert "data-controls-note>没有执行任何阴性对照" in page
    assert "Evidence read from the job's log lines" in md_en
    assert "the job's step line gives a count of samples" in md_en
    assert "No negative control ran" in md_en and "(Waived with --no-controls.)" in md_en
    # a run whose judge said nothing about controls says nothing either
    assert "没有执行任何阴性对照" not in render_markdown(report_of(synthetic_report()), "zh")
    assert log_evidence_part(translator("zh"), report_of(synthetic_report()).scenarios[0]) is None


def test_a_harness_control_says_its_fault_not_an_empty_mutation() -> None:
    rep = synthetic_report()
    ctl = next(s for s in rep["scenarios"] if s.get("control"))
    ctl["workload_mutation"] = None
    ctl["fault"] = {"kind": "rollback-latest", "target": "rank 1", "spec": {}}
    [planned] = expand_controls({"harness": ["rollback-latest"]})
    ctl["title"] = planned["title"]  # as the harness wrote it into the plan, in English
    zh, en = render_markdown(report_of(rep), "zh"), render_markdown(report_of(rep), "en")
    assert "`演练工具注入：rollback-latest`" in zh
    assert "`harness: rollback-latest`" in en and "``" not in en.split("## Baseline")[0]
    assert "演练工具注入：rollback-latest" in render_html(report_of(rep), None, "zh")
    assert "— 演练工具注入的对照：重启前把 latest 指针回退到更早的检查点" in zh
    assert "— harness control: the latest pointer rolled back" in en
    # a title the plan's author wrote stays as written
    ctl["title"] = "my own words"
    assert "— my own words" in render_markdown(report_of(rep), "zh")


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


def test_who_deemed_the_worker_lost_is_said_in_chinese_around_the_recorded_decisions() -> None:
    """The judge's answers of a platform with deciders (readings/analysis.py) are English
    sentences around event kinds and sources: the sentence is said again, the decisions
    stay as recorded; an answer of no known shape is shown as recorded."""
    from faultdrill.report import words

    t = translator("zh")
    noticed = (
        "node_lost on n2 (node-lifecycle-controller: NodeStatusUnknown); first noticed by "
        "dead_node on n1 (torchrun-agent), 6.6 s earlier"
    )
    said = words.lost_by_text(t, noticed)
    assert "first noticed" not in said and "6.6" in said and "dead_node on n1" in said
    silent = "replica_lost on n2 (x); the platform's own deciders (gcs, raylet) decided nothing"
    assert "decided nothing" not in words.lost_by_text(t, silent)
    assert words.lost_by_text(t, "replica_lost on n2 (kube-apiserver)") == (
        "replica_lost on n2 (kube-apiserver)"
    )
    note = "old replica pid(s) [16711] still alive when the job ended (stopped only by the drill's clean-up)"
    assert CJK.search(words.note_text(t, note)) and "16711" in words.note_text(t, note)
