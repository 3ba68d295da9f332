"""The demo's wall time, and where each item's time goes.

Runs ``faultdrill demo`` for real, as a user does (a fresh process: the CLI's start-up,
every item, the reports and the bundle), under its own ``--out`` in a temporary directory,
and times it. Then reads each item's events and splits its wall time into phases, in
timeline order (:func:`item_split`):

================  ======================================================================
bring-up          the harness prepares the platform (namespaces, groups), job, fault
job start         job submitted -> first agent rendezvousing: spawning the torchrun
                  agents, their python + torch import
rendezvous        first rendezvous of the agents (c10d), until it completes
worker start      workers spawned -> first training step: python + torch import, process
                  group, data, checkpoint load
training          steps running (also while a fault that needs no restart is in effect)
detection         injection -> the platform reacts (a worker failed, a membership change,
                  a re-rendezvous) or training goes on
restart           everything from the first reaction to the first step of the new
                  incarnation: stopping the group, re-rendezvous, workers' imports, load
job end           last step -> the job's end (final save, export, process-group teardown,
                  exits, the agents' exit barrier)
noticing end      the job ended -> the harness saw it
settle, post-window, sampling, teardown, checks, report: the harness's phases
                  (``bench.overhead``)
================  ======================================================================

Around the items, ``startup`` (the CLI's start to the first item) and ``finish`` (the last
item's end, past its judging, to the CLI's exit: the reports and the bundle).

Run alone: ``python -m bench.demo_time`` (the whole demo, about four minutes on 2 cores);
``--only ID,...`` and ``--no-controls`` pass through to ``faultdrill demo`` (the quick
bench runs ``--only kill-worker --no-controls``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from faultdrill.engine.phases import harness_overhead
from faultdrill.timeline import Timeline

__all__ = ["JOB_PHASES", "TARGET_S", "item_split", "measure"]

TARGET_S = 240.0

#: The job's phases, in the order they come; the harness's follow them.
JOB_PHASES = (
    "job start",
    "rendezvous",
    "worker start",
    "training",
    "detection",
    "restart",
    "job end",
)
HARNESS_PHASES = (
    "bring-up",
    "noticing end",
    "settle",
    "post-window",
    "sampling",
    "teardown",
    "checks",
    "report",
)
#: Platform events that say it reacted to a fault (any of them ends ``detection``).
_REACTIONS = frozenset(
    {
        "worker_failed",
        "worker_group_failed",
        "membership_change",
        "workers_stopping",
        "rdzv_start",
        "agent_exit",
        "dead_node",
    }
)


def _job_marks(tl: Timeline) -> list[tuple[float, str]]:
    """(time, what starts then) for the job's own phases, in time order."""
    marks: list[tuple[float, str]] = []
    submitted = tl.first("platform", "job_submitted")
    if submitted is not None:
        marks.append((submitted.mono, "job start"))
    for e in tl.of("platform"):
        if e.kind in ("rdzv_start", "rdzv_complete") or e.kind in _REACTIONS:
            marks.append((e.mono, e.kind))
    for e in tl.of("fault", "injected"):
        marks.append((e.mono, "injected"))
    step_times = tl.steps.mono
    for t in step_times:
        marks.append((float(t), "step"))
    if len(step_times):
        marks.append((float(step_times[-1]) + 1e-9, "job end"))
    marks.sort(key=lambda m: m[0])
    return marks


class _Split:
    """Walks the job's marks in time order, adding each interval to the phase it belongs
    to."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(JOB_PHASES, 0.0)
        self.state = ""
        self.since = 0.0
        self.trained = False  # a step was seen: a later rendezvous is a restart
        self.last_step = 0.0

    def enter(self, state: str, t: float) -> None:
        if self.state:
            self.seconds[self.state] += max(0.0, t - self.since)
        self.state, self.since = state, t

    def mark(self, t: float, what: str) -> None:
        state = self.state
        if what in ("job start", "job end") or state == "job end":
            self.enter(what if state != "job end" else state, t)
        elif what == "step":
            if state != "training":
                self.enter("training", t)
            self.trained, self.last_step = True, t
        elif what == "injected":
            if state == "training":
                self.enter("detection", t)
        elif not self.trained:  # before the first step: the first start of the job
            if what == "rdzv_start" and state == "job start":
                self.enter("rendezvous", t)
            elif what == "rdzv_complete" and state in ("job start", "rendezvous"):
                self.enter("worker start", t)
        elif state == "training":  # a reaction while no fault was seen: since the last
            self.enter("detection", self.last_step)  # step the job was waiting
            self.enter("restart", t)
        elif state == "detection":
            self.enter("restart", t)


def _job_split(tl: Timeline, job_end: float) -> dict[str, float]:
    """Seconds per job phase, from the job's submission to ``job_end``."""
    split = _Split()
    for t, what in _job_marks(tl):
        if t > job_end:
            break
        split.mark(t, what)
    split.enter("", job_end)
    return {k: round(v, 3) for k, v in split.seconds.items()}


