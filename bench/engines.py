"""Which columnar engine answers the per-rank questions of a fleet-sized drill out of core.

A drill of ``ranks`` ranks, each stepping ``steps`` times (one rank a straggler, 1.5x
slower; every rank killed at mid-run and resumed from the checkpoint before, so the steps
since it are recomputed by a second process), is written once in two layouts:

* ``columns/``: the step store's raw little-endian columns (``mono.f8 rank.i4 pid.i4
  step.i8 loss.f8``), one directory per block of ranks, each rank's rows in time order
  (the order its probe file has them);
* ``parquet/``: the same rows as Parquet files, one per block of ranks (zstd).

Each engine then answers, in a fresh process (so its peak RSS is its own), the questions
the report asks per rank: per process (pid), the median and maximum step time (gap
between consecutive steps), the steps that did not advance by one (a jump or a repeat),
its first and last step; then the stragglers (median step time above 1.25x the median of
the medians). Every engine must give the same answer (compared as a digest); a different
one aborts the benchmark, and so does an answer other than the one built in (rank 3 the
only straggler, exactly one step skipped: rank 5's second process jumps once).

Engines:

* ``numpy-in-memory``: every column loaded, sorted by (pid, mono): what the judge does
  today (its memory grows with ranks x steps);
* ``numpy-blocks``: one block of ranks at a time, memory-mapped, no sort (each block's rows
  are already in time order per rank): memory bounded by the block;
* ``duckdb``: SQL over the Parquet files (window ``lag`` per pid), ``memory_limit`` set;
* ``polars``: a lazy query over the Parquet files, collected with the streaming engine.

Run: ``python -m bench.engines --ranks 1024 --steps 1000 --dir /tmp/x`` (writes the data
and prints one JSON object), or ``--engine NAME`` to run one engine on written data.
"""

from __future__ import annotations

import argparse
import hashlib
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

import numpy as np

__all__ = ["CHOSEN", "ENGINES", "compare", "write"]

ENGINES = ("numpy-in-memory", "numpy-blocks", "duckdb", "polars")
#: The engine the comparison chose (see bench/README.md, "(e)"): the step store's columns
#: partitioned by rank already hold each process's rows in time order, so answering per
#: rank needs no sort and no more memory than one block of ranks.
CHOSEN = "numpy-blocks"
DT = 0.1  # seconds per step of a healthy rank
STRAGGLER = 3  # this rank steps 1.5x slower
JUMPER = 5  # this rank's second process skips one step: exactly one bad advance
STRAGGLER_FACTOR = 1.25  # a rank is a straggler above this many times the median
PID0, PID1 = 100_000, 1_000_000  # pid of rank r in the first and the second process
COLUMNS = (("mono", "<f8"), ("rank", "<i4"), ("pid", "<i4"), ("step", "<i8"), ("loss", "<f8"))


