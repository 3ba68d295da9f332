"""Linux primitives of the local platforms: namespaces, links, cgroups and signals.

Creating, entering and deleting named network namespaces (``/run/netns/NAME``), running a
command or a Python callable inside one (``nsenter``, ``setns`` on one thread), finding
the processes and listening ports inside one; and the undo of every change the node
cluster (:mod:`faultdrill.host.cluster`) and the local platform make, by ledger
kind, also replayed by ``faultdrill cleanup`` (so these kinds and what their data means
never change: ledgers written by earlier versions must stay cleanable):

===================  ===================================================================
``netns``            a network namespace (kill what runs inside, then delete it)
``netns-link``       a bridge or veth pair in one of our namespaces
``iptables-rule``    one tagged rule in a namespace's chain
``tc-qdisc``         a tbf root qdisc on an interface
``link-down``        an interface set down (set it up)
``cgroup``           a freezer group (kill what is left, remove it)
``freeze``           a frozen group (thaw it)
``run-processes``    every process carrying the run id (the fallback without cgroups)
``node-kill``        processes killed (nothing to undo)
``signal``           a signal delivered (nothing to undo)
``sigstop``          a process stopped (SIGCONT, to the same pid and start time only)
===================  ===================================================================
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from faultdrill.errors import NotOursError
from faultdrill.host import owned, procfs
from faultdrill.host.api import Change, Note, Replica
from faultdrill.ledger import THIS_RUN, undoer

__all__ = [
    "ActiveRule",
    "NodeLink",
    "fresh_rule_id",
    "in_netns",
    "link_exists",
    "netns_exists",
    "netns_unavailable",
    "ns_inode",
    "ns_pids",
    "ns_run",
    "run_in_netns",
    "signal_change",
    "sigstop_change",
    "stop_tree_changes",
]

T = TypeVar("T")
_CLONE_NEWNET = 0x40000000
_NETNS_DIR = Path("/run/netns")
_TOOLS = ("ip", "nsenter", "iptables", "tc")

# --- low-level helpers (also used by the network faults and the network track) -----------


def netns_unavailable() -> str | None:
    """Why this machine cannot host a namespace cluster, or None if it can."""
    if os.geteuid() != 0:
        return "network namespaces need root (faultdrill is not running as root)"
    missing = [t for t in _TOOLS if shutil.which(t) is None]
    if missing:
        return f"missing tool(s): {', '.join(missing)} (install iproute2, util-linux, iptables)"
    if not procfs.Cgroup.available():
        return f"cgroup v1 freezer not writable at {procfs.FREEZER_ROOT}"
    return None


def _run(argv: list[str], *, timeout: float = 15.0) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OSError(f"{' '.join(argv)}: {exc}") from exc


def _must(argv: list[str]) -> str:
    """Run a command; raise OSError naming it and its stderr when it fails."""
    done = _run(argv)
    if done.returncode != 0:
        raise OSError(f"`{' '.join(argv)}` failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def ns_run(ns: str, argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in network namespace ``ns`` (host mount namespace kept)."""
    full = ["nsenter", f"--net={_NETNS_DIR / ns}", *argv]
    if check:
        _must(full)
        return subprocess.CompletedProcess(full, 0, "", "")
    return _run(full)


def netns_exists(name: str) -> bool:
    return (_NETNS_DIR / name).exists()


def ns_inode(name: str) -> int | None:
    try:
        return (_NETNS_DIR / name).stat().st_ino
    except OSError:
        return None


def link_exists(ns: str, dev: str) -> bool:
    return netns_exists(ns) and _run(["ip", "-n", ns, "link", "show", "dev", dev]).returncode == 0


def ns_pids(name: str) -> list[int]:
    """Processes whose network namespace is ``name`` (never the harness itself)."""
    ino = ns_inode(name)
    if ino is None:
        return []
    out = []
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if os.stat(f"/proc/{entry.name}/ns/net").st_ino == ino:
                out.append(int(entry.name))
        except OSError:
            continue
    return out


_libc: Any = None
_setns_lock = threading.Lock()


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def in_netns(name: str) -> Iterator[None]:
    """Run the body with the CALLING THREAD in network namespace ``name``.

    Sockets and ``/proc/thread-self/net/*`` files opened inside stay bound to that
    namespace after the thread returns to its own. Raises OSError if it does not exist.
    """
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(_NETNS_DIR / name, os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)


