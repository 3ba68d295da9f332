"""``faultdrill cleanup`` undoes only what this tool could have made: a ledger is untrusted
input (a run directory can be copied, edited, received in a bundle). A hand-written line
that names a file outside the run, a ledger file that is a symbolic link, or a run id that
climbs out of the state directory is refused and reported, and nothing is touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.drillkit import cli_env

root = pytest.mark.skipif(os.geteuid() != 0, reason="the attack matters as root")


def _line(kind: str, data: dict[str, Any], eid: str | None = None) -> str:
    eid = eid or uuid.uuid4().hex[:12]
    rec = {"op": "record", "id": eid, "kind": kind, "data": data, "label": "", "ts": 1.0}
    return json.dumps(rec) + "\n" + json.dumps({"op": "applied", "id": eid, "ts": 1.0}) + "\n"


def _cleanup(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "faultdrill.cli", "cleanup", *args],
        env=cli_env(state),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture()
def decoy(tmp_path: Path) -> Path:
    """A file outside every run directory, that no cleanup may touch."""
    path = tmp_path / "elsewhere" / "precious.txt"
    path.parent.mkdir()
    path.write_text("keep me\n")
    return path


@root
def test_a_hand_written_line_does_not_delete_a_file_outside_the_run(
    tmp_path: Path, decoy: Path
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "ledger.jsonl").write_text(_line("filler-file", {"path": str(decoy)}))
    done = _cleanup(tmp_path / "state", str(run / "ledger.jsonl"))
    assert decoy.read_text() == "keep me\n", "cleanup deleted a file outside the run"
    assert done.returncode == 1, done.stdout + done.stderr
    assert "refused" in done.stderr and str(decoy) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@root
def test_a_run_directory_whose_ledger_is_a_symlink_is_refused(tmp_path: Path, decoy: Path) -> None:
    """The ledger itself is appended to by cleanup: a ledger.jsonl pointing at another
    file must neither be read as a ledger nor written."""
    run = tmp_path / "run"
    run.mkdir()
    target = tmp_path / "elsewhere" / "ledger-like.jsonl"
    target.write_text(_line("filler-file", {"path": str(run / "x")}))
    before = target.read_text()
    (run / "ledger.jsonl").symlink_to(target)
    done = _cleanup(tmp_path / "state", str(run / "ledger.jsonl"))
    assert target.read_text() == before, "cleanup wrote through the symlink"
    assert done.returncode == 1 and "symbolic link" in done.stderr, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


@root
def test_a_run_id_that_climbs_out_of_the_state_directory_is_refused(tmp_path: Path) -> None:
    """The run id names the index entry that a finished cleanup removes: ``../..`` in it
    must not remove a file elsewhere."""
    victim = tmp_path / "victim.ledger"
    victim.write_text("not an index entry\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "ledger.jsonl").write_text(_line("run-processes", {"run_id": "../../victim"}))
    (tmp_path / "state" / "active").mkdir(parents=True)  # as after any drill
    done = _cleanup(tmp_path / "state", str(run / "ledger.jsonl"))
    assert victim.exists(), "cleanup removed a file outside the state directory"
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_a_run_directory_finds_only_ledgers_inside_it(tmp_path: Path, decoy: Path) -> None:
    """``cleanup RUN_DIR`` looks for ledgers below RUN_DIR only, never through a link."""
    other = tmp_path / "other-run"
    other.mkdir()
    marker = other / "marker"
    marker.write_text("another run's\n")
    (other / "ledger.jsonl").write_text(_line("filler-file", {"path": str(marker)}))
    run = tmp_path / "run"
    (run / "scenarios").mkdir(parents=True)
    (run / "scenarios" / "x").symlink_to(other)
    done = _cleanup(tmp_path / "state", str(run))
    assert marker.exists(), done.stdout + done.stderr
    assert "Traceback" not in done.stderr
