"""The network track in the report: a compact per-node table of round trips, lost probes
and traffic before, during and after the fault window, and the injected rules' counters.

:func:`network_summary` reads the ``net`` events that the network track
(:mod:`faultdrill.platforms.local.netsampler`) recorded, for an item's ``network`` section
of report.json (:class:`~faultdrill.report.model.NetworkTrack`);
:func:`faultdrill.report.parts.accounting.network_part` says it in the reports.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from faultdrill.timeline import Timeline

__all__ = ["network_summary"]


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def network_summary(tl: Timeline) -> dict[str, Any] | None:
    """Per node: round trips before/during/after the fault window, probes lost during it,
    bytes/packets/drops on its interface during it; and every rule's final counters.
    None when the run has no network track."""
    samples = tl.of("net", "net_sample")
    if not samples:
        return None
    inj = tl.of("fault", "injected")
    start = inj[0].mono if inj else None
    end, to = None, "end of observation"
    if start is not None:
        # A fault with a duration: until it was reverted. A one-shot fault: until the job
        # made its first step again (the recovery window).
        reverted = tl.first("fault", "reverted", after=start)
        new = tl.incarnation_after(start)
        if inj[0].get("duration_s") is not None and reverted is not None:
            # the undo began before the event was written; probes after that may pass
            end = float(reverted.get("revert_started_mono", reverted.mono))
            to = "fault reverted"
        elif new is not None and new.first_step_mono is not None:
            end, to = new.first_step_mono, "first step after the restart"
    nodes = sorted({str(e.get("node")) for e in samples})
    out_nodes = []
    for node in nodes:
        mine = [e for e in samples if e.get("node") == node]

        def measured(e: Any) -> float:
            return float(e.get("probed_mono", e.mono))

        def phase(e: Any) -> str:
            if start is None or measured(e) < start:
                return "before"
            if end is None or measured(e) <= end:
                return "during"
            return "after"

        rtts: dict[str, list[float]] = {"before": [], "during": [], "after": []}
        lost = {"before": 0, "during": 0, "after": 0}
        probes = {"before": 0, "during": 0, "after": 0}
        for e in mine:
            ph = phase(e)
            for v in (e.get("rtt_ms") or {}).values():
                probes[ph] += 1
                if v is None:
                    lost[ph] += 1
                else:
                    rtts[ph].append(float(v))
        row: dict[str, Any] = {"node": node}
        for ph in ("before", "during", "after"):
            row[f"rtt_{ph}_ms"] = _median(rtts[ph])
            row[f"lost_{ph}"] = f"{lost[ph]}/{probes[ph]}"
        if start is not None:
            before = [e for e in mine if phase(e) == "before"]
            during = [e for e in mine if phase(e) == "during"]
            if before and during:
                a, b = before[-1], during[-1]
                for key in ("bytes", "packets", "drop"):
                    row[f"{key}_during"] = sum(
                        int(b.get(f"{d}_{key}", 0) or 0) - int(a.get(f"{d}_{key}", 0) or 0)
                        for d in ("rx", "tx")
                    )
        out_nodes.append(row)
    rules: dict[str, dict[str, Any]] = {}
    for e in tl.of("net", "rule_counters"):
        rules[str(e.get("rule"))] = {
            k: e.get(k)
            for k in (
                "rule",
                "node",
                "fault",
                "rule_kind",
                "chain",
                "dev",
                "packets",
                "bytes",
                "dropped",
            )
            if e.get(k) is not None
        }
    hz = tl.first("net", "net_track_started")
    return {
        "window": {
            "from": "fault injected" if start is not None else None,
            "to": to,
            "seconds": round(end - start, 3) if start is not None and end is not None else None,
        },
        "hz": hz.get("hz") if hz else None,
        "probe": hz.get("probe") if hz else None,
        "nodes": out_nodes,
        "rules": list(rules.values()),
        "samples": len(samples),
        "gaps": len(tl.of("net", "net_track_gap")),
    }
