"""``kubernetes: {test_cluster: true}``: the job on the test cluster faultdrill starts here.

The test cluster (:class:`~.testcluster.TestCluster`: a real v1.20.2 control plane,
process kubelets) is started once per ``faultdrill run`` and shared by its items
(:func:`run_scope`: its own ledger ``RUN/kubernetes/ledger.jsonl``, listed for ``faultdrill
cleanup`` like every item's, torn down when the run ends, also on an error or a signal).
Between items the nodes must be Ready, untainted and schedulable again before the next
job is created. An item run outside a run scope (a test driving the platform directly)
starts and tears down a cluster of its own, in its own ledger.

Here faultdrill reaches the machines, so besides the API's actions
(:class:`~.platform.KubernetesPlatform`) it offers, each a :class:`Change` recorded in the
item's ledger before it is made:

====================  =====================================================================
kill-worker           the rank's pod deleted (``kill_worker: delete-pod``), or its worker
                      process signalled (``kill_worker: signal``)
node-down             the node's link cut, then every process of it (kubelet and pods)
                      killed: heartbeats stop, NotReady, NoExecute taint, eviction follow.
                      Undo: link up, kubelet started again (in process: a replay by
                      ``faultdrill cleanup`` needs none, the cluster goes)
node-freeze           the node's cgroup frozen (kubelet and pods): heartbeats stop too
node-drain            cordon + Eviction API (as on any cluster)
link faults           iptables / tbf / link down on the node's own veth, as on the local
                      platform; ``partition`` with ``peer: control-plane`` drops only the
                      node's traffic with the apiserver (its kubelet is cut off, its pods
                      still talk: the split brain of an evicted pod still running)
control-plane-outage  kube-apiserver SIGSTOPped (pause), its port dropped on the
                      control-plane host's link (cut: the kubelets lose it, the controllers
                      beside it do not), or killed and started again (stop)
storage, checkpoints  the item's checkpoint directory on this host (``HostStorage``: the
                      kubelets enter only their node's network namespace, so mounts made
                      here reach every pod)
====================  =====================================================================
"""

from __future__ import annotations

import contextlib
import signal as _signal
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from faultdrill import rundir
from faultdrill.errors import FaultError, PlatformError
from faultdrill.events import EventSink
from faultdrill.host import procfs
from faultdrill.host.linux import signal_change, sigstop_change
from faultdrill.host.storage import HostStorage, fuse_missing
from faultdrill.ledger import Ledger, undoer
from faultdrill.lineage import Lineage
from faultdrill.platforms.api import CONTROL_PLANE_PEER, Ability, Change, JobSpec, Note, Replica
from faultdrill.platforms.kubernetes.job import ENV_POD_UID
from faultdrill.platforms.kubernetes.platform import API_ABILITIES, VARIANTS, KubernetesPlatform
from faultdrill.platforms.kubernetes.testcluster import (
    APISERVER_PORT,
    CONTROL,
    RDZV_PORT,
    TestCluster,
)
from faultdrill.platforms.local.platform import describe_process, scratch_root

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from faultdrill.host.netsampler import NetSampler
    from faultdrill.plan import Resources

__all__ = ["TEST_CLUSTER_ABILITIES", "TestClusterPlatform", "run_scope"]

TEST_CLUSTER_ABILITIES = API_ABILITIES | frozenset(
    {
        Ability.NODE_DOWN,
        Ability.NODE_FREEZE,
        Ability.LINK_LOSS,
        Ability.LINK_SLOW,
        Ability.LINK_FLAP,
        Ability.LINK_CUT,
        Ability.LINK_CUT_CONTROL_PLANE,
        Ability.CONTROL_PLANE_PAUSE,
        Ability.CONTROL_PLANE_CUT,
        Ability.CONTROL_PLANE_STOP,
        Ability.STORAGE_READ_ONLY,
        Ability.STORAGE_FULL,
        Ability.STORAGE_UNREACHABLE,
        Ability.NETWORK_TRACK,
    }
)
#: How long an item waits for the nodes to be fit again after the previous item's faults.
SETTLE_S = 90.0


@undoer("k8s-daemon-stop", owns={})  # acts on nothing
def _undo_daemon_stop(data: dict[str, Any]) -> None:
    """A test-cluster daemon the drill killed: started again in process (``after_undo``);
    a replay by ``faultdrill cleanup`` has nothing to start, the cluster is going."""


# --- one test cluster for the items of a run ------------------------------------------------


@dataclass
class _Shared:
    """The test cluster of one run, started by its first item."""

    resources: Resources
    dir: Path
    ledger: Ledger
    sink: EventSink
    cluster: TestCluster | None = None


