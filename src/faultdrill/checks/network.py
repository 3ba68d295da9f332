"""Checks for network and node faults: which timeout decided a hang, whether a lost node
was isolated and where the job resumed, and whether a spare failed its environment
preparation (which is not a scheduling failure).

Also the report's placement summary (:func:`placement`): the nodes of the incarnation
running at the injection and of the one that resumed, spares placed and rejected.
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

import numpy as np

from faultdrill.checks.api import CheckContext, Finding, Msg, Verdict, check
from faultdrill.events import Event
from faultdrill.readings.analysis import injections
from faultdrill.records import NetworkTrack, Placement, plain
from faultdrill.timeline import Incarnation, Timeline

__all__ = [
    "HANG_FAULTS",
    "NODE_LOSS_FAULTS",
    "blocked_per_rank",
    "decisive_timeout",
    "network_report",
    "placement",
]

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


def _timeout_name(ev: Event, plan: Any) -> Msg | str:
    """Which timeout an event is, with its setting when the plan is known."""
    t = plan.resources.timeouts if plan is not None else None
    if ev.kind == "dead_node":
        if t is None:
            return Msg("timeout.keep-alive")
        return Msg(
            "timeout.keep-alive.set",
            interval=t.keep_alive_interval_s,
            attempts=t.keep_alive_max_attempt,
        )
    kind = ev.get("timeout")
    if ev.kind == "rdzv_timeout" or kind == "rdzv-join":
        name, seconds = "timeout.rdzv-join", (t.rdzv_join_s if t is not None else None)
    elif kind == "gloo":
        name, seconds = "timeout.gloo", (t.gloo_s if t is not None else None)
    elif kind == "store-read":
        name, seconds = "timeout.store-read", (t.rdzv_read_s if t is not None else None)
    else:
        return str(kind or ev.kind)
    return Msg(name) if seconds is None else Msg(f"{name}.set", seconds=seconds)


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
        return [ctx.finding(name, P, Msg("expectation.timeout-fired.baseline"))]
    if item.fault.kind == "hang-worker":  # who noticed, and when: progress.hang-detected
        return [ctx.finding(name, P, Msg("expectation.timeout-fired.see-hang-detected"))]
    if item.fault.kind not in HANG_FAULTS:
        return [
            ctx.finding(name, P, Msg("expectation.timeout-fired.not-hang", fault=item.fault.kind))
        ]
    inj = injections(tl)
    if not inj:
        return [ctx.finding(name, R, Msg("expectation.timeout-fired.never-injected"))]
    t0 = inj[0].mono
    decision, cause, timeouts = decisive_timeout(tl, t0)
    if decision is None:
        restarted = tl.incarnation_after(t0)
        if restarted is not None:
            return [_restart_without_decision(ctx, name, t0, restarted)]
        return [_rode_out(ctx, name, t0, timeouts)]
    what = Msg(
        "expectation.timeout-fired.event",
        kind=decision.kind,
        node=decision.get("node"),
        at_s=decision.mono - t0,
    )
    if cause is None:
        return [_decided_without_timeout(ctx, name, t0, decision, what)]
    return [_decided_by_timeout(ctx, name, t0, decision, cause, what)]


def _restart_without_decision(
    ctx: CheckContext, name: str, t0: float, restarted: Incarnation
) -> Finding:
    """:func:`timeout_fired` when no platform decision ended the hang yet the job
    restarted: led by a lost node or peer error after ``t0`` (pass), else unexplained
    (retest)."""
    first = next(
        (
            e
            for e in ctx.timeline.events
            if e.mono >= t0 and e.src == "platform" and e.kind in ("node_lost", "peer_error")
        ),
        None,
    )
    if first is None:
        return ctx.finding(
            name,
            R,
            Msg("expectation.timeout-fired.unexplained-restart", inc=restarted.index),
        )
    return ctx.finding(
        name,
        P,
        Msg(
            "expectation.timeout-fired.peer-led",
            kind=first.kind,
            node=first.get("node"),
            at_s=first.mono - t0,
            inc=restarted.index,
        ),
        timeout=None,
    )


def _rode_out(ctx: CheckContext, name: str, t0: float, timeouts: list[Event]) -> Finding:
    """:func:`timeout_fired` when nothing decided and nothing restarted: the job rode the
    fault out (pass), with its longest stall and the first ``timeouts`` seen, if any."""
    stall = _longest_stall(ctx.timeline, t0)
    stall_txt = Msg("expectation.timeout-fired.stall", seconds=stall) if stall is not None else ""
    seen = (
        Msg(
            "expectation.timeout-fired.not-decisive",
            timeouts=[
                Msg(
                    "expectation.timeout-fired.on-node",
                    timeout=_timeout_name(e, ctx.plan),
                    node=e.get("node"),
                )
                for e in timeouts[:3]
            ],
        )
        if timeouts
        else ""
    )
    return ctx.finding(
        name,
        P,
        Msg("expectation.timeout-fired.rode-out", stall=stall_txt, seen=seen),
        timeout=None,
        longest_stall_s=stall,
    )


def _decided_without_timeout(
    ctx: CheckContext, name: str, t0: float, decision: Event, what: Msg
) -> Finding:
    """:func:`timeout_fired` when a platform ``decision`` ended the hang with no timeout
    before it: explained by a peer event between ``t0`` and it, or by a node joining (a
    membership change), pass; else retest."""
    peer = next(
        (
            e
            for e in ctx.timeline.events
            if t0 <= e.mono <= decision.mono
            and e.src == "platform"
            and e.kind in ("peer_error", "node_lost", "spare_placed", "agent_exit")
        ),
        None,
    )
    if peer is None and decision.kind != "membership_change":
        return ctx.finding(
            name,
            R,
            Msg("expectation.timeout-fired.unexplained", what=what),
            decision=decision.kind,
        )
    why = (
        Msg(
            "expectation.timeout-fired.event",
            kind=peer.kind,
            node=peer.get("node"),
            at_s=peer.mono - t0,
        )
        if peer is not None
        else Msg("expectation.timeout-fired.node-joined")
    )
    return ctx.finding(
        name,
        P,
        Msg("expectation.timeout-fired.ended-by", why=why, what=what),
        timeout=None,
        decision=decision.kind,
    )


def _decided_by_timeout(
    ctx: CheckContext, name: str, t0: float, decision: Event, cause: Event, what: Msg
) -> Finding:
    """:func:`timeout_fired` when the timeout ``cause`` led to the platform ``decision``
    (pass), with the line it logged and, for a keep-alive, the node declared dead."""
    line = str(cause.get("line") or cause.get("msg") or "")[:160]
    detail: Msg | str = line
    if cause.kind == "dead_node":
        addrs = {
            str(e.get("address")): str(e.get("node")) for e in ctx.timeline.of("platform", "node")
        }
        who = next((n for a, n in addrs.items() if f"'{a}_" in line), None)
        if who:
            detail = Msg("expectation.timeout-fired.declared-dead", node=who, line=line)
    return ctx.finding(
        name,
        P,
        Msg(
            "expectation.timeout-fired.fired-detail" if line else "expectation.timeout-fired.fired",
            timeout=_timeout_name(cause, ctx.plan),
            node=cause.get("node"),
            at_s=cause.mono - t0,
            what=what,
            detail=detail,
        ),
        timeout=cause.get("timeout") or cause.kind,
        node=cause.get("node"),
        after_s=round(cause.mono - t0, 3),
        decision=decision.kind,
    )


#: Platform events that say the agent, a heartbeat or the platform acted on a hung rank.
_ACTED_BY = {
    "dead_node": "heartbeat",
    "rdzv_timeout": "timeout",
    "worker_failed": "agent",
    "worker_group_failed": "agent",
    "membership_change": "agent",
    "node_lost": "platform",
}
#: Seconds after the hang's release in which a notice still counts (the agents' logs are
#: read every 0.1 s; a notice stamped when read may trail what it reports).
_NOTICE_SLACK_S = 1.0


def _first_action(tl: Timeline, t0: float) -> Event | None:
    """The first platform event after ``t0`` that acted on the hang (the agent, a
    heartbeat, the platform; a job that restarts or fails)."""
    for e in tl.events:
        if e.mono < t0 or e.src != "platform":
            continue
        if e.kind in _ACTED_BY:
            return e
        if e.kind == "job_state" and e.get("state") in ("restarting", "failed"):
            return e
    return None


def _first_symptom(tl: Timeline, t0: float) -> Event | None:
    """The first sign after ``t0`` that a peer saw the hang without anyone acting on it: a
    worker's own error (``probe``/``worker_error``: its collective timed out), a timeout
    or lost peer read from a log."""
    for e in tl.events:
        if e.mono < t0:
            continue
        if (e.src == "probe" and e.kind == "worker_error") or (
            e.src == "platform" and e.kind in ("timeout_fired", "peer_error")
        ):
            return e
    return None


def blocked_per_rank(tl: Timeline, t0: float) -> dict[int, float | None]:
    """Per rank: seconds from its last step before ``t0`` to its first step after it (None:
    it made no step after ``t0``). Ranks that made no step before ``t0`` are left out.
    One pass over the step rows (not one per rank: a fleet has tens of thousands)."""
    st = tl.steps
    mono = np.asarray(st.mono, dtype=float)
    rank = np.asarray(st.rank, dtype=np.int64)
    ranks = np.unique(rank)
    at = np.searchsorted(ranks, rank)
    before = mono < t0
    last = np.full(ranks.size, -np.inf)
    np.maximum.at(last, at[before], mono[before])
    first = np.full(ranks.size, np.inf)
    np.minimum.at(first, at[~before], mono[~before])
    return {
        int(r): round(float(f - b), 3) if np.isfinite(f) else None
        for r, b, f in zip(ranks, last, first, strict=True)
        if np.isfinite(b)
    }


def _blocked_text(blocked: dict[int, float | None]) -> Msg:
    stuck = [r for r, s in blocked.items() if s is None]
    longest = max((s for s in blocked.values() if s is not None), default=None)
    if stuck:
        return Msg("progress.hang-detected.never-stepped", ranks=stuck)
    if longest is None:
        return Msg("progress.hang-detected.no-steps")
    return Msg("progress.hang-detected.blocked", seconds=longest)


@check("progress.hang-detected", "progress")
def hang_detected(ctx: CheckContext) -> list[Finding]:
    """For a ``hang-worker`` fault: who noticed the hung rank, when (against the collective
    timeout the job was given) and by what; how long the other ranks were blocked, and
    whether the job restarted. Nobody acting on it (the agent, a heartbeat, the platform)
    before the drill released the hang (after ``for_s``) or a stop condition ended the item
    is a FAIL naming the timeout and the window, also when a survivor's collective timeout
    fired meanwhile (a sign, not an action: its exit may wait for the hung peer); a fault
    never injected is retest."""
    name, tl, item = "progress.hang-detected", ctx.timeline, ctx.item
    if item is None:
        return [ctx.finding(name, P, Msg("progress.hang-detected.baseline"))]
    if item.fault.kind != "hang-worker":
        return [ctx.finding(name, P, Msg("progress.hang-detected.not-hang"))]
    inj = injections(tl)
    if not inj:
        return [ctx.finding(name, R, Msg("expectation.timeout-fired.never-injected"))]
    t0 = inj[0].mono
    gloo_s = ctx.plan.gloo_timeout_for(item)
    blocked = blocked_per_rank(tl, t0)
    data: dict[str, Any] = {"gloo_timeout_s": gloo_s, "blocked_s": blocked}
    restarted = tl.incarnation_after(t0)
    retried = (
        Msg(
            "progress.hang-detected.restarted",
            inc=restarted.index,
            at_s=restarted.started_mono - t0,
        )
        if restarted is not None
        else Msg("progress.hang-detected.no-restart")
    )
    end, ended_by = _hang_window(tl, t0)
    action = _first_action(tl, t0)
    symptom = _first_symptom(tl, t0)
    if action is None or action.mono > end + _NOTICE_SLACK_S:
        return [_unnoticed(ctx, t0, end, ended_by, symptom, gloo_s, blocked)]
    by = _ACTED_BY.get(action.kind, "platform")
    what: Msg | str = _timeout_name(action, ctx.plan) if by != "agent" else action.kind
    first: Msg | str = (
        Msg("progress.hang-detected.first", symptom=_symptom_text(symptom, t0))
        if symptom is not None and symptom.mono < action.mono
        else ""
    )
    msg = Msg(
        "progress.hang-detected.noticed",
        by=Msg(f"progress.hang-detected.by.{by}", what=what),
        node=action.get("node") or "-",
        at_s=action.mono - t0,
        gloo=gloo_s,
        first=first,
        retried=retried,
        blocked=_blocked_text(blocked),
    )
    return [
        ctx.finding(
            name,
            P,
            msg,
            noticed=action.kind,
            noticed_by=by,
            node=action.get("node"),
            after_s=round(action.mono - t0, 3),
            symptom_after_s=round(symptom.mono - t0, 3) if symptom is not None else None,
            **data,
        )
    ]


def _symptom_text(symptom: Event, t0: float) -> Msg:
    """A peer's own sign of the hang: a worker's error (on its rank) or a log line."""
    where = (
        Msg("progress.hang-detected.on-rank", rank=symptom.get("rank"))
        if symptom.src == "probe"
        else Msg("progress.hang-detected.on-node", node=symptom.get("node"))
    )
    error = str(symptom.get("error") or symptom.get("line") or symptom.kind)[:200]
    return Msg("progress.hang-detected.symptom", where=where, at_s=symptom.mono - t0, error=error)


def _unnoticed(
    ctx: CheckContext,
    t0: float,
    end: float,
    ended_by: Msg,
    symptom: Event | None,
    gloo_s: float,
    blocked: dict[int, float | None],
) -> Finding:
    """:func:`hang_detected` when nobody acted on the hang before its window closed: FAIL,
    naming the window, the configured timeout, and a peer's own sign of it if there was
    one (a timeout that fired in a worker that had not exited by then)."""
    window = end - t0
    seen = symptom is not None and symptom.mono <= end + _NOTICE_SLACK_S
    if seen:
        assert symptom is not None
        why = Msg("progress.hang-detected.not-acted", symptom=_symptom_text(symptom, t0))
    else:
        why = Msg(
            "progress.hang-detected.longer"
            if gloo_s >= window
            else "progress.hang-detected.shorter",
            gloo=gloo_s,
            window=window,
        )
    msg = Msg(
        "progress.hang-detected.unnoticed",
        window=window,
        ended=ended_by,
        why=why,
        blocked=_blocked_text(blocked),
    )
    return ctx.finding(
        "progress.hang-detected",
        F,
        msg,
        window_s=round(window, 3),
        noticed=None,
        symptom_after_s=round(symptom.mono - t0, 3) if seen and symptom is not None else None,
        gloo_timeout_s=gloo_s,
        blocked_s=blocked,
    )


def _hang_window(tl: Timeline, t0: float) -> tuple[float, Msg]:
    """When the hang's window closed, and what closed it: the drill's release (the fault
    reverted after ``for_s``), a stop condition, or the end of the timeline."""
    stop = tl.first("harness", "stop_condition", after=t0)
    released = tl.first("fault", "reverted", after=t0)
    if stop is not None and (released is None or stop.mono < released.mono):
        return stop.mono, Msg(
            "progress.hang-detected.by-stop", condition=str(stop.get("condition"))
        )
    if released is not None:
        return released.mono, Msg("progress.hang-detected.by-release")
    return tl.events[-1].mono, Msg("progress.hang-detected.by-end")


def placement(tl: Timeline) -> Placement | None:
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
    where = {
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
    return Placement.model_validate(plain(where))


@check("resources.lost-node-isolated", "resources")
def lost_node_isolated(ctx: CheckContext) -> list[Finding]:
    """After node-down or node-drain: every process of the node is gone (node-down: within
    5 s), nothing of the job starts on it again, and no later incarnation includes it.
    Says where the job resumed."""
    name, tl = "resources.lost-node-isolated", ctx.timeline
    item = ctx.item
    if item is None or item.fault.kind not in NODE_LOSS_FAULTS:
        return [ctx.finding(name, P, Msg("resources.lost-node-isolated.not-applicable"))]
    inj = injections(tl)
    if not inj:
        return [ctx.finding(name, R, Msg("resources.lost-node-isolated.never-injected"))]
    t0 = inj[0].mono
    node = str(item.fault.target.node)  # type: ignore[attr-defined]
    if not tl.procs:
        return [ctx.unsampled(name, Msg("resources.lost-node-isolated.not-sampled"))]
    limit = 5.0 if item.fault.kind == "node-down" else None
    out = _outlived_the_loss(ctx, name, t0, node, limit) + _back_on_the_node(ctx, name, t0, node)
    if out:
        return out
    return [_isolated(ctx, name, node, limit)]


def _outlived_the_loss(
    ctx: CheckContext, name: str, t0: float, node: str, limit: float | None
) -> list[Finding]:
    """:func:`lost_node_isolated`'s processes of ``node`` that were there at the loss
    ``t0`` and not gone within ``limit`` seconds (None: before the next incarnation's first
    step) (fail)."""
    tl = ctx.timeline
    mine = [p for p in tl.procs if p.node == node]
    new = tl.incarnation_after(t0)
    deadline = t0 + limit if limit is not None else (new.first_step_mono if new else None)
    late = [
        p
        for p in mine
        if p.seen_mono <= t0
        and (p.gone_mono is None or (deadline is not None and p.gone_mono > deadline))
    ]
    if not late:
        return []
    desc = [
        Msg("resources.lost-node-isolated.alive", pid=p.pid, role=p.role)
        if p.gone_mono is None
        else Msg(
            "resources.lost-node-isolated.gone-at",
            pid=p.pid,
            role=p.role,
            at_s=p.gone_mono - t0,
        )
        for p in late[:4]
    ]
    return [
        ctx.finding(
            name,
            F,
            Msg(
                "resources.lost-node-isolated.not-gone-within"
                if limit is not None
                else "resources.lost-node-isolated.not-gone-before-resume",
                n=len(late),
                node=node,
                limit=limit,
                processes=desc,
            ),
            pids=[p.pid for p in late],
        )
    ]


def _back_on_the_node(ctx: CheckContext, name: str, t0: float, node: str) -> list[Finding]:
    """:func:`lost_node_isolated`'s processes of the job started on ``node`` after the loss
    ``t0``, and the first later incarnation that includes it (fail each)."""
    tl = ctx.timeline
    out = []
    reborn = [p for p in tl.procs if p.node == node and p.seen_mono > t0]
    if reborn:
        out.append(
            ctx.finding(
                name,
                F,
                Msg(
                    "resources.lost-node-isolated.reborn",
                    n=len(reborn),
                    node=node,
                    pids=[p.pid for p in reborn[:4]],
                ),
            )
        )
    back = [i for i in tl.incarnations if i.started_mono > t0 and node in i.nodes]
    if back:
        out.append(
            ctx.finding(
                name,
                F,
                Msg(
                    "resources.lost-node-isolated.used-again",
                    inc=back[0].index,
                    node=node,
                    nodes=list(back[0].nodes),
                ),
            )
        )
    return out


def _isolated(ctx: CheckContext, name: str, node: str, limit: float | None) -> Finding:
    """:func:`lost_node_isolated`'s pass: ``node`` isolated (within ``limit`` seconds, or
    before the job resumed), with where the job resumed and the spares that replaced it."""
    where = placement(ctx.timeline) or Placement()
    resumed = where.resumed_on
    spares = [
        Msg("resources.lost-node-isolated.replacing", node=s.node, replaces=s.replaces)
        for s in where.spares_placed
    ]
    if not resumed:
        after = Msg("resources.lost-node-isolated.not-resumed")
    elif spares:
        after = Msg("resources.lost-node-isolated.resumed-spare", nodes=resumed, spares=spares)
    else:
        after = Msg("resources.lost-node-isolated.resumed", nodes=resumed)
    return ctx.finding(
        name,
        P,
        Msg(
            "resources.lost-node-isolated.isolated-within"
            if limit is not None
            else "resources.lost-node-isolated.isolated-before-resume",
            node=node,
            limit=limit,
            after=after,
        ),
        resumed_on=resumed,
    )


@check("expectation.spare-environment", "expectation")
def spare_environment(ctx: CheckContext) -> list[Finding]:
    """A spare that failed a precondition (runtime, data or checkpoint access, route) is an
    environment-preparation failure, reported as such and never as a scheduling failure:
    the scenario could not run as planned, retest once the spare is prepared."""
    name, tl = "expectation.spare-environment", ctx.timeline
    rejected = tl.of("platform", "spare_rejected")
    placed = tl.of("platform", "spare_placed")
    if rejected:
        by_node: dict[str, list[Msg]] = {}
        for e in rejected:
            by_node.setdefault(str(e.get("node")), []).append(
                Msg(
                    "expectation.spare-environment.failed-precondition",
                    precondition=e.get("precondition"),
                    detail=e.get("detail"),
                )
            )
        desc = [
            Msg("expectation.spare-environment.spare", node=n, failures=v)
            for n, v in by_node.items()
        ]
        used = (
            Msg(
                "expectation.spare-environment.then-used",
                nodes=[str(e.get("node")) for e in placed],
            )
            if placed
            else ""
        )
        return [
            ctx.finding(
                name,
                R,
                Msg("expectation.spare-environment.failure", spares=desc, used=used),
                category="environment-preparation",
                nodes=sorted(by_node),
            )
        ]
    if placed:
        return [
            ctx.finding(
                name,
                P,
                Msg(
                    "expectation.spare-environment.passed",
                    spares=[
                        Msg(
                            "resources.lost-node-isolated.replacing",
                            node=e.get("node"),
                            replaces=e.get("replaces"),
                        )
                        for e in placed
                    ],
                ),
            )
        ]
    none = tl.of("platform", "no_spare")
    if none:
        return [
            ctx.finding(
                name,
                P,
                Msg("expectation.spare-environment.none-available", detail=none[0].get("detail")),
            )
        ]
    return [ctx.finding(name, P, Msg("expectation.spare-environment.not-needed"))]


class NetworkSections(NamedTuple):
    """The report's ``network`` (track summary) and ``placement`` sections (None: absent)."""

    network: NetworkTrack | None
    placement: Placement | None


def network_report(tl: Timeline) -> NetworkSections:
    """The report's ``network`` (track summary) and ``placement`` sections, when present."""
    from faultdrill.readings.network import network_summary

    return NetworkSections(network=network_summary(tl), placement=placement(tl))
