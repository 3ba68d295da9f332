"""``faultdrill check`` on a few hundred damaged and hostile copies of a recorded run
(issue 21): every one ends with exit 0, 1 or 2, without a traceback, within its time limit
(a FIFO or ``/dev/zero`` would hang or exhaust a reader that trusted them); an error (2)
is one message naming the file; and a run that still comes out "overall OK" was judged
from its evidence of record (the JSON lines, the step store aside) to the very verdicts of
the untouched run.

The corpus and the driver are :mod:`tests.run_fuzz` (one forked process per case).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.run_fuzz import corpus, prepare

ROOT = Path(__file__).resolve().parents[1]


#: The default run's share: the corpus's first cases, which try every kind of damage
#: (``test_the_default_share_tries_every_kind_of_damage``); the whole corpus: the slow set.
DEFAULT_CASES = 100


def _kinds(names: list[str]) -> set[str]:
    return {name.split(":")[0] for name in names}


def _drive(base: Path, out: Path, parts: int, n: int) -> list[dict[str, Any]]:
    """The first ``n`` cases of the corpus, in ``parts`` driver processes side by side."""
    size = -(-n // parts)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.run_fuzz", str(base), str(out), str(a), str(size)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for a in range(0, n, size)
    ]
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=900)
        assert proc.returncode == 0, stderr[-3000:]
        results += [json.loads(line) for line in stdout.splitlines()]
    assert len(results) == n
    return results


def test_the_default_share_tries_every_kind_of_damage() -> None:
    cases = [m.name for m in corpus()]
    assert _kinds(cases[:DEFAULT_CASES]) == _kinds(cases)


def test_no_damage_gets_a_traceback_a_hang_or_a_pass_it_did_not_earn(tmp_path: Path) -> None:
    """The corpus's first :data:`DEFAULT_CASES` cases (every kind of damage)."""
    fuzz_and_judge(tmp_path, DEFAULT_CASES)


@pytest.mark.slow
def test_the_whole_corpus_gets_no_traceback_no_hang_no_unearned_pass(tmp_path: Path) -> None:
    fuzz_and_judge(tmp_path, len(corpus()))


def fuzz_and_judge(tmp_path: Path, n: int) -> None:
    """The first ``n`` cases, each damaging a copy of one recorded run, through
    ``faultdrill check``: no traceback, no hang, one clear message, no unearned pass."""
    base = prepare(tmp_path / "base")
    [untouched] = _drive_untouched(base, tmp_path)
    results = _drive(base, tmp_path / "out", parts=2, n=n)
    problems = []
    for r in results:
        if r["hang"] or r["rc"] not in (0, 1, 2) or "Traceback" in r["stderr"]:
            problems.append(f"{r['name']}: rc {r['rc']}, hang {r['hang']}: {r['stderr'][-800:]}")
        elif r["rc"] == 2 and not (
            r["stderr"].startswith("faultdrill: ") and r["stderr"].count("\n") == 1
        ):
            problems.append(f"{r['name']}: not one clear message: {r['stderr'][-800:]}")
        elif r["rc"] == 0 and not (r["ok"]["checked"] == r["ok"]["of_record"] == untouched):
            problems.append(f"{r['name']}: overall OK on other verdicts: {r['ok']}")
    assert not problems, "\n".join(problems)
    # Not vacuous: every outcome is reached, and every kind of damage was tried.
    assert Counter(r["rc"] for r in results).keys() == {0, 1, 2}
    kinds = {r["name"].split(":")[0] for r in results}
    assert {"line-digit", "line-field", "file-link-zero", "file-fifo", "store-flip"} <= kinds
    assert kinds == _kinds([m.name for m in corpus()])


def _drive_untouched(base: Path, tmp_path: Path) -> list[dict[str, Any]]:
    """The verdicts of the untouched run, as the driver reports them."""
    from faultdrill.cli import main
    from tests.run_fuzz import _signature

    copy = tmp_path / "untouched"
    subprocess.run(["cp", "-a", str(base), str(copy)], check=True)
    assert main(["check", str(copy)]) == 0
    return [json.loads(json.dumps(_signature(copy)))]  # as the driver reports it: JSON
