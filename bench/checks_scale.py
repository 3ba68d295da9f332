"""Checks at scale: every registered check over a synthetic kill-and-resume drill.

The drill is the demo's ``kill-worker`` scenario, scaled: ``ranks`` ranks, ``steps`` steps,
a checkpoint every ``steps // 10`` steps, one rank killed shortly after the checkpoint at
mid-run, every rank restarted as incarnation 1, which loads that checkpoint and runs to
the end (the steps since the checkpoint are recomputed). Each step event carries one
range of :data:`SAMPLES_PER_STEP` sample ids. The baseline is the same job without the
fault; it becomes the checks' :class:`~faultdrill.readings.reference.Reference`.

The step events are generated directly as columns (the form :class:`StepTable` holds
after loading), not as JSON lines: what is measured is what happens after the events are
read. Loading JSON lines is measured separately (``bench/load_cost.py``).

Measured, in one fresh process per size (so peak RSS is per size):

* ``derive_s``: :meth:`Timeline.from_parts` for baseline and drill (incarnations, process
  lives), then :meth:`Reference.from_timeline` for the baseline;
* ``checks_s``: :func:`faultdrill.checks.run_checks` on the drill (every registered check);
* ``analysis_s``: :func:`faultdrill.readings.analysis.answer_questions` (the four questions);
* ``peak_rss_bytes``: the process's peak resident set (``ru_maxrss``), generation included.

Every check must pass on this healthy drill; a different verdict aborts the benchmark, so
a check that gave up early (``retest``) cannot make the figures look good.

Run one size: ``python -m bench.checks_scale --ranks 1024 --steps 10000``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np

from faultdrill.admit import load_plan
from faultdrill.checks import CHECKS, CheckContext, run_checks
from faultdrill.events import Event
from faultdrill.readings.analysis import answer_questions
from faultdrill.readings.reference import Reference
from faultdrill.timeline import StepTable, Timeline
from faultdrill.timeline.store import write_tables

__all__ = ["SAMPLES_PER_STEP", "Drill", "measure", "synthetic", "write_drill"]

SAMPLES_PER_STEP = 64
DT = 0.1  # seconds per step
RANKS_PER_NODE = 8
A, B = "10.0.0.1:29500", "10.0.0.1:29501"  # one rendezvous endpoint per incarnation
PID0, PID1 = 100_000, 200_000  # pid of rank r: PID0 + r (incarnation 0), PID1 + r (1)


class Drill:
    """The shape of the synthetic drill, derived from ``ranks`` and ``steps``."""

    def __init__(self, ranks: int, steps: int) -> None:
        if ranks < 2 or steps < 20:
            raise ValueError("need at least 2 ranks and 20 steps")
        self.ranks, self.steps = ranks, steps
        self.every = steps // 10  # checkpoint interval
        self.resume = 5 * self.every  # the checkpoint incarnation 1 loads
        self.kill_after = self.resume + max(1, self.every // 20)  # last step of incarnation 0

    @property
    def step_events(self) -> int:
        return self.ranks * (self.kill_after + self.steps - self.resume)


def _ev(events: list[Event], t: float, src: str, kind: str, task: str, **fields: Any) -> None:
    events.append(Event(1.7e9 + t, t, src, kind, task, fields))


def _table(ranks: int, segments: list[tuple[int, int, float, int]]) -> StepTable:
    """Step rows of every rank for each segment ``(first, last, t0, pid0)``, step-major, so
    sorted by time. Within a step the ranks finish in a random order (fixed seed), as
    real ranks do: the sample ranges are then not sorted by id, which the checks must
    not rely on."""
    parts = list(_tables(ranks, segments, max(last for _f, last, _t, _p in segments)))
    if len(parts) == 1:
        return parts[0]

    def joined(column: str) -> np.ndarray:
        return np.concatenate([getattr(t, column) for t in parts])

    return StepTable.from_columns(
        joined("mono"),
        joined("rank"),
        joined("pid"),
        joined("step"),
        joined("loss"),
        rng_start=joined("rng_start"),
        rng_end=joined("rng_end"),
    )


def _tables(
    ranks: int, segments: list[tuple[int, int, float, int]], block_steps: int
) -> Iterator[StepTable]:
    """:func:`_table`'s rows as tables of at most ``block_steps`` steps each, in order: a
    fleet-sized drill is generated and written a part at a time. Columns are filled in
    place, to keep the generator's own memory out of the way."""
    gen = np.random.default_rng(20261130)
    for first, last, t0, pid0 in segments:
        for lo in range(first, last + 1, block_steps):
            hi = min(last, lo + block_steps - 1)
            yield _part(ranks, lo, hi, t0 + (lo - first) * DT, pid0, gen)


