"""Results evidence: after recovery the run computes what the baseline computed, evaluates
the same on held-out data, and its artifacts are intact.

Comparison mode (plan ``pass_criteria.results``):

* ``auto`` (the default): when world size and config are unchanged from the baseline, the
  losses are compared bitwise first, the strongest finding, said when it holds. When they
  are not all bitwise equal (a job with non-deterministic kernels, or a random stream
  drawn once more on resume), they are judged against the band a correct resume of this
  job can stay in, measured on its baseline (:mod:`faultdrill.checks.band`: the baseline's
  step-to-step noise; per step and over a moving window); the final model digest is then
  not compared (a run that is not bitwise reproducible cannot match it), and held-out
  evaluations are judged within the band too. When world size or config changed:
  ``tolerance``.
* ``bitwise``: bitwise equality only, whatever the run.
* ``band``: bitwise equality said when it holds, else the measured band, whatever the run
  (world size or config changed too).
* ``tolerance``: the mean loss per step (and the mean held-out metric per step) within the
  plan's ``rtol``/``atol``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TypedDict

import numpy as np

from faultdrill.checks.api import CheckContext, Finding, Msg, Verdict, check
from faultdrill.checks.band import (
    K_EVAL,
    K_MEAN,
    K_STEP,
    MIN_STEPS,
    Band,
    BandResult,
    compare_curves,
    measure_band,
)
from faultdrill.checks.progress import no_committed_progress
from faultdrill.readings.reference import (
    EvalKey,
    LossLookup,
    Reference,
    committed_evaluations,
    evaluation_values,
    mean_loss_by_step,
)
from faultdrill.timeline import StepTable

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


def _wanted(ctx: CheckContext) -> str:
    """The plan's ``pass_criteria.results`` for this item (``auto`` for the baseline)."""
    return str(getattr(getattr(ctx.item, "pass_criteria", None), "results", "auto"))


def comparison_mode(ctx: CheckContext) -> tuple[str, Msg]:
    """('bitwise' | 'band' | 'tolerance', why). ``bitwise`` from ``auto`` still falls back
    to the band where the run is not bitwise reproducible (:func:`band_fallback`)."""
    wanted = _wanted(ctx)
    ref = ctx.reference
    tl = ctx.timeline
    sizes = {i.world_size for i in tl.incarnations if i.first_step is not None}
    digests = {str(e.get("config_digest", "")) for i in tl.incarnations for e in i.starts}
    same = ref is not None and sizes <= {ref.world_size} and digests <= set(ref.config_digests)
    if wanted == "bitwise":
        return "bitwise", Msg("results.mode.plan-bitwise")
    if wanted == "tolerance":
        return "tolerance", Msg("results.mode.plan-tolerance")
    if wanted == "band":
        return "band", Msg("results.mode.plan-band")
    if same:
        return "bitwise", Msg("results.mode.unchanged")
    return "tolerance", Msg("results.mode.changed", sizes=sorted(sizes))


def band_fallback(ctx: CheckContext, mode: str) -> bool:
    """Whether a difference from the baseline in ``mode`` is judged by the measured band
    rather than failed: in ``band`` mode, and in ``bitwise`` mode that ``auto`` chose."""
    return mode == "band" or (mode == "bitwise" and _wanted(ctx) == "auto")


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
        if sel.all():  # the usual case: views of the columns, no gathered copies
            at = None  # row i of the block is table row lo + i
            step, rank, got = (c[lo : lo + sel.size] for c in (st.step, st.rank, st.loss))
        else:
            at = np.flatnonzero(sel)
            at += lo
            step, rank, got = st.step[at], st.rank[at], st.loss[at]
        base, known = losses.lookup(step, rank)
        # NaN: that step reported no loss (a job logging every N steps): nothing to compare
        compared = known & ~np.isnan(got) & ~np.isnan(base)
        silent += int((known & ~compared).sum())
        unknown += int((~known).sum())
        n_cmp += int(compared.sum())
        differ = np.flatnonzero(compared & (base != got))
        if differ.size:
            differing += int(differ.size)
            j = int(np.argmin(step[differ]))
            at_step = int(step[differ[j]])
            if first is None or at_step < first_step:
                row = lo + int(differ[j]) if at is None else int(at[differ[j]])
                first, first_step = (row, float(base[differ[j]])), at_step
    return n_cmp, silent, unknown, differing, first


