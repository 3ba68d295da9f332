"""The plan is validated at load: each bad plan gives one clear error naming file, field, fix."""

from __future__ import annotations

import copy
import datetime as dt
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultdrill.admit import load_plan, parse_plan, plan_schema
from faultdrill.cli import main
from faultdrill.errors import PlanError

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
        "import sys; from faultdrill.admit import load_plan; "
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


# --- issue 21: a plan that cannot do what it says is refused (exit 2), never a hang --------


def validate_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """``faultdrill ARGV`` in a process of its own, killed after 60 s (a hang fails)."""
    return subprocess.run(
        [sys.executable, "-m", "faultdrill.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_fifo_for_a_plan_is_refused_at_once_not_waited_on(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "plan.yaml"
    os.mkfifo(fifo)
    done = validate_cli(
        command, str(fifo), *(["--out", str(tmp_path / "run")] * (command == "run"))
    )
    assert done.returncode == 2, done.stderr
    assert (
        f"{fifo}: invalid plan (1 problem)\n  - (file): is a FIFO (named pipe), not a file; "
        "give the path of a plan file" in done.stderr
    )
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()


def test_a_directory_for_a_plan_is_named_as_one(tmp_path: Path) -> None:
    err = error_of(tmp_path, "x: 1")  # writes plan.yaml; the directory is what is named
    assert err.problems
    with pytest.raises(PlanError) as info:
        load_plan(tmp_path)
    assert info.value.problems == [
        ("(file)", "is a directory, not a file; give the path of a plan file")
    ]


def test_a_fifo_the_plan_names_is_refused_as_one(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "train.py")
    os.mkfifo(tmp_path / "job.yaml")
    err = error_of(tmp_path, script_raw("train.py"))
    assert err.problems == [
        (
            "task.entrypoint.script",
            f"script 'train.py' is a FIFO (named pipe), not a file (looked for "
            f"{tmp_path.resolve() / 'train.py'}); give a path relative to the plan file's "
            f"directory ({tmp_path.resolve()}) or an absolute one",
        )
    ]
    raw = demo_raw()
    raw["resources"] = {"platform": "kubernetes", "nodes": 2}
    raw["resources"]["kubernetes"] = {"test_cluster": True, "manifest": "job.yaml"}
    raw["rounds"], raw["controls"] = raw["rounds"][:1], []
    done = validate_cli("validate", str(write(tmp_path, raw)))
    assert done.returncode == 2, done.stderr
    assert (
        "resources.kubernetes.manifest: manifest 'job.yaml' is a FIFO (named pipe), not a file"
        in done.stderr
    )


def test_the_runs_copy_of_a_plan_file_swapped_for_a_fifo_is_refused(tmp_path: Path) -> None:
    """The engine reads the plan file again for the run's copy: a FIFO put there since
    ``load_plan`` read it is refused, not waited on."""
    fifo = tmp_path / "plan.yaml"
    os.mkfifo(fifo)
    code = (
        "import sys; from pathlib import Path\n"
        "from faultdrill.engine.run import write_plan_copy\n"
        "from faultdrill.errors import DrillError\n"
        "from faultdrill.admit import load_plan\n"
        f"plan = load_plan({str(DEMO)!r})\n"
        f"try: write_plan_copy(plan, Path({str(fifo)!r}), Path({str(tmp_path / 'run')!r}))\n"
        "except DrillError as exc: print(exc); sys.exit(2)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"{fifo} is not a regular file; not read" in done.stdout


def test_a_plan_that_drills_nothing_is_refused(tmp_path: Path) -> None:
    raw = demo_raw()
    raw["rounds"], raw["controls"] = [], []
    done = validate_cli("validate", str(write(tmp_path, raw)))
    assert done.returncode == 2
    assert (
        f"{tmp_path / 'plan.yaml'}: invalid plan (1 problem)\n  - rounds: the plan drills "
        "nothing (rounds: [] and controls: []); add a round with a scenario" in done.stderr
    )
    raw["controls"] = demo_raw()["controls"][:1]  # a control alone is something to drill
    assert load_plan(write(tmp_path, raw)).controls


def test_a_derived_plan_may_drill_nothing() -> None:
    """The demo without what this machine lacks may be its baseline alone; a run's recorded
    copy is judged again wherever it is (neither is a plan someone wrote)."""
    raw = demo_raw()
    raw["rounds"], raw["controls"] = [], []
    assert parse_plan(raw, source="run/plan.json").items() == []


@pytest.mark.parametrize(
    ("item", "trigger", "where", "phrase"),
    [
        (
            "rounds.0.scenarios.0",
            {"at_step": 4000},
            "rounds[0].scenarios[0].trigger.at_step",
            "kill-worker: at_step 4000 is past the job's last step (25, from "
            "task.workload.steps): the fault would never fire; trigger at a step from 1 to 25",
        ),
        (
            "rounds.0.scenarios.0",
            {"after_checkpoint": 4},
            "rounds[0].scenarios[0].trigger.after_checkpoint",
            "kill-worker: after_checkpoint 4 never comes: the job saves 3 checkpoint(s) (25 "
            "steps from task.workload.steps, one every 10 (checkpoint.every_steps)",
        ),
        (
            "controls.0",
            {"at_step": 26},
            "controls[0].trigger.at_step",
            "ctl-resume-ignored: at_step 26 is past the job's last step (25, from",
        ),
    ],
)
def test_a_trigger_past_the_end_of_the_job_is_refused(
    tmp_path: Path, item: str, trigger: dict[str, int], where: str, phrase: str
) -> None:
    err = error_of(tmp_path, mutate(f"{item}.trigger", trigger))
    assert len(err.problems) == 1, err.problems
    assert err.problems[0][0] == where
    assert phrase in err.problems[0][1]


def test_a_trigger_is_checked_against_the_steps_the_item_runs(tmp_path: Path) -> None:
    raw = mutate("rounds.0.scenarios.0.trigger", {"at_step": 25})  # the last step: fires
    raw["controls"][0]["workload"] = {**raw["controls"][0]["workload"], "steps": 20}
    raw["controls"][0]["trigger"] = {"at_step": 25}
    err = error_of(tmp_path, raw)
    assert [loc for loc, _ in err.problems] == ["controls[0].trigger.at_step"]
    assert "(20, from controls[0].workload.steps)" in err.problems[0][1]


def test_a_trigger_of_a_job_of_its_own_is_not_judged(tmp_path: Path) -> None:
    """The step count of a script's job is not the plan's to know: nothing is said."""
    (tmp_path / "train.py").write_text("")
    raw = script_raw("train.py")
    raw["rounds"][0]["scenarios"][0]["trigger"] = {"at_step": 4000}
    raw["controls"] = []
    assert load_plan(write(tmp_path, raw)).scenarios()[0].trigger.at_step == 4000


@pytest.mark.parametrize(
    "module", ["os; rm -rf /", "faultdrill.workloads.lm ", "1abc", "a..b", "pkg.class", "", "é"]
)
def test_an_entrypoint_module_must_be_a_dotted_module_name(tmp_path: Path, module: str) -> None:
    err = error_of(tmp_path, mutate("task.entrypoint.module", module))
    assert err.problems == [
        (
            "task.entrypoint.module",
            f"module {module!r} is not a dotted Python module name; write one such as "
            "'mypkg.train' (letters, digits and '_', parts joined by '.', none starting with "
            "a digit), or use script: PATH for a file",
        )
    ]


def test_a_dotted_module_name_of_another_package_is_accepted() -> None:
    raw = mutate("task.entrypoint.module", "my_pkg.train_2")
    raw["task"]["workload"], raw["controls"] = {}, []
    assert parse_plan(raw).task.entrypoint.module == "my_pkg.train_2"


def test_quoted_numbers_are_refused_every_one_at_once(tmp_path: Path) -> None:
    raw = mutate("rounds.0.scenarios.1.fault.for_s", "15")
    raw["rounds"][0]["scenarios"][0]["trigger"] = {"at_step": "15"}
    raw["observation"]["sample_hz"] = "15"
    raw["checkpoint"]["every_steps"] = 10.0
    raw["seeds"]["global"] = "7"
    done = validate_cli("validate", str(write(tmp_path, raw)))
    assert done.returncode == 2
    assert f"{tmp_path / 'plan.yaml'}: invalid plan (5 problems)" in done.stderr
    for line in (
        "checkpoint.every_steps: must be a whole number, not 10.0; write 10",
        "seeds.global: must be a number, not the string '7'; write it without quotes (7)",
        "observation.sample_hz: must be a number, not the string '15'; write it without "
        "quotes (15)",
        "rounds[0].scenarios[0].trigger.at_step: must be a number, not the string '15'",
        "rounds[0].scenarios[1].fault.for_s: must be a number, not the string '15'",
    ):
        assert f"  - {line}" in done.stderr


def test_yaml_numbers_stay_numbers(tmp_path: Path) -> None:
    text = DEMO.read_text().replace("sample_hz: 10", "sample_hz: 10.5")
    text = text.replace("percent: 10, for_s: 2}", "percent: 10, for_s: 2.5}")
    plan = load_plan(write(tmp_path, text.replace("every_steps: 10", "every_steps: 0xa")))
    assert plan.observation.sample_hz == 10.5 and plan.checkpoint.every_steps == 10
    assert load_plan(DEMO).observation.sample_hz == 10.0  # a YAML int for a float field


@pytest.mark.parametrize(
    ("old", "new", "where", "message"),
    [
        (
            "id: demo-lm",
            "id: !!binary aGVsbG8=",
            "task.id",
            "b'hello' is binary data (a YAML !!binary value) where the plan takes text; write "
            "the text itself",
        ),
        (
            "  submitter: faultdrill demo",
            "  submitter: faultdrill demo\n  env: {NOTE: !!binary aGVsbG8=}",
            "task.env.NOTE",
            "b'hello' is binary data (a YAML !!binary value) where the plan takes text",
        ),
        (
            "  submitter: faultdrill demo",
            "  submitter: faultdrill demo\n  env: {STARTED: 2026-11-30}",
            "task.env.STARTED",
            "2026-11-30 is a date (YAML reads an unquoted date as one) where the plan takes "
            "text; quote it: '2026-11-30'",
        ),
        (
            "  submitter: faultdrill demo",
            "  submitter: faultdrill demo\n  env: {!!binary aGVsbG8=: x}",
            "task.env.b'hello'",
            "key b'hello' is binary data",
        ),
    ],
)
def test_a_value_that_is_not_plain_data_is_refused(
    tmp_path: Path, old: str, new: str, where: str, message: str
) -> None:
    err = error_of(tmp_path, DEMO.read_text().replace(old, new, 1))
    assert len(err.problems) == 1, err.problems
    assert err.problems[0][0] == where
    assert err.problems[0][1].startswith(message)


def test_a_value_that_is_not_plain_data_is_refused_where_any_value_goes(tmp_path: Path) -> None:
    """A script's workload takes any value, and is written out as JSON: bytes, a date or a
    set would break that at run time; refused at load, each at its path."""
    (tmp_path / "train.py").write_text("")
    raw = script_raw("train.py")
    raw["task"]["workload"] = {"note": b"hello", "when": {"day": dt.date(2026, 11, 30)}}
    raw["controls"] = []
    err = error_of(tmp_path, raw)
    assert [loc for loc, _ in err.problems] == ["task.workload.note", "task.workload.when.day"]


@pytest.mark.parametrize("name", ["", "   "])
def test_responsibility_must_name_someone(tmp_path: Path, name: str) -> None:
    raw = demo_raw()
    raw["responsibility"] = dict.fromkeys(raw["responsibility"], name)
    err = error_of(tmp_path, raw)
    assert err.problems == [
        (
            f"responsibility.{role}",
            f"must name a person or role (got {name!r}); write who does it, e.g. 'on-call "
            "SRE' or a name",
        )
        for role in ("injector", "observer", "recovery_operator", "signer")
    ]


def test_a_script_under_an_unknown_home_is_not_found_not_a_traceback(tmp_path: Path) -> None:
    err = error_of(tmp_path, script_raw("~nosuchuser-faultdrill/train.py"))
    assert err.problems[0][0] == "task.entrypoint.script"
    assert "'~nosuchuser-faultdrill/train.py' not found" in err.problems[0][1]
