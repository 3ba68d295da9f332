"""faultdrill's errors: one root, a shallow tree.

::

    DrillError                  anything faultdrill reports to a user as a clean message
    ├── PlanError               a plan file is unreadable or invalid (file, field, rule, fix)
    ├── EnvironmentPrepError    the machine cannot host what the plan asks (not root, no
    │                           iptables, a spare node without the runtime...)
    ├── PlatformError           a platform could not launch, observe or stop the job
    ├── FaultError              a fault could not be injected or reverted
    │   └── NotOursError        an undo found, at the recorded place, something this run
    │                           did not make, and left it alone
    └── RunDirError             a run directory or bundle is missing or unreadable

Errors from libraries below (pydantic, yaml, subprocess, OSError) are translated at the
boundary with ``raise ... from exc``; the CLI prints ``str(error)`` and exits 2, never a
traceback.
"""

from __future__ import annotations


class DrillError(Exception):
    """Root of every error faultdrill raises on purpose."""


class PlanError(DrillError):
    """A plan file is invalid. The message names the file, the field path and the fix."""

    def __init__(self, file: str, problems: list[tuple[str, str]]) -> None:
        self.file = file
        self.problems = problems
        lines = [f"{file}: invalid plan ({len(problems)} problem{'s' * (len(problems) != 1)})"]
        lines += [f"  - {path}: {msg}" for path, msg in problems]
        super().__init__("\n".join(lines))


class EnvironmentPrepError(DrillError):
    """The environment is not prepared for the drill (distinct from a scheduling failure)."""


class PlatformError(DrillError):
    """A platform failed to launch, observe or stop a job."""


class FaultError(DrillError):
    """A fault could not be injected or reverted."""


class NotOursError(FaultError):
    """Raised by an undo that found, at the recorded place, something this run did not make
    (e.g. a namespace of the recorded name but another inode). Nothing was touched; the
    ledger closes the entry (what it recorded is gone) and keeps the message in
    ``Ledger.notes`` for the caller to report."""


class RunDirError(DrillError):
    """A run directory (or bundle) is missing, incomplete or unreadable."""
