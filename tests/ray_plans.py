"""Plans for the Ray Train drills (no tests here): the reference workload under Ray Train on
the embedded cluster, short (30 steps, a checkpoint every 10), one cluster per plan run.

* :func:`default_raw`: the default run's plan: one drill per fault family (kill-worker,
  node-down, a partition long enough to leave the cut-off worker alive, a GCS restart with
  redis, checkpoint storage read-only across a save, a damaged checkpoint) and of each new
  kind Ray can be drilled with (a straggler, slow checkpoint storage; each where the
  machine can do it), redis GCS.
* :func:`slow_raw`: the slow set's plan: the other faults and the negative controls, GCS
  in memory.
"""

from __future__ import annotations

import shutil
import uuid
from typing import Any

import pytest

from faultdrill.host.linux import netns_unavailable
from faultdrill.host.storage import fuse_missing
from faultdrill.host.throttle import cpu_controller_missing
from faultdrill.platforms.ray.embedded import ray_missing, redis_missing

__all__ = ["default_raw", "needs_ray_cluster", "slow_raw"]

_missing = ray_missing() or netns_unavailable() or redis_missing()
if _missing is None and shutil.which("iptables") is None:
    _missing = "iptables not found"
needs_ray_cluster = pytest.mark.skipif(
    _missing is not None,
    reason=f"no embedded Ray cluster here: {_missing} (CI installs them: scripts/setup-ray.sh)",
)

N2 = {"node": "n2"}
#: rank 1's Train worker held to 5 % of a core for 5 s (as tests/new_kinds_local.py's SLOW)
SLOW = {"kind": "slow-worker", "target": {"rank": 1}, "cpu_percent": 5, "for_s": 5}
#: Ray's storage path through the FUSE mirror, each write 150 ms late across the step-20 save
STORAGE_SLOW = {"kind": "storage-slow", "latency_ms": 150, "for_s": 6}


def _base(task: str, *, gcs_ft: str, reconnect_s: int) -> dict[str, Any]:
    return {
        "version": 1,
        "task": {
            "id": f"{task}-{uuid.uuid4().hex[:8]}",
            "config_version": "lm-v1",
            "code_id": "faultdrill.workloads.lm@0.1.0",
            "entrypoint": {"module": "faultdrill.workloads.lm"},
            "workload": {"steps": 30, "global_batch": 8, "step_sleep_s": 0.05},
        },
        "data": {"snapshot": "synthetic-markov-v1", "digest": "seed:1234/dataset_size:512"},
        "resources": {
            "platform": "ray",
            "isolation": "netns",
            "nodes": 2,
            "procs_per_node": 1,
            "spares": 1,
            "max_restarts": 3,
            "ray": {"gcs_ft": gcs_ft, "gcs_reconnect_timeout_s": reconnect_s},
        },
        "checkpoint": {"dir": "ckpt", "every_steps": 10, "keep": 3},
        "seeds": {"global": 1234},
        # Ray's raylet ends a finished job's actors a moment after its driver exits.
        "observation": {"sample_hz": 10, "settle_s": 2.0},
        "responsibility": {
            "injector": "a",
            "observer": "b",
            "recovery_operator": "c",
            "signer": "d",
        },
        "stop": {"max_wall_s": 420, "max_no_progress_s": 240},
    }


def _sc(
    sid: str, fault: dict[str, Any], trigger: dict[str, Any], **expected: Any
) -> dict[str, Any]:
    return {"id": sid, "fault": fault, "trigger": trigger, "expected": expected}


