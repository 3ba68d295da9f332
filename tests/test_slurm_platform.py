"""The draft Slurm adapter on the embedded cluster, with the reference workload: a node
taken down through the adapter's action is declared DOWN by slurmctld, the job is requeued
onto the spare and resumes from its last checkpoint; every change is in the ledger and
undone. (One drill, about a minute on a busy 2-core machine.)"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from faultdrill import faults as _faults  # noqa: F401  (registers link-down, signal undoers)
from faultdrill.events import EventSink
from faultdrill.ledger import Ledger
from faultdrill.plan import Resources
from faultdrill.platforms.api import JobSpec, JobState
from faultdrill.platforms.slurm.platform import Change, SlurmPlatform
from tests.test_slurm_embedded import leftovers, needs_slurm

pytestmark = [pytest.mark.drill, pytest.mark.root, needs_slurm]


def act(platform: SlurmPlatform, changes: list[Change]) -> None:
    """What a fault does with an action's changes: record, apply, mark (close if final)."""
    for ch in changes:
        eid = platform.ledger.record(ch.kind, ch.data, ch.label)
        ch.apply()
        platform.ledger.mark_applied(eid)
        if not ch.reversible:
            platform.ledger.revert(eid)


def probe_events(events: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(events.glob("probe-rank*.jsonl")):
        out += [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]
    return sorted(out, key=lambda e: e["mono"])


def platform_events(events: Path) -> list[dict[str, Any]]:
    path = events / "platform.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]


def wait_for(what: str, cond: Any, timeout: float, platform: SlurmPlatform) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        platform.poll()
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(
        f"no {what} within {timeout} s; job {platform.watch and platform.watch.job}"
    )


def test_node_down_is_requeued_onto_the_spare_and_resumes_from_the_checkpoint(
    tmp_path: Path,
) -> None:
    run_id = f"t-slurm-{uuid.uuid4().hex[:10]}"
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id=run_id)
    sink = EventSink(tmp_path / "events", "t")
    res = Resources(platform="slurm", isolation="netns", nodes=2, spares=1, max_restarts=3)
    platform = SlurmPlatform(res, tmp_path, ledger, sink)
    cfg = tmp_path / "lm.json"
    cfg.write_text(
        json.dumps(
            {
                "ckpt_dir": str(tmp_path / "ckpt"),
                "steps": 40,
                "ckpt_every": 10,
                "step_sleep_s": 0.25,
            }
        )
    )
    events = tmp_path / "events"
    job = JobSpec(
        run_id=run_id,
        task_id="t",
        argv=["-m", "faultdrill.workloads.lm", f"--workload-config={cfg}"],
        env={},
        nodes=["n1", "n2"],
        procs_per_node=1,
        min_nodes=2,
        max_nodes=2,
        max_restarts=3,
        work_dir=tmp_path,
        events_dir=events,
    )
    try:
        platform.prepare()
        platform.submit(job)

        def last_step() -> int:
            return max((e["step"] for e in probe_events(events) if e["kind"] == "step"), default=0)

        wait_for("step 12", lambda: last_step() >= 12, 150, platform)
        assert {r.node for r in platform.worker_pids()} == {"n1", "n2"}
        t_down = time.monotonic()
        act(platform, platform.node_down("n2"))
        wait_for("the end of the job", lambda: platform.poll().ended, 240, platform)
        assert platform.poll() == JobState.SUCCEEDED
        plat = platform_events(events)
        down = [
            e
            for e in plat
            if e["kind"] == "node_state" and e["node"] == "n2" and e["state"] == "down"
        ]
        assert down and down[0]["reason"] == "Not responding", down
        assert 3 < down[0]["mono"] - t_down < 60
        (req,) = [e for e in plat if e["kind"] == "job_requeued"]
        assert req["restart_count"] == 1
        allocs = [(e["incarnation"], e["nodes"]) for e in plat if e["kind"] == "allocation"]
        assert allocs == [(0, ["n1", "n2"]), (1, ["n1", "n3"])]
        probe = probe_events(events)
        loads = [e for e in probe if e["kind"] == "ckpt_load"]
        assert loads and {e["step"] for e in loads} == {10}, loads
        ends = [e for e in probe if e["kind"] == "run_end"]
        assert [e["final_step"] for e in ends] == [40, 40]
        assert platform.dossier()["cred_expire"] == 5
    finally:
        platform.stop(grace_s=5)
        platform.teardown()
        ledger.revert_all()
    assert leftovers(ledger.path) == []
    assert ledger.pending() == []
