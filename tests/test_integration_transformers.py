"""Real drills of a Hugging Face Trainer job (examples/hf_trainer) through ``faultdrill run``:
2 ranks under torchrun, a tiny GPT-2 built from a config. A killed worker is recovered and
passes; a resume that replays data (``ignore_data_skip``) is caught by the sample ledger;
a resume that trusts the newest ``checkpoint-N`` although its save never completed
(transformers#35782) is caught by the damaged-checkpoint check. And the same job as one
plain process: observed ids, sealed saves, a verified resume."""

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

pytest.importorskip("transformers")
pytest.importorskip("accelerate")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    only = ["kill-worker", "ctl-ignore-data-skip", "ctl-trust-newest-dir"]
    return run_example("hf_trainer", tmp_path_factory.mktemp("hf-drill"), only)


@pytest.mark.slow  # a torchrun drill of ~1.5 min; the default run keeps the one-process test
@pytest.mark.drill
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


@pytest.mark.slow  # a torchrun drill of ~1.5 min; the default run keeps the one-process test
@pytest.mark.drill
def test_a_resume_that_does_not_skip_consumed_batches_is_caught_by_the_ledger(
    report: dict[str, Any],
) -> None:
    c = item(report, "ctl-ignore-data-skip")
    ledger = finding(c, "progress.sample-ledger")
    assert ledger["verdict"] == "fail", ledger
    assert "consumed more than once in committed progress (replayed)" in ledger["message"]
    assert finding(c, "progress.resume-point")["verdict"] == "pass"  # the step was right


@pytest.mark.slow  # a torchrun drill of ~1.5 min; the default run keeps the one-process test
@pytest.mark.drill
def test_a_resume_from_an_incomplete_newest_checkpoint_is_caught(
    report: dict[str, Any],
) -> None:
    c = item(report, "ctl-trust-newest-dir")
    refused = finding(c, "progress.damaged-checkpoint-refused")
    assert refused["verdict"] == "fail", refused
    assert "loaded checkpoint-8 after it was damaged (remove-manifest)" in refused["message"]
    assert finding(c, "progress.checkpoint-verified")["verdict"] == "fail"
    assert c["questions"]["resumed_from"]["data_position"] == -1  # no manifest to read


@pytest.mark.drill  # one kill drill, ~1 min
def test_a_trainer_with_dataloader_workers_resumes_every_part_it_saved(tmp_path: Path) -> None:
    """dataloader_num_workers=2: the kill drill passes, and every part of checkpoint-4
    (model, optimizer, LR scheduler, each rank's RNG state) comes back as saved."""
    report = run_example("hf_trainer", tmp_path, ["kill-worker"], {"workers": 2})
    s = item(report, "kill-worker")
    assert s["verdict"] == "pass", json.dumps(s["evidence"], indent=1)[:4000]
    restored = finding(s, "progress.restored-components")
    assert restored["message"] == (
        "2 load(s) restored every saved part as saved "
        "(model, optimizer, rng, scheduler; ranks 0, 1)"
    )


