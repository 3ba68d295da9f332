"""Real experiments on the Kubernetes test cluster (measurements for docs/kubernetes-notes.md).

usage: python scripts/k8s_experiments.py SCENARIO OUT_DIR [--steps N] [--at-step K]

SCENARIO: baseline | delete-pod | node-down | drain | apiserver-pause | apiserver-kill |
partition | partition-kubelet | link-cut. A 2-node training job (torchrun per pod, c10d rendezvous on the control-plane
host, ``faultdrill.workloads.lm``) on a test cluster with 2 worker nodes and 1 spare; the
fault is applied through ``KubernetesPlatform``'s actions when any rank reaches step K.
Prints a JSON summary (times relative to the injection, from the recorded events).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from faultdrill import faults as _faults  # noqa: F401  (registers every undo)
from faultdrill.events import EventSink, read_jsonl
from faultdrill.ledger import Ledger
from faultdrill.plan import Resources
from faultdrill.platforms.api import JobSpec
from faultdrill.platforms.kubernetes.job import write_lm_config
from faultdrill.platforms.kubernetes.platform import KubernetesPlatform, apply_change


def events(out: Path) -> list[dict[str, Any]]:
    evs = [e for p in sorted((out / "events").glob("*.jsonl")) for e in read_jsonl(p)]
    return sorted(evs, key=lambda e: e["mono"])


def max_step(out: Path) -> int:
    steps = [e["step"] for e in events(out) if e["src"] == "probe" and e["kind"] == "step"]
    return max(steps, default=0)


def wait_step(out: Path, k: int, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while max_step(out) < k:
        if time.monotonic() > deadline:
            raise SystemExit(f"no rank reached step {k} within {timeout_s} s")
        time.sleep(0.2)


def inject(p: KubernetesPlatform, scenario: str, sink: EventSink) -> list[str]:
    """Apply the scenario's changes; returns ledger kinds to revert after the hold."""
    victim = p.replicas()
    node = next(r.node for r in victim if r.role == "worker" and r.rank == 1)
    changes: list[Any]
    if scenario == "delete-pod":
        changes = p.delete_pod(1)
    elif scenario == "node-down":
        changes = p.node_down(node)
    elif scenario == "drain":
        changes = p.node_drain(node)
    elif scenario == "apiserver-pause":
        changes = p.control_plane_pause()
    elif scenario == "apiserver-kill":
        changes = p.control_plane_stop()
    elif scenario == "partition":
        changes = p.partition(node)
    elif scenario == "link-cut":  # the node's link only: kubelet and pod cut off for real
        changes = [p._link_cut(node)]
    elif scenario == "partition-kubelet":  # the kubelet loses the apiserver, the pod does not
        changes = p.partition(node)[:1]
    else:
        return []
    sink.emit("fault", "injected", scenario=scenario, node=node, labels=[c.label for c in changes])
    for c in changes:
        apply_change(p.ledger, c)
    return [c.kind for c in changes if c.reversible]


HOLD_S = {
    "apiserver-pause": 20.0,
    "apiserver-kill": 5.0,
    "partition": 45.0,
    "partition-kubelet": 45.0,
    "link-cut": 45.0,
    "drain": 30.0,
}


