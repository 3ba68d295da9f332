"""Results evidence: after recovery the run computes what the baseline computed, evaluates
the same on held-out data, and its artifacts are intact.

Comparison mode (plan ``pass_criteria.results``): ``bitwise`` when world size and config
are unchanged from the baseline (``auto`` picks it then), else ``tolerance`` on the mean
loss per step (and the mean held-out metric per step) with the plan's ``rtol``/``atol``.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from faultdrill.checks.api import CheckContext, Finding, Msg, Verdict, check
from faultdrill.checks.progress import no_committed_progress
from faultdrill.judge.reference import (
    EvalKey,
    LossLookup,
    Reference,
    committed_evaluations,
    evaluation_values,
    mean_loss_by_step,
)
from faultdrill.timeline import StepTable

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


def comparison_mode(ctx: CheckContext) -> tuple[str, Msg]:
    """('bitwise' | 'tolerance', why)."""
    wanted = getattr(getattr(ctx.item, "pass_criteria", None), "results", "auto")
    ref = ctx.reference
    tl = ctx.timeline
    sizes = {i.world_size for i in tl.incarnations if i.first_step is not None}
    digests = {str(e.get("config_digest", "")) for i in tl.incarnations for e in i.starts}
    same = ref is not None and sizes <= {ref.world_size} and digests <= set(ref.config_digests)
    if wanted == "bitwise":
        return "bitwise", Msg("results.mode.plan-bitwise")
    if wanted == "tolerance":
        return "tolerance", Msg("results.mode.plan-tolerance")
    if same:
        return "bitwise", Msg("results.mode.unchanged")
    return "tolerance", Msg("results.mode.changed", sizes=sorted(sizes))


#: Rows compared at a time: the temporaries of a comparison stay a few dozen MB whatever
#: the table's size (at 41 M rows, one pass over all would need 1.5 GB of them).
_CHUNK = 1 << 22


def _compare_bitwise(
    losses: LossLookup, st: StepTable, rows: np.ndarray
) -> tuple[int, int, int, int, tuple[int, float] | None]:
    """Compare the committed ``rows`` of ``st`` with the baseline's losses, a chunk at a
    time: (pairs compared, pairs silent on either side, pairs without a baseline
    counterpart, pairs that differ, (table row, baseline loss) of the first that differs
    at the lowest step, or None)."""
    n_cmp = silent = unknown = differing = 0
    first: tuple[int, float] | None = None
    first_step = 0
    for lo in range(0, len(st), _CHUNK):
        sel = rows[lo : lo + _CHUNK]
        if not sel.any():
            continue
        at = np.flatnonzero(sel)
        at += lo
        base, known = losses.lookup(st.step[at], st.rank[at])
        got = st.loss[at]
        # NaN: that step reported no loss (a job logging every N steps): nothing to compare
        compared = known & ~np.isnan(got) & ~np.isnan(base)
        silent += int((known & ~compared).sum())
        unknown += int((~known).sum())
        n_cmp += int(compared.sum())
        differ = np.flatnonzero(compared & (base != got))
        if differ.size:
            differing += int(differ.size)
            j = int(np.argmin(st.step[at[differ]]))
            step = int(st.step[at[differ[j]]])
            if first is None or step < first_step:
                first, first_step = (int(at[differ[j]]), float(base[differ[j]])), step
    return n_cmp, silent, unknown, differing, first


@check("results.loss-matches-baseline", "results")
def loss_matches_baseline(ctx: CheckContext) -> list[Finding]:
    """The loss of every committed step equals the baseline's at that step."""
    name, ref, tl = "results.loss-matches-baseline", ctx.reference, ctx.timeline
    if ref is None or ref.rows == 0:
        return [ctx.finding(name, R, Msg("results.loss-matches-baseline.no-baseline"))]
    chain, notes = tl.committed_chain()
    if not chain:
        return [ctx.finding(name, R, no_committed_progress(notes))]
    rows = tl.rows_in(chain)
    n_got = int(rows.sum())
    mode, why = comparison_mode(ctx)
    if mode == "bitwise":
        return _loss_bitwise(ctx, ref, name, mode, why, rows, n_got)
    return _loss_within_tolerance(ctx, ref, name, mode, why, rows)


