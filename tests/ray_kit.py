"""Helpers for the embedded Ray cluster tests (no tests here).

* :func:`make_cluster`: a namespace cluster and an :class:`EmbeddedRay` on it, not started;
* :func:`ray_leftovers`: everything of the run that still exists (processes carrying the
  run id or a recorded daemon marker, anything naming the Ray temp dir, namespaces,
  cgroups, the short temp dir);
* a harness that brings a cluster up, starts a driver holding a Ray task, says ``READY``
  and waits (``python -m tests.ray_kit WORK RUN_ID``), so that a test can SIGKILL it.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

import pytest

from faultdrill.events import EventSink
from faultdrill.host import procfs
from faultdrill.host.cluster import NodeCluster
from faultdrill.host.linux import netns_exists, netns_unavailable
from faultdrill.ledger import Ledger
from faultdrill.platforms.ray.embedded import MARKER_ENV, EmbeddedRay, ray_missing
from tests.test_netns_kit import ledger_records

needs_ray = pytest.mark.skipif(
    ray_missing() is not None or netns_unavailable() is not None,
    reason=f"no embedded Ray cluster here: {ray_missing() or netns_unavailable()}",
)

#: A driver that runs one task pinned to each live node and prints where each ran, then
#: holds a task running until it is killed (``hold``).
DRIVER = """
import os, sys, time, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On
ray.init(address=os.environ["RAY_ADDRESS"], _node_ip_address=os.environ["FAULTDRILL_NODE_ADDR"])
@ray.remote(num_cpus=1)
def where():
    return os.environ.get("FAULTDRILL_NODE")
ids = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
print("RAN", sorted(ray.get([where.options(scheduling_strategy=On(i, soft=False)).remote() for i in ids])), flush=True)
if sys.argv[1:] == ["hold"]:
    @ray.remote(num_cpus=1)
    def hold():
        time.sleep(600)
    ref = hold.remote()
    print("HOLDING", flush=True)
    ray.get(ref)
"""


def make_cluster(work: Path, run_id: str | None = None) -> tuple[NodeCluster, EmbeddedRay]:
    """Two nodes (n1 head, n2 worker), one CPU each, recorded in ``work/ledger.jsonl``."""
    run_id = run_id or f"t-ray-{uuid.uuid4().hex[:10]}"
    ledger = Ledger(work / "ledger.jsonl", run_id=run_id)
    sink = EventSink(work / "events", "t")
    nodes = NodeCluster(ledger, sink, ["n1", "n2"], netns=True)
    return nodes, EmbeddedRay(nodes, ledger, sink, work, head="n1", members=["n1", "n2"])


def ray_leftovers(ledger_path: Path, run_id: str) -> list[str]:
    """What the run created that still exists on the machine."""
    left = []
    recs = ledger_records(ledger_path)
    for pid in procfs.pids_with_env("FAULTDRILL_RUN_ID", run_id):
        left.append(f"process {pid} {procfs.cmdline(pid)[:2]} of run {run_id}")
    temp_dirs = [r["data"]["path"] for r in recs if r["kind"] == "ray-tempdir"]
    for rec in recs:
        data = rec["data"]
        if rec["kind"] == "ray-daemon":
            for pid in procfs.pids_with_env(MARKER_ENV, data["marker"]):
                left.append(f"process {pid} of {data['role']} on {data['node']}")
        elif rec["kind"] == "netns" and netns_exists(data["name"]):
            left.append(f"namespace {data['name']}")
        elif rec["kind"] == "cgroup" and Path(data["path"]).exists():
            left.append(f"cgroup {data['path']}")
        elif rec["kind"] == "ray-tempdir" and data["remove"] and Path(data["path"]).exists():
            left.append(f"temp dir {data['path']}")
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and temp_dirs:
            line = " ".join(procfs.cmdline(int(entry.name)))
            if any(t in line for t in temp_dirs):
                left.append(f"process {entry.name} naming the Ray temp dir: {line[:120]}")
    return sorted(set(left))


def _main(work: str, run_id: str) -> None:
    """The harness a test SIGKILLs: cluster up, a driver holding a task, then wait."""
    nodes, ray = make_cluster(Path(work), run_id)
    nodes.ledger.activate()
    nodes.prepare()
    ray.start()
    env = {**os.environ, **ray.driver_env("n1"), "FAULTDRILL_RUN_ID": run_id}
    with open(Path(work) / "driver.log", "ab") as log:
        ray.nodes.launch(
            "n1", [sys.executable, "-c", DRIVER, "hold"], env=env, cwd=Path(work), log=log
        )
    deadline = time.monotonic() + 120
    while b"HOLDING" not in (Path(work) / "driver.log").read_bytes():
        if time.monotonic() > deadline:
            raise SystemExit("driver did not start its task")
        time.sleep(0.2)
    print("READY", flush=True)
    time.sleep(600)  # the test SIGKILLs this process long before


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
