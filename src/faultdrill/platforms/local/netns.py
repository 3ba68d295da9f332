"""The local platform with network isolation: every node is a network namespace.

Layout of one run (names derived from the run id, each at most 15 characters; ``h`` is six
hex digits of a hash of the run id, so two runs never share a name)::

    namespace fd<h>-sw  (the "switch"): bridge fd<h>br
      ├── fd<h>n1p ═ veth ═ fd<h>n1  in namespace fd<h>-n1, address 10.77.0.1/24
      ├── fd<h>n2p ═ veth ═ fd<h>n2  in namespace fd<h>-n2, address 10.77.0.2/24
      └── ...                         spare nodes the same way (n3 -> 10.77.0.3 ...)

The host's own network namespace is never touched: every address, route, bridge and rule
lives in a namespace this module created. Each bring-up step is recorded in the ledger
BEFORE it is made, with the name it will create, so tear-down and ``faultdrill cleanup``
remove exactly what was recorded (never by pattern). Bring-up and tear-down are idempotent.

A node's agent joins its cgroup first, then enters the namespace with
``nsenter --net=/run/netns/NAME`` (not ``ip netns exec``, which also creates a mount
namespace and remounts /sys: mounts made by storage faults in the host's mount namespace
must stay visible to the job). torchrun gets ``--rdzv-endpoint=<n1 address>:<port>
--local-addr=<own address>`` and ``GLOO_SOCKET_IFNAME=<the node's veth>``.

Beyond the local platform this one knows node states (``up``, ``down``, ``frozen``,
``drained``, ``spare``, ``unusable``) and re-places work after a node loss: when a node
is down or drained and its agent is gone while the job still runs, it puts an agent on the
next spare whose preconditions hold (runtime present, checkpoint and run directories
reachable, route to the rendezvous host), or says that none is left, in which case
torchrun continues on the remaining nodes if the plan's ``min_nodes`` allows. A spare
that fails a precondition is an *environment preparation* failure (event
``spare_rejected``, category ``environment-preparation``), never a scheduling failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultdrill.errors import EnvironmentPrepError, FaultError, PlatformError
from faultdrill.platforms.api import (
    ABILITY_NETWORK_LINKS,
    ABILITY_NETWORK_TRACK,
    ABILITY_NODE_CONTROL,
    ABILITY_SIGNAL_WORKERS,
    JobSpec,
    JobState,
    NodeInfo,
)
from faultdrill.platforms.local.linux import (
    _NETNS_DIR,
    NodeLink,
    _ActiveRule,
    _free_port_in,
    _listening_in,
    _must,
    link_exists,
    netns_exists,
    netns_unavailable,
    ns_inode,
)
from faultdrill.platforms.local.platform import LocalPlatform

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.ledger import Ledger
    from faultdrill.plan import Plan, Resources
    from faultdrill.platforms.local.netsampler import NetSampler

__all__ = ["SUBNET", "NetnsPlatform", "without_netns_if_unavailable"]

SUBNET = "10.77.0"
"""Addresses of the nodes: ``10.77.0.<i>/24``, used only inside this module's namespaces."""


# Lines of worker/agent output that say a timeout or a lost peer ended a collective or a
# rendezvous call; checked in order, the first match wins. (event kind, timeout, regex)
_ERROR_PATTERNS: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(
    (kind, timeout, re.compile(rx))
    for kind, timeout, rx in (
        ("timeout_fired", "gloo", r"Application timeout caused pair closure"),
        ("timeout_fired", "gloo", r"[Gg]loo.*[Tt]imed out"),
        ("timeout_fired", "gloo", r"Timed out waiting \d+ms for (recv|send)"),
        ("timeout_fired", "rdzv-join", r"RendezvousTimeoutError"),
        ("timeout_fired", "store-read", r"\[c10d\].*timed out|Socket Timeout|wait timeout after"),
        ("peer_error", "", r"Connection reset by peer|Connection closed by peer"),
    )
)


