"""Real drills of a PyTorch Lightning job (examples/lightning) through ``faultdrill run``:
2 ranks under torchrun, a torchdata StatefulDataLoader. A killed worker is recovered and
passes; a plain DataLoader (whose position Lightning cannot restore mid-epoch) and a
``StatefulDataLoader(shuffle=True)`` (whose order comes from an RNG the resume does not
restore) are caught by the sample ledger; a resume from a damaged newest checkpoint is
caught by the damaged-checkpoint check. And the same job as one plain process: observed
ids, sealed saves, the checkpoint Lightning re-writes after a resume, a verified resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.drillkit import finding, item
from tests.examplekit import EXAMPLES, run_example

pytest.importorskip("pytorch_lightning")
pytest.importorskip("torchdata")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    only = ["kill-worker", "ctl-plain-dataloader", "ctl-shuffle-rng-not-restored",
            "ctl-trust-newest-dir"]  # fmt: skip
    return run_example("lightning", tmp_path_factory.mktemp("pl-drill"), only)


@pytest.mark.slow  # a torchrun drill of ~1.5 min; the default run keeps the one-process test
@pytest.mark.drill
def test_a_killed_worker_is_recovered_bitwise_loader_position_included(
    report: dict[str, Any],
) -> None:
    s = item(report, "kill-worker")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    resumed = s["questions"]["resumed_from"]
    assert (resumed["checkpoint"], resumed["step"], resumed["verified"]) == ("step-000004", 4, True)
    assert resumed["data_position"] == 4 * 16
    assert finding(s, "progress.sample-ledger")["verdict"] == "pass"
    assert finding(s, "results.final-model-digest")["verdict"] == "pass"


@pytest.mark.slow  # a torchrun drill of ~1.5 min; the default run keeps the one-process test
@pytest.mark.drill
@pytest.mark.parametrize("control", ["ctl-plain-dataloader", "ctl-shuffle-rng-not-restored"])
def test_a_resume_that_changes_the_data_stream_is_caught_by_the_ledger(
    report: dict[str, Any], control: str
) -> None:
    ledger = finding(item(report, control), "progress.sample-ledger")
    assert ledger["verdict"] == "fail", ledger
    assert "consumed more than once in committed progress (replayed)" in ledger["message"]


@pytest.mark.slow  # a torchrun drill of ~1.5 min; the default run keeps the one-process test
@pytest.mark.drill
def test_a_resume_from_a_damaged_newest_checkpoint_is_caught(report: dict[str, Any]) -> None:
    c = item(report, "ctl-trust-newest-dir")
    refused = finding(c, "progress.damaged-checkpoint-refused")
    assert refused["verdict"] == "fail", refused
    assert "loaded step-000008 after it was damaged (flip-bytes)" in refused["message"]


def _run_alone(cfg: dict[str, Any], tmp: Path) -> list[dict[str, Any]]:
    """The example job as one process (no torchrun); its probe events so far."""
    (tmp / "cfg.json").write_text(json.dumps(cfg))
    env = dict(os.environ, FAULTDRILL_EVENTS_DIR=str(tmp / "ev"), FAULTDRILL_CKPT_EVERY="2")
    env["FAULTDRILL_CKPT_DIR"] = str(tmp / "ckpt")
    script = EXAMPLES / "lightning" / "train.py"
    subprocess.run(
        [sys.executable, str(script), f"--workload-config={tmp / 'cfg.json'}"],
        env=env, cwd=tmp, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    lines = (tmp / "ev" / "probe-rank0.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines]


def test_one_process_reports_observed_ids_sealed_saves_and_a_verified_resume(
    tmp_path: Path,
) -> None:
    every = _run_alone({"steps": 4}, tmp_path)
    first = [e for e in every if e["kind"] != "ckpt_components"]
    kinds = [e["kind"] for e in first]
    assert kinds == ["run_start", "ckpt_none", "step", "step", "ckpt_save", "step", "step",
                     "ckpt_save", "run_end"]  # fmt: skip
    ids = [i for e in first if e["kind"] == "step" for a, b in e["samples"] for i in range(a, b)]
    assert len(ids) == len(set(ids)) == 4 * 8  # 4 per batch, 2 micro-batches per step
    save = first[-2]
    assert (save["id"], save["step"], save["data_position"]) == ("step-000004", 4, 32)
    assert save["path"] == str(tmp_path / "ckpt" / "step-000004" / "model.ckpt")
    assert (tmp_path / "ckpt" / "step-000004" / "manifest.json").is_file()
    both = _run_alone({"steps": 6}, tmp_path)[len(every) :]
    resumed = [e for e in both if e["kind"] != "ckpt_components"]
    load = resumed[1]
    assert (load["kind"], load["id"], load["step"], load["verified"], load["data_position"]) == (
        "ckpt_load",
        "step-000004",
        4,
        True,
        32,
    )
    # Lightning writes the checkpoint it resumed from again before its first step; the
    # integration reports that save too, sealed anew.
    assert [(e["kind"], e.get("id")) for e in resumed[2:4]] == [
        ("ckpt_save", "step-000004"),
        ("step", None),
    ]
    later = [
        i for e in resumed if e["kind"] == "step" for a, b in e["samples"] for i in range(a, b)
    ]
    assert len(later) == 16 and not set(later) & set(ids)
    [saved] = [
        e["components"]
        for e in every
        if e["kind"] == "ckpt_components" and e["id"] == "step-000004"
    ]
    [restored] = [e for e in both if e["kind"] == "ckpt_components" and e["phase"] == "restored"]
    assert sorted(saved) == ["model", "optimizer"]  # the example has no LR scheduler
    assert (restored["id"], restored["components"]) == ("step-000004", saved)
