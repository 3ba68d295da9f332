"""Slurm's behaviour under faults, measured on the embedded cluster (see docs/slurm-notes.md).

Run as root, one experiment at a time (each 40-120 s on a busy 2-core machine)::

    .venv/bin/python -m bench.slurm_experiments SCENARIO OUT_DIR [--steps 40] [--at-step 15]
        [--restore-s 40] [--victim-index -1] [--min-nodes 2] [--max-restarts 3]

Scenarios: none, kill-worker, node-down, slurmd-kill, link-cut, drain, ctld-pause,
ctld-restart, ctld-cut, node-freeze. The cluster is 2 nodes + 1 spare, the job the
reference workload (1 process per node, checkpoint every 10 steps, 0.25 s per step), the
action goes through the adapter (``EmbeddedSlurmPlatform``) when the run reaches
``--at-step``, and is undone ``--restore-s`` later. A job that Slurm holds is released by
the "operator" (``scontrol release`` + ``State=RESUME``) 20 s after the restore.

Prints one timeline, in seconds since submission: Slurm's decisions (platform events), the
job's processes appearing and vanishing per node, and the probe's run_start, ckpt_load,
ckpt_save and run_end, then the steps each process wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from faultdrill.events import EventSink
from faultdrill.ledger import Ledger
from faultdrill.plan import Resources, SlurmSettings
from faultdrill.platforms.api import Change, JobSpec
from faultdrill.platforms.slurm import jobs
from faultdrill.platforms.slurm.embedded_platform import EmbeddedSlurmPlatform


def _nothing() -> None:
    return None


def act(p: EmbeddedSlurmPlatform, changes: list[Change]) -> Callable[[], None]:
    """What a fault does with an action's changes: record, apply, mark (close at once if
    irreversible); returns the undo of the reversible ones (newest first)."""
    undo: list[tuple[str, Change]] = []
    for ch in changes:
        eid = p.ledger.record(ch.kind, ch.data, ch.label)
        ch.apply(partial(p.ledger.update, eid))
        p.ledger.mark_applied(eid)
        if ch.reversible:
            undo.append((eid, ch))
        else:
            p.ledger.revert(eid)

    def back() -> None:
        for eid, ch in reversed(undo):
            p.ledger.revert(eid)
            if ch.after_undo is not None:
                ch.after_undo()

    return back


def inject(p: EmbeddedSlurmPlatform, scenario: str, victim: str) -> Callable[[], None]:
    """Apply the scenario's action through the adapter; returns its restore."""
    if scenario == "kill-worker":
        return act(p, [p.signal_replica(p.rank_replica(node=victim), "SIGKILL")])
    if scenario == "slurmd-kill":
        os.kill(p.slurm.daemons[f"slurmd-{victim}"].proc.pid, signal.SIGKILL)
        return lambda: p.restore_node(victim)
    actions: dict[str, Callable[[], list[Change]]] = {
        "node-down": lambda: p.node_down(victim),
        "ctld-restart": p.control_plane_stop,
        "link-cut": lambda: p.link_cut(victim),
        "drain": lambda: p.node_drain(victim),
        "ctld-pause": p.control_plane_pause,
        "ctld-cut": p.control_plane_cut,
        "node-freeze": lambda: p.node_freeze(victim),
    }
    return act(p, actions[scenario]())


def sample_processes(
    p: EmbeddedSlurmPlatform, log: list[tuple[float, str]], stop: threading.Event
) -> None:
    prev: set[tuple[str, int, str, int | None]] = set()
    while not stop.is_set():
        cur = {(r.node, r.pid, r.role, r.rank) for r in p.replicas()}
        now = time.monotonic()
        log += [(now, f"process + {x}") for x in sorted(cur - prev)]
        log += [(now, f"process - {x}") for x in sorted(prev - cur)]
        prev = cur
        stop.wait(0.5)


def read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]


