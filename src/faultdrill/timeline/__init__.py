"""The timeline: one run's events, merged on one clock, and what can be derived from them.

:mod:`~faultdrill.timeline.model` holds :class:`Timeline` and its derivations
(incarnations, process lives, the committed chain); :mod:`~faultdrill.timeline.steps` the
columnar :class:`StepTable`; :mod:`~faultdrill.timeline.reader` the fast reader of event
files, whose child processes run :mod:`faultdrill.timeline._child`.
"""

from faultdrill.timeline.model import Incarnation, ProcLife, Segment, Timeline
from faultdrill.timeline.steps import StepTable

__all__ = ["Incarnation", "ProcLife", "Segment", "StepTable", "Timeline"]
