"""The plan is validated at load: each bad plan gives one clear error naming file, field, fix."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultdrill.cli import main
from faultdrill.errors import PlanError
from faultdrill.plan import load_plan, parse_plan, plan_schema

DEMO = Path(__file__).resolve().parents[1] / "src" / "faultdrill" / "plans" / "demo.yaml"


def demo_raw() -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load(DEMO.read_text())
    return raw


def write(tmp_path: Path, raw: Any) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw) if not isinstance(raw, str) else raw)
    return path


def error_of(tmp_path: Path, raw: Any) -> PlanError:
    with pytest.raises(PlanError) as info:
        load_plan(write(tmp_path, raw))
    return info.value


def test_demo_plan_is_valid_and_frozen() -> None:
    plan = load_plan(DEMO)
    assert plan.task.id == "demo-lm"
    ids = [s.id for s in plan.scenarios()]
    assert ids[0] == "kill-worker" and {"link-jitter", "node-loss"} <= set(ids)
    with pytest.raises(Exception, match="frozen"):
        plan.task.id = "other"  # type: ignore[misc]


def mutate(path: str, value: Any) -> dict[str, Any]:
    raw = demo_raw()
    node: Any = raw
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if k.isdigit() else node[k]
    last = keys[-1]
    if value is KeyError:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return raw


@pytest.mark.parametrize(
    ("path", "value", "where", "phrase"),
    [
        ("task.entrypont", {"module": "x"}, "task.entrypont", "unknown key 'entrypont'"),
        ("resources.nodes", "two", "resources.nodes", "must be a number, not the string 'two'"),
        ("resources.nodes", 0, "resources.nodes", "greater than or equal to 1"),
        ("responsibility", KeyError, "responsibility", "required field is missing"),
        (
            "rounds.0.scenarios.0.fault.kind",
            "kill-wroker",
            "rounds[0].scenarios[0].fault.kind",
            "not a known fault kind; use one of: ",
        ),
        (
            "rounds.0.scenarios.0.trigger",
            {"at_step": 3, "after_s": 2},
            "rounds[0].scenarios[0].trigger",
            "set exactly one of at_step",
        ),
        (
            "rounds.0.scenarios.0.fault.target",
            {"rank": 7},
            "rounds[0].scenarios[0].fault",
            "target rank 7 does not exist (world size 2)",
        ),
        (
            "controls.0.expected_check",
            "progress.nope",
            "controls[0].expected_check",
            "'progress.nope' is not a check",
        ),
        ("resources.platform", "slurmish", "resources.platform", "'slurmish' is unknown"),
        (
            "rounds.0.scenarios.0.expected.recovery",
            "magic",
            "rounds[0].scenarios[0].expected.recovery",
            "'magic' is not allowed",
        ),
        ("task.id", "bad id with spaces", "task.id", "should match pattern"),
        (
            "task.entrypoint.args",
            ["--workload-config={workload_cfg}"],
            "task.entrypoint.args",
            "args[0] '--workload-config={workload_cfg}' has an unknown or malformed "
            "placeholder ('workload_cfg'); use {run_dir}, {ckpt_dir}, {events_dir}, "
            "{workload_config}",
        ),
        ("task.entrypoint.args", ["--x={"], "task.entrypoint.args", "malformed placeholder"),
        (
            "task.workload.steps",
            0,
            "task.workload",
            "task.workload: field 'steps': must be >= 1 (got 0); the fields are those of the "
            "reference workload's LMConfig",
        ),
        (
            "task.workload.stepz",
            10,
            "task.workload",
            "task.workload: unknown field 'stepz' (known: ",
        ),
        (
            "controls.0.workload",
            {"bad_mode": "resume-ignord"},
            "controls[0].workload",
            "controls[ctl-resume-ignored].workload: field 'bad_mode': must be null or one of ",
        ),
        (
            "rounds.0.scenarios.0.fault.target",
            {"node": "n9"},
            "rounds[0].scenarios[0].fault",
            "kill-worker: kill-worker target node 'n9' does not exist in this layout (nodes: "
            "n1, n2, n3); use one of those",
        ),
        (
            "controls.0.expected_check",
            "expectation.restart",
            "controls[0].expected_check",
            "'expectation.restart' is an expectation check, which a known-bad workload cannot "
            "fail; name a progress, resources or results check",
        ),
        (
            "ownership.spare_nodes",
            "the vendor",
            "ownership.spare_nodes",
            "'platform', 'enterprise-operations' or 'vendor-support'",
        ),
        ("ownership.on_call", "platform", "ownership.on_call", "unknown key 'on_call'"),
        ("observation.post_s", -1, "observation.post_s", "greater than or equal to 0"),
        (
            "rounds.0.scenarios.0.recovery",
            {"steps": "resubmit the job"},
            "rounds[0].scenarios[0].recovery.steps",
            "valid tuple",
        ),
        (
            "resources.isolation",
            "none",
            "resources.spares",
            "spares (1) are used only with isolation: netns (the local platform without "
            "isolation never places work on a spare); set spares: 0 or isolation: netns",
        ),
    ],
)
def test_bad_plan_gives_one_clear_error(
    tmp_path: Path, path: str, value: Any, where: str, phrase: str
) -> None:
    err = error_of(tmp_path, mutate(path, value))
    assert str(tmp_path / "plan.yaml") in str(err)
    assert len(err.problems) == 1, err.problems
    loc, msg = err.problems[0]
    assert loc == where
    assert phrase in msg


def test_duplicate_ids_refused(tmp_path: Path) -> None:
    raw = demo_raw()
    raw["controls"][1]["id"] = raw["controls"][0]["id"]
    assert "repeated: ctl-resume-ignored" in str(error_of(tmp_path, raw))


def test_rounds_must_increase(tmp_path: Path) -> None:
    raw = demo_raw()
    raw["rounds"].append(copy.deepcopy(raw["rounds"][0]))
    raw["rounds"][1]["scenarios"][0]["id"] = "again"
    assert "increasing and unique" in str(error_of(tmp_path, raw))


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    err = error_of(tmp_path, "task: {id: x\nresources: [")
    assert err.problems[0][0].startswith("line ")


def test_not_a_mapping(tmp_path: Path) -> None:
    assert "must be a mapping" in str(error_of(tmp_path, "- just\n- a list\n"))


def test_missing_file() -> None:
    with pytest.raises(PlanError, match="cannot read"):
        load_plan("/nonexistent/plan.yaml")


def test_cli_prints_error_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, mutate("resources.nodes", "two"))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "resources.nodes" in err and "Traceback" not in err


def test_schema_is_json_schema() -> None:
    schema = plan_schema()
    assert schema["additionalProperties"] is False
    assert "task" in schema["required"]


def test_parse_plan_digest_is_stable() -> None:
    a, b = parse_plan(demo_raw()), parse_plan(demo_raw())
    assert a.digest() == b.digest()
    raw = demo_raw()
    raw["seeds"]["global"] = 99
    assert parse_plan(raw).digest() != a.digest()


@pytest.mark.parametrize(
    ("extra", "phrase"),
    [
        ({"resources": {"procs_per_node": 2}}, "changes resources besides its fault"),
        ({"workload": {"steps": 10}}, "changes workload besides its fault"),
        ({"env": {"X": "1"}}, "changes env besides its fault"),
    ],
)
def test_scenario_changing_a_second_variable_is_refused(
    tmp_path: Path, extra: dict[str, Any], phrase: str
) -> None:
    raw = demo_raw()
    raw["rounds"][0]["scenarios"][0].update(extra)
    err = error_of(tmp_path, raw)
    assert len(err.problems) == 1
    assert phrase in err.problems[0][1] and "one main variable" in err.problems[0][1]


def test_scenario_with_two_faults_is_refused(tmp_path: Path) -> None:
    raw = demo_raw()
    sc = raw["rounds"][0]["scenarios"][0]
    sc["fault"] = [sc["fault"], sc["fault"]]
    err = error_of(tmp_path, raw)
    assert "lists 2 faults" in err.problems[0][1]


# --- a script entry point: resolved against the plan file, must exist --------------------


def script_raw(script: str) -> dict[str, Any]:
    raw = demo_raw()
    raw["task"]["entrypoint"] = {"script": script, "args": ["{ckpt_dir}"]}
    raw["task"]["workload"] = {}
    return raw


def test_a_relative_script_is_resolved_against_the_plan_file(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "train.py").write_text("print('hi')\n")
    plan = load_plan(write(tmp_path, script_raw("jobs/train.py")))
    assert plan.task.entrypoint.script == str(tmp_path.resolve() / "jobs" / "train.py")


def test_a_missing_script_is_refused_naming_where_it_was_looked_for(tmp_path: Path) -> None:
    err = error_of(tmp_path, script_raw("trian.py"))
    assert err.problems == [
        (
            "task.entrypoint.script",
            f"script 'trian.py' not found (looked for {tmp_path.resolve() / 'trian.py'}); give "
            f"a path relative to the plan file's directory ({tmp_path.resolve()}) or an "
            "absolute one",
        )
    ]


def test_a_plan_not_loaded_from_a_file_keeps_its_script_as_written() -> None:
    # a recorded run's plan.json is re-judged anywhere: its script need not exist here
    plan = parse_plan(script_raw("/elsewhere/train.py"), source="run/plan.json")
    assert plan.task.entrypoint.script == "/elsewhere/train.py"


def test_the_reference_workload_config_is_checked_without_torch() -> None:
    code = (
        "import sys; from faultdrill.plan import load_plan; "
        f"load_plan({str(DEMO)!r}); "
        "assert 'torch' not in sys.modules, 'torch imported at plan load'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_script_plan_workload_is_not_checked_as_the_reference_one(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    raw = script_raw("train.py")
    raw["task"]["workload"] = {"anything": "goes"}  # the script's own config
    raw["controls"] = [
        {**raw["controls"][0], "workload": {"whatever": 1}, "expected_check": "progress.no-jump"}
    ]
    assert load_plan(write(tmp_path, raw)).task.workload == {"anything": "goes"}
