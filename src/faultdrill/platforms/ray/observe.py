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
node_lost           node, reason, detail, ray_time: with every ``node_state`` down (the
                    generic kind the timeline reads as "the platform deemed it lost")
gcs_unreachable     error: a poll failed (GCS stopped, killed, cut off); once per outage
gcs_reachable       outage_s: the first poll that answered again
==================  ===================================================================

``ray_time`` is the scheduler's timestamp; the event's ``ts``/``mono`` say when we saw it.
A node that re-registers after a restart has a new Ray node id and shows ``up`` again.
Exits on SIGTERM.
"""

from __future__ import annotations

import argparse
import importlib
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

    def _update(self, rid: str, node: Any) -> None:
        name = self.names.get(node.node_manager_address, node.node_manager_address)
        if _enum_name(node, "state") == "DEAD":
            state = "down"
            reason = _enum_name(node.death_info, "reason")
            detail = node.death_info.reason_message
        elif _enum_name(node.state_snapshot, "state") == "DRAINING":
            state, reason, detail = "draining", "DRAINING", ""
        else:
            state, reason, detail = "up", "ALIVE", ""
        previous = self.state.get(rid, (name, None))[1]
        if previous == state:
            return
        self.state[rid] = (name, state)
        ray_time = node.end_time_ms / 1000 if node.end_time_ms else None
        if state == "down":
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
        )


def _enum_name(message: Any, field: str) -> str:
    """The name of an enum field's value (``GcsNodeInfo.state`` -> ``"DEAD"``)."""
    enum = message.DESCRIPTOR.fields_by_name[field].enum_type
    return str(enum.values_by_number[getattr(message, field)].name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="faultdrill.platforms.ray.observe", allow_abbrev=False)
    parser.add_argument("--address", required=True)
    parser.add_argument("--events-dir", required=True, type=Path)
    parser.add_argument("--task", default="")
    parser.add_argument("--nodes", default="", help="name=address,... (our node names)")
    parser.add_argument("--interval", type=float, default=0.25)
    args = parser.parse_args(argv)
    names = {}  # address -> node name
    for pair in filter(None, args.nodes.split(",")):
        name, _, address = pair.partition("=")
        names[address] = name
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
