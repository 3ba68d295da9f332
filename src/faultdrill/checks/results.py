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

from faultdrill.checks.api import CheckContext, Finding, Verdict, check
from faultdrill.judge.reference import (
    EvalKey,
    LossLookup,
    committed_evaluations,
    evaluation_values,
    mean_loss_by_step,
)
from faultdrill.timeline import StepTable

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


def comparison_mode(ctx: CheckContext) -> tuple[str, str]:
    """('bitwise' | 'tolerance', why)."""
    wanted = getattr(getattr(ctx.item, "pass_criteria", None), "results", "auto")
    ref = ctx.reference
    tl = ctx.timeline
    sizes = {i.world_size for i in tl.incarnations if i.first_step is not None}
    digests = {str(e.get("config_digest", "")) for i in tl.incarnations for e in i.starts}
    same = ref is not None and sizes <= {ref.world_size} and digests <= set(ref.config_digests)
    if wanted == "bitwise":
        return "bitwise", "the plan asks for bitwise equality"
    if wanted == "tolerance":
        return "tolerance", "the plan asks for a tolerance comparison"
    if same:
        return "bitwise", "world size and config unchanged from the baseline"
    return "tolerance", f"world size(s) {sorted(sizes)} or config differ from the baseline's"


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
        return [ctx.finding(name, R, "no baseline losses to compare with")]
    chain, notes = tl.committed_chain()
    if not chain:
        return [ctx.finding(name, R, "; ".join(notes) or "no committed progress")]
    rows = tl.rows_in(chain)
    st = tl.steps
    n_got = int(rows.sum())
    mode, why = comparison_mode(ctx)
    if mode == "bitwise":
        n_cmp, silent, unknown, differing, first = _compare_bitwise(ref.losses, st, rows)
        if not n_cmp and not unknown:
            return [
                ctx.finding(
                    name,
                    R,
                    f"none of the {n_got} committed (rank, step) pairs reported a loss that the "
                    "baseline also reported: the losses could not be compared",
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
                    f"{differing} of {n_cmp} committed (rank, step) losses differ from "
                    f"the baseline ({why}); first at step {int(st.step[i])} rank {int(st.rank[i])}: "
                    f"{float(st.loss[i])!r} vs baseline {base_loss!r}",
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
                    f"{unknown} committed (rank, step) pairs have no baseline counterpart",
                    unknown=unknown,
                    mode=mode,
                )
            )
        if not out:
            out.append(
                ctx.finding(
                    name,
                    P,
                    f"all {n_cmp} committed (rank, step) losses are "
                    f"bitwise equal to the baseline ({why})"
                    + (
                        f"; {silent} step(s) reported no loss in the drill or the baseline "
                        "and were not compared"
                        if silent
                        else ""
                    ),
                    mode=mode,
                    compared=n_cmp,
                    not_reported=silent,
                )
            )
        return out
    tol = ctx.plan.tolerance
    g_steps, g_loss = mean_loss_by_step(st.step[rows], st.loss[rows])
    r_steps, r_loss = ref.step_loss()
    common, gi, ri = np.intersect1d(g_steps, r_steps, return_indices=True)
    if common.size == 0:
        return [ctx.finding(name, R, "no step in common with the baseline")]
    close = np.isclose(g_loss[gi], r_loss[ri], rtol=tol.rtol, atol=tol.atol)
    if not close.all():
        i = int(np.flatnonzero(~close)[0])
        return [
            ctx.finding(
                name,
                F,
                f"{int((~close).sum())} of {common.size} steps' mean loss outside "
                f"rtol={tol.rtol}, atol={tol.atol} of the baseline ({why}); first at step "
                f"{int(common[i])}: {g_loss[gi][i]:.6g} vs {r_loss[ri][i]:.6g}",
                mode=mode,
            )
        ]
    worst = float(np.max(np.abs(g_loss[gi] - r_loss[ri]) / np.maximum(np.abs(r_loss[ri]), 1e-12)))
    return [
        ctx.finding(
            name,
            P,
            f"mean loss of all {common.size} common steps within "
            f"rtol={tol.rtol} of the baseline (worst relative difference "
            f"{worst:.2e}; {why})",
            mode=mode,
            worst_rel=worst,
        )
    ]


