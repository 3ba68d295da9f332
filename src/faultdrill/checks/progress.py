"""Progress evidence: training continued from the last valid checkpoint, with no jump, no
restart from zero, and every committed sample consumed exactly once."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from faultdrill.checks.api import CheckContext, Finding, Msg, Verdict, check
from faultdrill.events import CHECKPOINT_COMMIT_KINDS, Event
from faultdrill.intervals import describe, length, merge, overlaps, subtract
from faultdrill.timeline import Incarnation, Segment, StepTable, Timeline

if TYPE_CHECKING:
    from faultdrill.readings.reference import Reference

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


def no_committed_progress(notes: list[str]) -> Msg:
    """Why there is no committed progress: the timeline's notes, or that there is none."""
    if notes:
        return Msg("progress.chain-notes", notes=chain_notes(notes))
    return Msg("progress.no-committed-progress")


def invalid_checkpoints(tl: Timeline, before: float) -> dict[str, str]:
    """Checkpoint ids known to be invalid at time ``before`` -> why.

    Invalid means a fault damaged it (an injection naming ``ckpt_id``), or the harness's
    inventory found that it does not verify. The inventory is recorded at the end, so it
    applies only if no replica ever loaded the checkpoint with verification: such a load
    shows it was intact then, and the damage came later."""
    bad: dict[str, str] = {}
    for e in tl.of("fault", "injected"):
        if e.mono < before and e.get("ckpt_id"):
            bad[str(e["ckpt_id"])] = f"damaged by fault {e.get('fault')}"
    intact = {str(e.get("id")) for e in tl.of("probe", "ckpt_load") if e.get("verified") is True}
    for e in tl.of("harness", "ckpt_inventory"):
        if e.get("verifies") is False and e.get("state") != "pruned" and str(e["id"]) not in intact:
            bad.setdefault(str(e["id"]), f"does not verify ({e.get('reason', 'digest mismatch')})")
    return bad


def newest_valid_before(tl: Timeline, mono: float) -> tuple[str | None, int]:
    """The newest checkpoint saved before ``mono`` that is not known to be invalid."""
    bad = invalid_checkpoints(tl, mono)
    saves = [e for e in tl.of("probe", "ckpt_save") if e.mono < mono and str(e["id"]) not in bad]
    if not saves:
        return None, 0
    best = max(saves, key=lambda e: (int(e["step"]), e.mono))
    return str(best["id"]), int(best["step"])


def newest_committed_before(tl: Timeline, mono: float) -> tuple[str | None, int] | None:
    """On a platform that commits checkpoints (:data:`~faultdrill.events.CHECKPOINT_COMMIT_KINDS`
    on its timeline, e.g. Ray Train's report), the newest valid checkpoint it had committed
    before ``mono``: a save counts once the platform recorded a commit at its step. ``None``
    when the timeline holds no commit at all (the platform resumes from any completed save).

    Matching by step, not by the directory named: a platform handed the wrong directory at
    a step (the known-bad "stale hand-over") still committed that step's checkpoint."""
    commits = [e for k in sorted(CHECKPOINT_COMMIT_KINDS) for e in tl.of("platform", k)]
    if not commits:
        return None
    steps: set[int] = set()
    for e in commits:
        if e.mono < mono:
            try:
                steps.add(int(e["step"]))
            except (KeyError, TypeError, ValueError):
                continue
    bad = invalid_checkpoints(tl, mono)
    saves = [
        e
        for e in tl.of("probe", "ckpt_save")
        if e.mono < mono and str(e["id"]) not in bad and int(e["step"]) in steps
    ]
    if not saves:
        return None, 0
    best = max(saves, key=lambda e: (int(e["step"]), e.mono))
    return str(best["id"]), int(best["step"])


def scratch_or(ckpt_id: object) -> object:
    """A checkpoint id, or "scratch" (said in the report's language) when there is none."""
    return ckpt_id if ckpt_id else Msg("value.scratch")


def chain_note(note: str) -> Msg | str:
    """A note of :meth:`~faultdrill.timeline.Timeline.committed_chain` as a message.

    The timeline writes its notes as English sentences; the known ones are said again by
    id so that a report in another language can translate them (an unknown one stays as
    written)."""
    for mid, pattern in _CHAIN_NOTES:
        m = pattern.fullmatch(note)
        if m:
            return Msg(mid, **m.groupdict())
    return note


def chain_notes(notes: list[str]) -> list[Msg | str]:
    return [chain_note(n) for n in notes]