@check("results.loss-matches-baseline", "results")
def loss_matches_baseline(ctx: CheckContext) -> list[Finding]:
    """The loss of every committed step equals the baseline's at that step.

    Bitwise per (step, rank) first: pass when every pair is equal. Where some differ, fail
    in ``bitwise`` mode; in ``auto`` (world size and config unchanged) and ``band`` mode,
    the mean loss over ranks per step is judged in the band measured on the baseline
    (:mod:`faultdrill.checks.band`: what it can and cannot tell apart), and the finding
    states the method, the band, the deviation and the first step outside; retest when the
    baseline is too short to measure it. ``tolerance`` mode: the mean loss per step within
    the plan's rtol/atol. Committed pairs (or, in ``band`` mode, steps) the baseline never
    reported fail."""
    name, ref, tl = "results.loss-matches-baseline", ctx.reference, ctx.timeline
    if ref is None or ref.rows == 0:
        return [ctx.finding(name, R, Msg("results.loss-matches-baseline.no-baseline"))]
    chain, notes = tl.committed_chain()
    if not chain:
        return [ctx.finding(name, R, no_committed_progress(notes))]
    rows = tl.rows_in(chain)
    n_got = int(rows.sum())
    mode, why = comparison_mode(ctx)
    if mode == "tolerance":
        return _loss_within_tolerance(ctx, ref, name, mode, why, rows)
    return _loss_bitwise(ctx, ref, name, mode, why, rows, n_got)


def _loss_bitwise(
    ctx: CheckContext,
    ref: Reference,
    name: str,
    mode: str,
    why: Msg,
    rows: np.ndarray,
    n_got: int,
) -> list[Finding]:
    """:func:`loss_matches_baseline` in bitwise (or band) mode: the committed ``rows``
    (``n_got`` of them) against the baseline's loss at the same step and rank; where they
    differ and :func:`band_fallback` allows, judged by the measured band instead."""
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
    if mode == "band" and (first is not None or unknown):
        # ranks the baseline did not have (a changed world) count through the mean over
        # ranks; steps it did not have are what the band fails
        not_bitwise = (
            _not_bitwise(st, first[0], differing, n_cmp, why)
            if first is not None
            else Msg("results.band.other-ranks", n=unknown, why=why)
        )
        return _loss_by_band(ctx, ref, name, mode, not_bitwise, rows)
    if first is not None and band_fallback(ctx, mode):
        not_bitwise = _not_bitwise(st, first[0], differing, n_cmp, why)
        out.extend(_loss_by_band(ctx, ref, name, mode, not_bitwise, rows))
    elif first is not None:
        out.append(_bitwise_differ(ctx, name, mode, why, first, differing, n_cmp))
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


def _not_bitwise(st: StepTable, row: int, differing: int, n_cmp: int, why: Msg) -> Msg:
    """What the bitwise comparison found: ``differing`` of ``n_cmp``, first at ``row``."""
    return Msg(
        "results.band.not-bitwise",
        n=differing,
        compared=n_cmp,
        step=int(st.step[row]),
        why=why,
    )


