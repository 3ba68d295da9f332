"""The plan: frozen, typed data, validated once when it is loaded.

A plan freezes the baseline first (task, data, resources, checkpoint policy, seeds,
responsibilities, observation window, stop conditions), then lists scenarios in rounds,
each with exactly one fault, a trigger, an expected state and pass criteria, and the
negative controls. Past :func:`load_plan` nothing handles raw dicts. Every error names the
file, the field path, the rule broken and how to fix it (:class:`~faultdrill.errors.PlanError`).
"""

from __future__ import annotations

import hashlib
import json
from enum import Enum
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from faultdrill import faults as _faults  # noqa: F401  (registers every fault kind)
from faultdrill.errors import PlanError
from faultdrill.faults.api import FAULTS, FaultSpec

__all__ = [
    "ARG_PLACEHOLDERS",
    "REFERENCE_WORKLOAD",
    "Control",
    "Plan",
    "RecoveryClass",
    "Scenario",
    "Trigger",
    "load_plan",
    "parse_plan",
    "plan_schema",
]

#: The reference workload's module: its ``task.workload`` (and each control's ``workload``)
#: is checked against its config (``faultdrill.workloads.lm_config``) when the plan loads.
REFERENCE_WORKLOAD = "faultdrill.workloads.lm"
#: The placeholders ``task.entrypoint.args`` may use; the engine fills them in per item.
ARG_PLACEHOLDERS = ("run_dir", "ckpt_dir", "events_dir", "workload_config")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RecoveryClass(str, Enum):
    """How a job came back after a fault, from best to worst."""

    AUTOMATIC = "automatic"
    MANUAL_CONFIRMATION = "manual-confirmation"
    MANUAL_RESTART = "manual-restart"
    UNRECOVERABLE = "unrecoverable"


class Entrypoint(_Frozen):
    """What each replica runs. Exactly one of ``module`` or ``script``.

    A relative ``script`` is resolved against the plan file's directory when the plan is
    loaded from a file (:func:`load_plan`), and must exist there: the job runs it from the
    item's own directory. Placeholders in ``args``: ``{run_dir}``, ``{ckpt_dir}``,
    ``{events_dir}``, ``{workload_config}`` (the JSON file written from ``task.workload``).
    """

    module: str | None = None
    script: str | None = None
    args: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _one_target(self) -> Entrypoint:
        if (self.module is None) == (self.script is None):
            raise ValueError("set exactly one of 'module' or 'script'")
        return self

    @field_validator("script")
    @classmethod
    def _script_exists(cls, value: str | None, info: ValidationInfo) -> str | None:
        base = (info.context or {}).get("plan_dir")
        if value is None or base is None:
            return value  # not loaded from a file (a recorded run's copy): nothing to resolve
        path = Path(value).expanduser()
        if not path.is_absolute():
            path = Path(base) / path
        if not path.is_file():
            raise ValueError(
                f"script {value!r} not found (looked for {path}); give a path relative to "
                f"the plan file's directory ({base}) or an absolute one"
            )
        return str(path.resolve())

    @field_validator("args")
    @classmethod
    def _known_placeholders(cls, args: tuple[str, ...]) -> tuple[str, ...]:
        fill = dict.fromkeys(ARG_PLACEHOLDERS, "x")
        for i, arg in enumerate(args):
            try:
                arg.format(**fill)
            except (KeyError, IndexError, ValueError, AttributeError) as exc:
                raise ValueError(
                    f"args[{i}] {arg!r} has an unknown or malformed placeholder ({exc}); use "
                    f"{', '.join('{' + k + '}' for k in ARG_PLACEHOLDERS)}, and '{{{{' / "
                    "'}}}}' for a literal brace"
                ) from exc
        return args


class Task(_Frozen):
    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    config_version: str
    code_id: str = Field(description="code or runtime identifier (image, commit, wheel)")
    submitter: str = ""
    entrypoint: Entrypoint
    workload: dict[str, Any] = Field(
        default_factory=dict,
        description="written to {workload_config} as JSON; for faultdrill.workloads.lm "
        "these are LMConfig fields",
    )
    env: dict[str, str] = Field(default_factory=dict)


class Data(_Frozen):
    snapshot: str
    digest: str = ""
    read_position: int = Field(0, ge=0)
    access: str = ""


