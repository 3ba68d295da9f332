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
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import Field, ValidationInfo, field_validator, model_validator

from faultdrill import faults as _faults  # noqa: F401  (registers every fault kind)
from faultdrill.faults.api import FAULTS, FaultSpec
from faultdrill.faults.harness import expand_controls
from faultdrill.frozen import FieldProblems, shown
from faultdrill.joblogs.spec import LogPatterns
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


def _fault_union() -> Any:
    models = tuple(cls.spec_model for cls in FAULTS.values())
    if len(models) == 1:
        return models[0]
    return Annotated[Union[models], Field(discriminator="kind")]  # noqa: UP007


if TYPE_CHECKING:
    FaultField = FaultSpec
else:
    FaultField = _fault_union()


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

    @model_validator(mode="after")
    def _cross_checks(self, info: ValidationInfo) -> Plan:
        """Every cross-field problem of the plan at once, each at its field path; for a
        plan read from a file (``plan_dir`` in the context), :meth:`drill_problems` too."""
        from faultdrill.platforms import PLATFORMS

        problems: list[tuple[str, str]] = []
        paths = self._item_paths()
        seen: dict[str, str] = {}
        for item in self.items():
            if item.id in seen:
                problems.append(
                    (
                        f"{paths[id(item)]}.id",
                        f"scenario/control ids must be unique; repeated: {item.id} (first at "
                        f"{seen[item.id]})",
                    )
                )
            seen.setdefault(item.id, paths[id(item)])
        platform = PLATFORMS.get(self.resources.platform)
        if platform is None:
            problems.append(
                (
                    "resources.platform",
                    f"resources.platform {shown(self.resources.platform)} is unknown; "
                    f"use one of: {', '.join(sorted(PLATFORMS))}",
                )
            )
        else:
            problems += self._fault_problems(platform, paths)
        problems += self._control_problems(paths)
        problems += self._check_reference_workload()
        if (info.context or {}).get("plan_dir") is not None:
            problems += self.drill_problems()
        if problems:
            raise FieldProblems(problems)
        return self

    def drill_problems(self) -> list[tuple[str, str]]:
        """What makes a plan someone wrote unable to do what it says: it drills nothing (no
        scenario, no control), or an item's trigger comes after the job's last step or
        last checkpoint, so its fault never fires. Said only where the step count is
        known: the reference workload's config (``steps``, ``checkpoint.every_steps``).
        A derived plan (the demo without what this machine lacks) may drill nothing."""
        if not self.rounds and not self.controls:
            return [
                (
                    "rounds",
                    "the plan drills nothing (rounds: [] and controls: []); add a round with "
                    "a scenario (one fault and its trigger) or a control (`faultdrill schema` "
                    "lists the fields)",
                )
            ]
        paths = self._item_paths()
        problems = []
        for item in self.items():
            problem = self._trigger_problem(item)
            if problem is not None:
                field, message = problem
                problems.append((f"{paths[id(item)]}.trigger.{field}", f"{item.id}: {message}"))
        return problems

    def _trigger_problem(self, item: Scenario | Control) -> tuple[str, str] | None:
        """(trigger field, why it never fires) when ``item``'s trigger comes after the last
        step or the last checkpoint of the reference workload as it runs; else None."""
        if self.task.entrypoint.module != REFERENCE_WORKLOAD or item.trigger.after_s is not None:
            return None  # a job of its own: its step count is not the plan's to know
        from faultdrill.workloads.lm_config import ConfigError, config_from_dict

        try:
            cfg = config_from_dict(self.workload_config(item, "<ckpt_dir>"), source="-")
        except ConfigError:
            return None  # said by _check_reference_workload
        if isinstance(item, Control) and "steps" in item.workload:
            where = f"controls[{next(i for i, c in enumerate(self.controls) if c is item)}].workload.steps"
        elif "steps" in self.task.workload:
            where = "task.workload.steps"
        else:
            where = "the reference workload's default steps (set task.workload.steps)"
        at_step, after = item.trigger.at_step, item.trigger.after_checkpoint
        if at_step is not None and at_step > cfg.steps:
            return "at_step", (
                f"at_step {at_step} is past the job's last step ({cfg.steps}, from {where}): "
                f"the fault would never fire; trigger at a step from 1 to {cfg.steps}, or "
                "run more steps"
            )
        saves = -(-cfg.steps // cfg.ckpt_every)  # every ckpt_every steps, and the last
        if after is not None and after > saves:
            return "after_checkpoint", (
                f"after_checkpoint {after} never comes: the job saves {saves} checkpoint(s) "
                f"({cfg.steps} steps from {where}, one every {cfg.ckpt_every} "
                "(checkpoint.every_steps) and one at the last step); use 1 to "
                f"{saves}, or run more steps"
            )
        return None

    def _item_paths(self) -> dict[int, str]:
        """Each item (by identity) -> its field path in the plan."""
        paths = {
            id(sc): f"rounds[{r}].scenarios[{i}]"
            for r, rnd in enumerate(self.rounds)
            for i, sc in enumerate(rnd.scenarios)
        }
        paths.update({id(c): f"controls[{i}]" for i, c in enumerate(self.controls)})
        return paths

    def _fault_problems(self, platform: Any, paths: dict[int, str]) -> list[tuple[str, str]]:
        """Faults the platform cannot do with this layout, or that do not fit the plan."""
        problems = []
        can = platform.abilities_for(self.resources)  # once: a plan may hold thousands
        for item in self.items():
            fault_cls = FAULTS[item.fault.kind]
            missing = fault_cls.requires_for(item.fault) - can
            if missing:
                problems.append(
                    (f"{paths[id(item)]}.fault.kind", self._cannot(item, platform, missing))
                )
            problem = fault_cls.validate_against(item.fault, self)
            if problem:
                problems.append((f"{paths[id(item)]}.fault", f"{item.id}: {problem}"))
        return problems

    def _control_problems(self, paths: dict[int, str]) -> list[tuple[str, str]]:
        from faultdrill.checks import CHECKS

        problems = []
        evidence = sorted(n for n, reg in CHECKS.items() if reg.category != "expectation")
        for c in self.controls:
            where = f"{paths[id(c)]}.expected_check"
            if c.expected_check not in CHECKS:
                problems.append(
                    (
                        where,
                        f"controls[{c.id}].expected_check {shown(c.expected_check)} is not a "
                        f"check; use one of: {', '.join(evidence)}",
                    )
                )
            elif CHECKS[c.expected_check].category == "expectation":
                # expectation checks judge whether the drill ran as planned; a known-bad
                # workload cannot make them fail, so the control could never be caught
                problems.append(
                    (
                        where,
                        f"controls[{c.id}].expected_check {c.expected_check!r} is an expectation "
                        "check, which a known-bad workload cannot fail; name a progress, "
                        f"resources or results check: {', '.join(evidence)}",
                    )
                )
        if self.logs is not None and self.resources.procs_per_node > 1 and not self.logs.says_rank:
            problems.append(
                (
                    "logs",
                    f"logs: with procs_per_node {self.resources.procs_per_node} a line must say "
                    "which rank wrote it: add logs.rank (e.g. '^\\[rank(?P<rank>\\d+)\\]') or "
                    "a rank group to the patterns",
                )
            )
        return problems

    def _cannot(self, item: Scenario | Control, platform: Any, missing: Any) -> str:
        """Why ``platform`` cannot do the fault of ``item``: the abilities it lacks and
        what would make each possible (``Platform.why_not``)."""
        what = "control" if isinstance(item, Control) else "scenario"
        names = sorted(str(a) for a in missing)
        fixes = dict.fromkeys(platform.why_not(a, self.resources) for a in sorted(missing, key=str))
        return (
            f"{what} {item.id}: fault {item.fault.kind!r} needs "
            f"{'ability' if len(names) == 1 else 'abilities'} {', '.join(names)}, "
            f"which platform {platform.name!r} with isolation "
            f"{self.resources.isolation!r} cannot do; {'; '.join(fixes)}"
        )

    def _check_reference_workload(self) -> list[tuple[str, str]]:
        """The reference workload's config, as each item will run it, is valid."""
        if self.task.entrypoint.module != REFERENCE_WORKLOAD:
            return []
        from faultdrill.workloads.lm_config import RAY_BAD_MODES, ConfigError, config_from_dict

        checks: list[tuple[str, str, Control | None]] = [("task.workload", "task.workload", None)]
        checks += [
            (f"controls[{i}].workload", f"controls[{c.id}].workload", c)
            for i, c in enumerate(self.controls)
        ]
        problems = []
        for path, where, item in checks:
            try:
                cfg = config_from_dict(self.workload_config(item, "<ckpt_dir>"), source=where)
            except ConfigError as exc:
                problems.append(
                    (
                        path,
                        f"{exc}; the fields are those of the reference workload's LMConfig "
                        "(faultdrill.workloads.lm_config)",
                    )
                )
                if item is None:
                    break  # each control's config builds on it: they would repeat its problem
                continue
            if cfg.bad_mode in RAY_BAD_MODES and self.resources.platform != "ray":
                problems.append(
                    (
                        f"{path}.bad_mode",
                        f"{where}.bad_mode {cfg.bad_mode!r} is a Ray Train mode (a platform "
                        "that hands checkpoints over); use it with resources.platform: ray",
                    )
                )
        return problems

    def workload_config(self, item: Scenario | Control | None, ckpt_dir: str) -> dict[str, Any]:
        """The workload config an item runs with (``{workload_config}``): ``task.workload``,
        a control's ``workload`` over it, and for the reference workload the plan's
        checkpoint policy, gloo timeout and seed."""
        cfg = dict(self.task.workload)
        if isinstance(item, Control):
            cfg.update(item.workload)
        if self.task.entrypoint.module == REFERENCE_WORKLOAD:
            cfg.update(
                ckpt_dir=ckpt_dir,
                ckpt_every=self.checkpoint.every_steps,
                ckpt_keep=self.checkpoint.keep,
                gloo_timeout_s=self.resources.timeouts.gloo_s,
            )
            cfg.setdefault("seed", self.seeds.get("global", 0))
        return cfg

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
