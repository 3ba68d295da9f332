"""Slurm drills too long for the default run (the ``slow`` set), on the embedded cluster:

* a controller cut off the network: slurmctld declares every node DOWN and requeues the
  job while the old incarnation trains on unseen; when the cable is back Slurm drains the
  batch node ("Duplicate jobid") and holds the job ("launch failed requeued held"): only
  the recovery operator's ``scontrol update State=RESUME`` + ``scontrol release`` (the
  plan's ``recovery: {action: resubmit}``) brings it back: **manual-restart**;
* the known-bad split brain measured in docs/slurm-notes.md: n1, the batch and rendezvous
  host, cut off with an elastic job (``--nnodes=1:2``); its old task re-forms a world of
  one and trains on, writing checkpoints, while the requeued job runs on n2+n3: caught by
  ``resources.no-stale-replica``;
* the example plan's harness controls (``controls: {harness: all}``: ``rollback-latest``,
  ``hide-checkpoints``, ``stale-copy``), each caught by its check (moved here from the
  default run's example plan, which they made ~50 s longer; the default run catches all
  three on the local platform, ``test_joblog_drill.py``);
* the same platform against a "real" cluster (``slurm: {shared_dir: ...}``): the harness
  runs where ``sbatch`` on PATH reaches slurmctld (inside the controller's namespace, as on
  a login node), and drains a node and damages a checkpoint through Slurm's commands and
  the shared directory only; the process evidence comes from each node's own agent.

About 8 minutes on an idle 2-core machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultdrill.events import EventSink
from faultdrill.ledger import Ledger
from faultdrill.platforms.local.platform import make_scratch_root
from faultdrill.platforms.slurm.embedded import CONTROLLER, EmbeddedSlurm, slurm_cluster
from tests.drillkit import ROOT, cli_env, kill_task
from tests.slurmkit import (
    events,
    example_raw,
    explain,
    failing,
    injected_at,
    needs_slurm,
    run_plan_cli,
    scenario,
    shrunk,
    slurm,
)

pytestmark = [pytest.mark.drill, pytest.mark.root, pytest.mark.slow, needs_slurm]


def slow_plan() -> dict[str, Any]:
    # long enough that the old incarnation still trains when the controller's cable is back
    raw = shrunk(example_raw(), steps=200, every=10, at_step=15)
    raw["task"]["workload"]["step_sleep_s"] = 0.3
    res = raw["resources"]
    res["min_nodes"] = 1  # elastic: a node's old task may carry on alone (the split brain)
    res["timeouts"] = {"gloo_s": 10, "rdzv_last_call_s": 10}  # both nodes join the baseline
    raw["stop"] = {"max_wall_s": 420, "max_no_progress_s": 240}
    raw["rounds"] = [
        {
            "round": 3,
            "name": "controller cut",
            "scenarios": [
                {
                    "id": "slurmctld-cut",
                    "title": "slurmctld's namespace cut off the network for 30 s",
                    "fault": {"kind": "control-plane-outage", "mode": "cut", "for_s": 30},
                    "trigger": {"at_step": 15},
                    "recovery": {
                        "action": "resubmit",
                        "runbook": "resume the nodes Slurm drained, release the held job",
                    },
                    "expected": {"recovery": "manual-restart", "resume": "latest-valid"},
                }
            ],
        }
    ]
    raw["controls"] = [
        {
            "id": "ctl-cut-off-writer",
            "title": "n1 (batch and rendezvous host) cut off 100 s: its old task trains on",
            "workload": {"steps": 300},
            "fault": {"kind": "partition", "target": {"node": "n1"}, "for_s": 100},
            "trigger": {"at_step": 15},
            "expected_check": "resources.no-stale-replica",
        }
    ]
    return raw


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    yield run_plan_cli(slow_plan(), tmp_path_factory.mktemp("slurm-slow"), timeout=1500)


def test_a_controller_cut_leaves_the_job_held_until_the_operator_releases_it(
    report: dict[str, Any],
) -> None:
    s = scenario(report, "slurmctld-cut")
    assert s["verdict"] == "pass", explain(s)
    assert s["recovery_class"] == "manual-restart", explain(s)
    (held,) = slurm(report, "slurmctld-cut", "job_held")
    assert "held" in held["reason"]
    drained = [e for e in slurm(report, "slurmctld-cut", "node_state") if e["state"] == "drained"]
    assert drained and drained[0]["reason"] == "Duplicate jobid"
    (act,) = s["operator_actions"]
    commands = [step["command"] for step in act["steps"]]
    assert commands[-1] == f"scontrol release {held['job_id']}"
    assert f"scontrol update NodeName={drained[0]['node']} State=RESUME" in commands
    assert "Slurm operator" in act["steps"][0]["permission"]
    q = s["questions"]
    assert "(slurmctld" in q["worker_lost_by"] and q["resumed_from"]["verified"]
    t0 = injected_at(report, "slurmctld-cut")
    released = [e for e in events(report, "slurmctld-cut") if e["kind"] == "job_released"]
    assert released and released[0]["mono"] > held["mono"] > t0


def test_the_cut_off_nodes_old_task_is_caught_by_the_stale_replica_check(
    report: dict[str, Any],
) -> None:
    (c,) = [x for x in report["scenarios"] if x["id"] == "ctl-cut-off-writer"]
    fails = failing(c)
    assert "resources.no-stale-replica" in fails, explain(c)
    assert "older incarnation" in fails["resources.no-stale-replica"]
    # Slurm replaced the job: its requeue is on the timeline, and the stale task announced
    # Slurm's old incarnation while the requeued job announced the new one
    assert slurm(report, "ctl-cut-off-writer", "job_requeued")
    starts = [
        e
        for f in ("probe-rank0", "probe-rank1")
        for e in events(report, "ctl-cut-off-writer", f)
        if e["kind"] == "run_start"
    ]
    on_n1 = {e["sched_incarnation"] for e in starts if e["node"] == "n1"}
    elsewhere = {e["sched_incarnation"] for e in starts if e["node"] != "n1"}
    assert on_n1 == {0} and max(elsewhere) >= 1, starts


# --- a "real" cluster: the harness where sbatch reaches slurmctld -------------------------


def real_plan(shared: Path) -> dict[str, Any]:
    raw = shrunk(example_raw())
    raw["resources"] = {
        "platform": "slurm",
        "nodes": 2,
        "procs_per_node": 1,
        "max_restarts": 3,
        "slurm": {"shared_dir": str(shared), "python": sys.executable},
    }
    raw["rounds"] = [
        {
            "round": 2,
            "continue_on_failure": True,
            "scenarios": [
                {
                    "id": "node-drain",
                    "fault": {"kind": "node-drain", "target": {"node": "n2"}},
                    "trigger": {"at_step": 8},
                    "expected": {"resume": "no-restart"},
                },
                {
                    "id": "checkpoint-bit-flip",
                    "fault": {
                        "kind": "corrupt-checkpoint",
                        "damage": "flip-bytes",
                        "restart": None,
                    },
                    "trigger": {"after_checkpoint": 2},
                    "expected": {"resume": "no-restart"},
                },
            ],
        }
    ]
    return raw


@pytest.fixture()
def login_node(tmp_path: Path) -> Iterator[tuple[EmbeddedSlurm, list[str], dict[str, str]]]:
    """An embedded cluster, and how to run a command as if on its login node: inside the
    controller's network namespace with the cluster's config (``SLURM_CONF``)."""
    ledger = Ledger(tmp_path / "cluster-ledger.jsonl", run_id=f"t-login-{uuid.uuid4().hex[:8]}")
    nodes = slurm_cluster(ledger, EventSink(tmp_path / "cluster-events", "t"), ["n1", "n2"], [])
    slurm = EmbeddedSlurm(nodes, tmp_path / "cluster")
    # as the platform does: pytest's directories are too deep for a socket's path
    slurm.place_sockets(make_scratch_root(ledger, ledger.run_id) / "slurm")
    try:
        nodes.prepare()
        slurm.up()
        yield slurm, nodes.launch_prefix(CONTROLLER), {"SLURM_CONF": str(slurm.paths.conf)}
    finally:
        try:
            slurm.down()
        finally:
            nodes.teardown()
            ledger.revert_all()
            ledger.revert_all()


def test_on_a_real_cluster_slurm_drains_and_the_shared_files_are_damaged(
    tmp_path: Path, login_node: tuple[EmbeddedSlurm, list[str], dict[str, str]]
) -> None:
    _cluster, prefix, conf = login_node
    shared = tmp_path / "shared"
    shared.mkdir()
    raw = real_plan(shared)
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(raw, sort_keys=False))
    out = shared / "run"
    argv = [*prefix, sys.executable, "-m", "faultdrill.cli", "run", str(plan), "--out", str(out)]
    env = {**cli_env(tmp_path / "state"), **conf}
    try:
        subprocess.run(
            [*argv, "--quiet"], env=env, cwd=ROOT, timeout=600, capture_output=True, check=False
        )
    finally:
        kill_task(raw["task"]["id"])
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    report["_run_dir"] = str(out)
    assert report["baseline"]["verdict"] != "fail", json.dumps(report["baseline"]["evidence"])
    options = report["baseline"]["dossier"]["resources"]["platform_options"]
    assert options["cluster"] == "real" and options["SlurmdTimeout"] == "5 sec"
    drain = scenario(report, "node-drain")
    n2 = [e for e in slurm(report, "node-drain", "node_state") if e["node"] == "n2"]
    assert "draining" in [e["state"] for e in n2], n2
    assert drain["verdict"] != "fail", explain(drain)
    assert drain["verdict"] == "pass" and drain["recovery_class"] == "automatic", explain(drain)
    # the process evidence came from the nodes' own agents (the login node sees none)
    events_dir = out / "scenarios" / "node-drain" / "events"
    samplers = sorted(p.name for p in events_dir.glob("sampler*"))
    assert samplers == ["sampler-n1.jsonl", "sampler-n2.jsonl", "sampler.jsonl"]
    # the damage goes through the shared files; nothing restarts the job on a real cluster
    # (that needs a worker killed on its node), so the damage is never put to the test
    flip = scenario(report, "checkpoint-bit-flip")
    assert [e for e in events(report, "checkpoint-bit-flip", "fault") if e["kind"] == "injected"]
    verdicts = {
        f["check"]: (f["verdict"], f["message"])
        for ev in flip["evidence"].values()
        for f in ev["findings"]
    }
    verdict, message = verdicts["progress.damaged-checkpoint-refused"]
    assert verdict == "retest" and "never put to the test" in message, message
    assert os.path.isdir(out / "scenarios" / "node-drain" / "slurm-jobs")


@pytest.fixture(scope="module")
def harness_controls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The shrunk example plan's harness controls alone (its scenarios run in the default
    run, ``test_slurm_drills.py``)."""
    raw = shrunk(example_raw())
    raw["rounds"] = []
    return run_plan_cli(raw, tmp_path_factory.mktemp("slurm-ctl"), timeout=900)


def test_the_harness_controls_are_caught(harness_controls: dict[str, Any]) -> None:
    """The example plan's ``controls: {harness: all}``: each planted defect is caught by
    its check on the embedded Slurm cluster, and nothing of them is left."""
    from tests.test_slurm_embedded import leftovers

    report = harness_controls
    assert report["baseline"]["verdict"] == "pass"
    controls = [c for c in report["scenarios"] if c.get("expected_check")]
    got = {c["id"]: (c["expected_check"], c["caught"]) for c in controls}
    assert got == {
        "ctl-rollback-latest": ("progress.resume-point", True),
        "ctl-hide-checkpoints": ("progress.no-restart-from-zero", True),
        "ctl-stale-copy": ("resources.no-stale-replica", True),
    }, got
    ledgers = sorted(Path(report["_run_dir"]).glob("**/ledger.jsonl"))
    assert len(ledgers) == 4  # baseline, three controls
    for ledger in ledgers:
        assert leftovers(ledger) == [], ledger
