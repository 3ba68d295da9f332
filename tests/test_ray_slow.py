"""The slow set of the Ray Train platform (``-m slow``): the faults the default run leaves
out, a negative control per evidence family caught under Ray Train, the example plan as a
user runs it, and a harness SIGKILL in the middle of a Ray drill followed by ``faultdrill
cleanup``.

One ``faultdrill run`` of :func:`tests.ray_plans.slow_raw` (GCS in memory: no fault
tolerance): Ray's own drain of n2, 30 % loss on n2's link ridden out, the GCS paused, the
GCS killed and restarted without fault tolerance (the cluster, and the job, are lost), and
the controls ``handover-stale`` (progress), ``stale-replica`` (resources) and
``optimizer-not-restored`` (results).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faultdrill.admit import load_plan
from faultdrill.engine.run import run_plan
from faultdrill.host import procfs
from faultdrill.judge.evaluate import RunResult
from faultdrill.platforms.ray.embedded import MARKER_ENV
from faultdrill.timeline import Timeline
from tests.drillkit import ROOT, cli_env, finding, item
from tests.ray_plans import default_raw, needs_ray_cluster, slow_raw
from tests.test_netns_kit import ledger_records, leftovers, write_plan

pytestmark = [pytest.mark.drill, pytest.mark.root, pytest.mark.slow, needs_ray_cluster]

Drill = tuple[RunResult, dict[str, Any]]


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Drill]:
    base = tmp_path_factory.mktemp("ray-slow")
    path = write_plan(base, slow_raw())
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(base / "state")
    try:
        result = run_plan(load_plan(path), base / "run", source=path)
        yield result, json.loads((base / "run" / "report.json").read_text())
    finally:
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old


def timeline(result: RunResult, sid: str, kind: str = "scenarios") -> Timeline:
    return Timeline.load(result.run_dir / kind / sid / "events")


def test_ray_drains_the_node_and_train_restarts_on_the_spare(drill: Drill) -> None:
    result, report = drill
    s = item(report, "drain")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    tl = timeline(result, "drain")
    t0 = tl.of("fault", "injected")[0].mono
    gcs = [e.get("state") for e in tl.of("platform", "node_state") if e.get("node") == "n2"]
    assert "draining" in gcs and gcs[-1] == "down"
    lost = [e for e in tl.of("platform", "node_lost") if e.mono > t0 and e.get("node") == "n2"]
    assert lost and lost[0].get("reason") == "AUTOSCALER_DRAIN_PREEMPTED"
    states = [e.get("state") for e in tl.of("platform", "ray_controller_state") if e.mono > t0]
    assert "PREEMPTING" in states and "RESTARTING" in states
    assert s["placement"]["resumed_on"] == ["n1", "n3"]
    assert finding(s, "resources.lost-node-isolated")["verdict"] == "pass"


def test_a_lossy_link_is_ridden_out(drill: Drill) -> None:
    _, report = drill
    s = item(report, "loss")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    assert s["questions"]["note"].startswith("no replica was lost")
    assert sum(r["packets"] for r in s["network"]["rules"]) > 0


def test_a_paused_gcs_is_ridden_out_and_the_report_says_no_fault_tolerance(drill: Drill) -> None:
    result, report = drill
    s = item(report, "gcs-pause")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    inj = timeline(result, "gcs-pause").of("fault", "injected")[0]
    assert inj.get("gcs_mode") == "memory"
    assert "no GCS fault tolerance" in inj.get("control_plane")


def test_a_gcs_restart_without_fault_tolerance_loses_the_job(drill: Drill) -> None:
    result, report = drill
    s = item(report, "gcs-lost")
    tl = timeline(result, "gcs-lost")
    inj = tl.of("fault", "injected")[0]
    assert inj.get("mode") == "stop" and inj.get("gcs_mode") == "memory"
    assert [e.get("state") for e in tl.of("platform", "job_state")][-1] == "failed"
    assert s["outcome"] == "failed" and finding(s, "expectation.job-outcome")["verdict"] == "pass"
    # The next item found the cluster restored (the GCS's memory was gone).
    nxt = timeline(result, "ctl-handover-stale", "controls").of("platform", "ray_cluster")[0]
    assert any("started again" in r for r in nxt.get("restored"))


@pytest.mark.parametrize(
    ("cid", "check"),
    [
        ("ctl-handover-stale", "progress.resume-point"),
        ("ctl-stale-replica", "resources.no-stale-replica"),
        ("ctl-optimizer-lost", "results.loss-matches-baseline"),
    ],
)
def test_each_evidence_family_catches_its_control_under_ray_train(
    drill: Drill, cid: str, check: str
) -> None:
    _, report = drill
    c = item(report, cid)
    assert c["caught"] is True, json.dumps(c["evidence"], indent=1)[:4000]
    assert finding(c, check)["verdict"] == "fail"
    if cid == "ctl-handover-stale":
        assert (
            "handed over step-000010, not the newest valid one (step-000020)"
            in (finding(c, check)["message"])
        )


def test_the_example_plan_passes_with_faultdrill_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = cli_env(tmp_path / "state")
    example = str(ROOT / "examples" / "ray.yaml")
    done = subprocess.run(
        [sys.executable, "-m", "faultdrill.cli", "run", example, "--out", str(out), "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert [s["verdict"] for s in report["scenarios"] if not s.get("control")] == ["pass", "pass"]


def _wait_injected(work: Path, harness: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    fault = work / "events" / "fault.jsonl"
    while time.monotonic() < deadline:
        if fault.exists() and '"kind":"injected"' in fault.read_text():
            return
        if harness.poll() is not None:
            raise AssertionError(f"the harness exited ({harness.returncode}) before the fault")
        time.sleep(0.5)
    raise AssertionError(f"no fault injected within {timeout} s")


def test_harness_sigkill_during_a_ray_drill_then_cleanup_leaves_nothing(tmp_path: Path) -> None:
    raw = default_raw()
    raw["rounds"] = [
        {
            "round": 1,
            "scenarios": [
                {
                    "id": "cut",
                    "fault": {"kind": "partition", "target": {"node": "n2"}, "for_s": 300},
                    "trigger": {"at_step": 12},
                }
            ],
        }
    ]
    path = write_plan(tmp_path, raw)
    out, env = tmp_path / "run", cli_env(tmp_path / "state")
    harness = subprocess.Popen(
        [sys.executable, "-m", "faultdrill.cli", "run", str(path), "--out", str(out), "--quiet"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_injected(out / "scenarios" / "cut", harness, 900)
        harness.send_signal(signal.SIGKILL)
        harness.wait(10)
        ledgers = sorted(out.rglob("ledger.jsonl"))
        # What makes this test mean something: the rule, the cluster and the job outlived it.
        recs = [r for led in ledgers for r in ledger_records(led)]
        assert any(r["kind"] == "iptables-rule" and not r["reverted"] for r in recs)
        daemons = [r for r in recs if r["kind"] == "ray-daemon" and not r["reverted"]]
        assert any(procfs.pids_with_env(MARKER_ENV, r["data"]["marker"]) for r in daemons)
        done = subprocess.run(
            [sys.executable, "-m", "faultdrill.cli", "cleanup", str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        for led in ledgers:
            assert leftovers(led, raw["task"]["id"]) == [], led
            for r in ledger_records(led):
                assert r["reverted"], (led, r["kind"], r["label"])
                if r["kind"] == "ray-daemon":
                    assert procfs.pids_with_env(MARKER_ENV, r["data"]["marker"]) == []
        assert procfs.pids_with_env("FAULTDRILL_TASK_ID", raw["task"]["id"]) == []
        assert not (tmp_path / "state" / "active").exists() or not any(
            (tmp_path / "state" / "active").iterdir()
        )
    finally:
        if harness.poll() is None:
            harness.kill()
        subprocess.run(
            [sys.executable, "-m", "faultdrill.cli", "cleanup", str(out)],
            env=env,
            capture_output=True,
            timeout=300,
            check=False,
        )


def test_a_cluster_given_by_address_is_drilled_from_one_of_its_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running cluster (here two Ray nodes on this host's loopback, started by the test)
    given by address: the job runs on it, a Train worker on this host is killed, Ray
    restarts the group, and the report judges it like any other."""
    from faultdrill.events import EventSink
    from faultdrill.host.cluster import NodeCluster
    from faultdrill.ledger import Ledger
    from faultdrill.platforms.local.platform import free_port
    from faultdrill.platforms.ray import embedded

    port = free_port()
    monkeypatch.setattr(embedded, "GCS_PORT", port)
    ledger = Ledger(tmp_path / "cluster" / "ledger.jsonl", run_id=f"t-ray-addr-{port}")
    sink = EventSink(tmp_path / "cluster" / "events", "cluster")
    nodes = NodeCluster(ledger, sink, ["n1", "n2"])
    ray = embedded.EmbeddedRay(
        nodes, ledger, sink, tmp_path / "cluster", head="n1", members=["n1", "n2"]
    )
    raw = default_raw()
    raw["resources"] = {
        "platform": "ray",
        "nodes": 2,
        "procs_per_node": 1,
        "ray": {"address": f"127.0.0.1:{port}"},
    }
    raw["task"]["env"] = {"FAULTDRILL_NODE_ADDR": "127.0.0.1"}  # the raylets' address
    raw["rounds"] = [
        {
            "round": 1,
            "scenarios": [
                {
                    "id": "kill-worker",
                    "fault": {"kind": "kill-worker", "target": {"rank": 1}},
                    "trigger": {"at_step": 15},
                }
            ],
        }
    ]
    path = write_plan(tmp_path, raw)
    try:
        ledger.activate()
        nodes.prepare()
        ray.start()
        result = run_plan(load_plan(path), tmp_path / "run", source=path)
    finally:
        ray.stop()
        nodes.teardown()
        assert ledger.revert_all() == []
        ledger.deactivate()
    s = result.items[0]
    assert s.verdict.value == "pass", s
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    q = item(report, "kill-worker")["questions"]
    assert "ray-train-controller" in q["worker_lost_by"]
    assert q["resumed_from"]["checkpoint"] == "step-000010"