@check("results.final-model-digest", "results")
def final_model_digest(ctx: CheckContext) -> list[Finding]:
    """Where bitwise applies, the final model is identical to the baseline's."""
    name, ref, tl = "results.final-model-digest", ctx.reference, ctx.timeline
    if _expects_failure(ctx):
        return [ctx.finding(name, P, "not applicable: the plan expects this job to fail")]
    if ref is None or ref.rows == 0:
        return [ctx.finding(name, R, "no baseline to compare the final model with")]
    mode, why = comparison_mode(ctx)
    if mode != "bitwise":
        return [
            ctx.finding(name, P, f"not applicable: {why}; compared losses within tolerance instead")
        ]
    if ref is None or not ref.final_digest:
        return [ctx.finding(name, R, "the baseline recorded no final model digest")]
    final = tl.final_incarnation()
    digests = {str(e.get("model_digest")) for e in final.ends} if final else set()
    digests.discard("")
    digests.discard("None")  # as in Reference: a run_end without a digest is no evidence
    if not digests:
        return [ctx.finding(name, R, "the run recorded no final model digest (no run_end)")]
    if len(digests) > 1:
        return [ctx.finding(name, F, f"ranks ended with different models: {sorted(digests)}")]
    got = digests.pop()
    if got != ref.final_digest:
        return [
            ctx.finding(
                name,
                F,
                f"final model {got[:16]}... differs from the baseline's {ref.final_digest[:16]}...",
                got=got,
                baseline=ref.final_digest,
            )
        ]
    return [ctx.finding(name, P, f"final model identical to the baseline's ({got[:16]}...)")]


