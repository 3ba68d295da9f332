"""A run recorded before report.json had a schema version still loads, re-judges to the same
outcome, and renders with every renderer.

The run (``tests/fixtures/run-0.1.0-kill-worker.tar.xz``, see the README beside it) was
recorded by faultdrill 0.1.0 with real torchrun on the namespace cluster: the worker-kill
scenario and the stale-replica control. Its ``report.json`` is as that version wrote it.
"""

from __future__ import annotations

import json
import tarfile
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from faultdrill.archive.bundle import make_bundle, read_member, verify_bundle
from faultdrill.archive.diff import Band, diff_reports
from faultdrill.archive.junit import report_suite
from faultdrill.archive.replay import compare_item
from faultdrill.cli import main
from faultdrill.report import render_reports
from faultdrill.report.html import render_html
from faultdrill.report.markdown import render_markdown
from faultdrill.report.model import Report, read_report
from faultdrill.report.runbook import render_runbook
from faultdrill.report.serve import make_server
from tests.i18n_kit import CJK, english_in, finding_texts

FIXTURE = Path(__file__).parent / "fixtures" / "run-0.1.0-kill-worker.tar.xz"

#: What the run recorded: verdict, recovery class, caught, resume point of each item.
RECORDED = {
    "kill-worker": (
        "pass",
        "automatic",
        None,
        {"checkpoint": "step-000010", "step": 10, "data_position": 80},
    ),
    "ctl-stale-replica": (
        "fail",
        "unrecoverable",
        True,
        {"checkpoint": "step-000010", "step": 10, "data_position": 80},
    ),
}


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    with tarfile.open(FIXTURE) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(tmp_path, filter="data")
        else:  # Python < 3.10.12: our own fixture, plain files only
            tar.extractall(tmp_path)
    return tmp_path / "run"


def outcomes(report: Report) -> dict[str, tuple[Any, ...]]:
    return {s.id: (s.verdict, s.recovery_class, s.caught, s.resume_key()) for s in report.scenarios}


def test_the_recorded_report_loads_as_version_1(run: Path) -> None:
    raw = json.loads((run / "report.json").read_text())
    assert "schema_version" not in raw and raw["faultdrill_version"] == "0.1.0"
    report = read_report(run)
    assert report.schema_version == 1
    assert outcomes(report) == RECORDED
    assert report.baseline.verdict == "pass" and report.summary.ok
    written = report.to_json()
    del written["schema_version"]
    assert written == raw  # nothing recorded is lost or changed by reading it


def test_check_gives_the_same_verdicts_classes_and_resume_points(run: Path) -> None:
    before = read_report(run)
    assert main(["check", str(run)]) == 0
    after = read_report(run)
    assert json.loads((run / "report.json").read_text())["schema_version"] == 1
    assert outcomes(before) == RECORDED
    # One class is named anew: the stale-replica control's job reached its last step from
    # valid progress but its launcher reported "failed". 0.1.0 called that unrecoverable,
    # beside a conclusion level that proves valid progress; today's rules say who must act.
    rejudged = dict(RECORDED)
    verdict, _, caught, resume = RECORDED["ctl-stale-replica"]
    rejudged["ctl-stale-replica"] = (verdict, "manual-confirmation", caught, resume)
    assert outcomes(after) == rejudged
    stale = after.item("ctl-stale-replica")
    assert stale is not None and stale.conclusion is not None
    assert "continued from valid progress to its last step" in str(stale.recovery_class_why)
    assert after.baseline.verdict == before.baseline.verdict
    # fields added since the fixture was recorded (e.g. controls_note) may join; none change
    recorded = before.summary.to_json()
    assert {k: v for k, v in after.summary.to_json().items() if k in recorded} == recorded
    for s in before.scenarios:  # the timeline is the same, so are the times...
        again = after.item(s.id)
        assert again is not None
        now, then = again.times.to_json(), s.times.to_json()
        assert now.keys() == then.keys()
        # ...except that the questions are now measured from the injection's start (its
        # inject_start: a platform may react before the injection's own record is written),
        # which this recording had ~30 ms before its inject event: each time that far longer.
        for key, value in then.items():
            if isinstance(value, float) and key.endswith("_s"):
                assert now[key] == pytest.approx(value, abs=0.1), key
            else:
                assert now[key] == value, key


