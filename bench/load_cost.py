"""Loading cost: :meth:`Timeline.load` on JSON-lines events written by the real probe, and
what the columnar step store costs to write (the harness, while the job runs) and saves.

``ranks`` probe files of ``steps`` step events each (64 sample ids per step, as a
``range``: one ``[start, end)`` pair per line, the probe's usual line), plus one
``run_start`` per rank, are written with :class:`faultdrill.probe.Probe`; then a fresh
process (this module's ``main``) loads them and reports the time, the table it built and
its own peak RSS. Writing is not timed.

The JSON lines are also loaded by one reader in a fresh process (``readers=1``: the
reader's rate per core, which the target judges; large loads otherwise start several
reader processes, whose start-up is CPU time too). The same steps are also written as
binary step records (``Probe(binary_steps=True)``: ``probe-rank<R>.steps``) and loaded and
stored the same way; and the JSON step lines are decoded one line at a time by the
decoders one might use (the standard library's ``json``, ``orjson``, ``msgspec`` into dicts
and into a typed ``Struct``, where installed), each into the same step columns, beside the
reader (which decodes runs of lines in one msgspec call: ``faultdrill.timeline.steplines``).
Rates are step events per second of CPU time of one process (one core): the target is
1,000,000, for JSON lines and binary records, loading and writing the store.

Run one size: ``python -m bench.load_cost --ranks 16 --steps 62500`` (1 M step events).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.targets import JSON_READER
from faultdrill.engine.watch import Watch
from faultdrill.probe import Probe
from faultdrill.timeline import Timeline
from faultdrill.timeline.reader import PARALLEL_BYTES
from faultdrill.timeline.store import StepStoreWriter

__all__ = ["load_cost", "write_events"]

IDS = 64


def write_events(events_dir: Path, ranks: int, steps: int, binary: bool = False) -> int:
    """Write the events with the real probe (``binary``: steps as binary records);
    returns the bytes written."""
    probes = [
        Probe(events_dir, rank=r, task_id="bench-load", binary_steps=binary) for r in range(ranks)
    ]
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
    return sum(f.stat().st_size for f in events_dir.iterdir() if f.is_file())


def _load(events_dir: Path) -> dict[str, Any]:
    """In this process: load the JSON lines and measure (run in a fresh process for a clean
    peak RSS); then put them into the columnar store as the harness does while a job runs
    (the engine's watch), and load again from the store."""
    from bench.checks_scale import peak_rss_bytes

    rss0 = peak_rss_bytes()
    st_bytes = sum(f.stat().st_size for f in events_dir.glob("*.jsonl"))
    t, c = time.perf_counter(), _cpu_s()
    tl = Timeline.load(events_dir, use_store=False)
    load_s, load_cpu_s = time.perf_counter() - t, _cpu_s() - c
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
        "load_cpu_s": round(load_cpu_s, 3),
        "table_bytes": table_bytes,
        "peak_rss_bytes": peak_rss_bytes(),
        # Events of PARALLEL_BYTES or more in all are read by several processes: the
        # largest of those, measured by the kernel once they were reaped (0 if none ran).
        "reader_peak_rss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
        "readers": 1 if st_bytes < PARALLEL_BYTES else min(4, len(os.sched_getaffinity(0))),
        "rss_after_imports_bytes": rss0,
    }
    del tl, st
    out.update(_store_cost(events_dir, out["step_events"]))
    return out


