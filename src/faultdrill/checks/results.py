"""Results evidence: after recovery the run computes what the baseline computed, and its
artifacts are intact.

Comparison mode (plan ``pass_criteria.results``): ``bitwise`` when world size and config
are unchanged from the baseline (``auto`` picks it then), else ``tolerance`` on the mean
loss per step with the plan's ``rtol``/``atol``.
"""

from __future__ import annotations

import numpy as np

from faultdrill.checks.api import CheckContext, Finding, Verdict, check
from faultdrill.judge.reference import LossLookup, mean_loss_by_step
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
    if getattr(getattr(ctx.item, "expected", None), "job", "completes") == "fails":
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
