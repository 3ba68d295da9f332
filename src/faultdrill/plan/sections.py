"""The plan's baseline sections: frozen, typed data, each validated on its own.

The baseline is frozen first (task, data, resources, checkpoint policy, observation
window, responsibilities and ownership, stop conditions, tolerance), and every scenario
carries a trigger, an expected state, pass criteria and a recovery procedure; these are the
models for all of them. The plan that puts them together is :mod:`faultdrill.plan.model`.
"""

from __future__ import annotations

import keyword
import os
import re
from enum import Enum
from pathlib import Path, PurePosixPath
from string import Formatter
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from faultdrill.frozen import FieldProblems, Frozen, shown
from faultdrill.plan.source import file_kind

__all__ = [
    "ARG_PLACEHOLDERS",
    "OWNERS",
    "REFERENCE_WORKLOAD",
    "CheckpointPolicy",
    "Data",
    "Entrypoint",
    "Expected",
    "Frozen",
    "KubernetesSettings",
    "Observation",
    "Owner",
    "Ownership",
    "PassCriteria",
    "RaySettings",
    "Recovery",
    "RecoveryClass",
    "Resources",
    "Responsibility",
    "SlurmSettings",
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

#: Upper bounds of the plan's numbers (every number has one: :mod:`faultdrill.frozen`).
MAX_STEP = 10**9
DAY_S = 86_400
WEEK_S = 7 * DAY_S


class RecoveryClass(str, Enum):
    """How a job came back after a fault, from best to worst; then ``not-determined``: the
    drill cannot tell (the fault was never applied, the events are damaged). A judgement
    only: a plan cannot expect it."""

    AUTOMATIC = "automatic"
    MANUAL_CONFIRMATION = "manual-confirmation"
    MANUAL_RESTART = "manual-restart"
    UNRECOVERABLE = "unrecoverable"
    NOT_DETERMINED = "not-determined"


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

    @field_validator("module")
    @classmethod
    def _a_module_name(cls, value: str | None) -> str | None:
        """A dotted Python module name: it becomes ``python -m NAME`` on every node (in a
        batch script too), so nothing else may pass."""
        if value is None:
            return value
        parts = value.split(".")
        if len(value) > 255 or not all(
            _IDENTIFIER.fullmatch(p) and not keyword.iskeyword(p) for p in parts
        ):
            raise ValueError(
                f"module {shown(value)} is not a dotted Python module name; write one such as "
                "'mypkg.train' (letters, digits and '_', parts joined by '.', none starting "
                "with a digit), or use script: PATH for a file"
            )
        return value

    @field_validator("script")
    @classmethod
    def _script_exists(cls, value: str | None, info: ValidationInfo) -> str | None:
        base = (info.context or {}).get("plan_dir")
        if value is None or base is None:
            return value  # not loaded from a file (a recorded run's copy): nothing to resolve
        if len(value) > 4096:  # PATH_MAX: no file has such a name
            raise ValueError(f"script path {shown(value)} is longer than 4096 characters")
        path = Path(os.path.expanduser(value))  # Path.expanduser raises for ~nosuchuser
        if not path.is_absolute():
            path = Path(base) / path
        kind = file_kind(path)
        if kind != "file":
            raise ValueError(
                f"script {shown(value)} {kind} (looked for {path}); give a path "
                f"relative to the plan file's directory ({base}) or an absolute one"
            )
        return str(path.resolve())

    @field_validator("args")
    @classmethod
    def _known_placeholders(cls, args: tuple[str, ...]) -> tuple[str, ...]:
        """Each placeholder is one of :data:`ARG_PLACEHOLDERS`, bare: no conversion, format
        spec, attribute or index (``{run_dir:999999999}`` would ask for gigabytes)."""
        for i, arg in enumerate(args):
            problem = _placeholder_problem(arg)
            if problem:
                raise ValueError(
                    f"args[{i}] {shown(arg)} has an unknown or malformed placeholder "
                    f"({problem}); use {', '.join('{' + k + '}' for k in ARG_PLACEHOLDERS)}, "
                    "and '{{' / '}}' for a literal brace"
                )
        return args


#: One part of a dotted module name (ASCII: a name that travels through shells and configs).
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _placeholder_problem(arg: str) -> str | None:
    try:
        fields = [
            (name, spec, conv) for _, name, spec, conv in Formatter().parse(arg) if name is not None
        ]
    except ValueError as exc:  # a lone brace
        return str(exc)
    for name, spec, conv in fields:
        if name not in ARG_PLACEHOLDERS:
            return shown(name)
        if spec or conv:
            return f"{{{name}}} takes no conversion or format spec"
    return None


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
    read_position: int = Field(0, ge=0, le=2**53)
    access: str = Field("", description="the identity the job reads the data with, as agreed")
    path: str = Field(
        "",
        description="a file or directory holding the data snapshot; its content digest is "
        "taken before and after the drill (the data dossier's change record); '' for none",
    )


class Timeouts(Frozen):
    """Timeouts that decide detection time; recorded in the resource dossier."""

    rdzv_join_s: int = Field(30, ge=1, le=DAY_S)
    rdzv_last_call_s: int = Field(1, ge=1, le=DAY_S)
    rdzv_close_s: int = Field(5, ge=1, le=DAY_S)
    keep_alive_interval_s: int = Field(1, ge=1, le=DAY_S)
    keep_alive_max_attempt: int = Field(3, ge=1, le=1000)
    rdzv_read_s: int = Field(10, ge=1, le=DAY_S)
    gloo_s: int = Field(30, ge=1, le=DAY_S)
    monitor_interval_s: float = Field(0.1, ge=0.01, le=60)


# --- platform: slurm ---------------------------------------------------------------------

#: sbatch options faultdrill writes itself (the batch script's layout and its requeue).
_SBATCH_OWN = (
    "--nodes",
    "-N",
    "--ntasks-per-node",
    "--cpus-per-task",
    "--output",
    "-o",
    "--chdir",
    "-D",
    "--job-name",
    "-J",
    "--open-mode",
    "--requeue",
    "--no-requeue",
    "--no-kill",
    "-k",
    "--parsable",
)
#: Settings of the embedded cluster's slurm.conf (a real cluster's own are read from it).
_EMBEDDED_ONLY = (
    "slurmd_timeout_s",
    "message_timeout_s",
    "kill_wait_s",
    "cred_expire_s",
    "return_to_service",
    "sched_interval_s",
)


class SlurmSettings(Frozen):
    """``resources.slurm`` (``platform: slurm``): which Slurm cluster, and the options that
    decide how it recovers a job (all recorded in the resource dossier).

    ``embedded: true`` brings a Slurm cluster up on this machine for each item (root,
    ``isolation: netns``, Debian's ``slurmctld slurmd slurm-client munge``); otherwise the
    job goes to the cluster that ``sbatch`` on PATH reaches, and ``shared_dir`` names a
    directory that every node and this machine see at the same path: the run directory
    (``--out``) must be below it, since the job writes its events and checkpoints there."""

    embedded: bool = Field(
        False, description="bring an embedded cluster up on this machine for each item"
    )
    shared_dir: str | None = Field(
        None,
        description="real cluster: a directory every node and this machine see at the same "
        "path; run directories (--out) must be below it",
    )
    python: str | None = Field(
        None,
        description="real cluster: the interpreter on the nodes, with faultdrill and torch "
        "(default: this machine's, which must then be on the shared file system)",
    )
    sbatch_options: tuple[str, ...] = Field(
        (), description="extra sbatch options, e.g. --partition=gpu --account=a --time=30"
    )
    requeue: bool = Field(True, description="sbatch --requeue: requeue the job on a node failure")
    no_kill: bool = Field(
        False, description="sbatch --no-kill: keep the allocation when one of its nodes fails"
    )
    kill_on_bad_exit: bool = Field(
        True, description="srun --kill-on-bad-exit: one task failing ends the step"
    )
    slurmd_timeout_s: int = Field(5, ge=1, le=3600, description="embedded: SlurmdTimeout")
    message_timeout_s: int = Field(5, ge=1, le=100, description="embedded: MessageTimeout")
    kill_wait_s: int = Field(5, ge=1, le=600, description="embedded: KillWait")
    cred_expire_s: int = Field(
        5,
        ge=5,
        le=3600,
        description="embedded: munge cred_expire, also the hold-off before a requeued job "
        "may start (Slurm's default is 120 s)",
    )
    return_to_service: int = Field(
        2,
        ge=0,
        le=2,
        description="embedded: ReturnToService (2: a node that registers again is usable)",
    )
    sched_interval_s: int = Field(2, ge=1, le=60, description="embedded: sched_interval")

    @field_validator("sbatch_options")
    @classmethod
    def _own_options(cls, opts: tuple[str, ...]) -> tuple[str, ...]:
        for i, opt in enumerate(opts):
            name = opt.split("=", 1)[0]
            if not opt.startswith("-") or any(c in opt for c in "\n\r\0"):
                raise ValueError(
                    f"[{i}] {opt!r} is not one sbatch option; write each as --name=value"
                )
            if name in _SBATCH_OWN:
                raise ValueError(
                    f"[{i}] {name} is set by faultdrill (from resources and slurm.requeue / "
                    "no_kill); remove it"
                )
        return opts

    @model_validator(mode="after")
    def _which_cluster(self) -> SlurmSettings:
        if self.embedded:
            for name in ("shared_dir", "python"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name} is for a real cluster; the embedded cluster runs on this "
                        f"machine: remove {name} or set embedded: false"
                    )
            return self
        if self.shared_dir is None:
            raise ValueError(
                "a real Slurm cluster needs shared_dir (a directory every node and this "
                "machine see at the same path); or set embedded: true to drill an embedded "
                "cluster on this machine"
            )
        if not self.shared_dir.startswith("/"):
            raise ValueError(f"shared_dir must be an absolute path (got {self.shared_dir!r})")
        tuned = [n for n in _EMBEDDED_ONLY if n in self.model_fields_set]
        if tuned:
            raise ValueError(
                f"{', '.join(tuned)} configure the embedded cluster only (a real cluster's are "
                "its slurm.conf, recorded from `scontrol show config`); remove them"
            )
        return self


