"""Helpers for the namespace-cluster tests (no tests here).

* plans on ``isolation: netns``, with the reference workload or with a tiny stdlib worker
  that starts in milliseconds (for the crash tests, which only need a running job);
* a harness that runs ONE scenario without its baseline (``python -m tests.test_netns_kit
  PLAN OUT``), so that a test can SIGKILL it while the fault is active;
* :func:`leftovers`: everything a ledger recorded that still exists on the machine;
* a bare cluster (:func:`make`, the ``cluster`` fixture) and a fault context on it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultdrill.events import EventSink
from faultdrill.faults.api import FaultContext
from faultdrill.host import procfs
from faultdrill.host.linux import link_exists, netns_exists, netns_unavailable, ns_run
from faultdrill.ledger import Ledger
from faultdrill.plan import Resources
from faultdrill.platforms.local.netns import NetnsPlatform
from faultdrill.platforms.local.platform import LocalPlatform
from tests.drillkit import ROOT, demo_raw

needs_netns = pytest.mark.skipif(
    netns_unavailable() is not None, reason=f"no namespace cluster here: {netns_unavailable()}"
)

TINY_WORKER = '''\
"""A worker that only reports steps (no torch): starts in milliseconds."""
import os, sys, time
from faultdrill.probe import probe_from_env
probe = probe_from_env(int(os.environ.get("RANK", "0")))
probe.run_start(world_size=int(os.environ.get("WORLD_SIZE", "1")))
probe.no_checkpoint()
for step in range(1, int(sys.argv[1]) + 1):
    probe.step(step, 1.0, [2 * step + probe.rank])
    time.sleep(0.1)
probe.run_end(final_step=step)
'''


RES = Resources(isolation="netns", nodes=2, spares=1)


def make(tmp_path: Path, run_id: str | None = None) -> NetnsPlatform:
    """A namespace cluster of :data:`RES`, not brought up yet."""
    # unique per call: namespace names derive from the run id, and two test sessions at
    # once (a CI run beside a developer's) must not collide
    run_id = run_id or f"t-netns-{uuid.uuid4().hex[:12]}"
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id=run_id)
    sink = EventSink(tmp_path / "events", "t")
    platform = LocalPlatform.variant_for(RES)(RES, tmp_path, ledger, sink)
    assert isinstance(platform, NetnsPlatform)
    return platform


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[NetnsPlatform]:
    """A cluster brought up for one test, torn down and its ledger replayed after it."""
    platform = make(tmp_path)
    try:
        platform.prepare()
        yield platform
    finally:
        platform.teardown()
        platform.ledger.revert_all()


def ctx_of(platform: NetnsPlatform) -> FaultContext:
    return FaultContext(
        platform=platform, ledger=platform.ledger, sink=platform.sink, scenario_id="unit"
    )


def netns_raw(*, spares: int = 0, **timeouts: Any) -> dict[str, Any]:
    """The demo plan on the namespace cluster, with a unique task id and no items yet."""
    raw = demo_raw()
    raw["task"]["id"] = f"t-{uuid.uuid4().hex[:10]}"
    raw["resources"].update(isolation="netns", nodes=2, spares=spares)
    raw["resources"]["timeouts"] = dict(timeouts)
    raw["observation"]["settle_s"] = 0.5
    raw["rounds"] = []
    raw["controls"] = []
    return raw


def tiny_raw(tmp_path: Path, fault: dict[str, Any], *, steps: int = 100000) -> dict[str, Any]:
    """A plan whose job is the tiny worker, with one scenario injecting ``fault`` at step 2."""
    script = tmp_path / "tiny_worker.py"
    script.write_text(TINY_WORKER)
    raw = netns_raw(spares=1)
    raw["task"]["entrypoint"] = {"script": str(script), "args": [str(steps)]}
    raw["task"]["workload"] = {}
    raw["rounds"] = [
        {
            "round": 1,
            "scenarios": [{"id": "sc", "fault": fault, "trigger": {"at_step": 2}}],
        }
    ]
    return raw


def write_plan(tmp_path: Path, raw: dict[str, Any]) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def start_harness(plan: Path, out: Path, state: Path) -> subprocess.Popen[bytes]:
    """Run the plan's first scenario (no baseline) in a child process: the harness."""
    env = {**os.environ, "FAULTDRILL_STATE_DIR": str(state)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.test_netns_kit", str(plan), str(out)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def events(work: Path, stream: str) -> list[dict[str, Any]]:
    path = work / "events" / f"{stream}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def wait_injected(work: Path, proc: subprocess.Popen[bytes], timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [e for e in events(work, "fault") if e["kind"] in ("injected", "inject_failed")]
        if found:
            assert found[0]["kind"] == "injected", found[0]
            return found[0]
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            raise AssertionError(f"harness exited ({proc.returncode}) before injecting: {out}")
        time.sleep(0.1)
    raise AssertionError(f"no injection within {timeout} s")


def ledger_records(path: Path) -> list[dict[str, Any]]:
    """The ledger's entries (last version of each record), with their reverted flag."""
    out: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec["op"] == "record":
            prev = out.get(rec["id"], {})
            out[rec["id"]] = {**rec, "reverted": prev.get("reverted", False)}
        elif rec["op"] == "reverted":
            out[rec["id"]]["reverted"] = True
    return list(out.values())


def _ns_held(inode: int) -> list[int]:
    """Pids (or threads) whose network namespace is this inode: it is still alive. Once
    ours is gone the kernel may give its inode number to a namespace made since (another
    drill running beside this test): a namespace that has a name now is not our leftover,
    ours was deleted by name."""
    named = Path("/run/netns")
    with contextlib.suppress(OSError):
        for ns in named.iterdir():
            with contextlib.suppress(OSError):
                if ns.stat().st_ino == inode:
                    return []
    held = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        for path in [f"/proc/{entry.name}/ns/net"]:
            try:
                if os.stat(path).st_ino == inode:
                    held.append(int(entry.name))
            except OSError:
                continue
    return held


def leftovers(ledger: Path, task_id: str) -> list[str]:
    """What the drill created that still exists: namespaces (by name, and by inode: any
    process still inside one), veths and bridges, iptables rules, qdiscs, links left down,
    frozen or remaining cgroups, and any process of the task."""
    left = []
    for rec in ledger_records(ledger):
        kind, data = rec["kind"], rec["data"]
        if kind == "netns":
            if netns_exists(data["name"]):
                left.append(f"namespace {data['name']}")
            if data.get("inode") and _ns_held(int(data["inode"])):
                left.append(f"namespace {data['name']} still held by a process")
        elif kind == "netns-link" and link_exists(data["ns"], data["name"]):
            left.append(f"link {data['name']} in {data['ns']}")
        elif kind == "iptables-rule" and netns_exists(data["ns"]):
            check = ns_run(
                data["ns"], ["iptables", "-w", "-C", data["chain"], *data["rule"]], check=False
            )
            if check.returncode == 0:
                left.append(f"iptables rule {data['tag']} in {data['ns']}")
        elif kind == "tc-qdisc" and link_exists(data["ns"], data["dev"]):
            shown = ns_run(data["ns"], ["tc", "qdisc", "show", "dev", data["dev"]], check=False)
            if "tbf" in shown.stdout:
                left.append(f"tbf on {data['dev']} in {data['ns']}")
        elif kind == "link-down" and link_exists(data["ns"], data["dev"]):
            shown = ns_run(data["ns"], ["ip", "link", "show", "dev", data["dev"]], check=False)
            if ",UP" not in shown.stdout and "<UP" not in shown.stdout:
                left.append(f"link {data['dev']} left down in {data['ns']}")
        elif kind in ("cgroup", "freeze"):
            group = procfs.Cgroup(Path(data["path"]))
            if group.exists():
                left.append(f"cgroup {data['path']} ({group.state()})")
    frozen = [p for p in procfs.pids_with_env("FAULTDRILL_TASK_ID", task_id)]
    if frozen:
        states = {p: procfs.proc_state(p) for p in frozen}
        left.append(f"processes of the task: {states}")
    return left


def cleanup(state: Path) -> str:
    env = {**os.environ, "FAULTDRILL_STATE_DIR": str(state)}
    done = subprocess.run(
        [sys.executable, "-m", "faultdrill.cli", "cleanup"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def kill_task(task_id: str) -> None:
    for pid in procfs.pids_with_env("FAULTDRILL_TASK_ID", task_id):
        procfs.kill_checked(pid, None, 9)


def _main(plan_path: str, out: str) -> None:
    from faultdrill.admit import load_plan
    from faultdrill.engine.item import execute_item

    plan = load_plan(plan_path)
    execute_item(plan, "scenario", plan.scenarios()[0], Path(out))


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
