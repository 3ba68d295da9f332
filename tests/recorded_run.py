"""One small recorded drill shared by the report, bundle, replay and diff tests.

``faultdrill demo --only ...`` run once per session through the real command line (a
subprocess, real torchrun): the baseline, the healthy worker-kill scenario and the six
known-bad workloads of the core loop under the same fault (see ``ONLY``).
The tests re-render, bundle, replay and diff this directory; none of them re-runs it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from faultdrill.host import procfs
from tests.drillkit import task_pids

#: The core loop's drill: the worker kill and the six workload bugs it must catch.
ONLY = (
    "kill-worker,ctl-resume-ignored,ctl-data-replayed,ctl-skip-ahead,ctl-optimizer-lost,"
    "ctl-load-unverified,ctl-stale-replica"
)


@dataclass(frozen=True)
class RecordedDemo:
    base: Path  # a private folder for tests to write into
    run_dir: Path
    rc: int
    stdout: str
    stderr: str
    junit: Path
    env: dict[str, str]

    def printed(self, label: str) -> Path:
        """The path the demo printed after ``label:``."""
        m = re.search(rf"^{re.escape(label)}: (\S+)", self.stdout, re.M)
        assert m, f"the demo did not print {label!r}:\n{self.stdout}"
        return Path(m.group(1))


def demo_pids(run_dir: Path) -> list[int]:
    """Live processes of the demo recorded into ``run_dir`` (other sessions on the machine
    may be drilling the same task id, ``demo-lm``, at the same time)."""
    return [
        pid
        for pid in task_pids("demo-lm")
        if procfs.environ(pid).get("FAULTDRILL_EVENTS_DIR", "").startswith(f"{run_dir}/")
    ]


@pytest.fixture(scope="session")
def recorded_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RecordedDemo]:
    base = tmp_path_factory.mktemp("recorded")
    env = dict(os.environ)
    env["FAULTDRILL_STATE_DIR"] = str(base / "state")
    run_dir = base / "demo"
    junit = base / "demo-junit.xml"
    try:
        argv = ["demo", "--out", str(run_dir), "--quiet", "--only", ONLY, "--junit", str(junit)]
        proc = subprocess.run(
            [sys.executable, "-m", "faultdrill.cli", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=560,  # under pytest-timeout's 600 s; a shared 2-core machine is slow
        )
        yield RecordedDemo(base, run_dir, proc.returncode, proc.stdout, proc.stderr, junit, env)
    finally:
        for pid in demo_pids(run_dir):  # last-resort cleanup, of this demo only
            procfs.kill_checked(pid, None, 9)