def _bitwise_differ(
    ctx: CheckContext,
    name: str,
    mode: str,
    why: Msg,
    first: tuple[int, float],
    differing: int,
    n_cmp: int,
) -> Finding:
    """The bitwise failure: ``differing`` of ``n_cmp`` losses, ``first`` (row, baseline)."""
    st = ctx.timeline.steps
    i, base_loss = first
    return ctx.finding(
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


def _mean_loss_of_rows(st: StepTable, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(steps, mean loss over the ``rows`` at each), NaN losses left out, a chunk of the
    table at a time where steps are dense (no copy of the committed columns)."""
    if not len(st):
        return np.zeros(0, np.int64), np.zeros(0)
    s0, s1 = int(st.step.min()), int(st.step.max())
    if s1 - s0 + 1 > 4 * len(st) + 65536:
        return mean_loss_by_step(st.step[rows], st.loss[rows])
    sums = np.zeros(s1 - s0 + 1)
    counts = np.zeros(s1 - s0 + 1, np.int64)
    for lo in range(0, len(st), _CHUNK):
        at = np.flatnonzero(rows[lo : lo + _CHUNK])
        at += lo
        loss = st.loss[at]
        keep = ~np.isnan(loss)
        idx = st.step[at][keep] - s0
        sums += np.bincount(idx, weights=loss[keep], minlength=sums.size)
        counts += np.bincount(idx, minlength=sums.size)
    have = np.flatnonzero(counts)
    return have + s0, sums[have] / counts[have]


def baseline_band(ref: Reference) -> Band | None:
    """The band measured on the baseline's mean loss per step (None: too few steps)."""
    return measure_band(ref.mean_steps, ref.mean_loss)


def band_method(band: Band, window: int) -> Msg:
    """How the band was measured and what it allows, for a finding."""
    return Msg(
        "results.band.method",
        sigma=band.sigma,
        n=band.steps,
        floored=Msg("results.band.floored") if band.floored else "",
        k_step=K_STEP,
        step_limit=band.step_limit,
        k_mean=K_MEAN,
        window=window,
        mean_limit=band.mean_limit(window),
    )


def _loss_by_band(
    ctx: CheckContext, ref: Reference, name: str, mode: str, not_bitwise: Msg, rows: np.ndarray
) -> list[Finding]:
    """The mean loss over ranks of the committed ``rows`` against the baseline's, in the
    band measured on the baseline (``not_bitwise``: what the bitwise comparison found); in
    ``band`` mode, committed steps the baseline never reported fail besides."""
    band = baseline_band(ref)
    if band is None:
        said = Msg(
            "results.band.too-few-steps",
            not_bitwise=not_bitwise,
            n=int(ref.mean_steps.size),
            min=MIN_STEPS,
        )
        return [ctx.finding(name, R, said, mode=mode)]
    g_steps, g_loss = _mean_loss_of_rows(ctx.timeline.steps, rows)
    out = []
    extra = np.setdiff1d(g_steps, ref.mean_steps) if mode == "band" else g_steps[:0]
    if extra.size:
        said = Msg("results.band.steps-not-in-baseline", n=int(extra.size), step=int(extra[0]))
        out.append(ctx.finding(name, F, said, mode=mode, unknown_steps=int(extra.size)))
    res = compare_curves(band, g_steps, g_loss, ref.mean_steps, ref.mean_loss)
    if res is None:
        return [*out, ctx.finding(name, R, Msg("results.no-common-step"), mode=mode)]
    return [*out, _band_finding(ctx, name, mode, not_bitwise, band, res)]


def _band_finding(
    ctx: CheckContext, name: str, mode: str, not_bitwise: Msg, band: Band, res: BandResult
) -> Finding:
    """Pass or fail of :func:`_loss_by_band`, with the method, band and deviation said."""
    data = _band_data(band, res)
    method = band_method(band, res.window)
    if not res.inside:
        where, at = _first_outside(band, res)
        data["first_step"] = at
    if res.inside:
        return ctx.finding(
            name,
            P,
            Msg(
                "results.loss-matches-baseline.within-band",
                not_bitwise=not_bitwise,
                steps=res.compared,
                worst_step=res.worst_step,
                window=res.window,
                worst_mean=res.worst_mean,
                method=method,
            ),
            mode=mode,
            basis="band",
            **data,
        )
    return ctx.finding(
        name,
        F,
        Msg(
            "results.loss-matches-baseline.outside-band",
            not_bitwise=not_bitwise,
            where=where,
            n=res.steps_out,
            m=res.windows_out,
            steps=res.compared,
            method=method,
        ),
        mode=mode,
        basis="band",
        **data,
    )


class _BandData(TypedDict):
    """What a band finding records in its ``data``, beside the mode and the basis."""

    sigma: float
    step_limit: float
    mean_limit: float
    window: int
    worst_step: float
    worst_mean: float
    compared: int


class _BandOutside(_BandData, total=False):
    #: Only when outside the band: the step it is first seen at.
    first_step: int


def _band_data(band: Band, res: BandResult) -> _BandOutside:
    return {
        "sigma": band.sigma,
        "step_limit": band.step_limit,
        "mean_limit": band.mean_limit(res.window),
        "window": res.window,
        "worst_step": res.worst_step,
        "worst_mean": res.worst_mean,
        "compared": res.compared,
    }


def _first_outside(band: Band, res: BandResult) -> tuple[Msg, int]:
    """The first step or window outside the band, said, and the step it is seen at."""
    assert res.first is not None
    if res.first[0] == "step":
        _, step, got, base, diff = res.first
        said = Msg(
            "results.band.at-step",
            step=step,
            got=got,
            baseline=base,
            diff=diff,
            limit=band.step_limit,
        )
        return said, int(step)  # type: ignore[call-overload]
    _, lo, hi, diff = res.first
    said = Msg(
        "results.band.over-window",
        lo=lo,
        hi=hi,
        diff=diff,
        window=res.window,
        limit=band.mean_limit(res.window),
    )
    return said, int(hi)  # type: ignore[call-overload]


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


def losses_not_bitwise(ctx: CheckContext) -> Msg | None:
    """What shows the committed losses are not bitwise equal to the baseline's (how many
    differ, the first step), or None: they are, or nothing could be compared."""
    ref, tl = ctx.reference, ctx.timeline
    chain, _notes = tl.committed_chain()
    if ref is None or not chain:
        return None
    n_cmp, _silent, _unknown, differing, first = _compare_bitwise(
        ref.losses, tl.steps, tl.rows_in(chain)
    )
    if first is None:
        return None
    return _not_bitwise(tl.steps, first[0], differing, n_cmp, comparison_mode(ctx)[1])


@check("results.final-model-digest", "results")
def final_model_digest(ctx: CheckContext) -> list[Finding]:
    """Where bitwise applies, the final model is identical to the baseline's. Where ``auto``
    or ``band`` found the losses not bitwise equal (a run that is not bitwise reproducible),
    a different digest is expected and not compared: the results are judged by the band."""
    name, ref, tl = "results.final-model-digest", ctx.reference, ctx.timeline
    if _expects_failure(ctx):
        return [ctx.finding(name, P, Msg("results.expects-failure"))]
    if ref is None or ref.rows == 0:
        return [ctx.finding(name, R, Msg("results.final-model-digest.no-baseline"))]
    mode, why = comparison_mode(ctx)
    if mode == "tolerance":
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
    not_bitwise = losses_not_bitwise(ctx) if got != ref.final_digest else None
    if not_bitwise is not None and band_fallback(ctx, mode):
        return [
            ctx.finding(
                name,
                P,
                Msg("results.final-model-digest.not-reproducible", not_bitwise=not_bitwise),
                basis="band",
            )
        ]
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
    ctx: CheckContext, got: list[tuple[EvalKey, float]], basis: str, rel: float = 0.0
) -> tuple[int, list[tuple[tuple[object, ...], float, float]]]:
    """(values compared, the differing ones as (key, drill, baseline)), lowest step first.
    ``basis``: ``bitwise`` (per rank), ``tolerance`` (the mean over ranks within the plan's
    rtol/atol) or ``band`` (the mean over ranks within ``rel`` of the baseline's value)."""
    assert ctx.reference is not None
    ref = ctx.reference.evaluations
    pairs: list[tuple[tuple[object, ...], float, float]]
    if basis == "bitwise":
        pairs = [(k, v, ref[k]) for k, v in got if k in ref]
        differ = [(k, v, b) for k, v, b in pairs if not _same(v, b)]
    else:
        tol = ctx.plan.tolerance
        rtol, atol = (tol.rtol, tol.atol) if basis == "tolerance" else (rel, 1e-12)
        mine, theirs = _mean_over_ranks(got), _mean_over_ranks(list(ref.items()))
        pairs = [(k, v, theirs[k]) for k, v in mine.items() if k in theirs]
        differ = [
            (k, v, b)
            for k, v, b in pairs
            if not (_same(v, b) or abs(v - b) <= rtol * abs(b) + atol)
        ]
    differ.sort(key=lambda d: (d[0][0], str(d[0][1:])))
    return len(pairs), [(tuple(k), v, b) for k, v, b in differ]


def _evaluation_differs(
    ctx: CheckContext,
    name: str,
    mode: str,
    rule: Msg,
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
    values = evaluation_values(events)
    steps = sorted({int(e.get("step", -1)) for e in events})
    mode, why = comparison_mode(ctx)
    basis = "tolerance" if mode == "tolerance" else "bitwise"
    compared, differ = _compare_evaluations(ctx, values, basis)
    rule = _evaluation_rule(ctx, basis)
    if differ and band_fallback(ctx, mode):
        not_bitwise = losses_not_bitwise(ctx)
        if mode == "band" or not_bitwise is not None:
            band = baseline_band(ref)
            if band is None:
                return [_evaluation_band_unmeasured(ctx, ref, name, mode, not_bitwise)]
            basis, rule = "band", _evaluation_rule(ctx, "band", band)
            why = not_bitwise or why
            compared, differ = _compare_evaluations(ctx, values, basis, band.eval_relative)
    if differ:
        return [_evaluation_differs(ctx, name, mode, rule, why, compared, differ)]
    return [_no_evaluation_differs(ctx, ref, name, (mode, basis), rule, why, compared, steps)]


def _evaluation_rule(ctx: CheckContext, basis: str, band: Band | None = None) -> Msg:
    """The rule evaluations are compared by, said."""
    if basis == "bitwise":
        return Msg("results.evaluation.rule-bitwise")
    if basis == "tolerance":
        tol = ctx.plan.tolerance
        return Msg("results.evaluation.rule-tolerance", rtol=tol.rtol, atol=tol.atol)
    assert band is not None
    return Msg(
        "results.evaluation.rule-band",
        rel=band.eval_relative,
        k=K_EVAL,
        sigma=band.sigma,
        window=band.window,
        level=band.level,
    )


def _evaluation_band_unmeasured(
    ctx: CheckContext, ref: Reference, name: str, mode: str, not_bitwise: Msg | None
) -> Finding:
    """Evaluations differ, the band applies, but the baseline is too short to measure it."""
    return ctx.finding(
        name,
        R,
        Msg(
            "results.band.too-few-steps",
            not_bitwise=not_bitwise or Msg("results.band.evaluations-differ"),
            n=int(ref.mean_steps.size),
            min=MIN_STEPS,
        ),
        mode=mode,
    )


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
    mode_basis: tuple[str, str],
    rule: Msg,
    why: Msg,
    compared: int,
    steps: list[int],
) -> Finding:
    """:func:`evaluation_matches_baseline` when none of the ``compared`` evaluations
    differs (by ``mode_basis``: the mode and what it compared by, said in ``rule``):
    retest if none was compared or the baseline's last evaluated step is not among the
    item's ``steps``, else pass."""
    mode, basis = mode_basis
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
            f"results.evaluation-matches-baseline.{_PASSED[basis]}",
            n=compared,
            steps=steps,
            why=why,
            rule=rule,
        ),
        mode=mode,
        basis=basis,
        compared=compared,
        steps=steps,
    )


_PASSED = {"bitwise": "bitwise", "tolerance": "within-tolerance", "band": "within-band"}


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
