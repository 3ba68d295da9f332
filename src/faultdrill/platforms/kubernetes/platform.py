"""``platform: kubernetes``: the job as a Kubernetes workload, followed through the API.

:class:`KubernetesPlatform` drives a cluster given by a kubeconfig
(``resources.kubernetes.kubeconfig``); :class:`~.testplatform.TestClusterPlatform` (chosen
by ``variant_for`` for ``test_cluster: true``) adds the test cluster faultdrill starts on
this host, with the faults that need its machines. Both:

* **submit**: the plan's manifest template (or, on the test cluster, the built-in batch/v1
  Job of torchrun agents), filled and labelled (:mod:`.manifest`), recorded in the ledger
  (``k8s-objects``) BEFORE its first object is created, then created in order; a copy of
  what was created is kept in the item's directory (``k8s-manifest.yaml``);
* **observe**: watches on nodes, the job's pods and the cluster's events
  (:class:`~.follow.Follower`) put the control plane's decisions on the timeline; the job's
  state is its conditions (:func:`~.manifest.job_state`);
* **stop and tear down**: the job deleted (its pods get their grace), then every object of
  the recorded kinds carrying this item's ``faultdrill.io/run`` label, and the pods; the
  ledger entry closed once nothing is left.

The probe's events reach the harness through the run directory, which every pod sees at
the same path (see ``docs/kubernetes.md``): on the test cluster the nodes share this
host's filesystem; on a real cluster the template mounts shared storage (NFS, an RWX
volume) that the harness mounts at the same path. Files on it survive a pod's deletion,
unlike a pod's log.

Actions through the API (any cluster): ``kill-worker`` deletes the rank's pod (grace 0 for
SIGKILL, the pod's own for SIGTERM), ``node-drain`` cordons the node (undo: uncordon) and
evicts the job's pods on it through the Eviction API. A real cluster's machines are out of
reach: faults that need them are refused at plan validation (:meth:`why_not`).
"""

from __future__ import annotations

import contextlib
import json
import signal as _signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import yaml

from faultdrill.errors import FaultError, NotOursError, PlatformError
from faultdrill.host import owned
from faultdrill.ledger import undoer
from faultdrill.platforms.api import (
    Ability,
    Change,
    JobSpec,
    JobState,
    NodeInfo,
    Note,
    Platform,
    Replica,
    register,
)
from faultdrill.platforms.kubernetes import manifest as mf
from faultdrill.platforms.kubernetes.follow import DECIDERS
from faultdrill.platforms.kubernetes.job import (
    builtin_template,
    job_name,
    rdzv_conf,
    template_values,
)
from faultdrill.platforms.kubernetes.objects import (
    CORDONED_BY,
    KUBECONFIG,
    NODE,
    RUN_LABEL,
    Objects,
    api_for,
    is_not_found,
)
from faultdrill.probe import ENV_CLOCK_OFFSET, ENV_PID_PER_HOST

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.ledger import Ledger
    from faultdrill.plan import Resources
    from faultdrill.plan.sections import KubernetesSettings
    from faultdrill.platforms.kubernetes.follow import Follower

__all__ = ["KubernetesPlatform"]

#: What the API alone can do on any cluster.
API_ABILITIES = frozenset({Ability.SIGNAL_RANK, Ability.NODE_DRAIN, Ability.CHECKPOINT_FILES})
#: Why no Kubernetes cluster here throttles a rank (``slow-worker``), with the fix.
_NO_THROTTLE = (
    "faultdrill does not throttle a pod's container yet (the test cluster's kubelet runs pods "
    "without a cpu group of their own; a real cluster's nodes are not reached); drill a "
    "straggler on platform local or slurm (embedded), or give the pod a CPU limit in the "
    "job's manifest as a plan of its own"
)
_NEEDS_MACHINES = (
    "needs the cluster's machines, which faultdrill reaches only on the test cluster; "
    "set resources.kubernetes: {test_cluster: true}"
)