def report(work: Path, t0: float, marks: list[tuple[float, str]]) -> None:
    lines = list(marks)
    for e in read(work / "events" / "platform.jsonl"):
        if e["kind"] in (
            "node_state",
            "sched_job_state",
            "job_requeued",
            "allocation",
            "job_held",
            "controller_unreachable",
            "controller_reachable",
        ):
            keep = ("node", "state", "reason", "restarts", "restart_count", "nodes", "incarnation")
            lines.append((e["mono"], f"{e['kind']} { ({k: e[k] for k in keep if e.get(k)}) }"))
    probe = sorted(
        (e for f in (work / "events").glob("probe-rank*.jsonl") for e in read(f)),
        key=lambda e: e["mono"],
    )
    for e in probe:
        if e["kind"] in ("run_start", "ckpt_load", "ckpt_save", "run_end"):
            what = {k: e[k] for k in ("node", "world_size", "step", "final_step") if k in e}
            lines.append((e["mono"], f"probe rank {e['rank']} pid {e['pid']} {e['kind']} {what}"))
    for mono, text in sorted(lines):
        print(f"{mono - t0:8.2f}  {text}")
    runs: dict[tuple[int, int], list[tuple[float, int]]] = {}
    for e in probe:
        if e["kind"] == "step":
            runs.setdefault((e["rank"], e["pid"]), []).append((e["mono"] - t0, e["step"]))
    for (rank, pid), s in runs.items():
        print(
            f"rank {rank} pid {pid}: steps {s[0][1]}..{s[-1][1]} at {s[0][0]:.2f}..{s[-1][0]:.2f}"
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("out", type=Path)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--at-step", type=int, default=15)
    ap.add_argument("--restore-s", type=float, default=40.0)
    ap.add_argument("--victim-index", type=int, default=-1)
    ap.add_argument("--min-nodes", type=int, default=2)
    ap.add_argument("--max-restarts", type=int, default=3)
    args = ap.parse_args(argv)
    work = args.out.resolve()
    work.mkdir(parents=True, exist_ok=True)
    run_id = f"x-slurm-{uuid.uuid4().hex[:8]}"
    ledger = Ledger(work / "ledger.jsonl", run_id=run_id)
    res = Resources(
        platform="slurm",
        isolation="netns",
        nodes=2,
        spares=1,
        min_nodes=args.min_nodes,
        max_restarts=args.max_restarts,
        slurm=SlurmSettings(embedded=True),
    )
    p = EmbeddedSlurmPlatform(res, work, ledger, EventSink(work / "events", "x"))
    cfg = work / "lm.json"
    cfg.write_text(
        json.dumps(
            {
                "ckpt_dir": str(work / "ckpt"),
                "steps": args.steps,
                "ckpt_every": 10,
                "step_sleep_s": 0.25,
            }
        )
    )
    job = JobSpec(
        run_id=run_id,
        task_id="x",
        argv=["-m", "faultdrill.workloads.lm", f"--workload-config={cfg}"],
        env={},
        nodes=["n1", "n2"],
        procs_per_node=1,
        min_nodes=args.min_nodes,
        max_nodes=2,
        max_restarts=args.max_restarts,
        work_dir=work,
        events_dir=work / "events",
    )
    marks: list[tuple[float, str]] = []
    stop = threading.Event()
    t0 = time.monotonic()
    try:
        p.prepare()
        t0 = time.monotonic()
        p.submit(job)
        threading.Thread(target=sample_processes, args=(p, marks, stop), daemon=True).start()
        run(p, args, work, marks)
    finally:
        stop.set()
        p.stop(grace_s=5)
        p.teardown()
        ledger.revert_all()
    report(work, t0, marks)


def run(
    p: EmbeddedSlurmPlatform, args: argparse.Namespace, work: Path, marks: list[tuple[float, str]]
) -> None:
    def last_step() -> int:
        steps = [
            e["step"]
            for f in (work / "events").glob("probe-rank*.jsonl")
            for e in read(f)
            if e["kind"] == "step"
        ]
        return max(steps, default=0)

    deadline = time.monotonic() + 180
    while args.scenario != "none" and last_step() < args.at_step and time.monotonic() < deadline:
        p.poll()
        time.sleep(0.1)
    assert p.watch is not None
    victim = p.watch.incarnations.get(0, ["n1", "n2"])[args.victim_index]
    t_inj = time.monotonic()
    restore: Callable[[], None] = _nothing
    if args.scenario != "none":
        restore = inject(p, args.scenario, victim)
        marks.append((t_inj, f"INJECT {args.scenario} on {victim} at step {last_step()}"))
    restored = args.scenario in ("none", "kill-worker")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        p.poll()  # records the adapter's job_state events; a held job stays FAILED there
        state = jobs.job_state_of(p.watch.job) if p.watch.job else p.poll()
        if not restored and time.monotonic() - t_inj >= args.restore_s:
            restore()
            restored = True
            marks.append((time.monotonic(), "RESTORE"))
        if restored and state.ended and not jobs.is_held(p.watch.job):
            return
        if (
            restored
            and jobs.is_held(p.watch.job)
            and time.monotonic() - t_inj > args.restore_s + 20
        ):
            marks.append((time.monotonic(), "OPERATOR scontrol release + RESUME"))
            p.slurm.client(["scontrol", "release", p.job_id or ""], check=False)
            for n in p.cluster.nodes():
                p.slurm.client(["scontrol", "update", f"NodeName={n}", "State=RESUME"], check=False)
            time.sleep(2)
        time.sleep(0.25)


if __name__ == "__main__":
    main()
