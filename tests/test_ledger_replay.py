"""A signed 'record' line replayed after the entry's close must not re-arm its undo."""

from pathlib import Path

import pytest

import faultdrill.platforms  # noqa: F401  (registers the undo kinds)
from faultdrill.ledger import OWNS, UNDOERS, Ledger, undoer


def test_replayed_record_after_revert_is_not_undone_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAULTDRILL_STATE_DIR", str(tmp_path / "state"))
    calls: list[dict[str, object]] = []
    undoer("review-cleanup-replay", owns={})(calls.append)
    try:
        path = tmp_path / "run" / "ledger.jsonl"
        ledger = Ledger(path, run_id="review-cleanup-run")
        eid = ledger.record("review-cleanup-replay", {"x": 1})
        ledger.revert(eid)
        lines = path.read_text().splitlines()
        replay = next(line for line in lines if '"op":"record"' in line)
        path.write_text("\n".join([*lines, replay]) + "\n")
        again = Ledger(path, run_id="review-cleanup-run")
        assert again.pending() == []
        assert any("recorded again after its close" in p for p in again.problems)
        again.revert_all()
        assert len(calls) == 1
    finally:
        UNDOERS.pop("review-cleanup-replay", None)
        OWNS.pop("review-cleanup-replay", None)
