"""``data-outage`` for real on the local platform (root, FUSE, network namespaces): the
reference workload reads its samples from shard files in the item's data directory, served
through the FUSE mirror; the server fails every read with EIO for a few seconds mid-run.

* the scenario: the loader retries its reads, training stalls and goes on without a
  restart, and the sample ledger proves every sample consumed exactly once;
* the control (``bad_mode: skip-unreadable-shard``): the loader serves other samples in
  place of those it cannot read, and the sample ledger catches it;
* the harness SIGKILLed while the data server hangs: ``faultdrill cleanup`` leaves no FUSE
  mount, no stopped daemon and no job process.

The scenario and control run in one plan with the slow storage's items
(``tests/new_kinds_local.py``: one baseline).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from faultdrill.host import procfs
from faultdrill.host.mounts import MIRROR_FSTYPE, mounts_at
from faultdrill.host.storage import fuse_missing
from tests.drillkit import wait_for
from tests.new_kinds_local import DATA, Drill, data_outage_fault
from tests.round3kit import Harness

pytestmark = [
    pytest.mark.drill,
    pytest.mark.skipif(
        os.geteuid() != 0 or bool(fuse_missing()),
        reason=f"needs root (netns, mounts) and FUSE: {fuse_missing()}",
    ),
]


@pytest.fixture(scope="module")
def report(storage_data_drill: Drill) -> dict[str, Any]:
    """The data outage's items in the session's storage/data run
    (``tests/new_kinds_local.py``; it leaves no mount on an item's data directory)."""
    return storage_data_drill.report


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
        "fault": data_outage_fault("hang", 120),
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