def run_in_netns(ns: str, fn: Callable[[], T]) -> T:
    """Call ``fn`` in a short-lived thread that has entered namespace ``ns`` (the caller's
    own thread never changes namespace). Raises what ``fn`` raised, or OSError."""
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            with in_netns(ns):
                box["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    t = threading.Thread(target=body, name=f"in-{ns}", daemon=True)
    t.start()
    t.join(timeout=10)
    if "error" in box:
        raise box["error"]
    if "value" not in box:
        raise OSError(f"no answer from namespace {ns} within 10 s")
    value: T = box["value"]
    return value


def _free_port_in(ns: str, address: str) -> int:
    def pick() -> int:
        with socket.socket() as s:
            s.bind((address, 0))
            return int(s.getsockname()[1])

    return run_in_netns(ns, pick)


# --- undo functions (used in-process and by `faultdrill cleanup`) -------------------------


@undoer("netns", owns={"name": owned.NETNS})
def _undo_netns(data: dict[str, Any]) -> None:
    """Kill what still runs inside the namespace (ours: it was created for this run), then
    delete it. Idempotent. When the ledger noted the namespace's inode, a namespace of that
    name with another inode is not ours (ours is gone; another was made under its name):
    it is left alone, processes and all, and said (NotOursError)."""
    name = str(data["name"])
    if not netns_exists(name):
        return
    recorded = data.get("inode")
    if recorded is not None and ns_inode(name) != recorded:
        raise NotOursError(
            f"namespace {name} now has inode {ns_inode(name)}, not the recorded {recorded}: "
            "it is not the one this run made; left alone"
        )
    for _ in range(50):
        pids = ns_pids(name)
        if not pids:
            break
        for pid in pids:
            procfs.kill_checked(pid, None, signal.SIGKILL)
        time.sleep(0.05)
    _must(["ip", "netns", "del", name])


@undoer(
    "netns-link",
    owns={"ns": owned.NETNS, "name": owned.IFACE, "peer_ns": owned.NETNS, "peer": owned.IFACE},
)
def _undo_link(data: dict[str, Any]) -> None:
    """Delete a bridge or veth pair created in one of our namespaces. Idempotent."""
    ns, dev = str(data["ns"]), str(data["name"])
    if link_exists(ns, dev):
        _must(["ip", "-n", ns, "link", "del", "dev", dev])


# --- a node's network attachment and the rules applied to it ---------------------------


@dataclass(frozen=True)
class NodeLink:
    """A node's network attachment: its namespace, interface and address, and the switch
    side of its veth pair."""

    node: str
    ns: str
    dev: str
    address: str
    switch_ns: str
    switch_dev: str


@dataclass
class ActiveRule:
    """A rule a fault has applied now (for the network track's packet counters)."""

    rule_id: str
    node: str
    ns: str
    kind: str  # "iptables" | "tbf"
    chain: str = ""
    dev: str = ""
    fault: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _listening_in(ns: str) -> list[int]:
    """TCP ports in LISTEN state inside namespace ``ns``."""

    def read() -> list[int]:
        ports = set()
        for table in ("tcp", "tcp6"):
            try:
                lines = Path(f"/proc/thread-self/net/{table}").read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                cols = line.split()
                if len(cols) > 3 and cols[3] == "0A":
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
        return sorted(ports)

    try:
        return run_in_netns(ns, read)
    except OSError:
        return []


def fresh_rule_id() -> str:
    """A tag for one injected rule (``-m comment``), unique per host."""
    return f"fd-{random.getrandbits(40):010x}"


# --- undo of the changes made to links and nodes ---------------------------------------


@undoer("iptables-rule", owns={"ns": owned.NETNS, "chain": owned.CHAIN, "rule": owned.TAGGED_RULE})
def _undo_iptables(data: dict[str, Any]) -> None:
    """Delete every copy of the recorded rule from its chain (none left is fine)."""
    ns = str(data["ns"])
    if not netns_exists(ns):
        return  # the namespace took its rules with it
    rule = [str(a) for a in data["rule"]]
    chain = str(data["chain"])
    for _ in range(10):
        if ns_run(ns, ["iptables", "-w", "-C", chain, *rule], check=False).returncode != 0:
            return
        ns_run(ns, ["iptables", "-w", "-D", chain, *rule])
    raise OSError(f"rule {data.get('tag')} keeps reappearing in {ns} {chain}")


@undoer("tc-qdisc", owns={"ns": owned.NETNS, "dev": owned.IFACE})
def _undo_qdisc(data: dict[str, Any]) -> None:
    ns, dev = str(data["ns"]), str(data["dev"])
    if not link_exists(ns, dev):
        return
    shown = ns_run(ns, ["tc", "qdisc", "show", "dev", dev, "root"], check=False).stdout
    if "tbf" in shown:
        ns_run(ns, ["tc", "qdisc", "del", "dev", dev, "root"])


@undoer("link-down", owns={"ns": owned.NETNS, "dev": owned.IFACE})
def _undo_link_down(data: dict[str, Any]) -> None:
    ns, dev = str(data["ns"]), str(data["dev"])
    if link_exists(ns, dev):
        ns_run(ns, ["ip", "link", "set", "dev", dev, "up"])


@undoer("cgroup", owns={"path": owned.CGROUP})
def _undo_cgroup(data: dict[str, Any]) -> None:
    procfs.Cgroup(Path(str(data["path"]))).remove()


@undoer("freeze", owns={"path": owned.CGROUP})
def _undo_freeze(data: dict[str, Any]) -> None:
    """Thaw the recorded freezer group (gone already is fine)."""
    group = procfs.Cgroup(Path(str(data["path"])))
    if not group.exists():
        return
    group.thaw()
    for _ in range(100):
        if group.state() in ("THAWED", "GONE"):
            return
        time.sleep(0.02)
    raise OSError(f"{group.path} is still {group.state()} after THAWED was written")


@undoer("run-processes", owns={"run_id": THIS_RUN})
def _undo_run_processes(data: dict[str, Any]) -> None:
    """Kill every process carrying the recorded run id (the fallback without cgroups)."""
    run_id = str(data["run_id"])
    for _ in range(3):
        pids = procfs.pids_with_env("FAULTDRILL_RUN_ID", run_id)
        if not pids:
            return
        for pid in pids:
            procfs.kill_checked(pid, None, signal.SIGKILL)
        time.sleep(0.1)
    left = procfs.pids_with_env("FAULTDRILL_RUN_ID", run_id)
    if left:
        raise OSError(f"processes {left} of run {run_id} survived SIGKILL")


@undoer("node-kill", owns={})  # acts on nothing
def _undo_node_kill(data: dict[str, Any]) -> None:
    """Killed processes cannot be revived; recorded so the ledger shows it happened."""


@undoer("signal", owns={})  # acts on nothing
def _undo_signal(data: dict[str, Any]) -> None:
    """A delivered signal cannot be taken back; recorded so the ledger shows it happened."""


@undoer("sigstop", owns={"pid": owned.PROCESS})
def _undo_sigstop(data: dict[str, Any]) -> None:
    """Resume the paused process, only if it is still the one that was paused."""
    pid, start = int(data["pid"]), data.get("start_time")
    if procfs.alive(pid, None if start is None else int(start)):
        procfs.kill_checked(pid, None if start is None else int(start), signal.SIGCONT)


# --- signals as changes ------------------------------------------------------------------


def signal_change(
    pid: int,
    start: int | None,
    sig: str,
    label: str,
    command: str,
    facts: dict[str, Any] | None = None,
) -> Change:
    """Deliver ``sig`` (``"SIGKILL"``...) to ``pid`` if it is still the process that started
    at ``start`` (ledger kind ``signal``, irreversible). Its ``apply`` raises
    ProcessLookupError when that process is gone, and returns ``facts`` with ``signal``."""

    def apply(note: Note) -> dict[str, Any]:
        if not procfs.kill_checked(pid, start, signal.Signals[sig]):
            raise ProcessLookupError(f"process {pid} exited before it could be signalled")
        return {**(facts or {}), "signal": sig}

    data = {"pid": pid, "start_time": start, "signal": sig}
    return Change("signal", data, label, command, apply, reversible=False)


def sigstop_change(pid: int, start: int | None, label: str, **facts: Any) -> Change:
    """Stop ``pid`` (the process that started at ``start``) with SIGSTOP; the undo
    (``sigstop``) resumes it. Its ``apply`` raises ProcessLookupError when it is gone."""

    def apply(note: Note) -> dict[str, Any]:
        if not procfs.kill_checked(pid, start, signal.SIGSTOP):
            raise ProcessLookupError(f"process {pid} exited before it could be stopped")
        return {"pid": pid, **facts}

    data = {"pid": pid, "start_time": start}
    return Change("sigstop", data, label, f"kill -STOP {pid}", apply)


def stop_tree_changes(victim: Replica, procs: Iterable[Replica], *, via: str = "") -> list[Change]:
    """Stop ``victim`` (a rank's replica) and then each of its children among ``procs``
    (``role == "child"``, ``owner == victim.pid``), each with SIGSTOP as one ``sigstop``
    change (the undo resumes that pid only if it still started at the same time). The
    replica goes first, so it starts no new child once its children are listed; a child
    gone meanwhile is skipped (``child_gone``). ``via`` prefixes the operator's command
    (``ssh n2 ``). The first change's ``apply`` raises ProcessLookupError when the
    replica itself is gone."""
    where = f"rank {victim.rank}, node {victim.node}"
    first = sigstop_change(
        victim.pid,
        victim.start_time,
        f"SIGSTOP pid {victim.pid} ({where}: hang)",
        rank=victim.rank,
        node=victim.node,
    )
    changes = [dataclasses.replace(first, command=f"{via}kill -STOP {victim.pid}")]
    for child in procs:
        if child.role != "child" or child.owner != victim.pid:
            continue
        changes.append(_child_sigstop(child, f"SIGSTOP pid {child.pid} (child of {where})", via))
    return changes


def _child_sigstop(child: Replica, label: str, via: str) -> Change:
    pid, start = child.pid, child.start_time

    def apply(note: Note) -> dict[str, Any]:
        if not procfs.kill_checked(pid, start, signal.SIGSTOP):
            return {"child_gone": pid}
        return {"child": pid}

    data = {"pid": pid, "start_time": start}
    return Change("sigstop", data, label, f"{via}kill -STOP {pid}", apply)
