"""Resource evidence: old replicas stopped, never two live processes for one rank, nothing
of the job left behind (processes, listening ports, leftovers the platform reports), and
every fault and recorded change taken back by the harness's cleanup."""

from __future__ import annotations

from typing import Any

import numpy as np

from faultdrill.checks.api import CheckContext, Finding, Msg, Verdict, check

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


@check("resources.no-stale-replica", "resources")
def no_stale_replica(ctx: CheckContext) -> list[Finding]:
    """Once a new incarnation has made progress, no process of an older one is alive and
    no older replica emits steps."""
    tl, name = ctx.timeline, "resources.no-stale-replica"
    workers = [p for p in tl.procs if p.role == "worker"]
    if not workers:
        return [ctx.finding(name, R, Msg("resources.not-sampled"))]
    out = []
    pid_inc = {pid: inc.index for inc in tl.incarnations for pid in inc.members}
    for inc in tl.incarnations[1:]:
        t = inc.first_step_mono
        if t is None:
            continue
        stale = []
        for p in workers:
            owner = pid_inc.get(p.pid)
            older = owner < inc.index if owner is not None else p.seen_mono < inc.started_mono
            if older and p.last_seen_mono >= t:
                stale.append(p)
        if stale:
            desc = [
                Msg(
                    "resources.no-stale-replica.process",
                    pid=p.pid,
                    rank=p.rank,
                    node=p.node,
                    after_s=p.last_seen_mono - t,
                )
                for p in stale[:4]
            ]
            out.append(
                ctx.finding(
                    name,
                    F,
                    Msg(
                        "resources.no-stale-replica.alive",
                        n=len(stale),
                        inc=inc.index,
                        processes=desc,
                    ),
                    inc=inc.index,
                    pids=[p.pid for p in stale],
                )
            )
        st = tl.steps
        late = (st.inc >= 0) & (st.inc < inc.index) & (st.mono > t)
        if late.any():
            i = int(np.flatnonzero(late)[0])
            out.append(
                ctx.finding(
                    name,
                    F,
                    Msg(
                        "resources.no-stale-replica.split-brain",
                        n=int(late.sum()),
                        inc=inc.index,
                        pid=int(st.pid[i]),
                        rank=int(st.rank[i]),
                        step=int(st.step[i]),
                    ),
                    inc=inc.index,
                )
            )
    if not out:
        n = len(tl.incarnations) - 1
        out.append(
            ctx.finding(
                name,
                P,
                Msg("resources.no-stale-replica.all-gone", n=n)
                if n
                else Msg("resources.no-stale-replica.no-restart"),
            )
        )
    return out


@check("resources.no-duplicate-rank", "resources")
def no_duplicate_rank(ctx: CheckContext) -> list[Finding]:
    """Never two live processes holding the same rank while training makes progress."""
    tl, name = ctx.timeline, "resources.no-duplicate-rank"
    out = []
    for inc in tl.incarnations:
        dupes = inc.duplicate_ranks()
        if dupes:
            r, pids = next(iter(dupes.items()))
            out.append(
                ctx.finding(
                    name,
                    F,
                    Msg(
                        "resources.no-duplicate-rank.announced",
                        inc=inc.index,
                        rank=r,
                        n=len(pids),
                        pids=list(pids),
                    ),
                    inc=inc.index,
                )
            )
    workers = [p for p in tl.procs if p.role == "worker" and p.rank is not None]
    if not workers and not out:
        return [
            ctx.finding(
                name,
                R,
                Msg("resources.no-duplicate-rank.not-sampled"),
            )
        ]
    step_times = tl.steps.mono  # the table is sorted by time
    by_rank: dict[int, list[Any]] = {}
    for p in workers:
        by_rank.setdefault(int(p.rank or 0), []).append(p)
    for rank, lives in sorted(by_rank.items()):
        lives.sort(key=lambda p: p.seen_mono)
        for i, a in enumerate(lives):
            for b in lives[i + 1 :]:
                lo, hi = max(a.seen_mono, b.seen_mono), min(a.last_seen_mono, b.last_seen_mono)
                if lo > hi:
                    continue
                busy = np.searchsorted(step_times, hi, "right") - np.searchsorted(step_times, lo)
                if busy > 0:
                    out.append(
                        ctx.finding(
                            name,
                            F,
                            Msg(
                                "resources.no-duplicate-rank.held-twice",
                                rank=rank,
                                a=a.pid,
                                a_node=a.node,
                                b=b.pid,
                                b_node=b.node,
                                seconds=hi - lo,
                            ),
                            rank=rank,
                            pids=[a.pid, b.pid],
                        )
                    )
    if not out:
        out.append(
            ctx.finding(
                name,
                P,
                Msg("resources.no-duplicate-rank.one-each"),
            )
        )
    return out


