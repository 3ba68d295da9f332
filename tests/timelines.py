"""Tiny literal timelines for check tests: a builder, two stock drills, and a judge.

``TL`` appends event dicts in the probe/sampler/harness format (``faultdrill.probe``) and
builds a :class:`~faultdrill.timeline.Timeline` from them. Times are monotonic seconds;
``ts`` is ``mono + WALL``. Sample ids follow the reference workload: at step ``s`` (from 1)
with ``world`` ranks consuming ``sps`` samples each, rank ``r`` reads
``[(s-1)*world*sps + r*sps, ... + sps)``.

The stock drill (:func:`restart`) is the demo plan's ``kill-worker`` scenario in miniature:
2 ranks, a checkpoint every 2 steps, rank 1 killed after step 5 at t=5.5, the platform
notices at 6.0, the old replicas are gone at 6.5, incarnation 1 announces itself at 7.0,
loads ``ckpt-4`` and runs steps 5-6 (t=8, 9) to a clean end. :func:`baseline` is the same
job without the fault. Like the reference workload, every rank evaluates on held-out data
after each checkpoint (:func:`eval_at`), and rank 0 exports the final model (``artifact``),
which the harness hashes again at the end (``artifact_verified``).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from faultdrill.checks import CheckContext, Finding, Verdict
from faultdrill.checks.api import run_one
from faultdrill.plan import Control, Plan, Scenario
from faultdrill.readings.reference import Reference
from faultdrill.timeline import Timeline

WALL = 1_700_000_000.0
SPS = 2  # samples per rank per step
WORLD = 2
A, B, C = "10.0.0.1:29500", "10.0.0.1:29501", "10.0.0.1:29502"  # one endpoint per round
OLD, NEW, NEWER = (100, 101), (200, 201), (300, 301)  # pids of rank 0, 1 per incarnation

Record = dict[str, Any]
LossFn = Callable[[int, int], float]


def loss_at(step: int, rank: int) -> float:
    """The loss every healthy run (baseline included) reports."""
    return 3.0 - 0.1 * step + 0.001 * rank


def eval_at(step: int) -> dict[str, float]:
    """The held-out metrics every healthy run reports for the model after ``step``."""
    return {"loss": 2.5 - 0.05 * step, "accuracy": 0.05 * step}


MODEL_FILE = "export/model.pt"
MODEL_SHA = "sha-model-file-1"


def ids(step: int, rank: int, world: int = WORLD, sps: int = SPS) -> list[int]:
    """The sample range rank ``rank`` consumes at ``step``."""
    lo = (step - 1) * world * sps + rank * sps
    return [lo, lo + sps]


class TL:
    """Builder of literal timelines; every method appends and returns ``self``."""

    def __init__(self, task: str = "drill") -> None:
        self.task = task
        self.recs: list[Record] = []
        self._world: dict[int, int] = {}

    def add(self, src: str, kind: str, t: float, **fields: Any) -> TL:
        self.recs.append(
            {"ts": WALL + t, "mono": t, "src": src, "kind": kind, "task": self.task, **fields}
        )
        return self

    # --- probe ---------------------------------------------------------------------

    def run_start(
        self,
        rank: int,
        pid: int,
        master: str | None,
        t: float,
        *,
        world_size: int = WORLD,
        node: str | None = None,
        config_digest: str = "cfg-1",
    ) -> TL:
        self._world[pid] = world_size
        return self.add(
            "probe",
            "run_start",
            t,
            rank=rank,
            pid=pid,
            master=master,
            world_size=world_size,
            local_rank=0,
            node=node or f"n{rank}",
            restart_count=0,
            config_digest=config_digest,
        )

    def load(
        self,
        rank: int,
        pid: int,
        ckpt_id: str,
        step: int,
        t: float,
        *,
        verified: bool = True,
        rejected: Iterable[Record] = (),
    ) -> TL:
        return self.add(
            "probe",
            "ckpt_load",
            t,
            rank=rank,
            pid=pid,
            id=ckpt_id,
            step=step,
            path=f"ckpt/{ckpt_id}",
            verified=verified,
            data_position=step * WORLD * SPS,
            rejected=list(rejected),
        )

    def scratch(self, rank: int, pid: int, t: float, *, rejected: Iterable[Record] = ()) -> TL:
        return self.add("probe", "ckpt_none", t, rank=rank, pid=pid, rejected=list(rejected))

    def step(
        self,
        pid: int,
        rank: int,
        step: int,
        t: float,
        samples: list[list[int]],
        loss: float | None = None,
    ) -> TL:
        return self.add(
            "probe",
            "step",
            t,
            rank=rank,
            pid=pid,
            step=step,
            loss=loss_at(step, rank) if loss is None else loss,
            samples=samples,
        )

    def steps(
        self,
        pid: int,
        rank: int,
        steps: Iterable[int],
        t0: float,
        dt: float = 1.0,
        sps: int = SPS,
        *,
        data_from: int | None = None,
        loss: LossFn = loss_at,
    ) -> TL:
        """Consecutive steps at ``t0, t0+dt, ...``; ``data_from``: the step whose samples
        the first of them reads (default: its own), to model replayed or skipped data."""
        world = self._world.get(pid, WORLD)
        for i, s in enumerate(steps):
            data = s if data_from is None else data_from + i
            self.step(pid, rank, s, t0 + i * dt, [ids(data, rank, world, sps)], loss(s, rank))
        return self

    def save(self, rank: int, pid: int, ckpt_id: str, step: int, t: float) -> TL:
        return self.add(
            "probe",
            "ckpt_save",
            t,
            rank=rank,
            pid=pid,
            id=ckpt_id,
            step=step,
            path=f"ckpt/{ckpt_id}",
            sha256=f"sha-{ckpt_id}",
            bytes=1024,
            data_position=step * WORLD * SPS,
        )

    def evaluation(
        self,
        rank: int,
        pid: int,
        step: int,
        t: float,
        metrics: dict[str, float] | None = None,
        *,
        split: str = "heldout",
    ) -> TL:
        return self.add(
            "probe",
            "evaluation",
            t,
            rank=rank,
            pid=pid,
            step=step,
            split=split,
            metrics=eval_at(step) if metrics is None else metrics,
        )

    def artifact(
        self, rank: int, pid: int, t: float, *, path: str = MODEL_FILE, sha256: str = MODEL_SHA
    ) -> TL:
        return self.add(
            "probe",
            "artifact",
            t,
            rank=rank,
            pid=pid,
            name="final-model",
            path=path,
            sha256=sha256,
            bytes=4096,
            step=None,
        )

    def artifact_verified(
        self,
        t: float,
        *,
        path: str = MODEL_FILE,
        sha256: str | None = MODEL_SHA,
        reported: str = MODEL_SHA,
        problem: str | None = None,
    ) -> TL:
        """The harness's second hash of an exported file (``sha256`` None: it is gone)."""
        return self.harness(
            "artifact_verified",
            t,
            name="final-model",
            path=path,
            reported_sha256=reported,
            present=sha256 is not None,
            sha256=sha256,
            bytes=4096 if sha256 is not None else None,
            matches=sha256 == reported,
            problem=problem,
        )

    def end(
        self,
        rank: int,
        pid: int,
        final_step: int,
        t: float,
        *,
        digest: str = "model-1",
        status: str = "ok",
    ) -> TL:
        return self.add(
            "probe",
            "run_end",
            t,
            rank=rank,
            pid=pid,
            status=status,
            final_step=final_step,
            model_digest=digest,
        )

    # --- sampler, fault, platform, harness -------------------------------------------

    def proc(
        self,
        pid: int,
        rank: int | None,
        seen: float,
        gone: float | None = None,
        *,
        last_seen: float | None = None,
        role: str = "worker",
        node: str = "n0",
        start_time: int | None = None,
        owner: int | None = None,
        ppid: int | None = None,
        exited: float | None = None,
        clock: str = "kernel",
    ) -> TL:
        """A process life: ``proc_seen`` at ``seen``, ``proc_gone`` at ``gone`` (if any),
        and its exit event (``proc_exit``, on ``clock``) at ``exited`` (if any).
        ``owner``: the replica a ``child`` belongs to (lineage as the sampler records it)."""
        who = {
            "pid": pid,
            "start_time": start_time or pid * 10,
            "role": role,
            "rank": rank,
            "node": node,
        }
        lineage = {} if owner is None and ppid is None else {"owner": owner, "ppid": ppid}
        self.add("sampler", "proc_seen", seen, restart_count=0, **who, **lineage)
        if gone is not None:
            self.add(
                "sampler",
                "proc_gone",
                gone,
                **who,
                last_seen_mono=gone - 0.1 if last_seen is None else last_seen,
            )
        if exited is not None:
            self.add("sampler", "proc_exit", exited, clock=clock, signal=9, exit_code=None, **who)
        return self

    def inject(
        self,
        t: float,
        *,
        fault: str = "kill-worker",
        target: str = "rank 1",
        at_step: int = 5,
        **facts: Any,
    ) -> TL:
        return self.add(
            "fault",
            "injected",
            t,
            fault=fault,
            target=target,
            at_step=at_step,
            duration_s=None,
            **facts,
        )

    def platform(self, kind: str, t: float, **fields: Any) -> TL:
        return self.add("platform", kind, t, **fields)

    def job(self, state: str, t: float) -> TL:
        return self.add("platform", "job_state", t, state=state)

    def harness(self, kind: str, t: float, **fields: Any) -> TL:
        return self.add("harness", kind, t, **fields)

    def procs_final(
        self,
        t: float,
        *,
        alive: Iterable[Record] = (),
        ports: Iterable[int] = (),
        leftovers: Iterable[str] = (),
    ) -> TL:
        return self.harness(
            "procs_final",
            t,
            alive=list(alive),
            ports=list(ports),
            leftovers=list(leftovers),
            settle_s=1.0,
            after_stop=False,
        )

    def cleanup(self, t: float, *, problems: Iterable[str] = (), pending: int = 0) -> TL:
        """The harness's cleanup record: what it could not take back."""
        return self.harness("cleanup", t, problems=list(problems), ledger_pending=pending)

    def inventory(self, t: float, latest: str | None, *, bad: dict[str, str] | None = None) -> TL:
        """``ckpt_latest`` plus one ``ckpt_inventory`` per saved checkpoint; ``bad``: id ->
        reason it does not verify."""
        bad = bad or {}
        problem = None
        saved = [r for r in self.recs if r["src"] == "probe" and r["kind"] == "ckpt_save"]
        if latest is not None and latest not in {r["id"] for r in saved}:
            problem = f"latest names {latest!r}, which no save reported"
        self.harness("ckpt_latest", t, file="latest", target=latest, problem=problem)
        for r in {r["id"]: r for r in saved}.values():  # one per checkpoint, as on disk
            ok = r["id"] not in bad
            self.harness(
                "ckpt_inventory",
                t,
                id=r["id"],
                step=r["step"],
                state="present",
                verifies=ok,
                reason=bad.get(r["id"]),
                latest=r["id"] == latest,
            )
        return self

    # --- editing and building --------------------------------------------------------

    def drop(
        self, src: str, kind: str | None = None, where: Callable[[Record], bool] = lambda r: True
    ) -> TL:
        """Remove the records of ``src`` (and ``kind``) for which ``where`` holds."""
        self.recs = [
            r for r in self.recs if not (r["src"] == src and kind in (None, r["kind"]) and where(r))
        ]
        return self

    def edit(self, src: str, kind: str, where: Callable[[Record], bool], **fields: Any) -> TL:
        """Overwrite ``fields`` in the records of ``src``/``kind`` for which ``where`` holds."""
        hits = [r for r in self.recs if r["src"] == src and r["kind"] == kind and where(r)]
        assert hits, f"no {src}/{kind} record to edit"
        for r in hits:
            r.update(fields)
        return self

    def records(self) -> list[Record]:
        return copy.deepcopy(self.recs)

    def build(self) -> Timeline:
        return Timeline.from_records(self.records())


