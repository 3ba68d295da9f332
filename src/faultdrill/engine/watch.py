"""Watching a job: its progress from the probe files (and the events read from its log
lines), its trigger, its stop conditions.

:class:`Watch` tails the ranks' probe files as they grow and keeps what the engine decides
on: the highest step, checkpoint saves, the time of the first and the last step, and the
first non-finite loss. :meth:`Watch.triggered` says when a scenario's fault is due;
:func:`stop_reason` says which stop condition, if any, ends the item now.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultdrill.plan import StopConditions, Trigger

__all__ = ["Watch", "stop_reason"]


@dataclass
class Watch:
    """What the engine knows of the job's progress, from tailing the probe files."""

    events_dir: Path
    offsets: dict[Path, int] = field(default_factory=dict)
    max_step: int = 0
    saves: int = 0
    first_step_mono: float | None = None
    last_progress_mono: float | None = None
    nonfinite: str | None = None
    ranks_seen: set[int] = field(default_factory=set)

    def poll(self) -> None:
        # joblog-*: probe events the harness read from a job's log lines (faultdrill.joblogs)
        paths = [
            *self.events_dir.glob("probe-rank*.jsonl"),
            *self.events_dir.glob("joblog-*.jsonl"),
        ]
        for path in paths:
            off = self.offsets.get(path, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(off)
                    chunk = f.read()
            except OSError:
                continue
            end = chunk.rfind(b"\n")
            if end < 0:
                continue
            self.offsets[path] = off + end + 1
            for raw in chunk[: end + 1].splitlines():
                try:
                    ev = json.loads(raw)
                except ValueError:
                    continue
                self._see(ev)

    def _see(self, ev: dict[str, Any]) -> None:
        kind = ev.get("kind")
        if kind == "step":
            step = int(ev.get("step", 0))
            now = float(ev.get("mono", time.monotonic()))
            if self.first_step_mono is None:
                self.first_step_mono = now
            if step > self.max_step:
                self.max_step = step
            self.last_progress_mono = max(self.last_progress_mono or now, now)
            loss = ev.get("loss")
            if isinstance(loss, float) and not math.isfinite(loss) and self.nonfinite is None:
                self.nonfinite = f"rank {ev.get('rank')} step {step} loss {loss}"
        elif kind == "ckpt_save":
            self.saves += 1
        elif kind == "run_start":
            self.ranks_seen.add(int(ev.get("rank", 0)))

    def triggered(self, trig: Trigger, now: float) -> bool:
        if trig.at_step is not None:
            return self.max_step >= trig.at_step
        if trig.after_checkpoint is not None:
            return self.saves >= trig.after_checkpoint
        assert trig.after_s is not None
        return self.first_step_mono is not None and now - self.first_step_mono >= trig.after_s


def stop_reason(
    watch: Watch, stop: StopConditions, started: float, now: float
) -> tuple[str, str] | None:
    if now - started > stop.max_wall_s:
        return "max_wall_s", f"scenario ran {now - started:.0f} s > {stop.max_wall_s:g} s"
    since = watch.last_progress_mono or started
    if now - since > stop.max_no_progress_s:
        return (
            "max_no_progress_s",
            f"no new step for {now - since:.0f} s > {stop.max_no_progress_s:g} s "
            f"(last step {watch.max_step})",
        )
    if stop.stop_on_nonfinite_loss and watch.nonfinite:
        return "nonfinite_loss", watch.nonfinite
    return None
