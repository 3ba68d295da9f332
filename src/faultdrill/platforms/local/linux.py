"""Linux network-namespace primitives: the host side of the namespace cluster.

Creating, entering and deleting named network namespaces (``/run/netns/NAME``), running a
command or a Python callable inside one (``nsenter``, ``setns`` on one thread), finding
the processes and listening ports inside one, and the undo functions of the namespaces
and links the cluster creates (``netns``, ``netns-link``; also replayed by ``faultdrill
cleanup``). Used by the cluster (:mod:`faultdrill.platforms.local.netns`), the network
faults and the network track.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from faultdrill.errors import NotOursError
from faultdrill.ledger import undoer
from faultdrill.platforms.local import procfs

__all__ = [
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


@undoer("netns")
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


@undoer("netns-link")
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
class _ActiveRule:
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