@check("resources.children-released", "resources")
def children_released(ctx: CheckContext) -> list[Finding]:
    """No child process of a replica (DataLoader worker, helper, writer) outlived its
    replica by more than the plan's grace (``observation.child_grace_s``). Within the grace
    a child's lingering is the framework's own clean-up and is reported, not judged."""
    tl, name = ctx.timeline, "resources.children-released"
    grace = float(ctx.plan.observation.child_grace_s)
    if not any(p.role == "worker" for p in tl.procs):
        return [ctx.finding(name, R, Msg("resources.not-sampled"))]
    lives = _lingering(tl.procs)
    if not lives:
        return [
            ctx.finding(
                name,
                P,
                Msg(
                    "resources.children-released.none"
                    if any(p.role == "child" for p in tl.procs)
                    else "resources.children-released.no-children",
                    grace=grace,
                ),
                grace_s=grace,
            )
        ]
    late = [(c, o, t) for c, o, t in lives if t > grace]
    if not late:
        c, o, t = max(lives, key=lambda x: x[2])
        return [
            ctx.finding(
                name,
                P,
                Msg(
                    "resources.children-released.within-grace",
                    n=len(lives),
                    longest=t,
                    pid=c.pid,
                    owner=o.pid,
                    rank=o.rank,
                    grace=grace,
                ),
                grace_s=grace,
                longest_s=round(t, 3),
            )
        ]
    out = []
    by_owner: dict[int, list[tuple[Any, float]]] = {}
    for c, o, t in late:
        by_owner.setdefault(o.pid, []).append((c, t))
    for owner_pid, kids in sorted(by_owner.items()):
        o = next(o for _c, o, _t in late if o.pid == owner_pid)
        longest = max(t for _c, t in kids)
        still = sum(1 for c, _t in kids if c.gone_mono is None)
        out.append(
            ctx.finding(
                name,
                F,
                Msg(
                    "resources.children-released.late-still"
                    if still
                    else "resources.children-released.late",
                    n=len(kids),
                    owner=owner_pid,
                    rank=o.rank,
                    node=o.node,
                    longest=longest,
                    grace=grace,
                    pids=sorted(c.pid for c, _t in kids)[:6],
                    still=still,
                ),
                owner=owner_pid,
                pids=sorted(c.pid for c, _t in kids),
                longest_s=round(longest, 3),
                grace_s=grace,
            )
        )
    return out


def _lingering(procs: list[Any]) -> list[tuple[Any, Any, float]]:
    """(child, its replica, seconds it was certainly alive after the replica was gone) for
    every child that outlived its replica. The replica's end is the first sample it was
    missing from, so the time is a lower bound."""
    replicas: dict[int, list[Any]] = {}
    for p in procs:
        if p.role in ("worker", "wrapper"):
            replicas.setdefault(p.pid, []).append(p)
    out = []
    for c in procs:
        if c.role != "child" or c.owner is None:
            continue
        # pids are reused: the owner is the life of that pid that began before the child
        lives = [o for o in replicas.get(c.owner, []) if o.seen_mono <= c.seen_mono + 1.0]
        if not lives:
            continue
        o = max(lives, key=lambda o: o.seen_mono)
        if o.gone_mono is None:
            continue  # the replica itself lived to the end: released-at-end judges that
        t = c.last_seen_mono - o.gone_mono
        if t > 0:
            out.append((c, o, t))
    return out


