"""The process kubelet: an EMULATED kubelet that runs each pod's command as local processes.

One per node, as its own process inside the node's network namespace and cgroup, so a
node-down that kills the node's cgroup kills it with its pods, and a cut link cuts it off
the apiserver for real. Run as ``python -m faultdrill.platforms.kubernetes.kubelet
--node=N --kubeconfig=K --address=A --ifname=IF --dir=D [--events-dir=E --task=T]``.

What it does (the design of ``../shared/notes/kubernetes.md`` section 9):

* **Node**: registers Node ``N`` (capacity cpu 4, memory 8Gi, pods 110; Ready=True and the
  three pressure conditions False; InternalIP ``A``; the ``--taint`` s given, as a real
  kubelet's ``--register-with-taints``); renews Lease ``kube-node-lease/N``
  every 2 s and posts NodeStatus every 10 s (the node controller's 10 s grace needs both).
* **Pods**: lists then watches pods with ``spec.nodeName=N`` (re-listed at least every
  30 s). A new pod's ``containers[0]`` ``command + args`` runs with its ``env``
  (``value``, ``valueFrom.fieldRef``; ``$(VAR)`` expanded as Kubernetes does) in
  ``workingDir`` (default ``D/pods/<uid>``), stdout+stderr to ``D/pods/<uid>/<c>.log``,
  in its own session. Added to every pod's environment: ``FAULTDRILL_POD_UID`` (how the
  kubelet finds all of a pod's processes, descendants included), ``FAULTDRILL_NODE=N``,
  ``GLOO_SOCKET_IFNAME=IF`` unless the pod sets it (the node's "pod network interface").
  Status: Running (podIP = hostIP = ``A``, containerID ``proc://<pid>``), then Succeeded
  or Failed with ``terminated{exitCode, reason}``. ``restartPolicy`` Always / OnFailure
  restart the command in place (``restartCount``; delay 1 s doubling to 16 s).
* **Deletion**: on ``deletionTimestamp`` every process of the pod gets SIGTERM, then
  SIGKILL after the pod's grace period, and the kubelet finishes the graceful deletion
  (delete with grace 0, uid precondition). A pod that vanished from the API while its
  processes run (seen after a fresh list) is killed the same way.
* **Partition switch**: while the file ``D/paused`` exists the kubelet makes no API call
  at all (no heartbeat, no watch, no status): the node goes NotReady and its pods are
  evicted, but its processes keep running; when the file goes it re-lists, kills what
  was deleted meanwhile and heart-beats again. That is the split brain a partitioned
  node shows; a real link cut produces the same by itself.
* **SIGTERM**: kills its pods' processes (TERM, 5 s, KILL) and exits 0. (A real kubelet
  leaves containers running; here nothing may outlive the drill.)

Not emulated: images, volumes (no service-account token mounted), probes, init and
sidecar containers (only ``containers[0]`` runs), resource limits, logs/exec (no kubelet
API), adopting running pods after the kubelet itself restarted (it starts them again).

Events (when ``--events-dir`` is given, or the drill item named by ``--events-target``: see
``_Events``) go to ``<E>/kubelet-<N>.jsonl`` as ``platform`` events on the host's clocks: ``kubelet_start``, ``kubelet_registered``, ``pod_started``,
``pod_exited``, ``pod_restart``, ``pod_killing``, ``pod_killed``, ``pod_deleted``,
``heartbeat_failed``, ``heartbeat_ok``, ``kubelet_paused``, ``kubelet_resumed``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultdrill.host import procfs
from faultdrill.platforms.kubernetes.job import ENV_POD_UID

__all__ = ["PodRun", "ProcessKubelet", "expand", "main"]

VERSION = "v1.20.2-faultdrill-process-kubelet"
_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: a defined VAR is replaced, an undefined one is
    left as written, ``$$`` becomes ``$``."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR.sub(sub, text)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class PodRun:
    """What this kubelet does with one pod."""

    uid: str
    namespace: str
    name: str
    pod: Any
    proc: subprocess.Popen[bytes] | None = None
    started_at: str = ""
    finished_at: str = ""
    exit_code: int | None = None
    restarts: int = 0
    phase: str = "Pending"
    reason: str = ""
    message: str = ""
    next_start: float = 0.0
    terminating: bool = False
    killed: bool = False
    deleted: bool = False
    posted: dict[str, Any] = field(default_factory=dict)


class _Events:
    """The kubelet's events: to its log always, and to ``<events dir>/kubelet-<node>.jsonl``
    of the drill item running now. The item is named by the file ``target`` (JSON
    ``{"events_dir": ..., "task": ...}``, written by the harness when an item starts and
    removed when it ends), re-read whenever it changes, so one kubelet serves every item
    of a run; ``events_dir`` given alone is a fixed target."""

    def __init__(self, events_dir: str, task: str, node: str, target: str = "") -> None:
        self.node = node
        self.target = target
        self.fd: int | None = None
        self.stamp: tuple[float, int] | None = None
        self.lock = threading.Lock()  # the heartbeat, sync and kill threads all emit
        self.base = {"src": "platform", "task": task, "node": node, "source": "process-kubelet"}
        if events_dir:
            self._open(events_dir)

    def _open(self, events_dir: str) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if events_dir:
            path = os.path.join(events_dir, f"kubelet-{self.node}.jsonl")
            with contextlib.suppress(OSError):  # the item's directory is gone: log only
                self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _follow_target(self) -> None:
        try:
            st = os.stat(self.target)
            stamp: tuple[float, int] | None = (st.st_mtime, st.st_size)
        except OSError:
            stamp = None
        if stamp == self.stamp:
            return
        self.stamp = stamp
        want: dict[str, Any] = {}
        if stamp is not None:
            with contextlib.suppress(OSError, ValueError):
                want = json.loads(Path(self.target).read_text())
        self.base["task"] = str(want.get("task", ""))
        self._open(str(want.get("events_dir", "")))

    def emit(self, kind: str, **fields: Any) -> None:
        with self.lock:
            if self.target:
                self._follow_target()
            line = {"ts": time.time(), "mono": time.monotonic(), **self.base, "kind": kind}
            text = json.dumps({**line, **fields}, default=str)
            print(text, flush=True)  # the kubelet's log
            if self.fd is not None:
                with contextlib.suppress(OSError):
                    os.write(self.fd, (text + "\n").encode())


class ProcessKubelet:
    """See the module docstring. ``run`` blocks until :meth:`shutdown`."""

    def __init__(self, args: argparse.Namespace) -> None:
        from kubernetes import client

        from faultdrill.platforms.kubernetes.client import api_client

        self.node: str = args.node
        self.address: str = args.address
        self.ifname: str = args.ifname
        self.dir = Path(args.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.taints: list[str] = list(args.taint or [])
        self.lease_s: float = args.lease_s
        self.status_s: float = args.status_s
        self.events = _Events(args.events_dir, args.task, self.node, args.events_target)
        api = api_client(Path(args.kubeconfig))
        self.core = client.CoreV1Api(api)
        self.coord = client.CoordinationV1Api(api)
        self.client = client
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.store: dict[str, Any] = {}  # uid -> V1Pod, as the API last said
        self.listed_at = 0.0  # monotonic time of the last successful LIST
        self.runs: dict[str, PodRun] = {}
        self.deleted: set[str] = set()  # uids this kubelet finished deleting
        self._was_paused = False

    # --- the partition switch ----------------------------------------------------------

    def paused(self) -> bool:
        now = (self.dir / "paused").exists()
        if now != self._was_paused:
            self._was_paused = now
            self.events.emit("kubelet_paused" if now else "kubelet_resumed")
            if not now:
                self.listed_at = 0.0
        return now

    # --- node registration and heartbeats ----------------------------------------------

    def _conditions(self) -> list[dict[str, Any]]:
        now = _now()
        conds = [
            ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID"),
            ("Ready", "True", "KubeletReady"),
        ]
        return [
            {
                "type": t,
                "status": s,
                "reason": r,
                "message": f"process kubelet: {r}",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
            for t, s, r in conds
        ]

    def _node_status(self) -> dict[str, Any]:
        res = {"cpu": "4", "memory": "8Gi", "pods": "110"}
        return {
            "capacity": res,
            "allocatable": res,
            "conditions": self._conditions(),
            "addresses": [
                {"type": "InternalIP", "address": self.address},
                {"type": "Hostname", "address": self.node},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": self.node,
                "systemUUID": self.node,
                "bootID": str(os.getpid()),
                "kernelVersion": os.uname().release,
                "osImage": "faultdrill process kubelet",
                "containerRuntimeVersion": "process://0",
                "kubeletVersion": VERSION,
                "kubeProxyVersion": VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def register(self) -> None:
        """Create the Node, or (it exists: a restarted kubelet) post its status."""
        from kubernetes.client.rest import ApiException

        labels = {
            "kubernetes.io/hostname": self.node,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "faultdrill.io/kubelet": "process",
        }
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.node, "labels": labels},
            "spec": {"taints": [_taint(t) for t in self.taints]},
            "status": self._node_status(),
        }
        try:
            self.core.create_node(body, _request_timeout=10)
        except ApiException as exc:
            if exc.status != 409:
                raise
            self.core.patch_node_status(
                self.node, {"status": self._node_status()}, _request_timeout=10
            )
        self.events.emit("kubelet_registered", address=self.address)

    def _renew_lease(self) -> None:
        from kubernetes.client.rest import ApiException

        spec = {
            "holderIdentity": self.node,
            "leaseDurationSeconds": 40,
            "renewTime": _micro_now(),
        }
        try:
            self.coord.patch_namespaced_lease(
                self.node, "kube-node-lease", {"spec": spec}, _request_timeout=5
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = {"metadata": {"name": self.node, "namespace": "kube-node-lease"}, "spec": spec}
            self.coord.create_namespaced_lease("kube-node-lease", body, _request_timeout=5)

    def heartbeat_loop(self) -> None:
        last_status = 0.0
        failing = False
        while not self.stopping.is_set():
            if not self.paused():
                try:
                    self._renew_lease()
                    if time.monotonic() - last_status >= self.status_s or failing:
                        self.core.patch_node_status(
                            self.node,
                            {"status": {"conditions": self._conditions()}},
                            _request_timeout=5,
                        )
                        last_status = time.monotonic()
                    if failing:
                        failing = False
                        self.events.emit("heartbeat_ok")
                except Exception as exc:  # any failure to reach the apiserver: try again
                    if not failing:
                        failing = True
                        self.events.emit("heartbeat_failed", error=str(exc)[:300])
            self.stopping.wait(self.lease_s)

    # --- the pod store (list + watch) --------------------------------------------------

    def watch_loop(self) -> None:
        from kubernetes import watch

        selector = f"spec.nodeName={self.node}"
        while not self.stopping.is_set():
            if self.paused():
                self.stopping.wait(0.2)
                continue
            try:
                listed = self.core.list_pod_for_all_namespaces(
                    field_selector=selector, _request_timeout=10
                )
                with self.lock:
                    self.store = {p.metadata.uid: p for p in listed.items}
                    self.listed_at = time.monotonic()
                self.wake.set()
                w = watch.Watch()
                for ev in w.stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector=selector,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=30,
                    _request_timeout=(5, 45),
                ):
                    if self.stopping.is_set() or self.paused():
                        w.stop()
                        break
                    self._on_event(ev)
            except Exception as exc:  # apiserver away, link cut, watch expired: re-list
                print(f"watch: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                self.stopping.wait(1.0)

    def _on_event(self, ev: dict[str, Any]) -> None:
        obj = ev.get("object")
        if ev.get("type") == "ERROR" or obj is None or not hasattr(obj, "metadata"):
            raise RuntimeError(f"watch error: {ev.get('raw_object')}")
        with self.lock:
            if ev["type"] == "DELETED":
                self.store.pop(obj.metadata.uid, None)
            else:
                self.store[obj.metadata.uid] = obj
        self.wake.set()

    # --- running pods ------------------------------------------------------------------

    def _pod_env(self, pod: Any, run: PodRun) -> dict[str, str]:
        # The node's environment (PATH, the interpreter's venv): what an image would give.
        # The harness's own FAULTDRILL_* settings are not the pod's, except the run id
        # (cleanup finds every process of the run by it).
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("FAULTDRILL_") or k == "FAULTDRILL_RUN_ID"
        }
        env[ENV_POD_UID] = run.uid
        env["FAULTDRILL_NODE"] = self.node
        env["HOSTNAME"] = pod.metadata.name
        c = pod.spec.containers[0]
        own: dict[str, str] = {}
        for var in c.env or []:
            if var.value_from is None:
                own[var.name] = expand(var.value or "", {**env, **own})
                continue
            ref = var.value_from.field_ref
            if ref is None:
                raise ValueError(f"env {var.name}: only value and fieldRef are supported")
            own[var.name] = self._field(pod, ref.field_path)
        env.update(own)
        env.setdefault("GLOO_SOCKET_IFNAME", self.ifname)
        return env

    def _field(self, pod: Any, path: str) -> str:
        m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
        if m:
            return str((getattr(pod.metadata, m.group(1)) or {}).get(m.group(2), ""))
        values = {
            "metadata.name": pod.metadata.name,
            "metadata.namespace": pod.metadata.namespace,
            "metadata.uid": pod.metadata.uid,
            "spec.nodeName": self.node,
            "spec.serviceAccountName": pod.spec.service_account_name or "",
            "status.podIP": self.address,
            "status.hostIP": self.address,
        }
        if path not in values:
            raise ValueError(f"fieldRef {path} is not supported by the process kubelet")
        return str(values[path])

    def _start(self, run: PodRun) -> None:
        pod = run.pod
        c = pod.spec.containers[0]
        pod_dir = self.dir / "pods" / run.uid
        pod_dir.mkdir(parents=True, exist_ok=True)
        try:
            env = self._pod_env(pod, run)
            argv = [expand(a, env) for a in [*(c.command or []), *(c.args or [])]]
            if not c.command:
                raise ValueError("no command: the process kubelet runs no images")
            log = open(pod_dir / f"{c.name}.log", "ab")  # noqa: SIM115  (the child holds it)
            with log:
                run.proc = subprocess.Popen(
                    argv,
                    env=env,
                    cwd=c.working_dir or pod_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except (OSError, ValueError) as exc:
            run.phase, run.reason, run.message = "Failed", "CreateContainerError", str(exc)
            run.exit_code, run.finished_at = 128, _now()
            self.events.emit("pod_exited", pod=run.name, uid=run.uid, rc=128, error=str(exc))
            return
        run.started_at, run.phase, run.exit_code = _now(), "Running", None
        self.events.emit(
            "pod_started",
            pod=run.name,
            namespace=run.namespace,
            uid=run.uid,
            pid=run.proc.pid,
            start_time=procfs.start_time(run.proc.pid),
            restarts=run.restarts,
            argv=argv,
        )
        self._event(run, "Started", f"Started process {run.proc.pid}")

    def _check_exit(self, run: PodRun) -> None:
        if run.proc is None or run.killed:
            return
        rc = run.proc.poll()
        if rc is None:
            return
        run.proc = None
        run.exit_code, run.finished_at = rc, _now()
        self.events.emit("pod_exited", pod=run.name, uid=run.uid, rc=rc)
        policy = run.pod.spec.restart_policy or "Always"
        if policy == "Always" or (policy == "OnFailure" and rc != 0):
            delay = min(16.0, 2.0 ** min(run.restarts, 4))
            run.restarts += 1
            run.next_start = time.monotonic() + delay
            self.events.emit("pod_restart", pod=run.name, uid=run.uid, delay_s=delay)
            return
        run.phase = "Succeeded" if rc == 0 else "Failed"
        run.reason = "Completed" if rc == 0 else "Error"

    def _kill(self, run: PodRun, grace_s: float, why: str) -> None:
        """SIGTERM every process of the pod, SIGKILL after ``grace_s`` (runs in a thread)."""
        t0 = time.monotonic()
        pids = procfs.pids_with_env(ENV_POD_UID, run.uid)
        self.events.emit(
            "pod_killing", pod=run.name, uid=run.uid, why=why, pids=pids, grace_s=grace_s
        )
        self._event(run, "Killing", f"Stopping pod processes ({why})")
        for pid in pids:
            procfs.kill_checked(pid, None, signal.SIGTERM)
        deadline = t0 + grace_s
        while time.monotonic() < deadline and procfs.pids_with_env(ENV_POD_UID, run.uid):
            time.sleep(0.1)
        for _ in range(50):
            left = procfs.pids_with_env(ENV_POD_UID, run.uid)
            if not left:
                break
            for pid in left:
                procfs.kill_checked(pid, None, signal.SIGKILL)
            time.sleep(0.1)
        if run.proc is not None:
            rc = run.proc.wait()
            run.exit_code = rc if rc >= 0 else 128 - rc
        self.events.emit(
            "pod_killed",
            pod=run.name,
            uid=run.uid,
            why=why,
            after_s=round(time.monotonic() - t0, 3),
        )
        run.killed = True

    # --- the sync loop -----------------------------------------------------------------

    def sync(self) -> None:
        """One pass: start, check, restart, terminate, delete; then post changed statuses."""
        with self.lock:
            store = dict(self.store)
            fresh = self.listed_at > 0
        for uid, pod in store.items():
            if uid in self.deleted:
                continue  # its DELETED watch event is on the way
            deleting = pod.metadata.deletion_timestamp is not None
            run = self.runs.get(uid)
            if run is None:
                phase = pod.status.phase if pod.status is not None else None
                if phase in ("Succeeded", "Failed") and not deleting:
                    continue  # finished before this kubelet started: nothing to run
                run = self.runs[uid] = PodRun(uid, pod.metadata.namespace, pod.metadata.name, pod)
            run.pod = pod
            if deleting:
                self._terminate(run, "deleted")
                continue
            self._check_exit(run)
            due = time.monotonic() >= run.next_start
            if run.proc is None and run.phase in ("Pending", "Running") and due:
                self._start(run)
        if fresh and not self.paused():
            for uid, run in list(self.runs.items()):
                if uid not in store and not run.terminating:
                    self._terminate(run, "gone from the API", delete=False)
        for run in list(self.runs.values()):
            self._post(run)

    def _terminate(self, run: PodRun, why: str, delete: bool = True) -> None:
        if not run.terminating:
            run.terminating = True
            grace = run.pod.metadata.deletion_grace_period_seconds
            if grace is None:
                grace = run.pod.spec.termination_grace_period_seconds
            threading.Thread(
                target=self._kill,
                args=(run, float(30 if grace is None else grace), why),
                daemon=True,
            ).start()
            return
        if not run.killed or self.paused():
            return
        if not delete:
            self.runs.pop(run.uid, None)
            return
        if not run.deleted:
            self._delete(run)

    def _delete(self, run: PodRun) -> None:
        from kubernetes.client.rest import ApiException

        body = self.client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=self.client.V1Preconditions(uid=run.uid)
        )
        try:
            self.core.delete_namespaced_pod(
                run.name, run.namespace, body=body, grace_period_seconds=0, _request_timeout=5
            )
        except ApiException as exc:
            if exc.status not in (404, 409):
                return  # retried on the next pass
        except Exception:
            return
        run.deleted = True
        self.deleted.add(run.uid)
        self.events.emit("pod_deleted", pod=run.name, uid=run.uid)
        self.runs.pop(run.uid, None)

    def _status(self, run: PodRun) -> dict[str, Any]:
        c = run.pod.spec.containers[0]
        running = run.phase == "Running" and run.proc is not None
        if running:
            state: dict[str, Any] = {"running": {"startedAt": run.started_at}}
            state.update(waiting=None, terminated=None)
        elif run.exit_code is not None:
            state = {
                "terminated": {
                    "exitCode": run.exit_code,
                    "reason": run.reason or ("Completed" if run.exit_code == 0 else "Error"),
                    "message": run.message or None,
                    "startedAt": run.started_at or None,
                    "finishedAt": run.finished_at or None,
                    "containerID": f"proc://{run.uid}",
                },
                "running": None,
                "waiting": None,
            }
        else:
            state = {"waiting": {"reason": "ContainerCreating"}, "running": None}
        ready = "True" if running else "False"
        conds = [("Initialized", "True"), ("ContainersReady", ready), ("Ready", ready)]
        return {
            "phase": run.phase,
            "hostIP": self.address,
            "podIP": self.address,
            "podIPs": [{"ip": self.address}],
            "startTime": run.started_at or _now(),
            "conditions": [
                {"type": t, "status": s, "lastTransitionTime": _now()} for t, s in conds
            ],
            "containerStatuses": [
                {
                    "name": c.name,
                    "image": c.image or "",
                    "imageID": "",
                    "containerID": f"proc://{run.proc.pid}" if run.proc else None,
                    "ready": running,
                    "started": running,
                    "restartCount": run.restarts,
                    "state": state,
                }
            ],
        }

    def _post(self, run: PodRun) -> None:
        if run.terminating or self.paused():
            return
        status = self._status(run)
        key = {k: status[k] for k in ("phase", "containerStatuses")}
        if key == run.posted:
            return
        try:
            self.core.patch_namespaced_pod_status(
                run.name, run.namespace, {"status": status}, _request_timeout=5
            )
        except Exception as exc:  # posted again on the next pass
            print(f"status {run.name}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            return
        run.posted = key

    def _event(self, run: PodRun, reason: str, message: str) -> None:
        if self.paused():
            return
        body = {
            "metadata": {"generateName": f"{run.name}.", "namespace": run.namespace},
            "involvedObject": {
                "kind": "Pod",
                "name": run.name,
                "namespace": run.namespace,
                "uid": run.uid,
            },
            "reason": reason,
            "message": message,
            "type": "Normal",
            "source": {"component": "kubelet", "host": self.node},
            "firstTimestamp": _now(),
            "lastTimestamp": _now(),
            "count": 1,
        }
        with contextlib.suppress(Exception):  # an event is a courtesy, never a failure
            self.core.create_namespaced_event(run.namespace, body, _request_timeout=3)

    # --- life cycle --------------------------------------------------------------------

    def run(self) -> None:
        self.events.emit("kubelet_start", pid=os.getpid(), address=self.address)
        while not self.stopping.is_set():
            try:
                if not self.paused():
                    self.register()
                break
            except Exception as exc:  # the apiserver may still be starting
                print(f"register: {exc}", flush=True)
                self.stopping.wait(1.0)
        for target in (self.heartbeat_loop, self.watch_loop):
            threading.Thread(target=target, daemon=True).start()
        while not self.stopping.is_set():
            self.sync()
            self.wake.wait(0.2)
            self.wake.clear()
        self._kill_all()

    def _kill_all(self) -> None:
        threads = []
        for run in self.runs.values():
            if not run.killed and procfs.pids_with_env(ENV_POD_UID, run.uid):
                t = threading.Thread(target=self._kill, args=(run, 5.0, "kubelet stopping"))
                t.start()
                threads.append(t)
        for t in threads:
            t.join()

    def shutdown(self, *_: Any) -> None:
        self.stopping.set()
        self.wake.set()


def _taint(text: str) -> dict[str, str]:
    """``KEY=VALUE:EFFECT`` (or ``KEY:EFFECT``) as a Node taint."""
    pair, _, effect = text.rpartition(":")
    key, _, value = pair.partition("=")
    return (
        {"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect}
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m faultdrill.platforms.kubernetes.kubelet")
    ap.add_argument("--node", required=True)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--address", required=True)
    ap.add_argument("--ifname", default="lo")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--events-dir", default=os.environ.get("FAULTDRILL_EVENTS_DIR", ""))
    ap.add_argument("--task", default=os.environ.get("FAULTDRILL_TASK_ID", ""))
    ap.add_argument("--events-target", default="", help="file naming the item's events dir")
    ap.add_argument(
        "--taint",
        action="append",
        help="KEY=VALUE:EFFECT the Node is registered with (a kubelet's --register-with-taints)",
    )
    ap.add_argument("--lease-s", type=float, default=2.0)
    ap.add_argument("--status-s", type=float, default=10.0)
    args = ap.parse_args(argv)
    kubelet = ProcessKubelet(args)
    signal.signal(signal.SIGTERM, kubelet.shutdown)
    signal.signal(signal.SIGINT, kubelet.shutdown)
    kubelet.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