def _run_alone(cfg: dict[str, Any], tmp: Path, *, probed: bool = True) -> list[dict[str, Any]]:
    """The example job as one process (no torchrun); its probe events so far (none when
    not ``probed``: run without faultdrill's environment)."""
    (tmp / "cfg.json").write_text(json.dumps(cfg))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTDRILL_")}
    env.update(FAULTDRILL_CKPT_EVERY="2", FAULTDRILL_CKPT_DIR=str(tmp / "ckpt"))
    if probed:
        env["FAULTDRILL_EVENTS_DIR"] = str(tmp / "ev")
    script = EXAMPLES / "hf_trainer" / "train.py"
    subprocess.run(
        [sys.executable, str(script), f"--workload-config={tmp / 'cfg.json'}"],
        env=env, cwd=tmp, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    if not probed:
        return []
    lines = (tmp / "ev" / "probe-rank0.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines]


def test_instrument_is_inert_without_faultdrill(tmp_path: Path) -> None:
    """No FAULTDRILL_EVENTS_DIR: the Trainer saves and resumes as it would alone, and
    nothing of faultdrill's lands in its output_dir (no manifest, no pointer, no events)."""
    _run_alone({"steps": 2}, tmp_path, probed=False)
    _run_alone({"steps": 4}, tmp_path, probed=False)  # resumes from checkpoint-2
    ckpt = tmp_path / "ckpt"
    names = sorted(p.relative_to(ckpt).as_posix() for p in ckpt.rglob("*"))
    assert "checkpoint-4/model.safetensors" in names
    assert not [n for n in names if n == "latest" or n.endswith("manifest.json")], names
    assert not (tmp_path / "ev").exists()
    # without manifests to verify, the resume pick is the Trainer's own: the newest
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    from faultdrill.integrations.transformers import instrument

    model = GPT2LMHeadModel(GPT2Config(vocab_size=8, n_positions=4, n_embd=4, n_layer=1, n_head=1))
    args = TrainingArguments(output_dir=str(ckpt), use_cpu=True, report_to="none")
    trainer = Trainer(model=model, args=args)
    with pytest.MonkeyPatch.context() as env:
        env.delenv("FAULTDRILL_EVENTS_DIR", raising=False)
        fd = instrument(trainer)
    assert fd.verified_checkpoint() == str(ckpt / "checkpoint-4")
    assert not fd.instrumented and fd not in trainer.callback_handler.callbacks


def test_one_process_reports_observed_ids_sealed_saves_and_a_verified_resume(
    tmp_path: Path,
) -> None:
    every = _run_alone({"steps": 4}, tmp_path)
    first = [e for e in every if e["kind"] != "ckpt_components"]
    assert [e["kind"] for e in first] == ["run_start", "ckpt_none"] + ["step"] * 2 + [
        "ckpt_save"
    ] + ["step"] * 2 + ["ckpt_save", "run_end"]
    assert first[0]["sample_ids"] == "observed"
    steps = [e for e in first if e["kind"] == "step"]
    ids = [i for e in steps for a, b in e["samples"] for i in range(a, b)]
    assert len(ids) == len(set(ids)) == 4 * 8  # 4 per batch, 2 micro-batches per step
    assert ids != list(range(32))  # the sampler's order, not a counter
    save = first[-2]
    assert (save["id"], save["step"], save["data_position"]) == ("checkpoint-4", 4, 32)
    assert (tmp_path / "ckpt" / "latest").read_text().split() == ["checkpoint-4", save["sha256"]]
    assert (
        json.loads((tmp_path / "ckpt" / "checkpoint-4" / "manifest.json").read_text())["file"]
        == "model.safetensors"
    )
    both = _run_alone({"steps": 6}, tmp_path)[len(every) :]
    resumed = [e for e in both if e["kind"] != "ckpt_components"]
    load = resumed[1]
    assert (load["kind"], load["id"], load["step"], load["verified"], load["data_position"]) == (
        "ckpt_load",
        "checkpoint-4",
        4,
        True,
        32,
    )
    later = [
        i for e in resumed if e["kind"] == "step" for a, b in e["samples"] for i in range(a, b)
    ]
    assert len(later) == 16 and not set(later) & set(ids)
    assert [e["step"] for e in resumed if e["kind"] == "step"] == [5, 6]
    _assert_parts_restored_as_saved(every, both)


def _assert_parts_restored_as_saved(
    first: list[dict[str, Any]], resumed: list[dict[str, Any]]
) -> None:
    """checkpoint-4's parts as saved by the first run equal those the resume restored:
    model, optimizer and scheduler with the load, the RNG state at the first step."""
    [saved] = [
        e["components"]
        for e in first
        if e["kind"] == "ckpt_components" and e["id"] == "checkpoint-4"
    ]
    assert sorted(saved) == ["model", "optimizer", "rng", "scheduler"]
    restored: dict[str, str] = {}
    for e in resumed:
        if e["kind"] == "ckpt_components" and e["phase"] == "restored":
            assert e["id"] == "checkpoint-4"
            restored.update(e["components"])
    assert restored == saved
