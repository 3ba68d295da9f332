"""Reports rendered from the machine contract (``report.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from faultdrill.report.html import render_html
from faultdrill.report.i18n import LANGS, check_lang
from faultdrill.report.markdown import render_markdown

if TYPE_CHECKING:
    from faultdrill.judge.evaluate import RunResult

__all__ = ["LANGS", "render_html", "render_markdown", "render_reports", "write_reports"]


def render_reports(run_dir: Path, lang: str = "en", out: Path | None = None) -> dict[str, str]:
    """(Re)write report.md and report.html of a recorded run from its report.json and event
    files, in ``lang``, into ``out`` (default: the run directory); returns their paths."""
    check_lang(lang)
    data = json.loads((run_dir / "report.json").read_text())
    out = out or run_dir
    (out / "report.md").write_text(render_markdown(data, lang))
    (out / "report.html").write_text(render_html(data, run_dir, lang))
    return {
        "json": str(run_dir / "report.json"),
        "markdown": str(out / "report.md"),
        "html": str(out / "report.html"),
    }


def write_reports(result: RunResult, lang: str = "en") -> dict[str, str]:
    """Write report.json, report.md and report.html into the run directory; returns their
    paths. The human reports are rendered from the JSON just written (never from live
    state), in ``lang`` (``en`` or ``zh``)."""
    data = result.to_json()
    out = result.run_dir
    (out / "report.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    return render_reports(out, lang)