# --- stock drills ------------------------------------------------------------------


def first_run(tl: TL, last: int, *, every: int = 2, master: str | None = A) -> TL:
    """Incarnation 0 from scratch: steps 1..last at t=1..last, ``ckpt-<s>`` every
    ``every`` steps (saved at s+0.5 by rank 0)."""
    for rank, pid in enumerate(OLD):
        tl.run_start(rank, pid, master, 0.0).scratch(rank, pid, 0.1)
        tl.steps(pid, rank, range(1, last + 1), t0=1.0)
    for s in range(every, last + 1, every):
        tl.save(0, OLD[0], f"ckpt-{s}", s, s + 0.5)
        for rank, pid in enumerate(OLD):
            tl.evaluation(rank, pid, s, s + 0.6)
    return tl


def finish(tl: TL, last: int, t: float, pids: Iterable[int], *, latest: str | None) -> TL:
    """Clean end at ``t``: rank 0 exports the final model, run_end per rank, job
    succeeded, nothing left, inventory and the exported file hashed again, a cleanup that
    took everything back."""
    pids = list(pids)
    tl.artifact(0, pids[0], t - 0.1)
    for rank, pid in enumerate(pids):
        tl.end(rank, pid, last, t)
    tl.job("succeeded", t + 0.5).procs_final(t + 1.5).inventory(t + 1.6, latest)
    return tl.artifact_verified(t + 1.65).cleanup(t + 1.7)


