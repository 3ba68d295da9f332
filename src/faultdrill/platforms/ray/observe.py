"""The GCS node table as ``platform`` events: which node Ray deemed dead or draining, when,
and why, in Ray's own words. Runs as its own process inside a node's network namespace (the
GCS address is reachable only from there), without the dashboard::

    python -m faultdrill.platforms.ray.observe --address=10.77.0.1:6380 \\
        --events-dir=RUN/events --task=T --nodes=n1=10.77.0.1,n2=10.77.0.2

It polls ``ray._raylet.GcsClient.get_all_node_info`` every ``--interval`` seconds and
appends to ``<events dir>/ray-gcs.jsonl`` (``source="gcs"``):

==================  ===================================================================
node_state          node (our name), state (``up``, ``draining``, ``down``), previous,
                    reason (Ray's death reason or drain state), detail (its message),
                    ray_node_id, ray_time (Ray's own end time of a dead node, epoch s)
node_lost           node, reason, detail, ray_time: with a ``node_state`` down that leaves
                    the node no registration up (the generic kind the timeline reads as
                    "the platform deemed it lost"; an earlier registration of a node
                    started again, ending while its newer one is up, is no loss)
gcs_unreachable     error: a poll failed (GCS stopped, killed, cut off); once per outage
gcs_reachable       outage_s: the first poll that answered again
==================  ===================================================================

``ray_time`` is the scheduler's timestamp; the event's ``ts``/``mono`` say when we saw it.
What the first answer already holds is the state at the start (``node_state`` with
``initial: true``; a node dead before observation began is no ``node_lost``: on a cluster
that outlived earlier drills the GCS keeps every dead registration).
A node that re-registers after a restart has a new Ray node id and shows ``up`` again.
Exits on SIGTERM.

With ``--once`` it asks the GCS once and prints ``{node: state}`` as one JSON line (a node
that registered more than once counts as its live registration), exit status 1 when the
GCS does not answer within ``--timeout`` seconds: how the platform checks the cluster's
layout between drills.
"""

from __future__ import annotations

import argparse
import importlib
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from faultdrill.events import EventSink

__all__ = ["main"]


class _Poller:
    def __init__(self, address: str, sink: EventSink, names: dict[str, str]) -> None:
        self.address = address
        self.sink = sink
        self.names = names  # address -> node name
        self.client: Any = None
        self.state: dict[str, tuple[str, str]] = {}  # ray node id -> (node, state)
        self.down_since: float | None = None
        self.failures = 0
        self.initial = True  # the first answer: the state observation starts from

    def emit(self, kind: str, **fields: Any) -> None:
        self.sink.emit("platform", kind, stream="ray-gcs", source="gcs", **fields)

    def poll(self) -> None:
        try:
            if self.client is None:
                raylet = importlib.import_module("ray._raylet")
                self.client = raylet.GcsClient(address=self.address)
            info = self.client.get_all_node_info(timeout=1)
        except Exception as exc:  # whatever the GCS client raises: the GCS did not answer
            self.failures += 1
            if self.failures >= 3:
                self.client = None  # a restarted GCS may have a new cluster id
            if self.down_since is None:
                self.down_since = time.monotonic()
                self.emit("gcs_unreachable", error=str(exc).strip().splitlines()[0][:300])
            return
        self.failures = 0
        if self.down_since is not None:
            self.emit("gcs_reachable", outage_s=round(time.monotonic() - self.down_since, 3))
            self.down_since = None
        for node_id, node in info.items():
            self._update(node_id.hex(), node)
        self.initial = False

    def _update(self, rid: str, node: Any) -> None:
        name = self.names.get(node.node_manager_address, node.node_manager_address)
        state = _state_of(node)
        if state == "down":
            reason = _enum_name(node.death_info, "reason")
            detail = node.death_info.reason_message
        elif state == "draining":
            reason, detail = "DRAINING", ""
        else:
            reason, detail = "ALIVE", ""
        previous = self.state.get(rid, (name, None))[1]
        if previous == state:
            return
        self.state[rid] = (name, state)
        ray_time = node.end_time_ms / 1000 if node.end_time_ms else None
        if state == "down" and not self.initial and not self.other_registration_up(name, rid):
            self.emit("node_lost", node=name, reason=reason, detail=detail[:300], ray_time=ray_time)
        self.emit(
            "node_state",
            node=name,
            state=state,
            previous=previous,
            reason=reason,
            detail=detail[:300],
            ray_node_id=rid,
            ray_time=ray_time,
            initial=self.initial,
        )

    def other_registration_up(self, name: str, rid: str) -> bool:
        """Whether node ``name`` has a registration other than ``rid`` that is up: then
        ``rid`` going down is a stale registration ending (a raylet started again between
        drills, whose earlier start the GCS declares dead only now), not the node's loss."""
        return any(n == name and st == "up" and r != rid for r, (n, st) in self.state.items())


def _state_of(node: Any) -> str:
    if _enum_name(node, "state") == "DEAD":
        return "down"
    if _enum_name(node.state_snapshot, "state") == "DRAINING":
        return "draining"
    return "up"


def snapshot(address: str, names: dict[str, str], timeout: float) -> dict[str, str]:
    """Our node name -> its state in the GCS now (a live registration wins over a dead
    one of the same node). Raises whatever the GCS client raises when it gets no answer."""
    raylet = importlib.import_module("ray._raylet")
    info = raylet.GcsClient(address=address).get_all_node_info(timeout=timeout)
    rank = {"up": 2, "draining": 1, "down": 0}
    out: dict[str, str] = {}
    for node in info.values():
        name = names.get(node.node_manager_address, node.node_manager_address)
        state = _state_of(node)
        if name not in out or rank[state] > rank[out[name]]:
            out[name] = state
    return out


def _enum_name(message: Any, field: str) -> str:
    """The name of an enum field's value (``GcsNodeInfo.state`` -> ``"DEAD"``)."""
    enum = message.DESCRIPTOR.fields_by_name[field].enum_type
    return str(enum.values_by_number[getattr(message, field)].name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="faultdrill.platforms.ray.observe", allow_abbrev=False)
    parser.add_argument("--address", required=True)
    parser.add_argument("--events-dir", type=Path)
    parser.add_argument("--task", default="")
    parser.add_argument("--nodes", default="", help="name=address,... (our node names)")
    parser.add_argument("--interval", type=float, default=0.25)
    parser.add_argument("--once", action="store_true", help="print {node: state} and exit")
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args(argv)
    names = {}  # address -> node name
    for pair in filter(None, args.nodes.split(",")):
        name, _, address = pair.partition("=")
        names[address] = name
    if args.once:
        try:
            print(json.dumps(snapshot(args.address, names, args.timeout)), flush=True)
        except Exception as exc:  # whatever the GCS client raises: no answer
            print(f"no answer from the GCS at {args.address}: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.events_dir is None:
        parser.error("--events-dir is required (unless --once)")
    poller = _Poller(args.address, EventSink(args.events_dir, args.task), names)
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    while not stop:
        began = time.monotonic()
        poller.poll()
        time.sleep(max(0.0, args.interval - (time.monotonic() - began)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
