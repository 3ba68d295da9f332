"""The files of a recorded run that the judge reads, read as untrusted input.

``faultdrill check RUN`` runs as root on a directory someone else may have written. What it
judges must be the run's own evidence: every file it reads lies inside the run directory
with no symbolic link on the way, is a regular file (a FIFO would hang the read, a device
never end), and is bounded in size. :func:`run_json` reads the run's small JSON files
(``plan.json``, ``selection.json``, ``skipped.json``, the baseline's ``dossier.json``);
:func:`refuse_outside` vets an item's events directory before its timeline is loaded (the
reader then opens each events file again without following a link,
:func:`~faultdrill.timeline.reader.open_regular`). Both raise
:class:`~faultdrill.errors.RunDirError` naming the file and the fix.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from faultdrill import rundir
from faultdrill.errors import RunDirError
from faultdrill.safepath import UnsafePathError, escape, read_bytes
from faultdrill.timeline.store import STORE_DIR

__all__ = ["MAX_EVIDENCE_FILE", "MAX_RUN_JSON", "refuse_outside", "run_json"]

#: The largest run file read as JSON (bytes): a plan of thousands of scenarios is a few MiB.
MAX_RUN_JSON = 32 << 20
#: The largest events or step-store file judged (bytes): one rank's probe file of 10 M
#: steps is about 2 GiB; a file far larger (a sparse file of zeros) is not a recording.
MAX_EVIDENCE_FILE = 64 << 30

_FIX = (
    "faultdrill check judges only regular files inside the run directory and follows no "
    "link; put the recorded file itself there (unpack the run's bundle again) and run "
    "the command again"
)


def run_json(run_dir: Path, path: Path) -> Any:
    """The JSON value in ``path`` (a file of ``run_dir``), or None when it is absent.
    RunDirError when it is a link, not a regular file, larger than :data:`MAX_RUN_JSON`,
    or not JSON (too deeply nested included)."""
    base = Path(os.path.abspath(run_dir))
    try:
        data = read_bytes(Path(os.path.abspath(path)), within=base, limit=MAX_RUN_JSON)
    except FileNotFoundError:
        return None
    except UnsafePathError as exc:
        raise RunDirError(f"{exc}; {_FIX}") from exc
    except OSError as exc:
        raise RunDirError(f"{path}: unreadable ({exc.strerror}); {_FIX}") from exc
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested too deep
        raise RunDirError(
            f"{path}: unreadable ({type(exc).__name__}: {str(exc)[:200]}); restore it from "
            "the run's bundle"
        ) from exc


def refuse_outside(run_dir: Path, item: Path) -> None:
    """RunDirError unless the events of ``item`` (a directory of ``run_dir``) can be judged
    as the run's own: no symbolic link from the run directory down to the events directory
    (the item's directory, ``baseline/``, ``scenarios/``), and inside it, in its step store
    too, no link, nothing but regular files and directories (a FIFO, a device, a socket)
    and no file over :data:`MAX_EVIDENCE_FILE`. Absent directories pass: the item was not
    run."""
    base = Path(os.path.abspath(run_dir))
    events = Path(os.path.abspath(rundir.events_dir(item)))
    why = escape(base, events)
    if why is not None:
        raise RunDirError(f"{why}: not judged; {_FIX}")
    for folder in (events, events / STORE_DIR, events / STORE_DIR / "lines"):
        why = escape(base, folder)
        if why is not None:
            raise RunDirError(f"{why}: not judged; {_FIX}")
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            raise RunDirError(f"{folder}: unreadable ({exc.strerror}); {_FIX}") from exc
        for entry in entries:
            if entry.is_symlink():
                target = os.readlink(entry.path)
                raise RunDirError(f"{entry.path} is a symbolic link (to {target}); {_FIX}")
            if not (entry.is_file(follow_symlinks=False) or entry.is_dir(follow_symlinks=False)):
                raise RunDirError(
                    f"{entry.path} is not a regular file (a FIFO, a device or a socket); {_FIX}"
                )
            size = entry.stat(follow_symlinks=False).st_size
            if entry.is_file(follow_symlinks=False) and size > MAX_EVIDENCE_FILE:
                raise RunDirError(
                    f"{entry.path} is {size} bytes, more than any recording holds "
                    f"({MAX_EVIDENCE_FILE}); not judged: restore it from the run's bundle"
                )