class _LogWatch:
    """Tails the agents' log files (workers write their stderr there) and turns lines that
    name a timeout or a lost peer into ``platform`` events, stamped when read (the engine
    polls every 0.1 s)."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink
        self.offsets: dict[Path, int] = {}
        self.seen: set[tuple[str, str]] = set()

    def poll(self, logs_dir: Path) -> None:
        for path in sorted(logs_dir.glob("agent-*.log")):
            off = self.offsets.get(path, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(off)
                    chunk = f.read(1 << 20)
            except OSError:
                continue
            end = chunk.rfind(b"\n")
            if end < 0:
                continue
            self.offsets[path] = off + end + 1
            node = path.stem.removeprefix("agent-")
            for raw in chunk[: end + 1].decode(errors="replace").splitlines():
                self._classify(node, raw)

    def _classify(self, node: str, line: str) -> None:
        for kind, timeout, rx in _ERROR_PATTERNS:
            if rx.search(line):
                key = (node, line.strip()[:200])
                if key in self.seen:
                    return
                self.seen.add(key)
                m = re.search(r"\[(?:default)?(\d+)\]:", line)
                self.sink.emit(
                    "platform",
                    kind,
                    node=node,
                    timeout=timeout or None,
                    local_rank=int(m.group(1)) if m else None,
                    line=line.strip()[:500],
                    source="agent log",
                )
                return


_PRECHECK = r"""
import importlib.util, json, os, socket, sys
kind, target, host, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
dirs = sys.argv[5:]
out = {}
if kind == "module":
    ok = importlib.util.find_spec("torch") is not None
    try:
        ok = ok and importlib.util.find_spec(target) is not None
    except (ImportError, ValueError):
        ok = False
    out["runtime"] = "" if ok else f"python {sys.executable} cannot import torch or {target}"
else:
    ok = importlib.util.find_spec("torch") is not None and os.access(target, os.R_OK)
    out["runtime"] = "" if ok else f"torch or the script {target} is not available"
bad = [d for d in dirs if not os.access(d, os.R_OK | os.W_OK | os.X_OK)]
out["storage"] = f"no read/write access to {', '.join(bad)}" if bad else ""
try:
    socket.create_connection((host, port), timeout=2).close()
    out["route"] = ""
except ConnectionRefusedError:
    out["route"] = ""  # the host answered: routed, its store is just not up (yet)
except OSError as exc:
    out["route"] = f"cannot reach the rendezvous host {host}:{port}: {exc.strerror or exc}"
