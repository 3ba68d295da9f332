"""Progress evidence: training continued from the last valid checkpoint, with no jump, no
restart from zero, and every committed sample consumed exactly once."""

from __future__ import annotations

import numpy as np

from faultdrill.checks.api import CheckContext, Finding, Verdict, check
from faultdrill.events import Event
from faultdrill.intervals import describe, length, merge, overlaps, subtract
from faultdrill.timeline import Incarnation, Timeline

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


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


def _restarted(tl: Timeline) -> list[Incarnation]:
    return [i for i in tl.incarnations[1:] if i.loads or i.first_step is not None]


@check("progress.resume-point", "progress")
def resume_point(ctx: CheckContext) -> list[Finding]:
    """Each restart resumed from the newest valid checkpoint saved before it started."""
    tl, name = ctx.timeline, "progress.resume-point"
    if not tl.incarnations:
        return [ctx.finding(name, R, "no replica announced itself (no run_start events)")]
    restarts = _restarted(tl)
    if not restarts:
        return [ctx.finding(name, P, "no restart happened: the run progressed in one incarnation")]
    out = []
    for inc in restarts:
        ld = inc.load
        if ld is None:
            out.append(
                ctx.finding(
                    name,
                    R,
                    f"incarnation {inc.index} recorded no checkpoint "
                    "load decision (probe checkpoint_loaded/no_checkpoint missing)",
                )
            )
            continue
        ids = {str(e.get("id")) for e in inc.loads if e.kind == "ckpt_load"}
        if len(ids) > 1 or (ids and any(e.kind == "ckpt_none" for e in inc.loads)):
            out.append(
                ctx.finding(
                    name,
                    F,
                    f"ranks of incarnation {inc.index} resumed from "
                    f"different checkpoints: {sorted(ids)}",
                )
            )
            continue
        want_id, want_step = newest_valid_before(tl, inc.started_mono)
        got_step = inc.resume_step or 0
        got_id = ld.get("id") if ld.kind == "ckpt_load" else None
        handed = _handover(ld, want_id)
        if got_step == want_step:
            out.append(
                ctx.finding(
                    name,
                    P,
                    f"incarnation {inc.index} resumed from {got_id or 'scratch'} "
                    f"(step {got_step}), the newest valid checkpoint{handed}",
                    inc=inc.index,
                    step=got_step,
                )
            )
        elif got_step < want_step:
            out.append(
                ctx.finding(
                    name,
                    F,
                    f"incarnation {inc.index} resumed from step {got_step} "
                    f"({got_id or 'scratch'}) although valid checkpoint {want_id} at step "
                    f"{want_step} existed{handed}",
                    inc=inc.index,
                    step=got_step,
                    expected=want_step,
                )
            )
        else:
            out.append(
                ctx.finding(
                    name,
                    F,
                    f"incarnation {inc.index} resumed from step {got_step} ({got_id}), "
                    f"newer than the newest valid checkpoint (step {want_step}): an invalid or "
                    "unknown checkpoint was loaded",
                    inc=inc.index,
                    step=got_step,
                    expected=want_step,
                )
            )
    return out


def _handover(load: Event, newest: str | None) -> str:
    """What the platform handed over for this resume, in words ('' when the platform does
    not hand checkpoints over: the load event has no ``handed_over``)."""
    if "handed_over" not in load.fields:
        return ""
    handed = load.get("handed_over")
    if handed is None:
        return "; the platform handed over no checkpoint"
    if handed == newest:
        return f"; the platform handed over {handed}, the newest valid one"
    return f"; the platform handed over {handed}, not the newest valid one ({newest})"