def slurm_section_problem(res: Resources) -> str | None:
    """What is wrong with ``resources.slurm`` for this platform and layout, or None."""
    if res.platform != "slurm":
        if res.slurm is not None:
            return f"slurm applies only with platform: slurm (platform is {res.platform!r})"
        return None
    if res.slurm is None:
        return (
            "platform slurm needs a slurm section: slurm: {embedded: true} for an embedded "
            "cluster on this machine, or slurm: {shared_dir: /shared/path} for the cluster "
            "sbatch reaches"
        )
    if res.slurm.embedded and res.isolation != "netns":
        return (
            "the embedded Slurm cluster puts each node in a network namespace: set isolation: netns"
        )
    if not res.slurm.embedded and res.spares:
        return (
            f"spares ({res.spares}): on a real cluster, spares are the cluster's own idle "
            "nodes, which Slurm picks; set spares: 0"
        )
    return None


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
    health_check_period_ms: int = Field(500, ge=50, le=600_000, description="GCS -> raylet [3000]")
    health_check_timeout_ms: int = Field(500, ge=50, le=600_000, description="[10000]")
    health_check_failure_threshold: int = Field(3, ge=1, le=1000, description="[5]")
    gcs_reconnect_timeout_s: int = Field(
        60, ge=5, le=3600, description="how long raylets and drivers wait for a lost GCS [60]"
    )
    train_health_check_interval_s: float = Field(
        0.5, gt=0, le=600, description="Train controller poll interval [2]"
    )
    train_worker_health_check_timeout_s: float = Field(
        10.0, gt=0, le=3600, description="a hung Train worker health check [600]"
    )
    train_worker_group_start_timeout_s: float = Field(
        90.0, gt=0, le=3600, description="how long a new worker group may take to start [60]"
    )
    drain_deadline_s: float = Field(
        5.0, gt=0, le=120, description="node-drain: how long a drained node keeps running [30]"
    )
    object_store_mb: int = Field(100, ge=75, le=1_000_000, description="each node's object store")

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


