"""A plan is validated against its platform; what this machine lacks (root, FUSE) is
checked before a run. So plans load, and recorded runs are judged again, as a normal user;
a run needing root is refused before anything starts, naming the item and the fix; and the
demo leaves out what it cannot run and says so."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from faultdrill.admit import load_plan, plan_without
from faultdrill.cli import main
from faultdrill.engine.run import machine_problems, run_plan
from faultdrill.errors import DrillError
from faultdrill.judge.evaluate import load_run_plan
from tests.drillkit import DEMO, demo_plans_run, demo_raw

ROOT_ONLY = {"storage-read-only", "storage-full", "ctl-publish-before-durable"}


@pytest.fixture
def normal_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)


def test_the_demo_plan_loads_as_a_normal_user(normal_user: None) -> None:
    plan = load_plan(DEMO)
    assert len(plan.items()) == 18
    problems = machine_problems(plan, [i.id for i in plan.items()])
    assert set(problems) == ROOT_ONLY
    assert problems["storage-full"] == {
        "storage-full": "root (storage faults mount over the checkpoint directory)"
    }


def test_a_run_needing_root_is_refused_before_anything_runs(
    normal_user: None, tmp_path: Path
) -> None:
    plan = load_plan(DEMO)
    out = tmp_path / "run"
    with pytest.raises(DrillError) as err:
        run_plan(plan, out, only={"kill-worker", "storage-full"})
    msg = str(err.value)
    assert "cannot run 1 selected item(s)" in msg
    assert "storage-full: needs 'storage-full', which this machine lacks: root" in msg
    assert "--only" in msg
    assert not out.exists() or not any(out.iterdir())  # no baseline, no plan copy


def test_a_run_needing_fuse_names_each_missing_part_and_its_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = demo_raw()
    fault = {"kind": "storage-outage", "mode": "unreachable", "for_s": 2}
    scenario = {"id": "storage-unreachable", "fault": fault, "trigger": {"at_step": 18}}
    raw["rounds"] = [{"round": 3, "name": "storage", "scenarios": [scenario]}]
    raw["controls"] = []
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no fusermount
    monkeypatch.setitem(sys.modules, "fuse", None)  # no fusepy
    plan = load_plan(path)  # the platform can; this machine cannot
    with pytest.raises(DrillError) as err:
        run_plan(plan, tmp_path / "run")
    msg = str(err.value)
    assert "storage-unreachable: needs 'storage-unreachable', which this machine lacks:" in msg
    assert "fusermount (apt-get install -y --no-install-recommends fuse libfuse2)" in msg
    assert "fusepy (pip install 'faultdrill[storage]')" in msg


def test_a_fault_the_platform_cannot_do_is_still_refused_at_load(tmp_path: Path) -> None:
    raw = demo_raw()
    raw["resources"]["isolation"] = "none"
    raw["resources"]["spares"] = 0
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    from faultdrill.errors import PlanError

    with pytest.raises(PlanError) as err:
        load_plan(path)
    assert (
        "scenario link-jitter: fault 'link-loss' needs ability link-loss, which platform "
        "'local' with isolation 'none' cannot do; set resources.isolation: netns (as root)"
    ) in str(err.value)


def test_the_demo_as_a_normal_user_runs_what_it_can_and_says_why(
    normal_user: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    [plan] = demo_plans_run(tmp_path / "demo", monkeypatch)
    err = capsys.readouterr().err
    assert "running the demo without network isolation" in err
    assert "this machine lacks root (storage faults mount over the checkpoint directory)" in err
    ids = {i.id for i in plan.items()}
    assert ids == {
        "kill-worker",
        "control-plane-pause",
        "checkpoint-bit-flip",
        "checkpoint-dir-missing",
        "ctl-resume-ignored",
        "ctl-data-replayed",
        "ctl-skip-ahead",
        "ctl-optimizer-lost",
        "ctl-load-unverified",
        "ctl-stale-replica",
        "ctl-corrupt-loaded",
        "ctl-stale-eval",
        "ctl-control-plane-resume-ignored",
    }  # 4 scenarios and 9 controls, as the README says


def test_a_recorded_plan_is_read_back_as_a_normal_user(normal_user: None, tmp_path: Path) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "geteuid", lambda: 0)
        plan = load_plan(DEMO)
    (tmp_path / "plan.json").write_text(json.dumps(plan.model_dump(mode="json")))
    again = load_run_plan(tmp_path)
    assert {i.id for i in again.items()} == {i.id for i in plan.items()}


def test_plan_without_drops_items_and_empty_rounds() -> None:
    plan = load_plan(DEMO)
    left = plan_without(plan, {"node-loss", "ctl-resume-ignored"}, source="t")
    assert [r.round for r in left.rounds] == [1, 3]
    assert "ctl-resume-ignored" not in {c.id for c in left.controls}
    assert len(left.items()) == len(plan.items()) - 2


def test_validate_says_what_this_machine_cannot_run(
    normal_user: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(DEMO)]) == 0
    out = capsys.readouterr().out
    assert "valid plan for task demo-lm: 3 round(s), 8 scenario(s), 10 control(s)" in out
    assert "this machine cannot run storage-full: it needs 'storage-full', missing root" in out
    assert "cannot run kill-worker" not in out


def test_a_netns_run_as_a_normal_user_is_refused_before_out_is_written(
    normal_user: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main(["run", str(DEMO), "--out", str(out), "--quiet", "--only", "kill-worker"]) == 2
    err = capsys.readouterr().err
    assert "this machine cannot run this plan at all: isolation netns: network namespaces " in err
    assert "run faultdrill as root, or set resources.isolation: none" in err
    assert not out.exists()  # nothing written: no plan copy, no baseline


def test_validate_says_a_netns_plan_needs_root(
    normal_user: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(DEMO)]) == 0
    out = capsys.readouterr().out
    assert "this machine cannot run this plan at all: isolation netns: network namespaces " in out