def _rank_rows(rank: int, steps: int) -> dict[str, np.ndarray]:
    """One rank's step rows, in time order: steps 1..kill, then resume+1..steps."""
    kill, resume = steps // 2 + max(1, steps // 200), steps // 2
    dt = DT * (1.5 if rank == STRAGGLER else 1.0)
    first = np.arange(1, kill + 1, dtype=np.int64)
    second = np.arange(resume + 1, steps + 1, dtype=np.int64)
    if rank == JUMPER:
        second = np.delete(second, second.size // 2)
    step = np.concatenate([first, second])
    mono = np.concatenate([first * dt, (kill + 30) * dt + (second - resume) * dt])
    mono += rank * 1e-5  # ranks finish a step at slightly different times
    pid = np.concatenate(
        [np.full(first.size, PID0 + rank, np.int32), np.full(second.size, PID1 + rank, np.int32)]
    )
    return {
        "mono": mono,
        "rank": np.full(step.size, rank, np.int32),
        "pid": pid,
        "step": step,
        "loss": 3.0 - 1e-4 * step,
    }


def write(root: Path, ranks: int, steps: int, block: int) -> dict[str, Any]:
    """Both layouts under ``root``; rows written and seconds taken."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t0, rows = time.perf_counter(), 0
    (root / "parquet").mkdir(parents=True)
    for b, lo in enumerate(range(0, ranks, block)):
        parts = [_rank_rows(r, steps) for r in range(lo, min(ranks, lo + block))]
        cols = {name: np.concatenate([p[name] for p in parts]) for name, _ in COLUMNS}
        rows += cols["step"].size
        d = root / "columns" / f"{b:05d}"
        d.mkdir(parents=True)
        for name, dtype in COLUMNS:
            cols[name].astype(dtype).tofile(d / f"{name}.{dtype[1:]}")
        pq.write_table(pa.table(cols), root / "parquet" / f"{b:05d}.parquet", compression="zstd")
    return {"rows": rows, "write_s": round(time.perf_counter() - t0, 2)}


# --- the per-rank answer, computed the same way by every engine --------------------------


def _answer(
    pid: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
    med: np.ndarray,
    mx: np.ndarray,
    bad: np.ndarray,
    rank: np.ndarray,
) -> dict[str, Any]:
    """Per pid (sorted): first/last step, median/max step time (ms), bad advances; the
    stragglers by rank. Rounded so that engines agree to the millisecond."""
    order = np.argsort(pid, kind="stable")
    pid, first, last, med, mx, bad, rank = (
        a[order] for a in (pid, first, last, med, mx, bad, rank)
    )
    med_ms, max_ms = np.round(med * 1e3, 3), np.round(mx * 1e3, 3)
    cut = STRAGGLER_FACTOR * float(np.median(med_ms))
    stragglers = sorted({int(r) for r, m in zip(rank, med_ms, strict=True) if m > cut})
    h = hashlib.sha256()
    for a in (pid, first, last, med_ms, max_ms, bad):
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    return {
        "processes": int(pid.size),
        "stragglers": stragglers,
        "bad_advances": int(bad.sum()),
        "digest": h.hexdigest()[:16],
    }


def _per_pid(
    mono: np.ndarray, pid: np.ndarray, step: np.ndarray, rank: np.ndarray
) -> tuple[np.ndarray, ...]:
    """The per-pid figures of rows already grouped by pid and in time order within one."""
    starts = np.flatnonzero(np.r_[True, pid[1:] != pid[:-1]])
    ends = np.r_[starts[1:], pid.size]
    gap, adv = np.diff(mono), np.diff(step)
    same = pid[1:] == pid[:-1]
    med = np.empty(starts.size)
    mx = np.empty(starts.size)
    bad = np.empty(starts.size, dtype=np.int64)
    for i, (a, b) in enumerate(zip(starts, ends, strict=True)):
        g = gap[a : b - 1]
        med[i] = np.median(g) if g.size else np.nan
        mx[i] = g.max() if g.size else np.nan
        bad[i] = int(np.count_nonzero(adv[a : b - 1] != 1))
    del same
    return pid[starts], step[starts], step[ends - 1], med, mx, bad, rank[starts]


def _numpy_in_memory(root: Path) -> dict[str, Any]:
    blocks = sorted((root / "columns").iterdir())
    cols = {
        name: np.concatenate([np.fromfile(d / f"{name}.{dt[1:]}", dtype=dt) for d in blocks])
        for name, dt in COLUMNS
    }
    order = np.lexsort((cols["mono"], cols["pid"]))
    mono, pid, step, rank = (cols[n][order] for n in ("mono", "pid", "step", "rank"))
    del order, cols
    return _answer(*_per_pid(mono, pid, step, rank))


def _numpy_blocks(root: Path) -> dict[str, Any]:
    parts: list[tuple[np.ndarray, ...]] = []
    for d in sorted((root / "columns").iterdir()):
        m = {n: np.memmap(d / f"{n}.{dt[1:]}", dtype=dt, mode="r") for n, dt in COLUMNS}
        # within a block: grouped by rank, each rank's rows in time order; a rank's two
        # processes follow each other, so grouping by pid needs only a stable pass
        order = np.argsort(m["pid"], kind="stable")
        parts.append(_per_pid(*(np.asarray(m[n])[order] for n in ("mono", "pid", "step", "rank"))))
        del m, order
    return _answer(*(np.concatenate(p) for p in zip(*parts, strict=True)))


_SQL = """
WITH g AS (
  SELECT pid, rank, step,
         mono - lag(mono) OVER w AS gap,
         step - lag(step) OVER w AS adv
  FROM read_parquet('{glob}')
  WINDOW w AS (PARTITION BY pid ORDER BY mono)
)
SELECT pid, min(rank) AS rank, min(step) AS first, max(step) AS last,
       quantile_cont(gap, 0.5) AS med, max(gap) AS mx,
       count(*) FILTER (WHERE adv IS NOT NULL AND adv <> 1) AS bad
FROM g GROUP BY pid
"""


def _duckdb(root: Path) -> dict[str, Any]:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads TO 2")
    con.execute("SET memory_limit = '6GB'")
    con.execute(f"SET temp_directory = '{root / 'duckdb-tmp'}'")
    t = con.execute(_SQL.format(glob=root / "parquet" / "*.parquet")).fetchnumpy()
    return _answer(t["pid"], t["first"], t["last"], t["med"], t["mx"], t["bad"], t["rank"])


def _polars(root: Path) -> dict[str, Any]:
    import polars as pl

    q = (
        pl.scan_parquet(root / "parquet" / "*.parquet")
        .sort(["pid", "mono"])
        .with_columns(gap=pl.col("mono").diff().over("pid"), adv=pl.col("step").diff().over("pid"))
        .group_by("pid")
        .agg(
            rank=pl.col("rank").min(),
            first=pl.col("step").min(),
            last=pl.col("step").max(),
            med=pl.col("gap").median(),
            mx=pl.col("gap").max(),
            bad=((pl.col("adv") != 1) & pl.col("adv").is_not_null()).sum(),
        )
    )
    t = q.collect(engine="streaming")
    return _answer(*(t[c].to_numpy() for c in ("pid", "first", "last", "med", "mx", "bad", "rank")))


_RUN = {
    "numpy-in-memory": _numpy_in_memory,
    "numpy-blocks": _numpy_blocks,
    "duckdb": _duckdb,
    "polars": _polars,
}


def _one(root: Path, engine: str) -> dict[str, Any]:
    t0, c0 = time.perf_counter(), time.process_time()
    answer = _RUN[engine](root)
    return {
        "engine": engine,
        "wall_s": round(time.perf_counter() - t0, 2),
        "cpu_s": round(time.process_time() - c0, 2),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        **answer,
    }


def compare(
    ranks: int,
    steps: int,
    *,
    block: int = 256,
    engines: tuple[str, ...] = ENGINES,
    keep: Path | None = None,
) -> dict[str, Any]:
    """Write the drill, run every engine in a fresh process, check they agree."""
    root = Path(tempfile.mkdtemp(prefix="faultdrill-bench-engines-", dir=keep))
    try:
        written = write(root / "data", ranks, steps, block)
        runs = []
        for engine in engines:
            env = dict(os.environ)
            root_dir = str(Path(__file__).resolve().parents[1])  # so that bench imports
            env["PYTHONPATH"] = os.pathsep.join(p for p in (root_dir, env.get("PYTHONPATH")) if p)
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.engines",
                    "--engine",
                    engine,
                    "--data",
                    str(root / "data"),
                ],
                capture_output=True,
                text=True,
                env=env,
                timeout=3600,
            )
            if proc.returncode != 0:
                # an engine that cannot answer at this size within its limits is a result
                # of the comparison (e.g. DuckDB's window out of memory), not a crash
                why = [ln for ln in proc.stderr.strip().splitlines() if "Error" in ln]
                runs.append({"engine": engine, "error": (why or ["exit status"])[-1][:300]})
                continue
            runs.append(json.loads(proc.stdout))
        answered = [r for r in runs if "error" not in r]
        if not answered:
            raise RuntimeError(f"no engine answered: {runs}")
        answers = {(r["digest"], tuple(r["stragglers"]), r["bad_advances"]) for r in answered}
        if len(answers) != 1:
            raise RuntimeError(f"the engines disagree: {runs}")
        want = {"stragglers": [STRAGGLER], "processes": 2 * ranks, "bad_advances": 1}
        if any(answered[0][k] != v for k, v in want.items()):
            raise RuntimeError(f"wrong answer (expected {want}): {answered[0]}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"ranks": ranks, "steps": steps, **written, "engines": runs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--engine", choices=ENGINES)
    ap.add_argument("--engines", default=",".join(ENGINES), help="comma-separated")
    ap.add_argument("--data", type=Path)
    args = ap.parse_args(argv)
    if args.engine:
        print(json.dumps(_one(args.data, args.engine)))
    else:
        engines = tuple(e for e in args.engines.split(",") if e)
        unknown = sorted(set(engines) - set(ENGINES))
        if unknown:
            ap.error(f"--engines: unknown {unknown}; known: {', '.join(ENGINES)}")
        print(
            json.dumps(compare(args.ranks, args.steps, block=args.block, engines=engines), indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
