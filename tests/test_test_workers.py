"""The two test workers' placement (tests/conftest.py) and the namespace leftover check
(tests/test_netns_kit.py) that the parallel run had to make exact: each tested on a case it
must keep apart and one it must join."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import _queue_rank, drill_scopes
from tests.test_netns_kit import _ns_held, needs_netns


def _module(tests: Path, name: str, text: str) -> None:
    (tests / name).write_text(text)


def test_modules_sharing_a_run_or_a_cluster_share_a_worker_and_the_rest_do_not(
    tmp_path: Path,
) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    _module(tests, "test_bundle.py", "def test_a(recorded_demo: Any) -> None: ...\n")
    _module(tests, "test_replay.py", "def test_b(x: int, recorded_demo: Any) -> None: ...\n")
    _module(tests, "test_slurm_drills.py", "def t(slurm_hang_oom: A) -> None: ...\n")
    # reads that Slurm run under another name, and a run of the local platform: one group
    _module(tests, "test_mixed.py", "def t(slurm_hang_oom: A, hang_oom_drill: B) -> None: ...\n")
    _module(tests, "test_oom_drill.py", "def t(hang_oom_drill: B) -> None: ...\n")
    _module(tests, "test_ray_drills.py", "pytestmark = pytest.mark.root\n")
    _module(tests, "test_fuse_drill.py", "pytestmark = [pytest.mark.drill]\n")
    _module(tests, "test_units.py", "def test_c() -> None: assert 'recorded_demo'\n")
    _module(tests, "test_array.py", "def test_d() -> None: ...  # no drill, 'ray' in no name\n")
    scopes = drill_scopes(tests)
    assert "tests/test_units.py" not in scopes and "tests/test_array.py" not in scopes
    assert scopes["tests/test_bundle.py"] == scopes["tests/test_replay.py"]
    assert scopes["tests/test_bundle.py"] == "drills:fixture:recorded_demo"
    slurm = {scopes[f"tests/{m}"] for m in ("test_slurm_drills.py", "test_mixed.py")}
    assert slurm == {"drills:platform:slurm"}
    assert scopes["tests/test_oom_drill.py"] == "drills:platform:slurm"  # through test_mixed
    assert scopes["tests/test_ray_drills.py"] == "drills:platform:ray"
    assert scopes["tests/test_fuse_drill.py"] == "drills:tests/test_fuse_drill.py"
    assert len(set(scopes.values())) == 4


def test_the_queue_puts_clusters_then_shared_runs_then_drills_then_the_rest() -> None:
    scopes = [
        ("tests/test_a.py::test_x", 1),
        ("drills:tests/test_fuse_drill.py", 3),
        ("drills:tests/test_job_shapes.py", 9),
        ("drills:fixture:recorded_demo", 40),
        ("drills:platform:ray", 5),
    ]
    ordered = [s for s, n in sorted(scopes, key=lambda sn: _queue_rank(*sn))]
    assert ordered == [
        "drills:platform:ray",
        "drills:fixture:recorded_demo",
        "drills:tests/test_job_shapes.py",
        "drills:tests/test_fuse_drill.py",
        "tests/test_a.py::test_x",
    ]


@pytest.mark.root
@needs_netns
def test_a_namespace_held_without_a_name_is_a_leftover_a_named_one_is_not() -> None:
    """Ours is deleted by name: a process still inside keeps it alive without one (a
    leftover); a namespace with a name now is another one that got the number since."""
    proc = subprocess.Popen(["unshare", "--net", "sleep", "60"])
    name = f"fdt-{uuid.uuid4().hex[:8]}"
    try:
        deadline = time.monotonic() + 10
        ours = os.stat("/proc/self/ns/net").st_ino
        inode = ours
        while inode == ours and time.monotonic() < deadline:
            time.sleep(0.05)
            inode = os.stat(f"/proc/{proc.pid}/ns/net").st_ino
        assert inode != ours, "unshare did not enter a namespace of its own"
        assert proc.pid in _ns_held(inode)
        subprocess.run(["ip", "netns", "add", name], check=True)
        named = os.stat(f"/run/netns/{name}").st_ino
        assert _ns_held(named) == []
    finally:
        proc.kill()
        proc.wait()
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