def ray_section_problem(res: Resources) -> str | None:
    """What is wrong with ``resources.ray`` for this platform and layout, or None."""
    if res.ray is not None and res.platform != "ray":
        return (
            f"ray: settings for platform ray, but platform is {res.platform!r}; "
            "remove the ray section or set platform: ray"
        )
    if res.ray is not None and res.ray.is_embedded and res.isolation != "netns":
        return (
            "platform ray with an embedded cluster needs isolation: netns (each Ray "
            "node its own network namespace, as root); set isolation: netns, or "
            "ray.address to use a running cluster"
        )
    return None


def kubernetes_section_problem(res: Resources) -> str | None:
    """What is wrong with ``resources.kubernetes`` for this platform and layout, or None."""
    k8s = res.kubernetes
    if res.platform != "kubernetes":
        if k8s is not None:
            return (
                f"kubernetes: is for platform kubernetes (platform is {res.platform!r}); remove it"
            )
        return None
    if k8s is None:
        return (
            "platform kubernetes needs a kubernetes: section; set kubernetes: "
            "{test_cluster: true} (the test cluster faultdrill starts) or kubernetes: "
            "{kubeconfig: PATH, manifest: JOB.yaml} (a cluster that exists)"
        )
    if res.spares and not k8s.test_cluster:
        return (
            f"spares ({res.spares}) are nodes of the test cluster; a cluster given by "
            "kubeconfig schedules on its own nodes: set spares: 0"
        )
    return None