_CHAIN_NOTES = (
    ("timeline.chain.no-progress", re.compile(r"no incarnation made progress")),
    (
        "timeline.chain.no-load-decision",
        re.compile(r"incarnation (?P<inc>\d+) recorded no checkpoint load decision"),
    ),
    (
        "timeline.chain.unknown-checkpoint",
        re.compile(
            r"incarnation (?P<inc>\d+) loaded checkpoint '(?P<ckpt>.*)', "
            r"which no replica of this run reported saving"
        ),
    ),
    (
        "timeline.chain.unknown-writer",
        re.compile(r"writer of checkpoint '(?P<ckpt>.*)' is not a known earlier incarnation"),
    ),
)


def _restarted(tl: Timeline) -> list[Incarnation]:
    return [i for i in tl.incarnations[1:] if i.loads or i.first_step is not None]


@check("progress.resume-point", "progress")
def resume_point(ctx: CheckContext) -> list[Finding]:
    """Each restart resumed from the newest valid checkpoint saved before it started."""
    tl, name = ctx.timeline, "progress.resume-point"
    if not tl.incarnations:
        return [ctx.finding(name, R, Msg("progress.resume-point.no-replica"))]
    restarts = _restarted(tl)
    if not restarts:
        return [ctx.finding(name, P, Msg("progress.resume-point.no-restart"))]
    out = []
    for inc in restarts:
        ld = inc.load
        if ld is None:
            out.append(
                ctx.finding(name, R, Msg("progress.resume-point.no-load-decision", inc=inc.index))
            )
            continue
        ids = {str(e.get("id")) for e in inc.loads if e.kind == "ckpt_load"}
        if len(ids) > 1 or (ids and any(e.kind == "ckpt_none" for e in inc.loads)):
            out.append(
                ctx.finding(
                    name,
                    F,
                    Msg("progress.resume-point.ranks-differ", inc=inc.index, ids=sorted(ids)),
                )
            )
            continue
        out.append(_resumed_where(ctx, name, inc, ld))
    return out


def _resumed_where(ctx: CheckContext, name: str, inc: Incarnation, ld: Event) -> Finding:
    """Where restart ``inc`` (whose load decision is ``ld``) resumed, against the newest
    valid checkpoint saved before it started."""
    tl = ctx.timeline
    want_id, want_step = newest_valid_before(tl, inc.started_mono)
    got_step = inc.resume_step or 0
    got_id = ld.get("id") if ld.kind == "ckpt_load" else None
    handed = _handover(ld, want_id)
    if got_step == want_step:
        return ctx.finding(
            name,
            P,
            Msg(
                "progress.resume-point.newest-valid.handed"
                if handed
                else "progress.resume-point.newest-valid",
                inc=inc.index,
                ckpt=scratch_or(got_id),
                step=got_step,
                handed=handed,
            ),
            inc=inc.index,
            step=got_step,
        )
    committed = newest_committed_before(tl, inc.started_mono)
    if got_step < want_step and committed is not None and committed[1] == got_step:
        return ctx.finding(
            name,
            P,
            Msg(
                "progress.resume-point.newest-committed",
                inc=inc.index,
                ckpt=scratch_or(got_id),
                step=got_step,
                valid=want_id,
                valid_step=want_step,
                lost=want_step - got_step,
            ),
            inc=inc.index,
            step=got_step,
            uncommitted=want_step,
        )
    if got_step < want_step:
        return ctx.finding(
            name,
            F,
            Msg(
                "progress.resume-point.older-than-valid.handed"
                if handed
                else "progress.resume-point.older-than-valid",
                inc=inc.index,
                step=got_step,
                ckpt=scratch_or(got_id),
                valid=want_id,
                valid_step=want_step,
                handed=handed,
            ),
            inc=inc.index,
            step=got_step,
            expected=want_step,
        )
    return ctx.finding(
        name,
        F,
        Msg(
            "progress.resume-point.newer-than-valid",
            inc=inc.index,
            step=got_step,
            ckpt=got_id,
            valid_step=want_step,
        ),
        inc=inc.index,
        step=got_step,
        expected=want_step,
    )


def _handover(load: Event, newest: str | None) -> Msg | None:
    """What the platform handed over for this resume (``None`` when the platform does not
    hand checkpoints over: the load event has no ``handed_over``)."""
    if "handed_over" not in load.fields:
        return None
    handed = load.get("handed_over")
    if handed is None:
        return Msg("progress.resume-point.handed-none")
    if handed == newest:
        return Msg("progress.resume-point.handed-newest", ckpt=handed)
    return Msg("progress.resume-point.handed-other", ckpt=handed, newest=newest)


