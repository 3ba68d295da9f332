"""The nodes of one run on this host: the substrate every embedded cluster stands on.

A :class:`NodeCluster` is ``n1..nN`` plus spares, and optionally *controller hosts*
(machines of the cluster that never run a replica of the job: a Slurm controller, a Ray
head, a Kubernetes control plane; never counted among :meth:`~NodeCluster.nodes`, listed by
:meth:`~NodeCluster.hosts`) and *host groups* (services that stay in the host's network
namespace, e.g. munged: a cgroup only). Each node is

* a cgroup v1 freezer group ``/sys/fs/cgroup/freezer/faultdrill/<run id>/nI`` (when this
  machine has the freezer writable: as root). Every process :meth:`~NodeCluster.launch`
  starts on a node joins it BEFORE exec, so all its descendants (torchrun -> workers;
  slurmd -> slurmstepd -> tasks; raylet -> workers; kubelet -> pod processes) are found,
  frozen and killed by node. Without cgroups, the run id in each process's environment
  (``FAULTDRILL_RUN_ID``, ``FAULTDRILL_NODE``) is the fallback handle;
* with ``netns=True``, a network namespace with a veth on a bridge (names derived from
  the run id, each at most 15 characters; ``h`` is six hex digits of its hash, so two runs
  never share a name)::

    namespace fd<h>-sw  (the "switch"): bridge fd<h>br
      ├── fd<h>n1p ═ veth ═ fd<h>n1  in namespace fd<h>-n1, address 10.77.0.1/24
      ├── fd<h>n2p ═ veth ═ fd<h>n2  in namespace fd<h>-n2, address 10.77.0.2/24
      ├── ...                         spare nodes the same way (n3 -> 10.77.0.3 ...)
      └── fd<h>ctl ═ veth ═ ...        controller hosts from 10.77.0.250 down

  The host's own network namespace is never touched: every address, route, bridge and
  rule lives in a namespace this module created. A process is entered into its node's
  namespace with ``nsenter --net`` (not ``ip netns exec``, which also makes a mount
  namespace and remounts /sys: mounts made by storage outages in the host's mount
  namespace must stay visible to the job).

Each bring-up step is recorded in the ledger BEFORE it is made, with the name it will
create, so :meth:`~NodeCluster.teardown` and ``faultdrill cleanup`` remove exactly what was
recorded (never by pattern). Bring-up and tear-down are idempotent.

Besides the verbs (``prepare``, ``teardown``, ``nodes``, ``address``, ``launch``, ``run``,
``node_pids``, ``free_port``), the cluster makes the changes a node or a link can suffer
(:class:`~faultdrill.platforms.api.Change`; their undo is in
:mod:`~faultdrill.host.linux`), and keeps the registry of rules in place for the
network track. A platform composes a cluster and adds its own view on top (node states,
what a drain means for its scheduler).
"""

from __future__ import annotations

import contextlib
import shlex
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from faultdrill.errors import EnvironmentPrepError, FaultError, PlatformError
from faultdrill.host import procfs
from faultdrill.host.api import Change, Note
from faultdrill.host.linux import (
    _NETNS_DIR,
    ActiveRule,
    NodeLink,
    _free_port_in,
    _listening_in,
    _must,
    fresh_rule_id,
    link_exists,
    netns_exists,
    netns_unavailable,
    ns_inode,
    ns_run,
)
from faultdrill.host.netsampler import NetSampler
from faultdrill.host.owned import net_prefix

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.ledger import Ledger

__all__ = ["CONTROLLER_BASE", "SUBNET", "NodeCluster"]

SUBNET = "10.77.0"
"""Addresses of the nodes: ``10.77.0.<i>/24``, used only inside the cluster's namespaces."""
CONTROLLER_BASE = 250
"""The first controller host's last octet (``10.77.0.250``); the next ones count down (a
controller's address does not move with the number of nodes and spares)."""

_LOCALHOST = "127.0.0.1"


