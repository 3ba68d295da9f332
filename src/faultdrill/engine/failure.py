"""Why a job failed, in the words a person needs: the command, the exit status, the last
lines the worker wrote, and where the whole log is.

The launcher's logs (``<item>/logs/*.log``: one per node, the launcher's own lines and
its workers' output together) are read after the job ended failed. torchrun says which
worker failed first (``failed (exitcode: N) local_rank: L (pid: P)``); the lines the
worker wrote just before, that are not the launcher's own log records, are its error
output. The facts are recorded as a ``harness``/``job_failed`` event, so that a recorded
run keeps them (``ItemResult.failure``) and the console can say them.
"""

from __future__ import annotations

import re
import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from faultdrill import rundir

__all__ = ["TAIL_LINES", "failure_facts"]

#: How many of the worker's last output lines are kept.
TAIL_LINES = 20
#: Most bytes of a log read (its end): a failing job's log may be large.
_READ_BYTES = 1 << 20

# A record of torch's own logging: "E1201 10:40:08.446000 28590 torch/...py:1002] ...".
_TORCH_RECORD = re.compile(r"^[IWEFD]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] ")
_FAILED = re.compile(
    r"^E(\d{4} \d\d:\d\d:\d\d\.\d+) .*\] failed \(exitcode: (-?\d+)\) local_rank: (\d+) "
    r"\(pid: (\d+)\)"
)


def failure_facts(work: Path, argv: Sequence[str], run_dir: Path | None = None) -> dict[str, Any]:
    """The facts of a failed job of the item in ``work`` whose workers ran ``argv`` (after
    the interpreter): ``command``, ``exit_status`` (None when no worker failure was
    logged), ``signal`` (its name when the worker was killed by one), ``node``,
    ``local_rank``, ``worker_failures`` (how many were logged), ``error_tail`` (the worker's
    last output lines before it failed) and ``log`` (the log holding them, relative to
    ``run_dir`` when given)."""
    facts: dict[str, Any] = {
        "command": shlex.join([sys.executable, *argv]),
        "exit_status": None,
        "signal": None,
        "node": None,
        "local_rank": None,
        "worker_failures": 0,
        "error_tail": [],
        "log": None,
    }
    first: tuple[str, Path, list[str], int] | None = None
    logs = sorted(rundir.logs_dir(work).glob("*.log"))
    for log in logs:
        lines = _tail_of(log)
        for i, line in enumerate(lines):
            m = _FAILED.match(line)
            if m is None:
                continue
            facts["worker_failures"] += 1
            if first is None or m.group(1) < first[0]:
                first = (m.group(1), log, lines, i)
    if first is None:
        if logs:
            facts["log"] = _shown_path(logs[0], run_dir)
            facts["error_tail"] = [ln for ln in _tail_of(logs[0]) if ln.strip()][-TAIL_LINES:]
        return facts
    _, log, lines, at = first
    m = _FAILED.match(lines[at])
    assert m is not None
    status = int(m.group(2))
    facts.update(
        exit_status=status,
        signal=_signal_name(-status) if status < 0 else None,
        node=log.stem.removeprefix("agent-"),
        local_rank=int(m.group(3)),
        error_tail=_worker_output_before(lines, at),
        log=_shown_path(log, run_dir),
    )
    return facts


def _tail_of(log: Path) -> list[str]:
    try:
        with open(log, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - _READ_BYTES))
            data = f.read()
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()


def _worker_output_before(lines: list[str], at: int) -> list[str]:
    """The lines just before ``lines[at]`` that are not torch's own log records."""
    out: list[str] = []
    i = at - 1
    while i >= 0 and not _TORCH_RECORD.match(lines[i]):
        out.append(lines[i])
        i -= 1
    out.reverse()
    return [ln for ln in out if ln.strip()][-TAIL_LINES:]


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _shown_path(log: Path, run_dir: Path | None) -> str:
    if run_dir is not None and log.is_relative_to(run_dir):
        return str(log.relative_to(run_dir))
    return str(log)


def describe(facts: dict[str, Any]) -> list[str]:
    """The facts as lines for a console: what failed, how, its last words, where the log is."""
    status = facts.get("exit_status")
    if status is None:
        head = "the job failed; no worker failure was logged"
    elif facts.get("signal"):
        head = f"a worker was killed by {facts['signal']} (exit status {status})"
    else:
        head = f"a worker exited with status {status}"
    where = f" (local rank {facts['local_rank']} on {facts['node']})" if facts.get("node") else ""
    lines = [head + where, f"command: {facts.get('command')}"]
    tail = facts.get("error_tail") or []
    if tail:
        lines.append("last lines of its error output:")
        lines += [f"  {ln}" for ln in tail]
    if facts.get("log"):
        lines.append(f"full log: {facts['log']}")
    return lines