def baseline(last: int = 6) -> TL:
    """The fault-free run: one incarnation, steps 1..last, clean end."""
    tl = TL("baseline").job("running", 0.0)
    first_run(tl, last)
    for rank, pid in enumerate(OLD):
        tl.proc(pid, rank, 0.05, last + 1.5, node=f"n{rank}")
    return finish(tl, last, last + 1.0, OLD, latest=f"ckpt-{last - last % 2}")


def restart(
    *,
    kill_after: int = 5,
    resume: int | None = 4,
    first: int | None = None,
    data_from: int | None = None,
    last: int = 6,
    verified: bool = True,
    master: str | None = B,
) -> TL:
    """The healthy kill-worker drill; the knobs make it known-bad.

    ``resume``: checkpoint step incarnation 1 loads (None: starts from scratch);
    ``first``: its first step (default ``resume + 1``); ``data_from``: whose samples that
    first step reads (default its own); ``verified``: whether the load was verified."""
    base = resume or 0
    first = base + 1 if first is None else first
    tl = TL().job("running", 0.0)
    first_run(tl, kill_after)
    for rank, pid in enumerate(OLD):
        tl.proc(pid, rank, 0.05, 6.5, last_seen=6.2, node=f"n{rank}")
    tl.inject(kill_after + 0.5, at_step=kill_after)
    tl.platform("worker_group_failed", 6.0, node="n1")
    t_end = 8.0 + (last - first) + 1.0
    for rank, pid in enumerate(NEW):
        tl.run_start(rank, pid, master, 7.0).proc(pid, rank, 7.05, t_end + 0.5, node=f"n{rank}")
        if resume is None:
            tl.scratch(rank, pid, 7.1)
        else:
            tl.load(rank, pid, f"ckpt-{resume}", resume, 7.1, verified=verified)
        tl.steps(pid, rank, range(first, last + 1), t0=8.0, data_from=data_from)
    for s in range(first, last + 1):
        if s % 2 == 0:
            tl.save(0, NEW[0], f"ckpt-{s}", s, 8.0 + (s - first) + 0.5)
            for rank, pid in enumerate(NEW):
                tl.evaluation(rank, pid, s, 8.0 + (s - first) + 0.6)
    return finish(tl, last, t_end, NEW, latest=f"ckpt-{last - last % 2}")


