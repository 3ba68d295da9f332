"""Shared fixtures: the demo plan, its first scenario and control, the stock baseline."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import pytest

from faultdrill import plugins
from faultdrill.admit import load_plan
from faultdrill.plan import Control, Plan, Scenario
from faultdrill.readings.reference import Reference
from tests.new_kinds_local import hang_oom_drill, storage_data_drill  # noqa: F401  (session drills)
from tests.new_kinds_slurm import slurm_hang_oom, slurm_straggler_storage  # noqa: F401  (session drills)
from tests.recorded_run import recorded_demo  # noqa: F401  (session fixture: one small drill)
from tests.test_netns_kit import cluster  # noqa: F401  (a bare namespace cluster)
from tests.timelines import Judge, baseline

# Every fault, check and platform registered, as the commands load them (faultdrill.plugins):
# a test that reads a registry must not depend on which test ran before it.
plugins.load()

#: In CI mode as root, a machine lacking what the drills need fails the run (tests/ci_mode.py).
pytest_plugins = ["tests.ci_mode"]

DEMO_PLAN = Path(str(files("faultdrill") / "plans" / "demo.yaml"))


@pytest.fixture(scope="session")
def plan() -> Plan:
    return load_plan(DEMO_PLAN)


@pytest.fixture(scope="session")
def scenario(plan: Plan) -> Scenario:
    """``kill-worker``: rank 1 killed, the job expected to complete, resuming latest-valid."""
    return plan.scenarios()[0]


@pytest.fixture(scope="session")
def control(plan: Plan) -> Control:
    return plan.controls[0]


@pytest.fixture()
def reference() -> Reference:
    """The stock fault-free run (:func:`timelines.baseline`) as the checks' reference."""
    return Reference.from_timeline(baseline().build())


@pytest.fixture()
def judge(plan: Plan, scenario: Scenario, reference: Reference) -> Judge:
    """Runs a check on the ``kill-worker`` scenario against the stock baseline."""
    return Judge(plan, scenario, reference)
