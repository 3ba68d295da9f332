"""What a recorded item says about evidence read from the job's log lines (report data).

Pure: reads the timeline (the events the tail wrote, its ``harness``/``log_evidence``
summary) and the findings, so ``faultdrill check`` says the same offline.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from faultdrill.checks import EvidenceResult
    from faultdrill.joblogs.spec import LogPatterns
    from faultdrill.timeline import Timeline

__all__ = ["log_evidence"]

_EVIDENCE = ("progress", "resources", "results")


def log_evidence(
    patterns: LogPatterns, tl: Timeline, evidence: dict[str, EvidenceResult]
) -> dict[str, Any]:
    """The ``log_evidence`` entry of one item in ``report.json``:

    * ``from_logs`` / ``from_probe``: probe events per kind, by where they came from;
    * ``stamped`` and ``stamp_bound_s``: events are stamped when the harness read their
      line, at most that long after the line reached the file (None: not recorded);
    * ``read``: the tail's counts (lines per file, lines not attributed to a replica, not
      readable, replicas that announced themselves with their first line);
    * ``not_observable``: each check the plan's patterns leave without evidence, why (also
      as ``why_message``), and its verdict here (never a pass by default: such a check
      says retest);
    * ``undecided``: every progress, resources or results finding that is a retest, with
      its message id and params.
    """
    summary = tl.first("harness", "log_evidence")
    read = {} if summary is None else dict(summary.fields)
    from_logs: Counter[str] = Counter()
    from_probe: Counter[str] = Counter()
    for e in tl.of("probe"):
        (from_logs if e.get("via") == "log" else from_probe)[e.kind] += 1
    log_steps = int((read.get("events") or {}).get("step", 0))
    from_logs["step"] += log_steps
    if len(tl.steps) > log_steps:
        from_probe["step"] += len(tl.steps) - log_steps
    verdicts = {f.check: f.verdict.value for e in evidence.values() for f in e.findings}
    return {
        "source": "the job's own log lines (plan: logs)",
        "stamped": "each event when the harness read its line; the line carries no time "
        "of the job's",
        "stamp_bound_s": read.get("stamp_bound_s"),
        "from_logs": dict(sorted(from_logs.items())),
        "from_probe": dict(sorted((k, v) for k, v in from_probe.items() if v)),
        "read": {k: v for k, v in read.items() if k not in ("stamped", "stamp_bound_s")},
        "not_observable": [
            {
                "check": check,
                "why": why.text(),
                "verdict": verdicts.get(check),
                "why_message": why.to_json(),
            }
            for check, why in patterns.blind_spot_messages()
        ],
        "undecided": [
            {"check": f.check, "message": f.message, "message_id": f.message_id, "params": f.params}
            for cat in _EVIDENCE
            if cat in evidence
            for f in evidence[cat].findings
            if f.verdict.value == "retest"
        ],
    }
