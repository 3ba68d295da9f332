"""The documented probe example (``examples/my_train.py``), judged by the real checks.

The example publishes checkpoints with a pointer file holding ``<name> <sha256>``; the
pointer contract (``faultdrill.readings.inventory.read_pointer``: its first token is the id) must
make a healthy run of it pass. Once in-process with the harness's real inventory (cheap),
and once as a real baseline under the engine: torchrun, sampler, inventory, cleanup.
"""

from __future__ import annotations

import hashlib
import os
import runpy
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultdrill.admit import load_plan
from faultdrill.checks import CHECKS, CheckContext, Verdict, run_checks
from faultdrill.engine.item import execute_item
from faultdrill.events import read_jsonl
from faultdrill.judge.artifacts import verify_artifacts
from faultdrill.judge.evaluate import evaluate_item
from faultdrill.readings.inventory import pointer_id, read_pointer, take_inventory
from faultdrill.readings.reference import Reference
from faultdrill.timeline import Timeline
from tests.drillkit import kill_task
from tests.records import as_json

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "my_train.py"
P = Verdict.PASS


def test_the_pointer_id_is_the_first_token(tmp_path: Path) -> None:
    assert pointer_id("step-000010\n") == "step-000010"
    assert pointer_id("step-000010.pt 5f3a9c\n") == "step-000010.pt"
    assert pointer_id("  \n") is None and pointer_id("") is None
    (tmp_path / "latest").write_text("ckpt-7 sha256:abc")
    assert read_pointer(tmp_path / "latest") == "ckpt-7"
    with pytest.raises(FileNotFoundError):
        read_pointer(tmp_path / "nope")


def test_a_healthy_run_of_the_example_passes_the_real_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt, events = tmp_path / "ckpt", tmp_path / "events"
    monkeypatch.setenv("FAULTDRILL_EVENTS_DIR", str(events))
    monkeypatch.setenv("FAULTDRILL_TASK_ID", "example")
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), str(ckpt)])
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    assert (ckpt / "latest").read_text().startswith("step-000030.pt ")  # "<name> <sha>"
    # what the harness records at the end of a run: the pointer and the inventory
    tl = Timeline.load(events)
    records, pointer = take_inventory(tl, ckpt, "latest", keep=3)
    assert pointer.to_json() == {"file": "latest", "target": "step-000030.pt", "problem": None}
    extra = [
        {"ts": 0.0, "mono": 1e9, "src": "harness", "kind": "ckpt_latest", "task": "example"}
        | pointer.to_json()
    ] + [
        {"ts": 0.0, "mono": 1e9, "src": "harness", "kind": "ckpt_inventory", "task": "example"}
        | rec.to_json()
        for rec in records
    ]
    [art] = verify_artifacts(tl, tmp_path)
    assert (art.path, art.present, art.matches) == (
        str(ckpt / "model-final.pt"),
        True,
        True,
    )
    extra.append(
        {"ts": 0.0, "mono": 1e9, "src": "harness", "kind": "artifact_verified", "task": "example"}
        | art.to_json()
    )
    raw = [r for path in sorted(events.glob("*.jsonl")) for r in read_jsonl(path)]
    tl = Timeline.from_records(raw + extra)
    plan = load_plan(ROOT / "src" / "faultdrill" / "plans" / "demo.yaml")
    ctx = CheckContext(tl, plan, None, Reference.from_timeline(tl))
    out = run_checks(ctx)
    judged = {
        f.check: (f.verdict, f.message)
        for cat in ("progress", "results")
        for f in out[cat].findings
    }
    assert {c for c in CHECKS if c.split(".")[0] in ("progress", "results")} == set(judged)
    assert {c: v for c, (v, _) in judged.items() if v is not P} == {}, judged
    assert judged["results.final-checkpoint-verifies"][1] == (
        "latest checkpoint step-000030.pt (step 30) verifies against its manifest"
    )
    assert judged["results.evaluation-matches-baseline"][1].startswith(
        "all 3 evaluated value(s) of committed progress (steps 10, 20, 30) bitwise equal"
    )


def test_artifacts_are_hashed_again_and_a_changed_file_says_so(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "model.pt").write_bytes(b"weights")
    good = hashlib.sha256(b"weights").hexdigest()
    recs = [
        {"ts": 1.0, "mono": 1.0, "src": "probe", "kind": "artifact", "task": "t", "rank": 0}
        | {"pid": 1, "name": "final-model", "path": path, "sha256": sha, "bytes": 7}
        for path, sha in (("out/model.pt", good), ("out/gone.pt", good), ("out/model.pt", "x"))
    ]
    found = verify_artifacts(Timeline.from_records(recs), tmp_path)
    assert [(r.path, r.present, r.matches, r.problem) for r in found] == [
        ("out/model.pt", True, False, "content differs from what the job reported"),
        ("out/gone.pt", False, False, "no such file"),
    ]
    assert found[0].sha256 == good and found[0].bytes == 7


def example_plan(tmp_path: Path) -> Path:
    """A one-node plan whose job is the example, next to the plan file (a relative
    script path, resolved against the plan's directory)."""
    raw: dict[str, Any] = {
        "version": 1,
        "task": {
            "id": f"example-{os.getpid()}",
            "config_version": "example-v1",
            "code_id": "examples/my_train.py",
            "entrypoint": {"script": "my_train.py", "args": ["{ckpt_dir}"]},
        },
        "data": {"snapshot": "randn-1000x8"},
        "resources": {"nodes": 1, "procs_per_node": 1, "max_restarts": 0},
        "checkpoint": {"dir": "ckpt", "every_steps": 10, "keep": 3, "latest_file": "latest"},
        "responsibility": {
            "injector": "a",
            "observer": "b",
            "recovery_operator": "c",
            "signer": "d",
        },
        "stop": {"max_wall_s": 90, "max_no_progress_s": 60},
        # a plan read from a file drills something; the tests here run its baseline only
        "rounds": [
            {
                "round": 1,
                "scenarios": [
                    {
                        "id": "kill-rank-0",
                        "fault": {"kind": "kill-worker", "target": {"rank": 0}},
                        "trigger": {"at_step": 15},
                    }
                ],
            }
        ],
    }
    path = tmp_path / "plans" / "plan.yaml"
    path.parent.mkdir()
    shutil.copy(EXAMPLE, path.parent / "my_train.py")
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.mark.drill
def test_the_example_as_a_baseline_under_the_engine_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAULTDRILL_STATE_DIR", str(tmp_path / "state"))
    plan = load_plan(example_plan(tmp_path))
    assert plan.task.entrypoint.script == str((tmp_path / "plans" / "my_train.py").resolve())
    try:
        work = execute_item(plan, "baseline", None, tmp_path / "run")
        tl = Timeline.load(work / "events")
        res = evaluate_item(plan, "baseline", None, work, Reference.from_timeline(tl), timeline=tl)
    finally:
        kill_task(plan.task.id)
    failing = [
        f.to_record().to_json()
        for e in res.evidence.values()
        for f in e.findings
        if f.verdict is not P
    ]
    assert res.verdict is P, failing
    assert as_json(res.inventory)["latest"] == {
        "file": "latest",
        "target": "step-000030.pt",
        "problem": None,
    }