@undoer(
    "k8s-cordon",
    owns={
        "netns": owned.NETNS,
        "node": NODE,
        "kubeconfig": KUBECONFIG,
        "label": RUN_LABEL,
    },
)
def _undo_cordon(data: dict[str, Any]) -> None:
    """Uncordon the recorded node, only while the live node still carries this run's
    :data:`~.CORDONED_BY` annotation (the recorded ``label``, claimed to be this
    run's): a node cordoned by someone else, or uncordoned since, is left alone (said,
    NotOursError). Gone with its test cluster, or gone: nothing to do."""
    label = data.get("label")
    if not isinstance(label, str):
        raise NotOursError(f"cordon of {data.get('node')!r} records no run label to verify")
    api = api_for(data)
    if api is None:
        return
    from kubernetes import client

    core, node = client.CoreV1Api(api), str(data["node"])
    try:
        live = core.read_node(node, _request_timeout=10)
    except Exception as exc:
        if is_not_found(exc):
            return
        raise
    if ((live.metadata.annotations or {}).get(CORDONED_BY)) != label:
        raise NotOursError(f"node {node} is not cordoned by this run ({CORDONED_BY})")
    patch = {"metadata": {"annotations": {CORDONED_BY: None}}}
    core.patch_node(node, {**patch, "spec": {"unschedulable": None}}, _request_timeout=10)


#: The variants ``variant_for`` picks, by name; each registers itself on import (its
#: module imports this one: naming it here would close an import circle).
VARIANTS: dict[str, type[Platform]] = {}


