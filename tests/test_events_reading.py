"""The JSON-lines readers under the runbook, bundle and serve (``read_jsonl``,
``read_objects``) read only regular files, bounded: a FIFO someone put in a run directory
must not hang them, a link must not lead them out of the run, a huge line is never held."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from faultdrill.events import read_objects


def _within(seconds: float, fn: object) -> list[object]:
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(list(fn())), daemon=True)  # type: ignore[operator]
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the reader blocked"
    return out[0]  # type: ignore[return-value]


def test_a_fifo_yields_nothing_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "ledger.jsonl"
    os.mkfifo(fifo)
    assert _within(5, lambda: read_objects(fifo)) == []


def test_a_link_is_not_followed(tmp_path: Path) -> None:
    real = tmp_path / "outside.jsonl"
    real.write_text(json.dumps({"op": "record"}) + "\n")
    link = tmp_path / "ledger.jsonl"
    link.symlink_to(real)
    assert list(read_objects(real)) == [{"op": "record"}]
    assert list(read_objects(link)) == []


def test_an_overlong_line_is_skipped_and_a_torn_last_line_dropped(tmp_path: Path) -> None:
    f = tmp_path / "ledger.jsonl"
    huge = json.dumps({"pad": "x" * (3 << 20)})
    f.write_text(
        json.dumps({"n": 1}) + "\n" + huge + "\n" + json.dumps({"n": 2}) + "\n" + '{"n": 3'
    )
    assert list(read_objects(f)) == [{"n": 1}, {"n": 2}]
