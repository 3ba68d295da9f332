"""Round 3 of the demo, for real: a control-plane outage with a restart inside it, storage
outages across a checkpoint save, checkpoint corruption before a restart, and the negative
controls of those families (real torchrun, real mounts, real SIGSTOP; as root).

One run of the demo plan restricted to these items is shared by the assertions below.
``checkpoint-dir-missing``, ``storage-full`` (the storage family's second mode: its ENOSPC
is also drilled in the default run by test_faults_storage.py, harness SIGKILL mid-outage)
and the control-plane control run in the slow set.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faultdrill.admit import load_plan
from faultdrill.engine.run import run_plan
from faultdrill.report.markdown import render_markdown
from faultdrill.report.model import Report
from tests.drillkit import DEMO, item, kill_task

pytestmark = [
    pytest.mark.drill,
    pytest.mark.skipif(os.geteuid() != 0, reason="storage faults mount; netns needs root"),
]

DEFAULT = {
    "control-plane-pause",
    "storage-read-only",
    "checkpoint-bit-flip",
    "ctl-publish-before-durable",
    "ctl-corrupt-loaded",
}
SLOW = {"checkpoint-dir-missing", "storage-full", "ctl-control-plane-resume-ignored"}


def _run(base: Path, only: set[str]) -> Iterator[dict[str, Any]]:
    old = os.environ.get("FAULTDRILL_STATE_DIR")
    os.environ["FAULTDRILL_STATE_DIR"] = str(base / "state")
    plan = load_plan(DEMO)
    try:
        run_plan(plan, base / "run", source=DEMO, only=only)
        yield json.loads((base / "run" / "report.json").read_text())
    finally:
        kill_task(plan.task.id)
        if old is None:
            os.environ.pop("FAULTDRILL_STATE_DIR", None)
        else:
            os.environ["FAULTDRILL_STATE_DIR"] = old


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    yield from _run(tmp_path_factory.mktemp("round3"), DEFAULT)


def passed(s: dict[str, Any]) -> None:
    assert s["verdict"] == "pass", json.dumps(
        {k: s[k] for k in ("evidence", "expectation", "disruption")}, indent=1
    )
    assert s["recovery_class"] == "automatic"


def failing(s: dict[str, Any]) -> set[str]:
    return {
        f["check"]
        for ev in [*s["evidence"].values(), s["expectation"]]
        for f in ev["findings"]
        if f["verdict"] == "fail"
    }


def test_control_plane_outage_hangs_a_restart_until_the_store_returns(
    report: dict[str, Any],
) -> None:
    s = item(report, "control-plane-pause")
    passed(s)
    d = s["disruption"]
    # A hang, not a crash: the dead worker went unnoticed until the store came back.
    assert d["ending"]["kind"] == "hang", d
    assert d["ending"]["ended_by"] == "fault-end", d
    window = d["window"]
    assert window["end_s"] == pytest.approx(4.0, abs=1.0)
    restart = window["restart"]
    assert restart["probe_killed_at_s"] == pytest.approx(0.2, abs=0.5)
    assert restart["rendezvous_during_fault"] is False
    assert restart["rendezvous_at_s"] > window["end_s"]
    assert s["questions"]["resumed_from"]["checkpoint"] == "step-000010"
    g = s["goodput"]
    assert g["available"] and g["seconds"]["recovery"] >= 4.0  # the hang (4 s) is recovery time
    assert g["seconds"]["wasted_progress"] > 0 and g["recomputed_steps"] > 0


def test_storage_outage_skips_the_save_and_never_publishes_it(report: dict[str, Any]) -> None:
    assert_save_skipped_never_published(item(report, "storage-read-only"), errno=30)


def assert_save_skipped_never_published(s: dict[str, Any], errno: int) -> None:
    """The outage failed the step-20 save with ``errno``, which never became ``latest``;
    the job rode it out."""
    passed(s)
    inv = s["inventory"]
    assert inv["failed_saves"] and {f["errno"] for f in inv["failed_saves"]} == {errno}
    assert 20 in [f["step"] for f in inv["failed_saves"]]
    assert [p["latest"] for p in inv["pointer_observed"]] == ["step-000010", "step-000010"]
    assert inv["latest"]["target"] == "step-000025" and inv["latest"]["problem"] is None
    assert s["disruption"]["ending"]["kind"] == "unaffected"
    assert s["disruption"]["window"]["restart"] is None
    assert s["goodput"]["seconds"]["checkpoint_save"] > 0
    assert s["goodput"]["incarnations"] == 1


def test_bit_flip_is_refused_and_the_restart_falls_back(report: dict[str, Any]) -> None:
    s = item(report, "checkpoint-bit-flip")
    passed(s)
    resumed = s["questions"]["resumed_from"]
    assert resumed["checkpoint"] == "step-000010" and resumed["verified"] is True
    refused = next(
        f for f in s["evidence"]["progress"]["findings"]
        if f["check"] == "progress.damaged-checkpoint-refused"
    )  # fmt: skip
    assert "sha256" in refused["data"]["reason"]
    checkpoints = s["inventory"]["checkpoints"]
    damaged = [c for c in checkpoints if c.get("damaged_by")]
    assert [c["id"] for c in damaged] == ["step-000020"]
    assert damaged[0]["damaged_by"] == "corrupt-checkpoint (flip-bytes)"
    assert damaged[0]["written_by"]["inc"] == 0 and damaged[0]["verifies"] is not True
    assert [r["inc"] for r in damaged[0]["rejected_by"]] == [1]
    # the restart redid step 20 and saved it again, intact
    again = [c for c in checkpoints if c["id"] == "step-000020" and c["written_by"]["inc"] == 1]
    assert again and again[0]["verifies"] is True
    assert next(c for c in checkpoints if c["id"] == "step-000010")["loaded_by"] == [1]
    assert s["disruption"]["ending"]["kind"] == "crash"
    assert s["times"]["recomputed_steps"] >= 10  # steps 11..20+ were redone, and said so
    assert s["goodput"]["seconds"]["checkpoint_restore"] > 0


def test_publish_before_durable_is_caught(report: dict[str, Any]) -> None:
    s = item(report, "ctl-publish-before-durable")
    assert s["caught"] is True, failing(s)
    assert "progress.failed-save-not-published" in failing(s)


def test_unverified_load_of_a_damaged_checkpoint_is_caught(report: dict[str, Any]) -> None:
    s = item(report, "ctl-corrupt-loaded")
    assert s["caught"] is True, failing(s)
    assert {"progress.checkpoint-verified", "progress.resume-point"} <= failing(s)


def test_report_shows_inventory_goodput_and_how_it_ended(report: dict[str, Any]) -> None:
    text = render_markdown(Report.from_json(report))
    assert "**How the fault's disruption ended**" in text and "**hang**: progress stopped" in text
    assert "**Checkpoint inventory**" in text and "damaged by corrupt-checkpoint" in text
    assert "WASTED_PROGRESS_FROM_DISRUPTION" in text


@pytest.mark.slow
def test_missing_directory_full_storage_and_control_plane_control(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    for rep in _run(tmp_path_factory.mktemp("round3-slow"), SLOW):
        assert_save_skipped_never_published(item(rep, "storage-full"), errno=28)
        s = item(rep, "checkpoint-dir-missing")
        passed(s)
        assert s["questions"]["resumed_from"]["checkpoint"] == "step-000010"
        ctl = item(rep, "ctl-control-plane-resume-ignored")
        assert ctl["caught"] is True, failing(ctl)
