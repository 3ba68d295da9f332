"""Resource evidence: old replicas stopped, never two live processes for one rank, nothing
of the job left behind (processes, listening ports, leftovers the platform reports), and
every fault and recorded change taken back by the harness's cleanup."""

from __future__ import annotations

from typing import Any

import numpy as np

from faultdrill.checks.api import CheckContext, Finding, Msg, Verdict, check
from faultdrill.timeline import Incarnation

P, R, F = Verdict.PASS, Verdict.RETEST, Verdict.FAIL


#: Seconds a replica the platform declared lost may still write after its replacement
#: started, on top of the deletion's grace: the kill path itself (a kubelet's TERM/KILL).
KILL_SLACK_S = 2.0


@check("resources.no-stale-replica", "resources")
def no_stale_replica(ctx: CheckContext) -> list[Finding]:
    """Once a new incarnation has made progress, no process of one it superseded is alive
    and no superseded replica emits steps; no incarnation resumed from a checkpoint a
    superseded replica wrote after its successor started (a split brain's checkpoint); and
    a replica the platform declared lost (``replica_lost``: its pod deleted or evicted)
    emits no step once its replacement started, beyond the deletion's grace (a split brain
    even when the replacement never got the rank). "Superseded" follows the scheduler's
    incarnations where the replicas announced them
    (:meth:`~faultdrill.timeline.Incarnation.supersedes`), else start order."""
    tl, name = ctx.timeline, "resources.no-stale-replica"
    workers = [p for p in tl.procs if p.role == "worker"]
    superseded = _superseded_writers(ctx, name)
    if not workers:
        if superseded:
            return superseded
        return [ctx.unsampled(name, Msg("resources.not-sampled"))]
    out = list(superseded)
    pid_inc = {pid: inc.index for inc in tl.incarnations for pid in inc.members}
    for inc in tl.incarnations:
        out += _outlived_successor(ctx, name, inc, workers, pid_inc)
    out += _stale_checkpoints_loaded(ctx, pid_inc)
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


def _outlived_successor(
    ctx: CheckContext, name: str, inc: Incarnation, workers: list[Any], pid_inc: dict[int, int]
) -> list[Finding]:
    """Processes of generations ``inc`` superseded still alive, and their steps, after
    ``inc`` made progress."""
    tl, out = ctx.timeline, []
    older = {o.index for o in tl.incarnations if o is not inc and inc.supersedes(o)}
    t = inc.first_step_mono
    if t is None or not older:
        return []
    stale = []
    for p in workers:
        owner = pid_inc.get(p.pid)
        old = owner in older if owner is not None else p.seen_mono < inc.started_mono
        if old and p.last_seen_mono >= t:
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
    late = np.isin(st.inc, sorted(older)) & (st.mono > t)
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
    return out


def _superseded_writers(ctx: CheckContext, name: str) -> list[Finding]:
    """Replicas the platform declared lost that kept writing steps after it started their
    replacement (plus the deletion's grace and :data:`KILL_SLACK_S`)."""
    tl = ctx.timeline
    out = []
    starts = tl.of("probe", "run_start")
    st = tl.steps
    for lost in tl.of("platform", "replica_lost"):
        pids = _lost_pids(lost, starts)
        repl = _replacement(tl, lost, pids)
        if not pids or repl is None:
            continue
        grace = float(lost.get("grace_s") or 0.0)
        deadline = repl.mono + grace + KILL_SLACK_S
        late = np.isin(st.pid, list(pids)) & (st.mono > deadline)
        if not late.any():
            continue
        rows = np.flatnonzero(late)
        last = float(st.mono[rows[-1]])
        who = lost.get("pod") or Msg("resources.no-stale-replica.replica-on", node=lost.get("node"))
        out.append(
            ctx.finding(
                name,
                F,
                Msg(
                    "resources.no-stale-replica.wrote-after-lost",
                    who=who,
                    node=lost.get("node"),
                    pids=sorted(pids),
                    source=lost.get("source") or Msg("resources.no-stale-replica.the-platform"),
                    repl_s=repl.mono - lost.mono,
                    n=len(rows),
                    grace_s=grace,
                    after_s=last - repl.mono,
                    rank=int(st.rank[rows[0]]),
                    step=int(st.step[rows[0]]),
                ),
                pids=sorted(pids),
                node=lost.get("node"),
                after_s=round(last - repl.mono, 3),
            )
        )
    return out


def _lost_pids(lost: Any, starts: list[Any]) -> set[int]:
    """The processes of a lost replica: as the platform named them, else those that had
    announced themselves on its node before the decision."""
    named = lost.get("pids")
    if named:
        return {int(p) for p in named}
    node = lost.get("node")
    return {int(e.get("pid", -1)) for e in starts if e.get("node") == node and e.mono < lost.mono}


def _replacement(tl: Any, lost: Any, pids: set[int]) -> Any:
    """The first sign, after ``lost``, that the platform started its replacement: a
    ``replica_started`` of another pod (or node), else a replica announcing itself that is
    not one of ``pids``."""
    uid, node = lost.get("uid"), lost.get("node")

    def other(e: Any) -> bool:  # a replica other than the lost one
        return e.get("uid") not in (None, uid) if uid is not None else e.get("node") != node

    for e in tl.events:
        if e.mono <= lost.mono:
            continue
        started = e.src == "platform" and e.kind in ("replica_started", "spare_placed")
        if started and other(e):
            return e
        if e.src == "probe" and e.kind == "run_start" and int(e.get("pid", -1)) not in pids:
            return e
    return None


def _stale_checkpoints_loaded(ctx: CheckContext, pid_inc: dict[int, int]) -> list[Finding]:
    """Loads of a checkpoint whose (last) save before the load came from a replica that
    had already been superseded when it saved."""
    tl, out = ctx.timeline, []
    incs = tl.incarnations
    saves = tl.of("probe", "ckpt_save")
    for inc in incs:
        loaded = {str(e.get("id")): e for e in inc.loads if e.kind == "ckpt_load"}
        for ld in loaded.values():  # one finding per checkpoint, whichever ranks loaded it
            before = [
                e for e in saves if str(e.get("id")) == str(ld.get("id")) and e.mono < ld.mono
            ]
            if not before:
                continue
            save = before[-1]
            writer = pid_inc.get(int(save.get("pid", -1)))
            if writer is None:
                continue
            newer = [n for n in incs if n.supersedes(incs[writer]) and n.started_mono < save.mono]
            if newer:
                out.append(
                    ctx.finding(
                        "resources.no-stale-replica",
                        F,
                        Msg(
                            "resources.no-stale-replica.stale-checkpoint",
                            inc=inc.index,
                            ckpt=ld.get("id"),
                            step=ld.get("step"),
                            writer=writer,
                            newer=newer[0].index,
                        ),
                        inc=inc.index,
                        checkpoint=ld.get("id"),
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
        return [ctx.unsampled(name, Msg("resources.no-duplicate-rank.not-sampled"))]
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
        return [ctx.unsampled(name, Msg("resources.not-sampled"))]
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
