"""The reference: what the fault-free baseline run says a correct run looks like."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from faultdrill.events import Event
from faultdrill.intervals import merge
from faultdrill.timeline import Segment, StepTable, Timeline

__all__ = ["EvalKey", "Reference", "committed_evaluations", "evaluation_values"]

#: One evaluated number: (step, split, rank, metric name).
EvalKey = tuple[int, str, int, str]


@dataclass
class Reference:
    """Committed steps of the baseline: per (rank, step) loss, samples, final digest, and
    the held-out evaluations of its committed progress."""

    run_id: str
    steps: StepTable
    final_digest: str | None
    world_size: int | None
    config_digests: frozenset[str]
    last_step: int
    cover_starts: np.ndarray
    cover_ends: np.ndarray
    evaluations: dict[EvalKey, float] = field(default_factory=dict)
    #: Names of the artefacts the baseline's final generation exported (probe.artifact).
    artifacts: frozenset[str] = frozenset()
    #: The baseline's events files that held lines that are not valid events: what is
    #: compared with this reference proves nothing (``Timeline.bad_lines``).
    damaged: tuple[str, ...] = ()

    @classmethod
    def from_timeline(cls, tl: Timeline, run_id: str = "baseline") -> Reference:
        chain, _notes = tl.committed_chain()
        st = StepTable.empty()
        if chain:
            rows = tl.rows_in(chain)
            # A fault-free baseline commits every row: share its columns instead of copying
            # them (tables are never modified in place).
            st = tl.steps if rows.all() else tl.steps.take(rows)
        final = tl.final_incarnation()
        digests = {str(e.get("model_digest")) for e in final.ends} if final else set()
        digests.discard("")
        digests.discard("None")
        cs, ce = merge(st.rng_start, st.rng_end)
        return cls(
            run_id=run_id,
            steps=st,
            final_digest=next(iter(digests)) if len(digests) == 1 else None,
            world_size=final.world_size if final else None,
            config_digests=frozenset(
                str(e.get("config_digest", "")) for i in tl.incarnations for e in i.starts
            ),
            last_step=int(st.step.max()) if len(st) else 0,
            cover_starts=cs,
            cover_ends=ce,
            evaluations=dict(evaluation_values(committed_evaluations(tl, chain))),
            artifacts=frozenset(
                str(e.get("name") or e.get("path"))
                for e in tl.of("probe", "artifact")
                if final is not None and int(e.get("pid", -1)) in final.members
            ),
            damaged=tuple(sorted(tl.bad_lines)),
        )

    def step_loss(self) -> tuple[np.ndarray, np.ndarray]:
        """(steps, global loss per step): the mean over ranks, for tolerance comparison."""
        return mean_loss_per_step(self.steps)


def mean_loss_per_step(st: StepTable) -> tuple[np.ndarray, np.ndarray]:
    return mean_loss_by_step(st.step, st.loss)


def mean_loss_by_step(step: np.ndarray, loss: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct steps, mean loss at each), from parallel columns; steps that reported no
    loss (NaN, see :class:`~faultdrill.timeline.StepTable`) are left out."""
    reported = ~np.isnan(loss)
    if not reported.all():
        step, loss = step[reported], loss[reported]
    if step.size == 0:
        return np.zeros(0, np.int64), np.zeros(0)
    steps, inv = np.unique(step, return_inverse=True)
    sums = np.bincount(inv, weights=loss)
    counts = np.bincount(inv)
    return steps, sums / counts


def committed_evaluations(tl: Timeline, chain: list[Segment] | None = None) -> list[Event]:
    """The ``evaluation`` events of the committed progress: from an incarnation of the
    committed chain, at a step of its segment (or the step it resumed from: the model as
    loaded, which the chain vouches for). Evaluations of recomputed steps are left out.
    ``chain``: the timeline's committed chain, if already derived."""
    if chain is None:
        chain, _notes = tl.committed_chain()
    segments = {seg.inc: seg for seg in chain}
    pid_inc = {pid: inc.index for inc in tl.incarnations for pid in inc.members}
    out = []
    for e in tl.of("probe", "evaluation"):
        seg = segments.get(pid_inc.get(int(e.get("pid", -1)), -1))
        if seg is not None and seg.first - 1 <= int(e.get("step", -1)) <= seg.last:
            out.append(e)
    return out


def evaluation_values(events: list[Event]) -> list[tuple[EvalKey, float]]:
    """Every number of the given ``evaluation`` events, keyed by (step, split, rank, metric);
    a value that is not a number (``null``) becomes NaN."""
    out = []
    for e in events:
        metrics = e.get("metrics") or {}
        if not isinstance(metrics, dict):
            continue
        for name, value in metrics.items():
            key = (
                int(e.get("step", -1)),
                str(e.get("split", "")),
                int(e.get("rank", 0)),
                str(name),
            )
            try:
                out.append((key, float(value)))
            except (TypeError, ValueError):
                out.append((key, float("nan")))
    return out