_SCOPES: list[_Shared] = []


@contextlib.contextmanager
def _scope(resources: Resources, run_dir: Path) -> Iterator[None]:
    d = run_dir / "kubernetes"
    ledger = Ledger(rundir.ledger_path(d), run_id=f"k8s-cluster-{uuid.uuid4().hex[:8]}")
    ledger.activate()
    shared = _Shared(resources, d, ledger, EventSink(rundir.events_dir(d), "kubernetes"))
    _SCOPES.append(shared)
    try:
        yield
    finally:
        _SCOPES.remove(shared)
        _close(shared)


def _close(shared: _Shared) -> None:
    """Tear the shared cluster down with signals held off (a Ctrl-C must not leave half a
    cluster); raises PlatformError naming what could not be undone (its ledger stays
    listed for ``faultdrill cleanup``)."""
    held = {s: _signal.signal(s, _signal.SIG_IGN) for s in (_signal.SIGINT, _signal.SIGTERM)}
    problems: list[str] = []
    try:
        if shared.cluster is not None:
            try:
                shared.cluster.teardown()
            except PlatformError as exc:
                problems.append(str(exc))
        problems += shared.ledger.revert_all()
        shared.sink.close()
        shared.ledger.deactivate()
    finally:
        for s, old in held.items():
            _signal.signal(s, old)
    if problems:
        raise PlatformError(
            "the Kubernetes test cluster was not fully removed: "
            + "; ".join(problems)
            + f"; run `faultdrill cleanup {shared.dir.parent}`"
        )


def run_scope(resources: Resources, run_dir: Path) -> AbstractContextManager[None]:
    """The run's shared test cluster (see the module docstring)."""
    return _scope(resources, run_dir)


def _shared_for(resources: Resources) -> _Shared | None:
    for shared in reversed(_SCOPES):
        if shared.resources == resources:
            return shared
    return None


# --- the platform ---------------------------------------------------------------------------


