"""The embedded Slurm cluster, for real: bring-up, a job on two nodes, tear-down, and a
harness SIGKILLed during a Slurm drill followed by ``faultdrill cleanup``; nothing may be
left behind.

Needs root, the namespace cluster's tools and Debian's Slurm packages
(``scripts/setup-slurm.sh``).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultdrill.errors import EnvironmentPrepError
from faultdrill.events import EventSink
from faultdrill.host import procfs
from faultdrill.host.cluster import NodeCluster
from faultdrill.host.linux import netns_exists, netns_unavailable, run_in_netns
from faultdrill.ledger import Ledger
from faultdrill.platforms.local.platform import make_scratch_root
from faultdrill.platforms.slurm.embedded import EmbeddedSlurm, slurm_cluster, slurm_missing
from faultdrill.platforms.slurm.jobs import SlurmWatch
from tests.drillkit import ROOT, cli_env, kill_task, task_pids, wait_for
from tests.round3kit import _RUN_ONE, injected
from tests.slurmkit import example_raw, shrunk

_WHY = netns_unavailable() or slurm_missing()
needs_slurm = pytest.mark.skipif(_WHY is not None, reason=f"no embedded Slurm here: {_WHY}")
# Beyond the one every-family drill of the default run (test_slurm_drills.py): slow.
pytestmark = [pytest.mark.drill, pytest.mark.root, pytest.mark.slow, needs_slurm]

# Where Slurm and munge put files by default: none of them may gain a file.
DEFAULT_PLACES = [
    Path(p)
    for p in (
        "/etc/slurm",
        "/etc/munge",
        "/var/spool/slurmd",
        "/var/spool/slurmctld",
        "/var/spool/slurm",
        "/var/log/slurm",
        "/var/log/munge",
        "/var/lib/munge",
        "/var/lib/slurm",
        "/run/munge",
        "/run/slurm",
        "/run/slurmctld.pid",
        "/run/slurmd.pid",
    )
]


def make(work: Path) -> tuple[NodeCluster, EmbeddedSlurm]:
    """Two nodes and a spare in ``work``, not brought up yet (unique run id)."""
    run_id = f"t-slurm-{uuid.uuid4().hex[:10]}"
    ledger = Ledger(work / "ledger.jsonl", run_id=run_id)
    sink = EventSink(work / "events", "t")
    nodes = slurm_cluster(ledger, sink, ["n1", "n2"], ["n3"])
    slurm = EmbeddedSlurm(nodes, work / "slurm")
    # as the platform does: pytest's directories are too deep for a socket's path
    slurm.place_sockets(make_scratch_root(ledger, run_id) / "slurm")
    return nodes, slurm


def snapshot() -> dict[str, float]:
    """Path -> mtime of everything under the default places (to diff after a run)."""
    out = {}
    for place in DEFAULT_PLACES:
        if place.is_file():
            out[str(place)] = place.stat().st_mtime
        elif place.is_dir():
            for p in [place, *place.rglob("*")]:
                out[str(p)] = p.stat().st_mtime
    return out


def records(ledger: Path) -> list[dict[str, Any]]:
    """Last version of each ledger record, with its reverted flag."""
    out: dict[str, dict[str, Any]] = {}
    for line in ledger.read_text().splitlines():
        rec = json.loads(line)
        if rec["op"] == "record":
            out[rec["id"]] = {**rec, "reverted": out.get(rec["id"], {}).get("reverted", False)}
        elif rec["op"] == "reverted":
            out[rec["id"]]["reverted"] = True
    return list(out.values())


def leftovers(ledger: Path) -> list[str]:
    """What the ledger recorded that still exists: daemons (pid + start time), namespaces,
    cgroups, and processes still inside a recorded cgroup."""
    left = []
    for rec in records(ledger):
        kind, data = rec["kind"], rec["data"]
        if kind == "slurm-daemon" and isinstance(data.get("pid"), int):
            if procfs.alive(data["pid"], data.get("start_time")):
                left.append(f"daemon {data['name']} (pid {data['pid']})")
        elif kind == "netns" and netns_exists(data["name"]):
            left.append(f"namespace {data['name']}")
        elif kind == "cgroup" and Path(data["path"]).exists():
            pids = procfs.Cgroup(Path(data["path"])).pids()
            left.append(f"cgroup {data['path']} (processes {pids})")
    return left


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[tuple[NodeCluster, EmbeddedSlurm]]:
    nodes, slurm = make(tmp_path)
    try:
        yield nodes, slurm
    finally:
        try:
            slurm.down()
        finally:
            nodes.teardown()
            nodes.ledger.revert_all()


def test_bring_up_run_a_job_on_two_nodes_tear_down_leaves_nothing(
    tmp_path: Path, cluster: tuple[NodeCluster, EmbeddedSlurm]
) -> None:
    nodes, slurm = cluster
    before = snapshot()
    t0 = time.monotonic()
    nodes.prepare()
    slurm.up()
    up_s = time.monotonic() - t0
    assert slurm.node_states() == {"n1": "IDLE", "n2": "IDLE", "n3": "IDLE"}
    assert up_s < 30, f"bring-up took {up_s:.1f} s"

    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        "srun --ntasks-per-node=1 /bin/sh -c "
        "'echo \"task $SLURMD_NODENAME $(hostname) $(grep freezer /proc/self/cgroup)\"'\n"
    )
    out = tmp_path / "job.out"
    job_id = slurm.client(
        ["sbatch", "--parsable", "--nodes=2", f"--output={out}", str(script)]
    ).stdout.strip()
    events: list[tuple[str, dict[str, Any]]] = []
    watch = SlurmWatch(slurm, lambda kind, **f: events.append((kind, f)), job_id=job_id)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and watch.job.get("JobState") != "COMPLETED":
        watch.tick()
        time.sleep(0.2)
    assert watch.job.get("JobState") == "COMPLETED", watch.job
    # Each task ran on its own node: own hostname, in that node's cgroup.
    run_id = nodes.ledger.run_id
    lines = sorted(x.split() for x in out.read_text().splitlines() if x.startswith("task "))
    assert [ln[1:3] for ln in lines] == [["n1", "n1"], ["n2", "n2"]], lines
    assert [ln[3].split(":", 2)[2] for ln in lines] == [
        f"/faultdrill/{run_id}/n1",
        f"/faultdrill/{run_id}/n2",
    ]
    allocs = [f for k, f in events if k == "allocation"]
    assert allocs and allocs[0]["nodes"] == ["n1", "n2"]

    daemons = {d.name: d.proc.pid for d in slurm.daemons.values()}
    assert set(daemons) == {"munged", "slurmctld", "slurmd-n1", "slurmd-n2", "slurmd-n3"}
    slurm.down()
    nodes.teardown()
    slurm.down()  # idempotent
    nodes.teardown()
    assert leftovers(nodes.ledger.path) == []
    assert nodes.leftovers() == []
    assert not any(procfs.alive(pid) for pid in daemons.values())
    assert not (procfs.FREEZER_ROOT / "faultdrill" / run_id).exists()
    assert snapshot() == before, "a file appeared outside the run directory"
    assert (tmp_path / "slurm" / "slurm.conf").exists()
    assert not (tmp_path / "slurm" / "munge" / "munge.socket").exists()


def test_a_slurmd_that_cannot_start_is_named_with_its_log(
    cluster: tuple[NodeCluster, EmbeddedSlurm],
) -> None:
    """Bring-up fails at once, naming the node, its slurmd's exit and its log's tail, when a
    slurmd cannot start (here: its port is taken inside its node), and never hangs."""
    nodes, slurm = cluster
    nodes.prepare()

    def occupy() -> socket.socket:
        s = socket.socket()
        s.bind(("0.0.0.0", slurm.settings.slurmd_port))
        s.listen()
        return s

    blocker = run_in_netns(nodes.link("n2").ns, occupy)
    try:
        t0 = time.monotonic()
        with pytest.raises(EnvironmentPrepError) as err:
            slurm.up()
        assert time.monotonic() - t0 < 20
    finally:
        blocker.close()
    text = str(err.value)
    assert "slurmd of n2 exited" in text and "slurmd-n2" in text, text
    assert "Address already in use" in text, text


_DRILL = {
    "id": "cut-n2",
    "fault": {"kind": "partition", "target": {"node": "n2"}, "for_s": 300},
    "trigger": {"at_step": 6},
}


def test_harness_sigkill_during_a_slurm_drill_then_cleanup_leaves_nothing(
    tmp_path: Path,
) -> None:
    """A Slurm drill (no baseline) whose fault is in place, its harness SIGKILLed: the
    cluster, the job and the fault's rules outlive it; ``faultdrill cleanup`` removes them
    all (daemons, namespaces, cgroups, the job's processes), and no file appears outside
    the run directory."""
    raw = shrunk(example_raw(), steps=200)
    raw["rounds"] = [{"round": 1, "scenarios": [_DRILL]}]
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(raw, sort_keys=False))
    work = tmp_path / "run" / "scenarios" / "cut-n2"
    env = cli_env(tmp_path / "state")
    before = snapshot()
    proc = subprocess.Popen(
        [sys.executable, "-c", _RUN_ONE, str(plan), str(tmp_path / "run")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: injected(work) is not None, 240, "the partition to be applied")
        rules = [r for r in records(work / "ledger.jsonl") if r["kind"] == "iptables-rule"]
        assert len(rules) == 2 and all(not r["reverted"] for r in rules)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        # What makes this test mean something: the cluster and the job outlived the harness.
        left = leftovers(work / "ledger.jsonl")
        assert sum(x.startswith("daemon ") for x in left) == 5, left
        assert task_pids(raw["task"]["id"]), "the job should still run"
        done = subprocess.run(
            [sys.executable, "-m", "faultdrill.cli", "cleanup", str(tmp_path / "run")],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "undone" in done.stdout
        assert leftovers(work / "ledger.jsonl") == []
        assert task_pids(raw["task"]["id"]) == []
        for r in rules:  # gone with their namespace, and never left in another
            assert not netns_exists(r["data"]["ns"])
        (run_id,) = {
            r["data"]["run_id"]
            for r in records(work / "ledger.jsonl")
            if r["kind"] == "run-processes"
        }
        assert not (procfs.FREEZER_ROOT / "faultdrill" / run_id).exists()
        assert snapshot() == before, "a file appeared outside the run directory"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_task(raw["task"]["id"])
        if (work / "ledger.jsonl").exists() and leftovers(work / "ledger.jsonl"):
            Ledger(work / "ledger.jsonl", run_id="cleanup").revert_all()