def summary(out: Path) -> dict[str, Any]:
    evs = events(out)
    inj = next((e for e in evs if e["src"] == "fault" and e["kind"] == "injected"), None)
    t0 = inj["mono"] if inj else evs[0]["mono"]

    def rel(e: dict[str, Any]) -> float:
        return round(e["mono"] - t0, 2)

    keep = {
        "node_lost",
        "k8s_taint",
        "replica_lost",
        "pod_bound",
        "pod_started",
        "pod_killing",
        "pod_killed",
        "pod_deleted",
        "pod_gone",
        "node_state",
        "k8s_watch_error",
        "k8s_watch_ok",
        "heartbeat_failed",
        "heartbeat_ok",
        "kubelet_paused",
        "kubelet_resumed",
        "membership_change",
        "worker_group_failed",
        "rdzv_complete",
        "dead_node",
        "reverted",
        "ckpt_load",
        "ckpt_none",
        "run_start",
        "agent_exit",
        "k8s_job_state",
        "job_state",
    }
    lines = []
    for e in evs:
        if e["kind"] in keep and (e["mono"] >= t0 - 1 or e["kind"] in ("run_start", "ckpt_none")):
            brief = {
                k: e[k]
                for k in (
                    "node",
                    "pod",
                    "key",
                    "effect",
                    "op",
                    "state",
                    "why",
                    "step",
                    "id",
                    "rank",
                    "world_size",
                    "rc",
                    "pid",
                    "error",
                    "after_s",
                    "gap_s",
                    "ready",
                    "reason",
                )
                if k in e and e[k] not in (None, "")
            }
            lines.append(f"{rel(e):+8.2f} {e['src']}:{e['kind']} {json.dumps(brief)}")
    k8s_events = [
        f"{rel(e):+8.2f} {e['component']}: {e['reason']} {e['object']}: {e['message'][:90]}"
        for e in evs
        if e["kind"] == "k8s_event" and e["mono"] >= t0 - 1
    ]
    steps = [e for e in evs if e["src"] == "probe" and e["kind"] == "step"]
    after = [e for e in steps if e["mono"] > t0]
    by_pid: dict[int, list[float]] = {}
    for e in after:
        by_pid.setdefault(e["pid"], []).append(rel(e))
    return {
        "timeline": lines,
        "k8s_events": k8s_events,
        "steps_after_injection_by_pid": {p: [v[0], v[-1], len(v)] for p, v in by_pid.items()},
        "final_step": max((e["step"] for e in steps), default=0),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("out", type=Path)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--at-step", type=int, default=15)
    ap.add_argument("--step-sleep", type=float, default=0.5)
    args = ap.parse_args()
    out: Path = args.out.resolve()
    (out / "events").mkdir(parents=True, exist_ok=True)
    run_id = f"k8sx-{uuid.uuid4().hex[:8]}"
    ledger = Ledger(out / "ledger.jsonl", run_id=run_id)
    ledger.activate()
    sink = EventSink(out / "events", run_id)
    res = Resources(platform="kubernetes", nodes=2, spares=1)
    p = KubernetesPlatform(res, out, ledger, sink)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cfg = write_lm_config(
        out / "lm.json",
        out / "ckpt",
        steps=args.steps,
        ckpt_every=10,
        step_sleep_s=args.step_sleep,
        gloo_timeout_s=10.0,
    )
    job = JobSpec(
        run_id=run_id,
        task_id=run_id,
        argv=["-m", "faultdrill.workloads.lm", f"--workload-config={cfg}"],
        env={},
        nodes=["n1", "n2"],
        procs_per_node=1,
        min_nodes=1,
        max_nodes=2,
        max_restarts=3,
        work_dir=out,
        events_dir=out / "events",
    )
    t_start = time.monotonic()
    try:
        p.prepare()
        p.submit(job)
        if args.scenario != "baseline":
            wait_step(out, args.at_step)
            kinds = inject(p, args.scenario, sink)
            hold = HOLD_S.get(args.scenario)
            if hold and kinds:
                time.sleep(hold)
                for entry in reversed(ledger.pending()):
                    if entry.kind in kinds:
                        ledger.revert(entry.id)
                        sink.emit("fault", "reverted", change=entry.kind, label=entry.label)
        state = p.wait_job(300)
        sink.emit("harness", "k8s_job_state", state=state.value)
        result = {
            "scenario": args.scenario,
            "job": state.value,
            "wall_s": round(time.monotonic() - t_start, 1),
        }
    finally:
        p.stop(grace_s=5)
        p.teardown()
        errors = ledger.revert_all()
        if not ledger.pending():
            ledger.deactivate()
    result.update(summary(out), revert_errors=errors)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
