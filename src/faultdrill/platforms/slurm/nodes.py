"""The nodes an embedded Slurm cluster runs on: the namespace cluster, plus a controller.

A thin adapter over :class:`~faultdrill.platforms.local.netns.NetnsPlatform` (the namespace
cluster of the local platform) so that the lead can swap in ``NodeCluster`` by changing this
module only. It adds what Slurm needs beyond the worker nodes:

* a **controller namespace** ``fd<h>-ctl`` on the same bridge, address ``10.77.0.250``,
  hostname ``ctl``, with its own cgroup ``.../<run_id>/ctl``. slurmctld lives there, not on
  a worker node, so that cutting the control plane's link cuts only the controller (a cut of
  n1 would also take a worker and the job's rendezvous host), and so that killing or freezing
  a worker node never touches the controller;
* a **service cgroup** ``.../<run_id>/svc`` for munged (host network namespace: munge is a
  local unix socket that every node reaches through the shared file system);
* :meth:`SlurmNodes.launch`: start a process inside a node's cgroup (joined BEFORE exec, so
  slurmd -> slurmstepd -> tasks all stay in it), network namespace (``nsenter --net``, not
  ``ip netns exec``, which remounts /sys) and its own UTS namespace with the node's hostname.

Every namespace, link and cgroup is recorded in the run's ledger before it is made, with the
kinds the namespace cluster already undoes (``netns``, ``netns-link``, ``cgroup``).
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import IO, TYPE_CHECKING

from faultdrill.errors import EnvironmentPrepError, FaultError
from faultdrill.platforms.local import procfs
from faultdrill.platforms.local.linux import link_exists, netns_exists, ns_inode
from faultdrill.platforms.local.netns import SUBNET, NetnsPlatform

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.ledger import Ledger
    from faultdrill.plan import Resources

__all__ = ["CONTROLLER", "CONTROLLER_ADDRESS", "SlurmNodes"]

CONTROLLER = "ctl"
"""Name (and hostname) of the controller's namespace node."""
CONTROLLER_ADDRESS = f"{SUBNET}.250"
_NETNS_DIR = Path("/run/netns")
SERVICES = "svc"
"""Cgroup of the host-network services (munged)."""


def _must(argv: list[str]) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OSError(f"{' '.join(argv)}: {exc}") from exc
    if done.returncode != 0:
        raise OSError(f"`{' '.join(argv)}` failed: {(done.stderr or done.stdout).strip()}")