class Timeouts(_Frozen):
    """Timeouts that decide detection time; recorded in the resource dossier."""

    rdzv_join_s: int = Field(30, ge=1)
    rdzv_last_call_s: int = Field(1, ge=1)
    rdzv_close_s: int = Field(5, ge=1)
    keep_alive_interval_s: int = Field(1, ge=1)
    keep_alive_max_attempt: int = Field(3, ge=1)
    rdzv_read_s: int = Field(10, ge=1)
    gloo_s: int = Field(30, ge=1)
    monitor_interval_s: float = Field(0.1, gt=0)


class Resources(_Frozen):
    platform: str = "local"
    isolation: Literal["none", "netns"] = "none"
    nodes: int = Field(2, ge=1, le=16)
    procs_per_node: int = Field(1, ge=1, le=8)
    min_nodes: int | None = Field(None, ge=1, description="elastic minimum; default = nodes")
    spares: int = Field(0, ge=0, le=4)
    max_restarts: int = Field(3, ge=0)
    devices: str = "cpu"
    timeouts: Timeouts = Timeouts()

    @model_validator(mode="after")
    def _elastic_range(self) -> Resources:
        if self.min_nodes is not None and self.min_nodes > self.nodes:
            raise ValueError(f"min_nodes ({self.min_nodes}) must be <= nodes ({self.nodes})")
        if self.spares and self.platform == "local" and self.isolation == "none":
            # Only the namespace cluster re-places work on a spare; without it a spare
            # would sit idle and a plan that counts on it would prove nothing.
            raise ValueError(
                f"spares ({self.spares}) are used only with isolation: netns (the local "
                "platform without isolation never places work on a spare); set spares: 0 "
                "or isolation: netns"
            )
        return self

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node


class CheckpointPolicy(_Frozen):
    dir: str = Field("ckpt", description="relative to the scenario's run directory")
    every_steps: int = Field(10, ge=1)
    keep: int = Field(3, ge=1)
    latest_file: str = Field(
        "latest", description="file in dir naming the published checkpoint id ('' if none)"
    )

    @field_validator("dir")
    @classmethod
    def _dir_inside_item(cls, value: str) -> str:
        # Faults mount over and damage this directory: it must stay inside the item's own.
        parts = PurePosixPath(value).parts
        if value.startswith("/") or ".." in parts or not parts or "\0" in value:
            raise ValueError(
                f"must be a relative path below the scenario's run directory, without '..' "
                f"(got {value!r}); use a plain name such as 'ckpt'"
            )
        return value

    @field_validator("latest_file")
    @classmethod
    def _latest_is_a_name(cls, value: str) -> str:
        if value and (value in (".", "..") or "/" in value or "\\" in value or "\0" in value):
            raise ValueError(
                f"must be a file name inside checkpoint.dir, not a path (got {value!r}); "
                "use e.g. 'latest', or '' for none"
            )
        return value


class Observation(_Frozen):
    sample_hz: float = Field(10.0, gt=0, le=50)
    net_hz: float = Field(
        4.0, ge=2, le=20, description="network track (isolation netns): samples per second"
    )
    settle_s: float = Field(1.0, ge=0, description="keep observing this long after the job ends")


class Responsibility(_Frozen):
    injector: str
    observer: str
    recovery_operator: str
    signer: str


class StopConditions(_Frozen):
    max_wall_s: float = Field(240.0, gt=0)
    max_no_progress_s: float = Field(90.0, gt=0)
    stop_on_nonfinite_loss: bool = True


class StopOverrides(_Frozen):
    max_wall_s: float | None = Field(None, gt=0)
    max_no_progress_s: float | None = Field(None, gt=0)
    stop_on_nonfinite_loss: bool | None = None


class Tolerance(_Frozen):
    rtol: float = Field(1e-3, ge=0)
    atol: float = Field(1e-5, ge=0)


class Trigger(_Frozen):
    """When to inject: exactly one of the three."""

    at_step: int | None = Field(None, ge=1)
    after_checkpoint: int | None = Field(None, ge=1, description="after the K-th checkpoint save")
    after_s: float | None = Field(None, ge=0, description="seconds after the first step")

    @model_validator(mode="after")
    def _exactly_one(self) -> Trigger:
        set_ = [
            n for n in ("at_step", "after_checkpoint", "after_s") if getattr(self, n) is not None
        ]
        if len(set_) != 1:
            raise ValueError(
                "set exactly one of at_step, after_checkpoint, after_s "
                f"(got {', '.join(set_) or 'none'})"
            )
        return self

    def describe(self) -> str:
        if self.at_step is not None:
            return f"when step {self.at_step} is reached"
        if self.after_checkpoint is not None:
            return f"after checkpoint #{self.after_checkpoint} is saved"
        return f"{self.after_s} s after the first step"


