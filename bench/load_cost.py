"""Loading cost: :meth:`Timeline.load` on JSON-lines events written by the real probe, and
what the columnar step store costs to write (the harness, while the job runs) and saves.

``ranks`` probe files of ``steps`` step events each (64 sample ids per step, as a
``range``: one ``[start, end)`` pair per line, the probe's usual line), plus one
``run_start`` per rank, are written with :class:`faultdrill.probe.Probe`; then a fresh
process (this module's ``main``) loads them and reports the time, the table it built and
its own peak RSS. Writing is not timed.

Run one size: ``python -m bench.load_cost --ranks 16 --steps 62500`` (1 M step events).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from faultdrill.engine.watch import Watch
from faultdrill.probe import Probe
from faultdrill.timeline import Timeline
from faultdrill.timeline.reader import PARALLEL_BYTES
from faultdrill.timeline.store import StepStoreWriter

__all__ = ["load_cost", "write_events"]

IDS = 64


def write_events(events_dir: Path, ranks: int, steps: int) -> int:
    """Write the events with the real probe; returns the bytes written."""
    probes = [Probe(events_dir, rank=r, task_id="bench-load") for r in range(ranks)]
    for p in probes:
        p.run_start(world_size=ranks, config_digest="cfg-1")
    stride = ranks * IDS
    for s in range(1, steps + 1):
        base = (s - 1) * stride
        for r, p in enumerate(probes):
            lo = base + r * IDS
            p.step(s, 2.0 + 1e-4 * s, range(lo, lo + IDS))
    for p in probes:
        p.close()
    return sum(f.stat().st_size for f in events_dir.glob("*.jsonl"))


def _load(events_dir: Path) -> dict[str, Any]:
    """In this process: load the JSON lines and measure (run in a fresh process for a clean
    peak RSS); then put them into the columnar store as the harness does while a job runs
    (the engine's watch), and load again from the store."""
    from bench.checks_scale import peak_rss_bytes

    rss0 = peak_rss_bytes()
    st_bytes = sum(f.stat().st_size for f in events_dir.glob("*.jsonl"))
    t = time.perf_counter()
    tl = Timeline.load(events_dir, use_store=False)
    load_s = time.perf_counter() - t
    st = tl.steps
    table_bytes = sum(
        getattr(st, c).nbytes
        for c in ("mono", "rank", "pid", "step", "loss", "rng_start", "rng_end", "inc")
    ) + (0 if st.one_range_each else st.rng_off.nbytes)
    out = {
        "step_events": len(st),
        "other_events": len(tl.events),
        "incarnations": len(tl.incarnations),
        "load_s": round(load_s, 3),
        "table_bytes": table_bytes,
        "peak_rss_bytes": peak_rss_bytes(),
        # Events of PARALLEL_BYTES or more in all are read by several processes: the
        # largest of those, measured by the kernel once they were reaped (0 if none ran).
        "reader_peak_rss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
        "readers": 1 if st_bytes < PARALLEL_BYTES else min(4, len(os.sched_getaffinity(0))),
        "rss_after_imports_bytes": rss0,
    }
    del tl, st
    t = time.perf_counter()
    Watch(events_dir, StepStoreWriter(events_dir)).close()  # one pass, as while the job runs
    out["store_write_s"] = round(time.perf_counter() - t, 3)
    t = time.perf_counter()
    stored = Timeline.load(events_dir)
    out["store_load_s"] = round(time.perf_counter() - t, 3)
    if len(stored.steps) != out["step_events"]:
        raise AssertionError("the store lost step events")
    return out


def load_cost(ranks: int, steps: int) -> dict[str, Any]:
    """Write ``ranks`` x ``steps`` step events, load them in a fresh process, report."""
    with tempfile.TemporaryDirectory(prefix="faultdrill-bench-load-") as tmp:
        events = Path(tmp) / "events"
        t = time.perf_counter()
        size = write_events(events, ranks, steps)
        write_s = time.perf_counter() - t
        root = str(Path(__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        proc = subprocess.run(
            [sys.executable, "-m", "bench.load_cost", "--load", str(events)],
            env=env,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"loading failed: {proc.stderr.strip()[-2000:]}")
        out: dict[str, Any] = json.loads(proc.stdout)
    if out["step_events"] != ranks * steps:
        raise AssertionError(f"loaded {out['step_events']} step events, wrote {ranks * steps}")
    n = out["step_events"] + out["other_events"]
    out.update(
        ranks=ranks,
        steps=steps,
        file_bytes=size,
        write_s=round(write_s, 2),
        s_per_million_events=round(out["load_s"] / n * 1e6, 2),
        store_write_s_per_million_events=round(out["store_write_s"] / n * 1e6, 2),
        store_load_s_per_million_events=round(out["store_load_s"] / n * 1e6, 3),
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--load", type=Path, help="only load this events dir and report (JSON)")
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--steps", type=int, default=62_500)
    args = ap.parse_args(argv)
    result = _load(args.load) if args.load else load_cost(args.ranks, args.steps)
    json.dump(result, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
