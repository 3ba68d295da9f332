"""The network track in the report: a compact per-node table of round trips, lost probes
and traffic before, during and after the fault window, and the injected rules' counters.

:func:`network_summary` reads the ``net`` events that the network track
(:mod:`faultdrill.host.netsampler`) recorded, for an item's ``network`` section
of report.json (:class:`~faultdrill.report.model.NetworkTrack`);
:func:`faultdrill.report.parts.accounting.network_part` says it in the reports.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from faultdrill.records import NetNode, NetRule, NetworkTrack, plain

if TYPE_CHECKING:
    from faultdrill.events import Event
    from faultdrill.timeline import Timeline

__all__ = ["network_summary"]


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


#: The fields of a ``rule_counters`` event that the report keeps, in this order.
_RULE_FIELDS = ("rule", "node", "fault", "rule_kind", "chain", "dev", "packets", "bytes", "dropped")

_PHASES = ("before", "during", "after")


def network_summary(tl: Timeline) -> NetworkTrack | None:
    """Per node: round trips before/during/after the fault window, probes lost during it,
    bytes/packets/drops on its interface during it; and every rule's final counters.
    None when the run has no network track."""
    samples = tl.of("net", "net_sample")
    if not samples:
        return None
    start, end, to = _fault_window(tl)
    nodes = sorted({str(e.get("node")) for e in samples})
    out_nodes = [
        _node_row(node, [e for e in samples if e.get("node") == node], start, end) for node in nodes
    ]
    hz = tl.first("net", "net_track_started")
    return NetworkTrack.model_validate(
        {
            "window": {
                "from": "fault injected" if start is not None else None,
                "to": to,
                "seconds": round(end - start, 3) if start is not None and end is not None else None,
            },
            "hz": plain(hz.get("hz")) if hz else None,
            "probe": plain(hz.get("probe")) if hz else None,
            "nodes": out_nodes,
            "rules": _rule_counters(tl),
            "samples": len(samples),
            "gaps": len(tl.of("net", "net_track_gap")),
        }
    )


def _fault_window(tl: Timeline) -> tuple[float | None, float | None, str]:
    """(start, end, what ended it) of the first fault's window; start None: no fault was
    injected; end None: the window lasted to the end of observation."""
    inj = tl.of("fault", "injected")
    if not inj:
        return None, None, "end of observation"
    start = inj[0].mono
    # A fault with a duration: until it was reverted. A one-shot fault: until the job
    # made its first step again (the recovery window).
    reverted = tl.first("fault", "reverted", after=start)
    new = tl.incarnation_after(start)
    if inj[0].get("duration_s") is not None and reverted is not None:
        # the undo began before the event was written; probes after that may pass
        return start, float(reverted.get("revert_started_mono", reverted.mono)), "fault reverted"
    if new is not None and new.first_step_mono is not None:
        return start, new.first_step_mono, "first step after the restart"
    return start, None, "end of observation"


def _phase(e: Event, start: float | None, end: float | None) -> str:
    """Whether sample ``e`` measured before, during or after the window ``[start, end]``,
    by when it probed rather than when it was written."""
    measured = float(e.get("probed_mono", e.mono))
    if start is None or measured < start:
        return "before"
    if end is None or measured <= end:
        return "during"
    return "after"


def _node_row(node: str, mine: list[Event], start: float | None, end: float | None) -> NetNode:
    """One node's row: median round trip and lost/sent probes per phase, and (with a fault)
    the bytes/packets/drops its interface counted between the last sample before the
    window and the last one in it."""
    rtts: dict[str, list[float]] = {ph: [] for ph in _PHASES}
    lost = dict.fromkeys(_PHASES, 0)
    probes = dict.fromkeys(_PHASES, 0)
    for e in mine:
        ph = _phase(e, start, end)
        for v in (e.get("rtt_ms") or {}).values():
            probes[ph] += 1
            if v is None:
                lost[ph] += 1
            else:
                rtts[ph].append(float(v))
    row: dict[str, Any] = {"node": node}
    for ph in _PHASES:
        row[f"rtt_{ph}_ms"] = _median(rtts[ph])
        row[f"lost_{ph}"] = f"{lost[ph]}/{probes[ph]}"
    if start is not None:
        before = [e for e in mine if _phase(e, start, end) == "before"]
        during = [e for e in mine if _phase(e, start, end) == "during"]
        if before and during:
            a, b = before[-1], during[-1]
            for key in ("bytes", "packets", "drop"):
                row[f"{key}_during"] = sum(
                    int(b.get(f"{d}_{key}", 0) or 0) - int(a.get(f"{d}_{key}", 0) or 0)
                    for d in ("rx", "tx")
                )
    return NetNode.model_validate(plain(row))


def _rule_counters(tl: Timeline) -> list[NetRule]:
    """Each injected rule's last recorded counters (fields that are None left out)."""
    rules: dict[str, dict[str, Any]] = {}
    for e in tl.of("net", "rule_counters"):
        rules[str(e.get("rule"))] = {k: e.get(k) for k in _RULE_FIELDS if e.get(k) is not None}
    return [NetRule.model_validate(plain(r)) for r in rules.values()]
