"""A recorded run to attack: the fixture run (``tests/fixtures``, real torchrun) unpacked,
with the columnar step store the harness writes today made for each item, and
``faultdrill check`` run on it in this process with a time limit (a FIFO read would hang).
"""

from __future__ import annotations

import contextlib
import io
import signal
import tarfile
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from faultdrill.cli import main
from faultdrill.engine.watch import Watch
from faultdrill.timeline.store import StepStoreWriter

FIXTURE = Path(__file__).parent / "fixtures" / "run-0.1.0-kill-worker.tar.xz"
SC = "scenarios/kill-worker"
ITEMS = ("baseline", SC, "controls/ctl-stale-replica")


def unpack(into: Path, *, store: bool = True) -> Path:
    """The fixture run under ``into`` (its ``run`` directory), each item with a step store."""
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(into, filter="data")
    run = into / "run"
    if store:
        for item in ITEMS:
            events = run / item / "events"
            Watch(events, StepStoreWriter(events)).close()
    return run


class HungError(Exception):
    """``faultdrill check`` ran past its time limit."""


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def ring(_sig: int, _frame: FrameType | None) -> None:
        raise HungError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def check(run: Path, seconds: int = 60) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``faultdrill check RUN``; raises whatever it raised
    (a traceback is a failure) and :class:`HungError` past ``seconds``."""
    out, err = io.StringIO(), io.StringIO()
    with time_limit(seconds), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["check", str(run)])
    return rc, out.getvalue(), err.getvalue()