@register
class KubernetesPlatform(Platform):
    """The job on a cluster given by kubeconfig (see the module docstring)."""

    name: ClassVar[str] = "kubernetes"
    test_cluster: ClassVar[bool] = False

    def __init__(
        self, resources: Resources, work_dir: Path, ledger: Ledger, sink: EventSink
    ) -> None:
        super().__init__(resources, work_dir, ledger, sink)
        assert resources.kubernetes is not None  # the plan requires the section
        self.settings: KubernetesSettings = resources.kubernetes
        self.namespace = self.settings.namespace
        self.label = mf.run_label(ledger.run_id)
        self.selector = f"{mf.LABEL_RUN}={self.label}"
        self.node_names = [f"n{i}" for i in range(1, resources.nodes + 1)]
        self.spare_names = [
            f"n{i}" for i in range(resources.nodes + 1, resources.nodes + resources.spares + 1)
        ]
        self.follower: Follower | None = None
        self.docs: list[dict[str, Any]] = []
        self._objects_entry: str | None = None
        self._client: Any = None
        self._pods: dict[tuple[int, int], str] = {}  # replica (pid, start) -> its pod's name
        self._reader: threading.Thread | None = None
        self._reading_done = threading.Event()
        self._read: JobState | None = None
        self._submits = 0

    # --- abilities ----------------------------------------------------------------------

    @classmethod
    def abilities_for(cls, resources: Resources) -> frozenset[Ability]:
        k8s = resources.kubernetes
        if k8s is not None and k8s.test_cluster:
            return VARIANTS["test-cluster"].abilities_for(resources)
        return API_ABILITIES

    @classmethod
    def why_not(cls, ability: Ability, resources: Resources) -> str:
        if ability is Ability.THROTTLE_RANK:
            return _NO_THROTTLE
        if ability is Ability.HANG_RANK:
            return (
                "hang-worker is not implemented on Kubernetes yet (a pod's container process "
                "would be stopped through its node's runtime); drill the hang on platform "
                "local or slurm (embedded: true)"
            )
        if ability is Ability.OOM_RANK:
            return (
                "the test cluster's kubelet runs pods as plain processes with no memory "
                "limit of their own, so no pod can be OOMKilled; drill oom-worker on the "
                "local platform or the embedded Slurm cluster"
            )
        if ability is Ability.DATA_OUTAGE:
            return (
                "data-outage is drilled on platform local and on the embedded Slurm cluster "
                "(resources.slurm.embedded: true), where the data directory is this host's; "
                "run the scenario there"
            )
        return f"{ability.value} {_NEEDS_MACHINES}"

    @classmethod
    def variant_for(cls, resources: Resources) -> type[Platform]:
        if resources.kubernetes is not None and resources.kubernetes.test_cluster:
            return VARIANTS["test-cluster"]
        return cls

    @classmethod
    def machine_lacks(cls, abilities: frozenset[Ability]) -> dict[Ability, str]:
        from faultdrill.platforms.kubernetes.client import client_missing

        why = client_missing()
        return dict.fromkeys(abilities, why) if why else {}

    # --- the API --------------------------------------------------------------------------

    def api(self) -> Any:
        """The harness's ``ApiClient`` for the cluster."""
        if self._client is None:
            from faultdrill.platforms.kubernetes.client import api_client

            assert self.settings.kubeconfig is not None
            self._client = api_client(Path(self.settings.kubeconfig), context=self.settings.context)
        return self._client

    def api_record(self) -> dict[str, Any]:
        """What an undo needs to reach the API again (``objects.api_for``)."""
        return {"kubeconfig": self.settings.kubeconfig, "context": self.settings.context}

    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api())

    def objects(self) -> Objects:
        return Objects(self.api())

    # --- the contract -------------------------------------------------------------------

    def _prepare(self) -> None:
        from faultdrill.platforms.kubernetes.follow import Follower

        self.sink.emit("platform", "deciders", sources=list(DECIDERS), platform=self.name)
        self.declare_observability()
        self.follower = Follower(
            self.api,
            self.sink,
            namespace=self.namespace,
            label_selector=self.selector,
            pids_of=self.pod_pids_of,
        )
        self.follower.start()

    def declare_observability(self) -> None:
        """A real cluster's processes run on its machines: the checks that need the process
        table say so (retest), and the run goes on past such a baseline."""
        self.sink.emit(
            "platform",
            "unobservable",
            what="processes",
            why_id="resources.unobservable.kubeconfig",
            why="the pods run on the machines of a cluster given by kubeconfig; only the "
            "test cluster's processes are sampled",
        )

    def pod_pids_of(self, uid: str) -> list[int]:
        """Live processes of the pod with ``uid`` (none known on a real cluster)."""
        return []

    def template(self) -> list[dict[str, Any]]:
        """The manifest's documents, placeholders unfilled."""
        if self.settings.manifest is None:
            t = self.resources.timeouts
            return [builtin_template(self.settings.pod_grace_s, t.monitor_interval_s)]
        try:
            return mf.load_template(Path(self.settings.manifest))
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise PlatformError(f"manifest {self.settings.manifest}: {exc}") from exc

    def rendezvous_endpoint(self) -> str:
        return self.settings.rendezvous or ""

    def python(self) -> str:
        """``{{python}}``: the interpreter the pods run (a real cluster: its image's)."""
        return "python3"

    def pod_env(self, job: JobSpec) -> list[dict[str, Any]]:
        """The probe's environment, put into every container of the job."""
        plain = {
            **job.env,
            "FAULTDRILL_EVENTS_DIR": str(job.events_dir),
            "FAULTDRILL_TASK_ID": job.task_id,
            "FAULTDRILL_RUN_ID": job.run_id,
            **self.clock_env(),
        }
        env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in plain.items()]
        node = {"fieldRef": {"fieldPath": "spec.nodeName"}}
        return [*env, {"name": "FAULTDRILL_NODE", "valueFrom": node}]

    def clock_env(self) -> dict[str, str]:
        """The pods run on other hosts, in pid namespaces of their own: their events'
        ``mono`` is put on the harness's clock through the wall clock (as good as the hosts'
        sync) and their pids carry their host name (``probe.mono_clock``, ``own_pid``)."""
        return {
            ENV_CLOCK_OFFSET: f"{time.time() - time.monotonic():.6f}",
            ENV_PID_PER_HOST: "1",  # each pod numbers its processes from 1
        }

    def render(self, job: JobSpec) -> list[dict[str, Any]]:
        """The item's objects, filled, labelled and given the probe's environment."""
        values = template_values(
            job,
            name=job_name(self.work_dir.name, f"{job.run_id}/{self._submits}"),
            namespace=self.namespace,
            rdzv_endpoint=self.rendezvous_endpoint(),
            python=self.python(),
            rdzv=rdzv_conf(self.resources.timeouts),
        )
        try:
            docs = [mf.render(d, values) for d in self.template()]
        except KeyError as exc:
            raise PlatformError(f"manifest placeholder {exc} has no value") from exc
        labels = {mf.LABEL_RUN: self.label, mf.LABEL_TASK: _label_safe(job.task_id)}
        return mf.inject(docs, labels, self.pod_env(job))

    def _submit(self, job: JobSpec) -> None:
        if self.docs:  # a resubmission: the previous objects go first
            self._delete_objects(grace_s=0)
            self.wait_pods_gone(30.0)
            self._read = None
        self._submits += 1
        docs = self.render(job)
        kinds = list(dict.fromkeys((str(d["apiVersion"]), str(d["kind"])) for d in docs))
        data = {
            **self.api_record(),
            "namespace": self.namespace,
            "selector": self.selector,
            "kinds": [list(k) for k in kinds],
            "test_cluster": self.test_cluster,
        }
        if self._objects_entry is None:
            self._objects_entry = self.ledger.record(
                "k8s-objects", data, f"objects labelled {self.selector} in {self.namespace}"
            )
        (self.work_dir / "k8s-manifest.yaml").write_text(yaml.safe_dump_all(docs))
        self.docs = docs
        objects = self.objects()
        for doc in docs:
            try:
                objects.create(doc, self.namespace)
            except Exception as exc:  # the API's refusal, in its own words
                body = getattr(exc, "body", None) or exc
                raise PlatformError(
                    f"cannot create {doc['kind']} {doc['metadata'].get('name')}: {body}"
                ) from exc
        self.ledger.mark_applied(self._objects_entry)
        jobdoc = mf.job_document(docs)
        self.sink.emit(
            "platform",
            "k8s_job_created",
            job_kind=jobdoc["kind"],
            job=jobdoc["metadata"]["name"],
            namespace=self.namespace,
            selector=self.selector,
            objects=[f"{d['kind']}/{d['metadata'].get('name')}" for d in docs],
        )

    def _poll(self) -> JobState:
        """The job's state as last read by the state reader (the engine's loop never
        waits on the API: a paused apiserver must not delay the fault's own revert)."""
        if not self.docs:
            return JobState.PENDING
        if self._reader is None or not self._reader.is_alive():
            self._reader = threading.Thread(
                target=self._read_state, name="k8s-job-state", daemon=True
            )
            self._reader.start()
        return self._read or JobState.RUNNING

    def _read_state(self) -> None:
        """Read the job's state every 0.5 s until the item ends; keep the last one read
        (unknown while the apiserver is away: the state is not changed)."""
        while not self._reading_done.is_set():
            with contextlib.suppress(Exception):
                jobdoc = mf.job_document(self.docs)  # a resubmission renews it
                obj = self.objects().read(jobdoc, self.namespace)
                self._read = mf.job_state(jobdoc, obj)
            self._reading_done.wait(0.5)

    def nodes(self) -> list[NodeInfo]:
        views = self.follower.nodes if self.follower is not None else {}
        out = []
        for node in [*self.node_names, *self.spare_names]:
            view = views.get(node)
            state = "up" if view is None or view["ready"] == "True" else "down"
            if view is not None and view["unschedulable"]:
                state = "drained"
            out.append(NodeInfo(node, self.node_address(node), state, node in self.spare_names))
        return out

    def node_address(self, node: str) -> str:
        return ""

    def replicas(self) -> list[Replica]:
        """A real cluster's processes are out of reach: none are sampled (the resource
        checks say so); ranks are found from the probe's events (:meth:`rank_replica`)."""
        return []

    def _signal_all(self, sig: int) -> None:
        grace = None if sig == _signal.SIGTERM else 0
        self._delete_objects(grace_s=grace)

    def leftovers(self) -> list[str]:
        """Pods of the job still pending or running after it ended (not being deleted);
        none known when the API does not answer (the job's end was read from it just before)."""
        try:
            pods = self._live_pods()
        except Exception:
            return []
        return [
            f"pod {p['metadata']['name']} still {(p.get('status') or {}).get('phase')}"
            for p in pods
            if (p.get("status") or {}).get("phase") in ("Pending", "Running")
        ]

    def _any_alive(self) -> bool:
        try:
            pods = self.objects().labelled_pods(self.namespace, self.selector)
        except Exception:  # cannot tell: treated as gone, the tear-down deletes by label
            return False
        return any((p.get("status") or {}).get("phase") in ("Pending", "Running") for p in pods)

    def _delete_objects(self, grace_s: int | None) -> None:
        kinds = [(str(d["apiVersion"]), str(d["kind"])) for d in self.docs]
        with contextlib.suppress(Exception):  # gone already, or the apiserver is away
            self.objects().delete_labelled(kinds, self.namespace, self.selector, grace_s=grace_s)

    def wait_pods_gone(self, timeout_s: float) -> list[str]:
        """Wait until no pod of this item is left; the names of those still there."""
        deadline = time.monotonic() + timeout_s
        left: list[str] = []
        while True:
            try:
                pods = self.objects().labelled_pods(self.namespace, self.selector)
                left = [p["metadata"]["name"] for p in pods]
            except Exception:
                left = ["(the API does not answer)"]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.3)

    def _teardown(self) -> None:
        self._reading_done.set()
        if self._reader is not None:
            self._reader.join(timeout=15)
        if self.follower is not None:
            self.follower.stop()
            self.follower = None
        if self._objects_entry is not None:
            self._delete_objects(grace_s=0)
            left = self.wait_pods_gone(30.0)
            self.ledger.revert(self._objects_entry)  # deletes again by label: idempotent
            if left:
                raise PlatformError(f"pods of the job still there after 30 s: {left}")

    # --- actions: signal a rank (SignalsRanks) -------------------------------------------

    def rank_replica(self, *, rank: int | None = None, node: str | None = None) -> Replica:
        """From the probe's newest ``run_start`` of ``rank`` (or on ``node``): its pid and
        node; its pod is the job's pod named like the replica's host (a pod's hostname is
        its name), else the job's one live pod on that node."""
        starts = [
            ev
            for ev in _probe_events(self.sink.events_dir)
            if ev.get("kind") == "run_start"
            and (rank is None or ev.get("rank") == rank)
            and (node is None or ev.get("node") == node)
        ]
        best = max(starts, key=lambda ev: float(ev.get("mono", 0.0)), default=None)
        if best is None:
            what = f"rank {rank}" if rank is not None else f"a worker on node {node}"
            raise FaultError(f"no replica of {what} announced itself")
        rep = Replica(
            pid=int(best["pid"]),
            start_time=0,
            role="worker",
            node=str(best.get("node", "")),
            rank=int(best["rank"]),
        )
        live = {p["metadata"]["name"]: p for p in self._live_pods()}
        host = str(best.get("host", ""))
        on_node = [n for n, p in live.items() if (p.get("spec") or {}).get("nodeName") == rep.node]
        pod = host if host in live else (on_node[0] if len(on_node) == 1 else "")
        if not pod:
            raise FaultError(
                f"no live pod of the job holds rank {rep.rank} (host {host!r}, node "
                f"{rep.node!r}; pods: {sorted(live)})"
            )
        self._pods[(rep.pid, rep.start_time)] = pod
        return rep

    def _live_pods(self) -> list[dict[str, Any]]:
        """The job's pods not being deleted."""
        return [
            p
            for p in self.objects().labelled_pods(self.namespace, self.selector)
            if not p["metadata"].get("deletionTimestamp")
        ]

    def pod_of(self, replica: Replica) -> str:
        pod = self._pods.get((replica.pid, replica.start_time))
        if not pod:
            raise FaultError(f"no pod known for pid {replica.pid} (rank {replica.rank})")
        return pod

    def signal_replica(self, replica: Replica, sig: str) -> Change:
        """The pod deleted: at once for SIGKILL (grace 0), with its own grace for SIGTERM."""
        return self.delete_pod(self.pod_of(replica), replica, sig)

    def delete_pod(self, pod: str, replica: Replica, sig: str) -> Change:
        grace = 0 if sig == "SIGKILL" else None
        facts = {"pid": replica.pid, "rank": replica.rank, "node": replica.node, "pod": pod}

        def apply(note: Note) -> dict[str, Any]:
            try:
                self.core().delete_namespaced_pod(
                    pod, self.namespace, grace_period_seconds=grace, _request_timeout=10
                )
            except Exception as exc:
                if is_not_found(exc):
                    raise ProcessLookupError(f"pod {pod} is gone already") from exc
                raise PlatformError(f"delete pod {pod}: {exc}") from exc
            return {**facts, "signal": sig, "grace_s": grace}

        flag = "" if grace is None else f" --grace-period={grace}"
        return Change(
            "k8s-request",
            {"pod": pod, "namespace": self.namespace, "grace_s": grace, "signal": sig},
            f"delete pod {pod} (rank {replica.rank}, node {replica.node}, {sig})",
            f"kubectl delete pod {pod} -n {self.namespace}{flag}",
            apply,
            reversible=False,
        )

    def replica_alive(self, replica: Replica) -> bool:
        pod = self._pods.get((replica.pid, replica.start_time))
        if not pod:
            return False
        try:
            self.core().read_namespaced_pod(pod, self.namespace, _request_timeout=5)
        except Exception as exc:
            return not is_not_found(exc)
        return True

    # --- actions: whole nodes (NodeActions) ------------------------------------------------

    def node_down(self, node: str) -> list[Change]:
        raise FaultError(f"node-down {_NEEDS_MACHINES}")

    def node_freeze(self, node: str) -> list[Change]:
        raise FaultError(f"node-freeze {_NEEDS_MACHINES}")

    def node_drain(self, node: str) -> list[Change]:
        """Cordon (undo: uncordon), then evict the job's pods on the node."""
        pods = list(self._pods_on(node))
        if not pods:
            raise FaultError(f"node-drain: node {node} runs no pod of the job")
        return [self._cordon(node), self._evict(node, pods)]

    def _pods_on(self, node: str) -> Iterator[str]:
        for p in self._live_pods():
            if (p.get("spec") or {}).get("nodeName") == node:
                yield str(p["metadata"]["name"])

    def _cordon(self, node: str) -> Change:
        def apply(note: Note) -> dict[str, Any]:
            mark = {"metadata": {"annotations": {CORDONED_BY: self.label}}}
            self.core().patch_node(
                node, {**mark, "spec": {"unschedulable": True}}, _request_timeout=10
            )
            return {"node": node, "cordoned": True}

        data = {
            **self.api_record(),
            "node": node,
            "label": self.label,
            "test_cluster": self.test_cluster,
        }
        return Change("k8s-cordon", data, f"cordon {node}", f"kubectl cordon {node}", apply)

    def _evict(self, node: str, pods: list[str]) -> Change:
        def apply(note: Note) -> dict[str, Any]:
            from kubernetes import client

            core = self.core()
            for pod in pods:
                meta = client.V1ObjectMeta(name=pod, namespace=self.namespace)
                core.create_namespaced_pod_eviction(
                    pod, self.namespace, client.V1beta1Eviction(metadata=meta), _request_timeout=10
                )
            return {"evicted": pods}

        return Change(
            "k8s-request",
            {"node": node, "evict": pods, "namespace": self.namespace},
            f"evict {', '.join(pods)} from {node}",
            f"kubectl drain {node} --pod-selector={self.selector} --ignore-daemonsets",
            apply,
            reversible=False,
        )

    # --- ReachesCheckpoints -----------------------------------------------------------------

    def checkpoint_view(self, ckpt_dir: Path) -> Path:
        """The run directory is shared with the pods: the checkpoints are read in place."""
        return ckpt_dir


def _probe_events(events_dir: Path) -> Iterator[dict[str, Any]]:
    for path in sorted(events_dir.glob("probe-rank*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                ev = json.loads(line)
                if isinstance(ev, dict):
                    yield ev


def _label_safe(text: str) -> str:
    """``text`` as a label value: at most 63 of ``[A-Za-z0-9._-]``, alphanumeric ends."""
    import re

    return re.sub(r"[^A-Za-z0-9._-]", "-", text)[:63].strip("-._") or "task"
