"""Evidence from a job that cannot be changed: its own log lines, read live.

A job that calls no probe still prints its progress. The plan's ``logs`` section gives one
regular expression per kind of line (a step, a checkpoint saved or loaded, the start and
end of a run, the rank), with named groups for the values; faultdrill tails the job's
output while it runs and writes every line a pattern matches as the probe event it stands
for (``src`` ``probe``, ``via`` ``log``), stamped when the harness read it. Triggers, stop
conditions and checks then work on them as on a probe's events.

=============  ======================================================================
``spec``       the plan's ``logs`` section (:class:`LogPatterns`): patterns validated at
               load, and how one line reads (:class:`LineReader`)
``tail``       :class:`LogTail`: the live reader of the job's log files (a thread), which
               attributes each line to the replica that wrote it and emits the events
=============  ======================================================================

What a recorded item's report says about evidence from logs (which events came from them,
how late they were stamped, what they cannot show) is judging:
:mod:`faultdrill.judge.log_evidence`.

See ``docs/integrations.md`` ("A job that cannot be changed").
"""

from faultdrill.joblogs.spec import LineReader, LogPatterns, Reading

__all__ = ["LineReader", "LogPatterns", "Reading"]
