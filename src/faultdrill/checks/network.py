"""Checks for network and node faults: which timeout decided a hang, whether a lost node
was isolated and where the job resumed, and whether a spare failed its environment
preparation (which is not a scheduling failure).

Also the report's placement summary (:func:`placement`): the nodes of the incarnation
running at the injection and of the one that resumed, spares placed and rejected.
"""

from __future__ import annotations

import itertools
from typing import Any

from faultdrill.checks.api import CheckContext, Finding, Verdict, check
from faultdrill.events import Event
from faultdrill.judge.analysis import injections
from faultdrill.timeline import Timeline

__all__ = ["HANG_FAULTS", "NODE_LOSS_FAULTS", "decisive_timeout", "network_report", "placement"]

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL

#: Faults after which the job may hang rather than crash: a timeout decides what happens.
HANG_FAULTS = frozenset(
    {"link-loss", "link-slow", "link-flap", "partition", "node-freeze", "node-down", "node-drain"}
)
#: Faults that take a node out of the job for the rest of the drill.
NODE_LOSS_FAULTS = frozenset({"node-down", "node-drain"})

#: Platform events that end a hang: a timeout, a lost peer, a membership decision.
_DECISIONS = frozenset(
    {"worker_group_failed", "membership_change", "rdzv_timeout", "worker_failed"}
)


def _timeout_name(ev: Event, plan: Any) -> str:
    t = plan.resources.timeouts if plan is not None else None
    if ev.kind == "dead_node":
        extra = (
            f" ({t.keep_alive_interval_s} s x {t.keep_alive_max_attempt})" if t is not None else ""
        )
        return "rendezvous keep-alive" + extra
    if ev.kind == "rdzv_timeout" or ev.get("timeout") == "rdzv-join":
        return "rendezvous join timeout" + (f" ({t.rdzv_join_s} s)" if t is not None else "")
    kind = ev.get("timeout")
    if kind == "gloo":
        return "gloo collective timeout" + (f" ({t.gloo_s} s)" if t is not None else "")
    if kind == "store-read":
        return "c10d store read timeout" + (f" ({t.rdzv_read_s} s)" if t is not None else "")
    return str(kind or ev.kind)


def _is_timeout(ev: Event) -> bool:
    return ev.src == "platform" and (ev.kind in ("timeout_fired", "rdzv_timeout", "dead_node"))


def decisive_timeout(tl: Timeline, start: float) -> tuple[Event | None, Event | None, list[Event]]:
    """After ``start``: the first platform decision that ended the hang (a worker group
    failed, a membership change, a rendezvous timeout), the timeout that led to it (the
    latest timeout on the decision's node before it, else the latest anywhere), and every
    timeout seen up to the decision (or to the end, when nothing was decided)."""
    after = [e for e in tl.events if e.mono >= start and e.src == "platform"]
    decision = next((e for e in after if e.kind in _DECISIONS), None)
    limit = decision.mono if decision is not None else float("inf")
    timeouts = [e for e in after if _is_timeout(e) and e.mono <= limit]
    if decision is None:
        return None, None, timeouts
    same = [e for e in timeouts if e.get("node") == decision.get("node")]
    pool = same or timeouts
    return decision, (pool[-1] if pool else None), timeouts


def _longest_stall(tl: Timeline, start: float) -> float | None:
    st = tl.steps
    if not len(st):
        return None
    monos = sorted(float(m) for m in st.mono if m >= start - 5.0)
    before = [m for m in monos if m < start]
    points = ([before[-1]] if before else [start]) + [m for m in monos if m >= start]
    if len(points) < 2:
        return None
    return max(b - a for a, b in itertools.pairwise(points))