def _cpu_s() -> float:
    """CPU seconds of this process and of its reaped children (the reader processes a
    large load starts)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _store_cost(events_dir: Path, step_events: int) -> dict[str, float]:
    """Write the step store of ``events_dir`` as the engine's watch does while the job
    runs (one pass), then load from it: wall and CPU seconds."""
    t, c = time.perf_counter(), time.process_time()
    Watch(events_dir, StepStoreWriter(events_dir)).close()
    out = {
        "store_write_s": round(time.perf_counter() - t, 3),
        "store_write_cpu_s": round(time.process_time() - c, 3),
    }
    t = time.perf_counter()
    stored = Timeline.load(events_dir)
    out["store_load_s"] = round(time.perf_counter() - t, 3)
    if len(stored.steps) != step_events:
        raise AssertionError("the store lost step events")
    return out


def _load_one_reader(events_dir: Path) -> dict[str, Any]:
    """In this process (a fresh one): load the JSON lines with one reader (no child
    process: this process's CPU time, at a finer grain than :func:`_cpu_s`)."""
    t, c = time.perf_counter(), time.process_time()
    tl = Timeline.load(events_dir, use_store=False, readers=1)
    return {
        "load_s": round(time.perf_counter() - t, 3),
        "load_cpu_s": round(time.process_time() - c, 6),
        "step_events": len(tl.steps),
        "other_events": len(tl.events),
    }


def _load_binary(events_dir: Path) -> dict[str, Any]:
    """In this process: load binary step records (and the other events' JSON lines) in
    one reader, then write and load the store, as :func:`_load` does for JSON lines."""
    t, c = time.perf_counter(), time.process_time()
    tl = Timeline.load(events_dir, use_store=False, readers=1)
    out: dict[str, Any] = {
        "load_s": round(time.perf_counter() - t, 3),
        "load_cpu_s": round(time.process_time() - c, 3),
        "step_events": len(tl.steps),
        "other_events": len(tl.events),
    }
    del tl
    out.update(_store_cost(events_dir, out["step_events"]))
    return out


def _decoders() -> dict[str, Any]:
    """name -> a function from one step line to its dict-like values (or None where the
    decoder is not installed): each called once per line."""
    import json as stdlib_json

    out: dict[str, Any] = {"json (stdlib)": stdlib_json.loads}
    try:
        import orjson

        out["orjson"] = orjson.loads
    except ImportError:
        out["orjson"] = None
    try:
        import msgspec

        class StepLine(msgspec.Struct):
            rank: int
            pid: int
            mono: float
            step: int
            loss: float | None
            samples: list[tuple[int, int]]

        out["msgspec (dicts)"] = msgspec.json.Decoder().decode
        typed = msgspec.json.Decoder(StepLine).decode
        out["msgspec (Struct)"] = typed
    except ImportError:
        out["msgspec (dicts)"] = out["msgspec (Struct)"] = None
    return out


def _decode_rates(events_dir: Path, limit: int = 1_000_000) -> dict[str, float | None]:
    """Step events per CPU second of each decoder of :func:`_decoders` on the step lines of
    ``events_dir`` (at most ``limit``), into the same numpy columns as the reader's. A
    lower bound on what a reader built on each would cost: none of the reader's checks
    (types, torn lines, malformed records) is made."""
    lines = [
        line
        for path in sorted(events_dir.glob("probe-rank*.jsonl"))
        for line in path.read_bytes().splitlines()
        if b'"kind":"step"' in line
    ][:limit]
    rates: dict[str, float | None] = {}
    for name, decode in _decoders().items():
        if decode is None:
            rates[name] = None
            continue
        typed = not isinstance(decode(lines[0]), dict) if lines else False
        c = time.process_time()
        _columns_of(lines, decode, typed)
        cpu = time.process_time() - c
        rates[name] = round(len(lines) / cpu) if cpu > 0 else None
    return rates


def _columns_of(lines: list[bytes], decode: Any, typed: bool) -> list[Any]:
    """Step columns (mono, rank, pid, step, loss, range start, range end) of step lines,
    each decoded by ``decode`` into a dict, or (``typed``) a struct with those attributes."""
    import numpy as np

    cols: list[list[Any]] = [[], [], [], [], [], [], []]
    mono, rank, pid, step, loss, lo, hi = (c.append for c in cols)
    if not typed:
        for line in lines:
            ev = decode(line)
            mono(ev["mono"]), rank(ev["rank"]), pid(ev["pid"]), step(ev["step"])
            loss(ev["loss"])
            ((a, b),) = ev["samples"]
            lo(a), hi(b)
    else:
        for line in lines:
            ev = decode(line)
            mono(ev.mono), rank(ev.rank), pid(ev.pid), step(ev.step), loss(ev.loss)
            ((a, b),) = ev.samples
            lo(a), hi(b)
    types = (np.float64, np.int32, np.int32, np.int64, np.float64, np.int64, np.int64)
    return [np.asarray(c, dtype=t) for c, t in zip(cols, types, strict=True)]


def _in_fresh_process(mode: str, events: Path, env: dict[str, str]) -> dict[str, Any]:
    """``python -m bench.load_cost <mode> <events>``'s report."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.load_cost", mode, str(events)],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} failed: {proc.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


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
        out = _in_fresh_process("--load", events, env)
        out["one_reader"] = _in_fresh_process("--load-one", events, env)
        binary = Path(tmp) / "binary"
        t = time.perf_counter()
        binary_size = write_events(binary, ranks, steps, binary=True)
        binary_write_s = time.perf_counter() - t
        shutil.rmtree(events)  # the disk holds one copy at a time
        out["binary"] = _in_fresh_process("--load-binary", binary, env)
        out["binary"].update(file_bytes=binary_size, write_s=round(binary_write_s, 2))
    if out["one_reader"]["step_events"] != ranks * steps:
        raise AssertionError(f"one reader loaded {out['one_reader']['step_events']} step events")
    if out["binary"]["step_events"] != ranks * steps:
        raise AssertionError(f"loaded {out['binary']['step_events']} binary step events")
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
    out["rates"] = _rates(out)
    return out


def _rates(out: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Events per CPU second of one process, side by side: loading (JSON lines through
    the reader, each decoder, binary records) and writing the store (from JSON lines, from
    binary records)."""

    def rate(events: int, cpu_s: float) -> float | None:
        return round(events / cpu_s) if cpu_s > 0 else None

    n, b = out["step_events"] + out["other_events"], out["binary"]
    nb = b["step_events"] + b["other_events"]
    load: dict[str, float | None] = {
        JSON_READER: rate(n, out["one_reader"]["load_cpu_s"]),
        f"json lines: faultdrill's reader ({out['readers']} processes, start-up included)": (
            rate(n, out["load_cpu_s"])
        ),
    }
    if out["readers"] == 1:
        del load[next(k for k in load if k != JSON_READER)]
    load.update(out.pop("decode_rates"))
    load["binary records"] = rate(nb, b["load_cpu_s"])
    store = {
        "from JSON lines": rate(n, out["store_write_cpu_s"]),
        "from binary records": rate(nb, b["store_write_cpu_s"]),
    }
    return {"load": load, "store_write": store}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--load", type=Path, help="only load this events dir and report (JSON)")
    ap.add_argument("--load-one", type=Path, help="the same, with one reader: its CPU rate")
    ap.add_argument("--load-binary", type=Path, help="the same, for binary step records")
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--steps", type=int, default=62_500)
    args = ap.parse_args(argv)
    if args.load:
        result = _load(args.load)
        result["decode_rates"] = _decode_rates(args.load)
    elif args.load_one:
        result = _load_one_reader(args.load_one)
    elif args.load_binary:
        result = _load_binary(args.load_binary)
    else:
        result = load_cost(args.ranks, args.steps)
    json.dump(result, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
