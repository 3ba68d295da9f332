"""The local platform with network isolation: every node is a network namespace.

The nodes are a :class:`~faultdrill.host.cluster.NodeCluster` with ``netns``:
each node a network namespace with a veth on a bridge (``10.77.0.<i>``) and a cgroup; the
host's own network namespace is never touched. A node's agent joins its cgroup first, then
enters its namespace (``nsenter --net``). torchrun gets ``--rdzv-endpoint=<n1
address>:<port> --local-addr=<own address>`` and ``GLOO_SOCKET_IFNAME=<the node's veth>``.

Actions on top of the local platform's (:mod:`faultdrill.platforms.api`): a node's link
loses, slows, flaps or is cut, and the control plane's port can be cut (the cluster's
iptables rules and qdiscs); a node goes down (link cut, then its cgroup killed), freezes
(cgroup freezer) or is drained (its agent stopped with SIGTERM), each with the node's state
kept in step (event ``node_state``).

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

import json
import os
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from faultdrill import rundir
from faultdrill.errors import FaultError, PlatformError
from faultdrill.host import procfs
from faultdrill.host.cluster import SUBNET, NodeCluster
from faultdrill.host.linux import ActiveRule, NodeLink, netns_unavailable, signal_change
from faultdrill.platforms.api import Change, JobSpec, JobState, NodeInfo
from faultdrill.platforms.hosted import NodeLinks
from faultdrill.platforms.local.platform import ISOLATION_VARIANTS, LocalPlatform

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.host.netsampler import NetSampler
    from faultdrill.ledger import Ledger
    from faultdrill.plan import Resources

__all__ = ["SUBNET", "NetnsPlatform"]


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


class NetnsPlatform(NodeLinks, LocalPlatform):
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
        self.state: dict[str, str] = {n: "up" for n in self.node_names}
        self.state.update({n: "spare" for n in self.spare_names})
        self._handled: set[str] = set()  # lost nodes whose replacement was decided
        self.members: list[str] = []  # nodes the job runs on now (spares replace lost ones)
        self._logwatch = _LogWatch(sink)

    @classmethod
    def host_lacks(cls, resources: Resources) -> str | None:
        why = netns_unavailable()
        if why is None:
            return None
        return f"isolation netns: {why}; run faultdrill as root, or set resources.isolation: none"

    # --- layout -------------------------------------------------------------------------

    @property
    def prefix(self) -> str:
        return self.cluster.prefix

    @property
    def switch_ns(self) -> str:
        return self.cluster.switch_ns

    @property
    def bridge(self) -> str:
        return self.cluster.bridge

    def link(self, node: str) -> NodeLink:
        """The node's namespace, interface and address. Raises FaultError for an unknown node."""
        return self.cluster.link(node)

    def links(self) -> list[NodeLink]:
        return self.cluster.links()

    def nodes(self) -> list[NodeInfo]:
        return [
            NodeInfo(n, self.node_address(n), self.state[n], n in self.spare_names)
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

    # --- the network track (NetworkTrack) -----------------------------------------------

    @property
    def net_track(self) -> NetSampler | None:
        return self.cluster.track

    @net_track.setter
    def net_track(self, track: NetSampler | None) -> None:
        self.cluster.track = track

    def start_network_track(self, hz: float) -> None:
        """Start sampling interface counters, round trips and rule counters (idempotent)."""
        self.cluster.start_network_track(hz)

    def active_rules(self) -> list[ActiveRule]:
        return self.cluster.active_rules()

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
        self.rdzv_host = self.node_address(usable[0])
        self.rdzv_port = self.cluster.free_port(usable[0])
        for node in usable:
            self.start_agent(node, job, is_host=(node == usable[0]))
        for node in [n for n in self.members if n not in usable and n not in self._handled]:
            self._handled.add(node)
            self._place_replacement(node)

    def agent_env(self, node: str, job: JobSpec) -> dict[str, str]:
        env = super().agent_env(node, job)
        env["FAULTDRILL_NODE_ADDR"] = self.node_address(node)
        return env

    # --- observing, and re-placement after a node loss -----------------------------------

    def _poll(self) -> JobState:
        self._logwatch.poll(rundir.logs_dir(self.work_dir))
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
            done = self.cluster.run(spare, cmd, env=env)
        except OSError as exc:
            return {"runtime": f"cannot run {sys.executable} on {spare}: {exc}"}
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            return {"runtime": f"{sys.executable} failed on {spare}: {tail[0]}"}
        try:
            result = json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"runtime": f"unreadable precondition report from {spare}: {done.stdout!r}"}
        return {k: str(v) for k, v in result.items() if v}

    # --- actions: whole nodes (NodeActions) -----------------------------------------------

    def agent_pid(self, node: str) -> int | None:
        agent = self._agents.get(node)
        if agent is None or agent.proc.poll() is not None:
            return None
        return agent.proc.pid

    def node_pids(self, node: str) -> list[int]:
        """Every live process of the node (its cgroup)."""
        return self.member_pids(node)

    def node_down(self, node: str) -> list[Change]:
        """Marked down first, so the platform never mistakes the agent's death for the
        job's; then the cluster's link cut and kill."""
        cut, kill = self.cluster.node_down(node)
        mark = cut.preceded_by(lambda: self.set_node_state(node, "down", "node-down fault"))
        return [mark, kill]

    def node_freeze(self, node: str) -> list[Change]:
        """The cluster's freeze, the node marked ``frozen`` once it is, ``up`` once thawed."""
        freeze = self.cluster.freeze_node(node)
        return [
            replace(
                freeze.followed_by(
                    lambda: self.set_node_state(node, "frozen", "node-freeze fault")
                ),
                after_undo=lambda: self.set_node_state(node, "up", "thawed"),
            )
        ]

    def node_drain(self, node: str) -> list[Change]:
        """Marked ``drained`` (no work is placed on it again), then its agent stopped
        cleanly (SIGTERM: torchrun stops its workers and leaves)."""
        pid = self.agent_pid(node)
        if pid is None:
            raise FaultError(f"node-drain: node {node} runs no agent")
        stop = signal_change(
            pid,
            procfs.start_time(pid),
            "SIGTERM",
            f"SIGTERM agent pid {pid} of {node} (drain)",
            f"kill -TERM {pid}  # torchrun agent of {node}",
            {"agent_pid": pid},
        )
        return [stop.preceded_by(lambda: self.set_node_state(node, "drained", "node-drain fault"))]

    # --- actions: links (LinkActions) ------------------------------------------------------

    def node_cluster(self) -> NodeCluster:
        return self.cluster


ISOLATION_VARIANTS["netns"] = NetnsPlatform
