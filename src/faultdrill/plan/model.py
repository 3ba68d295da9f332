"""The plan: frozen, typed data, validated once when it is loaded.

A plan freezes the baseline first (task, data, resources, checkpoint policy, seeds,
responsibilities and ownership, observation window, stop conditions;
:mod:`faultdrill.plan.sections`),
then lists scenarios in rounds, each with exactly one fault, a trigger, an expected state
and pass criteria, and the negative controls. The cross-field checks (unique ids, a
platform that can do every fault, controls that name an evidence check, the reference
workload's config) run here, when the whole plan is validated.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from faultdrill.joblogs.spec import LogPatterns
from faultdrill.plan.faults import FaultField, expand_controls
from faultdrill.plan.sections import (
    REFERENCE_WORKLOAD,
    CheckpointPolicy,
    Data,
    Expected,
    Frozen,
    Observation,
    Ownership,
    PassCriteria,
    Recovery,
    Resources,
    Responsibility,
    StopConditions,
    StopOverrides,
    Task,
    Tolerance,
    Trigger,
)

__all__ = ["Control", "Plan", "Round", "Scenario"]


class Scenario(Frozen):
    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,47}$")]
    title: str = ""
    fault: FaultField
    trigger: Trigger
    preconditions: tuple[str, ...] = ()
    expected: Expected = Expected()
    pass_criteria: PassCriteria = PassCriteria()
    recovery: Recovery = Recovery()
    stop: StopOverrides = StopOverrides()

    @model_validator(mode="before")
    @classmethod
    def _one_main_variable(cls, raw: Any) -> Any:
        """A scenario changes exactly one main variable: its fault. Anything else that
        would change between baseline and drill (resources, workload, environment, a
        second fault) makes the outcome unattributable, so it is refused here by name."""
        if not isinstance(raw, dict):
            return raw
        if isinstance(raw.get("fault"), list):
            raise ValueError(
                f"scenario {raw.get('id', '?')!r} lists {len(raw['fault'])} faults; a scenario "
                "injects exactly one fault: split it into one scenario per fault"
            )
        second = sorted(k for k in _SECOND_VARIABLES if k in raw)
        if second:
            raise ValueError(
                f"scenario {raw.get('id', '?')!r} changes {', '.join(second)} besides its "
                "fault: each scenario changes one main variable; drill that change in its own "
                "plan (with its own baseline)"
            )
        return raw


#: Keys that would make a scenario change a second variable besides its fault.
_SECOND_VARIABLES = frozenset(
    {
        "faults",
        "resources",
        "nodes",
        "procs_per_node",
        "workload",
        "env",
        "task",
        "data",
        "checkpoint",
        "seeds",
        "timeouts",
    }
)


class Round(Frozen):
    round: int = Field(ge=1, le=9)
    name: str = ""
    continue_on_failure: bool = False
    scenarios: tuple[Scenario, ...] = Field(min_length=1)


class Control(Frozen):
    """A negative control: a known-bad workload that the named check must catch."""

    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,47}$")]
    title: str = ""
    workload: dict[str, Any] = Field(
        default_factory=dict, description="task.workload keys overridden to switch the bug on"
    )
    env: dict[str, str] = Field(default_factory=dict)
    fault: FaultField
    trigger: Trigger
    expected_check: str
    stop: StopOverrides = StopOverrides()


class Plan(Frozen):
    version: Literal[1] = 1
    task: Task
    data: Data
    resources: Resources = Resources()
    checkpoint: CheckpointPolicy = CheckpointPolicy()
    seeds: dict[str, Annotated[int, Field(ge=0, le=2**63 - 1)]] = Field(
        default_factory=lambda: {"global": 0}
    )
    observation: Observation = Observation()
    responsibility: Responsibility
    ownership: Ownership = Ownership()
    stop: StopConditions = StopConditions()
    tolerance: Tolerance = Tolerance()
    logs: LogPatterns | None = Field(
        None,
        description="a job that cannot be changed: read its progress from its own log lines "
        "(faultdrill.joblogs; docs/integrations.md)",
    )
    rounds: tuple[Round, ...] = ()
    controls: tuple[Control, ...] = ()

    @field_validator("controls", mode="before")
    @classmethod
    def _harness_shorthand(cls, raw: Any) -> Any:
        """``controls`` as a mapping asks for the harness-side controls in one line
        (:class:`faultdrill.faults.harness.HarnessControls`); it becomes the list form."""
        return expand_controls(raw) if isinstance(raw, dict) else raw

    @field_validator("rounds")
    @classmethod
    def _rounds_in_order(cls, rounds: tuple[Round, ...]) -> tuple[Round, ...]:
        numbers = [r.round for r in rounds]
        if numbers != sorted(set(numbers)):
            raise ValueError(f"round numbers must be increasing and unique, got {numbers}")
        return rounds

    def item_paths(self) -> dict[int, str]:
        """Each item (by identity) -> its field path in the plan."""
        paths = {
            id(sc): f"rounds[{r}].scenarios[{i}]"
            for r, rnd in enumerate(self.rounds)
            for i, sc in enumerate(rnd.scenarios)
        }
        paths.update({id(c): f"controls[{i}]" for i, c in enumerate(self.controls)})
        return paths

    def workload_config(
        self, item: Scenario | Control | None, ckpt_dir: str, data_dir: str = "<data_dir>"
    ) -> dict[str, Any]:
        """The workload config an item runs with (``{workload_config}``): ``task.workload``,
        a control's ``workload`` over it, and for the reference workload the plan's
        checkpoint policy, gloo timeout (unless a control sets its own) and seed, and
        ``data_dir`` (the item's own) when the config asks for file-backed data
        (``data_files: true``)."""
        cfg = dict(self.task.workload)
        if isinstance(item, Control):
            cfg.update(item.workload)
        if self.task.entrypoint.module == REFERENCE_WORKLOAD and cfg.get("data_files") is True:
            cfg["data_dir"] = data_dir
        if self.task.entrypoint.module == REFERENCE_WORKLOAD:
            cfg.update(
                ckpt_dir=ckpt_dir,
                ckpt_every=self.checkpoint.every_steps,
                ckpt_keep=self.checkpoint.keep,
            )
            if not _own_gloo_timeout(item):
                cfg["gloo_timeout_s"] = self.resources.timeouts.gloo_s
            cfg.setdefault("seed", self.seeds.get("global", 0))
            if isinstance(item, Control) and "gloo_timeout_s" in item.workload:
                # a control's own collective timeout is its defect (a straggler slower than
                # it): the plan's timeout must not quietly undo the mutation it reports
                cfg["gloo_timeout_s"] = item.workload["gloo_timeout_s"]
        return cfg

    def gloo_timeout_for(self, item: Scenario | Control | None) -> float:
        """The collective timeout (seconds) the item's job runs with: a control's own
        ``workload.gloo_timeout_s`` (a known-bad setting it drills), else the plan's
        ``resources.timeouts.gloo_s``."""
        if _own_gloo_timeout(item):
            assert isinstance(item, Control)
            return float(item.workload["gloo_timeout_s"])
        return float(self.resources.timeouts.gloo_s)

    def scenarios(self) -> list[Scenario]:
        return [s for r in self.rounds for s in r.scenarios]

    def items(self) -> list[Scenario | Control]:
        """Every scenario, in round order, then every control."""
        return [*self.scenarios(), *self.controls]

    def round_of(self, scenario_id: str) -> int:
        for r in self.rounds:
            if any(s.id == scenario_id for s in r.scenarios):
                return r.round
        return 0

    def stop_for(self, overrides: StopOverrides) -> StopConditions:
        merged = self.stop.model_dump()
        merged.update({k: v for k, v in overrides.model_dump().items() if v is not None})
        return StopConditions(**merged)

    def digest(self) -> str:
        raw = self.model_dump(mode="json")
        if raw.get("logs") is None:
            raw.pop("logs", None)  # plans without it keep the digest they had before it existed
        canon = json.dumps(raw, sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canon.encode()).hexdigest()


def _own_gloo_timeout(item: Scenario | Control | None) -> bool:
    """Whether ``item`` is a control that sets its own number ``workload.gloo_timeout_s``
    (which then wins over the plan's ``resources.timeouts.gloo_s``)."""
    if not isinstance(item, Control):
        return False
    value = item.workload.get("gloo_timeout_s")
    return isinstance(value, int | float) and not isinstance(value, bool)
