"""DRAFT adapter: the job as a batch/v1 Job on the Kubernetes test cluster.

Against the current ``platforms/api.py`` contract (``_prepare/_submit/_poll/_signal_all/
_any_alive/_teardown``, ``replicas``, ``nodes``), with the actions of the platform-actions
seam (issue 10) as plain methods returning :class:`Change` (a local mirror of the seam's
dataclass until ``platforms/api.py`` has it). Apply one with :func:`apply_change`: recorded
in the ledger first, then made. NOT registered in ``PLATFORMS`` yet: plans cannot name it.

======================  =====================================================================
action                  on the test cluster
======================  =====================================================================
``delete_pod``          delete the rank's pod (grace as given; the kubelet TERMs, then KILLs)
``signal_rank``         signal the rank's worker process directly (the platform notices later)
``node_down``           cut the node's link, then SIGKILL everything in its cgroup (kubelet and
                        pod processes): the node stops heart-beating; NotReady, taint, eviction
                        follow. Undo: link up, kubelet started again (in process; cleanup only
                        takes the link back)
``node_drain``          cordon (``spec.unschedulable``) then evict each pod of the job on the node
                        through the Eviction API. Undo: uncordon
``partition``           pause the node's kubelet (no API calls) and cut its link: the control
                        plane loses the node, its pod processes keep running (split brain). Undo:
                        link up, kubelet resumed (it then kills what was evicted meanwhile)
``control_plane_pause`` SIGSTOP kube-apiserver. Undo: SIGCONT
``control_plane_stop``  SIGKILL kube-apiserver. Undo: start it again (in process only)
======================  =====================================================================
"""

from __future__ import annotations

import contextlib
import signal as _signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from faultdrill.errors import FaultError, PlatformError
from faultdrill.ledger import PATH, THIS_RUN, undoer
from faultdrill.platforms.api import JobSpec, JobState, NodeInfo, Platform, Replica
from faultdrill.platforms.kubernetes.job import ENV_POD_UID, LABEL_RUN, TrainingJob, store_argv
from faultdrill.platforms.kubernetes.testcluster import TestCluster
from faultdrill.platforms.local import owned, procfs
from faultdrill.platforms.local.linux import ns_run

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.ledger import Ledger
    from faultdrill.plan import Resources
    from faultdrill.platforms.kubernetes.follow import Follower

__all__ = ["Change", "KubernetesPlatform", "apply_change"]

RDZV_PORT = 29400
#: Live test clusters of this process by ledger run id: undos that need the cluster
#: (start the apiserver or a kubelet again) find it here; in ``faultdrill cleanup`` there is
#: none, and the cluster is being removed anyway.
_LIVE: dict[str, TestCluster] = {}


@dataclass(frozen=True)
class Change:
    """One change an action makes (mirror of the seam's ``Change``)."""

    kind: str
    data: dict[str, Any]
    label: str
    command: str
    apply: Callable[[], dict[str, Any] | None]
    reversible: bool = True


def apply_change(ledger: Ledger, change: Change) -> dict[str, Any] | None:
    """Record, apply, mark applied (an irreversible change is closed at once)."""
    eid = ledger.record(change.kind, change.data, change.label)
    out = change.apply()
    ledger.mark_applied(eid)
    if not change.reversible:
        ledger.revert(eid)
    return out


# --- undos ------------------------------------------------------------------------------


@undoer("k8s-done", owns={})  # acts on nothing
def _undo_done(data: dict[str, Any]) -> None:
    """A delivered signal, a deleted pod, an eviction: nothing to take back."""


@undoer("k8s-link-down", owns={"ns": owned.NETNS, "dev": owned.IFACE})
def _undo_link_down(data: dict[str, Any]) -> None:
    """Set the recorded veth up again (gone with its namespace is fine)."""
    ns, dev = str(data["ns"]), str(data["dev"])
    if ns_run(ns, ["ip", "link", "show", "dev", dev], check=False).returncode == 0:
        ns_run(ns, ["ip", "link", "set", "dev", dev, "up"])


@undoer("k8s-kubelet-pause", owns={"file": PATH})
def _undo_kubelet_pause(data: dict[str, Any]) -> None:
    Path(str(data["file"])).unlink(missing_ok=True)


