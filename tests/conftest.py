"""Shared fixtures: the demo plan, its first scenario and control, the stock baseline."""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path
from typing import Any

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

# --- two test workers (pyproject.toml: ``-n 2``) ----------------------------------------
# The drills spend most of their time waiting (a timeout to fire, a restart, a hold-off):
# two of them share the two cores well, where the ~3,600 tests that drill nothing (units,
# fuzz corpora, literal timelines) only fill the gaps. What must not be split is a drill's
# run: a session fixture runs once per worker that asks for it, so every module reading
# one shared run goes to one worker, whole; and the drills of one platform (Slurm, Ray,
# Kubernetes) go one after another on one worker, as they were sized. The controller sees
# test ids only, so a drill is told by its module's text (a test marked ``drill`` or
# ``root``, or one reading a session drill). xdist's own ``--dist loadgroup`` reads a
# marker on the workers and tags the test id, which pytest 9 no longer lets it do: every
# drill ran anywhere and each session drill ran twice.

#: Session fixtures that run a drill: every module reading one runs on one worker.
_DRILL_FIXTURES = (
    "recorded_demo",
    "hang_oom_drill",
    "storage_data_drill",
    "slurm_hang_oom",
    "slurm_straggler_storage",
)
#: A platform's drills, told by the module's name, run one after another.
_PLATFORMS = ("slurm", "ray", "k8s")
#: What makes a module a drill module, read from its text (the controller collects nothing).
_DRILL_TEXT = re.compile(
    r"pytest\.mark\.(?:drill|root)\b|\b(?:" + "|".join(_DRILL_FIXTURES) + r"): "
)


def _queue_rank(scope: str, tests: int) -> tuple[int, int]:
    """Where a scope goes in the queue: a platform's drills, a shared session drill's, the
    other drill modules (the most tests first), then the tests that drill nothing."""
    kind = scope.split(":")[1] if scope.startswith("drills:") else "none"
    return ({"platform": 0, "fixture": 1, "none": 3}.get(kind, 2), -tests)


def drill_scopes(tests: Path = Path(__file__).parent) -> dict[str, str]:
    """Module part of the test id (``tests/test_x.py``) -> its drills' scope, for every
    module that holds a drill: modules sharing a platform or a session drill share one."""
    root = tests.parent
    scope: dict[str, str] = {}  # a module or a key -> its representative (union-find)

    def find(x: str) -> str:
        while scope.setdefault(x, x) != x:
            x = scope[x]
        return x

    modules = []
    for path in sorted(tests.glob("test_*.py")):
        text = path.read_text()
        if not _DRILL_TEXT.search(text):
            continue
        module = path.relative_to(root).as_posix()
        modules.append(find(module))
        keys = [f"platform:{p}" for p in _PLATFORMS if p in path.stem.split("_")]
        keys += [f"fixture:{f}" for f in _DRILL_FIXTURES if re.search(rf"\b{f}: ", text)]
        for key in keys:
            scope[find(key)] = find(module)
    # a group is named by its platform, else by its session drill, else by its module
    names: dict[str, str] = {}
    for member in sorted(scope, key=lambda x: (not x.startswith("platform:"), x)):
        names.setdefault(find(member), member)
    return {m: f"drills:{names[find(m)]}" for m in modules}


def is_drill(item: pytest.Item) -> bool:
    """Whether a collected test drills: marked ``drill`` or ``root``, or reads a drill."""
    if set(_DRILL_FIXTURES).intersection(getattr(item, "fixturenames", ())):
        return True
    return bool(item.get_closest_marker("drill") or item.get_closest_marker("root"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a drill the controller would not keep with its kind (its module's text does
    not show it): it could run twice, or beside a drill it was not sized for."""
    scopes = drill_scopes()
    stray = [i.nodeid for i in items if is_drill(i) and i.nodeid.split("::")[0] not in scopes]
    if stray:
        raise pytest.UsageError(
            f"tests/conftest.py: {stray[0]} drills but its module does not show it (no "
            "pytest.mark.drill, pytest.mark.root or drill fixture argument in its text); "
            "mark it with pytest.mark.drill"
        )


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from collections import OrderedDict

    from xdist.scheduler import LoadScopeScheduling

    scopes = drill_scopes()

    class DrillsWhole(LoadScopeScheduling):  # type: ignore[misc]
        """Scope: a drill module's :func:`drill_scopes` entry, else the test itself; the
        longest first (:func:`_queue_rank`): the tests that drill nothing fill the end."""

        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return scopes.get(nodeid.split("::")[0], nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:  # the first call: the queue is complete
                self.ordered = True
                queue: OrderedDict[str, dict[str, bool]] = self.workqueue
                units = sorted(queue.items(), key=lambda u: _queue_rank(u[0], len(u[1])))
                queue.clear()
                queue.update(units)
            super()._assign_work_unit(node)

    return DrillsWhole(config, log)


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