class Expected(_Frozen):
    job: Literal["completes", "fails"] = "completes"
    recovery: RecoveryClass = RecoveryClass.AUTOMATIC
    resume: Literal["latest-valid", "previous-valid", "scratch", "no-restart"] = "latest-valid"
    state: str = Field("", description="the expected state in words, for the report")


class PassCriteria(_Frozen):
    results: Literal["auto", "bitwise", "tolerance"] = "auto"
    max_recomputed_steps: int | None = Field(None, ge=0)


class Recovery(_Frozen):
    """What the recovery operator does if the platform does not recover by itself."""

    action: Literal["none", "resubmit"] = "none"
    confirm: bool = Field(False, description="a human must confirm before the job may continue")
    runbook: str = ""


def _fault_union() -> Any:
    models = tuple(cls.spec_model for cls in FAULTS.values())
    if len(models) == 1:
        return models[0]
    return Annotated[Union[models], Field(discriminator="kind")]  # noqa: UP007


if TYPE_CHECKING:
    FaultField = FaultSpec
else:
    FaultField = _fault_union()


class Scenario(_Frozen):
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


class Round(_Frozen):
    round: int = Field(ge=1, le=9)
    name: str = ""
    continue_on_failure: bool = False
    scenarios: tuple[Scenario, ...] = Field(min_length=1)


class Control(_Frozen):
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


class Plan(_Frozen):
    version: Literal[1] = 1
    task: Task
    data: Data
    resources: Resources = Resources()
    checkpoint: CheckpointPolicy = CheckpointPolicy()
    seeds: dict[str, int] = Field(default_factory=lambda: {"global": 0})
    observation: Observation = Observation()
    responsibility: Responsibility
    stop: StopConditions = StopConditions()
    tolerance: Tolerance = Tolerance()
    rounds: tuple[Round, ...] = ()
    controls: tuple[Control, ...] = ()

    @field_validator("rounds")
    @classmethod
    def _rounds_in_order(cls, rounds: tuple[Round, ...]) -> tuple[Round, ...]:
        numbers = [r.round for r in rounds]
        if numbers != sorted(set(numbers)):
            raise ValueError(f"round numbers must be increasing and unique, got {numbers}")
        return rounds

    @model_validator(mode="after")
    def _cross_checks(self) -> Plan:
        from faultdrill.checks import CHECKS
        from faultdrill.platforms import PLATFORMS

        ids = [s.id for s in self.scenarios()] + [c.id for c in self.controls]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"scenario/control ids must be unique; repeated: {', '.join(dupes)}")
        platform = PLATFORMS.get(self.resources.platform)
        if platform is None:
            raise ValueError(
                f"resources.platform {self.resources.platform!r} is unknown; "
                f"use one of: {', '.join(sorted(PLATFORMS))}"
            )
        for item in self.items():
            fault_cls = FAULTS[item.fault.kind]
            missing = fault_cls.requires_for(item.fault) - platform.abilities_for(self.resources)
            if missing:
                raise ValueError(
                    f"{item.id}: fault {item.fault.kind!r} needs {', '.join(sorted(missing))}, "
                    f"which platform {platform.name!r} with isolation "
                    f"{self.resources.isolation!r} cannot do"
                )
            problem = fault_cls.validate_against(item.fault, self)
            if problem:
                raise ValueError(f"{item.id}: {problem}")
        evidence = sorted(n for n, reg in CHECKS.items() if reg.category != "expectation")
        for c in self.controls:
            if c.expected_check not in CHECKS:
                raise ValueError(
                    f"controls[{c.id}].expected_check {c.expected_check!r} is not a check; "
                    f"use one of: {', '.join(evidence)}"
                )
            if CHECKS[c.expected_check].category == "expectation":
                # expectation checks judge whether the drill ran as planned; a known-bad
                # workload cannot make them fail, so the control could never be caught
                raise ValueError(
                    f"controls[{c.id}].expected_check {c.expected_check!r} is an expectation "
                    "check, which a known-bad workload cannot fail; name a progress, "
                    f"resources or results check: {', '.join(evidence)}"
                )
        self._check_reference_workload()
        return self

    def _check_reference_workload(self) -> None:
        """The reference workload's config, as each item will run it, is valid."""
        if self.task.entrypoint.module != REFERENCE_WORKLOAD:
            return
        from faultdrill.workloads.lm_config import ConfigError, config_from_dict

        checks: list[tuple[str, Control | None]] = [("task.workload", None)]
        checks += [(f"controls[{c.id}].workload", c) for c in self.controls]
        for where, item in checks:
            try:
                config_from_dict(self.workload_config(item, "<ckpt_dir>"), source=where)
            except ConfigError as exc:
                raise ValueError(
                    f"{exc}; the fields are those of the reference workload's LMConfig "
                    "(faultdrill.workloads.lm_config)"
                ) from exc

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
        canon = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canon.encode()).hexdigest()


