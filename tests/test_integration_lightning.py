"""Real drills of a PyTorch Lightning job (examples/lightning) through ``faultdrill run``:
2 ranks under torchrun, a torchdata StatefulDataLoader. A killed worker is recovered and
passes; a plain DataLoader (whose position Lightning cannot restore mid-epoch) and a
``StatefulDataLoader(shuffle=True)`` (whose order comes from an RNG the resume does not
restore) are caught by the sample ledger; a resume from a damaged newest checkpoint is
caught by the damaged-checkpoint check."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.drillkit import finding, item
from tests.examplekit import run_example

pytest.importorskip("pytorch_lightning")
pytest.importorskip("torchdata")
pytestmark = [pytest.mark.drill]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    only = ["kill-worker", "ctl-plain-dataloader", "ctl-shuffle-rng-not-restored",
            "ctl-trust-newest-dir"]  # fmt: skip
    return run_example("lightning", tmp_path_factory.mktemp("pl-drill"), only)


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


@pytest.mark.parametrize("control", ["ctl-plain-dataloader", "ctl-shuffle-rng-not-restored"])
def test_a_resume_that_changes_the_data_stream_is_caught_by_the_ledger(
    report: dict[str, Any], control: str
) -> None:
    ledger = finding(item(report, control), "progress.sample-ledger")
    assert ledger["verdict"] == "fail", ledger
    assert "consumed more than once in committed progress (replayed)" in ledger["message"]


def test_a_resume_from_a_damaged_newest_checkpoint_is_caught(report: dict[str, Any]) -> None:
    c = item(report, "ctl-trust-newest-dir")
    refused = finding(c, "progress.damaged-checkpoint-refused")
    assert refused["verdict"] == "fail", refused
    assert "loaded step-000008 after it was damaged (flip-bytes)" in refused["message"]
