"""Probe cost: what ``Probe.step`` adds to every training step of every rank.

Two measurements, taken in the same run so that their ratio holds on any machine:

* :func:`probe_step_cost`: ``Probe.step(step, loss, ids)`` with 64 sample ids, writing
  to a real events file in a temporary directory, timed over many calls. Three shapes of
  ``ids``: a ``range`` (what the reference workload passes), a list of 64 consecutive ids,
  and a list of 64 non-consecutive ids (the worst case: nothing folds, 64 ranges are
  written). Plus the disabled probe (no events directory) as the floor.
* :func:`reference_step_time`: the step period of the real reference workload
  (``faultdrill.workloads.lm``, world size 1 without torchrun), run in a subprocess with
  the probe on, read back from its own ``step`` events (their ``mono`` stamps).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faultdrill.probe import Probe

__all__ = ["IDS", "probe_step_cost", "reference_step_time"]

IDS = 64  # sample ids per step and rank, as the target in issue 2 says

#: shape -> the ids of one call (``lo``: the first id of this call)
SHAPES: dict[str, Callable[[int], Any]] = {
    "range(64)": lambda lo: range(lo, lo + IDS),
    "list of 64 consecutive ids": lambda lo: list(range(lo, lo + IDS)),
    "list of 64 non-consecutive ids": lambda lo: list(range(lo, lo + 2 * IDS, 2)),
}


def _time_calls(
    probe: Probe, make_ids: Callable[[int], Any], iterations: int
) -> tuple[float, float]:
    """(wall, CPU) seconds per ``probe.step`` call; the ids are built before the clocks
    start. The CPU time is what the calls cost the training process whatever else runs on
    the machine; the wall time also holds the waits for a CPU on a busy one."""
    args = [(i, 2.0 + 1e-3 * i, make_ids(i * 2 * IDS)) for i in range(iterations)]
    step = probe.step
    c, t = time.process_time(), time.perf_counter()
    for i, loss, ids in args:
        step(i, loss, ids)
    return (time.perf_counter() - t) / iterations, (time.process_time() - c) / iterations


def probe_step_cost(iterations: int = 20_000, repeats: int = 5) -> dict[str, Any]:
    """Microseconds per ``Probe.step`` call for each shape of ids (median and best of
    ``repeats`` rounds of ``iterations`` calls), the bytes one event line takes, and the
    disabled probe's cost."""
    out: dict[str, Any] = {"iterations": iterations, "repeats": repeats, "shapes": {}}
    with tempfile.TemporaryDirectory(prefix="faultdrill-bench-") as tmp:
        for shape, make_ids in SHAPES.items():
            events = Path(tmp) / shape.replace(" ", "_")
            probe = Probe(events, rank=0, task_id="bench-probe")
            _time_calls(probe, make_ids, min(iterations, 1000))  # warm up
            rounds = [_time_calls(probe, make_ids, iterations) for _ in range(repeats)]
            probe.close()
            path = events / "probe-rank0.jsonl"
            with open(path, "rb") as f:
                last = f.readlines()[-1]
            wall = [w for w, _c in rounds]
            out["shapes"][shape] = {
                "median_us": round(statistics.median(wall) * 1e6, 2),
                "best_us": round(min(wall) * 1e6, 2),
                "median_cpu_us": round(statistics.median(c for _w, c in rounds) * 1e6, 2),
                "line_bytes": len(last),
            }
        off = Probe(None, rank=0)
        rounds = [_time_calls(off, SHAPES["range(64)"], iterations) for _ in range(repeats)]
        out["disabled_us"] = round(statistics.median(w for w, _c in rounds) * 1e6, 3)
    return out


def reference_step_time(
    steps: int = 300, global_batch: int = 8, warmup: int = 20
) -> dict[str, Any]:
    """The reference workload's step period at world size 1, from its own step events.

    Runs ``python -m faultdrill.workloads.lm`` (no torchrun; ``RANK`` unset) with the
    default model and ``global_batch`` samples per step, no artificial sleep, and no
    checkpoint before the last step. The period is the median gap between consecutive
    ``step`` events after ``warmup`` steps: forward, backward, optimizer step, data and
    the probe's own write, as a training loop really pays them."""
    if steps <= warmup + 2:
        raise ValueError(f"steps must exceed warmup + 2 ({warmup + 2})")
    with tempfile.TemporaryDirectory(prefix="faultdrill-bench-lm-") as tmp:
        cfg = {
            "ckpt_dir": os.path.join(tmp, "ckpt"),
            "steps": steps,
            "global_batch": global_batch,
            "ckpt_every": steps,
        }
        cfg_path = Path(tmp) / "workload.json"
        cfg_path.write_text(json.dumps(cfg))
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        env.update(
            FAULTDRILL_EVENTS_DIR=os.path.join(tmp, "events"),
            FAULTDRILL_TASK_ID="bench-lm",
            OMP_NUM_THREADS="1",
        )
        t = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "faultdrill.workloads.lm", f"--workload-config={cfg_path}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise RuntimeError(
                f"reference workload exited {proc.returncode}: {proc.stderr.strip()[-2000:]}"
            )
        monos = []
        with open(Path(tmp) / "events" / "probe-rank0.jsonl", encoding="utf-8") as f:
            for line in f:
                ev = json.loads(line)
                if ev.get("kind") == "step":
                    monos.append(float(ev["mono"]))
    gaps = [b - a for a, b in zip(monos[warmup:], monos[warmup + 1 :], strict=False)]
    return {
        "workload": "faultdrill.workloads.lm (defaults, world size 1)",
        "global_batch": global_batch,
        "steps": steps,
        "measured_steps": len(gaps),
        "median_step_us": round(statistics.median(gaps) * 1e6, 1),
        "p10_step_us": round(sorted(gaps)[len(gaps) // 10] * 1e6, 1),
        "process_wall_s": round(wall, 2),
    }