@check("expectation.timeout-fired", "expectation")
def timeout_fired(ctx: CheckContext) -> list[Finding]:
    """For a link or node fault: which timeout finally decided the hang (gloo, rendezvous
    keep-alive or join, store read), or that none fired. A restart after the fault that no
    timeout, lost peer or platform decision explains is retest."""
    name, tl = "expectation.timeout-fired", ctx.timeline
    item = ctx.item
    if item is None:
        return [ctx.finding(name, P, "baseline: no fault, no timeout expected")]
    if item.fault.kind not in HANG_FAULTS:
        return [ctx.finding(name, P, f"{item.fault.kind} is not a hang fault: not applicable")]
    inj = injections(tl)
    if not inj:
        return [ctx.finding(name, R, "the fault was never injected: nothing to attribute")]
    t0 = inj[0].mono
    decision, cause, timeouts = decisive_timeout(tl, t0)
    restarted = tl.incarnation_after(t0)
    if decision is None:
        stall = _longest_stall(tl, t0)
        stall_txt = f"; longest pause between steps {stall:.1f} s" if stall is not None else ""
        if restarted is not None:
            first = next(
                (
                    e
                    for e in tl.events
                    if e.mono >= t0
                    and e.src == "platform"
                    and e.kind in ("node_lost", "peer_error")
                ),
                None,
            )
            if first is None:
                return [
                    ctx.finding(
                        name,
                        R,
                        f"incarnation {restarted.index} started after the fault, but no timeout, "
                        "lost peer or platform decision explains why",
                    )
                ]
            return [
                ctx.finding(
                    name,
                    P,
                    f"no timeout fired: {first.kind} on {first.get('node')} at "
                    f"+{first.mono - t0:.2f} s led to incarnation {restarted.index}",
                    timeout=None,
                )
            ]
        seen = (
            "; seen but not decisive: "
            + ", ".join(f"{_timeout_name(e, ctx.plan)} on {e.get('node')}" for e in timeouts[:3])
            if timeouts
            else ""
        )
        return [
            ctx.finding(
                name,
                P,
                f"no timeout fired: the job rode out the fault without a restart{stall_txt}{seen}",
                timeout=None,
                longest_stall_s=stall,
            )
        ]
    what = f"{decision.kind} on {decision.get('node')} at +{decision.mono - t0:.2f} s"
    if cause is None:
        peer = next(
            (
                e
                for e in tl.events
                if t0 <= e.mono <= decision.mono
                and e.src == "platform"
                and e.kind in ("peer_error", "node_lost", "spare_placed", "agent_exit")
            ),
            None,
        )
        if peer is None and decision.kind != "membership_change":
            return [
                ctx.finding(
                    name,
                    R,
                    f"{what}, but no timeout, lost peer or platform event explains it",
                    decision=decision.kind,
                )
            ]
        why = (
            f"{peer.kind} on {peer.get('node')} at +{peer.mono - t0:.2f} s"
            if peer is not None
            else "a node joined the rendezvous"
        )
        return [
            ctx.finding(
                name,
                P,
                f"no timeout fired: {why} ended the hang ({what})",
                timeout=None,
                decision=decision.kind,
            )
        ]
    detail = str(cause.get("line") or cause.get("msg") or "")[:160]
    if cause.kind == "dead_node":
        addrs = {str(e.get("address")): str(e.get("node")) for e in tl.of("platform", "node")}
        who = next((n for a, n in addrs.items() if f"'{a}_" in detail), None)
        if who:
            detail = f"{who} declared dead ({detail})"
    return [
        ctx.finding(
            name,
            P,
            f"{_timeout_name(cause, ctx.plan)} fired on {cause.get('node')} at "
            f"+{cause.mono - t0:.2f} s, then {what}" + (f": {detail}" if detail else ""),
            timeout=cause.get("timeout") or cause.kind,
            node=cause.get("node"),
            after_s=round(cause.mono - t0, 3),
            decision=decision.kind,
        )
    ]


def placement(tl: Timeline) -> dict[str, Any] | None:
    """Where the job ran before the fault and where it resumed; spares placed or rejected.
    None for a run without a fault."""
    inj = injections(tl)
    if not inj:
        return None
    t0 = inj[0].mono
    old, new = tl.incarnation_at(t0), tl.incarnation_after(t0)
    placed = [
        {"node": e.get("node"), "replaces": e.get("replaces"), "at_s": round(e.mono - t0, 3)}
        for e in tl.of("platform", "spare_placed")
    ]
    rejected = [
        {
            "node": e.get("node"),
            "replaces": e.get("replaces"),
            "precondition": e.get("precondition"),
            "detail": e.get("detail"),
            "category": e.get("category"),
        }
        for e in tl.of("platform", "spare_rejected")
    ]
    lost = [
        {"node": e.get("node"), "reason": e.get("reason"), "at_s": round(e.mono - t0, 3)}
        for e in tl.of("platform", "node_lost")
    ]
    no_spare = [e.get("detail") for e in tl.of("platform", "no_spare")]
    final = tl.final_incarnation()
    return {
        "before": old.nodes if old else [],
        "resumed_on": new.nodes if new else None,
        "final": final.nodes if final else None,
        "world_size_before": old.world_size if old else None,
        "world_size_after": new.world_size if new else None,
        "lost": lost,
        "spares_placed": placed,
        "spares_rejected": rejected,
        "no_spare": no_spare,
    }