@check("progress.no-restart-from-zero", "progress")
def no_restart_from_zero(ctx: CheckContext) -> list[Finding]:
    """No restart began again at step 1 while a valid checkpoint existed."""
    tl, name = ctx.timeline, "progress.no-restart-from-zero"
    restarts = _restarted(tl)
    if not tl.incarnations:
        return [ctx.finding(name, R, Msg("progress.no-replica"))]
    out = []
    uncommitted = 0  # restarts from zero before the platform had committed a checkpoint
    for inc in restarts:
        from_scratch = inc.resume_step == 0 or inc.first_step == 1
        want_id, want_step = newest_valid_before(tl, inc.started_mono)
        committed = newest_committed_before(tl, inc.started_mono)
        if committed is not None and committed[0] is None:
            # the platform had committed no checkpoint yet: scratch is all it could resume
            # from (progress.resume-point says which save it had not committed)
            uncommitted += from_scratch and want_id is not None
            continue
        if from_scratch and want_id is not None:
            out.append(
                ctx.finding(
                    name,
                    F,
                    Msg(
                        "progress.no-restart-from-zero.from-zero",
                        inc=inc.index,
                        ckpt=want_id,
                        step=want_step,
                    ),
                    inc=inc.index,
                    lost_steps=want_step,
                )
            )
    if not out:
        out.append(
            ctx.finding(
                name,
                P,
                Msg(
                    "progress.no-restart-from-zero.none-committed"
                    if uncommitted
                    else "progress.no-restart-from-zero.none",
                    restarts=len(restarts),
                ),
            )
        )
    return out


@check("progress.no-jump", "progress")
def no_jump(ctx: CheckContext) -> list[Finding]:
    """Within each replica steps advance by exactly one; a restart's first step is the
    step after the checkpoint it loaded."""
    tl, name = ctx.timeline, "progress.no-jump"
    st = tl.steps
    if len(st) == 0:
        return [ctx.finding(name, R, Msg("progress.no-steps"))]
    out = []
    count, first = step_jumps(st.pid, st.step)
    if first is not None:
        out.append(
            ctx.finding(
                name,
                F,
                Msg(
                    "progress.no-jump.inside-replica",
                    count=count,
                    pid=first[0],
                    step=first[1],
                    next=first[2],
                ),
                count=count,
            )
        )
    for inc in _restarted(tl):
        base = inc.resume_step
        if base is None or inc.first_step is None:
            continue
        if inc.first_step != base + 1:
            forward = inc.first_step > base + 1
            out.append(
                ctx.finding(
                    name,
                    F,
                    Msg(
                        "progress.no-jump.forward" if forward else "progress.no-jump.back",
                        inc=inc.index,
                        step=base,
                        first=inc.first_step,
                    ),
                    inc=inc.index,
                )
            )
    if not out:
        out.append(
            ctx.finding(
                name,
                P,
                Msg("progress.no-jump.contiguous"),
            )
        )
    return out