def _loss_bitwise(
    ctx: CheckContext,
    ref: Reference,
    name: str,
    mode: str,
    why: Msg,
    rows: np.ndarray,
    n_got: int,
) -> list[Finding]:
    """:func:`loss_matches_baseline` in bitwise mode: the committed ``rows`` (``n_got`` of
    them) against the baseline's loss at the same step and rank."""
    st = ctx.timeline.steps
    n_cmp, silent, unknown, differing, first = _compare_bitwise(ref.losses, st, rows)
    if not n_cmp and not unknown:
        return [
            ctx.finding(
                name,
                R,
                Msg("results.loss-matches-baseline.nothing-compared", n=n_got),
                mode=mode,
            )
        ]
    out = []
    if first is not None:
        i, base_loss = first
        out.append(
            ctx.finding(
                name,
                F,
                Msg(
                    "results.loss-matches-baseline.differ",
                    n=differing,
                    compared=n_cmp,
                    why=why,
                    step=int(st.step[i]),
                    rank=int(st.rank[i]),
                    got=float(st.loss[i]),
                    baseline=base_loss,
                ),
                first_step=int(st.step[i]),
                differing=differing,
                mode=mode,
            )
        )
    if unknown:
        out.append(
            ctx.finding(
                name,
                F,
                Msg("results.loss-matches-baseline.unknown", n=unknown),
                unknown=unknown,
                mode=mode,
            )
        )
    if not out:
        out.append(_bitwise_equal(ctx, name, mode, why, n_cmp, silent))
    return out


def _bitwise_equal(
    ctx: CheckContext, name: str, mode: str, why: Msg, n_cmp: int, silent: int
) -> Finding:
    """:func:`loss_matches_baseline`'s bitwise pass: ``n_cmp`` losses equal to the
    baseline's, ``silent`` pairs without a loss on either side (said, not compared)."""
    return ctx.finding(
        name,
        P,
        Msg(
            "results.loss-matches-baseline.bitwise-some-silent"
            if silent
            else "results.loss-matches-baseline.bitwise",
            n=n_cmp,
            why=why,
            silent=silent,
        ),
        mode=mode,
        compared=n_cmp,
        not_reported=silent,
    )


def _loss_within_tolerance(
    ctx: CheckContext, ref: Reference, name: str, mode: str, why: Msg, rows: np.ndarray
) -> list[Finding]:
    """:func:`loss_matches_baseline` in tolerance mode: the mean loss per step of the
    committed ``rows`` against the baseline's, within the plan's rtol/atol."""
    st = ctx.timeline.steps
    tol = ctx.plan.tolerance
    g_steps, g_loss = mean_loss_by_step(st.step[rows], st.loss[rows])
    r_steps, r_loss = ref.step_loss()
    common, gi, ri = np.intersect1d(g_steps, r_steps, return_indices=True)
    if common.size == 0:
        return [ctx.finding(name, R, Msg("results.no-common-step"))]
    close = np.isclose(g_loss[gi], r_loss[ri], rtol=tol.rtol, atol=tol.atol)
    if not close.all():
        i = int(np.flatnonzero(~close)[0])
        return [
            ctx.finding(
                name,
                F,
                Msg(
                    "results.loss-matches-baseline.outside-tolerance",
                    n=int((~close).sum()),
                    steps=int(common.size),
                    rtol=tol.rtol,
                    atol=tol.atol,
                    why=why,
                    step=int(common[i]),
                    got=float(g_loss[gi][i]),
                    baseline=float(r_loss[ri][i]),
                ),
                mode=mode,
            )
        ]
    worst = float(np.max(np.abs(g_loss[gi] - r_loss[ri]) / np.maximum(np.abs(r_loss[ri]), 1e-12)))
    return [
        ctx.finding(
            name,
            P,
            Msg(
                "results.loss-matches-baseline.within-tolerance",
                steps=int(common.size),
                rtol=tol.rtol,
                worst=worst,
                why=why,
            ),
            mode=mode,
            worst_rel=worst,
        )
    ]