@check("resources.released-at-end", "resources")
def released_at_end(ctx: CheckContext) -> list[Finding]:
    """After the job ended, none of its processes, listening ports or leftovers the
    platform reports remain (only for a job that ended by itself: one the harness stopped
    after a stop condition proves nothing here)."""
    tl, name = ctx.timeline, "resources.released-at-end"
    finals = tl.of("harness", "procs_final")
    if not finals:
        return [ctx.finding(name, R, Msg("resources.released-at-end.no-snapshot"))]
    snap = finals[0]
    if snap.get("after_stop"):
        held = len(snap.get("alive") or []) + len(snap.get("ports") or [])
        held += len(snap.get("leftovers") or [])
        return [
            ctx.finding(
                name,
                R,
                Msg("resources.released-at-end.after-stop", held=held),
                held=held,
            )
        ]
    out = []
    alive = snap.get("alive") or []
    if alive:
        desc = [
            Msg(
                "resources.released-at-end.process",
                pid=p.get("pid"),
                role=p.get("role"),
                rank=p.get("rank"),
                node=p.get("node"),
            )
            for p in alive[:4]
        ]
        out.append(
            ctx.finding(
                name,
                F,
                Msg(
                    "resources.released-at-end.alive",
                    n=len(alive),
                    settle=snap.get("settle_s", 0),
                    processes=desc,
                ),
                pids=[p.get("pid") for p in alive],
            )
        )
    ports = snap.get("ports") or []
    if ports:
        out.append(
            ctx.finding(name, F, Msg("resources.released-at-end.ports", ports=ports), ports=ports)
        )
    leftovers = snap.get("leftovers") or []
    if leftovers:
        out.append(
            ctx.finding(
                name,
                F,
                Msg(
                    "resources.released-at-end.leftovers", leftovers=[str(x) for x in leftovers[:5]]
                ),
                leftovers=leftovers,
            )
        )
    if not out:
        out.append(
            ctx.finding(
                name,
                P,
                Msg("resources.released-at-end.nothing", settle=snap.get("settle_s", 0)),
            )
        )
    return out


@check("resources.faults-reverted", "resources")
def faults_reverted(ctx: CheckContext) -> list[Finding]:
    """Every fault was reverted and the harness's cleanup took back every recorded change
    (no failed revert, no ledger entry pending, no cleanup problem)."""
    tl, name = ctx.timeline, "resources.faults-reverted"
    out = []
    for e in tl.of("fault", "revert_failed"):
        out.append(
            ctx.finding(
                name,
                F,
                Msg("resources.faults-reverted.failed", fault=e.get("fault"), error=e.get("error")),
                fault=e.get("fault"),
            )
        )
    cleanups = tl.of("harness", "cleanup")
    if not cleanups:
        out.append(
            ctx.finding(
                name,
                R,
                Msg("resources.faults-reverted.no-cleanup"),
            )
        )
        return out
    last = cleanups[-1]
    pending = int(last.get("ledger_pending") or 0)
    problems = [str(p) for p in last.get("problems") or []]
    if pending:
        out.append(
            ctx.finding(
                name,
                F,
                Msg(
                    "resources.faults-reverted.pending-one"
                    if pending == 1
                    else "resources.faults-reverted.pending",
                    n=pending,
                ),
                ledger_pending=pending,
            )
        )
    if problems:
        out.append(
            ctx.finding(
                name,
                F,
                Msg("resources.faults-reverted.problems", n=len(problems), problems=problems[:3]),
                problems=problems,
            )
        )
    if not out:
        out.append(
            ctx.finding(
                name,
                P,
                Msg("resources.faults-reverted.all"),
            )
        )
    return out
