"""Reports rendered from the machine contract (``report.json``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from faultdrill.report.markdown import render_markdown

if TYPE_CHECKING:
    from faultdrill.evaluate import RunResult

__all__ = ["render_markdown", "write_reports"]


def write_reports(result: RunResult) -> dict[str, str]:
    """Write report.json and report.md into the run directory; returns their paths."""
    data = result.to_json()
    out = result.run_dir
    (out / "report.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    (out / "report.md").write_text(render_markdown(data))
    return {"json": str(out / "report.json"), "markdown": str(out / "report.md")}