def step_jumps(pid: np.ndarray, step: np.ndarray) -> tuple[int, tuple[int, int, int] | None]:
    """How many times a process's step did not advance by exactly one from its previous
    step (rows in time order), and the first such (pid, step, next step) in (pid, time)
    order; (0, None) if none.

    Read a block of rows at a time, each block's rows grouped by process with a stable
    linear-time sort, each process's last step carried from block to block: the same
    answer as sorting every row by (pid, time) (:func:`_step_jumps_sorted`), with
    temporaries of one block instead of several as long as the table."""
    if pid.size == 0:
        return 0, None
    lo, hi = int(pid.min()), int(pid.max())
    if hi - lo + 1 > _PID_SPAN:
        return _step_jumps_sorted(pid, step)
    present = np.zeros(hi - lo + 1, dtype=bool)
    for a in range(0, pid.size, _JUMP_BLOCK):
        present[pid[a : a + _JUMP_BLOCK] - lo] = True
    codes = np.cumsum(present, dtype=np.int32) - 1  # pid -> its rank among the pids
    distinct = int(present.sum())
    if distinct <= 1 << 16:  # numpy sorts 16-bit integers stably in linear time (radix)
        codes = codes.astype(np.uint16)  # 2 x 16,384 processes: more than int16 holds
    last = np.zeros(distinct, dtype=np.int64)  # each process's last step so far ...
    seen = np.zeros(distinct, dtype=bool)  # ... if it had one
    count, best = 0, None  # best: (pid, row, step, next) of the first jump in (pid, time)
    for a in range(0, pid.size, _JUMP_BLOCK):
        code = codes[pid[a : a + _JUMP_BLOCK] - lo]
        order = np.argsort(code, kind="stable")
        code, at = code[order], order
        at += a
        s = step[at]
        starts = np.ones(code.size, dtype=bool)  # each process's first row in this block
        np.not_equal(code[1:], code[:-1], out=starts[1:])
        prev = np.empty_like(s)
        prev[1:] = s[:-1]
        prev[starts] = last[code[starts]]
        bad = s - prev != 1
        bad[starts] &= seen[code[starts]]
        hits = np.flatnonzero(bad)
        ends = np.flatnonzero(np.append(starts[1:], True))
        last[code[ends]] = s[ends]
        seen[code[ends]] = True
        if not hits.size:
            continue
        count += int(hits.size)
        h = int(hits[0])  # the first in this block; rows of one pid are in time order
        candidate = (int(pid[at[h]]), int(at[h]), int(prev[h]), int(s[h]))
        if best is None or candidate[0] < best[0]:  # an earlier block's wins a tie
            best = candidate
    return count, None if best is None else (best[0], best[2], best[3])


def _step_jumps_sorted(
    pid: np.ndarray, step: np.ndarray
) -> tuple[int, tuple[int, int, int] | None]:
    """:func:`step_jumps` by one stable sort of every row by pid (pids too far apart for
    a table of codes)."""
    order = np.argsort(pid, kind="stable")
    pid, step = pid[order], step[order]
    del order
    same = pid[1:] == pid[:-1]
    same &= step[1:] - step[:-1] != 1
    bad = np.flatnonzero(same)
    if not bad.size:
        return 0, None
    i = int(bad[0])
    return int(bad.size), (int(pid[i]), int(step[i]), int(step[i + 1]))


#: Rows read at a time by :func:`step_jumps`; pids further apart than ``_PID_SPAN`` are
#: sorted instead (a table of codes that size is 32 MiB).
_JUMP_BLOCK = 1 << 21
_PID_SPAN = 1 << 23


@check("progress.steps-attributed", "progress")
def steps_attributed(ctx: CheckContext) -> list[Finding]:
    """Every step event came from a replica that announced itself (``run_start``): steps of
    an unknown process belong to no incarnation, so no other check judges them."""
    tl, name = ctx.timeline, "progress.steps-attributed"
    st = tl.steps
    if len(st) == 0:
        return [ctx.finding(name, R, Msg("progress.no-steps"))]
    unknown = st.inc < 0
    n = int(unknown.sum())
    if n:
        pids = sorted({int(p) for p in np.unique(st.pid[unknown])})
        steps = st.step[unknown]
        return [
            ctx.finding(
                name,
                R,
                Msg(
                    "progress.steps-attributed.unknown-pids",
                    n=n,
                    pids=pids[:8],
                    first=int(steps.min()),
                    last=int(steps.max()),
                ),
                rows=n,
                pids=pids,
            )
        ]
    return [
        ctx.finding(
            name,
            P,
            Msg("progress.steps-attributed.all", n=len(st)),
        )
    ]


@check("progress.checkpoint-verified", "progress")
def checkpoint_verified(ctx: CheckContext) -> list[Finding]:
    """Every checkpoint load verified the checkpoint's digest before using it."""
    tl, name = ctx.timeline, "progress.checkpoint-verified"
    loads = tl.of("probe", "ckpt_load")
    # verified null: the load could not say (a job's log line without a verified group),
    # which is unknown; a load that leaves the field out claims nothing, which is a fail
    unsaid = [e for e in loads if "verified" in e.fields and e.fields["verified"] is None]
    unverified = [
        e for e in loads if e.get("verified") is not True and e.get("verified", 0) is not None
    ]
    if unsaid and not unverified:
        e = unsaid[0]
        return [
            ctx.finding(
                name,
                R,
                Msg(
                    "progress.checkpoint-verified.unsaid",
                    count=len(unsaid),
                    rank=e.get("rank"),
                    ckpt=e.get("id"),
                    step=e.get("step"),
                    via=Msg("progress.via-log") if e.get("via") == "log" else "",
                ),
                count=len(unsaid),
            )
        ]
    if unverified:
        e = unverified[0]
        return [
            ctx.finding(
                name,
                F,
                Msg(
                    "progress.checkpoint-verified.unverified",
                    count=len(unverified),
                    rank=e.get("rank"),
                    ckpt=e.get("id"),
                    step=e.get("step"),
                ),
                count=len(unverified),
            )
        ]
    rejected = [
        r
        for e in tl.of("probe")
        if e.kind in ("ckpt_load", "ckpt_none")
        for r in e.get("rejected") or []
    ]
    ids = sorted({str(r.get("id")) for r in rejected})
    if not loads:
        msg = Msg("progress.checkpoint-verified.none-loaded")
    elif ids:
        msg = Msg("progress.checkpoint-verified.all-rejected-some", n=len(loads), ids=ids)
    else:
        msg = Msg("progress.checkpoint-verified.all", n=len(loads))
    return [
        ctx.finding(
            name,
            P,
            msg,
            rejected=[dict(r) for r in rejected],
        )
    ]


