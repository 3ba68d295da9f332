"""JUnit XML for CI systems: a run, a replay or a regression diff as a test suite.

One ``testcase`` per scenario and control (and one for the baseline). A ``failure`` is a
verdict of fail, a control not caught, a replay that does not match or a regression; an
``error`` is a retest (the evidence could not decide, which must never read as a pass);
``skipped`` is an item that was not run.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

from faultdrill.report.model import Item, Report
from faultdrill.safepath import replacing

if TYPE_CHECKING:
    from faultdrill.archive.diff import DiffResult
    from faultdrill.archive.replay import ReplayResult

__all__ = ["diff_suite", "replay_suite", "report_suite", "write_junit"]


def _case(suite: ET.Element, classname: str, name: str, time_s: float | None = None) -> ET.Element:
    case = ET.SubElement(suite, "testcase", classname=classname, name=name)
    if time_s is not None:
        case.set("time", f"{max(time_s, 0.0):.3f}")
    return case


def _finish(suite: ET.Element) -> ET.Element:
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    for tag, attr in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        suite.set(attr, str(sum(1 for c in cases if c.find(tag) is not None)))
    return suite


def _not_pass(s: Item) -> str:
    return "\n".join(
        f"[{f.verdict}] {cat} {f.check}: {f.message}"
        for cat, f in s.findings()
        if f.verdict != "pass"
    )


def _item_outcome(case: ET.Element, s: Item) -> None:
    """The item's failure or error (retest) under its test case; nothing when it passed."""
    detail = _not_pass(s)
    if s.control:
        if s.caught is None:
            message = f"negative control not proven: {s.not_proven_why}"
            ET.SubElement(case, "error", type="retest", message=message).text = detail
        elif not s.caught:
            message = f"negative control not caught by {s.expected_check}"
            ET.SubElement(case, "failure", message=message).text = detail
    elif s.verdict == "fail":
        ET.SubElement(case, "failure", message=f"fail ({s.recovery_class})").text = detail
    elif s.verdict != "pass":
        ET.SubElement(case, "error", type="retest", message="retest").text = detail


def report_suite(report: Report, name: str | None = None) -> ET.Element:
    """A run's report as one test suite."""
    suite = ET.Element("testsuite", name=name or f"faultdrill.{report.task_id}")
    case = _case(suite, "baseline", "baseline")
    if report.baseline.verdict == "fail":
        ET.SubElement(case, "failure", message="the baseline failed its own checks")
    elif report.baseline.verdict != "pass":
        ET.SubElement(case, "error", message="the baseline could not be judged (retest)")
    for s in report.scenarios:
        classname = "control" if s.control else f"scenario.round{s.round}"
        _item_outcome(_case(suite, classname, s.id, s.times.recover_s), s)
    for sk in report.skipped:
        case = _case(suite, sk.kind, sk.id)
        ET.SubElement(case, "skipped", message=sk.reason)
    return _finish(suite)


def diff_suite(diff: DiffResult) -> ET.Element:
    suite = ET.Element("testsuite", name=f"faultdrill.archive.diff {diff.a} -> {diff.b}")
    case = _case(suite, "diff.run", "run")
    if diff.run_regressions:
        ET.SubElement(case, "failure", message="run regression").text = "\n".join(
            diff.run_regressions
        )
    for item in diff.items:
        case = _case(suite, "diff.control" if item.control else "diff.scenario", item.id)
        if item.regressions:
            ET.SubElement(case, "failure", message="; ".join(item.regressions)).text = "\n".join(
                item.regressions + item.changes
            )
        elif item.changes:
            ET.SubElement(case, "system-out").text = "\n".join(item.changes)
    return _finish(suite)


def replay_suite(replay: ReplayResult) -> ET.Element:
    suite = ET.Element("testsuite", name=f"faultdrill.archive.replay by {replay.operator}")
    for item in replay.items:
        case = _case(suite, "replay", str(item["id"]))
        if not item["matches"]:
            ET.SubElement(
                case, "failure", message="outcome differs from the original"
            ).text = "\n".join(item["differences"])
    return _finish(suite)


def write_junit(path: Path, *suites: ET.Element) -> Path:
    root = ET.Element("testsuites")
    for s in suites:
        root.append(s)
    for attr in ("tests", "failures", "errors", "skipped"):
        root.set(attr, str(sum(int(s.get(attr, "0")) for s in suites)))
    ET.indent(root)
    with replacing(path, within=None) as f:
        ET.ElementTree(root).write(f, encoding="utf-8", xml_declaration=True)
    return path