class SlurmNodes:
    """Worker nodes ``n1..nN`` (+ spares), a controller node and a services group.

    Not thread-safe for ``prepare``/``teardown``; ``launch``, ``address`` and ``cgroup``
    may be called from any thread once prepared.
    """

    def __init__(self, resources: Resources, work_dir: Path, ledger: Ledger, sink: EventSink):
        self.ledger = ledger
        self.sink = sink
        self.cluster = NetnsPlatform(resources, work_dir, ledger, sink)
        self.ctl_ns = f"{self.cluster.prefix}-{CONTROLLER}"
        self.ctl_dev = f"{self.cluster.prefix}{CONTROLLER}"
        self.ctl_switch_dev = f"{self.ctl_dev}p"
        self._extra_groups: dict[str, procfs.Cgroup] = {}

    # --- layout -----------------------------------------------------------------------

    def workers(self) -> list[str]:
        """Every worker node, spares included (Slurm sees them all as nodes)."""
        return [*self.cluster.node_names, *self.cluster.spare_names]

    def address(self, node: str) -> str:
        if node == CONTROLLER:
            return CONTROLLER_ADDRESS
        return self.cluster.node_address(node)

    def namespace(self, node: str) -> str | None:
        """The node's network namespace (None for the services group: host network)."""
        if node == CONTROLLER:
            return self.ctl_ns
        if node == SERVICES:
            return None
        return self.cluster.link(node).ns

    def ifname(self, node: str) -> str:
        if node == CONTROLLER:
            return self.ctl_dev
        return self.cluster.link(node).dev

    def switch_port(self, node: str) -> tuple[str, str]:
        """(switch namespace, switch-side interface) of a node's cable: the place to pull it."""
        if node == CONTROLLER:
            return self.cluster.switch_ns, self.ctl_switch_dev
        link = self.cluster.link(node)
        return link.switch_ns, link.switch_dev

    def cgroup(self, node: str) -> procfs.Cgroup | None:
        return self._extra_groups.get(node) or self.cluster.cgroup(node)

    def pids(self, node: str) -> list[int]:
        group = self.cgroup(node)
        return group.pids() if group is not None else []

    # --- bring-up / tear-down -----------------------------------------------------------

    def prepare(self) -> None:
        """Namespaces, veths, bridge, cgroups (the namespace cluster's), then the controller's
        namespace and veth on the same bridge, then the controller and services cgroups.
        Raises EnvironmentPrepError naming what could not be made."""
        self.cluster._prepare()
        self._controller_netns()
        root = procfs.FREEZER_ROOT / "faultdrill" / self.ledger.run_id
        for name in (CONTROLLER, SERVICES):
            group = procfs.Cgroup(root / name)
            eid = self.ledger.record("cgroup", {"path": str(group.path)}, f"cgroup {group.path}")
            try:
                group.create()
            except OSError as exc:
                raise EnvironmentPrepError(f"cannot create cgroup {group.path}: {exc}") from exc
            self.ledger.mark_applied(eid)
            self._extra_groups[name] = group

    def _controller_netns(self) -> None:
        ns, dev, peer = self.ctl_ns, self.ctl_dev, self.ctl_switch_dev
        sw, br = self.cluster.switch_ns, self.cluster.bridge
        if netns_exists(ns):
            raise EnvironmentPrepError(
                f"namespace {ns} already exists but this run did not create it; "
                "run `faultdrill cleanup` or remove it by hand"
            )
        eid = self.ledger.record("netns", {"name": ns}, f"namespace {ns}")
        self._run_all(f"namespace {ns}", [["ip", "netns", "add", ns]])
        self.ledger.update(eid, inode=ns_inode(ns))
        self._run_all(f"namespace {ns}", [["ip", "-n", ns, "link", "set", "lo", "up"]])
        self.ledger.mark_applied(eid)
        label = f"veth {dev} ({ns}) <-> {peer} ({sw})"
        eid = self.ledger.record(
            "netns-link", {"ns": ns, "name": dev, "peer_ns": sw, "peer": peer}, label
        )
        self._run_all(
            label,
            [
                [
                    "ip",
                    "link",
                    "add",
                    dev,
                    "netns",
                    ns,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    peer,
                    "netns",
                    sw,
                ],
                ["ip", "-n", sw, "link", "set", peer, "master", br],
                ["ip", "-n", sw, "link", "set", peer, "up"],
                ["ip", "-n", ns, "addr", "add", f"{CONTROLLER_ADDRESS}/24", "dev", dev],
                ["ip", "-n", ns, "link", "set", dev, "up"],
            ],
        )
        self.ledger.mark_applied(eid)

    @staticmethod
    def _run_all(label: str, argvs: list[list[str]]) -> None:
        try:
            for argv in argvs:
                _must(argv)
        except OSError as exc:
            raise EnvironmentPrepError(f"cannot create {label}: {exc}") from exc

    def teardown(self) -> None:
        """Kill every process left in the groups and remove groups, links and namespaces this
        run recorded (idempotent; also after a failed prepare). Raises FaultError listing
        what could not be undone."""
        errors = []
        for entry in reversed(self.ledger.pending()):
            if entry.kind in ("cgroup", "run-processes", "netns-link", "netns"):
                try:
                    self.ledger.revert(entry.id)
                except FaultError as exc:
                    errors.append(str(exc))
        if errors:
            raise FaultError("; ".join(errors))

    def leftovers(self) -> list[str]:
        """Namespaces and links of this cluster that still exist."""
        out = [f"namespace {ns}" for ns in self._namespaces() if netns_exists(ns)]
        if link_exists(self.ctl_ns, self.ctl_dev):
            out.append(f"link {self.ctl_dev}")
        return out

    def _namespaces(self) -> list[str]:
        return [
            self.cluster.switch_ns,
            self.ctl_ns,
            *(self.cluster.link(n).ns for n in self.workers()),
        ]

    # --- launching ----------------------------------------------------------------------

    def launch_argv(self, node: str, argv: list[str], *, hostname: str | None = None) -> list[str]:
        """The full argv that starts ``argv`` in ``node``: cgroup first (before exec), then
        its network namespace, then a UTS namespace named ``hostname`` (default: the node's
        name). Every step execs, so the returned pid is ``argv``'s own process."""
        ns = self.namespace(node)
        inner = list(argv)
        if ns is not None:
            host = hostname or node
            inner = [
                "nsenter",
                f"--net={_NETNS_DIR / ns}",
                *("unshare", "--uts", "/bin/sh", "-c", 'hostname "$0" && exec "$@"', host),
                *inner,
            ]
        group = self.cgroup(node)
        if group is None:
            raise EnvironmentPrepError(f"node {node} has no cgroup (is the cluster prepared?)")
        procs = shlex.quote(str(group.path / "cgroup.procs"))
        return ["/bin/sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *inner]

    def launch(
        self,
        node: str,
        argv: list[str],
        *,
        env: dict[str, str],
        log: IO[bytes],
        cwd: Path | None = None,
        hostname: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` on ``node`` (see :meth:`launch_argv`), in its own session, with
        stdout and stderr to ``log``. Raises OSError when it cannot be started."""
        return subprocess.Popen(
            self.launch_argv(node, argv, hostname=hostname),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            start_new_session=True,
        )

    def run_in(self, node: str, argv: list[str]) -> list[str]:
        """argv that runs a short command in the node's network namespace (no cgroup, no
        UTS namespace): for the Slurm clients the harness runs."""
        ns = self.namespace(node)
        if ns is None:
            return list(argv)
        return ["nsenter", f"--net={_NETNS_DIR / ns}", *argv]