def default_raw() -> dict[str, Any]:
    """Baseline and six scenarios, each fault family once (see the module)."""
    # The cut-off raylet waits 180 s for its GCS (Ray's default is 60): longer than the
    # partition's rest of the job, so the old worker on n2 lives on as it would through
    # any partition shorter than that timeout.
    raw = _base("ray-default", gcs_ft="redis", reconnect_s=180)
    at15 = {"at_step": 15}
    # After the first checkpoint is saved *and* Ray registered it (the controller holds it
    # once every rank reported, at its next poll): a fault at a fixed step could land in
    # between on a busy machine, and Ray would rightly resume from scratch.
    registered1 = {"after_checkpoint": 1}
    raw["rounds"] = [
        {
            "round": 1,
            "name": "process, storage",
            "continue_on_failure": True,
            "scenarios": [
                _sc("kill-worker", {"kind": "kill-worker", "target": {"rank": 1}}, registered1),
                _sc(
                    "storage-ro",
                    {"kind": "storage-outage", "mode": "read-only", "for_s": 1.5},
                    {"at_step": 18},
                    resume="no-restart",
                ),
                *_new_kinds(),
            ],
        },
        {
            "round": 2,
            "name": "node, network, checkpoint",
            "continue_on_failure": True,
            "scenarios": [
                _sc("node-down", {"kind": "node-down", "target": N2}, registered1),
                _sc(
                    "partition",
                    {"kind": "partition", "target": N2, "for_s": 150},
                    at15,
                    recovery="manual-confirmation",
                ),
                # After Ray registered step-20 (the controller holds it once every rank
                # reported): Ray hands the damaged checkpoint over.
                _sc(
                    "corrupt",
                    {"kind": "corrupt-checkpoint", "damage": "flip-bytes"},
                    {"after_checkpoint": 2},
                ),
            ],
        },
        {
            # Last: a GCS brought back on a busy machine has left the cluster unable to
            # run the next item (its raylets lost the GCS for good); the run's scope
            # restores the cluster between items, but no other family should hang on it.
            "round": 3,
            "name": "control plane",
            "continue_on_failure": True,
            "scenarios": [
                _sc(
                    "gcs-restart",
                    {"kind": "control-plane-outage", "mode": "stop", "for_s": 5},
                    {"at_step": 5},
                    resume="no-restart",
                ),
            ],
        },
    ]
    raw["controls"] = []
    return raw


def _new_kinds() -> list[dict[str, Any]]:
    """The straggler at step 10 and the slow storage at step 18, across the step-20 save,
    each where the machine can do it (its test skips on the same condition)."""
    kinds = []
    if cpu_controller_missing() is None:
        kinds.append(_sc("slow-r1", SLOW, {"at_step": 10}, job="completes", resume="no-restart"))
    if not fuse_missing():
        kinds.append(_sc("storage-slow", STORAGE_SLOW, {"at_step": 18}, resume="no-restart"))
    return kinds


def slow_raw() -> dict[str, Any]:
    """The faults and modes the default run leaves out, and a negative control per
    evidence family; GCS in memory (no fault tolerance)."""
    raw = _base("ray-slow", gcs_ft="none", reconnect_s=60)
    at15 = {"at_step": 15}
    registered1 = {"after_checkpoint": 1}  # saved and registered by Ray (see default_raw)
    raw["rounds"] = [
        {
            "round": 1,
            "name": "the rest",
            "continue_on_failure": True,
            "scenarios": [
                _sc("drain", {"kind": "node-drain", "target": N2}, registered1),
                _sc(
                    "loss",
                    {"kind": "link-loss", "target": N2, "percent": 30, "for_s": 3},
                    at15,
                    resume="no-restart",
                ),
                _sc(
                    "gcs-pause",
                    {"kind": "control-plane-outage", "mode": "pause", "for_s": 4},
                    {"at_step": 5},
                    resume="no-restart",
                ),
                _sc(
                    "gcs-lost",
                    {"kind": "control-plane-outage", "mode": "stop", "for_s": 5},
                    {"at_step": 5},
                    job="fails",
                    recovery="unrecoverable",
                    resume="no-restart",
                ),
            ],
        }
    ]
    kill1 = {"kind": "kill-worker", "target": {"rank": 1}}
    raw["controls"] = [
        {
            "id": "ctl-handover-stale",
            "title": "Ray is handed the previous checkpoint: a retry restores the wrong one",
            "workload": {"bad_mode": "handover-stale"},
            "fault": kill1,
            # Ray's first registration is step 20's (step 10 is reported without a
            # checkpoint in this mode), naming step-000010's directory
            "trigger": registered1,
            "expected_check": "progress.resume-point",
        },
        {
            "id": "ctl-stale-replica",
            "title": "an old replica keeps running after Ray restarted the group",
            "workload": {"bad_mode": "stale-replica"},
            # its owner (the highest rank) killed outright: nothing of Ray's stops its child
            "fault": kill1,
            "trigger": {"at_step": 15},
            "expected_check": "resources.no-stale-replica",
        },
        {
            "id": "ctl-optimizer-lost",
            "title": "optimizer and LR schedule not restored after the restart",
            "workload": {"bad_mode": "optimizer-not-restored"},
            "fault": kill1,
            "trigger": registered1,
            "expected_check": "results.loss-matches-baseline",
        },
    ]
    return raw
