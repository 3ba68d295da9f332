"""Every registered undo kind, fed hostile data: nothing that is not this run's is touched.

A table holds, for EVERY kind in the undo registry (a new kind without hostile cases fails
``test_every_kind_has_hostile_cases``), entries a hand-edited ledger could hold: a path
outside the run, a symbolic link swapped in on the way, a namespace, interface, cgroup or
mount tag not of this run's naming, the pid of a process that is not the run's, an
iptables rule without its comment tag, another run's id. Each case plants a real decoy
(a file, a directory, a namespace with a link, a qdisc and a rule, a frozen cgroup, a
tmpfs, a process; as root where the kernel needs it), replays the entry through a real
:class:`~faultdrill.ledger.Ledger` (what ``faultdrill cleanup`` does) and checks that the
entry was refused and the decoy is as it was. The entries are recorded through the ledger,
so they are signed with this machine's key: the claims are the second wall (a line not
signed here never reaches them, tests/test_cleanup_forged.py), and must hold on their own,
as if the harness itself had been misled into recording the entry. Kinds whose undo acts on nothing (a signal
delivered, a pod evicted) are shown to leave their decoy alone. The live clusters some
undos look up by run id are stand-ins here (``_FakeRay``): they only record
calls.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest

import faultdrill.platforms.kubernetes.platform  # noqa: F401  (registers its undo kinds)
from faultdrill import faults as _faults  # noqa: F401  (registers the fault kinds)
from faultdrill import platforms as _platforms  # noqa: F401  (registers the platforms)
from faultdrill.host import memcg, procfs
from faultdrill.host.linux import link_exists, netns_exists, ns_run
from faultdrill.host.mounts import mounts_at
from faultdrill.host.owned import net_prefix, run_tmp_dir
from faultdrill.ledger import OWNS, UNDOERS, Ledger
from faultdrill.platforms.kubernetes.manifest import LABEL_RUN, run_label
from faultdrill.platforms.ray import cluster as ray_cluster
from faultdrill.platforms.slurm.platform import drain_reason

IS_ROOT = os.geteuid() == 0
TAG = uuid.uuid4().hex[:6]
RUN_ID = f"t-claims-{TAG}"
OTHER_RUN = f"t-other-{TAG}"


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


def _sleeper(env: dict[str, str] | None = None, **kw: Any) -> subprocess.Popen[bytes]:
    """``sleep 600``, returned once its exec is complete. Popen returns when the exec has
    begun (the error pipe closes with the old image), but the kernel sets up the new
    image's arguments and environment a little later: until then /proc/<pid>/environ reads
    empty, and a decoy whose marker cannot be seen yet makes a claim hold vacuously (the
    cause of this file's intermittent ray-daemon failure)."""
    proc = subprocess.Popen(["sleep", "600"], env=env, **kw)
    for _ in range(500):
        if procfs.cmdline(proc.pid) == ["sleep", "600"]:
            break
        time.sleep(0.01)
    else:
        raise AssertionError(f"decoy pid {proc.pid} never showed its command line")
    return proc


class _FakeRay:
    """Stand-in for a live Ray cluster of ANOTHER run (records calls only)."""

    head = "n1"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def running(self, node: str, role: str) -> bool:
        return False

    def stop_node(self, node: str, role: str, grace_s: float | None = None) -> None:
        self.calls.append(f"stop_node {node}")

    def start_node(self, node: str) -> None:
        self.calls.append(f"start_node {node}")


class Decoys:
    """What must survive: made on first use, removed at the end (by name and pid)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.run = base / "run"
        self.run.mkdir()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._netns: list[str] = []
        self._cgroups: list[Path] = []
        self._memcgs: list[Path] = []
        self._mounts: list[Path] = []
        self._dirs: list[Path] = []

    # --- files --------------------------------------------------------------------------

    @cached_property
    def file(self) -> Path:
        path = self.base / "elsewhere" / "precious.txt"
        path.parent.mkdir(exist_ok=True)
        path.write_text("keep me\n")
        return path

    @cached_property
    def dir(self) -> Path:
        path = self.base / "elsewhere" / "tree"
        path.mkdir(parents=True)
        (path / "inside.txt").write_text("keep me\n")
        return path

    @cached_property
    def link(self) -> Path:
        """``RUN/ckpt``: a symbolic link to the decoy directory (a swapped-in link)."""
        link = self.run / "ckpt"
        link.symlink_to(self.dir)
        return link

    def files_intact(self) -> bool:
        return self.file.read_text() == "keep me\n"

    def dir_intact(self) -> bool:
        return (self.dir / "inside.txt").read_text() == "keep me\n"

    @cached_property
    def tmp_foreign(self) -> Path:
        """A /tmp directory named like a scratch directory, of no run of ours."""
        path = Path("/tmp") / f"fd-{uuid.uuid4().hex[:12]}"
        (path / "x").mkdir(parents=True)
        self._dirs.append(path)
        return path

    @cached_property
    def tmp_ray_foreign(self) -> Path:
        path = Path("/tmp") / f"fd-ray-{uuid.uuid4().hex[:10]}"
        (path / "x").mkdir(parents=True)
        self._dirs.append(path)
        return path

    @cached_property
    def tmp_own_link(self) -> Path:
        """This run's own scratch name, but a symbolic link to the decoy directory."""
        path = run_tmp_dir("fd-", 12, RUN_ID)
        path.symlink_to(self.dir)
        self._dirs.append(path)
        return path

    # --- processes ----------------------------------------------------------------------

    def _proc(self, env: dict[str, str] | None = None, **kw: Any) -> subprocess.Popen[bytes]:
        proc = _sleeper(env, **kw)
        self._procs.append(proc)
        return proc

    @cached_property
    def leader(self) -> subprocess.Popen[bytes]:
        """The leader of a session of its own, not this run's (its whole session is what
        a replica-copy undo would kill)."""
        return self._proc(start_new_session=True)

    @cached_property
    def foreign(self) -> subprocess.Popen[bytes]:
        return self._proc()

    @cached_property
    def stopped(self) -> subprocess.Popen[bytes]:
        proc = self._proc()
        os.kill(proc.pid, signal.SIGSTOP)
        for _ in range(200):
            if procfs.proc_state(proc.pid) == "T":
                break
            time.sleep(0.01)
        return proc

    @cached_property
    def other_runs(self) -> subprocess.Popen[bytes]:
        return self._proc({**os.environ, "FAULTDRILL_RUN_ID": OTHER_RUN})

    @cached_property
    def marked(self) -> tuple[subprocess.Popen[bytes], str]:
        marker = uuid.uuid4().hex
        return self._proc({**os.environ, "FAULTDRILL_RAY_DAEMON": marker}), marker

    def alive(self, proc: subprocess.Popen[bytes]) -> bool:
        return proc.poll() is None and procfs.alive(proc.pid)

    def still_stopped(self) -> bool:
        return procfs.proc_state(self.stopped.pid) == "T"

    # --- namespaces, links, rules (root) --------------------------------------------------

    def _ns(self, name: str, dev: str) -> str:
        _sh("ip", "netns", "add", name)
        self._netns.append(name)
        ns_run(name, ["ip", "link", "add", dev, "type", "veth", "peer", "name", f"{dev}p"])
        ns_run(name, ["ip", "link", "set", dev, "up"])
        ns_run(name, ["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", "1mbit",
                      "burst", "32kbit", "latency", "200ms"])  # fmt: skip
        ns_run(name, ["iptables", "-w", "-A", "INPUT", "-i", dev, "-j", "DROP"])
        return name

    @cached_property
    def ns(self) -> tuple[str, str]:
        """A namespace not of faultdrill's naming, with a link up, a qdisc and a rule."""
        return self._ns(f"fdtest{TAG}", "fdtd0"), "fdtd0"

    @cached_property
    def other_ns(self) -> tuple[str, str]:
        """A namespace named as faultdrill names ANOTHER run's nodes."""
        prefix = net_prefix(OTHER_RUN)
        return self._ns(f"{prefix}-n1", f"{prefix}n1"), f"{prefix}n1"

    @cached_property
    def own_ns(self) -> tuple[str, str]:
        """A namespace of this run's naming with an untagged rule in it."""
        prefix = net_prefix(RUN_ID)
        return self._ns(f"{prefix}-n1", f"{prefix}n1"), f"{prefix}n1"

    def ns_intact(self, ns: tuple[str, str]) -> bool:
        name, dev = ns
        if not (netns_exists(name) and link_exists(name, dev)):
            return False
        link = ns_run(name, ["ip", "link", "show", "dev", dev], check=False).stdout
        qdisc = ns_run(name, ["tc", "qdisc", "show", "dev", dev], check=False).stdout
        rule = ns_run(name, ["iptables", "-w", "-C", "INPUT", "-i", dev, "-j", "DROP"], check=False)
        return "UP" in link and "tbf" in qdisc and rule.returncode == 0

    # --- cgroups (root) -------------------------------------------------------------------

    def _group(self, path: Path) -> Path:
        group = procfs.Cgroup(path)
        group.create()
        self._cgroups.append(path)
        group.freeze()
        return path

    @cached_property
    def cgroup(self) -> Path:
        return self._group(procfs.FREEZER_ROOT / f"fdtest-{TAG}")

    @cached_property
    def other_cgroup(self) -> Path:
        return self._group(procfs.FREEZER_ROOT / "faultdrill" / OTHER_RUN)

    def group_intact(self, path: Path) -> bool:
        return path.is_dir() and procfs.Cgroup(path).state() == "FROZEN"

    def _memory_group(self, path: Path) -> Path:
        """A memory group holding a live decoy process under a limit."""
        memcg.MemoryGroup(path).create(256 << 20)
        self._memcgs.append(path)
        memcg.MemoryGroup(path).add(self.foreign.pid)
        return path

    @cached_property
    def memcg(self) -> Path:
        return self._memory_group(memcg.MEMCG_ROOT / f"fdtest-{TAG}")

    @cached_property
    def other_memcg(self) -> Path:
        return self._memory_group(memcg.MEMCG_ROOT / "faultdrill" / OTHER_RUN / "oom-r1")

    def memcg_intact(self, path: Path) -> bool:
        group = memcg.MemoryGroup(path)
        return group.limit_bytes() == 256 << 20 and self.foreign.pid in group.pids()

    # --- a tmpfs tagged as faultdrill tags its own (root) ---------------------------------

    @cached_property
    def mount(self) -> tuple[Path, str]:
        path = self.base / "elsewhere" / "mnt"
        path.mkdir(parents=True)
        source = f"faultdrill-{uuid.uuid4().hex}"
        _sh("mount", "-t", "tmpfs", "-o", "size=1m", source, str(path))
        self._mounts.append(path)
        (path / "theirs.bin").write_bytes(b"x")
        return path, source

    def mount_intact(self) -> bool:
        path, source = self.mount
        ours = [m for m in mounts_at(path) if m["source"] == source]
        return bool(ours) and (path / "theirs.bin").exists()

    def mount_ids(self) -> list[str]:
        return [m["id"] for m in mounts_at(self.mount[0])]

    # ---------------------------------------------------------------------------------------

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for path in self._mounts:
            while mounts_at(path):
                subprocess.run(["umount", "-l", str(path)], check=False, timeout=30)
        for path in reversed(self._cgroups):
            if path.exists():
                procfs.Cgroup(path).thaw()
                procfs.Cgroup(path).remove()
        for path in self._memcgs:
            memcg.MemoryGroup(path).release(memcg.MEMCG_ROOT)
        for name in self._netns:
            if netns_exists(name):
                subprocess.run(["ip", "netns", "del", name], check=False, timeout=30)
        for path in self._dirs:
            if path.is_symlink():
                path.unlink()
            else:
                shutil.rmtree(path, ignore_errors=True)


@dataclass(frozen=True)
class Case:
    """Hostile data for one kind, and what must hold afterwards."""

    name: str
    data: Callable[[Decoys], dict[str, Any]]
    intact: Callable[[Decoys], bool]
    root: bool = False
    refused: bool = True  # False: the kind's undo acts on nothing (it is closed, harmlessly)


def _files(name: str, data: Callable[[Decoys], dict[str, Any]]) -> Case:
    return Case(name, data, Decoys.files_intact)


def _tree(name: str, data: Callable[[Decoys], dict[str, Any]]) -> Case:
    return Case(name, data, Decoys.dir_intact)


def _netns_case(name: str, attr: str, data: Callable[[str, str], dict[str, Any]]) -> Case:
    def make(d: Decoys) -> dict[str, Any]:
        ns, dev = getattr(d, attr)
        return data(ns, dev)

    return Case(name, make, lambda d: d.ns_intact(getattr(d, attr)), root=True)


def _pid_case(name: str, attr: str, extra: dict[str, Any] | None = None) -> Case:
    def make(d: Decoys) -> dict[str, Any]:
        proc = getattr(d, attr)
        return {"pid": proc.pid, "start_time": procfs.start_time(proc.pid), **(extra or {})}

    def intact(d: Decoys) -> bool:
        ok = d.alive(getattr(d, attr))
        return ok and (attr != "stopped" or d.still_stopped())

    return Case(name, make, intact)


def _other_run(name: str, fake: Callable[[], Any], live: dict[str, Any]) -> Case:
    """An undo that finds a live cluster by run id, given another run's id."""
    stand_in = fake()

    def make(d: Decoys) -> dict[str, Any]:
        live[OTHER_RUN] = stand_in
        return {"run_id": OTHER_RUN, "node": "n1", "pid": 2}

    def intact(d: Decoys) -> bool:
        live.pop(OTHER_RUN, None)
        return not stand_in.calls

    return Case(name, make, intact)


def _rule(ns: str, dev: str, tag: str | None) -> dict[str, Any]:
    rule = ["-i", dev, "-j", "DROP"]
    return {"ns": ns, "chain": "INPUT", "rule": rule, "tag": tag, "node": "n1"}


def _objects(d: Decoys, **over: Any) -> dict[str, Any]:
    """A k8s-objects entry that selects this run's label, with ``over`` hostile."""
    base = {
        "selector": f"{LABEL_RUN}={run_label(RUN_ID)}",
        "namespace": "default",
        "kinds": [["v1", "ConfigMap"]],
        "kubeconfig": str(d.file),
    }
    return {**base, **over}


def _cordon(d: Decoys, **over: Any) -> dict[str, Any]:
    """A k8s-cordon entry of this run's label, with ``over`` hostile."""
    base = {"node": "n1", "label": run_label(RUN_ID), "kubeconfig": str(d.file)}
    return {**base, **over}


def _drain(**over: Any) -> dict[str, Any]:
    """A slurm-drain entry of a real cluster (no namespace), with ``over`` hostile."""
    base = {"node": "victim-node", "reason": drain_reason(RUN_ID), "embedded": False}
    return {**base, **over}


def _inert(name: str) -> Case:
    def make(d: Decoys) -> dict[str, Any]:
        pid = d.foreign.pid
        return {"pid": pid, "start_time": procfs.start_time(pid), "signal": "SIGKILL",
                "path": str(d.file), "node": "n1", "platform": "x", "token": "y"}  # fmt: skip

    return Case(name, make, lambda d: d.alive(d.foreign) and d.files_intact(), refused=False)


def _fuse(d: Decoys, **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "path": str(d.run / "ckpt-x"),
        "source": f"faultdrill-{uuid.uuid4().hex}",
        "fstype": "fuse.faultdrill",
        "status": str(d.run / ".ckpt.fuse.json"),
        "log": str(d.run / ".ckpt.fuse.log"),
        "pid": None,
        "start_time": None,
        "conn": None,
        "mount_ids": [],
    }
    return {**base, **over}


def _status_naming(d: Decoys, pid: int) -> dict[str, Any]:
    """A fuse-mirror entry whose (hand-written) status file names a process not ours."""
    data = _fuse(d)
    Path(data["status"]).write_text(
        json.dumps({"pid": pid, "start_time": procfs.start_time(pid), "fsname": data["source"]})
    )
    return data


TABLE: dict[str, list[Case]] = {
    # --- local: namespaces, links, rules -----------------------------------------------------
    "netns": [
        _netns_case("foreign name", "ns", lambda ns, dev: {"name": ns}),
        _netns_case("another run's", "other_ns", lambda ns, dev: {"name": ns}),
    ],
    "netns-link": [
        _netns_case("foreign namespace", "ns", lambda ns, dev: {"ns": ns, "name": dev}),
        _netns_case("another run's", "other_ns", lambda ns, dev: {"ns": ns, "name": dev}),
    ],
    "iptables-rule": [
        _netns_case("foreign namespace", "ns", lambda ns, dev: _rule(ns, dev, "fd-0123456789")),
        _netns_case("rule without our tag", "own_ns", lambda ns, dev: _rule(ns, dev, None)),
        _netns_case("tag not in the rule", "own_ns", lambda ns, d: _rule(ns, d, "fd-0123456789")),
    ],
    "tc-qdisc": [_netns_case("foreign namespace", "ns", lambda ns, dev: {"ns": ns, "dev": dev})],
    "link-down": [
        _netns_case("foreign namespace", "ns", lambda ns, dev: {"ns": ns, "dev": dev}),
        _netns_case("another run's", "other_ns", lambda ns, dev: {"ns": ns, "dev": dev}),
    ],
    "k8s-cordon": [
        _files("another run's label", lambda d: _cordon(d, label="fd-0123456789abcdef")),
        _files("node not a name", lambda d: _cordon(d, node="n1 --all")),
        _files("kubeconfig a directory", lambda d: _cordon(d, kubeconfig=str(d.dir))),
        _netns_case(
            "foreign namespace",
            "ns",
            lambda ns, dev: {"netns": ns, "kubeconfig": "/nonexistent", "node": "n1"},
        ),
    ],
    "k8s-objects": [
        _files("namespace not a name", lambda d: _objects(d, namespace="../../x")),
        _files("kinds not API names", lambda d: _objects(d, kinds=[["v1/../../x", "Pod"]])),
        _files("kinds not pairs", lambda d: _objects(d, kinds="v1")),
        _files("kubeconfig a directory", lambda d: _objects(d, kubeconfig=str(d.dir))),
        _files("kubeconfig relative", lambda d: _objects(d, kubeconfig="x/config")),
        _files(
            "another run's selector",
            lambda d: {
                "selector": "faultdrill.io/run=fd-0123456789abcdef",
                "namespace": "default",
                "kinds": [["v1", "ConfigMap"]],
                "kubeconfig": str(d.file),
            },
        ),
    ],
    "k8s-link-down": [
        _netns_case("foreign namespace", "ns", lambda ns, dev: {"ns": ns, "dev": dev}),
    ],
    "slurm-drain": [
        _files("an administrator's drain", lambda d: _drain(reason="admin-maintenance")),
        _files("another run's drain", lambda d: _drain(reason=drain_reason(OTHER_RUN))),
        _files("node not one name", lambda d: _drain(node="n[1-100]")),
        _netns_case(
            "foreign namespace", "ns", lambda ns, dev: {"ns": ns, "conf": "/x", "node": "n1"}
        ),
        _files("conf outside", lambda d: {"ns": "x", "conf": str(d.file), "node": "n1"}),
    ],
    # --- local: cgroups and processes ------------------------------------------------------------
    "cgroup": [
        Case(
            "foreign",
            lambda d: {"path": str(d.cgroup)},
            lambda d: d.group_intact(d.cgroup),
            root=True,
        ),
        Case(
            "climbs out with ..",
            lambda d: {"path": f"{procfs.FREEZER_ROOT}/faultdrill/{RUN_ID}/../{OTHER_RUN}"},
            lambda d: d.group_intact(d.other_cgroup),
            root=True,
        ),
    ],
    "cpu-throttle": [
        Case(
            "a freezer group, not this run's cpu group",
            lambda d: {"path": str(d.cgroup), "home": "/sys/fs/cgroup/cpu"},
            lambda d: d.group_intact(d.cgroup),
            root=True,
        ),
        Case(
            "climbs out with ..",
            lambda d: {
                "path": f"/sys/fs/cgroup/cpu/faultdrill/{RUN_ID}/../{OTHER_RUN}",
                "home": "/sys/fs/cgroup/cpu",
            },
            lambda d: d.group_intact(d.other_cgroup),
            root=True,
        ),
        _files(
            "home that climbs out of the cpu hierarchy",
            lambda d: {
                "path": f"/sys/fs/cgroup/cpu/faultdrill/{RUN_ID}/x",
                "home": "/../../../.." + str(d.file),
            },
        ),
    ],
    "memory-cap": [
        Case(
            "foreign group",
            lambda d: {"path": str(d.memcg), "origin": str(memcg.MEMCG_ROOT)},
            lambda d: d.memcg_intact(d.memcg),
            root=True,
        ),
        Case(
            "another run's group",
            lambda d: {"path": str(d.other_memcg), "origin": str(memcg.MEMCG_ROOT)},
            lambda d: d.memcg_intact(d.other_memcg),
            root=True,
        ),
        Case(
            "members sent into another run's group",
            lambda d: {
                "path": str(memcg.oom_group_path(RUN_ID, 1)),
                "origin": str(d.other_memcg),
            },
            lambda d: d.memcg_intact(d.other_memcg),
            root=True,
        ),
    ],
    "memory-request": [
        _files("a file outside the run", lambda d: {"path": str(d.file)}),
    ],
    "freeze": [
        Case(
            "foreign",
            lambda d: {"path": str(d.cgroup)},
            lambda d: d.group_intact(d.cgroup),
            root=True,
        ),
        Case(
            "another run's",
            lambda d: {"path": str(d.other_cgroup)},
            lambda d: d.group_intact(d.other_cgroup),
            root=True,
        ),
    ],
    "run-processes": [
        Case("another run's id", lambda d: {"run_id": OTHER_RUN}, lambda d: d.alive(d.other_runs)),
    ],
    "sigstop": [
        _pid_case("foreign stopped process", "stopped"),
        _pid_case("without start time", "stopped"),
    ],
    "k8s-sigstop": [_pid_case("foreign stopped process", "stopped")],
    "k8s-process": [
        _pid_case("foreign process", "foreign", {"grace_s": 1}),
        _pid_case("another run's process", "other_runs"),
    ],
    "slurm-daemon": [
        _pid_case("foreign process", "foreign"),
        Case(
            "foreign cgroup to thaw",
            lambda d: {"pid": None, "cgroup": str(d.cgroup)},
            lambda d: d.group_intact(d.cgroup),
            root=True,
        ),
    ],
    "ray-daemon": [
        _pid_case("foreign process", "foreign"),
        Case(
            "marker another process carries",
            lambda d: {"pid": None, "marker": d.marked[1]},
            lambda d: d.alive(d.marked[0]),
        ),
    ],
    "fuse-outage": [
        Case(
            "foreign stopped process",
            lambda d: {
                "pid": d.stopped.pid,
                "start_time": procfs.start_time(d.stopped.pid),
                "server": "hang",
                "status": str(d.run / "s.json"),
            },
            Decoys.still_stopped,
        ),
        _files("status outside", lambda d: {"pid": 2**22 + 7, "status": str(d.file)}),
    ],
    "fuse-slow": [
        Case(
            "recorded pid not the daemon",
            lambda d: {
                "pid": d.foreign.pid,
                "start_time": procfs.start_time(d.foreign.pid),
                "status": str(d.run / "s.json"),
            },
            lambda d: d.alive(d.foreign),
        ),
        _files(
            "status outside", lambda d: {"pid": 2**22 + 7, "start_time": 0, "status": str(d.file)}
        ),
    ],
    "fuse-mirror": [
        Case(
            "recorded pid not the daemon",
            lambda d: _fuse(d, pid=d.foreign.pid, start_time=procfs.start_time(d.foreign.pid)),
            lambda d: d.alive(d.foreign),
        ),
        Case(
            "status file names a process not ours",
            lambda d: _status_naming(d, d.foreign.pid),
            lambda d: d.alive(d.foreign),
        ),
        Case(
            "a tagged mount outside",
            lambda d: _fuse(d, path=str(d.mount[0]), source=d.mount[1], fstype="tmpfs"),
            Decoys.mount_intact,
            root=True,
        ),
        _files("log outside", lambda d: _fuse(d, log=str(d.file))),
    ],
    # --- local: mounts and files ------------------------------------------------------------------
    "ro-bind-mount": [
        Case(
            "a mount outside",
            lambda d: {"path": str(d.mount[0]), "mount_ids": d.mount_ids()},
            Decoys.mount_intact,
            root=True,
        ),
    ],
    "tmpfs-mount": [
        Case(
            "a tagged tmpfs outside",
            lambda d: {
                "path": str(d.mount[0]),
                "source": d.mount[1],
                "size_mb": 1,
                "keep_copy": str(d.run / "k"),
                "mount_ids": [],
            },
            Decoys.mount_intact,
            root=True,
        ),
        _tree(
            "keep_copy outside",
            lambda d: {
                "path": str(d.run / "x"),
                "source": f"faultdrill-{uuid.uuid4().hex}",
                "keep_copy": str(d.dir),
                "mount_ids": [],
            },
        ),
    ],
    "filler-file": [
        _files("outside the run", lambda d: {"path": str(d.file)}),
        _tree("through a swapped-in link", lambda d: {"path": str(d.link / "inside.txt")}),
        _files("climbs out with ..", lambda d: {"path": f"{d.run}/../elsewhere/precious.txt"}),
        _files("relative", lambda d: {"path": "../elsewhere/precious.txt"}),
    ],
    "ckpt-damage": [_tree("outside the run", lambda d: {"ckpt_dir": str(d.dir), "ckpt_id": "s"})],
    "ckpt-pointer": [
        _files(
            "outside the run",
            lambda d: {"path": str(d.file), "before": "evil\n", "after": "keep me\n"},
        )
    ],
    "ckpt-hide": [
        _tree("hidden outside", lambda d: {"ckpt_dir": str(d.run / "ckpt"), "hidden": str(d.dir)}),
        _tree("restored outside", lambda d: {"ckpt_dir": str(d.dir), "hidden": str(d.run)}),
    ],
    "replica-copy": [
        _pid_case("another session's leader", "leader", {"run_id": RUN_ID}),
        _pid_case("foreign process", "foreign", {"run_id": RUN_ID}),
        _pid_case("another run's process", "other_runs", {"run_id": OTHER_RUN}),
    ],
    "k8s-files": [
        _tree("outside the run", lambda d: {"paths": [str(d.run / "pki"), str(d.dir)]}),
        _tree("through a swapped-in link", lambda d: {"paths": [str(d.link)]}),
        _tree("not a list", lambda d: {"paths": str(d.dir)}),
    ],
    "k8s-kubelet-pause": [
        _files("outside the run", lambda d: {"file": str(d.file)}),
        _tree("through a swapped-in link", lambda d: {"file": str(d.link / "inside.txt")}),
    ],
    "scratch-dir": [
        Case(
            "another directory of our pattern",
            lambda d: {"path": str(d.tmp_foreign)},
            lambda d: (d.tmp_foreign / "x").is_dir(),
        ),
        Case("our name, but a link", lambda d: {"path": str(d.tmp_own_link)}, Decoys.dir_intact),
        _tree("a directory outside", lambda d: {"path": str(d.dir)}),
    ],
    "ray-tempdir": [
        Case(
            "another run's",
            lambda d: {"path": str(d.tmp_ray_foreign), "remove": True},
            lambda d: (d.tmp_ray_foreign / "x").is_dir(),
        ),
        _tree("a directory outside", lambda d: {"path": str(d.dir), "remove": True}),
    ],
    # --- undos that find a live cluster by run id -------------------------------------------------
    "ray-head-stopped": [_other_run("another run's id", _FakeRay, ray_cluster.LIVE)],
    # --- undos that act on nothing -------------------------------------------------------------------
    "node-kill": [_inert("a foreign pid and path")],
    "signal": [_inert("a foreign pid")],
    "k8s-done": [_inert("a foreign pid")],
    "k8s-request": [_inert("a foreign pid")],
    "k8s-kubelet-down": [_inert("a foreign pid")],
    "k8s-apiserver-down": [_inert("a foreign pid")],
    "k8s-daemon-stop": [_inert("a foreign pid")],
    "ray-signal": [_inert("a foreign pid")],
    "slurmctld-stop": [_inert("a foreign pid")],
    "fake-change": [_inert("a platform of no live fake")],
}

CASES = [(kind, case) for kind, cases in sorted(TABLE.items()) for case in cases]


@pytest.fixture(autouse=True)
def _state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A state directory (the ledger signing key) of this test's own."""
    monkeypatch.setenv("FAULTDRILL_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture(scope="module")
def decoys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Decoys]:
    d = Decoys(tmp_path_factory.mktemp("claims"))
    try:
        yield d
    finally:
        d.close()


def test_every_kind_has_hostile_cases() -> None:
    assert set(TABLE) == set(UNDOERS), "a registered undo kind has no hostile case here"
    assert set(OWNS) == set(UNDOERS), "an undo kind states no rule of what it may name"


@pytest.mark.parametrize(("kind", "case"), CASES, ids=[f"{k}: {c.name}" for k, c in CASES])
def test_hostile_entry_is_refused_and_nothing_touched(
    kind: str, case: Case, decoys: Decoys
) -> None:
    if case.root and not IS_ROOT:
        pytest.skip("this decoy needs root (namespaces, cgroups, mounts)")
    data = case.data(decoys)
    assert case.intact(decoys), "the decoy was not set up"
    ledger_file = decoys.run / f"ledger-{uuid.uuid4().hex[:6]}.jsonl"
    writer = Ledger(ledger_file, run_id=RUN_ID)  # the header: this ledger is run RUN_ID
    eid = writer.record(kind, data, case.name)  # signed: the claims alone must refuse it
    writer.mark_applied(eid)
    ledger = Ledger(ledger_file, run_id=RUN_ID)
    assert ledger.trusted and ledger.entries[eid].data == data
    errors = ledger.revert_all()
    assert case.intact(decoys), f"{kind} ({case.name}) acted on what is not this run's"
    if case.refused:
        assert len(ledger.refused) == 1, (ledger.refused, errors, ledger.notes)
        assert not ledger.pending()
        reread = Ledger(ledger_file, run_id=RUN_ID)
        assert reread.entries[eid].refused, "the refusal was not recorded in the ledger"
    else:
        assert ledger.refused == [] and errors == []
