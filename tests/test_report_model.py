"""report.json as typed data: one model, versioned, read back exactly as written, refused
with a message naming the field or the version, the same vocabulary as the judge."""

from __future__ import annotations

import copy
import json
import typing
from pathlib import Path
from typing import Any

import pytest

from faultdrill.checks import Verdict
from faultdrill.checks.api import Finding as CheckFinding
from faultdrill.cli import main
from faultdrill.errors import RunDirError
from faultdrill.judge.evaluate import RunResult, evaluate_item
from faultdrill.plan import Plan, RecoveryClass, Scenario
from faultdrill.plan.sections import CheckpointPolicy, Resources, Responsibility, Task
from faultdrill.readings.reference import Reference
from faultdrill.report.html import render_html
from faultdrill.report.markdown import render_markdown
from faultdrill.report.model import (
    SCHEMA_VERSION,
    ClassName,
    PlanCheckpoint,
    PlanResources,
    PlanTask,
    RecordedPlan,
    Report,
    VerdictName,
    read_report,
    report_schema,
)
from faultdrill.report.model import (
    Responsibility as RecordedResponsibility,
)
from tests.report_data import report_of, synthetic_report
from tests.timelines import baseline, restart


def test_a_report_reads_back_exactly_as_written() -> None:
    data = synthetic_report()
    out = report_of(data).to_json()
    assert next(iter(out)) == "schema_version" and out.pop("schema_version") == 1
    # the same keys, values and order: rewriting a recorded report changes nothing
    assert json.dumps(out) == json.dumps(data)


def test_keys_this_version_does_not_know_are_kept_where_they_were() -> None:
    rep = report_of(synthetic_report())
    assert rep.extra == {"future_summary": {"kill-worker": {"lost_s": 6.3, "recomputed_steps": 5}}}
    node_loss = rep.item("node-loss")
    assert node_loss is not None
    assert node_loss.extra["future_flag"] == "rdzv_join_s"
    assert node_loss.to_json()["future_probe"][1] == {"node": "n2", "rtt_ms": 48.0}


def test_a_report_without_a_schema_version_is_read_as_version_1() -> None:
    data = synthetic_report()
    assert "schema_version" not in data
    assert report_of(data).schema_version == 1 == SCHEMA_VERSION


def _written(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data))
    return path


def test_a_newer_schema_version_is_refused_naming_it_and_the_fix(tmp_path: Path) -> None:
    path = _written(tmp_path, {"schema_version": 2, **synthetic_report()})
    with pytest.raises(RunDirError) as err:
        read_report(tmp_path)
    msg = str(err.value)
    assert str(path) in msg and "schema_version 2" in msg and "version 1" in msg
    assert "faultdrill check RUN_DIR" in msg
    assert main(["diff", str(path), str(path)]) == 2  # a clean message, no traceback


@pytest.mark.parametrize("version", [0, -1, "1", True, None, 1.5])
def test_a_schema_version_that_is_no_version_is_refused(version: object) -> None:
    with pytest.raises(RunDirError, match="is not a report schema version"):
        Report.from_json({"schema_version": version, **synthetic_report()})


def test_a_report_that_does_not_fit_names_each_field() -> None:
    data = synthetic_report()
    data["scenarios"][1]["verdict"] = "maybe"
    del data["summary"]
    with pytest.raises(RunDirError) as err:
        Report.from_json(data, source="run/report.json")
    msg = str(err.value)
    assert msg.startswith("run/report.json: does not fit report schema version 1 (2 problems)")
    assert "scenarios[1].verdict: Input should be 'pass', 'retest' or 'fail' (got 'maybe')" in msg
    assert "  - summary: Field required" in msg
    with pytest.raises(RunDirError, match="not a faultdrill report"):
        Report.from_json({"plan": {}})
    with pytest.raises(RunDirError, match="not valid JSON"):
        Report.from_text(b"\x89PNG")


def test_what_a_missing_field_means_is_decided_once() -> None:
    """Both reports say the same about an item without conditions or answers (report.md
    used to fail on them, report.html to show them as absent)."""
    data = synthetic_report()
    item = data["scenarios"][0]
    del item["conditions"], item["questions"], item["times"]
    rep = report_of(data)
    md, html = render_markdown(rep, "en"), render_html(rep, None, "en")
    kill = md.split("### kill-worker")[1].split("### ")[0]
    assert "_Conditions of these observations_: — " in kill
    assert "1. Worker deemed lost: not observed" in kill
    assert "<b>Conditions of these observations</b>: — " in html
    assert "Worker deemed lost</span>: not observed" in html


