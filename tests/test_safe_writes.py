"""``check`` and ``replay`` (and the JUnit / JSON outputs) never write through a symbolic
link, nor outside the run directory: a link planted at each name they write, or on a
directory on the way, is refused and its target left as it was (``bundle``'s own output:
tests/test_bundle_untrusted.py).

The run is the recorded 0.1.0 fixture (``tests/fixtures/run-0.1.0-kill-worker.tar.xz``),
unpacked per test: re-judging, bundling and diffing it takes seconds, no drill runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from faultdrill.archive.diff import Band
from faultdrill.archive.replay import ReplayResult, Trust, _open_source, finish_replay
from faultdrill.errors import DrillError, RunDirError
from faultdrill.report.model import read_report
from faultdrill.safepath import UnsafePathError, escape, read_bytes, write_file

FIXTURE = Path(__file__).parent / "fixtures" / "run-0.1.0-kill-worker.tar.xz"


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "run"


@pytest.fixture()
def victim(tmp_path: Path) -> Path:
    """A file outside the run that a link points at: it must keep its content."""
    path = tmp_path / "elsewhere" / "victim.txt"
    path.parent.mkdir()
    path.write_text("not yours\n")
    return path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "faultdrill.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("name", ["report.json", "report.md", "report.html"])
def test_check_does_not_write_through_a_planted_link(run: Path, victim: Path, name: str) -> None:
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(victim)
    done = _cli("check", str(run))
    assert victim.read_text() == "not yours\n", f"check wrote through {name}"
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{name} is a symbolic link" in done.stderr and "Traceback" not in done.stderr
    assert (run / name).is_symlink(), "the planted link is evidence: left in place"


def test_check_still_writes_its_reports(run: Path) -> None:
    done = _cli("check", str(run))
    assert done.returncode in (0, 1), done.stderr
    for name in ("report.json", "report.md", "report.html"):
        assert (run / name).is_file() and not (run / name).is_symlink()
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")], "a temporary was left"


def test_diff_json_and_junit_do_not_write_through_links(run: Path, victim: Path) -> None:
    for flag in ("--json", "--junit"):
        out = run.parent / f"out{flag}"
        out.symlink_to(victim)
        done = _cli("diff", str(run), str(run), flag, str(out))
        assert victim.read_text() == "not yours\n", f"diff {flag} wrote through a link"
        assert done.returncode == 2 and "symbolic link" in done.stderr, done.stderr


# --- replay -------------------------------------------------------------------------------


def _result(out: Path) -> ReplayResult:
    return ReplayResult(out, "dee", "bundle.tar.gz", Band(), baseline=["pass", "pass"])


@pytest.mark.parametrize("planted", ["replay.json", "baseline/dossier.json", "baseline"])
def test_replay_does_not_write_through_a_planted_link(
    run: Path, tmp_path: Path, victim: Path, planted: str
) -> None:
    out = tmp_path / "replayed"
    out.mkdir()
    elsewhere = victim.parent
    (elsewhere / "dossier.json").write_text("not yours\n")
    if planted == "baseline":
        (out / "baseline").symlink_to(elsewhere)
    else:
        (out / "baseline").mkdir()
        (out / planted).symlink_to(elsewhere / "dossier.json" if "dossier" in planted else victim)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        finish_replay(out, _result(out), {}, read_report(run))
    assert victim.read_text() == "not yours\n"
    assert (elsewhere / "dossier.json").read_text() == "not yours\n"
    assert sorted(p.name for p in elsewhere.iterdir()) == ["dossier.json", "victim.txt"]


def test_replay_refuses_a_source_run_whose_plan_is_a_link(
    run: Path, tmp_path: Path, victim: Path
) -> None:
    """Replay copies the source run's plan.yaml into the new run: a link there would copy
    any file of this machine into it."""
    (run / "plan.yaml").unlink()
    (run / "plan.yaml").symlink_to(victim)
    with pytest.raises(DrillError, match=r"plan\.yaml"):
        _open_source(run, tmp_path / "tmp", Trust(unsigned=True))


# --- the helper itself ------------------------------------------------------------------


def test_write_file_refuses_paths_outside_and_links_on_the_way(tmp_path: Path) -> None:
    base = tmp_path / "run"
    (base / "d").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (base / "l").symlink_to(outside)
    with pytest.raises(UnsafePathError, match="outside"):
        write_file(tmp_path / "x", "x", within=base)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        write_file(base / "l" / "x", "x", within=base)
    with pytest.raises(UnsafePathError):
        write_file(base / "d" / ".." / ".." / "x", "x", within=base)
    assert list(outside.iterdir()) == [] and not (tmp_path / "x").exists()
    write_file(base / "new" / "deeper" / "f", "ok", within=base)
    assert (base / "new" / "deeper" / "f").read_text() == "ok"
    assert issubclass(UnsafePathError, RunDirError)


def test_escape_and_read_bytes(tmp_path: Path) -> None:
    base = tmp_path / "run"
    (base / "a").mkdir(parents=True)
    (base / "a" / "f").write_text("x")
    (base / "l").symlink_to(base / "a")
    assert escape(base, base / "a" / "f") is None
    assert escape(base, base / "a" / "missing" / "deeper") is None
    assert "symbolic link" in str(escape(base, base / "l" / "f"))
    assert "outside" in str(escape(base, tmp_path / "other"))
    assert ".." in str(escape(base, f"{base}/a/../../x"))
    assert "absolute" in str(escape(base, "a/f"))
    assert escape(base, base) is not None and escape(base, base, allow_base=True) is None
    assert read_bytes(base / "a" / "f", within=base) == b"x"
    with pytest.raises(UnsafePathError):
        read_bytes(base / "l" / "f", within=base)
    os.symlink(base / "a" / "f", base / "a" / "g")
    with pytest.raises(UnsafePathError):
        read_bytes(base / "a" / "g", within=base)
    assert json.loads(json.dumps(str(base)))  # paths round-trip as text
