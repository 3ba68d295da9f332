"""The training job's manifest: the built-in batch/v1 Job, and the values of a template.

Kubernetes 1.20 has no Indexed Jobs (1.21) and no pod index anywhere, so ranks come from
torchrun's c10d rendezvous, not from the pod: every pod runs the same command,
``torchrun --nnodes=MIN:N --rdzv-backend=c10d --rdzv-endpoint=<fixed address>
--rdzv-conf=...,is_host=0 --local-addr=$(POD_IP) ...``, and the agents agree on ranks at
each rendezvous round. The fixed address is a rendezvous store (a ``TCPStore`` server,
:data:`STORE_MODULE`) outside the job's pods (on the test cluster: on the control-plane
host), so losing any pod or node leaves the rendezvous alive (with torchrun's own
``is_host`` store the pod hosting it is a single point of failure). It stands in for a
Service in front of a store.

The built-in Job (:func:`builtin_template`, used on the test cluster when the plan gives no
``manifest``): ``parallelism = nodes`` and ``completions`` unset (the work-queue pattern:
the Job is complete once one pod succeeded and none is active, and no pod is created after
a success), ``restartPolicy: Never`` (a failed agent is replaced by the Job controller,
counted against ``backoffLimit``), a required pod anti-affinity (one pod per node). It is a
template like any other (:mod:`.manifest`), filled by :func:`template_values`; events and
checkpoints go to the run's directories, which every pod sees (the test cluster's nodes
share the host's filesystem; a real cluster mounts the run directory from shared storage),
so they survive a pod's deletion.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from faultdrill.plan.sections import Timeouts
    from faultdrill.platforms.api import JobSpec
    from faultdrill.platforms.kubernetes.manifest import Value

__all__ = [
    "AGENT_MODULE",
    "ENV_POD_UID",
    "LABEL_JOB",
    "STORE_MODULE",
    "builtin_template",
    "job_name",
    "rdzv_conf",
    "store_argv",
    "template_values",
    "write_lm_config",
]

#: Set by the process kubelet in every pod process's environment (inherited by its
#: descendants): how a pod's processes are found on the host.
ENV_POD_UID = "FAULTDRILL_POD_UID"
LABEL_JOB = "faultdrill.io/job"
AGENT_MODULE = "faultdrill.platforms.local.agent"
STORE_MODULE = "faultdrill.platforms.kubernetes.rdzv_store"


def store_argv(port: int) -> list[str]:
    """The rendezvous store's command line (binds ``0.0.0.0:port`` in its namespace)."""
    return [sys.executable, "-m", STORE_MODULE, str(port)]


def job_name(item_id: str, run_id: str) -> str:
    """A DNS-1123 name for the item's job, unique per run id: ``<item>-<4 hex>``."""
    base = re.sub(r"[^a-z0-9-]+", "-", item_id.lower()).strip("-")[:32] or "job"
    return f"{base}-{hashlib.sha1(run_id.encode()).hexdigest()[:4]}"


def rdzv_conf(t: Timeouts) -> str:
    """torchrun's ``--rdzv-conf`` from the plan's timeouts (the store is never the agent's)."""
    return ",".join(
        [
            f"join_timeout={t.rdzv_join_s}",
            f"last_call_timeout={t.rdzv_last_call_s}",
            f"close_timeout={t.rdzv_close_s}",
            f"keep_alive_interval={t.keep_alive_interval_s}",
            f"keep_alive_max_attempt={t.keep_alive_max_attempt}",
            f"read_timeout={t.rdzv_read_s}",
            "is_host=0",
        ]
    )


def template_values(
    job: JobSpec,
    *,
    name: str,
    namespace: str,
    rdzv_endpoint: str,
    python: str,
    rdzv: str,
) -> dict[str, Value]:
    """Every placeholder of :mod:`.manifest` for one drill item."""
    return {
        "run_id": job.run_id,
        "job_name": name,
        "namespace": namespace,
        "task_id": job.task_id,
        "entrypoint": list(job.argv),
        "python": python,
        "events_dir": str(job.events_dir),
        "ckpt_dir": job.env.get("FAULTDRILL_CKPT_DIR", str(job.work_dir / "ckpt")),
        "run_dir": str(job.work_dir),
        "workload_config": str(job.work_dir / "workload.json"),
        "nodes": len(job.nodes),
        "min_nodes": job.min_nodes,
        "procs_per_node": job.procs_per_node,
        "max_restarts": job.max_restarts,
        "rdzv_endpoint": rdzv_endpoint,
        "rdzv_id": job.run_id,
        "rdzv_conf": rdzv,
    }


def builtin_template(grace_s: int, monitor_s: float) -> dict[str, Any]:
    """The built-in batch/v1 Job (see the module docstring), with placeholders."""
    anti = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {"matchLabels": {LABEL_JOB: "{{job_name}}"}},
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
    }
    plain = {
        # restarted workers otherwise read the previous round's gloo addresses
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "LOGLEVEL": "INFO",
    }
    env: list[dict[str, Any]] = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    env += [{"name": k, "value": v} for k, v in plain.items()]
    container = {
        "name": "trainer",
        "image": "faultdrill/process-kubelet-runs-no-image",
        "command": ["{{python}}", "-m", AGENT_MODULE],
        "args": [
            "--nnodes={{min_nodes}}:{{nodes}}",
            "--nproc-per-node={{procs_per_node}}",
            "--max-restarts={{max_restarts}}",
            "--rdzv-backend=c10d",
            "--rdzv-endpoint={{rdzv_endpoint}}",
            "--rdzv-id={{rdzv_id}}",
            "--rdzv-conf={{rdzv_conf}}",
            f"--monitor-interval={monitor_s:g}",
            "--local-addr=$(POD_IP)",
            "{{entrypoint}}",
        ],
        "env": env,
        "workingDir": "{{run_dir}}",
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "{{job_name}}"},
        "spec": {
            # No completions: with completions = N, a pod evicted while its process
            # finished the training (a partitioned kubelet) is not counted, and every
            # replacement fails against the closed rendezvous: the Job never completes
            # (measured, docs/kubernetes-notes.md).
            "parallelism": "{{nodes}}",
            "backoffLimit": 6,
            "template": {
                "metadata": {"labels": {LABEL_JOB: "{{job_name}}"}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": grace_s,
                    "affinity": {"podAntiAffinity": anti},
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
