"""What this host's substrate names and makes for one run, and how an undo proves it.

Every thing a drill creates on the host carries the run's mark, so that ``faultdrill
cleanup`` can tell it from everything else before acting on what a ledger (untrusted
input) names. The names are derived from the run id here, and the undo of each ledger kind
states its claims beside it (``@undoer(kind, owns={field: claim})``,
:mod:`faultdrill.ledger`):

=================  ==========================================================================
claim              the field names...
=================  ==========================================================================
:data:`NETNS`      a network namespace ``fd<h>-<node>`` (``h``: 6 hex digits of the run id's
                   sha1, :func:`net_prefix`)
:data:`IFACE`      an interface ``fd<h><node>[p]`` or the bridge ``fd<h>br``
:data:`CGROUP`     the freezer group ``faultdrill/<run id>`` or one below it
:data:`PROCESS`    a process that is gone, or carries ``FAULTDRILL_RUN_ID=<run id>`` in its
                   environment, or sits in one of the run's freezer groups
:data:`FUSE_DAEMON`  a process that is gone, or the FUSE mirror daemon started for this run's
                   status file (its command line names the mirror module and that file)
:data:`FUSE_STATUS`  that status file (in the run directory), naming no live daemon but ours
:data:`MOUNT_TAG`  a mount source tag ``faultdrill-<32 hex>``
:data:`CHAIN`      an iptables chain faultdrill inserts into (INPUT, OUTPUT, FORWARD)
:data:`TAGGED_RULE`  an iptables rule carrying the entry's tag (``-m comment --comment
                   fd-<10 hex>``)
:func:`tmp_dir`    ``/tmp/<prefix><digits of the run id's sha1>`` (a short scratch directory)
:func:`env_marker` a marker (32 hex) that no live process of another run carries
=================  ==========================================================================

A claim raises NotOursError saying what it found; it acts on nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from faultdrill import safepath
from faultdrill.errors import NotOursError
from faultdrill.host import procfs
from faultdrill.ledger import Claim, RunScope

__all__ = [
    "CGROUP",
    "CHAIN",
    "FUSE_DAEMON",
    "FUSE_STATUS",
    "IFACE",
    "MIRROR_MODULE",
    "MOUNT_TAG",
    "NETNS",
    "PROCESS",
    "TAGGED_RULE",
    "env_marker",
    "net_prefix",
    "run_tmp_dir",
    "tmp_dir",
]

MIRROR_MODULE = "faultdrill.host.fuse_mirror"
_TMP = Path("/tmp")
_RULE_TAG = re.compile(r"fd-[0-9a-f]{10}")
_MOUNT_TAG = re.compile(r"faultdrill-[0-9a-f]{32}")
_MARKER = re.compile(r"[0-9a-f]{32}")
_CHAINS = frozenset({"INPUT", "OUTPUT", "FORWARD"})


def _digest(run_id: str) -> str:
    return hashlib.sha1(run_id.encode()).hexdigest()


def net_prefix(run_id: str) -> str:
    """``fd`` + 6 hex digits of the run id's sha1: the start of every namespace and
    interface name of the run (each name at most 15 characters)."""
    return f"fd{_digest(run_id)[:6]}"


def run_tmp_dir(prefix: str, digits: int, run_id: str) -> Path:
    """``/tmp/<prefix><first digits of the run id's sha1>``: short, and the run's own."""
    return _TMP / f"{prefix}{_digest(run_id)[:digits]}"


def _netns(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    prefix = net_prefix(run.run_id)
    if not isinstance(value, str) or not re.fullmatch(rf"{prefix}-[a-z0-9]{{1,16}}", value):
        raise NotOursError(f"namespace {value!r} is not one of this run's ({prefix}-...)")


def _iface(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    prefix = net_prefix(run.run_id)
    if not isinstance(value, str) or not re.fullmatch(rf"{prefix}[a-z0-9]{{1,7}}", value):
        raise NotOursError(f"interface {value!r} is not one of this run's ({prefix}...)")


def _cgroup(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    root = procfs.FREEZER_ROOT / "faultdrill" / run.run_id
    why = safepath.escape(root, value, allow_base=True) if isinstance(value, str) else "no path"
    if why is not None:
        raise NotOursError(f"cgroup {value!r} is not one of this run's ({root}): {why}")


def _in_run_cgroup(pid: int, run: RunScope) -> bool:
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False
    mine = f"/faultdrill/{run.run_id}"
    for line in text.splitlines():
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        if "freezer" in controllers.split(","):
            return path == mine or path.startswith(mine + "/")
    return False


def _ancestors() -> set[int]:
    out, pid = set(), os.getpid()
    while pid and pid not in out:
        out.add(pid)
        pid = procfs.parent_pid(pid) or 0
    return out


def _live_pid(value: Any, data: Mapping[str, Any]) -> int | None:
    """The recorded pid if that process still runs (None when it is gone, or the pid now
    belongs to a process started at another time than the recorded one). NotOursError for
    a value that is no process faultdrill starts (pid 0, 1, negative, ours, our parents)."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 1:
        raise NotOursError(f"pid {value!r} is not a process a drill starts")
    if value in _ancestors():
        raise NotOursError(f"pid {value} is this cleanup or one of its parents")
    start = data.get("start_time")
    start = start if isinstance(start, int) and not isinstance(start, bool) else None
    return value if procfs.alive(value, start) else None


