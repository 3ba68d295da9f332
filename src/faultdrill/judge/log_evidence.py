"""What a recorded item says about evidence read from the job's log lines (report data).

Pure: reads the timeline (the events the tail wrote, its ``harness``/``log_evidence``
summary) and the findings, so ``faultdrill check`` says the same offline.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from faultdrill.i18n import Msg
from faultdrill.records import LogEvidence, plain

if TYPE_CHECKING:
    from faultdrill.checks import EvidenceResult
    from faultdrill.joblogs.spec import LogPatterns
    from faultdrill.timeline import Timeline

__all__ = ["BLIND_RETESTS", "as_reached", "log_evidence", "not_observable"]

_EVIDENCE = ("progress", "resources", "results")

#: check -> the retests it gives for want of what the patterns cannot show (its other
#: retests have another cause: they stay retest).
BLIND_RETESTS: dict[str, frozenset[str]] = {
    "progress.sample-ledger": frozenset({"progress.sample-ledger.no-ids"}),
    "results.loss-matches-baseline": frozenset({"results.loss-matches-baseline.nothing-compared"}),
    "progress.checkpoint-verified": frozenset({"progress.checkpoint-verified.unsaid"}),
    "progress.resume-point": frozenset({"progress.resume-point.no-load-decision"}),
    "results.final-checkpoint-verifies": frozenset(
        {
            "results.final-checkpoint-verifies.no-inventory",
            "results.final-checkpoint-verifies.no-pointer",
        }
    ),
    "results.final-model-digest": frozenset(
        {"results.final-model-digest.no-digest", "results.final-model-digest.no-baseline-digest"}
    ),
}

#: check -> what stays to be verified when the logs cannot show it (report data, English).
_TO_BE_VERIFIED = {
    "progress.sample-ledger": "which samples each step consumed",
    "results.loss-matches-baseline": "the training loss",
    "progress.checkpoint-verified": "whether each checkpoint was verified before loading",
    "progress.resume-point": "where each restart resumed",
    "results.final-checkpoint-verifies": "the final checkpoint",
    "results.final-model-digest": "the final model",
}


def not_observable(patterns: LogPatterns, evidence: dict[str, EvidenceResult]) -> None:
    """Make each retest that a check gives only for want of what the plan's patterns
    cannot show (:meth:`LogPatterns.blind_spot_messages`, :data:`BLIND_RETESTS`) a pass
    that is no evidence: its message says it is not observable from the job's log lines
    and stays to be verified (``to_be_verified``, ``not_observable`` in its data), and the
    conclusion level does not rest on it. Such a check does not stop the scenarios; every
    other retest, and every fail, stays as it is. Changes ``evidence`` in place."""
    from faultdrill.checks.api import Finding, Verdict

    blind = dict(patterns.blind_spot_messages())
    for result in evidence.values():
        for i, f in enumerate(result.findings):
            why = blind.get(f.check)
            if why is None or f.verdict != Verdict.RETEST:
                continue
            if f.message_id not in BLIND_RETESTS.get(f.check, frozenset()):
                continue
            result.findings[i] = Finding.of(
                f.check,
                Verdict.PASS,
                Msg("logs.not-observable", why=why, said=f.said),
                {
                    **f.data,
                    "to_be_verified": _TO_BE_VERIFIED[f.check],
                    "not_observable": True,
                },
            )


def log_evidence(
    patterns: LogPatterns, tl: Timeline, evidence: dict[str, EvidenceResult]
) -> LogEvidence:
    """The ``log_evidence`` entry of one item in ``report.json``:

    * ``unit``: what one step is, in the job's words (``logs.unit``: ``epoch``);
    * ``from_logs`` / ``from_probe``: probe events per kind, by where they came from;
    * ``stamped`` and ``stamp_bound_s``: events are stamped when the harness read their
      line, at most that long after the line reached the file (None: not recorded);
    * ``read``: the tail's counts (lines per file, lines not attributed to a replica, not
      readable, replicas that announced themselves with their first line);
    * ``not_observable``: each check the plan's patterns leave without evidence, why (also
      as ``why_message``), its verdict here, and ``to_be_verified``: whether it passed as
      no evidence, to be verified (:func:`not_observable`), which is never a pass on
      evidence;
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
    tbv = {f.check for e in evidence.values() for f in e.findings if f.data.get("not_observable")}
    raw = {
        "source": "the job's own log lines (plan: logs)",
        "unit": patterns.unit,
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
                "to_be_verified": check in tbv,
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
    return LogEvidence.model_validate(plain(raw))


def as_reached(evidence: dict[str, EvidenceResult]) -> dict[str, EvidenceResult]:
    """``evidence`` as far as it reached: each finding that passed as no evidence
    (:func:`not_observable`) counts as undecided (retest), so that a conclusion level
    resting on it is not proven. A copy; ``evidence`` is unchanged."""
    from dataclasses import replace

    from faultdrill.checks.api import EvidenceResult, Verdict

    return {
        cat: EvidenceResult(
            e.category,
            [
                replace(f, verdict=Verdict.RETEST) if f.data.get("not_observable") else f
                for f in e.findings
            ],
        )
        for cat, e in evidence.items()
    }
