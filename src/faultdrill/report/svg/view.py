"""One recorded item's timeline, loaded once for every picture of it, on a clock of
seconds since the injection."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultdrill import rundir
from faultdrill.timeline import Timeline

__all__ = ["ItemView", "item_events_dir", "load_item", "proc_rows"]


def item_events_dir(run_dir: Path, item_id: str, control: bool | None) -> Path:
    """Where an item's events live: ``baseline``, ``scenarios/ID`` or ``controls/ID``."""
    kind = "baseline" if control is None else "control" if control else "scenario"
    return rundir.events_dir(rundir.item_dir(run_dir, kind, item_id))


@dataclass
class ItemView:
    """One item's timeline, loaded once for every picture of it."""

    tl: Timeline
    origin: float  # mono of the injection (or of the first event)
    injected: bool
    t_min: float
    t_max: float
    windows: list[tuple[float, float, str]] = field(default_factory=list)

    def rel(self, mono: float) -> float:
        return mono - self.origin


def load_item(events_dir: Path) -> ItemView | None:
    """The item's timeline, or None when its event files are not there."""
    if not events_dir.is_dir() or not any(events_dir.glob("*.jsonl")):
        return None
    tl = Timeline.load(events_dir)
    monos = [e.mono for e in tl.events]
    if len(tl.steps):
        monos += [float(tl.steps.mono.min()), float(tl.steps.mono.max())]
    if not monos:
        return None
    inj = tl.of("fault", "injected")
    origin = inj[0].mono if inj else min(monos)
    view = ItemView(tl, origin, bool(inj), min(monos) - origin, max(monos) - origin)
    # injection windows: inject_start (or injected) .. reverted (one-shot faults: a sliver)
    starts = tl.of("fault", "inject_start") or inj
    ends = tl.of("fault", "reverted") + tl.of("fault", "revert_failed")
    for i, st in enumerate(starts):
        label = f"{st.get('fault', '?')} {st.get('target', '')}".strip()
        done = inj[i] if i < len(inj) else None
        if done is not None and done.get("duration_s") is None:
            end = done.mono  # one-shot (a signal): the window is the act itself
        else:
            end = next((e.mono for e in ends if e.mono >= st.mono), max(monos))
        view.windows.append((view.rel(st.mono), view.rel(end), label))
    return view


def proc_rows(view: ItemView) -> list[dict[str, Any]]:
    """The sampler's process lives, relative to the injection, for the resource table."""
    out = []
    for p in view.tl.procs:
        out.append(
            {
                "pid": p.pid,
                "role": p.role,
                "rank": p.rank,
                "node": p.node,
                "incarnation": view.tl.inc_of_pid(p.pid),
                "seen_s": round(view.rel(p.seen_mono), 2),
                "gone_s": None if p.gone_mono is None else round(view.rel(p.gone_mono), 2),
            }
        )
    return out