@check("results.final-model-digest", "results")
def final_model_digest(ctx: CheckContext) -> list[Finding]:
    """Where bitwise applies, the final model is identical to the baseline's."""
    name, ref, tl = "results.final-model-digest", ctx.reference, ctx.timeline
    if _expects_failure(ctx):
        return [ctx.finding(name, P, Msg("results.expects-failure"))]
    if ref is None or ref.rows == 0:
        return [ctx.finding(name, R, Msg("results.final-model-digest.no-baseline"))]
    mode, why = comparison_mode(ctx)
    if mode != "bitwise":
        return [ctx.finding(name, P, Msg("results.final-model-digest.tolerance", why=why))]
    if ref is None or not ref.final_digest:
        return [ctx.finding(name, R, Msg("results.final-model-digest.no-baseline-digest"))]
    final = tl.final_incarnation()
    digests = {str(e.get("model_digest")) for e in final.ends} if final else set()
    digests.discard("")
    digests.discard("None")  # as in Reference: a run_end without a digest is no evidence
    if not digests:
        return [ctx.finding(name, R, Msg("results.final-model-digest.no-digest"))]
    if len(digests) > 1:
        return [
            ctx.finding(
                name, F, Msg("results.final-model-digest.ranks-differ", digests=sorted(digests))
            )
        ]
    got = digests.pop()
    if got != ref.final_digest:
        return [
            ctx.finding(
                name,
                F,
                Msg(
                    "results.final-model-digest.differs",
                    got=got[:16],
                    baseline=ref.final_digest[:16],
                ),
                got=got,
                baseline=ref.final_digest,
            )
        ]
    return [ctx.finding(name, P, Msg("results.final-model-digest.identical", digest=got[:16]))]


@check("results.final-checkpoint-verifies", "results")
def final_checkpoint_verifies(ctx: CheckContext) -> list[Finding]:
    """The checkpoint ``latest`` points at after the run verifies against its manifest."""
    name, tl = "results.final-checkpoint-verifies", ctx.timeline
    inv = tl.of("harness", "ckpt_inventory")
    if not inv:
        return [ctx.finding(name, R, Msg("results.final-checkpoint-verifies.no-inventory"))]
    latest = [e for e in inv if e.get("latest")]
    pointer = tl.first("harness", "ckpt_latest")
    if not latest and pointer is not None and not pointer.get("file"):
        # No pointer file in this layout: the newest saved checkpoint is the one to verify.
        latest = sorted(inv, key=lambda e: int(e.get("step", 0)))[-1:]
    if not latest:
        if pointer is None:
            return [ctx.finding(name, R, Msg("results.final-checkpoint-verifies.no-pointer"))]
        why = pointer.get("problem") or Msg(
            "results.final-checkpoint-verifies.empty-pointer", file=pointer.get("file")
        )
        return [
            ctx.finding(name, F, Msg("results.final-checkpoint-verifies.no-checkpoint", why=why))
        ]
    e = latest[-1]
    if e.get("verifies"):
        return [
            ctx.finding(
                name,
                P,
                Msg(
                    "results.final-checkpoint-verifies.verifies",
                    ckpt=e.get("id"),
                    step=e.get("step"),
                ),
            )
        ]
    return [
        ctx.finding(
            name,
            F,
            Msg(
                "results.final-checkpoint-verifies.fails", ckpt=e.get("id"), reason=e.get("reason")
            ),
            id=e.get("id"),
        )
    ]


def _expects_failure(ctx: CheckContext) -> bool:
    return getattr(getattr(ctx.item, "expected", None), "job", "completes") == "fails"


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _mean_over_ranks(values: list[tuple[EvalKey, float]]) -> dict[tuple[int, str, str], float]:
    """(step, split, metric) -> mean over the ranks that evaluated it."""
    acc: dict[tuple[int, str, str], list[float]] = defaultdict(list)
    for (step, split, _rank, metric), v in values:
        acc[(step, split, metric)].append(v)
    return {k: sum(v) / len(v) for k, v in acc.items()}