@check("progress.no-restart-from-zero", "progress")
def no_restart_from_zero(ctx: CheckContext) -> list[Finding]:
    """No restart began again at step 1 while a valid checkpoint existed."""
    tl, name = ctx.timeline, "progress.no-restart-from-zero"
    restarts = _restarted(tl)
    if not tl.incarnations:
        return [ctx.finding(name, R, "no replica announced itself")]
    out = []
    for inc in restarts:
        from_scratch = inc.resume_step == 0 or inc.first_step == 1
        want_id, want_step = newest_valid_before(tl, inc.started_mono)
        if from_scratch and want_id is not None:
            out.append(
                ctx.finding(
                    name,
                    F,
                    f"incarnation {inc.index} restarted from step 1 although checkpoint "
                    f"{want_id} (step {want_step}) was valid: all progress was thrown away",
                    inc=inc.index,
                    lost_steps=want_step,
                )
            )
    if not out:
        out.append(
            ctx.finding(
                name,
                P,
                f"{len(restarts)} restart(s), none from zero while a valid checkpoint existed",
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
        return [ctx.finding(name, R, "no step events were recorded")]
    out = []
    order = np.lexsort((st.mono, st.pid))
    pid, step = st.pid[order], st.step[order]
    same = pid[1:] == pid[:-1]
    diff = step[1:] - step[:-1]
    bad = np.flatnonzero(same & (diff != 1))
    if bad.size:
        i = int(bad[0])
        out.append(
            ctx.finding(
                name,
                F,
                f"{bad.size} step discontinuities inside a replica; first: pid "
                f"{int(pid[i])} went from step {int(step[i])} to {int(step[i + 1])}",
                count=int(bad.size),
            )
        )
    for inc in _restarted(tl):
        base = inc.resume_step
        if base is None or inc.first_step is None:
            continue
        if inc.first_step != base + 1:
            kind = "jumped forward" if inc.first_step > base + 1 else "went back"
            out.append(
                ctx.finding(
                    name,
                    F,
                    f"incarnation {inc.index} loaded step {base} but its first step was "
                    f"{inc.first_step} ({kind})",
                    inc=inc.index,
                )
            )
    if not out:
        out.append(
            ctx.finding(
                name,
                P,
                "steps are contiguous in every replica and every "
                "restart continued at the step after its checkpoint",
            )
        )
    return out


@check("progress.steps-attributed", "progress")
def steps_attributed(ctx: CheckContext) -> list[Finding]:
    """Every step event came from a replica that announced itself (``run_start``): steps of
    an unknown process belong to no incarnation, so no other check judges them."""
    tl, name = ctx.timeline, "progress.steps-attributed"
    st = tl.steps
    if len(st) == 0:
        return [ctx.finding(name, R, "no step events were recorded")]
    unknown = st.inc < 0
    n = int(unknown.sum())
    if n:
        pids = sorted({int(p) for p in np.unique(st.pid[unknown])})
        steps = st.step[unknown]
        return [
            ctx.finding(
                name,
                R,
                f"{n} step event(s) from pid(s) {pids[:8]} that never emitted run_start "
                f"(steps {int(steps.min())}-{int(steps.max())}): they belong to no "
                "incarnation and no check judged them; find out what ran them",
                rows=n,
                pids=pids,
            )
        ]
    return [
        ctx.finding(
            name,
            P,
            f"all {len(st)} step events came from replicas that announced themselves",
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
                f"{len(unsaid)} load(s) did not say whether the checkpoint was verified before "
                f"it was used; first: rank {e.get('rank')} loaded {e.get('id')} (step "
                f"{e.get('step')})"
                + (" (read from the job's log line)" if e.get("via") == "log" else ""),
                count=len(unsaid),
            )
        ]
    if unverified:
        e = unverified[0]
        return [
            ctx.finding(
                name,
                F,
                f"{len(unverified)} load(s) used a checkpoint without verifying it; first: "
                f"rank {e.get('rank')} loaded {e.get('id')} (step {e.get('step')}) unverified",
                count=len(unverified),
            )
        ]
    rejected = [
        r
        for e in tl.of("probe")
        if e.kind in ("ckpt_load", "ckpt_none")
        for r in e.get("rejected") or []
    ]
    msg = f"{len(loads)} load(s), all verified"
    if rejected:
        ids = sorted({str(r.get("id")) for r in rejected})
        msg += f"; rejected as invalid: {', '.join(ids)}"
    return [
        ctx.finding(
            name,
            P,
            msg if loads else "no checkpoint was loaded",
            rejected=[dict(r) for r in rejected],
        )
    ]


def _why_unobserved(tl: Timeline) -> str:
    """What the replicas said about their sample ids (``run_start``'s optional
    ``sample_ids`` field, e.g. "not observed: ..."), as a clause; '' when none said."""
    notes = sorted(
        {
            str(e.get("sample_ids"))
            for e in tl.of("probe", "run_start")
            if e.get("sample_ids") not in (None, "", "observed")
        }
    )
    return f" (the job said: {'; '.join(notes)})" if notes else ""


def _rows_without_ids(tl: Timeline, rows: np.ndarray) -> int:
    """How many of the selected step rows carry no sample range at all."""
    counts = tl.steps.rng_off[1:] - tl.steps.rng_off[:-1]
    return int((rows & (counts == 0)).sum())


def _partly_observed(
    ctx: CheckContext, name: str, s: np.ndarray, e: np.ndarray, blind: int, n: int, why: str
) -> list[Finding]:
    """Some committed steps carry ids, some none: a replay among the observed ones is
    still a replay (fail); anything else cannot be decided (retest)."""
    out = []
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    ms, me = merge(s, e)
    if length(s, e) != length(ms, me):
        dup, first = overlaps(s, e)
        where = f"; first: [{first[0]}, {first[1]})" if first else ""
        out.append(
            ctx.finding(
                name,
                F,
                f"{dup} sample(s) consumed more than once among the committed steps that "
                f"carry ids (replayed){where}",
                duplicated=dup,
            )
        )
    out.append(
        ctx.finding(
            name,
            R,
            f"sample ids not observable for {blind} of {n} committed (rank, step) records: "
            f"the ledger cannot be checked for them{why}",
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
        return [ctx.finding(name, R, "; ".join(notes) or "no committed progress")]
    if notes:
        return [ctx.finding(name, R, "committed progress cannot be traced: " + "; ".join(notes))]
    rows = tl.rows_in(chain)
    # Only the committed rows' ranges are copied, and each union is merged once: at 10 M
    # steps a copy of the whole table would double the memory the checks need.
    s, e = tl.steps.ranges(rows)
    why = _why_unobserved(tl)
    if s.size == 0:
        return [
            ctx.finding(name, R, "steps carry no sample ids; the ledger cannot be checked" + why)
        ]
    blind = _rows_without_ids(tl, rows)
    if blind:
        # Judging only the observed part would pass whatever the blind steps consumed, and
        # the baseline comparison would count their samples as skipped: neither is evidence.
        return _partly_observed(ctx, name, s, e, blind, int(rows.sum()), why)
    out = []
    order = np.argsort(s, kind="stable")  # sorted copies replace the unsorted ones
    s = s[order]
    e = e[order]
    del order
    total = length(s, e)
    ms, me = merge(s, e)
    dup, first = overlaps(s, e) if total != length(ms, me) else (0, None)
    del s, e
    if dup:
        out.append(
            ctx.finding(
                name,
                F,
                f"{dup} sample(s) consumed more than once in committed "
                f"progress (replayed); first: [{first[0]}, {first[1]})"
                if first
                else f"{dup} sample(s) replayed",
                duplicated=dup,
            )
        )
    last = int(tl.steps.step.max(where=rows, initial=np.iinfo(np.int64).min))
    ref = ctx.reference
    if ref is not None and len(ref.steps):
        keep = ref.steps.step <= last
        if keep.all():
            rs, re_ = ref.cover_starts, ref.cover_ends
        else:
            rs, re_ = merge(*ref.steps.ranges(keep))
        # subtract() works on unions, so the merged forms give the same answer
        missing = subtract(rs, re_, ms, me)
        extra = subtract(ms, me, rs, re_)
        if missing[0].size:
            n = int((missing[1] - missing[0]).sum())
            out.append(
                ctx.finding(
                    name,
                    F,
                    f"{n} sample(s) the baseline consumed by step {last} "
                    f"were never consumed in committed progress (skipped): "
                    f"{describe(*missing)}",
                    skipped=n,
                )
            )
        if extra[0].size:
            n = int((extra[1] - extra[0]).sum())
            out.append(
                ctx.finding(
                    name,
                    F,
                    f"{n} sample(s) consumed that the baseline did not "
                    f"consume by step {last}: {describe(*extra)}",
                    extra=n,
                )
            )
        basis = "compared with the baseline"
    else:
        if ms.size > 1:
            gaps_s, gaps_e = me[:-1], ms[1:]
            n = int((gaps_e - gaps_s).sum())
            out.append(
                ctx.finding(
                    name,
                    F,
                    f"{n} sample id(s) skipped inside committed progress: "
                    f"{describe(gaps_s, gaps_e)}",
                    skipped=n,
                )
            )
        basis = "contiguity only (no baseline to compare with)"
    recomputed = tl.recomputed(chain)
    redo_n = length(*tl.steps.ranges(tl.rows_in(recomputed)))
    info = {
        "committed_steps": sum(seg.steps for seg in chain),
        "recomputed": [{"inc": g.inc, "first": g.first, "last": g.last} for g in recomputed],
        "recomputed_samples": redo_n,
    }
    if not out:
        rec = ", ".join(f"steps {g.first}-{g.last} of incarnation {g.inc}" for g in recomputed)
        out.append(
            ctx.finding(
                name,
                P,
                f"{total} committed samples, each consumed exactly once ({basis}); "
                f"recomputed separately: {rec or 'nothing'} ({redo_n} samples)",
                **info,
            )
        )
    return out


@check("progress.completed", "progress")
def completed(ctx: CheckContext) -> list[Finding]:
    """Committed progress reached the planned last step and the run ended cleanly."""
    tl, name = ctx.timeline, "progress.completed"
    expects_failure = getattr(getattr(ctx.item, "expected", None), "job", "completes") == "fails"
    final = tl.final_incarnation()
    ref = ctx.reference
    target = ref.last_step if ref is not None and len(ref.steps) else None
    ended_ok = final is not None and any(e.get("status") == "ok" for e in final.ends)
    reached = final.reached_step if final is not None else None
    if expects_failure:
        return [
            ctx.finding(
                name,
                P,
                f"not required: the plan expects this job to fail (last step reached: {reached})",
            )
        ]
    if target is None:
        if ended_ok:
            return [
                ctx.finding(
                    name,
                    P,
                    f"run ended cleanly at step {reached} (no baseline "
                    "to compare the target step with)",
                )
            ]
        return [ctx.finding(name, R, "no baseline and no clean end: completion unknown")]
    if ended_ok and reached == target:
        return [ctx.finding(name, P, f"reached step {target} and ended cleanly")]
    return [
        ctx.finding(
            name,
            F,
            f"committed progress stopped at step {reached} of {target}"
            + ("" if ended_ok else "; the run did not end cleanly"),
            reached=reached,
            target=target,
        )
    ]