@check("results.final-checkpoint-verifies", "results")
def final_checkpoint_verifies(ctx: CheckContext) -> list[Finding]:
    """The checkpoint ``latest`` points at after the run verifies against its manifest."""
    name, tl = "results.final-checkpoint-verifies", ctx.timeline
    inv = tl.of("harness", "ckpt_inventory")
    if not inv:
        return [ctx.finding(name, R, "no checkpoint inventory was taken")]
    latest = [e for e in inv if e.get("latest")]
    pointer = tl.first("harness", "ckpt_latest")
    if not latest and pointer is not None and not pointer.get("file"):
        # No pointer file in this layout: the newest saved checkpoint is the one to verify.
        latest = sorted(inv, key=lambda e: int(e.get("step", 0)))[-1:]
    if not latest:
        if pointer is None:
            return [ctx.finding(name, R, "no latest pointer state was recorded")]
        why = pointer.get("problem") or f"{pointer.get('file')} is empty or names nothing"
        return [ctx.finding(name, F, f"the latest pointer does not lead to a checkpoint: {why}")]
    e = latest[-1]
    if e.get("verifies"):
        return [
            ctx.finding(
                name,
                P,
                f"latest checkpoint {e.get('id')} (step {e.get('step')}) "
                "verifies against its manifest",
            )
        ]
    return [
        ctx.finding(
            name,
            F,
            f"latest checkpoint {e.get('id')} does not verify: {e.get('reason')}",
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
    why: str,
    compared: int,
    differ: list[tuple[tuple[object, ...], float, float]],
) -> Finding:
    (step, split, *rest), got, base = differ[0]
    where = f"{split} {rest[-1]}" + (f", rank {rest[0]}" if len(rest) == 2 else "")
    tol = ctx.plan.tolerance
    rule = "bitwise" if mode == "bitwise" else f"within rtol={tol.rtol}, atol={tol.atol}"
    return ctx.finding(
        name,
        F,
        f"{len(differ)} of {compared} evaluated value(s) differ from the baseline "
        f"({rule}; {why}); first at step {step} ({where}): {got!r} vs baseline {base!r}",
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
        return [ctx.finding(name, P, "not applicable: the plan expects this job to fail")]
    if ref is None:
        return [ctx.finding(name, R, "no baseline to compare the held-out evaluation with")]
    if not ref.evaluations:
        if tl.of("probe", "evaluation"):
            return [
                ctx.finding(
                    name,
                    R,
                    "the job evaluated here but not in its baseline: nothing to compare with",
                )
            ]
        return [
            ctx.finding(
                name,
                P,
                "not applicable: the job reports no held-out evaluation (probe.evaluation), "
                "in its baseline or here; its held-out results stay to be verified",
                to_be_verified="held-out evaluation",
            )
        ]
    events = committed_evaluations(tl)
    if not events:
        n = len(tl.of("probe", "evaluation"))
        extra = f" ({n} evaluation(s) of recomputed or unknown steps only)" if n else ""
        return [
            ctx.finding(
                name,
                R,
                "the job reported no evaluation of its committed progress"
                f"{extra}: its results rest on the training loss alone",
            )
        ]
    mode, why = comparison_mode(ctx)
    compared, differ = _compare_evaluations(ctx, evaluation_values(events), mode)
    steps = sorted({int(e.get("step", -1)) for e in events})
    if differ:
        return [_evaluation_differs(ctx, name, mode, why, compared, differ)]
    if not compared:
        return [
            ctx.finding(
                name,
                R,
                f"no evaluation at a step, split and metric the baseline also evaluated "
                f"(drill steps {steps})",
                mode=mode,
            )
        ]
    last = max(k[0] for k in ref.evaluations)
    if last not in steps:
        return [
            ctx.finding(
                name,
                R,
                f"{compared} evaluated value(s) equal the baseline's, but the final "
                f"evaluation (step {last}) is missing: the end result was not evaluated",
                mode=mode,
            )
        ]
    return [
        ctx.finding(
            name,
            P,
            f"all {compared} evaluated value(s) of committed progress (steps "
            f"{', '.join(map(str, steps))}) "
            + ("bitwise equal to" if mode == "bitwise" else "within tolerance of")
            + f" the baseline's ({why})",
            mode=mode,
            compared=compared,
            steps=steps,
        )
    ]


@check("results.artifact-intact", "results")
def artifact_intact(ctx: CheckContext) -> list[Finding]:
    """Every file the job's final generation reported exporting (``probe.artifact``: the
    final model) is on disk after the run with the sha256 it reported, as the harness hashed
    it again. A job that exported in its baseline but not after recovery, or a file the
    harness did not hash, is retest; a job that exports nothing at all is outside this
    check (its artefacts stay to be verified, and the finding says so)."""
    name, tl = "results.artifact-intact", ctx.timeline
    if _expects_failure(ctx):
        return [ctx.finding(name, P, "not applicable: the plan expects this job to fail")]
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
                "not applicable: the job exports no final artefact (probe.artifact), in its "
                "baseline or here; the exported model stays to be verified",
                to_be_verified="exported artefact",
            )
        ]
    if not reported:
        return [
            ctx.finding(
                name,
                R,
                "the job's final generation reported no exported artefact (probe.artifact): "
                "its final model file was not verified",
            )
        ]
    checked = {str(e.get("path")): e for e in tl.of("harness", "artifact_verified")}
    out = []
    for path, art in sorted(reported.items()):
        what = f"{art.get('name')} {path}"
        seen = checked.get(path)
        if seen is None:
            out.append(ctx.finding(name, R, f"{what} was not hashed again after the run"))
        elif not seen.get("present"):
            out.append(ctx.finding(name, F, f"{what} is gone after the run: {seen.get('problem')}"))
        elif seen.get("sha256") != art.get("sha256"):
            out.append(
                ctx.finding(
                    name,
                    F,
                    f"{what} differs from what the job exported: sha256 "
                    f"{str(seen.get('sha256'))[:16]}... on disk, "
                    f"{str(art.get('sha256'))[:16]}... reported",
                    path=path,
                )
            )
    if out:
        return out
    return [
        ctx.finding(
            name,
            P,
            "; ".join(
                f"{art.get('name')} intact ({str(art.get('sha256'))[:16]}..., "
                f"{checked[p].get('bytes')} bytes)"
                for p, art in sorted(reported.items())
            ),
        )
    ]