print(json.dumps(out))
"""


class NetnsPlatform(LocalPlatform):
    """torchrun agents on this host, each node in its own network namespace and cgroup.

    Selected by ``platform: local`` with ``isolation: netns`` (see ``LocalPlatform``'s
    ``variant_for``). Raises EnvironmentPrepError from ``prepare`` when the machine cannot
    create namespaces (not root, tools missing).
    """

    name = "local"

    def __init__(
        self, resources: Resources, work_dir: Path, ledger: Ledger, sink: EventSink
    ) -> None:
        super().__init__(resources, work_dir, ledger, sink)
        h = hashlib.sha1(ledger.run_id.encode()).hexdigest()[:6]
        self.prefix = f"fd{h}"
        self.switch_ns = f"{self.prefix}-sw"
        self.bridge = f"{self.prefix}br"
        self._links: dict[str, NodeLink] = {}
        for i, name in enumerate([*self.node_names, *self.spare_names], start=1):
            self._links[name] = NodeLink(
                node=name,
                ns=f"{self.prefix}-{name}",
                dev=f"{self.prefix}{name}",
                address=f"{SUBNET}.{i}",
                switch_ns=self.switch_ns,
                switch_dev=f"{self.prefix}{name}p",
            )
        self.state: dict[str, str] = {n: "up" for n in self.node_names}
        self.state.update({n: "spare" for n in self.spare_names})
        self._handled: set[str] = set()  # lost nodes whose replacement was decided
        self.members: list[str] = []  # nodes the job runs on now (spares replace lost ones)
        self.rules: dict[str, _ActiveRule] = {}
        self._rules_lock = threading.Lock()
        self._logwatch = _LogWatch(sink)
        self.net_track: NetSampler | None = None

    @classmethod
    def host_lacks(cls, resources: Resources) -> str | None:
        why = netns_unavailable()
        if why is None:
            return None
        return f"isolation netns: {why}; run faultdrill as root, or set resources.isolation: none"

    @classmethod
    def abilities_for(cls, resources: Resources) -> frozenset[str]:
        return frozenset(
            {
                ABILITY_SIGNAL_WORKERS,
                ABILITY_NETWORK_LINKS,
                ABILITY_NODE_CONTROL,
                ABILITY_NETWORK_TRACK,
            }
        )

    # --- layout -------------------------------------------------------------------------

    def link(self, node: str) -> NodeLink:
        """The node's namespace, interface and address. Raises FaultError for an unknown node."""
        try:
            return self._links[node]
        except KeyError:
            raise FaultError(
                f"node {node!r} is not in this layout ({', '.join(self._links)})"
            ) from None

    def links(self) -> list[NodeLink]:
        return list(self._links.values())

    def node_address(self, node: str) -> str:
        return self._links[node].address

    def gloo_ifname(self, node: str) -> str:
        return self._links[node].dev

    def launch_prefix(self, node: str) -> list[str]:
        return ["nsenter", f"--net={_NETNS_DIR / self._links[node].ns}"]

    def nodes(self) -> list[NodeInfo]:
        return [
            NodeInfo(n, self._links[n].address, self.state[n], n in self.spare_names)
            for n in [*self.node_names, *self.spare_names]
        ]

    def set_node_state(self, node: str, state: str, reason: str) -> None:
        """Record a node state change (by a node fault or the platform itself)."""
        old = self.state.get(node)
        if old == state:
            return
        self.state[node] = state
        self.sink.emit(
            "platform", "node_state", node=node, state=state, previous=old, reason=reason
        )

    # --- bring-up / tear-down -------------------------------------------------------------

    def _step(self, kind: str, data: dict[str, Any], label: str, present: bool) -> str | None:
        """Record one bring-up step unless this run already recorded it; returns the entry id
        to mark applied (None if it was recorded before: bring-up is idempotent)."""
        assert self.ledger is not None
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
        assert self.ledger is not None
        try:
            for argv in argvs:
                _must(argv)
        except OSError as exc:
            raise EnvironmentPrepError(f"cannot create {label}: {exc}") from exc
        if kind == "netns":
            self.ledger.update(eid, inode=ns_inode(str(data["name"])))
        self.ledger.mark_applied(eid)

    def _prepare(self) -> None:
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
        for ln in self._links.values():
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
        if not self._cgroups and not any(e.kind == "run-processes" for e in self.ledger.pending()):
            super()._prepare()

    def _teardown(self) -> None:
        track, self.net_track = self.net_track, None
        if track is not None:
            track.stop()  # its sockets hold references to the namespaces
        super()._teardown()
        assert self.ledger is not None
        errors = []
        for entry in reversed(self.ledger.pending()):
            if entry.kind in ("netns-link", "netns"):
                try:
                    self.ledger.revert(entry.id)
                except FaultError as exc:
                    errors.append(str(exc))
        if errors:
            raise FaultError("; ".join(errors))

    def leftovers(self) -> list[str]:
        """Listening TCP sockets still open inside the nodes' namespaces (the host's port
        table cannot see them)."""
        out = []
        for ln in self._links.values():
            if not netns_exists(ln.ns):
                continue
            for port in _listening_in(ln.ns):
                out.append(f"TCP port {port} still listening in namespace {ln.ns} ({ln.node})")
        return out

    # --- the network track ----------------------------------------------------------------

    def start_network_track(self, hz: float) -> None:
        """Start sampling interface counters, round trips and rule counters (idempotent)."""
        from faultdrill.platforms.local.netsampler import NetSampler

        if self.net_track is None:
            self.net_track = NetSampler(self.links(), self.sink, hz, self.active_rules)
            self.net_track.start()

    def add_rule(self, rule: _ActiveRule) -> None:
        with self._rules_lock:
            self.rules[rule.rule_id] = rule

    def drop_rule(self, rule_id: str) -> None:
        with self._rules_lock:
            self.rules.pop(rule_id, None)

    def active_rules(self) -> list[_ActiveRule]:
        with self._rules_lock:
            return list(self.rules.values())

    # --- launching --------------------------------------------------------------------

    def _submit(self, job: JobSpec) -> None:
        """Start one agent per member node. A resubmission (the operator's restart) runs on
        the current members: spares placed earlier stay, nodes down or drained are replaced
        by a usable spare if one is left. The first usable member hosts the rendezvous."""
        if not self.members:
            self.members = list(job.nodes)
        usable = [n for n in self.members if self.state.get(n) not in ("down", "drained")]
        if not usable:
            raise PlatformError(f"no usable node left to run {job.run_id} on")
        host = self._links[usable[0]]
        self.rdzv_host = host.address
        self.rdzv_port = _free_port_in(host.ns, host.address)
        for node in usable:
            self.start_agent(node, job, is_host=(node == usable[0]))
        for node in [n for n in self.members if n not in usable and n not in self._handled]:
            self._handled.add(node)
            self._place_replacement(node)

    def agent_env(self, node: str, job: JobSpec) -> dict[str, str]:
        env = super().agent_env(node, job)
        env["FAULTDRILL_NODE_ADDR"] = self._links[node].address
        return env

    # --- observing, and re-placement after a node loss -----------------------------------

    def _poll(self) -> JobState:
        self._logwatch.poll(self.work_dir / "logs")
        state = super()._poll()
        if state == JobState.RUNNING:
            self._replace_lost_nodes()
        return state

    def _replace_lost_nodes(self) -> None:
        codes = self.agent_exit_codes()
        for node, rc in codes.items():
            if rc is None or node in self._handled:
                continue
            st = self.state.get(node)
            if st not in ("down", "drained") and not (rc < 0 and st != "spare"):
                continue  # an agent that exited on its own: the job's business, not a loss
            self._handled.add(node)
            self.sink.emit(
                "platform",
                "node_lost",
                node=node,
                agent_rc=rc,
                state=st,
                reason=f"node {st}" if st in ("down", "drained") else f"agent killed ({rc})",
            )
            self._place_replacement(node)

    def _place_replacement(self, lost: str) -> None:
        assert self.job is not None
        for spare in self.spare_names:
            if self.state.get(spare) != "spare":
                continue
            problems = self.spare_problems(spare)
            if problems:
                self.set_node_state(spare, "unusable", "environment preparation failed")
                for what, detail in problems.items():
                    self.sink.emit(
                        "platform",
                        "spare_rejected",
                        node=spare,
                        replaces=lost,
                        category="environment-preparation",
                        precondition=what,
                        detail=detail,
                    )
                continue
            self.set_node_state(spare, "up", f"placed to replace {lost}")
            self.sink.emit("platform", "spare_placed", node=spare, replaces=lost)
            self.members = [spare if n == lost else n for n in self.members]
            self.start_agent(spare, self.job, is_host=False)
            return
        alive = [n for n, rc in self.agent_exit_codes().items() if rc is None]
        self.sink.emit(
            "platform",
            "no_spare",
            replaces=lost,
            category="scheduling",
            remaining=alive,
            min_nodes=self.job.min_nodes,
            detail=f"no usable spare; {len(alive)} node(s) remain, the job needs at least "
            f"{self.job.min_nodes}",
        )

    def spare_problems(self, spare: str) -> dict[str, str]:
        """Check a spare's preconditions from inside it; precondition -> problem (empty: ok).

        Runs the node's own interpreter in the node's namespace: the runtime must import
        torch and the entrypoint, the checkpoint and run directories must be readable and
        writable, and the rendezvous host must answer on its port.
        """
        assert self.job is not None
        job = self.job
        argv = list(job.argv)
        if argv[:1] == ["-m"] and len(argv) > 1:
            kind, target = "module", argv[1]
        else:
            kind, target = "script", argv[0] if argv else ""
        dirs = [str(job.work_dir), job.env.get("FAULTDRILL_CKPT_DIR", str(job.work_dir))]
        cmd = [
            *self.launch_prefix(spare),
            sys.executable,
            "-c",
            _PRECHECK,
            kind,
            target,
            self.rdzv_host,
            str(self.rdzv_port),
            *dirs,
        ]
        env = {**os.environ, "FAULTDRILL_RUN_ID": job.run_id, "FAULTDRILL_NODE": spare}
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=20, env=env, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {"runtime": f"cannot run {sys.executable} on {spare}: {exc}"}
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            return {"runtime": f"{sys.executable} failed on {spare}: {tail[0]}"}
        try:
            result = json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"runtime": f"unreadable precondition report from {spare}: {done.stdout!r}"}
        return {k: str(v) for k, v in result.items() if v}

    # --- what node faults use ------------------------------------------------------------

    def agent_pid(self, node: str) -> int | None:
        agent = self._agents.get(node)
        if agent is None or agent.proc.poll() is not None:
            return None
        return agent.proc.pid

    def node_pids(self, node: str) -> list[int]:
        """Every live process of the node (its cgroup)."""
        return self.member_pids(node)


def without_netns_if_unavailable(plan: Plan) -> tuple[Plan, str | None]:
    """For the demo: when this machine cannot create namespaces, the same plan with
    ``isolation: none`` and without the scenarios and controls whose faults need them,
    plus a sentence saying so; otherwise the plan unchanged and None."""
    if plan.resources.isolation != "netns":
        return plan, None
    why = netns_unavailable()
    if why is None:
        return plan, None
    from faultdrill.faults import FAULTS
    from faultdrill.plan import plan_without

    can = LocalPlatform.abilities_for(plan.resources.model_copy(update={"isolation": "none"}))
    dropped = [
        item.id
        for item in plan.items()
        if not FAULTS[item.fault.kind].requires_for(item.fault) <= can
    ]
    note = (
        f"{why}; running the demo without network isolation"
        + (f" and without {', '.join(dropped)}" if dropped else "")
        + " (run as root for the multi-node network drills)"
    )
    source = "demo plan without network namespaces"
    return plan_without(plan, set(dropped), source=source, isolation="none", spares=0), note
