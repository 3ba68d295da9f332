"""Goodput accounting of one recorded item, in the categories of ml-goodput-measurement.

The job's wall time (platform ``job_submitted`` to the job's end state) is split, on the
timeline of the lowest rank of each incarnation, into:

=========================  ==================================================================
productive                 step time of committed steps (the progress the final model has)
wasted_progress            step time of steps run and then thrown away: progress since the
                           last checkpoint lost to a disruption (``WASTED_PROGRESS_FROM_
                           DISRUPTION``)
recovery                   from the last activity of an incarnation (its last step or save) to
                           the first step of the next one, less its restore
                           (``INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION``: detection, restart,
                           rendezvous, worker start, any hang in between)
checkpoint_save            what saves blocked training, as the workload reported it
                           (``duration_s`` of ``ckpt_save``/``ckpt_save_failed``;
                           ``UNPRODUCTIVE_CHECKPOINT_SAVE_TIME``)
checkpoint_restore         what finding, verifying and loading a checkpoint took (``duration_s``
                           of ``ckpt_load``; ``UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME``)
startup                    job submission to the first incarnation's first step, plus each
                           incarnation's first step beyond the median step time
                           (``TRAINING_PREP`` + ``PROGRAM_STARTUP``)
other                      the rest: after the last step (final save, shutdown, an exit
                           barrier) and anything not attributed above (``OTHER``)
=========================  ==================================================================

Step ``k``'s time runs from step ``k-1`` (or the incarnation's load decision) to step ``k``
on one rank. Save and restore times the workload did not report stay in the categories
they fall in, and a note says so. Every figure is one observation under the conditions the
report prints beside it, not a service level.
"""

from __future__ import annotations

import statistics

import numpy as np

from faultdrill.checks.api import Msg
from faultdrill.checks.progress import chain_note
from faultdrill.events import Event
from faultdrill.records import Goodput, message_of
from faultdrill.timeline import Incarnation, Segment, Timeline

__all__ = ["CATEGORIES", "account"]

CATEGORIES = (
    "productive",
    "wasted_progress",
    "recovery",
    "checkpoint_save",
    "checkpoint_restore",
    "startup",
    "other",
)

#: ml-goodput-measurement's names for our categories.
ML_GOODPUT_NAMES = {
    "productive": "GOODPUT (productive step time)",
    "wasted_progress": "WASTED_PROGRESS_FROM_DISRUPTION",
    "recovery": "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION",
    "checkpoint_save": "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME",
    "checkpoint_restore": "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME",
    "startup": "TRAINING_PREP + PROGRAM_STARTUP",
    "other": "OTHER",
}

_END_STATES = ("succeeded", "failed", "stopped")


def _window(tl: Timeline) -> tuple[float | None, float | None, str | None]:
    sub = tl.first("platform", "job_submitted")
    ends = [e for e in tl.of("platform", "job_state") if e.get("state") in _END_STATES]
    start = sub.mono if sub is not None else None
    end = ends[-1].mono if ends else None
    state = str(ends[-1].get("state")) if ends else None
    if end is None:
        probes = [e.mono for e in tl.events if e.src == "probe"]
        steps = tl.steps.mono
        last = max([*probes, *(steps.tolist() if len(steps) else [])], default=None)
        end = last
    return start, end, state


def account(tl: Timeline, *, checkpoint_every: int | None = None) -> Goodput:
    """The goodput breakdown of one item (seconds and shares of the total), with notes."""
    start, end, state = _window(tl)
    notes: list[Msg | str] = []
    if start is None or end is None or end <= start:
        why = Msg("goodput.why.no-window")
        return Goodput(available=False, why=why.text(), why_message=message_of(why))
    total = end - start
    secs = dict.fromkeys(CATEGORIES, 0.0)
    chain, chain_notes = tl.committed_chain()
    notes += [chain_note(n) for n in chain_notes]
    committed = tl.rows_in(chain) if chain else np.zeros(len(tl.steps), dtype=bool)
    saves = [
        e for e in tl.events if e.src == "probe" and e.kind in ("ckpt_save", "ckpt_save_failed")
    ]
    unreported_saves = [e for e in saves if e.get("duration_s") is None]
    if unreported_saves:
        notes.append(Msg("goodput.note.save-duration", n=len(unreported_saves)))
    for e in saves:
        secs["checkpoint_save"] += float(e.get("duration_s") or 0.0)
    stepped = [inc for inc in tl.incarnations if inc.first_step is not None]
    last_activity = start  # the first incarnation's gap runs from the job's submission
    for n, inc in enumerate(stepped):
        last_activity = _account_incarnation(
            tl, inc, n == 0, last_activity, saves, committed, secs, notes
        )
    if not stepped:
        notes.append(Msg("goodput.note.no-step"))
    attributed = sum(v for k, v in secs.items() if k != "other")
    secs["other"] = max(0.0, total - attributed)
    if attributed > total + 0.5:
        notes.append(Msg("goodput.note.over", seconds=attributed - total))
    if state != "succeeded":
        notes.append(Msg("goodput.note.ended", state=state or "none"))
    return _breakdown(tl, chain, total, secs, notes, checkpoint_every)


