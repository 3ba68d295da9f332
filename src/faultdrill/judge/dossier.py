"""What the dossiers can take from a timeline: the scheduling result and the data the job saw.

* :func:`scheduling_result`: which node got which rank, per incarnation (from the replicas'
  own ``run_start`` announcements), for the resource dossier and every item.
* :func:`access_identities`: the identity (uid, user) each replica ran as: the identity it
  read its data and checkpoints with, for the data dossier.
* :func:`reported_data_digests`: the data snapshot digests the job reported (``data_digest``
  in ``run_start``), for the data dossier's change record.

Pure: timeline in, data out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from faultdrill.readings.analysis import injections
from faultdrill.records import AccessIdentity, IncarnationPlacement, plain

if TYPE_CHECKING:
    from faultdrill.timeline import Timeline

__all__ = ["access_identities", "reported_data_digests", "scheduling_result"]


def scheduling_result(tl: Timeline) -> list[IncarnationPlacement]:
    """Per incarnation, in order: its rendezvous endpoint, world size, when it was ready
    (``ready_s``: seconds after the first incarnation started; ``ready_since_injection_s``:
    after the fault was injected, when one was), and each rank's node, host and pid."""
    if not tl.incarnations:
        return []
    origin = tl.incarnations[0].started_mono
    inj = injections(tl)
    t0 = inj[0].mono if inj else None
    out = []
    for inc in tl.incarnations:
        ranks = [
            {
                "rank": int(e.get("rank", 0)),
                "node": e.get("node"),
                "host": e.get("host"),
                "pid": e.get("pid"),
                "local_rank": e.get("local_rank"),
            }
            for e in sorted(inc.starts, key=lambda e: (int(e.get("rank", 0)), e.mono))
        ]
        out.append(
            IncarnationPlacement.model_validate(
                plain(
                    {
                        "incarnation": inc.index,
                        "master": inc.master,
                        "world_size": inc.world_size,
                        "ready_s": round(inc.ready_mono - origin, 3),
                        "ready_since_injection_s": (
                            round(inc.ready_mono - t0, 3) if t0 is not None else None
                        ),
                        "nodes": inc.nodes,
                        "ranks": ranks,
                    }
                )
            )
        )
    return out


def access_identities(tl: Timeline) -> list[AccessIdentity]:
    """The distinct identities the replicas ran as: uid, user and the nodes they ran on."""
    seen: dict[tuple[Any, Any], set[str]] = {}
    for e in tl.of("probe", "run_start"):
        if e.get("uid") is None and e.get("user") is None:
            continue
        seen.setdefault((e.get("uid"), e.get("user")), set()).add(str(e.get("node")))
    return [
        AccessIdentity.model_validate(plain({"uid": uid, "user": user, "nodes": sorted(nodes)}))
        for (uid, user), nodes in sorted(seen.items(), key=lambda kv: str(kv[0]))
    ]


def reported_data_digests(tl: Timeline) -> list[str]:
    """The distinct ``data_digest`` values the replicas reported, in the order first seen."""
    out: list[str] = []
    for e in tl.of("probe", "run_start"):
        d = e.get("data_digest")
        if d and str(d) not in out:
            out.append(str(d))
    return out
