"""``data-outage`` for real on the local platform (root, FUSE, network namespaces): the
reference workload reads its samples from shard files in the item's data directory, served
through the FUSE mirror; the server fails every read with EIO for a few seconds mid-run.

* the scenario: the loader retries its reads, training stalls and goes on without a
  restart, and the sample ledger proves every sample consumed exactly once;
* the control (``bad_mode: skip-unreadable-shard``): the loader serves other samples in
  place of those it cannot read, and the sample ledger catches it;
* the harness SIGKILLed while the data server hangs: ``faultdrill cleanup`` leaves no FUSE
  mount, no stopped daemon and no job process.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultdrill.admit import load_plan
from faultdrill.engine.run import run_plan
from faultdrill.host import procfs
from faultdrill.host.mounts import MIRROR_FSTYPE, mounts_at
from faultdrill.host.storage import fuse_missing
from tests.drillkit import demo_raw, kill_task, wait_for
from tests.round3kit import Harness

pytestmark = [
    pytest.mark.drill,
    pytest.mark.skipif(
        os.geteuid() != 0 or bool(fuse_missing()),
        reason=f"needs root (netns, mounts) and FUSE: {fuse_missing()}",
    ),
]

OUTAGE_S = 4.0
#: in-process reads, so the job's data_read_* events are recorded
DATA = {"data_files": True, "loader_workers": 0}


def _fault(mode: str, for_s: float) -> dict[str, Any]:
    return {"kind": "data-outage", "mode": mode, "for_s": for_s}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("data-outage")
    raw = demo_raw()
    raw["task"]["id"] = f"t-{uuid.uuid4().hex[:10]}"
    raw["task"]["workload"].update(DATA)
    raw["rounds"] = [
        {
            "round": 3,
            "name": "data",
            "scenarios": [
                {
                    "id": "data-error",
                    "title": f"every read of the data fails (EIO) for {OUTAGE_S:g} s",
                    "fault": _fault("error", OUTAGE_S),
                    "trigger": {"at_step": 12},
                    "expected": {
                        "job": "completes",
                        "recovery": "automatic",
                        "resume": "no-restart",
                    },
                }
            ],
        }
    ]
    raw["controls"] = [
        {
            "id": "ctl-skip-unreadable",
            "title": "the loader skips the samples it cannot read",
            "workload": {"bad_mode": "skip-unreadable-shard"},
            "fault": _fault("error", 2.0),
            "trigger": {"at_step": 12},
            "expected_check": "progress.sample-ledger",
        }
    ]
    path = base / "plan.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(base / "state")
    plan = load_plan(path)
    try:
        run_plan(plan, base / "run", source=path)
        yield json.loads((base / "run" / "report.json").read_text())
    finally:
        kill_task(plan.task.id)
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old
    for item in (base / "run").glob("*/*/data"):
        assert not mounts_at(item, resolve=False), f"a mount was left on {item}"


def _item(report: dict[str, Any], item_id: str) -> dict[str, Any]:
    items = [*report["scenarios"], *report.get("controls", [])]
    return next(x for x in items if x["id"] == item_id)


def _finding(s: dict[str, Any], check: str) -> dict[str, Any]:
    return next(
        f
        for ev in [*s["evidence"].values(), s["expectation"]]
        for f in ev["findings"]
        if f["check"] == check
    )


def test_the_loader_retries_and_every_sample_is_read_once(report: dict[str, Any]) -> None:
    s = _item(report, "data-error")
    assert s["verdict"] == "pass", json.dumps(
        {k: s[k] for k in ("evidence", "expectation")}, indent=1
    )
    outage = _finding(s, "progress.data-outage")
    assert outage["verdict"] == "pass"
    assert "retried its reads" in outage["message"] and "without a restart" in outage["message"]
    assert outage["data"]["resumed_after_s"] < 3.0
    ledger = _finding(s, "progress.sample-ledger")
    assert ledger["verdict"] == "pass" and "exactly once" in ledger["message"]
    assert s["goodput"]["incarnations"] == 1


def test_the_control_that_skips_unreadable_data_is_caught(report: dict[str, Any]) -> None:
    c = _item(report, "ctl-skip-unreadable")
    ledger = _finding(c, "progress.sample-ledger")
    assert ledger["verdict"] == "fail", ledger
    assert _finding(c, "progress.data-outage")["verdict"] == "fail"
    assert c["caught"] is True, c


# --- the harness dies while the data server hangs ------------------------------------------


def _prepared(work: Path) -> dict[str, Any]:
    for line in (work / "events" / "fault.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev["kind"] == "prepared":
            return dict(ev)
    raise AssertionError("no prepared event")


def test_sigkill_harness_mid_hang_then_cleanup_frees_everything(tmp_path: Path) -> None:
    scenario = {
        "id": "data-hang",
        "title": "the data server hangs",
        "fault": _fault("hang", 120),
        "trigger": {"at_step": 8},
        "expected": {"job": "completes", "recovery": "automatic"},
    }
    h = Harness(tmp_path, scenario, steps=400, step_sleep_s=0.1, **DATA)
    data = h.work / "data"
    tag, daemon = "", 0
    try:
        h.wait_injected()
        prepared = _prepared(h.work)
        tag, daemon = str(prepared["source"]), int(prepared["daemon_pid"])
        assert procfs.proc_state(daemon) == "T", "precondition: the server hangs"
        h.sigkill()
        assert mounts_at(data, resolve=False), "precondition: the mirror is still mounted"
        text = h.cleanup()
        assert "undone" in text
        with open("/proc/self/mountinfo") as f:
            assert tag not in f.read(), "the FUSE mount was left"
        wait_for(lambda: procfs.proc_state(daemon) in (None, "Z"), 10, "the daemon to go")
        assert h.pids() == [], "job processes were left"
        assert len(list(data.glob("shard-*.bin"))) == 8  # the data itself is untouched
    finally:
        h.close()
        for m in mounts_at(data, resolve=False):  # never leave a mount behind, even failing
            if m["fstype"] == MIRROR_FSTYPE and m["source"] == tag:
                subprocess.run(["umount", "-l", "-c", str(data)], check=False)
        if daemon and procfs.proc_state(daemon) not in (None, "Z"):
            os.kill(daemon, 9)