def _part(
    ranks: int, first: int, last: int, t0: float, pid0: int, gen: np.random.Generator
) -> StepTable:
    """Steps ``first..last`` of every rank, the first at ``t0``."""
    n_steps = last - first + 1
    n = ranks * n_steps
    mono, loss = np.empty(n), np.empty(n)
    rank, pid, step = (np.empty(n, dtype=np.int64) for _ in range(3))
    rng_start, rng_end = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    step.reshape(n_steps, ranks)[:] = np.arange(first, last + 1, dtype=np.int64)[:, None]
    rank.reshape(n_steps, ranks)[:] = np.arange(ranks, dtype=np.int64)
    mono[:] = rank  # position within the step, before the ranks are shuffled
    mono *= DT / (2 * ranks)
    mono += t0 + (step - first) * DT
    gen.permuted(rank.reshape(n_steps, ranks), axis=1, out=rank.reshape(n_steps, ranks))
    np.add(rank, pid0, out=pid)
    # the same (step, rank) -> loss in baseline and drill: bitwise comparison passes
    loss[:] = 3.0 - 1e-4 * step.astype(np.float64)
    loss += 1e-6 * rank.astype(np.float64)
    np.subtract(step, 1, out=rng_start)
    rng_start *= ranks * SAMPLES_PER_STEP
    rng_start += rank * SAMPLES_PER_STEP
    np.add(rng_start, SAMPLES_PER_STEP, out=rng_end)
    return StepTable.from_columns(
        mono, rank, pid, step, loss, rng_off=None, rng_start=rng_start, rng_end=rng_end
    )


def synthetic(ranks: int, steps: int, *, fault: bool) -> tuple[str, list[Event], StepTable]:
    """(task id, non-step events sorted by time, step table) of the drill or its baseline."""
    task, ev, segments = _events(ranks, steps, fault=fault)
    return task, ev, _table(ranks, segments)


