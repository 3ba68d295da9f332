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
    "KubernetesSettings",
    "Observation",
    "PassCriteria",
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


# --- Kubernetes (resources.platform: kubernetes) ---------------------------------------


def _plan_relative(value: str, info: ValidationInfo, what: str) -> str:
    """``value`` as an absolute path (relative to the plan file's directory when the plan
    was loaded from a file), which must be a file then; unchanged without a plan file."""
    base = (info.context or {}).get("plan_dir")
    path = Path(value).expanduser()
    if base is None:
        return value  # a recorded run's copy: resolved when it was loaded
    if not path.is_absolute():
        path = Path(base) / path
    if not path.is_file():
        raise ValueError(
            f"{what} {value!r} not found (looked for {path}); give a path relative to the "
            f"plan file's directory ({base}) or an absolute one"
        )
    return str(path.resolve())


class KubernetesSettings(Frozen):
    """Where and how the job runs on ``platform: kubernetes``
    (:mod:`faultdrill.platforms.kubernetes`). Exactly one of ``test_cluster`` (the real
    v1.20.2 control plane that faultdrill starts on this host, with process kubelets) or
    ``kubeconfig`` (a cluster that exists)."""

    test_cluster: bool = Field(
        False,
        description="start the test cluster for the run (root): real control plane, "
        "emulated kubelets; torn down at the end of the run",
    )
    kubeconfig: str | None = Field(
        None, description="a cluster that exists: its kubeconfig (relative to the plan file)"
    )
    context: str | None = Field(None, description="kubeconfig context (default: current)")
    namespace: str = Field(
        "default", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", description="the job's"
    )
    manifest: str | None = Field(
        None,
        description="the job's manifest template (YAML, relative to the plan file): a "
        "batch/v1 Job, PyTorchJob, JobSet or Volcano Job, plus any objects it needs, with "
        "{{placeholders}} faultdrill fills (see docs/kubernetes.md); default on the test "
        "cluster: a built-in batch/v1 Job of torchrun agents",
    )
    rendezvous: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9.-]+:\d{1,5}$",
        description="host:port of the c10d rendezvous store the template's "
        "{{rdzv_endpoint}} names (a real cluster; the test cluster has its own)",
    )
    kill_worker: Literal["delete-pod", "signal"] = Field(
        "delete-pod",
        description="kill-worker deletes the rank's pod (grace 0 for SIGKILL), or signals "
        "its worker process (test cluster only)",
    )
    pod_grace_s: int = Field(
        5, ge=0, le=300, description="terminationGracePeriodSeconds of the built-in job's pods"
    )

    @field_validator("kubeconfig")
    @classmethod
    def _kubeconfig_exists(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else _plan_relative(value, info, "kubeconfig")

    @field_validator("manifest")
    @classmethod
    def _manifest_valid(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        path = _plan_relative(value, info, "manifest")
        if (info.context or {}).get("plan_dir") is not None:
            from faultdrill.platforms.kubernetes.manifest import template_problem

            problem = template_problem(Path(path))
            if problem:
                raise ValueError(problem)
        return path

    @model_validator(mode="after")
    def _one_cluster(self) -> KubernetesSettings:
        if self.test_cluster == (self.kubeconfig is not None):
            raise ValueError(
                "set exactly one of test_cluster: true (faultdrill starts a test cluster) "
                "or kubeconfig: PATH (a cluster that exists)"
            )
        if self.kill_worker == "signal" and not self.test_cluster:
            raise ValueError(
                "kill_worker: signal needs the test cluster (faultdrill cannot reach a "
                "real cluster's processes); use delete-pod"
            )
        if self.manifest and not self.test_cluster and self.rendezvous is None:
            from faultdrill.platforms.kubernetes.manifest import uses_placeholder

            if uses_placeholder(Path(self.manifest), "rdzv_endpoint"):
                raise ValueError(
                    "the manifest uses {{rdzv_endpoint}}: set rendezvous: HOST:PORT (the "
                    "address of the job's c10d store in the cluster)"
                )
        if not self.manifest and not self.test_cluster:
            raise ValueError(
                "a cluster given by kubeconfig needs manifest: PATH (the job's template: "
                "its image, volumes and rendezvous are the cluster's)"
            )
        return self


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
    kubernetes: KubernetesSettings | None = Field(
        None, description="platform kubernetes: the cluster, namespace and job template"
    )

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
        self._kubernetes_section()
        return self

    def _kubernetes_section(self) -> None:
        k8s = self.kubernetes
        if self.platform != "kubernetes":
            if k8s is not None:
                raise ValueError(
                    f"kubernetes: is for platform kubernetes (platform is {self.platform!r}); "
                    "remove it"
                )
            return
        if k8s is None:
            raise ValueError(
                "platform kubernetes needs a kubernetes: section; set kubernetes: "
                "{test_cluster: true} (the test cluster faultdrill starts) or kubernetes: "
                "{kubeconfig: PATH, manifest: JOB.yaml} (a cluster that exists)"
            )
        if self.spares and not k8s.test_cluster:
            raise ValueError(
                f"spares ({self.spares}) are nodes of the test cluster; a cluster given by "
                "kubeconfig schedules on its own nodes: set spares: 0"
            )

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