# --- judging -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Judge:
    """What a check is run with besides the timeline; ``dataclasses.replace`` for variants."""

    plan: Plan
    item: Scenario | Control | None
    reference: Reference | None

    def ctx(self, tl: TL | Timeline) -> CheckContext:
        timeline = tl.build() if isinstance(tl, TL) else tl
        return CheckContext(
            timeline=timeline, plan=self.plan, item=self.item, reference=self.reference
        )

    def run(self, check: str, tl: TL | Timeline) -> list[Finding]:
        return run_one(check, self.ctx(tl))

    def one(self, check: str, tl: TL | Timeline) -> tuple[Verdict, str]:
        """The single finding's (verdict, message); fails the test if there are several."""
        found = self.run(check, tl)
        assert len(found) == 1, [f.to_record().to_json() for f in found]
        return found[0].verdict, found[0].message

    def verdicts(self, check: str, tl: TL | Timeline) -> list[Verdict]:
        return [f.verdict for f in self.run(check, tl)]

    def replace(self, **changes: Any) -> Judge:
        return dataclasses.replace(self, **changes)

    def scenario(self, section: str, **fields: Any) -> Judge:
        """The same judge with fields of one section of the scenario replaced, e.g.
        ``scenario("expected", job="fails")``."""
        assert isinstance(self.item, Scenario)
        part = getattr(self.item, section).model_copy(update=fields)
        return self.replace(item=self.item.model_copy(update={section: part}))
