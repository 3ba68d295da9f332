"""Ledgers written before the platform-actions seam are still cleaned up: every ledger kind
the previous version recorded is still registered, and ``faultdrill cleanup`` (a fresh
process, as after a crash) undoes entries written in that version's format, for real: a
stopped process resumed, files and a scratch directory removed, the run's processes
killed, and (as root) a frozen cgroup thawed and removed, a tmpfs and a read-only bind
unmounted, an iptables rule, a qdisc, a link left down and a namespace taken back."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from faultdrill import faults as _faults  # noqa: F401  (registers the fault kinds)
from faultdrill import platforms as _platforms  # noqa: F401  (registers the platforms)
from faultdrill.host import procfs
from faultdrill.host.linux import fresh_rule_id, link_exists, netns_exists, ns_run
from faultdrill.host.mounts import mounts_at
from faultdrill.host.owned import net_prefix
from faultdrill.ledger import UNDOERS, Ledger
from faultdrill.platforms.local.platform import scratch_root
from tests.drillkit import cli_env

#: Every kind the version before the seam wrote (faults, platforms, mounts).
PREVIOUS_KINDS = {
    "signal",
    "iptables-rule",
    "tc-qdisc",
    "link-down",
    "freeze",
    "node-kill",
    "sigstop",
    "ckpt-damage",
    "ro-bind-mount",
    "tmpfs-mount",
    "filler-file",
    "fuse-mirror",
    "fuse-outage",
    "netns",
    "netns-link",
    "cgroup",
    "scratch-dir",
    "run-processes",
}


def test_every_previous_kind_is_still_registered() -> None:
    assert set(UNDOERS) >= PREVIOUS_KINDS


class OldLedger:
    """A ledger file written line by line as the previous version wrote it (its records'
    kinds and data), signed as every ledger is now (an unsigned one is refused whole:
    tests/test_cleanup_forged.py)."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.ledger = Ledger(path, run_id=run_id)

    def applied(self, kind: str, data: dict[str, Any], label: str = "") -> None:
        eid = uuid.uuid4().hex[:12]
        rec = {"op": "record", "id": eid, "kind": kind, "data": data, "label": label, "ts": 1.0}
        self.ledger._append(rec)
        self.ledger._append({"op": "applied", "id": eid, "ts": 1.0})

    def cleanup(self, state: Path) -> dict[str, Any]:
        """``faultdrill cleanup LEDGER`` in a fresh process; the ledger read back."""
        done = subprocess.run(
            [sys.executable, "-m", "faultdrill.cli", "cleanup", str(self.path)],
            env=cli_env(state),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        ops = [json.loads(line) for line in self.path.read_text().splitlines()]
        return {
            "reverted": sum(1 for r in ops if r["op"] == "reverted"),
            "failed": [r for r in ops if r["op"] == "revert_failed"],
        }


def _stopped_sleeper(env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["sleep", "60"], env=env)
    for _ in range(100):
        if procfs.start_time(proc.pid) is not None:
            break
        time.sleep(0.01)
    return proc


def _wait_state(pid: int, states: tuple[str, ...]) -> str | None:
    for _ in range(200):
        state = procfs.proc_state(pid)
        if state in states:
            return state
        time.sleep(0.01)
    return procfs.proc_state(pid)


def _resume_recorder(flag: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A process of the run that writes ``flag`` when it is resumed (SIGCONT)."""
    code = (
        "import pathlib, signal, time\n"
        f"signal.signal(signal.SIGCONT, lambda *a: pathlib.Path({str(flag)!r}).touch())\n"
        f"pathlib.Path({str(flag)!r} + '.ready').touch()\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    for _ in range(500):
        if Path(f"{flag}.ready").exists():
            break
        time.sleep(0.02)
    return proc


@pytest.fixture(autouse=True)
def _state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The state directory (the signing key) that ``cleanup`` gets too (``cli_env``)."""
    monkeypatch.setenv("FAULTDRILL_STATE_DIR", str(tmp_path / "state"))


def test_an_old_ledger_is_cleaned_up_by_kind(tmp_path: Path) -> None:
    run_id = f"t-old-{uuid.uuid4().hex[:8]}"
    ours = {**os.environ, "FAULTDRILL_RUN_ID": run_id}  # what the run's processes carry
    resumed = tmp_path / "resumed"
    paused = _resume_recorder(resumed, ours)
    os.kill(paused.pid, signal.SIGSTOP)
    assert _wait_state(paused.pid, ("T",)) == "T"
    left = _stopped_sleeper(ours)
    filler = tmp_path / ".faultdrill-fill"
    filler.write_bytes(b"\0" * 1024)
    scratch = scratch_root(run_id)  # as the previous version named it
    (scratch / "n1").mkdir(parents=True)
    never = tmp_path / "never"
    old = OldLedger(tmp_path / "ledger.jsonl", run_id)
    old.applied("run-processes", {"run_id": run_id}, run_id)
    old.applied("scratch-dir", {"path": str(scratch)}, f"scratch dir {scratch}")
    old.applied("signal", {"pid": left.pid, "start_time": 1, "signal": "SIGKILL"}, "SIGKILL")
    old.applied("sigstop", {"pid": paused.pid, "start_time": procfs.start_time(paused.pid)})
    old.applied("node-kill", {"path": str(never), "pids": [1], "node": "n2"})
    old.applied("ckpt-damage", {"ckpt_dir": str(never), "ckpt_id": "s", "damage": "truncate"})
    old.applied("filler-file", {"path": str(filler)})
    old.applied("fuse-outage", {"pid": 2**22 + 9, "start_time": 1, "server": "hang"})
    old.applied(
        "fuse-mirror",
        {
            "path": str(never),
            "source": f"faultdrill-{uuid.uuid4().hex}",
            "fstype": "fuse.faultdrill",
            "status": str(tmp_path / "none.json"),
            "log": str(tmp_path / "none.log"),
            "pid": None,
            "start_time": None,
            "conn": None,
            "mount_ids": [],
        },
    )
    try:
        result = old.cleanup(tmp_path / "state")
        assert result == {"reverted": 9, "failed": []}
        assert resumed.exists(), "the pause was not undone"
        assert paused.wait(10) == -signal.SIGKILL, "the run's paused process was not killed"
        assert left.wait(10) == -signal.SIGKILL, "the run's process was not killed"
        assert not filler.exists() and not scratch.exists()
    finally:
        for proc in (paused, left):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.root
@pytest.mark.skipif(
    os.geteuid() != 0 or not procfs.Cgroup.available() or shutil.which("iptables") is None,
    reason="needs root, the cgroup freezer, iproute2 and iptables",
)
def test_an_old_ledger_of_mounts_groups_and_links_is_cleaned_up(tmp_path: Path) -> None:
    run_id = f"t-old-{uuid.uuid4().hex[:8]}"
    prefix = net_prefix(run_id)  # names as the previous version gave them
    ns, dev, tag = f"{prefix}-n2", f"{prefix}n2", fresh_rule_id()
    group = procfs.FREEZER_ROOT / "faultdrill" / run_id
    ro, fs = tmp_path / "ro", tmp_path / "fs"
    ro.mkdir()
    fs.mkdir()
    source = f"faultdrill-{uuid.uuid4().hex}"
    old = OldLedger(tmp_path / "ledger.jsonl", run_id)
    old.applied("run-processes", {"run_id": run_id}, run_id)
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True, timeout=30)
        old.applied("netns", {"name": ns, "inode": os.stat(f"/run/netns/{ns}").st_ino})
        ns_run(ns, ["ip", "link", "add", dev, "type", "veth", "peer", "name", f"{dev}p"])
        old.applied("netns-link", {"ns": ns, "name": dev})
        rule = ["-i", dev, "-m", "comment", "--comment", tag, "-j", "DROP"]
        ns_run(ns, ["iptables", "-w", "-I", "INPUT", *rule])
        old.applied(
            "iptables-rule",
            {"ns": ns, "chain": "INPUT", "rule": rule, "tag": tag, "node": "n2"},
        )
        ns_run(ns, ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", "1mbit",
                    "burst", "32kbit", "latency", "200ms"])  # fmt: skip
        old.applied("tc-qdisc", {"ns": ns, "dev": dev, "node": "n2"})
        old.applied("link-down", {"ns": ns, "dev": dev, "node": "n2"})  # left down
        procfs.Cgroup(group).create()
        old.applied("cgroup", {"path": str(group)})
        procfs.Cgroup(group).freeze()
        old.applied("freeze", {"path": str(group), "node": "n2"})
        before = [m["id"] for m in mounts_at(ro)]
        identity = [os.stat(ro).st_dev, os.stat(ro).st_ino]
        subprocess.run(["mount", "--bind", str(ro), str(ro)], check=True, timeout=30)
        subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], check=True, timeout=30)
        ids = [m["id"] for m in mounts_at(ro) if m["id"] not in before]
        old.applied(
            "ro-bind-mount",
            {"path": str(ro), "before_ids": before, "identity": identity, "mount_ids": ids},
        )
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", source, str(fs)], check=True, timeout=30
        )
        (fs / "step-000010").write_bytes(b"saved")
        old.applied(
            "tmpfs-mount",
            {
                "path": str(fs),
                "size_mb": 2,
                "keep_copy": str(tmp_path / ".fs.from-tmpfs"),
                "source": source,
                "mount_ids": [mounts_at(fs)[-1]["id"]],
            },
        )
        result = old.cleanup(tmp_path / "state")
        assert result == {"reverted": 10, "failed": []}
        assert not netns_exists(ns) and not link_exists(ns, dev)
        assert not group.exists()
        assert mounts_at(ro) == [] and mounts_at(fs) == []
        assert (fs / "step-000010").read_bytes() == b"saved"  # copied back from the tmpfs
    finally:
        for path in (ro, fs):
            while mounts_at(path):
                subprocess.run(["umount", "-l", str(path)], check=False, timeout=30)
        if group.exists():
            procfs.Cgroup(group).remove()
        if netns_exists(ns):
            subprocess.run(["ip", "netns", "del", ns], check=False, timeout=30)
