"""One module knows the run directory's layout (issue 10, item 6)."""

from __future__ import annotations

import re
from pathlib import Path

from faultdrill import rundir

SRC = Path(__file__).resolve().parent.parent / "src" / "faultdrill"
#: A path built from a layout name anywhere but rundir.py (``x / "events"``, ...).
_SPELLED = re.compile(
    r'/ "(events|logs|baseline|scenarios|controls|ledger\.jsonl|dossier\.json|plan\.yaml|'
    r'report\.json|report\.md|report\.html)"'
)


def test_no_module_but_rundir_spells_the_layout() -> None:
    found = [
        f"{path.relative_to(SRC)}:{n}: {line.strip()}"
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "rundir.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if _SPELLED.search(line)
    ]
    assert not found, "use faultdrill.rundir:\n" + "\n".join(found)


def test_items_lists_baseline_then_scenarios_and_controls_never_a_link(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for kind, item_id in [("baseline", "baseline"), ("scenario", "b"), ("scenario", "a")]:
        rundir.item_dir(run, kind, item_id).mkdir(parents=True)
    rundir.item_dir(run, "control", "ctl").mkdir(parents=True)
    (run / "scenarios" / "elsewhere").symlink_to(tmp_path)  # a planted link is no item
    (run / "scenarios" / "note.txt").write_text("")
    got = [(kind, item_id, d.relative_to(run).as_posix()) for kind, item_id, d in rundir.items(run)]
    assert got == [
        ("baseline", "baseline", "baseline"),
        ("scenario", "a", "scenarios/a"),
        ("scenario", "b", "scenarios/b"),
        ("control", "ctl", "controls/ctl"),
    ]
    assert rundir.dossier_path(run) == run / "baseline" / "dossier.json"
    assert rundir.events_dir(run / "baseline") == run / "baseline" / "events"
