"""The pictures of the HTML report, drawn as inline SVG from a recorded item's event files.

* :func:`~.timeline.timeline_svg`: swimlanes on one clock (seconds since the injection):
  the job's state, each node, each rank's incarnations, checkpoints saved and loaded, the
  network track when ``net`` events exist, injection windows shaded, and the four
  questions as numbered vertical lines.
* :func:`~.loss.loss_svg`: the fault-free baseline's loss per step against the drill's, one
  line per incarnation, with the resume point and the injection step marked.

Both read only what the run recorded (``<item>/events/*.jsonl``, loaded once per item by
:func:`~.view.load_item`) plus the item's answers in the
:class:`~faultdrill.report.model.Report`, so any run directory or unpacked bundle can be
drawn again. Nothing here needs network access: no fonts, scripts or images are referenced.
"""

from faultdrill.report.svg.canvas import PALETTE
from faultdrill.report.svg.loss import loss_svg
from faultdrill.report.svg.timeline import timeline_svg
from faultdrill.report.svg.view import ItemView, item_events_dir, load_item, proc_rows

__all__ = [
    "PALETTE",
    "ItemView",
    "item_events_dir",
    "load_item",
    "loss_svg",
    "proc_rows",
    "timeline_svg",
]