class NodeCluster:
    """The nodes of one run (see the module docstring). Not thread-safe, except the rule
    registry and the actions' ``apply``."""

    def __init__(
        self,
        ledger: Ledger,
        sink: EventSink,
        nodes: Sequence[str],
        spares: Sequence[str] = (),
        *,
        netns: bool = False,
        controllers: Sequence[str] = (),
        host_groups: Sequence[str] = (),
    ) -> None:
        """``controllers``: controller hosts (a cgroup each and, with ``netns``, a namespace
        on the bridge from ``10.77.0.250`` down; a name of at most 6 characters: interface
        names are limited to 15); ``host_groups``: cgroups for processes that
        keep the host's network. Neither is in :meth:`nodes`; both take ``launch``,
        ``cgroup`` and ``node_pids``, and a controller host every link action."""
        self.ledger = ledger
        self.sink = sink
        self.run_id = ledger.run_id
        self.node_names = list(nodes)
        self.spare_names = list(spares)
        self.controller_names = list(controllers)
        self.host_group_names = list(host_groups)
        self.netns = netns
        self.prefix = net_prefix(self.run_id)
        self.switch_ns = f"{self.prefix}-sw"
        self.bridge = f"{self.prefix}br"
        self._links: dict[str, NodeLink] = {}
        if netns:
            for i, name in enumerate(self.hosts(), start=1):
                self._links[name] = NodeLink(
                    node=name,
                    ns=f"{self.prefix}-{name}",
                    dev=f"{self.prefix}{name}",
                    address=f"{SUBNET}.{i}",
                    switch_ns=self.switch_ns,
                    switch_dev=f"{self.prefix}{name}p",
                )
            for i, name in enumerate(self.controller_names):
                self._links[name] = NodeLink(
                    node=name,
                    ns=f"{self.prefix}-{name}",
                    dev=f"{self.prefix}{name}",
                    address=f"{SUBNET}.{CONTROLLER_BASE - i}",
                    switch_ns=self.switch_ns,
                    switch_dev=f"{self.prefix}{name}p",
                )
        self.cgroups: dict[str, procfs.Cgroup] = {}
        self._rules: dict[str, ActiveRule] = {}
        self._rules_lock = threading.Lock()
        self.track: NetSampler | None = None

    # --- layout -------------------------------------------------------------------------

    def nodes(self) -> list[str]:
        """Every node, working nodes first, then the spares (not the controller hosts)."""
        return [*self.node_names, *self.spare_names]

    def hosts(self) -> list[str]:
        """Every machine of the cluster: the nodes, then the controller hosts."""
        return [*self.nodes(), *self.controller_names]

    def address(self, node: str) -> str:
        """The node's IPv4 address (loopback without network namespaces, and for a host
        group)."""
        return self._links[node].address if self.netns and node in self._links else _LOCALHOST

    def interface(self, node: str) -> str:
        """The node's network interface, as seen from inside it (``lo`` without namespaces)."""
        return self._links[node].dev if self.netns and node in self._links else "lo"

    def link(self, node: str) -> NodeLink:
        """The node's namespace, interface and address. Raises FaultError for an unknown node
        or a cluster without network namespaces."""
        if not self.netns:
            raise FaultError(f"node {node} has no link of its own (needs isolation: netns)")
        try:
            return self._links[node]
        except KeyError:
            raise FaultError(
                f"node {node!r} is not in this layout ({', '.join(self._links)})"
            ) from None

    def links(self) -> list[NodeLink]:
        """The links of the nodes (spares included; not of controller hosts)."""
        return [self._links[n] for n in self.nodes() if n in self._links]

    def cgroup(self, node: str) -> procfs.Cgroup | None:
        return self.cgroups.get(node)

    def launch_prefix(self, node: str) -> list[str]:
        """Argv that enters the node's network namespace (empty without namespaces, and for
        a host group)."""
        if not self.netns or node not in self._links:
            return []
        return ["nsenter", f"--net={_NETNS_DIR / self._links[node].ns}"]

    # --- bring-up / tear-down -------------------------------------------------------------

    def prepare(self) -> None:
        """Create the namespaces, links and cgroups, each recorded before it is made.
        Idempotent. Raises EnvironmentPrepError when the machine cannot host them."""
        if self.netns:
            self._prepare_network()
        if not self.cgroups and not any(e.kind == "run-processes" for e in self.ledger.pending()):
            self._prepare_groups()

    def _prepare_groups(self) -> None:
        self.ledger.mark_applied(
            self.ledger.record("run-processes", {"run_id": self.run_id}, self.run_id)
        )
        if not procfs.Cgroup.available():
            return
        root = procfs.FREEZER_ROOT / "faultdrill" / self.run_id
        eid = self.ledger.record("cgroup", {"path": str(root)}, f"cgroup {root}")
        procfs.Cgroup(root).create()
        self.ledger.mark_applied(eid)
        for name in [*self.hosts(), *self.host_group_names]:
            group = procfs.Cgroup(root / name)
            eid = self.ledger.record("cgroup", {"path": str(group.path)}, f"cgroup {group.path}")
            try:
                group.create()
            except OSError as exc:
                raise EnvironmentPrepError(f"cannot create cgroup {group.path}: {exc}") from exc
            self.ledger.mark_applied(eid)
            self.cgroups[name] = group

    def _step(self, kind: str, data: dict[str, Any], label: str, present: bool) -> str | None:
        """Record one bring-up step unless this run already recorded it; returns the entry id
        to mark applied (None if it was recorded before: bring-up is idempotent)."""
        for entry in self.ledger.pending():
            if entry.kind == kind and all(entry.data.get(k) == v for k, v in data.items()):
                return None
        if present:
            raise EnvironmentPrepError(
                f"{label} already exists but this run did not create it; "
                "run `faultdrill cleanup` or remove it by hand"
            )
        return self.ledger.record(kind, data, label)

    def _make(self, kind: str, data: dict[str, Any], label: str, argvs: list[list[str]]) -> None:
        present = (
            netns_exists(data["name"])
            if kind == "netns"
            else link_exists(str(data["ns"]), str(data["name"]))
        )
        eid = self._step(kind, data, label, present)
        if eid is None:
            return
        try:
            for argv in argvs:
                _must(argv)
        except OSError as exc:
            raise EnvironmentPrepError(f"cannot create {label}: {exc}") from exc
        if kind == "netns":
            self.ledger.update(eid, inode=ns_inode(str(data["name"])))
        self.ledger.mark_applied(eid)

    def _prepare_network(self) -> None:
        why = netns_unavailable()
        if why:
            raise EnvironmentPrepError(f"isolation netns: {why}")
        sw, br = self.switch_ns, self.bridge
        self._make(
            "netns",
            {"name": sw},
            f"namespace {sw}",
            [["ip", "netns", "add", sw], ["ip", "-n", sw, "link", "set", "lo", "up"]],
        )
        self._make(
            "netns-link",
            {"ns": sw, "name": br},
            f"bridge {br} in {sw}",
            [
                ["ip", "-n", sw, "link", "add", br, "type", "bridge"],
                ["ip", "-n", sw, "link", "set", br, "up"],
            ],
        )
        for ln in self._links.values():  # nodes, then controller hosts
            self._make(
                "netns",
                {"name": ln.ns},
                f"namespace {ln.ns}",
                [["ip", "netns", "add", ln.ns], ["ip", "-n", ln.ns, "link", "set", "lo", "up"]],
            )
            self._make(
                "netns-link",
                {"ns": ln.ns, "name": ln.dev, "peer_ns": sw, "peer": ln.switch_dev},
                f"veth {ln.dev} ({ln.ns}) <-> {ln.switch_dev} ({sw})",
                [
                    # Both ends are created directly in their namespaces: the host never
                    # sees either of them.
                    [
                        *("ip", "link", "add", ln.dev, "netns", ln.ns, "type", "veth"),
                        *("peer", "name", ln.switch_dev, "netns", sw),
                    ],
                    ["ip", "-n", sw, "link", "set", ln.switch_dev, "master", br],
                    ["ip", "-n", sw, "link", "set", ln.switch_dev, "up"],
                    ["ip", "-n", ln.ns, "addr", "add", f"{ln.address}/24", "dev", ln.dev],
                    ["ip", "-n", ln.ns, "link", "set", ln.dev, "up"],
                ],
            )
            self.sink.emit(
                "platform",
                "netns_ready",
                node=ln.node,
                ns=ln.ns,
                dev=ln.dev,
                address=ln.address,
                switch=f"{sw}/{br}",
            )

    def teardown(self) -> None:
        """Stop the network track, kill what still runs on the nodes, remove the groups,
        then the links and namespaces: every step the ledger holds for them, newest first.
        Idempotent. Raises FaultError naming every step that could not be undone (the rest
        are undone regardless)."""
        self.stop_network_track()
        errors = []
        for kinds in (("cgroup", "run-processes"), ("netns-link", "netns")):
            for entry in reversed(self.ledger.pending()):
                if entry.kind in kinds:
                    try:
                        self.ledger.revert(entry.id)
                    except FaultError as exc:
                        errors.append(str(exc))
        if errors:
            raise FaultError("; ".join(errors))

    def leftovers(self, daemons: Mapping[str, Collection[int]] | None = None) -> list[str]:
        """Listening TCP sockets still open inside the nodes' (and controller hosts')
        namespaces (the host's port table cannot see them), except ``daemons``: node ->
        the ports a platform's own daemons listen on there (a scheduler's, not the job's)."""
        out = []
        for ln in self._links.values():
            if not netns_exists(ln.ns):
                continue
            allowed = set((daemons or {}).get(ln.node, ()))
            for port in _listening_in(ln.ns):
                if port not in allowed:
                    out.append(f"TCP port {port} still listening in namespace {ln.ns} ({ln.node})")
        return out

    # --- processes on a node --------------------------------------------------------------

    def launch(
        self,
        node: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log: IO[bytes],
        hostname: str | None = None,
        cgroup: bool = True,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` on ``node``, in its own session: it joins the node's cgroup before
        exec (so do all its descendants), then enters the node's network namespace and, with
        ``hostname``, a UTS namespace of its own named so (a daemon that takes its node's
        name from the host name, such as slurmd's tasks). Every step execs, so the returned
        pid is ``argv``'s own. Its environment is ``env`` plus ``FAULTDRILL_RUN_ID`` and
        ``FAULTDRILL_NODE`` (the handle without cgroups) unless ``env`` sets them. Output
        goes to ``log``. Raises PlatformError when it cannot be started.

        ``cgroup=False``: the process stays out of the node's cgroup (in the harness's), so
        node faults do not reach it: for the harness's own helpers that must reach the
        node's network (an observer of a scheduler); the caller records and stops it."""
        inner = list(argv)
        if hostname is not None:
            inner = ["unshare", "--uts", "/bin/sh", "-c", 'hostname "$0" && exec "$@"', hostname]
            inner += argv
        full = [*self.launch_prefix(node), *inner]
        group = self.cgroups.get(node) if cgroup else None
        if group is not None:
            procs_file = shlex.quote(str(group.path / "cgroup.procs"))
            full = ["/bin/sh", "-c", f'echo $$ > {procs_file} && exec "$@"', "sh", *full]
        environ = {"FAULTDRILL_RUN_ID": self.run_id, "FAULTDRILL_NODE": node, **env}
        try:
            return subprocess.Popen(
                full,
                env=environ,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise PlatformError(f"cannot start {argv[0]} on node {node}: {exc}") from exc

    def run(
        self, node: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a short command in the node's network namespace (not its cgroup) and wait
        for it (at most 20 s), output captured. Raises OSError when it cannot run or hangs."""
        try:
            return subprocess.run(
                [*self.launch_prefix(node), *argv],
                capture_output=True,
                text=True,
                timeout=20,
                env=None if env is None else dict(env),
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise OSError(f"{argv[0]} on {node} did not finish within 20 s") from exc

    def node_pids(self, node: str) -> list[int]:
        """Every live process of the node: its cgroup, else the processes whose environment
        carries this run's id and the node's name."""
        if self.cgroups:
            group = self.cgroups.get(node)
            return group.pids() if group is not None else []
        return [
            p
            for p in procfs.pids_with_env("FAULTDRILL_RUN_ID", self.run_id)
            if procfs.environ(p).get("FAULTDRILL_NODE") == node
        ]

    def pids(self) -> list[int]:
        """Every live process on any node of the cluster (not of controller hosts or
        host groups)."""
        if self.cgroups:
            groups = [self.cgroups[n] for n in self.nodes() if n in self.cgroups]
            return [pid for group in groups for pid in group.pids()]
        return procfs.pids_with_env("FAULTDRILL_RUN_ID", self.run_id)

    def free_port(self, node: str) -> int:
        """A TCP port free now on the node's address."""
        if self.netns:
            ln = self._links[node]
            return _free_port_in(ln.ns, ln.address)
        with socket.socket() as s:
            s.bind((_LOCALHOST, 0))
            return int(s.getsockname()[1])

    # --- changes to links -------------------------------------------------------------------

    def _drop(self, ln: NodeLink, chain: str, match: list[str], purpose: str) -> Change:
        """One tagged iptables DROP rule in ``ln``'s namespace, known to the network track
        while it is in place (its final counters are taken right before its undo)."""
        tag = fresh_rule_id()
        rule = [*match, "-m", "comment", "--comment", tag, "-j", "DROP"]
        active = ActiveRule(tag, ln.node, ln.ns, "iptables", chain=chain, fault=purpose)

        def apply(note: Note) -> dict[str, Any]:
            ns_run(ln.ns, ["iptables", "-w", "-I", chain, *rule])
            self.add_rule(active)
            return {"rule": tag, "chain": chain, "node": ln.node, "dev": ln.dev}

        return Change(
            "iptables-rule",
            {"ns": ln.ns, "chain": chain, "rule": rule, "tag": tag, "node": ln.node},
            f"iptables {chain} {' '.join(rule)} in {ln.ns}",
            f"iptables -w -I {chain} {' '.join(rule)}",
            apply,
            before_undo=partial(self.forget_rule, active),
        )

    def _both_ways(
        self, node: str, peer: str | None, extra: list[str], purpose: str
    ) -> list[Change]:
        ln = self.link(node)
        src: list[str] = []
        dst: list[str] = []
        if peer is not None:
            addr = self.link(peer).address
            src, dst = ["-s", f"{addr}/32"], ["-d", f"{addr}/32"]
        return [
            self._drop(ln, "INPUT", ["-i", ln.dev, *src, *extra], purpose),
            self._drop(ln, "OUTPUT", ["-o", ln.dev, *dst, *extra], purpose),
        ]

    def link_loss(self, node: str, percent: float, *, peer: str | None = None) -> list[Change]:
        """Drop ``percent`` % of the node's packets each way (iptables ``statistic``)."""
        p = f"{percent / 100:.6f}"
        stat = ["-m", "statistic", "--mode", "random", "--probability", p]
        return self._both_ways(node, peer, stat, "link-loss")

    def link_cut(self, node: str, *, peer: str | None = None) -> list[Change]:
        """Drop every packet of the node each way (or to and from ``peer`` only)."""
        return self._both_ways(node, peer, [], "link-cut")

    def service_cut(
        self, node: str, address: str, port: int, *, purpose: str = "service-cut"
    ) -> list[Change]:
        """Drop the node's TCP traffic to and from one service (``address:port``, e.g. an
        API server on a controller host), each way, on the node's own link; everything
        else the node sends still flows."""
        ln = self.link(node)
        to = ["-o", ln.dev, "-d", f"{address}/32", "-p", "tcp", "--dport", str(port)]
        back = ["-i", ln.dev, "-s", f"{address}/32", "-p", "tcp", "--sport", str(port)]
        return [
            self._drop(ln, "OUTPUT", to, purpose),
            self._drop(ln, "INPUT", back, purpose),
        ]

    def port_cut(self, node: str, port: int, *, purpose: str = "port-cut") -> list[Change]:
        """Drop the TCP traffic to and from ``port`` on the node's link."""
        ln = self.link(node)
        return [
            self._drop(ln, "INPUT", ["-i", ln.dev, "-p", "tcp", "--dport", str(port)], purpose),
            self._drop(ln, "OUTPUT", ["-o", ln.dev, "-p", "tcp", "--sport", str(port)], purpose),
        ]

    def link_slow(self, node: str, *, rate: str, burst: str, queue_ms: int) -> list[Change]:
        """A tbf root qdisc on both ends of the node's veth pair."""
        ln = self.link(node)
        tbf = ["tbf", "rate", rate, "burst", burst, "latency", f"{queue_ms}ms"]
        return [
            self._shape(ln, ns, dev, tbf)
            for ns, dev in ((ln.ns, ln.dev), (ln.switch_ns, ln.switch_dev))
        ]

    def _shape(self, ln: NodeLink, ns: str, dev: str, tbf: list[str]) -> Change:
        rule_id = f"tbf-{uuid.uuid4().hex[:12]}"
        active = ActiveRule(rule_id, ln.node, ns, "tbf", dev=dev, fault="link-slow")

        def apply(note: Note) -> dict[str, Any]:
            ns_run(ns, ["tc", "qdisc", "replace", "dev", dev, "root", *tbf])
            self.add_rule(active)
            return {"rule": active.rule_id, "node": ln.node, "dev": ln.dev}

        return Change(
            "tc-qdisc",
            {"ns": ns, "dev": dev, "node": ln.node},
            f"tc qdisc root {' '.join(tbf)} on {dev} in {ns}",
            f"tc -n {ns} qdisc replace dev {dev} root {' '.join(tbf)}",
            apply,
            before_undo=partial(self.forget_rule, active),
        )

    def link_down(self, node: str) -> Change:
        """Set the node's interface down; the undo (``link-down``) sets it up."""
        ln = self.link(node)

        def apply(note: Note) -> dict[str, Any]:
            ns_run(ln.ns, ["ip", "link", "set", "dev", ln.dev, "down"])
            return {"node": ln.node, "dev": ln.dev}

        return Change(
            "link-down",
            {"ns": ln.ns, "dev": ln.dev, "node": node},
            f"link {ln.dev} down in {ln.ns}",
            f"ip -n {ln.ns} link set dev {ln.dev} down",
            apply,
        )

    # --- changes to whole nodes ---------------------------------------------------------------

    def _group(self, node: str) -> procfs.Cgroup:
        group = self.cgroups.get(node)
        if group is None:
            raise FaultError(f"node {node} has no cgroup (needs root)")
        return group

    def kill_node(self, node: str) -> Change:
        """SIGKILL every process of the node (its cgroup) until none is left. Irreversible.
        Its ``apply`` raises FaultError when some survive, and returns ``killed``."""
        group = self._group(node)

        def apply(note: Note) -> dict[str, Any]:
            pids = group.pids()
            note(pids=pids)
            left = group.kill_all(timeout_s=5.0)
            if left:
                raise FaultError(f"node-down: processes {left} of {node} survived SIGKILL")
            return {"killed": pids}

        return Change(
            "node-kill",
            {"path": str(group.path), "node": node},
            f"SIGKILL every process of {node}",
            f"kill -KILL $(cat {group.path}/cgroup.procs)",
            apply,
            reversible=False,
        )

    def node_down(self, node: str) -> list[Change]:
        """The node is gone: its link cut first (peers see silence, not a reset), then
        every process of it killed."""
        return [self.link_down(node), self.kill_node(node)]

    def freeze_node(self, node: str) -> Change:
        """Every process of the node stopped (cgroup freezer); the undo (``freeze``) thaws
        them. Its ``apply`` returns ``frozen`` (pids) and ``freezer_state``."""
        group = self._group(node)

        def apply(note: Note) -> dict[str, Any]:
            group.freeze()
            deadline = time.monotonic() + 5.0
            while group.state() == "FREEZING" and time.monotonic() < deadline:
                time.sleep(0.01)
            return {"frozen": group.pids(), "freezer_state": group.state()}

        return Change(
            "freeze",
            {"path": str(group.path), "node": node},
            f"freeze {group.path}",
            f"echo FROZEN > {group.path}/freezer.state",
            apply,
        )

    # --- rules in place, and the network track ----------------------------------------------

    def add_rule(self, rule: ActiveRule) -> None:
        with self._rules_lock:
            self._rules[rule.rule_id] = rule

    def forget_rule(self, rule: ActiveRule) -> None:
        """Take the rule's final counters (network track) and stop tracking it."""
        track = self.track
        if track is not None:
            # the track is evidence, not the drill: a failed reading is a gap
            with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
                track.emit_rule(rule, final=True)
        with self._rules_lock:
            self._rules.pop(rule.rule_id, None)

    def active_rules(self) -> list[ActiveRule]:
        with self._rules_lock:
            return list(self._rules.values())

    def start_network_track(self, hz: float) -> None:
        """Sample interface counters, round trips and rule counters (idempotent)."""
        if self.track is None and self.netns:
            self.track = NetSampler(self.links(), self.sink, hz, self.active_rules)
            self.track.start()

    def stop_network_track(self) -> None:
        track, self.track = self.track, None
        if track is not None:
            track.stop()  # its sockets hold references to the namespaces
