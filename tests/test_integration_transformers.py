"""Real drills of a Hugging Face Trainer job (examples/hf_trainer) through ``faultdrill run``:
2 ranks under torchrun, a tiny GPT-2 built from a config. A killed worker is recovered and
passes; a resume that replays data (``ignore_data_skip``) is caught by the sample ledger;
a resume that trusts the newest ``checkpoint-N`` although its save never completed
(transformers#35782) is caught by the damaged-checkpoint check."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.drillkit import finding, item
from tests.examplekit import run_example

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytestmark = [pytest.mark.drill]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    only = ["kill-worker", "ctl-ignore-data-skip", "ctl-trust-newest-dir"]
    return run_example("hf_trainer", tmp_path_factory.mktemp("hf-drill"), only)


def test_a_killed_worker_is_recovered_bitwise_from_the_last_checkpoint(
    report: dict[str, Any],
) -> None:
    s = item(report, "kill-worker")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    resumed = s["questions"]["resumed_from"]
    assert (resumed["checkpoint"], resumed["step"], resumed["verified"]) == (
        "checkpoint-4",
        4,
        True,
    )
    assert resumed["data_position"] == 4 * 16  # 2 ranks x 4 per device x 2 micro-batches
    ledger = finding(s, "progress.sample-ledger")
    assert ledger["verdict"] == "pass" and "compared with the baseline" in ledger["message"]
    assert finding(s, "results.loss-matches-baseline")["message"].startswith(
        "all 32 committed (rank, step) losses are bitwise equal"
    )
    assert finding(s, "results.final-model-digest")["verdict"] == "pass"


def test_a_resume_that_does_not_skip_consumed_batches_is_caught_by_the_ledger(
    report: dict[str, Any],
) -> None:
    c = item(report, "ctl-ignore-data-skip")
    ledger = finding(c, "progress.sample-ledger")
    assert ledger["verdict"] == "fail", ledger
    assert "consumed more than once in committed progress (replayed)" in ledger["message"]
    assert finding(c, "progress.resume-point")["verdict"] == "pass"  # the step was right


def test_a_resume_from_an_incomplete_newest_checkpoint_is_caught(
    report: dict[str, Any],
) -> None:
    c = item(report, "ctl-trust-newest-dir")
    refused = finding(c, "progress.damaged-checkpoint-refused")
    assert refused["verdict"] == "fail", refused
    assert "loaded checkpoint-8 after it was damaged (remove-manifest)" in refused["message"]
    assert finding(c, "progress.checkpoint-verified")["verdict"] == "fail"
    assert c["questions"]["resumed_from"]["data_position"] == -1  # no manifest to read