def _ours(pid: int, run: RunScope) -> bool:
    return procfs.environ(pid).get("FAULTDRILL_RUN_ID") == run.run_id or _in_run_cgroup(pid, run)


def _process(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    pid = _live_pid(value, data)
    if pid is not None and not _ours(pid, run):
        raise NotOursError(
            f"process {pid} ({' '.join(procfs.cmdline(pid))[:120]}) is not one of this run's "
            f"(neither FAULTDRILL_RUN_ID={run.run_id} nor in its cgroup)"
        )


def _mirror_of(pid: int, status: str) -> bool:
    cmd = procfs.cmdline(pid)
    return MIRROR_MODULE in cmd and status in cmd


def _fuse_daemon(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    pid = _live_pid(value, data)
    if pid is None:
        return
    status = data.get("status")
    run.inside(status)
    if not _mirror_of(pid, str(status)):
        raise NotOursError(f"process {pid} is not the FUSE mirror daemon of {status}")


def _fuse_status(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    run.inside(value)
    try:
        raw = json.loads(safepath.read_bytes(Path(value), within=run.run_dir, limit=1 << 16))
    except (OSError, ValueError, safepath.UnsafePathError):
        return  # no status to go by: the undo finds no daemon through it
    if not isinstance(raw, dict):
        return
    pid = _live_pid(raw.get("pid"), raw) if isinstance(raw.get("pid"), int) else None
    if pid is not None and not _mirror_of(pid, value):
        raise NotOursError(f"{value} names process {pid}, which is not its FUSE mirror daemon")


def _mount_tag(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    if not isinstance(value, str) or not _MOUNT_TAG.fullmatch(value):
        raise NotOursError(f"mount source {value!r} is not a faultdrill tag")


def _chain(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    if value not in _CHAINS:
        raise NotOursError(f"chain {value!r} is not one faultdrill inserts rules into")


def _tagged_rule(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    tag = data.get("tag")
    if not isinstance(tag, str) or not _RULE_TAG.fullmatch(tag):
        raise NotOursError(f"rule tag {tag!r} is not one of faultdrill's (fd-<10 hex>)")
    rule = [str(a) for a in value] if isinstance(value, list) else []
    marks = ["-m", "comment", "--comment", tag]
    if not any(rule[i : i + 4] == marks for i in range(len(rule))):
        raise NotOursError(f"rule {value!r} does not carry its tag {tag} as a comment")


def tmp_dir(prefix: str, digits: int, *, in_run: bool) -> Claim:
    """A claim: the path is this run's ``/tmp`` directory (:func:`run_tmp_dir`), not a
    link; with ``in_run`` a path strictly inside the run directory is accepted too."""

    def claim(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
        if in_run and isinstance(value, str) and safepath.escape(run.run_dir, value) is None:
            return
        mine = run_tmp_dir(prefix, digits, run.run_id)
        if value != str(mine):
            raise NotOursError(f"{value!r} is not this run's temporary directory {mine}")
        if mine.is_symlink():
            raise NotOursError(f"{mine} is a symbolic link, not this run's directory")

    return claim


def env_marker(key: str) -> Claim:
    """A claim: the value is a marker (32 hex digits) that every live process carrying
    ``key=<marker>`` in its environment is this run's (:data:`PROCESS`)."""

    def claim(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
        if not isinstance(value, str) or not _MARKER.fullmatch(value):
            raise NotOursError(f"marker {value!r} is not one of faultdrill's (32 hex digits)")
        for pid in procfs.pids_with_env(key, value):
            _process(pid, {}, run)

    return claim


NETNS: Claim = _netns
IFACE: Claim = _iface
CGROUP: Claim = _cgroup
PROCESS: Claim = _process
FUSE_DAEMON: Claim = _fuse_daemon
FUSE_STATUS: Claim = _fuse_status
MOUNT_TAG: Claim = _mount_tag
CHAIN: Claim = _chain
TAGGED_RULE: Claim = _tagged_rule