# --- loading -------------------------------------------------------------------------


def plan_schema() -> dict[str, Any]:
    return Plan.model_json_schema()


def load_plan(path: str | Path) -> Plan:
    """Read and validate a YAML (or JSON) plan file. Raises PlanError, never anything else."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise PlanError(str(path), [("(file)", f"cannot read: {exc.strerror}")]) from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(file)"
        problem = getattr(exc, "problem", None) or str(exc)
        raise PlanError(str(path), [(where, f"not valid YAML: {problem}")]) from exc
    return parse_plan(raw, source=str(path), plan_dir=path.resolve().parent)


def plan_without(plan: Plan, ids: set[str], *, source: str, **resources: Any) -> Plan:
    """The same plan without the scenarios and controls named in ``ids`` (a round left
    empty goes too), with ``resources`` fields replaced; validated again."""
    raw = plan.model_dump(mode="json")
    raw["resources"].update(resources)
    rounds = []
    for rnd in raw["rounds"]:
        keep = [s for s in rnd["scenarios"] if s["id"] not in ids]
        if keep:
            rounds.append({**rnd, "scenarios": keep})
    raw["rounds"] = rounds
    raw["controls"] = [c for c in raw["controls"] if c["id"] not in ids]
    return parse_plan(raw, source=source)


def parse_plan(raw: Any, *, source: str = "<plan>", plan_dir: Path | None = None) -> Plan:
    """Validate a parsed plan. ``plan_dir``: the directory of the plan file it came from, if
    any; a relative ``task.entrypoint.script`` is resolved against it and must exist."""
    if not isinstance(raw, dict):
        raise PlanError(
            source,
            [("(top level)", f"must be a mapping with task, data, ...; got {type(raw).__name__}")],
        )
    try:
        context = {"plan_dir": str(plan_dir)} if plan_dir is not None else None
        return Plan.model_validate(raw, context=context)
    except ValidationError as exc:
        errors = exc.errors()
        # A tuple whose item failed also reports itself "too short": noise, drop it.
        locs = [tuple(e["loc"]) for e in errors]
        errors = [
            e
            for e in errors
            if not (
                e["type"] == "too_short"
                and any(
                    other != tuple(e["loc"]) and other[: len(e["loc"])] == tuple(e["loc"])
                    for other in locs
                )
            )
        ]
        raise PlanError(source, [_explain(err) for err in errors]) from exc


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in FAULTS or str(part).startswith(("function-after", "tagged-union")):
            continue  # pydantic's union branch names are noise to a plan author
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _explain(err: Any) -> tuple[str, str]:
    kind, loc, value = err["type"], _loc(err["loc"]), err.get("input")
    msg = err["msg"]
    if kind == "extra_forbidden":
        return loc, f"unknown key {loc.rsplit('.', 1)[-1]!r}; remove it or check its spelling"
    if kind == "missing":
        return loc, "required field is missing; add it"
    if kind == "union_tag_invalid":
        tag = err.get("ctx", {}).get("tag", value)
        return (
            loc + ".kind",
            f"{tag!r} is not a known fault kind; use one of: {', '.join(sorted(FAULTS))}",
        )
    if kind == "union_tag_not_found":
        return loc, f"a fault needs 'kind'; use one of: {', '.join(sorted(FAULTS))}"
    if kind == "literal_error" and loc.endswith("fault.kind"):
        return loc, f"{value!r} is not a known fault kind; use one of: {', '.join(sorted(FAULTS))}"
    if kind in ("literal_error", "enum"):
        expected = err.get("ctx", {}).get("expected", "")
        return loc, f"{value!r} is not allowed; use {expected}"
    if kind == "value_error":
        return loc, msg.removeprefix("Value error, ")
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return loc, f"{msg.lower()}; got {value!r} ({type(value).__name__})"
    return loc, f"{msg} (got {value!r})"
