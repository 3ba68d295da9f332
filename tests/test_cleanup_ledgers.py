"""``faultdrill cleanup``: without arguments it leaves alone the ledgers of drills still
running (the harness's pid and start time are in the index entry), unless ``--force``;
index entries of the older format (a path only) still work; an entry whose ledger file is
gone is removed; a damaged ledger is reported and the others are still cleaned up. The
changes recorded here are marker files whose undo removes them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from faultdrill import cli
from faultdrill.host import procfs
from faultdrill.ledger import OWNS, PATH, UNDOERS, Ledger, active_entries


def _undo_marker(data: dict[str, Any]) -> None:
    Path(data["path"]).unlink(missing_ok=True)


@pytest.fixture(autouse=True)
def _state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    state = tmp_path / "state"
    monkeypatch.setenv("FAULTDRILL_STATE_DIR", str(state))
    monkeypatch.setitem(UNDOERS, "test-marker", _undo_marker)
    monkeypatch.setitem(OWNS, "test-marker", {"path": PATH})
    return state


def _ledger(tmp_path: Path, name: str, *, activate: bool = True) -> tuple[Ledger, Path]:
    """A run's ledger with one applied change (a marker file), listed as active."""
    work = tmp_path / name
    work.mkdir()
    ledger = Ledger(work / "ledger.jsonl", run_id=f"run-{name}")
    if activate:
        ledger.activate()
    marker = work / "marker"
    eid = ledger.record("test-marker", {"path": str(marker)}, f"marker {name}")
    marker.touch()
    ledger.mark_applied(eid)
    return ledger, marker


def _index(state: Path, run_id: str) -> Path:
    return state / "active" / f"{run_id}.ledger"


def _cleanup(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    rc = cli.main(["cleanup", *args])
    out = capsys.readouterr()
    return rc, out.out + out.err


def _as_dead_harness(state: Path, run_id: str) -> None:
    """Rewrite the index entry as if written by a harness that has exited since."""
    idx = _index(state, run_id)
    raw = json.loads(idx.read_text())
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    raw["pid"] = int(done.stdout)
    raw["start_time"] = 1
    idx.write_text(json.dumps(raw) + "\n")


def test_activate_records_the_harness(tmp_path: Path, _state: Path) -> None:
    ledger, _ = _ledger(tmp_path, "a")
    raw = json.loads(_index(_state, "run-a").read_text())
    assert raw == {
        "ledger": str(ledger.path.resolve()),
        "pid": os.getpid(),
        "start_time": procfs.start_time(os.getpid()),
    }
    (entry,) = active_entries()
    assert entry.harness_alive() and entry.run_id == "run-a"


def test_cleanup_skips_a_running_drill_unless_forced(
    tmp_path: Path, _state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, marker = _ledger(tmp_path, "live")  # this test process is its (live) harness
    rc, text = _cleanup(capsys)
    assert rc == 0
    assert "skipped: its drill is still running" in text and f"pid {os.getpid()}" in text
    assert "--force" in text
    assert marker.exists() and _index(_state, "run-live").exists()
    rc, text = _cleanup(capsys, "--force")
    assert rc == 0 and "1 of 1 pending change(s) undone" in text
    assert not marker.exists() and not _index(_state, "run-live").exists()


def test_cleanup_reverts_the_drill_whose_harness_is_gone(
    tmp_path: Path, _state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, live = _ledger(tmp_path, "live")
    _, dead = _ledger(tmp_path, "dead")
    _as_dead_harness(_state, "run-dead")
    rc, text = _cleanup(capsys)
    assert rc == 0
    assert not dead.exists() and not _index(_state, "run-dead").exists()
    assert live.exists() and "skipped" in text


def test_explicit_paths_revert_even_a_running_drill(
    tmp_path: Path, _state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger, marker = _ledger(tmp_path, "live")
    rc, text = _cleanup(capsys, str(ledger.path.parent))
    assert rc == 0 and not marker.exists() and "1 of 1 pending change(s) undone" in text
    assert not _index(_state, "run-live").exists()


def test_index_entry_of_the_older_format_still_works(
    tmp_path: Path, _state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger, marker = _ledger(tmp_path, "old")
    _index(_state, "run-old").write_text(str(ledger.path.resolve()) + "\n")
    (entry,) = active_entries()
    assert entry.ledger == ledger.path.resolve() and not entry.harness_alive()
    rc, _ = _cleanup(capsys)
    assert rc == 0 and not marker.exists() and not _index(_state, "run-old").exists()


def test_index_entry_whose_ledger_file_is_gone_is_removed(
    tmp_path: Path, _state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger, _ = _ledger(tmp_path, "gone")
    _as_dead_harness(_state, "run-gone")
    ledger.path.unlink()
    rc, text = _cleanup(capsys)
    assert rc == 0
    assert "ledger file is gone" in text and "removed its index entry" in text
    assert not _index(_state, "run-gone").exists()
    rc, text = _cleanup(capsys)
    assert "nothing to clean up" in text


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ({"op": "record", "id": "x1", "data": {}}, "a record without 'kind' or 'data'"),
        (["not", "an", "object"], "not a JSON object"),
        ({"op": "record", "kind": "test-marker", "data": {}}, "no entry id"),
    ],
)
def test_a_damaged_ledger_does_not_stop_the_others(
    tmp_path: Path,
    _state: Path,
    capsys: pytest.CaptureFixture[str],
    line: Any,
    said: str,
) -> None:
    bad, bad_marker = _ledger(tmp_path, "bad")
    _, good_marker = _ledger(tmp_path, "good")
    if isinstance(line, dict):
        bad._append(line)  # signed: damaged as the harness could have written it
    else:
        with open(bad.path, "a") as f:
            f.write(json.dumps(line) + "\n")
    for run in ("run-bad", "run-good"):
        _as_dead_harness(_state, run)
    rc, text = _cleanup(capsys)
    assert rc == 1  # the damaged line could not be undone: said, and the exit says so
    assert said in text and "check it by hand" in text
    assert not good_marker.exists()
    assert not bad_marker.exists()  # the readable entries of the damaged ledger are undone


def test_unreadable_index_entry_is_reported(
    tmp_path: Path, _state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, marker = _ledger(tmp_path, "ok")
    _as_dead_harness(_state, "run-ok")
    (_state / "active" / "junk.ledger").write_text('{"pid": 3')
    rc, text = _cleanup(capsys)
    assert rc == 1 and "unreadable index entry" in text
    assert not marker.exists()


def test_a_ledger_without_a_signed_header_is_refused_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its run cannot be known (the directory's name, a ``run-processes`` record or an
    unsigned header are what anyone may write): nothing is done, and the way out is said."""
    path = tmp_path / "r1" / "ledger.jsonl"
    path.parent.mkdir()
    marker = tmp_path / "r1" / "marker"
    marker.touch()
    rec = {"op": "record", "id": "x1", "kind": "test-marker", "data": {"path": str(marker)}}
    path.write_text('[1, 2]\n"text"\n{"op": "run", "run_id": "r1"}\n' + json.dumps(rec) + "\n")
    rc, text = _cleanup(capsys, str(path))
    assert rc == 1 and marker.exists()
    assert "its run header is not signed by faultdrill on this machine" in text
    assert "on the machine that ran the drill" in text and "test-marker" in text
    assert path.read_text().count("\n") == 4, "cleanup wrote to an untrusted ledger"