def _compare_evaluations(
    ctx: CheckContext, got: list[tuple[EvalKey, float]], mode: str
) -> tuple[int, list[tuple[tuple[object, ...], float, float]]]:
    """(values compared, the differing ones as (key, drill, baseline)), lowest step first."""
    assert ctx.reference is not None
    ref = ctx.reference.evaluations
    pairs: list[tuple[tuple[object, ...], float, float]]
    if mode == "bitwise":
        pairs = [(k, v, ref[k]) for k, v in got if k in ref]
        differ = [(k, v, b) for k, v, b in pairs if not _same(v, b)]
    else:
        tol = ctx.plan.tolerance
        mine, theirs = _mean_over_ranks(got), _mean_over_ranks(list(ref.items()))
        pairs = [(k, v, theirs[k]) for k, v in mine.items() if k in theirs]
        differ = [
            (k, v, b)
            for k, v, b in pairs
            if not (_same(v, b) or math.isclose(v, b, rel_tol=tol.rtol, abs_tol=tol.atol))
        ]
    differ.sort(key=lambda d: (d[0][0], str(d[0][1:])))
    return len(pairs), [(tuple(k), v, b) for k, v, b in differ]


def _evaluation_differs(
    ctx: CheckContext,
    name: str,
    mode: str,
    why: Msg,
    compared: int,
    differ: list[tuple[tuple[object, ...], float, float]],
) -> Finding:
    (step, split, *rest), got, base = differ[0]
    where = (
        Msg("results.evaluation.where-rank", split=split, metric=rest[-1], rank=rest[0])
        if len(rest) == 2
        else Msg("results.evaluation.where", split=split, metric=rest[-1])
    )
    tol = ctx.plan.tolerance
    rule = (
        Msg("results.evaluation.rule-bitwise")
        if mode == "bitwise"
        else Msg("results.evaluation.rule-tolerance", rtol=tol.rtol, atol=tol.atol)
    )
    return ctx.finding(
        name,
        F,
        Msg(
            "results.evaluation-matches-baseline.differ",
            n=len(differ),
            compared=compared,
            rule=rule,
            why=why,
            step=step,
            where=where,
            got=got,
            baseline=base,
        ),
        first_step=step,
        differing=len(differ),
        mode=mode,
    )


@check("results.evaluation-matches-baseline", "results")
def evaluation_matches_baseline(ctx: CheckContext) -> list[Finding]:
    """The held-out evaluation of committed progress equals the baseline's at the same step,
    split and metric: bitwise where the loss is compared bitwise, else the mean over ranks
    within the plan's tolerance; the baseline's last evaluated step must be among them. A
    job that evaluated in its baseline but not after recovery is retest; a job that reports
    no evaluation at all (``probe.evaluation``) is outside this check: its held-out results
    stay to be verified, and the finding says so."""
    name, ref, tl = "results.evaluation-matches-baseline", ctx.reference, ctx.timeline
    if _expects_failure(ctx):
        return [ctx.finding(name, P, Msg("results.expects-failure"))]
    if ref is None:
        return [ctx.finding(name, R, Msg("results.evaluation-matches-baseline.no-baseline"))]
    if not ref.evaluations:
        return [_no_evaluation_in_baseline(ctx, name)]
    events = committed_evaluations(tl)
    if not events:
        n = len(tl.of("probe", "evaluation"))
        return [
            ctx.finding(
                name,
                R,
                Msg(
                    "results.evaluation-matches-baseline.none-committed-some"
                    if n
                    else "results.evaluation-matches-baseline.none-committed",
                    n=n,
                ),
            )
        ]
    mode, why = comparison_mode(ctx)
    compared, differ = _compare_evaluations(ctx, evaluation_values(events), mode)
    steps = sorted({int(e.get("step", -1)) for e in events})
    if differ:
        return [_evaluation_differs(ctx, name, mode, why, compared, differ)]
    return [_no_evaluation_differs(ctx, ref, name, mode, why, compared, steps)]


