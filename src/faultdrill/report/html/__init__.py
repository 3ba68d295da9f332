"""report.html: the deliverable a buyer signs, one self-contained file.

Rendered from a :class:`~faultdrill.report.model.Report` plus the run directory's event
files (timeline and loss curve), never from live state, so any recorded run or unpacked
bundle renders again. The file needs no network access: CSS, the small script and every
picture (inline SVG) are in the page (:mod:`.assets`), and a Content-Security-Policy forbids
loading anything else.

:mod:`.page` assembles the page, :mod:`.item` renders one scenario or control,
:mod:`.sections` the run-wide sections, :mod:`.generic` any recorded value without a section
of its own: keys of ``report.json`` this version does not know (added by newer checks,
inventories, network tracks...) are still shown, under "Additional recorded data"; keys that
are absent are simply not shown.
"""

from faultdrill.report.html.page import render_html
from faultdrill.report.html.sections import ManualStep, manual_steps

__all__ = ["ManualStep", "manual_steps", "render_html"]