@check("resources.lost-node-isolated", "resources")
def lost_node_isolated(ctx: CheckContext) -> list[Finding]:
    """After node-down or node-drain: every process of the node is gone (node-down: within
    5 s), nothing of the job starts on it again, and no later incarnation includes it.
    Says where the job resumed."""
    name, tl = "resources.lost-node-isolated", ctx.timeline
    item = ctx.item
    if item is None or item.fault.kind not in NODE_LOSS_FAULTS:
        return [ctx.finding(name, P, "no node was taken out of the job: not applicable")]
    inj = injections(tl)
    if not inj:
        return [ctx.finding(name, R, "the fault was never injected")]
    t0 = inj[0].mono
    node = str(item.fault.target.node)  # type: ignore[attr-defined]
    if not tl.procs:
        return [ctx.unsampled(name, "cannot tell")]
    out = []
    mine = [p for p in tl.procs if p.node == node]
    limit = 5.0 if item.fault.kind == "node-down" else None
    new = tl.incarnation_after(t0)
    deadline = t0 + limit if limit is not None else (new.first_step_mono if new else None)
    late = [
        p
        for p in mine
        if p.seen_mono <= t0
        and (p.gone_mono is None or (deadline is not None and p.gone_mono > deadline))
    ]
    if late:
        desc = ", ".join(
            f"pid {p.pid} ({p.role}, "
            + ("still alive" if p.gone_mono is None else f"gone at +{p.gone_mono - t0:.1f} s")
            + ")"
            for p in late[:4]
        )
        bound = f"within {limit:.0f} s" if limit is not None else "before the job resumed"
        out.append(
            ctx.finding(
                name,
                F,
                f"{len(late)} process(es) of lost node {node} not gone {bound}: {desc}",
                pids=[p.pid for p in late],
            )
        )
    reborn = [p for p in mine if p.seen_mono > t0]
    if reborn:
        out.append(
            ctx.finding(
                name,
                F,
                f"{len(reborn)} process(es) started on lost node {node} after the fault "
                f"(pids {[p.pid for p in reborn[:4]]}): it was not taken out of scheduling",
            )
        )
    back = [i for i in tl.incarnations if i.started_mono > t0 and node in i.nodes]
    if back:
        out.append(
            ctx.finding(
                name,
                F,
                f"incarnation {back[0].index} after the fault includes lost node {node} "
                f"(nodes {', '.join(back[0].nodes)})",
            )
        )
    if out:
        return out
    where = placement(tl) or {}
    resumed = where.get("resumed_on")
    spares = ", ".join(f"{s['node']} (replacing {s['replaces']})" for s in where["spares_placed"])
    return [
        ctx.finding(
            name,
            P,
            f"every process of {node} gone"
            + (f" within {limit:.0f} s" if limit is not None else " before the job resumed")
            + f"; {node} not used again; "
            + (
                f"the job resumed on {', '.join(resumed)}"
                + (f" (spare {spares})" if spares else "")
                if resumed
                else "the job did not resume"
            ),
            resumed_on=resumed,
        )
    ]


@check("expectation.spare-environment", "expectation")
def spare_environment(ctx: CheckContext) -> list[Finding]:
    """A spare that failed a precondition (runtime, data or checkpoint access, route) is an
    environment-preparation failure, reported as such and never as a scheduling failure:
    the scenario could not run as planned, retest once the spare is prepared."""
    name, tl = "expectation.spare-environment", ctx.timeline
    rejected = tl.of("platform", "spare_rejected")
    placed = tl.of("platform", "spare_placed")
    if rejected:
        by_node: dict[str, list[str]] = {}
        for e in rejected:
            by_node.setdefault(str(e.get("node")), []).append(
                f"{e.get('precondition')}: {e.get('detail')}"
            )
        desc = "; ".join(f"spare {n}: {', '.join(v)}" for n, v in by_node.items())
        used = (
            f" (then spare {', '.join(str(e.get('node')) for e in placed)} was used)"
            if placed
            else ""
        )
        return [
            ctx.finding(
                name,
                R,
                f"environment preparation failure, not a scheduling failure: {desc}{used}; "
                "prepare the spare and retest",
                category="environment-preparation",
                nodes=sorted(by_node),
            )
        ]
    if placed:
        return [
            ctx.finding(
                name,
                P,
                "spare "
                + ", ".join(f"{e.get('node')} (replacing {e.get('replaces')})" for e in placed)
                + " passed its preconditions (runtime, checkpoint and run directories, route "
                "to the rendezvous host) before use",
            )
        ]
    none = tl.of("platform", "no_spare")
    if none:
        return [
            ctx.finding(
                name,
                P,
                f"no spare was available (scheduling: {none[0].get('detail')}); none failed "
                "its environment preparation",
            )
        ]
    return [ctx.finding(name, P, "no spare was needed")]


def network_report(tl: Timeline) -> dict[str, Any]:
    """The report's ``network`` (track summary) and ``placement`` sections, when present."""
    from faultdrill.judge.network import network_summary

    out: dict[str, Any] = {}
    net = network_summary(tl)
    if net is not None:
        out["network"] = net
    where = placement(tl)
    if where is not None:
        out["placement"] = where
    return out