def test_every_renderer_works_on_it(run: Path, tmp_path: Path) -> None:
    report = read_report(run)
    for lang in ("en", "zh"):
        html = render_html(report, run, lang)
        assert html.count("<svg xmlns") == 4  # a timeline and a loss curve per item
        assert "data-scenario='kill-worker'" in html and "draw-error" not in html
        md = render_markdown(report, lang)
        assert "### kill-worker" in md and "### ctl-stale-replica" in md
        assert "step-000010" in md and "| n1 |" in md  # the network track's table
        runbook = render_runbook(report, run, lang)
        assert "faultdrill replay BUNDLE.tar.gz --scenario kill-worker" in runbook
        assert "python -m faultdrill.platforms.local.agent" in runbook
    out = tmp_path / "zh"
    out.mkdir()
    paths = render_reports(run, "zh", out)
    assert Path(paths["html"]).read_text().startswith("<!DOCTYPE html>")
    suite = report_suite(report)
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "0", "0")
    assert not diff_reports(report, report).regressed
    kill = report.item("kill-worker")
    assert kill is not None and compare_item(kill, kill, Band())["matches"]
    archive, _manifest = make_bundle(run, tmp_path / "run.bundle.tar.gz")
    assert verify_bundle(archive).ok
    assert main(["diff", str(run), str(archive)]) == 0


def test_serve_shows_it(run: Path) -> None:
    server = make_server(run, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        with urllib.request.urlopen(base + "/?lang=zh", timeout=30) as r:
            assert "data-scenario='kill-worker'" in r.read().decode()
        with urllib.request.urlopen(base + "/report.json", timeout=30) as r:
            assert json.loads(r.read())["schema_version"] == 1
    finally:
        server.shutdown()
        server.server_close()


def test_rejudged_in_chinese_it_has_no_english_finding_sentences(run: Path) -> None:
    """Re-judged by this version, every finding names its message; report.md and
    report.html in Chinese then say every finding, passed or failed, in Chinese."""
    assert main(["check", str(run), "--lang", "zh"]) == 0
    report = read_report(run)
    findings = [f for s in report.scenarios for _c, f in s.findings()]
    assert findings and all(f.message_id for f in findings)
    assert any(f.verdict == "fail" for f in findings)  # the control's failing findings
    md = (run / "report.md").read_text()
    page = (run / "report.html").read_text()
    said_md, said_html = finding_texts(md, html_page=False), finding_texts(page, html_page=True)
    assert len(said_md) == len(findings)
    assert set(said_md) <= set(said_html)  # the HTML also repeats evaluation and artefact
    assert english_in(said_md) == [] and english_in(said_html) == []
    assert all(CJK.search(x) for x in said_md)
    for word in ("结论层次", "重新进入运行态", "结果保持一致", "调度", "恢复依赖", "待商定"):
        assert word in md and word in page, word
    assert "<html lang='zh-CN'>" in page


def test_the_bundle_carries_what_a_buyer_signs(run: Path, tmp_path: Path) -> None:
    """report.json goes into the bundle byte for byte: conclusion levels, failing layers,
    dependencies, trend, scheduling, message ids and the run's dependency totals with it."""
    assert main(["check", str(run)]) == 0
    archive, _manifest = make_bundle(run, tmp_path / "run.bundle.tar.gz")
    packed = json.loads(read_member(archive, "report.json"))
    assert packed == json.loads((run / "report.json").read_text())
    assert packed["recovery_dependencies"]["by_dependency"]
    control = next(s for s in packed["scenarios"] if s["id"] == "ctl-stale-replica")
    assert control["layer"]["layer"] and control["conclusion"]["levels"]
    for key in ("dependencies", "trend", "scheduling", "field_messages"):
        assert control[key], key
    assert all(f.get("message_id") for cat in control["evidence"].values() for f in cat["findings"])
    zh = read_member(archive, "report.zh.md").decode()
    assert english_in(finding_texts(zh, html_page=False)) == []