# --- resources ------------------------------------------------------------------------------


# --- Kubernetes (resources.platform: kubernetes) ---------------------------------------


def _plan_relative(value: str, info: ValidationInfo, what: str) -> str:
    """``value`` as an absolute path (relative to the plan file's directory when the plan
    was loaded from a file), which must be a file then; unchanged without a plan file."""
    base = (info.context or {}).get("plan_dir")
    path = Path(os.path.expanduser(value))  # Path.expanduser raises for ~nosuchuser
    if base is None:
        return value  # a recorded run's copy: resolved when it was loaded
    if not path.is_absolute():
        path = Path(base) / path
    kind = file_kind(path)
    if kind != "file":
        raise ValueError(
            f"{what} {shown(value)} {kind} (looked for {path}); give a path "
            f"relative to the plan file's directory ({base}) or an absolute one"
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
        # the template itself is checked on admission (faultdrill.admit), against the
        # platform's template rules
        return _plan_relative(value, info, "manifest")

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
    min_nodes: int | None = Field(None, ge=1, le=16, description="elastic minimum; default = nodes")
    spares: int = Field(0, ge=0, le=4)
    max_restarts: int = Field(3, ge=0, le=1000)
    devices: str = "cpu"
    timeouts: Timeouts = Timeouts()
    slurm: SlurmSettings | None = None
    kubernetes: KubernetesSettings | None = Field(
        None, description="platform kubernetes: the cluster, namespace and job template"
    )
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
    def _platform_sections(self) -> Resources:
        problem = (
            slurm_section_problem(self)
            or ray_section_problem(self)
            or kubernetes_section_problem(self)
        )
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _elastic_range(self) -> Resources:
        problems = []
        if self.min_nodes is not None and self.min_nodes > self.nodes:
            problems.append(
                ("min_nodes", f"min_nodes ({self.min_nodes}) must be <= nodes ({self.nodes})")
            )
        if self.spares and self.platform == "local" and self.isolation == "none":
            # Only the namespace cluster re-places work on a spare; without it a spare
            # would sit idle and a plan that counts on it would prove nothing.
            problems.append(
                (
                    "spares",
                    f"spares ({self.spares}) are used only with isolation: netns (the local "
                    "platform without isolation never places work on a spare); set spares: 0 "
                    "or isolation: netns",
                )
            )
        if problems:
            raise FieldProblems(problems)
        return self

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node


class CheckpointPolicy(Frozen):
    dir: str = Field("ckpt", description="relative to the scenario's run directory")
    every_steps: int = Field(10, ge=1, le=MAX_STEP)
    keep: int = Field(3, ge=1, le=1000)
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
                f"(got {shown(value)}); use a plain name such as 'ckpt'"
            )
        return value

    @field_validator("latest_file")
    @classmethod
    def _latest_is_a_name(cls, value: str) -> str:
        if value and (value in (".", "..") or "/" in value or "\\" in value or "\0" in value):
            raise ValueError(
                f"must be a file name inside checkpoint.dir, not a path (got {shown(value)}); "
                "use e.g. 'latest', or '' for none"
            )
        return value


class Observation(Frozen):
    sample_hz: float = Field(10.0, ge=1, le=50, description="process samples per second")
    net_hz: float = Field(
        4.0, ge=2, le=20, description="network track (isolation netns): samples per second"
    )
    settle_s: float = Field(
        1.0, ge=0, le=600, description="keep observing this long after the job ends"
    )
    post_s: float = Field(
        0.0,
        ge=0,
        le=600,
        description="after the settle snapshot, keep sampling processes, ports, the network "
        "and events this much longer, then snapshot again (a replica that lingers, a port "
        "still held); 0 (the default) for drills: the wait costs every item that much",
    )
    post_steps: int = Field(
        0,
        ge=0,
        le=10_000_000,
        description="steps after recovery over which the loss and evaluation trend is "
        "compared with the baseline's where bitwise equality does not apply; 0: every step "
        "after recovery",
    )
    child_grace_s: float = Field(
        10.0,
        ge=0,
        le=3600,
        description="how long a replica's child process (DataLoader worker, helper) may "
        "outlive its replica before it counts as left behind; covers the framework's own "
        "clean-up (DataLoader workers notice a dead parent within 5 s)",
    )


