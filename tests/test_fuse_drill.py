"""``storage-outage`` mode ``unreachable`` against the reference workload, for real: the
checkpoint directory served through the FUSE mirror for the whole scenario, its server
unreachable across the step-20 save (real torchrun in network namespaces, real FUSE; as
root). Then the harness is SIGKILLed while the server hangs with a save blocked on it, and
``faultdrill cleanup`` must leave no FUSE mount, no stopped or D-state process, no daemon and
no job process.

Measured here (2 cores): ``hang`` (SIGSTOPped daemon, for 2.5 s) blocks rank 0 inside the
step-20 save, and rank 1 waits at the barrier after it; the fault's end releases it (well
inside the 30 s gloo timeout), the save then completes and is published: nothing fails,
training stalls about as long as the outage. ``error`` (EIO, slow set) fails the save at once;
it is skipped and ``latest`` stays at step 10 until step 30.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
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
from faultdrill.readings.inventory import verify_dir
from faultdrill.report.markdown import render_markdown
from faultdrill.report.model import Report
from tests.drillkit import demo_raw, kill_task, wait_for
from tests.round3kit import Harness

pytestmark = [
    pytest.mark.drill,
    pytest.mark.skipif(
        os.geteuid() != 0 or bool(fuse_missing()),
        reason=f"needs root (netns, mounts) and FUSE: {fuse_missing()}",
    ),
]

HANG_S = 2.5


def _scenario(server: str, for_s: float) -> dict[str, Any]:
    return {
        "id": f"storage-unreachable-{server}",
        "title": f"the checkpoint server is unreachable ({server}) for {for_s:g} s across the "
        "step-20 save",
        "fault": {
            "kind": "storage-outage",
            "mode": "unreachable",
            "server": server,
            "for_s": for_s,
        },
        "trigger": {"at_step": 18},
        "expected": {"job": "completes", "recovery": "automatic", "resume": "no-restart"},
    }


def _run(base: Path, scenario: dict[str, Any]) -> Iterator[dict[str, Any]]:
    raw = demo_raw()
    raw["task"]["id"] = f"t-{uuid.uuid4().hex[:10]}"
    raw["rounds"] = [{"round": 3, "name": "storage", "scenarios": [scenario]}]
    raw["controls"] = []
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


def _no_fuse_left(run: Path) -> None:
    """No mount of the mirror left anywhere, and its daemon gone (from the prepared event)."""
    for events in run.glob("scenarios/*/events/fault.jsonl"):
        for line in events.read_text().splitlines():
            ev = json.loads(line)
            if ev["kind"] == "prepared" and ev.get("mode") == "unreachable":
                with open("/proc/self/mountinfo") as f:
                    assert ev["source"] not in f.read()
                assert procfs.proc_state(int(ev["daemon_pid"])) in (None, "Z")


def _passed(s: dict[str, Any]) -> None:
    assert s["verdict"] == "pass", json.dumps(
        {k: s[k] for k in ("evidence", "expectation", "disruption")}, indent=1
    )
    assert s["recovery_class"] == "automatic"


def _finding(s: dict[str, Any], check: str) -> dict[str, Any]:
    return next(
        f
        for ev in [*s["evidence"].values(), s["expectation"]]
        for f in ev["findings"]
        if f["check"] == check
    )


@pytest.fixture(scope="module")
def hang(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("fuse-hang")
    for report in _run(base, _scenario("hang", HANG_S)):
        yield report
        _no_fuse_left(base / "run")


def test_hung_server_blocks_the_save_until_the_fault_ends(hang: dict[str, Any]) -> None:
    s = next(x for x in hang["scenarios"] if x["id"] == "storage-unreachable-hang")
    _passed(s)
    inv = s["inventory"]
    # nothing failed: the save waited for the server, and only the end of the fault released it
    assert inv["failed_saves"] == []
    overlap = _finding(s, "expectation.outage-overlapped-save")
    assert overlap["verdict"] == "pass" and overlap["data"]["blocked_steps"] == [20]
    assert "started during the outage and blocked until it ended" in overlap["message"]
    # the pointer never named the blocked save while it was blocked; the end state verifies
    assert [p["latest"] for p in inv["pointer_observed"]] == ["step-000010", "step-000010"]
    assert all(p["verifies"] for p in inv["pointer_observed"])
    assert inv["latest"]["target"] == "step-000040" and inv["latest"]["problem"] is None
    step20 = next(c for c in inv["checkpoints"] if c["id"] == "step-000020")
    assert step20["verifies"] is True and step20["written_by"]["inc"] == 0
    assert not any(c.get("loaded_by") for c in inv["checkpoints"])  # nothing was loaded
    # a hang of the save is a stall of training, released by the fault's end
    d = s["disruption"]
    assert d["ending"]["kind"] == "stall", d
    assert "when the fault ended" in d["ending"]["how"]
    assert d["ending"]["progress_resumed_at_s"] == pytest.approx(HANG_S, abs=0.6)
    assert d["window"]["training_affected"] is True and d["window"]["restart"] is None
    assert s["goodput"]["incarnations"] == 1
    assert s["goodput"]["seconds"]["checkpoint_save"] >= HANG_S - 0.6
    text = render_markdown(Report.from_json(hang))
    assert "storage-unreachable-hang" in text and "STALL" in text.upper()


@pytest.mark.slow
def test_erroring_server_fails_the_save_which_is_skipped(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    base = tmp_path_factory.mktemp("fuse-error")
    for report in _run(base, _scenario("error", 1.0)):
        s = next(x for x in report["scenarios"] if x["id"] == "storage-unreachable-error")
        _passed(s)
        inv = s["inventory"]
        assert {f["errno"] for f in inv["failed_saves"]} == {5}  # EIO
        assert 20 in [f["step"] for f in inv["failed_saves"]]
        assert [p["latest"] for p in inv["pointer_observed"]] == ["step-000010", "step-000010"]
        assert inv["latest"]["target"] == "step-000040" and inv["latest"]["problem"] is None
        assert "step-000020" not in [c["id"] for c in inv["checkpoints"]]
        assert s["disruption"]["ending"]["kind"] == "unaffected"
        assert s["goodput"]["incarnations"] == 1
    _no_fuse_left(base / "run")


# --- the harness dies while the server hangs ---------------------------------------------------


def _event(work: Path, kind: str) -> dict[str, Any]:
    for line in (work / "events" / "fault.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev["kind"] == kind:
            return dict(ev)
    raise AssertionError(f"no {kind} event")


def _steps(work: Path, rank: int) -> list[int]:
    path = work / "events" / f"probe-rank{rank}.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(x)["step"] for x in lines if '"kind":"step"' in x]


def test_sigkill_harness_mid_hang_then_cleanup_frees_everything(tmp_path: Path) -> None:
    scenario = _scenario("hang", 120)
    scenario["trigger"] = {"at_step": 12}  # the step-20 save comes during the outage
    h = Harness(tmp_path, scenario, steps=400, step_sleep_s=0.1)
    ckpt = h.work / "ckpt"
    tag, daemon = "", 0
    try:
        h.wait_injected()
        prepared = _event(h.work, "prepared")
        tag, daemon = str(prepared["source"]), int(prepared["daemon_pid"])
        wait_for(lambda: 20 in _steps(h.work, 0), 30, "step 20")
        time.sleep(0.7)
        assert max(_steps(h.work, 0)) == 20, "precondition: rank 0 is blocked in the save"
        assert procfs.proc_state(daemon) == "T", "precondition: the server hangs"
        h.sigkill()
        assert procfs.proc_state(daemon) == "T" and mounts_at(ckpt, resolve=False)
        text = h.cleanup()
        assert "undone" in text
        with open("/proc/self/mountinfo") as f:
            assert tag not in f.read(), "the FUSE mount was left"
        assert procfs.proc_state(daemon) in (None, "Z"), "the daemon was left"
        assert h.pids() == [], "job processes were left"
        # Every write that went through the mirror is in the directory itself. The cleanup
        # resumed the server before the job was killed, so the blocked step-20 save may have
        # completed and been published: whatever ``latest`` names is whole.
        latest = (ckpt / "latest").read_text().strip()
        assert latest >= "step-000010"
        assert verify_dir(ckpt / latest) == (True, "")
    finally:
        h.close()
        for m in mounts_at(ckpt, resolve=False):  # never leave a mount behind, even failing
            if m["fstype"] == MIRROR_FSTYPE and m["source"] == tag:
                subprocess.run(["umount", "-l", "-c", str(ckpt)], check=False)
        if daemon and procfs.proc_state(daemon) not in (None, "Z"):
            os.kill(daemon, 9)