@undoer("k8s-kubelet-down", owns={"run_id": THIS_RUN})
def _undo_kubelet_down(data: dict[str, Any]) -> None:
    """Start the node's kubelet again when its cluster lives in this process."""
    cluster = _LIVE.get(str(data["run_id"]))
    if cluster is not None and f"kubelet-{data['node']}" not in cluster.daemons:
        cluster.start_kubelet(str(data["node"]))


@undoer("k8s-apiserver-down", owns={"run_id": THIS_RUN})
def _undo_apiserver_down(data: dict[str, Any]) -> None:
    cluster = _LIVE.get(str(data["run_id"]))
    if cluster is not None and "kube-apiserver" not in cluster.daemons:
        cluster.restart_apiserver()


@undoer("k8s-cordon", owns={"run_id": THIS_RUN})
def _undo_cordon(data: dict[str, Any]) -> None:
    cluster = _LIVE.get(str(data["run_id"]))
    if cluster is None:
        return  # cleanup: the cluster goes with its etcd data
    from kubernetes import client

    client.CoreV1Api(cluster.api()).patch_node(
        str(data["node"]), {"spec": {"unschedulable": None}}, _request_timeout=10
    )


# --- the adapter ------------------------------------------------------------------------


class KubernetesPlatform(Platform):
    """The job as a batch/v1 Job on the test cluster (control plane real, kubelet emulated)."""

    name: ClassVar[str] = "kubernetes"

    def __init__(
        self, resources: Resources, work_dir: Path, ledger: Ledger, sink: EventSink
    ) -> None:
        super().__init__(resources, work_dir, ledger, sink)
        self.cluster = TestCluster(
            work_dir, ledger, sink, workers=resources.nodes, spares=resources.spares
        )
        self.follower: Follower | None = None
        self.training: TrainingJob | None = None
        self.namespace = "default"
        self._submits = 0

    # --- the contract -------------------------------------------------------------------

    def _prepare(self) -> None:
        from faultdrill.platforms.kubernetes.follow import Follower

        _LIVE[self.ledger.run_id] = self.cluster
        self.cluster.start()
        self.cluster.start_daemon("rdzv-store", store_argv(RDZV_PORT))
        self.follower = Follower(
            self.cluster.api,
            self.sink,
            namespace=self.namespace,
            label_selector=f"{LABEL_RUN}={self.ledger.run_id}",
        )
        self.follower.start()

    def _batch(self) -> Any:
        from kubernetes import client

        return client.BatchV1Api(self.cluster.api())

    def _core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.cluster.api())

    def _submit(self, job: JobSpec) -> None:
        if self.training is not None:  # a resubmission: the old Job goes first
            self._delete_job(grace_s=0)
        self._submits += 1
        name = f"train-{self._submits}"
        self.training = TrainingJob(
            name=name,
            run_id=self.ledger.run_id,
            task_id=job.task_id,
            nodes=len(job.nodes),
            min_nodes=job.min_nodes,
            procs_per_node=job.procs_per_node,
            max_restarts=job.max_restarts,
            rdzv=f"{self.cluster.address}:{RDZV_PORT}",
            events_dir=job.events_dir,
            work_dir=job.work_dir,
            argv=list(job.argv),
            env={k: v for k, v in job.env.items() if k not in ("FAULTDRILL_RUN_ID",)},
        )
        (job.work_dir / "tmp").mkdir(parents=True, exist_ok=True)
        try:
            self._batch().create_namespaced_job(self.namespace, self.training.manifest())
        except Exception as exc:
            raise PlatformError(f"cannot create Job {name}: {exc}") from exc
        self.sink.emit("platform", "k8s_job_created", job=name, selector=self.training.selector)

    def _poll(self) -> JobState:
        if self.training is None:
            return JobState.PENDING
        try:
            st = (
                self._batch()
                .read_namespaced_job_status(self.training.name, self.namespace, _request_timeout=5)
                .status
            )
        except Exception:  # the apiserver is away: the job's state is unknown, not changed
            return self._state
        for cond in st.conditions or []:
            if cond.status == "True" and cond.type == "Complete":
                return JobState.SUCCEEDED
            if cond.status == "True" and cond.type == "Failed":
                return JobState.FAILED
        return JobState.RUNNING

    def nodes(self) -> list[NodeInfo]:
        views = self.follower.nodes if self.follower else {}
        out = []
        for i, node in enumerate(self.cluster.workers):
            view = views.get(node)
            state = "up" if view is None or view["ready"] == "True" else "down"
            if view is not None and view["unschedulable"]:
                state = "drained"
            spare = i >= self.resources.nodes
            out.append(NodeInfo(node, self.cluster.nodes.address(node), state, spare))
        return out

    def pod_pids(self, node: str | None = None) -> list[int]:
        """Live processes of the job's pods (every process carrying a pod uid), by node."""
        nodes = [node] if node else self.cluster.workers
        return [
            pid
            for n in nodes
            for pid in self.cluster.nodes.cgroup(n).pids()
            if ENV_POD_UID in procfs.environ(pid)
        ]

    def replicas(self) -> list[Replica]:
        from faultdrill.platforms.local.platform import describe_process

        out = []
        for node in self.cluster.workers:
            for pid in self.pod_pids(node):
                rep = describe_process(pid, node)
                if rep is not None:
                    out.append(rep)
        return out

    def _signal_all(self, sig: int) -> None:
        if sig == _signal.SIGTERM and self.training is not None:
            self._delete_job(grace_s=self.training.grace_s)
            return
        for pid in self.pod_pids():
            procfs.kill_checked(pid, None, sig)

    def _any_alive(self) -> bool:
        return bool(self.pod_pids())

    def _delete_job(self, grace_s: int) -> None:
        assert self.training is not None
        with contextlib.suppress(Exception):  # gone already, or the apiserver is away
            self._batch().delete_namespaced_job(
                self.training.name,
                self.namespace,
                propagation_policy="Background",
                grace_period_seconds=grace_s,
                _request_timeout=10,
            )
        with contextlib.suppress(Exception):
            self._core().delete_collection_namespaced_pod(
                self.namespace,
                label_selector=self.training.selector,
                grace_period_seconds=grace_s,
                _request_timeout=10,
            )

    def _teardown(self) -> None:
        if self.follower is not None:
            self.follower.stop()
            self.follower = None
        try:
            self.cluster.teardown()
        finally:
            _LIVE.pop(self.ledger.run_id, None)

    # --- actions (the platform-actions seam) --------------------------------------------

    def pod_of_rank(self, rank: int) -> tuple[str, str]:
        """(pod name, node) of the pod whose processes hold ``rank`` now."""
        for rep in self.replicas():
            if rep.role == "worker" and rep.rank == rank:
                env = procfs.environ(rep.pid)
                return env.get("HOSTNAME", ""), rep.node
        raise FaultError(f"no live worker holds rank {rank}")

    def delete_pod(self, rank: int, grace_s: int = 5) -> list[Change]:
        pod, node = self.pod_of_rank(rank)

        def apply() -> dict[str, Any]:
            self._core().delete_namespaced_pod(
                pod, self.namespace, grace_period_seconds=grace_s, _request_timeout=10
            )
            return {"pod": pod, "node": node}

        return [
            Change(
                "k8s-done",
                {"pod": pod, "node": node, "action": "delete pod"},
                f"delete pod {pod} (rank {rank}, node {node})",
                f"kubectl delete pod {pod} --grace-period={grace_s}",
                apply,
                reversible=False,
            )
        ]

    def signal_rank(self, rank: int, sig: int = _signal.SIGKILL) -> list[Change]:
        rep = next((r for r in self.replicas() if r.role == "worker" and r.rank == rank), None)
        if rep is None:
            raise FaultError(f"no live worker holds rank {rank}")
        return [
            Change(
                "k8s-done",
                {"pid": rep.pid, "start_time": rep.start_time, "signal": int(sig)},
                f"signal {int(sig)} to rank {rank} (pid {rep.pid} on {rep.node})",
                f"kill -{int(sig)} {rep.pid}",
                lambda: {"sent": procfs.kill_checked(rep.pid, rep.start_time, sig)},
                reversible=False,
            )
        ]

    def _link_cut(self, node: str) -> Change:
        ns, dev = self.cluster.nodes.netns(node), self.cluster.nodes.ifname(node)

        def cut() -> dict[str, Any]:
            ns_run(ns, ["ip", "link", "set", "dev", dev, "down"])
            return {"ns": ns, "dev": dev}

        return Change(
            "k8s-link-down",
            {"ns": ns, "dev": dev, "node": node},
            f"link {dev} of {node} down",
            f"ip -n {ns} link set dev {dev} down",
            cut,
        )

    def node_down(self, node: str) -> list[Change]:
        group = self.cluster.nodes.cgroup(node)

        def kill() -> dict[str, Any]:
            pids = group.pids()
            left = group.kill_all()
            if left:
                raise OSError(f"processes {left} of {node} survived SIGKILL")
            daemon = self.cluster.daemons.pop(f"kubelet-{node}", None)
            if daemon is not None:
                daemon.proc.wait()
                daemon.log.close()
                self.ledger.revert(daemon.entry)
            return {"killed": pids}

        return [
            self._link_cut(node),
            Change(
                "k8s-kubelet-down",
                {"run_id": self.ledger.run_id, "node": node},
                f"kill every process of {node} (kubelet and pods)",
                f"kill -9 $(cat {group.path}/cgroup.procs)",
                kill,
            ),
        ]

    def partition(self, node: str) -> list[Change]:
        pause = self.cluster.kubelet_dir(node) / "paused"

        def pause_kubelet() -> dict[str, Any]:
            pause.touch()
            return {"file": str(pause)}

        return [
            Change(
                "k8s-kubelet-pause",
                {"file": str(pause), "node": node},
                f"kubelet of {node} partitioned (no API calls)",
                f"touch {pause}",
                pause_kubelet,
            ),
            self._link_cut(node),
        ]

    def node_drain(self, node: str) -> list[Change]:
        def cordon() -> dict[str, Any]:
            self._core().patch_node(node, {"spec": {"unschedulable": True}}, _request_timeout=10)
            return {"node": node}

        def evict() -> dict[str, Any]:
            from kubernetes import client

            core = self._core()
            pods = core.list_namespaced_pod(
                self.namespace, field_selector=f"spec.nodeName={node}", _request_timeout=10
            ).items
            evicted = []
            for pod in pods:
                body = client.V1beta1Eviction(
                    metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=self.namespace)
                )
                core.create_namespaced_pod_eviction(
                    pod.metadata.name, self.namespace, body, _request_timeout=10
                )
                evicted.append(pod.metadata.name)
            return {"evicted": evicted}

        return [
            Change(
                "k8s-cordon",
                {"run_id": self.ledger.run_id, "node": node},
                f"cordon {node}",
                f"kubectl cordon {node}",
                cordon,
            ),
            Change(
                "k8s-done",
                {"node": node, "action": "evict"},
                f"evict the pods of {node}",
                f"kubectl drain {node} --ignore-daemonsets",
                evict,
                reversible=False,
            ),
        ]

    def control_plane_pause(self) -> list[Change]:
        d = self.cluster.daemon("kube-apiserver")
        return [
            Change(
                "k8s-sigstop",
                {"name": d.name, "pid": d.pid, "start_time": d.start_time},
                f"SIGSTOP kube-apiserver (pid {d.pid})",
                f"kill -STOP {d.pid}",
                lambda: {"sent": procfs.kill_checked(d.pid, d.start_time, _signal.SIGSTOP)},
            )
        ]

    def control_plane_stop(self) -> list[Change]:
        d = self.cluster.daemon("kube-apiserver")
        return [
            Change(
                "k8s-apiserver-down",
                {"run_id": self.ledger.run_id, "pid": d.pid},
                f"kill kube-apiserver (pid {d.pid}); undo starts it again",
                f"kill -9 {d.pid}",
                lambda: {"pid": self.cluster.kill_daemon("kube-apiserver")},
            )
        ]

    def wait_job(self, timeout_s: float) -> JobState:
        """Poll until the Job ended or ``timeout_s`` passed (for scripts and tests)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.poll()
            if state.ended:
                return state
            time.sleep(0.5)
        return self.poll()