RC = "progress.restored-components"


@dataclass
class _Restore:
    """One rank's load of a checkpoint, with the part digests saved and restored."""

    load: Event
    saved: dict[str, str]
    restored: dict[str, str]
    trained: bool  # its incarnation took a step: what the load restored was used

    def differing(self) -> list[str]:
        return sorted(
            k for k, v in self.saved.items() if k in self.restored and self.restored[k] != v
        )

    def missing(self) -> list[str]:
        if not self.trained:
            return []
        return sorted(k for k in self.saved if k not in self.restored)


def _restores(tl: Timeline) -> tuple[list[_Restore], list[Event]]:
    """(the loads whose rank reported the checkpoint's parts when it was saved, the loads
    of checkpoints whose parts no rank reported at their save)."""
    parts = tl.of("probe", "ckpt_components")
    saved_ids = {str(e["id"]) for e in parts if e.get("phase") == "saved"}
    compared, unjudged = [], []
    for ld in tl.of("probe", "ckpt_load"):
        ckpt, rank, pid = str(ld["id"]), ld.get("rank"), ld.get("pid")
        if ckpt not in saved_ids:
            unjudged.append(ld)
            continue
        saves = [
            e
            for e in parts
            if e.get("phase") == "saved"
            and e["id"] == ckpt
            and e.get("rank") == rank
            and e.mono <= ld.mono
        ]
        if not saves:
            continue  # saved by another rank only: this rank's parts were not reported
        restored: dict[str, str] = {}
        for e in parts:
            mine = e.get("pid") == pid and e["id"] == ckpt and e.mono >= ld.mono
            if mine and e.get("phase") == "restored":
                restored.update(e["components"])
        inc = tl.inc_of_pid(int(pid)) if isinstance(pid, int) else None
        trained = inc is not None and tl.incarnations[inc].first_step is not None
        last = max(saves, key=lambda e: e.mono)
        compared.append(_Restore(ld, dict(last["components"]), restored, trained))
    return compared, unjudged


@check(RC, "progress")
def restored_components(ctx: CheckContext) -> list[Finding]:
    """Every part of a checkpoint that was saved (model, optimizer, scheduler, RNG, data
    loader: the digests the job reported with the save) was restored by each load to the
    same digest (the digests the job reported right after the load)."""
    tl = ctx.timeline
    if not tl.of("probe", "ckpt_load"):
        return [ctx.finding(RC, P, Msg("progress.restored-components.no-load"))]
    compared, unjudged = _restores(tl)
    if not compared and not tl.of("probe", "ckpt_components"):
        return [
            ctx.finding(
                RC,
                P,
                Msg("progress.restored-components.none-reported"),
                to_be_verified="restored checkpoint components",
            )
        ]
    if not compared:  # digests reported, but none of a loading rank at its checkpoint's save
        unjudged = tl.of("probe", "ckpt_load")
    out = [_restore_failed(ctx, r) for r in compared if r.differing() or r.missing()]
    if out:
        return out
    names = sorted({k for r in compared for k in r.saved})
    out = (
        []
        if not compared
        else [
            ctx.finding(
                RC,
                P,
                Msg(
                    "progress.restored-components.all",
                    n=len(compared),
                    parts=names,
                    ranks=sorted({int(r.load.get("rank", 0)) for r in compared}),
                ),
                components=names,
            )
        ]
    )
    if unjudged:
        out.append(
            ctx.finding(
                RC,
                P,
                Msg(
                    "progress.restored-components.some-unreported",
                    n=len(unjudged),
                    ids=sorted({str(e["id"]) for e in unjudged}),
                ),
                to_be_verified="restored checkpoint components",
            )
        )
    return out


