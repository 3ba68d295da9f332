"""The test cluster: a real Kubernetes v1.20.2 control plane with process kubelets.

Control plane **real** (etcd 3.4 from Debian, kube-apiserver, kube-controller-manager and
kube-scheduler v1.20.2 from Debian's source, see :mod:`.binaries`); kubelet **emulated**
(:mod:`.kubelet`: pods run as local processes; no images, volumes, probes, resource
limits). Flags from ``../shared/notes/kubernetes.md`` section 5: the node monitor checks
every 1 s with a 10 s grace, and the NoExecute tolerations default to 10 s, so a lost
node is NotReady in ~10 s and its pods are evicted ~10 s later.

Where things run (a :class:`~faultdrill.host.cluster.NodeCluster` whose nodes
are the worker nodes, spares included, plus the controller host ``cp``)::

    control-plane host cp (namespace, 10.77.0.250)      worker nodes n1..nN (namespaces)
      etcd          127.0.0.1:2379                     kubelet  -> https://<cp>:6443
      apiserver     <cp>:6443  (TLS, token)  <-bridge->   pod processes (node address)
      controller-manager, scheduler -> <cp>:6443
      rendezvous store :29400 (the job's c10d store)
    harness (host namespace): API sockets created in the control-plane namespace

So a node's link cut really separates its kubelet from the apiserver (heartbeats fail,
the node controller sees a lost node), and SIGSTOP/SIGKILL of the apiserver is a real
control-plane outage for every client, the harness included. The host's own network is
never touched.

Every daemon is recorded in the ledger before it runs (:func:`.procs.launch`: pid and start
time, then exec) and stopped by pid: SIGTERM, wait, SIGKILL. Secrets and etcd's data
(``<dir>/pki``, ``<dir>/etcd``, ``<dir>/apiserver-certs``) are recorded as ``k8s-files``
and removed at tear-down; logs stay in ``<dir>/logs`` as evidence. One cluster may serve
several drill items in turn: the kubelets write their events into the directory that
:meth:`TestCluster.events_to` names (the item running now). :meth:`teardown` is
idempotent, and ``faultdrill cleanup`` replays the same undos after a SIGKILL of the
harness (daemons, files, then the nodes' cgroups and namespaces).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultdrill import rundir
from faultdrill.errors import EnvironmentPrepError, FaultError, PlatformError
from faultdrill.host import owned, procfs
from faultdrill.host.cluster import NodeCluster
from faultdrill.ledger import PATHS, undoer
from faultdrill.platforms.kubernetes import procs
from faultdrill.platforms.kubernetes.client import api_client, get_in_netns
from faultdrill.platforms.kubernetes.job import store_argv
from faultdrill.platforms.kubernetes.pki import Pki, make_pki

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.ledger import Ledger
    from faultdrill.platforms.kubernetes.binaries import K8sBinaries

__all__ = [
    "APISERVER_PORT",
    "CONTROL",
    "CONTROL_PLANE",
    "KUBELET_MODULE",
    "RDZV_PORT",
    "TestCluster",
]

APISERVER_PORT = 6443
#: The job's c10d rendezvous store on the control-plane host (``{{rdzv_endpoint}}``).
RDZV_PORT = 29400
#: The control-plane host's name (a controller host of the node cluster).
CONTROL = "cp"
#: A spare node's taint: the scheduler avoids it while another node fits (PreferNoSchedule),
#: so the job starts on the plan's nodes and a replacement may still land on the spare.
SPARE_TAINT = "faultdrill.io/spare=true:PreferNoSchedule"
KUBELET_MODULE = "faultdrill.platforms.kubernetes.kubelet"
#: Daemons of the control plane, in start order (stopped in reverse).
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


@undoer("k8s-files", owns={"paths": PATHS})
def _undo_files(data: dict[str, Any]) -> None:
    """Remove the recorded directories (secrets, etcd data); gone already is fine."""
    for raw in data.get("paths", []):
        shutil.rmtree(str(raw), ignore_errors=True)
        if Path(str(raw)).exists():
            raise OSError(f"{raw} could not be removed")


@undoer("k8s-sigstop", owns={"pid": owned.PROCESS})
def _undo_sigstop(data: dict[str, Any]) -> None:
    """Resume a daemon the drill stopped (SIGCONT to the recorded pid and start time)."""
    procfs.kill_checked(int(data["pid"]), data.get("start_time"), signal.SIGCONT)


def _wait(what: str, ok: Callable[[], bool], timeout_s: float, log: Path | None = None) -> float:
    """Poll ``ok`` every 0.1 s; seconds it took. PlatformError (with the log's tail)."""
    t0 = time.monotonic()
    while not ok():
        if time.monotonic() - t0 > timeout_s:
            tail = ""
            if log is not None and log.exists():
                tail = "; log tail: " + log.read_text(errors="replace")[-800:].strip()
            raise PlatformError(f"{what} not ready within {timeout_s:.0f} s{tail}")
        time.sleep(0.1)
    return time.monotonic() - t0


class TestCluster:
    """One control plane and one process kubelet per worker node, for one run.

    ``start`` brings everything up (raises EnvironmentPrepError when the machine cannot,
    PlatformError when a daemon does not come up); ``teardown`` takes everything down
    (idempotent, also after a failed start). Not thread-safe.
    """

    __test__ = False  # a class named Test* that is not a pytest test

    def __init__(
        self,
        cluster_dir: Path,
        ledger: Ledger,
        sink: EventSink,
        *,
        workers: int = 2,
        spares: int = 0,
        binaries: K8sBinaries | None = None,
    ) -> None:
        self.dir = cluster_dir
        self.ledger = ledger
        self.sink = sink
        names = [f"n{i}" for i in range(1, workers + spares + 1)]
        #: The machines: worker nodes (spares included: Kubernetes has no spares, only
        #: Nodes the scheduler may use) and the control-plane host.
        self.hosts = NodeCluster(
            ledger, sink, names[:workers], names[workers:], netns=True, controllers=[CONTROL]
        )
        self._binaries = binaries
        self.daemons: dict[str, procs.Daemon] = {}
        self.pki: Pki | None = None
        self._api: Any = None
        self.paused: dict[str, str] = {}  # daemon name -> ledger entry of its SIGSTOP
        self.ready_phases: dict[str, Any] = {}

    # --- layout ------------------------------------------------------------------------

    @property
    def workers(self) -> list[str]:
        """Every node that runs a kubelet (the plan's nodes, then its spares)."""
        return self.hosts.nodes()

    @property
    def address(self) -> str:
        """The apiserver's address (the control-plane host's)."""
        return self.hosts.address(CONTROL)

    @property
    def control_netns(self) -> str:
        return self.hosts.link(CONTROL).ns

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "pki" / "kubeconfig"

    @property
    def events_target(self) -> Path:
        return self.dir / "events-target.json"

    def kubelet_dir(self, node: str) -> Path:
        return self.dir / "kubelet" / node

    def events_to(self, events_dir: Path | None, task: str = "") -> None:
        """Send the kubelets' events to ``events_dir`` (the drill item running now), or
        to their logs only (None)."""
        if events_dir is None:
            self.events_target.unlink(missing_ok=True)
            return
        tmp = self.events_target.with_suffix(".part")
        tmp.write_text(json.dumps({"events_dir": str(events_dir), "task": task}))
        tmp.replace(self.events_target)

    def api(self) -> Any:
        """The harness's ``ApiClient`` (sockets made in the control-plane namespace)."""
        if self._api is None:
            self._api = api_client(self.kubeconfig, self.control_netns)
        return self._api

    def kubectl(self) -> str:
        """How an operator runs kubectl against this cluster (for runbooks)."""
        return (
            f"nsenter --net=/run/netns/{self.control_netns} kubectl --kubeconfig={self.kubeconfig}"
        )

    # --- bring-up ----------------------------------------------------------------------

    def start(self, timeout_s: float = 90.0) -> None:
        """Nodes, secrets, etcd, apiserver, controller manager, scheduler, kubelets; returns
        once every worker node is Ready. Emits ``k8s_ready`` with each phase's seconds."""
        if os.geteuid() != 0:
            raise EnvironmentPrepError("the Kubernetes test cluster needs root (namespaces)")
        # imported here: ``python -m ...binaries`` must not find itself imported already
        from faultdrill.platforms.kubernetes.binaries import find_binaries

        bins = self._binaries or find_binaries()
        self._binaries = bins
        t0 = time.monotonic()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.hosts.prepare()
        if any(self.hosts.cgroup(h) is None for h in self.hosts.hosts()):
            raise EnvironmentPrepError("the test cluster needs the cgroup v1 freezer (root)")
        secrets = [self.dir / "pki", self.dir / "etcd", self.dir / "apiserver-certs"]
        eid = self.ledger.record("k8s-files", {"paths": [str(p) for p in secrets]}, "k8s secrets")
        self.pki = make_pki(self.dir / "pki", self.address, APISERVER_PORT)
        self.ledger.mark_applied(eid)
        phases: dict[str, float] = {"nodes_and_pki": time.monotonic() - t0}
        self.start_daemon("etcd", self._etcd_argv(bins))
        phases["etcd"] = _wait("etcd", self.etcd_healthy, timeout_s, self._log("etcd"))
        self.start_daemon("kube-apiserver", self._apiserver_argv(bins))
        phases["apiserver"] = _wait(
            "kube-apiserver", self.apiserver_ready, timeout_s, self._log("kube-apiserver")
        )
        self.start_daemon("kube-controller-manager", self._kcm_argv(bins))
        self.start_daemon("kube-scheduler", self._scheduler_argv(bins))
        for name, port in (("kube-controller-manager", 10257), ("kube-scheduler", 10259)):
            phases[name] = _wait(name, self._healthz_of(port), timeout_s, self._log(name))
        self.start_daemon("rdzv-store", store_argv(RDZV_PORT))
        for node in self.workers:
            self.start_kubelet(node)
        phases["kubelets"] = _wait("worker nodes Ready", self._all_ready, timeout_s)
        phases["total"] = time.monotonic() - t0
        fields: dict[str, Any] = {
            f"{k.replace('-', '_')}_s": round(v, 3) for k, v in phases.items()
        }
        self.ready_phases = fields
        self.sink.emit(
            "platform",
            "k8s_ready",
            apiserver=f"{self.address}:{APISERVER_PORT}",
            nodes=self.workers,
            binaries=bins.source,
            **fields,
        )

    def _log(self, name: str) -> Path:
        return rundir.logs_dir(self.dir) / f"{name}.log"

    def start_daemon(self, name: str, argv: list[str], node: str | None = None) -> procs.Daemon:
        """Start ``argv`` as daemon ``name`` on ``node`` (default: the control-plane host),
        in the ledger before it runs; stopped with the cluster."""
        node = node or CONTROL
        group = self.hosts.cgroup(node)
        if group is None:
            raise EnvironmentPrepError(f"host {node} has no cgroup (not prepared)")
        daemon = procs.launch(
            self.ledger,
            name=name,
            node=node,
            cgroup=group,
            enter=self.hosts.launch_prefix(node),
            argv=argv,
            log_path=self._log(name),
            env={**os.environ, "PYTHONUNBUFFERED": "1", "FAULTDRILL_RUN_ID": self.ledger.run_id},
            cwd=self.dir,
            grace_s=5.0,
        )
        self.daemons[name] = daemon
        self.sink.emit(
            "platform",
            "k8s_daemon_started",
            name=name,
            node=node,
            pid=daemon.pid,
            start_time=daemon.start_time,
        )
        return daemon

    def _etcd_argv(self, bins: K8sBinaries) -> list[str]:
        return [
            str(bins.etcd),
            *("--name", "k8s", "--data-dir", str(self.dir / "etcd")),
            *("--listen-client-urls", "http://127.0.0.1:2379"),
            *("--advertise-client-urls", "http://127.0.0.1:2379"),
            *("--listen-peer-urls", "http://127.0.0.1:2380"),
            *("--initial-advertise-peer-urls", "http://127.0.0.1:2380"),
            *("--initial-cluster", "k8s=http://127.0.0.1:2380"),
            *("--listen-metrics-urls", "http://127.0.0.1:2381"),
        ]

    def _apiserver_argv(self, bins: K8sBinaries) -> list[str]:
        assert self.pki is not None
        p = self.pki.path
        return [
            str(bins.apiserver),
            "--etcd-servers=http://127.0.0.1:2379",
            f"--bind-address={self.address}",
            f"--advertise-address={self.address}",
            f"--secure-port={APISERVER_PORT}",
            "--insecure-port=0",
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={p('apiserver.crt')}",
            f"--tls-private-key-file={p('apiserver.key')}",
            f"--client-ca-file={p('ca.crt')}",
            f"--token-auth-file={p('tokens.csv')}",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p('sa.pub')}",
            f"--service-account-signing-key-file={p('sa.key')}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--default-not-ready-toleration-seconds=10",
            "--default-unreachable-toleration-seconds=10",
            f"--cert-dir={self.dir / 'apiserver-certs'}",
            "--profiling=false",
            "--v=1",
        ]

    def _kcm_argv(self, bins: K8sBinaries) -> list[str]:
        assert self.pki is not None
        return [
            str(bins.controller_manager),
            f"--kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            "--secure-port=10257",
            "--port=0",
            "--leader-elect=false",
            f"--service-account-private-key-file={self.pki.path('sa.key')}",
            f"--root-ca-file={self.pki.ca}",
            "--node-monitor-period=1s",
            "--node-monitor-grace-period=10s",
            "--node-startup-grace-period=20s",
            "--profiling=false",
            "--v=2",
        ]

    def _scheduler_argv(self, bins: K8sBinaries) -> list[str]:
        return [
            str(bins.scheduler),
            f"--kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            "--secure-port=10259",
            "--port=0",
            "--leader-elect=false",
            "--profiling=false",
        ]

    def kubelet_argv(self, node: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            KUBELET_MODULE,
            f"--node={node}",
            f"--kubeconfig={self.kubeconfig}",
            f"--address={self.hosts.address(node)}",
            f"--ifname={self.hosts.interface(node)}",
            f"--dir={self.kubelet_dir(node)}",
            f"--events-target={self.events_target}",
            *([f"--taint={SPARE_TAINT}"] if node in self.hosts.spare_names else []),
        ]

    def start_kubelet(self, node: str) -> procs.Daemon:
        """Start (or start again) the process kubelet of ``node``, in its cgroup and netns."""
        name = f"kubelet-{node}"
        old = self.daemons.get(name)
        if old is not None and old.alive():
            raise PlatformError(f"{name} is already running (pid {old.pid})")
        self.kubelet_dir(node).mkdir(parents=True, exist_ok=True)
        return self.start_daemon(name, self.kubelet_argv(node), node=node)

    # --- health ------------------------------------------------------------------------

    def etcd_healthy(self) -> bool:
        status, body = get_in_netns(self.control_netns, "http://127.0.0.1:2379/health", ca=None)
        return status == 200 and '"true"' in body

    def apiserver_ready(self, timeout: float = 3.0) -> bool:
        assert self.pki is not None
        status, _ = get_in_netns(
            self.control_netns,
            f"{self.pki.server}/readyz",
            ca=self.pki.ca,
            token=self.pki.token,
            timeout=timeout,
        )
        return status == 200

    def _healthz_of(self, port: int) -> Callable[[], bool]:
        def ok() -> bool:
            url = f"https://127.0.0.1:{port}/healthz"
            return get_in_netns(self.control_netns, url, ca=None)[0] == 200

        return ok

    def _all_ready(self) -> bool:
        return not self.unsettled(taints=False)

    def unsettled(self, *, taints: bool = True) -> list[str]:
        """Why the nodes are not all fit for a new job now (empty: every worker node is
        Ready, schedulable and, with ``taints``, untainted); the API not answering is one."""
        from faultdrill.platforms.kubernetes.client import kube

        core = kube().client.CoreV1Api(self.api())
        try:
            items = {n.metadata.name: n for n in core.list_node(_request_timeout=5).items}
        except Exception as exc:  # not answering (yet): that is the reason
            return [f"the apiserver does not answer: {type(exc).__name__}"]
        out = []
        for name in self.workers:
            node = items.get(name)
            if node is None:
                out.append(f"{name} not registered")
                continue
            conds = node.status.conditions or []
            if not any(c.type == "Ready" and c.status == "True" for c in conds):
                out.append(f"{name} not Ready")
            hard = [t for t in node.spec.taints or [] if t.effect != "PreferNoSchedule"]
            if taints and (node.spec.unschedulable or hard):
                out.append(f"{name} cordoned or tainted")
        return out

    # --- control-plane actions (what faults ask for) -----------------------------------

    def daemon(self, name: str) -> procs.Daemon:
        try:
            return self.daemons[name]
        except KeyError:
            raise FaultError(f"no daemon {name!r} in this test cluster") from None

    def pause(self, name: str) -> dict[str, Any]:
        """SIGSTOP a daemon (recorded first; undone by :meth:`resume` or cleanup)."""
        d = self.daemon(name)
        data = {"name": name, "pid": d.pid, "start_time": d.start_time}
        eid = self.ledger.record("k8s-sigstop", data, f"SIGSTOP {name} (pid {d.pid})")
        procfs.kill_checked(d.pid, d.start_time, signal.SIGSTOP)
        self.ledger.mark_applied(eid)
        self.paused[name] = eid
        return data

    def resume(self, name: str) -> None:
        eid = self.paused.pop(name, None)
        if eid is not None:
            self.ledger.revert(eid)

    def stop_daemon(self, name: str, grace_s: float = 5.0) -> None:
        """Stop one daemon (TERM, wait, KILL) and close its ledger entry."""
        d = self.daemons.get(name)
        if d is None:
            return
        self.resume(name)
        if not procs.stop_pid(d.pid, d.start_time, grace_s):
            raise PlatformError(f"{name} (pid {d.pid}) survived SIGKILL")
        d.proc.wait()
        d.log.close()
        self.ledger.revert(d.entry)
        del self.daemons[name]
        self.sink.emit("platform", "k8s_daemon_stopped", name=name, pid=d.pid)

    def reap(self, name: str) -> None:
        """Forget daemon ``name`` after it died with its node (its ledger entry closed);
        :meth:`start_kubelet` may start it again."""
        d = self.daemons.pop(name, None)
        if d is None:
            return
        procs.stop_pid(d.pid, d.start_time, 0.0)
        d.proc.wait()
        d.log.close()
        self.ledger.revert(d.entry)
        self.sink.emit("platform", "k8s_daemon_stopped", name=name, pid=d.pid)

    def kill_daemon(self, name: str) -> int:
        """SIGKILL one daemon at once (a crash); returns its pid. Its entry is closed."""
        d = self.daemon(name)
        self.resume(name)
        procfs.kill_checked(d.pid, d.start_time, signal.SIGKILL)
        self.stop_daemon(name, grace_s=0.0)
        return d.pid

    def restart_apiserver(self, timeout_s: float = 60.0) -> float:
        """Start the apiserver again after it was stopped; seconds until /readyz."""
        assert self._binaries is not None
        self.start_daemon("kube-apiserver", self._apiserver_argv(self._binaries))
        return _wait("kube-apiserver", self.apiserver_ready, timeout_s, self._log("kube-apiserver"))

    # --- tear-down ---------------------------------------------------------------------

    def teardown(self) -> None:
        """Stop kubelets, then scheduler, controller manager, apiserver and etcd (each
        TERM -> 5 s -> KILL), remove secrets and etcd data, then the nodes. Idempotent."""
        errors: list[str] = []
        for name in list(self.paused):
            try:
                self.resume(name)
            except FaultError as exc:
                errors.append(str(exc))
        order = [n for n in self.daemons if n.startswith("kubelet-")]
        order += [n for n in reversed(CONTROL_PLANE) if n in self.daemons]
        order += [n for n in self.daemons if n not in order]
        for name in order:
            try:
                self.stop_daemon(name)
            except (PlatformError, FaultError) as exc:
                errors.append(str(exc))
        self._api = None
        for entry in reversed(self.ledger.pending()):
            if entry.kind in ("k8s-sigstop", "k8s-process", "k8s-files"):
                try:
                    self.ledger.revert(entry.id)
                except FaultError as exc:
                    errors.append(str(exc))
        self.events_to(None)
        try:
            self.hosts.teardown()
        except FaultError as exc:
            errors.append(str(exc))
        if errors:
            raise PlatformError("test cluster tear-down: " + "; ".join(errors))
