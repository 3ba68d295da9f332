"""Reports rendered from the machine contract, ``report.json``.

:mod:`~faultdrill.report.model` defines that contract (a typed :class:`Report` with a
schema version) and reads and writes it; every renderer reads the model: the HTML report
(:mod:`~faultdrill.report.html`), report.md (:mod:`~faultdrill.report.markdown`), the
recovery runbook (:mod:`~faultdrill.report.runbook`), the local viewer
(:mod:`~faultdrill.report.serve`), and the archive tools (bundle, diff, replay, junit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from faultdrill import rundir
from faultdrill.i18n import LANGS, check_lang
from faultdrill.report.html import render_html
from faultdrill.report.markdown import render_markdown
from faultdrill.report.model import Report, read_report, write_report
from faultdrill.safepath import write_file

__all__ = [
    "LANGS",
    "Judged",
    "Report",
    "read_report",
    "render_html",
    "render_markdown",
    "render_reports",
    "write_reports",
]


def render_reports(run_dir: Path, lang: str = "en", out: Path | None = None) -> dict[str, str]:
    """(Re)write report.md and report.html of a recorded run from its report.json and event
    files, in ``lang``, into ``out`` (default: the run directory); returns their paths."""
    check_lang(lang)
    report = read_report(run_dir)
    out = out or run_dir
    write_file(out / rundir.REPORT_MD, render_markdown(report, lang), within=out)
    write_file(out / rundir.REPORT_HTML, render_html(report, run_dir, lang), within=out)
    return {
        "json": str(run_dir / rundir.REPORT_JSON),
        "markdown": str(out / rundir.REPORT_MD),
        "html": str(out / rundir.REPORT_HTML),
    }


class Judged(Protocol):
    """A judged run (:class:`~faultdrill.judge.evaluate.RunResult`): where it lives, and
    its report."""

    @property
    def run_dir(self) -> Path: ...

    def to_report(self) -> Report: ...


def write_reports(result: Judged, lang: str = "en") -> dict[str, str]:
    """Write report.json, report.md and report.html into the run directory; returns their
    paths. The human reports are rendered from the report.json just written, read back
    (never from live state), in ``lang`` (``en`` or ``zh``)."""
    write_report(result.to_report(), result.run_dir)
    return render_reports(result.run_dir, lang)