def _run(tmp_path: Path, plan: Plan, scenario: Scenario) -> RunResult:
    ref = Reference.from_timeline(baseline().build())
    items = []
    for kind, item, tl in (("baseline", None, baseline()), ("scenario", scenario, restart())):
        work = tmp_path / kind
        (work / "events").mkdir(parents=True)
        items.append(evaluate_item(plan, kind, item, work, ref, timeline=tl.build()))
    return RunResult(plan, tmp_path, items[0], ref, items[1:], [])


def test_the_judge_writes_what_the_reader_reads(
    tmp_path: Path, plan: Plan, scenario: Scenario
) -> None:
    written = _run(tmp_path, plan, scenario).to_report()
    text = json.dumps(written.to_json(), indent=2)
    again = Report.from_text(text)
    assert again.to_json() == written.to_json()
    kill = again.item(scenario.id)
    assert kill is not None and (kill.verdict, kill.recovery_class) == ("pass", "automatic")
    assert kill.questions.resumed_from is not None and kill.questions.resumed_from.step == 4
    # the judge's own findings say which sentence they are, with its values
    (cls,) = [f for f in kill.expectation.findings if f.check == "expectation.recovery-class"]
    assert cls.message == "recovery class automatic, as expected"
    assert cls.message_id == "expectation.recovery-class.as-expected"
    assert cls.params == {"cls": "automatic", "expected": "automatic"}


def test_a_finding_writes_its_message_id_and_params_only_when_it_has_them() -> None:
    plain = CheckFinding("x", Verdict.PASS, "ok")
    assert plain.to_record().to_json() == {"check": "x", "verdict": "pass", "message": "ok"}
    named = CheckFinding("x", Verdict.FAIL, "3 bad", message_id="x.bad", params={"n": 3})
    assert named.to_record().to_json()["message_id"] == "x.bad" and named.to_record().to_json()[
        "params"
    ] == {"n": 3}


def test_the_vocabulary_is_the_judges() -> None:
    assert set(typing.get_args(VerdictName)) == {v.value for v in Verdict}
    assert set(typing.get_args(ClassName)) == {c.value for c in RecoveryClass}
    # the recorded plan names only fields the plan has
    for view, model in (
        (PlanTask, Task),
        (PlanResources, Resources),
        (PlanCheckpoint, CheckpointPolicy),
        (RecordedResponsibility, Responsibility),
    ):
        assert set(view.model_fields) <= set(model.model_fields), view
    assert set(RecordedPlan.model_fields) <= set(Plan.model_fields)


def test_schema_report_prints_the_reports_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "--report"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema == json.loads(json.dumps(report_schema()))
    assert schema["title"] == "Report" and "schema version 1" in schema["description"]
    assert {"schema_version", "scenarios", "summary", "baseline", "plan"} <= set(
        schema["properties"]
    )
    assert set(schema["required"]) >= {"scenarios", "summary", "baseline", "plan"}
    item = schema["$defs"]["Item"]
    assert item["properties"]["verdict"]["enum"] == ["pass", "retest", "fail"]
    assert main(["schema"]) == 0  # alone: still the plan's
    assert "scenarios" not in json.loads(capsys.readouterr().out)["properties"]


def test_a_report_read_twice_is_the_same_and_independent() -> None:
    data = synthetic_report()
    before = copy.deepcopy(data)
    a, b = report_of(data), report_of(data)
    assert a.to_json() == b.to_json() and data == before  # reading never changes what was read


def test_the_failure_facts_of_a_failed_job_fit_the_model(tmp_path: Path) -> None:
    # what engine.failure records is what report.json's Failure holds (no drift between them)
    from faultdrill.engine.failure import failure_facts
    from faultdrill.report.model import Failure

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "agent-n1.log").write_text("Traceback (most recent call last):\nboom\n")
    facts = failure_facts(tmp_path, ["train.py"])
    assert Failure.model_validate(facts).to_json() == facts
