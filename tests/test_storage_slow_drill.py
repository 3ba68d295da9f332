"""``storage-slow`` against the reference workload, for real (root, FUSE, real torchrun in
network namespaces on the local platform): the checkpoint directory served through the FUSE
mirror, every write answered late across the step-20 save. A healthy job's save is slower and
training waits for it, but nothing fails and ``latest`` only ever names a whole checkpoint; the
known-bad ``publish-before-durable`` job is caught by the pointer watch (``latest`` named a
checkpoint whose state was not written yet). Then the harness is SIGKILLed mid-slowdown, and
``faultdrill cleanup`` must leave no FUSE mount, no daemon, no delay and no job process.
The scenario and control run in one plan with the data outage's items
(``tests/new_kinds_local.py``: one baseline, file-backed data)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from faultdrill.host import procfs
from faultdrill.host.mounts import MIRROR_FSTYPE, mounts_at
from faultdrill.host.storage import fuse_missing
from faultdrill.readings.inventory import verify_dir
from faultdrill.report.markdown import render_markdown
from faultdrill.report.model import Report
from tests.drillkit import wait_for
from tests.new_kinds_local import IO_STEPS, LATENCY_MS, STORAGE_SLOW, Drill
from tests.round3kit import Harness

pytestmark = [
    pytest.mark.drill,
    pytest.mark.skipif(
        os.geteuid() != 0 or bool(fuse_missing()),
        reason=f"needs root (netns, mounts) and FUSE: {fuse_missing()}",
    ),
]

#: the harness test's own slowdown: the same fault as the shared run's scenario
FAULT = STORAGE_SLOW


def _finding(s: dict[str, Any], check: str) -> dict[str, Any]:
    return next(
        f
        for ev in [*s["evidence"].values(), s["expectation"]]
        for f in ev["findings"]
        if f["check"] == check
    )


@pytest.fixture(scope="module")
def report(storage_data_drill: Drill) -> dict[str, Any]:
    """The slow storage's items in the session's storage/data run
    (``tests/new_kinds_local.py``; it leaves no FUSE mount or daemon)."""
    return storage_data_drill.report


def test_a_healthy_save_is_slower_blocks_training_and_publishes_only_whole(
    report: dict[str, Any],
) -> None:
    s = next(x for x in report["scenarios"] if x["id"] == "storage-slow")
    slow = _finding(s, "expectation.slow-storage-save")
    assert slow["verdict"] == "pass", json.dumps(slow, indent=1)
    assert 20 in slow["data"]["slowed_steps"]
    # a dozen or more requests, each 150 ms late: seconds, against a usual fraction of one
    assert slow["data"]["save_s"] > 1.0 > slow["data"]["usual_save_s"]
    assert slow["data"]["lost_s"] > 1.0
    assert "training was blocked" in slow["message"]
    pub = _finding(s, "progress.failed-save-not-published")
    assert pub["verdict"] == "pass", pub
    inv = s["inventory"]
    assert inv["failed_saves"] == []
    # the run's last checkpoint
    assert inv["latest"]["target"] == f"step-{IO_STEPS:06d}" and inv["latest"]["problem"] is None
    assert s["verdict"] == "pass", json.dumps(
        {k: s[k] for k in ("evidence", "expectation", "disruption")}, indent=1
    )
    text = render_markdown(Report.from_json(report))
    assert "storage-slow" in text and "ms per request" in text


def test_publish_before_durable_is_caught_on_slow_storage(report: dict[str, Any]) -> None:
    c = next(x for x in report["scenarios"] if x["id"] == "ctl-publish-before-durable-slow")
    assert c["caught"], json.dumps(c, indent=1)[:3000]
    pub = _finding(c, "progress.failed-save-not-published")
    assert pub["verdict"] == "fail"
    assert "after the storage slowdown began" in pub["message"]


# --- the harness dies mid-slowdown ----------------------------------------------------------


def _event(work: Path, kind: str) -> dict[str, Any]:
    for line in (work / "events" / "fault.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev["kind"] == kind:
            return dict(ev)
    raise AssertionError(f"no {kind} event")


def test_sigkill_harness_mid_slowdown_then_cleanup_frees_everything(tmp_path: Path) -> None:
    scenario = {
        "id": "storage-slow",
        "fault": {**FAULT, "for_s": 120},
        "trigger": {"at_step": 12},
        "expected": {"resume": "no-restart"},
    }
    h = Harness(tmp_path, scenario, steps=400, step_sleep_s=0.1)
    ckpt = h.work / "ckpt"
    tag, daemon = "", 0
    try:
        facts = h.wait_injected()
        assert facts["latency_ms"] == LATENCY_MS and facts["probe_write_s"] >= 0.3
        prepared = _event(h.work, "prepared")
        tag, daemon = str(prepared["source"]), int(prepared["daemon_pid"])
        h.sigkill()
        assert mounts_at(ckpt, resolve=False), "precondition: the mirror outlived the harness"
        text = h.cleanup()
        assert "undone" in text
        with open("/proc/self/mountinfo") as f:
            assert tag not in f.read(), "the FUSE mount was left"
        assert procfs.proc_state(daemon) in (None, "Z"), "the daemon was left"
        wait_for(lambda: h.pids() == [], 10, "no job process left")
        began = time.monotonic()
        (ckpt / "after").write_bytes(b"x")
        assert time.monotonic() - began < 0.25  # the directory itself, at full speed
        latest = (ckpt / "latest").read_text().strip()
        assert verify_dir(ckpt / latest) == (True, "")
    finally:
        h.close()
        for m in mounts_at(ckpt, resolve=False):  # never leave a mount behind, even failing
            if m["fstype"] == MIRROR_FSTYPE and m["source"] == tag:
                subprocess.run(["umount", "-l", "-c", str(ckpt)], check=False)
        if daemon and procfs.proc_state(daemon) not in (None, "Z"):
            os.kill(daemon, 9)