def _restore_failed(ctx: CheckContext, r: _Restore) -> Finding:
    ld = r.load
    inc = ctx.timeline.inc_of_pid(int(ld.get("pid", -1)))
    differing, missing = r.differing(), r.missing()
    mid = "differs" if differing else "missing"
    return ctx.finding(
        RC,
        F,
        Msg(
            f"progress.restored-components.{mid}",
            inc=inc,
            rank=ld.get("rank"),
            ckpt=ld["id"],
            step=ld["step"],
            parts=differing or missing,
            also=Msg("progress.restored-components.also-missing", parts=missing)
            if differing and missing
            else "",
        ),
        differing=differing,
        missing=missing,
    )


def _why_unobserved(tl: Timeline) -> Msg | str:
    """What the replicas said about their sample ids (``run_start``'s optional
    ``sample_ids`` field, e.g. "not observed: ..."), as a clause; '' when none said."""
    notes = sorted(
        {
            str(e.get("sample_ids"))
            for e in tl.of("probe", "run_start")
            if e.get("sample_ids") not in (None, "", "observed")
        }
    )
    return Msg("progress.sample-ledger.job-said", notes=notes) if notes else ""


def _rows_without_ids(tl: Timeline, rows: np.ndarray) -> int:
    """How many of the selected step rows carry no sample range at all."""
    if tl.steps.one_range_each:  # implicit offsets: every row has its range
        return 0
    counts = tl.steps.rng_off[1:] - tl.steps.rng_off[:-1]
    return int((rows & (counts == 0)).sum())


def _partly_observed(
    ctx: CheckContext, name: str, s: np.ndarray, e: np.ndarray, blind: int, n: int, why: Msg | str
) -> list[Finding]:
    """Some committed steps carry ids, some none: a replay among the observed ones is
    still a replay (fail); anything else cannot be decided (retest)."""
    out = []
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    ms, me = merge(s, e)
    if length(s, e) != length(ms, me):
        dup, first = overlaps(s, e)
        where = Msg("progress.sample-ledger.first", start=first[0], end=first[1]) if first else ""
        out.append(
            ctx.finding(
                name,
                F,
                Msg("progress.sample-ledger.replayed-among-observed", dup=dup, where=where),
                duplicated=dup,
            )
        )
    out.append(
        ctx.finding(
            name,
            R,
            Msg("progress.sample-ledger.partly-unobserved", blind=blind, n=n, why=why),
            unobserved=blind,
        )
    )
    return out


@check("progress.sample-ledger", "progress")
def sample_ledger(ctx: CheckContext) -> list[Finding]:
    """Every sample of committed progress was consumed exactly once: none replayed, none
    skipped, none outside what the baseline consumed for the same steps."""
    tl, name = ctx.timeline, "progress.sample-ledger"
    chain, notes = tl.committed_chain()
    if not chain:
        return [ctx.finding(name, R, no_committed_progress(notes))]
    if notes:
        return [
            ctx.finding(
                name, R, Msg("progress.sample-ledger.untraceable", notes=chain_notes(notes))
            )
        ]
    rows = tl.rows_in(chain)
    union = aligned_union(tl.steps, rows)  # the usual case, read by blocks: no copies
    if union is None:
        return _ledger_sorted(ctx, name, chain, rows)
    total, ms, me = union
    return _ledger_verdicts(ctx, name, chain, rows, total, ms, me, 0, None)


def _ledger_sorted(
    ctx: CheckContext, name: str, chain: list[Segment], rows: np.ndarray
) -> list[Finding]:
    """:func:`sample_ledger` from the committed rows' ranges, copied and sorted: any
    ranges (steps without ids, ranges of mixed widths, replays)."""
    tl = ctx.timeline
    # Only the committed rows' ranges are copied, and each union is merged once: at 10 M
    # steps a copy of the whole table would double the memory the checks need.
    s, e = _sorted_ranges(*tl.steps.ranges(rows))
    why = _why_unobserved(tl)
    if s.size == 0:
        return [ctx.finding(name, R, Msg("progress.sample-ledger.no-ids", why=why))]
    blind = _rows_without_ids(tl, rows)
    if blind:
        # Judging only the observed part would pass whatever the blind steps consumed, and
        # the baseline comparison would count their samples as skipped: neither is evidence.
        return _partly_observed(ctx, name, s, e, blind, int(rows.sum()), why)
    total = length(s, e)
    ms, me = merge(s, e)
    dup, first = overlaps(s, e) if total != length(ms, me) else (0, None)
    del s, e
    return _ledger_verdicts(ctx, name, chain, rows, total, ms, me, dup, first)