class Responsibility(Frozen):
    """Who injects, observes, recovers and signs: each a person or a role, by name."""

    injector: str
    observer: str
    recovery_operator: str
    signer: str

    @field_validator("injector", "observer", "recovery_operator", "signer")
    @classmethod
    def _names_someone(cls, value: str) -> str:
        if not value.strip():
            raise ValueError(
                f"must name a person or role (got {shown(value)}); write who does it, "
                "e.g. 'on-call SRE' or a name"
            )
        return value


#: Who can own what a recovery depends on.
Owner = Literal["platform", "enterprise-operations", "vendor-support"]
OWNERS: tuple[str, ...] = ("platform", "enterprise-operations", "vendor-support")


class Ownership(Frozen):
    """Who is responsible for each thing a recovery may depend on: the platform's own
    capability, the enterprise's operations, or the vendor's support. A dependency left out
    is listed as "to be agreed" wherever a recovery used it."""

    spare_nodes: Owner | None = Field(None, description="reserved or spare nodes to restart on")
    restart_budget: Owner | None = Field(None, description="automatic restarts (max_restarts)")
    operator_actions: Owner | None = Field(
        None, description="a person on call who confirms, resubmits or repairs"
    )
    checkpoint_storage: Owner | None = Field(
        None, description="the storage that holds the checkpoints a restart loads"
    )
    environment_preparation: Owner | None = Field(
        None, description="runtime, data access and routes on a node before it is used"
    )
    dedicated_network: Owner | None = Field(
        None, description="a network reserved for the job (isolated links, its own fabric)"
    )
    recovery_runbook: Owner | None = Field(
        None, description="the recovery scripts, state descriptions and fault diagnosis"
    )

    def owner_of(self, dependency: str) -> str:
        """The owner named for ``dependency`` (a field name), or "to be agreed"."""
        value = getattr(self, dependency, None)
        return str(value) if value is not None else "to be agreed"


class StopConditions(Frozen):
    max_wall_s: float = Field(240.0, gt=0, le=WEEK_S)
    max_no_progress_s: float = Field(90.0, gt=0, le=DAY_S)
    stop_on_nonfinite_loss: bool = True


class StopOverrides(Frozen):
    max_wall_s: float | None = Field(None, gt=0, le=WEEK_S)
    max_no_progress_s: float | None = Field(None, gt=0, le=DAY_S)
    stop_on_nonfinite_loss: bool | None = None


class Tolerance(Frozen):
    rtol: float = Field(1e-3, ge=0, le=1)
    atol: float = Field(1e-5, ge=0, le=1e6)


class Trigger(Frozen):
    """When to inject: exactly one of the three."""

    at_step: int | None = Field(None, ge=1, le=MAX_STEP)
    after_checkpoint: int | None = Field(
        None,
        ge=1,
        le=MAX_STEP,
        description="after the K-th checkpoint save (on a platform that commits "
        "checkpoints, e.g. Ray Train, after its K-th commit too)",
    )
    after_s: float | None = Field(None, ge=0, le=DAY_S, description="seconds after the first step")

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

    @field_validator("recovery")
    @classmethod
    def _a_class_to_expect(cls, value: RecoveryClass) -> RecoveryClass:
        if value == RecoveryClass.NOT_DETERMINED:
            raise ValueError(
                "'not-determined' is what a drill says when it cannot tell; expect one of "
                "automatic, manual-confirmation, manual-restart, unrecoverable"
            )
        return value


class PassCriteria(Frozen):
    results: Literal["auto", "bitwise", "band", "tolerance"] = Field(
        "auto",
        description="auto: bitwise where world size and config are unchanged, else the band "
        "measured on the baseline where not bitwise reproducible; tolerance where they changed "
        "(see faultdrill.checks.results)",
    )
    max_recomputed_steps: int | None = Field(None, ge=0, le=MAX_STEP)


class Recovery(Frozen):
    """What the recovery operator does if the platform does not recover by itself."""

    action: Literal["none", "resubmit"] = "none"
    confirm: bool = Field(False, description="a human must confirm before the job may continue")
    runbook: str = ""
    permission: str = Field(
        "", description="the permission the operator's action needs (e.g. submit jobs of task X)"
    )
    steps: tuple[str, ...] = Field((), description="the operator's steps, in order")