class TestClusterPlatform(HostStorage, KubernetesPlatform):
    """The job on the test cluster (see the module docstring)."""

    __test__ = False  # not a pytest test class
    test_cluster: ClassVar[bool] = True

    @classmethod
    def abilities_for(cls, resources: Resources) -> frozenset[Ability]:
        return TEST_CLUSTER_ABILITIES

    def __init__(self, resources: Resources, work_dir: Path, ledger: Ledger, sink: Any) -> None:
        super().__init__(resources, work_dir, ledger, sink)
        self.shared = _shared_for(resources)
        self.cluster: TestCluster | None = None
        self._lineage = Lineage()
        self._track: NetSampler | None = None

    @classmethod
    def run_scope(cls, resources: Resources, run_dir: Path) -> AbstractContextManager[None]:
        return run_scope(resources, run_dir)

    @classmethod
    def machine_lacks(cls, abilities: frozenset[Ability]) -> dict[Ability, str]:
        from faultdrill.host.linux import netns_unavailable
        from faultdrill.platforms.kubernetes.binaries import ETCD, tarball_candidates
        from faultdrill.platforms.kubernetes.client import client_missing

        missing = [w for w in (netns_unavailable(), client_missing()) if w]
        if not ETCD.is_file():
            missing.append(f"{ETCD} (apt-get install -y --no-install-recommends etcd-server)")
        if not any(p.is_file() for p in tarball_candidates()):
            missing.append("the Kubernetes v1.20.2 binaries (scripts/setup-kubernetes.sh)")
        out = dict.fromkeys(abilities, "; ".join(missing)) if missing else {}
        if Ability.STORAGE_UNREACHABLE in abilities and fuse_missing():
            out[Ability.STORAGE_UNREACHABLE] = "; ".join(fuse_missing())
        return out

    # --- the cluster ------------------------------------------------------------------------

    def _cluster(self) -> TestCluster:
        if self.cluster is None:
            raise PlatformError("the test cluster is not up (prepare first)")
        return self.cluster

    def api(self) -> Any:
        return self._cluster().api()

    def api_record(self) -> dict[str, Any]:
        c = self._cluster()
        return {"kubeconfig": str(c.kubeconfig), "context": None, "netns": c.control_netns}

    def rendezvous_endpoint(self) -> str:
        return f"{self._cluster().address}:{RDZV_PORT}"

    def python(self) -> str:
        return sys.executable

    def node_address(self, node: str) -> str:
        return self._cluster().hosts.address(node) if self.cluster is not None else ""

    def _prepare(self) -> None:
        res = self.resources
        if self.shared is None:  # a cluster of this item's own
            self.cluster = TestCluster(
                self.work_dir / "k8s", self.ledger, self.sink, workers=res.nodes, spares=res.spares
            )
            self.cluster.start()
        else:
            if self.shared.cluster is None:
                self.shared.cluster = TestCluster(
                    self.shared.dir,
                    self.shared.ledger,
                    self.shared.sink,
                    workers=res.nodes,
                    spares=res.spares,
                )
                self.shared.cluster.start()
            self.cluster = self.shared.cluster
            # this item's faults name the shared cluster's namespaces, cgroups, processes
            self.ledger.share(self.shared.ledger.run_id)
            self._settle()
        c = self.cluster
        self.sink.emit(
            "platform",
            "k8s_cluster",
            apiserver=f"{c.address}:{APISERVER_PORT}",
            shared=self.shared is not None,
            kubectl=c.kubectl(),
            **c.ready_phases,
        )
        c.events_to(self.sink.events_dir, self.sink.task_id)
        super()._prepare()

    def _settle(self) -> None:
        """Wait until every node is fit for a new job (the previous item's faults undone)."""
        c = self._cluster()
        t0 = time.monotonic()
        why = c.unsettled()
        while why and time.monotonic() - t0 < SETTLE_S:
            time.sleep(0.3)
            why = c.unsettled()
        if why:
            raise PlatformError(f"the test cluster did not settle in {SETTLE_S:g} s: {why}")
        self.sink.emit("platform", "k8s_settled", waited_s=round(time.monotonic() - t0, 3))

    def clock_env(self) -> dict[str, str]:
        return {}  # the pods run on this host: its monotonic clock is the drill's

    def pod_env(self, job: JobSpec) -> list[dict[str, Any]]:
        """The API's environment, plus a short TMPDIR of the item (torchelastic's files,
        DataLoader workers' AF_UNIX sockets), recorded in the ledger and removed with it."""
        root = scratch_root(job.run_id)
        eid = self.ledger.record("scratch-dir", {"path": str(root)}, f"scratch dir {root}")
        root.mkdir(mode=0o700, exist_ok=True)
        self.ledger.mark_applied(eid)
        return [*super().pod_env(job), {"name": "TMPDIR", "value": str(root)}]

    def _teardown(self) -> None:
        try:
            self.stop_network_track()
            super()._teardown()
        finally:
            if self.cluster is not None:
                self.cluster.events_to(None)
                if self.shared is None:
                    self.cluster.teardown()

    # --- processes --------------------------------------------------------------------------

    def _pod_processes(self, node: str) -> list[int]:
        group = self._cluster().hosts.cgroup(node)
        return [
            pid
            for pid in (group.pids() if group is not None else [])
            if procfs.environ(pid).get("FAULTDRILL_RUN_ID") == self.ledger.run_id
            and ENV_POD_UID in procfs.environ(pid)
        ]

    def pod_pids_of(self, uid: str) -> list[int]:
        if self.cluster is None:
            return []
        return [
            pid
            for node in self.cluster.workers
            for pid in self._pod_processes(node)
            if procfs.environ(pid).get(ENV_POD_UID) == uid
        ]

    def replicas(self) -> list[Replica]:
        if self.cluster is None:
            return []
        out = []
        for node in self.cluster.workers:
            for pid in self._pod_processes(node):
                rep = describe_process(pid, node)
                if rep is not None:
                    out.append(rep)
        return self._lineage.classify(out)

    def _signal_all(self, sig: int) -> None:
        super()._signal_all(sig)
        if sig == _signal.SIGKILL and self.cluster is not None:
            for node in self.cluster.workers:
                for pid in self._pod_processes(node):
                    procfs.kill_checked(pid, None, sig)

    def _any_alive(self) -> bool:
        return self.cluster is not None and any(
            self._pod_processes(n) for n in self.cluster.workers
        )

    def declare_observability(self) -> None:
        """Every process of the job is on this host: nothing to declare."""

    def leftovers(self) -> list[str]:
        return [*super().leftovers(), *(f"pod process {p} alive" for p in self._pod_pids_all())]

    def _pod_pids_all(self) -> list[int]:
        if self.cluster is None:
            return []
        return [p for n in self.cluster.workers for p in self._pod_processes(n)]

    # --- actions: a rank ------------------------------------------------------------------

    def rank_replica(self, *, rank: int | None = None, node: str | None = None) -> Replica:
        found = [
            r
            for r in self.replicas()
            if r.role == "worker"
            and (rank is None or r.rank == rank)
            and (node is None or r.node == node)
        ]
        if not found:
            what = f"rank {rank}" if rank is not None else f"a worker on node {node}"
            raise FaultError(f"no live worker holds {what}")
        rep = min(found, key=lambda r: (r.rank if r.rank is not None else 1 << 30, r.pid))
        env = procfs.environ(rep.pid)
        self._pods[(rep.pid, rep.start_time)] = env.get("HOSTNAME", "")
        return rep

    def signal_replica(self, replica: Replica, sig: str) -> Change:
        if self.settings.kill_worker == "delete-pod":
            return super().signal_replica(replica, sig)
        return signal_change(
            replica.pid,
            replica.start_time,
            sig,
            f"{sig} pid {replica.pid} (rank {replica.rank}, node {replica.node})",
            f"kill -{sig.removeprefix('SIG')} {replica.pid}",
            {"pid": replica.pid, "rank": replica.rank, "node": replica.node},
        )

    def replica_alive(self, replica: Replica) -> bool:
        return procfs.alive(replica.pid, replica.start_time)

    # --- actions: whole nodes ---------------------------------------------------------------

    def node_down(self, node: str) -> list[Change]:
        """Link cut (undo: up, then the kubelet started again), then every process of the
        node killed (its kubelet's record closed)."""
        c = self._cluster()
        cut, kill = c.hosts.node_down(node)
        kubelet = f"kubelet-{node}"

        def restart() -> None:
            if kubelet not in c.daemons:
                c.start_kubelet(node)

        return [
            replace(cut, after_undo=restart),
            kill.followed_by(lambda: c.reap(kubelet)),
        ]

    def node_freeze(self, node: str) -> list[Change]:
        return [self._cluster().hosts.freeze_node(node)]

    # --- actions: links -------------------------------------------------------------------

    def link_loss(self, node: str, percent: float, *, peer: str | None = None) -> list[Change]:
        return self._cluster().hosts.link_loss(node, percent, peer=peer)

    def link_slow(self, node: str, *, rate: str, burst: str, queue_ms: int) -> list[Change]:
        return self._cluster().hosts.link_slow(node, rate=rate, burst=burst, queue_ms=queue_ms)

    def link_down(self, node: str) -> Change:
        return self._cluster().hosts.link_down(node)

    def link_cut(self, node: str, *, peer: str | None = None) -> list[Change]:
        c = self._cluster()
        if peer == CONTROL_PLANE_PEER:
            return c.hosts.service_cut(
                node, c.address, APISERVER_PORT, purpose="partition-control-plane"
            )
        return c.hosts.link_cut(node, peer=peer)

    def start_network_track(self, hz: float) -> None:
        """Sample the nodes' links into this item's events (the cluster's rule registry
        gives the final counters of a rule to this track while it runs)."""
        from faultdrill.host.netsampler import NetSampler

        hosts = self._cluster().hosts
        if self._track is None:
            self._track = NetSampler(hosts.links(), self.sink, hz, hosts.active_rules)
            hosts.track = self._track
            self._track.start()

    def stop_network_track(self) -> None:
        track, self._track = self._track, None
        if track is not None:
            if self.cluster is not None:
                self.cluster.hosts.track = None
            track.stop()

    # --- actions: the control plane ---------------------------------------------------------

    def control_plane_label(self) -> str:
        c = self._cluster()
        return f"kube-apiserver {c.address}:{APISERVER_PORT} on {CONTROL} (test cluster)"

    def control_plane_pause(self) -> list[Change]:
        d = self._cluster().daemon("kube-apiserver")
        label = f"SIGSTOP kube-apiserver pid {d.pid} on {CONTROL}"
        return [sigstop_change(d.pid, d.start_time, label, node=CONTROL)]

    def control_plane_cut(self) -> list[Change]:
        changes = self._cluster().hosts.port_cut(
            CONTROL, APISERVER_PORT, purpose="control-plane-cut"
        )
        return [ch.with_facts(port=APISERVER_PORT) for ch in changes]

    def control_plane_stop(self) -> list[Change]:
        c = self._cluster()
        d = c.daemon("kube-apiserver")

        def apply(note: Note) -> dict[str, Any]:
            return {"pid": c.kill_daemon("kube-apiserver"), "node": CONTROL}

        def restart() -> None:
            if "kube-apiserver" not in c.daemons:
                waited = c.restart_apiserver()
                self.sink.emit("platform", "k8s_apiserver_restarted", ready_s=round(waited, 3))

        return [
            Change(
                "k8s-daemon-stop",
                {"name": "kube-apiserver", "pid": d.pid, "node": CONTROL},
                f"kill kube-apiserver pid {d.pid} (started again by the undo)",
                f"kill -KILL {d.pid}",
                apply,
                after_undo=restart,
            )
        ]


VARIANTS["test-cluster"] = TestClusterPlatform
