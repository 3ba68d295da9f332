"""The plan's baseline sections: frozen, typed data, each validated on its own.

The baseline is frozen first (task, data, resources, checkpoint policy, observation
window, responsibilities, stop conditions, tolerance), and every scenario carries a
trigger, an expected state, pass criteria and a recovery procedure; these are the models
for all of them. The plan that puts them together is :mod:`faultdrill.plan.model`.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

__all__ = [
    "ARG_PLACEHOLDERS",
    "REFERENCE_WORKLOAD",
    "CheckpointPolicy",
    "Data",
    "Entrypoint",
    "Expected",
    "Frozen",
    "Observation",
    "PassCriteria",
    "RaySettings",
    "Recovery",
    "RecoveryClass",
    "Resources",
    "Responsibility",
    "StopConditions",
    "StopOverrides",
    "Task",
    "Timeouts",
    "Tolerance",
    "Trigger",
]

#: The reference workload's module: its ``task.workload`` (and each control's ``workload``)
#: is checked against its config (``faultdrill.workloads.lm_config``) when the plan loads.
REFERENCE_WORKLOAD = "faultdrill.workloads.lm"
#: The placeholders ``task.entrypoint.args`` may use; the engine fills them in per item.
ARG_PLACEHOLDERS = ("run_dir", "ckpt_dir", "events_dir", "workload_config")


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RecoveryClass(str, Enum):
    """How a job came back after a fault, from best to worst."""

    AUTOMATIC = "automatic"
    MANUAL_CONFIRMATION = "manual-confirmation"
    MANUAL_RESTART = "manual-restart"
    UNRECOVERABLE = "unrecoverable"


class Entrypoint(Frozen):
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


class Task(Frozen):
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


class Data(Frozen):
    snapshot: str
    digest: str = ""
    read_position: int = Field(0, ge=0)
    access: str = ""


class Timeouts(Frozen):
    """Timeouts that decide detection time; recorded in the resource dossier."""

    rdzv_join_s: int = Field(30, ge=1)
    rdzv_last_call_s: int = Field(1, ge=1)
    rdzv_close_s: int = Field(5, ge=1)
    keep_alive_interval_s: int = Field(1, ge=1)
    keep_alive_max_attempt: int = Field(3, ge=1)
    rdzv_read_s: int = Field(10, ge=1)
    gloo_s: int = Field(30, ge=1)
    monitor_interval_s: float = Field(0.1, gt=0)


# --- platform: ray -----------------------------------------------------------------------


class RaySettings(Frozen):
    """``resources.ray``: where the Ray Train job runs, and Ray's detection settings.

    ``embedded: true`` (the default): faultdrill brings a Ray cluster up on the namespace
    cluster for the run (``isolation: netns``, as root) and down at its end: a head on a
    node of its own (``head: own``, 0 CPUs: the control plane alone, Ray's recommended
    layout) or on ``n1`` (``head: n1``, which then also runs Train workers), and a Ray
    worker node on each of ``n1..nN`` (``procs_per_node`` CPUs each). The driver runs on
    ``n1``. ``address: HOST:PORT`` instead submits to a running cluster of which this host
    is a node (the driver attaches to this host's raylet; faultdrill then owns no node and
    no link). The health-check and Train settings are set short for drills (Ray's defaults
    in brackets) and recorded in the resource dossier."""

    embedded: bool = True
    address: str | None = Field(
        None, description="HOST:PORT of a running Ray cluster's GCS (instead of embedded)"
    )
    head: Literal["own", "n1"] = Field(
        "own", description="own: a head node of its own (0 CPUs); n1: the head on n1"
    )
    gcs_ft: Literal["none", "redis"] = Field(
        "none",
        description="GCS fault tolerance: redis = GCS tables in a redis-server (Debian) on "
        "the head node, a GCS restart keeps the cluster; none = in memory, a restart loses it",
    )
    health_check_period_ms: int = Field(500, ge=50, description="GCS -> raylet [3000]")
    health_check_timeout_ms: int = Field(500, ge=50, description="[10000]")
    health_check_failure_threshold: int = Field(3, ge=1, description="[5]")
    gcs_reconnect_timeout_s: int = Field(
        60, ge=5, description="how long raylets and drivers wait for a lost GCS [60]"
    )
    train_health_check_interval_s: float = Field(
        0.5, gt=0, description="Train controller poll interval [2]"
    )
    train_worker_health_check_timeout_s: float = Field(
        10.0, gt=0, description="a hung Train worker health check [600]"
    )
    train_worker_group_start_timeout_s: float = Field(
        90.0, gt=0, description="how long a new worker group may take to start [60]"
    )
    drain_deadline_s: float = Field(
        5.0, gt=0, le=120, description="node-drain: how long a drained node keeps running [30]"
    )
    object_store_mb: int = Field(100, ge=75, description="each node's object store")

    @model_validator(mode="before")
    @classmethod
    def _embedded_or_address(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        address, embedded = data.get("address"), data.get("embedded")
        if address is not None and embedded:
            raise ValueError(
                "set either embedded: true or address: HOST:PORT, not both (an address "
                "names a running cluster, embedded brings one up)"
            )
        if address is None and embedded is False:
            raise ValueError("embedded: false needs address: HOST:PORT of a running cluster")
        if isinstance(address, str):
            host, _, port = address.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(
                    f"address {address!r} is not HOST:PORT (the GCS address, e.g. 10.0.0.1:6379)"
                )
        return {**data, "embedded": address is None}

    @property
    def is_embedded(self) -> bool:
        return self.embedded


class Resources(Frozen):
    platform: str = "local"
    isolation: Literal["none", "netns"] = "none"
    nodes: int = Field(2, ge=1, le=16)
    procs_per_node: int = Field(1, ge=1, le=8)
    min_nodes: int | None = Field(None, ge=1, description="elastic minimum; default = nodes")
    spares: int = Field(0, ge=0, le=4)
    max_restarts: int = Field(3, ge=0)
    devices: str = "cpu"
    timeouts: Timeouts = Timeouts()
    ray: RaySettings | None = Field(
        None, description="platform ray: the cluster and Ray's settings (default: embedded)"
    )

    @model_validator(mode="before")
    @classmethod
    def _ray_defaults(cls, data: Any) -> Any:
        # A Ray plan without the section runs with its defaults, written out so that the
        # resource dossier records every setting that decides detection.
        if isinstance(data, dict) and data.get("platform") == "ray" and data.get("ray") is None:
            return {**data, "ray": {}}
        return data

    @model_validator(mode="after")
    def _ray_section(self) -> Resources:
        if self.ray is not None and self.platform != "ray":
            raise ValueError(
                f"ray: settings for platform ray, but platform is {self.platform!r}; "
                "remove the ray section or set platform: ray"
            )
        if self.ray is not None and self.ray.is_embedded and self.isolation != "netns":
            raise ValueError(
                "platform ray with an embedded cluster needs isolation: netns (each Ray "
                "node its own network namespace, as root); set isolation: netns, or "
                "ray.address to use a running cluster"
            )
        return self

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


class CheckpointPolicy(Frozen):
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


class Observation(Frozen):
    sample_hz: float = Field(10.0, gt=0, le=50)
    net_hz: float = Field(
        4.0, ge=2, le=20, description="network track (isolation netns): samples per second"
    )
    settle_s: float = Field(1.0, ge=0, description="keep observing this long after the job ends")
    child_grace_s: float = Field(
        10.0,
        ge=0,
        description="how long a replica's child process (DataLoader worker, helper) may "
        "outlive its replica before it counts as left behind; covers the framework's own "
        "clean-up (DataLoader workers notice a dead parent within 5 s)",
    )


class Responsibility(Frozen):
    injector: str
    observer: str
    recovery_operator: str
    signer: str


class StopConditions(Frozen):
    max_wall_s: float = Field(240.0, gt=0)
    max_no_progress_s: float = Field(90.0, gt=0)
    stop_on_nonfinite_loss: bool = True


class StopOverrides(Frozen):
    max_wall_s: float | None = Field(None, gt=0)
    max_no_progress_s: float | None = Field(None, gt=0)
    stop_on_nonfinite_loss: bool | None = None


class Tolerance(Frozen):
    rtol: float = Field(1e-3, ge=0)
    atol: float = Field(1e-5, ge=0)


class Trigger(Frozen):
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


class Expected(Frozen):
    job: Literal["completes", "fails"] = "completes"
    recovery: RecoveryClass = RecoveryClass.AUTOMATIC
    resume: Literal["latest-valid", "previous-valid", "scratch", "no-restart"] = "latest-valid"
    state: str = Field("", description="the expected state in words, for the report")


class PassCriteria(Frozen):
    results: Literal["auto", "bitwise", "tolerance"] = "auto"
    max_recomputed_steps: int | None = Field(None, ge=0)


class Recovery(Frozen):
    """What the recovery operator does if the platform does not recover by itself."""

    action: Literal["none", "resubmit"] = "none"
    confirm: bool = Field(False, description="a human must confirm before the job may continue")
    runbook: str = ""
