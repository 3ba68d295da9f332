"""The runbook and the bundle's fault scripts read an item's ledger as the engine wrote it."""

from __future__ import annotations

from pathlib import Path

from faultdrill import rundir
from faultdrill.ledger import Ledger
from faultdrill.report.runbook import ledger_changes


def test_ledger_changes_reads_a_real_ledger_with_its_run_header(tmp_path: Path) -> None:
    item = tmp_path / "scenarios" / "kill-worker"
    item.mkdir(parents=True)
    ledger = Ledger(rundir.ledger_path(item), run_id="t-kill-worker-0123abcd")
    kept = ledger.record("netns", {"name": "fd0123-n1"}, "namespace fd0123-n1")
    ledger.mark_applied(kept)
    signal = ledger.record("signal", {"pid": 4242, "signal": "SIGKILL"}, "signal: SIGKILL pid 4242")
    ledger.mark_applied(signal)
    ledger.revert(signal)
    ledger.record("link-down", {"ns": "fd0123-n1", "dev": "eth0"}, "link eth0 down")
    (rundir.ledger_path(item)).open("a").write('{"op": "record", "id": "torn"')  # crash
    got = [(c["kind"], c["label"], c["applied"], c["reverted"]) for c in ledger_changes(item)]
    assert got == [
        ("netns", "namespace fd0123-n1", True, False),
        ("signal", "signal: SIGKILL pid 4242", True, True),
        ("link-down", "link eth0 down", False, False),
    ]