def _account_incarnation(
    tl: Timeline,
    inc: Incarnation,
    first: bool,
    since: float,
    saves: list[Event],
    committed: np.ndarray,
    secs: dict[str, float],
    notes: list[Msg | str],
) -> float:
    """Add one stepped incarnation's seconds to ``secs`` and its notes to ``notes``: its
    restore, the gap before it (``startup`` for the ``first``, else ``recovery``), its step
    times. ``since`` is where the gap starts: the job's submission for the first
    incarnation, else the previous one's last activity (0.0: no gap). Returns this
    incarnation's last activity (its last step or save)."""
    st = tl.steps
    rank = min(inc.ranks)
    rows = np.flatnonzero((st.inc == inc.index) & (st.rank == rank))
    rows = rows[np.lexsort((st.mono[rows], st.step[rows]))]
    pids = {pid for pid, r in inc.members.items() if r == rank}
    load = next((e for e in inc.loads if int(e.get("pid", -1)) in pids), None)
    restore = float(load.get("duration_s") or 0.0) if load is not None else 0.0
    secs["checkpoint_restore"] += restore
    if load is not None and load.kind == "ckpt_load" and load.get("duration_s") is None:
        notes.append(Msg("goodput.note.load-duration", inc=inc.index))
    begin = load.mono if load is not None else inc.ready_mono
    gap = begin - (since if first else (since or begin))
    secs["startup" if first else "recovery"] += max(0.0, gap - restore)
    dts, last_step = _step_times(tl, inc, rows, begin, saves, committed)
    if dts:
        typical = statistics.median(d for d, _ in dts[1:]) if len(dts) > 1 else dts[0][0]
        extra = max(0.0, dts[0][0] - typical)
        secs["startup"] += extra
        dts[0] = (dts[0][0] - extra, dts[0][1])
    for dt, is_committed in dts:
        secs["productive" if is_committed else "wasted_progress"] += dt
    own_saves = [e.mono for e in saves if int(e.get("pid", -1)) in inc.members]
    return max([last_step, *own_saves])


def _step_times(
    tl: Timeline,
    inc: Incarnation,
    rows: np.ndarray,
    begin: float,
    saves: list[Event],
    committed: np.ndarray,
) -> tuple[list[tuple[float, bool]], float]:
    """Each step's time on one rank of ``inc`` (from the step before it, or ``begin`` for
    the first, less the saves of ``inc`` in between) and whether it is committed; and the
    time of its last step (``begin`` if none)."""
    st = tl.steps
    prev, dts = begin, []
    for i in rows:
        mono = float(st.mono[i])
        inside = sum(
            float(e.get("duration_s") or 0.0)
            for e in saves
            if prev < e.mono <= mono and int(e.get("pid", -1)) in inc.members
        )
        dts.append((max(0.0, mono - prev - inside), bool(committed[i])))
        prev = mono
    return dts, prev


def _breakdown(
    tl: Timeline,
    chain: list[Segment],
    total: float,
    secs: dict[str, float],
    notes: list[Msg | str],
    checkpoint_every: int | None,
) -> Goodput:
    """The breakdown as :func:`account` returns it, from the seconds per category."""
    return Goodput(
        available=True,
        total_s=round(total, 3),
        seconds={k: round(v, 3) for k, v in secs.items()},
        shares={k: round(v / total, 4) for k, v in secs.items()},
        goodput=round(secs["productive"] / total, 4),
        ml_goodput_names=ML_GOODPUT_NAMES,
        incarnations=len(tl.incarnations),
        committed_steps=sum(s.steps for s in chain),
        recomputed_steps=sum(s.steps for s in tl.recomputed(chain)) if chain else None,
        conditions=(
            "measured on the lowest rank of each incarnation from platform job submission to "
            "the job's end state"
            + (f"; checkpoint every {checkpoint_every} steps" if checkpoint_every else "")
            + "; save/restore times as reported by the workload"
        ),
        notes=[n if isinstance(n, str) else n.text() for n in notes],
        # the notes as messages (a note the timeline wrote in words stays as written)
        note_messages=[n if isinstance(n, str) else message_of(n) for n in notes],
    )
