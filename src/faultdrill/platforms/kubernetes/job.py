"""A distributed training job as a batch/v1 Job: one torchrun agent per pod, one pod per node.

Kubernetes 1.20 has no Indexed Jobs (1.21) and no pod index anywhere, so ranks come from
torchrun's c10d rendezvous, not from the pod: every pod runs the same command,
``torchrun --nnodes=MIN:N --rdzv-backend=c10d --rdzv-endpoint=<fixed address>
--rdzv-conf=...,is_host=0 --local-addr=$(POD_IP) ...``, and the agents agree on ranks at
each rendezvous round. The fixed address is a rendezvous store (a ``TCPStore`` server,
:data:`STORE_MODULE`) outside the job's pods, on the control-plane host, so losing any pod
or node leaves the rendezvous alive (with torchrun's own ``is_host`` store the pod hosting
it is a single point of failure). It stands in for a Service in front of a store.

The Job: ``parallelism = nodes`` and ``completions`` unset (the work-queue pattern: the
Job is complete once one pod succeeded and none is active, and no pod is created after a
success), ``restartPolicy: Never`` (a failed agent is replaced by the Job controller,
counted against ``backoffLimit``), a required pod anti-affinity on the job's label (one
pod per node), labels ``faultdrill.io/run`` and ``faultdrill.io/job`` on the Job and its
pods (what faultdrill deletes at the end). Events and checkpoints go to host directories
every pod sees (the test cluster's nodes share the host's filesystem), through the
probe's ``FAULTDRILL_EVENTS_DIR``; they survive a pod's deletion.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ENV_POD_UID", "LABEL_JOB", "LABEL_RUN", "STORE_MODULE", "TrainingJob", "store_argv"]

#: Set by the process kubelet in every pod process's environment (inherited by its
#: descendants): how a pod's processes are found on the host.
ENV_POD_UID = "FAULTDRILL_POD_UID"
LABEL_RUN = "faultdrill.io/run"
LABEL_JOB = "faultdrill.io/job"
AGENT_MODULE = "faultdrill.platforms.local.agent"
STORE_MODULE = "faultdrill.platforms.kubernetes.rdzv_store"


def store_argv(port: int) -> list[str]:
    """The rendezvous store's command line (binds ``0.0.0.0:port`` in its namespace)."""
    return [sys.executable, "-m", STORE_MODULE, str(port)]


@dataclass(frozen=True)
class TrainingJob:
    """Everything the manifest needs; :meth:`manifest` renders it."""

    name: str
    run_id: str
    task_id: str
    nodes: int
    rdzv: str  # host:port of the rendezvous store
    events_dir: Path
    work_dir: Path
    argv: list[str]  # after the agent's options, e.g. ["-m", "faultdrill.workloads.lm", ...]
    min_nodes: int = 1
    procs_per_node: int = 1
    max_restarts: int = 3
    backoff_limit: int = 6
    namespace: str = "default"
    grace_s: int = 5
    env: dict[str, str] = field(default_factory=dict)

    @property
    def selector(self) -> str:
        return f"{LABEL_JOB}={self.name}"

    def labels(self) -> dict[str, str]:
        return {LABEL_RUN: self.run_id, LABEL_JOB: self.name}

    def agent_args(self) -> list[str]:
        conf = ",".join(
            [
                "join_timeout=60",
                "last_call_timeout=1",
                "close_timeout=5",
                "keep_alive_interval=1",
                "keep_alive_max_attempt=3",
                "read_timeout=10",
                "is_host=0",
            ]
        )
        return [
            f"--nnodes={self.min_nodes}:{self.nodes}",
            f"--nproc-per-node={self.procs_per_node}",
            f"--max-restarts={self.max_restarts}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={self.rdzv}",
            f"--rdzv-id={self.run_id}",
            f"--rdzv-conf={conf}",
            "--monitor-interval=0.1",
            "--local-addr=$(POD_IP)",
            *self.argv,
        ]

    def pod_env(self) -> list[dict[str, Any]]:
        plain = {
            "FAULTDRILL_EVENTS_DIR": str(self.events_dir),
            "FAULTDRILL_TASK_ID": self.task_id,
            "FAULTDRILL_RUN_ID": self.run_id,
            # restarted workers otherwise read the previous round's gloo addresses
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
            "OMP_NUM_THREADS": "1",
            "TMPDIR": str(self.work_dir / "tmp"),
            "PYTHONUNBUFFERED": "1",
            "LOGLEVEL": "INFO",
            **self.env,
        }
        out: list[dict[str, Any]] = [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ]
        return out + [{"name": k, "value": v} for k, v in plain.items()]

    def manifest(self) -> dict[str, Any]:
        """The batch/v1 Job object."""
        affinity = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {LABEL_JOB: self.name}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
        container = {
            "name": "trainer",
            "image": "faultdrill/process-kubelet-runs-no-image",
            "command": [sys.executable, "-m", AGENT_MODULE],
            "args": self.agent_args(),
            "env": self.pod_env(),
            "workingDir": str(self.work_dir),
        }
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": self.name, "labels": self.labels()},
            "spec": {
                # No completions: with completions = N, a pod evicted while its process
                # finished the training (a partitioned kubelet) is not counted, and every
                # replacement fails against the closed rendezvous: the Job never completes
                # (measured, docs/kubernetes-notes.md).
                "parallelism": self.nodes,
                "backoffLimit": self.backoff_limit,
                "template": {
                    "metadata": {"labels": self.labels()},
                    "spec": {
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": self.grace_s,
                        "affinity": affinity,
                        "containers": [container],
                    },
                },
            },
        }


def write_lm_config(path: Path, ckpt_dir: Path, **fields: Any) -> Path:
    """The reference workload's JSON config (see ``faultdrill.workloads.lm``)."""
    from faultdrill.workloads.lm_config import config_from_dict

    raw = {"ckpt_dir": str(ckpt_dir), **fields}
    config_from_dict(raw, str(path))  # fail here, not in every pod
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(raw, indent=1) + "\n")
    return path