def _ledger_verdicts(
    ctx: CheckContext,
    name: str,
    chain: list[Segment],
    rows: np.ndarray,
    total: int,
    ms: np.ndarray,
    me: np.ndarray,
    dup: int,
    first: tuple[int, int] | None,
) -> list[Finding]:
    """:func:`sample_ledger`'s findings from the committed rows' ``total`` samples, their
    union ``ms``/``me`` and the samples consumed twice (``dup``, the ``first`` such)."""
    out = []
    if dup:
        out.append(
            ctx.finding(
                name,
                F,
                Msg("progress.sample-ledger.replayed", dup=dup, start=first[0], end=first[1])
                if first
                else Msg("progress.sample-ledger.replayed-somewhere", dup=dup),
                duplicated=dup,
            )
        )
    ref = ctx.reference
    if ref is not None and ref.rows:
        out += _against_baseline(ctx, name, ref, rows, ms, me)
        basis = Msg("progress.sample-ledger.basis.baseline")
    else:
        out += _contiguity_gaps(ctx, name, ms, me)
        basis = Msg("progress.sample-ledger.basis.contiguity")
    if not out:
        out.append(_exactly_once(ctx, name, chain, total, basis))
    return out


def aligned_union(st: StepTable, rows: np.ndarray) -> tuple[int, np.ndarray, np.ndarray] | None:
    """(samples, merged union) of the ranges of the selected rows, when they are what a
    healthy job's probe writes: one range per row, all of one width, each on a slot of
    that width (start = first start + k x width), no slot taken twice, the slots not much
    sparser than the rows. None otherwise (then the ranges are sorted instead).

    Read a block of rows at a time, marking each range's slot in a table of slots (one
    byte a slot), whose runs are the union: the same union :func:`merge` gives, in linear
    time and without copying the ranges."""
    if not st.one_range_each or not rows.any():
        return None
    start, end = st.rng_start, st.rng_end
    i = int(np.argmax(rows))
    width, base = int(end[i] - start[i]), int(start[i])
    if width <= 0:
        return None
    lo, hi, n = base, base, 0
    for a in range(0, rows.shape[0], _LEDGER_BLOCK):  # pass 1: one width, aligned, extent
        sel = rows[a : a + _LEDGER_BLOCK]
        s, e = start[a : a + _LEDGER_BLOCK][sel], end[a : a + _LEDGER_BLOCK][sel]
        if not s.size:
            continue
        if bool((e - s != width).any()) or bool(((s - base) % width != 0).any()):
            return None
        lo, hi, n = min(lo, int(s.min())), max(hi, int(s.max())), n + int(s.size)
    span = (hi - lo) // width + 1
    if span > 4 * n + 65536:
        return None
    taken = np.zeros(span + 2, dtype=bool)  # a free slot at each end: every run ends
    for a in range(0, rows.shape[0], _LEDGER_BLOCK):  # pass 2: the slots taken
        s = start[a : a + _LEDGER_BLOCK][rows[a : a + _LEDGER_BLOCK]]
        taken[(s - lo) // width + 1] = True
    if int(taken.sum()) != n:
        return None  # a slot taken twice: a replay, found and named by sorting
    edges = np.flatnonzero(taken[1:] != taken[:-1])  # a run is [edges[2k], edges[2k+1])
    return n * width, lo + edges[0::2] * width, lo + edges[1::2] * width


#: Rows read at a time by :func:`aligned_union`.
_LEDGER_BLOCK = 1 << 21


def _against_baseline(
    ctx: CheckContext,
    name: str,
    ref: Reference,
    rows: np.ndarray,
    ms: np.ndarray,
    me: np.ndarray,
) -> list[Finding]:
    """:func:`sample_ledger`'s comparison of the merged committed samples ``ms``/``me``
    with what the baseline consumed up to the last committed step of ``rows``: the
    samples it skipped and those it consumed beyond the baseline (fail each)."""
    out = []
    last = int(ctx.timeline.steps.step.max(where=rows, initial=np.iinfo(np.int64).min))
    rs, re_ = ref.cover_until(last)
    # subtract() works on unions, so the merged forms give the same answer
    missing = subtract(rs, re_, ms, me)
    extra = subtract(ms, me, rs, re_)
    if missing[0].size:
        n = int((missing[1] - missing[0]).sum())
        out.append(
            ctx.finding(
                name,
                F,
                Msg(
                    "progress.sample-ledger.skipped",
                    n=n,
                    last=last,
                    ranges=describe(*missing),
                ),
                skipped=n,
            )
        )
    if extra[0].size:
        n = int((extra[1] - extra[0]).sum())
        out.append(
            ctx.finding(
                name,
                F,
                Msg(
                    "progress.sample-ledger.extra",
                    n=n,
                    last=last,
                    ranges=describe(*extra),
                ),
                extra=n,
            )
        )
    return out


def _contiguity_gaps(ctx: CheckContext, name: str, ms: np.ndarray, me: np.ndarray) -> list[Finding]:
    """Without a baseline, :func:`sample_ledger`'s gaps between the merged committed
    samples ``ms``/``me`` (fail: skipped samples)."""
    if ms.size <= 1:
        return []
    gaps_s, gaps_e = me[:-1], ms[1:]
    n = int((gaps_e - gaps_s).sum())
    return [
        ctx.finding(
            name,
            F,
            Msg(
                "progress.sample-ledger.gaps",
                n=n,
                ranges=describe(gaps_s, gaps_e),
            ),
            skipped=n,
        )
    ]


def _exactly_once(
    ctx: CheckContext, name: str, chain: list[Segment], total: int, basis: Msg
) -> Finding:
    """:func:`sample_ledger`'s pass: ``total`` samples of the committed ``chain`` consumed
    exactly once (judged on ``basis``), with the recomputed steps beside it."""
    tl = ctx.timeline
    recomputed = tl.recomputed(chain)
    redo_n = length(*tl.steps.ranges(tl.rows_in(recomputed)))
    info = {
        "committed_steps": sum(seg.steps for seg in chain),
        "recomputed": [{"inc": g.inc, "first": g.first, "last": g.last} for g in recomputed],
        "recomputed_samples": redo_n,
    }
    rec = [
        Msg("progress.sample-ledger.recomputed-range", first=g.first, last=g.last, inc=g.inc)
        for g in recomputed
    ]
    return ctx.finding(
        name,
        P,
        Msg(
            "progress.sample-ledger.exactly-once",
            total=total,
            basis=basis,
            recomputed=rec or Msg("value.nothing"),
            samples=redo_n,
        ),
        **info,
    )


def _sorted_ranges(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ranges ordered by start (stable). When they all have one width (every rank
    consumes as many samples a step: the usual case) only the starts are sorted, in place,
    and the ends follow: the same result with a third of the memory and time."""
    if s.size == 0:
        return s, e
    width = int(e[0] - s[0])
    if width > 0 and bool(np.all(np.subtract(e, s) == width)):
        del e
        if s.base is not None:  # never sort a table's own column in place
            s = s.copy()
        s.sort()
        return s, s + width
    order = np.argsort(s, kind="stable")  # sorted copies replace the unsorted ones
    s = s[order]
    e = e[order]
    return s, e


@check("progress.completed", "progress")
def completed(ctx: CheckContext) -> list[Finding]:
    """Committed progress reached the planned last step and the run ended cleanly."""
    tl, name = ctx.timeline, "progress.completed"
    expects_failure = getattr(getattr(ctx.item, "expected", None), "job", "completes") == "fails"
    final = tl.final_incarnation()
    ref = ctx.reference
    target = ref.last_step if ref is not None and ref.rows else None
    ended_ok = final is not None and any(e.get("status") == "ok" for e in final.ends)
    reached = final.reached_step if final is not None else None
    if expects_failure:
        return [
            ctx.finding(
                name,
                P,
                Msg("progress.completed.expects-failure", reached=reached),
            )
        ]
    if target is None:
        if ended_ok:
            return [
                ctx.finding(
                    name,
                    P,
                    Msg("progress.completed.no-baseline-clean", reached=reached),
                )
            ]
        return [ctx.finding(name, R, Msg("progress.completed.unknown"))]
    if ended_ok and reached == target:
        return [ctx.finding(name, P, Msg("progress.completed.reached", target=target))]
    return [
        ctx.finding(
            name,
            F,
            Msg(
                "progress.completed.stopped" if ended_ok else "progress.completed.stopped-unclean",
                reached=reached,
                target=target,
            ),
            reached=reached,
            target=target,
        )
    ]