def item_split(tl: Timeline) -> dict[str, Any] | None:
    """One recorded item's wall time and its split into :data:`JOB_PHASES` and the
    harness's phases (seconds; their sum is the wall time, the rest in ``other``). None
    for an item recorded without phase events."""
    over = harness_overhead(tl)
    submitted = tl.first("platform", "job_submitted")
    if over is None or submitted is None:
        return None
    job_end = submitted.mono + over["job_s"]
    split = _job_split(tl, job_end)
    harness = over["phases_s"]
    for name in HARNESS_PHASES:
        split[name] = harness.get(name.replace(" ", "_"), 0.0)
    split["other"] = round(max(0.0, over["wall_s"] - sum(split.values())), 3)
    return {"wall_s": over["wall_s"], "job_s": over["job_s"], "phases_s": split}


def _item_dirs(run_dir: Path) -> list[tuple[str, Path]]:
    """(item id, its work dir) in the order they ran."""
    found = []
    for kind in ("baseline", "scenarios", "controls"):
        base = run_dir / kind
        dirs = [base] if kind == "baseline" else sorted(p for p in base.glob("*") if p.is_dir())
        for d in dirs:
            if (d / "events").is_dir():
                found.append((d.name if kind != "baseline" else "baseline", d))
    return found


def _verdicts(run_dir: Path) -> dict[str, str]:
    """Item id -> its verdict (a control: ``caught`` or ``not caught``), from the report."""
    report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
    out = {"baseline": str(report.get("baseline", {}).get("verdict"))}
    for item in report.get("scenarios") or []:
        if item.get("control"):
            out[str(item.get("id"))] = "caught" if item.get("caught") else "not caught"
        else:
            out[str(item.get("id"))] = str(item.get("verdict"))
    return out


def measure(extra: list[str]) -> dict[str, Any]:
    """Run ``faultdrill demo`` (with ``extra`` arguments) in a fresh process; its wall
    time, the split per item and the sum per phase."""
    with tempfile.TemporaryDirectory(prefix="faultdrill-demo-time-") as tmp:
        run_dir = Path(tmp) / "demo"
        argv = [sys.executable, "-m", "faultdrill.cli", "demo", "--out", str(run_dir)]
        argv += ["--quiet", *extra]
        load, started = os.getloadavg()[0], time.strftime("%Y-%m-%dT%H:%M:%S%z")
        t, cli_start = time.monotonic(), time.time()
        proc = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ))
        wall_s = time.monotonic() - t
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"faultdrill demo failed: {proc.stderr.strip()[-3000:]}")
        items: dict[str, Any] = {}
        first_start = None
        order: dict[str, float] = {}
        verdicts = _verdicts(run_dir)
        for item, work in _item_dirs(run_dir):
            tl = Timeline.load(work / "events")
            split = item_split(tl)
            if split is None:
                raise RuntimeError(f"{item}: no phase events were recorded")
            start = tl.first("harness", "item_start")
            assert start is not None  # item_split needs it
            first_start = start.ts if first_start is None else min(first_start, start.ts)
            order[item] = start.ts
            items[item] = {"verdict": verdicts.get(item, "?"), **split}
        said = [ln for ln in proc.stdout.splitlines() if "controls caught" in ln]
    startup_s = (first_start - cli_start) if first_start is not None else 0.0
    in_order = {k: items[k] for k in sorted(items, key=lambda k: order[k])}
    out = {"started": started, **_summary(wall_s, startup_s, in_order, said, extra)}
    out["load_average_at_start"], out["load_average_at_end"] = load, os.getloadavg()[0]
    return out


def _summary(
    wall_s: float, startup_s: float, items: dict[str, Any], said: list[str], extra: list[str]
) -> dict[str, Any]:
    names = [*JOB_PHASES, *HARNESS_PHASES, "other"]
    per_phase = {n: round(sum(v["phases_s"][n] for v in items.values()), 2) for n in names}
    in_items = sum(v["wall_s"] for v in items.values())
    return {
        "command": " ".join(["faultdrill demo", *extra]),
        "wall_s": round(wall_s, 1),
        "items_s": round(in_items, 1),
        "startup_s": round(startup_s, 1),
        "finish_s": round(max(0.0, wall_s - in_items - startup_s), 1),
        "per_phase_s": per_phase,
        "items": items,
        # the demo's own summary line: scenarios passed, controls caught, overall
        "summary": said[-1].strip() if said else None,
        "target_s": TARGET_S,
        "meets_target": wall_s <= TARGET_S
        and all(v["verdict"] in ("pass", "caught") for v in items.values()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--only", help="item ids, comma-separated (faultdrill demo --only)")
    ap.add_argument("--no-controls", action="store_true", help="faultdrill demo --no-controls")
    args = ap.parse_args(argv)
    extra = [f"--only={args.only}"] if args.only else []
    extra += ["--no-controls"] if args.no_controls else []
    json.dump(measure(extra), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