def _no_evaluation_in_baseline(ctx: CheckContext, name: str) -> Finding:
    """:func:`evaluation_matches_baseline` when the baseline evaluated nothing: retest if
    the item evaluated, else pass with the held-out results left to be verified."""
    if ctx.timeline.of("probe", "evaluation"):
        return ctx.finding(
            name,
            R,
            Msg("results.evaluation-matches-baseline.not-in-baseline"),
        )
    return ctx.finding(
        name,
        P,
        Msg("results.evaluation-matches-baseline.none"),
        to_be_verified="held-out evaluation",
    )


def _no_evaluation_differs(
    ctx: CheckContext,
    ref: Reference,
    name: str,
    mode: str,
    why: Msg,
    compared: int,
    steps: list[int],
) -> Finding:
    """:func:`evaluation_matches_baseline` when none of the ``compared`` evaluations
    differs: retest if none was compared or the baseline's last evaluated step is not among
    the item's ``steps``, else pass."""
    if not compared:
        return ctx.finding(
            name,
            R,
            Msg("results.evaluation-matches-baseline.no-common", steps=steps),
            mode=mode,
        )
    last = max(k[0] for k in ref.evaluations)
    if last not in steps:
        return ctx.finding(
            name,
            R,
            Msg("results.evaluation-matches-baseline.final-missing", n=compared, last=last),
            mode=mode,
        )
    return ctx.finding(
        name,
        P,
        Msg(
            "results.evaluation-matches-baseline.bitwise"
            if mode == "bitwise"
            else "results.evaluation-matches-baseline.within-tolerance",
            n=compared,
            steps=steps,
            why=why,
        ),
        mode=mode,
        compared=compared,
        steps=steps,
    )


@check("results.artifact-intact", "results")
def artifact_intact(ctx: CheckContext) -> list[Finding]:
    """Every file the job's final generation reported exporting (``probe.artifact``: the
    final model) is on disk after the run with the sha256 it reported, as the harness hashed
    it again. A job that exported in its baseline but not after recovery, or a file the
    harness did not hash, is retest; a job that exports nothing at all is outside this
    check (its artefacts stay to be verified, and the finding says so)."""
    name, tl = "results.artifact-intact", ctx.timeline
    if _expects_failure(ctx):
        return [ctx.finding(name, P, Msg("results.expects-failure"))]
    final = tl.final_incarnation()
    reported = {
        str(e.get("path")): e
        for e in tl.of("probe", "artifact")
        if final is not None and int(e.get("pid", -1)) in final.members
    }
    if not reported and ctx.reference is not None and not ctx.reference.artifacts:
        return [
            ctx.finding(
                name,
                P,
                Msg("results.artifact-intact.none"),
                to_be_verified="exported artefact",
            )
        ]
    if not reported:
        return [
            ctx.finding(
                name,
                R,
                Msg("results.artifact-intact.not-reported"),
            )
        ]
    checked = {str(e.get("path")): e for e in tl.of("harness", "artifact_verified")}
    out = []
    for path, art in sorted(reported.items()):
        what = {"name": art.get("name"), "path": path}
        seen = checked.get(path)
        if seen is None:
            out.append(ctx.finding(name, R, Msg("results.artifact-intact.not-hashed", **what)))
        elif not seen.get("present"):
            problem = seen.get("problem")
            out.append(
                ctx.finding(name, F, Msg("results.artifact-intact.gone", **what, problem=problem))
            )
        elif seen.get("sha256") != art.get("sha256"):
            out.append(
                ctx.finding(
                    name,
                    F,
                    Msg(
                        "results.artifact-intact.differs",
                        **what,
                        on_disk=str(seen.get("sha256"))[:16],
                        reported=str(art.get("sha256"))[:16],
                    ),
                    path=path,
                )
            )
    if out:
        return out
    return [
        ctx.finding(
            name,
            P,
            Msg(
                "results.artifact-intact.all",
                files=[
                    Msg(
                        "results.artifact-intact.intact",
                        name=art.get("name"),
                        sha256=str(art.get("sha256"))[:16],
                        bytes=checked[p].get("bytes"),
                    )
                    for p, art in sorted(reported.items())
                ],
            ),
        )
    ]