def _events(
    ranks: int, steps: int, *, fault: bool
) -> tuple[str, list[Event], list[tuple[int, int, float, int]]]:
    """(task id, non-step events sorted by time, the step rows' segments: see
    :func:`_table`) of the drill or its baseline."""
    d = Drill(ranks, steps)
    task = "bench-drill" if fault else "bench-baseline"
    ev: list[Event] = []
    node = [f"n{r // RANKS_PER_NODE}" for r in range(ranks)]
    n_nodes = (ranks + RANKS_PER_NODE - 1) // RANKS_PER_NODE
    _ev(ev, 0.0, "platform", "job_state", task, state="running")
    for n in range(n_nodes):
        _ev(
            ev,
            0.01,
            "sampler",
            "proc_seen",
            task,
            pid=50_000 + n,
            start_time=1,
            role="agent",
            rank=None,
            node=f"n{n}",
            restart_count=0,
        )
    for r in range(ranks):
        _ev(
            ev,
            0.05,
            "sampler",
            "proc_seen",
            task,
            pid=PID0 + r,
            start_time=10,
            role="worker",
            rank=r,
            node=node[r],
            restart_count=0,
        )
    for r in range(ranks):
        _ev(
            ev,
            0.2,
            "probe",
            "run_start",
            task,
            rank=r,
            pid=PID0 + r,
            master=A,
            world_size=ranks,
            local_rank=r % RANKS_PER_NODE,
            node=node[r],
            host="bench",
            restart_count=0,
            config_digest="cfg-1",
        )
    for r in range(ranks):
        _ev(ev, 0.3, "probe", "ckpt_none", task, rank=r, pid=PID0 + r, rejected=[])
    last0 = d.kill_after if fault else steps
    segments = [(1, last0, 1.0, PID0)]
    t_end0 = 1.0 + last0 * DT
    saves = []
    for s in range(d.every, last0 + 1, d.every):
        saves.append((s, 1.0 + s * DT - DT / 4, PID0))
    pids_end, t_end = PID0, t_end0
    if fault:
        t_kill = t_end0 + DT / 2
        _ev_later: list[tuple[float, str, str, dict[str, Any]]] = []
        t1 = t_kill + 3.0
        for s, t, pid in saves:
            _ev_later.append((t, "probe", "ckpt_save", _save(s, pid)))
        _ev_later.append(
            (
                t_kill,
                "fault",
                "injected",
                {
                    "fault": "kill-worker",
                    "target": "rank 1",
                    "at_step": d.kill_after,
                    "duration_s": None,
                },
            )
        )
        _ev_later.append((t_kill + 0.1, "platform", "worker_group_failed", {"node": node[1]}))
        for r in range(ranks):
            _ev_later.append(
                (
                    t_kill + 0.5,
                    "sampler",
                    "proc_gone",
                    {
                        "pid": PID0 + r,
                        "start_time": 10,
                        "role": "worker",
                        "rank": r,
                        "node": node[r],
                        "last_seen_mono": t_kill + 0.3,
                    },
                )
            )
        for r in range(ranks):
            _ev_later.append(
                (
                    t1 - 0.5,
                    "sampler",
                    "proc_seen",
                    {
                        "pid": PID1 + r,
                        "start_time": 20,
                        "role": "worker",
                        "rank": r,
                        "node": node[r],
                        "restart_count": 1,
                    },
                )
            )
        for r in range(ranks):
            _ev_later.append(
                (
                    t1,
                    "probe",
                    "run_start",
                    {
                        "rank": r,
                        "pid": PID1 + r,
                        "master": B,
                        "world_size": ranks,
                        "local_rank": r % RANKS_PER_NODE,
                        "node": node[r],
                        "host": "bench",
                        "restart_count": 1,
                        "config_digest": "cfg-1",
                    },
                )
            )
        for r in range(ranks):
            _ev_later.append(
                (
                    t1 + 0.1,
                    "probe",
                    "ckpt_load",
                    {
                        "rank": r,
                        "pid": PID1 + r,
                        "id": f"ckpt-{d.resume}",
                        "step": d.resume,
                        "path": f"ckpt/ckpt-{d.resume}/state.pt",
                        "verified": True,
                        "data_position": d.resume * ranks * SAMPLES_PER_STEP,
                        "rejected": [],
                    },
                )
            )
        segments.append((d.resume + 1, steps, t1 + 1.0, PID1))
        t_end = t1 + 1.0 + (steps - d.resume) * DT
        for s in range((d.resume // d.every + 1) * d.every, steps + 1, d.every):
            _ev_later.append(
                (t1 + 1.0 + (s - d.resume) * DT - DT / 4, "probe", "ckpt_save", _save(s, PID1))
            )
        saves = []
        pids_end = PID1
        for t, src, kind, fields in sorted(_ev_later, key=lambda x: x[0]):
            _ev(ev, t, src, kind, task, **fields)
    else:
        for s, t, pid in saves:
            _ev(ev, t, "probe", "ckpt_save", task, **_save(s, pid))
    # the final held-out evaluation and the exported model, by rank 0 of the last generation
    final = {"rank": 0, "pid": pids_end, "step": steps}
    _ev(ev, t_end + 0.1, "probe", "evaluation", task, **final, split="heldout", metrics=EVAL)
    _ev(ev, t_end + 0.15, "probe", "artifact", task, **final, name="final-model", **MODEL)
    for r in range(ranks):
        _ev(
            ev,
            t_end + 0.2,
            "probe",
            "run_end",
            task,
            rank=r,
            pid=pids_end + r,
            status="ok",
            final_step=steps,
            model_digest="model-1",
        )
    _ev(ev, t_end + 0.5, "platform", "job_state", task, state="succeeded")
    start_time = 20 if fault else 10
    for r in range(ranks):
        _ev(
            ev,
            t_end + 0.8,
            "sampler",
            "proc_gone",
            task,
            pid=pids_end + r,
            start_time=start_time,
            role="worker",
            rank=r,
            node=node[r],
            last_seen_mono=t_end + 0.6,
        )
    for n in range(n_nodes):
        _ev(
            ev,
            t_end + 0.9,
            "sampler",
            "proc_gone",
            task,
            pid=50_000 + n,
            start_time=1,
            role="agent",
            rank=None,
            node=f"n{n}",
            last_seen_mono=t_end + 0.7,
        )
    _ev(
        ev,
        t_end + 1.5,
        "harness",
        "procs_final",
        task,
        alive=[],
        ports=[],
        leftovers=[],
        settle_s=1.0,
        after_stop=False,
    )
    _ev(
        ev,
        t_end + 1.6,
        "harness",
        "ckpt_latest",
        task,
        file="latest",
        target=f"ckpt-{steps}",
        problem=None,
    )
    for s in range(steps - 2 * d.every, steps + 1, d.every):
        _ev(
            ev,
            t_end + 1.6,
            "harness",
            "ckpt_inventory",
            task,
            id=f"ckpt-{s}",
            step=s,
            state="present",
            verifies=True,
            reason=None,
            latest=s == steps,
        )
    _ev(
        ev,
        t_end + 1.65,
        "harness",
        "artifact_verified",
        task,
        name="final-model",
        path=MODEL["path"],
        reported_sha256=MODEL["sha256"],
        present=True,
        sha256=MODEL["sha256"],
        bytes=MODEL["bytes"],
        matches=True,
        problem=None,
    )
    _ev(ev, t_end + 1.7, "harness", "cleanup", task, problems=[], ledger_pending=0)
    ev.sort(key=lambda e: e.mono)
    return task, ev, segments


EVAL = {"loss": 2.0, "accuracy": 0.5}
MODEL: dict[str, Any] = {"path": "export/model.pt", "sha256": "sha-model", "bytes": 1 << 20}


def _save(step: int, pid: int) -> dict[str, Any]:
    return {
        "rank": 0,
        "pid": pid,
        "id": f"ckpt-{step}",
        "step": step,
        "path": f"ckpt/ckpt-{step}/state.pt",
        "sha256": f"sha-{step}",
        "bytes": 1 << 20,
        "data_position": step * SAMPLES_PER_STEP,
    }


def peak_rss_bytes() -> int:
    """This process's peak resident set so far.

    ``VmHWM`` of ``/proc/self/status``, which belongs to this program's address space; not
    ``ru_maxrss``, which Linux carries over an exec from the parent's at fork time."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


def _cpu() -> float:
    """CPU seconds of this process so far (user + system)."""
    t = os.times()
    return t.user + t.system


def write_drill(root: Path, ranks: int, steps: int) -> dict[str, Any]:
    """Write the baseline and the drill as a recorded run holds them after a drill: the
    non-step events as JSON lines, the step events in the columnar store the harness
    writes while the job runs (:func:`faultdrill.timeline.store.write_tables`). Returns how
    long generating and writing took (not part of any target)."""
    out: dict[str, Any] = {}
    for name, fault in (("baseline", False), ("drill", True)):
        t = time.perf_counter()
        task, events, segments = _events(ranks, steps, fault=fault)
        folder = root / name / "events"
        folder.mkdir(parents=True)
        with open(folder / "events.jsonl", "w", encoding="utf-8") as f:
            for e in events:
                f.write(json.dumps(e.to_json(), separators=(",", ":")) + "\n")
        # a part of at most WRITE_ROWS rows at a time: 16,384 ranks would take 10 GB at once
        block = max(1, WRITE_ROWS // ranks)
        write_tables(folder, _tables(ranks, segments, block), task)
        out[f"write_{name}_s"] = round(time.perf_counter() - t, 3)  # generated as written
        out[f"{name}_store_bytes"] = sum(p.stat().st_size for p in (folder / "steps").iterdir())
        del events
        gc.collect()
    return out


#: Step rows generated and written at a time by :func:`write_drill`.
WRITE_ROWS = 1 << 22


def measure(ranks: int, steps: int, store: Path | None = None) -> dict[str, Any]:
    """Derive, check, answer; return the figures. With ``store`` (written by
    :func:`write_drill` in another process), the baseline and the drill are loaded from it
    first (``Timeline.load``: the load is timed with the rest); else they are generated
    here (not timed). Raises ``AssertionError`` unless every check passes (the drill is
    healthy)."""
    plan = load_plan(Path(str(files("faultdrill") / "plans" / "demo.yaml")))
    scenario = plan.scenarios()[0]
    rss0 = peak_rss_bytes()
    cpu0, wall0 = _cpu(), time.perf_counter()
    gen_s = 0.0

    def timeline(name: str, fault: bool) -> Timeline:
        nonlocal gen_s
        if store is not None:
            return Timeline.load(store / name / "events")
        t = time.perf_counter()
        task, events, st = synthetic(ranks, steps, fault=fault)
        gen_s += time.perf_counter() - t
        return Timeline.from_parts(task, events, st)

    # baseline first, dropped once it is a Reference: the checks hold a reference and the
    # drill's timeline, nothing else (as ``faultdrill check`` judging one scenario would)
    t = time.perf_counter()
    base = timeline("baseline", False)
    ref = Reference.from_timeline(base)
    del base
    gc.collect()
    tl = timeline("drill", True)
    load_s = time.perf_counter() - t - gen_s
    t = time.perf_counter()
    evidence = run_checks(CheckContext(timeline=tl, plan=plan, item=scenario, reference=ref))
    checks_s = time.perf_counter() - t
    t = time.perf_counter()
    answers = answer_questions(tl)
    analysis_s = time.perf_counter() - t
    cpu_s = _cpu() - cpu0
    wall_s = time.perf_counter() - wall0 - gen_s
    verdicts = {f.check: f.verdict.value for e in evidence.values() for f in e.findings}
    wrong = {k: v for k, v in verdicts.items() if v != "pass"}
    if wrong:
        msgs = [
            f.to_record().to_json()
            for e in evidence.values()
            for f in e.findings
            if f.check in wrong
        ]
        raise AssertionError(f"the healthy synthetic drill did not pass: {msgs}")
    d = Drill(ranks, steps)
    if answers.recomputed_steps != d.kill_after - d.resume:
        raise AssertionError(f"recomputed steps {answers.recomputed_steps} != expected")
    return {
        "ranks": ranks,
        "steps": steps,
        "from_store": store is not None,
        "step_events": len(tl.steps),
        "baseline_step_events": ref.rows,
        "other_events": len(tl.events),
        "checks": len(CHECKS),
        "findings": sum(len(e.findings) for e in evidence.values()),
        "generate_s": round(gen_s, 3),
        "load_s": round(load_s, 3),  # baseline + drill: read (if stored), derive, reference
        "checks_s": round(checks_s, 3),
        "analysis_s": round(analysis_s, 3),
        "judge_s": round(wall_s, 3),  # load + checks + analysis, wall clock
        "judge_cpu_s": round(cpu_s, 3),  # the same, CPU seconds of this process
        "peak_rss_bytes": peak_rss_bytes(),
        "rss_after_imports_bytes": rss0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--write", type=Path, help="only generate the drill into this directory")
    ap.add_argument("--store", type=Path, help="measure the drill written to this directory")
    args = ap.parse_args(argv)
    if args.write is not None:
        result = write_drill(args.write, args.ranks, args.steps)
    else:
        result = measure(args.ranks, args.steps, args.store)
    json.dump(result, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
